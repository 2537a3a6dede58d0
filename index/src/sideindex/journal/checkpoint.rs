//! The open segment's fold checkpoint: `STORE/index/seg-N.fold`, the segment's index folded
//! over its first blocks, so that a reader folds only the journal records after them.
//!
//! ```text
//! writer thread (SideIndexer), once the blocks it covers are in the file: when
//!   CHECKPOINT_BLOCKS blocks are not covered yet, or the writer has had no block for
//!   QUIET; never sooner than MIN_INTERVAL (nor 50 times the last write's time) after the
//!   last one -> the builder's records so far, encoded as a side index file (zstd level 1),
//!   and each covered block's match (packets, first/last ns, frame crc32c) -> seg-N.fold
//!   (temporary name, renamed over the old one; no fsync: derived data)
//! readers (the parent module's fold): crc32c, magic, version and segment number hold, and
//!   the covered blocks are the file's first blocks -> the journal records of the blocks
//!   after them decoded and folded on top (the ones it covers are not decompressed);
//!   otherwise the journal alone, as if there were no checkpoint
//! seal, recovery, retention, a new writer for the number: removed with the journal
//! ```
//! Byte layout: docs/format.md, "Fold checkpoint".

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capsule_store::format::{BlockMeta, DecodeError};
use capsule_store::{fsx, Result};
use capsule_wire::view::Reader;

use super::super::file::{encode_index, INDEX_VERSION};
use super::super::{IndexBuilder, SegmentIndex};

/// Opens every fold checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"CPSLFOLD";
/// Fold checkpoint format version written (and the only one read) by this build.
pub const CHECKPOINT_VERSION: u16 = 1;
/// Magic, version, flags, covered blocks, segment number.
const HEAD_LEN: usize = 24;
/// One covered block's match: packets u32, first_ns u64, last_ns u64, frame crc32c u32.
const MATCH_LEN: usize = 24;

/// A checkpoint is written once this many blocks are not covered by the last one (and the
/// interval allows), whatever the writer's pace. At the bench's 1 Gbit/s (about 130 blocks
/// a second) the interval is what limits; at a trickle, this is.
pub const CHECKPOINT_BLOCKS: usize = 32;
/// Never two checkpoints closer together than this (nor than 50 times the time the last
/// one took to encode and write).
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// After this long without a block, the blocks not covered yet are checkpointed (traffic
/// stopped, or paused: what readers ask for next is then all covered).
pub const QUIET: Duration = Duration::from_millis(500);
const COST_FACTOR: u32 = 50;

/// Name of segment `seq`'s fold checkpoint.
pub fn checkpoint_name(seq: u64) -> String {
    format!("seg-{seq:012}.fold")
}

/// The sequence number of a fold checkpoint's file name, or of a temporary file written
/// for one (`.seg-N.fold.<16 hex digits>.tmp`), if it is one.
pub fn parse_checkpoint_name(name: &str) -> Option<u64> {
    let base = match name.strip_prefix('.') {
        Some(t) => {
            let base = t.get(..t.find(".fold.")? + 5)?;
            fsx::is_temp_of(name, base).then_some(base)?
        }
        None => name,
    };
    super::seq_of(base, ".fold")
}

/// Removes segment `seq`'s fold checkpoint from `dir`, if there is one.
pub fn remove(dir: &Path, seq: u64) -> Result<()> {
    super::remove_if_there(&dir.join(checkpoint_name(seq)), "remove fold checkpoint")
}

/// Removes the checkpoint file (or temporary file) `name` in `dir`, if it is there.
pub fn remove_file(dir: &Path, name: &str) -> Result<()> {
    super::remove_if_there(&dir.join(name), "remove fold checkpoint")
}

/// What a journal record and a checkpoint match a block of the segment file on: what its
/// header says (packets, first and last packet time, frame crc32c).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockMatch {
    pub packets: u32,
    pub first_ns: u64,
    pub last_ns: u64,
    pub frame_crc: u32,
}

impl BlockMatch {
    pub fn of(meta: &BlockMeta) -> Self {
        BlockMatch {
            packets: meta.packets,
            first_ns: meta.first_ns,
            last_ns: meta.last_ns,
            frame_crc: meta.frame_crc,
        }
    }
}

/// A decoded fold checkpoint: the index of the blocks it covers, and what each of them is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The segment's index over its first `matches.len()` blocks, as the builder had it
    /// (its `segment_len` is 0: the file's length is the reader's).
    pub index: SegmentIndex,
    pub matches: Vec<BlockMatch>,
}

impl Checkpoint {
    /// How many blocks it covers.
    pub fn covered(&self) -> usize {
        self.matches.len()
    }

    /// Whether it describes segment `seq` whose first blocks (as a reader sees them now) are
    /// `blocks`: the number, and every covered block's packets, times and frame crc32c.
    pub fn describes(&self, seq: u64, blocks: &[BlockMeta]) -> bool {
        self.index.seq == seq
            && self.matches.len() <= blocks.len()
            && self
                .matches
                .iter()
                .zip(blocks)
                .all(|(m, b)| *m == BlockMatch::of(b))
    }
}

fn short(e: capsule_wire::view::Short) -> DecodeError {
    DecodeError::Short {
        what: "fold checkpoint",
        expected: e.end(),
        found: e.offset + e.found,
    }
}

fn invalid(detail: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        what: "fold checkpoint",
        detail: detail.into(),
    }
}

/// Encodes the checkpoint of what `b` has built so far, whose blocks are `matches`.
pub fn encode(b: &IndexBuilder, matches: &[BlockMatch]) -> Vec<u8> {
    let (blocks, flows, series) = b.so_far();
    debug_assert_eq!(blocks.len(), matches.len());
    let index = encode_index(b.seq(), 0, blocks, flows, Some(series), INDEX_VERSION, 1);
    let mut out = Vec::with_capacity(HEAD_LEN + matches.len() * MATCH_LEN + index.len() + 4);
    out.extend_from_slice(&CHECKPOINT_MAGIC);
    out.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(matches.len() as u32).to_le_bytes());
    out.extend_from_slice(&b.seq().to_le_bytes());
    for m in matches {
        out.extend_from_slice(&m.packets.to_le_bytes());
        out.extend_from_slice(&m.first_ns.to_le_bytes());
        out.extend_from_slice(&m.last_ns.to_le_bytes());
        out.extend_from_slice(&m.frame_crc.to_le_bytes());
    }
    out.extend_from_slice(&index);
    let crc = capsule_store::crc::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a checkpoint file. Never panics; every failure names what was wrong.
pub fn decode(b: &[u8]) -> std::result::Result<Checkpoint, DecodeError> {
    const W: &str = "fold checkpoint";
    if b.len() < HEAD_LEN + 4 {
        return Err(DecodeError::Short {
            what: W,
            expected: HEAD_LEN + 4,
            found: b.len(),
        });
    }
    let (body, crc) = b.split_at(b.len() - 4);
    let stored = u32::from_le_bytes(crc.try_into().map_err(|_| invalid("no crc32c"))?);
    let computed = capsule_store::crc::crc32c(body);
    if stored != computed {
        return Err(DecodeError::Checksum {
            what: W,
            stored,
            computed,
        });
    }
    if body[..8] != CHECKPOINT_MAGIC {
        return Err(DecodeError::Magic {
            what: W,
            expected: "CPSLFOLD".into(),
            found: format!("{:02x?}", &body[..8]),
        });
    }
    let mut c = Reader::new(body).at(8);
    let version = c.u16_le().map_err(short)?;
    if version != CHECKPOINT_VERSION {
        return Err(DecodeError::Version {
            what: W,
            expected: CHECKPOINT_VERSION,
            found: version,
        });
    }
    c.u16_le().map_err(short)?;
    let n = c.u32_le().map_err(short)? as usize;
    let seq = c.u64_le().map_err(short)?;
    if n > (body.len() - HEAD_LEN) / MATCH_LEN {
        return Err(invalid(format!(
            "{n} covered blocks do not fit in {} bytes",
            body.len()
        )));
    }
    let mut matches = Vec::with_capacity(n);
    for _ in 0..n {
        matches.push(BlockMatch {
            packets: c.u32_le().map_err(short)?,
            first_ns: c.u64_le().map_err(short)?,
            last_ns: c.u64_le().map_err(short)?,
            frame_crc: c.u32_le().map_err(short)?,
        });
    }
    let index = SegmentIndex::decode(&body[c.position()..])?;
    if index.seq != seq || index.blocks.len() != n {
        return Err(invalid(format!(
            "its index is of segment {} with {} blocks, the checkpoint says segment {seq} \
             with {n}",
            index.seq,
            index.blocks.len()
        )));
    }
    Ok(Checkpoint { index, matches })
}

/// Segment `seq`'s checkpoint in `dir`, if there is one that decodes. A missing, torn or
/// damaged one is no checkpoint (the journal alone is folded): it is derived data, written
/// without fsync, and replaced within seconds while its segment is written.
pub fn load(dir: &Path, seq: u64) -> Option<Checkpoint> {
    let bytes = fsx::read(&dir.join(checkpoint_name(seq)), "read fold checkpoint").ok()?;
    decode(&bytes).ok().filter(|c| c.index.seq == seq)
}

/// Writes the open segment's checkpoints, as the writer thread indexes its blocks.
#[derive(Debug)]
pub struct Checkpointer {
    path: PathBuf,
    /// Every block indexed so far.
    matches: Vec<BlockMatch>,
    /// Blocks the last checkpoint written covers.
    covered: usize,
    last_write: Instant,
    last_cost: Duration,
    last_block: Instant,
    /// Checkpoints written, and the time they took (encoding and writing).
    pub written: u64,
    pub spent: Duration,
}

impl Checkpointer {
    /// Starts the checkpoints of segment `seq` in `dir`; one left there for that number
    /// (by an earlier writer: it describes another file) is removed first.
    pub fn create(dir: &Path, seq: u64) -> Result<Self> {
        remove(dir, seq)?;
        let now = Instant::now();
        Ok(Checkpointer {
            path: dir.join(checkpoint_name(seq)),
            matches: Vec::new(),
            covered: 0,
            last_write: now,
            last_cost: Duration::ZERO,
            last_block: now,
            written: 0,
            spent: Duration::ZERO,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Block `meta` was indexed (and journaled).
    pub fn block(&mut self, meta: &BlockMeta) {
        self.matches.push(BlockMatch::of(meta));
        self.last_block = Instant::now();
    }

    /// How long from `now` until a checkpoint is due (zero: it is); `None` when every block
    /// is covered.
    pub fn due_in(&self, now: Instant) -> Option<Duration> {
        let behind = self.matches.len() - self.covered;
        if behind == 0 {
            return None;
        }
        let interval = MIN_INTERVAL.max(self.last_cost * COST_FACTOR);
        let spaced = (self.last_write + interval).saturating_duration_since(now);
        if behind >= CHECKPOINT_BLOCKS {
            return Some(spaced);
        }
        Some(spaced.max((self.last_block + QUIET).saturating_duration_since(now)))
    }

    /// Writes the checkpoint of every block `b` has indexed (temporary name, renamed over
    /// the old one, no fsync).
    pub fn write(&mut self, b: &IndexBuilder) -> Result<()> {
        let t0 = Instant::now();
        let bytes = encode(b, &self.matches);
        // The time is spent whether or not the write succeeds: the next one waits as long.
        let written = fsx::replace(&self.path, &bytes);
        self.last_write = Instant::now();
        self.last_cost = t0.elapsed();
        self.spent += self.last_cost;
        written?;
        self.covered = self.matches.len();
        self.written += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_temporary_names_are_recognised() {
        assert_eq!(checkpoint_name(7), "seg-000000000007.fold");
        assert_eq!(parse_checkpoint_name("seg-000000000007.fold"), Some(7));
        assert_eq!(
            parse_checkpoint_name(".seg-000000000007.fold.0123456789abcdef.tmp"),
            Some(7)
        );
        for bad in [
            "seg-7.fold",
            "seg-000000000007.journal",
            ".seg-000000000007.fold.tmp",
            ".seg-000000000007.fold.0123456789abcdeg.tmp",
            "seg-000000000007.fold.0123456789abcdef.tmp",
            ".",
            "",
        ] {
            assert_eq!(parse_checkpoint_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_checkpoint_is_due_after_enough_blocks_or_a_quiet_spell_never_too_often() {
        let d = tempfile::tempdir().unwrap();
        let mut c = Checkpointer::create(d.path(), 3).unwrap();
        let t = c.last_write;
        assert_eq!(c.due_in(t), None, "nothing to cover");
        c.block(&BlockMeta::default());
        c.last_block = t;
        // One block: due after the interval and a quiet spell, whichever ends last.
        assert_eq!(c.due_in(t), Some(MIN_INTERVAL));
        assert_eq!(c.due_in(t + MIN_INTERVAL), Some(Duration::ZERO));
        c.last_write = t - MIN_INTERVAL;
        assert_eq!(c.due_in(t), Some(QUIET));
        // Enough blocks: the interval alone.
        for _ in 1..CHECKPOINT_BLOCKS {
            c.block(&BlockMeta::default());
        }
        c.last_block = t;
        assert_eq!(c.due_in(t), Some(Duration::ZERO));
        c.last_write = t;
        assert_eq!(c.due_in(t), Some(MIN_INTERVAL));
        // A slow write spaces the next ones out.
        c.last_cost = Duration::from_millis(100);
        assert_eq!(c.due_in(t), Some(Duration::from_secs(5)));
    }
}
