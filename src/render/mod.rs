//! Answers as text: the tables and lines the commands print, and what `capsule serve` sends
//! for `format=text`, from the typed answers of capsule-answers. Nothing here reads a store:
//! a renderer takes an answer and a width and returns text.
//!
//! ```text
//! analytics::Answer -> analytics() -> Rendered { text, why (partial when not empty) }
//!                        JSON: Answer::to_json, one document
//!                        text: header line, the kind's table (top.rs, tcp.rs, dscp.rs,
//!                              matrix.rs, stragglers.rs, alerts.rs), the limits as notes
//! table.rs   columns that wrap or shorten to the terminal, never dropped
//! ```

use std::process::ExitCode;

use anyhow::Result;
use capsule_analytics::Export;
use capsule_answers::analytics::{Answer, Body, Question};

use crate::output::PARTIAL;

mod alerts;
mod bursts;
mod dscp;
mod matrix;
pub(crate) mod status;
mod stragglers;
pub mod table;
mod tcp;
mod top;

/// An answer as the command prints it: the text of its standard output, and whether it is
/// partial (flows are missing: an index missing, stale or damaged), with why.
pub(crate) struct Rendered {
    pub text: String,
    /// Why it is partial ([`capsule_analytics::Limits::missing`]); empty: it is whole.
    pub why: Vec<String>,
}

impl Rendered {
    pub fn partial(&self) -> bool {
        !self.why.is_empty()
    }
}

/// Renders an analytics answer: JSON (the answer's document) or the header, the kind's
/// table and then the limits, wrapped to `width` (none: not wrapped). `capsule serve`
/// renders with the same code, so a `--server` answer is the local one byte for byte.
pub(crate) fn analytics(
    ans: &Answer,
    json: bool,
    place: Place<'_>,
    width: Option<usize>,
) -> Rendered {
    use std::fmt::Write;
    let mut out = String::new();
    if json {
        let _ = writeln!(out, "{}", ans.to_json());
    } else {
        let w = &ans.window;
        let clock = Clock::of(w.from_ns, w.to_ns);
        let _ = writeln!(
            out,
            "{} {} to {}{}",
            ans.kind().name(),
            capsule_query::format_instant(w.from_ns),
            capsule_query::format_instant(w.to_ns),
            if w.filter.is_empty() {
                String::new()
            } else {
                format!(", filter {}", w.filter)
            }
        );
        let lines = match &ans.body {
            Body::Top(t) => top::lines(t, clock, place, width),
            Body::Tcp(t) => tcp::lines(t, clock, place, width),
            Body::Dscp(d) => dscp::lines(d, clock, place, width),
            Body::Matrix(m) => {
                let by = match ans.question {
                    Question::Matrix { by } => by,
                    _ => capsule_analytics::matrix::By::Bytes,
                };
                matrix::lines(m, by, place, width)
            }
            Body::Stragglers(s) => stragglers::lines(s, clock, place, width),
            Body::Alerts { alerts } => alerts::table(alerts, place, width),
            Body::Bursts(b) => bursts::lines(b, clock, width),
        };
        // Lines of text wrap to the terminal like the table (whose rows already fit);
        // `capsule query` command lines stay whole, to be copied.
        for line in lines {
            if line.contains("capsule query ") {
                let _ = writeln!(out, "{line}");
            } else {
                for l in table::wrap(&line, width) {
                    let _ = writeln!(out, "{l}");
                }
            }
        }
        for line in w.limits.lines() {
            for l in table::wrap(&format!("note: {line}"), width) {
                let _ = writeln!(out, "{l}");
            }
        }
    }
    Rendered {
        text: out,
        why: ans.missing(),
    }
}

/// Prints a rendered answer and returns the exit status (partial when damaged index data
/// was skipped).
pub(crate) fn print(r: &Rendered) -> Result<ExitCode> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(r.text.as_bytes())?;
    out.flush()?;
    if r.partial() {
        eprintln!(
            "capsule: the answer is partial: {}; their flows are missing (exit status \
             {PARTIAL})",
            r.why.join("; ")
        );
        Ok(ExitCode::from(PARTIAL))
    } else {
        Ok(ExitCode::SUCCESS)
    }
}

/// How printed commands name the store: as the answer names it (`--store DIR`, `None`),
/// or as the reader of a remote answer reaches it (`--server URL --token-file FILE`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Place<'a>(pub Option<&'a str>);

/// The `capsule query -w FILE ...` command that exports a finding's packets, for the store
/// as `place` names it: it runs as pasted.
pub(crate) fn pasteable(export: &Export, file: &str, place: Place<'_>) -> String {
    let own = export.store_place();
    export.command(&format!("-w {file}"), place.0.unwrap_or(&own))
}

/// A ratio as a percentage with one decimal.
pub(crate) fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Bits per second, with a unit.
pub(crate) fn bps(x: f64) -> String {
    let (v, u) = if x >= 1e9 {
        (x / 1e9, "Gbit/s")
    } else if x >= 1e6 {
        (x / 1e6, "Mbit/s")
    } else if x >= 1e3 {
        (x / 1e3, "kbit/s")
    } else {
        (x, "bit/s")
    };
    format!("{v:.1} {u}")
}

/// Times in an answer's tables: the time of day to the millisecond (`02:00:01.956`) when
/// the answer's window lies within one UTC day (its header line gives the date), else the
/// full RFC 3339 time. Keeps the time columns narrow enough for an 80-column terminal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    one_day: bool,
}

impl Clock {
    /// The clock of the window [from, to).
    pub(crate) fn of(from_ns: u64, to_ns: u64) -> Clock {
        const DAY: u64 = 86_400_000_000_000;
        Clock {
            one_day: from_ns / DAY == to_ns.saturating_sub(1).max(from_ns) / DAY,
        }
    }

    pub(crate) fn ms(self, ns: u64) -> String {
        let full = ms(ns);
        match (self.one_day, full.find('T')) {
            (true, Some(t)) => full[t + 1..].to_string(),
            _ => full,
        }
    }
}

/// An instant as RFC 3339 to the millisecond.
pub(crate) fn ms(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns - ns % 1_000_000);
    humantime::format_rfc3339_millis(t).to_string()
}
