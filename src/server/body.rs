//! Response bodies: a whole buffer, or the chunks of a streamed export with the audit line
//! written when it ends; and the JSON and error responses every route gives.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use bytes::Bytes;
use http_body::Frame;
use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::sync::mpsc;

use super::audit::Record;
use super::Server;

/// A response body: a whole buffer, or the chunks of an export as they come.
#[derive(Debug)]
pub(super) enum Body {
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
pub(super) struct StreamAudit {
    pub(super) server: Arc<Server>,
    pub(super) rec: Record,
    /// How the export ended: status, outcome, packets.
    pub(super) end: Mutex<Option<(StatusCode, String, Option<u64>)>>,
    pub(super) delivered: AtomicU64,
    /// The body was read to its end (its last chunk, or its trailers, handed over).
    pub(super) finished: AtomicBool,
    /// The connection's socket counts, when the route knew them.
    pub(super) conn: Option<Arc<super::conn::ConnIo>>,
}

impl Drop for StreamAudit {
    fn drop(&mut self) {
        let end = self.end.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        let (mut status, mut outcome, packets) = end.unwrap_or((
            StatusCode::INTERNAL_SERVER_ERROR,
            "the export ended without saying how".into(),
            None,
        ));
        let mut bytes = self.delivered.load(Ordering::Acquire);
        let finished = self.finished.load(Ordering::Acquire);
        let went_away = !finished && bytes > 0 && (status.is_success() || status.as_u16() == 499);
        if went_away {
            // What the socket took and the client's TCP never acknowledged did not reach
            // it (counted in TLS records, a little more than the body bytes they carry).
            let lost = self.conn.as_ref().and_then(|c| c.unreceived()).unwrap_or(0);
            bytes = bytes.saturating_sub(lost);
            status = StatusCode::from_u16(499).expect("a valid code");
            outcome = format!("the client went away after {bytes} bytes");
            if lost > 0 {
                outcome.push_str(&format!(
                    " ({lost} more were in its socket, never acknowledged)"
                ));
            }
        } else if !status.is_success() && bytes > 0 {
            outcome = format!("stopped after {bytes} bytes: {outcome}");
        }
        let r = self.rec.finish(status, &outcome, packets, bytes);
        self.server.audit.record(&r);
    }
}

/// What the export thread hands the response.
#[derive(Debug)]
pub(super) enum Msg {
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

pub(super) fn json_response(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    let mut text = v.to_string();
    text.push('\n');
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::Full(Some(Bytes::from(text))))
        .expect("a valid response")
}

pub(super) fn error_response(status: StatusCode, msg: &str) -> Response<Body> {
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
