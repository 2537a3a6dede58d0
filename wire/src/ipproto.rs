//! IP protocol numbers (the IPv4 protocol field, the IPv6 next header): the constants the
//! dissector follows or stops at, and [`IpProto`], the protocol as a value with the names
//! capsule prints and reads (`tcp`, `udp`, `gre`, ...). [`IpInfo::proto`](crate::IpInfo::proto)
//! reports the number after any IPv6 extension headers; `IpProto::from(ip.proto)` names it.
//!
//! ```
//! use capsule_wire::IpProto;
//!
//! assert_eq!(IpProto::from(6), IpProto::Tcp);
//! assert_eq!(u8::from(IpProto::Gre), 47);
//! assert_eq!(IpProto::Icmpv6.to_string(), "icmp6");
//! assert_eq!(IpProto::from(200).to_string(), "200");
//! assert_eq!("UDP".parse::<IpProto>(), Ok(IpProto::Udp));
//! assert_eq!("ipv6-icmp".parse::<IpProto>(), Ok(IpProto::Icmpv6));
//! assert_eq!("103".parse::<IpProto>(), Ok(IpProto::Other(103)));
//! assert!("igmpx".parse::<IpProto>().is_err());
//! ```

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

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
/// Generic routing encapsulation.
pub const GRE: u8 = 47;
/// Encapsulating security payload.
pub const ESP: u8 = 50;
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

/// An IP protocol number as a value: the protocols capsule has a name for, and every other
/// number as [`Other`](IpProto::Other).
///
/// The names are the ones capsule prints in tables, JSON and filters, and the filter language
/// reads after `proto`: `icmp`, `tcp`, `udp`, `gre`, `esp`, `ah`, `icmp6` (58; `ipv6-icmp`,
/// IANA's keyword, is read too) and `sctp`. [`Display`](fmt::Display) prints the name, or the
/// number for a protocol without one; [`FromStr`] reads either (names case-insensitive).
///
/// [`From<u8>`] never makes `Other` of a named number, and equality, ordering and hashing are
/// those of the number, so an `Other(6)` written by hand still equals [`Tcp`](IpProto::Tcp).
/// More names may come, so a `match` needs a wildcard arm.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum IpProto {
    /// 1.
    Icmp,
    /// 6.
    Tcp,
    /// 17.
    Udp,
    /// 47.
    Gre,
    /// 50.
    Esp,
    /// 51.
    Ah,
    /// 58, printed `icmp6`.
    Icmpv6,
    /// 132.
    Sctp,
    /// Any other number.
    Other(u8),
}

impl IpProto {
    /// Every protocol with a name, in number order.
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
    pub const fn number(self) -> u8 {
        match self {
            IpProto::Icmp => ICMP,
            IpProto::Tcp => TCP,
            IpProto::Udp => UDP,
            IpProto::Gre => GRE,
            IpProto::Esp => ESP,
            IpProto::Ah => AH,
            IpProto::Icmpv6 => ICMPV6,
            IpProto::Sctp => SCTP,
            IpProto::Other(n) => n,
        }
    }

    /// The name capsule prints for the protocol, lowercase; `None` for a number without one
    /// (an `Other` of a named number has that name).
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.number() {
            ICMP => "icmp",
            TCP => "tcp",
            UDP => "udp",
            GRE => "gre",
            ESP => "esp",
            AH => "ah",
            ICMPV6 => "icmp6",
            SCTP => "sctp",
            _ => return None,
        })
    }

    /// The protocol of a name (ASCII case-insensitive): a name [`IpProto::name`] gives, or
    /// `ipv6-icmp`. Numbers are not names: [`FromStr`] reads both.
    pub fn from_name(name: &str) -> Option<IpProto> {
        if name.eq_ignore_ascii_case("ipv6-icmp") {
            return Some(IpProto::Icmpv6);
        }
        IpProto::NAMED
            .into_iter()
            .find(|p| p.name().is_some_and(|n| n.eq_ignore_ascii_case(name)))
    }
}

impl From<u8> for IpProto {
    fn from(n: u8) -> IpProto {
        match n {
            ICMP => IpProto::Icmp,
            TCP => IpProto::Tcp,
            UDP => IpProto::Udp,
            GRE => IpProto::Gre,
            ESP => IpProto::Esp,
            AH => IpProto::Ah,
            ICMPV6 => IpProto::Icmpv6,
            SCTP => IpProto::Sctp,
            n => IpProto::Other(n),
        }
    }
}

impl From<IpProto> for u8 {
    fn from(p: IpProto) -> u8 {
        p.number()
    }
}

impl PartialEq for IpProto {
    fn eq(&self, other: &IpProto) -> bool {
        self.number() == other.number()
    }
}

impl Eq for IpProto {}

impl Hash for IpProto {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.number().hash(state);
    }
}

impl PartialOrd for IpProto {
    fn partial_cmp(&self, other: &IpProto) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IpProto {
    /// By number.
    fn cmp(&self, other: &IpProto) -> std::cmp::Ordering {
        self.number().cmp(&other.number())
    }
}

impl fmt::Display for IpProto {
    /// The name, or the number: `tcp`, `icmp6`, `103`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.number()),
        }
    }
}

/// Text that is neither a protocol number 0-255 nor a protocol name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected an IP protocol number 0-255 or name (icmp, tcp, udp, gre, esp, ah, icmp6, sctp), \
     found {found:?}"
)]
pub struct ParseIpProtoError {
    /// The text read (its first 40 characters).
    pub found: String,
}

impl FromStr for IpProto {
    type Err = ParseIpProtoError;

    /// A decimal number 0-255 (ASCII digits only, leading zeros allowed) or a name, as
    /// [`IpProto::from_name`] reads it.
    fn from_str(s: &str) -> Result<IpProto, ParseIpProtoError> {
        // `u8::from_str` alone would also take a sign (`+6`).
        let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        digits
            .then(|| s.parse::<u8>().ok())
            .flatten()
            .map(IpProto::from)
            .or_else(|| IpProto::from_name(s))
            .ok_or_else(|| ParseIpProtoError {
                found: s.chars().take(40).collect(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn numbers_and_names_round_trip() {
        for n in 0..=255u8 {
            let p = IpProto::from(n);
            assert_eq!(u8::from(p), n);
            assert_eq!(p, IpProto::Other(n), "equality is the number's");
            assert_eq!(p.to_string().parse::<IpProto>(), Ok(p), "{n}");
            assert_eq!(n.to_string().parse::<IpProto>(), Ok(p), "{n}");
            match p.name() {
                Some(name) => {
                    assert!(!matches!(p, IpProto::Other(_)), "{n} has a name: {name}");
                    assert_eq!(IpProto::from_name(name), Some(p));
                    assert_eq!(IpProto::from_name(&name.to_uppercase()), Some(p));
                    assert_eq!(p.to_string(), name);
                }
                None => {
                    assert_eq!(p, IpProto::Other(n));
                    assert!(matches!(p, IpProto::Other(_)));
                    assert_eq!(p.to_string(), n.to_string());
                }
            }
        }
    }

    #[test]
    fn the_names_capsule_prints() {
        let named: Vec<(u8, &str)> = (0..=255u8)
            .filter_map(|n| IpProto::from(n).name().map(|s| (n, s)))
            .collect();
        assert_eq!(
            named,
            [
                (1, "icmp"),
                (6, "tcp"),
                (17, "udp"),
                (47, "gre"),
                (50, "esp"),
                (51, "ah"),
                (58, "icmp6"),
                (132, "sctp"),
            ]
        );
        let listed: Vec<u8> = IpProto::NAMED.iter().map(|&p| p.into()).collect();
        assert_eq!(listed, named.iter().map(|&(n, _)| n).collect::<Vec<_>>());
        // A hand-made Other of a named number behaves as the named variant.
        assert_eq!(IpProto::Other(6).name(), Some("tcp"));
        assert_eq!(IpProto::Other(6).to_string(), "tcp");
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        assert_eq!(
            state.hash_one(IpProto::Other(17)),
            state.hash_one(IpProto::Udp)
        );
        assert!(IpProto::Tcp < IpProto::Udp && IpProto::Udp < IpProto::Other(18));
    }

    #[test]
    fn what_does_not_parse() {
        assert_eq!("ipv6-icmp".parse(), Ok(IpProto::Icmpv6));
        assert_eq!("IPv6-ICMP".parse(), Ok(IpProto::Icmpv6));
        assert_eq!("0".parse(), Ok(IpProto::Other(0)));
        assert_eq!("000".parse(), Ok(IpProto::Other(0)));
        assert_eq!("0006".parse(), Ok(IpProto::Tcp));
        assert_eq!("255".parse(), Ok(IpProto::Other(255)));
        for bad in [
            "", "256", "+6", "-1", " 6", "6 ", "tcp ", "tcpx", "icmpv6", "igmp", "0x6",
        ] {
            let e = bad.parse::<IpProto>().unwrap_err();
            assert_eq!(e.found, bad);
            assert!(e.to_string().starts_with("expected an IP protocol"), "{e}");
        }
        let long = "9".repeat(1000);
        assert_eq!(long.parse::<IpProto>().unwrap_err().found.len(), 40);
    }

    proptest! {
        #[test]
        fn parsing_never_panics(s in any::<String>()) {
            if let Ok(p) = s.parse::<IpProto>() {
                prop_assert_eq!(p.to_string().parse::<IpProto>(), Ok(p));
            }
        }
    }
}
