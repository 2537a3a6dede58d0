//! Hand-built frames of the tests that craft packets (tunnels, the fleet's tunnelled TLS,
//! DNS answers): Ethernet between two fixed MACs, IPv4 with its header checksum right.

/// An IPv4 packet (DSCP `dscp`, protocol `proto`) around `payload`, its header checksum
/// right.
pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, dscp: u8, payload: &[u8]) -> Vec<u8> {
    let len = u16::try_from(20 + payload.len()).unwrap();
    let mut h = vec![0x45, dscp << 2];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let mut sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// An Ethernet frame from 02:00:00:00:00:01 to 02:00:00:00:00:02 of `ethertype`.
pub fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut e = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    e.extend_from_slice(&ethertype.to_be_bytes());
    e.extend_from_slice(payload);
    e
}

/// A UDP datagram (checksum 0: none) from port `sport` to `dport` around `payload`.
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// An Ethernet frame of a UDP datagram from `src`:`sport` to `dst`:`dport`.
pub fn udp_frame(
    src: [u8; 4],
    dst: [u8; 4],
    (sport, dport): (u16, u16),
    payload: &[u8],
) -> Vec<u8> {
    eth(0x0800, &ipv4(src, dst, 17, 0, &udp(sport, dport, payload)))
}

/// A DNS response from the resolver `server` (port 53) to `client` (port 33000) answering
/// `name` with `addr` (one A record).
pub fn dns_answer(client: [u8; 4], server: [u8; 4], name: &str, addr: [u8; 4]) -> Vec<u8> {
    let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
    for label in name.split('.') {
        m.push(u8::try_from(label.len()).unwrap());
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&[0, 1, 0, 1, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4]);
    m.extend_from_slice(&addr);
    udp_frame(server, client, (53, 33000), &m)
}
