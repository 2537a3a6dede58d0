//! The store's high-water mark of segment numbers, `segments/last-seq`: rewritten before a
//! segment's file is created, so that a number is never handed out twice, even when recovery
//! removes the newest segment (an empty one) and no file bears it any more.

use std::path::Path;

use crate::error::{Result, StoreError};
use crate::fsx;

/// In `segments/`: the highest segment number ever handed out (decimal).
const LAST_SEQ_FILE: &str = "last-seq";

/// The high-water mark in `segments_dir` (0 when there is none yet).
pub(crate) fn last_seq(segments_dir: &Path) -> Result<u64> {
    let path = segments_dir.join(LAST_SEQ_FILE);
    match fsx::read(&path, "read") {
        Ok(b) => String::from_utf8_lossy(&b)
            .trim()
            .parse()
            .map_err(|_| StoreError::NotAStore {
                path,
                detail: "expected a decimal segment number".into(),
            }),
        Err(e) if e.is_not_found() => Ok(0),
        Err(e) => Err(e),
    }
}

/// Records that segment `seq` is about to be created in `segments_dir`: the high-water
/// mark [`crate::Store::highest_seq`] reads, so that no number is ever handed out twice.
pub(crate) fn record(segments_dir: &Path, seq: u64) -> Result<()> {
    if last_seq(segments_dir)? >= seq {
        return Ok(());
    }
    fsx::write_atomic(
        &segments_dir.join(LAST_SEQ_FILE),
        format!("{seq}\n").as_bytes(),
    )
}
