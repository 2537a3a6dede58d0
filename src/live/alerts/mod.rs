//! Live alerts: while `capsule capture --config FILE` runs, the `[alerts]` rules are
//! evaluated on the live index (sealed indexes and the open segment's journal) every
//! `live_every`, on a thread of their own, never on the packet path.
//!
//! ```text
//! every live_every: analytics::load(store, [now - lookback, now)) -> alerts::evaluate
//!   (with the live millisecond series when a millisecond rule or a sub-second ceiling is
//!   set: index::millis::list_index_only)
//!   -> key = rule + entity; a new key: "engaged" sent; a key still raised: sent again only
//!      after `suppress` (default 1 h); a key no raise has seen for `release_after`
//!      (default 30 s): "released" sent once (keys.rs: hysteresis, no flapping)
//!   -> one event (a JSON object) -> try_send into each sink's bounded queue (full: the
//!      event is counted undelivered for that sink, the evaluator never waits)
//!        -> file.rs     thread: the JSON-lines file (`live_file`), appended and flushed
//!        -> syslog.rs   thread: RFC 5424 with the JSON as message, UDP and/or unix socket
//!        -> webhook.rs  thread: POST, HMAC-SHA256 signed, timeout, bounded retries
//!   -> STORE/alerts-status.json: evaluations, engaged, per sink sent / undelivered / last
//!      error (`capsule status` shows it); rewritten when a count changes
//! ```
//!
//! A sink that fails (a full disk, a dead webhook) costs only its own events: each is
//! counted as undelivered for that sink and the evaluation goes on; capture never waits for
//! a sink. When capture stops, the sinks get [`DRAIN`] to send what is queued; what is
//! left then is counted undelivered.

mod file;
mod keys;
mod syslog;
mod webhook;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capsule_analytics::alerts::{Alert, Severity};
use capsule_config::Config;

/// How long the sinks may take to send what is queued when capture stops.
pub const DRAIN: Duration = Duration::from_secs(5);

pub use capsule_answers::status::{AlertStatus, SinkStatus, ALERT_STATUS_FILE as STATUS_FILE};

/// One event, as every sink sends it.
#[derive(Debug)]
pub struct Event {
    /// `engaged` or `released`.
    pub state: &'static str,
    /// The rule's name (the first part of the key).
    pub rule: String,
    /// The alert's severity (`None` for `released`).
    pub severity: Option<Severity>,
    /// Its sequence number in this capture (the webhook's delivery id with `at_ns`).
    pub seq: u64,
    pub at_ns: u64,
    /// The JSON object, on one line (docs/alerts.md).
    pub json: String,
}

/// What a sink's thread does with each event it takes from its queue.
trait Deliver: Send {
    /// Sends one event; an error says why it could not be delivered. `abandon` is set when
    /// capture stopped and the drain time is over: a sink waiting to retry gives up.
    fn deliver(&mut self, ev: &Event, abandon: &AtomicBool) -> Result<(), String>;
}

/// One sink: its queue, its thread, its counts.
struct Sink {
    tx: Option<SyncSender<Arc<Event>>>,
    status: Arc<Mutex<SinkStatus>>,
    handle: Option<JoinHandle<()>>,
    queue: usize,
}

/// Set by any thread that changed a count: the status file is rewritten.
#[derive(Default)]
struct Shared {
    changed: AtomicBool,
    abandon: AtomicBool,
}

fn lock(m: &Mutex<SinkStatus>) -> std::sync::MutexGuard<'_, SinkStatus> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sink {
    fn start(
        kind: &str,
        target: String,
        queue: usize,
        mut d: Box<dyn Deliver>,
        shared: &Arc<Shared>,
    ) -> Result<Sink> {
        let (tx, rx): (_, Receiver<Arc<Event>>) = sync_channel(queue);
        let status = Arc::new(Mutex::new(SinkStatus {
            sink: kind.to_string(),
            target,
            ..SinkStatus::default()
        }));
        let (st, sh) = (status.clone(), shared.clone());
        let handle = std::thread::Builder::new()
            .name(format!("capsule-{kind}"))
            .spawn(move || {
                for ev in rx {
                    let r = if sh.abandon.load(Ordering::Relaxed) {
                        Err("capture stopped before it was sent".to_string())
                    } else {
                        d.deliver(&ev, &sh.abandon)
                    };
                    let mut s = lock(&st);
                    match r {
                        Ok(()) => s.sent += 1,
                        Err(e) => {
                            s.undelivered += 1;
                            s.last_error = Some(e);
                            s.last_error_at_ns = Some(now_ns());
                        }
                    }
                    drop(s);
                    sh.changed.store(true, Ordering::Relaxed);
                }
            })
            .with_context(|| format!("cannot start the {kind} alert sink's thread"))?;
        Ok(Sink {
            tx: Some(tx),
            status,
            handle: Some(handle),
            queue,
        })
    }

    /// Queues `ev`, never waiting: a full queue costs the event.
    fn offer(&self, ev: &Arc<Event>, shared: &Shared) {
        let why = match self.tx.as_ref().map(|tx| tx.try_send(ev.clone())) {
            Some(Ok(())) => return,
            Some(Err(TrySendError::Full(_))) => format!(
                "queue full ({} events waiting): the sink is slower than the alerts",
                self.queue
            ),
            _ => "the sink's thread has stopped".to_string(),
        };
        let mut s = lock(&self.status);
        s.undelivered += 1;
        s.last_error = Some(why);
        s.last_error_at_ns = Some(now_ns());
        shared.changed.store(true, Ordering::Relaxed);
    }
}

/// The configured sinks, started (threads running, queues empty).
pub struct Sinks {
    sinks: Vec<Sink>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sinks")
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl Sinks {
    /// Starts every sink `[alerts]` names; `None` when it names none. Fails on what can be
    /// known before any alert (an unreadable secret file or CA file, a bad URL).
    pub fn open(config: &Config) -> Result<Option<Sinks>> {
        let rules = config.alerts();
        if !rules.live() {
            return Ok(None);
        }
        let shared = Arc::new(Shared::default());
        let q = rules.sink_queue;
        let mut sinks = Vec::new();
        if let Some(f) = &rules.live_file {
            let d = Box::new(file::FileSink::new(PathBuf::from(f)));
            sinks.push(Sink::start("file", f.clone(), q, d, &shared)?);
        }
        if let Some(addr) = &rules.syslog_udp {
            let d = Box::new(syslog::Syslog::udp(addr, rules.syslog_facility)?);
            sinks.push(Sink::start("syslog-udp", addr.clone(), q, d, &shared)?);
        }
        if let Some(path) = &rules.syslog_socket {
            let d = Box::new(syslog::Syslog::unix(path, rules.syslog_facility)?);
            sinks.push(Sink::start("syslog-unix", path.clone(), q, d, &shared)?);
        }
        if let Some(w) = &rules.webhook {
            let d = Box::new(webhook::Webhook::new(w)?);
            sinks.push(Sink::start("webhook", w.url.clone(), q, d, &shared)?);
        }
        Ok(Some(Sinks { sinks, shared }))
    }

    fn send(&self, ev: Event) {
        let ev = Arc::new(ev);
        for s in &self.sinks {
            s.offer(&ev, &self.shared);
        }
    }

    /// Closes the queues and gives the sinks [`DRAIN`] to send what they hold; then what
    /// is left is abandoned (counted undelivered).
    fn close(&mut self) {
        for s in &mut self.sinks {
            s.tx = None;
        }
        let t0 = Instant::now();
        let done = |sinks: &[Sink]| {
            sinks
                .iter()
                .all(|s| s.handle.as_ref().is_none_or(JoinHandle::is_finished))
        };
        while !done(&self.sinks) && t0.elapsed() < DRAIN {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.shared.abandon.store(true, Ordering::Relaxed);
        // An attempt in flight ends within its own timeout; queued events now go at once.
        let t1 = Instant::now();
        while !done(&self.sinks) && t1.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for s in &mut self.sinks {
            if s.handle.as_ref().is_some_and(JoinHandle::is_finished) {
                if let Some(h) = s.handle.take() {
                    let _ = h.join();
                }
            }
        }
    }

    fn statuses(&self) -> Vec<SinkStatus> {
        self.sinks.iter().map(|s| lock(&s.status).clone()).collect()
    }
}

/// The running evaluator.
pub struct LiveAlerts {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
    /// A reloaded config for the evaluator to take at its next turn.
    next: Arc<Mutex<Option<Config>>>,
}

impl std::fmt::Debug for LiveAlerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveAlerts").finish_non_exhaustive()
    }
}

impl LiveAlerts {
    /// Starts the evaluator, sending to `sinks` (from [`Sinks::open`]).
    pub fn start(store: &Path, config: Config, sinks: Sinks) -> Result<LiveAlerts> {
        let stop = Arc::new(AtomicBool::new(false));
        let store = store.to_path_buf();
        let s = stop.clone();
        let next = Arc::new(Mutex::new(None));
        let n = next.clone();
        let handle = std::thread::Builder::new()
            .name("capsule-alerts".into())
            .spawn(move || run(&store, config, sinks, &s, &n))
            .context("cannot start the live alerts' thread")?;
        Ok(LiveAlerts { stop, handle, next })
    }

    /// Replaces the rules and groups (a reload of the config file) from the next
    /// evaluation on; the sinks stay the ones the capture started with (a changed sink
    /// needs a restart).
    pub fn replace(&self, config: Config) {
        if let Ok(mut n) = self.next.lock() {
            *n = Some(config);
        }
    }

    /// Evaluates once more (what the last seconds of capture raised), lets the sinks send
    /// what is queued (at most [`DRAIN`] and an attempt in flight) and stops.
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

fn write_status(store: &Path, status: &mut AlertStatus, sinks: &Sinks) {
    status.sinks = sinks.statuses();
    status.sent = status.sinks.iter().map(|s| s.sent).sum();
    status.undelivered = status.sinks.iter().map(|s| s.undelivered).sum();
    status.updated_ns = now_ns();
    if let Ok(text) = serde_json::to_vec(status) {
        let tmp = store.join(format!("{STATUS_FILE}.tmp"));
        // 0640 like every store file, whatever the umask (the mode applies when the file
        // is made; a leftover is made again).
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
}

/// How often to evaluate, how long to suppress a repeat (ns), and the window each
/// evaluation looks back over (long enough for every rule's own window).
fn timing(config: &Config) -> (Duration, u64, u64) {
    let rules = config.alerts();
    let lookback = rules
        .egress_window_ns
        .max(rules.straggler_interval_ns * 3)
        .max(10 * 1_000_000_000);
    (
        Duration::from_nanos(rules.live_every_ns),
        rules.suppress_ns,
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
    mut sinks: Sinks,
    stop: &AtomicBool,
    next: &Mutex<Option<Config>>,
) {
    let (mut every, mut suppress, mut lookback) = timing(&config);
    let mut status = AlertStatus {
        rules: enabled_rules(&config),
        ..AlertStatus::default()
    };
    let mut engaged = keys::Keys::default();
    let clock = Instant::now();
    let mut seq = 0u64;
    let mut last = Instant::now();
    loop {
        if let Some(c) = next.lock().ok().and_then(|mut n| n.take()) {
            config = c;
            (every, suppress, lookback) = timing(&config);
            status.rules = enabled_rules(&config);
            status.reloads += 1;
            write_status(store, &mut status, &sinks);
        }
        let stopping = stop.load(Ordering::Relaxed);
        if !stopping && last.elapsed() < every {
            std::thread::sleep(Duration::from_millis(100));
            if sinks.shared.changed.swap(false, Ordering::Relaxed) {
                write_status(store, &mut status, &sinks);
            }
            continue;
        }
        last = Instant::now();
        let now = now_ns();
        let q = capsule_query::Query {
            from_ns: Some(now.saturating_sub(lookback)),
            to_ns: None,
            ..capsule_query::Query::all()
        };
        let mut event = |state: &'static str, key: &str, alert: Option<&Alert>, sev| {
            seq += 1;
            let json = serde_json::json!({
                "state": state,
                "key": key,
                "at_ns": now,
                "at": capsule_query::format_instant(now),
                "alert": alert,
            });
            Event {
                state,
                rule: key.split('|').next().unwrap_or("").to_string(),
                severity: sev,
                seq,
                at_ns: now,
                json: json.to_string(),
            }
        };
        match capsule_analytics::load(store, None, &q, "", true)
            .and_then(|input| evaluate(store, &input, &config))
        {
            Ok(alerts) => {
                status.evaluations += 1;
                let raised: Vec<String> = alerts
                    .iter()
                    .map(|a| format!("{}|{}", a.rule, a.entity.name))
                    .collect();
                let at = clock.elapsed().as_nanos() as u64;
                let release_after = config.alerts().release_after_ns;
                for change in engaged.step(at, &raised, suppress, release_after) {
                    match change {
                        keys::Change::Engage(i) => {
                            let a = &alerts[i];
                            sinks.send(event("engaged", &raised[i], Some(a), Some(a.severity)));
                        }
                        keys::Change::Release(key) => {
                            sinks.send(event("released", &key, None, None));
                        }
                    }
                }
            }
            Err(e) => status.last_error = Some(format!("evaluating the rules: {e}")),
        }
        status.engaged = engaged.len();
        if stopping {
            sinks.close();
        }
        write_status(store, &mut status, &sinks);
        if stopping {
            return;
        }
    }
}

/// The rules over the live window: the millisecond ones over the live index's series
/// (sealed indexes and the open segment's journal) when the config asks for any.
fn evaluate(
    store: &Path,
    input: &capsule_analytics::Input,
    config: &Config,
) -> std::result::Result<Vec<Alert>, capsule_analytics::AnalyticsError> {
    if !capsule_analytics::alerts::msrules::needs_series(config) {
        return capsule_analytics::alerts::evaluate(input, config);
    }
    let source = capsule_answers::Source {
        config: Some(config.clone()),
        ..capsule_answers::Source::store(store)
    };
    let listing = capsule_store::Store::open(store)
        .and_then(|s| capsule_index::millis::list_index_only(&s, input.from_ns, input.to_ns))
        .map_err(|source| capsule_analytics::AnalyticsError::Store {
            store: store.display().to_string(),
            source,
        })?;
    let ms = capsule_analytics::alerts::msrules::MsInput {
        listing: &listing,
        link_bps: capsule_answers::analytics::link_of(&source).map(|l| l.bits_per_second),
    };
    capsule_analytics::alerts::evaluate_with(input, config, Some(&ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that takes each event only when the test lets it (a slow receiver).
    struct Gate(std::sync::mpsc::Receiver<()>);

    impl Deliver for Gate {
        fn deliver(&mut self, _ev: &Event, _abandon: &AtomicBool) -> Result<(), String> {
            self.0.recv().map_err(|_| "gate closed".to_string())
        }
    }

    fn event(seq: u64) -> Event {
        Event {
            state: "engaged",
            rule: "dscp".into(),
            severity: Some(Severity::Low),
            seq,
            at_ns: seq,
            json: "{}".into(),
        }
    }

    #[test]
    fn a_slow_sink_fills_its_own_queue_and_loses_only_its_own_events() {
        let shared = Arc::new(Shared::default());
        let (open, gate) = std::sync::mpsc::channel();
        let slow = Sink::start("slow", "t".into(), 2, Box::new(Gate(gate)), &shared).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let file = Sink::start(
            "file",
            "f".into(),
            100,
            Box::new(file::FileSink::new(path.clone())),
            &shared,
        )
        .unwrap();
        let mut sinks = Sinks {
            sinks: vec![slow, file],
            shared,
        };
        // The first event is taken by the slow sink's thread (and held at the gate)...
        sinks.send(event(0));
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        for i in 1..10 {
            sinks.send(event(i));
        }
        // Offering never waits for the slow sink.
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "{:?}",
            t0.elapsed()
        );
        // Let the slow one take everything it holds, then close.
        for _ in 0..10 {
            let _ = open.send(());
        }
        sinks.close();
        let st = sinks.statuses();
        // ... two more queued: the other seven were counted at once.
        assert_eq!((st[0].sent, st[0].undelivered), (3, 7), "{st:?}");
        assert!(st[0]
            .last_error
            .as_deref()
            .unwrap()
            .starts_with("queue full (2 events"));
        assert_eq!((st[1].sent, st[1].undelivered), (10, 0), "{st:?}");
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 10);
    }

    #[test]
    fn at_stop_what_a_dead_sink_still_holds_is_counted_after_the_drain() {
        let shared = Arc::new(Shared::default());
        let (_never, gate) = std::sync::mpsc::channel::<()>();
        // A sink that never finishes an event unless told to give up.
        struct Stuck(std::sync::mpsc::Receiver<()>);
        impl Deliver for Stuck {
            fn deliver(&mut self, _ev: &Event, abandon: &AtomicBool) -> Result<(), String> {
                while !abandon.load(Ordering::Relaxed) {
                    if self.0.recv_timeout(Duration::from_millis(20)).is_ok() {
                        return Ok(());
                    }
                }
                Err("gave up".into())
            }
        }
        let s = Sink::start("stuck", "t".into(), 10, Box::new(Stuck(gate)), &shared).unwrap();
        let mut sinks = Sinks {
            sinks: vec![s],
            shared,
        };
        for i in 0..4 {
            sinks.send(event(i));
        }
        let t0 = Instant::now();
        sinks.close();
        let took = t0.elapsed();
        assert!(
            took >= DRAIN && took < DRAIN + Duration::from_secs(2),
            "{took:?}"
        );
        let st = sinks.statuses();
        assert_eq!((st[0].sent, st[0].undelivered), (0, 4), "{st:?}");
    }
}
