//! Compression: the compressor threads, the ladder of levels they step down while capture
//! is short of CPU, and the gauge that tells `capsule status` how they keep up.
//!
//! ```text
//! RawBlock (producer) -> compress_loop (N threads): rung = pick_rung(queue, reader behind,
//!   disk bound) -> zstd frame with checksum at that rung's level, or a raw frame (store)
//!   -> crc32c of the frame -> Compressed (to the writer thread)
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

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
    /// The disk is what limits the writer (compression stays at the configured level).
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
    pub(super) budget: Option<u64>,
}

impl PressureGauge {
    pub fn read(&self) -> Pressure {
        let c = &self.compact;
        Pressure {
            compact_target: c
                .running
                .load(Ordering::Relaxed)
                .then(|| c.target.load(Ordering::Relaxed) as i32),
            pending_compaction_bytes: c.pending_bytes.load(Ordering::Relaxed),
            compacted_segments: c.segments.load(Ordering::Relaxed),
            compacted_bytes_before: c.bytes_before.load(Ordering::Relaxed),
            compacted_bytes_after: c.bytes_after.load(Ordering::Relaxed),
            compacted_pending_bytes: c.processed.load(Ordering::Relaxed),
            compactor_busy_ns: c.busy_ns.load(Ordering::Relaxed),
            compactor_paused: c.paused.load(Ordering::Relaxed),
            compactor_pauses: c.pauses.load(Ordering::Relaxed),
            budget_bytes: self.budget,
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

/// Which rung of the ladder (0: the configured level, 1: [`Level::FAST`], 2:
/// [`Level::FASTEST`], 3: [`Level::Store`]) compresses the next block, given the blocks waiting for a compressor
/// (`raw` of `raw_cap`), whether a capture reader is behind its ring, and whether the disk is
/// what limits the writer thread.
///
/// CPU short: step down as the compressors' queue fills (a quarter, half, three quarters),
/// and store at once while a reader is behind. Disk short (the writer spends half its time
/// writing): the configured level, whatever else, because fewer bytes is then what helps,
/// and storing would make the disk fall further behind.
pub(super) fn pick_rung(
    raw: usize,
    raw_cap: usize,
    reader_behind: bool,
    disk_bound: bool,
) -> usize {
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
        raw.meta.compression = levels[rung].into();
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
