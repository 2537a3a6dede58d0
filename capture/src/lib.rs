//! Getting packets into the store: import from capture files, live capture from a network
//! interface, and the status file of a running capture.
//!
//! **Import** ([`import`]): a pcap or pcapng stream is read by the checked reader of
//! `capsule-pcap`, each file interface is registered with the
//! [`StoreWriter`](capsule_store::StoreWriter), and every packet is appended with its
//! nanosecond timestamp, original length and interface:
//!
//! ```text
//! file or stdin -> CaptureReader (checked, offsets) -> Record::Interface -> add_interface
//!                                                   -> Record::Packet    -> StoreWriter::append
//! ```
//!
//! A stream that may stay open and idle (`tcpdump -w - | capsule import -`) goes through
//! [`import_live`], which reads on a thread of its own so that the writer can cut blocks by
//! age while no packet arrives.
//!
//! **Live capture** ([`live`]): one [`CaptureConfig`](live::CaptureConfig) says what to
//! capture, and [`live::open`] walks the fallback ladder (mode `auto`: AF_XDP with the XDP
//! program in the driver, then in the kernel's generic path, then AF_PACKET) to a
//! [`Capture`](live::Capture) whose `run` feeds the same writer until told to stop:
//!
//! ```text
//! AF_XDP:    NIC RX queue q -> XDP program (capsule-bpf) -> AF_XDP socket q (UMEM, fill and RX
//!            rings; zero-copy where the driver allows) -> one queue: the capture thread reads
//!            it; several: a worker thread per queue, batches over a bounded channel
//! AF_PACKET: NIC -> kernel -> TPACKET_V3 ring -> the capture thread
//! then:      VLAN tag put back where it was stripped -> snap length -> StoreWriter::append;
//!            StoreWriter::tick every turn (blocks cut by age: queryable within about a
//!            second); counters once a second, stored as interface statistics
//! ```
//!
//! **Transmit** ([`transmit`]): [`Transmitter`] sends whole frames onto an interface through
//! an AF_PACKET raw socket bound to it; `capsule replay` paces a past window through it.
//!
//! **Status** ([`status`]): a running capture rewrites `capture-status.json` in the store
//! about once a second (how it captures, counters, drops by cause, rates); `capsule status`
//! reads it.
//!
//! **Least privilege** ([`privs`]): after set-up a capture drops, in every thread, to the
//! `--user` account (if any) and the capabilities [`live::Capture::kept_capabilities`]
//! names, with no_new_privs; the store is opened with the account's file-system identity so
//! that its files are the account's.
//!
//! **No `unsafe` here.** Every system call capture makes (sockets, socket options, the
//! ethtool ioctl, clocks, the `bpf_link`, the privilege drop) and the two rings shared with
//! the kernel (TPACKET_V3 and AF_XDP) are capsule-sys's, the one crate allowed `unsafe`;
//! this crate holds the policy on top of them (the fallback ladder, what happens to each
//! packet, the typed errors users see) and forbids `unsafe` at its root, which no module can
//! lift. A failed call reaches capture as an `io::Error` carrying a
//! [`SysError`](capsule_sys::SysError) that names the call.

#![forbid(unsafe_code)]

pub mod import;
pub mod live;
pub mod privs;
pub mod status;
pub mod transmit;

pub use import::{import_live, import_reader, FileProblem, FileReport, ImportError};
pub use transmit::{SendError, TransmitError, Transmitter};

/// The unit tests run on the allocator the binary installs (the store's block buffers on
/// huge pages, everything else the system allocator's).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: capsule_sys::HugeAlloc = capsule_sys::HugeAlloc;
