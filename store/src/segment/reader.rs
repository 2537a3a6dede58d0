//! Read access to one segment: a sealed one through its footer, the open one (being
//! written, or torn) through its index journal's block table (see journal.rs) and a walk
//! over the headers of the blocks the journal does not vouch for.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use capsule_pcap::Interface;

use super::scan::{
    check_header_seq, corrupt, head_and_header_len, read_at, read_header, scan, scan_known, Damage,
};
use super::{parse_name, SegmentState};
use crate::error::{BlockProblem, Result, StoreError};
use crate::format::{self, BlockMeta, DecodeError, Footer, TRAILER_LEN};

/// Read access to one segment, sealed or open.
#[derive(Debug)]
pub struct SegmentReader {
    path: PathBuf,
    file: std::sync::Arc<dyn crate::remote::RangeRead>,
    /// Read from the object store (a tiered segment), not the local disk.
    remote: bool,
    seq: u64,
    state: SegmentState,
    blocks: Vec<BlockMeta>,
    interfaces: Vec<Interface>,
    bytes: u64,
    /// Why a sealed segment's footer could not be used (its blocks were found by a walk
    /// over their headers instead).
    footer_problem: Option<String>,
    /// What the walk over block headers went past (open segments, and sealed ones read
    /// without their footer).
    damaged: Vec<Damage>,
    /// Blocks of an open segment taken from its index journal (the first ones).
    from_journal: usize,
}

impl SegmentReader {
    /// Opens a segment. A sealed one is read through its footer, or, when the footer is
    /// damaged, by a walk over its block headers (see [`SegmentReader::footer_problem`]); an
    /// open one (being written, or torn) by that walk, which stops at the last whole block.
    pub fn open(path: &Path) -> Result<Self> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (seq, state) = parse_name(&name).ok_or_else(|| StoreError::NotAStore {
            path: path.to_path_buf(),
            detail: "expected a segment file name like seg-000000000001.pcapng.zst".into(),
        })?;
        let file = crate::fsx::open(path, crate::fsx::Open::Read, "open segment")?;
        let meta = file
            .metadata()
            .map_err(|e| StoreError::io("stat segment", path, e))?;
        let bytes = meta.len();
        let mut footer_problem = None;
        let mut damaged = Vec::new();
        let mut from_journal = 0;
        let (blocks, interfaces) = match state {
            SegmentState::Sealed => match read_footer(path, &file, bytes) {
                Ok(footer) => {
                    check_header_seq(path, &read_header(path, &file, bytes)?, seq)?;
                    (footer.blocks, footer.interfaces)
                }
                Err(e @ StoreError::Corrupt { .. }) => {
                    // Damage stays local: the blocks are still there, each with its header.
                    let s = scan(path, &file, false)?;
                    check_header_seq(path, &s.header, seq)?;
                    footer_problem = Some(crate::error::chain(&e));
                    damaged = s.damaged;
                    if s.footer_at.is_none() && !footer_starts_at(&file, s.good_len, s.file_len) {
                        // A sealed segment whose walk found no footer was cut short: what
                        // followed the last whole block (blocks, then the footer) is lost,
                        // and every answer over it must say so.
                        damaged.push(Damage {
                            offset: s.good_len,
                            len: s.file_len - s.good_len,
                            block: None,
                            problem: format!(
                                "the sealed segment ends at byte {} without its footer (cut \
                                 short?): whatever followed byte {} is lost{}",
                                s.file_len,
                                s.good_len,
                                s.problem
                                    .as_ref()
                                    .map(|p| format!(" ({p})"))
                                    .unwrap_or_default()
                            ),
                        });
                    }
                    (s.blocks, s.interfaces)
                }
                Err(e) => return Err(e),
            },
            // A segment the writer has just created may not hold its head yet (it is
            // written in one write right after the file is created): no blocks yet.
            SegmentState::Open if bytes < head_and_header_len() => (Vec::new(), Vec::new()),
            SegmentState::Open => {
                // The block table from the index journal, as far as the file confirms it;
                // the headers of the blocks after it are walked.
                let known = super::journal::journal_path(path, seq)
                    .and_then(|j| crate::fsx::read(&j, "read index journal").ok())
                    .map(|b| super::journal::block_table(&b, seq))
                    .unwrap_or_default();
                let (s, n) = scan_known(path, &file, false, &known)?;
                check_header_seq(path, &s.header, seq)?;
                from_journal = n;
                damaged = s.damaged;
                (s.blocks, s.interfaces)
            }
        };
        // A sealed segment's file goes into the descriptor budget (handles.rs): closed when
        // others are read, reopened when read again. An open one is renamed at seal (its
        // path would not reopen it) and there are few: it keeps its descriptor.
        let file: std::sync::Arc<dyn crate::remote::RangeRead> = match state {
            SegmentState::Sealed => {
                std::sync::Arc::new(super::handles::Handle::new(path, file, &meta))
            }
            SegmentState::Open => std::sync::Arc::new(file),
        };
        Ok(SegmentReader {
            path: path.to_path_buf(),
            file,
            remote: false,
            seq,
            state,
            blocks,
            interfaces,
            bytes,
            footer_problem,
            damaged,
            from_journal,
        })
    }

    /// Opens sealed segment `seq` of `bytes` bytes from `src` (a tiered segment in the object
    /// store), through its footer: the trailer and footer, then the header, each by range.
    /// `name` names it in messages (the object's URL).
    pub fn open_remote(
        name: &str,
        seq: u64,
        bytes: u64,
        src: std::sync::Arc<dyn crate::remote::RangeRead>,
    ) -> Result<Self> {
        let path = PathBuf::from(name);
        let footer = read_footer(&path, src.as_ref(), bytes)?;
        check_header_seq(&path, &read_header(&path, src.as_ref(), bytes)?, seq)?;
        Ok(SegmentReader {
            path,
            file: src,
            remote: true,
            seq,
            state: SegmentState::Sealed,
            blocks: footer.blocks,
            interfaces: footer.interfaces,
            bytes,
            footer_problem: None,
            damaged: Vec::new(),
            from_journal: 0,
        })
    }

    /// Whether the segment is read from the object store (its local file was trimmed).
    pub fn is_remote(&self) -> bool {
        self.remote
    }

    /// How many of an open segment's blocks (the first ones) were taken from its index
    /// journal's block table rather than by reading their headers.
    pub fn blocks_from_journal(&self) -> usize {
        self.from_journal
    }

    /// Why the footer of this sealed segment could not be used, if it could not: its blocks
    /// were then found by a walk over their headers. `capsule verify --repair` rewrites it.
    pub fn footer_problem(&self) -> Option<&str> {
        self.footer_problem.as_deref()
    }

    /// Stretches that the walk over block headers could not read and went past.
    pub fn damaged(&self) -> &[Damage] {
        &self.damaged
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn seq(&self) -> u64 {
        self.seq
    }
    pub fn state(&self) -> SegmentState {
        self.state
    }
    /// Size of the file when it was opened.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// Whole blocks, in file order.
    pub fn blocks(&self) -> &[BlockMeta] {
        &self.blocks
    }
    /// The segment's interfaces; a packet's `iface` indexes this list.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Reads block `i`'s compressed frame into `frame` (reusing its allocation) and checks
    /// its crc32c.
    pub fn read_frame(&self, i: usize, frame: &mut Vec<u8>) -> Result<()> {
        let meta = &self.blocks[i];
        // `resize` zero-fills only growth, so a reused buffer costs no page faults.
        frame.resize(meta.compressed_len as usize, 0);
        self.file
            .read_exact_at(frame, meta.frame_offset)
            .map_err(|e| StoreError::io("read segment", &self.path, e))?;
        let crc = crate::crc::crc32c(frame);
        if crc != meta.frame_crc {
            return Err(StoreError::BadBlock {
                path: self.path.clone(),
                block: meta.index,
                offset: meta.frame_offset,
                problem: BlockProblem::Checksum {
                    computed: crc,
                    recorded: meta.frame_crc,
                },
            });
        }
        Ok(())
    }

    /// Reads and decompresses block `i` into `out` (cleared first): a run of pcapng blocks.
    /// `frame` is scratch space for the compressed bytes; pass the same buffers again to
    /// avoid allocating per block.
    pub fn read_block(
        &self,
        i: usize,
        dctx: &mut zstd::bulk::Decompressor<'static>,
        frame: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.read_frame(i, frame)?;
        let meta = &self.blocks[i];
        out.clear();
        // A damaged length must not make the reader reserve gigabytes: no writer makes a
        // block larger than this.
        if meta.uncompressed_len as usize > crate::format::MAX_BLOCK_UNCOMPRESSED {
            return Err(StoreError::BadBlock {
                path: self.path.clone(),
                block: meta.index,
                offset: meta.frame_offset,
                problem: BlockProblem::TooLarge {
                    claimed: meta.uncompressed_len,
                    max: crate::format::MAX_BLOCK_UNCOMPRESSED,
                },
            });
        }
        out.reserve(meta.uncompressed_len as usize);
        let n = dctx
            .decompress_to_buffer(&frame[..], out)
            .map_err(|e| StoreError::BadBlock {
                path: self.path.clone(),
                block: meta.index,
                offset: meta.frame_offset,
                problem: BlockProblem::Decompress(e),
            })?;
        if n != meta.uncompressed_len as usize {
            return Err(StoreError::BadBlock {
                path: self.path.clone(),
                block: meta.index,
                offset: meta.frame_offset,
                problem: BlockProblem::Length {
                    expected: meta.uncompressed_len,
                    found: n,
                },
            });
        }
        Ok(())
    }
}

/// Whether the bytes at `at` (just past a sealed segment's last whole block) begin a
/// footer's metadata frame, cut short: then only the footer was lost, every block is there.
/// The footer's magic is the first payload bytes of its frame (after the frame's 9-byte
/// prefix, the raw block's 3-byte header, and the pcapng block type and length).
fn footer_starts_at(file: &File, at: u64, file_len: u64) -> bool {
    const MAGIC_AT: usize = format::META_PREFIX_LEN + 3 + 8;
    const NEED: usize = MAGIC_AT + format::FOOTER_MAGIC.len();
    if file_len.saturating_sub(at) < NEED as u64 {
        return false;
    }
    let mut b = [0u8; NEED];
    file.read_exact_at(&mut b, at).is_ok() && b[MAGIC_AT..] == format::FOOTER_MAGIC
}

fn read_footer(path: &Path, file: &dyn crate::remote::RangeRead, len: u64) -> Result<Footer> {
    if len < TRAILER_LEN as u64 {
        return Err(corrupt(
            path,
            0,
            DecodeError::Short {
                what: "sealed segment",
                expected: TRAILER_LEN,
                found: len as usize,
            },
        ));
    }
    let t_at = len - TRAILER_LEN as u64;
    let t = read_at(file, path, t_at, TRAILER_LEN)?;
    let n = Footer::frame_len_from_trailer(&t).map_err(|e| corrupt(path, t_at, e))? as u64;
    if n > len {
        return Err(corrupt(
            path,
            t_at,
            DecodeError::Invalid {
                what: "segment trailer",
                detail: format!("footer frame length {n} exceeds the file length {len}"),
            },
        ));
    }
    let frame = read_at(file, path, len - n, n as usize)?;
    let payload = format::decode_meta_frame("segment footer", &frame)
        .map_err(|e| corrupt(path, len - n, e))?;
    let footer = Footer::decode(&payload).map_err(|e| corrupt(path, len - n, e))?;
    // Every block's frame lies before the footer: a footer that points past it (a file cut
    // or holed in the middle, its footer intact) is refused here rather than by a read, and
    // a frame length it states is never allocated beyond the file.
    let footer_at = len - n;
    for b in &footer.blocks {
        let end = b.frame_offset.checked_add(u64::from(b.compressed_len));
        if end.is_none_or(|end| end > footer_at) {
            return Err(corrupt(
                path,
                footer_at,
                DecodeError::Invalid {
                    what: "segment footer",
                    detail: format!(
                        "block {}: frame of {} bytes at offset {} lies past the footer at {footer_at}",
                        b.index, b.compressed_len, b.frame_offset
                    ),
                },
            ));
        }
    }
    Ok(footer)
}
