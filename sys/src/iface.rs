//! Interfaces and clocks: an interface's index, the host's own addresses on it, its receive
//! VLAN offload (the ethtool ioctl), and the clock readings capture stamps packets with.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

use crate::error::check;
use crate::socket::socket;

/// The index of the interface named `iface`.
pub fn if_index(iface: &str) -> io::Result<u32> {
    let name = CString::new(iface).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL byte")
    })?;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    // 0 is its failure (not a negative number, so not through `check`): the one cause that
    // matters here is a missing interface, said as such.
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
pub fn host_addresses(iface: &str) -> io::Result<Vec<std::net::IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a pointer to a list it allocates into `head`; on failure it
    // returns -1 and allocates nothing.
    let ret = unsafe { libc::getifaddrs(&mut head) };
    check("getifaddrs", ret)?;
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
    let fd = socket(libc::AF_INET, libc::SOCK_DGRAM, "for SIOCETHTOOL")?;
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
    check("ETHTOOL_GFLAGS", ret).map_err(|e| e.with_context(format!("on {iface}")))?;
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
        check("ETHTOOL_SFLAGS", ret).map_err(|e| e.with_context(format!("rxvlan on {iface}")))?;
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
    // SAFETY: `ts` is a writable timespec. Both clocks always exist on Linux, so the call
    // cannot fail and its return is not checked.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_with_its_address_and_a_missing_interface_is_named() {
        assert!(if_index("lo").unwrap() >= 1);
        let e = if_index("capsule-none0").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("capsule-none0"), "{e}");
        let lo = host_addresses("lo").unwrap();
        assert!(lo.contains(&std::net::Ipv4Addr::LOCALHOST.into()), "{lo:?}");
        assert!(host_addresses("capsule-none0").unwrap().is_empty());
        let e = rx_vlan_offload("a-name-longer-than-ifnamsiz", None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn the_clocks_move_forward_and_realtime_is_past_2020() {
        let (m1, r) = (clock_ns(false), clock_ns(true));
        assert!(r > 1_577_836_800 * 1_000_000_000, "{r}");
        assert!(clock_ns(false) >= m1);
    }
}
