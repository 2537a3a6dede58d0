//! The side index: per segment, what each block holds and every flow's summary, so queries
//! plan without scanning and `capsule flows` answers from the index alone.
//!
//! ```text
//! writer thread, per block (raw bytes, before they are dropped)
//!   -> dissect every packet -> FlowKey (canonical: both directions share one record)
//!   -> FlowRecord: first/last ns, packets/bytes/DSCP mask/TCP flags/retransmissions/
//!      zero windows/RSTs per direction, the blocks holding it, 1-second buckets
//!   -> BlockSummary: DSCP mask, IP / non-IP / malformed packet counts
//! segment sealed -> SegmentIndex encoded -> STORE/index/seg-N.idx (tmp, fsync, rename)
//! ```
//!
//! The index is derived data: `rebuild` recomputes it from a segment's blocks alone, and a
//! missing or stale index (its recorded segment length differs) is rebuilt by the next
//! writer or by `capsule reindex`. The byte layout is in docs/format.md.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use capsule_pcap::read::fragment_packets;

use capsule_store::format::{BlockMeta, DecodeError};
use capsule_store::{Result, SegmentReader, StoreError};
use capsule_wire::view::{Reader, Short, VarintError};
use capsule_wire::{dissect, L4};

/// Index format version written by this build, and the only one it reads.
pub const INDEX_VERSION: u16 = 1;
const INDEX_MAGIC: [u8; 8] = *b"CPSLIDX\0";
const HEADER_LEN: usize = 64;
const NO_VLAN: u16 = 0xFFFF;

/// Name of segment `seq`'s index file.
pub fn index_name(seq: u64) -> String {
    format!("seg-{seq:012}.idx")
}

/// A flow, with its endpoints in canonical order (`a` sorts before `b` by address, then
/// port), so that both directions of a conversation share one key. Direction 0 is a -> b.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowKey {
    pub vlans: [Option<u16>; 2],
    pub ip_version: u8,
    pub proto: u8,
    pub a: IpAddr,
    pub b: IpAddr,
    /// Ports, for TCP, UDP and SCTP packets that carry a transport header.
    pub ports: Option<(u16, u16)>,
}

/// Hashes the key's fields packed into one byte string, with a single `write`.
///
/// The side index looks every packet's key up on the writer thread. With the derived
/// `Hash`, SipHash (std's keyed hasher, kept because addresses and ports come off the wire
/// and an unkeyed hash would let crafted traffic make the lookups collide) was fed a dozen
/// small writes per key, each with its own length and discriminant words; one write of 19
/// (IPv4) or 43 (IPv6) bytes took the side index from about 200 to 165 ns a packet
/// (`packet/index` in benches/store.rs). Every field is packed, so keys that are equal hash
/// equally and keys that differ give different strings.
impl std::hash::Hash for FlowKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut buf = [0u8; 43];
        let [v0, v1] = self.vlans;
        let (sp, dp) = self.ports.unwrap_or((0, 0));
        buf[0..2].copy_from_slice(&v0.unwrap_or(0).to_be_bytes());
        buf[2..4].copy_from_slice(&v1.unwrap_or(0).to_be_bytes());
        buf[4] = u8::from(v0.is_some())
            | u8::from(v1.is_some()) << 1
            | u8::from(self.ports.is_some()) << 2
            | u8::from(self.a.is_ipv6()) << 3
            | u8::from(self.b.is_ipv6()) << 4;
        buf[5] = self.ip_version;
        buf[6] = self.proto;
        buf[7..9].copy_from_slice(&sp.to_be_bytes());
        buf[9..11].copy_from_slice(&dp.to_be_bytes());
        let mut len = 11;
        for addr in [self.a, self.b] {
            match addr {
                IpAddr::V4(a) => {
                    buf[len..len + 4].copy_from_slice(&a.octets());
                    len += 4;
                }
                IpAddr::V6(a) => {
                    buf[len..len + 16].copy_from_slice(&a.octets());
                    len += 16;
                }
            }
        }
        state.write(&buf[..len]);
    }
}

impl FlowKey {
    /// The key of a packet and the packet's direction (0: a -> b, 1: b -> a).
    pub fn of(
        vlans: [Option<u16>; 2],
        ip_version: u8,
        proto: u8,
        src: IpAddr,
        dst: IpAddr,
        ports: Option<(u16, u16)>,
    ) -> (FlowKey, usize) {
        let (sp, dp) = ports.unwrap_or((0, 0));
        let forward = (src, sp) <= (dst, dp);
        let key = if forward {
            FlowKey {
                vlans,
                ip_version,
                proto,
                a: src,
                b: dst,
                ports,
            }
        } else {
            FlowKey {
                vlans,
                ip_version,
                proto,
                a: dst,
                b: src,
                ports: ports.map(|(s, d)| (d, s)),
            }
        };
        (key, usize::from(!forward))
    }

    /// The packets' view of direction `dir`: (src, dst, ports).
    pub fn side(&self, dir: usize) -> (IpAddr, IpAddr, Option<(u16, u16)>) {
        if dir == 0 {
            (self.a, self.b, self.ports)
        } else {
            (self.b, self.a, self.ports.map(|(x, y)| (y, x)))
        }
    }
}

/// One second of a flow: packets and wire bytes each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bucket {
    /// Seconds since the Unix epoch.
    pub second: u64,
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
}

/// Everything the index knows of one flow within one segment. Arrays are per direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRecord {
    pub key: FlowKey,
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: [u64; 2],
    /// Wire (original) bytes.
    pub bytes: [u64; 2],
    /// Bit n set: DSCP n was seen in that direction (every packet, not a sample).
    pub dscp: [u64; 2],
    /// Union of the TCP flags seen.
    pub tcp_flags: [u8; 2],
    /// TCP segments carrying data that ends at or before data already seen.
    pub retransmissions: [u64; 2],
    /// TCP segments advertising a zero receive window (RSTs excluded).
    pub zero_windows: [u64; 2],
    pub resets: [u64; 2],
    /// Indexes of the blocks holding the flow's packets, ascending.
    pub blocks: Vec<u32>,
    /// Per-second counters, ascending by second.
    pub buckets: Vec<Bucket>,
}

impl FlowRecord {
    /// A flow with no packets counted yet.
    pub fn new(key: FlowKey, first_ns: u64, last_ns: u64) -> Self {
        FlowRecord {
            key,
            first_ns,
            last_ns,
            packets: [0; 2],
            bytes: [0; 2],
            dscp: [0; 2],
            tcp_flags: [0; 2],
            retransmissions: [0; 2],
            zero_windows: [0; 2],
            resets: [0; 2],
            blocks: Vec::new(),
            buckets: Vec::new(),
        }
    }
}

impl FlowRecord {
    pub fn total_packets(&self) -> u64 {
        self.packets[0] + self.packets[1]
    }

    pub fn total_bytes(&self) -> u64 {
        self.bytes[0] + self.bytes[1]
    }

    /// Adds another record of the same flow (another segment's) to this one. Block lists and
    /// buckets are not merged: their indexes belong to their own segments.
    pub fn absorb(&mut self, o: &FlowRecord) {
        self.first_ns = self.first_ns.min(o.first_ns);
        self.last_ns = self.last_ns.max(o.last_ns);
        for d in 0..2 {
            self.packets[d] += o.packets[d];
            self.bytes[d] += o.bytes[d];
            self.dscp[d] |= o.dscp[d];
            self.tcp_flags[d] |= o.tcp_flags[d];
            self.retransmissions[d] += o.retransmissions[d];
            self.zero_windows[d] += o.zero_windows[d];
            self.resets[d] += o.resets[d];
        }
    }
}

/// What one block holds, beyond its time range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockSummary {
    /// Bit n set: some packet in the block has DSCP n.
    pub dscp: u64,
    pub ip_packets: u32,
    pub non_ip_packets: u32,
    /// Packets whose headers were cut short or contradictory (still stored and exported).
    pub malformed_packets: u32,
}

/// The index of one segment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SegmentIndex {
    pub seq: u64,
    /// Length of the sealed segment file this index describes.
    pub segment_len: u64,
    pub blocks: Vec<BlockSummary>,
    pub flows: Vec<FlowRecord>,
}

/// Per-direction TCP state kept while building (not stored).
#[derive(Debug, Clone, Copy, Default)]
struct TcpTrack {
    /// Highest sequence number + payload seen, per direction.
    high: [Option<u32>; 2],
}

/// Builds a segment's index block by block.
#[derive(Debug, Default)]
pub struct IndexBuilder {
    seq: u64,
    linktypes: Vec<u16>,
    blocks: Vec<BlockSummary>,
    flows: Vec<FlowRecord>,
    by_key: HashMap<FlowKey, usize>,
    tcp: Vec<TcpTrack>,
}

impl IndexBuilder {
    /// Starts the index of segment `seq`.
    pub fn new(seq: u64) -> Self {
        IndexBuilder {
            seq,
            ..Default::default()
        }
    }

    /// Indexes the next block of the segment. `meta.new_interfaces` extends the segment's
    /// interface list (as in the block header); `data` is the block's decompressed content.
    pub fn add_block(&mut self, meta: &BlockMeta, data: &[u8]) {
        self.linktypes
            .extend(meta.new_interfaces.iter().map(|i| i.linktype));
        let block = self.blocks.len() as u32;
        let mut summary = BlockSummary::default();
        for p in fragment_packets(data) {
            // The block was written (or verified) by the store: a bad record ends the block.
            let Ok(p) = p else { break };
            let linktype = self.linktypes.get(p.iface as usize).copied().unwrap_or(0);
            let d = dissect(linktype, p.data);
            if d.malformed.is_some() {
                summary.malformed_packets += 1;
            }
            let Some(ip) = d.ip else {
                summary.non_ip_packets += 1;
                continue;
            };
            summary.ip_packets += 1;
            summary.dscp |= 1u64 << (ip.dscp & 63);
            let ports = d.l4.ports();
            let (key, dir) = FlowKey::of(d.vlans, ip.version, ip.proto, ip.src, ip.dst, ports);
            let wire = u64::from(p.orig_len.max(p.data.len() as u32));
            let i = match self.by_key.get(&key) {
                Some(&i) => i,
                None => {
                    self.flows.push(FlowRecord::new(key, p.ts_ns, p.ts_ns));
                    self.tcp.push(TcpTrack::default());
                    self.by_key.insert(key, self.flows.len() - 1);
                    self.flows.len() - 1
                }
            };
            let f = &mut self.flows[i];
            f.first_ns = f.first_ns.min(p.ts_ns);
            f.last_ns = f.last_ns.max(p.ts_ns);
            f.packets[dir] += 1;
            f.bytes[dir] += wire;
            f.dscp[dir] |= 1u64 << (ip.dscp & 63);
            if f.blocks.last() != Some(&block) {
                f.blocks.push(block);
            }
            let second = p.ts_ns / 1_000_000_000;
            let bucket = match f.buckets.iter().rposition(|b| b.second == second) {
                Some(b) => b,
                None => {
                    // Packets arrive in time order within a block; across overlapping blocks
                    // a bucket may need inserting in the middle.
                    let at = f.buckets.partition_point(|b| b.second < second);
                    f.buckets.insert(
                        at,
                        Bucket {
                            second,
                            ..Bucket::default()
                        },
                    );
                    at
                }
            };
            f.buckets[bucket].packets[dir] += 1;
            f.buckets[bucket].bytes[dir] += wire;
            if let L4::Tcp(t) = d.l4 {
                f.tcp_flags[dir] |= t.flags;
                if t.flags & 0x04 != 0 {
                    f.resets[dir] += 1;
                } else if t.window == 0 {
                    f.zero_windows[dir] += 1;
                }
                let track = &mut self.tcp[i];
                let len = t.payload_len;
                if len > 0 {
                    let end = t.seq.wrapping_add(len);
                    match track.high[dir] {
                        // Serial-number arithmetic (RFC 1982): `end` not after `high`.
                        Some(high)
                            if (high.wrapping_sub(end) as i32) >= 0 && t.flags & 0x02 == 0 =>
                        {
                            f.retransmissions[dir] += 1;
                        }
                        Some(high) if (end.wrapping_sub(high) as i32) > 0 => {
                            track.high[dir] = Some(end)
                        }
                        Some(_) => {}
                        None => track.high[dir] = Some(end),
                    }
                } else if t.flags & 0x03 != 0 {
                    // SYN and FIN take one sequence number.
                    let end = t.seq.wrapping_add(1);
                    if track.high[dir].is_none_or(|h| (end.wrapping_sub(h) as i32) > 0) {
                        track.high[dir] = Some(end);
                    }
                }
            }
        }
        self.blocks.push(summary);
    }

    /// The finished index of a segment of `segment_len` bytes.
    pub fn finish(self, segment_len: u64) -> SegmentIndex {
        SegmentIndex {
            seq: self.seq,
            segment_len,
            blocks: self.blocks,
            flows: self.flows,
        }
    }
}

/// Rebuilds a sealed segment's index from its blocks alone.
pub fn rebuild(seg: &SegmentReader) -> Result<SegmentIndex> {
    let mut b = IndexBuilder::new(seg.seq());
    let mut dctx = zstd::bulk::Decompressor::new()
        .map_err(|e| StoreError::io("create a zstd decompressor", seg.path(), e))?;
    let mut data = Vec::new();
    let mut frame = Vec::new();
    // Footer block entries carry no interface list; the segment's whole list applies.
    let all = seg.interfaces().to_vec();
    for i in 0..seg.blocks().len() {
        seg.read_block(i, &mut dctx, &mut frame, &mut data)?;
        let mut meta = seg.blocks()[i].clone();
        meta.new_interfaces = if i == 0 { all.clone() } else { Vec::new() };
        b.add_block(&meta, &data);
    }
    Ok(b.finish(seg.bytes()))
}

// ---- encoding ----------------------------------------------------------------------------

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
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
fn short(e: Short) -> DecodeError {
    DecodeError::Short {
        what: "segment index body",
        expected: e.end(),
        found: e.offset + e.found,
    }
}

/// A varint that could not be read, as the error it is reported as.
fn bad_varint(e: VarintError) -> DecodeError {
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

fn invalid(detail: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        what: "segment index",
        detail: detail.into(),
    }
}

fn vlan_in(v: u16) -> Option<u16> {
    (v != NO_VLAN).then_some(v)
}

impl SegmentIndex {
    /// Encodes the index file: a 64-byte header, then the zstd-compressed body.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.blocks.len() * 16 + self.flows.len() * 160);
        for b in &self.blocks {
            body.extend_from_slice(&b.dscp.to_le_bytes());
            body.extend_from_slice(&b.ip_packets.to_le_bytes());
            body.extend_from_slice(&b.non_ip_packets.to_le_bytes());
            body.extend_from_slice(&b.malformed_packets.to_le_bytes());
        }
        for f in &self.flows {
            let k = &f.key;
            for v in k.vlans {
                body.extend_from_slice(&v.unwrap_or(NO_VLAN).to_le_bytes());
            }
            body.push(k.ip_version);
            body.push(k.proto);
            body.push(u8::from(k.ports.is_some()));
            body.push(0);
            put_addr(&mut body, k.a);
            put_addr(&mut body, k.b);
            let (pa, pb) = k.ports.unwrap_or((0, 0));
            body.extend_from_slice(&pa.to_le_bytes());
            body.extend_from_slice(&pb.to_le_bytes());
            body.extend_from_slice(&f.first_ns.to_le_bytes());
            body.extend_from_slice(&f.last_ns.to_le_bytes());
            for d in 0..2 {
                body.extend_from_slice(&f.packets[d].to_le_bytes());
                body.extend_from_slice(&f.bytes[d].to_le_bytes());
                body.extend_from_slice(&f.dscp[d].to_le_bytes());
                body.push(f.tcp_flags[d]);
                put_varint(&mut body, f.retransmissions[d]);
                put_varint(&mut body, f.zero_windows[d]);
                put_varint(&mut body, f.resets[d]);
            }
            put_varint(&mut body, f.blocks.len() as u64);
            let mut prev = 0u32;
            for &b in &f.blocks {
                put_varint(&mut body, u64::from(b - prev));
                prev = b;
            }
            put_varint(&mut body, f.buckets.len() as u64);
            let mut prev = f.first_ns / 1_000_000_000;
            for b in &f.buckets {
                put_varint(&mut body, b.second - prev);
                prev = b.second;
                for d in 0..2 {
                    put_varint(&mut body, b.packets[d]);
                    put_varint(&mut body, b.bytes[d]);
                }
            }
        }
        let compressed =
            zstd::bulk::compress(&body, 3).expect("compressing into a Vec cannot fail");
        let mut out = Vec::with_capacity(HEADER_LEN + compressed.len());
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.segment_len.to_le_bytes());
        out.extend_from_slice(&(self.blocks.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.flows.len() as u32).to_le_bytes());
        out.extend_from_slice(&(compressed.len() as u64).to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&compressed).to_le_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), HEADER_LEN);
        out.extend_from_slice(&compressed);
        out
    }

    /// Decodes an index file. Never panics; every failure names what was wrong.
    pub fn decode(b: &[u8]) -> std::result::Result<Self, DecodeError> {
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
        if version != INDEX_VERSION {
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
        let stored = h.u32_le().map_err(short)?;
        let computed = crc32c::crc32c(&b[..HEADER_LEN - 4]);
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
        let computed = crc32c::crc32c(compressed);
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
        let body = zstd::bulk::decompress(compressed, ulen as usize)
            .map_err(|e| invalid(format!("body does not decompress: {e}")))?;
        let mut c = Reader::new(&body);
        let mut blocks = Vec::with_capacity(n_blocks.min(1 << 20));
        for _ in 0..n_blocks {
            blocks.push(BlockSummary {
                dscp: c.u64_le().map_err(short)?,
                ip_packets: c.u32_le().map_err(short)?,
                non_ip_packets: c.u32_le().map_err(short)?,
                malformed_packets: c.u32_le().map_err(short)?,
            });
        }
        let mut flows = Vec::with_capacity(n_flows.min(1 << 20));
        for _ in 0..n_flows {
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
            let a = get_addr(&mut c, ip_version)?;
            let b = get_addr(&mut c, ip_version)?;
            let (pa, pb) = (c.u16_le().map_err(short)?, c.u16_le().map_err(short)?);
            let first_ns = c.u64_le().map_err(short)?;
            let last_ns = c.u64_le().map_err(short)?;
            let mut f = FlowRecord::new(
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
            for d in 0..2 {
                f.packets[d] = c.u64_le().map_err(short)?;
                f.bytes[d] = c.u64_le().map_err(short)?;
                f.dscp[d] = c.u64_le().map_err(short)?;
                f.tcp_flags[d] = c.u8().map_err(short)?;
                f.retransmissions[d] = c.varint().map_err(bad_varint)?;
                f.zero_windows[d] = c.varint().map_err(bad_varint)?;
                f.resets[d] = c.varint().map_err(bad_varint)?;
            }
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
                f.blocks.push(prev as u32);
            }
            let nbk = c.varint().map_err(bad_varint)?;
            if nbk > body.len() as u64 {
                return Err(invalid(format!("flow lists {nbk} buckets")));
            }
            let mut second = first_ns / 1_000_000_000;
            for _ in 0..nbk {
                second = second.saturating_add(c.varint().map_err(bad_varint)?);
                let mut bk = Bucket {
                    second,
                    ..Bucket::default()
                };
                for d in 0..2 {
                    bk.packets[d] = c.varint().map_err(bad_varint)?;
                    bk.bytes[d] = c.varint().map_err(bad_varint)?;
                }
                f.buckets.push(bk);
            }
            flows.push(f);
        }
        if c.position() != body.len() {
            return Err(invalid(format!(
                "{} bytes left over after the flows",
                body.len() - c.position()
            )));
        }
        Ok(SegmentIndex {
            seq,
            segment_len,
            blocks,
            flows,
        })
    }

    /// Writes the index for its segment into `dir` (tmp file, fsync, rename).
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::io("create index directory", dir, e))?;
        let path = dir.join(index_name(self.seq));
        let tmp = dir.join(format!(".{}.tmp", index_name(self.seq)));
        let bytes = self.encode();
        std::fs::write(&tmp, &bytes).map_err(|e| StoreError::io("write index", &tmp, e))?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| StoreError::io("fsync index", &tmp, e))?;
        std::fs::rename(&tmp, &path)
            .map_err(|e| StoreError::io("rename index into place", &tmp, e))?;
        Ok(path)
    }

    /// Whether `dir` holds a readable index header describing `seg` exactly (its sequence
    /// number, length and block count). Reads only the header.
    pub fn is_current(dir: &Path, seg: &SegmentReader) -> bool {
        use std::io::Read;
        let mut h = [0u8; HEADER_LEN];
        let ok = std::fs::File::open(dir.join(index_name(seg.seq())))
            .and_then(|mut f| f.read_exact(&mut h))
            .is_ok();
        if !ok || h[..8] != INDEX_MAGIC {
            return false;
        }
        let mut c = Reader::new(&h).at(8);
        let header = (|| -> std::result::Result<bool, DecodeError> {
            let version = c.u16_le().map_err(short)?;
            c.skip(6).map_err(short)?;
            let (seq, len, blocks) = (
                c.u64_le().map_err(short)?,
                c.u64_le().map_err(short)?,
                c.u32_le().map_err(short)?,
            );
            let stored = c.at(HEADER_LEN - 4).u32_le().map_err(short)?;
            Ok(version == INDEX_VERSION
                && stored == crc32c::crc32c(&h[..HEADER_LEN - 4])
                && seq == seg.seq()
                && len == seg.bytes()
                && blocks as usize == seg.blocks().len())
        })();
        header.unwrap_or(false)
    }

    /// Loads segment `seg`'s index from `dir`. `Ok(None)` when it is missing or describes a
    /// different file (stale); an unreadable index is an error naming the file.
    pub fn load(dir: &Path, seg: &SegmentReader) -> Result<Option<Self>> {
        let path = dir.join(index_name(seg.seq()));
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io("read index", path, e)),
        };
        let idx = SegmentIndex::decode(&bytes).map_err(|problem| StoreError::Corrupt {
            path: path.clone(),
            offset: 0,
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

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_pcap::{write as pw, Interface};

    /// Ethernet (optionally 802.1Q) + IPv4 + TCP frame with `payload` bytes of data.
    #[allow(clippy::too_many_arguments)]
    fn tcp4(
        vlan: Option<u16>,
        src: [u8; 4],
        dst: [u8; 4],
        sport: u16,
        dport: u16,
        seq: u32,
        flags: u8,
        window: u16,
        payload: usize,
        dscp: u8,
    ) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        if let Some(v) = vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&v.to_be_bytes());
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 20 + payload) as u16;
        f.extend_from_slice(&[0x45, dscp << 2]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0, 0x50, flags]);
        f.extend_from_slice(&window.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0]);
        f.resize(f.len() + payload, 0xab);
        f
    }

    fn arp() -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.resize(42, 0);
        f
    }

    fn block(packets: &[(u64, Vec<u8>)], new_iface: bool) -> (BlockMeta, Vec<u8>) {
        let mut data = Vec::new();
        let mut meta = BlockMeta::default();
        if new_iface {
            let i = Interface {
                linktype: 1,
                snaplen: 0,
                name: None,
            };
            pw::pcapng_idb(&mut data, &i);
            meta.new_interfaces.push(i);
        }
        for (ts, p) in packets {
            pw::pcapng_epb(&mut data, 0, *ts, p.len() as u32, p);
        }
        (meta, data)
    }

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];

    #[test]
    fn flows_are_counted_both_ways_with_tcp_health() {
        let mut ix = IndexBuilder::new(7);
        let s = 1_000_000_000u64;
        // a -> b: SYN, two data segments, one retransmitted; b -> a: ACK, zero window, RST.
        let (m0, d0) = block(
            &[
                (s, tcp4(None, A, B, 40000, 443, 100, 0x02, 1000, 0, 0)),
                (s + 1, tcp4(None, B, A, 443, 40000, 900, 0x12, 1000, 0, 0)),
                (
                    s + 2,
                    tcp4(None, A, B, 40000, 443, 101, 0x18, 1000, 100, 46),
                ),
                (s + 3, arp()),
            ],
            true,
        );
        ix.add_block(&m0, &d0);
        let (m1, d1) = block(
            &[
                (
                    2 * s,
                    tcp4(None, A, B, 40000, 443, 201, 0x18, 1000, 100, 46),
                ),
                (
                    2 * s + 1,
                    tcp4(None, A, B, 40000, 443, 101, 0x18, 1000, 100, 46),
                ),
                (2 * s + 2, tcp4(None, B, A, 443, 40000, 901, 0x10, 0, 0, 0)),
                (2 * s + 3, tcp4(None, B, A, 443, 40000, 901, 0x14, 0, 0, 0)),
                (
                    2 * s + 4,
                    tcp4(Some(100), A, B, 40000, 443, 1, 0x10, 5, 0, 10),
                ),
            ],
            false,
        );
        ix.add_block(&m1, &d1);
        let idx = ix.finish(12345);
        assert_eq!(idx.blocks.len(), 2);
        assert_eq!(idx.blocks[0].non_ip_packets, 1);
        assert_eq!(idx.blocks[0].ip_packets, 3);
        assert_eq!(idx.blocks[0].dscp, 1 | (1 << 46));
        assert_eq!(idx.blocks[1].dscp, 1 | (1 << 46) | (1 << 10));
        assert_eq!(idx.flows.len(), 2, "the VLAN-tagged packet is another flow");
        let f = &idx.flows[0];
        assert_eq!(f.key.a, IpAddr::from(A));
        assert_eq!(f.key.ports, Some((40000, 443)));
        assert_eq!(f.packets, [4, 3]);
        assert_eq!(f.retransmissions, [1, 0]);
        assert_eq!(f.zero_windows, [0, 1]);
        assert_eq!(f.resets, [0, 1]);
        assert_eq!(f.tcp_flags, [0x1a, 0x16]);
        assert_eq!(f.dscp, [1 | (1 << 46), 1]);
        assert_eq!(f.blocks, vec![0, 1]);
        assert_eq!((f.first_ns, f.last_ns), (s, 2 * s + 3));
        assert_eq!(f.buckets.len(), 2);
        assert_eq!(f.buckets[0].second, 1);
        assert_eq!(f.buckets[0].packets, [2, 1]);
        assert_eq!(f.buckets[1].packets, [2, 2]);
        let total: u64 = f.buckets.iter().map(|b| b.bytes[0] + b.bytes[1]).sum();
        assert_eq!(total, f.bytes[0] + f.bytes[1]);
        let v = &idx.flows[1];
        assert_eq!(v.key.vlans, [Some(100), None]);
        assert_eq!(v.blocks, vec![1]);

        let back = SegmentIndex::decode(&idx.encode()).unwrap();
        assert_eq!(back, idx);
    }

    #[test]
    fn ipv6_and_port_less_flows_round_trip() {
        let idx = SegmentIndex {
            seq: 3,
            segment_len: 99,
            blocks: vec![
                BlockSummary {
                    dscp: 1 << 46,
                    ip_packets: 2,
                    non_ip_packets: 0,
                    malformed_packets: 1
                };
                3
            ],
            flows: vec![FlowRecord {
                key: FlowKey {
                    vlans: [Some(10), Some(20)],
                    ip_version: 6,
                    proto: 58,
                    a: "fd00::1".parse().unwrap(),
                    b: "fd00::2".parse().unwrap(),
                    ports: None,
                },
                first_ns: 5_000_000_000,
                last_ns: 9_000_000_000,
                packets: [1, 1],
                bytes: [100, 120],
                dscp: [1 << 46, 1],
                tcp_flags: [0, 0],
                retransmissions: [0, 0],
                zero_windows: [0, 0],
                resets: [0, 0],
                blocks: vec![0, 2],
                buckets: vec![
                    Bucket {
                        second: 5,
                        packets: [1, 0],
                        bytes: [100, 0],
                    },
                    Bucket {
                        second: 9,
                        packets: [0, 1],
                        bytes: [0, 120],
                    },
                ],
            }],
        };
        let bytes = idx.encode();
        assert_eq!(SegmentIndex::decode(&bytes).unwrap(), idx);
        for cut in [0, 10, 63, 64, bytes.len() - 1] {
            assert!(SegmentIndex::decode(&bytes[..cut]).is_err());
        }
        let mut bad = bytes.clone();
        bad[30] ^= 1;
        assert!(matches!(
            SegmentIndex::decode(&bad),
            Err(DecodeError::Checksum { .. })
        ));
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(SegmentIndex::decode(&bad).is_err());
    }

    /// A flow key from small pools, with the edge cases of the packing (VLAN 0 and none,
    /// IPv4 and IPv4-mapped IPv6, ports (0, 0) and none).
    fn flow_key() -> impl proptest::strategy::Strategy<Value = FlowKey> {
        use proptest::prelude::*;
        let vlan = prop_oneof![Just(None), (0u16..3).prop_map(Some), Just(Some(0xFFFF))];
        let addr = prop_oneof![
            (0u8..3).prop_map(|x| IpAddr::from([10, 0, 0, x])),
            (0u16..3).prop_map(|x| IpAddr::from(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, x))),
            (0u16..3).prop_map(|x| IpAddr::from(Ipv6Addr::new(0x0a00, x, 0, 0, 0, 0, 0, 0))),
        ];
        let ports = prop_oneof![Just(None), (0u16..2, 0u16..2).prop_map(Some)];
        (
            [vlan.clone(), vlan],
            4u8..7,
            5u8..7,
            addr.clone(),
            addr,
            ports,
        )
            .prop_map(|(vlans, ip_version, proto, a, b, ports)| FlowKey {
                vlans,
                ip_version,
                proto,
                a,
                b,
                ports,
            })
    }

    fn hash_of(k: &FlowKey) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(k)
    }

    proptest::proptest! {
        /// The packed `Hash` of a key agrees with `Eq` and tells apart keys that differ in
        /// any one field (an IPv4 address from its IPv4-mapped IPv6 form, a missing VLAN
        /// from VLAN 0, ports (0, 0) from none).
        #[test]
        fn flow_key_hash_follows_equality(k1 in flow_key(), other in flow_key(), field in 0..7) {
            let mut k2 = k1;
            match field {
                0 => k2.vlans = other.vlans,
                1 => k2.ip_version = other.ip_version,
                2 => k2.proto = other.proto,
                3 => k2.a = other.a,
                4 => k2.b = other.b,
                5 => k2.ports = other.ports,
                _ => {}
            }
            proptest::prop_assert_eq!(k1 == k2, hash_of(&k1) == hash_of(&k2), "{:?} {:?}", k1, k2);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = SegmentIndex::decode(&bytes);
            let mut with_header = SegmentIndex::default().encode();
            with_header.truncate(HEADER_LEN);
            with_header.extend_from_slice(&bytes);
            let _ = SegmentIndex::decode(&with_header);
        }
    }
}
