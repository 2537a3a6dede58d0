//! The open segment's index journal (`STORE/index/seg-N.journal`) over arbitrary bytes:
//! parsing (torn tails, damaged records, resynchronisation at the next magic) and folding
//! the records into the open segment's index.
//!
//! An input that starts with the record magic is parsed as it is. Any other input is a
//! record body, which the target compresses and frames as the writer does (magic, length,
//! CRC-32C, fixed fields for block 0 of segment 1), so the fuzzer reaches the body decoder
//! past the checksum and zstd.
//!
//! Property: parsing and folding never panic; a record that parses is matched to the one
//! block it names.
#![no_main]

use capsule_index::sideindex::journal::{self, FRAME_LEN, JOURNAL_VERSION, RECORD_MAGIC};
use capsule_store::format::BlockMeta;
use libfuzzer_sys::fuzz_target;

fn wrap(body: &[u8]) -> Option<Vec<u8>> {
    let compressed = zstd::bulk::compress(body, 1).ok()?;
    let mut out = Vec::new();
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&JOURNAL_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes()); // segment
    out.extend_from_slice(&0u32.to_le_bytes()); // block
    out.extend_from_slice(&1u32.to_le_bytes()); // packets
    out.extend_from_slice(&0u64.to_le_bytes()); // first ns
    out.extend_from_slice(&0u64.to_le_bytes()); // last ns
    out.extend_from_slice(&0u32.to_le_bytes()); // frame crc
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&compressed);
    let len = (out.len() - FRAME_LEN) as u32;
    let crc = capsule_store::crc::crc32c(&out[FRAME_LEN..]);
    out[4..8].copy_from_slice(&len.to_le_bytes());
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    Some(out)
}

fuzz_target!(|input: &[u8]| {
    let bytes = if input.starts_with(&RECORD_MAGIC) {
        input.to_vec()
    } else {
        match wrap(input) {
            Some(b) => b,
            None => return,
        }
    };
    let read = journal::parse(&bytes);
    let block = BlockMeta {
        index: 0,
        packets: 1,
        ..BlockMeta::default()
    };
    let _ = journal::fold(1, &[block], 1 << 20, &read);
});
