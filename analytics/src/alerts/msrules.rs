//! The millisecond rules and the group expectations of `[alerts]` / `[expect]`, from the
//! index alone: the millisecond series (capsule_index::millis) for `ef_share`,
//! `microburst`, `incast` and a sub-second `rate_ceiling`; each flow's 1-second buckets
//! for `rate_ceiling` and `active_hours`.
//!
//! ```text
//! series of the window -> bursts::merge: the link's and each DSCP value's bytes per ms
//!   ef_share     runs of ms with EF (46) above ef_share x the link's rate, lasting at
//!                least ef_share_for -> one alert (class ef), the largest run's window
//!   microburst   the same with the link (or microburst_class) above microburst_rate
//!   incast       fan-ins (bursts::fanin_union) with >= incast_senders distinct senders
//!                in one ms -> one alert per destination
//! flows' seconds, per sending group of [expect]
//!   rate_ceiling per = 1s: the group's bytes per second, exact. per < 1s: the index
//!                counts a group's bytes per second, each DSCP value's per ms; in a second
//!                where the group sent G and its flows' values V carried L, a window w of
//!                L_w (V's bytes in w) holds at least G - (L - L_w) of the group's and at
//!                most min(G, L_w): proven
//!                above the ceiling (medium) when the least is above, unproven (low) when
//!                only the most is
//!   active_hours the group's bytes in seconds outside its hours
//! ```
//!
//! Every alert names its group or class, its window (`window_start_ms`, `_ns`, RFC 3339,
//! `window_ms`), the rate and the threshold.

use std::collections::BTreeMap;
use std::net::IpAddr;

use capsule_config::{Config, MsRate};
use capsule_index::millis::SeriesListing;
use capsule_query::Direction::{Dst, Src};
use capsule_query::Filter;
use serde_json::{json, Map, Value};

use super::{alert, clamp, Alert, Entity, Severity};
use crate::bursts::{bps, fanin_union, merge, value_name};
use crate::{dscp_filter, rfc, AnalyticsError, Input};

/// The DSCP value `ef_share` watches.
pub const EF: u8 = 46;

/// Runs listed per alert (the count says how many there were).
const RUNS_LISTED: usize = 20;

/// What the millisecond rules read besides the window's flows.
#[derive(Debug, Clone, Copy)]
pub struct MsInput<'a> {
    /// The window's millisecond series (index only).
    pub listing: &'a SeriesListing,
    /// The link's line rate, bits per second, when `[links]` states it.
    pub link_bps: Option<u64>,
}

/// Whether `config` asks for a rule that reads the millisecond series: `ef_share`,
/// `microburst`, `incast`, or a `rate_ceiling` finer than a second.
pub fn needs_series(config: &Config) -> bool {
    let r = config.alerts();
    (r.ef_share.is_some() && r.enabled("ef_share"))
        || (r.microburst_rate.is_some() && r.enabled("microburst"))
        || (r.incast_senders.is_some() && r.enabled("incast"))
        || (r.enabled("rate_ceiling")
            && config
                .expectations()
                .iter()
                .any(|e| e.max_rate.as_ref().is_some_and(|c| c.per_ms < 1000)))
}

/// The window fields every alert of these rules carries: `[start_ns, end_ns)`.
fn window(start_ns: u64, end_ns: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("window_start_ms".into(), json!(start_ns / 1_000_000));
    m.insert("window_start_ns".into(), json!(start_ns));
    m.insert("window_start".into(), json!(rfc(start_ns)));
    m.insert("window_end_ns".into(), json!(end_ns));
    m.insert("window_end".into(), json!(rfc(end_ns)));
    m.insert(
        "window_ms".into(),
        json!(end_ns.saturating_sub(start_ns) / 1_000_000),
    );
    m
}

fn with(mut m: Map<String, Value>, extra: Value) -> Value {
    if let Value::Object(e) = extra {
        m.extend(e);
    }
    Value::Object(m)
}

/// Runs of consecutive milliseconds of `series` (ascending (ms, packets, bytes)) above
/// `threshold` bits per second, at least `min_ms` long: (first index, last index).
fn runs(series: &[(u64, u64, u64)], threshold: u64, min_ms: u64) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < series.len() {
        if bps(series[i].2, 1) > threshold {
            let start = i;
            while i + 1 < series.len()
                && series[i + 1].0 == series[i].0 + 1
                && bps(series[i + 1].2, 1) > threshold
            {
                i += 1;
            }
            if (i - start + 1) as u64 >= min_ms {
                out.push((start, i));
            }
        }
        i += 1;
    }
    out
}

/// One alert for the runs of `series` above `threshold` (bps) for `min_ms`: the largest
/// run's window, every run listed (the first [`RUNS_LISTED`]).
#[allow(clippy::too_many_arguments)]
fn run_alert(
    input: &Input,
    rule: &'static str,
    scope: &str,
    series: &[(u64, u64, u64)],
    threshold: u64,
    min_ms: u64,
    link: Option<u64>,
    filter: Filter,
    extra: Value,
) -> Option<Alert> {
    let found = runs(series, threshold, min_ms);
    let bytes_of = |&(a, b): &(usize, usize)| series[a..=b].iter().map(|e| e.2).sum::<u64>();
    let worst = *found
        .iter()
        .max_by_key(|r| (bytes_of(r), std::cmp::Reverse(r.0)))?;
    let ms_window =
        |(a, b): (usize, usize)| (series[a].0 * 1_000_000, (series[b].0 + 1) * 1_000_000);
    let (start, end) = ms_window(worst);
    let peak = series[worst.0..=worst.1]
        .iter()
        .map(|e| e.2)
        .max()
        .unwrap_or(0);
    let peak_bps = bps(peak, 1);
    let pct = |b: u64| link.map(|l| (b as f64 * 10000.0 / l as f64).round() / 100.0);
    let listed: Vec<Value> = found
        .iter()
        .take(RUNS_LISTED)
        .map(|&r| {
            let (s, e) = ms_window(r);
            json!({"start_ms": s / 1_000_000, "start_ns": s, "start": rfc(s),
                   "duration_ms": (e - s) / 1_000_000, "bytes": bytes_of(&r)})
        })
        .collect();
    let figures = with(
        window(start, end),
        json!({"scope": scope, "bytes": bytes_of(&worst),
               "peak_ms_bytes": peak, "rate_bits_per_second": peak_bps,
               "rate_link_percent": pct(peak_bps),
               "threshold_bits_per_second": threshold, "threshold_link_percent": pct(threshold),
               "min_duration_ms": min_ms, "runs": found.len(), "listed_runs": listed}),
    );
    let figures = with(
        match figures {
            Value::Object(m) => m,
            _ => Map::new(),
        },
        extra,
    );
    let (first, last) = clamp(input, start, end - 1);
    let rate = capsule_config::rate_text(peak_bps);
    let th = capsule_config::rate_text(threshold);
    Some(alert(
        rule,
        Severity::Medium,
        Entity {
            kind: if scope == "link" { "link" } else { "class" },
            name: scope.to_string(),
            hosts: Vec::new(),
        },
        format!(
            "{scope} at {rate}bit/s for {} ms from {} (above {th}bit/s for {min_ms} ms or \
             more; {} such run{})",
            (end - start) / 1_000_000,
            rfc(start),
            found.len(),
            if found.len() == 1 { "" } else { "s" }
        ),
        first,
        last,
        figures,
        input.export(start, end, filter),
    ))
}

fn need_link(rule: &str, link: Option<u64>, rate: &MsRate) -> Result<u64, AnalyticsError> {
    rate.bps(link).ok_or_else(|| {
        AnalyticsError::Usage(format!(
            "{rule} = {} is a share of the link, whose rate is unknown: give the capture \
             interface's rate in [links] (span0 = \"10G\")",
            rate.text()
        ))
    })
}

/// The millisecond rules (`ef_share`, `microburst`, `incast`), each when its key is set.
pub fn ms_rules(
    input: &Input,
    config: &Config,
    ms: &MsInput<'_>,
    out: &mut Vec<Alert>,
) -> Result<(), AnalyticsError> {
    let rules = config.alerts();
    let ef = rules.ef_share.filter(|_| rules.enabled("ef_share"));
    let micro = rules
        .microburst_rate
        .filter(|_| rules.enabled("microburst"));
    let incast = rules.incast_senders.filter(|_| rules.enabled("incast"));
    if ef.is_none() && micro.is_none() && incast.is_none() {
        return Ok(());
    }
    let m = merge(ms.listing);
    let empty = Vec::new();
    if let Some(share) = ef {
        let rate = MsRate::LinkPercent(share * 100.0);
        let t = need_link("ef_share", ms.link_bps, &rate)?;
        let s = m.values.get(&EF).unwrap_or(&empty);
        let min_ms = rules.ef_share_for_ns / 1_000_000;
        out.extend(run_alert(
            input,
            "ef_share",
            "ef",
            s,
            t,
            min_ms,
            ms.link_bps,
            dscp_filter(EF),
            json!({"dscp": EF, "threshold_share": share}),
        ));
    }
    if let Some(rate) = micro {
        let t = need_link("microburst_rate", ms.link_bps, &rate)?;
        let min_ms = rules.microburst_for_ns / 1_000_000;
        let (scope, s, filter) = match rules.microburst_class {
            Some(v) => (
                value_name(v),
                m.values.get(&v).unwrap_or(&empty),
                dscp_filter(v),
            ),
            None => ("link".to_string(), &m.link, Filter::all()),
        };
        out.extend(run_alert(
            input,
            "microburst",
            &scope,
            s,
            t,
            min_ms,
            ms.link_bps,
            filter,
            json!({"dscp": rules.microburst_class}),
        ));
    }
    if let Some(n) = incast {
        // Per destination: its events (ms), the largest one's senders.
        // A millisecond and its senders' (packets, bytes).
        type Event = (u64, BTreeMap<IpAddr, (u64, u64)>);
        let mut by_dst: BTreeMap<IpAddr, Vec<Event>> = BTreeMap::new();
        for ((ms_at, dst), senders) in fanin_union(&ms.listing.blocks) {
            if senders.len() >= n as usize {
                by_dst.entry(dst).or_default().push((ms_at, senders));
            }
        }
        for (dst, events) in by_dst {
            let Some((at, senders)) = events
                .iter()
                .max_by_key(|(at, s)| (s.len(), std::cmp::Reverse(*at)))
            else {
                continue;
            };
            let start = at * 1_000_000;
            let bytes: u64 = senders.values().map(|c| c.1).sum();
            let packets: u64 = senders.values().map(|c| c.0).sum();
            let list: Vec<Value> = senders
                .iter()
                .map(|(a, (p, b))| json!({"addr": a, "packets": p, "bytes": b}))
                .collect();
            let mut hosts = vec![dst.to_string()];
            hosts.extend(senders.keys().map(IpAddr::to_string));
            let events_ms: Vec<u64> = events.iter().map(|e| e.0).take(RUNS_LISTED).collect();
            let (first, last) = clamp(input, start, start + 999_999);
            let filter = Filter::host(Dst, dst);
            out.push(alert(
                "incast",
                Severity::Medium,
                Entity {
                    kind: "host",
                    name: dst.to_string(),
                    hosts,
                },
                format!(
                    "{} senders sent to {dst} within 1 ms from {} ({bytes} bytes; {n} or more \
                     make an incast; {} such millisecond{})",
                    senders.len(),
                    rfc(start),
                    events.len(),
                    if events.len() == 1 { "" } else { "s" }
                ),
                first,
                last,
                with(
                    window(start, start + 1_000_000),
                    json!({"dst": dst, "senders": senders.len(), "sender_list": list,
                           "bytes": bytes, "packets": packets,
                           "rate_bits_per_second": bps(bytes, 1),
                           "threshold_senders": n, "events": events.len(),
                           "event_ms": events_ms}),
                ),
                input.export(start, start + 1_000_000, filter),
            ));
        }
    }
    Ok(())
}

/// The filter of a group's packets as sent: its prefixes as sources.
fn group_filter(config: &Config, name: &str) -> Filter {
    let groups = config.groups();
    groups
        .by_name(name)
        .and_then(|id| groups.get(id))
        .map(|g| {
            g.prefixes
                .iter()
                .filter_map(|p| Filter::net(Src, p.addr(), p.len()).ok())
                .reduce(Filter::or)
                .unwrap_or_else(|| Filter::all().not())
        })
        .unwrap_or_else(|| Filter::all().not())
}

/// `rate_ceiling` and `active_hours` for each `[expect.GROUP]` entry.
pub fn expectation_rules(
    input: &Input,
    config: &Config,
    ms: Option<&MsInput<'_>>,
    out: &mut Vec<Alert>,
) {
    let rules = config.alerts();
    let groups = config.groups();
    let expect = config.expectations();
    if expect.is_empty() {
        return;
    }
    // Per expected group: bytes, packets and the DSCP values (a mask of the flows' values)
    // sent per second, and bytes per sender.
    type PerGroup = (BTreeMap<u64, (u64, u64, u64)>, BTreeMap<IpAddr, u64>);
    let mut sent: BTreeMap<usize, PerGroup> = BTreeMap::new();
    for s in &input.flows {
        let f = &s.flow;
        for d in 0..2 {
            let (src, _, _) = f.key.side(d);
            let Some(g) = groups.group_of(src) else {
                continue;
            };
            let Some(e) = expect.iter().position(|e| e.group == g) else {
                continue;
            };
            let entry = sent.entry(e).or_default();
            for b in f.buckets.iter().filter(|b| b.bytes[d] > 0) {
                let c = entry.0.entry(b.second).or_default();
                c.0 += b.bytes[d];
                c.1 += u64::from(b.packets[d]);
                c.2 |= f.totals.dscp[d];
                *entry.1.entry(src).or_default() += b.bytes[d];
            }
        }
    }
    let merged = ms.map(|m| merge(m.listing));
    for (i, e) in expect.iter().enumerate() {
        let Some((secs, senders)) = sent.get(&i) else {
            continue;
        };
        let name = e.group_name.as_str();
        let mut top: Vec<(&IpAddr, &u64)> = senders.iter().collect();
        top.sort_by_key(|(a, b)| (std::cmp::Reverse(**b), **a));
        let hosts: Vec<String> = top.iter().take(10).map(|(a, _)| a.to_string()).collect();
        let entity = || Entity {
            kind: "group",
            name: name.to_string(),
            hosts: hosts.clone(),
        };
        if let (Some(c), true) = (&e.max_rate, rules.enabled("rate_ceiling")) {
            let cap = c.bytes_per_window();
            let th = capsule_config::rate_text(c.bits_per_second);
            // (window start ms, least bytes, most bytes) of each window above.
            let mut proven: Vec<(u64, u64, u64)> = Vec::new();
            let mut unproven: Vec<(u64, u64, u64)> = Vec::new();
            let mut undecidable = 0u64;
            for (&sec, &(g, _, mask)) in secs {
                if g <= cap {
                    continue;
                }
                if c.per_ms == 1000 {
                    proven.push((sec * 1000, g, g));
                    continue;
                }
                let Some(m) = merged.as_ref() else {
                    undecidable += 1;
                    continue;
                };
                // The group's packets are among those of its flows' DSCP values: the
                // series of those values bounds it tighter than the link's.
                let mut w: BTreeMap<u64, u64> = BTreeMap::new();
                let mut l_s = 0u64;
                for (_, series) in m
                    .values
                    .iter()
                    .filter(|(v, _)| **v < 64 && mask >> **v & 1 == 1)
                {
                    let lo = series.partition_point(|x| x.0 < sec * 1000);
                    let hi = series.partition_point(|x| x.0 < (sec + 1) * 1000);
                    for x in &series[lo..hi] {
                        *w.entry(x.0 / c.per_ms * c.per_ms).or_default() += x.2;
                        l_s += x.2;
                    }
                }
                for (wms, l_w) in w {
                    let least = g.saturating_sub(l_s.saturating_sub(l_w));
                    let most = g.min(l_w);
                    if least > cap {
                        proven.push((wms, least, most));
                    } else if most > cap {
                        unproven.push((wms, least, most));
                    }
                }
            }
            for (list, sev, exact) in [
                (proven, Severity::Medium, true),
                (unproven, Severity::Low, false),
            ] {
                let Some(&(wms, least, most)) = list
                    .iter()
                    .max_by_key(|x| (x.1, x.2, std::cmp::Reverse(x.0)))
                else {
                    continue;
                };
                let start = wms * 1_000_000;
                let end = start + c.per_ms * 1_000_000;
                let rate = bps(if exact { least } else { most }, c.per_ms);
                let summary = if exact {
                    format!(
                        "group {name} sent {}{}bit/s over {} ms from {} (its ceiling: {th}bit/s \
                         per {} ms; {} window{} above)",
                        if least == most { "" } else { "at least " },
                        capsule_config::rate_text(rate),
                        c.per_ms,
                        rfc(start),
                        c.per_ms,
                        list.len(),
                        if list.len() == 1 { "" } else { "s" }
                    )
                } else {
                    format!(
                        "group {name} may have sent up to {}bit/s over {} ms from {} (its \
                         ceiling: {th}bit/s per {} ms); the index counts a group's bytes per \
                         second, and other traffic shares that second: not proven ({} such \
                         window{})",
                        capsule_config::rate_text(rate),
                        c.per_ms,
                        rfc(start),
                        c.per_ms,
                        list.len(),
                        if list.len() == 1 { "" } else { "s" }
                    )
                };
                let mut ent = entity();
                if !exact {
                    ent.name = format!("{name} (unproven)");
                }
                let (first, last) = clamp(input, start, end - 1);
                out.push(alert(
                    "rate_ceiling",
                    sev,
                    ent,
                    summary,
                    first,
                    last,
                    with(
                        window(start, end),
                        json!({"group": name, "proven": exact, "bytes": least,
                               "bytes_at_most": most,
                               "rate_bits_per_second": rate,
                               "threshold_bits_per_second": c.bits_per_second,
                               "threshold_bytes_per_window": cap, "per_ms": c.per_ms,
                               "windows": list.len()}),
                    ),
                    input.export(start, end, group_filter(config, name)),
                ));
            }
            if undecidable > 0 {
                // Without the series only a 1 s ceiling is decided; said in the summary of
                // a low alert so the answer never reads as "within the ceiling".
                let (first, last) = (input.from_ns, input.to_ns.saturating_sub(1));
                out.push(alert(
                    "rate_ceiling",
                    Severity::Low,
                    Entity {
                        name: format!("{name} (undecided)"),
                        ..entity()
                    },
                    format!(
                        "group {name} sent more than its {th}bit/s ceiling's {cap} bytes in \
                         {undecidable} second(s); without the millisecond series its {} ms \
                         windows cannot be told",
                        c.per_ms
                    ),
                    first,
                    last,
                    with(
                        window(first, last + 1),
                        json!({"group": name, "proven": false, "seconds": undecidable,
                               "threshold_bits_per_second": c.bits_per_second,
                               "per_ms": c.per_ms}),
                    ),
                    input.export(first, last + 1, group_filter(config, name)),
                ));
            }
        }
        if let (Some(h), true) = (&e.hours, rules.enabled("active_hours")) {
            let outside: Vec<(u64, u64, u64)> = secs
                .iter()
                .filter(|(s, _)| !h.contains(**s * 1_000_000_000))
                .map(|(s, (b, p, _))| (*s, *b, *p))
                .collect();
            let bytes: u64 = outside.iter().map(|x| x.1).sum();
            let packets: u64 = outside.iter().map(|x| x.2).sum();
            if outside.is_empty() || bytes < rules.active_hours_bytes.max(1) {
                continue;
            }
            let start = outside[0].0 * 1_000_000_000;
            let end = (outside[outside.len() - 1].0 + 1) * 1_000_000_000;
            let (first, last) = clamp(input, start, end - 1);
            let span_s = (end - start) / 1_000_000_000;
            let rate = (u128::from(bytes) * 8 / u128::from(span_s.max(1))) as u64;
            out.push(alert(
                "active_hours",
                Severity::Medium,
                entity(),
                format!(
                    "group {name} sent {bytes} bytes in {} second(s) outside its hours ({}), \
                     from {} to {}",
                    outside.len(),
                    h.describe(),
                    rfc(start),
                    rfc(end)
                ),
                first,
                last,
                with(
                    window(start, end),
                    json!({"group": name, "hours": h.describe(), "bytes": bytes,
                           "packets": packets, "seconds": outside.len(),
                           "rate_bits_per_second": rate,
                           "threshold_bytes": rules.active_hours_bytes}),
                ),
                input.export(start, end, group_filter(config, name)),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_need_every_millisecond_above_and_the_stated_length() {
        // 1 ms at 10G is 1,250,000 bytes; the threshold is 5G (625,000 bytes a ms).
        let s = [
            (10, 1, 700_000),
            (11, 1, 700_000),
            (12, 1, 600_000), // below: ends the run
            (13, 1, 900_000),
            (15, 1, 900_000), // a gap: its own run
            (16, 1, 900_000),
            (17, 1, 900_000),
        ];
        assert_eq!(runs(&s, 5_000_000_000, 1), vec![(0, 1), (3, 3), (4, 6)]);
        assert_eq!(runs(&s, 5_000_000_000, 2), vec![(0, 1), (4, 6)]);
        assert_eq!(runs(&s, 5_000_000_000, 3), vec![(4, 6)]);
        assert!(runs(&s, 8_000_000_000, 1).is_empty());
        let w = window(5_001_000_000, 5_003_000_000);
        assert_eq!(w["window_start_ms"], 5001);
        assert_eq!(w["window_ms"], 2);
        assert_eq!(w["window_start"], "1970-01-01T00:00:05.001000000Z");
    }
}
