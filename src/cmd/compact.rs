//! `capsule compact`: recompress, at a target level, every block of the sealed segments that
//! was written below it (stored, or at a cheaper level by live capture's ladder), offline.
//!
//! Takes the writer lock like any writer (so it fails at once, with the lock error, while a
//! capture runs: the capture's own compactor does this work then), then each segment goes
//! through `StoreWriter::compact_all`: rewritten beside itself, synced, renamed into place,
//! its index updated.
//!
//! With `--older-than D` only the segments the age tier holds old (newest packet more than D
//! before the store's newest) are brought to `--level`; the others are left as they are.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use capsule_store::{Store, WriterConfig};

use crate::cli::CompactArgs;

pub fn run(a: &CompactArgs) -> Result<ExitCode> {
    // An existing store only: compaction creates nothing.
    let store = Store::open(&a.store)?;
    // Progress over the sealed segments' bytes (those already at the level pass quickly).
    let total: u64 = store
        .open_segments()?
        .iter()
        .filter(|s| s.state() == capsule_store::SegmentState::Sealed)
        .map(|s| s.bytes())
        .sum();
    drop(store);
    let cfg = WriterConfig {
        threads: 1,
        ..WriterConfig::default()
    };
    let (mut writer, opened) = capsule_index::open_writer(&a.store, cfg)?;
    if !a.json {
        crate::notes::print_open_report(&opened, false);
        for p in &opened.compaction_leftovers {
            println!(
                "removed {} (left by a compaction a crash interrupted)",
                p.display()
            );
        }
    }
    let t0 = Instant::now();
    let json = a.json;
    let progress = crate::progress::Progress::bytes("compact", Some(total));
    let plan = match a.older_than {
        None => capsule_store::compact::Plan::all(a.level),
        Some(age) => capsule_store::compact::Plan {
            base: None,
            tier: Some(capsule_store::compact::AgeTier {
                age,
                level: a.level,
            }),
        },
    };
    let report = writer.compact_plan(&plan, &mut |c| {
        progress.add(c.bytes_before);
        progress.message(format!("segment {}", c.seq));
        if !json {
            progress.suspend(|| {
                println!(
                    "segment {}: {} -> {} ({} of {} blocks recompressed) in {:.2} s",
                    c.seq,
                    crate::units::format_bytes(c.bytes_before),
                    crate::units::format_bytes(c.bytes_after),
                    c.recompressed,
                    c.blocks,
                    c.busy.as_secs_f64()
                );
            });
        }
    })?;
    progress.finish();
    writer.finish()?;
    let secs = t0.elapsed().as_secs_f64();
    let before: u64 = report.compacted.iter().map(|c| c.bytes_before).sum();
    let after: u64 = report.compacted.iter().map(|c| c.bytes_after).sum();
    if json {
        let segs: Vec<_> = report
            .compacted
            .iter()
            .map(|c| {
                serde_json::json!({"seq": c.seq, "bytes_before": c.bytes_before,
                    "bytes_after": c.bytes_after, "blocks": c.blocks,
                    "recompressed": c.recompressed, "seconds": c.busy.as_secs_f64()})
            })
            .collect();
        let skipped: Vec<_> = report
            .skipped
            .iter()
            .map(|(seq, why)| serde_json::json!({"seq": seq, "problem": why}))
            .collect();
        let v = serde_json::json!({
            "level": a.level.to_string(),
            "older_than_ns": a.older_than.map(|d| d.as_nanos() as u64),
            "segments_rewritten": report.compacted.len(),
            "bytes_before": before, "bytes_after": after, "seconds": secs,
            "compacted": segs, "skipped": skipped, "deleted_meanwhile": report.vanished,
        });
        crate::output::print_json(v);
    } else {
        let older = a
            .older_than
            .map(|d| format!(" older than {}", humantime::format_duration(d)))
            .unwrap_or_default();
        println!(
            "compacted {} segment(s){older} at level {}: {} -> {} ({:.1}%) in {secs:.2} s \
             ({:.1} MB/s)",
            report.compacted.len(),
            a.level,
            crate::units::format_bytes(before),
            crate::units::format_bytes(after),
            100.0 * after as f64 / before.max(1) as f64,
            crate::notes::mb_per_s(before, secs)
        );
    }
    for (seq, why) in &report.skipped {
        eprintln!("capsule: warning: segment {seq} was not compacted: {why}");
    }
    if !report.skipped.is_empty() {
        return Ok(ExitCode::from(crate::output::PARTIAL));
    }
    Ok(ExitCode::SUCCESS)
}
