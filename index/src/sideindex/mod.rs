//! The side index: per segment, what each block holds and every flow's summary, so queries
//! plan without scanning and `capsule flows` answers from the index alone.
//!
//! ```text
//! writer thread, per block (raw bytes, before they are dropped)           build.rs
//!   -> dissect every packet -> FlowKey (canonical: both directions share one record)
//!   -> FlowRecord: first/last ns, packets/bytes/DSCP mask/TCP flags/retransmissions/
//!      zero windows/RSTs per direction, the blocks holding it, 1-second buckets
//!   -> BlockSummary: DSCP mask, IP / non-IP / malformed packet counts
//!   -> each block counted first as a BlockDelta, appended to the open segment's
//!      STORE/index/seg-N.journal (one checksummed record a block)        journal.rs
//!   -> TCP state (retransmission detection) carried on to the next segment's build
//! segment sealed -> SegmentIndex encoded -> STORE/index/seg-N.idx          file.rs
//!      (tmp, fsync, rename); the journal removed
//! readers: a sealed segment's .idx, or the open segment's journal folded (journal.rs)
//! ```
//!
//! This file holds the records themselves. The index is derived data: [`rebuild`]
//! recomputes it from a segment's blocks alone, and a missing or stale index (its recorded
//! segment length differs) is rebuilt by the next writer or by `capsule reindex`. The byte
//! layout is in docs/format.md.

use std::net::IpAddr;

mod build;
mod file;
pub mod journal;
pub mod series;

pub use build::{rebuild, rebuild_seeded, BlockDelta, IndexBuilder};
pub use file::{
    encap_from_record, encap_record, names_from_record, names_record, CountsIndex, IndexHeader,
    INDEX_VERSION,
};
pub use journal::{journal_name, LiveIndex};

/// Name of segment `seq`'s index file.
pub fn index_name(seq: u64) -> String {
    capsule_store::store::index_file_name(seq)
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

/// One second of a flow, each way: packets, wire bytes, and the TCP health counters (so that
/// per-interval TCP answers are exact to the second).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bucket {
    /// Seconds since the Unix epoch.
    pub second: u64,
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
    /// TCP segments carrying data (keepalives and zero-window probes excluded).
    pub data: [u64; 2],
    /// Of those, retransmissions (see [`FlowTotals::retransmissions`]).
    pub retransmissions: [u64; 2],
    /// TCP segments advertising a zero receive window (RSTs excluded).
    pub zero_windows: [u64; 2],
    pub resets: [u64; 2],
}

impl Bucket {
    /// Adds another bucket's counters (of the same second) to this one.
    pub fn add(&mut self, o: &Bucket) {
        for d in 0..2 {
            self.packets[d] += o.packets[d];
            self.bytes[d] += o.bytes[d];
            self.data[d] += o.data[d];
            self.retransmissions[d] += o.retransmissions[d];
            self.zero_windows[d] += o.zero_windows[d];
            self.resets[d] += o.resets[d];
        }
    }
}

/// One second of a flow as the analytics listing holds it ([`FlowCounts::buckets`]): a
/// [`Bucket`] in 64 bytes instead of 104, its packet and TCP counters in 32 bits. A listing
/// of a day holds millions of buckets, so they are most of its memory (and the page faults
/// of touching it). A flow direction would have to carry more than 4 billion packets in one
/// second to exceed them (800 Gbit/s Ethernet carries at most 1.2 billion a second); an
/// index that says so (crafted, or from traffic with forged timestamps) saturates there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CountsBucket {
    /// Seconds since the Unix epoch.
    pub second: u64,
    pub bytes: [u64; 2],
    pub packets: [u32; 2],
    pub data: [u32; 2],
    pub retransmissions: [u32; 2],
    pub zero_windows: [u32; 2],
    pub resets: [u32; 2],
}

impl From<&Bucket> for CountsBucket {
    fn from(b: &Bucket) -> Self {
        let n = |v: [u64; 2]| v.map(|x| u32::try_from(x).unwrap_or(u32::MAX));
        CountsBucket {
            second: b.second,
            bytes: b.bytes,
            packets: n(b.packets),
            data: n(b.data),
            retransmissions: n(b.retransmissions),
            zero_windows: n(b.zero_windows),
            resets: n(b.resets),
        }
    }
}

impl From<Bucket> for CountsBucket {
    fn from(b: Bucket) -> Self {
        CountsBucket::from(&b)
    }
}

/// A 1-second bucket as [`merge_buckets`] merges it: its second, and how another of the
/// same second is added to it.
pub trait SecondBucket: Copy {
    fn second(&self) -> u64;
    fn add_same_second(&mut self, o: &Self);
}

impl SecondBucket for Bucket {
    fn second(&self) -> u64 {
        self.second
    }
    fn add_same_second(&mut self, o: &Self) {
        self.add(o);
    }
}

impl SecondBucket for CountsBucket {
    fn second(&self) -> u64 {
        self.second
    }
    /// Sums, the 32-bit counters saturating (see [`CountsBucket`]).
    fn add_same_second(&mut self, o: &Self) {
        for d in 0..2 {
            self.bytes[d] = self.bytes[d].saturating_add(o.bytes[d]);
            self.packets[d] = self.packets[d].saturating_add(o.packets[d]);
            self.data[d] = self.data[d].saturating_add(o.data[d]);
            self.retransmissions[d] = self.retransmissions[d].saturating_add(o.retransmissions[d]);
            self.zero_windows[d] = self.zero_windows[d].saturating_add(o.zero_windows[d]);
            self.resets[d] = self.resets[d].saturating_add(o.resets[d]);
        }
    }
}

/// Packets and wire bytes of one DSCP value in one direction of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DscpCount {
    pub dscp: u8,
    pub packets: u64,
    pub bytes: u64,
}

/// The first DSCP change in one direction of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct DscpChange {
    /// The packet that carried the new value: its ordinal within that direction, 1-based,
    /// counted from the flow's first packet (carried across segments).
    pub ordinal: u64,
    pub ts_ns: u64,
    pub from: u8,
    pub to: u8,
}

/// [`FlowTotals::handshake`] bit: a SYN without ACK was sent in that direction.
pub const SENT_SYN: u8 = 1;
/// [`FlowTotals::handshake`] bit: a SYN-ACK was sent in that direction.
pub const SENT_SYN_ACK: u8 = 2;

/// A flow's span and counters, per direction (arrays are indexed by direction, 0: a -> b):
/// what a [`FlowRecord`] and a [`FlowCounts`] both carry, with how two of them of the same
/// flow add up ([`FlowTotals::absorb`]) written once, so the record's merge and the
/// listing's never drift apart.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlowTotals {
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: [u64; 2],
    /// Wire (original) bytes.
    pub bytes: [u64; 2],
    /// Bit n set: DSCP n was seen in that direction (every packet, not a sample).
    pub dscp: [u64; 2],
    /// Union of the TCP flags seen.
    pub tcp_flags: [u8; 2],
    /// TCP segments carrying data (keepalives and zero-window probes excluded).
    pub data: [u64; 2],
    /// TCP data segments whose sequence range that direction has already carried: the end
    /// (seq + length) is not after the highest end seen (RFC 1982 serial arithmetic), and
    /// the segment is neither a keepalive (at most 1 byte at high mark - 1) nor a
    /// zero-window probe (1 byte while the peer advertises a zero window).
    pub retransmissions: [u64; 2],
    /// TCP segments advertising a zero receive window (RSTs excluded).
    pub zero_windows: [u64; 2],
    pub resets: [u64; 2],
    /// Nanoseconds from a zero-window advert in that direction until the window opened
    /// again (stalls still open at the end of the record are not counted yet).
    pub zero_window_ns: [u64; 2],
    /// [`SENT_SYN`] / [`SENT_SYN_ACK`] bits: what of a handshake each direction sent.
    pub handshake: [u8; 2],
    /// Exact per-DSCP-value counters, ascending by value.
    pub dscp_counts: [Vec<DscpCount>; 2],
    /// The first DSCP change in each direction, if any.
    pub dscp_change: [Option<DscpChange>; 2],
    /// Of `packets`, those the per-class cut-off did not store (their headers only were
    /// kept, for this record): stored packets are `packets - cut_packets`.
    pub cut_packets: [u64; 2],
    /// Of `bytes`, the wire bytes of the packets not stored.
    pub cut_bytes: [u64; 2],
    /// The earliest packet of each direction the cut-off did not store.
    pub cut_at_ns: [Option<u64>; 2],
    /// The flow's application and names (capsule-names), when its payload told anything:
    /// index version 6's names table, boxed (most flows of a listing carry none).
    pub names: Option<Box<capsule_names::FlowNames>>,
    /// The encapsulation the flow's packets arrived in (MPLS, PPPoE, GRE, ERSPAN, VXLAN,
    /// Geneve, GTP-U), per direction, when some did: index version 7's encapsulation
    /// table, boxed (most flows carry none).
    pub encap: Option<Box<FlowEncap>>,
}

/// The encapsulations a flow's packets arrived in, per direction (0: a -> b).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlowEncap {
    /// The first encapsulation each direction's packets arrived in, in counting order;
    /// `None`: no packet of that direction was encapsulated.
    pub dirs: [Option<EncapDir>; 2],
}

/// One flow direction's encapsulation: the first its packets arrived in, how many of its
/// packets arrived encapsulated, and whether any arrived in another one.
///
/// Whether every packet of the direction arrived in `first`'s encapsulation is
/// `!mixed && packets == FlowTotals::packets[d]`; `packets < FlowTotals::packets[d]` means
/// some arrived bare. Two records of one flow join exactly ([`EncapDir::absorb`]): the
/// first stays, counts add, and a different first makes the join mixed, so the journal's
/// fold, block by block, says what the sealed index says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncapDir {
    pub kind: capsule_wire::EncapKind,
    /// The outer IP packet's source and destination (absent for MPLS and PPPoE alone).
    pub outer: Option<(IpAddr, IpAddr)>,
    /// VXLAN / Geneve VNI, GRE key, ERSPAN session id, GTP-U TEID, or PPPoE session id.
    pub id: Option<u32>,
    /// The top label of the first MPLS label stack crossed.
    pub mpls: Option<u32>,
    /// Encapsulation layers the first packet was found in.
    pub layers: u8,
    /// Packets of the direction that arrived in any encapsulation.
    pub packets: u64,
    /// Some packet of the direction arrived in an encapsulation other than this one
    /// (another kind, endpoints, identifier or label).
    pub mixed: bool,
    /// Bit n set: an encapsulated packet of the direction had outer DSCP n (its outer IP
    /// packet's; MPLS and PPPoE alone have none).
    pub outer_dscp: u64,
}

impl EncapDir {
    /// The first packet's encapsulation, one packet counted.
    pub fn of(e: &capsule_wire::Encap) -> Self {
        EncapDir {
            kind: e.kind,
            outer: e.outer,
            id: e.id,
            mpls: e.mpls,
            layers: e.layers,
            packets: 1,
            mixed: false,
            outer_dscp: e.outer_dscp.map_or(0, |v| 1u64 << (v & 63)),
        }
    }

    /// The identity packets are compared by ([`capsule_wire::encap_key`]).
    pub fn key(&self) -> u32 {
        capsule_wire::encap_key(self.kind, self.outer, self.id, self.mpls)
    }

    /// Adds a later record of the same flow direction.
    pub fn absorb(&mut self, o: &EncapDir) {
        self.mixed |= o.mixed || o.key() != self.key();
        self.packets += o.packets;
        self.outer_dscp |= o.outer_dscp;
    }

    /// Whether all of a direction's `packets` packets arrived in this one encapsulation.
    pub fn is_whole(&self, packets: u64) -> bool {
        !self.mixed && self.packets == packets
    }
}

impl EncapDir {
    /// The direction in words: kind, identifier, top MPLS label, outer endpoints
    /// (`vxlan vni 42 192.0.2.1>192.0.2.2`).
    pub fn describe(&self) -> String {
        use capsule_wire::EncapKind as K;
        let mut out = self.kind.name().to_string();
        if let Some(id) = self.id {
            let what = match self.kind {
                K::Vxlan | K::Geneve => "vni",
                K::Gre => "key",
                K::Erspan | K::Pppoe => "session",
                K::Gtpu => "teid",
                K::Mpls => "id",
            };
            out.push_str(&format!(" {what} {id}"));
        }
        if let Some(l) = self.mpls {
            out.push_str(&format!(" label {l}"));
        }
        if let Some((s, d)) = self.outer {
            out.push_str(&format!(" {s}>{d}"));
        }
        out
    }
}

impl FlowEncap {
    /// The flow's encapsulation in words, for a flow of `packets` packets per direction:
    /// a -> b's (`vxlan vni 42 192.0.2.1>192.0.2.2`), then b -> a's when it is not the same
    /// tunnel with its endpoints swapped, `(mixed)` when a direction's packets arrived in
    /// more than one encapsulation, `(partly)` when some arrived in none.
    pub fn describe(&self, packets: [u64; 2]) -> String {
        let same = |a: &EncapDir, b: &EncapDir| {
            (a.kind, a.id, a.mpls, a.outer) == (b.kind, b.id, b.mpls, b.outer.map(|(s, d)| (d, s)))
        };
        let mut out = match &self.dirs {
            [Some(a), Some(b)] if same(a, b) => a.describe(),
            [Some(a), Some(b)] => format!("{}, {}", a.describe(), b.describe()),
            [Some(a), None] | [None, Some(a)] => a.describe(),
            [None, None] => String::new(),
        };
        let dirs = || self.dirs.iter().zip(packets);
        if dirs().any(|(d, _)| d.is_some_and(|d| d.mixed)) {
            out.push_str(" (mixed)");
        } else if dirs().any(|(d, n)| d.map_or(n > 0, |d| d.packets < n)) {
            out.push_str(" (partly)");
        }
        out
    }

    /// Adds a later record of the same flow.
    pub fn absorb(&mut self, o: &FlowEncap) {
        for d in 0..2 {
            match (&mut self.dirs[d], &o.dirs[d]) {
                (Some(a), Some(b)) => a.absorb(b),
                (None, Some(b)) => self.dirs[d] = Some(*b),
                _ => {}
            }
        }
    }
}

impl FlowTotals {
    /// Nothing counted yet, over `first_ns..=last_ns`.
    pub fn new(first_ns: u64, last_ns: u64) -> Self {
        FlowTotals {
            first_ns,
            last_ns,
            ..FlowTotals::default()
        }
    }

    pub fn total_packets(&self) -> u64 {
        self.packets[0] + self.packets[1]
    }

    pub fn total_bytes(&self) -> u64 {
        self.bytes[0] + self.bytes[1]
    }

    /// Whether the cut-off left some of this flow's packets unstored.
    pub fn is_cut(&self) -> bool {
        self.cut_packets != [0, 0]
    }

    /// The earliest packet of the flow not stored, either direction.
    pub fn cut_at(&self) -> Option<u64> {
        self.cut_at_ns.iter().flatten().copied().min()
    }

    /// Wire bytes stored, both directions (seen minus cut).
    pub fn stored_bytes(&self) -> u64 {
        self.total_bytes() - (self.cut_bytes[0] + self.cut_bytes[1])
    }

    /// Packets stored, both directions (seen minus cut).
    pub fn stored_packets(&self) -> u64 {
        self.total_packets() - (self.cut_packets[0] + self.cut_packets[1])
    }

    /// Whether a SYN was sent in direction `d` and no SYN-ACK came back.
    pub fn syn_unanswered(&self, d: usize) -> bool {
        self.handshake[d] & SENT_SYN != 0 && self.handshake[1 - d] & SENT_SYN_ACK == 0
    }

    /// Adds `packets` packets of DSCP `dscp` and `wire` bytes to direction `d`'s per-value
    /// counters.
    pub fn count_dscp(&mut self, d: usize, dscp: u8, packets: u64, wire: u64) {
        count_dscp_into(&mut self.dscp_counts[d], dscp, packets, wire);
    }

    /// Adds the totals of another record of the same flow (another block's or segment's):
    /// the span widened, counters summed, masks joined, the earliest cut and DSCP change
    /// kept.
    pub fn absorb(&mut self, o: &FlowTotals) {
        self.first_ns = self.first_ns.min(o.first_ns);
        self.last_ns = self.last_ns.max(o.last_ns);
        if let Some(on) = &o.names {
            match &mut self.names {
                Some(n) => n.absorb(on),
                None => self.names = Some(on.clone()),
            }
        }
        if let Some(oe) = &o.encap {
            match &mut self.encap {
                Some(e) => e.absorb(oe),
                None => self.encap = Some(oe.clone()),
            }
        }
        for d in 0..2 {
            self.packets[d] += o.packets[d];
            self.bytes[d] += o.bytes[d];
            self.dscp[d] |= o.dscp[d];
            self.tcp_flags[d] |= o.tcp_flags[d];
            self.data[d] += o.data[d];
            self.retransmissions[d] += o.retransmissions[d];
            self.zero_windows[d] += o.zero_windows[d];
            self.resets[d] += o.resets[d];
            self.zero_window_ns[d] += o.zero_window_ns[d];
            self.handshake[d] |= o.handshake[d];
            self.cut_packets[d] += o.cut_packets[d];
            self.cut_bytes[d] += o.cut_bytes[d];
            self.cut_at_ns[d] = match (self.cut_at_ns[d], o.cut_at_ns[d]) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            for c in &o.dscp_counts[d] {
                count_dscp_into(&mut self.dscp_counts[d], c.dscp, c.packets, c.bytes);
            }
            // The earliest change wins; of two reports of one change, the later one (it
            // has counted more of the packets before it).
            match (&self.dscp_change[d], &o.dscp_change[d]) {
                (Some(a), Some(b)) if b.ts_ns <= a.ts_ns => self.dscp_change[d] = Some(*b),
                (None, Some(b)) => self.dscp_change[d] = Some(*b),
                _ => {}
            }
        }
    }
}

/// Everything the index knows of one flow within one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRecord {
    pub key: FlowKey,
    /// The flow's span and counters in this segment.
    pub totals: FlowTotals,
    /// Indexes of the blocks holding the flow's packets, ascending.
    pub blocks: Vec<u32>,
    /// Per-second counters, ascending by second.
    pub buckets: Vec<Bucket>,
    /// The flow's TCP state carried in from the previous segment (where it had packets),
    /// which retransmissions in this segment are judged against. Stored, so that a rebuild
    /// of this segment alone counts what the live build counted.
    pub tcp_in: TcpState,
    /// The flow's TCP state after its last packet in this segment: what the next segment
    /// carries in.
    pub tcp_out: TcpState,
}

/// What a flow's counting carries from one packet to the next, and from one segment's
/// build to the next: per direction, the TCP high mark (the highest sequence number +
/// payload seen, serial-number order) and the time of the packet that set it, since when the
/// sender has advertised a zero window, the packets counted so far, and the DSCP state.
///
/// The store writes a block per DSCP class (lane), so the index may see a flow's packets out
/// of time order when they fall in several lanes (a remarked flow, ties of timestamps). The
/// state is kept by timestamps where that matters: a data segment older than the packet
/// that set the high mark is no retransmission (it was indexed late), and the DSCP change is
/// the earliest packet whose value differs from the earliest packet's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct TcpState {
    pub high: [Option<u32>; 2],
    /// Timestamp of the packet that set `high`.
    pub high_ts: [u64; 2],
    /// Timestamp of the zero-window advert that started a stall still open.
    pub zero_since: [Option<u64>; 2],
    /// Packets of that direction counted before.
    pub packets: [u64; 2],
    pub dscp: [DscpState; 2],
}

/// The DSCP state of one direction of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct DscpState {
    /// The earliest packet seen: (timestamp, DSCP).
    pub first: Option<(u64, u8)>,
    /// The earliest packet whose DSCP differs from the earliest packet's, with the packets
    /// before it (its ordinal - 1).
    pub change: Option<DscpChange>,
}

impl DscpState {
    /// Counts a packet of DSCP `v` at `ts`, the `n`th of its direction in processing order;
    /// returns whether the change moved or its ordinal grew.
    pub fn packet(&mut self, ts: u64, v: u8, n: u64) -> bool {
        let Some((fts, fv)) = self.first else {
            self.first = Some((ts, v));
            return false;
        };
        if ts < fts {
            // Earlier than every packet seen (indexed late): the new first packet.
            self.first = Some((ts, v));
            if v != fv {
                // Everything seen so far carried fv from fts on: the change is at fts.
                self.change = Some(DscpChange {
                    ordinal: 2,
                    ts_ns: fts,
                    from: v,
                    to: fv,
                });
                return true;
            }
            return match &mut self.change {
                Some(c) => {
                    c.ordinal += 1;
                    true
                }
                None => false,
            };
        }
        match &mut self.change {
            Some(c) if ts < c.ts_ns => {
                if v != fv {
                    // An earlier change (indexed late): its ordinal is not known exactly.
                    *c = DscpChange {
                        ordinal: c.ordinal,
                        ts_ns: ts,
                        from: fv,
                        to: v,
                    };
                } else {
                    c.ordinal += 1;
                }
                true
            }
            None if v != fv => {
                self.change = Some(DscpChange {
                    ordinal: n,
                    ts_ns: ts,
                    from: fv,
                    to: v,
                });
                true
            }
            _ => false,
        }
    }
}

impl FlowRecord {
    /// A flow with no packets counted yet.
    pub fn new(key: FlowKey, first_ns: u64, last_ns: u64) -> Self {
        FlowRecord {
            key,
            totals: FlowTotals::new(first_ns, last_ns),
            blocks: Vec::new(),
            buckets: Vec::new(),
            tcp_in: TcpState::default(),
            tcp_out: TcpState::default(),
        }
    }

    /// A record from its counts (their buckets are not used: `buckets` are the record's,
    /// at full width), block list and carried TCP state.
    pub fn from_counts(
        c: FlowCounts,
        blocks: Vec<u32>,
        buckets: Vec<Bucket>,
        tcp_in: TcpState,
        tcp_out: TcpState,
    ) -> Self {
        FlowRecord {
            key: c.key,
            totals: c.totals,
            blocks,
            buckets,
            tcp_in,
            tcp_out,
        }
    }

    /// Adds one block's record of this flow (`d`, from a [`BlockDelta`]; its own block list
    /// is ignored) to the flow's record in the same segment: totals added, `block` appended
    /// to the block list, buckets merged by second, the TCP state after the block taken.
    /// The builder and the journal fold both go through here, so a folded journal equals
    /// the index built from the same blocks.
    pub fn absorb_block(&mut self, d: &FlowRecord, block: u32) {
        self.absorb(d);
        if self.blocks.last() != Some(&block) {
            self.blocks.push(block);
        }
        merge_buckets(&mut self.buckets, &d.buckets);
        self.tcp_out = d.tcp_out;
    }

    /// Adds another record of the same flow (another segment's) to this one. Block lists and
    /// buckets are not merged: their indexes belong to their own segments.
    pub fn absorb(&mut self, o: &FlowRecord) {
        self.totals.absorb(&o.totals);
    }
}

/// What the analytics answers need of a flow: a [`FlowRecord`] without its block list and
/// its carried TCP state (`tcp_in`, `tcp_out`: 384 of the record's 816 bytes in memory, used
/// only by rebuilds and by the next segment's build). [`SegmentIndex::decode_counts`]
/// decodes an index straight into these, so a listing of a day of flows holds and moves
/// half the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowCounts {
    pub key: FlowKey,
    /// The flow's span and counters, as the record's.
    pub totals: FlowTotals,
    pub buckets: Vec<CountsBucket>,
}

impl From<FlowRecord> for FlowCounts {
    fn from(f: FlowRecord) -> Self {
        FlowCounts {
            key: f.key,
            totals: f.totals,
            buckets: f.buckets.iter().map(CountsBucket::from).collect(),
        }
    }
}

impl FlowCounts {
    /// A flow with no packets counted yet.
    pub fn new(key: FlowKey, first_ns: u64, last_ns: u64) -> Self {
        FlowCounts {
            key,
            totals: FlowTotals::new(first_ns, last_ns),
            buckets: Vec::new(),
        }
    }

    /// Adds another segment's counts of the same flow, as [`FlowRecord::absorb`] does
    /// (buckets are not merged here; see [`merge_buckets`]).
    pub fn absorb(&mut self, o: &FlowCounts) {
        self.totals.absorb(&o.totals);
    }
}

/// Adds `packets` packets of DSCP `dscp` and `wire` bytes to per-value counters kept
/// ascending by value.
fn count_dscp_into(v: &mut Vec<DscpCount>, dscp: u8, packets: u64, wire: u64) {
    match v.binary_search_by_key(&dscp, |c| c.dscp) {
        Ok(i) => {
            v[i].packets += packets;
            v[i].bytes += wire;
        }
        Err(i) => v.insert(
            i,
            DscpCount {
                dscp,
                packets,
                bytes: wire,
            },
        ),
    }
}

/// Merges `src` (ascending by second) into `dst` (ascending by second), summing buckets of
/// the same second. The common case (`src` starts at or after `dst`'s last second) appends.
pub fn merge_buckets<B: SecondBucket>(dst: &mut Vec<B>, src: &[B]) {
    let (Some(first), Some(last)) = (src.first(), dst.last()) else {
        dst.extend_from_slice(src);
        return;
    };
    // The common case (segments in time order): src starts at or after dst's last second.
    if first.second() >= last.second() {
        let mut rest = src;
        if first.second() == last.second() {
            let n = dst.len();
            dst[n - 1].add_same_second(first);
            rest = &src[1..];
        }
        if rest
            .first()
            .is_none_or(|b| b.second() > dst[dst.len() - 1].second())
        {
            dst.extend_from_slice(rest);
            return;
        }
        // src itself out of order: fall through to the general merge of what is left.
        let old = std::mem::take(dst);
        *dst = merge_sorted(&old, rest);
        return;
    }
    let old = std::mem::take(dst);
    *dst = merge_sorted(&old, src);
}

/// Two runs of buckets merged in one pass (O(n + m)); buckets of the same second are added.
/// Each run is expected ascending; a run that is not is still merged without loss (its
/// out-of-order buckets are added where they fall).
fn merge_sorted<B: SecondBucket>(a: &[B], b: &[B]) -> Vec<B> {
    let mut out: Vec<B> = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.second() <= y.second() => {
                i += 1;
                x
            }
            (Some(_), Some(y)) | (None, Some(y)) => {
                j += 1;
                y
            }
            (Some(x), None) => {
                i += 1;
                x
            }
            (None, None) => unreachable!("the loop condition holds one"),
        };
        match out.last_mut() {
            Some(l) if l.second() == next.second() => l.add_same_second(next),
            Some(l) if l.second() > next.second() => {
                // Out of order within a run: place it where it belongs (rare, kept correct).
                let at = out.partition_point(|x| x.second() < next.second());
                if at < out.len() && out[at].second() == next.second() {
                    out[at].add_same_second(next);
                } else {
                    out.insert(at, *next);
                }
            }
            _ => out.push(*next),
        }
    }
    out
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
    /// Each block's millisecond series (index version 5); `None` for an index of an
    /// earlier version, which has none.
    pub series: Option<Vec<series::BlockSeries>>,
    /// The index keeps its flows' names (version 6 and later; an open segment's fold, when
    /// its checkpoint and every journal record used do): without them, a name term of a
    /// filter cannot match this segment's flows.
    pub named: bool,
    /// The index keeps its flows' encapsulations (version 7 and later; an open segment's
    /// fold, when its checkpoint and every journal record used do): without them, a flow
    /// without [`FlowTotals::encap`] may still have arrived in a tunnel.
    pub tunnels: bool,
}

/// Per flow, the TCP state handed from one segment's build to the next (foldhash: the
/// builder looks every new flow up here, on the capture path).
pub type TcpCarry = std::collections::HashMap<FlowKey, TcpState, foldhash::fast::RandomState>;

/// Per flow, the names the previous segment's index holds for it, handed to the next
/// segment's build as its TCP state is: a flow that goes on in the next segment starts there
/// with the names learned so far, so a window that leaves out the segment of its first bytes
/// still names it (docs/names.md, "Names across segments"). A flow carried in with a known
/// application other than DNS is not inspected again.
pub type NameCarry =
    std::collections::HashMap<FlowKey, Box<capsule_names::FlowNames>, foldhash::fast::RandomState>;

/// How long a flow's TCP state is carried through segments in which the flow is idle
/// (ns): Linux's longest retransmission timeout (TCP_RTO_MAX, 120 s). A flow stalled on a
/// lost segment sends nothing until its timer fires, often for longer than a segment lasts
/// (a 1 GiB segment holds about a second at 10 Gbit/s); its retransmission must still find
/// the data it repeats. A flow idle for longer starts fresh.
pub const CARRY_HORIZON_NS: u64 = 120 * 1_000_000_000;

impl TcpState {
    /// The time of the last packet that moved this state (0: none did).
    pub fn last_active_ns(&self) -> u64 {
        let zero = self.zero_since.iter().flatten().copied().max().unwrap_or(0);
        self.high_ts[0].max(self.high_ts[1]).max(zero)
    }
}

impl SegmentIndex {
    /// What the next segment's build carries in: every flow's state after this segment
    /// ([`SegmentIndex::carry_out`]), and the states carried into this segment's build for
    /// flows idle in it (`idle`: what [`IndexBuilder::finish_carry`] hands back) that moved
    /// within [`CARRY_HORIZON_NS`] of this segment's last packet.
    pub fn carry_forward(&self, idle: TcpCarry) -> TcpCarry {
        let mut carry = self.carry_out();
        let end = self.span().map_or(0, |(_, last)| last).max(
            idle.values()
                .map(TcpState::last_active_ns)
                .max()
                .unwrap_or(0),
        );
        for (key, st) in idle {
            let at = st.last_active_ns();
            if at > 0 && at.saturating_add(CARRY_HORIZON_NS) >= end {
                carry.entry(key).or_insert(st);
            }
        }
        carry
    }

    /// Every flow's state after this segment. Flows idle for a whole segment are not in it:
    /// only the live build carries them on ([`SegmentIndex::carry_forward`]); a rebuild from
    /// this alone (the next segment's own index gone) starts them fresh.
    pub fn carry_out(&self) -> TcpCarry {
        self.flows
            .iter()
            .filter(|f| f.tcp_out != TcpState::default())
            .map(|f| (f.key, f.tcp_out))
            .collect()
    }

    /// Every named flow's names after this segment: what the next segment's build starts
    /// those flows with ([`IndexBuilder::with_names`]). Only flows with packets in this
    /// segment: a flow idle for a whole segment starts the one after unnamed, as a rebuild
    /// of it from the previous segment's index alone would.
    pub fn names_out(&self) -> NameCarry {
        self.flows
            .iter()
            .filter_map(|f| {
                let n = f.totals.names.as_ref().filter(|n| !n.is_empty())?;
                Some((f.key, n.clone()))
            })
            .collect()
    }

    /// What this segment's build carried in (to rebuild it as it was built).
    pub fn carry_in(&self) -> TcpCarry {
        self.flows
            .iter()
            .filter(|f| f.tcp_in != TcpState::default())
            .map(|f| (f.key, f.tcp_in))
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::file::HEADER_LEN;
    use super::*;
    use capsule_pcap::{write as pw, Interface};
    use capsule_store::format::{BlockMeta, DecodeError};
    use std::net::Ipv6Addr;

    /// A listing bucket holds a record's bucket exactly while its counters fit 32 bits, and
    /// saturates beyond (as merged buckets of one second do).
    #[test]
    fn counts_bucket_narrows_and_saturates() {
        let mut b = Bucket {
            second: 7,
            ..Bucket::default()
        };
        b.packets = [3, u64::from(u32::MAX)];
        b.bytes = [1 << 40, 5];
        b.data = [2, 1 << 33];
        let c = CountsBucket::from(&b);
        assert_eq!(c.second, 7);
        assert_eq!(c.bytes, [1 << 40, 5]);
        assert_eq!(c.packets, [3, u32::MAX]);
        assert_eq!(c.data, [2, u32::MAX]);
        let mut v = vec![c];
        merge_buckets(&mut v, &[c, CountsBucket { second: 8, ..c }]);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].packets, [6, u32::MAX]);
        assert_eq!(v[0].bytes, [2 << 40, 10]);
        assert_eq!(v[1].second, 8);
    }

    /// Ethernet (optionally 802.1Q) + IPv4 + TCP frame with `payload` bytes of data.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tcp4(
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

    /// `frame` (an Ethernet frame) inside VXLAN `vni` over IPv4 from `src` to `dst` (outer
    /// DSCP `dscp`), in an Ethernet frame.
    pub(crate) fn vxlan(frame: &[u8], src: [u8; 4], dst: [u8; 4], vni: u32, dscp: u8) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 9, 0x02, 0, 0, 0, 0, 8, 0x08, 0x00];
        let total = (20 + 8 + 8 + frame.len()) as u16;
        f.extend_from_slice(&[0x45, dscp << 2]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&49152u16.to_be_bytes());
        f.extend_from_slice(&4789u16.to_be_bytes());
        f.extend_from_slice(&((8 + 8 + frame.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&[0x08, 0, 0, 0]);
        f.extend_from_slice(&(vni << 8).to_be_bytes());
        f.extend_from_slice(frame);
        f
    }

    /// The records the store's producer takes of `data`'s packets (a block's content).
    pub(crate) fn records_of(data: &[u8]) -> Vec<capsule_store::indexer::Record> {
        capsule_pcap::read::fragment_records(data)
            .map_while(Result::ok)
            .map(|(p, cut)| {
                let d = capsule_wire::dissect(1, p.data);
                capsule_store::indexer::Record::of(
                    p.ts_ns,
                    p.orig_len,
                    p.data.len() as u32,
                    cut,
                    &d,
                )
            })
            .collect()
    }

    pub(crate) fn arp() -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.resize(42, 0);
        f
    }

    pub(crate) fn block(packets: &[(u64, Vec<u8>)], new_iface: bool) -> (BlockMeta, Vec<u8>) {
        let mut data = Vec::new();
        let mut meta = BlockMeta::default();
        if new_iface {
            let i = Interface {
                linktype: 1,
                snaplen: 0,
                name: None,
                options: Default::default(),
            };
            pw::pcapng_idb(&mut data, &i);
            meta.new_interfaces.push(i);
        }
        for (ts, p) in packets {
            pw::pcapng_epb(&mut data, 0, *ts, p.len() as u32, p);
        }
        (meta, data)
    }

    pub(crate) const A: [u8; 4] = [10, 0, 0, 1];
    pub(crate) const B: [u8; 4] = [10, 0, 0, 2];

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
        assert_eq!(f.totals.packets, [4, 3]);
        assert_eq!(f.totals.retransmissions, [1, 0]);
        assert_eq!(f.totals.zero_windows, [0, 1]);
        assert_eq!(f.totals.resets, [0, 1]);
        assert_eq!(f.totals.tcp_flags, [0x1a, 0x16]);
        assert_eq!(f.totals.dscp, [1 | (1 << 46), 1]);
        assert_eq!(f.blocks, vec![0, 1]);
        assert_eq!((f.totals.first_ns, f.totals.last_ns), (s, 2 * s + 3));
        assert_eq!(f.buckets.len(), 2);
        assert_eq!(f.buckets[0].second, 1);
        assert_eq!(f.buckets[0].packets, [2, 1]);
        assert_eq!(f.buckets[1].packets, [2, 2]);
        let total: u64 = f.buckets.iter().map(|b| b.bytes[0] + b.bytes[1]).sum();
        assert_eq!(total, f.totals.bytes[0] + f.totals.bytes[1]);
        let v = &idx.flows[1];
        assert_eq!(v.key.vlans, [Some(100), None]);
        assert_eq!(v.blocks, vec![1]);

        let back = SegmentIndex::decode(&idx.encode()).unwrap();
        assert_eq!(back, idx);
        // The analytics decode keeps each record's counts and buckets, nothing else.
        let counts: Vec<FlowCounts> = idx.flows.iter().cloned().map(FlowCounts::from).collect();
        let lean = SegmentIndex::decode_counts(&idx.encode(), None).unwrap();
        assert_eq!((lean.seq, lean.segment_len), (7, 12345));
        assert_eq!(lean.flows, counts);
        // Flows wholly inside the window lose their buckets; a flow the window cuts keeps them.
        let all = SegmentIndex::decode_counts(&idx.encode(), Some((0, u64::MAX))).unwrap();
        assert!(all.flows.iter().all(|f| f.buckets.is_empty()));
        let cut = SegmentIndex::decode_counts(&idx.encode(), Some((0, 2 * s))).unwrap();
        let wide: Vec<CountsBucket> = idx.flows[0]
            .buckets
            .iter()
            .map(CountsBucket::from)
            .collect();
        assert_eq!(cut.flows[0].buckets, wide);
        // Merging counts is merging records, minus what counts do not carry.
        let (mut r, mut c) = (idx.flows[0].clone(), counts[0].clone());
        r.absorb(&idx.flows[1]);
        c.absorb(&counts[1]);
        assert_eq!(c, FlowCounts::from(r));
        // The header alone gives the segment and the flows' span.
        let h = SegmentIndex::peek(&idx.encode()).unwrap();
        assert_eq!(
            (h.seq, h.segment_len, h.span),
            (7, 12345, Some((s, 2 * s + 4)))
        );
        let mut bad = idx.encode();
        bad[62] ^= 1;
        assert_eq!(
            SegmentIndex::peek(&bad),
            None,
            "the header CRC covers the span"
        );
        let empty = SegmentIndex::default().encode();
        assert_eq!(SegmentIndex::peek(&empty).unwrap().span, None);
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
                totals: FlowTotals {
                    first_ns: 5_000_000_000,
                    last_ns: 9_000_000_000,
                    packets: [1, 1],
                    bytes: [100, 120],
                    dscp: [1 << 46, 1],
                    tcp_flags: [0, 0],
                    data: [3, 0],
                    retransmissions: [300, 0],
                    zero_windows: [0, 2],
                    resets: [0, 0],
                    zero_window_ns: [0, 1_500_000_000],
                    handshake: [SENT_SYN, 0],
                    dscp_counts: [
                        vec![
                            DscpCount {
                                dscp: 0,
                                packets: 19,
                                bytes: 1900,
                            },
                            DscpCount {
                                dscp: 46,
                                packets: 1,
                                bytes: 100,
                            },
                        ],
                        vec![],
                    ],
                    dscp_change: [
                        Some(DscpChange {
                            ordinal: 20,
                            ts_ns: 6_000_000_001,
                            from: 0,
                            to: 46,
                        }),
                        None,
                    ],
                    cut_packets: [1, 0],
                    cut_bytes: [100, 0],
                    cut_at_ns: [Some(5_000_000_000), None],
                    names: Some(Box::new(capsule_names::FlowNames {
                        app: capsule_names::App::Tls,
                        sni: Some("models.example-hub.io".into()),
                        alpn: vec!["h2".into()],
                        dns_answers: vec![("a.example".into(), "2001:db8::1".parse().unwrap())],
                        ..Default::default()
                    })),
                    encap: Some(Box::new(FlowEncap {
                        dirs: [
                            Some(EncapDir {
                                kind: capsule_wire::EncapKind::Vxlan,
                                outer: Some((
                                    "2001:db8::a".parse().unwrap(),
                                    "2001:db8::b".parse().unwrap(),
                                )),
                                id: Some(0x00ff_ffff),
                                mpls: Some(0xfffff),
                                layers: 2,
                                packets: 1,
                                mixed: true,
                                outer_dscp: 1 << 63 | 1,
                            }),
                            None,
                        ],
                    })),
                },
                blocks: vec![0, 2],
                buckets: vec![
                    Bucket {
                        second: 5,
                        packets: [1, 0],
                        bytes: [100, 0],
                        data: [1, 0],
                        retransmissions: [1, 0],
                        ..Bucket::default()
                    },
                    Bucket {
                        second: 9,
                        packets: [0, 1],
                        bytes: [0, 120],
                        zero_windows: [0, 1],
                        resets: [0, 1],
                        ..Bucket::default()
                    },
                ],
                tcp_in: TcpState {
                    high: [Some(7), None],
                    high_ts: [9, 0],
                    zero_since: [None, Some(u64::MAX)],
                    packets: [0, 0],
                    dscp: [
                        DscpState::default(),
                        DscpState {
                            first: Some((5, 63)),
                            change: None,
                        },
                    ],
                },
                tcp_out: TcpState {
                    high: [Some(u32::MAX), Some(0)],
                    high_ts: [u64::MAX, 7],
                    zero_since: [Some(1), None],
                    packets: [20, 1],
                    dscp: [
                        DscpState {
                            first: Some((1, 0)),
                            change: Some(DscpChange {
                                ordinal: 20,
                                ts_ns: 6_000_000_001,
                                from: 0,
                                to: 46,
                            }),
                        },
                        DscpState {
                            first: Some((2, 0)),
                            change: None,
                        },
                    ],
                },
            }],
            series: Some(vec![
                series::BlockSeries {
                    bins: vec![series::MsBin {
                        ms: 5_000,
                        classes: vec![series::ClassCount {
                            dscp: 46,
                            packets: 1,
                            bytes: 100,
                        }],
                    }],
                    fanin: vec![series::Fanin {
                        ms: 5_000,
                        dst: "fd00::2".parse().unwrap(),
                        senders: vec![
                            series::Sender {
                                addr: "fd00::1".parse().unwrap(),
                                packets: 1,
                                bytes: 100,
                            };
                            4
                        ],
                    }],
                },
                series::BlockSeries::default(),
                series::BlockSeries::default(),
            ]),
            named: true,
            tunnels: true,
        };
        let bytes = idx.encode();
        assert_eq!(SegmentIndex::decode(&bytes).unwrap(), idx);
        let s = SegmentIndex::decode_series(&bytes).unwrap();
        assert_eq!((s.seq, s.segment_len), (3, 99));
        assert_eq!(s.series, idx.series);
        // Version 4 (before the series) still reads, as an index without series; an index
        // without series is written as version 4, never as a version 5 with empty ones.
        let v4 = idx.encode_as(4);
        assert_eq!(u16::from_le_bytes([v4[8], v4[9]]), 4);
        let mut old = idx.clone();
        old.series = None;
        // Nor names (version 6's names table).
        old.flows[0].totals.names = None;
        old.named = false;
        // Nor encapsulations (version 7's table).
        old.flows[0].totals.encap = None;
        old.tunnels = false;
        assert_eq!(SegmentIndex::decode(&v4).unwrap(), old);
        // An index without names is written as version 5, never as a version 6 claiming
        // its flows have none.
        let mut unnamed = idx.clone();
        unnamed.flows[0].totals.names = None;
        unnamed.named = false;
        unnamed.flows[0].totals.encap = None;
        unnamed.tunnels = false;
        let v5 = unnamed.encode();
        assert_eq!(u16::from_le_bytes([v5[8], v5[9]]), 5);
        assert_eq!(SegmentIndex::decode(&v5).unwrap(), unnamed);
        let counts = SegmentIndex::decode_counts(&v5, None).unwrap();
        assert!(!counts.named && SegmentIndex::decode_counts(&bytes, None).unwrap().named);
        // Version 6 (names, no encapsulation table) still reads, as an index whose flows'
        // encapsulations are not known; one without them is written as version 6.
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 7);
        let mut untunnelled = idx.clone();
        untunnelled.flows[0].totals.encap = None;
        untunnelled.tunnels = false;
        let v6 = untunnelled.encode();
        assert_eq!(u16::from_le_bytes([v6[8], v6[9]]), 6);
        assert_eq!(SegmentIndex::decode(&v6).unwrap(), untunnelled);
        assert_eq!(
            SegmentIndex::decode(&idx.encode_as(6)).unwrap(),
            untunnelled
        );
        let counts = SegmentIndex::decode_counts(&bytes, None).unwrap();
        assert!(counts.tunnels && counts.flows[0].totals.encap == idx.flows[0].totals.encap);
        assert!(!SegmentIndex::decode_counts(&v6, None).unwrap().tunnels);
        assert_eq!(SegmentIndex::decode_series(&v4).unwrap().series, None);
        assert_eq!(old.encode(), v4);
        // Version 3 (before the cut-off) still reads: the same record, nothing cut.
        let v3 = idx.encode_as(3);
        assert_eq!(u16::from_le_bytes([v3[8], v3[9]]), 3);
        let mut uncut = old.clone();
        uncut.flows[0].totals.cut_packets = [0; 2];
        uncut.flows[0].totals.cut_bytes = [0; 2];
        uncut.flows[0].totals.cut_at_ns = [None; 2];
        assert_eq!(SegmentIndex::decode(&v3).unwrap(), uncut);
        assert!(SegmentIndex::peek(&v3).is_some());
        // More cut than seen is refused.
        let mut over = idx.clone();
        over.flows[0].totals.cut_packets = [2, 0];
        assert!(SegmentIndex::decode(&over.encode()).is_err());
        for cut in [0, 10, 63, 64, bytes.len() - 1] {
            assert!(SegmentIndex::decode(&bytes[..cut]).is_err());
        }
        // The counts-only decode reads the carried state and cut counters the same way
        // and refuses what the full decode refuses, with the same words.
        let lean = SegmentIndex::decode_counts(&bytes, None).unwrap();
        assert_eq!(lean.flows, vec![FlowCounts::from(idx.flows[0].clone())]);
        let lean3 = SegmentIndex::decode_counts(&v3, None).unwrap();
        assert_eq!(lean3.flows, vec![FlowCounts::from(uncut.flows[0].clone())]);
        let over = over.encode();
        for b in [&over[..], &bytes[..bytes.len() - 1], &bytes[..70]] {
            let full = SegmentIndex::decode(b).unwrap_err().to_string();
            let counts = SegmentIndex::decode_counts(b, None)
                .unwrap_err()
                .to_string();
            assert_eq!(full, counts);
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

    /// An [`EncapDir`] as the proptest draws it: kind number, outer endpoints (IPv6?, the
    /// two addresses' bits), identifier, label, layers, packets, mixed, outer DSCP mask.
    type EncapArgs = (
        u8,
        Option<(bool, u128, u128)>,
        Option<u32>,
        Option<u32>,
        u8,
        u64,
        bool,
        u64,
    );

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

        /// merge_buckets gives what summing both runs per second gives, ascending, whatever
        /// the runs' overlap (appended, interleaved, sharing the boundary second).
        #[test]
        fn merge_buckets_sums_per_second(
            a in proptest::collection::btree_map(0u64..40, 1u64..5, 0..20),
            b in proptest::collection::btree_map(0u64..40, 1u64..5, 0..20),
        ) {
            let run = |m: &std::collections::BTreeMap<u64, u64>| -> Vec<Bucket> {
                m.iter()
                    .map(|(&second, &p)| Bucket { second, packets: [p, 1], bytes: [p * 100, 7], ..Bucket::default() })
                    .collect()
            };
            let mut dst = run(&a);
            merge_buckets(&mut dst, &run(&b));
            let mut want: std::collections::BTreeMap<u64, Bucket> = std::collections::BTreeMap::new();
            for x in run(&a).iter().chain(run(&b).iter()) {
                want.entry(x.second)
                    .and_modify(|w| w.add(x))
                    .or_insert(*x);
            }
            proptest::prop_assert_eq!(dst, want.into_values().collect::<Vec<_>>());
        }

        /// Any encapsulation table round-trips, and any bytes read as one never panic.
        #[test]
        fn encap_table_round_trips_and_never_panics(
            dirs in proptest::collection::vec(
                proptest::option::of((
                    1u8..=7, proptest::option::of((proptest::bool::ANY, proptest::num::u128::ANY, proptest::num::u128::ANY)),
                    proptest::option::of(proptest::num::u32::ANY),
                    proptest::option::of(0u32..1 << 20),
                    proptest::num::u8::ANY, proptest::num::u64::ANY, proptest::bool::ANY,
                    proptest::num::u64::ANY,
                )),
                2..=8,
            ),
            junk in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        ) {
            let dir = |d: &Option<EncapArgs>| {
                d.map(|(k, outer, id, mpls, layers, packets, mixed, outer_dscp)| EncapDir {
                    kind: capsule_wire::EncapKind::from_number(k).unwrap(),
                    outer: outer.map(|(v6, s, t)| if v6 {
                        (IpAddr::from(s.to_be_bytes()), IpAddr::from(t.to_be_bytes()))
                    } else {
                        (IpAddr::from((s as u32).to_be_bytes()), IpAddr::from((t as u32).to_be_bytes()))
                    }),
                    id, mpls, layers, packets, mixed, outer_dscp,
                })
            };
            let encaps: Vec<Option<FlowEncap>> = dirs
                .chunks(2)
                .map(|c| Some(FlowEncap { dirs: [dir(&c[0]), c.get(1).and_then(dir)] }))
                .map(|e| e.filter(|e| e.dirs.iter().any(Option::is_some)))
                .collect();
            let mut body = Vec::new();
            file::put_encap_section(&mut body, encaps.iter().map(Option::as_ref));
            let got = file::get_encap_section(&mut capsule_wire::view::Reader::new(&body), encaps.len()).unwrap();
            let want: Vec<(usize, FlowEncap)> = encaps
                .iter()
                .enumerate()
                .filter_map(|(i, e)| e.clone().map(|e| (i, e)))
                .collect();
            proptest::prop_assert_eq!(got, want);
            let _ = file::get_encap_section(&mut capsule_wire::view::Reader::new(&junk), 4);
            let mut cut = body.clone();
            cut.truncate(junk.len().min(body.len()));
            let _ = file::get_encap_section(&mut capsule_wire::view::Reader::new(&cut), encaps.len());
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = SegmentIndex::decode(&bytes);
            let mut with_header = SegmentIndex::default().encode();
            with_header.truncate(HEADER_LEN);
            with_header.extend_from_slice(&bytes);
            let _ = SegmentIndex::decode(&with_header);
            let full = SegmentIndex::decode(&with_header).map(|i| {
                i.flows.into_iter().map(FlowCounts::from).collect::<Vec<_>>()
            });
            let lean = SegmentIndex::decode_counts(&with_header, None).map(|i| i.flows);
            proptest::prop_assert_eq!(
                full.map_err(|e| e.to_string()),
                lean.map_err(|e| e.to_string())
            );
        }
    }
}
