//! Getting packets into the store.
//!
//! This crate owns the ways packets arrive. Today that is offline import ([`import`]):
//! a pcap or pcapng stream is read by the checked reader of `capsule-pcap`, each file
//! interface is registered with the [`capsule_store::StoreWriter`], and every packet is
//! appended with its nanosecond timestamp, original length and interface:
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
//! Live capture ([`live`]) reads an interface through an AF_PACKET TPACKET_V3 ring
//! (`sys`, the one module with `unsafe` code), puts back VLAN tags the kernel stripped,
//! and feeds the same writer, ticking it so blocks are cut by age and packets are queryable
//! within about a second. AF_XDP sockets per RX queue are in `sys` too.

pub mod import;
pub mod live;
pub mod status;
// The one place with `unsafe` code: every system call and the rings shared with the kernel.
#[allow(unsafe_code)]
mod sys;

pub use import::{import_live, import_reader, FileProblem, FileReport, ImportError};

/// An error's message followed by its causes', `: ` between them (as anyhow's `{:#}` prints
/// a chain), for where an error becomes text: the list of XDP attempts, log lines.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
