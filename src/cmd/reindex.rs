//! `capsule reindex`: rebuild the side index of every sealed segment.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use capsule_store::Store;

pub fn run(store: &Path) -> Result<ExitCode> {
    let store = Store::open(store)?;
    // Writers rebuild missing indexes themselves; take the lock so two never race.
    let _lock = store.lock_writer()?;
    let t0 = Instant::now();
    let mut bytes = 0u64;
    let mut idx_bytes = 0u64;
    let segs = store.open_segments()?;
    for seg in &segs {
        if seg.state() != capsule_store::SegmentState::Sealed {
            continue;
        }
        let idx = capsule_index::sideindex::rebuild(seg)?;
        let path = idx.write(&store.index_dir())?;
        bytes += seg.bytes();
        idx_bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        println!(
            "segment {}: {} blocks, {} flows -> {}",
            seg.seq(),
            idx.blocks.len(),
            idx.flows.len(),
            path.display()
        );
    }
    println!(
        "reindexed {} segment(s) in {:.2} s; index is {} bytes, {:.3}% of {} stored bytes",
        segs.len(),
        t0.elapsed().as_secs_f64(),
        idx_bytes,
        100.0 * idx_bytes as f64 / bytes.max(1) as f64,
        bytes
    );
    Ok(ExitCode::SUCCESS)
}
