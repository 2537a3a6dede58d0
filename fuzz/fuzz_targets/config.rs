//! The config file parser over arbitrary text.
//!
//! Properties: an error points inside the text (line 1 to one past the last, column 1 or
//! more) and displays; a config that parses serialises to JSON, every prefix of every group
//! looks up to a group holding a prefix at least as long that contains its address (the most
//! specific wins), and its work hours describe themselves and answer `contains` at the edges
//! of time.
#![no_main]

use capsule_config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    match Config::parse(text, "fuzz.toml") {
        Ok(c) => {
            serde_json::to_string(&c).expect("the model serialises");
            let g = c.groups();
            for group in g.iter() {
                for p in &group.prefixes {
                    let got = g
                        .group_of(p.addr())
                        .unwrap_or_else(|| panic!("{p} of {} is in no group", group.name));
                    let holder = g.get(got).expect("an id of this config");
                    assert!(
                        holder
                            .prefixes
                            .iter()
                            .any(|q| q.contains(p.addr()) && q.len() >= p.len()),
                        "{p} of {} looked up to {}, which holds no prefix as specific",
                        group.name,
                        holder.name
                    );
                }
            }
            for v in 0..64 {
                let _ = c.dscp_allowed(v, None);
            }
            if let Some(w) = c.work_hours() {
                let _ = w.describe();
                for ns in [0, 1_796_083_200_000_000_000, u64::MAX] {
                    let _ = w.contains(ns);
                }
            }
        }
        Err(e) => {
            let i = e.invalid().expect("parse reads no file: only Invalid");
            let lines = text.split('\n').count();
            assert!(
                i.line >= 1 && i.line <= lines + 1,
                "line {} of {lines}",
                i.line
            );
            assert!(i.column >= 1);
            let _ = e.to_string();
        }
    }
});
