//! `capsule segments`: the segments of a store.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use capsule_store::Store;

use crate::cli::SegmentsArgs;
use crate::render::table::{Column, Table};
use crate::units;

pub fn run(a: &SegmentsArgs) -> Result<ExitCode> {
    let json = a.json;
    let store = a.store.as_path();
    let store = Store::open(store)?;
    let (segs, unreadable) = store.open_segments_checked()?;
    crate::notes::warn_unreadable(&unreadable, "");
    let mut out = std::io::stdout().lock();
    // Times to the second and sizes in SI units for people (--json has nanoseconds and
    // bytes); the block count goes first when the terminal is narrow.
    let mut table = Table::new(vec![
        Column::right("seq", 9),
        Column::left("state", 6),
        Column::right("blocks", 2),
        Column::right("packets", 5),
        Column::right("size", 7),
        Column::left("first", 8),
        Column::left("last", 4),
    ]);
    let to_second = |ns: Option<u64>| {
        ns.map(|ns| {
            let t = capsule_query::format_instant(ns);
            format!("{}Z", &t[..t.len().min(19)])
        })
        .unwrap_or_default()
    };
    for s in &segs {
        let packets: u64 = s.blocks().iter().map(|b| u64::from(b.packets)).sum();
        let first = s.blocks().iter().map(|b| b.first_ns).min();
        let last = s.blocks().iter().map(|b| b.last_ns).max();
        let state = match s.state() {
            capsule_store::SegmentState::Sealed => "sealed",
            capsule_store::SegmentState::Open => "open",
        };
        if json {
            let v = serde_json::json!({
                "seq": s.seq(), "state": state, "path": s.path(), "blocks": s.blocks().len(),
                "packets": packets, "bytes": s.bytes(), "first_ns": first, "last_ns": last,
                "interfaces": s.interfaces().iter().map(|i| serde_json::json!({
                    "linktype": i.linktype, "snaplen": i.snaplen, "name": i.name })).collect::<Vec<_>>(),
            });
            let mut v = v;
            crate::output::with_times(&mut v);
            writeln!(out, "{v}")?;
        } else {
            table.push(vec![
                s.seq().to_string(),
                state.to_string(),
                s.blocks().len().to_string(),
                packets.to_string(),
                units::format_bytes(s.bytes()),
                to_second(first),
                to_second(last),
            ]);
        }
    }
    if !json {
        for line in table.render(crate::render::table::output_width()) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
