//! The answers about the store that carry no packets, each the document the CLI prints
//! from: `GET /v1/count` (`query --count`), `GET /v1/plan` (`query --explain`) and
//! `GET /v1/segments` (`segments`). The client reads them back into their types
//! (capsule_answers::export::Count, PlanShown, segments::Answer) and prints them as the local
//! command does.

use hyper::{Response, StatusCode};

use super::body::{json_response, Body};
use super::guard::{Failure, Guard};
use super::params::{params, query_of};
use super::stream::header_text;
use crate::output::PARTIAL_HEADER;
use capsule_answers::{export, segments};

/// The export request of `filter`, `from`, `to` and (for a count) `format`.
fn export_request(q: Option<&str>, with_format: bool) -> Result<export::Request, String> {
    let allowed: &[&str] = if with_format {
        &["filter", "from", "to", "format", "segments", "bpf"]
    } else {
        &["filter", "from", "to"]
    };
    let p = params(q, allowed)?;
    let query = query_of(&p)?;
    // A count writes nothing: pcapng by default, as `query --count` (it holds every link
    // type a store may mix).
    let format = match p.get("format").map(String::as_str) {
        None | Some("pcapng") => capsule_replay::Format::PcapNg,
        Some("pcap") => capsule_replay::Format::Pcap,
        Some(other) => {
            return Err(format!(
                "invalid value for format: expected pcap or pcapng, found {other:?}"
            ))
        }
    };
    Ok(export::Request {
        format,
        segments: super::params::segments_of(&p)?,
        bpf: super::params::bpf_of(&p),
        ..export::Request::of(query)
    })
}

/// `GET /v1/count`: the document of `capsule query --count --json`; a partial count says
/// so in the `capsule-partial` header, as a pull does in its trailer.
pub(super) async fn count(g: Guard, q: Option<&str>) -> Response<Body> {
    let request = match export_request(q, true) {
        Ok(r) => r,
        Err(e) => return g.refuse(StatusCode::BAD_REQUEST, &e),
    };
    let source = g.source();
    let work = move || {
        if let Some(expr) = &request.bpf {
            super::guard::check_bpf(expr)?;
        }
        let c = export::counted(&source, &request).map_err(Failure::of)?;
        Ok((c.count, c.report.partial_note()))
    };
    let (g, (mut count, note)) = match g.blocking("count", true, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    // What this request fetched from the object store, as `query --count --json` says.
    count.tier_fetched_bytes = g
        .rec
        .tier
        .as_ref()
        .map_or(0, capsule_tier::Remote::fetched_bytes);
    let mut v = serde_json::to_value(&count).expect("a count is JSON");
    crate::output::with_times(&mut v);
    let mut resp = json_response(StatusCode::OK, &v);
    if let Some(n) = &note {
        if let Ok(h) = hyper::header::HeaderValue::from_str(&header_text(n)) {
            resp.headers_mut().insert(PARTIAL_HEADER, h);
        }
    }
    let outcome = note.map_or("ok".to_string(), |n| format!("partial: {n}"));
    g.finish(resp, &outcome, Some(count.packets), 0)
}

/// `GET /v1/plan`: the document of `capsule query --explain --json`.
pub(super) async fn plan(g: Guard, q: Option<&str>) -> Response<Body> {
    let request = match export_request(q, false) {
        Ok(r) => r,
        Err(e) => return g.refuse(StatusCode::BAD_REQUEST, &e),
    };
    let source = g.source();
    let work = move || {
        let plan = export::plan(&source, &request).map_err(Failure::of)?;
        Ok(export::plan_json(&plan))
    };
    match g.blocking("plan", true, work).await {
        Ok((g, v)) => g.done(json_response(StatusCode::OK, &v), "ok"),
        Err(resp) => resp,
    }
}

/// `GET /v1/segments`: `{"segments": [...], "unreadable": [...]}`, each segment the line
/// of `capsule segments --json`.
pub(super) async fn segments(g: Guard, q: Option<&str>) -> Response<Body> {
    if let Err(e) = params(q, &[]) {
        return g.refuse(StatusCode::BAD_REQUEST, &e);
    }
    let source = g.source();
    let work = move || {
        let a = segments::answer(&source).map_err(Failure::of)?;
        let mut v = serde_json::to_value(&a).map_err(|e| Failure::Server(e.to_string()))?;
        crate::output::with_times(&mut v);
        Ok(v)
    };
    match g.blocking("segments", false, work).await {
        Ok((g, v)) => g.done(json_response(StatusCode::OK, &v), "ok"),
        Err(resp) => resp,
    }
}
