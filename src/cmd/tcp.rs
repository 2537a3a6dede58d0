//! `capsule tcp`: TCP health per interval and host, from the side index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_analytics::tcp;

use crate::cli::TcpArgs;
use crate::table::{Column, Table};
use crate::units;

pub fn run(a: &TcpArgs) -> Result<ExitCode> {
    if a.a.remote.server.is_some() {
        let flags: Vec<(&str, String)> = vec![("interval", super::interval_text(a.interval))];
        return super::remote_answer(&a.a, "tcp", &flags);
    }
    super::print_rendered(&render(a, crate::table::output_width())?)
}

/// The answer as `run` prints it, wrapped to `width` (also what `capsule serve` sends).
pub(super) fn render(a: &TcpArgs, width: Option<usize>) -> Result<super::Rendered> {
    let ans = super::answer(&a.a, None, true)?;
    let clock = super::Clock::of(&ans.input);
    let t = tcp::tcp(&ans.input, a.interval)?;
    let cols = || {
        vec![
            Column::left("interval", 9),
            Column::left("host", u8::MAX),
            Column::right("data", 8),
            Column::right("retrans", 8),
            Column::right("rate", 7),
            Column::right("zero win", 6),
            Column::right("stalled", 5),
            Column::right("rst sent", 4),
            Column::right("rst recv", 3),
            Column::right("lost syn", 6),
        ]
    };
    let cells = |when: String, host: &str, h: &tcp::Health| {
        vec![
            when,
            host.to_string(),
            units::format_count(h.data_segments),
            h.retransmissions.to_string(),
            super::percent(h.retransmission_rate),
            h.zero_window_segments.to_string(),
            units::format_duration_ns(h.zero_window_ns),
            h.rsts_sent.to_string(),
            h.rsts_received.to_string(),
            h.syns_unanswered.to_string(),
        ]
    };
    let mut table = Table::new(cols());
    for i in &t.intervals {
        table.push(cells(clock.ms(i.from_ns), "all", &i.total));
        // The hosts with trouble in the interval (all of them in --json).
        for h in i.hosts.iter().filter(|h| {
            h.health.retransmissions
                + h.health.zero_window_segments
                + h.health.rsts_sent
                + h.health.syns_unanswered
                > 0
        }) {
            table.push(cells(String::new(), &h.host, &h.health));
        }
    }
    table.push(cells("total".into(), "all", &t.total));
    let mut lines = table.render(width);
    if !t.worst_hosts.is_empty() {
        lines.push(String::new());
        lines.push("worst hosts:".into());
        let mut w = Table::new(cols());
        for h in &t.worst_hosts {
            w.push(cells("window".into(), &h.host, &h.health));
        }
        lines.extend(w.render(width));
    }
    if !t.worst_sessions.is_empty() {
        lines.push(String::new());
        lines.push("worst sessions:".into());
        let mut w = Table::new(vec![
            Column::left("flow", u8::MAX),
            Column::right("data", 5),
            Column::right("retrans", 8),
            Column::right("zero win", 6),
            Column::right("stalled", 4),
            Column::right("rst", 3),
            Column::left("lost syn", 2),
        ]);
        for s in &t.worst_sessions {
            w.push(vec![
                s.flow.clone(),
                units::format_count(s.data_segments[0] + s.data_segments[1]),
                format!("{}/{}", s.retransmissions[0], s.retransmissions[1]),
                format!(
                    "{}/{}",
                    s.zero_window_segments[0], s.zero_window_segments[1]
                ),
                units::format_duration_ns(s.zero_window_ns[0] + s.zero_window_ns[1]),
                format!("{}/{}", s.rsts[0], s.rsts[1]),
                if s.syn_unanswered { "yes" } else { "" }.into(),
            ]);
        }
        lines.extend(w.render(width));
        lines.push(format!(
            "export the worst: {}",
            super::pasteable(&t.worst_sessions[0].query, "tcp-worst.pcap")
        ));
    }
    super::render_answer(
        &ans,
        a.a.json,
        "tcp",
        serde_json::to_value(&t)?,
        lines,
        width,
    )
}
