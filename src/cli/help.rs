//! Long help texts: the filter language and the exit statuses.

/// The filter language and the time forms, for `capsule filters`, `capsule help filters` and
/// the long help of `query` and `flows`. The reference is in capsule-query's filter module.
pub const FILTERS_HELP: &str = filters_help!();

/// The text of [`FILTERS_HELP`], as a macro so `concat!` can join it to other help texts.
macro_rules! filters_help {
    () => {
        "\
FILTERS select packets by what their headers say; the words after the flags
form one filter. The empty filter selects every packet.

  host ADDR             IP source or destination (IPv4 or IPv6 literal)
  net ADDR/LEN          address inside a prefix (10.1.0.0/16, fd00::/64);
  net 10.50             a short prefix, as tcpdump: 10.50 = 10.50.0.0/16
  net ADDR mask MASK    the same with a netmask: net 10.1.0.0 mask 255.255.0.0
  port N|NAME           TCP, UDP or SCTP source or destination port; names
                        from a built-in table (http, https, domain, ssh, ...)
  portrange A-B         a port from A to B
  src ..., dst ...      one side only: src host 10.0.0.1, dst port 443,
                        src 10.0.0.1 (an address alone is a host);
                        src or dst ..., src and dst ... (both sides)
  port (80 or 443)      a list of values for one qualifier, as tcpdump:
                        tcp dst port (80 or 443), host (10.0.0.1 or 10.0.0.2)
  tcp, udp, sctp, icmp, icmp6, ip, ip6
                        the protocol; `tcp port 80` is `tcp and port 80`
  proto N|NAME          IP protocol by number or name (gre, esp, ah, ...)
  vlan [ID]             an 802.1Q/802.1ad tag (any of up to three, tunnels'
                        inner frames included) is ID
  tunnel                inside an encapsulation: MPLS, PPPoE, GRE, ERSPAN,
                        VXLAN, Geneve, GTP-U ([tunnels] sets the UDP ports)
  tunnel vni N          a VXLAN or Geneve VNI
  tunnel host ADDR      an outer endpoint of the outermost IP tunnel
  mpls [LABEL]          an MPLS label stack; LABEL: its top label
  dscp N|NAME           DS field: 0-63, ef, va, le, df (be, default), cs0-cs7,
                        af11-af43
  tcpflags FLAG         the TCP flag is set: fin, syn, rst, push, ack, urg,
                        ece, cwr
  tcp[tcpflags] & MASK OP VALUE
                        tcpdump's form (also tcp[13]); MASK and VALUE are
                        numbers or tcp-syn, tcp-ack, ... joined by |:
                        tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn
  ether host|src|dst MAC
                        an Ethernet address (00:1b:21:0a:0b:0c)
  arp                   ARP frames
  greater N, less N     length on the wire >= N, <= N bytes
  len > N               the same as a comparison: len >, >=, <, <=, ==, != N
  ip[1] & 0xfc == 0xb8  tcpdump's byte expressions: LAYER[OFFSET] or
                        LAYER[OFFSET:SIZE] (ether, ip, ip6, tcp, udp, icmp;
                        SIZE 1, 2 or 4 bytes), an optional & MASK, a
                        comparison and a number (decimal or 0x hex); read
                        from each packet, after any VLAN tags
  sni NAME              the flow's TLS server name (ClientHello, over TCP or in
                        QUIC's Initial); *.example.com matches any name under
                        example.com
  http.host NAME        the flow's HTTP/1 Host header (its port ignored)
  dns NAME              flows to or from an address a DNS answer in the window
                        gave for NAME
  app APP               the application read from the flow's first payload
                        bytes: tls, quic, http, http2, dns, ssh, rpc, smb,
                        rocev2
                        (names are read at index time; a name term is looked
                        up in the index, never by reading packets; tcpdump has
                        no such terms; over a segment indexed without names
                        the answer is partial, exit 3, until `capsule
                        reindex`)
  and (&&), or (||), not (!), ( )
                        not binds tightest; and and or bind equally,
                        from the left, as in tcpdump: tcp or udp and
                        port 53 is (tcp or udp) and port 53;
                        after and/or a bare value repeats the last
                        qualifiers: tcp port 80 or 443

Examples:
  capsule query --store S --from -10m -w out.pcap host 10.1.2.3 and tcp port 443
  capsule flows --store S dscp ef and not net 10.4.0.0/24
  capsule flows --store S 'sni *.example-hub.io or dns *.example-hub.io'
  capsule query --store S --count 'udp and (dst port 53 or dst port 5353)'
  capsule query --store S --count 'tcpflags rst and port https or 8443'

Not supported (use --bpf with a tcpdump expression for these): host names,
named offsets other than tcp[tcpflags] (icmp[icmptype]), icmptype, broadcast,
multicast, ether proto, rarp. `vlan 100 and vlan 200` means both tags, in any
order; every primitive looks through VLAN tags, and tcp[tcpflags] covers IPv6.

Inside tunnels, unlike tcpdump: every primitive except tunnel and mpls matches
the innermost packet (host, port, dscp, tcp, ... of the traffic carried), where
tcpdump matches the outer headers (host would be a tunnel endpoint; use tunnel
host for that). Byte expressions (ip[1]) count from the outer headers, as in
tcpdump.

Fragments, unlike tcpdump: a UDP, SCTP or TCP datagram's later fragments (no
transport header) take the ports of its first fragment, so port 53 selects
every fragment of the datagrams to or from port 53, where tcpdump's selects the
first fragment only. A later fragment is joined when its first fragment was
stored before it, in the same segment, captured within 10 ms of it; otherwise
(it came first, or its first was not captured) it has no ports, as in tcpdump.
A TCP segment's later fragments have no TCP flags.

TIMES (--from inclusive, --to exclusive; both optional):
  2026-11-30T02:00:00.123456789Z   RFC 3339, up to 9 fraction digits, any offset
  2026-11-30 02:00:00+01:00        a space instead of T
  2026-11-30                       a date: its midnight, UTC
  1796004000.5                     Unix seconds, with a fraction
  @1796004000123456789             nanoseconds since the epoch
  now, -10m, -2h30m, -1.5s         the wall clock now, or a duration before it
  --to +1ms, --to +10m             a duration after --from
"
    };
}
use filters_help;

/// The exit statuses of the commands that answer from the store.
pub(super) const EXIT_STATUS: &str = exit_status!();

/// The text of [`EXIT_STATUS`], as a macro so `concat!` can join it to other help texts.
macro_rules! exit_status {
    () => {
        "Exit status: 0 the answer is whole; 1 an error; 2 bad usage; 3 the answer is \
partial: damaged data in the store was skipped, and each skipped block or segment is named \
on standard error (file, block, byte range, packets and time span lost)."
    };
}
use exit_status;

/// `query --help` and `flows --help`: the filter language, then the exit statuses.
pub(super) const QUERY_LONG_AFTER: &str = concat!(filters_help!(), "\n", exit_status!());
