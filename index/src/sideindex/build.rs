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

use capsule_pcap::read::fragment_records;
use capsule_store::format::BlockMeta;
use capsule_store::indexer::{Frag, Record};
use capsule_store::{Result, SegmentReader, StoreError};
use capsule_wire::dissect;
use capsule_wire::fragments::{FragmentKey, FragmentPorts};

use super::series::{BlockSeries, SeriesBuilder};
use super::{
    index_name, BlockSummary, Bucket, EncapDir, FlowKey, FlowRecord, NameCarry, SegmentIndex,
    TcpCarry, TcpState, SENT_SYN, SENT_SYN_ACK,
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
    /// The block's millisecond series (`None` in journal records written before index
    /// version 5).
    pub series: Option<BlockSeries>,
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
    /// foldhash, not SipHash: one look-up for every packet train on the capture path, and
    /// seeded per process like std's.
    by_key: HashMap<FlowKey, usize, foldhash::fast::RandomState>,
    /// Per flow: the live TCP state.
    tcp: Vec<TcpState>,
    /// Per flow: where its record is in `delta.flows` while a block is counted, or NONE.
    slot: Vec<u32>,
    /// Per entry of `delta.flows`: the flow it counts.
    delta_of: Vec<usize>,
    /// TCP state carried in from the previous segment, taken as flows first appear.
    seed: TcpCarry,
    delta: BlockDelta,
    /// The millisecond series of the block being counted, and of every block added.
    series_builder: SeriesBuilder,
    series: Vec<BlockSeries>,
    /// Per flow: its payload inspection (capsule-names) while it may still learn something;
    /// `None` before its first payload and once done (what it learned is then in the
    /// record's `totals.names`).
    trackers: Vec<Option<Box<capsule_names::Tracker>>>,
    /// Per flow whose inspection has not started (no payload inspected yet): the sequence
    /// numbers of its sides' SYNs, told to the inspection when it starts (a flow with a SYN
    /// and no payload, a scan's, costs this and no inspection).
    syns: HashMap<usize, [Option<u32>; 2], foldhash::fast::RandomState>,
    /// Per flow: its inspection is over (caps reached or nothing more to learn).
    inspected: Vec<bool>,
    /// Of the block being counted from its records: (record, flow, direction) of each
    /// record whose flow is still inspected, and the record being counted.
    want: Vec<(usize, usize, usize)>,
    record_no: usize,
    /// Flows whose payload was inspected in the block being counted: their names so far go
    /// into the block's delta (so the journal, and readers of the open segment, have them).
    named: Vec<usize>,
    /// Per flow: 1 + the block in which it was last put in `named` (0: never).
    named_at: Vec<u32>,
    /// Per flow: 1 + the block being counted from its records when it last got entries in
    /// `want` (0: never), and how many per direction: no more are taken than the flow's
    /// inspection has room for ([`capsule_names::Tracker::room`]).
    want_at: Vec<(u32, [u32; 2])>,
    /// Per entry of `delta.flows`: the key ([`capsule_wire::Encap::key`]) of the first
    /// encapsulation each direction's packets arrived in within the block (0: none yet).
    delta_keys: Vec<[u32; 2]>,
    /// Of the block being counted from its records: (record, entry of `delta.flows`,
    /// direction) of each first encapsulated packet of a direction whose encapsulation is
    /// not known yet (read again from the block's bytes after the records are counted).
    want_encap: Vec<(usize, usize, usize)>,
    /// Packets handed to the payload inspection so far (each dissected again).
    inspected_packets: u64,
    /// The segment's first fragments: a datagram's later fragments are counted in its flow
    /// (capsule_wire::fragments).
    frags: FragmentPorts,
    /// Names carried in from the previous segment ([`IndexBuilder::with_names`]), taken as
    /// flows first appear.
    names_seed: NameCarry,
    /// Per flow that was given names from `names_seed`: those names. They come first in
    /// every snapshot of the flow's names (what the inspection learns here only adds what
    /// they lack: [`capsule_names::FlowNames::absorb`]).
    carried: HashMap<usize, Box<capsule_names::FlowNames>, foldhash::fast::RandomState>,
    /// The previous blocks' delta records, kept for their allocations (buckets, DSCP
    /// counts): a flow's record in the next delta is one of these, reset
    /// ([`recycled`]), so the steady state allocates nothing per flow and block.
    spare: Vec<FlowRecord>,
}

/// A stored packet's bytes, for the payload inspection of flows that still need it.
#[derive(Clone, Copy)]
struct Packet<'a> {
    linktype: u16,
    orig_len: u32,
    data: &'a [u8],
}

impl IndexBuilder {
    /// Starts the index of segment `seq` with no TCP state carried in.
    pub fn new(seq: u64) -> Self {
        Self::with_seed(seq, TcpCarry::default())
    }

    /// Packets handed to the payload inspection so far: each is dissected again (and, when
    /// the block was counted from its records, found again in the block's bytes).
    pub fn inspected_packets(&self) -> u64 {
        self.inspected_packets
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

    /// Starts the flows that go on from the previous segment with the names they had at
    /// its end ([`SegmentIndex::names_out`]): each record of such a flow holds those names,
    /// and what this segment's bytes teach adds to them.
    pub fn with_names(mut self, names: NameCarry) -> Self {
        self.names_seed = names;
        self
    }

    /// The last block added, counted on its own.
    pub fn last_delta(&self) -> &BlockDelta {
        &self.delta
    }

    /// Blocks added so far.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The segment number being indexed.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The index of the blocks added so far, borrowed: their summaries and the flows'
    /// records, as [`IndexBuilder::finish`] would return them now (the fold checkpoint is
    /// encoded from these).
    pub fn so_far(&self) -> (&[BlockSummary], &[FlowRecord], &[BlockSeries]) {
        (&self.blocks, &self.flows, &self.series)
    }

    /// Indexes the next block of the segment. `meta.new_interfaces` extends the segment's
    /// interface list (as in the block header); `data` is the block's decompressed content.
    /// The block's own counts are then [`IndexBuilder::last_delta`].
    pub fn add_block(&mut self, meta: &BlockMeta, data: &[u8]) {
        self.add_block_pieces(meta, &[data], None);
    }

    /// [`IndexBuilder::add_block`] of a block whose content comes in pieces, each a run of
    /// whole pcapng blocks (a stored block built in its frame: one per raw zstd block).
    ///
    /// With `records` (what the store's producer took of each record as it stored it, see
    /// [`capsule_store::indexer::Record`]), those are counted and `data` is not read.
    pub fn add_block_pieces(
        &mut self,
        meta: &BlockMeta,
        data: &[&[u8]],
        records: Option<&[Record]>,
    ) {
        self.linktypes
            .extend(meta.new_interfaces.iter().map(|i| i.linktype));
        let block = self.blocks.len() as u32;
        self.spare.append(&mut self.delta.flows);
        self.delta_of.clear();
        self.delta_keys.clear();
        self.want_encap.clear();
        let mut summary = BlockSummary::default();
        let mut last_flow: Option<(FlowKey, usize)> = None;
        // Stored packets and cut-packet records (the headers of packets the cut-off did not
        // store) alike: the index counts what was seen; a cut record is counted as cut too.
        match records {
            Some(records) => {
                // Counted from the records alone; the records whose flow's payload is still
                // inspected are noted, and the block's packets (one per record, stored and
                // cut alike, in the records' order) are walked only when there are any, and
                // only up to the last of them: most blocks of established flows need none
                // (walking every block's packets cost a tenth of a store-rung capture).
                self.want.clear();
                // A TCP first fragment's record has no room for its identification: the
                // packet is read again for it (rare: TCP sets DF), walking the block once.
                let mut again = data
                    .iter()
                    .flat_map(|piece| fragment_records(piece))
                    .enumerate();
                for (n, r) in records.iter().enumerate() {
                    self.record_no = n;
                    let id = match r.fragment() {
                        Some(Frag::TcpFirst) => match again.find(|(k, _)| *k >= n) {
                            Some((k, Ok((p, _)))) if k == n && p.ts_ns == r.ts_ns => {
                                let linktype =
                                    self.linktypes.get(p.iface as usize).copied().unwrap_or(0);
                                fragment_id(&dissect(linktype, p.data))
                            }
                            _ => None,
                        },
                        _ => None,
                    };
                    self.count(&mut summary, &mut last_flow, r, None, None, id);
                }
                if !self.want_encap.is_empty() {
                    self.resolve_encaps(data, records);
                }
                if !self.want.is_empty() {
                    let want = std::mem::take(&mut self.want);
                    let mut packets = data
                        .iter()
                        .flat_map(|piece| fragment_records(piece))
                        .enumerate();
                    for &(n, i, dir) in &want {
                        let p = packets.find(|(k, _)| *k >= n);
                        let Some((k, Ok((p, _)))) = p else { break };
                        let r = &records[n];
                        if k != n || p.ts_ns != r.ts_ns || self.inspected[i] {
                            continue;
                        }
                        let pkt = Packet {
                            linktype: self.linktypes.get(p.iface as usize).copied().unwrap_or(0),
                            orig_len: p.orig_len,
                            data: p.data,
                        };
                        self.inspect(i, dir, r, pkt);
                    }
                    self.want = want;
                }
            }
            None => {
                for p in data.iter().flat_map(|piece| fragment_records(piece)) {
                    // The block was written (or verified) by the store: a bad record ends
                    // the block.
                    let Ok((p, cut)) = p else { break };
                    let linktype = self.linktypes.get(p.iface as usize).copied().unwrap_or(0);
                    let d = dissect(linktype, p.data);
                    let r = Record::of(p.ts_ns, p.orig_len, p.data.len() as u32, cut, &d);
                    let pkt = Packet {
                        linktype,
                        orig_len: p.orig_len,
                        data: p.data,
                    };
                    self.count(
                        &mut summary,
                        &mut last_flow,
                        &r,
                        Some(pkt),
                        d.encap.as_ref(),
                        fragment_id(&d),
                    );
                }
            }
        }
        // What the inspections of this block learned so far, in the delta: a reader folding
        // the journal joins these snapshots as the records are joined (each later one holds
        // the earlier), so an open segment's flows carry their names block by block.
        let mut named = std::mem::take(&mut self.named);
        for &i in &named {
            let names = match &self.trackers[i] {
                Some(t) => Some(t.names()),
                None => self.flows[i].totals.names.as_deref(),
            };
            let slot = self.slot[i];
            if let (Some(n), true) = (names, slot != NONE) {
                let n = match (&self.trackers[i], self.carried.get(&i)) {
                    (Some(_), Some(c)) => with_carried(c, n),
                    _ => n.clone(),
                };
                if !n.is_empty() {
                    self.delta.flows[slot as usize].totals.names = Some(Box::new(n));
                }
            }
        }
        named.clear();
        self.named = named;
        for (d, &i) in self.delta.flows.iter_mut().zip(&self.delta_of) {
            d.tcp_out = self.tcp[i];
            self.slot[i] = NONE;
            self.flows[i].absorb_block(d, block);
        }
        self.delta.block = block;
        self.delta.summary = summary;
        self.blocks.push(summary);
        let series = self.series_builder.take();
        self.series.push(series.clone());
        self.delta.series = Some(series);
    }

    /// Counts one record of the block being added: a stored packet, or a cut one.
    /// `tcp_frag_id`: the packet's fragment identification, read from it (a TCP first
    /// fragment's record lacks it), when at hand.
    fn count(
        &mut self,
        summary: &mut BlockSummary,
        last_flow: &mut Option<(FlowKey, usize)>,
        r: &Record,
        packet: Option<Packet<'_>>,
        encap: Option<&capsule_wire::Encap>,
        tcp_frag_id: Option<u32>,
    ) {
        let (ts_ns, wire, cut) = (r.ts_ns, u64::from(r.wire), r.cut());
        if r.malformed() {
            summary.malformed_packets += 1;
        }
        let Some((src, dst)) = r.addrs() else {
            self.series_builder.count(r, None);
            summary.non_ip_packets += 1;
            return;
        };
        summary.ip_packets += 1;
        summary.dscp |= 1u64 << (r.dscp & 63);
        // A datagram's later fragments carry no ports: they are counted in the flow of its
        // first fragment when that was seen (capsule_wire::fragments).
        let mut ports = r.ports();
        let mut later = false;
        if let Some(frag) = r.fragment() {
            let (id, first) = match frag {
                Frag::First(id) => (Some(id), true),
                Frag::TcpFirst => (tcp_frag_id, true),
                Frag::Later(id) => (Some(id), false),
            };
            if let Some(id) = id {
                let fk = FragmentKey {
                    vlans: r.vlans(),
                    proto: r.proto,
                    src,
                    dst,
                    id,
                };
                match (first, ports) {
                    (true, Some(p)) => self.frags.first(fk, p, ts_ns),
                    _ => {
                        later = true;
                        ports = self.frags.later(&fk, ts_ns);
                    }
                }
            }
        }
        let (key, dir) = FlowKey::of(r.vlans(), r.ip_version, r.proto, src, dst, ports);
        let mut fresh = false;

        // Packets come in trains of one flow: the last flow found is compared first,
        // which saves hashing the key for most packets of a train.
        let i = match *last_flow {
            Some((k, i)) if k == key => i,
            _ => {
                let i = match self.by_key.get(&key) {
                    Some(&i) => i,
                    None => {
                        let mut f = FlowRecord::new(key, ts_ns, ts_ns);
                        f.tcp_in = self.seed.remove(&key).unwrap_or_default();
                        self.tcp.push(f.tcp_in);
                        self.flows.push(f);
                        self.slot.push(NONE);
                        self.trackers.push(None);
                        self.inspected.push(false);
                        self.named_at.push(0);
                        self.want_at.push((0, [0; 2]));
                        let i = self.flows.len() - 1;
                        self.by_key.insert(key, i);
                        if !self.names_seed.is_empty() {
                            if let Some(n) = self.names_seed.remove(&key) {
                                // An application told from the flow's earlier bytes is
                                // final: its bytes here start mid-stream, and are not read
                                // (a payload that looks like a request would add a name
                                // that is none). DNS goes on: each datagram adds names.
                                if !matches!(
                                    n.app,
                                    capsule_names::App::Unknown | capsule_names::App::Dns
                                ) {
                                    self.inspected[i] = true;
                                }
                                self.carried.insert(i, n);
                                fresh = true;
                            }
                        }
                        i
                    }
                };
                *last_flow = Some((key, i));
                i
            }
        };
        // The series' fan-in counts per (sender, destination): the flow and its direction
        // number that pair (several numbers for one address pair are summed by address).
        self.series_builder.count(r, Some(2 * i + dir));
        if self.slot[i] == NONE {
            self.slot[i] = self.delta.flows.len() as u32;
            let mut f = recycled(&mut self.spare, key, ts_ns);
            f.tcp_in = self.flows[i].tcp_in;
            if fresh {
                // The names carried in: in the flow's first block's delta (a reader folding
                // the journal has them from there), and so in its record.
                f.totals.names = self.carried.get(&i).cloned();
            }
            self.delta.flows.push(f);
            self.delta_of.push(i);
            self.delta_keys.push([0; 2]);
        }
        if r.encap != 0 {
            self.count_encap(i, dir, r, encap);
        }
        if !self.inspected[i] && r.is_tcp() && r.tcp_flags & 0x02 != 0 {
            // A SYN tells where its side's stream starts, so the payloads may be inspected
            // in any order (a flow's packets may lie in several lanes' blocks).
            match &mut self.trackers[i] {
                Some(t) => {
                    t.syn(dir, r.seq);
                    self.tracked(i);
                }
                None => self.syns.entry(i).or_default()[dir] = Some(r.seq),
            }
        }
        if !self.inspected[i] && !later && (r.is_tcp() || r.proto == 17) && may_carry_payload(r) {
            let room = self.trackers[i]
                .as_ref()
                .map_or(capsule_names::MAX_PACKETS, |t| t.room(dir));
            match packet {
                Some(p) if room > 0 => self.inspect(i, dir, r, p),
                Some(_) => {}
                None => {
                    // The inspection runs after the block's records are counted: take no
                    // more of this direction's packets than it has room for now.
                    let tag = self.blocks.len() as u32 + 1;
                    let w = &mut self.want_at[i];
                    if w.0 != tag {
                        *w = (tag, [0; 2]);
                    }
                    if w.1[dir] < room {
                        w.1[dir] += 1;
                        self.want.push((self.record_no, i, dir));
                    }
                }
            }
        }
        let f = &mut self.delta.flows[self.slot[i] as usize];
        let st = &mut self.tcp[i];
        let t = &mut f.totals;
        t.first_ns = t.first_ns.min(ts_ns);
        t.last_ns = t.last_ns.max(ts_ns);
        t.packets[dir] += 1;
        t.bytes[dir] += wire;
        if cut {
            t.cut_packets[dir] += 1;
            t.cut_bytes[dir] += wire;
            t.cut_at_ns[dir] = Some(t.cut_at_ns[dir].map_or(ts_ns, |c| c.min(ts_ns)));
        }
        let dscp = r.dscp & 63;
        t.dscp[dir] |= 1u64 << dscp;
        t.count_dscp(dir, dscp, 1, wire);
        st.packets[dir] += 1;
        if st.dscp[dir].packet(ts_ns, dscp, st.packets[dir]) {
            t.dscp_change[dir] = st.dscp[dir].change;
        }
        let second = ts_ns / 1_000_000_000;
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
        let bk = &mut f.buckets[bucket];
        bk.packets[dir] += 1;
        bk.bytes[dir] += wire;
        if r.is_tcp() {
            let (flags, window) = (r.tcp_flags, r.window);
            t.tcp_flags[dir] |= flags;
            match flags & 0x12 {
                0x02 => t.handshake[dir] |= SENT_SYN,
                0x12 => t.handshake[dir] |= SENT_SYN_ACK,
                _ => {}
            }
            if flags & 0x04 != 0 {
                t.resets[dir] += 1;
                bk.resets[dir] += 1;
            } else if window == 0 {
                t.zero_windows[dir] += 1;
                bk.zero_windows[dir] += 1;
                st.zero_since[dir].get_or_insert(ts_ns);
            } else if let Some(since) = st.zero_since[dir].take() {
                t.zero_window_ns[dir] += ts_ns.saturating_sub(since);
            }
            match classify(st, dir, ts_ns, r.seq, r.tcp_payload, flags) {
                Segment::Data => {
                    t.data[dir] += 1;
                    bk.data[dir] += 1;
                }
                Segment::Retransmission => {
                    t.data[dir] += 1;
                    bk.data[dir] += 1;
                    t.retransmissions[dir] += 1;
                    bk.retransmissions[dir] += 1;
                }
                Segment::Other => {}
            }
        }
    }

    /// Counts flow `i`'s encapsulated packet (direction `dir`) in the block's delta: the
    /// first of the direction in the block sets its encapsulation (from `full`, the
    /// packet's dissection, when at hand; else from the segment's record of the flow when
    /// its key is the same; else it is read again from the block after its records are
    /// counted), each later one counts, and marks the direction mixed when its key differs.
    fn count_encap(
        &mut self,
        i: usize,
        dir: usize,
        r: &Record,
        full: Option<&capsule_wire::Encap>,
    ) {
        let slot = self.slot[i] as usize;
        let outer = if r.outer_dscp < 64 {
            1u64 << r.outer_dscp
        } else {
            0
        };
        let known = self.delta_keys[slot][dir];
        let e = self.delta.flows[slot]
            .totals
            .encap
            .get_or_insert_with(Default::default);
        if let Some(ed) = &mut e.dirs[dir] {
            ed.packets += 1;
            ed.outer_dscp |= outer;
            ed.mixed |= known != r.encap;
            return;
        }
        let first = match full {
            Some(f) => Some(EncapDir::of(f)),
            None => self.flows[i]
                .totals
                .encap
                .as_ref()
                .and_then(|e| e.dirs[dir])
                .filter(|d| d.key() == r.encap),
        };
        let mut ed = first.unwrap_or_else(|| {
            self.want_encap.push((self.record_no, slot, dir));
            EncapDir::of(&capsule_wire::Encap {
                kind: capsule_wire::EncapKind::Mpls,
                outer: None,
                outer_dscp: None,
                id: None,
                mpls: None,
                layers: 0,
            })
        });
        (ed.packets, ed.mixed, ed.outer_dscp) = (1, false, outer);
        self.delta_keys[slot][dir] = r.encap;
        if let Some(e) = &mut self.delta.flows[slot].totals.encap {
            e.dirs[dir] = Some(ed);
        }
    }

    /// Reads again from the block's bytes the packets [`IndexBuilder::count_encap`] could
    /// not name the encapsulation of, and fills it in. A packet that does not dissect to
    /// the key its record holds (the store wrote both from one dissection, so none should)
    /// leaves its direction mixed: undecided, never wrong.
    fn resolve_encaps(&mut self, data: &[&[u8]], records: &[Record]) {
        let want = std::mem::take(&mut self.want_encap);
        let mut packets = data
            .iter()
            .flat_map(|piece| fragment_records(piece))
            .enumerate();
        for &(n, slot, dir) in &want {
            let found = match packets.find(|(k, _)| *k >= n) {
                Some((k, Ok((p, _)))) if k == n && p.ts_ns == records[n].ts_ns => {
                    let linktype = self.linktypes.get(p.iface as usize).copied().unwrap_or(0);
                    dissect(linktype, p.data)
                        .encap
                        .filter(|e| e.key() == records[n].encap)
                }
                _ => None,
            };
            let Some(Some(ed)) = self.delta.flows[slot]
                .totals
                .encap
                .as_mut()
                .map(|e| e.dirs[dir].as_mut())
            else {
                continue;
            };
            match found {
                Some(e) => {
                    (ed.kind, ed.outer, ed.id, ed.mpls, ed.layers) =
                        (e.kind, e.outer, e.id, e.mpls, e.layers);
                }
                None => ed.mixed = true,
            }
        }
        self.want_encap = want;
        self.want_encap.clear();
    }

    /// Feeds flow `i`'s packet (direction `dir`) to its payload inspection; once that is
    /// done, its names go into the flow's record.
    fn inspect(&mut self, i: usize, dir: usize, r: &Record, p: Packet<'_>) {
        self.inspected_packets += 1;
        let d = dissect(p.linktype, p.data);
        let Some(payload) = capsule_names::payload_of(&d, p.data, p.orig_len) else {
            return;
        };
        if payload.is_empty() {
            return;
        }
        if self.trackers[i].is_none() {
            let mut t = Box::<capsule_names::Tracker>::default();
            for (d, isn) in self
                .syns
                .remove(&i)
                .unwrap_or_default()
                .into_iter()
                .enumerate()
            {
                if let Some(isn) = isn {
                    t.syn(d, isn);
                }
            }
            self.trackers[i] = Some(t);
        }
        let Some(t) = self.trackers[i].as_mut() else {
            return;
        };
        // A SYN's data starts after its ISN.
        let seq = r
            .is_tcp()
            .then_some(r.seq.wrapping_add(u32::from(r.tcp_flags & 0x02 != 0)));
        t.observe(dir, seq, r.dst_port, payload);
        self.tracked(i);
    }

    /// After flow `i`'s inspection was fed: its names go into the block's delta, and once
    /// it is done, into the flow's record.
    fn tracked(&mut self, i: usize) {
        let Some(done) = self.trackers[i].as_ref().map(|t| t.done()) else {
            return;
        };
        let tag = self.blocks.len() as u32 + 1;
        if self.named_at[i] != tag {
            self.named_at[i] = tag;
            self.named.push(i);
        }
        if done {
            self.inspected[i] = true;
            if let Some(t) = self.trackers[i].take() {
                let mut names = t.into_names();
                if let Some(c) = self.carried.get(&i) {
                    names = with_carried(c, &names);
                }
                if !names.is_empty() {
                    self.flows[i].totals.names = Some(Box::new(names));
                }
            }
        }
    }

    /// Moves what unfinished inspections learned into their flows' records.
    fn settle_names(&mut self) {
        for (i, t) in self.trackers.iter().enumerate() {
            if let Some(t) = t {
                let names = match self.carried.get(&i) {
                    Some(c) => with_carried(c, t.names()),
                    None => t.names().clone(),
                };
                if !names.is_empty() {
                    self.flows[i].totals.names = Some(Box::new(names));
                }
            }
        }
    }

    /// The finished index of a segment of `segment_len` bytes.
    pub fn finish(self, segment_len: u64) -> SegmentIndex {
        self.finish_carry(segment_len).0
    }

    /// [`IndexBuilder::finish`], and the states carried in for flows that sent nothing in
    /// this segment (for [`SegmentIndex::carry_forward`]).
    pub fn finish_carry(mut self, segment_len: u64) -> (SegmentIndex, TcpCarry) {
        self.settle_names();
        (
            SegmentIndex {
                seq: self.seq,
                segment_len,
                blocks: self.blocks,
                flows: self.flows,
                series: Some(self.series),
                named: true,
                tunnels: true,
            },
            self.seed,
        )
    }
}

/// `FlowRecord::new(key, ts_ns, ts_ns)`, made of a spare record when there is one: equal
/// to a new one, with the spare's vectors (emptied) kept for their capacity.
fn recycled(spare: &mut Vec<FlowRecord>, key: FlowKey, ts_ns: u64) -> FlowRecord {
    let Some(mut old) = spare.pop() else {
        return FlowRecord::new(key, ts_ns, ts_ns);
    };
    let mut f = FlowRecord::new(key, ts_ns, ts_ns);
    std::mem::swap(&mut f.blocks, &mut old.blocks);
    f.blocks.clear();
    std::mem::swap(&mut f.buckets, &mut old.buckets);
    f.buckets.clear();
    for d in 0..2 {
        std::mem::swap(&mut f.totals.dscp_counts[d], &mut old.totals.dscp_counts[d]);
        f.totals.dscp_counts[d].clear();
    }
    f
}

/// The fragment identification of a dissected packet, when it is a fragment.
fn fragment_id(d: &capsule_wire::Dissected) -> Option<u32> {
    d.ip.as_ref()?.fragment.map(|f| f.id)
}

/// A flow's names carried in from the previous segment, with what this segment's inspection
/// learned added (the carried ones win: they were read from the flow's earlier bytes).
fn with_carried(
    carried: &capsule_names::FlowNames,
    learned: &capsule_names::FlowNames,
) -> capsule_names::FlowNames {
    let mut n = carried.clone();
    n.absorb(learned);
    n
}

/// What a TCP segment is, for the health counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Data beyond what the direction carried before.
    Data,
    /// Data whose sequence range the direction has already carried.
    Retransmission,
    /// No data, a keepalive, or a zero-window probe.
    Other,
}

/// Whether `a` is after `b` in RFC 1982 serial-number order (32 bits).
/// Whether the packet of record `r` can give [`capsule_names::payload_of`] a non-empty
/// payload, told from the record alone (the same tests, so skipping the others changes
/// nothing): a cut or malformed packet, one of at most 60 bytes and a TCP segment without
/// payload bytes never do. Most packets of a bulk transfer's return direction are such
/// acknowledgements; reading each again from its block cost a tenth of a store-rung capture.
fn may_carry_payload(r: &Record) -> bool {
    r.wire > 60
        && r.flags & (Record::CUT | Record::MALFORMED) == 0
        && (!r.is_tcp() || r.tcp_payload > 0)
}

fn serial_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Classifies a TCP segment of direction `dir` (`seq`, `len` payload bytes, `flags`) and
/// advances the direction's high mark in `st`. A retransmission is a data segment whose end
/// (seq + len) is not after the high mark (serial-number arithmetic, so a wrap of the
/// sequence space is no retransmission); a keepalive (at most 1 byte at high - 1) and a
/// zero-window probe (1 byte while the peer advertises a zero window) are neither data nor
/// retransmissions. A SYN carrying data is data.
///
/// A data segment older than the packet that set the high mark was indexed late (it sits in
/// another lane's block, see [`TcpState`]): it is data, and moves nothing.
pub(crate) fn classify(
    st: &mut TcpState,
    dir: usize,
    ts: u64,
    seq: u32,
    len: u32,
    flags: u8,
) -> Segment {
    let syn = flags & 0x02 != 0;
    if st.high[dir].is_some() && ts < st.high_ts[dir] {
        return if len > 0 {
            Segment::Data
        } else {
            Segment::Other
        };
    }
    if len == 0 {
        if flags & 0x03 != 0 {
            // SYN and FIN take one sequence number.
            let end = seq.wrapping_add(1);
            if st.high[dir].is_none_or(|h| serial_gt(end, h)) {
                st.high[dir] = Some(end);
                st.high_ts[dir] = ts;
            }
        }
        return Segment::Other;
    }
    let end = seq.wrapping_add(len);
    let Some(high) = st.high[dir] else {
        st.high[dir] = Some(end);
        st.high_ts[dir] = ts;
        return Segment::Data;
    };
    if len == 1 && seq == high.wrapping_sub(1) {
        return Segment::Other; // keepalive
    }
    if len == 1 && st.zero_since[1 - dir].is_some() {
        // The peer's window is closed: a probe (its byte counts once the window opens).
        return Segment::Other;
    }
    if serial_gt(end, high) {
        st.high[dir] = Some(end);
        st.high_ts[dir] = ts;
        Segment::Data
    } else if syn {
        Segment::Data
    } else {
        Segment::Retransmission
    }
}

/// Rebuilds a sealed segment's index from its blocks, with the TCP state it was built with
/// when that is known: carried in as recorded in the segment's own index in `dir` when that
/// decodes (whatever file it describes), else carried out of the previous segment's index
/// (`seq - 1`), else none. So a rebuild counts what the live build counted, and
/// [`crate::verify_index`] can compare the two.
///
/// The names carried in are those of the previous segment's index, as the live build had
/// them ([`SegmentIndex::names_out`]); when that index is gone (retention deleted the
/// segment) or does not decode, those of the segment's own index, the names it was built
/// with (adding a flow's own names to it again changes nothing: `FlowNames::absorb`).
pub fn rebuild(dir: &Path, seg: &SegmentReader) -> Result<SegmentIndex> {
    let read = |seq: u64| {
        fsx_read(&dir.join(index_name(seq)))
            .and_then(|b| SegmentIndex::decode(&b).ok())
            .filter(|i| i.seq == seq)
    };
    let own = read(seg.seq());
    let prev = seg.seq().checked_sub(1).and_then(read);
    let seed = match (&own, &prev) {
        (Some(own), _) => own.carry_in(),
        (None, Some(prev)) => prev.carry_out(),
        (None, None) => TcpCarry::default(),
    };
    let names = match (&prev, &own) {
        (Some(prev), _) => prev.names_out(),
        (None, Some(own)) => own.names_out(),
        (None, None) => NameCarry::default(),
    };
    rebuild_seeded(seg, seed, names)
}

fn fsx_read(path: &Path) -> Option<Vec<u8>> {
    capsule_store::fsx::read(path, "read index").ok()
}

/// Rebuilds a sealed segment's index from its blocks, with `seed` and `names` carried in.
pub fn rebuild_seeded(
    seg: &SegmentReader,
    seed: TcpCarry,
    names: NameCarry,
) -> Result<SegmentIndex> {
    let mut b = IndexBuilder::with_seed(seg.seq(), seed).with_names(names);
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

#[cfg(test)]
mod tests {
    use super::super::tests::{block, tcp4, A, B};
    use super::super::DscpCount;
    use super::*;

    const S: u64 = 1_000_000_000;

    /// Ethernet + IPv6 + TCP frame with `payload` bytes and traffic class `tclass`, from
    /// fd00::`src` to fd00::`dst` (the lower host on port 40000, the other on 443).
    fn tcp6(src: u16, dst: u16, seq: u32, flags: u8, payload: usize, tclass: u8) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x86, 0xdd];
        let vtf = (6u32 << 28) | (u32::from(tclass) << 20);
        f.extend_from_slice(&vtf.to_be_bytes());
        f.extend_from_slice(&((20 + payload) as u16).to_be_bytes());
        f.extend_from_slice(&[6, 64]);
        for host in [src, dst] {
            let a: std::net::Ipv6Addr = format!("fd00::{host:x}").parse().unwrap();
            f.extend_from_slice(&a.octets());
        }
        let (sport, dport) = if src < dst {
            (40000u16, 443u16)
        } else {
            (443, 40000)
        };
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0x10, 0, 0, 0, 0, 0]);
        f.resize(f.len() + payload, 0xcd);
        f
    }

    fn index_of(packets: &[(u64, Vec<u8>)]) -> SegmentIndex {
        let mut ix = IndexBuilder::new(1);
        let (m, d) = block(packets, true);
        ix.add_block(&m, &d);
        ix.finish(1)
    }

    /// A bulk transfer: `n` data segments of 1000 bytes from A, each acknowledged by B
    /// with a segment without payload.
    fn bulk(n: u32) -> Vec<(u64, Vec<u8>)> {
        let mut p = Vec::new();
        for k in 0..n {
            let t = S + 2 * u64::from(k);
            p.push((
                t,
                tcp4(None, A, B, 40000, 443, 1 + k * 1000, 0x18, 1000, 1000, 0),
            ));
            p.push((t + 1, tcp4(None, B, A, 443, 40000, 1, 0x10, 1000, 0, 0)));
        }
        p
    }

    #[test]
    fn a_bulk_flows_acknowledgements_and_later_data_are_not_read_again() {
        // Before: a flow whose other direction never carries a payload is never done, so
        // every one of its 400 packets was dissected again (and, live, found again in its
        // block). Now only the data direction's first MAX_PACKETS are.
        let p = bulk(200);
        let (m, d) = block(&p, true);
        let mut whole = IndexBuilder::new(1);
        whole.add_block(&m, &d);
        assert_eq!(
            whole.inspected_packets(),
            u64::from(capsule_names::MAX_PACKETS)
        );
        // Counted from the store's records, as live capture does: the same.
        let records: Vec<Record> = p
            .iter()
            .map(|(ts, f)| Record::of(*ts, f.len() as u32, f.len() as u32, false, &dissect(1, f)))
            .collect();
        let mut live = IndexBuilder::new(1);
        live.add_block_pieces(&m, &[&d], Some(&records));
        assert_eq!(
            live.inspected_packets(),
            u64::from(capsule_names::MAX_PACKETS)
        );
        // The indexes are the same either way.
        assert_eq!(whole.finish(1).encode(), live.finish(1).encode());
    }

    #[test]
    fn more_than_255_retransmissions_are_counted_exactly() {
        let mut p = vec![(S, tcp4(None, A, B, 40000, 443, 1000, 0x18, 1000, 100, 0))];
        for n in 0..300u64 {
            p.push((
                S + 1 + n,
                tcp4(None, A, B, 40000, 443, 1000, 0x18, 1000, 100, 0),
            ));
        }
        let idx = index_of(&p);
        let f = &idx.flows[0];
        assert_eq!(f.totals.retransmissions, [300, 0]);
        assert_eq!(f.totals.data, [301, 0]);
        assert_eq!(f.buckets[0].retransmissions, [300, 0]);
        let back = SegmentIndex::decode(&idx.encode()).unwrap();
        assert_eq!(back.flows[0].totals.retransmissions, [300, 0]);
    }

    #[test]
    fn a_dscp_change_at_packet_20_is_recorded_with_exact_counts_per_value() {
        let p: Vec<_> = (0..30u32)
            .map(|n| {
                let dscp = if n < 19 { 0 } else { 46 };
                let seq = 1 + n * 100;
                (
                    S + u64::from(n),
                    tcp4(None, A, B, 40000, 443, seq, 0x18, 1000, 100, dscp),
                )
            })
            .collect();
        let idx = index_of(&p);
        let f = &idx.flows[0];
        let c = f.totals.dscp_change[0].expect("a change");
        assert_eq!((c.ordinal, c.ts_ns, c.from, c.to), (20, S + 19, 0, 46));
        assert_eq!(f.totals.dscp_change[1], None);
        let frame = p[0].1.len() as u64;
        assert_eq!(
            f.totals.dscp_counts[0],
            vec![
                DscpCount {
                    dscp: 0,
                    packets: 19,
                    bytes: 19 * frame
                },
                DscpCount {
                    dscp: 46,
                    packets: 11,
                    bytes: 11 * frame
                }
            ]
        );
        assert_eq!(f.totals.retransmissions, [0, 0]);
        assert_eq!(SegmentIndex::decode(&idx.encode()).unwrap(), idx);
    }

    #[test]
    fn the_change_ordinal_and_the_high_mark_carry_across_segments() {
        // Packets 1-10 in segment 1 (DSCP 0), 11-25 in segment 2 (DSCP 10 from packet 12),
        // and a resend in segment 3 of data sent in segment 1.
        let pkt = |n: u32, dscp: u8| tcp4(None, A, B, 40000, 443, 1 + n * 10, 0x18, 9, 10, dscp);
        let mut merged: Option<FlowRecord> = None;
        let mut carry = TcpCarry::default();
        let segments: [Vec<(u64, Vec<u8>)>; 3] = [
            (0..10).map(|n| (S + u64::from(n), pkt(n, 0))).collect(),
            (10..25)
                .map(|n| (5 * S + u64::from(n), pkt(n, if n == 10 { 0 } else { 10 })))
                .collect(),
            vec![(9 * S, pkt(3, 10))],
        ];
        for (seq, p) in segments.iter().enumerate() {
            let mut ix = IndexBuilder::with_seed(seq as u64, carry);
            let (m, d) = block(p, true);
            ix.add_block(&m, &d);
            let idx = ix.finish(1);
            carry = idx.carry_out();
            let f = &idx.flows[0];
            match merged.as_mut() {
                Some(x) => x.absorb(f),
                None => merged = Some(f.clone()),
            }
        }
        let f = merged.unwrap();
        assert_eq!(f.totals.packets, [26, 0], "one row, exact counts");
        assert_eq!(f.totals.retransmissions, [1, 0]);
        let c = f.totals.dscp_change[0].unwrap();
        assert_eq!((c.ordinal, c.from, c.to), (12, 0, 10));
        assert_eq!(f.totals.dscp_counts[0].len(), 2);
        assert_eq!(f.totals.dscp_counts[0][0].packets, 11);
        assert_eq!(f.totals.dscp_counts[0][1].packets, 15);
    }

    #[test]
    fn sequence_wraparound_is_no_retransmission() {
        let start = u32::MAX - 250;
        let mut p = Vec::new();
        for n in 0..6u32 {
            let seq = start.wrapping_add(n * 100);
            p.push((
                S + u64::from(n),
                tcp4(None, A, B, 40000, 443, seq, 0x18, 1000, 100, 0),
            ));
        }
        // One real resend after the wrap: the segment that started at start + 300.
        p.push((
            S + 9,
            tcp4(
                None,
                A,
                B,
                40000,
                443,
                start.wrapping_add(300),
                0x18,
                1000,
                100,
                0,
            ),
        ));
        let f = &index_of(&p).flows[0];
        assert_eq!(f.totals.retransmissions, [1, 0]);
        assert_eq!(f.totals.data, [7, 0]);
    }

    #[test]
    fn keepalives_and_zero_window_probes_are_not_retransmissions() {
        let p = vec![
            (S, tcp4(None, A, B, 40000, 443, 1000, 0x18, 1000, 100, 0)),
            // Keepalive: one byte at high mark - 1, twice; an empty one too.
            (S + 1, tcp4(None, A, B, 40000, 443, 1099, 0x10, 1000, 1, 0)),
            (S + 2, tcp4(None, A, B, 40000, 443, 1099, 0x10, 1000, 1, 0)),
            (S + 3, tcp4(None, A, B, 40000, 443, 1099, 0x10, 1000, 0, 0)),
            // B closes its window; A probes with the next byte, twice; B opens after 2 s.
            (S + 4, tcp4(None, B, A, 443, 40000, 1, 0x10, 0, 0, 0)),
            (S + 5, tcp4(None, A, B, 40000, 443, 1100, 0x10, 1000, 1, 0)),
            (S + 6, tcp4(None, A, B, 40000, 443, 1100, 0x10, 1000, 1, 0)),
            (S + 7, tcp4(None, B, A, 443, 40000, 1, 0x10, 0, 0, 0)),
            (3 * S + 4, tcp4(None, B, A, 443, 40000, 1, 0x10, 500, 0, 0)),
            (
                3 * S + 5,
                tcp4(None, A, B, 40000, 443, 1100, 0x18, 1000, 100, 0),
            ),
            // A real resend.
            (
                3 * S + 6,
                tcp4(None, A, B, 40000, 443, 1100, 0x18, 1000, 100, 0),
            ),
        ];
        let f = &index_of(&p).flows[0];
        assert_eq!(f.totals.retransmissions, [1, 0]);
        assert_eq!(f.totals.data, [3, 0]);
        assert_eq!(f.totals.zero_windows, [0, 2]);
        assert_eq!(f.totals.zero_window_ns, [0, 2 * S]);
    }

    #[test]
    fn ipv6_traffic_class_gives_the_dscp_and_unanswered_syns_are_seen() {
        let p = vec![
            (S, tcp6(1, 2, 10, 0x02, 0, 46 << 2)),
            (S + 1, tcp6(1, 2, 10, 0x02, 0, 46 << 2)),
            (S + 2, tcp6(3, 4, 10, 0x02, 0, 0)),
            (S + 3, tcp6(4, 3, 99, 0x12, 0, 0)),
        ];
        let idx = index_of(&p);
        let f = &idx.flows[0];
        assert_eq!(f.key.ip_version, 6);
        assert_eq!(f.totals.dscp[0], 1 << 46);
        assert_eq!(f.totals.dscp_counts[0][0].dscp, 46);
        assert!(f.totals.syn_unanswered(0) && !f.totals.syn_unanswered(1));
        let g = &idx.flows[1];
        assert!(!g.totals.syn_unanswered(0) && !g.totals.syn_unanswered(1));
    }

    /// The store writes a block per DSCP class: a remarked flow's later packets (EF) may be
    /// indexed before its earlier ones (CS0). The change and the retransmission count come
    /// out as if the packets had come in time order.
    #[test]
    fn blocks_of_other_lanes_indexed_out_of_time_order_give_the_same_answers() {
        let pkt = |n: u32| {
            let dscp = if n < 19 { 0 } else { 46 };
            let seq = 1 + n * 100;
            (
                S + u64::from(n),
                tcp4(None, A, B, 40000, 443, seq, 0x18, 1000, 100, dscp),
            )
        };
        let all: Vec<_> = (0..30).map(pkt).collect();
        let mut ix = IndexBuilder::new(1);
        let (m, d) = block(&all[19..], true);
        ix.add_block(&m, &d);
        let (m, d) = block(&all[..19], false);
        ix.add_block(&m, &d);
        let idx = ix.finish(1);
        let f = &idx.flows[0];
        let c = f.totals.dscp_change[0].expect("a change");
        assert_eq!((c.ordinal, c.ts_ns, c.from, c.to), (20, S + 19, 0, 46));
        assert_eq!(
            f.totals.retransmissions,
            [0, 0],
            "late packets are no retransmissions"
        );
        assert_eq!(f.totals.data, [30, 0]);
        assert_eq!(SegmentIndex::decode(&idx.encode()).unwrap(), idx);
    }

    /// An Ethernet + IPv4 fragment of a UDP datagram from A to B: `id`, `offset` in 8-byte
    /// units (0: the first, with the UDP header from `sport` to 53), `len` bytes of payload.
    fn udp_frag(id: u16, offset: u16, more: bool, sport: u16, len: usize) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&((20 + len) as u16).to_be_bytes());
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(&(offset | if more { 0x2000 } else { 0 }).to_be_bytes());
        f.extend_from_slice(&[64, 17, 0, 0]);
        f.extend_from_slice(&A);
        f.extend_from_slice(&B);
        if offset == 0 {
            f.extend_from_slice(&sport.to_be_bytes());
            f.extend_from_slice(&53u16.to_be_bytes());
            f.extend_from_slice(&4000u16.to_be_bytes());
            f.extend_from_slice(&[0, 0]);
            f.resize(f.len() + len - 8, 0xab);
        } else {
            f.resize(f.len() + len, 0xab);
        }
        f
    }

    /// The index of `blocks` (each block's packets as (time, frame)), counted from the
    /// blocks' bytes, or from the records the writer's producer takes with `with_records`.
    fn index_of_blocks(blocks: &[Vec<(u64, Vec<u8>)>], with_records: bool) -> SegmentIndex {
        let mut ix = IndexBuilder::new(1);
        for (n, b) in blocks.iter().enumerate() {
            let (m, d) = block(b, n == 0);
            if with_records {
                let records: Vec<Record> = b
                    .iter()
                    .map(|(ts, f)| {
                        let dis = dissect(1, f);
                        Record::of(*ts, f.len() as u32, f.len() as u32, false, &dis)
                    })
                    .collect();
                ix.add_block_pieces(&m, &[&d], Some(&records));
            } else {
                ix.add_block(&m, &d);
            }
        }
        ix.finish(1)
    }

    /// A datagram's later fragments are counted in the flow of its first fragment, seen
    /// before them in the segment (in their block or an earlier one) within WINDOW_NS, from
    /// the blocks' bytes and from the records the writer's producer takes alike; a fragment
    /// whose first fragment came after it, or too long before, stays portless.
    #[test]
    fn later_fragments_join_the_flow_of_their_first_fragment() {
        let w = FragmentPorts::WINDOW_NS;
        // Block 0: datagram 1's first fragment (port 5000), datagram 2's first (5001) and
        // its second. Block 1: datagram 1's two later fragments, datagram 3's later fragment
        // before its first. Then empty blocks; the last: datagram 9 (first in block 0) too
        // late, and datagram 2's last, in time (an earlier block of a quieter class).
        let mut blocks: Vec<Vec<(u64, Vec<u8>)>> = vec![
            vec![
                (S, udp_frag(1, 0, true, 5000, 1480)),
                (S + 1, udp_frag(2, 0, true, 5001, 1480)),
                (S + 2, udp_frag(2, 185, false, 0, 100)),
                (S + 3, udp_frag(9, 0, true, 5009, 1480)),
            ],
            vec![
                (S + 4, udp_frag(1, 185, true, 0, 1480)),
                (S + 5, udp_frag(1, 370, false, 0, 40)),
                (S + 6, udp_frag(3, 185, false, 0, 60)),
                (S + 7, udp_frag(3, 0, true, 5003, 1480)),
            ],
        ];
        blocks.resize(20, Vec::new());
        blocks.push(vec![
            (S + 3 + w + 1, udp_frag(9, 185, false, 0, 30)),
            (S + 1 + w, udp_frag(2, 370, false, 0, 20)),
        ]);
        for with_records in [false, true] {
            let idx = index_of_blocks(&blocks, with_records);
            let flow = |ports: Option<(u16, u16)>| {
                idx.flows
                    .iter()
                    .find(|f| f.key.ports == ports)
                    .map(|f| (f.totals.packets, f.totals.bytes))
            };
            let len = |l: u64| 14 + 20 + l;
            assert_eq!(
                flow(Some((5000, 53))),
                Some(([3, 0], [len(1480) * 2 + len(40), 0])),
                "records: {with_records}"
            );
            assert_eq!(
                flow(Some((5001, 53))),
                Some(([3, 0], [len(1480) + len(100) + len(20), 0]))
            );
            assert_eq!(flow(Some((5003, 53))), Some(([1, 0], [len(1480), 0])));
            assert_eq!(flow(Some((5009, 53))), Some(([1, 0], [len(1480), 0])));
            assert_eq!(
                flow(None),
                Some(([2, 0], [len(60) + len(30), 0])),
                "the fragment before its first, and the one too late"
            );
            assert_eq!(idx.flows.len(), 5);
        }
    }

    /// An IPv4 fragment of a TCP segment from A:`sport` to B:443 (id `id`, offset in 8-byte
    /// units); the first carries the TCP header (seq 1000, PSH ACK) and `len` bytes in all.
    fn tcp_frag(id: u16, offset: u16, more: bool, sport: u16, len: usize) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&((20 + len) as u16).to_be_bytes());
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(&(offset | if more { 0x2000 } else { 0 }).to_be_bytes());
        f.extend_from_slice(&[64, 6, 0, 0]);
        f.extend_from_slice(&A);
        f.extend_from_slice(&B);
        if offset == 0 {
            f.extend_from_slice(&sport.to_be_bytes());
            f.extend_from_slice(&443u16.to_be_bytes());
            f.extend_from_slice(&1000u32.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0, 0, 0x50, 0x18, 0x10, 0, 0, 0, 0, 0]);
            f.resize(f.len() + len - 20, 0xab);
        } else {
            f.resize(f.len() + len, 0xab);
        }
        f
    }

    /// A TCP segment's later fragments are counted in its flow too, from the records (whose
    /// TCP first fragment has no identification: the block is read again for it) and from
    /// the blocks' bytes alike; they add packets and bytes, no TCP data segment or flags.
    #[test]
    fn later_fragments_of_a_tcp_segment_join_its_flow() {
        let blocks: Vec<Vec<(u64, Vec<u8>)>> = vec![
            vec![
                (S, tcp4(None, A, B, 40000, 443, 999, 0x02, 1000, 0, 0)),
                (S + 1, tcp_frag(7, 0, true, 40000, 1480)),
                (S + 2, tcp_frag(7, 185, true, 0, 1480)),
                (S + 3, tcp_frag(8, 0, true, 40001, 1480)),
            ],
            vec![
                (S + 4, tcp_frag(7, 370, false, 0, 40)),
                (S + 5, tcp_frag(8, 185, false, 0, 100)),
            ],
        ];
        for with_records in [false, true] {
            let idx = index_of_blocks(&blocks, with_records);
            let flow = |sport: u16| {
                idx.flows
                    .iter()
                    .find(|f| f.key.ports == Some((sport, 443)))
                    .map(|f| (f.totals.packets, f.totals.bytes, f.totals.data))
            };
            let len = |l: u64| 14 + 20 + l;
            assert_eq!(
                flow(40000),
                Some(([4, 0], [54 + len(1480) * 2 + len(40), 0], [1, 0])),
                "records: {with_records}"
            );
            assert_eq!(
                flow(40001),
                Some(([2, 0], [len(1480) + len(100), 0], [1, 0]))
            );
            assert_eq!(idx.flows.len(), 2, "no portless flow: {:?}", idx.flows);
        }
    }
}
