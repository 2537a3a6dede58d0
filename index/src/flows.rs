//! Flow listings from the side index alone (`capsule flows`): no packet is read.
//!
//! Records of the same flow in several segments are merged. With a time window, a flow's
//! counters are summed from its 1-second buckets that overlap the window; a flow that starts
//! or ends inside a partly covered second is counted for that whole second, and marked
//! `approximate`. Flows wholly inside the window carry their exact totals.
//!
//! The open segment is listed from its journal (sideindex/journal.rs), as far as it goes:
//! blocks it has no record of yet are named in [`FlowListing::unseen`].

use std::collections::HashMap;

use capsule_query::{Query, Tri};
use capsule_store::{Result, SegmentReader, Store, StoreError};

use crate::plan::flow_side;
use crate::sideindex::journal::load_any;
use crate::sideindex::{FlowKey, FlowRecord};

/// One flow over the queried window, both directions (0: a -> b, 1: b -> a): its record,
/// merged across segments, with no block list or buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSummary {
    pub flow: FlowRecord,
    /// Packets and bytes come from 1-second buckets cut by the window.
    pub approximate: bool,
}

/// What `flows` could and could not use.
#[derive(Debug, Clone, Default)]
pub struct FlowListing {
    pub flows: Vec<FlowSummary>,
    /// Segments in the window without an index (their flows are missing from the listing).
    pub unindexed: Vec<u64>,
    /// Of those, the ones whose index is damaged, with what is wrong.
    pub damaged_index: Vec<(u64, String)>,
    /// Open segments' blocks in the window that their journal has no record of (yet), whose
    /// flows are missing: (segment, blocks).
    pub unseen: Vec<(u64, Vec<usize>)>,
    /// Damaged journal records that were skipped, with what was wrong.
    pub journal_notes: Vec<(u64, String)>,
}

/// Lists the flows of `q` (filter and window) from the side index of `segments`.
pub fn list(store: &Store, segments: &[SegmentReader], q: &Query) -> Result<FlowListing> {
    let from = q.from_ns.unwrap_or(0);
    let to = q.to_ns.unwrap_or(u64::MAX);
    let mut out: HashMap<FlowKey, FlowSummary> = HashMap::new();
    let mut unindexed = Vec::new();
    let mut damaged_index = Vec::new();
    let mut unseen = Vec::new();
    let mut journal_notes = Vec::new();
    for seg in segments {
        let overlaps = seg
            .blocks()
            .iter()
            .any(|b| b.last_ns >= from && b.first_ns < to);
        if !overlaps {
            continue;
        }
        let idx = match load_any(&store.index_dir(), seg) {
            Ok(Some(live)) => {
                let gaps: Vec<usize> = live
                    .unseen
                    .iter()
                    .copied()
                    .filter(|&b| {
                        let m = &seg.blocks()[b];
                        m.packets > 0 && m.last_ns >= from && m.first_ns < to
                    })
                    .collect();
                if !gaps.is_empty() {
                    unseen.push((seg.seq(), gaps));
                }
                journal_notes.extend(live.notes.into_iter().map(|n| (seg.seq(), n)));
                live.index
            }
            Ok(None) => {
                unindexed.push(seg.seq());
                continue;
            }
            Err(e @ StoreError::DerivedDamaged { .. }) => {
                unindexed.push(seg.seq());
                damaged_index.push((seg.seq(), capsule_store::error::chain(&e)));
                continue;
            }
            Err(e) => return Err(e),
        };
        for f in &idx.flows {
            if f.last_ns < from || f.first_ns >= to {
                continue;
            }
            let sides: Vec<bool> = (0..2)
                .map(|d| {
                    f.packets[d] > 0
                        && q.filter.matches_side(&flow_side(f, d, f.dscp[d])) != Tri::No
                })
                .collect();
            if !sides.iter().any(|&s| s) {
                continue;
            }
            let part = windowed(f, from, to);
            match out.get_mut(&f.key) {
                Some(s) => {
                    s.flow.absorb(&part.flow);
                    s.approximate |= part.approximate;
                }
                None => {
                    out.insert(f.key, part);
                }
            }
        }
    }
    let mut flows: Vec<FlowSummary> = out
        .into_values()
        .filter(|f| f.flow.total_packets() > 0)
        .collect();
    flows.sort_by(|a, b| {
        b.flow
            .total_bytes()
            .cmp(&a.flow.total_bytes())
            .then(a.flow.key.cmp(&b.flow.key))
    });
    Ok(FlowListing {
        flows,
        unindexed,
        damaged_index,
        unseen,
        journal_notes,
    })
}

/// A flow record's counters over [from, to).
fn windowed(f: &FlowRecord, from: u64, to: u64) -> FlowSummary {
    let mut flow = FlowRecord {
        first_ns: f.first_ns.max(from),
        last_ns: f.last_ns.min(to.saturating_sub(1)),
        blocks: Vec::new(),
        buckets: Vec::new(),
        ..f.clone()
    };
    if f.first_ns >= from && f.last_ns < to {
        return FlowSummary {
            flow,
            approximate: false,
        };
    }
    flow.packets = [0; 2];
    flow.bytes = [0; 2];
    for b in &f.buckets {
        let start = b.second.saturating_mul(1_000_000_000);
        let end = start.saturating_add(1_000_000_000);
        if end > from && start < to {
            for d in 0..2 {
                flow.packets[d] += b.packets[d];
                flow.bytes[d] += b.bytes[d];
            }
        }
    }
    FlowSummary {
        flow,
        approximate: true,
    }
}
