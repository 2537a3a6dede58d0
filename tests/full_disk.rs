//! A real full disk: a store on a 12 MiB tmpfs fills up during an import.
//!
//! What must hold at 3 a.m.: the import fails with an error naming the segment file and the
//! cause; nothing sealed is harmed and everything written is still queryable (the torn open
//! segment included); the next writer recovers the torn segment, and with a byte budget
//! retention makes room, so capture could go on. Needs root (mount); CI runs as root.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// A tmpfs mounted for the test, unmounted when dropped (also when the test fails).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount -t tmpfs needs root: {st}");
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

#[test]
fn a_full_disk_fails_the_import_cleanly_and_the_next_writer_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&tmp.path().join("fs"), "12m");
    let store = fs.dir.join("store");
    let input = tmp.path().join("in.pcap");
    let truth = synth(&input, &tmp.path().join("truth.json"), 3, "2s", "80M", None);
    assert!(truth.bytes > 16 << 20, "the input must not fit the disk");

    let out = import(
        &store,
        &["--block-size", "64K", "--segment-size", "2M"],
        &[p(&input)],
    );
    assert!(
        !out.status.success(),
        "an import onto a full disk must fail"
    );
    let err = stderr_str(&out);
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        err.contains(".seg-") && err.contains(".pcapng.zst.open"),
        "names the file: {err}"
    );
    assert_eq!(
        err.matches("No space left on device").count(),
        1,
        "says it once: {err}"
    );

    // Everything written is readable, whole, and in the input's order.
    let orig = decode_file(&input).whole("input");
    let before = decode(&query_ok(&store, &tmp.path().join("before.pcap"), &[])).whole("export");
    assert!(before.packets.len() > 1000, "most of what fit is kept");
    let mut it = orig.packets.iter();
    for (i, k) in before.packets.iter().enumerate() {
        assert!(
            it.any(|x| x == k),
            "kept packet {i} is not an input packet in order"
        );
    }
    let segs = segments(&store);
    assert!(
        segs.iter().any(|s| s.state == "open"),
        "the torn segment is left for recovery"
    );

    // The next writer recovers the torn segment, and with a budget, retention makes room.
    let small = tmp.path().join("small.pcap");
    synth(
        &small,
        &tmp.path().join("small.json"),
        4,
        "1s",
        "8M",
        Some("2026-11-30T03:00:00Z"),
    );
    let out = import_ok(
        &store,
        &[
            "--block-size",
            "64K",
            "--segment-size",
            "2M",
            "--max-bytes",
            "8M",
        ],
        &[p(&small)],
    );
    let so = stdout_str(&out);
    assert!(so.contains("recovered segment"), "{so}");
    assert!(so.contains("retention: deleted segment"), "{so}");
    let segs = segments(&store);
    assert!(segs.iter().all(|s| s.state == "sealed"), "{segs:?}");
    assert!(segments_dir_bytes(&store) <= 8 << 20);
    let after = decode(&query_ok(&store, &tmp.path().join("after.pcap"), &[])).whole("after");
    let small_cap = decode_file(&small).whole("small");
    assert!(
        after.packets.ends_with(&small_cap.packets),
        "the new packets are all there"
    );
}
