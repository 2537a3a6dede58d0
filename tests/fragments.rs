//! Non-first fragments join their datagram's flow (issue 32, item 0): UDP datagrams larger
//! than the path's MTU of 1500, sent over IPv4 and IPv6 between two network namespaces the
//! test makes (the kernel fragments them), captured with tcpdump, imported, and checked
//! against tshark's reassembly (`ip.fragment` / `ipv6.fragment` list every frame of a
//! reassembled datagram):
//!
//! * every UDP flow's packets, wire bytes and DSCP per direction in `capsule flows --json`
//!   count every fragment of its datagrams, as tshark's reassembled datagrams do, and no
//!   portless flow is left;
//! * a port filter selects every fragment of the datagrams it selects (tcpdump's `port`
//!   matches the first fragment only), with blocks small enough that a datagram's fragments
//!   fall in different blocks too.

mod common;

use common::netns::{ip, tcpdump_in, Namespaces};
use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Per flow (endpoints "addr:port" in ascending text order): packets, wire bytes and DSCP
/// values per direction (0: from the lower endpoint).
type FlowTotals = BTreeMap<(String, String), ([u64; 2], [u64; 2], [BTreeSet<u8>; 2])>;

/// The sender: per argument FAMILY,ADDR,SPORT,DPORT,TOS,SIZE,COUNT, COUNT datagrams of SIZE
/// bytes from SPORT to ADDR:DPORT with that TOS / traffic class.
const SENDER: &str = r#"
import socket, sys, time
for arg in sys.argv[1:]:
    fam, addr, sport, dport, tos, size, count = arg.split(",")
    v6 = fam == "6"
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    if v6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, int(tos))
    else:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(tos))
    s.bind(("::" if v6 else "0.0.0.0", int(sport)))
    for _ in range(int(count)):
        s.sendto(b"f" * int(size), (addr, int(dport)))
        time.sleep(0.01)
    s.close()
"#;

/// The receiver: binds UDP ports 9998 and 9999 on IPv4 and IPv6 (so no ICMP error answers
/// a datagram) and reads until none came for 2 s.
const RECEIVER: &str = r#"
import select, socket
socks = []
for fam, addr in [(socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")]:
    for port in [9998, 9999]:
        s = socket.socket(fam, socket.SOCK_DGRAM)
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind((addr, port))
        socks.append(s)
print("ready", flush=True)
while True:
    ready, _, _ = select.select(socks, [], [], 2.0)
    if not ready:
        break
    for s in ready:
        s.recv(65536)
"#;

/// Each reassembled `proto` (udp or tcp) datagram's flow and the frames (1-based) that
/// carried it, from tshark with reassembly on, and every frame's length and DSCP.
fn tshark_flows(
    file: &std::path::Path,
    proto: &str,
) -> (FlowTotals, BTreeMap<(String, String), Vec<usize>>) {
    let frames = run_ok(Command::new("tshark").args([
        "-n",
        "-r",
        p(file),
        "-T",
        "fields",
        "-E",
        "occurrence=f",
        "-e",
        "frame.number",
        "-e",
        "frame.len",
        "-e",
        "ip.dsfield.dscp",
        "-e",
        "ipv6.tclass.dscp",
    ]));
    let mut frame: BTreeMap<usize, (u64, u8)> = BTreeMap::new();
    for l in stdout_str(&frames).lines() {
        let f: Vec<&str> = l.split('\t').collect();
        let dscp = if f[2].is_empty() { f[3] } else { f[2] };
        frame.insert(
            f[0].parse().unwrap(),
            (f[1].parse().unwrap(), dscp.parse().unwrap_or(0)),
        );
    }
    let dgrams = run_ok(Command::new("tshark").args([
        "-n",
        "-r",
        p(file),
        "-o",
        "ip.defragment:TRUE",
        "-o",
        "ipv6.defragment:TRUE",
        "-Y",
        &format!("{proto} && !icmp && !icmpv6"),
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=;",
        "-e",
        "frame.number",
        "-e",
        "ip.src",
        "-e",
        "ipv6.src",
        "-e",
        "ip.dst",
        "-e",
        "ipv6.dst",
        "-e",
        &format!("{proto}.srcport"),
        "-e",
        &format!("{proto}.dstport"),
        "-e",
        "ip.fragment",
        "-e",
        "ipv6.fragment",
    ]));
    let mut flows = FlowTotals::new();
    let mut frames_of: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for l in stdout_str(&dgrams).lines() {
        let f: Vec<&str> = l.split('\t').collect();
        let pick = |a: &str, b: &str| {
            if a.is_empty() {
                b.to_string()
            } else {
                a.to_string()
            }
        };
        let (src, dst) = (pick(f[1], f[2]), pick(f[3], f[4]));
        let (s, d) = (format!("{src}:{}", f[5]), format!("{dst}:{}", f[6]));
        let list = pick(f[7], f[8]);
        let nums: Vec<usize> = if list.is_empty() {
            vec![f[0].parse().unwrap()]
        } else {
            list.split(';').map(|n| n.parse().unwrap()).collect()
        };
        let dir = usize::from(s > d);
        let key = if dir == 0 { (s, d) } else { (d, s) };
        let e = flows.entry(key.clone()).or_default();
        for n in &nums {
            let (len, dscp) = frame[n];
            e.0[dir] += 1;
            e.1[dir] += len;
            e.2[dir].insert(dscp);
        }
        frames_of.entry(key).or_default().extend(nums);
    }
    (flows, frames_of)
}

/// `capsule flows --json PROTO`, as [`FlowTotals`].
fn capsule_flows(store: &std::path::Path, proto: &str) -> FlowTotals {
    let out = run_ok(capsule().args(["flows", "--store", p(store), "--json", proto]));
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
        let a = format!("{}:{}", v["a"].as_str().unwrap(), v["a_port"]);
        let b = format!("{}:{}", v["b"].as_str().unwrap(), v["b_port"]);
        let swap = a > b;
        let key = if swap { (b, a) } else { (a, b) };
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

/// Two namespaces (172.30.0.1 and fd00:30::1 in `a`, .2 and ::2 in `b`) joined by a veth
/// pair of MTU 1500, with permanent neighbours; deleted when the first value is dropped.
/// Returns it, the namespaces' names and `b`'s interface.
fn namespaces(tag: &str) -> (Namespaces, String, String, String) {
    assert!(
        stdout_str(&run_ok(Command::new("id").arg("-u"))).trim() == "0",
        "this test needs root (network namespaces)"
    );
    let pid = std::process::id();
    let (a, b) = (
        format!("capfrag{tag}-{pid}-a"),
        format!("capfrag{tag}-{pid}-b"),
    );
    ip(&["netns", "add", &a]);
    let mut made = Namespaces(vec![a.clone()]);
    ip(&["netns", "add", &b]);
    made.0.push(b.clone());
    let (ua, ub) = (format!("f{tag}{pid}a"), format!("f{tag}{pid}b"));
    ip(&[
        "link", "add", "name", &ua, "netns", &a, "type", "veth", "peer", "name", &ub, "netns", &b,
    ]);
    // Fixed MAC addresses and permanent neighbours: no first fragment waits on a resolution.
    let sides = [
        (&a, &ua, "172.30.0.1", "fd00:30::1", "02:00:00:00:30:01"),
        (&b, &ub, "172.30.0.2", "fd00:30::2", "02:00:00:00:30:02"),
    ];
    for (k, (ns, dev, v4, v6, mac)) in sides.iter().enumerate() {
        let (_, _, peer4, peer6, peer_mac) = sides[1 - k];
        ip(&["-n", ns, "link", "set", dev, "address", mac, "mtu", "1500"]);
        ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev]);
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{v6}/64"),
            "dev",
            dev,
            "nodad",
        ]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
        for peer in [peer4, peer6] {
            ip(&[
                "-n",
                ns,
                "neigh",
                "replace",
                peer,
                "lladdr",
                peer_mac,
                "dev",
                dev,
                "nud",
                "permanent",
            ]);
        }
    }

    (made, a, b, ub)
}

/// tshark's reassembled `proto` flows of `pcap` ([`tshark_flows`]), checked to be the three
/// the tests send, the kernel having cut each of the 20 datagrams of the flow from port
/// 40000 into `fragments`.
fn three_fragmented_flows(
    pcap: &std::path::Path,
    proto: &str,
    fragments: u64,
) -> (FlowTotals, BTreeMap<(String, String), Vec<usize>>) {
    let (want, frames_of) = tshark_flows(pcap, proto);
    assert_eq!(
        want.len(),
        3,
        "three {} flows: {want:#?}\n{}",
        proto.to_uppercase(),
        stdout_str(&run_ok(Command::new("tshark").args(["-n", "-r", p(pcap)])))
    );
    let big = want
        .iter()
        .find(|(k, _)| k.0.ends_with(":40000") || k.1.ends_with(":40000"))
        .unwrap()
        .1;
    assert_eq!(big.0.iter().sum::<u64>(), 20 * fragments, "{want:#?}");
    (want, frames_of)
}

/// Imports `pcap` with default blocks (all in one) and with 4 KiB blocks (a datagram's
/// fragments in several): each `proto` flow's totals must be tshark's reassembled ones, and
/// each port filter must export exactly the frames of the datagrams tshark puts in the flows
/// of that port (every fragment, the later ones included).
fn stores_answer_as_tshark_reassembles(
    dir: &std::path::Path,
    pcap: &std::path::Path,
    proto: &str,
    (want, frames_of): (&FlowTotals, &BTreeMap<(String, String), Vec<usize>>),
    filters: [(&str, &str); 2],
) {
    let all = decode_file(pcap).packets;
    for extra in [&[][..], &["--block-size", "4K"][..]] {
        let store = dir.join(format!("store{}", extra.len()));
        import_ok(&store, extra, &[p(pcap)]);
        if !extra.is_empty() {
            assert!(
                segments(&store).iter().map(|s| s.blocks).sum::<u64>() > 10,
                "small blocks"
            );
        }
        assert_eq!(&capsule_flows(&store, proto), want, "{extra:?}");
        for (filter, port) in filters {
            let mut picked: Vec<(u64, Vec<u8>)> = frames_of
                .iter()
                .filter(|(k, _)| k.0.ends_with(port) || k.1.ends_with(port))
                .flat_map(|(_, f)| f.iter())
                .map(|&n| (all[n - 1].ts_ns, all[n - 1].data.clone()))
                .collect();
            picked.sort();
            let out = dir.join("out.pcap");
            run_ok(capsule().args(["query", "--store", p(&store), "-w", p(&out), filter]));
            let mut got: Vec<(u64, Vec<u8>)> = decode_file(&out)
                .packets
                .into_iter()
                .map(|k| (k.ts_ns, k.data))
                .collect();
            got.sort();
            assert_eq!(got.len(), picked.len(), "{filter} {extra:?}");
            assert!(
                got == picked,
                "capsule {filter:?} {extra:?} vs tshark's reassembly"
            );
        }
    }
}

#[test]
fn fragments_of_kernel_datagrams_join_their_flow_as_tshark_reassembles_them() {
    need_tool("tshark");
    need_tool("tcpdump");
    let (_made, a, b, ub) = namespaces("u");
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("frag.pcap");
    let mut dump = tcpdump_in(&b, &ub, &pcap, Some("udp or ip6"));
    let mut receiver = Command::new("ip")
        .args(["netns", "exec", &b, "/usr/bin/python3", "-c", RECEIVER])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(receiver.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    // Two IPv4 flows to one host (EF, and best effort with datagrams of several sizes, some
    // unfragmented), one IPv6 flow (AF21): fragments of different flows between the same
    // addresses must not mix.
    run_ok(Command::new("ip").args([
        "netns",
        "exec",
        &a,
        "/usr/bin/python3",
        "-c",
        SENDER,
        "4,172.30.0.2,40000,9999,184,5000,20",
        "4,172.30.0.2,40001,9998,0,3000,15",
        "4,172.30.0.2,40001,9998,0,200,5",
        "6,fd00:30::2,40002,9999,72,5000,12",
    ]));
    assert!(receiver.wait().unwrap().success());
    assert!(signal(dump.id(), Signal::INT), "tcpdump is gone");
    dump.wait().unwrap();

    // The kernel did fragment: 5000 bytes take 4 IPv4 fragments at MTU 1500.
    let (want, frames_of) = three_fragmented_flows(&pcap, "udp", 4);

    stores_answer_as_tshark_reassembles(
        dir.path(),
        &pcap,
        "udp",
        (&want, &frames_of),
        [("udp port 9999", ":9999"), ("port 9998", ":9998")],
    );
}

/// The TCP sender: per argument FAMILY,ADDR,SPORT,DPORT,TOS,SIZE,COUNT, COUNT TCP segments
/// (PSH ACK, consecutive sequence numbers) of SIZE payload bytes from SPORT to ADDR:DPORT
/// with that TOS / traffic class, through a raw socket with DF off: the kernel builds the IP
/// header and fragments what exceeds the MTU (as it does a TCP socket's segments when path
/// MTU discovery is off). The checksum is left 0: the receiver drops them unanswered.
const TCP_SENDER: &str = r#"
import socket, struct, sys, time
for arg in sys.argv[1:]:
    fam, addr, sport, dport, tos, size, count = arg.split(",")
    v6 = fam == "6"
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    if v6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, int(tos))
    else:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(tos))
        s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT
    seq = 1000
    for _ in range(int(count)):
        hdr = struct.pack("!HHIIBBHHH", int(sport), int(dport), seq, 1, 0x50, 0x18, 65535, 0, 0)
        s.sendto(hdr + b"t" * int(size), (addr, 0))
        seq += int(size)
        time.sleep(0.01)
    s.close()
"#;

/// The later fragments of TCP segments join their flow as tshark reassembles them: TCP
/// segments larger than the MTU, sent with DF off over IPv4 and IPv6 (the kernel fragments
/// them), captured with tcpdump, imported with 1 MiB and 4 KiB blocks. Every TCP flow's
/// packets, bytes and DSCP equal tshark's reassembled segments', no portless flow is left,
/// and `tcp port 8443` / `port 8444` export exactly the fragments of the segments tshark
/// puts in those flows. Before, the later fragments made a portless flow of their own and
/// the port filters selected the first fragments only.
#[test]
fn fragments_of_kernel_tcp_segments_join_their_flow_as_tshark_reassembles_them() {
    need_tool("tshark");
    need_tool("tcpdump");
    let (_made, a, b, ub) = namespaces("t");
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("tcpfrag.pcap");
    let mut dump = tcpdump_in(&b, &ub, &pcap, Some("tcp or ip6"));
    let started = std::time::Instant::now();
    run_ok(Command::new("ip").args([
        "netns",
        "exec",
        &a,
        "/usr/bin/python3",
        "-c",
        TCP_SENDER,
        "4,172.30.0.2,40000,8443,184,4000,20",
        "4,172.30.0.2,40001,8444,0,2500,15",
        "4,172.30.0.2,40001,8444,0,200,5",
        "6,fd00:30::2,40002,8443,72,4000,12",
    ]));
    // tcpdump exits on SIGINT without reading what the kernel still holds for it (on a busy
    // machine it lags): stop it once its file has not grown for a second.
    let (mut size, mut still) = (0, 0);
    while still < 4 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let now = std::fs::metadata(&pcap).map_or(0, |m| m.len());
        still = if now == size { still + 1 } else { 0 };
        size = now;
        assert!(started.elapsed().as_secs() < 60, "tcpdump keeps writing");
    }
    assert!(signal(dump.id(), Signal::INT), "tcpdump is gone");
    dump.wait().unwrap();

    // The kernel did fragment: 20 + 4000 bytes take 3 IPv4 fragments at MTU 1500.
    let (want, frames_of) = three_fragmented_flows(&pcap, "tcp", 3);

    stores_answer_as_tshark_reassembles(
        dir.path(),
        &pcap,
        "tcp",
        (&want, &frames_of),
        [("tcp port 8443", ":8443"), ("port 8444", ":8444")],
    );
}
