//! Property tests: the parser never panics, the canonical form round-trips, and the planning
//! evaluators agree with the exact one.

use std::net::IpAddr;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use super::*;
use capsule_wire::{Fragment, IpInfo, TcpInfo, L4};

// Small pools, so that random filters and random packets often meet.
const V4: &[&str] = &["10.0.0.1", "10.0.0.2", "10.1.2.3", "192.168.1.1"];
const V6: &[&str] = &["fd00::1", "fd00::2", "2001:db8::1", "::"];
const PORTS: &[u16] = &[0, 53, 80, 443, 65535];
const VLANS: &[u16] = &[0, 100, 4095];
const DSCPS: &[u8] = &[0, 1, 10, 46, 63];
const PROTOS: &[u8] = &[1, 6, 17, 47, 58, 132, 200];

fn v4() -> impl Strategy<Value = IpAddr> {
    select(V4).prop_map(|s| s.parse().unwrap())
}

fn v6() -> impl Strategy<Value = IpAddr> {
    select(V6).prop_map(|s| s.parse().unwrap())
}

fn addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![v4(), v6()]
}

fn dir() -> impl Strategy<Value = Dir> {
    select(&[Dir::Any, Dir::Src, Dir::Dst, Dir::Both][..])
}

fn port() -> impl Strategy<Value = u16> {
    prop_oneof![select(PORTS), any::<u16>()]
}

fn dscp() -> impl Strategy<Value = u8> {
    prop_oneof![select(DSCPS), 0..64u8]
}

fn vlan() -> impl Strategy<Value = u16> {
    prop_oneof![select(VLANS), 0..4096u16]
}

fn proto() -> impl Strategy<Value = u8> {
    prop_oneof![select(PROTOS), any::<u8>()]
}

fn prim() -> impl Strategy<Value = Prim> {
    prop_oneof![
        (dir(), addr()).prop_map(|(d, a)| Prim::Host(d, a)),
        (dir(), addr(), 0..=128u8).prop_map(|(d, a, p)| {
            let max = if a.is_ipv4() { 32 } else { 128 };
            Prim::Net(d, Net::new(a, p.min(max)).unwrap())
        }),
        (dir(), port()).prop_map(|(d, p)| Prim::Port(d, p)),
        (dir(), port(), port()).prop_map(|(d, a, b)| Prim::PortRange(d, a.min(b), a.max(b))),
        proto().prop_map(Prim::Proto),
        Just(Prim::Ip4),
        Just(Prim::Ip6),
        proptest::option::of(vlan()).prop_map(Prim::Vlan),
        dscp().prop_map(Prim::Dscp),
        (
            any::<u8>(),
            select(&[Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge][..]),
            any::<u8>()
        )
            .prop_map(|(mask, op, value)| Prim::TcpFlags { mask, op, value }),
        (
            select(&[Dir::Any, Dir::Src, Dir::Dst, Dir::Both][..]),
            any::<[u8; 6]>()
        )
            .prop_map(|(d, m)| Prim::Ether(d, m)),
        Just(Prim::Arp),
        any::<u32>().prop_map(Prim::Greater),
        any::<u32>().prop_map(Prim::Less),
    ]
}

fn expr() -> impl Strategy<Value = Expr> {
    prim()
        .prop_map(Expr::Prim)
        .prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                inner.clone().prop_map(Expr::not),
                vec(inner.clone(), 2..5).prop_map(Expr::and),
                vec(inner, 2..5).prop_map(Expr::or),
            ]
        })
}

fn filter() -> impl Strategy<Value = Filter> {
    prop_oneof![
        1 => Just(Filter::all()),
        20 => expr().prop_map(|e| Filter {
            reads_bytes: e.reads_bytes(),
            expr: Some(e),
        }),
    ]
}

fn l4() -> impl Strategy<Value = L4> {
    prop_oneof![
        Just(L4::None),
        Just(L4::Other),
        (port(), port(), any::<u8>()).prop_map(|(s, d, flags)| L4::Tcp(TcpInfo {
            src_port: s,
            dst_port: d,
            seq: 0,
            ack: 0,
            flags,
            window: 0,
            payload_len: 0,
        })),
        (port(), port()).prop_map(|(s, d)| L4::Udp {
            src_port: s,
            dst_port: d
        }),
        (port(), port()).prop_map(|(s, d)| L4::Sctp {
            src_port: s,
            dst_port: d
        }),
        any::<(u8, u8)>().prop_map(|(kind, code)| L4::Icmp { kind, code }),
        any::<(u8, u8)>().prop_map(|(kind, code)| L4::Icmp6 { kind, code }),
    ]
}

fn ip_info() -> impl Strategy<Value = IpInfo> {
    let frag = proptest::option::of(
        (0..3u16, any::<bool>()).prop_map(|(offset, more)| Fragment {
            offset,
            more,
            id: 1,
        }),
    );
    (
        prop_oneof![(Just(4u8), v4(), v4()), (Just(6u8), v6(), v6())],
        proto(),
        dscp(),
        frag,
    )
        .prop_map(|((version, src, dst), proto, dscp, fragment)| IpInfo {
            version,
            src,
            dst,
            proto,
            dscp,
            ecn: 0,
            ttl: 64,
            fragment,
            payload_len: 0,
        })
}

fn vlans() -> impl Strategy<Value = [Option<u16>; 2]> {
    (proptest::option::of(vlan()), proptest::option::of(vlan())).prop_map(|(a, b)| [a, b])
}

fn ip_packet() -> impl Strategy<Value = Dissected> {
    (vlans(), ip_info(), l4()).prop_map(|(vlans, ip, l4)| Dissected {
        vlans,
        ethertype: if ip.version == 4 { 0x0800 } else { 0x86dd },
        ip: Some(ip),
        l4,
        malformed: None,
    })
}

/// Not IP; the transport field is left random on purpose: it must be ignored.
fn non_ip_packet() -> impl Strategy<Value = Dissected> {
    (vlans(), any::<u16>(), l4()).prop_map(|(vlans, ethertype, l4)| Dissected {
        vlans,
        ethertype,
        ip: None,
        l4,
        malformed: None,
    })
}

const VOCABULARY: &[&str] = &[
    "host",
    "net",
    "port",
    "portrange",
    "src",
    "dst",
    "tcp",
    "udp",
    "sctp",
    "icmp",
    "icmp6",
    "ip",
    "ip6",
    "proto",
    "vlan",
    "dscp",
    "tcpflags",
    "syn",
    "rst",
    "tcp[tcpflags]",
    "tcp[13]",
    "&",
    "tcp-syn",
    "(tcp-syn|tcp-ack)",
    "!=",
    "==",
    ">",
    "0x12",
    "ether",
    "00:11:22:33:44:55",
    "arp",
    "greater",
    "less",
    "https",
    "10.50",
    "and",
    "or",
    "not",
    "AND",
    "&&",
    "||",
    "!",
    "(",
    ")",
    "&",
    "|",
    "10.0.0.1",
    "fd00::1",
    "10.0.0.0/8",
    "fd00::/8",
    "10.0.0.0/33",
    "::/129",
    "80",
    "65536",
    "1-2",
    "2-1",
    "0",
    "4095",
    "4096",
    "63",
    "64",
    "ef",
    "AF41",
    "cs8",
    "gre",
    "ipv6-icmp",
    "hots",
    "é",
    "\u{3000}",
    "\t",
    "",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(
        (select(VOCABULARY), select(&[" ", " ", " ", "", "\n"][..])),
        0..12,
    )
    .prop_map(|v| v.into_iter().flat_map(|(w, s)| [w, s]).collect())
}

/// Parses without panicking; a failure must describe a place inside the input, and a
/// success must round-trip through its canonical form.
fn check_parse(src: &str) -> Option<Filter> {
    match Filter::parse(src) {
        Ok(f) => {
            let text = f.to_string();
            assert_eq!(Filter::parse(&text).as_ref(), Ok(&f), "{src:?} -> {text:?}");
            // Canonical: printing the reparsed filter gives the same text.
            assert_eq!(Filter::parse(&text).unwrap().to_string(), text);
            Some(f)
        }
        Err(e) => {
            assert_eq!(e.input, src);
            assert!(e.pos <= src.len() && src.is_char_boundary(e.pos), "{e:?}");
            assert!(e.pos + e.len <= src.len(), "{e:?}");
            assert!(src.is_char_boundary(e.pos + e.len), "{e:?}");
            assert!(e.expected.len() > 1 && e.found.len() > 1, "{e:?}");
            let shown = e.to_string();
            assert_eq!(shown.lines().count(), 2, "{shown}");
            None
        }
    }
}

/// The planning invariants for one filter and one packet.
fn check_planning(f: &Filter, d: &Dissected, extra_dscps: &[u8]) {
    let exact = f.matches(d);
    let Some(side) = FlowSide::from_dissected(d) else {
        let plan = f.matches_non_ip();
        if exact {
            assert_ne!(plan, Tri::No, "{f} on {d:?}");
        } else {
            assert_ne!(plan, Tri::Yes, "{f} on {d:?}");
        }
        return;
    };
    // What the side index does not keep (TCP flags, MACs, lengths) makes planning unsure:
    // then it is only sound.
    if f.expr.as_ref().is_some_and(Expr::beyond_index) {
        // The generator pairs any protocol with any transport header; a "TCP" packet
        // without a TCP header has no flags to plan from.
        if side.proto == 6 && side.ports.is_some() && !matches!(d.l4, L4::Tcp(_)) {
            return;
        }
        let plan = f.matches_side(&side);
        assert!(
            plan == Tri::Maybe || plan == Tri::from(exact),
            "{f} on {side:?}"
        );
        return;
    }
    // A single packet's side is exact.
    assert_eq!(f.matches_side(&side), Tri::from(exact), "{f} on {side:?}");

    // Several DSCPs: exactly the combination of the single ones.
    let mut mask = side.dscp_mask;
    for &n in extra_dscps {
        mask |= 1 << n;
    }
    let with_dscp = |n: u8| {
        let mut d = d.clone();
        d.ip.as_mut().unwrap().dscp = n;
        f.matches(&d)
    };
    let singles: Vec<bool> = (0..64u8)
        .filter(|&n| mask & (1 << n) != 0)
        .map(|n| {
            let one = FlowSide {
                dscp_mask: 1 << n,
                ..side
            };
            let r = with_dscp(n);
            assert_eq!(f.matches_side(&one), Tri::from(r), "{f} on {one:?}");
            r
        })
        .collect();
    let expect = if singles.iter().all(|&b| b) {
        Tri::Yes
    } else if singles.iter().all(|&b| !b) {
        Tri::No
    } else {
        Tri::Maybe
    };
    let many = FlowSide {
        dscp_mask: mask,
        ..side
    };
    let got = f.matches_side(&many);
    assert_eq!(got, expect, "{f} on {many:?}");
    // Plain Kleene logic is sound with respect to the exact answer.
    let kleene = kleene_side(f, &many);
    assert!(
        kleene == Tri::Maybe || kleene == got,
        "{f}: kleene {kleene:?}, exact {got:?}"
    );

    // No DSCP information: every dscp primitive is false, as for an impossible code point.
    let none = FlowSide {
        dscp_mask: 0,
        ..side
    };
    assert_eq!(f.matches_side(&none), Tri::from(with_dscp(200)), "{f}");
}

/// The textbook evaluation of a side: `dscp N` is Yes / No / Maybe from the set alone.
fn kleene_side(f: &Filter, s: &FlowSide) -> Tri {
    let Some(e) = &f.expr else {
        return Tri::Yes;
    };
    let view = View {
        vlans: s.vlans,
        ip: Some(IpView {
            version: s.ip_version,
            proto: s.proto,
            src: s.src,
            dst: s.dst,
            ports: s.ports,
            dscp: None,
            flags_union: s.tcp_flags,
        }),
        frame: None,
    };
    e.eval_tri(&|p| match *p {
        Prim::Dscp(n) => {
            if s.dscp_mask == 1 << n {
                Tri::Yes
            } else if s.dscp_mask & (1 << n) == 0 {
                Tri::No
            } else {
                Tri::Maybe
            }
        }
        _ => view.prim(p),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn filter_prop_arbitrary_strings_never_panic(s in any::<String>()) {
        check_parse(&s);
    }

    #[test]
    fn filter_prop_printable_strings_never_panic(s in "[ -~]{0,40}") {
        check_parse(&s);
    }

    #[test]
    fn filter_prop_token_soup_never_panics(s in token_soup(), d in ip_packet(), n in non_ip_packet()) {
        if let Some(f) = check_parse(&s) {
            check_planning(&f, &d, &[]);
            check_planning(&f, &n, &[]);
        }
    }

    #[test]
    fn filter_prop_and_is_canonical_and_matches_both(
        a in filter(), b in filter(), d in ip_packet()
    ) {
        let both = a.clone().and(b.clone());
        prop_assert_eq!(Filter::parse(&both.to_string()), Ok(both.clone()), "{}", both);
        prop_assert_eq!(both.matches(&d), a.matches(&d) && b.matches(&d));
        prop_assert!(!Filter::nothing().matches(&d));
    }

    #[test]
    fn filter_prop_display_round_trips(f in filter()) {
        let text = f.to_string();
        prop_assert_eq!(Filter::parse(&text), Ok(f.clone()), "{}", text);
        // Also through the spelling variants the lexer accepts.
        let shouty = text.to_uppercase().replace(" AND ", "&&").replace(" OR ", " || ");
        prop_assert_eq!(Filter::parse(&shouty), Ok(f), "{}", shouty);
    }

    #[test]
    fn filter_prop_planning_agrees_with_matching(
        f in filter(),
        d in ip_packet(),
        extra in vec(dscp(), 0..4),
    ) {
        check_planning(&f, &d, &extra);
    }

    #[test]
    fn filter_prop_non_ip_planning_is_sound(f in filter(), d in non_ip_packet()) {
        check_planning(&f, &d, &[]);
    }
}
