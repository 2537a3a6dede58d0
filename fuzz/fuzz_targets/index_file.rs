//! The side index decoder (`STORE/index/seg-N.idx`) over arbitrary bytes.
//!
//! An input that starts with the index magic is decoded as it is. Any other input is a body:
//! two little-endian u16 counts (blocks, flows) and the uncompressed records, which the
//! target compresses and wraps in a header of the current version (so the body holds the
//! series, flows, names and encapsulation tables) with the right lengths and checksums, so
//! the fuzzer reaches the record decoder past the CRCs and zstd.
//!
//! Property: an index that decodes encodes to bytes that decode to the same index, and
//! encoding that again gives the same bytes.
#![no_main]

use capsule_index::sideindex::{SegmentIndex, INDEX_VERSION};
use libfuzzer_sys::fuzz_target;

/// Header layout (docs/format.md): magic 8, version 2, reserved 6, seq 8, segment length 8,
/// blocks 4, flows 4, compressed length 8, uncompressed length 8, body crc32c 4, the flows'
/// span 16, header crc32c 4.
const HEADER_LEN: usize = 80;

fn wrap(input: &[u8]) -> Option<Vec<u8>> {
    let (counts, body) = input.split_first_chunk::<4>()?;
    let n_blocks = u32::from(u16::from_le_bytes([counts[0], counts[1]]));
    let n_flows = u32::from(u16::from_le_bytes([counts[2], counts[3]]));
    let compressed = zstd::bulk::compress(body, 1).ok()?;
    let mut out = SegmentIndex::default().encode();
    out.truncate(HEADER_LEN);
    out[8..10].copy_from_slice(&INDEX_VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&1u64.to_le_bytes());
    out[24..32].copy_from_slice(&1_000_000u64.to_le_bytes());
    out[32..36].copy_from_slice(&n_blocks.to_le_bytes());
    out[36..40].copy_from_slice(&n_flows.to_le_bytes());
    out[40..48].copy_from_slice(&(compressed.len() as u64).to_le_bytes());
    out[48..56].copy_from_slice(&(body.len() as u64).to_le_bytes());
    out[56..60].copy_from_slice(&capsule_store::crc::crc32c(&compressed).to_le_bytes());
    let crc = capsule_store::crc::crc32c(&out[..HEADER_LEN - 4]);
    out[76..80].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&compressed);
    Some(out)
}

fuzz_target!(|input: &[u8]| {
    let magic = &SegmentIndex::default().encode()[..8];
    let file = if input.starts_with(magic) {
        input.to_vec()
    } else {
        match wrap(input) {
            Some(f) => f,
            None => return,
        }
    };
    match SegmentIndex::decode(&file) {
        Ok(idx) => {
            let bytes = idx.encode();
            let again = SegmentIndex::decode(&bytes)
                .unwrap_or_else(|e| panic!("re-encoded index does not decode: {e}"));
            assert_eq!(again, idx);
            assert_eq!(again.encode(), bytes);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
