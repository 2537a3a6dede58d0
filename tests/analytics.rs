//! The analytics commands (issue 12) against synth's scenario and its truth file: `dscp`
//! names exactly the planted rogue EF hosts, `stragglers` exactly the planted straggler from
//! the interval it starts in, `top --key flow` bytes equal the truth per flow, `matrix`
//! totals equal the flow totals, `tcp` retransmissions agree with tshark's, and the commands
//! open no segment file (strace).
//!
//! One store is built for all of them (seed 1, 10 s at 100 Mbit/s, segments of 8 MB so that
//! the long flows span several segments) in the test target's temporary directory.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

struct Fixture {
    dir: PathBuf,
    pcap: PathBuf,
    store: PathBuf,
    config: PathBuf,
    truth: Value,
}

impl Fixture {
    fn store(&self) -> &str {
        p(&self.store)
    }
}

/// The shared store, built once per test run.
fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("analytics");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pcap = dir.join("synth.pcap");
        let truth_path = dir.join("truth.json");
        synth(&pcap, &truth_path, 1, "10s", "100M", None);
        let truth: Value = serde_json::from_slice(&std::fs::read(&truth_path).unwrap()).unwrap();
        let store = dir.join("store");
        import_ok(&store, &["--segment-size", "8M"], &[p(&pcap)]);
        let facts = &truth["facts"];
        let gpu: Vec<String> = facts["gpu_nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| format!("\"{}\"", h.as_str().unwrap()))
            .collect();
        let config = dir.join("capsule.toml");
        std::fs::write(
            &config,
            format!(
                "[groups]\nvoice = [\"{}\"]\ngpu = [{}]\nstorage = [\"{}\"]\n\
                 model-store = [\"{}\"]\n\n[dscp]\nef = [\"voice\"]\n\n\
                 [egress]\nmodel-store = [\"storage\"]\n",
                facts["ef_allow_list"][0].as_str().unwrap(),
                gpu.join(", "),
                facts["storage_subnet"].as_str().unwrap(),
                facts["exfil"]["src"].as_str().unwrap(),
            ),
        )
        .unwrap();
        Fixture {
            dir,
            pcap,
            store,
            config,
            truth,
        }
    })
}

/// Runs `capsule ARGS --json` and parses its one JSON document.
fn json(args: &[&str]) -> Value {
    let mut cmd = capsule();
    cmd.args(args).arg("--json");
    let out = run_ok(&mut cmd);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{}: not one JSON document: {e}", show(&cmd)))
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn dscp_violations_are_exactly_the_rogue_hosts() {
    let f = fixture();
    let d = json(&["dscp", "--store", f.store(), "--config", p(&f.config)]);
    let violations = d["violations"].as_array().unwrap();
    let senders: BTreeSet<String> = violations
        .iter()
        .map(|v| v["src"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(senders, strings(&f.truth["facts"]["rogue_ef_hosts"]));
    for v in violations {
        assert_eq!(v["dscp"], 46);
        assert_eq!(v["name"], "ef");
        assert!(v["bytes"].as_u64().unwrap() > 0 && v["packets"].as_u64().unwrap() > 0);
        assert!(v["first_ns"].as_u64() <= v["last_ns"].as_u64());
        assert!(v["first"].as_str().unwrap().ends_with('Z'));
        let q = v["query"].as_str().unwrap();
        assert!(
            q.starts_with(&format!("capsule query --store {} --from ", f.store()))
                && q.contains(&format!("src host {}", v["src"].as_str().unwrap()))
                // Rendered from the finding's filter value: DSCP by its canonical name.
                && q.contains("dscp ef"),
            "{q}"
        );
    }
    // The voice hosts send EF too (allowed): EF's senders include them, and EF is not CS5.
    let values = d["values"].as_array().unwrap();
    let ef = values.iter().find(|v| v["dscp"] == 46).expect("EF seen");
    assert_eq!(ef["name"], "ef");
    assert!(ef["top_senders"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["host"].as_str().unwrap().starts_with("10.40.0.")));
    assert!(values.iter().all(|v| v["dscp"] != 40), "nothing is CS5");
    // Every violation's bytes are the EF bytes of the truth's flows from that sender.
    for v in violations {
        let want: u64 = f.truth["flows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["src"] == v["src"] && t["dst"] == v["dst"] && t["dscp"][0] == 46)
            .map(|t| t["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(v["bytes"].as_u64().unwrap(), want, "{v}");
    }
    // The query a violation names exports exactly its packets.
    let q = violations[0]["query"].as_str().unwrap();
    let out = f.dir.join("violation.pcap");
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c").arg(format!(
        "{} -w {}",
        q.replacen("capsule", bin(), 1),
        p(&out)
    ));
    run_ok(&mut sh);
    assert_eq!(
        capinfos_packets(&out),
        violations[0]["packets"].as_u64().unwrap()
    );
}

#[test]
fn stragglers_name_the_planted_straggler_from_the_first_interval() {
    let f = fixture();
    let s = json(&[
        "stragglers",
        "--store",
        f.store(),
        "--config",
        p(&f.config),
        "--group",
        "gpu",
        "--interval",
        "1s",
        "--ratio",
        "0.75",
    ]);
    let found = s["stragglers"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let x = &found[0];
    assert_eq!(x["host"], f.truth["facts"]["straggler"]);
    // It sends 60% of its peers' ring bytes from the first training step on.
    let start = f.truth["config"]["start_ns"].as_u64().unwrap();
    assert_eq!(x["from_ns"].as_u64().unwrap(), start);
    assert_eq!(x["intervals"], 10);
    let r = x["ratio_to_median"].as_f64().unwrap();
    assert!((0.5..0.75).contains(&r), "{r}");
    assert_eq!(s["members"].as_array().unwrap().len(), 8);
    // With the default ratio (0.5) the 60% node is not flagged, and 10 s intervals (one
    // interval in a 10 s run) cannot make a run of 3.
    for extra in [&["--interval", "1s"][..], &[][..]] {
        let mut args = vec![
            "stragglers",
            "--store",
            f.store(),
            "--config",
            p(&f.config),
            "--group",
            "gpu",
        ];
        args.extend_from_slice(extra);
        let s = json(&args);
        assert!(s["stragglers"].as_array().unwrap().is_empty(), "{extra:?}");
    }
}

/// The canonical text `top --key flow` gives a flow of the truth: (address, port) pairs in
/// order, ICMP without ports.
fn flow_label(t: &Value) -> String {
    let proto = t["protocol"].as_u64().unwrap() as u8;
    let ports = matches!(proto, 6 | 17 | 132);
    let ep = |a: &str, port: u64| -> (IpAddr, u16, String) {
        let ip: IpAddr = a.parse().unwrap();
        let text = match (ip, ports) {
            (IpAddr::V6(v6), true) => format!("[{v6}]:{port}"),
            (ip, true) => format!("{ip}:{port}"),
            (ip, false) => ip.to_string(),
        };
        (ip, if ports { port as u16 } else { 0 }, text)
    };
    let s = ep(t["src"].as_str().unwrap(), t["src_port"].as_u64().unwrap());
    let d = ep(t["dst"].as_str().unwrap(), t["dst_port"].as_u64().unwrap());
    let (a, b) = if (s.0, s.1) <= (d.0, d.1) {
        (s, d)
    } else {
        (d, s)
    };
    let vlan = t["vlan"]
        .as_u64()
        .map_or(String::new(), |v| format!(" vlan {v}"));
    format!(
        "{}{vlan} {} <-> {}",
        capsule_query::filter::proto_name(proto).unwrap(),
        a.2,
        b.2
    )
}

#[test]
fn top_flow_bytes_equal_the_truth_and_long_flows_are_one_row() {
    let f = fixture();
    let segments = segment_files(&f.store).len();
    assert!(segments >= 5, "the store has {segments} segments");
    let t = json(&[
        "top",
        "--store",
        f.store(),
        "--key",
        "flow",
        "--limit",
        "100000",
    ]);
    let mut want: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for fl in f.truth["flows"].as_array().unwrap() {
        let e = want.entry(flow_label(fl)).or_default();
        e.0 += fl["bytes"].as_u64().unwrap();
        e.1 += fl["packets"].as_u64().unwrap();
    }
    let got: BTreeMap<String, (u64, u64)> = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_string(),
                (r["bytes"].as_u64().unwrap(), r["packets"].as_u64().unwrap()),
            )
        })
        .collect();
    assert_eq!(
        got.len(),
        t["rows"].as_array().unwrap().len(),
        "one row a flow"
    );
    assert_eq!(got, want);
    assert!(t["other"].is_null());
    let total: u64 = want.values().map(|v| v.0).sum();
    assert_eq!(t["total"]["bytes"].as_u64().unwrap(), total);
    // The GPU ring flows run the whole 10 s across every segment: each is one row.
    let ring = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["key"].as_str().unwrap().contains(":29500"))
        .count();
    assert_eq!(ring, 8);
    // Ranked by bytes, shares sum to the rows' part of the total.
    let rows = t["rows"].as_array().unwrap();
    assert!(rows
        .windows(2)
        .all(|w| w[0]["bytes"].as_u64() >= w[1]["bytes"].as_u64()));
    let share: f64 = rows.iter().map(|r| r["share"].as_f64().unwrap()).sum();
    assert!((share - 1.0).abs() < 1e-9, "{share}");
    // --limit 3: three rows and an "other" row holding the rest.
    let t3 = json(&["top", "--store", f.store(), "--key", "src", "--limit", "3"]);
    let rows = t3["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let sum: u64 = rows
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .sum::<u64>()
        + t3["other"]["bytes"].as_u64().unwrap();
    assert_eq!(sum, total);
}

#[test]
fn matrix_totals_equal_the_flow_totals_and_the_exfil_is_flagged() {
    let f = fixture();
    let m = json(&["matrix", "--store", f.store(), "--config", p(&f.config)]);
    let flows = f.truth["flows"].as_array().unwrap();
    let bytes: u64 = flows.iter().map(|t| t["bytes"].as_u64().unwrap()).sum();
    let packets: u64 = flows.iter().map(|t| t["packets"].as_u64().unwrap()).sum();
    let labels: BTreeSet<String> = flows.iter().map(flow_label).collect();
    let cells = m["cells"].as_array().unwrap();
    let sum = |k: &str| -> u64 { cells.iter().map(|c| c[k].as_u64().unwrap()).sum() };
    assert_eq!((sum("bytes"), sum("packets")), (bytes, packets));
    assert_eq!(sum("flows"), labels.len() as u64);
    assert_eq!(m["total"]["bytes"].as_u64().unwrap(), bytes);
    assert_eq!(m["total"]["flows"].as_u64().unwrap(), labels.len() as u64);
    let flagged: Vec<&Value> = cells.iter().filter(|c| c["flagged"] == true).collect();
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0]["src_group"], "model-store");
    assert_eq!(flagged[0]["dst_group"], "unassigned");
    let ex = &f.truth["facts"]["exfil"];
    let ff = &flagged[0]["flagged_flows"][0];
    assert_eq!(ff["dst"], ex["dst"]);
    assert_eq!(ff["bytes"], ex["bytes"]);
    let g = strings(&m["groups"]);
    assert!(g.contains("unassigned") && g.contains("gpu"), "{g:?}");
}

#[test]
fn tcp_retransmissions_agree_with_tshark() {
    let f = fixture();
    need_tool("tshark");
    let t = json(&["tcp", "--store", f.store(), "--interval", "1s"]);
    let ours = t["total"]["retransmissions"].as_u64().unwrap();
    let theirs = tshark_select(&f.pcap, "tcp.analysis.retransmission").len() as u64;
    assert!(theirs > 0, "the scenario has tail losses");
    let diff = ours.abs_diff(theirs) as f64;
    assert!(
        diff <= 0.02 * theirs as f64,
        "capsule counts {ours} retransmissions, tshark {theirs}"
    );
    // Per-interval counts add up to the total, and each has its hosts' counts.
    let intervals = t["intervals"].as_array().unwrap();
    assert_eq!(intervals.len(), 10);
    let per: u64 = intervals
        .iter()
        .map(|i| i["retransmissions"].as_u64().unwrap())
        .sum();
    assert_eq!(per, ours);
    for i in intervals {
        let hosts: u64 = i["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["retransmissions"].as_u64().unwrap())
            .sum();
        assert_eq!(hosts, i["retransmissions"].as_u64().unwrap());
    }
    // Zero-window stalls and RSTs of the office sessions are seen.
    assert!(t["total"]["zero_window_segments"].as_u64().unwrap() > 0);
    assert!(t["total"]["zero_window_ns"].as_u64().unwrap() > 0);
    assert!(t["total"]["rsts_sent"].as_u64().unwrap() > 0);
    let zw = tshark_select(&f.pcap, "tcp.analysis.zero_window").len() as u64;
    assert_eq!(t["total"]["zero_window_segments"].as_u64().unwrap(), zw);
    let rst = tshark_select(&f.pcap, "tcp.flags.reset == 1").len() as u64;
    assert_eq!(t["total"]["rsts_sent"].as_u64().unwrap(), rst);
}

/// A flow stalled on a lost segment sends nothing until its retransmission timer fires,
/// often for longer than a small segment lasts: its retransmission is still counted, so the
/// count does not depend on how the traffic is cut into segments.
#[test]
fn tcp_retransmissions_do_not_depend_on_the_segment_size() {
    let f = fixture();
    let small = f.dir.join("small-segments");
    let _ = std::fs::remove_dir_all(&small);
    // About 20 ms of this traffic a segment, a tenth of the shortest timeout.
    import_ok(
        &small,
        &["--segment-size", "256K", "--block-size", "64K"],
        &[p(&f.pcap)],
    );
    let total = |store: &str| {
        json(&["tcp", "--store", store, "--interval", "1s"])["total"]["retransmissions"]
            .as_u64()
            .unwrap()
    };
    let (big, many) = (total(f.store()), total(p(&small)));
    assert!(big > 0);
    assert_eq!(many, big, "8M segments count {big}, 256K segments {many}");
}

/// The openat calls of `capsule ARGS` (and its threads) that name a segment file.
fn segment_opens(args: &[&str]) -> Vec<String> {
    need_tool("strace");
    let f = fixture();
    let log = f.dir.join(format!("strace-{}.log", args[0]));
    let mut cmd = std::process::Command::new("strace");
    cmd.args([
        "-f",
        "-e",
        "trace=open,openat,openat2",
        "-o",
        p(&log),
        bin(),
    ])
    .args(args);
    run_ok(&mut cmd);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("openat"), "strace saw no openat at all");
    text.lines()
        .filter(|l| l.contains(".pcapng.zst"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_commands_open_no_segment_file() {
    let f = fixture();
    let (s, c) = (f.store(), p(&f.config));
    // The check can fail: `flows` reads block headers from the segment files.
    assert!(!segment_opens(&["flows", "--store", s]).is_empty());
    for args in [
        &["top", "--store", s, "--key", "src"][..],
        &["tcp", "--store", s],
        &["dscp", "--store", s, "--config", c],
        &["matrix", "--store", s, "--config", c],
        &["stragglers", "--store", s, "--config", c, "--group", "gpu"],
    ] {
        let opens = segment_opens(args);
        assert!(opens.is_empty(), "{args:?} opened {opens:?}");
    }
}

#[test]
fn a_window_cuts_by_seconds_and_states_its_limits() {
    let f = fixture();
    let start = f.truth["config"]["start_ns"].as_u64().unwrap();
    let from = format!("@{}", start + 2_000_000_000);
    let to = format!("@{}", start + 5_000_000_000);
    let t = json(&["top", "--store", f.store(), "--from", &from, "--to", &to]);
    assert_eq!(t["from_ns"].as_u64().unwrap(), start + 2_000_000_000);
    assert_eq!(t["to_ns"].as_u64().unwrap(), start + 5_000_000_000);
    // Segments outside the window are skipped by their index header: the window's totals
    // are still those `flows` gives (it decodes every index in the window).
    let out = run_ok(capsule().args([
        "flows",
        "--store",
        f.store(),
        "--from",
        &from,
        "--to",
        &to,
        "--json",
        "--limit",
        "1000000",
    ]));
    let (mut n, mut bytes) = (0u64, 0u64);
    for l in stdout_str(&out).lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        n += 1;
        bytes += v["bytes"][0].as_u64().unwrap() + v["bytes"][1].as_u64().unwrap();
    }
    assert_eq!(t["total"]["flows"].as_u64().unwrap(), n);
    assert_eq!(t["total"]["bytes"].as_u64().unwrap(), bytes);
    let l = &t["limits"];
    assert!(l["horizon"].is_null());
    assert!(l["invisible"].as_str().unwrap().contains("InfiniBand"));
    assert!(l["drops"].as_str().unwrap().contains("no capture status"));
    // A window reaching back past the oldest packet names the horizon.
    let early = format!("@{}", start - 60_000_000_000);
    let t = json(&["top", "--store", f.store(), "--from", &early]);
    assert_eq!(
        t["limits"]["horizon_ns"].as_u64().unwrap(),
        t["limits"]["held_from_ns"].as_u64().unwrap()
    );
    // The human table says it too.
    let out = run_ok(capsule().args(["top", "--store", f.store(), "--from", &early]));
    let text = stdout_str(&out);
    assert!(text.contains("before the oldest packet held"), "{text}");
    assert!(text.contains("RDMA over InfiniBand"), "{text}");
    // A filter narrows the answer, and a finding's query carries it.
    let t = json(&["top", "--store", f.store(), "--key", "dst", "udp"]);
    for r in t["rows"].as_array().unwrap() {
        assert!(r["query"].as_str().unwrap().contains("'(udp) and dst host"));
    }
    // Groups are needed where the answer is by group.
    let out = run(capsule().args(["matrix", "--store", f.store()]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr_str(&out));
    assert!(stderr_str(&out).contains("--config"));
}

/// An import killed with SIGKILL while its segment is open: the analytics read the open
/// segment from its index journal, and agree with `capsule flows` (which reads the open
/// segment's block headers) on every flow's bytes.
#[test]
fn the_open_segment_is_answered_from_its_journal() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.pcap");
    synth(&input, &d.path().join("truth.json"), 7, "4s", "100M", None);
    let bytes = std::fs::read(&input).unwrap();
    let store = d.path().join("store");
    let mut child = capsule()
        .args(["import", "--store", p(&store), "--block-size", "64K"])
        .args(["--segment-size", "1G", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes[..bytes.len() / 2]).unwrap();
    stdin.flush().unwrap();
    let journal = store.join("index").join("seg-000000000001.journal");
    let segment = store
        .join("segments")
        .join(".seg-000000000001.pcapng.zst.open");
    let size = |f: &Path| std::fs::metadata(f).map_or(0, |m| m.len());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = (0, 0);
    loop {
        std::thread::sleep(Duration::from_millis(400));
        let now = (size(&journal), size(&segment));
        if now.0 > 0 && now.1 > 0 && now == last {
            break;
        }
        last = now;
        assert!(Instant::now() < deadline, "import wrote no journal");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stdin);
    assert!(journal.exists() && segment.exists());
    let out = run_ok(capsule().args([
        "flows",
        "--store",
        p(&store),
        "--json",
        "--limit",
        "1000000",
    ]));
    let listed: Vec<Value> = stdout_str(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!listed.is_empty());
    let flow_bytes: u64 = listed
        .iter()
        .map(|f| f["bytes"][0].as_u64().unwrap() + f["bytes"][1].as_u64().unwrap())
        .sum();
    let t = json(&["top", "--store", p(&store), "--key", "flow", "--limit", "0"]);
    assert_eq!(t["total"]["flows"].as_u64().unwrap(), listed.len() as u64);
    assert_eq!(t["total"]["bytes"].as_u64().unwrap(), flow_bytes);
    assert!(t["limits"]["unindexed_segments"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// [ux] "top-style tables at 80 columns": at COLUMNS=80 every line of every analytics answer
/// fits, but the `capsule query` command lines, kept whole so they can be copied.
#[test]
fn every_analytics_answer_fits_80_columns_but_its_command_lines() {
    let f = fixture();
    let cfg = p(&f.config);
    for args in [
        vec!["top", "--key", "flow"],
        vec!["top", "--key", "src"],
        vec!["top", "--key", "pair"],
        vec!["top", "--key", "dscp"],
        vec!["top", "--key", "group", "--config", cfg],
        vec!["tcp"],
        vec!["dscp", "--config", cfg],
        vec!["matrix", "--config", cfg],
        vec![
            "stragglers",
            "--config",
            cfg,
            "--group",
            "gpu",
            "--ratio",
            "0.75",
        ],
        vec!["alerts", "--config", cfg],
    ] {
        let out = run_ok(
            capsule()
                .args(&args)
                .args(["--store", f.store()])
                .env("COLUMNS", "80"),
        );
        let text = stdout_str(&out);
        assert!(text.lines().count() > 2, "{args:?}: {text}");
        for line in text.lines().filter(|l| !l.contains("capsule query ")) {
            assert!(
                line.chars().count() <= 80,
                "{args:?}: {} columns: {line}",
                line.chars().count()
            );
        }
    }
}

/// Every `capsule query` line an analytics answer prints runs as pasted into a shell (with
/// capsule on the PATH): it names its output file, exits 0, and the file holds packets
/// that tshark reads. Before, the lines lacked `-w` and pasting one was a usage error.
#[test]
fn every_printed_command_line_runs_as_pasted() {
    let f = fixture();
    let cfg = p(&f.config);
    let work = f.dir.join("pasted");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let bin_dir = Path::new(bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for args in [
        vec!["top"],
        vec!["tcp"],
        vec!["dscp", "--config", cfg],
        vec!["matrix", "--config", cfg],
        vec![
            "stragglers",
            "--config",
            cfg,
            "--group",
            "gpu",
            "--interval",
            "1s",
            "--ratio",
            "0.75",
        ],
        vec!["alerts", "--config", cfg],
    ] {
        let out = run_ok(capsule().args(&args).args(["--store", f.store()]));
        let text = stdout_str(&out);
        let line = text
            .lines()
            .find_map(|l| l.find("capsule query ").map(|i| l[i..].to_string()))
            .unwrap_or_else(|| panic!("{args:?} prints no command line: {text}"));
        let file = line
            .split_whitespace()
            .skip_while(|w| *w != "-w")
            .nth(1)
            .unwrap_or_else(|| panic!("{args:?}: no -w in {line}"))
            .to_string();
        let o = run(Command::new("sh")
            .args(["-c", &line])
            .current_dir(&work)
            .env("PATH", &path));
        assert_eq!(
            o.status.code(),
            Some(0),
            "{args:?}: {line}: {}",
            stderr_str(&o)
        );
        let got = work.join(&file);
        assert!(
            capinfos_packets(&got) > 0,
            "{args:?}: {line} wrote no packet"
        );
        ran += 1;
    }
    assert_eq!(ran, 6);
}

/// A store with no packets (a capture that just started on a quiet port, or an import of an
/// empty capture) is answered by every analytics command and by triage: exit 0, the note
/// that the index holds no flows, and no window reaching from 1970 to 2554. Before, `tcp`,
/// `stragglers`, `alerts` and `triage` tried to allocate a bucket per second of that window
/// and aborted (exit 134).
#[test]
fn every_answer_of_an_empty_store_is_empty_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty.pcap");
    std::fs::write(&empty, write_pcap_ns(1, 65535, &[])).unwrap();
    let store = tmp.path().join("store");
    import_ok(&store, &[], &[p(&empty)]);
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/capsule.toml");
    let s = p(&store);
    let out_dir = tmp.path().join("triage");
    let o = p(&out_dir);
    for args in [
        &["top", "--store", s][..],
        &["top", "--store", s, "--key", "src"],
        &["tcp", "--store", s],
        &["dscp", "--store", s, "--config", cfg],
        &["matrix", "--store", s, "--config", cfg],
        &[
            "stragglers",
            "--store",
            s,
            "--config",
            cfg,
            "--group",
            "gpu",
        ],
        &["alerts", "--store", s, "--config", cfg],
        &["triage", "--store", s, "--config", cfg, "-o", o],
        &["tcp", "--store", s, "--from", "-1h"],
    ] {
        let out = run(capsule().args(args));
        let (text, err) = (stdout_str(&out), stderr_str(&out));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} on an empty store:\n{text}\n{err}"
        );
        for year in ["1970-01-01", "2554-"] {
            assert!(
                !text.contains(year) && !err.contains(year),
                "{args:?} on an empty store prints a window of {year}:\n{text}\n{err}"
            );
        }
        let said = format!("{text}{err}");
        let report = std::fs::read_to_string(out_dir.join("report.txt")).unwrap_or_default();
        assert!(
            said.contains("holds no flows") || report.contains("holds no flows"),
            "{args:?} does not say the store holds nothing:\n{said}"
        );
    }
    // JSON too: an empty window, not the whole of time.
    let out = run_ok(capsule().args(["tcp", "--store", s, "--json"]));
    let v: Value = serde_json::from_str(stdout_str(&out).trim()).unwrap();
    assert_eq!(v["from_ns"], v["to_ns"], "{v}");
    assert!(
        v["intervals"].as_array().is_some_and(|i| i.is_empty()),
        "{v}"
    );
}

/// A window that misses the data is never an "all clear": every analytics command and
/// triage say the window ends before (or starts after) what the store holds and give the
/// store's span, and the answered window is the asked one's edge, not 1970. Before,
/// `alerts --from -1h` on older data printed `alerts: none` with no note, and `top --to`
/// before the data printed a window inside the data.
#[test]
fn a_window_that_misses_the_data_says_so_in_every_answer() {
    let f = fixture();
    let cfg = p(&f.config);
    let s = f.store();
    let out_dir = f.dir.join("triage-misses");
    let o = p(&out_dir);
    for (edge, window) in [
        (
            "starts after the newest",
            ["--from", "2030-01-01T00:00:00Z"],
        ),
        ("ends before the oldest", ["--to", "2020-01-01T00:00:00Z"]),
    ] {
        for args in [
            &["top", "--store", s][..],
            &["tcp", "--store", s],
            &["dscp", "--store", s, "--config", cfg],
            &["matrix", "--store", s, "--config", cfg],
            &[
                "stragglers",
                "--store",
                s,
                "--config",
                cfg,
                "--group",
                "gpu",
            ],
            &["alerts", "--store", s, "--config", cfg],
            &["triage", "--store", s, "--config", cfg, "-o", o],
        ] {
            let out = run(capsule().args(args).args(window));
            let (text, err) = (stdout_str(&out), stderr_str(&out));
            let report = std::fs::read_to_string(out_dir.join("report.txt")).unwrap_or_default();
            let said = format!("{text}{err}{report}");
            assert!(
                said.contains(&format!("the window {edge} packet held"))
                    && said.contains("the store spans 2026-11-30T02:00:00"),
                "{args:?} {window:?} does not say the window misses the data:\n{said}"
            );
            assert!(!said.contains("1970-01-01"), "{args:?} {window:?}:\n{said}");
            let _ = std::fs::remove_dir_all(&out_dir);
        }
    }
}

/// With a known width the analytics tables stay tables: at `COLUMNS=240`, where they fit,
/// `top`, `tcp`, `dscp`, `matrix` and `stragglers` print exactly what they print with no
/// width at all (output to a pipe, `COLUMNS` unset). Before, every line was re-wrapped
/// whenever a width was known, and the columns collapsed to single spaces.
#[test]
fn tables_keep_their_columns_when_the_width_is_known() {
    let f = fixture();
    let (s, c) = (f.store(), p(&f.config));
    for args in [
        &["top", "--store", s, "--limit", "5"][..],
        &["tcp", "--store", s],
        &["dscp", "--store", s, "--config", c],
        &["matrix", "--store", s, "--config", c],
        &["stragglers", "--store", s, "--config", c, "--group", "gpu"],
    ] {
        let free = stdout_str(&run_ok(capsule().env_remove("COLUMNS").args(args)));
        let at240 = stdout_str(&run_ok(capsule().env("COLUMNS", "240").args(args)));
        if free.lines().all(|l| l.chars().count() <= 240) {
            assert_eq!(
                at240, free,
                "{args:?}: COLUMNS=240 changed a table that fits in 240 columns"
            );
        }
        assert!(
            at240.lines().any(|l| l.contains("   ")),
            "{args:?}: no aligned columns at COLUMNS=240:\n{at240}"
        );
    }
}

/// The headers of `table` (the lines of one table, its header line first) in order, with
/// where each starts and ends.
fn header_spans(header: &str, names: &[&str]) -> Vec<(usize, usize)> {
    let mut at = 0;
    names
        .iter()
        .map(|n| {
            let s = header[at..]
                .find(n)
                .unwrap_or_else(|| panic!("header {n:?} missing from {header:?}"))
                + at;
            at = s + n.len();
            (s, at)
        })
        .collect()
}

/// At 80, 120 and 240 columns every table keeps every column (at 80, `alerts` kept its
/// severity and `matrix` the `unassigned` column of the flagged cell only after this), and
/// every line of every row lines up with the header: between each two headers there is a
/// position that is blank on every line (the gutter between the columns), and no line is
/// wider than the terminal (wrapped cells stay inside their columns). Before, low-ranked
/// columns were dropped at 80 columns.
#[test]
fn tables_keep_every_column_aligned_at_80_120_and_240_columns() {
    let f = fixture();
    let (s, c) = (f.store(), p(&f.config));
    let cases: [(&[&str], &str, &[&str]); 6] = [
        (
            &["top", "--store", s, "--limit", "5"],
            " #",
            &[
                "#", "key", "bytes", "packets", "flows", "share", "mean", "peak", "pkt", "first",
                "last", "dscp",
            ],
        ),
        (
            &["tcp", "--store", s],
            "interval",
            &[
                "interval", "host", "data", "retrans", "rate", "zero", "stalled", "rst", "rst",
                "lost",
            ],
        ),
        (
            &["dscp", "--store", s, "--config", c],
            "dscp  name",
            &["dscp", "name", "bytes", "packets", "flows", "top senders"],
        ),
        (
            &["matrix", "--store", s, "--config", c],
            "               voice",
            &["voice", "gpu", "storage", "model-store", "unassigned"],
        ),
        (
            &["stragglers", "--store", s, "--config", c, "--group", "gpu"],
            "interval",
            &["interval", "median", "active", "lowest"],
        ),
        (
            &["alerts", "--store", s, "--config", c],
            "severity",
            &["severity", "rule", "first", "last", "entity"],
        ),
    ];
    for width in [80usize, 120, 240] {
        for (args, starts, names) in &cases {
            let out = stdout_str(&run_ok(
                capsule().env("COLUMNS", width.to_string()).args(*args),
            ));
            let lines: Vec<&str> = out.lines().collect();
            let h = lines
                .iter()
                .position(|l| l.trim_start().starts_with(starts.trim_start()))
                .unwrap_or_else(|| panic!("{args:?} at {width}: no header line:\n{out}"));
            // The table: the header and the lines after it up to a blank line or text that
            // is not laid out in columns.
            let table: Vec<&str> = lines[h..]
                .iter()
                .take_while(|l| {
                    !l.is_empty() && !l.starts_with("note:") && !l.starts_with("total ")
                })
                .copied()
                .filter(|l| !l.contains("capsule query "))
                .collect();
            assert!(table.len() > 1, "{args:?} at {width}: no rows:\n{out}");
            let spans = header_spans(table[0], names);
            for w in spans.windows(2) {
                let ((_, end), (start, _)) = (w[0], w[1]);
                let gutter = (end..start).find(|&p| {
                    table
                        .iter()
                        .all(|l| l.chars().nth(p).is_none_or(|ch| ch == ' '))
                });
                assert!(
                    gutter.is_some(),
                    "{args:?} at {width}: no blank gutter between columns at {end}..{start}:\n{}",
                    table.join("\n")
                );
            }
            for l in &table {
                assert!(
                    l.chars().count() <= width,
                    "{args:?} at {width}: a line of {} columns:\n{l}",
                    l.chars().count()
                );
            }
        }
    }
}
