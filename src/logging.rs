//! Log lines on standard error: tracing's, and the binary's own start, status and error
//! lines, as text or (`capture --log-format json`) one JSON object a line, so a log
//! collector parses every line. The filter (`CAPSULE_LOG`, default `warn`) can be replaced
//! while running (a capture's SIGHUP reload of `log_level`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

static JSON: AtomicBool = AtomicBool::new(false);
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// The filter of `level` (an `EnvFilter` directive list such as `info` or
/// `capsule_store=debug`), else of `CAPSULE_LOG`, else `warn`.
pub fn filter(level: Option<&str>) -> Result<EnvFilter, String> {
    match level {
        Some(l) => EnvFilter::try_new(l).map_err(|e| format!("{l:?} is no log filter: {e}")),
        None => {
            Ok(EnvFilter::try_from_env("CAPSULE_LOG").unwrap_or_else(|_| EnvFilter::new("warn")))
        }
    }
}

/// Installs the subscriber: JSON lines when `json`, else text (coloured for a person at a
/// terminal unless NO_COLOR is set).
pub fn init(json: bool, level: Option<&str>) {
    JSON.store(json, Ordering::Relaxed);
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let (filter, handle) =
        reload::Layer::new(filter(level).unwrap_or_else(|_| EnvFilter::new("warn")));
    let _ = FILTER.set(handle);
    let text = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(colour)
    });
    let json = json.then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .init();
}

/// Replaces the log filter of a running process.
pub fn set_filter(filter: EnvFilter) -> Result<(), String> {
    match FILTER.get() {
        Some(h) => h.reload(filter).map_err(|e| e.to_string()),
        None => Err("no log subscriber".to_string()),
    }
}

/// Whether lines are JSON.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// One line on standard error that is not filtered by level (start lines, reports, the
/// final error): as it is, or as a JSON object with tracing's keys when logs are JSON.
pub fn line(level: &str, msg: &str) {
    if json() {
        let obj = serde_json::json!({
            "timestamp": humantime::format_rfc3339_micros(std::time::SystemTime::now())
                .to_string(),
            "level": level,
            "fields": { "message": msg },
            "target": "capsule",
        });
        eprintln!("{obj}");
    } else {
        eprintln!("{msg}");
    }
}

/// [`line()`] at level INFO.
pub fn note(msg: &str) {
    line("INFO", msg)
}
