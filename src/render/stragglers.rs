//! The text of a `stragglers` answer.

use capsule_analytics::stragglers;

use super::table::{Column, Table};
use super::Clock;
use super::Place;
use crate::units;

/// The table lines of `s`, fitted to `width`.
pub(super) fn lines(
    s: &stragglers::Stragglers,
    clock: Clock,
    place: Place<'_>,
    width: Option<usize>,
) -> Vec<String> {
    let mut lines = Vec::new();
    lines.push(format!(
        "group {} ({} members seen), interval {}, ratio {}, idle under {} sent by the median member",
        s.group,
        s.members.len(),
        units::format_duration_ns(s.interval_ns),
        s.ratio,
        units::format_bytes(s.min_bytes)
    ));
    let mut t = Table::new(vec![
        Column::left("interval", 9),
        Column::right("median", 8),
        Column::right("active", 5),
        Column::left("lowest", u8::MAX),
    ]);
    for i in &s.intervals {
        let mut m: Vec<_> = i
            .members
            .iter()
            .filter_map(|m| m.ratio.map(|r| (r, m)))
            .collect();
        m.sort_by(|a, b| a.0.total_cmp(&b.0));
        t.push(vec![
            clock.ms(i.from_ns),
            units::format_bytes(i.median_bytes),
            i.active_members.to_string(),
            if i.judged {
                m.iter()
                    .take(3)
                    .map(|(r, m)| format!("{} {:.2}", m.host, r))
                    .collect::<Vec<_>>()
                    .join(", ")
            } else {
                "not judged (idle, or fewer than 3 members active)".into()
            },
        ]);
    }
    lines.extend(t.render(width));
    lines.push(String::new());
    if s.stragglers.is_empty() {
        lines.push("stragglers: none".into());
    } else {
        lines.push(format!("stragglers: {}", s.stragglers.len()));
        for (i, x) in s.stragglers.iter().enumerate() {
            lines.push(format!(
                "  {} from {} to {} ({} intervals), {:.2} of the median",
                x.host,
                clock.ms(x.from_ns),
                clock.ms(x.to_ns),
                x.intervals,
                x.ratio_to_median
            ));
            lines.push(format!(
                "    {}",
                super::pasteable(&x.query, &format!("straggler-{}.pcap", i + 1), place)
            ));
        }
    }
    lines
}
