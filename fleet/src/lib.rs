//! capsule's fleet catalog: many capture points answered as one, through ClickHouse.
//!
//! ClickHouse is the fleet's catalog, never its store of record: every node keeps its packets
//! and its side index, and answers about its own data without ClickHouse. What a node
//! publishes, per sealed segment, is derived from its side index (docs/fleet.md):
//!
//! ```text
//! STORE/index/seg-N.idx  --stage-->  STORE/fleet/outbox/SEQ.LEN.batch   (written first:
//!   (sealed, current)                 RowBinary rows of three tables, crc32c, fsync, rename;
//!                                     STORE/fleet/staged remembers SEQ LEN)
//!      segment ledger row  capsule.segments   node, segment, span, flows, packets, bytes
//!      flow rows           capsule.flows      5-tuple, VLANs, DSCP set and counts, bytes,
//!                                             packets, first/last ns, TCP health counters,
//!                                             1-second buckets, node, segment
//!      per-minute rollups  capsule.minutes    node, minute, DSCP, sender's group
//!  outbox  --push-->  ClickHouse HTTP (INSERT ... FORMAT RowBinary), then the file removed;
//!                     the node's registry row (capsule.nodes: node, serve URL, version,
//!                     last seen, outbox backlog) written after each push
//! ```
//!
//! Every table is a ReplacingMergeTree keyed by node and segment (and flow, minute ...), so
//! a batch pushed twice (a crash between the insert and the file's removal, a store
//! published again) collapses to one row; readers ask with `FINAL`. ClickHouse down never
//! slows capture (staging is a file write off the capture path) and never loses a row (the
//! batch stays in the outbox until ClickHouse took it).
//!
//! The schema is chosen by the server's version ([`schema::Schema::for_version`]): Debian's
//! ClickHouse 18.16 has no DateTime64, IPv4/IPv6 types, TTL or skip indexes, so times are
//! UInt64 nanoseconds and addresses FixedString(16) (IPv4 as IPv4-mapped IPv6); current
//! releases get IPv6 and LowCardinality(String) columns, the same bytes in RowBinary.
//!
//! Fleet questions ([`ask::answer`]) read the flow rows of a window back, rebuild the side
//! index's flow counts, merge them as a store's segments merge
//! (`capsule_index::flows::merge_counts`) and answer with the same code and the same answer
//! types as a local question, so the renderers and `--json` are the local ones.
#![forbid(unsafe_code)]

use std::path::PathBuf;

pub mod ask;
pub mod clickhouse;
pub mod diff;
pub mod merge;
pub mod nodes;
pub mod outbox;
pub mod plan;
pub mod publish;
pub mod rowbinary;
pub mod rows;
pub mod schema;
pub mod series;
pub mod spool;

pub use clickhouse::ClickHouse;

/// The database every fleet table lives in.
pub const DATABASE: &str = "capsule";

/// What went wrong publishing to, or asking, the fleet catalog.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// ClickHouse could not be reached (refused, timed out, reset): the outbox keeps what
    /// was not pushed.
    #[error("ClickHouse at {url} is unreachable")]
    Unreachable {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    /// ClickHouse answered with an error.
    #[error("ClickHouse at {url} refused {what}: HTTP {status}: {message}")]
    Server {
        url: String,
        what: String,
        status: u16,
        message: String,
    },
    /// Bytes that do not decode as what was expected (a ClickHouse answer, an outbox file).
    #[error("{what}: {problem}")]
    Decode { what: String, problem: String },
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("store {store}")]
    Store {
        store: String,
        #[source]
        source: capsule_store::StoreError,
    },
    /// The question cannot be asked so (a missing config): the asker's to fix.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Answer(Box<capsule_answers::AnswerError>),
}

impl From<capsule_answers::AnswerError> for FleetError {
    fn from(e: capsule_answers::AnswerError) -> Self {
        FleetError::Answer(Box::new(e))
    }
}

impl FleetError {
    /// Whether ClickHouse could not be reached at all (not an error it answered with).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, FleetError::Unreachable { .. })
    }

    /// Whether the asker is to blame.
    pub fn is_usage(&self) -> bool {
        match self {
            FleetError::Usage(_) => true,
            FleetError::Answer(e) => e.is_usage(),
            _ => false,
        }
    }
}

pub(crate) fn io(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> FleetError {
    let path = path.into();
    move |source| FleetError::Io { op, path, source }
}
