//! The seam between the store writer and the data derived from what it writes.
//!
//! The writer thread hands every block it appends to an [`Indexer`], with the block's raw
//! (uncompressed) bytes, before those bytes are dropped, and tells it when a segment is
//! sealed, compacted (recompressed in place: only its length changes) or deleted by
//! retention. At open, after recovery and under the writer lock, the
//! indexer brings its files up to date for every sealed segment. capsule-index implements it
//! with the side index; [`NoIndex`] keeps nothing (tests of the store alone, and tools that
//! only move segments).
//!
//! Everything an indexer writes is derived: it can always be rebuilt from the segments, so
//! an indexer error stops the writer (the caller sees it), but never damages a segment.

use crate::error::Result;
use crate::format::BlockMeta;
use crate::segment::SealedSegment;
use crate::store::{SegmentEntry, Store};
use capsule_wire::{Dissected, L4};
use std::net::IpAddr;

/// Data derived from the segments, kept current by the store writer. Called on the writer
/// thread only, in file order.
pub trait Indexer: Send {
    /// At open, after torn segments were recovered: brings the derived data of every sealed
    /// segment in `sealed` up to date. Returns the sequence numbers whose data was rebuilt.
    fn reconcile(&mut self, store: &Store, sealed: &[SegmentEntry]) -> Result<Vec<u64>>;

    /// Segment `seq` was created; the blocks that follow belong to it.
    fn begin(&mut self, seq: u64);

    /// Whether [`Indexer::block`] should be given a [`Record`] of each record of a block
    /// (the writer's producer then dissects every packet as it stores it). The default: no.
    fn wants_records(&self) -> bool {
        false
    }

    /// A block was appended to the open segment. `meta.new_interfaces` extends the segment's
    /// interface list; `data` is the block's decompressed content, in pieces that each hold
    /// a run of whole pcapng blocks (a stored block built in its frame gives one piece per
    /// raw zstd block, without joining them). `records`, when the indexer wants them and
    /// the producer took them: what each record of `data` holds, in the same order.
    fn block(&mut self, meta: &BlockMeta, data: &[&[u8]], records: Option<&[Record]>);

    /// The open segment was sealed as `sealed`.
    fn sealed(&mut self, sealed: &SealedSegment) -> Result<()>;

    /// Retention deleted segment `seq`.
    fn deleted(&mut self, seq: u64) -> Result<()>;

    /// Sealed segment `compacted.seq` was replaced by its compacted version (same blocks,
    /// recompressed; see [`crate::writer::compact`]): it was `old_bytes` long, it is now
    /// `compacted.bytes`. What depends on its length is brought up to date. The default
    /// does nothing (an indexer that keeps nothing of a segment's length).
    fn compacted(&mut self, compacted: &SealedSegment, old_bytes: u64) -> Result<()> {
        let _ = (compacted, old_bytes);
        Ok(())
    }

    /// Work put off while blocks come (the side index's: the open segment's fold
    /// checkpoint), as the time until it is due (`Some(ZERO)`: now); `None`: none. Once it
    /// is due and every block handed over is in the file, the writer thread calls
    /// [`Indexer::catch_up`], also when no block follows. The default: none.
    fn deferred(&self) -> Option<std::time::Duration> {
        None
    }

    /// Does the work [`Indexer::deferred`] said is due.
    fn catch_up(&mut self) {}
}

/// What the side index reads of one record of a block (a stored packet, or a cut-packet
/// record), taken by the writer's producer as it stores the record, while the packet is
/// still in its cache: the index of a live capture then reads these, one after the other,
/// instead of each record's headers from a block another core wrote (cache misses that were
/// a fifth of a store-rung capture's CPU).
///
/// Compact (72 bytes, where a record holding a whole [`Dissected`] took 152): it crosses
/// from the producer's core to the writer's, so every byte is a cache line's share moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Record {
    pub ts_ns: u64,
    /// Bytes on the wire: the original length, at least the captured length.
    pub wire: u32,
    /// TCP only: sequence number, and payload bytes by the IP length fields. For a fragment
    /// ([`Record::FRAG_FIRST`], [`Record::FRAG_LATER`]) other than a TCP first fragment: the
    /// fragment's identification (IPv4 ID, IPv6 Fragment header identification).
    pub seq: u32,
    pub tcp_payload: u32,
    /// VLAN ids, outermost first, where [`Record::flags`] marks them present.
    pub vlan_ids: [u16; 2],
    pub src_port: u16,
    pub dst_port: u16,
    /// TCP only: the window field.
    pub window: u16,
    /// IP addresses, an IPv4 one in the first four bytes.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    /// 4 or 6; 0 when the packet is not IP.
    pub ip_version: u8,
    pub proto: u8,
    pub dscp: u8,
    /// TCP only: the flags byte.
    pub tcp_flags: u8,
    /// [`Record::CUT`], [`Record::MALFORMED`], [`Record::PORTS`], [`Record::TCP`],
    /// [`Record::VLAN0`], [`Record::VLAN1`], [`Record::FRAG_FIRST`], [`Record::FRAG_LATER`].
    pub flags: u8,
    /// The encapsulation the packet arrived in, as its key ([`capsule_wire::Encap::key`]);
    /// 0: none. With the outer DSCP below it fills the struct's padding (still 72 bytes): the
    /// side index tells from these alone whether a flow's packets stay in one encapsulation,
    /// and reads the packet again only for the first of a flow direction.
    pub encap: u32,
    /// The outer IP packet's DSCP when [`Record::encap`] is set and it has one; else 0xFF.
    pub outer_dscp: u8,
}

impl Record {
    /// A cut-packet record.
    pub const CUT: u8 = 1;
    /// Dissection stopped before the end of the headers it expected.
    pub const MALFORMED: u8 = 2;
    /// The transport has ports (TCP, UDP, SCTP).
    pub const PORTS: u8 = 4;
    /// The transport is TCP (`seq`, `tcp_payload`, `window`, `tcp_flags` hold its fields).
    pub const TCP: u8 = 8;
    /// The outer and the inner VLAN id are present.
    pub const VLAN0: u8 = 16;
    pub const VLAN1: u8 = 32;
    /// The first fragment (offset 0, more fragments) of an IP datagram; its identification
    /// in [`Record::seq`], except for TCP (with [`Record::TCP`]), whose sequence number takes
    /// the field: the side index reads that one's identification again from the packet
    /// (fragmented TCP is rare: TCP sizes its segments to the path and sets DF).
    pub const FRAG_FIRST: u8 = 64;
    /// A non-first fragment (offset > 0: no transport header) of an IP datagram, TCP ones
    /// included; its identification in [`Record::seq`].
    pub const FRAG_LATER: u8 = 128;

    /// The record of a packet of `orig_len` bytes on the wire and `caplen` stored, at
    /// `ts_ns`, dissected as `d` (for a cut record: its headers, which dissect as the whole
    /// packet).
    pub fn of(ts_ns: u64, orig_len: u32, caplen: u32, cut: bool, d: &Dissected) -> Record {
        let mut r = Record {
            ts_ns,
            wire: orig_len.max(caplen),
            flags: if cut { Record::CUT } else { 0 },
            ..Record::default()
        };
        if d.malformed.is_some() {
            r.flags |= Record::MALFORMED;
        }
        r.outer_dscp = 0xFF;
        if let Some(e) = &d.encap {
            r.encap = e.key();
            r.outer_dscp = e.outer_dscp.unwrap_or(0xFF);
        }
        for (k, v) in d.vlans.iter().take(2).enumerate() {
            if let Some(id) = v {
                r.vlan_ids[k] = *id;
                r.flags |= Record::VLAN0 << k;
            }
        }
        if let Some(ip) = d.ip {
            r.ip_version = ip.version;
            r.proto = ip.proto;
            r.dscp = ip.dscp;
            r.src = addr_bytes(ip.src);
            r.dst = addr_bytes(ip.dst);
            if let Some(f) = ip.fragment {
                r.flags |= if f.offset == 0 {
                    Record::FRAG_FIRST
                } else {
                    Record::FRAG_LATER
                };
                // A TCP first fragment's sequence number replaces it below.
                r.seq = f.id;
            }
        }
        if let Some((sp, dp)) = d.l4.ports() {
            (r.src_port, r.dst_port) = (sp, dp);
            r.flags |= Record::PORTS;
        }
        if let L4::Tcp(t) = d.l4 {
            r.flags |= Record::TCP;
            r.seq = t.seq;
            r.tcp_payload = t.payload_len;
            r.window = t.window;
            r.tcp_flags = t.flags;
        }
        r
    }

    pub fn cut(&self) -> bool {
        self.flags & Record::CUT != 0
    }

    pub fn malformed(&self) -> bool {
        self.flags & Record::MALFORMED != 0
    }

    /// The first two VLAN ids of [`Dissected::vlans`] (what the side index keys flows by).
    pub fn vlans(&self) -> [Option<u16>; 2] {
        [0, 1].map(|k| (self.flags & (Record::VLAN0 << k) != 0).then_some(self.vlan_ids[k]))
    }

    /// Source and destination address; `None` when the packet is not IP.
    pub fn addrs(&self) -> Option<(IpAddr, IpAddr)> {
        let addr = |b: &[u8; 16]| match self.ip_version {
            4 => Some(IpAddr::from([b[0], b[1], b[2], b[3]])),
            6 => Some(IpAddr::from(*b)),
            _ => None,
        };
        Some((addr(&self.src)?, addr(&self.dst)?))
    }

    /// Source and destination port, as [`L4::ports`] gives them.
    pub fn ports(&self) -> Option<(u16, u16)> {
        (self.flags & Record::PORTS != 0).then_some((self.src_port, self.dst_port))
    }

    pub fn is_tcp(&self) -> bool {
        self.flags & Record::TCP != 0
    }

    /// The fragment identification of a first fragment that has ports (its datagram's
    /// later fragments join its flow), or of a later fragment; see [`Record::FRAG_FIRST`].
    pub fn fragment(&self) -> Option<Frag> {
        if self.flags & Record::FRAG_LATER != 0 {
            Some(Frag::Later(self.seq))
        } else if self.flags & (Record::FRAG_FIRST | Record::PORTS)
            == Record::FRAG_FIRST | Record::PORTS
        {
            if self.is_tcp() {
                Some(Frag::TcpFirst)
            } else {
                Some(Frag::First(self.seq))
            }
        } else {
            None
        }
    }
}

/// A fragment of a datagram, by its identification ([`Record::fragment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frag {
    /// The first fragment, with its transport header's ports.
    First(u32),
    /// A TCP first fragment: its ports are in the record, its identification is not (the
    /// sequence number takes the field); read it from the packet.
    TcpFirst,
    /// A fragment at offset > 0: no transport header.
    Later(u32),
}

fn addr_bytes(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// An [`Indexer`] that keeps nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoIndex;

impl Indexer for NoIndex {
    fn reconcile(&mut self, _: &Store, _: &[SegmentEntry]) -> Result<Vec<u64>> {
        Ok(Vec::new())
    }
    fn begin(&mut self, _: u64) {}
    fn block(&mut self, _: &BlockMeta, _: &[&[u8]], _: Option<&[Record]>) {}
    fn sealed(&mut self, _: &SealedSegment) -> Result<()> {
        Ok(())
    }
    fn deleted(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record keeps of a dissection what the side index reads.
    #[test]
    fn a_record_gives_back_what_the_index_reads_of_a_dissection() {
        // Ethernet, a VLAN tag, IPv6 with DSCP 46, TCP, 10 bytes of payload.
        let mut f = vec![0u8; 18 + 40 + 20 + 10];
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[14..16].copy_from_slice(&0x0123u16.to_be_bytes());
        f[16..18].copy_from_slice(&[0x86, 0xdd]);
        let ip = &mut f[18..58];
        ip[0] = 0x60 | (46 >> 2);
        ip[1] = (46 & 3) << 6;
        ip[4..6].copy_from_slice(&30u16.to_be_bytes());
        ip[6] = 6;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        ip[24..40].copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        let t = &mut f[58..78];
        t[0..2].copy_from_slice(&4000u16.to_be_bytes());
        t[2..4].copy_from_slice(&80u16.to_be_bytes());
        t[4..8].copy_from_slice(&77u32.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = 0x18;
        t[14..16].copy_from_slice(&512u16.to_be_bytes());
        let d = capsule_wire::dissect(1, &f);
        let r = Record::of(9, 60, f.len() as u32, true, &d);
        let ip = d.ip.unwrap();
        assert_eq!(r.addrs(), Some((ip.src, ip.dst)));
        assert_eq!(r.vlans(), [d.vlans[0], d.vlans[1]]);
        assert_eq!(r.ports(), d.l4.ports());
        assert_eq!(
            (r.ip_version, r.proto, r.dscp),
            (ip.version, ip.proto, ip.dscp)
        );
        assert_eq!(r.wire, f.len() as u32);
        assert!(r.cut() && r.is_tcp() && r.malformed() == d.malformed.is_some());
        let L4::Tcp(t) = d.l4 else {
            panic!("not TCP: {d:?}")
        };
        assert_eq!(
            (r.seq, r.tcp_payload, r.window, r.tcp_flags),
            (t.seq, t.payload_len, t.window, t.flags)
        );
        assert_eq!(std::mem::size_of::<Record>(), 72);
        // Not IP: no addresses.
        let arp = Record::of(1, 60, 60, false, &capsule_wire::dissect(1, &[0u8; 60]));
        assert_eq!(arp.addrs(), None);
    }
}
