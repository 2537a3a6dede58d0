//! Flow listings from the side index alone (`capsule flows`): no packet is read.
//!
//! Records of the same flow in several segments are merged. With a time window, a flow's
//! counters are summed from its 1-second buckets that overlap the window; a flow that starts
//! or ends inside a partly covered second is counted for that whole second, and marked
//! `approximate`. Flows wholly inside the window carry their exact totals.
//!
//! The open segment is listed from its journal (sideindex/journal.rs), as far as it goes:
//! blocks it has no record of yet are named in [`FlowListing::unseen`].
//!
//! [`list_index_only`] answers the same without opening any segment file (for the analytics
//! commands, which must scale with flows, not bytes): a sealed segment's index is taken as
//! current when its recorded length equals the segment file's length (one `stat`), and an
//! open segment's journal is folded against the blocks its own records describe. It keeps
//! each flow's 1-second buckets, cut to the window and merged across segments.

use capsule_query::{Query, Tri};
use capsule_store::{Result, SegmentReader, Store, StoreError};

use crate::catalog::Catalog;

pub mod rollup;
use crate::plan::{key_side, side_encap};
use crate::sideindex::journal::load_any;
use crate::sideindex::{index_name, FlowCounts, FlowKey, SegmentIndex};

/// One flow over the queried window, both directions (0: a -> b, 1: b -> a): its counts,
/// merged across segments (no block list, no carried TCP state; buckets only when asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSummary {
    pub flow: FlowCounts,
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
    /// [`list_index_only`]: the first and last packet time of every flow the indexes hold
    /// (whatever the window and filter), the store's span as the index knows it.
    pub held: Option<(u64, u64)>,
    /// Segments of the window whose index keeps no names (written before index version 6,
    /// or an open segment's journal records written without them), whatever the filter.
    pub nameless: Vec<u64>,
    /// Only when the filter has name terms (`sni`, `dns`, `http.host`, `app`): the segments
    /// of the window those terms could not see (their index keeps no names, or they have
    /// no index at all), so the listing may miss their flows. Empty otherwise.
    pub names_unseen: Vec<u64>,
    /// Only when the filter has encapsulation terms (`tunnel`, `mpls`): the flows listed
    /// whose encapsulation the index does not decide (an index older than version 7, a
    /// direction whose packets arrived in more than one): they may have packets that match.
    pub encap_undecided: usize,
    /// The window's address -> name map: the DNS answers of every flow of the window,
    /// whatever the filter (of the segments read: one the catalog rules out for the filter
    /// gives none).
    pub dns: crate::names::DnsNames,
    /// [`list_index_only`]: the segments it listed ([`Store::list_held`]) and the store's
    /// ledger as read right after, for the notes of an answer (missing and repaired
    /// segments) without listing and reading it again.
    pub listed: Vec<u64>,
    pub ledger: Option<std::sync::Arc<capsule_store::ledger::Ledger>>,
}

/// The flows of `q` (filter and window) from the side index alone: every sealed segment's
/// `.idx` whose length matches its segment file, and the open segment's journal. No segment
/// file is opened. With `keep_buckets`, each flow keeps its 1-second buckets in the window.
/// The flows come in the order they were first seen (segment order), not ranked.
pub fn list_index_only(store: &Store, q: &Query, keep_buckets: bool) -> Result<FlowListing> {
    let (resolved, names_unseen) = resolve_index_only(store, q)?;
    let q = &resolved;
    let (from, to) = q.window();
    // Segments trimmed after upload too: their index stayed local.
    // Names only: a segment's length is read (one `lstat`) only where its index is read;
    // a rollup slice stands for its members without (see `load_item`).
    let (entries, ledger) = store.list_held_unsized_with_ledger()?;
    // Segments `verify --repair` rebuilt with fewer packets than they were sealed with: a
    // slice made before the repair would still hold their lost packets' flows.
    let short: std::collections::HashSet<u64> = ledger
        .iter()
        .flat_map(|l| l.short().map(|(s, _)| s.seq))
        .collect();
    let dir = store.index_dir();
    // Room for every flow record the sealed indexes of the window hold (headers only: one
    // read of 80 bytes each), so neither the listing nor its table grows while merging.
    // Not past PEEK_MAX sealed segments: there one more open and read of every index costs
    // more than growing the table (issue 34: 100,000 opens before the first index is read).
    const PEEK_MAX: usize = 4096;
    let sealed = || {
        entries
            .iter()
            .filter(|e| e.state == capsule_store::SegmentState::Sealed)
    };
    let hint: usize = if sealed().count() > PEEK_MAX {
        0
    } else {
        sealed()
            .filter_map(|e| {
                SegmentIndex::peek_file(&store.index_dir_of(e.seq).join(index_name(e.seq)))
            })
            .filter(|h| h.span.is_some_and(|(a, b)| b >= from && a < to))
            .map(|h| h.flows as usize)
            .sum()
    };
    let mut out = Merged::with_capacity(hint.min(1 << 26));
    let mut listing = FlowListing {
        names_unseen,
        listed: entries.iter().map(|e| e.seq).collect(),
        ledger: ledger.map(std::sync::Arc::new),
        ..FlowListing::default()
    };
    // Reading and decoding an index (zstd, varints, one allocation per flow), cutting its
    // flows to the window and filter, and merging them into the listing (hash look-ups,
    // bucket merges): two reader threads decode segments in turn (one takes the even ones,
    // the other the odd) while this one merges them in segment order, a bounded queue from
    // each (one index ahead: a 24-hour store's segment index decodes to tens of MB).
    const READERS: usize = 2;
    // A reader hands over its segments in batches (at most BATCH_SEGMENTS segments, closed
    // early once they hold BATCH_FLOWS flows, so a large index still goes alone): one hand
    // over per segment cost a wake-up of each thread, a quarter of `top`'s time at 100,000
    // small segments (issue 34).
    const BATCH_SEGMENTS: usize = 64;
    const BATCH_FLOWS: usize = 1 << 14;
    // The catalog rules segments out by the filter's hosts and ports (catalog.rs).
    let catalog = (!q.filter.is_all())
        .then(|| Catalog::load_shared(&dir).ok().flatten())
        .flatten();
    // With no filter, a slice of consecutive sealed segments is read from its rollup
    // (rollup.rs) when it stands for them and the window holds all of it: one item of work
    // for the slice's segments, in their place in segment order.
    let items = work_items(&entries, q.filter.is_all());
    let mut ruled = Vec::new();
    std::thread::scope(|scope| -> Result<()> {
        let entries = &entries;
        let items = &items;
        let short = &short;
        let catalog = catalog.as_ref();
        let mut queues = Vec::with_capacity(READERS);
        for k in 0..READERS {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<Vec<Loaded>>>>(1);
            queues.push(rx);
            scope.spawn(move || {
                let mut batch = Vec::new();
                let mut flows = 0;
                for item in items.iter().skip(k).step_by(READERS) {
                    let loaded = load_item(store, entries, item, q, keep_buckets, catalog, short);
                    let l = match loaded {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    flows += l.iter().map(|l| l.flows.len()).sum::<usize>();
                    batch.push(l);
                    if batch.len() >= BATCH_SEGMENTS || flows >= BATCH_FLOWS {
                        flows = 0;
                        if tx.send(Ok(std::mem::take(&mut batch))).is_err() {
                            return;
                        }
                    }
                }
                if !batch.is_empty() {
                    let _ = tx.send(Ok(batch));
                }
            });
        }
        let mut pending: Vec<std::collections::VecDeque<Vec<Loaded>>> =
            (0..READERS).map(|_| Default::default()).collect();
        for i in 0..items.len() {
            let k = i % READERS;
            if pending[k].is_empty() {
                // A reader that stopped sent its error first; one that panicked is reported
                // when the scope ends.
                let Ok(batch) = queues[k].recv() else {
                    break;
                };
                pending[k].extend(batch?);
            }
            let Some(item) = pending[k].pop_front() else {
                break;
            };
            for l in item {
                if let Some((a, b)) = l.held {
                    listing.held = Some(match listing.held {
                        None => (a, b),
                        Some((x, y)) => (x.min(a), y.max(b)),
                    });
                }
                if l.unindexed {
                    listing.unindexed.push(l.seq);
                }
                if l.nameless {
                    listing.nameless.push(l.seq);
                }
                if let Some(d) = l.damaged {
                    listing.damaged_index.push((l.seq, d));
                }
                if !l.unseen.is_empty() {
                    listing.unseen.push((l.seq, l.unseen));
                }
                listing
                    .journal_notes
                    .extend(l.notes.into_iter().map(|n| (l.seq, n)));
                listing.dns.absorb(&l.dns);
                // (Only those whose flows lie in the window hold answers of it.)
                if l.ruled && l.held.is_some_and(|(a, b)| b >= from && a < to) {
                    ruled.push(l.seq);
                }
                listing.encap_undecided += l.encap_undecided;
                for part in l.flows {
                    out.add(part);
                }
            }
        }
        Ok(())
    })?;
    // The window's DNS answers are every flow's, whatever the filter: those of the segments
    // the catalog ruled out too (else a filtered answer could name an address otherwise than
    // the same answer without a catalog).
    if !ruled.is_empty() {
        let dns = ruled_answers(store, &entries, &ruled, &short, (from, to))?;
        listing.dns.absorb(&dns);
    }
    // In first-seen order: the answers aggregate and rank on their own.
    listing.flows = out.flows;
    listing.flows.retain(|f| f.flow.totals.total_packets() > 0);
    Ok(listing)
}

/// Flow records from elsewhere (a fleet catalog's copy of several nodes' indexes) merged as
/// [`list_index_only`] merges a store's segments: each record matched against `q`'s filter
/// and cut to its window, records of the same flow merged (counters summed, buckets merged),
/// in first-seen order, flows without packets in the window left out. Given the records of
/// a store's indexes, it lists what [`list_index_only`] lists. With each record, whether
/// the index it was made from kept encapsulations (a record of an index that did not is
/// "maybe" for `tunnel` and `mpls` terms, as that index's own listing says).
pub fn merge_counts(
    records: impl IntoIterator<Item = (FlowCounts, bool)>,
    q: &Query,
    keep_buckets: bool,
) -> Vec<FlowSummary> {
    let (from, to) = q.window();
    let records = records.into_iter();
    let mut out = Merged::with_capacity(records.size_hint().0);
    let encap_terms = q.filter.has_encap_terms();
    // Each record selected and merged as it comes: records are large, and a segment's run
    // of them gathered first, then its selection, moved every record twice more.
    for (f, tunnels) in records {
        if let Some((part, _)) = select_one(f, q, (from, to), keep_buckets, tunnels, encap_terms) {
            out.add(part);
        }
    }
    let mut flows = out.flows;
    flows.retain(|f| f.flow.totals.total_packets() > 0);
    flows
}

/// The DNS answers of the window [from, to) in the segments `ruled` (ascending), which the
/// catalog ruled out of a filtered listing: from the rollup slice of each whole slice the
/// window holds (one file for up to 1,024 segments), from the segments' own indexes for the
/// others.
fn ruled_answers(
    store: &Store,
    entries: &[capsule_store::SegmentEntry],
    ruled: &[u64],
    short: &std::collections::HashSet<u64>,
    (from, to): (u64, u64),
) -> Result<crate::names::DnsNames> {
    use crate::rollup::{slice_of, Slice};
    let mut dns = crate::names::DnsNames::default();
    let all = Query {
        filter: capsule_query::Filter::all(),
        from_ns: Some(from),
        to_ns: Some(to),
    };
    let dir = store.index_dir();
    for run in ruled.chunk_by(|a, b| slice_of(*a) == slice_of(*b)) {
        let slice = Slice::load(&dir, slice_of(run[0]))
            .ok()
            .flatten()
            .and_then(|r| r.ok())
            .filter(|s| {
                s.stands_for(entries).is_some()
                    && s.held().is_none_or(|(a, b)| a >= from && b < to)
                    && !s.members.iter().any(|m| short.contains(&m.seq))
                    && run
                        .iter()
                        .all(|seq| s.members.binary_search_by_key(seq, |m| m.seq).is_ok())
            });
        if let Some(s) = slice {
            dns.absorb(&s.dns);
            continue;
        }
        for seq in run {
            let Ok(at) = entries.binary_search_by_key(seq, |e| e.seq) else {
                continue;
            };
            let Some(entry) = entries[at].sized()? else {
                continue;
            };
            let l = load_entry(&store.index_dir_of(entry.seq), &entry, &all, false)?;
            dns.absorb(&l.dns);
        }
    }
    Ok(dns)
}

/// What one segment's index gave [`list_index_only`].
#[derive(Default)]
struct Loaded {
    seq: u64,
    /// The first and last packet time of the flows the index holds (whatever the window).
    held: Option<(u64, u64)>,
    /// No usable index (missing, stale or damaged): its flows are missing from the listing.
    unindexed: bool,
    /// Its index keeps no names, and holds flows of the window.
    nameless: bool,
    /// Its index keeps encapsulations.
    tunnels: bool,
    /// The catalog ruled it out: its index was not read (nor its DNS answers).
    ruled: bool,
    /// Of `flows`, those whose encapsulation the filter's terms could not decide.
    encap_undecided: usize,
    damaged: Option<String>,
    unseen: Vec<usize>,
    notes: Vec<String>,
    /// The flows of the window and filter, cut to the window, when the index overlaps it.
    flows: Vec<FlowSummary>,
    /// The DNS answers of the window's flows (whatever the filter).
    dns: crate::names::DnsNames,
}

/// Reads and decodes the index of one segment (`.idx` when sealed, the journal when open).
/// A sealed segment whose current catalog row says no packet of it can match `q`'s filter:
/// what its index would have given (no flow of the filter; the span it holds), without
/// reading it. `None`: the index decides.
fn ruled_out(
    c: &crate::catalog::CatalogView,
    entry: &capsule_store::SegmentEntry,
    q: &Query,
) -> Option<Loaded> {
    let row = c.row(entry.seq)?;
    if entry.state != capsule_store::SegmentState::Sealed
        || row.segment_len != entry.bytes
        || row.may_match(&q.filter)
    {
        return None;
    }
    Some(Loaded {
        seq: entry.seq,
        held: ((row.first_ns, row.last_ns) != (0, 0)).then_some((row.first_ns, row.last_ns)),
        ruled: true,
        ..Loaded::default()
    })
}

/// One item of [`list_index_only`]'s work: the listed segments `entries[at..at + len]`,
/// read from the rollup of slice `slice` when it stands for them, else from their indexes.
struct Item {
    at: usize,
    len: usize,
    slice: Option<u64>,
}

/// The work of a listing: with `slices` (no filter), the sealed segments of each slice
/// together, else each segment alone.
fn work_items(entries: &[capsule_store::SegmentEntry], slices: bool) -> Vec<Item> {
    use crate::rollup::slice_of;
    let mut items: Vec<Item> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let sealed = e.state == capsule_store::SegmentState::Sealed;
        if let Some(last) = items.last_mut().filter(|_| slices && sealed) {
            if last.slice == Some(slice_of(e.seq)) && last.at + last.len == i {
                last.len += 1;
                continue;
            }
        }
        items.push(Item {
            at: i,
            len: 1,
            slice: (slices && sealed).then(|| slice_of(e.seq)),
        });
    }
    items
}

/// Reads one item: its slice's rollup where it stands for the item's segments (those of
/// them it does not hold read alone), else each segment's index.
fn load_item(
    store: &Store,
    entries: &[capsule_store::SegmentEntry],
    item: &Item,
    q: &Query,
    keep_buckets: bool,
    catalog: Option<&std::sync::Arc<crate::catalog::CatalogView>>,
    short: &std::collections::HashSet<u64>,
) -> Result<Vec<Loaded>> {
    let (from, to) = q.window();
    let mine = &entries[item.at..item.at + item.len];
    let one = |entry: &capsule_store::SegmentEntry| {
        // Its length first (listed without): a file gone since the listing is missing from
        // the answer, which says so.
        let Some(entry) = entry.sized()? else {
            return Ok(Loaded {
                seq: entry.seq,
                unindexed: true,
                ..Loaded::default()
            });
        };
        match catalog.and_then(|c| ruled_out(c, &entry, q)) {
            Some(l) => Ok(l),
            None => load_entry(&store.index_dir_of(entry.seq), &entry, q, keep_buckets),
        }
    };
    let dir = &store.index_dir();
    let slice = match item.slice.filter(|_| item.len > 1) {
        // A slice file that cannot be read or decoded is as good as none: the indexes say
        // the same (and the writer, `reindex` or `verify --repair` makes it again).
        Some(k) => crate::rollup::Slice::load(dir, k)
            .ok()
            .flatten()
            .and_then(|r| r.ok()),
        None => None,
    };
    let used = slice.and_then(|s| {
        let at = s.stands_for(entries)?;
        let inside = s.held().is_none_or(|(a, b)| a >= from && b < to);
        let repaired = s.members.iter().any(|m| short.contains(&m.seq));
        (inside && !repaired && at >= item.at && at + s.members.len() <= item.at + item.len)
            .then_some((at - item.at, s))
    });
    let Some((at, s)) = used else {
        return mine.iter().map(one).collect();
    };
    let n = s.members.len();
    let mut out = Vec::with_capacity(item.len - n + 1);
    for e in &mine[..at] {
        out.push(one(e)?);
    }
    let held = s.held();
    let (flows, _) = select(s.flows, q, from, to, keep_buckets, true);
    out.push(Loaded {
        seq: s.members[0].seq,
        held,
        tunnels: true,
        dns: s.dns,
        flows,
        ..Loaded::default()
    });
    for e in &mine[at + n..] {
        out.push(one(e)?);
    }
    Ok(out)
}

/// Flow records merged as a listing merges them (segment by segment, in order), for a
/// rollup slice (rollup.rs).
#[derive(Default)]
pub(crate) struct Merger(Merged);

impl Merger {
    /// Adds one segment's record of a flow, taken whole.
    pub(crate) fn add(&mut self, f: FlowCounts) {
        self.0.add(FlowSummary {
            flow: f,
            approximate: false,
        });
    }

    /// The merged flows, in first-seen order.
    pub(crate) fn into_flows(self) -> Vec<FlowCounts> {
        self.0.flows.into_iter().map(|s| s.flow).collect()
    }
}

fn load_entry(
    dir: &std::path::Path,
    entry: &capsule_store::SegmentEntry,
    q: &Query,
    keep_buckets: bool,
) -> Result<Loaded> {
    let (from, to) = q.window();
    use crate::sideindex::journal;
    use capsule_store::SegmentState;
    let mut l = Loaded {
        seq: entry.seq,
        ..Loaded::default()
    };
    let flows: Vec<FlowCounts> = match entry.state {
        SegmentState::Sealed => {
            let path = dir.join(index_name(entry.seq));
            let bytes = match capsule_store::fsx::read(&path, "read index") {
                Ok(b) => b,
                Err(e) if e.is_not_found() => {
                    l.unindexed = true;
                    return Ok(l);
                }
                Err(e) => return Err(e),
            };
            // The header first: an index wholly outside the window is not decoded.
            if let Some(h) = SegmentIndex::peek(&bytes) {
                if h.seq == entry.seq && h.segment_len == entry.bytes {
                    let Some((a, b)) = h.span else {
                        return Ok(l);
                    };
                    l.held = Some((a, b));
                    if b < from || a >= to {
                        return Ok(l);
                    }
                }
            }
            // Counts only: the carried TCP state and block lists (more than half of a
            // decoded record) are checked and dropped.
            // Without `keep_buckets`, a flow wholly in the window needs none (windowed).
            let drop_within = (!keep_buckets).then_some((from, to));
            match SegmentIndex::decode_counts(&bytes, drop_within) {
                Ok(i) if i.seq == entry.seq && i.segment_len == entry.bytes => {
                    l.nameless = !i.named;
                    l.tunnels = i.tunnels;
                    i.flows
                }
                Ok(_) => {
                    l.unindexed = true; // stale: another file's index
                    return Ok(l);
                }
                Err(problem) => {
                    let e = StoreError::DerivedDamaged { path, problem };
                    l.unindexed = true;
                    l.damaged = Some(capsule_store::error::chain(&e));
                    return Ok(l);
                }
            }
        }
        SegmentState::Open => {
            let path = dir.join(journal::journal_name(entry.seq));
            let bytes = match capsule_store::fsx::read(&path, "read index journal") {
                Ok(b) => b,
                Err(e) if e.is_not_found() => {
                    l.unindexed = true;
                    return Ok(l);
                }
                Err(e) => return Err(e),
            };
            // The blocks as the records describe them (the segment file is not read), the
            // ones a fold checkpoint covers taken from it.
            let ck = journal::checkpoint::load(dir, entry.seq);
            let live = journal::fold_journal(entry.seq, None, entry.bytes, &bytes, ck);
            l.unseen = live.unseen;
            l.notes = live.notes;
            l.nameless = !live.index.named;
            l.tunnels = live.index.tunnels;
            live.index.flows.into_iter().map(FlowCounts::from).collect()
        }
    };
    for f in &flows {
        l.held = Some(match l.held {
            None => (f.totals.first_ns, f.totals.last_ns),
            Some((a, b)) => (a.min(f.totals.first_ns), b.max(f.totals.last_ns)),
        });
    }
    // Names missing matter only where the index holds flows of the window.
    l.nameless &= flows
        .iter()
        .any(|f| f.totals.last_ns >= from && f.totals.first_ns < to);
    window_answers(&flows, from, to, &mut l.dns);
    (l.flows, l.encap_undecided) = select(flows, q, from, to, keep_buckets, l.tunnels);
    Ok(l)
}

/// Adds the flows of one segment's index that match `q` in [from, to) to `out`.
fn merge_segment(
    out: &mut Merged,
    flows: Vec<FlowCounts>,
    q: &Query,
    (from, to): (u64, u64),
    keep_buckets: bool,
    tunnels: bool,
) -> usize {
    out.flows.reserve(flows.len());
    let (parts, undecided) = select(flows, q, from, to, keep_buckets, tunnels);
    for part in parts {
        out.add(part);
    }
    undecided
}

/// Adds the DNS answers of the flows of `flows` that overlap [from, to) to `out`.
pub fn window_answers<'a>(
    flows: impl IntoIterator<Item = &'a FlowCounts>,
    from: u64,
    to: u64,
    out: &mut crate::names::DnsNames,
) {
    for f in flows {
        if f.totals.last_ns < from || f.totals.first_ns >= to {
            continue;
        }
        if let Some(n) = f.totals.names.as_deref() {
            out.add_flow(n);
        }
    }
}

/// The flows of one segment's index that match `q` in [from, to), cut to the window
/// (`tunnels`: the index keeps encapsulations), and how many of them matched only because
/// their encapsulation is not known (when the filter has `tunnel` or `mpls` terms).
fn select(
    flows: Vec<FlowCounts>,
    q: &Query,
    from: u64,
    to: u64,
    keep_buckets: bool,
    tunnels: bool,
) -> (Vec<FlowSummary>, usize) {
    let mut out = Vec::with_capacity(flows.len());
    let encap_terms = q.filter.has_encap_terms();
    let mut undecided = 0;
    for f in flows {
        if let Some((part, unsure)) =
            select_one(f, q, (from, to), keep_buckets, tunnels, encap_terms)
        {
            undecided += usize::from(unsure);
            out.push(part);
        }
    }
    (out, undecided)
}

/// [`select`] of one flow record: the record cut to the window when it overlaps it and
/// matches `q`'s filter, with whether it matched only because its encapsulation is not
/// known (`encap_terms`: the filter has `tunnel` or `mpls` terms).
fn select_one(
    f: FlowCounts,
    q: &Query,
    (from, to): (u64, u64),
    keep_buckets: bool,
    tunnels: bool,
    encap_terms: bool,
) -> Option<(FlowSummary, bool)> {
    if f.totals.last_ns < from || f.totals.first_ns >= to {
        return None;
    }
    let mut unsure = false;
    let matches = (0..2).fold(false, |any, d| {
        if f.totals.packets[d] == 0 {
            return any;
        }
        let encap = side_encap(&f.totals, d, tunnels);
        let t = q.filter.matches_side(&key_side(
            &f.key,
            f.totals.tcp_flags[d],
            d,
            f.totals.dscp[d],
            encap,
        ));
        unsure |= t != Tri::No && encap.is_none() && encap_terms;
        any || t != Tri::No
    });
    matches.then(|| (windowed(f, from, to, keep_buckets), unsure))
}

/// Flows merged across segments: the records in first-seen order, and where each key is.
/// (Records are large; a table of indexes moves none of them as it grows, and holds 8 bytes
/// a slot where a map from key to index held 64: the key is kept once, in its record.)
#[derive(Default)]
struct Merged {
    /// Indexes into `flows`, by the hash of their key.
    at: hashbrown::HashTable<usize>,
    /// foldhash: several times faster than SipHash on flow keys, and seeded per process, so
    /// crafted traffic cannot aim collisions at it.
    hasher: foldhash::fast::RandomState,
    flows: Vec<FlowSummary>,
}

impl Merged {
    /// Room for `n` flows without growing (the table rehashes every key as it grows).
    fn with_capacity(n: usize) -> Merged {
        Merged {
            at: hashbrown::HashTable::with_capacity(n),
            hasher: foldhash::fast::RandomState::default(),
            flows: Vec::with_capacity(n),
        }
    }

    /// Adds one segment's record of a flow: merged into the flow's summary if it has one.
    fn add(&mut self, part: FlowSummary) {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one(part.flow.key);
        let (flows, hasher) = (&self.flows, &self.hasher);
        let entry = self.at.entry(
            hash,
            |&i| flows[i].flow.key == part.flow.key,
            |&i| hasher.hash_one(flows[i].flow.key),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(e) => {
                let s = &mut self.flows[*e.get()];
                s.flow.absorb(&part.flow);
                crate::sideindex::merge_buckets(&mut s.flow.buckets, &part.flow.buckets);
                s.approximate |= part.approximate;
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(self.flows.len());
                self.flows.push(part);
            }
        }
    }
}

/// The merged flows with packets, largest first (sorted by index, each record moved once).
fn finish(out: Merged) -> Vec<FlowSummary> {
    let mut order: Vec<(u64, FlowKey, usize)> = out
        .flows
        .iter()
        .enumerate()
        .filter(|(_, f)| f.flow.totals.total_packets() > 0)
        .map(|(i, f)| (f.flow.totals.total_bytes(), f.flow.key, i))
        .collect();
    order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut slots: Vec<Option<FlowSummary>> = out.flows.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|(_, _, i)| slots[i].take())
        .collect()
}

/// A segment's index as [`list`] reads it: a sealed segment's flow counts, the open
/// segment's journal folded.
enum Listed {
    Counts(crate::sideindex::CountsIndex),
    Live(crate::sideindex::LiveIndex),
}

/// Lists the flows of `q` (filter and window) from the side index of `segments`.
pub fn list(store: &Store, segments: &[SegmentReader], q: &Query) -> Result<FlowListing> {
    let (resolved, names_unseen) = resolve(store, segments, q)?;
    let q = &resolved;
    let from = q.from_ns.unwrap_or(0);
    let to = q.to_ns.unwrap_or(u64::MAX);
    let mut out = Merged::default();
    let mut unindexed = Vec::new();
    let mut damaged_index = Vec::new();
    let mut unseen = Vec::new();
    let mut journal_notes = Vec::new();
    let mut dns = crate::names::DnsNames::default();
    let mut nameless = Vec::new();
    let mut encap_undecided = 0;
    let catalog = (!q.filter.is_all())
        .then(|| Catalog::load_shared(&store.index_dir()).ok().flatten())
        .flatten();
    for seg in segments {
        let overlaps = seg
            .blocks()
            .iter()
            .any(|b| b.last_ns >= from && b.first_ns < to);
        if !overlaps {
            continue;
        }
        // No flow of a segment its catalog row rules out can match the filter.
        if catalog
            .as_ref()
            .and_then(|c| c.row_for(seg))
            .is_some_and(|r| !r.may_match(&q.filter))
        {
            continue;
        }
        // A sealed segment's flows as counts only (no block lists, carried TCP state or
        // series are kept; no buckets of a flow wholly in the window): what a listing reads.
        // The open segment's from its journal folded.
        let dir = store.index_dir_of(seg.seq());
        let loaded = if seg.state() == capsule_store::SegmentState::Open {
            load_any(&dir, seg).map(|l| l.map(Listed::Live))
        } else {
            SegmentIndex::load_counts(&dir, seg, Some((from, to))).map(|c| c.map(Listed::Counts))
        };
        let tunnels: bool;
        let flows: Vec<FlowCounts> = match loaded {
            Ok(Some(Listed::Counts(counts))) => {
                if !counts.named {
                    nameless.push(seg.seq());
                }
                tunnels = counts.tunnels;
                counts.flows
            }
            Ok(Some(Listed::Live(live))) => {
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
                if !live.index.named {
                    nameless.push(seg.seq());
                }
                tunnels = live.index.tunnels;
                live.index.flows.into_iter().map(FlowCounts::from).collect()
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
        window_answers(&flows, from, to, &mut dns);
        encap_undecided += merge_segment(&mut out, flows, q, (from, to), false, tunnels);
    }
    let flows = finish(out);
    Ok(FlowListing {
        flows,
        unindexed,
        damaged_index,
        unseen,
        journal_notes,
        held: None,
        nameless,
        names_unseen,
        encap_undecided,
        dns,
        ..FlowListing::default()
    })
}

/// A flow record's counters over [from, to), with its buckets in the window if
/// `keep_buckets`. A flow the window cuts has its packet, byte and TCP counters summed from
/// the buckets; its per-DSCP counters, DSCP change, zero-window duration and handshake bits
/// stay the whole record's, and so do its cut-off counters (none when the window ends
/// before the first packet cut; at most the window's packets and bytes) (the summary is
/// `approximate`).
fn windowed(mut f: FlowCounts, from: u64, to: u64, keep_buckets: bool) -> FlowSummary {
    let in_window = |b: &crate::sideindex::CountsBucket| {
        let start = b.second.saturating_mul(1_000_000_000);
        start.saturating_add(1_000_000_000) > from && start < to
    };
    let whole = f.totals.first_ns >= from && f.totals.last_ns < to;
    if !keep_buckets && whole {
        f.buckets = Vec::new();
    }
    if whole {
        return FlowSummary {
            flow: f,
            approximate: false,
        };
    }
    let buckets = std::mem::take(&mut f.buckets);
    let mut flow = f;
    let t = &mut flow.totals;
    // Whether each direction's packets all arrived in its one encapsulation: still so of
    // the window's share of them.
    let encap_whole = [0, 1].map(|d| {
        t.encap
            .as_deref()
            .and_then(|e| e.dirs[d])
            .is_some_and(|e| e.is_whole(t.packets[d]))
    });
    t.first_ns = t.first_ns.max(from);
    t.last_ns = t.last_ns.min(to.saturating_sub(1));
    t.packets = [0; 2];
    t.bytes = [0; 2];
    t.data = [0; 2];
    t.retransmissions = [0; 2];
    t.zero_windows = [0; 2];
    t.resets = [0; 2];
    for b in buckets.iter().filter(|b| in_window(b)) {
        for d in 0..2 {
            t.packets[d] += u64::from(b.packets[d]);
            t.bytes[d] += b.bytes[d];
            t.data[d] += u64::from(b.data[d]);
            t.retransmissions[d] += u64::from(b.retransmissions[d]);
            t.zero_windows[d] += u64::from(b.zero_windows[d]);
            t.resets[d] += u64::from(b.resets[d]);
        }
    }
    // What the cut-off did not store has no buckets: none of it is in a window that ends
    // before the first cut packet; else the whole record's, at most what the window holds.
    for (d, &whole) in encap_whole.iter().enumerate() {
        if t.cut_at_ns[d].is_none_or(|c| c >= to) {
            t.cut_packets[d] = 0;
            t.cut_bytes[d] = 0;
            t.cut_at_ns[d] = None;
        }
        t.cut_packets[d] = t.cut_packets[d].min(t.packets[d]);
        if let Some(e) = t.encap.as_deref_mut().and_then(|e| e.dirs[d].as_mut()) {
            e.packets = if whole {
                t.packets[d]
            } else {
                e.packets.min(t.packets[d].saturating_sub(1))
            };
        }
        t.cut_bytes[d] = t.cut_bytes[d].min(t.bytes[d]);
    }
    if keep_buckets {
        flow.buckets = buckets.into_iter().filter(in_window).collect();
    }
    FlowSummary {
        flow,
        approximate: true,
    }
}

/// The flows of a window the cut-off did not store whole (see [`crate::cutoff`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CutSummary {
    /// Flows of the window (and filter) with packets not stored.
    pub flows: usize,
    /// The earliest packet of those flows not stored.
    pub first_cut_ns: Option<u64>,
}

/// How many flows of `q` (filter and window) were cut, and from when, from the side index of
/// `segments` (as [`list`] lists them). What `capsule query` says after an export.
pub fn cut_summary(store: &Store, segments: &[SegmentReader], q: &Query) -> Result<CutSummary> {
    let listing = list(store, segments, q)?;
    let cut = listing.flows.iter().filter(|f| f.flow.totals.is_cut());
    let mut out = CutSummary::default();
    for f in cut {
        out.flows += 1;
        out.first_cut_ns = match (out.first_cut_ns, f.flow.totals.cut_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(out)
}

/// Which side of a flow (0: a, 1: b) is the client, from the best evidence the index holds:
/// the side whose bytes were a client's, its ClientHello, request or query (the names
/// record's client bits); else the side that sent a SYN the other answered with a SYN-ACK, when
/// only one did; else the ports: the side whose port is not a well-known one (below 1024)
/// while the other's is, or else the side whose port is in the ephemeral range (32768 and
/// up, Linux's default) while the other's is not. `None` when nothing tells.
pub fn client_side(f: &FlowCounts) -> Option<usize> {
    use crate::sideindex::{SENT_SYN, SENT_SYN_ACK};
    if let Some(c) = f.totals.names.as_ref().and_then(|n| n.client) {
        return Some(usize::from(c & 1));
    }
    let h = f.totals.handshake;
    let opened = |d: usize| h[d] & SENT_SYN != 0 && h[1 - d] & SENT_SYN_ACK != 0;
    match (opened(0), opened(1)) {
        (true, false) => return Some(0),
        (false, true) => return Some(1),
        _ => {}
    }
    let (pa, pb) = f.key.ports?;
    let class = |p: u16| match p {
        0..=1023 => 0,
        1024..=32767 => 1,
        _ => 2,
    };
    match class(pa).cmp(&class(pb)) {
        std::cmp::Ordering::Less => Some(1),
        std::cmp::Ordering::Greater => Some(0),
        std::cmp::Ordering::Equal => None,
    }
}

/// `q` with its name terms (`sni`, `dns`, `http.host`, `app`) resolved over the flows of its
/// window in `segments`, from the index alone (index/src/names.rs); `q` itself without them.
/// With them, also the segments of the window those terms could not see (their index keeps
/// no names, or they have none): an answer over them may miss flows, and says so.
pub fn resolve(store: &Store, segments: &[SegmentReader], q: &Query) -> Result<(Query, Vec<u64>)> {
    if !q.filter.has_names() {
        return Ok((q.clone(), Vec::new()));
    }
    let all = Query {
        filter: capsule_query::Filter::all(),
        ..q.clone()
    };
    Ok(resolved(q, &list(store, segments, &all)?))
}

/// `q` with its name terms replaced by what `listing` (every flow of the window) names, and
/// the segments whose flows the listing could not name.
fn resolved(q: &Query, listing: &FlowListing) -> (Query, Vec<u64>) {
    let filter = crate::names::resolve_over(
        &q.filter,
        listing
            .flows
            .iter()
            .map(|s| (&s.flow.key, s.flow.totals.names.as_deref())),
    );
    let mut unseen: Vec<u64> = listing
        .nameless
        .iter()
        .chain(&listing.unindexed)
        .copied()
        .collect();
    unseen.sort_unstable();
    unseen.dedup();
    (
        Query {
            filter,
            ..q.clone()
        },
        unseen,
    )
}

/// [`resolve`] from the index alone (no segment opened), as [`list_index_only`].
pub fn resolve_index_only(store: &Store, q: &Query) -> Result<(Query, Vec<u64>)> {
    if !q.filter.has_names() {
        return Ok((q.clone(), Vec::new()));
    }
    let all = Query {
        filter: capsule_query::Filter::all(),
        ..q.clone()
    };
    Ok(resolved(q, &list_index_only(store, &all, false)?))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sideindex::CountsBucket;

    /// A UDP flow from `a` to 10.0.0.9:53 starting at second `first_s`, with `packets`
    /// packets of 100 bytes in that second (also the rollup tests' record).
    pub(crate) fn rec(a: &str, first_s: u64, packets: u64) -> FlowCounts {
        let key = FlowKey {
            vlans: [None, None],
            ip_version: 4,
            proto: 17,
            a: a.parse().unwrap(),
            b: "10.0.0.9".parse().unwrap(),
            ports: Some((1000, 53)),
        };
        let mut f = FlowCounts::new(key, first_s * 1_000_000_000, first_s * 1_000_000_000 + 10);
        f.totals.packets = [packets, 0];
        f.totals.bytes = [packets * 100, 0];
        f.buckets = vec![CountsBucket {
            second: first_s,
            bytes: [packets * 100, 0],
            packets: [packets as u32, 0],
            ..CountsBucket::default()
        }];
        f
    }

    #[test]
    fn records_of_one_flow_merge_and_the_filter_and_window_apply() {
        let q = Query::all();
        let m = merge_counts(
            [
                rec("10.0.0.1", 5, 2),
                rec("10.0.0.2", 5, 1),
                rec("10.0.0.1", 7, 3),
            ]
            .map(|r| (r, true)),
            &q,
            true,
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].flow.totals.packets, [5, 0]);
        assert_eq!(m[0].flow.buckets.len(), 2);
        assert_eq!(m[0].flow.totals.first_ns, 5_000_000_000);
        let q = Query {
            filter: capsule_query::Filter::parse("host 10.0.0.1").unwrap(),
            from_ns: Some(6_000_000_000),
            to_ns: None,
        };
        let m = merge_counts(
            [
                rec("10.0.0.1", 5, 2),
                rec("10.0.0.2", 7, 1),
                rec("10.0.0.1", 7, 3),
            ]
            .map(|r| (r, true)),
            &q,
            true,
        );
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].flow.totals.packets, [3, 0]);
    }

    /// A window that cuts a flow keeps what its encapsulation says: a direction whose packets
    /// all arrived in one stays whole, one with some bare packets stays not whole.
    #[test]
    fn a_window_keeps_whether_a_direction_arrived_whole_in_its_encapsulation() {
        let encap = |packets: u64| crate::sideindex::FlowEncap {
            dirs: [
                Some(crate::sideindex::EncapDir {
                    kind: capsule_wire::EncapKind::Vxlan,
                    outer: None,
                    id: Some(42),
                    mpls: None,
                    layers: 1,
                    packets,
                    mixed: false,
                    outer_dscp: 0,
                }),
                None,
            ],
        };
        for (encapsulated, whole) in [(5, true), (4, false)] {
            let mut f = rec("10.0.0.1", 5, 2);
            let later = rec("10.0.0.1", 7, 3);
            f.totals.absorb(&later.totals);
            f.buckets.extend(later.buckets);
            f.totals.encap = Some(Box::new(encap(encapsulated)));
            let w = windowed(f, 6_000_000_000, u64::MAX, false);
            let t = &w.flow.totals;
            assert_eq!(t.packets, [3, 0]);
            let d = t.encap.as_deref().unwrap().dirs[0].unwrap();
            assert_eq!(d.is_whole(t.packets[0]), whole, "{encapsulated} of 5");
        }
    }
}
