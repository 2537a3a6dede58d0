//! `GET /v1/packets`: a packet export streamed as it is made. The export runs on a blocking
//! thread whose writer hands 64 KiB chunks to a bounded channel (4 chunks) read by the
//! response body, so a slow client slows the export and a client that goes away ends it at
//! its next chunk. Limits of bytes and time are checked at each chunk; a partial export
//! says so in a trailer. Its audit line is written when both the export and the body are
//! done, with the bytes the client was given.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::{Response, StatusCode};
use tokio::sync::mpsc;

use super::body::{error_response, Body, Msg, StreamAudit};
use super::guard::Guard;
use super::params::{params, query_of};
use super::Slot;
use crate::output::PARTIAL_HEADER;

/// Bytes of one chunk of a packet export, and how many chunks wait for the client at most.
pub(super) const CHUNK: usize = 64 * 1024;
pub(super) const CHUNKS_QUEUED: usize = 4;

/// The writer of a packet export: chunks into the channel, limits checked at each.
#[derive(Debug)]
pub(super) struct ChunkWriter {
    pub(super) tx: mpsc::Sender<Msg>,
    pub(super) abort: Arc<AtomicBool>,
    pub(super) buf: Vec<u8>,
    pub(super) sent: u64,
    pub(super) max_bytes: u64,
    pub(super) deadline: Instant,
    pub(super) max_time: Duration,
    /// Why the writer stopped the export, when it did.
    pub(super) stopped: Option<(StatusCode, String)>,
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

/// Runs the export of `request` on this (blocking) thread into `w`, then says how it ended to
/// `audit` (whose line is written once the response body is done too). `slot` is held until
/// the export ends.
pub(super) fn export_thread(
    source: capsule_answers::Source,
    request: capsule_answers::export::Request,
    mut w: ChunkWriter,
    audit: Arc<StreamAudit>,
    slot: Slot,
) {
    // A `bpf` expression is checked in the guard's child first: refused, it is the answer
    // (nothing was sent yet).
    if let Some(Err(f)) = request.bpf.as_deref().map(super::guard::check_bpf) {
        let (s, m) = match f {
            super::guard::Failure::Asker(m) => (StatusCode::BAD_REQUEST, m),
            super::guard::Failure::Server(m) => (StatusCode::INTERNAL_SERVER_ERROR, m),
        };
        let _ = w.tx.blocking_send(Msg::Fail(s, m.clone()));
        drop(slot);
        *audit.end.lock().unwrap_or_else(|p| p.into_inner()) = Some((s, m, None));
        return;
    }
    let result = capsule_answers::export::stream(&source, &request, &mut w);
    let (status, outcome, packets) = match result {
        Ok(report) => match w.send() {
            Ok(()) => {
                let note = report.partial_note();
                if let Some(note) = &note {
                    // In-band for a streaming client: a trailer after the last chunk (pcapng
                    // answers also end with the note as a section comment).
                    let mut t = hyper::HeaderMap::new();
                    if let Ok(v) = hyper::header::HeaderValue::from_str(&header_text(note)) {
                        t.insert(PARTIAL_HEADER, v);
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
                None if e.is_usage() => (StatusCode::BAD_REQUEST, format!("{e}")),
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
pub(super) fn header_text(text: &str) -> String {
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

/// `GET /v1/packets`: the packets of a window and filter as pcap or pcapng, streamed.
pub(super) async fn packets(g: Guard, q: Option<&str>) -> Response<Body> {
    let parsed = params(q, &["filter", "from", "to", "format", "segments", "bpf"]).and_then(|p| {
        let query = query_of(&p)?;
        let segments = super::params::segments_of(&p)?;
        let bpf = super::params::bpf_of(&p);
        let format = match p.get("format").map(String::as_str) {
            None | Some("pcap") => capsule_replay::Format::Pcap,
            Some("pcapng") => capsule_replay::Format::PcapNg,
            Some(other) => {
                return Err(format!(
                    "invalid value for format: expected pcap or pcapng, found {other:?}"
                ))
            }
        };
        Ok((query, format, segments, bpf))
    });
    let (query, format, segments, bpf) = match parsed {
        Ok(x) => x,
        Err(e) => return g.refuse(StatusCode::BAD_REQUEST, &e),
    };
    let slot = match g.server.acquire(&g.user) {
        Ok(s) => s,
        Err(e) => return g.refuse(StatusCode::TOO_MANY_REQUESTS, &e),
    };
    let source = g.source();
    let Guard { server, rec, .. } = g;
    let request = capsule_answers::export::Request {
        format,
        segments,
        bpf,
        ..capsule_answers::export::Request::of(query)
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
        conn: super::conn::CONN.try_with(Arc::clone).ok(),
    });
    let a2 = audit.clone();
    tokio::task::spawn_blocking(move || export_thread(source, request, w, a2, slot));
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
            .header(hyper::header::TRAILER, PARTIAL_HEADER)
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
