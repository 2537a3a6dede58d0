//! The alert rules of the config's `[alerts]` section, evaluated over a window's flows (the
//! index alone): each rule that fires gives one [`Alert`] per entity (host, flow or group
//! pair), with the figures it measured and the `capsule query` command exporting its packets.
//!
//! ```text
//! Input (flows of the window) + Config (groups, policy, work_hours, [alerts] thresholds)
//!   egress      each flow direction from a group to a destination its [egress] entry does
//!               not allow, whose bytes in one `egress_window` reach `egress_bytes`
//!   off_hours   each flow direction from a group member to an address in no group, whose
//!               bytes in seconds outside [work_hours] reach `off_hours_bytes`
//!   dscp        dscp.rs's violations (sender, destination, value) of `dscp_bytes` or more
//!   group_pair  matrix.rs's flagged cells between two named groups, `pair_bytes` or more
//!   straggler   stragglers.rs over each of `straggler_groups`
//!   tcp_*       per host: retransmitted share of data segments sent, zero windows sent
//!   -> alerts, worst first (severity, then bytes)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use capsule_config::{AlertRules, Config};
use capsule_query::Direction::{Dst, Src};
use capsule_query::Filter;
use capsule_query::IpProto;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::matrix::{self, UNASSIGNED};
use crate::{dscp, rfc, side_filter, stragglers, AnalyticsError, Export, Input, Policy};

/// How urgent an alert is: the order of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    High,
    Medium,
    Low,
}

/// What an alert is about.
#[derive(Debug, Clone, Serialize)]
pub struct Entity {
    /// `host`, `flow` or `group_pair`.
    pub kind: &'static str,
    /// The host's address, the flow's label (`tcp 10.60.0.5:40000 -> 203.0.113.77:443`) or
    /// the pair (`model-store -> gpu`).
    pub name: String,
    /// The hosts it names.
    pub hosts: Vec<String>,
}

/// One alert.
#[derive(Debug, Clone, Serialize)]
pub struct Alert {
    /// The rule's name (`capsule_config::ALERT_RULES`).
    pub rule: &'static str,
    pub severity: Severity,
    pub entity: Entity,
    /// What the rule found, in words.
    pub summary: String,
    pub first_ns: u64,
    pub first: String,
    pub last_ns: u64,
    pub last: String,
    /// The measured figures and the threshold they crossed.
    pub figures: Map<String, Value>,
    /// The `capsule query` command line exporting the alert's packets.
    pub query: Export,
}

impl Alert {
    /// The bytes the alert is about (0 when it is not about bytes), for ordering.
    pub fn bytes(&self) -> u64 {
        self.figures
            .get("bytes")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }
}

#[allow(clippy::too_many_arguments)]
fn alert(
    rule: &'static str,
    severity: Severity,
    entity: Entity,
    summary: String,
    first_ns: u64,
    last_ns: u64,
    figures: Value,
    query: Export,
) -> Alert {
    let figures = match figures {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Alert {
        rule,
        severity,
        entity,
        summary,
        first_ns,
        first: rfc(first_ns),
        last_ns,
        last: rfc(last_ns),
        figures,
        query,
    }
}

/// Evaluates every enabled rule of `config`'s `[alerts]` over `input`.
pub fn evaluate(input: &Input, config: &Config) -> Result<Vec<Alert>, AnalyticsError> {
    let rules = config.alerts();
    let policy: &dyn Policy = config;
    let mut out = Vec::new();
    if rules.enabled("egress") || rules.enabled("off_hours") {
        flow_rules(input, config, rules, &mut out);
    }
    if rules.enabled("dscp") {
        for v in dscp::dscp(input, Some(policy))
            .violations
            .unwrap_or_default()
            .into_iter()
            .filter(|v| v.bytes >= rules.dscp_bytes.max(1))
        {
            out.push(alert(
                "dscp",
                Severity::Medium,
                Entity {
                    kind: "host",
                    name: v.src.clone(),
                    hosts: vec![v.src.clone(), v.dst.clone()],
                },
                format!(
                    "{} ({}) marks traffic to {} {} ({}), which the [dscp] policy does not \
                     allow it",
                    v.src,
                    v.src_group.as_deref().unwrap_or(UNASSIGNED),
                    v.dst,
                    v.name,
                    v.dscp
                ),
                v.first_ns,
                v.last_ns,
                json!({"dst": v.dst, "src_group": v.src_group, "dscp": v.dscp, "dscp_name": v.name,
                       "bytes": v.bytes, "packets": v.packets, "flows": v.flows,
                       "threshold_bytes": rules.dscp_bytes}),
                v.query,
            ));
        }
    }
    if rules.enabled("group_pair") {
        let m = matrix::matrix(input, policy, matrix::By::Bytes);
        for c in m.cells.iter().filter(|c| {
            c.flagged
                && c.src_group != UNASSIGNED
                && c.dst_group != UNASSIGNED
                && c.flagged_flows.iter().map(|f| f.bytes).sum::<u64>() >= rules.pair_bytes.max(1)
        }) {
            let ff = &c.flagged_flows;
            let bytes: u64 = ff.iter().map(|f| f.bytes).sum();
            let packets: u64 = ff.iter().map(|f| f.packets).sum();
            let pairs: BTreeSet<(String, String)> =
                ff.iter().map(|f| (f.src.clone(), f.dst.clone())).collect();
            let mut hosts: BTreeSet<String> = BTreeSet::new();
            for (a, b) in &pairs {
                hosts.insert(a.clone());
                hosts.insert(b.clone());
            }
            let filter = pairs
                .iter()
                .filter_map(|(a, b)| Some((a.parse::<IpAddr>().ok()?, b.parse::<IpAddr>().ok()?)))
                .map(|(a, b)| Filter::host(Src, a).and(Filter::host(Dst, b)))
                .reduce(Filter::or)
                .unwrap_or_else(|| Filter::all().not());
            let first = ff.iter().map(|f| f.first_ns).min().unwrap_or(input.from_ns);
            let last = ff.iter().map(|f| f.last_ns).max().unwrap_or(input.to_ns);
            let (first, last) = clamp(input, first, last);
            out.push(alert(
                "group_pair",
                Severity::High,
                Entity {
                    kind: "group_pair",
                    name: format!("{} -> {}", c.src_group, c.dst_group),
                    hosts: hosts.into_iter().collect(),
                },
                format!(
                    "group {} sent to group {}, which its [egress] entry does not list",
                    c.src_group, c.dst_group
                ),
                first,
                last,
                json!({"src_group": c.src_group, "dst_group": c.dst_group, "bytes": bytes,
                       "packets": packets, "flows": ff.len(), "host_pairs": pairs.len(),
                       "threshold_bytes": rules.pair_bytes}),
                input.export(first, last + 1, filter),
            ));
        }
    }
    if rules.enabled("straggler") {
        for g in &rules.straggler_groups {
            let s = stragglers::stragglers(
                input,
                policy,
                g,
                rules.straggler_interval_ns,
                rules.straggler_ratio,
                rules.straggler_min_bytes,
            )?;
            for x in s.stragglers {
                out.push(alert(
                    "straggler",
                    Severity::Medium,
                    Entity {
                        kind: "host",
                        name: x.host.clone(),
                        hosts: vec![x.host.clone()],
                    },
                    format!(
                        "{} in group {g} sent {:.2} of the group's median for {} intervals",
                        x.host, x.ratio_to_median, x.intervals
                    ),
                    x.from_ns,
                    x.to_ns.saturating_sub(1).max(x.from_ns),
                    json!({"group": g, "ratio_to_median": x.ratio_to_median,
                           "intervals": x.intervals, "interval_s": s.interval_ns / 1_000_000_000,
                           "threshold_ratio": rules.straggler_ratio}),
                    x.query,
                ));
            }
        }
    }
    if rules.enabled("tcp_retransmissions") || rules.enabled("tcp_zero_window") {
        tcp_rules(input, rules, &mut out);
    }
    out.sort_by(|a, b| {
        a.severity
            .cmp(&b.severity)
            .then(b.bytes().cmp(&a.bytes()))
            .then(a.rule.cmp(b.rule))
            .then(a.entity.name.cmp(&b.entity.name))
    });
    Ok(out)
}

/// `[first, last]` bounded by the answered window.
fn clamp(input: &Input, first: u64, last: u64) -> (u64, u64) {
    let first = first.max(input.from_ns);
    let last = last.min(input.to_ns.saturating_sub(1)).max(first);
    (first, last)
}

/// The label of direction `d` of a flow: `tcp 10.60.0.5:40000 -> 203.0.113.77:443`.
fn side_label(f: &capsule_index::sideindex::FlowCounts, d: usize) -> String {
    let proto = IpProto::from(f.key.proto);
    let (src, dst, ports) = f.key.side(d);
    let ep = |a: IpAddr, p: Option<u16>| match (a, p) {
        (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    };
    format!(
        "{proto} {} -> {}",
        ep(src, ports.map(|p| p.0)),
        ep(dst, ports.map(|p| p.1))
    )
}

/// `egress` and `off_hours`: one pass over the flow directions.
fn flow_rules(input: &Input, config: &Config, rules: &AlertRules, out: &mut Vec<Alert>) {
    let groups = config.groups();
    let hours = config.work_hours();
    let window_s = (rules.egress_window_ns / 1_000_000_000).max(1);
    let from_s = input.from_ns / 1_000_000_000;
    for s in &input.flows {
        let f = &s.flow;
        for d in 0..2 {
            if f.totals.bytes[d] == 0 {
                continue;
            }
            let (src, dst, _) = f.key.side(d);
            let Some(gs) = groups.group_of(src) else {
                continue;
            };
            let src_group = groups.name(gs).to_string();
            let secs: Vec<(u64, u64)> = f
                .buckets
                .iter()
                .filter(|b| b.bytes[d] > 0)
                .map(|b| (b.second, b.bytes[d]))
                .collect();
            let (Some(first_s), Some(last_s)) = (secs.first(), secs.last()) else {
                continue;
            };
            let (first, last) = clamp(
                input,
                f.totals.first_ns.max(first_s.0 * 1_000_000_000),
                f.totals.last_ns.min(last_s.0 * 1_000_000_000 + 999_999_999),
            );
            let query = input.export(first, last + 1, side_filter(f, d));
            let label = side_label(f, d);
            let entity = || Entity {
                kind: "flow",
                name: label.clone(),
                hosts: vec![src.to_string(), dst.to_string()],
            };
            let packets = f.totals.packets[d];
            if rules.enabled("egress") && !config.egress_allowed(Some(gs), dst) {
                let mut per: BTreeMap<u64, u64> = BTreeMap::new();
                for &(sec, b) in &secs {
                    *per.entry(sec.saturating_sub(from_s) / window_s)
                        .or_default() += b;
                }
                let peak = per.values().copied().max().unwrap_or(0);
                if peak >= rules.egress_bytes.max(1) {
                    let dst_group = groups
                        .group_of(dst)
                        .map_or(UNASSIGNED.to_string(), |g| groups.name(g).to_string());
                    out.push(alert(
                        "egress",
                        Severity::High,
                        entity(),
                        format!(
                            "{src} ({src_group}) sent {peak} bytes in one {window_s} s window \
                             to {dst} ({dst_group}), outside its [egress] allow-list"
                        ),
                        first,
                        last,
                        json!({"src_group": src_group, "dst_group": dst_group,
                               "bytes": f.totals.bytes[d], "packets": packets,
                               "peak_window_bytes": peak, "window_s": window_s,
                               "threshold_bytes": rules.egress_bytes}),
                        query.clone(),
                    ));
                }
            }
            if let Some(h) = hours.filter(|_| rules.enabled("off_hours")) {
                if groups.group_of(dst).is_some() {
                    continue;
                }
                let off: u64 = secs
                    .iter()
                    .filter(|(sec, _)| !h.contains(sec * 1_000_000_000))
                    .map(|(_, b)| b)
                    .sum();
                if off >= rules.off_hours_bytes.max(1) {
                    out.push(alert(
                        "off_hours",
                        Severity::High,
                        entity(),
                        format!(
                            "{src} ({src_group}) sent {off} bytes to {dst}, outside every \
                             group, outside working hours ({})",
                            h.describe()
                        ),
                        first,
                        last,
                        json!({"src_group": src_group, "bytes": f.totals.bytes[d], "packets": packets,
                               "off_hours_bytes": off,
                               "threshold_bytes": rules.off_hours_bytes}),
                        query,
                    ));
                }
            }
        }
    }
}

/// `tcp_retransmissions` and `tcp_zero_window`, per sending host.
fn tcp_rules(input: &Input, rules: &AlertRules, out: &mut Vec<Alert>) {
    #[derive(Default)]
    struct H {
        data: u64,
        retrans: u64,
        zero: u64,
        first: u64,
        last: u64,
        seen: bool,
    }
    let mut hosts: BTreeMap<IpAddr, H> = BTreeMap::new();
    for s in input
        .flows
        .iter()
        .filter(|s| IpProto::from(s.flow.key.proto) == IpProto::Tcp)
    {
        let f = &s.flow;
        for d in 0..2 {
            let (src, _, _) = f.key.side(d);
            let h = hosts.entry(src).or_default();
            for b in &f.buckets {
                h.data += u64::from(b.data[d]);
                h.retrans += u64::from(b.retransmissions[d]);
                h.zero += u64::from(b.zero_windows[d]);
            }
            if f.totals.packets[d] > 0 {
                if !h.seen {
                    h.first = f.totals.first_ns;
                    h.last = f.totals.last_ns;
                    h.seen = true;
                }
                h.first = h.first.min(f.totals.first_ns);
                h.last = h.last.max(f.totals.last_ns);
            }
        }
    }
    for (host, h) in hosts.iter().filter(|(_, h)| h.seen) {
        let (first, last) = clamp(input, h.first, h.last);
        let tcp = Filter::proto(IpProto::Tcp);
        let query = input.export(first, last + 1, tcp.and(Filter::host(Src, *host)));
        let rate = if h.data == 0 {
            0.0
        } else {
            h.retrans as f64 / h.data as f64
        };
        let entity = || Entity {
            kind: "host",
            name: host.to_string(),
            hosts: vec![host.to_string()],
        };
        if rules.enabled("tcp_retransmissions")
            && h.data >= rules.retransmission_min_segments.max(1)
            && h.retrans > 0
            && rate >= rules.retransmission_rate
        {
            out.push(alert(
                "tcp_retransmissions",
                Severity::Low,
                entity(),
                format!(
                    "{host} retransmitted {} of {} TCP data segments ({:.1}%)",
                    h.retrans,
                    h.data,
                    rate * 100.0
                ),
                first,
                last,
                json!({"data_segments": h.data, "retransmissions": h.retrans,
                       "retransmission_rate": rate,
                       "threshold_rate": rules.retransmission_rate,
                       "threshold_min_segments": rules.retransmission_min_segments}),
                query.clone(),
            ));
        }
        if rules.enabled("tcp_zero_window") && h.zero >= rules.zero_windows.max(1) {
            out.push(alert(
                "tcp_zero_window",
                Severity::Low,
                entity(),
                format!("{host} advertised a zero window {} times", h.zero),
                first,
                last,
                json!({"zero_window_segments": h.zero, "threshold": rules.zero_windows}),
                query,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{flow, input};

    #[test]
    fn egress_and_off_hours_fire_over_their_thresholds_only() {
        let cfg = Config::parse(
            "[groups]\nstore = [\"10.60.0.5\"]\nlan = [\"10.0.0.0/24\"]\n\
             [egress]\nstore = [\"lan\"]\n\
             [work_hours]\ndays = \"mon-fri\"\nstart = \"08:00\"\nend = \"19:00\"\n\
             timezone = \"UTC\"\n\
             [alerts]\negress_bytes = 1000\negress_window = \"2s\"\noff_hours_bytes = 2500\n",
            "c.toml",
        )
        .unwrap();
        // 1796004000 is a Monday 02:00 UTC: out of hours.
        let t = 1_796_004_000;
        let flows = vec![
            // To the outside: 600 + 600 in one 2 s window, 3000 in all: both rules.
            flow(
                [10, 60, 0, 5],
                [203, 0, 113, 77],
                &[(t, 600), (t + 1, 600), (t + 2, 1800)],
            ),
            // To an allowed group: nothing.
            flow([10, 60, 0, 5], [10, 0, 0, 9], &[(t, 5000)]),
            // Under both thresholds.
            flow([10, 60, 0, 5], [203, 0, 113, 78], &[(t, 500), (t + 3, 500)]),
        ];
        let i = input(flows, t * 1_000_000_000, (t + 10) * 1_000_000_000);
        let a = evaluate(&i, &cfg).unwrap();
        let got: Vec<(&str, &str)> = a
            .iter()
            .map(|a| (a.rule, a.entity.hosts[1].as_str()))
            .collect();
        assert_eq!(
            got,
            vec![("egress", "203.0.113.77"), ("off_hours", "203.0.113.77")],
            "{a:#?}"
        );
        assert_eq!(a[0].figures["peak_window_bytes"], 1800);
        assert_eq!(a[1].figures["off_hours_bytes"], 3000);
        let f = a[0].query.filter.to_string();
        assert!(f.contains("src host 10.60.0.5"), "{f}");
        assert_eq!(a[0].first_ns, t * 1_000_000_000);
    }
}
