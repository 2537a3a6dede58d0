//! The `[tier]` section in the binary: the readers' way to the segments trimmed after upload
//! (a [`capsule_tier::Remote`] given to the store or answer source that reads them), and the
//! uploader that a writer (import, capture) runs beside its writer thread.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};

/// The readers' tier client of `[tier]` in `config`, if there is one with the section.
pub(crate) fn client_of(
    config: Option<&capsule_config::Config>,
) -> Result<Option<Arc<capsule_tier::Client>>> {
    make_client(config, capsule_tier::Client::new)
}

/// The writers' tier client of `[tier]` in `config` (its threads at the background's
/// priority), if there is one with the section.
pub(crate) fn upload_client_of(
    config: Option<&capsule_config::Config>,
) -> Result<Option<Arc<capsule_tier::Client>>> {
    make_client(config, capsule_tier::Client::for_uploads)
}

fn make_client(
    config: Option<&capsule_config::Config>,
    make: fn(&capsule_config::TierConfig) -> Result<capsule_tier::Client, capsule_tier::TierError>,
) -> Result<Option<Arc<capsule_tier::Client>>> {
    let Some(t) = config.and_then(capsule_config::Config::tier) else {
        return Ok(None);
    };
    let c = make(t).map_err(|e| crate::output::Usage(capsule_tier::chain(&e)))?;
    Ok(Some(Arc::new(c)))
}

/// The readers' way to the trimmed segments of `[tier]` in `config` (`None` without one
/// or without the section). Each command makes its own (`tier_reader` in request.rs); its
/// [`capsule_tier::Remote::fetched_bytes`] is what the command fetched.
pub(crate) fn reader_of(
    config: Option<&capsule_config::Config>,
) -> Result<Option<capsule_tier::Remote>> {
    Ok(client_of(config)?.map(capsule_tier::Remote::new))
}

/// The store's form of `remote`.
pub(crate) fn tier_of(
    remote: Option<&capsule_tier::Remote>,
) -> Option<capsule_store::remote::Tier> {
    remote.map(capsule_tier::Remote::tier)
}

/// A writer's uploader: started beside the writer, drained and stopped at its end.
#[derive(Debug)]
pub(crate) struct Upload {
    client: Arc<capsule_tier::Client>,
    uploader: Option<capsule_tier::Uploader>,
}

impl Upload {
    /// Starts uploading `store`'s backlog; each confirmed upload has the writer re-apply
    /// `budgets` (through `handle`), so retention trims the segments now tiered.
    pub(crate) fn start(
        client: Arc<capsule_tier::Client>,
        root: &Path,
        handle: capsule_store::writer::BudgetHandle,
        budgets: capsule_store::budget::Budgets,
    ) -> Result<Upload> {
        let store = capsule_store::Store::open(root)?;
        let uploader = capsule_tier::Uploader::spawn(client.clone(), store, move || {
            let _ = handle.reapply(budgets);
        })
        .context("start the uploader thread")?;
        Ok(Upload {
            client,
            uploader: Some(uploader),
        })
    }

    /// Stops the thread after the upload under way (a capture's end: the backlog left
    /// waits in the ledger for the next writer).
    pub(crate) fn stop(mut self) {
        if let Some(u) = self.uploader.take() {
            u.stop();
        }
    }

    /// After the writer finished (its last segment sealed): stops the thread, uploads what
    /// is left unless the endpoint fails, then trims the local store to `cfg`'s budgets by
    /// a writer opened for that alone, and expires old objects. A failing endpoint leaves
    /// the backlog for the next writer, with a warning.
    pub(crate) fn finish(mut self, root: &Path, cfg: &capsule_store::WriterConfig) -> Result<()> {
        if let Some(u) = self.uploader.take() {
            u.stop();
        }
        let store = capsule_store::Store::open(root)?;
        let stop = std::sync::atomic::AtomicBool::new(false);
        match capsule_tier::drain(&self.client, &store, &stop, || {}) {
            Ok(_) => {}
            Err(e) => {
                let (n, bytes) = capsule_tier::backlog_of(root).unwrap_or_default();
                eprintln!(
                    "capsule: warning: tier: {n} segment(s), {bytes} bytes, wait for upload \
                     (kept local, uploaded by the next capture or import): {}",
                    capsule_tier::chain(&e)
                );
            }
        }
        let trim = capsule_store::WriterConfig {
            tier: true,
            save_budgets: false,
            ..cfg.clone()
        };
        let (w, _) = capsule_store::StoreWriter::open(root, trim)?;
        w.finish()?;
        let newest = capsule_store::ledger::read(&store.segments_dir())?
            .and_then(|l| {
                l.live
                    .values()
                    .filter(|s| s.packets > 0)
                    .map(|s| s.last_ns)
                    .max()
            })
            .unwrap_or(0);
        if let Err(e) = capsule_tier::expire(&self.client, &store, newest) {
            eprintln!(
                "capsule: warning: tier: max_age: {}",
                capsule_tier::chain(&e)
            );
        }
        Ok(())
    }
}
