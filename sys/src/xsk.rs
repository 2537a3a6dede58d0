//! AF_XDP sockets: UMEM, fill and RX rings (the `bpf_link` that attaches the XDP program is in
//! [`crate::link`]).
//!
//! One socket serves one RX queue. Its UMEM is one anonymous mapping cut into `frames`
//! frames of `frame_size` bytes (2048 or 4096). Four single-producer single-consumer rings
//! are shared with the kernel through `mmap` of the socket:
//!
//! ```text
//!   fill ring (capsule produces free frame addresses, kernel consumes)
//!     -> kernel writes a packet into the frame (its metadata record just before it)
//!   RX ring  (kernel produces {addr, len, options}, capsule consumes)
//!     -> capsule reads the packet (joining multi-buffer fragments), then gives the frame
//!        straight back through the fill ring
//!   completion ring: required by bind, unused (capsule never transmits)
//! ```
//!
//! There are exactly as many frames as fill-ring slots and every frame is put back on the fill
//! ring as soon as it has been read, so the fill ring always has room for what capsule
//! returns, and the kernel always has every frame capsule is not reading at that moment.
//!
//! Memory ordering (kernel: net/xdp/xsk_queue.h, whose comments give the same pairing):
//! * RX ring: the kernel writes descriptors, then `smp_store_release(producer)`. capsule loads
//!   the producer with `Acquire`, so the descriptors and the packet bytes they point at are
//!   visible. capsule stores the consumer with `Release` after its last read of those
//!   descriptors; the kernel loads it with `smp_load_acquire` before reusing the slots.
//! * Fill ring: capsule writes frame addresses, then stores the producer with `Release`; the
//!   kernel's `smp_load_acquire(producer)` sees the addresses. capsule loads the consumer with
//!   `Acquire` to learn which slots the kernel has finished reading.
//! * A frame is owned by the kernel from the moment its address is published on the fill
//!   ring until its descriptor is consumed from the RX ring; capsule only reads frames in
//!   between, so no byte of the UMEM is read and written concurrently.
//! * The need-wakeup flag word is read `Relaxed`, as libxdp does (`READ_ONCE`): a stale value
//!   costs one needless or one late `recvfrom`, never a lost packet.
//!
//! Every descriptor is checked against the UMEM before its bytes are touched, so even a ring
//! in an unexpected state cannot make capsule read outside the mapping.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use capsule_bpf::{Carrier, META_LEN};

use crate::error::{chain, check};
use crate::mapping::Mapping;
use crate::socket::{getsockopt, setsockopt, socket, take_socket_error};

/// Largest packet the joiner builds from fragments; the store keeps at most 256 KiB anyway.
const MAX_JOINED: usize = 256 * 1024;

/// How many descriptors ahead of the one being copied `recv` prefetches (see `prefetch`).
const PREFETCH_AHEAD: u32 = 4;
/// How much of a packet a prefetch asks for: a typical 1 KiB packet whole.
const PREFETCH_BYTES: u64 = 1536;

/// Shape of one socket.
#[derive(Debug, Clone, Copy)]
pub struct XskConfig {
    /// UMEM frame size: 2048 or 4096.
    pub frame_size: u32,
    /// Frames in the UMEM, which is also the fill ring's size (a power of two, >= 16384).
    pub frames: u32,
    /// RX ring entries (a power of two, >= 16384).
    pub rx_size: u32,
    /// Try zero-copy first (falls back to copy mode when the driver refuses).
    pub zero_copy: bool,
    /// Bind with `XDP_USE_SG`: frames larger than one UMEM frame arrive as fragments, which
    /// capsule joins. Needs the `xdp.frags` program and Linux 6.6.
    pub multi_buffer: bool,
    /// Where the XDP program puts its record (its variant's carrier): the `META_LEN` bytes
    /// before the packet (metadata, copied with it), the first `META_LEN` bytes of the
    /// frame's data (headroom, split off before the packet is handed on), or nowhere.
    pub record: Carrier,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            frame_size: 2048,
            frames: 32768,
            rx_size: 32768,
            zero_copy: true,
            multi_buffer: true,
            record: Carrier::Metadata,
        }
    }
}

/// How the kernel moves packets into the UMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XskMode {
    /// The NIC DMAs straight into the UMEM.
    ZeroCopy,
    /// The kernel copies each packet into the UMEM (any driver, generic XDP included).
    Copy,
}

impl std::fmt::Display for XskMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XskMode::ZeroCopy => "zero-copy",
            XskMode::Copy => "copy",
        })
    }
}

/// One received packet, borrowed from the UMEM (or from the fragment joiner).
#[derive(Debug, Clone, Copy)]
pub struct XskPacket<'a> {
    pub data: &'a [u8],
    /// The bytes just before the packet, where the XDP program writes its record; `None` when
    /// the frame has no room for them.
    pub meta: Option<[u8; META_LEN]>,
    /// The packet was longer than capsule joins (256 KiB); `data` is its head.
    pub cut: bool,
}

/// Splits the headroom carrier's record off the front of a packet's first frame: `(packet,
/// record)`. The program redirects only packets it wrote a record into, whose last two bytes
/// are the magic; a frame without it (never expected) is handed on whole, with no record,
/// rather than losing 16 bytes of a packet.
fn split_front_record(data: &[u8]) -> (&[u8], Option<[u8; META_LEN]>) {
    match data.split_first_chunk::<META_LEN>() {
        Some((record, packet))
            if record[META_LEN - 2..] == capsule_bpf::META_MAGIC.to_ne_bytes() =>
        {
            (packet, Some(*record))
        }
        _ => (data, None),
    }
}

/// A mapped ring: producer and consumer indexes, flags, and `size` entries of `T`.
#[derive(Debug)]
pub(crate) struct Ring {
    map: Mapping,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    size: u32,
}

impl Ring {
    fn map(
        fd: &OwnedFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        pgoff: libc::off_t,
        what: &str,
    ) -> io::Result<Ring> {
        // The ring the kernel allocated for this socket at `pgoff`, with the length the kernel's
        // offsets imply.
        let map_len = Ring::map_len(off, size, entry);
        let map = Mapping::socket(fd, map_len, pgoff, &format!("the {what}"))?;
        Ring::over(map, off, size, entry, what)
    }

    /// The length of a ring of `size` entries of `entry` bytes at the kernel's offsets.
    pub(crate) fn map_len(off: &libc::xdp_ring_offset, size: u32, entry: usize) -> usize {
        off.desc as usize + size as usize * entry
    }

    /// The ring in `map` at the kernel's offsets `off`, each checked against the mapping.
    /// In unit tests `map` is heap memory and the fake kernel's (`fake.rs`).
    pub(crate) fn over(
        map: Mapping,
        off: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        what: &str,
    ) -> io::Result<Ring> {
        let map_len = map.len();
        // `slot` masks indexes with `size - 1`; `open` checked the sizes it asks for.
        debug_assert!(size.is_power_of_two());
        if Ring::map_len(off, size, entry) > map_len {
            return Err(io::Error::other(format!(
                "{what}: {size} entries of {entry} bytes from offset {} run past its \
                 {map_len}-byte map",
                off.desc
            )));
        }
        let ring = Ring {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            flags: off.flags as usize,
            desc: off.desc as usize,
            size,
        };
        for (o, name) in [
            (ring.producer, "producer"),
            (ring.consumer, "consumer"),
            (ring.flags, "flags"),
        ] {
            if o + 4 > map_len || !o.is_multiple_of(4) {
                return Err(io::Error::other(format!(
                    "{what}: kernel gave {name} offset {o} outside its {map_len}-byte map"
                )));
            }
        }
        Ok(ring)
    }

    /// The ring's index word at byte offset `off` of the mapping.
    fn word(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` was checked in `map` to be 4-aligned and inside the mapping, which lives
        // as long as `self`. The kernel accesses the word only atomically (READ_ONCE,
        // smp_load_acquire/smp_store_release), so viewing it as an AtomicU32 is sound.
        unsafe { &*self.map.ptr().add(off).cast::<AtomicU32>() }
    }

    fn producer(&self) -> &AtomicU32 {
        self.word(self.producer)
    }

    fn consumer(&self) -> &AtomicU32 {
        self.word(self.consumer)
    }

    fn needs_wakeup(&self) -> bool {
        self.word(self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// The address of entry `idx` (any index; wrapped by the ring's mask) of a ring whose
    /// entries are `entry` bytes long. Safe to compute: it stays inside the mapping, whose
    /// length is `desc + size * entry`; reading or writing it is what needs care.
    fn slot(&self, idx: u32, entry: usize) -> *mut u8 {
        let slot = (idx & (self.size - 1)) as usize;
        debug_assert!(self.desc + (slot + 1) * entry <= self.map.len());
        self.map.ptr().wrapping_add(self.desc + slot * entry)
    }

    /// Reads RX descriptor `idx` (any index; wrapped by the ring's mask).
    fn rx_desc(&self, idx: u32) -> libc::xdp_desc {
        let desc = self.slot(idx, 16);
        // SAFETY: the slot is `< size`, and the mapping holds `size` 16-byte descriptors from
        // `desc` (its length was computed from exactly that). The slot lies between the
        // consumer and the producer (Acquire-loaded), so the kernel has finished writing it and
        // will not write it again before capsule's Release store of the consumer.
        unsafe { desc.cast::<libc::xdp_desc>().read_unaligned() }
    }

    /// Writes fill-ring slot `idx` (wrapped by the ring's mask).
    fn set_fill(&self, idx: u32, addr: u64) {
        let entry = self.slot(idx, 8);
        // SAFETY: the slot is `< size` and the mapping holds `size` 8-byte entries from `desc`.
        // The caller checked the slot is free (between the Acquire-loaded consumer and
        // capsule's producer), so the kernel is not reading it; it reads it only after the
        // Release store of the producer that publishes it.
        unsafe { entry.cast::<u64>().write_unaligned(addr) }
    }
}

/// An AF_XDP socket bound to one RX queue, receiving only.
#[derive(Debug)]
pub struct XskSocket {
    // Field order is drop order: the rings and the socket go before the UMEM they point into.
    rx: Ring,
    fill: Ring,
    _comp: Ring,
    fd: OwnedFd,
    /// After the socket: unmapped once the socket that registered it is closed.
    umem: Mapping,
    frame_size: u32,
    mode: XskMode,
    multi_buffer: bool,
    record: Carrier,
    need_wakeup: bool,
    /// Our copies of the ring indexes we own (the kernel never writes them).
    rx_consumer: u32,
    fill_producer: u32,
    /// The packet being joined from fragments, with its metadata.
    joined: Vec<u8>,
    joined_meta: Option<[u8; META_LEN]>,
    joining: bool,
    /// Descriptors that pointed outside the UMEM (never expected; counted, not trusted).
    bad_descs: u64,
}

// SAFETY: the UMEM and ring mappings are owned by this value alone, and the sharing with the
// kernel is synchronized as the module docs describe; moving the owner to another thread
// (one worker per queue) changes nothing about that.
unsafe impl Send for XskSocket {}

impl XskSocket {
    /// Opens a socket on queue `queue` of interface `ifindex`: zero-copy when asked and the
    /// driver allows it, else copy mode.
    pub fn open(ifindex: u32, queue: u32, cfg: &XskConfig) -> io::Result<XskSocket> {
        if cfg.frame_size != 2048 && cfg.frame_size != 4096 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("UMEM frame size {} must be 2048 or 4096", cfg.frame_size),
            ));
        }
        for (n, what) in [(cfg.frames, "UMEM frames"), (cfg.rx_size, "RX ring size")] {
            if !n.is_power_of_two() || n < 16384 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{what} {n} must be a power of two of at least 16384"),
                ));
            }
        }
        if cfg.zero_copy {
            match XskSocket::open_mode(ifindex, queue, cfg, XskMode::ZeroCopy) {
                Ok(s) => return Ok(s),
                Err(e) => tracing::debug!(
                    "queue {queue}: zero-copy refused ({}); copy mode",
                    chain(&e)
                ),
            }
        }
        XskSocket::open_mode(ifindex, queue, cfg, XskMode::Copy)
    }

    fn open_mode(ifindex: u32, queue: u32, cfg: &XskConfig, mode: XskMode) -> io::Result<Self> {
        let fd = socket(
            libc::AF_XDP,
            libc::SOCK_RAW,
            "(needs root, CAP_NET_RAW and Linux 4.18+)",
        )?;

        // A fresh private anonymous mapping, registered with the kernel below. From here on it
        // is unmapped on every error path, and in Drop after the socket is closed.
        let umem_len = cfg.frames as usize * cfg.frame_size as usize;
        let umem = Mapping::anonymous(umem_len, &format!("a {umem_len}-byte UMEM"))?;

        let reg = libc::xdp_umem_reg {
            addr: umem.ptr() as u64,
            len: umem_len as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg, "XDP_UMEM_REG")?;
        let fill_size = cfg.frames;
        // Completion ring: never used (no transmit), but bind requires one; the smallest the
        // brief allows.
        let comp_size = 16384u32;
        for (opt, n, what) in [
            (libc::XDP_UMEM_FILL_RING, fill_size, "XDP_UMEM_FILL_RING"),
            (
                libc::XDP_UMEM_COMPLETION_RING,
                comp_size,
                "XDP_UMEM_COMPLETION_RING",
            ),
            (libc::XDP_RX_RING, cfg.rx_size, "XDP_RX_RING"),
        ] {
            setsockopt(&fd, libc::SOL_XDP, opt, &n, what)?;
        }
        let (off, len) = getsockopt::<libc::xdp_mmap_offsets>(
            &fd,
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            "XDP_MMAP_OFFSETS",
        )?;
        if len != std::mem::size_of::<libc::xdp_mmap_offsets>() {
            return Err(io::Error::other(format!(
                "XDP_MMAP_OFFSETS: kernel answered {len} bytes, expected {} (Linux 5.4+ needed)",
                std::mem::size_of::<libc::xdp_mmap_offsets>()
            )));
        }
        let rx = Ring::map(&fd, &off.rx, cfg.rx_size, 16, 0, "RX ring")?;
        let fill = Ring::map(
            &fd,
            &off.fr,
            fill_size,
            8,
            libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t,
            "fill ring",
        )?;
        let comp = Ring::map(
            &fd,
            &off.cr,
            comp_size,
            8,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING as libc::off_t,
            "completion ring",
        )?;

        let mut flags = libc::XDP_USE_NEED_WAKEUP;
        flags |= match mode {
            XskMode::ZeroCopy => libc::XDP_ZEROCOPY,
            XskMode::Copy => libc::XDP_COPY,
        };
        if cfg.multi_buffer {
            flags |= libc::XDP_USE_SG;
        }
        let sxdp = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // A socket closed a moment ago (an earlier attempt, or a capture that just exited) may
        // still hold the queue: the kernel releases it in deferred work, so the bind fails
        // with EBUSY for a while. Retry for up to a second before giving up.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            // SAFETY: `sxdp` is a valid sockaddr_xdp and the length passed is its size.
            let ret = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sxdp as *const libc::sockaddr_xdp).cast(),
                    std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            match check("bind", ret) {
                Err(e)
                    if e.raw_os_error() == Some(libc::EBUSY)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                done => {
                    done.map_err(|e| {
                        e.with_context(format!("AF_XDP socket to queue {queue} ({mode} mode)"))
                    })?;
                    break;
                }
            }
        }
        XskSocket::over(fd, umem, [rx, fill, comp], cfg, mode)
    }

    /// The socket `fd`, bound, over its UMEM and its RX, fill and completion rings: puts
    /// every frame on the fill ring (the kernel may receive into any of them) and wakes the
    /// kernel. In unit tests the mappings are heap memory and the fake kernel's
    /// (`fake.rs`), and `fd` any socket.
    pub(crate) fn over(
        fd: OwnedFd,
        umem: Mapping,
        [rx, fill, comp]: [Ring; 3],
        cfg: &XskConfig,
        mode: XskMode,
    ) -> io::Result<XskSocket> {
        let frames = cfg.frames;
        assert!(fill.size == frames && umem.len() >= frames as usize * cfg.frame_size as usize);
        let mut sock = XskSocket {
            rx,
            fill,
            _comp: comp,
            fd,
            umem,
            frame_size: cfg.frame_size,
            mode,
            multi_buffer: cfg.multi_buffer,
            record: cfg.record,
            need_wakeup: true,
            rx_consumer: 0,
            fill_producer: 0,
            joined: Vec::new(),
            joined_meta: None,
            joining: false,
            bad_descs: 0,
        };
        sock.rx_consumer = sock.rx.consumer().load(Ordering::Relaxed);
        sock.fill_producer = sock.fill.producer().load(Ordering::Relaxed);
        for i in 0..frames {
            sock.fill.set_fill(
                sock.fill_producer.wrapping_add(i),
                u64::from(i) * u64::from(cfg.frame_size),
            );
        }
        sock.fill_producer = sock.fill_producer.wrapping_add(frames);
        sock.fill
            .producer()
            .store(sock.fill_producer, Ordering::Release);
        sock.wake()?;
        Ok(sock)
    }

    pub fn mode(&self) -> XskMode {
        self.mode
    }

    /// Reads up to `max` descriptors, hands each complete packet to `f`, and gives the frames
    /// back to the kernel. Returns the number of descriptors read (0: the ring was empty).
    pub fn recv(&mut self, max: u32, mut f: impl FnMut(XskPacket<'_>)) -> io::Result<u32> {
        let produced = self.rx.producer().load(Ordering::Acquire);
        let ready = produced.wrapping_sub(self.rx_consumer);
        // Frames can go back only where the fill ring has room; by construction it always
        // has room for every frame capsule holds, but never trust that over the indexes.
        let fill_free = self.fill.size
            - self
                .fill_producer
                .wrapping_sub(self.fill.consumer().load(Ordering::Acquire));
        let n = ready.min(max).min(fill_free);
        if n == 0 {
            if self.need_wakeup && self.fill.needs_wakeup() {
                self.wake()?;
            }
            return Ok(0);
        }
        let frame_mask = !(u64::from(self.frame_size) - 1);
        let mut returned = 0u32;
        for i in 0..PREFETCH_AHEAD.min(n) {
            self.prefetch(i);
        }
        for i in 0..n {
            if i + PREFETCH_AHEAD < n {
                self.prefetch(i + PREFETCH_AHEAD);
            }
            let d = self.rx.rx_desc(self.rx_consumer.wrapping_add(i));
            let (addr, len) = (d.addr, d.len as usize);
            let end = addr.checked_add(len as u64);
            if end.is_none_or(|e| e > self.umem.len() as u64) {
                self.bad_descs += 1;
                self.joining = false;
                continue;
            }
            let more = self.multi_buffer && d.options & libc::XDP_PKT_CONTD != 0;
            // SAFETY: `addr..addr+len` was just checked to lie inside the UMEM mapping, which
            // lives as long as `self`. The frame belongs to capsule from the consumption of its
            // RX descriptor until it is published on the fill ring below, after this slice's
            // last use, so the kernel does not write it meanwhile.
            let data =
                unsafe { std::slice::from_raw_parts(self.umem.ptr().add(addr as usize), len) };
            let in_frame = (addr & !frame_mask) as usize;
            let (data, meta) = match self.record {
                _ if self.joining => (data, None),
                Carrier::Metadata if in_frame >= META_LEN => {
                    // SAFETY: the META_LEN bytes before `addr` are in the same frame (its offset
                    // in the frame is at least META_LEN), hence inside the mapping and owned by
                    // capsule as above. The kernel copied the XDP metadata area there with the
                    // packet.
                    let m = unsafe { self.umem.ptr().add(addr as usize - META_LEN) };
                    // SAFETY: as above; reads the record, then clears its last byte so that a
                    // later packet in this frame that gets no record of its own is not taken to
                    // carry this one's (the XDP program writes the magic last, right before
                    // the packet).
                    let bytes = unsafe {
                        let b = m.cast::<[u8; META_LEN]>().read_unaligned();
                        m.add(META_LEN - 1).write(0);
                        b
                    };
                    (data, Some(bytes))
                }
                Carrier::Headroom => split_front_record(data),
                Carrier::Metadata | Carrier::None => (data, None),
            };
            if !self.joining && !more {
                f(XskPacket {
                    data,
                    meta,
                    cut: false,
                });
            } else {
                if !self.joining {
                    self.joining = true;
                    self.joined.clear();
                    self.joined_meta = meta;
                }
                // `data`, not the descriptor's `len`: a record in front is already split off.
                let room = MAX_JOINED.saturating_sub(self.joined.len());
                self.joined.extend_from_slice(&data[..data.len().min(room)]);
                if !more {
                    self.joining = false;
                    f(XskPacket {
                        data: &self.joined,
                        meta: self.joined_meta,
                        cut: self.joined.len() >= MAX_JOINED && room < data.len(),
                    });
                }
            }
            self.fill
                .set_fill(self.fill_producer.wrapping_add(returned), addr & frame_mask);
            returned += 1;
        }
        self.rx_consumer = self.rx_consumer.wrapping_add(n);
        self.rx
            .consumer()
            .store(self.rx_consumer, Ordering::Release);
        self.fill_producer = self.fill_producer.wrapping_add(returned);
        self.fill
            .producer()
            .store(self.fill_producer, Ordering::Release);
        if self.need_wakeup && self.fill.needs_wakeup() {
            self.wake()?;
        }
        Ok(n)
    }

    /// Asks the CPU to start loading the frame of the `i`-th descriptor after the consumer
    /// (its metadata and up to [`PREFETCH_BYTES`] of the packet): the kernel wrote it on
    /// another core, so the copy into the store's block would otherwise wait on each cache
    /// line in turn. A hint only: nothing is read, and a descriptor outside the UMEM is
    /// skipped (`recv` counts it as bad). `i` is below the count `recv` took from the ring,
    /// so the descriptor is one the kernel published (the producer was Acquire-loaded).
    #[inline]
    fn prefetch(&self, i: u32) {
        let d = self.rx.rx_desc(self.rx_consumer.wrapping_add(i));
        let len = u64::from(d.len).min(PREFETCH_BYTES);
        let start = d.addr.saturating_sub(META_LEN as u64);
        let Some(end) = d.addr.checked_add(len) else {
            return;
        };
        if end > self.umem.len() as u64 {
            return;
        }
        let mut at = start & !63;
        while at < end {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `at` lies inside the UMEM mapping: `start..end` is within it (checked
            // above) and rounding `start` down to its cache line stays at or above 0. A
            // prefetch loads nothing into the program and cannot fault; the kernel may be
            // writing other frames meanwhile, which a hint does not disturb.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(self.umem.ptr().add(at as usize).cast::<i8>());
            }
            at += 64;
        }
    }

    /// Descriptors waiting in the RX ring (what the kernel produced that capsule has not read).
    pub fn backlog(&self) -> u32 {
        self.rx
            .producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.rx_consumer)
    }

    /// RX ring entries.
    pub fn rx_size(&self) -> u32 {
        self.rx.size
    }

    /// Descriptors that pointed outside the UMEM, since the socket opened (never expected:
    /// counted and skipped, never trusted).
    pub fn bad_descs(&self) -> u64 {
        self.bad_descs
    }

    /// Tells the kernel the fill ring has frames (needed when it set the need-wakeup flag).
    fn wake(&self) -> io::Result<()> {
        // SAFETY: a zero-length, non-blocking receive with null buffers is the documented way to
        // kick an AF_XDP socket's receive path; no memory is passed.
        let ret = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        match check("recvfrom", ret) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e.with_context("to wake the socket").into()),
            Ok(_) => Ok(()),
        }
    }

    /// The socket's kernel counters (`XDP_STATISTICS`), cumulative since the socket opened;
    /// an error when the socket has failed (e.g. the interface went away).
    pub fn stats(&self) -> io::Result<libc::xdp_statistics> {
        let err = take_socket_error(&self.fd)?;
        if err != 0 {
            return Err(io::Error::from_raw_os_error(err));
        }
        let (s, _) = getsockopt::<libc::xdp_statistics>(
            &self.fd,
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
            "XDP_STATISTICS",
        )?;
        Ok(s)
    }
}

impl AsFd for XskSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::XdpKernel;

    /// A socket of `frames` frames of 2048 bytes and as many RX entries, without a record.
    fn cfg(frames: u32) -> XskConfig {
        XskConfig {
            frame_size: 2048,
            frames,
            rx_size: frames,
            zero_copy: false,
            multi_buffer: true,
            record: Carrier::None,
        }
    }

    /// An XDP program's record: `ts` first, the magic last.
    fn record(ts: u64) -> [u8; META_LEN] {
        let mut r = [0u8; META_LEN];
        r[..8].copy_from_slice(&ts.to_ne_bytes());
        r[META_LEN - 2..].copy_from_slice(&capsule_bpf::META_MAGIC.to_ne_bytes());
        r
    }

    /// What `recv` handed on: bytes, record, cut.
    type Got = Vec<(Vec<u8>, Option<[u8; META_LEN]>, bool)>;
    /// What the kernel receives: record, bytes, descriptor options.
    type Sent = (Option<[u8; META_LEN]>, Vec<u8>, u32);

    fn read_all(k: &mut XdpKernel, got: &mut Got) {
        for _ in 0..1000 {
            if k.sock.backlog() == 0 {
                return;
            }
            k.sock
                .recv(64, |p| got.push((p.data.to_vec(), p.meta, p.cut)))
                .unwrap();
        }
        panic!("the RX ring never drained");
    }

    /// Has the kernel receive each `(record, bytes, options)` at 256 bytes into a frame (as
    /// XDP's headroom puts it), reading whenever the kernel has no frame or no RX slot left.
    fn deliver(k: &mut XdpKernel, packets: &[Sent]) -> Got {
        let mut got = Got::new();
        for (rec, bytes, options) in packets {
            while k
                .receive(256, rec.as_ref().map(|r| &r[..]), bytes, *options)
                .is_none()
            {
                read_all(k, &mut got);
            }
        }
        read_all(k, &mut got);
        got
    }

    #[test]
    fn every_frame_is_given_to_the_kernel_and_each_one_read_comes_back_to_it() {
        let frames: Vec<u64> = (0..8).map(|i| i * 2048).collect();
        // From 0, and from just below u32::MAX so that every index wraps on the way.
        for start in [0, u32::MAX - 5] {
            let mut k = XdpKernel::new(&cfg(8), start);
            assert_eq!(k.fill_ring(), frames);
            let mut got = Vec::new();
            for round in 0..3u8 {
                for p in 0..6u8 {
                    let bytes = vec![round * 10 + p; 60 + usize::from(p)];
                    k.receive(256, None, &bytes, 0).unwrap();
                }
                assert_eq!(k.sock.backlog(), 6);
                let n = k.sock.recv(64, |p| got.push(p.data.to_vec())).unwrap();
                assert_eq!((n, k.sock.backlog()), (6, 0));
                // Every frame is the kernel's again, by its start (the packet was 256 in).
                let mut fill = k.fill_ring();
                fill.sort_unstable();
                assert_eq!(fill, frames, "start {start}, round {round}");
            }
            let want: Vec<Vec<u8>> = (0..3u8)
                .flat_map(|r| (0..6u8).map(move |p| vec![r * 10 + p; 60 + usize::from(p)]))
                .collect();
            assert_eq!(got, want, "start {start}");
            assert_eq!(k.sock.bad_descs(), 0);
        }
    }

    #[test]
    fn a_read_takes_at_most_max_and_no_more_than_the_fill_ring_can_take_back() {
        let mut k = XdpKernel::new(&cfg(8), 0);
        for p in 0..5u8 {
            k.receive(0, None, &[p; 64], 0).unwrap();
        }
        let mut got = Vec::new();
        assert_eq!(k.sock.recv(2, |p| got.push(p.data[0])).unwrap(), 2);
        assert_eq!(k.sock.recv(64, |p| got.push(p.data[0])).unwrap(), 3);
        assert_eq!(got, [0, 1, 2, 3, 4]);
        // A kernel that publishes descriptors for frames it never took: the fill ring is
        // full (every frame is on it), so none can be read, their frames having nowhere to go.
        for _ in 0..3 {
            assert!(k.publish(0, 64, 0));
        }
        assert_eq!(
            k.sock
                .recv(64, |_| panic!("read with a full fill ring"))
                .unwrap(),
            0
        );
        assert_eq!(k.fill_ring().len(), 8);
        // It takes one frame (and publishes a fourth descriptor): one is read.
        k.receive(0, None, &[9; 64], 0).unwrap();
        assert_eq!(k.sock.recv(64, |_| {}).unwrap(), 1);
        assert_eq!((k.sock.backlog(), k.fill_ring().len()), (3, 8));
    }

    #[test]
    fn descriptors_outside_the_umem_are_counted_and_skipped_and_cut_a_join_short() {
        let mut k = XdpKernel::new(&cfg(8), 0);
        let umem = 8 * 2048u64;
        k.receive(0, None, &[1; 64], 0).unwrap();
        assert!(k.publish(umem - 10, 64, 0)); // runs past the end
        assert!(k.publish(u64::MAX - 8, 64, 0)); // wraps around
                                                 // The first fragment of a packet, a bad one, then a whole packet: the partial one is
                                                 // dropped, not glued to the next.
        k.receive(0, None, &[2; 64], libc::XDP_PKT_CONTD).unwrap();
        assert!(k.publish(umem, 1, 0));
        k.receive(0, None, &[3; 64], 0).unwrap();
        let mut got = Got::new();
        read_all(&mut k, &mut got);
        let data: Vec<Vec<u8>> = got.into_iter().map(|(d, _, _)| d).collect();
        assert_eq!(data, [vec![1; 64], vec![3; 64]]);
        assert_eq!(k.sock.bad_descs(), 3);
    }

    #[test]
    fn fragments_are_joined_into_one_packet_with_the_first_ones_record() {
        let c = XskConfig {
            record: Carrier::Metadata,
            ..cfg(8)
        };
        let mut k = XdpKernel::new(&c, 0);
        let contd = libc::XDP_PKT_CONTD;
        let got = deliver(
            &mut k,
            &[
                (Some(record(7)), vec![1; 1000], contd),
                (None, vec![2; 1000], contd),
                (None, vec![3; 10], 0),
                (Some(record(8)), vec![4; 60], 0),
            ],
        );
        let joined = [vec![1; 1000], vec![2; 1000], vec![3; 10]].concat();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (joined, Some(record(7)), false));
        assert_eq!(got[1], (vec![4; 60], Some(record(8)), false));
    }

    #[test]
    fn a_joined_packet_stops_at_256_kib_and_says_it_was_cut() {
        let c = XskConfig {
            frame_size: 4096,
            frames: 16,
            rx_size: 16,
            record: Carrier::Headroom,
            ..cfg(16)
        };
        let mut k = XdpKernel::new(&c, 0);
        // 70 fragments of 3800 bytes (266,000 bytes), the record in front of the first, then
        // a small packet.
        let mut packets: Vec<_> = (0..70u32)
            .map(|i| {
                let bytes = vec![i as u8; 3800];
                (None, bytes, if i < 69 { libc::XDP_PKT_CONTD } else { 0 })
            })
            .collect();
        packets[0].1 = [&record(5)[..], &packets[0].1].concat();
        packets.push((None, [&record(6)[..], &[9; 60]].concat(), 0));
        let got = deliver(&mut k, &packets);
        assert_eq!(got.len(), 2);
        let (data, meta, cut) = &got[0];
        assert_eq!(
            (data.len(), *meta, *cut),
            (MAX_JOINED, Some(record(5)), true)
        );
        assert_eq!(data[..3800], [0; 3800]);
        assert_eq!(data[MAX_JOINED - 1], (MAX_JOINED / 3800) as u8);
        assert_eq!(got[1], (vec![9; 60], Some(record(6)), false));
    }

    #[test]
    fn a_metadata_record_is_read_once_and_a_packet_without_room_for_one_has_none() {
        let c = XskConfig {
            record: Carrier::Metadata,
            ..cfg(8)
        };
        let mut k = XdpKernel::new(&c, 0);
        let got = deliver(&mut k, &[(Some(record(42)), vec![1; 60], 0)]);
        assert_eq!(got[0].1, Some(record(42)));
        // Its last byte (the magic's) was cleared in the frame: the next packet in frame 0
        // that gets no record of its own does not carry this one. Frames 1..7 come first.
        let got = deliver(&mut k, &vec![(None, vec![2; 60], 0); 8]);
        let stale = got[7].1.expect("bytes before the packet");
        assert_eq!(stale[..8], 42u64.to_ne_bytes());
        assert!(capsule_bpf::Meta::parse(&stale).is_none());
        assert!(got
            .iter()
            .all(|(_, m, _)| capsule_bpf::Meta::parse(&m.unwrap()).is_none()));
        // A packet at the very start of its frame has no bytes before it to read.
        k.receive(0, None, &[3; 60], 0).unwrap();
        let mut got = Got::new();
        read_all(&mut k, &mut got);
        assert_eq!(got, [(vec![3; 60], None, false)]);
    }

    #[test]
    fn the_kernel_is_woken_only_when_it_asks() {
        let mut k = XdpKernel::new(&cfg(8), 0);
        k.queue_datagrams(3);
        // An empty ring, no flag: nothing to wake.
        assert_eq!(k.sock.recv(64, |_| {}).unwrap(), 0);
        // The kernel asks (it ran out of frames): an empty read wakes it, and so does a
        // read that gave frames back. Each wake-up (`recvfrom`) takes one datagram.
        k.need_wakeup(true);
        assert_eq!(k.sock.recv(64, |_| {}).unwrap(), 0);
        k.receive(0, None, &[1; 64], 0).unwrap();
        assert_eq!(k.sock.recv(64, |_| {}).unwrap(), 1);
        assert_eq!(k.take_datagrams(), 1);
    }

    #[test]
    fn bad_shapes_are_refused_before_any_system_call() {
        let bad = [
            XskConfig {
                frame_size: 3000,
                ..XskConfig::default()
            },
            XskConfig {
                frames: 8192,
                ..XskConfig::default()
            },
            XskConfig {
                rx_size: 20000,
                ..XskConfig::default()
            },
        ];
        for cfg in bad {
            let e = XskSocket::open(1, 0, &cfg).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{cfg:?}: {e}");
        }
    }

    #[test]
    fn a_front_record_is_split_off_and_the_packet_kept_whole() {
        let mut frame = vec![0u8; META_LEN];
        frame[..8].copy_from_slice(&42u64.to_ne_bytes());
        frame[META_LEN - 2..].copy_from_slice(&capsule_bpf::META_MAGIC.to_ne_bytes());
        let packet = [0xffu8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00];
        frame.extend_from_slice(&packet);
        let (p, r) = split_front_record(&frame);
        assert_eq!(p, packet);
        let meta = capsule_bpf::Meta::parse(&r.unwrap()).unwrap();
        assert_eq!(meta.ts_ns, 42);
        // No magic: the frame is the packet, nothing is cut off.
        frame[META_LEN - 1] = 0;
        let (p, r) = split_front_record(&frame);
        assert_eq!((p.len(), r), (frame.len(), None));
        // Shorter than a record: handed on whole.
        let (p, r) = split_front_record(&packet[..4]);
        assert_eq!((p.len(), r), (4, None));
    }
}
