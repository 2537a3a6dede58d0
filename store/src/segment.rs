//! One segment file: writing it block by block, sealing it, scanning it after a crash, and
//! reading its blocks back.
//!
//! A segment is written under a hidden name (`.seg-N.pcapng.zst.open`). Each block is
//! appended as a header frame plus its zstd frame; the open file is synced at a bounded
//! interval so a power loss costs at most that interval. [`SegmentFile::seal`] appends the
//! footer, fsyncs, renames the file to `seg-N.pcapng.zst` and fsyncs the directory: a sealed
//! name only ever points at a complete file. After a crash, [`scan`] walks an open file's
//! frames, and the store cuts it back to its last whole block before sealing it.
//!
//! Blocks are written with direct I/O (`O_DIRECT`) where the file system takes it: each
//! block is copied into a 4 KiB-aligned buffer behind the unwritten tail of the previous one
//! and written in one aligned `pwrite`, the last page zero-padded (the next block rewrites
//! that page; sealing cuts the padding). This keeps a capture's terabytes out of the page
//! cache, and saves the kernel's copy into it, which was a third of capture's CPU (see
//! docs/decisions.md). A file system that refuses direct I/O gets buffered writes.

use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capsule_pcap::Interface;

use crate::error::{Result, StoreError};
use crate::format::{
    self, BlockMeta, DecodeError, Footer, SegmentHeader, FOOTER_MAGIC, META_PREFIX_LEN, TRAILER_LEN,
};

/// File name ending of a sealed segment.
pub const SEALED_SUFFIX: &str = ".pcapng.zst";
const OPEN_SUFFIX: &str = ".pcapng.zst.open";

/// Name of sealed segment `seq`.
pub fn sealed_name(seq: u64) -> String {
    format!("seg-{seq:012}{SEALED_SUFFIX}")
}

/// Name of segment `seq` while it is being written.
pub fn open_name(seq: u64) -> String {
    format!(".seg-{seq:012}{OPEN_SUFFIX}")
}

/// Whether a segment file is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SegmentState {
    /// Complete, with footer, under its final name.
    Sealed,
    /// Being written, or left torn by a crash.
    Open,
}

/// The sequence number in any segment file name, including a damaged one moved aside.
/// Sequence numbers are never reused, so the next segment is numbered above all of these.
pub fn any_seq(name: &str) -> Option<u64> {
    let name = name.split(".damaged").next()?;
    parse_name(name).map(|(seq, _)| seq)
}

/// Parses a segment file name into its sequence number and state.
pub fn parse_name(name: &str) -> Option<(u64, SegmentState)> {
    let (digits, state) = if let Some(rest) = name.strip_prefix(".seg-") {
        (rest.strip_suffix(OPEN_SUFFIX)?, SegmentState::Open)
    } else {
        (
            name.strip_prefix("seg-")?.strip_suffix(SEALED_SUFFIX)?,
            SegmentState::Sealed,
        )
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, state))
}

/// fsyncs a directory so that renames and unlinks in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("fsync directory", dir, e))
}

/// The pcapng section header every segment starts with, as a zstd frame.
pub fn head_frame() -> Vec<u8> {
    let mut shb = Vec::new();
    capsule_pcap::write::pcapng_shb(
        &mut shb,
        Some(concat!("capsule ", env!("CARGO_PKG_VERSION"))),
    );
    let mut c = zstd::bulk::Compressor::new(1).expect("zstd level 1 is valid");
    // The checksum makes the head frame verifiable like every block frame.
    c.include_checksum(true).expect("checksum flag is valid");
    c.compress(&shb)
        .expect("compressing a few bytes into a Vec cannot fail")
}

/// Alignment of direct I/O: file offsets, lengths and memory (the largest logical block
/// size of common devices, and the page size).
pub const DIRECT_ALIGN: usize = 4096;

/// The direct-I/O writer of an open segment: a second descriptor of the file opened with
/// `O_DIRECT`, and an aligned buffer holding the file's last, partly written page.
#[derive(Debug)]
struct Direct {
    file: File,
    /// Backing storage; the aligned window starts at `start`.
    mem: Vec<u8>,
    start: usize,
    /// File offset of the window's first byte (a multiple of [`DIRECT_ALIGN`]).
    base: u64,
    /// Bytes of the window that hold data (the file's logical length is `base + fill`).
    fill: usize,
    /// Whether a direct write has succeeded on this file (before that, a refusal falls back
    /// to buffered writes).
    proven: bool,
    /// Since when the window holds data not yet written (`None`: all of it is on disk).
    pending_since: Option<Instant>,
}

/// Staged bytes after which a segment writes them out at once. Larger writes get more from
/// a disk than 1 MiB ones (on the development VM's virtual disk: 636 MB/s in 8 MiB direct
/// writes, 407 MB/s in 1 MiB ones).
pub const DIRECT_FLUSH_BYTES: usize = 8 << 20;

impl Direct {
    fn open(path: &Path) -> Option<Direct> {
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()?;
        let mut d = Direct {
            file,
            mem: Vec::new(),
            start: 0,
            base: 0,
            fill: 0,
            proven: false,
            pending_since: None,
        };
        d.reserve(1 << 20);
        Some(d)
    }

    /// Makes the aligned window at least `need` bytes long, keeping its data.
    fn reserve(&mut self, need: usize) {
        if self.mem.len() >= self.start + need {
            return;
        }
        let cap = need.next_multiple_of(1 << 20);
        let mut mem = vec![0u8; cap + DIRECT_ALIGN];
        let start = mem.as_ptr().align_offset(DIRECT_ALIGN);
        mem[start..start + self.fill]
            .copy_from_slice(&self.mem[self.start..self.start + self.fill]);
        self.mem = mem;
        self.start = start;
    }

    /// Appends `parts` behind the data in the window, to be written by [`Direct::flush`].
    fn stage(&mut self, parts: &[&[u8]]) {
        let n: usize = parts.iter().map(|p| p.len()).sum();
        self.reserve((self.fill + n).next_multiple_of(DIRECT_ALIGN));
        let mut at = self.start + self.fill;
        for p in parts {
            self.mem[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        if n > 0 && self.pending_since.is_none() {
            self.pending_since = Some(Instant::now());
        }
        self.fill += n;
    }

    /// Writes the window, zero-padded to a whole page, at `base`; then keeps only the last
    /// partial page in the window.
    fn flush(&mut self) -> std::io::Result<()> {
        if self.pending_since.is_none() {
            return Ok(());
        }
        let at = self.fill;
        let end = at.next_multiple_of(DIRECT_ALIGN);
        let w = &mut self.mem[self.start..self.start + end];
        w[at..].fill(0);
        // A short write (a full disk) ends on a file system block, so the rest stays aligned
        // and the next call reports the error itself (ENOSPC, not EINVAL).
        let mut done = 0;
        while done < end {
            match self.file.write_at(&w[done..], self.base + done as u64) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(k) if (done + k) % DIRECT_ALIGN == 0 || done + k == end => done += k,
                Ok(k) => {
                    return Err(std::io::Error::other(format!(
                        "short direct write of {k} bytes at offset {}",
                        self.base + done as u64
                    )))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.proven = true;
        self.pending_since = None;
        let keep = at - at % DIRECT_ALIGN;
        w.copy_within(keep..at, 0);
        self.base += keep as u64;
        self.fill = at - keep;
        Ok(())
    }
}

/// A segment being written. Consumed by [`SegmentFile::seal`].
#[derive(Debug)]
pub struct SegmentFile {
    dir: PathBuf,
    path: PathBuf,
    /// Opened for appending: buffered writes (the footer, or every write where direct I/O
    /// is refused), truncation and fsync.
    file: File,
    /// The direct-I/O writer, while the file system takes it.
    direct: Option<Direct>,
    seq: u64,
    len: u64,
    footer: Footer,
    scratch: Vec<u8>,
}

/// What sealing a segment produced.
#[derive(Debug, Clone)]
pub struct SealedSegment {
    pub seq: u64,
    pub path: PathBuf,
    pub bytes: u64,
    pub packets: u64,
    pub blocks: usize,
    pub first_ns: u64,
    pub last_ns: u64,
}

impl SegmentFile {
    /// Creates hidden segment `seq` in `dir` and writes its head frame and header.
    pub fn create(dir: &Path, seq: u64, created_ns: u64) -> Result<Self> {
        let path = dir.join(open_name(seq));
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| StoreError::io("create segment", &path, e))?;
        let mut head = head_frame();
        SegmentHeader { seq, created_ns }.encode(&mut head);
        let direct = Direct::open(&path);
        let mut seg = SegmentFile {
            dir: dir.to_path_buf(),
            direct,
            path,
            file,
            seq,
            len: 0,
            footer: Footer::default(),
            scratch: Vec::with_capacity(4096),
        };
        seg.put(&[&head])?;
        // On disk at once: a reader that finds the file must find its head.
        seg.flush()?;
        Ok(seg)
    }

    /// Reopens a torn segment for sealing, after [`scan`] found its whole blocks; the file is
    /// cut back to `scan.good_len` first.
    fn reopen(dir: &Path, path: PathBuf, s: &Scan) -> Result<Self> {
        // Append mode: after the cut, the footer goes at the (new) end of the file.
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::io("reopen segment", &path, e))?;
        file.set_len(s.good_len)
            .map_err(|e| StoreError::io("truncate segment", &path, e))?;
        let mut footer = Footer {
            interfaces: s.interfaces.clone(),
            ..Footer::default()
        };
        for b in &s.blocks {
            add_to_footer(&mut footer, b);
        }
        Ok(SegmentFile {
            dir: dir.to_path_buf(),
            path,
            file,
            direct: None,
            seq: s.header.seq,
            len: s.good_len,
            footer,
            scratch: Vec::new(),
        })
    }

    /// Writes `parts` at the end of the file: direct while the file system takes it, else
    /// buffered.
    fn put(&mut self, parts: &[&[u8]]) -> Result<()> {
        if let Some(d) = &mut self.direct {
            d.stage(parts);
            self.len += parts.iter().map(|p| p.len() as u64).sum::<u64>();
            if d.fill >= DIRECT_FLUSH_BYTES {
                self.flush()?;
            }
            return Ok(());
        }
        self.put_buffered(parts)
    }

    /// Writes what [`SegmentFile::append`] staged (direct I/O stages blocks to write them in
    /// fewer, larger writes): the writer calls this whenever no block is waiting for it, and
    /// it happens at the latest at [`DIRECT_FLUSH_BYTES`], and before a sync or the seal.
    /// Until then readers of the open segment do not see the staged blocks.
    pub fn flush(&mut self) -> Result<()> {
        let Some(d) = &mut self.direct else {
            return Ok(());
        };
        match d.flush() {
            Ok(()) => Ok(()),
            // Refused before any direct write landed: this file system (or device) does not
            // do direct I/O after all. Nothing is on disk yet: write what was staged buffered.
            Err(e) if !d.proven && e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(
                    "{}: direct I/O refused ({e}); buffered writes",
                    self.path.display()
                );
                let staged = d.mem[d.start..d.start + d.fill].to_vec();
                self.direct = None;
                self.len -= staged.len() as u64;
                self.put_buffered(&[&staged])
            }
            Err(e) => Err(StoreError::io("write segment", &self.path, e)),
        }
    }

    /// How long the oldest staged, unwritten byte has waited (`None`: nothing is staged).
    pub fn unflushed_for(&self) -> Option<Duration> {
        self.direct
            .as_ref()
            .and_then(|d| d.pending_since)
            .map(|t| t.elapsed())
    }

    fn put_buffered(&mut self, parts: &[&[u8]]) -> Result<()> {
        match parts {
            [a] => self.write(a),
            [a, b] => self.write_two(a, b),
            _ => {
                for p in parts {
                    self.write(p)?;
                }
                Ok(())
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all(bytes)
            .map_err(|e| StoreError::io("write segment", &self.path, e))?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Writes `a` then `b` with `writev`, looping on short writes.
    fn write_two(&mut self, a: &[u8], b: &[u8]) -> Result<()> {
        let total = a.len() + b.len();
        let mut done = 0;
        while done < total {
            let slices = if done < a.len() {
                [IoSlice::new(&a[done..]), IoSlice::new(b)]
            } else {
                [IoSlice::new(&b[done - a.len()..]), IoSlice::new(&[])]
            };
            match self.file.write_vectored(&slices) {
                Ok(0) => {
                    let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                    return Err(StoreError::io("write segment", &self.path, e));
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StoreError::io("write segment", &self.path, e)),
            }
        }
        self.len += total as u64;
        Ok(())
    }

    /// Appends one block: `meta` must carry the frame's lengths and checksum; its index and
    /// offset are set here.
    pub fn append(&mut self, mut meta: BlockMeta, frame: &[u8]) -> Result<()> {
        meta.index = self.footer.blocks.len() as u32;
        let mut header = std::mem::take(&mut self.scratch);
        header.clear();
        meta.encode_header(&mut header);
        meta.frame_offset = self.len + header.len() as u64;
        // One vectored write for header and frame keeps a torn write to the tail of one
        // block, without copying the frame into the header's buffer.
        let r = self.put(&[&header, frame]);
        self.scratch = header;
        r?;
        self.footer
            .interfaces
            .extend(meta.new_interfaces.iter().cloned());
        add_to_footer(&mut self.footer, &meta);
        Ok(())
    }

    /// Current length of the file in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes the footer will add when the segment is sealed with one more block.
    pub fn footer_reserve(&self) -> u64 {
        let ifaces: usize = self
            .footer
            .interfaces
            .iter()
            .map(|i| 8 + i.name.as_ref().map_or(0, |n| n.len().div_ceil(4) * 4))
            .sum();
        let payload = format::FOOTER_FIXED_LEN
            + (self.footer.blocks.len() + 1) * format::FOOTER_ENTRY_LEN
            + ifaces
            + 16;
        format::meta_frame_len(payload) as u64
    }

    /// Whether no block has been appended yet.
    pub fn is_empty(&self) -> bool {
        self.footer.blocks.is_empty()
    }

    /// The segment's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Writes staged blocks and flushes them to the medium (bounds what a power loss can take).
    pub fn sync_data(&mut self) -> Result<()> {
        self.flush()?;
        self.file
            .sync_data()
            .map_err(|e| StoreError::io("fsync segment", &self.path, e))
    }

    /// Appends the footer, syncs, renames the file to its sealed name and syncs the
    /// directory. An empty segment is removed instead, and `None` returned.
    pub fn seal(mut self) -> Result<Option<SealedSegment>> {
        if self.footer.blocks.is_empty() {
            std::fs::remove_file(&self.path)
                .map_err(|e| StoreError::io("remove empty segment", &self.path, e))?;
            sync_dir(&self.dir)?;
            return Ok(None);
        }
        self.flush()?;
        if self.direct.take().is_some() {
            // Cut the zero padding after the last block; the footer goes at the true end.
            self.file
                .set_len(self.len)
                .map_err(|e| StoreError::io("truncate segment", &self.path, e))?;
        }
        let mut tail = Vec::new();
        self.footer.encode(&mut tail);
        self.write(&tail)?;
        self.file
            .sync_all()
            .map_err(|e| StoreError::io("fsync segment", &self.path, e))?;
        let sealed = self.dir.join(sealed_name(self.seq));
        std::fs::rename(&self.path, &sealed)
            .map_err(|e| StoreError::io("rename segment into place", &self.path, e))?;
        sync_dir(&self.dir)?;
        Ok(Some(SealedSegment {
            seq: self.seq,
            path: sealed,
            bytes: self.len,
            packets: self.footer.packets,
            blocks: self.footer.blocks.len(),
            first_ns: self.footer.first_ns,
            last_ns: self.footer.last_ns,
        }))
    }
}

impl Drop for SegmentFile {
    /// A segment dropped unsealed (the writer stopped on an error) still writes what it
    /// staged, so that recovery at the next open keeps those blocks. Best effort: an error
    /// here leaves them out, as a crash would.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

fn add_to_footer(footer: &mut Footer, meta: &BlockMeta) {
    if footer.blocks.is_empty() {
        footer.first_ns = meta.first_ns;
        footer.last_ns = meta.last_ns;
    } else {
        footer.first_ns = footer.first_ns.min(meta.first_ns);
        footer.last_ns = footer.last_ns.max(meta.last_ns);
    }
    footer.packets += u64::from(meta.packets);
    footer.wire_bytes += meta.wire_bytes;
    let mut entry = meta.clone();
    entry.new_interfaces = Vec::new();
    footer.blocks.push(entry);
}

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

fn read_at(file: &File, path: &Path, offset: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset)
        .map_err(|e| StoreError::io("read segment", path, e))?;
    Ok(buf)
}

fn corrupt(path: &Path, offset: u64, problem: DecodeError) -> StoreError {
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
fn head_and_header_len() -> u64 {
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

/// What recovering a torn segment did.
#[derive(Debug, Clone)]
pub struct Recovery {
    pub seq: u64,
    pub kept_blocks: usize,
    pub kept_packets: u64,
    /// Bytes cut from the tail of the file.
    pub cut_bytes: u64,
    /// Where the cut was made.
    pub cut_at: u64,
    pub problem: Option<String>,
    /// The sealed segment, or `None` if no whole block survived and the file was removed
    /// or moved aside.
    pub sealed: Option<SealedSegment>,
    /// Where a segment whose head was unreadable was moved (kept for inspection).
    pub moved_aside: Option<PathBuf>,
}

impl Recovery {
    /// A recovery that kept no block of the `len` bytes of segment `path`.
    fn nothing_kept(path: &Path, len: u64, problem: String, aside: Option<PathBuf>) -> Self {
        let seq = path
            .file_name()
            .and_then(|n| parse_name(&n.to_string_lossy()))
            .map_or(0, |(s, _)| s);
        Recovery {
            seq,
            kept_blocks: 0,
            kept_packets: 0,
            cut_bytes: len,
            cut_at: 0,
            problem: Some(problem),
            sealed: None,
            moved_aside: aside,
        }
    }
}

/// Cuts a torn open segment back to its last whole block and seals it.
pub fn recover(dir: &Path, path: &Path) -> Result<Recovery> {
    let file = File::open(path).map_err(|e| StoreError::io("open segment", path, e))?;
    let file_len = file
        .metadata()
        .map_err(|e| StoreError::io("stat segment", path, e))?
        .len();
    if file_len == 0 {
        // The writer stopped between creating the file and writing its head: nothing to keep
        // and nothing damaged to look at.
        std::fs::remove_file(path).map_err(|e| StoreError::io("remove empty segment", path, e))?;
        sync_dir(dir)?;
        let problem = "empty: the writer stopped before writing its head".to_string();
        return Ok(Recovery::nothing_kept(path, 0, problem, None));
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
            std::fs::rename(path, &aside)
                .map_err(|e| StoreError::io("move damaged segment aside", path, e))?;
            sync_dir(dir)?;
            let problem = format!("at byte {offset}: {problem}");
            return Ok(Recovery::nothing_kept(path, file_len, problem, Some(aside)));
        }
        Err(e) => return Err(e),
    };
    drop(file);
    let kept_packets = s.blocks.iter().map(|b| u64::from(b.packets)).sum();
    let seg = SegmentFile::reopen(dir, path.to_path_buf(), &s)?;
    let sealed = seg.seal()?;
    Ok(Recovery {
        seq: s.header.seq,
        kept_blocks: s.blocks.len(),
        kept_packets,
        cut_bytes: s.file_len - s.good_len,
        cut_at: s.good_len,
        problem: s.problem,
        sealed,
        moved_aside: None,
    })
}

/// Read access to one segment, sealed or open.
#[derive(Debug)]
pub struct SegmentReader {
    path: PathBuf,
    file: File,
    seq: u64,
    state: SegmentState,
    blocks: Vec<BlockMeta>,
    interfaces: Vec<Interface>,
    bytes: u64,
}

impl SegmentReader {
    /// Opens a segment. A sealed one is read through its footer; an open one (being written,
    /// or torn) by a walk over its block headers that stops at the last whole block.
    pub fn open(path: &Path) -> Result<Self> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (seq, state) = parse_name(&name).ok_or_else(|| StoreError::NotAStore {
            path: path.to_path_buf(),
            detail: "expected a segment file name like seg-000000000001.pcapng.zst".into(),
        })?;
        let file = File::open(path).map_err(|e| StoreError::io("open segment", path, e))?;
        let bytes = file
            .metadata()
            .map_err(|e| StoreError::io("stat segment", path, e))?
            .len();
        let (blocks, interfaces) = match state {
            SegmentState::Sealed => {
                let footer = read_footer(path, &file, bytes)?;
                (footer.blocks, footer.interfaces)
            }
            // A segment the writer has just created may not hold its head yet (it is
            // written in one write right after the file is created): no blocks yet.
            SegmentState::Open if bytes < head_and_header_len() => (Vec::new(), Vec::new()),
            SegmentState::Open => {
                let s = scan(path, &file, false)?;
                (s.blocks, s.interfaces)
            }
        };
        Ok(SegmentReader {
            path: path.to_path_buf(),
            file,
            seq,
            state,
            blocks,
            interfaces,
            bytes,
        })
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
        let crc = crc32c::crc32c(frame);
        if crc != meta.frame_crc {
            return Err(StoreError::BadBlock {
                path: self.path.clone(),
                block: meta.index,
                offset: meta.frame_offset,
                detail: format!(
                    "frame crc32c {crc:#010x} does not match the recorded {:#010x}",
                    meta.frame_crc
                ),
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
        out.reserve(meta.uncompressed_len as usize);
        let n = dctx
            .decompress_to_buffer(&frame[..], out)
            .map_err(|e| StoreError::BadBlock {
                path: self.path.clone(),
                block: meta.index,
                offset: meta.frame_offset,
                detail: format!("zstd frame does not decompress: {e}"),
            })?;
        if n != meta.uncompressed_len as usize {
            return Err(StoreError::BadBlock {
                path: self.path.clone(),
                block: meta.index,
                offset: meta.frame_offset,
                detail: format!(
                    "expected {} decompressed bytes, found {n}",
                    meta.uncompressed_len
                ),
            });
        }
        Ok(())
    }
}

fn read_footer(path: &Path, file: &File, len: u64) -> Result<Footer> {
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
    Footer::decode(&payload).map_err(|e| corrupt(path, len - n, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_name(&sealed_name(7)), Some((7, SegmentState::Sealed)));
        assert_eq!(parse_name(&open_name(12)), Some((12, SegmentState::Open)));
        assert_eq!(parse_name("seg-.pcapng.zst"), None);
        assert_eq!(parse_name("seg-12x.pcapng.zst"), None);
        assert_eq!(parse_name("capsule-store.json"), None);
    }

    /// Appends a block holding `payload` (one fake frame: the reader checks only the crc).
    fn append(seg: &mut SegmentFile, n: u64, payload: &[u8]) {
        let frame = zstd::bulk::compress(payload, 1).unwrap();
        let meta = BlockMeta {
            first_ns: n,
            last_ns: n,
            packets: 1,
            wire_bytes: payload.len() as u64,
            compressed_len: frame.len() as u32,
            uncompressed_len: payload.len() as u32,
            frame_crc: crc32c::crc32c(&frame),
            ..BlockMeta::default()
        };
        seg.append(meta, &frame).unwrap();
    }

    #[test]
    fn direct_writes_pad_the_open_file_and_sealing_cuts_the_padding() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = SegmentFile::create(dir.path(), 1, 0).unwrap();
        assert!(
            seg.direct.is_some(),
            "the temporary directory's file system refused O_DIRECT"
        );
        let path = dir.path().join(open_name(1));
        let mut rng = 7u64;
        let mut noise = |n: usize| {
            (0..n)
                .map(|_| {
                    rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (rng >> 56) as u8
                })
                .collect::<Vec<u8>>()
        };
        // Sizes around the page and the 1 MiB window: a small block, one that grows the
        // window, and several that leave the tail at other offsets in a page.
        let sizes = [100, 3 << 20, 4000, 4096, 1, 70_000];
        let mut payloads = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            payloads.push(noise(n));
            append(&mut seg, i as u64, &payloads[i]);
            // Staged, not written: a reader does not see the block yet.
            assert!(seg.unflushed_for().is_some());
            let file = File::open(&path).unwrap();
            assert_eq!(scan(&path, &file, false).unwrap().blocks.len(), i);
            seg.flush().unwrap();
            assert_eq!(seg.unflushed_for(), None);
            let on_disk = std::fs::metadata(&path).unwrap().len();
            assert_eq!(
                on_disk % DIRECT_ALIGN as u64,
                0,
                "block {i}: file not whole pages"
            );
            assert!(on_disk >= seg.len() && on_disk - seg.len() < DIRECT_ALIGN as u64);
            // A live reader sees every block so far, and the padding is not a problem.
            let file = File::open(&path).unwrap();
            let s = scan(&path, &file, true).unwrap();
            assert_eq!(s.blocks.len(), i + 1);
            assert_eq!(s.good_len, seg.len());
            assert_eq!(s.problem, None, "block {i}");
        }
        let len = seg.len();
        let sealed = seg.seal().unwrap().unwrap();
        let on_disk = std::fs::metadata(&sealed.path).unwrap().len();
        assert_eq!(
            on_disk, sealed.bytes,
            "sealed file longer than what was written"
        );
        assert!(sealed.bytes > len, "no footer after the blocks");
        let r = SegmentReader::open(&sealed.path).unwrap();
        assert_eq!(r.blocks().len(), sizes.len());
        let mut frame = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            r.read_frame(i, &mut frame).unwrap();
            assert_eq!(&zstd::bulk::decompress(&frame, p.len()).unwrap(), p);
        }
    }

    #[test]
    fn staged_blocks_are_written_once_they_reach_the_flush_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = SegmentFile::create(dir.path(), 1, 0).unwrap();
        let path = dir.path().join(open_name(1));
        // Incompressible, so each block's frame is about 1 MiB.
        let mut x = 1u64;
        let block: Vec<u8> = (0..1 << 20)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect();
        let mut n = 0;
        loop {
            append(&mut seg, n, &block);
            n += 1;
            if seg.unflushed_for().is_none() {
                break; // this append crossed the flush size and wrote everything
            }
            assert!(n < 64, "never flushed on its own");
        }
        assert!(n >= 8, "flushed after {n} blocks of 1 MiB");
        let file = File::open(&path).unwrap();
        let s = scan(&path, &file, true).unwrap();
        assert_eq!(s.blocks.len() as u64, n);
        assert!(s.good_len >= DIRECT_FLUSH_BYTES as u64);
        assert_eq!(s.problem, None);
    }

    #[test]
    fn an_open_segment_without_its_head_yet_reads_as_empty_and_recovers_by_removal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(open_name(3));
        File::create(&path).unwrap();
        let r = SegmentReader::open(&path).unwrap();
        assert_eq!((r.seq(), r.blocks().len()), (3, 0));
        let rec = recover(dir.path(), &path).unwrap();
        assert!(rec.sealed.is_none() && rec.moved_aside.is_none());
        assert!(!path.exists(), "the empty open segment is still there");
        // A head cut short is damage, not a segment being created: recovery keeps it aside.
        let mut seg = SegmentFile::create(dir.path(), 4, 0).unwrap();
        seg.flush().unwrap();
        drop(seg);
        let path = dir.path().join(open_name(4));
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(5)
            .unwrap();
        assert_eq!(SegmentReader::open(&path).unwrap().blocks().len(), 0);
        assert!(recover(dir.path(), &path).unwrap().moved_aside.is_some());
    }

    #[test]
    fn padding_is_only_a_clean_end_when_it_is_zeros_shorter_than_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = SegmentFile::create(dir.path(), 1, 0).unwrap();
        append(&mut seg, 0, b"one block");
        let end = seg.len();
        drop(seg);
        let path = dir.path().join(open_name(1));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let problem = |f: &File| scan(&path, f, true).unwrap().problem;
        f.set_len(end + 100).unwrap();
        assert_eq!(problem(&f), None);
        f.write_all_at(&[1], end + 50).unwrap();
        assert!(
            problem(&f).is_some(),
            "a non-zero byte in the padding went unnoticed"
        );
        f.set_len(end).unwrap();
        f.set_len(end + DIRECT_ALIGN as u64).unwrap();
        assert!(
            problem(&f).is_some(),
            "a whole page of zeros is not padding"
        );
    }
}
