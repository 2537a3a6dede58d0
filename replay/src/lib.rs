//! Rebuilding past windows as capture files.
//!
//! This crate owns the way out of the store. [`export::export`] asks the index's planner
//! which blocks can hold packets of the query (filter and window), decompresses them ahead of
//! need on worker threads, which also keep only the packets in [from, to) that pass the filter
//! and `--bpf`; merges them by timestamp across segments, lanes and interfaces; and streams
//! nanosecond pcap or pcapng (`if_tsresol` = 9) to any writer:
//!
//! ```text
//! Store -> plan (capsule_index::plan): blocks that may hold matches          export.rs
//!   -> read + crc32c + zstd decompress + window/filter/--bpf, N threads     prefetch.rs
//!      in plan order
//!   -> k-way merge on (timestamp, segment, block, packet)  (ties keep      export.rs
//!      write order); drops recorded in the window                          stats.rs
//!   -> pcap / pcapng encoder -> io::Write (a closed pipe is reported as     encode.rs
//!      such)
//! ```
//!
//! Replay of a window onto an interface (issue "serve") will live here too: it is the same read
//! and merge with a paced sender at the end instead of an encoder.
#![forbid(unsafe_code)]

mod encode;
mod error;
pub mod export;
mod prefetch;
#[cfg(test)]
mod proptest_query;
mod report;
mod stats;

pub use encode::Format;
pub use error::ExportError;
pub use export::{bpf_linktypes, export, ExportOptions, ExportReport, SkippedBlock};
pub use prefetch::{bpf_compiles, check_bpf_len, MAX_BPF_LEN};
