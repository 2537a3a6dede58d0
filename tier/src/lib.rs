//! Sealed segments tiered to S3-compatible object storage, and read back by range.
//!
//! ```text
//! [tier] (capsule-config) -> Client::new (readers) / Client::for_uploads (writers: its
//!   threads at the background's priority): credentials file, object_store's AmazonS3
//! writer-lock holder (capture, import): Uploader thread (nice 19, lowest best-effort I/O)
//!   ledger backlog (sealed, not `tiered`) -> index object, segment object
//!     (PUT if-none-match, or multipart above PART_BYTES, each part paced by upload_rate;
//!      an object already at the key is kept only when it is the same bytes) -> HEAD: size
//!      and ETag checked
//!   -> ledger `tiered SEQ BYTES ETAG` -> the writer re-applies its budgets: retention trims
//!   -> objects older than max_age deleted, ledger `expired SEQ`, local caches removed
//! verify (verify.rs): each tiered object's size and ETag against the ledger; --deep reads
//!   it whole: ETag recomputed from the bytes, then the segment checks of a local file
//! readers: Store::with_tier(Remote::tier) -> a trimmed segment opened by range: the footer
//!   (one GET of the last 4 KiB, one more when the footer is larger) and the header, kept
//!   in the store's footer cache, then only the blocks a plan reads, through a bounded
//!   in-memory block cache; a missing side index fetched whole; every byte fetched through
//!   a Remote is counted there (tier_fetched_bytes: one Remote per command or request)
//! ```
#![forbid(unsafe_code)]

mod client;
mod error;
mod remote;
mod upload;
mod verify;

pub use client::{Client, PART_BYTES};
pub use error::TierError;
pub use remote::Remote;
pub use upload::{backlog_of, chain, drain, drain_observed, expire, Drained, Step, Uploader};
pub use verify::{verify_tiered, Checked};
