//! The side index: what each segment holds, so queries plan without scanning and flow
//! questions are answered without reading a packet.
//!
//! This crate owns the data derived from segments (capsule-store holds the packets), how a
//! query is planned from it, and flow listings:
//!
//! ```text
//! store writer thread, per block (raw bytes)    -> SideIndexer (indexer.rs, the store's
//!   -> each packet's capsule_wire::dissect          Indexer) -> IndexBuilder (sideindex/)
//!      (the writer's producer hands it over with the block, taken while the packet was in
//!      its cache; a block read back from a segment is dissected here)
//!   -> FlowRecord per flow (both directions), BlockSummary per block, 1 s buckets
//!   -> each block's delta -> STORE/index/seg-N.journal while the segment is open (in the
//!      store's record framing, capsule_store::segment::journal, whose block part the
//!      store's reader of the open segment takes its blocks from)
//! segment sealed -> SegmentIndex -> STORE/index/seg-N.idx (tmp, fsync, rename), journal gone
//! query: capsule_query::Query -> plan (plan.rs): blocks in the window whose flows or DSCP
//!   set may match (the open segment's from its journal) -> capsule-replay reads exactly those
//! flows (flows.rs): flow records merged across segments, from the index alone
//! catalog (catalog.rs): STORE/index/catalog, one row per sealed segment (its addresses
//!   and ports): planning skips the index of a segment whose row rules the filter out
//! ```
//!
//! The index is derived data: [`sideindex::rebuild`] recomputes it from a segment's blocks,
//! and a missing or stale file is rebuilt by the next writer or by `capsule reindex`; one
//! damaged or deleted while a writer runs is rebuilt in the background (scrub.rs). Every
//! byte of an index file is specified in docs/format.md.
#![forbid(unsafe_code)]

pub mod catalog;
pub mod cutoff;
pub mod flows;
pub mod indexer;
pub mod millis;
pub mod names;
pub mod plan;
pub use flows::rollup;
mod scrub;
pub mod sideindex;

pub use indexer::{open_writer, reindex, verify_index, SideIndexer};
pub use plan::{plan, Plan, SegmentPlan};
