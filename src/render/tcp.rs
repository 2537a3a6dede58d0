//! The text of a `tcp` answer.

use capsule_analytics::tcp;

use super::table::{Column, Table};
use super::Clock;
use super::Place;
use crate::units;

/// The table lines of `t`, fitted to `width`.
pub(super) fn lines(
    t: &tcp::Tcp,
    clock: Clock,
    place: Place<'_>,
    width: Option<usize>,
) -> Vec<String> {
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
                capsule_analytics::names::with_name(&s.flow, s.name.as_deref()),
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
            super::pasteable(&t.worst_sessions[0].query, "tcp-worst.pcap", place)
        ));
    }
    lines
}
