//! Property tests: the parser never panics, the canonical form round-trips, and the planning
//! evaluators agree with the exact one; filters built with the public constructors
//! round-trip too, and match what the calls mean.

use std::net::IpAddr;
use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use super::*;
use capsule_wire::{Fragment, IpInfo, IpProto, TcpInfo, L4};

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

fn dir() -> impl Strategy<Value = Direction> {
    select(
        &[
            Direction::SrcOrDst,
            Direction::Src,
            Direction::Dst,
            Direction::SrcAndDst,
        ][..],
    )
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
            select(
                &[
                    Direction::SrcOrDst,
                    Direction::Src,
                    Direction::Dst,
                    Direction::SrcAndDst
                ][..]
            ),
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

/// Up to three tags, filled outermost first (as the dissector records them).
fn vlans() -> impl Strategy<Value = [Option<u16>; 3]> {
    (0usize..=3, vlan(), vlan(), vlan()).prop_map(|(n, a, b, c)| {
        let ids = [a, b, c];
        [0, 1, 2].map(|k| (k < n).then_some(ids[k]))
    })
}

fn ip_packet() -> impl Strategy<Value = Dissected> {
    (vlans(), ip_info(), l4()).prop_map(|(vlans, ip, l4)| Dissected {
        vlans,
        ethertype: if ip.version == 4 { 0x0800 } else { 0x86dd },
        ip: Some(ip),
        l4,
        encap: None,
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
        encap: None,
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
    if f.expr.as_ref().is_some_and(Expr::beyond_index_but_encap) {
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
    // A side keeps two VLAN tags: with both there, `vlan N` for another id may be a third
    // tag the side index does not keep, so planning is only sound.
    if side.vlans[1].is_some() && f.to_string().contains("vlan") {
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
        vlans: [s.vlans[0], s.vlans[1], None],
        vlans_partial: true,
        encap: None,
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
        prop_assert!(!Filter::all().not().matches(&d));
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

/// A packet as the public evaluator takes it: its dissection, link type, captured bytes and
/// length on the wire.
#[derive(Debug, Clone)]
struct Packet {
    d: Dissected,
    linktype: u16,
    data: Vec<u8>,
    wire_len: u32,
}

/// A filter as a caller outside this crate builds it, through the public constructors only,
/// beside what it means, stated here independently of the evaluator (the module docs'
/// semantics), and the calls that built it (for a failing case's report).
#[derive(Clone)]
struct Built {
    calls: String,
    filter: Filter,
    means: Arc<dyn Fn(&Packet) -> bool>,
}

impl fmt::Debug for Built {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.calls)
    }
}

impl Built {
    fn new(calls: String, filter: Filter, means: impl Fn(&Packet) -> bool + 'static) -> Built {
        Built {
            calls,
            filter,
            means: Arc::new(means),
        }
    }

    fn and(self, other: Built) -> Built {
        let (a, b) = (self.means, other.means);
        Built::new(
            format!("({}).and({})", self.calls, other.calls),
            self.filter.and(other.filter),
            move |p| a(p) && b(p),
        )
    }

    fn or(self, other: Built) -> Built {
        let (a, b) = (self.means, other.means);
        Built::new(
            format!("Filter::or({}, {})", self.calls, other.calls),
            Filter::or(self.filter, other.filter),
            move |p| a(p) || b(p),
        )
    }

    fn not(self) -> Built {
        let a = self.means;
        Built::new(format!("!({})", self.calls), !self.filter, move |p| !a(p))
    }
}

/// What a direction qualifier asks of the source and destination tests.
fn pick(dir: Direction, src: bool, dst: bool) -> bool {
    match dir {
        Direction::SrcOrDst => src || dst,
        Direction::Src => src,
        Direction::Dst => dst,
        Direction::SrcAndDst => src && dst,
    }
}

/// Whether `a` is in the network of the first `len` bits of `net` (same family only).
fn in_net(a: IpAddr, net: IpAddr, len: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            len == 0 || (u32::from(a) ^ u32::from(n)) >> (32 - u32::from(len)) == 0
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            len == 0 || (u128::from(a) ^ u128::from(n)) >> (128 - u32::from(len)) == 0
        }
        _ => false,
    }
}

/// The ports of an IP packet with a transport header.
fn ports_of(p: &Packet) -> Option<(u16, u16)> {
    p.d.ip.and_then(|_| p.d.l4.ports())
}

const MACS: &[[u8; 6]] = &[[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [0xff; 6]];
const LENS: &[u32] = &[0, 60, 64, 1500, 1514, 9000, u32::MAX];

fn any_addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        3 => addr(),
        1 => any::<[u8; 4]>().prop_map(IpAddr::from),
        1 => any::<[u8; 16]>().prop_map(IpAddr::from),
    ]
}

fn built_leaf() -> impl Strategy<Value = Built> {
    let ip = |p: &Packet| p.d.ip;
    prop_oneof![
        1 => Just(()).prop_map(|()| Built::new("Filter::all()".into(), Filter::all(), |_| true)),
        2 => (dir(), any_addr()).prop_map(move |(dir, a)| Built::new(
            format!("Filter::host({dir:?}, {a})"),
            Filter::host(dir, a),
            move |p| ip(p).is_some_and(|ip| pick(dir, ip.src == a, ip.dst == a)),
        )),
        2 => (dir(), any_addr(), any::<u8>()).prop_map(move |(dir, a, len)| {
            let len = len % if a.is_ipv4() { 33 } else { 129 };
            Built::new(
                format!("Filter::net({dir:?}, {a}, {len})?"),
                Filter::net(dir, a, len).expect("a prefix that fits"),
                move |p| {
                    let inside = |x: IpAddr| in_net(x, a, len);
                    ip(p).is_some_and(|ip| pick(dir, inside(ip.src), inside(ip.dst)))
                },
            )
        }),
        2 => (dir(), port()).prop_map(|(dir, n)| Built::new(
            format!("Filter::port({dir:?}, {n})"),
            Filter::port(dir, n),
            move |p| ports_of(p).is_some_and(|(s, t)| pick(dir, s == n, t == n)),
        )),
        1 => (dir(), port(), port()).prop_map(|(dir, a, b)| {
            let (lo, hi) = (a.min(b), a.max(b));
            Built::new(
                format!("Filter::port_range({dir:?}, {lo}, {hi})?"),
                Filter::port_range(dir, lo, hi).expect("lo <= hi"),
                move |p| {
                    let inside = |n: u16| (lo..=hi).contains(&n);
                    ports_of(p).is_some_and(|(s, t)| pick(dir, inside(s), inside(t)))
                },
            )
        }),
        2 => proto().prop_map(move |n| {
            let proto = IpProto::from(n);
            Built::new(
                format!("Filter::proto({proto:?})"),
                Filter::proto(proto),
                move |p| ip(p).is_some_and(|ip| ip.proto == n),
            )
        }),
        1 => select(&[4u8, 6][..]).prop_map(move |v| Built::new(
            format!("Filter::ip{v}()"),
            if v == 4 { Filter::ip4() } else { Filter::ip6() },
            move |p| ip(p).is_some_and(|ip| ip.version == v),
        )),
        1 => proptest::option::of(vlan()).prop_map(|id| Built::new(
            format!("Filter::vlan({id:?})?"),
            Filter::vlan(id).expect("a 12-bit id"),
            move |p| match id {
                None => p.d.vlans.iter().any(Option::is_some),
                Some(n) => p.d.vlans.contains(&Some(n)),
            },
        )),
        1 => dscp().prop_map(move |n| Built::new(
            format!("Filter::dscp({n})?"),
            Filter::dscp(n).expect("a 6-bit code point"),
            move |p| ip(p).is_some_and(|ip| ip.dscp == n),
        )),
        1 => Just(()).prop_map(|()| Built::new(
            "Filter::arp()".into(),
            Filter::arp(),
            |p| p.d.ethertype == 0x0806,
        )),
        1 => (dir(), select(MACS)).prop_map(|(dir, m)| Built::new(
            format!("Filter::ether({dir:?}, {m:?})"),
            Filter::ether(dir, m),
            // The destination MAC comes first in the frame.
            move |p| {
                let (dst, src) = (&p.data[..6], &p.data[6..12]);
                p.linktype == 1 && pick(dir, src == m, dst == m)
            },
        )),
        1 => select(LENS).prop_map(|n| Built::new(
            format!("Filter::greater({n})"),
            Filter::greater(n),
            move |p| p.wire_len >= n,
        )),
        1 => select(LENS).prop_map(|n| Built::new(
            format!("Filter::less({n})"),
            Filter::less(n),
            move |p| p.wire_len <= n,
        )),
    ]
}

fn built() -> impl Strategy<Value = Built> {
    built_leaf().prop_recursive(5, 48, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.and(b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.or(b)),
            inner.prop_map(Built::not),
        ]
    })
}

/// A packet, IP or not, with a frame for the Ethernet primitives: MACs from the pool, and a
/// link type that has them or not.
fn packet() -> impl Strategy<Value = Packet> {
    (
        prop_oneof![3 => ip_packet(), 1 => non_ip_packet()],
        select(&[1u16, 1, 101][..]),
        select(MACS),
        select(MACS),
        select(LENS),
    )
        .prop_map(|(d, linktype, dst, src, wire_len)| {
            let mut data = vec![0u8; 60];
            data[..6].copy_from_slice(&dst);
            data[6..12].copy_from_slice(&src);
            Packet {
                d,
                linktype,
                data,
                wire_len,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// What the other crates rely on: a filter built with the constructors prints a text
    /// that parses back to an equal filter, and that text is a fixed point (also as JSON).
    #[test]
    fn filter_prop_built_filters_round_trip(b in built()) {
        let text = b.filter.to_string();
        let parsed = Filter::parse(&text);
        prop_assert_eq!(parsed.as_ref(), Ok(&b.filter), "{:?} -> {}", b, text);
        prop_assert_eq!(parsed.unwrap().to_string(), text);
        let json = serde_json::to_string(&b.filter).unwrap();
        prop_assert_eq!(serde_json::from_str::<Filter>(&json).unwrap(), b.filter);
    }

    /// A built filter and its parsed text match the same packets, and both match what the
    /// calls mean; planning over the built filter keeps its invariants.
    #[test]
    fn filter_prop_built_filters_match_as_parsed(b in built(), p in packet()) {
        let f = &b.filter;
        let parsed = Filter::parse(&f.to_string()).unwrap();
        let means = (b.means)(&p);
        let (d, linktype, data, wire_len) = (&p.d, p.linktype, &p.data, p.wire_len);
        prop_assert_eq!(f.matches_packet(d, linktype, data, wire_len), means, "{:?}", b);
        prop_assert_eq!(parsed.matches_packet(d, linktype, data, wire_len), means, "{:?}", b);
        prop_assert_eq!(f.matches(d), parsed.matches(d), "{:?}", b);
        if let Some(side) = FlowSide::from_dissected(d) {
            prop_assert_eq!(f.matches_side(&side), parsed.matches_side(&side), "{:?}", b);
        }
        prop_assert_eq!(f.matches_non_ip(), parsed.matches_non_ip(), "{:?}", b);
        check_planning(f, d, &[]);
    }
}

#[test]
fn filter_constructors_refuse_what_the_language_cannot_say() {
    let v4: IpAddr = "10.1.2.3".parse().unwrap();
    let v6: IpAddr = "fd00::1".parse().unwrap();
    assert_eq!(
        Filter::net(Direction::Src, v4, 33),
        Err(FilterValueError::Prefix {
            addr: v4,
            prefix: 33
        })
    );
    assert!(Filter::net(Direction::Src, v6, 129).is_err());
    assert_eq!(
        Filter::net(Direction::Src, v4, 33).unwrap_err().to_string(),
        "prefix length 33 is too long for 10.1.2.3 (at most 32)"
    );
    assert_eq!(
        Filter::net(Direction::SrcOrDst, v4, 16)
            .unwrap()
            .to_string(),
        "net 10.1.0.0/16"
    );
    assert_eq!(
        Filter::net(Direction::Dst, v6, 128).unwrap().to_string(),
        "dst net fd00::1/128"
    );
    assert_eq!(
        Filter::port_range(Direction::SrcOrDst, 2, 1),
        Err(FilterValueError::PortRange { low: 2, high: 1 })
    );
    assert_eq!(
        Filter::port_range(Direction::SrcAndDst, 7, 7)
            .unwrap()
            .to_string(),
        "src and dst portrange 7-7"
    );
    assert_eq!(Filter::vlan(Some(4096)), Err(FilterValueError::Vlan(4096)));
    assert_eq!(Filter::vlan(Some(4095)).unwrap().to_string(), "vlan 4095");
    assert_eq!(Filter::vlan(None).unwrap().to_string(), "vlan");
    assert_eq!(Filter::dscp(64), Err(FilterValueError::Dscp(64)));
    assert_eq!(Filter::dscp(46).unwrap().to_string(), "dscp ef");
    assert_eq!(Filter::dscp(5).unwrap().to_string(), "dscp 5");
}

#[test]
fn filter_constructors_print_as_the_parser_reads() {
    let a: IpAddr = "10.0.0.1".parse().unwrap();
    let tcp = Filter::proto(IpProto::Tcp);
    assert_eq!(tcp.to_string(), "tcp");
    assert_eq!(Filter::proto(IpProto::Gre).to_string(), "proto gre");
    assert_eq!(Filter::proto(IpProto::from(103)).to_string(), "proto 103");
    assert_eq!(Filter::proto(IpProto::Other(58)).to_string(), "icmp6");
    assert_eq!(Filter::ip4().or(Filter::ip6()).to_string(), "ip or ip6");
    assert_eq!(
        Filter::ether(Direction::Dst, [0, 0x1b, 0x21, 0xa, 0xb, 0xc]).to_string(),
        "ether dst host 00:1b:21:0a:0b:0c"
    );
    assert_eq!(
        Filter::arp()
            .or(Filter::greater(1500))
            .or(Filter::less(60))
            .to_string(),
        "arp or greater 1500 or less 60"
    );
    // Chains flatten from either side; a chain of the other kind is put in parentheses.
    let ports = Filter::port(Direction::SrcOrDst, 80).or(Filter::port(Direction::SrcOrDst, 443));
    let f = Filter::host(Direction::Src, a).and(tcp.clone().and(ports.clone()));
    assert_eq!(
        f.to_string(),
        "src host 10.0.0.1 and tcp and (port 80 or port 443)"
    );
    assert_eq!(Filter::parse(&f.to_string()), Ok(f.clone()));
    assert_eq!(
        Filter::parse("src host 10.0.0.1 and tcp and (port 80 or 443)"),
        Ok(f)
    );
    // `all` is the unit of `and` and absorbs `or`; its negation matches nothing.
    assert_eq!(Filter::all().and(tcp.clone()), tcp);
    assert_eq!(tcp.clone().and(Filter::all()), tcp);
    assert_eq!(tcp.clone().or(Filter::all()), Filter::all());
    assert_eq!(Filter::all().and(Filter::all()), Filter::all());
    let nothing = !Filter::all();
    assert_eq!(nothing.to_string(), "ip and ip6");
    assert_eq!(Filter::not(tcp.clone()).to_string(), "not tcp");
    assert_eq!((!nothing).to_string(), "not (ip and ip6)");
}
