//! The text parsers (capsule-names): HTTP/1 request head and SSH version line, and the
//! application recogniser: never panic.
#![no_main]

use capsule_names::{detect, text};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let text::Http::Request { host: Some(h), .. } = text::http_request(data) {
        assert!(!h.is_empty() && h.len() <= capsule_names::MAX_NAME);
    }
    if let text::Ssh::Version(v) = text::ssh_version(data) {
        assert!(v.len() <= capsule_names::MAX_NAME);
    }
    let port = data.first().map_or(0, |&b| if b & 1 == 1 { 4791 } else { 443 });
    let _ = detect::app(data, true, port);
    let _ = detect::app(data, false, port);
});
