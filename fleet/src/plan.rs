//! Which node holds which segments for a window and filter: the plan of a fleet `query`
//! (and of `fleet diff`), from the catalog.
//!
//! The flow rows of the window come back from ClickHouse; each node's rows are grouped by
//! segment and matched against the filter by the code that matches a store's side index
//! (`capsule_index::flows::merge_counts`, the query language's own matcher). A segment with
//! at least one flow of the filter in the window is a candidate; a node with no candidate
//! segment is not asked at all. Each asked node gets the window narrowed to the span of its
//! candidate segments (from the segment ledger), so its own side index skips every other
//! segment, and the packets are then pulled from its `serve` (`/v1/packets`).

use std::collections::BTreeMap;

use capsule_query::Query;

use crate::clickhouse::ClickHouse;
use crate::rowbinary::Reader;
use crate::rows::{self, NodeRow};
use crate::{FleetError, DATABASE};

/// One node to pull from: its serve URL, its candidate segments and the window to ask it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodePlan {
    pub node: String,
    /// The node's `serve` URL as it advertised it (empty when it advertised none).
    pub advertise: String,
    /// The candidate segments, ascending.
    pub segments: Vec<u64>,
    /// Of them, those the node's last publish said live only in its object store
    /// (`location` `tiered`): the node reads their blocks by range GETs.
    pub tiered: Vec<u64>,
    /// The window to ask: the question's window cut to the candidate segments' span.
    pub from_ns: u64,
    /// Exclusive.
    pub to_ns: u64,
}

/// The plan of a fleet packet question.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The nodes to ask, by name.
    pub nodes: Vec<NodePlan>,
    /// Nodes whose outbox held batches at their last publish (their newest segments may be
    /// missing from the catalog, so from the answer).
    pub behind: Vec<NodeRow>,
}

/// Every flow row of the catalog at `ch` that overlaps `query`'s window, by node and
/// segment (the rows' filter is applied by the caller, with the side index's own code).
/// The caller asks through [`crate::schema::with_tables`].
///
/// Without `keep_buckets` (the answer keeps no per-second series), a flow wholly inside the
/// window comes without its 1-second buckets (empty arrays): the merge drops them for such
/// a flow (`capsule_index::flows::merge_counts`), and they are most of a long flow's row, so
/// ClickHouse need not send them nor the asker decode them. A flow the window cuts keeps
/// them (they estimate its share of the window).
///
/// With [`Table::Narrow`], from `capsule.flow_packed` (the flow rows' keys and spans, with
/// their totals, DSCP counts and remarks, TCP flags and handshake packed into one string
/// and their seconds into another, [`rows::packed_columns`]), for the answers made from
/// those alone ([`Table::for_question`]); it names the marker of its filling, so a catalog
/// whose packed table is not filled yet refuses the question and gets it filled
/// ([`crate::schema::with_tables`]).
pub(crate) fn flow_rows(
    ch: &ClickHouse,
    query: &Query,
    keep_buckets: bool,
    table: Table,
) -> Result<Vec<(rows::Origin, capsule_index::sideindex::FlowCounts)>, FleetError> {
    let (from, to) = query.window();
    // A flow the window cuts is cut by its packets a second (capsule_index::flows,
    // `windowed`); a window without bounds cuts none, so they are not asked then.
    let unbounded = from == 0 && to == u64::MAX;
    let cut = format!("arrayFilter(x -> NOT (first_ns >= {from} AND last_ns < {to}), ");
    let (cols, name, filled, read): (Vec<String>, _, _, _) = match table {
        Table::Wide => (
            rows::flow_columns()
                .into_iter()
                .map(|(n, _)| {
                    if keep_buckets || !n.starts_with("bucket_") {
                        n
                    } else {
                        format!("{cut}{n})")
                    }
                })
                .collect(),
            "flows",
            String::new(),
            None,
        ),
        Table::Narrow(read) => {
            // A flow's seconds come whole when the answer keeps a series; else only for
            // a flow the window cuts (none when the window has no bounds).
            let read = rows::NarrowRead {
                buckets: read.buckets && (keep_buckets || !unbounded),
                ..read
            };
            let cols = read
                .columns()
                .into_iter()
                .map(|n| match (n, keep_buckets) {
                    ("secs", false) => {
                        format!("if(first_ns >= {from} AND last_ns < {to}, '', secs)")
                    }
                    ("rec", _) if !read.counts => {
                        format!("substring(rec, 1, {})", rows::REC_FIXED)
                    }
                    _ => n.to_string(),
                })
                .collect();
            (
                cols,
                "flow_packed",
                format!(
                    " AND (SELECT count() FROM {DATABASE}.{}) >= 0",
                    crate::schema::FILLED[1]
                ),
                Some(read),
            )
        }
    };
    // Neither FINAL nor ORDER BY: ClickHouse then reads its parts in parallel and sends
    // them as they come, and the rows a re-push left twice are collapsed here (see
    // `newest_once`). With FINAL, 18.16 merged every part of the window on one thread
    // before the first row: a third of `top --fleet`'s time with three parts.
    // Decoded as they arrive: the asker's work on the first rows overlaps ClickHouse's on
    // the last, and no copy of the whole answer is kept.
    let what = format!("the flow rows ClickHouse at {} gave", ch.url());
    let out = ch.execute_with(
        &format!(
            "SELECT {} FROM {DATABASE}.{name} WHERE last_ns >= {from} AND first_ns < {to}\
             {filled} FORMAT RowBinary",
            cols.join(", ")
        ),
        |body| {
            crate::rowbinary::rows_from(
                body,
                &what,
                |r| match &read {
                    None => rows::get_flow(r),
                    Some(read) => rows::get_packed(r, read),
                },
                |e| ch.io_error(e),
            )
        },
    )?;
    Ok(newest_once(out))
}

/// The rows as `SELECT ... FINAL ... ORDER BY node, segment` gave them: one row per node,
/// segment and flow (the newest push of it: the greatest `published_ns`, as the table's
/// ReplacingMergeTree keeps), in the order of the node, the segment and the table's
/// sorting key. Unlike FINAL, a row pushed again into another partition (a day apart) is
/// collapsed too.
fn newest_once(
    mut rows: Vec<(rows::Origin, capsule_index::sideindex::FlowCounts)>,
) -> Vec<(rows::Origin, capsule_index::sideindex::FlowCounts)> {
    // The sorting key's columns after node and segment (rows::FLOW_KEY), as stored.
    let key = |f: &capsule_index::sideindex::FlowCounts| {
        let k = &f.key;
        let tags = u8::from(k.vlans[0].is_some()) | u8::from(k.vlans[1].is_some()) << 1;
        let families = u8::from(k.a.is_ipv6()) | u8::from(k.b.is_ipv6()) << 1;
        let (pa, pb) = k.ports.unwrap_or((0, 0));
        (
            k.ip_version,
            k.proto,
            rows::addr16(k.a),
            rows::addr16(k.b),
            k.ports.is_some(),
            pa,
            pb,
            k.vlans[0].unwrap_or(0),
            k.vlans[1].unwrap_or(0),
            tags,
            families,
        )
    };
    // The rows are large (a flow's counts, a few hundred bytes): a list of their keys is
    // sorted, then the rows are put in its order where they are (each moved by swaps within
    // the vector, which touch no new memory), and of each run of one row's pushes the
    // first (the newest: its pushes sort newest first) is kept.
    let mut order: Vec<usize> = {
        let keys: Vec<_> = rows
            .iter()
            .map(|(o, f)| {
                let newest_first = std::cmp::Reverse(o.published_ns);
                (o.node.as_str(), o.segment, key(f), newest_first)
            })
            .collect();
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_unstable_by(|&a, &b| keys[a].cmp(&keys[b]));
        order
    };
    permute(&mut rows, &mut order);
    rows.dedup_by(|later, kept| {
        (later.0.node == kept.0.node && later.0.segment == kept.0.segment)
            && key(&later.1) == key(&kept.1)
    });
    rows
}

/// Puts `v` in the order `order` gives, in place: afterwards `v[i]` is what `v[order[i]]`
/// was (`order` a permutation of `0..v.len()`, used up). Each cycle of the permutation is
/// followed by swaps, so every element moves within the vector's own memory.
fn permute<T>(v: &mut [T], order: &mut [usize]) {
    const DONE: usize = usize::MAX;
    for start in 0..v.len() {
        let mut at = start;
        while order[at] != DONE {
            let from = std::mem::replace(&mut order[at], DONE);
            if from == start {
                break;
            }
            v.swap(at, from);
            at = from;
        }
    }
}

/// Which flow table a question reads: the smallest that can answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `capsule.flows`: every count of the side index.
    Wide,
    /// `capsule.flow_packed`: keys, totals, DSCP counts and remarks, the TCP flags and
    /// handshake bits, the bytes and packets a second, the names and tunnels; of them, the
    /// columns the answer reads (the others are not asked).
    Narrow(rows::NarrowRead),
}

impl Table {
    /// The table an analytics question reads: `top`, `dscp` and `matrix` are made from what
    /// the packed table holds (any window: a flow the window cuts is cut by its packets and
    /// bytes a second, the only counts these answers read of it; any filter the fleet takes:
    /// its terms read the key, the TCP flags and the DSCP values), the others from TCP
    /// health counts only the wide table holds.
    pub fn for_question(q: &capsule_answers::analytics::Question) -> Table {
        use capsule_answers::analytics::Question;
        match q {
            // analytics/src/top.rs reads the totals, DSCP counts and bytes a second; dscp.rs
            // the DSCP counts, remarks and bytes a second; matrix.rs the totals and the
            // handshake bits (all of them one string of the packed table, the seconds
            // another).
            Question::Top { .. } | Question::Dscp | Question::Matrix { .. } => {
                Table::Narrow(rows::NarrowRead::ALL)
            }
            _ => Table::Wide,
        }
    }

    /// The table the plan of a packet question for `query` reads: which flows of the
    /// window match the filter (the key, TCP flags and DSCP mask; the encapsulations when
    /// the filter has `tunnel` or `mpls` terms) and have packets in it (their packets a
    /// second when the window cuts them). The names are not read: the plan matches the
    /// filter as given, and a name term is "maybe" on every flow (the node resolves it).
    pub fn plan(query: &Query) -> Table {
        Table::Narrow(rows::NarrowRead {
            buckets: true,
            counts: false,
            names: false,
            encap: query.filter.has_encap_terms(),
        })
    }
}

/// Plans `query` over the catalog at `ch`; with `only`, over those nodes alone.
pub fn plan(ch: &ClickHouse, query: &Query, only: Option<&[&str]>) -> Result<Plan, FleetError> {
    let (from, to) = query.window();
    let mut by_segment: BTreeMap<(String, u64), Vec<_>> = BTreeMap::new();
    // The three questions at once (the plan waits for the slowest, not the sum); the
    // tables checked only if one is refused.
    let (rows, spans, registry) = crate::schema::with_tables(ch, || {
        std::thread::scope(|s| {
            let rows = s.spawn(|| flow_rows(ch, query, false, Table::plan(query)));
            let spans = s.spawn(|| segment_spans(ch, from, to));
            let registry = s.spawn(|| crate::nodes::registry(ch));
            Ok((
                crate::ask::joined(rows)?,
                crate::ask::joined(spans)?,
                crate::ask::joined(registry)?,
            ))
        })
    })?;
    for (origin, counts) in rows {
        if only.is_some_and(|o| !o.contains(&origin.node.as_str())) {
            continue;
        }
        by_segment
            .entry((origin.node, origin.segment))
            .or_default()
            .push((counts, origin.kept.tunnels));
    }
    let candidates: Vec<(String, u64)> = by_segment
        .into_iter()
        .filter_map(|(k, records)| {
            (!capsule_index::flows::merge_counts(records, query, false).is_empty()).then_some(k)
        })
        .collect();
    let mut nodes: BTreeMap<String, NodePlan> = BTreeMap::new();
    for (node, seg) in candidates {
        let Some(&(a, z, tiered)) = spans.get(&(node.clone(), seg)) else {
            continue;
        };
        let advertise = registry
            .iter()
            .find(|n| n.node == node)
            .map(|n| n.advertise.clone())
            .unwrap_or_default();
        let p = nodes.entry(node.clone()).or_insert_with(|| NodePlan {
            node,
            advertise,
            segments: Vec::new(),
            tiered: Vec::new(),
            from_ns: u64::MAX,
            to_ns: 0,
        });
        p.segments.push(seg);
        if tiered {
            p.tiered.push(seg);
        }
        p.from_ns = p.from_ns.min(a.max(from));
        p.to_ns = p.to_ns.max(z.saturating_add(1).min(to));
    }
    let behind = registry
        .into_iter()
        .filter(|n| n.backlog > 0 && only.is_none_or(|o| o.contains(&n.node.as_str())))
        .collect();
    Ok(Plan {
        nodes: nodes.into_values().collect(),
        behind,
    })
}

/// (node, segment) to its first and last packet time, and whether it lives only in the
/// node's object store.
type Spans = BTreeMap<(String, u64), (u64, u64, bool)>;

/// The first and last packet time of each segment of the ledger that reaches `[from, to)`.
fn segment_spans(ch: &ClickHouse, from: u64, to: u64) -> Result<Spans, FleetError> {
    let b = ch.execute(&format!(
        "SELECT node, segment, first_ns, last_ns, location = 'tiered' FROM \
         {DATABASE}.segments FINAL \
         WHERE last_ns >= {from} AND first_ns < {to} FORMAT RowBinary"
    ))?;
    let what = format!("the segment ledger ClickHouse at {} gave", ch.url());
    let mut r = Reader::new(&b, &what);
    let mut out = BTreeMap::new();
    while !r.is_empty() {
        let node = r.string()?;
        let seg = r.u64()?;
        let (a, z, tiered) = (r.u64()?, r.u64()?, r.u8()? != 0);
        out.insert((node, seg), (a, z, tiered));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_index::sideindex::{FlowCounts, FlowKey};

    fn row(
        node: &str,
        segment: u64,
        a: &str,
        port: u16,
        published_ns: u64,
    ) -> (rows::Origin, FlowCounts) {
        let key = FlowKey {
            vlans: [None, None],
            ip_version: if a.contains(':') { 6 } else { 4 },
            proto: 6,
            a: a.parse().unwrap(),
            b: if a.contains(':') {
                "2001:db8::99"
            } else {
                "10.0.0.99"
            }
            .parse()
            .unwrap(),
            ports: Some((port, 443)),
        };
        let mut f = FlowCounts::new(key, 1, 2);
        f.totals.packets[0] = published_ns;
        let o = rows::Origin {
            node: node.to_string(),
            segment,
            segment_len: 100,
            published_ns,
            kept: Default::default(),
        };
        (o, f)
    }

    /// Every permutation of up to six elements puts each element where the order says.
    #[test]
    fn a_permutation_puts_each_row_in_its_place() {
        fn all(n: usize) -> Vec<Vec<usize>> {
            if n == 0 {
                return vec![Vec::new()];
            }
            let mut out = Vec::new();
            for p in all(n - 1) {
                for at in 0..n {
                    let mut q = p.clone();
                    q.insert(at, n - 1);
                    out.push(q);
                }
            }
            out
        }
        for n in 0..=6 {
            for order in all(n) {
                let mut v: Vec<String> = (0..n).map(|i| format!("row {i}")).collect();
                let want: Vec<String> = order.iter().map(|&i| v[i].clone()).collect();
                permute(&mut v, &mut order.clone());
                assert_eq!(v, want, "order {order:?}");
            }
        }
    }

    #[test]
    fn a_row_pushed_twice_is_kept_once_at_its_newest_in_the_order_final_gave() {
        // As ClickHouse may send them without FINAL: parts in any order, a row re-pushed.
        let got = newest_once(vec![
            row("n2", 1, "10.0.0.1", 5, 10),
            row("n1", 7, "10.0.0.2", 5, 10),
            row("n1", 7, "10.0.0.1", 6, 10),
            row("n1", 7, "2001:db8::1", 5, 10),
            row("n1", 3, "10.0.0.1", 5, 10),
            row("n1", 7, "10.0.0.2", 5, 30),
            row("n1", 7, "10.0.0.2", 5, 20),
            row("n2", 1, "10.0.0.1", 5, 11),
        ]);
        let seen: Vec<(String, u64, String, u64)> = got
            .iter()
            .map(|(o, f)| {
                (
                    o.node.clone(),
                    o.segment,
                    f.key.a.to_string(),
                    f.totals.packets[0],
                )
            })
            .collect();
        let want = [
            ("n1", 3, "10.0.0.1", 10),
            // In the stored key's order: the IP version first, then the addresses.
            ("n1", 7, "10.0.0.1", 10),
            ("n1", 7, "10.0.0.2", 30),
            ("n1", 7, "2001:db8::1", 10),
            ("n2", 1, "10.0.0.1", 11),
        ];
        let want: Vec<(String, u64, String, u64)> = want
            .iter()
            .map(|(n, s, a, p)| (n.to_string(), *s, a.to_string(), *p))
            .collect();
        assert_eq!(seen, want);
    }
}
