//! The scenario: address plan, traffic sources, and the time-ordered packet queue.
//!
//! Each source ([`Source`]) is asked, one time slice after another, to schedule the packets of
//! whatever activity *starts* in that slice ([`Source::fill`]); it may schedule packets later
//! than the slice (an office session schedules all its packets at once). Packets wait in a
//! [`Queue`] ordered by (timestamp, insertion order); after every slice, everything earlier
//! than the slice's end is emitted. Since nothing scheduled in a slice is earlier than the
//! slice's start, the output is in non-decreasing timestamp order, and ties are broken by
//! insertion order, so the output is a pure function of the configuration.
//!
//! Byte budgets are planned up front as shares of `rate * duration / 8` (see
//! [`Scenario::build`]); the GPU ring takes whatever the other parts leave.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::packet::{
    Endpoint, Flow, FlowDef, FlowKey, Kind, Spec, ACK, DNS_AAAA, DNS_NAMES, DNS_NXDOMAIN,
    DNS_RESPONSE, FIN, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, PSH, RST, RTP_MARKER, SYN,
};
use crate::payload::{tls_fit_len, Content, TLS_HDR};
use crate::rng::Rng;
use crate::SynthConfig;

/// Number of GPU nodes (10.10.0.1 ..= 10.10.0.8).
pub(crate) const GPU_NODES: usize = 8;
/// NCCL-like rendezvous / ring port.
const GPU_PORT: u16 = 29500;
/// NFS.
const NFS_PORT: u16 = 2049;
/// The rogue hosts' bulk port (iperf3's default).
const ROGUE_PORT: u16 = 5201;
/// Conferencing server's media port.
const VIDEO_PORT: u16 = 8801;
/// Per-mille of a normal GPU node's ring bytes that the straggler sends.
const STRAGGLER_PERMILLE: u64 = 600;
/// Number of NFS servers (10.20.0.10 ..).
const NFS_SERVERS: u8 = 4;
/// Number of rogue hosts (10.30.0.11 ..= 10.30.0.13).
const ROGUES: u8 = 3;

const VLAN_VOICE: u16 = 100;
const VLAN_OFFICE: u16 = 200;
const VLAN_LAB: u16 = 300;

const DSCP_CS0: u8 = 0;
const DSCP_AF11: u8 = 10;
const DSCP_AF31: u8 = 26;
const DSCP_AF41: u8 = 34;
const DSCP_EF: u8 = 46;

/// The default gateway / border router's MAC: the L2 peer of every outside address.
const ROUTER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0xfe];

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const SEC: u64 = 1_000_000_000;

/// Scaled receive windows (window scale 7: x128).
const WIN_BULK_RX: u16 = 8192; // 1 MiB
const WIN_WAN_RX: u16 = 32768; // 4 MiB
const WIN_CLIENT: u16 = 4096; // 512 KiB
const WIN_SERVER: u16 = 1024; // 128 KiB
const WIN_SYN: u16 = 64240;
const WIN_SYNACK: u16 = 65160;

const TLS_RECORD: u32 = 16384 + 24;

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn v6(segs: [u16; 8]) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(
        segs[0], segs[1], segs[2], segs[3], segs[4], segs[5], segs[6], segs[7],
    ))
}

/// Locally administered MAC derived from an inside address; outside addresses sit behind the
/// router.
fn mac_of(ip: IpAddr) -> [u8; 6] {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            if o[0] == 10 {
                [0x02, 0x00, o[0], o[1], o[2], o[3]]
            } else {
                ROUTER_MAC
            }
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            if o[0] == 0xfd {
                [0x02, 0x01, o[12], o[13], o[14], o[15]]
            } else {
                ROUTER_MAC
            }
        }
    }
}

/// The one port of the dynamic range that Wireshark 4.0 decodes by default (IRC).
const AVOID_PORT: u16 = 57000;

/// A dynamic (ephemeral) port, 49152-65535, that no Wireshark dissector claims by port
/// number: where the server port has no dissector either (29500, 5201, 2049), the client port
/// decides, and a dissector claiming bf16 payload would report it malformed.
fn ephemeral(rng: &mut Rng) -> u16 {
    let p = 49152 + rng.below(16384) as u16;
    if p == AVOID_PORT {
        p + 1
    } else {
        p
    }
}

fn ep(ip: IpAddr, port: u16) -> Endpoint {
    Endpoint {
        mac: mac_of(ip),
        ip,
        port,
    }
}

/// All flows of the run, with an index by truth key.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) flows: Vec<Flow>,
    index: HashMap<FlowKey, u32>,
    rng: Rng,
}

/// Both directions of a TCP connection and their initial sequence numbers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conn {
    pub(crate) c2s: u32,
    pub(crate) s2c: u32,
    pub(crate) c_isn: u32,
    pub(crate) s_isn: u32,
}

/// What a TCP connection is made of.
#[derive(Debug, Clone)]
struct ConnDef {
    vlan: Option<(u16, u8)>,
    client: Endpoint,
    server: Endpoint,
    dscp_c: u8,
    dscp_s: u8,
    ttl_c: u8,
    ttl_s: u8,
    content_c: Content,
    content_s: Content,
    mss: u16,
}

impl World {
    fn new(seed: u64) -> World {
        World {
            flows: Vec::new(),
            index: HashMap::new(),
            rng: Rng::derive(seed, 0xf10),
        }
    }

    /// Adds a flow, unless one with the same truth key exists.
    fn try_add(&mut self, mut def: FlowDef) -> Option<u32> {
        def.salt = self.rng.next_u64();
        let ip_id = self.rng.next_u32() as u16;
        let f = Flow::new(def, ip_id);
        if self.index.contains_key(&f.key) {
            return None;
        }
        let id = self.flows.len() as u32;
        self.index.insert(f.key, id);
        self.flows.push(f);
        Some(id)
    }

    /// Adds a flow whose key is unique by construction of the address plan.
    fn add(&mut self, def: FlowDef) -> u32 {
        let key = format!("{:?} -> {:?}", def.src.ip, def.dst.ip);
        match self.try_add(def) {
            Some(id) => id,
            None => panic!("duplicate planned flow {key}"),
        }
    }

    /// Adds both directions of a TCP connection, moving the client port on a clash.
    fn tcp_conn(&mut self, mut d: ConnDef) -> Conn {
        loop {
            let c2s = FlowDef {
                vlan: d.vlan,
                src: d.client,
                dst: d.server,
                proto: PROTO_TCP,
                dscp: d.dscp_c,
                ttl: d.ttl_c,
                kind: Kind::Tcp {
                    content: d.content_c.clone(),
                    mss: d.mss,
                },
                salt: 0,
            };
            let s2c = FlowDef {
                vlan: d.vlan,
                src: d.server,
                dst: d.client,
                proto: PROTO_TCP,
                dscp: d.dscp_s,
                ttl: d.ttl_s,
                kind: Kind::Tcp {
                    content: d.content_s.clone(),
                    mss: d.mss,
                },
                salt: 0,
            };
            if let Some(a) = self.try_add(c2s) {
                if let Some(b) = self.try_add(s2c) {
                    return Conn {
                        c2s: a,
                        s2c: b,
                        c_isn: self.rng.next_u32(),
                        s_isn: self.rng.next_u32(),
                    };
                }
            }
            // Clash with an earlier connection: take the next ephemeral port.
            d.client.port = if d.client.port >= 49152 {
                let p = 49152 + (d.client.port - 49152 + 1) % 16384;
                if p == AVOID_PORT {
                    p + 1
                } else {
                    p
                }
            } else {
                d.client.port.wrapping_add(1)
            };
        }
    }

    fn frame_len(&self, s: &Spec) -> u64 {
        self.flows[s.flow as usize].frame_len(s) as u64
    }
}

/// A spec waiting in the queue.
#[derive(Debug)]
struct Entry {
    ts: u64,
    ctr: u64,
    spec: Spec,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.ts, self.ctr) == (o.ts, o.ctr)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap, we want the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.ts, o.ctr).cmp(&(self.ts, self.ctr))
    }
}

/// Packets scheduled but not yet emitted, earliest first.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    heap: BinaryHeap<Entry>,
    ctr: u64,
    /// Start of the current slice: nothing may be scheduled earlier.
    floor: u64,
}

impl Queue {
    /// Schedules a packet (at the slice start at the earliest).
    pub(crate) fn push(&mut self, mut s: Spec) {
        s.ts = s.ts.max(self.floor);
        self.ctr += 1;
        self.heap.push(Entry {
            ts: s.ts,
            ctr: self.ctr,
            spec: s,
        });
    }

    /// The next packet earlier than `t`, if any.
    pub(crate) fn pop_before(&mut self, t: u64) -> Option<Spec> {
        if self.heap.peek().is_some_and(|e| e.ts < t) {
            self.heap.pop().map(|e| e.spec)
        } else {
            None
        }
    }

    pub(crate) fn set_floor(&mut self, t: u64) {
        self.floor = t;
    }
}

/// Something that produces packets over time.
pub(crate) trait Source {
    /// Schedules the packets of activity that starts in `t0..t1`.
    fn fill(&mut self, t0: u64, t1: u64, w: &mut World, q: &mut Queue);
}

/// Helper to build TCP specs for one connection.
#[allow(clippy::too_many_arguments)]
fn tcp(ts: u64, flow: u32, seq: u32, ack: u32, flags: u8, win: u16, off: u64, len: u32) -> Spec {
    Spec {
        ts,
        off,
        flow,
        seq,
        ack,
        len,
        win,
        flags,
    }
}

// ---------------------------------------------------------------------------------------------
// Bulk TCP: GPU ring, checkpoints, rogue bulk, exfil.

/// A period of sending `bytes` with about `gap` ns between segments.
#[derive(Debug, Clone, Copy)]
struct Burst {
    start: u64,
    bytes: u64,
    gap: u64,
}

/// A long-lived one-way TCP transfer in bursts; the receiver only ACKs (every second segment
/// and the last of a burst).
#[derive(Debug)]
struct BulkTcp {
    conn: Conn,
    rng: Rng,
    open_at: u64,
    rtt: u64,
    ack_delay: u64,
    bursts: Vec<Burst>,
    idx: usize,
    left: u64,
    next: u64,
    sent: u64,
    segs: u32,
    mss: u32,
    win_c: u16,
    win_s: u16,
    close: bool,
    opened: bool,
    closed: bool,
    /// Time of the last data segment.
    last: u64,
    /// Time of the last ACK: ACKs keep their order whatever the jitter.
    last_ack: u64,
    fin_at: Option<u64>,
}

impl BulkTcp {
    fn new(conn: Conn, seed: u64, open_at: u64, rtt: u64, mss: u16, bursts: Vec<Burst>) -> Self {
        BulkTcp {
            conn,
            rng: Rng::derive(seed, 0xb01c ^ (u64::from(conn.c2s) << 20)),
            open_at,
            rtt,
            ack_delay: rtt / 2,
            bursts,
            idx: 0,
            left: 0,
            next: 0,
            sent: 0,
            segs: 0,
            mss: u32::from(mss),
            win_c: WIN_SERVER,
            win_s: WIN_BULK_RX,
            close: true,
            opened: false,
            closed: false,
            last: open_at,
            last_ack: open_at,
            fin_at: None,
        }
    }
}

impl Source for BulkTcp {
    fn fill(&mut self, _t0: u64, t1: u64, _w: &mut World, q: &mut Queue) {
        let c = self.conn;
        if !self.opened {
            if self.open_at >= t1 {
                return;
            }
            self.opened = true;
            let t = self.open_at;
            let d = self.rng.range(5 * US, 20 * US);
            q.push(tcp(t, c.c2s, c.c_isn, 0, SYN, WIN_SYN, 0, 0));
            q.push(tcp(
                t + self.rtt,
                c.s2c,
                c.s_isn,
                c.c_isn.wrapping_add(1),
                SYN | ACK,
                WIN_SYNACK,
                0,
                0,
            ));
            let ta = t + self.rtt + d;
            q.push(tcp(
                ta,
                c.c2s,
                c.c_isn.wrapping_add(1),
                c.s_isn.wrapping_add(1),
                ACK,
                self.win_c,
                0,
                0,
            ));
            self.last = ta;
        }
        let seq0 = c.c_isn.wrapping_add(1);
        let sack = c.s_isn.wrapping_add(1);
        while self.idx < self.bursts.len() {
            let b = self.bursts[self.idx];
            if self.left == 0 {
                if b.start >= t1 {
                    return;
                }
                self.left = b.bytes;
                self.next = b.start.max(self.last + 1);
            }
            while self.left > 0 && self.next < t1 {
                let n = self.left.min(u64::from(self.mss));
                let t = self.next;
                let seq = seq0.wrapping_add(self.sent as u32);
                let flags = if n == self.left { ACK | PSH } else { ACK };
                q.push(tcp(
                    t, c.c2s, seq, sack, flags, self.win_c, self.sent, n as u32,
                ));
                self.sent += n;
                self.left -= n;
                self.segs += 1;
                self.last = t;
                if self.segs == 2 || self.left == 0 {
                    self.segs = 0;
                    let ta = (t + self.rng.jitter(self.ack_delay, 200)).max(self.last_ack + 1);
                    self.last_ack = ta;
                    let ack = seq0.wrapping_add(self.sent as u32);
                    q.push(tcp(ta, c.s2c, sack, ack, ACK, self.win_s, 0, 0));
                }
                self.next = t + self.rng.jitter(b.gap, 150).max(1);
            }
            if self.left == 0 {
                self.idx += 1;
            } else {
                return;
            }
        }
        if self.close && !self.closed {
            let tf = match self.fin_at {
                Some(t) => t,
                None => {
                    let t =
                        self.last_ack.max(self.last + self.rtt) + self.rng.range(50 * US, 500 * US);
                    self.fin_at = Some(t);
                    t
                }
            };
            if tf < t1 {
                self.closed = true;
                let fseq = seq0.wrapping_add(self.sent as u32);
                q.push(tcp(tf, c.c2s, fseq, sack, FIN | ACK, self.win_c, 0, 0));
                let ts = tf + self.rtt;
                q.push(tcp(
                    ts,
                    c.s2c,
                    sack,
                    fseq.wrapping_add(1),
                    FIN | ACK,
                    self.win_s,
                    0,
                    0,
                ));
                let d = self.rng.range(5 * US, 20 * US);
                q.push(tcp(
                    ts + d,
                    c.c2s,
                    fseq.wrapping_add(1),
                    sack.wrapping_add(1),
                    ACK,
                    self.win_c,
                    0,
                    0,
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// RTP: voice (EF) and video (AF41).

#[derive(Debug)]
struct RtpStream {
    flow: u32,
    next: u64,
    seq: u32,
    rtp_ts: u32,
    off: u64,
    first: bool,
}

/// Constant-rate RTP streams: `per_frame` packets of `len` media bytes every `interval`.
#[derive(Debug)]
struct RtpSource {
    streams: Vec<RtpStream>,
    rng: Rng,
    interval: u64,
    per_frame: u32,
    len: u32,
    ts_step: u32,
    pkt_gap: u64,
    jitter: u64,
}

impl Source for RtpSource {
    fn fill(&mut self, _t0: u64, t1: u64, _w: &mut World, q: &mut Queue) {
        for s in &mut self.streams {
            while s.next < t1 {
                let base = s.next + self.rng.below(self.jitter);
                for k in 0..self.per_frame {
                    let last = k + 1 == self.per_frame;
                    let marker = (self.per_frame > 1 && last) || (self.per_frame == 1 && s.first);
                    q.push(Spec {
                        ts: base + u64::from(k) * self.pkt_gap,
                        off: s.off,
                        flow: s.flow,
                        seq: s.seq,
                        ack: s.rtp_ts,
                        len: self.len,
                        win: 0,
                        flags: if marker { RTP_MARKER } else { 0 },
                    });
                    s.seq = s.seq.wrapping_add(1) & 0xffff;
                    s.off += u64::from(self.len);
                }
                s.first = false;
                s.rtp_ts = s.rtp_ts.wrapping_add(self.ts_step);
                s.next += self.interval;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Office web sessions.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Impair {
    None,
    Retransmit,
    ZeroWindow,
    Reset,
}

#[derive(Debug)]
struct Office {
    rng: Rng,
    /// Bytes still to plan, times `SEC`-scaled slice credit (may go negative).
    credit: i128,
    per_ns: u128,
    gen_end: u64,
    n: u64,
    min_resp: u64,
    max_resp: u64,
}

fn office_client_v4(rng: &mut Rng) -> IpAddr {
    v4(10, 50, 1 + rng.below(4) as u8, 10 + rng.below(240) as u8)
}

fn office_client_v6(rng: &mut Rng) -> IpAddr {
    v6([0xfd00, 0x50, 0, 0, 0, 0, 1, 0x10 + rng.below(0x2f0) as u16])
}

/// Collects a session's packets and counts their bytes.
struct Plan<'a> {
    w: &'a World,
    q: &'a mut Queue,
    bytes: u64,
}

impl Plan<'_> {
    fn push(&mut self, s: Spec) {
        self.bytes += self.w.frame_len(&s);
        self.q.push(s);
    }
}

impl Office {
    fn session(&mut self, t: u64, w: &mut World, q: &mut Queue) -> u64 {
        let rng = &mut self.rng;
        let k = self.n;
        self.n += 1;
        // The first sessions show every impairment and IPv6, however short the run.
        let (impair, is_v6) = match k {
            0 => (Impair::Retransmit, false),
            1 => (Impair::ZeroWindow, false),
            2 => (Impair::Reset, false),
            3 => (Impair::None, true),
            4 => (Impair::Retransmit, true),
            _ => {
                let r = rng.below(1000);
                let imp = match r {
                    0..=79 => Impair::Retransmit,
                    80..=119 => Impair::ZeroWindow,
                    120..=169 => Impair::Reset,
                    _ => Impair::None,
                };
                (imp, rng.chance(250))
            }
        };
        let forced = k < 5;
        // Server: (address, port, external?).
        let (server, port, external) = if is_v6 {
            if k == 3 || rng.chance(300) {
                (v6([0xfd00, 0x50, 0x100, 0, 0, 0, 0, 0x10]), 80, false)
            } else {
                (v6([0xfd00, 0x50, 0x100, 0, 0, 0, 0, 0x20]), 443, false)
            }
        } else {
            match (k, rng.below(10)) {
                (1, _) | (5.., 0..=2) => (v4(10, 50, 100, 10), 80, false),
                (0, _) | (5.., 3..=5) => (v4(10, 50, 100, 20), 443, false),
                _ => (v4(198, 51, 100, 10 + rng.below(50) as u8), 443, true),
            }
        };
        let client = if is_v6 {
            office_client_v6(rng)
        } else {
            office_client_v4(rng)
        };
        let mss: u16 = if is_v6 { 1440 } else { 1460 };
        let rtt = if external {
            rng.range(8 * MS, 40 * MS)
        } else {
            rng.range(200 * US, 2 * MS)
        };
        let mut resp = rng.log_uniform(self.min_resp, self.max_resp);
        if forced {
            resp = resp.max(12_000);
        }
        let (content_c, content_s, req_len, resp_len) = if port == 80 {
            let host = if is_v6 {
                "intranet6.corp.example"
            } else {
                "intranet.corp.example"
            };
            let req = format!(
                "GET /{}/{}-{}.html HTTP/1.1\r\nHost: {host}\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\nAccept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: identity\r\nConnection: keep-alive\r\n\r\n",
                ["reports", "wiki", "tickets", "news", "docs", "team"][rng.below(6) as usize],
                ["index", "page", "summary", "view", "list"][rng.below(5) as usize],
                rng.below(100_000)
            );
            let body = resp;
            let head = format!(
                "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0\r\nDate: Mon, 30 Nov 2026 02:00:00 GMT\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {body}\r\nConnection: keep-alive\r\nCache-Control: max-age=60\r\n\r\n"
            );
            let rl = req.len() as u64;
            let sl = head.len() as u64 + body;
            (
                Content::Http {
                    prefix: req.into_bytes().into_boxed_slice(),
                },
                Content::Http {
                    prefix: head.into_bytes().into_boxed_slice(),
                },
                rl,
                sl,
            )
        } else {
            let rl = tls_fit_len(rng.range(200, u64::from(mss) - TLS_HDR), TLS_RECORD);
            let sl = tls_fit_len(resp, TLS_RECORD);
            (
                Content::Tls {
                    record: TLS_RECORD,
                    len: rl,
                },
                Content::Tls {
                    record: TLS_RECORD,
                    len: sl,
                },
                rl,
                sl,
            )
        };
        let conn = w.tcp_conn(ConnDef {
            vlan: Some((VLAN_OFFICE, 0)),
            client: ep(client, ephemeral(rng)),
            server: ep(server, port),
            dscp_c: DSCP_CS0,
            dscp_s: DSCP_CS0,
            ttl_c: 64,
            ttl_s: if external {
                52 + rng.below(6) as u8
            } else {
                64
            },
            content_c,
            content_s,
            mss,
        });
        let rng = &mut self.rng;
        let mut p = Plan { w, q, bytes: 0 };
        let (c2s, s2c) = (conn.c2s, conn.s2c);
        let cs = |off: u64| conn.c_isn.wrapping_add(1).wrapping_add(off as u32);
        let ss = |off: u64| conn.s_isn.wrapping_add(1).wrapping_add(off as u32);
        let dly = |rng: &mut Rng| rng.range(15 * US, 60 * US);

        // Handshake.
        p.push(tcp(t, c2s, conn.c_isn, 0, SYN, WIN_SYN, 0, 0));
        let t_sa = t + rtt;
        p.push(tcp(
            t_sa,
            s2c,
            conn.s_isn,
            cs(0),
            SYN | ACK,
            WIN_SYNACK,
            0,
            0,
        ));
        let mut now = t_sa + dly(rng);
        p.push(tcp(now, c2s, cs(0), ss(0), ACK, WIN_CLIENT, 0, 0));
        // Request (fits one segment).
        now += rng.range(5 * US, 80 * US);
        p.push(tcp(
            now,
            c2s,
            cs(0),
            ss(0),
            ACK | PSH,
            WIN_CLIENT,
            0,
            req_len as u32,
        ));
        let req_ack = cs(req_len);
        // Response train.
        let mss = u64::from(mss);
        let nseg = resp_len.div_ceil(mss);
        let gap = rng.range(40 * US, 250 * US);
        let pick = |rng: &mut Rng, lo: u64, hi: u64| {
            if hi > lo {
                Some(rng.range(lo, hi))
            } else {
                None
            }
        };
        let lost = match impair {
            // Tail loss: one of the last two segments is lost past the capture point, too few
            // duplicate ACKs follow for a fast retransmit, and the server resends it on its
            // retransmission timeout (200 ms + RTT). (Wireshark reports a fast retransmission
            // into a PDU it is still reassembling - HTTP body, TLS record - as an overlap
            // error, so the retransmission comes after the whole response.)
            Impair::Retransmit => pick(rng, nseg.saturating_sub(2).max(1), nseg),
            _ => None,
        };
        let zw = match impair {
            Impair::ZeroWindow => pick(rng, 2, nseg.saturating_sub(2)),
            _ => None,
        };
        let rst = match impair {
            Impair::Reset => pick(rng, nseg / 3, nseg.saturating_sub(1)),
            _ => None,
        };
        let mut next = now + rtt + rng.range(100 * US, 3 * MS);
        let mut recv_end = 0u64; // highest byte received by the client
        let mut hole: Option<u64> = None; // stream offset the client is missing
        let mut unacked = 0;
        let mut last_t = next;
        for i in 0..nseg {
            let off = i * mss;
            let n = mss.min(resp_len - off);
            let last = i + 1 == nseg;
            let flags = if last { ACK | PSH } else { ACK };
            p.push(tcp(
                next,
                s2c,
                ss(off),
                req_ack,
                flags,
                WIN_SERVER,
                off,
                n as u32,
            ));
            last_t = next;
            recv_end = off + n;
            let ta = next + dly(rng);
            if lost == Some(i) {
                hole = Some(off);
            } else if let Some(h) = hole {
                // A segment past the hole draws a duplicate ACK.
                p.push(tcp(ta, c2s, req_ack, ss(h), ACK, WIN_CLIENT, 0, 0));
            } else {
                unacked += 1;
                if zw == Some(i) {
                    // The client's buffer is full: ACK with window 0, a zero-window probe,
                    // then a window update, and the train resumes.
                    p.push(tcp(ta, c2s, req_ack, ss(recv_end), ACK, 0, 0, 0));
                    let pause = rng.range(20 * MS, 80 * MS);
                    let tp = ta + rtt + pause / 2;
                    p.push(tcp(
                        tp,
                        s2c,
                        ss(recv_end),
                        req_ack,
                        ACK,
                        WIN_SERVER,
                        recv_end,
                        1,
                    ));
                    let tpa = tp + dly(rng);
                    p.push(tcp(tpa, c2s, req_ack, ss(recv_end), ACK, 0, 0, 0));
                    let tu = ta + pause;
                    p.push(tcp(
                        tu.max(tpa + 1),
                        c2s,
                        req_ack,
                        ss(recv_end),
                        ACK,
                        WIN_CLIENT,
                        0,
                        0,
                    ));
                    next = tu.max(tpa + 1) + rtt;
                    unacked = 0;
                    continue;
                }
                if unacked == 2 || last {
                    p.push(tcp(ta, c2s, req_ack, ss(recv_end), ACK, WIN_CLIENT, 0, 0));
                    unacked = 0;
                }
            }
            if rst == Some(i) {
                // The user navigates away: the browser resets the connection.
                p.push(tcp(ta + 1, c2s, req_ack, ss(recv_end), RST | ACK, 0, 0, 0));
                return p.bytes;
            }
            next += rng.jitter(gap, 200).max(1);
        }
        if let Some(off) = hole {
            let rt = last_t + 200 * MS + rtt;
            let len = mss.min(resp_len - off);
            p.push(tcp(
                rt,
                s2c,
                ss(off),
                req_ack,
                ACK,
                WIN_SERVER,
                off,
                len as u32,
            ));
            last_t = rt + dly(rng);
            p.push(tcp(
                last_t,
                c2s,
                req_ack,
                ss(recv_end),
                ACK,
                WIN_CLIENT,
                0,
                0,
            ));
        }
        // Client closes after an idle moment.
        let tf = last_t + rng.range(MS, 30 * MS);
        p.push(tcp(
            tf,
            c2s,
            req_ack,
            ss(resp_len),
            FIN | ACK,
            WIN_CLIENT,
            0,
            0,
        ));
        let ts = tf + rtt;
        p.push(tcp(
            ts,
            s2c,
            ss(resp_len),
            req_ack.wrapping_add(1),
            FIN | ACK,
            WIN_SERVER,
            0,
            0,
        ));
        let tl = ts + dly(rng);
        p.push(tcp(
            tl,
            c2s,
            req_ack.wrapping_add(1),
            ss(resp_len).wrapping_add(1),
            ACK,
            WIN_CLIENT,
            0,
            0,
        ));
        p.bytes
    }
}

impl Source for Office {
    fn fill(&mut self, t0: u64, t1: u64, w: &mut World, q: &mut Queue) {
        if t0 >= self.gen_end {
            return;
        }
        self.credit += (self.per_ns * u128::from(t1 - t0)) as i128;
        while self.credit > 0 {
            let t = t0 + self.rng.below(t1 - t0);
            let b = self.session(t, w, q);
            self.credit -= i128::from(b) * i128::from(SEC);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// DNS.

#[derive(Debug)]
struct Dns {
    rng: Rng,
    qps: u64,
    credit: u64,
}

impl Source for Dns {
    fn fill(&mut self, t0: u64, t1: u64, w: &mut World, q: &mut Queue) {
        self.credit += self.qps * (t1 - t0);
        while self.credit >= SEC {
            self.credit -= SEC;
            let rng = &mut self.rng;
            let t = t0 + rng.below(t1 - t0);
            let is_v6 = rng.chance(200);
            let (client, server) = if is_v6 {
                (
                    office_client_v6(rng),
                    v6([0xfd00, 0x50, 0, 0, 0, 0, 0, 0x53]),
                )
            } else {
                (office_client_v4(rng), v4(10, 50, 0, 53))
            };
            let (c2s, s2c) = loop {
                let c = ep(client, 1024 + rng.below(64_512) as u16);
                let s = ep(server, 53);
                let def = |src, dst| FlowDef {
                    vlan: Some((VLAN_OFFICE, 0)),
                    src,
                    dst,
                    proto: PROTO_UDP,
                    dscp: DSCP_CS0,
                    ttl: 64,
                    kind: Kind::Dns,
                    salt: 0,
                };
                if let Some(a) = w.try_add(def(c, s)) {
                    if let Some(b) = w.try_add(def(s, c)) {
                        break (a, b);
                    }
                }
            };
            let name =
                rng.below(DNS_NAMES.len() as u64) + DNS_NAMES.len() as u64 * rng.below(1 << 20);
            let mut flags = 0;
            if rng.chance(if is_v6 { 700 } else { 150 }) {
                flags |= DNS_AAAA;
            }
            let id = rng.next_u32() & 0xffff;
            let mk = |ts, flow, flags| Spec {
                ts,
                off: name,
                flow,
                seq: id,
                ack: 0,
                len: 0,
                win: 0,
                flags,
            };
            q.push(mk(t, c2s, flags));
            let nx = if rng.chance(80) { DNS_NXDOMAIN } else { 0 };
            let tr = t + rng.range(150 * US, 4 * MS);
            q.push(mk(tr, s2c, flags | DNS_RESPONSE | nx));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ICMP, ICMPv6 (echo and neighbour discovery) and ARP, on a fixed tick.

#[derive(Debug)]
struct Misc {
    rng: Rng,
    period: u64,
    next: u64,
    tick: u32,
    /// (request flow, reply flow, echo id) for ICMP and ICMPv6 echo.
    pings: Vec<(u32, u32, u16, u8)>,
    /// (solicitation flow, advertisement flow).
    ndp: (u32, u32),
    /// (request flow, reply flow) pairs of ARP.
    arps: Vec<(u32, u32)>,
}

impl Source for Misc {
    fn fill(&mut self, _t0: u64, t1: u64, _w: &mut World, q: &mut Queue) {
        while self.next < t1 {
            let t = self.next;
            let rng = &mut self.rng;
            let seq = self.tick + 1;
            for (i, &(req, rep, id, req_type)) in self.pings.iter().enumerate() {
                let ts = t + i as u64 * 2 * MS + rng.below(500 * US);
                let mk = |ts, flow, ty| Spec {
                    ts,
                    off: 0,
                    flow,
                    seq: (u32::from(id) << 16) | (seq & 0xffff),
                    ack: 0,
                    len: 56,
                    win: 0,
                    flags: ty,
                };
                q.push(mk(ts, req, req_type));
                let reply_type = if req_type == 8 { 0 } else { 129 };
                q.push(mk(ts + rng.range(80 * US, 600 * US), rep, reply_type));
            }
            let nd = |ts, flow, ty| Spec {
                ts,
                flow,
                flags: ty,
                ..Spec::default()
            };
            if self.tick & 3 == 0 {
                let ts = t + rng.below(MS);
                q.push(nd(ts, self.ndp.0, 135));
                q.push(nd(ts + rng.range(30 * US, 300 * US), self.ndp.1, 136));
            }
            let (a, b) = self.arps[self.tick as usize % self.arps.len()];
            let ts = t + 3 * MS + rng.below(MS);
            q.push(nd(ts, a, 0));
            q.push(nd(ts + rng.range(20 * US, 200 * US), b, 0));
            self.tick += 1;
            self.next += self.rng.jitter(self.period, 20);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Building the scenario.

/// The planted facts, as addresses.
#[derive(Debug)]
pub(crate) struct Planted {
    pub(crate) straggler: usize,
    pub(crate) exfil: Conn,
}

/// Every source of the run, its flows and what was planted.
pub(crate) struct Scenario {
    pub(crate) world: World,
    pub(crate) sources: Vec<Box<dyn Source>>,
    pub(crate) planted: Planted,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("flows", &self.world.flows.len())
            .field("sources", &self.sources.len())
            .field("planted", &self.planted)
            .finish()
    }
}

/// GPU node `i` (0-based): 10.10.0.(i+1).
pub(crate) fn gpu_ip(i: usize) -> IpAddr {
    v4(10, 10, 0, i as u8 + 1)
}

/// Rogue host `i` (0-based): 10.30.0.(11+i).
pub(crate) fn rogue_ip(i: u8) -> IpAddr {
    v4(10, 30, 0, 11 + i)
}

/// Model store and the outside address it leaks to.
pub(crate) const EXFIL_SRC: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 5);
pub(crate) const EXFIL_DST: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 77);
pub(crate) const EXFIL_PORT: u16 = 443;
pub(crate) const VOICE_SUBNET: &str = "10.40.0.0/24";
pub(crate) const STORAGE_SUBNET: &str = "10.20.0.0/24";

/// Frame bytes -> TCP payload bytes for a bulk sender with `hdr`-byte headers, `mss`
/// segments and one ACK per two segments.
fn payload_for(frame_bytes: u64, hdr: u64, mss: u64) -> u64 {
    (u128::from(frame_bytes) * u128::from(mss) * 2 / u128::from(2 * (hdr + mss) + hdr)) as u64
}

fn per_mille(x: u64, pm: u64) -> u64 {
    mul_div(x, pm, 1000)
}

/// `a * b / c` without intermediate overflow.
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    (u128::from(a) * u128::from(b) / u128::from(c.max(1))) as u64
}

impl Scenario {
    /// Plans the run. Shares of the byte target `T = rate * duration / 8`: office web 12%,
    /// rogue bulk 9%, checkpoints 8%, exfil 6%, video 2%, voice 1.5% (whole calls, at least
    /// one), DNS and ICMP/ARP by rate; the GPU ring gets the rest (about 60%).
    pub(crate) fn build(cfg: &SynthConfig) -> Scenario {
        let seed = cfg.seed;
        let start = cfg.start_ns;
        let dur = cfg.duration_ns;
        let target = (u128::from(cfg.rate_bps) * u128::from(dur) / 8 / u128::from(SEC)) as u64;
        let bytes_per_sec = cfg.rate_bps / 8;
        let mut w = World::new(seed);
        let mut rng = Rng::derive(seed, 0x5ce4);
        let mut sources: Vec<Box<dyn Source>> = Vec::new();
        let mut planned = 0u64;

        // ---- Voice: G.711 calls between phones and the PBX, EF, VLAN 100.
        let voice_frame = 18 + 20 + 8 + 12 + 160;
        let call_rate = 2 * 50 * voice_frame; // bytes per second per call
        let calls = (per_mille(bytes_per_sec, 15) / call_rate).clamp(1, 100);
        let pbx = v4(10, 40, 0, 2);
        let mut streams = Vec::new();
        for i in 0..calls {
            let phone = v4(10, 40, 0, 10 + i as u8);
            let a = ep(phone, 16384 + 2 * i as u16);
            let b = ep(pbx, 24000 + 2 * i as u16);
            let phase = rng.below(20 * MS);
            for (src, dst) in [(a, b), (b, a)] {
                let flow = w.add(FlowDef {
                    vlan: Some((VLAN_VOICE, 5)),
                    src,
                    dst,
                    proto: PROTO_UDP,
                    dscp: DSCP_EF,
                    ttl: 64,
                    kind: Kind::Rtp {
                        pt: 0,
                        ssrc: rng.next_u32(),
                        content: Content::Gradient,
                    },
                    salt: 0,
                });
                streams.push(RtpStream {
                    flow,
                    next: start + phase + rng.below(MS),
                    seq: rng.next_u32() & 0xffff,
                    rtp_ts: rng.next_u32(),
                    off: 0,
                    first: true,
                });
            }
        }
        planned += mul_div(calls * call_rate, dur, SEC);
        sources.push(Box::new(RtpSource {
            streams,
            rng: Rng::derive(seed, 0x701ce),
            interval: 20 * MS,
            per_frame: 1,
            len: 160,
            ts_step: 160,
            pkt_gap: 0,
            jitter: 400 * US,
        }));

        // ---- Video: conferencing between office clients and an SFU, AF41, VLAN 200.
        let video_frame = 18 + 20 + 8 + 12 + 1188;
        let video_rate = per_mille(bytes_per_sec, 20);
        let pairs = (video_rate / 250_000).clamp(1, 16);
        let pps = (video_rate / (pairs * 2 * video_frame)).max(5);
        let (interval, per_frame) = if pps >= 30 {
            (SEC / 30, (pps / 30) as u32)
        } else {
            (SEC / pps, 1)
        };
        let sfu = v4(10, 50, 100, 30);
        let mut streams = Vec::new();
        for i in 0..pairs {
            let client = v4(10, 50, 2, 100 + i as u8);
            let a = ep(client, 50000 + 2 * i as u16);
            let b = ep(sfu, VIDEO_PORT);
            for (src, dst) in [(a, b), (b, a)] {
                let flow = w.add(FlowDef {
                    vlan: Some((VLAN_OFFICE, 4)),
                    src,
                    dst,
                    proto: PROTO_UDP,
                    dscp: DSCP_AF41,
                    ttl: 64,
                    kind: Kind::Rtp {
                        pt: 96,
                        ssrc: rng.next_u32(),
                        content: Content::Random,
                    },
                    salt: 0,
                });
                streams.push(RtpStream {
                    flow,
                    next: start + rng.below(interval),
                    seq: rng.next_u32() & 0xffff,
                    rtp_ts: rng.next_u32(),
                    off: 0,
                    first: true,
                });
            }
        }
        planned += mul_div(
            pairs * 2 * u64::from(per_frame) * video_frame,
            dur,
            interval,
        );
        sources.push(Box::new(RtpSource {
            streams,
            rng: Rng::derive(seed, 0x71de0),
            interval,
            per_frame,
            len: 1188,
            ts_step: 3000,
            pkt_gap: 40 * US,
            jitter: 2 * MS,
        }));

        // ---- DNS.
        let qps = (cfg.rate_bps / 10_000_000).clamp(10, 100);
        planned += mul_div(qps * 200, dur, SEC);
        sources.push(Box::new(Dns {
            rng: Rng::derive(seed, 0xd45),
            qps,
            credit: 0,
        }));

        // ---- ICMP / ICMPv6 / ARP.
        let period = SEC.min(dur / 5);
        let nms = ep(v4(10, 50, 0, 5), 0);
        let mut pings = Vec::new();
        let echo = |w: &mut World, a: Endpoint, b: Endpoint, is_v6: bool| {
            let kind = if is_v6 {
                Kind::Icmp6 { target: [0; 16] }
            } else {
                Kind::IcmpEcho
            };
            let proto = if is_v6 { PROTO_ICMPV6 } else { PROTO_ICMP };
            let def = |src, dst| FlowDef {
                vlan: Some((VLAN_OFFICE, 0)),
                src,
                dst,
                proto,
                dscp: DSCP_CS0,
                ttl: 64,
                kind: kind.clone(),
                salt: 0,
            };
            (w.add(def(a, b)), w.add(def(b, a)))
        };
        for (i, target) in [v4(10, 50, 100, 10), v4(10, 50, 100, 20), v4(10, 50, 0, 1)]
            .into_iter()
            .enumerate()
        {
            let (a, b) = echo(&mut w, nms, ep(target, 0), false);
            pings.push((a, b, 0x1000 + i as u16, 8));
        }
        let c6 = ep(v6([0xfd00, 0x50, 0, 0, 0, 0, 1, 0x10]), 0);
        let s6 = v6([0xfd00, 0x50, 0x100, 0, 0, 0, 0, 0x20]);
        let (a, b) = echo(&mut w, c6, ep(s6, 0), true);
        pings.push((a, b, 0x2000, 128));
        let IpAddr::V6(s6a) = s6 else { unreachable!() };
        let o = s6a.octets();
        let sn = v6([
            0xff02,
            0,
            0,
            0,
            0,
            1,
            0xff00 | u16::from(o[13]),
            u16::from_be_bytes([o[14], o[15]]),
        ]);
        let ns = w.add(FlowDef {
            vlan: Some((VLAN_OFFICE, 0)),
            src: c6,
            dst: ep(sn, 0),
            proto: PROTO_ICMPV6,
            dscp: DSCP_CS0,
            ttl: 255,
            kind: Kind::Icmp6 { target: o },
            salt: 0,
        });
        // The advertisement goes the same way as the echo replies: the same truth flow.
        let na = b;
        let mut arps = Vec::new();
        let arp = |w: &mut World, vlan, a: IpAddr, b: IpAddr| {
            let def = |src, dst, op| FlowDef {
                vlan,
                src,
                dst,
                proto: 0,
                dscp: 0,
                ttl: 0,
                kind: Kind::Arp { op },
                salt: 0,
            };
            (
                w.add(def(ep(a, 0), ep(b, 0), 1)),
                w.add(def(ep(b, 0), ep(a, 0), 2)),
            )
        };
        for i in 0..GPU_NODES {
            arps.push(arp(&mut w, None, gpu_ip(i), gpu_ip((i + 1) % GPU_NODES)));
            arps.push(arp(
                &mut w,
                Some((VLAN_OFFICE, 0)),
                v4(10, 50, 1, 20 + i as u8),
                v4(10, 50, 0, 1),
            ));
        }
        planned += (dur / period + 1) * (5 * 2 * 106 + 2 * 90 + 2 * 64);
        sources.push(Box::new(Misc {
            rng: Rng::derive(seed, 0x1c3b),
            period,
            next: start + rng.below(period / 10),
            tick: 0,
            pings,
            ndp: (ns, na),
            arps,
        }));

        // ---- Rogue EF bulk: lab hosts mark their iperf3 traffic EF. VLAN 300.
        let hdr_lab = 18 + 20 + 20;
        for i in 0..ROGUES {
            let budget = per_mille(target, 27 + 3 * u64::from(i));
            planned += budget;
            let conn = w.tcp_conn(ConnDef {
                vlan: Some((VLAN_LAB, 0)),
                client: ep(rogue_ip(i), ephemeral(&mut rng)),
                server: ep(v4(10, 30, 1, 10 + i), ROGUE_PORT),
                dscp_c: DSCP_EF,
                dscp_s: DSCP_CS0,
                ttl_c: 64,
                ttl_s: 64,
                // They pull model weights. (Uniformly random payload also occasionally
                // satisfies a Wireshark heuristic dissector, Thrift, that then reports it
                // malformed.)
                content_c: Content::Gradient,
                content_s: Content::Random,
                mss: 1460,
            });
            let b0 = start + dur * (10 + 7 * u64::from(i)) / 100;
            let b1 = start + dur * (85 + 4 * u64::from(i)) / 100;
            let bytes = payload_for(budget, hdr_lab, 1460).max(1460);
            let gap = ((b1 - b0) / bytes.div_ceil(1460)).max(1);
            let mut src = BulkTcp::new(
                conn,
                seed,
                b0 - MS,
                rng.range(100 * US, 400 * US),
                1460,
                vec![Burst {
                    start: b0,
                    bytes,
                    gap,
                }],
            );
            src.win_s = WIN_BULK_RX;
            sources.push(Box::new(src));
        }

        // ---- Exfil: the model store streams to an outside address over TLS.
        let exfil_budget = per_mille(target, 60);
        planned += exfil_budget;
        let hdr = 14 + 20 + 20;
        let bytes = tls_fit_len(
            payload_for(exfil_budget, hdr, 1460).max(4 * 1460),
            TLS_RECORD,
        );
        let exfil = w.tcp_conn(ConnDef {
            vlan: None,
            client: ep(IpAddr::V4(EXFIL_SRC), ephemeral(&mut rng)),
            server: ep(IpAddr::V4(EXFIL_DST), EXFIL_PORT),
            dscp_c: DSCP_CS0,
            dscp_s: DSCP_CS0,
            ttl_c: 64,
            ttl_s: 49,
            content_c: Content::Tls {
                record: TLS_RECORD,
                len: bytes,
            },
            content_s: Content::Random,
            mss: 1460,
        });
        {
            let b0 = start + dur * 30 / 100;
            let b1 = start + dur * 75 / 100;
            let gap = ((b1 - b0) / bytes.div_ceil(1460)).max(1);
            let rtt = 28 * MS + rng.below(4 * MS);
            let mut src = BulkTcp::new(
                exfil,
                seed,
                b0.saturating_sub(rtt + MS).max(start),
                rtt,
                1460,
                vec![Burst {
                    start: b0,
                    bytes,
                    gap,
                }],
            );
            src.ack_delay = rtt;
            src.win_s = WIN_WAN_RX;
            sources.push(Box::new(src));
        }

        // ---- Checkpoints: every node writes its shard to an NFS server.
        let ckpt_budget = per_mille(target, 80);
        planned += ckpt_budget;
        let n_ckpt = (dur / (2 * SEC)).max(2);
        let ckpt_bytes =
            (payload_for(ckpt_budget, hdr, 1460) / (n_ckpt * GPU_NODES as u64)).max(1460);
        let ckpt_span = dur / (n_ckpt * 5);
        for i in 0..GPU_NODES {
            let conn = w.tcp_conn(ConnDef {
                vlan: None,
                // A reserved port, as Linux NFS clients use; 880-887 are free of dissectors.
                client: ep(gpu_ip(i), 880 + i as u16),
                server: ep(v4(10, 20, 0, 10 + (i as u8 % NFS_SERVERS)), NFS_PORT),
                dscp_c: DSCP_AF11,
                dscp_s: DSCP_AF11,
                ttl_c: 64,
                ttl_s: 64,
                content_c: Content::Gradient,
                content_s: Content::Random,
                mss: 1460,
            });
            let gap = (ckpt_span / ckpt_bytes.div_ceil(1460)).max(1);
            let bursts: Vec<Burst> = (0..n_ckpt)
                .map(|k| Burst {
                    start: start + dur * (2 * k + 1) / (2 * n_ckpt) + rng.below(ckpt_span / 10 + 1),
                    bytes: ckpt_bytes,
                    gap,
                })
                .collect();
            let open = bursts[0].start - 2 * MS;
            let mut src =
                BulkTcp::new(conn, seed, open, rng.range(40 * US, 120 * US), 1460, bursts);
            src.close = false; // NFS mounts stay up
            sources.push(Box::new(src));
        }

        // ---- GPU ring all-reduce: node i sends to node i+1 every training step.
        let straggler = rng.below(GPU_NODES as u64) as usize;
        let step = (100 * MS).min(dur / 10);
        let first = step / 10;
        let n_steps = ((dur - first - step / 2) / step + 1).max(1);
        let office_budget = per_mille(target, 120);
        planned += office_budget;
        let gpu_budget = target.saturating_sub(planned);
        let gpu_payload = payload_for(gpu_budget, hdr, 1460);
        let unit = (u128::from(gpu_payload) * 1000
            / (u128::from(n_steps)
                * u128::from((GPU_NODES as u64 - 1) * 1000 + STRAGGLER_PERMILLE)))
            as u64;
        let unit = unit.max(1460);
        let span = step * 4 / 10;
        for i in 0..GPU_NODES {
            let conn = w.tcp_conn(ConnDef {
                vlan: None,
                client: ep(gpu_ip(i), ephemeral(&mut rng)),
                server: ep(gpu_ip((i + 1) % GPU_NODES), GPU_PORT),
                dscp_c: DSCP_AF31,
                dscp_s: DSCP_AF31,
                ttl_c: 64,
                ttl_s: 64,
                content_c: Content::Gradient,
                content_s: Content::Random,
                mss: 1460,
            });
            let (bytes, delay) = if i == straggler {
                (unit * STRAGGLER_PERMILLE / 1000, step / 10)
            } else {
                (unit, 0)
            };
            let gap = (span / unit.div_ceil(1460)).max(1);
            let bursts = (0..n_steps)
                .map(|k| Burst {
                    start: start + first + k * step + delay + rng.below(step / 50 + 1),
                    bytes,
                    gap,
                })
                .collect();
            let open = start + rng.below(first / 2 + 1);
            let src = BulkTcp::new(conn, seed, open, rng.range(20 * US, 60 * US), 1460, bursts);
            sources.push(Box::new(src));
        }

        // ---- Office web, sized to its budget, sessions starting until 90% of the run.
        let gen_end = start + dur * 9 / 10;
        sources.push(Box::new(Office {
            rng: Rng::derive(seed, 0x0ff1ce),
            credit: 0,
            per_ns: u128::from(office_budget) * u128::from(SEC) / u128::from(gen_end - start),
            gen_end,
            n: 0,
            min_resp: 1000,
            // Large enough to matter, small enough that sessions finish within the run.
            max_resp: (office_budget / 8).min(dur / 1000).clamp(16_000, 4_000_000),
        }));

        Scenario {
            world: w,
            sources,
            planted: Planted { straggler, exfil },
        }
    }
}
