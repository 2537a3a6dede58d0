//! The segment reader over an arbitrary file: the input is written to a temporary
//! directory once as a sealed segment (`seg-000000000001.pcapng.zst`, read through its
//! footer) and once as an open one (`.seg-000000000001.pcapng.zst.open`, read by walking its
//! block headers), and every block the reader lists is read and decompressed.
//!
//! An input whose first byte is 0xff is used without it, after the target writes the right
//! crc32c into the footer its trailer points at (when there is one), so the fuzzer reaches
//! the footer's checks and the block reads behind the checksum. With 0xfe, the target also
//! walks the metadata frames from the first one and rewrites every segment header's and
//! block header's CRC-32C and every block frame's CRC (the header's field at 44): mutations
//! of header fields and of compressed block bytes then reach the checks and the
//! decompression behind the checksums, which random bytes almost never pass.
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

/// Writes the crc32c of the footer's body into the footer the trailer points at: the footer
/// frame is the last `frame_len` bytes; its payload starts after the 9-byte frame prefix,
/// the 3-byte raw block header and the pcapng block's type and length, and ends before the
/// block's closing length; the crc is 16 bytes before the payload's end.
fn fix_footer_crc(f: &mut [u8]) {
    let n = f.len();
    if n < 20 {
        return;
    }
    let frame_len = u32::from_le_bytes([f[n - 16], f[n - 15], f[n - 14], f[n - 13]]) as usize;
    let Some(start) = n.checked_sub(frame_len) else {
        return;
    };
    let (body, crc_at) = (start + 20, n - 20);
    if body <= crc_at {
        let crc = capsule_store::crc::crc32c(&f[body..crc_at]);
        f[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The zstd magic and the descriptor every metadata frame has (docs/format.md).
const META: [u8; 5] = [0x28, 0xB5, 0x2F, 0xFD, 0xA0];

fn u32_at(f: &[u8], at: usize) -> Option<usize> {
    let b = f.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

fn put_crc(f: &mut [u8], at: usize, crc: u32) {
    if let Some(b) = f.get_mut(at..at + 4) {
        b.copy_from_slice(&crc.to_le_bytes());
    }
}

/// Rewrites the CRCs of the segment header, of every block header and of every block frame,
/// walking from the first metadata frame: a metadata frame of content size C is followed,
/// for a block header, by the block frame of the header's compressed length.
fn fix_block_crcs(f: &mut [u8]) {
    let Some(mut at) = f.windows(META.len()).position(|w| w == META) else {
        return;
    };
    while f.get(at..at + META.len()) == Some(&META[..]) {
        let Some(c) = u32_at(f, at + 5) else { return };
        // One raw zstd block: every header is at most 65,535 bytes.
        if !(12..=131_072).contains(&c) {
            return;
        }
        let (payload, len) = (at + 20, c - 12);
        let Some(end) = at.checked_add(12 + c) else { return };
        if end > f.len() || len < 8 {
            return;
        }
        let next = end;
        match &f[payload..payload + 8] {
            b"CPSLSEG\0" if len >= 40 => {
                let crc = capsule_store::crc::crc32c(&f[payload..payload + 36]);
                put_crc(f, payload + 36, crc);
                at = next;
            }
            b"CPSLBLK\0" if len >= 64 => {
                let Some(clen) = u32_at(f, payload + 36) else { return };
                let frame_end = next.saturating_add(clen).min(f.len());
                let crc = capsule_store::crc::crc32c(&f[next..frame_end]);
                put_crc(f, payload + 44, crc);
                let crc = capsule_store::crc::crc32c(&f[payload..payload + len - 4]);
                put_crc(f, payload + len - 4, crc);
                at = frame_end;
            }
            _ => return,
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let mut fixed;
    let input = match input.split_first() {
        Some((0xff, rest)) => {
            fixed = rest.to_vec();
            fix_footer_crc(&mut fixed);
            &fixed[..]
        }
        Some((0xfe, rest)) => {
            fixed = rest.to_vec();
            fix_block_crcs(&mut fixed);
            fix_footer_crc(&mut fixed);
            &fixed[..]
        }
        _ => input,
    };
    let dir = tempfile::tempdir().expect("temporary directory");
    check(&dir.path().join("seg-000000000001.pcapng.zst"), input);
    check(&dir.path().join(".seg-000000000001.pcapng.zst.open"), input);
});
