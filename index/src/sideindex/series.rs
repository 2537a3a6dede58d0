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

/// Counts one block's series, packet by packet (the index builder feeds it every record).
#[derive(Debug, Default)]
pub struct SeriesBuilder {
    bins: Vec<MsBin>,
    /// Index in `bins` of the bin counted last (packets come in time order within a lane).
    last_bin: usize,
    /// Per (bin, destination): the group of its senders.
    groups: HashMap<(u64, Addr), usize, foldhash::fast::RandomState>,
    group_keys: Vec<(u64, Addr)>,
    /// Per (group, sender): its counts in `senders`.
    by_sender: HashMap<(usize, Addr), usize, foldhash::fast::RandomState>,
    senders: Vec<(usize, Addr, u64, u64)>,
    /// Distinct senders per group.
    group_senders: Vec<u32>,
    /// The (bin, destination, sender) counted last, and where its counts are.
    last: Option<(u64, Addr, Addr, usize)>,
}

impl SeriesBuilder {
    /// Counts one packet or cut-packet record.
    pub fn count(&mut self, r: &Record) {
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
        if !ip {
            return;
        }
        let (src, dst) = ((r.ip_version, r.src), (r.ip_version, r.dst));
        if let Some((lms, ldst, lsrc, i)) = self.last {
            if lms == ms && ldst == dst && lsrc == src {
                self.senders[i].2 += 1;
                self.senders[i].3 += wire;
                return;
            }
        }
        let g = *self.groups.entry((ms, dst)).or_insert_with(|| {
            self.group_keys.push((ms, dst));
            self.group_senders.push(0);
            self.group_keys.len() - 1
        });
        let i = *self.by_sender.entry((g, src)).or_insert_with(|| {
            self.group_senders[g] += 1;
            self.senders.push((g, src, 0, 0));
            self.senders.len() - 1
        });
        self.senders[i].2 += 1;
        self.senders[i].3 += wire;
        self.last = Some((ms, dst, src, i));
    }

    /// The block's series, and the builder emptied for the next block (its allocations
    /// kept).
    pub fn take(&mut self) -> BlockSeries {
        let mut fanin: Vec<Fanin> = Vec::new();
        let mut slot: Vec<Option<usize>> = vec![None; self.group_keys.len()];
        for (g, &n) in self.group_senders.iter().enumerate() {
            if n as usize >= FANIN_KEEP {
                let (ms, dst) = self.group_keys[g];
                slot[g] = Some(fanin.len());
                fanin.push(Fanin {
                    ms,
                    dst: ip_of(dst),
                    senders: Vec::with_capacity(n as usize),
                });
            }
        }
        for &(g, src, packets, bytes) in &self.senders {
            if let Some(f) = slot[g] {
                fanin[f].senders.push(Sender {
                    addr: ip_of(src),
                    packets,
                    bytes,
                });
            }
        }
        for f in &mut fanin {
            f.senders.sort_unstable_by_key(|s| s.addr);
        }
        fanin.sort_unstable_by_key(|f| (f.ms, f.dst));
        self.groups.clear();
        self.group_keys.clear();
        self.by_sender.clear();
        self.senders.clear();
        self.group_senders.clear();
        self.last = None;
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

    #[test]
    fn bins_count_bytes_per_value_and_fanin_keeps_busy_destinations() {
        let mut b = SeriesBuilder::default();
        // 5 senders to 10.0.0.9 in ms 7, 3 senders to 10.0.0.8 in ms 7, one in ms 8.
        for s in 1..=5u8 {
            b.count(&rec(
                7_000_000 + u64::from(s),
                [10, 0, 1, s],
                [10, 0, 0, 9],
                46,
                1000,
            ));
        }
        b.count(&rec(7_100_000, [10, 0, 1, 1], [10, 0, 0, 9], 46, 500));
        for s in 1..=3u8 {
            b.count(&rec(7_200_000, [10, 0, 2, s], [10, 0, 0, 8], 0, 100));
        }
        b.count(&rec(8_000_000, [10, 0, 2, 1], [10, 0, 0, 8], 0, 64));
        let mut other = Record {
            ts_ns: 6_999_999,
            wire: 60,
            ..Record::default()
        };
        other.ip_version = 0;
        b.count(&other);
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
}
