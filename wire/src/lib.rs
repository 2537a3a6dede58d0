//! capsule-wire: checked views over untrusted bytes, and the packet dissector.
//!
//! This crate owns the one place where capsule reads protocol headers, and the one way it
//! reads any untrusted bytes:
//!
//! * [`view`]: [`View`], a fixed-size header checked once when it is made, and
//!   [`Reader`], a cursor for variable-length data, both failing with
//!   [`Short`](view::Short) rather than a made-up value. The dissector reads packets through
//!   them; the pcap codec, the segment format and the side index read their files through
//!   them.
//! * [`dissect`] takes a packet's link type and captured bytes and returns a [`Dissected`]:
//!   VLAN tags, EtherType, IP fields and transport fields. The filter language and the side
//!   index only ever see that summary, never the bytes.
//! * [`linktype`] and [`ethertype`]: the `LINKTYPE_*` and EtherType numbers, once for all of
//!   capsule.
//! * [`ipproto`]: the IP protocol numbers, and [`IpProto`], a protocol as a value with the
//!   names capsule prints and reads (`tcp`, `icmp6`, `gre`, or the number): the one map from
//!   numbers to names for the filter language, the answers and the tables. Packed records
//!   and [`IpInfo::proto`] keep the raw number; `IpProto::from(n)` names it.
//!
//! Data flows in one pass, front to back, each layer handing the next its remaining bytes
//! (one file per layer: `link.rs`, `ip.rs`, `transport.rs`):
//!
//! ```text
//! bytes --link type--> link layer   Ethernet | Linux SLL / SLL2 | NULL / LOOP | raw IP
//!       -> tags        802.1Q / 802.1ad / 0x9100, three recorded, more skipped -> EtherType
//!       -> shims       MPLS label stack (payload guessed by its first nibble: IP, or a
//!                      pseudowire control word and Ethernet) | PPPoE session -> IP
//!       -> IP          IPv4 (options skipped by IHL) | IPv6 fixed header
//!       -> extension   IPv6 hop-by-hop, routing, destination options, fragment, AH
//!          headers     (at most 16; stops at ESP, no next header, or anything unknown)
//!       -> transport   TCP | UDP | SCTP | ICMP | ICMPv6, only at fragment offset 0
//!       -> tunnel      GRE (IP, Ethernet 0x6558, ERSPAN I/II/III) | UDP: VXLAN, Geneve,
//!                      GTP-U on their ports (`tunnel.rs`, [`set_tunnel_ports`]): the
//!                      payload is read again from the link layer or IP on, at most
//!                      [`MAX_TUNNEL_DEPTH`] tunnels deep
//! ```
//!
//! The packet reported is the innermost IP packet (a tunnel whose payload does not reach IP
//! is left closed); [`Dissected::encap`] says what it was found in (docs/decisions.md).
//!
//! Nothing in the packet is trusted. The capture may end anywhere (a snap length, a damaged
//! file), which gives [`Malformed::Truncated`] with everything read before it kept. Length and
//! version fields may lie, which gives [`Malformed::Invalid`]: an IHL or TCP data offset below
//! 5, an IP version that contradicts the link layer, an IPv4 total length shorter than its
//! header, an extension or transport header running past the IP payload length, or more
//! extension headers than the bound. A header that contradicts itself is not reported at all;
//! one whose fixed part is whole but whose options are cut off is reported with `Truncated`.
//! The EtherType is set only once every tag is read, and IPv6 fields only once the extension
//! chain is read (`proto`, `fragment` and `payload_len` depend on it), so a cut packet never
//! reports a value that the whole packet would contradict.
//! Lengths reported (`payload_len`) come from the header fields, never from the capture, so a
//! truncated packet reports the same values as the whole one.
//!
//! Headers are read through checked views in the smoltcp style: each protocol's field offsets
//! are consts in a `field` module beside its parser, a header's length is checked once when
//! its view is made (against the IP payload length first, then the capture), and the view
//! holds a `&[u8; N]` whose accessors check their offset against `N` at compile time, so no
//! read can go out of bounds or panic. Nothing is allocated; all arithmetic is on small
//! widened values or saturating.
//!
//! [`dscp_of`] answers the one question the store writer's producer asks of every packet
//! (its DSCP, which picks its lane) through the same link-layer and IP functions, without
//! building a [`Dissected`]; proptests hold it equal to `dissect(..).ip.map(|ip| ip.dscp)`.
//!
//! (Types below are the contract between the dissector, the filter language and the side
//! index; the parser itself follows them.)
#![forbid(unsafe_code)]

pub mod ethertype;
pub mod fragments;
pub mod ipproto;
pub mod linktype;
pub mod view;

#[cfg(test)]
mod fixtures;
mod ip;
mod link;
mod transport;
mod tunnel;

pub use ipproto::IpProto;
pub use tunnel::{set_tunnel_ports, TunnelPorts};

/// How many VLAN tags a [`Dissected`] records (outermost first, inner frames' after the
/// outer ones); tags beyond them are read past and not recorded.
pub const MAX_VLANS: usize = 3;

/// How many tunnels carried by IP (GRE, ERSPAN, VXLAN, Geneve, GTP-U) the dissector opens
/// one inside the other; a tunnel deeper than that is left closed (the packet is the one
/// that carries it). MPLS and PPPoE shims need no bound: each consumes bytes of the packet.
pub const MAX_TUNNEL_DEPTH: usize = 4;

use std::net::IpAddr;

use crate::link::Net;
use crate::linktype::LinkType;
use crate::view::{Reader, View};

/// What capsule knows about one packet after dissection. Every field that could not be read
/// (short capture, lying length, unknown protocol) is absent, and `malformed` says why
/// dissection stopped early. Dissection never panics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dissected {
    /// 802.1Q / 802.1ad tags, outermost first: up to [`MAX_VLANS`] recorded (the tags of a
    /// frame inside a tunnel after those of the outer frame); VLAN ids are 12 bits.
    pub vlans: [Option<u16>; MAX_VLANS],
    /// The EtherType after the tags of the innermost frame (0 when the link type has none,
    /// e.g. raw IP; IPv4's or IPv6's for an IP packet inside MPLS or PPPoE).
    pub ethertype: u16,
    /// The innermost IP packet's fields (inside every encapsulation opened).
    pub ip: Option<IpInfo>,
    /// The innermost IP packet's transport.
    pub l4: L4,
    /// The encapsulations the innermost packet was found in, if any.
    pub encap: Option<Encap>,
    /// Why dissection stopped before the end of the headers it expected, if it did.
    pub malformed: Option<Malformed>,
}

/// An encapsulation kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EncapKind {
    /// An MPLS label stack (EtherType 0x8847 / 0x8848).
    Mpls,
    /// A PPPoE session (EtherType 0x8864).
    Pppoe,
    /// GRE (IP protocol 47), IP or Ethernet (0x6558) inside.
    Gre,
    /// ERSPAN type I, II or III (GRE 0x88BE / 0x22EB).
    Erspan,
    /// VXLAN (UDP, 4789 by default).
    Vxlan,
    /// Geneve (UDP, 6081 by default).
    Geneve,
    /// GTP-U (UDP, 2152 by default).
    Gtpu,
}

impl EncapKind {
    /// Every kind, in the order of their numbers ([`EncapKind::number`]).
    pub const ALL: [EncapKind; 7] = [
        EncapKind::Mpls,
        EncapKind::Pppoe,
        EncapKind::Gre,
        EncapKind::Erspan,
        EncapKind::Vxlan,
        EncapKind::Geneve,
        EncapKind::Gtpu,
    ];

    /// The name capsule prints and reads.
    pub fn name(self) -> &'static str {
        match self {
            EncapKind::Mpls => "mpls",
            EncapKind::Pppoe => "pppoe",
            EncapKind::Gre => "gre",
            EncapKind::Erspan => "erspan",
            EncapKind::Vxlan => "vxlan",
            EncapKind::Geneve => "geneve",
            EncapKind::Gtpu => "gtpu",
        }
    }

    /// The kind's number in stored formats (1..=7).
    pub fn number(self) -> u8 {
        match self {
            EncapKind::Mpls => 1,
            EncapKind::Pppoe => 2,
            EncapKind::Gre => 3,
            EncapKind::Erspan => 4,
            EncapKind::Vxlan => 5,
            EncapKind::Geneve => 6,
            EncapKind::Gtpu => 7,
        }
    }

    /// The kind of a stored number.
    pub fn from_number(n: u8) -> Option<EncapKind> {
        EncapKind::ALL.into_iter().find(|k| k.number() == n)
    }
}

/// Where the innermost packet was found: the outermost tunnel carried by IP (its kind,
/// endpoints, DSCP and identifier), else the outermost link-layer shim (MPLS, PPPoE), and
/// the top MPLS label of the first label stack crossed. Each field is set by the first
/// layer that has it, outside in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Encap {
    pub kind: EncapKind,
    /// The outer IP packet's source and destination (absent for MPLS and PPPoE alone).
    pub outer: Option<(IpAddr, IpAddr)>,
    /// The outer IP packet's DSCP (the innermost one is [`IpInfo::dscp`]).
    pub outer_dscp: Option<u8>,
    /// VXLAN / Geneve VNI, GRE key, ERSPAN session id, GTP-U TEID, or PPPoE session id.
    pub id: Option<u32>,
    /// The top label of the first MPLS label stack crossed.
    pub mpls: Option<u32>,
    /// Encapsulations opened (shims and tunnels).
    pub layers: u8,
}

impl Encap {
    /// The encapsulation's identity as a 32-bit key, never 0: what the side index compares
    /// to tell whether the packets of a flow direction all arrived in one encapsulation
    /// ([`encap_key`] of its kind, outer endpoints, identifier and top MPLS label; the outer
    /// DSCP and the layer count are not part of it).
    pub fn key(&self) -> u32 {
        encap_key(self.kind, self.outer, self.id, self.mpls)
    }

    fn new(kind: EncapKind) -> Encap {
        Encap {
            kind,
            outer: None,
            outer_dscp: None,
            id: None,
            mpls: None,
            layers: 0,
        }
    }
}

/// An encapsulation's identity as a 32-bit key, never 0: FNV-1a over its kind number, its
/// outer endpoints (family and address bytes), identifier and top MPLS label, each with a
/// presence byte. Deterministic across processes and builds (stored data is compared with
/// it: the live build and a rebuild must agree); two different encapsulations share a key
/// with probability 2^-32.
pub fn encap_key(
    kind: EncapKind,
    outer: Option<(IpAddr, IpAddr)>,
    id: Option<u32>,
    mpls: Option<u32>,
) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    eat(&[kind.number()]);
    match outer {
        None => eat(&[0]),
        Some((s, d)) => {
            for a in [s, d] {
                match a {
                    IpAddr::V4(v4) => {
                        eat(&[4]);
                        eat(&v4.octets());
                    }
                    IpAddr::V6(v6) => {
                        eat(&[6]);
                        eat(&v6.octets());
                    }
                }
            }
        }
    }
    for v in [id, mpls] {
        match v {
            None => eat(&[0]),
            Some(v) => {
                eat(&[1]);
                eat(&v.to_le_bytes());
            }
        }
    }
    h.max(1)
}

impl Dissected {
    /// Notes a link-layer shim (MPLS, PPPoE) in `encap` and returns the encapsulation.
    pub(crate) fn shim(encap: &mut Option<Encap>, kind: EncapKind) -> &mut Encap {
        let e = encap.get_or_insert(Encap::new(kind));
        e.layers = e.layers.saturating_add(1);
        e
    }
}

/// Network-layer fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpInfo {
    /// 4 or 6.
    pub version: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Transport protocol: IPv4 protocol, or the IPv6 next header after extension headers
    /// (the number; [`IpProto::from`] names it).
    pub proto: u8,
    /// Differentiated Services code point (6 bits).
    pub dscp: u8,
    pub ecn: u8,
    /// TTL or hop limit.
    pub ttl: u8,
    /// Present when the packet is a fragment (IPv4 MF/offset, or an IPv6 fragment header).
    pub fragment: Option<Fragment>,
    /// Bytes after the IP header(s) according to the IP length fields (not the capture).
    pub payload_len: u32,
}

/// A fragment's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// Offset in 8-byte units; non-zero fragments carry no transport header.
    pub offset: u16,
    pub more: bool,
    pub id: u32,
}

/// Transport-layer fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum L4 {
    /// Not IP, a non-first fragment, or the transport header is missing.
    #[default]
    None,
    Tcp(TcpInfo),
    Udp {
        src_port: u16,
        dst_port: u16,
    },
    Sctp {
        src_port: u16,
        dst_port: u16,
    },
    Icmp {
        kind: u8,
        code: u8,
    },
    Icmp6 {
        kind: u8,
        code: u8,
    },
    /// An IP protocol capsule does not dissect further.
    Other,
}

/// TCP header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    /// FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, URG 0x20, ECE 0x40, CWR 0x80.
    pub flags: u8,
    pub window: u16,
    /// TCP payload bytes according to the IP length fields (not the capture).
    pub payload_len: u32,
}

/// Why dissection stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// The capture ends inside a header.
    Truncated {
        layer: &'static str,
        needed: usize,
        found: usize,
    },
    /// A header field contradicts the packet (bad IHL, version, length, extension chain).
    Invalid {
        layer: &'static str,
        what: &'static str,
    },
}

impl L4 {
    /// Source and destination ports, for TCP, UDP and SCTP.
    pub fn ports(&self) -> Option<(u16, u16)> {
        match *self {
            L4::Tcp(t) => Some((t.src_port, t.dst_port)),
            L4::Udp { src_port, dst_port } | L4::Sctp { src_port, dst_port } => {
                Some((src_port, dst_port))
            }
            _ => None,
        }
    }
}

/// A bound for headers that no length field encloses (link layer, IP header itself).
const UNBOUNDED: usize = usize::MAX;

/// The `what` of a header that does not fit in the payload its enclosing length field gives.
const PAST_PAYLOAD: &str = "runs past the IP payload length";

/// Makes the view of a header whose fixed part is `N` bytes at the start of `data`, and
/// returns it with the bytes after it. `bound` is how many bytes the enclosing length field
/// leaves for this header ([`UNBOUNDED`] if none): exceeding it is a lie (`Invalid`),
/// exceeding the capture is a cut (`Truncated`).
#[inline(always)]
fn header<'a, const N: usize>(
    data: &'a [u8],
    bound: usize,
    layer: &'static str,
) -> Result<(View<'a, N>, &'a [u8]), Malformed> {
    if N > bound {
        return Err(Malformed::Invalid {
            layer,
            what: PAST_PAYLOAD,
        });
    }
    View::split(data).map_err(|short| Malformed::Truncated {
        layer,
        needed: short.needed,
        found: short.found,
    })
}

/// The bytes after a header of `len` bytes (options included), or `Truncated`.
#[inline(always)]
fn skip<'a>(data: &'a [u8], len: usize, layer: &'static str) -> Result<&'a [u8], Malformed> {
    let mut r = Reader::new(data);
    match r.skip(len) {
        Ok(()) => Ok(r.rest()),
        Err(short) => Err(Malformed::Truncated {
            layer,
            needed: short.needed,
            found: short.found,
        }),
    }
}

/// Dissects one captured packet of link type `linktype` (LINKTYPE_* numbers).
///
/// Link types: 0 NULL and 108 LOOP (address family in either byte order), 1 Ethernet, 12, 14
/// and 101 raw IP, 113 Linux SLL, 228 raw IPv4, 229 raw IPv6, 276 Linux SLL2. Any other link
/// type gives `Dissected::default()`. Never panics and never allocates.
pub fn dissect(linktype: LinkType, data: &[u8]) -> Dissected {
    let mut d = Dissected::default();
    if let Err(why) = dissect_into(&mut d, linktype, data) {
        d.malformed = Some(why);
    }
    d
}

/// Dissects `data` into `d`, reusing its storage: leaves `d` equal to what
/// `dissect(linktype, data)` returns. For a caller dissecting packet after packet on a hot
/// path, this writes the result once where it is kept instead of moving it out of a frame.
pub fn dissect_in_place(d: &mut Dissected, linktype: LinkType, data: &[u8]) {
    *d = Dissected::default();
    if let Err(why) = dissect_into(d, linktype, data) {
        d.malformed = Some(why);
    }
}

/// The DSCP that [`dissect`] reports for the packet (`dissect(..).ip.map(|ip| ip.dscp)`),
/// without the rest of the dissection.
///
/// The store writer's producer chooses a packet's lane by its DSCP, on the capture's hot
/// path, while the side index dissects every packet in full later on the writer thread. This
/// reads only what decides the DSCP: the link layer and tags, then the IP header, through the
/// same functions as [`dissect`] (so both always agree: a cut or lying IP header, or an IPv6
/// extension chain that does not end well, gives `None` in both). Addresses, ports and the
/// transport header are not read, and no [`Dissected`] is built.
pub fn dscp_of(linktype: LinkType, data: &[u8]) -> Option<u8> {
    let mut d = Dissected::default();
    let (_, net) = link::link_layer(&mut d, linktype, data).ok()?;
    // A packet that may carry a tunnel (GRE, or UDP to any port) is dissected in full: its
    // DSCP is the innermost packet's, which only the tunnel's payload tells.
    let (dscp, proto) = match net {
        Net::Ipv4(data) => ip::ipv4_header(data)
            .ok()
            .map(|h| (h.header.tos() >> 2, h.header.protocol()))?,
        Net::Ipv6(data) => ip::ipv6_headers(data)
            .ok()
            .map(|(h, chain)| (h.traffic_class() >> 2, chain.next))?,
        Net::None => return None,
    };
    if matches!(proto, ipproto::UDP | ipproto::GRE) {
        return dissect(linktype, data).ip.map(|ip| ip.dscp);
    }
    Some(dscp)
}

/// Where the network header (IPv4 or IPv6) and the transport header start in `data`, as
/// byte offsets from the start of the frame: what tcpdump's `ip[N]` and `tcp[N]` count
/// from. The transport header's is `None` for a non-first fragment, or where the IP
/// headers do not read (the same checks as [`dissect`]); both are `None` for a frame
/// that is not IP. Read only for filters that name such byte offsets.
pub fn header_offsets(linktype: LinkType, data: &[u8]) -> (Option<usize>, Option<usize>) {
    let mut d = Dissected::default();
    let Ok((_, net)) = link::link_layer(&mut d, linktype, data) else {
        return (None, None);
    };
    let at = |s: &[u8]| (s.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
    let (l3, transport) = match net {
        Net::Ipv4(s) => (Some(at(s)), ip::ipv4(&mut d, s).ok().flatten()),
        Net::Ipv6(s) => (Some(at(s)), ip::ipv6(&mut d, s).ok().flatten()),
        Net::None => (None, None),
    };
    (l3, transport.map(|t| at(t.data)))
}

/// Fills `d` layer by layer; the error is why it stopped early.
///
/// Kept out of line on purpose: the fields are then stored straight into the caller's
/// `Dissected`. Inlined, LLVM keeps them in scalars and reassembles the struct through the
/// stack at the end, whose store-forwarding stalls made dissection about twice as slow
/// (14 ns against 8 ns per packet, measured on the test fixtures).
#[inline(never)]
fn dissect_into(d: &mut Dissected, linktype: LinkType, data: &[u8]) -> Result<(), Malformed> {
    let (ethertype, net) = link::link_layer(d, linktype, data)?;
    d.ethertype = ethertype;
    net_layer(d, net, 0)
}

/// The IP and transport layers of `net`, then the tunnel they carry, if any: `depth`
/// tunnels carried by IP are open around it.
fn net_layer(d: &mut Dissected, net: Net<'_>, depth: usize) -> Result<(), Malformed> {
    let transport = match net {
        Net::Ipv4(data) => ip::ipv4(d, data)?,
        Net::Ipv6(data) => ip::ipv6(d, data)?,
        Net::None => None,
    };
    let Some(t) = transport else {
        return Ok(());
    };
    transport::transport_layer(d, t)?;
    if matches!(t.proto, ipproto::UDP | ipproto::GRE) && depth < MAX_TUNNEL_DEPTH {
        if let Some(opened) = tunnel::open(&d.l4, &t) {
            enter(d, opened, depth);
        } else if let Some((layer, needed)) = tunnel::cut_short(&d.l4, &t) {
            // The capture ends inside the tunnel's header: the packet stays the outer one,
            // marked cut, as a longer capture of it would say more.
            return Err(Malformed::Truncated {
                layer,
                needed,
                found: t.data.len(),
            });
        }
    }
    Ok(())
}

/// Reads a tunnel's payload as a packet of its own and, when an IP packet is found inside,
/// makes `d` that packet's dissection (the tunnel noted in its [`Encap`]). Otherwise (not
/// IP, or cut before the IP header) `d` stays the packet that carries the tunnel, with the
/// tunnel noted (an ARP inside VXLAN is still in that VNI).
#[cold]
fn enter(d: &mut Dissected, opened: tunnel::Opened<'_>, depth: usize) {
    let Some(outer) = d.ip else {
        return;
    };
    let mut e = d.encap.unwrap_or(Encap::new(opened.kind));
    e.layers = e.layers.saturating_add(1);
    if e.outer.is_none() {
        e.kind = opened.kind;
        e.outer = Some((outer.src, outer.dst));
        e.outer_dscp = Some(outer.dscp);
        e.id = opened.id;
    }
    let mut inner = Dissected {
        vlans: d.vlans,
        encap: Some(e),
        ..Dissected::default()
    };
    let read = match opened.inner {
        tunnel::Inner::Ethernet(data) => {
            link::link_layer(&mut inner, linktype::LINKTYPE_ETHERNET, data)
        }
        tunnel::Inner::EtherType(ethertype, data) => link::ethertype(&mut inner, ethertype, data),
        tunnel::Inner::Ip(data) => match data.first().map(|b| b >> 4) {
            Some(4) => Ok((ethertype::ETHERTYPE_IPV4, Net::Ipv4(data))),
            Some(6) => Ok((ethertype::ETHERTYPE_IPV6, Net::Ipv6(data))),
            _ => Ok((0, Net::None)),
        },
    }
    .and_then(|(ethertype, net)| {
        inner.ethertype = ethertype;
        net_layer(&mut inner, net, depth + 1)
    });
    if inner.ip.is_some() {
        inner.malformed = read.err();
        *d = inner;
    } else {
        d.encap = inner.encap;
        // Cut before the inner IP header: a longer capture may have found one.
        if let Err(e @ Malformed::Truncated { .. }) = read {
            d.malformed = Some(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::fixtures::*;
    use crate::*;
    use proptest::prelude::*;

    #[test]
    fn header_offsets_point_at_the_ip_and_transport_headers() {
        let p = &ETH_IPV4_TCP_OPTIONS;
        let (l3, l4) = header_offsets(1, p);
        assert_eq!(l3, Some(14));
        let ihl = usize::from(p[14] & 0x0f) * 4;
        assert_eq!(l4, Some(14 + ihl));
        assert_eq!(header_offsets(1, &p[..10]), (None, None));
    }

    #[test]
    fn truncated_at_each_layer_keeps_what_was_read() {
        let p = &ETH_IPV4_TCP_OPTIONS;
        // Ethernet header cut.
        assert_eq!(
            dissect(1, &p[..10]),
            Dissected {
                encap: None,
                malformed: truncated("ethernet", 14, 10),
                ..Dissected::default()
            }
        );
        // IPv4 fixed header cut: the EtherType is known, nothing of IP.
        assert_eq!(
            dissect(1, &p[..14 + 12]),
            Dissected {
                ethertype: 0x0800,
                encap: None,
                malformed: truncated("ipv4", 20, 12),
                ..Dissected::default()
            }
        );
        // IPv4 options cut: every IP field is in the fixed header, so all are kept.
        assert_eq!(
            dissect(1, &p[..14 + 22]),
            Dissected {
                ethertype: 0x0800,
                ip: Some(tcp_options_ip()),
                encap: None,
                malformed: truncated("ipv4", 24, 22),
                ..Dissected::default()
            }
        );
        // TCP fixed header cut: addresses (and the payload length from the IP header) kept.
        assert_eq!(
            dissect(1, &p[..14 + 24 + 10]),
            Dissected {
                ethertype: 0x0800,
                ip: Some(tcp_options_ip()),
                encap: None,
                malformed: truncated("tcp", 20, 10),
                ..Dissected::default()
            }
        );
        // TCP options cut: the TCP fields are all in the fixed part.
        assert_eq!(
            dissect(1, &p[..14 + 24 + 25]),
            Dissected {
                ethertype: 0x0800,
                ip: Some(tcp_options_ip()),
                l4: tcp_options_l4(),
                encap: None,
                malformed: truncated("tcp", 32, 25),
                ..Dissected::default()
            }
        );
        // Payload cut: not a header, so nothing is malformed.
        assert_eq!(dissect(1, &p[..p.len() - 2]), dissect(1, p));
        // IPv6 extension header cut: proto, fragment and payload length are unknown, so no IP.
        assert_eq!(
            dissect(1, &IPV6_HBH_FRAG_UDP[..14 + 40 + 4]),
            Dissected {
                ethertype: 0x86dd,
                encap: None,
                malformed: truncated("ipv6 extension header", 8, 4),
                ..Dissected::default()
            }
        );
        // UDP header cut behind the extension headers.
        let d = dissect(1, &IPV6_HBH_FRAG_UDP[..14 + 40 + 16 + 6]);
        assert_eq!(d.ip, dissect(1, &IPV6_HBH_FRAG_UDP).ip);
        assert_eq!((d.l4, d.malformed), (L4::None, truncated("udp", 8, 6)));
    }
    /// What holds for any dissection of any input.
    fn check_invariants(d: &Dissected) {
        if let Some(Malformed::Truncated { needed, found, .. }) = d.malformed {
            assert!(found < needed, "{d:?}");
        }
        if d.vlans[1].is_some() {
            assert!(d.vlans[0].is_some(), "{d:?}");
        }
        for vlan in d.vlans.into_iter().flatten() {
            assert!(vlan < 4096);
        }
        if d.l4 != L4::None {
            assert!(d.ip.is_some(), "{d:?}");
        }
        if let Some(ip) = d.ip {
            assert!(ip.version == 4 || ip.version == 6);
            assert!(ip.dscp < 64 && ip.ecn < 4);
            assert_eq!(ip.src.is_ipv4(), ip.version == 4);
        }
    }

    /// `part` (a dissection of a prefix of a packet) says nothing that `full` (of the whole
    /// packet) contradicts, and differs from it only when it was cut.
    fn check_prefix_of(part: &Dissected, full: &Dissected) {
        for (p, f) in part.vlans.iter().zip(&full.vlans) {
            if p.is_some() {
                assert_eq!(p, f, "{part:?} / {full:?}");
            }
        }
        assert!(
            part.ethertype == 0 || part.ethertype == full.ethertype,
            "{part:?} / {full:?}"
        );
        if part.ip.is_some() {
            assert_eq!(part.ip, full.ip);
        }
        if part.l4 != L4::None {
            assert_eq!(part.l4, full.l4);
        }
        if part != full {
            assert!(
                matches!(part.malformed, Some(Malformed::Truncated { .. })),
                "{part:?} / {full:?}"
            );
        }
    }

    #[test]
    fn every_truncation_of_every_fixture_is_a_prefix() {
        for (linktype, packet) in FIXTURES {
            let full = dissect(linktype, packet);
            check_invariants(&full);
            for len in 0..packet.len() {
                let part = dissect(linktype, &packet[..len]);
                check_invariants(&part);
                check_prefix_of(&part, &full);
            }
        }
    }

    /// The DSCP as `dissect` reports it, which `dscp_of` must equal.
    fn dissected_dscp(linktype: u16, data: &[u8]) -> Option<u8> {
        dissect(linktype, data).ip.map(|ip| ip.dscp)
    }

    #[test]
    fn dscp_of_agrees_with_dissect_on_every_fixture_and_truncation() {
        for (linktype, packet) in FIXTURES {
            for len in 0..=packet.len() {
                let p = &packet[..len];
                assert_eq!(
                    dscp_of(linktype, p),
                    dissected_dscp(linktype, p),
                    "{linktype} {p:02x?}"
                );
            }
        }
        // The fixtures' own DSCPs, so the comparison is not only of `None`s.
        assert_eq!(dscp_of(1, &IPV4_EF_ECN_UDP), Some(46));
        assert_eq!(dscp_of(1, &IPV6_HBH_FRAG_UDP), Some(46));
        assert_eq!(dscp_of(113, &SLL_IPV4_UDP), Some(4));
        assert_eq!(dscp_of(1, &ETH_ARP), None);
        assert_eq!(dscp_of(229, &IPV6_EXT_PAST_END), None);
    }

    /// How a generated frame starts: link type and link-layer header.
    #[derive(Debug, Clone)]
    enum LinkSpec {
        /// Ethernet (1), Linux SLL (113) or SLL2 (276): tags (TPID, TCI), then the EtherType.
        Tagged {
            linktype: u16,
            tags: Vec<(u16, u16)>,
            ethertype: u16,
        },
        /// NULL (0) or LOOP (108) with this address family, in either byte order.
        Null {
            linktype: u16,
            family: u32,
            swap: bool,
        },
        /// Raw IP link types (12, 14, 101, 228, 229), or one capsule does not dissect.
        Bare(u16),
    }

    /// An IP header and what follows it, with fields that may lie.
    #[derive(Debug, Clone)]
    enum IpSpec {
        V4 {
            version: u8,
            ihl: u8,
            tos: u8,
            /// `None`: the true total length.
            total_len: Option<u16>,
            flags_frag: u16,
            proto: u8,
            addrs: [u8; 8],
        },
        V6 {
            version: u8,
            traffic_class: u8,
            /// `None`: the true payload length.
            payload_len: Option<u16>,
            /// Extension headers (kind, length byte), then the last next header.
            chain: Vec<(u8, u8)>,
            last: u8,
        },
        /// Not an IP header at all.
        Junk,
    }

    fn link_spec() -> impl Strategy<Value = LinkSpec> {
        let tpid = proptest::sample::select(&[0x8100u16, 0x88a8, 0x9100][..]);
        let ethertype = prop_oneof![
            4 => Just(0x0800u16),
            4 => Just(0x86dd),
            1 => Just(0x0806),
            1 => any::<u16>(),
        ];
        prop_oneof![
            6 => (
                proptest::sample::select(&[1u16, 1, 113, 276][..]),
                proptest::collection::vec((tpid, any::<u16>()), 0..4),
                ethertype,
            )
                .prop_map(|(linktype, tags, ethertype)| LinkSpec::Tagged {
                    linktype,
                    tags,
                    ethertype,
                }),
            1 => (
                proptest::sample::select(&[0u16, 108][..]),
                proptest::sample::select(&[2u32, 24, 28, 30, 16, 0x0200_0000][..]),
                any::<bool>(),
            )
                .prop_map(|(linktype, family, swap)| LinkSpec::Null {
                    linktype,
                    family,
                    swap,
                }),
            2 => proptest::sample::select(&[12u16, 14, 101, 228, 229, 105][..]).prop_map(LinkSpec::Bare),
        ]
    }

    fn ip_spec() -> impl Strategy<Value = IpSpec> {
        let proto = proptest::sample::select(&[6u8, 17, 1, 58, 132, 47, 50, 59, 0, 44][..]);
        let ext = (
            proptest::sample::select(&[0u8, 43, 60, 51, 44][..]),
            prop_oneof![3 => 0u8..3, 1 => any::<u8>()],
        );
        prop_oneof![
            4 => (
                prop_oneof![8 => Just(4u8), 1 => 0u8..16],
                prop_oneof![8 => 5u8..8, 1 => 0u8..16],
                any::<u8>(),
                prop_oneof![
                    3 => Just(None),
                    1 => any::<u16>().prop_map(Some),
                    1 => (0u16..28).prop_map(Some),
                ],
                prop_oneof![3 => Just(0u16), 1 => any::<u16>()],
                proto.clone(),
                any::<[u8; 8]>(),
            )
                .prop_map(|(version, ihl, tos, total_len, flags_frag, proto, addrs)| {
                    IpSpec::V4 {
                        version,
                        ihl,
                        tos,
                        total_len,
                        flags_frag,
                        proto,
                        addrs,
                    }
                }),
            4 => (
                prop_oneof![8 => Just(6u8), 1 => 0u8..16],
                any::<u8>(),
                prop_oneof![3 => Just(None), 1 => Just(Some(0)), 1 => any::<u16>().prop_map(Some)],
                prop_oneof![
                    6 => proptest::collection::vec(ext.clone(), 0..4),
                    1 => proptest::collection::vec(ext, 15..18),
                ],
                proto,
            )
                .prop_map(|(version, traffic_class, payload_len, chain, last)| IpSpec::V6 {
                    version,
                    traffic_class,
                    payload_len,
                    chain,
                    last,
                }),
            1 => Just(IpSpec::Junk),
        ]
    }

    /// Builds the frame: link layer, IP header (and IPv4 options or IPv6 extension headers as
    /// their length fields say), `payload`, then cut to `keep` bytes if given.
    fn build_frame(
        link: &LinkSpec,
        ip: &IpSpec,
        payload: &[u8],
        keep: Option<proptest::sample::Index>,
    ) -> (u16, Vec<u8>) {
        let mut net = Vec::new();
        match ip {
            IpSpec::V4 {
                version,
                ihl,
                tos,
                total_len,
                flags_frag,
                proto,
                addrs,
            } => {
                let header = usize::from(*ihl).max(5) * 4;
                let total = total_len.unwrap_or((header + payload.len()) as u16);
                net.extend_from_slice(&[version << 4 | ihl, *tos]);
                net.extend_from_slice(&total.to_be_bytes());
                net.extend_from_slice(&[0x12, 0x34]);
                net.extend_from_slice(&flags_frag.to_be_bytes());
                net.extend_from_slice(&[64, *proto, 0, 0]);
                net.extend_from_slice(addrs);
                net.resize(header, 1); // options: NOPs
            }
            IpSpec::V6 {
                version,
                traffic_class,
                payload_len,
                chain,
                last,
            } => {
                let mut exts = Vec::new();
                for (i, &(kind, len)) in chain.iter().enumerate() {
                    let next = chain.get(i + 1).map_or(*last, |e| e.0);
                    let size = match kind {
                        44 => 8,
                        51 => (usize::from(len) + 2) * 4,
                        _ => (usize::from(len) + 1) * 8,
                    };
                    let at = exts.len();
                    exts.resize(at + size, 0);
                    exts[at] = next;
                    exts[at + 1] = len;
                }
                let first = chain.first().map_or(*last, |e| e.0);
                let plen = payload_len.unwrap_or((exts.len() + payload.len()) as u16);
                let word = u32::from(*version) << 28 | u32::from(*traffic_class) << 20 | 0x12345;
                net.extend_from_slice(&word.to_be_bytes());
                net.extend_from_slice(&plen.to_be_bytes());
                net.extend_from_slice(&[first, 64]);
                net.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
                net.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
                net.extend_from_slice(&exts);
            }
            IpSpec::Junk => {}
        }
        net.extend_from_slice(payload);
        let mut f = Vec::new();
        let linktype = match link {
            LinkSpec::Tagged {
                linktype,
                tags,
                ethertype,
            } => {
                let mut types: Vec<u16> = tags.iter().map(|t| t.0).collect();
                types.push(*ethertype);
                match linktype {
                    1 => f.extend_from_slice(&[0x02; 12]),
                    113 => f.extend_from_slice(&[0, 0, 0, 1, 0, 6, 2, 2, 2, 2, 2, 2, 0, 0]),
                    _ => {}
                }
                f.extend_from_slice(&types[0].to_be_bytes());
                if *linktype == 276 {
                    f.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 2, 2, 2, 2, 2, 0, 0]);
                }
                for (i, (_, tci)) in tags.iter().enumerate() {
                    f.extend_from_slice(&tci.to_be_bytes());
                    f.extend_from_slice(&types[i + 1].to_be_bytes());
                }
                *linktype
            }
            LinkSpec::Null {
                linktype,
                family,
                swap,
            } => {
                let family = if *swap { family.swap_bytes() } else { *family };
                f.extend_from_slice(&family.to_ne_bytes());
                *linktype
            }
            LinkSpec::Bare(linktype) => *linktype,
        };
        f.extend_from_slice(&net);
        if let Some(keep) = keep {
            f.truncate(keep.index(f.len() + 1));
        }
        (linktype, f)
    }

    proptest! {
        #[test]
        fn dscp_of_agrees_with_dissect_on_arbitrary_bytes(
            linktype in prop_oneof![
                8 => proptest::sample::select(&[0u16, 1, 12, 14, 101, 108, 113, 228, 229, 276][..]),
                1 => any::<u16>(),
            ],
            data in proptest::collection::vec(any::<u8>(), 0..160),
        ) {
            prop_assert_eq!(dscp_of(linktype, &data), dissected_dscp(linktype, &data));
        }

        #[test]
        fn dscp_of_agrees_with_dissect_on_generated_frames(
            link in link_spec(),
            ip in ip_spec(),
            payload in proptest::collection::vec(any::<u8>(), 0..48),
            keep in prop_oneof![3 => Just(None), 1 => any::<proptest::sample::Index>().prop_map(Some)],
        ) {
            let (linktype, f) = build_frame(&link, &ip, &payload, keep);
            prop_assert_eq!(dscp_of(linktype, &f), dissected_dscp(linktype, &f), "{:02x?}", f);
        }

        #[test]
        fn dscp_of_agrees_with_dissect_on_mutated_fixtures(
            which in 0..FIXTURES.len(),
            flips in proptest::collection::vec((any::<proptest::sample::Index>(), 1u8..), 0..6),
            keep in any::<proptest::sample::Index>(),
        ) {
            let (linktype, packet) = FIXTURES[which];
            let mut p = packet.to_vec();
            for (at, xor) in flips {
                let i = at.index(p.len());
                p[i] ^= xor;
            }
            p.truncate(keep.index(p.len() + 1));
            prop_assert_eq!(dscp_of(linktype, &p), dissected_dscp(linktype, &p));
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            linktype in 0u16..300,
            data in proptest::collection::vec(any::<u8>(), 0..160),
        ) {
            check_invariants(&dissect(linktype, &data));
        }

        #[test]
        fn mutated_packets_never_panic_and_truncate_consistently(
            which in 0..FIXTURES.len(),
            flips in proptest::collection::vec((any::<proptest::sample::Index>(), 1u8..), 0..6),
            tail in proptest::collection::vec(any::<u8>(), 0..32),
            keep in any::<proptest::sample::Index>(),
        ) {
            let (linktype, packet) = FIXTURES[which];
            let mut p = packet.to_vec();
            for (at, xor) in flips {
                let i = at.index(p.len());
                p[i] ^= xor;
            }
            p.truncate(keep.index(p.len() + 1));
            p.extend_from_slice(&tail);
            let full = dissect(linktype, &p);
            check_invariants(&full);
            for len in 0..p.len() {
                let part = dissect(linktype, &p[..len]);
                check_invariants(&part);
                check_prefix_of(&part, &full);
            }
        }
    }
}
