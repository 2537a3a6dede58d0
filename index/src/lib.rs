//! The segment store and (later) its side index.
//!
//! This crate owns everything capsule keeps on disk. Packets flow through it like this:
//!
//! ```text
//! StoreWriter::append(packet)                               (writer.rs)
//!   -> pcapng Enhanced Packet Block appended to the open block (~1 MiB)
//!   -> block cut by size or age, sorted by time, sent to a compressor thread
//!   -> independent zstd frame with checksum, crc32c over the frame
//!   -> writer thread: retention (delete oldest segments under the byte budget),
//!      block header frame + zstd frame appended to the open segment   (segment.rs)
//!   -> segment sealed by size or age: footer, fsync, rename, fsync directory
//! Store::open_segments() -> SegmentReader per file           (store.rs, segment.rs)
//!   -> block list from the footer (sealed) or a header walk (open)
//!   -> read_block(i): crc32c check, zstd decompress -> pcapng blocks
//! ```
//!
//! Every byte of a segment is specified in docs/format.md; `format.rs` encodes and decodes
//! the metadata records. A sealed segment is an ordinary zstd-compressed pcapng file:
//! `tshark -r` opens it, `zstd -dc` prints it.
#![forbid(unsafe_code)]

pub mod dissect;
pub mod error;
pub mod filter;
pub mod flows;
pub mod format;
pub mod plan;
pub mod segment;
pub mod sideindex;
pub mod store;
pub mod writer;

pub use error::{Result, StoreError};
pub use segment::{SegmentReader, SegmentState};
pub use store::{SegmentEntry, Store};
pub use writer::{OpenReport, StoreWriter, WriteReport, WriterConfig};
