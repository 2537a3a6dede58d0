//! capsule's questions and answers as typed values.
//!
//! Every consumer of the store above the libraries asks through this crate: the CLI
//! commands (arguments -> request -> answer -> text or JSON), the HTTPS server (route ->
//! request -> answer -> JSON or text), the triage report (answers -> report), and later the
//! web console and the fleet coordinator. A request is a value (a [`Query`] and the
//! question's own options), never a command line; an answer is a value that serialises to
//! the JSON document the CLI prints with `--json` and the server sends, and it carries the
//! limits of what it says (what is missing, what the window reaches past), so that no
//! consumer can present a partial answer as whole.
//!
//! ```text
//! Source { store, config, tier }  +  analytics::Request { query, question }
//!     -> analytics::answer      -> index only (capsule-analytics over capsule-index)
//!     -> analytics::Answer { question, window (store, filter, from, to, limits), body }
//!          .to_json()   the `--json` document (and /v1/top, /v1/tcp, ...)
//!          .missing()   why it is partial (exit 3, `capsule-partial`), empty when whole
//! Source + flows::Request { query, sort, limit }
//!     -> flows::answer          -> flows::Answer { listing, missing }
//! Source + export::Request { query, format, bpf, max_bytes }
//!     -> export::plan / count / stream(out)   the packets themselves (pcap, pcapng)
//! status::Request { level, max_bytes } -> status::answer -> status::Answer (the store and
//!                               the capture writing it)
//! segments::answer(source)      -> segments::Answer (one row per segment, where it lives)
//! merge::inputs(a, b)           the flows of two adjacent windows as one; answers combine
//!                               by being made again from them (Kind::merge_rule says why
//!                               no answer merges exactly by itself)
//! params                        a question as /v1 parameters and back (--server, serve)
//! ```
//!
//! Rendering is not here: text tables belong to the binary's renderer, HTML to the report;
//! both take these answers and read no store.
#![forbid(unsafe_code)]

use std::path::PathBuf;

pub use capsule_query::Query;

pub mod analytics;
pub mod export;
pub mod flows;
pub mod merge;
pub mod params;
pub mod segments;
pub mod status;

/// Where answers come from: a store directory and, when the operator gave one, the config
/// (host groups, DSCP and egress policy, alert rules) the questions that need it answer
/// with, and the tier its trimmed segments are read through.
#[derive(Debug, Clone)]
pub struct Source {
    /// The store directory, as the operator named it (it appears in the commands that
    /// findings print).
    pub store: PathBuf,
    pub config: Option<capsule_config::Config>,
    /// The object store the segments trimmed after upload are read from (`[tier]`);
    /// without it they are named as unreadable and the answers over them are partial.
    pub tier: Option<capsule_store::remote::Tier>,
}

impl Source {
    /// A source without a config or a tier.
    pub fn store(store: impl Into<PathBuf>) -> Source {
        Source {
            store: store.into(),
            config: None,
            tier: None,
        }
    }

    /// This source, reading the trimmed segments through `tier`.
    pub fn with_tier(self, tier: Option<capsule_store::remote::Tier>) -> Source {
        Source { tier, ..self }
    }

    /// Opens the store, with the tier.
    pub fn open(&self) -> Result<capsule_store::Store, capsule_store::StoreError> {
        Ok(capsule_store::Store::open(&self.store)?.with_tier(self.tier.clone()))
    }
}

/// Why a question got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// The capture's status file could not be read (not a damaged one: that is a warning).
    #[error("cannot read the capture's status file: {0}")]
    Status(#[source] std::io::Error),
    /// The question cannot be asked so (a missing config, a group the window cannot judge,
    /// an interval out of range): the asker's to fix (exit 2, HTTP 400).
    #[error("{0}")]
    Usage(String),
    /// The store or its index could not be read.
    #[error(transparent)]
    Analytics(#[from] capsule_analytics::AnalyticsError),
    /// The packets could not be exported (the store, a damaged segment, a `--bpf` filter).
    #[error(transparent)]
    Export(#[from] capsule_replay::ExportError),
    #[error("store {store}: {source}")]
    Store {
        store: String,
        #[source]
        source: capsule_store::StoreError,
    },
}

impl AnswerError {
    /// Whether the asker is to blame (a usage error), not the store.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            AnswerError::Usage(_)
                | AnswerError::Analytics(capsule_analytics::AnalyticsError::Usage(_))
                | AnswerError::Export(
                    capsule_replay::ExportError::Bpf { .. }
                        | capsule_replay::ExportError::BpfTooLong { .. }
                        | capsule_replay::ExportError::MixedLinkTypes(_)
                )
        )
    }
}
