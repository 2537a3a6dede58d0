//! Link-layer header types: the `LINKTYPE_*` numbers registered at tcpdump.org, which a pcap
//! file header or a pcapng Interface Description Block gives for its packets and which
//! [`dissect`](crate::dissect) takes to know where a packet's headers start.
//!
//! The one list in capsule: the pcap codec re-exports it (`capsule_pcap::LinkType`,
//! `capsule_pcap::LINKTYPE_ETHERNET`), and the synthetic traffic and the tests name their link
//! type from it. Only the link types the dissector reads are listed.

/// A link-layer header type, as registered at tcpdump.org (`LINKTYPE_*`).
pub type LinkType = u16;

/// `LINKTYPE_NULL`: BSD loopback, a 4-byte address family in host byte order.
pub const LINKTYPE_NULL: LinkType = 0;
/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: LinkType = 1;
/// `DLT_RAW` as written on most BSDs: raw IP, version from the first nibble.
pub const LINKTYPE_RAW_BSD: LinkType = 12;
/// `DLT_RAW` as written on OpenBSD.
pub const LINKTYPE_RAW_OPENBSD: LinkType = 14;
/// `LINKTYPE_RAW`: raw IP, version from the first nibble.
pub const LINKTYPE_RAW: LinkType = 101;
/// `LINKTYPE_LOOP`: OpenBSD loopback, the address family in network byte order.
pub const LINKTYPE_LOOP: LinkType = 108;
/// `LINKTYPE_LINUX_SLL`: Linux cooked capture v1.
pub const LINKTYPE_LINUX_SLL: LinkType = 113;
/// `LINKTYPE_IPV4`: raw IPv4.
pub const LINKTYPE_IPV4: LinkType = 228;
/// `LINKTYPE_IPV6`: raw IPv6.
pub const LINKTYPE_IPV6: LinkType = 229;
/// `LINKTYPE_LINUX_SLL2`: Linux cooked capture v2.
pub const LINKTYPE_LINUX_SLL2: LinkType = 276;
