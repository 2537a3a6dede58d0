//! Compression: the compressor threads, the ladder of levels they step down while capture
//! is short of CPU, and the gauge that tells `capsule status` how they keep up.
//!
//! ```text
//! RawBlock (producer) -> compress_loop (N threads): rung = Ladder::pick(queue, reader
//!   behind, disk bound; live capture starts at store and climbs while calm)
//!   -> zstd frame with checksum at that rung's level -> crc32c of the frame
//!   -> or, at the store rung, nothing: the writer thread lays the raw frame out around
//!      the block's bytes and takes its crc32c as it copies them
//!   -> Compressed (to the writer thread)
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::{Compressed, RawBlock};
use crate::format;

/// How a block is compressed: a zstd level, or stored (no compression: each block copied
/// into a raw zstd frame, still a zstd frame that every decompressor reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// A zstd level, [`Level::MIN_ZSTD`] to [`Level::MAX_ZSTD`]: higher compresses more and
    /// costs more CPU; negative levels are zstd's fast levels.
    Zstd(i32),
    /// Blocks stored uncompressed. Costs a copy; the last rung of the ladder.
    Store,
}

impl Level {
    /// The lowest zstd level capsule uses.
    pub const MIN_ZSTD: i32 = -1000;
    /// The highest zstd level.
    pub const MAX_ZSTD: i32 = 22;
    /// Level used for a block while the compressors are behind (see the module docs).
    pub const FAST: Level = Level::Zstd(-10);
    /// Level used for a block while the compressors are far behind: about 4 GB/s a core,
    /// close to a copy, and still an ordinary zstd frame (about 1.06x on the synth traffic).
    pub const FASTEST: Level = Level::Zstd(Level::MIN_ZSTD);

    /// Whether this is a level capsule can use.
    pub fn is_valid(self) -> bool {
        match self {
            Level::Zstd(l) => (Level::MIN_ZSTD..=Level::MAX_ZSTD).contains(&l),
            Level::Store => true,
        }
    }

    /// Of two levels, the one that costs less CPU.
    pub fn cheaper(self, other: Level) -> Level {
        match (self, other) {
            (Level::Store, _) | (_, Level::Store) => Level::Store,
            (Level::Zstd(a), Level::Zstd(b)) => Level::Zstd(a.min(b)),
        }
    }

    /// The rungs of the ladder from this configured level: itself, [`Level::FAST`],
    /// [`Level::FASTEST`], [`Level::Store`], none costlier than the configured level.
    pub fn ladder(self) -> [Level; 4] {
        [
            self,
            Level::FAST.cheaper(self),
            Level::FASTEST.cheaper(self),
            Level::Store,
        ]
    }
}

impl From<Level> for format::Compression {
    /// How a block written at `level` records its compression.
    fn from(level: Level) -> Self {
        match level {
            Level::Zstd(l) => format::Compression::Zstd(l),
            Level::Store => format::Compression::Stored,
        }
    }
}

impl Default for Level {
    fn default() -> Self {
        Level::Zstd(1)
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Level::Zstd(l) => write!(f, "{l}"),
            Level::Store => f.write_str("store"),
        }
    }
}

/// A `--level` that is neither `store` nor a zstd level capsule uses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected `store` or a zstd level from {min} to {max}, found {0:?}",
    min = Level::MIN_ZSTD,
    max = Level::MAX_ZSTD
)]
pub struct LevelError(pub String);

impl std::str::FromStr for Level {
    type Err = LevelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "store" {
            return Ok(Level::Store);
        }
        match s.parse::<i32>() {
            Ok(l) if Level::Zstd(l).is_valid() => Ok(Level::Zstd(l)),
            _ => Err(LevelError(s.to_string())),
        }
    }
}

/// How the store writer has been keeping up (for status displays): the blocks written at
/// each rung of the ladder, and why it stepped down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pressure {
    /// Blocks written at each rung of the ladder: the configured level, [`Level::FAST`],
    /// [`Level::FASTEST`], stored.
    pub blocks_by_rung: [u64; 4],
    /// The disk is busy: the writer thread spent half of its last quarter second writing.
    /// (The ladder keeps the configured level only while blocks also queue for the writer.)
    pub disk_bound: bool,
    /// Capture readers currently behind their kernel ring.
    pub readers_behind: u32,
    /// Sealed segments deleted because the disk was full (whatever the byte budget).
    #[serde(default)]
    pub segments_deleted_for_space: u64,
    /// Their bytes.
    #[serde(default)]
    pub bytes_deleted_for_space: u64,
    /// Packets received but not stored: the disk was full and no sealed segment was left to
    /// delete (cause "disk full").
    #[serde(default)]
    pub disk_full_drops: u64,
    /// The compactor's zstd target level, while one runs (capture's `--level`).
    #[serde(default)]
    pub compact_target: Option<i32>,
    /// Compressed bytes of sealed segments' blocks below the target (the compactor's last
    /// count).
    #[serde(default)]
    pub pending_compaction_bytes: u64,
    /// Segments compacted, and their bytes before and after.
    #[serde(default)]
    pub compacted_segments: u64,
    #[serde(default)]
    pub compacted_bytes_before: u64,
    #[serde(default)]
    pub compacted_bytes_after: u64,
    /// Pending bytes recompressed so far (its change over time is the compactor's rate).
    #[serde(default)]
    pub compacted_pending_bytes: u64,
    /// Time the compactor spent working, pauses excluded (ns).
    #[serde(default)]
    pub compactor_busy_ns: u64,
    /// Whether the compactor is paused for capture now, and how often it paused.
    #[serde(default)]
    pub compactor_paused: bool,
    #[serde(default)]
    pub compactor_pauses: u64,
    /// The store's byte budget, if any.
    #[serde(default)]
    pub budget_bytes: Option<u64>,
    /// The age tier's zstd level and age (ns), while a compactor with one runs
    /// (`--age-tier AGE:LEVEL`).
    #[serde(default)]
    pub tier_level: Option<i32>,
    #[serde(default)]
    pub tier_age_ns: Option<u64>,
    /// Compressed bytes of the tier's old segments below its level (last count).
    #[serde(default)]
    pub tier_pending_bytes: u64,
}

/// What a full disk cost so far, counted by the writer thread (see [`Pressure`]).
#[derive(Debug, Default)]
pub(crate) struct SpaceCounters {
    pub(super) evicted: AtomicU64,
    pub(super) evicted_bytes: AtomicU64,
    pub(super) dropped_packets: AtomicU64,
}

/// Reads [`Pressure`] while the writer runs.
#[derive(Debug, Clone)]
pub struct PressureGauge {
    pub(super) rungs: Arc<[AtomicU64; 4]>,
    pub(super) disk_bound: Arc<AtomicBool>,
    pub(super) urgent: Arc<AtomicU32>,
    pub(super) space: Arc<SpaceCounters>,
    pub(super) compact: Arc<super::compactor::CompactCounters>,
    /// The byte budget, `u64::MAX` for none (a reload may change it while running).
    pub(super) budget: Arc<AtomicU64>,
}

impl PressureGauge {
    /// Packets dropped so far because the disk was full and nothing was left to delete
    /// ([`Pressure::disk_full_drops`]), without reading the rest.
    pub fn disk_full_drops(&self) -> u64 {
        self.space.dropped_packets.load(Ordering::Relaxed)
    }

    pub fn read(&self) -> Pressure {
        let c = &self.compact;
        Pressure {
            compact_target: c
                .running
                .load(Ordering::Relaxed)
                .then(|| c.target.load(Ordering::Relaxed) as i32),
            pending_compaction_bytes: c.pending_bytes.load(Ordering::Relaxed),
            tier_level: c
                .tier
                .load(Ordering::Relaxed)
                .then(|| c.tier_level.load(Ordering::Relaxed) as i32),
            tier_age_ns: c
                .tier
                .load(Ordering::Relaxed)
                .then(|| c.tier_age_ns.load(Ordering::Relaxed)),
            tier_pending_bytes: c.tier_pending_bytes.load(Ordering::Relaxed),
            compacted_segments: c.segments.load(Ordering::Relaxed),
            compacted_bytes_before: c.bytes_before.load(Ordering::Relaxed),
            compacted_bytes_after: c.bytes_after.load(Ordering::Relaxed),
            compacted_pending_bytes: c.processed.load(Ordering::Relaxed),
            compactor_busy_ns: c.busy_ns.load(Ordering::Relaxed),
            compactor_paused: c.paused.load(Ordering::Relaxed),
            compactor_pauses: c.pauses.load(Ordering::Relaxed),
            budget_bytes: Some(self.budget.load(Ordering::Relaxed)).filter(|&b| b != u64::MAX),
            blocks_by_rung: std::array::from_fn(|i| self.rungs[i].load(Ordering::Relaxed)),
            disk_bound: self.disk_bound.load(Ordering::Relaxed),
            readers_behind: self.urgent.load(Ordering::Relaxed),
            segments_deleted_for_space: self.space.evicted.load(Ordering::Relaxed),
            bytes_deleted_for_space: self.space.evicted_bytes.load(Ordering::Relaxed),
            disk_full_drops: self.space.dropped_packets.load(Ordering::Relaxed),
        }
    }
}

/// What a compressor reads to pick its rung, and where it counts the rungs it used.
pub(super) struct Signals {
    pub(super) urgent: Arc<AtomicU32>,
    pub(super) disk_bound: Arc<AtomicBool>,
    pub(super) rungs: Arc<[AtomicU64; 4]>,
    /// The live ladder, shared by the compressor threads.
    pub(super) ladder: Arc<Mutex<Ladder>>,
}

/// One rung of the compression ladder.
enum Rung {
    Zstd(zstd::bulk::Compressor<'static>),
    Store,
}

impl Rung {
    fn new(level: Level) -> Option<Rung> {
        let Level::Zstd(level) = level else {
            return Some(Rung::Store);
        };
        let mut c = zstd::bulk::Compressor::new(level).ok()?;
        c.include_checksum(true).ok()?;
        Some(Rung::Zstd(c))
    }

    /// Makes the frame of `data` and returns its length and crc32c: a zstd frame into
    /// `frame`; at the store rung nothing is done here (`frame` stays empty, and the writer
    /// thread lays the raw frame out around `data` and takes its checksum as it copies it,
    /// see [`crate::segment::SegmentFile::append_raw`]): the checksum returned is 0.
    fn compress(&mut self, data: &[u8], frame: &mut Vec<u8>) -> std::io::Result<(u32, u32)> {
        frame.clear();
        match self {
            Rung::Zstd(c) => {
                frame.reserve(zstd::zstd_safe::compress_bound(data.len()));
                c.compress_to_buffer(data, frame)?;
                Ok((frame.len() as u32, crate::crc::crc32c(frame)))
            }
            Rung::Store => Ok((format::raw_frame_len(data.len()) as u32, 0)),
        }
    }

    fn is_store(&self) -> bool {
        matches!(self, Rung::Store)
    }
}

/// How long the live ladder stays calm on a rung before it climbs one (at first).
pub(super) const CLIMB_AFTER: Duration = Duration::from_secs(2);
/// The longest wait before a climb, after climbs that failed one after the other.
pub(super) const CLIMB_AFTER_MAX: Duration = Duration::from_secs(64);

/// The live ladder (adaptive compression): which rung (0: the configured level, 1:
/// [`Level::FAST`], 2: [`Level::FASTEST`], 3: [`Level::Store`]) compresses the next block.
/// One per writer, shared by its compressor threads.
///
/// It never makes capture drop a packet to compress one: it starts at the store rung (at
/// startup nothing says the host can afford compression), falls to store at once when a
/// capture reader is behind its ring or a quarter of the compressors' queue waits, steps
/// down one rung while two blocks or more wait, and climbs one rung at a time only after
/// [`CLIMB_AFTER`] without any of that. A climb that falls back before the next climb would
/// have been due doubles the wait (up to [`CLIMB_AFTER_MAX`]), so a host that cannot afford
/// a level tries it rarely; a full [`CLIMB_AFTER_MAX`] at the configured level resets it.
/// What the weaker rungs cost in disk, the compactor takes back later.
///
/// Disk short (the writer spends half its time writing *and* three quarters of its own queue
/// wait): the configured level, whatever else, because fewer bytes is then what helps, and
/// storing would make the disk fall further behind. A busy disk whose writer keeps up is not
/// short: there a reader behind its ring means the CPU is, and compressing would cost packets
/// (issue 10: a disk taking 650 MB/s of direct writes kept the writer busy more than half the
/// time, and the old rule, busy alone, compressed a third of the blocks at level 1 while the
/// reader dropped 10% of the packets that the store rung kept whole).
#[derive(Debug)]
pub(super) struct Ladder {
    rung: usize,
    /// When the rung last changed.
    since: Instant,
    /// Calm needed before the next climb.
    wait: Duration,
}

impl Ladder {
    pub(super) fn new(now: Instant) -> Ladder {
        Ladder {
            rung: 3,
            since: now,
            wait: CLIMB_AFTER,
        }
    }

    /// The rung for the next block, given the pipeline's [`Load`].
    pub(super) fn pick(&mut self, load: Load, now: Instant) -> usize {
        if load.disk_short() {
            return 0;
        }
        let Load { queued, cap, .. } = load;
        let calm_for = now.saturating_duration_since(self.since);
        if load.reader_behind || queued * 4 >= cap {
            if self.rung < 3 {
                if calm_for < self.wait * 2 {
                    // The last climb did not hold: try less often.
                    self.wait = (self.wait * 2).min(CLIMB_AFTER_MAX);
                }
                self.rung = 3;
                self.since = now;
            }
        } else if queued >= 2 {
            if self.rung < 3 {
                self.rung += 1;
                self.since = now;
            }
        } else if self.rung > 0 && calm_for >= self.wait {
            self.rung -= 1;
            self.since = now;
        } else if self.rung == 0 && calm_for >= CLIMB_AFTER_MAX {
            self.wait = CLIMB_AFTER;
        }
        self.rung
    }
}

/// What the live ladder reads before each block.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Load {
    /// Blocks waiting for a compressor, of `cap`.
    pub(super) queued: usize,
    pub(super) cap: usize,
    /// Compressed blocks waiting for the writer thread, of `write_cap`.
    pub(super) writing: usize,
    pub(super) write_cap: usize,
    /// A capture reader is behind its kernel ring.
    pub(super) reader_behind: bool,
    /// The writer thread spent half of its last quarter second in writes (`DiskLoad`).
    pub(super) disk_bound: bool,
}

impl Load {
    /// The disk is what holds the pipeline back: the writer is busy writing and its queue
    /// backs up behind it.
    fn disk_short(&self) -> bool {
        self.disk_bound && self.writing * 4 >= self.write_cap.max(1) * 3
    }
}

/// Compresses blocks until the producer hangs up. With `adaptive` (live capture), the level
/// follows the [`Ladder`]; without, it is the configured level. A weaker
/// ratio costs some disk for the length of a burst, while falling behind would cost packets
/// (capture's rings fill and the kernel drops). All are zstd frames.
///
/// Measured on the synth traffic (`zstd -b -B1048576`, one core): level 1 334 MB/s at 1.50x,
/// -10 1.36 GB/s at 1.22x, -1000 4.4 GB/s at 1.06x; storing is a copy.
pub(super) fn compress_loop(
    level: Level,
    adaptive: bool,
    rx: Receiver<RawBlock>,
    out: Sender<Compressed>,
    frames: Receiver<Vec<u8>>,
    signals: Signals,
) {
    let mut ladder = Vec::new();
    let levels = level.ladder();
    for l in levels {
        let Some(r) = Rung::new(l) else {
            return; // drops `out`: the writer sees the pipeline end early
        };
        ladder.push(r);
    }
    let raw_cap = rx.capacity().unwrap_or(0).max(1);
    let write_cap = out.capacity().unwrap_or(0).max(1);
    for mut raw in rx.iter() {
        let rung = if adaptive {
            let load = Load {
                queued: rx.len(),
                cap: raw_cap,
                writing: out.len(),
                write_cap,
                reader_behind: signals.urgent.load(Ordering::Relaxed) > 0,
                disk_bound: signals.disk_bound.load(Ordering::Relaxed),
            };
            let mut l = signals.ladder.lock().unwrap_or_else(|p| p.into_inner());
            l.pick(load, Instant::now())
        } else {
            0
        };
        signals.rungs[rung].fetch_add(1, Ordering::Relaxed);
        let raw_frame = ladder[rung].is_store();
        let mut frame = match raw_frame {
            true => Vec::new(),
            false => frames.try_recv().unwrap_or_default(),
        };
        let Ok((len, crc)) = ladder[rung].compress(&raw.data, &mut frame) else {
            return; // drops `out`: the writer sees the pipeline end early
        };
        raw.meta.compressed_len = len;
        raw.meta.compression = levels[rung].into();
        raw.meta.frame_crc = crc;
        let done = Compressed {
            order: raw.order,
            segment: raw.segment,
            meta: raw.meta,
            framed: None,
            frame,
            raw_frame,
            data: raw.data,
            records: raw.records,
        };
        if out.send(done).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `queued` of `cap` blocks waiting for a compressor, the writer's queue empty.
    fn ld(queued: usize, cap: usize, reader_behind: bool, disk_bound: bool) -> Load {
        Load {
            queued,
            cap,
            writing: 0,
            write_cap: 16,
            reader_behind,
            disk_bound,
        }
    }

    #[test]
    fn the_live_ladder_starts_at_store_falls_at_once_and_climbs_only_after_calm() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut l = Ladder::new(t0);
        // Startup: store, and still store before the first climb is due.
        assert_eq!(l.pick(ld(0, 16, false, false), t0), 3);
        assert_eq!(l.pick(ld(1, 16, false, false), at(1999)), 3);
        // Calm: one rung every 2 s up to the configured level.
        assert_eq!(l.pick(ld(0, 16, false, false), at(2000)), 2);
        assert_eq!(l.pick(ld(0, 16, false, false), at(3000)), 2);
        assert_eq!(l.pick(ld(1, 16, false, false), at(4000)), 1);
        assert_eq!(l.pick(ld(0, 16, false, false), at(6000)), 0);
        // Two blocks waiting: one rung down, and one more at each block while they do.
        assert_eq!(l.pick(ld(2, 16, false, false), at(6100)), 1);
        assert_eq!(l.pick(ld(3, 16, false, false), at(6200)), 2);
        // A quarter of the queue, or a reader behind its ring: store at once.
        assert_eq!(l.pick(ld(4, 16, false, false), at(6300)), 3);
        // That climb failed within twice the wait: the next climb waits 4 s.
        assert_eq!(l.pick(ld(0, 16, false, false), at(8300)), 3);
        assert_eq!(l.pick(ld(0, 16, false, false), at(10300)), 2);
        assert_eq!(
            l.pick(ld(0, 16, true, false), at(10400)),
            3,
            "reader behind"
        );
        // Failed again: 8 s now.
        assert_eq!(l.pick(ld(0, 16, false, false), at(14400)), 3);
        assert_eq!(l.pick(ld(0, 16, false, false), at(18400)), 2);
        // The disk is the limit (busy, and the writer's own queue backs up): compress as
        // configured, even with the queue full and a reader behind, without changing where
        // the CPU ladder stands.
        let disk_short = Load {
            writing: 12,
            ..ld(16, 16, true, true)
        };
        assert_eq!(l.pick(disk_short, at(18500)), 0);
        assert_eq!(l.pick(ld(0, 16, false, false), at(18600)), 2);
        // A busy disk whose writer keeps up (its queue short) is not the limit: a reader
        // behind means the CPU is short, and the block is stored.
        let busy_disk = Load {
            writing: 11,
            ..ld(0, 16, true, true)
        };
        assert_eq!(l.pick(busy_disk, at(18700)), 3);
    }

    #[test]
    fn the_wait_before_a_climb_is_capped_and_resets_after_a_long_calm_at_the_top() {
        let t0 = Instant::now();
        let mut l = Ladder::new(t0);
        let mut t = t0;
        // Climb and fall over and over: the wait doubles up to its cap.
        for _ in 0..10 {
            t += l.wait;
            assert_eq!(l.pick(ld(0, 16, false, false), t), 2);
            t += Duration::from_millis(10);
            assert_eq!(l.pick(ld(0, 16, true, false), t), 3);
        }
        assert_eq!(l.wait, CLIMB_AFTER_MAX);
        // Three climbs to the configured level, then a long calm there: back to 2 s.
        for rung in [2, 1, 0] {
            t += l.wait;
            assert_eq!(l.pick(ld(0, 16, false, false), t), rung);
        }
        t += CLIMB_AFTER_MAX;
        assert_eq!(l.pick(ld(0, 16, false, false), t), 0);
        assert_eq!(l.wait, CLIMB_AFTER);
    }
}
