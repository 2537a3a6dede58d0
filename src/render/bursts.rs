//! The text of a `bursts` answer.

use capsule_analytics::bursts::Bursts;

use super::table::{Column, Table};
use super::{bps, Clock};
use crate::units;

/// A rate, with its share of the link when the link's rate is known.
fn rate(bits: u64, link_percent: Option<f64>) -> String {
    match link_percent {
        Some(p) => format!("{} ({p:.1}%)", bps(bits as f64)),
        None => bps(bits as f64),
    }
}

/// The lines of `b`, fitted to `width`.
pub(super) fn lines(b: &Bursts, clock: Clock, width: Option<usize>) -> Vec<String> {
    let mut lines = Vec::new();
    lines.push(match &b.link {
        Some(l) => format!("link {}: {}", l.name, bps(l.bits_per_second as f64)),
        None => "link rate: unknown (no [links] entry in the config)".to_string(),
    });
    lines.push(match b.threshold_bits_per_second {
        Some(t) => format!("above: {} ({})", b.above, bps(t as f64)),
        None => format!("above: {} of an unknown rate", b.above),
    });
    lines.push(String::new());
    let mut t = Table::new(vec![
        Column::left("scope", 9),
        Column::right("bytes", 8),
        Column::right("peak 1 ms", 4),
        Column::right("peak 10 ms", 4),
        Column::right("peak 100 ms", 4),
        Column::right("peak 1 s", 4),
        Column::right("time above", 4),
    ]);
    for s in &b.scopes {
        let mut row = vec![s.scope.clone(), units::format_bytes(s.bytes)];
        row.extend(
            s.peaks
                .iter()
                .map(|p| rate(p.bits_per_second, p.link_percent)),
        );
        row.push(match s.ns_above {
            Some(ns) => units::format_duration_ns(ns),
            None => "-".into(),
        });
        t.push(row);
    }
    lines.extend(t.render(width));
    lines.push(String::new());
    if b.threshold_bits_per_second.is_some() {
        lines.push(format!(
            "bursts: {}{}",
            b.burst_count,
            if b.burst_count > b.bursts.len() {
                format!(" (the largest {} listed)", b.bursts.len())
            } else {
                String::new()
            }
        ));
        let mut t = Table::new(vec![
            Column::left("start", 2),
            Column::right("duration", 4),
            Column::right("bytes", 8),
            Column::right("peak 1 ms", 4),
            Column::left("values", 5),
            Column::left("flows (bytes in its second)", 3),
        ]);
        for x in &b.bursts {
            t.push(vec![
                clock.ms(x.start_ns),
                units::format_duration_ns(x.duration_ns),
                units::format_bytes(x.bytes),
                rate(x.peak_bits_per_second, x.peak_link_percent),
                x.classes
                    .iter()
                    .map(|c| format!("{} {}", c.name, units::format_bytes(c.bytes)))
                    .collect::<Vec<_>>()
                    .join(", "),
                x.flows
                    .iter()
                    .map(|f| {
                        let port = |p: Option<u16>| p.map_or(String::new(), |p| format!(":{p}"));
                        format!(
                            "{}{} > {}{} {}",
                            f.src,
                            port(f.src_port),
                            f.dst,
                            port(f.dst_port),
                            units::format_bytes(f.bytes_in_seconds)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
        if !b.bursts.is_empty() {
            lines.extend(t.render(width));
        }
        lines.push(String::new());
    }
    lines.push(format!(
        "incast (>= {} senders to one destination within 1 ms): {}",
        b.incast_min_senders, b.incast_count
    ));
    let mut t = Table::new(vec![
        Column::left("ms", 2),
        Column::left("destination", 9),
        Column::right("senders", 5),
        Column::right("bytes", 8),
        Column::left("senders", 3),
    ]);
    for x in &b.incast {
        t.push(vec![
            clock.ms(x.start_ns),
            x.dst.to_string(),
            x.senders.len().to_string(),
            units::format_bytes(x.bytes),
            x.senders
                .iter()
                .map(|s| s.addr.to_string())
                .collect::<Vec<_>>()
                .join(" "),
        ]);
    }
    if !b.incast.is_empty() {
        lines.extend(t.render(width));
    }
    if let Some(series) = &b.series {
        lines.push(String::new());
        lines.push(format!(
            "series: {} milliseconds with traffic",
            series.len()
        ));
        let mut t = Table::new(vec![
            Column::left("ms", 2),
            Column::right("bytes", 8),
            Column::right("packets", 7),
            Column::left("per DSCP value (bytes)", 3),
        ]);
        for x in series {
            t.push(vec![
                clock.ms(x.start_ns),
                x.bytes.to_string(),
                x.packets.to_string(),
                x.values
                    .iter()
                    .map(|v| format!("{} {}", v.dscp, v.bytes))
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
        lines.extend(t.render(width));
    }
    for n in &b.notes {
        lines.push(format!("note: {n}"));
    }
    lines
}
