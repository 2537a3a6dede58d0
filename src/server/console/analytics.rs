//! The analytics view (`/analytics`): the index-only answers of the window and filter on one
//! page, from one reading of the window's flows (as triage does): top talkers by flow, host,
//! pair, group, DSCP value or application; the DSCP audit (every value apart, so EF and CS5
//! are never one class; violations of the config's policy; flows remarked mid-way); TCP
//! health over time, in total and per host; the group matrix with the cells the egress
//! policy forbids marked; stragglers per group. Every finding links to its packets, its
//! sessions and its `capsule query` line.

use std::fmt::Write as _;

use hyper::Response;

use super::super::body::Body;
use super::super::guard::{Failure, Guard};
use super::pages::{
    asked, at, bad_input, esc, export_links, page, partial, respond, table, window_form, Asked,
    Nav, Window,
};
use crate::render::{bps, percent};
use crate::report::{bars_svg, matrix_svg, stacked_svg};
use crate::units::{format_bytes, format_count, format_duration_ns};
use capsule_analytics::{dscp, matrix, stragglers, tcp, top};
use capsule_answers::analytics::{self as answers, Body as Answer, Kind, Question};
use capsule_answers::params::{TOP_BY, TOP_KEYS};
use capsule_answers::Source;

/// Rows of the top talkers' table.
const TOP_ROWS: usize = 20;
/// Groups whose stragglers are shown at most (those of `[alerts] straggler_groups`, else
/// the config's groups in its order).
const STRAGGLER_GROUPS: usize = 8;

/// What the page shows, answered on the blocking thread.
struct Answers {
    window: answers::Window,
    missing: Vec<String>,
    top: Result<top::Top, String>,
    dscp: dscp::Dscp,
    tcp: tcp::Tcp,
    /// `None`: the server has no config (groups and policy).
    matrix: Option<matrix::Matrix>,
    stragglers: Option<Vec<(String, Result<stragglers::Stragglers, String>)>>,
}

/// The answers of one question over `input` (the page's one reading of the window).
fn ask(
    input: &capsule_analytics::Input,
    q: Question,
    config: Option<&capsule_config::Config>,
) -> Result<Answer, String> {
    answers::body(input, &q, config).map_err(|e| e.to_string())
}

/// `GET /analytics`: every index-only answer of the window and filter.
pub(super) async fn analytics(g: Guard, nav: Nav, q: Option<&str>) -> Response<Body> {
    let (view, action) = ("view-analytics", "/analytics");
    let top = |p: &std::collections::HashMap<String, String>| {
        Question::from_params(Kind::Top, &|n| match n {
            "limit" => Some(TOP_ROWS.to_string()),
            n => p.get(n).cloned(),
        })
    };
    let Asked {
        p,
        w,
        query,
        own: top_q,
    } = match asked(q, &["key", "by"], top) {
        Ok(a) => a,
        Err((w, e)) => return bad_input(g, &nav, view, action, &w, &e),
    };
    let (source, server) = (g.source(), g.server.clone());
    let top_q2 = top_q.clone();
    let work = move || {
        let config = server.load_config()?;
        let source = Source {
            config: config.clone(),
            ..source
        };
        let input = answers::input(&source, &query, true).map_err(Failure::of)?;
        let window = answers::Window::of(&input);
        let c = config.as_ref();
        let top = match ask(&input, top_q2, c) {
            Ok(Answer::Top(t)) => Ok(*t),
            Ok(_) => Err("top gave another answer".into()),
            Err(e) => Err(e),
        };
        let Ok(Answer::Dscp(dscp)) = ask(&input, Question::Dscp, c) else {
            return Err(Failure::Server("the DSCP audit gave no answer".into()));
        };
        let interval_ns = crate::report::chart_interval(&window);
        let tcp = match ask(&input, Question::Tcp { interval_ns }, c) {
            Ok(Answer::Tcp(t)) => t,
            Ok(_) => return Err(Failure::Server("tcp gave another answer".into())),
            Err(e) => return Err(Failure::Server(e)),
        };
        let matrix = c.and_then(|c| {
            match ask(
                &input,
                Question::Matrix {
                    by: matrix::By::Bytes,
                },
                Some(c),
            ) {
                Ok(Answer::Matrix(m)) => Some(m),
                _ => None,
            }
        });
        let stragglers = c.map(|c| {
            let rules = c.alerts();
            let groups: Vec<String> = if rules.straggler_groups.is_empty() {
                capsule_analytics::Policy::groups(c)
            } else {
                rules.straggler_groups.clone()
            };
            groups
                .into_iter()
                .take(STRAGGLER_GROUPS)
                .map(|group| {
                    let q = Question::Stragglers {
                        group: group.clone(),
                        interval_ns: rules.straggler_interval_ns,
                        ratio: rules.straggler_ratio,
                        min_bytes: rules.straggler_min_bytes,
                    };
                    let s = match ask(&input, q, Some(c)) {
                        Ok(Answer::Stragglers(s)) => Ok(s),
                        Ok(_) => Err("stragglers gave another answer".to_string()),
                        Err(e) => Err(e),
                    };
                    (group, s)
                })
                .collect()
        });
        let missing = input.limits.missing();
        Ok(Answers {
            window,
            missing,
            top,
            dscp,
            tcp,
            matrix,
            stragglers,
        })
    };
    let (g, a) = match g.blocking("analytics", true, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let place = nav.place();
    let mut b = window_form(action, &w, &keep(&p));
    b.push_str(&partial(&a.missing));
    let _ = write!(
        b,
        "<p>From {} to {}. <a href=\"#top\">Top talkers</a> · <a href=\"#dscp\">DSCP audit</a> \
         · <a href=\"#tcp\">TCP health</a> · <a href=\"#matrix\">Group matrix</a> · \
         <a href=\"#stragglers\">Stragglers</a></p>",
        at(a.window.from_ns),
        at(a.window.to_ns)
    );
    top_section(&mut b, &a, &top_q, &w, &place);
    dscp_section(&mut b, &a.dscp, a.matrix.is_some(), &place);
    tcp_section(&mut b, &a.tcp, &a.window, &place);
    matrix_section(&mut b, a.matrix.as_ref(), &place);
    stragglers_section(&mut b, a.stragglers.as_deref(), &place);
    b.push_str("<h2>What this page cannot see</h2><ul class=\"limits\">");
    for line in a.window.limits.lines() {
        let _ = write!(b, "<li>{}</li>", esc(&line));
    }
    b.push_str("</ul>");
    respond(
        g,
        page("Analytics", Some(&nav), view, &w, "", &b),
        &a.missing,
    )
}

/// The view's own parameters as hidden inputs of the window form.
fn keep(p: &std::collections::HashMap<String, String>) -> String {
    ["key", "by"]
        .iter()
        .filter_map(|k| {
            p.get(*k)
                .map(|v| format!("<input type=\"hidden\" name=\"{k}\" value=\"{}\">", esc(v)))
        })
        .collect()
}

fn top_section(b: &mut String, a: &Answers, q: &Question, w: &Window, place: &str) {
    let Question::Top { key, by, .. } = q else {
        return;
    };
    let name = |k: top::Key| {
        TOP_KEYS
            .iter()
            .find(|(x, _)| *x == k)
            .map_or("flow", |(_, n)| *n)
    };
    let by_name = TOP_BY
        .iter()
        .find(|(x, _)| x == by)
        .map_or("bytes", |(_, n)| *n);
    let _ = write!(
        b,
        "<section id=\"top\" data-testid=\"analytics-top\"><h2>Top talkers</h2><p class=\"tabs\">"
    );
    for (k, label) in [
        (top::Key::Flow, "flows"),
        (top::Key::Src, "senders"),
        (top::Key::Dst, "receivers"),
        (top::Key::Pair, "host pairs"),
        (top::Key::Group, "groups"),
        (top::Key::Dscp, "DSCP values"),
        (top::Key::App, "applications"),
        (top::Key::Tunnel, "tunnels"),
    ] {
        let cur = if k == *key { " class=\"current\"" } else { "" };
        let _ = write!(
            b,
            "<a href=\"{}\" data-testid=\"top-key-{}\"{cur}>{label}</a> ",
            esc(&w.url("/analytics", &[("key", name(k)), ("by", by_name)])),
            name(k)
        );
    }
    let other = if by_name == "bytes" {
        "packets"
    } else {
        "bytes"
    };
    let _ = write!(
        b,
        "· <a href=\"{}\">by {other}</a></p>",
        esc(&w.url("/analytics", &[("key", name(*key)), ("by", other)]))
    );
    let t = match &a.top {
        Ok(t) => t,
        Err(e) => {
            let _ = write!(b, "<p class=\"error\">{}</p></section>", esc(e));
            return;
        }
    };
    let packets = by_name == "packets";
    let bars: Vec<(String, f64, bool)> = t
        .rows
        .iter()
        .map(|r| {
            let v = if packets { r.packets } else { r.bytes };
            (r.key.clone(), v as f64, false)
        })
        .collect();
    b.push_str(&bars_svg("top talkers", &bars, &|v| {
        if packets {
            format!("{} packets", format_count(v as u64))
        } else {
            format_bytes(v as u64)
        }
    }));
    let row = |r: &top::Row| {
        vec![
            r.rank.map_or(String::new(), |n| n.to_string()),
            esc(&r.key),
            format_bytes(r.bytes),
            format_count(r.packets),
            format_count(r.flows),
            percent(r.share),
            bps(r.mean_bps),
            bps(r.peak_bps as f64),
            esc(&r
                .dscp_mix
                .iter()
                .map(|d| format!("{} {}", d.name, percent(d.share)))
                .collect::<Vec<_>>()
                .join(", ")),
            r.query
                .as_ref()
                .map_or(String::new(), |e| export_links(e, place)),
        ]
    };
    let mut rows: Vec<Vec<String>> = t.rows.iter().map(row).collect();
    rows.extend(t.other.iter().map(row));
    rows.push(row(&t.total));
    b.push_str(&table(
        "top-table",
        &[
            "#",
            "key",
            "bytes",
            "packets",
            "flows",
            "share",
            "mean",
            "peak",
            "DSCP",
            "packets of it",
        ],
        &[0, 2, 3, 4, 5, 6, 7],
        &rows,
    ));
    b.push_str("</section>");
}

fn dscp_section(b: &mut String, d: &dscp::Dscp, has_config: bool, place: &str) {
    b.push_str(
        "<section id=\"dscp\" data-testid=\"analytics-dscp\"><h2>DSCP audit</h2><p>Every value \
         apart: EF (46) and CS5 (40) are different classes, whatever a switch maps them to.</p>",
    );
    let rows: Vec<Vec<String>> = d
        .values
        .iter()
        .map(|v| {
            vec![
                format!(
                    "<span class=\"dscp-{}\">{} ({})</span>",
                    v.dscp,
                    esc(&v.name),
                    v.dscp
                ),
                format_bytes(v.bytes),
                format_count(v.packets),
                format_count(v.flows),
                esc(&v
                    .top_senders
                    .iter()
                    .map(|s| format!("{} {}", s.host, format_bytes(s.bytes)))
                    .collect::<Vec<_>>()
                    .join(", ")),
                export_links(&v.query, place),
            ]
        })
        .collect();
    b.push_str(&table(
        "dscp-values",
        &[
            "value",
            "bytes",
            "packets",
            "flow directions",
            "largest senders",
            "packets of it",
        ],
        &[1, 2, 3],
        &rows,
    ));
    b.push_str("<h3>Violations of the policy</h3>");
    match &d.violations {
        None if !has_config => b.push_str(
            "<p class=\"note\">The policy (<code>[dscp]</code>) is the config's: this server \
             has none (<code>capsule serve --config FILE</code>).</p>",
        ),
        None => b.push_str("<p class=\"note\">No policy was checked.</p>"),
        Some(v) if v.is_empty() => b.push_str("<p>None: every sender kept to its values.</p>"),
        Some(v) => {
            let rows: Vec<Vec<String>> = v
                .iter()
                .map(|x| {
                    vec![
                        esc(&match &x.src_group {
                            Some(g) => format!("{} ({g})", x.src),
                            None => x.src.clone(),
                        }),
                        esc(&x.dst),
                        format!("{} ({})", esc(&x.name), x.dscp),
                        format_bytes(x.bytes),
                        format_count(x.packets),
                        format!("{:.0}", x.mean_packet_size),
                        format!("{} – {}", at(x.first_ns), at(x.last_ns)),
                        export_links(&x.query, place),
                    ]
                })
                .collect();
            b.push_str(&table(
                "dscp-violations",
                &[
                    "sender",
                    "to",
                    "value",
                    "bytes",
                    "packets",
                    "mean size",
                    "when",
                    "packets of it",
                ],
                &[3, 4, 5],
                &rows,
            ));
        }
    }
    b.push_str("<h3>Flows remarked mid-way</h3>");
    if d.remarked.is_empty() {
        b.push_str("<p>None: no flow direction changed its value.</p>");
    } else {
        let rows: Vec<Vec<String>> = d
            .remarked
            .iter()
            .map(|r| {
                vec![
                    esc(&r.flow),
                    format!("{} → {}", esc(&r.from_name), esc(&r.to_name)),
                    format!("#{} at {}", r.packet, at(r.at_ns)),
                    export_links(&r.query, place),
                ]
            })
            .collect();
        b.push_str(&table(
            "dscp-remarked",
            &[
                "flow direction",
                "remarked",
                "first changed packet",
                "packets of it",
            ],
            &[],
            &rows,
        ));
    }
    b.push_str("</section>");
}

/// Retransmissions per host (rows) and interval (columns), shaded by their share of the
/// host's data segments: where and when TCP suffered.
fn heatmap(t: &tcp::Tcp) -> String {
    let hosts: Vec<&str> = t.worst_hosts.iter().map(|h| h.host.as_str()).collect();
    if hosts.is_empty() || t.intervals.is_empty() {
        return "<p>No TCP traffic in the window.</p>".into();
    }
    let (left, cell_h, width) = (260.0f64, 20.0f64, 640.0f64);
    let cw = width / t.intervals.len() as f64;
    let h = cell_h * hosts.len() as f64 + 24.0;
    let mut o = format!(
        "<svg class=\"chart\" data-testid=\"tcp-heatmap\" role=\"img\" aria-label=\"TCP \
         retransmissions per host over time\" viewBox=\"0 0 {} {h}\">",
        left + width + 10.0
    );
    for (r, host) in hosts.iter().enumerate() {
        let y = r as f64 * cell_h;
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"axis\">{}</text>",
            left - 6.0,
            y + 14.0,
            esc(host)
        );
        for (c, iv) in t.intervals.iter().enumerate() {
            let hh = iv.hosts.iter().find(|x| x.host == *host);
            let (re, data) = hh.map_or((0, 0), |x| {
                (x.health.retransmissions, x.health.data_segments)
            });
            let share = re as f64 / data.max(1) as f64;
            // Any retransmission shows; 10% or more is full red.
            let shade = if re == 0 {
                0.0
            } else {
                0.15 + 0.85 * (share * 10.0).min(1.0)
            };
            let _ = write!(
                o,
                "<rect x=\"{:.1}\" y=\"{y}\" width=\"{:.1}\" height=\"{}\" fill=\"#e15759\" \
                 fill-opacity=\"{shade:.2}\" stroke=\"#eee\"><title>{} {}: {} retransmissions \
                 of {} data segments</title></rect>",
                left + c as f64 * cw,
                cw.max(1.0),
                cell_h - 2.0,
                esc(host),
                esc(&crate::render::ms(iv.from_ns)),
                re,
                data
            );
        }
    }
    let _ = write!(
        o,
        "<text x=\"{left}\" y=\"{}\" class=\"axis\">{}</text><text x=\"{}\" y=\"{}\" \
         class=\"axis\" text-anchor=\"end\">{}</text></svg>",
        h - 4.0,
        esc(&crate::render::ms(t.intervals[0].from_ns)),
        left + width,
        h - 4.0,
        esc(&crate::render::ms(t.intervals[t.intervals.len() - 1].to_ns)),
    );
    o
}

fn tcp_section(b: &mut String, t: &tcp::Tcp, w: &answers::Window, place: &str) {
    let series = vec![
        (
            "retransmissions".to_string(),
            t.intervals
                .iter()
                .map(|i| i.total.retransmissions)
                .collect(),
        ),
        (
            "zero-window segments".to_string(),
            t.intervals
                .iter()
                .map(|i| i.total.zero_window_segments)
                .collect(),
        ),
        (
            "RSTs".to_string(),
            t.intervals
                .iter()
                .map(|i| i.total.rsts_sent)
                .collect::<Vec<u64>>(),
        ),
    ];
    let (a0, a1) = (crate::render::ms(w.from_ns), crate::render::ms(w.to_ns));
    let _ = write!(
        b,
        "<section id=\"tcp\" data-testid=\"analytics-tcp\"><h2>TCP health over time</h2>\
         <p>Segments per {}; {} retransmissions of {} data segments ({}) in the window.</p>{}\
         <h3>Per host</h3><p>Retransmissions per interval of the hosts with the most; the \
         shade is their share of the host's data segments.</p>{}",
        format_duration_ns(t.interval_ns),
        t.total.retransmissions,
        t.total.data_segments,
        percent(t.total.retransmission_rate),
        stacked_svg("TCP health", &series, "segments", (&a0, &a1), None),
        heatmap(t)
    );
    let rows: Vec<Vec<String>> = t
        .worst_hosts
        .iter()
        .map(|h| {
            let x = &h.health;
            vec![
                esc(&h.host),
                format_count(x.data_segments),
                format_count(x.retransmissions),
                percent(x.retransmission_rate),
                format_count(x.zero_window_segments),
                format_duration_ns(x.zero_window_ns),
                format!("{} / {}", x.rsts_sent, x.rsts_received),
                x.syns_unanswered.to_string(),
                export_links(&h.query, place),
            ]
        })
        .collect();
    b.push_str(&table(
        "tcp-hosts",
        &[
            "host",
            "data segments",
            "retransmissions",
            "rate",
            "zero windows",
            "closed for",
            "RSTs sent / received",
            "SYNs unanswered",
            "packets of it",
        ],
        &[1, 2, 3, 4, 5, 7],
        &rows,
    ));
    if !t.worst_sessions.is_empty() {
        let rows: Vec<Vec<String>> = t
            .worst_sessions
            .iter()
            .map(|s| {
                vec![
                    esc(&s.flow),
                    format!("{} / {}", s.retransmissions[0], s.retransmissions[1]),
                    format!(
                        "{} / {}",
                        s.zero_window_segments[0], s.zero_window_segments[1]
                    ),
                    format!("{} / {}", s.rsts[0], s.rsts[1]),
                    if s.syn_unanswered { "yes" } else { "" }.to_string(),
                    export_links(&s.query, place),
                ]
            })
            .collect();
        b.push_str("<h3>Connections with the most trouble</h3>");
        b.push_str(&table(
            "tcp-sessions",
            &[
                "flow",
                "retransmissions (each way)",
                "zero windows",
                "RSTs",
                "SYN unanswered",
                "packets of it",
            ],
            &[],
            &rows,
        ));
    }
    b.push_str("</section>");
}

fn matrix_section(b: &mut String, m: Option<&matrix::Matrix>, place: &str) {
    b.push_str("<section id=\"matrix\" data-testid=\"analytics-matrix\"><h2>Group matrix</h2>");
    let Some(m) = m else {
        b.push_str(
            "<p class=\"note\">The groups are the config's: this server has none \
             (<code>capsule serve --config FILE</code>).</p></section>",
        );
        return;
    };
    let _ = write!(
        b,
        "<p>Bytes from the row's group to the column's; a red border marks a cell with \
         traffic the egress policy (<code>[egress]</code>) forbids.</p>{}",
        matrix_svg(m)
    );
    let flagged: Vec<&matrix::Flagged> = m.cells.iter().flat_map(|c| &c.flagged_flows).collect();
    if !flagged.is_empty() {
        let rows: Vec<Vec<String>> = flagged
            .iter()
            .take(20)
            .map(|f| {
                vec![
                    esc(&f.flow),
                    format_bytes(f.bytes),
                    format_count(f.packets),
                    format!("{} – {}", at(f.first_ns), at(f.last_ns)),
                    export_links(&f.query, place),
                ]
            })
            .collect();
        let _ = write!(
            b,
            "<h3>Forbidden traffic ({} flow direction(s){})</h3>",
            flagged.len(),
            if flagged.len() > 20 {
                ", the 20 largest shown"
            } else {
                ""
            }
        );
        b.push_str(&table(
            "matrix-forbidden",
            &[
                "flow direction",
                "bytes",
                "packets",
                "when",
                "packets of it",
            ],
            &[1, 2],
            &rows,
        ));
    }
    b.push_str("</section>");
}

fn stragglers_section(
    b: &mut String,
    s: Option<&[(String, Result<stragglers::Stragglers, String>)]>,
    place: &str,
) {
    b.push_str(
        "<section id=\"stragglers\" data-testid=\"analytics-stragglers\"><h2>Stragglers</h2>",
    );
    let Some(groups) = s else {
        b.push_str(
            "<p class=\"note\">The groups are the config's: this server has none \
             (<code>capsule serve --config FILE</code>).</p></section>",
        );
        return;
    };
    if groups.is_empty() {
        b.push_str("<p class=\"note\">The config names no group.</p>");
    }
    for (group, s) in groups {
        let _ = write!(b, "<h3>Group {}</h3>", esc(group));
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                let _ = write!(b, "<p class=\"error\">{}</p>", esc(e));
                continue;
            }
        };
        let bars = s.mean_ratios();
        if bars.is_empty() {
            let _ = write!(
                b,
                "<p>No interval of {} could be judged (fewer than 3 members active, or the \
                 group's median under {}).</p>",
                format_duration_ns(s.interval_ns),
                format_bytes(s.min_bytes)
            );
            continue;
        }
        let _ = write!(
            b,
            "<p>Each member's mean ratio to the group's median per {}; red: a straggler \
             (under {} for {} intervals in a row or more).</p>{}",
            format_duration_ns(s.interval_ns),
            s.ratio,
            stragglers::MIN_RUN,
            bars_svg(&format!("stragglers of {group}"), &bars, &|v| format!(
                "{v:.2}"
            ))
        );
        let rows: Vec<Vec<String>> = s
            .stragglers
            .iter()
            .map(|x| {
                vec![
                    esc(&x.host),
                    format!("{} – {}", at(x.from_ns), at(x.to_ns)),
                    x.intervals.to_string(),
                    format!("{:.2}", x.ratio_to_median),
                    export_links(&x.query, place),
                ]
            })
            .collect();
        if !rows.is_empty() {
            b.push_str(&table(
                "stragglers",
                &[
                    "member",
                    "when",
                    "intervals",
                    "ratio to the median",
                    "packets of it",
                ],
                &[2, 3],
                &rows,
            ));
        }
    }
    b.push_str("</section>");
}
