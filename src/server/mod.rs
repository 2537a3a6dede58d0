//! `capsule serve`: the store over HTTPS to holders of a bearer token (docs/api.md).
//!
//! One tokio runtime; each connection is a TLS handshake (rustls) then HTTP/1.1 (hyper).
//! Every answer is capsule-answers', as the CLI's: `routes.rs` authenticates, decodes the
//! parameters into a typed request (the analytics questions with the same codec the CLI's
//! `--server` encodes with) and turns the answer into a response; `guard.rs` does what
//! every handler needs around it (the audit line, 400, 429, the blocking thread and its
//! time limit). `GET /v1/packets` (`stream.rs`) runs the export on a blocking thread whose
//! writer hands 64 KiB chunks to a bounded channel (4 chunks) read by the response body, so
//! a slow client slows the export and a client that goes away ends it at its next chunk.
//! `GET /v1/flows` and `/v1/status` give the lines of `capsule flows --json` and `capsule
//! status --json`; `survey.rs` the documents of `query --count`/`--explain` and `segments`
//! (`/v1/count`, `/v1/plan`, `/v1/segments`). The store is opened read-only for each request; the writer lock is never
//! taken, so a capture runs beside the server.
//!
//! Limits: queries (packets, flows) running at once in total and per user (429 over
//! them), bytes and time per export (413 before the answer starts, else the stream is cut
//! and the audit record says why). Every request, refused ones too, is one JSON line of the
//! audit log, fsynced.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use serde_json::json;

use crate::cli::ServeArgs;
use crate::tokens::Tokens;

mod audit;
mod body;
mod conn;
mod console;
mod guard;
mod params;
mod routes;
mod stream;
mod survey;
mod tls;

use audit::Audit;
use tls::{Tls, TlsFiles};

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
    /// The web console's signed-in sessions.
    console: console::Sessions,
    /// The object store of `[tier]` in the config (read at start): each request reads the
    /// segments trimmed after upload through a reader of its own over this client.
    tier: Option<Arc<capsule_tier::Client>>,
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
    /// The config file's groups, policy and rules, read now (an edit applies to the next
    /// answer); `None` when the server has none. A file edited into something invalid is
    /// the server's fault (500), not the asker's, though the CLI calls it a usage error.
    fn load_config(&self) -> Result<Option<capsule_config::Config>, guard::Failure> {
        match &self.config {
            None => Ok(None),
            Some(c) => crate::request::load_config(c).map(Some).map_err(|e| {
                guard::Failure::Server(format!(
                    "the server's config file is not valid (the last start checked it; it \
                     was edited since): {e:#}"
                ))
            }),
        }
    }

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
    // With a [fleet] section, the store is published every few seconds (a capture beside
    // it may publish it too: the store's publish lock takes them one at a time).
    // A config that does not load is an error now, not at the first answer.
    let config = crate::request::config_of(a.config.as_deref())?;
    let tier = crate::tier::client_of(config.as_ref())?;
    let _publisher = match config {
        // Through a reader of its own, so the requests' fetched bytes are theirs alone.
        Some(c) => crate::publisher::Publisher::start(
            &a.store,
            c,
            tier.clone().map(|t| capsule_tier::Remote::new(t).tier()),
        ),
        None => None,
    };
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
        console: console::Sessions::default(),
        tier,
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
            // Counted at the socket: what the client's TCP acknowledged is what a cut
            // stream's audit line says it was given.
            let tcp = conn::Counted::new(tcp);
            let io = tcp.io();
            tokio::spawn(conn::CONN.scope(io, async move {
                let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp))
                    .await
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
                let client_cert = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| {
                        use sha2::Digest;
                        sha2::Sha256::digest(c.as_ref())
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<String>()
                    });
                let svc = hyper::service::service_fn(move |req| {
                    let server = server.clone();
                    let cc = client_cert.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            routes::handle(server, peer, cc, req).await,
                        )
                    }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .header_read_timeout(Duration::from_secs(30))
                    .timer(hyper_util::rt::TokioTimer::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc);
                if let Err(e) = conn.await {
                    tracing::info!("connection from {peer}: {e}");
                }
            }));
        }
    })
}
