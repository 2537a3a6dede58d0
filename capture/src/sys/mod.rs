//! The one door to the kernel: every system call capture makes, and the only `unsafe` code of
//! capsule.
//!
//! * this file: a checked `socket()`, `setsockopt` and `getsockopt` (kernel structs read
//!   through the [`Plain`] trait), the interface index lookup, promiscuous membership, the
//!   ethtool receive-VLAN-offload ioctl, clock reads, and [`Mapping`], the memory mappings
//!   the rings live in;
//! * [`tpacket`]: the AF_PACKET TPACKET_V3 receive ring;
//! * [`xsk`]: AF_XDP sockets (UMEM, fill and RX rings);
//! * [`tx`]: the AF_PACKET raw socket `capsule replay` sends frames through, and the
//!   interface's MTU and hardware type;
//! * [`link`]: the `bpf_link` that attaches the XDP program (a raw `bpf(2)` call, which is why
//!   it lives here and not in capsule-bpf);
//! * [`privs`]: user and group look-ups, the file-system identity the store is opened with,
//!   and the privilege drop in every thread (credentials are per thread in Linux);
//! * [`huge`]: the binary's global allocator, large allocations on transparent huge pages
//!   (the one item re-exported from here, as `capsule_capture::HugeAlloc`: a
//!   `#[global_allocator]` is a safe static to install).
//!
//! A failed call is an `io::Error` (its kind kept) carrying a [`SyscallError`]: the call
//! and what it was for, with the OS error as its source, so an error chain printed with
//! `: ` between causes (anyhow's `{:#}`, [`capsule_store::error::chain`]) reads
//! `bind to eth1: No such device (os error 19)`.
//!
//! Everything else here is `pub(crate)`: the live backends (the `live` module) call it,
//! nothing outside the crate can. Every `unsafe` block carries a `// SAFETY:` comment, and every access to a
//! ring shared with the kernel says which kernel-side barrier its memory ordering pairs with
//! (module docs of [`tpacket`] and [`xsk`]). The parsing of what the kernel wrote into a
//! ring (`tpacket::parse_block`, the descriptor checks of `xsk`) is safe code: every offset
//! and length is checked against the mapping before use.

pub(crate) mod huge;
pub(crate) mod link;
pub(crate) mod privs;
pub(crate) mod tpacket;
pub(crate) mod tx;
pub(crate) mod xsk;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A system call that failed: the call, with what it was for (`bind to eth1`,
/// `XDP_STATISTICS`), and the OS error.
#[derive(Debug, thiserror::Error)]
#[error("{call}")]
struct SyscallError {
    call: String,
    #[source]
    io_error: io::Error,
}

/// The error `io_error` of `call`, as an `io::Error` of the same kind carrying a
/// [`SyscallError`].
fn syscall_error(call: &str, io_error: io::Error) -> io::Error {
    io::Error::new(
        io_error.kind(),
        SyscallError {
            call: call.to_string(),
            io_error,
        },
    )
}

/// Ok for a non-negative return, else the error (errno) of the call `what` just made.
fn check(ret: libc::c_int, what: &str) -> io::Result<()> {
    if ret < 0 {
        return Err(syscall_error(what, io::Error::last_os_error()));
    }
    Ok(())
}

/// A new socket (close-on-exec), or the error naming `what` was being opened.
pub(crate) fn socket(domain: libc::c_int, ty: libc::c_int, what: &str) -> io::Result<OwnedFd> {
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

/// A memory mapping at an address the kernel chose, unmapped when dropped.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// Maps `len` bytes of what the kernel allocated for socket `fd` at page offset `pgoff` (a
    /// packet ring, an AF_XDP ring), shared with the kernel. `what` names it in the error
    /// ("mmap of {what}: ...").
    fn socket(fd: &OwnedFd, len: usize, pgoff: libc::off_t, what: &str) -> io::Result<Mapping> {
        Mapping::new(len, libc::MAP_SHARED, fd.as_raw_fd(), pgoff, what)
    }

    /// `len` bytes of fresh private anonymous memory (an AF_XDP UMEM), on 2 MiB boundaries
    /// and advised to use transparent huge pages before it is touched (where the kernel has
    /// them; otherwise 4 KiB pages). The reader walks thousands of UMEM frames, and with
    /// 4 KiB pages every other one was a TLB miss: huge pages took 10% off a store-rung
    /// capture's samples at the sender's ceiling (`perf record`, 5.18 M packets: 5,417 and
    /// 5,523 before, 4,928 and 4,911 after).
    fn anonymous(len: usize, what: &str) -> io::Result<Mapping> {
        let ptr =
            huge::map_aligned(len).map_err(|e| syscall_error(&format!("mmap of {what}"), e))?;
        // SAFETY: advice on the mapping just made, which this function owns.
        // MADV_POPULATE_WRITE (Linux 5.14) faults the pages in now, as MAP_POPULATE did;
        // refused, the kernel faults them in as the UMEM is registered (it pins them).
        unsafe {
            libc::madvise(ptr.cast(), len, libc::MADV_POPULATE_WRITE);
        }
        Ok(Mapping { ptr, len })
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
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(syscall_error(&format!("mmap of {what}"), e));
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The first byte of the mapping; valid for `len()` bytes while `self` lives.
    fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping made in `new`, unmapped exactly once, here; every
        // view into it borrows its owner (the ring or socket holding this value), so none
        // outlives it.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// The index of the interface named `iface`.
pub(crate) fn if_index(iface: &str) -> io::Result<u32> {
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

/// The addresses the host itself has on `iface` (getifaddrs(3)), IPv6 link-local ones
/// (fe80::/10, which every IPv6 interface has) left out. An interface with any is one the
/// host's own traffic goes through.
pub(crate) fn host_addresses(iface: &str) -> io::Result<Vec<std::net::IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a pointer to a list it allocates into `head`; on failure it
    // returns -1 and allocates nothing.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed; its fields
        // are valid for reads until freeifaddrs below.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: `ifa_name` is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if name.to_bytes() != iface.as_bytes() {
            continue;
        }
        // SAFETY: `ifa_addr` is non-null and points at a sockaddr whose family field is
        // always readable.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        match family {
            libc::AF_INET => {
                // SAFETY: for AF_INET the sockaddr is a sockaddr_in.
                let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                let a = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                out.push(std::net::IpAddr::V4(a));
            }
            libc::AF_INET6 => {
                // SAFETY: for AF_INET6 the sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                let a = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                if a.segments()[0] & 0xffc0 != 0xfe80 {
                    out.push(std::net::IpAddr::V6(a));
                }
            }
            _ => {}
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no reference into it outlives
    // this call (the addresses were copied out).
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Puts `ifindex` in promiscuous mode for as long as the returned socket is open (the kernel
/// counts such requests and undoes them when the socket closes, even on kill -9). The socket
/// has protocol 0 and is never bound, so it receives nothing. AF_XDP capture needs it: an
/// AF_XDP socket alone does not make the NIC accept frames for other MAC addresses.
pub(crate) fn promiscuous(ifindex: u32) -> io::Result<OwnedFd> {
    let fd = socket(
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
pub(crate) fn rx_vlan_offload(iface: &str, set: Option<bool>) -> io::Result<bool> {
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
    let fd = socket(libc::AF_INET, libc::SOCK_DGRAM, "socket for SIOCETHTOOL")?;
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
pub(crate) fn clock_ns(realtime: bool) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_call_is_named_and_keeps_the_os_error_as_its_source() {
        let e = socket(-1, libc::SOCK_RAW, "socket(-1)").unwrap_err();
        assert_eq!(e.to_string(), "socket(-1)");
        let os = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<io::Error>())
            .expect("the OS error is the source");
        assert_eq!(os.raw_os_error(), Some(libc::EAFNOSUPPORT));
        assert_eq!(e.kind(), os.kind());
        assert_eq!(capsule_store::error::chain(&e), format!("socket(-1): {os}"));
    }
}
