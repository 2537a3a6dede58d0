//! The segment reader over an arbitrary file: the input is written to a temporary
//! directory once as a sealed segment (`seg-000000000001.pcapng.zst`, read through its
//! footer) and once as an open one (`.seg-000000000001.pcapng.zst.open`, read by walking its
//! block headers), and every block the reader lists is read and decompressed.
//!
//! Properties: opening and reading return errors, never panic; the blocks listed lie within
//! the file; a block that reads has the uncompressed length its metadata says.
#![no_main]

use std::path::Path;

use capsule_store::SegmentReader;
use libfuzzer_sys::fuzz_target;

fn check(path: &Path, input: &[u8]) {
    std::fs::write(path, input).expect("write temporary segment");
    let Ok(seg) = SegmentReader::open(path) else {
        return;
    };
    assert_eq!(seg.bytes(), input.len() as u64);
    let _ = (seg.seq(), seg.state(), seg.interfaces().len());
    let mut dctx = zstd::bulk::Decompressor::new().expect("zstd context");
    let (mut frame, mut out) = (Vec::new(), Vec::new());
    for (i, meta) in seg.blocks().iter().enumerate() {
        assert!(
            meta.frame_offset + u64::from(meta.compressed_len) <= input.len() as u64,
            "block {i} lies past the end: {meta:?}"
        );
        match seg.read_block(i, &mut dctx, &mut frame, &mut out) {
            Ok(()) => assert_eq!(out.len(), meta.uncompressed_len as usize, "block {i}"),
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let dir = tempfile::tempdir().expect("temporary directory");
    check(&dir.path().join("seg-000000000001.pcapng.zst"), input);
    check(&dir.path().join(".seg-000000000001.pcapng.zst.open"), input);
});
