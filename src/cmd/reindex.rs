//! `capsule reindex`: rebuild the side index of every sealed segment.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use capsule_store::Store;

use crate::cli::ReindexArgs;

pub fn run(a: &ReindexArgs) -> Result<ExitCode> {
    let store = Store::open(&a.store)?;
    let mut indexed = Vec::new();
    // No writer lock: a running capture may hold it, and an index file is derived data
    // replaced by an atomic rename, so a capture writing the same index writes the same bytes.
    let t0 = Instant::now();
    let mut bytes = 0u64;
    let mut idx_bytes = 0u64;
    let (segs, unreadable) = store.open_segments_checked()?;
    let mut failed = unreadable.len();
    crate::notes::warn_unreadable(&unreadable, "so it gets no index");
    let sealed =
        |s: &&capsule_store::SegmentReader| s.state() == capsule_store::SegmentState::Sealed;
    let total: u64 = segs.iter().filter(sealed).map(|s| s.bytes()).sum();
    let progress = crate::progress::Progress::bytes("reindex", Some(total));
    for seg in &segs {
        progress.message(format!("segment {}", seg.seq()));
        if seg.state() != capsule_store::SegmentState::Sealed {
            continue;
        }
        // Damage stays local: a segment whose blocks cannot all be read is named and left
        // without an index (queries read it whole); the others are still indexed.
        let idx = match capsule_index::sideindex::rebuild(&store.index_dir(), seg) {
            Ok(idx) => idx,
            Err(e) => {
                eprintln!(
                    "capsule: warning: segment {} cannot be indexed: {}",
                    seg.seq(),
                    capsule_store::error::chain(&e)
                );
                failed += 1;
                continue;
            }
        };
        let path = idx.write(&store.index_dir())?;
        progress.add(seg.bytes());
        bytes += seg.bytes();
        idx_bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if a.json {
            indexed.push(serde_json::json!({
                "seq": seg.seq(), "blocks": idx.blocks.len(), "flows": idx.flows.len(),
                "path": path,
            }));
        } else {
            println!(
                "segment {}: {} blocks, {} flows -> {}",
                seg.seq(),
                idx.blocks.len(),
                idx.flows.len(),
                path.display()
            );
        }
    }
    progress.finish();
    // The store-wide catalog, from the indexes just written.
    let rows = capsule_index::catalog::rebuild(&store)?;
    // The rollups of whole slices, from the same indexes.
    capsule_index::rollup::rebuild(&store, true)?;
    let secs = t0.elapsed().as_secs_f64();
    if a.json {
        crate::output::print_json(serde_json::json!({
            "segments": segs.len(), "indexed": indexed, "failed": failed, "seconds": secs,
            "index_bytes": idx_bytes, "stored_bytes": bytes, "catalog_rows": rows,
        }));
    } else {
        println!(
            "reindexed {} segment(s) in {secs:.2} s ({rows} in the catalog); index is {}, {:.3}% \
             of {} stored",
            segs.len(),
            crate::units::format_bytes(idx_bytes),
            100.0 * idx_bytes as f64 / bytes.max(1) as f64,
            crate::units::format_bytes(bytes)
        );
    }
    if failed > 0 {
        eprintln!(
            "capsule: {failed} segment(s) could not be indexed (exit status {})",
            crate::output::PARTIAL
        );
        return Ok(ExitCode::from(crate::output::PARTIAL));
    }
    Ok(ExitCode::SUCCESS)
}
