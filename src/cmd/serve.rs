//! `capsule serve`: the store over HTTPS to holders of a bearer token (docs/api.md).
//!
//! One tokio runtime; each connection is a TLS handshake (rustls) then HTTP/1.1 (hyper).
//! The answers are made by the same code as the CLI's: `GET /v1/packets` runs
//! `capsule_replay::export` on a blocking thread whose writer hands 64 KiB chunks to a
//! bounded channel (4 chunks) read by the response body, so a slow client slows the export
//! and a client that goes away ends it at its next chunk (the channel's receiver is
//! dropped). `GET /v1/flows` and `/v1/status` give the lines of `capsule flows --json` and
//! `capsule status --json`. The store is opened read-only for each request; the writer
//! lock is never taken, so a capture runs beside the server.
//!
//! Limits: queries (packets, flows) running at once in total and per user (429 over
//! them), bytes and time per export (413 before the answer starts, else the stream is cut
//! and the audit record says why). Every request, refused ones too, is one JSON line of the
//! audit log, fsynced.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body::Frame;
use hyper::{Request, Response, StatusCode};
use serde_json::json;
use tokio::sync::mpsc;

use crate::cli::{FlowSort, ServeArgs};
use crate::tokens::Tokens;

/// Bytes of one chunk of a packet export, and how many chunks wait for the client at most.
const CHUNK: usize = 64 * 1024;
const CHUNKS_QUEUED: usize = 4;

/// A response body: a whole buffer, or the chunks of an export as they come.
#[derive(Debug)]
enum Body {
    Full(Option<Bytes>),
    Stream {
        /// The chunk read before the response started.
        first: Option<Bytes>,
        rx: mpsc::Receiver<Msg>,
        /// Set by the export when it stops on a limit or a failure: the body ends at once
        /// with an error, without the chunks still queued.
        abort: Arc<AtomicBool>,
        /// Counts what the body hands the connection; its line is written when the body
        /// and the export are both done.
        audit: Arc<StreamAudit>,
    },
}

/// The audit line of a streamed answer. The export says how it ended, the body counts the
/// bytes it handed to the connection and whether it reached its end; the line is written
/// when the last of the two lets go (on drop), so a client that went away is recorded with
/// what it was given, not with what the export produced.
#[derive(Debug)]
struct StreamAudit {
    server: Arc<Server>,
    rec: Record,
    /// How the export ended: status, outcome, packets.
    end: Mutex<Option<(StatusCode, String, Option<u64>)>>,
    delivered: AtomicU64,
    /// The body was read to its end (its last chunk, or its trailers, handed over).
    finished: AtomicBool,
}

impl Drop for StreamAudit {
    fn drop(&mut self) {
        let end = self.end.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        let (mut status, mut outcome, packets) = end.unwrap_or((
            StatusCode::INTERNAL_SERVER_ERROR,
            "the export ended without saying how".into(),
            None,
        ));
        let bytes = self.delivered.load(Ordering::Acquire);
        let finished = self.finished.load(Ordering::Acquire);
        if status.is_success() && !finished && bytes > 0 {
            status = StatusCode::from_u16(499).expect("a valid code");
            outcome = format!("the client went away after {bytes} bytes");
        } else if !status.is_success() && bytes > 0 {
            outcome = format!("stopped after {bytes} bytes: {outcome}");
        }
        let r = self.rec.finish(status, &outcome, packets, bytes);
        self.server.audit.record(&r);
    }
}

/// What the export thread hands the response.
#[derive(Debug)]
enum Msg {
    Data(Bytes),
    /// The export failed or hit a limit: the HTTP status (when nothing was sent yet) and
    /// the message.
    Fail(StatusCode, String),
    /// The export ended partial: the trailers that say so (`capsule-partial`), sent to a
    /// client that asked for trailers (`TE: trailers`).
    Trailers(hyper::HeaderMap),
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream {
                first,
                rx,
                abort,
                audit,
            } => {
                if abort.load(Ordering::Acquire) {
                    return Poll::Ready(Some(Err(std::io::Error::other("the export stopped"))));
                }
                let data = |b: Bytes| {
                    audit.delivered.fetch_add(b.len() as u64, Ordering::AcqRel);
                    Ok(Frame::data(b))
                };
                if let Some(b) = first.take() {
                    return Poll::Ready(Some(data(b)));
                }
                rx.poll_recv(cx).map(|m| match m {
                    None => {
                        audit.finished.store(true, Ordering::Release);
                        None
                    }
                    Some(Msg::Data(b)) => Some(data(b)),
                    Some(Msg::Trailers(t)) => {
                        audit.finished.store(true, Ordering::Release);
                        Some(Ok(Frame::trailers(t)))
                    }
                    // Ending the body with an error makes hyper close the connection
                    // without the last chunk: the client sees a cut transfer, not a file
                    // that looks whole.
                    Some(Msg::Fail(_, why)) => Some(Err(std::io::Error::other(why))),
                })
            }
        }
    }
}

/// The append-only audit log.
#[derive(Debug)]
struct Audit {
    file: Option<Mutex<std::fs::File>>,
    path: Option<PathBuf>,
}

impl Audit {
    fn open(path: Option<&Path>) -> Result<Audit> {
        let file = match path {
            None => None,
            Some(p) => {
                use std::os::unix::fs::OpenOptionsExt;
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(p)
                    .with_context(|| format!("cannot open the audit log {}", p.display()))?;
                Some(Mutex::new(f))
            }
        };
        Ok(Audit {
            file,
            path: path.map(Path::to_path_buf),
        })
    }

    /// Appends `rec` as one line and fsyncs it. A failure is said on stderr (the answer
    /// has gone already).
    fn record(&self, rec: &serde_json::Value) {
        self.append(rec, true);
    }

    /// Appends `rec` without an fsync of its own (the next synced line, or the system,
    /// makes it durable): for requests that carried no valid token.
    fn record_unsynced(&self, rec: &serde_json::Value) {
        self.append(rec, false);
    }

    fn append(&self, rec: &serde_json::Value, sync: bool) {
        let Some(f) = &self.file else { return };
        let mut line = rec.to_string();
        line.push('\n');
        let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
        let written =
            f.write_all(line.as_bytes())
                .and_then(|()| if sync { f.sync_data() } else { Ok(()) });
        if let Err(e) = written {
            eprintln!(
                "capsule serve: error: cannot write the audit log {}: {e}",
                self.path.as_deref().unwrap_or(Path::new("?")).display()
            );
        }
    }
}

/// Queries running now: in total and per user.
#[derive(Debug, Default)]
struct Running {
    total: usize,
    per_user: HashMap<String, usize>,
}

/// The shared state of the server.
#[derive(Debug)]
struct Server {
    store: PathBuf,
    /// The config file whose groups and policy the analytics answers use (read at each
    /// request, so an edit applies to the next one).
    config: Option<PathBuf>,
    tokens: Tokens,
    audit: Audit,
    running: Mutex<Running>,
    max_queries: usize,
    max_queries_per_user: usize,
    max_bytes: u64,
    max_time: Duration,
}

/// A query's place under the concurrency limits, given back when dropped.
#[derive(Debug)]
struct Slot {
    server: Arc<Server>,
    user: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut r = self
            .server
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        r.total = r.total.saturating_sub(1);
        if let Some(n) = r.per_user.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                r.per_user.remove(&self.user);
            }
        }
    }
}

impl Server {
    fn acquire(self: &Arc<Self>, user: &str) -> Result<Slot, String> {
        let mut r = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mine = r.per_user.get(user).copied().unwrap_or(0);
        if mine >= self.max_queries_per_user {
            return Err(format!(
                "too many queries: {user} has {mine} running, the limit per user is {} \
                 (--max-queries-per-user); retry when one ends",
                self.max_queries_per_user
            ));
        }
        if r.total >= self.max_queries {
            return Err(format!(
                "too many queries: {} running, the limit is {} (--max-queries); retry when \
                 one ends",
                r.total, self.max_queries
            ));
        }
        r.total += 1;
        *r.per_user.entry(user.to_string()).or_insert(0) += 1;
        Ok(Slot {
            server: Arc::clone(self),
            user: user.to_string(),
        })
    }
}

/// What one request did, for the audit log.
#[derive(Debug)]
struct Record {
    started: SystemTime,
    t0: Instant,
    peer: SocketAddr,
    /// SHA-256 of the client certificate (mutual TLS).
    client_cert: Option<String>,
    method: String,
    endpoint: String,
    user: Option<String>,
    params: serde_json::Value,
}

/// The parameter names some endpoint takes: only their values are written to the audit
/// log as sent.
const KNOWN_PARAMS: &[&str] = &[
    "filter",
    "from",
    "to",
    "format",
    "width",
    "sort",
    "limit",
    "by",
    "key",
    "interval",
    "group",
    "ratio",
    "min-bytes",
];

/// The longest parameter value the audit log keeps whole, in bytes; a longer one is cut
/// and says how long it was.
const AUDIT_VALUE_MAX: usize = 4096;

/// Whether `v` holds what looks like a secret: a run of 32 or more hex digits (a capsule
/// token is 64).
fn looks_like_secret(v: &str) -> bool {
    let mut run = 0;
    for b in v.bytes() {
        run = if b.is_ascii_hexdigit() { run + 1 } else { 0 };
        if run >= 32 {
            return true;
        }
    }
    false
}

/// `text` with every run of 32 or more hex digits replaced by `(hidden: N hex digits)`:
/// an outcome may quote what the client sent (a bad filter names its text).
fn hide_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 32 {
            out.push_str(&format!("(hidden: {} hex digits)", run.len()));
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// The query parameters of a request as the audit log records them. A parameter no
/// endpoint takes (`token=...`, `access_token=...`: a client that put its secret in the
/// URL) and any value that looks like a token are written as `(not recorded: N bytes)`;
/// a long value is cut. The request itself is refused or answered as it would be.
fn audit_params(query: Option<&str>) -> serde_json::Value {
    let Some(q) = query else {
        return json!({});
    };
    let m: serde_json::Map<String, serde_json::Value> = q
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let k = url_decode(k).unwrap_or_else(|| k.to_string());
            let v = url_decode(v).unwrap_or_else(|| v.to_string());
            let v = if !KNOWN_PARAMS.contains(&k.as_str()) || looks_like_secret(&v) {
                format!("(not recorded: {} bytes)", v.len())
            } else if v.len() > AUDIT_VALUE_MAX {
                let mut end = AUDIT_VALUE_MAX;
                while !v.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}... (cut: {} bytes)", &v[..end], v.len())
            } else {
                v
            };
            let k = if k.len() > 64 || looks_like_secret(&k) {
                "(a long or secret-like name)".to_string()
            } else {
                k
            };
            (k, json!(v))
        })
        .collect();
    serde_json::Value::Object(m)
}

impl Record {
    /// What is kept of a request that carried no valid token: the endpoint cut to 128
    /// bytes and only the number and size of its parameters.
    fn bound_for_anonymous(&mut self) {
        if self.method.len() > 16 {
            self.method = format!("{}... (cut)", &self.method[..16]);
        }
        if self.endpoint.len() > 128 {
            let mut end = 128;
            while !self.endpoint.is_char_boundary(end) {
                end -= 1;
            }
            self.endpoint = format!("{}... (cut)", &self.endpoint[..end]);
        }
        if let Some(m) = self.params.as_object() {
            if !m.is_empty() {
                self.params = json!({ "(not recorded)": format!("{} parameter(s)", m.len()) });
            }
        }
    }

    fn finish(
        &self,
        status: StatusCode,
        outcome: &str,
        packets: Option<u64>,
        bytes: u64,
    ) -> serde_json::Value {
        json!({
            "time": humantime::format_rfc3339_micros(self.started).to_string(),
            "user": self.user,
            "peer": self.peer.to_string(),
            "client_cert_sha256": self.client_cert,
            "method": self.method,
            "endpoint": self.endpoint,
            "params": self.params,
            "status": status.as_u16(),
            "outcome": hide_secrets(outcome),
            "packets": packets,
            "bytes": bytes,
            "duration_s": self.t0.elapsed().as_secs_f64(),
        })
    }
}

fn json_response(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    let mut text = v.to_string();
    text.push('\n');
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::Full(Some(Bytes::from(text))))
        .expect("a valid response")
}

fn error_response(status: StatusCode, msg: &str) -> Response<Body> {
    let mut r = json_response(status, &json!({ "error": msg }));
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            "www-authenticate",
            hyper::header::HeaderValue::from_static("Bearer realm=\"capsule\""),
        );
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        r.headers_mut()
            .insert("retry-after", hyper::header::HeaderValue::from_static("1"));
    }
    r
}

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a space, `%XX` a
/// byte); `None` for a bad escape or bytes that are not UTF-8.
fn url_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let h = b.get(i + 1..i + 3)?;
                let h = std::str::from_utf8(h).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The query string as (name, value) pairs, refusing names not in `allowed` and repeats.
fn params(query: Option<&str>, allowed: &[&str]) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = url_decode(k).ok_or_else(|| format!("bad escape in parameter name {k:?}"))?;
        let v = url_decode(v).ok_or_else(|| format!("bad escape in the value of {k}"))?;
        if !allowed.contains(&k.as_str()) {
            return Err(format!(
                "unknown parameter {k:?}: this endpoint takes {}",
                allowed.join(", ")
            ));
        }
        if out.insert(k.clone(), v).is_some() {
            return Err(format!("parameter {k} given twice"));
        }
    }
    Ok(out)
}

/// The query of `filter`, `from` and `to` with the CLI's syntax and messages.
fn query_of(p: &HashMap<String, String>) -> Result<capsule_query::Query, String> {
    let now = capsule_store::now_ns();
    let from = p
        .get("from")
        .map(|s| capsule_query::parse_time(s, now))
        .transpose()
        .map_err(|e| format!("invalid value for from: {e}"))?;
    let to = p
        .get("to")
        .map(|s| capsule_query::TimeArg::parse_end(s, now))
        .transpose()
        .map_err(|e| format!("invalid value for to: {e}"))?;
    super::make_query(p.get("filter").map_or("", String::as_str), from, to)
        .map_err(|e| format!("{e:#}"))
}

/// The writer of a packet export: chunks into the channel, limits checked at each.
#[derive(Debug)]
struct ChunkWriter {
    tx: mpsc::Sender<Msg>,
    abort: Arc<AtomicBool>,
    buf: Vec<u8>,
    sent: u64,
    max_bytes: u64,
    deadline: Instant,
    max_time: Duration,
    /// Why the writer stopped the export, when it did.
    stopped: Option<(StatusCode, String)>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut all = Bytes::from(std::mem::take(&mut self.buf));
        // In pieces of at most CHUNK: what waits in the channel stays bounded.
        while !all.is_empty() {
            let chunk = all.split_to(all.len().min(CHUNK));
            let n = chunk.len() as u64;
            if self.tx.blocking_send(Msg::Data(chunk)).is_err() {
                self.stopped = Some((
                    StatusCode::from_u16(499).expect("a valid code"),
                    "the client went away".into(),
                ));
                return Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "the client went away",
                ));
            }
            self.sent += n;
        }
        Ok(())
    }

    fn check(&mut self, more: usize) -> std::io::Result<()> {
        let total = self.sent + self.buf.len() as u64 + more as u64;
        let why = if total > self.max_bytes {
            Some((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the answer is larger than the limit of {} bytes per query \
                     (--max-bytes-per-query): narrow the filter or the window",
                    self.max_bytes
                ),
            ))
        } else if Instant::now() > self.deadline {
            Some((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the query ran longer than the limit of {} (--max-query-time): narrow \
                     the filter or the window",
                    humantime::format_duration(self.max_time)
                ),
            ))
        } else {
            None
        };
        match why {
            None => Ok(()),
            Some(w) => {
                let msg = w.1.clone();
                self.stopped = Some(w);
                if self.sent > 0 {
                    self.abort.store(true, Ordering::Release);
                }
                Err(std::io::Error::other(msg))
            }
        }
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.check(data.len())?;
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs the export of `opts` on this (blocking) thread into `w`, then says how it ended to
/// `audit` (whose line is written once the response body is done too). `slot` is held until
/// the export ends.
fn export_thread(
    server: Arc<Server>,
    opts: capsule_replay::ExportOptions,
    mut w: ChunkWriter,
    audit: Arc<StreamAudit>,
    slot: Slot,
) {
    let result = capsule_store::Store::open(&server.store)
        .map_err(capsule_replay::ExportError::from)
        .and_then(|store| capsule_replay::export(&store, &opts, &mut w));
    let (status, outcome, packets) = match result {
        Ok(report) => match w.send() {
            Ok(()) => {
                let note = report.partial_note();
                if let Some(note) = &note {
                    // In-band for a streaming client: a trailer after the last chunk (pcapng
                    // answers also end with the note as a section comment).
                    let mut t = hyper::HeaderMap::new();
                    if let Ok(v) = hyper::header::HeaderValue::from_str(&header_text(note)) {
                        t.insert(super::PARTIAL_HEADER, v);
                    }
                    let _ = w.tx.blocking_send(Msg::Trailers(t));
                }
                (
                    StatusCode::OK,
                    match note {
                        Some(n) => format!("partial: {n}"),
                        None => "ok".to_string(),
                    },
                    Some(report.packets),
                )
            }
            Err(_) => {
                let (s, m) = w.stopped.clone().expect("send failures say why");
                (s, m, None)
            }
        },
        Err(e) => {
            let (s, m) = match w.stopped.clone() {
                Some(why) => why,
                None if matches!(
                    e,
                    capsule_replay::ExportError::MixedLinkTypes(_)
                        | capsule_replay::ExportError::Bpf { .. }
                        | capsule_replay::ExportError::BpfTooLong { .. }
                ) =>
                {
                    (StatusCode::BAD_REQUEST, format!("{e}"))
                }
                None => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("{:#}", anyhow::Error::from(e)),
                ),
            };
            if s.as_u16() != 499 {
                if w.sent > 0 {
                    w.abort.store(true, Ordering::Release);
                }
                // Nothing sent yet: the response is this error; else the stream is cut.
                let _ = w.tx.blocking_send(Msg::Fail(s, m.clone()));
            }
            (s, m, None)
        }
    };
    drop(slot);
    *audit.end.lock().unwrap_or_else(|p| p.into_inner()) = Some((status, outcome, packets));
}

/// `text` as an HTTP header value: printable ASCII, anything else as `?`.
fn header_text(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

async fn handle(
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
    };
    let path = req.uri().path().to_string();
    let done = |rec: &Record, resp: Response<Body>, outcome: &str| {
        let r = rec.finish(resp.status(), outcome, None, 0);
        tokio::task::block_in_place(|| server.audit.record(&r));
        resp
    };
    // A request without a valid token writes a bounded line, not fsynced on its own: an
    // anonymous peer can neither grow the log by what it sends nor make it sync per request.
    let refused = |rec: &mut Record, resp: Response<Body>, outcome: &str| {
        rec.bound_for_anonymous();
        let r = rec.finish(resp.status(), outcome, None, 0);
        tokio::task::block_in_place(|| server.audit.record_unsynced(&r));
        resp
    };
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
            done(&rec, r, "ok")
        }
        "/v1/status" => {
            if let Err(e) = params(q, &[]) {
                return done(&rec, error_response(StatusCode::BAD_REQUEST, &e), &e);
            }
            let store = server.store.clone();
            let v = tokio::task::spawn_blocking(move || {
                super::status::json(&store, capsule_store::writer::Level::Zstd(1), None)
            })
            .await;
            match v {
                Ok(Ok(v)) => done(&rec, json_response(StatusCode::OK, &v), "ok"),
                Ok(Err(e)) => {
                    let m = format!("{e:#}");
                    done(
                        &rec,
                        error_response(StatusCode::INTERNAL_SERVER_ERROR, &m),
                        &m,
                    )
                }
                Err(e) => {
                    let m = format!("the status task failed: {e}");
                    done(
                        &rec,
                        error_response(StatusCode::INTERNAL_SERVER_ERROR, &m),
                        &m,
                    )
                }
            }
        }
        "/v1/flows" => flows(server.clone(), q, rec, &user).await,
        "/v1/top" | "/v1/tcp" | "/v1/dscp" | "/v1/matrix" | "/v1/stragglers" | "/v1/alerts" => {
            let command = path.trim_start_matches("/v1/").to_string();
            analytics(server.clone(), &command, q, rec, &user).await
        }
        "/v1/packets" => packets(server.clone(), q, rec, &user).await,
        _ => {
            let r = error_response(
                StatusCode::NOT_FOUND,
                &format!(
                    "no such endpoint {path}: the API has /healthz, /metrics, /v1/status, \
                     /v1/flows, /v1/packets, /v1/top, /v1/tcp, /v1/dscp, /v1/matrix, \
                     /v1/stragglers and /v1/alerts (docs/api.md)"
                ),
            );
            done(&rec, r, "not found")
        }
    }
}

async fn flows(server: Arc<Server>, q: Option<&str>, rec: Record, user: &str) -> Response<Body> {
    let done = |resp: Response<Body>, outcome: &str| {
        let r = rec.finish(resp.status(), outcome, None, 0);
        tokio::task::block_in_place(|| server.audit.record(&r));
        resp
    };
    let parsed = params(q, &["filter", "from", "to", "sort", "limit"]).and_then(|p| {
        let query = query_of(&p)?;
        let sort = match p.get("sort").map(String::as_str) {
            None | Some("bytes") => FlowSort::Bytes,
            Some("packets") => FlowSort::Packets,
            Some("first") => FlowSort::First,
            Some(other) => {
                return Err(format!(
                    "invalid value for sort: expected bytes, packets or first, found {other:?}"
                ))
            }
        };
        let limit = match p.get("limit") {
            None => 50,
            Some(l) => l.parse::<usize>().map_err(|_| {
                format!("invalid value for limit: expected a whole number, found {l:?}")
            })?,
        };
        Ok((query, sort, limit))
    });
    let (query, sort, limit) = match parsed {
        Ok(x) => x,
        Err(e) => return done(error_response(StatusCode::BAD_REQUEST, &e), &e),
    };
    let slot = match server.acquire(user) {
        Ok(s) => s,
        Err(e) => return done(error_response(StatusCode::TOO_MANY_REQUESTS, &e), &e),
    };
    let store = server.store.clone();
    let answer = tokio::task::spawn_blocking(move || -> Result<(String, u64, Vec<String>)> {
        let _slot = slot;
        let store = capsule_store::Store::open(&store)?;
        let (segments, unreadable) = store.open_segments_checked()?;
        let listing = super::flows::list(&store, &segments, &query, sort)?;
        let missing = super::flows::missing(&listing, &unreadable, &query);
        let mut out = String::new();
        let mut n = 0;
        for s in listing.flows.iter().take(limit) {
            out.push_str(&super::flows::json_line(s).to_string());
            out.push('\n');
            n += 1;
        }
        Ok((out, n, missing))
    })
    .await;
    match answer {
        Ok(Ok((text, n, missing))) => {
            let len = text.len() as u64;
            let mut resp = Response::builder().header("content-type", "application/x-ndjson");
            if !missing.is_empty() {
                resp = resp.header(super::PARTIAL_HEADER, "true");
            }
            let resp = resp
                .body(Body::Full(Some(Bytes::from(text))))
                .expect("a valid response");
            let outcome = if missing.is_empty() {
                "ok".to_string()
            } else {
                format!("partial: {}", missing.join("; "))
            };
            let r = rec.finish(StatusCode::OK, &outcome, Some(n), len);
            tokio::task::block_in_place(|| server.audit.record(&r));
            resp
        }
        Ok(Err(e)) => {
            let m = format!("{e:#}");
            done(error_response(StatusCode::INTERNAL_SERVER_ERROR, &m), &m)
        }
        Err(e) => {
            let m = format!("the flows task failed: {e}");
            done(error_response(StatusCode::INTERNAL_SERVER_ERROR, &m), &m)
        }
    }
}

/// The parameters of each analytics endpoint besides `filter`, `from`, `to`, `format` and
/// `width`: the command's own flags, named as on the command line without `--`.
const ANALYTICS_FLAGS: &[(&str, &[&str])] = &[
    ("top", &["by", "key", "limit"]),
    ("tcp", &["interval"]),
    ("dscp", &[]),
    ("matrix", &["by"]),
    ("stragglers", &["group", "interval", "ratio", "min-bytes"]),
    ("alerts", &[]),
];

/// The command line that asks the local command for the answer `p` asks for: the server's
/// store and config, each parameter as its `--flag=value` (so a value can never become
/// another flag), the filter after `--`. The CLI's own parser then checks every value.
fn analytics_argv(
    server: &Server,
    command: &str,
    flags: &[&str],
    p: &HashMap<String, String>,
) -> Result<Vec<String>, String> {
    let needs_config = matches!(command, "matrix" | "stragglers" | "alerts")
        || (command == "top" && p.get("key").map(String::as_str) == Some("group"));
    if needs_config && server.config.is_none() {
        return Err(format!(
            "/v1/{command}{} needs host groups: this server has no config (capsule serve \
             --config FILE)",
            if command == "top" { "?key=group" } else { "" }
        ));
    }
    let mut argv = vec![
        "capsule".to_string(),
        command.to_string(),
        format!("--store={}", server.store.display()),
    ];
    if let Some(c) = &server.config {
        argv.push(format!("--config={}", c.display()));
    }
    for name in ["from", "to"].iter().chain(flags) {
        if let Some(v) = p.get(*name) {
            argv.push(format!("--{name}={v}"));
        }
    }
    match p.get("format").map(String::as_str) {
        None | Some("json") => argv.push("--json".into()),
        Some("text") => {}
        Some(other) => {
            return Err(format!(
                "invalid value for format: expected json or text, found {other:?}"
            ))
        }
    }
    argv.push("--".into());
    if let Some(f) = p.get("filter").filter(|f| !f.trim().is_empty()) {
        argv.push(f.clone());
    }
    Ok(argv)
}

/// The server's config file no longer loads.
#[derive(Debug, thiserror::Error)]
#[error(
    "the server's config file is not valid (the last start checked it; it was edited since): {0}"
)]
struct ServerConfig(String);

/// clap's complaint about an analytics parameter, naming the parameter.
fn clap_message(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let why = first.strip_prefix("error: ").unwrap_or(first).to_string();
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    match arg {
        Some(a) if e.kind() == clap::error::ErrorKind::MissingRequiredArgument => {
            let name = a
                .trim_start_matches("--")
                .split([' ', '=', '<'])
                .next()
                .unwrap_or_default()
                .to_string();
            format!("missing parameter {name}: this endpoint needs it")
        }
        Some(a) => {
            let name = a
                .trim_start_matches("--")
                .split([' ', '=', '<'])
                .next()
                .unwrap_or_default()
                .to_string();
            let name = if name.is_empty() || name.starts_with('[') {
                "filter".to_string()
            } else {
                name
            };
            format!("invalid value for {name}: {why}")
        }
        None => why,
    }
}

/// `GET /v1/{top,tcp,dscp,matrix,stragglers,alerts}`: the analytics command's answer, from
/// the same code as the CLI's, as its `--json` document (`format=json`, the default) or its
/// text wrapped to `width` columns (`format=text`; what `--server` prints).
async fn analytics(
    server: Arc<Server>,
    command: &str,
    q: Option<&str>,
    rec: Record,
    user: &str,
) -> Response<Body> {
    let done = |resp: Response<Body>, outcome: &str| {
        let r = rec.finish(resp.status(), outcome, None, 0);
        tokio::task::block_in_place(|| server.audit.record(&r));
        resp
    };
    let flags = ANALYTICS_FLAGS
        .iter()
        .find(|(c, _)| *c == command)
        .map_or(&[][..], |(_, f)| *f);
    let mut allowed = vec!["filter", "from", "to", "format", "width"];
    allowed.extend_from_slice(flags);
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
        let json = !matches!(p.get("format").map(String::as_str), Some("text"));
        // The filter and the window with query's messages first (`bad filter:` and its
        // caret), then the command's own flags through its parser.
        query_of(&p)?;
        let argv = analytics_argv(&server, command, flags, &p)?;
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(&argv)
            .map_err(|e| clap_message(&e))?;
        Ok((cli, width, json))
    });
    let (cli, width, json) = match parsed {
        Ok(x) => x,
        Err(e) => return done(error_response(StatusCode::BAD_REQUEST, &e), &e),
    };
    let slot = match server.acquire(user) {
        Ok(s) => s,
        Err(e) => return done(error_response(StatusCode::TOO_MANY_REQUESTS, &e), &e),
    };
    let config = server.config.clone();
    let task = tokio::task::spawn_blocking(move || -> Result<super::Rendered> {
        // Held until the answer is made, even past a time limit already answered.
        let _slot = slot;
        // A config edited into something invalid is the server's fault (500), not the
        // client's, though the CLI calls it a usage error.
        if let Some(c) = &config {
            super::config::load(c).map_err(|e| ServerConfig(format!("{e:#}")))?;
        }
        use crate::cli::Cmd;
        match cli.cmd {
            Cmd::Top(a) => super::top::render(&a, width),
            Cmd::Tcp(a) => super::tcp::render(&a, width),
            Cmd::Dscp(a) => super::dscp::render(&a, width),
            Cmd::Matrix(a) => super::matrix::render(&a, width),
            Cmd::Stragglers(a) => super::stragglers::render(&a, width),
            Cmd::Alerts(a) => super::alerts::render(&a, width),
            _ => anyhow::bail!("not an analytics command"),
        }
    });
    let answer = match tokio::time::timeout(server.max_time, task).await {
        Ok(a) => a,
        Err(_) => {
            let m = format!(
                "the query ran longer than the limit of {} (--max-query-time): narrow the \
                 filter or the window",
                humantime::format_duration(server.max_time)
            );
            return done(error_response(StatusCode::PAYLOAD_TOO_LARGE, &m), &m);
        }
    };
    match answer {
        Ok(Ok(r)) => {
            let len = r.text.len() as u64;
            if len > server.max_bytes {
                let m = format!(
                    "the answer is larger than the limit of {} bytes per query \
                     (--max-bytes-per-query): narrow the filter or the window",
                    server.max_bytes
                );
                return done(error_response(StatusCode::PAYLOAD_TOO_LARGE, &m), &m);
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
                resp = resp.header(super::PARTIAL_HEADER, "true");
            }
            let resp = resp
                .body(Body::Full(Some(Bytes::from(r.text))))
                .expect("a valid response");
            let outcome = if partial {
                "partial: flows are missing (an index missing, stale or damaged)"
            } else {
                "ok"
            };
            let rec2 = rec.finish(StatusCode::OK, outcome, None, len);
            tokio::task::block_in_place(|| server.audit.record(&rec2));
            resp
        }
        Ok(Err(e)) => {
            let m = format!("{e:#}");
            let status = if e.is::<ServerConfig>() {
                StatusCode::INTERNAL_SERVER_ERROR
            } else if e.is::<super::Usage>() {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            done(error_response(status, &m), &m)
        }
        Err(e) => {
            let m = format!("the {command} task failed: {e}");
            done(error_response(StatusCode::INTERNAL_SERVER_ERROR, &m), &m)
        }
    }
}

async fn packets(server: Arc<Server>, q: Option<&str>, rec: Record, user: &str) -> Response<Body> {
    let done = |resp: Response<Body>, outcome: &str| {
        let r = rec.finish(resp.status(), outcome, None, 0);
        tokio::task::block_in_place(|| server.audit.record(&r));
        resp
    };
    let parsed = params(q, &["filter", "from", "to", "format"]).and_then(|p| {
        let query = query_of(&p)?;
        let format = match p.get("format").map(String::as_str) {
            None | Some("pcap") => capsule_replay::Format::Pcap,
            Some("pcapng") => capsule_replay::Format::PcapNg,
            Some(other) => {
                return Err(format!(
                    "invalid value for format: expected pcap or pcapng, found {other:?}"
                ))
            }
        };
        Ok((query, format))
    });
    let (query, format) = match parsed {
        Ok(x) => x,
        Err(e) => return done(error_response(StatusCode::BAD_REQUEST, &e), &e),
    };
    let slot = match server.acquire(user) {
        Ok(s) => s,
        Err(e) => return done(error_response(StatusCode::TOO_MANY_REQUESTS, &e), &e),
    };
    let opts = capsule_replay::ExportOptions {
        format,
        query,
        ..Default::default()
    };
    let (tx, mut rx) = mpsc::channel(CHUNKS_QUEUED);
    let abort = Arc::new(AtomicBool::new(false));
    let w = ChunkWriter {
        tx,
        abort: abort.clone(),
        buf: Vec::with_capacity(CHUNK),
        sent: 0,
        max_bytes: server.max_bytes,
        deadline: Instant::now() + server.max_time,
        max_time: server.max_time,
        stopped: None,
    };
    let audit = Arc::new(StreamAudit {
        server: server.clone(),
        rec,
        end: Mutex::new(None),
        delivered: AtomicU64::new(0),
        finished: AtomicBool::new(false),
    });
    let (s2, a2) = (server.clone(), audit.clone());
    tokio::task::spawn_blocking(move || export_thread(s2, opts, w, a2, slot));
    // The status waits for the first chunk (or the failure before it): an error found
    // before any byte is an error response, not a cut file.
    let (ctype, name) = match format {
        capsule_replay::Format::Pcap => ("application/vnd.tcpdump.pcap", "capsule.pcap"),
        capsule_replay::Format::PcapNg => ("application/x-pcapng", "capsule.pcapng"),
    };
    match rx.recv().await {
        Some(Msg::Data(first)) => Response::builder()
            .header("content-type", ctype)
            // Declared, as HTTP/1.1 asks, so a partial answer can say so at its end.
            .header(hyper::header::TRAILER, super::PARTIAL_HEADER)
            .header(
                "content-disposition",
                format!("attachment; filename=\"{name}\""),
            )
            .body(Body::Stream {
                first: Some(first),
                rx,
                abort,
                audit,
            })
            .expect("a valid response"),
        Some(Msg::Fail(status, msg)) => error_response(status, &msg),
        Some(Msg::Trailers(_)) | None => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the export ended without an answer",
        ),
    }
}

/// Modification time and length of each file, to tell when one changed.
type Stamps = Vec<Option<(SystemTime, u64)>>;

/// The TLS identity and client policy, rebuilt when one of its files changes.
#[derive(Debug)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
    crls: Vec<PathBuf>,
}

impl TlsFiles {
    fn stamps(&self) -> Stamps {
        std::iter::once(&self.cert)
            .chain(std::iter::once(&self.key))
            .chain(self.client_ca.iter())
            .chain(self.crls.iter())
            .map(|p| {
                let m = std::fs::metadata(p).ok()?;
                Some((m.modified().ok()?, m.len()))
            })
            .collect()
    }

    fn build(&self) -> Result<tokio_rustls::rustls::ServerConfig> {
        tls_config(&self.cert, &self.key, self.client_ca.as_deref(), &self.crls)
    }
}

/// The TLS config in force, and the files' stamps it was built from.
#[derive(Debug)]
struct Tls {
    files: TlsFiles,
    current: Mutex<(Stamps, Arc<tokio_rustls::rustls::ServerConfig>)>,
}

impl Tls {
    /// The config for a new connection: rebuilt first if a file changed; a file that
    /// became invalid keeps the last good config (said on stderr).
    fn config(&self) -> Arc<tokio_rustls::rustls::ServerConfig> {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.files.stamps();
        if now != cur.0 {
            match self.files.build() {
                Ok(c) => *cur = (now, Arc::new(c)),
                Err(e) => {
                    eprintln!(
                        "capsule serve: warning: keeping the TLS settings read before: {e:#}"
                    );
                    cur.0 = now;
                }
            }
        }
        cur.1.clone()
    }
}

fn pem_certs(path: &Path) -> Result<Vec<rustls_pki_types::CertificateDer<'static>>> {
    use rustls_pki_types::pem::PemObject;
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
        .with_context(|| format!("cannot read the certificates {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: expected PEM certificates", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!(
            "{}: expected at least one PEM certificate, found none",
            path.display()
        );
    }
    Ok(certs)
}

fn tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    crls: &[PathBuf],
) -> Result<tokio_rustls::rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read the certificate {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: expected PEM certificates", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!(
            "{}: expected at least one PEM certificate, found none",
            cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("{}: expected a PEM private key", key.display()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("the TLS protocol versions")?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = tokio_rustls::rustls::RootCertStore::empty();
            for c in pem_certs(ca)? {
                roots
                    .add(c)
                    .with_context(|| format!("{}: a CA certificate is not valid", ca.display()))?;
            }
            let mut lists = Vec::new();
            for p in crls {
                let l = rustls_pki_types::CertificateRevocationListDer::pem_file_iter(p)
                    .with_context(|| format!("cannot read the CRL {}", p.display()))?
                    .collect::<Result<Vec<_>, _>>()
                    .with_context(|| format!("{}: expected PEM CRLs", p.display()))?;
                if l.is_empty() {
                    anyhow::bail!("{}: expected a PEM CRL, found none", p.display());
                }
                lists.extend(l);
            }
            let v = tokio_rustls::rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .with_crls(lists)
            .build()
            .context("the client CA and CRLs do not make a verifier")?;
            builder.with_client_cert_verifier(v)
        }
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .context("the certificate and the key do not make a TLS identity")?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

pub fn run(a: &ServeArgs) -> Result<ExitCode> {
    // Checked at start: a store that does not open is an error now, not at the first pull.
    capsule_store::Store::open(&a.store)?;
    let files = TlsFiles {
        cert: a.cert.clone(),
        key: a.key.clone(),
        client_ca: a.client_ca.clone(),
        crls: a.crl.clone(),
    };
    let first = Arc::new(files.build()?);
    let tls = Arc::new(Tls {
        current: Mutex::new((files.stamps(), first)),
        files,
    });
    if let Some(c) = &a.config {
        // A config that does not load is an error now, not at the first answer.
        super::config::load(c)?;
    }
    let server = Arc::new(Server {
        store: a.store.clone(),
        config: a.config.clone(),
        tokens: Tokens::open(&a.tokens)?,
        audit: Audit::open(a.audit_log.as_deref())?,
        running: Mutex::new(Running::default()),
        max_queries: a.max_queries.max(1),
        max_queries_per_user: a.max_queries_per_user.max(1),
        max_bytes: a.max_bytes_per_query,
        max_time: a.max_query_time,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("capsule-serve")
        .build()
        .context("cannot start the server's runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&a.listen)
            .await
            .with_context(|| format!("cannot listen on {}", a.listen))?;
        let bound = listener.local_addr()?;
        eprintln!("capsule serve: listening on https://{bound}");
        // Under systemd (Type=notify, dist/capsule-serve.service): ready once the port is
        // bound. Without NOTIFY_SOCKET this does nothing.
        let _ = sd_notify::notify(
            false,
            &[
                sd_notify::NotifyState::Ready,
                sd_notify::NotifyState::Status(&format!("serving on https://{bound}")),
            ],
        );
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("capsule serve: warning: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
            let server = server.clone();
            tokio::spawn(async move {
                let tls =
                    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
                    {
                        Ok(Ok(s)) => s,
                        // Plain HTTP, a bad client hello, or a client that said nothing.
                        Ok(Err(e)) => {
                            let r = json!({
                                "time": humantime::format_rfc3339_micros(SystemTime::now())
                                    .to_string(),
                                "user": null, "peer": peer.to_string(), "endpoint": null,
                                "status": null,
                                "outcome": format!("TLS handshake failed: {e}"),
                                "packets": null, "bytes": 0,
                            });
                            tokio::task::block_in_place(|| server.audit.record(&r));
                            return;
                        }
                        Err(_) => return,
                    };
                let client_cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| {
                    use sha2::Digest;
                    sha2::Sha256::digest(c.as_ref())
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                });
                let svc = hyper::service::service_fn(move |req| {
                    let server = server.clone();
                    let cc = client_cert.clone();
                    async move { Ok::<_, std::convert::Infallible>(handle(server, peer, cc, req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .header_read_timeout(Duration::from_secs(30))
                    .timer(hyper_util::rt::TokioTimer::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc);
                if let Err(e) = conn.await {
                    tracing::info!("connection from {peer}: {e}");
                }
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_components_decode_and_bad_escapes_are_refused() {
        assert_eq!(url_decode("host+10.0.0.1").unwrap(), "host 10.0.0.1");
        assert_eq!(url_decode("a%20b%2Bc").unwrap(), "a b+c");
        assert_eq!(url_decode("%"), None);
        assert_eq!(url_decode("%zz"), None);
        assert_eq!(url_decode("%ff"), None);
        assert_eq!(url_decode("%e2%82%ac").unwrap(), "\u{20ac}");
    }

    #[test]
    fn parameters_not_taken_are_refused() {
        let p = params(Some("filter=tcp&from=-1m"), &["filter", "from"]).unwrap();
        assert_eq!(p["filter"], "tcp");
        let e = params(Some("fliter=tcp"), &["filter"]).unwrap_err();
        assert!(e.contains("unknown parameter"), "{e}");
        let e = params(Some("filter=a&filter=b"), &["filter"]).unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn a_bad_filter_gives_the_cli_message() {
        let p = params(Some("filter=host+nope"), &["filter"]).unwrap();
        let e = query_of(&p).unwrap_err();
        assert!(e.starts_with("bad filter:"), "{e}");
    }
}
