//! `capsule stragglers`: in a group of hosts that should send alike (the nodes of a training
//! job), per interval the group's median of bytes sent and each member's ratio to it; a
//! member under the ratio for 3 intervals in a row or more is a straggler.
//!
//! Members are the group's hosts seen in the window (sending or receiving: a node that only
//! receives sends 0, the lowest ratio there is). An interval is judged only when the median
//! member sent at least `min_bytes` in it (an idle group's ratios are noise) and at least 3
//! members sent something; an interval not judged ends every run.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use capsule_query::{Direction, Filter};
use serde::Serialize;

use crate::{check_interval, median, rfc, AnalyticsError, Export, Input, Policy};

/// Default `--min-bytes`: 1 MB sent by the median member in an interval. Below it the group
/// is idle (keepalives, a few ACKs) and ratios say nothing; a job that moves data moves far
/// more (one 1 Gbit/s link carries 1.25 GB in 10 s).
pub const DEFAULT_MIN_BYTES: u64 = 1_000_000;

/// Fewer active members than this judge nothing: a median of two is no baseline.
pub const MIN_ACTIVE: usize = 3;

/// Runs of at least this many intervals under the ratio are stragglers.
pub const MIN_RUN: usize = 3;

/// A member in one interval.
#[derive(Debug, Clone, Serialize)]
pub struct MemberInterval {
    pub host: String,
    pub bytes: u64,
    /// Bytes over the group median (absent when the interval is not judged).
    pub ratio: Option<f64>,
}

/// One interval of the group.
#[derive(Debug, Clone, Serialize)]
pub struct Interval {
    pub from_ns: u64,
    pub from: String,
    pub to_ns: u64,
    pub to: String,
    pub median_bytes: u64,
    pub active_members: usize,
    /// False when idle (median under `min_bytes`) or fewer than 3 members active.
    pub judged: bool,
    pub members: Vec<MemberInterval>,
}

/// A member under the ratio for `intervals` intervals in a row.
#[derive(Debug, Clone, Serialize)]
pub struct Straggler {
    pub host: String,
    pub from_ns: u64,
    pub from: String,
    pub to_ns: u64,
    pub to: String,
    pub intervals: usize,
    /// Mean of its ratios over the run.
    pub ratio_to_median: f64,
    pub query: Export,
}

/// The answer of `capsule stragglers`.
#[derive(Debug, Clone, Serialize)]
pub struct Stragglers {
    pub group: String,
    pub interval_ns: u64,
    pub ratio: f64,
    pub min_bytes: u64,
    pub members: Vec<String>,
    pub intervals: Vec<Interval>,
    pub stragglers: Vec<Straggler>,
}

impl Stragglers {
    /// Each member's mean ratio to the group's median over the judged intervals, by host
    /// (members never judged are left out), and whether it is a straggler: what a chart of
    /// the group shows.
    pub fn mean_ratios(&self) -> Vec<(String, f64, bool)> {
        let mut per: std::collections::BTreeMap<&str, (f64, usize)> = Default::default();
        for i in self.intervals.iter().filter(|i| i.judged) {
            for m in &i.members {
                if let Some(r) = m.ratio {
                    let e = per.entry(m.host.as_str()).or_default();
                    e.0 += r;
                    e.1 += 1;
                }
            }
        }
        per.iter()
            .map(|(h, (sum, n))| {
                (
                    (*h).to_string(),
                    sum / *n as f64,
                    self.stragglers.iter().any(|x| x.host == *h),
                )
            })
            .collect()
    }
}

/// Finds the stragglers of `group`.
pub fn stragglers(
    input: &Input,
    policy: &dyn Policy,
    group: &str,
    interval_ns: u64,
    ratio: f64,
    min_bytes: u64,
) -> Result<Stragglers, AnalyticsError> {
    let interval_ns = check_interval(interval_ns, "--interval")?;
    if !policy.groups().iter().any(|g| g == group) {
        return Err(AnalyticsError::Usage(format!(
            "group {group:?} is not in the config's [groups] (it has: {})",
            policy.groups().join(", ")
        )));
    }
    let n = (input.to_ns - input.from_ns).div_ceil(interval_ns).max(1) as usize;
    let slot = |ns: u64| ((ns.saturating_sub(input.from_ns) / interval_ns) as usize).min(n - 1);
    let mut members: BTreeSet<IpAddr> = BTreeSet::new();
    let mut sent: BTreeMap<IpAddr, Vec<u64>> = BTreeMap::new();
    // Whether each sender is in the group, asked of the policy once per address (it names
    // the group, a new string each time: a day of flows asks millions of times).
    let mut in_group: std::collections::HashMap<IpAddr, bool, foldhash::fast::RandomState> =
        Default::default();
    for s in &input.flows {
        let f = &s.flow;
        for d in 0..2 {
            let (src, _, _) = f.key.side(d);
            let member = *in_group
                .entry(src)
                .or_insert_with(|| policy.group_of(src).as_deref() == Some(group));
            if !member {
                continue;
            }
            members.insert(src);
            let v = sent.entry(src).or_insert_with(|| vec![0; n]);
            for b in &f.buckets {
                v[slot(b.second * 1_000_000_000)] += b.bytes[d];
            }
        }
    }
    let mut intervals = Vec::with_capacity(n);
    // Per member: the ratio of each interval, None when not judged.
    let mut ratios: BTreeMap<IpAddr, Vec<Option<f64>>> = BTreeMap::new();
    for i in 0..n {
        let from = input.from_ns + i as u64 * interval_ns;
        let to = (from + interval_ns).min(input.to_ns.max(from + 1));
        let mut all: Vec<u64> = members
            .iter()
            .map(|m| sent.get(m).map_or(0, |v| v[i]))
            .collect();
        let active = all.iter().filter(|&&b| b > 0).count();
        let med = median(&mut all);
        let judged = active >= MIN_ACTIVE && med >= min_bytes && med > 0;
        let rows = members
            .iter()
            .map(|m| {
                let bytes = sent.get(m).map_or(0, |v| v[i]);
                let r = judged.then(|| bytes as f64 / med as f64);
                ratios.entry(*m).or_default().push(r);
                MemberInterval {
                    host: m.to_string(),
                    bytes,
                    ratio: r,
                }
            })
            .collect();
        intervals.push(Interval {
            from_ns: from,
            from: rfc(from),
            to_ns: to,
            to: rfc(to),
            median_bytes: med,
            active_members: active,
            judged,
            members: rows,
        });
    }
    let mut found = Vec::new();
    for (m, rs) in &ratios {
        let mut i = 0;
        while i < rs.len() {
            if !rs[i].is_some_and(|r| r < ratio) {
                i += 1;
                continue;
            }
            let start = i;
            while i < rs.len() && rs[i].is_some_and(|r| r < ratio) {
                i += 1;
            }
            if i - start >= MIN_RUN {
                let (from, to) = (intervals[start].from_ns, intervals[i - 1].to_ns);
                let mean = rs[start..i].iter().flatten().sum::<f64>() / (i - start) as f64;
                found.push(Straggler {
                    host: m.to_string(),
                    from_ns: from,
                    from: rfc(from),
                    to_ns: to,
                    to: rfc(to),
                    intervals: i - start,
                    ratio_to_median: mean,
                    query: input.export(from, to, Filter::host(Direction::Src, *m)),
                });
            }
        }
    }
    found.sort_by(|a, b| a.from_ns.cmp(&b.from_ns).then(a.host.cmp(&b.host)));
    Ok(Stragglers {
        group: group.to_string(),
        interval_ns,
        ratio,
        min_bytes,
        members: members.iter().map(|m| m.to_string()).collect(),
        intervals,
        stragglers: found,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{flow, input, Groups};

    const S: u64 = 1_000_000_000;

    /// Members 10.0.0.1..=n of group "g", each sending `bytes(member, second)` in seconds
    /// 0..secs to 10.9.9.9.
    fn group_input(n: u8, secs: u64, bytes: impl Fn(u8, u64) -> u64) -> Input {
        let flows = (1..=n)
            .map(|m| {
                let per: Vec<(u64, u64)> = (0..secs).map(|s| (s, bytes(m, s))).collect();
                flow([10, 0, 0, m], [10, 9, 9, 9], &per)
            })
            .collect();
        input(flows, 0, secs * S)
    }

    fn run(i: &Input, ratio: f64) -> Stragglers {
        stragglers(i, &Groups, "g", S, ratio, 1000).unwrap()
    }

    #[test]
    fn a_run_of_three_intervals_under_the_ratio_is_a_straggler() {
        // Member 2 sends a third from second 3 to 5 (three intervals), member 3 a third in
        // seconds 1 and 7 only (no run).
        let i = group_input(5, 10, |m, s| match (m, s) {
            (2, 3..=5) | (3, 1) | (3, 7) => 10_000,
            _ => 30_000,
        });
        let s = run(&i, 0.5);
        assert_eq!(s.stragglers.len(), 1, "{:?}", s.stragglers);
        let x = &s.stragglers[0];
        assert_eq!(x.host, "10.0.0.2");
        assert_eq!((x.from_ns, x.to_ns, x.intervals), (3 * S, 6 * S, 3));
        assert!((x.ratio_to_median - 1.0 / 3.0).abs() < 1e-9);
        assert!(x.query.filter.to_string().contains("src host 10.0.0.2"));
        assert_eq!(s.intervals[3].median_bytes, 30_000);
    }

    #[test]
    fn idle_intervals_and_small_groups_flag_nothing() {
        // Idle: the median member sends under min_bytes (1000), member 1 nothing at all.
        let idle = group_input(5, 6, |m, _| if m == 1 { 0 } else { 900 });
        let s = run(&idle, 0.5);
        assert!(s.stragglers.is_empty());
        assert!(s.intervals.iter().all(|i| !i.judged));
        // Two active members: no baseline, even with one sending nothing.
        let small = group_input(3, 6, |m, _| if m == 1 { 0 } else { 50_000 });
        let s = run(&small, 0.5);
        assert!(s.stragglers.is_empty());
        assert!(s
            .intervals
            .iter()
            .all(|i| i.active_members == 2 && !i.judged));
        // Four members, one silent: it is the straggler (a silent member counts as 0).
        let dead = group_input(4, 6, |m, _| if m == 1 { 0 } else { 50_000 });
        let s = run(&dead, 0.5);
        assert_eq!(s.stragglers.len(), 1);
        assert_eq!(s.stragglers[0].intervals, 6);
        assert_eq!(s.stragglers[0].ratio_to_median, 0.0);
        // An idle interval in the middle ends the run: 2 + 2 intervals are no run of 3.
        let gap = group_input(4, 5, |m, s| match (m, s) {
            (_, 2) => 10,
            (1, _) => 5_000,
            _ => 50_000,
        });
        assert!(run(&gap, 0.5).stragglers.is_empty());
    }

    #[test]
    fn an_unknown_group_or_a_fractional_interval_is_refused() {
        let i = group_input(3, 2, |_, _| 1);
        assert!(matches!(
            stragglers(&i, &Groups, "nope", S, 0.5, 1),
            Err(AnalyticsError::Usage(m)) if m.contains("nope")
        ));
        assert!(stragglers(&i, &Groups, "g", S / 2, 0.5, 1).is_err());
    }
}
