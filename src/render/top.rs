//! The text of a `top` answer.

use capsule_analytics::top::{self, Row};

use super::table::{Column, Table};
use super::Clock;
use super::Place;
use crate::units;

/// The table lines of `t`, fitted to `width`.
pub(super) fn lines(
    t: &top::Top,
    clock: Clock,
    place: Place<'_>,
    width: Option<usize>,
) -> Vec<String> {
    let mut table = Table::new(vec![
        Column::right("#", 9),
        Column::left("key", u8::MAX),
        Column::right("bytes", 8),
        Column::right("packets", 7),
        Column::right("flows", 5),
        Column::right("share", 8),
        Column::right("mean", 4),
        Column::right("peak", 4),
        Column::right("pkt size", 2),
        Column::left("first", 1),
        Column::left("last", 1),
        Column::left("dscp", 3),
    ]);
    let row = |r: &Row| {
        vec![
            r.rank.map_or(String::new(), |n| n.to_string()),
            // A flow's tunnel after it: `tcp 10.0.0.1:1 <-> 10.0.0.2:2 via vxlan vni 42 ...`.
            match &r.tunnel {
                Some(t) => format!(
                    "{} via {}",
                    capsule_analytics::names::with_name(&r.key, r.name.as_deref()),
                    t.describe
                ),
                None => capsule_analytics::names::with_name(&r.key, r.name.as_deref()),
            },
            units::format_bytes(r.bytes),
            units::format_count(r.packets),
            units::format_count(r.flows),
            super::percent(r.share),
            super::bps(r.mean_bps),
            super::bps(r.peak_bps as f64),
            format!("{:.0}", r.mean_packet_size),
            // No packet, no time (not 1970).
            if r.packets == 0 {
                "-".into()
            } else {
                clock.ms(r.first_ns)
            },
            if r.packets == 0 {
                "-".into()
            } else {
                clock.ms(r.last_ns)
            },
            r.dscp_mix
                .iter()
                .map(|d| format!("{} {}", d.name, super::percent(d.share)))
                .collect::<Vec<_>>()
                .join(", "),
        ]
    };
    for r in &t.rows {
        table.push(row(r));
    }
    if let Some(o) = &t.other {
        table.push(row(o));
    }
    table.push(row(&t.total));
    let mut lines = table.render(width);
    if let Some(r) = t.rows.first() {
        if let Some(q) = &r.query {
            lines.push(format!(
                "export #1: {}",
                super::pasteable(q, "top-1.pcap", place)
            ));
        }
    }
    lines
}
