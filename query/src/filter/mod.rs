//! The query filter language: a small tcpdump / stenoread-like expression language over the
//! fields of [`Dissected`], with an exact per-packet evaluator ([`Filter::matches`]) and a
//! three-valued evaluator for query planning over the side index ([`Filter::matches_side`],
//! [`Filter::matches_non_ip`]). A [`Filter`] is parsed from text ([`Filter::parse`]) or built
//! as a value (see [Building filters](#building-filters)).
//!
//! # Examples
//!
//! ```text
//! tcp port 443
//! host 10.0.0.1 and not port 22
//! src net 10.1.0.0/16 and (udp dst port 53 or tcp dst port 53)
//! ip6 and dscp ef
//! vlan 100 && !icmp
//! proto gre or proto 50
//! udp portrange 16384-32767 and dscp af41
//! tcp port 80 or 443 or https
//! src and dst net 10.50 and tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn
//! tcpflags rst or arp or ether host 00:1b:21:0a:0b:0c or greater 1500
//! ```
//!
//! ```
//! use capsule_query::filter::Filter;
//!
//! let f = Filter::parse("tcp port 443 or dscp EF").unwrap();
//! assert_eq!(f.to_string(), "(tcp and port 443) or dscp ef"); // canonical, re-parsable
//! assert!(Filter::parse("").unwrap().is_all());
//!
//! let err = Filter::parse("host 10.0.0.300 and tcp").unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "host 10.0.0.300 and tcp\n     ^^^^^^^^^^ expected an IPv4 or IPv6 address, found \"10.0.0.300\""
//! );
//! ```
//!
//! # Building filters
//!
//! Code that has the values builds the filter instead of writing text for the parser:
//!
//! ```
//! use capsule_query::filter::{Direction, Filter};
//! use capsule_wire::IpProto;
//!
//! let a = "10.60.0.5".parse().unwrap();
//! let f = Filter::vlan(Some(100))?
//!     .and(Filter::proto(IpProto::Udp))
//!     .and(Filter::host(Direction::Src, a))
//!     .and(Filter::port_range(Direction::Dst, 16384, 32767)?)
//!     .and(!Filter::dscp(46)?);
//! assert_eq!(
//!     f.to_string(),
//!     "vlan 100 and udp and src host 10.60.0.5 and dst portrange 16384-32767 and not dscp ef"
//! );
//! assert_eq!(Filter::parse(&f.to_string()), Ok(f));
//! # Ok::<(), capsule_query::filter::FilterValueError>(())
//! ```
//!
//! One constructor a primitive: [`Filter::host`], [`Filter::net`], [`Filter::port`],
//! [`Filter::port_range`], [`Filter::proto`], [`Filter::ip4`], [`Filter::ip6`],
//! [`Filter::vlan`], [`Filter::dscp`], [`Filter::arp`], [`Filter::ether`],
//! [`Filter::greater`], [`Filter::less`]; a [`Direction`] is the `src` / `dst` qualifier.
//! They are joined with [`Filter::and`], [`Filter::or`] and [`Filter::not`] (or `!`), with
//! [`Filter::all`] as the filter of every packet. A value the language has no text for (a
//! VLAN id above 4095, a DSCP above 63, a prefix longer than its address, a port range upside
//! down) is a [`FilterValueError`], not a filter. TCP flag tests and byte offsets have no
//! constructor yet: parse them.
//!
//! The expression tree is private: the constructors keep the form the parser makes (chains
//! flattened, host bits cleared), which is what makes `Filter::parse(&f.to_string()) ==
//! Ok(f)` true for every filter, built or parsed (docs/decisions.md).
//!
//! # Grammar
//!
//! ```text
//! filter     = [ or_expr ] ;                       (* empty: matches everything *)
//! or_expr    = and_expr { ( "or" | "||" ) and_expr } ;
//! and_expr   = unary { ( "and" | "&&" ) unary } ;
//! unary      = ( "not" | "!" ) unary | "(" or_expr ")" | primitive ;
//! primitive  = [ dir ] addressed
//!            | proto_word [ follower ]             (* "tcp port 80" = "tcp and port 80" *)
//!            | "proto" protocol
//!            | "vlan" [ VLAN_ID ]
//!            | "tunnel" [ "vni" NUMBER | "host" ADDRESS ]  (* the encapsulation, below *)
//!            | "mpls" [ LABEL ]                    (* LABEL = NUMBER 0-1048575 *)
//!            | "dscp" dscp
//!            | "tcpflags" FLAG                     (* = tcp[tcpflags] & tcp-FLAG != 0 *)
//!            | RELATION                            (* tcp[tcpflags] & MASK OP VALUE *)
//!            | "ether" ( [ dir ] "host" | dir ) MAC
//!            | "arp" | "greater" LENGTH | "less" LENGTH
//!            | ( "sni" | "dns" | "http.host" ) NAME | "app" APP
//!            | OPERAND ;                           (* after and / or: see port lists *)
//! dir        = "src" | "dst" | "src" "or" "dst" | "src" "and" "dst"   (* and dst/src swapped *)
//! addressed  = "host" ADDRESS | "net" NETWORK | "port" PORT | "portrange" PORTNUM "-" PORTNUM ;
//! follower   = [ dir ] addressed | "proto" protocol ;
//! proto_word = "tcp" | "udp" | "sctp" | "icmp" | "icmp6" | "ip" | "ip6" ;
//! protocol   = NUMBER (* 0-255 *) | "tcp" | "udp" | "sctp" | "icmp" | "icmp6" | "ipv6-icmp"
//!            | "gre" | "esp" | "ah" ;           (* capsule_wire::IpProto's names *)
//! dscp       = NUMBER (* 0-63 *) | "ef" | "va" | "le" | "default" | "be" | "df" | "cs0" .. "cs7"
//!            | "af11" .. "af13" | "af21" .. "af23" | "af31" .. "af33" | "af41" .. "af43" ;
//! ADDRESS    = an IPv4 or IPv6 literal (10.0.0.1, fd00::1) ;
//! NETWORK    = ( ADDRESS | SHORT ) [ "/" NUMBER ] ;  (* prefix 0-32 or 0-128; host bits are masked *)
//! SHORT      = 1 to 3 dotted numbers: 10, 10.50, 10.50.1 (* /8, /16, /24 unless "/" says *)
//! PORT       = PORTNUM | SERVICE ;   PORTNUM = NUMBER (* 0-65535 *) ;   VLAN_ID = NUMBER (* 0-4095 *) ;
//! SERVICE    = an IANA service name from a built-in table: http, https, domain, ssh, ntp, ...
//! FLAG       = "fin" | "syn" | "rst" | "push" | "psh" | "ack" | "urg" | "ece" | "cwr" ;
//! RELATION   = "tcp[tcpflags]" | "tcp[13]", then [ "&" VALUE ] OP VALUE, lexed as one token ;
//! OP         = "==" | "=" | "!=" | "<" | "<=" | ">" | ">=" ;
//! VALUE      = NUMBER | 0xHEX | "tcp-" FLAG | "(" VALUE { "|" VALUE } ")" ;  (* 0-255 *)
//! MAC        = six hex bytes separated by ":" or "-" (00:1b:21:0a:0b:0c) ;
//! LENGTH     = NUMBER (* bytes on the wire *) ;
//! ```
//!
//! Port lists, as in tcpdump: after `and` / `or`, a bare operand (a number, address, network,
//! service name or MAC) takes the qualifiers of the last `host` / `net` / `port` /
//! `portrange` / `ether` primitive, protocol word included: `tcp port 80 or 443` is
//! `tcp port 80 or tcp port 443`, `host 10.0.0.1 or 10.0.0.2` is
//! `host 10.0.0.1 or host 10.0.0.2`.
//!
//! Tokens are separated by white space; `(`, `)`, `!`, `&&` and `||` also end a word. Keywords
//! and names are case-insensitive (`DSCP EF` works); numbers are plain decimal. Precedence is
//! tcpdump's: `not` binds tightest, `and` and `or` bind equally and group from the left
//! (`tcp or udp and port 53` is `(tcp or udp) and port 53`, as `tcpdump -r` reads it). Two primitives side by side without an
//! operator are an error ("expected 'and' or 'or'"), except the shorthand of a protocol word
//! directly followed by a `host` / `net` / `port` / `portrange` / `src` / `dst` / `proto`
//! primitive, which means `and` and binds like a single primitive: `not tcp port 80` is
//! `not (tcp and port 80)`.
//!
//! Encapsulations (MPLS, PPPoE, GRE, ERSPAN, VXLAN, Geneve, GTP-U; capsule_wire opens
//! them): every term matches the innermost packet, except `tunnel` (any encapsulation),
//! `tunnel vni N` (a VXLAN or Geneve VNI), `tunnel host A` (an outer endpoint of the outermost
//! tunnel carried by IP) and `mpls [LABEL]` (an MPLS stack, its top label), which match the
//! outer layers. tcpdump matches the outer headers instead (`host` there is a tunnel
//! endpoint); byte offsets (`ip[1]`) count from the outermost headers, as tcpdump's.
//!
//! The empty filter (or only white space) matches everything ([`Filter::all`]). `Display`
//! prints a canonical form: lowercase keywords, explicit `and`, an `and` or `or` inside
//! another in parentheses, `and` / `or` chains flattened, networks with their host bits cleared, protocol and DSCP numbers
//! by name where one exists (`tcp`, `proto gre`, `dscp ef`); it parses back to an equal
//! `Filter`. Parentheses and `not` nest at most 200 deep (an error beyond, not a stack
//! overflow).
//!
//! # Semantics
//!
//! * `host A`: the IP source or destination is `A`; `src host` / `dst host` one side only.
//!   An IPv4 literal never matches an IPv6 packet and the reverse (no v4-mapped magic).
//! * `net P/L`: the address is inside the prefix (same family only).
//! * `port N`, `portrange A-B`: the TCP, UDP or SCTP source or destination port. Packets
//!   without a transport header (non-first fragments, truncated headers, other protocols)
//!   never match a port primitive, not even `portrange 0-65535` (like tcpdump). The query
//!   (capsule-replay) hands a UDP, SCTP or TCP datagram's later fragments over with the
//!   ports of its first fragment when that was seen before (capsule_wire::fragments), as the
//!   side index counts them in its flow: there a port selects all of the datagram's
//!   fragments (tcpdump: the first only); a TCP one has flags 0.
//! * `tcp`, `udp`, `sctp`, `icmp`, `icmp6`, `proto N`: the IP protocol (IPv4 protocol field,
//!   or the IPv6 next header after the extension headers). Fragments of a protocol match it,
//!   including non-first fragments.
//! * `ip`, `ip6`: IPv4, IPv6 (a header that could not be dissected is not IP).
//! * `vlan`: the frame carries at least one 802.1Q / 802.1ad tag; `vlan N`: one of its (up to
//!   two) tags is `N`.
//! * `dscp N`: the IPv4 DS field / IPv6 traffic class carries code point `N`.
//! * `src and dst host A`: both addresses are `A` (and likewise for `net`, `port`, ...).
//! * `tcp[tcpflags] & M OP V`: the TCP flags byte of a TCP packet (IPv4 or IPv6) whose
//!   header was dissected, masked with `M`, compared with `V`; `tcpflags rst` is
//!   `tcp[tcpflags] & tcp-rst != 0`.
//! * `ether host M` / `ether src M` / `ether dst M`: the Ethernet addresses (Ethernet link
//!   type only; false for other link types).
//! * `arp`: the EtherType after the VLAN tags is 0x0806.
//! * `greater N` / `less N`: the packet's length on the wire is `>= N` / `<= N` (as tcpdump).
//! * Every primitive about IP is false for a packet that is not IP (ARP, LLDP, ...).
//! * `sni NAME`, `http.host NAME`, `app APP`: the packet's flow has that TLS server name,
//!   HTTP/1 Host (its port ignored) or application in the side index's names table;
//!   `dns NAME`: the packet is to or from an address a DNS answer in the query's window gave
//!   for NAME. `*.suffix` matches names under suffix; case is ignored. These are resolved
//!   from the index before a query runs ([`Filter::resolve_names`]: into flow tuples and
//!   hosts); unresolved, they match no packet and plan as `Maybe`.
//!
//! # Differences from tcpdump (pcap-filter)
//!
//! * `vlan N` is true if *any* of the packet's tags is `N`, and every other primitive looks
//!   through the tags. In tcpdump each `vlan` keyword shifts the offsets of the primitives that
//!   follow it, so `vlan 100 and vlan 200` means "outer 100, inner 200" there, and `ip` without
//!   a `vlan` does not match tagged frames; here `vlan 100 and vlan 200` means "tags 100 and
//!   200 in either order" and `ip` matches tagged frames.
//! * No host names; service names come from a built-in table (not /etc/services), the same
//!   for TCP and UDP; protocol names other than those listed above are errors.
//! * Byte-offset expressions only for the TCP flags (`tcp[13]` / `tcp[tcpflags]`, with an
//!   optional mask); `tcp[13]` also matches IPv6 packets here (libpcap's `tcp[]` only reads
//!   IPv4). No `icmptype`, `broadcast`, `multicast`, `gateway`, `ether proto`, `rarp`,
//!   `len`, ...: the error for those says to use `--bpf`, which takes any tcpdump expression.
//! * `arp` and `ether` look through VLAN tags like every other primitive.
//! * `host` and `net` do not match ARP / RARP payloads.
//! * `proto N` on IPv6 looks at the next header after the extension headers (tcpdump's
//!   `ip6 proto` only looks at the fixed header's next header).
//! * `dscp` is new (tcpdump needs `ip[1] & 0xfc == 184`), and it covers IPv6 as well.
//! * `tcp`, `udp`, ... match both IPv4 and IPv6, like tcpdump; `icmp` is protocol 1 and `icmp6`
//!   is 58 whichever the IP version.
//! * Keywords are case-insensitive.
//!
//! # Planning
//!
//! [`Filter::matches_side`] evaluates a filter against one direction of one flow, as the side
//! index records it ([`FlowSide`]): every field is exact for all packets of that direction
//! except the DSCP, which is the set of code points seen. The answer is a [`Tri`]: `Yes`
//! (every packet of the side matches), `No` (none does) or `Maybe` (some may: read them).
//! The answer is exact: it is `Yes` if the filter is true for every DSCP of the set, `No` if
//! it is false for every one, `Maybe` otherwise — stronger than plain Kleene logic, which would
//! answer `Maybe` for `dscp ef or not dscp ef`. An empty DSCP set means "no DSCP information":
//! `dscp N` is false there. Because ports are taken as exact, the side index must keep
//! packets without ports (non-first fragments) apart from the side of their flow that has
//! ports, or give up exactness for them.
//!
//! The side index keeps no MAC addresses or packet lengths: `ether`, `greater` and `less`
//! are `Maybe` on a side. Of the TCP flags it keeps the union seen on the side
//! ([`FlowSide::tcp_flags`]): a flags test is `No` if no subset of that union passes it (so
//! `tcpflags rst` skips every flow that never saw a RST), `Yes` if every subset does, and
//! `Maybe` otherwise; it is `No` on a side that is not TCP with ports. A filter naming these
//! is narrowed by what the index knows and decided exactly per packet.
//!
//! [`Filter::matches_non_ip`] evaluates a filter for non-IP packets, whose VLAN tags the
//! planner does not know: IP primitives (including `dscp` and TCP flags) are `No`, VLAN,
//! `arp`, `ether`, `greater` and `less` primitives `Maybe`, combined with Kleene logic.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use capsule_wire::{Dissected, EncapKind, IpProto};

mod build;
mod parse;
#[cfg(test)]
mod proptests;

pub use build::FilterValueError;
pub use parse::FilterError;

/// A filter expression, parsed or built. `Display` prints a canonical form that parses back
/// to an equal `Filter`; the empty filter prints as the empty string. Serde reads and writes
/// that text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Filter {
    /// `None` is the empty filter, which matches everything.
    expr: Option<Expr>,
    /// Whether the expression has a byte offset (`ip[1]`), found once at parse: only then
    /// does a packet's check read its header offsets.
    reads_bytes: bool,
}

/// What a summary of many packets may record as occurring: an IP address (source or
/// destination) or a transport port (source or destination). See [`Filter::matches_keys`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexKey {
    Addr(IpAddr),
    Port(u16),
}

/// One direction of one flow, as the side index records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowSide {
    /// 802.1Q / 802.1ad tags, outermost first.
    pub vlans: [Option<u16>; 2],
    /// 4 or 6.
    pub ip_version: u8,
    /// IP protocol (IPv6: next header after the extension headers).
    pub proto: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Source and destination ports (TCP, UDP, SCTP), `None` for other protocols and for
    /// packets without a transport header (non-first fragments).
    pub ports: Option<(u16, u16)>,
    /// Bit `n` set: DSCP `n` was seen on at least one packet of this side.
    pub dscp_mask: u64,
    /// The union of the TCP flags of the side's packets (0 for other protocols): the flags
    /// of each packet are a subset of it.
    pub tcp_flags: u8,
    /// The encapsulation every packet of the side arrived in, when that is known:
    /// `Some(None)` none arrived encapsulated, `Some(Some(e))` all arrived in `e` (its kind,
    /// outer endpoints, identifier and top label; its outer DSCP and layers are not looked
    /// at); `None` unknown (an index that keeps no encapsulations, or a side whose packets
    /// arrived in more than one), where `tunnel` and `mpls` terms are `Maybe`.
    pub encap: Option<Option<capsule_wire::Encap>>,
}

impl FlowSide {
    /// The side a single IP packet belongs to, with its DSCP as the only one seen; `None` for
    /// packets that are not IP.
    pub fn from_dissected(d: &Dissected) -> Option<FlowSide> {
        let ip = d.ip.as_ref()?;
        Some(FlowSide {
            vlans: [d.vlans[0], d.vlans[1]],
            ip_version: ip.version,
            proto: ip.proto,
            src: ip.src,
            dst: ip.dst,
            ports: d.l4.ports(),
            dscp_mask: 1u64.checked_shl(u32::from(ip.dscp)).unwrap_or(0),
            tcp_flags: match d.l4 {
                capsule_wire::L4::Tcp(t) => t.flags,
                _ => 0,
            },
            encap: Some(d.encap),
        })
    }
}

/// A three-valued truth value (Kleene logic) for planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tri {
    No,
    Maybe,
    Yes,
}

impl Tri {
    /// Kleene conjunction: `No` if either is `No`, `Yes` if both are `Yes`, else `Maybe`.
    pub fn and(self, other: Tri) -> Tri {
        match (self, other) {
            (Tri::No, _) | (_, Tri::No) => Tri::No,
            (Tri::Yes, Tri::Yes) => Tri::Yes,
            _ => Tri::Maybe,
        }
    }

    /// Kleene disjunction: `Yes` if either is `Yes`, `No` if both are `No`, else `Maybe`.
    pub fn or(self, other: Tri) -> Tri {
        match (self, other) {
            (Tri::Yes, _) | (_, Tri::Yes) => Tri::Yes,
            (Tri::No, Tri::No) => Tri::No,
            _ => Tri::Maybe,
        }
    }

    /// True unless `No`: some packet may match.
    pub fn possible(self) -> bool {
        self != Tri::No
    }
}

impl From<bool> for Tri {
    fn from(b: bool) -> Tri {
        if b {
            Tri::Yes
        } else {
            Tri::No
        }
    }
}

impl std::ops::Not for Tri {
    type Output = Tri;
    fn not(self) -> Tri {
        match self {
            Tri::No => Tri::Yes,
            Tri::Maybe => Tri::Maybe,
            Tri::Yes => Tri::No,
        }
    }
}

impl std::ops::BitAnd for Tri {
    type Output = Tri;
    fn bitand(self, rhs: Tri) -> Tri {
        self.and(rhs)
    }
}

impl std::ops::BitOr for Tri {
    type Output = Tri;
    fn bitor(self, rhs: Tri) -> Tri {
        self.or(rhs)
    }
}

/// The conventional name of a DSCP code point (`ef`, `af41`, `cs1`, ...), lowercase, as the
/// filter language accepts it; `None` for unnamed code points.
pub fn dscp_name(n: u8) -> Option<&'static str> {
    const AF: [&str; 12] = [
        "af11", "af12", "af13", "af21", "af22", "af23", "af31", "af32", "af33", "af41", "af42",
        "af43",
    ];
    const CS: [&str; 8] = ["default", "cs1", "cs2", "cs3", "cs4", "cs5", "cs6", "cs7"];
    match n {
        46 => Some("ef"),
        44 => Some("va"),
        1 => Some("le"),
        n if n < 64 && n % 8 == 0 => Some(CS[usize::from(n / 8)]),
        // AFxy = 8x + 2y, x in 1..=4, y in 1..=3.
        n if (10..=38).contains(&n) && n % 2 == 0 && (1..=3).contains(&(n % 8 / 2)) => {
            let x = usize::from(n / 8);
            let y = usize::from(n % 8 / 2);
            Some(AF[(x - 1) * 3 + (y - 1)])
        }
        _ => None,
    }
}

/// The code point of a DSCP name (case-insensitive), the inverse of [`dscp_name`] plus the
/// aliases `be`, `cs0` and `df` (the name capsule-config gives 0).
pub(crate) fn dscp_by_name(name: &str) -> Option<u8> {
    let name = name.to_ascii_lowercase();
    match name.as_str() {
        "be" | "cs0" | "df" => return Some(0),
        _ => {}
    }
    (0..64u8).find(|&n| dscp_name(n) == Some(name.as_str()))
}

/// The name the filter language prints for an IP protocol number, if it has one: the same
/// as [`IpProto::name`] (`IpProto::from(n).name()`), which callers can use instead.
pub fn proto_name(n: u8) -> Option<&'static str> {
    IpProto::from(n).name()
}

/// Which address or port of a packet a primitive looks at: the qualifier before `host`,
/// `net`, `port`, `portrange` and `ether host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `src or dst`, also written without a qualifier (`host A`): either address matches.
    SrcOrDst,
    /// `src`: the source.
    Src,
    /// `dst`: the destination.
    Dst,
    /// `src and dst`: both.
    SrcAndDst,
}

impl Direction {
    /// The qualifier as the canonical form prints it before its keyword, with a trailing
    /// space (none for [`Direction::SrcOrDst`]).
    fn prefix(self) -> &'static str {
        match self {
            Direction::SrcOrDst => "",
            Direction::Src => "src ",
            Direction::Dst => "dst ",
            Direction::SrcAndDst => "src and dst ",
        }
    }

    fn pick(self, src: bool, dst: bool) -> bool {
        match self {
            Direction::SrcOrDst => src || dst,
            Direction::Src => src,
            Direction::Dst => dst,
            Direction::SrcAndDst => src && dst,
        }
    }
}

/// A comparison of the TCP flags byte (`tcp[tcpflags] & MASK OP VALUE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    fn test<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }
}

/// TCP flag bits by the names `tcpflags NAME` and `tcp-NAME` use, in bit order.
const TCP_FLAGS: [(&str, u8); 8] = [
    ("fin", 0x01),
    ("syn", 0x02),
    ("rst", 0x04),
    ("push", 0x08),
    ("ack", 0x10),
    ("urg", 0x20),
    ("ece", 0x40),
    ("cwr", 0x80),
];

/// The bit of a TCP flag name (`syn`, `rst`, ...; `psh` is an alias of `push`).
fn tcp_flag_by_name(name: &str) -> Option<u8> {
    let name = name.to_ascii_lowercase();
    let name = if name == "psh" { "push" } else { name.as_str() };
    TCP_FLAGS.iter().find(|(n, _)| *n == name).map(|&(_, b)| b)
}

/// Well-known service names (IANA) accepted where a port number is, so that `port https`
/// works on a machine without /etc/services. Names that tcpdump resolves only for one of TCP
/// and UDP are accepted for both here (a port number is the same for both).
const SERVICES: &[(&str, u16)] = &[
    ("ftp-data", 20),
    ("ftp", 21),
    ("ssh", 22),
    ("telnet", 23),
    ("smtp", 25),
    ("domain", 53),
    ("dns", 53),
    ("bootps", 67),
    ("bootpc", 68),
    ("tftp", 69),
    ("http", 80),
    ("www", 80),
    ("kerberos", 88),
    ("pop3", 110),
    ("sunrpc", 111),
    ("ntp", 123),
    ("netbios-ns", 137),
    ("netbios-dgm", 138),
    ("netbios-ssn", 139),
    ("imap", 143),
    ("snmp", 161),
    ("snmp-trap", 162),
    ("bgp", 179),
    ("ldap", 389),
    ("https", 443),
    ("microsoft-ds", 445),
    ("syslog", 514),
    ("submission", 587),
    ("ldaps", 636),
    ("imaps", 993),
    ("pop3s", 995),
    ("openvpn", 1194),
    ("ms-sql-s", 1433),
    ("radius", 1812),
    ("nfs", 2049),
    ("mysql", 3306),
    ("ms-wbt-server", 3389),
    ("rdp", 3389),
    ("sip", 5060),
    ("sips", 5061),
    ("postgresql", 5432),
    ("amqp", 5672),
    ("redis", 6379),
    ("http-alt", 8080),
];

/// The port of a service name (case-insensitive), from [`SERVICES`].
pub(crate) fn service_port(name: &str) -> Option<u16> {
    let name = name.to_ascii_lowercase();
    SERVICES.iter().find(|(n, _)| *n == name).map(|&(_, p)| p)
}

/// An IP prefix with its host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// `None` if the prefix is longer than the address.
    fn new(addr: IpAddr, prefix: u8) -> Option<Net> {
        let addr = match addr {
            IpAddr::V4(a) => {
                if prefix > 32 {
                    return None;
                }
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                if prefix > 128 {
                    return None;
                }
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        };
        Some(Net { addr, prefix })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(a) & mask == u32::from(n)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(a) & mask == u128::from(n)
            }
            _ => false,
        }
    }
}

/// What `tunnel` selects beyond any encapsulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum TunnelSel {
    Vni(u32),
    Host(IpAddr),
}

/// A primitive test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // a name term holds its name inline: primitives stay Copy (docs/decisions.md)
enum Prim {
    Host(Direction, IpAddr),
    Net(Direction, Net),
    Port(Direction, u16),
    /// Inclusive, low <= high.
    PortRange(Direction, u16, u16),
    Proto(u8),
    Ip4,
    Ip6,
    Vlan(Option<u16>),
    /// Any encapsulation; with a VNI, VXLAN or Geneve with it; with an address, a tunnel
    /// carried by IP with it as an outer endpoint.
    Tunnel(Option<TunnelSel>),
    /// An MPLS label stack; with a label, whose top label it is.
    Mpls(Option<u32>),
    Dscp(u8),
    /// `tcp[tcpflags] & mask OP value`: a TCP packet (with its header) whose flags byte,
    /// masked, compares so.
    TcpFlags {
        mask: u8,
        op: Cmp,
        value: u8,
    },
    /// The Ethernet source or destination address (Ethernet link type only).
    Ether(Direction, [u8; 6]),
    /// EtherType 0x0806 after the VLAN tags.
    Arp,
    /// The packet's length on the wire is at least (`greater`) / at most (`less`) this.
    Greater(u32),
    Less(u32),
    /// A name term (`sni NAME`, `dns NAME`, `http.host NAME`, `app APP`): what the side
    /// index's names table says of the packet's flow. Resolved into flow tuples and
    /// addresses from the index before a query runs ([`Filter::resolve_names`]); an
    /// unresolved one matches no packet and plans as `Maybe`.
    Name(NameKind, NameText),
    /// tcpdump's `LAYER[OFFSET:SIZE] & MASK OP VALUE`: `SIZE` bytes (1, 2 or 4, big-endian)
    /// at `OFFSET` from the start of the layer's header, masked, compare so. A packet
    /// without that layer, or whose capture ends before the bytes, does not match.
    Bytes {
        layer: Layer,
        offset: u16,
        size: u8,
        mask: u32,
        op: Cmp,
        value: u32,
    },
}

/// What a name term looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameKind {
    /// `sni NAME`: the TLS ClientHello's server name.
    Sni,
    /// `dns NAME`: flows to or from an address a DNS answer gave for NAME.
    Dns,
    /// `http.host NAME`: the HTTP/1 Host header.
    HttpHost,
    /// `app APP`: the application recognised from the payload.
    App,
}

impl NameKind {
    /// The keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            NameKind::Sni => "sni",
            NameKind::Dns => "dns",
            NameKind::HttpHost => "http.host",
            NameKind::App => "app",
        }
    }
}

/// A name term's name, held inline (a primitive is `Copy`): printable ASCII, 1 to 255 bytes,
/// lowercase; `*.suffix` matches names ending in `.suffix`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NameText {
    len: u8,
    bytes: [u8; 255],
}

impl NameText {
    /// `s` as a name term's name, if it is 1 to 255 printable ASCII characters.
    pub fn new(s: &str) -> Option<NameText> {
        let b = s.as_bytes();
        if b.is_empty() || b.len() > 255 || !b.iter().all(|c| (0x21..0x7f).contains(c)) {
            return None;
        }
        let mut bytes = [0u8; 255];
        for (o, c) in bytes.iter_mut().zip(b) {
            *o = c.to_ascii_lowercase();
        }
        Some(NameText {
            len: b.len() as u8,
            bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl fmt::Debug for NameText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// A flow as the names resolution sees it: its canonical endpoints and its names.
#[derive(Debug, Clone, Copy)]
pub struct NamedFlow<'a> {
    pub proto: u8,
    pub a: IpAddr,
    pub b: IpAddr,
    pub ports: Option<(u16, u16)>,
    pub names: &'a capsule_names::FlowNames,
}

/// Where a [`Prim::Bytes`] offset counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Layer {
    /// The frame (Ethernet link type only).
    Ether,
    /// The IPv4 header.
    Ip,
    /// The IPv6 header.
    Ip6,
    /// The TCP, UDP or ICMP header (IPv4 or IPv6; not in a non-first fragment).
    Tcp,
    Udp,
    Icmp,
}

impl Layer {
    fn name(self) -> &'static str {
        match self {
            Layer::Ether => "ether",
            Layer::Ip => "ip",
            Layer::Ip6 => "ip6",
            Layer::Tcp => "tcp",
            Layer::Udp => "udp",
            Layer::Icmp => "icmp",
        }
    }

    fn by_name(s: &str) -> Option<Layer> {
        [
            Layer::Ether,
            Layer::Ip,
            Layer::Ip6,
            Layer::Tcp,
            Layer::Udp,
            Layer::Icmp,
        ]
        .into_iter()
        .find(|l| l.name() == s)
    }
}

/// The expression tree. `And` and `Or` hold at least two items, none of them of the same
/// kind (the constructors flatten), so that the canonical text form parses back to an equal
/// tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // its primitive holds a name term inline (see Prim)
enum Expr {
    Prim(Prim),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
}

impl Expr {
    fn not(e: Expr) -> Expr {
        Expr::Not(Box::new(e))
    }

    fn and(items: Vec<Expr>) -> Expr {
        Expr::join(items, true)
    }

    fn or(items: Vec<Expr>) -> Expr {
        Expr::join(items, false)
    }

    fn join(items: Vec<Expr>, and: bool) -> Expr {
        let mut flat: Vec<Expr> = Vec::with_capacity(items.len());
        for e in items {
            match e {
                // The first chain's items are kept where they are, so that a chain grown
                // one item at a time (`a or b or c ...`, parsed from the left) is not
                // copied at each step.
                Expr::And(v) if and && flat.is_empty() => flat = v,
                Expr::Or(v) if !and && flat.is_empty() => flat = v,
                Expr::And(v) if and => flat.extend(v),
                Expr::Or(v) if !and => flat.extend(v),
                e => flat.push(e),
            }
        }
        if flat.len() == 1 {
            return flat.pop().expect("one item");
        }
        if and {
            Expr::And(flat)
        } else {
            Expr::Or(flat)
        }
    }

    /// Exact evaluation, short-circuit.
    fn eval(&self, prim: &impl Fn(&Prim) -> bool) -> bool {
        match self {
            Expr::Prim(p) => prim(p),
            Expr::Not(e) => !e.eval(prim),
            Expr::And(v) => v.iter().all(|e| e.eval(prim)),
            Expr::Or(v) => v.iter().any(|e| e.eval(prim)),
        }
    }

    /// Kleene evaluation, short-circuit on `No` / `Yes`.
    fn eval_tri(&self, prim: &impl Fn(&Prim) -> Tri) -> Tri {
        match self {
            Expr::Prim(p) => prim(p),
            Expr::Not(e) => !e.eval_tri(prim),
            Expr::And(v) => {
                let mut acc = Tri::Yes;
                for e in v {
                    acc = acc & e.eval_tri(prim);
                    if acc == Tri::No {
                        break;
                    }
                }
                acc
            }
            Expr::Or(v) => {
                let mut acc = Tri::No;
                for e in v {
                    acc = acc | e.eval_tri(prim);
                    if acc == Tri::Yes {
                        break;
                    }
                }
                acc
            }
        }
    }

    /// The set of DSCP code points the expression names, as a mask.
    fn dscp_mask(&self) -> u64 {
        match self {
            Expr::Prim(Prim::Dscp(n)) => 1u64.checked_shl(u32::from(*n)).unwrap_or(0),
            Expr::Prim(_) => 0,
            Expr::Not(e) => e.dscp_mask(),
            Expr::And(v) | Expr::Or(v) => v.iter().fold(0, |m, e| m | e.dscp_mask()),
        }
    }

    /// True if the expression names a field the side index does not keep (TCP flags, MAC
    /// addresses, lengths), so that planning may answer `Maybe` for a single packet's side.
    fn beyond_index(&self) -> bool {
        match self {
            Expr::Prim(p) => matches!(
                p,
                Prim::TcpFlags { .. }
                    | Prim::Ether(..)
                    | Prim::Greater(_)
                    | Prim::Less(_)
                    | Prim::Bytes { .. }
                    | Prim::Tunnel(_)
                    | Prim::Mpls(_)
            ),
            Expr::Not(e) => e.beyond_index(),
            Expr::And(v) | Expr::Or(v) => v.iter().any(Expr::beyond_index),
        }
    }

    /// True if the expression names a field the side index does not keep, encapsulation
    /// terms aside (which it keeps per flow direction since index version 7).
    fn beyond_index_but_encap(&self) -> bool {
        match self {
            Expr::Prim(Prim::Tunnel(_) | Prim::Mpls(_)) => false,
            Expr::Prim(_) => self.beyond_index(),
            Expr::Not(e) => e.beyond_index_but_encap(),
            Expr::And(v) | Expr::Or(v) => v.iter().any(Expr::beyond_index_but_encap),
        }
    }

    /// True if the expression has an encapsulation term (`tunnel`, `mpls`).
    fn has_encap_terms(&self) -> bool {
        match self {
            Expr::Prim(p) => matches!(p, Prim::Tunnel(_) | Prim::Mpls(_)),
            Expr::Not(e) => e.has_encap_terms(),
            Expr::And(v) | Expr::Or(v) => v.iter().any(Expr::has_encap_terms),
        }
    }

    /// True if the expression has a byte offset (`ip[1] & 0xfc == 0xb8`).
    fn reads_bytes(&self) -> bool {
        match self {
            Expr::Prim(p) => matches!(p, Prim::Bytes { .. }),
            Expr::Not(e) => e.reads_bytes(),
            Expr::And(v) | Expr::Or(v) => v.iter().any(Expr::reads_bytes),
        }
    }

    /// Binding strength, for printing with the fewest parentheses.
    fn level(&self) -> u8 {
        match self {
            Expr::Or(_) => 1,
            Expr::And(_) => 2,
            Expr::Not(_) => 3,
            Expr::Prim(_) => 4,
        }
    }

    /// Prints `self`, in parentheses if it binds less tightly than `min`.
    fn fmt_at(&self, f: &mut fmt::Formatter<'_>, min: u8) -> fmt::Result {
        if self.level() < min {
            write!(f, "({self})")
        } else {
            write!(f, "{self}")
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Prim(p) => write!(f, "{p}"),
            Expr::Not(e) => {
                f.write_str("not ")?;
                e.fmt_at(f, 3)
            }
            Expr::And(v) | Expr::Or(v) => {
                // `and` and `or` bind equally (tcpdump's rule), so an operand that is itself
                // an `and` or an `or` is printed in parentheses: the text parses back to the
                // same tree.
                let op = if matches!(self, Expr::And(_)) {
                    " and "
                } else {
                    " or "
                };
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(op)?;
                    }
                    e.fmt_at(f, 3)?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Prim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Prim::Host(d, a) => write!(f, "{}host {a}", d.prefix()),
            Prim::Net(d, n) => write!(f, "{}net {}/{}", d.prefix(), n.addr, n.prefix),
            Prim::Port(d, p) => write!(f, "{}port {p}", d.prefix()),
            Prim::PortRange(d, lo, hi) => write!(f, "{}portrange {lo}-{hi}", d.prefix()),
            // The protocols that are words of their own (`tcp`), then `proto NAME`, else
            // `proto N`.
            Prim::Proto(n) => match IpProto::from(n) {
                p @ (IpProto::Icmp
                | IpProto::Tcp
                | IpProto::Udp
                | IpProto::Icmpv6
                | IpProto::Sctp) => write!(f, "{p}"),
                p => write!(f, "proto {p}"),
            },
            Prim::Ip4 => f.write_str("ip"),
            Prim::Ip6 => f.write_str("ip6"),
            Prim::Vlan(None) => f.write_str("vlan"),
            Prim::Vlan(Some(n)) => write!(f, "vlan {n}"),
            Prim::Tunnel(None) => f.write_str("tunnel"),
            Prim::Tunnel(Some(TunnelSel::Vni(n))) => write!(f, "tunnel vni {n}"),
            Prim::Tunnel(Some(TunnelSel::Host(a))) => write!(f, "tunnel host {a}"),
            Prim::Mpls(None) => f.write_str("mpls"),
            Prim::Mpls(Some(n)) => write!(f, "mpls {n}"),
            Prim::Dscp(n) => match dscp_name(n) {
                Some(name) => write!(f, "dscp {name}"),
                None => write!(f, "dscp {n}"),
            },
            Prim::TcpFlags { mask, op, value } => {
                let one = TCP_FLAGS.iter().find(|&&(_, b)| b == mask && value == 0);
                match (one, op) {
                    (Some((name, _)), Cmp::Ne) => write!(f, "tcpflags {name}"),
                    _ if mask == 0xff => write!(f, "tcp[tcpflags] {} {value}", op.symbol()),
                    _ => write!(f, "tcp[tcpflags] & {mask} {} {value}", op.symbol()),
                }
            }
            Prim::Ether(d, [a, b, c, x, y, z]) => write!(
                f,
                "ether {}host {a:02x}:{b:02x}:{c:02x}:{x:02x}:{y:02x}:{z:02x}",
                d.prefix()
            ),
            Prim::Arp => f.write_str("arp"),
            Prim::Greater(n) => write!(f, "greater {n}"),
            Prim::Name(k, n) => write!(f, "{} {}", k.keyword(), n.as_str()),
            Prim::Less(n) => write!(f, "less {n}"),
            Prim::Bytes {
                layer,
                offset,
                size,
                mask,
                op,
                value,
            } => {
                write!(f, "{}[{offset}", layer.name())?;
                if size != 1 {
                    write!(f, ":{size}")?;
                }
                f.write_str("]")?;
                if mask != bytes_all(size) {
                    write!(f, " & {mask:#x}")?;
                }
                write!(f, " {} {value}", op.symbol())
            }
        }
    }
}

/// The fields the primitives look at, from a packet or a flow side.
struct View {
    vlans: [Option<u16>; capsule_wire::MAX_VLANS],
    /// A flow side's VLAN tags are its first two: a tag beyond them is unknown.
    vlans_partial: bool,
    /// The packet's encapsulation; for a flow side, [`FlowSide::encap`] (`None`: unknown).
    encap: Option<Option<capsule_wire::Encap>>,
    ip: Option<IpView>,
    /// The frame's own fields; `None` for a flow side, where they are unknown.
    frame: Option<FrameView>,
}

/// What a packet has and a flow side does not.
struct FrameView {
    ethertype: u16,
    /// Source and destination MAC (Ethernet link type only).
    macs: Option<([u8; 6], [u8; 6])>,
    /// The packet's length on the wire.
    wire_len: Option<u32>,
    /// The TCP flags byte, for a TCP packet whose header was read.
    tcp_flags: Option<u8>,
    /// The frame's bytes and where its network and transport headers start, for byte
    /// offsets (`ip[1]`); read only when the filter has one.
    bytes: Option<FrameBytes>,
}

/// What [`Prim::Bytes`] reads: the captured frame, its link type, and the header offsets.
struct FrameBytes {
    data: Vec<u8>,
    linktype: u16,
    net_at: Option<usize>,
    transport_at: Option<usize>,
}

/// The mask that keeps all of `size` bytes.
fn bytes_all(size: u8) -> u32 {
    match size {
        1 => 0xff,
        2 => 0xffff,
        _ => u32::MAX,
    }
}

struct IpView {
    version: u8,
    proto: u8,
    src: IpAddr,
    dst: IpAddr,
    ports: Option<(u16, u16)>,
    /// `None`: unknown (a flow side with an empty DSCP set); `dscp N` is false.
    dscp: Option<u8>,
    /// A flow side's union of TCP flags (unused for a packet, whose flags are exact).
    flags_union: u8,
}

impl View {
    /// Exact for a packet; `Maybe` on a flow side only for what the side index does not keep
    /// (TCP flags, MAC addresses, lengths).
    fn prim(&self, p: &Prim) -> Tri {
        let frame = self.frame.as_ref();
        match (*p, &self.ip) {
            (Prim::Vlan(None), _) => self.vlans.iter().any(Option::is_some).into(),
            (Prim::Vlan(Some(n)), _) => {
                if self.vlans.contains(&Some(n)) {
                    Tri::Yes
                } else if self.vlans_partial && self.vlans[1].is_some() {
                    Tri::Maybe
                } else {
                    Tri::No
                }
            }
            (Prim::Tunnel(sel), _) => self.encap.map_or(Tri::Maybe, |e| {
                Tri::from(e.is_some_and(|e| match sel {
                    None => true,
                    Some(TunnelSel::Vni(n)) => {
                        matches!(e.kind, EncapKind::Vxlan | EncapKind::Geneve) && e.id == Some(n)
                    }
                    Some(TunnelSel::Host(a)) => e.outer.is_some_and(|(s, d)| s == a || d == a),
                }))
            }),
            (Prim::Mpls(label), _) => self.encap.map_or(Tri::Maybe, |e| {
                Tri::from(
                    e.and_then(|e| e.mpls)
                        .is_some_and(|l| label.is_none_or(|n| n == l)),
                )
            }),
            (Prim::Arp, _) => frame.map_or(Tri::from(self.ip.is_none()), |f| {
                Tri::from(f.ethertype == 0x0806)
            }),
            (Prim::Ether(d, mac), _) => frame.map_or(Tri::Maybe, |f| {
                Tri::from(f.macs.is_some_and(|(s, t)| d.pick(s == mac, t == mac)))
            }),
            // Not resolved from the index: no packet is known to match.
            (Prim::Name(..), _) => match frame {
                Some(_) => Tri::No,
                None => Tri::Maybe,
            },
            (Prim::Greater(n), _) => frame.map_or(Tri::Maybe, |f| {
                Tri::from(f.wire_len.is_some_and(|l| l >= n))
            }),
            (Prim::Less(n), _) => frame.map_or(Tri::Maybe, |f| {
                Tri::from(f.wire_len.is_some_and(|l| l <= n))
            }),
            (
                Prim::Bytes {
                    layer,
                    offset,
                    size,
                    mask,
                    op,
                    value,
                },
                ip,
            ) => match frame {
                None => Tri::Maybe,
                Some(f) => Tri::from(f.bytes.as_ref().is_some_and(|b| {
                    let base = match (layer, ip) {
                        (Layer::Ether, _) => (b.linktype == 1).then_some(0),
                        (Layer::Ip, Some(ip)) if ip.version == 4 => b.net_at,
                        (Layer::Ip6, Some(ip)) if ip.version == 6 => b.net_at,
                        (Layer::Tcp, Some(ip)) if ip.proto == 6 => b.transport_at,
                        (Layer::Udp, Some(ip)) if ip.proto == 17 => b.transport_at,
                        (Layer::Icmp, Some(ip)) if ip.proto == 1 => b.transport_at,
                        _ => None,
                    };
                    let start = base.map(|a| a + usize::from(offset));
                    let field = start.and_then(|s| b.data.get(s..s + usize::from(size)));
                    field.is_some_and(|bytes| {
                        let v = bytes.iter().fold(0u32, |v, &x| (v << 8) | u32::from(x));
                        op.test(v & mask, value)
                    })
                })),
            },
            (_, None) => Tri::No,
            (Prim::TcpFlags { mask, op, value }, Some(ip)) => match frame {
                Some(f) => Tri::from(
                    ip.proto == 6 && f.tcp_flags.is_some_and(|b| op.test(b & mask, value)),
                ),
                // A side: what each packet's flags may be, from the union seen.
                None if ip.proto == 6 && ip.ports.is_some() => {
                    flags_possible(ip.flags_union & mask, op, value)
                }
                None => Tri::No,
            },
            (Prim::Host(d, a), Some(ip)) => d.pick(ip.src == a, ip.dst == a).into(),
            (Prim::Net(d, n), Some(ip)) => d.pick(n.contains(ip.src), n.contains(ip.dst)).into(),
            (Prim::Port(d, port), Some(ip)) => ip
                .ports
                .is_some_and(|(s, t)| d.pick(s == port, t == port))
                .into(),
            (Prim::PortRange(d, lo, hi), Some(ip)) => ip
                .ports
                .is_some_and(|(s, t)| d.pick((lo..=hi).contains(&s), (lo..=hi).contains(&t)))
                .into(),
            (Prim::Proto(n), Some(ip)) => (ip.proto == n).into(),
            (Prim::Ip4, Some(ip)) => (ip.version == 4).into(),
            (Prim::Ip6, Some(ip)) => (ip.version == 6).into(),
            (Prim::Dscp(n), Some(ip)) => (ip.dscp == Some(n)).into(),
        }
    }
}

/// Whether `flags & mask OP value` holds for packets whose masked flags are subsets of
/// `union` (already masked): `Yes` if it holds for every subset, `No` if for none.
fn flags_possible(union: u8, op: Cmp, value: u8) -> Tri {
    let (mut yes, mut no) = (false, false);
    // Every subset of `union`, from `union` down to 0.
    let mut sub = union;
    loop {
        if op.test(sub, value) {
            yes = true;
        } else {
            no = true;
        }
        if yes && no {
            return Tri::Maybe;
        }
        if sub == 0 {
            break;
        }
        sub = (sub - 1) & union;
    }
    Tri::from(yes)
}

impl Filter {
    /// Parses a filter expression; the empty (or all-blank) string is [`Filter::all`].
    pub fn parse(src: &str) -> Result<Filter, FilterError> {
        let expr = parse::parse(src)?;
        Ok(Filter {
            reads_bytes: expr.as_ref().is_some_and(Expr::reads_bytes),
            expr,
        })
    }

    /// True if the filter names what the side index does not keep (TCP flags, MAC
    /// addresses, packet lengths): planning then narrows by the rest of the filter only, and
    /// only the per-packet check decides.
    pub fn beyond_index(&self) -> bool {
        self.expr.as_ref().is_some_and(Expr::beyond_index)
    }

    /// [`Filter::beyond_index`] but for its encapsulation terms (`tunnel`, `mpls`), which a
    /// flow side decides when it knows its encapsulation ([`FlowSide::encap`]).
    pub fn beyond_index_but_encap(&self) -> bool {
        self.expr.as_ref().is_some_and(Expr::beyond_index_but_encap)
    }

    /// True if the filter has an encapsulation term (`tunnel`, `mpls`).
    pub fn has_encap_terms(&self) -> bool {
        self.expr.as_ref().is_some_and(Expr::has_encap_terms)
    }

    /// The filter that matches every packet.
    pub fn all() -> Filter {
        Filter {
            expr: None,
            reads_bytes: false,
        }
    }

    /// True for the empty filter (not for filters that happen to match everything, such as
    /// `vlan or not vlan`).
    pub fn is_all(&self) -> bool {
        self.expr.is_none()
    }

    /// Exact evaluation for one packet known only by its dissection. The primitives about
    /// the frame itself (`ether host`, `greater`, `less`) need the frame: they are false here
    /// (use [`Filter::matches_packet`]).
    pub fn matches(&self, d: &Dissected) -> bool {
        self.matches_view(d, None, None, None)
    }

    /// Exact evaluation for one captured packet: its dissection `d`, its bytes `data` as
    /// captured with link type `linktype`, and its length on the wire `orig_len`.
    pub fn matches_packet(&self, d: &Dissected, linktype: u16, data: &[u8], orig_len: u32) -> bool {
        let macs = (linktype == 1 && data.len() >= 12).then(|| {
            let mut dst = [0u8; 6];
            let mut src = [0u8; 6];
            dst.copy_from_slice(&data[..6]);
            src.copy_from_slice(&data[6..12]);
            (src, dst)
        });
        // Byte offsets (`ip[1]`) need the frame and its header offsets: read only then.
        let bytes = self.reads_bytes.then(|| {
            let (net_at, transport_at) = capsule_wire::header_offsets(linktype, data);
            FrameBytes {
                data: data.to_vec(),
                linktype,
                net_at,
                transport_at,
            }
        });
        self.matches_view(d, macs, Some(orig_len), bytes)
    }

    fn matches_view(
        &self,
        d: &Dissected,
        macs: Option<([u8; 6], [u8; 6])>,
        wire_len: Option<u32>,
        bytes: Option<FrameBytes>,
    ) -> bool {
        let Some(expr) = &self.expr else {
            return true;
        };
        let view = View {
            vlans: d.vlans,
            vlans_partial: false,
            encap: Some(d.encap),
            ip: d.ip.as_ref().map(|ip| IpView {
                version: ip.version,
                proto: ip.proto,
                src: ip.src,
                dst: ip.dst,
                ports: d.l4.ports(),
                dscp: Some(ip.dscp),
                flags_union: 0,
            }),
            frame: Some(FrameView {
                ethertype: d.ethertype,
                macs,
                wire_len,
                tcp_flags: match d.l4 {
                    capsule_wire::L4::Tcp(t) => Some(t.flags),
                    _ => None,
                },
                bytes,
            }),
        };
        expr.eval(&|p| view.prim(p) == Tri::Yes)
    }

    /// Planning for one direction of one flow: `Yes` if every packet of the side matches, `No`
    /// if none does, `Maybe` if that depends on the DSCP of each packet (see the module docs).
    pub fn matches_side(&self, s: &FlowSide) -> Tri {
        let Some(expr) = &self.expr else {
            return Tri::Yes;
        };
        let mut view = View {
            vlans: [s.vlans[0], s.vlans[1], None],
            vlans_partial: true,
            encap: s.encap,
            ip: Some(IpView {
                version: s.ip_version,
                proto: s.proto,
                src: s.src,
                dst: s.dst,
                ports: s.ports,
                dscp: None,
                flags_union: s.tcp_flags,
            }),
            frame: None,
        };
        let set_dscp = |view: &mut View, dscp: Option<u8>| {
            if let Some(ip) = &mut view.ip {
                ip.dscp = dscp;
            }
        };
        if s.dscp_mask == 0 {
            return expr.eval_tri(&|p| view.prim(p));
        }
        // Code points the filter does not name all give the same answer: try each named one
        // in the set, and one unnamed one if the set has any.
        let named = expr.dscp_mask();
        let mut tries = s.dscp_mask & named;
        let unnamed = s.dscp_mask & !named;
        if unnamed != 0 {
            tries |= 1 << unnamed.trailing_zeros();
        }
        let (mut seen_yes, mut seen_no) = (false, false);
        while tries != 0 {
            let bit = tries.trailing_zeros();
            tries &= tries - 1;
            set_dscp(&mut view, Some(bit as u8));
            match expr.eval_tri(&|p| view.prim(p)) {
                Tri::Yes => seen_yes = true,
                Tri::No => seen_no = true,
                Tri::Maybe => return Tri::Maybe,
            }
            if seen_yes && seen_no {
                return Tri::Maybe;
            }
        }
        Tri::from(seen_yes)
    }

    /// Planning from a summary that knows only which addresses and ports occur in a set of
    /// packets (the store's catalog, capsule-index `catalog.rs`): `has` says whether a key
    /// may occur. `host A` / `port P` are `No` when their key cannot occur, every other
    /// primitive `Maybe`, in Kleene logic: `No` means no packet of the set can match.
    pub fn matches_keys(&self, has: &dyn Fn(IndexKey) -> bool) -> Tri {
        let Some(expr) = &self.expr else {
            return Tri::Yes;
        };
        expr.eval_tri(&|p| match *p {
            Prim::Host(_, a) if !has(IndexKey::Addr(a)) => Tri::No,
            Prim::Port(_, n) if !has(IndexKey::Port(n)) => Tri::No,
            _ => Tri::Maybe,
        })
    }

    /// Planning for packets that are not IP (ARP, LLDP, ...), whose VLAN tags are unknown:
    /// IP primitives are `No`, VLAN primitives `Maybe`, in Kleene logic.
    pub fn matches_non_ip(&self) -> Tri {
        let Some(expr) = &self.expr else {
            return Tri::Yes;
        };
        expr.eval_tri(&|p| match p {
            Prim::Vlan(_)
            | Prim::Tunnel(_)
            | Prim::Mpls(_)
            | Prim::Arp
            | Prim::Ether(..)
            | Prim::Greater(_)
            | Prim::Less(_)
            | Prim::Bytes {
                layer: Layer::Ether,
                ..
            } => Tri::Maybe,
            _ => Tri::No,
        })
    }
    /// Whether the filter has a name term (`sni`, `dns`, `http.host`, `app`), which must be
    /// resolved from the index ([`Filter::resolve_names`]) before it selects packets.
    pub fn has_names(&self) -> bool {
        self.expr.as_ref().is_some_and(Expr::has_names)
    }

    /// The filter with each name term replaced by what the index says of it, over `flows`
    /// (every flow of the query's window that has names): `sni`, `http.host` and `app` by
    /// the flows whose names match, each as its two directions' exact 5-tuples; `dns NAME` by
    /// `host A` for every address A a DNS answer in the window gave for a matching name. A
    /// term nothing matches becomes `ip and ip6` (no packet). Names match ignoring case;
    /// `*.suffix` matches names ending in `.suffix`.
    pub fn resolve_names(&self, flows: &[NamedFlow<'_>]) -> Filter {
        let Some(expr) = &self.expr else {
            return self.clone();
        };
        Filter {
            expr: Some(expr.resolve(flows)),
            reads_bytes: self.reads_bytes,
        }
    }
}

/// Whether flow names `n` satisfy name term (`kind`, `pattern`); `dns` terms are matched
/// by address, not here.
fn names_match(kind: NameKind, pattern: &str, n: &capsule_names::FlowNames) -> bool {
    use capsule_names::name_matches;
    match kind {
        NameKind::Sni => n.sni.as_deref().is_some_and(|s| name_matches(pattern, s)),
        NameKind::HttpHost => n.http_host.as_deref().is_some_and(|h| {
            // The Host header may carry a port: the name is what comes before it.
            let host = match h.rsplit_once(':') {
                Some((name, port))
                    if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    name
                }
                _ => h,
            };
            name_matches(pattern, host) || name_matches(pattern, h)
        }),
        NameKind::App => capsule_names::App::parse(pattern) == Some(n.app),
        NameKind::Dns => false,
    }
}

impl Expr {
    fn has_names(&self) -> bool {
        match self {
            Expr::Prim(p) => matches!(p, Prim::Name(..)),
            Expr::Not(e) => e.has_names(),
            Expr::And(v) | Expr::Or(v) => v.iter().any(Expr::has_names),
        }
    }

    fn resolve(&self, flows: &[NamedFlow<'_>]) -> Expr {
        match self {
            Expr::Prim(Prim::Name(kind, text)) => {
                let pattern = text.as_str();
                let p = |x| Expr::Prim(x);
                let mut alts: Vec<Expr> = Vec::new();
                if *kind == NameKind::Dns {
                    let mut addrs: Vec<IpAddr> = flows
                        .iter()
                        .flat_map(|f| f.names.dns_answers.iter())
                        .filter(|(q, _)| capsule_names::name_matches(pattern, q))
                        .map(|(_, a)| *a)
                        .collect();
                    addrs.sort();
                    addrs.dedup();
                    alts.extend(
                        addrs
                            .into_iter()
                            .map(|a| p(Prim::Host(Direction::SrcOrDst, a))),
                    );
                } else {
                    for f in flows
                        .iter()
                        .filter(|f| names_match(*kind, pattern, f.names))
                    {
                        for (src, dst, ports) in [
                            (f.a, f.b, f.ports),
                            (f.b, f.a, f.ports.map(|(x, y)| (y, x))),
                        ] {
                            let mut all = vec![
                                p(Prim::Proto(f.proto)),
                                p(Prim::Host(Direction::Src, src)),
                                p(Prim::Host(Direction::Dst, dst)),
                            ];
                            if let Some((sp, dp)) = ports {
                                all.push(p(Prim::Port(Direction::Src, sp)));
                                all.push(p(Prim::Port(Direction::Dst, dp)));
                            }
                            alts.push(Expr::and(all));
                        }
                    }
                }
                if alts.is_empty() {
                    return Expr::and(vec![p(Prim::Ip4), p(Prim::Ip6)]);
                }
                if alts.len() == 1 {
                    return alts.pop().expect("one");
                }
                Expr::or(alts)
            }
            Expr::Prim(x) => Expr::Prim(*x),
            Expr::Not(e) => Expr::not(e.resolve(flows)),
            Expr::And(v) => Expr::and(v.iter().map(|e| e.resolve(flows)).collect()),
            Expr::Or(v) => Expr::or(v.iter().map(|e| e.resolve(flows)).collect()),
        }
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.expr {
            Some(e) => write!(f, "{e}"),
            None => Ok(()),
        }
    }
}

impl FromStr for Filter {
    type Err = FilterError;
    fn from_str(s: &str) -> Result<Filter, FilterError> {
        Filter::parse(s)
    }
}

/// A filter is serialised as its canonical text (`"tcp and port 443"`, `""` for
/// [`Filter::all`]), so that JSON carries what a person would type.
impl serde::Serialize for Filter {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Any text [`Filter::parse`] accepts; an error is the parser's, caret line included.
impl<'de> serde::Deserialize<'de> for Filter {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Filter, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Filter;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a filter expression as text")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Filter, E> {
                Filter::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_wire::{Fragment, IpInfo, TcpInfo, L4};

    #[test]
    fn a_huge_filter_gives_a_short_error_naming_the_position() {
        // 100 KB of `tcp or ` with a bad token in the middle.
        let half = "tcp or ".repeat(7_200);
        let text = format!("{half}port x or {half}tcp");
        let err = Filter::parse(&text).unwrap_err();
        let msg = err.to_string();
        assert!(text.len() > 100_000);
        assert!(msg.len() < 400, "{} bytes: {msg}", msg.len());
        let pos = half.len() + 5;
        assert!(
            msg.contains(&format!("at byte {pos} of {}", text.len())),
            "{msg}"
        );
        let (line, carets) = msg.split_once('\n').unwrap();
        let col = carets.find('^').unwrap();
        assert_eq!(&line[col..col + 1], "x", "{msg}");
        assert!(line.starts_with("...") && line.ends_with("..."), "{msg}");
    }

    fn ip4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pkt(src: &str, dst: &str, proto: u8, l4: L4) -> Dissected {
        let (src, dst) = (ip4(src), ip4(dst));
        Dissected {
            vlans: [None, None, None],
            ethertype: if src.is_ipv4() { 0x0800 } else { 0x86dd },
            ip: Some(IpInfo {
                version: if src.is_ipv4() { 4 } else { 6 },
                src,
                dst,
                proto,
                dscp: 0,
                ecn: 0,
                ttl: 64,
                fragment: None,
                payload_len: 100,
            }),
            l4,
            encap: None,
            malformed: None,
        }
    }

    fn tcp(src: &str, sport: u16, dst: &str, dport: u16) -> Dissected {
        pkt(
            src,
            dst,
            6,
            L4::Tcp(TcpInfo {
                src_port: sport,
                dst_port: dport,
                seq: 1,
                ack: 0,
                flags: 0x02,
                window: 1000,
                payload_len: 0,
            }),
        )
    }

    fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> Dissected {
        pkt(
            src,
            dst,
            17,
            L4::Udp {
                src_port: sport,
                dst_port: dport,
            },
        )
    }

    fn with_dscp(mut d: Dissected, dscp: u8) -> Dissected {
        d.ip.as_mut().unwrap().dscp = dscp;
        d
    }

    fn with_vlans(mut d: Dissected, vlans: [Option<u16>; 2]) -> Dissected {
        d.vlans = [vlans[0], vlans[1], None];
        d
    }

    fn arp(vlans: [Option<u16>; 2]) -> Dissected {
        Dissected {
            vlans: [vlans[0], vlans[1], None],
            ethertype: 0x0806,
            ..Dissected::default()
        }
    }

    #[test]
    fn tunnel_and_mpls_terms_match_the_outer_layers() {
        use capsule_wire::Encap;
        let inner = tcp("10.1.0.5", 443, "10.2.0.9", 5123);
        let mut vx = inner.clone();
        vx.encap = Some(Encap {
            kind: EncapKind::Vxlan,
            outer: Some((ip4("192.0.2.1"), ip4("192.0.2.2"))),
            outer_dscp: Some(10),
            id: Some(42),
            mpls: None,
            layers: 1,
        });
        let mut lsp = inner.clone();
        lsp.encap = Some(Encap {
            kind: EncapKind::Mpls,
            outer: None,
            outer_dscp: None,
            id: None,
            mpls: Some(16),
            layers: 1,
        });
        assert!(!m("tunnel", &inner) && m("tunnel", &vx) && m("tunnel", &lsp));
        assert!(m("tunnel vni 42", &vx) && !m("tunnel vni 43", &vx) && !m("tunnel vni 42", &lsp));
        assert!(m("tunnel host 192.0.2.2", &vx) && !m("tunnel host 10.1.0.5", &vx));
        assert!(m("mpls", &lsp) && m("mpls 16", &lsp) && !m("mpls 17", &lsp) && !m("mpls", &vx));
        // Every other term: the innermost packet.
        assert!(m("host 10.1.0.5 and tcp port 443", &vx) && !m("host 192.0.2.1", &vx));
        for f in [
            "tunnel",
            "tunnel vni 42",
            "tunnel host 192.0.2.1",
            "mpls",
            "mpls 16",
        ] {
            let parsed = Filter::parse(f).unwrap();
            assert_eq!(parsed.to_string(), f);
            // A side that knows its encapsulation is exact; one that does not (an index
            // without them, a direction whose packets arrived in several) is "maybe".
            let mut side = FlowSide::from_dissected(&vx).unwrap();
            assert_eq!(parsed.matches_side(&side), Tri::from(m(f, &vx)), "{f}");
            side.encap = None;
            assert_eq!(parsed.matches_side(&side), Tri::Maybe, "{f}");
            assert!(parsed.beyond_index() && !parsed.beyond_index_but_encap());
            assert!(parsed.has_encap_terms());
        }
        assert!(Filter::parse("tunnel vni x").is_err());
        assert!(Filter::parse("mpls 1048576").is_err());
    }

    #[track_caller]
    fn m(f: &str, d: &Dissected) -> bool {
        let filter = Filter::parse(f).unwrap_or_else(|e| panic!("{e}"));
        let r = filter.matches(d);
        // Every IP packet's own side agrees exactly, but for what the side index does not
        // keep (TCP flags, MACs, lengths), where it may only be unsure.
        if let Some(side) = FlowSide::from_dissected(d) {
            let plan = filter.matches_side(&side);
            // A side keeps two VLAN tags: with both there, another id may be a third tag.
            let third_tag = side.vlans[1].is_some() && f.contains("vlan");
            if plan != Tri::Maybe
                || !(filter
                    .expr
                    .as_ref()
                    .is_some_and(Expr::beyond_index_but_encap)
                    || third_tag)
            {
                assert_eq!(plan, Tri::from(r), "side of {f:?}");
            }
        } else if r {
            assert_ne!(filter.matches_non_ip(), Tri::No, "non-ip {f:?}");
        } else {
            assert_ne!(filter.matches_non_ip(), Tri::Yes, "non-ip {f:?}");
        }
        r
    }

    #[test]
    fn filter_empty_matches_everything() {
        let f = Filter::parse("").unwrap();
        assert!(f.is_all());
        assert_eq!(f, Filter::all());
        assert_eq!(f, Filter::default());
        assert_eq!(Filter::parse(" \t\n ").unwrap(), Filter::all());
        assert_eq!(f.to_string(), "");
        assert!(f.matches(&arp([None, None])));
        assert!(f.matches(&tcp("10.0.0.1", 1, "10.0.0.2", 2)));
        assert_eq!(f.matches_non_ip(), Tri::Yes);
        let side = FlowSide::from_dissected(&tcp("10.0.0.1", 1, "10.0.0.2", 2)).unwrap();
        assert_eq!(f.matches_side(&side), Tri::Yes);
        assert!(!Filter::parse("tcp").unwrap().is_all());
        assert!(!Filter::parse("vlan or not vlan").unwrap().is_all());
    }

    #[test]
    fn filter_match_tcpdump_forms() {
        let mut d = tcp("10.0.0.1", 40000, "10.0.0.1", 443);
        if let L4::Tcp(t) = &mut d.l4 {
            t.flags = 0x12; // SYN ACK
        }
        assert!(m("src and dst host 10.0.0.1", &d));
        assert!(!m("src and dst port 443", &d));
        assert!(m("src or dst port https", &d));
        assert!(m("tcpflags syn and tcpflags ack", &d));
        assert!(!m("tcpflags rst", &d));
        assert!(m(
            "tcp[tcpflags] & (tcp-syn|tcp-ack) == (tcp-syn|tcp-ack)",
            &d
        ));
        assert!(!m("tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn", &d));
        assert!(m("tcp[13] > 0x11 and tcp[13] <= 18 and tcp[13] = 18", &d));
        assert!(!m("tcp[13] < 18 or tcp[13] >= 19", &d));
        // Flags only of TCP packets with a header.
        assert!(!m("tcp[13] & 0 == 0", &udp("10.0.0.1", 1, "10.0.0.2", 2)));
        assert!(!m("tcp[13] & 0 == 0", &arp([None, None])));
        assert!(m("arp", &arp([Some(5), None])));
        assert!(!m("arp", &d));
        assert!(m("net 10 and net 10.0 and net 10.0.0", &d));
        assert!(m("port 22 or 443", &d));

        // The frame's own fields: Ethernet addresses and the length on the wire.
        let mut frame = vec![0u8; 60];
        frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xbb]);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xaa]);
        let f = |s: &str, linktype: u16, orig_len: u32| {
            Filter::parse(s)
                .unwrap()
                .matches_packet(&d, linktype, &frame, orig_len)
        };
        assert!(f("ether src 02:00:00:00:00:aa", 1, 60));
        assert!(f("ether dst host 2:0:0:0:0:bb", 1, 60));
        assert!(f(
            "ether host 02:00:00:00:00:bb and not ether src 02:00:00:00:00:bb",
            1,
            60
        ));
        assert!(!f("ether src and dst host 02:00:00:00:00:aa", 1, 60));
        // Not an Ethernet frame: no Ethernet addresses.
        assert!(!f("ether host 02:00:00:00:00:aa", 101, 60));
        assert!(f("greater 1500 and less 1500", 1, 1500));
        assert!(!f("greater 1501", 1, 1500));
        assert!(!f("less 1499", 1, 1500));
        // Without the frame, those are false.
        assert!(!Filter::parse("greater 0").unwrap().matches(&d));

        // Planning: the side index keeps no MACs or lengths, and of the TCP flags only
        // their union (here SYN ACK).
        let side = FlowSide::from_dissected(&d).unwrap();
        let plan = |s: &str| Filter::parse(s).unwrap().matches_side(&side);
        assert_eq!(plan("tcpflags rst"), Tri::No);
        assert_eq!(plan("tcpflags syn"), Tri::Maybe);
        assert_eq!(plan("tcp[tcpflags] & tcp-rst == 0"), Tri::Yes);
        assert_eq!(plan("tcp[tcpflags] & (tcp-syn|tcp-ack) != 0x20"), Tri::Yes);
        assert_eq!(plan("tcp[13] > 18"), Tri::No);
        assert_eq!(plan("tcpflags rst and port 80"), Tri::No);
        assert_eq!(plan("tcpflags rst or port 443"), Tri::Yes);
        assert_eq!(plan("ether host 02:00:00:00:00:aa"), Tri::Maybe);
        assert_eq!(plan("greater 100 or less 50"), Tri::Maybe);
        assert_eq!(plan("arp"), Tri::No);
        assert_eq!(plan("not arp"), Tri::Yes);
        let udp_side = FlowSide::from_dissected(&udp("10.0.0.1", 1, "10.0.0.2", 2)).unwrap();
        assert_eq!(
            Filter::parse("tcp[13] & 0 == 0")
                .unwrap()
                .matches_side(&udp_side),
            Tri::No
        );
        let mut many = side;
        many.dscp_mask = 0b11;
        assert_eq!(
            Filter::parse("dscp 0 and tcpflags ack")
                .unwrap()
                .matches_side(&many),
            Tri::Maybe
        );
        let non_ip = |s: &str| Filter::parse(s).unwrap().matches_non_ip();
        assert_eq!(non_ip("arp"), Tri::Maybe);
        assert_eq!(non_ip("tcpflags syn"), Tri::No);
        assert_eq!(non_ip("ether src 02:00:00:00:00:aa or less 60"), Tri::Maybe);
    }

    #[test]
    fn filter_match_hosts_and_nets() {
        let d = tcp("10.0.0.1", 40000, "192.168.1.20", 443);
        assert!(m("host 10.0.0.1", &d));
        assert!(m("host 192.168.1.20", &d));
        assert!(!m("host 10.0.0.2", &d));
        assert!(m("src host 10.0.0.1", &d));
        assert!(!m("dst host 10.0.0.1", &d));
        assert!(m("dst host 192.168.1.20", &d));
        assert!(m("net 10.0.0.0/8", &d));
        assert!(m("net 10.0.0.0/32 or net 192.168.0.0/16", &d));
        assert!(m("src net 10.0.0.0/24", &d));
        assert!(!m("dst net 10.0.0.0/24", &d));
        assert!(m("net 0.0.0.0/0", &d));
        assert!(m("net 10.9.9.9/8", &d)); // host bits masked
        assert!(!m("net 10.0.0.0/32", &tcp("10.0.0.2", 1, "10.0.0.3", 2)));
        assert!(m("net 10.0.0.1/32", &d));
        // Families never cross.
        assert!(!m("net ::/0", &d));
        assert!(!m("host ::ffff:10.0.0.1", &d));
    }

    #[test]
    fn filter_match_ipv6() {
        let d = udp("fd00::1", 5353, "2001:db8::53", 53);
        assert!(m("ip6", &d));
        assert!(!m("ip", &d));
        assert!(m("host fd00::1", &d));
        assert!(m("host FD00:0:0::1", &d));
        assert!(m("src net fd00::/8", &d));
        assert!(!m("dst net fd00::/8", &d));
        assert!(m("dst net 2001:db8::/32", &d));
        assert!(m("net ::/0", &d));
        assert!(!m("net 0.0.0.0/0", &d));
        assert!(m("udp dst port 53", &d));
        assert!(m("ip6 src host fd00::1 and udp", &d));
        assert!(!m("tcp", &d));
        let icmp6 = pkt("fe80::1", "ff02::1", 58, L4::Icmp6 { kind: 135, code: 0 });
        assert!(m("icmp6", &icmp6));
        assert!(m("proto ipv6-icmp", &icmp6));
        assert!(m("proto 58", &icmp6));
        assert!(!m("icmp", &icmp6));
        assert!(!m("port 0", &icmp6));
    }

    #[test]
    fn filter_match_ports_and_protocols() {
        let t = tcp("10.0.0.1", 40000, "10.0.0.2", 443);
        let u = udp("10.0.0.1", 53, "10.0.0.2", 33000);
        let s = pkt(
            "10.0.0.1",
            "10.0.0.2",
            132,
            L4::Sctp {
                src_port: 2905,
                dst_port: 2905,
            },
        );
        let gre = pkt("10.0.0.1", "10.0.0.2", 47, L4::Other);
        let icmp = pkt("10.0.0.1", "10.0.0.2", 1, L4::Icmp { kind: 8, code: 0 });
        assert!(m("port 443", &t));
        assert!(m("port 40000", &t));
        assert!(m("dst port 443", &t));
        assert!(!m("src port 443", &t));
        assert!(m("tcp port 443", &t));
        assert!(!m("udp port 443", &t));
        assert!(m("portrange 400-500", &t));
        assert!(m("dst portrange 443-443", &t));
        assert!(!m("src portrange 400-500", &t));
        assert!(m("src portrange 30000-65535", &t));
        assert!(m("udp src port 53", &u));
        assert!(!m("udp dst port 53", &u));
        assert!(m("port 2905 and sctp", &s));
        assert!(m("sctp src portrange 2900-2910", &s));
        assert!(m("proto gre", &gre));
        assert!(m("proto 47", &gre));
        assert!(!m("portrange 0-65535", &gre));
        assert!(m("icmp and not port 0", &icmp));
        assert!(m("proto icmp", &icmp));
        assert!(m("ip", &icmp));
        assert!(m("proto TCP", &t));
        assert!(m("proto esp", &pkt("10.0.0.1", "10.0.0.2", 50, L4::Other)));
        assert!(m("proto ah", &pkt("10.0.0.1", "10.0.0.2", 51, L4::Other)));
        assert!(m("proto 255", &pkt("10.0.0.1", "10.0.0.2", 255, L4::Other)));
        assert!(m("proto 0", &pkt("10.0.0.1", "10.0.0.2", 0, L4::Other)));
    }

    #[test]
    fn filter_match_fragments() {
        // The first fragment carries the transport header; later ones do not.
        let mut first = udp("10.0.0.1", 5000, "10.0.0.2", 6000);
        first.ip.as_mut().unwrap().fragment = Some(Fragment {
            offset: 0,
            more: true,
            id: 7,
        });
        let mut later = pkt("10.0.0.1", "10.0.0.2", 17, L4::None);
        later.ip.as_mut().unwrap().fragment = Some(Fragment {
            offset: 185,
            more: false,
            id: 7,
        });
        assert!(m("udp port 6000", &first));
        assert!(!m("udp port 6000", &later));
        assert!(!m("portrange 0-65535", &later));
        assert!(m("not port 6000", &later));
        assert!(m("udp", &later));
        assert!(m("host 10.0.0.2", &later));
    }

    #[test]
    fn filter_match_vlans() {
        let d = tcp("10.0.0.1", 1, "10.0.0.2", 2);
        let untagged = d.clone();
        let one = with_vlans(d.clone(), [Some(100), None]);
        let qinq = with_vlans(d, [Some(200), Some(100)]);
        assert!(!m("vlan", &untagged));
        assert!(m("not vlan", &untagged));
        assert!(m("vlan", &one));
        assert!(m("vlan 100", &one));
        assert!(!m("vlan 200", &one));
        assert!(m("vlan 100", &qinq));
        assert!(m("vlan 200", &qinq));
        assert!(m("vlan 100 and vlan 200", &qinq)); // any order, unlike tcpdump
        assert!(!m("vlan 0", &qinq));
        assert!(m("vlan and tcp port 2", &qinq));
        assert!(m("vlan 0", &with_vlans(untagged.clone(), [Some(0), None])));
        assert!(m("vlan 4095", &with_vlans(untagged, [None, Some(4095)])));
    }

    #[test]
    fn filter_match_dscp() {
        let d = udp("10.0.0.1", 1, "10.0.0.2", 2);
        assert!(m("dscp 0", &d));
        assert!(m("dscp default", &d));
        assert!(m("dscp be", &d));
        assert!(m("dscp cs0", &d));
        let ef = with_dscp(d.clone(), 46);
        assert!(m("dscp ef", &ef));
        assert!(m("dscp EF", &ef));
        assert!(m("dscp 46", &ef));
        assert!(!m("dscp af41", &ef));
        assert!(m("dscp af41", &with_dscp(d.clone(), 34)));
        assert!(m("dscp af11", &with_dscp(d.clone(), 10)));
        assert!(m("dscp af43", &with_dscp(d.clone(), 38)));
        assert!(m("dscp cs7", &with_dscp(d.clone(), 56)));
        assert!(m("dscp va", &with_dscp(d.clone(), 44)));
        assert!(m("dscp le", &with_dscp(d.clone(), 1)));
        assert!(m("dscp 63", &with_dscp(d.clone(), 63)));
        assert!(m("ip6 or dscp ef", &ef));
        let v6 = with_dscp(udp("fd00::1", 1, "fd00::2", 2), 46);
        assert!(m("ip6 and dscp ef", &v6));
    }

    #[test]
    fn filter_match_non_ip() {
        let plain = arp([None, None]);
        let tagged = arp([Some(7), None]);
        assert!(!m("host 10.0.0.1", &plain));
        assert!(!m("ip or ip6", &plain));
        assert!(!m("dscp 0", &plain));
        assert!(!m("port 80", &plain));
        assert!(m("not ip", &plain));
        assert!(m("vlan 7", &tagged));
        assert!(!m("vlan 7", &plain));
        let f = |s: &str| Filter::parse(s).unwrap().matches_non_ip();
        assert_eq!(f("tcp"), Tri::No);
        assert_eq!(f("not tcp"), Tri::Yes);
        assert_eq!(f("dscp 0"), Tri::No);
        assert_eq!(f("vlan"), Tri::Maybe);
        assert_eq!(f("not vlan 3"), Tri::Maybe);
        assert_eq!(f("vlan 3 and host 10.0.0.1"), Tri::No);
        assert_eq!(f("vlan 3 or not ip"), Tri::Yes);
        assert_eq!(f("vlan 3 or ip"), Tri::Maybe);
    }

    #[test]
    fn filter_side_dscp_sets() {
        let d = udp("10.0.0.1", 1, "10.0.0.2", 2);
        let mut side = FlowSide::from_dissected(&d).unwrap();
        assert_eq!(side.dscp_mask, 1);
        let f = |s: &str, side: &FlowSide| Filter::parse(s).unwrap().matches_side(side);
        side.dscp_mask = (1 << 46) | 1;
        assert_eq!(f("dscp ef", &side), Tri::Maybe);
        assert_eq!(f("dscp af41", &side), Tri::No);
        assert_eq!(f("not dscp af41", &side), Tri::Yes);
        assert_eq!(f("dscp ef or dscp 0", &side), Tri::Yes);
        assert_eq!(f("dscp ef or not dscp ef", &side), Tri::Yes);
        assert_eq!(f("dscp ef and dscp 0", &side), Tri::No);
        assert_eq!(f("udp and dscp ef", &side), Tri::Maybe);
        assert_eq!(f("tcp and dscp ef", &side), Tri::No);
        assert_eq!(f("udp or dscp ef", &side), Tri::Yes);
        assert_eq!(f("not dscp ef", &side), Tri::Maybe);
        side.dscp_mask = 1 << 46;
        assert_eq!(f("dscp ef", &side), Tri::Yes);
        // Several code points the filter does not name.
        side.dscp_mask = (1 << 10) | (1 << 12) | (1 << 14);
        assert_eq!(f("dscp ef", &side), Tri::No);
        assert_eq!(f("not dscp ef", &side), Tri::Yes);
        assert_eq!(f("dscp af12", &side), Tri::Maybe);
        // An empty set: no DSCP information; dscp N is false.
        side.dscp_mask = 0;
        assert_eq!(f("dscp 0", &side), Tri::No);
        assert_eq!(f("not dscp 0", &side), Tri::Yes);
        assert_eq!(f("udp", &side), Tri::Yes);
        // Other fields are exact.
        side.vlans = [Some(5), None];
        side.dscp_mask = 1 << 46;
        assert_eq!(f("vlan 5 and host 10.0.0.2 and port 2", &side), Tri::Yes);
        assert_eq!(f("vlan 6", &side), Tri::No);
        side.ports = None;
        assert_eq!(f("port 2", &side), Tri::No);
    }

    #[test]
    fn filter_from_dissected_side() {
        assert_eq!(FlowSide::from_dissected(&arp([Some(1), None])), None);
        let d = with_vlans(
            with_dscp(tcp("fd00::1", 1000, "fd00::2", 22), 63),
            [Some(3), Some(4)],
        );
        let s = FlowSide::from_dissected(&d).unwrap();
        assert_eq!(
            s,
            FlowSide {
                vlans: [Some(3), Some(4)],
                ip_version: 6,
                proto: 6,
                src: ip4("fd00::1"),
                dst: ip4("fd00::2"),
                ports: Some((1000, 22)),
                dscp_mask: 1 << 63,
                tcp_flags: 0x02,
                encap: Some(None),
            }
        );
        // An impossible DSCP (dissect never produces one) gives an empty set, not a panic.
        assert_eq!(
            FlowSide::from_dissected(&with_dscp(d, 200))
                .unwrap()
                .dscp_mask,
            0
        );
    }

    #[test]
    fn filter_tri_kleene() {
        use Tri::*;
        let all = [No, Maybe, Yes];
        for a in all {
            assert_eq!(!!a, a);
            for b in all {
                assert_eq!(a & b, b & a);
                assert_eq!(a | b, b | a);
                assert_eq!(!(a & b), !a | !b);
            }
        }
        assert_eq!(Yes & Maybe, Maybe);
        assert_eq!(No & Maybe, No);
        assert_eq!(Yes | Maybe, Yes);
        assert_eq!(No | Maybe, Maybe);
        assert_eq!(!Maybe, Maybe);
        assert!(Maybe.possible() && Yes.possible() && !No.possible());
        assert_eq!(Tri::from(true), Yes);
    }

    #[test]
    fn filter_dscp_names() {
        let named: Vec<(u8, &str)> = (0..=255u8)
            .filter_map(|n| dscp_name(n).map(|s| (n, s)))
            .collect();
        let expect = [
            (0, "default"),
            (1, "le"),
            (8, "cs1"),
            (10, "af11"),
            (12, "af12"),
            (14, "af13"),
            (16, "cs2"),
            (18, "af21"),
            (20, "af22"),
            (22, "af23"),
            (24, "cs3"),
            (26, "af31"),
            (28, "af32"),
            (30, "af33"),
            (32, "cs4"),
            (34, "af41"),
            (36, "af42"),
            (38, "af43"),
            (40, "cs5"),
            (44, "va"),
            (46, "ef"),
            (48, "cs6"),
            (56, "cs7"),
        ];
        assert_eq!(named, expect);
        for (n, name) in expect {
            assert_eq!(dscp_by_name(name), Some(n));
            assert_eq!(dscp_by_name(&name.to_uppercase()), Some(n));
        }
        assert_eq!(dscp_by_name("be"), Some(0));
        assert_eq!(dscp_by_name("cs0"), Some(0));
        assert_eq!(dscp_by_name("df"), Some(0));
        assert_eq!(dscp_by_name("af44"), None);
        assert_eq!(dscp_by_name("af14"), None);
        assert_eq!(dscp_by_name("cs8"), None);
        assert_eq!(dscp_by_name(""), None);
    }
}

#[cfg(test)]
mod name_terms {
    use super::*;
    use capsule_names::{App, FlowNames};

    #[test]
    fn name_terms_parse_print_and_read_back() {
        let f =
            Filter::parse("SNI *.Example.com or app TLS or dns a.example or http.host web.test")
                .unwrap();
        assert_eq!(
            f.to_string(),
            "sni *.example.com or app tls or dns a.example or http.host web.test"
        );
        assert_eq!(Filter::parse(&f.to_string()), Ok(f.clone()));
        assert!(f.has_names());
        assert!(!Filter::parse("tcp port 443").unwrap().has_names());
        for bad in ["app unknown", "app nosuch", "sni", "dns (", "http.host"] {
            assert!(Filter::parse(bad).is_err(), "{bad}");
        }
        // Unresolved, a name term matches no packet.
        assert!(!f.matches(&Dissected::default()));
    }

    #[test]
    fn name_terms_resolve_into_flow_tuples_and_hosts() {
        let tls = FlowNames {
            app: App::Tls,
            sni: Some("x.Example.com".into()),
            ..Default::default()
        };
        let dns = FlowNames {
            app: App::Dns,
            dns_queries: vec!["a.example".into()],
            dns_answers: vec![("a.example".into(), "192.0.2.9".parse().unwrap())],
            ..Default::default()
        };
        let flows = [
            NamedFlow {
                proto: 6,
                a: "10.0.0.1".parse().unwrap(),
                b: "10.0.0.2".parse().unwrap(),
                ports: Some((40000, 443)),
                names: &tls,
            },
            NamedFlow {
                proto: 17,
                a: "10.0.0.1".parse().unwrap(),
                b: "10.0.0.53".parse().unwrap(),
                ports: Some((5000, 53)),
                names: &dns,
            },
        ];
        let r = Filter::parse("sni *.example.com")
            .unwrap()
            .resolve_names(&flows);
        assert!(!r.has_names());
        let s = r.to_string();
        assert!(
            s.contains("src host 10.0.0.1") && s.contains("dst port 443"),
            "{s}"
        );
        assert!(
            s.contains("src port 443") && s.contains("dst port 40000"),
            "{s}"
        );
        assert_eq!(Filter::parse(&s), Ok(r));
        let r = Filter::parse("dns a.example")
            .unwrap()
            .resolve_names(&flows);
        assert_eq!(r.to_string(), "host 192.0.2.9");
        let r = Filter::parse("app dns and udp")
            .unwrap()
            .resolve_names(&flows);
        assert!(r.to_string().contains("dst port 53"), "{r}");
        let r = Filter::parse("sni none.example")
            .unwrap()
            .resolve_names(&flows);
        assert_eq!(r.to_string(), "ip and ip6");
        assert_eq!(
            r.matches_side(&FlowSide {
                vlans: [None, None],
                ip_version: 4,
                proto: 6,
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                ports: Some((40000, 443)),
                dscp_mask: 1,
                tcp_flags: 0,
                encap: None,
            }),
            Tri::No
        );
    }
}
