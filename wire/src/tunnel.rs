//! Tunnels carried by IP: GRE (key, transparent Ethernet bridging), ERSPAN type I, II and
//! III, and the UDP tunnels VXLAN, Geneve and GTP-U on their configured ports.
//!
//! [`open`] looks at what the transport layer found and, when it is a tunnel whose header
//! reads whole, returns the tunnel's kind and identifier with its payload ([`Inner`]); the
//! dissector then reads the payload as a packet of its own (see `lib.rs`). A tunnel header
//! that is cut or not understood opens nothing: the packet stays the outer one; cut by the
//! capture ([`cut_short`]), it is marked truncated like any other header.
//!
//! The UDP ports are process-wide settings ([`set_tunnel_ports`]), read with one relaxed
//! load per UDP packet.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::ethertype::{ETHERTYPE_ERSPAN, ETHERTYPE_ERSPAN3, ETHERTYPE_TEB};
use crate::ipproto;
use crate::transport::Transport;
use crate::view::{Reader, View};
use crate::{EncapKind, L4};

/// The UDP ports on which capsule opens UDP tunnels (the config's `[tunnels]` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelPorts {
    /// VXLAN (RFC 7348): 4789 by default; Linux's old default was 8472.
    pub vxlan: Vec<u16>,
    /// Geneve (RFC 8926): 6081.
    pub geneve: Vec<u16>,
    /// GTP-U (3GPP TS 29.281): 2152.
    pub gtpu: Vec<u16>,
}

impl Default for TunnelPorts {
    fn default() -> Self {
        TunnelPorts {
            vxlan: vec![4789],
            geneve: vec![6081],
            gtpu: vec![2152],
        }
    }
}

const NONE: u8 = 0;
const VXLAN: u8 = 1;
const GENEVE: u8 = 2;
const GTPU: u8 = 3;

/// Whether [`PORTS`] holds the ports (false: the defaults apply, without a table read).
static CUSTOM: AtomicBool = AtomicBool::new(false);
/// The tunnel kind of each UDP port, once [`set_tunnel_ports`] was called.
static PORTS: [AtomicU8; 65536] = [const { AtomicU8::new(NONE) }; 65536];

/// Sets the UDP ports on which every later dissection in this process opens VXLAN, Geneve
/// and GTP-U (a port listed twice keeps its last kind). Meant for start-up, before packets
/// are dissected: a dissection running meanwhile may see some ports old and some new.
pub fn set_tunnel_ports(ports: &TunnelPorts) {
    // Each port is stored once, with its new kind: a port in both the old and the new
    // setting never reads as none meanwhile.
    let mut kinds = vec![NONE; PORTS.len()];
    for (list, kind) in [
        (&ports.vxlan, VXLAN),
        (&ports.geneve, GENEVE),
        (&ports.gtpu, GTPU),
    ] {
        for &port in list {
            if let Some(k) = kinds.get_mut(usize::from(port)) {
                *k = kind;
            }
        }
    }
    if !CUSTOM.load(Ordering::Acquire) {
        for (p, port) in PORTS.iter().zip(0u16..) {
            p.store(port_kind(port), Ordering::Relaxed);
        }
    }
    for (p, k) in PORTS.iter().zip(kinds) {
        p.store(k, Ordering::Relaxed);
    }
    CUSTOM.store(true, Ordering::Release);
}

#[inline]
fn port_kind(port: u16) -> u8 {
    if CUSTOM.load(Ordering::Relaxed) {
        PORTS
            .get(usize::from(port))
            .map_or(NONE, |p| p.load(Ordering::Relaxed))
    } else {
        match port {
            4789 => VXLAN,
            6081 => GENEVE,
            2152 => GTPU,
            _ => NONE,
        }
    }
}

/// What a tunnel carries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Inner<'a> {
    /// An Ethernet frame.
    Ethernet(&'a [u8]),
    /// The bytes after an EtherType (GRE's and Geneve's protocol type).
    EtherType(u16, &'a [u8]),
    /// An IP packet, version by its first nibble (GTP-U).
    Ip(&'a [u8]),
}

/// An opened tunnel: its kind, identifier (GRE key, ERSPAN session, VNI, TEID) and payload.
pub(crate) struct Opened<'a> {
    pub(crate) kind: EncapKind,
    pub(crate) id: Option<u32>,
    pub(crate) inner: Inner<'a>,
}

/// The transport's payload, cut to the IP payload length (what follows it is link padding).
fn payload<'a>(t: &Transport<'a>, header: usize) -> Option<&'a [u8]> {
    let end = t.bound.min(t.data.len());
    t.data.get(header..end)
}

/// Why a tunnel header did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    /// Not a tunnel (its fields say otherwise).
    Not,
    /// The data ended inside the header.
    Short,
}

/// The tunnel the transport `t` (dissected as `l4`) carries, if it is one whose header
/// reads whole.
#[inline]
pub(crate) fn open<'a>(l4: &L4, t: &Transport<'a>) -> Option<Opened<'a>> {
    parse(l4, t).ok()
}

/// [`open`], saying why not.
fn parse<'a>(l4: &L4, t: &Transport<'a>) -> Result<Opened<'a>, Fail> {
    match (t.proto, *l4) {
        (ipproto::GRE, _) => gre(payload(t, 0).ok_or(Fail::Short)?),
        (ipproto::UDP, L4::Udp { src_port, dst_port }) => match kind_of_ports(src_port, dst_port) {
            NONE => Err(Fail::Not),
            kind => {
                let data = payload(t, 8).ok_or(Fail::Short)?;
                match kind {
                    VXLAN => vxlan(data),
                    GENEVE => geneve(data),
                    _ => gtpu(data),
                }
            }
        },
        _ => Err(Fail::Not),
    }
}

/// The tunnel kind of a UDP packet's ports (the destination's first).
fn kind_of_ports(src_port: u16, dst_port: u16) -> u8 {
    match port_kind(dst_port) {
        NONE => port_kind(src_port),
        k => k,
    }
}

/// Bytes past the end of the capture [`cut_short`] looks at for where a header ends.
const CUT_LOOKAHEAD: usize = 1024;

/// When [`open`] opened nothing because the capture ends inside the tunnel's header (its
/// data ran out before the header did, and the capture is shorter than the IP payload): the
/// tunnel's name, and how many bytes of the transport's data the header needs (where a
/// reading of the data with zeros after the captured bytes stops running out; at least one
/// more than captured). Cold: a snap length that cuts tunnelled traffic pays it, nothing
/// else.
#[cold]
pub(crate) fn cut_short(l4: &L4, t: &Transport<'_>) -> Option<(&'static str, usize)> {
    let have = t.data.len();
    if have >= t.bound || parse(l4, t).err() != Some(Fail::Short) {
        return None;
    }
    let name = match (t.proto, *l4) {
        (ipproto::UDP, L4::Udp { src_port, dst_port }) => match kind_of_ports(src_port, dst_port) {
            VXLAN => EncapKind::Vxlan.name(),
            GENEVE => EncapKind::Geneve.name(),
            _ => EncapKind::Gtpu.name(),
        },
        _ => EncapKind::Gre.name(),
    };
    let limit = t.bound.min(have.saturating_add(CUT_LOOKAHEAD));
    let mut padded = t.data.to_vec();
    padded.resize(limit, 0);
    let needed = (have + 1..=limit)
        .find(|&n| {
            parse(
                l4,
                &Transport {
                    data: &padded[..n],
                    ..*t
                },
            )
            .err()
                != Some(Fail::Short)
        })
        .unwrap_or(have + 1);
    Some((name, needed))
}

/// GRE (RFC 2784, key and sequence number of RFC 2890), version 0 only.
fn gre(data: &[u8]) -> Result<Opened<'_>, Fail> {
    let mut r = Reader::new(data);
    let flags = r.u16_be().map_err(|_| Fail::Short)?;
    let proto = r.u16_be().map_err(|_| Fail::Short)?;
    // Version 0, no routing (RFC 1701's source routes are not followed).
    if flags & 0x0007 != 0 || flags & 0x4000 != 0 {
        return Err(Fail::Not);
    }
    if flags & 0x8000 != 0 {
        r.skip(4).map_err(|_| Fail::Short)?; // checksum and reserved
    }
    let key = if flags & 0x2000 != 0 {
        Some(r.u32_be().map_err(|_| Fail::Short)?)
    } else {
        None
    };
    let seq = flags & 0x1000 != 0;
    if seq {
        r.skip(4).map_err(|_| Fail::Short)?;
    }
    let rest = r.rest();
    Ok(match proto {
        ETHERTYPE_TEB => Opened {
            kind: EncapKind::Gre,
            id: key,
            inner: Inner::Ethernet(rest),
        },
        // ERSPAN type I has no header and no sequence number; type II has both.
        ETHERTYPE_ERSPAN if !seq => Opened {
            kind: EncapKind::Erspan,
            id: None,
            inner: Inner::Ethernet(rest),
        },
        ETHERTYPE_ERSPAN => {
            let (h, eth) = View::<8>::split(rest).map_err(|_| Fail::Short)?;
            if h.u8::<0>() >> 4 != 1 {
                return Err(Fail::Not);
            }
            Opened {
                kind: EncapKind::Erspan,
                id: Some(u32::from(h.u16_be::<2>() & 0x03ff)),
                inner: Inner::Ethernet(eth),
            }
        }
        ETHERTYPE_ERSPAN3 => {
            let (h, after) = View::<12>::split(rest).map_err(|_| Fail::Short)?;
            if h.u8::<0>() >> 4 != 2 {
                return Err(Fail::Not);
            }
            // The O bit: an 8-byte platform-specific subheader follows.
            let eth = if h.u8::<11>() & 0x01 != 0 {
                after.get(8..).ok_or(Fail::Short)?
            } else {
                after
            };
            Opened {
                kind: EncapKind::Erspan,
                id: Some(u32::from(h.u16_be::<2>() & 0x03ff)),
                inner: Inner::Ethernet(eth),
            }
        }
        _ => Opened {
            kind: EncapKind::Gre,
            id: key,
            inner: Inner::EtherType(proto, rest),
        },
    })
}

/// VXLAN (RFC 7348): flags with the I bit, VNI, then an Ethernet frame.
fn vxlan(data: &[u8]) -> Result<Opened<'_>, Fail> {
    let (h, eth) = View::<8>::split(data).map_err(|_| Fail::Short)?;
    if h.u8::<0>() & 0x08 == 0 {
        return Err(Fail::Not);
    }
    Ok(Opened {
        kind: EncapKind::Vxlan,
        id: Some(h.u32_be::<4>() >> 8),
        inner: Inner::Ethernet(eth),
    })
}

/// Geneve (RFC 8926): version 0, options skipped by their length, VNI, protocol type.
fn geneve(data: &[u8]) -> Result<Opened<'_>, Fail> {
    let (h, _) = View::<8>::split(data).map_err(|_| Fail::Short)?;
    let first = h.u8::<0>();
    if first >> 6 != 0 {
        return Err(Fail::Not);
    }
    let len = 8 + usize::from(first & 0x3f) * 4;
    let rest = data.get(len..).ok_or(Fail::Short)?;
    let proto = h.u16_be::<2>();
    Ok(Opened {
        kind: EncapKind::Geneve,
        id: Some(h.u32_be::<4>() >> 8),
        inner: if proto == ETHERTYPE_TEB {
            Inner::Ethernet(rest)
        } else {
            Inner::EtherType(proto, rest)
        },
    })
}

/// GTP-U version 1 (3GPP TS 29.281): a T-PDU (message type 255) carries an IP packet after
/// the optional sequence number, N-PDU number and extension headers.
fn gtpu(data: &[u8]) -> Result<Opened<'_>, Fail> {
    let (h, _) = View::<8>::split(data).map_err(|_| Fail::Short)?;
    let flags = h.u8::<0>();
    // Version 1, protocol type GTP.
    if flags >> 5 != 1 || flags & 0x10 == 0 || h.u8::<1>() != 0xff {
        return Err(Fail::Not);
    }
    let mut r = Reader::new(data);
    r.skip(8).map_err(|_| Fail::Short)?;
    if flags & 0x07 != 0 {
        r.skip(3).map_err(|_| Fail::Short)?; // sequence number, N-PDU number
        let mut next = r.u8().map_err(|_| Fail::Short)?;
        // Each extension header is at least 4 bytes long: the loop ends with the packet.
        while next != 0 {
            let units = usize::from(r.u8().map_err(|_| Fail::Short)?);
            if units == 0 {
                return Err(Fail::Not);
            }
            r.skip(units * 4 - 2).map_err(|_| Fail::Short)?;
            next = r.u8().map_err(|_| Fail::Short)?;
        }
    }
    Ok(Opened {
        kind: EncapKind::Gtpu,
        id: Some(h.u32_be::<4>()),
        inner: Inner::Ip(r.rest()),
    })
}

/// Encapsulated packets for the tests, built around the fixtures.
#[cfg(test)]
pub(crate) mod build {
    /// An IPv4 header (checksum filled in) with `payload`.
    pub(crate) fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, dscp: u8, payload: &[u8]) -> Vec<u8> {
        let len = u16::try_from(20 + payload.len()).unwrap();
        let mut h = vec![0x45, dscp << 2];
        h.extend_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, proto, 0, 0]);
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        let mut sum = 0u32;
        for w in h.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        h.extend_from_slice(payload);
        h
    }

    /// A UDP header (checksum 0: none) with `payload`.
    pub(crate) fn udp(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&src.to_be_bytes());
        u.extend_from_slice(&dst.to_be_bytes());
        u.extend_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(payload);
        u
    }

    /// An Ethernet header of `ethertype` with `payload`.
    pub(crate) fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut e = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        e.extend_from_slice(&ethertype.to_be_bytes());
        e.extend_from_slice(payload);
        e
    }

    pub(crate) fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use crate::fixtures::*;
    use crate::*;
    use proptest::prelude::*;

    const A: [u8; 4] = [192, 0, 2, 1];
    const B: [u8; 4] = [192, 0, 2, 2];

    /// The inner Ethernet frame and its IP packet: ETH_IPV4_TCP_OPTIONS.
    fn inner_eth() -> &'static [u8] {
        &ETH_IPV4_TCP_OPTIONS
    }
    fn inner_ip() -> &'static [u8] {
        &ETH_IPV4_TCP_OPTIONS[14..]
    }

    /// `d` is the inner packet's dissection, in `kind` with `id`, outer A -> B with DSCP 10.
    fn check_inner(d: &Dissected, kind: EncapKind, id: Option<u32>) {
        let want = dissect(1, inner_eth());
        assert_eq!(d.ip, want.ip, "{d:?}");
        assert_eq!(d.l4, want.l4, "{d:?}");
        assert_eq!(d.malformed, None, "{d:?}");
        let e = d.encap.expect("encapsulated");
        assert_eq!(e.kind, kind);
        assert_eq!(e.id, id);
        assert_eq!(e.outer, Some((IpAddr::from(A), IpAddr::from(B))));
        assert_eq!(e.outer_dscp, Some(10));
    }

    fn over_ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
        eth(0x0800, &ipv4(A, B, proto, 10, payload))
    }

    pub(crate) fn vxlan(vni: u32) -> Vec<u8> {
        let mut h = vec![0x08, 0, 0, 0];
        h.extend_from_slice(&(vni << 8).to_be_bytes());
        over_ipv4(17, &udp(51000, 4789, &cat(&[&h, inner_eth()])))
    }

    pub(crate) fn gre_key_ip(key: u32) -> Vec<u8> {
        let mut h = vec![0x20, 0x00, 0x08, 0x00];
        h.extend_from_slice(&key.to_be_bytes());
        over_ipv4(47, &cat(&[&h, inner_ip()]))
    }

    pub(crate) fn gretap() -> Vec<u8> {
        over_ipv4(47, &cat(&[&[0x00, 0x00, 0x65, 0x58], inner_eth()]))
    }

    pub(crate) fn erspan2(session: u16) -> Vec<u8> {
        let mut h = vec![0x10, 0x00, 0x88, 0xbe, 0, 0, 0, 7]; // S bit, seq 7
        h.extend_from_slice(&[0x10, 0x00]);
        h.extend_from_slice(&session.to_be_bytes());
        h.extend_from_slice(&[0, 0, 0, 0]);
        over_ipv4(47, &cat(&[&h, inner_eth()]))
    }

    pub(crate) fn erspan3(session: u16, platform: bool) -> Vec<u8> {
        let mut h = vec![0x10, 0x00, 0x22, 0xeb, 0, 0, 0, 7];
        h.extend_from_slice(&[0x20, 0x00]);
        h.extend_from_slice(&session.to_be_bytes());
        h.extend_from_slice(&[1, 2, 3, 4, 0, 0, 0, u8::from(platform)]);
        if platform {
            h.extend_from_slice(&[0; 8]);
        }
        over_ipv4(47, &cat(&[&h, inner_eth()]))
    }

    pub(crate) fn geneve(vni: u32) -> Vec<u8> {
        // One 8-byte option (option length 2 words).
        let mut h = vec![0x02, 0x00, 0x65, 0x58];
        h.extend_from_slice(&(vni << 8).to_be_bytes());
        h.extend_from_slice(&[0x01, 0x02, 0x03, 0x01, 9, 9, 9, 9]);
        over_ipv4(17, &udp(51000, 6081, &cat(&[&h, inner_eth()])))
    }

    pub(crate) fn gtpu(teid: u32, ext: bool) -> Vec<u8> {
        let ip = inner_ip();
        let mut h = vec![if ext { 0x34 } else { 0x30 }, 0xff];
        let mut rest = Vec::new();
        if ext {
            // Sequence 0, N-PDU 0, next extension 0x85 (PDU session container, 1 word).
            rest.extend_from_slice(&[0, 0, 0, 0x85, 1, 0x10, 0x09, 0x00]);
        }
        rest.extend_from_slice(ip);
        h.extend_from_slice(&u16::try_from(rest.len()).unwrap().to_be_bytes());
        h.extend_from_slice(&teid.to_be_bytes());
        over_ipv4(17, &udp(2152, 2152, &cat(&[&h, &rest])))
    }

    pub(crate) fn mpls(labels: &[u32], payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        for (k, l) in labels.iter().enumerate() {
            let bos = u32::from(k + 1 == labels.len()) << 8;
            m.extend_from_slice(&((l << 12) | bos | 64).to_be_bytes());
        }
        eth(0x8847, &cat(&[&m, payload]))
    }

    pub(crate) fn pppoe(session: u16) -> Vec<u8> {
        let ip = inner_ip();
        let mut h = vec![0x11, 0x00];
        h.extend_from_slice(&session.to_be_bytes());
        h.extend_from_slice(&u16::try_from(ip.len() + 2).unwrap().to_be_bytes());
        h.extend_from_slice(&[0x00, 0x21]);
        eth(0x8864, &cat(&[&h, ip]))
    }

    #[test]
    fn vxlan_gre_erspan_geneve_gtpu_open_to_the_inner_packet() {
        check_inner(&dissect(1, &vxlan(42)), EncapKind::Vxlan, Some(42));
        check_inner(&dissect(1, &gre_key_ip(7)), EncapKind::Gre, Some(7));
        check_inner(&dissect(1, &gretap()), EncapKind::Gre, None);
        check_inner(&dissect(1, &erspan2(300)), EncapKind::Erspan, Some(300));
        check_inner(
            &dissect(1, &erspan3(301, false)),
            EncapKind::Erspan,
            Some(301),
        );
        check_inner(
            &dissect(1, &erspan3(302, true)),
            EncapKind::Erspan,
            Some(302),
        );
        check_inner(
            &dissect(1, &geneve(0xabcdef)),
            EncapKind::Geneve,
            Some(0xabcdef),
        );
        check_inner(
            &dissect(1, &gtpu(0x01020304, false)),
            EncapKind::Gtpu,
            Some(0x01020304),
        );
        check_inner(&dissect(1, &gtpu(9, true)), EncapKind::Gtpu, Some(9));
        // The lane DSCP is the inner packet's (0), not the outer one's (10).
        assert_eq!(dscp_of(1, &vxlan(42)), Some(0));
    }

    /// An encapsulation's key (what the side index compares packets by) follows its kind,
    /// endpoints, identifier and label, not its outer DSCP or layers, is never 0, and is
    /// the same in every build (stored indexes are compared with it): a fixed value.
    #[test]
    fn encap_keys_tell_encapsulations_apart_and_are_fixed() {
        let key = |f: &[u8]| dissect(1, f).encap.unwrap().key();
        let all: Vec<u32> = [vxlan(42), vxlan(43), geneve(42), gre_key_ip(42), gretap()]
            .iter()
            .map(|f| key(f))
            .collect();
        let distinct: std::collections::BTreeSet<u32> = all.iter().copied().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
        assert!(!all.contains(&0));
        let mut e = dissect(1, &vxlan(42)).encap.unwrap();
        let k = e.key();
        (e.outer_dscp, e.layers) = (Some(63), 9);
        assert_eq!(e.key(), k);
        e.outer = e.outer.map(|(s, d)| (d, s));
        assert_ne!(e.key(), k, "the other direction's endpoints");
        assert_eq!(
            crate::encap_key(EncapKind::Mpls, None, None, Some(16)),
            0x8263_68f7
        );
    }

    #[test]
    fn mpls_payload_is_guessed_by_its_first_nibble() {
        let want = dissect(1, inner_eth());
        // IPv4 straight after the stack.
        let d = dissect(1, &mpls(&[16, 17], inner_ip()));
        assert_eq!((d.ip, d.l4, d.ethertype), (want.ip, want.l4, 0x0800));
        let e = d.encap.unwrap();
        assert_eq!(
            (e.kind, e.mpls, e.outer, e.id),
            (EncapKind::Mpls, Some(16), None, None)
        );
        // A pseudowire control word, then Ethernet (EoMPLS).
        let d = dissect(1, &mpls(&[100], &cat(&[&[0, 0, 0, 0], inner_eth()])));
        assert_eq!((d.ip, d.l4), (want.ip, want.l4));
        // Ethernet without a control word (its first nibble is not 0, 1, 4 or 6).
        let mut frame = inner_eth().to_vec();
        frame[0] = 0xa2;
        let d = dissect(1, &mpls(&[100], &frame));
        assert_eq!((d.ip, d.l4), (want.ip, want.l4));
        // Junk after the stack: MPLS, nothing more.
        let d = dissect(1, &mpls(&[5], &[0x1f; 30]));
        assert_eq!((d.ip, d.ethertype, d.malformed), (None, 0x8847, None));
        assert_eq!(d.encap.unwrap().mpls, Some(5));
    }

    #[test]
    fn pppoe_session_carries_ip() {
        let d = dissect(1, &pppoe(0x1234));
        let want = dissect(1, inner_eth());
        assert_eq!((d.ip, d.l4, d.ethertype), (want.ip, want.l4, 0x0800));
        let e = d.encap.unwrap();
        assert_eq!((e.kind, e.id), (EncapKind::Pppoe, Some(0x1234)));
        assert_eq!(dscp_of(1, &pppoe(1)), want.ip.map(|ip| ip.dscp));
    }

    #[test]
    fn tunnels_nest_up_to_the_bound() {
        // VXLAN in VXLAN ... : the innermost packet is reached through MAX_TUNNEL_DEPTH
        // tunnels, and a deeper one is left closed.
        let mut p = inner_eth().to_vec();
        let wrap = |inner: &[u8]| {
            let h = [0x08, 0, 0, 0, 0, 0, 5, 0];
            eth(
                0x0800,
                &ipv4(A, B, 17, 10, &udp(1, 4789, &cat(&[&h, inner]))),
            )
        };
        for depth in 1..=MAX_TUNNEL_DEPTH + 1 {
            p = wrap(&p);
            let d = dissect(1, &p);
            assert_eq!(
                d.encap.map(|e| e.layers),
                Some(depth.min(MAX_TUNNEL_DEPTH) as u8)
            );
            if depth <= MAX_TUNNEL_DEPTH {
                assert_eq!(d.ip, dissect(1, inner_eth()).ip);
            } else {
                assert_eq!(d.l4.ports(), Some((1, 4789)));
            }
            assert_eq!(dscp_of(1, &p), d.ip.map(|ip| ip.dscp));
        }
    }

    #[test]
    fn a_cut_tunnel_stays_the_outer_packet() {
        let p = vxlan(42);
        let outer_len = 14 + 20 + 8 + 8 + 14 + 10;
        let d = dissect(1, &p[..outer_len]);
        assert_eq!(d.l4.ports(), Some((51000, 4789)));
        assert_eq!(d.ip.map(|ip| ip.dscp), Some(10));
        // The tunnel is noted all the same.
        assert_eq!(
            d.encap.map(|e| (e.kind, e.id)),
            Some((EncapKind::Vxlan, Some(42)))
        );
        // ARP inside VXLAN: not IP, so the packet is the tunnel's own, in VNI 42.
        let d = dissect(1, &vxlan_over(&ETH_ARP));
        assert_eq!(d.l4.ports(), Some((51000, 4789)));
        assert_eq!(d.encap.map(|e| e.id), Some(Some(42)));
    }

    fn vxlan_over(frame: &[u8]) -> Vec<u8> {
        let h = [0x08, 0, 0, 0, 0, 0, 42, 0];
        over_ipv4(17, &udp(51000, 4789, &cat(&[&h, frame])))
    }

    pub(crate) fn all() -> Vec<Vec<u8>> {
        vec![
            vxlan(42),
            gre_key_ip(7),
            gretap(),
            erspan2(1),
            erspan3(2, true),
            geneve(3),
            gtpu(4, true),
            mpls(&[16], inner_ip()),
            mpls(&[16, 17], &cat(&[&[0, 0, 0, 0], inner_eth()])),
            pppoe(5),
        ]
    }

    /// A capture that ends inside a tunnel's header says so (the outer packet, marked cut),
    /// as it does inside any other header: a longer capture of it would open the tunnel.
    /// Before, such a prefix read as a whole UDP packet (a proptest found it).
    #[test]
    fn a_tunnel_header_cut_by_the_capture_is_marked_truncated() {
        let p = vxlan(42);
        for len in 42..50 {
            let d = dissect(1, &p[..len]);
            assert_eq!(d.encap, None);
            assert_eq!(d.l4.ports(), Some((51000, 4789)));
            assert_eq!(
                d.malformed,
                Some(Malformed::Truncated {
                    layer: "vxlan",
                    needed: 16,
                    found: len - 34
                }),
                "{len}"
            );
        }
        // The header whole, the inner frame cut before its IP header: the tunnel is known
        // and the cut named.
        let d = dissect(1, &p[..50]);
        assert_eq!(
            d.encap.map(|e| (e.kind, e.id)),
            Some((EncapKind::Vxlan, Some(42)))
        );
        assert_eq!(
            d.malformed,
            Some(Malformed::Truncated {
                layer: "ethernet",
                needed: 14,
                found: 0
            })
        );
        // A GRE header cut after its flags: the key is still to come.
        let g = gre_key_ip(7);
        let d = dissect(1, &g[..34 + 6]);
        assert!(
            matches!(
                d.malformed,
                Some(Malformed::Truncated {
                    layer: "gre",
                    needed: 8,
                    found: 6
                })
            ),
            "{d:?}"
        );
    }

    #[test]
    fn every_truncation_of_every_tunnel_reads_and_agrees_on_dscp() {
        for p in all() {
            for len in 0..=p.len() {
                let d = dissect(1, &p[..len]);
                assert_eq!(
                    dscp_of(1, &p[..len]),
                    d.ip.map(|ip| ip.dscp),
                    "{len} {p:02x?}"
                );
                if let Some(ip) = d.ip {
                    assert!(ip.dscp < 64);
                }
            }
        }
    }

    #[test]
    fn configured_ports_open_vxlan_elsewhere() {
        // Only this test sets ports (the others use the defaults, which it restores).
        let mut p = vxlan(42);
        p[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&8472u16.to_be_bytes());
        assert_eq!(dissect(1, &p).encap, None);
        set_tunnel_ports(&TunnelPorts {
            vxlan: vec![4789, 8472],
            ..TunnelPorts::default()
        });
        let d = dissect(1, &p);
        set_tunnel_ports(&TunnelPorts::default());
        assert_eq!(d.encap.map(|e| e.id), Some(Some(42)));
    }

    proptest! {
        /// Any byte of any tunnel packet changed to anything: no panic, `dscp_of` agrees.
        #[test]
        fn mutated_tunnels_never_panic(k in 0usize..10, at in any::<prop::sample::Index>(),
                                       v in any::<u8>(), cut in any::<prop::sample::Index>()) {
            let mut p = all().swap_remove(k);
            let i = at.index(p.len());
            p[i] = v;
            let p = &p[..cut.index(p.len() + 1)];
            let d = dissect(1, p);
            prop_assert_eq!(dscp_of(1, p), d.ip.map(|ip| ip.dscp));
        }
    }
}
