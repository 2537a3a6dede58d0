//! Live alerts (issue 13): `capsule capture --config FILE` with `[alerts] live_file` on one
//! end of a veth pair between two network namespaces made here (and removed), while synth's
//! scenario is replayed from the other end with tcpreplay. The JSON-lines sink receives the
//! exfil's egress alert and each rogue EF host's DSCP alert engaged exactly once, and each
//! released once after its traffic left the look-back window; a dead sink costs no packet
//! and its events are counted as undelivered by `capsule status`. Needs root.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn ip(args: &[&str]) {
    run_ok(Command::new("ip").args(args));
}

struct Link {
    a: String,
    b: String,
}

impl Link {
    fn new(tag: &str) -> Link {
        assert!(
            rustix_is_root(),
            "this test needs root (network namespaces)"
        );
        let pid = std::process::id();
        let (a, b) = (
            format!("caltest-{pid}-{tag}-a"),
            format!("caltest-{pid}-{tag}-b"),
        );
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        let link = Link { a, b };
        ip(&[
            "link", "add", "name", "cal-a", "netns", &link.a, "type", "veth", "peer", "name",
            "cal-b", "netns", &link.b,
        ]);
        for (ns, ifname) in [(&link.a, "cal-a"), (&link.b, "cal-b")] {
            run_ok(Command::new("ip").args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{ifname}.disable_ipv6=1"),
            ]));
            ip(&["-n", ns, "link", "set", ifname, "mtu", "1600", "up"]);
        }
        link
    }

    fn send(&self, file: &Path) {
        need_tool("tcpreplay");
        let out = run_ok(Command::new("ip").args([
            "netns",
            "exec",
            &self.a,
            "tcpreplay",
            "-i",
            "cal-a",
            "--mbps",
            "100",
            p(file),
        ]));
        let text = stdout_str(&out);
        let failed = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Failed packets:"))
            .map(str::trim);
        assert_eq!(failed, Some("0"), "{text}");
    }

    fn capture(&self, store: &Path, config: &Path) -> Running {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.b,
            bin(),
            "capture",
            "--iface",
            "cal-b",
        ])
        .args([
            "--mode",
            "afpacket",
            "--store",
            p(store),
            "--config",
            p(config),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let child = Running(Some(c.spawn().unwrap()));
        // Ready when the status file names the interface.
        let t0 = Instant::now();
        while !store.join("capture-status.json").exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "capture did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(500));
        child
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn rustix_is_root() -> bool {
    stdout_str(&run_ok(Command::new("id").arg("-u"))).trim() == "0"
}

/// A running capture, stopped (SIGTERM) when dropped: a failing test leaves none behind.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

fn stop(mut r: Running) -> String {
    let child = r.0.take().unwrap();
    run_ok(Command::new("kill").args(["-TERM", &child.id().to_string()]));
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn config(dir: &Path, truth: &Value, sink: &Path) -> std::path::PathBuf {
    let facts = &truth["facts"];
    let path = dir.join("live.toml");
    std::fs::write(
        &path,
        format!(
            "[groups]\nvoice = [\"{}\"]\nmodel-store = [\"{}\"]\n\n[dscp]\nef = [\"voice\"]\n\n\
             [egress]\nmodel-store = [\"voice\"]\n\n\
             [alerts]\negress_bytes = \"1M\"\negress_window = \"10s\"\n\
             straggler_interval = \"1s\"\nlive_every = \"1s\"\nlive_file = \"{}\"\n\
             disabled = [\"off_hours\", \"straggler\", \"group_pair\", \
             \"tcp_retransmissions\", \"tcp_zero_window\"]\n",
            facts["ef_allow_list"][0].as_str().unwrap(),
            facts["exfil"]["src"].as_str().unwrap(),
            p(sink)
        ),
    )
    .unwrap();
    path
}

fn setup(name: &str) -> (std::path::PathBuf, std::path::PathBuf, Value) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("synth.pcap");
    let truth = dir.join("truth.json");
    synth(&pcap, &truth, 3, "4s", "50M", None);
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    (dir, pcap, truth)
}

#[test]
fn live_alerts_engage_once_each_and_release_into_a_json_lines_file() {
    let (dir, pcap, truth) = setup("alerts-live");
    let sink = dir.join("alerts.jsonl");
    let cfg = config(&dir, &truth, &sink);
    let link = Link::new("ok");
    let store = dir.join("store");
    let cap = link.capture(&store, &cfg);
    link.send(&pcap);
    // Engaged within a few seconds of the traffic; released once it left the 10 s window.
    let t0 = Instant::now();
    let events = loop {
        let text = std::fs::read_to_string(&sink).unwrap_or_default();
        let events: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
            .collect();
        let engaged = events.iter().filter(|e| e["state"] == "engaged").count();
        let released = events.iter().filter(|e| e["state"] == "released").count();
        if engaged >= 4 && released >= engaged {
            break events;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "events so far: {events:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    stop(cap);
    let mut per: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &events {
        per.entry(e["key"].as_str().unwrap().to_string())
            .or_default()
            .push(e["state"].as_str().unwrap().to_string());
    }
    // Every key engaged once, then released once (suppression: 1 h by default).
    for (k, states) in &per {
        assert_eq!(states, &["engaged", "released"], "{k}");
    }
    let facts = &truth["facts"];
    let dscp: BTreeSet<String> = per
        .keys()
        .filter_map(|k| k.strip_prefix("dscp|").map(str::to_string))
        .collect();
    let rogue: BTreeSet<String> = facts["rogue_ef_hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_string())
        .collect();
    assert_eq!(dscp, rogue);
    let egress: Vec<&Value> = events
        .iter()
        .filter(|e| e["state"] == "engaged" && e["alert"]["rule"] == "egress")
        .collect();
    assert_eq!(egress.len(), 1, "{egress:#?}");
    assert_eq!(
        egress[0]["alert"]["entity"]["hosts"][0],
        facts["exfil"]["src"]
    );
    assert!(egress[0]["alert"]["query"]
        .as_str()
        .unwrap()
        .starts_with("capsule query"));
    // capsule status counts what was sent.
    let st: Value = serde_json::from_slice(
        &run_ok(capsule().args(["status", "--store", p(&store), "--json"])).stdout,
    )
    .unwrap();
    assert_eq!(st["alerts"]["sent"].as_u64().unwrap(), events.len() as u64);
    assert_eq!(st["alerts"]["undelivered"], 0);
}

#[test]
fn a_dead_sink_costs_no_packet_and_is_counted_undelivered() {
    let (dir, pcap, truth) = setup("alerts-live-dead");
    let sink = dir.join("no-such-dir").join("alerts.jsonl");
    let cfg = config(&dir, &truth, &sink);
    let link = Link::new("dead");
    let store = dir.join("store");
    let cap = link.capture(&store, &cfg);
    link.send(&pcap);
    std::thread::sleep(Duration::from_secs(3));
    let summary = stop(cap);
    let sent = truth["packets"].as_u64().unwrap();
    assert!(
        summary.starts_with(&format!("captured {sent} packets")) && summary.contains("dropped 0"),
        "{summary}"
    );
    let text = stdout_str(&run_ok(capsule().args(["status", "--store", p(&store)])));
    let line = text
        .lines()
        .find(|l| l.starts_with("live alerts:"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("0 event(s) sent"), "{line}");
    assert!(!line.contains(" 0 undelivered"), "{line}");
    assert!(line.contains("no-such-dir"), "{line}");
}
