//! `capsule matrix`: traffic from group to group, from the side index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_analytics::matrix::{self, By};

use crate::cli::{MatrixArgs, MatrixBy};
use crate::table::{Column, Table};
use crate::units;

pub fn run(a: &MatrixArgs) -> Result<ExitCode> {
    if a.a.remote.server.is_some() {
        let flags: Vec<(&str, String)> = vec![("by", super::value_name(&a.by))];
        return super::remote_answer(&a.a, "matrix", &flags);
    }
    super::print_rendered(&render(a, crate::table::output_width())?)
}

/// The answer as `run` prints it, wrapped to `width` (also what `capsule serve` sends).
pub(super) fn render(a: &MatrixArgs, width: Option<usize>) -> Result<super::Rendered> {
    let ans = super::answer(&a.a, Some("matrix"), false)?;
    let by = match a.by {
        MatrixBy::Bytes => By::Bytes,
        MatrixBy::Packets => By::Packets,
        MatrixBy::Flows => By::Flows,
    };
    let policy = ans.policy().expect("answer() requires the config");
    let m = matrix::matrix(&ans.input, policy, by);
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
                        By::Bytes => units::format_bytes(c.bytes),
                        By::Packets => units::format_count(c.packets),
                        By::Flows => units::format_count(c.flows),
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
        "total {} bytes, {} packets, {} flows; ! marks traffic the egress policy does not allow",
        m.total.bytes, m.total.packets, m.total.flows
    ));
    for c in m.cells.iter().filter(|c| c.flagged) {
        lines.push(format!("{} -> {} not allowed:", c.src_group, c.dst_group));
        for f in c.flagged_flows.iter().take(5) {
            lines.push(format!(
                "  {} -> {}  {}  {}",
                f.src,
                f.dst,
                units::format_bytes(f.bytes),
                super::pasteable(&f.query, "matrix-flow.pcap")
            ));
        }
        if c.flagged_flows.len() > 5 {
            lines.push(format!(
                "  and {} more (--json lists all)",
                c.flagged_flows.len() - 5
            ));
        }
    }
    super::render_answer(
        &ans,
        a.a.json,
        "matrix",
        serde_json::to_value(&m)?,
        lines,
        width,
    )
}
