//! `capsule top`: the largest talkers of a window, from the side index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_analytics::top::{self, By, Key, Row};

use crate::cli::{TopArgs, TopBy, TopKey};
use crate::table::{Column, Table};
use crate::units;

pub fn run(a: &TopArgs) -> Result<ExitCode> {
    if a.a.remote.server.is_some() {
        let flags: Vec<(&str, String)> = vec![
            ("by", super::value_name(&a.by)),
            ("key", super::value_name(&a.key)),
            ("limit", a.limit.to_string()),
        ];
        return super::remote_answer(&a.a, "top", &flags);
    }
    super::print_rendered(&render(a, crate::table::output_width())?)
}

/// The answer as `run` prints it, wrapped to `width` (also what `capsule serve` sends).
pub(super) fn render(a: &TopArgs, width: Option<usize>) -> Result<super::Rendered> {
    let key = match a.key {
        TopKey::Flow => Key::Flow,
        TopKey::Src => Key::Src,
        TopKey::Dst => Key::Dst,
        TopKey::Pair => Key::Pair,
        TopKey::Group => Key::Group,
        TopKey::Dscp => Key::Dscp,
    };
    let by = match a.by {
        TopBy::Bytes => By::Bytes,
        TopBy::Packets => By::Packets,
    };
    let need = (key == Key::Group).then_some("top --key group");
    let ans = super::answer(&a.a, need, true)?;
    let clock = super::Clock::of(&ans.input);
    let t = top::top(&ans.input, key, by, a.limit, ans.policy());
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
            r.key.clone(),
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
            lines.push(format!("export #1: {}", super::pasteable(q, "top-1.pcap")));
        }
    }
    super::render_answer(
        &ans,
        a.a.json,
        "top",
        serde_json::to_value(&t)?,
        lines,
        width,
    )
}
