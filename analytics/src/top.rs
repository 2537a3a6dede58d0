//! `capsule top`: the largest talkers of a window by flow, source, destination, pair, group
//! or DSCP value, with their share, mean and peak rate (1-second buckets), mean packet
//! size, first and last packet and DSCP mix; the rest in an "other" row, and a total row.

use std::collections::{BTreeMap, HashMap};

use capsule_index::flows::FlowSummary;
use capsule_query::Filter;
use serde::Serialize;

use std::net::IpAddr;

use crate::{dscp_filter, dscp_in_window, dscp_name, flow_filter_of, rfc, Export, Input, Policy};

/// What rows rank by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    Bytes,
    Packets,
}

/// What a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Key {
    /// One flow (both directions).
    Flow,
    /// A sending host.
    Src,
    /// A receiving host.
    Dst,
    /// Two hosts, both ways.
    Pair,
    /// The sender's group (`unassigned` for none).
    Group,
    /// A DSCP value.
    Dscp,
    /// The TLS server name of the flow (`(none)` for flows without one).
    Sni,
    /// The application recognised from the flow's payload (`unknown` for none).
    App,
    /// The encapsulation a flow direction arrived in: kind, identifier (VNI, GRE key, ...),
    /// top MPLS label and outer endpoints, both ways of one tunnel in one row (`(none)` for
    /// traffic that arrived bare).
    Tunnel,
}

/// One value's part of a row's bytes.
#[derive(Debug, Clone, Serialize)]
pub struct DscpShare {
    pub dscp: u8,
    pub name: String,
    pub bytes: u64,
    pub share: f64,
}

/// One row of the ranking.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// 1-based; absent on the "other" and "total" rows.
    pub rank: Option<usize>,
    pub key: String,
    /// What names the row (names.rs): a flow's `tls: models.example-hub.io`, a host's
    /// `dns answer: NAME`; absent when nothing does (and for other keys).
    pub name: Option<String>,
    /// The flow's encapsulation (flow rows; absent when it arrived bare, and for other
    /// keys).
    pub tunnel: Option<crate::tunnel::FlowTunnel>,
    pub bytes: u64,
    pub packets: u64,
    pub flows: u64,
    /// Of the total, by the ranking's measure (0..=1).
    pub share: f64,
    /// Bits per second over the window.
    pub mean_bps: f64,
    /// Bits per second in the row's busiest second.
    pub peak_bps: u64,
    pub mean_packet_size: f64,
    pub first_ns: u64,
    pub first: String,
    pub last_ns: u64,
    pub last: String,
    pub dscp_mix: Vec<DscpShare>,
    /// The `capsule query` command exporting the row's packets (absent where no filter
    /// names them briefly: "other", a group of many hosts).
    pub query: Option<Export>,
}

/// The answer of `capsule top`.
#[derive(Debug, Clone, Serialize)]
pub struct Top {
    pub by: By,
    pub key: Key,
    pub rows: Vec<Row>,
    pub other: Option<Row>,
    pub total: Row,
}

/// A row's bytes per second, for its peak rate.
enum PerSecond {
    /// (second, bytes), unsorted, a second possibly repeated: summed when a row is made.
    /// For one key's flows: few seconds each.
    Sparse(Vec<(u64, u64)>),
    /// One counter per second from `base`: the total and "other" rows, where every flow's
    /// seconds land (a sorted copy of millions of pairs would cost more than the answer).
    /// Seconds outside the counters (none, for flows cut to the window) go to `extra`.
    Dense {
        base: u64,
        bytes: Vec<u64>,
        extra: Vec<(u64, u64)>,
    },
}

impl Default for PerSecond {
    fn default() -> Self {
        PerSecond::Sparse(Vec::new())
    }
}

/// The longest window (in seconds) whose total row counts each second densely: 8 bytes a
/// second, 32 MiB at most; a longer window uses the sparse list.
const DENSE_SECONDS: u64 = 4 << 20;

impl PerSecond {
    /// Counters for every second of [from_ns, to_ns).
    fn dense(from_ns: u64, to_ns: u64) -> PerSecond {
        let base = from_ns / 1_000_000_000;
        let end = to_ns.saturating_sub(1) / 1_000_000_000;
        let n = end.saturating_sub(base).saturating_add(1);
        if to_ns <= from_ns || n > DENSE_SECONDS {
            return PerSecond::default();
        }
        PerSecond::Dense {
            base,
            bytes: vec![0; n as usize],
            extra: Vec::new(),
        }
    }

    fn push(&mut self, second: u64, bytes: u64) {
        match self {
            PerSecond::Sparse(v) => v.push((second, bytes)),
            PerSecond::Dense {
                base,
                bytes: b,
                extra,
            } => {
                match second
                    .checked_sub(*base)
                    .and_then(|i| b.get_mut(i as usize))
                {
                    Some(slot) => *slot += bytes,
                    None => extra.push((second, bytes)),
                }
            }
        }
    }

    fn for_each(&self, mut f: impl FnMut(u64, u64)) {
        match self {
            PerSecond::Sparse(v) => v.iter().for_each(|&(s, b)| f(s, b)),
            PerSecond::Dense { base, bytes, extra } => {
                for (i, &b) in bytes.iter().enumerate() {
                    if b > 0 {
                        f(base + i as u64, b);
                    }
                }
                extra.iter().for_each(|&(s, b)| f(s, b));
            }
        }
    }

    /// Bytes in the busiest second.
    fn peak(&self) -> u64 {
        let sparse_peak = |list: &[(u64, u64)]| {
            let mut v = list.to_vec();
            v.sort_unstable_by_key(|x| x.0);
            let mut peak = 0;
            let mut i = 0;
            while i < v.len() {
                let mut sum = 0;
                let s = v[i].0;
                while i < v.len() && v[i].0 == s {
                    sum += v[i].1;
                    i += 1;
                }
                peak = peak.max(sum);
            }
            peak
        };
        match self {
            PerSecond::Sparse(v) => sparse_peak(v),
            // `extra` never shares a second with the counters.
            PerSecond::Dense { bytes, extra, .. } => bytes
                .iter()
                .copied()
                .max()
                .unwrap_or(0)
                .max(sparse_peak(extra)),
        }
    }
}

#[derive(Default)]
struct Acc {
    bytes: u64,
    packets: u64,
    flows: u64,
    first: u64,
    last: u64,
    per_second: PerSecond,
    dscp: BTreeMap<u8, u64>,
    filter: Option<Filter>,
    hosts: Vec<IpAddr>,
    /// [`Acc::span`] has set `first` and `last`.
    spanned: bool,
}

/// Whether [`Acc::add_parts`] counts `s` among its flows for `dirs` and `only_dscp`: it has
/// packets there.
fn counted(s: &FlowSummary, dirs: [bool; 2], only_dscp: Option<u8>) -> bool {
    let f = &s.flow;
    (0..2)
        .filter(|&d| dirs[d] && f.totals.packets[d] > 0)
        .any(|d| match only_dscp {
            Some(v) => dscp_in_window(s, d)
                .iter()
                .find(|c| c.dscp == v)
                .is_some_and(|c| c.packets > 0),
            None => true,
        })
}

impl Acc {
    fn add(&mut self, s: &FlowSummary, dirs: [bool; 2], only_dscp: Option<u8>) {
        self.add_parts(s, dirs, only_dscp, true, true);
    }

    /// [`Acc::add`] in parts: with `counts`, the bytes, packets, flows, span and DSCP mix;
    /// with `seconds`, the bytes per second.
    fn add_parts(
        &mut self,
        s: &FlowSummary,
        dirs: [bool; 2],
        only_dscp: Option<u8>,
        counts_too: bool,
        seconds: bool,
    ) {
        let f = &s.flow;
        let mut any = false;
        for d in (0..2).filter(|&d| dirs[d] && f.totals.packets[d] > 0) {
            let counts = dscp_in_window(s, d);
            let (bytes, packets) = match only_dscp {
                Some(v) => counts
                    .iter()
                    .find(|c| c.dscp == v)
                    .map_or((0, 0), |c| (c.bytes, c.packets)),
                None => (f.totals.bytes[d], f.totals.packets[d]),
            };
            if packets == 0 {
                continue;
            }
            any = true;
            if counts_too {
                self.bytes += bytes;
                self.packets += packets;
                for c in counts.iter() {
                    if only_dscp.is_none_or(|v| v == c.dscp) {
                        *self.dscp.entry(c.dscp).or_default() += c.bytes;
                    }
                }
            }
            if !seconds {
                continue;
            }
            for b in &f.buckets {
                let part = if bytes == f.totals.bytes[d] {
                    b.bytes[d]
                } else {
                    (u128::from(b.bytes[d]) * u128::from(bytes)
                        / u128::from(f.totals.bytes[d].max(1))) as u64
                };
                if part > 0 {
                    self.per_second.push(b.second, part);
                }
            }
        }
        if any && counts_too {
            if self.flows == 0 {
                self.first = f.totals.first_ns;
                self.last = f.totals.last_ns;
            }
            self.flows += 1;
            self.first = self.first.min(f.totals.first_ns);
            self.last = self.last.max(f.totals.last_ns);
        }
    }

    fn merge(&mut self, o: &Acc) {
        if o.flows == 0 {
            return;
        }
        if self.flows == 0 {
            self.first = o.first;
            self.last = o.last;
        }
        self.bytes += o.bytes;
        self.packets += o.packets;
        self.flows += o.flows;
        self.first = self.first.min(o.first);
        self.last = self.last.max(o.last);
        o.per_second.for_each(|s, b| self.per_second.push(s, b));
        for (v, b) in &o.dscp {
            *self.dscp.entry(*v).or_default() += b;
        }
    }

    /// Bytes in the busiest second.
    fn peak(&self) -> u64 {
        self.per_second.peak()
    }

    /// A copy of this (dense) accumulator's counts to subtract rows from, without its first
    /// and last packet ([`Acc::span`] sets them) or its filter and hosts.
    fn minus_start(&self) -> Acc {
        Acc {
            bytes: self.bytes,
            packets: self.packets,
            flows: self.flows,
            first: 0,
            last: 0,
            per_second: match &self.per_second {
                PerSecond::Dense { base, bytes, extra } => PerSecond::Dense {
                    base: *base,
                    bytes: bytes.clone(),
                    extra: extra.clone(),
                },
                PerSecond::Sparse(v) => PerSecond::Sparse(v.clone()),
            },
            dscp: self.dscp.clone(),
            filter: None,
            hosts: Vec::new(),
            spanned: false,
        }
    }

    /// Takes away what `o` (one flow's row, added to this one before) counted; the first and
    /// last packet are left to [`Acc::span`]. Only for a dense accumulator without extras.
    fn subtract(&mut self, o: &Acc) {
        self.bytes -= o.bytes;
        self.packets -= o.packets;
        self.flows -= o.flows;
        for (v, b) in &o.dscp {
            if let Some(x) = self.dscp.get_mut(v) {
                *x -= b;
            }
        }
        self.subtract_seconds(o);
    }

    /// Takes away `o`'s per-second bytes (added to this dense accumulator before).
    fn subtract_seconds(&mut self, o: &Acc) {
        if let PerSecond::Dense { base, bytes, .. } = &mut self.per_second {
            o.per_second.for_each(|s, b| {
                if let Some(slot) = s.checked_sub(*base).and_then(|i| bytes.get_mut(i as usize)) {
                    *slot -= b;
                }
            });
        }
    }

    /// Widens the first and last packet to a flow's (as [`Acc::add`] does for a flow with
    /// packets; the first such flow sets them).
    fn span(&mut self, f: &capsule_index::sideindex::FlowCounts) {
        if !self.spanned {
            self.first = f.totals.first_ns;
            self.last = f.totals.last_ns;
            self.spanned = true;
        }
        self.first = self.first.min(f.totals.first_ns);
        self.last = self.last.max(f.totals.last_ns);
    }

    /// An empty accumulator counting every second of the window densely (total, "other").
    fn window(input: &Input) -> Acc {
        Acc {
            per_second: PerSecond::dense(input.from_ns, input.to_ns),
            ..Acc::default()
        }
    }

    fn row(&self, rank: Option<usize>, key: String, total: u64, by: By, input: &Input) -> Row {
        let measure = match by {
            By::Bytes => self.bytes,
            By::Packets => self.packets,
        };
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        Row {
            rank,
            key,
            name: None,
            tunnel: None,
            bytes: self.bytes,
            packets: self.packets,
            flows: self.flows,
            share: ratio(measure, total),
            mean_bps: self.bytes as f64 * 8.0 / input.seconds(),
            peak_bps: self.peak() * 8,
            mean_packet_size: ratio(self.bytes, self.packets),
            first_ns: self.first,
            first: rfc(self.first),
            last_ns: self.last,
            last: rfc(self.last),
            dscp_mix: self
                .dscp
                .iter()
                .filter(|(_, &b)| b > 0)
                .map(|(&v, &b)| DscpShare {
                    dscp: v,
                    name: dscp_name(v),
                    bytes: b,
                    share: ratio(b, self.bytes),
                })
                .collect(),
            query: self
                .filter
                .as_ref()
                .map(|f| input.export(self.first, self.last + 1, f.clone())),
        }
    }
}

/// A flow's text: protocol, VLANs and endpoints, `a <-> b` in canonical order.
pub fn flow_label(f: &capsule_index::sideindex::FlowCounts) -> String {
    use crate::names::endpoint;
    let k = &f.key;
    let proto = capsule_query::IpProto::from(k.proto);
    let vlans: Vec<String> = k.vlans.iter().flatten().map(|v| v.to_string()).collect();
    let vlan = if vlans.is_empty() {
        String::new()
    } else {
        format!(" vlan {}", vlans.join("."))
    };
    format!(
        "{proto}{vlan} {} <-> {}",
        endpoint(k.a, k.ports.map(|p| p.0)),
        endpoint(k.b, k.ports.map(|p| p.1))
    )
}

/// What a row is, before it is text (labels and filters are made for the rows shown only).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Id {
    Flow(capsule_index::sideindex::FlowKey),
    Pair(IpAddr, IpAddr),
    Src(IpAddr),
    Dst(IpAddr),
    Group(String),
    Dscp(u8),
    Sni(Option<String>),
    App(capsule_names::App),
    Tunnel(Option<crate::tunnel::TunnelKey>),
}

impl Id {
    fn label(&self, f: Option<&capsule_index::sideindex::FlowCounts>) -> String {
        match self {
            Id::Flow(_) => f.map(flow_label).unwrap_or_default(),
            Id::Pair(a, b) => format!("{a} <-> {b}"),
            Id::Src(h) | Id::Dst(h) => h.to_string(),
            Id::Group(g) => g.clone(),
            Id::Dscp(v) => dscp_name(*v),
            Id::Sni(n) => n.clone().unwrap_or_else(|| "(none)".into()),
            Id::App(a) => a.as_str().to_string(),
            Id::Tunnel(t) => t.map_or_else(|| "(none)".into(), |t| t.label()),
        }
    }

    /// What names the row, for flows and hosts (names.rs).
    fn name(
        &self,
        f: Option<&capsule_index::sideindex::FlowCounts>,
        input: &Input,
    ) -> Option<String> {
        match self {
            Id::Flow(_) => input.flow_name(f?),
            Id::Src(h) | Id::Dst(h) => input.host_name(*h),
            _ => None,
        }
    }

    fn filter(&self, hosts: &[IpAddr]) -> Option<Filter> {
        use capsule_query::Direction::{Dst, Src, SrcOrDst};
        Some(match self {
            Id::Flow(k) => flow_filter_of(k),
            Id::Pair(a, b) => Filter::host(SrcOrDst, *a).and(Filter::host(SrcOrDst, *b)),
            Id::Src(h) => Filter::host(Src, *h),
            Id::Dst(h) => Filter::host(Dst, *h),
            Id::Dscp(v) => dscp_filter(*v),
            // A group's query names its hosts while they are few.
            Id::Group(_) if !hosts.is_empty() && hosts.len() <= 16 => hosts
                .iter()
                .map(|h| Filter::host(Src, *h))
                .reduce(Filter::or)?,
            Id::Group(_) => return None,
            Id::Sni(Some(n)) => Filter::parse(&format!("sni {n}")).ok()?,
            Id::App(a) if *a != capsule_names::App::Unknown => {
                Filter::parse(&format!("app {}", a.as_str())).ok()?
            }
            Id::Tunnel(Some(t)) => t.filter()?,
            Id::Tunnel(None) => Filter::parse("not tunnel").ok()?,
            Id::Sni(None) | Id::App(_) => return None,
        })
    }
}

/// Ranks the window's traffic by `key`, `limit` rows, the rest as "other".
pub fn top(input: &Input, key: Key, by: By, limit: usize, policy: Option<&dyn Policy>) -> Top {
    if key == Key::Flow {
        return top_flows(input, by, limit);
    }
    top_by_key(input, key, by, limit, policy)
}

/// `top --key flow`: the listing already holds one summary per flow, so the flows are
/// ranked as they are and only the rows shown get an accumulator of their own; the rest go
/// straight into "other" (a million flows would otherwise be a million accumulators).
/// The same answer as [`top_by_key`] gives for [`Key::Flow`].
fn top_flows(input: &Input, by: By, limit: usize) -> Top {
    let measure = |f: &capsule_index::sideindex::FlowCounts| -> u64 {
        (0..2)
            .filter(|&d| f.totals.packets[d] > 0)
            .map(|d| match by {
                By::Bytes => f.totals.bytes[d],
                By::Packets => f.totals.packets[d],
            })
            .sum()
    };
    let mut total = Acc::window(input);
    let mut order: Vec<(u64, usize)> = Vec::with_capacity(input.flows.len());
    for (n, s) in input.flows.iter().enumerate() {
        total.add(s, [true, true], None);
        if s.flow.totals.packets.iter().any(|&p| p > 0) {
            order.push((measure(&s.flow), n));
        }
    }
    let total_measure = match by {
        By::Bytes => total.bytes,
        By::Packets => total.packets,
    };
    let flows = &input.flows;
    let rank = |a: &(u64, usize), b: &(u64, usize)| {
        b.0.cmp(&a.0)
            .then_with(|| flows[a.1].flow.key.cmp(&flows[b.1].flow.key))
    };
    order_head(&mut order, limit, rank);
    let mut rows = Vec::new();
    // "Other" is the total less the rows shown (every count adds up, so the difference is
    // exact), unless the total's seconds are not all in its dense counters: then summed.
    let subtract = matches!(&total.per_second, PerSecond::Dense { extra, .. } if extra.is_empty());
    let mut other = if subtract {
        total.minus_start()
    } else {
        Acc::window(input)
    };
    for (i, &(_, n)) in order.iter().enumerate() {
        let s = &flows[n];
        if i < limit {
            let mut a = Acc::default();
            a.add(s, [true, true], None);
            if subtract {
                other.subtract(&a);
            }
            let id = Id::Flow(s.flow.key);
            a.filter = id.filter(&a.hosts);
            let mut row = a.row(
                Some(i + 1),
                id.label(Some(&s.flow)),
                total_measure,
                by,
                input,
            );
            row.name = id.name(Some(&s.flow), input);
            row.tunnel = crate::tunnel::flow_tunnel(&s.flow);
            rows.push(row);
        } else if subtract {
            other.span(&s.flow);
        } else {
            other.add(s, [true, true], None);
        }
    }
    let other =
        (other.flows > 0).then(|| other.row(None, "other".into(), total_measure, by, input));
    let mut total_row = total.row(None, "total".into(), total_measure, by, input);
    total_row.query = Some(input.export(input.from_ns, input.to_ns, Filter::all()));
    Top {
        by,
        key: Key::Flow,
        rows,
        other,
        total: total_row,
    }
}

/// Puts the first `limit` items of `v` in `cmp` order, the smallest first; the rest follow
/// in no order (they are summed into "other", where order does not matter).
fn order_head<T>(v: &mut [T], limit: usize, cmp: impl Fn(&T, &T) -> std::cmp::Ordering) {
    if limit < v.len() {
        v.select_nth_unstable_by(limit, &cmp);
        v[..limit].sort_unstable_by(&cmp);
    } else {
        v.sort_unstable_by(&cmp);
    }
}

/// Calls `visit` with each row a flow counts in under `key`: the row, the directions it
/// takes, the DSCP value it is limited to, and the sender it names (groups).
fn rows_of(
    s: &FlowSummary,
    key: Key,
    policy: Option<&dyn Policy>,
    mut visit: impl FnMut(Id, [bool; 2], Option<u8>, Option<IpAddr>),
) {
    let f = &s.flow;
    match key {
        Key::Flow => visit(Id::Flow(f.key), [true, true], None, None),
        Key::Pair => visit(Id::Pair(f.key.a, f.key.b), [true, true], None, None),
        Key::Src | Key::Dst => {
            for d in 0..2 {
                let (src, dst, _) = f.key.side(d);
                let id = if key == Key::Src {
                    Id::Src(src)
                } else {
                    Id::Dst(dst)
                };
                visit(id, [d == 0, d == 1], None, None);
            }
        }
        Key::Group => {
            for d in 0..2 {
                if f.totals.packets[d] == 0 {
                    continue;
                }
                let (src, _, _) = f.key.side(d);
                let g = policy
                    .and_then(|p| p.group_of(src))
                    .unwrap_or_else(|| "unassigned".into());
                visit(Id::Group(g), [d == 0, d == 1], None, Some(src));
            }
        }
        Key::Sni => visit(
            Id::Sni(f.totals.names.as_ref().and_then(|n| n.sni.clone())),
            [true, true],
            None,
            None,
        ),
        Key::App => visit(
            Id::App(
                f.totals
                    .names
                    .as_ref()
                    .map_or(capsule_names::App::Unknown, |n| n.app),
            ),
            [true, true],
            None,
            None,
        ),
        Key::Tunnel => {
            let of = |d: usize| {
                f.totals
                    .encap
                    .as_deref()
                    .and_then(|e| e.dirs[d].as_ref())
                    .map(crate::tunnel::TunnelKey::of)
            };
            let (k0, k1) = (of(0), of(1));
            if k0 == k1 {
                visit(Id::Tunnel(k0), [true, true], None, None);
            } else {
                visit(Id::Tunnel(k0), [true, false], None, None);
                visit(Id::Tunnel(k1), [false, true], None, None);
            }
        }
        Key::Dscp => {
            for d in 0..2 {
                for c in dscp_in_window(s, d).iter() {
                    visit(Id::Dscp(c.dscp), [d == 0, d == 1], Some(c.dscp), None);
                }
            }
        }
    }
}

/// Ranks by any key, an accumulator per key. The per-second bytes (for the peak rate) are
/// what costs: a first pass counts every row without them, a second adds them to the rows
/// shown only, and "other" has the total's less the rows' when they add up to it (every key
/// but DSCP, whose per-second parts are scaled and rounded), else its own.
fn top_by_key(input: &Input, key: Key, by: By, limit: usize, policy: Option<&dyn Policy>) -> Top {
    let mut accs: HashMap<Id, (Acc, usize), foldhash::fast::RandomState> = HashMap::default();
    let mut total = Acc::window(input);
    for (n, s) in input.flows.iter().enumerate() {
        total.add(s, [true, true], None);
        rows_of(s, key, policy, |id, dirs, only, host| {
            let (a, _) = accs.entry(id).or_insert_with(|| (Acc::default(), n));
            if let Some(h) = host {
                if !a.hosts.contains(&h) {
                    a.hosts.push(h);
                }
            }
            a.add_parts(s, dirs, only, true, false);
        });
    }
    let measure = |a: &Acc| match by {
        By::Bytes => a.bytes,
        By::Packets => a.packets,
    };
    let total_measure = measure(&total);
    let mut ranked: Vec<(Id, (Acc, usize))> =
        accs.into_iter().filter(|(_, (a, _))| a.flows > 0).collect();
    let rank = |(ka, (a, _)): &(Id, (Acc, usize)), (kb, (b, _)): &(Id, (Acc, usize))| {
        measure(b).cmp(&measure(a)).then(ka.cmp(kb))
    };
    order_head(&mut ranked, limit, rank);
    let shown = limit.min(ranked.len());
    let subtract = key != Key::Dscp
        && matches!(&total.per_second, PerSecond::Dense { extra, .. } if extra.is_empty());
    let mut other = if subtract {
        total.minus_start()
    } else {
        Acc::window(input)
    };
    // The second pass: per-second bytes of the rows shown (and of the rest, for "other",
    // unless it is the total less the rows).
    let at: HashMap<&Id, usize, foldhash::fast::RandomState> = ranked[..shown]
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id, i))
        .collect();
    let mut seconds: Vec<Acc> = (0..shown).map(|_| Acc::default()).collect();
    // "Other"'s flows, each once however many of its keys are not shown.
    let mut other_flows = 0;
    for s in &input.flows {
        let mut in_other = false;
        rows_of(s, key, policy, |id, dirs, only, _| match at.get(&id) {
            Some(&i) => seconds[i].add_parts(s, dirs, only, false, true),
            None => {
                in_other = in_other || counted(s, dirs, only);
                if !subtract {
                    other.add_parts(s, dirs, only, false, true);
                }
            }
        });
        other_flows += u64::from(in_other);
    }
    drop(at);
    let mut rows = Vec::new();
    let mut rest = Acc::default();
    for (i, (id, (a, first))) in ranked.iter_mut().enumerate() {
        if i < limit {
            a.per_second = std::mem::take(&mut seconds[i].per_second);
            if subtract {
                other.subtract_seconds(a);
            }
            a.filter = id.filter(&a.hosts);
            let f = input.flows.get(*first).map(|s| &s.flow);
            let mut row = a.row(Some(i + 1), id.label(f), total_measure, by, input);
            row.name = id.name(f, input);
            if let (Id::Flow(_), Some(f)) = (&id, f) {
                row.tunnel = crate::tunnel::flow_tunnel(f);
            }
            rows.push(row);
        } else {
            rest.merge(a);
        }
    }
    // "Other"'s counts are the rest's (rows share flows, so they are not the total's less
    // the rows'), but its flows counted once each (the rest's sum counts a flow under each
    // of its keys); its seconds were made above.
    other.bytes = rest.bytes;
    other.packets = rest.packets;
    other.flows = other_flows;
    other.first = rest.first;
    other.last = rest.last;
    other.dscp = rest.dscp;
    let other =
        (other.flows > 0).then(|| other.row(None, "other".into(), total_measure, by, input));
    let mut total_row = total.row(None, "total".into(), total_measure, by, input);
    total_row.query = Some(input.export(input.from_ns, input.to_ns, Filter::all()));
    Top {
        by,
        key,
        rows,
        other,
        total: total_row,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{flow, input};

    /// The ranking of flows without an accumulator per flow gives what the general one gives,
    /// ties and "other" included, by bytes and by packets.
    #[test]
    fn top_flows_is_top_by_key_for_flows() {
        let s = 1_796_004_000u64;
        let mut flows = Vec::new();
        for i in 0..40u8 {
            let per: Vec<(u64, u64)> = (0..(u64::from(i) % 7 + 1))
                .map(|k| (s + k * 3 + u64::from(i % 5), 100 * (u64::from(i % 9) + 1)))
                .collect();
            flows.push(flow([10, 0, 0, i % 6], [10, 0, 1, i], &per));
        }
        let inp = input(flows, s * 1_000_000_000, (s + 60) * 1_000_000_000);
        for by in [By::Bytes, By::Packets] {
            for limit in [0, 3, 10, 100] {
                let a = serde_json::to_value(top_flows(&inp, by, limit)).unwrap();
                let b = serde_json::to_value(top_by_key(&inp, Key::Flow, by, limit, None)).unwrap();
                assert_eq!(a, b, "by {by:?} limit {limit}");
            }
        }
    }

    /// A flow counts once in "other" however many of its keys are there (by source, a flow
    /// with traffic both ways has two): "other" never has more flows than the total.
    #[test]
    fn other_counts_each_flow_once() {
        let s = 1_796_004_000u64;
        let mut flows = Vec::new();
        for i in 0..12u8 {
            let per = [(s + u64::from(i % 4), 100 * (u64::from(i) + 1))];
            let mut f = flow([10, 0, 0, i], [10, 0, 1, i % 3], &per);
            // The same traffic back.
            let t = &mut f.flow.totals;
            let d = usize::from(t.packets[0] == 0);
            (t.packets[1 - d], t.bytes[1 - d]) = (t.packets[d], t.bytes[d]);
            flows.push(f);
        }
        let inp = input(flows, s * 1_000_000_000, (s + 60) * 1_000_000_000);
        for limit in [0, 1, 3, 5] {
            let t = top(&inp, Key::Src, By::Bytes, limit, None);
            let other = t.other.expect("15 senders");
            assert_eq!(t.total.flows, 12);
            let shown: Vec<&str> = t.rows.iter().map(|r| r.key.as_str()).collect();
            // The flows with a sender not shown.
            let want = inp
                .flows
                .iter()
                .filter(|f| {
                    let (a, b) = (f.flow.key.a.to_string(), f.flow.key.b.to_string());
                    !shown.contains(&a.as_str()) || !shown.contains(&b.as_str())
                })
                .count() as u64;
            assert_eq!(other.flows, want, "limit {limit}");
            assert!(other.flows <= t.total.flows, "limit {limit}");
        }
    }

    /// Every row's and "other"'s peak (from the two passes, and "other" as the total less
    /// the rows) is the busiest second of the flows they count, summed directly; by
    /// source (each direction its own row) and by DSCP (no subtraction).
    #[test]
    fn two_pass_peaks_are_direct_sums() {
        let s = 1_796_004_000u64;
        let mut flows = Vec::new();
        for i in 0..30u8 {
            let per: Vec<(u64, u64)> = (0..(u64::from(i) % 5 + 1))
                .map(|k| (s + k * 2 + u64::from(i % 4), 100 * (u64::from(i % 7) + 1)))
                .collect();
            flows.push(flow([10, 0, 0, i % 5], [10, 0, 1, i % 3], &per));
        }
        let inp = input(flows, s * 1_000_000_000, (s + 60) * 1_000_000_000);
        let peak_of = |hosts: &dyn Fn(&str) -> bool| -> u64 {
            let mut per: BTreeMap<u64, u64> = BTreeMap::new();
            for f in &inp.flows {
                if hosts(&f.flow.key.a.to_string()) {
                    for b in &f.flow.buckets {
                        *per.entry(b.second).or_default() += b.bytes[0];
                    }
                }
            }
            per.values().copied().max().unwrap_or(0) * 8
        };
        for limit in [1, 2, 3] {
            let t = top(&inp, Key::Src, By::Bytes, limit, None);
            assert_eq!(t.rows.len(), limit);
            let shown: Vec<String> = t.rows.iter().map(|r| r.key.clone()).collect();
            for r in &t.rows {
                assert_eq!(r.peak_bps, peak_of(&|h| h == r.key), "row {}", r.key);
            }
            let other = t.other.expect("five senders, at most three shown");
            assert_eq!(other.peak_bps, peak_of(&|h| !shown.iter().any(|x| x == h)));
            assert_eq!(t.total.peak_bps, peak_of(&|_| true));
            assert_eq!(
                other.bytes + t.rows.iter().map(|r| r.bytes).sum::<u64>(),
                t.total.bytes
            );
        }
        let d = top(&inp, Key::Dscp, By::Bytes, 1, None);
        assert_eq!(d.rows[0].peak_bps, peak_of(&|_| true));
        assert!(d.other.is_none());
    }

    /// The dense per-second counters of a window give the peak the sparse list gives, also
    /// for seconds outside the window's counters.
    #[test]
    fn dense_and_sparse_peaks_agree() {
        let pairs = [(100u64, 5u64), (101, 7), (100, 4), (250, 3), (99, 20)];
        let mut sparse = PerSecond::default();
        let mut dense = PerSecond::dense(100_000_000_000, 200_000_000_000);
        for &(s, b) in &pairs {
            sparse.push(s, b);
            dense.push(s, b);
        }
        assert_eq!(sparse.peak(), 20);
        assert_eq!(dense.peak(), 20);
        let mut seen = Vec::new();
        dense.for_each(|s, b| seen.push((s, b)));
        seen.sort_unstable();
        assert_eq!(seen, vec![(99, 20), (100, 9), (101, 7), (250, 3)]);
        assert!(matches!(PerSecond::dense(5, 5), PerSecond::Sparse(_)));
    }
}
