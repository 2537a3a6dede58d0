//! Recovery of a torn segment (the writer was killed, or the machine lost power): its whole
//! blocks are kept and the file sealed, or, when its head cannot be read, it is moved aside
//! for inspection. What was done is a [`Recovery`], which says it in one line.

use std::fmt;
use std::path::{Path, PathBuf};

use std::os::unix::fs::FileExt;

use super::scan::{read_at, scan, Scan};
use super::{open_name, parse_name, sealed_name, sync_dir, SealedSegment, SegmentFile};
use crate::error::{Result, StoreError};
use crate::format::{self, BlockMeta};
use crate::fsx;

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
    /// Stretches inside the segment that could not be verified: the walk went past them and
    /// kept every verified block after them; their bytes were moved aside (`aside`).
    pub damaged: Vec<MovedDamage>,
    pub outcome: RecoveryOutcome,
}

/// Bytes of a torn segment that failed verification, kept in a file of their own.
#[derive(Debug, Clone)]
pub struct MovedDamage {
    /// Where they were in the segment, and how many.
    pub offset: u64,
    pub len: u64,
    /// Packets the lost block held, when its header was readable.
    pub packets: Option<u32>,
    pub problem: String,
    /// The file they were moved to.
    pub aside: PathBuf,
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
            damaged: Vec::new(),
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
        let damage: String = self
            .damaged
            .iter()
            .map(|d| {
                let lost = d
                    .packets
                    .map_or(String::new(), |p| format!(", {p} packets"));
                format!(
                    "; went past {} damaged bytes at offset {}{lost} ({}), moved to {}",
                    d.len,
                    d.offset,
                    d.problem,
                    d.aside.display()
                )
            })
            .collect();
        match &self.outcome {
            RecoveryOutcome::Sealed {
                kept_blocks,
                kept_packets,
                segment,
            } => write!(
                f,
                "recovered segment {}: kept {kept_blocks} blocks ({kept_packets} packets), cut {} \
                 bytes at offset {}{why}{damage}; sealed as {}",
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
    let mut kept_blocks = s.blocks.len();
    let mut damaged = Vec::new();
    let sealed = if s.damaged.is_empty() {
        SegmentFile::reopen(dir, path.to_path_buf(), &s)?.seal()?
    } else {
        let (sealed, moved, extra) = rebuild(dir, path, &s)?;
        damaged = moved;
        kept_blocks += extra;
        sealed
    };
    let outcome = match sealed {
        Some(segment) => RecoveryOutcome::Sealed {
            kept_blocks,
            kept_packets,
            segment,
        },
        None => RecoveryOutcome::Removed,
    };
    // A sealed segment rebuilt by `capsule verify --repair` loses only its old footer.
    let problem = match (s.problem, s.footer_at) {
        (None, Some(_)) => Some("its old footer, replaced".to_string()),
        (p, _) => p,
    };
    Ok(Recovery {
        seq: s.header.seq,
        cut_bytes: s.file_len - s.good_len,
        cut_at: s.good_len,
        problem,
        damaged,
        outcome,
    })
}

/// Suffix of a torn segment while it is being rebuilt (see [`rebuild`]).
pub(crate) const REBUILDING_SUFFIX: &str = ".rebuilding";

/// Rebuilds a torn segment that has damage inside: its unverifiable stretches are copied to
/// files of their own, then a new segment is written with every verified block (renumbered;
/// a block whose frame was lost but whose header declared interfaces is replaced by a block
/// declaring them, so later packets keep their interfaces) and sealed, then the torn file
/// is removed. A crash part way leaves the torn file under its `.rebuilding` name, and the
/// next open starts again from it ([`resume_rebuilds`]). Returns the sealed segment, the
/// moved damage, and how many blocks were added to declare interfaces.
fn rebuild(
    dir: &Path,
    path: &Path,
    s: &Scan,
) -> Result<(Option<SealedSegment>, Vec<MovedDamage>, usize)> {
    let file = fsx::open(path, fsx::Open::Read, "open segment")?;
    // The damage first, so that a crash after the seal below can never lose it.
    let mut moved = Vec::new();
    for d in &s.damaged {
        let aside = path.with_extension(format!("open.damaged.at-{}", d.offset));
        let bytes = read_at(&file, path, d.offset, d.len as usize)?;
        write_synced(&aside, &bytes)?;
        moved.push(MovedDamage {
            offset: d.offset,
            len: d.len,
            packets: d.block.as_ref().map(|b| b.packets),
            problem: d.problem.clone(),
            aside,
        });
    }
    sync_dir(dir)?;
    let rebuilding = path.with_extension(format!("open{REBUILDING_SUFFIX}"));
    fsx::rename(path, &rebuilding, "rename torn segment for its rebuild")?;
    sync_dir(dir)?;
    let mut seg = SegmentFile::create(dir, s.header.seq, s.header.created_ns)?;
    // Blocks and lost interface declarations, in file order.
    let mut lost: Vec<&BlockMeta> = s
        .damaged
        .iter()
        .filter_map(|d| d.block.as_ref())
        .filter(|b| !b.new_interfaces.is_empty())
        .collect();
    lost.sort_by_key(|b| b.frame_offset);
    let mut lost = lost.into_iter().peekable();
    let mut extra = 0;
    let mut frame = Vec::new();
    for b in &s.blocks {
        while let Some(l) = lost.next_if(|l| l.frame_offset < b.frame_offset) {
            declare(&mut seg, l)?;
            extra += 1;
        }
        frame.resize(b.compressed_len as usize, 0);
        file.read_exact_at(&mut frame, b.frame_offset)
            .map_err(|e| StoreError::io("read segment", &rebuilding, e))?;
        seg.append(b.clone(), &frame)?;
    }
    for l in lost {
        declare(&mut seg, l)?;
        extra += 1;
    }
    let sealed = seg.seal()?;
    fsx::remove(&rebuilding, "remove rebuilt torn segment")?;
    sync_dir(dir)?;
    Ok((sealed, moved, extra))
}

/// Appends a block that declares the interfaces `lost` declared (its frame was damaged).
fn declare(seg: &mut SegmentFile, lost: &BlockMeta) -> Result<()> {
    let mut data = Vec::new();
    for i in &lost.new_interfaces {
        capsule_pcap::write::pcapng_idb(&mut data, i);
    }
    let mut frame = Vec::new();
    format::put_raw_frame(&mut frame, &data);
    let meta = BlockMeta {
        first_ns: lost.first_ns,
        last_ns: lost.first_ns,
        uncompressed_len: data.len() as u32,
        compressed_len: frame.len() as u32,
        frame_crc: crate::crc::crc32c(&frame),
        compression: format::Compression::Stored,
        new_interfaces: lost.new_interfaces.clone(),
        ..BlockMeta::default()
    };
    seg.append(meta, &frame)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    // Atomic and idempotent: a rebuild resumed after a crash writes the same bytes again.
    fsx::write_atomic(path, bytes)
}

/// Finishes or restarts rebuilds a crash interrupted: a torn segment under its `.rebuilding`
/// name goes back to its `.open` name (replacing a partial rebuild) unless its rebuild was
/// already sealed, in which case it is removed. Run before recovery.
pub fn resume_rebuilds(dir: &Path) -> Result<()> {
    for entry in fsx::list(dir)? {
        let name = entry.name.to_string_lossy().into_owned();
        let Some(open) = name.strip_suffix(REBUILDING_SUFFIX) else {
            continue;
        };
        let Some((seq, _)) = parse_name(open) else {
            continue;
        };
        let torn = entry.path;
        let sealed = fsx::list(dir)?
            .iter()
            .any(|e| e.name.to_string_lossy() == sealed_name(seq));
        if sealed {
            fsx::remove(&torn, "remove rebuilt torn segment")?;
        } else {
            let partial = dir.join(open_name(seq));
            match fsx::remove(&partial, "remove partial rebuild") {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            fsx::rename(&torn, &partial, "restore torn segment")?;
        }
        sync_dir(dir)?;
    }
    Ok(())
}
