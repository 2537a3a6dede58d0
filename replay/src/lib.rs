//! Rebuilding past windows as capture files.
//!
//! This crate owns the way out of the store. [`export::export`] plans which blocks can hold
//! packets of the requested window, decompresses them ahead of need on worker threads, merges
//! their packets by timestamp across segments and interfaces, cuts the window exactly at the
//! nanosecond, and streams nanosecond pcap or pcapng (`if_tsresol` = 9) to any writer:
//!
//! ```text
//! Store -> segments -> blocks overlapping [from, to)       (plan)
//!   -> prefetch: read + crc32c + zstd decompress, in order, N threads
//!   -> k-way merge on (timestamp, segment, block, packet)   (stable: ties keep write order)
//!   -> window cut + packet filter -> pcap / pcapng encoder -> io::Write
//! ```
#![forbid(unsafe_code)]

pub mod export;
#[cfg(test)]
mod proptest_query;

pub use export::{export, ExportError, ExportOptions, ExportReport, Format};
