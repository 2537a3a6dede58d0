//! Filters built as values: the public constructors, for the answers, the server and the
//! console, which make filters without writing text for the parser.
//!
//! Each constructor makes the tree the parser makes from the filter's canonical text (`and`
//! and `or` flattened, networks with their host bits cleared, values in the ranges the
//! language has words for), so `Filter::parse(&f.to_string()) == Ok(f)` holds for every
//! filter built here; the property tests hold it, and that a built filter and its parsed
//! text match the same packets.

use std::net::IpAddr;

use capsule_wire::IpProto;

use super::{Direction, Expr, Filter, Net, Prim};

/// A value a filter cannot hold, because the filter language has no text for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FilterValueError {
    /// A prefix longer than the address (33 and up for IPv4, 129 and up for IPv6).
    #[error(
        "prefix length {prefix} is too long for {addr} (at most {})",
        if addr.is_ipv4() { 32 } else { 128 }
    )]
    Prefix { addr: IpAddr, prefix: u8 },
    /// A port range whose low end is above its high end.
    #[error("port range {low}-{high}: the low port is above the high one")]
    PortRange { low: u16, high: u16 },
    /// A VLAN id above 4095 (VLAN ids are 12 bits).
    #[error("VLAN id {0} is not 0-4095")]
    Vlan(u16),
    /// A DSCP above 63 (code points are 6 bits).
    #[error("DSCP {0} is not 0-63")]
    Dscp(u8),
}

impl Filter {
    /// The filter of one primitive.
    fn prim(p: Prim) -> Filter {
        let expr = Expr::Prim(p);
        Filter {
            reads_bytes: expr.reads_bytes(),
            expr: Some(expr),
        }
    }

    /// `self` and `other` joined by `and` or `or`, both not [`Filter::all`].
    fn join(a: Expr, b: Expr, reads_bytes: bool, and: bool) -> Filter {
        Filter {
            expr: Some(if and {
                Expr::and(vec![a, b])
            } else {
                Expr::or(vec![a, b])
            }),
            reads_bytes,
        }
    }

    /// `host A` (with the direction's qualifier: `src host A`, ...): the packet's IP source
    /// or destination is `addr`. An IPv4 address never matches an IPv6 packet, nor the
    /// reverse.
    pub fn host(dir: Direction, addr: IpAddr) -> Filter {
        Filter::prim(Prim::Host(dir, addr))
    }

    /// `net A/L`: the address is inside the prefix of `prefix_len` bits of `addr` (host bits
    /// are cleared, as the parser does). An error if the prefix is longer than the address.
    pub fn net(dir: Direction, addr: IpAddr, prefix_len: u8) -> Result<Filter, FilterValueError> {
        let net = Net::new(addr, prefix_len).ok_or(FilterValueError::Prefix {
            addr,
            prefix: prefix_len,
        })?;
        Ok(Filter::prim(Prim::Net(dir, net)))
    }

    /// `port N`: the TCP, UDP or SCTP port (packets without a transport header never match).
    pub fn port(dir: Direction, port: u16) -> Filter {
        Filter::prim(Prim::Port(dir, port))
    }

    /// `portrange LOW-HIGH`, both ends included. An error if `low > high`.
    pub fn port_range(dir: Direction, low: u16, high: u16) -> Result<Filter, FilterValueError> {
        if low > high {
            return Err(FilterValueError::PortRange { low, high });
        }
        Ok(Filter::prim(Prim::PortRange(dir, low, high)))
    }

    /// The IP protocol (`tcp`, `proto gre`, `proto 103`): the IPv4 protocol field or the
    /// IPv6 next header after the extension headers.
    pub fn proto(proto: IpProto) -> Filter {
        Filter::prim(Prim::Proto(proto.into()))
    }

    /// `ip`: IPv4.
    pub fn ip4() -> Filter {
        Filter::prim(Prim::Ip4)
    }

    /// `ip6`: IPv6.
    pub fn ip6() -> Filter {
        Filter::prim(Prim::Ip6)
    }

    /// `vlan N`: one of the packet's (up to two) tags is `N`; `vlan` (`None`): the packet
    /// has a tag. An error for an id above 4095.
    pub fn vlan(id: Option<u16>) -> Result<Filter, FilterValueError> {
        match id {
            Some(n) if n > 4095 => Err(FilterValueError::Vlan(n)),
            _ => Ok(Filter::prim(Prim::Vlan(id))),
        }
    }

    /// `dscp N`: the IPv4 DS field or IPv6 traffic class carries code point `N` (printed by
    /// name where it has one: `dscp ef`). An error above 63.
    pub fn dscp(code_point: u8) -> Result<Filter, FilterValueError> {
        if code_point > 63 {
            return Err(FilterValueError::Dscp(code_point));
        }
        Ok(Filter::prim(Prim::Dscp(code_point)))
    }

    /// `arp`: the EtherType after the VLAN tags is ARP.
    pub fn arp() -> Filter {
        Filter::prim(Prim::Arp)
    }

    /// `ether host M` (`ether src M`, ...): the Ethernet source or destination address
    /// (Ethernet link type only).
    pub fn ether(dir: Direction, mac: [u8; 6]) -> Filter {
        Filter::prim(Prim::Ether(dir, mac))
    }

    /// `greater N`: the packet's length on the wire is at least `len` bytes.
    pub fn greater(len: u32) -> Filter {
        Filter::prim(Prim::Greater(len))
    }

    /// `less N`: the packet's length on the wire is at most `len` bytes.
    pub fn less(len: u32) -> Filter {
        Filter::prim(Prim::Less(len))
    }

    /// Both filters: `self and other`. With [`Filter::all`] on either side, the other one.
    /// Chains flatten (`a.and(b).and(c)` is `a and b and c`); an `or` inside is printed in
    /// parentheses.
    pub fn and(self, other: Filter) -> Filter {
        let reads_bytes = self.reads_bytes || other.reads_bytes;
        match (self.expr, other.expr) {
            (Some(a), Some(b)) => Filter::join(a, b, reads_bytes, true),
            (expr, None) | (None, expr) => Filter { expr, reads_bytes },
        }
    }

    /// Either filter: `self or other`. With [`Filter::all`] on either side, `Filter::all()`
    /// (every packet). Chains flatten as [`Filter::and`]'s do.
    pub fn or(self, other: Filter) -> Filter {
        let reads_bytes = self.reads_bytes || other.reads_bytes;
        match (self.expr, other.expr) {
            (Some(a), Some(b)) => Filter::join(a, b, reads_bytes, false),
            (None, _) | (_, None) => Filter::all(),
        }
    }

    /// The packets the filter does not match: `not self` (also written `!filter`). As the
    /// language has no word for "nothing", `Filter::all().not()` is `ip and ip6`, which no
    /// packet matches.
    #[allow(clippy::should_implement_trait)] // It is implemented too, by calling this.
    pub fn not(self) -> Filter {
        match self.expr {
            Some(e) => Filter {
                expr: Some(Expr::not(e)),
                reads_bytes: self.reads_bytes,
            },
            None => Filter::ip4().and(Filter::ip6()),
        }
    }
}

impl std::ops::Not for Filter {
    type Output = Filter;

    /// [`Filter::not`].
    fn not(self) -> Filter {
        Filter::not(self)
    }
}
