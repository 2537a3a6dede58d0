//! The store writer: packets in, sealed segments out (and, through its [`Indexer`], their
//! side index).
//!
//! ```text
//! producer (caller's thread)        compressor threads (N)      writer thread (one)
//! mod.rs                            compress.rs                 disk.rs
//! append(packet)                    rung of the ladder   ---->  reorder by block number
//!   -> lane = DSCP class              (Level: configured,        retention.rs: delete the
//!   -> EPB into that lane's block      -10, -1000, store)         oldest to fit the budget
//!   new interface -> its own block    zstd or raw frame           append to segment file
//!   block cut by size or age  ----->  + crc32c                    Indexer::block (derived)
//!   (sorted by time if needed)                                    sync every interval
//!   segment cut at block edges                                    seal: footer, fsync,
//!                                                                   rename; Indexer::sealed
//! ```
//!
//! At [`Level::Store`] there are no compressor threads: the producer builds each block as
//! its raw zstd frame (`OpenBlock`: raw blocks of whole records, their crc32c taken
//! while in the cache) and hands it straight to the writer thread, which writes it from that
//! buffer with direct I/O ([`SegmentFile::append_framed`](crate::segment::SegmentFile::append_framed)):
//! the block is never copied. Blocks the ladder stores are laid out around their bytes as
//! they are copied into the segment's write buffer, with their crc32c taken there.
//!
//! With an indexer that asks for them ([`Indexer::wants_records`]), the producer dissects
//! each packet as it stores it and sends a [`Record`] of each record with the block: the
//! side index counts those instead of reading the block back from another core's cache.
//!
//! The producer never touches the disk. Each lane (DSCP class, see [`LANES`]) fills its own
//! block, so a query for one class reads only that class's blocks. Blocks are cut at a size
//! (`block_bytes`) or an age (`block_age`, checked by [`StoreWriter::tick`]); segments at an
//! estimated on-disk size or an age, with every lane cut first. Channels between the stages
//! are bounded, so memory is bounded: when the disk is slower than the input,
//! [`StoreWriter::append`] waits.
//!
//! Retention makes the store a ring: before a block is written, the oldest sealed segments
//! (and their derived data) are deleted until the block fits under `max_bytes`. Segments are
//! capped at a quarter of the budget so there is always an older segment to delete.
//!
//! Compaction (capture: [`WriterConfig::compact`]; offline: [`StoreWriter::compact_all`]): a
//! compactor recompresses, at the configured level, the blocks of sealed segments the ladder
//! wrote below it, into a temporary file beside each (see [`compact`]); the writer
//! thread commits each one (rename, directory sync, retention's size, the indexer), so
//! retention and compaction never race (compactor.rs).
//!
//! A full disk (ENOSPC, EDQUOT) stops nothing: the writer thread deletes the oldest sealed
//! segment and tries the failed step again; with none left it drops the blocks not yet on
//! disk ([`crate::segment::SegmentFile::rollback`]), counts their packets
//! ([`Pressure::disk_full_drops`]) and goes on with the next block (see disk.rs).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use capsule_pcap::{write as pw, Interface};
use crossbeam_channel::{Receiver, Sender};

use crate::budget::FreeSpace;
use crate::error::{Result, StoreError};
use crate::format::{self, BlockMeta};
use crate::indexer::{Indexer, NoIndex, Record};
use crate::segment::{Recovery, SealedSegment, FRAMED_HEAD};
use crate::store::Store;

pub mod compact;
mod compactor;
mod compress;
mod disk;
mod open;
mod retention;
#[cfg(test)]
mod tests;

pub use compactor::{lower_thread_priority, CompactReport, CompactedSegment};
use compactor::{CompactCounters, CompactRequest};
pub(super) use compress::SpaceCounters;
pub use compress::{Level, LevelError, Pressure, PressureGauge};

/// The largest packet the store accepts (captured bytes).
pub const MAX_PACKET: usize = 256 * 1024;
/// Blocks are filled per lane: one lane per DSCP class (the DSCP's top three bits), so that
/// packets of a class share blocks and a query for one class reads only its blocks.
pub const LANES: usize = 8;

/// The capacity of a block buffer for blocks of `block_bytes`: room for the last record
/// past the cut (pcapng blocks of up to 64 KiB before the cut is checked) and for a framed
/// block's free room in front.
fn block_capacity(block_bytes: usize) -> usize {
    block_bytes + 64 * 1024 + FRAMED_HEAD
}

/// A fresh block buffer for blocks of `block_bytes`, on transparent huge pages under the
/// binary's allocator (`capsule_sys::huge`): at the store rung the blocks are written with
/// O_DIRECT from it, which pins its pages for every write (one per 2 MiB rather than per
/// 4 KiB), and every packet is copied into it.
fn block_buffer(block_bytes: usize) -> Vec<u8> {
    capsule_sys::huge::vec_with_capacity(block_capacity(block_bytes))
}

/// The lane of a packet: its DSCP class; non-IP packets go to lane 0 with best effort.
///
/// Reads only the DSCP ([`dscp_of`](capsule_wire::dscp_of), which agrees with the full
/// dissection): this runs on the producer, for every packet live capture hands over, when
/// the indexer takes no [`Record`]s (with one that does, the lane comes from the packet's
/// full dissection, made for its record).
fn lane_of(linktype: u16, data: &[u8]) -> usize {
    capsule_wire::dscp_of(linktype, data).map_or(0, |dscp| usize::from(dscp >> 3) & (LANES - 1))
}

/// The per-class cut-off's decision for each packet the writer is given (capsule-index
/// implements it from the config's `[cutoff]` rules). Called on the producer's thread, in
/// arrival order, with the whole packet and its dissection (the one the side index's record
/// is made from: the packet is dissected once), before it is stored.
pub trait CutPolicy: Send + std::fmt::Debug {
    /// `None`: store the packet whole. `Some(n)`: do not store it; keep its first `n` bytes
    /// (its headers) in a cut-packet record, which exports skip and the side index counts,
    /// so flow counters stay those of what was seen.
    fn decide(
        &mut self,
        linktype: u16,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
        dissected: &capsule_wire::Dissected,
    ) -> Option<usize>;
}

/// How the writer cuts blocks and segments and how much disk it may use.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Uncompressed bytes after which a block is cut.
    pub block_bytes: usize,
    /// Wall-clock age after which [`StoreWriter::tick`] cuts a block.
    pub block_age: Duration,
    /// Estimated on-disk bytes after which a segment is sealed.
    pub segment_bytes: u64,
    /// Age (wall clock, or packet time spanned) after which a segment is sealed.
    pub segment_age: Duration,
    /// Store-wide byte budget; the oldest segments are deleted to stay under it.
    pub max_bytes: Option<u64>,
    /// Free space kept on the store's file system (see [`crate::budget`]).
    pub min_free: Option<FreeSpace>,
    /// Age of data kept, by packet time back from the newest packet written.
    pub max_age: Option<Duration>,
    /// Save these three budgets in the store (`retention.json`) once the writer holds the
    /// lock, so later writers apply them unless told otherwise.
    pub save_budgets: bool,
    /// How blocks are compressed (a zstd level, or stored).
    pub level: Level,
    /// Compression threads.
    pub threads: usize,
    /// How often the open segment is flushed to the medium.
    pub sync_interval: Duration,
    /// Follow the live compression ladder (see `compress.rs`): start at store, fall to
    /// store while a capture reader is behind or blocks queue up, climb back to the
    /// configured level while calm, rather than make the producer wait.
    /// For live capture, where waiting means the kernel drops packets; an import is better
    /// off waiting (nothing is lost) and keeping the ratio.
    pub adaptive: bool,
    /// Run the compactor in the background: blocks of sealed segments written below `level`
    /// (the ladder stepped down) are recompressed at `level`, at the lowest CPU priority,
    /// pausing while capture is short of CPU (see compactor.rs). No effect at `store`
    /// without an age tier.
    pub compact: bool,
    /// With `compact`: once nothing is below `level`, sealed segments older than the tier's
    /// age are recompressed at its level too ([`compact::AgeTier`]).
    pub age_tier: Option<compact::AgeTier>,
    /// How long the link must be quiet before [`StoreWriter::tick`] seals a sizeable open
    /// segment ([`IDLE_SEAL`]).
    pub idle_seal: Duration,
    /// A `[tier]` is configured: retention only trims segments the ledger records as
    /// uploaded (oldest first, keeping their index as the local copy), and never deletes
    /// one whose upload is not confirmed, whatever the budgets say.
    pub tier: bool,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            block_bytes: 1 << 20,
            block_age: Duration::from_millis(100),
            segment_bytes: 1 << 30,
            segment_age: Duration::from_secs(600),
            max_bytes: None,
            min_free: None,
            max_age: None,
            save_budgets: false,
            level: Level::default(),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            sync_interval: Duration::from_secs(1),
            adaptive: false,
            compact: false,
            age_tier: None,
            idle_seal: IDLE_SEAL,
            tier: false,
        }
    }
}

/// What opening the writer found and did.
#[derive(Debug, Default)]
pub struct OpenReport {
    /// Torn segments that were cut back and sealed.
    pub recovered: Vec<Recovery>,
    /// Segments deleted at open to honour the budget.
    pub deleted: Vec<DeletedSegment>,
    /// Sealed segments already in the store.
    pub existing_segments: usize,
    /// Segments whose missing or stale index was rebuilt.
    pub reindexed: Vec<u64>,
    /// Sealed segments deleted because the disk was full (to recover a torn segment).
    pub deleted_for_space: Vec<DeletedSegment>,
    /// Torn segments left open: the disk was full and nothing was left to delete.
    pub left_open: Vec<std::path::PathBuf>,
    /// Temporary files of compactions a crash interrupted, removed (the segments they were
    /// to replace are whole under their sealed names).
    pub compaction_leftovers: Vec<std::path::PathBuf>,
    /// Other temporary files a killed process left (older than ten minutes), removed.
    pub stale_temps: Vec<std::path::PathBuf>,
}

/// A segment removed by retention.
#[derive(Debug, Clone)]
pub struct DeletedSegment {
    pub seq: u64,
    pub bytes: u64,
}

/// Totals of one writer's life.
#[derive(Debug, Default, Clone)]
pub struct WriteReport {
    /// Packets stored.
    pub packets: u64,
    /// Packets the cut-off did not store (counted by the side index from their headers).
    pub cut_packets: u64,
    pub wire_bytes: u64,
    pub blocks: u64,
    pub uncompressed_bytes: u64,
    pub compressed_bytes: u64,
    pub sealed: Vec<SealedSegment>,
    pub deleted: Vec<DeletedSegment>,
    /// Sealed segments deleted because the disk was full (whatever the budget).
    pub deleted_for_space: Vec<DeletedSegment>,
    /// Packets not stored because the disk was full and nothing was left to delete.
    pub disk_full_drops: u64,
    /// Blocks (of packets, interfaces or statistics) not stored for the same reason.
    pub disk_full_blocks: u64,
    /// Bytes on disk at the end.
    pub store_bytes: u64,
}

struct RawBlock {
    order: u64,
    segment: u64,
    meta: BlockMeta,
    data: Vec<u8>,
    /// What the side index reads of each record (see [`Indexer::wants_records`]).
    records: Option<Vec<Record>>,
}

/// The producer moved on from `segment` while the link was idle ([`StoreWriter::tick`]):
/// the writer thread seals it once every block sent before `after_order` is written, so the
/// compactor can take its blocks (and retention count it) without waiting for traffic.
struct SealRequest {
    segment: u64,
    after_order: u64,
}

/// How long the link must be quiet, by default ([`WriterConfig::idle_seal`]), before
/// [`StoreWriter::tick`] seals an open segment that holds at least 1/[`IDLE_SEAL_FRACTION`]
/// of the segment size (or is older than the segment age).
pub const IDLE_SEAL: Duration = Duration::from_secs(10);
/// The share of `segment_bytes` an open segment must hold to be sealed early when idle: a
/// trickle of packets with long pauses does not make a segment per pause.
pub const IDLE_SEAL_FRACTION: u64 = 8;

struct Compressed {
    order: u64,
    segment: u64,
    meta: BlockMeta,
    /// Built in its frame (the store pipe, see [`OpenBlock`]): `data` from this offset
    /// holds the frame's raw blocks, whose crc32c is the second value; the writer writes
    /// them from `data` itself ([`SegmentFile::append_framed`](crate::segment::SegmentFile::append_framed)).
    framed: Option<(usize, u32)>,
    /// The zstd frame; empty when `raw_frame`.
    frame: Vec<u8>,
    /// Stored (the store rung): the frame is the raw frame of `data`, which the writer
    /// thread writes around `data` itself ([`crate::format::raw_frame_parts`]), so the
    /// block is copied once, into the segment's write buffer.
    raw_frame: bool,
    /// The uncompressed block, for the side index; then back to the producer's pool.
    data: Vec<u8>,
    /// What the side index reads of each record, when it wants them.
    records: Option<Vec<Record>>,
}

/// The block being filled by the producer.
///
/// At the store level (no compression) a block is built *in its frame*: `buf` keeps
/// [`FRAMED_HEAD`] bytes free, then holds raw zstd blocks, each a 3-byte header and whole
/// records (at most [`format::RAW_BLOCK_MAX`] bytes: a record that would not fit closes one
/// and opens the next), whose checksum is taken as each closes, from the cache. The writer
/// puts the frame's head and the block header in the free room and writes the block from
/// this buffer with direct I/O: no copy of the block, no second pass over it for its
/// checksum. A block that needs sorting, or a record larger than a raw block, goes back to
/// the plain layout (the records one after the other) and is copied like a compressed one.
#[derive(Debug, Default)]
struct OpenBlock {
    buf: Vec<u8>,
    /// Built in its frame: where the open raw block is, and the checksum of those closed.
    framing: Option<Framing>,
    /// What the side index reads of each record, in the order of `buf` (kept when the
    /// indexer wants them, [`Indexer::wants_records`]).
    infos: Vec<Record>,
    /// Records in `buf`: stored packets and cut-packet records.
    records: u32,
    packets: u32,
    wire_bytes: u64,
    first_ns: u64,
    last_ns: u64,
    prev_ns: u64,
    sorted: bool,
    opened: Option<Instant>,
}

/// Where a block built in its frame is (see [`OpenBlock`]).
#[derive(Debug, Default)]
struct Framing {
    /// Offset in the buffer of the open raw block's header (its records follow it).
    at: usize,
    /// Raw block headers in the buffer, the open one's included.
    heads: usize,
    /// crc32c of the closed raw blocks, headers and all.
    crc: crate::crc::Crc32c,
    /// crc32c of the open raw block's records up to `summed` (an offset in the buffer).
    open_crc: crate::crc::Crc32c,
    summed: usize,
}

/// Bytes of records after which the open raw block's checksum takes them in: few enough
/// that they are still in the first-level cache, which the records the producer copied
/// from the ring share with the ring's frames (48 KiB on the development VM). Taken at
/// close instead, from a 128 KiB raw block, the checksum was 5.5% of a store-rung
/// capture's samples.
const CRC_STEP: usize = 8 << 10;

impl Framing {
    fn new(at: usize) -> Framing {
        Framing {
            at,
            heads: 1,
            crc: Default::default(),
            open_crc: Default::default(),
            summed: at + 3,
        }
    }

    /// Takes the open raw block's records into its checksum once [`CRC_STEP`] of them wait.
    #[inline]
    fn step(&mut self, buf: &[u8]) {
        if buf.len() - self.summed >= CRC_STEP {
            self.open_crc.update(&buf[self.summed..]);
            self.summed = buf.len();
        }
    }

    /// Writes the header of the open raw block, which ends at the end of `buf`, and adds
    /// the block to the checksum: its header, then its records' checksum joined on.
    fn close(&mut self, buf: &mut [u8], last: bool) {
        let size = buf.len() - self.at - 3;
        let header = format::raw_block_header(size, last);
        buf[self.at..self.at + 3].copy_from_slice(&header);
        self.open_crc.update(&buf[self.summed..]);
        self.crc.update(&header);
        let joined =
            crate::crc::crc32c_combine(self.crc.value(), self.open_crc.value(), size as u64);
        self.crc = crate::crc::Crc32c::resume(joined);
    }

    /// Opens the next raw block at `at`, the end of the buffer.
    fn open_next(&mut self, at: usize) {
        self.at = at;
        self.heads += 1;
        self.open_crc = Default::default();
        self.summed = at + 3;
    }
}

impl OpenBlock {
    /// Starts an empty block in `buf`, built in its frame when `framed`.
    fn reset(&mut self, mut buf: Vec<u8>, framed: bool) {
        if !framed {
            buf.clear();
        }
        let framing = framed.then(|| {
            // The free room's bytes are the writer's to fill: what a buffer held before
            // stays (zeroing 16 KiB a block was 1% of a capture's samples).
            if buf.len() >= FRAMED_HEAD + 3 {
                buf.truncate(FRAMED_HEAD + 3);
            } else {
                buf.resize(FRAMED_HEAD + 3, 0);
            }
            Framing::new(FRAMED_HEAD)
        });
        let mut infos = std::mem::take(&mut self.infos);
        infos.clear();
        *self = OpenBlock {
            buf,
            framing,
            infos,
            sorted: true,
            ..OpenBlock::default()
        };
    }

    /// Bytes of records in the block.
    fn content_len(&self) -> usize {
        match &self.framing {
            Some(f) => self.buf.len() - FRAMED_HEAD - 3 * f.heads,
            None => self.buf.len(),
        }
    }

    /// Makes room for a record of `len` bytes, which is appended to `buf` next.
    fn room_for(&mut self, len: usize) {
        let Some(f) = &mut self.framing else {
            return;
        };
        if len > format::RAW_BLOCK_MAX {
            self.unframe();
        } else if self.buf.len() - (f.at + 3) + len > format::RAW_BLOCK_MAX {
            f.close(&mut self.buf, false);
            f.open_next(self.buf.len());
            self.buf.extend_from_slice(&[0; 3]);
        }
    }

    /// Goes back to the plain layout: the records one after the other.
    fn unframe(&mut self) {
        let Some(f) = self.framing.take() else {
            return;
        };
        let mut plain = capsule_sys::huge::vec_with_capacity(self.buf.capacity());
        for piece in format::raw_blocks(&self.buf[FRAMED_HEAD..f.at]) {
            plain.extend_from_slice(piece);
        }
        plain.extend_from_slice(&self.buf[f.at + 3..]);
        self.buf = plain;
    }

    /// Closes a framed block's last raw block: where its body starts and its checksum.
    fn finish_frame(&mut self) -> Option<(usize, u32)> {
        let f = self.framing.as_mut()?;
        f.close(&mut self.buf, true);
        Some((FRAMED_HEAD, f.crc.value()))
    }

    /// Rewrites the buffer with its packets in time order (a stable sort), through `spare`,
    /// which gets the old buffer back.
    ///
    /// Swapping keeps both buffers' memory: a fresh megabyte for every sorted block cost a
    /// page fault per 4 KiB written, and out-of-order input sorts most blocks (the producer
    /// spent about 16.5 instead of 14 ms on 64 MB, `store/append_cpu_unsorted`).
    ///
    /// Cut-packet records (the cut-off's, see [`CutPolicy`]) are sorted with the packets, so
    /// the side index counts every packet seen in the order an uncut store would hold it.
    fn sort(&mut self, spare: &mut Vec<u8>) {
        self.unframe();
        // The same stable sort on the same keys: the records stay in step with the block.
        self.infos.sort_by_key(|r| r.ts_ns);
        let mut pkts: Vec<_> = capsule_pcap::read::fragment_records(&self.buf)
            .filter_map(|r| r.ok())
            .collect();
        pkts.sort_by_key(|(p, _)| p.ts_ns);
        spare.clear();
        if spare.capacity() < self.buf.len() {
            // It becomes this lane's block buffer: one like the others (see `block_buffer`).
            *spare = capsule_sys::huge::vec_with_capacity(self.buf.capacity());
        }
        for (p, cut) in &pkts {
            if *cut {
                pw::pcapng_cut(spare, p.iface, p.ts_ns, p.orig_len, p.data);
            } else {
                pw::pcapng_epb_with(spare, p.iface, p.ts_ns, p.orig_len, p.data, p.options);
            }
        }
        drop(pkts);
        std::mem::swap(&mut self.buf, spare);
        self.sorted = true;
    }
}

/// A temporary file older than this, found when a writer opens the store, is a leftover.
const STALE_TEMP_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// A segment is sealed at most at this fraction of the room the free-space floor leaves the
/// store when it opens (and at a quarter of a byte budget).
const SEGMENTS_IN_ROOM: u64 = 8;

/// Replaces a running writer's retention budgets ([`StoreWriter::budget_handle`]).
#[derive(Debug, Clone)]
pub struct BudgetHandle {
    tx: Sender<crate::budget::Budgets>,
    root: std::path::PathBuf,
    block_bytes: usize,
    /// The byte budget the pressure gauge reports.
    gauge_budget: Arc<AtomicU64>,
}

impl BudgetHandle {
    /// Has the writer thread apply `budgets` again without saving them: with a tier, after
    /// an upload is confirmed, so that the segments now tiered are trimmed at once.
    pub fn reapply(&self, budgets: crate::budget::Budgets) -> Result<()> {
        self.tx
            .send(budgets)
            .map_err(|_| StoreError::Config("the writer has stopped".into()))
    }

    /// Saves `budgets` in the store, like those given at open, and has the writer thread
    /// apply them at once: the segments they no longer keep are deleted then, oldest first.
    /// A byte budget below 16 blocks is refused, as at open; the segment size stays what it
    /// was.
    pub fn set(&self, budgets: crate::budget::Budgets) -> Result<()> {
        if let Some(max) = budgets.max_bytes {
            check_byte_budget(max, self.block_bytes)?;
        }
        crate::budget::save(&self.root, &budgets)?;
        self.gauge_budget
            .store(budgets.max_bytes.unwrap_or(u64::MAX), Ordering::Relaxed);
        self.tx.send(budgets).map_err(|_| {
            StoreError::Config("the writer has stopped; the budgets were saved only".into())
        })
    }
}

/// Refuses a byte budget `max` below 16 blocks of `block_bytes` (at open, and when a running
/// writer's budgets are replaced).
fn check_byte_budget(max: u64, block_bytes: usize) -> Result<()> {
    let min = 16 * block_bytes as u64;
    if max < min {
        return Err(StoreError::Config(format!(
            "byte budget {max} is too small: it must hold at least 16 blocks \
             ({min} bytes at the block size of {})",
            block_bytes
        )));
    }
    Ok(())
}

/// Writes packets into a store. See the module docs for the pipeline.
#[derive(Debug)]
pub struct StoreWriter {
    cfg: WriterConfig,
    ifaces: Vec<Interface>,
    /// For each store interface, its id in the current segment.
    local: Vec<Option<u32>>,
    local_count: u32,
    /// One open block per lane (DSCP class), see [`lane_of`].
    lanes: Vec<OpenBlock>,
    /// Where [`OpenBlock::sort`] writes; empty until a block needs sorting.
    spare: Vec<u8>,
    /// Timestamp and lane of the last packet appended.
    last: Option<(u64, usize)>,
    /// This segment's input went back in time: it is written as a single stream.
    disordered: bool,
    /// Why the pipeline stopped, once it has.
    failed: Option<Arc<StoreError>>,
    order: u64,
    segment: u64,
    seg_uncompressed: u64,
    seg_opened: Instant,
    seg_first_ns: Option<u64>,
    /// When a lane last opened a block (the idle seal's clock: read where a block opens,
    /// not for every packet).
    last_opened: Instant,
    /// Where idle seals go to the writer thread.
    seal_tx: Sender<SealRequest>,
    tx: Option<Pipe>,
    pool: Receiver<Vec<u8>>,
    /// Where emptied record lists come back from the writer thread.
    records_pool: Receiver<Vec<Record>>,
    /// The indexer wants a [`Record`] of each record ([`Indexer::wants_records`]).
    collect: bool,
    /// The dissection of the packet being appended, kept between packets: filled in place,
    /// so a packet's dissection is not built on the stack and moved twice (those copies
    /// were 4.5% of a store-rung capture's samples). Empty after an error.
    scratch: Option<Box<capsule_wire::Dissected>>,
    ratio: Arc<Ratio>,
    /// Set by capture while its kernel rings fill up (see [`StoreWriter::urgency`]).
    urgent: Arc<AtomicU32>,
    gauge: PressureGauge,
    threads: Vec<JoinHandle<()>>,
    writer: Option<JoinHandle<Result<WriteReport>>>,
    /// Where compactions go to the writer thread to be committed.
    compact_tx: Option<Sender<CompactRequest>>,
    /// Where new retention budgets go to the writer thread.
    budgets_tx: Sender<crate::budget::Budgets>,
    /// The store's directory.
    root: std::path::PathBuf,
    compact_counters: Arc<CompactCounters>,
    /// The background compactor, and what stops it.
    compactor: Option<JoinHandle<()>>,
    compact_stop: Arc<AtomicBool>,
    /// The store's segment directory.
    seg_dir: std::path::PathBuf,
    /// The per-class cut-off, when one is set ([`StoreWriter::set_cut_policy`]).
    cut: Option<Box<dyn CutPolicy>>,
    /// Packets the cut-off did not store (their headers went into cut-packet records).
    cut_packets: u64,
    packets: u64,
    wire_bytes: u64,
    blocks: u64,
    _lock: std::fs::File,
}

/// Where the producer's finished blocks go.
#[derive(Debug)]
enum Pipe {
    /// To the compressor threads.
    Compress(Sender<RawBlock>),
    /// At [`Level::Store`]: straight to the writer thread, which lays the raw frame out
    /// around the block and takes its checksum as it copies it
    /// ([`SegmentFile::append_raw`](crate::segment::SegmentFile::append_raw)). There is
    /// nothing to compress, so no compressor threads: a hop, and two thread wake-ups a
    /// block, fewer. Counts the blocks on the pressure gauge, at the configured level.
    Store(Sender<Compressed>, Arc<[AtomicU64; 4]>),
}

/// The length and capacity of the queue a [`Pipe`] feeds, for the background compactor.
/// A clone of its sender: the pipeline ends only once the compactor has stopped too.
#[derive(Debug)]
enum QueueLen {
    Raw(Sender<RawBlock>),
    Stored(Sender<Compressed>),
}

impl QueueLen {
    fn len_cap(&self) -> (usize, usize) {
        match self {
            QueueLen::Raw(s) => (s.len(), s.capacity().unwrap_or(1)),
            QueueLen::Stored(s) => (s.len(), s.capacity().unwrap_or(1)),
        }
    }
}

#[derive(Debug, Default)]
struct Ratio {
    compressed: AtomicU64,
    uncompressed: AtomicU64,
}

impl Ratio {
    /// Estimated on-disk bytes for `uncompressed` bytes of blocks.
    fn estimate(&self, uncompressed: u64) -> u64 {
        let c = self.compressed.load(Ordering::Relaxed);
        let u = self.uncompressed.load(Ordering::Relaxed);
        if u == 0 {
            uncompressed
        } else {
            (uncompressed as u128 * c as u128 / u as u128) as u64
        }
    }
}

impl StoreWriter {
    /// Opens (creating if needed) the store at `root` for writing segments alone, with no
    /// derived data: what it writes gets its side index from the next writer that keeps one
    /// (capsule-index's `open_writer`) or from `capsule reindex`. See [`StoreWriter::open_with`].
    pub fn open(root: &std::path::Path, cfg: WriterConfig) -> Result<(Self, OpenReport)> {
        Self::open_with(root, cfg, Box::new(NoIndex))
    }

    /// Opens (creating if needed) the store at `root` for writing: takes the writer lock,
    /// recovers torn segments, applies the retention budgets, has `indexer` bring its
    /// derived data up to date, and starts the pipeline threads. The writer thread then
    /// hands `indexer` every block it writes. Each step is a phase in open.rs, run in the
    /// order below.
    pub fn open_with(
        root: &std::path::Path,
        cfg: WriterConfig,
        mut indexer: Box<dyn Indexer>,
    ) -> Result<(Self, OpenReport)> {
        let mut cfg = open::checked_config(cfg)?;
        let (store, lock) = Store::create_locked(root)?;
        let budgets = open::save_budgets(&store, &cfg);
        let mut report = OpenReport::default();
        open::clear_crash_leftovers(&store, &mut report)?;
        let full = open::recover_torn_segments(&store, &mut report)?;
        let (mut retention, next_seq) = open::start_retention(&store, &budgets)?;
        if cfg.tier {
            retention.tier_only();
        }
        open::fit_segments_to_room(&mut cfg, &mut retention);
        report.reindexed = open::reconcile_index(indexer.as_mut(), &store, &retention);
        let dir = store.segments_dir();
        open::recover_on_full_disk(&dir, full, &mut retention, indexer.as_mut(), &mut report)?;
        open::reconcile_ledger(&dir, &retention);
        open::apply_retention(&mut retention, indexer.as_mut(), &mut report)?;
        let pipeline = open::start_threads(&cfg, &dir, indexer, retention, next_seq)?;
        Ok((
            StoreWriter::assemble(cfg, &store, lock, next_seq, pipeline),
            report,
        ))
    }

    /// Registers an interface and returns its store id. An interface equal to one already
    /// registered gets the same id.
    pub fn add_interface(&mut self, iface: Interface) -> u32 {
        if let Some(i) = self.ifaces.iter().position(|x| *x == iface) {
            return i as u32;
        }
        self.ifaces.push(iface);
        self.local.push(None);
        (self.ifaces.len() - 1) as u32
    }

    /// The configuration in force (after the budget capped the segment size).
    /// A handle that replaces the retention budgets while the writer runs (a capture's
    /// SIGHUP reload), from any thread.
    pub fn budget_handle(&self) -> BudgetHandle {
        BudgetHandle {
            tx: self.budgets_tx.clone(),
            root: self.root.clone(),
            block_bytes: self.cfg.block_bytes,
            gauge_budget: self.gauge.budget.clone(),
        }
    }

    pub fn config(&self) -> &WriterConfig {
        &self.cfg
    }

    /// Appends one packet. Waits when the pipeline is full (back-pressure from the disk).
    #[inline]
    pub fn append(&mut self, iface: u32, ts_ns: u64, orig_len: u32, data: &[u8]) -> Result<()> {
        self.append_with(iface, ts_ns, orig_len, data, &[])
    }

    /// Appends one packet with its pcapng options (comments, `epb_flags`, ... in the form of
    /// [`capsule_pcap::options`], as an imported file gave them), stored in its EPB and
    /// exported with it. A packet the cut-off cuts loses its options with its payload.
    pub fn append_with(
        &mut self,
        iface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
        options: &[u8],
    ) -> Result<()> {
        if data.len() > MAX_PACKET {
            return Err(StoreError::PacketTooLong {
                len: data.len(),
                max: MAX_PACKET,
            });
        }
        let Some(linktype) = self.ifaces.get(iface as usize).map(|d| d.linktype) else {
            return Err(StoreError::UnknownInterface(iface));
        };
        // Export orders equal timestamps by block, so ties must not be split across lanes:
        // a run of equal timestamps stays in one lane (µs captures have many), and once a
        // packet arrives out of time order the segment continues as a single stream (all
        // lanes cut first), so ties an unsorted input scatters still keep arrival order.
        // A block's DSCP mask stays exact either way, so planning stays right.
        if !self.disordered && self.last.is_some_and(|(ts, _)| ts_ns < ts) {
            self.flush()?;
            self.disordered = true;
        }
        // With an indexer that wants records, or a cut-off, the packet is dissected here,
        // once, while it is in this thread's cache; the lane comes from the same dissection.
        let scratch = (self.collect || self.cut.is_some()).then(|| {
            let mut d = self.scratch.take().unwrap_or_default();
            capsule_wire::dissect_in_place(&mut d, linktype, data);
            d
        });
        let dissected = scratch.as_deref();
        let lane = match self.last {
            _ if self.disordered => 0,
            Some((ts, lane)) if ts == ts_ns => lane,
            _ => match &dissected {
                Some(d) => d.ip.map_or(0, |ip| usize::from(ip.dscp >> 3) & (LANES - 1)),
                None => lane_of(linktype, data),
            },
        };
        self.last = Some((ts_ns, lane));
        // The cut-off decides on the whole packet; a cut packet keeps only its headers.
        let kept = match (self.cut.as_mut(), &dissected) {
            (Some(c), Some(d)) => c.decide(linktype, ts_ns, orig_len, data, d),
            _ => None,
        };
        let stored = match kept {
            Some(n) => &data[..n.min(data.len())],
            None => data,
        };
        let epb_len = match kept {
            Some(_) => pw::pcapng_epb_len(stored.len()),
            None => pw::pcapng_epb_len_with(stored.len(), options.len()),
        };
        let open = &self.lanes[lane];
        if open.records > 0 && open.content_len() + epb_len > self.cfg.block_bytes {
            self.cut_block(lane)?;
        }
        if self.lanes[lane].records == 0 {
            self.maybe_rotate_segment(ts_ns)?;
            let now = Instant::now();
            self.lanes[lane].opened = Some(now);
            self.last_opened = now;
        }
        let local = match self.local[iface as usize] {
            Some(l) => l,
            None => self.declare_interface(iface, ts_ns)?,
        };
        let b = &mut self.lanes[lane];
        if b.records == 0 {
            b.first_ns = ts_ns;
            b.last_ns = ts_ns;
        } else {
            if ts_ns < b.prev_ns {
                b.sorted = false;
            }
            b.first_ns = b.first_ns.min(ts_ns);
            b.last_ns = b.last_ns.max(ts_ns);
        }
        b.prev_ns = ts_ns;
        b.records += 1;
        b.room_for(epb_len);
        if let Some(d) = dissected.filter(|_| self.collect) {
            // As the record will hold it: a cut record's original length is at least the
            // packet's captured length.
            let orig = if kept.is_some() {
                orig_len.max(data.len() as u32)
            } else {
                orig_len
            };
            let cut = kept.is_some();
            b.infos
                .push(Record::of(ts_ns, orig, stored.len() as u32, cut, d));
        }
        if kept.is_some() {
            pw::pcapng_cut(
                &mut b.buf,
                local,
                ts_ns,
                orig_len.max(data.len() as u32),
                stored,
            );
            self.cut_packets += 1;
        } else {
            pw::pcapng_epb_with(&mut b.buf, local, ts_ns, orig_len, data, options);
            if let Some(f) = &mut b.framing {
                f.step(&b.buf);
            }
            b.packets += 1;
            let wire = u64::from(orig_len.max(data.len() as u32));
            b.wire_bytes += wire;
            self.packets += 1;
            self.wire_bytes += wire;
        }
        if self.seg_first_ns.is_none() {
            self.seg_first_ns = Some(ts_ns);
        }
        if scratch.is_some() {
            self.scratch = scratch;
        }
        Ok(())
    }

    /// Gives store interface `iface` an id in the current segment, and sends its interface
    /// block at once, in a block of its own: every block cut later, in any lane, follows it
    /// in the file, so no packet block can precede the interface it names.
    fn declare_interface(&mut self, iface: u32, ts_ns: u64) -> Result<u32> {
        let l = self.local_count;
        self.local_count += 1;
        self.local[iface as usize] = Some(l);
        let def = self.ifaces[iface as usize].clone();
        let mut data = Vec::with_capacity(64 + def.name.as_ref().map_or(0, |n| n.len()));
        pw::pcapng_idb(&mut data, &def);
        let meta = BlockMeta {
            first_ns: ts_ns,
            last_ns: ts_ns,
            uncompressed_len: data.len() as u32,
            new_interfaces: vec![def],
            ..BlockMeta::default()
        };
        self.send(meta, data)?;
        Ok(l)
    }

    /// Records interface counters as a pcapng Interface Statistics Block at `ts_ns`: what
    /// store interface `iface` received and dropped so far (cumulative, as ISBs count). It
    /// goes in a block of its own (no packets), so that the export of a window holding it
    /// carries it and can say how many packets were lost in that window.
    pub fn record_stats(
        &mut self,
        iface: u32,
        ts_ns: u64,
        received: Option<u64>,
        dropped: Option<u64>,
    ) -> Result<()> {
        if iface as usize >= self.ifaces.len() {
            return Err(StoreError::UnknownInterface(iface));
        }
        let local = match self.local[iface as usize] {
            Some(l) => l,
            None => self.declare_interface(iface, ts_ns)?,
        };
        let mut data = Vec::with_capacity(64);
        pw::pcapng_isb(&mut data, local, ts_ns, received, dropped);
        let meta = BlockMeta {
            first_ns: ts_ns,
            last_ns: ts_ns,
            uncompressed_len: data.len() as u32,
            ..BlockMeta::default()
        };
        self.send(meta, data)
    }

    /// The number of capture readers whose kernel rings fill up faster than they empty them
    /// (each reader adds one while it is behind and takes it back when it caught up). While
    /// it is not 0 and [`WriterConfig::adaptive`] is set, every block is stored
    /// ([`Level::Store`]), so that the compressors leave the CPU to the reader. The compressors' own queue says
    /// nothing about that: on a machine short of CPU they keep up at a good level while the
    /// reader, sharing the cores with them, falls behind the NIC.
    pub fn urgency(&self) -> Arc<AtomicU32> {
        self.urgent.clone()
    }

    /// A handle that reads how the compressors have been keeping up, from any thread.
    pub fn pressure_gauge(&self) -> PressureGauge {
        self.gauge.clone()
    }

    /// Cuts every lane's block that is older than the block age. Capture calls this often.
    ///
    /// Once every block is cut and none has opened for [`WriterConfig::idle_seal`] (no
    /// packet for that long), it also seals the open segment when that holds at least
    /// 1/[`IDLE_SEAL_FRACTION`] of the segment size or is older than the segment age: its raw blocks (stored while the compressors were behind) would otherwise sit
    /// uncompressed, and its packets outside any sealed segment, until traffic came back.
    pub fn tick(&mut self) -> Result<()> {
        for lane in 0..LANES {
            let b = &self.lanes[lane];
            if b.records > 0 && b.opened.is_some_and(|t| t.elapsed() >= self.cfg.block_age) {
                self.cut_block(lane)?;
            }
        }
        if self.seg_uncompressed > 0
            // Idle: every block cut (by age, so no packet came for a block age) and none
            // opened for the idle time.
            && self.lanes.iter().all(|l| l.records == 0)
            && self.last_opened.elapsed() >= self.cfg.idle_seal
            && (self.ratio.estimate(self.seg_uncompressed)
                >= self.cfg.segment_bytes / IDLE_SEAL_FRACTION
                || self.seg_opened.elapsed() >= self.cfg.segment_age)
        {
            let segment = self.segment;
            self.rotate_segment()?;
            // A full queue (never expected: one request per idle period) only delays the
            // seal to the next segment's first block, which seals it as before.
            let _ = self.seal_tx.try_send(SealRequest {
                segment,
                after_order: self.order,
            });
        }
        Ok(())
    }

    /// Cuts every open block now, so its packets reach the disk.
    pub fn flush(&mut self) -> Result<()> {
        for lane in 0..LANES {
            if self.lanes[lane].records > 0 {
                self.cut_block(lane)?;
            }
        }
        Ok(())
    }

    /// Packets appended and stored so far (cut packets are not counted: see
    /// [`StoreWriter::cut_packets`]).
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Packets appended so far that the cut-off did not store (only their headers, in
    /// cut-packet records, for the side index).
    pub fn cut_packets(&self) -> u64 {
        self.cut_packets
    }

    /// Sets the per-class cut-off: from now on `policy` decides, for every packet appended,
    /// whether it is stored whole or only its headers are kept for the side index (see
    /// [`CutPolicy`]). Its state lives as long as the writer, across segments.
    pub fn set_cut_policy(&mut self, policy: Box<dyn CutPolicy>) {
        self.cut = Some(policy);
    }

    /// Starts a new segment when the current one is big or old enough. All lanes' open
    /// blocks are cut first, so they land in the segment their packets belong to.
    fn maybe_rotate_segment(&mut self, ts_ns: u64) -> Result<()> {
        if self.seg_uncompressed == 0 {
            return Ok(());
        }
        let age = self.cfg.segment_age;
        let span = self.seg_first_ns.map_or(0, |f| ts_ns.saturating_sub(f));
        if self.ratio.estimate(self.seg_uncompressed) >= self.cfg.segment_bytes
            || self.seg_opened.elapsed() >= age
            || span >= age.as_nanos() as u64
        {
            self.rotate_segment()?;
        }
        Ok(())
    }

    /// Cuts every open block into the current segment and starts the next one.
    fn rotate_segment(&mut self) -> Result<()> {
        self.flush()?;
        self.disordered = false;
        self.segment += 1;
        self.seg_uncompressed = 0;
        self.seg_opened = Instant::now();
        self.seg_first_ns = None;
        self.local.iter_mut().for_each(|l| *l = None);
        self.local_count = 0;
        Ok(())
    }

    fn cut_block(&mut self, lane: usize) -> Result<()> {
        if !self.lanes[lane].sorted {
            self.lanes[lane].sort(&mut self.spare);
        }
        let fresh = self
            .pool
            .try_recv()
            .unwrap_or_else(|_| block_buffer(self.cfg.block_bytes));
        let mut b = std::mem::take(&mut self.lanes[lane]);
        if self.collect {
            self.lanes[lane].infos = self.records_pool.try_recv().unwrap_or_default();
        }
        self.lanes[lane].reset(fresh, matches!(self.tx, Some(Pipe::Store(..))));
        let records = self.collect.then(|| std::mem::take(&mut b.infos));
        let content = b.content_len();
        let framed = b.finish_frame();
        let data = std::mem::take(&mut b.buf);
        let meta = BlockMeta {
            first_ns: b.first_ns,
            last_ns: b.last_ns,
            packets: b.packets,
            wire_bytes: b.wire_bytes,
            uncompressed_len: content as u32,
            ..BlockMeta::default()
        };
        self.seg_uncompressed += content as u64;
        self.send_with(meta, data, framed, records)
    }

    /// Hands a finished block to the compressors (at the store level, to the writer thread).
    fn send(&mut self, meta: BlockMeta, data: Vec<u8>) -> Result<()> {
        self.send_with(meta, data, None, None)
    }

    /// [`StoreWriter::send`] of a block that may be built in its frame (`framed`: where its
    /// body starts and the body's checksum; the store pipe only, see [`OpenBlock`]), with
    /// what the side index reads of its records.
    fn send_with(
        &mut self,
        mut meta: BlockMeta,
        data: Vec<u8>,
        framed: Option<(usize, u32)>,
        records: Option<Vec<Record>>,
    ) -> Result<()> {
        let (order, segment) = (self.order, self.segment);
        self.order += 1;
        self.blocks += 1;
        let sent = match &self.tx {
            Some(Pipe::Compress(tx)) => {
                debug_assert!(
                    framed.is_none(),
                    "only the store pipe builds blocks in frames"
                );
                tx.send(RawBlock {
                    order,
                    segment,
                    meta,
                    data,
                    records,
                })
                .is_ok()
            }
            Some(Pipe::Store(tx, rungs)) => {
                // At the configured level, as a compressor that does not follow the ladder
                // counts it.
                rungs[0].fetch_add(1, Ordering::Relaxed);
                meta.compressed_len = match framed {
                    // The frame's head and empty blocks are the writer's: the most they add.
                    Some((body, _)) => (data.len() - body + format::META_PREFIX_LEN + 9) as u32,
                    None => format::raw_frame_len(data.len()) as u32,
                };
                meta.compression = format::Compression::Stored;
                tx.send(Compressed {
                    order,
                    segment,
                    meta,
                    framed,
                    frame: Vec::new(),
                    raw_frame: framed.is_none(),
                    data,
                    records,
                })
                .is_ok()
            }
            None => false,
        };
        if !sent {
            return Err(self.stopped());
        }
        Ok(())
    }

    /// Compacts every sealed segment with blocks below `target` now, on this thread and
    /// unpaused (`capsule compact`): each is rewritten beside itself, synced, and committed by
    /// the writer thread (rename, directory sync, retention's size, the indexer). `on_each` is
    /// told of each one.
    pub fn compact_all(
        &mut self,
        target: Level,
        on_each: &mut dyn FnMut(&CompactedSegment),
    ) -> Result<CompactReport> {
        self.compact_plan(&compact::Plan::all(target), on_each)
    }

    /// As [`StoreWriter::compact_all`], each sealed segment brought to the level `plan`
    /// gives it (`capsule compact --older-than D --level N`: only segments the age tier
    /// holds old, at N).
    pub fn compact_plan(
        &mut self,
        plan: &compact::Plan,
        on_each: &mut dyn FnMut(&CompactedSegment),
    ) -> Result<CompactReport> {
        if !plan.is_valid() {
            return Err(StoreError::Config(format!(
                "compaction levels {plan:?} are not valid"
            )));
        }
        let Some(tx) = self.compact_tx.clone() else {
            return Err(self.stopped());
        };
        compactor::run_all(&self.seg_dir, plan, &tx, &self.compact_counters, on_each)
    }

    /// Stops the background compactor (it removes a temporary file it was writing).
    fn stop_compactor(&mut self) {
        self.compact_stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.compactor.take() {
            let _ = h.join();
        }
        self.compact_tx = None;
    }

    /// Joins the pipeline after it broke and returns the error that broke it.
    fn stopped(&mut self) -> StoreError {
        self.stop_compactor();
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let why = match self.writer.take().map(|w| w.join()) {
            Some(Ok(Err(e))) => Arc::new(e),
            Some(Err(_)) => Arc::new(StoreError::PipelineBroken("the writer thread panicked")),
            Some(Ok(Ok(_))) => Arc::new(StoreError::PipelineBroken("the pipeline closed")),
            // Already joined: say again why it stopped.
            None => self
                .failed
                .clone()
                .unwrap_or_else(|| Arc::new(StoreError::PipelineBroken("the pipeline closed"))),
        };
        self.failed = Some(why.clone());
        StoreError::WriterStopped(why)
    }

    /// Cuts the last block, seals the open segment, stops the threads and reports totals.
    pub fn finish(mut self) -> Result<WriteReport> {
        if let Some(why) = &self.failed {
            // The pipeline already stopped; what it wrote is recovered by the next writer.
            return Err(StoreError::WriterStopped(why.clone()));
        }
        self.flush()?;
        self.stop_compactor();
        self.tx = None;
        for t in self.threads.drain(..) {
            t.join()
                .map_err(|_| StoreError::PipelineBroken("a compressor thread panicked"))?;
        }
        let mut report = match self.writer.take().map(|w| w.join()) {
            Some(Ok(r)) => r?,
            _ => return Err(StoreError::PipelineBroken("the writer thread panicked")),
        };
        report.packets = self.packets;
        report.cut_packets = self.cut_packets;
        report.wire_bytes = self.wire_bytes;
        report.blocks = self.blocks;
        Ok(report)
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        // Without finish(): stop the threads; the open segment stays as a torn segment that
        // the next writer recovers, exactly as after a crash.
        self.stop_compactor();
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}
