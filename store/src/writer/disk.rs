//! The writer thread: the only thread that touches the disk. It receives compressed blocks
//! from the compressors (in any order), writes them in block order to the open segment,
//! hands each block to the indexer, seals segments as the producer cut them, fdatasyncs the
//! open segment within `sync_interval` of a write (also when no block follows it), and runs
//! retention before each block. A write that fails for a full disk deletes the oldest sealed
//! segment and is tried again; with none left, the blocks not on disk are dropped and
//! counted, and the next block tries again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::retention::Retention;
use super::{CompactRequest, Compressed, Ratio, SpaceCounters, WriteReport, WriterConfig};
use crate::error::{Result, StoreError};
use crate::format;
use crate::indexer::Indexer;
use crate::segment::{self, SegmentFile};
use crate::store::now_ns;

/// The writer thread: puts compressed blocks in order and appends them to the open
/// segment, seals segments, and runs retention before each block.
pub(super) struct WriterThread {
    pub(super) dir: PathBuf,
    /// Compactions to commit (see compactor.rs): the rename happens here, where retention
    /// deletes, so the two never race.
    pub(super) compact_rx: Receiver<CompactRequest>,
    /// New retention budgets while running ([`super::StoreWriter::set_budgets`]).
    pub(super) budgets_rx: Receiver<crate::budget::Budgets>,
    /// Segments the producer left while the link was idle ([`super::StoreWriter::tick`]).
    pub(super) seal_rx: Receiver<super::SealRequest>,
    pub(super) retention: Retention,
    pub(super) cfg: WriterConfig,
    pub(super) ratio: Arc<Ratio>,
    pub(super) report: WriteReport,
    /// Keeps the derived data (the side index) of what is written.
    pub(super) indexer: Box<dyn Indexer>,
    /// Where block buffers go back to the producer.
    pub(super) pool: Sender<Vec<u8>>,
    /// Where record lists go back to the producer.
    pub(super) records_pool: Sender<Vec<crate::indexer::Record>>,
    /// Where frame buffers go back to the compressors.
    pub(super) frames: Sender<Vec<u8>>,
    /// Whether writing takes most of this thread's time (see [`DiskLoad`]).
    pub(super) disk: DiskLoad,
    /// What a full disk cost, for [`super::PressureGauge`].
    pub(super) space: Arc<SpaceCounters>,
    /// Interfaces whose declaring block was dropped on a full disk, to be declared again in
    /// front of the next block written to segment `redeclare_seq`.
    pub(super) redeclare: Vec<capsule_pcap::Interface>,
    pub(super) redeclare_seq: u64,
    /// Blocks the indexer saw were dropped from the open segment: its index is left to be
    /// rebuilt rather than written wrong.
    pub(super) index_stale: bool,
    /// The heads of a stored block's raw frame (see [`format::raw_frame_heads`]).
    pub(super) heads: Vec<u8>,
    /// Blocks were dropped for a full disk in this segment: each block is written as it
    /// comes rather than gathered (see [`GATHER`]), so that what still fits is kept instead
    /// of failing with a large write and being given up with it.
    pub(super) small_writes: bool,
    /// Buffers of blocks written from where they were built, until the segment's write
    /// queue lets go of them; then back to the producer.
    pub(super) lent: Vec<Arc<Vec<u8>>>,
}

/// Tells the compressors whether the disk is what limits the store: the writer thread spent
/// at least half of the last quarter second (or more, until a block arrives) in write and
/// fsync calls. Then fewer bytes is what helps, and the ladder keeps the configured level.
#[derive(Debug)]
pub(super) struct DiskLoad {
    bound: Arc<AtomicBool>,
    since: Instant,
    busy: Duration,
}

impl DiskLoad {
    pub(super) fn new(bound: Arc<AtomicBool>) -> Self {
        DiskLoad {
            bound,
            since: Instant::now(),
            busy: Duration::ZERO,
        }
    }

    /// Counts `busy` time spent writing, and publishes the verdict every 250 ms.
    fn add(&mut self, busy: Duration) {
        self.busy += busy;
        let window = self.since.elapsed();
        if window >= Duration::from_millis(250) {
            self.bound.store(self.busy * 2 >= window, Ordering::Relaxed);
            self.since = Instant::now();
            self.busy = Duration::ZERO;
        }
    }
}

/// How long a staged block waits for others to be written with it. Fewer, larger direct
/// writes cost the writer thread less per byte (the system call, the file system's block
/// mapping, and above all the virtual disk's doorbell, a VM exit per request): flushing
/// whenever no block waited wrote one 1 MiB block at a time at 250 MB/s, where 50 ms
/// gathers them into 8 MiB writes ([`crate::segment::DIRECT_FLUSH_BYTES`]).
pub(super) const GATHER: Duration = Duration::from_millis(50);

impl WriterThread {
    pub(super) fn run(mut self, rx: Receiver<Compressed>) -> Result<WriteReport> {
        let mut pending: BTreeMap<u64, Compressed> = BTreeMap::new();
        let mut next = 0u64;
        let mut current: Option<SegmentFile> = None;
        let mut last_sync = Instant::now();
        let mut compact_rx = self.compact_rx.clone();
        let mut budgets_rx = self.budgets_rx.clone();
        let mut seal_rx = self.seal_rx.clone();
        let mut seal_after: Option<super::SealRequest> = None;
        let result = (|| -> Result<()> {
            loop {
                // With unsynced writes in the open segment, wait for the next block only
                // until the sync interval is up: a writer gone quiet still syncs what it
                // wrote last, so a power loss takes at most one interval of writes.
                let due = current
                    .as_ref()
                    .filter(|s| s.needs_sync())
                    .map(|_| self.cfg.sync_interval.saturating_sub(last_sync.elapsed()));
                // Staged blocks wait for more to join them until the oldest is GATHER old.
                let gather = current
                    .as_ref()
                    .and_then(|s| s.unflushed_for())
                    .map(|t| GATHER.saturating_sub(t));
                // And until the indexer's deferred work is due, if it has some (not in a
                // spin while a block is staged: it waits for the flush).
                let deferred = self.indexer.deferred().map(|d| {
                    if gather.is_some() {
                        d.max(Duration::from_millis(10))
                    } else {
                        d
                    }
                });
                let wait = [due, gather, deferred]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(Duration::from_secs(3600));
                let c = crossbeam_channel::select! {
                    recv(rx) -> c => match c {
                        Ok(c) => Some(c),
                        Err(_) => break,
                    },
                    recv(compact_rx) -> r => {
                        match r {
                            Ok(r) => {
                                let done = self.commit_compaction(&r.prepared, current.as_ref());
                                let _ = r.reply.send(done);
                            }
                            // No compactor left: stop listening for one.
                            Err(_) => compact_rx = crossbeam_channel::never(),
                        }
                        None
                    },
                    recv(budgets_rx) -> b => {
                        match b {
                            Ok(b) => {
                                // Applied at once: what the new budgets no longer keep goes
                                // now, not at the next block.
                                self.retention.set_budgets(&b);
                                let deleted = self.retention.make_room(self.indexer.as_mut(), 0)?;
                                self.report.deleted.extend(deleted);
                            }
                            Err(_) => budgets_rx = crossbeam_channel::never(),
                        }
                        None
                    },
                    recv(seal_rx) -> r => {
                        match r {
                            Ok(r) => seal_after = Some(r),
                            Err(_) => seal_rx = crossbeam_channel::never(),
                        }
                        None
                    },
                    default(wait) => {
                        if let Some(seg) = current.as_mut().filter(|s| s.needs_sync()) {
                            let io = Instant::now();
                            let r = seg.sync_data();
                            // With nothing left to delete the sync is skipped; the next
                            // interval tries again.
                            self.or_make_room(seg, r, SegmentFile::sync_data)?;
                            last_sync = Instant::now();
                            self.disk.add(io.elapsed());
                        }
                        self.catch_up_index(current.as_ref());
                        None
                    },
                };
                if let Some(c) = c {
                    pending.insert(c.order, c);
                    while let Some(c) = pending.remove(&next) {
                        next += 1;
                        self.write_block(&mut current, c, &mut last_sync)?;
                    }
                }
                // An idle seal, once every block of its segment is written (a later block
                // of the next segment may already have sealed it).
                if seal_after.as_ref().is_some_and(|r| next >= r.after_order) {
                    let r = seal_after.take().expect("checked above");
                    if current.as_ref().is_some_and(|s| s.seq() == r.segment) {
                        let seg = current.take().expect("checked above");
                        self.seal(seg)?;
                    }
                }
                // Staged blocks go to disk once the oldest has waited GATHER (or at
                // DIRECT_FLUSH_BYTES, see SegmentFile::append): readers see a block within
                // the block age and GATHER, and under load blocks gather into large writes.
                if let Some(seg) = current.as_mut() {
                    let due = if self.small_writes {
                        Duration::ZERO
                    } else {
                        GATHER
                    };
                    if seg.unflushed_for().is_some_and(|t| t >= due) {
                        let io = Instant::now();
                        let r = seg.flush();
                        self.or_make_room(seg, r, SegmentFile::flush)?;
                        self.disk.add(io.elapsed());
                    }
                }
                self.catch_up_index(current.as_ref());
            }
            if !pending.is_empty() {
                return Err(StoreError::CompressorStopped {
                    pending: pending.len(),
                });
            }
            Ok(())
        })();
        let sealed = match current.take() {
            Some(seg) if result.is_ok() => self.seal(seg),
            // On error the open segment is left for recovery at the next open.
            _ => Ok(()),
        };
        result?;
        sealed?;
        self.report.store_bytes = self.retention.total();
        Ok(self.report)
    }

    /// The indexer's deferred work, when it is due and the open segment holds every block
    /// handed to the indexer (none staged): what it covers is then in the file.
    fn catch_up_index(&mut self, open: Option<&SegmentFile>) {
        let flushed = open.is_none_or(|s| s.unflushed_for().is_none());
        if flushed && self.indexer.deferred() == Some(Duration::ZERO) {
            self.indexer.catch_up();
        }
    }

    /// Commits a compaction (compact.rs) when retention still keeps its segment: rename over
    /// the sealed name, directory sync, the segment's new size for retention, the indexer
    /// told. A segment retention deleted meanwhile stays deleted: its temporary file goes.
    fn commit_compaction(
        &mut self,
        p: &super::compact::Prepared,
        open: Option<&SegmentFile>,
    ) -> Result<bool> {
        if !self.retention.holds(p.seq) || open.is_some_and(|s| s.seq() == p.seq) {
            super::compact::abandon(p);
            return Ok(false);
        }
        // Uploaded meanwhile: its object holds the bytes as they are, so they stay.
        let _tier = crate::ledger::tier_commit_lock();
        if crate::ledger::is_tiered(&self.dir, p.seq)? {
            tracing::info!(
                seq = p.seq,
                "not compacted: uploaded to the object store while it was being compacted"
            );
            super::compact::abandon(p);
            return Ok(false);
        }
        if !super::compact::commit(p)? {
            return Ok(false);
        }
        self.retention.resized(p.seq, p.bytes_after);
        if let Err(e) = self.indexer.compacted(&p.sealed(), p.bytes_before) {
            tracing::warn!(
                seq = p.seq,
                "cannot update the compacted segment's index (rebuilt by the next writer or \
                 `capsule reindex`): {}",
                crate::error::chain(&e)
            );
        }
        Ok(true)
    }

    /// Seals `seg`. On a full disk the oldest sealed segments are deleted until the footer
    /// fits; with none left the segment stays open (readers read it through its block
    /// headers; the next writer recovers it).
    fn seal(&mut self, seg: SegmentFile) -> Result<()> {
        let before = seg.len();
        let mut seg = seg;
        let s = loop {
            match seg.try_seal() {
                Ok(s) => break s,
                Err(f) if f.error.is_disk_full() => {
                    seg = *f.segment;
                    if !self.evict()? {
                        // Staged blocks that could not be written are given up and counted;
                        // the file ends at its last block on disk.
                        let gone = seg.rollback()?;
                        self.retention.shrank(gone.bytes);
                        self.dropped(gone.blocks as u64, gone.packets);
                        tracing::warn!(
                            seq = seg.seq(),
                            "disk full: no room for the segment's footer and no sealed segment \
                             left to delete; it stays open, for recovery at the next open"
                        );
                        return Ok(());
                    }
                }
                Err(f) => return Err(f.error),
            }
        };
        let Some(s) = s else {
            self.retention.shrank(before);
            return Ok(());
        };
        if self.index_stale {
            tracing::warn!(
                seq = s.seq,
                "blocks of this segment were dropped on a full disk after the index saw them; \
                 its index is rebuilt by the next writer or `capsule reindex`"
            );
        } else if let Err(e) = self.indexer.sealed(&s) {
            tracing::warn!(
                seq = s.seq,
                "cannot write the segment's index (rebuilt by the next writer or `capsule \
                 reindex`): {}",
                crate::error::chain(&e)
            );
        }
        if let Err(e) = crate::ledger::record_sealed(&self.dir, &(&s).into()) {
            // The next writer's open adds the line from the segment's footer.
            tracing::warn!(
                seq = s.seq,
                "cannot record the seal in the ledger: {}",
                crate::error::chain(&e)
            );
        }
        self.retention.grew(s.bytes - before);
        self.retention.sealed_one(&s);
        self.report.sealed.push(s);
        Ok(())
    }

    /// The disk is full: deletes the oldest sealed segment, counted and logged. False: none
    /// is left.
    fn evict(&mut self) -> Result<bool> {
        let Some(d) = self.retention.evict_for_space(self.indexer.as_mut())? else {
            return Ok(false);
        };
        self.space.evicted.fetch_add(1, Ordering::Relaxed);
        self.space
            .evicted_bytes
            .fetch_add(d.bytes, Ordering::Relaxed);
        self.report.deleted_for_space.push(d);
        Ok(true)
    }

    /// Counts a block not stored for a full disk.
    fn dropped(&mut self, blocks: u64, packets: u64) {
        self.small_writes = true;
        if packets > 0 && self.report.disk_full_drops == 0 {
            tracing::warn!(
                "disk full and no sealed segment left to delete: dropping blocks until \
                 space returns"
            );
        }
        self.report.disk_full_blocks += blocks;
        self.report.disk_full_drops += packets;
        self.space
            .dropped_packets
            .fetch_add(packets, Ordering::Relaxed);
    }

    /// Takes `r`, the result of a write to `seg`; on a full disk, deletes the oldest sealed
    /// segments and tries `again` after each, until it succeeds. With nothing left to delete,
    /// the blocks not yet on disk are given up (counted as dropped, their interfaces kept
    /// to be declared again) and the segment goes on from what is on disk. Returns whether
    /// the write was done.
    fn or_make_room(
        &mut self,
        seg: &mut SegmentFile,
        mut r: Result<()>,
        again: impl Fn(&mut SegmentFile) -> Result<()>,
    ) -> Result<bool> {
        loop {
            match r {
                Ok(()) => return Ok(true),
                Err(e) if e.is_disk_full() => {
                    if self.evict()? {
                        r = again(seg);
                        continue;
                    }
                    let gone = seg.rollback()?;
                    self.retention.shrank(gone.bytes);
                    if gone.blocks > 0 {
                        self.index_stale = true;
                    }
                    let mut ifaces = gone.interfaces;
                    ifaces.append(&mut self.redeclare);
                    self.redeclare = ifaces;
                    self.dropped(gone.blocks as u64, gone.packets);
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates segment `seq`, deleting the oldest sealed segments while the disk is full.
    /// `None`: the disk is full and nothing is left to delete.
    fn create(&mut self, seq: u64) -> Result<Option<SegmentFile>> {
        loop {
            match SegmentFile::create(&self.dir, seq, now_ns()) {
                Ok(seg) => {
                    self.small_writes = false;
                    self.indexer.begin(seq);
                    self.index_stale = false;
                    self.retention.grew(seg.len());
                    return Ok(Some(seg));
                }
                Err(e) if e.is_disk_full() => {
                    if !self.evict()? {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Gives the producer back the buffers of blocks written from where they were built,
    /// once the segment's write queue has let go of them.
    fn give_back_lent(&mut self) {
        let mut i = 0;
        while i < self.lent.len() {
            if Arc::strong_count(&self.lent[i]) == 1 {
                if let Ok(buf) = Arc::try_unwrap(self.lent.swap_remove(i)) {
                    // Not cleared: a lane starting a framed block keeps its free room as it
                    // is (OpenBlock::reset).
                    let _ = self.pool.try_send(buf);
                }
            } else {
                i += 1;
            }
        }
    }

    fn write_block(
        &mut self,
        current: &mut Option<SegmentFile>,
        mut c: Compressed,
        last_sync: &mut Instant,
    ) -> Result<()> {
        if current.as_ref().is_some_and(|s| s.seq() != c.segment) {
            let seg = current.take().expect("checked above");
            self.seal(seg)?;
        }
        if self.redeclare_seq != c.segment {
            // Interfaces of a segment that was given up are not this segment's.
            self.redeclare.clear();
            self.redeclare_seq = c.segment;
        }
        // A block written from where it was built may pad its header by up to a page.
        let pad = if c.framed.is_some() {
            segment::DIRECT_ALIGN as u64
        } else {
            0
        };
        let need = u64::from(c.meta.compressed_len) + c.meta.header_frame_len() as u64 + pad;
        // Room for the block, the footer that sealing will add, and for a new segment its
        // head and header (a few hundred bytes; 4 KiB covers interface records too).
        let reserve = match current.as_ref() {
            Some(seg) => seg.footer_reserve(),
            None => 4096 + format::meta_frame_len(format::FOOTER_FIXED_LEN + 64 + 16) as u64,
        };
        if c.meta.packets > 0 {
            self.retention.saw(c.meta.last_ns);
        }
        let deleted = self
            .retention
            .make_room(self.indexer.as_mut(), need + reserve)?;
        self.report.deleted.extend(deleted);
        if current.is_none() {
            match self.create(c.segment)? {
                Some(seg) => *current = Some(seg),
                None => {
                    // Its interfaces are declared again in front of the next block of this
                    // segment that is written: the blocks after it name them by number.
                    self.redeclare.extend(c.meta.new_interfaces.iter().cloned());
                    self.dropped(1, u64::from(c.meta.packets));
                    return Ok(());
                }
            }
        }
        let seg = current.as_mut().expect("created above");
        let before = seg.len();
        self.ratio
            .compressed
            .fetch_add(u64::from(c.meta.compressed_len), Ordering::Relaxed);
        self.ratio
            .uncompressed
            .fetch_add(u64::from(c.meta.uncompressed_len), Ordering::Relaxed);
        self.report.uncompressed_bytes += u64::from(c.meta.uncompressed_len);
        self.report.compressed_bytes += u64::from(c.meta.compressed_len);
        let io = Instant::now();
        // A failed append leaves its block recorded and pending: a flush writes it, or a
        // rollback gives it up.
        let mut r = Ok(());
        let mut idb = None;
        if !self.redeclare.is_empty() {
            let (meta, frame, data) =
                interface_block(std::mem::take(&mut self.redeclare), c.meta.first_ns);
            r = seg.append(meta.clone(), &frame);
            idb = Some((meta, data));
        }
        let mut shared = None;
        let r = r.and(if let Some((body, crc)) = c.framed {
            let (buf, r) =
                seg.append_framed(c.meta.clone(), std::mem::take(&mut c.data), body, crc);
            shared = Some((buf, body));
            r
        } else if c.raw_frame {
            seg.append_raw(c.meta.clone(), &c.data, &mut self.heads)
        } else {
            seg.append(c.meta.clone(), &c.frame)
        });
        self.retention.grew(seg.len() - before);
        if let Some(p) = seg.appended(0).filter(|_| shared.is_some()) {
            // Its frame's length was settled as it was placed.
            let d = u64::from(p.compressed_len).wrapping_sub(u64::from(c.meta.compressed_len));
            self.ratio.compressed.fetch_add(d, Ordering::Relaxed);
            self.report.compressed_bytes = self.report.compressed_bytes.wrapping_add(d);
        }
        if self.or_make_room(seg, r, SegmentFile::flush)? {
            // The indexer gets each block as the segment placed it (its index, frame offset
            // and, for a stored block, the checksum taken as it was copied; for one written
            // from where it was built, its frame's length and header padding), which the
            // index journal records for readers of the open segment.
            let placed = |m: &format::BlockMeta, back: usize| {
                let mut m = m.clone();
                if let Some(p) = seg.appended(back) {
                    m.index = p.index;
                    m.frame_offset = p.frame_offset;
                    m.frame_crc = p.frame_crc;
                    m.compressed_len = p.compressed_len;
                    m.header_pad = p.header_pad;
                }
                m
            };
            if let Some((meta, data)) = idb {
                self.indexer.block(&placed(&meta, 1), &[&data], None);
            }
            let records = c.records.as_deref();
            match &shared {
                Some((buf, body)) => {
                    let pieces: Vec<&[u8]> = format::raw_blocks(&buf[*body..]).collect();
                    self.indexer.block(&placed(&c.meta, 0), &pieces, records);
                }
                None => self.indexer.block(&placed(&c.meta, 0), &[&c.data], records),
            }
        }
        if let Some(mut records) = c.records.take() {
            records.clear();
            let _ = self.records_pool.try_send(records);
        }
        if let Some((buf, _)) = shared {
            self.lent.push(buf);
        }
        self.give_back_lent();
        if c.frame.capacity() > 0 {
            let _ = self.frames.try_send(c.frame);
        }
        // Only block-sized buffers go back to the producer. An interface or statistics
        // block's buffer is a few dozen bytes: as a lane's next block it would grow through
        // a dozen reallocations and copies, and capture records statistics whenever the
        // kernel drops packets, which is when the producer can least afford it.
        let mut data = c.data;
        if data.capacity() >= self.cfg.block_bytes {
            data.clear();
            let _ = self.pool.try_send(data);
        }
        if last_sync.elapsed() >= self.cfg.sync_interval {
            let r = seg.sync_data();
            // With nothing left to delete, this sync is skipped; the next interval tries.
            self.or_make_room(seg, r, SegmentFile::sync_data)?;
            *last_sync = Instant::now();
        }
        self.disk.add(io.elapsed());
        Ok(())
    }
}

/// An interface block declaring `ifaces` again (their first declaration was dropped on a
/// full disk), as the producer would have sent it: one IDB each, in a zstd frame.
fn interface_block(
    ifaces: Vec<capsule_pcap::Interface>,
    ts_ns: u64,
) -> (crate::format::BlockMeta, Vec<u8>, Vec<u8>) {
    let mut data = Vec::new();
    for i in &ifaces {
        capsule_pcap::write::pcapng_idb(&mut data, i);
    }
    let mut z = zstd::bulk::Compressor::new(1).expect("zstd level 1 is valid");
    z.include_checksum(true).expect("checksum flag is valid");
    let frame = z
        .compress(&data)
        .expect("compressing a few bytes into a Vec cannot fail");
    let meta = crate::format::BlockMeta {
        first_ns: ts_ns,
        last_ns: ts_ns,
        uncompressed_len: data.len() as u32,
        compressed_len: frame.len() as u32,
        frame_crc: crate::crc::crc32c(&frame),
        compression: crate::format::Compression::Zstd(1),
        new_interfaces: ifaces,
        ..crate::format::BlockMeta::default()
    };
    (meta, frame, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_counts_as_the_limit_when_writing_takes_half_the_time() {
        let bound = Arc::new(AtomicBool::new(false));
        let mut d = DiskLoad::new(bound.clone());
        d.add(Duration::from_millis(10));
        assert!(
            !bound.load(Ordering::Relaxed),
            "no verdict before the window ends"
        );
        d.since -= Duration::from_millis(300);
        d.add(Duration::from_millis(200)); // 210 ms of about 300
        assert!(bound.load(Ordering::Relaxed));
        d.since -= Duration::from_millis(300);
        d.add(Duration::from_millis(100)); // 100 ms of about 300
        assert!(!bound.load(Ordering::Relaxed));
    }
}
