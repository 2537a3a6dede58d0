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
//!   ef_share, microburst, incast, rate_ceiling, active_hours: alerts/msrules.rs (the
//!               millisecond series and the [expect.GROUP] entries)
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

pub mod msrules;

use crate::matrix::{self, UNASSIGNED};
use crate::names::{endpoint, with_name, EndName};
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
pub(crate) fn alert(
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

/// Evaluates every enabled rule of `config`'s `[alerts]` over `input` (the millisecond
/// rules need the series: [`evaluate_with`]).
pub fn evaluate(input: &Input, config: &Config) -> Result<Vec<Alert>, AnalyticsError> {
    evaluate_with(input, config, None)
}

/// Evaluates every enabled rule, the millisecond ones (`ef_share`, `microburst`,
/// `incast`, a sub-second `rate_ceiling`) over `ms` when given.
pub fn evaluate_with(
    input: &Input,
    config: &Config,
    ms: Option<&msrules::MsInput<'_>>,
) -> Result<Vec<Alert>, AnalyticsError> {
    let rules = config.alerts();
    let policy: &dyn Policy = config;
    let mut out = Vec::new();
    if rules.enabled("egress") || rules.enabled("off_hours") {
        flow_rules(input, config, rules, &mut out);
    }
    if rules.enabled("dscp") {
        dscp_rule(input, policy, rules, &mut out);
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
            // Who the destinations are, where anything names them (largest flows first).
            let mut named: Vec<(String, String)> = Vec::new();
            for f in ff {
                let Some(n) = f.dst_name.as_ref().filter(|n| !n.describe.is_empty()) else {
                    continue;
                };
                if !named.iter().any(|(a, _)| *a == f.dst) {
                    named.push((f.dst.clone(), n.describe.clone()));
                }
            }
            let to = match named.len() {
                0 => String::new(),
                n => {
                    let shown: Vec<String> = named
                        .iter()
                        .take(3)
                        .map(|(a, d)| format!("{a} ({d})"))
                        .collect();
                    let more = if n > 3 {
                        format!(" and {} more named", n - 3)
                    } else {
                        String::new()
                    };
                    format!("; to {}{more}", shown.join(", "))
                }
            };
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
                    "group {} sent to group {}, which its [egress] entry does not list{to}",
                    c.src_group, c.dst_group
                ),
                first,
                last,
                json!({"src_group": c.src_group, "dst_group": c.dst_group, "bytes": bytes,
                       "packets": packets, "flows": ff.len(), "host_pairs": pairs.len(),
                       "dst_names": named.iter().map(|(a, d)| json!({"addr": a, "name": d}))
                           .collect::<Vec<_>>(),
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
    if let Some(ms) = ms {
        msrules::ms_rules(input, config, ms, &mut out)?;
    }
    msrules::expectation_rules(input, config, ms, &mut out);
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
pub(crate) fn clamp(input: &Input, first: u64, last: u64) -> (u64, u64) {
    let first = first.max(input.from_ns);
    let last = last.min(input.to_ns.saturating_sub(1)).max(first);
    (first, last)
}

/// The label of direction `d` of a flow: `tcp 10.60.0.5:40000 -> 203.0.113.77:443`.
fn side_label(f: &capsule_index::sideindex::FlowCounts, d: usize) -> String {
    let proto = IpProto::from(f.key.proto);
    let (src, dst, ports) = f.key.side(d);
    format!(
        "{proto} {} -> {}",
        endpoint(src, ports.map(|p| p.0)),
        endpoint(dst, ports.map(|p| p.1))
    )
}

/// `dscp`: one alert per sender, naming every destination it marks traffic to with a value
/// the policy does not allow it (one cause: the sender's marking), largest first.
fn dscp_rule(input: &Input, policy: &dyn Policy, rules: &AlertRules, out: &mut Vec<Alert>) {
    let mut by_src: BTreeMap<String, Vec<dscp::Violation>> = BTreeMap::new();
    for v in dscp::dscp(input, Some(policy))
        .violations
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v.bytes >= rules.dscp_bytes.max(1))
    {
        by_src.entry(v.src.clone()).or_default().push(v);
    }
    for (src, mut vs) in by_src {
        vs.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.dst.cmp(&b.dst)));
        let top = &vs[0];
        let mut hosts = vec![src.clone()];
        for v in &vs {
            if !hosts.contains(&v.dst) {
                hosts.push(v.dst.clone());
            }
        }
        let marks: Vec<String> = vs
            .iter()
            .map(|v| {
                let dst = with_name(&v.dst, v.dst_name.as_ref().map(|n| n.describe.as_str()));
                format!("{dst} {} ({})", v.name, v.dscp)
            })
            .collect();
        let first = vs.iter().map(|v| v.first_ns).min().unwrap_or(top.first_ns);
        let last = vs.iter().map(|v| v.last_ns).max().unwrap_or(top.last_ns);
        let filter = vs
            .iter()
            .map(|v| v.query.filter.clone())
            .reduce(Filter::or)
            .unwrap_or_else(|| top.query.filter.clone());
        let from = vs.iter().map(|v| v.query.from_ns).min().unwrap_or(first);
        let to = vs.iter().map(|v| v.query.to_ns).max().unwrap_or(last + 1);
        let destinations: Vec<Value> = vs
            .iter()
            .map(|v| {
                json!({"dst": v.dst, "dst_name": v.dst_name, "dscp": v.dscp,
                       "dscp_name": v.name, "bytes": v.bytes,
                       "packets": v.packets, "flows": v.flows})
            })
            .collect();
        out.push(alert(
            "dscp",
            Severity::Medium,
            Entity {
                kind: "host",
                name: src.clone(),
                hosts,
            },
            format!(
                "{src} ({}) marks traffic to {}, which the [dscp] policy does not allow it",
                top.src_group.as_deref().unwrap_or(UNASSIGNED),
                join_words(&marks)
            ),
            first,
            last,
            json!({"dst": top.dst, "src_group": top.src_group, "dscp": top.dscp,
                   "dscp_name": top.name,
                   "bytes": vs.iter().map(|v| v.bytes).sum::<u64>(),
                   "packets": vs.iter().map(|v| v.packets).sum::<u64>(),
                   "flows": vs.iter().map(|v| v.flows).sum::<u64>(),
                   "destinations": destinations,
                   "threshold_bytes": rules.dscp_bytes}),
            input.export(from, to, filter),
        ));
    }
}

/// `a`, `a and b`, `a, b and c`.
fn join_words(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [a] => a.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The severity of a retransmission finding by the share of data segments retransmitted:
/// at least [`STORM_HIGH`] high, at least [`STORM_MEDIUM`] medium, else low.
pub fn retransmission_severity(share: f64) -> Severity {
    if share >= STORM_HIGH {
        Severity::High
    } else if share >= STORM_MEDIUM {
        Severity::Medium
    } else {
        Severity::Low
    }
}

/// A retransmitted share from which a retransmission finding is high (docs/alerts.md).
pub const STORM_HIGH: f64 = 0.30;
/// A retransmitted share from which a retransmission finding is medium.
pub const STORM_MEDIUM: f64 = 0.10;

/// `egress` and `off_hours`: one pass over the flow directions. The destination is named
/// as the window's names name it (names.rs: `203.0.113.77:443 (tls: models.example-hub.io)`),
/// and an `[egress]` allow-list by name allows what those names match.
fn flow_rules(input: &Input, config: &Config, rules: &AlertRules, out: &mut Vec<Alert>) {
    let groups = config.groups();
    let hours = config.work_hours().filter(|_| rules.enabled("off_hours"));
    let window_s = (rules.egress_window_ns / 1_000_000_000).max(1);
    let from_s = input.from_ns / 1_000_000_000;
    for s in &input.flows {
        let f = &s.flow;
        for d in 0..2 {
            if f.totals.bytes[d] == 0 {
                continue;
            }
            let (src, dst, ports) = f.key.side(d);
            let Some(gs) = groups.group_of(src) else {
                continue;
            };
            // What the groups and prefixes allow needs no names; only what they do not, and
            // what may be off hours, are looked at further.
            let egress = rules.enabled("egress") && !config.egress_allowed(Some(gs), dst, &[]);
            let off_hours = hours.filter(|_| groups.group_of(dst).is_none());
            if !egress && off_hours.is_none() {
                continue;
            }
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
            let dst_name = input.dst_name(f, d);
            let names = dst_name.as_ref().map(EndName::names).unwrap_or_default();
            let egress = egress && !config.egress_allowed(Some(gs), dst, &names);
            let query = input.export(first, last + 1, side_filter(f, d));
            let label = side_label(f, d);
            let entity = || Entity {
                kind: "flow",
                name: label.clone(),
                hosts: vec![src.to_string(), dst.to_string()],
            };
            // `203.0.113.77:443 (tls: models.example-hub.io)`, and the tunnel the traffic
            // came in: `... via vxlan vni 42 192.0.2.1>192.0.2.2`.
            let tunnel = crate::tunnel::dir_tunnel(f, d);
            let mut dst_text = with_name(
                &endpoint(dst, ports.map(|p| p.1)),
                dst_name.as_ref().map(|n| n.describe.as_str()),
            );
            if let Some(t) = &tunnel {
                dst_text.push_str(&format!(" via {}", t.describe));
            }
            let packets = f.totals.packets[d];
            if egress {
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
                             to {dst_text}, {}, outside its [egress] allow-list",
                            in_group(&dst_group)
                        ),
                        first,
                        last,
                        json!({"src_group": src_group, "dst_group": dst_group,
                               "dst_name": dst_name, "tunnel": tunnel,
                               "bytes": f.totals.bytes[d], "packets": packets,
                               "peak_window_bytes": peak, "window_s": window_s,
                               "threshold_bytes": rules.egress_bytes}),
                        query.clone(),
                    ));
                }
            }
            if let Some(h) = off_hours {
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
                            "{src} ({src_group}) sent {off} bytes to {dst_text}, outside every \
                             group, outside working hours ({})",
                            h.describe()
                        ),
                        first,
                        last,
                        json!({"src_group": src_group, "bytes": f.totals.bytes[d], "packets": packets,
                               "dst_name": dst_name, "tunnel": tunnel,
                               "off_hours_bytes": off,
                               "threshold_bytes": rules.off_hours_bytes}),
                        query,
                    ));
                }
            }
        }
    }
}

/// `in group NAME`, or `in no group` for [`UNASSIGNED`].
fn in_group(g: &str) -> String {
    if g == UNASSIGNED {
        "in no group".to_string()
    } else {
        format!("in group {g}")
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
    // The hosts over the retransmission threshold: one finding, one cause (a storm).
    let mut storm: Vec<(IpAddr, u64, u64, u64, u64)> = Vec::new();
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
            storm.push((*host, h.data, h.retrans, first, last));
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
    if !storm.is_empty() {
        storm_alert(input, rules, &mut storm, out);
    }
}

/// `tcp_retransmissions`: the hosts over the threshold as one alert, its severity by the
/// share of their data segments retransmitted.
fn storm_alert(
    input: &Input,
    rules: &AlertRules,
    storm: &mut [(IpAddr, u64, u64, u64, u64)],
    out: &mut Vec<Alert>,
) {
    storm.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let data: u64 = storm.iter().map(|h| h.1).sum();
    let retrans: u64 = storm.iter().map(|h| h.2).sum();
    let share = retrans as f64 / data.max(1) as f64;
    let first = storm.iter().map(|h| h.3).min().unwrap_or(input.from_ns);
    let last = storm.iter().map(|h| h.4).max().unwrap_or(first);
    let names: Vec<String> = storm.iter().map(|h| h.0.to_string()).collect();
    let filter = Filter::proto(IpProto::Tcp).and(
        storm
            .iter()
            .map(|h| Filter::host(Src, h.0))
            .reduce(Filter::or)
            .unwrap_or_else(|| Filter::all().not()),
    );
    let (kind, name, who) = match &names[..] {
        [one] => ("host", one.clone(), one.clone()),
        _ => (
            "hosts",
            format!("{} hosts", names.len()),
            format!("{} hosts ({})", names.len(), join_words(&names)),
        ),
    };
    let per_host: Vec<Value> = storm
        .iter()
        .map(|h| {
            json!({"host": h.0.to_string(), "data_segments": h.1, "retransmissions": h.2,
                   "retransmission_rate": h.2 as f64 / h.1.max(1) as f64})
        })
        .collect();
    out.push(alert(
        "tcp_retransmissions",
        retransmission_severity(share),
        Entity {
            kind,
            name,
            hosts: names,
        },
        format!(
            "{who} retransmitted {retrans} of {data} TCP data segments ({:.1}%)",
            share * 100.0
        ),
        first,
        last,
        json!({"data_segments": data, "retransmissions": retrans,
               "retransmission_rate": share, "hosts": per_host,
               "threshold_rate": rules.retransmission_rate,
               "threshold_min_segments": rules.retransmission_min_segments,
               "severity_medium_rate": STORM_MEDIUM, "severity_high_rate": STORM_HIGH}),
        input.export(first, last + 1, filter),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{flow, input};
    use capsule_index::flows::FlowSummary;

    /// Each alert's rule and the second host it names (a flow's destination).
    fn rules_and_destinations(a: &[Alert]) -> Vec<(&str, &str)> {
        a.iter()
            .map(|a| (a.rule, a.entity.hosts[1].as_str()))
            .collect()
    }

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
        let got = rules_and_destinations(&a);
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

    #[test]
    fn egress_by_name_allows_what_names_match_and_findings_name_the_destination() {
        use crate::tests::{dns, tls, with_dns};
        let cfg = Config::parse(
            "[groups]\nstore = [\"10.60.0.5\"]\n\
             [egress]\nstore = [\"*.backup.example.com\"]\n\
             [work_hours]\ndays = \"mon-fri\"\nstart = \"08:00\"\nend = \"19:00\"\n\
             timezone = \"UTC\"\n\
             [alerts]\negress_bytes = 1000\negress_window = \"1s\"\noff_hours_bytes = 1000\n",
            "c.toml",
        )
        .unwrap();
        let t = 1_796_004_000; // a Monday, 02:00 UTC
        let me = [10, 60, 0, 5];
        let i = with_dns(input(
            vec![
                // The DNS answer that names 198.51.100.7 (under both thresholds itself).
                dns(
                    flow(me, [10, 0, 0, 53], &[(t, 200)]),
                    "files.backup.example.com",
                    [198, 51, 100, 7],
                ),
                // Named by that answer only: allowed by the name, but off hours.
                flow(me, [198, 51, 100, 7], &[(t, 5000)]),
                // Named by its ClientHello, not allowed.
                tls(
                    flow(me, [203, 0, 113, 77], &[(t, 4000)]),
                    me,
                    "models.example-hub.io",
                ),
                // Named by nothing.
                flow(me, [203, 0, 113, 99], &[(t, 3000)]),
            ],
            t * 1_000_000_000,
            (t + 10) * 1_000_000_000,
        ));
        let a = evaluate(&i, &cfg).unwrap();
        let got = rules_and_destinations(&a);
        assert_eq!(
            got,
            vec![
                ("off_hours", "198.51.100.7"),
                ("egress", "203.0.113.77"),
                ("off_hours", "203.0.113.77"),
                ("egress", "203.0.113.99"),
                ("off_hours", "203.0.113.99"),
            ],
            "{a:#?}"
        );
        let find = |rule: &str, host: &str| {
            a.iter()
                .find(|x| x.rule == rule && x.entity.hosts[1] == host)
                .unwrap()
        };
        let e = find("egress", "203.0.113.77");
        assert!(
            e.summary
                .contains("to 203.0.113.77:6000 (tls: models.example-hub.io), in no group"),
            "{}",
            e.summary
        );
        assert_eq!(e.figures["dst_name"]["name"], "models.example-hub.io");
        assert_eq!(e.figures["dst_name"]["by"], "sni");
        let o = find("off_hours", "198.51.100.7");
        assert!(
            o.summary
                .contains("to 198.51.100.7:6000 (dns answer: files.backup.example.com)"),
            "{}",
            o.summary
        );
        assert_eq!(
            o.figures["dst_name"]["dns_names"],
            json!(["files.backup.example.com"])
        );
        let u = find("egress", "203.0.113.99");
        assert!(
            u.summary.contains("to 203.0.113.99:6000, in no group"),
            "{}",
            u.summary
        );
        assert!(u.figures["dst_name"].is_null());
    }

    /// A finding about a flow that arrived in a tunnel says which one, in words and typed.
    #[test]
    fn egress_findings_name_the_tunnel_the_flow_came_in() {
        use capsule_index::sideindex::{EncapDir, FlowEncap};
        let cfg = Config::parse(
            "[groups]\nstore = [\"10.60.0.5\"]\n[egress]\nstore = []\n\
             [alerts]\negress_bytes = 1000\negress_window = \"1s\"\n",
            "c.toml",
        )
        .unwrap();
        let t = 1_796_004_000;
        let me = [10, 60, 0, 5];
        let mut tunnelled = flow(me, [203, 0, 113, 77], &[(t, 4000)]);
        let packets = tunnelled.flow.totals.packets[0];
        tunnelled.flow.totals.encap = Some(Box::new(FlowEncap {
            dirs: [
                Some(EncapDir {
                    kind: capsule_wire::EncapKind::Vxlan,
                    outer: Some(("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap())),
                    id: Some(42),
                    mpls: None,
                    layers: 1,
                    packets,
                    mixed: false,
                    outer_dscp: 1,
                }),
                None,
            ],
        }));
        let bare = flow(me, [203, 0, 113, 99], &[(t, 3000)]);
        let i = input(
            vec![tunnelled, bare],
            t * 1_000_000_000,
            (t + 10) * 1_000_000_000,
        );
        let a = evaluate(&i, &cfg).unwrap();
        let find = |host: &str| {
            a.iter()
                .find(|x| x.rule == "egress" && x.entity.hosts[1] == host)
                .unwrap()
        };
        let e = find("203.0.113.77");
        assert!(
            e.summary
                .contains("to 203.0.113.77:6000 via vxlan vni 42 192.0.2.1>192.0.2.2, in no group"),
            "{}",
            e.summary
        );
        assert_eq!(e.figures["tunnel"]["kind"], "vxlan");
        assert_eq!(e.figures["tunnel"]["id_kind"], "vni");
        assert_eq!(e.figures["tunnel"]["id"], 42);
        assert_eq!(e.figures["tunnel"]["outer_src"], "192.0.2.1");
        let u = find("203.0.113.99");
        assert!(!u.summary.contains(" via "), "{}", u.summary);
        assert!(u.figures["tunnel"].is_null());
    }

    /// A group pair's alert names the destinations the window's names name.
    #[test]
    fn group_pair_alerts_name_their_destinations() {
        use crate::tests::tls;
        let cfg = Config::parse(
            "[groups]\nstore = [\"10.60.0.5\"]\nhub = [\"203.0.113.0/24\"]\n\
             lan = [\"10.0.0.0/24\"]\n[egress]\nstore = [\"lan\"]\n\
             [alerts]\npair_bytes = 1000\n",
            "c.toml",
        )
        .unwrap();
        let t = 1_796_004_000;
        let me = [10, 60, 0, 5];
        let i = input(
            vec![
                tls(
                    flow(me, [203, 0, 113, 77], &[(t, 4000)]),
                    me,
                    "models.example-hub.io",
                ),
                flow(me, [203, 0, 113, 99], &[(t, 3000)]),
            ],
            t * 1_000_000_000,
            (t + 10) * 1_000_000_000,
        );
        let a = evaluate(&i, &cfg).unwrap();
        let g: Vec<_> = a.iter().filter(|x| x.rule == "group_pair").collect();
        assert_eq!(g.len(), 1, "{a:#?}");
        assert!(
            g[0].summary.ends_with(
                "which its [egress] entry does not list; to 203.0.113.77 (tls: models.example-hub.io)"
            ),
            "{}",
            g[0].summary
        );
        assert_eq!(
            g[0].figures["dst_names"],
            json!([{"addr": "203.0.113.77", "name": "tls: models.example-hub.io"}])
        );
    }

    /// A TCP flow from `src` sending `data` data segments, `retrans` of them retransmitted,
    /// in second `t`.
    fn tcp(src: [u8; 4], dst: [u8; 4], t: u64, data: u32, retrans: u32) -> FlowSummary {
        let mut f = flow(src, dst, &[(t, u64::from(data) * 100)]);
        f.flow.key.proto = 6;
        let d = usize::from(f.flow.key.a != IpAddr::from(src));
        f.flow.buckets[0].data[d] = data;
        f.flow.buckets[0].retransmissions[d] = retrans;
        f
    }

    fn tcp_config() -> Config {
        Config::parse("[alerts]\nretransmission_min_segments = 100\n", "c.toml").unwrap()
    }

    #[test]
    fn a_retransmission_storm_is_one_finding_whose_severity_follows_its_share() {
        let t = 1_796_004_000;
        // 16 hosts, each retransmitting 650 of 1000 segments: one high finding naming them.
        let flows: Vec<FlowSummary> = (1..=16)
            .map(|h| tcp([10, 0, 1, h], [10, 0, 2, 1], t, 1000, 650))
            .collect();
        let i = input(flows, t * 1_000_000_000, (t + 10) * 1_000_000_000);
        let a = evaluate(&i, &tcp_config()).unwrap();
        assert_eq!(a.len(), 1, "{a:#?}");
        assert_eq!(a[0].rule, "tcp_retransmissions");
        assert_eq!(a[0].severity, Severity::High);
        assert_eq!(a[0].entity.kind, "hosts");
        assert_eq!(a[0].entity.hosts.len(), 16);
        assert_eq!(a[0].figures["retransmissions"], 16 * 650);
        let f = a[0].query.filter.to_string();
        assert!(f.contains("10.0.1.1") && f.contains("10.0.1.16"), "{f}");
        // One host: its address; 15% is medium, 6% low.
        for (retrans, sev) in [(150, Severity::Medium), (60, Severity::Low)] {
            let flows = vec![tcp([10, 0, 1, 1], [10, 0, 2, 1], t, 1000, retrans)];
            let i = input(flows, t * 1_000_000_000, (t + 10) * 1_000_000_000);
            let a = evaluate(&i, &tcp_config()).unwrap();
            assert_eq!(a.len(), 1, "{a:#?}");
            assert_eq!(
                (a[0].severity, a[0].entity.name.as_str()),
                (sev, "10.0.1.1")
            );
        }
    }

    #[test]
    fn one_dscp_violator_with_two_destinations_is_one_finding_naming_both() {
        use capsule_index::sideindex::DscpCount;
        let cfg = Config::parse(
            "[groups]\nvoice = [\"10.40.0.0/24\"]\nbulk = [\"10.30.0.0/24\"]\n\
             [dscp]\nef = [\"voice\"]\n",
            "c.toml",
        )
        .unwrap();
        let t = 1_796_004_000;
        let marked = |dst: [u8; 4], bytes: u64| {
            let mut f = flow([10, 30, 0, 11], dst, &[(t, bytes)]);
            let d = usize::from(f.flow.key.a != IpAddr::from([10, 30, 0, 11]));
            f.flow.totals.dscp_counts[d] = vec![DscpCount {
                dscp: 46,
                packets: bytes / 100,
                bytes,
            }];
            f
        };
        let flows = vec![marked([10, 30, 0, 20], 1000), marked([10, 30, 0, 21], 3000)];
        let i = input(flows, t * 1_000_000_000, (t + 10) * 1_000_000_000);
        let a = evaluate(&i, &cfg).unwrap();
        assert_eq!(a.len(), 1, "{a:#?}");
        assert_eq!(a[0].entity.name, "10.30.0.11");
        assert_eq!(
            a[0].entity.hosts,
            ["10.30.0.11", "10.30.0.21", "10.30.0.20"]
        );
        assert_eq!(a[0].figures["bytes"], 4000);
        assert!(
            a[0].summary
                .contains("10.30.0.21 ef (46) and 10.30.0.20 ef (46)"),
            "{}",
            a[0].summary
        );
        let f = a[0].query.filter.to_string();
        assert!(f.contains("10.30.0.20") && f.contains("10.30.0.21"), "{f}");
    }
}
