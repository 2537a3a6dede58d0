//! Sockets: a checked `socket()`, `setsockopt` and `getsockopt` (kernel structs read through
//! the [`Plain`] trait), a socket's pending error, and promiscuous membership.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::{check, SysError};

/// A new socket (close-on-exec), or the error naming the call and `what` it was for
/// (`socket(AF_PACKET) (needs root or CAP_NET_RAW)`).
pub(crate) fn socket(
    domain: libc::c_int,
    ty: libc::c_int,
    what: &str,
) -> Result<OwnedFd, SysError> {
    let call = match domain {
        libc::AF_PACKET => "socket(AF_PACKET)",
        libc::AF_XDP => "socket(AF_XDP)",
        libc::AF_INET => "socket(AF_INET)",
        _ => "socket",
    };
    // SAFETY: plain system call with plain integer arguments; the result is checked.
    let ret = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) };
    let raw = check(call, ret).map_err(|e| e.with_context(what))?;
    // SAFETY: `raw` is a new, valid descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Sets socket option `name` to `value`; `call` names the option in the error
/// (`PACKET_RX_RING`).
pub(crate) fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    call: &'static str,
) -> Result<(), SysError> {
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
    check(call, ret).map(drop)
}

/// Kernel structures that are plain data: every bit pattern, all-zero included, is a value.
///
/// # Safety
/// Implement only for `#[repr(C)]` integer-only types (and integers).
pub(crate) unsafe trait Plain: Sized {}
// SAFETY: each is an integer or a libc `#[repr(C)]` struct of integer fields only.
unsafe impl Plain for libc::c_int {}
// SAFETY: as above.
unsafe impl Plain for libc::tpacket_stats_v3 {}
// SAFETY: as above.
unsafe impl Plain for libc::xdp_statistics {}
// SAFETY: as above.
unsafe impl Plain for libc::xdp_mmap_offsets {}
// SAFETY: `#[repr(C)]`, integer fields only.
unsafe impl Plain for TcpInfoHead {}

/// The head of the kernel's `struct tcp_info` (include/uapi/linux/tcp.h), up to
/// `tcpi_bytes_acked` (Linux 4.1): the kernel writes as much of its struct as fits, and says
/// how much it wrote.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct TcpInfoHead {
    /// `tcpi_state` .. the wscale and rate bit fields: 8 bytes.
    flags: [u8; 8],
    /// `tcpi_rto` .. `tcpi_total_retrans`: 24 `u32`s.
    counters: [u32; 24],
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
}

/// The bytes of its stream the peer of TCP socket `fd` has acknowledged (`tcpi_bytes_acked`,
/// RFC 4898 `tcpEStatsAppHCThruOctetsAcked`): what reached the peer's TCP, whatever its
/// application has read of it. Still readable after the peer reset the connection.
pub fn tcp_bytes_acked(fd: &impl AsRawFd) -> Result<u64, SysError> {
    let (info, len) = getsockopt::<TcpInfoHead>(fd, libc::IPPROTO_TCP, libc::TCP_INFO, "TCP_INFO")?;
    if len < std::mem::size_of::<TcpInfoHead>() {
        return Err(SysError::new(
            "TCP_INFO",
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "the kernel's tcp_info has {len} bytes, without tcpi_bytes_acked (Linux 4.1)"
                ),
            ),
        ));
    }
    Ok(info.bytes_acked)
}

/// Reads socket option `name` as a `T`; returns it with the number of bytes the kernel wrote.
/// `call` names the option in the error.
pub(crate) fn getsockopt<T: Plain>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    call: &'static str,
) -> Result<(T, usize), SysError> {
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
    check(call, ret)?;
    Ok((value, len as usize))
}

/// Reads and clears a socket's pending error (SO_ERROR): 0 when there is none.
pub(crate) fn take_socket_error(fd: &OwnedFd) -> Result<libc::c_int, SysError> {
    getsockopt::<libc::c_int>(fd, libc::SOL_SOCKET, libc::SO_ERROR, "SO_ERROR").map(|(e, _)| e)
}

/// Puts interface `ifindex` in promiscuous mode for as long as packet socket `fd` is open.
pub(crate) fn add_promiscuous(fd: &OwnedFd, ifindex: u32) -> Result<(), SysError> {
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

/// Puts `ifindex` in promiscuous mode for as long as the returned socket is open (the kernel
/// counts such requests and undoes them when the socket closes, even on kill -9). The socket
/// has protocol 0 and is never bound, so it receives nothing. AF_XDP capture needs it: an
/// AF_XDP socket alone does not make the NIC accept frames for other MAC addresses.
pub fn promiscuous(ifindex: u32) -> io::Result<OwnedFd> {
    let fd = socket(libc::AF_PACKET, libc::SOCK_RAW, "for promiscuous mode")?;
    add_promiscuous(&fd, ifindex)?;
    Ok(fd)
}

/// Binds packet socket `fd` to interface `ifindex` for protocol `proto` (network byte
/// order; 0: sending only, the kernel queues nothing to the socket). `what` says where to
/// in the error (`to eth1`).
pub(crate) fn bind_packet(
    fd: &OwnedFd,
    ifindex: u32,
    proto: u16,
    what: &str,
) -> Result<(), SysError> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value, then filled in.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
    let ret = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    check("bind", ret).map_err(|e| e.with_context(what))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_bytes_acked_counts_what_the_peer_acknowledged() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        assert_eq!(super::tcp_bytes_acked(&s).unwrap(), 0);
        s.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 100_000];
        c.read_exact(&mut got).unwrap();
        let t0 = std::time::Instant::now();
        // Loopback acknowledges within microseconds; wait for the last ACK, not a guess.
        while super::tcp_bytes_acked(&s).unwrap() < 100_000 {
            assert!(t0.elapsed() < std::time::Duration::from_secs(5));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(super::tcp_bytes_acked(&s).unwrap(), 100_000);
        // The peer closes with bytes unread: its kernel resets the connection, and the
        // count is still there (what an audit reads after a client went away).
        s.write_all(&[7u8; 1000]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(c);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _ = s.write_all(&[7u8; 1000]);
        assert_eq!(super::tcp_bytes_acked(&s).unwrap(), 101_000);
    }

    #[test]
    fn a_failed_socket_names_the_call_and_what_it_was_for() {
        let e = socket(-1, libc::SOCK_RAW, "for a test").unwrap_err();
        assert_eq!(e.to_string(), "socket for a test");
        assert_eq!(e.raw_os_error(), Some(libc::EAFNOSUPPORT));
        let e = io::Error::from(e);
        let os = io::Error::from_raw_os_error(libc::EAFNOSUPPORT);
        assert_eq!(e.kind(), os.kind());
        assert_eq!(crate::error::chain(&e), format!("socket for a test: {os}"));
    }

    #[test]
    fn options_are_set_and_read_back_and_a_refused_one_is_named() {
        let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let fd = OwnedFd::from(a);
        let size: libc::c_int = 1 << 14;
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &size, "SO_RCVBUF").unwrap();
        let (got, len) =
            getsockopt::<libc::c_int>(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, "SO_RCVBUF").unwrap();
        // The kernel doubles what it is asked for (bookkeeping overhead).
        assert_eq!((got, len), (2 * size, std::mem::size_of::<libc::c_int>()));
        assert_eq!(take_socket_error(&fd).unwrap(), 0);
        // A packet-socket option on a Unix socket: refused, and named.
        let e = add_promiscuous(&fd, 1).unwrap_err();
        assert_eq!(e.call(), "PACKET_ADD_MEMBERSHIP promiscuous");
        assert!(e.raw_os_error().is_some(), "{e:?}");
    }
}
