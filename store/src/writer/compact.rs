//! Compaction: a sealed segment's blocks written below a target level (stored, or at a
//! cheaper zstd level, because live capture stepped down its ladder to keep up) recompressed
//! at that level, in a new file that replaces the old one by a rename.
//!
//! ```text
//! prepare(segment, target)                                     (any thread, no lock held)
//!   SegmentReader (footer) + scan (block headers, for each block's new interfaces)
//!   -> the head and segment header frames copied verbatim
//!   -> per block: a pending block's frame (crc checked) decompressed, compressed at the
//!      target with a content checksum, decompressed again and compared; any other frame
//!      copied verbatim; a new block header (same index, times, counts, interfaces; new
//!      length, crc, compression)
//!   -> a new footer -> hidden temporary file `.seg-N.pcapng.zst.<16 hex>.tmp`
//!      (created exclusively), fsynced                          => Prepared
//! commit(prepared)                                             (the writer thread)
//!   -> still the file it was read from? rename over seg-N.pcapng.zst, fsync the directory
//!   -> the caller updates retention's size and the side index (Indexer::compacted)
//! ```
//!
//! Block boundaries, indexes, timestamps, packet counts and interfaces do not change, so the
//! side index stays right but for the segment length it records. A crash leaves either the
//! old file or the new one under the sealed name (rename is atomic), plus perhaps a temporary
//! file that the next writer removes ([`remove_leftovers`], under the writer lock); a side
//! index that still names the old length is stale and rebuilt at the next open.
//!
//! Which blocks are pending ([`is_pending`]): those that record a compression below the
//! target (stored, or a zstd level under the target's), and those of segments written
//! before blocks recorded their compression ("not recorded") whose frame is laid out exactly
//! as a stored frame of their length (a raw frame: that layout is what `--level store` and
//! the ladder's last rung write). Other unrecorded blocks were compressed, at a level that
//! cannot be known, and are left alone.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Level;
use crate::error::{BlockProblem, Result, StoreError};
use crate::format::{self, BlockMeta, Compression, Footer};
use crate::fsx;
use crate::segment::{self, scan, SealedSegment, SegmentReader, SegmentState};

/// Whether block `b` is written below `target` and would be recompressed (module docs).
pub fn is_pending(b: &BlockMeta, target: Level) -> bool {
    let Level::Zstd(t) = target else {
        return false; // nothing is below `store`
    };
    match b.compression {
        Compression::Stored => true,
        Compression::Zstd(l) => l < t,
        Compression::NotRecorded => {
            b.compressed_len as usize == format::raw_frame_len(b.uncompressed_len as usize)
        }
        Compression::Unknown(_) => false,
    }
}

/// Bytes (compressed lengths) of the blocks of `blocks` that are pending for `target`.
pub fn pending_bytes(blocks: &[BlockMeta], target: Level) -> u64 {
    blocks
        .iter()
        .filter(|b| is_pending(b, target))
        .map(|b| u64::from(b.compressed_len))
        .sum()
}

/// The age tier: sealed segments whose newest packet is more than `age` older than the
/// store's newest packet are recompressed at `level`, a higher level than live capture's.
///
/// Age is packet time, back from the newest packet of the store's sealed segments, as
/// retention's `--max-age` counts it: a store whose capture stopped, or an imported trace,
/// keeps its last `age` of traffic at the fast level rather than having all of it
/// recompressed because the wall clock moved on (docs/decisions.md, "The age tier").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgeTier {
    pub age: Duration,
    pub level: Level,
}

/// What a compaction brings each sealed segment to: every segment to `base`, and those the
/// age tier holds old to the tier's level (or `base`, if that is higher).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    /// The level for every sealed segment (`None`: only the tier's old segments).
    pub base: Option<Level>,
    pub tier: Option<AgeTier>,
}

/// Of two levels, the one that compresses more (`store` is the lowest).
pub fn costlier(a: Level, b: Level) -> Level {
    match (a, b) {
        (Level::Store, x) | (x, Level::Store) => x,
        (Level::Zstd(a), Level::Zstd(b)) => Level::Zstd(a.max(b)),
    }
}

impl Plan {
    /// Every sealed segment to `level` (`capsule compact --level N`).
    pub fn all(level: Level) -> Plan {
        Plan {
            base: Some(level),
            tier: None,
        }
    }

    /// Whether a segment whose newest packet is at `last_ns` is old for the tier, the
    /// store's newest packet being at `newest_ns`: more than the tier's age before it.
    pub fn is_old(&self, last_ns: u64, newest_ns: u64) -> bool {
        self.tier.is_some_and(|t| {
            let age = u64::try_from(t.age.as_nanos()).unwrap_or(u64::MAX);
            newest_ns.saturating_sub(last_ns) > age
        })
    }

    /// The level such a segment is brought to, `None` when it is left alone.
    pub fn target(&self, last_ns: u64, newest_ns: u64) -> Option<Level> {
        match (self.base, self.tier) {
            (b, Some(t)) if self.is_old(last_ns, newest_ns) => {
                Some(b.map_or(t.level, |b| costlier(b, t.level)))
            }
            (b, _) => b,
        }
    }

    /// The tier's level as applied to old segments (`None`: no tier).
    pub fn tier_level(&self) -> Option<Level> {
        let t = self.tier?;
        Some(self.base.map_or(t.level, |b| costlier(b, t.level)))
    }

    /// Whether the plan has any valid level to bring a segment to.
    pub fn is_valid(&self) -> bool {
        self.base.is_none_or(|b| b.is_valid()) && self.tier.is_none_or(|t| t.level.is_valid())
    }
}

/// A compacted segment written to its temporary file, synced, not yet in place.
#[derive(Debug)]
pub struct Prepared {
    pub seq: u64,
    /// The sealed segment it replaces.
    pub path: PathBuf,
    /// The temporary file holding the new segment.
    pub tmp: PathBuf,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Blocks recompressed, of `blocks`.
    pub recompressed: usize,
    pub blocks: usize,
    /// Compressed bytes of the blocks recompressed, before and after.
    pub pending_before: u64,
    pub pending_after: u64,
    pub packets: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Identity (device, inode) of the file it was read from: [`commit`] replaces only that.
    ino: (u64, u64),
    /// Time spent, pauses excluded.
    pub busy: Duration,
}

impl Prepared {
    /// The segment as it is once committed.
    pub fn sealed(&self) -> SealedSegment {
        SealedSegment {
            seq: self.seq,
            path: self.path.clone(),
            bytes: self.bytes_after,
            packets: self.packets,
            blocks: self.blocks,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
        }
    }
}

/// What [`prepare`] made of a segment.
#[derive(Debug)]
pub enum Outcome {
    /// Its new version waits in a temporary file for [`commit`].
    Prepared(Prepared),
    /// No block is pending.
    Nothing,
    /// It cannot be compacted safely as it is (damage, or not a sealed segment): why. It is
    /// left untouched (`capsule verify` names the damage; `--repair` rebuilds it).
    Skipped(String),
    /// The caller's control asked to stop; the temporary file was removed.
    Stopped,
    /// The segment left its path while the compaction waited (retention deleted it); the
    /// temporary file was removed and the segment's file closed.
    Vanished,
}

/// What a [`Control`] says between blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proceed {
    /// Go on with the next block.
    Go,
    /// Stop compacting (the caller is shutting down).
    Stop,
    /// Leave this segment: it was deleted (or replaced) while the control waited.
    Abandon,
}

/// Asked between blocks: go on (after any pause the caller wants), stop, or abandon the
/// segment.
pub trait Control {
    /// May sleep (a pause); the time it takes is not counted as busy. `gone` says whether the
    /// segment being compacted has left its path since it was opened (retention deleted it):
    /// a control that pauses asks it while it waits and answers [`Proceed::Abandon`], so that
    /// the compaction's open file does not hold a deleted segment's bytes on the disk for as
    /// long as capture keeps it paused.
    fn proceed(&mut self, gone: &mut dyn FnMut() -> bool) -> Proceed;
}

/// Never pauses, never stops (offline compaction).
#[derive(Debug, Default, Clone, Copy)]
pub struct Unpaused;

impl Control for Unpaused {
    fn proceed(&mut self, _: &mut dyn FnMut() -> bool) -> Proceed {
        Proceed::Go
    }
}

/// The seam a test uses to kill a compaction at a chosen point: with
/// `CAPSULE_COMPACT_PAUSE_AT=STEP:MS`, the compaction sleeps MS milliseconds when it reaches
/// STEP (`written`: the temporary file written and synced; `renamed`: the rename done, the
/// directory not yet synced, the index not updated; `block`: after each block). Unset, it
/// costs a lookup per step.
fn seam(step: &str) {
    let Ok(v) = std::env::var("CAPSULE_COMPACT_PAUSE_AT") else {
        return;
    };
    if let Some((at, ms)) = v.split_once(':') {
        if at == step {
            if let Ok(ms) = ms.parse::<u64>() {
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
    }
}

fn file_id(path: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).map_err(|e| StoreError::io("stat", path, e))?;
    Ok((m.dev(), m.ino()))
}

/// Writes the compacted version of sealed segment `path` (blocks pending for `target`
/// recompressed, the rest copied) to a temporary file beside it and syncs it. `ctl` is asked
/// before each block.
pub fn prepare(path: &Path, target: Level, ctl: &mut dyn Control) -> Result<Outcome> {
    let t0 = Instant::now();
    let mut paused = Duration::ZERO;
    let reader = SegmentReader::open(path)?;
    if reader.state() != SegmentState::Sealed {
        return Ok(Outcome::Skipped("not a sealed segment".into()));
    }
    if let Some(why) = reader.footer_problem() {
        return Ok(Outcome::Skipped(format!("its footer is damaged: {why}")));
    }
    let Level::Zstd(level) = target else {
        return Ok(Outcome::Nothing);
    };
    let pending_before = pending_bytes(reader.blocks(), target);
    if pending_before == 0 {
        return Ok(Outcome::Nothing);
    }
    let ino = file_id(path)?;
    // The block headers, for the interfaces each block adds (the footer keeps only the
    // segment's whole list); they must describe exactly the footer's blocks.
    let file = fsx::open(path, fsx::Open::Read, "open segment")?;
    let s = scan(path, &file, false)?;
    let same = s.blocks.len() == reader.blocks().len()
        && s.blocks.iter().zip(reader.blocks()).all(|(a, b)| {
            (a.frame_offset, a.compressed_len, a.frame_crc, a.packets)
                == (b.frame_offset, b.compressed_len, b.frame_crc, b.packets)
        });
    if !same || !s.damaged.is_empty() || s.problem.is_some() {
        return Ok(Outcome::Skipped(
            "its block headers do not match its footer (`capsule verify` says more)".into(),
        ));
    }
    let Some(first) = s.blocks.first() else {
        return Ok(Outcome::Nothing);
    };
    let head_len = first.frame_offset - first.header_frame_len() as u64;
    let head = {
        use std::os::unix::fs::FileExt;
        let mut h = vec![0u8; head_len as usize];
        file.read_exact_at(&mut h, 0)
            .map_err(|e| StoreError::io("read segment", path, e))?;
        h
    };

    let (tmp_file, tmp) = fsx::create_temp(path)?;
    let mut gone = || file_id(path).map_or(true, |id| id != ino);
    let written = (|| -> Result<std::result::Result<(u64, Footer, usize, u64), Proceed>> {
        let mut out = BufWriter::with_capacity(1 << 20, tmp_file);
        let io = |e| StoreError::io("write compacted segment", &tmp, e);
        out.write_all(&head).map_err(io)?;
        let mut len = head_len;
        let mut zc = zstd::bulk::Compressor::new(level).map_err(io)?;
        zc.include_checksum(true).map_err(io)?;
        let mut dctx = zstd::bulk::Decompressor::new().map_err(io)?;
        let (mut frame, mut data, mut check, mut header) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut footer = Footer {
            interfaces: reader.interfaces().to_vec(),
            ..Footer::default()
        };
        let (mut recompressed, mut pending_after) = (0, 0u64);
        for (i, old) in s.blocks.iter().enumerate() {
            let p0 = Instant::now();
            match ctl.proceed(&mut gone) {
                Proceed::Go => {}
                not => return Ok(Err(not)),
            }
            paused += p0.elapsed();
            let mut meta = old.clone();
            let new_frame: &[u8] = if is_pending(old, target) {
                reader.read_block(i, &mut dctx, &mut frame, &mut data)?;
                let mut z = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
                zc.compress_to_buffer(&data, &mut z).map_err(io)?;
                // The new frame must give back exactly the old content before it is kept.
                check.clear();
                check.reserve(data.len());
                let n = dctx.decompress_to_buffer(&z[..], &mut check).map_err(|e| {
                    StoreError::BadBlock {
                        path: tmp.clone(),
                        block: old.index,
                        offset: len,
                        problem: BlockProblem::Decompress(e),
                    }
                })?;
                if n != data.len() || check != data {
                    return Err(StoreError::BadBlock {
                        path: tmp.clone(),
                        block: old.index,
                        offset: len,
                        problem: BlockProblem::Length {
                            expected: data.len() as u32,
                            found: n,
                        },
                    });
                }
                meta.compressed_len = z.len() as u32;
                meta.frame_crc = crate::crc::crc32c(&z);
                meta.compression = Compression::Zstd(level);
                recompressed += 1;
                pending_after += z.len() as u64;
                frame = z;
                &frame
            } else {
                reader.read_frame(i, &mut frame)?;
                &frame
            };
            header.clear();
            meta.encode_header(&mut header);
            meta.frame_offset = len + header.len() as u64;
            out.write_all(&header).map_err(io)?;
            out.write_all(new_frame).map_err(io)?;
            len = meta.frame_offset + u64::from(meta.compressed_len);
            segment::add_to_footer(&mut footer, &meta);
            seam("block");
        }
        let mut tail = Vec::new();
        footer.encode(&mut tail);
        out.write_all(&tail).map_err(io)?;
        len += tail.len() as u64;
        let f = out.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all()
            .map_err(|e| StoreError::io("fsync compacted segment", &tmp, e))?;
        Ok(Ok((len, footer, recompressed, pending_after)))
    })();
    let (bytes_after, footer, recompressed, pending_after) = match written {
        Ok(Ok(w)) => w,
        Ok(Err(not)) => {
            let _ = fsx::remove(&tmp, "remove compaction's temporary file");
            return Ok(if not == Proceed::Abandon {
                Outcome::Vanished
            } else {
                Outcome::Stopped
            });
        }
        Err(e) => {
            let _ = fsx::remove(&tmp, "remove compaction's temporary file");
            return Err(e);
        }
    };
    seam("written");
    Ok(Outcome::Prepared(Prepared {
        seq: reader.seq(),
        path: path.to_path_buf(),
        tmp,
        bytes_before: reader.bytes(),
        bytes_after,
        recompressed,
        blocks: footer.blocks.len(),
        pending_before,
        pending_after,
        packets: footer.packets,
        first_ns: footer.first_ns,
        last_ns: footer.last_ns,
        ino,
        busy: t0.elapsed().saturating_sub(paused),
    }))
}

/// Puts a prepared segment in place: when `p.path` is still the file it was read from, the
/// temporary file is renamed over it and the directory synced. Returns false (and removes
/// the temporary file) when it is not: the segment was deleted or replaced meanwhile.
pub fn commit(p: &Prepared) -> Result<bool> {
    match file_id(&p.path) {
        Ok(id) if id == p.ino => {}
        Ok(_) => {
            abandon(p);
            return Ok(false);
        }
        Err(e) if e.is_not_found() => {
            abandon(p);
            return Ok(false);
        }
        Err(e) => {
            abandon(p);
            return Err(e);
        }
    }
    if let Err(e) = fsx::rename(&p.tmp, &p.path, "rename compacted segment into place") {
        abandon(p);
        return Err(e);
    }
    seam("renamed");
    let dir = p.path.parent().unwrap_or(Path::new("."));
    fsx::sync_dir(dir)?;
    Ok(true)
}

/// Removes a prepared segment's temporary file (best effort: the next writer removes what
/// is left).
pub fn abandon(p: &Prepared) {
    if let Err(e) = fsx::remove(&p.tmp, "remove compaction's temporary file") {
        if !e.is_not_found() {
            tracing::warn!("{}", crate::error::chain(&e));
        }
    }
}

/// Removes temporary files a compaction left in segment directory `dir` (a crash before
/// its rename). Call under the writer lock: only a lock holder compacts.
pub fn remove_leftovers(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for e in fsx::list(dir)? {
        let name = e.name.to_string_lossy();
        let Some(rest) = name.strip_prefix('.') else {
            continue;
        };
        let Some(of) = rest.get(..segment::sealed_name(0).len()) else {
            continue;
        };
        if segment::parse_name(of).is_some_and(|(_, st)| st == SegmentState::Sealed)
            && fsx::is_temp_of(&name, of)
            && e.kind == fsx::Kind::File
        {
            fsx::remove(&e.path, "remove compaction's leftover temporary file")?;
            removed.push(e.path);
        }
    }
    if !removed.is_empty() {
        fsx::sync_dir(dir)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(compression: Compression, compressed_len: u32, uncompressed_len: u32) -> BlockMeta {
        BlockMeta {
            packets: 3,
            compressed_len,
            uncompressed_len,
            compression,
            ..BlockMeta::default()
        }
    }

    #[test]
    fn pending_blocks_are_those_below_the_target_and_unrecorded_ones_laid_out_as_stored() {
        let t = Level::Zstd(3);
        let raw = format::raw_frame_len(100_000) as u32;
        assert!(is_pending(&block(Compression::Stored, raw, 100_000), t));
        assert!(is_pending(
            &block(Compression::Zstd(-1000), 90_000, 100_000),
            t
        ));
        assert!(is_pending(&block(Compression::Zstd(1), 50_000, 100_000), t));
        assert!(!is_pending(
            &block(Compression::Zstd(3), 40_000, 100_000),
            t
        ));
        assert!(!is_pending(
            &block(Compression::Zstd(19), 30_000, 100_000),
            t
        ));
        // Not recorded (segments written before the field): only the stored layout counts.
        assert!(is_pending(
            &block(Compression::NotRecorded, raw, 100_000),
            t
        ));
        assert!(!is_pending(
            &block(Compression::NotRecorded, 50_000, 100_000),
            t
        ));
        assert!(!is_pending(
            &block(Compression::NotRecorded, raw + 1, 100_000),
            t
        ));
        assert!(!is_pending(
            &block(Compression::Unknown(9), raw, 100_000),
            t
        ));
        // Nothing is below `store`.
        assert!(!is_pending(
            &block(Compression::Stored, raw, 100_000),
            Level::Store
        ));
        let blocks = [
            block(Compression::Stored, raw, 100_000),
            block(Compression::Zstd(3), 40_000, 100_000),
        ];
        assert_eq!(pending_bytes(&blocks, t), u64::from(raw));
    }

    #[test]
    fn the_age_tier_holds_old_the_segments_more_than_its_age_before_the_newest_packet() {
        let s = 1_000_000_000u64;
        let tier = AgeTier {
            age: Duration::from_secs(3600),
            level: Level::Zstd(9),
        };
        let plan = Plan {
            base: Some(Level::Zstd(1)),
            tier: Some(tier),
        };
        let newest = 10_000 * s;
        // Exactly the age before the newest packet is not older than it.
        assert!(!plan.is_old(newest - 3600 * s, newest));
        assert!(plan.is_old(newest - 3600 * s - 1, newest));
        assert!(!plan.is_old(newest, newest));
        // A segment newer than the store's newest (clock steps) is not old.
        assert!(!plan.is_old(newest + s, newest));
        assert_eq!(plan.target(0, newest), Some(Level::Zstd(9)));
        assert_eq!(plan.target(newest - s, newest), Some(Level::Zstd(1)));
        // Without a base, young segments are left alone.
        let only = Plan { base: None, ..plan };
        assert_eq!(only.target(newest - s, newest), None);
        assert_eq!(only.target(0, newest), Some(Level::Zstd(9)));
        // A tier below the base never lowers a segment; nothing is old without a tier.
        let low = Plan {
            base: Some(Level::Zstd(12)),
            ..plan
        };
        assert_eq!(low.target(0, newest), Some(Level::Zstd(12)));
        assert_eq!(low.tier_level(), Some(Level::Zstd(12)));
        let none = Plan::all(Level::Zstd(3));
        assert!(!none.is_old(0, newest));
        assert_eq!(none.target(0, newest), Some(Level::Zstd(3)));
        assert_eq!(costlier(Level::Store, Level::Zstd(-10)), Level::Zstd(-10));
        assert!(!Plan::all(Level::Zstd(99)).is_valid());
        // A block the tier brought to 9 is not pending at 9 again.
        let b = block(Compression::Zstd(9), 40_000, 100_000);
        assert!(!is_pending(&b, plan.target(0, newest).unwrap()));
    }

    #[test]
    fn leftover_temporary_files_are_recognised_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let seg = dir.path().join(segment::sealed_name(7));
        std::fs::write(&seg, b"x").unwrap();
        let (_, tmp) = fsx::create_temp(&seg).unwrap();
        let keep = [
            ".seg-000000000007.pcapng.zst.open",
            ".seg-000000000007.pcapng.zst.0123.tmp",
            ".capture-status.json.0123456789abcdef.tmp",
        ];
        for k in keep {
            std::fs::write(dir.path().join(k), b"y").unwrap();
        }
        assert_eq!(remove_leftovers(dir.path()).unwrap(), vec![tmp.clone()]);
        assert!(!tmp.exists() && seg.exists());
        for k in keep {
            assert!(dir.path().join(k).exists(), "{k} was removed");
        }
    }
}
