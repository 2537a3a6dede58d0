//! The append-only audit log: one JSON line per request, refused ones too, fsynced; secrets
//! and oversized values kept out of it.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result};
use hyper::StatusCode;

use super::params::url_decode;
use serde_json::json;

/// The append-only audit log.
#[derive(Debug)]
pub(super) struct Audit {
    pub(super) file: Option<Mutex<std::fs::File>>,
    pub(super) path: Option<PathBuf>,
}

impl Audit {
    pub(super) fn open(path: Option<&Path>) -> Result<Audit> {
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
    pub(super) fn record(&self, rec: &serde_json::Value) {
        self.append(rec, true);
    }

    /// Appends `rec` without an fsync of its own (the next synced line, or the system,
    /// makes it durable): for requests that carried no valid token.
    pub(super) fn record_unsynced(&self, rec: &serde_json::Value) {
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

/// What one request did, for the audit log.
#[derive(Debug)]
pub(super) struct Record {
    pub(super) started: SystemTime,
    pub(super) t0: Instant,
    pub(super) peer: SocketAddr,
    /// SHA-256 of the client certificate (mutual TLS).
    pub(super) client_cert: Option<String>,
    pub(super) method: String,
    pub(super) endpoint: String,
    pub(super) user: Option<String>,
    pub(super) params: serde_json::Value,
    /// This request's reader of the segments in the object store (`[tier]`), which counts
    /// the bytes the request fetched from there.
    pub(super) tier: Option<capsule_tier::Remote>,
}

/// The parameter names some endpoint takes: only their values are written to the audit
/// log as sent.
pub(super) const KNOWN_PARAMS: &[&str] = &[
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
pub(super) const AUDIT_VALUE_MAX: usize = 4096;

/// Whether `v` holds what looks like a secret: a run of 32 or more hex digits (a capsule
/// token is 64).
pub(super) fn looks_like_secret(v: &str) -> bool {
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
pub(super) fn hide_secrets(text: &str) -> String {
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
pub(super) fn audit_params(query: Option<&str>) -> serde_json::Value {
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
    pub(super) fn bound_for_anonymous(&mut self) {
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

    pub(super) fn finish(
        &self,
        status: StatusCode,
        outcome: &str,
        packets: Option<u64>,
        bytes: u64,
    ) -> serde_json::Value {
        let mut v = json!({
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
        });
        if let Some(t) = &self.tier {
            v["tier_fetched_bytes"] = json!(t.fetched_bytes());
        }
        v
    }
}
