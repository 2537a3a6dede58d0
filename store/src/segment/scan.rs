//! The walk over a segment's frames when its footer cannot be used: after a crash
//! (recovery verifies every block's checksum) and while the segment is being written (a
//! reader reads the block headers only).

use std::fs::File;
use std::path::Path;

use capsule_pcap::Interface;

use super::{head_frame, DIRECT_ALIGN};
use crate::error::{Result, StoreError};
use crate::format::{self, BlockMeta, DecodeError, SegmentHeader, FOOTER_MAGIC, META_PREFIX_LEN};

/// What a walk over an open (or torn) segment found.
#[derive(Debug, Clone)]
pub struct Scan {
    pub header: SegmentHeader,
    /// Whole blocks, in file order, with frame offsets (with `verify`, each frame's crc32c
    /// checked).
    pub blocks: Vec<BlockMeta>,
    /// The segment's interfaces, gathered from the block headers (also of blocks whose frame
    /// was damaged: their header still names them).
    pub interfaces: Vec<Interface>,
    /// Offset just past the last whole block.
    pub good_len: u64,
    /// Length of the file when it was scanned.
    pub file_len: u64,
    /// Why the walk stopped before the end of the file, if it did.
    pub problem: Option<String>,
    /// Stretches the walk could not verify and went past, in file order.
    pub damaged: Vec<Damage>,
    /// Where the walk found a footer (a sealed segment's blocks end there).
    pub footer_at: Option<u64>,
}

/// A stretch of a segment that the walk could not verify and went past: a block whose frame
/// fails its checksum, or bytes that hold no readable block header until the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Where the unverifiable bytes start.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
    /// The block's header when it was readable (its frame was not): what was lost.
    pub block: Option<BlockMeta>,
    /// What was wrong.
    pub problem: String,
}

pub(super) fn read_at(
    file: &dyn crate::remote::RangeRead,
    path: &Path,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset)
        .map_err(|e| StoreError::io("read segment", path, e))?;
    Ok(buf)
}

pub(super) fn corrupt(path: &Path, offset: u64, problem: DecodeError) -> StoreError {
    StoreError::Corrupt {
        path: path.to_path_buf(),
        offset,
        problem,
    }
}

/// Walks the frames of a segment without a usable footer. With `verify`, each block's
/// frame is read and its crc32c checked (recovery, `capsule verify`); without, only headers
/// are read (a reader of the segment being written, or of a sealed one whose footer is
/// damaged). A block whose frame fails its checksum is skipped (its header says where it
/// ends), and bytes where no block header can be read are skipped up to the next readable
/// one; both are listed in [`Scan::damaged`]. The walk stops at a block cut short by the end
/// of the file, or at damage with no block after it, and says why in [`Scan::problem`];
/// less than a page of zero bytes after the last block is direct-I/O padding, not a problem.
/// A head frame that is not a zstd frame, or a damaged segment header, is an error; with
/// `verify`, a head frame that is one but does not decompress is the first [`Damage`].
pub fn scan(path: &Path, file: &File, verify: bool) -> Result<Scan> {
    Ok(scan_known(path, file, verify, &[])?.0)
}

/// [`scan`] that takes the first blocks from `known` (the open segment's block table from
/// its index journal: each block and its header frame) instead of reading their headers,
/// as far as they can be trusted: they must follow each other from the segment header on
/// and lie within the file, and the header of the last one used is read back from the file
/// and must be the journaled one byte for byte (a journal record is written when its block
/// is handed to the disk, which can be before the bytes are in the file; blocks are written
/// in order, so the last one on disk vouches for those before it). When it is not, the one
/// before it is tried, and so on. The walk goes on after the last block used. Also returns
/// how many blocks came from `known`.
pub(super) fn scan_known(
    path: &Path,
    file: &File,
    verify: bool,
    known: &[(BlockMeta, Vec<u8>)],
) -> Result<(Scan, usize)> {
    let file_len = file
        .metadata()
        .map_err(|e| StoreError::io("stat segment", path, e))?
        .len();
    let head = read_at(file, path, 0, file_len.min(4096) as usize)?;
    let head_len = zstd::zstd_safe::find_frame_compressed_size(&head).map_err(|code| {
        corrupt(
            path,
            0,
            DecodeError::Invalid {
                what: "head frame",
                detail: format!(
                    "expected a zstd frame holding the pcapng section header: {}",
                    zstd::zstd_safe::get_error_name(code)
                ),
            },
        )
    })? as u64;
    // With `verify`, the head frame's content checksum too: a head that does not decompress
    // is damage a rebuild replaces (the blocks after it are whole), not a reason to give
    // up on the segment.
    let mut damaged = Vec::new();
    if verify {
        if let Err(e) = zstd::stream::decode_all(&head[..head_len as usize]) {
            damaged.push(Damage {
                offset: 0,
                len: head_len,
                block: None,
                problem: format!("head frame does not decompress: {e}"),
            });
        }
    }
    let mut pos = head_len;
    let header = match read_meta(path, file, pos, file_len, "segment header")? {
        Ok(p) => SegmentHeader::decode(&p.payload).map_err(|e| corrupt(path, pos, e))?,
        Err(e) => return Err(corrupt(path, pos, e)),
    };
    pos += header_frame_len();

    let mut blocks = Vec::new();
    let mut interfaces = Vec::new();
    let mut problem = None;
    let mut footer_at = None;
    // The index the next block header must carry: one more than the last header read,
    // whether its frame was whole or not.
    // (u64: a damaged file may hold a block header of index u32::MAX, after which no block
    // can follow, rather than an index that wraps to 0.)
    let mut next_index = 0u64;
    let trusted = if verify {
        0
    } else {
        trusted_prefix(path, file, pos, file_len, known)?
    };
    for (meta, _) in &known[..trusted] {
        interfaces.extend(meta.new_interfaces.iter().cloned());
        next_index = u64::from(meta.index) + 1;
        pos = meta.frame_offset + u64::from(meta.compressed_len);
        blocks.push(meta.clone());
    }
    while pos < file_len {
        match next_block(path, file, pos, file_len, verify, next_index)? {
            Step::Block(meta, next) => {
                interfaces.extend(meta.new_interfaces.iter().cloned());
                next_index = u64::from(meta.index) + 1;
                blocks.push(meta);
                pos = next;
            }
            Step::Footer => {
                footer_at = Some(pos);
                break;
            }
            Step::BadFrame(meta, next, why) => {
                interfaces.extend(meta.new_interfaces.iter().cloned());
                next_index = u64::from(meta.index) + 1;
                damaged.push(Damage {
                    offset: pos,
                    len: next - pos,
                    block: Some(meta),
                    problem: why,
                });
                pos = next;
            }
            Step::Unreadable(why) => {
                // Less than a page of zeros: the padding of the last direct write, the
                // clean end of an open segment.
                let rest = file_len - pos;
                let padding = rest < DIRECT_ALIGN as u64
                    && read_at(file, path, pos, rest as usize)?
                        .iter()
                        .all(|&b| b == 0);
                if padding {
                    break;
                }
                // Go past the damage to the next readable block header, if there is one.
                match resync(path, file, pos, file_len, next_index)? {
                    Some(at) => {
                        damaged.push(Damage {
                            offset: pos,
                            len: at - pos,
                            block: None,
                            problem: why,
                        });
                        pos = at;
                    }
                    None => {
                        problem = Some(why);
                        break;
                    }
                }
            }
            Step::Cut(why) => {
                problem = Some(why);
                break;
            }
        }
    }
    // The good length ends after the last whole block (recovery cuts there).
    let good_len = blocks.last().map_or(head_len + header_frame_len(), |b| {
        b.frame_offset + u64::from(b.compressed_len)
    });
    Ok((
        Scan {
            header,
            blocks,
            interfaces,
            good_len,
            file_len,
            problem,
            damaged,
            footer_at,
        },
        trusted,
    ))
}

/// How many of the `known` blocks a reader may use without reading their headers (see
/// [`scan_known`]); `first` is where block 0's header starts.
fn trusted_prefix(
    path: &Path,
    file: &File,
    first: u64,
    file_len: u64,
    known: &[(BlockMeta, Vec<u8>)],
) -> Result<usize> {
    // The chain: each block's header right after the previous block's frame, within the file.
    let mut chain = 0;
    let mut at = first;
    for (i, (m, header)) in known.iter().enumerate() {
        let end = m.frame_offset.checked_add(u64::from(m.compressed_len));
        let fits = m.index as usize == i
            && at.checked_add(header.len() as u64) == Some(m.frame_offset)
            && end.is_some_and(|e| e <= file_len);
        if !fits {
            break;
        }
        chain += 1;
        at = end.expect("checked above");
    }
    // The last block of the chain whose header the file holds, byte for byte.
    for n in (1..=chain).rev() {
        let (m, header) = &known[n - 1];
        let at = m.frame_offset - header.len() as u64;
        if read_at(file, path, at, header.len())? == *header {
            return Ok(n);
        }
    }
    Ok(0)
}

/// Looks for the next block header after damage at `from`: the block-header magic, then a
/// whole metadata frame around it whose header decodes (its crc32c holds) with an index of
/// at least `min_index`. Returns its offset.
fn resync(
    path: &Path,
    file: &File,
    from: u64,
    file_len: u64,
    min_index: u64,
) -> Result<Option<u64>> {
    // The magic sits after the frame's 9-byte prefix, its 3-byte raw block header and the
    // pcapng block's type and length.
    const MAGIC_AT: u64 = META_PREFIX_LEN as u64 + 3 + 8;
    const CHUNK: u64 = 1 << 20;
    let magic = &format::BLOCK_HEADER_MAGIC;
    let mut at = from + 1;
    while at < file_len {
        let len = CHUNK.min(file_len - at) as usize;
        let buf = read_at(file, path, at, len)?;
        let mut i = 0;
        while let Some(hit) = find(&buf[i..], magic) {
            let magic_pos = at + (i + hit) as u64;
            i += hit + 1;
            let Some(start) = magic_pos.checked_sub(MAGIC_AT) else {
                continue;
            };
            if start <= from {
                continue;
            }
            if let Ok(m) = read_meta(path, file, start, file_len, "block header")? {
                if let Ok(b) = BlockMeta::decode_header(&m.payload) {
                    if u64::from(b.index) >= min_index {
                        return Ok(Some(start));
                    }
                }
            }
        }
        if at + len as u64 >= file_len {
            break;
        }
        // Overlap by the magic's length, so a magic across two chunks is found.
        at += len as u64 - (magic.len() as u64 - 1);
    }
    Ok(None)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Bytes of a segment's head frame and segment header: the least an open segment holds once
/// its writer has written anything.
pub(super) fn head_and_header_len() -> u64 {
    static LEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *LEN.get_or_init(|| head_frame().len() as u64 + header_frame_len())
}

/// Reads the segment header of `file`, right after the fixed head frame: one small read,
/// for a sealed segment read through its footer (a walk reads it on its way).
pub(super) fn read_header(
    path: &Path,
    file: &dyn crate::remote::RangeRead,
    file_len: u64,
) -> Result<SegmentHeader> {
    let at = head_frame_len();
    match read_meta(path, file, at, file_len, "segment header")? {
        Ok(m) => SegmentHeader::decode(&m.payload).map_err(|e| corrupt(path, at, e)),
        Err(e) => Err(corrupt(path, at, e)),
    }
}

/// Checks that `header` names segment `seq`, as its file's name does: a segment copied or
/// restored under another segment's name must not be served as that one (its packets
/// twice, the other's missing).
pub(super) fn check_header_seq(path: &Path, header: &SegmentHeader, seq: u64) -> Result<()> {
    if header.seq == seq {
        return Ok(());
    }
    Err(corrupt(
        path,
        head_frame_len(),
        DecodeError::Invalid {
            what: "segment header",
            detail: format!(
                "it is segment {} but the file is named for segment {seq} (a copy or a restore \
                 under another segment's name?); it is not read as segment {seq}",
                header.seq
            ),
        },
    ))
}

fn head_frame_len() -> u64 {
    static LEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *LEN.get_or_init(|| head_frame().len() as u64)
}

fn header_frame_len() -> u64 {
    format::meta_frame_len(format::SEGMENT_HEADER_LEN) as u64
}

/// A metadata frame read from a file.
struct Meta {
    payload: Vec<u8>,
    frame_len: u64,
}

/// Reads the metadata frame at `pos`. The outer error is an I/O failure; the inner one says
/// the bytes there are not a whole metadata frame.
fn read_meta(
    path: &Path,
    file: &dyn crate::remote::RangeRead,
    pos: u64,
    file_len: u64,
    what: &'static str,
) -> Result<Result<Meta, DecodeError>> {
    let left = file_len.saturating_sub(pos);
    let prefix = read_at(file, path, pos, (META_PREFIX_LEN as u64).min(left) as usize)?;
    let frame_len = match format::meta_frame_len_from_prefix(what, &prefix) {
        Ok(n) => n as u64,
        Err(e) => return Ok(Err(e)),
    };
    if frame_len > left {
        return Ok(Err(DecodeError::Short {
            what,
            expected: frame_len as usize,
            found: left as usize,
        }));
    }
    let frame = read_at(file, path, pos, frame_len as usize)?;
    Ok(format::decode_meta_frame(what, &frame).map(|payload| Meta { payload, frame_len }))
}

enum Step {
    /// A whole block and the offset after it.
    Block(BlockMeta, u64),
    /// The footer: the end of a sealed segment's blocks.
    Footer,
    /// A block whose header is whole but whose frame fails its checksum, and the offset
    /// after it (where its header says it ends).
    BadFrame(BlockMeta, u64, String),
    /// No readable block header here.
    Unreadable(String),
    /// A block header whose frame runs past the end of the file: a torn tail.
    Cut(String),
}

fn next_block(
    path: &Path,
    file: &File,
    pos: u64,
    file_len: u64,
    verify: bool,
    index: u64,
) -> Result<Step> {
    let meta = match read_meta(path, file, pos, file_len, "block header")? {
        Ok(m) => m,
        Err(e) => return Ok(Step::Unreadable(format!("at offset {pos}: {e}"))),
    };
    if meta.payload.starts_with(&FOOTER_MAGIC) {
        return Ok(Step::Footer);
    }
    let mut block = match BlockMeta::decode_header(&meta.payload) {
        Ok(m) => m,
        Err(e) => {
            return Ok(Step::Unreadable(format!(
                "block header at offset {pos}: {e}"
            )))
        }
    };
    // After damage the walk resynchronises on a later block: its index may be higher.
    if u64::from(block.index) < index {
        return Ok(Step::Unreadable(format!(
            "block header at offset {pos}: expected block {index} or later, found block {}",
            block.index
        )));
    }
    let index = block.index;
    let frame_at = pos + meta.frame_len;
    let end = frame_at + u64::from(block.compressed_len);
    if end > file_len {
        return Ok(Step::Cut(format!(
            "block {index} at offset {pos} is cut short: its frame needs {} bytes, the file has {}",
            block.compressed_len,
            file_len - frame_at
        )));
    }
    if verify {
        let frame = read_at(file, path, frame_at, block.compressed_len as usize)?;
        let crc = crate::crc::crc32c(&frame);
        if crc != block.frame_crc {
            block.frame_offset = frame_at;
            let why = format!(
                "block {index} at offset {pos}: frame crc32c {crc:#010x} does not match the \
                 header's {:#010x}",
                block.frame_crc
            );
            return Ok(Step::BadFrame(block, end, why));
        }
    }
    block.frame_offset = frame_at;
    Ok(Step::Block(block, end))
}
