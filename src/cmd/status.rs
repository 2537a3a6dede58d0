//! `capsule status`: how the store's capture runs and what the store holds.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use capsule_store::format::Compression;
use capsule_store::writer::Level;
use capsule_store::{SegmentReader, Store};

use crate::cli::StatusArgs;

/// What compaction would do to the store, and the retention horizon either way.
struct Compaction {
    target: Level,
    /// Compressed bytes of blocks below the target.
    pending: u64,
    /// Estimated store bytes once they are compacted: `None` when no block is at the target
    /// yet to estimate the ratio from.
    after: Option<u64>,
    budget: Option<u64>,
    /// Packet time the budget holds at the store's ratio now, and after compaction.
    horizon_now_ns: Option<u64>,
    horizon_after_ns: Option<u64>,
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
fn bytes_by_level(segs: &[SegmentReader]) -> Vec<(String, u64, u64)> {
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

fn secs(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{s:.1} s")
    }
}

/// The budgets saved in the store, for a person.
fn describe_budgets(b: Option<&capsule_store::budget::Budgets>) -> String {
    let Some(b) = b else {
        return "none saved (a writer keeps the default floor of free space: 10% of the disk \
                or 5 GiB, whichever is smaller)"
            .into();
    };
    let mut parts = Vec::new();
    if let Some(m) = b.max_bytes {
        parts.push(format!("at most {}", crate::units::format_bytes(m)));
    }
    if let Some(f) = b.min_free {
        let f = match f {
            capsule_store::budget::FreeSpace::Bytes(n) => crate::units::format_bytes(n),
            other => other.describe(),
        };
        parts.push(format!("keep {f} free"));
    }
    if let Some(age) = b.max_age {
        parts.push(format!(
            "data at most {} old",
            humantime::format_duration(age)
        ));
    }
    if parts.is_empty() {
        return "none (the disk may fill; then the oldest segments are deleted for room)".into();
    }
    format!("{} (saved in the store)", parts.join(", "))
}

/// What one look at a store finds: the capture's status file and the store's figures.
struct Gathered {
    st: Option<capsule_capture::status::CaptureStatus>,
    live: bool,
    segs: Vec<SegmentReader>,
    packets: u64,
    bytes: u64,
    first: Option<u64>,
    last: Option<u64>,
    span: u64,
    cp: Compaction,
    rate: Option<f64>,
    saved: Option<capsule_store::budget::Budgets>,
}

fn gather(store_dir: &Path, level: Level, max_bytes: Option<u64>) -> Result<Gathered> {
    let a_level = level;
    let a_max_bytes = max_bytes;
    // The store first, then the capture's status file at once: listing the segments of a
    // big store takes a while, and the two snapshots should be of the same moment.
    let store = Store::open(store_dir)?;
    let (segs, unreadable) = store.open_segments_checked()?;
    // The status file is a report of the capture, rewritten every second: a damaged one
    // (not JSON) says nothing of the store, so the rest is still shown.
    let st = match capsule_capture::status::read_status(store_dir) {
        Ok(st) => st,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            eprintln!(
                "capsule: warning: the capture's status cannot be read, shown as if no capture \
                 had run (a running capture rewrites it within a second): {e}"
            );
            None
        }
        Err(e) => return Err(e.into()),
    };
    super::warn_unreadable(&unreadable, "");
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
        eprintln!("capsule: warning: {e}");
        None
    });
    let budget = running
        .and_then(|s| s.store.budget_bytes)
        .or(a_max_bytes)
        .or(saved.and_then(|b| b.max_bytes));
    let span = last.zip(first).map_or(0, |(l, f)| l.saturating_sub(f));
    let cp = Compaction::of(&segs, target, budget, span);
    let rate = running.map(|s| s.compactor_bytes_per_s);
    Ok(Gathered {
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

/// The `capsule status --json` document (also `GET /v1/status` of `capsule serve`).
pub fn json(store_dir: &Path, level: Level, max_bytes: Option<u64>) -> Result<serde_json::Value> {
    let g = gather(store_dir, level, max_bytes)?;
    let mut v = json_of(&g, store_dir);
    super::with_times(&mut v);
    Ok(v)
}

fn json_of(g: &Gathered, store_dir: &Path) -> serde_json::Value {
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
        "alerts": super::live_alerts::read_status(store_dir),
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

pub fn run(a: &StatusArgs) -> Result<ExitCode> {
    let (store_dir, json, watch) = (a.store.as_path(), a.json, a.watch);
    loop {
        // The text, wrapped to the terminal, printed at once (redrawn in place by --watch).
        let width = crate::table::output_width();
        let mut out: Vec<String> = Vec::new();
        macro_rules! say {
            ($($t:tt)*) => {
                out.extend(crate::table::wrap(&format!($($t)*), width))
            };
        }
        let g = gather(store_dir, a.level, a.max_bytes)?;
        let Gathered {
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
        } = &g;
        let (live, packets, bytes, first, last, span, rate) =
            (*live, *packets, *bytes, *first, *last, *span, *rate);
        let running = st.as_ref().filter(|_| live);
        let now = capsule_store::now_ns();
        if json {
            super::print_json(json_of(&g, store_dir));
        } else {
            match &st {
                None => say!("capture: none has run on this store"),
                Some(s) => {
                    let state = if live {
                        "running"
                    } else if s.running {
                        "not running (stopped without a clean exit)"
                    } else {
                        "stopped"
                    };
                    say!(
                        "capture: {state}, pid {}, on {} since {}",
                        s.pid,
                        s.iface,
                        capsule_query::format_instant(s.started_ns)
                    );
                    // The mode in one short line; the setup's details and why auto
                    // fell back only with --verbose. Several interfaces: a line each.
                    let several = s.interfaces.len() > 1;
                    let modes: Vec<(&str, &str)> = if several {
                        s.interfaces
                            .iter()
                            .map(|i| (i.iface.as_str(), i.mode.as_str()))
                            .collect()
                    } else {
                        vec![("", s.mode.as_str())]
                    };
                    for (name, m) in modes {
                        let (mode, why) = match m.split_once("; ") {
                            Some((m, why)) => (m, Some(why)),
                            None => (m, None),
                        };
                        let head = if several {
                            format!("{name} mode")
                        } else {
                            "mode".to_string()
                        };
                        if a.verbose {
                            say!("  {head}: {mode}");
                            if let Some(why) = why {
                                say!("  {name}{}fallback: {why}", if several { " " } else { "" });
                            }
                        } else {
                            let short = mode.split(", queues").next().unwrap_or(mode);
                            let more = if why.is_some() {
                                " (fell back; --verbose says why)"
                            } else {
                                ""
                            };
                            say!("  {head}: {short}{more}");
                        }
                    }
                    say!(
                        "  stored {} packets ({} bytes) of {} seen; dropped {}",
                        s.packets,
                        s.wire_bytes,
                        s.seen,
                        s.drops
                    );
                    let causes = drop_causes(&s.drop_causes, &s.mode, true);
                    say!("  drops by cause: {causes}");
                    if several {
                        for i in &s.interfaces {
                            // The disk is the store's, counted once above.
                            let causes = drop_causes(&i.drop_causes, &i.mode, false);
                            let rate = if live {
                                format!(
                                    "; {:.0} packets/s, {:.1} Mbit/s",
                                    i.packets_per_s,
                                    i.bits_per_s / 1e6
                                )
                            } else {
                                String::new()
                            };
                            say!(
                                "  {}: stored {} packets ({} bytes) of {} seen; dropped {} ({}){rate}",
                                i.iface,
                                i.packets,
                                i.wire_bytes,
                                i.seen,
                                i.drops,
                                causes
                            );
                            if let Some(e) = &i.error {
                                say!("  {}: stopped: {e}", i.iface);
                            }
                        }
                    }
                    if live {
                        say!(
                            "  rate: {:.0} packets/s, {:.1} Mbit/s, {:.0} drops/s",
                            s.packets_per_s,
                            s.bits_per_s / 1e6,
                            s.drops_per_s
                        );
                    }
                    let p = &s.store;
                    let [level, fast, fastest, stored] = p.blocks_by_rung;
                    say!(
                        "  blocks written: {level} at the configured level, {fast} at -10, \
                         {fastest} at -1000, {stored} stored uncompressed; {}{}",
                        if s.drop_causes.disk_full > 0 {
                            format!(
                                "the disk filled: {} packets were dropped for want of room",
                                s.drop_causes.disk_full
                            )
                        } else if p.disk_bound {
                            "the disk is busy (the writer spends half its time writing; \
                             blocks that queue for it are compressed at the configured level)"
                                .to_string()
                        } else {
                            "the disk keeps up".to_string()
                        },
                        match p.readers_behind {
                            0 => String::new(),
                            n => format!("; {n} capture reader(s) behind their ring"),
                        }
                    );
                    if p.segments_deleted_for_space > 0 {
                        say!(
                            "  disk full: deleted {} oldest segment(s) ({} bytes) to make room",
                            p.segments_deleted_for_space,
                            p.bytes_deleted_for_space
                        );
                    }
                    say!(
                        "  VLAN tags restored {}, packets cut at 256 KiB {}, NIC timestamps {}; \
                         updated {} ({} ago)",
                        s.vlan_restored,
                        s.truncated,
                        s.hw_timestamps,
                        capsule_query::format_instant(s.updated_ns),
                        crate::units::format_duration_ns(now.saturating_sub(s.updated_ns))
                    );
                }
            }
            say!(
                "store: {} segment(s), {} packets, {}, {} .. {}",
                segs.len(),
                packets,
                crate::units::format_bytes(bytes),
                first.map(capsule_query::format_instant).unwrap_or_default(),
                last.map(capsule_query::format_instant).unwrap_or_default()
            );
            let after = cp.after.map_or("unknown".to_string(), |b| {
                format!("about {}", crate::units::format_bytes(b))
            });
            say!(
                "compaction: {} of blocks below level {}; compacted, the store would be {after}{}",
                crate::units::format_bytes(cp.pending),
                cp.target,
                match (rate, running.map(|s| s.store)) {
                    (Some(r), Some(p)) => format!(
                        "; compactor {:.1} MB/s, {} segment(s) compacted ({} -> {} bytes){}",
                        r / 1e6,
                        p.compacted_segments,
                        p.compacted_bytes_before,
                        p.compacted_bytes_after,
                        if p.compactor_paused {
                            ", paused for capture"
                        } else {
                            ""
                        }
                    ),
                    _ => String::new(),
                }
            );
            let levels: Vec<String> = bytes_by_level(segs)
                .iter()
                .map(|(l, b, _)| format!("{l}: {}", crate::units::format_bytes(*b)))
                .collect();
            if !levels.is_empty() {
                say!("bytes by level: {}", levels.join(", "));
            }
            if let Some(p) = running.map(|s| s.store) {
                if let (Some(l), Some(age)) = (p.tier_level, p.tier_age_ns) {
                    say!(
                        "age tier: segments older than {} at level {l}, {} below it",
                        crate::units::format_duration_ns(age),
                        crate::units::format_bytes(p.tier_pending_bytes)
                    );
                }
            }
            if let Some(al) = super::live_alerts::read_status(store_dir) {
                say!(
                    "live alerts: {} evaluation(s), {} event(s) sent, {} undelivered, {} \
                     engaged{}",
                    al.evaluations,
                    al.sent,
                    al.undelivered,
                    al.engaged,
                    al.last_error
                        .map_or(String::new(), |e| format!("; last error: {e}"))
                );
                for sk in &al.sinks {
                    say!(
                        "  alert sink {} {}: {} sent, {} undelivered{}",
                        sk.sink,
                        sk.target,
                        sk.sent,
                        sk.undelivered,
                        sk.last_error.as_ref().map_or(String::new(), |e| format!(
                            "; last error{}: {e}",
                            sk.last_error_at_ns.map_or(String::new(), |t| format!(
                                " at {}",
                                capsule_query::format_instant(t)
                            ))
                        ))
                    );
                }
            }
            say!("budgets: {}", describe_budgets(saved.as_ref()));
            match (cp.budget, cp.horizon_now_ns) {
                (Some(b), Some(h)) => say!(
                    "retention: a budget of {b} bytes holds {} of packets at the ratio now, {} \
                     after compaction",
                    secs(h),
                    cp.horizon_after_ns.map_or("unknown".into(), secs)
                ),
                _ => say!(
                    "retention: no byte budget (the store holds {} of packets)",
                    secs(span)
                ),
            }
            if watch && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                // Redraw in place: home, each line cleared to its end, the rest cleared.
                let mut frame = String::from("\x1b[H");
                for l in &out {
                    frame.push_str(l);
                    frame.push_str("\x1b[K\n");
                }
                frame.push_str("\x1b[J");
                print!("{frame}");
                std::io::Write::flush(&mut std::io::stdout())?;
            } else {
                for l in &out {
                    println!("{l}");
                }
                if watch {
                    println!();
                }
            }
        }
        if !watch {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// The drop causes the capture mode `mode` can have, and any other that counted, as
/// `"packet ring full 0, disk full 0"`; `disk` lists the store's disk-full drops.
fn drop_causes(c: &capsule_capture::status::DropCauses, mode: &str, disk: bool) -> String {
    let xdp = mode.starts_with("XDP");
    [
        ("packet ring full", c.packet_ring_full, !xdp),
        ("AF_XDP RX ring full", c.xsk_ring_full, xdp),
        ("AF_XDP dropped", c.xsk_dropped, xdp),
        ("queue without socket", c.no_socket, xdp),
        ("no headroom", c.no_room, false),
        ("store behind", c.pipeline, xdp),
        ("invalid descriptors", c.invalid, xdp),
        ("disk full", c.disk_full, true),
    ]
    .into_iter()
    .filter(|&(what, _, _)| disk || what != "disk full")
    .filter(|&(_, n, active)| active || n > 0)
    .map(|(what, n, _)| format!("{what} {n}"))
    .collect::<Vec<_>>()
    .join(", ")
}
