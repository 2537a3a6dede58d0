//! The direct-I/O writer of an open segment: blocks are staged in a 4 KiB-aligned buffer
//! behind the unwritten tail of the previous one and written in large aligned `pwrite`s,
//! the last page zero-padded (the next write rewrites that page; sealing cuts the padding).
//!
//! A stored block built in its frame (see [`FRAMED_HEAD`]) is not copied into that buffer:
//! it is queued as it is, its head (the window's last partial page, the block header and
//! the frame's head) put in the room its buffer keeps in front of it, so that its pages are
//! aligned where they lie; the window's whole pages before it are queued too, and one
//! `pwritev` writes the queue and the window.

use std::fs::File;
use std::io::IoSlice;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Alignment of direct I/O: file offsets, lengths and memory (the largest logical block
/// size of common devices, and the page size).
pub const DIRECT_ALIGN: usize = 4096;

/// Room a stored block built in its frame keeps in front of its body (its raw blocks):
/// enough for what [`SegmentFile::append_framed`](super::SegmentFile::append_framed) puts
/// there, the window's last partial page (under 4 KiB), the block header with its padding
/// (under 4 KiB more) and the frame's head with up to three empty raw blocks.
pub const FRAMED_HEAD: usize = 16 << 10;

/// Pages waiting in the queue for the next write.
#[derive(Debug)]
enum Piece {
    /// Whole pages the window held when a framed block was queued behind them.
    Window(Vec<u8>, Range<usize>),
    /// A framed block's pages (its head in front, up to its last whole page).
    Framed(Arc<Vec<u8>>, Range<usize>),
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Window(v, r) => &v[r.clone()],
            Piece::Framed(v, r) => &v[r.clone()],
        }
    }
}

/// The direct-I/O writer of an open segment: a second descriptor of the file opened with
/// `O_DIRECT`, and an aligned buffer holding the file's last, partly written page.
#[derive(Debug)]
pub(super) struct Direct {
    pub(super) file: File,
    /// Backing storage; the aligned window starts at `start`.
    pub(super) mem: Vec<u8>,
    pub(super) start: usize,
    /// File offset of the window's first byte (a multiple of [`DIRECT_ALIGN`]).
    pub(super) base: u64,
    /// Bytes of the window that hold data (the file's logical length is `base + fill`).
    pub(super) fill: usize,
    /// Whether a direct write has succeeded on this file (before that, a refusal falls back
    /// to buffered writes).
    pub(super) proven: bool,
    /// Since when the window or the queue holds data not yet written (`None`: all of it is
    /// on disk).
    pub(super) pending_since: Option<Instant>,
    /// Whole pages to write before the window, in file order, ending at `base`.
    queue: Vec<Piece>,
    /// Bytes in `queue`.
    queued: usize,
    /// Window buffers the queue gave back, for the next window swapped out.
    spare: Vec<Vec<u8>>,
}

/// Staged bytes after which a segment writes them out at once. Larger writes get more from
/// a disk than 1 MiB ones (on the development VM's virtual disk: 636 MB/s in 8 MiB direct
/// writes, 407 MB/s in 1 MiB ones).
pub const DIRECT_FLUSH_BYTES: usize = 8 << 20;

/// Bytes copied before their checksum is taken by [`Direct::stage_crc`]: small enough to be
/// still in the first-level cache.
const CRC_PIECE: usize = 8 << 10;

/// At most this many pieces are queued before a write (well under `IOV_MAX`, 1024).
const MAX_PIECES: usize = 256;

impl Direct {
    pub(super) fn open(path: &Path) -> Option<Direct> {
        let file = crate::fsx::open(path, crate::fsx::Open::Direct, "open for direct I/O").ok()?;
        Some(Direct::of(file))
    }

    /// A writer of `file` (opened with O_DIRECT), its window reserved (1 MiB).
    fn of(file: File) -> Direct {
        let mut d = Direct {
            file,
            mem: Vec::new(),
            start: 0,
            base: 0,
            fill: 0,
            proven: false,
            pending_since: None,
            queue: Vec::new(),
            queued: 0,
            spare: Vec::new(),
        };
        d.reserve(1 << 20);
        d
    }

    /// Makes the aligned window at least `need` bytes long, keeping its data.
    pub(super) fn reserve(&mut self, need: usize) {
        if self.start < self.mem.len() && self.mem.len() >= self.start + need {
            return;
        }
        let cap = need.next_multiple_of(1 << 20);
        // Written with O_DIRECT: on huge pages, as the block buffers (`capsule_sys::huge`).
        let mut mem = capsule_sys::huge::zeroed_vec(cap + DIRECT_ALIGN);
        let start = mem.as_ptr().align_offset(DIRECT_ALIGN);
        if self.fill > 0 {
            mem[start..start + self.fill]
                .copy_from_slice(&self.mem[self.start..self.start + self.fill]);
        }
        self.mem = mem;
        self.start = start;
    }

    /// Appends `parts` behind the data in the window, to be written by [`Direct::flush`].
    pub(super) fn stage(&mut self, parts: &[&[u8]]) {
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

    /// [`Direct::stage`] of `parts`, returning their crc32c ([`crate::format`]'s frame
    /// checksum, continued from `crc`). The checksum is taken from each piece just copied,
    /// while it is still in the cache: one pass over the block instead of a copy here and a
    /// checksum pass on another thread, which had to fetch the whole block from memory.
    pub(super) fn stage_crc(&mut self, parts: &[&[u8]], crc: u32) -> u32 {
        let n: usize = parts.iter().map(|p| p.len()).sum();
        self.reserve((self.fill + n).next_multiple_of(DIRECT_ALIGN));
        let mut at = self.start + self.fill;
        let mut sum = crate::crc::Crc32c::resume(crc);
        for p in parts {
            for piece in p.chunks(CRC_PIECE) {
                let dst = &mut self.mem[at..at + piece.len()];
                dst.copy_from_slice(piece);
                sum.update(dst);
                at += piece.len();
            }
        }
        if n > 0 && self.pending_since.is_none() {
            self.pending_since = Some(Instant::now());
        }
        self.fill += n;
        sum.value()
    }

    /// Overwrites staged bytes at `at` (an offset in the window, as `fill` was when they
    /// were staged) with `bytes` of the same length.
    pub(super) fn patch(&mut self, at: usize, bytes: &[u8]) {
        debug_assert!(at + bytes.len() <= self.fill, "patch past the staged bytes");
        let at = self.start + at;
        self.mem[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Bytes staged or queued, not yet written.
    pub(super) fn unwritten(&self) -> usize {
        self.queued + self.fill
    }

    /// Whether the queue is as long as one write should carry.
    pub(super) fn queue_full(&self) -> bool {
        self.unwritten() >= DIRECT_FLUSH_BYTES || self.queue.len() >= MAX_PIECES
    }

    /// The window's last partial page: what goes in front of a framed block queued now.
    pub(super) fn tail(&self) -> &[u8] {
        let t = self.fill % DIRECT_ALIGN;
        &self.mem[self.start + self.fill - t..self.start + self.fill]
    }

    /// Queues the framed block in `buf`, whose bytes from `from` (an address aligned to
    /// [`DIRECT_ALIGN`]) to `end` follow the file's logical end less the window's partial
    /// page: the caller put [`Direct::tail`] at `from`, then the block's header and frame.
    /// The window's whole pages are queued in front of it, and its own last partial page
    /// becomes the window. Returns the buffer, shared with the queue until it is written.
    pub(super) fn queue_framed(
        &mut self,
        mut buf: Vec<u8>,
        from: usize,
        end: usize,
    ) -> Arc<Vec<u8>> {
        debug_assert_eq!(buf[from..].as_ptr() as usize % DIRECT_ALIGN, 0);
        let t = self.fill % DIRECT_ALIGN;
        let whole = self.fill - t;
        if whole > 0 {
            // The window's whole pages go to the queue as they are; a spare window takes
            // their place.
            let mut mem = self.spare.pop().unwrap_or_default();
            std::mem::swap(&mut mem, &mut self.mem);
            let range = self.start..self.start + whole;
            self.queue.push(Piece::Window(mem, range));
            self.queued += whole;
            self.base += whole as u64;
            self.start = self.mem.as_ptr().align_offset(DIRECT_ALIGN);
            self.fill = 0;
            self.reserve(1 << 20);
        }
        let pages = (end - from) / DIRECT_ALIGN * DIRECT_ALIGN;
        let rest = end - from - pages;
        // The block's last partial page starts the window again.
        self.fill = 0;
        self.reserve(DIRECT_ALIGN);
        self.mem[self.start..self.start + rest].copy_from_slice(&buf[from + pages..end]);
        self.fill = rest;
        buf.truncate(end);
        let buf = Arc::new(buf);
        if pages > 0 {
            self.queue
                .push(Piece::Framed(Arc::clone(&buf), from..from + pages));
            self.queued += pages;
            self.base += pages as u64;
        }
        if self.pending_since.is_none() {
            self.pending_since = Some(Instant::now());
        }
        buf
    }

    /// Back to the state after the last successful write, whose length was `len`: the
    /// queue (whose first piece starts with the durable partial page) and what was staged
    /// are dropped, the durable partial page is the window again.
    pub(super) fn rollback(&mut self, len: u64) {
        if let Some(first) = self.queue.first() {
            let q0 = self.base - self.queued as u64;
            let keep = (len - q0) as usize;
            let head = first.bytes()[..keep].to_vec();
            self.release_queue();
            self.base = q0;
            self.fill = 0;
            self.reserve(DIRECT_ALIGN);
            self.mem[self.start..self.start + keep].copy_from_slice(&head);
            self.fill = keep;
        } else {
            self.fill = (len - self.base) as usize;
        }
        self.pending_since = None;
    }

    /// Everything queued and staged, in file order, from the queue's first page (for
    /// buffered writes when direct I/O turns out to be refused).
    pub(super) fn unwritten_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.unwritten());
        for p in &self.queue {
            out.extend_from_slice(p.bytes());
        }
        out.extend_from_slice(&self.mem[self.start..self.start + self.fill]);
        out
    }

    /// File offset of the first unwritten byte's page.
    pub(super) fn unwritten_from(&self) -> u64 {
        self.base - self.queued as u64
    }

    fn release_queue(&mut self) {
        for p in self.queue.drain(..) {
            if let Piece::Window(v, _) = p {
                self.spare.push(v);
            }
        }
        self.queued = 0;
    }

    /// Writes the queue and the window, zero-padded to a whole page, from the queue's first
    /// page; then keeps only the window's last partial page.
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        if self.pending_since.is_none() {
            return Ok(());
        }
        let at = self.fill;
        let end = at.next_multiple_of(DIRECT_ALIGN);
        self.reserve(end);
        self.mem[self.start + at..self.start + end].fill(0);
        let window = &self.mem[self.start..self.start + end];
        let from = self.base - self.queued as u64;
        let total = self.queued + end;
        let mut parts: Vec<&[u8]> = self.queue.iter().map(Piece::bytes).collect();
        parts.push(window);
        // A short write (a full disk) ends on a file system block, so the rest stays aligned
        // and the next call reports the error itself (ENOSPC, not EINVAL).
        let mut done = 0;
        while done < total {
            let r = if let [one] = &parts[..] {
                crate::durable::write_at(&self.file, one, from + done as u64)
            } else {
                let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
                crate::durable::write_vectored_at(&self.file, &slices, from + done as u64)
            };
            match r {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(k) if (done + k) % DIRECT_ALIGN == 0 || done + k == total => {
                    done += k;
                    skip(&mut parts, k);
                }
                Ok(k) => {
                    return Err(std::io::Error::other(format!(
                        "short direct write of {k} bytes at offset {}",
                        from + done as u64
                    )))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.release_queue();
        self.proven = true;
        self.pending_since = None;
        let keep = at - at % DIRECT_ALIGN;
        let w = &mut self.mem[self.start..self.start + end];
        w.copy_within(keep..at, 0);
        self.base += keep as u64;
        self.fill = at - keep;
        Ok(())
    }
}

/// Drops the first `n` bytes of `parts`.
fn skip(parts: &mut Vec<&[u8]>, mut n: usize) {
    while n > 0 {
        let Some(first) = parts.first_mut() else {
            return;
        };
        if first.len() <= n {
            n -= first.len();
            parts.remove(0);
        } else {
            *first = &first[n..];
            n = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_on_huge_pages_and_keeps_its_data_as_it_grows() {
        // The unit tests run on the binary's allocator (lib.rs). Any file will do: nothing
        // is written.
        let mut d = Direct::of(tempfile::tempfile().unwrap());
        assert!(capsule_sys::huge::is_mapped(d.mem.as_ptr()));
        assert_eq!(d.start, 0);
        d.stage(&[&[5; 3000]]);
        d.reserve(3 << 20);
        assert!(capsule_sys::huge::is_mapped(d.mem.as_ptr()));
        assert_eq!(d.mem.as_ptr() as usize % DIRECT_ALIGN, 0);
        assert!(d.mem[d.start..d.start + 3000].iter().all(|&b| b == 5));
        assert!(d.mem[d.start + 3000..].iter().all(|&b| b == 0));
    }
}
