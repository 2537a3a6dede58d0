//! The segment store and its side index.
//!
//! This crate owns everything capsule keeps on disk, and how it is searched. Packets flow
//! through it like this:
//!
//! ```text
//! StoreWriter::append(packet)                                      (writer.rs)
//!   -> pcapng Enhanced Packet Block into its lane's open block (one lane per DSCP class)
//!   -> block cut by size or age, sorted by time, sent to a compressor thread
//!   -> independent zstd frame with checksum, crc32c over the frame
//!   -> writer thread: retention (delete oldest segments under the byte budget),
//!      block header frame + zstd frame appended to the open segment      (segment.rs)
//!      the block's packets dissected into flow records                   (dissect.rs,
//!   -> segment sealed by size or age: footer, fsync, rename, fsync dir    sideindex.rs)
//!      and its side index written to index/seg-N.idx
//! query: Filter::parse (filter/) -> plan (plan.rs): blocks in the window whose flows or
//!   DSCP set may match -> SegmentReader::read_block: crc32c check, zstd decompress
//! flows (flows.rs): flow records merged across segments, from the index alone
//! ```
//!
//! Every byte of a segment and of an index file is specified in docs/format.md. A sealed
//! segment is an ordinary zstd-compressed pcapng: `zstd -dc` prints it, and a Wireshark that
//! reads multi-frame zstd files opens it directly.
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
