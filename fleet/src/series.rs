//! The nodes' millisecond series in the catalog: what `bursts --fleet` and the millisecond
//! alert rules of `alerts --fleet` answer from.
//!
//! A node's side index keeps, per block, bytes and packets per 1 ms bin and DSCP value,
//! and the fan-ins of each bin (every destination that 4 or more senders reached within it,
//! with each sender's packets and bytes; capsule_index::sideindex::series). A segment's
//! blocks are summed here into one series per segment (blocks of different lanes, and two
//! blocks of one lane, share milliseconds), which is what the answers sum anyway, and
//! published as three tables:
//!
//! ```text
//! ms_bins      one row per node, segment and second with traffic: the second, and as
//!              parallel arrays each (millisecond within it, DSCP value) with traffic, its
//!              packets and bytes (1000 times fewer rows than one per millisecond)
//! ms_fanins    one row per node, segment, millisecond and destination: the senders, their
//!              packets and bytes (parallel arrays)
//! ms_segments  one row per node and segment: whether its index had a series (an index of
//!              version 3 or 4 has none), its span, and its rows in the two tables
//! ```
//!
//! Reading them back gives a [`SeriesListing`] the local answers take as they take a
//! store's: the same merge, the same answer. A segment of the window the segment ledger
//! lists without a series row (published by a release before the series, or indexed
//! before version 5) is named: the answer misses its traffic.

use std::collections::BTreeMap;
use std::net::IpAddr;

use capsule_index::millis::SeriesListing;
use capsule_index::sideindex::series::{BlockSeries, ClassCount, Fanin, MsBin, Sender};

use crate::clickhouse::ClickHouse;
use crate::rowbinary::{Reader, Writer};
use crate::rows::{addr16, addr_of, owned, Origin};
use crate::{FleetError, DATABASE};

/// The columns of `capsule.ms_bins`, in order.
pub fn bin_columns() -> Vec<(String, String)> {
    owned(&[
        ("node", "{NODE}"),
        ("segment", "UInt64"),
        ("segment_len", "UInt64"),
        ("published_ns", "UInt64"),
        ("second", "UInt64"),
        ("ms", "Array(UInt16)"),
        ("dscp", "Array(UInt8)"),
        ("packets", "Array(UInt64)"),
        ("bytes", "Array(UInt64)"),
    ])
}

/// The columns of `capsule.ms_fanins`, in order.
pub fn fanin_columns() -> Vec<(String, String)> {
    owned(&[
        ("node", "{NODE}"),
        ("segment", "UInt64"),
        ("segment_len", "UInt64"),
        ("published_ns", "UInt64"),
        ("ms", "UInt64"),
        ("dst", "{ADDR}"),
        ("dst_v6", "UInt8"),
        ("senders", "Array({ADDR})"),
        ("senders_v6", "Array(UInt8)"),
        ("packets", "Array(UInt64)"),
        ("bytes", "Array(UInt64)"),
    ])
}

/// The columns of `capsule.ms_segments`, in order.
pub fn segment_columns() -> Vec<(String, String)> {
    owned(&[
        ("node", "{NODE}"),
        ("segment", "UInt64"),
        ("segment_len", "UInt64"),
        ("published_ns", "UInt64"),
        ("first_ns", "UInt64"),
        ("last_ns", "UInt64"),
        ("has_series", "UInt8"),
        ("seconds", "UInt64"),
        ("fanins", "UInt64"),
    ])
}

/// One segment's series rows, ready to insert: (rows, RowBinary) for `ms_bins`,
/// `ms_fanins` and `ms_segments`.
pub type SeriesRows = [(u64, Vec<u8>); 3];

fn origin(w: &mut Writer, o: &Origin) {
    w.string(&o.node);
    w.u64(o.segment);
    w.u64(o.segment_len);
    w.u64(o.published_ns);
}

/// The rows of one segment whose index spans `span` (ns) and holds `series` (one per
/// block; `None`: an index without a series, recorded as such).
pub fn rows(o: &Origin, span: Option<(u64, u64)>, series: Option<&[BlockSeries]>) -> SeriesRows {
    let blocks = series.unwrap_or_default();
    let mut bins: BTreeMap<(u64, u8), (u64, u64)> = BTreeMap::new();
    for b in blocks.iter().flat_map(|s| &s.bins) {
        for c in &b.classes {
            let e = bins.entry((b.ms, c.dscp)).or_default();
            e.0 += c.packets;
            e.1 += c.bytes;
        }
    }
    // The senders of a destination's fan-ins, unioned as the answers union them.
    let fanin = capsule_analytics::bursts::fanin_union(blocks);
    // Per second: (ms within it, value, packets, bytes), ascending.
    let mut seconds: BTreeMap<u64, Vec<(u16, u8, u64, u64)>> = BTreeMap::new();
    for ((ms, dscp), (p, b)) in bins {
        seconds
            .entry(ms / 1000)
            .or_default()
            .push(((ms % 1000) as u16, dscp, p, b));
    }
    let mut out: SeriesRows = Default::default();
    for (second, cells) in &seconds {
        let w = &mut Writer::default();
        origin(w, o);
        w.u64(*second);
        w.array(cells, |w, c| w.u16(c.0));
        w.array(cells, |w, c| w.u8(c.1));
        w.array(cells, |w, c| w.u64(c.2));
        w.array(cells, |w, c| w.u64(c.3));
        out[0].0 += 1;
        out[0].1.extend_from_slice(&w.buf);
    }
    for ((ms, dst), senders) in &fanin {
        let senders: Vec<(IpAddr, (u64, u64))> = senders.iter().map(|(a, c)| (*a, *c)).collect();
        let w = &mut Writer::default();
        origin(w, o);
        w.u64(*ms);
        w.fixed16(&addr16(*dst));
        w.u8(u8::from(dst.is_ipv6()));
        w.array(&senders, |w, s| w.fixed16(&addr16(s.0)));
        w.array(&senders, |w, s| w.u8(u8::from(s.0.is_ipv6())));
        w.array(&senders, |w, s| w.u64(s.1 .0));
        w.array(&senders, |w, s| w.u64(s.1 .1));
        out[1].0 += 1;
        out[1].1.extend_from_slice(&w.buf);
    }
    let w = &mut Writer::default();
    origin(w, o);
    let (first, last) = span.unwrap_or((0, 0));
    w.u64(first);
    w.u64(last);
    w.u8(u8::from(series.is_some()));
    w.u64(out[0].0);
    w.u64(out[1].0);
    out[2] = (1, std::mem::take(&mut w.buf));
    out
}

fn get_origin(r: &mut Reader) -> Result<Origin, FleetError> {
    Ok(Origin {
        node: r.string()?,
        segment: r.u64()?,
        segment_len: r.u64()?,
        published_ns: r.u64()?,
        kept: Default::default(),
    })
}

fn bad_lengths(what: &str) -> FleetError {
    FleetError::Decode {
        what: what.to_string(),
        problem: "parallel arrays differ in length".into(),
    }
}

/// Reads one `ms_bins` row back as a block's series (its bins, ascending).
pub fn get_bins(r: &mut Reader) -> Result<(Origin, BlockSeries), FleetError> {
    let o = get_origin(r)?;
    let second = r.u64()?;
    let ms = r.array(|r| r.u16())?;
    let dscp = r.array(|r| r.u8())?;
    let packets = r.array(|r| r.u64())?;
    let bytes = r.array(|r| r.u64())?;
    if [dscp.len(), packets.len(), bytes.len()] != [ms.len(); 3] {
        return Err(bad_lengths("an ms_bins row"));
    }
    let mut s = BlockSeries::default();
    for i in 0..ms.len() {
        let at = second * 1000 + u64::from(ms[i]);
        let c = ClassCount {
            dscp: dscp[i],
            packets: packets[i],
            bytes: bytes[i],
        };
        match s.bins.last_mut() {
            Some(b) if b.ms == at => b.classes.push(c),
            _ => s.bins.push(MsBin {
                ms: at,
                classes: vec![c],
            }),
        }
    }
    Ok((o, s))
}

/// Reads one `ms_fanins` row back.
pub fn get_fanin(r: &mut Reader) -> Result<(Origin, Fanin), FleetError> {
    let o = get_origin(r)?;
    let ms = r.u64()?;
    let dst = r.fixed16()?;
    let dst = addr_of(dst, r.u8()? != 0);
    let addrs = r.array(|r| r.fixed16())?;
    let v6 = r.array(|r| r.u8())?;
    let packets = r.array(|r| r.u64())?;
    let bytes = r.array(|r| r.u64())?;
    if [v6.len(), packets.len(), bytes.len()] != [addrs.len(); 3] {
        return Err(bad_lengths("an ms_fanins row"));
    }
    let senders = (0..addrs.len())
        .map(|i| Sender {
            addr: addr_of(addrs[i], v6[i] != 0),
            packets: packets[i],
            bytes: bytes[i],
        })
        .collect();
    Ok((o, Fanin { ms, dst, senders }))
}

/// Cuts `listing` to [from, to) (ns), to the millisecond, as capsule_index::millis cuts a
/// store's (blocks left empty are dropped).
pub fn cut(listing: &mut SeriesListing, from: u64, to: u64) {
    let (from_ms, to_ms) = (from / 1_000_000, to.div_ceil(1_000_000));
    for s in &mut listing.blocks {
        s.bins.retain(|b| b.ms >= from_ms && b.ms < to_ms);
        s.fanin.retain(|f| f.ms >= from_ms && f.ms < to_ms);
    }
    listing
        .blocks
        .retain(|s| !s.bins.is_empty() || !s.fanin.is_empty());
}

/// The fleet's series of [from, to) (ns): every node's bins and fan-ins cut to the window
/// as a store's are (capsule_index::millis), and per node the segments of the window the
/// ledger lists without a series (their traffic is missing from the answer).
pub fn listing(
    ch: &ClickHouse,
    from: u64,
    to: u64,
) -> Result<(SeriesListing, BTreeMap<String, Vec<u64>>), FleetError> {
    let (from_ms, to_ms) = (from / 1_000_000, to.div_ceil(1_000_000));
    let names =
        |c: Vec<(String, String)>| c.into_iter().map(|(n, _)| n).collect::<Vec<_>>().join(", ");
    let what = format!("the series rows ClickHouse at {} gave", ch.url());
    let mut out = SeriesListing::default();
    let b = ch.execute(&format!(
        "SELECT {} FROM {DATABASE}.ms_bins FINAL WHERE second >= {} AND second < {} \
         FORMAT RowBinary",
        names(bin_columns()),
        from_ms / 1000,
        to_ms.div_ceil(1000)
    ))?;
    let mut r = Reader::new(&b, &what);
    while !r.is_empty() {
        let (_, mut s) = get_bins(&mut r)?;
        s.bins.retain(|b| b.ms >= from_ms && b.ms < to_ms);
        if !s.bins.is_empty() {
            out.blocks.push(s);
        }
    }
    let b = ch.execute(&format!(
        "SELECT {} FROM {DATABASE}.ms_fanins FINAL WHERE ms >= {from_ms} AND ms < {to_ms} \
         FORMAT RowBinary",
        names(fanin_columns())
    ))?;
    let mut r = Reader::new(&b, &what);
    let mut fanin = Vec::new();
    while !r.is_empty() {
        fanin.push(get_fanin(&mut r)?.1);
    }
    if !fanin.is_empty() {
        out.blocks.push(BlockSeries {
            bins: Vec::new(),
            fanin,
        });
    }
    // Segments of the window with flows whose series is not in the catalog.
    let b = ch.execute(&format!(
        "SELECT node, segment FROM {DATABASE}.segments FINAL WHERE flows > 0 AND \
         last_ns >= {from} AND first_ns < {to} AND (node, segment) NOT IN (SELECT node, \
         segment FROM {DATABASE}.ms_segments FINAL WHERE has_series = 1) \
         ORDER BY node, segment FORMAT RowBinary"
    ))?;
    let mut r = Reader::new(&b, &what);
    let mut missing: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    while !r.is_empty() {
        let node = r.string()?;
        missing.entry(node).or_default().push(r.u64()?);
    }
    Ok((out, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(ms: u64, dscp: u8, packets: u64, bytes: u64) -> MsBin {
        MsBin {
            ms,
            classes: vec![ClassCount {
                dscp,
                packets,
                bytes,
            }],
        }
    }

    fn sender(a: &str, bytes: u64) -> Sender {
        Sender {
            addr: a.parse().unwrap(),
            packets: 1,
            bytes,
        }
    }

    #[test]
    fn a_segments_blocks_are_summed_and_read_back_per_millisecond_and_value() {
        let o = Origin {
            node: "n".into(),
            segment: 2,
            segment_len: 9,
            published_ns: 1,
            kept: Default::default(),
        };
        // Two blocks (two lanes) share millisecond 5_000_999; the second spills into the
        // next second. The same destination's senders are split between them.
        let a = BlockSeries {
            bins: vec![bin(5_000_998, 0, 1, 100), bin(5_000_999, 0, 2, 200)],
            fanin: vec![Fanin {
                ms: 5_000_999,
                dst: "::ffff:10.0.0.9".parse().unwrap(),
                senders: vec![sender("10.0.0.1", 10), sender("fd00::1", 20)],
            }],
        };
        let b = BlockSeries {
            bins: vec![bin(5_000_999, 0, 1, 50), bin(5_000_999, 46, 3, 3000)]
                .into_iter()
                .chain([bin(5_001_000, 46, 1, 1000)])
                .collect(),
            fanin: vec![Fanin {
                ms: 5_000_999,
                dst: "::ffff:10.0.0.9".parse().unwrap(),
                senders: vec![sender("10.0.0.1", 5), sender("10.0.0.2", 7)],
            }],
        };
        let rows = rows(&o, Some((1, 2)), Some(&[a, b]));
        assert_eq!((rows[0].0, rows[1].0, rows[2].0), (2, 1, 1));
        let mut r = Reader::new(&rows[0].1, "t");
        let (o2, s) = get_bins(&mut r).unwrap();
        assert_eq!(o2, o);
        assert_eq!(
            s.bins,
            vec![
                bin(5_000_998, 0, 1, 100),
                MsBin {
                    ms: 5_000_999,
                    classes: vec![
                        ClassCount {
                            dscp: 0,
                            packets: 3,
                            bytes: 250
                        },
                        ClassCount {
                            dscp: 46,
                            packets: 3,
                            bytes: 3000
                        }
                    ]
                }
            ]
        );
        assert_eq!(
            get_bins(&mut r).unwrap().1.bins,
            vec![bin(5_001_000, 46, 1, 1000)]
        );
        assert!(r.is_empty());
        let mut r = Reader::new(&rows[1].1, "t");
        let (_, f) = get_fanin(&mut r).unwrap();
        // An IPv6 destination stays IPv6 (IPv4-mapped), the senders are unioned.
        assert!(f.dst.is_ipv6());
        assert_eq!(
            f.senders,
            vec![
                Sender {
                    packets: 2,
                    ..sender("10.0.0.1", 15)
                },
                sender("10.0.0.2", 7),
                sender("fd00::1", 20)
            ]
        );
        assert!(r.is_empty());
        // A damaged row is named, not a panic.
        let e = get_bins(&mut Reader::new(&rows[0].1[..20], "t")).unwrap_err();
        assert!(e.to_string().contains("expected"), "{e}");
        // An index without a series: the ledger row says so, no other rows.
        let none = super::rows(&o, None, None);
        assert_eq!((none[0].0, none[1].0, none[2].0), (0, 0, 1));
    }
}
