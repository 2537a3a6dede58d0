//! The live status of a running capture, for `capsule status --store DIR`.
//!
//! The capture writes `STORE/capture-status.json` about once a second (write to a hidden,
//! unpredictable name, then rename, so a reader never sees half a file; never through a
//! symlink: `capsule_store::fsx`): what it captures with, its
//! counters, drops by cause, and rates over the last interval. `capsule status` reads it and
//! tells a live capture from a stale file by the process id and the update time.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::live::{IfaceState, LiveReport};

/// File name of the status, in the store's directory.
pub const STATUS_FILE: &str = "capture-status.json";

/// Drops of a capture by cause. Zero where the mode has no such cause.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DropCauses {
    /// AF_PACKET: the ring was full.
    pub packet_ring_full: u64,
    /// AF_XDP: the socket's RX ring was full (`rx_ring_full`).
    pub xsk_ring_full: u64,
    /// AF_XDP: other socket drops, e.g. no free frame on the fill ring (`rx_dropped`).
    pub xsk_dropped: u64,
    /// XDP: packets on RX queues capsule does not read (passed to the kernel stack).
    pub no_socket: u64,
    /// XDP, headroom carrier: packets without 16 bytes of headroom for the record (passed
    /// to the kernel stack).
    #[serde(default)]
    pub no_room: u64,
    /// The store fell behind and a worker dropped a batch.
    pub pipeline: u64,
    /// Invalid descriptors (kernel's count plus capsule's).
    pub invalid: u64,
    /// The disk was full and no sealed segment was left to delete: received, not stored.
    #[serde(default)]
    pub disk_full: u64,
}

impl DropCauses {
    pub fn of(rep: &LiveReport) -> DropCauses {
        match &rep.xdp {
            Some(x) => DropCauses {
                packet_ring_full: 0,
                xsk_ring_full: x.sockets.rx_ring_full,
                xsk_dropped: x.sockets.rx_dropped,
                no_socket: x.program.no_socket,
                no_room: x.program.no_room,
                pipeline: x.pipeline_drops,
                invalid: x.sockets.rx_invalid_descs + x.bad_descs,
                disk_full: 0,
            },
            None => DropCauses {
                packet_ring_full: rep.kernel.drops,
                ..DropCauses::default()
            },
        }
    }
}

/// What `capture-status.json` holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CaptureStatus {
    pub pid: u32,
    pub iface: String,
    /// How it captures, as logged at start (mode, program variant, queues).
    pub mode: String,
    pub started_ns: u64,
    pub updated_ns: u64,
    /// False once the capture has stopped.
    pub running: bool,
    /// Packets stored.
    pub packets: u64,
    pub wire_bytes: u64,
    /// Packets the interface delivered (stored or dropped).
    pub seen: u64,
    pub drops: u64,
    pub drop_causes: DropCauses,
    pub vlan_restored: u64,
    pub truncated: u64,
    /// XDP: packets stamped with the NIC's clock.
    pub hw_timestamps: u64,
    /// Rates over the last interval.
    pub packets_per_s: f64,
    pub bits_per_s: f64,
    pub drops_per_s: f64,
    /// How the store writer keeps up: blocks per compression rung, whether the disk is the
    /// limit. Absent in status files of earlier versions.
    #[serde(default)]
    pub store: capsule_store::writer::Pressure,
    /// The compactor's rate over the last interval: pending bytes recompressed per second.
    #[serde(default)]
    pub compactor_bytes_per_s: f64,
    /// Each interface on its own, in the order given (one entry for a single interface; the
    /// figures above are their sums). Absent in status files of earlier versions.
    #[serde(default)]
    pub interfaces: Vec<InterfaceStatus>,
}

/// One interface of a capture in `capture-status.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct InterfaceStatus {
    pub iface: String,
    /// How this interface is captured (its own ladder): mode, variant, queues, and in mode
    /// auto after `; ` why XDP was not taken.
    pub mode: String,
    /// The same, typed: backend, XDP mode, program variant and carrier, socket mode,
    /// timestamp source. Absent in status files of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<crate::live::CaptureMethod>,
    /// Packets stored from it (disk-full drops are store-wide: in the totals only).
    pub packets: u64,
    pub wire_bytes: u64,
    pub seen: u64,
    pub drops: u64,
    pub drop_causes: DropCauses,
    pub vlan_restored: u64,
    pub truncated: u64,
    pub hw_timestamps: u64,
    pub packets_per_s: f64,
    pub bits_per_s: f64,
    pub drops_per_s: f64,
    /// Why its reader stopped while the others went on (the error chain); none while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Packets, bytes and drops at an instant, for rates.
type Mark = (Instant, u64, u64, u64);

/// Rates from `last` to now; updates `last`.
fn rates(last: &mut Option<Mark>, now: Instant, packets: u64, bytes: u64, drops: u64) -> [f64; 3] {
    let mut r = [0.0; 3];
    if let Some((at, p, b, d)) = *last {
        let dt = now.duration_since(at).as_secs_f64();
        if dt > 0.0 {
            r = [
                packets.saturating_sub(p) as f64 / dt,
                bytes.saturating_sub(b) as f64 * 8.0 / dt,
                drops.saturating_sub(d) as f64 / dt,
            ];
        }
    }
    *last = Some((now, packets, bytes, drops));
    r
}

/// How recent a running capture's last update must be for it to count as live: it
/// rewrites its status about once a second.
pub const LIVE_WITHIN_NS: u64 = 5_000_000_000;

impl CaptureStatus {
    /// Whether this is the status of a capture running now: it says it runs, its process
    /// exists, and it wrote within [`LIVE_WITHIN_NS`] of `now_ns` (a stale file of a capture
    /// killed with -9 says "running" too, and its pid may have been reused).
    pub fn is_live(&self, now_ns: u64) -> bool {
        self.running
            && Path::new(&format!("/proc/{}", self.pid)).exists()
            && now_ns.saturating_sub(self.updated_ns) < LIVE_WITHIN_NS
    }
}

/// The status of the capture running now into `store`, if one is (see
/// [`CaptureStatus::is_live`]).
pub fn live_capture(store: &Path) -> std::io::Result<Option<CaptureStatus>> {
    let now = capsule_store::now_ns();
    Ok(read_status(store)?.filter(|s| s.is_live(now)))
}

/// Writes the status file of a running capture.
#[derive(Debug)]
pub struct StatusFile {
    path: PathBuf,
    status: CaptureStatus,
    last: Option<Mark>,
    /// Per interface.
    last_each: Vec<Option<Mark>>,
    /// When the compactor's count was last read, and what it was.
    last_compacted: Option<(Instant, u64)>,
    warned: bool,
}

impl StatusFile {
    pub fn new(store: &Path, iface: &str, mode: &str) -> StatusFile {
        StatusFile::new_many(store, &[(iface, mode)])
    }

    /// The status of a capture on several interfaces: (name, mode) of each, in order. The
    /// top-level `iface` lists them (`a, b`), `mode` gives each one's (`a: ..., b: ...`)
    /// when there are several.
    pub fn new_many(store: &Path, ifaces: &[(&str, &str)]) -> StatusFile {
        StatusFile::with_methods(store, ifaces, &[])
    }

    /// Like [`StatusFile::new_many`], with each interface's typed capture method (in the
    /// same order), so that the first status written already names the XDP mode, program
    /// variant and timestamp source.
    pub fn with_methods(
        store: &Path,
        ifaces: &[(&str, &str)],
        methods: &[crate::live::CaptureMethod],
    ) -> StatusFile {
        let now = capsule_store::now_ns();
        let mode = match ifaces {
            [(_, mode)] => mode.to_string(),
            _ => ifaces
                .iter()
                .map(|(i, m)| format!("{i}: {}", m.split("; ").next().unwrap_or(m)))
                .collect::<Vec<_>>()
                .join(" | "),
        };
        let mut f = StatusFile {
            // The store root may be a symlink (the operator's choice): resolved once.
            path: root(store).join(STATUS_FILE),
            status: CaptureStatus {
                pid: std::process::id(),
                iface: ifaces
                    .iter()
                    .map(|(i, _)| *i)
                    .collect::<Vec<_>>()
                    .join(", "),
                mode,
                started_ns: now,
                updated_ns: now,
                running: true,
                interfaces: ifaces
                    .iter()
                    .enumerate()
                    .map(|(k, (i, m))| InterfaceStatus {
                        iface: i.to_string(),
                        mode: m.to_string(),
                        method: methods.get(k).cloned(),
                        ..InterfaceStatus::default()
                    })
                    .collect(),
                ..CaptureStatus::default()
            },
            last: None,
            last_each: vec![None; ifaces.len()],
            last_compacted: None,
            warned: false,
        };
        f.write();
        f
    }

    /// Records the running totals and the store writer's state (call about once a second).
    pub fn update(&mut self, rep: &LiveReport, store: capsule_store::writer::Pressure) {
        let iface = self.status.interfaces.first().map(|i| i.iface.clone());
        let state = IfaceState {
            iface: iface.unwrap_or_default(),
            description: String::new(),
            method: None,
            report: rep.clone(),
            error: None,
        };
        self.update_many(std::slice::from_ref(&state), store);
    }

    /// Records each interface's running totals (in the order of [`StatusFile::new_many`]),
    /// their sums, and the store writer's state (call about once a second).
    pub fn update_many(&mut self, states: &[IfaceState], store: capsule_store::writer::Pressure) {
        let now = Instant::now();
        let mut rep = LiveReport::default();
        let mut causes = DropCauses::default();
        let (mut seen, mut drops, mut hw) = (0, 0, 0);
        self.last_each.resize(states.len(), None);
        self.status
            .interfaces
            .resize_with(states.len(), InterfaceStatus::default);
        for ((st, out), last) in states
            .iter()
            .zip(&mut self.status.interfaces)
            .zip(&mut self.last_each)
        {
            let r = &st.report;
            let [pps, bps, dps] = rates(last, now, r.packets, r.wire_bytes, r.drops());
            let c = DropCauses::of(r);
            *out = InterfaceStatus {
                iface: st.iface.clone(),
                mode: std::mem::take(&mut out.mode),
                method: st.method.clone().or_else(|| out.method.take()),
                packets: r.packets,
                wire_bytes: r.wire_bytes,
                seen: r.seen(),
                drops: r.drops(),
                drop_causes: c.clone(),
                vlan_restored: r.vlan_restored,
                truncated: r.truncated,
                hw_timestamps: r.xdp.map_or(0, |x| x.program.hw_ts),
                packets_per_s: pps,
                bits_per_s: bps,
                drops_per_s: dps,
                error: st.error.clone(),
            };
            if out.mode.is_empty() {
                out.mode = st.description.clone();
            }
            rep.packets += r.packets;
            rep.wire_bytes += r.wire_bytes;
            rep.vlan_restored += r.vlan_restored;
            rep.truncated += r.truncated;
            seen += r.seen();
            drops += r.drops();
            hw += out.hw_timestamps;
            causes.packet_ring_full += c.packet_ring_full;
            causes.xsk_ring_full += c.xsk_ring_full;
            causes.xsk_dropped += c.xsk_dropped;
            causes.no_socket += c.no_socket;
            causes.no_room += c.no_room;
            causes.pipeline += c.pipeline;
            causes.invalid += c.invalid;
        }
        let s = &mut self.status;
        [s.packets_per_s, s.bits_per_s, s.drops_per_s] =
            rates(&mut self.last, now, rep.packets, rep.wire_bytes, drops);
        s.updated_ns = capsule_store::now_ns();
        // Packets dropped for a full disk reached the writer, so capture counts them as
        // captured: here they move from stored to dropped.
        let disk_full = store.disk_full_drops;
        s.packets = rep.packets.saturating_sub(disk_full);
        s.wire_bytes = rep.wire_bytes;
        s.seen = seen;
        s.drops = drops + disk_full;
        s.drop_causes = DropCauses {
            disk_full,
            ..causes
        };
        s.vlan_restored = rep.vlan_restored;
        s.truncated = rep.truncated;
        s.hw_timestamps = hw;
        if let Some((at, done)) = self.last_compacted {
            let dt = now.duration_since(at).as_secs_f64();
            if dt > 0.0 {
                s.compactor_bytes_per_s =
                    store.compacted_pending_bytes.saturating_sub(done) as f64 / dt;
            }
        }
        self.last_compacted = Some((now, store.compacted_pending_bytes));
        s.store = store;
        self.write();
    }

    /// Marks the capture stopped.
    pub fn finish(&mut self) {
        self.status.running = false;
        self.status.updated_ns = capsule_store::now_ns();
        self.status.packets_per_s = 0.0;
        self.status.bits_per_s = 0.0;
        self.status.drops_per_s = 0.0;
        self.status.compactor_bytes_per_s = 0.0;
        for i in &mut self.status.interfaces {
            i.packets_per_s = 0.0;
            i.bits_per_s = 0.0;
            i.drops_per_s = 0.0;
        }
        self.write();
    }

    /// Writes the status through a hidden file and a rename, so a reader never sees half
    /// of it. On a full disk (the rename needs a new file) it overwrites the existing file
    /// in place instead: the JSON is padded with spaces to a multiple of [`STATUS_PAD`], so
    /// the overwrite takes no new blocks, and a reader that catches it half written tries
    /// again ([`read_status`]).
    fn write(&mut self) {
        let mut body = serde_json::to_vec_pretty(&self.status).expect("status serializes");
        body.push(b'\n');
        body.resize(body.len().next_multiple_of(STATUS_PAD), b' ');
        let r = capsule_store::fsx::replace(&self.path, &body);
        let r = r.or_else(|e| overwrite_in_place(&self.path, &mut body).map_err(|_| e));
        // The status is a convenience: a full disk must not stop capture over it.
        match r {
            Err(e) if !self.warned => {
                let e = capsule_store::error::chain(&e);
                tracing::warn!("cannot write {}: {e}", self.path.display());
                self.warned = true;
            }
            _ => {}
        }
    }
}

/// The status file's size is a multiple of this (its JSON padded with spaces).
pub const STATUS_PAD: usize = 4096;

/// Overwrites `path` from its start with `body`, padded with spaces to the file's length,
/// without growing the file (no new blocks on a full disk).
fn overwrite_in_place(path: &Path, body: &mut Vec<u8>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    // Opened without following a symlink, for writing, never truncated (fsx's lock mode).
    let f = capsule_store::fsx::open(path, capsule_store::fsx::Open::Lock, "overwrite")
        .map_err(|e| std::io::Error::other(capsule_store::error::chain(&e)))?;
    let len = f.metadata()?.len() as usize;
    if body.len() > len {
        return Err(std::io::ErrorKind::StorageFull.into());
    }
    body.resize(len, b' ');
    f.write_all_at(body, 0)
}

/// Reads a store's capture status, if a capture ever ran there.
pub fn read_status(store: &Path) -> std::io::Result<Option<CaptureStatus>> {
    let path = root(store).join(STATUS_FILE);
    let mut tries = 0;
    loop {
        let read = capsule_store::fsx::read(&path, "read").map_err(|e| match e {
            capsule_store::StoreError::Io { error, .. } => error,
            e => std::io::Error::other(e.to_string()),
        });
        match read {
            Ok(b) => match serde_json::from_slice(&b) {
                Ok(s) => return Ok(Some(s)),
                // Caught half way through an overwrite in place (a full disk): read again.
                Err(_) if tries < 5 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: {e}", path.display()),
                    ))
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                ))
            }
        }
    }
}

/// The store root, resolved once (it may be a symlink; nothing below it may).
fn root(store: &Path) -> PathBuf {
    capsule_store::fsx::resolve_root(store).unwrap_or_else(|_| store.to_path_buf())
}

/// A one-line account of the drops by cause, e.g. " (XDP socket ring full 12, pipeline 3)".
pub fn drop_causes(rep: &LiveReport) -> String {
    let c = DropCauses::of(rep);
    let parts: Vec<String> = [
        ("packet ring full", c.packet_ring_full),
        ("AF_XDP RX ring full", c.xsk_ring_full),
        ("AF_XDP dropped", c.xsk_dropped),
        ("queue without socket", c.no_socket),
        ("store behind", c.pipeline),
        ("invalid descriptors", c.invalid),
        ("disk full", c.disk_full),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(what, n)| format!("{what} {n}"))
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_file_round_trips_with_rates() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = StatusFile::new(dir.path(), "eth9", "test mode");
        let mut rep = LiveReport {
            packets: 10,
            wire_bytes: 1000,
            ..LiveReport::default()
        };
        f.update(&rep, Default::default());
        std::thread::sleep(std::time::Duration::from_millis(50));
        rep.packets = 110;
        rep.wire_bytes = 101_000;
        rep.kernel.drops = 5;
        let store = capsule_store::writer::Pressure {
            blocks_by_rung: [7, 2, 1, 3],
            disk_bound: true,
            readers_behind: 1,
            segments_deleted_for_space: 2,
            bytes_deleted_for_space: 1 << 20,
            disk_full_drops: 4,
            compact_target: Some(3),
            pending_compaction_bytes: 1 << 30,
            compacted_pending_bytes: 5_000_000,
            ..Default::default()
        };
        f.update(&rep, store);
        let s = read_status(dir.path()).unwrap().unwrap();
        assert_eq!((s.packets, s.drops, s.running), (106, 9, true));
        assert_eq!(s.drop_causes.disk_full, 4);
        assert_eq!(s.store, store);
        assert_eq!(s.drop_causes.packet_ring_full, 5);
        assert!(s.packets_per_s > 100.0 && s.packets_per_s < 2100.0, "{s:?}");
        // 5 MB recompressed in about 50 ms.
        assert!(
            s.compactor_bytes_per_s > 5e6 && s.compactor_bytes_per_s < 1.1e8,
            "{s:?}"
        );
        f.finish();
        assert!(!read_status(dir.path()).unwrap().unwrap().running);
        assert_eq!(drop_causes(&rep), " (packet ring full 5)");
    }

    #[test]
    fn several_interfaces_are_counted_each_and_summed() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = StatusFile::new_many(
            dir.path(),
            &[
                ("a", "AF_PACKET (ring); AF_XDP was not possible: x"),
                ("b", "XDP native (p)"),
            ],
        );
        let state = |iface: &str, packets: u64, drops: u64, error: Option<&str>| {
            let mut report = LiveReport {
                packets,
                wire_bytes: packets * 10,
                ..LiveReport::default()
            };
            report.kernel.packets = packets + drops;
            report.kernel.drops = drops;
            IfaceState {
                iface: iface.into(),
                description: String::new(),
                method: None,
                report,
                error: error.map(String::from),
            }
        };
        let store = capsule_store::writer::Pressure {
            disk_full_drops: 2,
            ..Default::default()
        };
        f.update_many(
            &[state("a", 10, 3, None), state("b", 20, 0, Some("gone"))],
            store,
        );
        let s = read_status(dir.path()).unwrap().unwrap();
        assert_eq!(s.iface, "a, b");
        assert_eq!(s.mode, "a: AF_PACKET (ring) | b: XDP native (p)");
        // Disk-full drops are store-wide: in the totals only.
        assert_eq!((s.packets, s.seen, s.drops), (28, 33, 5));
        assert_eq!(
            (s.drop_causes.packet_ring_full, s.drop_causes.disk_full),
            (3, 2)
        );
        let i = &s.interfaces;
        assert_eq!(i.len(), 2);
        assert_eq!(
            (i[0].iface.as_str(), i[0].packets, i[0].drops),
            ("a", 10, 3)
        );
        assert!(i[0].mode.starts_with("AF_PACKET (ring); AF_XDP"), "{i:?}");
        assert_eq!(
            (i[1].iface.as_str(), i[1].packets, i[1].seen),
            ("b", 20, 20)
        );
        assert_eq!(i[1].error.as_deref(), Some("gone"));
        assert_eq!(
            (i[0].error.as_deref(), i[0].drop_causes.disk_full),
            (None, 0)
        );
        // A status file of an earlier version has no interfaces: read as none.
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(STATUS_FILE)).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("interfaces").unwrap();
        std::fs::write(dir.path().join(STATUS_FILE), v.to_string()).unwrap();
        assert!(read_status(dir.path())
            .unwrap()
            .unwrap()
            .interfaces
            .is_empty());
    }

    #[test]
    fn a_status_file_without_the_store_part_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = StatusFile::new(dir.path(), "eth9", "test mode");
        f.update(&LiveReport::default(), Default::default());
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(STATUS_FILE)).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("store").unwrap();
        std::fs::write(dir.path().join(STATUS_FILE), v.to_string()).unwrap();
        let s = read_status(dir.path()).unwrap().unwrap();
        assert_eq!(s.store, capsule_store::writer::Pressure::default());
    }

    #[test]
    fn the_status_never_follows_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let canary = dir.path().join("canary");
        std::fs::write(&canary, b"keep").unwrap();
        let store = dir.path().join("store");
        std::fs::create_dir(&store).unwrap();
        // The old fixed temporary name and the status file itself, planted.
        std::os::unix::fs::symlink(&canary, store.join(format!(".{STATUS_FILE}.tmp"))).unwrap();
        std::os::unix::fs::symlink(&canary, store.join(STATUS_FILE)).unwrap();
        let mut f = StatusFile::new(&store, "eth9", "test mode");
        f.update(&LiveReport::default(), Default::default());
        f.finish();
        assert_eq!(std::fs::read(&canary).unwrap(), b"keep");
        let e = read_status(&store).unwrap_err().to_string();
        assert!(e.contains("is a symlink") && e.contains(STATUS_FILE), "{e}");
        // A symlinked store root is the operator's choice: it works.
        std::fs::remove_file(store.join(STATUS_FILE)).unwrap();
        let root = dir.path().join("root-link");
        std::os::unix::fs::symlink(&store, &root).unwrap();
        let mut f = StatusFile::new(&root, "eth9", "test mode");
        f.finish();
        assert!(!read_status(&root).unwrap().unwrap().running);
    }

    #[test]
    fn a_missing_status_is_none_and_a_bad_one_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_status(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join(STATUS_FILE), b"{not json").unwrap();
        let e = read_status(dir.path()).unwrap_err().to_string();
        assert!(e.contains(STATUS_FILE), "{e}");
    }

    #[test]
    fn the_status_is_overwritten_in_place_when_the_rename_fails() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = StatusFile::new(dir.path(), "eth9", "test mode");
        let path = dir.path().join(STATUS_FILE);
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(len % STATUS_PAD as u64, 0);
        // A directory in the way of the hidden file makes the write and rename fail, as a
        // full disk would.
        std::fs::create_dir(dir.path().join(format!(".{STATUS_FILE}.tmp"))).unwrap();
        let rep = LiveReport {
            packets: 42,
            ..LiveReport::default()
        };
        f.update(&rep, Default::default());
        let s = read_status(dir.path()).unwrap().unwrap();
        assert_eq!(s.packets, 42);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            len,
            "the file grew"
        );
    }
}
