//! The store writer: packets in, sealed segments and their side index out.
//!
//! ```text
//! producer (caller's thread)        compressor threads (N)      writer thread
//! append(packet)                    zstd frame + crc32c  ---->  reorder by block number
//!   -> lane = DSCP class              (independent frames)       retention: delete oldest
//!   -> EPB into that lane's block                                 append to segment file
//!   new interface -> its own block                                side index: dissect the
//!   block cut by size or age  ----->                                block, update flows
//!   (sorted by time if needed)                                    sync every interval
//!   segment cut at block edges                                    seal: footer, fsync,
//!                                                                   rename; write the index
//! ```
//!
//! The producer never touches the disk. Each lane (DSCP class, see [`LANES`]) fills its own
//! block, so a query for one class reads only that class's blocks. Blocks are cut at a size
//! (`block_bytes`) or an age (`block_age`, checked by [`StoreWriter::tick`]); segments at an
//! estimated on-disk size or an age, with every lane cut first. Channels between the stages
//! are bounded, so memory is bounded: when the disk is slower than the input,
//! [`StoreWriter::append`] waits.
//!
//! Retention makes the store a ring: before a block is written, the oldest sealed segments
//! (and their index files) are deleted until the block fits under `max_bytes`. Segments are
//! capped at a quarter of the budget so there is always an older segment to delete.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use capsule_pcap::{write as pw, Interface};
use crossbeam_channel::{bounded, Receiver, Sender};

use crate::error::{Result, StoreError};
use crate::format::{self, BlockMeta};
use crate::indexer::{Indexer, NoIndex};
use crate::segment::{self, Recovery, SealedSegment, SegmentFile, SegmentState};
use crate::store::{now_ns, SegmentEntry, Store};

/// The largest packet the store accepts (captured bytes).
pub const MAX_PACKET: usize = 256 * 1024;
/// Blocks are filled per lane: one lane per DSCP class (the DSCP's top three bits), so that
/// packets of a class share blocks and a query for one class reads only its blocks.
pub const LANES: usize = 8;

/// The lane of a packet: its DSCP class; non-IP packets go to lane 0 with best effort.
///
/// Reads only the DSCP ([`dscp_of`](capsule_wire::dscp_of), which agrees with the full
/// dissection the side index makes later on the writer thread): this runs on the producer,
/// for every packet live capture hands over.
fn lane_of(linktype: u16, data: &[u8]) -> usize {
    capsule_wire::dscp_of(linktype, data).map_or(0, |dscp| usize::from(dscp >> 3) & (LANES - 1))
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
    /// zstd compression level (-1000..=22), or [`STORE_LEVEL`]: blocks stored uncompressed.
    pub level: i32,
    /// Compression threads.
    pub threads: usize,
    /// How often the open segment is flushed to the medium.
    pub sync_interval: Duration,
    /// Compress at [`FAST_LEVEL`], then [`FASTEST_LEVEL`], while blocks queue up, rather than
    /// make the producer wait.
    /// For live capture, where waiting means the kernel drops packets; an import is better
    /// off waiting (nothing is lost) and keeping the ratio.
    pub adaptive: bool,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            block_bytes: 1 << 20,
            block_age: Duration::from_millis(100),
            segment_bytes: 1 << 30,
            segment_age: Duration::from_secs(600),
            max_bytes: None,
            level: 1,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            sync_interval: Duration::from_secs(1),
            adaptive: false,
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
    pub packets: u64,
    pub wire_bytes: u64,
    pub blocks: u64,
    pub uncompressed_bytes: u64,
    pub compressed_bytes: u64,
    pub sealed: Vec<SealedSegment>,
    pub deleted: Vec<DeletedSegment>,
    /// Bytes on disk at the end.
    pub store_bytes: u64,
}

struct RawBlock {
    order: u64,
    segment: u64,
    meta: BlockMeta,
    data: Vec<u8>,
}

struct Compressed {
    order: u64,
    segment: u64,
    meta: BlockMeta,
    frame: Vec<u8>,
    /// The uncompressed block, for the side index; then back to the producer's pool.
    data: Vec<u8>,
}

/// The block being filled by the producer.
#[derive(Debug, Default)]
struct OpenBlock {
    buf: Vec<u8>,
    packets: u32,
    wire_bytes: u64,
    first_ns: u64,
    last_ns: u64,
    prev_ns: u64,
    sorted: bool,
    opened: Option<Instant>,
}

impl OpenBlock {
    fn reset(&mut self, buf: Vec<u8>) {
        *self = OpenBlock {
            buf,
            sorted: true,
            ..OpenBlock::default()
        };
    }

    /// Rewrites the buffer with its packets in time order (a stable sort), through `spare`,
    /// which gets the old buffer back.
    ///
    /// Swapping keeps both buffers' memory: a fresh megabyte for every sorted block cost a
    /// page fault per 4 KiB written, and out-of-order input sorts most blocks (the producer
    /// spent about 16.5 instead of 14 ms on 64 MB, `store/append_cpu_unsorted`).
    fn sort(&mut self, spare: &mut Vec<u8>) {
        let mut pkts: Vec<_> = capsule_pcap::read::fragment_packets(&self.buf)
            .filter_map(|r| r.ok())
            .collect();
        pkts.sort_by_key(|p| p.ts_ns);
        spare.clear();
        spare.reserve(self.buf.len());
        for p in &pkts {
            pw::pcapng_epb(spare, p.iface, p.ts_ns, p.orig_len, p.data);
        }
        drop(pkts);
        std::mem::swap(&mut self.buf, spare);
        self.sorted = true;
    }
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
    failed: Option<String>,
    order: u64,
    segment: u64,
    seg_uncompressed: u64,
    seg_opened: Instant,
    seg_first_ns: Option<u64>,
    tx: Option<Sender<RawBlock>>,
    pool: Receiver<Vec<u8>>,
    ratio: Arc<Ratio>,
    /// Set by capture while its kernel rings fill up (see [`StoreWriter::urgency`]).
    urgent: Arc<AtomicU32>,
    gauge: PressureGauge,
    threads: Vec<JoinHandle<()>>,
    writer: Option<JoinHandle<Result<WriteReport>>>,
    packets: u64,
    wire_bytes: u64,
    blocks: u64,
    _lock: std::fs::File,
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
    /// recovers torn segments, applies the byte budget, has `indexer` bring its derived data
    /// up to date, and starts the pipeline threads. The writer thread then hands `indexer`
    /// every block it writes.
    pub fn open_with(
        root: &std::path::Path,
        mut cfg: WriterConfig,
        mut indexer: Box<dyn Indexer>,
    ) -> Result<(Self, OpenReport)> {
        if cfg.block_bytes < 4096 || cfg.block_bytes > 64 << 20 {
            return Err(StoreError::Config(format!(
                "block size {} bytes is outside 4 KiB..64 MiB",
                cfg.block_bytes
            )));
        }
        if let Some(max) = cfg.max_bytes {
            let min = 16 * cfg.block_bytes as u64;
            if max < min {
                return Err(StoreError::Config(format!(
                    "byte budget {max} is too small: it must hold at least 16 blocks \
                     ({min} bytes at the block size of {})",
                    cfg.block_bytes
                )));
            }
            cfg.segment_bytes = cfg.segment_bytes.min(max / 4);
        }
        cfg.segment_bytes = cfg.segment_bytes.max(cfg.block_bytes as u64);
        cfg.threads = cfg.threads.clamp(1, 64);
        if !(FASTEST_LEVEL..=22).contains(&cfg.level) && cfg.level != STORE_LEVEL {
            return Err(StoreError::Config(format!(
                "zstd level {} is outside -1000..=22 (and is not STORE_LEVEL)",
                cfg.level
            )));
        }

        let store = Store::create_or_open(root)?;
        let lock = store.lock_writer()?;
        let dir = store.segments_dir();
        let mut report = OpenReport::default();
        for e in store.list()? {
            if e.state == SegmentState::Open {
                report.recovered.push(segment::recover(&dir, &e.path)?);
            }
        }
        let entries = store.list()?;
        report.existing_segments = entries.len();
        let next_seq = store.highest_seq()? + 1;
        let mut sealed: VecDeque<(u64, PathBuf, u64)> = entries
            .into_iter()
            .map(|e| (e.seq, e.path, e.bytes))
            .collect();
        let mut total: u64 = sealed.iter().map(|s| s.2).sum();
        if let Some(max) = cfg.max_bytes {
            report.deleted =
                enforce_budget(&dir, indexer.as_mut(), &mut sealed, &mut total, max, 0)?;
        }
        // Derived data: rebuild what a crash (or an older build) left without it.
        let remaining: Vec<SegmentEntry> = sealed
            .iter()
            .map(|(seq, path, bytes)| SegmentEntry {
                seq: *seq,
                state: SegmentState::Sealed,
                path: path.clone(),
                bytes: *bytes,
            })
            .collect();
        report.reindexed = indexer.reconcile(&store, &remaining)?;

        // Live capture (adaptive) gets a deeper queue: 16 blocks absorb a burst while the
        // compressors step down to faster levels (see compress_loop).
        let depth = if cfg.adaptive {
            (cfg.threads * 2).max(16)
        } else {
            cfg.threads * 2
        };
        let (tx, raw_rx) = bounded::<RawBlock>(depth);
        let (done_tx, done_rx) = bounded::<Compressed>(depth);
        let (pool_tx, pool) = bounded::<Vec<u8>>(depth + 2);
        // Frame buffers go back from the writer thread to the compressors: a fresh 1 MiB
        // buffer per block costs page faults (about 2% of capture's CPU at -1000).
        let (frames_tx, frames_rx) = bounded::<Vec<u8>>(depth + cfg.threads);
        let ratio = Arc::new(Ratio::default());
        let mut threads = Vec::new();
        let urgent = Arc::new(AtomicU32::new(0));
        let disk_bound = Arc::new(AtomicBool::new(false));
        let gauge = PressureGauge {
            rungs: Arc::default(),
            disk_bound: disk_bound.clone(),
            urgent: urgent.clone(),
        };
        for i in 0..cfg.threads {
            let rx = raw_rx.clone();
            let urgent_c = urgent.clone();
            let disk_c = disk_bound.clone();
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
                    };
                    compress_loop(level, adaptive, rx, out, frames, signals)
                })
                .map_err(|e| StoreError::io("start compressor thread", &dir, e))?;
            threads.push(h);
        }
        drop(done_tx);
        let w = WriterThread {
            dir: dir.clone(),
            indexer,
            pool: pool_tx,
            frames: frames_tx,
            sealed,
            total,
            cfg: cfg.clone(),
            ratio: ratio.clone(),
            report: WriteReport::default(),
            disk: DiskLoad::new(disk_bound.clone()),
        };
        let writer = std::thread::Builder::new()
            .name("capsule-writer".into())
            .spawn(move || w.run(done_rx))
            .map_err(|e| StoreError::io("start writer thread", &dir, e))?;

        let lanes = (0..LANES)
            .map(|_| {
                let mut b = OpenBlock::default();
                b.reset(Vec::with_capacity(cfg.block_bytes + 64 * 1024));
                b
            })
            .collect();
        Ok((
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
                tx: Some(tx),
                pool,
                ratio,
                urgent,
                gauge,
                threads,
                writer: Some(writer),
                packets: 0,
                wire_bytes: 0,
                blocks: 0,
                _lock: lock,
            },
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
    pub fn config(&self) -> &WriterConfig {
        &self.cfg
    }

    /// Appends one packet. Waits when the pipeline is full (back-pressure from the disk).
    pub fn append(&mut self, iface: u32, ts_ns: u64, orig_len: u32, data: &[u8]) -> Result<()> {
        if data.len() > MAX_PACKET {
            return Err(StoreError::Packet(format!(
                "{} captured bytes exceed the {MAX_PACKET}-byte limit",
                data.len()
            )));
        }
        let Some(linktype) = self.ifaces.get(iface as usize).map(|d| d.linktype) else {
            return Err(StoreError::Packet(format!("unknown interface id {iface}")));
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
        let lane = match self.last {
            _ if self.disordered => 0,
            Some((ts, lane)) if ts == ts_ns => lane,
            _ => lane_of(linktype, data),
        };
        self.last = Some((ts_ns, lane));
        let epb_len = pw::pcapng_epb_len(data.len());
        let open = &self.lanes[lane];
        if open.packets > 0 && open.buf.len() + epb_len > self.cfg.block_bytes {
            self.cut_block(lane)?;
        }
        if self.lanes[lane].packets == 0 {
            self.maybe_rotate_segment(ts_ns)?;
            self.lanes[lane].opened = Some(Instant::now());
        }
        let local = match self.local[iface as usize] {
            Some(l) => l,
            None => self.declare_interface(iface, ts_ns)?,
        };
        let b = &mut self.lanes[lane];
        pw::pcapng_epb(&mut b.buf, local, ts_ns, orig_len, data);
        if b.packets == 0 {
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
        b.packets += 1;
        let wire = u64::from(orig_len.max(data.len() as u32));
        b.wire_bytes += wire;
        self.packets += 1;
        self.wire_bytes += wire;
        if self.seg_first_ns.is_none() {
            self.seg_first_ns = Some(ts_ns);
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
            return Err(StoreError::Packet(format!("unknown interface id {iface}")));
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
    /// it is not 0 and [`WriterConfig::adaptive`] is set, every block is compressed at
    /// [`FASTEST_LEVEL`],
    /// so that the compressors leave the CPU to the reader. The compressors' own queue says
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
    pub fn tick(&mut self) -> Result<()> {
        for lane in 0..LANES {
            let b = &self.lanes[lane];
            if b.packets > 0 && b.opened.is_some_and(|t| t.elapsed() >= self.cfg.block_age) {
                self.cut_block(lane)?;
            }
        }
        Ok(())
    }

    /// Cuts every open block now, so its packets reach the disk.
    pub fn flush(&mut self) -> Result<()> {
        for lane in 0..LANES {
            if self.lanes[lane].packets > 0 {
                self.cut_block(lane)?;
            }
        }
        Ok(())
    }

    /// Packets appended so far.
    pub fn packets(&self) -> u64 {
        self.packets
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
            self.flush()?;
            self.disordered = false;
            self.segment += 1;
            self.seg_uncompressed = 0;
            self.seg_opened = Instant::now();
            self.seg_first_ns = None;
            self.local.iter_mut().for_each(|l| *l = None);
            self.local_count = 0;
        }
        Ok(())
    }

    fn cut_block(&mut self, lane: usize) -> Result<()> {
        if !self.lanes[lane].sorted {
            self.lanes[lane].sort(&mut self.spare);
        }
        let fresh = self
            .pool
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(self.cfg.block_bytes + 64 * 1024));
        let mut b = std::mem::take(&mut self.lanes[lane]);
        self.lanes[lane].reset(fresh);
        let data = std::mem::take(&mut b.buf);
        let meta = BlockMeta {
            first_ns: b.first_ns,
            last_ns: b.last_ns,
            packets: b.packets,
            wire_bytes: b.wire_bytes,
            uncompressed_len: data.len() as u32,
            ..BlockMeta::default()
        };
        self.seg_uncompressed += data.len() as u64;
        self.send(meta, data)
    }

    /// Hands a finished block to the compressors.
    fn send(&mut self, meta: BlockMeta, data: Vec<u8>) -> Result<()> {
        let raw = RawBlock {
            order: self.order,
            segment: self.segment,
            meta,
            data,
        };
        self.order += 1;
        self.blocks += 1;
        let sent = self
            .tx
            .as_ref()
            .map(|tx| tx.send(raw).is_ok())
            .unwrap_or(false);
        if !sent {
            return Err(self.stopped());
        }
        Ok(())
    }

    /// Joins the pipeline after it broke and returns the error that broke it.
    fn stopped(&mut self) -> StoreError {
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let why = match self.writer.take().map(|w| w.join()) {
            Some(Ok(Err(e))) => e.to_string(),
            Some(Err(_)) => "the writer thread panicked".into(),
            Some(Ok(Ok(_))) => "the pipeline closed".into(),
            // Already joined: say again why it stopped.
            None => self
                .failed
                .clone()
                .unwrap_or_else(|| "the pipeline closed".into()),
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
        self.tx = None;
        for t in self.threads.drain(..) {
            t.join()
                .map_err(|_| StoreError::WriterStopped("a compressor thread panicked".into()))?;
        }
        let mut report = match self.writer.take().map(|w| w.join()) {
            Some(Ok(r)) => r?,
            _ => {
                return Err(StoreError::WriterStopped(
                    "the writer thread panicked".into(),
                ))
            }
        };
        report.packets = self.packets;
        report.wire_bytes = self.wire_bytes;
        report.blocks = self.blocks;
        Ok(report)
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        // Without finish(): stop the threads; the open segment stays as a torn segment that
        // the next writer recovers, exactly as after a crash.
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// zstd level used for a block while the compressors are behind (see [`compress_loop`]).
pub const FAST_LEVEL: i32 = -10;
/// zstd level used for a block while the compressors are far behind: about 4 GB/s a core,
/// close to a copy, and still an ordinary zstd frame (about 1.06x on the synth traffic).
pub const FASTEST_LEVEL: i32 = -1000;
/// Not a zstd level: blocks are stored uncompressed, each in a raw zstd frame (still a zstd
/// frame that every decompressor reads). Costs a copy; the last rung of the ladder below.
pub const STORE_LEVEL: i32 = i32::MIN;

/// How the store writer has been keeping up (for status displays): see [`compress_loop`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pressure {
    /// Blocks written at each rung of the ladder: the configured level, [`FAST_LEVEL`],
    /// [`FASTEST_LEVEL`], stored.
    pub blocks_by_rung: [u64; 4],
    /// The disk is what limits the writer (compression stays at the configured level).
    pub disk_bound: bool,
    /// Capture readers currently behind their kernel ring.
    pub readers_behind: u32,
}

/// Reads [`Pressure`] while the writer runs.
#[derive(Debug, Clone)]
pub struct PressureGauge {
    rungs: Arc<[AtomicU64; 4]>,
    disk_bound: Arc<AtomicBool>,
    urgent: Arc<AtomicU32>,
}

impl PressureGauge {
    pub fn read(&self) -> Pressure {
        Pressure {
            blocks_by_rung: std::array::from_fn(|i| self.rungs[i].load(Ordering::Relaxed)),
            disk_bound: self.disk_bound.load(Ordering::Relaxed),
            readers_behind: self.urgent.load(Ordering::Relaxed),
        }
    }
}

/// What a compressor reads to pick its rung, and where it counts the rungs it used.
struct Signals {
    urgent: Arc<AtomicU32>,
    disk_bound: Arc<AtomicBool>,
    rungs: Arc<[AtomicU64; 4]>,
}

/// One rung of the compression ladder.
enum Rung {
    Zstd(zstd::bulk::Compressor<'static>),
    Store,
}

impl Rung {
    fn new(level: i32) -> Option<Rung> {
        if level == STORE_LEVEL {
            return Some(Rung::Store);
        }
        let mut c = zstd::bulk::Compressor::new(level).ok()?;
        c.include_checksum(true).ok()?;
        Some(Rung::Zstd(c))
    }

    /// Replaces `frame` with the frame of `data`.
    fn compress(&mut self, data: &[u8], frame: &mut Vec<u8>) -> std::io::Result<()> {
        frame.clear();
        match self {
            Rung::Zstd(c) => {
                frame.reserve(zstd::zstd_safe::compress_bound(data.len()));
                c.compress_to_buffer(data, frame).map(|_| ())
            }
            Rung::Store => {
                format::put_raw_frame(frame, data);
                Ok(())
            }
        }
    }
}

/// Which rung of the ladder (0: the configured level, 1: [`FAST_LEVEL`], 2: [`FASTEST_LEVEL`],
/// 3: [`STORE_LEVEL`]) compresses the next block, given the blocks waiting for a compressor
/// (`raw` of `raw_cap`), whether a capture reader is behind its ring, and whether the disk is
/// what limits the writer thread.
///
/// CPU short: step down as the compressors' queue fills (a quarter, half, three quarters),
/// and store at once while a reader is behind. Disk short (the writer spends half its time
/// writing): the configured level, whatever else, because fewer bytes is then what helps,
/// and storing would make the disk fall further behind.
fn pick_rung(raw: usize, raw_cap: usize, reader_behind: bool, disk_bound: bool) -> usize {
    if disk_bound {
        0
    } else if reader_behind || raw * 4 >= raw_cap * 3 {
        3
    } else if raw * 2 >= raw_cap {
        2
    } else if raw * 4 >= raw_cap {
        1
    } else {
        0
    }
}

/// Compresses blocks until the producer hangs up. With `adaptive` (live capture), the level
/// follows the queues (see [`pick_rung`]); without, it is the configured level. A weaker
/// ratio costs some disk for the length of a burst, while falling behind would cost packets
/// (capture's rings fill and the kernel drops). All are zstd frames.
///
/// Measured on the synth traffic (`zstd -b -B1048576`, one core): level 1 334 MB/s at 1.50x,
/// -10 1.36 GB/s at 1.22x, -1000 4.4 GB/s at 1.06x; storing is a copy.
fn compress_loop(
    level: i32,
    adaptive: bool,
    rx: Receiver<RawBlock>,
    out: Sender<Compressed>,
    frames: Receiver<Vec<u8>>,
    signals: Signals,
) {
    // STORE_LEVEL is the lowest i32, so min() keeps it on every rung.
    let mut ladder = Vec::new();
    for l in [level, FAST_LEVEL, FASTEST_LEVEL, STORE_LEVEL] {
        let Some(r) = Rung::new(l.min(level)) else {
            return; // drops `out`: the writer sees the pipeline end early
        };
        ladder.push(r);
    }
    let raw_cap = rx.capacity().unwrap_or(0).max(1);
    for mut raw in rx.iter() {
        let mut frame = frames.try_recv().unwrap_or_default();
        let rung = if adaptive {
            let behind = signals.urgent.load(Ordering::Relaxed) > 0;
            let disk_bound = signals.disk_bound.load(Ordering::Relaxed);
            pick_rung(rx.len(), raw_cap, behind, disk_bound)
        } else {
            0
        };
        signals.rungs[rung].fetch_add(1, Ordering::Relaxed);
        if ladder[rung].compress(&raw.data, &mut frame).is_err() {
            return; // drops `out`: the writer sees the pipeline end early
        }
        raw.meta.compressed_len = frame.len() as u32;
        raw.meta.frame_crc = crc32c::crc32c(&frame);
        let done = Compressed {
            order: raw.order,
            segment: raw.segment,
            meta: raw.meta,
            frame,
            data: raw.data,
        };
        if out.send(done).is_err() {
            return;
        }
    }
}

struct WriterThread {
    dir: PathBuf,
    sealed: VecDeque<(u64, PathBuf, u64)>,
    total: u64,
    cfg: WriterConfig,
    ratio: Arc<Ratio>,
    report: WriteReport,
    /// Keeps the derived data (the side index) of what is written.
    indexer: Box<dyn Indexer>,
    /// Where block buffers go back to the producer.
    pool: Sender<Vec<u8>>,
    /// Where frame buffers go back to the compressors.
    frames: Sender<Vec<u8>>,
    /// Whether writing takes most of this thread's time (see [`DiskLoad`]).
    disk: DiskLoad,
}

/// Tells the compressors whether the disk is what limits the store: the writer thread spent
/// at least half of the last quarter second (or more, until a block arrives) in write and
/// fsync calls. Then fewer bytes is what helps, and the ladder keeps the configured level.
#[derive(Debug)]
struct DiskLoad {
    bound: Arc<AtomicBool>,
    since: Instant,
    busy: Duration,
}

impl DiskLoad {
    fn new(bound: Arc<AtomicBool>) -> Self {
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

impl WriterThread {
    fn run(mut self, rx: Receiver<Compressed>) -> Result<WriteReport> {
        let mut pending: BTreeMap<u64, Compressed> = BTreeMap::new();
        let mut next = 0u64;
        let mut current: Option<SegmentFile> = None;
        let mut last_sync = Instant::now();
        let result = (|| -> Result<()> {
            for c in rx.iter() {
                pending.insert(c.order, c);
                while let Some(c) = pending.remove(&next) {
                    next += 1;
                    self.write_block(&mut current, c, &mut last_sync)?;
                }
                // Staged blocks go to disk when no block waits (so an idle or light load
                // writes at once, and readers see blocks within the block age), or at most
                // after 200 ms; under load they gather into larger writes.
                if let Some(seg) = current.as_mut() {
                    let stale = seg
                        .unflushed_for()
                        .is_some_and(|t| t >= Duration::from_millis(200));
                    if stale || (rx.is_empty() && seg.unflushed_for().is_some()) {
                        let io = Instant::now();
                        seg.flush()?;
                        self.disk.add(io.elapsed());
                    }
                }
            }
            if !pending.is_empty() {
                return Err(StoreError::WriterStopped(format!(
                    "a compressor stopped: {} blocks could not be written",
                    pending.len()
                )));
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
        self.report.store_bytes = self.total;
        Ok(self.report)
    }

    fn seal(&mut self, seg: SegmentFile) -> Result<()> {
        let before = seg.len();
        if let Some(s) = seg.seal()? {
            self.indexer.sealed(&s)?;
            self.total += s.bytes - before;
            self.sealed.push_back((s.seq, s.path.clone(), s.bytes));
            self.report.sealed.push(s);
        }
        Ok(())
    }

    fn write_block(
        &mut self,
        current: &mut Option<SegmentFile>,
        c: Compressed,
        last_sync: &mut Instant,
    ) -> Result<()> {
        if current.as_ref().is_some_and(|s| s.seq() != c.segment) {
            let seg = current.take().expect("checked above");
            self.seal(seg)?;
        }
        let need = c.frame.len() as u64 + c.meta.header_frame_len() as u64;
        if let Some(max) = self.cfg.max_bytes {
            // Room for the block, the footer that sealing will add, and for a new segment its
            // head and header (a few hundred bytes; 4 KiB covers interface records too).
            let reserve = match current.as_ref() {
                Some(seg) => seg.footer_reserve(),
                None => 4096 + format::meta_frame_len(format::FOOTER_FIXED_LEN + 64 + 16) as u64,
            };
            let deleted = enforce_budget(
                &self.dir,
                self.indexer.as_mut(),
                &mut self.sealed,
                &mut self.total,
                max,
                need + reserve,
            )?;
            self.report.deleted.extend(deleted);
        }
        if current.is_none() {
            let seg = SegmentFile::create(&self.dir, c.segment, now_ns())?;
            self.indexer.begin(c.segment);
            self.total += seg.len();
            *current = Some(seg);
        }
        let seg = current.as_mut().expect("created above");
        let before = seg.len();
        self.ratio
            .compressed
            .fetch_add(c.frame.len() as u64, Ordering::Relaxed);
        self.ratio
            .uncompressed
            .fetch_add(u64::from(c.meta.uncompressed_len), Ordering::Relaxed);
        self.report.uncompressed_bytes += u64::from(c.meta.uncompressed_len);
        self.report.compressed_bytes += c.frame.len() as u64;
        self.indexer.block(&c.meta, &c.data);
        // Only block-sized buffers go back to the producer. An interface or statistics
        // block's buffer is a few dozen bytes: as a lane's next block it would grow through
        // a dozen reallocations and copies, and capture records statistics whenever the
        // kernel drops packets, which is when the producer can least afford it.
        let mut data = c.data;
        if data.capacity() >= self.cfg.block_bytes {
            data.clear();
            let _ = self.pool.try_send(data);
        }
        let io = Instant::now();
        seg.append(c.meta, &c.frame)?;
        let _ = self.frames.try_send(c.frame);
        self.total += seg.len() - before;
        if last_sync.elapsed() >= self.cfg.sync_interval {
            seg.sync_data()?;
            *last_sync = Instant::now();
        }
        self.disk.add(io.elapsed());
        Ok(())
    }
}

/// Deletes the oldest sealed segments until `total + need <= max`.
fn enforce_budget(
    dir: &std::path::Path,
    indexer: &mut dyn Indexer,
    sealed: &mut VecDeque<(u64, PathBuf, u64)>,
    total: &mut u64,
    max: u64,
    need: u64,
) -> Result<Vec<DeletedSegment>> {
    let mut deleted = Vec::new();
    while *total + need > max {
        let Some((seq, path, bytes)) = sealed.pop_front() else {
            break;
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("delete old segment", path, e)),
        }
        indexer.deleted(seq)?;
        *total = total.saturating_sub(bytes);
        tracing::info!(
            seq,
            bytes,
            "retention: deleted the oldest segment to stay under the byte budget"
        );
        deleted.push(DeletedSegment { seq, bytes });
    }
    if !deleted.is_empty() {
        segment::sync_dir(dir)?;
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use capsule_pcap::read::fragment_packets;

    fn eth(n: usize, seed: u64) -> Vec<u8> {
        (0..n)
            .map(|i| (seed as usize).wrapping_mul(31).wrapping_add(i * 7) as u8)
            .collect()
    }

    /// A frame with the ARP EtherType: non-IP, so it always goes to lane 0.
    fn arp(seed: u64) -> Vec<u8> {
        let mut f = eth(64, seed);
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f
    }

    fn small() -> WriterConfig {
        WriterConfig {
            block_bytes: 16 * 1024,
            segment_bytes: 64 * 1024,
            threads: 2,
            ..WriterConfig::default()
        }
    }

    /// Opens a writer and registers one Ethernet interface.
    fn open_eth(root: &std::path::Path, cfg: WriterConfig) -> (StoreWriter, u32) {
        let (mut w, _) = StoreWriter::open(root, cfg).unwrap();
        let i = w.add_interface(Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
        });
        (w, i)
    }

    /// Every packet of the store, in file order: (segment interface, ts, orig_len, data).
    fn read_all(root: &std::path::Path) -> Vec<(Interface, u64, u32, Vec<u8>)> {
        let store = Store::open(root).unwrap();
        let mut dctx = zstd::bulk::Decompressor::new().unwrap();
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for seg in store.open_segments().unwrap() {
            for i in 0..seg.blocks().len() {
                seg.read_block(i, &mut dctx, &mut Vec::new(), &mut buf)
                    .unwrap();
                let mut n = 0;
                for p in fragment_packets(&buf) {
                    let p = p.unwrap();
                    let iface = seg.interfaces()[p.iface as usize].clone();
                    out.push((iface, p.ts_ns, p.orig_len, p.data.to_vec()));
                    n += 1;
                }
                assert_eq!(n, seg.blocks()[i].packets as usize);
            }
        }
        // Lanes (DSCP classes) fill blocks side by side, so file order is not arrival order;
        // time order (stable) is what export gives back.
        out.sort_by_key(|p| p.1);
        out
    }

    #[test]
    fn packets_come_back_whole_across_blocks_and_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
        assert_eq!(rep.existing_segments, 0);
        let a = w.add_interface(Interface {
            linktype: 1,
            snaplen: 65535,
            name: Some("eth0".into()),
        });
        let b = w.add_interface(Interface {
            linktype: 101,
            snaplen: 9000,
            name: None,
        });
        assert_eq!(
            w.add_interface(Interface {
                linktype: 1,
                snaplen: 65535,
                name: Some("eth0".into())
            }),
            a
        );
        let mut want = Vec::new();
        for i in 0..3000u64 {
            let iface = if i % 3 == 0 { b } else { a };
            let data = eth(60 + (i as usize * 13) % 1400, i);
            let orig = data.len() as u32 + (i % 5) as u32;
            w.append(iface, 1_000_000_000 + i * 1000, orig, &data)
                .unwrap();
            want.push((
                w.ifaces[iface as usize].clone(),
                1_000_000_000 + i * 1000,
                orig,
                data,
            ));
        }
        let report = w.finish().unwrap();
        assert_eq!(report.packets, 3000);
        assert!(
            report.sealed.len() >= 2,
            "expected several segments, got {}",
            report.sealed.len()
        );
        assert_eq!(read_all(dir.path()), want);
        // Each segment is self-contained: its own interface list, starting at 0.
        for seg in Store::open(dir.path()).unwrap().open_segments().unwrap() {
            assert!(seg.interfaces().len() <= 2);
            assert_eq!(seg.state(), SegmentState::Sealed);
        }
    }

    /// Writes 2000 compressible packets with `cfg`, `urgent` set on the writer's urgency
    /// counter first; returns how many blocks were stored raw and how many compressed.
    fn raw_and_compressed_blocks(cfg: WriterConfig, urgent: u32) -> (usize, usize) {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, i) = open_eth(dir.path(), cfg);
        w.urgency().store(urgent, Ordering::Relaxed);
        let mut want = Vec::new();
        for k in 0..2000u64 {
            let data = eth(200 + (k as usize * 7) % 700, k);
            w.append(i, 5_000 + k, data.len() as u32, &data).unwrap();
            want.push(data);
        }
        w.finish().unwrap();
        let got: Vec<Vec<u8>> = read_all(dir.path()).into_iter().map(|p| p.3).collect();
        assert_eq!(got, want);
        let (mut raw, mut packed) = (0, 0);
        for seg in Store::open(dir.path()).unwrap().open_segments().unwrap() {
            for b in seg.blocks() {
                if b.compressed_len as usize == format::raw_frame_len(b.uncompressed_len as usize) {
                    raw += 1;
                } else {
                    packed += 1;
                }
            }
        }
        (raw, packed)
    }

    #[test]
    fn the_ladder_steps_down_with_the_compressors_queue_but_not_for_a_slow_disk() {
        // Compressors' queue of 16: quarter, half, three quarters.
        let rungs: Vec<usize> = (0..=16).map(|q| pick_rung(q, 16, false, false)).collect();
        assert_eq!(
            rungs,
            [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3],
            "rung by blocks queued"
        );
        // A reader behind its ring: store, even with the queue empty.
        assert_eq!(pick_rung(0, 16, true, false), 3);
        // The disk is the limit: compress as configured, even with the compressors' queue
        // full and a reader behind.
        assert_eq!(pick_rung(16, 16, true, true), 0);
    }

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

    #[test]
    fn store_level_keeps_blocks_uncompressed_in_raw_zstd_frames() {
        let store = WriterConfig {
            level: STORE_LEVEL,
            ..small()
        };
        let (raw, packed) = raw_and_compressed_blocks(store, 0);
        assert!(raw > 0 && packed == 0, "{raw} raw, {packed} compressed");
        let (raw, packed) = raw_and_compressed_blocks(small(), 0);
        assert!(
            raw == 0 && packed > 0,
            "level 1: {raw} raw, {packed} compressed"
        );
    }

    #[test]
    fn a_reader_behind_makes_adaptive_compression_store_blocks() {
        let live = WriterConfig {
            adaptive: true,
            ..small()
        };
        // Blocks are stored unless the disk is the limit (then compressed, see the ladder
        // test); the first ones always are, before the first verdict on the disk.
        let (raw, packed) = raw_and_compressed_blocks(live.clone(), 1);
        assert!(raw > 0, "urgent: {raw} raw, {packed} compressed");
        // Not adaptive (import): urgency is ignored.
        let (raw, _) = raw_and_compressed_blocks(small(), 1);
        assert_eq!(raw, 0);
        // The gauge counts the rungs used and the readers behind.
        let dir = tempfile::tempdir().unwrap();
        let (mut w, i) = open_eth(dir.path(), live);
        let gauge = w.pressure_gauge();
        w.urgency().store(2, Ordering::Relaxed);
        for k in 0..50u64 {
            w.append(i, k, 100, &eth(100, k)).unwrap();
        }
        w.flush().unwrap();
        let p = gauge.read();
        assert_eq!(p.readers_behind, 2);
        w.finish().unwrap();
        assert!(gauge.read().blocks_by_rung[3] > 0, "{:?}", gauge.read());
    }

    #[test]
    fn unsorted_input_is_sorted_within_each_block_stably() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, i) = open_eth(dir.path(), small());
        let ts = [50u64, 10, 30, 10, 20];
        for (k, t) in ts.iter().enumerate() {
            w.append(i, *t, 64, &arp(k as u64)).unwrap();
        }
        w.finish().unwrap();
        let got: Vec<(u64, Vec<u8>)> = read_all(dir.path())
            .into_iter()
            .map(|(_, t, _, d)| (t, d))
            .collect();
        let mut want: Vec<(u64, Vec<u8>)> = ts
            .iter()
            .enumerate()
            .map(|(k, t)| (*t, arp(k as u64)))
            .collect();
        want.sort_by_key(|x| x.0);
        assert_eq!(got, want);
        // The first packet back in time cut the open blocks; the rest of the segment is one
        // stream, sorted (stably) within its block.
        let seg = &Store::open(dir.path()).unwrap().open_segments().unwrap()[0];
        let spans: Vec<(u64, u64, u32)> = seg
            .blocks()
            .iter()
            .filter(|b| b.packets > 0)
            .map(|b| (b.first_ns, b.last_ns, b.packets))
            .collect();
        assert_eq!(spans, vec![(50, 50, 1), (10, 30, 4)]);
    }

    #[test]
    fn the_open_segment_is_readable_while_being_written() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = WriterConfig {
            segment_bytes: 1 << 30,
            ..small()
        };
        let (mut w, i) = open_eth(dir.path(), cfg);
        for k in 0..500u64 {
            w.append(i, k, 1000, &eth(1000, k)).unwrap();
        }
        w.flush().unwrap();
        // The writer thread writes asynchronously; wait until every block is visible.
        let store = Store::open(dir.path()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let segs = store.open_segments().unwrap();
            let n: u64 = segs
                .iter()
                .flat_map(|s| s.blocks())
                .map(|b| u64::from(b.packets))
                .sum();
            if n == 500 {
                assert_eq!(segs[0].state(), SegmentState::Open);
                break;
            }
            assert!(Instant::now() < deadline, "only {n} packets visible");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(matches!(
            StoreWriter::open(dir.path(), small()),
            Err(StoreError::Locked { .. })
        ));
        w.finish().unwrap();
        assert_eq!(read_all(dir.path()).len(), 500);
    }

    /// Writes a segment of `blocks` blocks through SegmentFile and leaves it unsealed, as a
    /// crash would. Returns the path and the offsets of the blocks, then of the end of the
    /// last block (the file may go on with zero padding after it: direct I/O).
    fn torn_segment(dir: &std::path::Path, blocks: u32) -> (PathBuf, Vec<u64>) {
        let segdir = Store::create_or_open(dir).unwrap().segments_dir();
        let mut seg = SegmentFile::create(&segdir, 1, 0).unwrap();
        let mut c = zstd::bulk::Compressor::new(1).unwrap();
        c.include_checksum(true).unwrap();
        let mut offsets = Vec::new();
        for b in 0..blocks {
            let mut data = Vec::new();
            let mut new_interfaces = Vec::new();
            if b == 0 {
                let iface = Interface {
                    linktype: 1,
                    snaplen: 0,
                    name: None,
                };
                pw::pcapng_idb(&mut data, &iface);
                new_interfaces.push(iface);
            }
            for k in 0..10u64 {
                pw::pcapng_epb(&mut data, 0, u64::from(b) * 100 + k, 500, &eth(500, k));
            }
            let frame = c.compress(&data).unwrap();
            let meta = BlockMeta {
                first_ns: u64::from(b) * 100,
                last_ns: u64::from(b) * 100 + 9,
                packets: 10,
                wire_bytes: 5000,
                compressed_len: frame.len() as u32,
                uncompressed_len: data.len() as u32,
                frame_crc: crc32c::crc32c(&frame),
                new_interfaces,
                ..BlockMeta::default()
            };
            offsets.push(seg.len());
            seg.append(meta, &frame).unwrap();
        }
        offsets.push(seg.len());
        let path = segdir.join(segment::open_name(1));
        drop(seg);
        (path, offsets)
    }

    #[test]
    fn recovery_cuts_a_torn_tail_back_to_the_last_whole_block() {
        for cut_into_block in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (path, offsets) = torn_segment(dir.path(), 5);
            let full = offsets[5];
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            if cut_into_block {
                // Tear the last block in the middle of its frame.
                f.set_len(full - 40).unwrap();
            } else {
                // Garbage after the last block, as a torn write of the next one leaves.
                std::os::unix::fs::FileExt::write_all_at(&f, &[0xAB; 300], full).unwrap();
            }
            let (w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
            assert_eq!(rep.recovered.len(), 1);
            let r = &rep.recovered[0];
            let kept = if cut_into_block { 4 } else { 5 };
            assert_eq!(r.kept_blocks, kept);
            assert_eq!(r.kept_packets, kept as u64 * 10);
            let good = if cut_into_block { offsets[4] } else { full };
            assert_eq!(r.cut_at, good);
            assert!(r.problem.is_some());
            assert!(r.sealed.is_some());
            w.finish().unwrap();
            let got = read_all(dir.path());
            assert_eq!(got.len(), kept * 10);
            assert!(got.windows(2).all(|p| p[0].1 <= p[1].1));
            assert!(
                !path.exists(),
                "the torn file was sealed under its final name"
            );
        }
    }

    #[test]
    fn recovery_rejects_a_block_whose_frame_checksum_fails() {
        let dir = tempfile::tempdir().unwrap();
        let (path, offsets) = torn_segment(dir.path(), 3);
        // Flip a byte inside block 1's frame (after its header frame).
        let bytes = std::fs::read(&path).unwrap();
        let mut bad = bytes.clone();
        let at = offsets[2] as usize - 5;
        bad[at] ^= 0xFF;
        std::fs::write(&path, &bad).unwrap();
        let (w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
        let r = &rep.recovered[0];
        assert_eq!(r.kept_blocks, 1, "{:?}", r.problem);
        assert!(
            r.problem.as_deref().unwrap().contains("crc32c"),
            "{:?}",
            r.problem
        );
        w.finish().unwrap();
        assert_eq!(read_all(dir.path()).len(), 10);
    }

    #[test]
    fn a_segment_with_a_damaged_head_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = torn_segment(dir.path(), 2);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] = 0; // not a zstd frame any more
        std::fs::write(&path, &bytes).unwrap();
        let (w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
        assert!(rep.recovered[0].sealed.is_none());
        let aside = rep.recovered[0].moved_aside.clone().unwrap();
        assert_eq!(aside, path.with_extension("open.damaged"));
        w.finish().unwrap();
        assert!(aside.exists());
        assert!(read_all(dir.path()).is_empty());
        // Segment numbers are never reused, and a second damaged file does not replace it.
        torn_segment(dir.path(), 1);
        std::fs::write(&path, b"not zstd at all").unwrap();
        let (mut w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
        let aside2 = rep.recovered[0].moved_aside.clone().unwrap();
        assert_ne!(aside2, aside);
        assert!(aside.exists() && aside2.exists());
        let i = w.add_interface(Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
        });
        w.append(i, 1, 60, &[0; 60]).unwrap();
        let rep = w.finish().unwrap();
        assert_eq!(rep.sealed[0].seq, 2, "seq 1 was used by the damaged files");
    }

    #[test]
    fn retention_keeps_the_store_under_its_budget_and_deletes_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let max = 400 * 1024;
        let cfg = WriterConfig {
            max_bytes: Some(max),
            ..small()
        };
        let (mut w, _) = StoreWriter::open(dir.path(), cfg).unwrap();
        assert_eq!(w.config().segment_bytes, 64 * 1024);
        let i = w.add_interface(Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
        });
        // Incompressible payloads so the disk really fills.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for k in 0..3000u64 {
            let data: Vec<u8> = (0..1000)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            w.append(i, k, 1000, &data).unwrap();
        }
        let report = w.finish().unwrap();
        assert!(!report.deleted.is_empty());
        assert!(report.store_bytes <= max, "{} > {max}", report.store_bytes);
        let store = Store::open(dir.path()).unwrap();
        let on_disk: u64 = store.list().unwrap().iter().map(|e| e.bytes).sum();
        assert!(on_disk <= max, "{on_disk} > {max}");
        assert_eq!(on_disk, report.store_bytes);
        let first = store.list().unwrap()[0].seq;
        assert_eq!(
            first,
            report.deleted.len() as u64 + 1,
            "oldest deleted first"
        );
        // What remains is the newest packets, whole and in order, ending with the last.
        let got = read_all(dir.path());
        assert_eq!(got.last().unwrap().1, 2999);
        assert!(got.windows(2).all(|p| p[1].1 == p[0].1 + 1));

        // A smaller budget at the next open deletes old segments before anything is written.
        let smaller = 260 * 1024;
        assert!(
            on_disk > smaller,
            "the test needs a store larger than the new budget"
        );
        let cfg = WriterConfig {
            max_bytes: Some(smaller),
            ..small()
        };
        let (w, rep) = StoreWriter::open(dir.path(), cfg).unwrap();
        assert!(!rep.deleted.is_empty());
        w.finish().unwrap();
        let on_disk: u64 = store.list().unwrap().iter().map(|e| e.bytes).sum();
        assert!(on_disk <= smaller, "{on_disk} > {smaller}");
    }

    #[test]
    fn segments_rotate_by_the_packet_time_they_span() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = WriterConfig {
            segment_age: Duration::from_secs(1),
            block_bytes: 4096,
            ..small()
        };
        let (mut w, i) = open_eth(dir.path(), cfg);
        // 5 s of packet time, 10 ms apart, small enough that size never cuts a segment.
        for k in 0..500u64 {
            w.append(i, k * 10_000_000, 100, &eth(100, k)).unwrap();
        }
        let rep = w.finish().unwrap();
        assert!(
            (5..=6).contains(&rep.sealed.len()),
            "{} segments",
            rep.sealed.len()
        );
        for s in &rep.sealed {
            assert!(s.last_ns - s.first_ns < 1_000_000_000 + 4096 * 10_000_000 / 100);
        }
    }

    #[test]
    fn tick_cuts_a_block_once_it_is_old_enough() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = WriterConfig {
            block_age: Duration::from_millis(20),
            ..small()
        };
        let (mut w, i) = open_eth(dir.path(), cfg);
        w.append(i, 1, 100, &eth(100, 1)).unwrap();
        // The interface's own block was sent at once.
        assert_eq!(w.blocks, 1);
        w.tick().unwrap();
        assert_eq!(w.blocks, 1, "a fresh block is not cut");
        std::thread::sleep(Duration::from_millis(30));
        w.tick().unwrap();
        assert_eq!(w.blocks, 2, "an old block is cut");
        w.tick().unwrap();
        assert_eq!(w.blocks, 2, "an empty block is never cut");
        w.finish().unwrap();
    }

    #[test]
    fn bad_configurations_and_packets_are_refused_with_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = WriterConfig {
            max_bytes: Some(1000),
            ..small()
        };
        let err = StoreWriter::open(dir.path(), cfg).unwrap_err();
        assert!(err.to_string().contains("too small"), "{err}");
        let (mut w, _) = StoreWriter::open(dir.path(), small()).unwrap();
        let err = w.append(0, 0, 10, &[0; 10]).unwrap_err();
        assert!(err.to_string().contains("unknown interface"), "{err}");
        let i = w.add_interface(Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
        });
        let err = w.append(i, 0, 10, &vec![0; MAX_PACKET + 1]).unwrap_err();
        assert!(err.to_string().contains("exceed"), "{err}");
        w.finish().unwrap();
    }
}
