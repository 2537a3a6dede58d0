//! The compactor: recompresses, at the configured level, the blocks of sealed segments that
//! live capture wrote lower on its ladder ([`super::compact`] does one segment).
//!
//! ```text
//! compactor thread (nice 19)                    writer thread
//!   list sealed segments, newest first
//!   pending bytes per segment (cached)
//!   compact::prepare(newest pending)
//!     between blocks: pause while the
//!     compressors or a capture reader are
//!     behind, or the disk is the limit
//!   temporary file synced  --CompactRequest-->  still kept by retention?
//!                                                 yes: compact::commit (rename, fsync dir),
//!                                                      retention.resized, Indexer::compacted
//!                                                 no:  temporary file removed
//!                          <------- reply -----
//! ```
//!
//! The rename and the index update happen on the writer thread, the only thread that
//! deletes segments (retention), so a segment retention deleted is never brought back by a
//! rename, and no segment is deleted half way through one. `capsule compact` runs the same
//! steps on its own thread, unpaused ([`super::StoreWriter::compact_all`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender};

use super::compact::{self, Control, Outcome, Plan, Prepared, Proceed};
use super::Level;
use crate::error::{Result, StoreError};
use crate::fsx;
use crate::segment::{self, SegmentReader, SegmentState};

/// A prepared compaction handed to the writer thread, which answers whether it committed.
pub(super) struct CompactRequest {
    pub(super) prepared: Prepared,
    pub(super) reply: Sender<Result<bool>>,
}

/// What the compactor did and has left, for [`super::Pressure`].
#[derive(Debug, Default)]
pub(crate) struct CompactCounters {
    /// Compressed bytes of blocks below the target, in sealed segments (last count).
    pub(super) pending_bytes: AtomicU64,
    pub(super) segments: AtomicU64,
    /// Segment bytes before and after, of the segments compacted.
    pub(super) bytes_before: AtomicU64,
    pub(super) bytes_after: AtomicU64,
    /// Pending bytes recompressed so far (the rate is its change over time).
    pub(super) processed: AtomicU64,
    /// Nanoseconds spent compacting, pauses excluded.
    pub(super) busy_ns: AtomicU64,
    /// Times the compactor paused for capture.
    pub(super) pauses: AtomicU64,
    pub(super) paused: AtomicBool,
    /// The zstd target (a compactor runs).
    pub(super) target: AtomicU32,
    /// Compressed bytes of the age tier's old segments below the tier's level (last count).
    pub(super) tier_pending_bytes: AtomicU64,
    /// The age tier's zstd level and age (ns), while a compactor with a tier runs.
    pub(super) tier_level: AtomicU32,
    pub(super) tier_age_ns: AtomicU64,
    pub(super) tier: AtomicBool,
    pub(super) running: AtomicBool,
}

/// One segment compacted.
#[derive(Debug, Clone)]
pub struct CompactedSegment {
    pub seq: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub blocks: usize,
    pub recompressed: usize,
    /// The level its blocks were brought to.
    pub level: Level,
    /// Time spent on it, pauses excluded.
    pub busy: Duration,
}

/// What [`super::StoreWriter::compact_all`] did.
#[derive(Debug, Default, Clone)]
pub struct CompactReport {
    pub compacted: Vec<CompactedSegment>,
    /// Segments left alone, and why (damage: `capsule verify` names it).
    pub skipped: Vec<(u64, String)>,
    /// Segments deleted by retention while they were being compacted.
    pub vanished: Vec<u64>,
}

/// What tells the compactor that capture needs the machine: the signals the compressors'
/// ladder reads (compress.rs), and the blocks it wrote below the configured level.
pub(super) struct Busy {
    pub(super) urgent: Arc<AtomicU32>,
    pub(super) disk_bound: Arc<AtomicBool>,
    pub(super) rungs: Arc<[AtomicU64; 4]>,
    /// The producer's output queue: the compressors' input, or at the store level the
    /// writer thread's (only its length is read).
    pub(super) raw: super::QueueLen,
    lowered: u64,
    lowered_at: Option<Instant>,
}

impl Busy {
    pub(super) fn new(
        urgent: Arc<AtomicU32>,
        disk_bound: Arc<AtomicBool>,
        rungs: Arc<[AtomicU64; 4]>,
        raw: super::QueueLen,
    ) -> Self {
        Busy {
            urgent,
            disk_bound,
            rungs,
            raw,
            lowered: 0,
            lowered_at: None,
        }
    }

    /// Whether capture is short of something now: a reader behind its ring, the disk the
    /// limit, the compressors' queue a quarter full (where the ladder steps down), or a block
    /// written below the configured level within the last second.
    fn now(&mut self) -> bool {
        let lowered: u64 = self.rungs[1..]
            .iter()
            .map(|r| r.load(Ordering::Relaxed))
            .sum();
        if lowered != self.lowered {
            self.lowered = lowered;
            self.lowered_at = Some(Instant::now());
        }
        let (len, cap) = self.raw.len_cap();
        self.urgent.load(Ordering::Relaxed) > 0
            || self.disk_bound.load(Ordering::Relaxed)
            || len * 4 >= cap.max(1)
            || self
                .lowered_at
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
    }
}

/// The background compactor's [`Control`]: pauses while capture is busy, stops on request.
struct Yielding<'a> {
    busy: &'a mut Busy,
    stop: &'a AtomicBool,
    counters: &'a CompactCounters,
}

impl Control for Yielding<'_> {
    fn proceed(&mut self, gone: &mut dyn FnMut() -> bool) -> Proceed {
        let mut paused = false;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Proceed::Stop;
            }
            if !self.busy.now() {
                self.counters.paused.store(false, Ordering::Relaxed);
                return Proceed::Go;
            }
            // Capture is busy for as long as traffic is heavy, and retention deletes the
            // oldest segments meanwhile: a paused compaction of one of them would keep its
            // bytes on the disk (an open file) for the whole pause.
            if gone() {
                self.counters.paused.store(false, Ordering::Relaxed);
                return Proceed::Abandon;
            }
            if !paused {
                paused = true;
                self.counters.pauses.fetch_add(1, Ordering::Relaxed);
                self.counters.paused.store(true, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// What one round found or did.
enum Step {
    Compacted(CompactedSegment),
    /// A segment was picked but not compacted (nothing pending after all, damage, deleted
    /// meanwhile): another round may find more.
    Idle,
    /// Nothing is pending (that is not skipped).
    Done,
    Stopped,
}

/// What a round needs of a sealed segment, read once from its footer.
#[derive(Debug, Clone, Copy)]
struct SegInfo {
    /// Newest packet time (0: no packet).
    last_ns: u64,
    /// Bytes pending for the plan's base level, and for the tier's level.
    pending_base: u64,
    pending_tier: u64,
}

impl SegInfo {
    fn read(path: &Path, plan: &Plan) -> SegInfo {
        match SegmentReader::open(path) {
            Ok(r) => SegInfo {
                last_ns: r
                    .blocks()
                    .iter()
                    .filter(|b| b.packets > 0)
                    .map(|b| b.last_ns)
                    .max()
                    .unwrap_or(0),
                pending_base: plan
                    .base
                    .map_or(0, |l| compact::pending_bytes(r.blocks(), l)),
                pending_tier: plan
                    .tier_level()
                    .map_or(0, |l| compact::pending_bytes(r.blocks(), l)),
            },
            // Deleted meanwhile, or unreadable (named by other commands): none.
            Err(_) => SegInfo {
                last_ns: 0,
                pending_base: 0,
                pending_tier: 0,
            },
        }
    }
}

/// The compactor's memory between rounds: what each segment (by number and length) has
/// pending, and segments left alone.
#[derive(Default)]
struct Rounds {
    info: HashMap<(u64, u64), SegInfo>,
    skip: HashSet<(u64, u64)>,
}

/// A segment picked for a round: its key (number, length), path and target level.
type Picked = ((u64, u64), PathBuf, Level);

/// Which sealed segment a round compacts, and at what level: the newest with blocks below
/// the base level first (an old one at the tier's level, so it is rewritten once); once no
/// segment has any, the newest old segment with blocks below the tier's level. Also returns
/// the bytes below the base level, and the old segments' bytes below the tier's level.
fn pick(
    sealed: &[(u64, PathBuf, u64)],
    plan: &Plan,
    rounds: &Rounds,
) -> (Option<Picked>, u64, u64) {
    let newest = sealed
        .iter()
        .filter_map(|(s, _, l)| rounds.info.get(&(*s, *l)))
        .map(|i| i.last_ns)
        .max()
        .unwrap_or(0);
    let (mut base_total, mut tier_total) = (0, 0);
    let (mut first, mut second) = (None, None);
    // `sealed` is newest first.
    for (seq, path, len) in sealed {
        let key = (*seq, *len);
        let Some(i) = rounds.info.get(&key) else {
            continue;
        };
        let old = plan.is_old(i.last_ns, newest);
        base_total += i.pending_base;
        if old {
            tier_total += i.pending_tier;
        }
        if rounds.skip.contains(&key) {
            continue;
        }
        let Some(target) = plan.target(i.last_ns, newest) else {
            continue;
        };
        if i.pending_base > 0 && first.is_none() {
            first = Some((key, path.clone(), target));
        } else if old && i.pending_tier > 0 && second.is_none() {
            second = Some((key, path.clone(), target));
        }
    }
    (first.or(second), base_total, tier_total)
}

/// One round over segment directory `dir`: counts what is pending, compacts the segment
/// [`pick`] chooses and has the writer thread commit it.
fn step(
    dir: &Path,
    plan: &Plan,
    ctl: &mut dyn Control,
    to_writer: &Sender<CompactRequest>,
    rounds: &mut Rounds,
    counters: &CompactCounters,
    report: &mut CompactReport,
) -> Result<Step> {
    let mut sealed: Vec<(u64, PathBuf, u64)> = fsx::list(dir)?
        .into_iter()
        .filter(|e| e.kind == fsx::Kind::File)
        .filter_map(|e| {
            let (seq, st) = segment::parse_name(&e.name.to_string_lossy())?;
            (st == SegmentState::Sealed).then_some((seq, e.path, e.len))
        })
        .collect();
    // Newest first: the steady state is the segment just sealed; the oldest are the next
    // that retention deletes.
    sealed.sort_by_key(|s| std::cmp::Reverse(s.0));
    rounds
        .info
        .retain(|k, _| sealed.iter().any(|(s, _, l)| (*s, *l) == *k));
    for (seq, path, len) in &sealed {
        rounds
            .info
            .entry((*seq, *len))
            .or_insert_with(|| SegInfo::read(path, plan));
    }
    let (picked, base_total, tier_total) = pick(&sealed, plan, rounds);
    counters.pending_bytes.store(base_total, Ordering::Relaxed);
    counters
        .tier_pending_bytes
        .store(tier_total, Ordering::Relaxed);
    let Some((key, path, target)) = picked else {
        return Ok(Step::Done);
    };
    if crate::ledger::is_tiered(dir, key.0)? {
        // In the object store: what it holds there is what readers read once the local file
        // is trimmed, against the local side index; recompacting the local copy would make
        // the two disagree. Nothing is pending for it any more.
        if let Some(i) = rounds.info.get_mut(&key) {
            i.pending_tier = 0;
            i.pending_base = 0;
        }
        return Ok(Step::Idle);
    }
    let p = match compact::prepare(&path, target, ctl) {
        Ok(Outcome::Prepared(p)) => p,
        Ok(Outcome::Nothing) => {
            // Nothing below `target` after all: nothing below any lower level either.
            if let Some(i) = rounds.info.get_mut(&key) {
                i.pending_tier = 0;
                i.pending_base = 0;
            }
            return Ok(Step::Idle);
        }
        Ok(Outcome::Skipped(why)) => {
            tracing::warn!(seq = key.0, "not compacted: {why}");
            report.skipped.push((key.0, why));
            rounds.skip.insert(key);
            return Ok(Step::Idle);
        }
        Ok(Outcome::Stopped) => return Ok(Step::Stopped),
        Ok(Outcome::Vanished) => {
            rounds.info.remove(&key);
            report.vanished.push(key.0);
            return Ok(Step::Idle);
        }
        Err(e) if e.is_not_found() => {
            rounds.info.remove(&key);
            report.vanished.push(key.0);
            return Ok(Step::Idle);
        }
        Err(e) => {
            // Damage found while reading, or a full disk: that segment is left alone until
            // its length changes; the others are still compacted.
            let why = crate::error::chain(&e);
            tracing::warn!(seq = key.0, "not compacted: {why}");
            report.skipped.push((key.0, why));
            rounds.skip.insert(key);
            return Ok(Step::Idle);
        }
    };
    let done = CompactedSegment {
        seq: p.seq,
        bytes_before: p.bytes_before,
        bytes_after: p.bytes_after,
        blocks: p.blocks,
        recompressed: p.recompressed,
        level: target,
        busy: p.busy,
    };
    let (processed, busy) = (p.pending_before, p.busy);
    let (reply_tx, reply) = bounded(1);
    let tmp = p.tmp.clone();
    if let Err(e) = to_writer.send(CompactRequest {
        prepared: p,
        reply: reply_tx,
    }) {
        compact::abandon(&e.into_inner().prepared);
        return Ok(Step::Stopped);
    }
    let committed = match reply.recv() {
        Ok(r) => r?,
        Err(_) => {
            // The writer thread went away with the request: its temporary file goes.
            let _ = fsx::remove(&tmp, "remove compaction's temporary file");
            return Ok(Step::Stopped);
        }
    };
    counters.processed.fetch_add(processed, Ordering::Relaxed);
    counters
        .busy_ns
        .fetch_add(busy.as_nanos() as u64, Ordering::Relaxed);
    // The new file (a new length) is read again next round.
    rounds.info.remove(&key);
    if !committed {
        report.vanished.push(key.0);
        return Ok(Step::Idle);
    }
    counters.segments.fetch_add(1, Ordering::Relaxed);
    counters
        .bytes_before
        .fetch_add(done.bytes_before, Ordering::Relaxed);
    counters
        .bytes_after
        .fetch_add(done.bytes_after, Ordering::Relaxed);
    tracing::info!(
        seq = done.seq,
        before = done.bytes_before,
        after = done.bytes_after,
        blocks = done.recompressed,
        level = %target,
        "compacted"
    );
    report.compacted.push(done.clone());
    Ok(Step::Compacted(done))
}

/// Compacts every pending segment of `dir` on the calling thread, unpaused, until none is
/// left (segments that cannot be compacted are skipped and reported). `on_each` is told of
/// each segment compacted.
pub(super) fn run_all(
    dir: &Path,
    plan: &Plan,
    to_writer: &Sender<CompactRequest>,
    counters: &CompactCounters,
    on_each: &mut dyn FnMut(&CompactedSegment),
) -> Result<CompactReport> {
    let mut rounds = Rounds::default();
    let mut report = CompactReport::default();
    let mut ctl = compact::Unpaused;
    loop {
        let s = step(
            dir,
            plan,
            &mut ctl,
            to_writer,
            &mut rounds,
            counters,
            &mut report,
        )?;
        match s {
            Step::Compacted(c) => on_each(&c),
            Step::Done => return Ok(report),
            Step::Idle => {}
            Step::Stopped => {
                return Err(StoreError::PipelineBroken(
                    "the writer thread stopped during compaction",
                ))
            }
        }
    }
}

/// Lowers the calling thread to the lowest CPU priority (nice 19); on Linux the nice value
/// of a thread id applies to that thread alone. SCHED_IDLE would yield more, but rustix has
/// no call for it and unsafe code is kept to capsule-sys. `what` names the thread in
/// the warning when it cannot be done.
pub fn lower_thread_priority(what: &str) {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), 19) {
        tracing::warn!("cannot lower the {what}'s priority: {e}");
    }
}

/// The background compactor: rounds until `stop`, pausing while capture is busy, idling a
/// second when nothing is pending.
pub(super) fn run_background(
    dir: PathBuf,
    plan: Plan,
    mut busy: Busy,
    stop: Arc<AtomicBool>,
    to_writer: Sender<CompactRequest>,
    counters: Arc<CompactCounters>,
) {
    lower_thread_priority("compactor");
    let mut rounds = Rounds::default();
    let mut report = CompactReport::default();
    let idle = |secs: u64| {
        for _ in 0..secs * 20 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let mut ctl = Yielding {
            busy: &mut busy,
            stop: &stop,
            counters: &counters,
        };
        match step(
            &dir,
            &plan,
            &mut ctl,
            &to_writer,
            &mut rounds,
            &counters,
            &mut report,
        ) {
            Ok(Step::Compacted(_)) => report.compacted.clear(),
            Ok(Step::Idle) => {}
            Ok(Step::Done) => idle(1),
            Ok(Step::Stopped) => break,
            Err(e) => {
                // The segment directory could not be listed, or a commit failed: again
                // after a pause.
                tracing::warn!("compaction failed: {}", crate::error::chain(&e));
                idle(5);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::compact::{self, Outcome, Prepared};
    use crate::format::Compression;
    use crate::segment;
    use crate::store::Store;
    use crossbeam_channel::bounded;

    fn cfg(level: Level) -> WriterConfig {
        WriterConfig {
            block_bytes: 16 * 1024,
            segment_bytes: 64 * 1024,
            threads: 2,
            level,
            ..WriterConfig::default()
        }
    }

    /// Appends `n` compressible packets of 1000 bytes from time `t0` (ns, 1 µs apart).
    fn fill(w: &mut StoreWriter, n: u64, t0: u64) {
        let i = w.add_interface(capsule_pcap::Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        });
        for k in 0..n {
            let mut f: Vec<u8> = (0..1000).map(|j| ((k + j) % 17) as u8).collect();
            f[12..14].copy_from_slice(&[0x08, 0x06]);
            w.append(i, t0 + k * 1000, 1000, &f).unwrap();
        }
    }

    /// Every packet of the store (time, bytes), sorted, and the compression of every block.
    fn contents(root: &std::path::Path) -> (Vec<(u64, Vec<u8>)>, Vec<Compression>) {
        let store = Store::open(root).unwrap();
        let mut dctx = zstd::bulk::Decompressor::new().unwrap();
        let (mut pkts, mut comps, mut buf) = (Vec::new(), Vec::new(), Vec::new());
        for seg in store.open_segments().unwrap() {
            for i in 0..seg.blocks().len() {
                comps.push(seg.blocks()[i].compression);
                seg.read_block(i, &mut dctx, &mut Vec::new(), &mut buf)
                    .unwrap();
                for p in capsule_pcap::read::fragment_packets(&buf) {
                    let p = p.unwrap();
                    pkts.push((p.ts_ns, p.data.to_vec()));
                }
            }
        }
        pkts.sort();
        (pkts, comps)
    }

    /// A new store holding `n` packets (`fill`, from 1 ms) at the store level, its writer
    /// finished: the segments the compactions of a test work on.
    fn stored(n: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = StoreWriter::open(dir.path(), cfg(Level::Store)).unwrap();
        fill(&mut w, n, 1_000_000);
        w.finish().unwrap();
        dir
    }

    /// Hands prepared compaction `p` to `w`'s writer thread: whether it was committed.
    fn commit(w: &StoreWriter, p: Prepared) -> bool {
        let (reply, rx) = bounded(1);
        w.compact_tx
            .as_ref()
            .unwrap()
            .send(CompactRequest { prepared: p, reply })
            .unwrap();
        rx.recv().unwrap().unwrap()
    }

    fn seg_bytes(root: &std::path::Path) -> u64 {
        Store::open(root)
            .unwrap()
            .list()
            .unwrap()
            .iter()
            .map(|e| e.bytes)
            .sum()
    }

    #[test]
    fn retention_racing_the_compactor_never_brings_a_deleted_segment_back() {
        let dir = stored(600);
        let root = dir.path();
        let segs = Store::open(root).unwrap().segments_dir();
        let total = seg_bytes(root);
        let n = Store::open(root).unwrap().list().unwrap().len();
        assert!(n >= 6, "{n} segments");
        // A writer under a budget that the next blocks overflow: retention deletes the
        // oldest segments while compactions of them wait to be committed.
        let (mut w, _) = StoreWriter::open(
            root,
            WriterConfig {
                max_bytes: Some(total + 20_000),
                ..cfg(Level::Zstd(3))
            },
        )
        .unwrap();
        let oldest = segs.join(segment::sealed_name(1));
        let kept = segs.join(segment::sealed_name(n as u64));
        let prep = |path: &std::path::Path| match compact::prepare(
            path,
            Level::Zstd(3),
            &mut compact::Unpaused,
        )
        .unwrap()
        {
            Outcome::Prepared(p) => p,
            o => panic!("{o:?}"),
        };
        let (p1, pn) = (prep(&oldest), prep(&kept));
        assert!(p1.tmp.exists() && pn.tmp.exists());
        // New traffic until retention has deleted the oldest segment.
        let mut t = 1_000_000_000;
        while oldest.exists() {
            fill(&mut w, 50, t);
            w.flush().unwrap();
            t += 1_000_000;
            std::thread::sleep(Duration::from_millis(20));
            assert!(
                t < 200_000_000_000,
                "retention never deleted the oldest segment"
            );
        }
        let (tmp1, tmpn, after) = (p1.tmp.clone(), pn.tmp.clone(), pn.bytes_after);
        assert!(
            !commit(&w, p1),
            "a compaction of a deleted segment was committed"
        );
        assert!(!oldest.exists(), "the deleted segment came back");
        assert!(!tmp1.exists(), "its temporary file was left");
        assert!(commit(&w, pn), "a kept segment's compaction was refused");
        assert!(!tmpn.exists());
        assert_eq!(std::fs::metadata(&kept).unwrap().len(), after);
        let rep = w.finish().unwrap();
        // Retention counts the compacted segment at its new size.
        assert_eq!(rep.store_bytes, seg_bytes(root));
        let (_, comps) = contents(root);
        assert!(comps.contains(&Compression::Zstd(3)));
    }

    /// Compressions of each sealed segment's blocks, by segment number.
    fn levels_by_segment(root: &std::path::Path) -> Vec<(u64, Vec<Compression>)> {
        let store = Store::open(root).unwrap();
        let mut v: Vec<_> = store
            .open_segments()
            .unwrap()
            .iter()
            .map(|s| (s.seq(), s.blocks().iter().map(|b| b.compression).collect()))
            .collect();
        v.sort_by_key(|x: &(u64, Vec<Compression>)| x.0);
        v
    }

    /// The segments (by number) whose newest packet is more than `age` before the store's
    /// newest packet: a block is cut, and a segment sealed, a little after the packet time
    /// it spans passes the segment age, so this is read from the segments, not assumed.
    fn old_segments(root: &std::path::Path, age: Duration) -> Vec<u64> {
        let store = Store::open(root).unwrap();
        let last: Vec<(u64, u64)> = store
            .open_segments()
            .unwrap()
            .iter()
            .map(|s| (s.seq(), s.blocks().iter().map(|b| b.last_ns).max().unwrap()))
            .collect();
        let newest = last.iter().map(|l| l.1).max().unwrap();
        let mut old: Vec<u64> = last
            .iter()
            .filter(|l| newest - l.1 > age.as_nanos() as u64)
            .map(|l| l.0)
            .collect();
        old.sort();
        old
    }

    #[test]
    fn the_age_tier_recompresses_only_old_segments_and_never_twice_at_one_level() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let s = 1_000_000_000u64;
        // Four segments of packet time 0 s, 100 s, 200 s, 300 s (a segment is sealed when
        // its packets span 10 s), written at level 1.
        let (mut w, _) = StoreWriter::open(
            root,
            WriterConfig {
                segment_age: Duration::from_secs(10),
                segment_bytes: 1 << 30,
                ..cfg(Level::Zstd(1))
            },
        )
        .unwrap();
        for k in 0..4 {
            fill(&mut w, 100, k * 100 * s);
        }
        w.finish().unwrap();
        let (before, _) = contents(root);
        let levels = levels_by_segment(root);
        assert_eq!(levels.len(), 4, "{levels:?}");
        assert!(levels
            .iter()
            .all(|(_, c)| c.iter().all(|c| *c == Compression::Zstd(1))));
        // Older than 150 s before the newest packet (about 300 s): the first, at least.
        let old = old_segments(root, Duration::from_secs(150));
        assert!(!old.is_empty() && old.len() < 4, "{old:?}");
        let plan = compact::Plan {
            base: None,
            tier: Some(compact::AgeTier {
                age: Duration::from_secs(150),
                level: Level::Zstd(9),
            }),
        };
        let (mut w, _) = StoreWriter::open(root, cfg(Level::Zstd(1))).unwrap();
        let rep = w.compact_plan(&plan, &mut |_| {}).unwrap();
        let mut seqs: Vec<u64> = rep.compacted.iter().map(|c| c.seq).collect();
        seqs.sort();
        assert_eq!(seqs, old, "{rep:?}");
        assert!(rep.compacted.iter().all(|c| c.level == Level::Zstd(9)));
        // Again, and with the base level too: every block already holds its level.
        let rep = w.compact_plan(&plan, &mut |_| {}).unwrap();
        assert!(rep.compacted.is_empty(), "recompressed twice: {rep:?}");
        let both = compact::Plan {
            base: Some(Level::Zstd(1)),
            ..plan
        };
        let rep = w.compact_plan(&both, &mut |_| {}).unwrap();
        assert!(rep.compacted.is_empty(), "recompressed twice: {rep:?}");
        w.finish().unwrap();
        let after = levels_by_segment(root);
        for (seq, c) in &after {
            let want = if old.contains(seq) { 9 } else { 1 };
            assert!(
                c.iter().all(|c| *c == Compression::Zstd(want)),
                "segment {seq}: {c:?}"
            );
        }
        assert_eq!(contents(root).0, before);
        // A higher tier level later recompresses the old ones once more, at that level.
        let (mut w, _) = StoreWriter::open(root, cfg(Level::Zstd(1))).unwrap();
        let higher = compact::Plan {
            base: None,
            tier: Some(compact::AgeTier {
                age: Duration::from_secs(150),
                level: Level::Zstd(12),
            }),
        };
        let rep = w.compact_plan(&higher, &mut |_| {}).unwrap();
        assert_eq!(rep.compacted.len(), old.len(), "{rep:?}");
        w.finish().unwrap();
        for e in Store::open(root).unwrap().list().unwrap() {
            let problems = crate::verify::verify_segment(&e.path);
            assert!(problems.is_empty(), "{problems:?}");
        }
    }

    #[test]
    fn the_background_compactor_does_the_age_tier_after_the_base_level() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let s = 1_000_000_000u64;
        let (mut w, _) = StoreWriter::open(
            root,
            WriterConfig {
                segment_age: Duration::from_secs(10),
                segment_bytes: 1 << 30,
                ..cfg(Level::Store)
            },
        )
        .unwrap();
        for k in 0..4 {
            fill(&mut w, 100, k * 100 * s);
        }
        w.finish().unwrap();
        let (before, _) = contents(root);
        let old = old_segments(root, Duration::from_secs(150));
        assert!(!old.is_empty() && old.len() < 4, "{old:?}");
        let (w, _) = StoreWriter::open(
            root,
            WriterConfig {
                compact: true,
                age_tier: Some(compact::AgeTier {
                    age: Duration::from_secs(150),
                    level: Level::Zstd(9),
                }),
                ..cfg(Level::Zstd(1))
            },
        )
        .unwrap();
        let gauge = w.pressure_gauge();
        let t0 = Instant::now();
        loop {
            let p = gauge.read();
            if p.compacted_segments >= 4
                && p.pending_compaction_bytes == 0
                && p.tier_pending_bytes == 0
            {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "{p:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let p = gauge.read();
        assert_eq!(
            (p.tier_level, p.compact_target),
            (Some(9), Some(1)),
            "{p:?}"
        );
        assert_eq!(p.tier_age_ns, Some(150 * s));
        // Each segment was rewritten once: the old ones straight at the tier's level.
        assert_eq!(p.compacted_segments, 4, "{p:?}");
        w.finish().unwrap();
        let after = levels_by_segment(root);
        for (seq, c) in &after {
            let want = if old.contains(seq) { 9 } else { 1 };
            assert!(
                c.iter().all(|c| *c == Compression::Zstd(want)),
                "segment {seq}: {c:?}"
            );
        }
        assert_eq!(contents(root).0, before);
    }

    /// The nice value of this process's thread named `name`, from /proc.
    fn nice_of(name: &str) -> Option<i64> {
        for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() == name {
                let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
                // Fields after the command name (which ends in ')'): nice is field 19.
                let rest = &stat[stat.rfind(')')? + 2..];
                return rest.split(' ').nth(16)?.parse().ok();
            }
        }
        None
    }

    /// Sealed segment files this process holds open, and whether each was deleted.
    fn open_segments(root: &std::path::Path) -> Vec<(String, bool)> {
        let segs = root.join("segments");
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .map(|l| l.to_string_lossy().into_owned())
            .filter(|l| {
                let name = l.rsplit('/').next().unwrap_or_default();
                l.starts_with(&*segs.to_string_lossy())
                    && name.starts_with("seg-")
                    && name.contains(".pcapng.zst")
                    && !name.contains(".open")
            })
            .map(|l| {
                (
                    l.trim_end_matches(" (deleted)").to_string(),
                    l.ends_with("(deleted)"),
                )
            })
            .collect()
    }

    /// Capture busy for minutes while retention deletes the oldest segments: a compaction
    /// paused on one of them held its file open, so the deleted bytes stayed on the disk (on
    /// a 64 MiB disk, 11.6 MiB below the free-space floor for as long as traffic lasted).
    #[test]
    fn a_paused_compaction_lets_go_of_a_segment_deleted_meanwhile() {
        let dir = stored(800);
        let root = dir.path();
        let (w, _) = StoreWriter::open(
            root,
            WriterConfig {
                compact: true,
                ..cfg(Level::Zstd(1))
            },
        )
        .unwrap();
        w.urgency().store(1, Ordering::Relaxed);
        let gauge = w.pressure_gauge();
        let t0 = Instant::now();
        let held = loop {
            let open = open_segments(root);
            if gauge.read().compactor_paused && !open.is_empty() {
                break open[0].0.clone();
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", gauge.read());
            std::thread::sleep(Duration::from_millis(20));
        };
        // What retention does to the oldest segment (its file removed).
        std::fs::remove_file(&held).unwrap();
        let t0 = Instant::now();
        while open_segments(root)
            .iter()
            .any(|(p, deleted)| *deleted && *p == held)
        {
            assert!(
                t0.elapsed() < Duration::from_secs(2),
                "the paused compactor still holds the deleted {held}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Capture still busy: the compactor stays paused on the next segment.
        std::thread::sleep(Duration::from_millis(200));
        assert!(gauge.read().compactor_paused, "{:?}", gauge.read());
        w.urgency().store(0, Ordering::Relaxed);
        w.finish().unwrap();
        let leftovers: Vec<_> = std::fs::read_dir(root.join("segments"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    /// A segment in the object store is what its object holds: once its local file is
    /// trimmed, readers read the object against the local side index, so a local
    /// recompaction (new bytes, a new index) would make them disagree. Neither one uploaded
    /// before compaction nor one whose upload was confirmed while it was being compacted is
    /// renamed over; the others are compacted as before.
    #[test]
    fn a_segment_in_the_object_store_is_never_recompacted() {
        let dir = stored(800);
        let root = dir.path();
        let segs = root.join("segments");
        let sealed: Vec<(u64, std::path::PathBuf)> = Store::open(root)
            .unwrap()
            .list()
            .unwrap()
            .into_iter()
            .map(|e| (e.seq, e.path))
            .collect();
        assert!(sealed.len() >= 4, "{sealed:?}");
        let bytes = |p: &std::path::Path| std::fs::read(p).unwrap();
        let (first, second) = (&sealed[0], &sealed[1]);
        let (was_first, was_second) = (bytes(&first.1), bytes(&second.1));
        crate::ledger::record_tiered(&segs, first.0, was_first.len() as u64, "e1").unwrap();
        let (mut w, _) = StoreWriter::open(root, cfg(Level::Store)).unwrap();
        // The second's compaction prepared, then its upload confirmed, then the commit.
        let p = match compact::prepare(&second.1, Level::Zstd(3), &mut compact::Unpaused) {
            Ok(Outcome::Prepared(p)) => p,
            o => panic!("{o:?}"),
        };
        let tmp = p.tmp.clone();
        crate::ledger::record_tiered(&segs, second.0, was_second.len() as u64, "e2").unwrap();
        assert!(!commit(&w, p), "a segment uploaded meanwhile was compacted");
        assert!(!tmp.exists(), "its temporary file was left");
        // Every other segment is compacted; the two in the object store are not touched.
        let rep = w.compact_all(Level::Zstd(3), &mut |_| {}).unwrap();
        let done: Vec<u64> = rep.compacted.iter().map(|c| c.seq).collect();
        let others: Vec<u64> = sealed[2..].iter().map(|s| s.0).collect();
        let mut sorted = done.clone();
        sorted.sort();
        assert_eq!(sorted, others, "{rep:?}");
        w.finish().unwrap();
        assert!(bytes(&first.1) == was_first, "segment {} changed", first.0);
        assert!(
            bytes(&second.1) == was_second,
            "segment {} changed",
            second.0
        );
    }

    #[test]
    fn the_background_compactor_pauses_while_a_reader_is_behind_and_then_finishes() {
        let dir = stored(800);
        let root = dir.path();
        let (before, comps) = contents(root);
        assert!(comps.iter().all(|c| *c == Compression::Stored));
        let n = Store::open(root).unwrap().list().unwrap().len() as u64;
        let (w, _) = StoreWriter::open(
            root,
            WriterConfig {
                compact: true,
                ..cfg(Level::Zstd(1))
            },
        )
        .unwrap();
        // A capture reader is behind its ring: the compactor must stand still.
        w.urgency().store(1, Ordering::Relaxed);
        let gauge = w.pressure_gauge();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(nice_of("capsule-compact"), Some(19));
        let a = gauge.read();
        std::thread::sleep(Duration::from_millis(1500));
        let b = gauge.read();
        assert_eq!(a.compact_target, Some(1));
        assert_eq!(
            (a.compacted_segments, a.compacted_pending_bytes),
            (b.compacted_segments, b.compacted_pending_bytes),
            "the compactor went on while a reader was behind"
        );
        assert!(b.compacted_segments < n);
        assert!(b.compactor_paused && b.compactor_pauses >= 1, "{b:?}");
        // Caught up: the compactor goes on and compacts every segment.
        w.urgency().store(0, Ordering::Relaxed);
        let t0 = Instant::now();
        while gauge.read().compacted_segments < n || gauge.read().pending_compaction_bytes > 0 {
            assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", gauge.read());
            std::thread::sleep(Duration::from_millis(50));
        }
        let p = gauge.read();
        assert!(
            p.compacted_bytes_after < p.compacted_bytes_before / 2,
            "{p:?}"
        );
        w.finish().unwrap();
        let (after, comps) = contents(root);
        assert_eq!(after, before);
        assert!(
            comps.iter().all(|c| *c == Compression::Zstd(1)),
            "{comps:?}"
        );
        for e in Store::open(root).unwrap().list().unwrap() {
            let problems = crate::verify::verify_segment(&e.path);
            assert!(problems.is_empty(), "{problems:?}");
        }
    }
}
