//! Retention: the store as a ring on disk. The writer thread keeps the sealed segments,
//! oldest first, and the bytes the store holds; before a block is written, the oldest
//! sealed segments (and their derived data) are deleted until the store is within its
//! budgets (crate::budget): under the byte budget, with the floor of free space left on its
//! file system, and holding no segment whose last packet is older than the age budget
//! (packet time, measured back from the newest packet written). The state comes from the
//! directory at open, never only from memory. A segment counts at its current size: a
//! compaction that shrinks it shrinks the total ([`Retention::resized`]).
//!
//! Deletion goes by whole segments, so it runs once per segment's worth of data, not on
//! every block: a deleted segment frees its size, and the next deletion is due only when
//! that much more was written. Free space is read (statvfs) at most once a second and
//! estimated in between from the bytes written and deleted, so the floor costs no system
//! call per block. A segment a reader still holds open frees its space only when the
//! reader closes it; until the next reading the estimate counts it as freed.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::DeletedSegment;
use crate::budget::{self, FreeSpace};
use crate::error::Result;
use crate::indexer::Indexer;
use crate::segment::{self, SealedSegment, SegmentReader, SegmentState};
use crate::store::SegmentEntry;

/// A sealed segment retention may delete, with the time of its last packet (`None`: it
/// could not be read to know).
#[derive(Debug)]
struct Held {
    entry: SegmentEntry,
    last_ns: Option<u64>,
}

/// The floor of free space, and what was last read of the file system.
#[derive(Debug)]
struct FreeFloor {
    floor: FreeSpace,
    fs_bytes: u64,
    avail: u64,
    read_at: Option<Instant>,
    /// Bytes written since the last reading (deletions are added back to `avail`).
    written: u64,
}

/// Why a segment was deleted, for the log.
#[derive(Debug, Clone, Copy)]
enum Why {
    Bytes,
    Free,
    Age,
}

/// What retention knows of the store.
#[derive(Debug)]
pub(super) struct Retention {
    dir: PathBuf,
    /// Sealed segments, oldest first.
    sealed: VecDeque<Held>,
    /// Bytes on disk: sealed segments and the open one.
    total: u64,
    /// The byte budget, if any.
    max: Option<u64>,
    free: Option<FreeFloor>,
    max_age: Option<Duration>,
    /// The newest packet time written or held.
    newest_ns: u64,
    /// Room kept beside the budgets for what the writer's own threads write outside them:
    /// the compactor's temporary copy of a segment ([`Retention::reserve`]).
    reserve: u64,
    /// With a tier: the segments the ledger records as uploaded, and when it was read.
    tier: Option<TierGate>,
}

/// What retention knows of the uploads: only these segments may leave the disk.
#[derive(Debug, Default)]
struct TierGate {
    tiered: std::collections::HashSet<u64>,
    read_at: Option<Instant>,
    /// Bytes over the budgets that wait for their upload, last logged.
    warned_at: Option<Instant>,
}

impl Retention {
    /// A tier is configured: only uploaded segments are removed, by trimming their local
    /// file ([`crate::ledger::record_trimmed`]).
    pub(super) fn tier_only(&mut self) {
        self.tier = Some(TierGate::default());
    }

    /// The position in `sealed` of the oldest segment whose upload is confirmed, reading the
    /// ledger again when it was read more than 100 ms ago and none is known.
    fn oldest_tiered(&mut self) -> Option<usize> {
        let dir = self.dir.clone();
        let gate = self.tier.as_mut()?;
        let find = |g: &TierGate, sealed: &VecDeque<Held>| {
            sealed.iter().position(|h| g.tiered.contains(&h.entry.seq))
        };
        if let Some(i) = find(gate, &self.sealed) {
            return Some(i);
        }
        if gate
            .read_at
            .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return None;
        }
        gate.read_at = Some(Instant::now());
        match crate::ledger::read(&dir) {
            Ok(Some(l)) => gate.tiered = l.tiered.keys().copied().collect(),
            Ok(None) => {}
            Err(e) => tracing::warn!("tier: cannot read the ledger: {}", crate::error::chain(&e)),
        }
        let found = find(gate, &self.sealed);
        if found.is_none()
            && gate
                .warned_at
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
        {
            gate.warned_at = Some(Instant::now());
            tracing::warn!(
                bytes = self.total,
                "retention: over the local budgets, but no segment's upload is confirmed yet: \
                 nothing is deleted until the uploads catch up (see the backlog in `capsule status`)"
            );
        }
        found
    }

    /// With a tier: removes the local file of the oldest uploaded segment (the ledger says
    /// `trimmed` first), keeping its index as the local copy. `None`: none is uploaded.
    fn trim_oldest_tiered(&mut self) -> Result<Option<DeletedSegment>> {
        let Some(i) = self.oldest_tiered() else {
            return Ok(None);
        };
        let held = self.sealed.remove(i).expect("position found above");
        crate::ledger::record_trimmed(&self.dir, held.entry.seq)?;
        match crate::fsx::remove(&held.entry.path, "trim tiered segment") {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                self.sealed.insert(i, held);
                return Err(e);
            }
        }
        let seg = held.entry;
        if let Some(f) = self.free.as_mut() {
            f.avail += seg.bytes;
        }
        if let Some(g) = self.tier.as_mut() {
            g.tiered.remove(&seg.seq);
        }
        self.total = self.total.saturating_sub(seg.bytes);
        Ok(Some(DeletedSegment {
            seq: seg.seq,
            bytes: seg.bytes,
        }))
    }

    /// Retention over the sealed segments `sealed` (oldest first) of segment directory `dir`,
    /// with the budgets of `b`. The age of each segment is read from its footer when an age
    /// budget is set.
    pub(super) fn new(dir: &Path, sealed: Vec<SegmentEntry>, b: &budget::Budgets) -> Self {
        let total = sealed.iter().map(|e| e.bytes).sum();
        let sealed: VecDeque<Held> = sealed
            .into_iter()
            .map(|entry| {
                let last_ns = b
                    .max_age
                    .and_then(|_| SegmentReader::open(&entry.path).ok())
                    .and_then(|r| {
                        r.blocks()
                            .iter()
                            .filter(|b| b.packets > 0)
                            .map(|b| b.last_ns)
                            .max()
                    });
                Held { entry, last_ns }
            })
            .collect();
        let newest_ns = sealed.iter().filter_map(|h| h.last_ns).max().unwrap_or(0);
        Retention {
            dir: dir.to_path_buf(),
            sealed,
            total,
            max: b.max_bytes,
            free: b.min_free.map(|floor| FreeFloor {
                floor,
                fs_bytes: 0,
                avail: 0,
                read_at: None,
                written: 0,
            }),
            max_age: b.max_age,
            newest_ns,
            reserve: 0,
            tier: None,
        }
    }

    /// Replaces the budgets (a reload while running). Segments whose last packet time was
    /// not read (no age budget until now) get it read from their footers.
    pub(super) fn set_budgets(&mut self, b: &budget::Budgets) {
        self.max = b.max_bytes;
        let same_floor = self.free.as_ref().map(|f| f.floor) == b.min_free;
        if !same_floor {
            self.free = b.min_free.map(|floor| FreeFloor {
                floor,
                fs_bytes: 0,
                avail: 0,
                read_at: None,
                written: 0,
            });
        }
        self.max_age = b.max_age;
        if self.max_age.is_some() {
            for h in self.sealed.iter_mut().filter(|h| h.last_ns.is_none()) {
                h.last_ns = SegmentReader::open(&h.entry.path).ok().and_then(|r| {
                    r.blocks()
                        .iter()
                        .filter(|b| b.packets > 0)
                        .map(|b| b.last_ns)
                        .max()
                });
                if let Some(t) = h.last_ns {
                    self.newest_ns = self.newest_ns.max(t);
                }
            }
        }
    }

    /// The sealed segments, oldest first.
    pub(super) fn sealed(&self) -> impl Iterator<Item = &SegmentEntry> {
        self.sealed.iter().map(|h| &h.entry)
    }

    /// A packet of time `ns` was written: the age budget counts back from the newest.
    pub(super) fn saw(&mut self, ns: u64) {
        self.newest_ns = self.newest_ns.max(ns);
    }

    /// Bytes the store holds.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// The open segment grew (or was created) by `bytes`.
    pub(super) fn grew(&mut self, bytes: u64) {
        self.total += bytes;
        if let Some(f) = self.free.as_mut() {
            f.written += bytes;
        }
    }

    /// Segment `s` was sealed (by the writer thread, or by recovery at open): it is now the
    /// newest deletion candidate.
    pub(super) fn sealed_one(&mut self, s: &SealedSegment) {
        let entry = SegmentEntry {
            seq: s.seq,
            state: SegmentState::Sealed,
            path: s.path.clone(),
            bytes: s.bytes,
        };
        let last_ns = (s.packets > 0).then_some(s.last_ns);
        if let Some(t) = last_ns {
            self.saw(t);
        }
        self.sealed.push_back(Held { entry, last_ns });
    }

    /// Whether sealed segment `seq` is still kept (not deleted by retention or for space).
    pub(super) fn holds(&self, seq: u64) -> bool {
        self.sealed.iter().any(|h| h.entry.seq == seq)
    }

    /// Sealed segment `seq` was compacted: it is now `bytes` long, and the total follows.
    pub(super) fn resized(&mut self, seq: u64, bytes: u64) {
        if let Some(h) = self.sealed.iter_mut().find(|h| h.entry.seq == seq) {
            self.total = (self.total + bytes).saturating_sub(h.entry.bytes);
            if let Some(f) = self.free.as_mut() {
                f.avail = (f.avail + h.entry.bytes).saturating_sub(bytes);
            }
            h.entry.bytes = bytes;
        }
    }

    /// The open segment gave up `bytes` it had counted (a write that failed on a full disk).
    pub(super) fn shrank(&mut self, bytes: u64) {
        self.total = self.total.saturating_sub(bytes);
        if let Some(f) = self.free.as_mut() {
            f.written = f.written.saturating_sub(bytes);
        }
    }

    /// The disk is full: deletes the oldest sealed segment (and its derived data) whatever
    /// the budget, and syncs the directory. `None`: there is no sealed segment left.
    pub(super) fn evict_for_space(
        &mut self,
        indexer: &mut dyn Indexer,
    ) -> Result<Option<DeletedSegment>> {
        let Some(seg) = self.delete_oldest(indexer)? else {
            return Ok(None);
        };
        tracing::warn!(
            seq = seg.seq,
            bytes = seg.bytes,
            "disk full: deleted the oldest segment to make room"
        );
        segment::sync_dir(&self.dir)?;
        Ok(Some(seg))
    }

    /// Deletes the oldest sealed segment's file and tells `indexer`; an indexer error is
    /// logged, not returned (derived data is rebuilt by the next writer or `capsule reindex`).
    fn delete_oldest(&mut self, indexer: &mut dyn Indexer) -> Result<Option<DeletedSegment>> {
        if self.tier.is_some() {
            return self.trim_oldest_tiered();
        }
        let Some(held) = self.sealed.pop_front() else {
            return Ok(None);
        };
        // The ledger first: a reader never sees the file gone and the segment still
        // recorded. On a full disk the line may not fit until the file is gone: then after.
        let recorded = crate::ledger::record_deleted(&self.dir, held.entry.seq);
        match crate::fsx::remove(&held.entry.path, "delete old segment") {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                self.sealed.push_front(held);
                return Err(e);
            }
        }
        if recorded.is_err() {
            if let Err(e) = crate::ledger::record_deleted(&self.dir, held.entry.seq) {
                tracing::warn!(
                    seq = held.entry.seq,
                    "cannot record the deletion in the ledger (readers will name the \
                     segment missing): {}",
                    crate::error::chain(&e)
                );
            }
        }
        let seg = held.entry;
        if let Some(f) = self.free.as_mut() {
            f.avail += seg.bytes;
        }
        if let Err(e) = indexer.deleted(seg.seq) {
            tracing::warn!(
                seq = seg.seq,
                "cannot delete the segment's index: {}",
                crate::error::chain(&e)
            );
        }
        self.total = self.total.saturating_sub(seg.bytes);
        Ok(Some(DeletedSegment {
            seq: seg.seq,
            bytes: seg.bytes,
        }))
    }

    /// Deletes the oldest sealed segments until the store is within its budgets with `need`
    /// more bytes written, telling `indexer` of each.
    pub(super) fn make_room(
        &mut self,
        indexer: &mut dyn Indexer,
        need: u64,
    ) -> Result<Vec<DeletedSegment>> {
        let mut deleted = Vec::new();
        while let Some(why) = self.over_budget(need) {
            let Some(seg) = self.delete_oldest(indexer)? else {
                break;
            };
            let what = match why {
                Why::Bytes => "to stay under the byte budget",
                Why::Free => "to keep the floor of free space on the disk",
                Why::Age => "older than the age budget",
            };
            tracing::info!(
                seq = seg.seq,
                bytes = seg.bytes,
                "retention: deleted the oldest segment {what}"
            );
            deleted.push(seg);
        }
        if !deleted.is_empty() {
            segment::sync_dir(&self.dir)?;
        }
        Ok(deleted)
    }

    /// Keeps `bytes` of room beside the budgets: the compactor writes a segment's new copy
    /// before the old one goes, bytes retention does not see written.
    pub(super) fn reserve(&mut self, bytes: u64) {
        self.reserve = bytes;
    }

    /// The most the store can hold under its free-space floor: its bytes now plus the free
    /// space above the floor, read now (`None` without a floor, or when the file system
    /// cannot be read).
    pub(super) fn room_above_floor(&self) -> Option<u64> {
        let f = self.free.as_ref()?;
        let (size, avail) = budget::disk_space(&self.dir).ok()?;
        Some(
            self.total
                .saturating_add(avail)
                .saturating_sub(f.floor.bytes(size)),
        )
    }

    /// Which budget writing `need` more bytes would break, if any and if a sealed segment
    /// is left to delete.
    fn over_budget(&mut self, need: u64) -> Option<Why> {
        let front = self.sealed.front()?;
        let need = need.saturating_add(self.reserve);
        if self.max.is_some_and(|max| self.total + need > max) {
            return Some(Why::Bytes);
        }
        if let Some(age) = self.max_age {
            let cutoff = self
                .newest_ns
                .saturating_sub(u64::try_from(age.as_nanos()).unwrap_or(u64::MAX));
            // A segment whose age is unknown goes when the one after it is too old.
            let last = front
                .last_ns
                .or_else(|| self.sealed.get(1).and_then(|h| h.last_ns));
            if last.is_some_and(|t| t < cutoff) {
                return Some(Why::Age);
            }
        }
        // Called before every block: borrow the directory beside the floor, no copy.
        let Retention { dir, free, .. } = self;
        let f = free.as_mut()?;
        let stale = f
            .read_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        if stale {
            match budget::disk_space(dir) {
                Ok((size, avail)) => {
                    f.fs_bytes = size;
                    f.avail = avail;
                    f.written = 0;
                }
                Err(e) => tracing::debug!("{}", crate::error::chain(&e)),
            }
            f.read_at = Some(Instant::now());
        }
        let free = f.avail.saturating_sub(f.written);
        (free < f.floor.bytes(f.fs_bytes).saturating_add(need)).then_some(Why::Free)
    }
}
