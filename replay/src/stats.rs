//! Interface statistics in a window: the drop counters capture stored with the data (pcapng
//! ISBs in blocks of their own), so that an export can say what its window lost.

use std::collections::HashMap;

use capsule_pcap::{read::fragment_stats, FragmentStat, Interface};
use capsule_query::Query;
use capsule_store::SegmentReader;

use crate::error::ExportError;
use crate::report::SkippedBlock;

/// A segment, its interface as stored, and one statistics record.
pub(crate) type Stat = (usize, Interface, FragmentStat);

/// The interface statistics recorded in the query's window, in time order, and for each
/// interface the last record before the window (the baseline of its counters). They are
/// read from the blocks that hold no packets (a few bytes each), whatever the filter. A
/// damaged one is skipped and listed (its counters are missing, no packet is).
pub(crate) fn interface_stats(
    segments: &[SegmentReader],
    query: &Query,
    skipped: &mut Vec<SkippedBlock>,
) -> Result<(Vec<Stat>, HashMap<Interface, FragmentStat>), ExportError> {
    let from = query.from_ns.unwrap_or(0);
    let to = query.to_ns.unwrap_or(u64::MAX);
    let mut in_window = Vec::new();
    let mut before: HashMap<Interface, FragmentStat> = HashMap::new();
    let mut dctx = zstd::bulk::Decompressor::new().map_err(ExportError::Decompressor)?;
    let (mut frame, mut data) = (Vec::new(), Vec::new());
    for (si, seg) in segments.iter().enumerate() {
        for (bi, b) in seg.blocks().iter().enumerate() {
            if b.packets > 0 || b.first_ns >= to {
                continue;
            }
            if let Err(e) = seg.read_block(bi, &mut dctx, &mut frame, &mut data) {
                let e = ExportError::from(e);
                if !e.is_skippable() {
                    return Err(e);
                }
                skipped.push(SkippedBlock::of(seg, b, &e));
                continue;
            }
            for st in fragment_stats(&data) {
                let Some(iface) = seg.interfaces().get(st.iface as usize) else {
                    continue;
                };
                if st.ts_ns < from {
                    let newer = before.get(iface).is_none_or(|b| b.ts_ns <= st.ts_ns);
                    if newer {
                        before.insert(iface.clone(), st);
                    }
                } else if st.ts_ns < to {
                    in_window.push((si, iface.clone(), st));
                }
            }
        }
    }
    in_window.sort_by_key(|(_, _, st)| st.ts_ns);
    Ok((in_window, before))
}

/// Drops counted inside the window: per interface, the increases of the cumulative drop
/// counter from its baseline (0 without one) through the records in the window; a counter
/// that goes down started again (a new capture), so its new value counts whole.
pub(crate) fn drops_in_window(
    stats: &[Stat],
    baselines: &HashMap<Interface, FragmentStat>,
) -> Option<u64> {
    if stats.is_empty() {
        return None;
    }
    let mut last: HashMap<&Interface, u64> = baselines
        .iter()
        .filter_map(|(i, st)| Some((i, st.dropped?)))
        .collect();
    let mut total = 0u64;
    for (_, iface, st) in stats {
        let Some(d) = st.dropped else { continue };
        let prev = last.get(iface).copied().unwrap_or(0);
        total += if d >= prev { d - prev } else { d };
        last.insert(iface, d);
    }
    Some(total)
}
