//! `capsule fleet publish|nodes`: a store published to the fleet's ClickHouse catalog, and
//! the nodes the catalog knows (docs/fleet.md). The fleet questions themselves are the
//! analytics commands with `--fleet` (src/request.rs).

use std::process::ExitCode;

use anyhow::{Context, Result};
use capsule_fleet::publish::{self, Node};
use capsule_fleet::ClickHouse;

use crate::cli::{FleetCmd, FleetNodesArgs, FleetPublishArgs};
use crate::output::PARTIAL;
use crate::render::table::{output_width, Column, Table};

pub fn run(c: &FleetCmd) -> Result<ExitCode> {
    match c {
        FleetCmd::Publish(a) => publish(a),
        FleetCmd::Nodes(a) => nodes(a),
    }
}

fn publish(a: &FleetPublishArgs) -> Result<ExitCode> {
    let (config, fleet) = crate::request::fleet_config(&a.config)?;
    let ch = ClickHouse::of(&fleet)?;
    let version = crate::cli::VERSION.as_str();
    let node = Node {
        name: &fleet.node,
        advertise: fleet.advertise.as_deref(),
        config: Some(&config),
        version,
    };
    let staged = publish::stage(&a.store, &node)
        .with_context(|| format!("staging {} into its outbox", a.store.display()))?;
    let pushed = publish::push(&a.store, &node, &ch);
    let backlog = publish::backlog(&a.store)?;
    let (pushed, failure) = match pushed {
        Ok(p) => (p, None),
        Err(e) => (publish::Pushed::default(), Some(e)),
    };
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "node": fleet.node,
                "clickhouse": ch.url(),
                "staged": staged.staged,
                "unindexed": staged.unindexed,
                "pushed_batches": pushed.batches,
                "pushed_rows": {"flows": pushed.rows[0], "minutes": pushed.rows[1], "segments": pushed.rows[2]},
                "damaged": pushed.damaged,
                "backlog": backlog,
                "error": failure.as_ref().map(|e| capsule_store::error::chain(e)),
            })
        );
    } else {
        println!(
            "node {}: staged {} segment(s), pushed {} batch(es) ({} flow rows) to {}; {} \
             batch(es) wait in the outbox",
            fleet.node,
            staged.staged.len(),
            pushed.batches,
            pushed.rows[0],
            ch.url(),
            backlog
        );
    }
    if !staged.unindexed.is_empty() {
        eprintln!(
            "capsule: segment(s) {:?} have no current side index and were not published \
             (`capsule reindex` builds it; the next publish takes them)",
            staged.unindexed
        );
    }
    for d in &pushed.damaged {
        eprintln!("capsule: a damaged outbox file was removed, its segment is staged again from the index: {d}");
    }
    match failure {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => {
            eprintln!(
                "capsule: {}; {backlog} batch(es) wait in {} and the next publish sends them \
                 (exit status {PARTIAL})",
                capsule_store::error::chain(&e),
                capsule_fleet::outbox::Outbox::of(&a.store).dir().display()
            );
            Ok(ExitCode::from(PARTIAL))
        }
    }
}

fn nodes(a: &FleetNodesArgs) -> Result<ExitCode> {
    use std::io::Write;
    let (_, fleet) = crate::request::fleet_config(&a.config)?;
    let ch = ClickHouse::of(&fleet)?;
    let list = capsule_fleet::nodes::list(&ch)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "clickhouse": ch.url(), "nodes": list })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        writeln!(out, "no nodes have published to {}", ch.url())?;
        return Ok(ExitCode::SUCCESS);
    }
    let fmt = |ns: Option<u64>| ns.map_or("-".to_string(), capsule_query::format_instant);
    let mut t = Table::new(vec![
        Column::left("node", u8::MAX),
        Column::left("serve", 5),
        Column::left("first packet", 4),
        Column::left("last packet", 4),
        Column::right("segments", 6),
        Column::right("bytes", 6),
        Column::left("last publish", 3),
        Column::right("backlog", 7),
    ]);
    for n in &list {
        t.push(vec![
            n.row.node.clone(),
            if n.row.advertise.is_empty() {
                "-".into()
            } else {
                n.row.advertise.clone()
            },
            fmt(n.first_ns),
            fmt(n.last_ns),
            n.segments.to_string(),
            crate::units::format_bytes(n.bytes),
            fmt(Some(n.row.last_seen_ns)),
            n.row.backlog.to_string(),
        ]);
    }
    for line in t.render(output_width()) {
        writeln!(out, "{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}
