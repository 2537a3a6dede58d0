//! `capsule stragglers`: members of a group sending under its median, from the index alone.

use std::process::ExitCode;

use anyhow::Result;
use capsule_analytics::stragglers;

use crate::cli::StragglersArgs;
use crate::table::{Column, Table};
use crate::units;

pub fn run(a: &StragglersArgs) -> Result<ExitCode> {
    if a.a.remote.server.is_some() {
        let flags: Vec<(&str, String)> = vec![
            ("group", a.group.clone()),
            ("interval", super::interval_text(a.interval)),
            ("ratio", a.ratio.to_string()),
            ("min-bytes", a.min_bytes.to_string()),
        ];
        return super::remote_answer(&a.a, "stragglers", &flags);
    }
    super::print_rendered(&render(a, crate::table::output_width())?)
}

/// The answer as `run` prints it, wrapped to `width` (also what `capsule serve` sends).
pub(super) fn render(a: &StragglersArgs, width: Option<usize>) -> Result<super::Rendered> {
    let ans = super::answer(&a.a, Some("stragglers"), true)?;
    let clock = super::Clock::of(&ans.input);
    let policy = ans.policy().expect("answer() requires the config");
    let s = stragglers::stragglers(
        &ans.input,
        policy,
        &a.group,
        a.interval,
        a.ratio,
        a.min_bytes,
    )
    .map_err(|e| match e {
        capsule_analytics::AnalyticsError::Usage(m) => anyhow::Error::new(super::Usage(m)),
        e => e.into(),
    })?;
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
                super::pasteable(&x.query, &format!("straggler-{}.pcap", i + 1))
            ));
        }
    }
    super::render_answer(
        &ans,
        a.a.json,
        "stragglers",
        serde_json::to_value(&s)?,
        lines,
        width,
    )
}
