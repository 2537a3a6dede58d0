//! `capsule bursts`: the millisecond view of a window, from the index's millisecond series
//! (capsule_index::millis) and the window's flows (for who made a burst).
//!
//! ```text
//! every block's series in the window -> merged by (ms, DSCP value): the link's bytes per
//!   ms and each value's
//!   -> peaks: the largest epoch-aligned 1 ms, 10 ms, 100 ms and 1 s window, link and value
//!   -> time above: milliseconds whose rate is above the threshold, link and value
//!   -> bursts: runs of consecutive milliseconds with the link above the threshold, the
//!      largest first, each with its values' bytes and the flows of those values with the
//!      most bytes in its second(s) (flows are counted per second in the index)
//! every block's fan-ins -> merged by (ms, destination): the senders' union
//!   -> incast: a destination with at least N distinct senders within one millisecond
//! ```

use std::collections::BTreeMap;
use std::net::IpAddr;

use capsule_index::millis::SeriesListing;
use serde::Serialize;

use crate::{dscp_name, rfc, AnalyticsError, Input};

/// The resolutions peaks are given at, in milliseconds.
pub const RESOLUTIONS_MS: [u64; 4] = [1, 10, 100, 1000];

/// At most this many incast events are listed (the count says how many there were).
pub const MAX_INCAST: usize = 1000;

/// Flows named per burst.
const BURST_FLOWS: usize = 5;

/// The rate a millisecond must exceed to count: a share of the link's rate, or a rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Above {
    /// Percent of the link's line rate (needs the link's rate).
    Percent(f64),
    /// Bits per second.
    Rate(u64),
}

/// What `bursts` is asked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    pub above: Above,
    /// Distinct senders to one destination within a millisecond that make an incast.
    pub incast: u32,
    /// Bursts listed, the largest first.
    pub limit: usize,
    /// List every millisecond with traffic ([`Bursts::series`]).
    pub series: bool,
}

/// One millisecond of the series, as `--series` lists it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SeriesBin {
    pub start_ns: u64,
    pub start: String,
    pub packets: u64,
    pub bytes: u64,
    /// Per DSCP value (64: non-IP), ascending.
    pub values: Vec<SeriesValue>,
}

/// One DSCP value's traffic within a millisecond.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SeriesValue {
    pub dscp: u8,
    pub packets: u64,
    pub bytes: u64,
}

/// The link's line rate, as the config states it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LinkRate {
    /// The `[links]` interface name.
    pub name: String,
    pub bits_per_second: u64,
}

/// The peak of one resolution.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Peak {
    pub resolution_ms: u64,
    /// Bytes in the busiest window of this length (epoch-aligned).
    pub bytes: u64,
    pub bits_per_second: u64,
    /// The rate as a percentage of the link's, when its rate is known.
    pub link_percent: Option<f64>,
    pub start_ns: u64,
    pub start: String,
}

/// The peaks and time above the threshold of the link, or of one DSCP value.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Scope {
    /// "link", or the DSCP value's name ("ef", "cs5", "0"; "non-IP").
    pub scope: String,
    /// The DSCP value (none for the link; 64 for non-IP packets).
    pub dscp: Option<u8>,
    pub bytes: u64,
    pub packets: u64,
    /// 1 ms, 10 ms, 100 ms, 1 s.
    pub peaks: Vec<Peak>,
    /// Milliseconds whose rate was above the threshold (none when the threshold is
    /// unknown), and the same in ns.
    pub ms_above: Option<u64>,
    pub ns_above: Option<u64>,
}

/// One DSCP value's bytes within a burst.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BurstClass {
    pub dscp: u8,
    pub name: String,
    pub bytes: u64,
}

/// A flow (one direction) of a burst's values, with its bytes in the burst's second(s).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BurstFlow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    pub proto: u8,
    /// Bytes of this direction in the seconds the burst touches (the index counts flows per
    /// second, not per millisecond).
    pub bytes_in_seconds: u64,
}

/// A run of consecutive milliseconds with the link above the threshold.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Burst {
    pub start_ns: u64,
    pub start: String,
    pub duration_ns: u64,
    pub bytes: u64,
    /// The busiest millisecond of the run: its bytes, rate and start.
    pub peak_ms_bytes: u64,
    pub peak_bits_per_second: u64,
    pub peak_link_percent: Option<f64>,
    pub peak_ns: u64,
    pub peak: String,
    /// The burst's bytes per DSCP value, the largest first.
    pub classes: Vec<BurstClass>,
    /// The flows of those values with the most bytes in the burst's second(s).
    pub flows: Vec<BurstFlow>,
}

/// One sender of an incast.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct IncastSender {
    pub addr: IpAddr,
    pub packets: u64,
    pub bytes: u64,
}

/// A destination that at least N distinct senders sent to within one millisecond.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Incast {
    /// The millisecond's start.
    pub start_ns: u64,
    pub start: String,
    pub dst: IpAddr,
    pub senders: Vec<IncastSender>,
    pub packets: u64,
    pub bytes: u64,
}

/// The answer.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Bursts {
    /// The link's line rate (none: not in the config, stated as unknown).
    pub link: Option<LinkRate>,
    /// The threshold as asked ("80%", "5G") and in bits per second (none: a share of a
    /// link whose rate is unknown).
    pub above: String,
    pub threshold_bits_per_second: Option<u64>,
    pub incast_min_senders: u32,
    /// The link, then each DSCP value with traffic, ascending.
    pub scopes: Vec<Scope>,
    /// Bursts in the window (all of them), and the largest `limit` of them.
    pub burst_count: usize,
    pub bursts: Vec<Burst>,
    /// Incast events (all of them), and the first [`MAX_INCAST`] in time order.
    pub incast_count: usize,
    pub incast: Vec<Incast>,
    /// Segments whose index predates the series: their traffic is missing here until
    /// `capsule reindex` rebuilds them.
    pub no_series_segments: Vec<u64>,
    /// Notes on what the answer can and cannot say.
    pub notes: Vec<String>,
    /// With `--series`: every millisecond of the window with traffic, in time order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<Vec<SeriesBin>>,
}

/// Per millisecond: the link's (packets, bytes) and each value's bytes.
pub(crate) struct Merged {
    /// Ascending by ms.
    pub(crate) link: Vec<(u64, u64, u64)>,
    /// Per value: ascending (ms, packets, bytes).
    pub(crate) values: BTreeMap<u8, Vec<(u64, u64, u64)>>,
}

pub(crate) fn merge(listing: &SeriesListing) -> Merged {
    let mut all: Vec<(u64, u8, u64, u64)> = listing
        .blocks
        .iter()
        .flat_map(|s| {
            s.bins.iter().flat_map(|b| {
                b.classes
                    .iter()
                    .map(move |c| (b.ms, c.dscp, c.packets, c.bytes))
            })
        })
        .collect();
    all.sort_unstable_by_key(|e| (e.0, e.1));
    let mut link: Vec<(u64, u64, u64)> = Vec::new();
    let mut values: BTreeMap<u8, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for (ms, dscp, p, b) in all {
        match link.last_mut() {
            Some(l) if l.0 == ms => {
                l.1 += p;
                l.2 += b;
            }
            _ => link.push((ms, p, b)),
        }
        let v = values.entry(dscp).or_default();
        match v.last_mut() {
            Some(l) if l.0 == ms => {
                l.1 += p;
                l.2 += b;
            }
            _ => v.push((ms, p, b)),
        }
    }
    Merged { link, values }
}

/// Bits per second of `bytes` over `ms` milliseconds.
pub(crate) fn bps(bytes: u64, ms: u64) -> u64 {
    (u128::from(bytes) * 8 * 1000 / u128::from(ms.max(1))) as u64
}

fn percent(bps: u64, link: Option<u64>) -> Option<f64> {
    link.map(|l| (bps as f64 * 10000.0 / l as f64).round() / 100.0)
}

fn scope(
    name: String,
    dscp: Option<u8>,
    series: &[(u64, u64, u64)],
    threshold: Option<u64>,
    link: Option<u64>,
) -> Scope {
    let peaks = RESOLUTIONS_MS
        .iter()
        .map(|&res| {
            let (mut best, mut best_at) = (0u64, 0u64);
            let mut i = 0;
            while i < series.len() {
                let w = series[i].0 / res;
                let mut sum = 0;
                while i < series.len() && series[i].0 / res == w {
                    sum += series[i].2;
                    i += 1;
                }
                if sum > best {
                    (best, best_at) = (sum, w * res);
                }
            }
            let rate = bps(best, res);
            Peak {
                resolution_ms: res,
                bytes: best,
                bits_per_second: rate,
                link_percent: percent(rate, link),
                start_ns: best_at * 1_000_000,
                start: rfc(best_at * 1_000_000),
            }
        })
        .collect();
    let ms_above = threshold.map(|t| series.iter().filter(|e| bps(e.2, 1) > t).count() as u64);
    Scope {
        scope: name,
        dscp,
        bytes: series.iter().map(|e| e.2).sum(),
        packets: series.iter().map(|e| e.1).sum(),
        peaks,
        ms_above,
        ns_above: ms_above.map(|m| m * 1_000_000),
    }
}

/// A value's display name: its DSCP name, or "non-IP" for the pseudo value 64.
pub(crate) fn value_name(v: u8) -> String {
    if v == capsule_index::sideindex::series::NON_IP {
        "non-IP".to_string()
    } else {
        dscp_name(v)
    }
}

/// Answers `ask` over the window's series and flows (`link`: the link's rate if known).
pub fn bursts(
    input: &Input,
    listing: &SeriesListing,
    link: Option<LinkRate>,
    ask: Ask,
) -> Result<Bursts, AnalyticsError> {
    use capsule_index::sideindex::series::FANIN_KEEP;
    if (ask.incast as usize) < FANIN_KEEP {
        return Err(AnalyticsError::Usage(format!(
            "--incast {}: the index keeps the senders of destinations with {FANIN_KEEP} or \
             more senders within a millisecond; ask for {FANIN_KEEP} or more",
            ask.incast
        )));
    }
    let link_bps = link.as_ref().map(|l| l.bits_per_second);
    let (above, threshold) = match ask.above {
        Above::Percent(p) => (
            format!("{p}%"),
            link_bps.map(|l| (l as f64 * p / 100.0).round() as u64),
        ),
        Above::Rate(r) => (capsule_config::rate_text(r), Some(r)),
    };
    let mut notes = Vec::new();
    if link.is_none() {
        notes.push(
            "the link's rate is unknown (no [links] entry in the config for this store's \
             interface): rates are not given as a share of it"
                .to_string(),
        );
    }
    if threshold.is_none() {
        notes.push(format!(
            "--above {above} is a share of a link whose rate is unknown: no time above, no \
             bursts (give a rate, --above 5G, or the link's rate in [links])"
        ));
    }
    let m = merge(listing);
    let series = ask.series.then(|| series_of(&m));
    let mut scopes = vec![scope("link".into(), None, &m.link, threshold, link_bps)];
    for (&v, s) in &m.values {
        scopes.push(scope(value_name(v), Some(v), s, threshold, link_bps));
    }

    // Bursts: runs of consecutive milliseconds with the link above the threshold.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    if let Some(t) = threshold {
        let mut i = 0;
        while i < m.link.len() {
            if bps(m.link[i].2, 1) > t {
                let start = i;
                while i + 1 < m.link.len()
                    && m.link[i + 1].0 == m.link[i].0 + 1
                    && bps(m.link[i + 1].2, 1) > t
                {
                    i += 1;
                }
                runs.push((start, i));
            }
            i += 1;
        }
    }
    let burst_count = runs.len();
    let bytes_of = |&(a, b): &(usize, usize)| m.link[a..=b].iter().map(|e| e.2).sum::<u64>();
    runs.sort_by_key(|r| std::cmp::Reverse(bytes_of(r)));
    runs.truncate(ask.limit);
    let bursts = runs
        .iter()
        .map(|r| burst(input, &m, *r, link_bps))
        .collect();

    let fanin = fanin_union(&listing.blocks);
    let mut incast_count = 0;
    let mut incast = Vec::new();
    for ((ms, dst), senders) in fanin {
        if senders.len() < ask.incast as usize {
            continue;
        }
        incast_count += 1;
        if incast.len() == MAX_INCAST {
            continue;
        }
        let senders: Vec<IncastSender> = senders
            .into_iter()
            .map(|(addr, (packets, bytes))| IncastSender {
                addr,
                packets,
                bytes,
            })
            .collect();
        incast.push(Incast {
            start_ns: ms * 1_000_000,
            start: rfc(ms * 1_000_000),
            dst,
            packets: senders.iter().map(|s| s.packets).sum(),
            bytes: senders.iter().map(|s| s.bytes).sum(),
            senders,
        });
    }
    if incast_count > MAX_INCAST {
        notes.push(format!(
            "{incast_count} incast events; the first {MAX_INCAST} are listed"
        ));
    }
    Ok(Bursts {
        link,
        above,
        threshold_bits_per_second: threshold,
        incast_min_senders: ask.incast,
        scopes,
        burst_count,
        bursts,
        incast_count,
        incast,
        no_series_segments: listing.no_series.clone(),
        notes,
        series,
    })
}

/// Each (ms, destination)'s senders, (packets, bytes) each: the union over every block
/// (blocks of different lanes share milliseconds).
pub type FaninUnion = BTreeMap<(u64, IpAddr), BTreeMap<IpAddr, (u64, u64)>>;

/// The union of `blocks`' fan-ins (what incast is found in; the fleet publishes a
/// segment's so).
pub fn fanin_union(blocks: &[capsule_index::sideindex::series::BlockSeries]) -> FaninUnion {
    let mut fanin = FaninUnion::new();
    for s in blocks {
        for f in &s.fanin {
            let e = fanin.entry((f.ms, f.dst)).or_default();
            for x in &f.senders {
                let c = e.entry(x.addr).or_default();
                c.0 += x.packets;
                c.1 += x.bytes;
            }
        }
    }
    fanin
}

/// Bytes per DSCP value (64: non-IP) in each millisecond of `[from_ms, to_ms)`, zero where
/// there was none: what a chart zooms into a burst with. Values with no bytes are left out.
pub fn ms_by_value(listing: &SeriesListing, from_ms: u64, to_ms: u64) -> Vec<(u8, Vec<u64>)> {
    let n = to_ms.saturating_sub(from_ms) as usize;
    let mut out: BTreeMap<u8, Vec<u64>> = BTreeMap::new();
    for s in &listing.blocks {
        for b in s.bins.iter().filter(|b| b.ms >= from_ms && b.ms < to_ms) {
            for c in &b.classes {
                out.entry(c.dscp).or_insert_with(|| vec![0; n])[(b.ms - from_ms) as usize] +=
                    c.bytes;
            }
        }
    }
    out.into_iter().collect()
}

/// Every millisecond of `m`, with its values.
fn series_of(m: &Merged) -> Vec<SeriesBin> {
    let mut out: Vec<SeriesBin> = m
        .link
        .iter()
        .map(|&(ms, packets, bytes)| SeriesBin {
            start_ns: ms * 1_000_000,
            start: rfc(ms * 1_000_000),
            packets,
            bytes,
            values: Vec::new(),
        })
        .collect();
    for (&dscp, s) in &m.values {
        for &(ms, packets, bytes) in s {
            if let Ok(i) = m.link.binary_search_by_key(&ms, |e| e.0) {
                out[i].values.push(SeriesValue {
                    dscp,
                    packets,
                    bytes,
                });
            }
        }
    }
    out
}

/// The burst of link milliseconds `a..=b`.
fn burst(input: &Input, m: &Merged, (a, b): (usize, usize), link: Option<u64>) -> Burst {
    let run = &m.link[a..=b];
    let (first, last) = (run[0].0, run[run.len() - 1].0);
    let peak = run
        .iter()
        .max_by_key(|e| (e.2, std::cmp::Reverse(e.0)))
        .copied();
    let (peak_ms, _, peak_bytes) = peak.unwrap_or_default();
    let mut classes: Vec<BurstClass> = m
        .values
        .iter()
        .map(|(&v, s)| {
            let lo = s.partition_point(|e| e.0 < first);
            let hi = s.partition_point(|e| e.0 <= last);
            BurstClass {
                dscp: v,
                name: value_name(v),
                bytes: s[lo..hi].iter().map(|e| e.2).sum(),
            }
        })
        .filter(|c| c.bytes > 0)
        .collect();
    classes.sort_by_key(|c| (std::cmp::Reverse(c.bytes), c.dscp));
    // The flows of the burst's values with bytes in its second(s).
    let mask = classes
        .iter()
        .filter(|c| c.dscp < 64)
        .fold(0u64, |m, c| m | 1 << c.dscp);
    let (s0, s1) = (first / 1000, last / 1000);
    let mut flows: Vec<BurstFlow> = Vec::new();
    for f in &input.flows {
        let t = &f.flow.totals;
        for d in 0..2 {
            if t.dscp[d] & mask == 0 {
                continue;
            }
            let bytes: u64 = f
                .flow
                .buckets
                .iter()
                .filter(|k| k.second >= s0 && k.second <= s1)
                .map(|k| k.bytes[d])
                .sum();
            if bytes == 0 {
                continue;
            }
            let (src, dst, ports) = f.flow.key.side(d);
            flows.push(BurstFlow {
                src,
                dst,
                src_port: ports.map(|p| p.0),
                dst_port: ports.map(|p| p.1),
                proto: f.flow.key.proto,
                bytes_in_seconds: bytes,
            });
        }
    }
    // Ties in bytes by the flow itself: the same list whatever order the flows came in (a
    // store's segments, or the fleet's nodes).
    flows.sort_by_key(|f| {
        (
            std::cmp::Reverse(f.bytes_in_seconds),
            f.src,
            f.dst,
            f.src_port,
            f.dst_port,
            f.proto,
        )
    });
    flows.truncate(BURST_FLOWS);
    let rate = bps(peak_bytes, 1);
    Burst {
        start_ns: first * 1_000_000,
        start: rfc(first * 1_000_000),
        duration_ns: (last - first + 1) * 1_000_000,
        bytes: run.iter().map(|e| e.2).sum(),
        peak_ms_bytes: peak_bytes,
        peak_bits_per_second: rate,
        peak_link_percent: percent(rate, link),
        peak_ns: peak_ms * 1_000_000,
        peak: rfc(peak_ms * 1_000_000),
        classes,
        flows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_index::sideindex::series::{BlockSeries, ClassCount, Fanin, MsBin, Sender};

    fn input() -> Input {
        Input {
            flows: Vec::new(),
            from_ns: 0,
            to_ns: 10_000_000_000,
            filter: String::new(),
            within: capsule_query::Filter::default(),
            store: "s".into(),
            limits: crate::Limits::default(),
            dns: Default::default(),
        }
    }

    fn bin(ms: u64, dscp: u8, bytes: u64) -> MsBin {
        MsBin {
            ms,
            classes: vec![ClassCount {
                dscp,
                packets: 1,
                bytes,
            }],
        }
    }

    #[test]
    fn peaks_time_above_bursts_and_incast_from_the_series() {
        // Link 10G: 1 ms at line rate is 1,250,000 bytes. Lane 0 (value 0) hums at 1 kB a
        // ms; lane 46 bursts for 2 ms at 1.25 MB, and a block of each lane shares ms 5001.
        let mut zero = BlockSeries::default();
        for ms in 5000..5010 {
            zero.bins.push(bin(ms, 0, 1000));
        }
        let mut ef = BlockSeries {
            bins: vec![bin(5001, 46, 1_250_000), bin(5002, 46, 1_250_000)],
            ..BlockSeries::default()
        };
        ef.fanin.push(Fanin {
            ms: 5007,
            dst: IpAddr::from([10, 0, 0, 9]),
            senders: (1..=3)
                .map(|s| Sender {
                    addr: IpAddr::from([10, 0, 1, s]),
                    packets: 1,
                    bytes: 100,
                })
                .collect(),
        });
        // The same destination's other senders, in another lane's block: 3 + 2 = 5.
        zero.fanin.push(Fanin {
            ms: 5007,
            dst: IpAddr::from([10, 0, 0, 9]),
            senders: (3..=4)
                .map(|s| Sender {
                    addr: IpAddr::from([10, 0, 1, s]),
                    packets: 1,
                    bytes: 100,
                })
                .collect(),
        });
        let listing = SeriesListing {
            blocks: vec![zero, ef],
            ..SeriesListing::default()
        };
        let link = Some(LinkRate {
            name: "span0".into(),
            bits_per_second: 10_000_000_000,
        });
        let ask = Ask {
            above: Above::Percent(80.0),
            incast: 4,
            limit: 10,
            series: true,
        };
        let b = bursts(&input(), &listing, link.clone(), ask).unwrap();
        assert_eq!(b.threshold_bits_per_second, Some(8_000_000_000));
        let l = &b.scopes[0];
        assert_eq!(l.scope, "link");
        assert_eq!(l.peaks[0].bytes, 1_251_000);
        assert_eq!(l.peaks[0].start_ns, 5_001_000_000);
        assert_eq!(l.peaks[1].bytes, 2_510_000);
        assert_eq!(l.ms_above, Some(2));
        let ef = b.scopes.iter().find(|s| s.dscp == Some(46)).unwrap();
        assert_eq!(ef.scope, "ef");
        assert_eq!(ef.ms_above, Some(2));
        // At 1 s the burst is 25% of a second at line rate... of 2.5 MB: 20 Mbit/s.
        assert_eq!(ef.peaks[3].bits_per_second, 20_000_000);
        assert_eq!(b.burst_count, 1);
        let x = &b.bursts[0];
        assert_eq!((x.start_ns, x.duration_ns), (5_001_000_000, 2_000_000));
        assert_eq!(x.peak_ms_bytes, 1_251_000);
        assert_eq!(x.classes[0].name, "ef");
        assert_eq!(x.classes[0].bytes, 2_500_000);
        assert_eq!(b.incast_count, 1);
        assert_eq!(b.incast[0].senders.len(), 4);
        assert_eq!(b.incast[0].senders[2].bytes, 200, "sender 3 in both blocks");
        let series = b.series.unwrap();
        assert_eq!(series.len(), 10);
        assert_eq!(series[1].bytes, 1_251_000);
        assert_eq!(series[1].values.len(), 2);
        // Five senders are asked for: none; fewer than the index keeps: refused.
        let five = Ask { incast: 5, ..ask };
        assert_eq!(
            bursts(&input(), &listing, link.clone(), five)
                .unwrap()
                .incast_count,
            0
        );
        let three = Ask { incast: 3, ..ask };
        assert!(bursts(&input(), &listing, link, three).is_err());
        // A share of an unknown rate: peaks, no bursts, said so.
        let b = bursts(&input(), &listing, None, ask).unwrap();
        assert_eq!((b.burst_count, b.scopes[0].ms_above), (0, None));
        assert!(
            b.notes.iter().any(|n| n.contains("unknown")),
            "{:?}",
            b.notes
        );
    }
}
