//! The index scrubber: a background thread of every store writer (so of a running capture
//! too) that finds sealed segments whose side index is missing, damaged or stale, and
//! rebuilds it from the segment at the lowest CPU priority.
//!
//! A writer brings every index up to date when it opens the store
//! ([`capsule_store::Indexer::reconcile`]); the scrubber covers what happens after that: an
//! index deleted or damaged (a flipped byte, a truncation) while capture runs, which would
//! otherwise leave that segment planned as a scan until the next restart.
//!
//! ```text
//! every interval (10 s):
//!   list sealed segments
//!   for each whose index or segment changed since last seen (length, mtime),
//!   and one more in turn (bit rot changes no mtime):
//!     is_current(index, segment)?  yes: remember it
//!     no: rebuild from the segment (nothing locked)
//!         lock `writes`; the segment is still the one read? write the index; unlock
//! ```
//!
//! `writes` is the lock the writer thread holds while it writes or deletes an index (seal,
//! compaction, retention), so a rebuild never overwrites a newer index, and never leaves an
//! index behind for a segment retention deleted. A segment modified in the last interval is
//! left alone: its writer indexes it right after sealing or compacting it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use capsule_store::{SegmentReader, SegmentState, Store};

use crate::sideindex::{index_name, rebuild, SegmentIndex};

/// How often the scrubber looks.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// The running scrubber thread; dropping it stops the thread (after the segment in hand).
#[derive(Debug)]
pub(crate) struct Scrubber {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Scrubber {
    /// Starts the scrubber of `store`, looking every `interval`. `writes` is the writer
    /// thread's index write lock.
    pub(crate) fn spawn(
        store: Store,
        writes: Arc<Mutex<()>>,
        interval: Duration,
    ) -> Option<Scrubber> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("capsule-scrub".into())
            .spawn(move || run(&store, &writes, interval, &flag));
        match thread {
            Ok(t) => Some(Scrubber {
                stop,
                thread: Some(t),
            }),
            Err(e) => {
                tracing::warn!("cannot start the index scrubber: {e}");
                None
            }
        }
    }
}

impl Drop for Scrubber {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// What was last seen of a segment and its index: when both are unchanged, the index is not
/// read again (except in turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    segment: (u64, Option<SystemTime>),
    index: Option<(u64, Option<SystemTime>)>,
}

fn stamp_of(path: &Path) -> Option<(u64, Option<SystemTime>)> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.len(), m.modified().ok()))
}

fn run(store: &Store, writes: &Mutex<()>, interval: Duration, stop: &AtomicBool) {
    capsule_store::writer::lower_thread_priority("index scrubber");
    let mut seen: HashMap<u64, Stamp> = HashMap::new();
    let mut turn = 0usize;
    loop {
        std::thread::park_timeout(interval);
        if stop.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = pass(store, writes, interval, stop, &mut seen, &mut turn) {
            tracing::debug!("index scrub pass: {}", capsule_store::error::chain(&e));
        }
    }
}

/// One look at every sealed segment. Returns the segments whose index it rebuilt.
fn pass(
    store: &Store,
    writes: &Mutex<()>,
    interval: Duration,
    stop: &AtomicBool,
    seen: &mut HashMap<u64, Stamp>,
    turn: &mut usize,
) -> capsule_store::Result<Vec<u64>> {
    let dir = store.index_dir();
    let sealed: Vec<_> = store
        .list()?
        .into_iter()
        .filter(|e| e.state == SegmentState::Sealed)
        .collect();
    seen.retain(|seq, _| sealed.iter().any(|e| e.seq == *seq));
    let in_turn = if sealed.is_empty() {
        None
    } else {
        *turn = (*turn + 1) % sealed.len();
        Some(sealed[*turn].seq)
    };
    let mut rebuilt = Vec::new();
    for e in &sealed {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Some(segment) = stamp_of(&e.path) else {
            continue; // deleted by retention meanwhile
        };
        let stamp = Stamp {
            segment,
            index: stamp_of(&dir.join(index_name(e.seq))),
        };
        if seen.get(&e.seq) == Some(&stamp) && in_turn != Some(e.seq) {
            continue;
        }
        // Just sealed or compacted: its writer is writing its index.
        let recent = segment
            .1
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age < interval);
        if recent {
            continue;
        }
        seen.insert(e.seq, stamp);
        let seg = match SegmentReader::open(&e.path) {
            Ok(seg) => seg,
            // A damaged segment is named by queries and `verify`; nothing to rebuild from.
            Err(_) => continue,
        };
        if SegmentIndex::is_current(&dir, &seg) {
            continue;
        }
        let idx = match rebuild(&dir, &seg) {
            Ok(idx) => idx,
            Err(err) => {
                tracing::warn!(
                    "the side index of segment {} cannot be rebuilt: {}",
                    e.seq,
                    capsule_store::error::chain(&err)
                );
                continue;
            }
        };
        let _guard = writes.lock().unwrap_or_else(|p| p.into_inner());
        // Still the file that was read, and not indexed by the writer meanwhile.
        if stamp_of(&e.path) != Some(segment) || SegmentIndex::is_current(&dir, &seg) {
            continue;
        }
        idx.write(&dir)?;
        tracing::warn!(
            "segment {}: its side index was missing, damaged or stale; rebuilt it in the \
             background",
            e.seq
        );
        seen.insert(
            e.seq,
            Stamp {
                segment,
                index: stamp_of(&dir.join(index_name(e.seq))),
            },
        );
        rebuilt.push(e.seq);
    }
    Ok(rebuilt)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sideindex::tests::{tcp4, A, B};
    use capsule_pcap::Interface;
    use capsule_store::WriterConfig;

    const S: u64 = 1_000_000_000;

    pub(crate) fn cfg() -> WriterConfig {
        WriterConfig {
            block_bytes: 4096,
            segment_age: Duration::from_secs(10),
            threads: 1,
            ..WriterConfig::default()
        }
    }

    /// A store with two sealed segments (and an open one) written through the side indexer.
    pub(crate) fn store_with_two_sealed(root: &Path) -> Store {
        let (mut w, _) = crate::open_writer(root, cfg()).unwrap();
        let ifc = w.add_interface(Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        });
        for seg in 0..3u64 {
            for i in 0..20u64 {
                let f = tcp4(
                    None,
                    A,
                    B,
                    40000,
                    80,
                    1 + 100 * i as u32,
                    0x18,
                    1000,
                    100,
                    0,
                );
                w.append(ifc, (20 * seg + 1) * S + i, f.len() as u32, &f)
                    .unwrap();
            }
            w.flush().unwrap();
        }
        w.finish().unwrap();
        Store::open(root).unwrap()
    }

    pub(crate) fn sealed(store: &Store) -> Vec<u64> {
        let list = store.list().unwrap();
        list.iter()
            .filter(|e| e.state == SegmentState::Sealed)
            .map(|e| e.seq)
            .collect()
    }

    #[test]
    fn rebuilds_a_damaged_and_a_missing_index_and_leaves_good_ones() {
        let d = tempfile::tempdir().unwrap();
        let store = store_with_two_sealed(d.path());
        let dir = store.index_dir();
        let segs = sealed(&store);
        assert!(segs.len() >= 2, "{segs:?}");
        let good: Vec<Vec<u8>> = segs
            .iter()
            .map(|seq| std::fs::read(dir.join(index_name(*seq))).unwrap())
            .collect();
        // Damage the first index's body, delete the second.
        let mut bytes = good[0].clone();
        let n = bytes.len();
        bytes[n - 3] ^= 0x40;
        std::fs::write(dir.join(index_name(segs[0])), &bytes).unwrap();
        std::fs::remove_file(dir.join(index_name(segs[1]))).unwrap();

        let writes = Mutex::new(());
        let stop = AtomicBool::new(false);
        let mut seen = HashMap::new();
        let mut turn = 0;
        let rebuilt = pass(&store, &writes, Duration::ZERO, &stop, &mut seen, &mut turn).unwrap();
        assert_eq!(rebuilt, segs[..2].to_vec());
        for (seq, want) in segs.iter().zip(&good) {
            assert_eq!(&std::fs::read(dir.join(index_name(*seq))).unwrap(), want);
        }
        // Nothing more to do: a second pass rebuilds nothing.
        let again = pass(&store, &writes, Duration::ZERO, &stop, &mut seen, &mut turn).unwrap();
        assert!(again.is_empty());
    }

    #[test]
    fn a_segment_just_written_is_left_to_its_writer() {
        let d = tempfile::tempdir().unwrap();
        let store = store_with_two_sealed(d.path());
        let dir = store.index_dir();
        let seq = sealed(&store)[0];
        std::fs::remove_file(dir.join(index_name(seq))).unwrap();
        let rebuilt = pass(
            &store,
            &Mutex::new(()),
            Duration::from_secs(3600),
            &AtomicBool::new(false),
            &mut HashMap::new(),
            &mut 0,
        )
        .unwrap();
        assert!(rebuilt.is_empty());
        assert!(!dir.join(index_name(seq)).exists());
    }
}
