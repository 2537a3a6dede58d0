//! The per-class cut-off end to end: the realistic synth trace imported whole and with
//! `[cutoff]` rules; the flow counters of the index, the analytics answers and the counts of
//! kept classes equal the uncut import's, each flow direction stores at most the limit and
//! one packet, exports open in tshark and capinfos, and config errors name key and line.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::*;

const LIMIT: u64 = 64 * 1024;

struct Trace {
    _dir: tempfile::TempDir,
    root: PathBuf,
    pcap: PathBuf,
    /// The longest frame of the trace (the most one crossing packet adds).
    longest: u64,
    plain: PathBuf,
}

fn trace() -> Trace {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let pcap = root.join("t.pcap");
    synth(&pcap, &root.join("truth.json"), 7, "8s", "200M", None);
    let longest = decode_file(&pcap)
        .packets
        .iter()
        .map(|p| u64::from(p.orig_len))
        .max()
        .unwrap();
    let plain = root.join("plain");
    import_ok(&plain, &[], &[p(&pcap)]);
    Trace {
        _dir: dir,
        root,
        pcap,
        longest,
        plain,
    }
}

fn write_config(root: &Path, name: &str, text: &str) -> PathBuf {
    let path = root.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

type Key = (u64, String, Option<u64>, String, Option<u64>, Vec<u64>);

/// `capsule flows --json` by flow key.
fn flows(store: &Path) -> HashMap<Key, serde_json::Value> {
    let out =
        run_ok(capsule().args(["flows", "--store", p(store), "--json", "--limit", "1000000"]));
    stdout_str(&out)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let vlans = v["vlans"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            let key = (
                v["proto"].as_u64().unwrap(),
                v["a"].as_str().unwrap().to_string(),
                v["a_port"].as_u64(),
                v["b"].as_str().unwrap().to_string(),
                v["b_port"].as_u64(),
                vlans,
            );
            (key, v)
        })
        .collect()
}

fn pair(v: &serde_json::Value) -> [u64; 2] {
    [v[0].as_u64().unwrap(), v[1].as_u64().unwrap()]
}

/// An analytics answer with the store's path taken out of its query command lines.
fn answer(store: &Path, cmd: &str) -> String {
    let out = run_ok(capsule().args([cmd, "--store", p(store), "--json"]));
    stdout_str(&out).replace(p(store), "STORE")
}

fn count(store: &Path, filter: &str) -> u64 {
    let out = run_ok(capsule().args(["query", "--store", p(store), "--count", "--json", filter]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["packets"].as_u64().unwrap()
}

fn segments_bytes(store: &Path) -> u64 {
    segments_dir_bytes(store)
}

#[test]
fn a_cut_import_stores_the_first_bytes_and_keeps_every_counter_exact() {
    let t = trace();
    let config = write_config(
        &t.root,
        "cut.toml",
        "[cutoff]\nbytes = \"64K\"\nkeep = [\"udp port 53\"]\nidle = \"5m\"\n",
    );
    let cut = t.root.join("cut");
    let out = import_ok(&cut, &["--config", p(&config)], &[p(&t.pcap)]);
    assert!(
        stdout_str(&out).contains("packets not stored"),
        "{}",
        stdout_str(&out)
    );

    let (whole, part) = (flows(&t.plain), flows(&cut));
    assert_eq!(whole.len(), part.len(), "the same flows");
    let mut n_cut = 0;
    for (k, w) in &whole {
        let c = &part[k];
        let (mut w2, mut c2) = (w.clone(), c.clone());
        w2["cut"] = serde_json::Value::Null;
        c2["cut"] = serde_json::Value::Null;
        assert_eq!(w2, c2, "flow {k:?}: the counters of what was seen");
        assert!(w["cut"].is_null());
        let dns = k.0 == 17 && (k.2 == Some(53) || k.4 == Some(53));
        if dns {
            assert!(
                c["cut"].is_null(),
                "{k:?} matches a keep rule: stored whole"
            );
            continue;
        }
        if c["cut"].is_null() {
            // Stored whole: each direction under the limit (and one packet).
            for d in pair(&c["bytes"]) {
                assert!(d < LIMIT + t.longest, "{k:?} stored whole with {d} bytes");
            }
            continue;
        }
        n_cut += 1;
        let stored = pair(&c["cut"]["stored_bytes"]);
        let seen = pair(&c["bytes"]);
        let cut_bytes = pair(&c["cut"]["cut_bytes"]);
        for d in 0..2 {
            assert!(
                stored[d] < LIMIT + t.longest,
                "{k:?} direction {d}: stored {} bytes, the limit is {LIMIT} (+1 packet)",
                stored[d]
            );
            assert_eq!(stored[d] + cut_bytes[d], seen[d]);
        }
        assert!(c["cut"]["cut_at"].is_string());
    }
    assert!(n_cut >= 10, "the bulk flows are cut ({n_cut})");

    // Analytics from the index answer as for the whole trace.
    for cmd in ["top", "tcp", "dscp"] {
        assert_eq!(answer(&t.plain, cmd), answer(&cut, cmd), "capsule {cmd}");
    }
    // A rebuilt index counts the same (the cut records are in the segments).
    run_ok(capsule().args(["reindex", "--store", p(&cut)]));
    assert_eq!(flows(&cut), part, "reindexed");

    // The export holds what was stored, opens in tshark and capinfos, and says what was cut.
    let file = t.root.join("tcp.pcapng");
    let out = run_ok(capsule().args([
        "query",
        "--store",
        p(&cut),
        "-w",
        p(&file),
        "--format",
        "pcapng",
        "tcp",
    ]));
    let err = stderr_str(&out);
    assert!(
        err.contains("flow(s) of this window were cut by the cut-off"),
        "{err}"
    );
    let stored_tcp: u64 = part
        .iter()
        .filter(|(k, _)| k.0 == 6)
        .map(|(_, v)| match v["cut"].is_null() {
            true => pair(&v["packets"]).iter().sum::<u64>(),
            false => pair(&v["cut"]["stored_packets"]).iter().sum(),
        })
        .sum();
    need_tool("capinfos");
    assert_eq!(capinfos_packets(&file), stored_tcp);
    let frames = tshark_fields(&file, &["frame.number"]);
    assert_eq!(frames.len() as u64, stored_tcp);
    assert!(count(&t.plain, "tcp") > stored_tcp);
    assert_eq!(count(&t.plain, "udp port 53"), count(&cut, "udp port 53"));

    // The human listing says which flows were cut, at 80 columns.
    let out =
        run_ok(
            capsule()
                .env("COLUMNS", "80")
                .args(["flows", "--store", p(&cut), "--limit", "8"]),
        );
    let text = stdout_str(&out);
    assert!(text.lines().next().unwrap().contains("stored"), "{text}");
    assert!(text.contains("cut flow(s)"), "{text}");
    for l in text.lines() {
        assert!(l.chars().count() <= 80, "{l:?}");
    }

    let (a, b) = (segments_bytes(&t.plain), segments_bytes(&cut));
    println!(
        "retention multiplier at 64 KiB a flow direction: {:.2}x ({a} -> {b} bytes)",
        a as f64 / b as f64
    );
    assert!(a > 3 * b, "{a} vs {b}");
}

#[test]
fn keep_rules_store_their_classes_whole_and_the_packet_limit_holds() {
    let t = trace();
    let config = write_config(
        &t.root,
        "keep.toml",
        "[cutoff]\npackets = 10\nkeep = [\"dscp ef\", \"tcp-control\", \"udp port 53\"]\n",
    );
    let cut = t.root.join("cut");
    import_ok(&cut, &["--config", p(&config)], &[p(&t.pcap)]);
    for filter in [
        "dscp ef",
        "udp port 53",
        "tcp[tcpflags] & (tcp-syn|tcp-fin|tcp-rst) != 0",
    ] {
        let (a, b) = (count(&t.plain, filter), count(&cut, filter));
        assert!(a > 0, "the trace has {filter}");
        assert_eq!(a, b, "{filter}: kept whole");
    }
    let part = flows(&cut);
    let mut limited = 0;
    for (k, v) in &part {
        let ef_only = v["dscp"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|d| d.as_array().unwrap())
            .all(|x| x.as_u64() == Some(46));
        if ef_only {
            assert!(v["cut"].is_null(), "{k:?} is EF: stored whole");
        }
        // UDP other than DNS and not EF: no keep rule applies, so 10 packets a direction.
        if k.0 == 17 && k.2 != Some(53) && k.4 != Some(53) && !v["cut"].is_null() {
            let no_ef = v["dscp"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|d| d.as_array().unwrap())
                .all(|x| x.as_u64() != Some(46));
            if no_ef {
                limited += 1;
                for n in pair(&v["cut"]["stored_packets"]) {
                    assert!(n <= 10, "{k:?}: {n} packets stored");
                }
            }
        }
    }
    assert!(limited > 0, "some UDP flow was cut at 10 packets");
    // The command-line limit overrides the file's bytes; 0 turns the cut-off off.
    let off = t.root.join("off");
    import_ok(&off, &["--cutoff", "0"], &[p(&t.pcap)]);
    assert!(flows(&off).values().all(|v| v["cut"].is_null()));
}

#[test]
fn cutoff_config_errors_name_the_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write_config(
        dir.path(),
        "bad.toml",
        "[cutoff]\nbytes = \"64K\"\nkeep = [\"dscp ef\",\n  \"udp prot 53\"]\n",
    );
    let out = run(capsule().args(["config", "check", p(&bad)]));
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_str(&out);
    assert!(err.contains("bad.toml:4:3: cutoff.keep[1]"), "{err}");
    assert!(err.contains("prot"), "{err}");
    let pcap = dir.path().join("t.pcap");
    synth(&pcap, &dir.path().join("truth.json"), 1, "1s", "10M", None);
    let store = dir.path().join("s");
    let out = import(&store, &["--config", p(&bad)], &[p(&pcap)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_str(&out));
    assert!(stderr_str(&out).contains("cutoff.keep[1]"));
    let bad = write_config(dir.path(), "bad2.toml", "[cutoff]\nidle = 5\n");
    let out = run(capsule().args(["config", "check", p(&bad)]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_str(&out).contains("bad2.toml:2:8: cutoff.idle"),
        "{}",
        stderr_str(&out)
    );
    let good = write_config(
        dir.path(),
        "good.toml",
        "[cutoff]\nbytes = \"64K\"\nkeep = [\"tcp-control\"]\n",
    );
    let out = run_ok(capsule().args(["config", "check", p(&good)]));
    assert!(
        stdout_str(&out).contains("cutoff: first 65.5 kB"),
        "{}",
        stdout_str(&out)
    );
}
