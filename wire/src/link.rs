//! The link layer: from a packet's link type and first bytes to its EtherType and the bytes
//! of the network layer.
//!
//! Owns Ethernet, Linux cooked capture (SLL and SLL2), BSD loopback (NULL and LOOP, the
//! address family in either byte order), the raw IP link types, and VLAN tags (802.1Q,
//! 802.1ad and the pre-standard 0x9100: two recorded, more skipped). [`link_layer`] hands
//! [`crate::ip`] a [`Net`]: IPv4 or IPv6 bytes, or nothing more to read.

use crate::ethertype::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_MPLS, ETHERTYPE_MPLS_MC, ETHERTYPE_PPPOE_SESSION,
    ETHERTYPE_QINQ, ETHERTYPE_QINQ_OLD, ETHERTYPE_VLAN,
};
use crate::linktype::{
    LinkType, LINKTYPE_ETHERNET, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2, LINKTYPE_LOOP, LINKTYPE_NULL, LINKTYPE_RAW, LINKTYPE_RAW_BSD,
    LINKTYPE_RAW_OPENBSD,
};
use crate::view::Reader;
use crate::{header, ip, Malformed, UNBOUNDED};
use crate::{Dissected, EncapKind};

/// `AF_INET` in every BSD.
const AF_INET: u32 = 2;
/// `AF_INET6` in NetBSD/OpenBSD (24), FreeBSD (28) and macOS (30).
const AF_INET6: [u32; 3] = [24, 28, 30];

/// Field offsets of the link-layer headers, as in smoltcp's `field` modules. `LEN` is the
/// fixed part the view is made over; multi-byte fields are big-endian unless said otherwise,
/// their width set by the accessor that reads them.
mod field {
    pub mod ethernet {
        pub const ETHERTYPE: usize = 12;
        pub const LEN: usize = 14;
    }
    /// One 802.1Q / 802.1ad tag after its TPID: TCI, then the next EtherType.
    pub mod vlan {
        pub const TCI: usize = 0;
        pub const ETHERTYPE: usize = 2;
        pub const LEN: usize = 4;
    }
    /// One MPLS label stack entry: label (20 bits), traffic class, bottom of stack, TTL.
    /// A pseudowire control word is 4 bytes.
    pub mod mpls {
        pub const ENTRY: usize = 0;
        pub const LEN: usize = 4;
        pub const CONTROL_WORD: usize = 4;
    }
    /// The PPPoE session header (RFC 2516) and the PPP protocol field after it.
    pub mod pppoe {
        pub const SESSION: usize = 2;
        pub const PROTOCOL: usize = 6;
        pub const LEN: usize = 8;
        pub const PPP_IPV4: u16 = 0x0021;
        pub const PPP_IPV6: u16 = 0x0057;
    }
    pub mod sll {
        pub const PROTOCOL: usize = 14;
        pub const LEN: usize = 16;
    }
    pub mod sll2 {
        pub const PROTOCOL: usize = 0;
        pub const LEN: usize = 20;
    }
    /// The address family, in whichever byte order the writer used.
    pub mod null {
        pub const FAMILY: usize = 0;
        pub const LEN: usize = 4;
    }
}

/// What the network layer hands on: the packet's remaining bytes and what they must be.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Net<'a> {
    Ipv4(&'a [u8]),
    Ipv6(&'a [u8]),
    /// Not IP (ARP, LLC, an unknown family): nothing more to read, and nothing wrong.
    None,
}

/// The link layer, VLAN tags, MPLS label stacks and PPPoE sessions: records the tags read in
/// `d.vlans` and the shims in `d.encap` (even when a later
/// one is cut) and returns the EtherType after them (0 for link types without one) with
/// what comes next. Shared by [`dissect`](crate::dissect) and [`dscp_of`](crate::dscp_of).
#[inline(always)]
pub(crate) fn link_layer<'a>(
    d: &mut Dissected,
    linktype: LinkType,
    data: &'a [u8],
) -> Result<(u16, Net<'a>), Malformed> {
    Ok(match linktype {
        LINKTYPE_ETHERNET => {
            let (eth, rest) = header::<{ field::ethernet::LEN }>(data, UNBOUNDED, "ethernet")?;
            ethertype(d, eth.u16_be::<{ field::ethernet::ETHERTYPE }>(), rest)?
        }
        LINKTYPE_LINUX_SLL => {
            let (sll, rest) = header::<{ field::sll::LEN }>(data, UNBOUNDED, "sll")?;
            ethertype(d, sll.u16_be::<{ field::sll::PROTOCOL }>(), rest)?
        }
        LINKTYPE_LINUX_SLL2 => {
            let (sll, rest) = header::<{ field::sll2::LEN }>(data, UNBOUNDED, "sll2")?;
            ethertype(d, sll.u16_be::<{ field::sll2::PROTOCOL }>(), rest)?
        }
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            let layer = if linktype == LINKTYPE_NULL {
                "null"
            } else {
                "loop"
            };
            let (h, rest) = header::<{ field::null::LEN }>(data, UNBOUNDED, layer)?;
            // Families are small numbers: whichever byte order leaves the high half zero is
            // the writer's (NULL is host order, LOOP network order, and both get mislabelled).
            let family = h.u32_be::<{ field::null::FAMILY }>();
            let family = if family >> 16 == 0 {
                family
            } else {
                family.swap_bytes()
            };
            let net = if family == AF_INET {
                Net::Ipv4(rest)
            } else if AF_INET6.contains(&family) {
                Net::Ipv6(rest)
            } else {
                Net::None
            };
            (0, net)
        }
        LINKTYPE_RAW | LINKTYPE_RAW_BSD | LINKTYPE_RAW_OPENBSD => match Reader::new(data).u8() {
            Ok(b) if b >> 4 == 4 => (0, Net::Ipv4(data)),
            Ok(b) if b >> 4 == 6 => (0, Net::Ipv6(data)),
            Ok(_) => {
                return Err(Malformed::Invalid {
                    layer: "ip",
                    what: "version",
                })
            }
            Err(_) => {
                return Err(Malformed::Truncated {
                    layer: "ip",
                    needed: ip::field::ipv4::LEN,
                    found: 0,
                })
            }
        },
        LINKTYPE_IPV4 => (0, Net::Ipv4(data)),
        LINKTYPE_IPV6 => (0, Net::Ipv6(data)),
        _ => (0, Net::None),
    })
}

/// Follows VLAN tags from `ethertype` on, recording them in `vlans`, and returns the
/// EtherType after them with what comes next. The tag loop needs no bound: every tag
/// consumes 4 bytes of a finite packet.
#[inline(always)]
pub(crate) fn ethertype<'a>(
    d: &mut Dissected,
    mut ethertype: u16,
    mut data: &'a [u8],
) -> Result<(u16, Net<'a>), Malformed> {
    // Every turn of the loop consumes at least 4 bytes of a finite packet or returns.
    loop {
        match ethertype {
            ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD => {
                let (tag, rest) = header::<{ field::vlan::LEN }>(data, UNBOUNDED, "vlan")?;
                if let Some(slot) = d.vlans.iter_mut().find(|v| v.is_none()) {
                    *slot = Some(tag.u16_be::<{ field::vlan::TCI }>() & 0x0fff);
                }
                ethertype = tag.u16_be::<{ field::vlan::ETHERTYPE }>();
                data = rest;
            }
            ETHERTYPE_MPLS | ETHERTYPE_MPLS_MC => {
                let mut top = None;
                loop {
                    let (entry, rest) = header::<{ field::mpls::LEN }>(data, UNBOUNDED, "mpls")?;
                    let word = entry.u32_be::<{ field::mpls::ENTRY }>();
                    top.get_or_insert(word >> 12);
                    data = rest;
                    if word & 0x100 != 0 {
                        break;
                    }
                }
                let e = Dissected::shim(&mut d.encap, EncapKind::Mpls);
                e.mpls = e.mpls.or(top);
                // The payload has no type field: guess it from its first nibble, as tcpdump
                // and Wireshark do: 4 IPv4, 6 IPv6, 1 an associated channel (not followed),
                // anything else an Ethernet frame (a pseudowire), taken only when its
                // EtherType is one read here. With a first nibble of 0 the frame may start
                // with a control word: an Ethernet frame straight after the stack is tried
                // first (as Wireshark does; many MACs start with 0), then one after a
                // 4-byte control word.
                let Some(first) = data.first() else {
                    return Ok((ethertype, Net::None));
                };
                let nibble = first >> 4;
                match nibble {
                    4 => return Ok((ETHERTYPE_IPV4, Net::Ipv4(data))),
                    6 => return Ok((ETHERTYPE_IPV6, Net::Ipv6(data))),
                    1 => return Ok((ethertype, Net::None)),
                    _ => {}
                }
                let pseudowire = |at: usize| {
                    let eth = data.get(at..)?;
                    let (h, rest) =
                        header::<{ field::ethernet::LEN }>(eth, UNBOUNDED, "ethernet").ok()?;
                    let inner = h.u16_be::<{ field::ethernet::ETHERTYPE }>();
                    followed(inner).then_some((inner, rest))
                };
                let found = pseudowire(0).or_else(|| {
                    if nibble == 0 {
                        pseudowire(field::mpls::CONTROL_WORD)
                    } else {
                        None
                    }
                });
                let Some((inner, rest)) = found else {
                    return Ok((ethertype, Net::None));
                };
                ethertype = inner;
                data = rest;
            }
            ETHERTYPE_PPPOE_SESSION => {
                let (h, rest) = header::<{ field::pppoe::LEN }>(data, UNBOUNDED, "pppoe")?;
                let e = Dissected::shim(&mut d.encap, EncapKind::Pppoe);
                if e.kind == EncapKind::Pppoe {
                    e.id =
                        e.id.or(Some(u32::from(h.u16_be::<{ field::pppoe::SESSION }>())));
                }
                return Ok(match h.u16_be::<{ field::pppoe::PROTOCOL }>() {
                    field::pppoe::PPP_IPV4 => (ETHERTYPE_IPV4, Net::Ipv4(rest)),
                    field::pppoe::PPP_IPV6 => (ETHERTYPE_IPV6, Net::Ipv6(rest)),
                    _ => (ethertype, Net::None),
                });
            }
            ETHERTYPE_IPV4 => return Ok((ethertype, Net::Ipv4(data))),
            ETHERTYPE_IPV6 => return Ok((ethertype, Net::Ipv6(data))),
            _ => return Ok((ethertype, Net::None)),
        }
    }
}

/// EtherTypes the link layer reads further: what an Ethernet frame guessed inside an MPLS
/// payload must carry to be taken for one.
fn followed(ethertype: u16) -> bool {
    matches!(
        ethertype,
        ETHERTYPE_IPV4
            | ETHERTYPE_IPV6
            | ETHERTYPE_VLAN
            | ETHERTYPE_QINQ
            | ETHERTYPE_QINQ_OLD
            | ETHERTYPE_MPLS
            | ETHERTYPE_MPLS_MC
            | ETHERTYPE_PPPOE_SESSION
    )
}

#[cfg(test)]
mod tests {
    use crate::fixtures::*;
    use crate::*;

    #[test]
    fn vlan_ipv4_udp_dns() {
        let d = dissect(1, &VLAN_IPV4_UDP_DNS);
        assert_eq!(
            d,
            Dissected {
                vlans: [Some(100), None, None],
                ethertype: 0x0800,
                ip: Some(IpInfo {
                    version: 4,
                    src: addr("10.0.0.2"),
                    dst: addr("10.0.0.53"),
                    proto: 17,
                    dscp: 0,
                    ecn: 0,
                    ttl: 64,
                    fragment: None,
                    payload_len: 37,
                }),
                l4: L4::Udp {
                    src_port: 54321,
                    dst_port: 53
                },
                encap: None,
                malformed: None,
            }
        );
        assert_eq!(d.l4.ports(), Some((54321, 53)));
    }

    #[test]
    fn qinq_ipv6_icmpv6() {
        assert_eq!(
            dissect(1, &QINQ_IPV6_ICMPV6),
            Dissected {
                vlans: [Some(200), Some(300), None],
                ethertype: 0x86dd,
                ip: Some(IpInfo {
                    version: 6,
                    src: addr("2001:db8::1"),
                    dst: addr("2001:db8::2"),
                    proto: 58,
                    dscp: 0,
                    ecn: 0,
                    ttl: 255,
                    fragment: None,
                    payload_len: 16,
                }),
                l4: L4::Icmp6 { kind: 128, code: 0 },
                encap: None,
                malformed: None,
            }
        );
    }

    #[test]
    fn four_tags_record_three_and_skip_the_fourth() {
        let mut p = Vec::from(&ETH_ARP[..12]);
        p.extend_from_slice(&[0x91, 0x00, 0x00, 0x01]); // old QinQ TPID, VLAN 1
        p.extend_from_slice(&[0x88, 0xa8, 0xf0, 0x02]); // 802.1ad, PCP 7, VLAN 2
        p.extend_from_slice(&[0x81, 0x00, 0x0f, 0xff]); // 802.1Q, VLAN 4095
        p.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]); // 802.1Q, VLAN 7: not recorded
        p.extend_from_slice(&ETH_ARP[12..]); // EtherType ARP + ARP
        let d = dissect(1, &p);
        assert_eq!(
            d,
            Dissected {
                vlans: [Some(1), Some(2), Some(4095)],
                ethertype: 0x0806,
                ..Dissected::default()
            }
        );
        // Cut inside the third tag: two tags known, the EtherType not yet.
        let cut = dissect(1, &p[..12 + 4 + 4 + 3]);
        assert_eq!(
            cut,
            Dissected {
                vlans: [Some(1), Some(2), None],
                ethertype: 0,
                encap: None,
                malformed: truncated("vlan", 4, 1),
                ..Dissected::default()
            }
        );
    }

    #[test]
    fn arp_is_not_ip_and_not_malformed() {
        assert_eq!(
            dissect(1, &ETH_ARP),
            Dissected {
                vlans: [None, None, None],
                ethertype: 0x0806,
                ip: None,
                l4: L4::None,
                encap: None,
                malformed: None,
            }
        );
    }

    #[test]
    fn raw_ip_v4_and_v6() {
        for linktype in [101, 12, 14, 228] {
            assert_eq!(
                dissect(linktype, &RAW_IPV4_ICMP),
                raw_ipv4_icmp(),
                "linktype {linktype}"
            );
        }
        for linktype in [101, 12, 14, 229] {
            assert_eq!(
                dissect(linktype, &RAW_IPV6_TCP_SYN),
                raw_ipv6_tcp_syn(),
                "linktype {linktype}"
            );
        }
        // The dedicated link types check the version instead of choosing by it.
        assert_eq!(
            dissect(228, &RAW_IPV6_TCP_SYN),
            Dissected {
                encap: None,
                malformed: invalid("ipv4", "version"),
                ..Dissected::default()
            }
        );
        // (Padded to 40 bytes, as the version is checked once the fixed header is whole.)
        assert_eq!(
            dissect(229, &[&RAW_IPV4_ICMP[..], &[0; 8]].concat()),
            Dissected {
                encap: None,
                malformed: invalid("ipv6", "version"),
                ..Dissected::default()
            }
        );
        assert_eq!(
            dissect(101, &[0x50; 40]),
            Dissected {
                encap: None,
                malformed: invalid("ip", "version"),
                ..Dissected::default()
            }
        );
        assert_eq!(
            dissect(101, &[]),
            Dissected {
                encap: None,
                malformed: truncated("ip", 20, 0),
                ..Dissected::default()
            }
        );
    }

    #[test]
    fn linux_sll() {
        assert_eq!(
            dissect(113, &SLL_IPV4_UDP),
            Dissected {
                vlans: [None, None, None],
                ethertype: 0x0800,
                ip: Some(IpInfo {
                    version: 4,
                    src: addr("192.0.2.1"),
                    dst: addr("192.0.2.123"),
                    proto: 17,
                    dscp: 4,
                    ecn: 0,
                    ttl: 64,
                    fragment: None,
                    payload_len: 16,
                }),
                l4: L4::Udp {
                    src_port: 40514,
                    dst_port: 514
                },
                encap: None,
                malformed: None,
            }
        );
        assert_eq!(
            dissect(113, &SLL_IPV4_UDP[..15]),
            Dissected {
                encap: None,
                malformed: truncated("sll", 16, 15),
                ..Dissected::default()
            }
        );
    }

    #[test]
    fn linux_sll2() {
        assert_eq!(
            dissect(276, &SLL2_IPV6_UDP),
            Dissected {
                vlans: [None, None, None],
                ethertype: 0x86dd,
                ip: Some(IpInfo {
                    version: 6,
                    src: addr("2001:db8::a"),
                    dst: addr("2001:db8::b"),
                    proto: 17,
                    dscp: 0,
                    ecn: 0,
                    ttl: 64,
                    fragment: None,
                    payload_len: 8,
                }),
                l4: L4::Udp {
                    src_port: 4789,
                    dst_port: 4789
                },
                encap: None,
                malformed: None,
            }
        );
    }

    #[test]
    fn null_and_loop_in_either_byte_order() {
        let with = |family: [u8; 4], ip: &[u8]| [&family[..], ip].concat();
        for linktype in [0, 108] {
            for family in [[2, 0, 0, 0], [0, 0, 0, 2]] {
                assert_eq!(
                    dissect(linktype, &with(family, &RAW_IPV4_ICMP)),
                    raw_ipv4_icmp()
                );
            }
            for family in [[24, 0, 0, 0], [0, 0, 0, 28], [30, 0, 0, 0], [0, 0, 0, 30]] {
                assert_eq!(
                    dissect(linktype, &with(family, &RAW_IPV6_TCP_SYN)),
                    raw_ipv6_tcp_syn()
                );
            }
            // An unknown family (AF_APPLETALK) is simply not IP.
            assert_eq!(
                dissect(linktype, &with([16, 0, 0, 0], &RAW_IPV4_ICMP)),
                Dissected::default()
            );
        }
        assert_eq!(
            dissect(0, &[2, 0, 0]),
            Dissected {
                encap: None,
                malformed: truncated("null", 4, 3),
                ..Dissected::default()
            }
        );
    }

    #[test]
    fn unknown_link_type_gives_the_default() {
        for linktype in [2, 105, 127, 147, 300, u16::MAX] {
            assert_eq!(
                dissect(linktype, &ETH_IPV4_TCP_OPTIONS),
                Dissected::default()
            );
        }
    }
}
