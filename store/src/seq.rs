//! The store's high-water mark of segment numbers, `segments/last-seq`: rewritten before a
//! segment's file is created, so that a number is never handed out twice, even when recovery
//! removes the newest segment (an empty one) and no file bears it any more.

use std::path::Path;

use crate::error::{Result, StoreError};
use crate::fsx;

/// In `segments/`: the highest segment number ever handed out (decimal).
const LAST_SEQ_FILE: &str = "last-seq";

/// The largest segment number: names are zero-padded to 12 digits so that `ls` lists
/// segments oldest first, which a 13th digit would break (at a segment a second, 31,000
/// years of them). A writer refuses to go past it rather than wrap to 0 and overwrite.
pub const MAX_SEQ: u64 = 999_999_999_999;

/// The high-water mark in `segments_dir` (0 when there is none yet). A damaged mark (not a
/// decimal number, or one past [`MAX_SEQ`]) is ignored with a warning naming the file: the
/// segment files' own numbers still give the next one, and the next segment rewrites it.
pub(crate) fn last_seq(segments_dir: &Path) -> Result<u64> {
    let path = segments_dir.join(LAST_SEQ_FILE);
    match fsx::read(&path, "read") {
        Ok(b) => {
            let text = String::from_utf8_lossy(&b);
            match text.trim().parse::<u64>() {
                Ok(n) if n <= MAX_SEQ => Ok(n),
                _ => {
                    let shown: String = text.trim().chars().take(40).collect();
                    tracing::warn!(
                        "{}: damaged (expected a segment number up to {MAX_SEQ}, found \
                         {shown:?}); ignored: the next segment number comes from the segment \
                         files, and the next segment rewrites it",
                        path.display()
                    );
                    Ok(0)
                }
            }
        }
        Err(e) if e.is_not_found() => Ok(0),
        Err(e) => Err(e),
    }
}

/// The number after `seq`, or an error when the store has used every number.
pub(crate) fn next(segments_dir: &Path, seq: u64) -> Result<u64> {
    seq.checked_add(1)
        .filter(|&n| n <= MAX_SEQ)
        .ok_or_else(|| StoreError::NotAStore {
            path: segments_dir.to_path_buf(),
            detail: format!(
                "segment number {seq} is the last one ({MAX_SEQ}): no new segment can be \
                 numbered; a segment file named with a larger number, or copied in, made it so"
            ),
        })
}

/// Records that segment `seq` is about to be created in `segments_dir`: the high-water
/// mark [`crate::Store::highest_seq`] reads, so that no number is ever handed out twice.
pub(crate) fn record(segments_dir: &Path, seq: u64) -> Result<()> {
    if seq > MAX_SEQ {
        return Err(StoreError::NotAStore {
            path: segments_dir.join(LAST_SEQ_FILE),
            detail: format!("segment number {seq} is past the last one ({MAX_SEQ})"),
        });
    }
    if last_seq(segments_dir)? >= seq {
        return Ok(());
    }
    fsx::write_atomic(
        &segments_dir.join(LAST_SEQ_FILE),
        format!("{seq}\n").as_bytes(),
    )
}
