//! The planted millisecond events of the `bursts` tests (issue 33), shared by tests/bursts.rs
//! and tests/fleet.rs: a 2 ms line-rate EF burst from one sender, an incast of 24 senders
//! to one address within one millisecond, and a group sending outside its hours, written
//! here as a nanosecond pcap to import beside synth's traffic.

use super::write_pcap_ns;

pub const MS: u64 = 1_000_000;
/// synth's default start, 2026-11-30T02:00:00Z, in milliseconds.
pub const START_MS: u64 = 1_796_004_000_000;
/// The burst's first millisecond: 825 frames of 1514 bytes (9.99 Gbit/s) in each of two.
pub const BURST_MS: u64 = START_MS + 1_234;
pub const BURST_FRAMES: u64 = 825;
pub const FRAME: u64 = 1514;
/// The incast's millisecond: 24 senders, one 1000-byte frame each.
pub const INCAST_MS: u64 = START_MS + 1_567;
pub const SENDERS: u8 = 24;
/// The night group's traffic: 20 frames of 500 bytes from 02:00:01.800.
pub const NIGHT_MS: u64 = START_MS + 1_800;
pub const NIGHT_FRAMES: u64 = 20;

/// The headers of an Ethernet/IPv4/UDP frame of `len` bytes on the wire (the rest is not
/// captured: the pcap record's original length says how long it was).
pub fn udp(src: [u8; 4], dst: [u8; 4], dscp: u8, ports: (u16, u16), len: u64) -> Vec<u8> {
    let mut f = vec![2, 0, dst[0], dst[1], dst[2], dst[3]];
    f.extend_from_slice(&[2, 0, src[0], src[1], src[2], src[3]]);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (len - 14) as u16;
    let mut ip = vec![0x45, dscp << 2];
    ip.extend_from_slice(&ip_len.to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let sum = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum::<u32>();
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&ports.0.to_be_bytes());
    f.extend_from_slice(&ports.1.to_be_bytes());
    f.extend_from_slice(&(ip_len - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f
}

/// The planted events as a nanosecond pcap.
pub fn planted() -> Vec<u8> {
    let mut packets = Vec::new();
    for ms in [BURST_MS, BURST_MS + 1] {
        for i in 0..BURST_FRAMES {
            let f = udp([10, 77, 0, 1], [10, 77, 0, 2], 46, (4000, 5000), FRAME);
            packets.push((ms * MS + i * 1212, FRAME as u32, f));
        }
    }
    for s in 1..=SENDERS {
        let f = udp([10, 88, 0, s], [10, 88, 1, 1], 0, (7000, 9000), 1000);
        packets.push((INCAST_MS * MS + u64::from(s) * 40_000, 1000, f));
    }
    // A group sending outside its hours (`active_hours`): NIGHT_FRAMES of 500 bytes, one a
    // millisecond from NIGHT_MS.
    for i in 0..NIGHT_FRAMES {
        let f = udp([10, 66, 0, 1], [10, 66, 1, 1], 0, (6000, 6001), 500);
        packets.push(((NIGHT_MS + i) * MS, 500, f));
    }
    packets.sort_by_key(|x| x.0);
    write_pcap_ns(1, 65535, &packets)
}
