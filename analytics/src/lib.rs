//! Answers to an operator's questions, from the side index alone: top talkers (`top`), the
//! DSCP audit (`dscp`), TCP health per interval and host (`tcp`), the group matrix
//! (`matrix`), stragglers in a group (`stragglers`), and the config's alert rules over all of
//! them (`alerts`); bytes and packets over time by DSCP value for the web console
//! (`timeline`).
//!
//! ```text
//! STORE/index/seg-N.idx (sealed) + seg-N.journal (open)   capsule_index::flows::list_index_only
//!   -> each flow merged across segments, cut to [from, to) by its 1-second buckets,
//!      filtered with the query language          -> Input { flows, window, limits }
//!   -> top.rs / dscp.rs / tcp.rs / matrix.rs / stragglers.rs: one answer each, every
//!      finding with the `capsule query` command that exports its packets
//!   -> the binary (src/cmd/) prints a table or one JSON document
//! ```
//!
//! No segment file is opened and no packet is decompressed: the cost of an answer grows with
//! the flows and seconds in the window, not with the bytes captured. Host groups and policy
//! come in through [`Policy`], implemented here for the `--config` file's
//! `capsule_config::Config`.
#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::path::Path;

use capsule_index::flows::FlowSummary;
use capsule_index::sideindex::{DscpCount, FlowCounts};
use capsule_query::{Filter, Query};
use capsule_store::Store;
use capsule_wire::IpProto;
use serde::Serialize;

pub mod alerts;
pub mod bursts;
pub mod dscp;
pub mod matrix;
pub mod names;
pub mod stragglers;
pub mod tcp;
pub mod timeline;
pub mod top;
pub mod tunnel;

/// What went wrong reading the index.
#[derive(Debug, thiserror::Error)]
pub enum AnalyticsError {
    #[error("reading the side index of {store}")]
    Store {
        store: String,
        #[source]
        source: capsule_store::StoreError,
    },
    /// An argument the answer cannot use (an interval that is not whole seconds, ...).
    #[error("{0}")]
    Usage(String),
}

/// Host groups and the policy over them, as the `--config` file states them.
pub trait Policy {
    /// The group of an address (the most specific prefix), if any.
    fn group_of(&self, ip: IpAddr) -> Option<String>;
    /// Every group's name, in the file's order.
    fn groups(&self) -> Vec<String>;
    /// Whether `src` may send packets marked `dscp`.
    fn dscp_allowed(&self, dscp: u8, src: IpAddr) -> bool;
    /// Whether `src` may send to `dst`, which the traffic names `dst_names` (its TLS server
    /// name or HTTP host, names DNS answers gave its address: [`names::EndName::names`]).
    fn egress_allowed(&self, src: IpAddr, dst: IpAddr, dst_names: &[&str]) -> bool;
}

impl Policy for capsule_config::Config {
    fn group_of(&self, ip: IpAddr) -> Option<String> {
        let g = self.groups();
        g.group_of(ip).map(|id| g.name(id).to_string())
    }

    fn groups(&self) -> Vec<String> {
        capsule_config::Config::groups(self)
            .iter()
            .map(|g| g.name.clone())
            .collect()
    }

    fn dscp_allowed(&self, dscp: u8, src: IpAddr) -> bool {
        capsule_config::Config::dscp_allowed(self, dscp, self.groups().group_of(src))
    }

    fn egress_allowed(&self, src: IpAddr, dst: IpAddr, dst_names: &[&str]) -> bool {
        capsule_config::Config::egress_allowed(self, self.groups().group_of(src), dst, dst_names)
    }
}

/// What every answer states about what it could not see.
pub const INVISIBLE: &str = "capture sees only what reaches its interface: RDMA over \
InfiniBand never does, RoCEv2 only where a switch mirrors it";

/// An instant as RFC 3339 with nanoseconds: the JSON puts it beside every `*_ns` field.
pub fn rfc(ns: u64) -> String {
    capsule_query::format_instant(ns)
}

/// The limits of an answer: what the window reaches past, and what is missing from it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Limits {
    /// The first and last packet time the index holds.
    pub held_from_ns: Option<u64>,
    pub held_from: Option<String>,
    pub held_to_ns: Option<u64>,
    pub held_to: Option<String>,
    /// Set when the window starts before the oldest packet held (retention deleted it, or
    /// capture had not started): the answer covers only from here.
    pub horizon_ns: Option<u64>,
    pub horizon: Option<String>,
    /// Set when the window misses every packet held (it ends before the oldest or starts
    /// after the newest): an empty answer that says so and gives the store's span, never
    /// an "all clear".
    pub window_misses: Option<String>,
    /// Segments in the store without a current index (their flows are missing).
    pub unindexed_segments: Vec<u64>,
    /// Indexes that do not decode, with what is wrong.
    pub damaged_indexes: Vec<(u64, String)>,
    /// Open segments' blocks their journal has no record of yet: (segment, blocks).
    pub unseen_blocks: Vec<(u64, Vec<usize>)>,
    /// Damaged journal records skipped.
    pub journal_notes: Vec<(u64, String)>,
    /// Segments the store's ledger records whose files are gone, in the window, and what
    /// `[tier] max_age` removed from the object store when the window starts before it:
    /// what they held is missing (segment, what the ledger says).
    pub missing_segments: Vec<(u64, String)>,
    /// Segments in the window that `verify --repair` rebuilt with fewer packets than they
    /// were sealed with (the ledger records both): their lost packets' flows are missing.
    pub repaired_segments: Vec<(u64, String)>,
    /// With name terms in the filter: segments of the window whose index keeps no names
    /// (or that have none), whose flows those terms cannot select.
    pub names_unseen: Vec<u64>,
    /// Packets dropped by capture, as the binary found them (capture status), with when.
    pub drops: Option<String>,
    /// Flows the window cuts, whose per-value DSCP counters are scaled from the whole record.
    pub approximate_flows: usize,
    pub invisible: &'static str,
}

impl Limits {
    /// Why the answer misses flows, if it does: segments whose index is missing, stale or
    /// damaged, and damaged journal records of open segments. Such an answer is partial
    /// (exit status 3, `capsule-partial` over HTTP), never a plain success. (Blocks of an
    /// open segment not yet in its journal are not counted: they are the last few
    /// hundred milliseconds of a live capture, indexed within a second.)
    pub fn missing(&self) -> Vec<String> {
        let mut why = Vec::new();
        if !self.unindexed_segments.is_empty() {
            why.push(format!(
                "segment(s) {:?} have no current side index",
                self.unindexed_segments
            ));
        }
        if !self.damaged_indexes.is_empty() {
            let segs: Vec<u64> = self.damaged_indexes.iter().map(|(s, _)| *s).collect();
            why.push(format!("the index of segment(s) {segs:?} is damaged"));
        }
        if !self.journal_notes.is_empty() {
            let segs: Vec<u64> = self.journal_notes.iter().map(|(s, _)| *s).collect();
            why.push(format!(
                "damaged index journal records of segment(s) {segs:?}"
            ));
        }
        if !self.missing_segments.is_empty() {
            let segs: Vec<u64> = self.missing_segments.iter().map(|(s, _)| *s).collect();
            why.push(format!(
                "segment(s) {segs:?} are missing (a file gone, or segments [tier] max_age \
                 removed from the object store)"
            ));
        }
        if !self.repaired_segments.is_empty() {
            let segs: Vec<u64> = self.repaired_segments.iter().map(|(s, _)| *s).collect();
            why.push(format!(
                "segment(s) {segs:?} lost packets to damage (`verify --repair` rebuilt them)"
            ));
        }
        if !self.names_unseen.is_empty() {
            why.push(format!(
                "segment(s) {:?} have no names in their index: the filter's name terms \
                 cannot select their flows",
                self.names_unseen
            ));
        }
        why
    }

    /// One line per limit that applies, for the human table.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(m) = &self.window_misses {
            out.push(m.clone());
        }
        if let Some(h) = &self.horizon {
            out.push(format!(
                "the window starts before the oldest packet held ({h}): the answer covers \
                 only from there"
            ));
        }
        if self.held_from_ns.is_none() {
            out.push("the index holds no flows".into());
        }
        if !self.unindexed_segments.is_empty() {
            out.push(format!(
                "segment(s) {:?} have no current side index and are missing (`capsule \
                 reindex` builds it)",
                self.unindexed_segments
            ));
        }
        for (seq, why) in &self.damaged_indexes {
            out.push(format!("segment {seq}: damaged index: {why}"));
        }
        for (seq, blocks) in &self.unseen_blocks {
            out.push(format!(
                "open segment {seq}: block(s) {blocks:?} are not in its index journal yet"
            ));
        }
        for (seq, why) in &self.journal_notes {
            out.push(format!("open segment {seq}: index journal: {why}"));
        }
        for (seq, why) in self.missing_segments.iter().chain(&self.repaired_segments) {
            out.push(format!("segment {seq}: {why}"));
        }
        if !self.names_unseen.is_empty() {
            out.push(format!(
                "segment(s) {:?} have no names in their side index (written before index \
                 version 6): the filter's name terms cannot select their flows, which may be \
                 missing (`capsule reindex` adds the names)",
                self.names_unseen
            ));
        }
        if let Some(d) = &self.drops {
            out.push(d.clone());
        }
        if self.approximate_flows > 0 {
            out.push(format!(
                "{} flow(s) cross the window's edges: counted from whole seconds",
                self.approximate_flows
            ));
        }
        out.push(self.invisible.to_string());
        out
    }
}

/// The flows of a window, from the index, and the limits of what they say.
#[derive(Debug, Clone)]
pub struct Input {
    pub flows: Vec<FlowSummary>,
    /// The window answered: the query's, bounded by what the index holds.
    pub from_ns: u64,
    pub to_ns: u64,
    /// The filter, canonical ("" for none).
    pub filter: String,
    /// The filter as a value: what every finding's export is within.
    pub within: Filter,
    /// The store directory as given, for the `query` of findings.
    pub store: String,
    pub limits: Limits,
    /// The window's address -> name map (its DNS answers, whatever the filter): what
    /// names a destination whose own flow names nothing (names.rs).
    pub dns: capsule_index::names::DnsNames,
}

/// The packets behind a finding: a window and a filter of the store the answer is of,
/// within the answer's own filter. In JSON it is the `capsule query` command line that
/// exports them from that store; a renderer writes it for the store as its reader names it
/// ([`Export::command`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub from_ns: u64,
    pub to_ns: u64,
    /// The answer's filter (the empty filter for none).
    pub within: Filter,
    /// The finding's own filter (the empty filter for the whole window).
    pub filter: Filter,
    /// The store directory as the answer named it.
    pub store: String,
}

impl Export {
    /// The query that exports the packets.
    pub fn query(&self) -> Query {
        Query {
            filter: self.within.clone().and(self.filter.clone()),
            from_ns: Some(self.from_ns),
            to_ns: Some(self.to_ns),
        }
    }

    /// The filter as a command line writes it: the answer's filter in parentheses, then
    /// the finding's.
    pub fn filter_text(&self) -> String {
        let (w, f) = (self.within.to_string(), self.filter.to_string());
        match (w.is_empty(), f.is_empty()) {
            (true, _) => f,
            (false, true) => w,
            (false, false) if f.contains(" or ") => format!("({w}) and ({f})"),
            (false, false) => format!("({w}) and {f}"),
        }
    }

    /// The `capsule query` command line exporting the packets, with `place` naming the
    /// store (`--store DIR`, or `--server URL --token-file FILE`) after any `before`
    /// options (`-w FILE`).
    pub fn command(&self, before: &str, place: &str) -> String {
        let mut cmd = String::from("capsule query ");
        if !before.is_empty() {
            cmd.push_str(before);
            cmd.push(' ');
        }
        cmd.push_str(&format!(
            "{place} --from {} --to {}",
            capsule_query::format_instant(self.from_ns),
            capsule_query::format_instant(self.to_ns),
        ));
        let f = self.filter_text();
        if !f.is_empty() {
            cmd.push(' ');
            cmd.push_str(&shell_quote(&f));
        }
        cmd
    }

    /// The command exporting the packets from the answer's own store (what JSON carries).
    pub fn store_command(&self) -> String {
        self.command("", &self.store_place())
    }

    /// `--store DIR` for the answer's own store.
    pub fn store_place(&self) -> String {
        format!("--store {}", shell_quote(&self.store))
    }
}

impl Serialize for Export {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.store_command())
    }
}

/// Reads the flows of `q` from `store`'s side index (no segment file is opened; with a
/// `tier`, the index of a segment trimmed after upload that is missing locally is fetched
/// from the object store). `filter` is `q`'s filter as the user wrote it. With `buckets`, each flow keeps its
/// 1-second buckets in the window (what `top`, `tcp`, `stragglers` and `alerts` read); an
/// answer that only reads flow totals (`dscp`, `matrix`) passes false and the listing
/// holds none.
pub fn load(
    store_dir: &Path,
    tier: Option<capsule_store::remote::Tier>,
    q: &Query,
    filter: &str,
    buckets: bool,
) -> Result<Input, AnalyticsError> {
    let err = |source| AnalyticsError::Store {
        store: store_dir.display().to_string(),
        source,
    };
    let store = Store::open(store_dir).map_err(err)?.with_tier(tier);
    let mut listing = capsule_index::flows::list_index_only(&store, q, buckets).map_err(err)?;
    let (qf, qt) = q.window();
    // The listing and the ledger the flows were read with, for the notes below (issue 34:
    // at 100,000 segments another listing and parse of the ledger cost tens of ms). The
    // listing holds the segments [tier] trimmed too: `missing` leaves those out itself.
    let listed = std::mem::take(&mut listing.listed);
    let dir = store.segments_dir();
    let ledger = listing.ledger.take();
    let mut missing_segments: Vec<(u64, String)> = Vec::new();
    let mut repaired_segments = Vec::new();
    if let Some(l) = &ledger {
        missing_segments.extend(
            capsule_store::ledger::missing(&dir, l, listed.iter().copied())
                .into_iter()
                .filter(|m| m.overlaps(qf, qt))
                .map(|m| (m.sealed.seq, m.problem())),
        );
        // What [tier] max_age removed, when the window gives its start before it.
        if let Some(u) = capsule_store::Unreadable::expired_of(l, &dir, q.from_ns, qt) {
            missing_segments.push((u.seq, u.problem));
        }
        repaired_segments.extend(
            l.short()
                .filter(|(s, _)| s.first_ns < qt && s.last_ns >= qf)
                .map(|(s, held)| {
                    (
                        s.seq,
                        format!(
                            "holds {held} of the {} packets it was sealed with: {} were lost \
                             to damage and moved aside by `verify --repair` (the store's \
                             ledger records both)",
                            s.packets,
                            s.packets - held
                        ),
                    )
                }),
        );
    }
    let mut input = assemble(
        listing.flows,
        listing.held,
        q,
        filter,
        store_dir.display().to_string(),
    );
    input.dns = listing.dns;
    let l = &mut input.limits;
    l.unindexed_segments = listing.unindexed;
    l.damaged_indexes = listing.damaged_index;
    l.unseen_blocks = listing.unseen;
    l.journal_notes = listing.journal_notes;
    l.missing_segments = missing_segments;
    l.repaired_segments = repaired_segments;
    l.names_unseen = listing.names_unseen;
    Ok(input)
}

/// The input of flows listed already (by [`load`] from a store's index, or from a fleet
/// catalog's copy of several nodes' indexes): the window bounded by `held` (the first and
/// last packet time of everything the source holds) as [`load`] bounds a store's, and the
/// limits that follow from it; `store` names the source in findings.
pub fn assemble(
    flows: Vec<FlowSummary>,
    held: Option<(u64, u64)>,
    q: &Query,
    filter: &str,
    store: String,
) -> Input {
    let (qf, qt) = q.window();
    let (held_from, held_to) = match held {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    let window_misses = match (held_from, held_to) {
        (Some(f), Some(t)) if qt <= f => Some((
            qt,
            format!(
                "the window ends before the oldest packet held ({}): the store spans {} to {}",
                rfc(f),
                rfc(f),
                rfc(t)
            ),
        )),
        (Some(f), Some(t)) if qf > t => Some((
            qf,
            format!(
                "the window starts after the newest packet held ({}): the store spans {} to {}",
                rfc(t),
                rfc(f),
                rfc(t)
            ),
        )),
        _ => None,
    };
    let (from_ns, to_ns) = match (held_from, held_to) {
        // A window that misses the data: empty, at its own edge nearest the data.
        _ if window_misses.is_some() => {
            let at = window_misses.as_ref().map_or(qf, |(at, _)| *at);
            (at, at)
        }
        (Some(f), Some(t)) => (
            qf.max(f / 1_000_000_000 * 1_000_000_000),
            qt.min(t.saturating_add(1)),
        ),
        // Nothing held (a store that has no packets yet: a capture just started on a
        // quiet port): an empty window at the query's edge, or now, never the whole of
        // time (1970 to 2554), which per-second answers would allocate buckets for.
        _ => {
            let at = q.from_ns.or(q.to_ns).unwrap_or_else(capsule_store::now_ns);
            (at, at)
        }
    };
    let horizon = held_from.filter(|&h| q.from_ns.is_some_and(|f| f < h));
    let limits = Limits {
        held_from_ns: held_from,
        held_from: held_from.map(rfc),
        held_to_ns: held_to,
        held_to: held_to.map(rfc),
        horizon_ns: horizon,
        horizon: horizon.map(rfc),
        window_misses: window_misses.map(|(_, m)| m),
        approximate_flows: flows.iter().filter(|f| f.approximate).count(),
        invisible: INVISIBLE,
        ..Limits::default()
    };
    Input {
        flows,
        from_ns,
        to_ns: to_ns.max(from_ns),
        filter: filter.trim().to_string(),
        within: q.filter.clone(),
        store,
        limits,
        dns: Default::default(),
    }
}

impl Input {
    /// The packets of `filter` (a finding's own filter, within the answer's filter) in
    /// [from, to).
    pub fn export(&self, from_ns: u64, to_ns: u64, filter: Filter) -> Export {
        Export {
            from_ns,
            to_ns: to_ns.max(from_ns + 1),
            within: self.within.clone(),
            filter,
            store: self.store.clone(),
        }
    }

    /// Length of the answered window, in seconds (at least 1).
    pub fn seconds(&self) -> f64 {
        ((self.to_ns - self.from_ns) as f64 / 1e9).max(1.0)
    }
}

/// `s` quoted for a POSIX shell when it needs it.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:@%+=,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A filter value capsule makes from what the index holds (a VLAN id of 12 bits, a DSCP
/// of 6); one out of range would be a bug here, and matches nothing rather than everything.
fn checked(f: Result<Filter, capsule_query::FilterValueError>) -> Filter {
    f.unwrap_or_else(|_| Filter::all().not())
}

/// The packets of VLAN `v`.
pub fn vlan_filter(v: u16) -> Filter {
    checked(Filter::vlan(Some(v)))
}

/// The packets marked with DSCP `v`.
pub fn dscp_filter(v: u8) -> Filter {
    checked(Filter::dscp(v))
}

/// The packets of flow key `k`'s VLAN tags and protocol.
fn tags_and_proto(k: &capsule_index::sideindex::FlowKey) -> Filter {
    k.vlans
        .iter()
        .flatten()
        .fold(Filter::all(), |f, &v| f.and(vlan_filter(v)))
        .and(Filter::proto(IpProto::from(k.proto)))
}

/// The filter selecting a flow's packets (both directions).
pub fn flow_filter(f: &FlowCounts) -> Filter {
    flow_filter_of(&f.key)
}

/// The filter selecting the packets of the flow with key `k` (both directions).
pub fn flow_filter_of(k: &capsule_index::sideindex::FlowKey) -> Filter {
    use capsule_query::Direction::SrcOrDst;
    let end = |addr, port: Option<u16>| {
        let host = Filter::host(SrcOrDst, addr);
        match port {
            Some(p) => host.and(Filter::port(SrcOrDst, p)),
            None => host,
        }
    };
    tags_and_proto(k)
        .and(end(k.a, k.ports.map(|p| p.0)))
        .and(end(k.b, k.ports.map(|p| p.1)))
}

/// The filter selecting direction `d` of a flow.
pub fn side_filter(f: &FlowCounts, d: usize) -> Filter {
    use capsule_query::Direction::{Dst, Src};
    let (src, dst, ports) = f.key.side(d);
    let mut out = tags_and_proto(&f.key).and(Filter::host(Src, src));
    if let Some((sp, _)) = ports {
        out = out.and(Filter::port(Src, sp));
    }
    out = out.and(Filter::host(Dst, dst));
    if let Some((_, dp)) = ports {
        out = out.and(Filter::port(Dst, dp));
    }
    out
}

/// A DSCP value's name (EF is 46, CS5 40: never merged), or its number.
pub fn dscp_name(v: u8) -> String {
    capsule_query::filter::dscp_name(v).map_or_else(|| v.to_string(), str::to_string)
}

/// The per-value DSCP counters of direction `d` in the window: the record's own when the
/// flow lies wholly inside it, else scaled to the direction's bytes and packets in the
/// window (largest remainder, so they sum exactly).
pub fn dscp_in_window(s: &FlowSummary, d: usize) -> std::borrow::Cow<'_, [DscpCount]> {
    let f = &s.flow;
    let counts = &f.totals.dscp_counts[d];
    if !s.approximate || counts.is_empty() {
        return std::borrow::Cow::Borrowed(counts);
    }
    let (tp, tb): (u64, u64) = counts
        .iter()
        .fold((0, 0), |(p, b), c| (p + c.packets, b + c.bytes));
    let scale = |x: u64, part: u64, whole: u64| -> u64 {
        if whole == 0 {
            0
        } else {
            (u128::from(x) * u128::from(part) / u128::from(whole)) as u64
        }
    };
    let mut out: Vec<DscpCount> = counts
        .iter()
        .map(|c| DscpCount {
            dscp: c.dscp,
            packets: scale(f.totals.packets[d], c.packets, tp),
            bytes: scale(f.totals.bytes[d], c.bytes, tb),
        })
        .collect();
    // The rounding remainder to the largest value, so the parts sum to the whole.
    let (sp, sb): (u64, u64) = out
        .iter()
        .fold((0, 0), |(p, b), c| (p + c.packets, b + c.bytes));
    if let Some(big) = out.iter_mut().max_by_key(|c| c.bytes) {
        big.packets += f.totals.packets[d] - sp;
        big.bytes += f.totals.bytes[d] - sb;
    }
    std::borrow::Cow::Owned(out)
}

/// The median of `v` (sorted in place); 0 for none. An even count takes the mean of the two
/// middle values.
pub fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// Checks an interval (ns) is whole seconds and not zero.
pub fn check_interval(ns: u64, what: &str) -> Result<u64, AnalyticsError> {
    if ns == 0 || !ns.is_multiple_of(1_000_000_000) {
        return Err(AnalyticsError::Usage(format!(
            "{what} must be a whole number of seconds (the index counts 1-second buckets), \
             got {ns} ns"
        )));
    }
    Ok(ns)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use capsule_index::sideindex::{Bucket, FlowKey};

    /// Every 10.0.0.0/24 address is in group "g"; "g" may send only to 10.0.0.0/24 and EF is
    /// for 10.0.0.1 alone.
    pub(crate) struct Groups;

    impl Policy for Groups {
        fn group_of(&self, ip: IpAddr) -> Option<String> {
            match ip {
                IpAddr::V4(v4) if v4.octets()[..3] == [10, 0, 0] => Some("g".into()),
                _ => None,
            }
        }
        fn groups(&self) -> Vec<String> {
            vec!["g".into()]
        }
        fn dscp_allowed(&self, dscp: u8, src: IpAddr) -> bool {
            dscp != 46 || src == IpAddr::from([10, 0, 0, 1])
        }
        fn egress_allowed(&self, src: IpAddr, dst: IpAddr, dst_names: &[&str]) -> bool {
            self.group_of(src).is_none()
                || self.group_of(dst).is_some()
                || dst_names.iter().any(|n| n.ends_with(".allowed.example"))
        }
    }

    /// A UDP flow from `src` to `dst` sending `bytes` in each (second, bytes) of `per`, one
    /// 100-byte packet per 100 bytes, DSCP 0.
    pub(crate) fn flow(src: [u8; 4], dst: [u8; 4], per: &[(u64, u64)]) -> FlowSummary {
        let (key, d) = FlowKey::of(
            [None, None],
            4,
            17,
            IpAddr::from(src),
            IpAddr::from(dst),
            Some((5000, 6000)),
        );
        let first = per.first().map_or(0, |p| p.0) * 1_000_000_000;
        let last = per.last().map_or(0, |p| p.0) * 1_000_000_000 + 1;
        let mut f = capsule_index::sideindex::FlowRecord::new(key, first, last);
        for &(second, bytes) in per {
            let mut b = Bucket {
                second,
                ..Bucket::default()
            };
            b.bytes[d] = bytes;
            b.packets[d] = bytes.div_ceil(100);
            f.totals.packets[d] += b.packets[d];
            f.totals.bytes[d] += bytes;
            f.buckets.push(b);
        }
        f.totals.dscp[d] = 1;
        let (p, b) = (f.totals.packets[d], f.totals.bytes[d]);
        f.totals.count_dscp(d, 0, p, b);
        FlowSummary {
            flow: FlowCounts::from(f),
            approximate: false,
        }
    }

    pub(crate) fn input(flows: Vec<FlowSummary>, from_ns: u64, to_ns: u64) -> Input {
        Input {
            flows,
            from_ns,
            to_ns,
            filter: String::new(),
            within: Filter::all(),
            store: "/s".into(),
            limits: Limits::default(),
            dns: Default::default(),
        }
    }

    /// `i` with its address -> name map made from its flows' DNS answers (as a listing
    /// makes it).
    pub(crate) fn with_dns(mut i: Input) -> Input {
        for s in &i.flows {
            if let Some(n) = s.flow.totals.names.as_deref() {
                i.dns.add_flow(n);
            }
        }
        i
    }

    /// `f` named as a TLS flow to `sni`, its client `client`.
    pub(crate) fn tls(mut f: FlowSummary, client: [u8; 4], sni: &str) -> FlowSummary {
        let c = u8::from(f.flow.key.a != IpAddr::from(client));
        f.flow.totals.names = Some(Box::new(capsule_names::FlowNames {
            app: capsule_names::App::Tls,
            sni: Some(sni.into()),
            client: Some(c),
            ..Default::default()
        }));
        f
    }

    /// `f` named as a DNS flow whose answer gave `addr` for `name` (its client is the key's
    /// a).
    pub(crate) fn dns(mut f: FlowSummary, name: &str, addr: [u8; 4]) -> FlowSummary {
        f.flow.totals.names = Some(Box::new(capsule_names::FlowNames {
            app: capsule_names::App::Dns,
            dns_queries: vec![name.into()],
            dns_answers: vec![(name.into(), IpAddr::from(addr))],
            client: Some(0),
            ..Default::default()
        }));
        f
    }

    #[test]
    fn quoting_and_median() {
        assert_eq!(shell_quote("/tmp/s"), "/tmp/s");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(median(&mut [5, 1, 3]), 3);
        assert_eq!(median(&mut [4, 1, 3, 2]), 2);
        assert_eq!(median(&mut []), 0);
        assert!(check_interval(1_500_000_000, "--interval").is_err());
        assert_eq!(dscp_name(46), "ef");
        assert_eq!(dscp_name(40), "cs5");
    }
}
