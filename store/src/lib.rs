//! The segment store: everything capsule keeps on disk about packets themselves.
//!
//! This crate owns the store directory, the byte layout of segment files, the writer
//! pipeline that fills them, retention, crash recovery and the readers. Packets flow through
//! it like this:
//!
//! ```text
//! StoreWriter::append(packet)                                   (writer/mod.rs)
//!   -> pcapng Enhanced Packet Block into its lane's open block (one lane per DSCP class)
//!   -> block cut by size or age, sorted by time, sent to a compressor thread
//!   -> zstd frame at the rung the ladder picks, crc32c over it    (writer/compress.rs)
//!      (at --level store: the block built as its raw frame, written from its buffer)
//!   -> writer thread: retention (delete oldest segments under the    (writer/disk.rs,
//!      byte budget), block header frame + frame appended to the       writer/retention.rs,
//!      open segment, the block handed to the Indexer (derived data:   segment/)
//!      capsule-index's side index)
//!   -> segment sealed by size or age: footer, fsync, rename, fsync dir
//! readers: Store::open_segments -> SegmentReader (footer, or block  (store.rs,
//!   headers of the open segment) -> read_block: crc32c check, zstd   segment/reader.rs)
//!   decompress
//! compactor thread (capture) or `capsule compact`: sealed segments'   (writer/compactor.rs,
//!   blocks below the target level recompressed into a temporary file  writer/compact.rs)
//!   -> writer thread: rename over the sealed name, Indexer::compacted
//! format.rs: every byte of the segment's metadata records, encoded and decoded.
//! ```
//!
//! Every call that changes what a power loss leaves (writes, truncates, syncs, creations,
//! renames, unlinks, directory fsyncs) goes through `durable/`, a seam that in the crate's
//! unit tests also records them, so that the tests can build the file system a power loss
//! at any point would leave and open it with the real recovery.
//!
//! The store knows nothing of flows or filters: what is derived from the packets (the side
//! index) is built by an [`Indexer`] that the writer calls on its writer thread, so the
//! dependency points from the index to the store and never back.
//!
//! Every byte of a segment is specified in docs/format.md. A sealed segment is an ordinary
//! zstd-compressed pcapng: `zstd -dc` prints it, and a Wireshark that reads multi-frame zstd
//! files opens it directly.
#![forbid(unsafe_code)]

pub use writer::compact;
pub mod budget;
pub mod crc;
mod durable;
pub mod error;
pub mod format;
pub mod fsx;
pub mod indexer;
pub mod ledger;
pub mod remote;
pub mod segment;
mod seq;
pub mod store;
pub mod verify;
pub mod writer;

pub use error::{Result, StoreError};
pub use indexer::{Indexer, NoIndex};
pub use segment::{SegmentReader, SegmentState};
pub use store::{now_ns, Held, ListingSnapshot, SegmentEntry, Selected, Store, Unreadable};
pub use writer::{CutPolicy, OpenReport, StoreWriter, WriteReport, WriterConfig};

/// The unit tests run on the allocator the binary installs (block buffers and the direct
/// window on huge pages, everything else the system allocator's).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: capsule_sys::HugeAlloc = capsule_sys::HugeAlloc;
