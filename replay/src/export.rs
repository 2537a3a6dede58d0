//! Export of a query's packets as pcap or pcapng: the plan, the k-way merge by timestamp,
//! and the report. See the crate docs for the data path.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::Write;
use std::sync::Arc;

use capsule_index::plan::{plan, Plan};
use capsule_pcap::Interface;
use capsule_query::Query;
use capsule_store::{SegmentReader, Store};
use crossbeam_channel::bounded;

use crate::encode::{Encoder, Format};
use crate::error::ExportError;
use crate::prefetch::{check_bpf_len, linktype_of, prefetch, Bpf, Loaded, PacketFilter, Planned};
pub use crate::report::{ExportReport, SkippedBlock};
use crate::stats::{drops_in_window, interface_stats, Stat};

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub format: Format,
    /// Filter and time window.
    pub query: Query,
    /// A tcpdump filter expression applied after capsule's own filter (libpcap's compiler).
    pub bpf: Option<String>,
    /// Decompression threads.
    pub threads: usize,
    /// A cap on the output's size in bytes (header, packet records and interface statistics
    /// together): the first packets that fit are written; later ones are only counted
    /// ([`ExportReport::packets_over_cap`]). `None`: no cap. A partial pcapng answer's
    /// closing note ([`ExportReport::partial_note`], at most about 1 KiB) may pass it.
    pub max_bytes: Option<u64>,
    /// Only these segments (sequence numbers): the candidate segments a fleet's catalog
    /// found for this node. The others are not read; a listed segment the store does not
    /// hold is named in the report ([`ExportReport::unreadable`]: the answer is partial).
    /// `None`: every segment.
    pub segments: Option<Vec<u64>>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            format: Format::Pcap,
            query: Query::all(),
            bpf: None,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_bytes: None,
            segments: None,
        }
    }
}

impl ExportOptions {
    /// Export of the window [from, to) with no filter.
    pub fn window(from_ns: Option<u64>, to_ns: Option<u64>) -> Self {
        ExportOptions {
            query: Query {
                from_ns,
                to_ns,
                ..Query::all()
            },
            ..Default::default()
        }
    }
}

/// The next packet of an open block, ordered for the merge: by timestamp, then segment,
/// block and packet position, so equal timestamps keep the order they were written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Cursor {
    ts_ns: u64,
    seq: u64,
    block: usize,
    packet: usize,
    /// Key of the block in the map of open blocks.
    slot: usize,
}

/// The link types a `--bpf` expression must compile for: every link type of the store's
/// segments (Ethernet for an empty store).
pub fn bpf_linktypes(segments: &[SegmentReader]) -> Vec<u16> {
    let mut types: Vec<u16> = segments
        .iter()
        .flat_map(|s| s.interfaces().iter().map(|i| i.linktype))
        .collect();
    types.sort_unstable();
    types.dedup();
    if types.is_empty() {
        types.push(capsule_pcap::LINKTYPE_ETHERNET);
    }
    types
}

/// Plans an export without reading any packet (`--explain`).
pub fn explain(store: &Store, opts: &ExportOptions) -> Result<Plan, ExportError> {
    let segments = store.open_segments()?;
    let (query, _) = capsule_index::flows::resolve(store, &segments, &opts.query)?;
    Ok(plan(store, &segments, &query)?)
}

/// Exports the packets of `opts`' query from `store` to `out`, in timestamp order.
pub fn export<W: Write>(
    store: &Store,
    opts: &ExportOptions,
    out: W,
) -> Result<ExportReport, ExportError> {
    // pcapng declares the interfaces of the window's statistics too (pcap carries none).
    let mut window = Window::open(
        store,
        &opts.query,
        opts.bpf.as_deref(),
        opts.format == Format::PcapNg,
        opts.segments.as_deref(),
    )?;
    let mut enc = Encoder::new(out, opts.format, &window.out_ifaces)?;
    // With a cap, the statistics written at the end are kept room for: the file never
    // grows past it. Once one packet does not fit, no later one is written (the file holds
    // the first packets, in order, with no gap).
    let mut room = opts.max_bytes.map(|cap| {
        let trailer: u64 = window
            .window_stats
            .iter()
            .filter_map(|(si, _, st)| {
                window
                    .iface_map
                    .get(&(*si, st.iface))
                    .map(|&i| enc.stats_len(i, st))
            })
            .sum();
        cap.saturating_sub(enc.encoded() + trailer)
    });
    let (mut over_packets, mut over_bytes) = (0u64, 0u64);
    window.merge(opts.threads, |iface, ts_ns, orig_len, data, options| {
        if let Some(left) = &mut room {
            let need = enc.record_len(data.len(), options.len());
            if over_packets > 0 || need > *left {
                over_packets += 1;
                over_bytes += data.len() as u64;
                return Ok(());
            }
            *left -= need;
        }
        enc.packet(iface, ts_ns, orig_len, data, options)
    })?;
    // `merge` counts every packet it handed over; those past the cap were not written.
    window.report.packets -= over_packets;
    window.report.captured_bytes -= over_bytes;
    window.report.packets_over_cap = over_packets;
    window.report.captured_bytes_over_cap = over_bytes;
    for (si, _, st) in &window.window_stats {
        if let Some(&out_iface) = window.iface_map.get(&(*si, st.iface)) {
            enc.stats(out_iface, st);
        }
    }
    // A partial pcapng answer says so in the file itself: the evidence carries its gaps.
    // The note (at most about 1 KiB) may pass a cap: what it says matters more than the
    // cap's last KiB, and no packet is written after it.
    if let Some(note) = window.report.partial_note() {
        enc.note(&note);
    }
    enc.finish()?;
    Ok(window.report)
}

/// Counts what `opts` selects without writing it: the packets and captured bytes of the
/// answer, and everything the report of [`export`] says about damage, in one pass over the
/// selected blocks in any order (no merge by time, so no block is held past its count).
pub fn count(store: &Store, opts: &ExportOptions) -> Result<ExportReport, ExportError> {
    Ok(count_with_segments(store, opts)?.0)
}

/// [`count`], and the store's segments as it opened them (opening every segment again
/// costs as much as the count's own opening on a store of many segments; and the count
/// opened only the segments the catalog could not rule out, which are the ones a flow
/// summary of the same question needs).
pub fn count_with_segments(
    store: &Store,
    opts: &ExportOptions,
) -> Result<(ExportReport, Arc<Vec<SegmentReader>>), ExportError> {
    let mut window = Window::open(
        store,
        &opts.query,
        opts.bpf.as_deref(),
        false,
        opts.segments.as_deref(),
    )?;
    window.tally(opts.threads, |_, _| {})?;
    let Window {
        report, segments, ..
    } = window;
    Ok((report, segments))
}

/// What [`export`] of `opts` would write, without writing it: the report of a [`count`]
/// and the exact size in bytes of the file in `opts.format`: its header and interfaces,
/// every packet record with its options, the interface statistics and, for a partial
/// pcapng answer, its closing note. A download shows it before it starts. `opts.max_bytes`
/// is not applied (the size is that of the whole answer).
pub fn size(store: &Store, opts: &ExportOptions) -> Result<(ExportReport, u64), ExportError> {
    let pcapng = opts.format == Format::PcapNg;
    let mut window = Window::open(
        store,
        &opts.query,
        opts.bpf.as_deref(),
        pcapng,
        opts.segments.as_deref(),
    )?;
    let mut enc = Encoder::new(std::io::sink(), opts.format, &window.out_ifaces)?;
    let mut records = 0u64;
    window.tally(opts.threads, |caplen, options| {
        records += enc.record_len(caplen, options)
    })?;
    for (si, _, st) in &window.window_stats {
        if let Some(&out_iface) = window.iface_map.get(&(*si, st.iface)) {
            enc.stats(out_iface, st);
        }
    }
    if let Some(note) = window.report.partial_note() {
        enc.note(&note);
    }
    Ok((window.report, enc.encoded() + records))
}

/// A query's window made ready to read: its plan, the interfaces its packets are written
/// with, and the report so far. [`Window::merge`] then hands over every selected packet in
/// timestamp order; the export encodes them, the replay sends them.
pub(crate) struct Window {
    segments: Arc<Vec<SegmentReader>>,
    plan: Vec<Planned>,
    filter: PacketFilter,
    /// What was read and skipped; `packets` and `captured_bytes` count what `merge` handed
    /// over.
    pub(crate) report: ExportReport,
    /// The output interfaces: equal interfaces of different segments are one.
    pub(crate) out_ifaces: Vec<Interface>,
    /// (segment, its interface id) -> output interface id.
    iface_map: HashMap<(usize, u32), u32>,
    /// The interface statistics recorded in the window.
    window_stats: Vec<Stat>,
    /// The `--bpf` programs, compiled once here for every link type of the store and
    /// applied by the one thread that merges or counts (libpcap's program cannot be shared
    /// between threads, and compiling it per reader thread multiplied a slow compile).
    bpf: Option<Bpf>,
}

/// The stretches of segments lost where the window reaches them: a damage the walk over a
/// segment's blocks found with no block header to say what it held (`block: None`; a
/// damaged block with a readable header is planned, and skipped by `merge`, on its own).
/// What such a stretch held lies after the segment's last block before it, and before the
/// next segment's first packet: the window reaches it when it overlaps that span. The
/// store's ledger, when it records the segment, bounds the span by the segment's own first
/// and last packet.
fn lost_in_window(
    segments: &[SegmentReader],
    query: &Query,
    ledger: Option<&capsule_store::ledger::Ledger>,
) -> Vec<capsule_store::Unreadable> {
    let (from, to) = query.window();
    let mut lost = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        let recorded = ledger
            .and_then(|l| l.live.get(&seg.seq()))
            .filter(|r| r.packets > 0);
        for d in seg.damaged().iter().filter(|d| d.block.is_none()) {
            let start = seg
                .blocks()
                .iter()
                .filter(|b| b.frame_offset < d.offset && b.packets > 0)
                .map(|b| b.first_ns)
                .max()
                .unwrap_or(0)
                .max(recorded.map_or(0, |r| r.first_ns));
            let end = segments[i + 1..]
                .iter()
                .flat_map(|s| s.blocks().iter().filter(|b| b.packets > 0))
                .map(|b| b.first_ns)
                .min()
                .map_or(u64::MAX, |n| n.saturating_add(1))
                .min(recorded.map_or(u64::MAX, |r| r.last_ns.saturating_add(1)));
            if start < to && from < end {
                lost.push(capsule_store::Unreadable {
                    seq: seg.seq(),
                    path: seg.path().to_path_buf(),
                    problem: format!("bytes {}..{}: {}", d.offset, d.offset + d.len, d.problem),
                    span: Some((start, end.saturating_sub(1))),
                });
            }
        }
    }
    lost
}

/// The segments of `only` the store holds neither as `segments` nor as `unreadable`: named,
/// with no span (whatever they held, the answer misses it).
fn not_held(
    store: &Store,
    only: &[u64],
    segments: &[SegmentReader],
    unreadable: &[capsule_store::Unreadable],
) -> Vec<capsule_store::Unreadable> {
    let mut seen = std::collections::BTreeSet::new();
    only.iter()
        .filter(|&&seq| seen.insert(seq))
        .filter(|&&seq| {
            !segments.iter().any(|s| s.seq() == seq) && !unreadable.iter().any(|u| u.seq == seq)
        })
        .map(|&seq| capsule_store::Unreadable {
            seq,
            path: store.segments_dir(),
            problem: format!(
                "segment {seq} was asked for but this store does not hold it (deleted by \
                 retention since it was published, or never here)"
            ),
            span: None,
        })
        .collect()
}

/// The segments a proven catalog's listing rules out, counted (not listed one by one).
#[derive(Debug, Default)]
struct RuledOut {
    segments: usize,
    blocks: usize,
    held: capsule_store::Held,
}

/// A proven listing: the segments to open (number, state, path), the ledger's records of
/// them with its repairs and expiry, the segments it records whose files are gone.
type ProvenListing = (
    Vec<(u64, capsule_store::SegmentState, std::path::PathBuf)>,
    capsule_store::ledger::Ledger,
    Vec<capsule_store::ledger::Missing>,
    RuledOut,
);

/// The listing of `store` from catalog `c` when it proves it current
/// ([`capsule_index::catalog::CatalogView::proven`]), with the segments a question over
/// `[from, to)` with `query`'s filter leaves unopened counted apart: the same segments
/// [`Store::open_segments_selected`] with the rows' [`Row::skips`] would leave (a slice's
/// summary rules out only what each of its rows would). `None`: not proven, or a slice to
/// look into does not decode (then which segments it lists is unknown).
///
/// [`Row::skips`]: capsule_index::catalog::Row::skips
fn proven_listing(
    store: &Store,
    c: &capsule_index::catalog::CatalogView,
    query: &Query,
    from: u64,
    to: u64,
) -> Option<ProvenListing> {
    use capsule_store::segment::{open_name, sealed_name};
    use capsule_store::SegmentState;
    let p = c.proven(store)?;
    let dir = store.segments_dir();
    let mut ledger = capsule_store::ledger::Ledger {
        repaired: p.repaired.iter().copied().collect(),
        expired: p.expired,
        ..Default::default()
    };
    let mut out = RuledOut::default();
    let mut open: Vec<(u64, SegmentState)> = Vec::new();
    for (i, h) in c.slices.iter().enumerate() {
        if h.skips(&query.filter, from, to) {
            out.segments += h.rows as usize;
            out.blocks += h.blocks as usize;
            out.held.add_seq(h.first_seq);
            if let Some((a, z)) = h.held {
                out.held.add_span(a, z);
            }
            continue;
        }
        let rows = c.slice(i)?;
        for (&seq, r) in &rows.rows {
            if let Some(rec) = rows.sealed.get(&seq) {
                ledger.live.insert(seq, *rec);
            }
            if r.skips(seq, Some(&ledger), &query.filter, from, to) {
                out.segments += 1;
                out.blocks += r.blocks as usize;
                out.held.add_seq(seq);
                if let Some(h) = r.held.filter(|h| h.packets > 0) {
                    out.held.add_span(h.first_ns, h.last_ns);
                }
            } else {
                open.push((seq, SegmentState::Sealed));
            }
        }
    }
    for &(seq, state, rec) in &p.others {
        if let Some(rec) = rec {
            ledger.live.insert(seq, rec);
        }
        open.push((seq, state));
    }
    open.sort_unstable();
    let listed = open
        .into_iter()
        .map(|(seq, state)| {
            let name = match state {
                SegmentState::Sealed => sealed_name(seq),
                SegmentState::Open => open_name(seq),
            };
            (seq, state, dir.join(name))
        })
        .collect();
    let missing = p
        .missing
        .iter()
        .map(|s| capsule_store::ledger::Missing {
            path: dir.join(sealed_name(s.seq)),
            sealed: *s,
        })
        .collect();
    Some((listed, ledger, missing, out))
}

impl Window {
    /// Plans `query` over `store` and maps the interfaces of the segments it reads (and,
    /// with `stats_ifaces`, of the segments holding statistics of the window). A `bpf`
    /// expression that does not compile for a link type of the store fails here, before any
    /// packet is handed over. `only`: the segments to read ([`ExportOptions::segments`]).
    pub(crate) fn open(
        store: &Store,
        query: &Query,
        bpf: Option<&str>,
        stats_ifaces: bool,
        only: Option<&[u64]>,
    ) -> Result<Window, ExportError> {
        // The catalog rules segments out before any is opened (issue 34): a store of many
        // segments answers from the few the window and the filter can reach. A list of
        // segments to read (`only`, a fleet's candidates) is applied first.
        let catalog = capsule_index::catalog::Catalog::load_shared(&store.index_dir())
            .ok()
            .flatten();
        let (from, to) = query.window();
        let listed = |seq: u64| only.is_none_or(|o| o.contains(&seq));
        // A catalog that proves its listing current (the segment directory and the ledger
        // as it was written with) is the listing and the ledger: whole slices its summary
        // rules out are counted from it, the others' rows decoded and checked one by one,
        // and neither the directory nor the ledger is read (issue 34, round 5).
        let fast = match (&catalog, only) {
            (Some(c), None) => proven_listing(store, c, query, from, to),
            _ => None,
        };
        let (selected, ruled_out) = match fast {
            Some((listed, ledger, missing, ruled_out)) => (
                store.open_from_listing(listed, Some(ledger), missing, &|_, _| None)?,
                ruled_out,
            ),
            None => (
                match &catalog {
                    Some(c) => store.open_segments_selected(&|seq, ledger| {
                        if !listed(seq) {
                            return Some(0);
                        }
                        let r = c.row(seq)?;
                        r.skips(seq, ledger, &query.filter, from, to)
                            .then_some(r.segment_len)
                    })?,
                    None => store.open_segments_selected(&|_, _| None)?,
                },
                RuledOut::default(),
            ),
        };
        let capsule_store::Selected {
            mut segments,
            mut unreadable,
            mut skipped,
            ledger,
        } = selected;
        if let Some(only) = only {
            segments.retain(|s| only.contains(&s.seq()));
            unreadable.retain(|u| only.contains(&u.seq));
            skipped.retain(|e| only.contains(&e.seq));
            // A listed segment the catalog ruled out is held, not missing.
            let ruled_out: Vec<u64> = skipped.iter().map(|e| e.seq).collect();
            unreadable.extend(
                not_held(store, only, &segments, &unreadable)
                    .into_iter()
                    .filter(|u| !ruled_out.contains(&u.seq)),
            );
        }
        let mut held = capsule_store::Held::of(&segments);
        if let Some(seq) = ruled_out.held.lowest_seq {
            held.add_seq(seq);
        }
        if let (Some(a), Some(z)) = (ruled_out.held.first_ns, ruled_out.held.last_ns) {
            held.add_span(a, z);
        }
        for e in &skipped {
            held.add_seq(e.seq);
            if let Some(h) = catalog
                .as_ref()
                .and_then(|c| c.row(e.seq))
                .and_then(|r| r.held)
                .filter(|h| h.packets > 0)
            {
                held.add_span(h.first_ns, h.last_ns);
            }
        }
        let segments = Arc::new(segments);
        // Name terms resolved from the index once, for the plan and every packet's check.
        let (resolved, names_unseen) = capsule_index::flows::resolve(store, &segments, query)?;
        let query = &resolved;
        let the_plan = plan(store, &segments, query)?;
        let mut report = ExportReport {
            segments_total: segments.len() + skipped.len() + ruled_out.segments,
            held,
            segments_touched: the_plan.segments_touched(),
            // the segments ruled out count as their rows say (a row describes its file)
            blocks_total: the_plan.blocks_total()
                + ruled_out.blocks
                + skipped
                    .iter()
                    .filter_map(|e| catalog.as_ref()?.row(e.seq))
                    .map(|r| r.blocks as usize)
                    .sum::<usize>(),
            blocks_read: the_plan.blocks_read(),
            unindexed: the_plan.unindexed.clone(),
            damaged_index: the_plan.damaged_index.clone(),
            names_unseen,
            // A segment whose span is known (a missing one, from the ledger) counts only
            // when the window reaches it.
            unreadable: unreadable
                .into_iter()
                .filter(|u| {
                    let (from, to) = query.window();
                    u.reaches(from, to)
                })
                .collect(),
            ..Default::default()
        };
        let mut plan: Vec<Planned> = the_plan
            .segments
            .iter()
            .flat_map(|sp| {
                let seg = &segments[sp.segment];
                sp.blocks.iter().map(move |&b| Planned {
                    seg: sp.segment,
                    block: b,
                    first_ns: seg.blocks()[b].first_ns,
                })
            })
            .collect();
        plan.sort_by_key(|p| (p.first_ns, segments[p.seg].seq(), p.block));

        // The ledger read right after the listing (retention records a deletion before it
        // unlinks): one parse of it per question.
        report.lost = lost_in_window(&segments, query, ledger.as_ref());
        // Segments a repair left short of what they were sealed with, where the window
        // reaches them.
        let (from, to) = query.window();
        if let Some(l) = &ledger {
            report.lost.extend(
                capsule_store::Unreadable::short_of(l, &segments)
                    .into_iter()
                    .filter(|u| u.reaches(from, to)),
            );
            // What [tier] max_age removed, when the window gives its start before it.
            report
                .unreadable
                .extend(capsule_store::Unreadable::expired_of(
                    l,
                    &store.segments_dir(),
                    query.from_ns,
                    to,
                ));
        }
        let (window_stats, baselines) = interface_stats(&segments, query, &mut report.skipped)?;
        report.drops_in_window = drops_in_window(&window_stats, &baselines);

        let mut out_ifaces: Vec<Interface> = Vec::new();
        let mut iface_map: HashMap<(usize, u32), u32> = HashMap::new();
        let mut touched = vec![false; segments.len()];
        plan.iter().for_each(|p| touched[p.seg] = true);
        if stats_ifaces {
            window_stats
                .iter()
                .for_each(|(si, _, _)| touched[*si] = true);
        }
        for (si, seg) in segments.iter().enumerate().filter(|(i, _)| touched[*i]) {
            for (li, iface) in seg.interfaces().iter().enumerate() {
                let id = match out_ifaces.iter().position(|x| x == iface) {
                    Some(i) => i,
                    None => {
                        out_ifaces.push(iface.clone());
                        out_ifaces.len() - 1
                    }
                };
                iface_map.insert((si, li as u32), id as u32);
            }
        }
        let bpf = match bpf {
            Some(expr) => {
                // Fail before any output if the expression does not compile for a link
                // type of the store, whether or not the plan reads a packet.
                check_bpf_len(expr)?;
                let mut b = Bpf::new(expr.to_string());
                for t in bpf_linktypes(&segments) {
                    b.program(t)?;
                }
                Some(b)
            }
            None => None,
        };
        Ok(Window {
            segments,
            plan,
            filter: PacketFilter {
                query: query.clone(),
            },
            report,
            out_ifaces,
            iface_map,
            window_stats,
            bpf,
        })
    }

    /// Counts the selected packets of every planned block into the report, skipping and
    /// naming damaged blocks as [`Window::merge`] does.
    /// Counts the selected packets into the report in one pass over the planned blocks in
    /// any order, calling `record(captured bytes, options bytes)` for each.
    fn tally(
        &mut self,
        threads: usize,
        mut record: impl FnMut(usize, usize),
    ) -> Result<(), ExportError> {
        let (recycle, reuse) = bounded::<Vec<u8>>(threads.clamp(1, 16) * 4 + 4);
        let loaded = prefetch(
            self.segments.clone(),
            self.plan.clone(),
            threads,
            self.filter.clone(),
            reuse,
        );
        for p in self.plan.iter() {
            match loaded.recv().map_err(|_| ExportError::ReaderStopped)? {
                Ok(block) => {
                    let seg = &self.segments[block.seg];
                    for p in &block.packets {
                        let data = &block.data[p.start as usize..p.end as usize];
                        if let Some(bpf) = self.bpf.as_mut() {
                            if !bpf.matches(linktype_of(seg, p.iface), data)? {
                                continue;
                            }
                        }
                        self.report.packets += 1;
                        self.report.captured_bytes += data.len() as u64;
                        record(data.len(), (p.opts_end - p.opts_start) as usize);
                    }
                    let _ = recycle.try_send(block.data);
                }
                Err(e) if e.is_skippable() => {
                    let seg = &self.segments[p.seg];
                    self.report
                        .skipped
                        .push(SkippedBlock::of(seg, &seg.blocks()[p.block], &e));
                }
                Err(e) => return Err(e),
            }
        }
        self.report.most_blocks_open = usize::from(!self.plan.is_empty());
        Ok(())
    }

    /// Reads the planned blocks ahead on `threads` threads and calls `visit(output
    /// interface, timestamp, original length, captured bytes, pcapng options)` for every
    /// selected packet in
    /// timestamp order (ties in write order). A damaged block is skipped and listed in the
    /// report; an error of `visit` stops the walk and is returned.
    pub(crate) fn merge<E: From<ExportError>>(
        &mut self,
        threads: usize,
        mut visit: impl FnMut(u32, u64, u32, &[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let segments = &self.segments;
        let plan = &self.plan;
        let report = &mut self.report;
        let mut bpf = self.bpf.as_mut();
        // Decompressed blocks go back to the readers once merged: reusing them saves the
        // page faults of a fresh megabyte per block (a fifth of a DSCP query's time,
        // measured).
        let (recycle, reuse) = bounded::<Vec<u8>>(threads.clamp(1, 16) * 4 + 4);
        let loaded = prefetch(
            segments.clone(),
            plan.clone(),
            threads,
            self.filter.clone(),
            reuse,
        );

        // k-way merge on (timestamp, segment, block, packet). Invariant: every packet of a
        // block not yet opened comes after the heap's top in that order: the plan is sorted
        // by (first timestamp, segment, block), so the next block is opened only when its
        // first key would come before the top. Blocks whose packets share one timestamp are
        // thus drained one after another, not all held at once (134 M packets of one
        // timestamp held every block: 11.5 GB). Blocks arrive with only their selected
        // packets (window, filter and --bpf applied).
        let mut heap: BinaryHeap<Reverse<Cursor>> = BinaryHeap::new();
        let mut open: HashMap<usize, Loaded> = HashMap::new();
        let mut next_plan = 0usize;
        let key = |p: &Planned| (p.first_ns, segments[p.seg].seq(), p.block);
        loop {
            while next_plan < plan.len()
                && heap.peek().is_none_or(|Reverse(top)| {
                    key(&plan[next_plan]) < (top.ts_ns, top.seq, top.block)
                })
            {
                let got = loaded.recv().map_err(|_| ExportError::ReaderStopped)?;
                let slot = next_plan;
                next_plan += 1;
                let block = match got {
                    Ok(b) => b,
                    // Damage stays local: skip the block, say what was lost, go on.
                    Err(e) if e.is_skippable() => {
                        let p = plan[slot];
                        let seg = &segments[p.seg];
                        report
                            .skipped
                            .push(SkippedBlock::of(seg, &seg.blocks()[p.block], &e));
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                if let Some(first) = block.packets.first() {
                    heap.push(Reverse(Cursor {
                        ts_ns: first.ts_ns,
                        seq: segments[block.seg].seq(),
                        block: block.block,
                        packet: 0,
                        slot,
                    }));
                    open.insert(slot, block);
                    report.most_blocks_open = report.most_blocks_open.max(open.len());
                } else {
                    let _ = recycle.try_send(block.data);
                }
            }
            let Some(Reverse(cur)) = heap.pop() else {
                break;
            };
            let block = &open[&cur.slot];
            let p = block.packets[cur.packet];
            let out_iface = self
                .iface_map
                .get(&(block.seg, p.iface))
                .copied()
                .unwrap_or(0);
            let data = &block.data[p.start as usize..p.end as usize];
            let pass = match bpf.as_deref_mut() {
                Some(b) => b.matches(linktype_of(&segments[block.seg], p.iface), data)?,
                None => true,
            };
            if pass {
                let options = &block.data[p.opts_start as usize..p.opts_end as usize];
                visit(out_iface, p.ts_ns, p.orig_len, data, options)?;
                report.packets += 1;
                report.captured_bytes += data.len() as u64;
            }
            if let Some(next) = block.packets.get(cur.packet + 1) {
                heap.push(Reverse(Cursor {
                    ts_ns: next.ts_ns,
                    packet: cur.packet + 1,
                    ..cur
                }));
            } else if let Some(done) = open.remove(&cur.slot) {
                let _ = recycle.try_send(done.data);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_pcap::{CaptureReader, Record};
    use capsule_store::WriterConfig;
    use proptest::prelude::*;

    type Pkt = (u64, u32, Vec<u8>);

    fn cfg() -> WriterConfig {
        WriterConfig {
            block_bytes: 4096,
            segment_bytes: 16 * 1024,
            threads: 2,
            ..WriterConfig::default()
        }
    }

    /// Writes each batch with its own writer (so batches land in different segments and may
    /// overlap in time).
    fn store_with(batches: &[Vec<Pkt>], ifaces: &[Interface]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for batch in batches {
            let (mut w, _) = capsule_index::open_writer(dir.path(), cfg()).unwrap();
            let ids: Vec<u32> = ifaces.iter().map(|i| w.add_interface(i.clone())).collect();
            for (ts, iface, data) in batch {
                w.append(ids[*iface as usize], *ts, data.len() as u32 + 4, data)
                    .unwrap();
            }
            w.finish().unwrap();
        }
        dir
    }

    /// Decodes an export: (ts, interface, orig_len, data).
    /// An exported packet: (ts, interface, orig_len, data).
    type Exported = (u64, Interface, u32, Vec<u8>);

    fn decode(bytes: &[u8]) -> (Vec<Interface>, Vec<Exported>) {
        let mut r = CaptureReader::new("export", bytes).unwrap();
        let mut out = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            if let Record::Packet(p) = rec {
                out.push((p.ts_ns, p.iface, p.orig_len, p.data.to_vec()));
            }
        }
        let ifaces = r.interfaces().to_vec();
        let out = out
            .into_iter()
            .map(|(t, i, o, d)| (t, ifaces[i as usize].clone(), o, d))
            .collect();
        (ifaces, out)
    }

    fn run(dir: &std::path::Path, opts: &ExportOptions) -> Vec<u8> {
        let store = Store::open(dir).unwrap();
        let mut out = Vec::new();
        export(&store, opts, &mut out).unwrap();
        out
    }

    fn eth() -> Interface {
        Interface {
            linktype: 1,
            snaplen: 65535,
            name: Some("eth0".into()),
            options: Default::default(),
        }
    }

    /// The oracle: every packet of every batch, stable-sorted by time (batch order breaks
    /// ties, as segments are numbered in write order), cut to [from, to).
    fn oracle(batches: &[Vec<Pkt>], from: u64, to: u64) -> Vec<Pkt> {
        let mut all: Vec<Pkt> = batches.iter().flatten().cloned().collect();
        all.sort_by_key(|p| p.0);
        all.retain(|p| p.0 >= from && p.0 < to);
        all
    }

    fn packet(ts: u64, n: usize) -> Pkt {
        (ts, 0, (0..n).map(|i| (ts as usize + i) as u8).collect())
    }

    #[test]
    fn overlapping_imports_merge_in_time_order_and_windows_cut_exactly() {
        let a: Vec<Pkt> = (0..400).map(|i| packet(1000 + i * 10, 300)).collect();
        let b: Vec<Pkt> = (0..400).map(|i| packet(1005 + i * 10, 200)).collect();
        let c: Vec<Pkt> = (0..50).map(|i| packet(2000 + i, 100)).collect(); // ties with a
        let batches = vec![a, b, c];
        let dir = store_with(&batches, &[eth()]);
        for (from, to) in [
            (0, u64::MAX),
            (1000, 1001),
            (1005, 1006),
            (2000, 2010),
            (2500, 2500),
            (9000, 9999),
        ] {
            let opts = ExportOptions::window(Some(from), Some(to));
            let (_, got) = decode(&run(dir.path(), &opts));
            let want = oracle(&batches, from, to);
            assert_eq!(got.len(), want.len(), "window [{from}, {to})");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!((g.0, &g.3), (w.0, &w.2));
                assert_eq!(g.2, w.2.len() as u32 + 4);
            }
        }
    }

    /// Past the descriptor budget a reader reopens its segment by path: a segment removed
    /// (retention) or replaced (compaction) after the question opened it is skipped and
    /// named, the answer partial (exit 3), and the other segments' packets still counted.
    /// Before, the question failed (exit 1) with the first such read.
    #[test]
    fn a_segment_removed_or_replaced_during_a_question_makes_it_partial() {
        let batches: Vec<Vec<Pkt>> = (0..3u64)
            .map(|b| {
                (0..100)
                    .map(|i| packet(1000 + b * 10_000 + i * 10, 300))
                    .collect()
            })
            .collect();
        for replace in [false, true] {
            let dir = store_with(&batches, &[eth()]);
            let store = Store::open(dir.path()).unwrap();
            let query = Query::all();
            let mut window = Window::open(&store, &query, None, false, None).unwrap();
            let victim = window.segments[0].path().to_path_buf();
            let victim_packets: u64 = window.segments[0]
                .blocks()
                .iter()
                .map(|b| u64::from(b.packets))
                .sum();
            assert!(victim_packets > 0);
            // the budget closed every descriptor; then retention or compaction came
            capsule_store::segment::handles::close_all();
            if replace {
                let other = window.segments[1].path().to_path_buf();
                std::fs::copy(&other, victim.with_extension("new")).unwrap();
                std::fs::rename(victim.with_extension("new"), &victim).unwrap();
            } else {
                std::fs::remove_file(&victim).unwrap();
            }
            window.tally(2, |_, _| {}).unwrap();
            let r = &window.report;
            assert!(r.is_partial());
            let what = if replace { "replaced" } else { "removed" };
            assert!(
                !r.skipped.is_empty() && r.skipped.iter().all(|s| s.problem.contains(what)),
                "{:?}",
                r.skipped
            );
            let skipped: u64 = r.skipped.iter().map(|s| u64::from(s.packets)).sum();
            assert_eq!(skipped, victim_packets);
            assert_eq!(r.packets, 300 - victim_packets);
        }
    }

    #[test]
    fn size_is_the_length_of_the_export_whole_or_partial() {
        use capsule_pcap::options;
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut w, _) = capsule_index::open_writer(dir.path(), cfg()).unwrap();
            let id = w.add_interface(eth());
            for i in 0..600u64 {
                let (_, _, data) = packet(1000 + i * 10, 40 + (i as usize % 300));
                // Every 7th packet carries a comment of its own length.
                let mut opts = Vec::new();
                if i % 7 == 0 {
                    options::put(&mut opts, 1, &vec![b'c'; 1 + i as usize % 5]);
                }
                w.append_with(id, 1000 + i * 10, data.len() as u32, &data, &opts)
                    .unwrap();
            }
            w.finish().unwrap();
        }
        let check = |dir: &std::path::Path, partial: bool| {
            let store = Store::open(dir).unwrap();
            for format in [Format::Pcap, Format::PcapNg] {
                for (from, to) in [(0, u64::MAX), (1500, 3000), (9000, 9001)] {
                    let opts = ExportOptions {
                        format,
                        ..ExportOptions::window(Some(from), Some(to))
                    };
                    let mut out = Vec::new();
                    let rep = export(&store, &opts, &mut out).unwrap();
                    let (counted, bytes) = size(&store, &opts).unwrap();
                    assert_eq!(bytes, out.len() as u64, "{format:?} [{from}, {to})");
                    assert_eq!(counted.packets, rep.packets);
                    assert_eq!(counted.captured_bytes, rep.captured_bytes);
                    if (from, to) == (0, u64::MAX) {
                        assert_eq!(counted.partial_note().is_some(), partial);
                    }
                }
            }
        };
        check(dir.path(), false);
        // A damaged block: the pcapng answer ends with its note, counted too.
        let seg = walk(dir.path())
            .into_iter()
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("seg-") && name.ends_with(".pcapng.zst")
            })
            .expect("a segment file");
        let mut bytes = std::fs::read(&seg).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid..mid + 64].fill(0);
        std::fs::write(&seg, bytes).unwrap();
        check(dir.path(), true);
    }

    /// Every file under `dir`.
    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn a_narrow_window_reads_only_the_blocks_it_needs() {
        let a: Vec<Pkt> = (0..2000).map(|i| packet(i * 1000, 500)).collect();
        let dir = store_with(&[a], &[eth()]);
        let store = Store::open(dir.path()).unwrap();
        let opts = ExportOptions::window(Some(1_000_000), Some(1_000_001));
        let rep = export(&store, &opts, std::io::sink()).unwrap();
        assert_eq!(rep.packets, 1);
        assert!(rep.blocks_total > 100);
        assert!(rep.blocks_read <= 2, "read {} blocks", rep.blocks_read);
    }

    #[test]
    fn pcapng_keeps_interfaces_and_pcap_refuses_mixed_link_types() {
        let ifaces = [
            eth(),
            Interface {
                linktype: 101,
                snaplen: 9000,
                name: None,
                options: Default::default(),
            },
        ];
        let batch: Vec<Pkt> = (0..100)
            .map(|i| (i * 7, (i % 2) as u32, vec![i as u8; 60]))
            .collect();
        let dir = store_with(std::slice::from_ref(&batch), &ifaces);
        let out = run(
            dir.path(),
            &ExportOptions {
                format: Format::PcapNg,
                ..Default::default()
            },
        );
        let (mut got_ifaces, mut got) = decode(&out);
        // Read back, each interface carries the export's own section options (capsule's
        // shb_userappl): the stored interfaces had none.
        for i in got_ifaces
            .iter_mut()
            .chain(got.iter_mut().map(|g| &mut g.1))
        {
            assert_eq!(
                capsule_pcap::options::texts(&i.options.section, 4),
                [concat!("capsule ", env!("CARGO_PKG_VERSION"))]
            );
            i.options.section.clear();
        }
        assert_eq!(got_ifaces, ifaces.to_vec());
        for (g, w) in got.iter().zip(&batch) {
            assert_eq!(g.1, ifaces[w.1 as usize]);
        }
        let store = Store::open(dir.path()).unwrap();
        let err = export(&store, &ExportOptions::default(), std::io::sink()).unwrap_err();
        assert!(err.to_string().contains("link types 1, 101"), "{err}");
        assert!(err.to_string().contains("--format pcapng"), "{err}");
    }

    #[test]
    fn an_empty_store_exports_a_valid_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        capsule_store::Store::create_or_open(dir.path()).unwrap();
        for format in [Format::Pcap, Format::PcapNg] {
            let out = run(
                dir.path(),
                &ExportOptions {
                    format,
                    ..Default::default()
                },
            );
            assert!(decode(&out).1.is_empty());
        }
    }

    #[test]
    fn a_closed_output_is_reported_as_a_broken_pipe() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let dir = store_with(&[vec![packet(1, 100)]], &[eth()]);
        let store = Store::open(dir.path()).unwrap();
        let err = export(&store, &ExportOptions::default(), Closed).unwrap_err();
        assert!(err.is_broken_pipe());
    }

    #[test]
    fn interface_statistics_of_the_window_are_exported_and_drops_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = capsule_index::open_writer(dir.path(), cfg()).unwrap();
        let i = w.add_interface(eth());
        w.record_stats(i, 100, Some(0), Some(0)).unwrap();
        for t in 0..50u64 {
            w.append(i, 1000 + t, 64, &[t as u8; 60]).unwrap();
        }
        w.record_stats(i, 2000, Some(900), Some(7)).unwrap(); // before the window
        w.record_stats(i, 3000, Some(950), Some(10)).unwrap(); // in it: 3 more
        w.record_stats(i, 4000, Some(20), Some(2)).unwrap(); // a new capture: 2 more
        w.append(i, 3500, 64, &[9; 60]).unwrap();
        w.finish().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let opts = ExportOptions {
            format: Format::PcapNg,
            ..ExportOptions::window(Some(2500), Some(5000))
        };
        let mut out = Vec::new();
        let rep = export(&store, &opts, &mut out).unwrap();
        assert_eq!(rep.packets, 1);
        assert_eq!(rep.drops_in_window, Some(5));
        let mut r = CaptureReader::new("export", &out[..]).unwrap();
        let mut stats = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            if let Record::Stats { ts_ns, dropped, .. } = rec {
                stats.push((ts_ns, dropped));
            }
        }
        assert_eq!(stats, vec![(3000, Some(10)), (4000, Some(2))]);
        // No statistics in a window without any: nothing is known.
        let rep = export(
            &store,
            &ExportOptions::window(Some(1000), Some(1010)),
            std::io::sink(),
        )
        .unwrap();
        assert_eq!(rep.drops_in_window, None);
    }

    #[test]
    fn a_size_cap_keeps_the_first_packets_that_fit_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = capsule_index::open_writer(dir.path(), cfg()).unwrap();
        let i = w.add_interface(eth());
        w.record_stats(i, 100, Some(0), Some(0)).unwrap();
        let sizes: Vec<usize> = (0..200).map(|k| 40 + (k * 37) % 700).collect();
        for (t, n) in sizes.iter().enumerate() {
            w.append(i, 1000 + t as u64, *n as u32, &vec![t as u8; *n])
                .unwrap();
        }
        w.record_stats(i, 5000, Some(200), Some(3)).unwrap();
        w.finish().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for format in [Format::Pcap, Format::PcapNg] {
            let all = run(
                dir.path(),
                &ExportOptions {
                    format,
                    ..Default::default()
                },
            );
            let (_, every) = decode(&all);
            assert_eq!(every.len(), 200);
            let total: u64 = sizes.iter().map(|&n| n as u64).sum();
            for cap in [
                1u64,
                600,
                5_000,
                33_333,
                all.len() as u64 - 1,
                all.len() as u64,
            ] {
                let opts = ExportOptions {
                    format,
                    max_bytes: Some(cap),
                    ..Default::default()
                };
                let mut out = Vec::new();
                let rep = export(&store, &opts, &mut out).unwrap();
                let (_, got) = decode(&out);
                let n = got.len();
                assert_eq!(rep.packets, n as u64);
                assert_eq!(rep.packets + rep.packets_over_cap, 200, "{format:?} {cap}");
                assert_eq!(rep.captured_bytes + rep.captured_bytes_over_cap, total);
                // The first packets, in order, and not one more than fits.
                assert_eq!(&got[..], &every[..n]);
                // Header and statistics: the file holds them whatever the cap.
                let records: usize = got.iter().map(|g| pw_len(format, g.3.len())).sum();
                if cap as usize >= out.len() - records {
                    assert!(out.len() as u64 <= cap, "{format:?} {cap}: {}", out.len());
                }
                if n < 200 {
                    assert!(
                        out.len() + pw_len(format, every[n].3.len()) > cap as usize,
                        "{format:?} {cap}: packet {n} would have fit"
                    );
                }
                if cap == all.len() as u64 {
                    assert_eq!(out, all);
                }
            }
        }
    }

    fn pw_len(format: Format, caplen: usize) -> usize {
        match format {
            Format::Pcap => 16 + caplen,
            Format::PcapNg => capsule_pcap::write::pcapng_epb_len(caplen),
        }
    }

    /// A `--bpf` expression is compiled once per link type of the store, however many
    /// reader threads there are; before, each reader thread compiled its own copy (with a
    /// check before them, three compiles or more of a slow expression). Export and count
    /// agree with it.
    #[test]
    fn bpf_is_compiled_once_per_link_type_whatever_the_threads() {
        let batches: Vec<Vec<Pkt>> = vec![(0..300)
            .map(|i| packet(i, 60 + (i % 50) as usize))
            .collect()];
        let dir = store_with(&batches, &[eth()]);
        let store = Store::open(dir.path()).unwrap();
        let expr = "greater 80 or less 61";
        let opts = ExportOptions {
            bpf: Some(expr.into()),
            threads: 4,
            ..Default::default()
        };
        let mut out = Vec::new();
        let rep = export(&store, &opts, &mut out).unwrap();
        let c = count(&store, &opts).unwrap();
        let compiled = crate::prefetch::COMPILED
            .lock()
            .unwrap()
            .iter()
            .filter(|e| *e == expr)
            .count();
        assert_eq!(compiled, 2, "one compile per export and per count");
        assert_eq!(c.packets, rep.packets);
        assert!(rep.packets > 0 && rep.packets < 300, "{}", rep.packets);
    }

    /// Blocks whose packets all share one timestamp are merged one after another: the
    /// merge holds at most two at once, not every block (134 M packets of one timestamp
    /// took 11.5 GB). The order of equal timestamps stays the order written, and a count
    /// (no merge) agrees with the export.
    #[test]
    fn equal_timestamps_hold_few_blocks_and_a_count_agrees() {
        let batches: Vec<Vec<Pkt>> = (0..3u64)
            .map(|b| {
                (0..200)
                    .map(|i| packet(7, 100 + (b * 200 + i) as usize))
                    .collect()
            })
            .collect();
        let dir = store_with(&batches, &[eth()]);
        let store = Store::open(dir.path()).unwrap();
        let opts = ExportOptions::default();
        let mut out = Vec::new();
        let rep = export(&store, &opts, &mut out).unwrap();
        assert_eq!(rep.packets, 600);
        assert!(rep.blocks_read > 10, "{} blocks", rep.blocks_read);
        assert!(
            rep.most_blocks_open <= 2,
            "{} blocks held at once",
            rep.most_blocks_open
        );
        let (_, got) = decode(&out);
        let lens: Vec<usize> = got.iter().map(|g| g.3.len()).collect();
        let want: Vec<usize> = batches.iter().flatten().map(|p| p.2.len()).collect();
        assert_eq!(lens, want, "equal timestamps in the order written");
        let c = count(&store, &opts).unwrap();
        assert_eq!(
            (c.packets, c.captured_bytes),
            (rep.packets, rep.captured_bytes)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn export_equals_a_brute_force_sort(
            batches in proptest::collection::vec(
                proptest::collection::vec((0u64..5000, 40usize..900), 1..300), 1..4),
            from in 0u64..5000,
            len in 0u64..3000,
        ) {
            let batches: Vec<Vec<Pkt>> = batches
                .into_iter()
                .map(|b| b.into_iter().map(|(t, n)| packet(t, n)).collect())
                .collect();
            let dir = store_with(&batches, &[eth()]);
            let opts = ExportOptions::window(Some(from), Some(from + len));
            let (_, got) = decode(&run(dir.path(), &opts));
            let want = oracle(&batches, from, from + len);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g.0, w.0);
                prop_assert_eq!(&g.3, &w.2);
            }
        }
    }
}
