//! report.html: one file, inline SVG charts, no script and no URL.

use std::fmt::Write as _;

use capsule_analytics::alerts::Alert;
use capsule_analytics::stragglers;
use capsule_answers::analytics::Window;

use super::svg::{bars_svg, esc, matrix_svg, stacked_svg};
use super::{Charts, Finding};
use crate::units;

pub(crate) fn html(w: &Window, alerts: &[Alert], findings: &[Finding<'_>], c: &Charts) -> String {
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
        esc(&fmt(w.from_ns))
    );
    let _ = write!(
        o,
        "<h1>capsule triage: {} from {} to {}</h1>",
        esc(&w.store),
        esc(&fmt(w.from_ns)),
        esc(&fmt(w.to_ns))
    );
    summary(&mut o, w, alerts, findings);
    let _ = write!(
        o,
        "<p>{} finding(s), {} alert(s). Every chart comes from the side index; each finding's \
         evidence pcap was exported from the stored packets by its command. Times are shown \
         to the millisecond; hover one for its nanoseconds (findings.json has them all).</p>",
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
            at(f.first_ns),
            at(f.last_ns),
            esc(&f.evidence.pcap),
            esc(&f.evidence.pcap),
            f.evidence.packets,
            esc(&units::format_bytes(f.evidence.bytes)),
            esc(&f.evidence.sha256),
            f.evidence.cut().map_or(String::new(), |c| format!(
                "<p class=\"cut\">evidence {}</p>",
                esc(&c)
            )),
            esc(&f.query.store_command())
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
            at(a.first_ns),
            at(a.last_ns),
            esc(&a.summary)
        );
    }
    o.push_str("</table>");
    let (a0, a1) = (crate::render::ms(w.from_ns), crate::render::ms(w.to_ns));
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
        stacked_svg("traffic by DSCP class", &series, "bytes", axis, None)
    );
    // A millisecond zoom of each burst.
    for z in &c.zooms {
        let series: Vec<(String, Vec<u64>)> = z
            .dscp
            .iter()
            .map(|(v, s)| {
                let name = if *v == 64 {
                    "non-IP".to_string()
                } else {
                    capsule_analytics::dscp_name(*v)
                };
                (format!("{name} ({v})"), s.clone())
            })
            .collect();
        let (z0, z1) = (crate::render::ms(z.from_ns), crate::render::ms(z.to_ns));
        let _ = write!(
            o,
            "<h3 class=\"zoom\">Millisecond zoom: {}</h3><p>bytes per 1 ms, stacked, from {} \
             to {}; the burst: {} to {}</p>{}",
            esc(&z.title),
            esc(&z0),
            esc(&z1),
            esc(&crate::render::ms(z.burst.0)),
            esc(&crate::render::ms(z.burst.1)),
            stacked_svg(
                "traffic by DSCP class per millisecond",
                &series,
                "bytes",
                (z0.as_str(), z1.as_str()),
                None
            )
        );
    }
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
    // A red cell with no alert says why: its flows are under every rule's threshold.
    let quiet: Vec<&capsule_analytics::matrix::Flagged> = c
        .matrix
        .cells
        .iter()
        .flat_map(|c| &c.flagged_flows)
        .filter(|f| {
            !alerts.iter().any(|a| {
                matches!(a.rule, "egress" | "off_hours" | "group_pair")
                    && a.entity.hosts.contains(&f.src)
                    && a.entity.hosts.contains(&f.dst)
            })
        })
        .collect();
    if !quiet.is_empty() {
        let _ = write!(
            o,
            "<p class=\"unalerted\">red, but under every alert threshold (<code>[alerts] \
             egress_bytes</code>, <code>off_hours_bytes</code>, <code>pair_bytes</code>), so \
             no finding:</p><ul>"
        );
        for f in quiet.iter().take(20) {
            let _ = write!(
                o,
                "<li>{} ({}): <code>{} -w FILE</code></li>",
                esc(&capsule_analytics::names::with_name(
                    &f.flow,
                    f.dst_name.as_ref().map(|n| n.describe.as_str())
                )),
                esc(&units::format_bytes(f.bytes)),
                esc(&f.query.store_command())
            );
        }
        if quiet.len() > 20 {
            let _ = write!(
                o,
                "<li>and {} more (<code>capsule matrix</code>)</li>",
                quiet.len() - 20
            );
        }
        o.push_str("</ul>");
    }
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
    // The scale's top is the tallest bar: said against the data segments of its interval,
    // so that 32 retransmissions filling the chart read as the few they are.
    let tcp_scale = c
        .tcp
        .intervals
        .iter()
        .map(|i| {
            let t = &i.total;
            (
                t.retransmissions + t.zero_window_segments + t.rsts_sent,
                t.data_segments,
            )
        })
        .max_by_key(|(n, _)| *n)
        .filter(|(n, _)| *n > 0)
        .map(|(n, data)| {
            format!(
                "{:.2}% of the {} data segments sent in that {} s",
                n as f64 * 100.0 / data.max(1) as f64,
                data,
                c.tcp.interval_ns / 1_000_000_000
            )
        });
    let _ = write!(
        o,
        "<h2 id=\"tcp\">TCP health over time</h2><p>segments per {} s; {} retransmissions of \
         {} data segments ({:.2}%) in the window</p>{}",
        c.tcp.interval_ns / 1_000_000_000,
        c.tcp.total.retransmissions,
        c.tcp.total.data_segments,
        c.tcp.total.retransmission_rate * 100.0,
        stacked_svg(
            "TCP health",
            &tcp_series,
            "segments",
            axis,
            tcp_scale.as_deref()
        )
    );
    // Stragglers.
    let _ = write!(o, "<h2 id=\"stragglers\">Stragglers</h2>");
    if c.stragglers.is_empty() {
        o.push_str("<p>No group is listed in <code>[alerts] straggler_groups</code>.</p>");
    }
    for s in &c.stragglers {
        let rows = s.mean_ratios();
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
    let l = &w.limits;
    if let (Some(a), Some(b)) = (&l.held_from, &l.held_to) {
        let _ = write!(
            o,
            "<li>retention horizon: the store holds packets from {} to {}</li>",
            esc(a),
            esc(b)
        );
    }
    for line in w.limits.lines() {
        let _ = write!(o, "<li>{}</li>", esc(&line));
    }
    o.push_str("</ul></body></html>\n");
    o
}

/// An instant to the millisecond, with its nanoseconds (RFC 3339) on hover.
fn at(ns: u64) -> String {
    format!(
        "<time title=\"{}\">{}</time>",
        esc(&capsule_query::format_instant(ns)),
        esc(&crate::render::ms(ns))
    )
}

/// The report's first section: findings by severity, the window, the store, the capsule
/// that made it and when.
fn summary(o: &mut String, w: &Window, alerts: &[Alert], findings: &[Finding<'_>]) {
    use capsule_analytics::alerts::Severity;
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let _ = write!(
        o,
        "<section id=\"summary\"><table>\
         <tr><th>findings</th><td><span class=\"high\">high <b data-severity=\"high\">{}</b></span>, \
         <span class=\"medium\">medium <b data-severity=\"medium\">{}</b></span>, \
         <span class=\"low\">low <b data-severity=\"low\">{}</b></span>{}</td></tr>\
         <tr><th>window</th><td>{} to {} ({})</td></tr>\
         <tr><th>store</th><td><code>{}</code></td></tr>\
         <tr><th>made by</th><td>capsule {}</td></tr>\
         <tr><th>generated</th><td>{}</td></tr></table></section>",
        count(Severity::High),
        count(Severity::Medium),
        count(Severity::Low),
        if alerts.len() > findings.len() {
            format!(
                "; {} more alert(s) past the cap of {}",
                alerts.len() - findings.len(),
                findings.len()
            )
        } else {
            String::new()
        },
        at(w.from_ns),
        at(w.to_ns),
        esc(&units::format_duration_ns(w.to_ns.saturating_sub(w.from_ns))),
        esc(&w.store),
        esc(crate::cli::VERSION.as_str()),
        esc(&humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()),
    );
}
