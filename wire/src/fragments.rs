//! Non-first fragments join their datagram's flow: a bounded table of the first fragments
//! seen, (VLAN tags, addresses, protocol, identification) -> the transport ports they
//! carried, which the side index (when it counts a packet) and the query (when it selects
//! one) both consult for a fragment at offset > 0, so both give a datagram's later fragments
//! the ports of its first.
//!
//! The bounds are in packet time, so that the index (which counts a segment's blocks in
//! order) and a query (which reads each block on its own) agree: a later fragment joins a
//! first fragment of the same segment stored before it (in an earlier block, or earlier in its
//! own) whose timestamp is within [`FragmentPorts::WINDOW_NS`] of its own. Time, not a count
//! of blocks: the store fills one block per DSCP class at a time, and a quiet class's block
//! may be written long after the busy classes' blocks that followed its first packets. The
//! table holds at most [`FragmentPorts::CAP`] first fragments: when full, those more than
//! [`FragmentPorts::EVICT_NS`] older than the newest are forgotten, and a new one beyond is
//! not remembered (its later fragments stay portless; the index and a query may then differ
//! for them). A key's most recent first fragment wins (an IPv4 identification reused). A
//! fragment that arrives before its first fragment, or whose first fragment was not
//! captured, stays portless (a flow of its own without ports), as before. TCP is joined
//! too: a later fragment of a TCP segment has no TCP header, and takes the ports of its first
//! fragment (the side index reads a TCP first fragment's identification again from its
//! block: see `Record::FRAG_FIRST` in capsule-store).

use std::collections::HashMap;
use std::net::IpAddr;

/// What identifies a datagram's fragments (RFC 791 / RFC 8200), with the VLAN tags the
/// side index keys flows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentKey {
    pub vlans: [Option<u16>; 2],
    pub proto: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub id: u32,
}

/// First fragments seen, with their ports and timestamps (see the module docs).
#[derive(Debug, Default, Clone)]
pub struct FragmentPorts {
    /// key -> (ports, timestamp in ns).
    table: HashMap<FragmentKey, ((u16, u16), u64)>,
    newest_ns: u64,
}

impl FragmentPorts {
    /// First fragments remembered at most.
    pub const CAP: usize = 65_536;

    /// How far apart in time a later fragment and its first may be captured: 10 ms (a
    /// datagram's fragments leave back to back; 1500-byte fragments 10 ms apart are a link
    /// of 1.2 Mbit/s).
    pub const WINDOW_NS: u64 = 10_000_000;

    /// When the table is full, first fragments this much older than the newest are
    /// forgotten.
    pub const EVICT_NS: u64 = 10_000_000_000;

    /// A first fragment with its ports, captured at `ts_ns`.
    pub fn first(&mut self, key: FragmentKey, ports: (u16, u16), ts_ns: u64) {
        self.newest_ns = self.newest_ns.max(ts_ns);
        if self.table.len() >= Self::CAP && !self.table.contains_key(&key) {
            let horizon = self.newest_ns.saturating_sub(Self::EVICT_NS);
            self.table.retain(|_, (_, t)| *t >= horizon);
            if self.table.len() >= Self::CAP {
                return;
            }
        }
        self.table.insert(key, (ports, ts_ns));
    }

    /// The ports of a later fragment's datagram captured at `ts_ns`, when its first
    /// fragment was seen within [`FragmentPorts::WINDOW_NS`].
    pub fn later(&self, key: &FragmentKey, ts_ns: u64) -> Option<(u16, u16)> {
        self.table
            .get(key)
            .filter(|(_, t)| t.abs_diff(ts_ns) <= Self::WINDOW_NS)
            .map(|(p, _)| *p)
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

impl crate::Dissected {
    /// For a fragment of an IP datagram: its key, and whether it is the first (then with its
    /// ports; a first fragment without ports has no key).
    pub fn fragment_key(&self) -> Option<(FragmentKey, Option<(u16, u16)>)> {
        let ip = self.ip.as_ref()?;
        let f = ip.fragment?;
        let key = FragmentKey {
            vlans: [self.vlans[0], self.vlans[1]],
            proto: ip.proto,
            src: ip.src,
            dst: ip.dst,
            id: f.id,
        };
        if f.offset == 0 {
            Some((key, Some(self.l4.ports()?)))
        } else {
            Some((key, None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u32) -> FragmentKey {
        FragmentKey {
            vlans: [None, None],
            proto: 17,
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            id,
        }
    }

    #[test]
    fn a_first_fragment_gives_its_ports_within_the_window() {
        let mut t = FragmentPorts::default();
        let w = FragmentPorts::WINDOW_NS;
        t.first(key(1), (5000, 53), 1_000 * w);
        assert_eq!(t.later(&key(1), 1_000 * w + 5), Some((5000, 53)));
        assert_eq!(t.later(&key(1), 1_001 * w), Some((5000, 53)));
        assert_eq!(t.later(&key(1), 1_001 * w + 1), None, "too late");
        assert_eq!(t.later(&key(2), 1_000 * w), None);
        t.first(key(1), (6000, 53), 1_000 * w + 10);
        assert_eq!(
            t.later(&key(1), 1_000 * w + 20),
            Some((6000, 53)),
            "the newest wins"
        );
    }

    #[test]
    fn the_table_holds_at_most_cap_first_fragments() {
        let mut t = FragmentPorts::default();
        for id in 0..FragmentPorts::CAP as u32 + 10 {
            t.first(key(id), (1, 2), 5);
        }
        assert_eq!(t.table.len(), FragmentPorts::CAP);
        assert_eq!(t.later(&key(FragmentPorts::CAP as u32 + 1), 5), None);
        // Full: the old ones go when a first fragment comes EVICT_NS later.
        t.first(key(u32::MAX), (3, 4), 6 + FragmentPorts::EVICT_NS);
        assert_eq!(t.table.len(), 1);
        assert_eq!(
            t.later(&key(u32::MAX), 6 + FragmentPorts::EVICT_NS),
            Some((3, 4))
        );
    }
}
