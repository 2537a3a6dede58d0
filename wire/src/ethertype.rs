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
/// MPLS unicast: a label stack, then a payload guessed from its first nibble.
pub const ETHERTYPE_MPLS: u16 = 0x8847;
/// MPLS multicast.
pub const ETHERTYPE_MPLS_MC: u16 = 0x8848;
/// PPPoE session stage: the PPPoE header, then a PPP protocol.
pub const ETHERTYPE_PPPOE_SESSION: u16 = 0x8864;
/// Transparent Ethernet bridging (a GRE or Geneve payload that is an Ethernet frame).
pub const ETHERTYPE_TEB: u16 = 0x6558;
/// ERSPAN type I and II (GRE protocol type).
pub const ETHERTYPE_ERSPAN: u16 = 0x88be;
/// ERSPAN type III (GRE protocol type).
pub const ETHERTYPE_ERSPAN3: u16 = 0x22eb;
