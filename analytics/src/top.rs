//! `capsule top`: the largest talkers of a window by flow, source, destination, pair, group
//! or DSCP value, with their share, mean and peak rate (1-second buckets), mean packet
//! size, first and last packet and DSCP mix; the rest in an "other" row, and a total row.

use std::collections::{BTreeMap, HashMap};

use capsule_index::flows::FlowSummary;
use serde::Serialize;

use std::net::IpAddr;

use crate::{dscp_in_window, dscp_name, flow_filter_of, rfc, Input, Policy};

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
    pub query: Option<String>,
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

#[derive(Default)]
struct Acc {
    bytes: u64,
    packets: u64,
    flows: u64,
    first: u64,
    last: u64,
    /// (second, bytes), unsorted, a second possibly repeated: summed when a row is made.
    per_second: Vec<(u64, u64)>,
    dscp: BTreeMap<u8, u64>,
    filter: Option<String>,
    hosts: Vec<IpAddr>,
}

impl Acc {
    fn add(&mut self, s: &FlowSummary, dirs: [bool; 2], only_dscp: Option<u8>) {
        let f = &s.flow;
        let mut any = false;
        for d in (0..2).filter(|&d| dirs[d] && f.packets[d] > 0) {
            let counts = dscp_in_window(s, d);
            let (bytes, packets) = match only_dscp {
                Some(v) => counts
                    .iter()
                    .find(|c| c.dscp == v)
                    .map_or((0, 0), |c| (c.bytes, c.packets)),
                None => (f.bytes[d], f.packets[d]),
            };
            if packets == 0 {
                continue;
            }
            any = true;
            self.bytes += bytes;
            self.packets += packets;
            for c in &counts {
                if only_dscp.is_none_or(|v| v == c.dscp) {
                    *self.dscp.entry(c.dscp).or_default() += c.bytes;
                }
            }
            for b in &f.buckets {
                let part = if bytes == f.bytes[d] {
                    b.bytes[d]
                } else {
                    (u128::from(b.bytes[d]) * u128::from(bytes) / u128::from(f.bytes[d].max(1)))
                        as u64
                };
                if part > 0 {
                    self.per_second.push((b.second, part));
                }
            }
        }
        if any {
            if self.flows == 0 {
                self.first = f.first_ns;
                self.last = f.last_ns;
            }
            self.flows += 1;
            self.first = self.first.min(f.first_ns);
            self.last = self.last.max(f.last_ns);
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
        self.per_second.extend_from_slice(&o.per_second);
        for (v, b) in &o.dscp {
            *self.dscp.entry(*v).or_default() += b;
        }
    }

    /// Bytes in the busiest second.
    fn peak(&self) -> u64 {
        let mut v = self.per_second.clone();
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
                .map(|f| input.query(self.first, self.last + 1, f)),
        }
    }
}

/// A flow's text: protocol, VLANs and endpoints, `a <-> b` in canonical order.
pub fn flow_label(f: &capsule_index::sideindex::FlowRecord) -> String {
    let k = &f.key;
    let ep = |addr: std::net::IpAddr, port: Option<u16>| match (addr, port) {
        (std::net::IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    };
    let proto = capsule_query::filter::proto_name(k.proto)
        .map_or_else(|| k.proto.to_string(), str::to_string);
    let vlans: Vec<String> = k.vlans.iter().flatten().map(|v| v.to_string()).collect();
    let vlan = if vlans.is_empty() {
        String::new()
    } else {
        format!(" vlan {}", vlans.join("."))
    };
    format!(
        "{proto}{vlan} {} <-> {}",
        ep(k.a, k.ports.map(|p| p.0)),
        ep(k.b, k.ports.map(|p| p.1))
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
}

impl Id {
    fn label(&self, f: Option<&capsule_index::sideindex::FlowRecord>) -> String {
        match self {
            Id::Flow(_) => f.map(flow_label).unwrap_or_default(),
            Id::Pair(a, b) => format!("{a} <-> {b}"),
            Id::Src(h) | Id::Dst(h) => h.to_string(),
            Id::Group(g) => g.clone(),
            Id::Dscp(v) => dscp_name(*v),
        }
    }

    fn filter(&self, hosts: &[IpAddr]) -> Option<String> {
        Some(match self {
            Id::Flow(k) => flow_filter_of(k),
            Id::Pair(a, b) => format!("host {a} and host {b}"),
            Id::Src(h) => format!("src host {h}"),
            Id::Dst(h) => format!("dst host {h}"),
            Id::Dscp(v) => format!("dscp {v}"),
            // A group's query names its hosts while they are few.
            Id::Group(_) if hosts.len() == 1 => format!("src host {}", hosts[0]),
            Id::Group(_) if !hosts.is_empty() && hosts.len() <= 16 => {
                let h: Vec<String> = hosts.iter().map(|h| format!("src host {h}")).collect();
                format!("({})", h.join(" or "))
            }
            Id::Group(_) => return None,
        })
    }
}

/// Ranks the window's traffic by `key`, `limit` rows, the rest as "other".
pub fn top(input: &Input, key: Key, by: By, limit: usize, policy: Option<&dyn Policy>) -> Top {
    let mut accs: HashMap<Id, (Acc, usize)> = HashMap::new();
    let mut total = Acc::default();
    for (n, s) in input.flows.iter().enumerate() {
        let f = &s.flow;
        total.add(s, [true, true], None);
        let mut add = |id: Id, dirs: [bool; 2], only: Option<u8>, host: Option<IpAddr>| {
            let (a, _) = accs.entry(id).or_insert_with(|| (Acc::default(), n));
            if let Some(h) = host {
                if !a.hosts.contains(&h) {
                    a.hosts.push(h);
                }
            }
            a.add(s, dirs, only);
        };
        match key {
            Key::Flow => add(Id::Flow(f.key), [true, true], None, None),
            Key::Pair => add(Id::Pair(f.key.a, f.key.b), [true, true], None, None),
            Key::Src | Key::Dst => {
                for d in 0..2 {
                    let (src, dst, _) = f.key.side(d);
                    let id = if key == Key::Src {
                        Id::Src(src)
                    } else {
                        Id::Dst(dst)
                    };
                    add(id, [d == 0, d == 1], None, None);
                }
            }
            Key::Group => {
                for d in 0..2 {
                    if f.packets[d] == 0 {
                        continue;
                    }
                    let (src, _, _) = f.key.side(d);
                    let g = policy
                        .and_then(|p| p.group_of(src))
                        .unwrap_or_else(|| "unassigned".into());
                    add(Id::Group(g), [d == 0, d == 1], None, Some(src));
                }
            }
            Key::Dscp => {
                for d in 0..2 {
                    for c in dscp_in_window(s, d) {
                        add(Id::Dscp(c.dscp), [d == 0, d == 1], Some(c.dscp), None);
                    }
                }
            }
        }
    }
    let measure = |a: &Acc| match by {
        By::Bytes => a.bytes,
        By::Packets => a.packets,
    };
    let total_measure = measure(&total);
    let mut ranked: Vec<(Id, (Acc, usize))> =
        accs.into_iter().filter(|(_, (a, _))| a.flows > 0).collect();
    ranked.sort_by(|(ka, (a, _)), (kb, (b, _))| measure(b).cmp(&measure(a)).then(ka.cmp(kb)));
    let mut rows = Vec::new();
    let mut other = Acc::default();
    for (i, (id, (a, first))) in ranked.iter_mut().enumerate() {
        if i < limit {
            a.filter = id.filter(&a.hosts);
            let label = id.label(input.flows.get(*first).map(|s| &s.flow));
            rows.push(a.row(Some(i + 1), label, total_measure, by, input));
        } else {
            other.merge(a);
        }
    }
    let other =
        (other.flows > 0).then(|| other.row(None, "other".into(), total_measure, by, input));
    let mut total_row = total.row(None, "total".into(), total_measure, by, input);
    total_row.query = Some(input.query(input.from_ns, input.to_ns, ""));
    Top {
        by,
        key,
        rows,
        other,
        total: total_row,
    }
}
