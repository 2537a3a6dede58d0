//! A newcomer's first hour (the [ux] issue): time forms and their errors, answers that say
//! when a window misses the data, output files named by their extension, tables that fit
//! a terminal, and the generated help (man pages, completions, version).

mod common;

use common::*;

/// An Ethernet frame of `len` bytes (IPv4/UDP, addresses from `host`).
fn udp_frame(host: u8, len: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    let ip_len = (len - 14) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, host, 10, 0, 0, 99]);
    f.extend_from_slice(&[0x9c, 0x40, 0x00, 0x35]);
    f.extend_from_slice(&((len - 34) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(len, 0xab);
    f
}

/// A store holding 10 Ethernet packets, one every 100 ms from 2026-11-30T02:00:00Z.
fn small_store(dir: &std::path::Path) -> std::path::PathBuf {
    let t0 = 1_796_004_000_000_000_000u64;
    let packets: Vec<_> = (0..10u64)
        .map(|i| (t0 + i * 100_000_000, 100, udp_frame(i as u8 + 1, 100)))
        .collect();
    let input = dir.join("in.pcap");
    std::fs::write(&input, write_pcap_ns(1, 0, &packets)).unwrap();
    let store = dir.join("store");
    import_ok(&store, &[], &[p(&input)]);
    store
}

fn count(store: &std::path::Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = run(capsule()
        .args(["query", "--store", p(store), "--count"])
        .args(extra));
    (out.status.code(), stdout_str(&out), stderr_str(&out))
}

#[test]
fn a_bad_time_names_every_accepted_form() {
    let d = tempfile::tempdir().unwrap();
    let store = small_store(d.path());
    let out = run(capsule().args([
        "query",
        "--store",
        p(&store),
        "--count",
        "--from",
        "yesterday",
    ]));
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_str(&out);
    for form in [
        "RFC 3339",
        "a date",
        "Unix seconds",
        "@NANOS",
        "now",
        "-10m",
    ] {
        assert!(err.contains(form), "the error names {form}: {err}");
    }
}

#[test]
fn a_date_is_midnight_and_to_may_follow_from() {
    let d = tempfile::tempdir().unwrap();
    let store = small_store(d.path());
    // The day of the packets, as a date alone.
    let (code, out, err) = count(&store, &["--from", "2026-11-30", "--to", "2026-12-01"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("10 packets"), "{out}");
    // 250 ms after the first packet: packets at 0, 100 and 200 ms.
    let (code, out, err) = count(
        &store,
        &["--from", "2026-11-30T02:00:00Z", "--to", "+250ms"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("3 packets"), "{out}");
    // +DURATION without --from is a usage error.
    let (code, _, err) = count(&store, &["--to", "+1ms"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--from"), "{err}");
}

#[test]
fn a_window_that_misses_the_store_says_where_the_data_is() {
    let d = tempfile::tempdir().unwrap();
    let store = small_store(d.path());
    let (code, out, err) = count(&store, &["--from", "-10m"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("0 packets"), "{out}");
    assert!(
        err.contains("starts after the newest packet held")
            && err.contains("2026-11-30T02:00:00.9"),
        "{err}"
    );
    let out = run(capsule().args(["flows", "--store", p(&store), "--to", "2026-11-29"]));
    assert!(out.status.success());
    let err = stderr_str(&out);
    assert!(
        err.contains("ends before the oldest packet held") && err.contains("2026-11-30T02:00:00."),
        "{err}"
    );
    // A window over the data prints no such note.
    let (_, _, err) = count(&store, &["--from", "2026-11-30"]);
    assert!(!err.contains("note"), "{err}");
}

#[test]
fn synth_dated_now_is_found_by_a_relative_window() {
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("t.pcap");
    let truth = synth(&pcap, &d.path().join("t.json"), 3, "1s", "20M", Some("-1m"));
    let store = d.path().join("store");
    import_ok(&store, &[], &[p(&pcap)]);
    let (code, out, err) = count(&store, &["--from", "-10m"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with(&format!("{} packets", truth.packets)),
        "{out}"
    );
}

#[test]
fn the_output_format_follows_the_extension_and_count_takes_any_link_type() {
    let d = tempfile::tempdir().unwrap();
    let store = small_store(d.path());
    let ng = d.path().join("out.pcapng");
    let bytes = query_ok(&store, &ng, &[]);
    assert_eq!(
        &bytes[..4],
        &[0x0a, 0x0d, 0x0d, 0x0a],
        "a pcapng section header"
    );
    assert_eq!(capinfos_packets(&ng), 10);
    let pcap = d.path().join("out.pcap");
    let bytes = query_ok(&store, &pcap, &[]);
    assert_eq!(
        &bytes[..4],
        &0xa1b2_3c4du32.to_le_bytes(),
        "a nanosecond pcap"
    );
    let forced = d.path().join("forced.pcapng");
    let bytes = query_ok(&store, &forced, &["--format", "pcap"]);
    assert_eq!(&bytes[..4], &0xa1b2_3c4du32.to_le_bytes(), "--format wins");

    // A second link type (raw IP) in the same store: a count still answers, a pcap export
    // (one link type per file) fails and leaves no file behind.
    let raw: Vec<_> = (0..3u64)
        .map(|i| {
            (
                1_796_004_002_000_000_000 + i,
                86,
                udp_frame(50, 100)[14..].to_vec(),
            )
        })
        .collect();
    let input = d.path().join("raw.pcap");
    std::fs::write(&input, write_pcap_ns(101, 0, &raw)).unwrap();
    import_ok(&store, &[], &[p(&input)]);
    let (code, out, err) = count(&store, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("13 packets"), "{out}");
    let failed = d.path().join("mixed.pcap");
    let out = run(capsule().args(["query", "--store", p(&store), "-w", p(&failed)]));
    assert!(!out.status.success(), "a pcap holds one link type");
    assert!(!failed.exists(), "a failed export leaves no file");
}

#[test]
fn the_flows_table_fits_80_columns_and_names_protocols() {
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("t.pcap");
    synth(&pcap, &d.path().join("t.json"), 4, "1s", "50M", None);
    let store = d.path().join("store");
    import_ok(&store, &[], &[p(&pcap)]);
    let out = run_ok(
        capsule()
            .args(["flows", "--store", p(&store), "--limit", "40"])
            .env("COLUMNS", "80"),
    );
    let text = stdout_str(&out);
    assert!(text.lines().count() > 10, "{text}");
    for line in text.lines() {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    assert!(
        text.lines().skip(1).any(|l| l.starts_with("tcp ")),
        "{text}"
    );
    assert!(
        text.contains(" MB") || text.contains(" kB"),
        "human sizes: {text}"
    );
    // Without a terminal or COLUMNS, every column is shown.
    let out = run_ok(
        capsule()
            .args(["flows", "--store", p(&store), "--limit", "5"])
            .env_remove("COLUMNS"),
    );
    let header = stdout_str(&out)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    for col in [
        "proto", "flow", "packets", "bytes", "first", "duration", "dscp", "retrans",
    ] {
        assert!(header.contains(col), "{header}");
    }
}

#[test]
fn version_man_pages_completions_and_filter_help() {
    let out = run_ok(capsule().arg("--version"));
    let v = stdout_str(&out);
    assert!(
        v.contains("commit ") && v.contains("segment format 1"),
        "{v}"
    );
    let d = tempfile::tempdir().unwrap();
    run_ok(capsule().args(["man", "--dir", p(d.path())]));
    for page in ["capsule.1", "capsule-query.1", "capsule-capture.1"] {
        let text = std::fs::read_to_string(d.path().join(page)).unwrap();
        assert!(text.contains(".TH"), "{page} is a man page");
    }
    assert!(
        !d.path().join("capsule-__check-bpf.1").exists(),
        "hidden commands have no page"
    );
    let out = run_ok(capsule().args(["completions", "bash"]));
    assert!(stdout_str(&out).contains("complete -F _capsule"));
    let help = stdout_str(&run_ok(capsule().args(["help", "filters"])));
    assert!(
        help.contains("dscp") && help.contains("--to +1ms"),
        "{help}"
    );
    let help = stdout_str(&run_ok(capsule().args(["query", "--help"])));
    assert!(
        help.contains("portrange") && help.contains("Exit status"),
        "{help}"
    );
}

#[test]
fn import_into_a_directory_that_is_not_a_store_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("notes.txt"), b"mine").unwrap();
    let input = d.path().join("in.pcap");
    std::fs::write(&input, write_pcap_ns(1, 0, &[(1, 100, udp_frame(1, 100))])).unwrap();
    let out = import(&home, &[], &[p(&input)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_str(&out);
    assert!(
        err.contains("not empty") && err.contains("notes.txt"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&home)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("notes.txt")],
        "nothing created"
    );
    // An empty directory, and an existing store, are fine.
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    import_ok(&empty, &[], &[p(&input)]);
    import_ok(&empty, &[], &[p(&input)]);
}

/// RFC 3339 with nine fractional digits in UTC, by `date` (not by capsule's own code).
fn rfc3339_by_date(ns: u64) -> String {
    let out = std::process::Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("@{}", ns / 1_000_000_000),
            "+%Y-%m-%dT%H:%M:%S",
        ])
        .output()
        .expect("run date");
    assert!(out.status.success());
    format!(
        "{}.{:09}Z",
        String::from_utf8(out.stdout).unwrap().trim(),
        ns % 1_000_000_000
    )
}

/// Checks that every `NAME_ns` instant in `v` has `NAME` beside it, as RFC 3339; returns
/// how many it checked.
fn check_times(v: &serde_json::Value, what: &str) -> usize {
    match v {
        serde_json::Value::Object(m) => {
            let mut n = 0;
            for (k, x) in m {
                n += check_times(x, what);
                let Some(stem) = k.strip_suffix("_ns") else {
                    continue;
                };
                // Durations, not instants (as the binary's own list says).
                if [
                    "horizon", "span", "duration", "age", "elapsed", "interval", "lateness",
                ]
                .iter()
                .any(|d| stem.contains(d))
                {
                    continue;
                }
                match x.as_u64() {
                    Some(ns) => {
                        assert_eq!(
                            m.get(stem).and_then(|s| s.as_str()),
                            Some(rfc3339_by_date(ns).as_str()),
                            "{what}: {k} = {ns} has no RFC 3339 {stem} beside it: {v}"
                        );
                        n += 1;
                    }
                    None => assert!(m.contains_key(stem), "{what}: {k} without {stem}"),
                }
            }
            n
        }
        serde_json::Value::Array(a) => a.iter().map(|x| check_times(x, what)).sum(),
        _ => 0,
    }
}

/// The whole of standard output as one JSON document.
fn one_json(o: &std::process::Output, what: &str) -> serde_json::Value {
    let text = stdout_str(o);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{what}: not one JSON document: {e}: {text:?}"))
}

#[test]
fn json_everywhere_with_rfc3339_beside_every_instant() {
    let d = tempfile::tempdir().unwrap();
    let t0 = 1_796_004_000_000_000_000u64;
    let packets: Vec<_> = (0..10u64)
        .map(|i| (t0 + i * 100_000_123, 100, udp_frame(i as u8 + 1, 100)))
        .collect();
    let input = d.path().join("in.pcap");
    std::fs::write(&input, write_pcap_ns(1, 0, &packets)).unwrap();
    let store = d.path().join("store");
    let s = p(&store);

    let imp = one_json(
        &run_ok(capsule().args(["import", "--store", s, "--json", p(&input)])),
        "import",
    );
    assert_eq!(imp["packets"], 10);
    assert_eq!(imp["inputs"][0]["packets"], 10);
    assert_eq!(imp["inputs"][0]["first_ns"], t0);
    assert_eq!(imp["inputs"][0]["last_ns"], packets[9].0);
    assert_eq!(imp["sealed"].as_array().unwrap().len(), 1);
    assert!(check_times(&imp, "import") >= 4);

    let c = one_json(
        &run_ok(capsule().args(["query", "--store", s, "--count", "--json", "host 10.0.0.3"])),
        "count",
    );
    assert_eq!(
        (c["packets"].as_u64(), c["bytes"].as_u64()),
        (Some(1), Some(100))
    );
    let c = one_json(
        &run_ok(capsule().args([
            "query",
            "--store",
            s,
            "--count",
            "--json",
            "--from",
            &format!("@{}", packets[2].0),
        ])),
        "count in a window",
    );
    assert_eq!(c["packets"], 8);
    assert_eq!(c["from_ns"], packets[2].0);
    assert!(check_times(&c, "count") >= 1);

    let e = one_json(
        &run_ok(capsule().args(["query", "--store", s, "--explain", "--json", "udp"])),
        "explain",
    );
    assert_eq!(e["segments"].as_array().unwrap().len(), 1);
    // The same plan as the text.
    let text = stdout_str(&run_ok(capsule().args([
        "query",
        "--store",
        s,
        "--explain",
        "udp",
    ])));
    let (read, total) = parse_read_of(text.lines().find(|l| l.starts_with("plan:")).unwrap());
    assert_eq!(
        (e["blocks_read"].as_u64(), e["blocks_total"].as_u64()),
        (Some(read), Some(total)),
        "{text}"
    );
    assert!(read >= 1);

    let r = one_json(
        &run_ok(capsule().args(["reindex", "--store", s, "--json"])),
        "reindex",
    );
    assert_eq!(r["segments"], 1);
    assert_eq!(r["indexed"].as_array().unwrap().len(), 1);
    assert_eq!(r["failed"], 0);

    let st = one_json(
        &run_ok(capsule().args(["status", "--store", s, "--json"])),
        "status",
    );
    assert_eq!(st["store"]["first_ns"], t0);
    assert!(check_times(&st, "status") >= 2);
    let v = one_json(
        &run_ok(capsule().args(["verify", "--store", s, "--json"])),
        "verify",
    );
    assert_eq!(v["segments"], 1);
    check_times(&v, "verify");
    // segments and flows print JSON lines: one document per line.
    let seg = stdout_str(&run_ok(
        capsule().args(["segments", "--store", s, "--json"]),
    ));
    let lines: Vec<serde_json::Value> = seg
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(check_times(&lines[0], "segments"), 2);

    // --json with an export is refused: the packets go there, not JSON.
    let out = run(capsule().args(["query", "--store", s, "--json", "-w", "-"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr_str(&out));
    assert!(stderr_str(&out).contains("--count or --explain"));
}

#[test]
fn status_and_segments_fit_80_columns_and_status_says_the_mode_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("t.pcap");
    synth(&pcap, &d.path().join("t.json"), 4, "1s", "20M", None);
    let store = d.path().join("store");
    import_ok(
        &store,
        &["--block-size", "64K", "--segment-size", "256K"],
        &[p(&pcap)],
    );
    // What a stopped AF_PACKET capture that fell back from AF_XDP leaves in the store.
    let why = "AF_XDP was not possible: attaching the XDP program to eth9 in native mode \
               failed: Operation not supported (os error 95); generic mode failed too";
    let status = serde_json::json!({
        "pid": 1, "iface": "eth9", "running": false,
        "mode": format!("AF_PACKET (TPACKET_V3 ring of 256 MiB); {why}"),
        "started_ns": 1_796_004_000_000_000_000u64, "updated_ns": 1_796_004_001_000_000_000u64,
        "packets": 1000, "wire_bytes": 1_000_000, "seen": 1010, "drops": 10,
        "drop_causes": {"packet_ring_full": 10, "xsk_ring_full": 0, "xsk_dropped": 0,
                        "no_socket": 0, "pipeline": 0, "invalid": 0, "disk_full": 0},
        "vlan_restored": 0, "truncated": 0, "hw_timestamps": 0,
        "packets_per_s": 0.0, "bits_per_s": 0.0, "drops_per_s": 0.0,
    });
    std::fs::write(store.join("capture-status.json"), status.to_string()).unwrap();
    let fits = |args: &[&str]| {
        let out = run_ok(
            capsule()
                .args(args)
                .args(["--store", p(&store)])
                .env("COLUMNS", "80"),
        );
        let text = stdout_str(&out);
        for line in text.lines() {
            assert!(
                line.chars().count() <= 80,
                "{args:?}: {} columns: {line}",
                line.chars().count()
            );
        }
        text
    };
    let segs = fits(&["segments"]);
    assert!(segs.lines().count() >= 3, "several segments: {segs}");
    for col in ["seq", "state", "packets", "first", "last"] {
        assert!(segs.lines().next().unwrap().contains(col), "{segs}");
    }
    assert!(segs.lines().skip(1).all(|l| l.contains("sealed")), "{segs}");

    let st = fits(&["status"]);
    let mode: Vec<&str> = st.lines().filter(|l| l.contains("mode:")).collect();
    assert_eq!(mode.len(), 1, "{st}");
    assert!(
        mode[0].contains("AF_PACKET") && mode[0].contains("--verbose"),
        "{st}"
    );
    assert!(
        !st.contains("Operation not supported"),
        "the fallback only with --verbose: {st}"
    );
    // Drop causes of AF_PACKET only.
    assert!(st.contains("packet ring full 10"), "{st}");
    assert!(!st.contains("AF_XDP RX ring"), "{st}");
    assert!(st.contains("store:") && st.contains("retention:"), "{st}");
    let verbose = fits(&["status", "--verbose"]);
    assert!(verbose.contains("Operation not supported"), "{verbose}");
    // Not a terminal and no COLUMNS: lines are not wrapped.
    let out = run_ok(
        capsule()
            .args(["status", "--verbose", "--store", p(&store)])
            .env_remove("COLUMNS"),
    );
    assert!(
        stdout_str(&out)
            .lines()
            .any(|l| l.contains("fallback:") && l.contains("generic mode")),
        "{}",
        stdout_str(&out)
    );
}

#[test]
fn a_segment_size_below_the_block_size_is_refused_naming_the_minimum() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.pcap");
    std::fs::write(&input, write_pcap_ns(1, 0, &[(1, 100, udp_frame(1, 100))])).unwrap();
    let store = d.path().join("store");
    let out = import(&store, &["--segment-size", "10"], &[p(&input)]);
    assert_ne!(out.status.code(), Some(0));
    let err = stderr_str(&out);
    assert!(
        err.contains("segment size 10 bytes") && err.contains("minimum") && err.contains("1048576"),
        "{err}"
    );
    let out = import(
        &store,
        &["--segment-size", "4K", "--block-size", "4K"],
        &[p(&input)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_str(&out));
}

#[test]
fn an_unreadable_input_is_named_and_leaves_no_store_behind() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("missing.pcap");
    // Into a new directory: it is not created.
    let store = d.path().join("new-store");
    let out = import(&store, &[], &[p(&missing)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_str(&out);
    assert!(
        err.contains(&format!("cannot read {}: No such file", p(&missing))),
        "{err}"
    );
    assert!(!err.contains("damaged"), "{err}");
    assert!(
        !store.exists(),
        "no store is created for an input that cannot be read"
    );
    // Into an existing empty directory: it stays empty.
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = import(&empty, &[], &[p(&missing)]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    // A directory as input, after a good file: nothing is imported.
    let good = d.path().join("good.pcap");
    std::fs::write(&good, write_pcap_ns(1, 0, &[(1, 100, udp_frame(1, 100))])).unwrap();
    let out = import(&store, &[], &[p(&good), p(&empty)]);
    let err = stderr_str(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot read {}: it is a directory", p(&empty))),
        "{err}"
    );
    assert!(!store.exists());
}

#[test]
fn compressed_inputs_are_read_directly_and_foreign_link_types_are_named() {
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("t.pcap");
    let truth = synth(&pcap, &d.path().join("t.json"), 5, "1s", "10M", None);
    // Compressed by the stock tools; names that do not say so: the magic bytes decide.
    let zst = d.path().join("t.zst-without-extension");
    sh_ok(&format!("zstd -q -c {} > {}", p(&pcap), p(&zst)));
    let gz = d.path().join("t.pcap.gz");
    sh_ok(&format!("gzip -c {} > {}", p(&pcap), p(&gz)));
    for (what, input) in [("zstd", &zst), ("gzip", &gz)] {
        let store = d.path().join(format!("store-{what}"));
        import_ok(&store, &[], &[p(input)]);
        let (code, out, err) = count(&store, &[]);
        assert_eq!(code, Some(0), "{what}: {err}");
        assert_eq!(
            parse_packets_bytes(&out).0,
            truth.packets,
            "{what}: every packet"
        );
    }
    // 802.11 radiotap: stored, and named in a warning with its count.
    let radio: Vec<_> = (0..7u64)
        .map(|i| (1_796_004_000_000_000_000 + i, 60, vec![0u8; 60]))
        .collect();
    let input = d.path().join("radio.pcap");
    std::fs::write(&input, write_pcap_ns(127, 0, &radio)).unwrap();
    let store = d.path().join("store-radio");
    let out = import_ok(&store, &[], &[p(&input)]);
    let err = stderr_str(&out);
    assert!(
        err.contains("7 packets of link type 127 (IEEE 802.11 radiotap)"),
        "{err}"
    );
    let (code, out, _) = count(&store, &[]);
    assert_eq!(code, Some(0));
    assert_eq!(parse_packets_bytes(&out).0, 7);
    // Ethernet imports say nothing of the kind.
    let out = import_ok(&d.path().join("store-eth"), &[], &[p(&pcap)]);
    assert!(
        !stderr_str(&out).contains("link type"),
        "{}",
        stderr_str(&out)
    );
}

#[test]
fn progress_shows_on_a_terminal_only() {
    need_tool("script");
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("t.pcap");
    synth(&pcap, &d.path().join("t.json"), 6, "1s", "20M", None);
    let store = d.path().join("store");
    let s = p(&store);
    let out = d.path().join("out.pcap");
    let synth_out = d.path().join("synth.pcap");
    let triage_out = d.path().join("triage");
    let commands: Vec<Vec<&str>> = vec![
        vec!["import", "--store", s, p(&pcap)],
        vec!["reindex", "--store", s],
        vec!["compact", "--store", s, "--level", "3"],
        vec!["query", "--store", s, "-w", p(&out)],
        vec!["verify", "--store", s],
        vec![
            "synth",
            "--duration",
            "1s",
            "--rate",
            "20M",
            "-w",
            p(&synth_out),
        ],
        vec!["query", "--store", s, "--count"],
        vec![
            "triage",
            "--store",
            s,
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/capsule.toml"),
            "-o",
            p(&triage_out),
            "--quiet",
        ],
    ];
    // Not a terminal (and so in every test but script(1)'s below): no bar, no spinner, no
    // control characters. Hidden with --json too, which this cannot see.
    for args in &commands {
        let o = run_ok(capsule().args(args));
        let err = stderr_str(&o);
        assert!(
            !err.contains('\r') && !err.contains('\x1b') && !err.contains("ETA"),
            "{args:?}: {err:?}"
        );
    }
    // On a terminal (script(1) gives the command a pty): the bar with its bytes and rate.
    for (args, want) in [
        (&commands[0], "ETA"),
        (&commands[1], "ETA"),
        (&commands[3], "B/s"),
        (&commands[4], "ETA"),
        (&commands[5], "B/s"),
    ] {
        let line = std::iter::once(bin())
            .chain(args.iter().copied())
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ");
        let o = run_ok(std::process::Command::new("script").args(["-qec", &line, "/dev/null"]));
        let text = stdout_str(&o);
        assert!(text.contains(want), "{args:?} on a terminal: {text:?}");
        // Sizes in SI units, as everywhere else capsule prints one (not MiB).
        assert!(!text.contains("iB"), "{args:?} on a terminal: {text:?}");
    }
}

#[test]
fn log_colours_only_on_a_terminal_and_never_with_no_color() {
    need_tool("script");
    let d = tempfile::tempdir().unwrap();
    let store = small_store(d.path());
    // A segment whose head is damaged: reading the store logs a warning about it.
    std::fs::write(
        store.join("segments").join("seg-000000000099.pcapng.zst"),
        noise(5000, 99),
    )
    .unwrap();
    let cmd = format!("'{}' compact --store '{}'", bin(), p(&store));
    let on_tty = |env: &str| {
        let o = run(std::process::Command::new("script").args([
            "-qc",
            &format!("{env} {cmd}"),
            "/dev/null",
        ]));
        let text = stdout_str(&o);
        let line = text
            .lines()
            .find(|l| l.contains("skipping segment 99"))
            .unwrap_or_else(|| panic!("no warning about segment 99: {text:?}"))
            .to_string();
        line
    };
    assert!(on_tty("").contains('\x1b'), "colour on a terminal");
    assert!(!on_tty("NO_COLOR=1").contains('\x1b'), "NO_COLOR");
    let o = run(capsule().args(["compact", "--store", p(&store)]));
    let err = stderr_str(&o);
    assert!(err.contains("skipping segment 99"), "{err}");
    assert!(!err.contains('\x1b'), "no colour into a pipe: {err:?}");
}

#[test]
fn the_filter_help_fits_80_columns_and_names_the_tcpdump_forms() {
    let text = stdout_str(&run_ok(capsule().arg("filters")));
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "{line}");
    }
    for form in [
        "src and dst",
        "port N|NAME",
        "tcp port 80 or 443",
        "tcp[tcpflags]",
        "tcpflags FLAG",
        "ether host",
        "arp",
        "greater N",
        "net 10.50",
        "--bpf",
    ] {
        assert!(text.contains(form), "{form} is not in the filter help");
    }
    // The help's new example runs as a filter.
    let d = tempfile::tempdir().unwrap();
    let store = small_store(d.path());
    let out = run_ok(capsule().args([
        "query",
        "--store",
        p(&store),
        "--count",
        "tcpflags rst and port https or 8443",
    ]));
    assert_eq!(parse_packets_bytes(&stdout_str(&out)).0, 0);
}

/// A reader that goes away (`capsule status | head -1`) ends the command quietly with exit
/// 0, for every command that prints: before, `status`, `query --count`, `query --explain`
/// and `verify` panicked (exit 101) when standard output closed early.
#[test]
fn a_closed_output_pipe_ends_every_command_quietly() {
    let d = tempfile::tempdir().unwrap();
    let store = small_store(d.path());
    let s = store.to_str().unwrap();
    for args in [
        &["status", "--store", s][..],
        &["status", "--store", s, "--json"],
        &["segments", "--store", s],
        &["query", "--store", s, "--count"],
        &["query", "--store", s, "--explain", "udp"],
        &["verify", "--store", s],
        &["flows", "--store", s],
        &["top", "--store", s],
        &["help", "filters"],
    ] {
        let mut child = capsule()
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before the command writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} with its output pipe closed: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A damaged `capture-status.json` (a report of the capture, rewritten every second) does
/// not stop `capsule status`: it warns, naming the file, and shows the store (exit 0; the
/// JSON form too). Before, status exited 1.
#[test]
fn a_damaged_capture_status_file_does_not_stop_status() {
    let d = tempfile::tempdir().unwrap();
    let store = small_store(d.path());
    std::fs::write(store.join("capture-status.json"), b"{ not json").unwrap();
    for json in [false, true] {
        let mut args = vec!["status", "--store", store.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        let out = run(capsule().args(&args));
        let (text, err) = (stdout_str(&out), stderr_str(&out));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.contains("capture-status.json"), "{args:?}: {err}");
        assert!(
            text.contains("10"),
            "{args:?} does not show the store: {text}"
        );
    }
}

/// A `--bpf` expression that does not compile is the user's input, like a bad filter: exit
/// 2 with libpcap's word, not 1 (an error of the store or the machine).
#[test]
fn a_bad_bpf_expression_is_a_usage_error_like_a_bad_filter() {
    let d = tempfile::tempdir().unwrap();
    let store = small_store(d.path());
    let s = store.to_str().unwrap();
    for (args, what) in [
        (
            &["query", "--store", s, "--count", "--bpf", "tcp[["][..],
            "--bpf",
        ),
        (
            &["query", "--store", s, "--count", "tcp and and"],
            "bad filter",
        ),
    ] {
        let out = run(capsule().args(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr_str(&out));
        assert!(stderr_str(&out).contains(what), "{}", stderr_str(&out));
    }
}

/// A raw byte count in text for people: a number followed by the word "bytes".
fn raw_byte_count(text: &str) -> Option<String> {
    let w: Vec<&str> = text.split_whitespace().collect();
    w.windows(2)
        .find(|p| {
            p[1].trim_end_matches([',', ';', ')']) == "bytes"
                && p[0].trim_start_matches('(').parse::<u64>().is_ok()
        })
        .map(|p| p.join(" "))
}

#[test]
fn byte_counts_for_people_are_si_and_json_keeps_integers() {
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("t.pcap");
    let truth = synth(&pcap, &d.path().join("t.json"), 4, "1s", "10M", None);
    let store = d.path().join("store");
    let s = p(&store);
    let out = d.path().join("out.pcap");
    let (pcap2, truth2) = (d.path().join("t2.pcap"), d.path().join("t2.json"));
    let commands: Vec<Vec<&str>> = vec![
        vec!["import", "--store", s, p(&pcap)],
        vec!["query", "--store", s, "--count"],
        vec!["query", "--store", s, "-w", p(&out)],
        vec!["reindex", "--store", s],
        vec!["compact", "--store", s, "--level", "3"],
        vec!["status", "--store", s],
        vec![
            "synth",
            "-w",
            p(&pcap2),
            "--truth",
            p(&truth2),
            "--duration",
            "1s",
            "--rate",
            "10M",
        ],
    ];
    for args in &commands {
        let o = run_ok(capsule().args(args));
        let text = format!("{}{}", stdout_str(&o), stderr_str(&o));
        assert_eq!(raw_byte_count(&text), None, "{args:?}: {text}");
        assert!(
            [" B", " kB", " MB", " GB"].iter().any(|u| text.contains(u)),
            "{args:?} names a size in SI units: {text}"
        );
    }
    // --json keeps exact integers.
    let o = run_ok(capsule().args(["query", "--store", s, "--count", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["packets"].as_u64(), Some(truth.packets));
    assert!(v["bytes"].as_u64().unwrap() > 0, "{v}");
}

#[test]
fn a_store_is_created_only_once_the_input_is_known_good() {
    let d = tempfile::tempdir().unwrap();
    let text = d.path().join("notes.txt");
    std::fs::write(&text, "hello, this is not a capture\n").unwrap();
    let zst = d.path().join("notes.txt.zst");
    sh_ok(&format!("zstd -q -c {} > {}", p(&text), p(&zst)));
    let empty_file = d.path().join("empty.pcap");
    std::fs::write(&empty_file, b"").unwrap();
    let good = d.path().join("good.pcap");
    std::fs::write(&good, write_pcap_ns(1, 0, &[(1, 100, udp_frame(1, 100))])).unwrap();
    for (what, inputs, want) in [
        ("text", vec![&text], "unknown magic number 0x68656c6c"),
        ("zstd text", vec![&zst], "unknown magic number 0x68656c6c"),
        ("empty file", vec![&empty_file], "empty input"),
        (
            "text after a capture",
            vec![&good, &text],
            "not a pcap or pcapng file",
        ),
    ] {
        let store = d.path().join("new-store");
        let files: Vec<&str> = inputs.iter().map(|f| p(f)).collect();
        let out = import(&store, &[], &files);
        let err = stderr_str(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        let bad = p(inputs.last().unwrap());
        assert!(err.contains(bad) && err.contains(want), "{what}: {err}");
        assert!(!store.exists(), "{what}: a store was created: {err}");
    }
    // Standard input: the same check on its first bytes.
    let store = d.path().join("new-store");
    let out = capsule()
        .args(["import", "--store", p(&store), "-"])
        .stdin(std::fs::File::open(&text).unwrap())
        .output()
        .unwrap();
    let err = stderr_str(&out);
    assert_eq!(out.status.code(), Some(1), "stdin: {err}");
    assert!(err.contains("not a pcap or pcapng file"), "stdin: {err}");
    assert!(!store.exists(), "stdin: a store was created: {err}");
    // A capture on a misspelt interface: no store, and an existing directory left as it was.
    let empty_dir = d.path().join("empty-dir");
    std::fs::create_dir(&empty_dir).unwrap();
    for store in [&store, &empty_dir] {
        let out = run(capsule().args(["capture", "--iface", "capsule-nx7", "--store", p(store)]));
        let err = stderr_str(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(
                "cannot capture on capsule-nx7: no network interface named \"capsule-nx7\""
            ),
            "{err}"
        );
    }
    assert!(!store.exists(), "capture created a store");
    assert_eq!(std::fs::read_dir(&empty_dir).unwrap().count(), 0);
}
