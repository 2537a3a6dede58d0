//! The walk over a segment's frames when its footer cannot be used: after a crash
//! (recovery verifies every block's checksum) and while the segment is being written (a
//! reader reads the block headers only).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use capsule_pcap::Interface;

use super::{head_frame, DIRECT_ALIGN};
use crate::error::{Result, StoreError};
use crate::format::{self, BlockMeta, DecodeError, SegmentHeader, FOOTER_MAGIC, META_PREFIX_LEN};

/// What a walk over an open (or torn) segment found.
#[derive(Debug, Clone)]
pub struct Scan {
    pub header: SegmentHeader,
    /// Whole blocks, in file order, with frame offsets.
    pub blocks: Vec<BlockMeta>,
    /// The segment's interfaces, gathered from the block headers.
    pub interfaces: Vec<Interface>,
    /// Offset just past the last whole block.
    pub good_len: u64,
    /// Length of the file when it was scanned.
    pub file_len: u64,
    /// Why the walk stopped before the end of the file, if it did.
    pub problem: Option<String>,
}

pub(super) fn read_at(file: &File, path: &Path, offset: u64, len: usize) -> Result<Vec<u8>> {
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
/// frame is read and its crc32c checked (recovery); without, only headers are read (a live
/// reader of the segment being written). The walk stops at the first incomplete or damaged
/// block and reports why in [`Scan::problem`]; less than a page of zero bytes after the last
/// block is direct-I/O padding, not a problem. A damaged head or segment header is an error.
pub fn scan(path: &Path, file: &File, verify: bool) -> Result<Scan> {
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
    let mut pos = head_len;
    let header = match read_meta(path, file, pos, file_len, "segment header")? {
        Ok(p) => SegmentHeader::decode(&p.payload).map_err(|e| corrupt(path, pos, e))?,
        Err(e) => return Err(corrupt(path, pos, e)),
    };
    pos += header_frame_len();

    let mut blocks = Vec::new();
    let mut interfaces = Vec::new();
    let mut problem = None;
    while pos < file_len {
        match next_block(path, file, pos, file_len, verify, blocks.len() as u32)? {
            Step::Block(meta, next) => {
                interfaces.extend(meta.new_interfaces.iter().cloned());
                blocks.push(meta);
                pos = next;
            }
            Step::Footer => break,
            Step::Stop(why) => {
                // Less than a page of zeros: the padding of the last direct write, the
                // clean end of an open segment.
                let rest = file_len - pos;
                let padding = rest < DIRECT_ALIGN as u64
                    && read_at(file, path, pos, rest as usize)?
                        .iter()
                        .all(|&b| b == 0);
                if !padding {
                    problem = Some(why);
                }
                break;
            }
        }
    }
    Ok(Scan {
        header,
        blocks,
        interfaces,
        good_len: pos,
        file_len,
        problem,
    })
}

/// Bytes of a segment's head frame and segment header: the least an open segment holds once
/// its writer has written anything.
pub(super) fn head_and_header_len() -> u64 {
    static LEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *LEN.get_or_init(|| head_frame().len() as u64 + header_frame_len())
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
    file: &File,
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
    Block(BlockMeta, u64),
    Footer,
    Stop(String),
}

fn next_block(
    path: &Path,
    file: &File,
    pos: u64,
    file_len: u64,
    verify: bool,
    index: u32,
) -> Result<Step> {
    let meta = match read_meta(path, file, pos, file_len, "block header")? {
        Ok(m) => m,
        Err(e) => return Ok(Step::Stop(format!("at offset {pos}: {e}"))),
    };
    if meta.payload.starts_with(&FOOTER_MAGIC) {
        return Ok(Step::Footer);
    }
    let mut block = match BlockMeta::decode_header(&meta.payload) {
        Ok(m) => m,
        Err(e) => return Ok(Step::Stop(format!("block header at offset {pos}: {e}"))),
    };
    if block.index != index {
        return Ok(Step::Stop(format!(
            "block header at offset {pos}: expected block {index}, found block {}",
            block.index
        )));
    }
    let frame_at = pos + meta.frame_len;
    let end = frame_at + u64::from(block.compressed_len);
    if end > file_len {
        return Ok(Step::Stop(format!(
            "block {index} at offset {pos} is cut short: its frame needs {} bytes, the file has {}",
            block.compressed_len,
            file_len - frame_at
        )));
    }
    if verify {
        let frame = read_at(file, path, frame_at, block.compressed_len as usize)?;
        let crc = crc32c::crc32c(&frame);
        if crc != block.frame_crc {
            return Ok(Step::Stop(format!(
                "block {index} at offset {pos}: frame crc32c {crc:#010x} does not match the \
                 header's {:#010x}",
                block.frame_crc
            )));
        }
    }
    block.frame_offset = frame_at;
    Ok(Step::Block(block, end))
}
