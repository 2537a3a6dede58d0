//! Bytes and packets over time, stacked by DSCP value: the web console's timeline. In bins
//! of a "round" width chosen so that a window has at most a given number of them, from a
//! whole store of months down to bins of one millisecond.
//!
//! Two sources, both the side index alone:
//! * [`from_series`]: the index's millisecond series (`capsule bursts`), every packet under
//!   its own DSCP value, bins down to 1 ms. It is the whole link's (it has no hosts), so it
//!   answers only a window without a filter. One pass over the series, folded as it is
//!   read into counts per millisecond, second, minute and hour, each level dropped as soon
//!   as the span read shows its bins can no longer be needed: memory stays bounded by the
//!   bins a window can be drawn with, however long the store.
//! * [`from_flows`]: the window's flows (any filter) and their 1-second buckets, each
//!   direction under the value that carried most of its bytes; bins of whole seconds.

use std::collections::HashMap;

use capsule_index::flows::FlowSummary;
use capsule_index::millis::SeriesListing;
use capsule_store::Store;

/// The bin widths a timeline is drawn with (ns), finest first; past the last, whole
/// multiples of it.
pub const STEPS_NS: [u64; 29] = {
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;
    [
        MS,
        2 * MS,
        5 * MS,
        10 * MS,
        20 * MS,
        50 * MS,
        100 * MS,
        200 * MS,
        500 * MS,
        S,
        2 * S,
        5 * S,
        10 * S,
        15 * S,
        30 * S,
        60 * S,
        120 * S,
        300 * S,
        600 * S,
        900 * S,
        1800 * S,
        3600 * S,
        7200 * S,
        3 * 3600 * S,
        6 * 3600 * S,
        12 * 3600 * S,
        86_400 * S,
        2 * 86_400 * S,
        7 * 86_400 * S,
    ]
};

/// The finest bin width of at least `min_ns` that draws `span_ns` in at most `max_bins`
/// bins.
pub fn step_for(span_ns: u64, max_bins: u64, min_ns: u64) -> u64 {
    let max_bins = max_bins.max(1);
    let fits = |step: u64| span_ns.div_ceil(step) <= max_bins;
    if let Some(&s) = STEPS_NS.iter().find(|&&s| s >= min_ns && fits(s)) {
        return s;
    }
    let last = STEPS_NS[STEPS_NS.len() - 1];
    let k = span_ns.div_ceil(max_bins).div_ceil(last).max(1);
    (k * last).max(min_ns)
}

/// One DSCP value's bins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueBins {
    /// 0..=63, or 64 for packets that are not IP.
    pub dscp: u8,
    pub bytes: Vec<u64>,
    pub packets: Vec<u64>,
}

/// Bytes and packets per bin and DSCP value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The first bin's start and every bin's width (ns).
    pub start_ns: u64,
    pub step_ns: u64,
    pub bins: usize,
    /// Most bytes first (then by value).
    pub values: Vec<ValueBins>,
    /// The window asked for, or the traffic's span without one.
    pub from_ns: u64,
    pub to_ns: u64,
}

impl Timeline {
    /// Empty bins of `step_ns` covering [from, to), the first starting at `from` rounded
    /// down to a multiple of the width.
    fn new(from_ns: u64, to_ns: u64, step_ns: u64) -> Timeline {
        let start_ns = from_ns - from_ns % step_ns;
        let bins = to_ns
            .max(from_ns + 1)
            .saturating_sub(start_ns)
            .div_ceil(step_ns) as usize;
        Timeline {
            start_ns,
            step_ns,
            bins,
            values: Vec::new(),
            from_ns,
            to_ns,
        }
    }

    /// The instant just past the last bin.
    pub fn end_ns(&self) -> u64 {
        self.start_ns + self.step_ns * self.bins as u64
    }

    /// Counts `packets` and `bytes` of value `dscp` at `at_ns` (outside the bins: nothing).
    fn add(
        &mut self,
        slots: &mut [Option<usize>; 65],
        dscp: u8,
        at_ns: u64,
        packets: u64,
        bytes: u64,
    ) {
        if at_ns < self.start_ns {
            return;
        }
        let i = ((at_ns - self.start_ns) / self.step_ns) as usize;
        if i >= self.bins {
            return;
        }
        let d = usize::from(dscp.min(64));
        let v = *slots[d].get_or_insert_with(|| {
            self.values.push(ValueBins {
                dscp,
                bytes: vec![0; self.bins],
                packets: vec![0; self.bins],
            });
            self.values.len() - 1
        });
        self.values[v].bytes[i] += bytes;
        self.values[v].packets[i] += packets;
    }

    /// Orders the values, most bytes first.
    fn finish(mut self) -> Timeline {
        self.values
            .sort_by_key(|v| (std::cmp::Reverse(v.bytes.iter().sum::<u64>()), v.dscp));
        self
    }

    /// Packets and bytes of bin `i`, over every value.
    pub fn total(&self, i: usize) -> (u64, u64) {
        self.values
            .iter()
            .fold((0, 0), |(p, b), v| (p + v.packets[i], b + v.bytes[i]))
    }
}

/// The DSCP value a direction of a flow carried most bytes with (0 when it carried none).
fn main_dscp(t: &capsule_index::sideindex::FlowTotals, d: usize) -> u8 {
    t.dscp_counts[d]
        .iter()
        .max_by_key(|c| c.bytes)
        .map(|c| c.dscp)
        .unwrap_or_else(|| {
            (0..64u8)
                .find(|v| t.dscp[d] & (1u64 << v) != 0)
                .unwrap_or(0)
        })
}

/// The timeline of `flows` (listed for [from, to) when given, else over their own span) in
/// at most `max_bins` bins of whole seconds: each direction's 1-second buckets counted
/// under the value that carried most of its bytes.
pub fn from_flows(
    flows: &[FlowSummary],
    from_ns: Option<u64>,
    to_ns: Option<u64>,
    max_bins: u64,
) -> Timeline {
    const S: u64 = 1_000_000_000;
    let first = flows.iter().map(|f| f.flow.totals.first_ns).min();
    let last = flows.iter().map(|f| f.flow.totals.last_ns).max();
    let from = from_ns.or(first).unwrap_or(0);
    let to = to_ns
        .or(last.map(|l| l + 1))
        .unwrap_or(from + S)
        .max(from + 1);
    let mut t = Timeline::new(from, to, step_for(to - from, max_bins, S));
    let mut slots = [None; 65];
    for f in flows {
        for d in 0..2 {
            let class = main_dscp(&f.flow.totals, d);
            for b in &f.flow.buckets {
                let at = b.second * S;
                if at + S <= from || at >= to || b.bytes[d] == 0 && b.packets[d] == 0 {
                    continue;
                }
                t.add(&mut slots, class, at, u64::from(b.packets[d]), b.bytes[d]);
            }
        }
    }
    t.finish()
}

/// Counts per (unit, value) of one level of the fold.
type Counts = HashMap<(u64, u8), (u64, u64)>;

/// The fold of a series read in any order: per unit (1 ms, 1 s, 1 min, 1 h) and DSCP value,
/// packets and bytes. A level is kept while the span read is short enough that a timeline
/// could be drawn with bins finer than its next level's unit.
struct Fold {
    levels: Vec<(u64, Option<Counts>)>,
    max_bins: u64,
    seen: Option<(u64, u64)>,
}

impl Fold {
    const UNITS_NS: [u64; 4] = [1_000_000, 1_000_000_000, 60_000_000_000, 3_600_000_000_000];

    /// A fold for a window of `span_ns` when known (levels it cannot need are not kept).
    fn new(max_bins: u64, span_ns: Option<u64>) -> Fold {
        let mut f = Fold {
            levels: Self::UNITS_NS
                .iter()
                .map(|&u| (u, Some(Counts::new())))
                .collect(),
            max_bins,
            seen: None,
        };
        if let Some(s) = span_ns {
            f.drop_levels(s);
        }
        f
    }

    /// Drops the levels a span of `span_ns` is drawn without: a level is needed only when
    /// the span's step is finer than the next level's unit.
    fn drop_levels(&mut self, span_ns: u64) {
        let step = step_for(span_ns, self.max_bins, 1_000_000);
        for k in 0..self.levels.len() - 1 {
            if step >= self.levels[k + 1].0 {
                self.levels[k].1 = None;
            }
        }
    }

    fn add(&mut self, ms: u64, dscp: u8, packets: u64, bytes: u64) {
        let at = ms * 1_000_000;
        let grew = match &mut self.seen {
            None => {
                self.seen = Some((at, at));
                false
            }
            Some((lo, hi)) if at < *lo || at > *hi => {
                *lo = (*lo).min(at);
                *hi = (*hi).max(at);
                true
            }
            Some(_) => false,
        };
        if grew {
            let (lo, hi) = self.seen.expect("set above");
            // Only worth a look once the finest kept level may have become unneeded.
            self.drop_levels(hi - lo + 1_000_000);
        }
        for (unit, counts) in &mut self.levels {
            if let Some(c) = counts {
                let e = c.entry((at / *unit, dscp)).or_default();
                e.0 += packets;
                e.1 += bytes;
            }
        }
    }
}

/// The timeline of the whole link over [from, to) (each when given; else the traffic's
/// span) from the index's millisecond series, in at most `max_bins` bins down to 1 ms, and
/// what the series misses there (segments without a series or an index: their traffic is
/// not in the bins).
pub fn from_series(
    store: &Store,
    from_ns: Option<u64>,
    to_ns: Option<u64>,
    max_bins: u64,
) -> capsule_store::Result<(Timeline, SeriesListing)> {
    let (lo, hi) = (from_ns.unwrap_or(0), to_ns.unwrap_or(u64::MAX));
    let known = match (from_ns, to_ns) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let mut fold = Fold::new(max_bins, known);
    let missing = capsule_index::millis::visit_index_only(store, lo, hi, |s| {
        for b in &s.bins {
            for c in &b.classes {
                fold.add(b.ms, c.dscp, c.packets, c.bytes);
            }
        }
    })?;
    let from = from_ns.or(fold.seen.map(|s| s.0)).unwrap_or(0);
    let to = to_ns
        .or(fold.seen.map(|s| s.1 + 1_000_000))
        .unwrap_or(from + 1_000_000_000)
        .max(from + 1);
    // The finest step the kept levels can draw.
    let finest = fold
        .levels
        .iter()
        .find(|(_, c)| c.is_some())
        .map_or(Fold::UNITS_NS[3], |(u, _)| *u);
    let step = step_for(to - from, max_bins, finest);
    // The coarsest kept level whose unit divides the step (the fewest entries to walk).
    let (unit, counts) = fold
        .levels
        .iter()
        .rev()
        .find_map(|(u, c)| {
            c.as_ref()
                .filter(|_| step.is_multiple_of(*u))
                .map(|c| (*u, c))
        })
        .expect("the finest kept level divides every step it allows");
    let mut t = Timeline::new(from, to, step);
    let mut slots = [None; 65];
    let mut entries: Vec<_> = counts.iter().collect();
    // Values appear in a fixed order whatever the hash map's.
    entries.sort_unstable_by_key(|(k, _)| (k.1, k.0));
    for ((n, dscp), (packets, bytes)) in entries {
        t.add(&mut slots, *dscp, n * unit, *packets, *bytes);
    }
    Ok((t.finish(), missing))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_index::sideindex::{CountsBucket, DscpCount, FlowCounts, FlowKey};

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    #[test]
    fn steps_are_the_finest_that_fit() {
        assert_eq!(step_for(100 * MS, 120, MS), MS);
        assert_eq!(step_for(121 * MS, 120, MS), 2 * MS);
        assert_eq!(step_for(2 * S, 120, MS), 20 * MS);
        assert_eq!(step_for(2 * S, 120, S), S);
        assert_eq!(step_for(3600 * S, 120, MS), 30 * S);
        // A year: whole weeks.
        let year = 365 * 86_400 * S;
        let s = step_for(year, 120, MS);
        assert!(
            year.div_ceil(s) <= 120 && s.is_multiple_of(7 * 86_400 * S),
            "{s}"
        );
    }

    fn flow(a: &str, dscp: u8, seconds: &[(u64, u64)]) -> FlowSummary {
        let key = FlowKey {
            vlans: [None, None],
            ip_version: 4,
            proto: 17,
            a: a.parse().unwrap(),
            b: "10.0.0.2".parse().unwrap(),
            ports: Some((1000, 2000)),
        };
        let mut f = FlowCounts::new(key, 0, 0);
        f.totals.dscp_counts[0] = vec![DscpCount {
            dscp,
            packets: 1,
            bytes: 1,
        }];
        f.totals.first_ns = seconds.iter().map(|s| s.0).min().unwrap() * S;
        f.totals.last_ns = seconds.iter().map(|s| s.0).max().unwrap() * S;
        f.buckets = seconds
            .iter()
            .map(|&(second, bytes)| CountsBucket {
                second,
                bytes: [bytes, 0],
                packets: [1, 0],
                ..Default::default()
            })
            .collect();
        FlowSummary {
            flow: f,
            approximate: false,
        }
    }

    #[test]
    fn flows_stack_by_class_in_bins_of_the_window() {
        let flows = [
            flow("10.0.0.1", 46, &[(100, 10), (101, 20), (150, 5)]),
            flow("10.0.0.3", 0, &[(100, 1000), (99, 7)]),
        ];
        // Seconds 100..104 in 2 bins of 2 s; seconds 99 and 150 are outside.
        let t = from_flows(&flows, Some(100 * S), Some(104 * S), 2);
        assert_eq!((t.start_ns, t.step_ns, t.bins), (100 * S, 2 * S, 2));
        assert_eq!(t.values.len(), 2);
        assert_eq!((t.values[0].dscp, &t.values[0].bytes), (0, &vec![1000, 0]));
        assert_eq!((t.values[1].dscp, &t.values[1].bytes), (46, &vec![30, 0]));
        assert_eq!(t.total(0), (3, 1030));
        // Without a window: the flows' own span, 99..151 in bins of 1 s.
        let t = from_flows(&flows, None, None, 120);
        assert_eq!((t.start_ns, t.step_ns, t.bins), (99 * S, S, 52));
    }

    /// An Ethernet frame of `len` bytes carrying IPv4/UDP marked `dscp`.
    fn frame(dscp: u8, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(42)];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[15] = dscp << 2;
        let ip_len = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&ip_len.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&1000u16.to_be_bytes());
        f[36..38].copy_from_slice(&2000u16.to_be_bytes());
        let udp_len = (f.len() - 34) as u16;
        f[38..40].copy_from_slice(&udp_len.to_be_bytes());
        f
    }

    /// The bins of a timeline as (bin, value) -> (packets, bytes), zero bins left out.
    fn cells(t: &Timeline) -> std::collections::BTreeMap<(usize, u8), (u64, u64)> {
        let mut m = std::collections::BTreeMap::new();
        for v in &t.values {
            for i in 0..t.bins {
                if v.packets[i] > 0 {
                    m.insert((i, v.dscp), (v.packets[i], v.bytes[i]));
                }
            }
        }
        m
    }

    /// The series' timeline of a store equals the bins counted from its packets, for
    /// windows drawn from bins of milliseconds to bins of minutes.
    #[test]
    fn the_series_timeline_counts_every_packet_in_its_bin() {
        let dir = tempfile::tempdir().unwrap();
        let base = 1_796_000_000 * S; // 2026-11-30T00:53:20Z
                                      // (ns, dscp, bytes): a burst of EF every 7 ms for 2 s, then default traffic every
                                      // 333 ms for 5 minutes, then a lone CS5 packet an hour later.
        let mut packets: Vec<(u64, u8, usize)> = Vec::new();
        for i in 0..300u64 {
            packets.push((base + i * 7 * MS + 123, 46, 200 + (i as usize % 50)));
        }
        for i in 0..900u64 {
            packets.push((base + 2 * S + i * 333 * MS, 0, 1000));
        }
        packets.push((base + 3600 * S, 40, 90));
        packets.sort_by_key(|p| p.0);
        {
            let cfg = capsule_store::WriterConfig {
                block_bytes: 8192,
                segment_bytes: 64 * 1024,
                threads: 1,
                ..capsule_store::WriterConfig::default()
            };
            let (mut w, _) = capsule_index::open_writer(dir.path(), cfg).unwrap();
            let id = w.add_interface(capsule_pcap::Interface {
                linktype: 1,
                snaplen: 65535,
                name: Some("eth0".into()),
                options: Default::default(),
            });
            for &(ts, dscp, len) in &packets {
                let f = frame(dscp, len);
                w.append(id, ts, f.len() as u32, &f).unwrap();
            }
            w.finish().unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        for (from, to, step) in [
            (Some(base), Some(base + 500 * MS), 5 * MS),
            (Some(base + 100 * MS), Some(base + 2 * S), 20 * MS),
            (Some(base), Some(base + 600 * S), 5 * S),
            // 3600.001 s: 121 bins of 30 s would be one too many.
            (None, None, 60 * S),
        ] {
            let (t, missing) = from_series(&store, from, to, 120).unwrap();
            assert!(missing.unindexed.is_empty() && missing.no_series.is_empty());
            assert_eq!(t.step_ns, step, "{from:?}..{to:?}");
            let (lo, hi) = (from.unwrap_or(0), to.unwrap_or(u64::MAX));
            let mut want = std::collections::BTreeMap::new();
            for &(ts, dscp, len) in packets.iter().filter(|p| p.0 >= lo && p.0 < hi) {
                let e = want
                    .entry((((ts - t.start_ns) / t.step_ns) as usize, dscp))
                    .or_insert((0, 0));
                e.0 += 1;
                e.1 += len as u64;
            }
            assert_eq!(cells(&t), want, "{from:?}..{to:?}");
            assert!(t.end_ns() >= to.unwrap_or(base + 3600 * S + 1));
        }
    }

    /// The fold keeps the levels a span can need, and bins from any kept level agree with
    /// bins made from the milliseconds directly.
    #[test]
    fn the_fold_drops_levels_a_long_span_cannot_need() {
        let mut f = Fold::new(120, None);
        f.add(1_000, 46, 1, 100);
        f.add(1_050, 0, 2, 50);
        assert!(f.levels.iter().all(|(_, c)| c.is_some()));
        // 200 s seen: bins of 2 s at the finest; the ms level goes.
        f.add(201_000, 0, 1, 10);
        assert!(f.levels[0].1.is_none() && f.levels[1].1.is_some());
        // A known span of 10 days keeps only hours.
        let f = Fold::new(120, Some(10 * 86_400 * S));
        assert_eq!(
            f.levels.iter().filter(|(_, c)| c.is_some()).count(),
            1,
            "hours only"
        );
    }
}
