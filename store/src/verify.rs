//! Checking a segment end to end (`capsule verify`): the head frame, the segment header,
//! every block header and frame (its crc32c, then zstd's own content checksum while it is
//! decompressed), and for a sealed segment its footer and trailer against the block headers.
//! Every problem is named with the file, the byte offset, what was expected and found.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::chain;
use crate::segment::{parse_name, scan, SegmentReader, SegmentState};

/// One thing wrong in a store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub path: PathBuf,
    /// What is damaged: `segment`, `head frame`, `block`, `footer` or `index`.
    pub what: &'static str,
    /// Where, when a byte offset says it.
    pub offset: Option<u64>,
    /// How many bytes, when known.
    pub len: Option<u64>,
    /// What was expected and what was found.
    pub detail: String,
}

impl Problem {
    fn new(path: &Path, what: &'static str, offset: Option<u64>, detail: String) -> Self {
        Problem {
            path: path.to_path_buf(),
            what,
            offset,
            len: None,
            detail,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.what)?;
        if let Some(o) = self.offset {
            write!(f, " at byte {o}")?;
        }
        if let Some(l) = self.len {
            write!(f, " ({l} bytes)")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// Checks one segment file; returns what is wrong (nothing: it is whole).
pub fn verify_segment(path: &Path) -> Vec<Problem> {
    let mut out = Vec::new();
    let file = match crate::fsx::open(path, crate::fsx::Open::Read, "open segment") {
        Ok(f) => f,
        Err(e) => {
            out.push(Problem::new(path, "segment", None, chain(&e)));
            return out;
        }
    };
    let sealed = parse_name(
        &path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )
    .is_some_and(|(_, st)| st == SegmentState::Sealed);
    // An empty open segment is a writer stopped (a crash, kill -9) between creating the file
    // and writing its head, in one write, just after: nothing was in it and nothing is
    // lost; the next writer's recovery removes it. Not damage (an empty sealed file is).
    if !sealed && file.metadata().is_ok_and(|m| m.len() == 0) {
        return out;
    }
    let s = match scan(path, &file, true) {
        Ok(s) => s,
        Err(e) => {
            out.push(Problem::new(path, "segment", None, chain(&e)));
            return out;
        }
    };
    // The scan checked the head frame's content checksum too: damage at byte 0 is it
    // (its problem says so).
    for d in &s.damaged {
        out.push(Problem {
            path: path.to_path_buf(),
            what: if d.offset == 0 { "segment" } else { "block" },
            offset: Some(d.offset),
            len: Some(d.len),
            detail: d.problem.clone(),
        });
    }
    if let Some(why) = &s.problem {
        let what = if sealed { "footer" } else { "block" };
        out.push(Problem::new(path, what, Some(s.good_len), why.clone()));
    }
    let reader = match SegmentReader::open(path) {
        Ok(r) => r,
        Err(e) => {
            out.push(Problem::new(path, "segment", None, chain(&e)));
            return out;
        }
    };
    if let Some(why) = reader.footer_problem() {
        if s.problem.is_none() {
            out.push(Problem::new(path, "footer", None, why.to_string()));
        }
    } else if sealed && s.damaged.is_empty() {
        let listed: Vec<_> = reader
            .blocks()
            .iter()
            .map(|b| (b.frame_offset, b.compressed_len, b.frame_crc))
            .collect();
        let found: Vec<_> = s
            .blocks
            .iter()
            .map(|b| (b.frame_offset, b.compressed_len, b.frame_crc))
            .collect();
        if listed != found {
            out.push(Problem::new(
                path,
                "footer",
                None,
                format!(
                    "the footer lists {} blocks that differ from the {} whole blocks the \
                     headers give",
                    listed.len(),
                    found.len()
                ),
            ));
        }
    }
    // Every block through the reader: crc32c again, then zstd's content checksum.
    let Ok(mut dctx) = zstd::bulk::Decompressor::new() else {
        return out;
    };
    let (mut frame, mut data) = (Vec::new(), Vec::new());
    for i in 0..reader.blocks().len() {
        if let Err(e) = reader.read_block(i, &mut dctx, &mut frame, &mut data) {
            let b = &reader.blocks()[i];
            let known = s.damaged.iter().any(|d| {
                d.block
                    .as_ref()
                    .is_some_and(|x| x.frame_offset == b.frame_offset)
            });
            if !known {
                out.push(Problem {
                    path: path.to_path_buf(),
                    what: "block",
                    offset: Some(b.frame_offset),
                    len: Some(u64::from(b.compressed_len)),
                    detail: chain(&e),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{open_name, sealed_name};

    /// kill -9 between a new segment's creation and its head (CI, capture_live's kill -9
    /// rounds: verify named the empty file "head frame: ... Src size is incorrect").
    #[test]
    fn an_empty_open_segment_is_a_crash_before_its_head_not_damage() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join(open_name(7));
        std::fs::write(&open, b"").unwrap();
        assert_eq!(verify_segment(&open), Vec::new());
        // Sealed, the same empty file is damage.
        let sealed = dir.path().join(sealed_name(8));
        std::fs::write(&sealed, b"").unwrap();
        let problems = verify_segment(&sealed);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].detail.contains("head frame"), "{problems:?}");
        // An open segment cut inside its head is still damage.
        std::fs::write(&open, &crate::segment::head_frame()[..5]).unwrap();
        assert_eq!(verify_segment(&open).len(), 1);
    }
}
