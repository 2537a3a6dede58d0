//! Fleet questions: the analytics of a window over every node, from the catalog.
//!
//! The flow rows of the window come back from ClickHouse (`FINAL`: one row per node,
//! segment and flow however often it was pushed), are rebuilt into the side index's flow
//! counts, and are merged and cut to the window and filter by the same code that merges a
//! store's segments (`capsule_index::flows::merge_counts`); the answer is then made by the
//! same code as a local one (`capsule_answers::analytics::body`), so it is the same type,
//! rendered by the same renderers. The filter is applied here, not in SQL: it is the query
//! language's own matcher, exactly as on a node.

use capsule_answers::analytics::{self, Answer, Question, Request, Window};

use crate::clickhouse::ClickHouse;
use crate::rowbinary::Reader;
use capsule_index::sideindex::FlowCounts;

use crate::rows::{NodeRow, Origin};
use crate::{FleetError, DATABASE};

/// The name fleet answers give as their store (findings' export commands name it).
pub const FLEET_STORE: &str = "fleet";

/// A fleet answer, and the nodes whose outbox held batches at their last publish (their
/// newest segments may be missing from it).
#[derive(Debug, Clone)]
pub struct FleetAnswer {
    pub answer: Answer,
    pub behind: Vec<NodeRow>,
    /// What else the answer misses, named (a node's segments without a millisecond series
    /// in the catalog): the answer is partial when not empty.
    pub missing: Vec<String>,
}

/// Answers `req` over every node the catalog at `ch` holds (`config`: the groups and policy,
/// needed by the questions that need them, as locally).
pub fn answer(
    ch: &ClickHouse,
    req: &Request,
    config: Option<&capsule_config::Config>,
) -> Result<FleetAnswer, FleetError> {
    let question = &req.question;
    if let (None, Some(what)) = (config, question.needs_config()) {
        return Err(FleetError::Usage(format!(
            "{what} needs --config FILE: the host groups (and policy) it answers with"
        )));
    }
    if let Question::Bursts { .. } = question {
        analytics::bursts_filter(&req.query)?;
    }
    let (from, to) = req.query.window();
    // The millisecond series of the window, when the question reads it.
    let series = match (question, config) {
        (Question::Bursts { .. }, _) => true,
        (Question::Alerts, Some(c)) => capsule_analytics::alerts::msrules::needs_series(c),
        _ => false,
    };
    // Every question to ClickHouse at once: the answer waits for the slowest, not the sum
    // (and the tables are checked only if one is refused). The flow rows (most of the
    // answer's time: their decode keeps a core busy while they stream) have a thread of
    // their own; the two small questions are asked on this one meanwhile, one after the
    // other: on threads of their own they waited behind the decode for a core, and their
    // answers came after the last row.
    let asked = crate::schema::with_tables(ch, || {
        std::thread::scope(|s| {
            let records = s.spawn(|| {
                crate::plan::flow_rows(
                    ch,
                    &req.query,
                    question.buckets(),
                    crate::plan::Table::for_question(question),
                )
            });
            let listing = series.then(|| s.spawn(|| crate::series::listing(ch, from, to)));
            let held = held(ch);
            let registry = crate::nodes::registry(ch);
            Ok((
                joined(records)?,
                held?,
                registry?,
                listing.map(joined).transpose()?,
            ))
        })
    })?;
    let (records, held, registry, listing) = asked;
    // What a store's listing gives with its flows: the DNS answers of every flow of the
    // window (they name destinations whose own flows name nothing), and the filter's name
    // terms resolved over the window's flows (index/src/names.rs), as on a node.
    let mut dns = capsule_index::names::DnsNames::default();
    capsule_index::flows::window_answers(records.iter().map(|r| &r.1), from, to, &mut dns);
    let (query, mut missing) = resolve_names(&req.query, &records);
    let flows = capsule_index::flows::merge_counts(
        records.into_iter().map(|(o, f)| (f, o.kept.tunnels)),
        &query,
        question.buckets(),
    );
    let filter = req.query.filter.to_string();
    let mut input =
        capsule_analytics::assemble(flows, held, &req.query, &filter, FLEET_STORE.to_string());
    input.dns = dns;
    input.limits.drops = Some(
        "drops: each node records its own capture's drops (`capsule status` on the node)"
            .to_string(),
    );
    let listing = if let Some(got) = listing {
        let (mut listing, no_series) = got;
        // Asked for the question's window; cut to the answer's (bounded by what is held),
        // as a store's series is.
        crate::series::cut(&mut listing, input.from_ns, input.to_ns);
        for (node, segments) in no_series {
            missing.push(format!(
                "node {node}: no millisecond series in the catalog for segment(s) \
                 {segments:?} (published by a release before the series, or indexed before \
                 it: `capsule reindex` on the node, then `capsule fleet publish`)"
            ));
        }
        Some(listing)
    } else {
        None
    };
    // The link rates are stated against: the asker's `[links]`, its only entry.
    let link = analytics::link_in(config, || None);
    let body = match (question.bursts_ask(), question, &listing, config) {
        (Some(ask), _, Some(listing), _) => {
            let mut b = capsule_analytics::bursts::bursts(&input, listing, link, ask)
                .map_err(capsule_answers::AnswerError::from)?;
            b.notes.extend(missing.iter().cloned());
            analytics::Body::Bursts(Box::new(b))
        }
        (None, Question::Alerts, Some(listing), Some(config)) => {
            let ms = capsule_analytics::alerts::msrules::MsInput {
                listing,
                link_bps: link.map(|l| l.bits_per_second),
            };
            analytics::alerts_over(&input, config, Some(&ms))?
        }
        _ => analytics::body(&input, question, config)?,
    };
    let behind = registry.into_iter().filter(|n| n.backlog > 0).collect();
    Ok(FleetAnswer {
        answer: Answer {
            question: question.clone(),
            window: Window::of(&input),
            body,
        },
        behind,
        missing,
    })
}

/// `query` with its filter's name terms (`sni`, `dns`, `http.host`, `app`) resolved over
/// `records` (flow rows of its window, with what their node's index kept and where they
/// come from) as a store resolves them over its window's flows (index/src/names.rs), and
/// what the resolution could not see: the segments whose rows carry no names (published by
/// a release before names, or from an index written before them), named per node; the
/// answer may miss their flows. `query` itself, and nothing missing, without name terms.
fn resolve_names(
    query: &capsule_query::Query,
    records: &[(Origin, FlowCounts)],
) -> (capsule_query::Query, Vec<String>) {
    if !query.filter.has_names() {
        return (query.clone(), Vec::new());
    }
    let (from, to) = query.window();
    let all = capsule_query::Query {
        filter: capsule_query::Filter::all(),
        ..query.clone()
    };
    let window = capsule_index::flows::merge_counts(
        records.iter().map(|(o, f)| (f.clone(), o.kept.tunnels)),
        &all,
        false,
    );
    let filter = capsule_index::names::resolve_over(
        &query.filter,
        window
            .iter()
            .map(|s| (&s.flow.key, s.flow.totals.names.as_deref())),
    );
    let mut unseen: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for (o, f) in records {
        if !o.kept.names && f.totals.last_ns >= from && f.totals.first_ns < to {
            let s = unseen.entry(o.node.as_str()).or_default();
            if s.last() != Some(&o.segment) {
                s.push(o.segment);
            }
        }
    }
    let missing = unseen
        .into_iter()
        .map(|(node, segments)| {
            format!(
                "node {node}: the flows of segment(s) {segments:?} carry no names in the \
                 catalog (published by a release before names, or indexed before them: \
                 `capsule reindex` on the node, then `capsule fleet publish`): the filter's \
                 name terms could not see them"
            )
        })
        .collect();
    (
        capsule_query::Query {
            filter,
            ..query.clone()
        },
        missing,
    )
}

/// What a thread asking ClickHouse returned (a thread that panicked is an error).
pub(crate) fn joined<T>(
    h: std::thread::ScopedJoinHandle<'_, Result<T, FleetError>>,
) -> Result<T, FleetError> {
    h.join().unwrap_or_else(|_| {
        Err(FleetError::Decode {
            what: "a question to ClickHouse".into(),
            problem: "the thread asking it failed".into(),
        })
    })
}

/// The first and last packet time the catalog holds, over every node.
fn held(ch: &ClickHouse) -> Result<Option<(u64, u64)>, FleetError> {
    let b = ch.execute(&format!(
        "SELECT count(), min(first_ns), max(last_ns) FROM {DATABASE}.segments FINAL \
         WHERE flows > 0 FORMAT RowBinary"
    ))?;
    let what = format!("the span ClickHouse at {} gave", ch.url());
    let mut r = Reader::new(&b, &what);
    let (n, a, z) = (r.u64()?, r.u64()?, r.u64()?);
    Ok((n > 0).then_some((a, z)))
}

/// Each node's flows (node name, flow), and the nodes behind (see [`flows_by_node`]).
pub type NodeFlows = (
    Vec<(String, capsule_index::flows::FlowSummary)>,
    Vec<NodeRow>,
    Vec<String>,
);

/// The flows of the window and filter at each node (`flows --fleet`): each node's flow rows
/// merged and cut as its own `flows` merges its segments, so a flow two capture points saw
/// is listed once per node (never summed across points, which would count its packets
/// twice); with the nodes whose outbox held batches at their last publish.
pub fn flows_by_node(
    ch: &ClickHouse,
    query: &capsule_query::Query,
) -> Result<NodeFlows, FleetError> {
    let mut by_node: std::collections::BTreeMap<String, Vec<_>> = Default::default();
    let (rows, registry) = crate::schema::with_tables(ch, || {
        std::thread::scope(|s| {
            let rows =
                s.spawn(|| crate::plan::flow_rows(ch, query, false, crate::plan::Table::Wide));
            let registry = s.spawn(|| crate::nodes::registry(ch));
            Ok((joined(rows)?, joined(registry)?))
        })
    })?;
    for (origin, counts) in rows {
        by_node
            .entry(origin.node.clone())
            .or_default()
            .push((origin, counts));
    }
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for (node, records) in by_node {
        // Each node's name terms resolved over its own flows, as it resolves them itself.
        let (q, m) = resolve_names(query, &records);
        missing.extend(m);
        let records = records.into_iter().map(|(o, f)| (f, o.kept.tunnels));
        for f in capsule_index::flows::merge_counts(records, &q, false) {
            out.push((node.clone(), f));
        }
    }
    let behind = registry.into_iter().filter(|n| n.backlog > 0).collect();
    Ok((out, behind, missing))
}
