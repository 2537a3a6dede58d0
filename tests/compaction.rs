//! Compaction (issue [engine] item 2, [hardening] item 7) by the real binary: `capsule
//! compact` killed with SIGKILL at random points (20 rounds, some of them while the
//! compaction sleeps at a chosen step through the `CAPSULE_COMPACT_PAUSE_AT` seam); after
//! each, the store opens, a full export has every packet exactly once, the next writer's open
//! leaves `capsule verify` clean, and compaction resumes and finishes. And a query running
//! across a compaction returns the packets it returned before.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;

/// The packets of an export, as (timestamp, bytes), sorted: what "every packet exactly once"
/// is compared on.
fn packets(pcap: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut v: Vec<_> = decode(pcap)
        .whole("export")
        .packets
        .into_iter()
        .map(|p| (p.ts_ns, p.data))
        .collect();
    v.sort();
    v
}

fn copy_dir(from: &Path, to: &Path) {
    let o = std::process::Command::new("cp")
        .args(["-a", p(from), p(to)])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cp: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Names in the store's segment directory that are not segments (temporary files).
fn strays(store: &Path) -> Vec<String> {
    std::fs::read_dir(store.join("segments"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

/// `capsule compact --json` that must succeed; its report.
fn compact_json(store: &Path) -> serde_json::Value {
    let o = run_ok(capsule().args(["compact", "--store", p(store), "--json"]));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout_str(&o)))
}

/// A store of `--level store` segments (what live capture writes when short of CPU).
fn stored_store(d: &Path) -> (std::path::PathBuf, Vec<(u64, Vec<u8>)>) {
    let input = d.join("in.pcap");
    synth(&input, &d.join("truth.json"), 7, "2s", "150M", None);
    let base = d.join("base");
    import_ok(
        &base,
        &["--level", "store", "--segment-size", "4M"],
        &[p(&input)],
    );
    let all = packets(&query_ok(&base, &d.join("base.pcap"), &[]));
    assert_eq!(all, packets(&std::fs::read(&input).unwrap()));
    (base, all)
}

#[test]
fn twenty_kill_9_rounds_of_compaction_keep_every_packet_once() {
    let d = tempfile::tempdir().unwrap();
    let (base, all) = stored_store(d.path());
    let base_segs = segments(&base);
    assert!(base_segs.len() >= 6, "{} segments", base_segs.len());
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut with_tmp, mut partly) = (0, 0);
    for round in 0..20 {
        let store = d.path().join(format!("store{round}"));
        copy_dir(&base, &store);
        // A quarter of the rounds each: killed anywhere, or while paused after a block, with
        // the temporary file written and synced, or right after the rename.
        let seam = ["", "block:3", "written:120", "renamed:120"][round % 4];
        let mut cmd = capsule();
        cmd.args(["compact", "--store", p(&store)])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if !seam.is_empty() {
            cmd.env("CAPSULE_COMPACT_PAUSE_AT", seam);
        }
        let mut child = cmd.spawn().unwrap();
        std::thread::sleep(Duration::from_millis(30 + next() % 900));
        // SIGKILL, by the pid of the child this test started.
        let _ = child.kill();
        let _ = child.wait();
        with_tmp += usize::from(!strays(&store).is_empty());
        let now = segments(&store);
        partly += usize::from(now.iter().zip(&base_segs).any(|(a, b)| a.bytes != b.bytes));
        // The store opens as it is, with every segment, and every packet exactly once.
        assert_eq!(
            now.iter().map(|s| s.seq).collect::<Vec<_>>(),
            base_segs.iter().map(|s| s.seq).collect::<Vec<_>>(),
            "round {round}: segments changed"
        );
        let out = d.path().join(format!("out{round}.pcap"));
        assert_eq!(
            packets(&query_ok(&store, &out, &[])),
            all,
            "round {round} ({seam}): the export differs after the kill"
        );
        // The next writer's open cleans up; compaction resumes and finishes.
        let r = compact_json(&store);
        assert!(
            strays(&store).is_empty(),
            "round {round}: {:?}",
            strays(&store)
        );
        let o = run(capsule().args(["verify", "--store", p(&store)]));
        assert!(
            o.status.success(),
            "round {round}: verify after the next open: {}{}",
            stdout_str(&o),
            stderr_str(&o)
        );
        assert_eq!(
            compact_json(&store)["segments_rewritten"],
            0,
            "round {round}: {r}"
        );
        let after: u64 = segments(&store).iter().map(|s| s.bytes).sum();
        let before: u64 = base_segs.iter().map(|s| s.bytes).sum();
        assert!(
            after * 10 < before * 8,
            "round {round}: {before} -> {after} bytes"
        );
        assert_eq!(packets(&query_ok(&store, &out, &[])), all, "round {round}");
        std::fs::remove_dir_all(&store).unwrap();
    }
    eprintln!("20 rounds: {with_tmp} left a temporary file, {partly} were killed part way");
    // The kills hit the interesting points, not only before or after the whole job.
    assert!(
        with_tmp >= 3,
        "a temporary file was left in only {with_tmp} rounds"
    );
    assert!(partly >= 5, "only {partly} rounds were killed part way");
}

#[test]
fn a_query_running_across_a_compaction_returns_the_same_packets() {
    let d = tempfile::tempdir().unwrap();
    let (store, all) = stored_store(d.path());
    let sizes_before: Vec<u64> = segments(&store).iter().map(|s| s.bytes).collect();
    let mut q = capsule()
        .args(["query", "--store", p(&store), "-w", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = q.stdout.take().unwrap();
    // The query has started and is held up by the pipe (nothing reads it).
    let mut got = vec![0u8; 1 << 16];
    stdout.read_exact(&mut got).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let r = compact_json(&store);
    assert_eq!(
        r["segments_rewritten"].as_u64(),
        Some(sizes_before.len() as u64),
        "{r}"
    );
    assert!(
        q.try_wait().unwrap().is_none(),
        "the query finished before the compaction: nothing was tested"
    );
    let sizes_after: Vec<u64> = segments(&store).iter().map(|s| s.bytes).collect();
    assert!(sizes_after.iter().zip(&sizes_before).all(|(a, b)| a < b));
    stdout.read_to_end(&mut got).unwrap();
    assert!(q.wait().unwrap().success());
    assert_eq!(
        packets(&got),
        all,
        "the query across the compaction differs"
    );
    // And the same query after it.
    assert_eq!(
        packets(&query_ok(&store, &d.path().join("after.pcap"), &[])),
        all
    );
}

#[test]
fn compact_refuses_while_a_writer_holds_the_lock_and_names_its_counts() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = stored_store(d.path());
    // The lock holder: one process holding a flock on the lock file (as a writer does),
    // started and ended by this test.
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            "import fcntl,sys,time\nf=open(sys.argv[1],'a')\nfcntl.flock(f,fcntl.LOCK_EX)\n\
             print('locked',flush=True)\ntime.sleep(30)",
            p(&store.join("writer.lock")),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = [0u8; 7];
    holder.stdout.take().unwrap().read_exact(&mut line).unwrap();
    assert_eq!(&line, b"locked\n");
    let t0 = std::time::Instant::now();
    let o = run(capsule().args(["compact", "--store", p(&store)]));
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(o.status.code(), Some(1), "{}", stderr_str(&o));
    assert!(stderr_str(&o).contains("lock"), "{}", stderr_str(&o));
    assert!(t0.elapsed() < Duration::from_secs(5));
    let o = run_ok(capsule().args(["compact", "--store", p(&store)]));
    let text = stdout_str(&o);
    assert!(
        text.contains("compacted") && text.contains("B -> "),
        "{text}"
    );
}

#[test]
fn status_shows_the_bytes_waiting_for_compaction_and_the_horizon_it_buys() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = stored_store(d.path());
    let status = |store: &Path| -> serde_json::Value {
        let o = run_ok(capsule().args([
            "status",
            "--store",
            p(store),
            "--json",
            "--max-bytes",
            "10M",
        ]));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["store"].clone()
    };
    let s = status(&store);
    let (bytes, pending) = (
        s["bytes"].as_u64().unwrap(),
        s["pending_compaction_bytes"].as_u64().unwrap(),
    );
    // Every block was stored: nearly all the store waits (the rest is metadata).
    assert!(pending > bytes * 95 / 100 && pending < bytes, "{s}");
    let (now, after) = (
        s["retention_horizon_ns"].as_u64().unwrap(),
        s["retention_horizon_after_compaction_ns"].as_u64().unwrap(),
    );
    assert!(after > now * 5 / 4, "{s}");
    let estimate = s["bytes_after_compaction"].as_u64().unwrap();
    compact_json(&store);
    let s = status(&store);
    assert_eq!(s["pending_compaction_bytes"], 0, "{s}");
    let real = s["bytes"].as_u64().unwrap();
    // The estimate (from a sample of blocks) is within a fifth of what compaction made.
    assert!(
        estimate.abs_diff(real) < real / 5,
        "estimated {estimate}, made {real}"
    );
    assert_eq!(
        s["retention_horizon_ns"],
        s["retention_horizon_after_compaction_ns"]
    );
}

/// The store of the first release (tests/fixtures/format-v1): its blocks do not record their
/// compression and were compressed, so nothing is pending and nothing is rewritten.
#[test]
fn a_store_written_before_blocks_recorded_their_compression_is_left_alone() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-v1/store"),
        &store,
    );
    let png = ["--format", "pcapng"];
    let before = packets(&query_ok(&store, &d.path().join("a.pcapng"), &png));
    let sizes: Vec<u64> = segments(&store).iter().map(|s| s.bytes).collect();
    let r = compact_json(&store);
    assert_eq!(r["segments_rewritten"], 0, "{r}");
    assert_eq!(
        segments(&store).iter().map(|s| s.bytes).collect::<Vec<_>>(),
        sizes
    );
    assert_eq!(
        packets(&query_ok(&store, &d.path().join("b.pcapng"), &png)),
        before
    );
}

/// The age tier done offline: `capsule compact --older-than 3s --level 9` on a store imported
/// at level 1 rewrites exactly the segments whose newest packet is more than 3 s before the
/// store's newest (their files replaced, the others untouched), the export stays byte for
/// byte what it was (capinfos counts every packet), `capsule status` shows the bytes at
/// each level, and a second run rewrites nothing.
#[test]
fn compact_older_than_rewrites_only_old_segments_at_the_tier_level_and_keeps_the_export() {
    use std::os::unix::fs::MetadataExt;
    need_tool("capinfos");
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.pcap");
    let truth = synth(&input, &d.path().join("truth.json"), 5, "6s", "40M", None);
    let store = d.path().join("s");
    import_ok(
        &store,
        &["--level", "1", "--segment-size", "4M"],
        &[p(&input)],
    );
    let before_pcap = d.path().join("before.pcap");
    let before = query_ok(&store, &before_pcap, &[]);
    assert_eq!(capinfos_packets(&before_pcap), truth.packets);
    let segs = segments(&store);
    assert!(segs.len() >= 4, "{} segments", segs.len());
    let newest = segs.iter().filter_map(|s| s.last_ns).max().unwrap();
    let old: Vec<u64> = segs
        .iter()
        .filter(|s| newest - s.last_ns.unwrap() > 3_000_000_000)
        .map(|s| s.seq)
        .collect();
    assert!(!old.is_empty() && old.len() < segs.len(), "{old:?}");
    let ino = |path: &Path| std::fs::metadata(path).unwrap().ino();
    let inodes: Vec<u64> = segs.iter().map(|s| ino(&s.path)).collect();

    let o = run_ok(capsule().args([
        "compact",
        "--store",
        p(&store),
        "--older-than",
        "3s",
        "--level",
        "9",
        "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut done: Vec<u64> = r["compacted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    done.sort();
    assert_eq!(done, old, "{r}");
    assert_eq!(r["older_than_ns"], 3_000_000_000u64, "{r}");
    let after = segments(&store);
    for (s, (a, i)) in segs.iter().zip(after.iter().zip(&inodes)) {
        assert_eq!((s.seq, s.packets, s.blocks), (a.seq, a.packets, a.blocks));
        if old.contains(&s.seq) {
            assert_ne!(ino(&a.path), *i, "old segment {} not rewritten", s.seq);
            assert!(a.bytes < s.bytes, "{} -> {} bytes", s.bytes, a.bytes);
        } else {
            assert_eq!(ino(&a.path), *i, "young segment {} rewritten", s.seq);
            assert_eq!(a.bytes, s.bytes);
        }
    }
    let after_pcap = d.path().join("after.pcap");
    assert!(
        query_ok(&store, &after_pcap, &[]) == before,
        "the export changed"
    );
    assert_eq!(capinfos_packets(&after_pcap), truth.packets);
    run_ok(capsule().args(["verify", "--store", p(&store)]));

    // Status: the bytes at levels 1 and 9, as many as the old segments' blocks hold at 9.
    let o = run_ok(capsule().args(["status", "--store", p(&store), "--json"]));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let levels = s["store"]["bytes_by_level"].as_array().unwrap().clone();
    let names: Vec<&str> = levels
        .iter()
        .map(|l| l["level"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["1", "9"], "{s}");
    let old_blocks: u64 = after
        .iter()
        .filter(|a| old.contains(&a.seq))
        .map(|a| a.blocks)
        .sum();
    assert_eq!(levels[1]["blocks"], old_blocks, "{s}");
    let text = stdout_str(&run_ok(capsule().args(["status", "--store", p(&store)])));
    assert!(text.contains("bytes by level: 1: "), "{text}");

    // Again: every old block already holds level 9, nothing is rewritten.
    let o = run_ok(capsule().args([
        "compact",
        "--store",
        p(&store),
        "--older-than",
        "3s",
        "--level",
        "9",
        "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["segments_rewritten"], 0, "{r}");
    let again: Vec<u64> = segments(&store).iter().map(|s| ino(&s.path)).collect();
    assert_eq!(
        again,
        after.iter().map(|a| ino(&a.path)).collect::<Vec<_>>()
    );
}
