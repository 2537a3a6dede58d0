//! The console's pages, rendered on the server from the answers of capsule-answers: the
//! sessions (flows) of a window and filter, the timeline of a window by DSCP class, the
//! capture's status. Each page is a URL holding its window and filter, so it can be
//! bookmarked and shared.

use std::collections::HashMap;
use std::fmt::Write as _;

use hyper::{Response, StatusCode};

use super::super::body::Body;
use super::super::guard::{Failure, Guard};
use super::super::params::{params, query_of};
use super::html;
use capsule_answers::flows;
use capsule_index::flows::FlowSummary;

/// Flows on one page of the sessions view.
const PAGE: usize = 50;

/// What the page header shows of the session: its user, its sign-out token, the host the
/// browser named (for the `--server` of the command lines shown).
#[derive(Debug)]
pub(super) struct Nav {
    pub(super) user: String,
    pub(super) csrf: String,
    pub(super) host: String,
}

/// The window and filter as the URL gives them (text, as typed).
#[derive(Debug, Default, Clone)]
struct Window {
    from: String,
    to: String,
    filter: String,
}

impl Window {
    fn of(p: &HashMap<String, String>) -> Window {
        let g = |k: &str| p.get(k).cloned().unwrap_or_default();
        Window {
            from: g("from"),
            to: g("to"),
            filter: g("filter"),
        }
    }

    /// The query string carrying the window and filter (the non-empty ones).
    fn query(&self) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("from", &self.from),
            ("to", &self.to),
            ("filter", &self.filter),
        ] {
            if !v.is_empty() {
                parts.push(format!("{k}={}", enc(v)));
            }
        }
        parts.join("&")
    }

    /// As a map for [`query_of`].
    fn map(&self) -> HashMap<String, String> {
        let mut m = HashMap::new();
        for (k, v) in [
            ("from", &self.from),
            ("to", &self.to),
            ("filter", &self.filter),
        ] {
            if !v.is_empty() {
                m.insert(k.to_string(), v.clone());
            }
        }
        m
    }
}

/// `s` escaped for HTML text and attribute values.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` percent-encoded as one URL query component (the one encoder of the client's URLs).
pub(super) use crate::client::encode as enc;

/// A whole page: the header with the views' links (keeping the window and filter) and the
/// sign-out form, then `body` inside the view's root (`data-testid` = `view`).
fn page(title: &str, nav: Option<&Nav>, view: &str, w: &Window, head: &str, body: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{head}\
         <title>{} · capsule</title><link rel=\"stylesheet\" href=\"/static/console.css\">\
         </head><body>",
        esc(title)
    );
    if let Some(n) = nav {
        let q = w.query();
        let q = if q.is_empty() { q } else { format!("?{q}") };
        let _ = write!(s, "<header><strong>capsule</strong><nav>");
        for (path, name) in [
            ("/timeline", "Timeline"),
            ("/sessions", "Sessions"),
            ("/status", "Status"),
        ] {
            let cur = if format!("view-{}", &path[1..]) == view {
                " class=\"current\""
            } else {
                ""
            };
            let _ = write!(s, "<a href=\"{path}{}\"{cur}>{name}</a>", esc(&q));
        }
        let _ = write!(
            s,
            "</nav><form method=\"post\" action=\"/logout\" class=\"signout\">\
             <span>{}</span><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\" data-testid=\"logout-submit\">Sign out</button></form>\
             </header>",
            esc(&n.user),
            esc(&n.csrf)
        );
    }
    // The script is a signed-in page's (it is served to a session only).
    let script = if nav.is_some() {
        "<script src=\"/static/console.js\"></script>"
    } else {
        ""
    };
    let _ = write!(
        s,
        "<main data-testid=\"{view}\">{body}</main>{script}</body></html>"
    );
    s
}

/// A page with one message (an error before any view).
pub(super) fn message(title: &str, text: &str) -> String {
    page(
        title,
        None,
        "view-message",
        &Window::default(),
        "",
        &format!(
            "<h1>{}</h1><p class=\"error\">{}</p><p><a href=\"/login\">Sign in</a></p>",
            esc(title),
            esc(text)
        ),
    )
}

/// The sign-in page.
pub(super) fn login(next: &str, csrf: &str, error: Option<&str>) -> String {
    let err = error
        .map(|e| {
            format!(
                "<p class=\"error\" data-testid=\"login-error\">{}</p>",
                esc(e)
            )
        })
        .unwrap_or_default();
    page(
        "Sign in",
        None,
        "view-login",
        &Window::default(),
        "",
        &format!(
            "<h1>Sign in to capsule</h1>{err}\
             <form method=\"post\" action=\"/login\" class=\"login\">\
             <label>Bearer token (<code>capsule token add</code>)\
             <input type=\"password\" name=\"token\" autocomplete=\"off\" autofocus \
              data-testid=\"login-token\"></label>\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <input type=\"hidden\" name=\"next\" value=\"{}\">\
             <button type=\"submit\" data-testid=\"login-submit\">Sign in</button></form>",
            esc(csrf),
            esc(next)
        ),
    )
}

/// The window form every view has: from, to, filter.
fn window_form(action: &str, w: &Window, extra: &str) -> String {
    format!(
        "<form method=\"get\" action=\"{action}\" class=\"window\">\
         <label>From <input name=\"from\" value=\"{}\" placeholder=\"start of the store\" \
          data-testid=\"from-input\"></label>\
         <label>To <input name=\"to\" value=\"{}\" placeholder=\"end of the store\" \
          data-testid=\"to-input\"></label>\
         <label class=\"filter\">Filter <input name=\"filter\" value=\"{}\" \
          placeholder=\"e.g. dscp ef and tcp\" spellcheck=\"false\" data-testid=\"filter-input\">\
         </label>{extra}<button type=\"submit\" data-testid=\"filter-submit\">Apply</button></form>",
        esc(&w.from),
        esc(&w.to),
        esc(&w.filter)
    )
}

/// A 400 page for a bad window or filter: the message as the CLI gives it, caret line kept.
fn bad_input(g: Guard, nav: &Nav, view: &str, action: &str, w: &Window, e: &str) -> Response<Body> {
    let body = format!(
        "{}<pre class=\"error\" data-testid=\"filter-error\">{}</pre>",
        window_form(action, w, ""),
        esc(e)
    );
    let r = html(
        StatusCode::BAD_REQUEST,
        page("Bad filter", Some(nav), view, w, "", &body),
    );
    g.done(r, e)
}

/// How the sessions view sorts, by its URL name.
fn sort_of(name: Option<&str>) -> Result<flows::Sort, String> {
    match name {
        None | Some("") => Ok(flows::Sort::Bytes),
        Some("start") => Ok(flows::Sort::First),
        Some(s @ ("first" | "bytes" | "packets" | "duration" | "retransmissions")) => {
            Ok(flows::Sort::by_name(s).expect("a sort name"))
        }
        Some(s) => Err(format!(
            "invalid value for sort: expected bytes, packets, start, duration or \
             retransmissions, found {s:?}"
        )),
    }
}

/// A byte count in short form (1.5 MB).
fn short_bytes(n: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB", "PB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// A duration in ns in short form.
fn short_duration(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else if s < 120.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} min", s / 60.0)
    }
}

/// One end of a flow: address and port.
fn end(addr: std::net::IpAddr, port: Option<u16>) -> String {
    match (addr, port) {
        (std::net::IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}

/// The DSCP values a flow carried, by name.
fn dscps(f: &FlowSummary) -> String {
    let mask = f.flow.totals.dscp[0] | f.flow.totals.dscp[1];
    (0..64u8)
        .filter(|d| mask & (1u64 << d) != 0)
        .map(capsule_analytics::dscp_name)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The export of one flow within the view's window and filter: its packets from its first
/// to just after its last.
fn flow_export(f: &FlowSummary, q: &capsule_query::Query) -> capsule_analytics::Export {
    let t = &f.flow.totals;
    let (lo, hi) = q.window();
    capsule_analytics::Export {
        from_ns: t.first_ns.max(lo),
        to_ns: t.last_ns.saturating_add(1).min(hi),
        within: q.filter.clone(),
        filter: capsule_analytics::flow_filter_of(&f.flow.key),
        store: String::new(),
    }
}

/// The `/download` URL of an export's packets as pcapng.
fn download_url(from: &str, to: &str, filter: &str) -> String {
    let mut u = String::from("/download?format=pcapng");
    for (k, v) in [("from", from), ("to", to), ("filter", filter)] {
        if !v.is_empty() {
            let _ = write!(u, "&{k}={}", enc(v));
        }
    }
    u
}

/// `GET /sessions`: the flows of the window and filter, sorted, a page at a time.
pub(super) async fn sessions(g: Guard, nav: Nav, q: Option<&str>) -> Response<Body> {
    let p = match params(q, &["from", "to", "filter", "sort", "page"]) {
        Ok(p) => p,
        Err(e) => {
            return bad_input(
                g,
                &nav,
                "view-sessions",
                "/sessions",
                &Window::default(),
                &e,
            )
        }
    };
    let w = Window::of(&p);
    let parsed = query_of(&w.map()).and_then(|query| {
        let sort = sort_of(p.get("sort").map(String::as_str))?;
        let page = match p.get("page") {
            None => 1,
            Some(n) => n.parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                format!("invalid value for page: expected a number from 1, found {n:?}")
            })?,
        };
        Ok((query, sort, page))
    });
    let (query, sort, page_no) = match parsed {
        Ok(x) => x,
        Err(e) => return bad_input(g, &nav, "view-sessions", "/sessions", &w, &e),
    };
    let source = g.source();
    let request = flows::Request {
        query: query.clone(),
        sort,
        limit: None,
    };
    let work = move || {
        let a = flows::answer(&source, &request).map_err(|e| Failure::Server(format!("{e:#}")))?;
        Ok((a.listing.flows, a.missing))
    };
    let (g, (all, missing)) = match g.blocking("flows", true, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let total = all.len();
    let pages = total.div_ceil(PAGE).max(1);
    let page_no = page_no.min(pages);
    let shown = &all[(page_no - 1) * PAGE..(page_no * PAGE).min(total)];
    let sort_name = match sort {
        flows::Sort::First => "start",
        s => s.name(),
    };
    let place = format!("--server https://{} --token-file TOKEN_FILE", nav.host);
    let mut b = window_form(
        "/sessions",
        &w,
        &format!("<input type=\"hidden\" name=\"sort\" value=\"{sort_name}\">"),
    );
    for m in &missing {
        let _ = write!(
            b,
            "<p class=\"partial\">Partial answer: {} (flows are missing)</p>",
            esc(m)
        );
    }
    // The selection: the window and filter as one pcapng, and its command line.
    let (lo, hi) = query.window();
    let sel = capsule_analytics::Export {
        from_ns: lo,
        to_ns: hi,
        within: capsule_query::Filter::all(),
        filter: query.filter.clone(),
        store: String::new(),
    };
    let _ = write!(
        b,
        "<section class=\"selection\"><p>{total} flows in the window. \
         <a href=\"{}\" data-testid=\"download-pcap\" download>Download the selection \
         (pcapng)</a></p><p class=\"cmd\"><code>{}</code> \
         <button type=\"button\" class=\"copy\">Copy</button></p></section>",
        esc(&download_url(&w.from, &w.to, &w.filter)),
        esc(&selection_command(&w, &query, &place, &sel)),
    );
    // The table, its headers sorting.
    let base = w.query();
    let link = |sort: &str, page: usize| {
        let mut q = base.clone();
        if !q.is_empty() {
            q.push('&');
        }
        let _ = write!(q, "sort={sort}&page={page}");
        format!("/sessions?{q}")
    };
    b.push_str("<table data-testid=\"flows-table\"><thead><tr>");
    for (key, name) in [
        ("start", "Start"),
        ("duration", "Duration"),
        ("", "Proto"),
        ("", "A"),
        ("", "B"),
        ("packets", "Packets"),
        ("bytes", "Bytes"),
        ("retransmissions", "Retrans."),
        ("", "DSCP"),
        ("", "Packets of the flow"),
    ] {
        if key.is_empty() {
            let _ = write!(b, "<th>{name}</th>");
        } else {
            let cur = if key == sort_name {
                " class=\"sorted\""
            } else {
                ""
            };
            let _ = write!(
                b,
                "<th{cur}><a href=\"{}\" data-testid=\"sort-{key}\">{name}</a></th>",
                esc(&link(key, 1))
            );
        }
    }
    b.push_str("</tr></thead><tbody>");
    for f in shown {
        let t = &f.flow.totals;
        let k = &f.flow.key;
        let e = flow_export(f, &query);
        let url = download_url(
            &capsule_query::format_instant(e.from_ns),
            &capsule_query::format_instant(e.to_ns),
            &e.filter_text(),
        );
        let cmd = e.command("-w flow.pcapng --format pcapng", &place);
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td>\
             <td><a href=\"{}\" download>pcapng</a> <details><summary>capsule query</summary>\
             <code>{}</code> <button type=\"button\" class=\"copy\">Copy</button></details></td></tr>",
            esc(&capsule_query::format_instant(t.first_ns)),
            short_duration(t.last_ns.saturating_sub(t.first_ns)),
            capsule_wire::IpProto::from(k.proto)
                .name()
                .map_or_else(|| k.proto.to_string(), str::to_string),
            esc(&end(k.a, k.ports.map(|p| p.0))),
            esc(&end(k.b, k.ports.map(|p| p.1))),
            t.total_packets(),
            short_bytes(t.total_bytes()),
            t.retransmissions[0] + t.retransmissions[1],
            esc(&dscps(f)),
            esc(&url),
            esc(&cmd),
        );
    }
    b.push_str("</tbody></table><nav class=\"pages\">");
    if page_no > 1 {
        let _ = write!(
            b,
            "<a href=\"{}\" data-testid=\"page-prev\">‹ Previous</a>",
            esc(&link(sort_name, page_no - 1))
        );
    }
    let _ = write!(b, "<span>Page {page_no} of {pages}</span>");
    if page_no < pages {
        let _ = write!(
            b,
            "<a href=\"{}\" data-testid=\"page-next\">Next ›</a>",
            esc(&link(sort_name, page_no + 1))
        );
    }
    b.push_str("</nav>");
    let r = html(
        StatusCode::OK,
        page("Sessions", Some(&nav), "view-sessions", &w, "", &b),
    );
    let outcome = if missing.is_empty() {
        "ok".to_string()
    } else {
        format!("partial: {}", missing.join("; "))
    };
    g.finish(r, &outcome, None, total as u64)
}

/// The `capsule query` command line of the selection: the window as the URL gives it (a
/// relative time stays relative), else the store's whole span.
fn selection_command(
    w: &Window,
    query: &capsule_query::Query,
    place: &str,
    sel: &capsule_analytics::Export,
) -> String {
    let mut cmd = format!("capsule query -w selection.pcapng --format pcapng {place}");
    if query.from_ns.is_some() {
        let _ = write!(cmd, " --from {}", capsule_analytics::shell_quote(&w.from));
    }
    if query.to_ns.is_some() {
        let _ = write!(cmd, " --to {}", capsule_analytics::shell_quote(&w.to));
    }
    let f = sel.filter_text();
    if !f.is_empty() {
        let _ = write!(cmd, " {}", capsule_analytics::shell_quote(&f));
    }
    cmd
}

/// Bytes and packets per time bin of a window, stacked by DSCP class.
#[derive(Debug, PartialEq)]
pub(super) struct Series {
    /// The first second of the window and the seconds a bin spans.
    pub(super) start: u64,
    pub(super) step: u64,
    /// The classes, most bytes first (DSCP values).
    pub(super) classes: Vec<u8>,
    /// Per bin, per class (in `classes`' order): bytes.
    pub(super) bytes: Vec<Vec<u64>>,
    pub(super) packets: Vec<u64>,
}

/// The DSCP a direction of a flow carried most bytes with (0 when it carried none).
fn main_dscp(t: &capsule_index::sideindex::FlowTotals, d: usize) -> u8 {
    t.dscp_counts[d]
        .iter()
        .max_by_key(|c| c.bytes)
        .map(|c| c.dscp)
        .unwrap_or_else(|| {
            (0..64u8)
                .find(|v| t.dscp[d] & (1u64 << v) != 0)
                .unwrap_or(0)
        })
}

/// The series of `flows`' 1-second buckets in seconds `[lo, hi)`, in at most `bins` bins,
/// each direction's bytes counted under its main DSCP class.
pub(super) fn series(flows: &[FlowSummary], lo: u64, hi: u64, bins: u64) -> Series {
    let span = hi.saturating_sub(lo).max(1);
    let step = span.div_ceil(bins.max(1)).max(1);
    let n = span.div_ceil(step) as usize;
    let mut by_class: HashMap<u8, Vec<u64>> = HashMap::new();
    let mut packets = vec![0u64; n];
    for f in flows {
        for d in 0..2 {
            let class = main_dscp(&f.flow.totals, d);
            for b in &f.flow.buckets {
                if b.second < lo || b.second >= hi || b.bytes[d] == 0 && b.packets[d] == 0 {
                    continue;
                }
                let i = ((b.second - lo) / step) as usize;
                by_class.entry(class).or_insert_with(|| vec![0; n])[i] += b.bytes[d];
                packets[i] += u64::from(b.packets[d]);
            }
        }
    }
    let mut classes: Vec<u8> = by_class.keys().copied().collect();
    classes.sort_by_key(|c| (std::cmp::Reverse(by_class[c].iter().sum::<u64>()), *c));
    let bytes = (0..n)
        .map(|i| classes.iter().map(|c| by_class[c][i]).collect())
        .collect();
    Series {
        start: lo,
        step,
        classes,
        bytes,
        packets,
    }
}

/// Colours of the DSCP classes, in order of bytes.
const COLOURS: [&str; 8] = [
    "#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#9d755d",
];

/// The timeline's chart: bytes per bin stacked by class, each bin a link zooming into it;
/// the plot carries its window so the script can turn a drag into a window.
fn chart(s: &Series, w: &Window) -> String {
    let (width, height, left, top) = (900.0f64, 260.0f64, 60.0f64, 10.0f64);
    let n = s.bytes.len().max(1) as f64;
    let bw = width / n;
    let max = s
        .bytes
        .iter()
        .map(|b| b.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let end = s.start + s.step * s.bytes.len() as u64;
    let mut svg = format!(
        "<svg class=\"chart\" data-testid=\"timeline-chart\" viewBox=\"0 0 {} {}\" \
         data-from=\"{}\" data-to=\"{}\" data-left=\"{left}\" data-width=\"{width}\" \
         role=\"img\" aria-label=\"bytes over time by DSCP class\">",
        left + width + 10.0,
        top + height + 30.0,
        s.start,
        end
    );
    let _ = write!(
        svg,
        "<text x=\"4\" y=\"{}\" class=\"axis\">{}</text><text x=\"4\" y=\"{}\" class=\"axis\">0</text>",
        top + 10.0,
        short_bytes(max as u64),
        top + height
    );
    let rest = w.filter.clone();
    for (i, bin) in s.bytes.iter().enumerate() {
        let from = s.start + s.step * i as u64;
        let to = from + s.step;
        let href = format!(
            "/timeline?{}",
            Window {
                from: from.to_string(),
                to: to.to_string(),
                filter: rest.clone(),
            }
            .query()
        );
        let x = left + bw * i as f64;
        let mut y = top + height;
        let _ = write!(svg, "<a href=\"{}\">", esc(&href));
        let total: u64 = bin.iter().sum();
        let _ = write!(
            svg,
            "<title>{} +{}s: {} in {} packets</title>",
            esc(&capsule_query::format_instant(from * 1_000_000_000)),
            s.step,
            short_bytes(total),
            s.packets[i]
        );
        // An invisible full-height bar: the link's target even where nothing was sent.
        let _ = write!(
            svg,
            "<rect x=\"{x:.2}\" y=\"{top}\" width=\"{bw:.2}\" height=\"{height}\" class=\"hit\"/>"
        );
        for (c, &v) in bin.iter().enumerate() {
            if v == 0 {
                continue;
            }
            let h = v as f64 / max * height;
            y -= h;
            let _ = write!(
                svg,
                "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{h:.2}\" fill=\"{}\"/>",
                (bw - 0.5).max(0.5),
                COLOURS[c.min(COLOURS.len() - 1)]
            );
        }
        svg.push_str("</a>");
    }
    let _ = write!(
        svg,
        "<text x=\"{left}\" y=\"{}\" class=\"axis\">{}</text>\
         <text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{}</text>\
         <rect class=\"brush\" x=\"0\" y=\"{top}\" width=\"0\" height=\"{height}\"/></svg>",
        top + height + 20.0,
        esc(&capsule_query::format_instant(s.start * 1_000_000_000)),
        left + width,
        top + height + 20.0,
        esc(&capsule_query::format_instant(end * 1_000_000_000)),
    );
    svg
}

/// `GET /timeline`: bytes over time by DSCP class for the window and filter, from the
/// index; a drag on the chart selects a window (the script sets `from`/`to`).
pub(super) async fn timeline(g: Guard, nav: Nav, q: Option<&str>) -> Response<Body> {
    let p = match params(q, &["from", "to", "filter"]) {
        Ok(p) => p,
        Err(e) => {
            return bad_input(
                g,
                &nav,
                "view-timeline",
                "/timeline",
                &Window::default(),
                &e,
            )
        }
    };
    let w = Window::of(&p);
    let query = match query_of(&w.map()) {
        Ok(q) => q,
        Err(e) => return bad_input(g, &nav, "view-timeline", "/timeline", &w, &e),
    };
    let store = g.server.store.clone();
    let work = move || {
        // From the index with each flow's 1-second buckets in the window.
        let fail =
            |e: capsule_store::StoreError| Failure::Server(format!("{}: {e:#}", store.display()));
        let st = capsule_store::Store::open(&store).map_err(fail)?;
        let listing = capsule_index::flows::list_index_only(&st, &query, true).map_err(fail)?;
        let a = flows::Answer {
            missing: flows::missing(&listing, &[], &query),
            listing,
            unreadable: Vec::new(),
            segments: Vec::new(),
        };
        // The window's seconds: as asked, else the flows' span.
        let (lo, hi) = query.window();
        let first = a.listing.flows.iter().map(|f| f.flow.totals.first_ns).min();
        let last = a.listing.flows.iter().map(|f| f.flow.totals.last_ns).max();
        let lo_s = if query.from_ns.is_some() {
            lo
        } else {
            first.unwrap_or(0)
        } / 1_000_000_000;
        let hi_s = if query.to_ns.is_some() {
            hi.div_ceil(1_000_000_000)
        } else {
            last.unwrap_or(0) / 1_000_000_000 + 1
        };
        let s = series(&a.listing.flows, lo_s, hi_s.max(lo_s + 1), 120);
        Ok((s, a.listing.flows.len(), a.missing))
    };
    let (g, (s, n, missing)) = match g.blocking("timeline", true, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let mut b = window_form("/timeline", &w, "");
    for m in &missing {
        let _ = write!(b, "<p class=\"partial\">Partial answer: {}</p>", esc(m));
    }
    let _ = write!(
        b,
        "<p>{n} flows; bins of {} s. Drag across the chart to select a window, click a bar to \
         zoom into it. <a href=\"/sessions?{}\" data-testid=\"timeline-sessions\">Sessions of \
         this window</a></p>",
        s.step,
        esc(&w.query())
    );
    b.push_str(&chart(&s, &w));
    b.push_str("<ul class=\"legend\">");
    for (i, c) in s.classes.iter().enumerate() {
        let _ = write!(
            b,
            "<li><span class=\"swatch c{}\"></span>{}</li>",
            i.min(COLOURS.len() - 1),
            esc(&capsule_analytics::dscp_name(*c))
        );
    }
    b.push_str("</ul>");
    let r = html(
        StatusCode::OK,
        page("Timeline", Some(&nav), "view-timeline", &w, "", &b),
    );
    g.finish(r, "ok", None, n as u64)
}

/// `GET /status`: the capture and the store, refreshed every 5 seconds.
pub(super) async fn status(g: Guard, nav: Nav) -> Response<Body> {
    let store = g.server.store.clone();
    let work = move || {
        capsule_answers::status::answer(&store, &capsule_answers::status::Request::default())
            .map_err(|e| Failure::Server(format!("{e:#}")))
    };
    let (g, a) = match g.blocking("status", false, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let now = capsule_store::now_ns();
    let ago = |ns: u64| short_duration(now.saturating_sub(ns));
    let t = |ns: Option<u64>| ns.map_or("—".to_string(), capsule_query::format_instant);
    let mut b = String::from("<h1>Capture status</h1><dl class=\"status\">");
    let mut row = |k: &str, v: String| {
        let _ = write!(b, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(&v));
    };
    match &a.st {
        None => row("Capture", "none has run on this store".into()),
        Some(s) => {
            let state = if a.live {
                "running"
            } else if s.running {
                "not running (stopped without a clean exit)"
            } else {
                "stopped"
            };
            row("Capture", format!("{state}, pid {} on {}", s.pid, s.iface));
            if a.live {
                row(
                    "Live rates",
                    format!(
                        "{:.0} packets/s, {:.1} Mbit/s, {:.0} drops/s",
                        s.packets_per_s,
                        s.bits_per_s / 1e6,
                        s.drops_per_s
                    ),
                );
            }
            row(
                "Packets seen / stored",
                format!("{} / {}", s.seen, s.packets),
            );
            let causes = serde_json::to_value(&s.drop_causes)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .map(|o| {
                    o.iter()
                        .filter(|(_, v)| v.as_u64().is_some_and(|n| n > 0))
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            row(
                "Drops",
                if causes.is_empty() {
                    format!("{}", s.drops)
                } else {
                    format!("{} ({causes})", s.drops)
                },
            );
            row("Status written", format!("{} ago", ago(s.updated_ns)));
        }
    }
    row(
        "Store",
        format!(
            "{} segments, {} packets, {}",
            a.segs.len(),
            a.packets,
            short_bytes(a.bytes)
        ),
    );
    row("First packet", t(a.first));
    row(
        "Last packet (freshness)",
        match a.last {
            Some(l) => format!("{} ({} ago)", capsule_query::format_instant(l), ago(l)),
            None => "—".into(),
        },
    );
    row(
        "Disk budget",
        a.cp.budget.map_or("none set".into(), short_bytes),
    );
    row("Retention horizon", t(a.cp.horizon_now_ns));
    row(
        "Pending compaction",
        format!("{} to {}", short_bytes(a.cp.pending), a.cp.target),
    );
    for w in &a.warnings {
        row("Warning", w.clone());
    }
    b.push_str("</dl>");
    let _ = write!(
        b,
        "<p class=\"note\" data-testid=\"status-time\">As of {}; refreshes every 5 s.</p>",
        esc(&capsule_query::format_instant(now))
    );
    let r = html(
        StatusCode::OK,
        page(
            "Status",
            Some(&nav),
            "view-status",
            &Window::default(),
            "<meta http-equiv=\"refresh\" content=\"5\">",
            &b,
        ),
    );
    g.done(r, "ok")
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_index::sideindex::{CountsBucket, DscpCount, FlowCounts, FlowKey};

    fn flow(a: &str, dscp: u8, seconds: &[(u64, u64)]) -> FlowSummary {
        let key = FlowKey {
            vlans: [None, None],
            ip_version: 4,
            proto: 17,
            a: a.parse().unwrap(),
            b: "10.0.0.2".parse().unwrap(),
            ports: Some((1000, 2000)),
        };
        let mut f = FlowCounts::new(key, 0, 0);
        f.totals.dscp_counts[0] = vec![DscpCount {
            dscp,
            packets: 1,
            bytes: 1,
        }];
        f.buckets = seconds
            .iter()
            .map(|&(second, bytes)| CountsBucket {
                second,
                bytes: [bytes, 0],
                packets: [1, 0],
                ..Default::default()
            })
            .collect();
        FlowSummary {
            flow: f,
            approximate: false,
        }
    }

    #[test]
    fn the_series_stacks_bytes_by_class_in_bins_of_the_window() {
        let flows = [
            flow("10.0.0.1", 46, &[(100, 10), (101, 20), (150, 5)]),
            flow("10.0.0.3", 0, &[(100, 1000), (99, 7)]),
        ];
        // Seconds 100..104 in 2 bins of 2 s; second 99 and 150 are outside.
        let s = series(&flows, 100, 104, 2);
        assert_eq!(s.step, 2);
        assert_eq!(s.classes, vec![0, 46], "most bytes first");
        assert_eq!(s.bytes, vec![vec![1000, 30], vec![0, 0]]);
        assert_eq!(s.packets, vec![3, 0]);
    }

    #[test]
    fn sort_names_and_escapes() {
        assert_eq!(sort_of(Some("start")).unwrap(), flows::Sort::First);
        assert_eq!(
            sort_of(Some("retransmissions")).unwrap(),
            flows::Sort::Retransmissions
        );
        assert!(sort_of(Some("size"))
            .unwrap_err()
            .contains("found \"size\""));
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(enc("dscp ef&x=/"), "dscp%20ef%26x%3D%2F");
    }
}
