//! Retention: the store as a ring on disk. The writer thread keeps the sealed segments,
//! oldest first, and the bytes the store holds; before a block is written, the oldest
//! sealed segments (and their derived data) are deleted until it fits under the byte
//! budget. The state comes from the directory at open, never only from memory. A segment
//! counts at its current size: a compaction that shrinks it shrinks the total
//! ([`Retention::resized`]).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use super::DeletedSegment;
use crate::error::Result;
use crate::indexer::Indexer;
use crate::segment;
use crate::store::SegmentEntry;

/// What retention knows of the store.
#[derive(Debug)]
pub(super) struct Retention {
    dir: PathBuf,
    /// Sealed segments, oldest first.
    sealed: VecDeque<SegmentEntry>,
    /// Bytes on disk: sealed segments and the open one.
    total: u64,
    /// The byte budget, if any.
    max: Option<u64>,
}

impl Retention {
    /// Retention over the sealed segments `sealed` (oldest first) of segment directory `dir`.
    pub(super) fn new(dir: &Path, sealed: Vec<SegmentEntry>, max: Option<u64>) -> Self {
        let total = sealed.iter().map(|e| e.bytes).sum();
        Retention {
            dir: dir.to_path_buf(),
            sealed: sealed.into(),
            total,
            max,
        }
    }

    /// The sealed segments, oldest first.
    pub(super) fn sealed(&self) -> impl Iterator<Item = &SegmentEntry> {
        self.sealed.iter()
    }

    /// Bytes the store holds.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// The open segment grew (or was created) by `bytes`.
    pub(super) fn grew(&mut self, bytes: u64) {
        self.total += bytes;
    }

    /// A segment was sealed: it is now the newest deletion candidate.
    pub(super) fn sealed_one(&mut self, entry: SegmentEntry) {
        self.sealed.push_back(entry);
    }

    /// Whether sealed segment `seq` is still kept (not deleted by retention or for space).
    pub(super) fn holds(&self, seq: u64) -> bool {
        self.sealed.iter().any(|e| e.seq == seq)
    }

    /// Sealed segment `seq` was compacted: it is now `bytes` long, and the total follows.
    pub(super) fn resized(&mut self, seq: u64, bytes: u64) {
        if let Some(e) = self.sealed.iter_mut().find(|e| e.seq == seq) {
            self.total = (self.total + bytes).saturating_sub(e.bytes);
            e.bytes = bytes;
        }
    }

    /// The open segment gave up `bytes` it had counted (a write that failed on a full disk).
    pub(super) fn shrank(&mut self, bytes: u64) {
        self.total = self.total.saturating_sub(bytes);
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
        let Some(seg) = self.sealed.pop_front() else {
            return Ok(None);
        };
        match crate::fsx::remove(&seg.path, "delete old segment") {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                self.sealed.push_front(seg);
                return Err(e);
            }
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

    /// Deletes the oldest sealed segments until `need` more bytes fit under the budget (no
    /// budget: nothing is deleted), telling `indexer` of each.
    pub(super) fn make_room(
        &mut self,
        indexer: &mut dyn Indexer,
        need: u64,
    ) -> Result<Vec<DeletedSegment>> {
        let Some(max) = self.max else {
            return Ok(Vec::new());
        };
        let mut deleted = Vec::new();
        while self.total + need > max {
            let Some(seg) = self.delete_oldest(indexer)? else {
                break;
            };
            tracing::info!(
                seq = seg.seq,
                bytes = seg.bytes,
                "retention: deleted the oldest segment to stay under the byte budget"
            );
            deleted.push(seg);
        }
        if !deleted.is_empty() {
            segment::sync_dir(&self.dir)?;
        }
        Ok(deleted)
    }
}
