//! Which hop loses the packets: two capture points' packets matched one to one.
//!
//! A packet is recognised at both points by what a switch or router does not change: the
//! addresses, the protocol, the ports, the IPv4 identification, the TCP sequence number,
//! the IP payload length and a hash of the first [`HASH_BYTES`] bytes after the transport
//! header ([`MatchKey`]). TTL, DSCP, VLAN tags, MAC addresses and checksums may all change
//! between the points and are not used. A packet whose key each point saw once is matched
//! when `B's time - A's time` is within a clock-skew tolerance; the median of those
//! differences is the flow's typical delay. Copies of one key (a retransmission that
//! reused its IP ID) are paired closest-first around that typical delay, each copy in one
//! pair at most (`match_key`). What stays unmatched was seen at one point and not the
//! other.
//!
//! Only flows both points saw count: a flow one point never saw is not on both paths, so its
//! packets are not called lost (they are counted apart, [`Diff::only_a_flows`]).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Bytes of the payload hashed into the key.
pub const HASH_BYTES: usize = 32;

/// A flow, both directions as one (the lower endpoint first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct FlowId {
    pub proto: u8,
    pub a: IpAddr,
    pub port_a: u16,
    pub b: IpAddr,
    pub port_b: u16,
}

impl FlowId {
    /// The filter selecting the flow's packets (both directions).
    pub fn filter(&self) -> capsule_query::Filter {
        use capsule_query::{Direction::SrcOrDst, Filter};
        let ports = matches!(self.proto, 6 | 17 | 132);
        let end = |addr, port| {
            let host = Filter::host(SrcOrDst, addr);
            if ports {
                host.and(Filter::port(SrcOrDst, port))
            } else {
                host
            }
        };
        Filter::proto(capsule_wire::IpProto::from(self.proto))
            .and(end(self.a, self.port_a))
            .and(end(self.b, self.port_b))
    }
}

/// What identifies one packet at any point of its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatchKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// IPv4 identification (0 for IPv6).
    pub ip_id: u16,
    /// TCP sequence number (0 for other protocols).
    pub seq: u32,
    /// IP payload length, from the IP header.
    pub len: u32,
    /// FNV-1a of the first [`HASH_BYTES`] bytes after the transport header (as captured).
    pub hash: u64,
}

impl MatchKey {
    /// The flow the packet belongs to.
    pub fn flow(&self) -> FlowId {
        let (x, y) = ((self.src, self.src_port), (self.dst, self.dst_port));
        let ((a, port_a), (b, port_b)) = if x <= y { (x, y) } else { (y, x) };
        FlowId {
            proto: self.proto,
            a,
            port_a,
            b,
            port_b,
        }
    }
}

fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

fn be32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

/// Where the IP header starts, for the link types a capsule store holds.
fn ip_offset(linktype: u16, d: &[u8]) -> Option<usize> {
    use capsule_wire::linktype::*;
    match linktype {
        LINKTYPE_ETHERNET => {
            let mut at = 12;
            let mut et = be16(d, at)?;
            let mut tags = 0;
            while matches!(et, 0x8100 | 0x88a8 | 0x9100) && tags < 4 {
                at += 4;
                tags += 1;
                et = be16(d, at)?;
            }
            matches!(et, 0x0800 | 0x86dd).then_some(at + 2)
        }
        LINKTYPE_RAW | LINKTYPE_RAW_BSD | LINKTYPE_RAW_OPENBSD | LINKTYPE_IPV4 | LINKTYPE_IPV6 => {
            Some(0)
        }
        LINKTYPE_LINUX_SLL => matches!(be16(d, 14)?, 0x0800 | 0x86dd).then_some(16),
        LINKTYPE_LINUX_SLL2 => matches!(be16(d, 0)?, 0x0800 | 0x86dd).then_some(20),
        LINKTYPE_NULL | LINKTYPE_LOOP => Some(4),
        _ => None,
    }
}

fn fnv1a(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The key of a packet of link type `linktype`, `None` when it is not IP (or too short to
/// say). Never panics, whatever the bytes.
pub fn key(linktype: u16, data: &[u8]) -> Option<MatchKey> {
    let at = ip_offset(linktype, data)?;
    let ip = data.get(at..)?;
    let version = ip.first()? >> 4;
    let (src, dst, proto, ip_id, len, l4) = match version {
        4 => {
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            if ihl < 20 {
                return None;
            }
            let total = be16(ip, 2)?;
            let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            let frag = be16(ip, 6)? & 0x1fff;
            (
                IpAddr::V4(Ipv4Addr::from(src)),
                IpAddr::V4(Ipv4Addr::from(dst)),
                *ip.get(9)?,
                be16(ip, 4)?,
                u32::from(total).saturating_sub(ihl as u32),
                // A non-first fragment has no transport header.
                (frag == 0).then_some(ihl),
            )
        }
        6 => {
            let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            (
                IpAddr::V6(Ipv6Addr::from(src)),
                IpAddr::V6(Ipv6Addr::from(dst)),
                *ip.get(6)?,
                0,
                u32::from(be16(ip, 4)?),
                Some(40),
            )
        }
        _ => return None,
    };
    let (mut src_port, mut dst_port, mut seq, mut payload) = (0, 0, 0, l4.unwrap_or(ip.len()));
    if let Some(l4) = l4 {
        match proto {
            6 => {
                src_port = be16(ip, l4).unwrap_or(0);
                dst_port = be16(ip, l4 + 2).unwrap_or(0);
                seq = be32(ip, l4 + 4).unwrap_or(0);
                let off = ip.get(l4 + 12).map_or(20, |b| usize::from(b >> 4) * 4);
                payload = l4 + off.max(20);
            }
            17 | 132 => {
                src_port = be16(ip, l4).unwrap_or(0);
                dst_port = be16(ip, l4 + 2).unwrap_or(0);
                payload = l4 + if proto == 17 { 8 } else { 12 };
            }
            _ => payload = l4,
        }
    }
    let body = ip.get(payload.min(ip.len())..).unwrap_or_default();
    Some(MatchKey {
        src,
        dst,
        proto,
        src_port,
        dst_port,
        ip_id,
        seq,
        len,
        hash: fnv1a(&body[..body.len().min(HASH_BYTES)]),
    })
}

/// One packet of a capture point: its time and key (`None`: not IP, not matched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub ts_ns: u64,
    pub key: Option<MatchKey>,
}

/// The one-way delay from A to B of the matched packets of a flow, nanoseconds (negative
/// when B's clock is behind A's by more than the delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Delay {
    pub min_ns: i64,
    pub p50_ns: i64,
    pub p90_ns: i64,
    pub p99_ns: i64,
    pub max_ns: i64,
}

impl Delay {
    /// The distribution of `d` (sorted here); `None` when empty.
    pub fn of(d: &mut [i64]) -> Option<Delay> {
        d.sort_unstable();
        let q = |p: f64| d[(((d.len() - 1) as f64) * p).round() as usize];
        (!d.is_empty()).then(|| Delay {
            min_ns: d[0],
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            max_ns: d[d.len() - 1],
        })
    }
}

/// One second of a flow in which a point saw packets the other did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Second {
    /// Unix seconds (of A's clock for `a_only`, B's for `b_only`).
    pub second: u64,
    pub a_only: u64,
    pub b_only: u64,
}

/// One flow both points saw.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FlowDiff {
    pub flow: FlowId,
    pub a_packets: u64,
    pub b_packets: u64,
    pub matched: u64,
    /// Packets A saw and B did not.
    pub a_only: u64,
    /// Packets B saw and A did not.
    pub b_only: u64,
    pub delay: Option<Delay>,
    /// The seconds with unmatched packets, ascending.
    pub seconds: Vec<Second>,
    /// The first and last time (A's clock) of the packets A saw and B did not.
    pub a_only_span: Option<(u64, u64)>,
}

/// The two points compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// The flows both saw, those with unmatched packets first (most first), then by flow.
    pub flows: Vec<FlowDiff>,
    /// Indexes into A's packets of those B did not see (of flows both saw), ascending.
    pub a_only: Vec<usize>,
    /// Indexes into B's packets of those A did not see, ascending.
    pub b_only: Vec<usize>,
    /// Flows only one point saw, and their packets.
    pub only_a_flows: u64,
    pub only_a_packets: u64,
    pub only_b_flows: u64,
    pub only_b_packets: u64,
    /// Packets without a key (not IP) at each point: not compared.
    pub unkeyed: [u64; 2],
}

/// The pairs (index into `a`, index into `b`) of one key's packets (each side in time
/// order): `b - a` within `tol` of the flow's typical delay `est`, the closest pairs first,
/// each packet in one pair at most. A packet seen once at each point is one comparison;
/// a key repeated (a retransmission that reused its IP ID) pairs each copy with its
/// nearest twin. Past [`MAX_PAIRS`] candidates, time order decides (two pointers).
fn match_key(a: &[(u64, usize)], b: &[(u64, usize)], tol: i128, est: i128) -> Vec<(usize, usize)> {
    let off = |i: usize, j: usize| i128::from(b[j].0) - i128::from(a[i].0) - est;
    if a.len().saturating_mul(b.len()) > MAX_PAIRS {
        let (mut i, mut j, mut out) = (0, 0, Vec::new());
        while i < a.len() && j < b.len() {
            let d = off(i, j);
            if d < -tol {
                j += 1;
            } else if d > tol {
                i += 1;
            } else {
                out.push((i, j));
                i += 1;
                j += 1;
            }
        }
        return out;
    }
    let mut cands: Vec<(i128, usize, usize)> = Vec::new();
    for i in 0..a.len() {
        for j in 0..b.len() {
            let d = off(i, j);
            if d.abs() <= tol {
                cands.push((d.abs(), i, j));
            }
        }
    }
    cands.sort_unstable();
    let (mut ua, mut ub) = (vec![false; a.len()], vec![false; b.len()]);
    let mut out = Vec::new();
    for (_, i, j) in cands {
        if !ua[i] && !ub[j] {
            ua[i] = true;
            ub[j] = true;
            out.push((i, j));
        }
    }
    out
}

/// One key's packets at A and at B: (time, index into that side's packets), in time order.
type KeyPackets = [Vec<(u64, usize)>; 2];

/// Candidate pairs of one key past which matching goes by time order alone.
pub const MAX_PAIRS: usize = 4096;

/// Matches A's packets with B's (each in any order) within `tolerance_ns` of clock skew.
/// Only packets inside `window` (`[from, to)`) are counted and named (a matched pair when
/// A's packet is inside): the packets of both points are asked for the tolerance more on
/// each side, so that a packet inside the window always has its twin to match.
pub fn diff(a: &[Seen], b: &[Seen], tolerance_ns: u64, window: (u64, u64)) -> Diff {
    let inside = |ts: u64| ts >= window.0 && ts < window.1;
    let tol = i128::from(tolerance_ns);
    // Per key, the packets of each side in time order.
    let mut keys: HashMap<MatchKey, [Vec<(u64, usize)>; 2]> = HashMap::new();
    let mut out = Diff::default();
    for (side, seen) in [a, b].into_iter().enumerate() {
        for (i, s) in seen.iter().enumerate() {
            match s.key {
                Some(k) => keys.entry(k).or_default()[side].push((s.ts_ns, i)),
                None => out.unkeyed[side] += 1,
            }
        }
    }
    #[derive(Default)]
    struct Acc {
        packets: [u64; 2],
        matched: u64,
        delays: Vec<i64>,
        unmatched: [Vec<(u64, usize)>; 2],
    }
    // Per flow, its keys; and the flow's typical delay, from the keys seen once at each
    // point (their pairing is not in doubt).
    let mut by_flow: BTreeMap<FlowId, Vec<KeyPackets>> = BTreeMap::new();
    for (k, mut sides) in keys {
        for v in sides.iter_mut() {
            v.sort_unstable();
        }
        by_flow.entry(k.flow()).or_default().push(sides);
    }
    let mut flows: BTreeMap<FlowId, Acc> = BTreeMap::new();
    for (flow, keys) in by_flow {
        let mut single: Vec<i64> = keys
            .iter()
            .filter(|[x, y]| x.len() == 1 && y.len() == 1)
            .map(|[x, y]| i128::from(y[0].0) - i128::from(x[0].0))
            .filter(|d| d.abs() <= tol)
            .map(|d| d as i64)
            .collect();
        single.sort_unstable();
        let est = single.get(single.len() / 2).copied().map_or(0, i128::from);
        let acc = flows.entry(flow).or_default();
        for [xa, xb] in keys {
            acc.packets[0] += xa.iter().filter(|x| inside(x.0)).count() as u64;
            acc.packets[1] += xb.iter().filter(|x| inside(x.0)).count() as u64;
            let pairs = match_key(&xa, &xb, tol, est);
            let (mut used_a, mut used_b) = (vec![false; xa.len()], vec![false; xb.len()]);
            for (i, j) in pairs {
                used_a[i] = true;
                used_b[j] = true;
                if inside(xa[i].0) {
                    acc.matched += 1;
                    acc.delays
                        .push((i128::from(xb[j].0) - i128::from(xa[i].0)) as i64);
                }
            }
            for (s, (x, used)) in [(&xa, &used_a), (&xb, &used_b)].into_iter().enumerate() {
                acc.unmatched[s].extend(
                    x.iter()
                        .zip(used)
                        .filter(|(x, u)| !**u && inside(x.0))
                        .map(|(x, _)| *x),
                );
            }
        }
    }
    for (flow, mut acc) in flows {
        if acc.packets[1] == 0 {
            out.only_a_flows += 1;
            out.only_a_packets += acc.packets[0];
            continue;
        }
        if acc.packets[0] == 0 {
            out.only_b_flows += 1;
            out.only_b_packets += acc.packets[1];
            continue;
        }
        let mut seconds: BTreeMap<u64, [u64; 2]> = BTreeMap::new();
        for s in 0..2 {
            acc.unmatched[s].sort_unstable();
            for &(ts, _) in &acc.unmatched[s] {
                seconds.entry(ts / 1_000_000_000).or_default()[s] += 1;
            }
        }
        let a_un = &acc.unmatched[0];
        out.a_only.extend(a_un.iter().map(|&(_, i)| i));
        out.b_only.extend(acc.unmatched[1].iter().map(|&(_, i)| i));
        out.flows.push(FlowDiff {
            flow,
            a_packets: acc.packets[0],
            b_packets: acc.packets[1],
            matched: acc.matched,
            a_only: a_un.len() as u64,
            b_only: acc.unmatched[1].len() as u64,
            delay: Delay::of(&mut acc.delays),
            seconds: seconds
                .into_iter()
                .map(|(second, [a_only, b_only])| Second {
                    second,
                    a_only,
                    b_only,
                })
                .collect(),
            a_only_span: a_un.first().zip(a_un.last()).map(|(f, l)| (f.0, l.0)),
        });
    }
    out.a_only.sort_unstable();
    out.b_only.sort_unstable();
    out.flows.sort_by(|x, y| {
        (y.a_only + y.b_only)
            .cmp(&(x.a_only + x.b_only))
            .then(x.flow.cmp(&y.flow))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet/IPv4/TCP packet; `vlan` and `ttl` are what a hop may change.
    fn tcp(
        src: [u8; 4],
        sport: u16,
        id: u16,
        seq: u32,
        payload: &[u8],
        vlan: Option<u16>,
        ttl: u8,
    ) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        if let Some(v) = vlan {
            p.extend_from_slice(&0x8100u16.to_be_bytes());
            p.extend_from_slice(&v.to_be_bytes());
        }
        p.extend_from_slice(&0x0800u16.to_be_bytes());
        let total = (20 + 20 + payload.len()) as u16;
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&[0x40, 0, ttl, 6, 0xab, 0xcd]);
        p.extend_from_slice(&src);
        p.extend_from_slice(&[10, 0, 0, 9]);
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&443u16.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(payload);
        p
    }

    fn seen(ts: u64, p: &[u8]) -> Seen {
        Seen {
            ts_ns: ts,
            key: key(1, p),
        }
    }

    #[test]
    fn the_key_ignores_what_a_hop_changes_and_keeps_what_it_does_not() {
        let a = tcp([10, 0, 0, 1], 5000, 7, 1000, b"hello", None, 64);
        let b = tcp([10, 0, 0, 1], 5000, 7, 1000, b"hello", Some(20), 63);
        assert_eq!(key(1, &a), key(1, &b));
        for other in [
            tcp([10, 0, 0, 2], 5000, 7, 1000, b"hello", None, 64),
            tcp([10, 0, 0, 1], 5001, 7, 1000, b"hello", None, 64),
            tcp([10, 0, 0, 1], 5000, 8, 1000, b"hello", None, 64),
            tcp([10, 0, 0, 1], 5000, 7, 1001, b"hello", None, 64),
            tcp([10, 0, 0, 1], 5000, 7, 1000, b"hellp", None, 64),
            tcp([10, 0, 0, 1], 5000, 7, 1000, b"hello!", None, 64),
        ] {
            assert_ne!(key(1, &a), key(1, &other));
        }
        let k = key(1, &a).unwrap();
        assert_eq!((k.len, k.seq, k.ip_id, k.src_port), (25, 1000, 7, 5000));
        // Anything else: no key, never a panic.
        for n in 0..a.len() {
            let _ = key(1, &a[..n]);
            let _ = key(101, &a[..n]);
            let _ = key(276, &a[..n]);
        }
        assert_eq!(key(1, &[0u8; 14]), None);
        assert_eq!(key(999, &a), None);
    }

    #[test]
    fn packets_missing_at_either_point_are_named_and_delays_measured() {
        // 100 packets of one flow at A; B misses every 10th, sees them 300 µs later, and
        // sees one packet A did not; a second flow only A saw.
        let mut a = Vec::new();
        let mut b = Vec::new();
        let mut lost = Vec::new();
        for i in 0..100u32 {
            let p = tcp(
                [10, 0, 0, 1],
                5000,
                i as u16,
                1000 + i * 100,
                b"x",
                None,
                64,
            );
            let t = 1_000_000_000 + u64::from(i) * 10_000_000;
            a.push(seen(t, &p));
            if i % 10 == 9 {
                lost.push(a.len() - 1);
            } else {
                b.push(seen(t + 300_000 + u64::from(i % 3), &p));
            }
        }
        let reply = tcp([10, 0, 0, 9], 443, 9999, 5, b"ack", None, 64);
        b.push(seen(1_500_000_000, &reply));
        // A flow only A saw: not a loss.
        for i in 0..5u32 {
            let p = tcp([10, 0, 0, 7], 6000, i as u16, i, b"z", None, 64);
            a.push(seen(2_000_000_000 + u64::from(i), &p));
        }
        a.push(Seen {
            ts_ns: 5,
            key: None,
        });
        let d = diff(&a, &b, 100_000_000, (0, u64::MAX));
        assert_eq!(d.a_only, lost);
        assert_eq!((d.only_a_flows, d.only_a_packets), (1, 5));
        assert_eq!(
            (d.only_b_flows, d.only_b_packets),
            (1, 1),
            "the reply is its own flow here"
        );
        assert_eq!(d.unkeyed, [1, 0]);
        assert_eq!(d.flows.len(), 1);
        let f = &d.flows[0];
        assert_eq!(
            (f.a_packets, f.b_packets, f.matched, f.a_only, f.b_only),
            (100, 90, 90, 10, 0)
        );
        let delay = f.delay.unwrap();
        assert!(
            delay.min_ns >= 300_000 && delay.max_ns <= 300_002,
            "{delay:?}"
        );
        assert_eq!(f.seconds.iter().map(|s| s.a_only).sum::<u64>(), 10);
        assert_eq!(
            f.a_only_span,
            Some((a[lost[0]].ts_ns, a[*lost.last().unwrap()].ts_ns))
        );
        // Beyond the tolerance, nothing matches; B's packets are then B's alone.
        let d = diff(&a[..100], &b[..90], 1000, (0, u64::MAX));
        assert_eq!((d.a_only.len(), d.b_only.len()), (100, 90));
        // Copies of one key (a retransmission that reused its IP ID) pair with their
        // nearest twin at the flow's typical delay: B lost the first copy, not the second,
        // though the tolerance reaches both.
        let p = tcp([10, 0, 0, 1], 1, 1, 1, b"d", None, 64);
        let q = tcp([10, 0, 0, 1], 1, 2, 2, b"e", None, 64);
        let d = diff(
            &[seen(1000, &q), seen(10_000, &p), seen(200_000, &p)],
            &[seen(1300, &q), seen(200_300, &p)],
            1_000_000,
            (0, u64::MAX),
        );
        assert_eq!((d.a_only.clone(), d.flows[0].matched), (vec![1], 2));
        // Outside the window nothing is counted, though it is matched against.
        let d = diff(&a[..100], &b[..90], 100_000_000, (a[50].ts_ns, u64::MAX));
        assert_eq!(d.flows[0].a_packets, 50);
        assert_eq!(d.a_only, lost[5..].to_vec());
    }
}
