//! What every console page shares: the frame (the header with the views' links and the
//! sign-out form, the view's root carrying its `data-testid`), the sign-in page, the window
//! form, a bad window or filter shown with the CLI's message, and the links that download a
//! finding's packets with the `capsule query` line that exports them. Each view is a URL
//! holding its window and filter, so it can be bookmarked and shared; the views' own
//! modules (sessions, timeline, analytics, alerts, status) render their bodies.

use std::collections::HashMap;
use std::fmt::Write as _;

use hyper::{Response, StatusCode};

use super::super::body::Body;
use super::super::guard::Guard;
use super::super::params::{params, query_of};
use super::html;
use capsule_analytics::Export;

/// What the page header shows of the session: its user, its sign-out token, the host the
/// browser named (for the `--server` of the command lines shown).
#[derive(Debug)]
pub(super) struct Nav {
    pub(super) user: String,
    pub(super) csrf: String,
    pub(super) host: String,
}

impl Nav {
    /// How the command lines a page shows name the store: this server, with a token file.
    pub(super) fn place(&self) -> String {
        format!("--server https://{} --token-file TOKEN_FILE", self.host)
    }
}

/// The window and filter as the URL gives them (text, as typed).
#[derive(Debug, Default, Clone)]
pub(super) struct Window {
    pub(super) from: String,
    pub(super) to: String,
    pub(super) filter: String,
}

impl Window {
    pub(super) fn of(p: &HashMap<String, String>) -> Window {
        let g = |k: &str| p.get(k).cloned().unwrap_or_default();
        Window {
            from: g("from"),
            to: g("to"),
            filter: g("filter"),
        }
    }

    /// The window of an export: its instants (RFC 3339) and its whole filter.
    pub(super) fn of_export(e: &Export) -> Window {
        Window {
            from: capsule_query::format_instant(e.from_ns),
            to: capsule_query::format_instant(e.to_ns),
            filter: e.filter_text(),
        }
    }

    fn pairs(&self) -> [(&'static str, &String); 3] {
        [
            ("from", &self.from),
            ("to", &self.to),
            ("filter", &self.filter),
        ]
    }

    /// The query string carrying the window and filter (the non-empty ones).
    pub(super) fn query(&self) -> String {
        self.pairs()
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}={}", enc(v)))
            .collect::<Vec<_>>()
            .join("&")
    }

    /// `path` with the window and filter, then `extra` parameters.
    pub(super) fn url(&self, path: &str, extra: &[(&str, &str)]) -> String {
        let mut q = self.query();
        for (k, v) in extra {
            if !q.is_empty() {
                q.push('&');
            }
            let _ = write!(q, "{k}={}", enc(v));
        }
        if q.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{q}")
        }
    }

    /// As a map for [`query_of`] (the non-empty ones).
    pub(super) fn map(&self) -> HashMap<String, String> {
        self.pairs()
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }
}

/// `s` escaped for HTML text and attribute values.
pub(super) fn esc(s: &str) -> String {
    crate::report::esc(s)
}

/// `s` percent-encoded as one URL query component (the one encoder of the client's URLs).
pub(super) use crate::client::encode as enc;

/// The views, in the order of the header's links: path, name, the root's `data-testid`.
const VIEWS: [(&str, &str, &str); 5] = [
    ("/timeline", "Timeline", "view-timeline"),
    ("/sessions", "Sessions", "view-sessions"),
    ("/analytics", "Analytics", "view-analytics"),
    ("/alerts", "Alerts", "view-alerts"),
    ("/status", "Status", "view-status"),
];

/// A whole page: the header with the views' links (keeping the window and filter) and the
/// sign-out form, then `body` inside the view's root (`data-testid` = `view`).
pub(super) fn page(
    title: &str,
    nav: Option<&Nav>,
    view: &str,
    w: &Window,
    head: &str,
    body: &str,
) -> String {
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
        let _ = write!(s, "<header><strong>capsule</strong><nav>");
        for (path, name, id) in VIEWS {
            let cur = if id == view { " class=\"current\"" } else { "" };
            let _ = write!(
                s,
                "<a href=\"{}\" data-testid=\"nav-{}\"{cur}>{name}</a>",
                esc(&w.url(path, &[])),
                &path[1..]
            );
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

/// The window form every view has: from, to, filter; `extra` (hidden inputs) keeps the
/// view's own parameters.
pub(super) fn window_form(action: &str, w: &Window, extra: &str) -> String {
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
pub(super) fn bad_input(
    g: Guard,
    nav: &Nav,
    view: &str,
    action: &str,
    w: &Window,
    e: &str,
) -> Response<Body> {
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

/// Ends a view's request with its page (200), the audit line saying what the answer misses
/// (`partial: ...`) and the page's size.
pub(super) fn respond(g: Guard, page: String, missing: &[String]) -> Response<Body> {
    let outcome = if missing.is_empty() {
        "ok".to_string()
    } else {
        format!("partial: {}", missing.join("; "))
    };
    let len = page.len() as u64;
    g.finish(html(StatusCode::OK, page), &outcome, None, len)
}

/// A view's URL, read: its parameters, the window and filter as typed, the query they make,
/// and what the view makes of its own parameters.
pub(super) struct Asked<T> {
    pub(super) p: HashMap<String, String>,
    pub(super) w: Window,
    pub(super) query: capsule_query::Query,
    pub(super) own: T,
}

/// Reads a view's URL: the window and filter, and `own` (the view's own parameter names)
/// made into a value by `own_of`, each with the CLI's messages. A mistake is given with the
/// window to show it under ([`bad_input`]).
pub(super) fn asked<T>(
    q: Option<&str>,
    own: &[&str],
    own_of: impl FnOnce(&HashMap<String, String>) -> Result<T, String>,
) -> Result<Asked<T>, (Window, String)> {
    let allowed: Vec<&str> = ["from", "to", "filter"]
        .iter()
        .chain(own)
        .copied()
        .collect();
    let p = params(q, &allowed).map_err(|e| (Window::default(), e))?;
    let w = Window::of(&p);
    let parsed = query_of(&w.map()).and_then(|query| Ok((query, own_of(&p)?)));
    match parsed {
        Ok((query, own)) => Ok(Asked { p, w, query, own }),
        Err(e) => Err((w, e)),
    }
}

/// A banner for each reason an answer misses data (empty: none).
pub(super) fn partial(missing: &[String]) -> String {
    missing
        .iter()
        .map(|m| {
            format!(
                "<p class=\"partial\" data-testid=\"partial\">Partial answer: {}</p>",
                esc(m)
            )
        })
        .collect()
}

/// The `/download` URL of the packets of a window and filter, as pcapng.
pub(super) fn download_url(w: &Window) -> String {
    w.url("/download", &[("format", "pcapng")])
}

/// The links of a finding's packets: the pcapng download, the sessions view of its window
/// and filter, and the `capsule query` line exporting them (to copy) for the store as
/// `place` names it.
pub(super) fn export_links(e: &Export, place: &str) -> String {
    let w = Window::of_export(e);
    format!(
        "<a href=\"{}\" download data-testid=\"evidence\">pcapng</a> \
         <a href=\"{}\">sessions</a> <details><summary>capsule query</summary>\
         <code>{}</code> <button type=\"button\" class=\"copy\">Copy</button></details>",
        esc(&download_url(&w)),
        esc(&w.url("/sessions", &[])),
        esc(&e.command("-w packets.pcapng --format pcapng", place)),
    )
}

/// An instant to the millisecond, its nanoseconds on hover.
pub(super) fn at(ns: u64) -> String {
    format!(
        "<time title=\"{}\">{}</time>",
        esc(&capsule_query::format_instant(ns)),
        esc(&crate::render::ms(ns))
    )
}

/// A table of `rows` (cells already HTML) under `headers` (text); `numeric` columns are
/// right-aligned.
pub(super) fn table(
    testid: &str,
    headers: &[&str],
    numeric: &[usize],
    rows: &[Vec<String>],
) -> String {
    let mut s = format!("<table data-testid=\"{testid}\"><thead><tr>");
    for h in headers {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s.push_str("</tr></thead><tbody>");
    for r in rows {
        s.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let class = if numeric.contains(&i) {
                " class=\"n\""
            } else {
                ""
            };
            let _ = write!(s, "<td{class}>{c}</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_the_window_and_escape() {
        let w = Window {
            from: "2026-11-30T02:00:00Z".into(),
            to: String::new(),
            filter: "dscp ef&x=/".into(),
        };
        assert_eq!(
            w.url("/sessions", &[("sort", "bytes")]),
            "/sessions?from=2026-11-30T02%3A00%3A00Z&filter=dscp%20ef%26x%3D%2F&sort=bytes"
        );
        assert_eq!(Window::default().url("/timeline", &[]), "/timeline");
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
