//! `capsule alerts`: the config's `[alerts]` rules over a window of stored history, from the
//! index alone (no packet is read). `--json` prints `{"alerts": [...]}` (docs/alerts.md).

use std::process::ExitCode;

use anyhow::Result;
use capsule_answers::analytics::Question;

use crate::cli::AlertsArgs;

pub fn run(a: &AlertsArgs) -> Result<ExitCode> {
    crate::request::ask_analytics(&a.a, Question::Alerts)
}
