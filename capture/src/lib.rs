//! Getting packets into the store.
//!
//! This crate owns the ways packets arrive. Today that is offline import ([`import`]):
//! a pcap or pcapng stream is read by the checked reader of `capsule-pcap`, each file
//! interface is registered with the [`capsule_index::StoreWriter`], and every packet is
//! appended with its nanosecond timestamp, original length and interface:
//!
//! ```text
//! file or stdin -> CaptureReader (checked, offsets) -> Record::Interface -> add_interface
//!                                                   -> Record::Packet    -> StoreWriter::append
//! ```
//!
//! Live capture (AF_XDP per RX queue, AF_PACKET fallback) feeds the same writer and arrives
//! with the [capture] issue.
#![forbid(unsafe_code)]

pub mod import;

pub use import::{import_live, import_reader, FileProblem, FileReport, ImportError};
