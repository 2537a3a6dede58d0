//! A flow's inspection (capsule-names Tracker) fed arbitrary packets: the input is split
//! into packets (a length byte, a direction/TCP/SYN byte, a 4-byte sequence number, then the
//! payload; a SYN tells its sequence number, its payload ignored); never panics, and the
//! names kept respect the caps.
#![no_main]

use capsule_names::Tracker;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut t = Tracker::default();
    let mut rest = data;
    while let [len, flags, s0, s1, s2, s3, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (payload, next) = tail.split_at(n);
        let seq = (flags & 2 != 0).then(|| u32::from_be_bytes([*s0, *s1, *s2, *s3]));
        if let (true, Some(isn)) = (flags & 8 != 0, seq) {
            t.syn(usize::from(flags & 1), isn);
            rest = next;
            continue;
        }
        t.observe(usize::from(flags & 1), seq, if flags & 4 != 0 { 4791 } else { 53 }, payload);
        rest = next;
    }
    let n = t.names();
    assert!(n.alpn.len() <= capsule_names::MAX_ALPN);
    assert!(n.dns_queries.len() <= capsule_names::MAX_DNS_NAMES);
    assert!(n.dns_answers.len() <= capsule_names::MAX_DNS_ANSWERS);
});
