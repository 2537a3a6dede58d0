//! Building a segment's index block by block, as the writer thread does while the segment is
//! written, or from a sealed segment's blocks ([`rebuild`]).

use std::collections::HashMap;

use capsule_pcap::read::fragment_packets;
use capsule_store::format::BlockMeta;
use capsule_store::{Result, SegmentReader, StoreError};
use capsule_wire::{dissect, L4};

use super::{BlockSummary, Bucket, FlowKey, FlowRecord, SegmentIndex};

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
        let mut last_flow: Option<(FlowKey, usize)> = None;
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
            // Packets come in trains of one flow: the last flow found is compared first,
            // which saves hashing the key for most packets of a train.
            let i = match last_flow {
                Some((k, i)) if k == key => i,
                _ => {
                    let i = match self.by_key.get(&key) {
                        Some(&i) => i,
                        None => {
                            self.flows.push(FlowRecord::new(key, p.ts_ns, p.ts_ns));
                            self.tcp.push(TcpTrack::default());
                            self.by_key.insert(key, self.flows.len() - 1);
                            self.flows.len() - 1
                        }
                    };
                    last_flow = Some((key, i));
                    i
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
