//! The fake kernel of the unit tests: it plays the kernel's side of the AF_XDP rings and of
//! the TPACKET_V3 ring over heap memory standing in for the mappings (`Mapping::heap`),
//! with a Unix datagram socket standing in for the AF_XDP or packet socket. The ring code
//! under test is the real one, unchanged: [`XskSocket::recv`] and
//! [`PacketRing::next_block`] cannot tell heap from a mapping.
//!
//! It keeps to the kernel's side of each protocol as net/xdp/xsk_queue.h and
//! net/packet/af_packet.c do (a frame is taken from the fill ring before a packet is written
//! into it; a descriptor or a block is published with a Release store after its bytes), and
//! offers ways to break it (descriptors that point anywhere, more of them than frames taken)
//! to show that capsule does not trust it. What it cannot show is what a real kernel or
//! driver does: tests/capture_live.rs runs capture as root on veth pairs for that.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::mapping::Mapping;
use crate::tpacket::{PacketRing, RingConfig};
use crate::xsk::{Ring, XskConfig, XskMode, XskSocket};

/// Where the fake puts a ring's words and entries: each index on a cache line of its own,
/// as the kernel lays out `struct xdp_ring`.
const OFFSETS: libc::xdp_ring_offset = libc::xdp_ring_offset {
    producer: 0,
    consumer: 64,
    flags: 128,
    desc: 192,
};

/// The kernel's view of one ring: where its memory starts, and its shape.
#[derive(Debug, Clone, Copy)]
struct RingView {
    base: *mut u8,
    size: u32,
    entry: usize,
}

impl RingView {
    fn word(&self, off: u64) -> &AtomicU32 {
        // SAFETY: `off` is one of OFFSETS' index words, 4-aligned (the heap block is page
        // aligned) and inside the ring's block, which the socket owns; the socket lives as
        // long as the fake kernel holding this view (a field of the same struct). The
        // socket accesses the word only atomically too.
        unsafe { AtomicU32::from_ptr(self.base.add(off as usize).cast()) }
    }

    fn producer(&self) -> &AtomicU32 {
        self.word(OFFSETS.producer)
    }

    fn consumer(&self) -> &AtomicU32 {
        self.word(OFFSETS.consumer)
    }

    /// Entry `idx` (wrapped by the ring's mask).
    fn slot(&self, idx: u32) -> *mut u8 {
        let slot = (idx & (self.size - 1)) as usize;
        // SAFETY: the slot is below `size`, and the block holds `size` entries from `desc`.
        unsafe { self.base.add(OFFSETS.desc as usize + slot * self.entry) }
    }
}

/// A ring of `size` entries of `entry` bytes on the heap, its indexes starting at `start`.
fn heap_ring(size: u32, entry: usize, start: u32, what: &str) -> (Ring, RingView) {
    let map = Mapping::heap(Ring::map_len(&OFFSETS, size, entry));
    let view = RingView {
        base: map.ptr(),
        size,
        entry,
    };
    view.producer().store(start, Ordering::Relaxed);
    view.consumer().store(start, Ordering::Relaxed);
    let ring = Ring::over(map, &OFFSETS, size, entry, what).expect("the fake's offsets fit");
    (ring, view)
}

/// The kernel's side of one AF_XDP socket: it takes frames from the fill ring, writes
/// packets into them and publishes their descriptors on the RX ring.
#[derive(Debug)]
pub(crate) struct XdpKernel {
    /// The socket under test (declared first: nothing of the kernel's outlives it).
    pub(crate) sock: XskSocket,
    rx: RingView,
    fill: RingView,
    umem: *mut u8,
    umem_len: usize,
    /// The kernel's own copies of the indexes it owns.
    rx_producer: u32,
    fill_consumer: u32,
    /// A second handle on the socket's descriptor and its peer: a wake-up of the socket
    /// (`recvfrom`) takes one datagram the peer sent.
    own: UnixDatagram,
    peer: UnixDatagram,
}

impl XdpKernel {
    /// A socket of `cfg.frames` frames and `cfg.rx_size` RX entries, every ring index
    /// starting at `start` (near `u32::MAX` to see them wrap).
    pub(crate) fn new(cfg: &XskConfig, start: u32) -> XdpKernel {
        let (rx, rx_view) = heap_ring(cfg.rx_size, 16, start, "RX ring");
        let (fill, fill_view) = heap_ring(cfg.frames, 8, start, "fill ring");
        let (comp, _) = heap_ring(16, 8, start, "completion ring");
        let umem_len = cfg.frames as usize * cfg.frame_size as usize;
        let umem = Mapping::heap(umem_len);
        let umem_ptr = umem.ptr();
        let (own, peer) = UnixDatagram::pair().expect("a socket pair");
        own.set_nonblocking(true).expect("non-blocking");
        let fd = OwnedFd::from(own.try_clone().expect("a second handle"));
        let sock = XskSocket::over(fd, umem, [rx, fill, comp], cfg, XskMode::Copy)
            .expect("the socket over heap memory");
        XdpKernel {
            sock,
            rx: rx_view,
            fill: fill_view,
            umem: umem_ptr,
            umem_len,
            rx_producer: start,
            fill_consumer: start,
            own,
            peer,
        }
    }

    /// Receives `bytes` as the kernel does: takes the next frame from the fill ring, writes
    /// `record` (if any) and then `bytes` into it at `at` bytes from its start, and publishes
    /// the descriptor. `None`, and nothing taken, when the fill ring is empty or the RX ring
    /// full (the kernel counts a drop). Returns the descriptor's address.
    pub(crate) fn receive(
        &mut self,
        at: usize,
        record: Option<&[u8]>,
        bytes: &[u8],
        options: u32,
    ) -> Option<u64> {
        let rx_full = self
            .rx_producer
            .wrapping_sub(self.rx.consumer().load(Ordering::Acquire))
            >= self.rx.size;
        let fill_empty = self.fill.producer().load(Ordering::Acquire) == self.fill_consumer;
        if rx_full || fill_empty {
            return None;
        }
        // SAFETY: the slot is between the fill consumer and the Acquire-loaded producer, so
        // capsule wrote it before publishing it; an 8-byte entry inside the ring's block.
        let frame = unsafe {
            self.fill
                .slot(self.fill_consumer)
                .cast::<u64>()
                .read_unaligned()
        };
        self.fill_consumer = self.fill_consumer.wrapping_add(1);
        self.fill
            .consumer()
            .store(self.fill_consumer, Ordering::Release);
        if let Some(record) = record {
            self.write(frame + (at - record.len()) as u64, record);
        }
        self.write(frame + at as u64, bytes);
        let addr = frame + at as u64;
        assert!(self.publish(addr, bytes.len() as u32, options));
        Some(addr)
    }

    /// Publishes an RX descriptor as given, whatever it points at (a lying kernel too);
    /// false when the RX ring is full.
    pub(crate) fn publish(&mut self, addr: u64, len: u32, options: u32) -> bool {
        let used = self
            .rx_producer
            .wrapping_sub(self.rx.consumer().load(Ordering::Acquire));
        if used >= self.rx.size {
            return false;
        }
        let desc = libc::xdp_desc { addr, len, options };
        // SAFETY: the slot is outside what capsule may read (past the producer), a 16-byte
        // entry inside the ring's block; published by the Release store below.
        unsafe {
            self.rx
                .slot(self.rx_producer)
                .cast::<libc::xdp_desc>()
                .write_unaligned(desc)
        };
        self.rx_producer = self.rx_producer.wrapping_add(1);
        self.rx
            .producer()
            .store(self.rx_producer, Ordering::Release);
        true
    }

    /// Writes `bytes` into the UMEM at `addr`.
    fn write(&mut self, addr: u64, bytes: &[u8]) {
        assert!(
            addr as usize + bytes.len() <= self.umem_len,
            "inside the UMEM"
        );
        // SAFETY: the range was just checked to lie inside the UMEM block, which the socket
        // owns and reads only inside `recv` (not running now: this takes `&mut self`).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.umem.add(addr as usize), bytes.len())
        };
    }

    /// The frame addresses capsule has put on the fill ring that the kernel has not taken.
    pub(crate) fn fill_ring(&self) -> Vec<u64> {
        let produced = self.fill.producer().load(Ordering::Acquire);
        let n = produced.wrapping_sub(self.fill_consumer);
        assert!(n <= self.fill.size, "capsule overfilled the fill ring: {n}");
        (0..n)
            .map(|i| {
                let slot = self.fill.slot(self.fill_consumer.wrapping_add(i));
                // SAFETY: published by capsule (before its Acquire-loaded producer).
                unsafe { slot.cast::<u64>().read_unaligned() }
            })
            .collect()
    }

    /// Sets or clears the fill ring's need-wakeup flag, as the kernel does when it ran out of
    /// frames.
    pub(crate) fn need_wakeup(&self, on: bool) {
        let flag = if on { libc::XDP_RING_NEED_WAKEUP } else { 0 };
        self.fill.word(OFFSETS.flags).store(flag, Ordering::Relaxed);
    }

    /// Queues `n` datagrams on the socket, for `wakeups` to count down.
    pub(crate) fn queue_datagrams(&self, n: usize) {
        for _ in 0..n {
            self.peer.send(b"x").expect("a datagram queued");
        }
    }

    /// The datagrams still queued on the socket (taking them): those queued less the
    /// wake-ups capsule made since.
    pub(crate) fn take_datagrams(&self) -> usize {
        let mut buf = [0u8; 4];
        std::iter::from_fn(|| self.own.recv(&mut buf).ok()).count()
    }
}

/// The kernel's side of a TPACKET_V3 ring: it fills blocks in order and hands each over by
/// its status word.
#[derive(Debug)]
pub(crate) struct TpacketKernel {
    /// The ring under test (declared first: nothing of the kernel's outlives it).
    pub(crate) ring: PacketRing,
    base: *mut u8,
    block_size: usize,
    block_nr: usize,
    /// The next block the kernel fills.
    next: usize,
    /// The other end of the ring's stand-in socket, kept open.
    _peer: UnixDatagram,
}

impl TpacketKernel {
    /// A ring of `block_nr` blocks of 4 KiB.
    pub(crate) fn new(block_nr: u32) -> TpacketKernel {
        let cfg = RingConfig {
            block_size: 4096,
            block_nr,
            ..RingConfig::default()
        };
        let map = Mapping::heap(4096 * block_nr as usize);
        let base = map.ptr();
        let (sock, peer) = UnixDatagram::pair().expect("a socket pair");
        let ring = PacketRing::over(map, OwnedFd::from(sock), &cfg);
        TpacketKernel {
            ring,
            base,
            block_size: 4096,
            block_nr: block_nr as usize,
            next: 0,
            _peer: peer,
        }
    }

    /// The status word of block `i`.
    pub(crate) fn status(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.block_nr);
        // SAFETY: offset 8 of a page-aligned block inside the ring's heap block, which the
        // ring owns and which lives as long as `self`; accessed atomically on both sides.
        unsafe { AtomicU32::from_ptr(self.base.add(i * self.block_size + 8).cast()) }
    }

    /// Writes `block` (its status word left to this function) into the next block and hands
    /// it over; false, and nothing written, when capsule still holds that block (the ring is
    /// full: the kernel drops, and counts a freeze).
    pub(crate) fn hand_over(&mut self, block: &[u8]) -> bool {
        assert!(block.len() <= self.block_size);
        let i = self.next;
        if self.status(i).load(Ordering::Acquire) != libc::TP_STATUS_KERNEL {
            return false;
        }
        let start = i * self.block_size;
        // SAFETY: block `i` lies inside the heap block; capsule gave it back (status read
        // above with Acquire) and reads it again only after the Release store below. The
        // status word itself (bytes 8..12) is not written here.
        unsafe {
            let dst = self.base.add(start);
            std::ptr::copy_nonoverlapping(block.as_ptr(), dst, 8);
            std::ptr::copy_nonoverlapping(block.as_ptr().add(12), dst.add(12), block.len() - 12);
        }
        self.status(i)
            .store(libc::TP_STATUS_USER, Ordering::Release);
        self.next = (i + 1) % self.block_nr;
        true
    }
}

/// How long a test waits for a ring that has nothing: long enough to be a real wait, short
/// enough not to slow the tests.
pub(crate) const NOTHING_WAIT: Duration = Duration::from_millis(20);
