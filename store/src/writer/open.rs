//! The phases of [`StoreWriter::open_with`], in the order it runs them: the configuration
//! checked, the store locked, the budgets saved, what crashes left behind cleared up, torn
//! segments recovered, retention set up and the segment size fitted to the room, the
//! derived data and the ledger reconciled, retention applied, then the pipeline's threads
//! started and the producer's lanes opened.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, Sender};

use super::compactor::{self, CompactCounters, CompactRequest};
use super::compress::{compress_loop, Ladder, Signals};
use super::disk::{DiskLoad, WriterThread};
use super::retention::Retention;
use super::{
    block_buffer, check_byte_budget, compact, Compressed, Level, OpenBlock, OpenReport, Pipe,
    PressureGauge, QueueLen, Ratio, RawBlock, SealRequest, StoreWriter, WriteReport, WriterConfig,
    LANES, SEGMENTS_IN_ROOM, STALE_TEMP_AGE,
};
use crate::budget::Budgets;
use crate::error::{Result, StoreError};
use crate::indexer::{Indexer, Record};
use crate::segment::{self, SegmentState};
use crate::store::Store;

/// Checks the block size, the segment size, the byte budget and the level, and settles the
/// sizes they imply: a segment of at most a quarter of the byte budget and at least one
/// block, and 1 to 64 compressor threads.
pub(super) fn checked_config(mut cfg: WriterConfig) -> Result<WriterConfig> {
    if cfg.block_bytes < 4096 || cfg.block_bytes > 64 << 20 {
        return Err(StoreError::Config(format!(
            "block size {} bytes is outside 4 KiB..64 MiB",
            cfg.block_bytes
        )));
    }
    // A segment holds whole blocks: one is the least it can hold.
    if cfg.segment_bytes < cfg.block_bytes as u64 {
        return Err(StoreError::Config(format!(
            "segment size {} bytes is below the minimum, the block size of {} bytes (a \
             segment holds at least one block; blocks are 4 KiB..64 MiB)",
            cfg.segment_bytes, cfg.block_bytes
        )));
    }
    if let Some(max) = cfg.max_bytes {
        check_byte_budget(max, cfg.block_bytes)?;
        cfg.segment_bytes = cfg.segment_bytes.min(max / 4);
    }
    cfg.segment_bytes = cfg.segment_bytes.max(cfg.block_bytes as u64);
    cfg.threads = cfg.threads.clamp(1, 64);
    if !cfg.level.is_valid() {
        return Err(StoreError::Config(format!(
            "zstd level {} is outside {}..={}",
            cfg.level,
            Level::MIN_ZSTD,
            Level::MAX_ZSTD
        )));
    }
    Ok(cfg)
}

/// The retention budgets of `cfg`, saved in the store when they changed (and
/// `cfg.save_budgets` asks for it). A store that cannot save them (a full disk) still
/// applies them to this writer: a capture never stops for its bookkeeping.
pub(super) fn save_budgets(store: &Store, cfg: &WriterConfig) -> Budgets {
    let budgets = Budgets {
        max_bytes: cfg.max_bytes,
        min_free: cfg.min_free,
        max_age: cfg.max_age,
    };
    let unchanged = crate::budget::load(store.root()).ok().flatten() == Some(budgets);
    if cfg.save_budgets && !unchanged {
        if let Err(e) = crate::budget::save(store.root(), &budgets) {
            tracing::warn!(
                "cannot save the retention budgets in the store (they apply to this \
                 writer only): {}",
                crate::error::chain(&e)
            );
        }
    }
    budgets
}

/// Clears up after processes that were killed: rebuilds of torn segments a crash
/// interrupted are finished or restarted, temporary files of compactions are removed (only
/// a holder of the writer lock compacts, so one found now is left from a crash, and the
/// segment it was to replace is whole), and so are other old temporary files (the side
/// index's, `last-seq`'s, the budgets'). Only old ones: `capsule reindex` writes without
/// the lock. Run before recovery.
pub(super) fn clear_crash_leftovers(store: &Store, report: &mut OpenReport) -> Result<()> {
    let dir = store.segments_dir();
    segment::resume_rebuilds(&dir)?;
    report.compaction_leftovers = compact::remove_leftovers(&dir)?;
    for d in [store.root().to_path_buf(), dir.clone(), store.index_dir()] {
        match crate::fsx::remove_stale_temps(&d, STALE_TEMP_AGE) {
            Ok(gone) => report.stale_temps.extend(gone),
            Err(e) => tracing::warn!(
                "cannot remove stale temporary files in {}: {}",
                d.display(),
                crate::error::chain(&e)
            ),
        }
    }
    Ok(())
}

/// Recovers every torn (open) segment a crash left: each is cut back to its last whole
/// block and sealed, or moved aside. Recovery writes a footer: the segments it could not
/// recover for a full disk are returned, to be tried again by [`recover_on_full_disk`] once
/// retention (and the indexer, for deleting derived data) is set up.
pub(super) fn recover_torn_segments(
    store: &Store,
    report: &mut OpenReport,
) -> Result<Vec<PathBuf>> {
    let dir = store.segments_dir();
    let mut full = Vec::new();
    for e in store.list()? {
        if e.state == SegmentState::Open {
            match segment::recover(&dir, &e.path) {
                Ok(r) => report.recovered.push(r),
                Err(err) if err.is_disk_full() => full.push(e.path),
                Err(err) => return Err(err),
            }
        }
    }
    Ok(full)
}

/// Retention over the sealed segments the store now holds (counting the open ones it could
/// not recover), and the number of the next segment.
pub(super) fn start_retention(store: &Store, budgets: &Budgets) -> Result<(Retention, u64)> {
    let dir = store.segments_dir();
    let (sealed, open): (Vec<_>, Vec<_>) = store
        .list()?
        .into_iter()
        .partition(|e| e.state == SegmentState::Sealed);
    let next_seq = crate::seq::next(&dir, store.highest_seq()?)?;
    let mut retention = Retention::new(&dir, sealed, budgets);
    open.iter().for_each(|e| retention.grew(e.bytes));
    Ok((retention, next_seq))
}

/// Fits the segment size to the room the free-space floor leaves, and reserves room for
/// one segment's compaction when the writer compacts.
///
/// A segment must stay a small part of what the free-space floor leaves the store:
/// retention can only delete sealed segments, so an open segment as large as the room
/// would fill the disk with nothing to delete (a 64 MiB disk and 1 GiB segments wedged
/// capture). An eighth: the open segment, one being compacted and its copy, and the sealed
/// ones retention deletes from all fit.
pub(super) fn fit_segments_to_room(cfg: &mut WriterConfig, retention: &mut Retention) {
    if let Some(room) = retention.room_above_floor() {
        let cap = (room / SEGMENTS_IN_ROOM).max(cfg.block_bytes as u64);
        if cap < cfg.segment_bytes {
            tracing::info!(
                "segments are sealed at {cap} bytes instead of {}: the store has room \
                 for {room} bytes above its free-space floor",
                cfg.segment_bytes
            );
            cfg.segment_bytes = cap;
        }
    }
    if cfg.compact && (matches!(cfg.level, Level::Zstd(_)) || cfg.age_tier.is_some()) {
        retention.reserve(cfg.segment_bytes);
    }
}

/// Has the indexer rebuild the derived data a crash (or an older build) left without it,
/// for the sealed segments retention keeps; returns the segments it rebuilt. Derived data
/// can always be rebuilt later (`capsule reindex`, or the next writer): an error here is
/// logged, and writing goes on.
pub(super) fn reconcile_index(
    indexer: &mut dyn Indexer,
    store: &Store,
    retention: &Retention,
) -> Vec<u64> {
    let remaining: Vec<_> = retention.sealed().cloned().collect();
    indexer.reconcile(store, &remaining).unwrap_or_else(|e| {
        tracing::warn!(
            "cannot bring the index up to date (the next writer or `capsule reindex` \
             does): {}",
            crate::error::chain(&e)
        );
        Vec::new()
    })
}

/// Recovers the torn segments a full disk stopped [`recover_torn_segments`] from, deleting
/// the oldest sealed segments until each fits. One that still does not fit with nothing
/// left to delete stays open (readers read it through its block headers; the next open
/// tries again), and writing goes on with the next segment number.
pub(super) fn recover_on_full_disk(
    dir: &Path,
    full: Vec<PathBuf>,
    retention: &mut Retention,
    indexer: &mut dyn Indexer,
    report: &mut OpenReport,
) -> Result<()> {
    for path in full {
        loop {
            match segment::recover(dir, &path) {
                Ok(r) => {
                    if let Some(s) = r.sealed() {
                        retention.grew(s.bytes);
                        retention.sealed_one(s);
                    }
                    report.recovered.push(r);
                    break;
                }
                Err(err) if err.is_disk_full() => match retention.evict_for_space(indexer)? {
                    Some(d) => report.deleted_for_space.push(d),
                    None => {
                        tracing::warn!(
                            "disk full: cannot seal torn segment {} and no sealed segment \
                             is left to delete; it stays open",
                            path.display()
                        );
                        report.left_open.push(path);
                        break;
                    }
                },
                Err(err) => return Err(err),
            }
        }
    }
    Ok(())
}

/// Adds to the ledger a line for every sealed segment it lacks (a store older than the
/// ledger, a segment recovered now, a crash between a seal and its line). A ledger that
/// cannot be written is logged: writing goes on.
pub(super) fn reconcile_ledger(dir: &Path, retention: &Retention) {
    let sealed_now: Vec<_> = retention
        .sealed()
        .map(|e| (e.seq, e.path.as_path(), e.bytes))
        .collect();
    if let Err(e) = crate::ledger::reconcile(dir, &sealed_now) {
        tracing::warn!(
            "cannot bring the ledger of sealed segments up to date: {}",
            crate::error::chain(&e)
        );
    }
}

/// Counts the segments the store holds (sealed, and torn ones left open), then deletes the
/// oldest sealed segments (and their derived data) until the budgets hold.
pub(super) fn apply_retention(
    retention: &mut Retention,
    indexer: &mut dyn Indexer,
    report: &mut OpenReport,
) -> Result<()> {
    report.existing_segments = retention.sealed().count() + report.left_open.len();
    report.deleted = retention.make_room(indexer, 0)?;
    Ok(())
}

/// What the producer keeps of the running pipeline: the ends of its channels, its shared
/// counters and its threads.
pub(super) struct Pipeline {
    pub(super) pipe: Pipe,
    pub(super) pool: Receiver<Vec<u8>>,
    pub(super) records_pool: Receiver<Vec<Record>>,
    pub(super) seal_tx: Sender<SealRequest>,
    pub(super) compact_tx: Sender<CompactRequest>,
    pub(super) budgets_tx: Sender<Budgets>,
    pub(super) ratio: Arc<Ratio>,
    pub(super) urgent: Arc<AtomicU32>,
    pub(super) gauge: PressureGauge,
    pub(super) compact_counters: Arc<CompactCounters>,
    pub(super) threads: Vec<JoinHandle<()>>,
    pub(super) writer: JoinHandle<Result<WriteReport>>,
    pub(super) compactor: Option<JoinHandle<()>>,
    pub(super) compact_stop: Arc<AtomicBool>,
    /// The indexer wants a [`Record`] of each record ([`Indexer::wants_records`]).
    pub(super) collect: bool,
}

/// Starts the pipeline: the block buffer pool filled, the compressor threads (none at the
/// store rung, see [`Pipe::Store`]), the writer thread, which takes over `indexer` and
/// `retention` and starts segment `next_seq`, and the background compactor when `cfg`
/// compacts.
pub(super) fn start_threads(
    cfg: &WriterConfig,
    dir: &Path,
    indexer: Box<dyn Indexer>,
    retention: Retention,
    next_seq: u64,
) -> Result<Pipeline> {
    // Live capture (adaptive) gets a deeper queue: 16 blocks absorb a burst while the
    // compressors step down to faster levels (see compress_loop).
    let depth = if cfg.adaptive {
        (cfg.threads * 2).max(16)
    } else {
        cfg.threads * 2
    };
    let (tx, raw_rx) = bounded::<RawBlock>(depth);
    let (done_tx, done_rx) = bounded::<Compressed>(depth);
    let (pool_tx, pool) = block_pool(cfg, depth);
    // Record lists go back too: a fresh one a block is a few hundred KiB of page faults.
    let (records_tx, records_pool) = bounded::<Vec<Record>>(depth + 2);
    let collect = indexer.wants_records();
    // Frame buffers go back from the writer thread to the compressors: a fresh 1 MiB
    // buffer per block costs page faults (about 2% of capture's CPU at -1000).
    let (frames_tx, frames_rx) = bounded::<Vec<u8>>(depth + cfg.threads);
    let ratio = Arc::new(Ratio::default());
    // At the store rung there is nothing to compress (see [`Pipe::Store`]).
    let compressors = if cfg.level == Level::Store {
        0
    } else {
        cfg.threads
    };
    let urgent = Arc::new(AtomicU32::new(0));
    let disk_bound = Arc::new(AtomicBool::new(false));
    let compact_counters = Arc::new(CompactCounters::default());
    let gauge = PressureGauge {
        rungs: Arc::default(),
        disk_bound: disk_bound.clone(),
        urgent: urgent.clone(),
        space: Arc::default(),
        compact: compact_counters.clone(),
        budget: Arc::new(AtomicU64::new(cfg.max_bytes.unwrap_or(u64::MAX))),
    };
    let threads = spawn_compressors(compressors, cfg, dir, &raw_rx, &done_tx, &frames_rx, &gauge)?;
    let pipe = if compressors == 0 {
        Pipe::Store(done_tx, gauge.rungs.clone())
    } else {
        drop(done_tx);
        Pipe::Compress(tx)
    };
    let (compact_tx, compact_rx) = bounded::<CompactRequest>(1);
    let (budgets_tx, budgets_rx) = bounded::<Budgets>(4);
    let (seal_tx, seal_rx) = bounded::<SealRequest>(4);
    let w = WriterThread {
        compact_rx,
        budgets_rx,
        seal_rx,
        dir: dir.to_path_buf(),
        indexer,
        pool: pool_tx,
        records_pool: records_tx,
        frames: frames_tx,
        retention,
        cfg: cfg.clone(),
        ratio: ratio.clone(),
        report: WriteReport::default(),
        disk: DiskLoad::new(disk_bound.clone()),
        space: gauge.space.clone(),
        redeclare: Vec::new(),
        redeclare_seq: next_seq,
        index_stale: false,
        heads: Vec::new(),
        lent: Vec::new(),
        small_writes: false,
    };
    let writer = std::thread::Builder::new()
        .name("capsule-writer".into())
        .spawn(move || w.run(done_rx))
        .map_err(|e| StoreError::io("start writer thread", dir, e))?;
    let compact_stop = Arc::new(AtomicBool::new(false));
    let compactor = spawn_compactor(
        cfg,
        dir,
        &pipe,
        &gauge,
        &compact_counters,
        &compact_stop,
        &compact_tx,
    )?;
    Ok(Pipeline {
        pipe,
        pool,
        records_pool,
        seal_tx,
        compact_tx,
        budgets_tx,
        ratio,
        urgent,
        gauge,
        compact_counters,
        threads,
        writer,
        compactor,
        compact_stop,
        collect,
    })
}

/// The pool of block buffers, sized to hold every buffer that can be away from the producer
/// at once (the blocks queued, the ones being compressed or written, a write queue's worth
/// of blocks lent to the segment, one open block per lane), so that none is dropped when a
/// write hands a batch back: a dropped buffer is a fresh one later, and a fresh one is page
/// faults on the capture thread (with the binary's allocator a 2 MiB huge page zeroed, 5%
/// of a store-rung capture's CPU when 2 of every 8 were). For live capture the buffers of
/// the steady state (one open block per lane, a write queue's worth lent to the segment,
/// two on their way) are made and touched now, before the first packet.
fn block_pool(cfg: &WriterConfig, depth: usize) -> (Sender<Vec<u8>>, Receiver<Vec<u8>>) {
    let steady = LANES + segment::DIRECT_FLUSH_BYTES / cfg.block_bytes.max(1) + 2;
    let in_flight = steady + 2 * depth + cfg.threads;
    let (pool_tx, pool) = bounded::<Vec<u8>>(in_flight);
    if cfg.adaptive {
        // Made as blocks are cut, each new one stopped the capture thread for its page
        // faults (a 2 MiB huge page is zeroed at its first touch; on a virtual machine the
        // host backs it then too): 7,000 packets dropped at the start of a 5 s capture.
        for _ in 0..steady {
            // Written, not allocated zeroed: `vec![0; n]` maps fresh zero pages and
            // touches none of them.
            #[allow(clippy::slow_vector_initialization)]
            let mut buf = block_buffer(cfg.block_bytes);
            buf.resize(buf.capacity(), 0);
            buf.clear();
            let _ = pool_tx.try_send(buf);
        }
    }
    (pool_tx, pool)
}

/// Starts `n` compressor threads, taking raw blocks from `raw_rx` and handing frames to the
/// writer thread through `done_tx`; they share one ladder of levels and the pressure signals.
fn spawn_compressors(
    n: usize,
    cfg: &WriterConfig,
    dir: &Path,
    raw_rx: &Receiver<RawBlock>,
    done_tx: &Sender<Compressed>,
    frames_rx: &Receiver<Vec<u8>>,
    gauge: &PressureGauge,
) -> Result<Vec<JoinHandle<()>>> {
    let ladder = Arc::new(std::sync::Mutex::new(Ladder::new(Instant::now())));
    let mut threads = Vec::new();
    for i in 0..n {
        let rx = raw_rx.clone();
        let ladder = ladder.clone();
        let urgent_c = gauge.urgent.clone();
        let disk_c = gauge.disk_bound.clone();
        let rungs = gauge.rungs.clone();
        let out = done_tx.clone();
        let frames = frames_rx.clone();
        let (level, adaptive) = (cfg.level, cfg.adaptive);
        let h = std::thread::Builder::new()
            .name(format!("capsule-zstd-{i}"))
            .spawn(move || {
                let signals = Signals {
                    urgent: urgent_c,
                    disk_bound: disk_c,
                    rungs,
                    ladder,
                };
                compress_loop(level, adaptive, rx, out, frames, signals)
            })
            .map_err(|e| StoreError::io("start compressor thread", dir, e))?;
        threads.push(h);
    }
    Ok(threads)
}

/// Starts the background compactor when `cfg` compacts (to a zstd level, or an age tier):
/// it recompresses sealed segments while the pipeline is not busy and sends each result
/// to the writer thread to commit.
fn spawn_compactor(
    cfg: &WriterConfig,
    dir: &Path,
    pipe: &Pipe,
    gauge: &PressureGauge,
    counters: &Arc<CompactCounters>,
    stop: &Arc<AtomicBool>,
    to_writer: &Sender<CompactRequest>,
) -> Result<Option<JoinHandle<()>>> {
    let plan = compact::Plan {
        base: matches!(cfg.level, Level::Zstd(_)).then_some(cfg.level),
        tier: cfg.age_tier,
    };
    if !(cfg.compact && (plan.base.is_some() || plan.tier.is_some())) {
        return Ok(None);
    }
    if let Level::Zstd(target) = cfg.level {
        counters.target.store(target as u32, Ordering::Relaxed);
        // `compact_target` shows only a base level being brought up.
        counters.running.store(true, Ordering::Relaxed);
    }
    if let (Some(t), Some(Level::Zstd(l))) = (plan.tier, plan.tier_level()) {
        counters.tier_level.store(l as u32, Ordering::Relaxed);
        counters.tier_age_ns.store(
            u64::try_from(t.age.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        counters.tier.store(true, Ordering::Relaxed);
    }
    let queue = match pipe {
        Pipe::Compress(tx) => QueueLen::Raw(tx.clone()),
        Pipe::Store(tx, _) => QueueLen::Stored(tx.clone()),
    };
    let busy = compactor::Busy::new(
        gauge.urgent.clone(),
        gauge.disk_bound.clone(),
        gauge.rungs.clone(),
        queue,
    );
    let (d, stop, to_writer, counters) = (
        dir.to_path_buf(),
        stop.clone(),
        to_writer.clone(),
        counters.clone(),
    );
    let h = std::thread::Builder::new()
        .name("capsule-compact".into())
        .spawn(move || compactor::run_background(d, plan, busy, stop, to_writer, counters))
        .map_err(|e| StoreError::io("start compactor thread", dir, e))?;
    Ok(Some(h))
}

/// The producer's open block of each lane, with buffers from the pool (framed for the
/// store rung's [`Pipe::Store`]).
pub(super) fn open_lanes(
    pool: &Receiver<Vec<u8>>,
    block_bytes: usize,
    framed: bool,
) -> Vec<OpenBlock> {
    (0..LANES)
        .map(|_| {
            let mut b = OpenBlock::default();
            let buf = pool
                .try_recv()
                .unwrap_or_else(|_| block_buffer(block_bytes));
            b.reset(buf, framed);
            b
        })
        .collect()
}

impl StoreWriter {
    /// The writer over a started pipeline, at segment `next_seq`, holding the store's
    /// writer `lock`.
    pub(super) fn assemble(
        cfg: WriterConfig,
        store: &Store,
        lock: std::fs::File,
        next_seq: u64,
        p: Pipeline,
    ) -> StoreWriter {
        let lanes = open_lanes(&p.pool, cfg.block_bytes, matches!(p.pipe, Pipe::Store(..)));
        StoreWriter {
            cfg,
            ifaces: Vec::new(),
            local: Vec::new(),
            local_count: 0,
            lanes,
            spare: Vec::new(),
            last: None,
            disordered: false,
            failed: None,
            order: 0,
            segment: next_seq,
            seg_uncompressed: 0,
            seg_opened: Instant::now(),
            seg_first_ns: None,
            last_opened: Instant::now(),
            seal_tx: p.seal_tx,
            tx: Some(p.pipe),
            pool: p.pool,
            records_pool: p.records_pool,
            collect: p.collect,
            scratch: None,
            ratio: p.ratio,
            urgent: p.urgent,
            gauge: p.gauge,
            threads: p.threads,
            writer: Some(p.writer),
            compact_tx: Some(p.compact_tx),
            budgets_tx: p.budgets_tx,
            root: store.root().to_path_buf(),
            compact_counters: p.compact_counters,
            compactor: p.compactor,
            compact_stop: p.compact_stop,
            seg_dir: store.segments_dir(),
            cut: None,
            cut_packets: 0,
            packets: 0,
            wire_bytes: 0,
            blocks: 0,
            _lock: lock,
        }
    }
}
