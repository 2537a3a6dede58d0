//! The routes of `capsule serve`: authentication, then each endpoint's parameters turned
//! into a typed request of capsule-answers and its answer into a response. Every step
//! around the answer (the audit line, 400, 429, the blocking thread and its time limit) is
//! the [`Guard`]'s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use super::audit::{audit_params, Record};
use super::body::{error_response, json_response, Body};
use super::guard::{Failure, Guard};
use super::params::{params, query_of};
use super::Server;
use crate::output::PARTIAL_HEADER;
use capsule_answers::analytics::{self, Kind, Question};
use capsule_answers::{flows, Source};

pub(super) async fn handle(
    server: Arc<Server>,
    peer: SocketAddr,
    client_cert: Option<String>,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let mut rec = Record {
        started: SystemTime::now(),
        t0: Instant::now(),
        peer,
        client_cert,
        method: req.method().to_string(),
        endpoint: req.uri().path().to_string(),
        user: None,
        params: audit_params(req.uri().query()),
        tier: server.tier.clone().map(capsule_tier::Remote::new),
    };
    let path = req.uri().path().to_string();
    // A request without a valid token writes a bounded line, not fsynced on its own: an
    // anonymous peer can neither grow the log by what it sends nor make it sync per request.
    let refused = |rec: &mut Record, resp: Response<Body>, outcome: &str| {
        rec.bound_for_anonymous();
        let r = rec.finish(resp.status(), outcome, None, 0);
        tokio::task::block_in_place(|| server.audit.record_unsynced(&r));
        resp
    };
    if super::console::owns(&path) {
        // The web console: its own sign-in (a session cookie), sign-out and forms.
        return super::console::handle(server, rec, req).await;
    }
    if req.method() != hyper::Method::GET {
        let r = error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET is served (docs/api.md)",
        );
        return refused(&mut rec, r, "method not allowed");
    }
    if path == "/healthz" {
        // No authentication and no audit line: load balancers poll it.
        return json_response(StatusCode::OK, &json!({"status": "ok"}));
    }
    // Everything else needs a token.
    let token = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let user = match token {
        None => {
            let r = error_response(
                StatusCode::UNAUTHORIZED,
                "authentication required: send `Authorization: Bearer TOKEN` (capsule token add)",
            );
            return refused(&mut rec, r, "unauthorized: no bearer token");
        }
        Some(t) => match tokio::task::block_in_place(|| server.tokens.check(t)) {
            crate::tokens::Auth::User(u) => u,
            crate::tokens::Auth::Expired(u) => {
                // The same answer as an unknown token; the audit log says whose it was.
                let r = error_response(StatusCode::UNAUTHORIZED, "the bearer token is not valid");
                rec.user = Some(u);
                return refused(&mut rec, r, "unauthorized: expired token");
            }
            crate::tokens::Auth::Unknown => {
                let r = error_response(StatusCode::UNAUTHORIZED, "the bearer token is not valid");
                return refused(&mut rec, r, "unauthorized: unknown token (or revoked)");
            }
        },
    };
    rec.user = Some(user.clone());
    let q = req.uri().query();
    let g = Guard {
        server: server.clone(),
        rec,
        user,
    };
    match path.as_str() {
        "/metrics" => {
            let store = server.store.clone();
            let text = tokio::task::spawn_blocking(move || crate::metrics::render(&store))
                .await
                .unwrap_or_default();
            let r = Response::builder()
                .header(
                    "content-type",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )
                .body(Body::Full(Some(Bytes::from(text))))
                .expect("a valid response");
            g.done(r, "ok")
        }
        "/v1/status" => status(g, q).await,
        "/v1/flows" => flows(g, q).await,
        "/v1/packets" => super::stream::packets(g, q).await,
        "/v1/count" => super::survey::count(g, q).await,
        "/v1/plan" => super::survey::plan(g, q).await,
        "/v1/segments" => super::survey::segments(g, q).await,
        p => match p.strip_prefix("/v1/").and_then(Kind::by_name) {
            Some(kind) => {
                let host = req
                    .headers()
                    .get(hyper::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_string);
                analytics(g, kind, q, host).await
            }
            None => {
                let m = format!(
                    "no such endpoint {path}: the API has /healthz, /metrics, /v1/status, \
                     /v1/segments, /v1/flows, /v1/packets, /v1/count, /v1/plan, /v1/top, \
                     /v1/tcp, /v1/dscp, /v1/matrix, /v1/stragglers and /v1/alerts \
                     (docs/api.md)"
                );
                g.done(error_response(StatusCode::NOT_FOUND, &m), "not found")
            }
        },
    }
}

/// `GET /v1/status`: the document of `capsule status --json`.
async fn status(g: Guard, q: Option<&str>) -> Response<Body> {
    if let Err(e) = params(q, &[]) {
        return g.refuse(StatusCode::BAD_REQUEST, &e);
    }
    let store = g.server.store.clone();
    let work = move || {
        capsule_answers::status::answer(&store, &capsule_answers::status::Request::default())
            .map(|a| a.to_json())
            .map_err(|e| Failure::Server(format!("{e:#}")))
    };
    match g.blocking("status", false, work).await {
        Ok((g, mut v)) => {
            crate::output::with_times(&mut v);
            g.done(json_response(StatusCode::OK, &v), "ok")
        }
        Err(resp) => resp,
    }
}

/// `GET /v1/flows`: the lines of `capsule flows --json`.
async fn flows(g: Guard, q: Option<&str>) -> Response<Body> {
    let parsed = params(q, &["filter", "from", "to", "sort", "limit"]).and_then(|p| {
        let query = query_of(&p)?;
        let sort = match p.get("sort") {
            None => flows::Sort::Bytes,
            Some(s) => flows::Sort::by_name(s).ok_or_else(|| {
                format!(
                    "invalid value for sort: expected bytes, packets, first, duration or \
                     retransmissions, found {s:?}"
                )
            })?,
        };
        let limit = match p.get("limit") {
            None => 50,
            Some(l) => l.parse::<usize>().map_err(|_| {
                format!("invalid value for limit: expected a whole number, found {l:?}")
            })?,
        };
        Ok(flows::Request {
            query,
            sort,
            limit: Some(limit),
        })
    });
    let request = match parsed {
        Ok(r) => r,
        Err(e) => return g.refuse(StatusCode::BAD_REQUEST, &e),
    };
    let source = g.source();
    let work = move || {
        let answer =
            flows::answer(&source, &request).map_err(|e| Failure::Server(format!("{e:#}")))?;
        let mut out = String::new();
        for s in &answer.listing.flows {
            out.push_str(&flows::json_line(s).to_string());
            out.push('\n');
        }
        Ok((out, answer.listing.flows.len() as u64, answer.missing))
    };
    let (g, (text, n, missing)) = match g.blocking("flows", false, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let len = text.len() as u64;
    let mut resp = Response::builder().header("content-type", "application/x-ndjson");
    if !missing.is_empty() {
        resp = resp.header(PARTIAL_HEADER, "true");
    }
    let resp = resp
        .body(Body::Full(Some(Bytes::from(text))))
        .expect("a valid response");
    let outcome = if missing.is_empty() {
        "ok".to_string()
    } else {
        format!("partial: {}", missing.join("; "))
    };
    g.finish(resp, &outcome, Some(n), len)
}

/// `GET /v1/{top,tcp,dscp,matrix,stragglers,alerts}`: the analytics answer, from the same
/// code as the CLI's, as its `--json` document (`format=json`, the default) or its text
/// wrapped to `width` columns (`format=text`; what `--server` prints). The parameters are
/// decoded by capsule_answers::params, the codec the CLI's `--server` encodes with.
/// The text's commands name the store as `store-as` says (the client's own `--server`
/// options), else as `--server https://HOST --token-file TOKEN_FILE`: never by the
/// server's path, which the reader cannot use.
async fn analytics(g: Guard, kind: Kind, q: Option<&str>, host: Option<String>) -> Response<Body> {
    let mut allowed = vec!["filter", "from", "to", "format", "width", "store-as"];
    allowed.extend_from_slice(kind.param_names());
    let parsed = params(q, &allowed).and_then(|p| {
        let width = match p.get("width") {
            None => None,
            Some(w) => Some(
                w.parse::<usize>()
                    .ok()
                    .filter(|w| (20..=10_000).contains(w))
                    .ok_or_else(|| {
                        format!(
                            "invalid value for width: expected a number of columns from 20 \
                             to 10000, found {w:?}"
                        )
                    })?,
            ),
        };
        let json = match p.get("format").map(String::as_str) {
            None | Some("json") => true,
            Some("text") => false,
            Some(other) => {
                return Err(format!(
                    "invalid value for format: expected json or text, found {other:?}"
                ))
            }
        };
        // The filter and the window with query's messages first (`bad filter:` and its
        // caret), then the question's own parameters.
        let query = query_of(&p)?;
        let question = Question::from_params(kind, &|n| p.get(n).cloned())?;
        let place = match p.get("store-as") {
            Some(s) if s.len() > 4096 || s.chars().any(char::is_control) => {
                return Err(
                    "invalid value for store-as: expected at most 4096 printable characters".into(),
                )
            }
            Some(s) => s.clone(),
            None => format!(
                "--server https://{} --token-file TOKEN_FILE",
                host.as_deref().unwrap_or("HOST")
            ),
        };
        Ok((analytics::Request { query, question }, width, json, place))
    });
    let (request, width, json, place) = match parsed {
        Ok(x) => x,
        Err(e) => return g.refuse(StatusCode::BAD_REQUEST, &e),
    };
    if let (Some(what), None) = (request.question.needs_config(), &g.server.config) {
        let m = format!(
            "/v1/{}{} needs host groups: this server has no config (capsule serve --config \
             FILE)",
            kind.name(),
            if what.contains("group") {
                "?key=group"
            } else {
                ""
            }
        );
        return g.refuse(StatusCode::BAD_REQUEST, &m);
    }
    let (source, server) = (g.source(), g.server.clone());
    let work = move || {
        let source = Source {
            config: server.load_config()?,
            ..source
        };
        let answer = analytics::answer(&source, &request).map_err(Failure::of)?;
        let place = crate::render::Place(Some(&place));
        Ok(crate::render::analytics(&answer, json, place, width))
    };
    let (g, r) = match g.blocking(kind.name(), true, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let len = r.text.len() as u64;
    if len > g.server.max_bytes {
        let m = format!(
            "the answer is larger than the limit of {} bytes per query \
             (--max-bytes-per-query): narrow the filter or the window",
            g.server.max_bytes
        );
        return g.refuse(StatusCode::PAYLOAD_TOO_LARGE, &m);
    }
    let mut resp = Response::builder().header(
        "content-type",
        if json {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        },
    );
    let partial = r.partial();
    if partial {
        resp = resp.header(PARTIAL_HEADER, "true");
    }
    let resp = resp
        .body(Body::Full(Some(Bytes::from(r.text))))
        .expect("a valid response");
    let outcome = if partial {
        "partial: flows are missing (an index missing, stale or damaged)"
    } else {
        "ok"
    };
    g.finish(resp, outcome, None, len)
}
