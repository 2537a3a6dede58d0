//! The QUIC Initial reader (capsule-names) over arbitrary datagrams, and its frame parser
//! over arbitrary plaintexts (random bytes never pass AES-GCM's tag, so the frames are
//! fuzzed apart): never panics, and what it keeps respects the caps.
#![no_main]

use capsule_names::quic::Initials;
use capsule_names::tls::Hello;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let check = |h: Hello| {
        if let Hello::Client(h) = h {
            assert!(h.alpn.len() <= capsule_names::MAX_ALPN);
            assert!(h.sni.as_ref().is_none_or(|s| s.len() <= capsule_names::MAX_NAME));
            assert!(h.ja4.starts_with('q'));
        }
    };
    // The first byte cuts the rest into two datagrams (or two plaintexts).
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).min(rest.len());
    let (a, b) = rest.split_at(cut);
    let mut q = Initials::default();
    check(q.datagram(a));
    check(q.datagram(b));
    let mut p = Initials::default();
    check(p.plaintext(a));
    check(p.plaintext(b));
});
