//! `capsule triage`: a window's findings with the packets that prove them, for a person.
//!
//! ```text
//! request::analytics_request -> answers::analytics::input (the window's flows, once)
//!   -> answers::analytics::body: alerts (the config's [alerts] rules) -> findings, worst
//!      first, at most MAX_FINDINGS; top, matrix, tcp, stragglers and DSCP over time for the
//!      charts
//! each finding's export (a Query value) -> files::write_file, as `capsule query -w` does
//!   -> DIR/evidence/NN-RULE.pcapng -> packets, bytes, sha256
//! DIR/findings.json   {"findings": [...]} (docs/alerts.md)
//! DIR/report.txt      report::text, printed unless --quiet
//! DIR/report.html     report::html: one file, inline SVG charts, no script, no URL
//! DIR/manifest.json   every file of the report (outdir.rs)
//!   written into a staging sibling of DIR, renamed over the previous report at the end:
//!   DIR holds exactly this run's report; a DIR holding a file triage did not write is
//!   refused (exit 2)
//! ```

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use capsule_analytics::alerts::Alert;
use capsule_analytics::Export;
use capsule_analytics::{dscp, matrix, top};
use capsule_answers::analytics::{self, Body, Question, Window};
use capsule_answers::{export, Source};
use sha2::{Digest, Sha256};

use crate::cli::TriageArgs;
use crate::output::Usage;
use crate::report::{Charts, Evidence, Finding};
use crate::request::answer_error;

mod outdir;

/// Findings written (with an evidence pcap each), worst first.
pub const MAX_FINDINGS: usize = 25;

pub fn run(a: &TriageArgs) -> Result<ExitCode> {
    if a.a.q.fleet {
        return Err(crate::output::Usage(
            "triage writes evidence from the packets of a local store: it takes no --fleet \
             (run it on the node that holds the window)"
                .into(),
        )
        .into());
    }
    if a.a.q.remote.is_remote() {
        return Err(crate::output::Usage(
            "triage writes evidence from the packets of a local store: it takes no --server \
             or --remote (pull the window with `capsule query --server` and import it, or run \
             triage on the capture host)"
                .into(),
        )
        .into());
    }
    let t0 = std::time::Instant::now();
    let (source, request) = crate::request::analytics_request(&a.a, Question::Alerts)?;
    let Some(config) = source.config.as_ref() else {
        return Err(Usage(
            "triage needs --config FILE: the host groups (and policy) it answers with".into(),
        )
        .into());
    };
    // Written beside -o DIR, then put in its place: DIR holds exactly this run's report.
    let staging = outdir::Staging::begin(&a.out)?;
    // On a terminal, a spinner while the window's flows are read from the index (a long
    // window takes a while); each evidence file then shows its own bar. Nothing when
    // stderr is not a terminal.
    let progress = crate::progress::Progress::spinner("triage", false);
    progress.message("reading the window's flows from the index".into());
    let input = analytics::input(&source, &request.query, true);
    progress.finish();
    let input = input.map_err(answer_error)?;
    let ask = |q: Question| analytics::body(&input, &q, Some(config)).map_err(answer_error);
    let Body::Alerts { alerts } =
        analytics::alerts_body(&source, &input, config).map_err(answer_error)?
    else {
        bail!("the alerts question got another answer");
    };
    let window = Window::of(&input);
    let index_s = t0.elapsed().as_secs_f64();
    let cap = a.evidence_max.unwrap_or(config.alerts().evidence_max);
    let dir = staging.dir();
    let mut findings = Vec::new();
    // Two findings with the same query (a night-time upload is both `egress` and
    // `off_hours`) share one evidence file.
    let mut written: Vec<(&Export, Evidence)> = Vec::new();
    for (i, al) in alerts.iter().take(MAX_FINDINGS).enumerate() {
        let ev = match written.iter().find(|(q, _)| *q == &al.query) {
            Some((_, ev)) => ev.clone(),
            None => {
                let ev = evidence(&source, i, al, dir, cap)?;
                written.push((&al.query, ev.clone()));
                ev
            }
        };
        findings.push(Finding {
            kind: al.rule,
            severity: al.severity,
            summary: &al.summary,
            entity: &al.entity,
            hosts: &al.entity.hosts,
            flows: if al.entity.kind == "flow" {
                vec![al.entity.name.as_str()]
            } else {
                Vec::new()
            },
            first_ns: al.first_ns,
            first: &al.first,
            last_ns: al.last_ns,
            last: &al.last,
            figures: &al.figures,
            query: &al.query,
            evidence: ev,
        });
    }
    let doc = serde_json::json!({
        "store": window.store,
        "from_ns": window.from_ns,
        "from": capsule_query::format_instant(window.from_ns),
        "to_ns": window.to_ns,
        "to": capsule_query::format_instant(window.to_ns),
        "findings": findings,
        "alerts_total": alerts.len(),
        "findings_cut": alerts.len().saturating_sub(MAX_FINDINGS),
        "limits": window.limits,
    });
    write(dir, "findings.json", &format!("{doc:#}\n"))?;

    let text = crate::report::text(&window, &alerts, &findings);
    write(dir, "report.txt", &text)?;

    let interval_ns = crate::report::chart_interval(&window);
    let stragglers = config
        .alerts()
        .straggler_groups
        .iter()
        .filter_map(|g| {
            let q = Question::Stragglers {
                group: g.clone(),
                interval_ns: config.alerts().straggler_interval_ns,
                ratio: config.alerts().straggler_ratio,
                min_bytes: config.alerts().straggler_min_bytes,
            };
            match ask(q) {
                Ok(Body::Stragglers(s)) => Some(s),
                _ => None,
            }
        })
        .collect();
    let top = Question::Top {
        key: top::Key::Src,
        by: top::By::Bytes,
        limit: 10,
    };
    let (Body::Top(top), Body::Matrix(matrix), Body::Tcp(tcp)) = (
        ask(top)?,
        ask(Question::Matrix {
            by: matrix::By::Bytes,
        })?,
        ask(Question::Tcp { interval_ns })?,
    ) else {
        bail!("a chart's question got another answer");
    };
    let charts = Charts {
        zooms: burst_zooms(&source, &alerts),
        dscp: dscp::over_time(&input, interval_ns),
        top: *top,
        matrix,
        tcp,
        stragglers,
        interval_ns,
    };
    let html = crate::report::html(&window, &alerts, &findings, &charts);
    write(dir, "report.html", &html)?;
    staging.commit()?;
    if !a.quiet {
        print!("{text}");
    }
    eprintln!(
        "capsule: triage report in {} (report.html, report.txt, findings.json, {} evidence \
         file(s)); alerts from the index in {index_s:.2} s, all in {:.2} s",
        a.out.display(),
        written.len(),
        t0.elapsed().as_secs_f64()
    );
    let missing = window.limits.missing();
    if missing.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "capsule: the report is partial: {}; their flows are missing (exit status {})",
            missing.join("; "),
            crate::output::PARTIAL
        );
        Ok(ExitCode::from(crate::output::PARTIAL))
    }
}

fn write(dir: &Path, name: &str, text: &str) -> Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Exports the packets of `al.query` from `source` as `capsule query -w
/// DIR/evidence/NN-RULE.pcapng` does: at most `cap` bytes, the first packets that fit.
fn evidence(source: &Source, i: usize, al: &Alert, dir: &Path, cap: u64) -> Result<Evidence> {
    let rel = format!("evidence/{:02}-{}.pcapng", i + 1, al.rule);
    let path = dir.join(&rel);
    let path_s = path.to_str().context("the report directory is not UTF-8")?;
    let request = export::Request {
        format: capsule_replay::Format::PcapNg,
        query: al.query.query(),
        bpf: None,
        max_bytes: Some(cap),
        segments: None,
    };
    let report = crate::files::write_file(source, &request, path_s)?;
    let data = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let sha = Sha256::digest(&data);
    let mut hex = String::with_capacity(64);
    for b in sha {
        let _ = write!(hex, "{b:02x}");
    }
    Ok(Evidence {
        pcap: rel,
        format: "pcapng",
        packets: report.packets,
        bytes: data.len() as u64,
        captured_bytes: report.captured_bytes,
        sha256: hex,
        truncated: report.packets_over_cap > 0,
        max_bytes: cap,
        finding_packets: report.packets + report.packets_over_cap,
        finding_captured_bytes: report.captured_bytes + report.captured_bytes_over_cap,
    })
}

/// Bursts zoomed into, at most.
const MAX_ZOOMS: usize = 5;
/// Milliseconds shown on each side of a burst's window.
const ZOOM_MARGIN_MS: u64 = 10;

/// A millisecond zoom of each burst the alerts report (`ef_share`, `microburst`): the
/// index's series around its window, bytes per DSCP value per millisecond (no segment file
/// is read). A store whose series cannot be listed gives no zoom (the chart says none).
fn burst_zooms(source: &Source, alerts: &[Alert]) -> Vec<crate::report::Zoom> {
    let Ok(store) = source.open() else {
        return Vec::new();
    };
    alerts
        .iter()
        .filter(|a| matches!(a.rule, "ef_share" | "microburst"))
        .take(MAX_ZOOMS)
        .filter_map(|a| {
            let ms = |k: &str| a.figures.get(k).and_then(serde_json::Value::as_u64);
            let start = ms("window_start_ns")? / 1_000_000;
            let end = ms("window_end_ns")?.div_ceil(1_000_000);
            let (from, to) = (start.saturating_sub(ZOOM_MARGIN_MS), end + ZOOM_MARGIN_MS);
            let listing =
                capsule_index::millis::list_index_only(&store, from * 1_000_000, to * 1_000_000)
                    .ok()?;
            Some(crate::report::Zoom {
                title: format!("{} {}: {}", a.rule, a.entity.name, a.summary),
                from_ns: from * 1_000_000,
                to_ns: to * 1_000_000,
                burst: (start * 1_000_000, end * 1_000_000),
                dscp: capsule_analytics::bursts::ms_by_value(&listing, from, to),
            })
        })
        .collect()
}
