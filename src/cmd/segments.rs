//! `capsule segments`: the segments of a store.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use capsule_store::Store;

use crate::cli::SegmentsArgs;

pub fn run(a: &SegmentsArgs) -> Result<ExitCode> {
    let json = a.json;
    let store = a.store.as_path();
    let store = Store::open(store)?;
    let (segs, unreadable) = store.open_segments_checked()?;
    super::warn_unreadable(&unreadable, "");
    let mut out = std::io::stdout().lock();
    if !json {
        writeln!(
            out,
            "{:>6}  {:<6}  {:>6}  {:>10}  {:>12}  {:<30}  {:<30}",
            "seq", "state", "blocks", "packets", "bytes", "first", "last"
        )?;
    }
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
            super::with_times(&mut v);
            writeln!(out, "{v}")?;
        } else {
            writeln!(
                out,
                "{:>6}  {:<6}  {:>6}  {:>10}  {:>12}  {:<30}  {:<30}",
                s.seq(),
                state,
                s.blocks().len(),
                packets,
                s.bytes(),
                first.map(capsule_query::format_instant).unwrap_or_default(),
                last.map(capsule_query::format_instant).unwrap_or_default()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
