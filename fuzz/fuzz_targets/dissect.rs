//! The packet dissector over arbitrary bytes: the link type is the first two bytes (little
//! endian; the common ones are folded in so most inputs reach a real dissector).
//!
//! Property: `dscp_of` (the producer's fast path) agrees with the full dissection, and both
//! never panic; a fragment's key names its packet's addresses, protocol and identification.
#![no_main]

use capsule_wire::{dissect, dscp_of};
use libfuzzer_sys::fuzz_target;

/// The link types `dissect` knows; a first byte below their count picks one of them, so the
/// fuzzer does not have to find the numbers. Other values are used as they are.
const KNOWN: [u16; 10] = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276];

fuzz_target!(|input: &[u8]| {
    let Some((lt, data)) = input.split_first_chunk::<2>() else {
        return;
    };
    let linktype = match lt[1] {
        0 if usize::from(lt[0]) < KNOWN.len() => KNOWN[usize::from(lt[0])],
        _ => u16::from_le_bytes(*lt),
    };
    let d = dissect(linktype, data);
    assert_eq!(
        dscp_of(linktype, data),
        d.ip.map(|ip| ip.dscp),
        "dscp_of disagrees with dissect for link type {linktype}: {d:?}"
    );
    if let Some(ip) = d.ip {
        assert!(ip.version == 4 || ip.version == 6, "{d:?}");
        assert!(ip.dscp < 64 && ip.ecn < 4, "{d:?}");
    }
    // A fragment's key (the fragment join of the side index and the query): a first
    // fragment has ports when it has a transport header; a later one never does.
    if let Some((k, ports)) = d.fragment_key() {
        let ip = d.ip.expect("a fragment key of an IP packet");
        let f = ip.fragment.expect("a fragment key of a fragment");
        assert_eq!((k.proto, k.src, k.dst, k.id), (ip.proto, ip.src, ip.dst, f.id));
        assert_eq!(ports.is_some(), f.offset == 0, "{d:?}");
        assert_eq!(ports, d.l4.ports().filter(|_| f.offset == 0), "{d:?}");
    }
    // Debug of every field must not panic either.
    let _ = format!("{d:?}");
});
