//! The text of a `matrix` answer.

use capsule_analytics::matrix;

use super::table::{Column, Table};
use super::Place;
use crate::units;

/// The table lines of `m`, fitted to `width`.
pub(super) fn lines(
    m: &matrix::Matrix,
    by: matrix::By,
    place: Place<'_>,
    width: Option<usize>,
) -> Vec<String> {
    // Column headers must be 'static: the group names are the first row instead.
    let n = m.groups.len();
    let mut cols = vec![Column::left("from \\ to", u8::MAX)];
    cols.extend((0..n).map(|_| Column::right("", 5)));
    let mut t = Table::new(cols);
    let mut head = vec![String::new()];
    head.extend(m.groups.iter().cloned());
    t.push(head);
    for g in &m.groups {
        let mut row = vec![g.clone()];
        for h in &m.groups {
            let cell = m
                .cells
                .iter()
                .find(|c| &c.src_group == g && &c.dst_group == h);
            row.push(match cell {
                None => "-".into(),
                Some(c) => {
                    let v = match by {
                        matrix::By::Bytes => units::format_bytes(c.bytes),
                        matrix::By::Packets => units::format_count(c.packets),
                        matrix::By::Flows => units::format_count(c.flows),
                    };
                    if c.flagged {
                        format!("!{v}")
                    } else {
                        v
                    }
                }
            });
        }
        t.push(row);
    }
    let mut lines = t.render(width);
    lines.push(format!(
        "total {}, {} packets, {} flows; ! marks traffic the egress policy does not allow",
        units::format_bytes(m.total.bytes),
        m.total.packets,
        m.total.flows
    ));
    for c in m.cells.iter().filter(|c| c.flagged) {
        lines.push(format!("{} -> {} not allowed:", c.src_group, c.dst_group));
        for f in c.flagged_flows.iter().take(5) {
            let via = f
                .tunnel
                .as_ref()
                .map_or(String::new(), |t| format!(" via {}", t.describe));
            lines.push(format!(
                "  {} -> {}{via}  {}  {}",
                f.src,
                capsule_analytics::names::with_name(
                    &f.dst,
                    f.dst_name.as_ref().map(|n| n.describe.as_str())
                ),
                units::format_bytes(f.bytes),
                super::pasteable(&f.query, "matrix-flow.pcap", place)
            ));
        }
        if c.flagged_flows.len() > 5 {
            lines.push(format!(
                "  and {} more (--json lists all)",
                c.flagged_flows.len() - 5
            ));
        }
    }
    lines
}
