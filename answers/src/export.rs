//! The packets of a window: their plan (which segments and blocks a query reads), their
//! count, and the export itself as a stream of pcap or pcapng bytes. `capsule query`
//! (`--explain`, `--count`, `-w`), `GET /v1/packets` and triage's evidence all go through
//! here, so every export of the store is planned, filtered and reported alike.

use std::io::Write;

use capsule_index::plan::Plan;
use capsule_query::Query;
use capsule_replay::{ExportError, ExportOptions, ExportReport, Format};
use capsule_store::Store;

use serde::{Deserialize, Serialize};

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
    /// Only these segments (a fleet's candidate segments for this node): a listed segment
    /// the store does not hold is named and makes the answer partial.
    pub segments: Option<Vec<u64>>,
}

impl Request {
    /// Every packet of `query`, as pcap.
    pub fn of(query: Query) -> Request {
        Request {
            query,
            format: Format::Pcap,
            bpf: None,
            max_bytes: None,
            segments: None,
        }
    }

    fn options(&self) -> ExportOptions {
        ExportOptions {
            format: self.format,
            query: self.query.clone(),
            bpf: self.bpf.clone(),
            max_bytes: self.max_bytes,
            segments: self.segments.clone(),
            ..Default::default()
        }
    }
}

fn open(source: &Source) -> Result<Store, AnswerError> {
    source
        .open()
        .map_err(|e| AnswerError::Export(ExportError::from(e)))
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

/// What the export would write, counted without writing it.
#[derive(Debug)]
pub struct Sized {
    /// The count's report: packets, captured bytes, and what is missing.
    pub report: ExportReport,
    /// The exact size of the file [`stream`] would write, in bytes.
    pub file_bytes: u64,
}

/// Counts `req`'s packets and the exact size of its file (what a download shows before it
/// starts); `req.max_bytes` is not applied.
pub fn size(source: &Source, req: &Request) -> Result<Sized, AnswerError> {
    let (report, file_bytes) = capsule_replay::size(&open(source)?, &req.options())?;
    Ok(Sized { report, file_bytes })
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

/// One segment of a plan, as `query --explain` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentShown {
    pub seq: u64,
    pub blocks_total: usize,
    pub blocks_in_window: usize,
    pub blocks_to_read: usize,
    pub indexed: bool,
    pub unjournaled_blocks: usize,
}

/// A damaged journal record of an open segment the plan skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalNote {
    pub seq: u64,
    pub note: String,
}

/// A plan as `capsule query --explain` shows it and `GET /v1/plan` answers it: per
/// segment, the blocks in the window and those to read, and the totals. Both print it from
/// this one value, so a remote plan is the local one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanShown {
    pub segments: Vec<SegmentShown>,
    pub blocks_read: usize,
    pub blocks_total: usize,
    pub segments_touched: usize,
    pub unindexed: Vec<u64>,
    pub journal_notes: Vec<JournalNote>,
}

impl PlanShown {
    /// What `plan` shows.
    pub fn of(plan: &Plan) -> PlanShown {
        PlanShown {
            segments: plan
                .segments
                .iter()
                .map(|s| SegmentShown {
                    seq: s.seq,
                    blocks_total: s.blocks_total,
                    blocks_in_window: s.blocks_in_window,
                    blocks_to_read: s.blocks.len(),
                    indexed: s.indexed,
                    unjournaled_blocks: s.unjournaled,
                })
                .collect(),
            blocks_read: plan.blocks_read(),
            blocks_total: plan.blocks_total(),
            segments_touched: plan.segments_touched(),
            unindexed: plan.unindexed.clone(),
            journal_notes: plan
                .journal_notes
                .iter()
                .map(|(seq, why)| JournalNote {
                    seq: *seq,
                    note: why.to_string(),
                })
                .collect(),
        }
    }
}

/// The plan as `capsule query --explain --json` prints it ([`PlanShown`]).
pub fn plan_json(plan: &Plan) -> serde_json::Value {
    serde_json::to_value(PlanShown::of(plan)).expect("a plan is JSON")
}

/// What `capsule query --count` says and `GET /v1/count` answers: the packets and bytes
/// of the window, what was read to count them, and the flows the cut-off did not store
/// whole. `partial`: damaged or missing data was skipped ([`Counted::report`] says which).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Count {
    pub cut_flows: usize,
    pub cut_from_ns: Option<u64>,
    pub packets: u64,
    pub bytes: u64,
    pub blocks_read: usize,
    pub blocks_total: usize,
    pub segments_touched: usize,
    pub segments_total: usize,
    /// Seconds the count took.
    pub seconds: f64,
    pub drops_in_window: Option<u64>,
    pub from_ns: Option<u64>,
    pub to_ns: Option<u64>,
    pub partial: bool,
    /// Bytes fetched from the object store for this answer (segments trimmed after upload,
    /// read by range; docs/tier.md).
    #[serde(default)]
    pub tier_fetched_bytes: u64,
}

impl Count {
    /// The count of an export's `report` over `query`, with its cut flows.
    pub fn of(
        report: &ExportReport,
        cut: &capsule_index::flows::CutSummary,
        query: &Query,
        seconds: f64,
    ) -> Count {
        Count {
            cut_flows: cut.flows,
            cut_from_ns: cut.first_cut_ns,
            packets: report.packets,
            bytes: report.captured_bytes,
            blocks_read: report.blocks_read,
            blocks_total: report.blocks_total,
            segments_touched: report.segments_touched,
            segments_total: report.segments_total,
            seconds,
            drops_in_window: report.drops_in_window,
            from_ns: query.from_ns,
            to_ns: query.to_ns,
            partial: report.is_partial(),
            tier_fetched_bytes: 0,
        }
    }
}

/// A [`Count`] with what it was made from: the report (what was skipped, why; what the
/// store holds, `report.held`) and the segments the count opened (those the catalog did
/// not rule out).
#[derive(Debug)]
pub struct Counted {
    pub count: Count,
    pub report: ExportReport,
    pub segments: std::sync::Arc<Vec<capsule_store::SegmentReader>>,
}

/// Counts the packets and bytes of `req` and the flows of its window the cut-off cut.
pub fn counted(source: &Source, req: &Request) -> Result<Counted, AnswerError> {
    let t0 = std::time::Instant::now();
    let store = open(source)?;
    // The segments the count opened serve the cut-off summary too.
    let (report, segments) = capsule_replay::count_with_segments(&store, &req.options())?;
    let seconds = t0.elapsed().as_secs_f64();
    let store_err = |e| AnswerError::Store {
        store: source.store.display().to_string(),
        source: e,
    };
    let cut =
        capsule_index::flows::cut_summary(&store, &segments, &req.query).map_err(store_err)?;
    Ok(Counted {
        count: Count::of(&report, &cut, &req.query, seconds),
        report,
        segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_and_a_plan_read_back_from_their_json() {
        let c = Count {
            cut_flows: 2,
            cut_from_ns: Some(5),
            packets: 10,
            bytes: 1000,
            blocks_read: 3,
            blocks_total: 9,
            segments_touched: 1,
            segments_total: 2,
            seconds: 0.25,
            drops_in_window: None,
            from_ns: Some(1),
            to_ns: None,
            partial: true,
            tier_fetched_bytes: 7,
        };
        let back: Count = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let p = PlanShown {
            segments: vec![SegmentShown {
                seq: 4,
                blocks_total: 9,
                blocks_in_window: 5,
                blocks_to_read: 2,
                indexed: true,
                unjournaled_blocks: 0,
            }],
            blocks_read: 2,
            blocks_total: 9,
            segments_touched: 1,
            unindexed: vec![7],
            journal_notes: vec![JournalNote {
                seq: 7,
                note: "a torn record".into(),
            }],
        };
        let back: PlanShown = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
