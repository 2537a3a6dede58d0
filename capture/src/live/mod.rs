//! Live capture from a network interface into the store.
//!
//! One [`CaptureConfig`] says what to capture; [`open`] turns it into a [`Capture`] by walking
//! down the fallback ladder until a way works, and [`Capture::run`] stores packets until told
//! to stop:
//!
//! ```text
//! open(CaptureConfig)
//!   mode auto, xdp:   XDP native -> XDP generic -> (auto only) AF_PACKET
//!   mode xdp-native:  XDP native
//!   mode xdp-generic: XDP generic
//!   mode afpacket:    AF_PACKET
//!     XDP (xdp.rs): program variants richest first, one AF_XDP socket per RX queue (zero-copy,
//!                   else copy mode), the UMEM of `ring_bytes` split over the queues
//!     AF_PACKET (afpacket.rs): one TPACKET_V3 ring of `ring_bytes` in 4 MiB blocks
//!
//! Capture::run, either backend:
//!   packet -> VLAN tag put back where it was stripped into metadata -> snap length (Snap)
//!     -> StoreWriter::append; StoreWriter::tick every turn (blocks cut by age)
//!   every second: counters into a LiveReport (on_stats), stored as interface statistics
//!     when drops changed and at least once a minute (StatsTimer)
//!   a reader falling behind its kernel ring (1/32 of it waiting) makes the writer store
//!   blocks uncompressed until it caught up (Behind)
//! ```
//!
//! What the two backends share lives here: the report ([`LiveReport`]), the error
//! ([`LiveError`]), the snap-length rule, VLAN tag re-insertion, the behind signal and the
//! statistics timer. The backends import from here only, never from each other.

mod afpacket;
mod many;
pub mod state;
mod xdp;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capsule_pcap::{Interface, LINKTYPE_ETHERNET};
use capsule_store::writer::MAX_PACKET;
use capsule_store::{StoreError, StoreWriter};

pub use capsule_bpf::Carrier;
pub use xdp::{probe_xdp, CarrierProbe};

use afpacket::PacketCapture;
use capsule_sys::link::XdpAttach;
use xdp::XdpCapture;

/// How to capture: the mode and the resources of one live capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    /// The interface (put in promiscuous mode while capture runs).
    pub iface: String,
    pub mode: Mode,
    /// AF_XDP: the RX queues to capture, a socket each.
    pub queues: Queues,
    /// AF_XDP: UMEM frame size, 2048 or 4096.
    pub frame_size: u32,
    /// Bytes kept of each packet (0: all the store keeps).
    pub snaplen: u32,
    /// AF_PACKET: PACKET_FANOUT group id, so several captures share an interface (0: none).
    pub fanout_group: u16,
    /// What absorbs bursts while the store catches up. AF_PACKET: the TPACKET ring (4 MiB
    /// blocks, 2 to 4096 of them). AF_XDP: the UMEM of all queues together, split equally, a
    /// power of two of frames per queue (16384 to 2^20).
    pub ring_bytes: u64,
    /// Where the interface settings capture changes are recorded, so that the next
    /// [`open`] puts them back after a crash (see [`state`]): the store directory. `None`:
    /// not recorded (restored at a clean exit only).
    pub state_dir: Option<std::path::PathBuf>,
    /// Let an XDP mode take an interface that carries the host's own traffic (it has an
    /// address). Without it, `auto` captures such an interface with AF_PACKET, and the XDP
    /// modes refuse it: AF_XDP takes every packet away from the kernel, so the host's own
    /// connections on that interface would stop.
    pub take_interface: bool,
    /// XDP: the program variant's carrier to use (`--xdp-variant`); `None` takes the best
    /// one the probe finds this kernel accepts (metadata, then headroom, then plain).
    pub xdp_carrier: Option<capsule_bpf::Carrier>,
}

/// How to capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// XDP native, then XDP generic, then AF_PACKET: the first that works.
    Auto,
    /// AF_XDP with the XDP program in the driver, else in generic mode.
    Xdp,
    /// AF_XDP with the XDP program in the driver only.
    XdpNative,
    /// AF_XDP with the XDP program in the kernel's generic path (any driver).
    XdpGeneric,
    /// AF_PACKET TPACKET_V3 ring (no XDP).
    Afpacket,
}

impl Mode {
    /// The XDP attach modes to try, in order (none: AF_PACKET only).
    fn xdp_attach(self) -> &'static [XdpAttach] {
        match self {
            Mode::Auto | Mode::Xdp => &[XdpAttach::Native, XdpAttach::Generic],
            Mode::XdpNative => &[XdpAttach::Native],
            Mode::XdpGeneric => &[XdpAttach::Generic],
            Mode::Afpacket => &[],
        }
    }
}

/// Which RX queues to capture with AF_XDP. Parses from `all` or a list such as `0,1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queues {
    All,
    List(Vec<u32>),
}

/// A queue list that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{queue:?} is not a queue number (or use `all`)")]
pub struct QueuesError {
    /// The item of the list that is not a number.
    pub queue: String,
    #[source]
    error: std::num::ParseIntError,
}

impl std::str::FromStr for Queues {
    type Err = QueuesError;

    fn from_str(s: &str) -> Result<Queues, QueuesError> {
        if s == "all" {
            return Ok(Queues::All);
        }
        s.split(',')
            .map(|q| {
                q.trim().parse::<u32>().map_err(|error| QueuesError {
                    queue: q.to_string(),
                    error,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Queues::List)
    }
}

/// Where a stored packet's time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimestampSource {
    /// The kernel's receive time of the packet (AF_PACKET: the socket buffer's time stamp,
    /// taken as the kernel's receive path starts).
    Kernel,
    /// The kernel's monotonic clock read by the XDP program as the packet enters it (before
    /// any socket buffer exists), turned into wall-clock time by capsule.
    XdpEntry,
    /// The NIC's receive time where the driver reports one (device-bound program), else
    /// [`TimestampSource::XdpEntry`]; `hw_timestamps` in status counts the first.
    NicOrXdpEntry,
    /// capsule's wall clock when it takes the packet off the AF_XDP ring: later than the
    /// packet arrived, by as much as the ring is behind (the plain program carries no time).
    RingRead,
}

impl TimestampSource {
    /// How status and the start line say it.
    pub fn describe(self) -> &'static str {
        match self {
            TimestampSource::Kernel => "kernel receive time",
            TimestampSource::XdpEntry => "kernel time at XDP entry",
            TimestampSource::NicOrXdpEntry => "NIC time, else kernel time at XDP entry",
            TimestampSource::RingRead => "capsule's time at ring read (coarser)",
        }
    }
}

/// How one interface is captured, typed: for status (`capsule status --json`), the metrics
/// endpoint and tests. [`Capture::description`] is its sentence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CaptureMethod {
    /// `af_xdp` or `af_packet`.
    pub backend: String,
    /// XDP only: `native` or `generic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_mode: Option<String>,
    /// XDP only: the program variant that runs (its function name in capsule.bpf.c).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_program: Option<String>,
    /// XDP only: how the program hands its record over (`metadata`, `headroom`, `plain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_carrier: Option<capsule_bpf::Carrier>,
    /// XDP only: `zero-copy` or `copy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_mode: Option<String>,
    pub timestamps: TimestampSource,
}

impl CaptureMethod {
    pub(crate) fn afpacket() -> CaptureMethod {
        CaptureMethod {
            backend: "af_packet".into(),
            xdp_mode: None,
            xdp_program: None,
            xdp_carrier: None,
            socket_mode: None,
            timestamps: TimestampSource::Kernel,
        }
    }

    /// The interface as stored: its `if_description` names how it was captured (backend, XDP
    /// mode, program variant and carrier, socket mode, timestamp source), so an export says
    /// so to Wireshark and `capinfos` long after the capture ended.
    pub(crate) fn interface(&self, name: &str, snaplen: u32) -> Interface {
        let mut how = match (self.backend.as_str(), &self.xdp_mode) {
            ("af_xdp", Some(mode)) => format!("AF_XDP, XDP {mode}"),
            ("af_xdp", None) => "AF_XDP".to_string(),
            _ => "AF_PACKET".to_string(),
        };
        if let Some(program) = &self.xdp_program {
            how.push_str(&format!(", program {program}"));
        }
        if let Some(carrier) = self.xdp_carrier {
            how.push_str(&format!(" ({carrier} carrier)"));
        }
        if let Some(socket) = &self.socket_mode {
            how.push_str(&format!(", {socket} mode"));
        }
        let mut iface = Interface::new(LINKTYPE_ETHERNET, snaplen, Some(name.to_string()));
        iface.set_description(&format!(
            "capsule capture on {name} by {how}; timestamps from {}",
            self.timestamps.describe()
        ));
        iface
    }
}

/// An open capture on one interface, AF_XDP or AF_PACKET, ready to run.
#[derive(Debug)]
pub struct Capture {
    iface: String,
    description: String,
    method: CaptureMethod,
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Xdp(XdpCapture),
    Afpacket(PacketCapture),
}

/// Opens a capture as `cfg` says, walking down the fallback ladder (see the module docs).
/// Needs root, or CAP_NET_RAW (AF_PACKET) and CAP_BPF/CAP_NET_ADMIN (XDP).
///
/// In mode auto, an AF_PACKET capture's [`description`](Capture::description) says why AF_XDP
/// was not possible; in the XDP modes the error lists every attempt.
pub fn open(cfg: &CaptureConfig) -> Result<Capture, LiveError> {
    if let Some(dir) = &cfg.state_dir {
        // Before touching the interface: what a capture killed earlier left changed.
        state::restore(dir);
    }
    open_one(cfg)
}

/// Opens a capture on each interface of `cfgs`, in order, each walking its own fallback
/// ladder (one may take XDP, another AF_PACKET). The settings a capture killed earlier left
/// changed are put back first, once, for every interface. An interface named twice is an
/// error before any is touched; one that cannot be captured is an error naming it, and
/// the captures opened before it are closed again (their interfaces put back as they were).
pub fn open_all(cfgs: &[CaptureConfig]) -> Result<Vec<Capture>, LiveError> {
    for (i, c) in cfgs.iter().enumerate() {
        if cfgs[..i].iter().any(|o| o.iface == c.iface) {
            return Err(LiveError::Duplicate {
                iface: c.iface.clone(),
            });
        }
    }
    let mut dirs: Vec<&std::path::Path> = Vec::new();
    for dir in cfgs.iter().filter_map(|c| c.state_dir.as_deref()) {
        if !dirs.contains(&dir) {
            state::restore(dir);
            dirs.push(dir);
        }
    }
    // Dropped on an error: every capture opened so far is closed and put back.
    let mut opened = Vec::with_capacity(cfgs.len());
    for c in cfgs {
        opened.push(open_one(c)?);
    }
    Ok(opened)
}

fn open_one(cfg: &CaptureConfig) -> Result<Capture, LiveError> {
    let mut attach = cfg.mode.xdp_attach();
    let mut why_not_xdp = None;
    // An interface the host itself talks through (it has an address) is left to the kernel
    // unless the operator says otherwise: AF_XDP would take its packets away.
    let host = capsule_sys::host_addresses(&cfg.iface).unwrap_or_default();
    if !attach.is_empty() && !host.is_empty() {
        let addrs = host
            .iter()
            .take(3)
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        if cfg.take_interface {
            tracing::warn!(
                "{} carries this host's own traffic ({addrs}): with XDP, capture takes every \
                 packet from the kernel, so the host's connections on it stop while capture runs",
                cfg.iface
            );
        } else if cfg.mode == Mode::Auto {
            attach = &[];
            why_not_xdp = Some(format!(
                "{} carries this host's own traffic ({addrs}), so it is left to the kernel \
                 (--take-interface lets XDP take it)",
                cfg.iface
            ));
        } else {
            return Err(LiveError::HostInterface {
                iface: cfg.iface.clone(),
                addrs,
            });
        }
    }
    if !attach.is_empty() {
        match XdpCapture::open(cfg, attach) {
            Ok(x) => {
                return Ok(Capture {
                    iface: cfg.iface.clone(),
                    description: x.setup().to_string(),
                    method: x.setup().method(),
                    backend: Backend::Xdp(x),
                })
            }
            Err(e) if cfg.mode == Mode::Auto => {
                why_not_xdp = Some(format!(
                    "AF_XDP was not possible: {}",
                    capsule_store::error::chain(&e)
                ))
            }
            Err(e) => return Err(e),
        }
    }
    let packet = PacketCapture::open(cfg)?;
    let mut description = packet.description();
    if let Some(why) = why_not_xdp {
        description.push_str(&format!("; {why}"));
    }
    Ok(Capture {
        iface: cfg.iface.clone(),
        description,
        method: CaptureMethod::afpacket(),
        backend: Backend::Afpacket(packet),
    })
}

impl Capture {
    /// How it captures, for the start line and the status file: e.g. `XDP native
    /// (capsule_xdp_frags), AF_XDP copy mode, queues [0], ...` or `AF_PACKET (TPACKET_V3 ring
    /// of 256 MiB); AF_XDP was not possible: ...`.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// How it captures, typed (backend, XDP mode and program, timestamp source).
    pub fn method(&self) -> &CaptureMethod {
        &self.method
    }

    /// The capabilities this capture still needs once it runs, with why; every other one can
    /// be dropped (see [`crate::privs`]). Reading the rings, the sockets' and the XDP
    /// program's counters (a BPF map read through a descriptor already open: no capability
    /// on kernels since 6.5), closing the sockets and detaching the program (closing the
    /// `bpf_link`) need none. Only an XDP capture that turned receive VLAN offload off keeps
    /// CAP_NET_ADMIN, to turn it back on at exit (`ETHTOOL_SFLAGS`); without it the offload
    /// would stay off until the next capture with the store restored it.
    pub fn kept_capabilities(&self) -> (crate::privs::Caps, Option<&'static str>) {
        match &self.backend {
            Backend::Xdp(x) if x.changed_offload() => (
                crate::privs::Caps::NONE.with(crate::privs::CAP_NET_ADMIN),
                Some("to turn receive VLAN offload back on at exit"),
            ),
            _ => (crate::privs::Caps::NONE, None),
        }
    }

    /// Captures into `writer` until `stop` is set (SIGINT/SIGTERM in the CLI); `on_stats` sees
    /// the running totals about once a second (for live status and logs). The caller finishes
    /// the writer afterwards, also when this returns an error.
    pub fn run(
        self,
        writer: &mut StoreWriter,
        stop: &AtomicBool,
        on_stats: impl FnMut(&LiveReport),
    ) -> Result<LiveReport, LiveError> {
        self.run_into(writer, stop, on_stats)
    }

    /// The interface it captures.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    fn run_into(
        self,
        writer: &mut impl Sink,
        stop: &AtomicBool,
        on_stats: impl FnMut(&LiveReport),
    ) -> Result<LiveReport, LiveError> {
        match self.backend {
            Backend::Xdp(x) => x.run(writer, stop, on_stats),
            Backend::Afpacket(p) => p.run(writer, stop, on_stats),
        }
    }
}

/// Runs `captures` (from [`open_all`]) into one store until `stop` is set, or until every one
/// has ended; `on_stats` sees every interface's state, in order, about once a second. One
/// capture runs on the calling thread, straight into `writer`; several run a thread each,
/// sharing the writer (module `many`). A capture whose reader fails (its interface went
/// away) ends alone and the others go on; a store error ends them all. Returns each
/// capture's result, in order. The caller finishes the writer afterwards.
pub fn run_all(
    mut captures: Vec<Capture>,
    writer: &mut StoreWriter,
    stop: &AtomicBool,
    mut on_stats: impl FnMut(&[IfaceState]),
) -> Vec<Result<LiveReport, LiveError>> {
    if captures.len() != 1 {
        return many::run_many(captures, writer, stop, on_stats);
    }
    let cap = captures.pop().expect("one capture");
    let mut state = IfaceState {
        iface: cap.iface.clone(),
        description: cap.description.clone(),
        method: Some(cap.method.clone()),
        report: LiveReport::default(),
        error: None,
    };
    let result = cap.run_into(writer, stop, |r| {
        state.report = r.clone();
        on_stats(std::slice::from_ref(&state));
    });
    vec![result]
}

/// One interface of a running capture, as `on_stats` of [`run_all`] sees it.
#[derive(Debug, Clone)]
pub struct IfaceState {
    pub iface: String,
    /// How it captures ([`Capture::description`]).
    pub description: String,
    /// The same, typed ([`Capture::method`]); `None` where the caller does not know it.
    pub method: Option<CaptureMethod>,
    /// Its running totals.
    pub report: LiveReport,
    /// Why its reader stopped, when it failed (the error chain).
    pub error: Option<String>,
}

/// Where a backend puts packets: the store writer itself (one interface), or a reader's
/// share of it (several, module `many`).
pub(crate) trait Sink {
    fn add_interface(&mut self, iface: Interface) -> u32;
    fn append(
        &mut self,
        iface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Result<(), StoreError>;
    /// Cuts blocks by age (and, shared, hands over what was gathered).
    fn tick(&mut self) -> Result<(), StoreError>;
    fn urgency(&self) -> Arc<AtomicU32>;
    /// The disk-full drops this reader's ISBs carry.
    fn disk_full_drops(&self) -> u64;
    fn record_stats(
        &mut self,
        iface: u32,
        ts_ns: u64,
        received: Option<u64>,
        dropped: Option<u64>,
    ) -> Result<(), StoreError>;
}

impl Sink for StoreWriter {
    fn add_interface(&mut self, iface: Interface) -> u32 {
        StoreWriter::add_interface(self, iface)
    }

    fn append(
        &mut self,
        iface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Result<(), StoreError> {
        StoreWriter::append(self, iface, ts_ns, orig_len, data)
    }

    fn tick(&mut self) -> Result<(), StoreError> {
        StoreWriter::tick(self)
    }

    fn urgency(&self) -> Arc<AtomicU32> {
        StoreWriter::urgency(self)
    }

    fn disk_full_drops(&self) -> u64 {
        self.pressure_gauge().disk_full_drops()
    }

    fn record_stats(
        &mut self,
        iface: u32,
        ts_ns: u64,
        received: Option<u64>,
        dropped: Option<u64>,
    ) -> Result<(), StoreError> {
        StoreWriter::record_stats(self, iface, ts_ns, received, dropped)
    }
}

/// What a capture did.
#[derive(Debug, Clone, Default)]
pub struct LiveReport {
    pub packets: u64,
    /// Sum of the packets' lengths on the wire.
    pub wire_bytes: u64,
    /// Packets whose VLAN tag was put back from the kernel's metadata.
    pub vlan_restored: u64,
    /// Packets longer than the store keeps (256 KiB, e.g. from GRO or a TSO loopback),
    /// stored cut to that length with their original length kept.
    pub truncated: u64,
    /// Kernel counters summed over the capture (AF_PACKET).
    pub kernel: RingStats,
    /// XDP program, socket and pipeline counters (AF_XDP).
    pub xdp: Option<XdpCounters>,
}

impl LiveReport {
    /// Packets the interface delivered to capture (stored or dropped).
    pub fn seen(&self) -> u64 {
        match &self.xdp {
            Some(x) => x.program.seen,
            None => self.kernel.packets,
        }
    }

    /// Packets lost, whatever the cause.
    pub fn drops(&self) -> u64 {
        match &self.xdp {
            Some(x) => x.drops(),
            None => self.kernel.drops,
        }
    }
}

/// Kernel counters of an AF_PACKET socket (`PACKET_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Packets the socket received (kept or dropped).
    pub packets: u64,
    /// Packets dropped because the ring was full.
    pub drops: u64,
    /// Times the ring was frozen (all blocks owned by capsule).
    pub freezes: u64,
}

/// An AF_XDP socket's kernel counters (`XDP_STATISTICS`), cumulative since the socket opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Dropped for reasons other than the two below (e.g. a frame too small in copy mode).
    pub rx_dropped: u64,
    /// Descriptors the kernel found invalid.
    pub rx_invalid_descs: u64,
    /// Dropped because the RX ring was full (capsule fell behind).
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty (no frame to receive into).
    pub rx_fill_ring_empty_descs: u64,
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
            + self.program.no_room
            + self.pipeline_drops
            + self.bad_descs
    }
}

/// Checks that every interface of `configs` exists, touching none of them: what a caller
/// checks before it creates anything for the capture (the store), so that a misspelt name
/// leaves nothing behind.
pub fn check_interfaces(configs: &[CaptureConfig]) -> Result<(), LiveError> {
    for c in configs {
        capsule_sys::if_index(&c.iface).map_err(|error| LiveError::Open {
            iface: c.iface.clone(),
            error,
        })?;
    }
    Ok(())
}

/// Why a capture could not start or stopped with an error. The message says what failed on
/// which interface; the cause is the error's source (print the chain, as anyhow's `{:#}`
/// does, for the whole story: `cannot capture on eth1: no network interface named "eth1"`).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("cannot capture on {iface}")]
    Open {
        iface: String,
        #[source]
        error: std::io::Error,
    },
    #[error(
        "{iface} carries this host's own traffic ({addrs}); XDP capture would take every \
         packet from the kernel and cut the host's connections on it. Capture with --mode \
         afpacket (or auto), or add --take-interface if that is what you want"
    )]
    HostInterface { iface: String, addrs: String },
    #[error("{iface} is named twice: give each interface once")]
    Duplicate { iface: String },
    #[error("reading the packet ring of {iface}")]
    Ring {
        iface: String,
        #[source]
        error: std::io::Error,
    },
    #[error("storing packets from {iface}")]
    Store {
        iface: String,
        #[source]
        error: Box<StoreError>,
    },
}

impl LiveError {
    pub(crate) fn open(iface: &str, error: std::io::Error) -> LiveError {
        LiveError::Open {
            iface: iface.to_string(),
            error,
        }
    }

    pub(crate) fn ring(iface: &str, error: std::io::Error) -> LiveError {
        LiveError::Ring {
            iface: iface.to_string(),
            error,
        }
    }

    pub(crate) fn store(iface: &str, error: StoreError) -> LiveError {
        LiveError::Store {
            iface: iface.to_string(),
            error: Box::new(error),
        }
    }
}

/// The snap-length rule of both backends: keep the bytes asked for (0: all), at most what the
/// store holds ([`MAX_PACKET`]), and count a packet as truncated when the store's limit, not
/// the snap length asked for, cut it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snap {
    keep: usize,
    /// The snap length asked for keeps more than the store holds.
    store_limited: bool,
}

impl Snap {
    pub(crate) fn new(snaplen: u32) -> Snap {
        let asked = match snaplen {
            0 => usize::MAX,
            n => n as usize,
        };
        Snap {
            keep: asked.min(MAX_PACKET),
            store_limited: asked > MAX_PACKET,
        }
    }

    /// The bytes of `frame` to store, and whether the store's limit cut it.
    pub(crate) fn apply(self, frame: &[u8]) -> (&[u8], bool) {
        let truncated = self.store_limited && frame.len() > MAX_PACKET;
        (&frame[..frame.len().min(self.keep)], truncated)
    }
}

/// The frame with an 802.1Q/802.1ad tag (TPID, TCI) put back after its MAC addresses, built in
/// `scratch`. The frame must be at least 12 bytes long.
pub(crate) fn with_vlan_tag<'a>(
    frame: &[u8],
    tpid: u16,
    tci: u16,
    scratch: &'a mut Vec<u8>,
) -> &'a [u8] {
    scratch.clear();
    scratch.extend_from_slice(&frame[..12]);
    scratch.extend_from_slice(&tpid.to_be_bytes());
    scratch.extend_from_slice(&tci.to_be_bytes());
    scratch.extend_from_slice(&frame[12..]);
    scratch
}

/// Tells the store writer when a capture reader falls behind its kernel ring.
///
/// A reader is behind once more than 1/32 of its ring waits to be read (one block of an
/// AF_PACKET ring of 32 or fewer), and caught up again at 1/128 or less (an empty ring of
/// blocks): the gap keeps it from flapping. While any reader is behind, the writer stores
/// blocks uncompressed (see [`StoreWriter::urgency`]), which hands CPU back to the readers
/// on a machine whose cores are shared by reader, compressors and writer. Early, so that a
/// small ring (32 MiB) still holds what arrives while the compressors step down.
pub(crate) struct Behind {
    urgent: Arc<AtomicU32>,
    on: bool,
}

impl Behind {
    pub(crate) fn new(urgent: Arc<AtomicU32>) -> Self {
        Behind { urgent, on: false }
    }

    /// Updates the state from the reader's `backlog` out of `size` ring entries.
    pub(crate) fn update(&mut self, backlog: usize, size: usize) {
        if !self.on && backlog * 32 > size {
            self.on = true;
            self.urgent.fetch_add(1, Ordering::Relaxed);
        } else if self.on && backlog * 128 <= size {
            self.on = false;
            self.urgent.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Behind {
    fn drop(&mut self) {
        if self.on {
            self.urgent.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// When to read counters (every second) and store them (when drops changed, else every
/// minute), so an export can say what was lost in its window.
#[derive(Debug)]
pub(crate) struct StatsTimer {
    last: Instant,
    recorded: Option<(Instant, u64)>,
}

impl Default for StatsTimer {
    fn default() -> Self {
        StatsTimer {
            last: Instant::now(),
            recorded: None,
        }
    }
}

impl StatsTimer {
    /// True once a second.
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        if now.duration_since(self.last) >= Duration::from_secs(1) {
            self.last = now;
            return true;
        }
        false
    }

    /// Stores the counters of `rep` when its drops changed since the last record, or a
    /// minute has passed.
    pub(crate) fn record(
        &mut self,
        writer: &mut impl Sink,
        iface: u32,
        rep: &LiveReport,
        now: Instant,
    ) -> Result<(), StoreError> {
        let drops = rep.drops() + writer.disk_full_drops();
        let due = self
            .recorded
            .is_none_or(|(at, d)| d != drops || now.duration_since(at) >= Duration::from_secs(60));
        if due {
            record(writer, iface, rep)?;
            self.recorded = Some((now, drops));
        }
        Ok(())
    }
}

/// Stores the counters so far as an interface statistics record (a pcapng ISB on export).
/// Its drop count includes the packets the store dropped because the disk was full and
/// nothing was left to delete: the kernel handed them over, but they are not stored, so an
/// export of the window must count them as lost.
pub(crate) fn record(
    writer: &mut impl Sink,
    iface: u32,
    rep: &LiveReport,
) -> Result<(), StoreError> {
    let disk_full = writer.disk_full_drops();
    writer.record_stats(
        iface,
        capsule_store::now_ns(),
        Some(rep.seen()),
        Some(rep.drops() + disk_full),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_turns_on_above_a_32nd_and_off_at_a_128th() {
        let urgent = Arc::new(AtomicU32::new(0));
        let mut a = Behind::new(urgent.clone());
        let mut b = Behind::new(urgent.clone());
        a.update(32, 1024);
        assert_eq!(urgent.load(Ordering::Relaxed), 0);
        a.update(33, 1024);
        b.update(300, 1024);
        assert_eq!(urgent.load(Ordering::Relaxed), 2);
        a.update(9, 1024); // between 1/128 and 1/32: still behind
        assert_eq!(urgent.load(Ordering::Relaxed), 2);
        a.update(8, 1024);
        assert_eq!(urgent.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(urgent.load(Ordering::Relaxed), 0);
        // An AF_PACKET ring of 8 blocks: one waiting block is behind, none is caught up.
        let mut c = Behind::new(urgent.clone());
        c.update(1, 8);
        assert_eq!(urgent.load(Ordering::Relaxed), 1);
        c.update(1, 8);
        assert_eq!(urgent.load(Ordering::Relaxed), 1);
        c.update(0, 8);
        assert_eq!(urgent.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_live_error_says_what_failed_and_leaves_the_cause_to_its_source() {
        let cause = std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no network interface named \"eth9\"",
        );
        let e = LiveError::open("eth9", cause);
        assert_eq!(e.to_string(), "cannot capture on eth9");
        assert_eq!(
            capsule_store::error::chain(&e),
            "cannot capture on eth9: no network interface named \"eth9\""
        );
    }

    #[test]
    fn an_interface_named_twice_is_refused_before_any_is_touched() {
        let cfg = |iface: &str| CaptureConfig {
            iface: iface.into(),
            mode: Mode::Afpacket,
            queues: Queues::All,
            frame_size: 2048,
            snaplen: 0,
            fanout_group: 0,
            ring_bytes: 1 << 20,
            // A record an open would read: none, for nothing may be read or changed.
            state_dir: Some("/nonexistent/capsule-test-store".into()),
            take_interface: false,
            xdp_carrier: None,
        };
        let e = open_all(&[cfg("nosuch0"), cfg("nosuch1"), cfg("nosuch0")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nosuch0 is named twice: give each interface once"
        );
    }

    #[test]
    fn queues_parse_from_all_or_a_list_and_name_a_bad_item() {
        assert_eq!("all".parse::<Queues>().unwrap(), Queues::All);
        assert_eq!("0, 3".parse::<Queues>().unwrap(), Queues::List(vec![0, 3]));
        let e = "0,x".parse::<Queues>().unwrap_err();
        assert_eq!(e.to_string(), "\"x\" is not a queue number (or use `all`)");
        assert!("".parse::<Queues>().is_err());
    }

    #[test]
    fn snap_keeps_what_was_asked_and_counts_only_the_stores_cuts() {
        let big = vec![0u8; MAX_PACKET + 10];
        let (kept, cut) = Snap::new(0).apply(&big);
        assert_eq!((kept.len(), cut), (MAX_PACKET, true));
        let (kept, cut) = Snap::new(100).apply(&big);
        assert_eq!((kept.len(), cut), (100, false));
        let (kept, cut) = Snap::new(MAX_PACKET as u32).apply(&big);
        assert_eq!((kept.len(), cut), (MAX_PACKET, false));
        let (kept, cut) = Snap::new(u32::MAX).apply(&big[..60]);
        assert_eq!((kept.len(), cut), (60, false));
    }
}
