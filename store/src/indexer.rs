//! The seam between the store writer and the data derived from what it writes.
//!
//! The writer thread hands every block it appends to an [`Indexer`], with the block's raw
//! (uncompressed) bytes, before those bytes are dropped, and tells it when a segment is
//! sealed, compacted (recompressed in place: only its length changes) or deleted by
//! retention. At open, after recovery and under the writer lock, the
//! indexer brings its files up to date for every sealed segment. capsule-index implements it
//! with the side index; [`NoIndex`] keeps nothing (tests of the store alone, and tools that
//! only move segments).
//!
//! Everything an indexer writes is derived: it can always be rebuilt from the segments, so
//! an indexer error stops the writer (the caller sees it), but never damages a segment.

use crate::error::Result;
use crate::format::BlockMeta;
use crate::segment::SealedSegment;
use crate::store::{SegmentEntry, Store};

/// Data derived from the segments, kept current by the store writer. Called on the writer
/// thread only, in file order.
pub trait Indexer: Send {
    /// At open, after torn segments were recovered: brings the derived data of every sealed
    /// segment in `sealed` up to date. Returns the sequence numbers whose data was rebuilt.
    fn reconcile(&mut self, store: &Store, sealed: &[SegmentEntry]) -> Result<Vec<u64>>;

    /// Segment `seq` was created; the blocks that follow belong to it.
    fn begin(&mut self, seq: u64);

    /// Whether [`Indexer::block`] should be given a [`Record`] of each record of a block
    /// (the writer's producer then dissects every packet as it stores it). The default: no.
    fn wants_records(&self) -> bool {
        false
    }

    /// A block was appended to the open segment. `meta.new_interfaces` extends the segment's
    /// interface list; `data` is the block's decompressed content, in pieces that each hold
    /// a run of whole pcapng blocks (a stored block built in its frame gives one piece per
    /// raw zstd block, without joining them). `records`, when the indexer wants them and
    /// the producer took them: what each record of `data` holds, in the same order.
    fn block(&mut self, meta: &BlockMeta, data: &[&[u8]], records: Option<&[Record]>);

    /// The open segment was sealed as `sealed`.
    fn sealed(&mut self, sealed: &SealedSegment) -> Result<()>;

    /// Retention deleted segment `seq`.
    fn deleted(&mut self, seq: u64) -> Result<()>;

    /// Sealed segment `compacted.seq` was replaced by its compacted version (same blocks,
    /// recompressed; see [`crate::writer::compact`]): it was `old_bytes` long, it is now
    /// `compacted.bytes`. What depends on its length is brought up to date. The default
    /// does nothing (an indexer that keeps nothing of a segment's length).
    fn compacted(&mut self, compacted: &SealedSegment, old_bytes: u64) -> Result<()> {
        let _ = (compacted, old_bytes);
        Ok(())
    }

    /// Work put off while blocks come (the side index's: the open segment's fold
    /// checkpoint), as the time until it is due (`Some(ZERO)`: now); `None`: none. Once it
    /// is due and every block handed over is in the file, the writer thread calls
    /// [`Indexer::catch_up`], also when no block follows. The default: none.
    fn deferred(&self) -> Option<std::time::Duration> {
        None
    }

    /// Does the work [`Indexer::deferred`] said is due.
    fn catch_up(&mut self) {}
}

/// What the side index reads of one record of a block (a stored packet, or a cut-packet
/// record), taken by the writer's producer as it stores the record, while the packet is
/// still in its cache: the index of a live capture then reads these, one after the other,
/// instead of each record's headers from a block another core wrote (cache misses that were
/// a fifth of a store-rung capture's CPU).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub ts_ns: u64,
    /// The original length the record holds (a cut record's: the packet's, at least its
    /// captured length).
    pub orig_len: u32,
    /// Bytes the record holds of the packet.
    pub caplen: u32,
    /// A cut-packet record (the cut-off kept only the headers).
    pub cut: bool,
    /// The packet's dissection: the same as of the bytes the record holds (a cut record's
    /// headers dissect as the whole packet).
    pub dissected: capsule_wire::Dissected,
}

/// An [`Indexer`] that keeps nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoIndex;

impl Indexer for NoIndex {
    fn reconcile(&mut self, _: &Store, _: &[SegmentEntry]) -> Result<Vec<u64>> {
        Ok(Vec::new())
    }
    fn begin(&mut self, _: u64) {}
    fn block(&mut self, _: &BlockMeta, _: &[&[u8]], _: Option<&[Record]>) {}
    fn sealed(&mut self, _: &SealedSegment) -> Result<()> {
        Ok(())
    }
    fn deleted(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
}
