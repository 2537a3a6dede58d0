//! The one door to the kernel: every system call capsule makes, the memory rings it shares
//! with the kernel, and the binary's global allocator. This crate holds every line of
//! `unsafe` code in capsule; every other crate's root says `#![forbid(unsafe_code)]`, and
//! `scripts/check_layout.py` refuses `unsafe` anywhere outside `sys/src/`.
//!
//! What it owns:
//!
//! * the calls themselves: a checked `socket()`, `setsockopt` and `getsockopt` (kernel
//!   structs read through a `Plain` trait), promiscuous membership ([`promiscuous`]), the
//!   interface index and the host's own addresses ([`if_index`], [`host_addresses`]), the
//!   ethtool receive-VLAN-offload ioctl ([`rx_vlan_offload`]), clock reads ([`clock_ns`]);
//! * [`tpacket`]: the AF_PACKET TPACKET_V3 receive ring;
//! * [`xsk`]: AF_XDP sockets (UMEM, fill and RX rings);
//! * [`tx`]: the AF_PACKET raw socket `capsule replay` sends frames through, and the
//!   interface's MTU and hardware type;
//! * [`link`]: the `bpf_link` that attaches the XDP program (a raw `bpf(2)` call, which is
//!   why it lives here and not in capsule-bpf, whose loader is libbpf-rs);
//! * [`prio`]: the calling thread's CPU and I/O priority (the tier's uploader lowers its
//!   own);
//! * [`privs`]: user and group look-ups, the file-system identity the store is opened with,
//!   and the privilege drop in every thread (credentials are per thread in Linux);
//! * [`huge`]: [`HugeAlloc`], the binary's global allocator: the system allocator, except
//!   for the large buffers made by [`huge::vec_with_capacity`] and [`huge::zeroed_vec`] (the
//!   store's block buffers and direct window), which get their own mappings on transparent
//!   huge pages (a `#[global_allocator]` is a safe static to install);
//! * the mappings the rings live in (`Mapping`: a socket's ring, or an anonymous UMEM on
//!   huge pages), unmapped when their owner drops.
//!
//! How data flows through it:
//!
//! ```text
//! kernel AF_XDP  -> XDP program -> UMEM frame + RX descriptor -> xsk::XskSocket::recv
//!                   (the frame goes straight back on the fill ring)  -> capsule-capture
//! kernel AF_PACKET -> TPACKET_V3 block (status word TP_STATUS_USER)
//!                   -> tpacket::PacketRing::next_block (block handed back) -> capsule-capture
//! capsule-capture's transmit -> tx::PacketTx::send -> send(2) -> the interface
//! every call's return -> check / check_map (private) -> the value, or a SysError naming it
//! ```
//!
//! The one door: every return value of a C call goes through one private function, `check`
//! (`check_map` for `mmap`), which gives the value or a [`SysError`]: the call's name, what
//! it was for where that varies (`bind to eth1`), and the OS error as its source (the
//! exceptions, calls whose failure does not matter or is reported another way, are listed
//! in `error.rs`). A public function that is one call returns the `SysError` itself
//! ([`tx::PacketTx::send`], [`link::xdp_link`]); one that makes several calls, or refuses a
//! bad argument before any, returns [`std::io::Result`], the `SysError` inside the
//! `io::Error` with the OS error's kind. Either way an error chain printed with `: ` between
//! causes (anyhow's `{:#}`) reads `bind to eth1: No such device (os error 19)`.
//!
//! The rules of the crate:
//!
//! * every `unsafe` block carries a `// SAFETY:` comment (the workspace denies
//!   `clippy::undocumented_unsafe_blocks`), and every access to a ring shared with the
//!   kernel says which kernel-side barrier its memory ordering pairs with (module docs of
//!   [`tpacket`] and [`xsk`]);
//! * what the kernel wrote into a ring is parsed by safe code (`tpacket`'s block walk, the
//!   descriptor checks of `xsk`): every offset and length is checked against the mapping
//!   before use;
//! * the workspace denies `unsafe_code`; this crate alone allows it, at its root, and only
//!   what needs a raw call or a shared ring lives here: policy (which mode to try, what to do
//!   with a packet) stays in capsule-capture, which forbids `unsafe`.
//!
//! In unit tests a fake kernel (the test-only `fake` module) plays the kernel's side of both
//! rings over ordinary heap memory standing in for the mappings, so the ring code runs
//! unchanged without root: index arithmetic and its wrap-around, frames given back, blocks
//! handed over in order, fragments joined, descriptors that lie. What it cannot show is the
//! kernel's own behaviour (its barriers, what a driver does): tests/capture_live.rs does,
//! as root, on veth pairs.

#![allow(unsafe_code)]

pub mod counting;
mod error;
#[cfg(test)]
mod fake;
pub mod huge;
mod iface;
pub mod link;
mod mapping;
pub mod prio;
pub mod privs;
mod socket;
pub mod tpacket;
pub mod tx;
pub mod xsk;

pub use error::SysError;
pub use huge::HugeAlloc;
pub use iface::{clock_ns, host_addresses, if_index, rx_vlan_offload};
pub use socket::{promiscuous, tcp_bytes_acked};

/// The unit tests run on the allocator the binary installs.
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: HugeAlloc = HugeAlloc;
