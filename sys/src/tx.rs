//! An AF_PACKET `SOCK_RAW` socket that sends whole link-layer frames onto one interface
//! (`capsule replay`). Protocol 0, so the kernel hands it nothing to receive; bound to the
//! interface's index, so a plain `send` puts each frame on that interface as it is, the
//! link-layer header included.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::error::{check, SysError};
use crate::iface::if_index;
use crate::socket::{bind_packet, socket};

/// A packet socket bound to one interface for sending.
#[derive(Debug)]
pub struct PacketTx {
    fd: OwnedFd,
    ifindex: u32,
}

impl PacketTx {
    /// Opens a sending socket on `iface` (needs CAP_NET_RAW).
    pub fn open(iface: &str) -> io::Result<PacketTx> {
        let ifindex = if_index(iface)?;
        let fd = socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            "for sending (needs root or CAP_NET_RAW)",
        )?;
        // Protocol 0: bound for sending only; the kernel queues nothing to this socket.
        bind_packet(&fd, ifindex, 0, &format!("to {iface}"))?;
        Ok(PacketTx { fd, ifindex })
    }

    /// The interface index the socket is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Sends one frame; blocks while the socket's send buffer is full. The error's
    /// [`raw_os_error`](SysError::raw_os_error) says why (`EMSGSIZE`: too long for the
    /// interface; `ENOBUFS`: its queue is full; `ENETDOWN`: it is down).
    pub fn send(&self, frame: &[u8]) -> Result<(), SysError> {
        // SAFETY: `frame` is a live slice of `frame.len()` readable bytes for the duration of
        // the call; the kernel only reads them.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        let n = check("send", n)?;
        if n as usize != frame.len() {
            return Err(SysError::new(
                "send",
                io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("it took {n} of {} bytes", frame.len()),
                ),
            ));
        }
        Ok(())
    }
}

/// The MTU of `iface` (SIOCGIFMTU) and its hardware type (SIOCGIFHWADDR: `ARPHRD_ETHER` = 1
/// for Ethernet and veth).
pub fn mtu_and_hwtype(iface: &str) -> io::Result<(u32, u16)> {
    if iface.len() >= libc::IFNAMSIZ || iface.as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {iface:?}"),
        ));
    }
    // A missing interface is named as such (the ioctl would say only "No such device").
    if_index(iface)?;
    let name = CString::new(iface).expect("checked: no NUL");
    let fd = socket(libc::AF_INET, libc::SOCK_DGRAM, "for SIOCGIFMTU")?;
    // SAFETY: ifreq is plain data (a name and a union of integers and sockaddrs); all-zero is
    // a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *b as libc::c_char;
    }
    // SAFETY: `req` is an ifreq whose name is NUL-terminated (checked length, zeroed tail);
    // the kernel writes the MTU into its union.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
    check("SIOCGIFMTU", ret).map_err(|e| e.with_context(format!("on {iface}")))?;
    // SAFETY: after SIOCGIFMTU the union holds `ifru_mtu`, an integer.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    // SAFETY: as above, for SIOCGIFHWADDR, which writes a sockaddr into the union.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) };
    check("SIOCGIFHWADDR", ret).map_err(|e| e.with_context(format!("on {iface}")))?;
    // SAFETY: after SIOCGIFHWADDR the union holds `ifru_hwaddr`, a sockaddr of integers.
    let hwtype = unsafe { req.ifr_ifru.ifru_hwaddr.sa_family };
    Ok((mtu.max(0) as u32, hwtype))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_an_mtu_and_a_missing_interface_is_named() {
        let (mtu, hw) = mtu_and_hwtype("lo").unwrap();
        assert!(mtu >= 1500, "lo mtu {mtu}");
        assert_eq!(hw, libc::ARPHRD_LOOPBACK);
        let e = PacketTx::open("capsule-none0").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("capsule-none0"), "{e}");
        let e = mtu_and_hwtype("capsule-none0").unwrap_err();
        assert!(crate::error::chain(&e).contains("capsule-none0"), "{e}");
    }
}
