//! A real full disk: a store on a small tmpfs fills up, with no byte budget and the floor of
//! free space removed (`--min-free 0`; tests/retention.rs has the budgets that keep a disk
//! from filling).
//!
//! What must hold at 3 a.m.: capture and import never stop for a full disk. The writer
//! deletes the oldest sealed segments (counted and reported) and goes on; with nothing left
//! to delete it drops blocks, counts their packets as dropped for "disk full", and writes
//! again as soon as there is room; a writer killed on a full disk leaves a torn segment that
//! the next writer recovers, making room for its footer. Needs root (mount); CI runs as root.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// Bytes used on the file system holding `dir` (what `df` says).
fn fs_used(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=used", "-B1"])
        .arg(dir)
        .output()
        .expect("run df");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df prints the bytes used")
}

/// A second, small input (about 1 MB), later than the big ones: `DIR/small.pcap`.
fn small_input(dir: &Path, seed: u64) -> std::path::PathBuf {
    let small = dir.join("small.pcap");
    let truth = dir.join("small.json");
    synth(
        &small,
        &truth,
        seed,
        "1s",
        "8M",
        Some("2026-11-30T03:00:00Z"),
    );
    small
}

const SMALL_SEGMENTS: [&str; 8] = [
    "--block-size",
    "64K",
    "--segment-size",
    "2M",
    "--level",
    "store",
    "--min-free",
    "0",
];

#[test]
fn a_full_disk_without_a_budget_deletes_the_oldest_segments_and_the_import_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&tmp.path().join("fs"), "48m");
    let store = fs.dir.join("store");
    let input = tmp.path().join("in.pcap");
    let truth = synth(&input, &tmp.path().join("truth.json"), 3, "2s", "1G", None);
    assert!(
        truth.bytes > 3 * (48 << 20),
        "the input must be several times the disk"
    );

    let out = import_ok(&store, &SMALL_SEGMENTS, &[p(&input)]);
    let so = stdout_str(&out);
    assert!(
        so.contains("disk full: deleted the") && so.contains("oldest segment(s)"),
        "the evictions are reported: {so}"
    );
    assert!(
        !so.contains("dropped"),
        "nothing is dropped while there is a segment to delete: {so}"
    );
    let segs = segments(&store);
    assert!(segs.iter().all(|s| s.state == "sealed"), "{segs:?}");
    assert!(
        segs[0].seq > 1,
        "the oldest segments were deleted: {segs:?}"
    );
    assert!(segments_dir_bytes(&store) <= 48 << 20);
    let used = fs_used(&fs.dir);
    assert!(used <= 48 << 20, "{used} bytes used");

    // The newest packets are all there, in order: what the store holds is the input's tail.
    let orig = decode_file(&input).whole("input");
    let kept = decode(&query_ok(&store, &tmp.path().join("kept.pcap"), &[])).whole("export");
    assert!(
        kept.packets.len() as u64 * 5 > truth.packets / 5,
        "{} of {} packets kept",
        kept.packets.len(),
        truth.packets
    );
    assert!(
        orig.packets.ends_with(&kept.packets),
        "the store holds a gap-free tail of the input ({} packets)",
        kept.packets.len()
    );
    eprintln!(
        "48 MiB tmpfs: {} of {} packets ({} bytes) kept, {} segments left, oldest seq {}, \
         {used} bytes used",
        kept.packets.len(),
        truth.packets,
        truth.bytes,
        segs.len(),
        segs[0].seq
    );
}

#[test]
fn with_nothing_left_to_delete_packets_are_dropped_counted_and_writing_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&tmp.path().join("fs"), "32m");
    let store = fs.dir.join("store");
    let filler = fs.dir.join("filler");
    std::fs::create_dir_all(&store).unwrap();
    fill(&filler, 3 << 20);
    let input = tmp.path().join("in.pcap");
    let truth = synth(
        &input,
        &tmp.path().join("truth.json"),
        5,
        "1s",
        "160M",
        None,
    );
    assert!(truth.bytes > 8 << 20);

    // One segment bigger than the room: it fills the disk with no sealed segment to delete.
    // The import says so and exits 1 (before: exit 0 and "stored" every packet read).
    let big = ONE_BIG_SEGMENT;
    let out = import(&store, &big, &[p(&input)]);
    let (so, se) = (stdout_str(&out), stderr_str(&out));
    assert_eq!(
        out.status.code(),
        Some(1),
        "an import that dropped packets: {so}{se}"
    );
    let dropped: u64 = so
        .split("disk full: dropped ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the drops are reported: {so}"));
    assert!(dropped > 0 && dropped < truth.packets, "{so}");
    assert!(
        se.contains(&format!(
            "the disk was full: {dropped} of {} packets read were not stored",
            truth.packets
        )),
        "the error does not say what was dropped: {se}"
    );
    assert!(
        so.contains(&format!(
            "stored {} of {} packets read",
            truth.packets - dropped,
            truth.packets
        )),
        "the summary counts dropped packets as stored: {so}"
    );
    // What was written is readable (the segment is open: no room for its footer).
    let before = decode(&query_ok(&store, &tmp.path().join("before.pcap"), &[])).whole("before");
    assert!(!before.packets.is_empty());
    assert_eq!(
        before.packets.len() as u64 + dropped,
        truth.packets,
        "every packet is stored or counted as dropped: {so}"
    );
    let orig = decode_file(&input).whole("input");
    // Mostly the head of the input; a small block may still fit into a partly used page
    // later, so what is kept is input packets in input order.
    let mut it = orig.packets.iter();
    for (i, k) in before.packets.iter().enumerate() {
        assert!(
            it.any(|x| x == k),
            "kept packet {i} is not an input packet in order"
        );
    }

    // Room again: the next writer recovers the torn segment and stores everything.
    std::fs::remove_file(&filler).unwrap();
    let small = small_input(tmp.path(), 6);
    let out = import_ok(&store, &big, &[p(&small)]);
    let so = stdout_str(&out);
    assert!(!so.contains("disk full"), "{so}");
    let after = decode(&query_ok(&store, &tmp.path().join("after.pcap"), &[])).whole("after");
    let small_cap = decode_file(&small).whole("small");
    assert!(
        after.packets.ends_with(&small_cap.packets),
        "the new packets are all there"
    );
    assert!(segments(&store).iter().all(|s| s.state == "sealed"));
    eprintln!(
        "3 MiB free: {} packets stored, {dropped} dropped for disk full",
        before.packets.len()
    );
}

#[test]
fn a_writer_killed_on_a_full_disk_leaves_a_torn_segment_the_next_one_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&tmp.path().join("fs"), "24m");
    let store = fs.dir.join("store");
    let input = tmp.path().join("in.pcap");
    synth(
        &input,
        &tmp.path().join("truth.json"),
        7,
        "2s",
        "400M",
        None,
    );

    // Killed (SIGKILL) once the disk has been full for a while, mid-segment.
    let mut cmd = capsule();
    cmd.arg("import")
        .args(["--store", p(&store)])
        // Small blocks: the torn segment's footer needs more than its last page's spare room.
        .args([
            "--block-size",
            "16K",
            "--segment-size",
            "4M",
            "--level",
            "store",
        ])
        .arg(&input)
        .stdout(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("start import");
    let t0 = Instant::now();
    let mut killed = false;
    while t0.elapsed() < Duration::from_secs(60) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        let names: Vec<String> = std::fs::read_dir(store.join("segments"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let deleted = names
            .iter()
            .filter_map(|n| capsule_store::segment::any_seq(n))
            .min()
            .unwrap_or(0);
        // Killed while a segment is open (not between a seal and the next segment's
        // creation, nor after the last seal): the torn segment the test is about.
        let open = names.iter().any(|n| {
            capsule_store::segment::parse_name(n)
                .is_some_and(|(_, st)| st == capsule_store::SegmentState::Open)
        });
        if deleted >= 4 && open {
            child.kill().unwrap(); // SIGKILL to the import this test started
            killed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.wait();
    assert!(
        killed,
        "the import ended before the disk was full long enough"
    );
    // Fill the rest, so recovering needs room that only deleting can make.
    fill(&fs.dir.join("filler"), 0);
    assert!(
        segments(&store).iter().any(|s| s.state == "open"),
        "the kill left a torn segment"
    );

    let small = small_input(tmp.path(), 8);
    let out = import_ok(&store, &SMALL_SEGMENTS, &[p(&small)]);
    let so = stdout_str(&out);
    assert!(so.contains("recovered segment"), "{so}");
    // The footer's room was made by deleting a sealed segment ("to recover a torn
    // segment"), unless cutting the torn tail freed enough (it depends on where the kill
    // fell): either way the run starts and stores.
    let after = decode(&query_ok(&store, &tmp.path().join("after.pcap"), &[])).whole("after");
    let small_cap = decode_file(&small).whole("small");
    assert!(
        after.packets.ends_with(&small_cap.packets),
        "the new run stored its packets: {so}"
    );
    eprintln!("restart on a full disk: {}", so.trim());
}
