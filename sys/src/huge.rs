//! The `capsule` binary's global allocator: the system allocator, except for the few large
//! buffers that asked for transparent huge pages.
//!
//! A live capture at the store rung writes its blocks with O_DIRECT, from the block buffers
//! the producer filled (a little over 1 MiB each), and the direct writer's window. The
//! kernel pins every page of a buffer for each write: on 4 KiB pages that was 4% of the
//! capture's CPU (`gup_fast_fallback` under `pwritev`), a page-table walk and a reference
//! count per page. On a 2 MiB huge page it is one walk and one count per 2 MiB; the copy of
//! each packet into its block also stops missing the TLB every 4 KiB.
//!
//! With THP in the usual `madvise` mode only memory advised `MADV_HUGEPAGE` gets huge
//! pages, and glibc's malloc advises nothing unless a tunable set before the process
//! started asks it to (and then only for chunks of 2 MiB and more). So a buffer made by
//! [`vec_with_capacity`] or [`zeroed_vec`] (of at least [`LARGE`] bytes, under
//! [`HugeAlloc`]) is mapped here: its own anonymous mapping, 2 MiB-aligned, its length
//! rounded up to whole 2 MiB, advised `MADV_HUGEPAGE` before it is touched; freeing it
//! unmaps it, and growing it past its mapping moves it to a new one.
//!
//! Everything else goes to the system allocator, large allocations included. An earlier
//! version mapped every allocation of 1 MiB or more this way, and the questions
//! (`query`, `top`, the fleet's) paid for it: a vector growing past 1 MiB was mapped anew,
//! copied and unmapped at each doubling, and each fresh huge page was zeroed whole by the
//! kernel at its first touch (16-25% of `capsule top`'s CPU), where glibc grows its own
//! mapped chunks with `mremap` (no copy) and reuses freed heap memory.
//!
//! How a block finds its way back: `dealloc` and `realloc` are called from any thread with
//! nothing but the pointer and the layout, and a block must go back to whoever served it
//! (unmapping glibc's memory, or handing a mapping to `free`, is undefined behaviour). So
//! the mapped blocks are listed in a fixed table of addresses ([`SLOTS`] of them, no
//! allocation): a block is entered before the allocator returns it and taken out before
//! it is unmapped, so a pointer found in the table is a live mapping of ours, and one not
//! found is the system allocator's (a live glibc block cannot share the address of a live
//! mapping). Only large layouts are looked up, and only as far as the table has ever been
//! filled: in a process that never asked, nothing is scanned. The request itself is a flag
//! of the calling thread, set only for the one allocation [`vec_with_capacity`] or
//! [`zeroed_vec`] makes, so that the buffer is an ordinary `Vec<u8>` (every pcapng writer
//! takes one) and the functions are sound under any global allocator (under another one
//! the flag is ignored and the vector is an ordinary one).
//!
//! The cost is the rounding: a 1.08 MiB block buffer takes 2 MiB (of which only what is
//! touched is backed when THP is off or no huge page is free, the kernel then falling back
//! to 4 KiB pages), and its memory goes back to the system when it is freed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{check_map, SysError};

/// Buffers asked for with at least this many bytes get huge pages (smaller ones are the
/// system allocator's whatever was asked).
pub const LARGE: usize = 1 << 20;
/// The huge page size of x86-64 and of arm64 with 4 KiB pages.
pub(crate) const HUGE: usize = 2 << 20;
/// Mapped blocks that can be live at once; past that, a request is served by the system
/// allocator (a capture holds a few dozen: its block buffers and direct windows).
pub const SLOTS: usize = 1024;

/// A table slot being filled (never a mapping's address, which is 2 MiB-aligned).
const CLAIMED: usize = 1;

/// The addresses of the live mapped blocks (0: a free slot).
static TABLE: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// One past the highest slot ever claimed: lookups scan no further.
static HIGH: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialized and without a destructor: reading it never allocates, so the
    // allocator may touch it.
    static ASKED: Cell<bool> = const { Cell::new(false) };
}

/// See the module docs. Install with `#[global_allocator]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct HugeAlloc;

/// An empty vector with room for `capacity` bytes, on a mapping of its own advised
/// `MADV_HUGEPAGE` when `capacity` is at least [`LARGE`] and the global allocator is
/// [`HugeAlloc`] (otherwise an ordinary `Vec::with_capacity`). For buffers written with
/// O_DIRECT or filled at line rate; see the module docs.
pub fn vec_with_capacity(capacity: usize) -> Vec<u8> {
    asked(|| Vec::with_capacity(capacity))
}

/// `len` zero bytes, on a mapping of its own as [`vec_with_capacity`]'s (a fresh mapping
/// reads as zeros: nothing is written, no page is touched).
pub fn zeroed_vec(len: usize) -> Vec<u8> {
    asked(|| vec![0u8; len])
}

/// Whether `p` is the start of a block on a mapping of its own (for tests and checks).
pub fn is_mapped(p: *const u8) -> bool {
    find(p as usize).is_some()
}

/// Runs `f` (which makes one allocation) with the calling thread's request set.
fn asked<T>(f: impl FnOnce() -> T) -> T {
    /// Restores the flag even if `f` panics (a capacity overflow).
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = ASKED.try_with(|a| a.set(self.0));
        }
    }
    let _restore = Restore(ASKED.try_with(|a| a.replace(true)).unwrap_or(false));
    f()
}

/// Whether the calling thread asked for huge pages (`try_with`: during a thread's teardown
/// the slot may be gone; then it did not).
fn wanted() -> bool {
    ASKED.try_with(Cell::get).unwrap_or(false)
}

/// Claims a free slot of the table, `None` when all are taken.
fn claim() -> Option<usize> {
    for (i, slot) in TABLE.iter().enumerate() {
        if slot.load(Ordering::Relaxed) == 0
            && slot
                .compare_exchange(0, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            HIGH.fetch_max(i + 1, Ordering::AcqRel);
            return Some(i);
        }
    }
    None
}

/// The slot holding `addr`, if it is a live mapped block's. The block's entry was written
/// before the allocator returned it, which happened before whoever holds the pointer now
/// got it, so this load sees it (and `HIGH` at least as far); nobody but the block's owner
/// changes its slot.
fn find(addr: usize) -> Option<usize> {
    let high = HIGH.load(Ordering::Acquire);
    TABLE[..high]
        .iter()
        .position(|slot| slot.load(Ordering::Acquire) == addr)
}

/// Whether a layout could be a mapped block's: large, and an alignment a 2 MiB boundary
/// satisfies. Only these are looked up in the table.
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

/// A mapped block of `size` bytes (at least [`LARGE`]), entered in the table; `None` when
/// the table is full or the kernel refuses (the caller falls back to the system allocator).
fn map(size: usize) -> Option<*mut u8> {
    let len = mapping_len(size)?;
    let slot = claim()?;
    match map_aligned(len) {
        Ok(p) => {
            TABLE[slot].store(p as usize, Ordering::Release);
            Some(p)
        }
        Err(_) => {
            TABLE[slot].store(0, Ordering::Release);
            None
        }
    }
}

/// Unmaps the mapped block at `ptr` of `size` bytes, entered in `slot`.
///
/// # Safety
///
/// `slot` holds `ptr`, a block [`map`] made for `size` (or for a size with the same
/// mapping length), which the caller gives up.
unsafe fn unmap(slot: usize, ptr: *mut u8, size: usize) {
    // Out of the table first: once unmapped, the address may be the system allocator's (an
    // `mmap` that reuses the range returns after this `munmap`, which the kernel's lock on
    // the address space orders after this store), and a later free of that block must not
    // find it here.
    TABLE[slot].store(0, Ordering::Release);
    if let Some(len) = mapping_len(size) {
        // SAFETY: `ptr` is the start of a mapping of exactly `len` bytes (the caller's
        // contract), which nothing uses any more.
        unsafe {
            libc::munmap(ptr.cast(), len);
        }
    }
}

// SAFETY: a block handed out is either the system allocator's or a mapping of its own of at
// least the layout's size, aligned to 2 MiB (so to any alignment `mapped` accepts), entered
// in the table before it is returned. `dealloc` and `realloc` tell the two apart by the
// table (a live mapping's address cannot be a live system block's), so each block goes back
// to whoever served it, from any thread; a mapping is taken out of the table before it is
// unmapped, and unmapped with the length its layout's size rounds to. `realloc` keeps that
// pairing: a mapped block stays where it is only while its new size rounds to its
// mapping's length, and otherwise moves (to a new mapping while it stays large, else to
// the system allocator) by alloc, copy and unmap; a system block is the system's to grow.
unsafe impl GlobalAlloc for HugeAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(layout) && wanted() {
            if let Some(p) = map(layout.size()) {
                return p;
            }
        }
        // SAFETY: the caller's contract (a non-zero size) is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(layout) && wanted() {
            // A fresh anonymous mapping reads as zeros.
            if let Some(p) = map(layout.size()) {
                return p;
            }
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(layout) {
            if let Some(slot) = find(ptr as usize) {
                // SAFETY: the table says `ptr` is a mapping `map` made, for this layout's
                // size (or one that rounds alike, see `realloc`); the caller gives it up.
                return unsafe { unmap(slot, ptr, layout.size()) };
            }
        }
        // SAFETY: not in the table, so `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let slot = if mapped(layout) {
            find(ptr as usize)
        } else {
            None
        };
        let Some(slot) = slot else {
            // SAFETY: a system block (not in the table); the caller's contract holds.
            return unsafe { System.realloc(ptr, layout, new_size) };
        };
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid
        // layout (non-zero, not overflowing when rounded to the alignment).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let stays = mapped(new_layout);
        if stays && mapping_len(layout.size()) == mapping_len(new_size) {
            return ptr;
        }
        let new = match stays.then(|| map(new_size)).flatten() {
            Some(p) => p,
            // SAFETY: `new_layout` is valid (above).
            None => unsafe { System.alloc(new_layout) },
        };
        if !new.is_null() {
            // SAFETY: the old block is `layout.size()` bytes long, the new one `new_size`;
            // the copy takes the smaller, and the two do not overlap (the new one is
            // fresh). The old block is in `slot`, made for `layout.size()`, and given up.
            unsafe {
                ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                unmap(slot, ptr, layout.size());
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The tests that check the table (an address freed by one must not be mapped anew by
    /// another in between) run one at a time. The crate's unit tests run on [`HugeAlloc`].
    static TABLE_TESTS: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        TABLE_TESTS.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn large_vectors_nobody_asked_for_are_the_system_allocators() {
        let _g = serial();
        // The questions' case: vectors past 1 MiB, grown by doubling.
        let mut vs: Vec<Vec<u8>> = (0..4).map(|_| Vec::with_capacity(3 * LARGE)).collect();
        for v in &mut vs {
            assert!(!is_mapped(v.as_ptr()));
            v.resize(5 * LARGE, 7);
            assert!(!is_mapped(v.as_ptr()));
        }
        // glibc's blocks start past a chunk header: a mapping of ours is 2 MiB-aligned.
        assert!(vs
            .iter()
            .any(|v| !(v.as_ptr() as usize).is_multiple_of(HUGE)));
        assert!(vs.iter().all(|v| v.iter().all(|&b| b == 7)));
    }

    #[test]
    fn asked_buffers_are_mapped_aligned_zeroed_and_stay_mapped_as_they_grow() {
        let _g = serial();
        let mut v = zeroed_vec(LARGE + 100);
        let p = v.as_ptr();
        assert!(is_mapped(p));
        assert_eq!(p as usize % HUGE, 0);
        assert!(v.iter().all(|&b| b == 0));
        v.fill(0xab);
        // Within the mapping: in place.
        v.reserve_exact(HUGE - v.len());
        assert_eq!(v.as_ptr(), p);
        // Beyond it: a new mapping, contents kept, the old one out of the table.
        v.reserve_exact(3 * HUGE);
        let q = v.as_ptr();
        assert_ne!(q, p);
        assert!(is_mapped(q) && !is_mapped(p));
        assert_eq!(q as usize % HUGE, 0);
        assert!(v.iter().all(|&b| b == 0xab));
        // Below LARGE: to the system allocator, contents kept.
        v.truncate(4096);
        v.shrink_to_fit();
        assert!(!is_mapped(v.as_ptr()) && !is_mapped(q));
        assert!(v.iter().all(|&b| b == 0xab));

        let w = vec_with_capacity(LARGE);
        assert!(is_mapped(w.as_ptr()));
        drop(w);
        // Small ones are the system's whatever was asked.
        let s = vec_with_capacity(LARGE - 1);
        assert!(!is_mapped(s.as_ptr()));
        // The request was for that one allocation only.
        let plain: Vec<u8> = Vec::with_capacity(2 * LARGE);
        assert!(!is_mapped(plain.as_ptr()));
    }

    #[test]
    fn a_buffer_freed_on_another_thread_goes_back_to_its_mapping() {
        let _g = serial();
        let mut v = vec_with_capacity(LARGE);
        v.extend_from_slice(&[1; 1000]);
        let p = v.as_ptr() as usize;
        assert!(is_mapped(p as *const u8));
        // Grown and freed on another thread, as the writer hands blocks to its own.
        let q = std::thread::spawn(move || {
            v.resize(3 * HUGE, 2);
            let q = v.as_ptr() as usize;
            assert!(is_mapped(q as *const u8));
            q
        })
        .join()
        .unwrap();
        assert!(!is_mapped(p as *const u8) && !is_mapped(q as *const u8));
    }

    #[test]
    fn a_full_table_hands_requests_to_the_system_allocator() {
        let _g = serial();
        let mut claimed = Vec::new();
        while let Some(slot) = claim() {
            claimed.push(slot);
        }
        let v = zeroed_vec(2 * LARGE);
        assert!(!is_mapped(v.as_ptr()));
        assert!(v.iter().all(|&b| b == 0));
        for slot in claimed {
            TABLE[slot].store(0, Ordering::Release);
        }
        drop(v);
        let w = vec_with_capacity(LARGE);
        assert!(is_mapped(w.as_ptr()));
    }

    #[test]
    fn vectors_across_the_threshold_keep_their_bytes() {
        let _g = serial();
        for start in [Vec::new(), vec_with_capacity(LARGE)] {
            let mut v = start;
            for i in 0..(3 * LARGE) {
                v.push(i as u8);
            }
            v.truncate(10);
            v.shrink_to_fit();
            assert_eq!(v, (0..10u8).collect::<Vec<_>>());
        }
    }
}
