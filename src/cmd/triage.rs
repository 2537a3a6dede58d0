//! `capsule triage`: a window's findings with the packets that prove them, for a person.
//!
//! ```text
//! index (analytics::load) -> alerts::evaluate (the config's [alerts] rules) -> findings,
//!   worst first, at most MAX_FINDINGS
//! each finding's `query` (a `capsule query` command line) -> parsed by the CLI's own clap
//!   definitions -> query::write_file, as `capsule query -w` does -> DIR/evidence/NN-RULE.pcapng
//!   -> packets, bytes, sha256
//! DIR/findings.json   {"findings": [...]} (docs/alerts.md)
//! DIR/report.txt      the findings for a terminal (printed unless --quiet)
//! DIR/report.html     one file: inline SVG charts (DSCP classes over time, top talkers,
//!                     group matrix, TCP health, stragglers), the alerts, the findings with
//!                     their evidence and command, the data's limits; no script, no URL
//! ```

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use capsule_analytics::alerts::Alert;
use capsule_analytics::{matrix, stragglers, tcp, top, Input, Policy};
use clap::Parser;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::cli::{Cli, Cmd, TriageArgs};
use crate::units;

/// Findings written (with an evidence pcap each), worst first.
pub const MAX_FINDINGS: usize = 25;

/// A finding's evidence file.
#[derive(Debug, Clone, Serialize)]
struct Evidence {
    /// Relative to the report directory.
    pcap: String,
    format: &'static str,
    packets: u64,
    /// The file's size.
    bytes: u64,
    /// Captured bytes of its packets.
    captured_bytes: u64,
    sha256: String,
    /// Whether the file holds only the finding's first packets (it would have been larger
    /// than `max_bytes`).
    truncated: bool,
    /// The cap the file was written under.
    max_bytes: u64,
    /// All the packets of the finding's query and their captured bytes (equal to
    /// `packets` and `captured_bytes` when not truncated).
    finding_packets: u64,
    finding_captured_bytes: u64,
}

impl Evidence {
    /// The cut, in words, when the file holds only the finding's first packets.
    fn cut(&self) -> Option<String> {
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
struct Finding<'a> {
    kind: &'static str,
    severity: capsule_analytics::alerts::Severity,
    summary: &'a str,
    entity: &'a capsule_analytics::alerts::Entity,
    hosts: &'a [String],
    flows: Vec<&'a str>,
    first_ns: u64,
    first: &'a str,
    last_ns: u64,
    last: &'a str,
    figures: &'a serde_json::Map<String, serde_json::Value>,
    query: &'a str,
    evidence: Evidence,
}

pub fn run(a: &TriageArgs) -> Result<ExitCode> {
    if a.a.remote.server.is_some() {
        return Err(super::Usage(
            "triage writes evidence from the packets of a local store: it takes no --server \
             (pull the window with `capsule query --server` and import it, or run triage on \
             the capture host)"
                .into(),
        )
        .into());
    }
    let t0 = std::time::Instant::now();
    let ans = super::answer(&a.a, Some("triage"), true)?;
    let config = ans.config.as_ref().expect("answer() requires the config");
    let policy: &dyn Policy = config;
    let input = &ans.input;
    let alerts = super::alerts::evaluate(input, config)?;
    let index_s = t0.elapsed().as_secs_f64();
    let dir = &a.out;
    let cap = a.evidence_max.unwrap_or(config.alerts().evidence_max);
    std::fs::create_dir_all(dir.join("evidence"))
        .with_context(|| format!("cannot create {}", dir.join("evidence").display()))?;
    let mut findings = Vec::new();
    // Two findings with the same query (a night-time upload is both `egress` and
    // `off_hours`) share one evidence file.
    let mut written: std::collections::HashMap<&str, Evidence> = Default::default();
    for (i, al) in alerts.iter().take(MAX_FINDINGS).enumerate() {
        let ev = match written.get(al.query.as_str()) {
            Some(ev) => ev.clone(),
            None => {
                let ev = evidence(i, al, dir, cap)?;
                written.insert(&al.query, ev.clone());
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
        "store": input.store,
        "from_ns": input.from_ns,
        "from": capsule_query::format_instant(input.from_ns),
        "to_ns": input.to_ns,
        "to": capsule_query::format_instant(input.to_ns),
        "findings": findings,
        "alerts_total": alerts.len(),
        "findings_cut": alerts.len().saturating_sub(MAX_FINDINGS),
        "limits": input.limits,
    });
    write(dir, "findings.json", &format!("{doc:#}\n"))?;

    let text = report_text(input, &alerts, &findings);
    write(dir, "report.txt", &text)?;

    let interval_ns = chart_interval(input);
    let charts = Charts {
        dscp: dscp_over_time(input, interval_ns),
        top: top::top(input, top::Key::Src, top::By::Bytes, 10, Some(policy)),
        matrix: matrix::matrix(input, policy, matrix::By::Bytes),
        tcp: tcp::tcp(input, interval_ns)?,
        stragglers: config
            .alerts()
            .straggler_groups
            .iter()
            .filter_map(|g| {
                stragglers::stragglers(
                    input,
                    policy,
                    g,
                    config.alerts().straggler_interval_ns,
                    config.alerts().straggler_ratio,
                    config.alerts().straggler_min_bytes,
                )
                .ok()
            })
            .collect(),
        interval_ns,
    };
    let html = report_html(input, &alerts, &findings, &charts);
    write(dir, "report.html", &html)?;
    if !a.quiet {
        print!("{text}");
    }
    eprintln!(
        "capsule: triage report in {} (report.html, report.txt, findings.json, {} evidence \
         file(s)); alerts from the index in {index_s:.2} s, all in {:.2} s",
        dir.display(),
        written.len(),
        t0.elapsed().as_secs_f64()
    );
    let missing = input.limits.missing();
    if missing.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "capsule: the report is partial: {}; their flows are missing (exit status {})",
            missing.join("; "),
            super::PARTIAL
        );
        Ok(ExitCode::from(super::PARTIAL))
    }
}

fn write(dir: &Path, name: &str, text: &str) -> Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Splits a command line quoted by `capsule_analytics::shell_quote` (plain words and
/// POSIX single quotes, `'\''` for a quote inside).
fn split_words(line: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => bail!("unterminated quote in {line:?}"),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(x) => cur.push(x),
                    None => bail!("trailing backslash in {line:?}"),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Runs `al.query` as `capsule query -w DIR/evidence/NN-RULE.pcapng` does.
/// At most `cap` bytes: the first packets that fit.
fn evidence(i: usize, al: &Alert, dir: &Path, cap: u64) -> Result<Evidence> {
    let rel = format!("evidence/{:02}-{}.pcapng", i + 1, al.rule);
    let path = dir.join(&rel);
    let path_s = path.to_str().context("the report directory is not UTF-8")?;
    let mut argv = split_words(&al.query)?;
    argv.extend([
        "-w".into(),
        path_s.into(),
        "--format".into(),
        "pcapng".into(),
    ]);
    let cli = Cli::try_parse_from(&argv).with_context(|| {
        format!(
            "the query of finding {} does not parse: {}",
            i + 1,
            al.query
        )
    })?;
    let Cmd::Query(q) = cli.cmd else {
        bail!(
            "finding {}: not a `capsule query` command: {}",
            i + 1,
            al.query
        );
    };
    let store = capsule_store::Store::open(q.q.store())?;
    let opts = capsule_replay::ExportOptions {
        format: capsule_replay::Format::PcapNg,
        query: q.q.query()?,
        max_bytes: Some(cap),
        ..Default::default()
    };
    let report = super::query::write_file(&store, &opts, path_s)?;
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

fn report_text(input: &Input, alerts: &[Alert], findings: &[Finding<'_>]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "triage of {} from {} to {}",
        input.store,
        capsule_query::format_instant(input.from_ns),
        capsule_query::format_instant(input.to_ns)
    );
    if let (Some(a), Some(b)) = (&input.limits.held_from, &input.limits.held_to) {
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
            for line in crate::table::wrap(&format!("   evidence {cut}"), Some(80)) {
                let _ = writeln!(s, "{line}");
            }
        }
        let _ = writeln!(s, "   command: {} -w FILE", f.query);
    }
    if alerts.len() > findings.len() {
        let _ = writeln!(
            s,
            "\n{} more alert(s) not written as findings (`capsule alerts` lists all)",
            alerts.len() - findings.len()
        );
    }
    let _ = writeln!(s);
    for line in input.limits.lines() {
        let _ = writeln!(s, "note: {line}");
    }
    s
}

/// The charts' interval: about 60 bars over the window, whole seconds.
fn chart_interval(input: &Input) -> u64 {
    let secs = (input.to_ns - input.from_ns).div_ceil(1_000_000_000).max(1);
    secs.div_ceil(60).max(1) * 1_000_000_000
}

/// Bytes per DSCP value per interval: (value, bytes per slot), values by total bytes.
fn dscp_over_time(input: &Input, interval_ns: u64) -> Vec<(u8, Vec<u64>)> {
    let n = (input.to_ns - input.from_ns).div_ceil(interval_ns).max(1) as usize;
    let mut per: std::collections::BTreeMap<u8, Vec<u64>> = Default::default();
    for s in &input.flows {
        let f = &s.flow;
        for d in 0..2 {
            let counts = capsule_analytics::dscp_in_window(s, d);
            let total: u64 = counts.iter().map(|c| c.bytes).sum();
            if total == 0 {
                continue;
            }
            for b in f.buckets.iter().filter(|b| b.bytes[d] > 0) {
                let ns = b.second * 1_000_000_000;
                if ns < input.from_ns || ns >= input.to_ns.max(input.from_ns + 1) {
                    continue;
                }
                let slot = (((ns - input.from_ns) / interval_ns) as usize).min(n - 1);
                for c in counts.iter() {
                    let part =
                        (u128::from(b.bytes[d]) * u128::from(c.bytes) / u128::from(total)) as u64;
                    per.entry(c.dscp).or_insert_with(|| vec![0; n])[slot] += part;
                }
            }
        }
    }
    let mut v: Vec<(u8, Vec<u64>)> = per.into_iter().collect();
    v.sort_by_key(|(_, s)| std::cmp::Reverse(s.iter().sum::<u64>()));
    v
}

struct Charts {
    dscp: Vec<(u8, Vec<u64>)>,
    top: top::Top,
    matrix: matrix::Matrix,
    tcp: tcp::Tcp,
    stragglers: Vec<stragglers::Stragglers>,
    interval_ns: u64,
}

/// Text for HTML.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Stacked bars of `series` (name, values per slot) over `n` slots, with a legend.
fn stacked_svg(
    title: &str,
    series: &[(String, Vec<u64>)],
    unit: &str,
    axis: (&str, &str),
) -> String {
    let (w, h, left, bottom) = (900.0, 260.0, 70.0, 30.0);
    let n = series.first().map_or(1, |s| s.1.len()).max(1);
    let totals: Vec<u64> = (0..n)
        .map(|i| {
            series
                .iter()
                .map(|s| s.1.get(i).copied().unwrap_or(0))
                .sum()
        })
        .collect();
    let max = totals.iter().copied().max().unwrap_or(0).max(1) as f64;
    let bw = (w - left - 10.0) / n as f64;
    let mut o = format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"{}\" width=\"{w}\" height=\"{}\" \
         viewBox=\"0 0 {w} {}\">",
        esc(title),
        h + 20.0 * series.len().div_ceil(4) as f64,
        h + 20.0 * series.len().div_ceil(4) as f64
    );
    let _ = write!(
        o,
        "<text x=\"4\" y=\"14\" class=\"ax\">{}</text><text x=\"4\" y=\"{}\" class=\"ax\">0</text>",
        esc(&format!("{} {unit}", fmt_num(max as u64, unit))),
        h - bottom
    );
    let _ = write!(
        o,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>",
        h - bottom,
        w - 10.0,
        h - bottom
    );
    let _ = write!(
        o,
        "<text x=\"{left}\" y=\"{}\" class=\"ax\">{}</text>\
         <text x=\"{}\" y=\"{}\" class=\"ax\" text-anchor=\"end\">{}</text>",
        h - bottom + 16.0,
        esc(axis.0),
        w - 10.0,
        h - bottom + 16.0,
        esc(axis.1)
    );
    for i in 0..n {
        let mut y = h - bottom;
        for (k, (name, vals)) in series.iter().enumerate() {
            let v = vals.get(i).copied().unwrap_or(0);
            if v == 0 {
                continue;
            }
            let bh = v as f64 / max * (h - bottom - 20.0);
            y -= bh;
            let _ = write!(
                o,
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"{}\">\
                 <title>{} slot {i}: {}</title></rect>",
                left + i as f64 * bw,
                (bw - 1.0).max(1.0),
                PALETTE[k % PALETTE.len()],
                esc(name),
                v
            );
        }
    }
    for (k, (name, _)) in series.iter().enumerate() {
        let x = left + (k % 4) as f64 * 200.0;
        let y = h + 5.0 + (k / 4) as f64 * 20.0;
        let _ = write!(
            o,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            y - 10.0,
            PALETTE[k % PALETTE.len()],
            x + 16.0,
            y,
            esc(name)
        );
    }
    o.push_str("</svg>");
    o
}

fn fmt_num(v: u64, unit: &str) -> String {
    if unit == "bytes" {
        units::format_bytes(v)
    } else {
        v.to_string()
    }
}

/// Horizontal bars (label, value).
fn bars_svg(title: &str, rows: &[(String, f64, bool)], fmt: &dyn Fn(f64) -> String) -> String {
    let (w, row_h, left) = (900.0, 22.0, 260.0);
    let h = row_h * rows.len().max(1) as f64 + 10.0;
    let max = rows.iter().map(|r| r.1).fold(0.0, f64::max).max(1e-9);
    let mut o = format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"{}\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\">",
        esc(title)
    );
    if rows.is_empty() {
        o.push_str("<text x=\"4\" y=\"16\">nothing in the window</text>");
    }
    for (i, (label, v, hot)) in rows.iter().enumerate() {
        let y = i as f64 * row_h + 4.0;
        let bw = v / max * (w - left - 120.0);
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{left}\" y=\"{y}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{}\">{}</text>",
            left - 6.0,
            y + 14.0,
            esc(label),
            bw.max(1.0),
            row_h - 6.0,
            if *hot { "#e15759" } else { "#4e79a7" },
            left + bw + 6.0,
            y + 14.0,
            esc(&fmt(*v))
        );
    }
    o.push_str("</svg>");
    o
}

fn matrix_svg(m: &matrix::Matrix) -> String {
    let n = m.groups.len().max(1);
    let (cell, left, topm) = (70.0, 130.0, 110.0);
    let w = left + cell * n as f64 + 60.0;
    let h = topm + cell * n as f64 + 10.0;
    let max = m.cells.iter().map(|c| c.bytes).max().unwrap_or(0).max(1) as f64;
    let mut o = format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"group matrix\" width=\"{w}\" \
         height=\"{h}\" viewBox=\"0 0 {w} {h}\">"
    );
    for (i, g) in m.groups.iter().enumerate() {
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <text transform=\"translate({},{}) rotate(-45)\">{}</text>",
            left - 6.0,
            topm + i as f64 * cell + cell / 2.0 + 4.0,
            esc(g),
            left + i as f64 * cell + cell / 2.0,
            topm - 6.0,
            esc(g)
        );
    }
    for (r, g) in m.groups.iter().enumerate() {
        for (c, hgrp) in m.groups.iter().enumerate() {
            let cellv = m
                .cells
                .iter()
                .find(|x| &x.src_group == g && &x.dst_group == hgrp);
            let (bytes, flagged) = cellv.map_or((0, false), |x| (x.bytes, x.flagged));
            let t = if bytes == 0 {
                0.0
            } else {
                (bytes as f64).ln_1p() / max.ln_1p()
            };
            let x = left + c as f64 * cell;
            let y = topm + r as f64 * cell;
            let _ = write!(
                o,
                "<rect x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"rgb({},{},{})\" \
                 stroke=\"{}\" stroke-width=\"{}\"><title>{} -&gt; {}: {} bytes{}</title></rect>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
                cell - 2.0,
                cell - 2.0,
                (255.0 - 200.0 * t) as u8,
                (255.0 - 150.0 * t) as u8,
                255,
                if flagged { "#e15759" } else { "#ccc" },
                if flagged { 3 } else { 1 },
                esc(g),
                esc(hgrp),
                bytes,
                if flagged { " (not allowed)" } else { "" },
                x + cell / 2.0,
                y + cell / 2.0 + 4.0,
                if bytes == 0 {
                    "-".to_string()
                } else {
                    units::format_bytes(bytes)
                }
            );
        }
    }
    o.push_str("</svg>");
    o
}

fn report_html(input: &Input, alerts: &[Alert], findings: &[Finding<'_>], c: &Charts) -> String {
    let fmt = capsule_query::format_instant;
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>capsule triage {}</title><style>\
         body{{font-family:sans-serif;margin:1.5em;max-width:1000px;color:#222}}\
         h1{{font-size:1.4em}} h2{{font-size:1.15em;border-bottom:1px solid #ccc;margin-top:1.6em}}\
         table{{border-collapse:collapse;font-size:.9em}} td,th{{border:1px solid #ddd;padding:3px 6px;text-align:left}}\
         code{{background:#f4f4f4;padding:1px 3px;word-break:break-all}} .high{{color:#b00;font-weight:bold}}\
         .medium{{color:#b60}} .low{{color:#555}} svg text{{font-size:12px}} .ax{{fill:#555}}\
         .finding{{border:1px solid #ddd;padding:.5em 1em;margin:.6em 0}}\
         </style></head><body>",
        esc(&fmt(input.from_ns))
    );
    let _ = write!(
        o,
        "<h1>capsule triage: {} from {} to {}</h1>",
        esc(&input.store),
        esc(&fmt(input.from_ns)),
        esc(&fmt(input.to_ns))
    );
    let _ = write!(
        o,
        "<p>{} finding(s), {} alert(s). Every chart comes from the side index; each finding's \
         evidence pcap was exported from the stored packets by its command.</p>",
        findings.len(),
        alerts.len()
    );
    // Findings.
    let _ = write!(o, "<h2 id=\"findings\">Findings</h2>");
    if findings.is_empty() {
        o.push_str("<p>No alert rule fired in the window.</p>");
    }
    for (i, f) in findings.iter().enumerate() {
        let sev = format!("{:?}", f.severity).to_lowercase();
        let _ = write!(
            o,
            "<div class=\"finding\" data-kind=\"{}\"><p><span class=\"{sev}\">{}. {} [{}]</span> \
             <b>{}</b></p><p>{}</p><p>{} to {}</p>\
             <p>evidence: <a href=\"{}\">{}</a>, {} packets, {}, sha256 <code>{}</code></p>{}\
             <p>command: <code>{} -w FILE</code></p></div>",
            esc(f.kind),
            i + 1,
            esc(&sev.to_uppercase()),
            esc(f.kind),
            esc(&f.entity.name),
            esc(f.summary),
            esc(f.first),
            esc(f.last),
            esc(&f.evidence.pcap),
            esc(&f.evidence.pcap),
            f.evidence.packets,
            esc(&units::format_bytes(f.evidence.bytes)),
            esc(&f.evidence.sha256),
            f.evidence.cut().map_or(String::new(), |c| format!(
                "<p class=\"cut\">evidence {}</p>",
                esc(&c)
            )),
            esc(f.query)
        );
    }
    // Alerts.
    let _ = write!(
        o,
        "<h2 id=\"alerts\">Alerts</h2><table><tr><th>severity</th><th>rule</th><th>entity</th>\
         <th>first</th><th>last</th><th>summary</th></tr>"
    );
    for a in alerts {
        let sev = format!("{:?}", a.severity).to_lowercase();
        let _ = write!(
            o,
            "<tr><td class=\"{sev}\">{sev}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td></tr>",
            esc(a.rule),
            esc(&a.entity.name),
            esc(&a.first),
            esc(&a.last),
            esc(&a.summary)
        );
    }
    o.push_str("</table>");
    let (a0, a1) = (super::ms(input.from_ns), super::ms(input.to_ns));
    let axis = (a0.as_str(), a1.as_str());
    // DSCP over time.
    let series: Vec<(String, Vec<u64>)> = c
        .dscp
        .iter()
        .map(|(v, s)| {
            (
                format!("{} ({v})", capsule_analytics::dscp_name(*v)),
                s.clone(),
            )
        })
        .collect();
    let _ = write!(
        o,
        "<h2 id=\"dscp\">Traffic by DSCP class over time</h2><p>bytes per {} s, stacked</p>{}",
        c.interval_ns / 1_000_000_000,
        stacked_svg("traffic by DSCP class", &series, "bytes", axis)
    );
    // Top talkers.
    let rows: Vec<(String, f64, bool)> = c
        .top
        .rows
        .iter()
        .map(|r| {
            let hot = alerts
                .iter()
                .any(|a| a.entity.hosts.first() == Some(&r.key));
            (r.key.clone(), r.bytes as f64, hot)
        })
        .collect();
    let _ = write!(
        o,
        "<h2 id=\"top\">Top talkers</h2><p>bytes sent; red: named by an alert</p>{}",
        bars_svg("top talkers", &rows, &|v| units::format_bytes(v as u64))
    );
    // Matrix.
    let _ = write!(
        o,
        "<h2 id=\"matrix\">Group matrix</h2><p>bytes from row group to column group (log \
         shade); red border: the egress policy does not allow it</p>{}",
        matrix_svg(&c.matrix)
    );
    // TCP health.
    let tcp_series = vec![
        (
            "retransmissions".to_string(),
            c.tcp
                .intervals
                .iter()
                .map(|i| i.total.retransmissions)
                .collect(),
        ),
        (
            "zero-window segments".to_string(),
            c.tcp
                .intervals
                .iter()
                .map(|i| i.total.zero_window_segments)
                .collect(),
        ),
        (
            "RSTs".to_string(),
            c.tcp.intervals.iter().map(|i| i.total.rsts_sent).collect(),
        ),
    ];
    let _ = write!(
        o,
        "<h2 id=\"tcp\">TCP health over time</h2><p>segments per {} s; {} retransmissions of \
         {} data segments ({:.2}%) in the window</p>{}",
        c.tcp.interval_ns / 1_000_000_000,
        c.tcp.total.retransmissions,
        c.tcp.total.data_segments,
        c.tcp.total.retransmission_rate * 100.0,
        stacked_svg("TCP health", &tcp_series, "segments", axis)
    );
    // Stragglers.
    let _ = write!(o, "<h2 id=\"stragglers\">Stragglers</h2>");
    if c.stragglers.is_empty() {
        o.push_str("<p>No group is listed in <code>[alerts] straggler_groups</code>.</p>");
    }
    for s in &c.stragglers {
        let mut per: std::collections::BTreeMap<&str, (f64, usize)> = Default::default();
        for i in s.intervals.iter().filter(|i| i.judged) {
            for m in &i.members {
                if let Some(r) = m.ratio {
                    let e = per.entry(m.host.as_str()).or_default();
                    e.0 += r;
                    e.1 += 1;
                }
            }
        }
        let rows: Vec<(String, f64, bool)> = per
            .iter()
            .map(|(h, (sum, n))| {
                (
                    (*h).to_string(),
                    sum / *n as f64,
                    s.stragglers.iter().any(|x| x.host == *h),
                )
            })
            .collect();
        let _ = write!(
            o,
            "<h3>group {}</h3><p>mean ratio to the group median over judged {} s intervals; \
             red: straggler (under {} for {} intervals or more)</p>{}",
            esc(&s.group),
            s.interval_ns / 1_000_000_000,
            s.ratio,
            stragglers::MIN_RUN,
            bars_svg(&format!("stragglers of {}", s.group), &rows, &|v| format!(
                "{v:.2}"
            ))
        );
    }
    // Limits.
    let _ = write!(o, "<h2 id=\"limits\">What this report cannot see</h2><ul>");
    let l = &input.limits;
    if let (Some(a), Some(b)) = (&l.held_from, &l.held_to) {
        let _ = write!(
            o,
            "<li>retention horizon: the store holds packets from {} to {}</li>",
            esc(a),
            esc(b)
        );
    }
    for line in input.limits.lines() {
        let _ = write!(o, "<li>{}</li>", esc(&line));
    }
    o.push_str("</ul></body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_like_a_shell() {
        let w =
            split_words(r"capsule query --store '/tmp/a b' 'host 1.2.3.4 and it'\''s'").unwrap();
        assert_eq!(
            w,
            vec![
                "capsule",
                "query",
                "--store",
                "/tmp/a b",
                "host 1.2.3.4 and it's"
            ]
        );
        assert!(split_words("'open").is_err());
        assert_eq!(esc("<a href=\"x\">&"), "&lt;a href=&quot;x&quot;&gt;&amp;");
    }
}
