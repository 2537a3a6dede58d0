//! The per-class cut-off (the Time Machine idea, IMC'05): of each flow direction store only
//! its first N wire bytes and/or N packets, except packets a `keep` filter matches, which
//! are stored whole. The store writer asks [`Cutoff`] about every packet
//! ([`capsule_store::CutPolicy`]); a packet it cuts is not stored, but its headers go into a
//! cut-packet record of the same block, which exports skip and the side index counts (as
//! seen, and as cut), so flow counters stay those of what was seen.
//!
//! ```text
//! packet -> dissect -> non-IP: stored (never cut)
//!        -> a keep filter matches: stored whole (not counted against the limits)
//!        -> its flow direction's state (FlowKey, direction): idle >= `idle`? start afresh
//!        -> under both limits: stored, counted (the packet reaching a limit is stored whole)
//!        -> else: cut; its headers (shortest prefix that dissects the same) kept
//! ```
//!
//! State is bounded: at most [`Rules::max_directions`] flow directions (default
//! [`MAX_DIRECTIONS`], about 100 bytes each). Directions idle for `idle` are swept out every
//! `idle` of packet time; when the table is still full, the least recently seen half is
//! dropped. A direction dropped early starts afresh (it may store another N bytes): the
//! bound can store more, never less. The state lives as long as the writer, so it spans
//! segment boundaries.

use std::collections::HashMap;

use capsule_query::{Filter, FilterError};
use capsule_wire::{dissect, Dissected, L4};

use crate::sideindex::FlowKey;

/// The default bound on the flow directions the cut-off tracks.
pub const MAX_DIRECTIONS: usize = 262_144;

/// The keep class `tcp-control`: TCP packets with SYN, FIN or RST, so connections'
/// set-up and tear-down are stored whole.
pub const TCP_CONTROL: &str = "tcp-control";
const TCP_CONTROL_FILTER: &str = "tcp[tcpflags] & (tcp-syn|tcp-fin|tcp-rst) != 0";

/// Parses one keep filter: the query language, or the class `tcp-control`.
pub fn parse_keep(text: &str) -> Result<Filter, FilterError> {
    if text.trim() == TCP_CONTROL {
        return Filter::parse(TCP_CONTROL_FILTER);
    }
    Filter::parse(text)
}

/// The cut-off's rules.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Wire bytes stored per flow direction; 0: no byte limit.
    pub bytes: u64,
    /// Packets stored per flow direction; 0: no packet limit.
    pub packets: u64,
    /// Packets matching one of these are stored whole.
    pub keep: Vec<Filter>,
    /// A direction with no packet for this long (packet time) starts afresh, ns.
    pub idle_ns: u64,
    /// The most flow directions tracked at once.
    pub max_directions: usize,
}

/// What the cut-off decided so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CutStats {
    /// Packets stored whole because a keep filter matched.
    pub kept: u64,
    /// Packets stored within their direction's limits (or not IP).
    pub stored: u64,
    /// Packets cut (headers only kept).
    pub cut: u64,
    /// Directions dropped from the table because it was full (not idle).
    pub evicted: u64,
}

#[derive(Debug, Clone, Copy)]
struct DirState {
    packets: u64,
    bytes: u64,
    last_ns: u64,
}

/// The cut-off: the rules and the per-direction state. See the module docs.
#[derive(Debug)]
pub struct Cutoff {
    rules: Rules,
    table: HashMap<(FlowKey, u8), DirState>,
    last_sweep_ns: u64,
    stats: CutStats,
}

impl Cutoff {
    pub fn new(rules: Rules) -> Self {
        Cutoff {
            table: HashMap::with_capacity(rules.max_directions.min(4096)),
            rules,
            last_sweep_ns: 0,
            stats: CutStats::default(),
        }
    }

    pub fn stats(&self) -> CutStats {
        self.stats
    }

    /// Flow directions tracked now (never above [`Rules::max_directions`]).
    pub fn tracked(&self) -> usize {
        self.table.len()
    }

    /// Whether the packet is stored whole (`None`), or cut: `Some(n)`, its first `n` bytes
    /// to keep as its headers.
    pub fn decide(
        &mut self,
        linktype: u16,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Option<usize> {
        self.decide_dissected(linktype, ts_ns, orig_len, data, &dissect(linktype, data))
    }

    /// [`Cutoff::decide`] of a packet already dissected as `d` (the store writer's
    /// dissection, which the side index's record of the packet is made from too).
    pub fn decide_dissected(
        &mut self,
        linktype: u16,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
        d: &Dissected,
    ) -> Option<usize> {
        if self.rules.bytes == 0 && self.rules.packets == 0 {
            self.stats.stored += 1;
            return None;
        }
        let Some(ip) = d.ip else {
            self.stats.stored += 1;
            return None;
        };
        if self
            .rules
            .keep
            .iter()
            .any(|f| f.matches_packet(d, linktype, data, orig_len))
        {
            self.stats.kept += 1;
            return None;
        }
        let (key, dir) = FlowKey::of(
            [d.vlans[0], d.vlans[1]],
            ip.version,
            ip.proto,
            ip.src,
            ip.dst,
            d.l4.ports(),
        );
        self.sweep(ts_ns);
        let idle = self.rules.idle_ns;
        let fresh = DirState {
            packets: 0,
            bytes: 0,
            last_ns: ts_ns,
        };
        if !self.table.contains_key(&(key, dir as u8))
            && self.table.len() >= self.rules.max_directions
        {
            self.make_room();
        }
        let st = self.table.entry((key, dir as u8)).or_insert(fresh);
        if ts_ns.saturating_sub(st.last_ns) >= idle {
            *st = fresh;
        }
        st.last_ns = st.last_ns.max(ts_ns);
        let wire = u64::from(orig_len.max(data.len() as u32));
        let under = (self.rules.bytes == 0 || st.bytes < self.rules.bytes)
            && (self.rules.packets == 0 || st.packets < self.rules.packets);
        if under {
            st.bytes += wire;
            st.packets += 1;
            self.stats.stored += 1;
            return None;
        }
        self.stats.cut += 1;
        Some(header_len(linktype, data, d))
    }

    /// Every `idle` of packet time, drops the directions idle that long.
    fn sweep(&mut self, now: u64) {
        let idle = self.rules.idle_ns.max(1);
        if now.saturating_sub(self.last_sweep_ns) < idle {
            return;
        }
        self.last_sweep_ns = now;
        self.table
            .retain(|_, s| now.saturating_sub(s.last_ns) < idle);
    }

    /// The table is full: drops the least recently seen half.
    fn make_room(&mut self) {
        let mut times: Vec<u64> = self.table.values().map(|s| s.last_ns).collect();
        let mid = times.len() / 2;
        let (_, &mut cut, _) = times.select_nth_unstable(mid);
        let before = self.table.len();
        self.table.retain(|_, s| s.last_ns > cut);
        // Many equal times: drop arbitrary ones until half is gone.
        if self.table.len() > mid {
            let extra: Vec<_> = self
                .table
                .keys()
                .take(self.table.len() - mid)
                .copied()
                .collect();
            for k in extra {
                self.table.remove(&k);
            }
        }
        self.stats.evicted += (before - self.table.len()) as u64;
    }
}

impl capsule_store::CutPolicy for Cutoff {
    fn decide(
        &mut self,
        linktype: u16,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
        dissected: &Dissected,
    ) -> Option<usize> {
        self.decide_dissected(linktype, ts_ns, orig_len, data, dissected)
    }
}

/// The shortest prefix of `data` kept for a cut packet: its headers, so that the side index
/// dissects it exactly as the whole packet (`d`). Tried: the frame less its transport
/// payload, then 128 bytes; else the whole frame.
fn header_len(linktype: u16, data: &[u8], d: &Dissected) -> usize {
    let payload = match (d.l4, d.ip) {
        (L4::Tcp(t), _) => t.payload_len as usize,
        (L4::Udp { .. }, Some(ip)) => (ip.payload_len as usize).saturating_sub(8),
        (_, Some(ip)) if ip.fragment.is_some() => ip.payload_len as usize,
        _ => 0,
    };
    let same = |n: usize| dissect(linktype, &data[..n]) == *d;
    let guess = data.len().saturating_sub(payload);
    if guess < data.len() && same(guess) {
        return guess;
    }
    let short = data.len().min(128);
    if short < data.len() && same(short) {
        return short;
    }
    data.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sideindex::tests::{tcp4, A, B};

    const S: u64 = 1_000_000_000;

    fn rules(bytes: u64, packets: u64, keep: &[&str]) -> Rules {
        Rules {
            bytes,
            packets,
            keep: keep.iter().map(|k| parse_keep(k).unwrap()).collect(),
            idle_ns: 300 * S,
            max_directions: MAX_DIRECTIONS,
        }
    }

    fn data(seq: u32, flags: u8, payload: usize, dscp: u8) -> Vec<u8> {
        tcp4(None, A, B, 40000, 443, seq, flags, 1000, payload, dscp)
    }

    #[test]
    fn a_direction_is_cut_after_its_byte_limit_and_the_crossing_packet_is_stored() {
        let mut c = Cutoff::new(rules(3000, 0, &[]));
        let pkt = data(1, 0x18, 1000, 0);
        let wire = pkt.len() as u64;
        let mut stored = 0u64;
        for n in 0..10u64 {
            match c.decide(1, S + n, pkt.len() as u32, &pkt) {
                None => stored += wire,
                Some(h) => {
                    assert!(h < pkt.len(), "only headers kept ({h} of {})", pkt.len());
                    assert_eq!(dissect(1, &pkt[..h]), dissect(1, &pkt));
                }
            }
        }
        assert!(stored >= 3000 && stored < 3000 + wire, "stored {stored}");
        assert_eq!(c.stats().cut, 10 - stored / wire);
        // The other direction has its own budget.
        let back = tcp4(None, B, A, 443, 40000, 1, 0x10, 1000, 1000, 0);
        assert_eq!(c.decide(1, S + 20, back.len() as u32, &back), None);
    }

    #[test]
    fn the_packet_limit_and_the_idle_time_start_a_direction_afresh() {
        let mut c = Cutoff::new(Rules {
            idle_ns: 10 * S,
            ..rules(0, 2, &[])
        });
        let pkt = data(1, 0x18, 100, 0);
        let l = pkt.len() as u32;
        assert_eq!(c.decide(1, S, l, &pkt), None);
        assert_eq!(c.decide(1, 2 * S, l, &pkt), None);
        assert!(c.decide(1, 3 * S, l, &pkt).is_some());
        // 10 s of silence: a fresh start.
        assert_eq!(c.decide(1, 13 * S, l, &pkt), None);
        assert!(c.tracked() <= 1);
    }

    #[test]
    fn keep_rules_match_dscp_tcp_control_and_ports() {
        let mut c = Cutoff::new(rules(1, 0, &["dscp ef", "tcp-control", "udp port 53"]));
        let bulk = data(1, 0x18, 1000, 0);
        let l = bulk.len() as u32;
        assert_eq!(c.decide(1, S, l, &bulk), None, "the first packet is stored");
        assert!(c.decide(1, S + 1, l, &bulk).is_some(), "then cut");
        let ef = data(2000, 0x18, 1000, 46);
        assert_eq!(c.decide(1, S + 2, l, &ef), None, "EF kept");
        for flags in [0x02, 0x11, 0x04, 0x12] {
            let ctl = data(3000, flags, 0, 0);
            assert_eq!(
                c.decide(1, S + 3, ctl.len() as u32, &ctl),
                None,
                "{flags:#x}"
            );
        }
        assert_eq!(c.stats().kept, 5);
        assert!(parse_keep("tcp-contrl").is_err());
        assert!(parse_keep(" tcp-control ").is_ok());
    }

    #[test]
    fn the_table_never_grows_past_its_bound() {
        let mut c = Cutoff::new(Rules {
            max_directions: 64,
            ..rules(10, 0, &[])
        });
        for n in 0..10_000u32 {
            let src = [10, 0, (n >> 8) as u8, n as u8];
            let p = tcp4(None, src, B, 40000, 443, 1, 0x18, 1000, 10, 0);
            c.decide(1, S + u64::from(n), p.len() as u32, &p);
            assert!(c.tracked() <= 64);
        }
        assert!(c.stats().evicted > 0);
        // Idle directions are swept: one packet 301 s later leaves one direction.
        let p = data(1, 0x18, 10, 0);
        c.decide(1, 400 * S, p.len() as u32, &p);
        assert_eq!(c.tracked(), 1);
    }

    /// A block whose cut packets are headers-only records indexes to the counters of the
    /// same block stored whole, plus what was cut.
    #[test]
    fn cut_records_index_to_the_counters_of_the_uncut_block() {
        use crate::sideindex::tests::block;
        use crate::sideindex::IndexBuilder;
        use capsule_pcap::write as pw;
        let mut packets = vec![(S, data(1, 0x02, 0, 0))];
        for n in 0..40u32 {
            // Data both ways, one resend, a zero window and a remark half way.
            let dscp = if n < 20 { 0 } else { 10 };
            let seq = if n == 30 { 1 + 29 * 500 } else { 1 + n * 500 };
            packets.push((S + 1 + u64::from(n), data(seq, 0x18, 500, dscp)));
            let win = if n == 25 { 0 } else { 1000 };
            packets.push((
                S + 1 + u64::from(n),
                tcp4(None, B, A, 443, 40000, 1, 0x10, win, 0, 0),
            ));
        }
        packets.push((S + 100, data(1 + 40 * 500, 0x11, 0, 0)));
        let (meta, whole) = block(&packets, true);
        let mut c = Cutoff::new(rules(2000, 0, &["tcp-control"]));
        let mut cut = Vec::new();
        let i = capsule_pcap::Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        };
        pw::pcapng_idb(&mut cut, &i);
        let mut n_cut = 0;
        for (ts, p) in &packets {
            match c.decide(1, *ts, p.len() as u32, p) {
                None => pw::pcapng_epb(&mut cut, 0, *ts, p.len() as u32, p),
                Some(h) => {
                    n_cut += 1;
                    pw::pcapng_cut(&mut cut, 0, *ts, p.len() as u32, &p[..h]);
                }
            }
        }
        assert!(n_cut > 30, "{n_cut} cut");
        assert!(cut.len() < whole.len() / 2);
        let index = |d: &[u8]| {
            let mut ix = IndexBuilder::new(1);
            ix.add_block(&meta, d);
            ix.finish(1)
        };
        let (a, b) = (index(&whole), index(&cut));
        let mut f = b.flows[0].clone();
        assert_eq!(f.totals.cut_packets[0] + f.totals.cut_packets[1], n_cut);
        assert!(
            f.totals.cut_at_ns[0].is_some() && f.totals.stored_bytes() < f.totals.total_bytes()
        );
        // The limit and one packet, and the SYN and FIN kept whole.
        assert!(f.totals.bytes[0] - f.totals.cut_bytes[0] < 2000 + 600 + 2 * 60);
        assert!(f.totals.bytes[1] - f.totals.cut_bytes[1] < 2000 + 60);
        f.totals.cut_packets = [0; 2];
        f.totals.cut_bytes = [0; 2];
        f.totals.cut_at_ns = [None; 2];
        assert_eq!(f, a.flows[0], "seen counters are the uncut ones");
        assert_eq!(a.blocks, b.blocks);
        assert_eq!(a.flows[0].totals.retransmissions, [1, 0]);
        // Exports see only the stored packets.
        let stored = capsule_pcap::read::fragment_packets(&cut).count() as u64;
        assert_eq!(stored, packets.len() as u64 - n_cut);
    }

    #[test]
    fn no_limit_cuts_nothing_and_non_ip_is_never_cut() {
        let mut c = Cutoff::new(rules(0, 0, &[]));
        let p = data(1, 0x18, 1000, 0);
        for n in 0..100 {
            assert_eq!(c.decide(1, S + n, p.len() as u32, &p), None);
        }
        let mut c = Cutoff::new(rules(1, 1, &[]));
        let arp = vec![0xffu8; 12]
            .into_iter()
            .chain([0x08, 0x06])
            .chain([0; 28])
            .collect::<Vec<u8>>();
        for n in 0..10 {
            assert_eq!(c.decide(1, S + n, arp.len() as u32, &arp), None);
        }
    }
}
