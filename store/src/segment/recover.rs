//! Recovery of a torn segment (the writer was killed, or the machine lost power): its whole
//! blocks are kept and the file sealed, or, when its head cannot be read, it is moved aside
//! for inspection. What was done is a [`Recovery`], which says it in one line.

use std::fmt;
use std::path::{Path, PathBuf};

use super::scan::scan;
use super::{parse_name, sync_dir, SealedSegment, SegmentFile};
use crate::error::{Result, StoreError};

/// What recovering a torn segment did.
#[derive(Debug, Clone)]
pub struct Recovery {
    pub seq: u64,
    /// Bytes cut from the tail of the file (all of it when nothing was kept).
    pub cut_bytes: u64,
    /// Where the cut was made.
    pub cut_at: u64,
    /// Why the walk stopped before the end of the file (`None`: it ended cleanly, or at the
    /// zero padding of the last direct write).
    pub problem: Option<String>,
    pub outcome: RecoveryOutcome,
}

/// What became of a torn segment.
#[derive(Debug, Clone)]
pub enum RecoveryOutcome {
    /// Its whole blocks were kept and it was sealed.
    Sealed {
        kept_blocks: usize,
        kept_packets: u64,
        segment: SealedSegment,
    },
    /// Its head or segment header is unreadable: the file was moved aside, untouched.
    MovedAside { path: PathBuf },
    /// It held no whole block: the file was removed.
    Removed,
}

impl Recovery {
    /// Blocks kept.
    pub fn kept_blocks(&self) -> usize {
        match self.outcome {
            RecoveryOutcome::Sealed { kept_blocks, .. } => kept_blocks,
            _ => 0,
        }
    }

    /// Packets kept.
    pub fn kept_packets(&self) -> u64 {
        match self.outcome {
            RecoveryOutcome::Sealed { kept_packets, .. } => kept_packets,
            _ => 0,
        }
    }

    /// The sealed segment, when blocks were kept.
    pub fn sealed(&self) -> Option<&SealedSegment> {
        match &self.outcome {
            RecoveryOutcome::Sealed { segment, .. } => Some(segment),
            _ => None,
        }
    }

    /// Where the file was moved, when its head was unreadable.
    pub fn moved_aside(&self) -> Option<&Path> {
        match &self.outcome {
            RecoveryOutcome::MovedAside { path } => Some(path),
            _ => None,
        }
    }

    /// A recovery that kept no block of the `len` bytes of segment `path`.
    fn nothing_kept(path: &Path, len: u64, problem: String, outcome: RecoveryOutcome) -> Self {
        let seq = path
            .file_name()
            .and_then(|n| parse_name(&n.to_string_lossy()))
            .map_or(0, |(s, _)| s);
        Recovery {
            seq,
            cut_bytes: len,
            cut_at: 0,
            problem: Some(problem),
            outcome,
        }
    }
}

/// One line for an operator: what was kept, what was cut and why.
impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.problem.as_deref() {
            Some(p) => format!(" ({p})"),
            // A walk that ends cleanly before the end of the file ended at direct-I/O padding.
            None if self.cut_bytes > 0 => " (zero padding after the last block)".to_string(),
            None => String::new(),
        };
        match &self.outcome {
            RecoveryOutcome::Sealed {
                kept_blocks,
                kept_packets,
                segment,
            } => write!(
                f,
                "recovered segment {}: kept {kept_blocks} blocks ({kept_packets} packets), cut {} \
                 bytes at offset {}{why}; sealed as {}",
                self.seq,
                self.cut_bytes,
                self.cut_at,
                segment.path.display()
            ),
            RecoveryOutcome::MovedAside { path } => write!(
                f,
                "recovered segment {}: its head is unreadable; kept for inspection as {}{why}",
                self.seq,
                path.display()
            ),
            RecoveryOutcome::Removed => write!(
                f,
                "recovered segment {}: no whole block in it; its {} bytes were removed{why}",
                self.seq, self.cut_bytes
            ),
        }
    }
}

/// Cuts a torn open segment back to its last whole block and seals it.
pub fn recover(dir: &Path, path: &Path) -> Result<Recovery> {
    let file = crate::fsx::open(path, crate::fsx::Open::Read, "open segment")?;
    let file_len = file
        .metadata()
        .map_err(|e| StoreError::io("stat segment", path, e))?
        .len();
    if file_len == 0 {
        // The writer stopped between creating the file and writing its head: nothing to keep
        // and nothing damaged to look at.
        crate::fsx::remove(path, "remove empty segment")?;
        sync_dir(dir)?;
        let problem = "empty: the writer stopped before writing its head".to_string();
        return Ok(Recovery::nothing_kept(
            path,
            0,
            problem,
            RecoveryOutcome::Removed,
        ));
    }
    let s = match scan(path, &file, true) {
        Ok(s) => s,
        Err(StoreError::Corrupt {
            problem, offset, ..
        }) => {
            // The head or segment header is damaged: the file cannot be trusted as a segment.
            // Keep it aside for forensics rather than delete it, and go on without it.
            // Never overwrite an earlier damaged file: add a counter if the name is taken.
            let mut aside = path.with_extension("open.damaged");
            let mut n = 1;
            while aside.exists() {
                aside = path.with_extension(format!("open.damaged.{n}"));
                n += 1;
            }
            crate::fsx::rename(path, &aside, "move damaged segment aside")?;
            sync_dir(dir)?;
            let problem = format!("at byte {offset}: {problem}");
            let outcome = RecoveryOutcome::MovedAside { path: aside };
            return Ok(Recovery::nothing_kept(path, file_len, problem, outcome));
        }
        Err(e) => return Err(e),
    };
    drop(file);
    let kept_packets = s.blocks.iter().map(|b| u64::from(b.packets)).sum();
    let kept_blocks = s.blocks.len();
    let seg = SegmentFile::reopen(dir, path.to_path_buf(), &s)?;
    let outcome = match seg.seal()? {
        Some(segment) => RecoveryOutcome::Sealed {
            kept_blocks,
            kept_packets,
            segment,
        },
        None => RecoveryOutcome::Removed,
    };
    Ok(Recovery {
        seq: s.header.seq,
        cut_bytes: s.file_len - s.good_len,
        cut_at: s.good_len,
        problem: s.problem,
        outcome,
    })
}
