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
//! A stream that may stay open and idle (`tcpdump -w - | capsule import -`) goes through
//! [`import_live`], which reads on a thread of its own so that the writer can cut blocks by
//! age while no packet arrives. Live capture (AF_XDP per RX queue, AF_PACKET fallback) will
//! feed the same writer.
#![forbid(unsafe_code)]

pub mod import;

pub use import::{import_live, import_reader, FileProblem, FileReport, ImportError};
