//! [`Mapping`]: the memory the rings live in, mapped from a socket (a packet ring, an AF_XDP
//! ring) or fresh and anonymous (an AF_XDP UMEM), unmapped when dropped. In unit tests, an
//! ordinary heap block can stand in for it (`Mapping::heap`), so the ring code runs
//! unchanged against the fake kernel (`fake.rs`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::error::check_map;
use crate::huge;

/// Where a mapping's memory came from, and so how it is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// `mmap`: `munmap` gives it back.
    Mapped,
    /// The heap (unit tests): allocated with [`Mapping::heap_layout`].
    #[cfg(test)]
    Heap,
}

/// A memory mapping at an address the kernel chose, unmapped when dropped.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
}

impl Mapping {
    /// Maps `len` bytes of what the kernel allocated for socket `fd` at page offset `pgoff` (a
    /// packet ring, an AF_XDP ring), shared with the kernel. `what` names it in the error
    /// (`mmap of {what}: ...`).
    pub(crate) fn socket(
        fd: &OwnedFd,
        len: usize,
        pgoff: libc::off_t,
        what: &str,
    ) -> io::Result<Mapping> {
        Mapping::new(len, libc::MAP_SHARED, fd.as_raw_fd(), pgoff, what)
    }

    /// `len` bytes of fresh private anonymous memory (an AF_XDP UMEM), on 2 MiB boundaries
    /// and advised to use transparent huge pages before it is touched (where the kernel has
    /// them; otherwise 4 KiB pages). The reader walks thousands of UMEM frames, and with
    /// 4 KiB pages every other one was a TLB miss: huge pages took 10% off a store-rung
    /// capture's samples at the sender's ceiling (`perf record`, 5.18 M packets: 5,417 and
    /// 5,523 before, 4,928 and 4,911 after).
    pub(crate) fn anonymous(len: usize, what: &str) -> io::Result<Mapping> {
        let ptr = huge::map_aligned(len).map_err(|e| e.with_context(format!("of {what}")))?;
        // SAFETY: advice on the mapping just made, which this function owns.
        // MADV_POPULATE_WRITE (Linux 5.14) faults the pages in now, as MAP_POPULATE did;
        // refused, the kernel faults them in as the UMEM is registered (it pins them), so
        // its return is not checked.
        unsafe {
            libc::madvise(ptr.cast(), len, libc::MADV_POPULATE_WRITE);
        }
        Ok(Mapping {
            ptr,
            len,
            backing: Backing::Mapped,
        })
    }

    fn new(
        len: usize,
        flags: libc::c_int,
        fd: RawFd,
        pgoff: libc::off_t,
        what: &str,
    ) -> io::Result<Mapping> {
        // SAFETY: asks for a new mapping at an address of the kernel's choosing (null hint, no
        // MAP_FIXED), so no existing memory is affected. With a socket the kernel maps the
        // ring it allocated for that descriptor and refuses a length or offset beyond it;
        // the result is checked against MAP_FAILED.
        let ret = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        let ptr = check_map("mmap", ret).map_err(|e| e.with_context(format!("of {what}")))?;
        Ok(Mapping {
            ptr,
            len,
            backing: Backing::Mapped,
        })
    }

    /// The first byte of the mapping; valid for `len()` bytes while `self` lives.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
impl Mapping {
    /// The layout of a heap stand-in of `len` bytes: page-aligned, as a mapping is.
    fn heap_layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(1), 4096).expect("a test-sized block")
    }

    /// `len` zeroed bytes of the heap standing in for a mapping (unit tests: the fake
    /// kernel's rings and UMEM), page-aligned as a mapping is, freed when dropped.
    pub(crate) fn heap(len: usize) -> Mapping {
        let layout = Mapping::heap_layout(len);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Mapping {
            ptr,
            len,
            backing: Backing::Heap,
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: `ptr`/`len` are the mapping made in `new` or `anonymous`, unmapped
            // exactly once, here; every view into it borrows its owner (the ring or socket
            // holding this value), so none outlives it. A failed munmap (never expected for
            // a whole mapping) could only leave the memory mapped, so it is not checked.
            Backing::Mapped => unsafe {
                libc::munmap(self.ptr.cast(), self.len);
            },
            // SAFETY: `ptr` came from `alloc_zeroed` with this very layout (`heap`), and is
            // freed once, here; nothing borrows it past its owner, as above.
            #[cfg(test)]
            Backing::Heap => unsafe {
                std::alloc::dealloc(self.ptr, Mapping::heap_layout(self.len));
            },
        }
    }
}
