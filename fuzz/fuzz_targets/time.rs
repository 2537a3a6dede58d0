//! The time and duration parsers over arbitrary text.
//!
//! Properties: an instant that parses formats (RFC 3339 with ns) and parses back to itself;
//! `parse_time` of an instant agrees with `parse_instant`, and of `-DURATION` is `now` minus
//! the duration (saturating); errors display without panicking.
#![no_main]

use capsule_query::{format_instant, parse_duration, parse_instant, parse_time};
use libfuzzer_sys::fuzz_target;

/// A fixed "now" (2026-12-01), so runs are reproducible.
const NOW: u64 = 1_796_083_200_000_000_000;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    match parse_instant(text) {
        Ok(ns) => {
            let s = format_instant(ns);
            let back = parse_instant(&s)
                .unwrap_or_else(|e| panic!("{text:?} -> {ns} -> {s:?} does not parse: {e}"));
            assert_eq!(back, ns, "{text:?} -> {ns} -> {s:?} -> {back}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    match parse_duration(text) {
        Ok(d) => {
            let _ = d.as_nanos();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    match parse_time(text, NOW) {
        Ok(t) => {
            let trimmed = text.trim();
            if trimmed == "now" {
                assert_eq!(t, NOW);
            } else if let Some(ago) = trimmed.strip_prefix('-') {
                let d =
                    parse_duration(ago).expect("parse_time took a duration parse_duration refuses");
                let d = d.as_nanos().min(u128::from(u64::MAX)) as u64;
                assert_eq!(t, NOW.saturating_sub(d));
            } else {
                assert_eq!(Ok(t), parse_instant(trimmed).map_err(|e| e.to_string()));
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
