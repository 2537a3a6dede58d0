//! The text of a `dscp` answer.

use capsule_analytics::dscp;

use super::table::{Column, Table};
use super::Clock;
use super::Place;
use crate::units;

/// The table lines of `d`, fitted to `width`.
pub(super) fn lines(
    d: &dscp::Dscp,
    clock: Clock,
    place: Place<'_>,
    width: Option<usize>,
) -> Vec<String> {
    let mut t = Table::new(vec![
        Column::right("dscp", 9),
        Column::left("name", 9),
        Column::right("bytes", 8),
        Column::right("packets", 7),
        Column::right("flows", 5),
        Column::left("top senders", 3),
    ]);
    for v in &d.values {
        t.push(vec![
            v.dscp.to_string(),
            v.name.clone(),
            units::format_bytes(v.bytes),
            units::format_count(v.packets),
            units::format_count(v.flows),
            v.top_senders
                .iter()
                .map(|s| format!("{} {}", s.host, units::format_bytes(s.bytes)))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    let mut lines = t.render(width);
    lines.push(String::new());
    match &d.violations {
        None => lines.push("violations: no --config, no policy to check against".into()),
        Some(v) if v.is_empty() => lines.push("violations: none".into()),
        Some(v) => {
            lines.push(format!("violations: {}", v.len()));
            let mut t = Table::new(vec![
                Column::left("src", u8::MAX),
                Column::left("dst", 9),
                Column::left("dscp", 9),
                Column::right("bytes", 8),
                Column::right("packets", 7),
                Column::right("pkt size", 3),
                Column::left("first", 2),
                Column::left("last", 2),
            ]);
            for x in v {
                t.push(vec![
                    match &x.src_group {
                        Some(g) => format!("{} ({g})", x.src),
                        None => x.src.clone(),
                    },
                    format!(
                        "{}{}",
                        capsule_analytics::names::with_name(
                            &x.dst,
                            x.dst_name.as_ref().map(|n| n.describe.as_str()),
                        ),
                        via(x.tunnel.as_ref())
                    ),
                    format!("{} ({})", x.name, x.dscp),
                    units::format_bytes(x.bytes),
                    units::format_count(x.packets),
                    format!("{:.0}", x.mean_packet_size),
                    clock.ms(x.first_ns),
                    clock.ms(x.last_ns),
                ]);
            }
            lines.extend(t.render(width));
            lines.push(format!(
                "export the first: {}",
                super::pasteable(&v[0].query, "dscp-first.pcap", place)
            ));
        }
    }
    lines.push(String::new());
    if d.remarked.is_empty() {
        lines.push("remarked: none".into());
    } else {
        lines.push(format!("remarked: {}", d.remarked.len()));
        let mut t = Table::new(vec![
            Column::left("flow", u8::MAX),
            Column::left("direction", 5),
            Column::right("packet", 8),
            Column::left("at", 6),
            Column::left("change", 9),
        ]);
        for r in &d.remarked {
            t.push(vec![
                r.flow.clone(),
                format!(
                    "{} -> {}{}",
                    r.src,
                    capsule_analytics::names::with_name(
                        &r.dst,
                        r.dst_name.as_ref().map(|n| n.describe.as_str())
                    ),
                    via(r.tunnel.as_ref())
                ),
                r.packet.to_string(),
                clock.ms(r.at_ns),
                format!("{} -> {}", r.from_name, r.to_name),
            ]);
        }
        lines.extend(t.render(width));
    }
    lines
}

/// ` via vxlan vni 42 192.0.2.1>192.0.2.2` for a row whose packets arrived in a tunnel (as
/// the matrix's flagged flows say it), nothing otherwise.
fn via(t: Option<&capsule_analytics::tunnel::DirTunnel>) -> String {
    t.map_or(String::new(), |t| format!(" via {}", t.describe))
}
