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
        FleetCmd::Diff(a) => diff(a),
    }
}

fn publish(a: &FleetPublishArgs) -> Result<ExitCode> {
    let (config, fleet) = crate::request::fleet_config(&a.config)?;
    let ch = ClickHouse::of(&fleet)?;
    let version = crate::cli::VERSION.as_str();
    let tier = crate::tier::tier_of(crate::tier::reader_of(Some(&config))?.as_ref());
    let node = Node {
        name: &fleet.node,
        advertise: fleet.advertise.as_deref(),
        config: Some(&config),
        version,
        tier: tier.as_ref(),
    };
    let _lock = publish::lock(&a.store)?;
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
                "pushed_rows": capsule_fleet::outbox::TABLES
                    .iter()
                    .zip(pushed.rows)
                    .map(|(t, n)| (t.to_string(), serde_json::json!(n)))
                    .collect::<serde_json::Map<_, _>>(),
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
    // When a node tiers: its segments uploaded to the object store, and of them those
    // trimmed from its disk (only in the object store).
    let tiers = list.iter().any(|n| n.tiered_segments + n.both_segments > 0);
    let mut columns = vec![
        Column::left("node", u8::MAX),
        Column::left("serve", 5),
        Column::left("first packet", 4),
        Column::left("last packet", 4),
        Column::right("segments", 6),
    ];
    if tiers {
        columns.extend([Column::right("uploaded", 6), Column::right("trimmed", 6)]);
    }
    columns.extend([
        Column::right("bytes", 6),
        Column::left("last publish", 3),
        Column::right("backlog", 7),
    ]);
    let mut t = Table::new(columns);
    for n in &list {
        let mut row = vec![
            n.row.node.clone(),
            if n.row.advertise.is_empty() {
                "-".into()
            } else {
                n.row.advertise.clone()
            },
            fmt(n.first_ns),
            fmt(n.last_ns),
            n.segments.to_string(),
        ];
        if tiers {
            row.push((n.tiered_segments + n.both_segments).to_string());
            row.push(n.tiered_segments.to_string());
        }
        row.extend([
            crate::units::format_bytes(n.bytes),
            fmt(Some(n.row.last_seen_ns)),
            n.row.backlog.to_string(),
        ]);
        t.push(row);
    }
    for line in t.render(output_width()) {
        writeln!(out, "{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The deadlines of a pull; `CAPSULE_FLEET_DEADLINES=CONNECT,FIRST,IDLE` (milliseconds)
/// overrides them (tests, and a fleet on slow links).
fn deadlines() -> crate::client::Deadlines {
    let mut d = crate::fleet_pull::DEADLINES;
    if let Ok(v) = std::env::var("CAPSULE_FLEET_DEADLINES") {
        let ms: Vec<u64> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        if let [c, f, i] = ms[..] {
            d.connect = std::time::Duration::from_millis(c);
            d.first_byte = std::time::Duration::from_millis(f);
            d.idle = std::time::Duration::from_millis(i);
        }
    }
    d
}

/// The config of a fleet packet question (`--config`, needed).
fn packet_config(config: Option<&std::path::Path>) -> Result<capsule_config::Fleet> {
    let path = config.ok_or_else(|| {
        crate::output::Usage(
            "--fleet needs --config FILE: its [fleet] section names the ClickHouse server and \
             the CA and token to pull the nodes' packets with"
                .into(),
        )
    })?;
    Ok(crate::request::fleet_config(path)?.1)
}

/// Names the nodes that did not answer whole on stderr; whether any did not.
fn say_failures(pulled: &[crate::fleet_pull::Pulled]) -> bool {
    let mut partial = false;
    for p in pulled {
        if let Some(why) = &p.failed {
            partial = true;
            eprintln!(
                "capsule: warning: node {} ({}) did not answer whole, its packets (or those \
                 after the packets it sent) are missing from the answer: {why}",
                p.plan.node,
                if p.plan.advertise.is_empty() {
                    "no serve URL"
                } else {
                    &p.plan.advertise
                }
            );
        } else if let Some(why) = &p.partial {
            partial = true;
            eprintln!(
                "capsule: warning: node {} says its answer is partial: {why}",
                p.plan.node
            );
        }
    }
    partial
}

fn node_json(p: &crate::fleet_pull::Pulled, packets: Option<u64>) -> serde_json::Value {
    serde_json::json!({
        "node": p.plan.node,
        "serve": p.plan.advertise,
        "segments": p.plan.segments,
        "from_ns": p.plan.from_ns,
        "to_ns": p.plan.to_ns,
        "status": if p.failed.is_some() { "failed" } else if p.partial.is_some() { "partial" } else { "ok" },
        "error": p.failed.as_deref().or(p.partial.as_deref()),
        "packets": packets,
        "bytes_received": p.bytes,
        "seconds": p.seconds,
    })
}

/// `capsule query --fleet`: the packets of the window and filter over every node, merged
/// by timestamp into one pcapng (one interface per node and interface, named after the
/// node); `--explain` prints the plan (which node, which segments, which window).
pub fn query(a: &crate::cli::QueryArgs) -> Result<ExitCode> {
    use crate::output::Usage;
    if matches!(a.format, Some(crate::cli::OutFormat::Pcap)) {
        return Err(Usage(
            "--fleet writes pcapng: one interface per node and interface, which pcap cannot \
             hold"
                .into(),
        )
        .into());
    }
    let fleet = packet_config(a.config.as_deref())?;
    let q = a.q.query()?;
    let ch = ClickHouse::of(&fleet)?;
    // The nodes connected to while ClickHouse plans (a packet pull's first byte then waits
    // for the plan or the TLS handshake, whichever is slower, not their sum).
    let warm = (!a.explain && !a.count).then(|| crate::fleet_pull::warm(&fleet, &ch, &deadlines()));
    let plan = capsule_fleet::plan::plan(&ch, &q, None)?;
    let warm = warm.and_then(|h| h.join().ok()).unwrap_or_default();
    if a.explain {
        if a.json {
            crate::output::print_json(serde_json::json!({
                "nodes": plan.nodes,
                "behind": plan.behind.iter().map(|n| &n.node).collect::<Vec<_>>(),
            }));
        } else {
            for n in &plan.nodes {
                let tiered = if n.tiered.is_empty() {
                    String::new()
                } else {
                    format!(" (in its object store only: {:?})", n.tiered)
                };
                println!(
                    "node {} ({}): segments {:?}{tiered}, window {} .. {}",
                    n.node,
                    if n.advertise.is_empty() {
                        "no serve URL"
                    } else {
                        &n.advertise
                    },
                    n.segments,
                    capsule_query::format_instant(n.from_ns),
                    capsule_query::format_instant(n.to_ns)
                );
            }
            println!("plan: ask {} node(s)", plan.nodes.len());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let filter = q.filter.to_string();
    let t0 = std::time::Instant::now();
    // --bpf: sent to the nodes, which apply it to their own packets (each checks it in its
    // guard's child first); checked here too, so a bad expression is refused before any
    // node is asked.
    if let Some(expr) = &a.bpf {
        crate::bpf_check::check(expr, &[capsule_pcap::LINKTYPE_ETHERNET])?;
    }
    let ask = crate::fleet_pull::Ask {
        filter: &filter,
        bpf: a.bpf.as_deref(),
    };
    if a.count {
        return count(a, &fleet, &plan, &ask, t0);
    }
    let write = match (a.count, a.write.as_deref()) {
        (true, _) => None,
        (false, w) => Some(w.unwrap_or("-")),
    };
    if a.json && write == Some("-") {
        return Err(
            Usage("--json with --fleet goes with -w FILE (the packets go there)".into()).into(),
        );
    }
    // The nodes' packets merged as they arrive.
    let merge = |readers: Vec<capsule_fleet::spool::SpoolReader>| -> Result<Merged> {
        let inputs = plan
            .nodes
            .iter()
            .zip(readers)
            .map(|(p, r)| capsule_fleet::merge::Input {
                node: p.node.clone(),
                reader: std::io::BufReader::with_capacity(1 << 16, r),
            })
            .collect();
        let keep: Option<&mut capsule_fleet::merge::Keep> = None;
        let merged = match write {
            None => capsule_fleet::merge::merge(inputs, std::io::sink(), keep),
            Some("-") => capsule_fleet::merge::merge(inputs, std::io::stdout().lock(), keep),
            Some(w) => {
                let existed = std::path::Path::new(w).exists();
                let f = crate::files::create(w, existed)?;
                capsule_fleet::merge::merge(
                    inputs,
                    std::io::BufWriter::with_capacity(1 << 20, f),
                    keep,
                )
            }
        };
        merged.map_err(|e| {
            if e.is_usage() {
                Usage(e.to_string()).into()
            } else {
                anyhow::Error::from(e)
            }
        })
    };
    let (mut pulled, merged) =
        crate::fleet_pull::stream_all(&fleet, &plan.nodes, &ask, &deadlines(), &warm, merge)?;
    let merged = merged?;
    // A node whose answer ended damaged or cut off without its pull failing.
    for (p, why) in pulled.iter_mut().zip(&merged.ended) {
        if let (None, Some(why)) = (&p.failed, why) {
            p.failed = Some(why.clone());
        }
    }
    let packets: Vec<Option<u64>> = merged.per_input.iter().map(|n| Some(*n)).collect();
    let partial = say_failures(&pulled);
    let partial = say_behind(&plan.behind) || partial;
    let seconds = t0.elapsed().as_secs_f64();
    let partial_nodes = || -> Vec<&String> {
        pulled
            .iter()
            .filter(|p| p.failed.is_some() || p.partial.is_some())
            .map(|p| &p.plan.node)
            .chain(plan.behind.iter().map(|n| &n.node))
            .collect()
    };
    if a.json {
        crate::output::print_json(serde_json::json!({
            "packets": merged.packets,
            "bytes": merged.bytes,
            "seconds": seconds,
            "nodes": pulled.iter().zip(&packets).map(|(p, n)| node_json(p, *n)).collect::<Vec<_>>(),
            "partial": partial_nodes(),
        }));
    } else if a.count {
        println!(
            "{} packets ({}) from {} node(s) in {seconds:.3} s",
            merged.packets,
            crate::units::format_bytes(merged.bytes),
            plan.nodes.len()
        );
    }
    if !a.count {
        eprintln!(
            "exported {} packets from {} node(s) in {seconds:.3} s",
            merged.packets,
            plan.nodes.len(),
        );
    }
    finish(plan.nodes.is_empty(), partial)
}

type Merged = capsule_fleet::merge::Merged;

/// Warns of the nodes behind (batches in their outbox at their last publish); whether any.
fn say_behind(behind: &[capsule_fleet::rows::NodeRow]) -> bool {
    for n in behind {
        eprintln!(
            "capsule: warning: node {} had {} batch(es) in its outbox at its last publish ({}): \
             its newest segments may be missing from the answer",
            n.node,
            n.backlog,
            capsule_query::format_instant(n.last_seen_ns)
        );
    }
    !behind.is_empty()
}

/// The exit of a fleet packet question: a note when no node was asked; 3 when partial.
fn finish(nobody: bool, partial: bool) -> Result<ExitCode> {
    if nobody {
        eprintln!(
            "capsule: note: no node published a segment with packets of this window and filter"
        );
    }
    if partial {
        eprintln!(
            "capsule: the answer is partial: the nodes named above are missing from it (exit \
             status {PARTIAL})"
        );
        return Ok(ExitCode::from(PARTIAL));
    }
    Ok(ExitCode::SUCCESS)
}

/// `query --fleet --count`: each asked node's count of its window (`GET /v1/count`),
/// summed; the nodes that did not answer named, exit 3.
fn count(
    a: &crate::cli::QueryArgs,
    fleet: &capsule_config::Fleet,
    plan: &capsule_fleet::plan::Plan,
    ask: &crate::fleet_pull::Ask,
    t0: std::time::Instant,
) -> Result<ExitCode> {
    let got = crate::fleet_pull::count_all(fleet, &plan.nodes, ask, &deadlines())?;
    let (pulled, counts): (Vec<_>, Vec<_>) = got.into_iter().unzip();
    let sum =
        |f: fn(&capsule_answers::export::Count) -> u64| counts.iter().flatten().map(f).sum::<u64>();
    let (packets, bytes) = (sum(|c| c.packets), sum(|c| c.bytes));
    let partial = say_failures(&pulled);
    let partial = say_behind(&plan.behind) || partial;
    let seconds = t0.elapsed().as_secs_f64();
    if a.json {
        crate::output::print_json(serde_json::json!({
            "packets": packets,
            "bytes": bytes,
            "seconds": seconds,
            "nodes": pulled.iter().zip(&counts).map(|(p, c)| {
                let mut v = node_json(p, c.as_ref().map(|c| c.packets));
                v["bytes"] = serde_json::json!(c.as_ref().map(|c| c.bytes));
                v
            }).collect::<Vec<_>>(),
            "partial": pulled.iter().filter(|p| p.failed.is_some() || p.partial.is_some())
                .map(|p| &p.plan.node).chain(plan.behind.iter().map(|n| &n.node)).collect::<Vec<_>>(),
        }));
    } else {
        println!(
            "{packets} packets ({}) from {} node(s) in {seconds:.3} s",
            crate::units::format_bytes(bytes),
            plan.nodes.len()
        );
    }
    finish(plan.nodes.is_empty(), partial)
}

/// One node's packets for `fleet diff`: times and keys, in file order.
fn keys_of(node: &str, f: &std::fs::File) -> Result<Vec<capsule_fleet::diff::Seen>> {
    use capsule_pcap::{CaptureReader, Record};
    let mut r = CaptureReader::new(format!("node {node}"), std::io::BufReader::new(f))?;
    let mut out = Vec::new();
    let mut linktypes: Vec<u16> = Vec::new();
    while let Some(rec) = r.next_record()? {
        if let Record::Interface { .. } = rec {
            linktypes = r.interfaces().iter().map(|i| i.linktype).collect();
            continue;
        }
        if let Record::Packet(p) = rec {
            let lt = linktypes.get(p.iface as usize).copied().unwrap_or(u16::MAX);
            out.push(capsule_fleet::diff::Seen {
                ts_ns: p.ts_ns,
                key: capsule_fleet::diff::key(lt, p.data),
            });
        }
    }
    Ok(out)
}

/// The packets at `indexes` (ascending, into the file's packets) written as pcapng.
fn write_picked(
    node: &str,
    mut f: &std::fs::File,
    indexes: &[usize],
    out: &std::path::Path,
) -> Result<()> {
    use capsule_pcap::{CaptureReader, Record};
    use std::io::{Seek, Write};
    f.seek(std::io::SeekFrom::Start(0))?;
    let mut r = CaptureReader::new(format!("node {node}"), std::io::BufReader::new(f))?;
    let mut buf = Vec::new();
    capsule_pcap::write::pcapng_shb(&mut buf, Some("capsule fleet diff"));
    let mut ids = std::collections::HashMap::new();
    let (mut i, mut k) = (0usize, 0usize);
    let mut w = std::io::BufWriter::new(crate::files::create(
        &out.display().to_string(),
        out.exists(),
    )?);
    let mut ifaces: Vec<capsule_pcap::Interface> = Vec::new();
    while let Some(rec) = r.next_record()? {
        if let Record::Interface { .. } = rec {
            ifaces = r.interfaces().to_vec();
            continue;
        }
        let Record::Packet(p) = rec else { continue };
        if indexes.get(k) == Some(&i) {
            k += 1;
            let n = ids.len() as u32;
            let id = *ids.entry(p.iface).or_insert_with(|| {
                if let Some(iface) = ifaces.get(p.iface as usize) {
                    let mut iface = iface.clone();
                    iface.name = Some(capsule_fleet::merge::interface_name(node, &iface));
                    capsule_pcap::write::pcapng_idb(&mut buf, &iface);
                }
                n
            });
            capsule_pcap::write::pcapng_epb(&mut buf, id, p.ts_ns, p.orig_len, p.data);
            if buf.len() >= 1 << 20 {
                w.write_all(&buf)?;
                buf.clear();
            }
        }
        i += 1;
    }
    w.write_all(&buf)?;
    w.flush()?;
    Ok(())
}

fn diff(a: &crate::cli::FleetDiffArgs) -> Result<ExitCode> {
    use crate::output::Usage;
    let [na, nb] = [&a.between[0], &a.between[1]];
    if na == nb {
        return Err(Usage(format!("--between {na} {nb}: two different nodes")).into());
    }
    let fleet = packet_config(Some(&a.config))?;
    let q = a.window.query()?;
    let ch = ClickHouse::of(&fleet)?;
    let plan = capsule_fleet::plan::plan(&ch, &q, Some(&[na.as_str(), nb.as_str()]))?;
    let known: Vec<String> = capsule_fleet::nodes::registry(&ch)?
        .into_iter()
        .map(|n| n.node)
        .collect();
    for n in [na, nb] {
        if !known.contains(n) {
            return Err(Usage(format!(
                "--between: no node {n} in the fleet (known: {})",
                known.join(", ")
            ))
            .into());
        }
    }
    // Both nodes over the same window: the union of their candidate spans.
    let (mut from, mut to) = (u64::MAX, 0);
    for p in &plan.nodes {
        from = from.min(p.from_ns);
        to = to.max(p.to_ns);
    }
    let tol = a.tolerance.as_nanos().min(u128::from(u64::MAX)) as u64;
    let registry = capsule_fleet::nodes::registry(&ch)?;
    let node_plan = |name: &str, extra: u64| capsule_fleet::plan::NodePlan {
        node: name.to_string(),
        advertise: registry
            .iter()
            .find(|n| n.node == name)
            .map(|n| n.advertise.clone())
            .unwrap_or_default(),
        // Every segment of the widened window: B's packets within the tolerance may lie in
        // a segment the catalog did not find for the window itself.
        segments: Vec::new(),
        tiered: Vec::new(),
        from_ns: from.saturating_sub(extra),
        to_ns: to.saturating_add(extra),
    };
    let filter = q.filter.to_string();
    let (pulled, ka, kb) = if from >= to {
        (Vec::new(), Vec::new(), Vec::new())
    } else {
        let plans = [node_plan(na, tol), node_plan(nb, tol)];
        let pulled = crate::fleet_pull::pull_all(
            &fleet,
            &plans,
            &crate::fleet_pull::Ask {
                filter: &filter,
                bpf: None,
            },
            &deadlines(),
        )?;
        if say_failures(&pulled) {
            eprintln!(
                "capsule: the comparison needs both nodes' packets whole; not made (exit status \
                 {PARTIAL})"
            );
            if a.json {
                crate::output::print_json(serde_json::json!({
                    "a": na, "b": nb, "flows": null,
                    "partial": pulled.iter().filter(|p| p.failed.is_some() || p.partial.is_some()).map(|p| &p.plan.node).collect::<Vec<_>>(),
                    "nodes": pulled.iter().map(|p| node_json(p, None)).collect::<Vec<_>>(),
                }));
            }
            return Ok(ExitCode::from(PARTIAL));
        }
        let ka = keys_of(na, pulled[0].file.as_ref().expect("answered whole"))?;
        let kb = keys_of(nb, pulled[1].file.as_ref().expect("answered whole"))?;
        (pulled, ka, kb)
    };
    // Both were asked for the tolerance more on each side: a packet inside the window has
    // its twin to match, and only packets inside it are counted.
    let d = capsule_fleet::diff::diff(&ka, &kb, tol, (from, to));
    let b_only = d.b_only.clone();
    if let Some(w) = &a.write {
        match pulled.first().and_then(|p| p.file.as_ref()) {
            Some(f) => write_picked(na, f, &d.a_only, w)?,
            None => write_picked_empty(w)?,
        }
    }
    let serve_a = pulled
        .first()
        .map(|p| p.plan.advertise.clone())
        .unwrap_or_default();
    let export = |f: &capsule_fleet::diff::FlowDiff| {
        f.a_only_span.map(|(x, y)| {
            let mut cmd = format!(
                "capsule query --server {}",
                capsule_analytics::shell_quote(&serve_a)
            );
            if let Some(t) = &fleet.token_file {
                cmd += &format!(
                    " --token-file {}",
                    capsule_analytics::shell_quote(&t.display().to_string())
                );
            }
            if let Some(ca) = &fleet.ca {
                cmd += &format!(
                    " --ca {}",
                    capsule_analytics::shell_quote(&ca.display().to_string())
                );
            }
            format!(
                "{cmd} --from @{x} --to @{} {} -w lost-{na}-{nb}.pcapng",
                y + 1,
                capsule_analytics::shell_quote(&f.flow.filter().to_string())
            )
        })
    };
    if a.json {
        let flows: Vec<_> = d
            .flows
            .iter()
            .map(|f| {
                let mut v = serde_json::to_value(f).expect("a flow diff is JSON");
                v["filter"] = f.flow.filter().to_string().into();
                v["export"] = export(f).into();
                v
            })
            .collect();
        crate::output::print_json(serde_json::json!({
            "a": na,
            "b": nb,
            "from_ns": (from < to).then_some(from),
            "to_ns": (from < to).then_some(to),
            "tolerance_ns": tol,
            "a_packets": ka.iter().filter(|s| s.ts_ns >= from && s.ts_ns < to).count(),
            "b_packets": kb.iter().filter(|s| s.ts_ns >= from && s.ts_ns < to).count(),
            "a_only": d.a_only.len(),
            "b_only": b_only.len(),
            "a_only_ns": d.a_only.iter().map(|&i| ka[i].ts_ns).collect::<Vec<_>>(),
            "only_a_flows": d.only_a_flows,
            "only_b_flows": d.only_b_flows,
            "unkeyed": d.unkeyed,
            "flows": flows,
            "partial": Vec::<String>::new(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "A {na} -> B {nb}: {} flows both saw; {} packets A saw and B did not, {} the reverse \
         (tolerance {:?}); {} flows only {na} saw, {} only {nb}",
        d.flows.len(),
        d.a_only.len(),
        b_only.len(),
        a.tolerance,
        d.only_a_flows,
        d.only_b_flows
    );
    let mut t = Table::new(vec![
        Column::left("flow", u8::MAX),
        Column::right("at A", 6),
        Column::right("at B", 6),
        Column::right("A only", 7),
        Column::right("B only", 5),
        Column::right("delay p50", 4),
        Column::right("delay p99", 3),
    ]);
    let us = |ns: i64| format!("{:.1} µs", ns as f64 / 1e3);
    for f in d.flows.iter().take(a.limit) {
        t.push(vec![
            f.flow.filter().to_string(),
            f.a_packets.to_string(),
            f.b_packets.to_string(),
            f.a_only.to_string(),
            f.b_only.to_string(),
            f.delay.map_or("-".into(), |d| us(d.p50_ns)),
            f.delay.map_or("-".into(), |d| us(d.p99_ns)),
        ]);
    }
    for line in t.render(output_width()) {
        println!("{line}");
    }
    for f in d.flows.iter().take(a.limit).filter(|f| f.a_only > 0) {
        let secs: Vec<String> = f
            .seconds
            .iter()
            .filter(|s| s.a_only > 0)
            .map(|s| {
                format!(
                    "{} ({})",
                    capsule_query::format_instant(s.second * 1_000_000_000),
                    s.a_only
                )
            })
            .collect();
        println!("lost in {}: {}", f.flow.filter(), secs.join(", "));
        if let Some(c) = export(f) {
            println!("  {c}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An empty pcapng (nothing was lost, or nothing to compare).
fn write_picked_empty(out: &std::path::Path) -> Result<()> {
    let mut buf = Vec::new();
    capsule_pcap::write::pcapng_shb(&mut buf, Some("capsule fleet diff"));
    std::fs::write(out, buf).with_context(|| format!("cannot write {}", out.display()))
}
