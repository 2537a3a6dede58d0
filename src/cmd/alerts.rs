//! `capsule alerts`: the config's `[alerts]` rules over a window of stored history, from the
//! index alone (no packet is read). `--json` prints `{"alerts": [...]}` (docs/alerts.md).

use std::process::ExitCode;

use anyhow::Result;
use capsule_analytics::alerts::{self, Alert};

use crate::cli::AlertsArgs;
use crate::table::{Column, Table};

pub fn run(a: &AlertsArgs) -> Result<ExitCode> {
    if a.a.remote.server.is_some() {
        let flags: Vec<(&str, String)> = vec![];
        return super::remote_answer(&a.a, "alerts", &flags);
    }
    super::print_rendered(&render(a, crate::table::output_width())?)
}

/// The answer as `run` prints it, wrapped to `width` (also what `capsule serve` sends).
pub(super) fn render(a: &AlertsArgs, width: Option<usize>) -> Result<super::Rendered> {
    let ans = super::answer(&a.a, Some("alerts"), true)?;
    let config = ans.config.as_ref().expect("answer() requires the config");
    let list = evaluate(&ans.input, config)?;
    let lines = table(&list, width);
    super::render_answer(
        &ans,
        a.a.json,
        "alerts",
        serde_json::json!({ "alerts": list }),
        lines,
        width,
    )
}

/// The alerts of `input` (a usage error for a straggler group the window cannot judge).
pub(super) fn evaluate(
    input: &capsule_analytics::Input,
    config: &capsule_config::Config,
) -> Result<Vec<Alert>> {
    alerts::evaluate(input, config).map_err(|e| match e {
        capsule_analytics::AnalyticsError::Usage(m) => {
            anyhow::Error::new(super::Usage(format!("[alerts]: {m}")))
        }
        e => e.into(),
    })
}

/// The human table: one row per alert, its summary and query under it.
pub(super) fn table(list: &[Alert], width: Option<usize>) -> Vec<String> {
    if list.is_empty() {
        return vec!["alerts: none".into()];
    }
    let mut t = Table::new(vec![
        Column::left("severity", 6),
        Column::left("rule", 10),
        Column::left("first", 9),
        Column::left("last", 9),
        Column::left("entity", u8::MAX),
    ]);
    for x in list {
        t.push(vec![
            format!("{:?}", x.severity).to_lowercase(),
            x.rule.to_string(),
            super::ms(x.first_ns),
            super::ms(x.last_ns),
            x.entity.name.clone(),
        ]);
    }
    let mut lines = vec![format!("alerts: {}", list.len())];
    lines.extend(t.render(width));
    lines.push(String::new());
    for (i, x) in list.iter().enumerate() {
        lines.push(format!("{}. [{}] {}", i + 1, x.rule, x.summary));
        lines.push(format!(
            "   {}",
            super::pasteable(&x.query, &format!("alert-{}.pcap", i + 1))
        ));
    }
    lines
}
