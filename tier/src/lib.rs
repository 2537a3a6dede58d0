//! Sealed segments tiered to S3-compatible object storage, and read back by range.
//!
//! ```text
//! [tier] (capsule-config) -> Client::new: credentials file, object_store's AmazonS3
//! writer-lock holder (capture, import): Uploader thread
//!   ledger backlog (sealed, not `tiered`) -> index object, segment object
//!     (PUT if-none-match, or multipart above PART_BYTES; an object already at the key is
//!      kept only when it is the same bytes) -> HEAD: size and ETag checked
//!   -> ledger `tiered SEQ BYTES ETAG` -> the writer re-applies its budgets: retention trims
//!   -> objects older than max_age deleted, ledger `deleted SEQ`
//! verify (verify.rs): each tiered object's size and ETag against the ledger; --deep reads
//!   it whole: ETag recomputed from the bytes, then the segment checks of a local file
//! readers: Store::with_tier(Remote) -> a trimmed segment opened by range: the footer
//!   (one GET of the last 4 KiB, one more when the footer is larger), then only the blocks a plan reads, through a bounded
//!   in-memory block cache; every byte fetched is counted (tier_fetched_bytes)
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
pub use upload::{backlog_of, chain, drain, expire, Drained, Uploader};
pub use verify::{verify_tiered, Checked};
