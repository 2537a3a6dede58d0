//! `capsule segments`: the segments of a store, or (`--server`) of a server's store.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use capsule_answers::segments;

use crate::cli::SegmentsArgs;
use crate::render::table::{Column, Table};
use crate::units;

pub fn run(a: &SegmentsArgs) -> Result<ExitCode> {
    let answer = match a.remote.remote(None)? {
        Some(remote) => {
            let mut body = Vec::new();
            crate::client::get(&remote, "/v1/segments", &mut body, false)?;
            serde_json::from_slice(&body).with_context(|| {
                format!("{} answered /v1/segments with something else", remote.url)
            })?
        }
        None => {
            let store = a
                .store
                .as_deref()
                .expect("clap requires --store without --server");
            // Its `[tier]`: the trimmed segments described through their cached footers.
            let tier = crate::request::tier_reader(a.config.as_deref())?;
            let source = capsule_answers::Source::store(store)
                .with_tier(crate::tier::tier_of(tier.as_ref()));
            segments::answer(&source).map_err(crate::request::answer_error)?
        }
    };
    print(&answer, a.json)?;
    Ok(ExitCode::SUCCESS)
}

/// The segments as a table, or (`json`) one JSON line each.
fn print(answer: &segments::Answer, json: bool) -> Result<()> {
    crate::notes::warn_unreadable(&answer.unreadable, "");
    let mut out = std::io::stdout().lock();
    // Times to the second and sizes in SI units for people (--json has nanoseconds and
    // bytes); the block count goes first when the terminal is narrow. Where a segment lives
    // is shown when any lives in the object store (a store without a tier: all local).
    let tiered = answer
        .segments
        .iter()
        .any(|s| s.location.as_deref().is_some_and(|l| l != "local"));
    let mut columns = vec![Column::right("seq", 9), Column::left("state", 6)];
    if tiered {
        columns.push(Column::left("where", 3));
    }
    columns.extend([
        Column::right("blocks", 2),
        Column::right("packets", 5),
        Column::right("size", 7),
        Column::left("first", 8),
        Column::left("last", 4),
    ]);
    let mut table = Table::new(columns);
    let to_second = |ns: Option<u64>| {
        ns.map(|ns| {
            let t = capsule_query::format_instant(ns);
            format!("{}Z", &t[..t.len().min(19)])
        })
        .unwrap_or_default()
    };
    for s in &answer.segments {
        if json {
            let mut v = serde_json::to_value(s)?;
            crate::output::with_times(&mut v);
            writeln!(out, "{v}")?;
        } else {
            let mut row = vec![s.seq.to_string(), s.state.clone()];
            if tiered {
                row.push(s.location.clone().unwrap_or_else(|| "-".into()));
            }
            row.extend([
                s.blocks.to_string(),
                s.packets.to_string(),
                units::format_bytes(s.bytes),
                to_second(s.first_ns),
                to_second(s.last_ns),
            ]);
            table.push(row);
        }
    }
    if !json {
        for line in table.render(crate::render::table::output_width()) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}
