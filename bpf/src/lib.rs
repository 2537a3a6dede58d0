//! capsule's XDP program and its loader.
//!
//! This crate owns the kernel half of AF_XDP capture: `src/capsule.bpf.c`, compiled by clang
//! at build time (`build.rs`) and embedded here, and the code that loads it with libbpf-rs.
//!
//! ```text
//! NIC RX queue q -> capsule_xdp*: count SEEN
//!                -> 16-byte metadata record before the packet (Meta: arrival time, flags,
//!                   the VLAN tag the NIC stripped, a magic)
//!                -> bpf_redirect_map(xsks, q) -> AF_XDP socket of queue q (capsule-sys)
//!                                                 or XDP_PASS when none is bound
//! ```
//!
//! What this crate does not do: attach the program to the interface (a `bpf_link`, made in
//! capsule-sys, because it is a raw `bpf(2)` call, and `unsafe` lives there only)
//! or touch the sockets' rings.
//!
//! The program comes in four variants ([`Variant`]): kernel time or the driver's metadata
//! kfuncs (hardware receive timestamp, stripped VLAN tag; these need a program bound to the
//! device), each single-buffer or multi-buffer (`xdp.frags`, for frames above one page such
//! as MTU 9000). [`XdpProgram::load`] loads the one asked for; the caller walks down from
//! the richest variant until one loads.

#![forbid(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use capsule_wire::view::{Endian, View};
use libbpf_rs::{MapCore, MapFlags, Object, ObjectBuilder};

/// The compiled BPF object (ELF), built from `src/capsule.bpf.c`.
pub const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/capsule.bpf.o"));

/// Size of the metadata record the program puts in front of each packet.
pub const META_LEN: usize = 16;
/// The record's last two bytes (native order), right before the packet.
pub const META_MAGIC: u16 = 0xCA75;
const META_HW_TS: u16 = 0x1;
const META_VLAN: u16 = 0x2;

/// The per-packet record the XDP program writes in the metadata area (`struct capsule_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Arrival time: the NIC's receive timestamp when `hw_ts`, else the kernel's
    /// `CLOCK_MONOTONIC` at XDP entry (the caller adds its realtime offset).
    pub ts_ns: u64,
    pub hw_ts: bool,
    /// The 802.1Q/802.1ad tag (TPID, TCI) the NIC stripped, when the driver reported one.
    pub vlan: Option<(u16, u16)>,
}

impl Meta {
    /// Reads the record from the `META_LEN` bytes just before a packet; `None` when they do
    /// not carry the program's magic (the driver gave no metadata room).
    pub fn parse(b: &[u8; META_LEN]) -> Option<Meta> {
        let v = View::new(b);
        if v.u16_in::<14>(Endian::NATIVE) != META_MAGIC {
            return None;
        }
        let flags = v.u16_in::<12>(Endian::NATIVE);
        let ts_ns = v.u64_in::<0>(Endian::NATIVE);
        // vlan_proto is stored as on the wire (big-endian), vlan_tci in host order.
        let proto = v.u16_be::<10>();
        let vlan = (flags & META_VLAN != 0).then_some((proto, v.u16_in::<8>(Endian::NATIVE)));
        Some(Meta {
            ts_ns,
            hw_ts: flags & META_HW_TS != 0,
            vlan,
        })
    }
}

/// How the program hands its per-packet record to user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Carrier {
    /// In the XDP metadata area just before the packet (`bpf_xdp_adjust_meta`): nothing to
    /// strip, the cheapest. Some kernels refuse the helper in XDP programs.
    Metadata,
    /// In 16 bytes of headroom claimed in front of the packet (`bpf_xdp_adjust_head`): the
    /// same record, stripped by the socket reader before the packet is stored.
    Headroom,
    /// No record: the plain redirect. The reader stamps each packet when it takes it off the
    /// RX ring (later than the kernel saw it, and by as much as the ring is behind), and a
    /// VLAN tag the NIC stripped cannot come back.
    #[serde(rename = "plain")]
    None,
}

impl Carrier {
    /// Every carrier, best first.
    pub const ALL: [Carrier; 3] = [Carrier::Metadata, Carrier::Headroom, Carrier::None];

    /// The name used on the command line, in status and in the docs.
    pub fn name(self) -> &'static str {
        match self {
            Carrier::Metadata => "metadata",
            Carrier::Headroom => "headroom",
            Carrier::None => "plain",
        }
    }

    /// Where the record is, as the start line and `capsule xdp-probe` say it.
    pub fn describe(self) -> &'static str {
        match self {
            Carrier::Metadata => "record in the metadata area",
            Carrier::Headroom => "record in headroom, stripped before storing",
            Carrier::None => "no record",
        }
    }
}

impl std::fmt::Display for Carrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which of the ten programs to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// How the record reaches user space.
    pub carrier: Carrier,
    /// Bound to the device, calling the receive-metadata kfuncs (hardware timestamp, VLAN).
    /// Never with [`Carrier::None`]: there is no record to put their answers in.
    pub device_bound: bool,
    /// `xdp.frags`: accepts multi-buffer frames (jumbo MTUs); the sockets must bind with
    /// `XDP_USE_SG`.
    pub frags: bool,
}

impl Variant {
    /// The program's function name in `capsule.bpf.c`.
    pub fn program_name(self) -> &'static str {
        match (self.carrier, self.device_bound, self.frags) {
            (Carrier::Metadata, false, false) => "capsule_xdp",
            (Carrier::Metadata, false, true) => "capsule_xdp_frags",
            (Carrier::Metadata, true, false) => "capsule_xdp_dev",
            (Carrier::Metadata, true, true) => "capsule_xdp_dev_frags",
            (Carrier::Headroom, false, false) => "capsule_xdp_head",
            (Carrier::Headroom, false, true) => "capsule_xdp_head_frags",
            (Carrier::Headroom, true, false) => "capsule_xdp_head_dev",
            (Carrier::Headroom, true, true) => "capsule_xdp_head_dev_frags",
            (Carrier::None, _, false) => "capsule_xdp_plain",
            (Carrier::None, _, true) => "capsule_xdp_plain_frags",
        }
    }

    /// The variants of `carrier` in the order worth trying: richest first (device kfuncs
    /// and multi-buffer, down to the single-buffer kernel-time program).
    pub fn preference(carrier: Carrier) -> Vec<Variant> {
        let all = [(true, true), (false, true), (true, false), (false, false)];
        all.into_iter()
            .filter(|&(device_bound, _)| !(device_bound && carrier == Carrier::None))
            .map(|(device_bound, frags)| Variant {
                carrier,
                device_bound,
                frags,
            })
            .collect()
    }

    /// The single-buffer kernel-time program of `carrier`: what capture's probe loads to
    /// learn whether this kernel accepts the carrier at all.
    pub fn probe(carrier: Carrier) -> Variant {
        Variant {
            carrier,
            device_bound: false,
            frags: false,
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.program_name())
    }
}

/// The program's per-CPU counters, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets the program ran on.
    pub seen: u64,
    /// Packets handed to a socket's RX ring (the kernel may still drop them when that ring
    /// or the fill ring is empty; the socket's XDP_STATISTICS count those).
    pub redirected: u64,
    /// Packets on a queue without a capsule socket, passed to the kernel stack.
    pub no_socket: u64,
    /// Packets without room for the metadata record (stored with userspace time).
    pub meta_failed: u64,
    /// Packets carrying the NIC's receive timestamp.
    pub hw_ts: u64,
    /// Packets whose stripped VLAN tag the driver reported.
    pub vlan_meta: u64,
    /// Headroom carrier: packets without 16 bytes of headroom for the record, passed to the
    /// kernel stack instead of stored (a drop; no driver seen so far gives so little).
    pub no_room: u64,
}

const COUNTERS: u32 = 8;

/// Why the program could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("loading XDP program {program}{}", verifier.as_ref().map(|v| format!(": the verifier says {v:?}")).unwrap_or_default())]
    Load {
        program: &'static str,
        /// The verifier log's last line that says why (not its statistics), when it wrote
        /// one.
        verifier: Option<String>,
        #[source]
        error: libbpf_rs::Error,
    },
    #[error("loading XDP program {program}: not in the compiled object")]
    NotInObject { program: &'static str },
    #[error("XDP map {map}: binding queue {queue}")]
    Bind {
        map: &'static str,
        queue: u32,
        #[source]
        error: libbpf_rs::Error,
    },
    #[error("XDP map {map}")]
    Map {
        map: &'static str,
        #[source]
        error: libbpf_rs::Error,
    },
    #[error("XDP map {map}: not in the loaded object")]
    MapMissing { map: &'static str },
}

/// A loaded (not yet attached) XDP program with its maps.
#[derive(Debug)]
pub struct XdpProgram {
    obj: Object,
    variant: Variant,
}

impl XdpProgram {
    /// Loads `variant` for the interface `ifindex` (the index matters for device-bound
    /// variants only). Needs CAP_BPF/CAP_SYS_ADMIN.
    pub fn load(ifindex: u32, variant: Variant) -> Result<XdpProgram, BpfError> {
        route_libbpf_logs();
        let name = variant.program_name();
        let err = |error: libbpf_rs::Error| BpfError::Load {
            program: name,
            verifier: None,
            error,
        };
        let mut open = ObjectBuilder::default()
            .name("capsule")
            .map_err(err)?
            .open_memory(OBJECT)
            .map_err(err)?;
        let mut found = false;
        for mut p in open.progs_mut() {
            if p.name() == name {
                found = true;
                if variant.device_bound {
                    p.set_ifindex(ifindex);
                    p.set_flags(BPF_F_XDP_DEV_BOUND_ONLY);
                }
            } else {
                p.set_autoload(false);
            }
        }
        if !found {
            return Err(BpfError::NotInObject { program: name });
        }
        let (obj, log) = with_log_capture(|| open.load());
        let obj = obj.map_err(|error| BpfError::Load {
            program: name,
            verifier: verifier_reason(&log),
            error,
        })?;
        Ok(XdpProgram { obj, variant })
    }

    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// The program's file descriptor, for attaching it.
    pub fn prog_fd(&self) -> RawFd {
        let name = self.variant.program_name();
        self.obj
            .progs()
            .find(|p| p.name() == name)
            .map(|p| p.as_fd().as_raw_fd())
            .expect("the loaded program is in its object")
    }

    /// Sends queue `queue`'s packets to the AF_XDP socket `fd`.
    pub fn bind_socket(&self, queue: u32, fd: BorrowedFd<'_>) -> Result<(), BpfError> {
        let map = self.map("xsks")?;
        let value = (fd.as_raw_fd() as u32).to_ne_bytes();
        map.update(&queue.to_ne_bytes(), &value, MapFlags::ANY)
            .map_err(|error| BpfError::Bind {
                map: "xsks",
                queue,
                error,
            })
    }

    /// Reads the per-CPU counters, summed.
    pub fn counters(&self) -> Result<Counters, BpfError> {
        let map = self.map("counters")?;
        let mut sums = [0u64; COUNTERS as usize];
        for (i, sum) in sums.iter_mut().enumerate() {
            let per_cpu = map
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .map_err(|error| BpfError::Map {
                    map: "counters",
                    error,
                })?
                .unwrap_or_default();
            *sum = per_cpu
                .iter()
                .filter_map(|v| v.get(..8))
                .map(|v| u64::from_ne_bytes(v.try_into().expect("8 bytes")))
                .sum();
        }
        Ok(Counters {
            seen: sums[0],
            redirected: sums[1],
            no_socket: sums[2],
            meta_failed: sums[3],
            hw_ts: sums[4],
            vlan_meta: sums[5],
            no_room: sums[6],
        })
    }

    fn map(&self, name: &'static str) -> Result<libbpf_rs::Map<'_>, BpfError> {
        self.obj
            .maps()
            .find(|m| m.name() == name)
            .ok_or(BpfError::MapMissing { map: name })
    }
}

/// `BPF_F_XDP_DEV_BOUND_ONLY` (Linux 6.3; Debian 12's headers predate it).
const BPF_F_XDP_DEV_BOUND_ONLY: u32 = 1 << 6;

/// Sends libbpf's messages to `tracing` instead of stderr, each as one line (libbpf's own
/// line breaks become ` | `). Its warnings are debug lines: they come from the probes and
/// attach attempts of the capture's fallback ladder (native XDP on a driver without it, a
/// kernel without a feature), whose outcome capsule reports itself in one line, so a
/// working fallback prints no libbpf noise; `CAPSULE_LOG=libbpf=debug` shows them. The
/// verifier's chatter goes to trace.
fn route_libbpf_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        fn log(level: libbpf_rs::PrintLevel, msg: String) {
            CAPTURED.with(|c| {
                if let Some(lines) = c.borrow_mut().as_mut() {
                    lines.extend(msg.lines().map(str::to_string));
                }
            });
            let msg = one_line(&msg);
            match level {
                libbpf_rs::PrintLevel::Warn | libbpf_rs::PrintLevel::Info => {
                    tracing::debug!(target: "libbpf", "{msg}")
                }
                libbpf_rs::PrintLevel::Debug => tracing::trace!(target: "libbpf", "{msg}"),
            }
        }
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, log)));
    });
}

thread_local! {
    /// libbpf's messages on this thread while [`with_log_capture`] runs (libbpf calls its
    /// print callback on the thread that called it).
    static CAPTURED: std::cell::RefCell<Option<Vec<String>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` and returns with its result the lines libbpf printed meanwhile.
fn with_log_capture<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    CAPTURED.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let out = f();
    let lines = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (out, lines)
}

/// The verifier's reason for refusing a program, from libbpf's messages: the last line of
/// the program load log that is not the verifier's statistics (`processed N insns ...`,
/// `verification time ...`, `stack depth ...`), e.g. `program of this type cannot use
/// helper bpf_xdp_adjust_meta#54`.
fn verifier_reason(lines: &[String]) -> Option<String> {
    let begin = lines
        .iter()
        .rposition(|l| l.contains("-- BEGIN PROG LOAD LOG --"))?;
    let end = lines[begin..]
        .iter()
        .position(|l| l.contains("-- END PROG LOAD LOG --"))
        .map_or(lines.len(), |e| begin + e);
    lines[begin + 1..end]
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .rfind(|l| {
            !(l.starts_with("processed ")
                || l.starts_with("verification time")
                || l.starts_with("stack depth")
                || l.starts_with("mark_precise")
                || l.starts_with("libbpf:"))
        })
        .map(str::to_string)
}

/// A libbpf message on one line: trimmed, inner line breaks as ` | `.
fn one_line(msg: &str) -> String {
    msg.trim()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libbpf_messages_become_one_line() {
        assert_eq!(
            one_line("libbpf: prog 'x': failed\n  reason: -95\n\n"),
            "libbpf: prog 'x': failed | reason: -95"
        );
        assert_eq!(one_line("plain\n"), "plain");
    }

    #[test]
    fn object_holds_every_variant() {
        let open = ObjectBuilder::default().open_memory(OBJECT).unwrap();
        let names: Vec<String> = open
            .progs()
            .map(|p| p.name().to_string_lossy().into_owned())
            .collect();
        let mut wanted = 0;
        for c in Carrier::ALL {
            for v in Variant::preference(c) {
                assert!(names.contains(&v.program_name().to_string()), "{names:?}");
                wanted += 1;
            }
        }
        assert_eq!(wanted, 10);
        assert_eq!(names.len(), 10, "{names:?}");
    }

    #[test]
    fn the_plain_carrier_has_no_device_bound_variant() {
        assert!(Variant::preference(Carrier::None)
            .iter()
            .all(|v| !v.device_bound));
        assert_eq!(Variant::preference(Carrier::Headroom).len(), 4);
        assert_eq!(
            Variant::preference(Carrier::Metadata)[0],
            Variant {
                carrier: Carrier::Metadata,
                device_bound: true,
                frags: true
            }
        );
    }

    /// Only the metadata programs may call bpf_xdp_adjust_meta: a kernel that refuses the
    /// helper must still accept the headroom and plain ones. The ELF's relocation-free
    /// helper calls are `call imm` with imm = 54 (BPF_FUNC_xdp_adjust_meta).
    #[test]
    fn only_metadata_programs_call_adjust_meta() {
        let open = ObjectBuilder::default().open_memory(OBJECT).unwrap();
        for p in open.progs() {
            let name = p.name().to_string_lossy().into_owned();
            let calls_meta = p
                .insns()
                .iter()
                .any(|i| i.code == 0x85 && i.src_reg() == 0 && i.imm == 54);
            let calls_head = p
                .insns()
                .iter()
                .any(|i| i.code == 0x85 && i.src_reg() == 0 && i.imm == 44);
            let metadata = !name.contains("_head") && !name.contains("_plain");
            assert_eq!(calls_meta, metadata, "{name}: calls bpf_xdp_adjust_meta");
            assert_eq!(
                calls_head,
                name.contains("_head"),
                "{name}: calls bpf_xdp_adjust_head"
            );
        }
    }

    #[test]
    fn the_verifiers_reason_is_its_last_word_before_the_statistics() {
        let log: Vec<String> = [
            "libbpf: prog 'capsule_xdp': BPF program load failed: Invalid argument",
            "libbpf: prog 'capsule_xdp': -- BEGIN PROG LOAD LOG --",
            "0: R1=ctx() R10=fp0",
            "15: (85) call bpf_xdp_adjust_meta#54",
            "program of this type cannot use helper bpf_xdp_adjust_meta#54",
            "processed 16 insns (limit 1000000) max_states_per_insn 0 total_states 1",
            "-- END PROG LOAD LOG --",
            "libbpf: prog 'capsule_xdp': failed to load: -22",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            verifier_reason(&log).as_deref(),
            Some("program of this type cannot use helper bpf_xdp_adjust_meta#54")
        );
        assert_eq!(verifier_reason(&log[..1]), None);
    }

    #[test]
    fn meta_round_trip_and_magic() {
        let mut b = [0u8; META_LEN];
        b[0..8].copy_from_slice(&123_456_789u64.to_ne_bytes());
        b[8..10].copy_from_slice(&0x2064u16.to_ne_bytes());
        b[10..12].copy_from_slice(&0x8100u16.to_be_bytes());
        b[12..14].copy_from_slice(&(META_HW_TS | META_VLAN).to_ne_bytes());
        assert_eq!(Meta::parse(&b), None, "no magic, no record");
        b[14..16].copy_from_slice(&META_MAGIC.to_ne_bytes());
        assert_eq!(
            Meta::parse(&b),
            Some(Meta {
                ts_ns: 123_456_789,
                hw_ts: true,
                vlan: Some((0x8100, 0x2064)),
            })
        );
        b[12..14].copy_from_slice(&0u16.to_ne_bytes());
        assert_eq!(Meta::parse(&b).unwrap().vlan, None);
    }
}
