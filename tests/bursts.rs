//! `capsule bursts` (issue 33) on synth's traffic with two planted events written here: a
//! 2 ms line-rate EF burst from one sender and an incast of 24 senders to one address within
//! one millisecond, on a link the config states as 10G. The answer names both, exactly, and
//! nothing else; its millisecond series equals an independent count of the pcaps
//! (scripts/ms_bins.py); and it reads no segment file (they are overwritten with zeros of
//! their own length, and the answer is the same).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::planted::*;
use common::*;
use serde_json::Value;

struct Fixture {
    dir: PathBuf,
    store: PathBuf,
    config: PathBuf,
    pcaps: Vec<PathBuf>,
}

fn fixture(name: &str) -> Fixture {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let synth_pcap = dir.join("synth.pcap");
    synth(&synth_pcap, &dir.join("truth.json"), 1, "2s", "20M", None);
    let planted_pcap = dir.join("planted.pcap");
    std::fs::write(&planted_pcap, planted()).unwrap();
    let store = dir.join("store");
    import_ok(&store, &[], &[p(&synth_pcap), p(&planted_pcap)]);
    let config = dir.join("capsule.toml");
    std::fs::write(&config, "[links]\nspan0 = \"10G\"\n").unwrap();
    Fixture {
        dir,
        store,
        config,
        pcaps: vec![synth_pcap, planted_pcap],
    }
}

fn bursts(f: &Fixture, extra: &[&str]) -> Value {
    let mut cmd = capsule();
    cmd.args(["bursts", "--store", p(&f.store), "--config", p(&f.config)])
        .args(["--json"])
        .args(extra);
    let out = run_ok(&mut cmd);
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn scope(v: &Value, dscp: Option<u64>) -> &Value {
    v["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["dscp"].as_u64() == dscp)
        .unwrap_or_else(|| panic!("no scope of DSCP {dscp:?} in {v}"))
}

#[test]
fn the_planted_burst_and_incast_exactly_and_nothing_else() {
    let f = fixture("bursts");
    let v = bursts(&f, &["--series"]);
    assert_eq!(v["command"], "bursts");
    assert_eq!(
        v["link"]["bits_per_second"], 10_000_000_000u64,
        "{}",
        v["link"]
    );
    assert_eq!(v["threshold_bits_per_second"], 8_000_000_000u64);

    // The independent count: every frame of both pcaps binned by epoch millisecond.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ms_bins.py");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(&script).args(f.pcaps.iter().map(|x| p(x)));
    let bins: BTreeMap<String, BTreeMap<String, [u64; 2]>> =
        serde_json::from_slice(&run_ok(&mut cmd).stdout).unwrap();
    let series = v["series"].as_array().unwrap();
    assert_eq!(series.len(), bins.len(), "milliseconds with traffic");
    for (s, (ms, values)) in series.iter().zip(&bins) {
        let ms: u64 = ms.parse().unwrap();
        assert_eq!(s["start_ns"], ms * MS);
        let mut want = BTreeMap::new();
        for (d, [pk, by]) in values {
            want.insert(d.parse::<u64>().unwrap(), (*pk, *by));
        }
        let got: BTreeMap<u64, (u64, u64)> = s["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                let n = |k: &str| x[k].as_u64().unwrap();
                (n("dscp"), (n("packets"), n("bytes")))
            })
            .collect();
        assert_eq!(got, want, "millisecond {ms}");
        let total: u64 = want.values().map(|x| x.1).sum();
        assert_eq!(s["bytes"], total, "millisecond {ms}");
    }
    let ef_in = |ms: u64| bins[&ms.to_string()].get("46").map_or(0, |x| x[1]);

    // The burst: one, from its first millisecond, two long, EF, from its sender.
    assert_eq!(v["burst_count"], 1, "{}", v["bursts"]);
    let b = &v["bursts"][0];
    assert_eq!(b["start_ns"], BURST_MS * MS);
    assert_eq!(b["start"], "2026-11-30T02:00:01.234000000Z");
    assert_eq!(b["duration_ns"], 2 * MS);
    let planted_ms = BURST_FRAMES * FRAME;
    let ef = b["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["dscp"] == 46)
        .unwrap();
    assert_eq!(ef["bytes"], ef_in(BURST_MS) + ef_in(BURST_MS + 1));
    assert!(ef["bytes"].as_u64().unwrap() >= 2 * planted_ms);
    assert_eq!(b["flows"][0]["src"], "10.77.0.1", "{}", b["flows"]);
    assert_eq!(b["flows"][0]["dst"], "10.77.0.2");
    // EF's peak 1 ms is the burst's, to the byte; at 1 s the same burst is under 1% of the
    // link, and so is the whole link.
    let ef_scope = scope(&v, Some(46));
    let peak = &ef_scope["peaks"][0];
    assert_eq!(peak["resolution_ms"], 1);
    assert_eq!(peak["bytes"], ef_in(BURST_MS).max(ef_in(BURST_MS + 1)));
    assert!(peak["bytes"].as_u64().unwrap() >= planted_ms);
    assert!(peak["link_percent"].as_f64().unwrap() > 80.0, "{peak}");
    for s in [ef_scope, scope(&v, None)] {
        let second = &s["peaks"][3];
        assert_eq!(second["resolution_ms"], 1000);
        assert!(second["link_percent"].as_f64().unwrap() < 1.0, "{second}");
    }
    // Time above 80%: the burst's two milliseconds, for the link and EF; none elsewhere.
    for s in v["scopes"].as_array().unwrap() {
        let want = if s["dscp"].is_null() || s["dscp"] == 46 {
            2 * MS
        } else {
            0
        };
        assert_eq!(s["ns_above"], want, "{}", s["scope"]);
    }

    // The incast: one, in its millisecond, to its destination, from all 24 senders.
    assert_eq!(v["incast_count"], 1, "{}", v["incast"]);
    let i = &v["incast"][0];
    assert_eq!(i["start_ns"], INCAST_MS * MS);
    assert_eq!(i["dst"], "10.88.1.1");
    let senders: BTreeSet<String> = i["senders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["addr"].as_str().unwrap().to_string())
        .collect();
    let want: BTreeSet<String> = (1..=SENDERS).map(|s| format!("10.88.0.{s}")).collect();
    assert_eq!(senders, want);
    assert_eq!(i["bytes"], u64::from(SENDERS) * 1000);

    // No segment file is read: zeros in place of every segment's bytes (the same length,
    // so the index stays current) change nothing in the answer, though a query fails.
    let whole = bursts(&f, &[]);
    let segs = f.store.join("segments");
    for e in std::fs::read_dir(&segs).unwrap() {
        let path = e.unwrap().path();
        if path.to_string_lossy().ends_with(".pcapng.zst") {
            let len = std::fs::metadata(&path).unwrap().len();
            std::fs::write(&path, vec![0u8; len as usize]).unwrap();
        }
    }
    assert_eq!(bursts(&f, &[]), whole);
    let out = run(capsule().args([
        "query",
        "--store",
        p(&f.store),
        "-w",
        p(&f.dir.join("out.pcap")),
    ]));
    assert_ne!(
        out.status.code(),
        Some(0),
        "the segments really are unreadable"
    );
}

#[test]
fn bad_thresholds_are_usage_errors_and_an_unknown_link_is_said() {
    let f = fixture("bursts-usage");
    for (args, what) in [
        (&["--above", "fast"][..], "--above"),
        (&["--incast", "2"][..], "4 or more"),
    ] {
        let mut cmd = capsule();
        cmd.args(["bursts", "--store", p(&f.store)]).args(args);
        let out = run(&mut cmd);
        assert_eq!(out.status.code(), Some(2), "{}", stderr_str(&out));
        assert!(stderr_str(&out).contains(what), "{}", stderr_str(&out));
    }
    // No config: the link's rate is unknown, so 80% of it is too: peaks, no bursts.
    let out = run_ok(capsule().args(["bursts", "--store", p(&f.store), "--json"]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["link"].is_null());
    assert!(v["threshold_bits_per_second"].is_null());
    assert!(v["scopes"][0]["peaks"][0]["bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["incast_count"], 1, "incast needs no link rate");
}

/// The new rules' alerts of `capsule alerts --json` with `alerts` as the `[alerts]` keys.
fn ms_alerts(f: &Fixture, alerts: &str) -> Vec<Value> {
    let cfg = f.dir.join("alerts.toml");
    std::fs::write(
        &cfg,
        format!(
            "[links]\nspan0 = \"10G\"\n\n[groups]\nbackup = [\"10.77.0.0/24\"]\n\
             night = [\"10.66.0.0/24\"]\nquiet = [\"10.88.0.0/24\"]\n\n\
             [expect.backup]\nmax_rate = \"1G\"\nper = \"10ms\"\nhours = \"22:00-06:00\"\n\n\
             [expect.night]\nhours = \"08:00-18:00\"\n\n\
             [expect.quiet]\nmax_rate = \"10M\"\nper = \"1s\"\nhours = \"00:00-24:00\"\n\n\
             [alerts]\n{alerts}"
        ),
    )
    .unwrap();
    let out = run_ok(capsule().args([
        "alerts",
        "--store",
        p(&f.store),
        "--config",
        p(&cfg),
        "--json",
    ]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    const NEW: [&str; 5] = [
        "ef_share",
        "microburst",
        "incast",
        "rate_ceiling",
        "active_hours",
    ];
    v["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| NEW.contains(&a["rule"].as_str().unwrap()))
        .cloned()
        .collect()
}

/// Issue 33 item 3: `ef_share`, `microburst`, `incast`, `rate_ceiling` and `active_hours`
/// over the same store: each fires once, where it was planted, naming its group or class,
/// its window (ms, ns, RFC 3339), its rate and its threshold; nothing else fires.
#[test]
fn the_millisecond_rules_and_group_expectations_fire_where_planted_only() {
    let f = fixture("bursts-alerts");
    let got = ms_alerts(
        &f,
        "ef_share = 0.5\nef_share_for = \"2ms\"\nmicroburst_rate = \"80%\"\n\
         incast_senders = 16\n",
    );
    let by: BTreeMap<(String, String), &Value> = got
        .iter()
        .map(|a| {
            let k = (
                a["rule"].as_str().unwrap().to_string(),
                a["entity"]["name"].as_str().unwrap().to_string(),
            );
            (k, a)
        })
        .collect();
    let keys: BTreeSet<(&str, &str)> = by.keys().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let want: BTreeSet<(&str, &str)> = [
        ("ef_share", "ef"),
        ("microburst", "link"),
        ("incast", "10.88.1.1"),
        ("rate_ceiling", "backup"),
        ("active_hours", "night"),
    ]
    .into();
    assert_eq!(keys, want, "{got:#?}");
    assert_eq!(got.len(), want.len(), "one alert each: {got:#?}");
    let fig = |rule: &str, name: &str| &by[&(rule.to_string(), name.to_string())]["figures"];

    // EF above half the link for 2 ms, from the burst's first millisecond.
    for (rule, name, threshold) in [
        ("ef_share", "ef", 5_000_000_000u64),
        ("microburst", "link", 8_000_000_000),
    ] {
        let x = fig(rule, name);
        assert_eq!(x["window_start_ms"], BURST_MS, "{rule}: {x}");
        assert_eq!(x["window_start_ns"], BURST_MS * MS);
        assert_eq!(x["window_start"], "2026-11-30T02:00:01.234000000Z");
        assert_eq!(x["window_ms"], 2);
        assert_eq!(x["runs"], 1);
        assert_eq!(x["threshold_bits_per_second"], threshold);
        let rate = x["rate_bits_per_second"].as_u64().unwrap();
        assert!(
            rate >= BURST_FRAMES * FRAME * 8000 && rate > threshold,
            "{x}"
        );
    }
    assert_eq!(fig("ef_share", "ef")["threshold_share"], 0.5);

    // The incast: its millisecond, its destination, all 24 senders.
    let x = fig("incast", "10.88.1.1");
    assert_eq!(x["window_start_ns"], INCAST_MS * MS);
    assert_eq!(x["window_ms"], 1);
    assert_eq!(x["senders"], u64::from(SENDERS));
    assert_eq!(x["threshold_senders"], 16);
    assert_eq!(x["bytes"], u64::from(SENDERS) * 1000);
    let senders: BTreeSet<&str> = x["sender_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["addr"].as_str().unwrap())
        .collect();
    assert_eq!(senders.len(), usize::from(SENDERS));
    assert!(senders.contains("10.88.0.1") && senders.contains("10.88.0.24"));

    // backup's ceiling, 1G per 10 ms, is proven broken in the 10 ms holding the burst.
    let x = fig("rate_ceiling", "backup");
    assert_eq!(x["proven"], true, "{x}");
    assert_eq!(x["window_start_ns"], BURST_MS / 10 * 10 * MS);
    assert_eq!(x["window_ms"], 10);
    assert_eq!(
        (x["per_ms"].as_u64(), x["windows"].as_u64()),
        (Some(10), Some(1))
    );
    assert_eq!(x["threshold_bits_per_second"], 1_000_000_000u64);
    assert!(x["bytes"].as_u64().unwrap() > 1_250_000, "{x}");
    assert!(x["rate_bits_per_second"].as_u64().unwrap() > 1_000_000_000);
    assert_eq!(
        by[&("rate_ceiling".into(), "backup".into())]["severity"],
        "medium"
    );

    // night sent outside 08:00-18:00 UTC (at 02:00): its volume, its seconds.
    let x = fig("active_hours", "night");
    assert_eq!(x["bytes"], NIGHT_FRAMES * 500);
    assert_eq!(x["packets"], NIGHT_FRAMES);
    assert_eq!(x["hours"], "08:00-18:00 UTC");
    assert_eq!(x["window_start_ns"], NIGHT_MS / 1000 * 1000 * MS);
    assert!(x["window_start"]
        .as_str()
        .unwrap()
        .starts_with("2026-11-30T02:00:01"));

    // Triage's report zooms into each burst at 1 ms: the burst's window and 10 ms around.
    let out = f.dir.join("triage");
    run_ok(capsule().args([
        "triage",
        "--store",
        p(&f.store),
        "--config",
        p(&f.dir.join("alerts.toml")),
        "-o",
        p(&out),
        "--quiet",
    ]));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for rule in ["ef_share ef", "microburst link"] {
        let at = html
            .find(&format!("Millisecond zoom: {rule}"))
            .unwrap_or_else(|| panic!("no zoom of {rule}"));
        let para = &html[at..at + 600];
        assert!(para.contains("02:00:01.224"), "{para}");
        assert!(
            para.contains("the burst: 2026-11-30T02:00:01.234Z to 2026-11-30T02:00:01.236Z"),
            "{para}"
        );
    }
    assert_eq!(html.matches("Millisecond zoom:").count(), 2);

    // Held to 3 ms, the 2 ms EF burst is not one; 24 senders are not 25.
    let got = ms_alerts(
        &f,
        "ef_share = 0.5\nef_share_for = \"3ms\"\nincast_senders = 25\n",
    );
    let rules: BTreeSet<&str> = got.iter().map(|a| a["rule"].as_str().unwrap()).collect();
    assert_eq!(rules, ["rate_ceiling", "active_hours"].into(), "{got:#?}");
}
