//! Query planning: which blocks of which segments can hold packets of a query, decided from
//! block time ranges and the side index alone, without reading packets.
//!
//! ```text
//! segments -> blocks overlapping [from, to)                       (footer / block headers)
//!   filter is `all`           -> those blocks
//!   the store's catalog row of the segment rules the filter out -> none (catalog.rs)
//!   segment has no index      -> those blocks (reported; `capsule reindex` builds it)
//!   otherwise, from the index (the open segment's: its journal folded, sideindex/journal.rs):
//!     every flow direction the filter may match (Yes or Maybe)  -> the flow's blocks
//!       (a Maybe that only DSCP decides is re-checked against each block's DSCP mask)
//!     non-IP packets, if the filter may match them             -> blocks holding some
//!     open segment: blocks the journal has no record of           -> read (a scan)
//! ```
//! The plan over-approximates: export still applies the filter and the window to every
//! packet it reads, so a plan can make a query slower, never wrong.

use capsule_query::{Filter, FlowSide, Query, Tri};
use capsule_store::{Result, SegmentReader, Store, StoreError};

use crate::catalog::Catalog;
use crate::sideindex::journal::load_any;
use crate::sideindex::{FlowKey, FlowRecord, FlowTotals, SegmentIndex};

/// The blocks to read from one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentPlan {
    /// Position of the segment in the list given to [`plan`].
    pub segment: usize,
    pub seq: u64,
    pub blocks_total: usize,
    /// Blocks that overlap the window in time.
    pub blocks_in_window: usize,
    /// Blocks to read, ascending.
    pub blocks: Vec<usize>,
    /// Whether the side index was used (false: no index, or not needed).
    pub indexed: bool,
    /// Of the blocks in the window of an open segment, those its journal has no record of
    /// (read whole, as a scan).
    pub unjournaled: usize,
}

/// A whole query's plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub segments: Vec<SegmentPlan>,
    /// Segments that had to be planned without an index although the filter needed one.
    pub unindexed: Vec<u64>,
    /// Of those, the ones whose index is damaged, with what is wrong (they were read whole;
    /// the writer or `capsule reindex` rebuilds the index).
    pub damaged_index: Vec<(u64, String)>,
    /// Damaged journal records of open segments that were skipped (their blocks are read
    /// whole), with what was wrong.
    pub journal_notes: Vec<(u64, String)>,
}

impl Plan {
    pub fn blocks_read(&self) -> usize {
        self.segments.iter().map(|s| s.blocks.len()).sum()
    }
    pub fn blocks_total(&self) -> usize {
        self.segments.iter().map(|s| s.blocks_total).sum()
    }
    pub fn segments_touched(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| !s.blocks.is_empty())
            .count()
    }
}

/// The side of a flow record as the filter sees it; `tunnels`: its index keeps
/// encapsulations ([`crate::sideindex::SegmentIndex::tunnels`]).
pub fn flow_side(f: &FlowRecord, dir: usize, dscp_mask: u64, tunnels: bool) -> FlowSide {
    let encap = side_encap(&f.totals, dir, tunnels);
    key_side(&f.key, f.totals.tcp_flags[dir], dir, dscp_mask, encap)
}

/// The encapsulation every packet of direction `dir` arrived in, as [`FlowSide::encap`]
/// says it: known when the index keeps encapsulations (`tunnels`) and the direction's
/// packets arrived in none, or all in one.
pub fn side_encap(
    t: &FlowTotals,
    dir: usize,
    tunnels: bool,
) -> Option<Option<capsule_wire::Encap>> {
    if !tunnels {
        return None;
    }
    match t.encap.as_deref().and_then(|e| e.dirs[dir]) {
        None => Some(None),
        Some(d) if d.is_whole(t.packets[dir]) => Some(Some(capsule_wire::Encap {
            kind: d.kind,
            outer: d.outer,
            outer_dscp: None,
            id: d.id,
            mpls: d.mpls,
            layers: d.layers,
        })),
        Some(_) => None,
    }
}

/// [`flow_side`] of a flow given by its key, the TCP flags of direction `dir` and its
/// encapsulation ([`side_encap`]).
pub fn key_side(
    key: &FlowKey,
    tcp_flags: u8,
    dir: usize,
    dscp_mask: u64,
    encap: Option<Option<capsule_wire::Encap>>,
) -> FlowSide {
    let (src, dst, ports) = key.side(dir);
    FlowSide {
        vlans: key.vlans,
        ip_version: key.ip_version,
        proto: key.proto,
        src,
        dst,
        ports,
        dscp_mask,
        tcp_flags,
        encap,
    }
}

/// Plans `q` over `segments` (as opened from `store`).
///
/// Name terms (`sni`, `dns`, ...) are resolved by the caller first
/// (`flows::resolve` in this crate); unresolved, they plan as `Maybe` (every block read).
pub fn plan(store: &Store, segments: &[SegmentReader], q: &Query) -> Result<Plan> {
    let (from, to) = q.window();
    let mut out = Plan::default();
    // The catalog, when the filter needs an index: a damaged one is as good as none (each
    // segment's own index then decides).
    let catalog = if q.filter.is_all() {
        None
    } else {
        Catalog::load_shared(&store.index_dir()).ok().flatten()
    };
    for (si, seg) in segments.iter().enumerate() {
        // Blocks that only declare interfaces (no packets) are never read.
        let in_window: Vec<bool> = seg
            .blocks()
            .iter()
            .map(|b| b.packets > 0 && b.last_ns >= from && b.first_ns < to)
            .collect();
        let n_in = in_window.iter().filter(|&&w| w).count();
        let mut sp = SegmentPlan {
            segment: si,
            seq: seg.seq(),
            blocks_total: seg.blocks().len(),
            blocks_in_window: n_in,
            blocks: Vec::new(),
            indexed: false,
            unjournaled: 0,
        };
        let ruled_out = || {
            catalog
                .as_ref()
                .and_then(|c| c.row_for(seg))
                .is_some_and(|r| !r.may_match(&q.filter))
        };
        let wanted: Vec<bool> = if n_in == 0 || q.filter.is_all() {
            in_window.clone()
        } else if ruled_out() {
            // No packet of the segment can match: its index is not opened.
            sp.indexed = true;
            vec![false; in_window.len()]
        } else {
            match load_any(&store.index_dir_of(seg.seq()), seg) {
                Ok(Some(live)) => {
                    sp.indexed = true;
                    let mut wanted = index_candidates(&live.index, &q.filter, from, to);
                    for &b in &live.unseen {
                        wanted[b] = true;
                        sp.unjournaled += usize::from(in_window[b]);
                    }
                    out.journal_notes
                        .extend(live.notes.into_iter().map(|n| (seg.seq(), n)));
                    wanted
                }
                Ok(None) => {
                    out.unindexed.push(seg.seq());
                    in_window.clone()
                }
                // Damage stays local: plan the segment as a scan and say why.
                Err(e @ StoreError::DerivedDamaged { .. }) => {
                    out.unindexed.push(seg.seq());
                    out.damaged_index
                        .push((seg.seq(), capsule_store::error::chain(&e)));
                    in_window.clone()
                }
                Err(e) => return Err(e),
            }
        };
        sp.blocks = (0..seg.blocks().len())
            .filter(|&i| in_window[i] && wanted[i])
            .collect();
        out.segments.push(sp);
    }
    Ok(out)
}

/// Blocks of an indexed segment that may hold packets matching `filter` in [from, to).
pub fn index_candidates(idx: &SegmentIndex, filter: &Filter, from: u64, to: u64) -> Vec<bool> {
    let mut wanted = vec![false; idx.blocks.len()];
    if filter.matches_non_ip() != Tri::No {
        for (i, b) in idx.blocks.iter().enumerate() {
            wanted[i] |= b.non_ip_packets > 0;
        }
    }
    for f in &idx.flows {
        if f.totals.last_ns < from || f.totals.first_ns >= to {
            continue;
        }
        for dir in 0..2 {
            if f.totals.packets[dir] == 0 {
                continue;
            }
            // A packet of this side in block b adds its DSCP to b's mask, so a block whose
            // mask shares no bit with the side's holds none of the side's packets. With
            // blocks filled per DSCP class, this is what keeps a DSCP query to its class.
            let tunnels = idx.tunnels;
            let side = filter.matches_side(&flow_side(f, dir, f.totals.dscp[dir], tunnels));
            if side == Tri::No {
                continue;
            }
            for &b in &f.blocks {
                let b = b as usize;
                if wanted[b] {
                    continue;
                }
                let mask = f.totals.dscp[dir] & idx.blocks[b].dscp;
                wanted[b] = match side {
                    Tri::Yes => mask != 0,
                    // DSCP (or an encapsulation not known) makes a side Maybe: decide again
                    // on the narrowed mask.
                    _ => {
                        mask != 0
                            && filter.matches_side(&flow_side(f, dir, mask, tunnels)) != Tri::No
                    }
                };
            }
        }
    }
    wanted
}
