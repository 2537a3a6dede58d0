//! One segment file: writing it block by block, sealing it, scanning it after a crash, and
//! reading its blocks back.
//!
//! A segment is written under a hidden name (`.seg-N.pcapng.zst.open`), fsynced into its
//! directory once its head is written. Each block is appended as a header frame plus its
//! zstd frame; the open file is synced at a bounded interval so a power loss costs at most
//! that interval. Every write, truncate and sync goes through `crate::durable`.
//! [`SegmentFile::seal`] appends the footer, fsyncs, renames the file to `seg-N.pcapng.zst`
//! and fsyncs the directory: a sealed name only ever points at a complete file. After a crash, [`scan`] walks an open file's
//! frames, and [`recover`] cuts it back to its last whole block before sealing it.
//! [`SegmentReader`] reads a sealed segment through its footer and the open one through its
//! block headers.
//!
//! ```text
//! mod.rs      names, SegmentFile (create, append, flush, sync, seal), SealedSegment
//! direct.rs   the direct-I/O staging buffer of an open segment
//! scan.rs     the walk over block headers (recovery, and readers of the open segment)
//! recover.rs  a torn segment cut back and sealed, or moved aside: Recovery
//! reader.rs   SegmentReader: blocks, interfaces, read_frame, read_block
//! ```
//!
//! Blocks are written with direct I/O (`O_DIRECT`) where the file system takes it: each
//! block is copied into a 4 KiB-aligned buffer behind the unwritten tail of the previous one
//! and written in one aligned `pwrite`, the last page zero-padded (the next block rewrites
//! that page; sealing cuts the padding). A stored block built in its frame is not copied:
//! it is written from its own buffer ([`SegmentFile::append_framed`], one `pwritev` for 8 MiB
//! of them), its header padded so that its pages are aligned where they lie. This keeps a capture's terabytes out of the page
//! cache, and saves the kernel's copy into it, which was a third of capture's CPU (see
//! docs/decisions.md). A file system that refuses direct I/O gets buffered writes.

use std::fs::File;
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::durable;
use crate::error::{Result, StoreError};
use crate::format::{self, BlockMeta, Footer, SegmentHeader};
use crate::fsx;

mod direct;
pub mod handles;
pub mod journal;
mod reader;
mod recover;
mod scan;

use direct::Direct;
pub use direct::{DIRECT_ALIGN, DIRECT_FLUSH_BYTES, FRAMED_HEAD};
pub use reader::SegmentReader;
pub use recover::{recover, resume_rebuilds, MovedDamage, Recovery, RecoveryOutcome};
pub use scan::{scan, Damage, Scan};
use std::sync::Arc;

use capsule_pcap::Interface;

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
    crate::fsx::sync_dir(dir)
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

/// The smallest body [`SegmentFile::append_framed`] writes from its own buffer: a smaller
/// one is copied into the write window, where it costs less than its header's padding (up
/// to a page) would on disk.
pub const FRAMED_MIN: usize = 64 << 10;

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
    /// Logical length: what is on disk plus what is staged or waits in `retry`.
    len: u64,
    footer: Footer,
    scratch: Vec<u8>,
    /// Buffered writes only: bytes a failed write left unwritten, written by the next
    /// [`SegmentFile::flush`] (so a block is either in the footer and pending, or neither).
    retry: Vec<u8>,
    /// What is on disk for certain: [`SegmentFile::rollback`] goes back to it.
    durable: Checkpoint,
    /// The file has been renamed to its sealed name (a seal that failed after that step).
    renamed: bool,
    /// Something was written (or staged, or cut) since the last fdatasync.
    unsynced: bool,
}

/// The state of a segment after its last successful write: its length and footer totals.
#[derive(Debug, Clone, Copy, Default)]
struct Checkpoint {
    len: u64,
    blocks: usize,
    interfaces: usize,
    packets: u64,
    wire_bytes: u64,
    first_ns: u64,
    last_ns: u64,
}

/// What [`SegmentFile::rollback`] took out: blocks recorded since the last durable write.
#[derive(Debug, Clone, Default)]
pub struct RolledBack {
    pub blocks: usize,
    pub packets: u64,
    /// Logical bytes given up.
    pub bytes: u64,
    /// Interfaces the dropped blocks declared (the blocks after them name them by number,
    /// so a writer that goes on in this segment must declare them again, in this order).
    pub interfaces: Vec<Interface>,
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
        crate::seq::record(dir, seq)?;
        let file = fsx::open(&path, fsx::Open::CreateNew, "create segment")?;
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
            retry: Vec::new(),
            durable: Checkpoint::default(),
            renamed: false,
            unsynced: true,
        };
        // On disk at once: a reader that finds the file must find its head. A file whose
        // head could not be written (a full disk) is removed, so the writer can try again.
        // Then the directory is fsynced: the file's entry survives a power loss from here
        // on, so the blocks each later fdatasync makes durable are found again (without it
        // a power loss could drop the new file's name and with it every synced block; found
        // by the power-loss test in durable/crash_tests.rs).
        if let Err(e) = seg
            .put(&[&head])
            .and_then(|()| seg.flush())
            .and_then(|()| sync_dir(dir))
        {
            seg.retry.clear();
            seg.direct = None;
            let _ = fsx::remove(&seg.path, "remove segment without a head");
            return Err(e);
        }
        Ok(seg)
    }

    /// Reopens a torn segment for sealing, after [`scan`] found its whole blocks; the file is
    /// cut back to `scan.good_len` first.
    pub(super) fn reopen(dir: &Path, path: PathBuf, s: &Scan) -> Result<Self> {
        // Append mode: after the cut, the footer goes at the (new) end of the file.
        let file = fsx::open(&path, fsx::Open::Append, "reopen segment")?;
        durable::set_len(&file, s.good_len)
            .map_err(|e| StoreError::io("truncate segment", &path, e))?;
        let mut footer = Footer {
            interfaces: s.interfaces.clone(),
            ..Footer::default()
        };
        for b in &s.blocks {
            add_to_footer(&mut footer, b);
        }
        let mut seg = SegmentFile {
            dir: dir.to_path_buf(),
            path,
            file,
            direct: None,
            seq: s.header.seq,
            len: s.good_len,
            footer,
            scratch: Vec::new(),
            retry: Vec::new(),
            durable: Checkpoint::default(),
            renamed: false,
            unsynced: true,
        };
        seg.checkpoint();
        Ok(seg)
    }

    /// Records the current state as durable (everything recorded is on disk).
    fn checkpoint(&mut self) {
        let f = &self.footer;
        self.durable = Checkpoint {
            len: self.len,
            blocks: f.blocks.len(),
            interfaces: f.interfaces.len(),
            packets: f.packets,
            wire_bytes: f.wire_bytes,
            first_ns: f.first_ns,
            last_ns: f.last_ns,
        };
    }

    /// Goes back to the last durable state after a failed write (a full disk): the blocks
    /// recorded since then leave the footer, the staged bytes are discarded and the file is
    /// cut to the durable length, so the next write goes where they were. Returns what was
    /// given up.
    pub fn rollback(&mut self) -> Result<RolledBack> {
        let ck = self.durable;
        let f = &mut self.footer;
        self.unsynced = true;
        let gone = RolledBack {
            blocks: f.blocks.len() - ck.blocks,
            packets: f.packets - ck.packets,
            bytes: self.len - ck.len,
            interfaces: f.interfaces.split_off(ck.interfaces),
        };
        f.blocks.truncate(ck.blocks);
        (f.packets, f.wire_bytes) = (ck.packets, ck.wire_bytes);
        (f.first_ns, f.last_ns) = (ck.first_ns, ck.last_ns);
        self.len = ck.len;
        self.retry.clear();
        if let Some(d) = &mut self.direct {
            // The durable partial page is in front of what was staged or queued.
            d.rollback(ck.len);
        }
        // Cutting frees blocks; it needs none. What a failed write put past the durable
        // length goes, so a reader of the open file sees a clean end.
        durable::set_len(&self.file, ck.len)
            .map_err(|e| StoreError::io("truncate segment", &self.path, e))?;
        Ok(gone)
    }

    /// Writes `parts` at the end of the file: direct while the file system takes it, else
    /// buffered.
    fn put(&mut self, parts: &[&[u8]]) -> Result<()> {
        self.unsynced = true;
        if let Some(d) = &mut self.direct {
            d.stage(parts);
            self.len += parts.iter().map(|p| p.len() as u64).sum::<u64>();
            if d.queue_full() {
                self.flush()?;
            }
            return Ok(());
        }
        if !self.retry.is_empty() {
            // An earlier write failed: these bytes go behind its bytes.
            for p in parts {
                self.retry.extend_from_slice(p);
            }
            self.len += parts.iter().map(|p| p.len() as u64).sum::<u64>();
            return self.flush();
        }
        let before = self.len;
        let r = self.put_buffered(parts);
        if r.is_err() {
            // Kept for the next flush; the file is cut back to the durable length then.
            for p in parts {
                self.retry.extend_from_slice(p);
            }
            self.len = before + parts.iter().map(|p| p.len() as u64).sum::<u64>();
        } else {
            self.checkpoint();
        }
        r
    }

    /// Writes what [`SegmentFile::append`] staged (direct I/O stages blocks to write them in
    /// fewer, larger writes): the writer calls this whenever no block is waiting for it, and
    /// it happens at the latest at [`DIRECT_FLUSH_BYTES`], and before a sync or the seal.
    /// Until then readers of the open segment do not see the staged blocks.
    pub fn flush(&mut self) -> Result<()> {
        let Some(d) = &mut self.direct else {
            return self.flush_retry();
        };
        match d.flush() {
            Ok(()) => {
                self.checkpoint();
                Ok(())
            }
            // Refused before any direct write landed: this file system (or device) does not
            // do direct I/O after all. Nothing is on disk yet: write what was staged buffered.
            Err(e) if !d.proven && e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(
                    "{}: direct I/O refused ({e}); buffered writes",
                    self.path.display()
                );
                // Nothing was written, so what waits starts at the file's start.
                debug_assert_eq!(d.unwritten_from(), 0);
                let staged = d.unwritten_bytes();
                self.direct = None;
                self.len -= staged.len() as u64;
                self.put(&[&staged])
            }
            Err(e) => Err(StoreError::io("write segment", &self.path, e)),
        }
    }

    /// Buffered writes: writes what a failed write left, after cutting the file back to
    /// the durable length (a failed write may have put part of it there).
    fn flush_retry(&mut self) -> Result<()> {
        if self.retry.is_empty() {
            return Ok(());
        }
        durable::set_len(&self.file, self.durable.len)
            .map_err(|e| StoreError::io("truncate segment", &self.path, e))?;
        // Append mode: the write goes at the (new) end.
        durable::append_all(&mut self.file, &self.retry)
            .map_err(|e| StoreError::io("write segment", &self.path, e))?;
        self.retry.clear();
        self.checkpoint();
        Ok(())
    }

    /// How long the oldest staged, unwritten byte has waited (`None`: nothing is staged).
    pub fn unflushed_for(&self) -> Option<Duration> {
        if !self.retry.is_empty() {
            return Some(Duration::MAX);
        }
        self.direct
            .as_ref()
            .and_then(|d| d.pending_since)
            .map(|t| t.elapsed())
    }

    fn put_buffered(&mut self, parts: &[&[u8]]) -> Result<()> {
        match parts {
            [a] => self.write(a),
            [a, b] => self.write_two(a, b),
            // A stored block's raw frame in pieces (buffered I/O only): one write, as above.
            _ => self.write(&parts.concat()),
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        durable::append_all(&mut self.file, bytes)
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
            match durable::write_vectored(&mut self.file, &slices) {
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
    pub fn append(&mut self, meta: BlockMeta, frame: &[u8]) -> Result<()> {
        self.append_parts(meta, &[frame])
    }

    /// [`SegmentFile::append`] of the frame made of `frame_parts` one after the other
    /// (a stored block's raw frame around its content, without joining them first).
    pub fn append_parts(&mut self, mut meta: BlockMeta, frame_parts: &[&[u8]]) -> Result<()> {
        meta.index = self.footer.blocks.len() as u32;
        let mut header = std::mem::take(&mut self.scratch);
        header.clear();
        meta.encode_header(&mut header);
        meta.frame_offset = self.len + header.len() as u64;
        // One vectored write for header and frame keeps a torn write to the tail of one
        // block, without copying the frame into the header's buffer.
        // Recorded first: when the write fails (a full disk) the block is pending, written
        // by the next flush or given up by [`SegmentFile::rollback`].
        self.footer
            .interfaces
            .extend(meta.new_interfaces.iter().cloned());
        add_to_footer(&mut self.footer, &meta);
        let r = if let [frame] = frame_parts {
            self.put(&[&header, frame])
        } else {
            let mut parts = Vec::with_capacity(1 + frame_parts.len());
            parts.push(&header[..]);
            parts.extend_from_slice(frame_parts);
            self.put(&parts)
        };
        self.scratch = header;
        r
    }

    /// Appends a stored block: `content` in a raw zstd frame ([`format::put_raw_frame`]),
    /// laid out around it without joining the pieces first (the frame's heads go in
    /// `heads`). `meta` must carry the frame's lengths; its checksum is computed here, with
    /// direct I/O in the same pass as the copy into the write buffer.
    pub fn append_raw(
        &mut self,
        mut meta: BlockMeta,
        content: &[u8],
        heads: &mut Vec<u8>,
    ) -> Result<()> {
        format::raw_frame_heads(content.len(), heads);
        let parts = format::raw_frame_parts(content, heads);
        if self.direct.is_none() {
            meta.frame_crc = parts
                .iter()
                .fold(0, |crc, p| crate::crc::crc32c_append(crc, p));
            return self.append_parts(meta, &parts);
        }
        meta.index = self.footer.blocks.len() as u32;
        let mut header = std::mem::take(&mut self.scratch);
        header.clear();
        meta.frame_crc = 0;
        meta.encode_header(&mut header);
        meta.frame_offset = self.len + header.len() as u64;
        let d = self.direct.as_mut().expect("checked above");
        let at = d.fill;
        d.stage(&[&header]);
        meta.frame_crc = d.stage_crc(&parts, 0);
        // The same length: the checksum is a fixed-width field.
        header.clear();
        meta.encode_header(&mut header);
        d.patch(at, &header);
        let frame_len: usize = parts.iter().map(|p| p.len()).sum();
        self.unsynced = true;
        self.len += (header.len() + frame_len) as u64;
        self.scratch = header;
        // Recorded as append_parts does: a failed flush leaves the block pending.
        self.footer
            .interfaces
            .extend(meta.new_interfaces.iter().cloned());
        add_to_footer(&mut self.footer, &meta);
        if self.direct.as_ref().is_some_and(|d| d.queue_full()) {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends a stored block built in its frame: `buf[body_start..]` holds the frame's raw
    /// blocks (the last one flagged last), `body_crc` is their crc32c, and `buf` keeps
    /// [`FRAMED_HEAD`] bytes free in front of them. `meta` carries the block's packets and
    /// content length; the frame's lengths and checksum are set here.
    ///
    /// With direct I/O, and a body of at least [`FRAMED_MIN`] bytes, the block is written
    /// from `buf` itself, never copied: in front of the body go the window's last partial
    /// page, the block header, the frame's head and up to three empty raw blocks, with the
    /// header padded ([`BlockMeta::header_pad`], whole words) and the empty blocks (3 bytes
    /// each) chosen so that the body lies in memory at its file offset modulo
    /// [`DIRECT_ALIGN`]; the pages from the partial page's start to the body's last whole
    /// page are queued for the next write, and the body's last partial page becomes the
    /// window. Otherwise the frame is written like [`SegmentFile::append_parts`]'s.
    ///
    /// Returns the buffer (shared with the write queue until the block is written: the side
    /// index reads the body from it) and whether the append succeeded; a failed one leaves
    /// the block recorded and pending, like [`SegmentFile::append`].
    pub fn append_framed(
        &mut self,
        mut meta: BlockMeta,
        mut buf: Vec<u8>,
        body_start: usize,
        body_crc: u32,
    ) -> (Arc<Vec<u8>>, Result<()>) {
        let body_end = buf.len();
        let body_len = body_end - body_start;
        let content_len = meta.uncompressed_len as usize;
        meta.index = self.footer.blocks.len() as u32;
        meta.header_pad = 0;
        let mut fh = Vec::with_capacity(format::META_PREFIX_LEN + 9);
        let place = match &self.direct {
            Some(d) if body_len >= FRAMED_MIN && meta.new_interfaces.is_empty() => {
                let t = d.fill % DIRECT_ALIGN;
                let c = (buf.as_ptr() as usize + body_start) % DIRECT_ALIGN;
                let h0 = meta.header_frame_len();
                // lead = t + h0 + pad + 9 + 3j must be c modulo the alignment: pad (whole
                // words) and j (0..=3 empty raw blocks) make up what the rest leaves.
                let need = (c + DIRECT_ALIGN - (t + h0 + format::META_PREFIX_LEN) % DIRECT_ALIGN)
                    % DIRECT_ALIGN;
                let j = (3 * need) % 4;
                let pad = (need + DIRECT_ALIGN - 3 * j) % DIRECT_ALIGN;
                let lead = t + h0 + pad + format::META_PREFIX_LEN + 3 * j;
                (lead <= body_start).then_some((t, pad, j, lead))
            }
            _ => None,
        };
        format::put_raw_frame_head(&mut fh, content_len, place.map_or(0, |p| p.2));
        meta.compressed_len = (fh.len() + body_len) as u32;
        meta.frame_crc =
            crate::crc::crc32c_combine(crate::crc::crc32c(&fh), body_crc, body_len as u64);
        let Some((t, pad, _, lead)) = place else {
            let r = self.append_parts(meta, &[&fh, &buf[body_start..]]);
            return (Arc::new(buf), r);
        };
        meta.header_pad = pad as u32;
        meta.frame_offset = self.len + meta.header_frame_len() as u64;
        let mut header = std::mem::take(&mut self.scratch);
        header.clear();
        meta.encode_header(&mut header);
        let d = self.direct.as_mut().expect("placed above");
        let from = body_start - lead;
        buf[from..from + t].copy_from_slice(d.tail());
        buf[from + t..from + t + header.len()].copy_from_slice(&header);
        buf[from + t + header.len()..body_start].copy_from_slice(&fh);
        self.len += (header.len() + fh.len() + body_len) as u64;
        self.scratch = header;
        self.unsynced = true;
        let shared = d.queue_framed(buf, from, body_end);
        // Recorded as append_parts does: a failed flush leaves the block pending.
        add_to_footer(&mut self.footer, &meta);
        let r = if self.direct.as_ref().is_some_and(|d| d.queue_full()) {
            self.flush()
        } else {
            Ok(())
        };
        (shared, r)
    }

    /// The `back`-th block appended so far, counting from the last (0): as its header and
    /// the footer record it, with its index and frame offset in the file.
    pub fn appended(&self, back: usize) -> Option<&BlockMeta> {
        let n = self.footer.blocks.len();
        n.checked_sub(back + 1).map(|i| &self.footer.blocks[i])
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
        durable::sync_data(&self.file)
            .map_err(|e| StoreError::io("fsync segment", &self.path, e))?;
        self.unsynced = false;
        Ok(())
    }

    /// Whether anything was written (or staged) since the last [`SegmentFile::sync_data`]:
    /// a power loss now could take it.
    pub fn needs_sync(&self) -> bool {
        self.unsynced
    }

    /// Appends the footer, syncs, renames the file to its sealed name and syncs the
    /// directory. An empty segment is removed instead, and `None` returned.
    pub fn seal(self) -> Result<Option<SealedSegment>> {
        self.try_seal().map_err(|f| f.error)
    }

    /// [`SegmentFile::seal`], which gives the segment back when it fails (a full disk), still
    /// open and consistent: sealing can be tried again, or the file left for recovery.
    pub fn try_seal(mut self) -> std::result::Result<Option<SealedSegment>, SealFailed> {
        match self.seal_steps() {
            Ok(s) => Ok(s),
            Err(error) => {
                if !self.renamed {
                    // Cut what the footer's write left, so a block appended next goes right
                    // behind the last one (best effort: the next seal cuts it too).
                    let _ = durable::set_len(&self.file, self.durable.len);
                }
                Err(SealFailed {
                    error,
                    segment: Box::new(self),
                })
            }
        }
    }

    fn seal_steps(&mut self) -> Result<Option<SealedSegment>> {
        if self.footer.blocks.is_empty() {
            match fsx::remove(&self.path, "remove empty segment") {
                Ok(()) => {}
                // Removed by an earlier attempt whose directory sync failed.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            sync_dir(&self.dir)?;
            return Ok(None);
        }
        self.flush()?;
        let sealed = self.dir.join(sealed_name(self.seq));
        if !self.renamed {
            // Cut the zero padding after the last block (and a footer an earlier attempt
            // left half written); the footer goes at the true end.
            self.direct = None;
            durable::set_len(&self.file, self.len)
                .map_err(|e| StoreError::io("truncate segment", &self.path, e))?;
            let mut tail = Vec::new();
            self.footer.encode(&mut tail);
            durable::append_all(&mut self.file, &tail)
                .map_err(|e| StoreError::io("write segment", &self.path, e))?;
            durable::sync_all(&self.file)
                .map_err(|e| StoreError::io("fsync segment", &self.path, e))?;
            fsx::rename(&self.path, &sealed, "rename segment into place")?;
            self.renamed = true;
            self.len += tail.len() as u64;
            self.checkpoint();
        }
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

/// A seal that failed: why, and the segment, still open.
#[derive(Debug)]
pub struct SealFailed {
    pub error: StoreError,
    pub segment: Box<SegmentFile>,
}

impl Drop for SegmentFile {
    /// A segment dropped unsealed (the writer stopped on an error) still writes what it
    /// staged, so that recovery at the next open keeps those blocks. Best effort: an error
    /// here leaves them out, as a crash would.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

pub(crate) fn add_to_footer(footer: &mut Footer, meta: &BlockMeta) {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

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
        let (meta, frame) = block(n, payload);
        seg.append(meta, &frame).unwrap();
    }

    /// A block of one packet at time `n` holding `payload`, and its frame (the segment layer
    /// checks only its crc and lengths). Also the power-loss tests' blocks.
    pub(crate) fn block(n: u64, payload: &[u8]) -> (BlockMeta, Vec<u8>) {
        let frame = zstd::bulk::compress(payload, 1).unwrap();
        let meta = BlockMeta {
            first_ns: n,
            last_ns: n,
            packets: 1,
            wire_bytes: payload.len() as u64,
            compressed_len: frame.len() as u32,
            uncompressed_len: payload.len() as u32,
            frame_crc: crate::crc::crc32c(&frame),
            ..BlockMeta::default()
        };
        (meta, frame)
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
    fn stored_blocks_carry_their_raw_frames_checksum_direct_or_buffered() {
        for direct in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let mut seg = create_direct_or_buffered(dir.path(), direct);
            let path = dir.path().join(open_name(1));
            // Around the raw frame's 128 KiB blocks and the checksum's 8 KiB pieces, and
            // past the first flush size.
            let sizes = [0, 100, 8192, 128 << 10, (128 << 10) + 1, 300_001, 9 << 20];
            let mut heads = Vec::new();
            let mut contents = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                let content: Vec<u8> = (0..n).map(|k| (k * 31 + i * 7) as u8).collect();
                let meta = BlockMeta {
                    first_ns: i as u64,
                    last_ns: i as u64,
                    packets: 1,
                    compressed_len: format::raw_frame_len(n) as u32,
                    uncompressed_len: n as u32,
                    compression: format::Compression::Stored,
                    frame_crc: 0xdead_beef, // replaced
                    ..BlockMeta::default()
                };
                seg.append_raw(meta, &content, &mut heads).unwrap();
                let mut frame = Vec::new();
                format::put_raw_frame(&mut frame, &content);
                let got = seg.appended(0).unwrap();
                assert_eq!(got.frame_crc, crate::crc::crc32c(&frame), "{n} bytes");
                assert_eq!(got.compressed_len as usize, frame.len());
                contents.push((content, frame));
            }
            seg.flush().unwrap();
            // The headers written agree with the footer's entries (a live reader checks
            // each header's own checksum and the frames' against them).
            let file = File::open(&path).unwrap();
            let s = scan(&path, &file, true).unwrap();
            assert_eq!(s.problem, None);
            assert_eq!(s.blocks.len(), sizes.len());
            for (b, (_, frame)) in s.blocks.iter().zip(&contents) {
                assert_eq!(b.frame_crc, crate::crc::crc32c(frame));
            }
            let sealed = seg.seal().unwrap().unwrap();
            let r = SegmentReader::open(&sealed.path).unwrap();
            let mut frame = Vec::new();
            for (i, (content, raw)) in contents.iter().enumerate() {
                r.read_frame(i, &mut frame).unwrap();
                assert_eq!(&frame, raw, "direct {direct}, block {i}");
                assert_eq!(
                    &zstd::bulk::decompress(&frame, content.len()).unwrap(),
                    content
                );
            }
        }
    }

    /// Segment 1 in `dir`, written with direct I/O, or `direct` false, buffered.
    fn create_direct_or_buffered(dir: &Path, direct: bool) -> SegmentFile {
        let mut seg = SegmentFile::create(dir, 1, 0).unwrap();
        assert!(seg.direct.is_some(), "O_DIRECT refused");
        if !direct {
            seg.direct = None;
            seg.file.set_len(seg.len).unwrap(); // cut the head's page padding
        }
        seg
    }

    /// A block built in its frame ([`SegmentFile::append_framed`]): `content` in raw blocks
    /// of at most `cut` bytes, behind `FRAMED_HEAD + shift` free bytes; and the checksum of
    /// its raw blocks.
    fn framed(content: &[u8], cut: usize, shift: usize) -> (Vec<u8>, usize, u32) {
        let body = FRAMED_HEAD + shift;
        let mut buf = vec![0u8; body];
        let mut crc = crate::crc::Crc32c::default();
        let n = content.len().div_ceil(cut);
        for (i, c) in content.chunks(cut).enumerate() {
            let at = buf.len();
            buf.extend_from_slice(&format::raw_block_header(c.len(), i + 1 == n));
            buf.extend_from_slice(c);
            crc.update(&buf[at..]);
        }
        (buf, body, crc.value())
    }

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 56) as u8
            })
            .collect()
    }

    /// Blocks built in their frames, between blocks copied into the write window, direct
    /// and buffered: the file holds each frame whole (its checksum and lengths as recorded,
    /// zstd decodes it to its content), a scan of the open file agrees with the footer, and
    /// direct writes padded some headers to put bodies where their buffers lie.
    #[test]
    fn framed_blocks_are_written_from_their_buffers_between_copied_ones() {
        for direct in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let mut seg = create_direct_or_buffered(dir.path(), direct);
            let path = dir.path().join(open_name(1));
            // (content bytes, raw block size, framed): past the flush size several times,
            // small framed ones copied, and every residue of the body's address.
            let mut plan = vec![
                (300_001, 100_000, true),
                (5000, 0, false),
                (70_000, 65_536, true),
            ];
            for i in 0..24 {
                plan.push((1_048_000 + 4099 * i, 131_072 - 13 * i, true));
                if i % 5 == 0 {
                    plan.push((3000 + i, 0, false));
                    plan.push((20_000, 8192, true));
                }
            }
            let mut want = Vec::new();
            let mut shared = Vec::new();
            for (i, &(n, cut, is_framed)) in plan.iter().enumerate() {
                let content = noise(n, i as u64);
                let meta = BlockMeta {
                    first_ns: i as u64,
                    last_ns: i as u64,
                    packets: 1,
                    uncompressed_len: n as u32,
                    compression: format::Compression::Stored,
                    ..BlockMeta::default()
                };
                if is_framed {
                    let (buf, body, crc) = framed(&content, cut, i % 7);
                    let (buf, r) = seg.append_framed(meta, buf, body, crc);
                    r.unwrap();
                    shared.push(buf);
                } else {
                    let (meta, frame) = block(i as u64, &content);
                    seg.append(meta, &frame).unwrap();
                }
                let got = seg.appended(0).unwrap().clone();
                want.push((content, got));
            }
            seg.flush().unwrap();
            // The queue has let go of every buffer.
            assert!(shared.iter().all(|b| Arc::strong_count(b) == 1));
            if direct {
                let padded = want.iter().filter(|(_, m)| m.header_pad > 0).count();
                assert!(padded > 10, "only {padded} headers padded");
            }
            let file = File::open(&path).unwrap();
            let s = scan(&path, &file, true).unwrap();
            assert_eq!(s.problem, None, "direct {direct}");
            assert_eq!(s.blocks.len(), plan.len());
            for (b, (_, m)) in s.blocks.iter().zip(&want) {
                assert_eq!(
                    (b.frame_offset, b.compressed_len, b.frame_crc, b.header_pad),
                    (m.frame_offset, m.compressed_len, m.frame_crc, m.header_pad)
                );
            }
            let sealed = seg.seal().unwrap().unwrap();
            let r = SegmentReader::open(&sealed.path).unwrap();
            let mut frame = Vec::new();
            for (i, (content, m)) in want.iter().enumerate() {
                r.read_frame(i, &mut frame).unwrap();
                assert_eq!(frame.len(), m.compressed_len as usize);
                assert_eq!(crate::crc::crc32c(&frame), m.frame_crc, "block {i}");
                let plain = zstd::bulk::decompress(&frame, content.len()).unwrap();
                assert!(plain == *content, "direct {direct}, block {i}");
            }
            let file = File::open(&sealed.path).unwrap();
            let s = scan(&sealed.path, &file, true).unwrap();
            assert_eq!((s.problem, s.blocks.len()), (None, plan.len()));
        }
    }

    /// A full disk under framed blocks queued for one write: the rollback gives the queue
    /// up, keeps what the last write put on disk, and writing goes on behind it.
    #[test]
    fn a_failed_write_of_queued_framed_blocks_rolls_back_to_the_last_write() {
        let Some(fs) = SmallFs::mount("4m") else {
            eprintln!("skipped: mounting a tmpfs needs root");
            return;
        };
        let dir = fs.0.path();
        std::fs::write(dir.join("filler"), vec![1u8; 1 << 20]).unwrap();
        let mut seg = SegmentFile::create(dir, 1, 0).unwrap();
        assert!(seg.direct.is_some(), "tmpfs refused O_DIRECT");
        let meta = |i: usize, n: usize| BlockMeta {
            first_ns: i as u64,
            last_ns: i as u64,
            packets: 1,
            uncompressed_len: n as u32,
            compression: format::Compression::Stored,
            ..BlockMeta::default()
        };
        let mut kept = Vec::new();
        let mut i = 0;
        loop {
            let content = noise(200_000, i as u64);
            let (buf, body, crc) = framed(&content, 120_000, i % 5);
            let (_, r) = seg.append_framed(meta(i, content.len()), buf, body, crc);
            let r = r.and_then(|()| if i % 2 == 1 { seg.flush() } else { Ok(()) });
            i += 1;
            match r {
                Ok(()) => {
                    assert!(i < 100, "the disk never filled");
                    kept.push(content);
                }
                Err(e) => {
                    assert!(e.is_disk_full(), "{e}");
                    let gone = seg.rollback().unwrap();
                    // Flushed every second block: one or two were waiting.
                    assert!((1..=2).contains(&gone.blocks), "{gone:?}");
                    kept.truncate(seg.footer.blocks.len());
                    break;
                }
            }
        }
        assert!(kept.len() > 3, "only {} blocks fit", kept.len());
        std::fs::remove_file(dir.join("filler")).unwrap();
        let content = noise(150_000, 999);
        let (buf, body, crc) = framed(&content, 100_000, 3);
        seg.append_framed(meta(999, content.len()), buf, body, crc)
            .1
            .unwrap();
        kept.push(content);
        let sealed = seg.seal().unwrap().unwrap();
        let r = SegmentReader::open(&sealed.path).unwrap();
        assert_eq!(r.blocks().len(), kept.len());
        let mut frame = Vec::new();
        for (i, content) in kept.iter().enumerate() {
            r.read_frame(i, &mut frame).unwrap();
            assert!(zstd::bulk::decompress(&frame, content.len()).unwrap() == *content);
        }
        let file = File::open(&sealed.path).unwrap();
        let s = scan(&sealed.path, &file, true).unwrap();
        assert_eq!((s.problem, s.blocks.len()), (None, kept.len()));
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
        assert!(rec.sealed().is_none() && rec.moved_aside().is_none());
        assert!(!path.exists(), "the empty open segment is still there");
        // A head cut short is damage, not a segment being created: recovery keeps it aside.
        let mut seg = SegmentFile::create(dir.path(), 4, 0).unwrap();
        seg.flush().unwrap();
        drop(seg);
        let path = dir.path().join(open_name(4));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(5)
            .unwrap();
        assert_eq!(SegmentReader::open(&path).unwrap().blocks().len(), 0);
        assert!(recover(dir.path(), &path).unwrap().moved_aside().is_some());
    }

    /// Found by the `segment_file` fuzz target: a sealed segment with bytes cut out of its
    /// middle but its footer intact opened, and listed blocks past the end of the file (and
    /// a reader would allocate the frame length the footer states). The footer's block
    /// extents are now checked against the file at open.
    #[test]
    fn a_sealed_segment_whose_footer_points_past_its_blocks_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        // Incompressible payloads, so each frame is about 3000 bytes.
        let mut x = 1u32;
        let noise: Vec<u8> = (0..6000)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (x >> 24) as u8
            })
            .collect();
        let mut seg = SegmentFile::create(dir.path(), 1, 0).unwrap();
        append(&mut seg, 0, &noise[..3000]);
        append(&mut seg, 1, &noise[3000..]);
        seg.seal().unwrap().unwrap();
        let path = dir.path().join(sealed_name(1));
        let whole = std::fs::read(&path).unwrap();
        assert_eq!(SegmentReader::open(&path).unwrap().blocks().len(), 2);
        // Cut 2000 bytes out of the second block's frame; the footer stays whole.
        let at = SegmentReader::open(&path).unwrap().blocks()[1].frame_offset as usize;
        let mut cut = whole[..at].to_vec();
        cut.extend_from_slice(&whole[at + 2000..]);
        std::fs::write(&path, &cut).unwrap();
        // The footer is not trusted: the segment is read through its block headers, which
        // find the one whole block, and no block that would lie past the end of the file.
        let r = SegmentReader::open(&path).unwrap();
        let why = r.footer_problem().expect("the footer is refused");
        assert!(why.contains("past the footer"), "{why}");
        assert_eq!(r.blocks().len(), 1, "{r:?}");
        assert!(r
            .blocks()
            .iter()
            .all(|b| b.frame_offset + u64::from(b.compressed_len) <= cut.len() as u64));
    }

    #[test]
    fn padding_is_only_a_clean_end_when_it_is_zeros_shorter_than_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = SegmentFile::create(dir.path(), 1, 0).unwrap();
        append(&mut seg, 0, b"one block");
        let end = seg.len();
        drop(seg);
        let path = dir.path().join(open_name(1));
        let f = std::fs::OpenOptions::new()
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

    /// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped. `None` when
    /// mounting is not allowed (not root): the test then has nothing to check.
    struct SmallFs(tempfile::TempDir);

    impl SmallFs {
        fn mount(size: &str) -> Option<SmallFs> {
            let dir = tempfile::tempdir().unwrap();
            let ok = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir.path())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(SmallFs(dir))
        }
    }

    impl Drop for SmallFs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg(self.0.path())
                .status();
        }
    }

    /// Fills a small tmpfs through `seg` until a write fails for a full disk, rolls back,
    /// frees the room a filler took and goes on: the sealed file holds exactly the blocks
    /// written before the failure and those after, and none of the dropped ones.
    fn a_failed_write_rolls_back_to_what_is_on_disk(direct: bool) {
        let Some(fs) = SmallFs::mount("1m") else {
            eprintln!("skipped: mounting a tmpfs needs root");
            return;
        };
        let dir = fs.0.path();
        std::fs::write(dir.join("filler"), vec![1u8; 256 << 10]).unwrap();
        let mut seg = SegmentFile::create(dir, 1, 0).unwrap();
        if !direct {
            seg.direct = None;
            seg.file.set_len(seg.len).unwrap(); // cut the head's page padding
        }
        let payload = |n: u64| -> Vec<u8> {
            let mut x = n + 1;
            (0..40_000)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (x >> 56) as u8
                })
                .collect()
        };
        let mut n = 0u64;
        let kept = loop {
            let (meta, frame) = block(n, &payload(n));
            let r = seg.append(meta, &frame).and_then(|()| seg.flush());
            n += 1;
            match r {
                Ok(()) => assert!(n < 100, "the disk never filled"),
                Err(e) => {
                    assert!(e.is_disk_full(), "{e}");
                    // The failed block is recorded and pending until given up.
                    assert_eq!(seg.footer.blocks.len() as u64, n);
                    let gone = seg.rollback().unwrap();
                    assert_eq!((gone.blocks, gone.packets), (1, 1));
                    break n - 1;
                }
            }
        };
        assert!(kept > 3, "only {kept} blocks fit");
        assert_eq!(seg.footer.blocks.len() as u64, kept);
        assert_eq!(seg.footer.packets, kept);
        assert_eq!(
            std::fs::metadata(dir.join(open_name(1))).unwrap().len(),
            seg.len()
        );
        // Nothing left to write: the next block fails the same way, and rolls back again.
        append_or_full(&mut seg, 1000, &payload(1000));
        assert_eq!(seg.footer.blocks.len() as u64, kept);
        // Space returns: writing goes on where the dropped blocks were.
        std::fs::remove_file(dir.join("filler")).unwrap();
        append(&mut seg, 2000, b"after the disk had room again");
        seg.flush().unwrap();
        let sealed = seg.seal().unwrap().unwrap();
        let r = SegmentReader::open(&sealed.path).unwrap();
        assert_eq!(r.blocks().len() as u64, kept + 1);
        let mut frame = Vec::new();
        for i in 0..kept as usize {
            r.read_frame(i, &mut frame).unwrap();
            assert_eq!(
                zstd::bulk::decompress(&frame, 40_000).unwrap(),
                payload(i as u64)
            );
        }
        assert_eq!(r.blocks()[kept as usize].first_ns, 2000);
        let file = File::open(&sealed.path).unwrap();
        assert_eq!(
            scan(&sealed.path, &file, false).unwrap().blocks.len() as u64,
            kept + 1
        );
    }

    /// Appends and flushes a block that must fail for a full disk, and rolls it back.
    fn append_or_full(seg: &mut SegmentFile, n: u64, payload: &[u8]) {
        let (meta, frame) = block(n, payload);
        let e = seg
            .append(meta, &frame)
            .and_then(|()| seg.flush())
            .unwrap_err();
        assert!(e.is_disk_full(), "{e}");
        seg.rollback().unwrap();
    }

    #[test]
    fn a_failed_direct_write_rolls_back_to_the_last_flush() {
        a_failed_write_rolls_back_to_what_is_on_disk(true);
    }

    #[test]
    fn a_failed_buffered_write_rolls_back_to_the_last_write() {
        a_failed_write_rolls_back_to_what_is_on_disk(false);
    }

    #[test]
    fn a_seal_without_room_for_the_footer_gives_the_segment_back() {
        let Some(fs) = SmallFs::mount("256k") else {
            eprintln!("skipped: mounting a tmpfs needs root");
            return;
        };
        let dir = fs.0.path();
        let mut seg = SegmentFile::create(dir, 1, 0).unwrap();
        seg.direct = None;
        seg.file.set_len(seg.len).unwrap(); // cut the head's page padding
                                            // Enough blocks that the footer needs more than the last page's spare room.
        for i in 0..300 {
            append(&mut seg, i, b"a small block");
        }
        // Fill what is left, to the byte.
        let mut filler = File::create(dir.join("filler")).unwrap();
        let chunk = vec![7u8; 4096];
        while filler.write_all(&chunk).is_ok() {}
        let mut byte = [7u8];
        while filler.write(&byte).is_ok_and(|n| n == 1) {
            byte[0] = 7;
        }
        let mut seg = *match seg.try_seal() {
            Err(f) => {
                assert!(f.error.is_disk_full(), "{}", f.error);
                f.segment
            }
            Ok(_) => return eprintln!("skipped: the footer fit in the file's last page"),
        };
        assert!(dir.join(open_name(1)).exists(), "the segment stays open");
        drop(filler);
        std::fs::remove_file(dir.join("filler")).unwrap();
        append(&mut seg, 300, b"one more");
        let sealed = seg.seal().unwrap().unwrap();
        let r = SegmentReader::open(&sealed.path).unwrap();
        assert_eq!(r.blocks().len(), 301);
        let mut frame = Vec::new();
        for i in 0..301 {
            r.read_frame(i, &mut frame).unwrap();
        }
        assert_eq!(std::fs::metadata(&sealed.path).unwrap().len(), sealed.bytes);
    }
}
