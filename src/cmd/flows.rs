//! `capsule flows`: flow records of a window, from the side index alone.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use capsule_store::Store;

use crate::cli::{FlowSort, FlowsArgs};
use crate::table::{Column, Table};
use crate::units;

pub fn run(a: &FlowsArgs) -> Result<ExitCode> {
    let (args, sort, limit, json) = (&a.q, a.sort, a.limit, a.json);
    if let Some(url) = &args.server {
        if !json {
            return Err(super::Usage(format!(
                "flows --server {url} answers JSON lines only: add --json"
            ))
            .into());
        }
        let sort = match sort {
            FlowSort::Bytes => "bytes",
            FlowSort::Packets => "packets",
            FlowSort::First => "first",
        };
        let path = format!(
            "/v1/flows?{}&sort={sort}&limit={limit}",
            super::remote::selection_params(args)?
        );
        let remote = args.remote().expect("called with --server");
        let got = super::remote::get(&remote, &path, &mut std::io::stdout().lock(), false)?;
        if got.partial().is_some() {
            eprintln!(
                "capsule: the answer is partial: the server says flows are missing (its audit \
                 log names them; exit status {})",
                super::PARTIAL
            );
            return Ok(ExitCode::from(super::PARTIAL));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let q = args.query()?;
    if q.filter.beyond_index() {
        eprintln!(
            "capsule: note: the flow index keeps no MAC addresses or packet lengths, and \
             of the TCP flags only those seen in each direction: these flows may have \
             packets that match (`capsule query` checks each packet)"
        );
    }
    let store = Store::open(args.store())?;
    let (segments, unreadable) = store.open_segments_checked()?;
    let listing = list(&store, &segments, &q, sort)?;
    let mut out = std::io::stdout().lock();
    let dscps = |mask: u64| -> String {
        (0..64u8)
            .filter(|d| mask & (1 << d) != 0)
            .map(|d| capsule_query::filter::dscp_name(d).map_or(d.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(",")
    };
    let shown: Vec<_> = listing.flows.iter().take(limit).collect();
    if json {
        for s in &shown {
            let v = json_line(s);
            writeln!(out, "{v}")?;
        }
    } else {
        let any_vlan = shown.iter().any(|s| s.flow.key.vlans[0].is_some());
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
        let any_cut = shown.iter().any(|s| s.flow.totals.is_cut());
        if any_cut {
            cols.insert(if any_vlan { 5 } else { 4 }, Column::right("stored", 6));
        }
        let mut t = Table::new(cols);
        for s in &shown {
            let f = &s.flow;
            let k = &f.key;
            let ep = |addr: std::net::IpAddr, port: Option<u16>| match (addr, port) {
                (std::net::IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
                (a, Some(p)) => format!("{a}:{p}"),
                (a, None) => a.to_string(),
            };
            let a = ep(k.a, k.ports.map(|p| p.0));
            let b = ep(k.b, k.ports.map(|p| p.1));
            // Client first where the ports show which side offers the service.
            let flow = match client_side(f) {
                Some(0) => format!("{a} -> {b}"),
                Some(_) => format!("{b} -> {a}"),
                None => format!("{a} <-> {b}"),
            };
            let approx = if s.approximate { "~" } else { "" };
            let mut row = vec![
                capsule_query::filter::proto_name(k.proto)
                    .map_or_else(|| k.proto.to_string(), str::to_string),
                flow,
                format!("{approx}{}", units::format_count(f.totals.total_packets())),
                format!("{approx}{}", units::format_bytes(f.totals.total_bytes())),
                format_instant_ms(f.totals.first_ns),
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
        for line in t.render(crate::table::output_width()) {
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
                format_instant_ms(from)
            );
            for line in crate::table::wrap(&note, crate::table::output_width()) {
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
    }
    super::note_window(&segments, &q, listing.flows.is_empty());
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
    super::warn_unreadable(&unreadable, "its flows are missing");
    if missing(&listing, &unreadable, &q).is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "capsule: the answer is partial: damaged or missing data was skipped (exit status {})",
            super::PARTIAL
        );
        Ok(ExitCode::from(super::PARTIAL))
    }
}

/// Why a flow listing misses flows of `q`'s window, if it does: segments without an index,
/// with a damaged one, or unreadable (where the window reaches them), damaged journal
/// records. Such an answer is partial (exit 3, `capsule-partial` over HTTP).
pub fn missing(
    listing: &capsule_index::flows::FlowListing,
    unreadable: &[capsule_store::Unreadable],
    q: &capsule_query::Query,
) -> Vec<String> {
    let mut why = Vec::new();
    if !listing.unindexed.is_empty() {
        why.push(format!(
            "segment(s) {:?} have no side index",
            listing.unindexed
        ));
    }
    for (seq, _) in &listing.damaged_index {
        why.push(format!("the index of segment {seq} is damaged"));
    }
    for (seq, _) in &listing.journal_notes {
        why.push(format!("damaged index journal records of segment {seq}"));
    }
    let (from, to) = q.window();
    for u in unreadable.iter().filter(|u| u.reaches(from, to)) {
        why.push(format!("segment {} cannot be read", u.seq));
    }
    why
}

/// The flows of `q`'s window in `segments`, in `sort` order.
pub fn list(
    store: &Store,
    segments: &[capsule_store::SegmentReader],
    q: &capsule_query::Query,
    sort: FlowSort,
) -> Result<capsule_index::flows::FlowListing> {
    let mut listing = capsule_index::flows::list(store, segments, q)?;
    match sort {
        FlowSort::Bytes => {}
        FlowSort::Packets => listing
            .flows
            .sort_by_key(|f| std::cmp::Reverse(f.flow.totals.total_packets())),
        FlowSort::First => listing.flows.sort_by_key(|f| f.flow.totals.first_ns),
    }
    Ok(listing)
}

/// One flow as the JSON object of `capsule flows --json` (one line each; also
/// `GET /v1/flows` of `capsule serve`).
pub fn json_line(s: &capsule_index::flows::FlowSummary) -> serde_json::Value {
    let f = &s.flow;
    let k = &f.key;
    serde_json::json!({
        "vlans": k.vlans.iter().flatten().collect::<Vec<_>>(),
        "ip_version": k.ip_version, "proto": k.proto,
        "proto_name": capsule_query::filter::proto_name(k.proto),
        "a": k.a.to_string(), "a_port": k.ports.map(|p| p.0),
        "b": k.b.to_string(), "b_port": k.ports.map(|p| p.1),
        "client": client_side(f).map(|d| if d == 0 { "a" } else { "b" }),
        "first_ns": f.totals.first_ns, "first": capsule_query::format_instant(f.totals.first_ns),
        "last_ns": f.totals.last_ns, "last": capsule_query::format_instant(f.totals.last_ns),
        "packets": f.totals.packets, "bytes": f.totals.bytes,
        "dscp": [(0..64).filter(|d| f.totals.dscp[0] & (1u64 << d) != 0).collect::<Vec<u8>>(),
                 (0..64).filter(|d| f.totals.dscp[1] & (1u64 << d) != 0).collect::<Vec<u8>>()],
        "tcp_flags": f.totals.tcp_flags, "retransmissions": f.totals.retransmissions,
        "zero_windows": f.totals.zero_windows, "resets": f.totals.resets, "approximate": s.approximate,
        // What the cut-off stored of a cut flow (packets and bytes above count what was
        // seen); null for a flow stored whole.
        "cut": f.totals.is_cut().then(|| serde_json::json!({
            "stored_packets": [f.totals.packets[0] - f.totals.cut_packets[0], f.totals.packets[1] - f.totals.cut_packets[1]],
            "stored_bytes": [f.totals.bytes[0] - f.totals.cut_bytes[0], f.totals.bytes[1] - f.totals.cut_bytes[1]],
            "cut_packets": f.totals.cut_packets, "cut_bytes": f.totals.cut_bytes,
            "cut_at_ns": f.totals.cut_at_ns,
            "cut_at": f.totals.cut_at().map(capsule_query::format_instant),
        })),
    })
}

/// Which side (0: a, 1: b) is the client, judged by the ports: the side whose port is a
/// well-known one (below 1024) while the other's is not, or else the side whose port is in
/// the ephemeral range (32768 and up, Linux's default) while the other's is not. `None`
/// when the ports do not tell (both or neither in the same class, or no ports).
///
/// The side index keeps the union of each direction's TCP flags, which cannot tell a SYN
/// from the SYN-ACK's ACK after the handshake, so the ports are the evidence used here.
fn client_side(f: &capsule_index::sideindex::FlowCounts) -> Option<usize> {
    let (pa, pb) = f.key.ports?;
    let class = |p: u16| match p {
        0..=1023 => 0,
        1024..=32767 => 1,
        _ => 2,
    };
    match class(pa).cmp(&class(pb)) {
        std::cmp::Ordering::Less => Some(1),
        std::cmp::Ordering::Greater => Some(0),
        std::cmp::Ordering::Equal => None,
    }
}

/// An instant as RFC 3339 to the millisecond, for tables (JSON keeps nanoseconds).
fn format_instant_ms(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns - ns % 1_000_000);
    humantime::format_rfc3339_millis(t).to_string()
}
