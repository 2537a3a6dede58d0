//! The network layer: IPv4 (options skipped by IHL), and IPv6 with its extension header
//! chain (hop-by-hop, routing, destination options, fragment and AH; at most
//! [`MAX_EXT_HEADERS`], ending at ESP, no next header, or anything unknown).
//!
//! Each version has two steps. [`ipv4_header`] and [`ipv6_headers`] check what must hold
//! before any IP field is reported, and are shared with [`dscp_of`](crate::dscp_of);
//! [`ipv4`] and [`ipv6`] then fill [`IpInfo`] and hand the transport layer a [`Transport`]
//! (only at fragment offset 0).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ipproto;
use crate::transport::Transport;
use crate::view::View;
use crate::{header, skip, Dissected, Fragment, IpInfo, Malformed, PAST_PAYLOAD, UNBOUNDED};

/// Most IPv6 extension headers followed before the chain is called invalid. Real packets
/// carry at most a handful; each one costs at least 8 bytes, so this only bounds work.
const MAX_EXT_HEADERS: usize = 16;

/// Field offsets of the IP headers, as in smoltcp's `field` modules. `LEN` is the fixed
/// part the view is made over; multi-byte fields are big-endian, their width set by the
/// accessor that reads them.
pub(crate) mod field {
    pub mod ipv4 {
        pub const VER_IHL: usize = 0;
        pub const TOS: usize = 1;
        pub const LENGTH: usize = 2;
        pub const IDENT: usize = 4;
        pub const FLAGS_FRAG: usize = 6;
        pub const TTL: usize = 8;
        pub const PROTOCOL: usize = 9;
        pub const SRC: usize = 12;
        pub const DST: usize = 16;
        pub const LEN: usize = 20;
    }
    pub mod ipv6 {
        /// Version (4 bits), traffic class (8), flow label (20).
        pub const VER_TC_FLOW: usize = 0;
        pub const PAYLOAD_LEN: usize = 4;
        pub const NEXT_HEADER: usize = 6;
        pub const HOP_LIMIT: usize = 7;
        pub const SRC: usize = 8;
        pub const DST: usize = 24;
        pub const LEN: usize = 40;
    }
    /// The common start of hop-by-hop, routing, destination options and AH headers.
    pub mod ipv6_ext {
        pub const NEXT_HEADER: usize = 0;
        pub const LENGTH: usize = 1;
        /// The smallest extension header.
        pub const LEN: usize = 8;
    }
    pub mod ipv6_frag {
        pub const NEXT_HEADER: usize = 0;
        /// Offset (13 bits), reserved (2), M flag (1).
        pub const OFFSET_FLAGS: usize = 2;
        pub const IDENT: usize = 4;
        pub const LEN: usize = 8;
    }
}

/// An IPv4 header's fixed part (RFC 791).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ipv4Header<'a>(View<'a, { field::ipv4::LEN }>);

impl Ipv4Header<'_> {
    #[inline]
    fn version(self) -> u8 {
        self.0.u8::<{ field::ipv4::VER_IHL }>() >> 4
    }
    /// Header length in bytes, options included (IHL * 4).
    #[inline]
    fn header_len(self) -> u16 {
        u16::from(self.0.u8::<{ field::ipv4::VER_IHL }>() & 0x0f) * 4
    }
    #[inline]
    pub(crate) fn tos(self) -> u8 {
        self.0.u8::<{ field::ipv4::TOS }>()
    }
    #[inline]
    fn total_len(self) -> u16 {
        self.0.u16_be::<{ field::ipv4::LENGTH }>()
    }
    #[inline]
    fn ident(self) -> u16 {
        self.0.u16_be::<{ field::ipv4::IDENT }>()
    }
    #[inline]
    fn more_fragments(self) -> bool {
        self.0.u16_be::<{ field::ipv4::FLAGS_FRAG }>() & 0x2000 != 0
    }
    /// Fragment offset in 8-byte units.
    #[inline]
    fn frag_offset(self) -> u16 {
        self.0.u16_be::<{ field::ipv4::FLAGS_FRAG }>() & 0x1fff
    }
    #[inline]
    fn ttl(self) -> u8 {
        self.0.u8::<{ field::ipv4::TTL }>()
    }
    #[inline]
    pub(crate) fn protocol(self) -> u8 {
        self.0.u8::<{ field::ipv4::PROTOCOL }>()
    }
    #[inline]
    fn src(self) -> Ipv4Addr {
        Ipv4Addr::from(self.0.array::<{ field::ipv4::SRC }, 4>())
    }
    #[inline]
    fn dst(self) -> Ipv4Addr {
        Ipv4Addr::from(self.0.array::<{ field::ipv4::DST }, 4>())
    }
}

/// An IPv6 fixed header (RFC 8200).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ipv6Header<'a>(View<'a, { field::ipv6::LEN }>);

impl Ipv6Header<'_> {
    #[inline]
    fn version(self) -> u8 {
        (self.0.u32_be::<{ field::ipv6::VER_TC_FLOW }>() >> 28) as u8
    }
    #[inline]
    pub(crate) fn traffic_class(self) -> u8 {
        // Bits 4..12 of the first word; the mask makes the cast exact.
        ((self.0.u32_be::<{ field::ipv6::VER_TC_FLOW }>() >> 20) & 0xff) as u8
    }
    #[inline]
    fn payload_len(self) -> u16 {
        self.0.u16_be::<{ field::ipv6::PAYLOAD_LEN }>()
    }
    #[inline]
    fn next_header(self) -> u8 {
        self.0.u8::<{ field::ipv6::NEXT_HEADER }>()
    }
    #[inline]
    fn hop_limit(self) -> u8 {
        self.0.u8::<{ field::ipv6::HOP_LIMIT }>()
    }
    #[inline]
    fn src(self) -> Ipv6Addr {
        Ipv6Addr::from(self.0.array::<{ field::ipv6::SRC }, 16>())
    }
    #[inline]
    fn dst(self) -> Ipv6Addr {
        Ipv6Addr::from(self.0.array::<{ field::ipv6::DST }, 16>())
    }
}

/// An IPv4 header whose fixed part is whole and consistent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ipv4Checked<'a> {
    pub(crate) header: Ipv4Header<'a>,
    /// Header length in bytes, options included (at least 20).
    header_len: u16,
    /// Total length minus header length.
    payload_len: u16,
}

/// The checks an IPv4 header passes before [`dissect`](crate::dissect) reports any IP field:
/// the fixed part is captured, the version is 4, the IHL at least 5, the total length at least
/// the header. Shared by [`dissect`](crate::dissect) and [`dscp_of`](crate::dscp_of).
#[inline(always)]
pub(crate) fn ipv4_header(data: &[u8]) -> Result<Ipv4Checked<'_>, Malformed> {
    const LAYER: &str = "ipv4";
    let (h, _) = header::<{ field::ipv4::LEN }>(data, UNBOUNDED, LAYER)?;
    let h = Ipv4Header(h);
    if h.version() != 4 {
        return Err(Malformed::Invalid {
            layer: LAYER,
            what: "version",
        });
    }
    let header_len = h.header_len();
    if usize::from(header_len) < field::ipv4::LEN {
        return Err(Malformed::Invalid {
            layer: LAYER,
            what: "header length",
        });
    }
    let Some(payload_len) = h.total_len().checked_sub(header_len) else {
        return Err(Malformed::Invalid {
            layer: LAYER,
            what: "total length",
        });
    };
    Ok(Ipv4Checked {
        header: h,
        header_len,
        payload_len,
    })
}

/// The IPv4 header: fills `d.ip` once the fixed header is whole and consistent.
#[inline]
pub(crate) fn ipv4<'a>(
    d: &mut Dissected,
    data: &'a [u8],
) -> Result<Option<Transport<'a>>, Malformed> {
    let Ipv4Checked {
        header: h,
        header_len,
        payload_len,
    } = ipv4_header(data)?;
    let (offset, more) = (h.frag_offset(), h.more_fragments());
    let tos = h.tos();
    d.ip = Some(IpInfo {
        version: 4,
        src: IpAddr::V4(h.src()),
        dst: IpAddr::V4(h.dst()),
        proto: h.protocol(),
        dscp: tos >> 2,
        ecn: tos & 0x03,
        ttl: h.ttl(),
        fragment: (more || offset != 0).then_some(Fragment {
            offset,
            more,
            id: u32::from(h.ident()),
        }),
        payload_len: u32::from(payload_len),
    });
    let rest = skip(data, usize::from(header_len), "ipv4")?;
    if offset != 0 {
        return Ok(None);
    }
    Ok(Some(Transport {
        proto: h.protocol(),
        data: rest,
        bound: usize::from(payload_len),
        payload_len: u32::from(payload_len),
    }))
}

/// Where an IPv6 extension header chain ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ipv6Chain<'a> {
    /// The next header after the chain: the transport protocol, ESP, no next header, or
    /// anything unknown.
    pub(crate) next: u8,
    /// Captured bytes after the chain.
    rest: &'a [u8],
    /// The payload length as a bound for what follows the fixed header ([`UNBOUNDED`] for
    /// a jumbogram or GSO packet).
    bound: usize,
    /// Bytes of extension headers read; never more than `bound`.
    used: usize,
    fragment: Option<Fragment>,
}

/// The IPv6 fixed header and its extension header chain, read as far as
/// [`dissect`](crate::dissect) reads before it reports any IP field (`proto`, `fragment` and
/// `payload_len` depend on the chain). Shared by [`dissect`](crate::dissect) and
/// [`dscp_of`](crate::dscp_of).
#[inline(always)]
pub(crate) fn ipv6_headers(data: &[u8]) -> Result<(Ipv6Header<'_>, Ipv6Chain<'_>), Malformed> {
    const LAYER: &str = "ipv6";
    const EXT: &str = "ipv6 extension header";
    let (h, mut rest) = header::<{ field::ipv6::LEN }>(data, UNBOUNDED, LAYER)?;
    let h = Ipv6Header(h);
    if h.version() != 6 {
        return Err(Malformed::Invalid {
            layer: LAYER,
            what: "version",
        });
    }
    let payload_len = h.payload_len();
    let mut next = h.next_header();
    // A payload length of 0 with something after the header is a jumbogram (RFC 2675) or a
    // GSO packet seen before segmentation: its length is not in this field, so nothing is
    // checked against it.
    let bound = if payload_len == 0 && next != ipproto::NONE {
        UNBOUNDED
    } else {
        usize::from(payload_len)
    };
    // Bytes of extension headers read so far; never more than `bound`.
    let mut used = 0usize;
    let mut headers = 0usize;
    let mut fragment = None;
    loop {
        if !matches!(
            next,
            ipproto::HOPOPTS
                | ipproto::ROUTING
                | ipproto::DSTOPTS
                | ipproto::AH
                | ipproto::FRAGMENT
        ) {
            // ESP, no next header, a transport, or anything unknown ends the chain.
            break;
        }
        if headers == MAX_EXT_HEADERS {
            return Err(Malformed::Invalid {
                layer: EXT,
                what: "too many extension headers",
            });
        }
        let left = bound.saturating_sub(used);
        let len = if next == ipproto::FRAGMENT {
            let (f, after) = header::<{ field::ipv6_frag::LEN }>(rest, left, EXT)?;
            let word = f.u16_be::<{ field::ipv6_frag::OFFSET_FLAGS }>();
            fragment = Some(Fragment {
                offset: word >> 3,
                more: word & 0x0001 != 0,
                id: f.u32_be::<{ field::ipv6_frag::IDENT }>(),
            });
            rest = after;
            next = f.u8::<{ field::ipv6_frag::NEXT_HEADER }>();
            field::ipv6_frag::LEN
        } else {
            let (e, _) = header::<{ field::ipv6_ext::LEN }>(rest, left, EXT)?;
            let units = usize::from(e.u8::<{ field::ipv6_ext::LENGTH }>());
            // AH counts 4-byte units minus 2 (RFC 4302); the others 8-byte units minus 1.
            let len = if next == ipproto::AH {
                (units + 2) * 4
            } else {
                (units + 1) * 8
            };
            if len > left {
                return Err(Malformed::Invalid {
                    layer: EXT,
                    what: PAST_PAYLOAD,
                });
            }
            rest = skip(rest, len, EXT)?;
            next = e.u8::<{ field::ipv6_ext::NEXT_HEADER }>();
            len
        };
        used = used.saturating_add(len);
        headers = headers.saturating_add(1);
        if fragment.is_some_and(|f| f.offset != 0) {
            // What follows is the middle of the original packet, not more headers.
            break;
        }
    }
    Ok((
        h,
        Ipv6Chain {
            next,
            rest,
            bound,
            used,
            fragment,
        },
    ))
}

/// The IPv6 header and its extension headers: fills `d.ip` once the whole chain is read,
/// since `proto`, `fragment` and `payload_len` depend on it.
#[inline]
pub(crate) fn ipv6<'a>(
    d: &mut Dissected,
    data: &'a [u8],
) -> Result<Option<Transport<'a>>, Malformed> {
    let (
        h,
        Ipv6Chain {
            next,
            rest,
            bound,
            used,
            fragment,
        },
    ) = ipv6_headers(data)?;
    let ip_payload =
        u32::from(h.payload_len()).saturating_sub(u32::try_from(used).unwrap_or(u32::MAX));
    d.ip = Some(IpInfo {
        version: 6,
        src: IpAddr::V6(h.src()),
        dst: IpAddr::V6(h.dst()),
        proto: next,
        dscp: h.traffic_class() >> 2,
        ecn: h.traffic_class() & 0x03,
        ttl: h.hop_limit(),
        fragment,
        payload_len: ip_payload,
    });
    if fragment.is_some_and(|f| f.offset != 0) || next == ipproto::NONE {
        return Ok(None);
    }
    Ok(Some(Transport {
        proto: next,
        data: rest,
        bound: bound.saturating_sub(used),
        payload_len: ip_payload,
    }))
}

#[cfg(test)]
mod tests {
    use crate::fixtures::*;
    use crate::*;

    #[test]
    fn ipv6_hop_by_hop_fragment_header_udp_first_fragment() {
        assert_eq!(
            dissect(1, &IPV6_HBH_FRAG_UDP),
            Dissected {
                vlans: [None, None, None],
                ethertype: 0x86dd,
                ip: Some(IpInfo {
                    version: 6,
                    src: addr("fe80::1"),
                    dst: addr("ff02::fb"),
                    proto: 17,
                    dscp: 46,
                    ecn: 0,
                    ttl: 1,
                    fragment: Some(Fragment {
                        offset: 0,
                        more: true,
                        id: 0xdead_beef
                    }),
                    payload_len: 24,
                }),
                l4: L4::Udp {
                    src_port: 5353,
                    dst_port: 5353
                },
                encap: None,
                malformed: None,
            }
        );
    }

    #[test]
    fn ipv6_non_first_fragment_has_no_transport() {
        assert_eq!(
            dissect(229, &IPV6_FRAG_NON_FIRST),
            Dissected {
                vlans: [None, None, None],
                ethertype: 0,
                ip: Some(IpInfo {
                    version: 6,
                    src: addr("fe80::1"),
                    dst: addr("ff02::fb"),
                    proto: 17,
                    dscp: 0,
                    ecn: 0,
                    ttl: 1,
                    fragment: Some(Fragment {
                        offset: 3,
                        more: false,
                        id: 0xdead_beef
                    }),
                    payload_len: 8,
                }),
                l4: L4::None,
                encap: None,
                malformed: None,
            }
        );
    }

    #[test]
    fn ipv4_non_first_fragment_has_no_transport() {
        assert_eq!(
            dissect(228, &IPV4_FRAG_NON_FIRST),
            Dissected {
                vlans: [None, None, None],
                ethertype: 0,
                ip: Some(IpInfo {
                    version: 4,
                    src: addr("172.16.0.1"),
                    dst: addr("172.16.0.2"),
                    proto: 17,
                    dscp: 0,
                    ecn: 0,
                    ttl: 63,
                    fragment: Some(Fragment {
                        offset: 185,
                        more: false,
                        id: 0x4242
                    }),
                    payload_len: 8,
                }),
                l4: L4::None,
                encap: None,
                malformed: None,
            }
        );
    }

    #[test]
    fn ipv4_dscp_ecn_and_first_fragment() {
        assert_eq!(
            dissect(1, &IPV4_EF_ECN_UDP),
            Dissected {
                vlans: [None, None, None],
                ethertype: 0x0800,
                ip: Some(IpInfo {
                    version: 4,
                    src: addr("10.1.1.1"),
                    dst: addr("10.2.2.2"),
                    proto: 17,
                    dscp: 46,
                    ecn: 2,
                    ttl: 32,
                    fragment: Some(Fragment {
                        offset: 0,
                        more: true,
                        id: 0x0101
                    }),
                    payload_len: 24,
                }),
                l4: L4::Udp {
                    src_port: 16384,
                    dst_port: 16386
                },
                encap: None,
                malformed: None,
            }
        );
    }

    #[test]
    fn lying_ipv4_fields_are_invalid() {
        let mut p = ETH_IPV4_TCP_OPTIONS;
        p[14] = 0x44; // IHL 4
        assert_eq!(
            dissect(1, &p),
            Dissected {
                ethertype: 0x0800,
                encap: None,
                malformed: invalid("ipv4", "header length"),
                ..Dissected::default()
            }
        );
        let mut p = ETH_IPV4_TCP_OPTIONS;
        p[14] = 0x66; // version 6 under EtherType IPv4
        assert_eq!(dissect(1, &p).malformed, invalid("ipv4", "version"));
        let mut p = ETH_IPV4_TCP_OPTIONS;
        p[16..18].copy_from_slice(&[0x00, 0x14]); // total length 20 < IHL 6 * 4
        assert_eq!(dissect(1, &p).malformed, invalid("ipv4", "total length"));
        assert_eq!(dissect(1, &p).ip, None);
    }

    #[test]
    fn ipv6_extension_header_past_the_payload_is_invalid() {
        assert_eq!(
            dissect(229, &IPV6_EXT_PAST_END),
            Dissected {
                encap: None,
                malformed: invalid("ipv6 extension header", "runs past the IP payload length"),
                ..Dissected::default()
            }
        );
    }

    /// An IPv6 header (2001:db8::1 -> 2001:db8::2, hop limit 64) and `payload` after it.
    fn ipv6_with(next_header: u8, payload_len: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&payload_len.to_be_bytes());
        p.extend_from_slice(&[next_header, 64]);
        p.extend_from_slice(&QINQ_IPV6_ICMPV6[26..58]); // the addresses
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn ipv6_extension_chain_is_bounded_and_ends_at_esp() {
        // 16 destination options headers are followed; a 17th is too many.
        for (count, expect) in [
            (16, None),
            (
                17,
                invalid("ipv6 extension header", "too many extension headers"),
            ),
        ] {
            let mut payload = Vec::new();
            for i in 0..count {
                let next = if i + 1 == count { 59 } else { 60 };
                payload.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
            }
            let len = u16::try_from(payload.len()).unwrap();
            let d = dissect(229, &ipv6_with(60, len, &payload));
            assert_eq!(d.malformed, expect, "{count} headers");
            assert_eq!(
                d.ip.map(|ip| (ip.proto, ip.payload_len)),
                expect.is_none().then_some((59, 0))
            );
            assert_eq!(d.l4, L4::None);
        }
        // AH (length 4: 24 bytes) then ESP: proto 50, not dissected further.
        let mut ah = vec![50, 4, 0, 0];
        ah.extend_from_slice(&[0; 20]);
        ah.extend_from_slice(&[0xaa; 16]); // ESP SPI, sequence, data
        let d = dissect(229, &ipv6_with(51, 40, &ah));
        assert_eq!(d.ip.map(|ip| (ip.proto, ip.payload_len)), Some((50, 16)));
        assert_eq!((d.l4, d.malformed), (L4::Other, None));
    }

    #[test]
    fn ipv6_jumbo_payload_length_zero_is_not_checked() {
        // A GSO / BIG TCP packet: payload length 0, the TCP header read from the capture.
        let d = dissect(229, &ipv6_with(6, 0, &RAW_IPV6_TCP_SYN[40..]));
        assert_eq!(d.ip.map(|ip| ip.payload_len), Some(0));
        assert_eq!(
            d.l4,
            L4::Tcp(TcpInfo {
                payload_len: 0,
                ..syn_tcp()
            })
        );
        assert_eq!(d.malformed, None);
        // But payload length 0 with no next header is just empty.
        let d = dissect(229, &ipv6_with(59, 0, &[]));
        assert_eq!(
            (d.ip.map(|ip| ip.payload_len), d.l4, d.malformed),
            (Some(0), L4::None, None)
        );
    }

    fn syn_tcp() -> TcpInfo {
        match raw_ipv6_tcp_syn().l4 {
            L4::Tcp(t) => t,
            other => panic!("{other:?}"),
        }
    }
}
