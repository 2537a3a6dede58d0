//! The DNS message parser (capsule-names), over UDP and TCP framing: never panics, and what
//! it keeps respects the caps.
#![no_main]

use capsule_names::dns::{parse, parse_tcp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for m in [parse(data), parse_tcp(data)].into_iter().flatten() {
        assert!(m.queries.len() <= capsule_names::MAX_DNS_NAMES);
        assert!(m.queries.iter().all(|q| q.len() <= 253 || q == "."));
    }
});
