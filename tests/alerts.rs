//! `capsule alerts` (issue 13) against synth's default scenario and its truth file: the
//! config's `[alerts]` rules raise exactly the planted faults (the rogue EF hosts, the
//! straggler, the night-time model-store upload) and not the allowed checkpoint ("backup")
//! traffic to storage; each alert's `query` exports exactly the packets the truth gives for
//! it; a bad `[alerts]` key is refused with its line.
//!
//! One store for all tests (seed 1, 10 s at 100 Mbit/s, starting Monday 02:00 UTC: out of
//! the config's working hours) in the test target's temporary directory.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

struct Fixture {
    dir: PathBuf,
    store: PathBuf,
    config: PathBuf,
    truth: Value,
}

/// The config of the tests: the scenario's groups, EF for voice only, the model store and
/// the GPU nodes may send to storage only, working hours 08:00-19:00 UTC on weekdays.
pub fn write_config(path: &Path, truth: &Value) {
    let facts = &truth["facts"];
    let gpu: Vec<String> = facts["gpu_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("\"{}\"", h.as_str().unwrap()))
        .collect();
    std::fs::write(
        path,
        format!(
            "[groups]\nvoice = [\"{}\"]\ngpu = [{}]\nstorage = [\"{}\"]\n\
             model-store = [\"{}\"]\n\n[dscp]\nef = [\"voice\"]\n\n\
             [egress]\nmodel-store = [\"storage\"]\ngpu = [\"storage\"]\n\n\
             [work_hours]\ndays = \"mon-fri\"\nstart = \"08:00\"\nend = \"19:00\"\n\
             timezone = \"UTC\"\n\n\
             [alerts]\negress_bytes = \"1M\"\negress_window = \"10s\"\n\
             off_hours_bytes = \"1M\"\nstraggler_groups = [\"gpu\"]\n\
             straggler_interval = \"1s\"\nstraggler_ratio = 0.75\n",
            facts["ef_allow_list"][0].as_str().unwrap(),
            gpu.join(", "),
            facts["storage_subnet"].as_str().unwrap(),
            facts["exfil"]["src"].as_str().unwrap(),
        ),
    )
    .unwrap();
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("alerts");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pcap = dir.join("synth.pcap");
        let truth_path = dir.join("truth.json");
        synth(&pcap, &truth_path, 1, "10s", "100M", None);
        let truth: Value = serde_json::from_slice(&std::fs::read(&truth_path).unwrap()).unwrap();
        let store = dir.join("store");
        import_ok(&store, &["--segment-size", "8M"], &[p(&pcap)]);
        let config = dir.join("capsule.toml");
        write_config(&config, &truth);
        Fixture {
            dir,
            store,
            config,
            truth,
        }
    })
}

fn alerts_json(f: &Fixture) -> Vec<Value> {
    let mut cmd = capsule();
    cmd.args([
        "alerts",
        "--store",
        p(&f.store),
        "--config",
        p(&f.config),
        "--json",
    ]);
    let out = run_ok(&mut cmd);
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["command"], "alerts");
    v["alerts"].as_array().unwrap().clone()
}

fn of_rule<'a>(alerts: &'a [Value], rule: &str) -> Vec<&'a Value> {
    alerts.iter().filter(|a| a["rule"] == rule).collect()
}

/// Packets of the truth's flows matching `keep`.
fn truth_packets(f: &Fixture, keep: impl Fn(&Value) -> bool) -> u64 {
    f.truth["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| keep(t))
        .map(|t| t["packets"].as_u64().unwrap())
        .sum()
}

/// Runs an alert's `query` with `-w FILE` through a shell (as an operator would paste it)
/// and returns the packets written.
fn run_query(f: &Fixture, query: &str, name: &str) -> u64 {
    assert!(query.starts_with("capsule query --store "), "{query}");
    let out = f.dir.join(name);
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c").arg(format!(
        "{} -w {}",
        query.replacen("capsule", bin(), 1),
        p(&out)
    ));
    run_ok(&mut sh);
    capinfos_packets(&out)
}

#[test]
fn each_planted_fault_raises_exactly_its_alert() {
    let f = fixture();
    let a = alerts_json(f);
    let facts = &f.truth["facts"];
    // Every alert has the stable schema.
    for x in &a {
        for k in [
            "rule", "severity", "entity", "first", "last", "first_ns", "last_ns",
        ] {
            assert!(!x[k].is_null(), "{k} missing: {x}");
        }
        assert!(x["first_ns"].as_u64() <= x["last_ns"].as_u64(), "{x}");
        assert!(x["first"].as_str().unwrap().ends_with('Z'));
        assert!(["high", "medium", "low"].contains(&x["severity"].as_str().unwrap()));
        assert!(x["figures"].is_object());
        assert!(x["entity"]["name"].is_string() && x["entity"]["kind"].is_string());
    }
    // DSCP: exactly the rogue EF hosts.
    let dscp: BTreeSet<String> = of_rule(&a, "dscp")
        .iter()
        .map(|x| x["entity"]["name"].as_str().unwrap().to_string())
        .collect();
    let rogue: BTreeSet<String> = facts["rogue_ef_hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_string())
        .collect();
    assert_eq!(dscp, rogue);
    // Straggler: exactly the planted one.
    let s = of_rule(&a, "straggler");
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["entity"]["name"], facts["straggler"]);
    assert_eq!(s[0]["figures"]["group"], "gpu");
    // Egress and off-hours: exactly the exfil's upload, with its bytes.
    let ex = &facts["exfil"];
    for rule in ["egress", "off_hours"] {
        let e = of_rule(&a, rule);
        assert_eq!(e.len(), 1, "{rule}: {e:?}");
        assert_eq!(e[0]["severity"], "high");
        assert_eq!(e[0]["entity"]["kind"], "flow");
        assert_eq!(e[0]["entity"]["hosts"][0], ex["src"]);
        assert_eq!(e[0]["entity"]["hosts"][1], ex["dst"]);
        assert_eq!(e[0]["figures"]["bytes"], ex["bytes"], "{rule}");
        assert_eq!(e[0]["first_ns"], ex["first_ns"]);
        assert_eq!(e[0]["last_ns"], ex["last_ns"]);
    }
    // The checkpoint ("backup") traffic to storage is allowed and raises nothing, and no
    // other rule fires on this scenario with these thresholds.
    let storage = facts["storage_subnet"].as_str().unwrap();
    let prefix = &storage[..storage.rfind('.').unwrap()];
    assert!(
        a.iter().all(|x| x["entity"]["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| !h.as_str().unwrap().starts_with(prefix))),
        "{a:#?}"
    );
    let rules: BTreeSet<&str> = a.iter().map(|x| x["rule"].as_str().unwrap()).collect();
    assert_eq!(
        rules,
        BTreeSet::from(["dscp", "egress", "off_hours", "straggler"]),
        "{a:#?}"
    );
    // Worst first: high before medium.
    let sev: Vec<&str> = a.iter().map(|x| x["severity"].as_str().unwrap()).collect();
    let mut sorted = sev.clone();
    sorted.sort_by_key(|s| ["high", "medium", "low"].iter().position(|x| x == s));
    assert_eq!(sev, sorted);
}

#[test]
fn each_alerts_query_exports_exactly_the_truths_packets() {
    let f = fixture();
    let a = alerts_json(f);
    let ex = &f.truth["facts"]["exfil"];
    let e = of_rule(&a, "egress")[0];
    let want = truth_packets(f, |t| t["src"] == ex["src"] && t["dst"] == ex["dst"]);
    assert!(want > 0);
    assert_eq!(
        run_query(f, e["query"].as_str().unwrap(), "egress.pcap"),
        want
    );
    assert_eq!(e["figures"]["packets"].as_u64().unwrap(), want);
    for (i, d) in of_rule(&a, "dscp").into_iter().enumerate() {
        let src = &d["entity"]["hosts"][0];
        let dst = &d["entity"]["hosts"][1];
        let want = truth_packets(f, |t| {
            &t["src"] == src
                && &t["dst"] == dst
                && t["dscp"].as_array().unwrap().contains(&46.into())
        });
        assert!(want > 0);
        let got = run_query(f, d["query"].as_str().unwrap(), &format!("dscp{i}.pcap"));
        assert_eq!(got, want, "{d}");
    }
    let s = of_rule(&a, "straggler")[0];
    let host = &f.truth["facts"]["straggler"];
    let want = truth_packets(f, |t| &t["src"] == host);
    assert_eq!(
        run_query(f, s["query"].as_str().unwrap(), "straggler.pcap"),
        want
    );
}

#[test]
fn the_table_lists_each_alert_with_its_query_and_the_limits() {
    let f = fixture();
    let mut cmd = capsule();
    cmd.args(["alerts", "--store", p(&f.store), "--config", p(&f.config)]);
    let text = stdout_str(&run_ok(&mut cmd));
    assert!(text.contains("alerts: 6"), "{text}");
    for rule in ["egress", "off_hours", "dscp", "straggler"] {
        assert!(text.contains(&format!("[{rule}]")), "{rule}: {text}");
    }
    assert!(
        text.contains("capsule query -w alert-1.pcap --store "),
        "{text}"
    );
    assert!(text.contains("note: capture sees only"), "{text}");
}

#[test]
fn thresholds_move_the_alerts_and_bad_keys_are_refused_with_their_line() {
    let f = fixture();
    // Above the exfil's bytes: no egress alert; rules can be disabled.
    let text = std::fs::read_to_string(&f.config).unwrap();
    let cfg = f.dir.join("high.toml");
    std::fs::write(
        &cfg,
        text.replace("egress_bytes = \"1M\"", "egress_bytes = \"100M\"")
            .replace(
                "straggler_ratio = 0.75\n",
                "straggler_ratio = 0.75\ndisabled = [\"dscp\"]\n",
            ),
    )
    .unwrap();
    let mut cmd = capsule();
    cmd.args([
        "alerts",
        "--store",
        p(&f.store),
        "--config",
        p(&cfg),
        "--json",
    ]);
    let v: Value = serde_json::from_slice(&run_ok(&mut cmd).stdout).unwrap();
    let rules: BTreeSet<&str> = v["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, BTreeSet::from(["off_hours", "straggler"]));
    // An unknown key: refused, naming file, line and key.
    let bad = f.dir.join("bad.toml");
    std::fs::write(&bad, format!("{text}egress_byte = 5\n")).unwrap();
    let line = text.lines().count() + 1;
    let mut cmd = capsule();
    cmd.args(["alerts", "--store", p(&f.store), "--config", p(&bad)]);
    let out = run(&mut cmd);
    assert!(!out.status.success());
    let err = stderr_str(&out);
    assert!(
        err.contains(&format!(
            "bad.toml:{line}:1: alerts.egress_byte: unknown key"
        )),
        "{err}"
    );
    // Without --config: a usage error.
    let mut cmd = capsule();
    cmd.args(["alerts", "--store", p(&f.store)]);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_str(&out));
}
