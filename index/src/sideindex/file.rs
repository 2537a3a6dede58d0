//! The index file: encoding, decoding (checked, never panicking), and writing it beside its
//! segment (tmp, fsync, rename). Byte layout: docs/format.md, "Side index".

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use capsule_store::format::DecodeError;
use capsule_store::fsx;
use capsule_store::{Result, SegmentReader, StoreError};
use capsule_wire::view::{Reader, Short, VarintError};

use super::series::{get_series, put_series, BlockSeries};
use super::{
    index_name, BlockSummary, Bucket, DscpChange, DscpCount, DscpState, EncapDir, FlowCounts,
    FlowEncap, FlowKey, FlowRecord, SegmentIndex, TcpState,
};

/// Index format version written by this build.
pub const INDEX_VERSION: u16 = 7;
/// The oldest index format version this build reads: version 3 is version 4 without the
/// cut-off's counters (no packet of its segment was cut), so it is read as is.
pub const INDEX_VERSION_MIN: u16 = 3;
const INDEX_MAGIC: [u8; 8] = *b"CPSLIDX\0";
pub(super) const HEADER_LEN: usize = 80;
/// The first index version with millisecond series.
pub const SERIES_VERSION: u16 = 5;
/// The first index version with the names table (each flow's application and names).
pub const NAMES_VERSION: u16 = 6;
/// The first index version with the encapsulation table (each flow's tunnel, per direction).
pub const TUNNELS_VERSION: u16 = 7;
const NO_VLAN: u16 = 0xFFFF;
/// Where the header's body CRC is.
const BODY_CRC_AT: usize = 56;

/// What [`SegmentIndex::peek`] reads of an index file's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexHeader {
    pub seq: u64,
    pub segment_len: u64,
    /// Flow records in the body.
    pub flows: u32,
    /// First and last packet time of the flows.
    pub span: Option<(u64, u64)>,
}

// ---- encoding ----------------------------------------------------------------------------

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_addr(out: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(v4) => {
            out.extend_from_slice(&v4.octets());
            out.extend_from_slice(&[0; 12]);
        }
        IpAddr::V6(v6) => out.extend_from_slice(&v6.octets()),
    }
}

/// A short read of index bytes (read with [`Reader`], front to back, so `offset + found` is
/// their length) as the error it is reported as.
pub(super) fn short(e: Short) -> DecodeError {
    DecodeError::Short {
        what: "segment index body",
        expected: e.end(),
        found: e.offset + e.found,
    }
}

/// A varint that could not be read, as the error it is reported as.
pub(super) fn bad_varint(e: VarintError) -> DecodeError {
    match e {
        VarintError::Short(e) => short(e),
        VarintError::TooLong { .. } => invalid("a varint longer than 10 bytes"),
    }
}

/// An address as the index stores it: 16 bytes, an IPv4 address in the first 4.
fn get_addr(c: &mut Reader<'_>, version: u8) -> std::result::Result<IpAddr, DecodeError> {
    let a = c.array::<16>().map_err(short)?;
    Ok(if version == 4 {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(a))
    })
}

pub(super) fn invalid(detail: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        what: "segment index",
        detail: detail.into(),
    }
}

fn vlan_in(v: u16) -> Option<u16> {
    (v != NO_VLAN).then_some(v)
}

/// Encodes one flow record as the index body holds it (docs/format.md, "Side index"); the
/// journal leaves out the block list (`with_blocks` false: it is the record's own block).
pub(super) fn put_flow(body: &mut Vec<u8>, f: &FlowRecord, with_blocks: bool) {
    put_flow_as(body, f, with_blocks, INDEX_VERSION);
}

/// [`put_flow`] in the layout of index version `version` (3: without the cut-off's
/// counters, which it drops; for tests that older files still read).
pub(super) fn put_flow_as(body: &mut Vec<u8>, f: &FlowRecord, with_blocks: bool, version: u16) {
    let k = &f.key;
    let t = &f.totals;
    for v in k.vlans {
        body.extend_from_slice(&v.unwrap_or(NO_VLAN).to_le_bytes());
    }
    body.push(k.ip_version);
    body.push(k.proto);
    body.push(u8::from(k.ports.is_some()));
    body.push(0);
    put_addr(body, k.a);
    put_addr(body, k.b);
    let (pa, pb) = k.ports.unwrap_or((0, 0));
    body.extend_from_slice(&pa.to_le_bytes());
    body.extend_from_slice(&pb.to_le_bytes());
    body.extend_from_slice(&t.first_ns.to_le_bytes());
    body.extend_from_slice(&t.last_ns.to_le_bytes());
    for d in 0..2 {
        body.extend_from_slice(&t.packets[d].to_le_bytes());
        body.extend_from_slice(&t.bytes[d].to_le_bytes());
        body.extend_from_slice(&t.dscp[d].to_le_bytes());
        body.push(t.tcp_flags[d]);
        put_varint(body, t.data[d]);
        put_varint(body, t.retransmissions[d]);
        put_varint(body, t.zero_windows[d]);
        put_varint(body, t.resets[d]);
        put_varint(body, t.zero_window_ns[d]);
        body.push(t.handshake[d]);
        put_varint(body, t.dscp_counts[d].len() as u64);
        for c in &t.dscp_counts[d] {
            body.push(c.dscp);
            put_varint(body, c.packets);
            put_varint(body, c.bytes);
        }
        match t.dscp_change[d] {
            None => body.push(0),
            Some(c) => {
                body.push(1);
                put_change(body, &c);
            }
        }
        // Version 4: what the cut-off did not store of this direction.
        if version >= 4 {
            put_varint(body, t.cut_packets[d]);
            put_varint(body, t.cut_bytes[d]);
            if t.cut_packets[d] > 0 {
                body.extend_from_slice(&t.cut_at_ns[d].unwrap_or(0).to_le_bytes());
            }
        }
    }
    put_state(body, &f.tcp_in);
    put_state(body, &f.tcp_out);
    if with_blocks {
        put_varint(body, f.blocks.len() as u64);
        let mut prev = 0u32;
        for &b in &f.blocks {
            put_varint(body, u64::from(b - prev));
            prev = b;
        }
    }
    put_varint(body, f.buckets.len() as u64);
    let mut prev = f.totals.first_ns / 1_000_000_000;
    for b in &f.buckets {
        put_varint(body, b.second - prev);
        prev = b.second;
        for d in 0..2 {
            for v in [
                b.packets[d],
                b.bytes[d],
                b.data[d],
                b.retransmissions[d],
                b.zero_windows[d],
                b.resets[d],
            ] {
                put_varint(body, v);
            }
        }
    }
}

/// Encodes a flow's carried state (docs/format.md, "flow state"): a presence byte, the high
/// marks with the time of the packet that set them, the open stall starts, then per
/// direction the packets counted and the DSCP state.
fn put_state(body: &mut Vec<u8>, st: &TcpState) {
    let mut bits = 0u8;
    for d in 0..2 {
        bits |= u8::from(st.high[d].is_some()) << d;
        bits |= u8::from(st.zero_since[d].is_some()) << (2 + d);
        bits |= u8::from(st.dscp[d].first.is_some()) << (4 + d);
        bits |= u8::from(st.dscp[d].change.is_some()) << (6 + d);
    }
    body.push(bits);
    for d in 0..2 {
        if let Some(v) = st.high[d] {
            body.extend_from_slice(&v.to_le_bytes());
            body.extend_from_slice(&st.high_ts[d].to_le_bytes());
        }
    }
    for v in st.zero_since.into_iter().flatten() {
        body.extend_from_slice(&v.to_le_bytes());
    }
    for d in 0..2 {
        put_varint(body, st.packets[d]);
        if let Some((ts, v)) = st.dscp[d].first {
            body.extend_from_slice(&ts.to_le_bytes());
            body.push(v);
        }
        if let Some(c) = st.dscp[d].change {
            put_change(body, &c);
        }
    }
}

fn put_change(body: &mut Vec<u8>, c: &DscpChange) {
    put_varint(body, c.ordinal);
    body.extend_from_slice(&c.ts_ns.to_le_bytes());
    body.push(c.from);
    body.push(c.to);
}

fn get_change(c: &mut Reader<'_>) -> std::result::Result<DscpChange, DecodeError> {
    let ch = DscpChange {
        ordinal: c.varint().map_err(bad_varint)?,
        ts_ns: c.u64_le().map_err(short)?,
        from: c.u8().map_err(short)?,
        to: c.u8().map_err(short)?,
    };
    if ch.from > 63 || ch.to > 63 {
        return Err(invalid(format!(
            "DSCP change from {} to {}: values above 63",
            ch.from, ch.to
        )));
    }
    Ok(ch)
}

fn get_state(c: &mut Reader<'_>) -> std::result::Result<TcpState, DecodeError> {
    let mut st = TcpState::default();
    read_state(c, Some(&mut st))?;
    Ok(st)
}

/// Reads a flow's carried state (checked), into `st` if given: the analytics decode checks
/// and drops it without building one (a copy of 200 bytes a record).
fn read_state(
    c: &mut Reader<'_>,
    mut st: Option<&mut TcpState>,
) -> std::result::Result<(), DecodeError> {
    let bits = c.u8().map_err(short)?;
    for d in 0..2 {
        if bits & (1 << d) != 0 {
            let high = c.u32_le().map_err(short)?;
            let ts = c.u64_le().map_err(short)?;
            if let Some(st) = st.as_deref_mut() {
                st.high[d] = Some(high);
                st.high_ts[d] = ts;
            }
        }
    }
    for d in 0..2 {
        if bits & (1 << (2 + d)) != 0 {
            let since = c.u64_le().map_err(short)?;
            if let Some(st) = st.as_deref_mut() {
                st.zero_since[d] = Some(since);
            }
        }
    }
    for d in 0..2 {
        let packets = c.varint().map_err(bad_varint)?;
        let mut ds = DscpState::default();
        if bits & (1 << (4 + d)) != 0 {
            let ts = c.u64_le().map_err(short)?;
            let v = c.u8().map_err(short)?;
            if v > 63 {
                return Err(invalid(format!("first DSCP {v} is above 63")));
            }
            ds.first = Some((ts, v));
        }
        if bits & (1 << (6 + d)) != 0 {
            ds.change = Some(get_change(c)?);
        }
        if let Some(st) = st.as_deref_mut() {
            st.packets[d] = packets;
            st.dscp[d] = ds;
        }
    }
    Ok(())
}

/// Decodes one flow record written by [`put_flow`]: with its block list (checked against
/// `n_blocks`) when `n_blocks` is given, without it otherwise. `body_len` bounds the bucket
/// count. Never panics.
pub(super) fn get_flow(
    c: &mut Reader<'_>,
    n_blocks: Option<usize>,
    body_len: usize,
    version: u16,
) -> std::result::Result<FlowRecord, DecodeError> {
    let head = get_head(c, version)?;
    let tcp_in = get_state(c)?;
    let tcp_out = get_state(c)?;
    let mut blocks = Vec::new();
    if let Some(n_blocks) = n_blocks {
        get_blocks(c, n_blocks, Some(&mut blocks))?;
    }
    let mut buckets = Vec::new();
    get_buckets(c, head.totals.first_ns, body_len, Some(&mut buckets))?;
    Ok(FlowRecord::from_counts(
        head, blocks, buckets, tcp_in, tcp_out,
    ))
}

/// Decodes one flow record as [`get_flow`] does, checks everything it checks, and keeps
/// only the counts: the carried TCP state and the block list are read and dropped, and so
/// are the buckets of a flow wholly inside `drop_buckets_within` (from, to).
pub(super) fn get_counts(
    c: &mut Reader<'_>,
    n_blocks: Option<usize>,
    body_len: usize,
    version: u16,
    drop_buckets_within: Option<(u64, u64)>,
) -> std::result::Result<FlowCounts, DecodeError> {
    let mut head = get_head(c, version)?;
    read_state(c, None)?;
    read_state(c, None)?;
    if let Some(n_blocks) = n_blocks {
        get_blocks(c, n_blocks, None)?;
    }
    let keep = drop_buckets_within
        .is_none_or(|(from, to)| head.totals.first_ns < from || head.totals.last_ns >= to);
    let first_ns = head.totals.first_ns;
    get_buckets(c, first_ns, body_len, keep.then_some(&mut head.buckets))?;
    Ok(head)
}

/// A flow record's key, times and counters, up to its carried state (no buckets yet).
fn get_head(c: &mut Reader<'_>, version: u16) -> std::result::Result<FlowCounts, DecodeError> {
    let vlans = [
        vlan_in(c.u16_le().map_err(short)?),
        vlan_in(c.u16_le().map_err(short)?),
    ];
    let ip_version = c.u8().map_err(short)?;
    if ip_version != 4 && ip_version != 6 {
        return Err(invalid(format!("flow with IP version {ip_version}")));
    }
    let proto = c.u8().map_err(short)?;
    let has_ports = c.u8().map_err(short)? != 0;
    c.u8().map_err(short)?;
    let a = get_addr(c, ip_version)?;
    let b = get_addr(c, ip_version)?;
    let (pa, pb) = (c.u16_le().map_err(short)?, c.u16_le().map_err(short)?);
    let first_ns = c.u64_le().map_err(short)?;
    let last_ns = c.u64_le().map_err(short)?;
    let mut f = FlowCounts::new(
        FlowKey {
            vlans,
            ip_version,
            proto,
            a,
            b,
            ports: has_ports.then_some((pa, pb)),
        },
        first_ns,
        last_ns,
    );
    let t = &mut f.totals;
    for d in 0..2 {
        t.packets[d] = c.u64_le().map_err(short)?;
        t.bytes[d] = c.u64_le().map_err(short)?;
        t.dscp[d] = c.u64_le().map_err(short)?;
        t.tcp_flags[d] = c.u8().map_err(short)?;
        t.data[d] = c.varint().map_err(bad_varint)?;
        t.retransmissions[d] = c.varint().map_err(bad_varint)?;
        t.zero_windows[d] = c.varint().map_err(bad_varint)?;
        t.resets[d] = c.varint().map_err(bad_varint)?;
        t.zero_window_ns[d] = c.varint().map_err(bad_varint)?;
        t.handshake[d] = c.u8().map_err(short)?;
        let n = c.varint().map_err(bad_varint)?;
        if n > 64 {
            return Err(invalid(format!("flow lists {n} DSCP values")));
        }
        let mut prev: Option<u8> = None;
        for _ in 0..n {
            let dscp = c.u8().map_err(short)?;
            if dscp > 63 || prev.is_some_and(|p| p >= dscp) {
                return Err(invalid(format!(
                    "DSCP counter for value {dscp} out of order or range"
                )));
            }
            prev = Some(dscp);
            let packets = c.varint().map_err(bad_varint)?;
            let bytes = c.varint().map_err(bad_varint)?;
            t.dscp_counts[d].push(DscpCount {
                dscp,
                packets,
                bytes,
            });
        }
        t.dscp_change[d] = match c.u8().map_err(short)? {
            0 => None,
            1 => Some(get_change(c)?),
            v => return Err(invalid(format!("DSCP change presence byte {v}"))),
        };
        if version >= 4 {
            t.cut_packets[d] = c.varint().map_err(bad_varint)?;
            t.cut_bytes[d] = c.varint().map_err(bad_varint)?;
            if t.cut_packets[d] > t.packets[d] || t.cut_bytes[d] > t.bytes[d] {
                return Err(invalid(format!(
                    "flow direction {d} has {} packets ({} bytes) cut of {} ({} bytes) seen",
                    t.cut_packets[d], t.cut_bytes[d], t.packets[d], t.bytes[d]
                )));
            }
            if t.cut_packets[d] > 0 {
                t.cut_at_ns[d] = Some(c.u64_le().map_err(short)?);
            }
        }
    }
    Ok(f)
}

/// A flow record's block list, checked against `n_blocks`; kept in `keep` if given.
fn get_blocks(
    c: &mut Reader<'_>,
    n_blocks: usize,
    mut keep: Option<&mut Vec<u32>>,
) -> std::result::Result<(), DecodeError> {
    let nb = c.varint().map_err(bad_varint)?;
    if nb > n_blocks as u64 {
        return Err(invalid(format!("flow lists {nb} blocks of {n_blocks}")));
    }
    let mut prev = 0u64;
    for _ in 0..nb {
        prev += c.varint().map_err(bad_varint)?;
        if prev >= n_blocks as u64 {
            return Err(invalid(format!("flow names block {prev} of {n_blocks}")));
        }
        if let Some(k) = keep.as_deref_mut() {
            k.push(prev as u32);
        }
    }
    Ok(())
}

/// A flow record's 1-second buckets (the first relative to `first_ns`'s second), into `out`
/// as [`Bucket`]s or [`super::CountsBucket`]s (checked and dropped without it).
fn get_buckets<B: From<Bucket>>(
    c: &mut Reader<'_>,
    first_ns: u64,
    body_len: usize,
    mut out: Option<&mut Vec<B>>,
) -> std::result::Result<(), DecodeError> {
    let nbk = c.varint().map_err(bad_varint)?;
    if nbk > body_len as u64 {
        return Err(invalid(format!("flow lists {nbk} buckets")));
    }
    let mut second = first_ns / 1_000_000_000;
    // Each bucket takes at least 13 bytes: no more are reserved than the body could hold.
    if let Some(o) = out.as_deref_mut() {
        o.reserve_exact((nbk as usize).min(body_len / 13));
    }
    for _ in 0..nbk {
        second = second.saturating_add(c.varint().map_err(bad_varint)?);
        let mut bk = Bucket {
            second,
            ..Bucket::default()
        };
        for d in 0..2 {
            bk.packets[d] = c.varint().map_err(bad_varint)?;
            bk.bytes[d] = c.varint().map_err(bad_varint)?;
            bk.data[d] = c.varint().map_err(bad_varint)?;
            bk.retransmissions[d] = c.varint().map_err(bad_varint)?;
            bk.zero_windows[d] = c.varint().map_err(bad_varint)?;
            bk.resets[d] = c.varint().map_err(bad_varint)?;
        }
        if let Some(o) = out.as_deref_mut() {
            o.push(B::from(bk));
        }
    }
    Ok(())
}

/// An index decoded by [`SegmentIndex::decode_counts`]: its segment and its flows' counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountsIndex {
    pub seq: u64,
    pub segment_len: u64,
    /// Blocks the index describes.
    pub blocks: usize,
    pub flows: Vec<FlowCounts>,
    /// The index keeps its flows' names (version 6 and later).
    pub named: bool,
    /// The index keeps its flows' encapsulations (version 7 and later).
    pub tunnels: bool,
}

/// What the header says of a checked index body.
struct BodyHeader {
    version: u16,
    seq: u64,
    segment_len: u64,
    n_blocks: usize,
    n_flows: usize,
}

fn get_block_summaries(
    c: &mut Reader<'_>,
    n_blocks: usize,
) -> std::result::Result<Vec<BlockSummary>, DecodeError> {
    let mut blocks = Vec::with_capacity(n_blocks.min(1 << 20));
    for _ in 0..n_blocks {
        blocks.push(BlockSummary {
            dscp: c.u64_le().map_err(short)?,
            ip_packets: c.u32_le().map_err(short)?,
            non_ip_packets: c.u32_le().map_err(short)?,
            malformed_packets: c.u32_le().map_err(short)?,
        });
    }
    Ok(blocks)
}

/// An index decoded by [`SegmentIndex::decode_series`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesIndex {
    pub seq: u64,
    pub segment_len: u64,
    /// One series per block; `None`: the index predates the series (version 4 or 3).
    pub series: Option<Vec<BlockSeries>>,
}

/// The series section of a version 5 body (its length, then one series per block): decoded
/// when `decode`, else skipped by its length. `None` for earlier versions.
fn get_series_section(
    c: &mut Reader<'_>,
    h: &BodyHeader,
    decode: bool,
) -> std::result::Result<Option<Vec<BlockSeries>>, DecodeError> {
    if h.version < SERIES_VERSION {
        return Ok(None);
    }
    let len = c.u64_le().map_err(short)?;
    if len > c.remaining() as u64 {
        return Err(invalid(format!(
            "series section of {len} bytes, {} left in the body",
            c.remaining()
        )));
    }
    let section = c.take(len as usize).map_err(short)?;
    if !decode {
        return Ok(Some(Vec::new()));
    }
    let mut s = Reader::new(section);
    let mut out = Vec::with_capacity(h.n_blocks.min(1 << 20));
    for _ in 0..h.n_blocks {
        out.push(get_series(&mut s)?);
    }
    if s.remaining() != 0 {
        return Err(invalid(format!(
            "{} bytes left over after the series of {} blocks",
            s.remaining(),
            h.n_blocks
        )));
    }
    Ok(Some(out))
}

fn all_read(c: &Reader<'_>, len: usize) -> std::result::Result<(), DecodeError> {
    if c.position() != len {
        return Err(invalid(format!(
            "{} bytes left over after the flows",
            len - c.position()
        )));
    }
    Ok(())
}

/// Encodes an index file of segment `seq` (`segment_len` bytes) from its block summaries and
/// flows, in the layout of index `version`, its body compressed at zstd `level`: what
/// [`SegmentIndex::encode`] writes (level 3), and what the open segment's fold checkpoint
/// holds (from the builder's records, without copying them).
///
/// Version 5 and later hold each block's millisecond series: `series` must then have one
/// per block (a missing one is written empty); without series, ask for version 4.
pub(super) fn encode_index(
    seq: u64,
    segment_len: u64,
    blocks: &[BlockSummary],
    flows: &[FlowRecord],
    series: Option<&[BlockSeries]>,
    version: u16,
    level: i32,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(blocks.len() * 16 + flows.len() * 160);
    for b in blocks {
        body.extend_from_slice(&b.dscp.to_le_bytes());
        body.extend_from_slice(&b.ip_packets.to_le_bytes());
        body.extend_from_slice(&b.non_ip_packets.to_le_bytes());
        body.extend_from_slice(&b.malformed_packets.to_le_bytes());
    }
    if version >= SERIES_VERSION {
        // The section's length first, so that a reader of the flows skips it unread.
        let at = body.len();
        body.extend_from_slice(&0u64.to_le_bytes());
        let empty = BlockSeries::default();
        for i in 0..blocks.len() {
            let s = series.and_then(|s| s.get(i)).unwrap_or(&empty);
            put_series(&mut body, s);
        }
        let len = (body.len() - at - 8) as u64;
        body[at..at + 8].copy_from_slice(&len.to_le_bytes());
    }
    for f in flows {
        put_flow_as(&mut body, f, true, version);
    }
    if version >= NAMES_VERSION {
        put_names_section(&mut body, flows.iter().map(|f| f.totals.names.as_deref()));
    }
    if version >= TUNNELS_VERSION {
        put_encap_section(&mut body, flows.iter().map(|f| f.totals.encap.as_deref()));
    }
    let compressed =
        zstd::bulk::compress(&body, level).expect("compressing into a Vec cannot fail");
    let mut out = Vec::with_capacity(HEADER_LEN + compressed.len());
    out.extend_from_slice(&INDEX_MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&segment_len.to_le_bytes());
    out.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
    out.extend_from_slice(&(flows.len() as u32).to_le_bytes());
    out.extend_from_slice(&(compressed.len() as u64).to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&capsule_store::crc::crc32c(&compressed).to_le_bytes());
    let first = flows
        .iter()
        .map(|f| f.totals.first_ns)
        .min()
        .unwrap_or(u64::MAX);
    let last = flows.iter().map(|f| f.totals.last_ns).max().unwrap_or(0);
    out.extend_from_slice(&first.to_le_bytes());
    out.extend_from_slice(&last.to_le_bytes());
    let crc = capsule_store::crc::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(out.len(), HEADER_LEN);
    out.extend_from_slice(&compressed);
    out
}

impl SegmentIndex {
    /// Encodes the index file: an 80-byte header, then the zstd-compressed body.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(INDEX_VERSION)
    }

    /// Encodes the index file in the layout of `version` (3 or 4), for tests that files of
    /// an older version still read.
    pub(crate) fn encode_as(&self, version: u16) -> Vec<u8> {
        // An index read from a file of an earlier version has no series: it is written
        // in that layout (version 4), never as a version 5 index claiming empty series.
        let version = match self.series {
            None => version.min(SERIES_VERSION - 1),
            Some(_) => version,
        };
        // Nor one without names as a version 6 index claiming it has them, nor one without
        // encapsulations as a version 7 index claiming its flows arrived in none.
        let version = if self.named {
            version
        } else {
            version.min(NAMES_VERSION - 1)
        };
        let version = if self.tunnels {
            version
        } else {
            version.min(TUNNELS_VERSION - 1)
        };
        encode_index(
            self.seq,
            self.segment_len,
            &self.blocks,
            &self.flows,
            self.series.as_deref(),
            version,
            3,
        )
    }

    /// The first and last packet time of the index's flows, if it has any.
    pub fn span(&self) -> Option<(u64, u64)> {
        let first = self.flows.iter().map(|f| f.totals.first_ns).min()?;
        let last = self.flows.iter().map(|f| f.totals.last_ns).max()?;
        Some((first, last))
    }

    /// Reads an index file's header only (magic, version and header CRC checked): its
    /// segment, segment length and flows' span (`None` for no flows), so that a reader can
    /// skip an index outside its window without decompressing the body.
    pub fn peek(b: &[u8]) -> Option<IndexHeader> {
        let h = b.first_chunk::<HEADER_LEN>()?;
        if h[..8] != INDEX_MAGIC
            || !(INDEX_VERSION_MIN..=INDEX_VERSION).contains(&u16::from_le_bytes([h[8], h[9]]))
            || capsule_store::crc::crc32c(&h[..HEADER_LEN - 4])
                != u32::from_le_bytes(h[HEADER_LEN - 4..].try_into().ok()?)
        {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap_or_default());
        let (first, last) = (u64_at(60), u64_at(68));
        Some(IndexHeader {
            seq: u64_at(16),
            segment_len: u64_at(24),
            flows: u32::from_le_bytes([h[36], h[37], h[38], h[39]]),
            span: (first <= last).then_some((first, last)),
        })
    }

    /// [`SegmentIndex::peek`] of the index file at `path`, reading its header only; `None`
    /// when it cannot be read or is not an index header.
    pub fn peek_file(path: &Path) -> Option<IndexHeader> {
        use std::io::Read;
        let mut h = [0u8; HEADER_LEN];
        std::fs::File::open(path).ok()?.read_exact(&mut h).ok()?;
        Self::peek(&h)
    }

    /// Decodes an index file. Never panics; every failure names what was wrong.
    pub fn decode(b: &[u8]) -> std::result::Result<Self, DecodeError> {
        let (h, body) = Self::open_body(b)?;
        let mut c = Reader::new(&body);
        let blocks = get_block_summaries(&mut c, h.n_blocks)?;
        let series = get_series_section(&mut c, &h, true)?;
        let mut flows = Vec::with_capacity(h.n_flows.min(1 << 20));
        for _ in 0..h.n_flows {
            flows.push(get_flow(&mut c, Some(h.n_blocks), body.len(), h.version)?);
        }
        if h.version >= NAMES_VERSION {
            for (i, n) in get_names_section(&mut c, flows.len())? {
                flows[i].totals.names = Some(Box::new(n));
            }
        }
        if h.version >= TUNNELS_VERSION {
            for (i, e) in get_encap_section(&mut c, flows.len())? {
                flows[i].totals.encap = Some(Box::new(e));
            }
        }
        all_read(&c, body.len())?;
        Ok(SegmentIndex {
            seq: h.seq,
            segment_len: h.segment_len,
            blocks,
            flows,
            series,
            named: h.version >= NAMES_VERSION,
            tunnels: h.version >= TUNNELS_VERSION,
        })
    }

    /// Decodes an index file's millisecond series only (the flows are not decoded): its
    /// segment, segment length, and each block's series, `None` for an index of a version
    /// before 5 (it has none).
    pub fn decode_series(b: &[u8]) -> std::result::Result<SeriesIndex, DecodeError> {
        let (h, body) = Self::open_body(b)?;
        let mut c = Reader::new(&body);
        get_block_summaries(&mut c, h.n_blocks)?;
        Ok(SeriesIndex {
            seq: h.seq,
            segment_len: h.segment_len,
            series: get_series_section(&mut c, &h, true)?,
        })
    }

    /// Decodes an index file as [`SegmentIndex::decode`] does (the same checks, the same
    /// errors) into the flows' counts only: no block summaries, block lists or carried TCP
    /// state are kept, nor the buckets of flows wholly inside `drop_buckets_within`
    /// ([from, to) in nanoseconds), when given. What the analytics listing reads.
    pub fn decode_counts(
        b: &[u8],
        drop_buckets_within: Option<(u64, u64)>,
    ) -> std::result::Result<CountsIndex, DecodeError> {
        let (h, body) = Self::open_body(b)?;
        let mut c = Reader::new(&body);
        get_block_summaries(&mut c, h.n_blocks)?;
        get_series_section(&mut c, &h, false)?;
        let mut flows = Vec::with_capacity(h.n_flows.min(1 << 20));
        for _ in 0..h.n_flows {
            flows.push(get_counts(
                &mut c,
                Some(h.n_blocks),
                body.len(),
                h.version,
                drop_buckets_within,
            )?);
        }
        if h.version >= NAMES_VERSION {
            for (i, n) in get_names_section(&mut c, flows.len())? {
                flows[i].totals.names = Some(Box::new(n));
            }
        }
        if h.version >= TUNNELS_VERSION {
            for (i, e) in get_encap_section(&mut c, flows.len())? {
                flows[i].totals.encap = Some(Box::new(e));
            }
        }
        all_read(&c, body.len())?;
        Ok(CountsIndex {
            seq: h.seq,
            segment_len: h.segment_len,
            blocks: h.n_blocks,
            flows,
            named: h.version >= NAMES_VERSION,
            tunnels: h.version >= TUNNELS_VERSION,
        })
    }

    /// Checks an index file's header and body checksum and decompresses the body.
    fn open_body(b: &[u8]) -> std::result::Result<(BodyHeader, Vec<u8>), DecodeError> {
        const W: &str = "segment index";
        if b.len() < HEADER_LEN {
            return Err(DecodeError::Short {
                what: W,
                expected: HEADER_LEN,
                found: b.len(),
            });
        }
        if b[..8] != INDEX_MAGIC {
            return Err(DecodeError::Magic {
                what: W,
                expected: "CPSLIDX".into(),
                found: format!("{:02x?}", &b[..8]),
            });
        }
        let mut h = Reader::new(&b[..HEADER_LEN]).at(8);
        let version = h.u16_le().map_err(short)?;
        if !(INDEX_VERSION_MIN..=INDEX_VERSION).contains(&version) {
            return Err(DecodeError::Version {
                what: W,
                expected: INDEX_VERSION,
                found: version,
            });
        }
        h.skip(6).map_err(short)?;
        let seq = h.u64_le().map_err(short)?;
        let segment_len = h.u64_le().map_err(short)?;
        let n_blocks = h.u32_le().map_err(short)? as usize;
        let n_flows = h.u32_le().map_err(short)? as usize;
        let clen = h.u64_le().map_err(short)?;
        let ulen = h.u64_le().map_err(short)?;
        let body_crc = h.u32_le().map_err(short)?;
        h.skip(16).map_err(short)?; // the span, derived from the flows
        let stored = h.u32_le().map_err(short)?;
        let computed = capsule_store::crc::crc32c(&b[..HEADER_LEN - 4]);
        if stored != computed {
            return Err(DecodeError::Checksum {
                what: "segment index header",
                stored,
                computed,
            });
        }
        let compressed = &b[HEADER_LEN..];
        if compressed.len() as u64 != clen {
            return Err(invalid(format!(
                "body is {} bytes, header says {clen}",
                compressed.len()
            )));
        }
        let computed = capsule_store::crc::crc32c(compressed);
        if computed != body_crc {
            return Err(DecodeError::Checksum {
                what: "segment index body",
                stored: body_crc,
                computed,
            });
        }
        if ulen > 1 << 32 {
            return Err(invalid(format!(
                "body of {ulen} bytes is implausibly large"
            )));
        }
        // One decompression context per thread, reused: making one (ZSTD_createDCtx) cost
        // more than decoding a small index (a sixth of `top` over 100,000 segments).
        thread_local! {
            static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
                const { std::cell::RefCell::new(None) };
        }
        let body = DCTX
            .with(|d| {
                let mut d = d.borrow_mut();
                if d.is_none() {
                    *d = zstd::bulk::Decompressor::new().ok();
                }
                match d.as_mut() {
                    Some(d) => d.decompress(compressed, ulen as usize),
                    None => zstd::bulk::decompress(compressed, ulen as usize),
                }
            })
            .map_err(|e| invalid(format!("body does not decompress: {e}")))?;
        Ok((
            BodyHeader {
                version,
                seq,
                segment_len,
                n_blocks,
                n_flows,
            },
            body,
        ))
    }

    /// Writes the index for its segment into `dir` (tmp file with an unpredictable name,
    /// fsync, rename: [`fsx::write_atomic`]).
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        fsx::create_dir(dir)?;
        let path = dir.join(index_name(self.seq));
        fsx::write_atomic(&path, &self.encode())?;
        Ok(path)
    }

    /// Whether `dir` holds a readable index header describing `seg` exactly (its sequence
    /// number, length and block count) and whose body is intact (its crc32c holds).
    pub fn is_current(dir: &Path, seg: &SegmentReader) -> bool {
        let Ok(file) = fsx::read(&dir.join(index_name(seg.seq())), "read index") else {
            return false;
        };
        let Some(h) = file.first_chunk::<HEADER_LEN>() else {
            return false;
        };
        if h[..8] != INDEX_MAGIC {
            return false;
        }
        let mut c = Reader::new(h).at(8);
        let header = (|| -> std::result::Result<bool, DecodeError> {
            let version = c.u16_le().map_err(short)?;
            c.skip(6).map_err(short)?;
            let (seq, len, blocks) = (
                c.u64_le().map_err(short)?,
                c.u64_le().map_err(short)?,
                c.u32_le().map_err(short)?,
            );
            let body_crc = c.at(BODY_CRC_AT).u32_le().map_err(short)?;
            let stored = c.at(HEADER_LEN - 4).u32_le().map_err(short)?;
            // The body too: a damaged body behind an intact header is not current.
            Ok((INDEX_VERSION_MIN..=INDEX_VERSION).contains(&version)
                && body_crc == capsule_store::crc::crc32c(&file[HEADER_LEN..])
                && stored == capsule_store::crc::crc32c(&h[..HEADER_LEN - 4])
                && seq == seg.seq()
                && len == seg.bytes()
                && blocks as usize == seg.blocks().len())
        })();
        header.unwrap_or(false)
    }

    /// [`SegmentIndex::load`] decoding the flows' counts only
    /// ([`SegmentIndex::decode_counts`], `drop_buckets_within` as there): what a flow listing
    /// reads. `None` when the index is missing or describes another file.
    pub fn load_counts(
        dir: &Path,
        seg: &SegmentReader,
        drop_buckets_within: Option<(u64, u64)>,
    ) -> Result<Option<CountsIndex>> {
        let path = dir.join(index_name(seg.seq()));
        let bytes = match fsx::read(&path, "read index") {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let idx = SegmentIndex::decode_counts(&bytes, drop_buckets_within).map_err(|problem| {
            StoreError::DerivedDamaged {
                path: path.clone(),
                problem,
            }
        })?;
        if idx.seq != seg.seq()
            || idx.segment_len != seg.bytes()
            || idx.blocks != seg.blocks().len()
        {
            return Ok(None);
        }
        Ok(Some(idx))
    }

    /// Loads segment `seg`'s index from `dir`. `Ok(None)` when it is missing or describes a
    /// different file (stale); an unreadable index is an error naming the file.
    pub fn load(dir: &Path, seg: &SegmentReader) -> Result<Option<Self>> {
        let path = dir.join(index_name(seg.seq()));
        let bytes = match fsx::read(&path, "read index") {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let idx = SegmentIndex::decode(&bytes).map_err(|problem| StoreError::DerivedDamaged {
            path: path.clone(),
            problem,
        })?;
        if idx.seq != seg.seq()
            || idx.segment_len != seg.bytes()
            || idx.blocks.len() != seg.blocks().len()
        {
            return Ok(None);
        }
        Ok(Some(idx))
    }
}

/// Writes the names table (index version 6, docs/format.md): its length in bytes (u64 LE),
/// the number of entries (varint), then per flow that has names, ascending: its position in
/// the flows section (varint) and its names record.
pub(super) fn put_names_section<'a>(
    body: &mut Vec<u8>,
    names: impl Iterator<Item = Option<&'a capsule_names::FlowNames>>,
) {
    put_table(body, names, put_names);
}

/// A per-flow table after the flows (names, encapsulations): its length in bytes (u64 LE),
/// the number of entries (varint), then per flow that has an entry, ascending: its position
/// in the flows section (varint) and its record as `put` writes it.
fn put_table<'a, T: 'a>(
    body: &mut Vec<u8>,
    items: impl Iterator<Item = Option<&'a T>>,
    put: impl Fn(&mut Vec<u8>, &T),
) {
    let at = body.len();
    body.extend_from_slice(&0u64.to_le_bytes());
    let mut entries = Vec::new();
    let mut n = 0u64;
    for (i, item) in items.enumerate() {
        if let Some(item) = item {
            put_varint(&mut entries, i as u64);
            put(&mut entries, item);
            n += 1;
        }
    }
    put_varint(body, n);
    body.extend_from_slice(&entries);
    let len = (body.len() - at - 8) as u64;
    body[at..at + 8].copy_from_slice(&len.to_le_bytes());
}

/// Reads a per-flow table written by [`put_table`] (`what` names it in errors) of an index
/// whose flows section held `n_flows` flows: (flow position, record) per entry.
fn get_table<T>(
    c: &mut Reader<'_>,
    n_flows: usize,
    what: &str,
    get: impl Fn(&mut Reader<'_>) -> std::result::Result<T, DecodeError>,
) -> std::result::Result<Vec<(usize, T)>, DecodeError> {
    let len = c.u64_le().map_err(short)?;
    let start = c.position();
    let count = c.varint().map_err(bad_varint)?;
    if count > n_flows as u64 {
        return Err(invalid(format!(
            "{what} of {count} entries for {n_flows} flows"
        )));
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut last: Option<usize> = None;
    for _ in 0..count {
        let i = c.varint().map_err(bad_varint)?;
        if i >= n_flows as u64 || last.is_some_and(|l| i as usize <= l) {
            return Err(invalid(format!("{what} entry for flow {i}")));
        }
        last = Some(i as usize);
        out.push((i as usize, get(c)?));
    }
    if (c.position() - start) as u64 != len {
        return Err(invalid(format!(
            "{what} is {} bytes, its length says {len}",
            c.position() - start
        )));
    }
    Ok(out)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// One flow's names record: app code (u8), presence bits (u8: 1 SNI, 2 JA4, 4 HTTP host,
/// 8 HTTP method, 16 SSH a->b, 32 SSH b->a; 64: the side that sent the first payload is
/// known, 128: it is b), those strings in bit order, then the ALPN values, DNS query names
/// and DNS answers, each list a varint count first.
fn put_names(out: &mut Vec<u8>, n: &capsule_names::FlowNames) {
    out.push(n.app as u8);
    let opts = [
        n.sni.as_deref(),
        n.ja4.as_deref(),
        n.http_host.as_deref(),
        n.http_method.as_deref(),
        n.ssh[0].as_deref(),
        n.ssh[1].as_deref(),
    ];
    let bits = opts
        .iter()
        .enumerate()
        .fold(0u8, |b, (k, o)| b | (u8::from(o.is_some()) << k));
    let client = match n.client {
        None => 0,
        Some(0) => 64,
        Some(_) => 64 | 128,
    };
    out.push(bits | client);
    for s in opts.into_iter().flatten() {
        put_str(out, s);
    }
    put_varint(out, n.alpn.len() as u64);
    for s in &n.alpn {
        put_str(out, s);
    }
    put_varint(out, n.dns_queries.len() as u64);
    for s in &n.dns_queries {
        put_str(out, s);
    }
    put_varint(out, n.dns_answers.len() as u64);
    for (s, a) in &n.dns_answers {
        put_str(out, s);
        match a {
            IpAddr::V4(_) => out.push(4),
            IpAddr::V6(_) => out.push(6),
        }
        put_addr(out, *a);
    }
}

fn get_str(c: &mut Reader<'_>) -> std::result::Result<String, DecodeError> {
    let len = c.varint().map_err(bad_varint)?;
    if len > capsule_names::MAX_NAME as u64 * 2 {
        return Err(invalid(format!("a name of {len} bytes in the names table")));
    }
    let b = c.take(len as usize).map_err(short)?;
    String::from_utf8(b.to_vec()).map_err(|_| invalid("a name that is not UTF-8"))
}

fn get_count(c: &mut Reader<'_>, max: usize) -> std::result::Result<usize, DecodeError> {
    let n = c.varint().map_err(bad_varint)?;
    if n > max as u64 {
        return Err(invalid(format!(
            "{n} entries in a names list of at most {max}"
        )));
    }
    Ok(n as usize)
}

fn get_names(c: &mut Reader<'_>) -> std::result::Result<capsule_names::FlowNames, DecodeError> {
    let mut n = capsule_names::FlowNames {
        app: capsule_names::App::from_code(c.u8().map_err(short)?),
        ..Default::default()
    };
    let bits = c.u8().map_err(short)?;
    let mut opts: [Option<String>; 6] = Default::default();
    for (k, o) in opts.iter_mut().enumerate() {
        if bits & (1 << k) != 0 {
            *o = Some(get_str(c)?);
        }
    }
    let [sni, ja4, host, method, ssh0, ssh1] = opts;
    n.client = (bits & 64 != 0).then_some(u8::from(bits & 128 != 0));
    (n.sni, n.ja4, n.http_host, n.http_method, n.ssh) = (sni, ja4, host, method, [ssh0, ssh1]);
    for _ in 0..get_count(c, capsule_names::MAX_ALPN)? {
        n.alpn.push(get_str(c)?);
    }
    for _ in 0..get_count(c, capsule_names::MAX_DNS_NAMES)? {
        n.dns_queries.push(get_str(c)?);
    }
    for _ in 0..get_count(c, capsule_names::MAX_DNS_ANSWERS)? {
        let s = get_str(c)?;
        let v = c.u8().map_err(short)?;
        if v != 4 && v != 6 {
            return Err(invalid(format!("address family {v} in the names table")));
        }
        n.dns_answers.push((s, get_addr(c, v)?));
    }
    Ok(n)
}

/// Reads the names table of a version 6 index whose flows section held `n_flows` flows:
/// (flow position, names) per entry.
pub(super) fn get_names_section(
    c: &mut Reader<'_>,
    n_flows: usize,
) -> std::result::Result<Vec<(usize, capsule_names::FlowNames)>, DecodeError> {
    get_table(c, n_flows, "names table", get_names)
}

/// Writes the encapsulation table (index version 7, docs/format.md): its length in bytes
/// (u64 LE), the number of entries (varint), then per flow that arrived in some
/// encapsulation, ascending: its position in the flows section (varint) and its record.
pub(super) fn put_encap_section<'a>(
    body: &mut Vec<u8>,
    encaps: impl Iterator<Item = Option<&'a FlowEncap>>,
) {
    let some = encaps.map(|e| e.filter(|e| e.dirs.iter().any(Option::is_some)));
    put_table(body, some, put_encap);
}

/// Presence bits of an encapsulation record's direction.
const ENC_OUTER: u8 = 1;
const ENC_OUTER_V6: u8 = 2;
const ENC_ID: u8 = 4;
const ENC_MPLS: u8 = 8;
const ENC_MIXED: u8 = 16;

/// One flow's encapsulation record: a byte of directions present (bit 0: a -> b, bit 1:
/// b -> a), then per direction present: kind (u8, 1..=7), bits (1 outer endpoints, 2 they
/// are IPv6, 4 identifier, 8 MPLS label, 16 mixed), the outer source and destination (4 or
/// 16 bytes each), the identifier (u32 LE), the label (varint), layers (u8), encapsulated
/// packets (varint), outer DSCP mask (varint).
fn put_encap(out: &mut Vec<u8>, e: &FlowEncap) {
    out.push(u8::from(e.dirs[0].is_some()) | (u8::from(e.dirs[1].is_some()) << 1));
    for d in e.dirs.iter().flatten() {
        out.push(d.kind.number());
        let v6 = matches!(d.outer, Some((IpAddr::V6(_), _) | (_, IpAddr::V6(_))));
        let bits = if d.outer.is_some() { ENC_OUTER } else { 0 }
            | if v6 { ENC_OUTER_V6 } else { 0 }
            | if d.id.is_some() { ENC_ID } else { 0 }
            | if d.mpls.is_some() { ENC_MPLS } else { 0 }
            | if d.mixed { ENC_MIXED } else { 0 };
        out.push(bits);
        if let Some((s, t)) = d.outer {
            for a in [s, t] {
                match (a, v6) {
                    (IpAddr::V4(v4), false) => out.extend_from_slice(&v4.octets()),
                    (IpAddr::V4(v4), true) => out.extend_from_slice(&v4.to_ipv6_mapped().octets()),
                    (IpAddr::V6(v6), _) => out.extend_from_slice(&v6.octets()),
                }
            }
        }
        if let Some(id) = d.id {
            out.extend_from_slice(&id.to_le_bytes());
        }
        if let Some(l) = d.mpls {
            put_varint(out, u64::from(l));
        }
        out.push(d.layers);
        put_varint(out, d.packets);
        put_varint(out, d.outer_dscp);
    }
}

fn get_encap(c: &mut Reader<'_>) -> std::result::Result<FlowEncap, DecodeError> {
    let present = c.u8().map_err(short)?;
    if present == 0 || present > 3 {
        return Err(invalid(format!(
            "directions {present:#x} in the encapsulation table"
        )));
    }
    let mut e = FlowEncap::default();
    for (d, slot) in e.dirs.iter_mut().enumerate() {
        if present & (1 << d) == 0 {
            continue;
        }
        let k = c.u8().map_err(short)?;
        let kind = capsule_wire::EncapKind::from_number(k)
            .ok_or_else(|| invalid(format!("encapsulation kind {k}")))?;
        let bits = c.u8().map_err(short)?;
        if bits >= 32 || (bits & ENC_OUTER_V6 != 0 && bits & ENC_OUTER == 0) {
            return Err(invalid(format!("encapsulation bits {bits:#x}")));
        }
        let outer = if bits & ENC_OUTER != 0 {
            let v = if bits & ENC_OUTER_V6 != 0 { 6 } else { 4 };
            let mut addr = || -> std::result::Result<IpAddr, DecodeError> {
                Ok(if v == 6 {
                    IpAddr::V6(Ipv6Addr::from(c.array::<16>().map_err(short)?))
                } else {
                    IpAddr::V4(Ipv4Addr::from(c.array::<4>().map_err(short)?))
                })
            };
            Some((addr()?, addr()?))
        } else {
            None
        };
        let id = if bits & ENC_ID != 0 {
            Some(c.u32_le().map_err(short)?)
        } else {
            None
        };
        let mpls = if bits & ENC_MPLS != 0 {
            let l = c.varint().map_err(bad_varint)?;
            if l >= 1 << 20 {
                return Err(invalid(format!("MPLS label {l}")));
            }
            Some(l as u32)
        } else {
            None
        };
        *slot = Some(EncapDir {
            kind,
            outer,
            id,
            mpls,
            layers: c.u8().map_err(short)?,
            packets: c.varint().map_err(bad_varint)?,
            mixed: bits & ENC_MIXED != 0,
            outer_dscp: c.varint().map_err(bad_varint)?,
        });
    }
    Ok(e)
}

/// Reads the encapsulation table of a version 7 index whose flows section held `n_flows`
/// flows: (flow position, encapsulations) per entry.
pub(super) fn get_encap_section(
    c: &mut Reader<'_>,
    n_flows: usize,
) -> std::result::Result<Vec<(usize, FlowEncap)>, DecodeError> {
    get_table(c, n_flows, "encapsulation table", get_encap)
}

/// One flow's names record as the names table holds it (docs/format.md), on its own: what
/// the fleet's flow rows carry in their `names` column.
pub fn names_record(n: &capsule_names::FlowNames) -> Vec<u8> {
    let mut out = Vec::new();
    put_names(&mut out, n);
    out
}

/// Reads a record written by [`names_record`]: every byte must be the record's.
pub fn names_from_record(b: &[u8]) -> std::result::Result<capsule_names::FlowNames, DecodeError> {
    let mut c = Reader::new(b);
    let n = get_names(&mut c)?;
    if !c.is_empty() {
        return Err(invalid(format!(
            "{} bytes after a names record",
            c.remaining()
        )));
    }
    Ok(n)
}

/// One flow's encapsulation record as the encapsulation table holds it (docs/format.md),
/// on its own: what the fleet's flow rows carry in their `encap` column. `None` when no
/// direction arrived encapsulated (the table holds no entry for such a flow).
pub fn encap_record(e: &FlowEncap) -> Option<Vec<u8>> {
    if e.dirs.iter().all(Option::is_none) {
        return None;
    }
    let mut out = Vec::new();
    put_encap(&mut out, e);
    Some(out)
}

/// Reads a record written by [`encap_record`]: every byte must be the record's.
pub fn encap_from_record(b: &[u8]) -> std::result::Result<FlowEncap, DecodeError> {
    let mut c = Reader::new(b);
    let e = get_encap(&mut c)?;
    if !c.is_empty() {
        return Err(invalid(format!(
            "{} bytes after an encapsulation record",
            c.remaining()
        )));
    }
    Ok(e)
}
