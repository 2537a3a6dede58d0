//! The packets of a window: their plan (which segments and blocks a query reads), their
//! count, and the export itself as a stream of pcap or pcapng bytes. `capsule query`
//! (`--explain`, `--count`, `-w`), `GET /v1/packets` and triage's evidence all go through
//! here, so every export of the store is planned, filtered and reported alike.

use std::io::Write;

use capsule_index::plan::Plan;
use capsule_query::Query;
use capsule_replay::{ExportError, ExportOptions, ExportReport, Format};
use capsule_store::Store;

use crate::{AnswerError, Source};

/// Which packets, in which format, under which cap.
#[derive(Debug, Clone)]
pub struct Request {
    pub query: Query,
    pub format: Format,
    /// A tcpdump filter applied after the query's own (libpcap's compiler).
    pub bpf: Option<String>,
    /// At most this many bytes of output: the first packets that fit ([`ExportReport`]
    /// counts the rest).
    pub max_bytes: Option<u64>,
}

impl Request {
    /// Every packet of `query`, as pcap.
    pub fn of(query: Query) -> Request {
        Request {
            query,
            format: Format::Pcap,
            bpf: None,
            max_bytes: None,
        }
    }

    fn options(&self) -> ExportOptions {
        ExportOptions {
            format: self.format,
            query: self.query.clone(),
            bpf: self.bpf.clone(),
            max_bytes: self.max_bytes,
            ..Default::default()
        }
    }
}

fn open(source: &Source) -> Result<Store, AnswerError> {
    Store::open(&source.store).map_err(|e| AnswerError::Export(ExportError::from(e)))
}

/// Which segments and blocks the request reads, without reading a packet.
pub fn plan(source: &Source, req: &Request) -> Result<Plan, AnswerError> {
    Ok(capsule_replay::export::explain(
        &open(source)?,
        &req.options(),
    )?)
}

/// How many packets and bytes the export would hold, without writing one.
pub fn count(source: &Source, req: &Request) -> Result<ExportReport, AnswerError> {
    Ok(capsule_replay::count(&open(source)?, &req.options())?)
}

/// Writes the export into `out` as it is read, in timestamp order. The report says what it
/// holds and, when it is partial, what it misses ([`ExportReport::partial_note`]).
pub fn stream(
    source: &Source,
    req: &Request,
    out: impl Write,
) -> Result<ExportReport, AnswerError> {
    Ok(capsule_replay::export(&open(source)?, &req.options(), out)?)
}

/// The plan as `capsule query --explain --json` prints it: per segment, the blocks in the
/// window and those to read, and the totals.
pub fn plan_json(plan: &Plan) -> serde_json::Value {
    serde_json::json!({
        "segments": plan.segments.iter().map(|s| serde_json::json!({
            "seq": s.seq, "blocks_total": s.blocks_total, "blocks_in_window": s.blocks_in_window,
            "blocks_to_read": s.blocks.len(), "indexed": s.indexed,
            "unjournaled_blocks": s.unjournaled,
        })).collect::<Vec<_>>(),
        "blocks_read": plan.blocks_read(), "blocks_total": plan.blocks_total(),
        "segments_touched": plan.segments_touched(),
        "unindexed": plan.unindexed,
        "journal_notes": plan.journal_notes.iter().map(|(seq, why)| serde_json::json!({
            "seq": seq, "note": why.to_string()})).collect::<Vec<_>>(),
    })
}
