//! Non-first fragments join their datagram's flow: a bounded table of the first fragments
//! seen, (VLAN tags, addresses, protocol, identification) -> the transport ports they
//! carried, which the side index (when it counts a packet) and the query (when it selects
//! one) both consult for a fragment at offset > 0, so both give a datagram's later fragments
//! the ports of its first.
//!
//! The bounds are the store's blocks, so that the index and a query reading blocks on their
//! own agree: a later fragment finds a first fragment of the same segment stored in its own
//! block (before it) or in one of the [`FragmentPorts::WINDOW_BLOCKS`] blocks before it
//! (the store fills one block per DSCP class at a time, so the block before in the segment
//! may be another class's); [`FragmentPorts::begin_block`] forgets older ones. Within that, at most [`FragmentPorts::CAP`] first fragments are remembered (a new
//! one beyond is not: its later fragments stay portless). The most recent first fragment of
//! a key wins (an IPv4 identification reused). A fragment that arrives before its first
//! fragment, or whose first fragment was not captured, stays portless (a flow of its own
//! without ports), as before. TCP is left out (see `Record::FRAG_FIRST` in capsule-store).

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

/// First fragments seen in the current block and the [`FragmentPorts::WINDOW_BLOCKS`]
/// before it (see the module docs).
#[derive(Debug, Default, Clone)]
pub struct FragmentPorts {
    /// key -> (ports, block it was seen in).
    table: HashMap<FragmentKey, ((u16, u16), u32)>,
    block: u32,
}

impl FragmentPorts {
    /// First fragments remembered at most.
    pub const CAP: usize = 65_536;

    /// How many blocks before a later fragment's own its first fragment may be stored in.
    pub const WINDOW_BLOCKS: u32 = 16;

    /// The packets that follow are block `block` of the segment: first fragments seen
    /// before block `block - WINDOW_BLOCKS` are forgotten. A new segment needs a new table.
    pub fn begin_block(&mut self, block: u32) {
        self.block = block;
        if !self.table.is_empty() {
            self.table
                .retain(|_, (_, b)| b.saturating_add(Self::WINDOW_BLOCKS) >= block);
        }
    }

    /// A first fragment with its ports, seen in the current block.
    pub fn first(&mut self, key: FragmentKey, ports: (u16, u16)) {
        if self.table.len() < Self::CAP || self.table.contains_key(&key) {
            self.table.insert(key, (ports, self.block));
        }
    }

    /// The ports of a later fragment's datagram, when its first fragment was seen.
    pub fn later(&self, key: &FragmentKey) -> Option<(u16, u16)> {
        self.table.get(key).map(|(p, _)| *p)
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

impl crate::Dissected {
    /// For a fragment of an IP datagram that is not TCP: its key, and whether it is the first
    /// (then with its ports; a first fragment without ports has no key).
    pub fn fragment_key(&self) -> Option<(FragmentKey, Option<(u16, u16)>)> {
        let ip = self.ip.as_ref()?;
        let f = ip.fragment?;
        if ip.proto == crate::ipproto::TCP {
            return None;
        }
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
    fn a_first_fragment_is_remembered_for_its_block_and_the_window_after() {
        let mut t = FragmentPorts::default();
        t.begin_block(3);
        t.first(key(1), (5000, 53));
        assert_eq!(t.later(&key(1)), Some((5000, 53)));
        assert_eq!(t.later(&key(2)), None);
        t.begin_block(4);
        assert_eq!(t.later(&key(1)), Some((5000, 53)));
        t.first(key(1), (6000, 53));
        assert_eq!(t.later(&key(1)), Some((6000, 53)), "the newest wins");
        t.begin_block(4 + FragmentPorts::WINDOW_BLOCKS);
        assert_eq!(t.later(&key(1)), Some((6000, 53)));
        t.begin_block(5 + FragmentPorts::WINDOW_BLOCKS);
        assert_eq!(t.later(&key(1)), None);
        assert!(t.is_empty());
    }

    #[test]
    fn the_table_holds_at_most_cap_first_fragments() {
        let mut t = FragmentPorts::default();
        for id in 0..FragmentPorts::CAP as u32 + 10 {
            t.first(key(id), (1, 2));
        }
        assert_eq!(t.table.len(), FragmentPorts::CAP);
        assert_eq!(t.later(&key(FragmentPorts::CAP as u32 + 1)), None);
    }
}
