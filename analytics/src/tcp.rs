//! `capsule tcp`: TCP health per interval and per host, exact to the second from the index's
//! per-second counters: data segments, retransmissions (a data segment whose sequence range
//! that direction already carried, RFC 1982 arithmetic; keepalives and zero-window probes
//! excluded), the retransmission rate, zero-window segments and stall time, RSTs by side and
//! SYNs never answered; then the worst hosts and sessions.
//!
//! Per-second counters are attributed to the second they happened in. What the index keeps
//! per flow only (zero-window stall time, unanswered SYNs) goes to the interval of the
//! direction's first zero-window segment and of the flow's first packet in the window.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use capsule_query::IpProto;
use capsule_query::{Direction, Filter};
use serde::Serialize;

use crate::top::flow_label;
use crate::{check_interval, flow_filter, rfc, AnalyticsError, Export, Input};

/// TCP counters of one host (or of everything).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Health {
    /// Data segments the host sent.
    pub data_segments: u64,
    pub retransmissions: u64,
    /// Retransmissions per data segment (0..=1).
    pub retransmission_rate: f64,
    /// Segments the host sent advertising a zero window (it could not take more).
    pub zero_window_segments: u64,
    /// Time the host's window stayed closed, ns.
    pub zero_window_ns: u64,
    pub rsts_sent: u64,
    pub rsts_received: u64,
    /// Connections the host opened with a SYN that got no SYN-ACK.
    pub syns_unanswered: u64,
}

impl Health {
    fn add(&mut self, o: &Health) {
        self.data_segments += o.data_segments;
        self.retransmissions += o.retransmissions;
        self.zero_window_segments += o.zero_window_segments;
        self.zero_window_ns += o.zero_window_ns;
        self.rsts_sent += o.rsts_sent;
        self.rsts_received += o.rsts_received;
        self.syns_unanswered += o.syns_unanswered;
    }

    fn rate(&mut self) {
        self.retransmission_rate = if self.data_segments == 0 {
            0.0
        } else {
            self.retransmissions as f64 / self.data_segments as f64
        };
    }

    fn is_empty(&self) -> bool {
        self.data_segments == 0
            && self.zero_window_segments == 0
            && self.rsts_sent == 0
            && self.rsts_received == 0
            && self.syns_unanswered == 0
    }
}

/// A host's counters, in an interval or over the window.
#[derive(Debug, Clone, Serialize)]
pub struct HostHealth {
    pub host: String,
    #[serde(flatten)]
    pub health: Health,
    pub query: Export,
}

/// One interval.
#[derive(Debug, Clone, Serialize)]
pub struct Interval {
    pub from_ns: u64,
    pub from: String,
    pub to_ns: u64,
    pub to: String,
    #[serde(flatten)]
    pub total: Health,
    /// Every host with TCP activity in the interval, most retransmissions first.
    pub hosts: Vec<HostHealth>,
}

/// A TCP connection with trouble.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    pub flow: String,
    /// What names the flow (names.rs: `tls: models.example-hub.io`), if anything does.
    pub name: Option<String>,
    /// Per direction (a -> b, b -> a, as in `flow`).
    pub data_segments: [u64; 2],
    pub retransmissions: [u64; 2],
    pub zero_window_segments: [u64; 2],
    pub zero_window_ns: [u64; 2],
    pub rsts: [u64; 2],
    pub syn_unanswered: bool,
    pub query: Export,
}

/// The answer of `capsule tcp`.
#[derive(Debug, Clone, Serialize)]
pub struct Tcp {
    pub interval_ns: u64,
    pub total: Health,
    pub intervals: Vec<Interval>,
    /// At most 10, most retransmissions first.
    pub worst_hosts: Vec<HostHealth>,
    /// At most 10, most retransmissions first (then stall time, RSTs).
    pub worst_sessions: Vec<Session>,
}

/// TCP health of the window, per `interval_ns` (whole seconds).
pub fn tcp(input: &Input, interval_ns: u64) -> Result<Tcp, AnalyticsError> {
    let interval_ns = check_interval(interval_ns, "--interval")?;
    // An empty window with no flow (a store with nothing in it) has no interval at all;
    // any other has at least one, which every flow's seconds fall into.
    let n = if input.flows.is_empty() && input.to_ns == input.from_ns {
        0
    } else {
        (input.to_ns - input.from_ns).div_ceil(interval_ns).max(1) as usize
    };
    let slot = |ns: u64| -> usize {
        ((ns.saturating_sub(input.from_ns) / interval_ns) as usize).min(n.saturating_sub(1))
    };
    let mut per: Vec<HashMap<IpAddr, Health, foldhash::fast::RandomState>> =
        vec![HashMap::default(); n];
    let mut hosts: BTreeMap<IpAddr, Health> = BTreeMap::new();
    let mut troubled = Vec::new();
    for s in input
        .flows
        .iter()
        .filter(|s| IpProto::from(s.flow.key.proto) == IpProto::Tcp)
    {
        let f = &s.flow;
        for b in &f.buckets {
            let i = slot(b.second * 1_000_000_000);
            for d in 0..2 {
                // A second with none of the counters adds nothing (empty hosts are not
                // listed): no entry for it.
                if b.data[d] == 0
                    && b.retransmissions[d] == 0
                    && b.zero_windows[d] == 0
                    && b.resets[d] == 0
                {
                    continue;
                }
                let (src, dst, _) = f.key.side(d);
                let h = per[i].entry(src).or_default();
                h.data_segments += u64::from(b.data[d]);
                h.retransmissions += u64::from(b.retransmissions[d]);
                h.zero_window_segments += u64::from(b.zero_windows[d]);
                h.rsts_sent += u64::from(b.resets[d]);
                if b.resets[d] > 0 {
                    per[i].entry(dst).or_default().rsts_received += u64::from(b.resets[d]);
                }
            }
        }
        for d in 0..2 {
            let (src, _, _) = f.key.side(d);
            if f.totals.zero_window_ns[d] > 0 {
                let at = f
                    .buckets
                    .iter()
                    .find(|b| b.zero_windows[d] > 0)
                    .map_or(f.totals.first_ns, |b| b.second * 1_000_000_000);
                per[slot(at)].entry(src).or_default().zero_window_ns += f.totals.zero_window_ns[d];
            }
            if f.totals.syn_unanswered(d) {
                per[slot(f.totals.first_ns)]
                    .entry(src)
                    .or_default()
                    .syns_unanswered += 1;
            }
        }
        let bad = f.totals.retransmissions.iter().sum::<u64>()
            + f.totals.zero_windows.iter().sum::<u64>()
            + f.totals.resets.iter().sum::<u64>()
            + u64::from(f.totals.syn_unanswered(0) || f.totals.syn_unanswered(1));
        if bad > 0 {
            troubled.push((
                f.totals.retransmissions[0] + f.totals.retransmissions[1],
                f.totals.zero_window_ns[0] + f.totals.zero_window_ns[1],
                f.totals.resets[0] + f.totals.resets[1],
                f,
            ));
        }
    }
    // The worst sessions: ranked by their counts, and only those that can be among the first
    // 10 (ties with the 10th included, which their labels then order) are made sessions.
    troubled.sort_unstable_by_key(|t| std::cmp::Reverse((t.0, t.1, t.2)));
    if let Some(tenth) = troubled.get(9).map(|t| (t.0, t.1, t.2)) {
        let keep = troubled.partition_point(|t| (t.0, t.1, t.2) >= tenth);
        troubled.truncate(keep);
    }
    let mut sessions: Vec<Session> = troubled
        .iter()
        .map(|&(_, _, _, f)| Session {
            flow: flow_label(f),
            name: input.flow_name(f),
            data_segments: f.totals.data,
            retransmissions: f.totals.retransmissions,
            zero_window_segments: f.totals.zero_windows,
            zero_window_ns: f.totals.zero_window_ns,
            rsts: f.totals.resets,
            syn_unanswered: f.totals.syn_unanswered(0) || f.totals.syn_unanswered(1),
            query: input.export(f.totals.first_ns, f.totals.last_ns + 1, flow_filter(f)),
        })
        .collect();
    let host_query = |h: &IpAddr, from: u64, to: u64| {
        let tcp = Filter::proto(IpProto::Tcp);
        input.export(from, to, tcp.and(Filter::host(Direction::SrcOrDst, *h)))
    };
    let mut total = Health::default();
    let mut intervals = Vec::with_capacity(n);
    for (i, m) in per.into_iter().enumerate() {
        let from = input.from_ns + i as u64 * interval_ns;
        let to = (from + interval_ns).min(input.to_ns.max(from + 1));
        let mut t = Health::default();
        let mut rows: Vec<HostHealth> = m
            .into_iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(host, mut h)| {
                t.add(&h);
                hosts.entry(host).or_default().add(&h);
                h.rate();
                HostHealth {
                    host: host.to_string(),
                    health: h,
                    query: host_query(&host, from, to),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.health
                .retransmissions
                .cmp(&a.health.retransmissions)
                .then(a.host.cmp(&b.host))
        });
        total.add(&t);
        t.rate();
        intervals.push(Interval {
            from_ns: from,
            from: rfc(from),
            to_ns: to,
            to: rfc(to),
            total: t,
            hosts: rows,
        });
    }
    total.rate();
    let mut worst_hosts: Vec<HostHealth> = hosts
        .into_iter()
        .map(|(host, mut h)| {
            h.rate();
            HostHealth {
                host: host.to_string(),
                health: h,
                query: host_query(&host, input.from_ns, input.to_ns),
            }
        })
        .filter(|h| {
            h.health.retransmissions
                + h.health.zero_window_segments
                + h.health.rsts_sent
                + h.health.syns_unanswered
                > 0
        })
        .collect();
    worst_hosts.sort_by(|a, b| {
        b.health
            .retransmissions
            .cmp(&a.health.retransmissions)
            .then(b.health.zero_window_ns.cmp(&a.health.zero_window_ns))
            .then(a.host.cmp(&b.host))
    });
    worst_hosts.truncate(10);
    sessions.sort_by(|a, b| {
        let r = |s: &Session| s.retransmissions[0] + s.retransmissions[1];
        let z = |s: &Session| s.zero_window_ns[0] + s.zero_window_ns[1];
        let x = |s: &Session| s.rsts[0] + s.rsts[1];
        r(b).cmp(&r(a))
            .then(z(b).cmp(&z(a)))
            .then(x(b).cmp(&x(a)))
            .then(a.flow.cmp(&b.flow))
    });
    sessions.truncate(10);
    Ok(Tcp {
        interval_ns,
        total,
        intervals,
        worst_hosts,
        worst_sessions: sessions,
    })
}
