//! Shared helpers for the end-to-end tests of the `capsule` binary: running the binary and
//! the stock tools (tshark, capinfos, editcap, mergecap, tcpdump, zstd), and a small
//! independent pcap/pcapng decoder so exported files can be compared packet by packet
//! (timestamp in ns, original length, captured bytes, link type) with what went in.
//!
//! The decoder is deliberately written from the file format specifications and shares no
//! code with the product.
#![allow(dead_code)]

pub mod clickhouse;
pub mod frames;
pub mod netns;
pub mod planted;
pub mod serve;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_capsule")
}

/// A `Command` for the binary under test.
pub fn capsule() -> Command {
    let mut c = Command::new(bin());
    c.env_remove("CAPSULE_LOG");
    c
}

/// Finds `tool` on PATH, or fails the test naming the missing tool.
pub fn need_tool(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(tool);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "this test needs the tool `{tool}` on PATH (install wireshark-common / tshark / tcpdump / \
         zstd as appropriate); it was not found"
    );
}

/// Renders a command for messages.
pub fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd`, capturing stdout and stderr (stdin is closed).
pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", show(cmd)))
}

/// Runs `cmd` and fails the test unless it exits 0.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{} failed with {}\n--- stdout\n{}\n--- stderr\n{}",
        show(cmd),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a shell pipeline with `sh -c` and fails unless it exits 0. Returns stdout.
pub fn sh_ok(script: &str) -> Vec<u8> {
    let out = run_ok(
        Command::new("sh")
            .arg("-c")
            .arg(format!("set -e; {script}")),
    );
    out.stdout
}

pub fn stdout_str(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr_str(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn p(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

/// What synth's truth file says in total.
#[derive(Debug, Clone, Copy)]
pub struct Truth {
    pub packets: u64,
    pub bytes: u64,
}

/// Runs `capsule synth` and returns the truth totals.
pub fn synth(
    out: &Path,
    truth: &Path,
    seed: u64,
    duration: &str,
    rate: &str,
    start: Option<&str>,
) -> Truth {
    let mut cmd = capsule();
    cmd.args([
        "synth",
        "--seed",
        &seed.to_string(),
        "--duration",
        duration,
        "--rate",
        rate,
    ])
    .args(["-w", p(out), "--truth", p(truth)]);
    if let Some(s) = start {
        cmd.args(["--start", s]);
    }
    run_ok(&mut cmd);
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(truth).expect("read truth")).expect("truth is JSON");
    Truth {
        packets: v["packets"].as_u64().expect("truth.packets is a number"),
        bytes: v["bytes"].as_u64().expect("truth.bytes is a number"),
    }
}

/// `capsule import --store STORE ARGS... FILES...`; returns the output without checking it.
pub fn import(store: &Path, extra: &[&str], files: &[&str]) -> Output {
    let mut cmd = capsule();
    cmd.arg("import")
        .args(["--store", p(store)])
        .args(extra)
        .args(files);
    run(&mut cmd)
}

/// `import` that must succeed.
pub fn import_ok(store: &Path, extra: &[&str], files: &[&str]) -> Output {
    let mut cmd = capsule();
    cmd.arg("import")
        .args(["--store", p(store)])
        .args(extra)
        .args(files);
    run_ok(&mut cmd)
}

/// `capsule query --store STORE -w OUT ARGS...` that must succeed; returns the file's bytes.
pub fn query_ok(store: &Path, out: &Path, extra: &[&str]) -> Vec<u8> {
    let mut cmd = capsule();
    cmd.arg("query")
        .args(["--store", p(store), "-w", p(out)])
        .args(extra);
    run_ok(&mut cmd);
    std::fs::read(out).expect("read export")
}

/// One segment as listed by `capsule segments --json`.
#[derive(Debug, Clone)]
pub struct SegInfo {
    pub seq: u64,
    pub state: String,
    pub path: PathBuf,
    pub blocks: u64,
    pub packets: u64,
    pub bytes: u64,
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
}

pub fn segments(store: &Path) -> Vec<SegInfo> {
    let out = run_ok(capsule().args(["segments", "--store", p(store), "--json"]));
    stdout_str(&out)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("segments --json line {l:?}: {e}"));
            SegInfo {
                seq: v["seq"].as_u64().expect("seq"),
                state: v["state"].as_str().expect("state").to_string(),
                path: PathBuf::from(v["path"].as_str().expect("path")),
                blocks: v["blocks"].as_u64().expect("blocks"),
                packets: v["packets"].as_u64().expect("packets"),
                bytes: v["bytes"].as_u64().expect("bytes"),
                first_ns: v["first_ns"].as_u64(),
                last_ns: v["last_ns"].as_u64(),
            }
        })
        .collect()
}

/// Files in STORE/segments (names only), sorted.
pub fn segment_files(store: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(store.join("segments"))
        .expect("list segments dir")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Total size of the files in STORE/segments. A file retention deletes between the listing
/// and its stat counts 0 (a running capture deletes segments while this samples).
pub fn segments_dir_bytes(store: &Path) -> u64 {
    std::fs::read_dir(store.join("segments"))
        .expect("list segments dir")
        .map(|e| match e.and_then(|e| e.metadata()) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => panic!("stat in {}: {e}", store.display()),
        })
        .sum()
}

/// `tshark -r FILE -T fields -e F1 -e F2 ...` as lines (tab-separated fields).
pub fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<String> {
    need_tool("tshark");
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r", p(file), "-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = run_ok(&mut cmd);
    stdout_str(&out).lines().map(str::to_string).collect()
}

/// `capinfos -M FILE` parsed into (key, value) pairs, in order (keys trimmed).
pub fn capinfos(file: &Path) -> Vec<(String, String)> {
    need_tool("capinfos");
    let out = run_ok(Command::new("capinfos").args(["-M", p(file)]));
    parse_capinfos(&stdout_str(&out))
}

pub fn parse_capinfos(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = if let Some(i) = l.find(": ") {
                (&l[..i], &l[i + 2..])
            } else if let Some(i) = l.find(" = ") {
                (&l[..i], &l[i + 3..])
            } else {
                return None;
            };
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// The value of the first capinfos line with key `key`.
pub fn capinfo<'a>(info: &'a [(String, String)], key: &str) -> &'a str {
    info.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("capinfos has no {key:?} line: {info:?}"))
}

/// capinfos' "Number of packets" as a number.
pub fn capinfos_packets(file: &Path) -> u64 {
    let info = capinfos(file);
    let v = capinfo(&info, "Number of packets");
    v.parse()
        .unwrap_or_else(|_| panic!("capinfos packet count {v:?}"))
}

/// "SECS.NNNNNNNNN", as tshark prints `frame.time_epoch` (Wireshark 4.0: 9 digits).
pub fn epoch(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// The lines `tshark -T fields -e frame.time_epoch -e frame.len -e frame.cap_len` would print
/// for `packets`, computed from our own decoding.
pub fn expected_tshark_lines(packets: &[Pkt]) -> Vec<String> {
    packets
        .iter()
        .map(|k| format!("{}\t{}\t{}", epoch(k.ts_ns), k.orig_len, k.data.len()))
        .collect()
}

// ------------------------------------------------------------------------------------------
// An independent pcap / pcapng decoder.
// ------------------------------------------------------------------------------------------

/// One decoded packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkt {
    pub ts_ns: u64,
    pub orig_len: u32,
    pub linktype: u16,
    pub data: Vec<u8>,
}

/// One pcapng Interface Statistics Block: the counters a capture reported for an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfStats {
    /// File-wide index of the interface (into [`Capture::ifaces`]).
    pub iface: usize,
    pub ts_ns: u64,
    /// `isb_ifrecv`: packets the interface received.
    pub received: Option<u64>,
    /// `isb_ifdrop`: packets the interface dropped.
    pub dropped: Option<u64>,
}

/// An interface of a decoded file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    pub linktype: u16,
    pub snaplen: u32,
    /// Timestamp units per second.
    pub units_per_sec: u128,
    pub offset_s: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pcap { nanos: bool, big_endian: bool },
    PcapNg,
}

/// A decoded capture file.
#[derive(Debug, Clone)]
pub struct Capture {
    pub kind: Kind,
    pub ifaces: Vec<Iface>,
    pub packets: Vec<Pkt>,
    /// Byte offset just past each packet's record (parallel to `packets`).
    pub record_end: Vec<usize>,
    /// Byte offset at which each packet's record starts (parallel to `packets`).
    pub record_start: Vec<usize>,
    /// pcapng Interface Statistics Blocks, in file order.
    pub stats: Vec<IfStats>,
    /// Where decoding stopped because of damage, and why.
    pub error: Option<(usize, String)>,
}

impl Capture {
    /// Panics if the file was damaged.
    pub fn whole(self, what: &str) -> Capture {
        if let Some((at, why)) = &self.error {
            panic!("{what}: damaged at byte {at}: {why}");
        }
        self
    }
}

fn rd16(b: &[u8], at: usize, be: bool) -> Option<u16> {
    let x: [u8; 2] = b.get(at..at + 2)?.try_into().ok()?;
    Some(if be {
        u16::from_be_bytes(x)
    } else {
        u16::from_le_bytes(x)
    })
}

fn rd32(b: &[u8], at: usize, be: bool) -> Option<u32> {
    let x: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(if be {
        u32::from_be_bytes(x)
    } else {
        u32::from_le_bytes(x)
    })
}

fn to_ns(ticks: u128, iface: &Iface) -> u64 {
    let ns = ticks * 1_000_000_000 / iface.units_per_sec;
    let ns = ns as i128 + i128::from(iface.offset_s) * 1_000_000_000;
    ns as u64
}

/// Decodes a classic pcap (either byte order, µs or ns) or a pcapng file (any number of
/// sections and interfaces, either byte order, EPB/SPB/PB). Decoding stops at the first
/// damage, which is reported in [`Capture::error`] with the offset of the bad record.
pub fn decode(b: &[u8]) -> Capture {
    let magic = rd32(b, 0, false).unwrap_or(0);
    match magic {
        0x0a0d_0d0a => decode_pcapng(b),
        0xa1b2_c3d4 | 0xa1b2_3c4d | 0xd4c3_b2a1 | 0x4d3c_b2a1 => decode_pcap(b),
        _ => Capture {
            kind: Kind::PcapNg,
            ifaces: vec![],
            packets: vec![],
            record_end: vec![],
            record_start: vec![],
            stats: vec![],
            error: Some((0, format!("unknown magic {magic:#010x}"))),
        },
    }
}

/// Reads and decodes a file.
pub fn decode_file(path: &Path) -> Capture {
    decode(&std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display())))
}

fn decode_pcap(b: &[u8]) -> Capture {
    let m = rd32(b, 0, false).unwrap();
    let (nanos, be) = match m {
        0xa1b2_c3d4 => (false, false),
        0xa1b2_3c4d => (true, false),
        0xd4c3_b2a1 => (false, true),
        _ => (true, true),
    };
    let mut cap = Capture {
        kind: Kind::Pcap {
            nanos,
            big_endian: be,
        },
        ifaces: vec![],
        packets: vec![],
        record_end: vec![],
        record_start: vec![],
        stats: vec![],
        error: None,
    };
    if b.len() < 24 {
        cap.error = Some((0, "truncated pcap header".into()));
        return cap;
    }
    let snaplen = rd32(b, 16, be).unwrap();
    let linktype = (rd32(b, 20, be).unwrap() & 0xffff) as u16;
    let iface = Iface {
        linktype,
        snaplen,
        units_per_sec: if nanos { 1_000_000_000 } else { 1_000_000 },
        offset_s: 0,
    };
    cap.ifaces.push(iface.clone());
    let mut at = 24;
    while at < b.len() {
        let (Some(sec), Some(frac), Some(caplen), Some(orig)) = (
            rd32(b, at, be),
            rd32(b, at + 4, be),
            rd32(b, at + 8, be),
            rd32(b, at + 12, be),
        ) else {
            cap.error = Some((at, "truncated pcap record header".into()));
            return cap;
        };
        let Some(data) = b.get(at + 16..at + 16 + caplen as usize) else {
            cap.error = Some((at, format!("truncated pcap record data (caplen {caplen})")));
            return cap;
        };
        let ticks = u128::from(sec) * iface.units_per_sec + u128::from(frac);
        cap.packets.push(Pkt {
            ts_ns: to_ns(ticks, &iface),
            orig_len: orig,
            linktype,
            data: data.to_vec(),
        });
        cap.record_start.push(at);
        at += 16 + caplen as usize;
        cap.record_end.push(at);
    }
    cap
}

fn decode_pcapng(b: &[u8]) -> Capture {
    let mut cap = Capture {
        kind: Kind::PcapNg,
        ifaces: vec![],
        packets: vec![],
        record_end: vec![],
        record_start: vec![],
        stats: vec![],
        error: None,
    };
    let mut be = false;
    // File-wide index of the current section's first interface.
    let mut section_first = 0usize;
    let mut at = 0usize;
    while at < b.len() {
        let Some(btype) = rd32(b, at, false) else {
            cap.error = Some((at, "truncated block header".into()));
            return cap;
        };
        if btype == 0x0a0d_0d0a {
            let Some(bom) = rd32(b, at + 8, false) else {
                cap.error = Some((at, "truncated SHB".into()));
                return cap;
            };
            be = match bom {
                0x1a2b_3c4d => false,
                0x4d3c_2b1a => true,
                _ => {
                    cap.error = Some((at, format!("bad byte-order magic {bom:#x}")));
                    return cap;
                }
            };
            section_first = cap.ifaces.len();
        }
        let btype = rd32(b, at, be).unwrap();
        let Some(len) = rd32(b, at + 4, be) else {
            cap.error = Some((at, "truncated block header".into()));
            return cap;
        };
        let len = len as usize;
        if len < 12 || !len.is_multiple_of(4) {
            cap.error = Some((at, format!("bad block length {len}")));
            return cap;
        }
        let Some(block) = b.get(at..at + len) else {
            cap.error = Some((
                at,
                format!(
                    "truncated block: length {len}, file ends after {}",
                    b.len() - at
                ),
            ));
            return cap;
        };
        let trailer = rd32(block, len - 4, be).unwrap() as usize;
        if trailer != len {
            cap.error = Some((
                at,
                format!("block lengths differ: {len} at start, {trailer} at end"),
            ));
            return cap;
        }
        let body = &block[8..len - 4];
        match btype {
            1 => {
                // IDB
                if body.len() < 8 {
                    cap.error = Some((at, "short IDB".into()));
                    return cap;
                }
                let linktype = rd16(body, 0, be).unwrap();
                let snaplen = rd32(body, 4, be).unwrap();
                let mut iface = Iface {
                    linktype,
                    snaplen,
                    units_per_sec: 1_000_000,
                    offset_s: 0,
                };
                let mut o = 8;
                while o + 4 <= body.len() {
                    let code = rd16(body, o, be).unwrap();
                    let olen = rd16(body, o + 2, be).unwrap() as usize;
                    if code == 0 {
                        break;
                    }
                    let Some(val) = body.get(o + 4..o + 4 + olen) else {
                        break;
                    };
                    if code == 9 && olen == 1 {
                        let r = val[0];
                        iface.units_per_sec = if r & 0x80 == 0 {
                            10u128.pow(u32::from(r))
                        } else {
                            1u128 << (r & 0x7f)
                        };
                    }
                    if code == 14 && olen == 8 {
                        let x: [u8; 8] = val.try_into().unwrap();
                        iface.offset_s = if be {
                            i64::from_be_bytes(x)
                        } else {
                            i64::from_le_bytes(x)
                        };
                    }
                    o += 4 + olen.div_ceil(4) * 4;
                }
                cap.ifaces.push(iface);
            }
            6 | 2 => {
                // EPB, or obsolete PB (interface id is 16 bits, then drops count)
                if body.len() < 20 {
                    cap.error = Some((at, "short packet block".into()));
                    return cap;
                }
                let id = if btype == 6 {
                    rd32(body, 0, be).unwrap() as usize
                } else {
                    rd16(body, 0, be).unwrap() as usize
                };
                let hi = rd32(body, 4, be).unwrap();
                let lo = rd32(body, 8, be).unwrap();
                let caplen = rd32(body, 12, be).unwrap() as usize;
                let orig = rd32(body, 16, be).unwrap();
                let Some(iface) = cap.ifaces.get(section_first + id).cloned() else {
                    cap.error = Some((at, format!("packet names undefined interface {id}")));
                    return cap;
                };
                let Some(data) = body.get(20..20 + caplen) else {
                    cap.error = Some((at, "caplen runs past the block".into()));
                    return cap;
                };
                let ticks = (u128::from(hi) << 32) | u128::from(lo);
                cap.packets.push(Pkt {
                    ts_ns: to_ns(ticks, &iface),
                    orig_len: orig,
                    linktype: iface.linktype,
                    data: data.to_vec(),
                });
                cap.record_start.push(at);
                cap.record_end.push(at + len);
            }
            5 => {
                // ISB: interface id, timestamp, then options (isb_ifrecv 4, isb_ifdrop 5)
                if body.len() < 12 {
                    cap.error = Some((at, "short ISB".into()));
                    return cap;
                }
                let id = rd32(body, 0, be).unwrap() as usize;
                let Some(iface) = cap.ifaces.get(section_first + id).cloned() else {
                    cap.error = Some((at, format!("ISB names undefined interface {id}")));
                    return cap;
                };
                let hi = rd32(body, 4, be).unwrap();
                let lo = rd32(body, 8, be).unwrap();
                let ticks = (u128::from(hi) << 32) | u128::from(lo);
                let mut st = IfStats {
                    iface: section_first + id,
                    ts_ns: to_ns(ticks, &iface),
                    received: None,
                    dropped: None,
                };
                let mut o = 12;
                while o + 4 <= body.len() {
                    let code = rd16(body, o, be).unwrap();
                    let olen = rd16(body, o + 2, be).unwrap() as usize;
                    if code == 0 {
                        break;
                    }
                    let Some(val) = body.get(o + 4..o + 4 + olen) else {
                        cap.error = Some((at, format!("ISB option {code} runs past the block")));
                        return cap;
                    };
                    if matches!(code, 4 | 5) && olen == 8 {
                        let x: [u8; 8] = val.try_into().unwrap();
                        let v = if be {
                            u64::from_be_bytes(x)
                        } else {
                            u64::from_le_bytes(x)
                        };
                        if code == 4 {
                            st.received = Some(v);
                        } else {
                            st.dropped = Some(v);
                        }
                    }
                    o += 4 + olen.div_ceil(4) * 4;
                }
                cap.stats.push(st);
            }
            3 => {
                // SPB: no timestamp; keep the previous packet's
                let orig = rd32(body, 0, be).unwrap_or(0);
                let Some(iface) = cap.ifaces.get(section_first).cloned() else {
                    cap.error = Some((at, "SPB without interface".into()));
                    return cap;
                };
                let mut caplen = orig as usize;
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                let Some(data) = body.get(4..4 + caplen) else {
                    cap.error = Some((at, "SPB data runs past the block".into()));
                    return cap;
                };
                let ts = cap.packets.last().map_or(0, |k| k.ts_ns);
                cap.packets.push(Pkt {
                    ts_ns: ts,
                    orig_len: orig,
                    linktype: iface.linktype,
                    data: data.to_vec(),
                });
                cap.record_start.push(at);
                cap.record_end.push(at + len);
            }
            _ => {}
        }
        at += len;
    }
    cap
}

// ------------------------------------------------------------------------------------------
// Writing test inputs.
// ------------------------------------------------------------------------------------------

/// Rewrites a little-endian classic pcap as the same file in big-endian byte order.
pub fn pcap_to_big_endian(le: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(le.len());
    let sw32 = |b: &[u8], at: usize| -> [u8; 4] {
        let x: [u8; 4] = b[at..at + 4].try_into().unwrap();
        u32::from_le_bytes(x).to_be_bytes()
    };
    let sw16 = |b: &[u8], at: usize| -> [u8; 2] {
        let x: [u8; 2] = b[at..at + 2].try_into().unwrap();
        u16::from_le_bytes(x).to_be_bytes()
    };
    out.extend_from_slice(&sw32(le, 0));
    out.extend_from_slice(&sw16(le, 4));
    out.extend_from_slice(&sw16(le, 6));
    for f in [8, 12, 16, 20] {
        out.extend_from_slice(&sw32(le, f));
    }
    let mut at = 24;
    while at < le.len() {
        let caplen = u32::from_le_bytes(le[at + 8..at + 12].try_into().unwrap()) as usize;
        for f in [0, 4, 8, 12] {
            out.extend_from_slice(&sw32(le, at + f));
        }
        out.extend_from_slice(&le[at + 16..at + 16 + caplen]);
        at += 16 + caplen;
    }
    out
}

/// Deterministic pseudo-random bytes (xorshift64*).
pub fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        v.extend_from_slice(&seed.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Rewrites a little-endian pcapng file (SHB, IDB, EPB, ISB, SPB blocks, as editcap writes
/// them) in big-endian byte order. Option codes and lengths are swapped; of the option
/// values, the numeric ones this project's readers look at (`if_tsoffset`, ISB counters and
/// timestamps) are swapped and strings are left alone.
pub fn pcapng_to_big_endian(le: &[u8]) -> Vec<u8> {
    fn sw(out: &mut Vec<u8>, b: &[u8], at: usize, n: usize) {
        let mut x = b[at..at + n].to_vec();
        x.reverse();
        out.extend_from_slice(&x);
    }
    fn options(out: &mut Vec<u8>, b: &[u8], mut at: usize, end: usize, numeric: &[u16]) {
        while at + 4 <= end {
            let code = u16::from_le_bytes([b[at], b[at + 1]]);
            let len = u16::from_le_bytes([b[at + 2], b[at + 3]]) as usize;
            sw(out, b, at, 2);
            sw(out, b, at + 2, 2);
            let padded = len.div_ceil(4) * 4;
            if numeric.contains(&code) && matches!(len, 2 | 4 | 8) {
                sw(out, b, at + 4, len);
                out.extend_from_slice(&b[at + 4 + len..at + 4 + padded]);
            } else {
                out.extend_from_slice(&b[at + 4..at + 4 + padded]);
            }
            at += 4 + padded;
            if code == 0 {
                break;
            }
        }
        // Anything after opt_endofopt, verbatim.
        out.extend_from_slice(&b[at.min(end)..end]);
    }
    let mut out = Vec::with_capacity(le.len());
    let mut at = 0;
    while at + 12 <= le.len() {
        let btype = u32::from_le_bytes(le[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(le[at + 4..at + 8].try_into().unwrap()) as usize;
        let end = at + len - 4;
        sw(&mut out, le, at, 4);
        sw(&mut out, le, at + 4, 4);
        match btype {
            0x0a0d_0d0a => {
                sw(&mut out, le, at + 8, 4); // byte-order magic
                sw(&mut out, le, at + 12, 2);
                sw(&mut out, le, at + 14, 2);
                sw(&mut out, le, at + 16, 8);
                options(&mut out, le, at + 24, end, &[]);
            }
            1 => {
                sw(&mut out, le, at + 8, 2);
                sw(&mut out, le, at + 10, 2);
                sw(&mut out, le, at + 12, 4);
                options(&mut out, le, at + 16, end, &[14]);
            }
            6 => {
                for f in 0..5 {
                    sw(&mut out, le, at + 8 + 4 * f, 4);
                }
                let caplen = u32::from_le_bytes(le[at + 20..at + 24].try_into().unwrap()) as usize;
                let data_end = at + 28 + caplen.div_ceil(4) * 4;
                out.extend_from_slice(&le[at + 28..data_end]);
                options(&mut out, le, data_end, end, &[2]);
            }
            5 => {
                for f in 0..3 {
                    sw(&mut out, le, at + 8 + 4 * f, 4);
                }
                options(&mut out, le, at + 20, end, &[2, 3, 4, 5, 6, 7, 8]);
            }
            3 => {
                sw(&mut out, le, at + 8, 4);
                out.extend_from_slice(&le[at + 12..end]);
            }
            _ => out.extend_from_slice(&le[at + 8..end]),
        }
        sw(&mut out, le, end, 4);
        at += len;
    }
    out
}

/// Classic little-endian pcap with nanosecond timestamps from (ts_ns, orig_len, data).
pub fn write_pcap_ns(linktype: u32, snaplen: u32, packets: &[(u64, u32, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&snaplen.to_le_bytes());
    out.extend_from_slice(&linktype.to_le_bytes());
    for (ts, orig, data) in packets {
        out.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&orig.to_le_bytes());
        out.extend_from_slice(data);
    }
    out
}

/// A stable sort by timestamp: what a timestamp-ordered export of `packets` must be.
pub fn sorted_by_time(packets: &[Pkt]) -> Vec<Pkt> {
    let mut v = packets.to_vec();
    v.sort_by_key(|k| k.ts_ns);
    v
}

// ------------------------------------------------------------------------------------------
// Oracles: what the stock tools select from a capture file.
// ------------------------------------------------------------------------------------------

/// The packets `tshark -Y DISPLAY_FILTER` selects from `file`, as 0-based positions in the
/// file (tshark's `frame.number` minus one), in file order.
pub fn tshark_select(file: &Path, display_filter: &str) -> Vec<usize> {
    need_tool("tshark");
    let out = run_ok(Command::new("tshark").args([
        "-n",
        "-r",
        p(file),
        "-Y",
        display_filter,
        "-T",
        "fields",
        "-e",
        "frame.number",
    ]));
    stdout_str(&out)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let n: usize = l
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("tshark frame.number {l:?}"));
            n - 1
        })
        .collect()
}

/// `tcpdump -r INPUT -w OUT EXPR` with nanosecond timestamps kept; returns OUT decoded.
pub fn tcpdump_filter(input: &Path, expr: &str, out: &Path) -> Capture {
    need_tool("tcpdump");
    run_ok(Command::new("tcpdump").args([
        "--time-stamp-precision=nano",
        "-r",
        p(input),
        "-w",
        p(out),
        expr,
    ]));
    decode_file(out).whole(&format!("tcpdump output for {expr:?}"))
}

/// Positions in `all` of the packets of `picked`, a subsequence of `all` (same timestamps
/// and bytes, same order); fails if `picked` is not one.
pub fn positions_in(all: &[Pkt], picked: &[Pkt]) -> Vec<usize> {
    let mut out = Vec::with_capacity(picked.len());
    let mut at = 0usize;
    for (n, k) in picked.iter().enumerate() {
        let i = all[at..]
            .iter()
            .position(|x| x.ts_ns == k.ts_ns && x.orig_len == k.orig_len && x.data == k.data)
            .unwrap_or_else(|| {
                panic!(
                    "packet {n} (ts {}) of the selection is not in the original after position {at}",
                    k.ts_ns
                )
            });
        out.push(at + i);
        at += i + 1;
    }
    out
}

/// Parses the "N packets (SIZE)" that starts `capsule query --count`'s output (and the
/// "exported N packets (SIZE); read R of T blocks ..." summary on stderr): the packets and
/// the size as printed, in SI units (`2.52 MB`; compare with [`si_bytes`]).
pub fn parse_packets_bytes(text: &str) -> (u64, String) {
    let s = text.trim_start().trim_start_matches("exported ");
    let n = s.split_whitespace().next().and_then(|w| w.parse().ok());
    let size = s
        .split_once(" packets (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(size, _)| size.to_string());
    match (n, size) {
        (Some(n), Some(size)) => (n, size),
        _ => panic!("expected \"N packets (SIZE)\", found {text:?}"),
    }
}

/// A byte count as capsule prints it for people: SI units, three significant digits
/// (`999 B`, `1.25 kB`, `812 MB`). Written here from that rule, not shared with the product.
pub fn si_bytes(n: u64) -> String {
    if n < 1000 {
        return format!("{n} B");
    }
    let (mut v, mut unit) = (n as f64, "B");
    for u in ["kB", "MB", "GB", "TB", "PB", "EB"] {
        if v < 999.5 {
            break;
        }
        v /= 1000.0;
        unit = u;
    }
    let digits = if v >= 99.95 {
        0
    } else if v >= 9.995 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

/// Parses "read R of T blocks" out of a query summary or an `--explain` plan line.
/// `capsule query --store STORE FILTER --explain`: (blocks read, blocks total, the plan's row
/// of segment `seq`).
pub fn explain(store: &Path, filter: &str, seq: u64) -> (u64, u64, String) {
    let o = run_ok(capsule().args(["query", "--store", p(store), filter, "--explain"]));
    let out = stdout_str(&o);
    let plan = out.lines().find(|l| l.starts_with("plan:")).unwrap();
    let (r, t) = parse_read_of(plan);
    let row = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&seq.to_string()))
        .unwrap_or_else(|| panic!("no row for segment {seq}:\n{out}"))
        .to_string();
    (r, t, row)
}

pub fn parse_read_of(text: &str) -> (u64, u64) {
    let at = text
        .find("read ")
        .unwrap_or_else(|| panic!("no \"read R of T blocks\" in {text:?}"));
    let mut w = text[at + 5..].split_whitespace();
    let r = w.next().and_then(|x| x.parse().ok());
    let of = w.next();
    let t = w.next().and_then(|x| x.parse().ok());
    match (r, of, t) {
        (Some(r), Some("of"), Some(t)) => (r, t),
        _ => panic!("expected \"read R of T blocks\" in {text:?}"),
    }
}

/// A tmpfs mounted for the test, unmounted when dropped (also when the test fails).
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount -t tmpfs needs root: {st}");
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// Bytes available on the file system holding `dir`, and its size (what `df` says).
pub fn df(dir: &Path) -> (u64, u64) {
    let out = Command::new("df")
        .args(["--output=avail,size", "-B1"])
        .arg(dir)
        .output()
        .expect("run df");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().nth(1).expect("df prints a line");
    let mut it = line.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

/// Fills the file system of `dir` with `path` until at most `leave` bytes are free.
pub fn fill(path: &Path, leave: u64) {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path.parent().unwrap())
        .output()
        .expect("run df");
    let avail: u64 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df prints the bytes free");
    std::fs::write(path, vec![0x5a; avail.saturating_sub(leave) as usize]).unwrap();
}

/// Writer options under which one segment outgrows a small disk: no sealed segment to delete
/// (and no floor of free space, so the disk does fill).
pub const ONE_BIG_SEGMENT: [&str; 8] = [
    "--block-size",
    "64K",
    "--segment-size",
    "64M",
    "--level",
    "store",
    "--min-free",
    "0",
];

/// The file where tests that could not run here say so, a line each (`TEST: why`);
/// scripts/test.sh empties it before the tests and counts and lists it in its summary.
pub fn skipped_ledger() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("capsule-skipped.txt")
}

/// Reports the test `test` as skipped, with why: on standard error and in
/// [`skipped_ledger`]. A skip is never a pass in disguise: call it only for a reason this
/// machine gives (a kernel that refuses a feature), and name that reason.
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    eprintln!("SKIPPED {test}: {why}");
    let path = skipped_ledger();
    let _ = std::fs::create_dir_all(path.parent().expect("a directory"));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    writeln!(f, "{test}: {}", why.replace('\n', " "))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// `capsule verify --store STORE`: its problem lines (every line but the summary), its exit
/// status and its whole output.
pub fn verify_problems(store: &Path) -> (Vec<String>, Option<i32>, String) {
    let v = run(capsule().args(["verify", "--store", p(store)]));
    let text = stdout_str(&v);
    let problems = text
        .lines()
        .filter(|l| !l.starts_with("verified "))
        .map(str::to_string)
        .collect();
    (problems, v.status.code(), text)
}

pub use rustix::process::Signal;

/// Sends `sig` to the process `pid` by the kill(2) system call; false when it is gone.
///
/// Tests never run the `kill` program: procps-ng 4.0.2's `kill` reads `kill -KILL -PGID` (a
/// process group) as `kill -KILL -1`, every process the caller may signal, which as root is
/// the whole machine. A test's cleanup once ended a CI run that way.
pub fn signal(pid: u32, sig: Signal) -> bool {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    pid.is_some_and(|p| rustix::process::kill_process(p, sig).is_ok())
}

/// Sends `sig` to every process of the group `pgid` (a child started with
/// `process_group(0)`: its PID); false when the group is gone.
pub fn signal_group(pgid: u32, sig: Signal) -> bool {
    let pid = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    pid.is_some_and(|p| rustix::process::kill_process_group(p, sig).is_ok())
}
