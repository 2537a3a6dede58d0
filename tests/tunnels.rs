//! Flows inside encapsulations (issue 32, item 0): crafted frames of every encapsulation
//! capsule opens (MPLS label stacks of one and two labels, PPPoE, GRE with a key,
//! GRE transparent Ethernet bridging, ERSPAN II and III, VXLAN, Geneve, GTP-U, three VLAN
//! tags), written as a pcap, imported, and checked against tshark, which decodes the inner
//! layers itself:
//!
//! * every inner TCP flow's packets, wire bytes and DSCP (per direction) in `capsule flows
//!   --json` equal what tshark reports of the innermost IP and TCP layers;
//! * each filter selects exactly the packets tshark's display filter selects (`tunnel vni
//!   42` = `vxlan.vni == 42`, `mpls 16` = `mpls.label == 16`, ...).

mod common;

use common::frames::{eth, ipv4, udp};
use common::netns::{ip, tcpdump_in, Namespaces};
use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

fn tcp(sp: u16, dp: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sp.to_be_bytes());
    t.extend_from_slice(&dp.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&1u32.to_be_bytes());
    t.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

/// The encapsulations of the test, each around an inner IPv4 packet.
#[derive(Debug, Clone, Copy)]
enum Enc {
    Plain,
    Vxlan(u32),
    GreKey(u32),
    Gretap,
    Erspan2(u16),
    Erspan3(u16),
    Geneve(u32),
    Gtpu(u32),
    Mpls(u32),
    MplsEth(u32, u32),
    Pppoe(u16),
    Vlans3,
}

/// The outer endpoints of encapsulation number `i` (192.0.2.(2i+1) and .(2i+2)); `rev`
/// swaps them (the other direction of a bidirectional tunnel).
fn outer(i: u8, rev: bool, proto: u8, payload: &[u8]) -> Vec<u8> {
    let (a, b) = ([192, 0, 2, 2 * i + 1], [192, 0, 2, 2 * i + 2]);
    let (s, d) = if rev { (b, a) } else { (a, b) };
    eth(0x0800, &ipv4(s, d, proto, 10, payload))
}

fn wrap(enc: Enc, i: u8, rev: bool, ip: &[u8]) -> Vec<u8> {
    let inner_eth = eth(0x0800, ip);
    match enc {
        Enc::Plain => inner_eth,
        Enc::Vxlan(vni) => {
            let mut h = vec![0x08, 0, 0, 0];
            h.extend_from_slice(&(vni << 8).to_be_bytes());
            h.extend_from_slice(&inner_eth);
            outer(i, rev, 17, &udp(40000 + u16::from(i), 4789, &h))
        }
        Enc::GreKey(key) => {
            let mut h = vec![0x20, 0x00, 0x08, 0x00];
            h.extend_from_slice(&key.to_be_bytes());
            h.extend_from_slice(ip);
            outer(i, rev, 47, &h)
        }
        Enc::Gretap => {
            let mut h = vec![0x00, 0x00, 0x65, 0x58];
            h.extend_from_slice(&inner_eth);
            outer(i, rev, 47, &h)
        }
        // A mirror: both directions of the inner flow go the same way.
        Enc::Erspan2(session) => {
            let mut h = vec![0x10, 0x00, 0x88, 0xbe, 0, 0, 0, 7, 0x10, 0x00];
            h.extend_from_slice(&session.to_be_bytes());
            h.extend_from_slice(&[0, 0, 0, 0]);
            h.extend_from_slice(&inner_eth);
            outer(i, false, 47, &h)
        }
        Enc::Erspan3(session) => {
            let mut h = vec![0x10, 0x00, 0x22, 0xeb, 0, 0, 0, 7, 0x20, 0x00];
            h.extend_from_slice(&session.to_be_bytes());
            h.extend_from_slice(&[1, 2, 3, 4, 0, 0, 0, 0]);
            h.extend_from_slice(&inner_eth);
            outer(i, false, 47, &h)
        }
        Enc::Geneve(vni) => {
            let mut h = vec![0x00, 0x00, 0x65, 0x58];
            h.extend_from_slice(&(vni << 8).to_be_bytes());
            h.extend_from_slice(&inner_eth);
            outer(i, rev, 17, &udp(40000 + u16::from(i), 6081, &h))
        }
        Enc::Gtpu(teid) => {
            let mut h = vec![0x30, 0xff];
            h.extend_from_slice(&u16::try_from(ip.len()).unwrap().to_be_bytes());
            h.extend_from_slice(&(teid + u32::from(rev)).to_be_bytes());
            h.extend_from_slice(ip);
            outer(i, rev, 17, &udp(2152, 2152, &h))
        }
        Enc::Mpls(label) => {
            // Each direction its own label, as label-switched paths have.
            let l = label + u32::from(rev) * 100;
            let mut m = ((l << 12) | 0x100 | 64).to_be_bytes().to_vec();
            m.extend_from_slice(ip);
            eth(0x8847, &m)
        }
        Enc::MplsEth(top, bottom) => {
            // A two-label stack with IPv4 inside. (An Ethernet pseudowire is left to the
            // dissector's unit tests: tshark's guess between a control word and a MAC that
            // starts with 0 differs from frame to frame, and it decodes no other first
            // nibble as Ethernet.)
            let mut m = ((top << 12) | 64).to_be_bytes().to_vec();
            m.extend_from_slice(&((bottom << 12) | 0x100 | 64).to_be_bytes());
            m.extend_from_slice(ip);
            eth(0x8847, &m)
        }
        Enc::Pppoe(session) => {
            let mut h = vec![0x11, 0x00];
            h.extend_from_slice(&session.to_be_bytes());
            h.extend_from_slice(&u16::try_from(ip.len() + 2).unwrap().to_be_bytes());
            h.extend_from_slice(&[0x00, 0x21]);
            h.extend_from_slice(ip);
            eth(0x8864, &h)
        }
        Enc::Vlans3 => {
            let mut t = vec![
                0x88, 0xa8, 0x00, 10, 0x81, 0x00, 0x00, 20, 0x81, 0x00, 0x00, 30,
            ];
            t.extend_from_slice(&[0x08, 0x00]);
            t.extend_from_slice(ip);
            let mut e = inner_eth[..12].to_vec();
            e.extend_from_slice(&t);
            e
        }
    }
}

const ENCS: [Enc; 12] = [
    Enc::Plain,
    Enc::Vxlan(42),
    Enc::Vxlan(43),
    Enc::GreKey(7),
    Enc::Gretap,
    Enc::Erspan2(100),
    Enc::Erspan3(101),
    Enc::Geneve(5000),
    Enc::Gtpu(0x1001),
    Enc::Mpls(16),
    Enc::MplsEth(17, 18),
    Enc::Pppoe(0x22),
];

/// The crafted capture: per encapsulation one inner TCP conversation
/// 10.1.i.5:443 <-> 10.2.i.9:5123, three packets each way, inner DSCP 46 one way and
/// 18 or 0 the other; and the 3-tag VLAN frames.
fn crafted() -> Vec<(u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut ts = 1_700_000_000_000_000_000u64;
    let encs = ENCS.iter().copied().chain([Enc::Vlans3]);
    for (i, enc) in encs.enumerate() {
        let i = u8::try_from(i).unwrap();
        let (a, b) = ([10, 1, i, 5], [10, 2, i, 9]);
        for k in 0..6u8 {
            let rev = k % 2 == 1;
            let payload = vec![b'x'; 10 + usize::from(k) * 7 + usize::from(i)];
            let ip = if rev {
                ipv4(
                    b,
                    a,
                    6,
                    if i % 2 == 0 { 18 } else { 0 },
                    &tcp(5123, 443, 1, &payload),
                )
            } else {
                ipv4(a, b, 6, 46, &tcp(443, 5123, 1, &payload))
            };
            let frame = wrap(enc, i, rev, &ip);
            ts += 1_000_000;
            out.push((ts, frame.len() as u32, frame));
        }
    }
    out
}

type FlowTotals = BTreeMap<(String, String), ([u64; 2], [u64; 2], [BTreeSet<u8>; 2])>;

/// Per inner TCP flow (endpoints "addr:port" in ascending order): packets, wire bytes and
/// DSCP values per direction (0: from the lower endpoint), from tshark's innermost layers.
fn tshark_flows(file: &std::path::Path, decode_as: &[&str]) -> FlowTotals {
    tshark_flows_where(file, decode_as, "tcp")
}

/// [`tshark_flows`] of the TCP packets tshark's display filter `display` selects.
fn tshark_flows_where(file: &std::path::Path, decode_as: &[&str], display: &str) -> FlowTotals {
    let out = run_ok(Command::new("tshark").args(decode_as).args([
        "-n",
        "-r",
        p(file),
        "-Y",
        display,
        "-T",
        "fields",
        "-E",
        "occurrence=l",
        "-e",
        "ip.src",
        "-e",
        "ip.dst",
        "-e",
        "tcp.srcport",
        "-e",
        "tcp.dstport",
        "-e",
        "frame.len",
        "-e",
        "ip.dsfield.dscp",
    ]));
    let mut flows = FlowTotals::new();
    for l in stdout_str(&out).lines() {
        let f: Vec<&str> = l.split('\t').collect();
        let (s, d) = (format!("{}:{}", f[0], f[2]), format!("{}:{}", f[1], f[3]));
        let dir = usize::from(s > d);
        let key = if dir == 0 { (s, d) } else { (d, s) };
        let e = flows.entry(key).or_default();
        e.0[dir] += 1;
        e.1[dir] += f[4].parse::<u64>().unwrap();
        e.2[dir].insert(f[5].parse().unwrap());
    }
    flows
}

/// A flow line's endpoints ("addr:port") in ascending text order, and whether that swaps
/// capsule's a and b (capsule orders them by address and port).
fn json_key(v: &serde_json::Value) -> ((String, String), bool) {
    let a = format!("{}:{}", v["a"].as_str().unwrap(), v["a_port"]);
    let b = format!("{}:{}", v["b"].as_str().unwrap(), v["b_port"]);
    if a <= b {
        ((a, b), false)
    } else {
        ((b, a), true)
    }
}

fn capsule_flows(store: &std::path::Path) -> FlowTotals {
    let out = run_ok(capsule().args(["flows", "--store", p(store), "--json", "tcp"]));
    let mut flows = FlowTotals::new();
    for l in stdout_str(&out).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let n = |x: &serde_json::Value, k: usize| x[k].as_u64().unwrap();
        let dscp = |k: usize| -> BTreeSet<u8> {
            v["dscp"][k]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as u8)
                .collect()
        };
        // capsule orders endpoints by (address, port); the comparison here by text.
        let (key, swap) = json_key(&v);
        let (p, by) = (&v["packets"], &v["bytes"]);
        let e = if swap {
            ([n(p, 1), n(p, 0)], [n(by, 1), n(by, 0)], [dscp(1), dscp(0)])
        } else {
            ([n(p, 0), n(p, 1)], [n(by, 0), n(by, 1)], [dscp(0), dscp(1)])
        };
        assert!(flows.insert(key, e).is_none(), "one record per flow: {l}");
    }
    flows
}

/// An encapsulation as the test compares it: kind, identifier (VNI, GRE key, ERSPAN session,
/// TEID, PPPoE session), top MPLS label, outer source and destination.
type EncapTuple = (String, Option<u64>, Option<u64>, Option<(String, String)>);
/// Per inner TCP flow (as in [`FlowTotals`]), per direction: packets per encapsulation they
/// arrived in (packets that arrived bare are not counted).
type FlowEncaps = BTreeMap<(String, String), [BTreeMap<EncapTuple, u64>; 2]>;

/// A tshark field value as a number: decimal, or hexadecimal with `0x`.
fn number(s: &str) -> Option<u64> {
    let s = s.split(',').next()?.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Each inner TCP flow's encapsulations per direction, as tshark decodes them: the kind from
/// the frame's protocols (a tunnel carried by IP first, else PPPoE, else MPLS), its
/// identifier (`vxlan.vni`, `geneve.vni`, `gre.key`, `erspan.spanid`, `gtp.teid`,
/// `pppoe.session_id`), the top `mpls.label`, and the outer `ip.src`/`ip.dst` (the first of
/// several IP layers).
fn tshark_encaps(file: &std::path::Path, decode_as: &[&str]) -> FlowEncaps {
    let fields = [
        "ip.src",
        "ip.dst",
        "tcp.srcport",
        "tcp.dstport",
        "frame.protocols",
        "vxlan.vni",
        "geneve.vni",
        "gre.key",
        "erspan.spanid",
        "gtp.teid",
        "pppoe.session_id",
        "mpls.label",
    ];
    let mut cmd = Command::new("tshark");
    cmd.args(decode_as)
        .args(["-n", "-r", p(file), "-Y", "tcp", "-T", "fields"])
        .args([
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=,",
            "-E",
            "separator=/t",
        ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = run_ok(&mut cmd);
    let mut flows = FlowEncaps::new();
    for l in stdout_str(&out).lines() {
        let f: Vec<&str> = l.split('\t').collect();
        let (srcs, dsts): (Vec<&str>, Vec<&str>) =
            (f[0].split(',').collect(), f[1].split(',').collect());
        let last = |v: &[&str]| v[v.len() - 1].to_string();
        let (s, d) = (
            format!("{}:{}", last(&srcs), f[2]),
            format!("{}:{}", last(&dsts), f[3]),
        );
        let dir = usize::from(s > d);
        let key = if dir == 0 { (s, d) } else { (d, s) };
        let protos: Vec<&str> = f[4].split(':').collect();
        let has = |p: &str| protos.contains(&p);
        let (kind, id) = if has("erspan") {
            ("erspan", number(f[8]))
        } else if has("vxlan") {
            ("vxlan", number(f[5]))
        } else if has("geneve") {
            ("geneve", number(f[6]))
        } else if has("gtp") {
            ("gtpu", number(f[9]))
        } else if has("gre") {
            ("gre", number(f[7]))
        } else if has("pppoes") {
            ("pppoe", number(f[10]))
        } else if has("mpls") {
            ("mpls", None)
        } else {
            flows.entry(key).or_default();
            continue;
        };
        let outer = (srcs.len() > 1).then(|| (srcs[0].to_string(), dsts[0].to_string()));
        let e = flows.entry(key).or_default();
        *e[dir]
            .entry((kind.to_string(), id, number(f[11]), outer))
            .or_default() += 1;
    }
    flows
}

/// Each TCP flow's encapsulations per direction as `capsule flows --json` gives them (a
/// direction whose packets arrived in more than one is keyed `mixed`, which tshark's never
/// is).
fn capsule_encaps(store: &std::path::Path) -> FlowEncaps {
    let out = run_ok(capsule().args(["flows", "--store", p(store), "--json", "tcp"]));
    let mut flows = FlowEncaps::new();
    for l in stdout_str(&out).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let dir = |k: usize| -> BTreeMap<EncapTuple, u64> {
            let d = &v["encap"]["dirs"][k];
            if d.is_null() {
                return BTreeMap::new();
            }
            let s = |k: &str| d[k].as_str().map(String::from);
            let kind = if d["mixed"].as_bool().unwrap() {
                "mixed".to_string()
            } else {
                s("kind").unwrap()
            };
            let outer = s("outer_src").zip(s("outer_dst"));
            let t = (kind, d["id"].as_u64(), d["mpls"].as_u64(), outer);
            BTreeMap::from([(t, d["packets"].as_u64().unwrap())])
        };
        let (key, swap) = json_key(&v);
        let dirs = if swap {
            [dir(1), dir(0)]
        } else {
            [dir(0), dir(1)]
        };
        assert!(
            flows.insert(key, dirs).is_none(),
            "one record per flow: {l}"
        );
    }
    flows
}

/// The inner TCP flows (as in [`FlowTotals`]) with a packet tshark's display filter
/// `display` selects.
fn tshark_flows_touched(
    file: &std::path::Path,
    decode_as: &[&str],
    display: &str,
) -> BTreeSet<(String, String)> {
    tshark_flows_where(file, decode_as, &format!("tcp && ({display})"))
        .into_keys()
        .collect()
}

/// `capsule flows` with `tcp and (FILTER)` answers exactly the flows tshark's display
/// filter touches, from the index (the encapsulations decide every flow of the test: no
/// note that the listed flows only may match).
fn flows_by_encap_match_tshark(
    store: &std::path::Path,
    file: &std::path::Path,
    decode_as: &[&str],
    cases: &[(&str, &str)],
) {
    for (filter, display) in cases {
        let want = tshark_flows_touched(file, decode_as, display);
        assert!(!want.is_empty(), "{display} touches some flow");
        let out = run_ok(capsule().args([
            "flows",
            "--store",
            p(store),
            "--json",
            &format!("tcp and ({filter})"),
        ]));
        let got: BTreeSet<(String, String)> = stdout_str(&out)
            .lines()
            .map(|l| json_key(&serde_json::from_str(l).unwrap()).0)
            .collect();
        assert_eq!(got, want, "capsule flows {filter:?} vs tshark {display:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("may have packets"), "{filter}: {err}");
    }
}

#[test]
fn crafted_encapsulations_match_tshark() {
    need_tool("tshark");
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("tunnels.pcap");
    let packets = crafted();
    std::fs::write(&pcap, write_pcap_ns(1, 65535, &packets)).unwrap();
    let store = dir.path().join("store");
    import_ok(&store, &[], &[p(&pcap)]);

    let want = tshark_flows(&pcap, &[]);
    // tshark decodes every encapsulation: one inner conversation per encapsulation.
    assert_eq!(want.len(), ENCS.len() + 1, "{want:#?}");
    assert_eq!(capsule_flows(&store), want);
    // Each inner flow's encapsulation, per direction, is what tshark decodes around its
    // packets: every encapsulation of the test but the bare one and the VLAN tags.
    let encaps = tshark_encaps(&pcap, &[]);
    let tunnelled = encaps.values().filter(|e| !e[0].is_empty()).count();
    assert_eq!(tunnelled, ENCS.len() - 1, "{encaps:#?}");
    assert_eq!(capsule_encaps(&store), encaps);
    flows_by_encap_match_tshark(
        &store,
        &pcap,
        &[],
        &[
            ("tunnel vni 42", "vxlan.vni == 42"),
            ("tunnel vni 5000", "geneve.vni == 5000"),
            ("mpls 16", "mpls.label == 16"),
            ("mpls", "mpls"),
            ("tunnel host 192.0.2.3", "ip.addr == 192.0.2.3"),
            (
                "not tunnel",
                "!(vxlan || gre || mpls || pppoes || geneve || gtp || erspan)",
            ),
        ],
    );

    let cases = [
        ("tunnel vni 42", "vxlan.vni == 42"),
        ("tunnel vni 5000", "geneve.vni == 5000"),
        ("mpls 16", "mpls.label == 16"),
        ("mpls 17", "mpls.label == 17"),
        ("mpls", "mpls"),
        (
            "tunnel",
            "vxlan || gre || mpls || pppoes || geneve || gtp || erspan",
        ),
        ("tunnel host 192.0.2.3", "ip.addr == 192.0.2.3"),
        (
            "host 10.1.1.5 and tcp port 443",
            "ip.addr == 10.1.1.5 && tcp.port == 443",
        ),
        ("vlan 30", "vlan.id == 30"),
        ("dscp 46", "ip.dsfield.dscp == 46"),
        (
            "not tunnel and tcp",
            "!(vxlan || gre || mpls || pppoes || geneve || gtp) && tcp",
        ),
    ];
    for (filter, display) in cases {
        let picked: BTreeSet<u64> = tshark_select(&pcap, display)
            .into_iter()
            .map(|i| packets[i].0)
            .collect();
        assert!(!picked.is_empty(), "{display} selects something");
        let out = dir.path().join("out.pcap");
        let mut cmd = capsule();
        cmd.args(["query", "--store", p(&store), "-w", p(&out), filter]);
        run_ok(&mut cmd);
        let got: BTreeSet<u64> = decode_file(&out).packets.iter().map(|k| k.ts_ns).collect();
        assert_eq!(got, picked, "capsule {filter:?} vs tshark {display:?}");
    }
}

/// tshark told that UDP port 8472 is VXLAN too, as the config tells capsule.
const DECODE_8472: [&str; 2] = ["-d", "udp.port==8472,vxlan"];

/// The server in the second namespace: accepts `n` connections, reads each to its end and
/// answers 1000 bytes.
const SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5001))
s.listen(8)
print("ready", flush=True)
for _ in range(int(sys.argv[1])):
    c, _ = s.accept()
    while c.recv(65536):
        pass
    c.sendall(b"y" * 1000)
    c.close()
"#;

/// The client in the first namespace: per argument ADDR,TOS one connection with that TOS,
/// 20000 bytes sent, the answer read.
const CLIENT: &str = r#"
import socket, sys
for arg in sys.argv[1:]:
    addr, tos = arg.split(",")
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(tos))
    c.settimeout(20)
    c.connect((addr, 5001))
    c.sendall(b"x" * 20000)
    c.shutdown(socket.SHUT_WR)
    while c.recv(65536):
        pass
    c.close()
"#;

/// VXLAN devices made with `ip link` between two namespaces (VNI 42 and 43 on port 4789, VNI
/// 44 on 8472, which the config's `[tunnels]` adds), a small TCP transfer through each,
/// captured on the underlay veth with tcpdump and imported: the inner flows and the tunnel
/// filters agree with tshark (told about port 8472 too).
#[test]
fn kernel_tunnels_between_namespaces_match_tshark() {
    need_tool("tshark");
    need_tool("tcpdump");
    assert!(
        stdout_str(&run_ok(Command::new("id").arg("-u"))).trim() == "0",
        "this test needs root (network namespaces)"
    );
    let pid = std::process::id();
    let (a, b) = (format!("capdecap-{pid}-a"), format!("capdecap-{pid}-b"));
    ip(&["netns", "add", &a]);
    let mut made = Namespaces(vec![a.clone()]);
    ip(&["netns", "add", &b]);
    made.0.push(b.clone());
    let (ua, ub) = (format!("d{pid}a"), format!("d{pid}b"));
    ip(&[
        "link", "add", "name", &ua, "netns", &a, "type", "veth", "peer", "name", &ub, "netns", &b,
    ]);
    let sides = [
        (&a, &ua, "172.31.0.1", "172.31.0.2", 1),
        (&b, &ub, "172.31.0.2", "172.31.0.1", 2),
    ];
    for (ns, dev, me, _, _) in sides {
        for key in ["all", "default"] {
            run_ok(Command::new("ip").args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
            ]));
        }
        ip(&["-n", ns, "addr", "add", &format!("{me}/24"), "dev", dev]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    for (ns, dev, me, peer, host) in sides {
        // VXLAN only: kernels without the ip_gre, geneve and erspan modules (this test's
        // machine) still have it; the crafted test covers the other encapsulations. VNI 44
        // uses Linux's old port 8472, opened through the config's [tunnels].
        let tunnels: [(&str, Vec<&str>); 3] = [
            (
                "vx0",
                vec![
                    "vxlan", "id", "42", "local", me, "remote", peer, "dstport", "4789", "dev", dev,
                ],
            ),
            (
                "vx1",
                vec![
                    "vxlan", "id", "43", "local", me, "remote", peer, "dstport", "4789", "dev", dev,
                ],
            ),
            (
                "vx2",
                vec![
                    "vxlan", "id", "44", "local", me, "remote", peer, "dstport", "8472", "dev", dev,
                ],
            ),
        ];
        for (k, (name, spec)) in tunnels.iter().enumerate() {
            let mut args = vec!["-n", ns.as_str(), "link", "add", name, "type"];
            args.extend(spec.iter().copied());
            ip(&args);
            let addr = format!("10.{}.0.{host}/24", 42 + k);
            ip(&["-n", ns, "addr", "add", &addr, "dev", name]);
            ip(&["-n", ns, "link", "set", name, "up"]);
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("underlay.pcap");
    let mut dump = tcpdump_in(&b, &ub, &pcap, None);

    let mut server = Command::new("ip")
        .args(["netns", "exec", &b, "/usr/bin/python3", "-c", SERVER, "3"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    // Inner DSCP: EF (46) through VNI 42, AF21 (18) through VNI 43, 0 through VNI 44.
    run_ok(Command::new("ip").args([
        "netns",
        "exec",
        &a,
        "/usr/bin/python3",
        "-c",
        CLIENT,
        "10.42.0.2,184",
        "10.43.0.2,72",
        "10.44.0.2,0",
    ]));
    assert!(server.wait().unwrap().success());
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(signal(dump.id(), Signal::INT), "tcpdump is gone");
    dump.wait().unwrap();

    let store = dir.path().join("store");
    let config = dir.path().join("capsule.toml");
    std::fs::write(&config, "[tunnels]\nvxlan_ports = [4789, 8472]\n").unwrap();
    // Without the config, VNI 44's packets are UDP between the tunnel endpoints.
    let plain = dir.path().join("plain");
    import_ok(&plain, &[], &[p(&pcap)]);
    assert!(!capsule_flows(&plain)
        .keys()
        .any(|k| k.0.starts_with("10.44.")));
    import_ok(&store, &["--config", p(&config)], &[p(&pcap)]);
    let want = tshark_flows(&pcap, &DECODE_8472);
    assert_eq!(want.len(), 3, "one TCP flow per tunnel: {want:#?}");
    let dscp: BTreeSet<u8> = want
        .values()
        .flat_map(|f| f.2[0].iter().chain(&f.2[1]))
        .copied()
        .collect();
    assert!(dscp.contains(&46) && dscp.contains(&18), "{want:#?}");
    assert_eq!(capsule_flows(&store), want);
    let encaps = tshark_encaps(&pcap, &DECODE_8472);
    assert!(
        encaps.values().all(|e| e.iter().all(|d| d.len() == 1)),
        "{encaps:#?}"
    );
    assert_eq!(capsule_encaps(&store), encaps);
    flows_by_encap_match_tshark(
        &store,
        &pcap,
        &DECODE_8472,
        &[
            ("tunnel vni 42", "vxlan.vni == 42"),
            ("tunnel vni 44", "vxlan.vni == 44"),
            ("tunnel host 172.31.0.1", "ip.addr == 172.31.0.1"),
        ],
    );

    let cases = [
        ("tunnel vni 42", "vxlan.vni == 42"),
        ("tunnel vni 44", "vxlan.vni == 44"),
        ("tunnel", "vxlan"),
        ("tunnel host 172.31.0.1", "ip.addr == 172.31.0.1"),
        ("host 10.43.0.1 and tcp", "ip.addr == 10.43.0.1 && tcp"),
        ("dscp 46", "ip.dsfield.dscp == 46"),
    ];
    for (filter, display) in cases {
        // Packets as (time, bytes), sorted: tcpdump's microseconds may repeat.
        let all = decode_file(&pcap).packets;
        let frames = run_ok(Command::new("tshark").args(DECODE_8472).args([
            "-n",
            "-r",
            p(&pcap),
            "-Y",
            display,
            "-T",
            "fields",
            "-e",
            "frame.number",
        ]));
        let mut picked: Vec<(u64, Vec<u8>)> = stdout_str(&frames)
            .lines()
            .map(|l| l.trim().parse::<usize>().unwrap() - 1)
            .map(|i| (all[i].ts_ns, all[i].data.clone()))
            .collect();
        picked.sort();
        assert!(!picked.is_empty(), "{display} selects something");
        let out = dir.path().join("out.pcap");
        run_ok(
            capsule()
                .args(["query", "--store", p(&store), "--config", p(&config)])
                .args(["-w", p(&out), filter]),
        );
        let mut got: Vec<(u64, Vec<u8>)> = decode_file(&out)
            .packets
            .into_iter()
            .map(|k| (k.ts_ns, k.data))
            .collect();
        got.sort();
        assert_eq!(got, picked, "capsule {filter:?} vs tshark {display:?}");
    }
}

/// Per tunnel as `top --key tunnel` labels it (kind, identifier, top MPLS label, outer
/// endpoints in ascending order; `(none)` for frames in none), packets and wire bytes, from
/// tshark's decoding of every frame of the crafted capture.
fn tshark_tunnel_totals(file: &std::path::Path) -> BTreeMap<String, (u64, u64)> {
    let fields = [
        "ip.src",
        "ip.dst",
        "frame.protocols",
        "vxlan.vni",
        "geneve.vni",
        "gre.key",
        "erspan.spanid",
        "gtp.teid",
        "pppoe.session_id",
        "mpls.label",
        "frame.len",
    ];
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r", p(file), "-T", "fields"]).args([
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
        "-E",
        "separator=/t",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = run_ok(&mut cmd);
    let mut rows: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for l in stdout_str(&out).lines() {
        let f: Vec<&str> = l.split('\t').collect();
        let protos: Vec<&str> = f[2].split(':').collect();
        let has = |p: &str| protos.contains(&p);
        let tunnel = if has("erspan") {
            Some(("erspan", "session", number(f[6])))
        } else if has("vxlan") {
            Some(("vxlan", "vni", number(f[3])))
        } else if has("geneve") {
            Some(("geneve", "vni", number(f[4])))
        } else if has("gtp") {
            Some(("gtpu", "teid", number(f[7])))
        } else if has("gre") {
            Some(("gre", "key", number(f[5])))
        } else if has("pppoes") {
            Some(("pppoe", "session", number(f[8])))
        } else if has("mpls") {
            Some(("mpls", "", None))
        } else {
            None
        };
        let label = match tunnel {
            None => "(none)".to_string(),
            Some((kind, what, id)) => {
                let mut s = kind.to_string();
                if let Some(id) = id {
                    s.push_str(&format!(" {what} {id}"));
                }
                if let Some(l) = number(f[9]) {
                    s.push_str(&format!(" label {l}"));
                }
                let srcs: Vec<&str> = f[0].split(',').collect();
                let dsts: Vec<&str> = f[1].split(',').collect();
                if srcs.len() > 1 {
                    let mut ends: Vec<std::net::IpAddr> =
                        vec![srcs[0].parse().unwrap(), dsts[0].parse().unwrap()];
                    ends.sort();
                    s.push_str(&format!(" {}<->{}", ends[0], ends[1]));
                }
                s
            }
        };
        let e = rows.entry(label).or_default();
        e.0 += 1;
        e.1 += f[10].parse::<u64>().unwrap();
    }
    rows
}

/// `top --key tunnel` ranks the crafted traffic by the tunnel each flow direction arrived
/// in, with the packets and bytes tshark decodes in each; `top --key flow` rows carry their
/// flow's encapsulation, typed, as tshark decodes it around the flow's packets.
#[test]
fn top_by_tunnel_and_flow_rows_show_the_encapsulation_tshark_decodes() {
    need_tool("tshark");
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("tunnels.pcap");
    std::fs::write(&pcap, write_pcap_ns(1, 65535, &crafted())).unwrap();
    let store = dir.path().join("store");
    import_ok(&store, &[], &[p(&pcap)]);
    let top = |key: &str| -> serde_json::Value {
        let out = run_ok(capsule().args([
            "top",
            "--store",
            p(&store),
            "--key",
            key,
            "--limit",
            "100",
            "--json",
        ]));
        serde_json::from_slice(&out.stdout).unwrap()
    };

    let t = top("tunnel");
    let got: BTreeMap<String, (u64, u64)> = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            (
                r["key"].as_str().unwrap().to_string(),
                (n("packets"), n("bytes")),
            )
        })
        .collect();
    let want = tshark_tunnel_totals(&pcap);
    assert!(want.len() > ENCS.len(), "{want:#?}");
    assert_eq!(got, want);
    // Each tunnel's row exports its packets where the filter language names it.
    let vni42 = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"].as_str().unwrap().starts_with("vxlan vni 42 "))
        .unwrap();
    // The row's export command names the VNI and both outer endpoints.
    let q = vni42["query"].as_str().unwrap();
    assert!(
        q.contains("tunnel vni 42")
            && q.contains("tunnel host 192.0.2.3")
            && q.contains("tunnel host 192.0.2.4"),
        "{vni42}"
    );

    // Flow rows: the kinds and identifiers of each direction's encapsulation.
    type Kinds = BTreeSet<(String, Option<u64>)>;
    let want: BTreeMap<(String, String), Kinds> = tshark_encaps(&pcap, &[])
        .into_iter()
        .map(|(k, dirs)| {
            let kinds = dirs
                .iter()
                .flat_map(|d| d.keys().map(|t| (t.0.clone(), t.1)))
                .collect();
            (k, kinds)
        })
        .collect();
    let f = top("flow");
    let mut got: BTreeMap<(String, String), Kinds> = BTreeMap::new();
    for r in f["rows"].as_array().unwrap() {
        // `tcp 10.1.1.5:443 <-> 10.2.1.9:5123`, `tcp vlan 10.20 10.1.12.5:443 <-> ...`
        let label = r["key"].as_str().unwrap();
        let (left, right) = label.split_once(" <-> ").unwrap();
        let a = left.rsplit(' ').next().unwrap().to_string();
        let b = right.to_string();
        let key = if a <= b { (a, b) } else { (b, a) };
        let kinds = match r["tunnel"].as_object() {
            None => Kinds::new(),
            Some(t) => {
                assert!(!t["describe"].as_str().unwrap().is_empty(), "{r}");
                t["dirs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|d| !d.is_null())
                    .map(|d| (d["kind"].as_str().unwrap().to_string(), d["id"].as_u64()))
                    .collect()
            }
        };
        got.insert(key, kinds);
    }
    assert_eq!(got, want);
}
