//! The TLS ClientHello parser (capsule-names) over arbitrary stream bytes: never panics, and
//! what it keeps respects the caps.
#![no_main]

use capsule_names::tls::{client_hello, Hello};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Hello::Client(h) = client_hello(data) {
        assert!(h.alpn.len() <= capsule_names::MAX_ALPN);
        assert!(h.sni.as_ref().is_none_or(|s| s.len() <= capsule_names::MAX_NAME));
        assert!(h.ja4.starts_with('t'));
    }
});
