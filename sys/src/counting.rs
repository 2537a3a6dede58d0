//! A global allocator for tests that counts the allocations each thread makes, so that a
//! test can assert that a hot path allocates nothing in its steady state (a claim a
//! benchmark shows only as time, and only on a quiet machine).
//!
//! Every call goes to [`HugeAlloc`] (the binary's allocator) unchanged, so buffers that ask
//! for huge pages get them here too; `alloc`, `alloc_zeroed` and a `realloc` that grows
//! count one each on the calling thread.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

use crate::HugeAlloc;

thread_local! {
    // Const-initialized and without a destructor: reading it never allocates, so the
    // allocator may touch it.
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

/// See the module docs. Install with `#[global_allocator]` in a test binary.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

/// Allocations made so far by the calling thread (through [`CountingAlloc`]).
pub fn allocations() -> u64 {
    COUNT.with(Cell::get)
}

fn counted() {
    // `try_with`: during a thread's teardown the slot may be gone; that allocation is not
    // counted.
    let _ = COUNT.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is passed unchanged to `HugeAlloc`, whose contract is the same; the
// counting touches a const-initialized thread-local cell and allocates nothing.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { HugeAlloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: as in `alloc`.
        unsafe { HugeAlloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `HugeAlloc` (through this type) with this layout.
        unsafe { HugeAlloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            counted();
        }
        // SAFETY: as in `dealloc`; the caller's contract on `new_size` is passed on.
        unsafe { HugeAlloc.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_counts_its_own_allocations() {
        // The unit tests of this crate run on HugeAlloc, not this: only the counter moves
        // when called, so this checks the counter alone.
        let before = super::allocations();
        super::counted();
        super::counted();
        assert_eq!(super::allocations(), before + 2);
        let other = std::thread::spawn(super::allocations).join().unwrap();
        assert_eq!(other, 0);
    }
}
