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

/// True for the link types [`dissect`](crate::dissect) reads (the constants above).
pub fn is_dissected(linktype: LinkType) -> bool {
    matches!(
        linktype,
        LINKTYPE_NULL
            | LINKTYPE_ETHERNET
            | LINKTYPE_RAW_BSD
            | LINKTYPE_RAW_OPENBSD
            | LINKTYPE_RAW
            | LINKTYPE_LOOP
            | LINKTYPE_LINUX_SLL
            | LINKTYPE_IPV4
            | LINKTYPE_IPV6
            | LINKTYPE_LINUX_SLL2
    )
}

/// A short name for messages: the dissected link types and some common others (802.11 and
/// its radio headers, PPP, USB, ...); `None` for the rest.
pub fn name(linktype: LinkType) -> Option<&'static str> {
    Some(match linktype {
        LINKTYPE_NULL => "BSD loopback",
        LINKTYPE_ETHERNET => "Ethernet",
        LINKTYPE_RAW_BSD | LINKTYPE_RAW_OPENBSD | LINKTYPE_RAW => "raw IP",
        LINKTYPE_LOOP => "OpenBSD loopback",
        LINKTYPE_LINUX_SLL => "Linux cooked",
        LINKTYPE_IPV4 => "raw IPv4",
        LINKTYPE_IPV6 => "raw IPv6",
        LINKTYPE_LINUX_SLL2 => "Linux cooked v2",
        9 => "PPP",
        50 => "PPP in HDLC framing",
        104 => "Cisco HDLC",
        105 => "IEEE 802.11",
        119 => "IEEE 802.11 Prism",
        127 => "IEEE 802.11 radiotap",
        163 => "IEEE 802.11 AVS",
        192 => "PPI",
        189 | 220 => "Linux USB",
        195 | 215 | 230 => "IEEE 802.15.4",
        201 => "Bluetooth HCI H4",
        253 => "Linux netlink",
        147..=162 => "user-defined",
        _ => return None,
    })
}
