//! IP protocol numbers (the IPv4 protocol field, the IPv6 next header) that the dissector
//! follows or stops at. [`IpInfo::proto`](crate::IpInfo::proto) reports the one after any
//! IPv6 extension headers.

/// IPv6 hop-by-hop options.
pub const HOPOPTS: u8 = 0;
/// ICMP.
pub const ICMP: u8 = 1;
/// TCP.
pub const TCP: u8 = 6;
/// UDP.
pub const UDP: u8 = 17;
/// IPv6 routing header.
pub const ROUTING: u8 = 43;
/// IPv6 fragment header.
pub const FRAGMENT: u8 = 44;
/// Authentication header.
pub const AH: u8 = 51;
/// ICMPv6.
pub const ICMPV6: u8 = 58;
/// IPv6: no next header.
pub const NONE: u8 = 59;
/// IPv6 destination options.
pub const DSTOPTS: u8 = 60;
/// SCTP.
pub const SCTP: u8 = 132;
