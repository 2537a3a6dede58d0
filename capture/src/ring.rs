//! The rings capsule shares with the kernel: the only module of capsule with `unsafe` code.
//! This file is the AF_PACKET TPACKET_V3 receive ring; [`xsk`] holds the AF_XDP sockets.
//!
//! The kernel and capsule share a memory-mapped ring of `block_nr` blocks of `block_size`
//! bytes. The kernel fills a block with packets, then hands it over by setting
//! `TP_STATUS_USER` in the block's status word; capsule reads every packet of the block and
//! hands it back by storing `TP_STATUS_KERNEL` (0). Blocks are used strictly in order.
//! Nothing else is shared: a block belongs either to the kernel or to capsule, and the status
//! word, read and written atomically, decides which.
//!
//! Memory ordering (kernel: net/packet/af_packet.c):
//! * capsule loads the status with `Acquire`. It pairs with `prb_close_block()`, which issues
//!   `smp_wmb()` after writing the block's packets and before `BLOCK_STATUS(pbd1) =
//!   TP_STATUS_USER`: once capsule sees `TP_STATUS_USER`, the packets are visible.
//! * capsule stores `TP_STATUS_KERNEL` with `Release` after its last read of the block. It
//!   pairs with `prb_lookup_block()`/`__packet_get_status()`, which read the status (with
//!   `smp_rmb()`) before the kernel writes into the block again: the kernel never overwrites
//!   packets capsule is still reading.
//!
//! Every value read from the ring (offsets, lengths, counts) is checked against the block's
//! bounds before use, so even a ring in an unexpected state cannot make capsule read outside
//! the mapping.

pub mod xsk;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Size and shape of the ring.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    /// Bytes per block (a multiple of the page size).
    pub block_size: u32,
    /// Number of blocks.
    pub block_nr: u32,
    /// A block is handed to capsule at the latest this long after its first packet.
    pub retire_ms: u32,
    /// PACKET_FANOUT group id (hash fanout, defragmenting), so several sockets can share the
    /// interface's traffic; 0 disables fanout.
    pub fanout_group: u16,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            block_size: 1 << 22,
            block_nr: 64,
            retire_ms: 50,
            fanout_group: 0,
        }
    }
}

/// One received packet, borrowed from the ring.
#[derive(Debug, Clone, Copy)]
pub struct RingPacket<'a> {
    /// Kernel receive time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// Length on the wire (without the stripped VLAN tag, if any).
    pub len: u32,
    /// The captured bytes, from the link-layer header on.
    pub data: &'a [u8],
    /// A VLAN tag the kernel (or NIC) removed from the frame: (TPID, TCI).
    pub vlan: Option<(u16, u16)>,
}

/// Kernel counters of a packet socket since the previous call (the kernel resets them on
/// every read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Packets the socket received (kept or dropped).
    pub packets: u64,
    /// Packets dropped because the ring was full.
    pub drops: u64,
    /// Times the ring was frozen (all blocks owned by capsule).
    pub freezes: u64,
}

/// A TPACKET_V3 receive ring bound to one interface.
#[derive(Debug)]
pub struct PacketRing {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    block_nr: usize,
    next: usize,
}

// SAFETY: the mapping is owned by this value alone (no other Rust value points into it), and
// the kernel's side of the sharing is synchronized through the status words as described in
// the module docs; moving the owner to another thread changes nothing about that.
unsafe impl Send for PacketRing {}

fn check(ret: libc::c_int, what: &str) -> io::Result<()> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

/// A new socket (close-on-exec), or the error naming `what` was being opened.
pub(crate) fn new_socket(domain: libc::c_int, ty: libc::c_int, what: &str) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with plain integer arguments; the result is checked.
    let raw = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) };
    check(raw, what)?;
    // SAFETY: `raw` is a new, valid descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Puts interface `ifindex` in promiscuous mode for as long as packet socket `fd` is open.
fn add_promiscuous(fd: &OwnedFd, ifindex: u32) -> io::Result<()> {
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex as libc::c_int,
        mr_type: libc::PACKET_MR_PROMISC as libc::c_ushort,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    setsockopt(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_ADD_MEMBERSHIP,
        &mreq,
        "PACKET_ADD_MEMBERSHIP promiscuous",
    )
}

fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    what: &str,
) -> io::Result<()> {
    // SAFETY: `value` is a live reference to a `T` of exactly `size_of::<T>()` bytes, which is
    // what the option expects (the callers pass the kernel's struct or int for `name`).
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    check(ret, what)
}

/// Kernel structures that are plain data: every bit pattern, all-zero included, is a value.
///
/// # Safety
/// Implement only for `#[repr(C)]` integer-only types (and integers).
unsafe trait Plain: Sized {}
// SAFETY: each is an integer or a libc `#[repr(C)]` struct of integer fields only.
unsafe impl Plain for libc::c_int {}
// SAFETY: as above.
unsafe impl Plain for libc::tpacket_stats_v3 {}
// SAFETY: as above.
unsafe impl Plain for libc::xdp_statistics {}
// SAFETY: as above.
unsafe impl Plain for libc::xdp_mmap_offsets {}

/// Reads socket option `name` as a `T`; returns it with the number of bytes the kernel wrote.
fn getsockopt<T: Plain>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    what: &str,
) -> io::Result<(T, usize)> {
    // SAFETY: `T: Plain`, so the all-zero value is a valid `T`.
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a writable `T` and `len` its size; the kernel writes at most `len`
    // bytes, and any bytes it writes make a valid `T` (`T: Plain`).
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    check(ret, what)?;
    Ok((value, len as usize))
}

/// Reads and clears a socket's pending error (SO_ERROR): 0 when there is none.
fn take_socket_error(fd: &OwnedFd) -> io::Result<libc::c_int> {
    getsockopt::<libc::c_int>(fd, libc::SOL_SOCKET, libc::SO_ERROR, "SO_ERROR").map(|(e, _)| e)
}

/// The index of the interface named `iface`.
pub fn if_index(iface: &str) -> io::Result<u32> {
    let name = CString::new(iface).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL byte")
    })?;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no network interface named {iface:?}"),
        ));
    }
    Ok(ifindex)
}

/// Puts `ifindex` in promiscuous mode for as long as the returned socket is open (the kernel
/// counts such requests and undoes them when the socket closes, even on kill -9). The socket
/// has protocol 0 and is never bound, so it receives nothing. AF_XDP capture needs it: an
/// AF_XDP socket alone does not make the NIC accept frames for other MAC addresses.
pub fn promiscuous(ifindex: u32) -> io::Result<OwnedFd> {
    let fd = new_socket(
        libc::AF_PACKET,
        libc::SOCK_RAW,
        "socket(AF_PACKET) for promiscuous mode",
    )?;
    add_promiscuous(&fd, ifindex)?;
    Ok(fd)
}

/// Reads (`set: None`) or sets the interface's receive VLAN offload (`ethtool -K IF rxvlan`),
/// returning its state before the call. With it on, the NIC takes 802.1Q tags off frames into
/// metadata, where an XDP program only sees them through a driver kfunc.
pub fn rx_vlan_offload(iface: &str, set: Option<bool>) -> io::Result<bool> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_GFLAGS: u32 = 0x25;
    const ETHTOOL_SFLAGS: u32 = 0x26;
    const ETH_FLAG_RXVLAN: u32 = 1 << 8;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [libc::c_char; libc::IFNAMSIZ],
        data: *mut EthtoolValue,
        _pad: [u8; 16],
    }
    if iface.len() >= libc::IFNAMSIZ || iface.as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {iface:?}"),
        ));
    }
    let fd = new_socket(libc::AF_INET, libc::SOCK_DGRAM, "socket for SIOCETHTOOL")?;
    let mut value = EthtoolValue {
        cmd: ETHTOOL_GFLAGS,
        data: 0,
    };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: &mut value,
        _pad: [0; 16],
    };
    for (d, b) in req.name.iter_mut().zip(iface.as_bytes()) {
        *d = *b as libc::c_char;
    }
    // SAFETY: `req` is an ifreq whose name is NUL-terminated (checked length, zeroed tail) and
    // whose data points at a live ethtool_value for the duration of the call.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL, &mut req as *mut IfReq) };
    check(ret, &format!("ETHTOOL_GFLAGS on {iface}"))?;
    let was = value.data & ETH_FLAG_RXVLAN != 0;
    if let Some(on) = set.filter(|&on| on != was) {
        value.cmd = ETHTOOL_SFLAGS;
        value.data = if on {
            value.data | ETH_FLAG_RXVLAN
        } else {
            value.data & !ETH_FLAG_RXVLAN
        };
        req.data = &mut value;
        // SAFETY: as above.
        let ret = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL, &mut req as *mut IfReq) };
        check(ret, &format!("ETHTOOL_SFLAGS rxvlan on {iface}"))?;
    }
    Ok(was)
}

/// The time of `CLOCK_REALTIME` (`realtime`) or `CLOCK_MONOTONIC` in ns. The XDP program
/// stamps packets with the monotonic clock (`bpf_ktime_get_ns`); capture adds the difference.
pub fn clock_ns(realtime: bool) -> u64 {
    let clock = if realtime {
        libc::CLOCK_REALTIME
    } else {
        libc::CLOCK_MONOTONIC
    };
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a writable timespec; both clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

impl PacketRing {
    /// Opens a packet socket on `iface`, maps its ring, puts the interface in promiscuous
    /// mode (for this socket's lifetime) and binds the socket to it.
    pub fn open(iface: &str, cfg: &RingConfig) -> io::Result<PacketRing> {
        let ifindex = if_index(iface)?;
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // Protocol 0: the socket receives nothing until `bind` names the interface and the
        // protocol, after the ring is ready; with ETH_P_ALL here it would take every
        // interface's packets (the management port's too) until then.
        let fd = new_socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            "socket(AF_PACKET) (needs root or CAP_NET_RAW)",
        )?;

        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
            "PACKET_VERSION TPACKET_V3",
        )?;
        let frame_size = 2048u32;
        if !cfg.block_size.is_multiple_of(4096) || cfg.block_size < frame_size || cfg.block_nr == 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "ring block size {} must be a multiple of 4096, with at least one block",
                    cfg.block_size
                ),
            ));
        }
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.block_nr,
            tp_frame_size: frame_size,
            tp_frame_nr: cfg.block_size / frame_size * cfg.block_nr,
            tp_retire_blk_tov: cfg.retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "PACKET_RX_RING",
        )?;
        let map_len = cfg.block_size as usize * cfg.block_nr as usize;
        // SAFETY: maps the ring the kernel just allocated for this descriptor; the length is
        // the ring's size, and the result is checked against MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::new(
                io::Error::last_os_error().kind(),
                format!(
                    "mmap of the {map_len}-byte ring: {}",
                    io::Error::last_os_error()
                ),
            ));
        }
        let ring = PacketRing {
            fd,
            map: map.cast(),
            map_len,
            block_size: cfg.block_size as usize,
            block_nr: cfg.block_nr as usize,
            next: 0,
        };

        add_promiscuous(&ring.fd, ifindex)?;

        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value, then filled in.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
        let ret = unsafe {
            libc::bind(
                ring.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        check(ret, &format!("bind to {iface}"))?;
        if cfg.fanout_group != 0 {
            let arg: u32 = u32::from(cfg.fanout_group)
                | ((libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG) << 16);
            setsockopt(
                &ring.fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &arg,
                "PACKET_FANOUT",
            )?;
        }
        Ok(ring)
    }

    /// The status word of block `i`, as an atomic shared with the kernel.
    fn status(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i < self.block_nr);
        // SAFETY: block `i` starts inside the mapping (i < block_nr), block starts are
        // page-aligned, and `hdr.bh1.block_status` is the u32 at offset 8 of
        // `tpacket_block_desc` (4-byte aligned), so the pointer is valid and aligned for an
        // AtomicU32 for as long as `self` (and so the mapping) lives. The kernel accesses the
        // word only with its own atomic-width stores and loads, paired as the module docs say.
        unsafe {
            let block = self.map.add(i * self.block_size);
            let desc = block.cast::<libc::tpacket_block_desc>();
            let status = std::ptr::addr_of_mut!((*desc).hdr.bh1.block_status);
            AtomicU32::from_ptr(status)
        }
    }

    /// Blocks the kernel has handed over that capsule has not read yet.
    pub fn backlog(&self) -> usize {
        (0..self.block_nr)
            .take_while(|j| {
                let i = (self.next + j) % self.block_nr;
                self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
            })
            .count()
    }

    /// Number of blocks in the ring.
    pub fn blocks(&self) -> usize {
        self.block_nr
    }

    /// Waits up to `timeout` for the next block to be handed over, calls `f` with each of its
    /// packets, and gives the block back. Returns the number of packets (0 on timeout).
    pub fn next_block(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(RingPacket<'_>),
    ) -> io::Result<usize> {
        let i = self.next;
        if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
            // SAFETY: `pfd` is a valid pollfd array of length 1 for the duration of the call.
            let ret = unsafe { libc::poll(&mut pfd, 1, ms) };
            if ret < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    return Ok(0);
                }
                return Err(e);
            }
            if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                if pfd.revents & libc::POLLERR != 0 {
                    // The link went down (ENETDOWN) or away (ENODEV): poll would return at
                    // once forever. Take the error, fail if the interface is gone, otherwise
                    // wait out the timeout so a down link costs no CPU.
                    let err = take_socket_error(&self.fd)?;
                    if err == libc::ENODEV || err == libc::ENXIO {
                        return Err(io::Error::from_raw_os_error(err));
                    }
                    std::thread::sleep(timeout);
                }
                return Ok(0);
            }
        }
        // SAFETY: the Acquire load above saw TP_STATUS_USER, so the kernel has finished
        // writing this block and will not touch it until we store TP_STATUS_KERNEL below; the
        // slice covers exactly block `i`, inside the mapping.
        let block: &[u8] = unsafe {
            std::slice::from_raw_parts(self.map.add(i * self.block_size), self.block_size)
        };
        let n = parse_block(block, &mut f);
        self.status(i)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (i + 1) % self.block_nr;
        Ok(n)
    }

    /// Reads (and so resets) the socket's kernel counters.
    pub fn stats(&self) -> io::Result<RingStats> {
        let (st, _) = getsockopt::<libc::tpacket_stats_v3>(
            &self.fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            "PACKET_STATISTICS",
        )?;
        Ok(RingStats {
            packets: u64::from(st.tp_packets),
            drops: u64::from(st.tp_drops),
            freezes: u64::from(st.tp_freeze_q_cnt),
        })
    }
}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are the mapping created in `open`, unmapped exactly once;
        // no borrow of it outlives `self`.
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

// Offsets in struct tpacket_block_desc / tpacket_hdr_v1 and struct tpacket3_hdr
// (include/uapi/linux/if_packet.h).
const BD_NUM_PKTS: usize = 12;
const BD_OFFSET_TO_FIRST: usize = 16;
const H3_NEXT: usize = 0;
const H3_SEC: usize = 4;
const H3_NSEC: usize = 8;
const H3_SNAPLEN: usize = 12;
const H3_LEN: usize = 16;
const H3_STATUS: usize = 20;
const H3_MAC: usize = 24;
const H3_VLAN_TCI: usize = 32;
const H3_VLAN_TPID: usize = 36;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// Walks the packets of one block (owned by user space), with every offset checked.
fn parse_block(block: &[u8], f: &mut impl FnMut(RingPacket<'_>)) -> usize {
    let (Some(num), Some(first)) = (
        u32_at(block, BD_NUM_PKTS),
        u32_at(block, BD_OFFSET_TO_FIRST),
    ) else {
        return 0;
    };
    let mut at = first as usize;
    let mut n = 0;
    for _ in 0..num {
        let Some(h) = block.get(at..) else { break };
        let (Some(next), Some(sec), Some(nsec), Some(snap), Some(len), Some(status), Some(mac)) = (
            u32_at(h, H3_NEXT),
            u32_at(h, H3_SEC),
            u32_at(h, H3_NSEC),
            u32_at(h, H3_SNAPLEN),
            u32_at(h, H3_LEN),
            u32_at(h, H3_STATUS),
            u16_at(h, H3_MAC),
        ) else {
            break;
        };
        let Some(data) = h.get(mac as usize..mac as usize + snap as usize) else {
            break;
        };
        let vlan = (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tci = u32_at(h, H3_VLAN_TCI).unwrap_or(0) as u16;
            let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                u16_at(h, H3_VLAN_TPID).unwrap_or(0x8100)
            } else {
                0x8100
            };
            (tpid, tci)
        });
        f(RingPacket {
            ts_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
            len,
            data,
            vlan,
        });
        n += 1;
        if next == 0 {
            break;
        }
        at += next as usize;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block laid out as the kernel does: descriptor, then packets linked by next offsets.
    fn block(packets: &[(&[u8], Option<u16>)]) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[BD_NUM_PKTS..BD_NUM_PKTS + 4].copy_from_slice(&(packets.len() as u32).to_ne_bytes());
        b[BD_OFFSET_TO_FIRST..BD_OFFSET_TO_FIRST + 4].copy_from_slice(&48u32.to_ne_bytes());
        let mut at = 48;
        for (k, (data, vlan)) in packets.iter().enumerate() {
            let mac = 68u16;
            let next = if k + 1 == packets.len() {
                0
            } else {
                (mac as usize + data.len() + 15) & !15
            };
            let h = &mut b[at..];
            h[H3_NEXT..H3_NEXT + 4].copy_from_slice(&(next as u32).to_ne_bytes());
            h[H3_SEC..H3_SEC + 4].copy_from_slice(&(1000 + k as u32).to_ne_bytes());
            h[H3_NSEC..H3_NSEC + 4].copy_from_slice(&7u32.to_ne_bytes());
            h[H3_SNAPLEN..H3_SNAPLEN + 4].copy_from_slice(&(data.len() as u32).to_ne_bytes());
            h[H3_LEN..H3_LEN + 4].copy_from_slice(&(data.len() as u32 + 10).to_ne_bytes());
            let status = if vlan.is_some() {
                libc::TP_STATUS_VLAN_VALID
            } else {
                0
            };
            h[H3_STATUS..H3_STATUS + 4].copy_from_slice(&status.to_ne_bytes());
            h[H3_MAC..H3_MAC + 2].copy_from_slice(&mac.to_ne_bytes());
            if let Some(v) = vlan {
                h[H3_VLAN_TCI..H3_VLAN_TCI + 4].copy_from_slice(&u32::from(*v).to_ne_bytes());
            }
            h[mac as usize..mac as usize + data.len()].copy_from_slice(data);
            at += next;
        }
        b
    }

    #[test]
    fn packets_of_a_block_are_walked_with_their_metadata() {
        let b = block(&[(&[1, 2, 3], None), (&[4; 100], Some(100))]);
        let mut got = Vec::new();
        let n = parse_block(&b, &mut |p: RingPacket<'_>| {
            got.push((p.ts_ns, p.len, p.data.to_vec(), p.vlan))
        });
        assert_eq!(n, 2);
        assert_eq!(got[0], (1_000_000_000_007, 13, vec![1, 2, 3], None));
        assert_eq!(
            got[1],
            (1_001_000_000_007, 110, vec![4; 100], Some((0x8100, 100)))
        );
    }

    #[test]
    fn a_block_with_lying_offsets_is_cut_short_not_overrun() {
        let mut b = block(&[(&[1, 2, 3], None), (&[4; 10], None)]);
        // Claim 50 packets, and a snap length running past the block.
        b[BD_NUM_PKTS..BD_NUM_PKTS + 4].copy_from_slice(&50u32.to_ne_bytes());
        let second = 48 + ((68 + 3 + 15) & !15);
        b[second + H3_SNAPLEN..second + H3_SNAPLEN + 4].copy_from_slice(&100_000u32.to_ne_bytes());
        let mut n = 0;
        parse_block(&b, &mut |_p: RingPacket<'_>| n += 1);
        assert_eq!(n, 1);
        assert_eq!(parse_block(&[0u8; 8], &mut |_p: RingPacket<'_>| {}), 0);
    }
}
