//! EtherTypes: the 16-bit numbers after the Ethernet addresses, a VLAN tag or a Linux cooked
//! header that say what comes next. [`Dissected::ethertype`](crate::Dissected::ethertype)
//! reports one of these (the one after the tags); the three tag types are what the dissector
//! follows to find it.

/// IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// ARP: not IP, reported as the EtherType with nothing after it.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// 802.1Q customer tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// 802.1ad service tag.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Pre-standard QinQ service tag.
pub const ETHERTYPE_QINQ_OLD: u16 = 0x9100;
