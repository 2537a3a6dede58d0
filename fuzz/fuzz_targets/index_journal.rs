//! The open segment's index journal (`STORE/index/seg-N.journal`) over arbitrary bytes:
//! parsing (torn tails, damaged records, resynchronisation at the next magic) and folding
//! the records into the open segment's index.
//!
//! An input that starts with the record magic is parsed as it is. Any other input is a
//! record body, which the target frames as the writer does (magic, length, CRC-32C, fixed
//! fields and block part for block 0 of segment 1, the body stored as it is), so the fuzzer
//! reaches the body decoder past the checksum.
//!
//! Property: parsing and folding never panic; a record that parses is matched to the one
//! block it names.
#![no_main]

use capsule_index::sideindex::journal::{self, FRAME_LEN, JOURNAL_VERSION, RECORD_MAGIC};
use capsule_store::format::BlockMeta;
use libfuzzer_sys::fuzz_target;

/// The block every wrapped record describes, and the fold is given.
fn block() -> BlockMeta {
    BlockMeta {
        index: 0,
        packets: 1,
        ..BlockMeta::default()
    }
}

fn wrap(body: &[u8]) -> Vec<u8> {
    let meta = block();
    let mut out = Vec::new();
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&JOURNAL_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes()); // segment
    out.extend_from_slice(&meta.index.to_le_bytes());
    out.extend_from_slice(&meta.packets.to_le_bytes());
    out.extend_from_slice(&meta.first_ns.to_le_bytes());
    out.extend_from_slice(&meta.last_ns.to_le_bytes());
    out.extend_from_slice(&meta.frame_crc.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&meta.frame_offset.to_le_bytes());
    let mut header = Vec::new();
    meta.encode_header(&mut header);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(body);
    let len = (out.len() - FRAME_LEN) as u32;
    let crc = capsule_store::crc::crc32c(&out[FRAME_LEN..]);
    out[4..8].copy_from_slice(&len.to_le_bytes());
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}

fuzz_target!(|input: &[u8]| {
    let bytes = if input.starts_with(&RECORD_MAGIC) {
        input.to_vec()
    } else {
        wrap(input)
    };
    let read = journal::parse(&bytes);
    let _ = journal::fold(1, &[block()], 1 << 20, &read);
});
