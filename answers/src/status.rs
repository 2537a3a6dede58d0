//! The state of a store and of the capture writing it: `capsule status` and
//! `GET /v1/status`. One look at the store (segments, bytes, span, compaction, budgets) and
//! at the files a running capture keeps beside it (its status, live alerts' counts).

use std::path::Path;

use capsule_store::format::Compression;
use capsule_store::writer::Level;
use capsule_store::{SegmentReader, Store};
use serde::{Deserialize, Serialize};

use crate::AnswerError;

/// What to look at the store with: the compaction target to measure pending bytes
/// against, and a byte budget to compute the retention horizon with (a running capture's
/// own target and budget win over both).
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub level: Level,
    pub max_bytes: Option<u64>,
}

impl Default for Request {
    fn default() -> Request {
        Request {
            level: Level::Zstd(1),
            max_bytes: None,
        }
    }
}

/// The live alerts' status file's name in the store directory.
pub const ALERT_STATUS_FILE: &str = "alerts-status.json";

/// What `capsule status` shows of live alerts (written by the capture's live alerts).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AlertStatus {
    pub evaluations: u64,
    /// Events delivered, over all sinks.
    pub sent: u64,
    /// Events not delivered (queue full, retries exhausted, a write failed), over all sinks.
    pub undelivered: u64,
    pub engaged: usize,
    /// The last failed evaluation of the rules (each sink has its own errors).
    pub last_error: Option<String>,
    #[serde(default)]
    pub sinks: Vec<SinkStatus>,
    pub updated_ns: u64,
    /// The rules evaluated (those the config does not disable).
    #[serde(default)]
    pub rules: Vec<String>,
    /// Times the rules were replaced by a reload of the config file (SIGHUP).
    #[serde(default)]
    pub reloads: u64,
}

/// One sink's counts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SinkStatus {
    /// `file`, `syslog-udp`, `syslog-unix` or `webhook`.
    pub sink: String,
    /// The file, `HOST:PORT`, socket path or URL.
    pub target: String,
    pub sent: u64,
    pub undelivered: u64,
    pub last_error: Option<String>,
    pub last_error_at_ns: Option<u64>,
}

/// Reads `STORE/alerts-status.json`, if live alerts ever ran there.
pub fn read_alert_status(store: &Path) -> Option<AlertStatus> {
    let text = std::fs::read(store.join(ALERT_STATUS_FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// What compaction would do to the store, and the retention horizon either way.
#[derive(Debug)]
pub struct Compaction {
    pub target: Level,
    /// Compressed bytes of blocks below the target.
    pub pending: u64,
    /// Estimated store bytes once they are compacted: `None` when no block is at the target
    /// yet to estimate the ratio from.
    pub after: Option<u64>,
    pub budget: Option<u64>,
    /// Packet time the budget holds at the store's ratio now, and after compaction.
    pub horizon_now_ns: Option<u64>,
    pub horizon_after_ns: Option<u64>,
}

impl Compaction {
    fn of(segs: &[SegmentReader], target: Level, budget: Option<u64>, span_ns: u64) -> Self {
        let bytes: u64 = segs.iter().map(|s| s.bytes()).sum();
        let blocks = || segs.iter().flat_map(|s| s.blocks());
        let pending = blocks()
            .filter(|b| capsule_store::compact::is_pending(b, target))
            .map(|b| u64::from(b.compressed_len))
            .sum::<u64>();
        let pending_raw: u64 = blocks()
            .filter(|b| capsule_store::compact::is_pending(b, target))
            .map(|b| u64::from(b.uncompressed_len))
            .sum();
        // The ratio of the blocks already at (or above) the target level.
        let (c, u) = match target {
            Level::Zstd(t) => blocks()
                .filter(|b| matches!(b.compression, Compression::Zstd(l) if l >= t))
                .fold((0u64, 0u64), |(c, u), b| {
                    (
                        c + u64::from(b.compressed_len),
                        u + u64::from(b.uncompressed_len),
                    )
                }),
            Level::Store => (0, 0),
        };
        // None at the target yet: the ratio of a few pending blocks compressed at it.
        let (c, u) = if u > 0 {
            (c, u)
        } else {
            sample_ratio(segs, target)
        };
        let after = if pending == 0 {
            Some(bytes)
        } else if u > 0 {
            Some(bytes - pending + (pending_raw as u128 * c as u128 / u as u128) as u64)
        } else {
            None
        };
        let horizon = |stored: u64| {
            let b = budget?;
            (stored > 0).then(|| (span_ns as u128 * b as u128 / stored as u128) as u64)
        };
        Compaction {
            target,
            pending,
            after,
            budget,
            horizon_now_ns: horizon(bytes),
            horizon_after_ns: after.and_then(horizon),
        }
    }
}

/// Compressed bytes and blocks of the store at each compression it holds: `store`, then the
/// zstd levels from the lowest, then blocks from before blocks recorded it (`unrecorded`).
pub fn bytes_by_level(segs: &[SegmentReader]) -> Vec<(String, u64, u64)> {
    let mut m: std::collections::BTreeMap<(u8, i32), (u64, u64)> = Default::default();
    for b in segs.iter().flat_map(|s| s.blocks()) {
        let k = match b.compression {
            Compression::Stored => (0, 0),
            Compression::Zstd(l) => (1, l),
            Compression::NotRecorded => (2, 0),
            Compression::Unknown(c) => (3, i32::from(c)),
        };
        let e = m.entry(k).or_default();
        e.0 += u64::from(b.compressed_len);
        e.1 += 1;
    }
    m.into_iter()
        .map(|((kind, l), (bytes, blocks))| {
            let name = match kind {
                0 => "store".to_string(),
                1 => l.to_string(),
                2 => "unrecorded".to_string(),
                _ => format!("unknown code {l}"),
            };
            (name, bytes, blocks)
        })
        .collect()
}

/// Compressed and uncompressed bytes of up to 16 pending blocks, spread over the store,
/// compressed at `target`.
fn sample_ratio(segs: &[SegmentReader], target: Level) -> (u64, u64) {
    let Level::Zstd(level) = target else {
        return (0, 0);
    };
    let Ok(mut dctx) = zstd::bulk::Decompressor::new() else {
        return (0, 0);
    };
    let (mut frame, mut data) = (Vec::new(), Vec::new());
    let (mut c, mut u, mut k) = (0u64, 0u64, 0usize);
    let is_sample = |b: &capsule_store::format::BlockMeta| {
        b.packets > 0 && capsule_store::compact::is_pending(b, target)
    };
    let every = segs
        .iter()
        .flat_map(|s| s.blocks())
        .filter(|b| is_sample(b))
        .count()
        .div_ceil(16)
        .max(1);
    for seg in segs {
        for (i, b) in seg.blocks().iter().enumerate() {
            if !is_sample(b) {
                continue;
            }
            k += 1;
            if (k - 1) % every != 0 {
                continue;
            }
            if seg.read_block(i, &mut dctx, &mut frame, &mut data).is_err() {
                continue;
            }
            if let Ok(z) = zstd::bulk::compress(&data, level) {
                c += z.len() as u64;
                u += data.len() as u64;
            }
        }
    }
    (c, u)
}

/// What one look at a store finds: the capture's status file and the store's figures.
#[derive(Debug)]
pub struct Answer {
    pub st: Option<capsule_capture::status::CaptureStatus>,
    pub live: bool,
    pub segs: Vec<SegmentReader>,
    pub packets: u64,
    pub bytes: u64,
    pub first: Option<u64>,
    pub last: Option<u64>,
    pub span: u64,
    pub cp: Compaction,
    pub rate: Option<f64>,
    pub saved: Option<capsule_store::budget::Budgets>,
    /// Segments that could not be read (their bytes are not counted).
    pub unreadable: Vec<capsule_store::Unreadable>,
    /// Warnings about what the look could not read (a damaged status file, budgets).
    pub warnings: Vec<String>,
    /// Live alerts' counts, if live alerts ever ran on the store.
    pub alerts: Option<AlertStatus>,
    /// Where the segments live, from the store's ledger (`None`: nothing ever tiered and
    /// no backlog recorded, or no ledger).
    pub tier: Option<TierStatus>,
}

/// Looks at the store and the capture's status at most this many times for a pair of the
/// same moment.
const STATUS_TRIES: usize = 3;

/// `look()` between two `read()`s of a status, repeated (at most `tries` times) while the
/// status's `stamp` changed between them: the look with the status read after it, and
/// whether the two reads agreed (else the last attempt's pair).
fn around<T, S, K: PartialEq, E>(
    tries: usize,
    mut read: impl FnMut() -> Result<S, E>,
    mut look: impl FnMut() -> Result<T, E>,
    stamp: impl Fn(&S) -> K,
) -> Result<((T, S), bool), E> {
    let mut before = read()?;
    let mut attempt = 1;
    loop {
        let t = look()?;
        let after = read()?;
        let agreed = stamp(&before) == stamp(&after);
        if agreed || attempt >= tries {
            return Ok(((t, after), agreed));
        }
        attempt += 1;
        before = after;
    }
}

/// Looks at the store in `store_dir` as `req` asks.
pub fn answer(store_dir: &Path, req: &Request) -> Result<Answer, AnswerError> {
    let (a_level, a_max_bytes) = (req.level, req.max_bytes);
    let err = |source| AnswerError::Store {
        store: store_dir.display().to_string(),
        source,
    };
    let mut warnings = Vec::new();
    // The status file is a report of the capture, rewritten every second: a damaged one
    // (not JSON) says nothing of the store, so the rest is still shown.
    let read_st = || match capsule_capture::status::read_status(store_dir) {
        Ok(st) => Ok((st, None)),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Ok((
            None,
            Some(format!(
                "the capture's status cannot be read, shown as if no capture had run (a \
                 running capture rewrites it within a second): {e}"
            )),
        )),
        Err(e) => Err(AnswerError::Status(e)),
    };
    let look = || -> Result<_, AnswerError> {
        let store = Store::open(store_dir).map_err(err)?;
        let (segs, mut unreadable) = store.open_segments_checked().map_err(err)?;
        // Segments in the object store only are no problem: the tier line counts them.
        unreadable.retain(|u| u.problem != capsule_store::store::TRIMMED_PROBLEM);
        Ok((store, segs, unreadable))
    };
    // The capture's status before and after the look at the store, again while it changed
    // in between (a segment sealed), so that the two are of the same moment.
    let stamp = |st: &(
        Option<capsule_capture::status::CaptureStatus>,
        Option<String>,
    )| { st.0.as_ref().map(|s| (s.pid, s.updated_ns)) };
    let (((store, segs, unreadable), (st, st_warning)), agreed) =
        around(STATUS_TRIES, read_st, look, stamp)?;
    warnings.extend(st_warning);
    if !agreed {
        warnings.push(format!(
            "the capture rewrote its status during each of {STATUS_TRIES} looks at the store: \
             its figures may be up to a second apart from the store's"
        ));
    }
    let packets: u64 = segs
        .iter()
        .flat_map(|s| s.blocks())
        .map(|b| u64::from(b.packets))
        .sum();
    let bytes: u64 = segs.iter().map(|s| s.bytes()).sum();
    let first = segs
        .iter()
        .flat_map(|s| s.blocks())
        .map(|b| b.first_ns)
        .min();
    let last = segs
        .iter()
        .flat_map(|s| s.blocks())
        .map(|b| b.last_ns)
        .max();
    let now = capsule_store::now_ns();
    // Live: the capture says it runs, its process exists, and it wrote within 5 s.
    let live = st.as_ref().is_some_and(|s| s.is_live(now));
    // A running capture's compactor target and budget win over the flags.
    let running = st.as_ref().filter(|_| live);
    let target = running
        .and_then(|s| s.store.compact_target)
        .map_or(a_level, Level::Zstd);
    let saved = capsule_store::budget::load(store.root()).unwrap_or_else(|e| {
        warnings.push(e.to_string());
        None
    });
    let budget = running
        .and_then(|s| s.store.budget_bytes)
        .or(a_max_bytes)
        .or(saved.and_then(|b| b.max_bytes));
    let span = last.zip(first).map_or(0, |(l, f)| l.saturating_sub(f));
    let cp = Compaction::of(&segs, target, budget, span);
    let rate = running.map(|s| s.compactor_bytes_per_s);
    Ok(Answer {
        unreadable,
        warnings,
        alerts: read_alert_status(store_dir),
        tier: TierStatus::of(&store.segments_dir()),
        st,
        live,
        segs,
        packets,
        bytes,
        first,
        last,
        span,
        cp,
        rate,
        saved,
    })
}

impl Serialize for Answer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl Answer {
    /// The `capsule status --json` document (also `GET /v1/status` of `capsule serve`),
    /// before every instant gets its RFC 3339 text beside it.
    pub fn to_json(&self) -> serde_json::Value {
        let g = self;
        let cp = &g.cp;
        let levels: Vec<_> = bytes_by_level(&g.segs)
        .into_iter()
        .map(|(level, bytes, blocks)| serde_json::json!({"level": level, "bytes": bytes, "blocks": blocks}))
        .collect();
        // The running capture's age tier (`--age-tier`), if it has one.
        let tier = g.st.as_ref().filter(|_| g.live).and_then(|s| {
            let p = s.store;
            Some(
                serde_json::json!({"level": p.tier_level?.to_string(), "age_ns": p.tier_age_ns,
            "pending_bytes": p.tier_pending_bytes}),
            )
        });
        serde_json::json!({
            "tier": g.tier,
            "alerts": g.alerts,
            "capture": g.st, "live": g.live,
            "store": {"segments": g.segs.len(), "packets": g.packets, "bytes": g.bytes,
                      "first_ns": g.first, "last_ns": g.last,
                      "compaction_target": cp.target.to_string(),
                      "pending_compaction_bytes": cp.pending,
                      "bytes_after_compaction": cp.after,
                      "compactor_bytes_per_s": g.rate,
                      "bytes_by_level": levels,
                      "age_tier": tier,
                      "budget_bytes": cp.budget,
                      "retention_horizon_ns": cp.horizon_now_ns,
                      "retention_horizon_after_compaction_ns": cp.horizon_after_ns,
                      "budgets": g.saved},
        })
    }
}

/// The object-store tier as the store's ledger records it (docs/tier.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierStatus {
    /// Bytes of the live segments on the local disk, and their count.
    pub local_bytes: u64,
    pub local_segments: usize,
    /// Bytes of the segments confirmed in the object store (some also local).
    pub tiered_bytes: u64,
    pub tiered_segments: usize,
    /// Of those, the ones whose local file was trimmed.
    pub tiered_only_segments: usize,
    /// Sealed segments not uploaded yet.
    pub backlog_segments: usize,
    pub backlog_bytes: u64,
    /// The oldest packet the object store holds.
    pub horizon_ns: Option<u64>,
}

impl TierStatus {
    /// From the ledger of `segments_dir`; `None` when nothing was ever tiered.
    pub fn of(segments_dir: &std::path::Path) -> Option<TierStatus> {
        let l = capsule_store::ledger::read(segments_dir).ok()??;
        if l.tiered.is_empty() {
            return None;
        }
        let mut t = TierStatus::default();
        for s in l.live.values() {
            if !l.trimmed.contains(&s.seq) {
                t.local_bytes += s.bytes;
                t.local_segments += 1;
            }
            match l.tiered.get(&s.seq) {
                Some(x) => {
                    t.tiered_bytes += x.bytes;
                    t.tiered_segments += 1;
                    if s.packets > 0 {
                        t.horizon_ns = Some(t.horizon_ns.map_or(s.first_ns, |h| h.min(s.first_ns)));
                    }
                }
                None => {
                    t.backlog_segments += 1;
                    t.backlog_bytes += s.bytes;
                }
            }
        }
        t.tiered_only_segments = l.trimmed.len();
        Some(t)
    }
}

/// What compaction would do, as [`Shown`] has it: the target as its name.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionShown {
    pub target: String,
    pub pending: u64,
    pub after: Option<u64>,
    pub budget: Option<u64>,
    pub horizon_now_ns: Option<u64>,
    pub horizon_after_ns: Option<u64>,
}

/// What `capsule status` prints, read from the document of [`Answer::to_json`]: so the
/// status of a local store and that of a server (`GET /v1/status`) are printed by the one
/// renderer.
#[derive(Debug, Clone)]
pub struct Shown {
    pub st: Option<capsule_capture::status::CaptureStatus>,
    pub live: bool,
    /// How many segments the store has.
    pub segments: usize,
    pub packets: u64,
    pub bytes: u64,
    pub first: Option<u64>,
    pub last: Option<u64>,
    pub span: u64,
    pub cp: CompactionShown,
    pub rate: Option<f64>,
    pub saved: Option<capsule_store::budget::Budgets>,
    pub alerts: Option<AlertStatus>,
    /// [`bytes_by_level`]: the level's name, its bytes and blocks.
    pub levels: Vec<(String, u64, u64)>,
    pub tier: Option<TierStatus>,
}

impl Shown {
    /// Reads the document of [`Answer::to_json`] (instants' text beside them or not).
    pub fn from_json(v: serde_json::Value) -> Result<Shown, serde_json::Error> {
        #[derive(Deserialize)]
        struct Level {
            level: String,
            bytes: u64,
            blocks: u64,
        }
        #[derive(Deserialize)]
        struct StoreDoc {
            segments: usize,
            packets: u64,
            bytes: u64,
            first_ns: Option<u64>,
            last_ns: Option<u64>,
            compaction_target: String,
            pending_compaction_bytes: u64,
            bytes_after_compaction: Option<u64>,
            compactor_bytes_per_s: Option<f64>,
            bytes_by_level: Vec<Level>,
            budget_bytes: Option<u64>,
            retention_horizon_ns: Option<u64>,
            retention_horizon_after_compaction_ns: Option<u64>,
            budgets: Option<capsule_store::budget::Budgets>,
        }
        #[derive(Deserialize)]
        struct Doc {
            #[serde(default)]
            tier: Option<TierStatus>,
            alerts: Option<AlertStatus>,
            capture: Option<capsule_capture::status::CaptureStatus>,
            live: bool,
            store: StoreDoc,
        }
        let d: Doc = serde_json::from_value(v)?;
        let s = d.store;
        Ok(Shown {
            st: d.capture,
            live: d.live,
            segments: s.segments,
            packets: s.packets,
            bytes: s.bytes,
            first: s.first_ns,
            last: s.last_ns,
            span: s
                .last_ns
                .zip(s.first_ns)
                .map_or(0, |(l, f)| l.saturating_sub(f)),
            cp: CompactionShown {
                target: s.compaction_target,
                pending: s.pending_compaction_bytes,
                after: s.bytes_after_compaction,
                budget: s.budget_bytes,
                horizon_now_ns: s.retention_horizon_ns,
                horizon_after_ns: s.retention_horizon_after_compaction_ns,
            },
            rate: s.compactor_bytes_per_s,
            saved: s.budgets,
            alerts: d.alerts,
            tier: d.tier,
            levels: s
                .bytes_by_level
                .into_iter()
                .map(|l| (l.level, l.bytes, l.blocks))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn the_look_is_retried_while_the_status_changed_around_it() {
        // The status changes (a segment seals) during the first look only: the answer is
        // the second look with the status read after it.
        let status = Cell::new(1u64);
        let looks = Cell::new(0u32);
        let ((seen, st), agreed) = around(
            3,
            || Ok::<_, ()>(status.get()),
            || {
                looks.set(looks.get() + 1);
                if looks.get() == 1 {
                    status.set(2);
                }
                Ok(looks.get())
            },
            |s| *s,
        )
        .unwrap();
        assert_eq!((seen, st, agreed), (2, 2, true));
        assert_eq!(looks.get(), 2);
    }

    #[test]
    fn a_status_that_always_changes_gives_up_after_the_tries_and_says_so() {
        let status = Cell::new(0u64);
        let looks = Cell::new(0u32);
        let ((seen, _), agreed) = around(
            3,
            || Ok::<_, ()>(status.get()),
            || {
                looks.set(looks.get() + 1);
                status.set(status.get() + 1);
                Ok(looks.get())
            },
            |s| *s,
        )
        .unwrap();
        assert_eq!((seen, agreed), (3, false));
    }
}
