//! Building a segment's index block by block, as the writer thread does while the segment is
//! written, or from a sealed segment's blocks ([`rebuild`]).
//!
//! Each block is first counted on its own, as a [`BlockDelta`] (its summary, and every flow
//! with packets in it counted over this block alone), then added to the segment's records
//! with [`FlowRecord::absorb_block`]. The writer thread journals each delta
//! (sideindex/journal.rs) so readers see the open segment indexed; folding the journal goes
//! through the same `absorb_block`, so it equals the index built here.

use std::collections::HashMap;
use std::path::Path;

use capsule_pcap::read::fragment_packets;
use capsule_store::format::BlockMeta;
use capsule_store::{Result, SegmentReader, StoreError};
use capsule_wire::{dissect, L4};

use super::{
    index_name, BlockSummary, Bucket, FlowKey, FlowRecord, SegmentIndex, TcpCarry, TcpState,
};

/// One block's share of the index: what the journal records for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockDelta {
    /// The block's index in its segment.
    pub block: u32,
    pub summary: BlockSummary,
    /// Every flow with packets in the block, counted over this block alone, in the order
    /// their first packets came. Their block list is empty (it is `[block]`); `tcp_in` is
    /// the flow's state carried into the segment, `tcp_out` its state after this block.
    pub flows: Vec<FlowRecord>,
}

/// Not in the block being counted.
const NONE: u32 = u32::MAX;

/// Builds a segment's index block by block.
#[derive(Debug, Default)]
pub struct IndexBuilder {
    seq: u64,
    linktypes: Vec<u16>,
    blocks: Vec<BlockSummary>,
    flows: Vec<FlowRecord>,
    by_key: HashMap<FlowKey, usize>,
    /// Per flow: the live TCP state.
    tcp: Vec<TcpState>,
    /// Per flow: where its record is in `delta.flows` while a block is counted, or NONE.
    slot: Vec<u32>,
    /// Per entry of `delta.flows`: the flow it counts.
    delta_of: Vec<usize>,
    /// TCP state carried in from the previous segment, taken as flows first appear.
    seed: TcpCarry,
    delta: BlockDelta,
}

impl IndexBuilder {
    /// Starts the index of segment `seq` with no TCP state carried in.
    pub fn new(seq: u64) -> Self {
        Self::with_seed(seq, TcpCarry::new())
    }

    /// Starts the index of segment `seq`, with the TCP state each flow had at the end of
    /// the previous segment ([`SegmentIndex::carry_out`]).
    pub fn with_seed(seq: u64, seed: TcpCarry) -> Self {
        IndexBuilder {
            seq,
            seed,
            ..Default::default()
        }
    }

    /// The last block added, counted on its own.
    pub fn last_delta(&self) -> &BlockDelta {
        &self.delta
    }

    /// Blocks added so far.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Indexes the next block of the segment. `meta.new_interfaces` extends the segment's
    /// interface list (as in the block header); `data` is the block's decompressed content.
    /// The block's own counts are then [`IndexBuilder::last_delta`].
    pub fn add_block(&mut self, meta: &BlockMeta, data: &[u8]) {
        self.linktypes
            .extend(meta.new_interfaces.iter().map(|i| i.linktype));
        let block = self.blocks.len() as u32;
        self.delta.flows.clear();
        self.delta_of.clear();
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
                            let mut f = FlowRecord::new(key, p.ts_ns, p.ts_ns);
                            f.tcp_in = self.seed.remove(&key).unwrap_or_default();
                            self.tcp.push(f.tcp_in);
                            self.flows.push(f);
                            self.slot.push(NONE);
                            self.by_key.insert(key, self.flows.len() - 1);
                            self.flows.len() - 1
                        }
                    };
                    last_flow = Some((key, i));
                    i
                }
            };
            if self.slot[i] == NONE {
                self.slot[i] = self.delta.flows.len() as u32;
                let mut f = FlowRecord::new(key, p.ts_ns, p.ts_ns);
                f.tcp_in = self.flows[i].tcp_in;
                self.delta.flows.push(f);
                self.delta_of.push(i);
            }
            let f = &mut self.delta.flows[self.slot[i] as usize];
            f.first_ns = f.first_ns.min(p.ts_ns);
            f.last_ns = f.last_ns.max(p.ts_ns);
            f.packets[dir] += 1;
            f.bytes[dir] += wire;
            f.dscp[dir] |= 1u64 << (ip.dscp & 63);
            let second = p.ts_ns / 1_000_000_000;
            let bucket = match f.buckets.iter().rposition(|b| b.second == second) {
                Some(b) => b,
                None => {
                    // Packets arrive in time order within a block, but a lane's packets
                    // may interleave with others': keep the buckets sorted.
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
        for (d, &i) in self.delta.flows.iter_mut().zip(&self.delta_of) {
            d.tcp_out = self.tcp[i];
            self.slot[i] = NONE;
            self.flows[i].absorb_block(d, block);
        }
        self.delta.block = block;
        self.delta.summary = summary;
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

/// Rebuilds a sealed segment's index from its blocks, with the TCP state it was built with
/// when that is known: carried in as recorded in the segment's own index in `dir` when that
/// decodes (whatever file it describes), else carried out of the previous segment's index
/// (`seq - 1`), else none. So a rebuild counts what the live build counted, and
/// [`crate::verify_index`] can compare the two.
pub fn rebuild(dir: &Path, seg: &SegmentReader) -> Result<SegmentIndex> {
    let read = |seq: u64| {
        fsx_read(&dir.join(index_name(seq)))
            .and_then(|b| SegmentIndex::decode(&b).ok())
            .filter(|i| i.seq == seq)
    };
    let seed = match read(seg.seq()) {
        Some(own) => own.carry_in(),
        None => seg
            .seq()
            .checked_sub(1)
            .and_then(read)
            .map(|prev| prev.carry_out())
            .unwrap_or_default(),
    };
    rebuild_seeded(seg, seed)
}

fn fsx_read(path: &Path) -> Option<Vec<u8>> {
    capsule_store::fsx::read(path, "read index").ok()
}

/// Rebuilds a sealed segment's index from its blocks, with `seed` carried in.
pub fn rebuild_seeded(seg: &SegmentReader, seed: TcpCarry) -> Result<SegmentIndex> {
    let mut b = IndexBuilder::with_seed(seg.seq(), seed);
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
