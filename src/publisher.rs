//! Publishing to the fleet from the commands that write a store: `import` publishes once
//! after sealing, `capture` every few seconds on a thread of its own (and once more after
//! the last seal). Staging is a file write into the store's outbox; a ClickHouse that is
//! down or slow only leaves batches waiting there, it never holds up the capture thread,
//! which does not wait for this one (docs/fleet.md).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capsule_fleet::publish::{self, Node};
use capsule_fleet::ClickHouse;

/// How often a capture's publisher looks for newly sealed segments.
pub(crate) const EVERY: Duration = Duration::from_secs(5);

/// One publish of the store at `store` for the config's `[fleet]` node: what happened, as
/// one line for the operator (`None` when everything reached ClickHouse and nothing was
/// new). With `tier`, a segment only in the object store whose side index is missing
/// locally has it fetched (a few a pass, [`publish::INDEX_FETCHES_PER_PASS`]).
pub(crate) fn publish_once(
    store: &Path,
    config: &capsule_config::Config,
    tier: Option<&capsule_store::remote::Tier>,
) -> Option<String> {
    let fleet = config.fleet()?;
    let ch = match ClickHouse::of(fleet) {
        Ok(ch) => ch,
        Err(e) => return Some(format!("fleet: {}", capsule_store::error::chain(&e))),
    };
    let node = Node {
        name: &fleet.node,
        advertise: fleet.advertise.as_deref(),
        config: Some(config),
        version: crate::cli::VERSION.as_str(),
        tier,
    };
    match publish::publish(store, &node, &ch) {
        Err(e) => Some(format!(
            "fleet: staging into the outbox failed: {}",
            capsule_store::error::chain(&e)
        )),
        Ok((staged, Ok(pushed))) => (!staged.staged.is_empty() || pushed.batches > 0).then(|| {
            format!(
                "fleet: node {} published {} segment(s) to {}",
                fleet.node,
                pushed.batches,
                ch.url()
            )
        }),
        Ok((_, Err(e))) => Some(format!(
            "fleet: {}; {} batch(es) wait in {} (sent when it answers)",
            capsule_store::error::chain(&e),
            publish::backlog(store).unwrap_or(0),
            capsule_fleet::outbox::Outbox::of(store).dir().display()
        )),
    }
}

/// A capture's publisher thread.
pub(crate) struct Publisher {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
    store: PathBuf,
    config: capsule_config::Config,
    tier: Option<capsule_store::remote::Tier>,
}

impl Publisher {
    /// Starts publishing `store` every [`EVERY`] when the config has a `[fleet]` section,
    /// fetching the missing side indexes of segments only in the object store through
    /// `tier` (`serve`'s; a writer keeps its indexes and gives none).
    pub(crate) fn start(
        store: &Path,
        config: capsule_config::Config,
        tier: Option<capsule_store::remote::Tier>,
    ) -> Option<Publisher> {
        config.fleet()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st, c) = (stop.clone(), store.to_path_buf(), config.clone());
        let t = tier.clone();
        let thread = std::thread::Builder::new()
            .name("fleet-publish".into())
            .spawn(move || {
                let mut last = None;
                while !s.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let said = publish_once(&st, &c, t.as_ref());
                    // A problem is said once, not every turn while it lasts.
                    if said.is_some() && said != last {
                        crate::logging::note(&format!(
                            "capsule: {}",
                            said.as_deref().unwrap_or("")
                        ));
                    }
                    last = said;
                    while !s.load(Ordering::Relaxed) && t0.elapsed() < EVERY {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            })
            .ok()?;
        Some(Publisher {
            stop,
            thread,
            store: store.to_path_buf(),
            config,
            tier,
        })
    }

    /// Stops the thread, then publishes once more (the segments sealed at the end).
    pub(crate) fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        if let Some(said) = publish_once(&self.store, &self.config, self.tier.as_ref()) {
            crate::logging::note(&format!("capsule: {said}"));
        }
    }
}
