//! `capsule flows`: flow records of a window, from the side index alone.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use capsule_store::Store;

use crate::cli::{FlowSort, FlowsArgs};

pub fn run(a: &FlowsArgs) -> Result<ExitCode> {
    let (args, sort, limit, json) = (&a.q, a.sort, a.limit, a.json);
    let q = args.query()?;
    let store = Store::open(&args.store)?;
    let (segments, unreadable) = store.open_segments_checked()?;
    let mut listing = capsule_index::flows::list(&store, &segments, &q)?;
    match sort {
        FlowSort::Bytes => {}
        FlowSort::Packets => listing
            .flows
            .sort_by_key(|f| std::cmp::Reverse(f.flow.total_packets())),
        FlowSort::First => listing.flows.sort_by_key(|f| f.flow.first_ns),
    }
    let mut out = std::io::stdout().lock();
    let dscps = |mask: u64| -> String {
        (0..64u8)
            .filter(|d| mask & (1 << d) != 0)
            .map(|d| capsule_query::filter::dscp_name(d).map_or(d.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(",")
    };
    if !json {
        writeln!(
            out,
            "{:<5} {:<5} {:<46} {:<46} {:>10} {:>14} {:<30} {:>9} {:<12} {:>7} {:>6} {:>5}",
            "proto",
            "vlan",
            "a",
            "b",
            "packets",
            "bytes",
            "first",
            "duration",
            "dscp",
            "retrans",
            "zwin",
            "rst"
        )?;
    }
    for s in listing.flows.iter().take(limit) {
        let f = &s.flow;
        let k = &f.key;
        let ep = |addr: std::net::IpAddr, port: Option<u16>| match (addr, port) {
            (std::net::IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
            (a, Some(p)) => format!("{a}:{p}"),
            (a, None) => a.to_string(),
        };
        let a = ep(k.a, k.ports.map(|p| p.0));
        let b = ep(k.b, k.ports.map(|p| p.1));
        let vlan = k
            .vlans
            .iter()
            .flatten()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(".");
        if json {
            let v = serde_json::json!({
                "vlans": k.vlans.iter().flatten().collect::<Vec<_>>(),
                "ip_version": k.ip_version, "proto": k.proto,
                "a": k.a.to_string(), "a_port": k.ports.map(|p| p.0),
                "b": k.b.to_string(), "b_port": k.ports.map(|p| p.1),
                "first_ns": f.first_ns, "last_ns": f.last_ns,
                "packets": f.packets, "bytes": f.bytes,
                "dscp": [(0..64).filter(|d| f.dscp[0] & (1u64 << d) != 0).collect::<Vec<u8>>(),
                         (0..64).filter(|d| f.dscp[1] & (1u64 << d) != 0).collect::<Vec<u8>>()],
                "tcp_flags": f.tcp_flags, "retransmissions": f.retransmissions,
                "zero_windows": f.zero_windows, "resets": f.resets, "approximate": s.approximate,
            });
            writeln!(out, "{v}")?;
        } else {
            writeln!(
                out,
                "{:<5} {:<5} {:<46} {:<46} {:>10} {:>14} {:<30} {:>8.3}s {:<12} {:>7} {:>6} {:>5}{}",
                k.proto,
                vlan,
                a,
                b,
                f.total_packets(),
                f.total_bytes(),
                capsule_query::format_instant(f.first_ns),
                (f.last_ns - f.first_ns) as f64 / 1e9,
                dscps(f.dscp[0] | f.dscp[1]),
                f.retransmissions[0] + f.retransmissions[1],
                f.zero_windows[0] + f.zero_windows[1],
                f.resets[0] + f.resets[1],
                if s.approximate { " ~" } else { "" }
            )?;
        }
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
    super::warn_unreadable(&unreadable, "its flows are missing");
    if listing.damaged_index.is_empty() && unreadable.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "capsule: the answer is partial: damaged data was skipped (exit status {})",
            super::PARTIAL
        );
        Ok(ExitCode::from(super::PARTIAL))
    }
}
