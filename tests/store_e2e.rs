//! End-to-end tests of the `capsule` binary: import into a store, export (query), segments,
//! crash recovery, retention, checked against the stock tools (tshark, capinfos, editcap,
//! mergecap, tcpdump, zstd) and an independent pcap/pcapng decoder (tests/common).
//!
//! Run: `cargo test --release --test store_e2e`. Every test creates its own temporary
//! directory; the only network traffic is on 127.0.0.1.

mod common;

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Compares two byte strings without printing megabytes on failure.
#[track_caller]
fn assert_same_bytes(found: &[u8], expected: &[u8], what: &str) {
    if found == expected {
        return;
    }
    let first = found
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(found.len().min(expected.len()));
    let lo = first.saturating_sub(8);
    panic!(
        "{what}: bytes differ: found {} bytes, expected {} bytes; first difference at byte {first}\n\
         found    [{lo}..]: {:02x?}\nexpected [{lo}..]: {:02x?}",
        found.len(),
        expected.len(),
        &found[lo..(first + 16).min(found.len())],
        &expected[lo..(first + 16).min(expected.len())],
    );
}

/// Compares decoded packet lists, reporting the first difference.
#[track_caller]
fn assert_same_packets(found: &[Pkt], expected: &[Pkt], what: &str) {
    for (i, (f, e)) in found.iter().zip(expected).enumerate() {
        if f != e {
            panic!(
                "{what}: packet {i} differs:\n found    ts {} orig_len {} caplen {} linktype {} data[..32] {:02x?}\n \
                 expected ts {} orig_len {} caplen {} linktype {} data[..32] {:02x?}",
                f.ts_ns,
                f.orig_len,
                f.data.len(),
                f.linktype,
                &f.data[..f.data.len().min(32)],
                e.ts_ns,
                e.orig_len,
                e.data.len(),
                e.linktype,
                &e.data[..e.data.len().min(32)],
            );
        }
    }
    assert_eq!(
        found.len(),
        expected.len(),
        "{what}: packet count (found vs expected)"
    );
}

/// Checks that `found` is `expected` with some packets left out, in the same order: what a
/// store holds after a crash, or while a writer is still filling it. Blocks are filled per
/// DSCP class side by side, so the packets missing are those of each class's open block, not
/// a tail; every packet kept must be whole and exact.
#[track_caller]
fn assert_subsequence(found: &[Pkt], expected: &[Pkt], what: &str) {
    let mut e = expected.iter();
    for (i, f) in found.iter().enumerate() {
        if !e.any(|x| x == f) {
            panic!(
                "{what}: kept packet {i} (ts {}, {} bytes) is not in the input after the packets \
                 kept before it",
                f.ts_ns,
                f.data.len()
            );
        }
    }
}

/// Checks every line of `tshark -T fields -e frame.time_epoch ...` starts with a
/// nanosecond timestamp (9 fractional digits).
#[track_caller]
fn assert_ns_epochs(lines: &[String], what: &str) {
    for l in lines {
        let ts = l.split('\t').next().unwrap_or("");
        let ok = ts.split_once('.').is_some_and(|(s, f)| {
            !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_digit())
                && f.len() == 9
                && f.bytes().all(|b| b.is_ascii_digit())
        });
        assert!(
            ok,
            "{what}: timestamp {ts:?} is not SECONDS.NNNNNNNNN (line {l:?})"
        );
    }
}

const TSHARK_FIELDS: [&str; 3] = ["frame.time_epoch", "frame.len", "frame.cap_len"];

/// Imports `original` into a fresh store, exports it as pcap and as pcapng, and checks that
/// both exports hold exactly the original's packets (timestamps in ns, lengths, bytes), as
/// decoded by our decoder and as tshark prints them. Returns the decoded original.
fn roundtrip_compare(dir: &Path, name: &str, original: &Path, import_args: &[&str]) -> Capture {
    need_tool("tshark");
    let orig = decode_file(original).whole(name);
    assert!(
        !orig.packets.is_empty(),
        "{name}: the generated input has no packets"
    );
    let store = dir.join(format!("store-{name}"));
    let out = import_ok(&store, import_args, &[p(original)]);
    let summary = stdout_str(&out);
    assert!(
        summary.contains(&format!("{}: {} packets", p(original), orig.packets.len())),
        "{name}: import summary does not report {} packets:\n{summary}",
        orig.packets.len()
    );

    // tshark's view of the original agrees with our decoder (guards the decoder).
    let orig_lines = tshark_fields(original, &TSHARK_FIELDS);
    assert_eq!(
        orig_lines,
        expected_tshark_lines(&orig.packets),
        "{name}: tshark vs decoder on the original"
    );

    let expected = sorted_by_time(&orig.packets);
    for (fmt, ext) in [("pcap", "pcap"), ("pcapng", "pcapng")] {
        let exp_path = dir.join(format!("{name}-export.{ext}"));
        let bytes = query_ok(&store, &exp_path, &["--format", fmt]);
        let exp = decode(&bytes).whole(&format!("{name}: {fmt} export"));
        match (fmt, exp.kind) {
            ("pcap", Kind::Pcap { nanos: true, .. }) | ("pcapng", Kind::PcapNg) => {}
            (f, k) => panic!("{name}: --format {f} produced {k:?}"),
        }
        // Exports are in timestamp order (a live capture may not quite be).
        assert_same_packets(
            &exp.packets,
            &expected,
            &format!("{name}: {fmt} export vs original"),
        );
        let lines = tshark_fields(&exp_path, &TSHARK_FIELDS);
        assert_ns_epochs(&lines, &format!("{name}: {fmt} export"));
        assert_eq!(
            lines,
            expected_tshark_lines(&expected),
            "{name}: tshark fields of the {fmt} export vs the original"
        );
        if expected != orig.packets {
            continue;
        }
        let prot_o = tshark_fields(original, &["frame.protocols"]);
        let prot_e = tshark_fields(&exp_path, &["frame.protocols"]);
        assert_eq!(
            prot_e, prot_o,
            "{name}: tshark frame.protocols of the {fmt} export vs the original"
        );
    }
    orig
}

// ------------------------------------------------------------------------------------------
// 1. Round trip of a synth pcap.
// ------------------------------------------------------------------------------------------

#[test]
fn t01_synth_roundtrip_is_byte_identical() {
    need_tool("tshark");
    need_tool("capinfos");
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("synth.pcap");
    let truth = synth(&input, &d.path().join("truth.json"), 1, "2s", "20M", None);
    let orig_bytes = std::fs::read(&input).unwrap();
    let orig = decode(&orig_bytes).whole("synth output");
    assert_eq!(
        orig.packets.len() as u64,
        truth.packets,
        "synth: decoded packets vs truth.json"
    );
    assert_eq!(
        orig.packets
            .iter()
            .map(|k| u64::from(k.orig_len))
            .sum::<u64>(),
        truth.bytes,
        "synth: bytes vs truth.json"
    );

    let store = d.path().join("store");
    // Small blocks so the round trip crosses many block boundaries.
    let out = import_ok(&store, &["--block-size", "64K"], &[p(&input)]);
    // Nothing went wrong, so nothing is logged as if it had: a new store's first catalog
    // used to be written before its index directory existed (a WARN on every first import).
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("WARN") && !err.contains("ERROR"),
        "a first import into a new store logs a problem:\n{err}"
    );
    assert!(
        stdout_str(&out).contains(&format!("stored {} packets", truth.packets)),
        "{}",
        stdout_str(&out)
    );

    let exp = d.path().join("export.pcap");
    let bytes = query_ok(&store, &exp, &[]);
    assert_same_bytes(&bytes, &orig_bytes, "pcap export vs synth input");
    assert_eq!(
        capinfos_packets(&exp),
        truth.packets,
        "capinfos packet count of the export vs truth.json"
    );

    // Also to stdout.
    let out = run_ok(capsule().args(["query", "--store", p(&store), "-w", "-"]));
    assert_same_bytes(
        &out.stdout,
        &orig_bytes,
        "pcap export to stdout vs synth input",
    );

    let expng = d.path().join("export.pcapng");
    let ngbytes = query_ok(&store, &expng, &["--format", "pcapng"]);
    let ng = decode(&ngbytes).whole("pcapng export");
    assert_eq!(ng.kind, Kind::PcapNg);
    assert!(
        ng.ifaces.iter().all(|i| i.units_per_sec == 1_000_000_000),
        "pcapng export must declare if_tsresol=9: {:?}",
        ng.ifaces
    );
    assert_same_packets(&ng.packets, &orig.packets, "pcapng export vs synth input");
    let lines_orig = tshark_fields(&input, &["frame.time_epoch", "frame.len"]);
    let lines_ng = tshark_fields(&expng, &["frame.time_epoch", "frame.len"]);
    assert_ns_epochs(&lines_ng, "pcapng export");
    assert_eq!(lines_ng.len() as u64, truth.packets);
    assert_eq!(
        lines_ng, lines_orig,
        "tshark time_epoch/len: pcapng export vs original"
    );
    let info = capinfos(&expng);
    assert_eq!(
        capinfo(&info, "Number of packets"),
        truth.packets.to_string()
    );
    assert!(
        capinfo(&info, "File timestamp precision").contains("nanoseconds"),
        "{info:?}"
    );
}

// ------------------------------------------------------------------------------------------
// 2. Round trip of files written by the real tools.
// ------------------------------------------------------------------------------------------

#[test]
fn t02a_tcpdump_written_microsecond_pcap() {
    need_tool("tcpdump");
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 21, "1s", "10M", None);
    let t = d.path().join("tcpdump.pcap");
    run_ok(Command::new("tcpdump").args(["-n", "-r", p(&s), "-w", p(&t)]));
    let tc = decode_file(&t).whole("tcpdump output");
    assert!(
        matches!(tc.kind, Kind::Pcap { nanos: false, .. }),
        "tcpdump wrote {:?}, expected a µs pcap",
        tc.kind
    );
    // The µs file holds the synth packets with timestamps cut to µs (guards the test's premise).
    let sy = decode_file(&s).whole("synth");
    assert_eq!(tc.packets.len(), sy.packets.len());
    assert!(tc
        .packets
        .iter()
        .zip(&sy.packets)
        .all(|(a, b)| a.ts_ns == b.ts_ns / 1000 * 1000 && a.data == b.data));
    roundtrip_compare(d.path(), "tcpdump", &t, &[]);
}

#[test]
fn t02b_editcap_written_pcapng() {
    need_tool("editcap");
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 22, "1s", "10M", None);
    let t = d.path().join("tshark.pcapng");
    run_ok(Command::new("editcap").args(["-F", "pcapng", p(&s), p(&t)]));
    let ng = decode_file(&t).whole("editcap output");
    assert_eq!(ng.kind, Kind::PcapNg);
    let orig = roundtrip_compare(d.path(), "editcap", &t, &[]);
    let sy = decode_file(&s).whole("synth");
    assert_same_packets(
        &orig.packets,
        &sy.packets,
        "editcap pcapng vs its synth source",
    );
}

/// Captures live loopback traffic with tcpdump, then round-trips the capture.
#[test]
fn t02c_live_loopback_capture() {
    need_tool("tcpdump");
    let d = tempfile::tempdir().unwrap();
    let lo = d.path().join("lo.pcap");
    let mut tcpdump = Command::new("tcpdump")
        .args([
            "-n",
            "-i",
            "lo",
            "-U",
            "-w",
            p(&lo),
            "-c",
            "40",
            "host 127.0.0.1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcpdump");
    let pid = tcpdump.id();
    let stderr = tcpdump.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // Wait until tcpdump listens.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) if l.contains("listening on") => break,
            Ok(_) => {}
            Err(_) => {
                if let Ok(Some(st)) = tcpdump.try_wait() {
                    panic!(
                        "tcpdump exited with {st} before listening: {}",
                        reader.join().unwrap()
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "tcpdump did not start listening within 20 s"
                );
            }
        }
    }

    // Traffic on 127.0.0.1 only: a listener echoing what each connection sends.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let server = std::thread::spawn(move || {
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0u32;
    while tcpdump.try_wait().unwrap().is_none() && Instant::now() < deadline {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let msg = vec![b'a' + (round % 26) as u8; 100 + 37 * (round as usize % 20)];
        c.write_all(&msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
        drop(c);
        round += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.join().unwrap();
    if tcpdump.try_wait().unwrap().is_none() {
        // Stop it by its PID, cleanly (SIGINT makes tcpdump flush and close the file).
        signal(pid, Signal::INT);
    }
    let st = tcpdump.wait().unwrap();
    let log = reader.join().unwrap();
    assert!(st.success(), "tcpdump exited with {st}: {log}");
    let cap = decode_file(&lo).whole("tcpdump live capture");
    assert_eq!(
        cap.packets.len(),
        40,
        "tcpdump -c 40 should have captured 40 packets: {log}"
    );
    roundtrip_compare(d.path(), "loopback", &lo, &[]);
}

#[test]
fn t02d_big_endian_pcap() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 23, "1s", "10M", None);
    let le = std::fs::read(&s).unwrap();
    let be = pcap_to_big_endian(&le);
    let bep = d.path().join("big-endian.pcap");
    std::fs::write(&bep, &be).unwrap();
    let dec = decode(&be).whole("big-endian pcap");
    assert_eq!(
        dec.kind,
        Kind::Pcap {
            nanos: true,
            big_endian: true
        }
    );
    assert_same_packets(
        &dec.packets,
        &decode(&le).packets,
        "big-endian conversion (test premise)",
    );
    roundtrip_compare(d.path(), "bigendian", &bep, &[]);
    // The export of the same packets is the little-endian ns pcap synth wrote, byte for byte.
    let again = std::fs::read(d.path().join("bigendian-export.pcap")).unwrap();
    assert_same_bytes(
        &again,
        &le,
        "export of the big-endian pcap vs the little-endian original",
    );
}

// ------------------------------------------------------------------------------------------
// 3. pcapng with two interfaces of different link types.
// ------------------------------------------------------------------------------------------

/// (encapsulation, packets) of each interface listed by capinfos, sorted.
fn capinfos_ifaces(info: &[(String, String)]) -> Vec<(String, String)> {
    let enc: Vec<&String> = info
        .iter()
        .filter(|(k, _)| k == "Encapsulation")
        .map(|(_, v)| v)
        .collect();
    let cnt: Vec<&String> = info
        .iter()
        .filter(|(k, _)| k == "Number of packets")
        .skip(1)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(enc.len(), cnt.len(), "capinfos interface lines: {info:?}");
    let mut v: Vec<(String, String)> = enc
        .into_iter()
        .cloned()
        .zip(cnt.into_iter().cloned())
        .collect();
    v.sort();
    v
}

#[test]
fn t03_two_interfaces_two_link_types() {
    need_tool("tshark");
    need_tool("editcap");
    need_tool("mergecap");
    need_tool("capinfos");
    let d = tempfile::tempdir().unwrap();
    let dp = |n: &str| d.path().join(n);
    synth(&dp("a.pcap"), &dp("a.json"), 31, "1s", "10M", None);
    synth(&dp("b_src.pcap"), &dp("b.json"), 32, "1s", "10M", None);
    // b.pcap: the untagged IPv4 packets of another capture, Ethernet header cut, as raw IP.
    run_ok(Command::new("tshark").args([
        "-n",
        "-r",
        p(&dp("b_src.pcap")),
        "-Y",
        "eth.type == 0x0800",
        "-F",
        "nsecpcap",
        "-w",
        p(&dp("v4.pcap")),
    ]));
    run_ok(Command::new("editcap").args([
        "-F",
        "nsecpcap",
        "-C",
        "14",
        "-T",
        "rawip",
        p(&dp("v4.pcap")),
        p(&dp("b.pcap")),
    ]));
    let a = decode_file(&dp("a.pcap")).whole("a.pcap");
    let b = decode_file(&dp("b.pcap")).whole("b.pcap");
    assert_eq!(a.ifaces[0].linktype, 1);
    assert_ne!(b.ifaces[0].linktype, 1, "b.pcap should not be Ethernet");
    assert!(
        !b.packets.is_empty() && b.packets.iter().all(|k| k.data[0] >> 4 == 4),
        "b.pcap should hold raw IPv4"
    );
    let two = dp("two.pcapng");
    run_ok(Command::new("mergecap").args([
        "-F",
        "pcapng",
        "-w",
        p(&two),
        p(&dp("a.pcap")),
        p(&dp("b.pcap")),
    ]));
    let merged = decode_file(&two).whole("two.pcapng");
    assert_eq!(merged.ifaces.len(), 2);
    assert_eq!(merged.packets.len(), a.packets.len() + b.packets.len());
    let info_in = capinfos(&two);
    assert_eq!(capinfo(&info_in, "Number of interfaces in file"), "2");

    let store = dp("store");
    let out = import_ok(&store, &["--block-size", "64K"], &[p(&two)]);
    assert!(
        stdout_str(&out).contains("2 interface(s)"),
        "{}",
        stdout_str(&out)
    );

    let expng = dp("export.pcapng");
    let bytes = query_ok(&store, &expng, &["--format", "pcapng"]);
    let exp = decode(&bytes).whole("pcapng export");
    assert_same_packets(
        &exp.packets,
        &merged.packets,
        "pcapng export vs two.pcapng (incl. link types)",
    );
    let info = capinfos(&expng);
    assert_eq!(
        capinfo(&info, "Number of interfaces in file"),
        "2",
        "{info:?}"
    );
    assert_eq!(
        capinfo(&info, "Number of packets"),
        merged.packets.len().to_string()
    );
    let ifs = capinfos_ifaces(&info);
    assert_eq!(
        ifs,
        capinfos_ifaces(&info_in),
        "capinfos encapsulations/counts: export vs input"
    );
    assert!(
        ifs.iter().any(|(e, _)| e.starts_with("Ethernet"))
            && ifs.iter().any(|(e, _)| e.starts_with("Raw IP")),
        "{ifs:?}"
    );
    assert_eq!(
        tshark_fields(
            &expng,
            &["frame.time_epoch", "frame.len", "frame.protocols"]
        ),
        tshark_fields(&two, &["frame.time_epoch", "frame.len", "frame.protocols"]),
        "tshark view of the export vs two.pcapng"
    );

    // pcap holds one link type: the export must refuse, and say why.
    let out = run(capsule().args(["query", "--store", p(&store), "-w", p(&dp("export.pcap"))]));
    assert!(
        !out.status.success(),
        "pcap export of two link types must fail"
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_str(&out);
    assert!(
        err.contains("link types") && err.contains("pcapng"),
        "error should mention link types and pcapng: {err}"
    );
}

// ------------------------------------------------------------------------------------------
// 4. Damaged inputs.
// ------------------------------------------------------------------------------------------

#[test]
fn t04a_truncated_pcap_keeps_whole_packets() {
    need_tool("capinfos");
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 41, "2s", "20M", None);
    let bytes = std::fs::read(&s).unwrap();
    let cap = decode(&bytes).whole("synth");
    let n = cap.packets.len();
    for (case, k, cut_in) in [("in-data", n * 3 / 5, 16 + 10), ("in-header", n / 3, 7)] {
        let start = cap.record_start[k];
        let cut = start + cut_in;
        assert!(cut < cap.record_end[k]);
        let trunc = d.path().join(format!("cut-{case}.pcap"));
        std::fs::write(&trunc, &bytes[..cut]).unwrap();
        let whole = d.path().join(format!("whole-{case}.pcap"));
        std::fs::write(&whole, &bytes[..start]).unwrap();
        assert_eq!(
            capinfos_packets(&whole),
            k as u64,
            "capinfos on the copy cut at the last whole record"
        );

        let store = d.path().join(format!("store-{case}"));
        let out = import(&store, &["--block-size", "64K"], &[p(&trunc)]);
        let err = stderr_str(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{case}: import of a truncated file must exit 1; stderr: {err}"
        );
        assert!(
            err.contains(p(&trunc)),
            "{case}: error must name the file: {err}"
        );
        assert!(
            err.contains(&format!("byte {start}")),
            "{case}: error must give the offset {start} of the cut record: {err}"
        );
        assert!(
            stdout_str(&out).contains(&format!("{}: {k} packets", p(&trunc))),
            "{case}: {}",
            stdout_str(&out)
        );

        let exp = d.path().join(format!("export-{case}.pcap"));
        let got = query_ok(&store, &exp, &[]);
        assert_same_bytes(
            &got,
            &bytes[..start],
            &format!("{case}: export vs the input up to the damaged record"),
        );
        assert_eq!(capinfos_packets(&exp), k as u64);
    }
}

#[test]
fn t04b_garbage_input_leaves_store_unchanged() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 42, "1s", "10M", None);
    let orig = std::fs::read(&s).unwrap();
    let store = d.path().join("store");
    import_ok(&store, &[], &[p(&s)]);
    let segs_before = segments(&store);
    let files_before = segment_files(&store);

    let garbage = d.path().join("garbage.bin");
    let noise = noise(100_000, 0x5eed);
    assert_ne!(&noise[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
    std::fs::write(&garbage, &noise).unwrap();
    let out = import(&store, &[], &[p(&garbage)]);
    let err = stderr_str(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "garbage import must exit 1: {err}"
    );
    assert!(err.contains(p(&garbage)), "error must name the file: {err}");
    assert!(
        err.to_lowercase().contains("unknown magic") || err.contains("not a pcap"),
        "error must say the format is unknown: {err}"
    );

    let empty = d.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let out = import(&store, &[], &[p(&empty)]);
    let err = stderr_str(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "empty import must exit 1: {err}"
    );
    assert!(
        err.contains(p(&empty)) && err.contains("empty"),
        "error must name the file and say it is empty: {err}"
    );

    let segs_after = segments(&store);
    assert_eq!(segment_files(&store), files_before, "segment files changed");
    assert_eq!(
        segs_after
            .iter()
            .map(|s| (s.seq, s.packets, s.bytes))
            .collect::<Vec<_>>(),
        segs_before
            .iter()
            .map(|s| (s.seq, s.packets, s.bytes))
            .collect::<Vec<_>>()
    );
    let got = query_ok(&store, &d.path().join("export.pcap"), &[]);
    assert_same_bytes(
        &got,
        &orig,
        "export after the garbage import vs the first input",
    );
}

#[test]
fn t04c_pcapng_with_corrupted_block_length() {
    need_tool("editcap");
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 43, "1s", "10M", None);
    let ng = d.path().join("good.pcapng");
    run_ok(Command::new("editcap").args(["-F", "pcapng", p(&s), p(&ng)]));
    let bytes = std::fs::read(&ng).unwrap();
    let cap = decode(&bytes).whole("editcap pcapng");
    assert_eq!(
        &bytes[8..12],
        &0x1a2b_3c4du32.to_le_bytes(),
        "editcap wrote a big-endian section?"
    );
    let n = cap.packets.len();
    // (name, index of the damaged block, how its length field is changed)
    type Case = (&'static str, usize, fn(u32) -> u32);
    let cases: [Case; 3] = [
        ("len-plus-4", n / 2, |l| l + 4), // leading/trailing lengths disagree
        ("not-multiple-of-4", n / 3, |l| l + 2), // not a multiple of 4
        ("huge", 2 * n / 3, |_| 0x7fff_fff0), // over any limit, past the end of the file
    ];
    for (case, k, f) in cases {
        let start = cap.record_start[k];
        let len = u32::from_le_bytes(bytes[start + 4..start + 8].try_into().unwrap());
        let mut bad = bytes.clone();
        bad[start + 4..start + 8].copy_from_slice(&f(len).to_le_bytes());
        let badp = d.path().join(format!("bad-{case}.pcapng"));
        std::fs::write(&badp, &bad).unwrap();
        let dec = decode(&bad);
        assert_eq!(
            dec.error.as_ref().map(|e| e.0),
            Some(start),
            "{case}: test premise (our decoder)"
        );

        let store = d.path().join(format!("store-{case}"));
        let out = import(&store, &["--block-size", "64K"], &[p(&badp)]);
        let err = stderr_str(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{case}: import must exit 1: {err}"
        );
        assert!(
            err.contains(p(&badp)),
            "{case}: error must name the file: {err}"
        );
        assert!(
            err.contains(&format!("byte {start}")),
            "{case}: error must name the block's offset {start}: {err}"
        );
        let got = decode(&query_ok(
            &store,
            &d.path().join(format!("export-{case}.pcapng")),
            &["--format", "pcapng"],
        ))
        .whole("export");
        assert_same_packets(
            &got.packets,
            &cap.packets[..k],
            &format!("{case}: export vs the packets before the damage"),
        );
    }
}

// ------------------------------------------------------------------------------------------
// 5. Standard input.
// ------------------------------------------------------------------------------------------

#[test]
fn t05_stdin_import_equals_file_import() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    let truth = synth(&s, &d.path().join("truth.json"), 5, "2s", "20M", None);
    let orig = std::fs::read(&s).unwrap();
    let a = d.path().join("store-file");
    let b = d.path().join("store-stdin");
    import_ok(&a, &["--block-size", "64K"], &[p(&s)]);
    let out = run_ok(Command::new("sh").arg("-c").arg(format!(
        "cat '{}' | '{}' import --store '{}' --block-size 64K -",
        p(&s),
        bin(),
        p(&b)
    )));
    assert!(
        stdout_str(&out).contains(&format!("{} packets", truth.packets)),
        "stdin import summary: {}",
        stdout_str(&out)
    );
    let ea = query_ok(&a, &d.path().join("a.pcap"), &[]);
    let eb = query_ok(&b, &d.path().join("b.pcap"), &[]);
    assert_same_bytes(&eb, &ea, "stdin import export vs file import export");
    assert_same_bytes(&eb, &orig, "stdin import export vs input");
    let sa: Vec<_> = segments(&a)
        .iter()
        .map(|s| (s.blocks, s.packets, s.first_ns, s.last_ns))
        .collect();
    let sb: Vec<_> = segments(&b)
        .iter()
        .map(|s| (s.blocks, s.packets, s.first_ns, s.last_ns))
        .collect();
    assert_eq!(sb, sa, "segments of the stdin store vs the file store");
    // Compressed on standard input, as a path's compression is recognised (before: "unknown
    // magic number 0x1f8b0808").
    for (tool, name) in [("gzip", "gz"), ("zstd", "zst")] {
        need_tool(tool);
        let c = d.path().join(format!("store-{name}"));
        let out = run_ok(Command::new("sh").arg("-c").arg(format!(
            "{tool} -c '{}' | '{}' import --store '{}' --block-size 64K -",
            p(&s),
            bin(),
            p(&c)
        )));
        assert!(
            stdout_str(&out).contains(&format!("{} packets", truth.packets)),
            "{tool} on stdin: {}{}",
            stdout_str(&out),
            stderr_str(&out)
        );
        let ec = query_ok(&c, &d.path().join(format!("c.{name}.pcap")), &[]);
        assert_same_bytes(&ec, &orig, "compressed stdin import export vs input");
    }
}

// ------------------------------------------------------------------------------------------
// 6. Segments are readable by the stock tools.
// ------------------------------------------------------------------------------------------

#[test]
fn t06_segments_readable_by_zstd_tshark_capinfos() {
    segments_readable_by_zstd_tshark_capinfos(&["--segment-size", "1M", "--block-size", "64K"]);
}

/// The same at the store level with blocks large enough to be written from the buffers they
/// were built in: block headers padded, stored frames of uneven raw blocks after empty ones
/// (docs/format.md), which zstd, tshark and capinfos read like any other.
#[test]
fn t06_stored_segments_built_in_their_frames_readable_by_zstd_tshark_capinfos() {
    segments_readable_by_zstd_tshark_capinfos(&[
        "--segment-size",
        "1M",
        "--block-size",
        "256K",
        "--level",
        "store",
    ]);
}

fn segments_readable_by_zstd_tshark_capinfos(import_args: &[&str]) {
    need_tool("zstd");
    need_tool("tshark");
    need_tool("capinfos");
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    let truth = synth(&s, &d.path().join("truth.json"), 6, "2s", "20M", None);
    let input = decode_file(&s).whole("synth");
    let store = d.path().join("store");
    import_ok(&store, import_args, &[p(&s)]);
    let segs = segments(&store);
    assert!(
        segs.len() >= 3,
        "expected several segments with {import_args:?}, got {segs:?}"
    );
    let files = segment_files(&store);
    assert!(
        files.iter().all(|f| !f.contains(".open")),
        "open segment left after import: {files:?}"
    );
    let mut all = Vec::new();
    let mut total = 0u64;
    for (i, seg) in segs.iter().enumerate() {
        assert_eq!(seg.state, "sealed", "{seg:?}");
        assert_eq!(
            seg.seq,
            i as u64 + 1,
            "segment numbers start at 1 with no gaps: {segs:?}"
        );
        let path = if seg.path.is_absolute() {
            seg.path.clone()
        } else {
            std::env::current_dir().unwrap().join(&seg.path)
        };
        assert!(
            path.exists(),
            "segments --json path {} does not exist",
            path.display()
        );
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name, format!("seg-{:012}.pcapng.zst", seg.seq));
        let sp = p(&path);
        let lines: Vec<String> = String::from_utf8(sh_ok(&format!(
            "zstd -dc '{sp}' | tshark -n -r - -T fields -e frame.time_epoch 2>/dev/null"
        )))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
        assert_ns_epochs(&lines, &name);
        assert_eq!(
            lines.len() as u64,
            seg.packets,
            "{name}: tshark packets vs segments --json"
        );
        let info = parse_capinfos(
            &String::from_utf8(sh_ok(&format!("zstd -dc '{sp}' | capinfos -M -"))).unwrap(),
        );
        assert_eq!(
            capinfo(&info, "Number of packets"),
            seg.packets.to_string(),
            "{name}: capinfos"
        );
        let raw = sh_ok(&format!("zstd -dc '{sp}'"));
        let dec = decode(&raw).whole(&name);
        assert_eq!(dec.packets.len() as u64, seg.packets);
        let times: Vec<String> = dec.packets.iter().map(|k| epoch(k.ts_ns)).collect();
        assert_eq!(lines, times, "{name}: tshark timestamps vs our decoding");
        assert_eq!(
            seg.first_ns,
            dec.packets.iter().map(|k| k.ts_ns).min(),
            "{name}: first_ns"
        );
        assert_eq!(
            seg.last_ns,
            dec.packets.iter().map(|k| k.ts_ns).max(),
            "{name}: last_ns"
        );
        total += seg.packets;
        all.extend(dec.packets);
    }
    assert_eq!(
        total, truth.packets,
        "sum of packets over segments vs truth.json"
    );
    // A segment holds its blocks in the order they were cut, one lane (DSCP class) after
    // another, so its packets are in time order within each block, not across the file; in
    // time order (stable) they are the input.
    all.sort_by_key(|k| k.ts_ns);
    assert_same_packets(
        &all,
        &input.packets,
        "segments' packets in time order vs the input",
    );
}

// ------------------------------------------------------------------------------------------
// 7. Crash in the middle of an import.
// ------------------------------------------------------------------------------------------

/// Feeds the first `fed` bytes of `input` to `capsule import --store STORE -` through a pipe
/// that stays open, waits `wait`, then kills the import with SIGKILL (by its PID). Returns
/// whether a torn `.open` segment was left.
fn kill_mid_import(store: &Path, input: &[u8], fed: usize, wait: Duration) -> bool {
    let mut child = capsule()
        .args([
            "import",
            "--store",
            p(store),
            "--block-size",
            "64K",
            "--segment-size",
            "1M",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&input[..fed]).expect("feed the import");
    stdin.flush().unwrap();
    std::thread::sleep(wait);
    assert!(
        child.try_wait().unwrap().is_none(),
        "the import ended although its input is still open"
    );
    child.kill().expect("kill -9 the import"); // SIGKILL to this child's PID
    let st = child.wait().unwrap();
    drop(stdin);
    assert!(!st.success());
    segment_files(store).iter().any(|f| f.ends_with(".open"))
}

#[test]
fn t07_kill_9_mid_import_then_recover() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    // Three killed imports (different timings), each of a later hour than the one before,
    // then a small whole file: the store must hold a prefix of each killed input, in order,
    // then the whole small file.
    let rounds = [
        (Duration::from_millis(1200), 12usize << 20),
        (Duration::from_millis(300), 6 << 20),
        (Duration::from_millis(700), 9 << 20),
    ];
    let mut inputs = Vec::new();
    for (i, &(wait, fed)) in rounds.iter().enumerate() {
        let big = d.path().join(format!("big{i}.pcap"));
        let start = format!("2026-11-30T0{}:00:00Z", 2 + i);
        synth(
            &big,
            &d.path().join(format!("big{i}.json")),
            70 + i as u64,
            "4s",
            "100M",
            Some(&start),
        );
        let bytes = std::fs::read(&big).unwrap();
        assert!(bytes.len() > 2 * fed, "big input too small for the test");
        let cap = decode(&bytes).whole("big");
        let torn = kill_mid_import(&store, &bytes, fed, wait);
        if i == 0 {
            assert!(
                torn,
                "expected a torn .open segment after kill -9: {:?}",
                segment_files(&store)
            );
        }
        inputs.push((cap, fed, torn));
    }
    let small = d.path().join("small.pcap");
    synth(
        &small,
        &d.path().join("small.json"),
        77,
        "1s",
        "8M",
        Some("2026-11-30T07:00:00Z"),
    );
    let small_cap = decode_file(&small).whole("small");

    let out = import_ok(
        &store,
        &["--block-size", "64K", "--segment-size", "1M"],
        &[p(&small)],
    );
    let so = stdout_str(&out);
    if inputs.last().unwrap().2 {
        assert!(
            so.contains("recovered segment"),
            "second import must report the recovery: {so}"
        );
    }
    let files = segment_files(&store);
    assert!(
        files.iter().all(|f| !f.contains(".open")),
        "no .open may remain after the import: {files:?}"
    );

    let exp = decode(&query_ok(&store, &d.path().join("export.pcap"), &[]))
        .whole("export after recovery");
    let mut at = 0usize;
    for (i, (cap, fed, _)) in inputs.iter().enumerate() {
        // Packets of this round: those of its hour.
        let k = exp.packets[at..]
            .iter()
            .take_while(|k| {
                cap.packets.first().unwrap().ts_ns <= k.ts_ns
                    && k.ts_ns <= cap.packets.last().unwrap().ts_ns
            })
            .count();
        let whole_fed = cap.record_end.iter().take_while(|&&e| e <= *fed).count();
        let fed_bytes: usize = cap.packets[..whole_fed]
            .iter()
            .map(|p| p.data.len() + 16)
            .sum();
        let kept_bytes: usize = exp.packets[at..at + k]
            .iter()
            .map(|p| p.data.len() + 16)
            .sum();
        let lost_bytes = fed_bytes.saturating_sub(kept_bytes);
        eprintln!("round {i}: fed {fed} bytes = {whole_fed} whole packets; kept {k}; lost {lost_bytes} bytes");
        if i == 0 {
            assert!(
                k > 0,
                "round {i}: nothing of the killed import was kept (blocks were written for > 1 s)"
            );
            // docs/format.md: a crash loses the blocks being filled (one per DSCP class, 8 at
            // most) and blocks still in the compression pipeline (drained after 1.2 s idle).
            assert!(
                lost_bytes <= 16 * 64 * 1024,
                "round {i}: {lost_bytes} bytes of fed packets lost after 1.2 s idle (block size 64 KiB)"
            );
        }
        assert!(
            k <= whole_fed,
            "round {i}: kept {k} packets but only {whole_fed} whole packets were fed"
        );
        assert_subsequence(
            &exp.packets[at..at + k],
            &cap.packets[..whole_fed],
            &format!("round {i}: kept packets vs the killed input"),
        );
        at += k;
    }
    assert_same_packets(
        &exp.packets[at..],
        &small_cap.packets,
        "then the small file's packets",
    );
    let segs = segments(&store);
    assert!(segs.iter().all(|s| s.state == "sealed"), "{segs:?}");
    assert_eq!(
        segs.iter().map(|s| s.packets).sum::<u64>(),
        exp.packets.len() as u64
    );
    assert!(segs.windows(2).all(|w| w[0].seq < w[1].seq));
}

// ------------------------------------------------------------------------------------------
// 8. Retention.
// ------------------------------------------------------------------------------------------

#[test]
fn t08_retention_keeps_newest_under_budget() {
    need_tool("zstd");
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 8, "4s", "60M", None);
    let input = std::fs::read(&s).unwrap();
    let cap = decode(&input).whole("synth");
    let compressed: u64 = String::from_utf8(sh_ok(&format!("zstd -1 -c '{}' | wc -c", p(&s))))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let budget = 8u64 << 20;
    assert!(
        compressed > 2 * budget,
        "test premise: input compresses to {compressed} bytes, not well over 8 MiB"
    );

    let store = d.path().join("store");
    let out = import_ok(
        &store,
        &[
            "--max-bytes",
            "8M",
            "--segment-size",
            "1M",
            "--block-size",
            "64K",
        ],
        &[p(&s)],
    );
    let used = segments_dir_bytes(&store);
    assert!(
        used <= budget,
        "segments use {used} bytes, over the 8 MiB budget\n{}",
        stdout_str(&out)
    );
    let segs = segments(&store);
    assert!(!segs.is_empty());
    assert!(segs[0].seq > 1, "no segment was deleted: {segs:?}");
    assert!(
        segs[0].seq > 2,
        "several segments should have been deleted: {segs:?}"
    );
    assert!(
        segs.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "kept segments are consecutive: {segs:?}"
    );

    let got = query_ok(&store, &d.path().join("export.pcap"), &[]);
    assert_same_bytes(&got[..24], &input[..24], "export header vs input header");
    let body = &got[24..];
    assert!(!body.is_empty(), "retention kept nothing");
    let cut = input.len() - body.len();
    assert!(
        input.ends_with(body),
        "the export is not a suffix of the input"
    );
    let idx = cap
        .record_start
        .iter()
        .position(|&r| r == cut)
        .unwrap_or_else(|| panic!("the export starts mid-record (input byte {cut})"));
    assert_eq!(
        (cap.packets.len() - idx) as u64,
        segs.iter().map(|s| s.packets).sum::<u64>()
    );
    assert!(idx > 0);
}

// ------------------------------------------------------------------------------------------
// 9. Broken pipe.
// ------------------------------------------------------------------------------------------

#[test]
fn t09_broken_pipe_is_success() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 9, "2s", "20M", None);
    let store = d.path().join("store");
    import_ok(&store, &[], &[p(&s)]);
    let input = std::fs::read(&s).unwrap();

    let mut child = capsule()
        .args(["query", "--store", p(&store), "-w", "-"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut so = child.stdout.take().unwrap();
    let mut head = [0u8; 100];
    so.read_exact(&mut head).unwrap();
    drop(so);
    let t0 = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert_eq!(&head[..], &input[..100]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "query into a closed pipe must exit 0; stderr: {}",
        stderr_str(&out)
    );
    assert!(
        !stderr_str(&out).contains("error"),
        "stderr: {}",
        stderr_str(&out)
    );

    // And in a real shell pipeline with head.
    need_tool("bash");
    let o = run_ok(Command::new("bash").arg("-c").arg(format!(
        "set -o pipefail; '{}' query --store '{}' -w - | head -c 100 | wc -c",
        bin(),
        p(&store)
    )));
    assert_eq!(stdout_str(&o).trim(), "100");
}

// ------------------------------------------------------------------------------------------
// 10. Time window.
// ------------------------------------------------------------------------------------------

#[test]
fn t10_time_window_is_exact() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    let truth = synth(&s, &d.path().join("truth.json"), 10, "2s", "20M", None);
    let input = std::fs::read(&s).unwrap();
    let cap = decode(&input).whole("synth");
    let tsv: Vec<u64> = cap.packets.iter().map(|k| k.ts_ns).collect();
    let store = d.path().join("store");
    import_ok(
        &store,
        &["--block-size", "64K", "--segment-size", "1M"],
        &[p(&s)],
    );
    let n = tsv.len();
    assert_eq!(n as u64, truth.packets);
    let day_start = 1_796_004_000u64; // 2026-11-30T02:00:00Z, synth's default start
    let mut windows = vec![
        (tsv[n / 3], tsv[2 * n / 3]),
        (tsv[n / 7] + 1, tsv[n / 7 + 50]),
        (tsv[10], tsv[10]),         // empty
        (tsv[0], tsv[n - 1] + 1),   // everything
        (tsv[n - 1], u64::MAX / 2), // the last packet(s)
        (0, tsv[0] + 1),            // the first packet(s)
    ];
    windows.push((tsv[n / 2] - 1, tsv[n / 2] + 1));
    for (i, &(a, b)) in windows.iter().enumerate() {
        let expected: Vec<u8> = {
            let mut v = input[..24].to_vec();
            for (j, &t) in tsv.iter().enumerate() {
                if a <= t && t < b {
                    v.extend_from_slice(&input[cap.record_start[j]..cap.record_end[j]]);
                }
            }
            v
        };
        let from = format!("@{a}");
        let to = format!("@{b}");
        let got = query_ok(
            &store,
            &d.path().join(format!("w{i}.pcap")),
            &["--from", &from, "--to", &to],
        );
        assert_same_bytes(&got, &expected, &format!("window {i} [{from}, {to})"));
        if a >= day_start * 1_000_000_000 && b < (day_start + 60) * 1_000_000_000 {
            // Same window as Unix seconds with 9 digits, and as RFC 3339.
            let secs = format!("--from={}", epoch(a));
            let got2 = query_ok(
                &store,
                &d.path().join(format!("w{i}s.pcap")),
                &[&secs, "--to", &epoch(b)],
            );
            assert_same_bytes(&got2, &expected, &format!("window {i} as Unix seconds"));
            let rfc = |t: u64| {
                format!(
                    "2026-11-30T02:00:{:02}.{:09}Z",
                    t / 1_000_000_000 - day_start,
                    t % 1_000_000_000
                )
            };
            let got3 = query_ok(
                &store,
                &d.path().join(format!("w{i}r.pcap")),
                &["--from", &rfc(a), "--to", &rfc(b)],
            );
            assert_same_bytes(
                &got3,
                &expected,
                &format!("window {i} as RFC 3339 {} .. {}", rfc(a), rfc(b)),
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// 11. Store errors.
// ------------------------------------------------------------------------------------------

#[test]
fn t11_store_errors_are_named() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nonexistent");
    let out = run(capsule().args([
        "query",
        "--store",
        p(&missing),
        "-w",
        p(&d.path().join("x.pcap")),
    ]));
    let err = stderr_str(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "query of a missing store: {err}"
    );
    assert!(
        err.contains(p(&missing)),
        "error must name the store: {err}"
    );
    assert!(
        err.contains("capsule-store.json") || err.contains("not a capsule store"),
        "error must say what is missing: {err}"
    );
    assert!(!missing.exists(), "a query must not create the store");
    let out = run(capsule().args([
        "query",
        "--store",
        "/nonexistent",
        "-w",
        p(&d.path().join("y.pcap")),
    ]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_str(&out).contains("/nonexistent"),
        "{}",
        stderr_str(&out)
    );
    let out = run(capsule().args(["segments", "--store", p(&missing)]));
    assert_eq!(
        out.status.code(),
        Some(1),
        "segments of a missing store: {}",
        stderr_str(&out)
    );

    // A store of a future format version.
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 11, "1s", "8M", None);
    let store = d.path().join("store");
    import_ok(&store, &[], &[p(&s)]);
    let meta = store.join("capsule-store.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
    assert_eq!(v["format"], 1);
    v["format"] = 9.into();
    std::fs::write(&meta, serde_json::to_vec(&v).unwrap()).unwrap();
    let files_before = segment_files(&store);
    for args in [
        vec![
            "query",
            "--store",
            p(&store),
            "-w",
            p(&d.path().join("z.pcap")),
        ],
        vec!["segments", "--store", p(&store)],
        vec!["import", "--store", p(&store), p(&s)],
    ] {
        let out = run(capsule().args(&args));
        let err = stderr_str(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?} on a format-9 store: {err}"
        );
        assert!(
            err.contains("capsule-store.json") && err.contains('9') && err.contains("format"),
            "{args:?}: error must name the file and the format version: {err}"
        );
    }
    assert_eq!(
        segment_files(&store),
        files_before,
        "a refused import changed the segments"
    );
}

// ------------------------------------------------------------------------------------------
// 12. More: instants with UTC offsets, torn segments, odd packets, several inputs...
// ------------------------------------------------------------------------------------------

/// `--from`/`--to` accept RFC 3339; an instant with a numeric UTC offset must mean that
/// instant (or be refused), never be read as if it were UTC.
#[test]
fn t12_rfc3339_with_utc_offset() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 12, "2s", "10M", None);
    let store = d.path().join("store");
    import_ok(&store, &[], &[p(&s)]);
    let reference = query_ok(
        &store,
        &d.path().join("z.pcap"),
        &[
            "--from",
            "2026-11-30T02:00:00.5Z",
            "--to",
            "2026-11-30T02:00:01.5Z",
        ],
    );
    assert!(decode(&reference).packets.len() > 100);
    for (from, to) in [
        ("2026-11-30T03:00:00.5+01:00", "2026-11-30T03:00:01.5+01:00"),
        ("2026-11-30T02:00:00.5+00:00", "2026-11-30T02:00:01.5+00:00"),
        ("2026-11-29T21:00:00.5-05:00", "2026-11-29T21:00:01.5-05:00"),
    ] {
        let out_path = d.path().join("o.pcap");
        let _ = std::fs::remove_file(&out_path);
        let out = run(capsule().args([
            "query",
            "--store",
            p(&store),
            "-w",
            p(&out_path),
            "--from",
            from,
            "--to",
            to,
        ]));
        if out.status.success() {
            let got = std::fs::read(&out_path).unwrap();
            assert_same_bytes(
                &got,
                &reference,
                &format!("window [{from}, {to}) vs the same instants written in UTC"),
            );
        } else {
            let err = stderr_str(&out);
            assert!(err.contains("--from") || err.contains("--to"), "{err}");
        }
    }
    // One endpoint with an offset, the other without: both must be honoured (or refused).
    let out_path = d.path().join("mixed.pcap");
    let out = run(capsule().args([
        "query",
        "--store",
        p(&store),
        "-w",
        p(&out_path),
        "--from",
        "2026-11-30T03:00:00.5+01:00",
        "--to",
        "2026-11-30T02:00:01.5Z",
    ]));
    if out.status.success() {
        assert_same_bytes(
            &std::fs::read(&out_path).unwrap(),
            &reference,
            "--from with +01:00 offset, --to in UTC",
        );
    }
}

/// A torn tail (garbage appended, or the file cut inside a block frame) is cut back to the
/// last whole block; the rest of the store is untouched.
#[test]
fn t13_torn_open_segment_tail() {
    let d = tempfile::tempdir().unwrap();
    let big = d.path().join("big.pcap");
    synth(&big, &d.path().join("big.json"), 13, "4s", "100M", None);
    let bytes = std::fs::read(&big).unwrap();
    let cap = decode(&bytes).whole("big");
    let fed = 10usize << 20;
    let whole_fed = cap.record_end.iter().take_while(|&&e| e <= fed).count();
    let base = d.path().join("base");
    assert!(
        kill_mid_import(&base, &bytes, fed, Duration::from_millis(1200)),
        "no .open after kill -9"
    );
    let open_name = segment_files(&base)
        .into_iter()
        .find(|f| f.ends_with(".open"))
        .unwrap();
    // What a reader sees in the torn store before any repair.
    let before = decode(&query_ok(&base, &d.path().join("before.pcap"), &[]))
        .whole("export of the torn store");
    assert!(!before.packets.is_empty() && before.packets.len() <= whole_fed);
    assert_subsequence(&before.packets, &cap.packets, "reader of a torn store");

    for case in ["garbage-tail", "cut-mid-frame"] {
        let store = d.path().join(case);
        run_ok(Command::new("cp").args(["-a", p(&base), p(&store)]));
        let open = store.join("segments").join(&open_name);
        let len = std::fs::metadata(&open).unwrap().len();
        match case {
            "garbage-tail" => {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&open)
                    .unwrap();
                f.write_all(&noise(5000, 7)).unwrap();
            }
            _ => {
                let f = std::fs::OpenOptions::new().write(true).open(&open).unwrap();
                f.set_len(len * 2 / 3).unwrap();
            }
        }
        // Readers cope with the torn tail without repairing it.
        let out = run(capsule().args(["segments", "--store", p(&store)]));
        assert!(
            out.status.success(),
            "{case}: segments of a torn store: {}",
            stderr_str(&out)
        );
        // The next writer repairs it.
        let tiny = d.path().join("tiny.pcap");
        if !tiny.exists() {
            synth(
                &tiny,
                &d.path().join("tiny.json"),
                131,
                "1s",
                "8M",
                Some("2026-11-30T05:00:00Z"),
            );
        }
        let out = import_ok(&store, &[], &[p(&tiny)]);
        let so = stdout_str(&out);
        assert!(so.contains("recovered segment"), "{case}: {so}");
        assert!(
            segment_files(&store).iter().all(|f| !f.contains(".open")),
            "{case}: {:?}",
            segment_files(&store)
        );
        let tiny_cap = decode_file(&tiny).whole("tiny");
        let exp = decode(&query_ok(
            &store,
            &d.path().join(format!("{case}.pcap")),
            &[],
        ))
        .whole(case);
        let k = exp.packets.len() - tiny_cap.packets.len();
        if case == "garbage-tail" {
            assert_eq!(
                k,
                before.packets.len(),
                "{case}: garbage after the last block must not cost a whole block"
            );
        } else {
            assert!(
                k < before.packets.len(),
                "{case}: the cut block cannot survive"
            );
        }
        assert_subsequence(
            &exp.packets[..k],
            &cap.packets,
            &format!("{case}: kept packets vs the input"),
        );
        assert_same_packets(
            &exp.packets[k..],
            &tiny_cap.packets,
            &format!("{case}: then the tiny file"),
        );
    }
}

/// A segment whose head is unreadable is moved aside as `.open.damaged` "for inspection";
/// segment numbers only grow (docs/format.md), so no later segment may reuse its number, and
/// a second damaged segment must not replace the first one's evidence.
#[test]
fn t14_damaged_head_is_kept_aside_and_seq_grows() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    let mut damaged_seqs = Vec::new();
    let mut problems = Vec::new();
    // Two killed imports in a row, each leaving an .open segment whose head we then wreck.
    for round in 0..2u64 {
        let big = d.path().join(format!("big{round}.pcap"));
        let start = format!("2026-11-30T0{}:00:00Z", 2 + round);
        synth(
            &big,
            &d.path().join(format!("big{round}.json")),
            140 + round,
            "2s",
            "100M",
            Some(&start),
        );
        let bytes = std::fs::read(&big).unwrap();
        // Default segment size: everything goes to one open segment.
        let mut child = capsule()
            .args(["import", "--store", p(&store), "--block-size", "64K", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&bytes[..4 << 20]).unwrap();
        std::thread::sleep(Duration::from_millis(800));
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        drop(stdin);
        if round > 0 {
            let so = stdout_str(&out);
            let prev = damaged_seqs[0];
            assert!(
                so.contains(&format!("recovered segment {prev}")) && so.contains("damaged"),
                "round {round}: {so}"
            );
        }
        let open = segment_files(&store)
            .into_iter()
            .find(|f| f.ends_with(".open"))
            .expect("torn .open segment");
        let seq: u64 = open
            .trim_start_matches(".seg-")
            .split('.')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        if let Some(prev) = damaged_seqs.last() {
            if seq <= *prev {
                problems.push(format!(
                    "round {round}: the new segment got number {seq}, not above the damaged segment {prev}"
                ));
            }
        }
        damaged_seqs.push(seq);
        let path = store.join("segments").join(&open);
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all(&[0x55; 64]).unwrap();
    }
    let small = d.path().join("small.pcap");
    synth(
        &small,
        &d.path().join("small.json"),
        150,
        "1s",
        "8M",
        Some("2026-11-30T05:00:00Z"),
    );
    let out = import_ok(&store, &[], &[p(&small)]);
    let so = stdout_str(&out);
    let last = *damaged_seqs.last().unwrap();
    assert!(
        so.contains(&format!("recovered segment {last}")) && so.contains("damaged"),
        "{so}"
    );
    let files = segment_files(&store);
    let damaged = files
        .iter()
        .filter(|f| f.ends_with(".open.damaged"))
        .count();
    if damaged != 2 {
        problems.push(format!(
            "two segments were damaged (numbers {damaged_seqs:?}) but {damaged} .open.damaged file(s) remain: {files:?}"
        ));
    }
    let segs = segments(&store);
    let newest = segs.last().unwrap().seq;
    if newest <= last {
        problems.push(format!(
            "the small file's segment got number {newest}, not above the damaged segment {last}"
        ));
    }
    // Whatever else, the store exports the small file.
    let exp = decode(&query_ok(&store, &d.path().join("e.pcap"), &[])).whole("export");
    let small_cap = decode_file(&small).whole("small");
    assert_same_packets(
        &exp.packets,
        &small_cap.packets,
        "export: only the small file is whole",
    );
    assert!(
        problems.is_empty(),
        "segment numbering / evidence problems:\n{}",
        problems.join("\n")
    );
}

/// Packets of unusual sizes: empty, larger than a block, at the 256 KiB limit, and cut by a
/// snap length (captured < original length).
#[test]
fn t15_odd_packet_sizes_roundtrip() {
    let d = tempfile::tempdir().unwrap();
    let t0 = 1_796_004_000_000_000_000u64;
    let sizes: [(usize, u32); 11] = [
        (60, 60),
        (0, 0),
        (0, 60),
        (100_000, 100_000),
        (14, 14),
        (65_536, 65_536),
        (262_144, 262_144),
        (60, 1514),
        (200_000, 200_000),
        (1514, 1514),
        (70_001, 70_001),
    ];
    let pk: Vec<(u64, u32, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &(cap, orig))| (t0 + i as u64 * 1000 + 7, orig, noise(cap, i as u64 + 1)))
        .collect();
    let bytes = write_pcap_ns(1, 262_144, &pk);
    let f = d.path().join("odd.pcap");
    std::fs::write(&f, &bytes).unwrap();
    let store = d.path().join("store");
    import_ok(&store, &["--block-size", "64K"], &[p(&f)]);
    let got = query_ok(&store, &d.path().join("e.pcap"), &[]);
    assert_same_bytes(&got, &bytes, "odd sizes: export vs input");
    let ng = decode(&query_ok(
        &store,
        &d.path().join("e.pcapng"),
        &["--format", "pcapng"],
    ))
    .whole("pcapng");
    assert_same_packets(
        &ng.packets,
        &decode(&bytes).packets,
        "odd sizes: pcapng export",
    );
    need_tool("tshark");
    let lines = tshark_fields(&d.path().join("e.pcapng"), &TSHARK_FIELDS);
    assert_eq!(lines, expected_tshark_lines(&ng.packets));
}

/// A packet larger than the store accepts is refused; the input's packets before it are kept
/// and the error names the file (as for a damaged input).
#[test]
fn t16_oversized_packet_keeps_earlier_packets() {
    let d = tempfile::tempdir().unwrap();
    let t0 = 1_796_004_000_000_000_000u64;
    let mut pk: Vec<(u64, u32, Vec<u8>)> = (0..100)
        .map(|i| (t0 + i * 1000, 60, noise(60, i + 1)))
        .collect();
    pk.push((t0 + 100_000, 300_000, noise(300_000, 999)));
    pk.extend((101..110).map(|i| (t0 + i * 1000, 60, noise(60, i + 1))));
    let bytes = write_pcap_ns(1, 400_000, &pk);
    let f = d.path().join("oversized.pcap");
    std::fs::write(&f, &bytes).unwrap();
    let cap = decode(&bytes).whole("premise");
    let store = d.path().join("store");
    let out = import(&store, &["--block-size", "64K"], &[p(&f)]);
    let err = stderr_str(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "import of a file with a 300,000-byte packet: {err}"
    );
    assert!(err.contains(p(&f)), "error must name the file: {err}");
    let exp = decode(&query_ok(&store, &d.path().join("e.pcap"), &[])).whole("export");
    assert_same_packets(
        &exp.packets,
        &cap.packets[..100],
        "the 100 packets before the oversized one must be kept",
    );
}

/// Error messages say each thing once.
#[test]
fn t17_error_messages_do_not_repeat_themselves() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 17, "1s", "8M", None);
    // A store directory that cannot be created (a regular file is in the way).
    let blocker = d.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    let store = blocker.join("store");
    let out = run(capsule().args(["import", "--store", p(&store), p(&s)]));
    let err = stderr_str(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(p(&store)), "{err}");
    let os = "Not a directory";
    assert_eq!(
        err.matches(os).count(),
        1,
        "the OS error should appear once: {err}"
    );
}

/// Several inputs, in one import or in several, overlapping in time and out of order within
/// a file: the export is all packets in timestamp order (ties keep arrival order).
#[test]
fn t18_overlapping_and_unordered_inputs_export_in_time_order() {
    let d = tempfile::tempdir().unwrap();
    let dp = |n: &str| d.path().join(n);
    synth(&dp("x1.pcap"), &dp("x1.json"), 181, "1s", "10M", None);
    synth(
        &dp("x2.pcap"),
        &dp("x2.json"),
        182,
        "1s",
        "10M",
        Some("2026-11-30T02:00:00.3Z"),
    );
    let x1 = decode_file(&dp("x1.pcap")).whole("x1");
    let x2 = decode_file(&dp("x2.pcap")).whole("x2");
    // x3: x1's packets with every run of 300 reversed (out of order across 64 KiB blocks).
    let mut shuffled = Vec::new();
    for chunk in x1.packets.chunks(300) {
        shuffled.extend(
            chunk
                .iter()
                .rev()
                .map(|k| (k.ts_ns, k.orig_len, k.data.clone())),
        );
    }
    std::fs::write(dp("x3.pcap"), write_pcap_ns(1, 65_535, &shuffled)).unwrap();
    let x3 = decode_file(&dp("x3.pcap")).whole("x3");

    let one = dp("one");
    let out = import_ok(
        &one,
        &["--block-size", "64K"],
        &[p(&dp("x1.pcap")), p(&dp("x2.pcap"))],
    );
    assert!(
        !stdout_str(&out).contains("out of timestamp order"),
        "{}",
        stdout_str(&out)
    );
    let e = decode(&query_ok(&one, &dp("one.pcap"), &[])).whole("one");
    let all: Vec<Pkt> = x1.packets.iter().chain(&x2.packets).cloned().collect();
    assert_same_packets(&e.packets, &sorted_by_time(&all), "two files in one import");

    let two = dp("two");
    import_ok(&two, &["--block-size", "64K"], &[p(&dp("x2.pcap"))]);
    import_ok(&two, &["--block-size", "64K"], &[p(&dp("x1.pcap"))]);
    let e = decode(&query_ok(&two, &dp("two.pcap"), &[])).whole("two");
    let all: Vec<Pkt> = x2.packets.iter().chain(&x1.packets).cloned().collect();
    assert_same_packets(
        &e.packets,
        &sorted_by_time(&all),
        "two imports, the later one older",
    );

    let three = dp("three");
    let out = import_ok(&three, &["--block-size", "64K"], &[p(&dp("x3.pcap"))]);
    assert!(
        stdout_str(&out).contains("out of timestamp order"),
        "{}",
        stdout_str(&out)
    );
    let e = decode(&query_ok(&three, &dp("three.pcap"), &[])).whole("three");
    assert_same_packets(&e.packets, &sorted_by_time(&x3.packets), "unordered file");
    // A window of an unordered store is exact too.
    let ts: Vec<u64> = sorted_by_time(&x3.packets)
        .iter()
        .map(|k| k.ts_ns)
        .collect();
    let (a, b) = (ts[ts.len() / 4], ts[ts.len() * 3 / 4]);
    let w = decode(&query_ok(
        &three,
        &dp("w.pcap"),
        &["--from", &format!("@{a}"), "--to", &format!("@{b}")],
    ))
    .whole("w");
    let want: Vec<Pkt> = sorted_by_time(&x3.packets)
        .into_iter()
        .filter(|k| a <= k.ts_ns && k.ts_ns < b)
        .collect();
    assert_same_packets(&w.packets, &want, "window of an unordered store");
}

/// pcapng in big-endian byte order, and a file of two sections (one of each byte order).
#[test]
fn t19_big_endian_and_multi_section_pcapng() {
    need_tool("editcap");
    need_tool("tshark");
    let d = tempfile::tempdir().unwrap();
    let dp = |n: &str| d.path().join(n);
    synth(&dp("a.pcap"), &dp("a.json"), 191, "1s", "10M", None);
    synth(
        &dp("b.pcap"),
        &dp("b.json"),
        192,
        "1s",
        "10M",
        Some("2026-11-30T02:00:00.5Z"),
    );
    run_ok(Command::new("editcap").args(["-F", "pcapng", p(&dp("a.pcap")), p(&dp("a.pcapng"))]));
    // b as a µs-resolution pcapng (if_tsresol 6) via tcpdump's µs pcap.
    need_tool("tcpdump");
    run_ok(Command::new("tcpdump").args(["-n", "-r", p(&dp("b.pcap")), "-w", p(&dp("b_us.pcap"))]));
    run_ok(Command::new("editcap").args(["-F", "pcapng", p(&dp("b_us.pcap")), p(&dp("b.pcapng"))]));
    let a_le = std::fs::read(dp("a.pcapng")).unwrap();
    let a_be = pcapng_to_big_endian(&a_le);
    std::fs::write(dp("a_be.pcapng"), &a_be).unwrap();
    let a = decode(&a_le).whole("a.pcapng");
    assert_same_packets(
        &decode(&a_be).whole("a_be").packets,
        &a.packets,
        "premise: big-endian conversion",
    );
    assert_eq!(
        tshark_fields(&dp("a_be.pcapng"), &TSHARK_FIELDS),
        tshark_fields(&dp("a.pcapng"), &TSHARK_FIELDS),
        "premise: tshark reads the big-endian file the same"
    );
    roundtrip_compare(
        d.path(),
        "be-pcapng",
        &dp("a_be.pcapng"),
        &["--block-size", "64K"],
    );

    let b_le = std::fs::read(dp("b.pcapng")).unwrap();
    let mut multi = pcapng_to_big_endian(&b_le);
    multi.extend_from_slice(&a_le);
    std::fs::write(dp("multi.pcapng"), &multi).unwrap();
    let m = decode(&multi).whole("multi");
    assert_eq!(m.ifaces.len(), 2);
    assert_eq!(m.ifaces[0].units_per_sec, 1_000_000);
    let store = dp("store-multi");
    let out = import_ok(&store, &["--block-size", "64K"], &[p(&dp("multi.pcapng"))]);
    assert!(
        stdout_str(&out).contains(&format!("{} packets", m.packets.len())),
        "{}",
        stdout_str(&out)
    );
    let e = decode(&query_ok(
        &store,
        &dp("multi-e.pcapng"),
        &["--format", "pcapng"],
    ))
    .whole("multi export");
    assert_same_packets(
        &e.packets,
        &sorted_by_time(&m.packets),
        "two-section file, in time order",
    );
    // Same link type, same snaplen, no names: one pcap is possible and holds the same.
    let e2 = decode(&query_ok(&store, &dp("multi-e.pcap"), &[])).whole("multi pcap export");
    assert_same_packets(&e2.packets, &e.packets, "pcap vs pcapng export");
}

/// One writer at a time; readers work while a writer is active and see whole packets.
#[test]
fn t20_lock_and_reading_during_import() {
    let d = tempfile::tempdir().unwrap();
    let big = d.path().join("big.pcap");
    synth(&big, &d.path().join("big.json"), 20, "2s", "100M", None);
    let bytes = std::fs::read(&big).unwrap();
    let cap = decode(&bytes).whole("big");
    let other = d.path().join("other.pcap");
    synth(&other, &d.path().join("other.json"), 21, "1s", "8M", None);
    let store = d.path().join("store");
    let mut child = capsule()
        .args([
            "import",
            "--store",
            p(&store),
            "--block-size",
            "64K",
            "--segment-size",
            "1M",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let half = bytes.len() / 2;
    stdin.write_all(&bytes[..half]).unwrap();
    std::thread::sleep(Duration::from_millis(800));

    let out = import(&store, &[], &[p(&other)]);
    let err = stderr_str(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a second writer must be refused: {err}"
    );
    assert!(
        err.contains("another process") || err.contains("lock"),
        "{err}"
    );

    let live =
        decode(&query_ok(&store, &d.path().join("live.pcap"), &[])).whole("export during import");
    assert!(
        !live.packets.is_empty(),
        "blocks written for 0.8 s should be readable"
    );
    assert_subsequence(
        &live.packets,
        &cap.packets,
        "export during import vs input prefix",
    );
    let segs = segments(&store);
    assert!(segs.iter().any(|s| s.state == "open"), "{segs:?}");

    stdin.write_all(&bytes[half..]).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr_str(&out));
    let all = query_ok(&store, &d.path().join("all.pcap"), &[]);
    assert_same_bytes(&all, &bytes, "export after the import finished");
    assert!(segments(&store).iter().all(|s| s.state == "sealed"));
}

/// A writer opened with a smaller budget deletes the oldest segments at once.
#[test]
fn t21_retention_applied_when_budget_shrinks() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("synth.pcap");
    synth(&s, &d.path().join("truth.json"), 210, "2s", "60M", None);
    let input = std::fs::read(&s).unwrap();
    let later = d.path().join("later.pcap");
    synth(
        &later,
        &d.path().join("later.json"),
        211,
        "1s",
        "8M",
        Some("2026-11-30T03:00:00Z"),
    );
    let store = d.path().join("store");
    import_ok(
        &store,
        &["--block-size", "64K", "--segment-size", "1M"],
        &[p(&s)],
    );
    let before = segments(&store);
    assert!(before.len() >= 6, "{before:?}");
    let budget = 4u64 << 20;
    let out = import_ok(
        &store,
        &[
            "--block-size",
            "64K",
            "--segment-size",
            "1M",
            "--max-bytes",
            "4M",
        ],
        &[p(&later)],
    );
    let so = stdout_str(&out);
    assert!(so.contains("retention: deleted segment 1 "), "{so}");
    let used = segments_dir_bytes(&store);
    assert!(
        used <= budget,
        "segments use {used} bytes, over the 4 MiB budget\n{so}"
    );
    let segs = segments(&store);
    assert!(segs[0].seq > 1);
    let later_cap = decode_file(&later).whole("later");
    let exp = query_ok(&store, &d.path().join("e.pcap"), &[]);
    let e = decode(&exp).whole("export");
    assert!(e.packets.ends_with(&later_cap.packets));
    let kept = e.packets.len() - later_cap.packets.len();
    // What is left of the first input is its newest part.
    let body_len: usize = e.record_end[kept.saturating_sub(1)].saturating_sub(24);
    let body = &exp[24..24 + if kept == 0 { 0 } else { body_len }];
    assert!(
        input.ends_with(body),
        "the kept part of the first input is not its newest packets"
    );
}

/// A pcapng section: interface 0 (Ethernet, microseconds) with one good packet, then
/// interface 1 whose IDB carries `idb1_opts` (whole options), then a packet on interface 1.
/// Returns the file and the offsets of the second IDB and of the packet on interface 1.
fn pcapng_with_second_iface(idb1_opts: &[u8]) -> (Vec<u8>, usize, usize) {
    use capsule_pcap::write::{pcapng_epb, pcapng_shb};
    let idb = |f: &mut Vec<u8>, opts: &[u8]| {
        let len = (20 + opts.len()) as u32;
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&len.to_le_bytes());
        f.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        f.extend_from_slice(opts);
        f.extend_from_slice(&len.to_le_bytes());
    };
    let mut f = Vec::new();
    pcapng_shb(&mut f, None);
    idb(&mut f, &[]);
    pcapng_epb(&mut f, 0, 1_700_000_000_000_000, 60, &[0xaa; 60]); // 2023, in µs
    let second_idb = f.len();
    idb(&mut f, idb1_opts);
    let packet = f.len();
    pcapng_epb(&mut f, 1, 1, 60, &[0xbb; 60]);
    (f, second_idb, packet)
}

/// Defect: an `if_tsoffset` of 2^63 - 1 imported with exit 0 and no export returned the
/// packets; an `if_tsresol` of 0x7f or 0xff turned every timestamp into 1970. Now an
/// impossible resolution stops the import at its IDB (exit 1, the file and offset named) and
/// keeps the packets before it; a time past 2200 is a packet named and not stored (exit 3,
/// incomplete; see t24).
#[test]
fn t22_impossible_timestamps_are_refused_with_their_offset() {
    let d = tempfile::tempdir().unwrap();
    #[rustfmt::skip]
    let cases: [(&str, Vec<u8>, bool); 3] = [
        ("tsoffset-max", vec![14, 0, 8, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], false),
        ("tsresol-7f", vec![9, 0, 1, 0, 0x7f, 0, 0, 0], true),
        ("tsresol-ff", vec![9, 0, 1, 0, 0xff, 0, 0, 0], true),
    ];
    for (case, opts, at_idb) in cases {
        let (bytes, idb, packet) = pcapng_with_second_iface(&opts);
        let file = d.path().join(format!("{case}.pcapng"));
        std::fs::write(&file, &bytes).unwrap();
        let store = d.path().join(format!("store-{case}"));
        let out = import(&store, &[], &[p(&file)]);
        let err = stderr_str(&out);
        assert_eq!(
            out.status.code(),
            Some(if at_idb { 1 } else { 3 }),
            "{case}: import must exit 1 (refused) or 3 (incomplete): {err}"
        );
        let offset = if at_idb { idb } else { packet };
        assert!(
            err.contains(&format!("{}: at byte {offset}: ", p(&file))),
            "{case}: the error must name the file and offset {offset}: {err}"
        );
        let what = if at_idb {
            "if_tsresol"
        } else {
            "packet at 9223372036854775807 s from the epoch is outside"
        };
        assert!(err.contains(what), "{case}: {err}");
        let got = decode(&query_ok(
            &store,
            &d.path().join(format!("{case}.out")),
            &[],
        ))
        .whole("export");
        assert_eq!(got.packets.len(), 1, "{case}: the packet before is kept");
        assert_eq!(got.packets[0].ts_ns, 1_700_000_000_000_000_000);
    }
}

/// Defect (issue 26, item 13): pcapng annotations were dropped on import: section comments
/// and `shb_os`, `if_description` and `if_filter`, packet comments, `epb_flags` and
/// `epb_dropcount` (an engineer's annotated evidence came back without its annotations),
/// and a name-resolution block vanished without a word. Now each is kept and written back
/// on export (tshark and capinfos read the same from both), and what is not kept is named.
#[test]
fn t23_pcapng_annotations_come_back_on_export_and_what_is_not_kept_is_named() {
    let d = tempfile::tempdir().unwrap();
    let opt = |code: u16, v: &[u8]| {
        let mut o = code.to_le_bytes().to_vec();
        o.extend_from_slice(&(v.len() as u16).to_le_bytes());
        o.extend_from_slice(v);
        o.resize(o.len() + (4 - v.len() % 4) % 4, 0);
        o
    };
    let block = |t: u32, body: &[u8]| {
        let len = (12 + body.len()) as u32;
        let mut b = t.to_le_bytes().to_vec();
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(body);
        b.extend_from_slice(&len.to_le_bytes());
        b
    };
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    shb.extend(opt(1, b"evidence for INC-42"));
    shb.extend(opt(3, b"Linux 6.18"));
    shb.extend(opt(0, b""));
    let mut idb = vec![1, 0, 0, 0, 0, 0, 0, 0];
    idb.extend(opt(2, b"span0"));
    idb.extend(opt(3, b"core uplink mirror"));
    idb.extend(opt(11, b"\0tcp port 443"));
    idb.extend(opt(9, &[9]));
    idb.extend(opt(0, b""));
    let epb = |ts: u64, opts: &[u8]| {
        let mut e = 0u32.to_le_bytes().to_vec();
        e.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        e.extend_from_slice(&(ts as u32).to_le_bytes());
        e.extend_from_slice(&60u32.to_le_bytes());
        e.extend_from_slice(&60u32.to_le_bytes());
        e.extend_from_slice(&noise(60, ts));
        e.extend_from_slice(opts);
        block(6, &e)
    };
    let mut file = block(0x0a0d_0d0a, &shb);
    file.extend(block(1, &idb));
    let nrb = file.len();
    file.extend(block(4, &[0, 0, 0, 0]));
    let t0 = 1_700_000_000_000_000_000u64;
    let mut annotated = opt(1, b"first retransmission");
    annotated.extend(opt(2, &1u32.to_le_bytes())); // inbound
    annotated.extend(opt(4, &7u64.to_le_bytes()));
    annotated.extend(opt(0, b""));
    file.extend(epb(t0, &annotated));
    file.extend(epb(t0 + 1_000_000, &opt(1, b"second look")));
    file.extend(epb(t0 + 2_000_000, &[]));
    let input = d.path().join("annotated.pcapng");
    std::fs::write(&input, &file).unwrap();

    let store = d.path().join("store");
    let out = import_ok(&store, &[], &[p(&input)]);
    let err = stderr_str(&out);
    assert!(
        err.contains(&format!(
            "{}: at byte {nrb}: name resolution block (type 0x00000004) not kept",
            p(&input)
        )),
        "the block not kept is named with its offset: {err}"
    );
    let export = d.path().join("out.pcapng");
    query_ok(&store, &export, &["--format", "pcapng"]);
    let fields = ["frame.comment", "frame.packet_flags", "frame.drop_count"];
    let want = tshark_fields(&input, &fields);
    assert_eq!(want[0], "first retransmission\t0x00000001\t7", "premise");
    assert_eq!(tshark_fields(&export, &fields), want, "packet annotations");
    let (a, b) = (capinfos(&input), capinfos(&export));
    for key in [
        "Capture comment",
        "Capture oper-sys",
        "Name",
        "Description",
        "Filter string",
    ] {
        assert_eq!(capinfo(&b, key), capinfo(&a, key), "capinfos {key}");
    }
    // The annotations survive compaction (which copies or recompresses the frames).
    let compact = run(capsule().args(["compact", "--store", p(&store)]));
    assert!(compact.status.success(), "{}", stderr_str(&compact));
    let again = d.path().join("again.pcapng");
    query_ok(&store, &again, &["--format", "pcapng"]);
    assert_eq!(tshark_fields(&again, &fields), want, "after compaction");
}

/// Defect (issue 26, item 13): a pcapng with times before 1970 (Wireshark reads it) was
/// refused at its first such packet; pcap records with a sub-second field of a second or
/// more were carried into the seconds without a word, and an original length below the
/// captured length was raised silently. Now the packets before 1970 are named and skipped,
/// everything after them is imported, and import exits 3 (incomplete); the mended records
/// are named with their offsets.
#[test]
fn t24_pre_1970_packets_are_named_and_the_rest_imported_with_exit_3() {
    let d = tempfile::tempdir().unwrap();
    // if_tsoffset -100 s: packets at 10 s and 200 s (µs) are at -90 s and +100 s.
    #[rustfmt::skip]
    let minus = [14, 0, 8, 0, 0x9c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    let (mut bytes, _, second) = pcapng_with_second_iface(&minus);
    capsule_pcap::write::pcapng_epb(&mut bytes, 1, 200_000_000, 60, &[0xcc; 60]);
    let file = d.path().join("pre-1970.pcapng");
    std::fs::write(&file, &bytes).unwrap();
    let store = d.path().join("store");
    let out = import(&store, &[], &[p(&file)]);
    let err = stderr_str(&out);
    assert_eq!(out.status.code(), Some(3), "incomplete: {err}");
    assert!(
        err.contains(&format!(
            "{}: at byte {second}: packet at -100 s from the epoch is outside",
            p(&file)
        )),
        "{err}"
    );
    assert!(err.contains("1 packets of"), "{err}");
    let got = decode(&query_ok(&store, &d.path().join("e.pcap"), &[])).whole("export");
    let times: Vec<u64> = got.packets.iter().map(|p| p.ts_ns).collect();
    assert_eq!(times, vec![100_000_000_000, 1_700_000_000_000_000_000]);

    // A µs pcap: 1 s + 1,500,000 µs, then caplen 4 above len 2.
    let mut pcap = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        pcap.extend_from_slice(&v.to_le_bytes());
    }
    for (secs, frac, caplen, len) in [(1u32, 1_500_000u32, 1u32, 1u32), (3, 0, 4, 2)] {
        for v in [secs, frac, caplen, len] {
            pcap.extend_from_slice(&v.to_le_bytes());
        }
        pcap.extend(std::iter::repeat_n(7u8, caplen as usize));
    }
    let odd = d.path().join("odd.pcap");
    std::fs::write(&odd, &pcap).unwrap();
    let out = import_ok(&d.path().join("store2"), &[], &[p(&odd)]);
    let err = stderr_str(&out);
    for want in [
        format!(
            "{}: at byte 24: pcap record's sub-second field is 1500000 µs",
            p(&odd)
        ),
        format!(
            "{}: at byte 41: original length 2 is below the captured length 4",
            p(&odd)
        ),
    ] {
        assert!(err.contains(&want), "{want}: {err}");
    }
}
