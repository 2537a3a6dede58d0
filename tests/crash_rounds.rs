//! Crash proof by real kills of import (issue [hardening] item 7): 20 rounds of `capsule
//! import` killed with SIGKILL at a random moment. After each: the next writer opens the
//! store and recovers it, every segment sealed before the kill is byte-identical, `capsule
//! verify` finds nothing wrong, and what the store returns is the input's packets, each once.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;

/// Sealed segment files and their bytes.
fn sealed(store: &Path) -> HashMap<String, Vec<u8>> {
    let dir = store.join("segments");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return HashMap::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("seg-") && n.ends_with(".pcapng.zst"))
        .filter_map(|n| Some((n.clone(), std::fs::read(dir.join(&n)).ok()?)))
        .collect()
}

#[test]
fn twenty_kill_9_rounds_of_import_lose_nothing_sealed() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.pcap");
    synth(&input, &d.path().join("truth.json"), 5, "3s", "200M", None);
    let all = decode_file(&input).whole("input");
    let mut by_packet: HashMap<(u64, Vec<u8>), usize> = HashMap::new();
    for p in &all.packets {
        *by_packet.entry((p.ts_ns, p.data.clone())).or_default() += 1;
    }
    let tiny = d.path().join("tiny.pcap");
    std::fs::write(&tiny, write_pcap_ns(1, 0, &[(1, 60, vec![0; 60])])).unwrap();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut recovered_blocks = 0usize;
    for round in 0..20 {
        let store = d.path().join(format!("store{round}"));
        let mut child = capsule()
            .args(["import", "--store", p(&store), "--segment-size", "8M"])
            .arg(&input)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(40 + rng % 700));
        let before = sealed(&store);
        // SIGKILL, by the pid of the child this test started.
        let _ = child.kill();
        let _ = child.wait();
        // The next writer recovers the store and adds to it.
        let o = import_ok(&store, &[], &[p(&tiny)]);
        recovered_blocks += stdout_str(&o).matches("recovered segment").count();
        let after = sealed(&store);
        for (name, bytes) in &before {
            assert_eq!(
                after.get(name),
                Some(bytes),
                "round {round}: sealed segment {name} changed or vanished"
            );
        }
        let v = run(capsule().args(["verify", "--store", p(&store)]));
        assert_eq!(
            v.status.code(),
            Some(0),
            "round {round}: {}",
            stdout_str(&v)
        );
        // Every stored packet is one of the input's (or the tiny one), never twice.
        let got = decode(&query_ok(&store, &d.path().join("out.pcap"), &[])).whole("export");
        let mut seen: HashMap<(u64, Vec<u8>), usize> = HashMap::new();
        for p in &got.packets {
            *seen.entry((p.ts_ns, p.data.clone())).or_default() += 1;
        }
        for (k, n) in &seen {
            let want = by_packet.get(k).copied().unwrap_or(usize::from(k.0 == 1));
            assert!(*n <= want, "round {round}: a packet stored {n} times");
        }
        std::fs::remove_dir_all(&store).unwrap();
    }
    eprintln!("import kill -9 rounds: 20 survived; {recovered_blocks} torn segments recovered");
}

/// Index files of the store, by name.
fn index_files(store: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(store.join("index")) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".idx"))
        .collect();
    v.sort();
    v
}

/// Crash proof of index rebuilds (issue [hardening] item 7): 20 rounds of `capsule reindex`
/// killed with SIGKILL at a random moment, on a store whose indexes were all deleted. After
/// each: every index file left is whole and right (`capsule verify` finds nothing wrong),
/// queries still answer exactly (a segment without its index is read whole), and the next
/// `capsule reindex` gives the same flows as the indexes the writer built.
#[test]
fn twenty_kill_9_rounds_of_reindex_leave_every_index_whole() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.pcap");
    synth(&input, &d.path().join("truth.json"), 6, "3s", "200M", None);
    let store = d.path().join("store");
    import_ok(&store, &["--segment-size", "2M"], &[p(&input)]);
    let n_segments = segments(&store).len();
    assert!(
        n_segments >= 10,
        "{n_segments} segments: too few to kill a rebuild among"
    );
    let flows = || {
        stdout_str(&run_ok(capsule().args([
            "flows",
            "--store",
            p(&store),
            "--json",
            "--limit",
            "1000000",
        ])))
    };
    let count = |filter: &str| {
        stdout_str(&run_ok(capsule().args([
            "query",
            "--store",
            p(&store),
            "--count",
            filter,
        ])))
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
    };
    let want_flows = flows();
    let want_count = count("tcp port 443");
    let mut rng = 0xD1B5_4A32_D192_ED03u64;
    let mut partial_rounds = 0;
    for round in 0..20 {
        for name in index_files(&store) {
            std::fs::remove_file(store.join("index").join(name)).unwrap();
        }
        let mut child = capsule()
            .args(["reindex", "--store", p(&store)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(5 + rng % 400));
        // SIGKILL, by the pid of the child this test started.
        let _ = child.kill();
        let _ = child.wait();
        let left = index_files(&store).len();
        if left < n_segments {
            partial_rounds += 1;
        }
        // No index is torn: verify names the missing ones (answers from the index miss
        // their flows until they are rebuilt) and nothing else.
        let (problems, code, text) = verify_problems(&store);
        assert!(
            problems
                .iter()
                .all(|l| l.contains("missing: the segment's flows")),
            "round {round}: {left} of {n_segments} indexes left: {text}"
        );
        assert_eq!(
            (problems.len(), code),
            (
                n_segments - left,
                Some(if left == n_segments { 0 } else { 1 })
            ),
            "round {round}: {left} of {n_segments} indexes left: {text}"
        );
        assert_eq!(
            count("tcp port 443"),
            want_count,
            "round {round}: the same answer"
        );
        run_ok(capsule().args(["reindex", "--store", p(&store)]));
        assert_eq!(flows(), want_flows, "round {round}: the rebuilt flows");
    }
    eprintln!("reindex kill rounds: 20 survived, {partial_rounds} killed part way");
    assert!(
        partial_rounds > 0,
        "no round killed a rebuild part way: the test proves nothing"
    );
}
