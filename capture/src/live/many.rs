//! Several interfaces into one store: a reader thread per interface, one shared writer.
//!
//! ```text
//! interface a: its backend (AF_XDP or AF_PACKET, its own ladder) on thread `cap-a`
//!   -> SharedSink: packets copied into a local batch (up to 256 KiB)
//!   -> at every tick (each pass of the backend's loop, at most 20 ms apart), when the batch
//!      is full, and before an ISB: the writer's mutex taken, the batch appended, tick
//! interface b: the same on thread `cap-b`
//! StoreWriter (one producer): lanes, blocks, compressors, disk as for one interface
//! the calling thread: once a second, every interface's running totals to `on_stats`
//! ```
//!
//! Each interface keeps its own store interface (pcapng IDB: name, link type, ns time), its
//! own counters and ISBs, and its own mode. A reader that fails (its interface went away)
//! ends alone, its error kept; a store error ends them all (the writer cannot go on).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use capsule_pcap::Interface;
use capsule_store::writer::PressureGauge;
use capsule_store::{StoreError, StoreWriter};

use super::{Capture, IfaceState, LiveError, LiveReport, Sink};

/// Bytes of packets a reader gathers before it takes the writer's lock.
const BATCH_BYTES: usize = 256 << 10;

/// One reader's share of the writer: a batch of packets appended under the lock.
pub(crate) struct SharedSink<'w, 's> {
    writer: &'w Mutex<&'s mut StoreWriter>,
    urgent: Arc<AtomicU32>,
    gauge: PressureGauge,
    /// This reader's ISBs carry the store-wide disk-full drops (the first interface's only,
    /// so an export summing its interfaces' ISBs counts them once).
    disk_full: bool,
    data: Vec<u8>,
    packets: Vec<Pending>,
}

struct Pending {
    iface: u32,
    ts_ns: u64,
    orig_len: u32,
    off: usize,
    len: usize,
}

impl<'w, 's> SharedSink<'w, 's> {
    fn new(writer: &'w Mutex<&'s mut StoreWriter>, disk_full: bool) -> Self {
        let (urgent, gauge) = {
            let w = lock(writer);
            (w.urgency(), w.pressure_gauge())
        };
        SharedSink {
            writer,
            urgent,
            gauge,
            disk_full,
            data: Vec::with_capacity(BATCH_BYTES + 65_536),
            packets: Vec::new(),
        }
    }

    /// Appends the gathered packets to the writer (taking its lock).
    fn flush(&mut self) -> Result<MutexGuard<'w, &'s mut StoreWriter>, StoreError> {
        let mut w = lock(self.writer);
        let mut result = Ok(());
        for p in self.packets.drain(..) {
            if result.is_ok() {
                let data = &self.data[p.off..p.off + p.len];
                result = w.append(p.iface, p.ts_ns, p.orig_len, data);
            }
        }
        self.data.clear();
        result.map(|()| w)
    }
}

/// The writer, also when a reader panicked holding it: its state is only changed by
/// `StoreWriter`'s own methods, each of which leaves it whole or returns an error.
fn lock<'w, 's>(m: &'w Mutex<&'s mut StoreWriter>) -> MutexGuard<'w, &'s mut StoreWriter> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sink for SharedSink<'_, '_> {
    fn add_interface(&mut self, iface: Interface) -> u32 {
        lock(self.writer).add_interface(iface)
    }

    fn append(
        &mut self,
        iface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Result<(), StoreError> {
        if self.data.len() + data.len() > BATCH_BYTES && !self.packets.is_empty() {
            drop(self.flush()?);
        }
        self.packets.push(Pending {
            iface,
            ts_ns,
            orig_len,
            off: self.data.len(),
            len: data.len(),
        });
        self.data.extend_from_slice(data);
        Ok(())
    }

    fn tick(&mut self) -> Result<(), StoreError> {
        self.flush()?.tick()
    }

    fn urgency(&self) -> Arc<AtomicU32> {
        self.urgent.clone()
    }

    fn disk_full_drops(&self) -> u64 {
        if self.disk_full {
            self.gauge.disk_full_drops()
        } else {
            0
        }
    }

    fn record_stats(
        &mut self,
        iface: u32,
        ts_ns: u64,
        received: Option<u64>,
        dropped: Option<u64>,
    ) -> Result<(), StoreError> {
        self.flush()?.record_stats(iface, ts_ns, received, dropped)
    }
}

/// Runs every capture into `writer`, each on a thread of its own, until `stop` is set or
/// every reader has ended; `on_stats` sees each interface's state about once a second (on the
/// calling thread). Returns each capture's result, in order.
pub(crate) fn run_many(
    captures: Vec<Capture>,
    writer: &mut StoreWriter,
    stop: &AtomicBool,
    mut on_stats: impl FnMut(&[IfaceState]),
) -> Vec<Result<LiveReport, LiveError>> {
    let n = captures.len();
    let states: Mutex<Vec<IfaceState>> = Mutex::new(
        captures
            .iter()
            .map(|c| IfaceState {
                iface: c.iface.clone(),
                description: c.description.clone(),
                method: Some(c.method.clone()),
                report: LiveReport::default(),
                error: None,
            })
            .collect(),
    );
    let shared = Mutex::new(writer);
    // The readers' own stop: the caller's, or a store error (the writer cannot go on).
    let halt = AtomicBool::new(false);
    let done: Vec<AtomicBool> = (0..n).map(|_| AtomicBool::new(false)).collect();
    // Counts the readers' reports: `on_stats` runs only when one came in since its last
    // call, so a watchdog pinged from it stops when every reader is wedged (e.g. on a store
    // that no longer takes packets), as it does with one interface.
    let published = AtomicU64::new(0);
    let snapshot = |states: &Mutex<Vec<IfaceState>>| {
        states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect::<Vec<_>>()
    };
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(n);
        for (i, cap) in captures.into_iter().enumerate() {
            let (shared, halt, states, finished) = (&shared, &halt, &states, &done[i]);
            let published = &published;
            let name = format!("cap-{}", cap.iface);
            let spawned = std::thread::Builder::new()
                .name(name)
                .spawn_scoped(scope, move || {
                    let mut sink = SharedSink::new(shared, i == 0);
                    let publish = |r: &LiveReport| {
                        states.lock().unwrap_or_else(|e| e.into_inner())[i].report = r.clone();
                        published.fetch_add(1, Ordering::Relaxed);
                    };
                    let iface = cap.iface.clone();
                    let mut result = cap.run_into(&mut sink, halt, publish);
                    // What the reader gathered after its last tick.
                    if let Err(e) = sink.flush() {
                        if result.is_ok() {
                            result = Err(LiveError::store(&iface, e));
                        }
                    }
                    if let Err(e) = &result {
                        let text = capsule_store::error::chain(e);
                        tracing::error!("capture on {iface} stopped: {text}");
                        states.lock().unwrap_or_else(|e| e.into_inner())[i].error = Some(text);
                        if matches!(e, LiveError::Store { .. }) {
                            halt.store(true, Ordering::Relaxed);
                        }
                    }
                    finished.store(true, Ordering::Release);
                    result
                });
            if spawned.is_err() {
                done[i].store(true, Ordering::Release);
            }
            handles.push(spawned);
        }
        let mut last = Instant::now();
        let mut seen = 0;
        loop {
            if stop.load(Ordering::Relaxed) {
                halt.store(true, Ordering::Relaxed);
            }
            if done.iter().all(|d| d.load(Ordering::Acquire)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            let now_published = published.load(Ordering::Relaxed);
            // Each reader reports about once a second: pass on what came in, at most twice
            // a second, so the status lags a reader's report by half a second at most.
            if last.elapsed() >= Duration::from_millis(500) && now_published != seen {
                last = Instant::now();
                seen = now_published;
                on_stats(&snapshot(&states));
            }
        }
        let results: Vec<Result<LiveReport, LiveError>> = handles
            .into_iter()
            .zip(snapshot(&states))
            .map(|(h, st)| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(LiveError::ring(
                        &st.iface,
                        std::io::Error::other("its capture thread panicked"),
                    ))
                }),
                Err(e) => Err(LiveError::ring(&st.iface, e)),
            })
            .collect();
        on_stats(&snapshot(&states));
        results
    })
}
