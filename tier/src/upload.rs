//! The uploader: the backlog is the ledger itself (sealed segments without a `tiered`
//! line), so it survives any crash and a dead endpoint only makes it longer. It runs on a
//! thread of the writer-lock holder (capture, import), never on the packets' path: the
//! writer seals and goes on; the uploader finds the seal in the ledger.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capsule_store::{ledger, segment, Store};

use crate::client::Client;
use crate::error::TierError;
use crate::remote::{index_key, segment_key};

/// What one pass over the backlog did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Segments uploaded and recorded as tiered.
    pub uploaded: usize,
    pub bytes: u64,
    /// Segments still waiting (when the pass stopped early, on `stop` or an error).
    pub left: usize,
}

/// Uploads every segment of the backlog, oldest first, recording each in the ledger once
/// its object is confirmed, and calls `confirmed` after each. Stops at the first error (the
/// endpoint is down: the rest waits) and when `stop` is set.
pub fn drain(
    client: &Client,
    store: &Store,
    stop: &AtomicBool,
    mut confirmed: impl FnMut(),
) -> Result<Drained, TierError> {
    drain_observed(client, store, stop, |step| {
        if let Step::Confirmed(_) = step {
            confirmed()
        }
    })
}

/// A step of [`drain_observed`] for one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Its index and segment objects are sent and checked; not recorded yet.
    Sent(u64),
    /// Recorded in the ledger as tiered.
    Confirmed(u64),
    /// Another file was under its name once sent (a compaction renamed over it): its
    /// objects were deleted, and the next pass sends it again.
    Changed(u64),
}

/// [`drain`], calling `on` at each [`Step`] of each segment (`Sent` before the step that
/// may record it: what a compaction committed then makes the upload be sent again).
pub fn drain_observed(
    client: &Client,
    store: &Store,
    stop: &AtomicBool,
    mut on: impl FnMut(Step),
) -> Result<Drained, TierError> {
    let dir = store.segments_dir();
    let Some(l) = ledger::read(&dir)? else {
        return Ok(Drained::default());
    };
    let backlog: Vec<ledger::Sealed> = l.backlog().copied().collect();
    let mut d = Drained {
        left: backlog.len(),
        ..Default::default()
    };
    for s in backlog {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let path = dir.join(segment::sealed_name(s.seq));
        // The file under the name before anything is sent: a compaction renames a new file
        // over it, and what was sent must be the file the ledger then vouches for.
        let Some(before) = identity(&path) else {
            // Deleted meanwhile (retention without a tier before, or by hand): nothing to
            // upload; readers name it missing.
            d.left -= 1;
            continue;
        };
        // The index first: a tiered segment's index is in the object store whenever the
        // segment is (a restored store fetches it from there).
        let idx = store
            .index_dir()
            .join(capsule_store::store::index_file_name(s.seq));
        if idx.exists() {
            client.upload_file(&idx, &index_key(client, s.seq), stop)?;
        }
        let key = segment_key(client, s.seq);
        let etag = client.upload_file(&path, &key, stop)?;
        on(Step::Sent(s.seq));
        let confirmed_here = {
            // Held until the line is written: no compaction renames over the file meanwhile
            // (never across a request to the object store: the writer thread commits
            // compactions, and must not wait on the network).
            let _commit = ledger::tier_commit_lock();
            let same = identity(&path) == Some(before);
            if same {
                ledger::record_tiered(&dir, s.seq, before.2, &etag)?;
            }
            same
        };
        if !confirmed_here {
            // Compacted (or replaced) while it was sent: the objects may hold the old bytes
            // and the old index. They go; the next pass sends what is there now.
            tracing::info!(
                seq = s.seq,
                "tier: segment changed during its upload (compacted); sending it again"
            );
            client.delete(&key)?;
            client.delete(&index_key(client, s.seq))?;
            on(Step::Changed(s.seq));
            continue;
        }
        let bytes = before.2;
        tracing::info!(
            seq = s.seq,
            bytes,
            key,
            "tier: segment uploaded and confirmed"
        );
        d.uploaded += 1;
        d.bytes += bytes;
        d.left -= 1;
        on(Step::Confirmed(s.seq));
    }
    Ok(d)
}

/// Deletes from the object store the trimmed segments whose last packet is older than
/// `[tier] max_age` before `newest_ns` (the newest packet the store holds), recording each
/// as deleted. Returns how many went.
pub fn expire(client: &Client, store: &Store, newest_ns: u64) -> Result<usize, TierError> {
    let Some(max_age) = client.config().max_age_ns else {
        return Ok(0);
    };
    let dir = store.segments_dir();
    let Some(l) = ledger::read(&dir)? else {
        return Ok(0);
    };
    let cutoff = newest_ns.saturating_sub(max_age);
    let mut n = 0;
    for s in l.live.values() {
        if !l.trimmed.contains(&s.seq) || s.packets == 0 || s.last_ns >= cutoff {
            continue;
        }
        client.delete(&segment_key(client, s.seq))?;
        client.delete(&index_key(client, s.seq))?;
        ledger::record_expired(&dir, s.seq)?;
        // What readers kept of it locally: its side index and its footer.
        for f in store.tier_cache_files(s.seq) {
            let _ = std::fs::remove_file(f);
        }
        n += 1;
    }
    Ok(n)
}

/// The uploader thread: drains the backlog, waits and tries again; after an error it waits
/// longer each time (1 s doubling up to 30 s).
#[derive(Debug)]
pub struct Uploader {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Uploader {
    /// Starts the thread for `store`; `confirmed` runs after each upload (the writer's
    /// budgets re-applied, so that retention trims what is now tiered).
    pub fn spawn(
        client: Arc<Client>,
        store: Store,
        confirmed: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Uploader> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("capsule-upload".into())
            .spawn(move || {
                lower_priority();
                run(&client, &store, &s, confirmed)
            })?;
        Ok(Uploader {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread after the upload under way (a backlog left waits for the next
    /// writer).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn run(client: &Client, store: &Store, stop: &AtomicBool, mut confirmed: impl FnMut()) {
    let mut backoff = Duration::from_secs(1);
    while !stop.load(Ordering::Relaxed) {
        let wait = match drain(client, store, stop, &mut confirmed) {
            Err(TierError::Stopped { .. }) => break,
            Ok(_) => {
                backoff = Duration::from_secs(1);
                Duration::from_millis(500)
            }
            Err(e) => {
                tracing::warn!(
                    "tier: upload failed, the segment stays local and is retried in {}s: {}",
                    backoff.as_secs(),
                    chain(&e)
                );
                let w = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(30));
                w
            }
        };
        let until = Instant::now() + wait;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Puts the calling thread (the uploader's, its client's) at the background's CPU and I/O
/// priority, so that what capture needs goes first; a failure is logged (the uploads go on
/// at the normal priority).
pub(crate) fn lower_priority() {
    if let Err(e) = capsule_sys::prio::background_thread() {
        tracing::warn!(
            "tier: the uploads run at the normal priority: {}",
            chain(&e)
        );
    }
}

/// The error and its causes, as one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Whether `path` is a store whose ledger records a backlog (for messages).
pub fn backlog_of(root: &Path) -> Option<(usize, u64)> {
    let store = Store::open(root).ok()?;
    let l = ledger::read(&store.segments_dir()).ok()??;
    Some(l.backlog().fold((0, 0), |(n, b), s| (n + 1, b + s.bytes)))
}

/// The file under `path` (device, inode, length), or none when there is none.
fn identity(path: &Path) -> Option<(u64, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids of this process's threads named `name`.
    fn threads_named(name: &str) -> Vec<u32> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| {
                let e = e.ok()?;
                let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
                (comm.trim() == name).then(|| e.file_name().to_str()?.parse().ok())?
            })
            .collect()
    }

    fn config(dir: &Path) -> capsule_config::TierConfig {
        std::fs::write(dir.join("cred"), "id\nsecret\n").unwrap();
        capsule_config::TierConfig {
            // Nothing listens there: the uploads fail, the threads stay.
            endpoint: "http://127.0.0.1:9".into(),
            bucket: "capsule".into(),
            prefix: String::new(),
            region: capsule_config::DEFAULT_REGION.into(),
            credentials_file: dir.join("cred"),
            max_age_ns: None,
            path_style: true,
            upload_rate_bps: None,
            cache_dir: None,
        }
    }

    #[test]
    fn the_uploader_and_its_connections_run_at_the_background_priority_and_readers_do_not() {
        use capsule_sys::prio;
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        let background = (
            prio::BACKGROUND_NICE,
            (prio::IOPRIO_CLASS_BE, prio::BACKGROUND_IO_LEVEL),
        );
        let of = |tid: u32| {
            (
                prio::nice_of(tid).unwrap(),
                prio::io_priority_of(tid).unwrap(),
            )
        };
        // A readers' client first: its connection thread keeps the process's priority.
        let reader = Client::new(&cfg).unwrap();
        let t0 = Instant::now();
        let readers: Vec<u32> = loop {
            // Its worker starts (and names itself) a moment after the runtime is built.
            let found = threads_named("capsule-tier");
            if !found.is_empty() {
                break found;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "no reader's thread");
            std::thread::sleep(Duration::from_millis(20));
        };
        for &t in &readers {
            assert_ne!(of(t), background, "a reader's thread {t}");
        }
        let store = Store::create_or_open(&d.path().join("store")).unwrap();
        let client = Arc::new(Client::for_uploads(&cfg).unwrap());
        let up = Uploader::spawn(client, store, || {}).unwrap();
        // Each thread lowers itself as it starts: looked at until they have.
        let t0 = Instant::now();
        loop {
            let uploaders = threads_named("capsule-upload");
            let writers: Vec<u32> = threads_named("capsule-tier")
                .into_iter()
                .filter(|t| !readers.contains(t))
                .collect();
            let all: Vec<(u32, _)> = uploaders
                .iter()
                .chain(&writers)
                .map(|&t| (t, of(t)))
                .collect();
            if uploaders.len() == 1
                && !writers.is_empty()
                && all.iter().all(|(_, p)| *p == background)
            {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "uploader {uploaders:?}, its connections {writers:?}: {all:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        for &t in &readers {
            assert_ne!(
                of(t),
                background,
                "a reader's thread {t} after the writers' start"
            );
        }
        up.stop();
        drop(reader);
    }
}
