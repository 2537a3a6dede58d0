//! The sessions view (`/sessions`): the flows of a window and filter from the side index,
//! sorted, a page at a time, each with its packets and the `capsule query` line; the
//! selection (the whole window and filter) as one pcapng, its size counted beforehand
//! (`/selection`, asked by the page's script) and its download's progress shown.

use std::collections::HashMap;
use std::fmt::Write as _;

use hyper::{Response, StatusCode};

use super::super::body::{json_response, Body};
use super::super::guard::{Failure, Guard};
use super::super::params::{params, query_of};
use super::pages::{
    asked, bad_input, download_url, esc, page, partial, respond, window_form, Asked, Nav, Window,
};
use capsule_answers::{export, flows};
use capsule_index::flows::FlowSummary;

/// Flows on one page of the sessions view.
const PAGE: usize = 50;

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

/// The page's number from the URL (1 without one).
fn page_of(p: Option<&String>) -> Result<usize, String> {
    match p {
        None => Ok(1),
        Some(n) => n.parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
            format!("invalid value for page: expected a number from 1, found {n:?}")
        }),
    }
}

/// `GET /sessions`: the flows of the window and filter, sorted, a page at a time.
pub(super) async fn sessions(g: Guard, nav: Nav, q: Option<&str>) -> Response<Body> {
    let (view, action) = ("view-sessions", "/sessions");
    let own = |p: &HashMap<String, String>| {
        Ok((
            sort_of(p.get("sort").map(String::as_str))?,
            page_of(p.get("page"))?,
        ))
    };
    let Asked {
        w,
        query,
        own: (sort, page_no),
        ..
    } = match asked(q, &["sort", "page"], own) {
        Ok(a) => a,
        Err((w, e)) => return bad_input(g, &nav, view, action, &w, &e),
    };
    let source = g.source();
    let (want_from, want_to) = ((page_no - 1) * PAGE, page_no * PAGE);
    let request = flows::Request {
        query: query.clone(),
        sort,
        limit: None,
    };
    // The whole listing stays on the server: only the page's rows leave this closure.
    let work = move || {
        let a = flows::answer(&source, &request).map_err(|e| Failure::Server(format!("{e:#}")))?;
        let total = a.listing.flows.len();
        let pages = total.div_ceil(PAGE).max(1);
        let (lo, hi) = if want_from < total {
            (want_from, want_to.min(total))
        } else {
            ((pages - 1) * PAGE, total)
        };
        let shown: Vec<FlowSummary> = a.listing.flows[lo..hi].to_vec();
        Ok((shown, total, a.missing))
    };
    let (g, (shown, total, missing)) = match g.blocking("flows", true, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let pages = total.div_ceil(PAGE).max(1);
    let page_no = page_no.min(pages);
    let sort_name = match sort {
        flows::Sort::First => "start",
        s => s.name(),
    };
    let place = nav.place();
    let mut b = window_form(
        action,
        &w,
        &format!("<input type=\"hidden\" name=\"sort\" value=\"{sort_name}\">"),
    );
    b.push_str(&partial(
        &missing
            .iter()
            .map(|m| format!("{m} (flows are missing)"))
            .collect::<Vec<_>>(),
    ));
    b.push_str(&selection(&w, &query, &place, total));
    // The table, its headers sorting.
    let link = |sort: &str, page: usize| {
        w.url("/sessions", &[("sort", sort), ("page", &page.to_string())])
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
    for f in &shown {
        let t = &f.flow.totals;
        let k = &f.flow.key;
        let e = flow_export(f, &query);
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td>\
             <td><a href=\"{}\" download>pcapng</a> <details><summary>capsule query</summary>\
             <code>{}</code> <button type=\"button\" class=\"copy\">Copy</button></details></td></tr>",
            esc(&capsule_query::format_instant(t.first_ns)),
            crate::units::format_duration_ns(t.last_ns.saturating_sub(t.first_ns)),
            capsule_wire::IpProto::from(k.proto)
                .name()
                .map_or_else(|| k.proto.to_string(), str::to_string),
            esc(&end(k.a, k.ports.map(|p| p.0))),
            esc(&end(k.b, k.ports.map(|p| p.1))),
            t.total_packets(),
            crate::units::format_bytes(t.total_bytes()),
            t.retransmissions[0] + t.retransmissions[1],
            esc(&dscps(f)),
            esc(&download_url(&Window::of_export(&e))),
            esc(&e.command("-w flow.pcapng --format pcapng", &place)),
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
    respond(g, page("Sessions", Some(&nav), view, &w, "", &b), &missing)
}

/// The selection's section: its download (the script counts its size first, then shows
/// the download's progress) and its `capsule query` line.
fn selection(w: &Window, query: &capsule_query::Query, place: &str, total: usize) -> String {
    format!(
        "<section class=\"selection\"><p>{total} flows in the window. \
         <a href=\"{}\" data-testid=\"download-pcap\" download=\"capsule-selection.pcapng\" \
         data-size-url=\"{}\">Download the selection (pcapng)</a> \
         <span data-testid=\"download-size\" class=\"size\">size: counting…</span> \
         <progress data-testid=\"download-progress\" max=\"1\" value=\"0\" hidden></progress> \
         <span data-testid=\"download-status\" class=\"size\"></span></p>\
         <p class=\"cmd\"><code>{}</code> \
         <button type=\"button\" class=\"copy\">Copy</button></p></section>",
        esc(&download_url(w)),
        esc(&w.url("/selection", &[])),
        esc(&selection_command(w, query, place)),
    )
}

/// The `capsule query` command line of the selection: the window as the URL gives it (a
/// relative time stays relative), else the store's whole span.
fn selection_command(w: &Window, query: &capsule_query::Query, place: &str) -> String {
    let mut cmd = format!("capsule query -w selection.pcapng --format pcapng {place}");
    if query.from_ns.is_some() {
        let _ = write!(cmd, " --from {}", capsule_analytics::shell_quote(&w.from));
    }
    if query.to_ns.is_some() {
        let _ = write!(cmd, " --to {}", capsule_analytics::shell_quote(&w.to));
    }
    let f = query.filter.to_string();
    if !f.is_empty() {
        let _ = write!(cmd, " {}", capsule_analytics::shell_quote(&f));
    }
    cmd
}

/// `GET /selection`: what the selection's download will hold, counted from the stored
/// packets before it starts: packets, their captured bytes, the pcapng file's exact size,
/// whether that is over this server's per-query limit, and why it is partial if it is.
pub(super) async fn size(g: Guard, q: Option<&str>) -> Response<Body> {
    let parsed = params(q, &["from", "to", "filter"]).and_then(|p| query_of(&p));
    let query = match parsed {
        Ok(q) => q,
        Err(e) => return g.refuse(StatusCode::BAD_REQUEST, &e),
    };
    let source = g.source();
    let request = export::Request {
        format: capsule_replay::Format::PcapNg,
        ..export::Request::of(query)
    };
    let work = move || export::size(&source, &request).map_err(Failure::of);
    let (g, s) = match g.blocking("selection", true, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let limit = g.server.max_bytes;
    let doc = serde_json::json!({
        "packets": s.report.packets,
        "captured_bytes": s.report.captured_bytes,
        "file_bytes": s.file_bytes,
        "file": crate::units::format_bytes(s.file_bytes),
        "over_limit": s.file_bytes > limit,
        "limit_bytes": limit,
        "partial": s.report.partial_note(),
    });
    let packets = s.report.packets;
    g.finish(json_response(StatusCode::OK, &doc), "ok", Some(packets), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_names_and_pages() {
        assert_eq!(sort_of(Some("start")).unwrap(), flows::Sort::First);
        assert_eq!(
            sort_of(Some("retransmissions")).unwrap(),
            flows::Sort::Retransmissions
        );
        assert!(sort_of(Some("size"))
            .unwrap_err()
            .contains("found \"size\""));
        assert_eq!(page_of(None).unwrap(), 1);
        assert_eq!(page_of(Some(&"3".to_string())).unwrap(), 3);
        assert!(page_of(Some(&"0".to_string())).is_err());
    }
}
