//! The millisecond series of a block (index version 5): bytes and packets per 1 ms bin of
//! packet time, per DSCP value (sparse: only bins and values with traffic), and the
//! *fan-in* of each bin: every destination that at least [`FANIN_KEEP`] distinct senders
//! sent to within the bin, with each sender's packets and bytes (what `capsule bursts`
//! finds incast with, without reading a packet).
//!
//! Bins are epoch-aligned: bin `ms` holds the packets whose timestamp `t` (ns) has
//! `t / 1_000_000 == ms`. Bytes are wire bytes (original lengths), packets the packets seen
//! (a packet the cut-off did not store counts: the series describes the link). Non-IP
//! packets count under the pseudo value [`NON_IP`] (64).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use capsule_store::format::DecodeError;
use capsule_store::indexer::Record;
use capsule_wire::view::{Reader, Short, VarintError};

// The index file's encoding helpers, for the series alone (file.rs calls this module, so
// this one does not call back into it).
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn short(e: Short) -> DecodeError {
    DecodeError::Short {
        what: "millisecond series",
        expected: e.end(),
        found: e.offset + e.found,
    }
}

fn bad_varint(e: VarintError) -> DecodeError {
    match e {
        VarintError::Short(e) => short(e),
        VarintError::TooLong { .. } => invalid("a varint longer than 10 bytes"),
    }
}

fn invalid(detail: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        what: "segment index millisecond series",
        detail: detail.into(),
    }
}

/// A destination's senders within one bin are kept when at least this many distinct
/// senders sent to it in the bin (in one block); incast questions ask for this many or
/// more.
pub const FANIN_KEEP: usize = 4;

/// The value non-IP packets are counted under (DSCP values are 0..=63).
pub const NON_IP: u8 = 64;

/// One DSCP value's traffic within one bin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassCount {
    /// 0..=63, or [`NON_IP`].
    pub dscp: u8,
    pub packets: u64,
    pub bytes: u64,
}

/// One millisecond bin of a block: its traffic per DSCP value, ascending.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MsBin {
    /// Milliseconds since the Unix epoch.
    pub ms: u64,
    pub classes: Vec<ClassCount>,
}

impl MsBin {
    /// The bin's traffic over every value: (packets, bytes).
    pub fn total(&self) -> (u64, u64) {
        self.classes
            .iter()
            .fold((0, 0), |(p, b), c| (p + c.packets, b + c.bytes))
    }
}

/// One sender to a destination within a bin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sender {
    pub addr: IpAddr,
    pub packets: u64,
    pub bytes: u64,
}

/// A destination that [`FANIN_KEEP`] or more distinct senders sent to within one bin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fanin {
    pub ms: u64,
    pub dst: IpAddr,
    /// Ascending by address.
    pub senders: Vec<Sender>,
}

/// A block's millisecond series.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockSeries {
    /// Ascending by `ms`, no two alike.
    pub bins: Vec<MsBin>,
    /// Ascending by (`ms`, `dst`).
    pub fanin: Vec<Fanin>,
}

/// An address as the builder keys it: IP version and 16 bytes (IPv4 in the first 4).
type Addr = (u8, [u8; 16]);

fn ip_of((v, b): Addr) -> IpAddr {
    if v == 4 {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(b))
    }
}

/// Where a (sender, destination) pair was counted last: its bin, the block (a number that
/// changes at every [`SeriesBuilder::take`]) and its entry in that block's counts.
#[derive(Debug, Clone, Copy, Default)]
struct Stamp {
    ms: u64,
    block: u32,
    entry: u32,
}

/// One pair's traffic within one bin of the block: (bin, destination, sender) as interned
/// address numbers, packets, bytes.
#[derive(Debug, Clone, Copy)]
struct Entry {
    ms: u64,
    dst: u32,
    src: u32,
    packets: u64,
    bytes: u64,
}

/// A pair whose addresses are not interned yet.
const NO_ADDR: u32 = u32::MAX;

/// Counts one block's series, packet by packet (the index builder feeds it every record).
///
/// The fan-in is counted per (sender, destination) *pair*, which the caller numbers densely
/// (the index builder uses its flow number and direction, which it has already found for
/// the packet): a packet whose pair was counted in the same bin only adds to that count,
/// found by the pair's number, so the steady state hashes nothing. A pair's addresses are
/// interned once per builder; the block's entries are sorted and grouped by destination when
/// the block is taken. (Version 5's first builder hashed (bin, destination) and (group,
/// sender) for every packet: 8% of the store rung's capture CPU.)
#[derive(Debug)]
pub struct SeriesBuilder {
    bins: Vec<MsBin>,
    /// Index in `bins` of the bin counted last (packets come in time order within a lane).
    last_bin: usize,
    /// The block being counted; stamps of other blocks are stale. Starts at 1 (a fresh
    /// stamp has 0).
    block: u32,
    /// Per pair number: where it was counted last.
    stamps: Vec<Stamp>,
    /// Per pair number: (sender, destination), interned, or [`NO_ADDR`].
    pair_addrs: Vec<(u32, u32)>,
    addr_ids: HashMap<Addr, u32, foldhash::fast::RandomState>,
    addrs: Vec<Addr>,
    /// The block's counts per (bin, pair), in arrival order.
    entries: Vec<Entry>,
}

impl Default for SeriesBuilder {
    fn default() -> Self {
        SeriesBuilder {
            bins: Vec::new(),
            last_bin: 0,
            block: 1,
            stamps: Vec::new(),
            pair_addrs: Vec::new(),
            addr_ids: HashMap::default(),
            addrs: Vec::new(),
            entries: Vec::new(),
        }
    }
}

impl SeriesBuilder {
    fn intern(&mut self, a: Addr) -> u32 {
        *self.addr_ids.entry(a).or_insert_with(|| {
            self.addrs.push(a);
            (self.addrs.len() - 1) as u32
        })
    }

    /// Counts one packet or cut-packet record. `pair` numbers its (sender, destination)
    /// pair (the same number for the same pair for the builder's life; small and dense, it
    /// indexes a table); IP records without one count in the bins only.
    pub fn count(&mut self, r: &Record, pair: Option<usize>) {
        let ms = r.ts_ns / 1_000_000;
        let wire = u64::from(r.wire);
        let ip = matches!(r.ip_version, 4 | 6);
        let dscp = if ip { r.dscp & 63 } else { NON_IP };
        let at = match self.bins.get(self.last_bin) {
            Some(b) if b.ms == ms => self.last_bin,
            _ => match self.bins.binary_search_by_key(&ms, |b| b.ms) {
                Ok(i) => i,
                Err(i) => {
                    self.bins.insert(
                        i,
                        MsBin {
                            ms,
                            classes: Vec::new(),
                        },
                    );
                    i
                }
            },
        };
        self.last_bin = at;
        let bin = &mut self.bins[at];
        match bin.classes.iter().position(|c| c.dscp == dscp) {
            Some(c) => {
                bin.classes[c].packets += 1;
                bin.classes[c].bytes += wire;
            }
            None => {
                let c = bin.classes.partition_point(|c| c.dscp < dscp);
                bin.classes.insert(
                    c,
                    ClassCount {
                        dscp,
                        packets: 1,
                        bytes: wire,
                    },
                );
            }
        }
        let (true, Some(pair)) = (ip, pair) else {
            return;
        };
        if pair >= self.stamps.len() {
            self.stamps.resize(pair + 1, Stamp::default());
            self.pair_addrs.resize(pair + 1, (NO_ADDR, NO_ADDR));
        }
        let s = self.stamps[pair];
        if s.block == self.block && s.ms == ms {
            let e = &mut self.entries[s.entry as usize];
            e.packets += 1;
            e.bytes += wire;
            return;
        }
        let (mut src, mut dst) = self.pair_addrs[pair];
        if src == NO_ADDR {
            src = self.intern((r.ip_version, r.src));
            dst = self.intern((r.ip_version, r.dst));
            self.pair_addrs[pair] = (src, dst);
        }
        self.stamps[pair] = Stamp {
            ms,
            block: self.block,
            entry: self.entries.len() as u32,
        };
        self.entries.push(Entry {
            ms,
            dst,
            src,
            packets: 1,
            bytes: wire,
        });
    }

    /// The block's series, and the builder emptied for the next block (its allocations
    /// and interned addresses kept).
    pub fn take(&mut self) -> BlockSeries {
        // A pair that came back to a bin after another (packets of lanes interleave) has
        // two entries: sorting puts them side by side.
        self.entries.sort_unstable_by_key(|e| (e.ms, e.dst, e.src));
        let mut fanin: Vec<Fanin> = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            let (ms, dst) = (self.entries[i].ms, self.entries[i].dst);
            let end = i + self.entries[i..]
                .iter()
                .take_while(|e| e.ms == ms && e.dst == dst)
                .count();
            let run = &self.entries[i..end];
            let distinct = 1 + run.windows(2).filter(|w| w[0].src != w[1].src).count();
            if distinct >= FANIN_KEEP {
                let mut senders: Vec<Sender> = Vec::with_capacity(distinct);
                let mut last = NO_ADDR;
                for e in run {
                    if e.src == last {
                        let s = senders.last_mut().expect("a sender was pushed for it");
                        s.packets += e.packets;
                        s.bytes += e.bytes;
                    } else {
                        senders.push(Sender {
                            addr: ip_of(self.addrs[e.src as usize]),
                            packets: e.packets,
                            bytes: e.bytes,
                        });
                        last = e.src;
                    }
                }
                senders.sort_unstable_by_key(|s| s.addr);
                fanin.push(Fanin {
                    ms,
                    dst: ip_of(self.addrs[dst as usize]),
                    senders,
                });
            }
            i = end;
        }
        fanin.sort_unstable_by_key(|f| (f.ms, f.dst));
        self.entries.clear();
        self.block = self.block.wrapping_add(1);
        if self.block == 0 {
            // Every stamp is stale again (after 2^32 blocks).
            self.stamps.iter_mut().for_each(|s| *s = Stamp::default());
            self.block = 1;
        }
        self.last_bin = 0;
        BlockSeries {
            bins: std::mem::take(&mut self.bins),
            fanin,
        }
    }
}

fn put_ip(out: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(v4) => {
            out.push(4);
            out.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.push(6);
            out.extend_from_slice(&v6.octets());
        }
    }
}

fn get_ip(c: &mut Reader<'_>) -> Result<IpAddr, DecodeError> {
    match c.u8().map_err(short)? {
        4 => Ok(IpAddr::from(c.array::<4>().map_err(short)?)),
        6 => Ok(IpAddr::from(c.array::<16>().map_err(short)?)),
        v => Err(invalid(format!(
            "series address of IP version {v} (expected 4 or 6)"
        ))),
    }
}

/// Encodes a block's series (docs/format.md, "Millisecond series").
pub(super) fn put_series(out: &mut Vec<u8>, s: &BlockSeries) {
    put_varint(out, s.bins.len() as u64);
    let mut prev = 0u64;
    for b in &s.bins {
        put_varint(out, b.ms - prev);
        prev = b.ms;
        put_varint(out, b.classes.len() as u64);
        for c in &b.classes {
            out.push(c.dscp);
            put_varint(out, c.packets);
            put_varint(out, c.bytes);
        }
    }
    put_varint(out, s.fanin.len() as u64);
    let mut prev = 0u64;
    for f in &s.fanin {
        put_varint(out, f.ms - prev);
        prev = f.ms;
        put_ip(out, f.dst);
        put_varint(out, f.senders.len() as u64);
        for x in &f.senders {
            put_ip(out, x.addr);
            put_varint(out, x.packets);
            put_varint(out, x.bytes);
        }
    }
}

/// Decodes a block's series written by [`put_series`], checking its order. Never panics.
pub(super) fn get_series(c: &mut Reader<'_>) -> Result<BlockSeries, DecodeError> {
    let count = |c: &mut Reader<'_>, what: &str| -> Result<usize, DecodeError> {
        let n = c.varint().map_err(bad_varint)?;
        if n > c.remaining() as u64 {
            return Err(invalid(format!(
                "series lists {n} {what} in {} bytes",
                c.remaining()
            )));
        }
        Ok(n as usize)
    };
    let n = count(c, "bins")?;
    let mut bins = Vec::with_capacity(n);
    let mut prev = 0u64;
    for i in 0..n {
        let d = c.varint().map_err(bad_varint)?;
        if i > 0 && d == 0 {
            return Err(invalid(format!(
                "series bin {i} repeats millisecond {prev}"
            )));
        }
        prev = prev
            .checked_add(d)
            .ok_or_else(|| invalid("series millisecond overflows"))?;
        let k = count(c, "values")?;
        let mut classes = Vec::with_capacity(k);
        for _ in 0..k {
            let dscp = c.u8().map_err(short)?;
            if dscp > NON_IP || classes.last().is_some_and(|l: &ClassCount| l.dscp >= dscp) {
                return Err(invalid(format!(
                    "series bin {prev} lists DSCP value {dscp} out of order or above 64"
                )));
            }
            classes.push(ClassCount {
                dscp,
                packets: c.varint().map_err(bad_varint)?,
                bytes: c.varint().map_err(bad_varint)?,
            });
        }
        bins.push(MsBin { ms: prev, classes });
    }
    let n = count(c, "fan-ins")?;
    let mut fanin = Vec::with_capacity(n);
    let mut prev = 0u64;
    for _ in 0..n {
        prev = prev
            .checked_add(c.varint().map_err(bad_varint)?)
            .ok_or_else(|| invalid("series millisecond overflows"))?;
        let dst = get_ip(c)?;
        let k = count(c, "senders")?;
        let mut senders = Vec::with_capacity(k);
        for _ in 0..k {
            senders.push(Sender {
                addr: get_ip(c)?,
                packets: c.varint().map_err(bad_varint)?,
                bytes: c.varint().map_err(bad_varint)?,
            });
        }
        fanin.push(Fanin {
            ms: prev,
            dst,
            senders,
        });
    }
    Ok(BlockSeries { bins, fanin })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts_ns: u64, src: [u8; 4], dst: [u8; 4], dscp: u8, wire: u32) -> Record {
        let mut r = Record {
            ts_ns,
            wire,
            ip_version: 4,
            dscp,
            ..Record::default()
        };
        r.src[..4].copy_from_slice(&src);
        r.dst[..4].copy_from_slice(&dst);
        r
    }

    /// The builder's pair numbers, as the index builder gives them (one per pair).
    #[derive(Default)]
    struct Pairs(Vec<([u8; 16], [u8; 16])>);

    impl Pairs {
        fn of(&mut self, r: &Record) -> Option<usize> {
            if r.ip_version == 0 {
                return None;
            }
            let p = (r.src, r.dst);
            Some(match self.0.iter().position(|&q| q == p) {
                Some(i) => i,
                None => {
                    self.0.push(p);
                    self.0.len() - 1
                }
            })
        }
    }

    #[test]
    fn bins_count_bytes_per_value_and_fanin_keeps_busy_destinations() {
        let mut b = SeriesBuilder::default();
        let mut pairs = Pairs::default();
        let mut count = |b: &mut SeriesBuilder, r: &Record| b.count(r, pairs.of(r));
        // 5 senders to 10.0.0.9 in ms 7, 3 senders to 10.0.0.8 in ms 7, one in ms 8.
        for s in 1..=5u8 {
            count(
                &mut b,
                &rec(
                    7_000_000 + u64::from(s),
                    [10, 0, 1, s],
                    [10, 0, 0, 9],
                    46,
                    1000,
                ),
            );
        }
        count(
            &mut b,
            &rec(7_100_000, [10, 0, 1, 1], [10, 0, 0, 9], 46, 500),
        );
        for s in 1..=3u8 {
            count(
                &mut b,
                &rec(7_200_000, [10, 0, 2, s], [10, 0, 0, 8], 0, 100),
            );
        }
        count(&mut b, &rec(8_000_000, [10, 0, 2, 1], [10, 0, 0, 8], 0, 64));
        let mut other = Record {
            ts_ns: 6_999_999,
            wire: 60,
            ..Record::default()
        };
        other.ip_version = 0;
        count(&mut b, &other);
        let s = b.take();
        assert_eq!(s.bins.len(), 3);
        assert_eq!(s.bins[0].ms, 6);
        assert_eq!(s.bins[0].classes[0].dscp, NON_IP);
        assert_eq!(s.bins[1].ms, 7);
        assert_eq!(s.bins[1].total(), (9, 5800));
        assert_eq!(
            s.bins[1].classes,
            vec![
                ClassCount {
                    dscp: 0,
                    packets: 3,
                    bytes: 300
                },
                ClassCount {
                    dscp: 46,
                    packets: 6,
                    bytes: 5500
                }
            ]
        );
        assert_eq!(s.fanin.len(), 1, "{:?}", s.fanin);
        let f = &s.fanin[0];
        assert_eq!((f.ms, f.dst), (7, IpAddr::from([10, 0, 0, 9])));
        assert_eq!(f.senders.len(), 5);
        assert_eq!(f.senders[0].addr, IpAddr::from([10, 0, 1, 1]));
        assert_eq!((f.senders[0].packets, f.senders[0].bytes), (2, 1500));
        // Round trip, and the builder starts the next block empty.
        let mut out = Vec::new();
        put_series(&mut out, &s);
        let back = get_series(&mut Reader::new(&out)).unwrap();
        assert_eq!(back, s);
        assert_eq!(b.take(), BlockSeries::default());
        // Cut anywhere: an error, never a panic.
        for cut in 0..out.len() {
            assert!(get_series(&mut Reader::new(&out[..cut])).is_err(), "{cut}");
        }
    }

    /// The fan-in as the first version-5 builder counted it: per (bin, destination), every
    /// distinct sender with its packets and bytes; kept where at least FANIN_KEEP.
    fn naive_fanin(records: &[Record]) -> Vec<Fanin> {
        use std::collections::BTreeMap;
        let mut m: BTreeMap<(u64, IpAddr), BTreeMap<IpAddr, (u64, u64)>> = BTreeMap::new();
        for r in records {
            let Some((src, dst)) = r.addrs() else {
                continue;
            };
            let c = m
                .entry((r.ts_ns / 1_000_000, dst))
                .or_default()
                .entry(src)
                .or_default();
            c.0 += 1;
            c.1 += u64::from(r.wire);
        }
        m.into_iter()
            .filter(|(_, s)| s.len() >= FANIN_KEEP)
            .map(|((ms, dst), s)| Fanin {
                ms,
                dst,
                senders: s
                    .into_iter()
                    .map(|(addr, (packets, bytes))| Sender {
                        addr,
                        packets,
                        bytes,
                    })
                    .collect(),
            })
            .collect()
    }

    proptest::proptest! {
        /// Any order of packets (bins revisited, pairs spread over blocks that share a bin,
        /// one pair number per flow direction as the index builder gives them, so several
        /// numbers per address pair): each block's fan-in equals the naive count.
        #[test]
        fn fanin_equals_the_naive_count(
            packets in proptest::collection::vec(
                (0u64..4, 0u8..6, 0u8..3, 0u16..3, 1u32..2000), 1..300),
            cuts in proptest::collection::vec(0usize..300, 0..4),
        ) {
            let mut b = SeriesBuilder::default();
            let mut flows: Vec<([u8; 16], [u8; 16], u16)> = Vec::new();
            let records: Vec<Record> = packets
                .iter()
                .map(|&(ms, s, d, port, wire)| {
                    let mut r = rec(ms * 1_000_000 + u64::from(wire), [10, 0, 1, s], [10, 0, 0, d], 0, wire);
                    r.src_port = port;
                    r
                })
                .collect();
            let mut cuts = cuts;
            cuts.push(records.len());
            cuts.sort_unstable();
            let mut from = 0;
            for &to in &cuts {
                let to = to.min(records.len());
                if to < from {
                    continue;
                }
                for r in &records[from..to] {
                    let f = (r.src, r.dst, r.src_port);
                    let pair = match flows.iter().position(|&g| g == f) {
                        Some(i) => i,
                        None => {
                            flows.push(f);
                            flows.len() - 1
                        }
                    };
                    b.count(r, Some(pair));
                }
                let got = b.take();
                proptest::prop_assert_eq!(got.fanin, naive_fanin(&records[from..to]));
                from = to;
            }
        }
    }
}
