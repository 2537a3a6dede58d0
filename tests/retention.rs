//! Retention budgets ([ops] item 1, [ux] item 3): a floor of free space (a default one for a
//! store given none), a maximum age by packet time, budgets saved in the store and applied
//! by every later writer unless changed, and answers that name the retention horizon.
//! Real tmpfs file systems (root, as CI runs).

mod common;

use std::path::Path;

use common::*;

const SMALL: [&str; 6] = [
    "--block-size",
    "64K",
    "--segment-size",
    "2M",
    "--level",
    "store",
];

fn saved(store: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(store.join("retention.json")).unwrap()).unwrap()
}

/// A new store given no budget keeps 10% of a small disk free (10% is less than 5 GiB),
/// says so once, and never reaches "disk full".
#[test]
fn a_store_given_no_budget_keeps_the_default_floor_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&tmp.path().join("fs"), "48m");
    let store = fs.dir.join("store");
    let input = tmp.path().join("in.pcap");
    let truth = synth(&input, &tmp.path().join("t.json"), 3, "2s", "600M", None);
    assert!(
        truth.bytes > 2 * (48 << 20),
        "the input is larger than the disk"
    );
    let out = import_ok(&store, &SMALL, &[p(&input)]);
    let (so, se) = (stdout_str(&out), stderr_str(&out));
    assert!(
        se.contains("keeps at least 10% of its disk or 5 GiB free"),
        "says so: {se}"
    );
    assert!(!so.contains("disk full"), "the disk never filled: {so}");
    assert!(so.contains("deleted by retention"), "{so}");
    let (avail, size) = df(&fs.dir);
    assert!(
        avail >= size / 10 - (256 << 10),
        "{avail} bytes free of {size}: the floor is 10%"
    );
    assert_eq!(saved(&store)["min_free"], "default", "{}", saved(&store));
    // Said once: the next writer of the same store is quiet about it.
    let again = import_ok(&store, &SMALL, &[p(&input)]);
    assert!(!stderr_str(&again).contains("keeps at least"));
    eprintln!("48 MiB tmpfs, no budget: {avail} of {size} bytes free after the import");
}

/// `--min-free 40%` is kept, saved, applied by the next writer given no flag, and removed by
/// `--min-free none`.
#[test]
fn a_free_space_budget_is_kept_saved_and_applied_by_the_next_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&tmp.path().join("fs"), "40m");
    let store = fs.dir.join("store");
    let input = tmp.path().join("in.pcap");
    synth(&input, &tmp.path().join("t.json"), 4, "2s", "300M", None);
    let mut args = SMALL.to_vec();
    args.extend(["--min-free", "40%"]);
    import_ok(&store, &args, &[p(&input)]);
    let (avail, size) = df(&fs.dir);
    assert!(
        avail * 10 >= size * 4 - (2560 << 10),
        "{avail} of {size} free, 40% kept"
    );
    assert_eq!(saved(&store)["min_free"]["percent"], 40.0);
    // The next writer, given no budget, keeps it.
    import_ok(&store, &SMALL, &[p(&input)]);
    let (avail2, _) = df(&fs.dir);
    assert!(
        avail2 * 10 >= size * 4 - (2560 << 10),
        "{avail2} of {size}: still 40%"
    );
    assert_eq!(saved(&store)["min_free"]["percent"], 40.0);
    // Removed explicitly.
    let mut none = SMALL.to_vec();
    none.extend(["--min-free", "none", "--max-bytes", "30M"]);
    import_ok(&store, &none, &[p(&input)]);
    assert_eq!(saved(&store)["min_free"], serde_json::Value::Null);
    assert_eq!(saved(&store)["max_bytes"], 30 << 20);
    let status = stdout_str(&run_ok(capsule().args(["status", "--store", p(&store)])));
    assert!(status.contains("budgets:"), "{status}");
}

/// `--max-age 20s`: segments whose packets are all older than 20 s before the newest packet
/// go; a query whose window reaches past what is left says where the horizon is.
#[test]
fn an_age_budget_deletes_by_packet_time_and_queries_name_the_horizon() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.pcap");
    synth(
        &input,
        &tmp.path().join("t.json"),
        5,
        "60s",
        "2M",
        Some("2026-11-30T02:00:00Z"),
    );
    let store = tmp.path().join("store");
    import_ok(
        &store,
        &[
            "--block-size",
            "64K",
            "--segment-age",
            "5s",
            "--max-age",
            "20s",
        ],
        &[p(&input)],
    );
    let segs = segments(&store);
    let newest = segs.iter().filter_map(|s| s.last_ns).max().unwrap();
    let oldest = segs.iter().filter_map(|s| s.first_ns).min().unwrap();
    let start = 1_764_468_000_000_000_000u64; // 2026-11-30T02:00:00Z
    assert!(segs[0].seq > 1, "old segments were deleted: {segs:?}");
    assert!(
        newest - oldest <= 26_000_000_000,
        "at most 20 s and one segment of 5 s kept: {} s",
        (newest - oldest) / 1_000_000_000
    );
    assert!(oldest > start + 30_000_000_000, "the first half is gone");
    assert_eq!(saved(&store)["max_age_ns"], 20_000_000_000u64);
    // A window from the start reaches past the horizon: the answer says so.
    let out = run(capsule().args([
        "query",
        "--store",
        p(&store),
        "--from",
        "2026-11-30T02:00:00Z",
        "--count",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_str(&out));
    let err = stderr_str(&out);
    assert!(err.contains("retention horizon"), "{err}");
    let flows = run(capsule().args([
        "flows",
        "--store",
        p(&store),
        "--from",
        "2026-11-30T02:00:00Z",
    ]));
    assert!(
        stderr_str(&flows).contains("retention horizon"),
        "{}",
        stderr_str(&flows)
    );
}
