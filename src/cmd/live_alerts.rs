//! Live alerts: while `capsule capture --config FILE` runs, the `[alerts]` rules are
//! evaluated on the live index (sealed indexes and the open segment's journal) every
//! `live_every`, on a thread of their own, never on the packet path.
//!
//! ```text
//! every live_every: analytics::load(store, [now - lookback, now)) -> alerts::evaluate
//!   -> key = rule + entity; a new key: "engaged" sent; a key still raised: sent again only
//!      after `suppress` (default 1 h); a key no longer raised: "released" sent once
//!   -> the JSON-lines sink (`live_file`), one line per event, appended and flushed
//!   -> STORE/alerts-status.json: evaluations, sent, undelivered, engaged, last error
//!      (`capsule status` shows it)
//! ```
//!
//! A sink that fails (a full disk, a removed directory) costs only its events: each is
//! counted as undelivered and the evaluation goes on; capture never waits for it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use capsule_analytics::alerts::Alert;
use capsule_config::Config;
use serde::{Deserialize, Serialize};

/// The status file's name in the store directory.
pub const STATUS_FILE: &str = "alerts-status.json";

/// What `capsule status` shows of live alerts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AlertStatus {
    pub sink: String,
    pub evaluations: u64,
    pub sent: u64,
    pub undelivered: u64,
    pub engaged: usize,
    pub last_error: Option<String>,
    pub updated_ns: u64,
    /// The rules evaluated (those the config does not disable).
    #[serde(default)]
    pub rules: Vec<String>,
    /// Times the rules were replaced by a reload of the config file (SIGHUP).
    #[serde(default)]
    pub reloads: u64,
}

/// Reads `STORE/alerts-status.json`, if live alerts ever ran there.
pub fn read_status(store: &Path) -> Option<AlertStatus> {
    let text = std::fs::read(store.join(STATUS_FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// The running evaluator.
pub struct LiveAlerts {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
    /// A reloaded config for the evaluator to take at its next turn.
    next: Arc<Mutex<Option<Config>>>,
}

impl LiveAlerts {
    /// Starts the evaluator when the config names a `live_file`.
    pub fn start(store: &Path, config: Config) -> Option<LiveAlerts> {
        let sink = PathBuf::from(config.alerts().live_file.clone()?);
        let stop = Arc::new(AtomicBool::new(false));
        let store = store.to_path_buf();
        let s = stop.clone();
        let next = Arc::new(Mutex::new(None));
        let n = next.clone();
        let handle = std::thread::Builder::new()
            .name("capsule-alerts".into())
            .spawn(move || run(&store, config, &sink, &s, &n))
            .ok()?;
        Some(LiveAlerts { stop, handle, next })
    }

    /// Replaces the rules and groups (a reload of the config file) from the next
    /// evaluation on; the sink stays the one the capture started with.
    pub fn replace(&self, config: Config) {
        if let Ok(mut n) = self.next.lock() {
            *n = Some(config);
        }
    }

    /// Evaluates once more (what the last seconds of capture raised) and stops.
    pub fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

struct Engaged {
    last_sent: Instant,
}

/// How often to evaluate, how long to suppress a repeat, and the window each evaluation
/// looks back over (long enough for every rule's own window).
fn timing(config: &Config) -> (Duration, Duration, u64) {
    let rules = config.alerts();
    let lookback = rules
        .egress_window_ns
        .max(rules.straggler_interval_ns * 3)
        .max(10 * 1_000_000_000);
    (
        Duration::from_nanos(rules.live_every_ns),
        Duration::from_nanos(rules.suppress_ns),
        lookback,
    )
}

fn enabled_rules(config: &Config) -> Vec<String> {
    capsule_config::ALERT_RULES
        .iter()
        .filter(|r| config.alerts().enabled(r))
        .map(|r| r.to_string())
        .collect()
}

fn run(
    store: &Path,
    mut config: Config,
    sink: &Path,
    stop: &AtomicBool,
    next: &Mutex<Option<Config>>,
) {
    let (mut every, mut suppress, mut lookback) = timing(&config);
    let mut status = AlertStatus {
        sink: sink.display().to_string(),
        rules: enabled_rules(&config),
        ..AlertStatus::default()
    };
    let mut engaged: BTreeMap<String, Engaged> = BTreeMap::new();
    let mut last = Instant::now();
    loop {
        if let Some(c) = next.lock().ok().and_then(|mut n| n.take()) {
            config = c;
            (every, suppress, lookback) = timing(&config);
            status.rules = enabled_rules(&config);
            status.reloads += 1;
        }
        let stopping = stop.load(Ordering::Relaxed);
        if !stopping && last.elapsed() < every {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        last = Instant::now();
        let now = now_ns();
        let q = capsule_query::Query {
            from_ns: Some(now.saturating_sub(lookback)),
            to_ns: None,
            ..capsule_query::Query::all()
        };
        match capsule_analytics::load(store, &q, "")
            .and_then(|input| capsule_analytics::alerts::evaluate(&input, &config))
        {
            Ok(alerts) => {
                status.evaluations += 1;
                let mut seen = BTreeSet::new();
                for a in &alerts {
                    let key = format!("{}|{}", a.rule, a.entity.name);
                    seen.insert(key.clone());
                    let send = match engaged.get(&key) {
                        None => true,
                        Some(e) => e.last_sent.elapsed() >= suppress,
                    };
                    if send {
                        deliver(sink, &mut status, "engaged", &key, Some(a), now);
                        engaged.insert(
                            key,
                            Engaged {
                                last_sent: Instant::now(),
                            },
                        );
                    }
                }
                let gone: Vec<String> = engaged
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                for key in gone {
                    engaged.remove(&key);
                    deliver(sink, &mut status, "released", &key, None, now);
                }
            }
            Err(e) => status.last_error = Some(format!("evaluating the rules: {e}")),
        }
        status.engaged = engaged.len();
        status.updated_ns = now_ns();
        if let Ok(text) = serde_json::to_vec(&status) {
            let tmp = store.join(format!("{STATUS_FILE}.tmp"));
            // 0640 like every store file, whatever the umask (the mode applies when the
            // file is made; a leftover is made again).
            let _ = std::fs::remove_file(&tmp);
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o640)
                .open(&tmp)
                .and_then(|mut f| f.write_all(&text));
            if written.is_ok() {
                let _ = std::fs::rename(&tmp, store.join(STATUS_FILE));
            }
        }
        if stopping {
            return;
        }
    }
}

/// Appends one event to the sink; a failure is counted, never retried here.
fn deliver(
    sink: &Path,
    status: &mut AlertStatus,
    state: &str,
    key: &str,
    alert: Option<&Alert>,
    at_ns: u64,
) {
    let line = serde_json::json!({
        "state": state,
        "key": key,
        "at_ns": at_ns,
        "at": capsule_query::format_instant(at_ns),
        "alert": alert,
    });
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(sink)
        .and_then(|mut f| writeln!(f, "{line}").and_then(|()| f.flush()));
    match r {
        Ok(()) => status.sent += 1,
        Err(e) => {
            status.undelivered += 1;
            status.last_error = Some(format!("{}: {e}", sink.display()));
        }
    }
}
