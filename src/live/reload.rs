//! SIGHUP in `capsule capture`: the config file read again, and what can change while
//! capture runs changed (docs/capture.md "Reloading the config").
//!
//! The command line is parsed again with the file (`cli::parse_args`, so flags still
//! override the file and every value is checked by its flag's parser, errors naming the
//! file, line and key). Then:
//! * retention budgets (`max_bytes`, `min_free`, `max_age`): a changed one is saved in the
//!   store and applied by the writer thread at once (`capsule_store::writer::BudgetHandle`);
//!   a key removed from the file leaves the budget as it is (`"none"` removes it);
//! * `log_level`: the log filter is replaced;
//! * `[alerts]` rules and `[groups]`, `[dscp]`, `[egress]`, `[work_hours]`: the live alert
//!   evaluator takes the new config at its next turn;
//! * every other `[capture]` key (interface, mode, rings, blocks, segments, user...), the
//!   `[cutoff]` section and the alert sinks need a restart: a change is logged as such and
//!   the running value stays.
//!
//! A file that does not parse or check is logged with its line and key, and nothing changes.

use std::ffi::OsString;
use std::path::PathBuf;

use capsule_store::budget::Budgets;
use capsule_store::writer::BudgetHandle;

use super::alerts::LiveAlerts;
use crate::cli::{ArgsError, CaptureArgs, Cmd};
use crate::logging;

/// What a reload compares with and acts through.
pub struct Reload {
    argv: Vec<OsString>,
    path: PathBuf,
    budgets: Budgets,
    handle: BudgetHandle,
    level: Option<String>,
    restart: Vec<(&'static str, String)>,
    /// The file's `[cutoff]` section and alert sinks at start, to say that a change of them
    /// needs a restart.
    cutoff: String,
    sinks: String,
}

/// The `[cutoff]` section and the alert sinks of `path` as text to compare (empty when the
/// file does not load: the reload then says why).
fn restart_sections(path: &std::path::Path) -> (String, String) {
    match capsule_config::Config::load(path) {
        Ok(c) => {
            let r = c.alerts();
            let sinks = format!(
                "{:?} {:?} {:?} {:?}",
                r.live_file,
                r.syslog_udp,
                r.syslog_socket,
                r.webhook.as_ref().map(|w| &w.url)
            );
            (format!("{:?}", c.cutoff()), sinks)
        }
        Err(_) => (String::new(), String::new()),
    }
}

/// The `[capture]` keys a running capture cannot change, with their values.
fn restart_only(a: &CaptureArgs) -> Vec<(&'static str, String)> {
    let w = &a.writer;
    vec![
        ("iface", format!("{:?}", a.iface)),
        ("iface_mode", format!("{:?}", a.iface_mode)),
        ("store", format!("{:?}", a.store)),
        ("mode", format!("{:?}", a.mode)),
        ("take_interface", format!("{:?}", a.take_interface)),
        ("metrics", format!("{:?}", a.metrics)),
        ("queues", format!("{:?}", a.queues)),
        ("frame_size", format!("{:?}", a.frame_size)),
        ("snaplen", format!("{:?}", a.snaplen)),
        ("fanout_group", format!("{:?}", a.fanout_group)),
        ("ring_size", format!("{:?}", a.ring_size)),
        ("block_size", format!("{:?}", w.block_size)),
        ("block_age", format!("{:?}", w.block_age)),
        ("segment_size", format!("{:?}", w.segment_size)),
        ("segment_age", format!("{:?}", w.segment_age)),
        ("level", format!("{:?}", w.level)),
        ("threads", format!("{:?}", w.threads)),
        ("json", format!("{:?}", a.json)),
        ("user", format!("{:?}", a.user)),
        ("group", format!("{:?}", a.group)),
        ("log_format", format!("{:?}", a.log_format)),
    ]
}

impl Reload {
    /// For a capture started with `--config`; `budgets`: those the writer runs with.
    pub fn new(a: &CaptureArgs, budgets: Budgets, handle: BudgetHandle) -> Option<Reload> {
        let path = a.config.clone()?;
        let (cutoff, sinks) = restart_sections(&path);
        Some(Reload {
            argv: std::env::args_os().collect(),
            path,
            cutoff,
            sinks,
            budgets,
            handle,
            level: a.log_level.clone(),
            restart: restart_only(a),
        })
    }

    /// Reads the file again and applies what can change (see the module docs).
    pub fn run(&mut self, alerts: Option<&LiveAlerts>) {
        let file = self.path.display().to_string();
        let new = match crate::cli::parse_args(self.argv.clone()) {
            Ok(cli) => match cli.cmd {
                Cmd::Capture(a) => a,
                _ => return,
            },
            Err(e) => {
                let why = match e {
                    ArgsError::Config(m) => m,
                    ArgsError::Clap(e) => e.to_string().lines().next().unwrap_or("").to_string(),
                };
                logging::line(
                    "WARN",
                    &format!("capsule: reload of {file} refused, nothing changed: {why}"),
                );
                return;
            }
        };
        let mut changed = Vec::new();
        let budgets = new.writer.budget_flags().apply(Some(self.budgets));
        if budgets != self.budgets {
            match self.handle.set(budgets) {
                Ok(()) => {
                    changed.push(format!(
                        "retention budgets (max_bytes {:?}, min_free {}, max_age {:?})",
                        budgets.max_bytes,
                        budgets.min_free.map_or("none".into(), |f| f.describe()),
                        budgets.max_age
                    ));
                    self.budgets = budgets;
                }
                Err(e) => logging::line(
                    "WARN",
                    &format!(
                        "capsule: reload of {file}: the retention budgets stay: {}",
                        capsule_store::error::chain(&e)
                    ),
                ),
            }
        }
        if new.log_level != self.level {
            match logging::filter(new.log_level.as_deref()).and_then(logging::set_filter) {
                Ok(()) => {
                    changed.push(format!(
                        "log level {}",
                        new.log_level.as_deref().unwrap_or("(default)")
                    ));
                    self.level = new.log_level.clone();
                }
                Err(e) => logging::line(
                    "WARN",
                    &format!("capsule: reload of {file}: the log level stays: {e}"),
                ),
            }
        }
        match (alerts, capsule_config::Config::load(&self.path)) {
            (Some(al), Ok(c)) => {
                al.replace(c);
                changed.push("alert rules and groups".into());
            }
            (None, Ok(c)) if c.alerts().live() => logging::line(
                "WARN",
                &format!(
                    "capsule: reload of {file}: live alerts were off at start; starting them \
                     needs a restart"
                ),
            ),
            _ => {}
        }
        let (cutoff, sinks) = restart_sections(&self.path);
        for (what, old, now) in [
            ("the [cutoff] section", &self.cutoff, &cutoff),
            ("the alert sinks", &self.sinks, &sinks),
        ] {
            if !now.is_empty() && old != now {
                logging::line(
                    "WARN",
                    &format!(
                        "capsule: reload of {file}: {what} changed: needs a restart; the \
                         running one stays"
                    ),
                );
            }
        }
        for ((key, old), (_, now)) in self.restart.iter().zip(restart_only(&new)) {
            if *old != now {
                logging::line(
                    "WARN",
                    &format!(
                        "capsule: reload of {file}: capture.{key} changed to {now}: needs a \
                         restart; it stays {old}"
                    ),
                );
            }
        }
        logging::note(&format!(
            "capsule: reloaded {file}: {}",
            if changed.is_empty() {
                "nothing changed".to_string()
            } else {
                changed.join(", ")
            }
        ));
    }
}
