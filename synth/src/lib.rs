//! Deterministic synthetic traffic for capsule: an AI training cluster beside an enterprise
//! network, written as a nanosecond pcap, with planted faults and a truth file.
//!
//! [`generate`] writes `duration` of traffic time at an average wire rate of `rate_bps` (total
//! frame bytes ≈ `rate * duration / 8`) starting at `start_ns`, and returns a [`Truth`] that
//! lists every flow and the planted facts. The same [`SynthConfig`] always gives the same bytes,
//! on any machine: the PRNG is written here (`rng.rs`) and the scenario uses integer arithmetic
//! only. Every part of the scenario is present in every accepted configuration (down to one
//! second at 8 Mbit/s, see [`SynthConfig`]); byte shares scale with rate and duration.
//!
//! # What is in the traffic
//!
//! | part | hosts | what | marks |
//! | --- | --- | --- | --- |
//! | GPU ring all-reduce (the rest, ~60% of bytes) | `10.10.0.1-8` | every training step (100 ms, or a tenth of the run if shorter) node *i* sends a burst to node *i+1* over a persistent TCP connection to port 29500 from an ephemeral port; 1514-byte frames; the receiver ACKs every second segment | untagged, DSCP AF31 (26) |
//! | straggler | one GPU node chosen by the seed | starts each step late and sends 60% of what its peers send | in [`Facts::straggler`] |
//! | checkpoints (8%) | GPU nodes (ports 880-887) → `10.20.0.10-13:2049` (storage subnet `10.20.0.0/24`) | each node writes its shard over a persistent TCP connection (NFS), at evenly spaced checkpoints, at least 2 per run (one per 2 s) | untagged, AF11 (10) |
//! | rogue EF bulk (9%) | `10.30.0.11-13` → `10.30.1.10-12:5201` | one long TCP transfer each (pulling model weights), marked EF | VLAN 300, DSCP 46 (ACKs back CS0); in [`Facts::rogue_ef_hosts`] |
//! | voice (~1.5%, 1-100 calls) | phones `10.40.0.10+` (UDP 16384+) ↔ PBX `10.40.0.2` (UDP 24000+) | G.711 RTP, 20 ms ptime, 218-byte frames, both ways | VLAN 100 (PCP 5), DSCP EF; `10.40.0.0/24` is [`Facts::ef_allow_list`] |
//! | video (2%) | `10.50.2.100+` (UDP 50000+) ↔ SFU `10.50.100.30:8801` | RTP, 1246-byte frames, up to 30 frames/s | VLAN 200 (PCP 4), AF41 (34) |
//! | office web (12%) | clients `10.50.1-4.x`, `fd00:50::1:x` → `10.50.100.10:80`, `10.50.100.20:443`, `198.51.100.x:443`, `fd00:50:100::10:80`, `fd00:50:100::20:443` | HTTP/1.1 (text pages) and TLS sessions: handshake, request, response, FIN close; some tail losses (a segment resent with the same sequence number after a 200 ms timeout), zero-window stalls (window-0 ACK, probe, window update) and RST aborts; a quarter over IPv6 | VLAN 200, CS0 |
//! | DNS (10-100 queries/s) | office clients → `10.50.0.53`, `fd00:50::53` port 53 | UDP queries and answers (A/AAAA, some NXDOMAIN), a new source port (so two new flows) each | VLAN 200 |
//! | ICMP, ICMPv6, ARP | NMS `10.50.0.5`, `fd00:50::1:10`, gateway `10.50.0.1`, GPU nodes | echo request/reply, neighbour solicitation/advertisement, ARP who-has/reply | VLAN 200 or untagged |
//! | exfil (6%) | model store `10.60.0.5` → `203.0.113.77:443` | one TLS upload through the middle of the run, out of hours by default | untagged, CS0; in [`Facts::exfil`] |
//!
//! Inside addresses have locally administered MACs `02:00:<IPv4 octets>` (`02:01:<last four
//! IPv6 octets>`); outside addresses sit behind the router `02:00:00:00:00:fe`. Outside
//! addresses are documentation ranges (RFC 5737); nothing is ever sent anywhere. Ports were
//! chosen so that Wireshark 4.0 decodes every frame without a malformed-packet report
//! (`tshark -r FILE -q -z expert`).
//!
//! Packets are valid: IPv4 header, TCP, UDP, ICMP and ICMPv6 checksums (with IPv4 and IPv6
//! pseudo-headers) are correct; TCP connections open with SYN (MSS and window-scale options)
//! and, where the story allows, close with FIN; sequence and acknowledgement numbers follow
//! the bytes sent. Timestamps carry jitter at nanosecond resolution. GPU, checkpoint and
//! rogue payloads are bf16-like tensors, TLS and video payloads random, web payloads text,
//! all taken from large fixed pools (`payload.rs`), so the file compresses about as real
//! traffic does (about 1.4x with `zstd -1`).
//!
//! # Data flow
//!
//! **schedule → templates → buffer → writer.** `Scenario::build` (`scenario.rs`) turns the
//! configuration into byte budgets, flows and sources. The generator then walks traffic time in
//! 1 ms slices: each source schedules the packets of activity starting in the slice into a
//! priority queue keyed by (timestamp, insertion order); every packet due before the slice end
//! is popped and built from its flow's header template (`packet.rs`): template copied, payload
//! appended from a pool, lengths, IDs, sequence numbers and checksums patched in place, straight
//! into a 4 MiB pcap buffer, which is written to the output whenever it fills.
//!
//! # Truth
//!
//! [`Truth::flows`] has one entry per direction-specific 5-tuple and VLAN; every IP packet in
//! the file is counted in exactly one flow, with frame (wire) bytes. ICMP and ICMPv6 flows have
//! ports 0. ARP frames are the only non-IP frames: they are counted in [`Truth::packets`] and
//! [`Truth::bytes`] (which count every frame in the file) but belong to no flow, so the totals
//! exceed the flow sums by exactly the ARP frames.
#![forbid(unsafe_code)]

use std::io::Write;

use capsule_pcap::LINKTYPE_ETHERNET;
use serde::{Deserialize, Serialize};

mod packet;
mod payload;
mod rng;
mod scenario;

use scenario::{Queue, Scenario};

/// Snapshot length written in the pcap header (every frame is captured whole).
pub const SNAPLEN: u32 = 65535;
/// Output buffer size: records accumulate here and are written in chunks of about this size.
const BUF_CAP: usize = 4 << 20;
/// Traffic-time slice in which sources schedule their activity.
const SLICE_NS: u64 = 1_000_000;

/// 2026-11-30T02:00:00Z in nanoseconds since the Unix epoch: a Monday night, so the exfil
/// runs out of hours.
pub const DEFAULT_START_NS: u64 = 1_796_004_000 * 1_000_000_000;
/// Shortest run accepted.
pub const MIN_DURATION_NS: u64 = 100_000_000;
/// Slowest rate accepted.
pub const MIN_RATE_BPS: u64 = 1_000_000;
/// Fastest rate accepted.
pub const MAX_RATE_BPS: u64 = 1_000_000_000_000;
/// Smallest `rate * duration / 8` accepted (1 s at 8 Mbit/s): below it the smallest form of
/// each part of the scenario would exceed its share and the total would overshoot the target.
pub const MIN_TARGET_BYTES: u64 = 1_000_000;

/// What to generate.
///
/// Accepted: `duration_ns >= MIN_DURATION_NS` (100 ms), `rate_bps` in 1 Mbit/s ..= 1 Tbit/s,
/// `rate * duration / 8 >= MIN_TARGET_BYTES` (1 MB), and an end before 2106 (32-bit pcap
/// seconds). Within these the total frame bytes come within a few percent of the target.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthConfig {
    /// Seed of every random choice; the same config always gives the same bytes.
    pub seed: u64,
    /// Traffic time covered, in nanoseconds (at least [`MIN_DURATION_NS`]).
    pub duration_ns: u64,
    /// Average wire rate over the run, in bits of frame bytes per second of traffic time.
    pub rate_bps: u64,
    /// Timestamp of the start of the run, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
}

impl Default for SynthConfig {
    /// Seed 1, 10 s at 1 Gbit/s, starting 2026-11-30T02:00:00Z.
    fn default() -> Self {
        SynthConfig {
            seed: 1,
            duration_ns: 10_000_000_000,
            rate_bps: 1_000_000_000,
            start_ns: DEFAULT_START_NS,
        }
    }
}

impl SynthConfig {
    /// Planned total of frame bytes: `rate * duration / 8`.
    pub fn target_bytes(&self) -> u64 {
        (u128::from(self.rate_bps) * u128::from(self.duration_ns) / 8 / 1_000_000_000) as u64
    }

    /// Checks the config (duration, rate and the bytes they give) before anything is
    /// generated; [`generate`] checks it too.
    pub fn validate(&self) -> Result<(), SynthError> {
        let bad = |m: String| Err(SynthError::InvalidConfig(m));
        if self.duration_ns < MIN_DURATION_NS {
            return bad(format!(
                "duration {} ns is shorter than the minimum {MIN_DURATION_NS} ns",
                self.duration_ns
            ));
        }
        if !(MIN_RATE_BPS..=MAX_RATE_BPS).contains(&self.rate_bps) {
            return bad(format!(
                "rate {} bit/s is outside {MIN_RATE_BPS}..={MAX_RATE_BPS}",
                self.rate_bps
            ));
        }
        if self.target_bytes() < MIN_TARGET_BYTES {
            return bad(format!(
                "rate x duration gives {} bytes, below the minimum of {MIN_TARGET_BYTES} (1 s at 8 Mbit/s)",
                self.target_bytes()
            ));
        }
        // Classic pcap stores seconds in 32 bits.
        let end = self.start_ns.checked_add(self.duration_ns);
        if end.is_none_or(|e| e / 1_000_000_000 > u64::from(u32::MAX)) {
            return bad(format!(
                "start {} ns + duration {} ns ends after 2106-02-07, which pcap cannot store",
                self.start_ns, self.duration_ns
            ));
        }
        Ok(())
    }
}

/// Why generation failed.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// The configuration cannot be generated.
    #[error("invalid synth config: {0}")]
    InvalidConfig(String),
    /// Writing the output failed.
    #[error("writing synthetic pcap")]
    Io(#[source] std::io::Error),
}

impl From<std::io::Error> for SynthError {
    fn from(e: std::io::Error) -> Self {
        SynthError::Io(e)
    }
}

/// Ground truth of a generated file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Truth {
    /// The configuration that produced the file.
    pub config: SynthConfig,
    /// Frames in the file (IP packets and ARP frames).
    pub packets: u64,
    /// Frame (wire) bytes in the file, without pcap record headers.
    pub bytes: u64,
    /// One entry per direction-specific 5-tuple + VLAN, ordered by first packet.
    pub flows: Vec<FlowTruth>,
    /// What was planted.
    pub facts: Facts,
}

/// One direction of one conversation.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FlowTruth {
    /// 802.1Q VLAN ID, when tagged.
    pub vlan: Option<u16>,
    /// 4 or 6.
    pub ip_version: u8,
    /// IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6).
    pub protocol: u8,
    /// Source address, in its standard text form.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// Source port (0 for ICMP and ICMPv6).
    pub src_port: u16,
    /// Destination port (0 for ICMP and ICMPv6).
    pub dst_port: u16,
    /// Packets in the file.
    pub packets: u64,
    /// Frame (wire) bytes in the file.
    pub bytes: u64,
    /// Timestamp of the first packet, ns since the epoch.
    pub first_ns: u64,
    /// Timestamp of the last packet.
    pub last_ns: u64,
    /// DSCP values seen, sorted and distinct.
    pub dscp: Vec<u8>,
}

/// The planted facts a capture analysis should find.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Hosts outside the EF allow-list that send EF-marked (DSCP 46) bulk traffic.
    pub rogue_ef_hosts: Vec<String>,
    /// CIDRs allowed to send EF (the voice subnet).
    pub ef_allow_list: Vec<String>,
    /// The GPU node that sends clearly less per training step.
    pub straggler: String,
    /// All GPU nodes.
    pub gpu_nodes: Vec<String>,
    /// The large outbound transfer.
    pub exfil: ExfilTruth,
    /// Where checkpoints are written (CIDR).
    pub storage_subnet: String,
}

/// The exfiltration: its outbound flow (data direction).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ExfilTruth {
    /// The model store.
    pub src: String,
    /// The outside address.
    pub dst: String,
    /// Destination port (443).
    pub dst_port: u16,
    /// Frame bytes of the outbound flow (`src` → `dst`).
    pub bytes: u64,
    /// First packet of the outbound flow.
    pub first_ns: u64,
    /// Last packet of the outbound flow.
    pub last_ns: u64,
}

/// Writes the synthetic capture for `cfg` to `out` (nanosecond pcap, `LINKTYPE_ETHERNET`,
/// snaplen 65535, timestamps non-decreasing) and returns its truth.
///
/// `out` receives large writes (about 4 MiB each); it is flushed at the end.
pub fn generate<W: Write>(cfg: &SynthConfig, mut out: W) -> Result<Truth, SynthError> {
    cfg.validate()?;
    let pools = payload::pools();
    let mut sc = Scenario::build(cfg);
    let mut wr = packet::Writer::new(BUF_CAP + (256 << 10));
    capsule_pcap::write::pcap_header(&mut wr.buf, LINKTYPE_ETHERNET, SNAPLEN);
    let mut q = Queue::default();
    let end = cfg.start_ns + cfg.duration_ns;
    let mut t0 = cfg.start_ns;
    while t0 < end {
        let t1 = (t0 + SLICE_NS).min(end);
        q.set_floor(t0);
        for s in sc.sources.iter_mut() {
            s.fill(t0, t1, &mut sc.world, &mut q);
        }
        while let Some(spec) = q.pop_before(t1) {
            let f = &mut sc.world.flows[spec.flow as usize];
            wr.emit(f, &spec, pools);
            if wr.buf.len() >= BUF_CAP {
                out.write_all(&wr.buf)?;
                wr.buf.clear();
            }
        }
        t0 = t1;
    }
    // Whatever is still queued falls after the end of the run and is dropped.
    out.write_all(&wr.buf)?;
    out.flush()?;
    Ok(truth(cfg, &sc, &wr))
}

fn truth(cfg: &SynthConfig, sc: &Scenario, wr: &packet::Writer) -> Truth {
    let flows = &sc.world.flows;
    let mut order: Vec<usize> = (0..flows.len())
        .filter(|&i| flows[i].is_ip() && flows[i].stats.packets > 0)
        .collect();
    order.sort_by_key(|&i| (flows[i].stats.first_ns, i));
    let flow_truth = order
        .into_iter()
        .map(|i| {
            let f = &flows[i];
            FlowTruth {
                vlan: f.key.vlan,
                ip_version: if f.key.src.is_ipv4() { 4 } else { 6 },
                protocol: f.key.proto,
                src: f.key.src.to_string(),
                dst: f.key.dst.to_string(),
                src_port: f.key.sport,
                dst_port: f.key.dport,
                packets: f.stats.packets,
                bytes: f.stats.bytes,
                first_ns: f.stats.first_ns,
                last_ns: f.stats.last_ns,
                dscp: vec![f.dscp],
            }
        })
        .collect();
    let ex = &flows[sc.planted.exfil.c2s as usize].stats;
    let facts = Facts {
        rogue_ef_hosts: (0..3).map(|i| scenario::rogue_ip(i).to_string()).collect(),
        ef_allow_list: vec![scenario::VOICE_SUBNET.to_string()],
        straggler: scenario::gpu_ip(sc.planted.straggler).to_string(),
        gpu_nodes: (0..scenario::GPU_NODES)
            .map(|i| scenario::gpu_ip(i).to_string())
            .collect(),
        exfil: ExfilTruth {
            src: scenario::EXFIL_SRC.to_string(),
            dst: scenario::EXFIL_DST.to_string(),
            dst_port: scenario::EXFIL_PORT,
            bytes: ex.bytes,
            first_ns: ex.first_ns,
            last_ns: ex.last_ns,
        },
        storage_subnet: scenario::STORAGE_SUBNET.to_string(),
    };
    Truth {
        config: *cfg,
        packets: wr.packets,
        bytes: wr.bytes,
        flows: flow_truth,
        facts,
    }
}
