//! The triage report: the window's findings, with their evidence files, and the charts of
//! the window, as text (report.txt), one HTML file (report.html, inline SVG, no script, no
//! URL) and JSON (findings.json, written by the command). It takes answers and knows
//! nothing of the store: `cmd/triage.rs` asks the questions and writes the evidence.
//!
//! ```text
//! Window + alerts + findings (each with its Evidence)  -> text()  report.txt
//!          + Charts (answers: top, matrix, tcp, stragglers, DSCP over time and a
//!            millisecond zoom of each burst an alert reports)
//!                                                       -> html()  report.html
//!                                                            svg.rs: stacked bars, bars,
//!                                                            the group matrix
//! ```

use std::fmt::Write as _;

use capsule_analytics::alerts::Alert;
use capsule_analytics::{matrix, stragglers, tcp, top};
use capsule_answers::analytics::Window;
use serde::Serialize;

use crate::units;

mod html;
mod svg;

pub(crate) use html::html;
pub(crate) use svg::{bars_svg, esc, matrix_svg, stacked_svg};

/// A finding's evidence file.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Evidence {
    /// Relative to the report directory.
    pub(crate) pcap: String,
    pub(crate) format: &'static str,
    pub(crate) packets: u64,
    /// The file's size.
    pub(crate) bytes: u64,
    /// Captured bytes of its packets.
    pub(crate) captured_bytes: u64,
    pub(crate) sha256: String,
    /// Whether the file holds only the finding's first packets (it would have been larger
    /// than `max_bytes`).
    pub(crate) truncated: bool,
    /// The cap the file was written under.
    pub(crate) max_bytes: u64,
    /// All the packets of the finding's query and their captured bytes (equal to
    /// `packets` and `captured_bytes` when not truncated).
    pub(crate) finding_packets: u64,
    pub(crate) finding_captured_bytes: u64,
}

impl Evidence {
    /// The cut, in words, when the file holds only the finding's first packets.
    pub(crate) fn cut(&self) -> Option<String> {
        self.truncated.then(|| {
            format!(
                "cut at the cap of {} bytes (--evidence-max): the file holds the first {} \
                 of the finding's {} packets ({} of {} captured); the command gives them all",
                self.max_bytes,
                self.packets,
                self.finding_packets,
                units::format_bytes(self.captured_bytes),
                units::format_bytes(self.finding_captured_bytes)
            )
        })
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct Finding<'a> {
    pub(crate) kind: &'static str,
    pub(crate) severity: capsule_analytics::alerts::Severity,
    pub(crate) summary: &'a str,
    pub(crate) entity: &'a capsule_analytics::alerts::Entity,
    pub(crate) hosts: &'a [String],
    pub(crate) flows: Vec<&'a str>,
    pub(crate) first_ns: u64,
    pub(crate) first: &'a str,
    pub(crate) last_ns: u64,
    pub(crate) last: &'a str,
    pub(crate) figures: &'a serde_json::Map<String, serde_json::Value>,
    /// Serialised as the `capsule query` command line that exports the packets.
    pub(crate) query: &'a capsule_analytics::Export,
    pub(crate) evidence: Evidence,
}

/// A millisecond zoom of one burst: bytes per DSCP value per ms of `[from_ns, to_ns)`.
pub(crate) struct Zoom {
    pub(crate) title: String,
    pub(crate) from_ns: u64,
    pub(crate) to_ns: u64,
    /// The burst's own window, inside.
    pub(crate) burst: (u64, u64),
    pub(crate) dscp: Vec<(u8, Vec<u64>)>,
}

pub(crate) struct Charts {
    /// A millisecond zoom of each burst the alerts report.
    pub(crate) zooms: Vec<Zoom>,
    pub(crate) dscp: Vec<(u8, Vec<u64>)>,
    pub(crate) top: top::Top,
    pub(crate) matrix: matrix::Matrix,
    pub(crate) tcp: tcp::Tcp,
    pub(crate) stragglers: Vec<stragglers::Stragglers>,
    pub(crate) interval_ns: u64,
}

pub(crate) fn text(w: &Window, alerts: &[Alert], findings: &[Finding<'_>]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "triage of {} from {} to {}",
        w.store,
        capsule_query::format_instant(w.from_ns),
        capsule_query::format_instant(w.to_ns)
    );
    if let (Some(a), Some(b)) = (&w.limits.held_from, &w.limits.held_to) {
        let _ = writeln!(s, "the store holds packets from {a} to {b}");
    }
    let _ = writeln!(s, "{} finding(s), worst first", findings.len());
    for (i, f) in findings.iter().enumerate() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{}. {} [{}] {}",
            i + 1,
            format!("{:?}", f.severity).to_uppercase(),
            f.kind,
            f.entity.name
        );
        let _ = writeln!(s, "   {}", f.summary);
        let _ = writeln!(s, "   from {} to {}", f.first, f.last);
        let _ = writeln!(
            s,
            "   evidence: {} ({} packets, {}, sha256 {})",
            f.evidence.pcap,
            f.evidence.packets,
            units::format_bytes(f.evidence.bytes),
            f.evidence.sha256
        );
        if let Some(cut) = f.evidence.cut() {
            for line in crate::render::table::wrap(&format!("   evidence {cut}"), Some(80)) {
                let _ = writeln!(s, "{line}");
            }
        }
        let command = f.query.store_command();
        let _ = writeln!(s, "   command: {command} -w FILE");
    }
    if alerts.len() > findings.len() {
        let _ = writeln!(
            s,
            "\n{} more alert(s) not written as findings (`capsule alerts` lists all)",
            alerts.len() - findings.len()
        );
    }
    let _ = writeln!(s);
    for line in w.limits.lines() {
        let _ = writeln!(s, "note: {line}");
    }
    s
}

/// The charts' interval: about 60 bars over the window, whole seconds.
pub(crate) fn chart_interval(w: &Window) -> u64 {
    let secs = (w.to_ns - w.from_ns).div_ceil(1_000_000_000).max(1);
    secs.div_ceil(60).max(1) * 1_000_000_000
}
