//! AF_XDP capture: the XDP program hands each RX queue's packets to an AF_XDP socket, one
//! worker thread per queue reads them, and the capture thread stores them.
//!
//! ```text
//! NIC queue q -> XDP program (capsule-bpf): metadata record (arrival time, stripped VLAN tag)
//!   -> XSKMAP[q] -> AF_XDP socket q (ring/xsk.rs: UMEM, fill and RX rings)
//!   -> worker q: time = metadata (monotonic + realtime offset, or the NIC's clock),
//!                VLAN tag put back, snap length, copied into a Batch (frames go straight back)
//!   -> bounded channel (full: the batch is dropped and counted as a pipeline drop, so a worker
//!      never waits on the disk)
//!   -> capture thread: StoreWriter::append, tick (blocks cut by age), counters once a second,
//!      stored as ISBs so a query can say what its window lost
//! ```
//!
//! [`XdpCapture::open`] tries native XDP, then generic, and within each the richest program
//! variant the kernel and driver accept (device kfuncs, multi-buffer); sockets try zero-copy,
//! then copy mode. It reports what it chose.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capsule_bpf::{Meta, Variant, XdpProgram};
use capsule_index::writer::MAX_PACKET;
use capsule_index::StoreWriter;
use capsule_pcap::{Interface, LINKTYPE_ETHERNET};
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use crate::live::{LiveError, LiveReport};
use crate::ring::xsk::{xdp_link, XdpAttach, XskConfig, XskMode, XskSocket, XskStats};
use crate::ring::{clock_ns, if_index, promiscuous};

/// Which RX queues to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queues {
    All,
    List(Vec<u32>),
}

/// How to capture with XDP.
#[derive(Debug, Clone)]
pub struct XdpConfig {
    pub iface: String,
    pub queues: Queues,
    /// Attach modes to try, in order.
    pub attach: Vec<XdpAttach>,
    pub socket: XskConfig,
    /// Bytes kept of each packet (0: all).
    pub snaplen: u32,
}

/// Counters of an XDP capture, summed over queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpCounters {
    /// The XDP program's counters.
    pub program: capsule_bpf::Counters,
    /// The sockets' XDP_STATISTICS.
    pub sockets: XskStats,
    /// Packets dropped because the store fell behind (a worker found the channel full).
    pub pipeline_drops: u64,
    /// RX descriptors outside the UMEM (never expected).
    pub bad_descs: u64,
}

impl XdpCounters {
    /// Every packet the interface saw but the store did not get, whatever the cause.
    pub fn drops(&self) -> u64 {
        self.sockets.rx_dropped
            + self.sockets.rx_ring_full
            + self.program.no_socket
            + self.pipeline_drops
            + self.bad_descs
    }
}

/// What `open` chose.
#[derive(Debug, Clone)]
pub struct XdpSetup {
    pub attach: XdpAttach,
    pub variant: Variant,
    pub socket_mode: XskMode,
    pub queues: Vec<u32>,
    pub frame_size: u32,
}

impl std::fmt::Display for XdpSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "XDP {} ({}), AF_XDP {} mode, queues {:?}, {}-byte frames{}",
            self.attach,
            self.variant,
            self.socket_mode,
            self.queues,
            self.frame_size,
            if self.variant.frags {
                ", multi-buffer"
            } else {
                ""
            }
        )
    }
}

/// An attached XDP capture, ready to run.
#[derive(Debug)]
pub struct XdpCapture {
    cfg: XdpConfig,
    setup: XdpSetup,
    program: XdpProgram,
    sockets: Vec<(u32, XskSocket)>,
    // Dropped in this order: the link detaches the program, then promiscuous mode ends.
    _link: OwnedFd,
    _promisc: OwnedFd,
}

impl XdpCapture {
    /// Loads and attaches the program and opens a socket per queue, trying the modes in
    /// `cfg.attach` and the program variants richest first. The error lists every attempt.
    pub fn open(cfg: XdpConfig) -> Result<XdpCapture, LiveError> {
        let open_err = |error: std::io::Error| LiveError::Open {
            iface: cfg.iface.clone(),
            error,
        };
        let ifindex = if_index(&cfg.iface).map_err(open_err)?;
        let queues = match &cfg.queues {
            Queues::List(q) => q.clone(),
            Queues::All => (0..rx_queue_count(&cfg.iface)).collect(),
        };
        let mut attempts = Vec::new();
        for &attach in &cfg.attach {
            for variant in Variant::preference() {
                match try_open(ifindex, &queues, attach, variant, &cfg.socket) {
                    Ok((program, sockets, link)) => {
                        let promisc = promiscuous(ifindex).map_err(open_err)?;
                        let setup = XdpSetup {
                            attach,
                            variant,
                            socket_mode: sockets[0].1.mode(),
                            queues,
                            frame_size: cfg.socket.frame_size,
                        };
                        for a in &attempts {
                            tracing::debug!("XDP attempt refused: {a}");
                        }
                        return Ok(XdpCapture {
                            cfg,
                            setup,
                            program,
                            sockets,
                            _link: link,
                            _promisc: promisc,
                        });
                    }
                    Err(e) => attempts.push(format!("{attach} {variant}: {e}")),
                }
            }
        }
        Err(open_err(std::io::Error::other(format!(
            "no XDP mode worked: {}",
            attempts.join("; ")
        ))))
    }

    pub fn setup(&self) -> &XdpSetup {
        &self.setup
    }

    /// Captures into `writer` until `stop` is set; `on_stats` sees the running totals about
    /// once a second.
    pub fn run(
        self,
        writer: &mut StoreWriter,
        stop: &AtomicBool,
        mut on_stats: impl FnMut(&LiveReport),
    ) -> Result<LiveReport, LiveError> {
        let XdpCapture {
            cfg,
            setup: _,
            program,
            sockets,
            _link,
            _promisc,
        } = self;
        let iface = writer.add_interface(Interface {
            linktype: LINKTYPE_ETHERNET,
            snaplen: cfg.snaplen,
            name: Some(cfg.iface.clone()),
        });
        let store_err = |e| LiveError::Store {
            iface: cfg.iface.clone(),
            error: Box::new(e),
        };
        // Room for about half a second of batches at full speed before workers drop.
        let (full_tx, full_rx) = bounded::<Batch>(64 * sockets.len().max(1));
        let (free_tx, free_rx) = bounded::<Batch>(64 * sockets.len().max(1));
        let workers_stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for (queue, sock) in sockets {
            let shared = Arc::new(QueueShared::default());
            let w = Worker {
                queue,
                sock,
                snaplen: cfg.snaplen,
                full: full_tx.clone(),
                free: free_rx.clone(),
                stop: workers_stop.clone(),
                shared: shared.clone(),
            };
            let handle = std::thread::Builder::new()
                .name(format!("xsk-q{queue}"))
                .spawn(move || w.run())
                .map_err(|error| LiveError::Open {
                    iface: cfg.iface.clone(),
                    error,
                })?;
            workers.push((queue, shared, handle));
        }
        drop(full_tx);

        let mut rep = LiveReport::default();
        let mut last_stats = Instant::now();
        let mut recorded: Option<(Instant, u64)> = None;
        let mut stopping = false;
        let mut result = Ok(());
        loop {
            if !stopping && stop.load(Ordering::Relaxed) {
                stopping = true;
                workers_stop.store(true, Ordering::Relaxed);
            }
            match full_rx.recv_timeout(Duration::from_millis(20)) {
                Ok(batch) => {
                    if result.is_ok() {
                        if let Err(e) = store_batch(writer, iface, &batch, &mut rep) {
                            // Stop capturing; the caller seals what was stored.
                            result = Err(store_err(e));
                            stop_all(&workers_stop, &mut stopping);
                        }
                    }
                    let _ = free_tx.try_send(batch.recycled());
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                // Every worker has finished and the channel is drained.
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
            if result.is_ok() {
                if let Err(e) = writer.tick() {
                    result = Err(store_err(e));
                    stop_all(&workers_stop, &mut stopping);
                }
            }
            if last_stats.elapsed() >= Duration::from_secs(1) {
                last_stats = Instant::now();
                if let Some(e) = workers
                    .iter()
                    .find_map(|(_, s, _)| s.error.lock().ok()?.take())
                {
                    result = Err(LiveError::Ring {
                        iface: cfg.iface.clone(),
                        error: e,
                    });
                    stop_all(&workers_stop, &mut stopping);
                }
                let shared: Vec<Arc<QueueShared>> =
                    workers.iter().map(|(_, s, _)| s.clone()).collect();
                rep.xdp = Some(sum_counters(&program, &shared, rep.xdp));
                let drops = rep.drops();
                if result.is_ok()
                    && recorded
                        .is_none_or(|(at, d)| d != drops || at.elapsed() >= Duration::from_secs(60))
                {
                    if let Err(e) = record(writer, iface, &rep) {
                        result = Err(store_err(e));
                        stop_all(&workers_stop, &mut stopping);
                    }
                    recorded = Some((Instant::now(), drops));
                }
                on_stats(&rep);
            }
        }
        let shared: Vec<Arc<QueueShared>> = workers.iter().map(|(_, s, _)| s.clone()).collect();
        for (queue, _, handle) in workers {
            if handle.join().is_err() {
                tracing::error!("the worker of queue {queue} panicked");
            }
        }
        // Final counters, published by the workers as they stopped.
        rep.xdp = Some(sum_counters(&program, &shared, rep.xdp));
        if result.is_ok() {
            record(writer, iface, &rep).map_err(store_err)?;
        }
        on_stats(&rep);
        result.map(|()| rep)
    }
}

fn stop_all(flag: &AtomicBool, stopping: &mut bool) {
    *stopping = true;
    flag.store(true, Ordering::Relaxed);
}

fn record(
    writer: &mut StoreWriter,
    iface: u32,
    rep: &LiveReport,
) -> Result<(), capsule_index::StoreError> {
    writer.record_stats(
        iface,
        capsule_index::store::now_ns(),
        Some(rep.seen()),
        Some(rep.drops()),
    )
}

fn store_batch(
    writer: &mut StoreWriter,
    iface: u32,
    batch: &Batch,
    rep: &mut LiveReport,
) -> Result<(), capsule_index::StoreError> {
    for p in &batch.packets {
        let data = &batch.data[p.off..p.off + p.caplen as usize];
        writer.append(iface, p.ts_ns, p.wire_len, data)?;
        rep.packets += 1;
        rep.wire_bytes += u64::from(p.wire_len);
    }
    rep.vlan_restored += batch.vlan_restored;
    rep.truncated += batch.truncated;
    Ok(())
}

fn sum_counters(
    program: &XdpProgram,
    workers: &[Arc<QueueShared>],
    prev: Option<XdpCounters>,
) -> XdpCounters {
    let mut c = prev.unwrap_or_default();
    if let Ok(p) = program.counters() {
        c.program = p;
    }
    let mut s = XskStats::default();
    let (mut pipeline, mut bad) = (0, 0);
    for q in workers {
        s.rx_dropped += q.rx_dropped.load(Ordering::Relaxed);
        s.rx_invalid_descs += q.rx_invalid_descs.load(Ordering::Relaxed);
        s.rx_ring_full += q.rx_ring_full.load(Ordering::Relaxed);
        s.rx_fill_ring_empty_descs += q.rx_fill_empty.load(Ordering::Relaxed);
        pipeline += q.pipeline_drops.load(Ordering::Relaxed);
        bad += q.bad_descs.load(Ordering::Relaxed);
    }
    c.sockets = s;
    c.pipeline_drops = pipeline;
    c.bad_descs = bad;
    c
}

/// Number of RX queues of `iface` (from sysfs; 1 when it cannot tell).
pub fn rx_queue_count(iface: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .max(1)
}

/// The interface's MTU from sysfs.
pub fn mtu(iface: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

type Opened = (XdpProgram, Vec<(u32, XskSocket)>, OwnedFd);

fn try_open(
    ifindex: u32,
    queues: &[u32],
    attach: XdpAttach,
    variant: Variant,
    sock_cfg: &XskConfig,
) -> Result<Opened, String> {
    let program = XdpProgram::load(ifindex, variant).map_err(|e| e.to_string())?;
    let cfg = XskConfig {
        multi_buffer: variant.frags,
        ..*sock_cfg
    };
    // Sockets first, then the link: no packet is redirected before its socket exists.
    let mut sockets = Vec::new();
    for &q in queues {
        let s = XskSocket::open(ifindex, q, &cfg).map_err(|e| format!("queue {q}: {e}"))?;
        program
            .bind_socket(q, s.as_fd())
            .map_err(|e| e.to_string())?;
        sockets.push((q, s));
    }
    let link = xdp_link(program.prog_fd(), ifindex, attach).map_err(|e| e.to_string())?;
    Ok((program, sockets, link))
}

/// Packets copied out of the UMEM by a worker, handed to the capture thread.
#[derive(Debug, Default)]
struct Batch {
    data: Vec<u8>,
    packets: Vec<BatchPacket>,
    vlan_restored: u64,
    truncated: u64,
}

#[derive(Debug, Clone, Copy)]
struct BatchPacket {
    ts_ns: u64,
    wire_len: u32,
    off: usize,
    caplen: u32,
}

const BATCH_BYTES: usize = 256 * 1024;
const BATCH_PACKETS: usize = 1024;

impl Batch {
    fn recycled(mut self) -> Batch {
        self.data.clear();
        self.packets.clear();
        self.vlan_restored = 0;
        self.truncated = 0;
        self
    }

    fn is_full(&self) -> bool {
        self.data.len() >= BATCH_BYTES || self.packets.len() >= BATCH_PACKETS
    }
}

/// Counters a worker publishes for the capture thread.
#[derive(Debug, Default)]
struct QueueShared {
    rx_dropped: AtomicU64,
    rx_invalid_descs: AtomicU64,
    rx_ring_full: AtomicU64,
    rx_fill_empty: AtomicU64,
    pipeline_drops: AtomicU64,
    bad_descs: AtomicU64,
    error: std::sync::Mutex<Option<std::io::Error>>,
}

struct Worker {
    queue: u32,
    sock: XskSocket,
    snaplen: u32,
    full: Sender<Batch>,
    free: Receiver<Batch>,
    stop: Arc<AtomicBool>,
    shared: Arc<QueueShared>,
}

impl Worker {
    fn run(mut self) {
        let snap = if self.snaplen == 0 {
            MAX_PACKET
        } else {
            (self.snaplen as usize).min(MAX_PACKET)
        };
        let mut batch = Batch::default();
        let mut batch_started = Instant::now();
        // Realtime minus monotonic, refreshed every 100 ms (follows NTP steps within that).
        let mut offset = clock_ns(true).wrapping_sub(clock_ns(false));
        let mut offset_at = Instant::now();
        let mut last_stats = Instant::now();
        let mut idle: u32 = 0;
        let mut drained_after_stop = 0;
        loop {
            if offset_at.elapsed() >= Duration::from_millis(100) {
                offset = clock_ns(true).wrapping_sub(clock_ns(false));
                offset_at = Instant::now();
            }
            let got = self.sock.recv(256, |p| {
                add_packet(&mut batch, &p, snap, offset);
            });
            let n = match got {
                Ok(n) => n,
                Err(e) => {
                    self.fail(e);
                    break;
                }
            };
            if batch.packets.len() == 1 && n > 0 {
                batch_started = Instant::now();
            }
            let stopping = self.stop.load(Ordering::Relaxed);
            if !batch.packets.is_empty()
                && (batch.is_full()
                    || n == 0
                    || batch_started.elapsed() >= Duration::from_millis(5))
            {
                let next = self.free.try_recv().unwrap_or_default();
                let full = std::mem::replace(&mut batch, next);
                self.send(full, stopping);
                batch_started = Instant::now();
            }
            if last_stats.elapsed() >= Duration::from_millis(500) {
                self.publish_stats();
                last_stats = Instant::now();
            }
            if n == 0 {
                if stopping {
                    // Stopping: the ring is empty; look twice more for packets in flight.
                    drained_after_stop += 1;
                    if drained_after_stop >= 3 {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                // Back off while idle instead of spinning (a core) or sleeping in poll (slow
                // to wake): a few yields, then short sleeps growing to 200 µs.
                idle = idle.saturating_add(1);
                if idle < 8 {
                    std::thread::yield_now();
                } else {
                    let us = (10u64 << ((idle - 8).min(5))).min(200);
                    std::thread::sleep(Duration::from_micros(us));
                }
            } else {
                idle = 0;
            }
        }
        if !batch.packets.is_empty() {
            self.send(batch, true);
        }
        self.publish_stats();
        if self.sock.bad_descs > 0 {
            tracing::warn!(
                "queue {}: {} RX descriptors pointed outside the UMEM",
                self.queue,
                self.sock.bad_descs
            );
        }
    }

    /// Hands a batch to the capture thread. While capturing, never wait: a full channel means
    /// the store is behind, and the batch is dropped and counted. While stopping, wait, so
    /// nothing already read is lost.
    fn send(&self, batch: Batch, wait: bool) {
        let n = batch.packets.len() as u64;
        let sent = if wait {
            self.full.send(batch).is_ok()
        } else {
            match self.full.try_send(batch) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
            }
        };
        if !sent {
            self.shared.pipeline_drops.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn publish_stats(&self) {
        match self.sock.stats() {
            Ok(s) => {
                let q = &self.shared;
                q.rx_dropped.store(s.rx_dropped, Ordering::Relaxed);
                q.rx_invalid_descs
                    .store(s.rx_invalid_descs, Ordering::Relaxed);
                q.rx_ring_full.store(s.rx_ring_full, Ordering::Relaxed);
                q.rx_fill_empty
                    .store(s.rx_fill_ring_empty_descs, Ordering::Relaxed);
                q.bad_descs.store(self.sock.bad_descs, Ordering::Relaxed);
            }
            Err(e) => self.fail(std::io::Error::new(
                e.kind(),
                format!("AF_XDP socket of queue {}: {e}", self.queue),
            )),
        }
    }

    fn fail(&self, e: std::io::Error) {
        if let Ok(mut slot) = self.shared.error.lock() {
            slot.get_or_insert(e);
        }
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copies one packet into the batch: its time from the metadata record, the VLAN tag the NIC
/// stripped put back after the MAC addresses, cut to the snap length.
fn add_packet(batch: &mut Batch, p: &crate::ring::xsk::XskPacket<'_>, snap: usize, offset: u64) {
    let meta = p.meta.as_ref().and_then(Meta::parse);
    let ts_ns = match meta {
        Some(m) if m.hw_ts => m.ts_ns,
        Some(m) => m.ts_ns.wrapping_add(offset),
        None => clock_ns(true),
    };
    let off = batch.data.len();
    let mut wire = p.data.len();
    match meta.and_then(|m| m.vlan) {
        Some((tpid, tci)) if p.data.len() >= 12 => {
            wire += 4;
            let keep = wire.min(snap);
            batch.data.extend_from_slice(&p.data[..12.min(keep)]);
            if keep > 12 {
                let tag = [(tpid >> 8) as u8, tpid as u8, (tci >> 8) as u8, tci as u8];
                batch.data.extend_from_slice(&tag[..(keep - 12).min(4)]);
            }
            if keep > 16 {
                batch.data.extend_from_slice(&p.data[12..keep - 4]);
            }
            batch.vlan_restored += 1;
        }
        _ => batch
            .data
            .extend_from_slice(&p.data[..p.data.len().min(snap)]),
    }
    if p.cut || (wire > MAX_PACKET && snap >= MAX_PACKET) {
        batch.truncated += 1;
    }
    batch.packets.push(BatchPacket {
        ts_ns,
        wire_len: wire as u32,
        off,
        caplen: (batch.data.len() - off) as u32,
    });
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("queue", &self.queue)
            .finish()
    }
}
