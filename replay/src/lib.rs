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
//! **Replay onto an interface** ([`send::replay`], `capsule replay`) is the same read and
//! merge with a paced sender at the end instead of an encoder: each packet's due time is its
//! recorded offset from the window's first packet (scaled by `--speed`), or `n / pps`, from
//! one start instant (no drift); the wait sleeps, then yields for the last 100 µs; frames
//! the interface cannot take (truncated in the store, over its MTU, not Ethernet) are
//! counted by cause. The frames go to a [`Wire`]; the binary's is capsule-capture's
//! `Transmitter` (an AF_PACKET raw socket), so this crate stays free of `unsafe` and of
//! system calls:
//!
//! ```text
//! plan -> prefetch -> k-way merge (as above) -> checks -> schedule -> wait -> Wire::send
//! ```
#![forbid(unsafe_code)]

mod encode;
mod error;
pub mod export;
mod pace;
mod prefetch;
#[cfg(test)]
mod proptest_query;
mod report;
pub mod send;
mod stats;

pub use encode::Format;
pub use error::ExportError;
pub use export::{
    bpf_linktypes, count, count_with_segments, export, size, ExportOptions, ExportReport,
    SkippedBlock,
};
pub use pace::Pacing;
pub use prefetch::{bpf_compiles, check_bpf_len, Bpf, MAX_BPF_LEN};
pub use send::{replay, NotSent, ReplayError, ReplayOptions, ReplayReport, Wire, WireError};
