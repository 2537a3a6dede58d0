//! How answers of adjacent windows combine into the answer of the window they make
//! together (the console's "the next hour too", the fleet's hour-by-hour fan-out).
//!
//! No analytics answer merges exactly by itself: each holds something that does not add
//! up across a split of its window ([`Kind::merge_rule`] says what, per kind). Distinct
//! flow counts count a flow that crosses the split twice, a top-N of each half is not the
//! top-N of the whole, a median of halves is not the median of the whole, an alert's
//! thresholds judge the whole window. What does merge exactly is what every answer is
//! computed from: the window's flows ([`Input`]), keyed by flow, each with its 1-second
//! buckets. So two answers combine by merging their inputs ([`inputs`]) and answering the
//! merged input again ([`crate::analytics::body`]); the tests check that this equals the
//! answer of the whole window for every kind. A split must fall on a whole second (the
//! buckets' edge) and the windows must meet, neither overlap nor leave a gap.

use std::collections::HashMap;

use capsule_analytics::{Input, Limits};
use capsule_index::sideindex::FlowKey;

use crate::analytics::Kind;

/// Whether answers of a kind combine by themselves or only through their flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Two answers add up to the answer of both windows.
    Exact,
    /// Only the windows' flows combine ([`inputs`]); the answer is made again from them.
    /// The text says what of the answer does not add up.
    ThroughFlows(&'static str),
}

impl Kind {
    /// How answers of this kind combine across adjacent windows.
    pub fn merge_rule(self) -> Rule {
        Rule::ThroughFlows(match self {
            Kind::Top => {
                "rows are ranked and cut at the limit: the top rows of two halves are not the \
                 top rows of the whole, and a flow's share and peak are of its window"
            }
            Kind::Tcp => {
                "worst hosts and sessions are ranked over the window, and an interval cut by \
                 the split would be counted in parts"
            }
            Kind::Dscp => {
                "flow counts count a flow that crosses the split in both halves, and top \
                 senders are ranked and cut at 5"
            }
            Kind::Matrix => "cell flow counts count a flow that crosses the split twice",
            Kind::Stragglers => "members are judged against the group median of each interval",
            Kind::Alerts => "rules judge the whole window against their thresholds",
            Kind::Bursts => {
                "it is answered from the index's millisecond series, not from the flows: a \
                 burst or an incast that crosses the split would be cut in two; ask the \
                 whole window again"
            }
        })
    }
}

/// Why two inputs cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// The second window does not start where the first ends.
    #[error(
        "the windows do not meet: the first ends at {first_to_ns} ns, the second starts at \
         {second_from_ns} ns (they must be adjacent, the first before the second)"
    )]
    NotAdjacent {
        first_to_ns: u64,
        second_from_ns: u64,
    },
    /// The split is not on a whole second, where a flow's buckets divide.
    #[error("the windows meet at {at_ns} ns, not on a whole second")]
    NotOnASecond { at_ns: u64 },
    /// The two inputs are of different questions (filters or stores).
    #[error("the windows are of different {what}: {first:?} and {second:?}")]
    Different {
        what: &'static str,
        first: String,
        second: String,
    },
}

/// The flows of the window `a` then `b` make: each flow in both has its counters summed
/// (`FlowCounts::absorb`) and its buckets merged by second; the limits of both are kept.
pub fn inputs(a: Input, b: Input) -> Result<Input, MergeError> {
    for (what, x, y) in [
        ("stores", &a.store, &b.store),
        ("filters", &a.filter, &b.filter),
    ] {
        if x != y {
            return Err(MergeError::Different {
                what,
                first: x.clone(),
                second: y.clone(),
            });
        }
    }
    // An empty half (nothing held there) meets anything.
    if a.flows.is_empty() && a.from_ns == a.to_ns {
        return Ok(b);
    }
    if b.flows.is_empty() && b.from_ns == b.to_ns {
        return Ok(a);
    }
    if a.to_ns != b.from_ns {
        return Err(MergeError::NotAdjacent {
            first_to_ns: a.to_ns,
            second_from_ns: b.from_ns,
        });
    }
    if !a.to_ns.is_multiple_of(1_000_000_000) {
        return Err(MergeError::NotOnASecond { at_ns: a.to_ns });
    }
    let mut flows = a.flows;
    let mut at: HashMap<FlowKey, usize> = flows
        .iter()
        .enumerate()
        .map(|(i, f)| (f.flow.key, i))
        .collect();
    for f in b.flows {
        match at.get(&f.flow.key) {
            Some(&i) => {
                let mine = &mut flows[i];
                // Counters by `absorb`; the buckets (which it leaves) by second.
                mine.flow.absorb(&f.flow);
                capsule_index::sideindex::merge_buckets(&mut mine.flow.buckets, &f.flow.buckets);
                mine.approximate |= f.approximate;
            }
            None => {
                at.insert(f.flow.key, flows.len());
                flows.push(f);
            }
        }
    }
    let limits = limits(a.limits, b.limits, &flows);
    let mut dns = a.dns;
    dns.absorb(&b.dns);
    Ok(Input {
        flows,
        from_ns: a.from_ns,
        to_ns: b.to_ns,
        filter: a.filter,
        within: a.within,
        store: a.store,
        limits,
        dns,
    })
}

/// The limits of both windows: every segment either names, once; what the store holds is
/// the same for both.
fn limits(a: Limits, b: Limits, flows: &[capsule_index::flows::FlowSummary]) -> Limits {
    fn union<T: PartialEq>(mut x: Vec<T>, y: Vec<T>) -> Vec<T> {
        for v in y {
            if !x.contains(&v) {
                x.push(v);
            }
        }
        x
    }
    Limits {
        held_from_ns: a.held_from_ns.or(b.held_from_ns),
        held_from: a.held_from.or(b.held_from),
        held_to_ns: b.held_to_ns.or(a.held_to_ns),
        held_to: b.held_to.or(a.held_to),
        horizon_ns: a.horizon_ns,
        horizon: a.horizon,
        // The merged window misses the data only when both halves do.
        window_misses: a.window_misses.filter(|_| b.window_misses.is_some()),
        unindexed_segments: union(a.unindexed_segments, b.unindexed_segments),
        damaged_indexes: union(a.damaged_indexes, b.damaged_indexes),
        unseen_blocks: union(a.unseen_blocks, b.unseen_blocks),
        journal_notes: union(a.journal_notes, b.journal_notes),
        missing_segments: union(a.missing_segments, b.missing_segments),
        repaired_segments: union(a.repaired_segments, b.repaired_segments),
        names_unseen: union(a.names_unseen, b.names_unseen),
        drops: match (a.drops, b.drops) {
            (Some(x), Some(y)) if x != y => Some(format!("{x}; {y}")),
            (x, y) => x.or(y),
        },
        approximate_flows: flows.iter().filter(|f| f.approximate).count(),
        invisible: a.invisible,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analytics::{self, Question};
    use crate::Source;
    use capsule_analytics::{matrix, top};
    use capsule_query::Query;

    /// A store of 6 s of synthetic traffic (the seed's planted faults among it), and the
    /// config of its groups.
    fn store() -> (tempfile::TempDir, Source) {
        let cfg = capsule_synth::SynthConfig {
            duration_ns: 6_000_000_000,
            rate_bps: 20_000_000,
            ..Default::default()
        };
        let mut pcap = Vec::new();
        capsule_synth::generate(&cfg, &mut pcap).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = capsule_index::open_writer(dir.path(), Default::default()).unwrap();
        let rep = capsule_capture::import_reader(&mut w, "synth", &pcap[..]).unwrap();
        assert!(rep.error.is_none());
        w.finish().unwrap();
        // The example config: the synthetic traffic's groups, DSCP and egress policy.
        let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/examples/capsule.toml");
        let config = capsule_config::Config::load(std::path::Path::new(example)).unwrap();
        let source = Source {
            config: Some(config),
            ..Source::store(dir.path())
        };
        (dir, source)
    }

    fn window(from: u64, to: u64) -> Query {
        Query {
            from_ns: Some(from),
            to_ns: Some(to),
            ..Query::all()
        }
    }

    #[test]
    fn the_merged_halves_answer_as_the_whole_window_for_every_kind() {
        let (_d, source) = store();
        let start = capsule_synth::DEFAULT_START_NS;
        let (from, mid, to) = (start, start + 3_000_000_000, start + 6_000_000_000);
        let whole = analytics::input(&source, &window(from, to), true).unwrap();
        assert!(!whole.flows.is_empty());
        let first = analytics::input(&source, &window(from, mid), true).unwrap();
        let second = analytics::input(&source, &window(mid, to), true).unwrap();
        let merged = inputs(first, second).unwrap();
        assert_eq!((merged.from_ns, merged.to_ns), (whole.from_ns, whole.to_ns));
        let config = source.config.as_ref();
        for q in [
            Question::Top {
                key: top::Key::Src,
                by: top::By::Bytes,
                limit: 5,
            },
            Question::Top {
                key: top::Key::Flow,
                by: top::By::Packets,
                limit: 50,
            },
            Question::Tcp {
                interval_ns: 1_000_000_000,
            },
            Question::Dscp,
            Question::Matrix {
                by: matrix::By::Flows,
            },
            Question::Stragglers {
                group: "gpu".into(),
                interval_ns: 1_000_000_000,
                ratio: 0.5,
                min_bytes: 1,
            },
            Question::Alerts,
        ] {
            let want =
                analytics::body(&whole, &q, config).map(|b| serde_json::to_value(b).unwrap());
            let got =
                analytics::body(&merged, &q, config).map(|b| serde_json::to_value(b).unwrap());
            match (want, got) {
                (Ok(w), Ok(g)) => assert_eq!(w, g, "{:?}", q.kind()),
                (Err(w), Err(g)) => assert_eq!(w.to_string(), g.to_string()),
                (w, g) => panic!("{:?}: {w:?} but merged {g:?}", q.kind()),
            }
        }
    }

    #[test]
    fn windows_that_do_not_meet_or_split_a_second_are_refused() {
        let (_d, source) = store();
        let start = capsule_synth::DEFAULT_START_NS;
        let a = analytics::input(&source, &window(start, start + 2_000_000_000), true).unwrap();
        let b = analytics::input(
            &source,
            &window(start + 3_000_000_000, start + 5_000_000_000),
            true,
        )
        .unwrap();
        assert!(matches!(inputs(a, b), Err(MergeError::NotAdjacent { .. })));
        let mid = start + 2_500_000_000;
        let a = analytics::input(&source, &window(start, mid), true).unwrap();
        let b = analytics::input(&source, &window(mid, start + 5_000_000_000), true).unwrap();
        assert_eq!(
            inputs(a, b).unwrap_err(),
            MergeError::NotOnASecond { at_ns: mid }
        );
    }

    #[test]
    fn every_kind_says_how_it_merges() {
        for k in Kind::ALL {
            match k.merge_rule() {
                Rule::Exact => {}
                Rule::ThroughFlows(why) => assert!(!why.is_empty()),
            }
        }
    }
}
