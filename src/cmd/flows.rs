//! `capsule flows`: flow records of a window, from the side index alone.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use capsule_answers::{flows, Source};

use crate::cli::{FlowSort, FlowsArgs};
use crate::render::table::{Column, Table};
use crate::units;

pub fn run(a: &FlowsArgs) -> Result<ExitCode> {
    let (args, sort, limit, json) = (&a.q, a.sort, a.limit, a.json);
    if args.fleet {
        return fleet(a);
    }
    if let Some(remote) = args.remote_with(&a.old_cert)? {
        let sort = match sort {
            FlowSort::Bytes => "bytes",
            FlowSort::Packets => "packets",
            FlowSort::First => "first",
        };
        let path = format!(
            "/v1/flows?{}&sort={sort}&limit={limit}",
            crate::client::selection_params(args)?
        );
        let got = if json {
            crate::client::get(&remote, &path, &mut std::io::stdout().lock(), false)?
        } else {
            // The table is made here from the lines, as the local one is from the index.
            let mut body = Vec::new();
            let got = crate::client::get(&remote, &path, &mut body, false)?;
            let text = String::from_utf8(body).context("the server's flows are not UTF-8")?;
            let flows = text
                .lines()
                .map(flows::from_json_line)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow::anyhow!("{} answered /v1/flows with {e}", remote.url))?;
            table(
                &flows.iter().collect::<Vec<_>>(),
                &mut std::io::stdout().lock(),
            )?;
            got
        };
        if got.partial().is_some() {
            eprintln!(
                "capsule: the answer is partial: the server says flows are missing (its audit \
                 log names them; exit status {})",
                crate::output::PARTIAL
            );
            return Ok(ExitCode::from(crate::output::PARTIAL));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let q = args.query()?;
    if q.filter.beyond_index_but_encap() {
        eprintln!(
            "capsule: note: the flow index keeps no MAC addresses or packet lengths, and of \
             the TCP flags only those seen in each direction: these flows may have packets \
             that match (`capsule query` checks each packet)"
        );
    }
    let request = flows::Request {
        query: q.clone(),
        sort: match sort {
            FlowSort::Bytes => flows::Sort::Bytes,
            FlowSort::Packets => flows::Sort::Packets,
            FlowSort::First => flows::Sort::First,
        },
        limit: None,
    };
    let tier = crate::request::tier_reader(a.config.as_deref())?;
    let source = Source::store(args.store()).with_tier(crate::tier::tier_of(tier.as_ref()));
    let answer = flows::answer(&source, &request).map_err(crate::request::answer_error)?;
    let (listing, segments, unreadable) = (&answer.listing, &answer.segments, &answer.unreadable);
    let mut out = std::io::stdout().lock();
    let shown: Vec<_> = listing.flows.iter().take(limit).collect();
    if json {
        for s in &shown {
            let v = flows::json_line(s);
            writeln!(out, "{v}")?;
        }
    } else {
        table(&shown, &mut out)?;
    }
    crate::notes::note_window(segments, &q, listing.flows.is_empty());
    if listing.encap_undecided > 0 {
        eprintln!(
            "capsule: note: {} flow(s) are listed whose encapsulation the index does not \
             decide (their packets arrived in more than one, or their index predates \
             encapsulations: `capsule reindex`): they may have packets that match the \
             filter's tunnel or mpls terms (`capsule query` checks each packet)",
            listing.encap_undecided
        );
    }
    if !listing.unindexed.is_empty() {
        eprintln!(
            "capsule: note: segment(s) {:?} have no side index and are not listed; \
             `capsule reindex` builds it",
            listing.unindexed
        );
    }
    for (seq, blocks) in &listing.unseen {
        eprintln!(
            "capsule: note: open segment {seq}: block(s) {blocks:?} are not in its index \
             journal yet; their flows are not listed"
        );
    }
    for (seq, why) in &listing.journal_notes {
        eprintln!("capsule: note: open segment {seq}: index journal: {why}");
    }
    for (seq, why) in &listing.damaged_index {
        eprintln!("capsule: warning: the flows of segment {seq} are missing: {why}");
    }
    crate::notes::warn_unreadable(unreadable, "its flows are missing");
    crate::notes::warn_names_unseen(&listing.names_unseen, "flows");
    if answer.missing.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "capsule: the answer is partial: damaged or missing data was skipped (exit status {})",
            crate::output::PARTIAL
        );
        Ok(ExitCode::from(crate::output::PARTIAL))
    }
}

/// The flows as the table `capsule flows` prints (and its notes on cut and approximate
/// counts), at this terminal's width.
fn table(shown: &[&capsule_index::flows::FlowSummary], out: &mut dyn Write) -> Result<()> {
    let dscps = |mask: u64| -> String {
        (0..64u8)
            .filter(|d| mask & (1 << d) != 0)
            .map(|d| capsule_query::filter::dscp_name(d).map_or(d.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(",")
    };
    let any_vlan = shown.iter().any(|s| s.flow.key.vlans[0].is_some());
    let any_encap = shown.iter().any(|s| s.flow.totals.encap.is_some());
    let mut cols = vec![
        Column::left("proto", 10),
        Column::left("flow", u8::MAX),
        Column::right("packets", 8),
        Column::right("bytes", 9),
        Column::left("first", 3),
        Column::right("duration", 4),
        Column::left("dscp", 7),
        Column::right("retrans", 5),
        Column::right("zwin", 2),
        Column::right("rst", 1),
    ];
    if any_vlan {
        cols.insert(1, Column::left("vlan", 2));
    }
    if any_encap {
        cols.insert(if any_vlan { 3 } else { 2 }, Column::left("encap", 3));
    }
    let any_cut = shown.iter().any(|s| s.flow.totals.is_cut());
    if any_cut {
        let at = 4 + usize::from(any_vlan) + usize::from(any_encap);
        cols.insert(at, Column::right("stored", 6));
    }
    let mut t = Table::new(cols);
    for s in shown {
        let f = &s.flow;
        let k = &f.key;
        let ep = capsule_analytics::names::endpoint;
        let a = ep(k.a, k.ports.map(|p| p.0));
        let b = ep(k.b, k.ports.map(|p| p.1));
        // Client first where the ports show which side offers the service.
        let flow = match flows::client_side(f) {
            Some(0) => format!("{a} -> {b}"),
            Some(_) => format!("{b} -> {a}"),
            None => format!("{a} <-> {b}"),
        };
        // Who the other end is, from the flow's payload: `(tls: models.example-hub.io)`.
        let flow = match f.totals.names.as_ref().and_then(|n| n.describe()) {
            Some(d) => format!("{flow} ({d})"),
            None => flow,
        };
        let approx = if s.approximate { "~" } else { "" };
        let mut row = vec![
            capsule_wire::IpProto::from(k.proto).to_string(),
            flow,
            format!("{approx}{}", units::format_count(f.totals.total_packets())),
            format!("{approx}{}", units::format_bytes(f.totals.total_bytes())),
            crate::render::ms(f.totals.first_ns),
            units::format_duration_ns(f.totals.last_ns - f.totals.first_ns),
            dscps(f.totals.dscp[0] | f.totals.dscp[1]),
            (f.totals.retransmissions[0] + f.totals.retransmissions[1]).to_string(),
            (f.totals.zero_windows[0] + f.totals.zero_windows[1]).to_string(),
            (f.totals.resets[0] + f.totals.resets[1]).to_string(),
        ];
        if any_cut {
            let stored = if f.totals.is_cut() {
                units::format_bytes(f.totals.stored_bytes())
            } else {
                "all".to_string()
            };
            row.insert(4, stored);
        }
        if any_encap {
            // The tunnel the flow's packets arrived in: `vxlan vni 42 192.0.2.1>192.0.2.2`.
            let encap = f.totals.encap.as_deref();
            row.insert(
                2,
                encap.map_or(String::new(), |e| e.describe(f.totals.packets)),
            );
        }
        if any_vlan {
            let vlan = k
                .vlans
                .iter()
                .flatten()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(".");
            row.insert(1, vlan);
        }
        t.push(row);
    }
    for line in t.render(crate::render::table::output_width()) {
        writeln!(out, "{line}")?;
    }
    if any_cut {
        let cut: Vec<_> = shown.iter().filter(|s| s.flow.totals.is_cut()).collect();
        let from = cut
            .iter()
            .filter_map(|s| s.flow.totals.cut_at())
            .min()
            .unwrap_or(0);
        let note = format!(
            "stored: what the cut-off kept of {} cut flow(s) (the first cut at {}); \
             packets and bytes count every packet seen",
            cut.len(),
            crate::render::ms(from)
        );
        for line in crate::render::table::wrap(&note, crate::render::table::output_width()) {
            writeln!(out, "{line}")?;
        }
    }
    if shown.iter().any(|s| s.approximate) {
        writeln!(
            out,
            "~ counted from whole seconds: the flow starts or ends inside a second the \
             window cuts"
        )?;
    }
    Ok(())
}

/// `flows --fleet`: each node's flows of the window and filter, from the fleet's catalog,
/// sorted together; a flow two nodes saw is listed once per node (`node` in `--json`, a
/// `node` column in the table).
fn fleet(a: &FlowsArgs) -> Result<ExitCode> {
    let path = a.config.as_deref().ok_or_else(|| {
        crate::output::Usage(
            "--fleet needs --config FILE: its [fleet] section names the ClickHouse server".into(),
        )
    })?;
    let (_, fleet) = crate::request::fleet_config(path)?;
    let ch = capsule_fleet::ClickHouse::of(&fleet)?;
    let q = a.q.query()?;
    let (mut listing, behind, missing) = capsule_fleet::ask::flows_by_node(&ch, &q)?;
    let key = |s: &capsule_index::flows::FlowSummary| match a.sort {
        FlowSort::Bytes => u64::MAX - s.flow.totals.total_bytes(),
        FlowSort::Packets => u64::MAX - s.flow.totals.total_packets(),
        FlowSort::First => s.flow.totals.first_ns,
    };
    listing.sort_by_key(|(n, s)| (key(s), n.clone()));
    listing.truncate(a.limit);
    let mut out = std::io::stdout().lock();
    if a.json {
        for (node, s) in &listing {
            let mut v = flows::json_line(s);
            v["node"] = node.clone().into();
            writeln!(out, "{v}")?;
        }
    } else {
        let mut nodes: Vec<&String> = listing.iter().map(|(n, _)| n).collect();
        nodes.sort();
        nodes.dedup();
        for node in nodes {
            writeln!(out, "node {node}:")?;
            let shown: Vec<_> = listing
                .iter()
                .filter(|(n, _)| n == node)
                .map(|(_, s)| s)
                .collect();
            table(&shown, &mut out)?;
        }
    }
    if behind.is_empty() && missing.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for m in &missing {
        eprintln!("capsule: warning: {m}");
    }
    for n in &behind {
        eprintln!(
            "capsule: warning: node {} had {} batch(es) in its outbox at its last publish ({}): \
             its newest flows may be missing",
            n.node,
            n.backlog,
            capsule_query::format_instant(n.last_seen_ns)
        );
    }
    eprintln!(
        "capsule: the answer is partial (exit status {})",
        crate::output::PARTIAL
    );
    Ok(ExitCode::from(crate::output::PARTIAL))
}
