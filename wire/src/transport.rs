//! The transport layer: TCP (options skipped by data offset), UDP, SCTP's common header,
//! ICMP and ICMPv6, read at IP fragment offset 0 only and never past the IP payload length.
//!
//! [`transport_layer`] takes what the IP layer hands on ([`Transport`]) and fills
//! [`Dissected::l4`]; any other protocol is [`L4::Other`].

use crate::ipproto;
use crate::view::View;
use crate::{header, skip, Dissected, Malformed, TcpInfo, L4, PAST_PAYLOAD};

/// Field offsets of the transport headers, as in smoltcp's `field` modules. `LEN` is the
/// fixed part the view is made over; multi-byte fields are big-endian, their width set by the
/// accessor that reads them.
mod field {
    pub mod tcp {
        pub const SRC_PORT: usize = 0;
        pub const DST_PORT: usize = 2;
        pub const SEQ: usize = 4;
        pub const ACK: usize = 8;
        pub const DATA_OFFSET: usize = 12;
        pub const FLAGS: usize = 13;
        pub const WINDOW: usize = 14;
        pub const LEN: usize = 20;
    }
    pub mod udp {
        pub const SRC_PORT: usize = 0;
        pub const DST_PORT: usize = 2;
        pub const LEN: usize = 8;
    }
    /// The SCTP common header: ports, verification tag, checksum.
    pub mod sctp {
        pub const SRC_PORT: usize = 0;
        pub const DST_PORT: usize = 2;
        pub const LEN: usize = 12;
    }
    /// What every ICMP and ICMPv6 message starts with: type, code, checksum.
    pub mod icmp {
        pub const TYPE: usize = 0;
        pub const CODE: usize = 1;
        pub const LEN: usize = 4;
    }
}

/// What the IP layer hands on to the transport.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transport<'a> {
    pub(crate) proto: u8,
    /// Captured bytes after the IP header(s); may run past the IP payload (link padding).
    pub(crate) data: &'a [u8],
    /// The IP payload length as a bound for the transport header
    /// ([`UNBOUNDED`](crate::UNBOUNDED) for an IPv6 jumbogram or GSO packet, whose payload
    /// length field is 0).
    pub(crate) bound: usize,
    /// The IP payload length as reported in [`IpInfo::payload_len`](crate::IpInfo::payload_len).
    pub(crate) payload_len: u32,
}

/// A TCP header's fixed part (RFC 9293).
#[derive(Debug, Clone, Copy)]
struct TcpHeader<'a>(View<'a, { field::tcp::LEN }>);

impl TcpHeader<'_> {
    /// Header length in bytes, options included (data offset * 4).
    #[inline]
    fn header_len(self) -> u16 {
        u16::from(self.0.u8::<{ field::tcp::DATA_OFFSET }>() >> 4) * 4
    }
    #[inline]
    fn info(self, payload_len: u32) -> TcpInfo {
        TcpInfo {
            src_port: self.0.u16_be::<{ field::tcp::SRC_PORT }>(),
            dst_port: self.0.u16_be::<{ field::tcp::DST_PORT }>(),
            seq: self.0.u32_be::<{ field::tcp::SEQ }>(),
            ack: self.0.u32_be::<{ field::tcp::ACK }>(),
            flags: self.0.u8::<{ field::tcp::FLAGS }>(),
            window: self.0.u16_be::<{ field::tcp::WINDOW }>(),
            payload_len,
        }
    }
}

/// The transport header at IP fragment offset 0.
#[inline]
pub(crate) fn transport_layer(d: &mut Dissected, t: Transport<'_>) -> Result<(), Malformed> {
    d.l4 = match t.proto {
        ipproto::TCP => {
            const LAYER: &str = "tcp";
            let (h, _) = header::<{ field::tcp::LEN }>(t.data, t.bound, LAYER)?;
            let h = TcpHeader(h);
            let header_len = h.header_len();
            if usize::from(header_len) < field::tcp::LEN {
                return Err(Malformed::Invalid {
                    layer: LAYER,
                    what: "data offset",
                });
            }
            if usize::from(header_len) > t.bound {
                return Err(Malformed::Invalid {
                    layer: LAYER,
                    what: PAST_PAYLOAD,
                });
            }
            d.l4 = L4::Tcp(h.info(t.payload_len.saturating_sub(u32::from(header_len))));
            skip(t.data, usize::from(header_len), LAYER)?;
            return Ok(());
        }
        ipproto::UDP => {
            let (h, _) = header::<{ field::udp::LEN }>(t.data, t.bound, "udp")?;
            L4::Udp {
                src_port: h.u16_be::<{ field::udp::SRC_PORT }>(),
                dst_port: h.u16_be::<{ field::udp::DST_PORT }>(),
            }
        }
        ipproto::SCTP => {
            let (h, _) = header::<{ field::sctp::LEN }>(t.data, t.bound, "sctp")?;
            L4::Sctp {
                src_port: h.u16_be::<{ field::sctp::SRC_PORT }>(),
                dst_port: h.u16_be::<{ field::sctp::DST_PORT }>(),
            }
        }
        ipproto::ICMP => {
            let (h, _) = header::<{ field::icmp::LEN }>(t.data, t.bound, "icmp")?;
            L4::Icmp {
                kind: h.u8::<{ field::icmp::TYPE }>(),
                code: h.u8::<{ field::icmp::CODE }>(),
            }
        }
        ipproto::ICMPV6 => {
            let (h, _) = header::<{ field::icmp::LEN }>(t.data, t.bound, "icmpv6")?;
            L4::Icmp6 {
                kind: h.u8::<{ field::icmp::TYPE }>(),
                code: h.u8::<{ field::icmp::CODE }>(),
            }
        }
        _ => L4::Other,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::fixtures::*;
    use crate::*;

    #[test]
    fn ethernet_ipv4_tcp_with_options() {
        assert_eq!(
            dissect(1, &ETH_IPV4_TCP_OPTIONS),
            Dissected {
                vlans: [None, None, None],
                ethertype: 0x0800,
                ip: Some(tcp_options_ip()),
                l4: tcp_options_l4(),
                encap: None,
                malformed: None,
            }
        );
        assert_eq!(tcp_options_l4().ports(), Some((49153, 443)));
    }

    #[test]
    fn sctp_ports() {
        let d = dissect(1, &ETH_IPV4_SCTP);
        assert_eq!(
            d,
            Dissected {
                vlans: [None, None, None],
                ethertype: 0x0800,
                ip: Some(IpInfo {
                    version: 4,
                    src: addr("10.9.0.1"),
                    dst: addr("10.9.0.2"),
                    proto: 132,
                    dscp: 0,
                    ecn: 0,
                    ttl: 64,
                    fragment: None,
                    payload_len: 32,
                }),
                l4: L4::Sctp {
                    src_port: 40000,
                    dst_port: 2905
                },
                encap: None,
                malformed: None,
            }
        );
        assert_eq!(d.l4.ports(), Some((40000, 2905)));
    }

    #[test]
    fn lying_tcp_fields_are_invalid() {
        let mut p = ETH_IPV4_TCP_OPTIONS;
        p[14 + 24 + 12] = 0x40; // data offset 4
        let d = dissect(1, &p);
        assert_eq!((d.ip, d.l4), (Some(tcp_options_ip()), L4::None));
        assert_eq!(d.malformed, invalid("tcp", "data offset"));
        let mut p = ETH_IPV4_TCP_OPTIONS;
        p[16..18].copy_from_slice(&[0x00, 24 + 28]); // IP payload 28 < TCP header 32
        let d = dissect(1, &p);
        assert_eq!((d.ip.map(|ip| ip.payload_len), d.l4), (Some(28), L4::None));
        assert_eq!(
            d.malformed,
            invalid("tcp", "runs past the IP payload length")
        );
        // Ethernet padding after a short IP packet is not read as a header.
        let mut p = ETH_IPV4_TCP_OPTIONS;
        p[16..18].copy_from_slice(&[0x00, 24 + 12]); // IP payload 12 < TCP fixed header 20
        assert_eq!(
            dissect(1, &p).malformed,
            invalid("tcp", "runs past the IP payload length")
        );
    }

    #[test]
    fn other_protocols() {
        // GRE (47) over IPv4: IP fields, then Other.
        let mut p = RAW_IPV4_ICMP;
        p[9] = 47;
        let d = dissect(228, &p);
        assert_eq!(
            (d.ip.map(|ip| ip.proto), d.l4, d.malformed),
            (Some(47), L4::Other, None)
        );
        assert_eq!(d.l4.ports(), None);
    }
}
