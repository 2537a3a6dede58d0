//! End-to-end checks of the generator: the capture is parsed back by a small independent
//! reader that verifies every checksum, and compared with the truth.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use capsule_synth::{generate, FlowTruth, SynthConfig, SynthError, Truth};

const START: u64 = capsule_synth::DEFAULT_START_NS;

fn cfg(seed: u64, secs_milli: u64, rate_bps: u64) -> SynthConfig {
    SynthConfig {
        seed,
        duration_ns: secs_milli * 1_000_000,
        rate_bps,
        start_ns: START,
    }
}

fn run(c: &SynthConfig) -> (Vec<u8>, Truth) {
    let mut out = Vec::new();
    let truth = generate(c, &mut out).expect("generate");
    (out, truth)
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    vlan: Option<u16>,
    ip_version: u8,
    protocol: u8,
    src: String,
    dst: String,
    src_port: u16,
    dst_port: u16,
}

#[derive(Debug, Default, Clone)]
struct Seen {
    packets: u64,
    bytes: u64,
    first_ns: u64,
    last_ns: u64,
    dscp: BTreeSet<u8>,
}

/// One parsed TCP segment.
#[derive(Debug, Clone)]
struct Seg {
    key: Key,
    seq: u32,
    ack: u32,
    flags: u8,
    win: u16,
    len: u32,
}

#[derive(Debug, Default)]
struct Parsed {
    frames: u64,
    bytes: u64,
    arp: u64,
    arp_bytes: u64,
    flows: HashMap<Key, Seen>,
    segs: Vec<Seg>,
    vlans: BTreeSet<u16>,
    icmp: u64,
    icmp6: u64,
    dns: u64,
    timestamps_ordered: bool,
    first_ns: u64,
    last_ns: u64,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Plain RFC 1071 sum, one 16-bit word at a time.
fn sum(data: &[u8], mut acc: u64) -> u64 {
    let mut i = 0;
    while i + 1 < data.len() {
        acc += u64::from(be16(&data[i..]));
        i += 2;
    }
    if i < data.len() {
        acc += u64::from(data[i]) << 8;
    }
    acc
}

fn fold(mut s: u64) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// A region with its checksum field in place verifies when it sums to 0xffff.
fn verifies(acc: u64) -> bool {
    fold(acc) == 0xffff
}

fn parse(pcap: &[u8]) -> Parsed {
    assert!(pcap.len() >= 24, "no pcap header");
    assert_eq!(le32(&pcap[0..]), 0xa1b2_3c4d, "nanosecond magic");
    assert_eq!(u16::from_le_bytes([pcap[4], pcap[5]]), 2);
    assert_eq!(u16::from_le_bytes([pcap[6], pcap[7]]), 4);
    assert_eq!(le32(&pcap[16..]), 65535, "snaplen");
    assert_eq!(le32(&pcap[20..]), 1, "LINKTYPE_ETHERNET");
    let mut p = Parsed {
        timestamps_ordered: true,
        ..Parsed::default()
    };
    let mut pos = 24;
    let mut last_ts = 0u64;
    while pos < pcap.len() {
        assert!(pos + 16 <= pcap.len(), "truncated record header at {pos}");
        let ts = u64::from(le32(&pcap[pos..])) * 1_000_000_000 + u64::from(le32(&pcap[pos + 4..]));
        let caplen = le32(&pcap[pos + 8..]) as usize;
        let len = le32(&pcap[pos + 12..]) as usize;
        assert_eq!(caplen, len, "whole frames are captured");
        assert!(le32(&pcap[pos + 4..]) < 1_000_000_000);
        let frame = &pcap[pos + 16..pos + 16 + caplen];
        pos += 16 + caplen;
        if ts < last_ts {
            p.timestamps_ordered = false;
        }
        if p.frames == 0 {
            p.first_ns = ts;
        }
        last_ts = ts;
        p.last_ns = ts;
        p.frames += 1;
        p.bytes += len as u64;
        parse_frame(&mut p, ts, frame);
    }
    p
}

fn parse_frame(p: &mut Parsed, ts: u64, frame: &[u8]) {
    let mut off = 12;
    let mut ethertype = be16(&frame[off..]);
    let mut vlan = None;
    if ethertype == 0x8100 {
        let vid = be16(&frame[14..]) & 0x0fff;
        vlan = Some(vid);
        p.vlans.insert(vid);
        off += 4;
        ethertype = be16(&frame[off..]);
    }
    off += 2;
    let l3 = &frame[off..];
    let (ip_version, protocol, src, dst, dscp, l4, pseudo): (
        u8,
        u8,
        IpAddr,
        IpAddr,
        u8,
        &[u8],
        u64,
    ) = match ethertype {
        0x0806 => {
            assert_eq!(l3.len(), 28, "ARP length");
            assert_eq!(be16(&l3[0..]), 1);
            assert_eq!(be16(&l3[2..]), 0x0800);
            p.arp += 1;
            p.arp_bytes += frame.len() as u64;
            return;
        }
        0x0800 => {
            assert_eq!(l3[0], 0x45, "IPv4 without options");
            let total = be16(&l3[2..]) as usize;
            assert_eq!(total, l3.len(), "IPv4 total length matches the frame");
            assert!(verifies(sum(&l3[..20], 0)), "IPv4 header checksum");
            let proto = l3[9];
            let s = IpAddr::V4(Ipv4Addr::new(l3[12], l3[13], l3[14], l3[15]));
            let d = IpAddr::V4(Ipv4Addr::new(l3[16], l3[17], l3[18], l3[19]));
            let l4 = &l3[20..total];
            let ps = sum(&l3[12..20], 0) + u64::from(proto) + l4.len() as u64;
            (4, proto, s, d, l3[1] >> 2, l4, ps)
        }
        0x86dd => {
            assert_eq!(l3[0] >> 4, 6);
            let plen = be16(&l3[4..]) as usize;
            assert_eq!(plen + 40, l3.len(), "IPv6 payload length matches the frame");
            let tc = ((be16(&l3[0..]) >> 4) & 0xff) as u8;
            let proto = l3[6];
            let a: [u8; 16] = l3[8..24].try_into().unwrap();
            let b: [u8; 16] = l3[24..40].try_into().unwrap();
            let l4 = &l3[40..];
            let ps = sum(&l3[8..40], 0) + u64::from(proto) + l4.len() as u64;
            (
                6,
                proto,
                IpAddr::V6(Ipv6Addr::from(a)),
                IpAddr::V6(Ipv6Addr::from(b)),
                tc >> 2,
                l4,
                ps,
            )
        }
        other => panic!("unexpected ethertype {other:#06x}"),
    };
    let (sport, dport) = match protocol {
        6 => {
            assert!(verifies(sum(l4, pseudo)), "TCP checksum");
            let doff = usize::from(l4[12] >> 4) * 4;
            assert!(doff == 20 || doff == 28);
            (be16(&l4[0..]), be16(&l4[2..]))
        }
        17 => {
            assert_eq!(be16(&l4[4..]) as usize, l4.len(), "UDP length");
            assert_ne!(be16(&l4[6..]), 0, "UDP checksum present");
            assert!(verifies(sum(l4, pseudo)), "UDP checksum");
            let (s, d) = (be16(&l4[0..]), be16(&l4[2..]));
            if s == 53 || d == 53 {
                p.dns += 1;
            }
            (s, d)
        }
        1 => {
            assert!(verifies(sum(l4, 0)), "ICMP checksum");
            p.icmp += 1;
            (0, 0)
        }
        58 => {
            assert!(verifies(sum(l4, pseudo)), "ICMPv6 checksum");
            p.icmp6 += 1;
            (0, 0)
        }
        other => panic!("unexpected protocol {other}"),
    };
    let key = Key {
        vlan,
        ip_version,
        protocol,
        src: src.to_string(),
        dst: dst.to_string(),
        src_port: sport,
        dst_port: dport,
    };
    if protocol == 6 {
        let doff = usize::from(l4[12] >> 4) * 4;
        p.segs.push(Seg {
            key: key.clone(),
            seq: be32(&l4[4..]),
            ack: be32(&l4[8..]),
            flags: l4[13],
            win: be16(&l4[14..]),
            len: (l4.len() - doff) as u32,
        });
    }
    let e = p.flows.entry(key).or_default();
    if e.packets == 0 {
        e.first_ns = ts;
    }
    e.packets += 1;
    e.bytes += frame.len() as u64;
    e.last_ns = ts;
    e.dscp.insert(dscp);
}

fn key_of(f: &FlowTruth) -> Key {
    Key {
        vlan: f.vlan,
        ip_version: f.ip_version,
        protocol: f.protocol,
        src: f.src.clone(),
        dst: f.dst.clone(),
        src_port: f.src_port,
        dst_port: f.dst_port,
    }
}

fn check_truth(c: &SynthConfig, pcap: &[u8], truth: &Truth) -> Parsed {
    let p = parse(pcap);
    assert_eq!(truth.config, *c);
    assert_eq!(p.frames, truth.packets, "truth packet total");
    assert_eq!(p.bytes, truth.bytes, "truth byte total");
    assert!(p.timestamps_ordered, "timestamps non-decreasing");
    assert!(p.first_ns >= c.start_ns && p.last_ns < c.start_ns + c.duration_ns);
    // Every IP packet in exactly one truth flow, with identical counters.
    assert_eq!(p.flows.len(), truth.flows.len(), "flow count");
    let mut fp = 0;
    let mut fb = 0;
    for f in &truth.flows {
        let seen = p
            .flows
            .get(&key_of(f))
            .unwrap_or_else(|| panic!("truth flow not in capture: {f:?}"));
        assert_eq!(seen.packets, f.packets, "{f:?}");
        assert_eq!(seen.bytes, f.bytes, "{f:?}");
        assert_eq!(seen.first_ns, f.first_ns, "{f:?}");
        assert_eq!(seen.last_ns, f.last_ns, "{f:?}");
        assert_eq!(
            seen.dscp.iter().copied().collect::<Vec<_>>(),
            f.dscp,
            "{f:?}"
        );
        fp += f.packets;
        fb += f.bytes;
    }
    // Only ARP frames are outside the flows.
    assert_eq!(fp + p.arp, truth.packets);
    assert_eq!(fb + p.arp_bytes, truth.bytes);
    // Flows are listed in order of first packet.
    assert!(truth
        .flows
        .windows(2)
        .all(|w| w[0].first_ns <= w[1].first_ns));
    p
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let c = cfg(5, 1000, 10_000_000);
    let (a, ta) = run(&c);
    let (b, tb) = run(&c);
    assert!(a == b, "same seed, different bytes");
    assert_eq!(ta, tb);
    let (d, td) = run(&SynthConfig { seed: 6, ..c });
    assert!(a != d, "different seeds, same bytes");
    assert_ne!(ta.flows, td.flows);
}

#[test]
fn truth_matches_the_capture() {
    for c in [
        cfg(1, 1000, 10_000_000),
        cfg(2, 300, 100_000_000),
        cfg(3, 2000, 5_000_000),
    ] {
        let (pcap, truth) = run(&c);
        check_truth(&c, &pcap, &truth);
        // The truth survives JSON.
        let json = serde_json::to_string(&truth).unwrap();
        let back: Truth = serde_json::from_str(&json).unwrap();
        assert_eq!(back, truth);
    }
}

#[test]
fn total_bytes_follow_rate_and_duration() {
    for c in [
        cfg(1, 1000, 10_000_000),
        cfg(5, 1000, 8_000_000),
        cfg(6, 100, 80_000_000),
        cfg(9, 500, 40_000_000),
        cfg(4, 3000, 20_000_000),
        cfg(8, 200, 1_000_000_000),
    ] {
        let (_, truth) = run(&c);
        let target = c.rate_bps as f64 * c.duration_ns as f64 / 8e9;
        let ratio = truth.bytes as f64 / target;
        assert!(
            (0.95..=1.05).contains(&ratio),
            "{c:?}: {} bytes, {ratio:.3} of target",
            truth.bytes
        );
    }
}

fn in_subnet(addr: &str, net: &str) -> bool {
    let (base, bits) = net.split_once('/').unwrap();
    let bits: u32 = bits.parse().unwrap();
    match (addr.parse::<IpAddr>(), base.parse::<IpAddr>()) {
        (Ok(IpAddr::V4(a)), Ok(IpAddr::V4(b))) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(a) & mask == u32::from(b) & mask
        }
        _ => false,
    }
}

/// Seeds to try in the scenario tests: 3, or `SYNTH_TEST_SEEDS`.
fn seeds() -> std::ops::Range<u64> {
    let n = std::env::var("SYNTH_TEST_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    11..11 + n
}

#[test]
fn every_part_of_the_scenario_is_present_and_planted_facts_hold() {
    for seed in seeds() {
        scenario_holds(&cfg(seed, 1000, 10_000_000));
    }
    scenario_holds(&cfg(99, 400, 300_000_000));
}

fn scenario_holds(c: &SynthConfig) {
    let (pcap, truth) = run(c);
    let p = check_truth(c, &pcap, &truth);
    let facts = &truth.facts;
    let flows = &truth.flows;
    let sent = |host: &str| {
        flows
            .iter()
            .filter(|f| f.src == host)
            .map(|f| f.bytes)
            .sum::<u64>()
    };

    // GPU ring: most bytes, on 29500; the straggler sends clearly less.
    assert_eq!(facts.gpu_nodes.len(), 8);
    let ring: u64 = flows
        .iter()
        .filter(|f| f.dst_port == 29500)
        .map(|f| f.bytes)
        .sum();
    assert!(
        ring * 2 > truth.bytes,
        "GPU ring carries most bytes: {ring} of {}",
        truth.bytes
    );
    let mut per_node: Vec<u64> = facts.gpu_nodes.iter().map(|n| sent(n)).collect();
    let straggler = sent(&facts.straggler);
    assert!(facts.gpu_nodes.contains(&facts.straggler));
    per_node.sort_unstable();
    let median = (per_node[3] + per_node[4]) / 2;
    assert!(
        straggler * 4 < median * 3,
        "straggler {straggler} vs median {median}"
    );
    let ring_of = |n: &str| {
        flows
            .iter()
            .filter(|f| f.src == n && f.dst_port == 29500)
            .map(|f| f.bytes)
            .sum::<u64>()
    };
    for n in &facts.gpu_nodes {
        if *n != facts.straggler {
            assert!(ring_of(&facts.straggler) * 10 < ring_of(n) * 7);
        }
    }

    // Checkpoints: every GPU node writes to the storage subnet over NFS.
    for n in &facts.gpu_nodes {
        assert!(flows.iter().any(|f| f.src == *n
            && f.dst_port == 2049
            && in_subnet(&f.dst, &facts.storage_subnet)
            && f.bytes > 10_000));
    }

    // EF: the rogue hosts' flows are EF, and every EF sender is rogue or allow-listed.
    assert_eq!(facts.rogue_ef_hosts.len(), 3);
    for r in &facts.rogue_ef_hosts {
        let theirs: Vec<_> = flows.iter().filter(|f| f.src == *r).collect();
        assert!(!theirs.is_empty());
        assert!(theirs.iter().all(|f| f.dscp == vec![46]), "{theirs:?}");
        assert!(theirs.iter().map(|f| f.bytes).sum::<u64>() > truth.bytes / 50);
        assert!(!facts.ef_allow_list.iter().any(|n| in_subnet(r, n)));
    }
    let mut voice = 0;
    for f in flows.iter().filter(|f| f.dscp.contains(&46)) {
        let allowed = facts.ef_allow_list.iter().any(|n| in_subnet(&f.src, n));
        assert!(allowed || facts.rogue_ef_hosts.contains(&f.src), "{f:?}");
        if allowed {
            voice += 1;
            assert_eq!(f.protocol, 17);
            assert!(f.bytes / f.packets < 256, "small voice frames");
        }
    }
    assert!(voice >= 2);

    // The exfil: one big outbound TLS flow, as in the truth.
    let ex = &facts.exfil;
    let out: Vec<_> = flows
        .iter()
        .filter(|f| f.src == ex.src && f.dst == ex.dst && f.dst_port == ex.dst_port)
        .collect();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].bytes, out[0].first_ns, out[0].last_ns),
        (ex.bytes, ex.first_ns, ex.last_ns)
    );
    assert!(
        ex.bytes * 100 > truth.bytes * 4,
        "exfil is a sizeable share"
    );
    assert_eq!(ex.dst, "203.0.113.77");

    // The rest of the mix.
    for v in [100, 200, 300] {
        assert!(p.vlans.contains(&v), "VLAN {v}");
    }
    assert!(flows.iter().any(|f| f.vlan.is_none()));
    assert!(flows.iter().any(|f| f.ip_version == 6 && f.protocol == 6));
    assert!(p.icmp >= 2 && p.icmp6 >= 2 && p.dns >= 2 && p.arp >= 2);
    for d in [0u8, 34, 46] {
        assert!(flows.iter().any(|f| f.dscp.contains(&d)), "DSCP {d}");
    }
    assert!(flows
        .iter()
        .any(|f| f.dst_port == 443 && f.ip_version == 4 && f.vlan == Some(200)));
    assert!(flows.iter().any(|f| f.dst_port == 80));

    // Office impairments: a repeated segment, a zero window, a reset.
    let mut seen: HashMap<(&Key, u32), u32> = HashMap::new();
    let mut retrans = 0;
    for s in p.segs.iter().filter(|s| s.len > 1) {
        let n = seen.entry((&s.key, s.seq)).or_default();
        *n += 1;
        if *n == 2 {
            retrans += 1;
        }
    }
    assert!(retrans >= 1, "a retransmission");
    assert!(
        p.segs.iter().any(|s| s.win == 0 && s.flags & 0x04 == 0),
        "a zero window"
    );
    assert!(p.segs.iter().any(|s| s.flags & 0x04 != 0), "a reset");
}

#[test]
fn tcp_sequence_numbers_follow_the_bytes() {
    for seed in seeds() {
        tcp_sequences(&cfg(seed + 10, 1000, 20_000_000));
    }
}

fn tcp_sequences(c: &SynthConfig) {
    let (pcap, _) = run(c);
    let p = parse(&pcap);
    // Per direction: next expected sequence number; per connection: ACKs never acknowledge
    // unseen bytes.
    let mut next: HashMap<Key, u32> = HashMap::new();
    let reverse = |k: &Key| Key {
        src: k.dst.clone(),
        dst: k.src.clone(),
        src_port: k.dst_port,
        dst_port: k.src_port,
        ..k.clone()
    };
    let mut syns = 0;
    for s in &p.segs {
        let syn = s.flags & 0x02 != 0;
        let fin = s.flags & 0x01 != 0;
        match next.get(&s.key).copied() {
            None => {
                assert!(syn, "first segment of a flow is a SYN: {s:?}");
                syns += 1;
                next.insert(s.key.clone(), s.seq.wrapping_add(1));
            }
            Some(n) => {
                assert!(!syn);
                // At most the next byte: retransmissions and probes repeat, nothing skips.
                let ahead = s.seq.wrapping_sub(n) as i32;
                assert!(
                    ahead <= 0,
                    "gap in {:?}: seq {} expected {}",
                    s.key,
                    s.seq,
                    n
                );
                let end = s.seq.wrapping_add(s.len).wrapping_add(u32::from(fin));
                if (end.wrapping_sub(n) as i32) > 0 {
                    next.insert(s.key.clone(), end);
                }
            }
        }
        if s.flags & 0x10 != 0 {
            let peer = next
                .get(&reverse(&s.key))
                .copied()
                .expect("ACK after the peer's SYN");
            assert!(
                (s.ack.wrapping_sub(peer) as i32) <= 0,
                "{:?} acknowledges unseen bytes: ack {} peer next {}",
                s.key,
                s.ack,
                peer
            );
        }
    }
    assert!(syns > 20);
}

#[test]
fn invalid_configs_are_rejected() {
    let bad = [
        SynthConfig {
            duration_ns: 1_000,
            ..SynthConfig::default()
        },
        SynthConfig {
            rate_bps: 10,
            ..SynthConfig::default()
        },
        SynthConfig {
            start_ns: u64::MAX - 5,
            ..SynthConfig::default()
        },
        SynthConfig {
            duration_ns: 500_000_000,
            rate_bps: 10_000_000,
            ..SynthConfig::default()
        },
    ];
    for c in bad {
        let mut out = Vec::new();
        assert!(
            matches!(generate(&c, &mut out), Err(SynthError::InvalidConfig(_))),
            "{c:?}"
        );
        assert!(out.is_empty());
    }
}

#[test]
fn default_config() {
    let c = SynthConfig::default();
    assert_eq!(
        (c.seed, c.duration_ns, c.rate_bps),
        (1, 10_000_000_000, 1_000_000_000)
    );
    // 2026-11-30T02:00:00Z.
    assert_eq!(c.start_ns, 1_796_004_000_000_000_000);
    assert_eq!(c.target_bytes(), 1_250_000_000);
}

/// Measures generation speed (into a sink: CPU cost only). Prints, asserts nothing about time.
/// Runs in release builds only (`cargo test --release`).
#[test]
#[cfg_attr(debug_assertions, ignore = "measures release-mode throughput")]
fn throughput() {
    let c = cfg(1, 2000, 1_000_000_000);
    // Warm-up builds the shared payload pools.
    generate(&cfg(1, 100, 100_000_000), std::io::sink()).unwrap();
    let t = Instant::now();
    let mut counter = CountingSink::default();
    let truth = generate(&c, &mut counter).unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "synth throughput: {} frames, {:.0} MB of frames, {:.0} MB of pcap in {:.3} s: {:.0} MB/s of pcap, {:.0} MB/s = {:.2} Gbit/s of traffic per CPU-second",
        truth.packets,
        truth.bytes as f64 / 1e6,
        counter.0 as f64 / 1e6,
        secs,
        counter.0 as f64 / secs / 1e6,
        truth.bytes as f64 / secs / 1e6,
        truth.bytes as f64 * 8.0 / secs / 1e9,
    );
    assert_eq!(counter.0, 24 + 16 * truth.packets + truth.bytes);
}

#[derive(Default)]
struct CountingSink(u64);

impl std::io::Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
