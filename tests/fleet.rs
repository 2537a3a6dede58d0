//! The fleet (issue 30) against a real ClickHouse: Debian's `clickhouse-server` (18.16,
//! installed by scripts/deps.sh), started by the test on loopback with its own config
//! (ephemeral HTTP, TCP and interserver ports, a temporary data path) and stopped by PID
//! when the test ends, also on panic.
//!
//! - three stores, one synthetic trace split by host into three imports, published as
//!   three nodes: fleet `top`, `dscp` and `tcp` equal the same commands on one store holding
//!   all the traffic (`--json`, the store's name and drop note aside);
//! - ClickHouse stopped: local questions still answer, publishing goes to the outbox (exit
//!   3); after ClickHouse restarts every row arrives exactly once, a full re-push included;
//! - three stores behind three `capsule serve` (TLS, one CA, tokens; one publishing by
//!   itself with `serve --config`): `query --fleet` writes exactly the union of their
//!   packets in timestamp order, one interface per node; a stopped node makes it exit 3
//!   within the deadline, a node killed (-9) while the query waits on it exit 3 naming it,
//!   with the others' packets; `fleet diff` between a node and one that lost every 50th
//!   packet of a flow names exactly those packets, and the one-way delay.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::clickhouse::{free_port, ClickHouse};
use common::frames::{dns_answer, eth, ipv4, udp, udp_frame};
use common::*;
use serde_json::Value;

/// A config naming `node` and the server at `url`.
fn node_config(dir: &Path, node: &str, url: &str) -> PathBuf {
    let p = dir.join(format!("{node}.toml"));
    std::fs::write(
        &p,
        format!(
            "[groups]\ngpu = [\"10.10.0.0/24\"]\nstorage = [\"10.20.0.0/24\"]\n\n\
             [fleet]\nnode = \"{node}\"\nclickhouse = \"{url}\"\n"
        ),
    )
    .unwrap();
    p
}

fn publish(store: &Path, config: &Path) -> (i32, Value, String) {
    let out = run(capsule()
        .args([
            "fleet",
            "publish",
            "--json",
            "--store",
            p(store),
            "--config",
        ])
        .arg(config));
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout_str(&out), stderr_str(&out)));
    (out.status.code().unwrap_or(-1), doc, stderr_str(&out))
}

/// `capsule ARGS --json`, exit 0, as JSON with the source's name and drop note taken out.
/// (The flows' names and tunnels stay: the fleet's flow rows carry them.)
fn answer(args: &[&str], store_name: &str) -> Value {
    let out = run_ok(capsule().args(args).arg("--json"));
    let text = stdout_str(&out).replace(store_name, "SOURCE");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["limits"]["drops"] = Value::Null;
    v
}

/// A TLS 1.2 record holding a ClientHello that names `sni` (one cipher suite, the
/// server_name extension alone).
fn client_hello(sni: &str) -> Vec<u8> {
    let name = sni.as_bytes();
    let n = u16::try_from(name.len()).unwrap();
    let mut ext = vec![0, 0];
    ext.extend_from_slice(&(n + 5).to_be_bytes());
    ext.extend_from_slice(&(n + 3).to_be_bytes());
    ext.push(0);
    ext.extend_from_slice(&n.to_be_bytes());
    ext.extend_from_slice(name);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&u16::try_from(ext.len()).unwrap().to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&u16::try_from(hs.len()).unwrap().to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// Four TLS conversations inside VXLAN tunnels (VNI 100 + i, outer 192.0.2.1 and
/// 192.0.2.2, inner DSCP 46 from the client, 10 outside), from `start_ns`: the client
/// 10.10.9.i (even i) or 10.77.9.i (odd), the server 198.51.100.i:443, named
/// `models.hub-i.example`; the client's ClientHello, the server's 200 bytes, the client's
/// 60. What a mirror fed over VXLAN carries.
fn tunnelled_tls(start_ns: u64) -> Vec<(u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 1..=4u8 {
        let client = [10, if i % 2 == 0 { 10 } else { 77 }, 9, i];
        let server = [198, 51, 100, i];
        let payloads = [
            (false, client_hello(&format!("models.hub-{i}.example"))),
            (true, vec![b's'; 200]),
            (false, vec![b'c'; 60]),
        ];
        for (k, (rev, payload)) in payloads.into_iter().enumerate() {
            let (sp, dp) = if rev { (443, 40000) } else { (40000, 443) };
            let mut tcp = Vec::new();
            tcp.extend_from_slice(&u16::to_be_bytes(sp));
            tcp.extend_from_slice(&u16::to_be_bytes(dp));
            tcp.extend_from_slice(&(1 + k as u32 * 1000).to_be_bytes());
            tcp.extend_from_slice(&1u32.to_be_bytes());
            tcp.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
            tcp.extend_from_slice(&payload);
            let inner = if rev {
                ipv4(server, client, 6, 0, &tcp)
            } else {
                ipv4(client, server, 6, 46, &tcp)
            };
            let mut vx = vec![0x08, 0, 0, 0];
            vx.extend_from_slice(&((100 + u32::from(i)) << 8).to_be_bytes());
            vx.extend_from_slice(&eth(0x0800, &inner));
            let datagram = udp(50000 + u16::from(i), 4789, &vx);
            let (a, b) = ([192, 0, 2, 1], [192, 0, 2, 2]);
            let (s, d) = if rev { (b, a) } else { (a, b) };
            let frame = eth(0x0800, &ipv4(s, d, 17, 10, &datagram));
            let ts = start_ns + u64::from(i) * 50_000_000 + k as u64 * 1_000_000;
            out.push((ts, frame.len() as u32, frame));
        }
    }
    out.sort_by_key(|x| x.0);
    out
}

/// One address, 203.0.113.50, answered for two names by two resolvers the split puts on
/// two nodes: `b.answers.example` at `early_ns` (10.9.0.53 to 10.9.9.60: node 2), then, at
/// `late_ns`, `a.answers.example` (10.10.0.53 to 10.10.9.60: node 0) and three packets of
/// a flow to the address (from 10.77.9.61). Imported in that order (the late packets by an
/// import of their own, so into a later segment), the one store meets `b` first; the
/// fleet's rows come node by node, `a` first: both must name the address alike.
fn answered_twice(early_ns: u64, late_ns: u64) -> [Vec<(u64, u32, Vec<u8>)>; 2] {
    let addr = [203, 0, 113, 50];
    let early = vec![(
        early_ns,
        dns_answer([10, 9, 9, 60], [10, 9, 0, 53], "b.answers.example", addr),
    )];
    let mut late = vec![(
        late_ns,
        dns_answer([10, 10, 9, 60], [10, 10, 0, 53], "a.answers.example", addr),
    )];
    for k in 0..3u64 {
        let frame = udp_frame([10, 77, 9, 61], addr, (41000, 9000), &[b'u'; 100]);
        late.push((late_ns + 100_000_000 + k * 1_000_000, frame));
    }
    [early, late].map(|v| {
        v.into_iter()
            .map(|(ts, f)| (ts, f.len() as u32, f))
            .collect()
    })
}

fn outbox_len(store: &Path) -> usize {
    std::fs::read_dir(store.join("fleet/outbox"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn three_nodes_answer_as_the_one_store_holding_all_their_traffic() {
    let d = tempfile::tempdir().unwrap();
    let mut ch = ClickHouse::start(&d.path().join("clickhouse"));
    let synthetic = d.path().join("synth.pcap");
    synth(
        &synthetic,
        &d.path().join("truth.json"),
        3,
        "2s",
        "20M",
        None,
    );
    // With TLS conversations inside VXLAN tunnels among the synthetic traffic (its DNS and
    // HTTP name flows too): the flows' names and tunnels reach the fleet's answers.
    let tunnels = d.path().join("tunnels.pcap");
    std::fs::write(
        &tunnels,
        write_pcap_ns(1, 65535, &tunnelled_tls(1_796_004_000_300_000_000)),
    )
    .unwrap();
    // And an address two nodes' DNS answers name differently: the early answer among the
    // trace's packets, the late one after them, imported last.
    let [early, late] = answered_twice(1_796_004_000_200_000_000, 1_796_004_003_000_000_000);
    let answers = d.path().join("answers.pcap");
    std::fs::write(&answers, write_pcap_ns(1, 65535, &early)).unwrap();
    let later = d.path().join("later.pcap");
    std::fs::write(&later, write_pcap_ns(1, 65535, &late)).unwrap();
    let pcap = d.path().join("all.pcap");
    run_ok(
        Command::new(need_tool("mergecap"))
            .args(["-F", "nsecpcap", "-w", p(&pcap)])
            .args([&synthetic, &tunnels, &answers]),
    );
    let all = d.path().join("all");
    import_ok(&all, &["--segment-size", "1M"], &[p(&pcap)]);
    import_ok(&all, &["--segment-size", "1M"], &[p(&later)]);
    // One trace split by host into three: every packet in exactly one part.
    let parts = [
        "net 10.10.0.0/16",
        "not net 10.10.0.0/16 and vlan 200",
        "not net 10.10.0.0/16 and not vlan 200",
    ];
    let mut configs = Vec::new();
    let mut total = 0;
    for (i, filter) in parts.iter().enumerate() {
        let part = d.path().join(format!("part{i}.pcap"));
        query_ok(&all, &part, &[filter]);
        total += capinfos_packets(&part);
        let store = d.path().join(format!("node{i}"));
        let config = node_config(d.path(), &format!("node{i}"), &ch.url());
        if i == 1 {
            // An import with the [fleet] section publishes what it sealed; publishing
            // again finds nothing new.
            let out = import_ok(
                &store,
                &["--segment-size", "1M", "--config", p(&config)],
                &[p(&part)],
            );
            assert!(
                stderr_str(&out).contains("fleet: node node1 published"),
                "{}",
                stderr_str(&out)
            );
            let (code, doc, err) = publish(&store, &config);
            assert_eq!(
                (code, doc["staged"].as_array().unwrap().len()),
                (0, 0),
                "{doc} {err}"
            );
        } else {
            import_ok(&store, &["--segment-size", "1M"], &[p(&part)]);
            let (code, doc, err) = publish(&store, &config);
            assert_eq!(code, 0, "{doc} {err}");
            assert!(!doc["staged"].as_array().unwrap().is_empty(), "{doc}");
        }
        configs.push(config);
    }
    assert_eq!(
        total,
        capinfos_packets(&pcap) + capinfos_packets(&later),
        "the parts split the trace"
    );
    let c0 = p(&configs[0]);
    for q in [
        vec!["top"],
        vec!["top", "--key", "src", "--by", "packets"],
        vec!["top", "--key", "sni"],
        vec!["top", "--key", "app"],
        vec!["top", "--key", "tunnel"],
        vec!["top", "--key", "flow", "sni", "*.example"],
        vec!["top", "--key", "dst", "dns", "*.corp.example"],
        vec![
            "top", "--key", "flow", "app", "http", "or", "tunnel", "vni", "102",
        ],
        // Every destination, unfiltered: each named by the window's DNS answers.
        vec!["top", "--key", "dst", "--limit", "100000"],
        vec!["dscp"],
        vec!["matrix"],
        vec!["tcp", "--interval", "1s"],
    ] {
        let mut fleet = q.clone();
        fleet.extend(["--fleet", "--config", c0]);
        let mut local = q.clone();
        local.extend(["--store", p(&all), "--config", c0]);
        let f = answer(&fleet, "fleet");
        let l = answer(&local, p(&all));
        assert_eq!(
            f, l,
            "{q:?}: the fleet's answer differs from the one store's"
        );
    }
    // What those answers hold: every planted server name, its tunnel, TLS among the apps.
    let key_of = |args: &[&str]| -> Vec<String> {
        let mut v = args.to_vec();
        v.extend(["--fleet", "--config", c0]);
        answer(&v, "fleet")["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["key"].as_str().unwrap().to_string())
            .collect()
    };
    // The address two nodes' answers named: by the first of its names in name order, as
    // the one store names it (before, the fleet named it by node 0's answer, the store by
    // the earlier one, node 2's).
    let dsts = answer(
        &[
            "top", "--key", "dst", "--limit", "100000", "--fleet", "--config", c0,
        ],
        "fleet",
    );
    let named: Vec<&Value> = dsts["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["key"] == "203.0.113.50")
        .collect();
    assert_eq!(named.len(), 1, "{dsts}");
    assert_eq!(
        named[0]["name"], "dns answer: a.answers.example",
        "{}",
        named[0]
    );
    let snis = key_of(&["top", "--key", "sni"]);
    for i in 1..=4 {
        assert!(
            snis.contains(&format!("models.hub-{i}.example")),
            "{snis:?}"
        );
    }
    let vnis = key_of(&["top", "--key", "tunnel"]);
    for i in 101..=104 {
        assert!(
            vnis.iter()
                .any(|k| k.starts_with(&format!("vxlan vni {i} "))),
            "{vnis:?}"
        );
    }
    let apps = key_of(&["top", "--key", "app"]);
    assert!(
        ["tls", "dns", "http"]
            .iter()
            .all(|a| apps.iter().any(|k| k == a)),
        "{apps:?}"
    );
    assert_eq!(
        key_of(&["top", "--key", "flow", "sni", "models.hub-3.example"]).len(),
        1
    );
    // A window and a filter cut the fleet's flows as they cut a store's. The window is on
    // whole seconds: the per-second buckets then cut every flow exactly on both sides. (A
    // window that cuts a second is estimated from how the records lie in it, and the node
    // stores' segments lie otherwise than the one store's: those estimates may differ.)
    // How many flow records the window cut (`approximate_flows`) depends on those segments
    // too, so it is only checked to be there on both sides. The window holds the trace's
    // start: a flow's names are kept per segment, so a window that starts after a flow
    // began names it from the segments it overlaps, and whether those hold the flow's
    // first bytes depends on where each store cut its segments (the writer's cuts follow
    // its compression estimate, which varies run to run): the one store and a node's may
    // then name a flow differently (a TLS flow `tls` or nothing), though each names it
    // from its own bytes. From the trace's start, every flow's start is in the window.
    let w = ["--from", "2026-11-30T02:00:00Z", "--to", "+1s", "tcp"];
    let mut fleet = vec!["top", "--fleet", "--config", c0];
    fleet.extend(w);
    let mut local = vec!["top", "--store", p(&all)];
    local.extend(w);
    let (mut f, mut l) = (answer(&fleet, "fleet"), answer(&local, p(&all)));
    for a in [&mut f, &mut l] {
        let cut = a["limits"]["approximate_flows"].take();
        assert!(cut.as_u64().is_some_and(|n| n > 0), "{cut}");
    }
    assert_eq!(f, l);
    assert!(f["total"]["packets"].as_u64().unwrap() > 0, "{f}");
    // `flows --fleet`: each node's flows, as that node lists them.
    let lines = |out: &std::process::Output| -> Vec<Value> {
        stdout_str(out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let fleet_flows = lines(&run_ok(capsule().args([
        "flows", "--fleet", "--config", c0, "--json", "--limit", "100000",
    ])));
    for key in ["names", "encap"] {
        assert!(
            fleet_flows.iter().any(|f| !f[key].is_null()),
            "no flow with {key} over the fleet"
        );
    }
    for i in 0..3 {
        let store = d.path().join(format!("node{i}"));
        let mut local = lines(&run_ok(capsule().args([
            "flows",
            "--store",
            p(&store),
            "--json",
            "--limit",
            "100000",
        ])));
        let mut mine: Vec<Value> = fleet_flows
            .iter()
            .filter(|f| f["node"] == format!("node{i}"))
            .map(|f| {
                let mut f = f.clone();
                f.as_object_mut().unwrap().remove("node");
                f
            })
            .collect();
        // Names and tunnels included: the fleet's flow rows carry them.
        let by = |v: &Value| v.to_string();
        local.sort_by_key(by);
        mine.sort_by_key(by);
        assert!(!local.is_empty());
        assert_eq!(mine, local, "node{i}'s flows over the fleet");
    }
    // The nodes, each with its span and an empty backlog.
    let out = run_ok(capsule().args(["fleet", "nodes", "--json", "--config", c0]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{v}");
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n["node"], format!("node{i}"));
        assert_eq!(n["backlog"], 0);
        assert!(
            n["segments"].as_u64().unwrap() >= 1 && n["first_ns"].is_u64(),
            "{n}"
        );
    }
    ch.stop();
}

#[test]
fn with_clickhouse_down_rows_wait_in_the_outbox_and_arrive_exactly_once() {
    let d = tempfile::tempdir().unwrap();
    let mut ch = ClickHouse::start(&d.path().join("clickhouse"));
    let (a, b) = (d.path().join("a.pcap"), d.path().join("b.pcap"));
    synth(
        &a,
        &d.path().join("ta.json"),
        4,
        "1s",
        "20M",
        Some("2026-11-30T02:00:00Z"),
    );
    synth(
        &b,
        &d.path().join("tb.json"),
        5,
        "1s",
        "20M",
        Some("2026-11-30T02:00:05Z"),
    );
    let store = d.path().join("node");
    let config = node_config(d.path(), "edge", &ch.url());
    import_ok(&store, &["--segment-size", "1M"], &[p(&a)]);
    let (code, first, err) = publish(&store, &config);
    assert_eq!(code, 0, "{first} {err}");

    ch.stop();
    import_ok(&store, &["--segment-size", "1M"], &[p(&b)]);
    // Local questions need no ClickHouse.
    run_ok(capsule().args(["top", "--store", p(&store), "--config", p(&config)]));
    let (code, down, err) = publish(&store, &config);
    assert_eq!(code, 3, "{down} {err}");
    assert!(
        err.contains("unreachable") && err.contains("outbox"),
        "{err}"
    );
    let waiting = outbox_len(&store);
    assert!(waiting >= 1 && down["backlog"] == waiting, "{down}");
    // Publishing again stages nothing twice.
    let (code, again, _) = publish(&store, &config);
    assert_eq!((code, again["staged"].as_array().unwrap().len()), (3, 0));
    assert_eq!(outbox_len(&store), waiting);

    ch.run();
    let (code, back, err) = publish(&store, &config);
    assert_eq!(code, 0, "{back} {err}");
    assert_eq!(back["pushed_batches"], waiting as u64);
    assert_eq!(outbox_len(&store), 0);
    let flows = first["pushed_rows"]["flows"].as_u64().unwrap()
        + back["pushed_rows"]["flows"].as_u64().unwrap();
    // Everything again (a crash between insert and removal, or a lost staging list).
    std::fs::remove_file(store.join("fleet/staged")).unwrap();
    let (code, repush, err) = publish(&store, &config);
    assert_eq!(code, 0, "{repush} {err}");
    assert_eq!(repush["pushed_rows"]["flows"], flows);

    let key = "node, segment, ip_version, proto, a, b, port_a, port_b, has_ports, vlan_outer, \
               vlan_inner, vlan_tags, families";
    assert_eq!(ch.number("SELECT count() FROM capsule.flows FINAL"), flows);
    assert_eq!(
        ch.number(&format!(
            "SELECT count() FROM (SELECT {key} FROM capsule.flows GROUP BY {key})"
        )),
        flows
    );
    assert_eq!(
        ch.number("SELECT count() FROM (SELECT node, segment FROM capsule.segments GROUP BY node, segment)"),
        ch.number("SELECT count() FROM capsule.segments FINAL"),
    );
    // And the fleet's answer is the store's.
    let c = p(&config);
    assert_eq!(
        answer(&["top", "--fleet", "--config", c], "fleet"),
        answer(&["top", "--store", p(&store), "--config", c], p(&store))
    );
    ch.stop();
}

#[test]
fn the_fleet_section_is_checked_and_fleet_flags_are_refused_where_not_built() {
    let d = tempfile::tempdir().unwrap();
    let good = node_config(d.path(), "edge-1", "http://127.0.0.1:8123");
    let out = run_ok(capsule().args(["config", "check", p(&good)]));
    assert!(
        stdout_str(&out).contains("fleet: node edge-1 publishes to http://127.0.0.1:8123"),
        "{}",
        stdout_str(&out)
    );
    let bad = d.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[fleet]\nnode = \"edge 1\"\nclickhouse = \"https://c:8443\"\n",
    )
    .unwrap();
    let out = run(capsule().args(["config", "check", p(&bad)]));
    let err = stderr_str(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bad.toml:2:") && err.contains("fleet.node"),
        "{err}"
    );
    assert!(
        err.contains("bad.toml:3:") && err.contains("fleet.clickhouse"),
        "{err}"
    );
    for (args, says) in [
        (vec!["top", "--fleet"], "--fleet needs --config FILE"),
        (
            vec!["query", "--fleet", "-w", "/dev/null"],
            "--fleet needs --config FILE",
        ),
        (vec!["flows", "--fleet"], "--fleet needs --config FILE"),
        (
            vec!["top", "--fleet", "--store", "x"],
            "cannot be used with",
        ),
    ] {
        let out = run(capsule().args(&args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr_str(&out));
        assert!(
            stderr_str(&out).contains(says),
            "{args:?}: {}",
            stderr_str(&out)
        );
    }
    let no_section = d.path().join("plain.toml");
    std::fs::write(&no_section, "[groups]\na = [\"10.0.0.0/8\"]\n").unwrap();
    let out = run(capsule().args(["fleet", "nodes", "--config", p(&no_section)]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_str(&out).contains("no [fleet] section"),
        "{}",
        stderr_str(&out)
    );
}

/// A node of the packet tests: its store and its `capsule serve` (TLS, tokens), killed
/// (by PID) when dropped.
struct ServeNode {
    name: &'static str,
    store: PathBuf,
    server: common::serve::Server,
    config: PathBuf,
}

/// A config for `node` at `url` that pulls with `ca` and `token_file` and advertises
/// `advertise`.
fn serve_config(
    dir: &Path,
    node: &str,
    ch: &str,
    advertise: &str,
    ca: &Path,
    token: &Path,
) -> PathBuf {
    let p = dir.join(format!("{node}.toml"));
    std::fs::write(
        &p,
        format!(
            "[fleet]\nnode = \"{node}\"\nclickhouse = \"{ch}\"\nadvertise = \"{advertise}\"\n\
             ca = \"{}\"\ntoken_file = \"{}\"\n",
            ca.display(),
            token.display()
        ),
    )
    .unwrap();
    p
}

/// Starts `capsule serve` for `store` on a port chosen here (its URL goes in the config
/// before it starts); with `publish`, given `--config` (it then publishes the store).
#[allow(clippy::too_many_arguments)]
fn serve_node(
    d: &Path,
    name: &'static str,
    store: &Path,
    pki: &common::serve::Pki,
    tokens: &Path,
    token: &Path,
    ch: &str,
    publish: bool,
) -> ServeNode {
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}");
    let config = serve_config(d, name, ch, &url, &pki.ca, token);
    let audit = d.join(format!("{name}-audit.jsonl"));
    let mut cmd = capsule();
    cmd.args(["serve", "--store", p(store), "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--cert", p(&pki.cert), "--key", p(&pki.key)])
        .args(["--tokens", p(tokens), "--audit-log", p(&audit)]);
    if publish {
        cmd.args(["--config", p(&config)]);
    }
    let server = common::serve::spawn(cmd, pki.ca.clone(), audit, d);
    ServeNode {
        name,
        store: store.to_path_buf(),
        server,
        config,
    }
}

fn send(pid: u32, sig: Signal) {
    assert!(signal(pid, sig), "no process {pid} to signal");
}

/// (time, bytes) of every packet of `file`, in file order.
fn packets_of(file: &Path) -> Vec<(u64, Vec<u8>)> {
    let c = decode_file(file);
    assert!(c.error.is_none(), "{}: {:?}", file.display(), c.error);
    c.packets.into_iter().map(|p| (p.ts_ns, p.data)).collect()
}

#[test]
fn fleet_query_pulls_every_nodes_packets_and_fleet_diff_names_the_lost_ones() {
    need_tool("editcap");
    let d = tempfile::tempdir().unwrap();
    let dp = d.path();
    let mut ch = ClickHouse::start(&dp.join("clickhouse"));
    // edge saw trace T; core saw T 300 µs later, less every 50th packet of T's busiest
    // TCP flow; spare saw another trace.
    let t = dp.join("t.pcap");
    synth(&t, &dp.join("t.json"), 11, "1s", "10M", None);
    let lines = tshark_fields(&t, &["frame.number", "tcp.stream"]);
    let mut streams: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for l in &lines {
        let mut it = l.split('\t');
        let (n, s) = (it.next().unwrap(), it.next().unwrap_or(""));
        if !s.is_empty() {
            streams
                .entry(s.to_string())
                .or_default()
                .push(n.to_string());
        }
    }
    let busiest = streams.values().max_by_key(|v| v.len()).unwrap();
    assert!(
        busiest.len() >= 100,
        "a flow of at least 100 packets: {}",
        busiest.len()
    );
    let dropped: Vec<&String> = busiest.iter().skip(49).step_by(50).collect();
    let tb = dp.join("tb.pcap");
    let mut editcap = Command::new("editcap");
    editcap.args(["-t", "0.0003", p(&t), p(&tb)]).args(&dropped);
    run_ok(&mut editcap);
    let all_t = packets_of(&t);
    let lost_ns: Vec<u64> = dropped
        .iter()
        .map(|n| all_t[n.parse::<usize>().unwrap() - 1].0)
        .collect();
    let s = dp.join("s.pcap");
    synth(
        &s,
        &dp.join("s.json"),
        12,
        "1s",
        "10M",
        Some("2026-11-30T02:00:00.3Z"),
    );

    let pki = common::serve::make_pki(&{
        let k = dp.join("pki");
        std::fs::create_dir_all(&k).unwrap();
        k
    });
    let tokens = dp.join("tokens");
    let token = dp.join("token");
    std::fs::write(&token, common::serve::add_token(&tokens, "fleet") + "\n").unwrap();
    let mut nodes = Vec::new();
    for (name, trace) in [("edge", &t), ("core", &tb), ("spare", &s)] {
        let store = dp.join(name);
        import_ok(&store, &["--segment-size", "1M"], &[p(trace)]);
        // spare's serve publishes its own store (`serve --config` with a [fleet] section).
        let publish_by_serve = name == "spare";
        let n = serve_node(
            dp,
            name,
            &store,
            &pki,
            &tokens,
            &token,
            &ch.url(),
            publish_by_serve,
        );
        if !publish_by_serve {
            let (code, doc, err) = publish(&n.store, &n.config);
            assert_eq!(code, 0, "{doc} {err}");
        }
        nodes.push(n);
    }
    let cfg = p(&nodes[0].config).to_string();
    let t0 = Instant::now();
    loop {
        let out = run_ok(capsule().args(["fleet", "nodes", "--json", "--config", &cfg]));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let spare = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == "spare")
            .cloned();
        if spare.is_some_and(|n| n["segments"].as_u64() >= Some(1) && n["backlog"] == 0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "serve --config never published: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The union of the three, in time order, one interface per node.
    let fleet_out = dp.join("fleet.pcapng");
    let out = run(capsule().args([
        "query",
        "--fleet",
        "--config",
        &cfg,
        "--json",
        "-w",
        p(&fleet_out),
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_str(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut union = Vec::new();
    for n in &nodes {
        let local = dp.join(format!("{}.pcapng", n.name));
        query_ok(&n.store, &local, &[]);
        union.extend(packets_of(&local));
    }
    let got = packets_of(&fleet_out);
    assert_eq!(capinfos_packets(&fleet_out), union.len() as u64, "{doc}");
    assert_eq!(capinfo(&capinfos(&fleet_out), "Strict time order"), "True");
    assert!(
        got.windows(2).all(|w| w[0].0 <= w[1].0),
        "in timestamp order"
    );
    let (mut g, mut u) = (got.clone(), union.clone());
    g.sort();
    u.sort();
    assert!(g == u, "the fleet's packets are the union of the nodes'");
    let names: std::collections::BTreeSet<String> =
        tshark_fields(&fleet_out, &["frame.interface_name"])
            .into_iter()
            .collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["core", "edge", "spare"],
        "one interface per node, named after it"
    );
    assert_eq!(doc["partial"], serde_json::json!([]));

    // --count: the nodes' counts summed, the union's packets and bytes.
    let local_count = |store: &Path, extra: &[&str]| -> (u64, u64) {
        let out = run_ok(
            capsule()
                .args(["query", "--store", p(store), "--count", "--json"])
                .args(extra),
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["packets"].as_u64().unwrap(), v["bytes"].as_u64().unwrap())
    };
    let fleet_count = |extra: &[&str]| -> (u64, u64) {
        let out = run(capsule()
            .args(["query", "--fleet", "--config", &cfg, "--count", "--json"])
            .args(extra));
        assert_eq!(out.status.code(), Some(0), "{}", stderr_str(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["partial"], serde_json::json!([]), "{v}");
        (v["packets"].as_u64().unwrap(), v["bytes"].as_u64().unwrap())
    };
    let sum = |extra: &[&str]| {
        nodes
            .iter()
            .map(|n| local_count(&n.store, extra))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let whole = sum(&[]);
    assert_eq!(whole.0, union.len() as u64);
    assert_eq!(fleet_count(&[]), whole);
    assert_eq!(fleet_count(&["tcp"]), sum(&["tcp"]));
    // --bpf: applied to the nodes' packets as they merge; the union of each node's own
    // `--bpf` answer, in time order; counted the same.
    let bpf = ["--bpf", "tcp[tcpflags] & tcp-syn != 0"];
    let fleet_bpf = dp.join("bpf.pcapng");
    let out = run(capsule()
        .args(["query", "--fleet", "--config", &cfg, "-w", p(&fleet_bpf)])
        .args(bpf));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_str(&out));
    let mut want = Vec::new();
    for n in &nodes {
        let local = dp.join(format!("{}-bpf.pcapng", n.name));
        query_ok(&n.store, &local, &bpf);
        want.extend(packets_of(&local));
    }
    let got = packets_of(&fleet_bpf);
    assert!(
        !want.is_empty() && want.len() < union.len(),
        "{}",
        want.len()
    );
    assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
    let (mut g, mut w) = (got, want.clone());
    g.sort();
    w.sort();
    assert!(
        g == w,
        "--bpf over the fleet is the union of the nodes' --bpf"
    );
    assert_eq!(fleet_count(&bpf).0, want.len() as u64);
    // A window that cuts flows (and a filter): the plan reads the packets a second of the
    // flows it cuts (and not their bytes a second), and the answer is the union of each
    // node's own answer of the window, in time order.
    let cut = [
        "--from",
        "2026-11-30T02:00:00.25Z",
        "--to",
        "2026-11-30T02:00:00.6Z",
        "tcp",
    ];
    let fleet_cut = dp.join("cut.pcapng");
    let out = run(capsule()
        .args(["query", "--fleet", "--config", &cfg, "-w", p(&fleet_cut)])
        .args(cut));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_str(&out));
    let mut want = Vec::new();
    for n in &nodes {
        let local = dp.join(format!("{}-cut.pcapng", n.name));
        query_ok(&n.store, &local, &cut);
        want.extend(packets_of(&local));
    }
    let got = packets_of(&fleet_cut);
    assert!(
        !want.is_empty() && want.len() < union.len(),
        "{}",
        want.len()
    );
    assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
    let (mut g, mut w) = (got, want);
    g.sort();
    w.sort();
    assert!(
        g == w,
        "a cut window over the fleet is the union of the nodes'"
    );
    // Figures for docs/fleet.md (printed with --nocapture).
    eprintln!(
        "figures: fleet query of {} packets over 3 nodes in {:.3} s; per node {:?}",
        doc["packets"],
        doc["seconds"].as_f64().unwrap(),
        doc["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (
                n["node"].as_str().unwrap().to_string(),
                n["seconds"].as_f64().unwrap()
            ))
            .collect::<Vec<_>>()
    );

    // Which hop loses the packets: exactly those core never saw.
    let lost = dp.join("lost.pcapng");
    let out = run(capsule().args([
        "fleet",
        "diff",
        "--between",
        "edge",
        "core",
        "--config",
        &cfg,
        "--json",
        "-w",
        p(&lost),
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_str(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let named: Vec<u64> = v["a_only_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(named, lost_ns, "the packets edge saw and core did not");
    assert_eq!(v["b_only"], 0, "{v}");
    let lost_pkts = packets_of(&lost);
    assert_eq!(lost_pkts.iter().map(|p| p.0).collect::<Vec<_>>(), lost_ns);
    let flows = v["flows"].as_array().unwrap();
    assert_eq!(flows[0]["a_only"], dropped.len() as u64, "{}", flows[0]);
    assert!(flows[1..]
        .iter()
        .all(|f| f["a_only"] == 0 && f["b_only"] == 0));
    let delay = &flows[0]["delay"];
    let (lo, hi) = (
        delay["min_ns"].as_i64().unwrap(),
        delay["max_ns"].as_i64().unwrap(),
    );
    assert!(
        299_000 <= lo && hi <= 301_000,
        "the one-way delay is core's 300 µs: {delay}"
    );
    assert!(flows[0]["export"]
        .as_str()
        .unwrap()
        .contains("capsule query --server https://"));

    // The table names the flow, its losses and the command that exports them from edge.
    let out = run_ok(capsule().args([
        "fleet",
        "diff",
        "--between",
        "edge",
        "core",
        "--config",
        &cfg,
    ]));
    let text = stdout_str(&out);
    assert!(
        text.contains(&format!("{} packets A saw and B did not", dropped.len()))
            && text.contains("capsule query --server https://"),
        "{text}"
    );
    // The plan: every node, with its serve URL and candidate segments.
    let out = run_ok(capsule().args(["query", "--fleet", "--config", &cfg, "--explain", "--json"]));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let planned = plan["nodes"].as_array().unwrap();
    assert_eq!(planned.len(), 3, "{plan}");
    for (n, node) in planned.iter().zip(["core", "edge", "spare"]) {
        assert_eq!(n["node"], node);
        assert!(n["advertise"]
            .as_str()
            .unwrap()
            .starts_with("https://127.0.0.1:"));
        assert!(!n["segments"].as_array().unwrap().is_empty());
    }

    // A node that hangs (stopped): the deadline makes the answer partial, never a hang.
    let spare_pid = nodes[2].server.child.id();
    send(spare_pid, Signal::STOP);
    let t0 = Instant::now();
    let out = run(capsule()
        .env("CAPSULE_FLEET_DEADLINES", "500,500,500")
        .args([
            "query",
            "--fleet",
            "--config",
            &cfg,
            "-w",
            p(&dp.join("hung.pcapng")),
        ]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr_str(&out));
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(
        stderr_str(&out).contains("node spare"),
        "{}",
        stderr_str(&out)
    );
    // Killed mid-query (kill -9 while the query waits on it): exit 3 naming it, with the
    // other nodes' packets.
    let part = dp.join("part.pcapng");
    let q = capsule()
        .args([
            "query",
            "--fleet",
            "--config",
            &cfg,
            "--json",
            "-w",
            p(&part),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    send(spare_pid, Signal::KILL);
    let out = q.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr_str(&out));
    assert!(
        stderr_str(&out).contains("node spare"),
        "{}",
        stderr_str(&out)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["partial"], serde_json::json!(["spare"]));
    let spare_n = packets_of(&dp.join("spare.pcapng")).len() as u64;
    assert_eq!(capinfos_packets(&part), union.len() as u64 - spare_n);
    drop(nodes);
    ch.stop();
}

/// A config naming `node` at `url`, with the link's rate and the millisecond alert rules.
fn ms_config(dir: &Path, node: &str, url: &str) -> PathBuf {
    let p = dir.join(format!("{node}-ms.toml"));
    std::fs::write(
        &p,
        format!(
            "[links]\nspan0 = \"10G\"\n\n[alerts]\nef_share = 0.5\nef_share_for = \"2ms\"\n\
             microburst_rate = \"80%\"\nincast_senders = 16\n\n\
             [fleet]\nnode = \"{node}\"\nclickhouse = \"{url}\"\n"
        ),
    )
    .unwrap();
    p
}

/// Issue 30 with issue 33: the nodes publish their millisecond series (bins per ms and DSCP
/// value, fan-ins) beside their flows; `bursts --fleet` and the millisecond rules of
/// `alerts --fleet` over three nodes equal the same commands on one store holding all the
/// traffic, with the planted 2 ms EF burst and the 24-sender incast (its senders split
/// between two nodes) found. Series missing from the catalog (as a release before them
/// left it) are named, exit 3, and a publish of this release sends them.
#[test]
fn bursts_and_millisecond_alerts_over_three_nodes_equal_the_one_store() {
    use common::planted::*;
    let d = tempfile::tempdir().unwrap();
    let dp = d.path();
    let mut ch = ClickHouse::start(&dp.join("clickhouse"));
    let synth_pcap = dp.join("synth.pcap");
    synth(&synth_pcap, &dp.join("truth.json"), 1, "2s", "20M", None);
    let planted_pcap = dp.join("planted.pcap");
    std::fs::write(&planted_pcap, planted()).unwrap();
    let all = dp.join("all");
    import_ok(
        &all,
        &["--segment-size", "1M"],
        &[p(&synth_pcap), p(&planted_pcap)],
    );
    // Split by host: the incast's senders 10.88.0.1-15 go to node0, 16-24 (with the
    // burst) to node2.
    let first = "(net 10.10.0.0/16 or src net 10.88.0.0/28)";
    let parts = [
        first.to_string(),
        format!("not {first} and vlan 200"),
        format!("not {first} and not vlan 200"),
    ];
    let mut configs = Vec::new();
    let mut stores = Vec::new();
    let mut total = 0;
    for (i, filter) in parts.iter().enumerate() {
        let part = dp.join(format!("part{i}.pcap"));
        query_ok(&all, &part, &[filter]);
        total += capinfos_packets(&part);
        let store = dp.join(format!("node{i}"));
        let config = ms_config(dp, &format!("node{i}"), &ch.url());
        import_ok(&store, &["--segment-size", "1M"], &[p(&part)]);
        let (code, doc, err) = publish(&store, &config);
        assert_eq!(code, 0, "{doc} {err}");
        assert!(doc["pushed_rows"]["ms_bins"].as_u64() > Some(0), "{doc}");
        assert_eq!(
            doc["pushed_rows"]["ms_segments"], doc["pushed_rows"]["segments"],
            "{doc}"
        );
        configs.push(config);
        stores.push(store);
    }
    assert_eq!(
        total,
        capinfos_packets(&synth_pcap) + capinfos_packets(&planted_pcap),
        "the parts split the traffic"
    );
    let c0 = p(&configs[0]).to_string();
    let asks: [&[&str]; 3] = [
        &["bursts", "--series"],
        &["bursts", "--above", "5G", "--limit", "3"],
        &[
            "bursts",
            "--from",
            "2026-11-30T02:00:01.2Z",
            "--to",
            "+400ms",
        ],
    ];
    let compare = |q: &[&str]| -> Value {
        let mut fleet = q.to_vec();
        fleet.extend(["--fleet", "--config", &c0]);
        let mut local = q.to_vec();
        local.extend(["--store", p(&all), "--config", &c0]);
        let mut f = answer(&fleet, "fleet");
        let mut l = answer(&local, p(&all));
        if q.contains(&"--from") {
            // How many flow records a window cuts (their counts then come from 1-second
            // buckets) depends on where each store cut its segments: one store of all the
            // traffic cuts them elsewhere than three. Both say some were; the rest is equal.
            // For the same reason a burst's flows, ranked by their bytes in the seconds the
            // burst touches, are estimates where the window cuts a second: which flows
            // made each burst is compared over the whole store (the asks above), and here
            // only that each burst names some.
            for v in [&mut f, &mut l] {
                let n = v["limits"]["approximate_flows"].take();
                assert!(n.as_u64() > Some(0), "{q:?}: {n}");
                for b in v["bursts"].as_array_mut().unwrap() {
                    let flows = b["flows"].take();
                    assert!(
                        flows.as_array().is_some_and(|a| !a.is_empty()),
                        "{q:?}: {b}"
                    );
                }
            }
        }
        for (k, v) in l.as_object().unwrap() {
            assert_eq!(
                &f[k], v,
                "{q:?}: the fleet's {k} differs from the one store's"
            );
        }
        assert_eq!(
            f, l,
            "{q:?}: the fleet's answer differs from the one store's"
        );
        f
    };
    for q in asks {
        let v = compare(q);
        // Not equal by being empty: the burst and the incast are in it.
        assert_eq!(v["burst_count"], 1, "{q:?}: {}", v["bursts"]);
        assert_eq!(v["bursts"][0]["start_ns"], BURST_MS * MS);
        assert_eq!(v["incast_count"], 1, "{q:?}: {}", v["incast"]);
        let i = &v["incast"][0];
        assert_eq!(i["start_ns"], INCAST_MS * MS);
        assert_eq!(
            i["senders"].as_array().unwrap().len(),
            usize::from(SENDERS),
            "all senders, from two nodes"
        );
    }
    // The millisecond rules of `alerts` read the same series.
    let ms_rules = |v: Value| -> Vec<Value> {
        v["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| ["ef_share", "microburst", "incast"].contains(&a["rule"].as_str().unwrap()))
            .cloned()
            .collect()
    };
    let f = ms_rules(answer(&["alerts", "--fleet", "--config", &c0], "fleet"));
    let l = ms_rules(answer(
        &["alerts", "--store", p(&all), "--config", &c0],
        p(&all),
    ));
    assert_eq!(
        f, l,
        "the fleet's millisecond alerts differ from the one store's"
    );
    let rules: std::collections::BTreeSet<&str> =
        f.iter().map(|a| a["rule"].as_str().unwrap()).collect();
    assert_eq!(rules, ["ef_share", "incast", "microburst"].into(), "{f:#?}");

    // The catalog as a release before the series left it: flows, no series. Named, exit 3.
    for t in ["ms_bins", "ms_fanins", "ms_segments"] {
        ch.sql(&format!("DROP TABLE capsule.{t}"))
            .unwrap_or_else(|| panic!("DROP TABLE capsule.{t}"));
    }
    for store in &stores {
        std::fs::remove_file(store.join("fleet/staged-series")).unwrap();
    }
    let out = run(capsule().args(["bursts", "--fleet", "--config", &c0, "--json"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr_str(&out));
    for i in 0..3 {
        assert!(
            stderr_str(&out).contains(&format!("node node{i}: no millisecond series")),
            "{}",
            stderr_str(&out)
        );
    }
    // This release's publish stages the series alone (the flows were staged) and sends
    // them: the answer is whole again, and the same.
    for (store, config) in stores.iter().zip(&configs) {
        let (code, doc, err) = publish(store, config);
        assert_eq!(code, 0, "{doc} {err}");
        assert_eq!(doc["pushed_rows"]["flows"], 0, "{doc}");
        assert_eq!(doc["pushed_rows"]["segments"], 0, "{doc}");
        assert!(
            doc["pushed_rows"]["ms_segments"].as_u64() > Some(0),
            "{doc}"
        );
    }
    compare(asks[0]);
    ch.stop();
}

/// A catalog an earlier release made (`segments` without `location`, no other table yet):
/// a fleet question is refused by it, makes the missing tables and column, and answers; the
/// old row reads as `local`; a publish then inserts rows with their location.
#[test]
fn a_catalog_of_an_earlier_release_gets_the_location_column_at_the_first_question() {
    let d = tempfile::tempdir().unwrap();
    let ch = ClickHouse::start(&d.path().join("ch"));
    for sql in [
        "CREATE DATABASE capsule".to_string(),
        "CREATE TABLE capsule.segments (node String, segment UInt64, segment_len UInt64, \
         published_ns UInt64, first_ns UInt64, last_ns UInt64, flows UInt64, packets UInt64, \
         bytes UInt64, path String) ENGINE = ReplacingMergeTree(published_ns) PARTITION BY \
         toYYYYMMDD(toDateTime(intDiv(first_ns, 1000000000))) ORDER BY (node, segment)"
            .to_string(),
        "INSERT INTO capsule.segments VALUES ('old', 1, 100, 1, 1796004000000000000, \
         1796004001000000000, 2, 3, 400, '/old/seg')"
            .to_string(),
    ] {
        ch.sql(&sql)
            .unwrap_or_else(|| panic!("ClickHouse refused {sql}"));
    }
    let config = node_config(d.path(), "edge", &ch.url());
    let out = run_ok(capsule().args(["fleet", "nodes", "--config", p(&config), "--json"]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nodes"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(
        ch.sql("SELECT location FROM capsule.segments FINAL WHERE node = 'old'"),
        Some("local".to_string())
    );
    let pcap = d.path().join("in.pcap");
    synth(&pcap, &d.path().join("truth.json"), 5, "1s", "10M", None);
    let store = d.path().join("store");
    import_ok(&store, &["--segment-size", "1M"], &[p(&pcap)]);
    let (code, doc, err) = publish(&store, &config);
    assert_eq!(code, 0, "{doc} {err}");
    let n = segments(&store).len() as u64;
    assert_eq!(
        ch.number(
            "SELECT count() FROM capsule.segments FINAL WHERE node = 'edge' AND \
             location = 'local'"
        ),
        n
    );
    let out = run_ok(capsule().args(["top", "--fleet", "--config", p(&config), "--json"]));
    assert!(!out.stdout.is_empty());
}

/// The packed flow table (`capsule.flow_packed`, what `top`, `dscp`, `matrix` and the
/// packet plan read) of a catalog whose flow rows an earlier release published, without
/// it: filled from `capsule.flows` at the first question, then by ClickHouse itself at
/// every insert (also an insert the earlier release's node makes, which knows nothing of
/// it); the answers equal the store's own.
#[test]
fn the_packed_flow_table_is_filled_for_rows_published_before_it_and_after() {
    let d = tempfile::tempdir().unwrap();
    let mut ch = ClickHouse::start(&d.path().join("ch"));
    let (pcap, a, b, ca, cb) = two_nodes_na_published(d.path(), &ch.url());
    // What an earlier release's catalog is: the flow rows, no packed table, no view.
    for sql in [
        "DROP TABLE capsule.flows_to_packed",
        "DROP TABLE capsule.flow_packed_filled",
        "DROP TABLE capsule.flow_packed",
    ] {
        ch.sql(sql)
            .unwrap_or_else(|| panic!("ClickHouse refused {sql}"));
    }
    let rows = |t: &str| ch.number(&format!("SELECT count() FROM capsule.{t} FINAL"));
    let flows_a = rows("flows");
    assert!(flows_a > 0);
    let top = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--fleet", "--config", p(&ca)]);
        answer(&v, "fleet")
    };
    let local = |store: &Path, args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--store", p(store), "--config", p(&ca)]);
        answer(&v, p(store))
    };
    assert_eq!(top(&["top"]), local(&a, &["top"]));
    assert_eq!(rows("flow_packed"), flows_a, "the rows published before it");
    // A second node publishes: the view copies its rows as they are inserted.
    let (code, doc, err) = publish(&b, &cb);
    assert_eq!(code, 0, "{doc} {err}");
    let flows_ab = rows("flows");
    assert!(flows_ab > flows_a);
    assert_eq!(rows("flow_packed"), flows_ab, "the rows published after it");
    // A row inserted into `capsule.flows` by a node that never creates the packed table
    // (an earlier release's): packed too, the re-push collapsing.
    ch.sql("INSERT INTO capsule.flows SELECT * FROM capsule.flows WHERE node = 'nb'")
        .expect("ClickHouse refused the re-insert");
    assert_eq!(rows("flow_packed"), flows_ab);
    let all = d.path().join("all");
    import_ok(&all, &["--segment-size", "1M"], &[p(&pcap)]);
    for q in [vec!["top", "--key", "pair"], vec!["dscp"], vec!["matrix"]] {
        assert_eq!(top(&q), local(&all, &q), "{q:?}");
    }
    ch.stop();
}

/// A catalog of the release before the flows' attributes (`flows` without `names` and
/// `encap`, and no packed table): the first question adds the columns (its rows read "not
/// kept") and makes the packed table with its view, so a newer node's rows reach it with
/// their names; a name term over rows that carry none says which node's segments it could
/// not see (exit 3), and over the newer node's flows answers as that node's store does.
#[test]
fn a_catalog_before_the_flow_attributes_gets_them_and_a_view_that_copies_them() {
    let d = tempfile::tempdir().unwrap();
    let mut ch = ClickHouse::start(&d.path().join("ch"));
    let (_, _, b, ca, cb) = two_nodes_na_published(d.path(), &ch.url());
    // The earlier release's catalog: what it made, with na's rows as it published them.
    let mut sqls = vec![
        "DROP TABLE capsule.flows_to_packed".to_string(),
        "DROP TABLE capsule.flow_packed_filled".to_string(),
        "DROP TABLE capsule.flow_packed".to_string(),
    ];
    for c in ["names", "encap"] {
        sqls.push(format!("ALTER TABLE capsule.flows DROP COLUMN {c}"));
    }
    for sql in &sqls {
        ch.sql(sql)
            .unwrap_or_else(|| panic!("ClickHouse refused {sql}"));
    }
    // The first question: the columns added, na's rows read as not kept.
    let fleet = |args: &[&'static str]| -> Vec<String> {
        args.iter()
            .copied()
            .chain(["--fleet", "--config", p(&ca)])
            .map(String::from)
            .collect()
    };
    let args = fleet(&["top", "--key", "app"]);
    let apps = answer(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        "fleet",
    );
    assert_eq!(apps["rows"].as_array().map(Vec::len), Some(1), "{apps}");
    assert_eq!(apps["rows"][0]["key"], "unknown", "{apps}");
    let count = |sql: &str| ch.number(sql);
    assert_eq!(
        count(
            "SELECT count() FROM system.columns WHERE database = 'capsule' AND table IN \
             ('flows', 'flow_packed') AND name IN ('names', 'encap')"
        ),
        4
    );
    // A newer node publishes: its rows reach the packed table with their names.
    let (code, doc, err) = publish(&b, &cb);
    assert_eq!(code, 0, "{doc} {err}");
    let named = |t: &str| {
        count(&format!(
            "SELECT count() FROM capsule.{t} FINAL WHERE node = 'nb' AND names != ''"
        ))
    };
    assert!(named("flows") > 0);
    assert_eq!(named("flow_packed"), named("flows"));
    // A name term: over nb's flows as nb's store answers, na's segments named as unseen.
    let q = [
        "top",
        "--key",
        "flow",
        "app",
        "dns",
        "and",
        "not",
        "net",
        "10.10.0.0/16",
    ];
    let out = run(capsule().args(fleet(&q)).arg("--json"));
    assert_eq!(out.status.code(), Some(3), "{}", stderr_str(&out));
    assert!(
        stderr_str(&out).contains("node na: the flows of segment(s)"),
        "{}",
        stderr_str(&out)
    );
    let mut local = q.to_vec();
    local.extend(["--store", p(&b), "--config", p(&ca)]);
    let l = answer(&local, p(&b));
    let f: Value = serde_json::from_str(&stdout_str(&out).replace("fleet", "SOURCE")).unwrap();
    assert!(l["rows"].as_array().is_some_and(|r| !r.is_empty()), "{l}");
    assert_eq!(f["rows"], l["rows"]);
    ch.stop();
}

/// `filter` of `pcap` imported into a new store `store`.
/// One synthetic trace (`DIR/in.pcap`) split into two node stores, `DIR/a` (the
/// 10.10.0.0/16 traffic) and `DIR/b` (the rest), with their configs (nodes `na` and `nb` of
/// the catalog at `url`); `na` has published. Returns the trace, the stores and configs.
fn two_nodes_na_published(dir: &Path, url: &str) -> (PathBuf, PathBuf, PathBuf, PathBuf, PathBuf) {
    let pcap = dir.join("in.pcap");
    synth(&pcap, &dir.join("truth.json"), 7, "2s", "10M", None);
    let (a, b) = (dir.join("a"), dir.join("b"));
    query_ok_into(&pcap, &a, "net 10.10.0.0/16");
    query_ok_into(&pcap, &b, "not net 10.10.0.0/16");
    let ca = node_config(dir, "na", url);
    let cb = node_config(dir, "nb", url);
    let (code, doc, err) = publish(&a, &ca);
    assert_eq!(code, 0, "{doc} {err}");
    (pcap, a, b, ca, cb)
}

fn query_ok_into(pcap: &Path, store: &Path, filter: &str) {
    let whole = store.with_extension("whole");
    import_ok(&whole, &["--segment-size", "1M"], &[p(pcap)]);
    let part = store.with_extension("pcap");
    query_ok(&whole, &part, &[filter]);
    import_ok(store, &["--segment-size", "1M"], &[p(&part)]);
}
