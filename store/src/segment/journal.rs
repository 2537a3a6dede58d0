//! The framing of the open segment's index journal (`STORE/index/seg-N.journal`), and the
//! block table its records carry (journal version 4 and later), so that a reader of the
//! open segment takes its blocks from the journal instead of walking every block header.
//!
//! ```text
//! record: magic CPJR, payload length u32, payload crc32c u32, payload
//! payload: version u16, flags u16, seq u64, block u32, the block's packets u32, first and
//!   last ns u64, frame crc32c u32, body length u32 (the fixed part: 44 bytes)
//!   version >= 4: frame_offset u64, header frame length u32, the block's header frame
//!   (exactly the bytes the segment holds in front of the block's zstd frame), then the
//!   body that capsule-index encodes and decodes
//! ```
//! The store owns the envelope, both ways: [`encode_record`] writes it around a body, and
//! [`frames`], [`placed`] and [`block_table`] read it. The body (block summary and flow
//! deltas), the record version's meaning for it, and the journal file's life are
//! capsule-index's (its sideindex/journal.rs writes records through [`encode_record`] and
//! folds them). The framing stays here, below the index, because the block table is the
//! segment's own data and every reader of a segment needs it (docs/decisions.md, "The index
//! journal's framing stays with the store").
//!
//! A reader never trusts that table alone: the segment reader (reader.rs) checks that the
//! blocks follow each other from the segment header on and lie within the file, and reads the header of
//! the last one it uses back from the file (the journal record is written when the block is
//! handed to the disk, which with direct I/O is before its bytes are written).
//! Byte layout: docs/format.md, "Index journal".

use std::path::{Path, PathBuf};

use crate::format::{self, BlockMeta, DecodeError};

/// Magic opening every journal record.
pub const RECORD_MAGIC: [u8; 4] = *b"CPJR";
/// Magic, payload length, payload crc32c.
pub const FRAME_LEN: usize = 12;
/// Fixed part of a payload (version 2 and later), before the version's own fields.
pub const FIXED_LEN: usize = 44;
/// No record is larger (a block holds at most 64 MiB of packets).
pub const MAX_PAYLOAD: u32 = 256 << 20;
/// First journal version whose records carry the block's frame offset and header.
pub const BLOCK_TABLE_VERSION: u16 = 4;

/// Name of segment `seq`'s index journal.
pub fn journal_name(seq: u64) -> String {
    format!("seg-{seq:012}.journal")
}

/// Where the journal of the segment at `segment_path` (`STORE/segments/...`) is:
/// `STORE/index/seg-N.journal`.
pub fn journal_path(segment_path: &Path, seq: u64) -> Option<PathBuf> {
    let root = segment_path.parent()?.parent()?;
    Some(root.join(crate::store::INDEX_DIR).join(journal_name(seq)))
}

/// Encodes one record of block `block` of segment `seq` into `out` (cleared first): the
/// frame around a payload of the fixed part (`version`, flags 0, `seq`, `block`, then
/// `meta`'s packet count, first and last timestamps and frame crc32c, and `body`'s length),
/// for version 4 and later the block part (`meta`'s frame offset and its header frame, as
/// the segment holds it), then `body` as it is.
pub fn encode_record(
    version: u16,
    seq: u64,
    block: u32,
    meta: &BlockMeta,
    body: &[u8],
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&[0; 8]); // length and crc32c, filled in below
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&block.to_le_bytes());
    out.extend_from_slice(&meta.packets.to_le_bytes());
    out.extend_from_slice(&meta.first_ns.to_le_bytes());
    out.extend_from_slice(&meta.last_ns.to_le_bytes());
    out.extend_from_slice(&meta.frame_crc.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    debug_assert_eq!(out.len(), FRAME_LEN + FIXED_LEN);
    if version >= BLOCK_TABLE_VERSION {
        // The block's place in the segment and its header frame, as the segment holds
        // them: what the reader of the open segment builds its block table from.
        out.extend_from_slice(&meta.frame_offset.to_le_bytes());
        let hlen_at = out.len();
        out.extend_from_slice(&[0; 4]);
        meta.encode_header(out);
        let hlen = (out.len() - hlen_at - 4) as u32;
        out[hlen_at..hlen_at + 4].copy_from_slice(&hlen.to_le_bytes());
    }
    out.extend_from_slice(body);
    let len = (out.len() - FRAME_LEN) as u32;
    let crc = crate::crc::crc32c(&out[FRAME_LEN..]);
    out[4..8].copy_from_slice(&len.to_le_bytes());
    out[8..12].copy_from_slice(&crc.to_le_bytes());
}

/// The records of a journal's bytes, framed and checksummed, not yet decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frames<'a> {
    /// Each whole record whose crc32c holds: its file offset and payload.
    pub records: Vec<(usize, &'a [u8])>,
    /// Damaged stretches skipped, each naming the file offset and what was wrong.
    pub notes: Vec<String>,
    /// Offset of a cut-short last record (a writer stopped mid-write, or one being written
    /// right now), ignored.
    pub torn_tail: Option<usize>,
}

/// Splits a journal into its records. Never panics: a record that fails its checks is
/// skipped with a note (reading resumes at the next record magic), and a last record cut
/// short is a torn tail.
pub fn frames(bytes: &[u8]) -> Frames<'_> {
    let mut out = Frames::default();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < FRAME_LEN {
            if RECORD_MAGIC.starts_with(&rest[..rest.len().min(4)]) {
                out.torn_tail = Some(at);
            } else {
                out.notes.push(format!(
                    "offset {at}: {} bytes that are no record",
                    rest.len()
                ));
            }
            break;
        }
        if rest[..4] != RECORD_MAGIC {
            let skip = find_magic(&rest[1..]).map_or(rest.len(), |n| n + 1);
            out.notes.push(format!(
                "offset {at}: expected record magic CPJR, found {:02x?}; skipped {skip} bytes",
                &rest[..4]
            ));
            at += skip;
            continue;
        }
        let len = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        let stored = u32::from_le_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let end = FRAME_LEN as u64 + u64::from(len);
        if len > MAX_PAYLOAD || end > rest.len() as u64 {
            // Cut short: the tail being written, or a length that was damaged. Whatever
            // whole records follow (a damaged length) are still read.
            match find_magic(&rest[4..]) {
                Some(n) if len <= MAX_PAYLOAD => {
                    out.notes.push(format!(
                        "offset {at}: record of {len} bytes runs past the end ({} bytes \
                         left); skipped to the next record",
                        rest.len() - FRAME_LEN
                    ));
                    at += 4 + n;
                }
                Some(n) => {
                    out.notes.push(format!(
                        "offset {at}: record length {len} is implausible; skipped to the \
                         next record"
                    ));
                    at += 4 + n;
                }
                None => {
                    out.torn_tail = Some(at);
                    break;
                }
            }
            continue;
        }
        let payload = &rest[FRAME_LEN..end as usize];
        let computed = crate::crc::crc32c(payload);
        if computed != stored {
            out.notes.push(format!(
                "offset {at}: record of {len} bytes fails its crc32c (stored {stored:#010x}, \
                 computed {computed:#010x}); skipped"
            ));
        } else {
            out.records.push((at, payload));
        }
        at += end as usize;
    }
    out
}

fn find_magic(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == RECORD_MAGIC)
}

/// What a version 4 record says of its block's place in the segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed<'a> {
    pub seq: u64,
    /// The block as its header says, with `frame_offset` from the record.
    pub meta: BlockMeta,
    /// The header frame as the record holds it (the bytes in front of the frame).
    pub header: &'a [u8],
    /// Where the rest of the payload (capsule-index's compressed body) starts.
    pub body_at: usize,
}

fn le_u64(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"))
}

fn le_u32(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes"))
}

/// Decodes the block part of a record's payload: `Ok(None)` for records older than
/// version 4 (they carry no block table); an error when a version 4 record's block part
/// does not hold together.
pub fn placed(p: &[u8]) -> Result<Option<Placed<'_>>, DecodeError> {
    const WHAT: &str = "index journal record";
    if p.len() < FIXED_LEN {
        return Err(DecodeError::Short {
            what: WHAT,
            expected: FIXED_LEN,
            found: p.len(),
        });
    }
    let version = u16::from_le_bytes([p[0], p[1]]);
    if version < BLOCK_TABLE_VERSION {
        return Ok(None);
    }
    let seq = le_u64(p, 4);
    let block = le_u32(p, 12);
    let need = FIXED_LEN + 12;
    if p.len() < need {
        return Err(DecodeError::Short {
            what: WHAT,
            expected: need,
            found: p.len(),
        });
    }
    let frame_offset = le_u64(p, FIXED_LEN);
    let hlen = le_u32(p, FIXED_LEN + 8) as usize;
    let body_at = need
        .checked_add(hlen)
        .filter(|&e| e <= p.len())
        .ok_or(DecodeError::Short {
            what: WHAT,
            expected: need.saturating_add(hlen),
            found: p.len(),
        })?;
    let header = &p[need..body_at];
    let payload = format::decode_meta_frame("journaled block header", header)?;
    let mut meta = BlockMeta::decode_header(&payload)?;
    if meta.index != block || header.len() != meta.header_frame_len() {
        return Err(DecodeError::Invalid {
            what: WHAT,
            detail: format!(
                "record for block {block} holds the header of block {} ({} bytes, expected {})",
                meta.index,
                header.len(),
                meta.header_frame_len()
            ),
        });
    }
    meta.frame_offset = frame_offset;
    Ok(Some(Placed {
        seq,
        meta,
        header,
        body_at,
    }))
}

/// The block table of segment `seq` that the journal `bytes` carries: the blocks 0, 1, ...
/// for which it holds a whole version 4 record, up to the first one it does not (a torn
/// tail, a damaged or older record, a record of another segment). Each entry pairs the
/// block with its header frame, which the reader compares with the file's bytes.
pub fn block_table(bytes: &[u8], seq: u64) -> Vec<(BlockMeta, Vec<u8>)> {
    let mut out: Vec<(BlockMeta, Vec<u8>)> = Vec::new();
    for (_, p) in frames(bytes).records {
        let Ok(Some(r)) = placed(p) else {
            break;
        };
        if r.seq != seq || r.meta.index as usize != out.len() {
            break;
        }
        out.push((r.meta, r.header.to_vec()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::tests::block;
    use crate::segment::{open_name, scan, SegmentFile, SegmentReader};

    /// A journal record of `version` for `meta` as the segment placed it (an empty body: the
    /// store reads only the block part).
    fn record(version: u16, seq: u64, meta: &BlockMeta) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&version.to_le_bytes());
        p.extend_from_slice(&0u16.to_le_bytes());
        p.extend_from_slice(&seq.to_le_bytes());
        p.extend_from_slice(&meta.index.to_le_bytes());
        p.extend_from_slice(&meta.packets.to_le_bytes());
        p.extend_from_slice(&meta.first_ns.to_le_bytes());
        p.extend_from_slice(&meta.last_ns.to_le_bytes());
        p.extend_from_slice(&meta.frame_crc.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        if version >= BLOCK_TABLE_VERSION {
            p.extend_from_slice(&meta.frame_offset.to_le_bytes());
            let mut h = Vec::new();
            meta.encode_header(&mut h);
            p.extend_from_slice(&(h.len() as u32).to_le_bytes());
            p.extend_from_slice(&h);
        }
        let mut out = RECORD_MAGIC.to_vec();
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(&crate::crc::crc32c(&p).to_le_bytes());
        out.extend_from_slice(&p);
        out
    }

    /// A store-like layout (`segments/`, `index/`) with an open segment of `n` blocks
    /// flushed to the file, and the metas as the segment placed them.
    fn open_segment(root: &Path, n: u64) -> (SegmentFile, Vec<BlockMeta>) {
        let segs = root.join("segments");
        std::fs::create_dir_all(&segs).unwrap();
        std::fs::create_dir_all(root.join("index")).unwrap();
        let mut seg = SegmentFile::create(&segs, 3, 0).unwrap();
        let mut metas = Vec::new();
        for k in 0..n {
            let (meta, frame) = block(k, &vec![k as u8; 100 + 300 * k as usize]);
            seg.append(meta.clone(), &frame).unwrap();
            let p = seg.appended(0).unwrap();
            metas.push(BlockMeta {
                index: p.index,
                frame_offset: p.frame_offset,
                ..meta
            });
        }
        seg.flush().unwrap();
        (seg, metas)
    }

    fn read(root: &Path) -> (SegmentReader, Vec<BlockMeta>) {
        let path = root.join("segments").join(open_name(3));
        let r = SegmentReader::open(&path).unwrap();
        let walk = scan(&path, &std::fs::File::open(&path).unwrap(), false).unwrap();
        (r, walk.blocks)
    }

    #[test]
    fn the_open_segment_takes_its_blocks_from_the_journal_as_far_as_the_file_confirms() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let (mut seg, mut metas) = open_segment(root, 6);
        let jpath = root.join("index").join(journal_name(3));
        let journal = |metas: &[BlockMeta]| -> Vec<u8> {
            metas.iter().flat_map(|m| record(4, 3, m)).collect()
        };

        // No journal: the walk.
        let (r, walk) = read(root);
        assert_eq!((r.blocks(), r.blocks_from_journal()), (&walk[..], 0));
        assert_eq!(walk, metas);

        // Every block journaled: all from the journal, the same table as the walk.
        std::fs::write(&jpath, journal(&metas)).unwrap();
        let (r, walk) = read(root);
        assert_eq!((r.blocks(), r.blocks_from_journal()), (&walk[..], 6));

        // A record for a block handed to the disk but not yet written (staged by direct
        // I/O, or the write still under way): not trusted, though it may lie within the
        // file's padded length.
        let (meta, frame) = block(99, &[7; 50]);
        seg.append(meta.clone(), &frame).unwrap();
        let p = seg.appended(0).unwrap();
        metas.push(BlockMeta {
            index: p.index,
            frame_offset: p.frame_offset,
            ..meta
        });
        std::fs::write(&jpath, journal(&metas)).unwrap();
        let (r, walk) = read(root);
        assert_eq!(walk.len(), 6);
        assert_eq!((r.blocks(), r.blocks_from_journal()), (&walk[..], 6));
        // Once written, it is.
        seg.flush().unwrap();
        let (r, walk) = read(root);
        assert_eq!((r.blocks(), r.blocks_from_journal()), (&walk[..], 7));

        // A torn last record: the block it describes is walked.
        let mut bytes = journal(&metas);
        bytes.truncate(bytes.len() - 5);
        std::fs::write(&jpath, &bytes).unwrap();
        let (r, walk) = read(root);
        assert_eq!((r.blocks(), r.blocks_from_journal()), (&walk[..], 6));

        // A damaged record in the middle: the table stops before it, the rest is walked.
        let mut bytes = journal(&metas);
        let at = record(4, 3, &metas[0]).len() * 2 + FRAME_LEN + 30;
        bytes[at] ^= 0x40;
        std::fs::write(&jpath, &bytes).unwrap();
        let (r, walk) = read(root);
        assert_eq!((r.blocks(), r.blocks_from_journal()), (&walk[..], 2));

        // A whole record that does not describe the file's block (another writer's journal
        // for this number): the file's header differs, so the table is not used that far.
        let mut wrong = metas.clone();
        wrong[6].frame_crc ^= 1;
        std::fs::write(&jpath, journal(&wrong)).unwrap();
        let (r, walk) = read(root);
        assert_eq!((r.blocks(), r.blocks_from_journal()), (&walk[..], 6));
        let mut wrong = metas.clone();
        wrong[3].frame_offset += 1;
        std::fs::write(&jpath, journal(&wrong)).unwrap();
        let (r, walk) = read(root);
        assert_eq!((r.blocks(), r.blocks_from_journal()), (&walk[..], 3));

        // Another segment's records, or records of journal version 3 (no block table).
        let other: Vec<u8> = metas.iter().flat_map(|m| record(4, 4, m)).collect();
        std::fs::write(&jpath, other).unwrap();
        assert_eq!(read(root).0.blocks_from_journal(), 0);
        let old: Vec<u8> = metas.iter().flat_map(|m| record(3, 3, m)).collect();
        std::fs::write(&jpath, old).unwrap();
        let (r, walk) = read(root);
        assert_eq!((r.blocks(), r.blocks_from_journal()), (&walk[..], 0));
        assert_eq!(walk.len(), 7);
    }

    /// The encoder writes the layout the hand-built records above spell out, field by
    /// field, for records with and without a block part; a body follows the block part.
    #[test]
    fn encode_record_writes_the_documented_layout() {
        let (mut meta, _) = block(2, &[9; 300]);
        meta.frame_offset = 4096;
        let mut out = Vec::new();
        for version in [3, 4] {
            encode_record(version, 7, meta.index, &meta, &[], &mut out);
            assert_eq!(out, record(version, 7, &meta), "version {version}");
        }
        encode_record(5, 7, meta.index, &meta, b"body", &mut out);
        let r = frames(&out);
        assert_eq!(r.records.len(), 1);
        let p = placed(r.records[0].1).unwrap().unwrap();
        assert_eq!(
            (p.seq, &p.meta, &r.records[0].1[p.body_at..]),
            (7, &meta, &b"body"[..])
        );
        assert_eq!(
            u32::from_le_bytes(out[FRAME_LEN + 40..FRAME_LEN + 44].try_into().unwrap()),
            4
        );
    }

    #[test]
    fn block_table_never_panics_on_short_or_bad_records() {
        let (meta, _) = block(1, b"x");
        let good = record(4, 1, &meta);
        for cut in 0..good.len() {
            // A record whose length and crc hold but whose block part is cut anywhere.
            let p = &good[FRAME_LEN..FRAME_LEN + cut.min(good.len() - FRAME_LEN)];
            let _ = placed(p);
            let _ = block_table(&good[..cut], 1);
        }
        assert_eq!(block_table(&good, 1).len(), 1);
    }
}
