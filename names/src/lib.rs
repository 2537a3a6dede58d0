//! capsule-names: what application a flow carries and the names in it, from the first bytes
//! of its payload (never from its port).
//!
//! ```text
//! side index builder, per packet of a flow still being inspected     (capsule-index)
//!   -> payload_of: the transport payload of a whole captured packet
//!   -> Tracker::syn(direction, ISN) for each SYN: where that side's stream starts
//!   -> Tracker::observe(direction, TCP seq, payload): TCP payloads put in sequence order
//!        (held while a gap is before them), whatever order they come in
//!        each side's stream start (UDP: first datagram) -> detect::app:
//!                 TLS | QUIC | HTTP/1 | HTTP/2 preface | DNS | SSH | ONC-RPC (NFS) | SMB |
//!                 RoCEv2 BTH | unknown
//!        TLS   -> the client's stream reassembled in order (up to STREAM_CAP bytes, so a
//!                 ClientHello spanning two segments is read) -> tls::client_hello:
//!                 server name, ALPN, JA4-style fingerprint
//!        QUIC  -> the client's Initial packets, their protection removed (keys derived
//!                 from public values, quic.rs), CRYPTO data joined -> the ClientHello
//!        HTTP/1 -> Host header and method of the first request (text.rs)
//!        SSH   -> each side's version string
//!        DNS   -> every message of the flow's first MAX_PACKETS: query names, A/AAAA answers
//!   -> FlowNames: what the index keeps per flow
//! ```
//!
//! Fixed caps per flow, so a flow costs bounded memory and time however it behaves:
//! [`MAX_PACKETS`] payload-carrying packets inspected per direction, [`STREAM_CAP`] bytes of
//! a TCP stream buffered, names of at most [`MAX_NAME`] bytes, [`MAX_ALPN`] ALPN values,
//! [`MAX_DNS_NAMES`] query names and [`MAX_DNS_ANSWERS`] answers. Every parser reads through
//! capsule-wire's checked [`Reader`](capsule_wire::view::Reader): no panic on any input (one
//! cargo-fuzz target per parser in fuzz/).
#![forbid(unsafe_code)]

pub mod detect;
pub mod dns;
pub mod quic;
pub mod text;
pub mod tls;

use std::net::IpAddr;

pub use detect::App;

/// A name as kept: printable ASCII, at most [`MAX_NAME`] bytes.
pub type Name = String;

/// Longest name kept (a DNS name is at most 253).
pub const MAX_NAME: usize = 255;
/// Payload-carrying packets inspected per direction of a flow.
pub const MAX_PACKETS: u32 = 8;
/// Bytes of a TCP stream's start buffered per direction (a ClientHello with a
/// post-quantum key share is about 1.8 kB).
pub const STREAM_CAP: usize = 8192;
/// ALPN values kept.
pub const MAX_ALPN: usize = 4;
/// DNS query names kept per flow.
pub const MAX_DNS_NAMES: usize = 8;
/// DNS A/AAAA answers kept per flow.
pub const MAX_DNS_ANSWERS: usize = 16;

/// `bytes` as a name, if it is printable ASCII (no space) of 1 to [`MAX_NAME`] bytes.
pub fn clean_name(bytes: &[u8]) -> Option<Name> {
    if bytes.is_empty() || bytes.len() > MAX_NAME || !bytes.iter().all(|b| (0x21..0x7f).contains(b))
    {
        return None;
    }
    Some(bytes.iter().map(|&b| char::from(b)).collect())
}

/// What the index keeps of one flow: its application and names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlowNames {
    pub app: App,
    /// TLS server name (ClientHello).
    pub sni: Option<Name>,
    /// TLS ALPN values offered.
    pub alpn: Vec<Name>,
    /// JA4-style fingerprint of the TLS client.
    pub ja4: Option<String>,
    /// HTTP/1 Host header and method of the first request.
    pub http_host: Option<Name>,
    pub http_method: Option<Name>,
    /// SSH version strings, per direction of the flow (0: a -> b).
    pub ssh: [Option<Name>; 2],
    /// DNS query names.
    pub dns_queries: Vec<Name>,
    /// DNS A/AAAA answers: (the name asked, the address).
    pub dns_answers: Vec<(Name, IpAddr)>,
    /// The side of the flow (0: a, 1: b) that is the client, as its bytes tell (it sent the
    /// TLS or QUIC ClientHello, the HTTP request or preface, the DNS query, the RPC call), so
    /// the server (the end the SNI and HTTP host name) is the other. `None` when the bytes
    /// do not tell (or an index written before this was kept).
    pub client: Option<u8>,
}

impl FlowNames {
    /// Nothing learned (which side sent first is no name: a flow with only that is empty).
    pub fn is_empty(&self) -> bool {
        FlowNames {
            client: None,
            ..self.clone()
        } == FlowNames::default()
    }

    /// The side of the flow (0: a, 1: b) its names name (SNI, HTTP host: the server's), when
    /// known: the client's peer.
    pub fn server_side(&self) -> Option<usize> {
        self.client.map(|c| 1 - usize::from(c & 1))
    }

    /// The one name that says who the other end is: SNI, else HTTP host, else the first DNS
    /// query.
    pub fn label(&self) -> Option<&str> {
        self.sni
            .as_deref()
            .or(self.http_host.as_deref())
            .or(self.dns_queries.first().map(String::as_str))
    }

    /// `tls: models.example-hub.io`, `dns: example.com`, `ssh`, or `None` when unknown.
    pub fn describe(&self) -> Option<String> {
        match (self.app, self.label()) {
            (App::Unknown, None) => None,
            (app, Some(l)) => Some(format!("{}: {l}", app.as_str())),
            (app, None) => Some(app.as_str().to_string()),
        }
    }

    /// Adds what another record of the same flow learned (another segment's): fields not
    /// known yet are taken, lists extended up to their caps.
    pub fn absorb(&mut self, o: &FlowNames) {
        if self.app == App::Unknown {
            self.app = o.app;
        }
        if self.client.is_none() {
            self.client = o.client;
        }
        for (a, b) in [
            (&mut self.sni, &o.sni),
            (&mut self.ja4, &o.ja4),
            (&mut self.http_host, &o.http_host),
            (&mut self.http_method, &o.http_method),
        ] {
            if a.is_none() {
                a.clone_from(b);
            }
        }
        for (a, b) in self.ssh.iter_mut().zip(&o.ssh) {
            if a.is_none() {
                a.clone_from(b);
            }
        }
        for v in &o.alpn {
            if self.alpn.len() < MAX_ALPN && !self.alpn.contains(v) {
                self.alpn.push(v.clone());
            }
        }
        for v in &o.dns_queries {
            if self.dns_queries.len() < MAX_DNS_NAMES && !self.dns_queries.contains(v) {
                self.dns_queries.push(v.clone());
            }
        }
        for v in &o.dns_answers {
            if self.dns_answers.len() < MAX_DNS_ANSWERS && !self.dns_answers.contains(v) {
                self.dns_answers.push(v.clone());
            }
        }
    }
}

/// Whether `name` matches `pattern`, ignoring ASCII case: equal, or for `*.suffix` any name
/// ending in `.suffix` (not `suffix` itself, as in TLS certificates).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let name = name.trim_end_matches('.');
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            name.len() > suffix.len() + 1
                && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
                && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
        }
        None => name.eq_ignore_ascii_case(pattern.trim_end_matches('.')),
    }
}

/// One direction's inspection state.
#[derive(Debug, Clone, Default)]
struct Side {
    packets: u32,
    /// TCP: the sequence number the side's stream starts at: its SYN's ISN + 1 once the SYN
    /// was seen (then `anchored`), else the lowest of its payloads' seen so far (it moves
    /// back when a lower one comes, while nothing was learned from the side's bytes).
    start: Option<u32>,
    anchored: bool,
    /// TCP: the stream's first bytes, contiguous from `start` (up to [`STREAM_CAP`]).
    stream: Vec<u8>,
    /// TCP: payloads ahead of the stream's end (a gap before them), or kept while the
    /// stream's start may still move back: (sequence number, bytes). At most one per
    /// payload inspected, and the stream read so far after a restart, each clipped to
    /// [`STREAM_CAP`] bytes.
    ahead: Vec<(u32, Vec<u8>)>,
    /// A QUIC client's Initial packets so far.
    quic: Option<Box<quic::Initials>>,
    /// A payload was seen from this side.
    seen: bool,
    /// The side's stream start (TCP) or first datagram (UDP) was looked at for the
    /// application.
    detected: bool,
    /// What the side's bytes tell can no longer change by packets seen later: UDP (a
    /// datagram is whole), or a TCP side whose SYN was seen (its stream start is known).
    fixed: bool,
    /// Something was learned from this side's bytes (a hello, a request, a version, a DNS
    /// message): its stream start no longer moves.
    learned: bool,
    /// This side's bytes are no client's hello or request (TLS, QUIC, HTTP/1).
    not_client: bool,
}

impl Side {
    /// Nothing more this side sends can change what its bytes tell: its cap is spent, or
    /// its start (fixed) was looked at.
    fn settled(&self) -> bool {
        self.packets >= MAX_PACKETS || (self.fixed && self.detected)
    }

    /// The stream starts at `start` instead (a lower sequence number than the current
    /// start, or the SYN's): what was read of it is held again, and looked at afresh.
    fn restart(&mut self, start: u32) {
        if let Some(old) = self.start {
            if !self.stream.is_empty() {
                let bytes = std::mem::take(&mut self.stream);
                self.ahead.push((old, bytes));
            }
        }
        self.start = Some(start);
        self.detected = false;
        self.not_client = false;
    }

    /// Moves the held payloads that now join the stream's end into it; whether it grew.
    fn join(&mut self) -> bool {
        let Some(start) = self.start else {
            return false;
        };
        let (stream, ahead) = (&mut self.stream, &mut self.ahead);
        let mut grew = false;
        loop {
            let mut joined = false;
            ahead.retain(|(seq, b)| {
                let off = i64::from(seq.wrapping_sub(start) as i32);
                let have = stream.len() as i64;
                let end = off + b.len() as i64;
                if end <= have || off >= STREAM_CAP as i64 {
                    return false; // already in the stream, before its start, or past the cap
                }
                if off > have {
                    return true; // a gap before it
                }
                let from = (have - off) as usize;
                let take = (b.len() - from).min(STREAM_CAP - stream.len());
                stream.extend_from_slice(&b[from..from + take]);
                joined = true;
                false
            });
            if !joined {
                break;
            }
            grew = true;
        }
        grew
    }

    /// Takes TCP payload `payload` at `seq`; whether the in-order stream grew.
    fn segment(&mut self, seq: u32, payload: &[u8]) -> bool {
        let start = match self.start {
            None => {
                self.start = Some(seq);
                seq
            }
            Some(s) => {
                if !self.anchored && !self.learned && serial_lt(seq, s) {
                    // A lower sequence number than the start: the stream starts there.
                    self.restart(seq);
                    seq
                } else {
                    s
                }
            }
        };
        let off = seq.wrapping_sub(start);
        if off as usize == self.stream.len() && self.ahead.is_empty() {
            // The next bytes in order (the common case): no copy held.
            let take = payload.len().min(STREAM_CAP - self.stream.len());
            self.stream.extend_from_slice(&payload[..take]);
            return take > 0;
        }
        let off = i64::from(off as i32);
        if off >= STREAM_CAP as i64 || off + (payload.len() as i64) <= self.stream.len() as i64 {
            return false; // past the cap, or nothing new (a retransmission)
        }
        // Held clipped to the stream's start (a start that no longer moves) and to the cap
        // from it, so a held payload is at most STREAM_CAP bytes.
        let skip = (-off).max(0) as usize;
        let off = off.max(0) as usize;
        let keep = (payload.len() - skip).min(STREAM_CAP - off);
        let seq = seq.wrapping_add(skip as u32);
        self.ahead.push((seq, payload[skip..skip + keep].to_vec()));
        self.join()
    }
}

/// Serial-number order of TCP sequence numbers: `a` before `b`.
fn serial_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// A flow's inspection while the index is built: fed the payload of its packets until it is
/// done (every cap reached, or nothing more to learn).
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    names: FlowNames,
    sides: [Side; 2],
    /// Per direction: its SSH version line was read (a version, or none found).
    ssh_read: [bool; 2],
    done: bool,
}

impl Tracker {
    /// Whether more packets can teach anything; when not, the caller skips them (the cost of
    /// the names on the indexing path is then nothing but this check).
    pub fn done(&self) -> bool {
        self.done
    }

    /// How many more payloads sent in direction `dir` can change anything: none once done;
    /// the rest of this direction's [`MAX_PACKETS`]; once those are spent, one while the
    /// other direction's are spent too (it ends the inspection), else none (such a packet
    /// is dropped by [`Tracker::observe`] unread). A bulk flow whose other direction carries
    /// only acknowledgements is never done; the indexer asks this before it reads a packet
    /// again, so such a flow costs nothing after its first packets.
    pub fn room(&self, dir: usize) -> u32 {
        let dir = dir & 1;
        if self.done {
            0
        } else if self.sides[dir].packets < MAX_PACKETS {
            MAX_PACKETS - self.sides[dir].packets
        } else {
            u32::from(self.sides[1 - dir].packets >= MAX_PACKETS)
        }
    }

    /// What was learned so far: every field final once set (later packets only fill
    /// fields still empty and extend lists), so two snapshots of one flow's inspection,
    /// joined with [`FlowNames::absorb`], give the later one.
    pub fn names(&self) -> &FlowNames {
        &self.names
    }

    /// Takes what was learned.
    pub fn into_names(self) -> FlowNames {
        self.names
    }

    /// Tells the inspection that direction `dir` sent a SYN with sequence number `seq` (its
    /// ISN): that side's stream starts at `seq + 1`, whatever order its payloads come in.
    pub fn syn(&mut self, dir: usize, seq: u32) {
        let dir = dir & 1;
        let side = &mut self.sides[dir];
        if self.done || side.anchored || side.learned {
            return;
        }
        let start = seq.wrapping_add(1);
        match side.start {
            // Payloads before the ISN: another connection's (a port reused); left alone.
            Some(s) if serial_lt(s, start) => return,
            Some(s) if s == start => {}
            _ => side.restart(start),
        }
        side.anchored = true;
        side.fixed = true;
        side.join();
        if self.sides[dir].detected {
            self.settle();
        } else {
            self.look(dir, true, 0);
        }
    }

    /// Feeds one packet's transport payload, sent in direction `dir` (0 or 1). `tcp_seq` is
    /// the TCP sequence number of the payload's first byte for TCP (its stream is then
    /// reassembled in sequence order, from the side's SYN when [`Tracker::syn`] told it,
    /// else from the lowest sequence number seen, so the order the payloads come in does
    /// not matter), `None` for UDP. `dst_port` is the packet's destination port (only
    /// RoCEv2 is told by its port).
    pub fn observe(&mut self, dir: usize, tcp_seq: Option<u32>, dst_port: u16, payload: &[u8]) {
        if self.done || payload.is_empty() {
            return;
        }
        let dir = dir & 1;
        let side = &mut self.sides[dir];
        if side.packets >= MAX_PACKETS {
            if self.sides[1 - dir].packets >= MAX_PACKETS {
                self.finish();
            }
            return;
        }
        side.packets += 1;
        side.seen = true;
        match tcp_seq {
            Some(seq) => {
                let grew = side.segment(seq, payload);
                if grew {
                    self.look(dir, true, dst_port);
                } else {
                    self.settle();
                }
            }
            None => {
                // A datagram is whole: what it tells does not depend on the others'.
                side.fixed = true;
                self.read(dir, None, dst_port, payload);
            }
        }
    }

    /// Side `dir`'s TCP stream grew (or its start became known): its start is looked at for
    /// the application, and the stream handed to the application's parser.
    fn look(&mut self, dir: usize, tcp: bool, dst_port: u16) {
        if self.sides[dir].stream.is_empty() {
            return self.settle();
        }
        let stream = std::mem::take(&mut self.sides[dir].stream);
        self.read(dir, Some(tcp), dst_port, &stream);
        // Not when done, nor when the stream restarted (a DNS message was read).
        if !self.done && self.sides[dir].start.is_some() {
            self.sides[dir].stream = stream;
        }
    }

    /// Reads side `dir`'s bytes: its TCP stream from its start (`tcp`: `Some`), or one UDP
    /// datagram.
    fn read(&mut self, dir: usize, tcp: Option<bool>, dst_port: u16, bytes: &[u8]) {
        let is_tcp = tcp.is_some();
        // Each side's start may tell the application: a store writes a flow's two
        // directions into different lanes when their DSCP differs, so the index may see the
        // server's first bytes before the client's. Which side is the client is told by
        // the bytes too (a hello, a request, a DNS query), never by which came first.
        // A TCP stream's start is looked at again as it grows (a first segment of a few
        // bytes tells nothing), a datagram's side by its first.
        let first = !std::mem::replace(&mut self.sides[dir].detected, true);
        if (first || is_tcp) && self.names.app == App::Unknown {
            self.names.app = detect::app(bytes, is_tcp, dst_port);
            // An HTTP/2 preface and an ONC-RPC call are a client's.
            if matches!(self.names.app, App::Http2 | App::OncRpc) {
                self.client_is(dir);
                self.sides[dir].learned = true;
            }
        }
        match self.names.app {
            // A client's hello or request is told from the bytes; whichever side sends one
            // is the client, and a side whose bytes are none is not (its peer is).
            _ if self.sides[dir].not_client => {}
            App::Quic if !is_tcp => {
                let q = self.sides[dir].quic.get_or_insert_with(Default::default);
                let h = q.datagram(bytes);
                self.hello(dir, h);
            }
            App::Tls if is_tcp => {
                let h = tls::client_hello(bytes);
                self.hello(dir, h);
            }
            App::Http1 if is_tcp => match text::http_request(bytes) {
                text::Http::Incomplete => {}
                text::Http::Request { method, host } => {
                    self.client_is(dir);
                    self.names.http_method = method;
                    self.names.http_host = host;
                    self.finish();
                }
                text::Http::Not => self.not_client(dir),
            },
            App::Ssh => {
                if !self.ssh_read[dir] {
                    match text::ssh_version(bytes) {
                        text::Ssh::Incomplete => {}
                        text::Ssh::Version(v) => {
                            self.names.ssh[dir] = Some(v);
                            self.ssh_read[dir] = true;
                            self.sides[dir].learned = true;
                        }
                        text::Ssh::Not => self.ssh_read[dir] = self.sides[dir].fixed,
                    }
                }
                if self.ssh_read == [true, true] {
                    self.finish();
                }
            }
            App::Dns => {
                let m = match is_tcp {
                    true => dns::parse_tcp(bytes),
                    false => dns::parse(bytes),
                };
                if let Some(m) = m {
                    self.sides[dir].learned = true;
                    // A query comes from the client, a response from the server.
                    if m.response {
                        self.client_is(1 - dir);
                    } else {
                        self.client_is(dir);
                    }
                    for q in m.queries {
                        if self.names.dns_queries.len() < MAX_DNS_NAMES
                            && !self.names.dns_queries.contains(&q)
                        {
                            self.names.dns_queries.push(q);
                        }
                    }
                    for a in m.answers {
                        if self.names.dns_answers.len() < MAX_DNS_ANSWERS
                            && !self.names.dns_answers.contains(&a)
                        {
                            self.names.dns_answers.push(a);
                        }
                    }
                    if is_tcp {
                        // One message per direction is read over TCP: the stream restarts
                        // at the next payload.
                        let side = &mut self.sides[dir];
                        side.stream.clear();
                        side.ahead.clear();
                        side.start = None;
                        side.anchored = false;
                        return;
                    }
                }
            }
            // Nothing recognised yet: wait until neither side's start can change.
            App::Unknown => {}
            _ => self.finish(),
        }
        self.settle();
    }

    /// Ends the inspection when nothing more can be learned: no application is known, or
    /// neither side's bytes are a client's, and neither side's start can still change.
    fn settle(&mut self) {
        if self.done || !self.sides.iter().all(Side::settled) {
            return;
        }
        let no_client = self.sides.iter().all(|s| s.not_client)
            && matches!(self.names.app, App::Tls | App::Quic | App::Http1);
        if self.names.app == App::Unknown || no_client {
            self.finish();
        }
    }

    /// Side `dir` is the client (it sent a client's hello, request or query): the first
    /// side found so is kept (a field once set is final, see [`Tracker::names`]).
    fn client_is(&mut self, dir: usize) {
        if self.names.client.is_none() {
            self.names.client = Some(dir as u8);
        }
    }

    /// Side `dir`'s bytes are no client's hello or request; when neither side's are,
    /// nothing more can be learned.
    fn not_client(&mut self, dir: usize) {
        self.sides[dir].not_client = true;
    }

    /// Takes what side `dir`'s hello (TLS, or QUIC's Initial) gave.
    fn hello(&mut self, dir: usize, h: tls::Hello) {
        match h {
            tls::Hello::Incomplete => {}
            tls::Hello::Client(h) => {
                self.client_is(dir);
                self.sides[dir].learned = true;
                self.names.sni = h.sni;
                self.names.alpn = h.alpn;
                self.names.ja4 = Some(h.ja4);
                self.finish();
            }
            tls::Hello::Not => self.not_client(dir),
        }
    }

    fn finish(&mut self) {
        self.done = true;
        self.sides = Default::default();
    }
}

/// The transport payload of a captured packet dissected as `d`, when the capture holds it
/// whole: found from the packet's end, as the IP length fields give the payload's length.
/// `None` for a packet cut by the snap length (`caplen < orig_len`), a non-first fragment,
/// or a frame that may carry link-layer padding after the IP packet (60 bytes or less).
pub fn payload_of<'a>(
    d: &capsule_wire::Dissected,
    data: &'a [u8],
    orig_len: u32,
) -> Option<&'a [u8]> {
    use capsule_wire::L4;
    if (data.len() as u64) < u64::from(orig_len) || data.len() <= 60 || d.malformed.is_some() {
        return None;
    }
    let ip = d.ip?;
    if ip.fragment.is_some_and(|f| f.more || f.offset != 0) {
        return None;
    }
    let len = match d.l4 {
        L4::Tcp(t) => t.payload_len as usize,
        L4::Udp { .. } => (ip.payload_len as usize).checked_sub(8)?,
        _ => return None,
    };
    data.get(data.len().checked_sub(len)?..)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS 1.3 ClientHello record offering `sni` and ALPN h2, http/1.1.
    pub(crate) fn client_hello(sni: &str) -> Vec<u8> {
        let mut ext = Vec::new();
        let name = sni.as_bytes();
        let mut sn = vec![0u8];
        sn.extend_from_slice(&(name.len() as u16).to_be_bytes());
        sn.extend_from_slice(name);
        let mut e0 = (sn.len() as u16).to_be_bytes().to_vec();
        e0.extend_from_slice(&sn);
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&(e0.len() as u16).to_be_bytes());
        ext.extend_from_slice(&e0);
        let alpn = b"\x02h2\x08http/1.1";
        ext.extend_from_slice(&[0, 16]);
        ext.extend_from_slice(&((alpn.len() + 2) as u16).to_be_bytes());
        ext.extend_from_slice(&(alpn.len() as u16).to_be_bytes());
        ext.extend_from_slice(alpn);
        ext.extend_from_slice(&[0, 43, 0, 3, 2, 3, 4]);
        ext.extend_from_slice(&[0x0a, 0x0a, 0, 0]); // GREASE
        ext.extend_from_slice(&[0, 21, 0x02, 0x58]);
        ext.extend(std::iter::repeat_n(0u8, 600)); // padding: the hello spans two segments
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02]);
        body.extend_from_slice(&[1, 0]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn a_client_hello_split_over_two_segments_gives_its_names() {
        let rec = client_hello("models.example-hub.io");
        for cut in [5, 40, 300, rec.len() - 1] {
            let mut t = Tracker::default();
            t.observe(0, Some(1000), 443, &rec[..cut]);
            assert!(!t.done(), "cut at {cut}");
            assert_eq!(t.names().sni, None);
            t.observe(0, Some(1000 + cut as u32), 443, &rec[cut..]);
            assert!(t.done());
            let n = t.names();
            assert_eq!(n.app, App::Tls);
            assert_eq!(n.sni.as_deref(), Some("models.example-hub.io"));
            assert_eq!(n.alpn, ["h2", "http/1.1"]);
            let ja4 = n.ja4.as_deref().unwrap();
            // TLS 1.3 (supported_versions), SNI, 2 ciphers, 4 extensions (GREASE out), h2.
            assert!(ja4.starts_with("t13d0204h2_"), "{ja4}");
        }
    }

    /// The index may see a flow's server bytes first (the two directions of a flow lie in
    /// different lanes of the store when their DSCP differs): the client is the side whose
    /// bytes are a client's, whatever came first.
    #[test]
    fn the_server_seen_first_does_not_make_it_the_client() {
        // A ServerHello record (handshake type 2), then the client's ClientHello.
        let mut t = Tracker::default();
        t.observe(1, Some(900), 51000, &[0x16, 3, 3, 0, 4, 2, 0, 0, 0]);
        assert!(!t.done());
        t.observe(0, Some(100), 443, &client_hello("models.example-hub.io"));
        assert!(t.done());
        assert_eq!(t.names().sni.as_deref(), Some("models.example-hub.io"));
        assert_eq!(
            (t.names().client, t.names().server_side()),
            (Some(0), Some(1))
        );
        // An HTTP response first, then the request.
        let mut h = Tracker::default();
        h.observe(0, Some(5), 40000, b"HTTP/1.1 200 OK\r\n\r\n");
        h.observe(
            1,
            Some(9),
            80,
            b"GET / HTTP/1.1\r\nHost: web.example\r\n\r\n",
        );
        assert_eq!(h.names().http_host.as_deref(), Some("web.example"));
        assert_eq!(h.names().client, Some(1));
        // A DNS response first: its peer is the client.
        let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(b"\x03www\x07example\x03com\x00\x00\x01\x00\x01");
        let mut d = Tracker::default();
        d.observe(1, None, 40000, &m);
        assert_eq!(d.names().client, Some(0));
        // A first payload that tells nothing waits for the other side's.
        let mut u = Tracker::default();
        u.observe(1, Some(1), 40000, b"\x00\x01\x02 nothing known");
        assert!(!u.done());
        u.observe(0, Some(1), 22, b"SSH-2.0-OpenSSH_9.6\r\n");
        assert_eq!(u.names().app, App::Ssh);
    }

    #[test]
    fn a_retransmitted_or_reordered_segment_does_not_corrupt_the_stream() {
        let rec = client_hello("a.example");
        let mut t = Tracker::default();
        t.observe(0, Some(1), 443, &rec[..100]);
        t.observe(0, Some(1), 443, &rec[..100]); // retransmission
        t.observe(0, Some(101), 443, &rec[100..]);
        assert_eq!(t.names().sni.as_deref(), Some("a.example"));
    }

    /// Feeds `segs` (direction, sequence number, payload) in the order given, after the
    /// SYNs `syns` (direction, ISN) when `syn_first`, else after the payloads.
    fn fed(syns: &[(usize, u32)], segs: &[(usize, u32, &[u8])], syn_first: bool) -> FlowNames {
        let mut t = Tracker::default();
        if syn_first {
            for &(d, isn) in syns {
                t.syn(d, isn);
            }
        }
        for &(d, seq, p) in segs {
            t.observe(d, Some(seq), 443, p);
        }
        if !syn_first {
            for &(d, isn) in syns {
                t.syn(d, isn);
            }
        }
        t.into_names()
    }

    /// Every order of a flow's segments gives the names the in-order feed gives: a flow's
    /// packets may lie in several lanes' blocks, so the index sees them in an order that
    /// depends on where blocks were cut, not on the packets.
    #[test]
    fn segments_seen_out_of_order_give_the_names_seen_in_order() {
        let rec = client_hello("models.example-hub.io");
        let cut = 300;
        // The server's first bytes: a ServerHello record.
        let sh: &[u8] = &[0x16, 3, 3, 0, 4, 2, 0, 0, 0];
        // A ClientHello split over two segments, then application data.
        let app = [0x17u8, 3, 3, 0, 40]
            .iter()
            .copied()
            .chain([9; 40])
            .collect::<Vec<u8>>();
        let (c, s) = (1000u32, 5000u32);
        let tail = c + 1 + rec.len() as u32;
        let segs: Vec<(usize, u32, &[u8])> = vec![
            (0, c + 1, &rec[..cut]),
            (0, c + 1 + cut as u32, &rec[cut..]),
            (1, s + 1, sh),
            (0, tail, &app),
            (0, tail + app.len() as u32, &app[5..]),
        ];
        let syns = [(0, c), (1, s)];
        let want = fed(&syns, &segs, true);
        assert_eq!(want.sni.as_deref(), Some("models.example-hub.io"));
        assert_eq!((want.app, want.client), (App::Tls, Some(0)));
        // Every order of the five segments, the SYNs before or after them.
        let mut order: Vec<usize> = (0..segs.len()).collect();
        let mut n = 0;
        permute(&mut order, 0, &mut |o| {
            let s: Vec<_> = o.iter().map(|&k| segs[k]).collect();
            for syn_first in [true, false] {
                assert_eq!(
                    fed(&syns, &s, syn_first),
                    want,
                    "order {o:?} syn first {syn_first}"
                );
            }
            // Without the SYNs (a flow seen from its middle on): its lowest sequence
            // number starts the stream.
            assert_eq!(fed(&[], &s, true), want, "order {o:?} without SYNs");
            n += 1;
        });
        assert_eq!(n, 120);
        // Application data from the start of a side, its later segments seen first (each
        // starting mid-record): the application is told from the stream's start.
        let data: Vec<u8> = [0x17u8, 3, 3, 0x05, 0xdc]
            .iter()
            .copied()
            .chain([0x5a; 1500])
            .collect();
        let parts: Vec<(usize, u32, &[u8])> = (0..4)
            .map(|k| {
                (
                    0,
                    c + 1 + 400 * k as u32,
                    &data[400 * k..(400 * k + 400).min(data.len())],
                )
            })
            .chain([(1, s + 1, &[0x5au8; 100][..])])
            .collect();
        let in_order = fed(&syns, &parts, true);
        assert_eq!(in_order.app, App::Tls);
        let reversed: Vec<_> = parts.iter().rev().copied().collect();
        assert_eq!(fed(&syns, &reversed, false), in_order);
        assert_eq!(fed(&syns, &reversed, true), in_order);
        assert_eq!(fed(&[], &reversed, true), in_order);
    }

    /// A ClientHello cut into random pieces (some overlapping, some repeated), fed in a
    /// random order with or without the SYN, always gives its names.
    #[test]
    fn random_cuts_and_orders_of_a_client_hello_give_its_names() {
        let rec = client_hello("a.example-hub.io");
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let isn = u32::MAX - 300; // the sequence numbers wrap inside the hello
        for trial in 0..500 {
            let mut pieces = Vec::new();
            let mut at = 0;
            while at < rec.len() {
                let len = 1 + rnd(400);
                let back = rnd(3).min(at); // overlap the previous piece a little
                let from = at - back;
                let to = (at + len).min(rec.len());
                pieces.push((from, to));
                if rnd(5) == 0 {
                    pieces.push((from, to)); // a retransmission
                }
                at = to;
            }
            for k in (1..pieces.len()).rev() {
                pieces.swap(k, rnd(k + 1));
            }
            if pieces.len() > MAX_PACKETS as usize {
                continue; // more than the cap: not all read, in any order
            }
            let syn = rnd(2) == 0;
            let mut t = Tracker::default();
            let syn_at = rnd(pieces.len() + 1);
            for (k, &(from, to)) in pieces.iter().enumerate() {
                if syn && k == syn_at {
                    t.syn(0, isn);
                }
                let seq = isn.wrapping_add(1).wrapping_add(from as u32);
                t.observe(0, Some(seq), 443, &rec[from..to]);
            }
            if syn && syn_at == pieces.len() {
                t.syn(0, isn);
            }
            let n = t.names();
            assert_eq!(
                n.sni.as_deref(),
                Some("a.example-hub.io"),
                "trial {trial}: {pieces:?}"
            );
        }
    }

    fn permute(v: &mut Vec<usize>, k: usize, f: &mut dyn FnMut(&[usize])) {
        if k == v.len() {
            return f(v);
        }
        for j in k..v.len() {
            v.swap(k, j);
            permute(v, k + 1, f);
            v.swap(k, j);
        }
    }

    /// A ClientHello split over two segments, seen in reverse: read once both are there.
    #[test]
    fn a_client_hello_split_over_two_segments_seen_in_reverse_gives_its_names() {
        let rec = client_hello("models.example-hub.io");
        for cut in [5, 40, 300, rec.len() - 1] {
            for syn in [true, false] {
                let mut t = Tracker::default();
                if syn {
                    t.syn(0, 999);
                }
                t.observe(0, Some(1000 + cut as u32), 443, &rec[cut..]);
                assert!(!t.done(), "cut at {cut}");
                t.observe(0, Some(1000), 443, &rec[..cut]);
                assert!(t.done(), "cut at {cut}, syn {syn}");
                assert_eq!(t.names().sni.as_deref(), Some("models.example-hub.io"));
                assert_eq!(t.names().alpn, ["h2", "http/1.1"]);
            }
        }
    }

    #[test]
    fn room_says_what_observe_would_still_read() {
        // One direction of unknown bytes, the other silent (a bulk transfer and its
        // acknowledgements): room shrinks to none and stays there though never done.
        let mut t = Tracker::default();
        assert_eq!((t.room(0), t.room(1)), (MAX_PACKETS, MAX_PACKETS));
        for k in 0..MAX_PACKETS {
            t.observe(0, Some(1 + k * 100), 5001, &[0xab; 100]);
        }
        assert!(!t.done());
        assert_eq!((t.room(0), t.room(1)), (0, MAX_PACKETS));
        let before = t.clone();
        t.observe(0, Some(1 + MAX_PACKETS * 100), 5001, &[0xab; 100]);
        assert_eq!(
            format!("{t:?}"),
            format!("{before:?}"),
            "a packet without room is not read"
        );
        // The other side's bytes tell nothing either, but without its SYN a payload with a
        // lower sequence number (the stream's true start) may still come: it is read on.
        let mut u = t.clone();
        u.observe(1, Some(1000), 40000, &[0xcd; 100]);
        assert!(!u.done());
        assert_eq!((u.room(0), u.room(1)), (0, MAX_PACKETS - 1));
        // With its SYN, that side's start is known: nothing more to learn.
        t.syn(1, 0);
        t.observe(1, Some(1), 40000, &[0xcd; 100]);
        assert!(t.done());
        assert_eq!((t.room(0), t.room(1)), (0, 0));
    }

    #[test]
    fn names_match_exactly_or_by_suffix() {
        assert!(name_matches("*.example.com", "a.b.Example.com"));
        assert!(!name_matches("*.example.com", "example.com"));
        assert!(!name_matches("*.example.com", "badexample.com"));
        assert!(name_matches("example.com", "EXAMPLE.com."));
        assert!(!name_matches("example.com", "a.example.com"));
    }

    #[test]
    fn dns_answers_name_their_addresses_and_pointer_loops_end() {
        let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0];
        m.extend_from_slice(b"\x03www\x07example\x03com\x00\x00\x01\x00\x01");
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1]);
        m.extend_from_slice(&[0xc0, 12, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16]);
        m.extend_from_slice(&[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let d = dns::parse(&m).unwrap();
        assert_eq!(d.queries, ["www.example.com"]);
        let addrs: Vec<String> = d.answers.iter().map(|(_, a)| a.to_string()).collect();
        assert_eq!(addrs, ["192.0.2.1", "2001:db8::1"]);
        assert_eq!(detect::app(&m, false, 5353), App::Dns);
        // A name that points at itself.
        let mut l = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1];
        assert!(dns::parse(&l).is_none());
        l.truncate(13);
        assert!(dns::parse(&l).is_none());
    }

    #[test]
    fn http_and_ssh_heads_give_host_method_and_versions() {
        let mut t = Tracker::default();
        t.observe(0, Some(7), 8080, b"GET / HTTP/1.1\r\nUser-Agent: x\r\n");
        t.observe(
            0,
            Some(7 + 31),
            8080,
            b"Host: web.example.test:8080\r\n\r\n",
        );
        assert_eq!(t.names().app, App::Http1);
        assert_eq!(
            t.names().http_host.as_deref(),
            Some("web.example.test:8080")
        );
        assert_eq!(t.names().http_method.as_deref(), Some("GET"));
        let mut s = Tracker::default();
        s.observe(1, Some(1), 22, b"SSH-2.0-OpenSSH_9.6 Debian\r\n");
        s.observe(0, Some(9), 50000, b"SSH-2.0-PuTTY_0.80\r\n");
        assert_eq!(s.names().app, App::Ssh);
        assert_eq!(
            s.names().ssh,
            [
                Some("2.0-PuTTY_0.80".into()),
                Some("2.0-OpenSSH_9.6".into())
            ]
        );
        assert!(s.done());
    }
}
