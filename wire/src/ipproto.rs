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

/// An IP protocol by name where capsule knows one: what the filters, the flow listings and
/// the analytics tables call it. The numbers above are the dissector's; this is the name
/// map, kept once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpProto {
    Icmp,
    Tcp,
    Udp,
    Gre,
    Esp,
    Ah,
    Icmpv6,
    Sctp,
    /// Any other number.
    Other(u8),
}

impl IpProto {
    /// The named protocols, in number order.
    pub const NAMED: [IpProto; 8] = [
        IpProto::Icmp,
        IpProto::Tcp,
        IpProto::Udp,
        IpProto::Gre,
        IpProto::Esp,
        IpProto::Ah,
        IpProto::Icmpv6,
        IpProto::Sctp,
    ];

    /// The protocol number.
    pub fn number(self) -> u8 {
        match self {
            IpProto::Icmp => ICMP,
            IpProto::Tcp => TCP,
            IpProto::Udp => UDP,
            IpProto::Gre => 47,
            IpProto::Esp => 50,
            IpProto::Ah => AH,
            IpProto::Icmpv6 => ICMPV6,
            IpProto::Sctp => SCTP,
            IpProto::Other(n) => n,
        }
    }

    /// The name the query language and the tables use (`icmp6` for ICMPv6), if it has one.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            IpProto::Icmp => "icmp",
            IpProto::Tcp => "tcp",
            IpProto::Udp => "udp",
            IpProto::Gre => "gre",
            IpProto::Esp => "esp",
            IpProto::Ah => "ah",
            IpProto::Icmpv6 => "icmp6",
            IpProto::Sctp => "sctp",
            IpProto::Other(_) => return None,
        })
    }

    /// The protocol of a name, case-insensitive (`ipv6-icmp` is ICMPv6 too).
    pub fn by_name(name: &str) -> Option<IpProto> {
        let name = name.to_ascii_lowercase();
        if name == "ipv6-icmp" {
            return Some(IpProto::Icmpv6);
        }
        IpProto::NAMED
            .into_iter()
            .find(|p| p.name() == Some(name.as_str()))
    }

    /// Whether its header starts with source and destination ports (TCP, UDP, SCTP).
    pub fn has_ports(self) -> bool {
        matches!(self, IpProto::Tcp | IpProto::Udp | IpProto::Sctp)
    }
}

impl From<u8> for IpProto {
    fn from(n: u8) -> IpProto {
        IpProto::NAMED
            .into_iter()
            .find(|p| p.number() == n)
            .unwrap_or(IpProto::Other(n))
    }
}

impl From<IpProto> for u8 {
    fn from(p: IpProto) -> u8 {
        p.number()
    }
}

/// The name, or the number for a protocol without one.
impl std::fmt::Display for IpProto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "{}", self.number()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_maps_to_one_protocol_and_back() {
        for n in 0..=255u8 {
            let p = IpProto::from(n);
            assert_eq!(p.number(), n);
            if let Some(name) = p.name() {
                assert_eq!(IpProto::by_name(name), Some(p));
                assert_eq!(IpProto::by_name(&name.to_uppercase()), Some(p));
                assert_eq!(p.to_string(), name);
            } else {
                assert_eq!(p, IpProto::Other(n));
                assert_eq!(p.to_string(), n.to_string());
            }
        }
        assert_eq!(IpProto::by_name("ipv6-icmp"), Some(IpProto::Icmpv6));
        assert_eq!(IpProto::by_name("ip"), None);
        assert!(IpProto::Sctp.has_ports() && !IpProto::Icmp.has_ports());
    }
}
