//! AF_XDP capture: the XDP program hands each RX queue's packets to an AF_XDP socket, one
//! worker thread per queue reads them, and the capture thread stores them.
//!
//! ```text
//! NIC queue q -> XDP program (capsule-bpf): metadata record (arrival time, stripped VLAN tag)
//!   -> XSKMAP[q] -> AF_XDP socket q (capsule-sys, xsk.rs: UMEM, fill and RX rings)
//!   -> worker q: time = metadata (monotonic + realtime offset, or the NIC's clock),
//!                VLAN tag put back, snap length, copied into a Batch (frames go straight back)
//!   -> bounded channel (full: the batch is dropped and counted as a pipeline drop, so a worker
//!      never waits on the disk)
//!   -> capture thread: Sink::append (the StoreWriter, or its share of it), tick (blocks cut by age), counters once a second,
//!      stored as ISBs so a query can say what its window lost
//! ```
//!
//! [`XdpCapture::open`] tries the attach modes it is given (native, then generic, as
//! `super::open` asks), and within each the richest program variant the kernel and driver
//! accept (device kfuncs, multi-buffer); sockets try zero-copy, then copy mode. It reports what
//! it chose ([`XdpSetup`], the capture's description).

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capsule_bpf::{Carrier, Meta, Variant, XdpProgram};
use capsule_store::StoreError;
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use super::state;
use super::{
    record, with_vlan_tag, Behind, CaptureConfig, CaptureMethod, LiveError, LiveReport, Queues,
    Sink, Snap, StatsTimer, TimestampSource, XdpCounters, XskStats,
};
use capsule_store::error::chain as error_chain;
use capsule_sys::link::{xdp_link, XdpAttach};
use capsule_sys::xsk::{XskConfig, XskMode, XskPacket, XskSocket};
use capsule_sys::{clock_ns, if_index, promiscuous, rx_vlan_offload};

/// Frames per queue for a UMEM budget of `bytes` over `queues` queues: the largest power of
/// two that fits the share, at least 16384 (the kernel rings' floor capsule keeps) and at
/// most 2^20.
fn frames_per_queue(bytes: u64, frame_size: u32, queues: usize) -> u32 {
    let share = bytes / u64::from(frame_size.max(1)) / queues.max(1) as u64;
    let floor = if share == 0 {
        0
    } else {
        63 - share.leading_zeros()
    };
    1u32 << floor.clamp(14, 20)
}

/// What `open` chose.
#[derive(Debug, Clone)]
pub(crate) struct XdpSetup {
    attach: XdpAttach,
    variant: Variant,
    socket_mode: XskMode,
    queues: Vec<u32>,
    frame_size: u32,
    /// UMEM frames (and fill and RX ring entries) per queue.
    frames: u32,
}

impl XdpSetup {
    /// Where packet times come from with this program variant.
    pub(crate) fn timestamps(&self) -> TimestampSource {
        match (self.variant.carrier, self.variant.device_bound) {
            (Carrier::None, _) => TimestampSource::RingRead,
            (_, true) => TimestampSource::NicOrXdpEntry,
            (_, false) => TimestampSource::XdpEntry,
        }
    }

    pub(crate) fn method(&self) -> CaptureMethod {
        CaptureMethod {
            backend: "af_xdp".into(),
            xdp_mode: Some(self.attach.to_string()),
            xdp_program: Some(self.variant.program_name().to_string()),
            xdp_carrier: Some(self.variant.carrier),
            socket_mode: Some(self.socket_mode.to_string()),
            timestamps: self.timestamps(),
        }
    }
}

impl std::fmt::Display for XdpSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "XDP {} ({}: {}, timestamps: {}), AF_XDP {} mode, queues {:?}, {} x {}-byte frames \
             ({} MiB) a queue{}",
            self.attach,
            self.variant,
            self.variant.carrier.describe(),
            self.timestamps().describe(),
            self.socket_mode,
            self.queues,
            self.frames,
            self.frame_size,
            (u64::from(self.frames) * u64::from(self.frame_size)) >> 20,
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
pub(crate) struct XdpCapture {
    iface: String,
    snaplen: u32,
    snap: Snap,
    setup: XdpSetup,
    program: XdpProgram,
    sockets: Vec<(u32, XskSocket)>,
    /// Per-queue counters published by the workers (several queues only).
    shared: Vec<Arc<QueueShared>>,
    // Dropped in this order: the link detaches the program, then promiscuous mode ends.
    _link: OwnedFd,
    _promisc: OwnedFd,
    _vlan_offload: Option<VlanOffload>,
}

/// Receive VLAN offload turned off by capsule, turned back on when dropped. The change is
/// recorded in the store first (see [`super::state`]), so a kill -9 leaves a record the next
/// start restores from.
#[derive(Debug)]
struct VlanOffload {
    iface: String,
    state_dir: Option<PathBuf>,
}

impl VlanOffload {
    /// With receive VLAN offload on, the NIC strips 802.1Q tags into metadata, where the XDP
    /// program sees them only through a driver kfunc that few drivers have; turning the
    /// offload off leaves the tags in the frame, where capture keeps them.
    fn turn_off(iface: &str, variant: Variant, state_dir: Option<&Path>) -> Option<VlanOffload> {
        match rx_vlan_offload(iface, None) {
            Ok(false) => None,
            Ok(true) => {
                if let Some(dir) = state_dir {
                    let change = state::Changed {
                        iface: iface.to_string(),
                        rxvlan_was: true,
                    };
                    if let Err(e) = state::record(dir, change) {
                        tracing::warn!(
                            "receive VLAN offload stays on for {iface}: cannot record the \
                             change in {} ({}), so a crash could not undo it; VLAN tags the \
                             NIC strips may be missing from stored frames",
                            dir.join(state::STATE_FILE).display(),
                            error_chain(&e)
                        );
                        return None;
                    }
                }
                match rx_vlan_offload(iface, Some(false)) {
                    Ok(_) => {
                        tracing::info!(
                            "turned receive VLAN offload off on {iface} so that 802.1Q tags \
                             stay in the frames capsule stores; it is turned back on at exit"
                        );
                        Some(VlanOffload {
                            iface: iface.to_string(),
                            state_dir: state_dir.map(Path::to_path_buf),
                        })
                    }
                    Err(e) => {
                        unrecord(state_dir, iface);
                        if variant.device_bound {
                            tracing::info!(
                                "receive VLAN offload is on for {iface} and stays on ({}); \
                                 VLAN tags the NIC strips come back through the driver's \
                                 metadata kfunc where it has one",
                                error_chain(&e)
                            );
                        } else {
                            tracing::warn!(
                                "receive VLAN offload is on for {iface} and cannot be turned \
                                 off ({}): VLAN tags the NIC strips will be missing from \
                                 stored frames; run `ethtool -K {iface} rxvlan off`",
                                error_chain(&e)
                            );
                        }
                        None
                    }
                }
            }
            Err(e) => {
                tracing::debug!("cannot read the offloads of {iface}: {}", error_chain(&e));
                None
            }
        }
    }
}

/// Removes the record of a change to `iface`'s offload, if there is a record.
fn unrecord(state_dir: Option<&Path>, iface: &str) {
    if let Some(dir) = state_dir {
        if let Err(e) = state::forget(dir, iface) {
            tracing::warn!(
                "cannot update {}: {}",
                dir.join(state::STATE_FILE).display(),
                error_chain(&e)
            );
        }
    }
}

impl Drop for VlanOffload {
    fn drop(&mut self) {
        match rx_vlan_offload(&self.iface, Some(true)) {
            Ok(_) => unrecord(self.state_dir.as_deref(), &self.iface),
            Err(e) => tracing::warn!(
                "could not turn receive VLAN offload back on for {}: {}{}",
                self.iface,
                error_chain(&e),
                match &self.state_dir {
                    Some(_) => "; the next capture with this store tries again",
                    None => "",
                }
            ),
        }
    }
}

impl XdpCapture {
    /// Loads and attaches the program and opens a socket per queue, trying the modes in
    /// `attach` and, within each, the variants of the carriers this kernel accepts, richest
    /// first. The error names the last (simplest) attempt; `--log-level debug` lists all.
    pub(crate) fn open(
        cfg: &CaptureConfig,
        attach_modes: &[XdpAttach],
    ) -> Result<XdpCapture, LiveError> {
        let open_err = |error: std::io::Error| LiveError::open(&cfg.iface, error);
        let ifindex = if_index(&cfg.iface).map_err(open_err)?;
        let queues = match &cfg.queues {
            Queues::List(q) => q.clone(),
            Queues::All => (0..rx_queue_count(&cfg.iface)).collect(),
        };
        if queues.is_empty() {
            return Err(open_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no RX queue to capture",
            )));
        }
        let frames = frames_per_queue(cfg.ring_bytes, cfg.frame_size, queues.len());
        let sock_cfg = XskConfig {
            frame_size: cfg.frame_size,
            frames,
            rx_size: frames,
            ..XskConfig::default()
        };
        let carriers = carriers_to_try(cfg.xdp_carrier).map_err(open_err)?;
        // Each attach mode, each accepted carrier, each of its programs richest first; the
        // kernel attaches device-bound programs natively only.
        let ladder = attach_modes.iter().flat_map(|&attach| {
            carriers.iter().flat_map(move |&carrier| {
                Variant::preference(carrier)
                    .into_iter()
                    .filter(move |v| !(v.device_bound && attach == XdpAttach::Generic))
                    .map(move |v| (attach, v))
            })
        });
        let mut attempts = Vec::new();
        for (attach, variant) in ladder {
            let (program, sockets, link) =
                match try_open(ifindex, &queues, attach, variant, &sock_cfg) {
                    Ok(opened) => opened,
                    Err(e) => {
                        attempts.push((format!("{attach} {variant}"), e));
                        continue;
                    }
                };
            for (what, e) in &attempts {
                tracing::debug!("XDP attempt refused: {what}: {e}");
            }
            let promisc = promiscuous(ifindex).map_err(open_err)?;
            let vlan_offload = VlanOffload::turn_off(&cfg.iface, variant, cfg.state_dir.as_deref());
            let setup = XdpSetup {
                attach,
                variant,
                socket_mode: sockets[0].1.mode(),
                queues,
                frame_size: sock_cfg.frame_size,
                frames: sock_cfg.frames,
            };
            return Ok(XdpCapture {
                iface: cfg.iface.clone(),
                snaplen: cfg.snaplen,
                snap: Snap::new(cfg.snaplen),
                setup,
                program,
                sockets,
                shared: Vec::new(),
                _link: link,
                _promisc: promisc,
                _vlan_offload: vlan_offload,
            });
        }
        for (what, e) in &attempts {
            tracing::debug!("XDP attempt refused: {what}: {e}");
        }
        // One line: the last attempt is the simplest program of the last mode, so its reason
        // is the one that matters (a richer variant failing says less).
        let (what, why) = attempts.pop().unwrap_or_default();
        Err(open_err(std::io::Error::other(format!(
            "no XDP program attached ({} tried; the last, {what}: {why})",
            attempts.len() + 1
        ))))
    }

    /// Whether capture turned receive VLAN offload off (and turns it back on when dropped).
    pub(crate) fn changed_offload(&self) -> bool {
        self._vlan_offload.is_some()
    }

    pub(crate) fn setup(&self) -> &XdpSetup {
        &self.setup
    }

    /// Captures into `writer` until `stop` is set; `on_stats` sees the running totals about
    /// once a second.
    ///
    /// With one queue the capture thread reads the socket itself: no copy into a batch, no
    /// hand-over, and while the store is busy the socket's UMEM (131072 frames with the default
    /// 256 MiB `--ring-size`) absorbs the
    /// burst. With several queues a worker per queue reads its socket into batches.
    pub(crate) fn run(
        self,
        writer: &mut impl Sink,
        stop: &AtomicBool,
        on_stats: impl FnMut(&LiveReport),
    ) -> Result<LiveReport, LiveError> {
        let iface = writer.add_interface(self.setup.method().interface(&self.iface, self.snaplen));
        if self.sockets.len() == 1 {
            self.run_inline(writer, iface, stop, on_stats)
        } else {
            self.run_workers(writer, iface, stop, on_stats)
        }
    }

    fn store_error(&self, error: StoreError) -> LiveError {
        LiveError::store(&self.iface, error)
    }

    fn ring_error(&self, error: std::io::Error) -> LiveError {
        LiveError::ring(&self.iface, error)
    }

    fn run_inline(
        mut self,
        writer: &mut impl Sink,
        iface: u32,
        stop: &AtomicBool,
        mut on_stats: impl FnMut(&LiveReport),
    ) -> Result<LiveReport, LiveError> {
        let snap = self.snap;
        let (_, mut sock) = self.sockets.pop().expect("one socket");
        let mut behind = Behind::new(writer.urgency());
        let mut rep = LiveReport::default();
        let mut clock = Clock::new();
        let mut scratch = Vec::new();
        let at_read = self.setup.timestamps() == TimestampSource::RingRead;
        let mut backoff = Backoff::new(sock.rx_size(), at_read);
        let mut stats = StatsTimer::default();
        let mut drain = Drain::default();
        loop {
            let now = Instant::now();
            clock.refresh(now);
            let mut failed = None;
            let n = sock
                .recv(RECV_BATCH, |p| {
                    if failed.is_some() {
                        return;
                    }
                    let (ts, wire, data, vlan) = view(&p, &clock, &mut scratch);
                    let (data, truncated) = snap.apply(data);
                    if let Err(e) = writer.append(iface, ts, wire as u32, data) {
                        failed = Some(e);
                        return;
                    }
                    rep.packets += 1;
                    rep.wire_bytes += wire as u64;
                    rep.vlan_restored += u64::from(vlan);
                    rep.truncated += u64::from(p.cut || truncated);
                })
                .map_err(|e| self.ring_error(e))?;
            if let Some(e) = failed {
                return Err(self.store_error(e));
            }
            behind.update(sock.backlog() as usize, sock.rx_size() as usize);
            writer.tick().map_err(|e| self.store_error(e))?;
            if stats.due(now) {
                let s = sock.stats().map_err(|e| self.ring_error(e))?;
                rep.xdp = Some(self.counters(socket_stats(&s), 0, sock.bad_descs(), rep.xdp));
                stats
                    .record(writer, iface, &rep, now)
                    .map_err(|e| self.store_error(e))?;
                on_stats(&rep);
            }
            if stop.load(Ordering::Relaxed) {
                if drain.done(now, n) {
                    break;
                }
                continue;
            }
            backoff.after_pass(n);
        }
        let s = sock.stats().map_err(|e| self.ring_error(e))?;
        rep.xdp = Some(self.counters(socket_stats(&s), 0, sock.bad_descs(), rep.xdp));
        record(writer, iface, &rep).map_err(|e| self.store_error(e))?;
        on_stats(&rep);
        Ok(rep)
    }

    /// Current counters from the program plus the given socket totals.
    fn counters(
        &self,
        sockets: XskStats,
        pipeline_drops: u64,
        bad_descs: u64,
        prev: Option<XdpCounters>,
    ) -> XdpCounters {
        let mut c = prev.unwrap_or_default();
        // A failed read keeps the previous figures: counters are for reporting only.
        if let Ok(p) = self.program.counters() {
            c.program = p;
        }
        c.sockets = sockets;
        c.pipeline_drops = pipeline_drops;
        c.bad_descs = bad_descs;
        c
    }

    fn run_workers(
        mut self,
        writer: &mut impl Sink,
        iface: u32,
        stop: &AtomicBool,
        mut on_stats: impl FnMut(&LiveReport),
    ) -> Result<LiveReport, LiveError> {
        // Up to about 64 MiB of batches in flight per queue before a worker holds back.
        let depth = 256 * self.sockets.len();
        let (full_tx, full_rx) = bounded::<Batch>(depth);
        let (free_tx, free_rx) = bounded::<Batch>(depth);
        let workers_stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for (queue, sock) in std::mem::take(&mut self.sockets) {
            let shared = Arc::new(QueueShared::default());
            let w = Worker {
                queue,
                stamped_at_read: self.setup.timestamps() == TimestampSource::RingRead,
                sock,
                snap: self.snap,
                full: full_tx.clone(),
                free: free_rx.clone(),
                stop: workers_stop.clone(),
                shared: shared.clone(),
                behind: Behind::new(writer.urgency()),
            };
            let handle = std::thread::Builder::new()
                .name(format!("xsk-q{queue}"))
                .spawn(move || w.run())
                .map_err(|e| self.ring_error(e))?;
            workers.push((queue, handle));
            self.shared.push(shared);
        }
        drop(full_tx);

        let mut rep = LiveReport::default();
        let mut stats = StatsTimer::default();
        let mut result = Ok(());
        let halt = |result: &mut Result<(), LiveError>, e: LiveError| {
            if result.is_ok() {
                *result = Err(e);
            }
            workers_stop.store(true, Ordering::Relaxed);
        };
        loop {
            if stop.load(Ordering::Relaxed) {
                workers_stop.store(true, Ordering::Relaxed);
            }
            match full_rx.recv_timeout(Duration::from_millis(20)) {
                Ok(batch) => {
                    if result.is_ok() {
                        if let Err(e) = store_batch(writer, iface, &batch, &mut rep) {
                            halt(&mut result, self.store_error(e));
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
                    halt(&mut result, self.store_error(e));
                }
            }
            let now = Instant::now();
            if stats.due(now) {
                if let Some(e) = self.shared.iter().find_map(|s| s.error.lock().ok()?.take()) {
                    halt(&mut result, self.ring_error(e));
                }
                rep.xdp = Some(self.sum_shared(rep.xdp));
                if result.is_ok() {
                    if let Err(e) = stats.record(writer, iface, &rep, now) {
                        halt(&mut result, self.store_error(e));
                    }
                }
                on_stats(&rep);
            }
        }
        for (queue, handle) in workers {
            if handle.join().is_err() {
                tracing::error!("the worker of queue {queue} panicked");
            }
        }
        // Final counters, published by the workers as they stopped.
        rep.xdp = Some(self.sum_shared(rep.xdp));
        if result.is_ok() {
            record(writer, iface, &rep).map_err(|e| self.store_error(e))?;
        }
        on_stats(&rep);
        result.map(|()| rep)
    }

    fn sum_shared(&self, prev: Option<XdpCounters>) -> XdpCounters {
        let mut s = XskStats::default();
        let (mut pipeline, mut bad) = (0, 0);
        for q in &self.shared {
            s.rx_dropped += q.rx_dropped.load(Ordering::Relaxed);
            s.rx_invalid_descs += q.rx_invalid_descs.load(Ordering::Relaxed);
            s.rx_ring_full += q.rx_ring_full.load(Ordering::Relaxed);
            s.rx_fill_ring_empty_descs += q.rx_fill_empty.load(Ordering::Relaxed);
            pipeline += q.pipeline_drops.load(Ordering::Relaxed);
            bad += q.bad_descs.load(Ordering::Relaxed);
        }
        self.counters(s, pipeline, bad, prev)
    }
}

/// The report's copy of a socket's `XDP_STATISTICS`.
fn socket_stats(s: &libc::xdp_statistics) -> XskStats {
    XskStats {
        rx_dropped: s.rx_dropped,
        rx_invalid_descs: s.rx_invalid_descs,
        rx_ring_full: s.rx_ring_full,
        rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
    }
}

/// Turns the XDP program's monotonic timestamps into wall-clock time: realtime minus
/// monotonic, refreshed every 100 ms (so an NTP step is followed within that).
#[derive(Debug)]
struct Clock {
    offset: u64,
    at: Instant,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            offset: clock_ns(true).wrapping_sub(clock_ns(false)),
            at: Instant::now(),
        }
    }

    fn refresh(&mut self, now: Instant) {
        if now.duration_since(self.at) >= Duration::from_millis(100) {
            self.offset = clock_ns(true).wrapping_sub(clock_ns(false));
            self.at = now;
        }
    }

    /// The packet's arrival time in ns since the Unix epoch.
    fn stamp(&self, meta: Option<Meta>) -> u64 {
        match meta {
            // The NIC's clock: capsule assumes it is disciplined to UTC (phc2sys).
            Some(m) if m.hw_ts => m.ts_ns,
            Some(m) => m.ts_ns.wrapping_add(self.offset),
            None => clock_ns(true),
        }
    }
}

/// A packet as stored: (time, length on the wire, bytes, whether a VLAN tag was put back).
/// The VLAN tag the NIC stripped (reported through the metadata record) goes back after the
/// MAC addresses, which needs a copy into `scratch`; other packets are borrowed as they are.
fn view<'a>(
    p: &XskPacket<'a>,
    clock: &Clock,
    scratch: &'a mut Vec<u8>,
) -> (u64, usize, &'a [u8], bool) {
    let meta = p.meta.as_ref().and_then(Meta::parse);
    let ts = clock.stamp(meta);
    match meta.and_then(|m| m.vlan) {
        Some((tpid, tci)) if p.data.len() >= 12 => {
            let tagged = with_vlan_tag(p.data, tpid, tci, scratch);
            (ts, tagged.len(), tagged, true)
        }
        _ => (ts, p.data.len(), p.data, false),
    }
}

/// Ends a reader after a stop request: once its ring was found empty three times, 2 ms apart
/// (packets still in flight get in), or one second after the request while traffic keeps
/// coming (a busy link never empties the ring, and SIGTERM must still stop capture).
#[derive(Debug, Default)]
struct Drain {
    since: Option<Instant>,
    empty: u32,
}

impl Drain {
    /// Called on every pass while stopping, with the descriptors the pass read; true when the
    /// reader should end.
    fn done(&mut self, now: Instant, read: u32) -> bool {
        let since = *self.since.get_or_insert(now);
        if read == 0 {
            self.empty += 1;
            if self.empty >= 3 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        now.duration_since(since) >= Duration::from_secs(1)
    }
}

/// Descriptors read per pass over a socket's RX ring.
const RECV_BATCH: u32 = 256;

/// Sleeps once a socket's RX ring is drained, instead of spinning (a whole core) or blocking
/// in poll (a wake-up for every few packets, and the capture thread must tick the writer
/// anyway). While packets flow (the passes since the last nap read some), the nap is the time
/// an eighth of the RX ring (its `gather`, 2,048 packets for the ring of 16,384) takes to
/// arrive at the rate of the last cycle, from 200 µs to the ring's `longest` nap: a wake-up
/// is paid per batch, not per few packets. The longest nap is the time the whole ring takes
/// to fill at [`BURST_PPS`], from 2 ms to 8 ms (4.1 ms for 16,384 frames): a rate that jumps
/// during a nap overflows the ring only beyond 4 Mpps on one queue, more than AF_XDP's copy
/// mode delivers. Where packet times are taken at ring read (the plain program, whose times
/// move in steps of the nap), the longest nap stays 2 ms. Measured: at 330 kpps, 50 µs naps spent more CPU in wake-ups than in
/// reading; at 90 kpps, fixed 200 µs naps woke for 18 packets each and cost about 8% of a
/// store-rung capture's CPU (sleep, switch and wake-up), 1 ms naps still about 5%; with
/// naps of at most 2 ms, `clock_nanosleep` and the switches it causes were 8% of a
/// store-rung capture's samples at 310 kpps (500 wake-ups a second). While idle, 100 µs
/// doubling to 1 ms.
#[derive(Debug)]
struct Backoff {
    idle: u32,
    /// Descriptors read since the last nap.
    gathered: u64,
    /// When the last nap began.
    cycle: Instant,
    /// Packets a nap lets gather while packets flow (read [`RECV_BATCH`] at a time after it).
    gather: u32,
    /// Shortest and longest nap while packets flow.
    span: (Duration, Duration),
}

/// The arrival rate (packets a second) at which the RX ring fills during the longest nap.
const BURST_PPS: u64 = 4_000_000;

impl Backoff {
    /// The naps of a socket whose RX ring holds `ring` descriptors; `stamped_at_read` when
    /// packet times are taken as the reader takes them off the ring.
    fn new(ring: u32, stamped_at_read: bool) -> Backoff {
        let fill = match stamped_at_read {
            true => Duration::ZERO,
            false => Duration::from_nanos(u64::from(ring) * 1_000_000_000 / BURST_PPS),
        };
        Backoff {
            idle: 0,
            gathered: 0,
            cycle: Instant::now(),
            gather: (ring / 8).clamp(1024, 8192),
            span: (
                Duration::from_micros(200),
                fill.clamp(Duration::from_millis(2), Duration::from_millis(8)),
            ),
        }
    }

    /// Called after every pass with the descriptors it read: returns at once after a full
    /// batch (more may be waiting), else naps.
    fn after_pass(&mut self, read: u32) {
        self.gathered += u64::from(read);
        if read == RECV_BATCH {
            return;
        }
        let now = Instant::now();
        let nap = self.nap(now);
        self.gathered = 0;
        self.cycle = now;
        std::thread::sleep(nap);
    }

    /// How long to sleep at `now`, after `gathered` descriptors in the cycle since `cycle`.
    fn nap(&mut self, now: Instant) -> Duration {
        if self.gathered > 0 {
            self.idle = 0;
            let cycle = now.duration_since(self.cycle);
            let ns = cycle.as_nanos() * u128::from(self.gather) / u128::from(self.gathered);
            let batch = Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64);
            batch.clamp(self.span.0, self.span.1)
        } else {
            self.idle = self.idle.saturating_add(1);
            Duration::from_micros((50u64 << self.idle.min(5)).min(1000))
        }
    }
}

fn store_batch(
    writer: &mut impl Sink,
    iface: u32,
    batch: &Batch,
    rep: &mut LiveReport,
) -> Result<(), StoreError> {
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

/// What this kernel said of one carrier when [`probe_xdp`] loaded its simplest program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarrierProbe {
    pub carrier: Carrier,
    /// `None`: the kernel accepts it. Otherwise why not, in one line (the verifier's last
    /// word, or the loader's error).
    pub refused: Option<String>,
}

/// The environment variable that makes [`probe_xdp`] treat carriers as refused: a list such
/// as `metadata,headroom`. For tests and diagnosis: it shows on a kernel that accepts every
/// carrier what capture does on one that refuses some (the ladder, the fallback message).
const PROBE_DENY_ENV: &str = "CAPSULE_XDP_PROBE_DENY";

/// Learns which carriers this kernel accepts in XDP programs, by loading (not attaching)
/// each carrier's single-buffer program once ([`Variant::probe`]); the answer is kept for
/// the life of the process (it is a property of the running kernel, not of an interface).
/// Needs CAP_BPF or CAP_SYS_ADMIN; without them every carrier comes back refused, with the
/// kernel's error. `capsule xdp-probe` prints it.
pub fn probe_xdp() -> &'static [CarrierProbe] {
    static PROBED: std::sync::OnceLock<Vec<CarrierProbe>> = std::sync::OnceLock::new();
    PROBED.get_or_init(|| {
        let deny = std::env::var(PROBE_DENY_ENV).unwrap_or_default();
        Carrier::ALL
            .into_iter()
            .map(|carrier| {
                let refused = if deny.split(',').any(|d| d.trim() == carrier.name()) {
                    Some(format!("refused by {PROBE_DENY_ENV}={deny}"))
                } else {
                    XdpProgram::load(0, Variant::probe(carrier))
                        .err()
                        .map(|e| error_chain(&e))
                };
                match &refused {
                    None => tracing::debug!("XDP probe: this kernel accepts the {carrier} carrier"),
                    Some(why) => {
                        tracing::debug!(
                            "XDP probe: this kernel refuses the {carrier} carrier: {why}"
                        )
                    }
                }
                CarrierProbe { carrier, refused }
            })
            .collect()
    })
}

/// The carriers to try, best first: the one asked for, or every one this kernel accepts
/// (probed once per process, so a refused carrier costs no attempt per interface or mode).
/// An error names the carrier asked for, or every refusal, with the verifier's reason.
fn carriers_to_try(asked: Option<Carrier>) -> Result<Vec<Carrier>, std::io::Error> {
    let probed = probe_xdp();
    let refusal = |c: Carrier| probed.iter().find(|p| p.carrier == c)?.refused.clone();
    if let Some(c) = asked {
        return match refusal(c) {
            None => Ok(vec![c]),
            Some(why) => Err(std::io::Error::other(format!(
                "this kernel refuses the XDP program variant {c}: {why}"
            ))),
        };
    }
    let accepted: Vec<Carrier> = probed
        .iter()
        .filter(|p| p.refused.is_none())
        .map(|p| p.carrier)
        .collect();
    if accepted.is_empty() {
        // The plain program is the simplest: its refusal says why none loads.
        let why = refusal(Carrier::None).unwrap_or_default();
        return Err(std::io::Error::other(format!(
            "this kernel loads no XDP program: {why}"
        )));
    }
    Ok(accepted)
}

/// Number of RX queues of `iface` (from sysfs; 1 when it cannot tell).
fn rx_queue_count(iface: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .max(1)
}

type Opened = (XdpProgram, Vec<(u32, XskSocket)>, OwnedFd);

fn try_open(
    ifindex: u32,
    queues: &[u32],
    attach: XdpAttach,
    variant: Variant,
    sock_cfg: &XskConfig,
) -> Result<Opened, String> {
    let program = XdpProgram::load(ifindex, variant).map_err(|e| error_chain(&e))?;
    // The sockets follow the program: multi-buffer frames, and where its record is.
    let cfg = XskConfig {
        multi_buffer: variant.frags,
        record: variant.carrier,
        ..*sock_cfg
    };
    // Sockets first, then the link: no packet is redirected before its socket exists.
    let mut sockets = Vec::new();
    for &q in queues {
        let s = XskSocket::open(ifindex, q, &cfg)
            .map_err(|e| format!("queue {q}: {}", error_chain(&e)))?;
        program
            .bind_socket(q, s.as_fd())
            .map_err(|e| error_chain(&e))?;
        sockets.push((q, s));
    }
    let link = xdp_link(program.prog_fd(), ifindex, attach).map_err(|e| error_chain(&e))?;
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
/// How long a worker holds a batch the capture thread has no room for, not reading its ring
/// meanwhile (the ring buffers), before it drops the batch and counts it.
const HOLD: Duration = Duration::from_millis(100);

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
    /// Packet times are taken at ring read (see [`Backoff::new`]).
    stamped_at_read: bool,
    sock: XskSocket,
    snap: Snap,
    full: Sender<Batch>,
    free: Receiver<Batch>,
    stop: Arc<AtomicBool>,
    shared: Arc<QueueShared>,
    behind: Behind,
}

impl Worker {
    fn run(mut self) {
        let snap = self.snap;
        let mut batch = Batch::default();
        let mut batch_started = Instant::now();
        let mut clock = Clock::new();
        let mut scratch = Vec::new();
        let mut backoff = Backoff::new(self.sock.rx_size(), self.stamped_at_read);
        let mut last_stats = Instant::now();
        let mut held: Option<(Batch, Instant)> = None;
        let mut drain = Drain::default();
        loop {
            let now = Instant::now();
            clock.refresh(now);
            let stopping = self.stop.load(Ordering::Relaxed);
            // A batch the capture thread had no room for: retry it before reading more.
            if let Some((b, since)) = held.take() {
                match self.full.try_send(b) {
                    Ok(()) => {}
                    Err(TrySendError::Full(b)) if now.duration_since(since) < HOLD => {
                        held = Some((b, since));
                        std::thread::sleep(Duration::from_micros(200));
                        continue;
                    }
                    Err(TrySendError::Full(b)) | Err(TrySendError::Disconnected(b)) => {
                        let n = b.packets.len() as u64;
                        self.shared.pipeline_drops.fetch_add(n, Ordering::Relaxed);
                    }
                }
            }
            let got = self.sock.recv(RECV_BATCH, |p| {
                let (ts, wire, data, vlan) = view(&p, &clock, &mut scratch);
                let (data, truncated) = snap.apply(data);
                let off = batch.data.len();
                batch.data.extend_from_slice(data);
                batch.packets.push(BatchPacket {
                    ts_ns: ts,
                    wire_len: wire as u32,
                    off,
                    caplen: (batch.data.len() - off) as u32,
                });
                batch.vlan_restored += u64::from(vlan);
                batch.truncated += u64::from(p.cut || truncated);
            });
            let n = match got {
                Ok(n) => n,
                Err(e) => {
                    self.fail(e);
                    break;
                }
            };
            self.behind
                .update(self.sock.backlog() as usize, self.sock.rx_size() as usize);
            if n > 0 && batch.packets.len() == n as usize {
                batch_started = now;
            }
            if !batch.packets.is_empty()
                && (batch.is_full() || n == 0 || now.duration_since(batch_started) >= HOLD / 20)
            {
                let next = self.free.try_recv().unwrap_or_default();
                let b = std::mem::replace(&mut batch, next);
                if let Err(TrySendError::Full(b) | TrySendError::Disconnected(b)) =
                    self.full.try_send(b)
                {
                    held = Some((b, now));
                }
            }
            if now.duration_since(last_stats) >= Duration::from_millis(500) {
                self.publish_stats();
                last_stats = now;
            }
            if stopping {
                if drain.done(now, n) {
                    break;
                }
                continue;
            }
            backoff.after_pass(n);
        }
        // Stopping: wait for room, so nothing already read is lost.
        for b in held.map(|(b, _)| b).into_iter().chain(Some(batch)) {
            if !b.packets.is_empty() {
                let n = b.packets.len() as u64;
                if self.full.send(b).is_err() {
                    self.shared.pipeline_drops.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
        self.publish_stats();
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
                q.bad_descs.store(self.sock.bad_descs(), Ordering::Relaxed);
            }
            Err(error) => self.fail(std::io::Error::new(
                error.kind(),
                QueueFailed {
                    queue: self.queue,
                    error,
                },
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

/// A worker's socket failed; the cause is the source.
#[derive(Debug, thiserror::Error)]
#[error("AF_XDP socket of queue {queue}")]
struct QueueFailed {
    queue: u32,
    #[source]
    error: std::io::Error,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("queue", &self.queue)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nap_lets_a_batch_gather_at_the_rate_packets_came() {
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        // The ring of a 32 MiB UMEM of 2 KiB frames: 16,384 descriptors, 2,048 a batch.
        let mut b = Backoff::new(16384, false);
        b.cycle = t0;
        b.gathered = 90;
        // 90 packets in 1 ms (90 kpps): a batch takes longer than the longest nap, the
        // time the ring fills at 4 Mpps.
        assert_eq!(b.nap(at(1000)), Duration::from_micros(4096));
        // 310 in 1 ms (the capture benchmark's rate): 4.1 ms, where 2 ms naps woke twice
        // as often.
        b.gathered = 310;
        assert_eq!(b.nap(at(1000)), Duration::from_micros(4096));
        // 800 in 1 ms: 2.56 ms gathers a batch.
        b.gathered = 800;
        assert_eq!(b.nap(at(1000)), Duration::from_micros(2560));
        // 4096 in 1 ms (4 Mpps): half a millisecond gathers a batch.
        b.gathered = 4096;
        assert_eq!(b.nap(at(1000)), Duration::from_micros(500));
        // 20000 in 1 ms: never below 200 µs.
        b.gathered = 20000;
        assert_eq!(b.nap(at(1000)), Duration::from_micros(200));
        // Idle: 100 µs doubling up to 1 ms.
        b.gathered = 0;
        let idle: Vec<u128> = (0..6).map(|_| b.nap(at(1000)).as_micros()).collect();
        assert_eq!(idle, [100, 200, 400, 800, 1000, 1000]);
        b.gathered = 1;
        assert_eq!(b.nap(at(1000)), Duration::from_micros(4096));
        assert_eq!(b.idle, 0);
        // Times taken at ring read move in steps of the nap: at most 2 ms there.
        let mut b = Backoff::new(16384, true);
        b.cycle = t0;
        b.gathered = 310;
        assert_eq!(b.nap(at(1000)), Duration::from_millis(2));
    }

    #[test]
    fn a_nap_never_lets_a_4_mpps_burst_overflow_the_ring() {
        for ring in [2048u32, 4096, 16384, 32768, 65536, 1 << 20] {
            let b = Backoff::new(ring, false);
            // Packets arriving at 4 Mpps during the longest nap fit the ring, except where
            // the floor of 2 ms is longer than the ring lasts (rings below 8,192).
            let burst = b.span.1.as_nanos() * 4 / 1000;
            assert!(burst <= u128::from(ring.max(8192)), "ring {ring}: {burst}");
            assert!(b.span.1 >= Duration::from_millis(2) && b.span.1 <= Duration::from_millis(8));
            assert!(u64::from(b.gather) <= u64::from(ring.max(8192)) / 8);
        }
    }

    #[test]
    fn umem_budget_is_split_over_queues_as_powers_of_two() {
        // 256 MiB of 2 KiB frames on one queue: 131072 frames.
        assert_eq!(frames_per_queue(256 << 20, 2048, 1), 131072);
        // Four queues share it; 4 KiB frames halve the count.
        assert_eq!(frames_per_queue(256 << 20, 2048, 4), 32768);
        assert_eq!(frames_per_queue(256 << 20, 4096, 4), 16384);
        // Not a power of two: rounded down.
        assert_eq!(frames_per_queue(300 << 20, 2048, 1), 131072);
        // Never below the 16384-entry floor, never above 2^20, whatever the input.
        assert_eq!(frames_per_queue(0, 2048, 1), 16384);
        assert_eq!(frames_per_queue(1 << 20, 2048, 64), 16384);
        assert_eq!(frames_per_queue(u64::MAX, 2048, 1), 1 << 20);
        assert_eq!(frames_per_queue(u64::MAX, 0, 0), 1 << 20);
    }
}
