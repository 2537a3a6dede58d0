//! Frame builders: per-flow header templates, checksums, and the pcap record writer.
//!
//! Every direction of every conversation is a [`Flow`] that holds a prebuilt header template
//! (Ethernet, optional 802.1Q tag, IPv4 or IPv6, and the fixed part of the TCP/UDP/ICMP header)
//! plus the partial ones-complement sums of its constant parts. Emitting a packet
//! ([`Writer::emit`])
//! appends a pcap record header and the template to the output buffer, appends the payload
//! straight from the payload pools, then patches the variable fields (lengths, IPv4 ID, TCP
//! sequence numbers and flags) and the checksums in place. The only per-byte work is one copy
//! of the payload and one checksum pass over it, summed eight bytes at a time.

use std::net::IpAddr;

use crate::payload::{append_stream, Content, Pools};

/// TCP FIN flag.
pub(crate) const FIN: u8 = 0x01;
/// TCP SYN flag.
pub(crate) const SYN: u8 = 0x02;
/// TCP RST flag.
pub(crate) const RST: u8 = 0x04;
/// TCP PSH flag.
pub(crate) const PSH: u8 = 0x08;
/// TCP ACK flag.
pub(crate) const ACK: u8 = 0x10;

/// IP protocol numbers.
pub(crate) const PROTO_ICMP: u8 = 1;
pub(crate) const PROTO_TCP: u8 = 6;
pub(crate) const PROTO_UDP: u8 = 17;
pub(crate) const PROTO_ICMPV6: u8 = 58;

/// DNS flag bits carried in [`Spec::flags`] for [`Kind::Dns`] packets.
pub(crate) const DNS_RESPONSE: u8 = 1;
pub(crate) const DNS_AAAA: u8 = 2;
pub(crate) const DNS_NXDOMAIN: u8 = 4;

/// RTP marker bit carried in [`Spec::flags`] for [`Kind::Rtp`] packets.
pub(crate) const RTP_MARKER: u8 = 1;

/// TCP options on SYN and SYN-ACK: MSS (patched per flow), NOP, window scale 7.
const SYN_OPTS_LEN: usize = 8;

/// Largest TCP/UDP/ICMP header prefix kept in a template.
const MAX_L4_TEMPLATE: usize = 20;

/// Ones-complement sum folded to 16 bits.
#[inline]
pub(crate) fn fold(mut s: u64) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Ones-complement sum of `data` as big-endian 16-bit words (odd tail padded with zero),
/// folded to 16 bits. Reads eight bytes at a time in native little-endian order and swaps the
/// folded result, which gives the same sum (RFC 1071, byte-order independence).
#[inline]
pub(crate) fn sum_words(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        acc += (w & 0xffff_ffff) + (w >> 32);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        let mut t = [0u8; 8];
        t[..rem.len()].copy_from_slice(rem);
        let w = u64::from_le_bytes(t);
        acc += (w & 0xffff_ffff) + (w >> 32);
    }
    fold(acc).swap_bytes()
}

/// The final checksum field value for a sum of partial sums.
#[inline]
pub(crate) fn finish(sum: u64) -> u16 {
    !fold(sum)
}

/// One end of a conversation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Endpoint {
    pub(crate) mac: [u8; 6],
    pub(crate) ip: IpAddr,
    pub(crate) port: u16,
}

/// The truth key of a flow: direction-specific 5-tuple plus VLAN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FlowKey {
    pub(crate) vlan: Option<u16>,
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) proto: u8,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
}

/// What a flow's packets carry after the IP header.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// TCP; the payload is the stream at [`Spec::off`].
    Tcp { content: Content, mss: u16 },
    /// UDP with an RTP header; [`Spec::seq`] is the RTP sequence number, [`Spec::ack`] the RTP
    /// timestamp, [`Spec::len`] the media bytes.
    Rtp { pt: u8, ssrc: u32, content: Content },
    /// UDP DNS; [`Spec::seq`] is the transaction ID, [`Spec::off`] the name index,
    /// [`Spec::flags`] the `DNS_*` bits.
    Dns,
    /// ICMP echo; [`Spec::flags`] is the type (8 request, 0 reply), [`Spec::seq`] is
    /// `id << 16 | sequence`, [`Spec::len`] the data bytes.
    IcmpEcho,
    /// ICMPv6 echo (types 128/129, as [`Kind::IcmpEcho`]) or neighbour discovery (135
    /// solicitation for `target`, 136 advertisement of the source address).
    Icmp6 { target: [u8; 16] },
    /// An ARP frame (1 request, 2 reply); not an IP packet, so not in the truth flows.
    Arp { op: u16 },
}

/// Per-flow counters for the truth file.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stats {
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
    pub(crate) first_ns: u64,
    pub(crate) last_ns: u64,
}

/// Everything needed to build a flow's template.
#[derive(Debug, Clone)]
pub(crate) struct FlowDef {
    /// VLAN ID and priority code point, when tagged.
    pub(crate) vlan: Option<(u16, u8)>,
    pub(crate) src: Endpoint,
    pub(crate) dst: Endpoint,
    pub(crate) proto: u8,
    pub(crate) dscp: u8,
    pub(crate) ttl: u8,
    pub(crate) kind: Kind,
    pub(crate) salt: u64,
}

/// One direction of one conversation: template, checksum partials, counters.
#[derive(Debug)]
pub(crate) struct Flow {
    pub(crate) key: FlowKey,
    pub(crate) dscp: u8,
    pub(crate) kind: Kind,
    pub(crate) salt: u64,
    pub(crate) stats: Stats,
    hdr: [u8; 18 + 40 + MAX_L4_TEMPLATE],
    l2: u8,
    l3: u8,
    /// IPv4: folded sum of the header template (length, ID and checksum zero).
    ip_sum: u16,
    /// Folded pseudo-header sum without the length (addresses and protocol).
    pseudo: u16,
    ip_id: u16,
    src_mac: [u8; 6],
}

impl Flow {
    /// Builds a flow's templates. `ip_id` seeds the IPv4 identification counter.
    pub(crate) fn new(def: FlowDef, ip_id: u16) -> Flow {
        let mut hdr = [0u8; 18 + 40 + MAX_L4_TEMPLATE];
        let is_arp = matches!(def.kind, Kind::Arp { .. });
        // Ethernet.
        let dst_mac = match (&def.kind, def.dst.ip) {
            (Kind::Arp { op: 1 }, _) => [0xff; 6],
            (Kind::Icmp6 { target }, _) if target != &[0u8; 16] => {
                // Neighbour solicitation: solicited-node multicast MAC 33:33:ff:xx:xx:xx.
                [0x33, 0x33, 0xff, target[13], target[14], target[15]]
            }
            _ => def.dst.mac,
        };
        hdr[0..6].copy_from_slice(&dst_mac);
        hdr[6..12].copy_from_slice(&def.src.mac);
        let mut l2 = 12;
        let vlan = def.vlan.map(|(vid, pcp)| {
            hdr[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
            let tci = (u16::from(pcp) << 13) | (vid & 0x0fff);
            hdr[14..16].copy_from_slice(&tci.to_be_bytes());
            l2 = 16;
            vid
        });
        let ethertype: u16 = match (is_arp, def.src.ip) {
            (true, _) => 0x0806,
            (false, IpAddr::V4(_)) => 0x0800,
            (false, IpAddr::V6(_)) => 0x86dd,
        };
        hdr[l2..l2 + 2].copy_from_slice(&ethertype.to_be_bytes());
        l2 += 2;
        let mut ip_sum = 0;
        let mut pseudo = 0;
        let l3 = match (def.src.ip, def.dst.ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) if is_arp => {
                let Kind::Arp { op } = def.kind else {
                    unreachable!()
                };
                let a = &mut hdr[l2..l2 + 28];
                a[0..2].copy_from_slice(&1u16.to_be_bytes()); // Ethernet
                a[2..4].copy_from_slice(&0x0800u16.to_be_bytes());
                a[4] = 6;
                a[5] = 4;
                a[6..8].copy_from_slice(&op.to_be_bytes());
                a[8..14].copy_from_slice(&def.src.mac);
                a[14..18].copy_from_slice(&s.octets());
                if op == 2 {
                    a[18..24].copy_from_slice(&def.dst.mac);
                }
                a[24..28].copy_from_slice(&d.octets());
                28
            }
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let ip = &mut hdr[l2..l2 + 20];
                ip[0] = 0x45;
                ip[1] = def.dscp << 2;
                // Don't-fragment on TCP, as Linux sets it with path-MTU discovery.
                if def.proto == PROTO_TCP {
                    ip[6] = 0x40;
                }
                ip[8] = def.ttl;
                ip[9] = def.proto;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                ip_sum = sum_words(ip);
                let mut ph = [0u8; 12];
                ph[0..4].copy_from_slice(&s.octets());
                ph[4..8].copy_from_slice(&d.octets());
                ph[9] = def.proto;
                pseudo = sum_words(&ph);
                20
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let ip = &mut hdr[l2..l2 + 40];
                let vtf: u32 =
                    (6 << 28) | (u32::from(def.dscp) << 22) | (def.salt as u32 & 0xf_ffff);
                ip[0..4].copy_from_slice(&vtf.to_be_bytes());
                ip[6] = def.proto;
                ip[7] = def.ttl;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
                let mut ph = [0u8; 40];
                ph[0..16].copy_from_slice(&s.octets());
                ph[16..32].copy_from_slice(&d.octets());
                ph[39] = def.proto;
                pseudo = sum_words(&ph);
                40
            }
            _ => panic!("flow with mixed address families"),
        };
        // Fixed part of the transport header: the ports.
        if def.proto == PROTO_TCP || def.proto == PROTO_UDP {
            let t = &mut hdr[l2 + l3..l2 + l3 + 4];
            t[0..2].copy_from_slice(&def.src.port.to_be_bytes());
            t[2..4].copy_from_slice(&def.dst.port.to_be_bytes());
        }
        let key = FlowKey {
            vlan,
            src: def.src.ip,
            dst: def.dst.ip,
            proto: if is_arp { 0 } else { def.proto },
            sport: def.src.port,
            dport: def.dst.port,
        };
        Flow {
            key,
            dscp: def.dscp,
            kind: def.kind,
            salt: def.salt,
            stats: Stats::default(),
            hdr,
            l2: l2 as u8,
            l3: l3 as u8,
            ip_sum,
            pseudo,
            ip_id,
            src_mac: def.src.mac,
        }
    }

    /// True for IP flows (everything but ARP).
    pub(crate) fn is_ip(&self) -> bool {
        !matches!(self.kind, Kind::Arp { .. })
    }

    /// The wire length of the frame `s` would produce.
    pub(crate) fn frame_len(&self, s: &Spec) -> usize {
        let base = usize::from(self.l2) + usize::from(self.l3);
        base + match &self.kind {
            Kind::Tcp { .. } => {
                20 + if s.flags & SYN != 0 { SYN_OPTS_LEN } else { 0 } + s.len as usize
            }
            Kind::Rtp { .. } => 8 + 12 + s.len as usize,
            Kind::Dns => 8 + dns_len(s),
            Kind::IcmpEcho => 8 + s.len as usize,
            Kind::Icmp6 { .. } => match s.flags {
                135 | 136 => 32,
                _ => 8 + s.len as usize,
            },
            Kind::Arp { .. } => 0,
        }
    }
}

/// One packet to emit: a flow plus the fields that vary per packet. Field meanings depend on
/// the flow's [`Kind`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Spec {
    pub(crate) ts: u64,
    /// TCP stream offset of the payload (or a kind-specific value).
    pub(crate) off: u64,
    pub(crate) flow: u32,
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    /// Payload bytes after the transport (or RTP) header.
    pub(crate) len: u32,
    pub(crate) win: u16,
    pub(crate) flags: u8,
}

/// DNS names the office resolves (documentation and `.example` names only).
pub(crate) const DNS_NAMES: &[&str] = &[
    "www.example.com",
    "intranet.corp.example",
    "git.corp.example",
    "mail.corp.example",
    "wiki.corp.example",
    "api.example.net",
    "cdn.example.org",
    "login.example.com",
    "update.example.net",
    "time.example.org",
    "chat.example.com",
    "files.corp.example",
    "registry.corp.example",
    "vpn.corp.example",
    "tickets.corp.example",
    "static.example.org",
];

fn dns_qname_len(name: &str) -> usize {
    name.len() + 2
}

/// DNS message length (no UDP header) for a spec.
fn dns_len(s: &Spec) -> usize {
    let name = DNS_NAMES[s.off as usize % DNS_NAMES.len()];
    let q = 12 + dns_qname_len(name) + 4;
    if s.flags & DNS_RESPONSE != 0 && s.flags & DNS_NXDOMAIN == 0 {
        let rdlen = if s.flags & DNS_AAAA != 0 { 16 } else { 4 };
        q + 2 + 2 + 2 + 4 + 2 + rdlen
    } else {
        q
    }
}

fn dns_message(buf: &mut Vec<u8>, s: &Spec) {
    let name = DNS_NAMES[s.off as usize % DNS_NAMES.len()];
    let resp = s.flags & DNS_RESPONSE != 0;
    let nx = s.flags & DNS_NXDOMAIN != 0;
    let aaaa = s.flags & DNS_AAAA != 0;
    let flags: u16 = match (resp, nx) {
        (false, _) => 0x0100,
        (true, false) => 0x8180,
        (true, true) => 0x8183,
    };
    let ancount: u16 = u16::from(resp && !nx);
    buf.extend_from_slice(&(s.seq as u16).to_be_bytes());
    buf.extend_from_slice(&flags.to_be_bytes());
    buf.extend_from_slice(&1u16.to_be_bytes());
    buf.extend_from_slice(&ancount.to_be_bytes());
    buf.extend_from_slice(&[0, 0, 0, 0]);
    for label in name.split('.') {
        buf.push(label.len() as u8);
        buf.extend_from_slice(label.as_bytes());
    }
    buf.push(0);
    let qtype: u16 = if aaaa { 28 } else { 1 };
    buf.extend_from_slice(&qtype.to_be_bytes());
    buf.extend_from_slice(&1u16.to_be_bytes());
    if ancount == 1 {
        buf.extend_from_slice(&0xc00cu16.to_be_bytes());
        buf.extend_from_slice(&qtype.to_be_bytes());
        buf.extend_from_slice(&1u16.to_be_bytes());
        let h = crate::rng::mix64(s.off);
        buf.extend_from_slice(&(60 + (h % 3540) as u32).to_be_bytes());
        if aaaa {
            buf.extend_from_slice(&16u16.to_be_bytes());
            buf.extend_from_slice(&[0xfd, 0, 0, 0x50, 0, 0x64, 0, 0, 0, 0, 0, 0, 0, 0]);
            buf.extend_from_slice(&[0, 10 + (h >> 8) as u8 % 200]);
        } else {
            buf.extend_from_slice(&4u16.to_be_bytes());
            if s.off & 1 == 0 {
                buf.extend_from_slice(&[10, 50, 100, 10 + (h >> 8) as u8 % 40]);
            } else {
                buf.extend_from_slice(&[198, 51, 100, 10 + (h >> 8) as u8 % 200]);
            }
        }
    }
}

/// Appends echo data like Linux ping: an 8-byte timestamp then an incrementing pattern.
fn echo_data(buf: &mut Vec<u8>, ts: u64, len: usize) {
    let stamp = ((ts / 1_000_000_000) << 32) | ((ts % 1_000_000_000) / 1000);
    let start = buf.len();
    buf.extend_from_slice(&stamp.to_le_bytes()[..8.min(len)]);
    for i in 8..len {
        buf.push(i as u8);
    }
    debug_assert_eq!(buf.len() - start, len);
}

/// Accumulates pcap records in a large buffer.
#[derive(Debug)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
}

impl Writer {
    pub(crate) fn new(capacity: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(capacity),
            packets: 0,
            bytes: 0,
        }
    }

    /// Appends the pcap record (16-byte header, same layout as
    /// `capsule_pcap::write::pcap_record`) of packet `s` of flow `f`, and counts it.
    pub(crate) fn emit(&mut self, f: &mut Flow, s: &Spec, pools: &Pools) {
        let buf = &mut self.buf;
        let rec = buf.len();
        let secs = (s.ts / 1_000_000_000) as u32;
        let nanos = (s.ts % 1_000_000_000) as u32;
        buf.extend_from_slice(&secs.to_le_bytes());
        buf.extend_from_slice(&nanos.to_le_bytes());
        buf.extend_from_slice(&[0u8; 8]); // lengths, patched below
        let fstart = buf.len();
        let l2 = usize::from(f.l2);
        let l3 = usize::from(f.l3);
        let l4 = fstart + l2 + l3;
        match &f.kind {
            Kind::Tcp { content, mss } => {
                buf.extend_from_slice(&f.hdr[..l2 + l3 + 20]);
                let syn = s.flags & SYN != 0;
                if syn {
                    let m = mss.to_be_bytes();
                    buf.extend_from_slice(&[2, 4, m[0], m[1], 1, 3, 3, 7]);
                }
                if s.len > 0 {
                    append_stream(buf, pools, content, f.salt, s.off, s.len as usize);
                }
                let t = &mut buf[l4..];
                t[4..8].copy_from_slice(&s.seq.to_be_bytes());
                t[8..12].copy_from_slice(&s.ack.to_be_bytes());
                t[12] = if syn { 7 << 4 } else { 5 << 4 };
                t[13] = s.flags;
                t[14..16].copy_from_slice(&s.win.to_be_bytes());
            }
            Kind::Rtp { pt, ssrc, content } => {
                buf.extend_from_slice(&f.hdr[..l2 + l3 + 8]);
                buf.push(0x80);
                buf.push(pt | if s.flags & RTP_MARKER != 0 { 0x80 } else { 0 });
                buf.extend_from_slice(&(s.seq as u16).to_be_bytes());
                buf.extend_from_slice(&s.ack.to_be_bytes());
                buf.extend_from_slice(&ssrc.to_be_bytes());
                append_stream(buf, pools, content, f.salt, s.off, s.len as usize);
            }
            Kind::Dns => {
                buf.extend_from_slice(&f.hdr[..l2 + l3 + 8]);
                dns_message(buf, s);
            }
            Kind::IcmpEcho | Kind::Icmp6 { .. } => {
                buf.extend_from_slice(&f.hdr[..l2 + l3]);
                let ty = s.flags;
                if ty == 135 || ty == 136 {
                    // Neighbour discovery must have hop limit 255.
                    buf[fstart + l2 + 7] = 255;
                }
                match (ty, &f.kind) {
                    (135, Kind::Icmp6 { target }) => {
                        buf.extend_from_slice(&[135, 0, 0, 0, 0, 0, 0, 0]);
                        buf.extend_from_slice(target);
                        buf.extend_from_slice(&[1, 1]);
                        buf.extend_from_slice(&f.src_mac);
                    }
                    (136, _) => {
                        buf.extend_from_slice(&[136, 0, 0, 0, 0x60, 0, 0, 0]);
                        match f.key.src {
                            IpAddr::V6(a) => buf.extend_from_slice(&a.octets()),
                            IpAddr::V4(_) => buf.extend_from_slice(&[0; 16]),
                        }
                        buf.extend_from_slice(&[2, 1]);
                        buf.extend_from_slice(&f.src_mac);
                    }
                    _ => {
                        buf.extend_from_slice(&[ty, 0, 0, 0]);
                        buf.extend_from_slice(&s.seq.to_be_bytes());
                        echo_data(buf, s.ts, s.len as usize);
                    }
                }
            }
            Kind::Arp { .. } => {
                buf.extend_from_slice(&f.hdr[..l2 + 28]);
            }
        }
        let frame_len = buf.len() - fstart;
        let l4len = frame_len - l2 - l3;
        // IP header.
        if f.is_ip() {
            let ip = &mut buf[fstart + l2..l4];
            if l3 == 20 {
                let total = frame_len - l2;
                ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
                ip[4..6].copy_from_slice(&f.ip_id.to_be_bytes());
                let c = finish(u64::from(f.ip_sum) + total as u64 + u64::from(f.ip_id));
                ip[10..12].copy_from_slice(&c.to_be_bytes());
                f.ip_id = f.ip_id.wrapping_add(1);
            } else {
                ip[4..6].copy_from_slice(&(l4len as u16).to_be_bytes());
            }
            // Transport checksum.
            let t = &mut buf[l4..];
            let (csum_at, pseudo) = match f.key.proto {
                PROTO_TCP => (16, true),
                PROTO_UDP => {
                    t[4..6].copy_from_slice(&(l4len as u16).to_be_bytes());
                    (6, true)
                }
                PROTO_ICMPV6 => (2, true),
                _ => (2, false),
            };
            t[csum_at] = 0;
            t[csum_at + 1] = 0;
            let mut sum = u64::from(sum_words(t));
            if pseudo {
                sum += u64::from(f.pseudo) + l4len as u64;
            }
            let mut c = finish(sum);
            if c == 0 && f.key.proto == PROTO_UDP {
                c = 0xffff;
            }
            t[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
        }
        let fl = (frame_len as u32).to_le_bytes();
        buf[rec + 8..rec + 12].copy_from_slice(&fl);
        buf[rec + 12..rec + 16].copy_from_slice(&fl);
        debug_assert_eq!(frame_len, f.frame_len(s), "{:?}", f.kind);
        let st = &mut f.stats;
        if st.packets == 0 {
            st.first_ns = s.ts;
        }
        st.packets += 1;
        st.bytes += frame_len as u64;
        st.last_ns = s.ts;
        self.packets += 1;
        self.bytes += frame_len as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(data: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from(c[0]) << 8
            };
            s += u64::from(w);
        }
        fold(s)
    }

    #[test]
    fn fast_sum_matches_naive() {
        let mut r = crate::rng::Rng::new(3);
        for len in 0..300 {
            let mut v = vec![0u8; len];
            r.fill(&mut v);
            assert_eq!(sum_words(&v), naive(&v), "len {len}");
        }
        let v = vec![0xffu8; 5000];
        assert_eq!(sum_words(&v), naive(&v));
    }
}
