//! Format version 1, frozen. tests/fixtures/format-v1/store was written by the first release
//! of the segment format from input.pcapng (190 packets on two interfaces: Ethernet and raw
//! IP). These files are never regenerated: every later build must read them and give back
//! exactly the packets of input.pcapng. If this test fails, the format changed without a new
//! version (see the version log in docs/format.md).

mod common;

use std::path::{Path, PathBuf};

use common::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-v1")
}

fn segment_bytes(store: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(store.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn version_1_store_reads_back_exactly_and_is_not_changed_by_readers() {
    let store = fixture().join("store");
    let before = segment_bytes(&store);
    assert_eq!(before.len(), 3);

    let segs = segments(&store);
    assert_eq!(
        segs.iter().map(|s| s.state.as_str()).collect::<Vec<_>>(),
        ["sealed"; 3]
    );
    assert_eq!(segs.iter().map(|s| s.blocks).sum::<u64>(), 18);
    assert_eq!(segs.iter().map(|s| s.packets).sum::<u64>(), 190);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("export.pcapng");
    query_ok(&store, &out, &["--format", "pcapng"]);
    let got = decode_file(&out).whole("export");
    let want = decode_file(&fixture().join("input.pcapng")).whole("input");
    assert_eq!(got.packets.len(), 190);
    assert_eq!(got.packets, want.packets);

    // Stock tools read each frozen segment.
    need_tool("zstd");
    need_tool("tshark");
    for (seg, info) in segment_bytes(&store).iter().zip(&segs) {
        let path = store.join("segments").join(&seg.0);
        let lines = sh_ok(&format!(
            "zstd -dc '{}' | tshark -r - -T fields -e frame.number",
            p(&path)
        ));
        assert_eq!(
            lines
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count() as u64,
            info.packets
        );
    }
    assert_eq!(
        segment_bytes(&store),
        before,
        "a reader changed the frozen store"
    );
}

#[test]
fn a_version_1_store_takes_new_packets() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir_all(store.join("segments")).unwrap();
    std::fs::copy(
        fixture().join("store/capsule-store.json"),
        store.join("capsule-store.json"),
    )
    .unwrap();
    for (name, bytes) in segment_bytes(&fixture().join("store")) {
        std::fs::write(store.join("segments").join(name), bytes).unwrap();
    }
    import_ok(&store, &[], &[p(&fixture().join("input.pcapng"))]);
    let segs = segments(&store);
    assert_eq!(
        segs.last().unwrap().seq,
        4,
        "new segments are numbered after the old ones"
    );
    assert_eq!(segs.iter().map(|s| s.packets).sum::<u64>(), 380);
    let out = dir.path().join("export.pcapng");
    query_ok(&store, &out, &["--format", "pcapng"]);
    let got = decode_file(&out).whole("export");
    let want = decode_file(&fixture().join("input.pcapng")).whole("input");
    // Every packet twice, equal timestamps side by side, old store's copy first.
    let doubled: Vec<_> = want
        .packets
        .iter()
        .flat_map(|p| [p.clone(), p.clone()])
        .collect();
    assert_eq!(got.packets, doubled);
}
