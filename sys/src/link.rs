//! The `bpf_link` that attaches capsule's XDP program to an interface (`BPF_LINK_CREATE`).
//!
//! A link, unlike the netlink attach `ip link set xdp` uses, belongs to the descriptor that
//! made it: the program detaches when the descriptor closes, also when capsule is killed.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::error::{check, SysError};

/// How to attach the XDP program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAttach {
    /// In the driver (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the kernel's generic path after the skb is built (`XDP_FLAGS_SKB_MODE`).
    Generic,
}

impl std::fmt::Display for XdpAttach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XdpAttach::Native => "native",
            XdpAttach::Generic => "generic",
        })
    }
}

/// Attaches the program `prog_fd` to `ifindex` through a `bpf_link` (`BPF_LINK_CREATE`).
/// The program stays attached as long as the returned descriptor is open, so it detaches when
/// capsule exits, however it exits.
pub fn xdp_link(prog_fd: RawFd, ifindex: u32, mode: XdpAttach) -> Result<OwnedFd, SysError> {
    const BPF_LINK_CREATE: libc::c_long = 28;
    const BPF_XDP: u32 = 37;
    const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
    const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
    // union bpf_attr, link_create member: prog_fd, target_ifindex, attach_type, flags; the
    // rest of the (zeroed) union is unused for XDP.
    let mut attr = [0u32; 16];
    attr[0] = prog_fd as u32;
    attr[1] = ifindex;
    attr[2] = BPF_XDP;
    attr[3] = match mode {
        XdpAttach::Native => XDP_FLAGS_DRV_MODE,
        XdpAttach::Generic => XDP_FLAGS_SKB_MODE,
    };
    // SAFETY: bpf(2) reads `size_of_val(&attr)` bytes from a live, initialized buffer laid out
    // as the link_create member of union bpf_attr; the result is checked.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr) as libc::c_uint,
        )
    };
    let ret = check("BPF_LINK_CREATE", ret).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::EBUSY | libc::EEXIST) => {
                " (another XDP program is attached; `ip link show` names it)"
            }
            Some(libc::EOPNOTSUPP) => " (the driver has no native XDP)",
            _ => "",
        };
        e.with_context(format!("for attaching XDP ({mode}){hint}"))
    })?;
    // SAFETY: a non-negative return of BPF_LINK_CREATE is a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_to_a_bad_program_is_an_error_naming_the_mode() {
        let e = xdp_link(-1, 1, XdpAttach::Generic).unwrap_err().to_string();
        assert!(e.contains("attaching XDP (generic)"), "{e}");
    }
}
