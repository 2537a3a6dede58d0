//! The `capsule` binary's global allocator: large allocations on transparent huge pages.
//!
//! A live capture at the store rung writes its blocks with O_DIRECT, from the block buffers
//! the producer filled (a little over 1 MiB each). The kernel pins every page of a buffer
//! for each write: on 4 KiB pages that was 4% of the capture's CPU (`gup_fast_fallback`
//! under `pwritev`), a page-table walk and a reference count per page. On a 2 MiB huge page
//! it is one walk and one count per 2 MiB.
//!
//! With THP in the usual `madvise` mode only memory advised `MADV_HUGEPAGE` gets huge
//! pages, and glibc's malloc advises nothing unless a tunable set before the process
//! started asks it to (and then only for chunks of 2 MiB and more). So allocations of at
//! least [`LARGE`] bytes are mapped here: their own anonymous mapping, 2 MiB-aligned, its
//! length rounded up to whole 2 MiB, advised `MADV_HUGEPAGE` before it is touched;
//! deallocation unmaps it. Everything smaller goes to the system allocator, unchanged.
//!
//! The cost is the rounding: a 1.08 MiB block buffer takes 2 MiB (of which only what is
//! touched is backed when THP is off or no huge page is free, the kernel then falling back
//! to 4 KiB pages). Large allocations are few (block buffers, index tables, whole files
//! read at once), and freed memory goes back to the system at once, as glibc does for its
//! own mapped chunks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;

use crate::error::{check_map, SysError};

/// Allocations of at least this many bytes get huge pages.
pub const LARGE: usize = 1 << 20;
/// The huge page size of x86-64 and of arm64 with 4 KiB pages.
pub(crate) const HUGE: usize = 2 << 20;

/// See the module docs. Install with `#[global_allocator]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct HugeAlloc;

/// Whether a layout is served by a mapping of its own: large, and an alignment a 2 MiB
/// boundary satisfies.
fn mapped(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= HUGE
}

/// The length of the mapping that serves `size` bytes (`size` is at least [`LARGE`]).
fn mapping_len(size: usize) -> Option<usize> {
    size.checked_add(HUGE - 1).map(|s| s & !(HUGE - 1))
}

/// Maps `len` bytes of fresh private anonymous memory (zeroed) on a [`HUGE`] boundary and
/// advises it `MADV_HUGEPAGE` before anything touches it: where the kernel has transparent
/// huge pages (in `madvise` or `always` mode) the first touch of each 2 MiB then gets a huge
/// page; elsewhere the advice is refused and the pages are 4 KiB. The memory is the
/// caller's to unmap (`munmap(ptr, len)`). Makes no allocation, so the global allocator can
/// use it; the error names the `mmap`.
pub(crate) fn map_aligned(len: usize) -> Result<*mut u8, SysError> {
    let Some(total) = len.checked_add(HUGE) else {
        return Err(SysError::new(
            "mmap",
            std::io::Error::from_raw_os_error(libc::ENOMEM),
        ));
    };
    // SAFETY: a new private anonymous mapping at an address of the kernel's choosing (null
    // hint, no MAP_FIXED): no existing memory is affected. Checked against MAP_FAILED.
    let raw = unsafe {
        libc::mmap(
            ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    let raw = check_map("mmap", raw)?;
    let start = raw as usize;
    let aligned = start.next_multiple_of(HUGE);
    let head = aligned - start;
    let tail = total - head - len;
    // SAFETY: `start..aligned` and `aligned+len..start+total` lie inside the mapping just
    // made, which nothing else refers to yet; unmapping them leaves exactly
    // `aligned..aligned+len`. madvise on that range only changes how the kernel backs it (a
    // hint; refused without transparent huge pages, which leaves 4 KiB pages, so its return
    // is not checked).
    unsafe {
        if head > 0 {
            libc::munmap(raw.cast(), head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    Ok(aligned as *mut u8)
}

/// A mapping for `size` bytes (at least [`LARGE`]) for the allocator: null on failure.
fn map(size: usize) -> *mut u8 {
    match mapping_len(size) {
        Some(len) => map_aligned(len).unwrap_or(ptr::null_mut()),
        None => ptr::null_mut(),
    }
}

// SAFETY: every block handed out is either the system allocator's (small or over-aligned
// layouts, returned to it) or a mapping of its own of at least the layout's size, aligned
// to 2 MiB (so to any alignment `mapped` accepts), unmapped only by `dealloc` with the
// layout it was allocated with, whose size rounds to the same mapping length. `realloc`
// keeps that pairing: a block stays where it is only while its new size rounds to its
// mapping's length, and otherwise moves between the two kinds by alloc, copy and dealloc.
unsafe impl GlobalAlloc for HugeAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !mapped(layout) {
            // SAFETY: the caller's contract (a non-zero size) is passed on unchanged.
            return unsafe { System.alloc(layout) };
        }
        map(layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !mapped(layout) {
            // SAFETY: as in `alloc`.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // A fresh anonymous mapping reads as zeros.
        map(layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !mapped(layout) {
            // SAFETY: `ptr` came from `System` with this layout (see `alloc`).
            return unsafe { System.dealloc(ptr, layout) };
        }
        if let Some(len) = mapping_len(layout.size()) {
            // SAFETY: `ptr` is the start of a mapping `alloc` made of exactly `len` bytes for
            // this layout's size, and the caller gives it up.
            unsafe {
                libc::munmap(ptr.cast(), len);
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid
        // layout (non-zero, not overflowing when rounded to the alignment).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (mapped(layout), mapped(new_layout)) {
            // SAFETY: both sizes are the system allocator's; the caller's contract holds.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) if mapping_len(layout.size()) == mapping_len(new_size) => ptr,
            _ => {
                // SAFETY: `new_layout` is valid (above); the old block is `layout.size()`
                // bytes long, the new one `new_size`; the copy takes the smaller, the two
                // do not overlap (the new one is fresh), and the old one is freed with the
                // layout it was allocated with.
                unsafe {
                    let new = self.alloc(new_layout);
                    if !new.is_null() {
                        ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    new
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_aligned_zeroed_and_survive_growth_and_shrinking() {
        let a = HugeAlloc;
        let layout = Layout::from_size_align(LARGE + 100, 8).unwrap();
        // SAFETY: test of the allocator's contract; every block is freed with its layout.
        unsafe {
            let p = a.alloc_zeroed(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % HUGE, 0);
            assert!(std::slice::from_raw_parts(p, layout.size())
                .iter()
                .all(|&b| b == 0));
            p.write_bytes(0xab, layout.size());
            // Within the mapping: in place.
            let q = a.realloc(p, layout, HUGE);
            assert_eq!(q, p);
            // Beyond it: moved, contents kept.
            let big = Layout::from_size_align(HUGE, 8).unwrap();
            let r = a.realloc(q, big, 3 * HUGE + 1);
            assert!(!r.is_null());
            assert_eq!(*r.add(layout.size() - 1), 0xab);
            // Back below LARGE: to the system allocator, contents kept.
            let bigger = Layout::from_size_align(3 * HUGE + 1, 8).unwrap();
            let s = a.realloc(r, bigger, 4096);
            assert!(!s.is_null());
            assert_eq!(*s.add(4095), 0xab);
            a.dealloc(s, Layout::from_size_align(4096, 8).unwrap());
        }
    }

    #[test]
    fn vectors_across_the_threshold_keep_their_bytes() {
        let mut v: Vec<u8> = Vec::new();
        for i in 0..(3 * LARGE) {
            v.push(i as u8);
        }
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(v, (0..10u8).collect::<Vec<_>>());
    }
}
