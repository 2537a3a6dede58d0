//! Rebuilding past windows as capture files.
//!
//! This crate owns the way out of the store. [`export::export`] asks the index's planner
//! which blocks can hold packets of the query (filter and window), decompresses them ahead of
//! need on worker threads, which also keep only the packets in [from, to) that pass the filter
//! and `--bpf`; merges them by timestamp across segments, lanes and interfaces; and streams
//! nanosecond pcap or pcapng (`if_tsresol` = 9) to any writer:
//!
//! ```text
//! Store -> plan (capsule_index::plan): blocks that may hold matches
//!   -> prefetch: read + crc32c + zstd decompress + window/filter/--bpf, in order, N threads
//!   -> k-way merge on (timestamp, segment, block, packet)   (ties keep write order)
//!   -> pcap / pcapng encoder -> io::Write (a closed pipe is reported as such)
//! ```
#![forbid(unsafe_code)]

pub mod export;
#[cfg(test)]
mod proptest_query;

pub use export::{export, ExportError, ExportOptions, ExportReport, Format};
