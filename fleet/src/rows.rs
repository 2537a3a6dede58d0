//! The rows of the fleet tables, with their columns (name and type, in RowBinary order) and
//! their encoding: one list of columns per table, written and read field by field in the
//! same order (the round-trip test below holds them together). `{ADDR}` and `{NODE}` are
//! the address and node-name types the schema fills in by the server's version.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use capsule_index::sideindex::{CountsBucket, DscpChange, DscpCount, FlowCounts, FlowKey};

use crate::rowbinary::{Reader, Writer};
use crate::FleetError;

/// The flow table's sorting key: one row per node, segment and flow.
pub const FLOW_KEY: [&str; 13] = [
    "node",
    "segment",
    "ip_version",
    "proto",
    "a",
    "b",
    "port_a",
    "port_b",
    "has_ports",
    "vlan_outer",
    "vlan_inner",
    "vlan_tags",
    "families",
];

/// Per-direction columns: `_ab` (a -> b) then `_ba`.
const DIRECTED: [(&str, &str); 20] = [
    ("packets", "UInt64"),
    ("bytes", "UInt64"),
    ("dscp_mask", "UInt64"),
    ("tcp_flags", "UInt8"),
    ("data", "UInt64"),
    ("retransmissions", "UInt64"),
    ("zero_windows", "UInt64"),
    ("resets", "UInt64"),
    ("zero_window_ns", "UInt64"),
    ("handshake", "UInt8"),
    ("cut_packets", "UInt64"),
    ("cut_bytes", "UInt64"),
    ("cut_at_ns", "Nullable(UInt64)"),
    ("dscp_values", "Array(UInt8)"),
    ("dscp_packets", "Array(UInt64)"),
    ("dscp_bytes", "Array(UInt64)"),
    ("dscp_change_ordinal", "UInt64"),
    ("dscp_change_ns", "UInt64"),
    ("dscp_change_from", "UInt8"),
    ("dscp_change_to", "UInt8"),
];

/// Per-direction 1-second bucket columns (parallel to `bucket_second`).
const BUCKETS: [(&str, &str); 6] = [
    ("bucket_bytes", "Array(UInt64)"),
    ("bucket_packets", "Array(UInt32)"),
    ("bucket_data", "Array(UInt32)"),
    ("bucket_retransmissions", "Array(UInt32)"),
    ("bucket_zero_windows", "Array(UInt32)"),
    ("bucket_resets", "Array(UInt32)"),
];

pub(crate) fn owned(c: &[(&str, &str)]) -> Vec<(String, String)> {
    c.iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

/// The columns of `capsule.flows`, in order.
pub fn flow_columns() -> Vec<(String, String)> {
    let mut c = owned(&[
        ("node", "{NODE}"),
        ("segment", "UInt64"),
        ("segment_len", "UInt64"),
        ("published_ns", "UInt64"),
        ("ip_version", "UInt8"),
        ("proto", "UInt8"),
        ("a", "{ADDR}"),
        ("b", "{ADDR}"),
        ("has_ports", "UInt8"),
        ("port_a", "UInt16"),
        ("port_b", "UInt16"),
        ("vlan_outer", "UInt16"),
        ("vlan_inner", "UInt16"),
        ("vlan_tags", "UInt8"),
        ("families", "UInt8"),
        ("first_ns", "UInt64"),
        ("last_ns", "UInt64"),
    ]);
    for d in ["ab", "ba"] {
        c.extend(
            DIRECTED
                .iter()
                .map(|(n, t)| (format!("{n}_{d}"), t.to_string())),
        );
    }
    c.push(("bucket_second".into(), "Array(UInt64)".into()));
    for d in ["ab", "ba"] {
        c.extend(
            BUCKETS
                .iter()
                .map(|(n, t)| (format!("{n}_{d}"), t.to_string())),
        );
    }
    c.extend(owned(&ATTRIBUTES));
    c
}

/// The flow's attributes, the last columns of both flow tables (added by release 0.32 to
/// the tables of an earlier one, [`crate::schema`]): its application and names, and the
/// encapsulations its packets arrived in, each the index's own record of them
/// (docs/format.md, the names and encapsulation tables) behind one byte: empty, the node's
/// index did not keep them (a row of an earlier release, or of an index written before
/// them); `0`, kept, and the flow has none; `1` then the record.
pub const ATTRIBUTES: [(&str, &str); 2] = [("names", "String"), ("encap", "String")];

/// What the index a flow row was made from kept of its flows' attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kept {
    /// Application and names (index version 6 and later).
    pub names: bool,
    /// Encapsulations (index version 7 and later).
    pub tunnels: bool,
}

fn put_attribute(w: &mut Writer, kept: bool, record: Option<Vec<u8>>) {
    match (kept, record) {
        (false, _) => w.blob(&[]),
        (true, None) => w.blob(&[0]),
        (true, Some(mut r)) => {
            r.insert(0, 1);
            w.blob(&r)
        }
    }
}

/// Writes the attribute columns of a flow row.
fn put_attributes(w: &mut Writer, kept: Kept, f: &FlowCounts) {
    let t = &f.totals;
    // As the index's names table: every flow that has names, whatever they hold.
    let names = t
        .names
        .as_deref()
        .map(capsule_index::sideindex::names_record);
    put_attribute(w, kept.names, names);
    let encap = t
        .encap
        .as_deref()
        .and_then(capsule_index::sideindex::encap_record);
    put_attribute(w, kept.tunnels, encap);
}

/// An attribute column's value: `None` when empty (the node's index kept none), `Some(None)`
/// for tag 0 (kept, the flow has none), `Some(Some(record))` for tag 1; else the tag byte.
fn tagged(blob: &[u8]) -> Result<Option<Option<&[u8]>>, u8> {
    match blob.split_first() {
        None => Ok(None),
        Some((0, [])) => Ok(Some(None)),
        Some((1, rec)) => Ok(Some(Some(rec))),
        Some((t, _)) => Err(*t),
    }
}

/// Reads the attribute columns of a flow row into `f`: what the node's index kept.
fn get_attributes(r: &mut Reader, f: &mut FlowCounts) -> Result<Kept, FleetError> {
    get_attributes_of(r, f, true, true)
}

/// [`get_attributes`] of a row that holds the `names` column when `names`, and the `encap`
/// column when `encap` (a question that reads neither is not sent them: not kept).
fn get_attributes_of(
    r: &mut Reader,
    f: &mut FlowCounts,
    names: bool,
    encap: bool,
) -> Result<Kept, FleetError> {
    let bad = |what: &str, problem: String| FleetError::Decode {
        what: format!("the {what} column of a flow row"),
        problem,
    };
    let mut kept = Kept::default();
    if names {
        if let Some(rec) = tagged(r.blob()?).map_err(|t| bad("names", format!("tag byte {t}")))? {
            kept.names = true;
            if let Some(rec) = rec {
                let n = capsule_index::sideindex::names_from_record(rec)
                    .map_err(|e| bad("names", e.to_string()))?;
                f.totals.names = Some(Box::new(n));
            }
        }
    }
    if encap {
        if let Some(rec) = tagged(r.blob()?).map_err(|t| bad("encap", format!("tag byte {t}")))? {
            kept.tunnels = true;
            if let Some(rec) = rec {
                let e = capsule_index::sideindex::encap_from_record(rec)
                    .map_err(|e| bad("encap", e.to_string()))?;
                f.totals.encap = Some(Box::new(e));
            }
        }
    }
    Ok(kept)
}

/// How a field of a packed record (the packed flow table's `rec` and `secs`) is written:
/// its column's value as `width` little-endian bytes, or its array column as a
/// little-endian `UInt32` count then each element as `width` bytes. ClickHouse writes them
/// (the view's SELECT, [`packed_view_select`]) and the askers read them ([`get_packed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packed {
    Le(usize),
    Array(usize),
}

/// The fields of a packed flow record before its directions: the segment's length and the
/// flow key's small parts (its addresses are columns of their own: their type depends on
/// the server's version).
const REC_HEAD: [&str; 10] = [
    "segment_len",
    "ip_version",
    "proto",
    "has_ports",
    "port_a",
    "port_b",
    "vlan_outer",
    "vlan_inner",
    "vlan_tags",
    "families",
];

/// The fixed-width fields of a packed flow record per direction (`_ab` then `_ba`), after
/// the head: what the answers made from totals (`top`, `dscp`, `matrix`) and the plan of a
/// packet question read. The head and these are the record's first [`REC_FIXED`] bytes.
const REC_DIRECTED: [&str; 9] = [
    "packets",
    "bytes",
    "dscp_mask",
    "tcp_flags",
    "handshake",
    "dscp_change_ordinal",
    "dscp_change_ns",
    "dscp_change_from",
    "dscp_change_to",
];

/// The arrays of a packed flow record per direction, after every fixed-width field: the
/// exact per-value DSCP counts (`dscp` and `top`'s DSCP mix read them).
const REC_ARRAYS: [&str; 3] = ["dscp_values", "dscp_packets", "dscp_bytes"];

/// The bytes of a packed flow record's fixed-width fields (head, then both directions'):
/// what a question that reads no DSCP counts asks of it (`substring(rec, 1, REC_FIXED)`).
pub const REC_FIXED: usize =
    8 + 1 + 1 + 1 + 2 + 2 + 2 + 2 + 1 + 1 + 2 * (8 + 8 + 8 + 1 + 1 + 8 + 8 + 1 + 1);

/// The per-direction fields of a flow's packed seconds (after `bucket_second`): the bytes
/// a second (the peak rates) and the packets (a flow the window cuts).
const SECS_DIRECTED: [&str; 2] = ["bucket_bytes", "bucket_packets"];

/// How a column of `capsule.flows` of type `ty` is packed (`None`: a type not packed).
fn packed_as(ty: &str) -> Option<Packed> {
    let width = |t: &str| match t {
        "UInt8" => Some(1),
        "UInt16" => Some(2),
        "UInt32" => Some(4),
        "UInt64" => Some(8),
        _ => None,
    };
    match ty.strip_prefix("Array(").and_then(|t| t.strip_suffix(')')) {
        Some(t) => width(t).map(Packed::Array),
        None => width(ty).map(Packed::Le),
    }
}

/// `head`, then `per` of each direction, each field packed as its flow table column's
/// type says (a field that is no packable column of it is left out: the unit tests check
/// there is none).
fn directed(head: &[&str], per: &[&str]) -> Vec<(String, Packed)> {
    let types = flow_columns();
    let mut names: Vec<String> = head.iter().map(|n| n.to_string()).collect();
    for d in ["ab", "ba"] {
        names.extend(per.iter().map(|n| format!("{n}_{d}")));
    }
    names
        .into_iter()
        .filter_map(|n| {
            let p = types
                .iter()
                .find(|(c, _)| *c == n)
                .and_then(|(_, t)| packed_as(t))?;
            Some((n, p))
        })
        .collect()
}

/// The fields of a packed flow record (`rec`), in order, each a column of `capsule.flows`.
pub fn rec_fields() -> Vec<(String, Packed)> {
    let mut f = directed(&REC_HEAD, &REC_DIRECTED);
    f.extend(directed(&[], &REC_ARRAYS));
    f
}

/// The fields of a flow's packed seconds (`secs`), in order, each a column of
/// `capsule.flows`.
pub fn secs_fields() -> Vec<(String, Packed)> {
    directed(&["bucket_second"], &SECS_DIRECTED)
}

/// The columns of `capsule.flow_packed`, the packed flow table: the flow table's sorting
/// key and span as columns (what ClickHouse sorts, collapses and filters on), and the rest
/// of what the answers made from totals read packed into two strings (a flow's counts, its
/// seconds), with the attributes as the flow table has them.
pub fn packed_columns() -> Vec<(String, String)> {
    // The flow table's key and span, less the segment's length (packed).
    let mut c: Vec<(String, String)> = flow_columns()[..17]
        .iter()
        .filter(|(n, _)| n != "segment_len")
        .cloned()
        .collect();
    c.extend(owned(&[("rec", "String"), ("secs", "String")]));
    c.extend(owned(&ATTRIBUTES));
    c
}

/// ClickHouse's expression of `fields` of a `capsule.flows` row packed into one string:
/// `reinterpretAsString` gives a number's little-endian bytes without its trailing zeros,
/// `toFixedString` pads them back to the width, and `concat` with a String keeps every
/// byte (a cast of a FixedString to String would cut the trailing zeros). The same on
/// 18.16 and on current releases.
fn packed_expr(fields: &[(String, Packed)]) -> String {
    let le = |e: &str, w: usize| format!("toFixedString(reinterpretAsString({e}), {w})");
    let parts: Vec<String> = fields
        .iter()
        .map(|(n, p)| match *p {
            Packed::Le(w) => le(n, w),
            Packed::Array(w) => format!(
                "{}, arrayStringConcat(arrayMap(x -> concat({}, ''), {n}))",
                le(&format!("toUInt32(length({n}))"), 4),
                le("x", w)
            ),
        })
        .collect();
    format!("concat({}, '')", parts.join(", "))
}

/// The SELECT list of the materialised view that fills `capsule.flow_packed` from
/// `capsule.flows` ([`packed_columns`] in order; `rec` and `secs` packed by ClickHouse).
pub fn packed_view_select() -> String {
    packed_columns()
        .into_iter()
        .map(|(n, _)| match n.as_str() {
            "rec" => format!("{} AS rec", packed_expr(&rec_fields())),
            "secs" => format!("{} AS secs", packed_expr(&secs_fields())),
            _ => n,
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a question made from the packed flow table reads of it besides the flow's key,
/// span and counts (always read: one string): the seconds, the names, the tunnels. A
/// column not read is not asked of ClickHouse at all (it reads a file per column and part,
/// and each column it sends costs it a serialisation per row): it decodes as empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NarrowRead {
    /// The flow's seconds: `bucket_second` and the bytes and packets a second.
    pub buckets: bool,
    /// The exact per-value DSCP counts (the end of `rec`; without them only its first
    /// [`REC_FIXED`] bytes are asked).
    pub counts: bool,
    pub names: bool,
    pub encap: bool,
}

impl NarrowRead {
    /// Every column of the table.
    pub const ALL: NarrowRead = NarrowRead {
        buckets: true,
        counts: true,
        names: true,
        encap: true,
    };

    /// The columns of the packed table read, in the order [`get_packed`] decodes them
    /// (what a question selects; `secs` may be selected as an expression of itself).
    pub fn columns(&self) -> Vec<&'static str> {
        let mut c = vec![
            "node",
            "segment",
            "published_ns",
            "a",
            "b",
            "first_ns",
            "last_ns",
            "rec",
        ];
        for (read, name) in [
            (self.buckets, "secs"),
            (self.names, "names"),
            (self.encap, "encap"),
        ] {
            if read {
                c.push(name);
            }
        }
        c
    }
}

/// Reads one row of `capsule.flow_packed` back, its columns those `read` reads
/// ([`NarrowRead::columns`]): a flow's counts with what the packed table does not hold
/// (TCP health, cut-off counts) zero, and no seconds where `secs` was not read or came
/// empty (a whole flow's, of a question that keeps no series).
pub fn get_packed(r: &mut Reader, read: &NarrowRead) -> Result<(Origin, FlowCounts), FleetError> {
    let node = r.string()?;
    let segment = r.u64()?;
    let published_ns = r.u64()?;
    let (a, b) = (r.fixed16()?, r.fixed16()?);
    let first_ns = r.u64()?;
    let last_ns = r.u64()?;
    let rec = r.blob()?;
    let secs = match read.buckets {
        true => r.blob()?,
        false => &[][..],
    };
    let mut p = Reader::new(rec, r.what());
    let bad = |p: &Reader, what: &str| FleetError::Decode {
        what: format!("{}: the packed {what} of a flow row", p.what()),
        problem: format!("{} byte(s) after its last field", p.remaining()),
    };
    let segment_len = p.u64()?;
    let (ip_version, proto, has_ports) = (p.u8()?, p.u8()?, p.u8()? != 0);
    let (pa, pb) = (p.u16()?, p.u16()?);
    let (v0, v1, tags) = (p.u16()?, p.u16()?, p.u8()?);
    let families = p.u8()?;
    let ports = has_ports.then_some((pa, pb));
    let key = flow_key([ip_version, proto, tags, families], (a, b), ports, (v0, v1));
    let mut f = FlowCounts::new(key, first_ns, last_ns);
    let t = &mut f.totals;
    for d in 0..2 {
        t.packets[d] = p.u64()?;
        t.bytes[d] = p.u64()?;
        t.dscp[d] = p.u64()?;
        t.tcp_flags[d] = p.u8()?;
        t.handshake[d] = p.u8()?;
        t.dscp_change[d] = get_dscp_change(&mut p)?;
    }
    if read.counts {
        for d in 0..2 {
            t.dscp_counts[d] = get_packed_dscp_counts(&mut p)?;
        }
    }
    if !p.is_empty() {
        return Err(bad(&p, "counts"));
    }
    if !secs.is_empty() {
        // The arrays are most of a row: each is taken whole and read in place.
        let mut p = Reader::new(secs, r.what());
        let n = p.count(8)?;
        f.buckets = p
            .bytes(n * 8)?
            .chunks_exact(8)
            .map(|c| CountsBucket {
                second: le64(c),
                ..CountsBucket::default()
            })
            .collect();
        for d in 0..2 {
            if p.count(8)? != n {
                return Err(bad_lengths(&p, "bucket_second and bucket_bytes"));
            }
            for (b, c) in f.buckets.iter_mut().zip(p.bytes(n * 8)?.chunks_exact(8)) {
                b.bytes[d] = le64(c);
            }
            if p.count(4)? != n {
                return Err(bad_lengths(&p, "bucket_second and bucket_packets"));
            }
            for (b, c) in f.buckets.iter_mut().zip(p.bytes(n * 4)?.chunks_exact(4)) {
                b.packets[d] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        if !p.is_empty() {
            return Err(bad(&p, "seconds"));
        }
    }
    let mut origin = Origin {
        node,
        segment,
        segment_len,
        published_ns,
        kept: Kept::default(),
    };
    origin.kept = get_attributes_of(r, &mut f, read.names, read.encap)?;
    Ok((origin, f))
}

/// A direction's exact per-value DSCP counts, packed: three counted arrays of one length.
fn get_packed_dscp_counts(p: &mut Reader) -> Result<Vec<DscpCount>, FleetError> {
    let n = p.count(1)?;
    let values = p.bytes(n)?;
    if p.count(8)? != n {
        return Err(bad_lengths(p, "dscp_values and dscp_packets"));
    }
    let packets = p.bytes(n * 8)?;
    if p.count(8)? != n {
        return Err(bad_lengths(p, "dscp_values and dscp_bytes"));
    }
    let bytes = p.bytes(n * 8)?;
    Ok(values
        .iter()
        .zip(packets.chunks_exact(8).zip(bytes.chunks_exact(8)))
        .map(|(&dscp, (pk, by))| DscpCount {
            dscp,
            packets: le64(pk),
            bytes: le64(by),
        })
        .collect())
}

/// A little-endian `UInt64` of a packed array (`c` is 8 bytes: a `chunks_exact(8)` piece).
fn le64(c: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(c);
    u64::from_le_bytes(a)
}

/// The columns of `capsule.segments` (the segment ledger), in order.
pub fn segment_columns() -> Vec<(String, String)> {
    owned(&[
        ("node", "{NODE}"),
        ("segment", "UInt64"),
        ("segment_len", "UInt64"),
        ("published_ns", "UInt64"),
        ("first_ns", "UInt64"),
        ("last_ns", "UInt64"),
        ("flows", "UInt64"),
        ("packets", "UInt64"),
        ("bytes", "UInt64"),
        ("path", "String"),
        ("location", "String"),
    ])
}

/// The columns of `capsule.minutes` (per-minute rollups), in order.
pub fn minute_columns() -> Vec<(String, String)> {
    owned(&[
        ("node", "{NODE}"),
        ("segment", "UInt64"),
        ("published_ns", "UInt64"),
        ("minute", "UInt64"),
        ("dscp", "UInt8"),
        ("grp", "String"),
        ("packets", "UInt64"),
        ("bytes", "UInt64"),
    ])
}

/// The names of the columns of the published table `table` (of [`crate::outbox::TABLES`]
/// and `nodes`), in the order its rows are encoded: what an insert names.
pub fn columns_of(table: &str) -> Vec<String> {
    let c = match table {
        "flows" => flow_columns(),
        "minutes" => minute_columns(),
        "ms_bins" => crate::series::bin_columns(),
        "ms_fanins" => crate::series::fanin_columns(),
        "ms_segments" => crate::series::segment_columns(),
        "segments" => segment_columns(),
        "nodes" => node_columns(),
        _ => Vec::new(),
    };
    c.into_iter().map(|(n, _)| n).collect()
}

/// The columns of `capsule.nodes` (the node registry), in order.
pub fn node_columns() -> Vec<(String, String)> {
    owned(&[
        ("node", "{NODE}"),
        ("advertise", "String"),
        ("version", "String"),
        ("last_seen_ns", "UInt64"),
        ("backlog", "UInt64"),
        ("published_segments", "UInt64"),
    ])
}

/// Where a flow row comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub node: String,
    pub segment: u64,
    pub segment_len: u64,
    pub published_ns: u64,
    /// Of a flow row: what its node's index kept of the flow's attributes (default for
    /// the other tables' rows).
    pub kept: Kept,
}

pub(crate) fn addr16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

pub(crate) fn addr_of(b: [u8; 16], v6: bool) -> IpAddr {
    let v = Ipv6Addr::from(b);
    match (v6, v.to_ipv4_mapped()) {
        (false, Some(v4)) => IpAddr::V4(v4),
        (false, None) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (true, _) => IpAddr::V6(v),
    }
}

/// Appends one flow row.
pub fn put_flow(w: &mut Writer, o: &Origin, f: &FlowCounts) {
    let k = &f.key;
    let t = &f.totals;
    w.string(&o.node);
    w.u64(o.segment);
    w.u64(o.segment_len);
    w.u64(o.published_ns);
    w.u8(k.ip_version);
    w.u8(k.proto);
    w.fixed16(&addr16(k.a));
    w.fixed16(&addr16(k.b));
    let (pa, pb) = k.ports.unwrap_or((0, 0));
    w.u8(u8::from(k.ports.is_some()));
    w.u16(pa);
    w.u16(pb);
    w.u16(k.vlans[0].unwrap_or(0));
    w.u16(k.vlans[1].unwrap_or(0));
    w.u8(u8::from(k.vlans[0].is_some()) | u8::from(k.vlans[1].is_some()) << 1);
    w.u8(u8::from(k.a.is_ipv6()) | u8::from(k.b.is_ipv6()) << 1);
    w.u64(t.first_ns);
    w.u64(t.last_ns);
    for d in 0..2 {
        w.u64(t.packets[d]);
        w.u64(t.bytes[d]);
        w.u64(t.dscp[d]);
        w.u8(t.tcp_flags[d]);
        w.u64(t.data[d]);
        w.u64(t.retransmissions[d]);
        w.u64(t.zero_windows[d]);
        w.u64(t.resets[d]);
        w.u64(t.zero_window_ns[d]);
        w.u8(t.handshake[d]);
        w.u64(t.cut_packets[d]);
        w.u64(t.cut_bytes[d]);
        w.nullable_u64(t.cut_at_ns[d]);
        w.array(&t.dscp_counts[d], |w, c| w.u8(c.dscp));
        w.array(&t.dscp_counts[d], |w, c| w.u64(c.packets));
        w.array(&t.dscp_counts[d], |w, c| w.u64(c.bytes));
        let c = t.dscp_change[d].unwrap_or_default();
        // Ordinals are 1-based: 0 is "no change".
        w.u64(t.dscp_change[d].map_or(0, |c| c.ordinal));
        w.u64(c.ts_ns);
        w.u8(c.from);
        w.u8(c.to);
    }
    w.array(&f.buckets, |w, b| w.u64(b.second));
    for d in 0..2 {
        w.array(&f.buckets, |w, b| w.u64(b.bytes[d]));
        w.array(&f.buckets, |w, b| w.u32(b.packets[d]));
        w.array(&f.buckets, |w, b| w.u32(b.data[d]));
        w.array(&f.buckets, |w, b| w.u32(b.retransmissions[d]));
        w.array(&f.buckets, |w, b| w.u32(b.zero_windows[d]));
        w.array(&f.buckets, |w, b| w.u32(b.resets[d]));
    }
    put_attributes(w, o.kept, f);
}

/// Reads one flow row back.
pub fn get_flow(r: &mut Reader) -> Result<(Origin, FlowCounts), FleetError> {
    get_flow_of(r, true)
}

/// Reads one flow row back; without `attributes`, a row as an outbox file of version 3 or
/// earlier holds it (no attribute columns: read as kept by no index).
pub fn get_flow_of(r: &mut Reader, attributes: bool) -> Result<(Origin, FlowCounts), FleetError> {
    let (mut origin, key, first_ns, last_ns) = get_head(r)?;
    let mut f = FlowCounts::new(key, first_ns, last_ns);
    let t = &mut f.totals;
    for d in 0..2 {
        t.packets[d] = r.u64()?;
        t.bytes[d] = r.u64()?;
        t.dscp[d] = r.u64()?;
        t.tcp_flags[d] = r.u8()?;
        t.data[d] = r.u64()?;
        t.retransmissions[d] = r.u64()?;
        t.zero_windows[d] = r.u64()?;
        t.resets[d] = r.u64()?;
        t.zero_window_ns[d] = r.u64()?;
        t.handshake[d] = r.u8()?;
        t.cut_packets[d] = r.u64()?;
        t.cut_bytes[d] = r.u64()?;
        t.cut_at_ns[d] = r.nullable_u64()?;
        t.dscp_counts[d] = get_dscp_counts(r)?;
        t.dscp_change[d] = get_dscp_change(r)?;
    }
    let mut f = get_buckets(r, f)?;
    if attributes {
        origin.kept = get_attributes(r, &mut f)?;
    }
    Ok((origin, f))
}

/// The columns every flow row begins with: where it comes from, its key and its span.
fn get_head(r: &mut Reader) -> Result<(Origin, FlowKey, u64, u64), FleetError> {
    let origin = Origin {
        node: r.string()?,
        segment: r.u64()?,
        segment_len: r.u64()?,
        published_ns: r.u64()?,
        kept: Kept::default(),
    };
    let ip_version = r.u8()?;
    let proto = r.u8()?;
    let (a, b) = (r.fixed16()?, r.fixed16()?);
    let has_ports = r.u8()? != 0;
    let (pa, pb) = (r.u16()?, r.u16()?);
    let (v0, v1, tags) = (r.u16()?, r.u16()?, r.u8()?);
    let families = r.u8()?;
    let ports = has_ports.then_some((pa, pb));
    let key = flow_key([ip_version, proto, tags, families], (a, b), ports, (v0, v1));
    let first_ns = r.u64()?;
    let last_ns = r.u64()?;
    Ok((origin, key, first_ns, last_ns))
}

/// A flow key from a row's key columns: `ip_version`, `proto`, `vlan_tags` (bit 0 the outer
/// VLAN present, bit 1 the inner) and `families` (bit 0 `a` is IPv6, bit 1 `b`), the
/// addresses as stored, the ports when it has them, the VLAN ids.
fn flow_key(
    [ip_version, proto, tags, families]: [u8; 4],
    (a, b): ([u8; 16], [u8; 16]),
    ports: Option<(u16, u16)>,
    (v0, v1): (u16, u16),
) -> FlowKey {
    FlowKey {
        vlans: [(tags & 1 != 0).then_some(v0), (tags & 2 != 0).then_some(v1)],
        ip_version,
        proto,
        a: addr_of(a, families & 1 != 0),
        b: addr_of(b, families & 2 != 0),
        ports,
    }
}

/// A direction's exact per-value DSCP counts (three parallel arrays).
fn get_dscp_counts(r: &mut Reader) -> Result<Vec<DscpCount>, FleetError> {
    let values = r.array(|r| r.u8())?;
    let packets = r.array(|r| r.u64())?;
    let bytes = r.array(|r| r.u64())?;
    if values.len() != packets.len() || values.len() != bytes.len() {
        return Err(bad_lengths(r, "dscp_values, dscp_packets and dscp_bytes"));
    }
    Ok(values
        .into_iter()
        .zip(packets)
        .zip(bytes)
        .map(|((dscp, packets), bytes)| DscpCount {
            dscp,
            packets,
            bytes,
        })
        .collect())
}

/// A direction's first DSCP remark (ordinal 0: none).
fn get_dscp_change(r: &mut Reader) -> Result<Option<DscpChange>, FleetError> {
    let ordinal = r.u64()?;
    let change = DscpChange {
        ordinal,
        ts_ns: r.u64()?,
        from: r.u8()?,
        to: r.u8()?,
    };
    Ok((ordinal != 0).then_some(change))
}

/// The 1-second buckets of a flow row, every column.
fn get_buckets(r: &mut Reader, mut f: FlowCounts) -> Result<FlowCounts, FleetError> {
    let seconds = r.array(|r| r.u64())?;
    f.buckets = empty_buckets(&seconds);
    for d in 0..2 {
        let bytes = r.array(|r| r.u64())?;
        let mut cols = Vec::with_capacity(5);
        for _ in 0..5 {
            cols.push(r.array(|r| r.u32())?);
        }
        if bytes.len() != seconds.len() || cols.iter().any(|c| c.len() != seconds.len()) {
            return Err(bad_lengths(r, "the bucket arrays"));
        }
        for (i, b) in f.buckets.iter_mut().enumerate() {
            b.bytes[d] = bytes[i];
            b.packets[d] = cols[0][i];
            b.data[d] = cols[1][i];
            b.retransmissions[d] = cols[2][i];
            b.zero_windows[d] = cols[3][i];
            b.resets[d] = cols[4][i];
        }
    }
    Ok(f)
}

/// A bucket for each second of a row's `seconds` column, its counts zero until read.
fn empty_buckets(seconds: &[u64]) -> Vec<CountsBucket> {
    seconds
        .iter()
        .map(|&second| CountsBucket {
            second,
            ..CountsBucket::default()
        })
        .collect()
}

fn bad_lengths(_r: &Reader, what: &str) -> FleetError {
    FleetError::Decode {
        what: "a flow row".into(),
        problem: format!("{what} differ in length"),
    }
}

/// One segment's ledger row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRow {
    pub node: String,
    pub segment: u64,
    pub segment_len: u64,
    pub published_ns: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub flows: u64,
    pub packets: u64,
    pub bytes: u64,
    pub path: String,
    /// Where the segment lives on its node when the row was published: `local`, `both`
    /// (local and in the object store) or `tiered` (the object store only).
    pub location: String,
}

pub fn put_segment(w: &mut Writer, s: &SegmentRow) {
    w.string(&s.node);
    for v in [
        s.segment,
        s.segment_len,
        s.published_ns,
        s.first_ns,
        s.last_ns,
        s.flows,
        s.packets,
        s.bytes,
    ] {
        w.u64(v);
    }
    w.string(&s.path);
    w.string(&s.location);
}

/// Reads one ledger row; `with_location`: false for the rows of an outbox file of version 1
/// or 2, written before the column (their segments were `local` when staged).
pub fn get_segment(r: &mut Reader, with_location: bool) -> Result<SegmentRow, FleetError> {
    Ok(SegmentRow {
        node: r.string()?,
        segment: r.u64()?,
        segment_len: r.u64()?,
        published_ns: r.u64()?,
        first_ns: r.u64()?,
        last_ns: r.u64()?,
        flows: r.u64()?,
        packets: r.u64()?,
        bytes: r.u64()?,
        path: r.string()?,
        location: if with_location {
            r.string()?
        } else {
            LOCAL.to_string()
        },
    })
}

/// The `location` of a segment on the local disk only.
pub const LOCAL: &str = "local";

/// The `location` column's value for where the store's ledger says a segment lives.
pub fn location_name(l: capsule_store::ledger::Location) -> &'static str {
    use capsule_store::ledger::Location;
    match l {
        Location::Local => LOCAL,
        Location::Both => "both",
        Location::Tiered => "tiered",
    }
}

/// One minute's rollup row of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinuteRow {
    pub minute: u64,
    pub dscp: u8,
    pub group: String,
    pub packets: u64,
    pub bytes: u64,
}

pub fn put_minute(w: &mut Writer, o: &Origin, m: &MinuteRow) {
    w.string(&o.node);
    w.u64(o.segment);
    w.u64(o.published_ns);
    w.u64(m.minute);
    w.u8(m.dscp);
    w.string(&m.group);
    w.u64(m.packets);
    w.u64(m.bytes);
}

/// A node's registry row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeRow {
    pub node: String,
    pub advertise: String,
    pub version: String,
    pub last_seen_ns: u64,
    pub backlog: u64,
    pub published_segments: u64,
}

pub fn put_node(w: &mut Writer, n: &NodeRow) {
    w.string(&n.node);
    w.string(&n.advertise);
    w.string(&n.version);
    w.u64(n.last_seen_ns);
    w.u64(n.backlog);
    w.u64(n.published_segments);
}

pub fn get_node(r: &mut Reader) -> Result<NodeRow, FleetError> {
    Ok(NodeRow {
        node: r.string()?,
        advertise: r.string()?,
        version: r.string()?,
        last_seen_ns: r.u64()?,
        backlog: r.u64()?,
        published_segments: r.u64()?,
    })
}

/// The rollup rows of one segment's flows: per minute, DSCP and sending group (`group_of`
/// the sender's group, "" for none), packets and bytes from the 1-second buckets. A
/// direction that carried several DSCP values counts under the one with most packets (the
/// buckets are not split by value).
pub fn minutes(flows: &[FlowCounts], group_of: &dyn Fn(IpAddr) -> String) -> Vec<MinuteRow> {
    let mut m: std::collections::BTreeMap<(u64, u8, String), (u64, u64)> = Default::default();
    for f in flows {
        for d in 0..2 {
            let dscp = f.totals.dscp_counts[d]
                .iter()
                .max_by_key(|c| (c.packets, std::cmp::Reverse(c.dscp)))
                .map_or(0, |c| c.dscp);
            let group = group_of(if d == 0 { f.key.a } else { f.key.b });
            for b in f.buckets.iter().filter(|b| b.packets[d] > 0) {
                let e = m.entry((b.second / 60, dscp, group.clone())).or_default();
                e.0 += u64::from(b.packets[d]);
                e.1 += b.bytes[d];
            }
        }
    }
    m.into_iter()
        .map(|((minute, dscp, group), (packets, bytes))| MinuteRow {
            minute,
            dscp,
            group,
            packets,
            bytes,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a test's flow row comes from: node `n`, segment 1 (2 bytes), published at 3.
    fn origin(kept: Kept) -> Origin {
        Origin {
            node: "n".into(),
            segment: 1,
            segment_len: 2,
            published_ns: 3,
            kept,
        }
    }

    fn flow(a: &str, b: &str) -> FlowCounts {
        let key = FlowKey {
            vlans: [Some(200), None],
            ip_version: if a.contains(':') { 6 } else { 4 },
            proto: 6,
            a: a.parse().unwrap(),
            b: b.parse().unwrap(),
            ports: Some((40000, 443)),
        };
        let mut f = FlowCounts::new(key, 61_000_000_000, 62_500_000_000);
        let t = &mut f.totals;
        t.packets = [3, 2];
        t.bytes = [3000, 120];
        t.dscp = [1 << 46, 1];
        t.tcp_flags = [0x1b, 0x12];
        t.data = [2, 0];
        t.retransmissions = [1, 0];
        t.zero_windows = [0, 1];
        t.resets = [0, 1];
        t.zero_window_ns = [0, 5];
        t.handshake = [1, 2];
        t.cut_packets = [1, 0];
        t.cut_bytes = [1000, 0];
        t.cut_at_ns = [Some(62_000_000_000), None];
        t.dscp_counts = [
            vec![
                DscpCount {
                    dscp: 0,
                    packets: 1,
                    bytes: 60,
                },
                DscpCount {
                    dscp: 46,
                    packets: 2,
                    bytes: 2940,
                },
            ],
            vec![DscpCount {
                dscp: 0,
                packets: 2,
                bytes: 120,
            }],
        ];
        t.dscp_change = [
            Some(DscpChange {
                ordinal: 2,
                ts_ns: 61_500_000_000,
                from: 0,
                to: 46,
            }),
            None,
        ];
        f.buckets = vec![
            CountsBucket {
                second: 61,
                bytes: [1060, 60],
                packets: [2, 1],
                data: [1, 0],
                retransmissions: [0, 0],
                zero_windows: [0, 1],
                resets: [0, 0],
            },
            CountsBucket {
                second: 62,
                bytes: [1940, 60],
                packets: [1, 1],
                data: [1, 0],
                retransmissions: [1, 0],
                zero_windows: [0, 0],
                resets: [0, 1],
            },
        ];
        f
    }

    #[test]
    fn a_flow_row_round_trips_every_field_of_both_families() {
        let o = Origin {
            node: "n1".into(),
            segment: 4,
            segment_len: 1 << 20,
            published_ns: 9,
            kept: Kept::default(),
        };
        let flows = [
            flow("10.0.0.1", "10.0.0.2"),
            flow("fd00::1", "fd00::2"),
            flow("::ffff:10.0.0.1", "10.0.0.2"),
        ];
        let mut w = Writer::default();
        for f in &flows {
            put_flow(&mut w, &o, f);
        }
        let mut r = Reader::new(&w.buf, "test");
        for f in &flows {
            let (o2, f2) = get_flow(&mut r).unwrap();
            assert_eq!(o2, o);
            assert_eq!(&f2, f);
        }
        assert!(r.is_empty());
        // One value written per column: the count of the schema's list.
        let mut one = Writer::default();
        put_flow(&mut one, &o, &FlowCounts::new(flows[0].key, 0, 0));
        assert_eq!(
            flow_columns().len(),
            17 + 2 * DIRECTED.len() + 1 + 2 * BUCKETS.len() + ATTRIBUTES.len()
        );
    }

    /// A flow's names and encapsulations, and what its node's index kept, read back from
    /// both flow tables' rows: kept with a record, kept without one, and not kept.
    #[test]
    fn a_flow_rows_attributes_round_trip_and_say_what_the_index_kept() {
        use capsule_index::sideindex::{EncapDir, FlowEncap};
        let mut named = flow("10.0.0.1", "10.0.0.2");
        named.totals.names = Some(Box::new(capsule_names::FlowNames {
            app: capsule_names::App::Tls,
            sni: Some("models.example-hub.io".into()),
            alpn: vec!["h2".into()],
            dns_answers: vec![("a.example".into(), "fd00::9".parse().unwrap())],
            client: Some(0),
            ..Default::default()
        }));
        let mut e = FlowEncap::default();
        e.dirs[1] = Some(EncapDir {
            kind: capsule_wire::EncapKind::Vxlan,
            outer: Some(("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap())),
            id: Some(42),
            mpls: Some(16),
            layers: 2,
            packets: 2,
            mixed: true,
            outer_dscp: 1 << 10,
        });
        named.totals.encap = Some(Box::new(e));
        let bare = flow("fd00::1", "fd00::2");
        let all = Kept {
            names: true,
            tunnels: true,
        };
        for (kept, f) in [
            (all, &named),
            (all, &bare),
            (Kept::default(), &bare),
            (
                Kept {
                    names: true,
                    tunnels: false,
                },
                &bare,
            ),
        ] {
            let o = Origin {
                node: "n".into(),
                segment: 1,
                segment_len: 2,
                published_ns: 3,
                kept,
            };
            let mut w = Writer::default();
            put_flow(&mut w, &o, f);
            let mut r = Reader::new(&w.buf, "test");
            let (o2, f2) = get_flow(&mut r).unwrap();
            assert!(r.is_empty());
            assert_eq!((&o2, &f2), (&o, f));
            let mut n = Writer::default();
            put_packed_for_test(&mut n, &o, f, &NarrowRead::ALL);
            let (o3, f3) = get_packed(&mut Reader::new(&n.buf, "test"), &NarrowRead::ALL).unwrap();
            assert_eq!(o3, o);
            assert_eq!(
                (&f3.totals.names, &f3.totals.encap),
                (&f.totals.names, &f.totals.encap)
            );
        }
        // A tag byte other than 0 and 1, or a record with bytes after it, is refused.
        for bad in [&[2u8][..], &[0, 0], &[1, 0xff]] {
            let mut w = Writer::default();
            let o = origin(Kept::default());
            put_flow(&mut w, &o, &bare);
            w.buf.truncate(w.buf.len() - 2);
            w.blob(bad);
            w.blob(&[]);
            assert!(
                get_flow(&mut Reader::new(&w.buf, "test")).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_published_table_names_its_columns() {
        for t in crate::outbox::TABLES.iter().chain(&["nodes"]) {
            assert!(!columns_of(t).is_empty(), "{t}");
        }
    }

    /// Every field ClickHouse packs is a column of the flow table of a type it packs, in
    /// the widths the decoder reads; the packed table's plain columns are the flow table's,
    /// with their types.
    #[test]
    fn the_packed_fields_are_columns_of_the_flow_table_of_their_width() {
        let wide = flow_columns();
        let ty = |n: &str| wide.iter().find(|(c, _)| c == n).map(|(_, t)| t.as_str());
        let rec = rec_fields();
        assert_eq!(
            rec.len(),
            REC_HEAD.len() + 2 * (REC_DIRECTED.len() + REC_ARRAYS.len()),
            "{rec:?}"
        );
        let secs = secs_fields();
        assert_eq!(secs.len(), 1 + 2 * SECS_DIRECTED.len(), "{secs:?}");
        for (name, p) in rec.iter().chain(&secs) {
            assert_eq!(ty(name).and_then(packed_as), Some(*p), "{name}");
        }
        // What get_packed reads: the key's ports and VLANs as 2 bytes, the counts as 8,
        // the DSCP values as 1, the packets a second as 4.
        let width = |n: &str| {
            rec.iter()
                .chain(&secs)
                .find(|(c, _)| c == n)
                .map(|(_, p)| *p)
        };
        assert_eq!(width("port_a"), Some(Packed::Le(2)));
        assert_eq!(width("vlan_inner"), Some(Packed::Le(2)));
        assert_eq!(width("segment_len"), Some(Packed::Le(8)));
        assert_eq!(width("dscp_change_ns_ba"), Some(Packed::Le(8)));
        assert_eq!(width("dscp_values_ab"), Some(Packed::Array(1)));
        assert_eq!(width("bucket_packets_ba"), Some(Packed::Array(4)));
        assert_eq!(width("bucket_bytes_ab"), Some(Packed::Array(8)));
        // Every fixed-width field before every array, in REC_FIXED bytes.
        let fixed: Vec<_> = rec
            .iter()
            .take_while(|(_, p)| matches!(p, Packed::Le(_)))
            .collect();
        assert!(rec[fixed.len()..]
            .iter()
            .all(|(_, p)| matches!(p, Packed::Array(_))));
        let bytes: usize = fixed
            .iter()
            .map(|(_, p)| match p {
                Packed::Le(w) => *w,
                Packed::Array(_) => 0,
            })
            .sum();
        assert_eq!(bytes, REC_FIXED);
        for (name, t) in packed_columns() {
            if name != "rec" && name != "secs" {
                assert_eq!(ty(&name), Some(t.as_str()), "{name}");
            }
        }
        let select = packed_view_select();
        assert!(
            select.contains("AS rec") && select.contains("AS secs"),
            "{select}"
        );
        assert_eq!(
            NarrowRead::ALL.columns().len() + 9,
            packed_columns().len(),
            "every column but the key's small parts (packed into rec)"
        );
    }

    /// A packed row decodes to what the flow row holds of the flow's key, span, totals,
    /// DSCP counts and remark, TCP flags and handshake, and seconds.
    #[test]
    fn a_packed_row_is_the_flow_rows_counts() {
        for f in [flow("10.0.0.1", "fd00::2"), flow("10.0.0.1", "10.0.0.2")] {
            let o = origin(Kept::default());
            let mut n = Writer::default();
            put_packed_for_test(&mut n, &o, &f, &NarrowRead::ALL);
            let mut r = Reader::new(&n.buf, "test");
            let (o2, got) = get_packed(&mut r, &NarrowRead::ALL).unwrap();
            assert!(r.is_empty());
            assert_eq!(o2, o);
            assert_eq!(got.key, f.key);
            let (t, u) = (&got.totals, &f.totals);
            assert_eq!((t.first_ns, t.last_ns), (u.first_ns, u.last_ns));
            assert_eq!((t.packets, t.bytes, t.dscp), (u.packets, u.bytes, u.dscp));
            assert_eq!((t.tcp_flags, t.handshake), (u.tcp_flags, u.handshake));
            assert_eq!(
                (&t.dscp_counts, t.dscp_change),
                (&u.dscp_counts, u.dscp_change)
            );
            assert!(u.dscp_counts.iter().any(|c| !c.is_empty()));
            let secs = |f: &FlowCounts| {
                f.buckets
                    .iter()
                    .map(|b| (b.second, b.bytes, b.packets))
                    .collect::<Vec<_>>()
            };
            assert!(!f.buckets.is_empty());
            assert_eq!(secs(&got), secs(&f));
        }
    }

    /// A row of only the columns a question reads (no seconds, no names) decodes without
    /// them; a packed record whose counts run past its end, or with bytes after its last
    /// field, is refused, naming what.
    #[test]
    fn a_row_of_the_columns_a_question_reads_and_damaged_records() {
        let mut f = flow("10.0.0.1", "10.0.0.2");
        f.totals.names = Some(Box::default());
        let o = origin(Kept {
            names: true,
            tunnels: true,
        });
        // The plan's: no seconds (a window that cuts no flow), no DSCP counts, no names.
        let read = NarrowRead {
            buckets: false,
            counts: false,
            names: false,
            encap: true,
        };
        let mut n = Writer::default();
        put_packed_for_test(&mut n, &o, &f, &read);
        let mut r = Reader::new(&n.buf, "test");
        let (o2, got) = get_packed(&mut r, &read).unwrap();
        assert!(r.is_empty());
        assert_eq!(
            o2.kept,
            Kept {
                names: false,
                tunnels: true
            }
        );
        assert!(got.buckets.is_empty() && got.totals.names.is_none());
        assert!(got.totals.dscp_counts.iter().all(Vec::is_empty));
        assert!(f.totals.dscp_counts.iter().any(|c| !c.is_empty()));
        let (t, u) = (&got.totals, &f.totals);
        assert_eq!((t.packets, t.bytes, t.dscp), (u.packets, u.bytes, u.dscp));
        assert_eq!((t.tcp_flags, t.handshake), (u.tcp_flags, u.handshake));
        assert_eq!(t.dscp_change, u.dscp_change);
        // The record, with a byte after it, and cut short.
        let plain = NarrowRead {
            counts: true,
            encap: false,
            ..read
        };
        let row = |rec: &[u8]| {
            let mut w = Writer::default();
            w.string("n");
            w.u64(1);
            w.u64(3);
            w.fixed16(&[0; 16]);
            w.fixed16(&[0; 16]);
            w.u64(5);
            w.u64(6);
            w.blob(rec);
            w.buf
        };
        let mut rec = packed_for_test(&o, &f, &rec_fields());
        let whole = row(&rec);
        assert!(get_packed(&mut Reader::new(&whole, "test"), &plain).is_ok());
        rec.push(0);
        let e = get_packed(&mut Reader::new(&row(&rec), "test"), &plain).unwrap_err();
        assert!(
            e.to_string().contains("1 byte(s) after its last field"),
            "{e}"
        );
        rec.truncate(rec.len() - 10);
        let e = get_packed(&mut Reader::new(&row(&rec), "test"), &plain).unwrap_err();
        assert!(e.to_string().contains("test"), "{e}");
        // A count far past the end: refused before any allocation.
        let mut bad = packed_for_test(&o, &f, &rec_fields())[..REC_FIXED].to_vec();
        bad.extend_from_slice(&u32::MAX.to_le_bytes());
        let e = get_packed(&mut Reader::new(&row(&bad), "test"), &plain).unwrap_err();
        assert!(e.to_string().contains("a count of 4294967295"), "{e}");
    }

    /// A flow row's columns by name, each as its RowBinary bytes.
    fn wide_columns_for_test(o: &Origin, f: &FlowCounts) -> Vec<(String, Vec<u8>)> {
        let mut full = Writer::default();
        put_flow(&mut full, o, f);
        let mut r = Reader::new(&full.buf, "test");
        let mut cols = Vec::new();
        for (name, ty) in &flow_columns() {
            let start = full.buf.len() - r.remaining();
            skip(&mut r, ty);
            let end = full.buf.len() - r.remaining();
            cols.push((name.clone(), full.buf[start..end].to_vec()));
        }
        cols
    }

    /// `fields` of the flow row of `f`, packed as the view's SQL packs them: a number as its
    /// little-endian bytes (RowBinary's own), an array as a `UInt32` count and its elements.
    fn packed_for_test(o: &Origin, f: &FlowCounts, fields: &[(String, Packed)]) -> Vec<u8> {
        let cols = wide_columns_for_test(o, f);
        let mut out = Vec::new();
        for (name, p) in fields {
            let (_, b) = cols.iter().find(|(n, _)| n == name).unwrap();
            match *p {
                Packed::Le(w) => {
                    assert_eq!(b.len(), w, "{name}");
                    out.extend_from_slice(b);
                }
                Packed::Array(w) => {
                    // RowBinary: a varint count, then the elements.
                    let mut r = Reader::new(b, "test");
                    let items = r.array(|r| r.bytes(w).map(<[u8]>::to_vec)).unwrap();
                    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
                    for i in items {
                        out.extend_from_slice(&i);
                    }
                }
            }
        }
        out
    }

    /// A row of `capsule.flow_packed` as a question selects it (`read`'s columns), the view
    /// having packed it from the flow row of `f`.
    fn put_packed_for_test(w: &mut Writer, o: &Origin, f: &FlowCounts, read: &NarrowRead) {
        let cols = wide_columns_for_test(o, f);
        for name in read.columns() {
            match name {
                "rec" => {
                    // As `substring(rec, 1, REC_FIXED)` when the DSCP counts are not read.
                    let rec = packed_for_test(o, f, &rec_fields());
                    w.blob(&rec[..if read.counts { rec.len() } else { REC_FIXED }])
                }
                "secs" => w.blob(&packed_for_test(o, f, &secs_fields())),
                _ => {
                    let (_, b) = cols.iter().find(|(n, _)| n == name).unwrap();
                    w.buf.extend_from_slice(b);
                }
            }
        }
    }

    fn skip(r: &mut Reader, ty: &str) {
        match ty {
            "{NODE}" => drop(r.string().unwrap()),
            "{ADDR}" => drop(r.fixed16().unwrap()),
            "UInt8" => drop(r.u8().unwrap()),
            "UInt16" => drop(r.u16().unwrap()),
            "UInt32" => drop(r.u32().unwrap()),
            "UInt64" => drop(r.u64().unwrap()),
            "Nullable(UInt64)" => drop(r.nullable_u64().unwrap()),
            "Array(UInt8)" => drop(r.array(|r| r.u8()).unwrap()),
            "Array(UInt32)" => drop(r.array(|r| r.u32()).unwrap()),
            "Array(UInt64)" => drop(r.array(|r| r.u64()).unwrap()),
            "String" => drop(r.blob().unwrap()),
            other => panic!("type {other}"),
        }
    }

    #[test]
    fn rollups_count_each_direction_under_its_main_dscp_and_sender_group() {
        let f = flow("10.0.0.1", "10.0.0.2");
        let m = minutes(&[f], &|ip| {
            if ip.to_string() == "10.0.0.1" {
                "web".into()
            } else {
                String::new()
            }
        });
        assert_eq!(
            m,
            vec![
                MinuteRow {
                    minute: 1,
                    dscp: 0,
                    group: String::new(),
                    packets: 2,
                    bytes: 120
                },
                MinuteRow {
                    minute: 1,
                    dscp: 46,
                    group: "web".into(),
                    packets: 3,
                    bytes: 3000
                },
            ]
        );
    }
}
