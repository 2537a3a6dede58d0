//! The store-wide catalog ([scale] issue 34): kept by the writer at seal, retention and
//! compaction, rebuilt at open, by `reindex` and by `verify --repair` when deleted or
//! damaged, and never changing an answer: every answer with and without it is the same.

mod common;

use std::path::Path;

use capsule_index::catalog::{self, Catalog};
use capsule_store::Store;
use common::*;

const SMALL: [&str; 6] = [
    "--block-size",
    "8K",
    "--segment-size",
    "16K",
    "--min-free",
    "0",
];

/// `synth` traffic (seed, duration, rate) imported into `dir/s` in small segments.
fn small_store(dir: &Path, seed: u64, duration: &str, rate: &str) -> std::path::PathBuf {
    let pcap = dir.join("t.pcap");
    synth(&pcap, &dir.join("truth.json"), seed, duration, rate, None);
    let store = dir.join("s");
    import_ok(&store, &SMALL, &[p(&pcap)]);
    store
}

fn catalog_of(store: &Path) -> Catalog {
    Catalog::load(&Store::open(store).unwrap().index_dir())
        .unwrap()
        .expect("the store has a catalog")
}

/// Every sealed segment has exactly its row, equal to the one derived from its index.
fn assert_catalog_current(store: &Path) {
    let s = Store::open(store).unwrap();
    let segs = s.open_segments().unwrap();
    assert_eq!(catalog::verify(&s, &segs), None);
    let c = catalog_of(store);
    let sealed: Vec<u64> = segs
        .iter()
        .filter(|g| g.state() == capsule_store::SegmentState::Sealed)
        .map(|g| g.seq())
        .collect();
    assert_eq!(c.rows.keys().copied().collect::<Vec<_>>(), sealed);
    for g in &segs {
        assert!(
            c.row_for(g).is_some(),
            "segment {} has no current row",
            g.seq()
        );
    }
}

fn answers(store: &Path, filters: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for f in filters {
        let o = run(capsule()
            .args(["query", "--store", p(store), "--count"])
            .arg(f));
        // the count without its time ("... in 0.023 s")
        let count = stdout_str(&o);
        let count = count.rsplit_once(" in ").map_or(&*count, |(c, _)| c);
        out.push(format!("{f}: {} {count}", o.status));
        let tmp = store.with_extension("pcap");
        let o = run(capsule()
            .args(["query", "--store", p(store), "-w", p(&tmp)])
            .arg(f));
        out.push(format!(
            "{f}: {} {:x?}",
            o.status,
            capsule_store::crc::crc32c(&std::fs::read(&tmp).unwrap_or_default())
        ));
        let o = run(capsule()
            .args(["flows", "--store", p(store), "--json"])
            .arg(f));
        out.push(format!("flows {f}: {} {}", o.status, stdout_str(&o)));
    }
    let o = run(capsule().args(["top", "--store", p(store), "--key", "src", "--json"]));
    out.push(format!("top: {} {}", o.status, stdout_str(&o)));
    out
}

/// A short DNS exchange of the store: (client, server, client port).
fn a_dns_exchange(store: &Path) -> (String, String, u64) {
    let o = run_ok(capsule().args(["flows", "--store", p(store), "--json", "udp port 53"]));
    let rows: Vec<serde_json::Value> = stdout_str(&o)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let f = &rows[rows.len() / 2];
    let (c, s) = if f["client"] == "b" {
        ("b", "a")
    } else {
        ("a", "b")
    };
    (
        f[c].as_str().unwrap().to_string(),
        f[s].as_str().unwrap().to_string(),
        f[format!("{c}_port")].as_u64().unwrap(),
    )
}

/// Hundreds of small segments: the same answers (query --count, the packets, flows, top)
/// with the catalog, with it deleted, and with it damaged; the catalog is rebuilt by the
/// next writer and by `reindex` after it was deleted, and by `verify --repair` after damage.
#[test]
fn answers_with_and_without_the_catalog_are_identical_and_it_is_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path(), 11, "10s", "9M");
    let n = segments(&store).len();
    assert!(n >= 200, "{n} segments");
    assert_catalog_current(&store);

    let (client, server, port) = a_dns_exchange(&store);
    let filters = vec![
        format!("host {client}"),
        format!("udp and host {client} and port {port} and host {server} and port 53"),
        format!("not host {client} and port {port}"),
        format!("host {client} or arp"),
        "host 192.0.2.77".to_string(),
        "port 53".to_string(),
    ];
    let with = answers(&store, &filters);
    // the host is in few segments: its answer is not empty, and the catalog rules most out
    assert!(
        with[0].contains(" 2 packets") || !with[0].contains(" 0 packets"),
        "{}",
        with[0]
    );
    let c = catalog_of(&store);
    let f: capsule_query::Filter = filters[0].parse().unwrap();
    let ruled_out = c.rows.values().filter(|r| !r.may_match(&f)).count();
    assert!(
        ruled_out * 10 >= c.rows.len() * 9,
        "{ruled_out} of {}",
        c.rows.len()
    );

    // deleted: the same answers; `reindex` rebuilds it
    let cat_path = catalog::path(&Store::open(&store).unwrap().index_dir());
    std::fs::remove_file(&cat_path).unwrap();
    assert_eq!(answers(&store, &filters), with);
    run_ok(capsule().args(["reindex", "--store", p(&store)]));
    assert_catalog_current(&store);

    // damaged: the same answers; verify names it, --repair rebuilds it
    let mut b = std::fs::read(&cat_path).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x40;
    std::fs::write(&cat_path, &b).unwrap();
    assert_eq!(answers(&store, &filters), with);
    let o = run(capsule().args(["verify", "--store", p(&store)]));
    assert!(
        !o.status.success() && stdout_str(&o).contains("catalog"),
        "{}",
        stdout_str(&o)
    );
    run_ok(capsule().args(["verify", "--store", p(&store), "--repair"]));
    assert_catalog_current(&store);
    assert_eq!(answers(&store, &filters), with);

    // a wrong row (it claims the segment holds nothing the filter names) is never used:
    // rows are checked against their segment, so one stale row changes nothing either
    std::fs::remove_file(&cat_path).unwrap();
    // the next writer (an import of nothing new) rebuilds it at open
    let empty = tmp.path().join("empty.pcap");
    // a pcap file of no packets: its 24-byte header
    let mut h = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    h.extend([0u8; 8]);
    h.extend(65535u32.to_le_bytes());
    h.extend(1u32.to_le_bytes());
    std::fs::write(&empty, h).unwrap();
    import(&store, &SMALL, &[p(&empty)]);
    assert_catalog_current(&store);
}

/// A filtered answer names an address by the window's DNS answers, those of the segments
/// the catalog rules out included: with the catalog as without it. (Before, the segment
/// holding the first answer, which the filter's host is not in, was never read: the address
/// was named by the other answer only, and otherwise than without the catalog.)
#[test]
fn a_filtered_answer_names_an_address_by_the_dns_answers_of_segments_ruled_out() {
    use common::frames::{dns_answer, udp_frame};
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let addr = [203, 0, 113, 50];
    let t0 = 1_796_004_000_000_000_000u64;
    // The first import's segment: a DNS answer naming the address, nothing else.
    let early = vec![dns_answer(
        [10, 9, 9, 60],
        [10, 9, 0, 53],
        "a-first.example",
        addr,
    )];
    // The second's: another answer for it, and a flow to it.
    let mut late = vec![dns_answer(
        [10, 10, 9, 60],
        [10, 10, 0, 53],
        "z-last.example",
        addr,
    )];
    late.extend((0..3).map(|_| udp_frame([10, 77, 9, 61], addr, (41000, 9000), &[b'u'; 100])));
    for (i, frames) in [early, late].into_iter().enumerate() {
        let pcap = tmp.path().join(format!("{i}.pcap"));
        let packets: Vec<(u64, u32, Vec<u8>)> = frames
            .into_iter()
            .enumerate()
            .map(|(k, f)| {
                (
                    t0 + i as u64 * 1_000_000_000 + k as u64 * 1_000_000,
                    f.len() as u32,
                    f,
                )
            })
            .collect();
        std::fs::write(&pcap, write_pcap_ns(1, 65535, &packets)).unwrap();
        import_ok(&store, &SMALL, &[p(&pcap)]);
    }
    assert_catalog_current(&store);
    let c = catalog_of(&store);
    let f: capsule_query::Filter = "host 203.0.113.50".parse().unwrap();
    assert!(
        c.rows.values().any(|r| !r.may_match(&f)),
        "the catalog rules the first segment out"
    );
    let named = || {
        let o = run_ok(capsule().args([
            "top",
            "--store",
            p(&store),
            "--json",
            "host",
            "203.0.113.50",
        ]));
        let v: serde_json::Value = serde_json::from_str(&stdout_str(&o)).unwrap();
        v["rows"][0]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(named(), "dns answer: a-first.example");
    std::fs::remove_file(catalog::path(&Store::open(&store).unwrap().index_dir())).unwrap();
    assert_eq!(
        named(),
        "dns answer: a-first.example",
        "without the catalog"
    );
}

/// Segments deleted by retention lose their rows, recompacted ones get rows for their new
/// files, and segments sealed later gain theirs.
#[test]
fn retention_and_compaction_are_reflected_in_the_catalog() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.pcap");
    let b = tmp.path().join("b.pcap");
    synth(&a, &tmp.path().join("ta.json"), 3, "2s", "4M", None);
    synth(
        &b,
        &tmp.path().join("tb.json"),
        4,
        "2s",
        "4M",
        Some("2026-11-30T03:00:00Z"),
    );
    let store = tmp.path().join("s");
    import_ok(&store, &SMALL, &[p(&a)]);
    assert_catalog_current(&store);
    let first: Vec<u64> = catalog_of(&store).rows.keys().copied().collect();

    // retention: a budget of about half the store deletes the oldest segments
    let bytes = segments_dir_bytes(&store);
    let mut args = SMALL.to_vec();
    let budget = (bytes * 3 / 4).to_string();
    args.extend(["--max-bytes", &budget]);
    import_ok(&store, &args, &[p(&b)]);
    let rows: Vec<u64> = catalog_of(&store).rows.keys().copied().collect();
    assert!(
        rows.first() > first.first(),
        "no segment was deleted: {rows:?}"
    );
    assert!(rows.last() > first.last(), "no segment was added");
    assert_catalog_current(&store);

    // compaction rewrites every segment at another level: every row follows its file
    let before = catalog_of(&store);
    run_ok(capsule().args(["compact", "--store", p(&store), "--level", "9"]));
    let after = catalog_of(&store);
    assert_ne!(before, after);
    assert_catalog_current(&store);
}

/// A store of more segments than the process may open files is answered, the same as
/// without the limit: readers keep at most a quarter of `RLIMIT_NOFILE` segment files open
/// (store/src/segment/handles.rs). Before, every reader held every segment open and each
/// question failed with "Too many open files".
#[test]
fn a_store_of_more_segments_than_open_files_allowed_is_answered() {
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path(), 5, "4s", "4M");
    const LIMIT: usize = 32;
    let n = segments(&store).len();
    // past the limit, and far past the descriptor budget it gives (a quarter)
    assert!(n > LIMIT + 16, "{n} segments");
    let (client, _, _) = a_dns_exchange(&store);
    let out = tmp.path().join("out.pcap");
    let questions: Vec<Vec<String>> = vec![
        vec!["query".into(), "--count".into()],
        vec!["query".into(), "--count".into(), format!("host {client}")],
        vec!["query".into(), "-w".into(), p(&out).into()],
        vec!["flows".into(), "--json".into(), format!("host {client}")],
        vec!["top".into(), "--key".into(), "src".into(), "--json".into()],
    ];
    for q in questions {
        let mut args = vec![q[0].clone(), "--store".into(), p(&store).into()];
        args.extend(q[1..].iter().cloned());
        let answer = |limited: bool| {
            let _ = std::fs::remove_file(&out);
            let o = if limited {
                // the limit for the child only: `ulimit -n` in its shell, then exec
                run(std::process::Command::new("sh")
                    .arg("-c")
                    .arg(format!("ulimit -n {LIMIT} && exec \"$0\" \"$@\""))
                    .arg(bin())
                    .args(&args)
                    .env_remove("CAPSULE_LOG"))
            } else {
                run(capsule().args(&args))
            };
            let text = stdout_str(&o);
            // a count's time ("... in 0.023 s") varies
            let text = text
                .rsplit_once(" in ")
                .map_or(&*text, |(c, _)| c)
                .to_string();
            let written = std::fs::read(&out).map(|b| capsule_store::crc::crc32c(&b));
            (o.status.code(), text, written.ok(), stderr_str(&o))
        };
        let free = answer(false);
        assert_eq!(free.0, Some(0), "{args:?}: {}", free.3);
        let limited = answer(true);
        assert!(
            !limited.3.contains("Too many open files"),
            "{args:?} under ulimit -n {LIMIT}: {}",
            limited.3
        );
        assert_eq!(
            (&limited.0, &limited.1, &limited.2),
            (&free.0, &free.1, &free.2),
            "{args:?} under ulimit -n {LIMIT}: {}",
            limited.3
        );
    }
}

/// A question opens only the segments the catalog cannot rule out (issue 34: at 100,000
/// segments, opening each cost seconds). Seen from outside: a segment zeroed after its
/// seal (its length kept) is named by every answer it may be part of,
/// and by none its row rules out (a window away from what the ledger records it held, a
/// host absent from its keys). Before, every question opened every segment, so each
/// answer was partial (exit 3) for a segment it could not have read a packet from.
#[test]
fn a_question_opens_only_the_segments_the_catalog_cannot_rule_out() {
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path(), 5, "4s", "4M");
    let segs = segments(&store);
    assert!(segs.len() > 20, "{} segments", segs.len());
    let window = ["--from", "2026-11-30T02:00:03Z", "--to", "+100ms"];
    let count = |args: &[&str]| {
        let o = run(capsule()
            .args(["query", "--store", p(&store), "--count"])
            .args(args));
        let text = stdout_str(&o);
        let text = text
            .rsplit_once(" in ")
            .map_or(&*text, |(c, _)| c)
            .to_string();
        (o.status.code(), text, stderr_str(&o))
    };
    let before_window = count(&window);
    let before_absent = count(&["host 192.0.2.77"]);
    assert_eq!(before_window.0, Some(0), "{}", before_window.2);
    assert!(
        !before_window.1.starts_with("0 packets"),
        "{}",
        before_window.1
    );

    // the first segment's bytes zeroed, its length kept: it cannot be opened
    let first = &segs[0];
    let len = std::fs::metadata(&first.path).unwrap().len();
    std::fs::write(&first.path, vec![0u8; len as usize]).unwrap();

    // a window after it, and a host it never held: whole answers, as before the damage
    assert_eq!(count(&window), before_window);
    assert_eq!(count(&["host 192.0.2.77"]), before_absent);
    // the whole store: partial, the segment named
    let whole = count(&[]);
    assert_eq!(whole.0, Some(3), "{}", whole.2);
    assert!(
        whole.2.contains(&format!("segment {} ", first.seq)),
        "{}",
        whole.2
    );
    // without the catalog every segment is opened: the same answer over the window, now
    // partial for the damaged one
    let cat_path = catalog::path(&Store::open(&store).unwrap().index_dir());
    std::fs::remove_file(&cat_path).unwrap();
    let without = count(&window);
    let packets = |t: &str| t.split(';').next().unwrap_or_default().to_string();
    assert_eq!(
        (without.0, packets(&without.1)),
        (Some(3), packets(&before_window.1))
    );
}

/// A question lists the segments without a stat each (issue 34, round 2), so a row is
/// trusted by its number and the ledger, not by the file's length: a sealed file rewritten
/// under its name with another length (what a compaction does; here garbage, which no
/// compaction writes, so that an open would show) is left unopened by the answers its row
/// rules out, and named by those it may be part of.
#[test]
fn a_segment_whose_length_changed_is_not_opened_by_the_answers_its_row_rules_out() {
    let tmp = tempfile::tempdir().unwrap();
    let store = small_store(tmp.path(), 5, "4s", "4M");
    let segs = segments(&store);
    assert!(segs.len() > 20, "{} segments", segs.len());
    let window = ["--from", "2026-11-30T02:00:03Z", "--to", "+100ms"];
    let count = |args: &[&str]| {
        let o = run(capsule()
            .args(["query", "--store", p(&store), "--count"])
            .args(args));
        let text = stdout_str(&o);
        let text = text
            .rsplit_once(" in ")
            .map_or(&*text, |(c, _)| c)
            .to_string();
        (o.status.code(), text, stderr_str(&o))
    };
    let before_window = count(&window);
    assert_eq!(before_window.0, Some(0), "{}", before_window.2);
    let first = &segs[0];
    let len = std::fs::metadata(&first.path).unwrap().len();
    std::fs::write(&first.path, vec![0u8; len as usize + 4096]).unwrap();
    // the window after it: whole, the same answer (before: the length differed from the
    // row's, the file was opened and the answer partial)
    assert_eq!(count(&window), before_window);
    // the whole store: partial, the segment named
    let whole = count(&[]);
    assert_eq!(whole.0, Some(3), "{}", whole.2);
    assert!(
        whole.2.contains(&format!("segment {} ", first.seq)),
        "{}",
        whole.2
    );
}

/// The answers from the index alone (`top`, `dscp`, `matrix`, `tcp`) over a store of more
/// than two slices of segments (index/src/rollup.rs).
fn index_answers(store: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let questions: Vec<Vec<&str>> = vec![
        vec!["top", "--key", "src", "--json"],
        vec!["top", "--key", "flow", "--json"],
        vec!["top", "--key", "dst", "--by", "packets", "--json"],
        vec!["top", "--key", "tunnel", "--json"],
        // a window that cuts a slice: its segments are read from their indexes
        vec![
            "top",
            "--key",
            "pair",
            "--json",
            "--from",
            "2026-11-30T02:00:01.3Z",
            "--to",
            "+1500ms",
        ],
        // a filter: no rollup is used
        vec!["top", "--key", "src", "--json", "udp"],
        vec!["dscp", "--json"],
        vec!["tcp", "--json"],
    ];
    for q in questions {
        let o = run(capsule().args([q[0], "--store", p(store)]).args(&q[1..]));
        out.push(format!(
            "{q:?}: {:?} {} {}",
            o.status.code(),
            stdout_str(&o),
            stderr_str(&o)
        ));
    }
    out
}

fn rollup_files(store: &Path) -> Vec<std::path::PathBuf> {
    let dir = Store::open(store).unwrap().index_dir();
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "slice"))
        .collect();
    v.sort();
    v
}

/// `top` and the other answers from the index read a whole slice of segments from its
/// rollup, and answer exactly what every segment's index answers: with the rollups, without
/// them, with one damaged (ignored, named by `verify`, rebuilt by `--repair` and by the next
/// writer), after a compaction (lengths followed) and after retention (the slice of deleted
/// segments dropped). That a rollup stands in for its segments' indexes is seen by deleting
/// those indexes: the answer is still whole (before: partial, exit 3, the segments named
/// as unindexed).
#[test]
fn answers_from_rollups_are_those_of_the_indexes() {
    use capsule_index::rollup;
    let tmp = tempfile::tempdir().unwrap();
    let pcap = tmp.path().join("t.pcap");
    synth(&pcap, &tmp.path().join("truth.json"), 9, "3s", "45M", None);
    let store = tmp.path().join("s");
    let tiny = [
        "--block-size",
        "4K",
        "--segment-size",
        "4K",
        "--min-free",
        "0",
    ];
    import_ok(&store, &tiny, &[p(&pcap)]);
    let n = segments(&store).len() as u64;
    assert!(n > 2 * rollup::SLICE, "{n} segments");
    let dir = Store::open(&store).unwrap().index_dir();
    let files = rollup_files(&store);
    assert_eq!(
        files,
        vec![rollup::path(&dir, 0), rollup::path(&dir, 1)],
        "the writer made the whole slices' rollups"
    );
    assert_eq!(rollup::verify(&Store::open(&store).unwrap()), None);

    let with = index_answers(&store);
    assert!(
        with[0].starts_with("[\"top\", \"--key\", \"src\", \"--json\"]: Some(0)"),
        "{}",
        with[0]
    );
    for f in &files {
        std::fs::rename(f, f.with_extension("aside")).unwrap();
    }
    let without = index_answers(&store);
    assert_eq!(with, without);

    // the rollup stands in for its segments' indexes: whole without them
    for f in &files {
        std::fs::rename(f.with_extension("aside"), f).unwrap();
    }
    let moved: Vec<_> = (1..rollup::SLICE)
        .map(|seq| dir.join(capsule_index::sideindex::index_name(seq)))
        .collect();
    for m in &moved {
        std::fs::rename(m, m.with_extension("aside")).unwrap();
    }
    let o = run(capsule().args(["top", "--store", p(&store), "--key", "src", "--json"]));
    assert_eq!(
        format!(
            "[\"top\", \"--key\", \"src\", \"--json\"]: {:?} {} {}",
            o.status.code(),
            stdout_str(&o),
            stderr_str(&o)
        ),
        with[0]
    );
    for m in &moved {
        std::fs::rename(m.with_extension("aside"), m).unwrap();
    }

    // damaged: ignored (the same answers), named by verify, made again by --repair
    let mut b = std::fs::read(&files[1]).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x40;
    std::fs::write(&files[1], &b).unwrap();
    assert_eq!(index_answers(&store), with);
    let o = run(capsule().args(["verify", "--store", p(&store)]));
    assert!(
        !o.status.success() && stdout_str(&o).contains("rollups"),
        "{}",
        stdout_str(&o)
    );
    run_ok(capsule().args(["verify", "--store", p(&store), "--repair"]));
    assert_eq!(rollup::verify(&Store::open(&store).unwrap()), None);
    assert!(rollup::Slice::load(&dir, 1).unwrap().unwrap().is_ok());
    // deleted: the next writer makes it again
    std::fs::remove_file(&files[0]).unwrap();
    let empty = tmp.path().join("empty.pcap");
    let mut h = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    h.extend([0u8; 8]);
    h.extend(65535u32.to_le_bytes());
    h.extend(1u32.to_le_bytes());
    std::fs::write(&empty, h).unwrap();
    import(&store, &tiny, &[p(&empty)]);
    assert_eq!(rollup_files(&store), files);
    assert_eq!(index_answers(&store), with);

    // compaction: every segment's length changes, the slices follow and are still used
    run_ok(capsule().args(["compact", "--store", p(&store), "--level", "9"]));
    let entries = Store::open(&store).unwrap().list().unwrap();
    for k in [0, 1] {
        let s = rollup::Slice::load(&dir, k).unwrap().unwrap().unwrap();
        assert!(
            s.stands_for(&entries).is_some(),
            "slice {k} after compaction"
        );
    }
    let compacted = index_answers(&store);
    // (the `query` commands of findings are the same; nothing else changed)
    assert_eq!(compacted, with);

    // retention: the oldest segments go, and the slice they were in with them
    let bytes = segments_dir_bytes(&store);
    let later = tmp.path().join("later.pcap");
    synth(
        &later,
        &tmp.path().join("t2.json"),
        10,
        "1s",
        "8M",
        Some("2026-11-30T03:00:00Z"),
    );
    let mut args = tiny.to_vec();
    let budget = (bytes * 3 / 4).to_string();
    args.extend(["--max-bytes", &budget]);
    import_ok(&store, &args, &[p(&later)]);
    assert!(!rollup::path(&dir, 0).exists(), "slice 0 lost segments");
    let kept = index_answers(&store);
    let slices = rollup_files(&store);
    for f in &slices {
        std::fs::rename(f, f.with_extension("aside")).unwrap();
    }
    assert_eq!(index_answers(&store), kept);
    for f in &slices {
        std::fs::rename(f.with_extension("aside"), f).unwrap();
    }

    // a member repaired with fewer packets than it was sealed with: its slice, made before
    // the repair, is not used (the ledger records the repair); the answers are those of the
    // indexes, and say what the repair lost
    let seg = segments(&store)
        .into_iter()
        .find(|s| s.seq == rollup::SLICE + 300)
        .expect("a segment of slice 1 is kept");
    let len = std::fs::metadata(&seg.path).unwrap().len();
    let mut b = std::fs::read(&seg.path).unwrap();
    b[len as usize / 2] ^= 0x5A;
    std::fs::write(&seg.path, b).unwrap();
    let r = run_ok(capsule().args(["verify", "--store", p(&store), "--repair"]));
    assert!(
        stdout_str(&r).contains(&format!("repaired segment {}", seg.seq)),
        "{}",
        stdout_str(&r)
    );
    let repaired = index_answers(&store);
    assert!(repaired[0].contains("Some(3)"), "{}", repaired[0]);
    for f in rollup_files(&store) {
        std::fs::remove_file(f).unwrap();
    }
    assert_eq!(index_answers(&store), repaired);
}

/// What `query --count` and an export say for each question: status, the count line without
/// its time, the warnings' first words, and the pcap's CRC.
fn counts_and_exports(store: &Path, questions: &[Vec<String>]) -> Vec<String> {
    let mut out = Vec::new();
    for q in questions {
        let o = run(capsule()
            .args(["query", "--store", p(store), "--count"])
            .args(q));
        let text = stdout_str(&o);
        let text = text.rsplit_once(" in ").map_or(&*text, |(c, _)| c);
        out.push(format!("{q:?}: {} {text} / {}", o.status, stderr_str(&o)));
        let tmp = store.with_extension("pcap");
        let o = run(capsule()
            .args(["query", "--store", p(store), "-w", p(&tmp)])
            .args(q));
        out.push(format!(
            "{q:?}: {} {:x?}",
            o.status,
            capsule_store::crc::crc32c(&std::fs::read(&tmp).unwrap_or_default())
        ));
    }
    out
}

/// The answers of `questions` with the catalog as it is, and with it moved aside (every
/// question then lists the directory and reads the ledger); the catalog is put back.
fn with_and_without_catalog(store: &Path, questions: &[Vec<String>]) -> (Vec<String>, Vec<String>) {
    let cat = catalog::path(&Store::open(store).unwrap().index_dir());
    let with = counts_and_exports(store, questions);
    let aside = store.with_extension("catalog");
    std::fs::rename(&cat, &aside).unwrap();
    let without = counts_and_exports(store, questions);
    std::fs::rename(&aside, &cat).unwrap();
    (with, without)
}

fn proven(store: &Path) -> bool {
    let s = Store::open(store).unwrap();
    let v = Catalog::load_shared(&s.index_dir()).unwrap().unwrap();
    v.proven(&s).is_some()
}

/// Two synthetic traces in `dir`: `a.pcap` (seed 11, `a_duration` at 6 Mbit/s) and
/// `b.pcap` (seed 12, 2 s at 4 Mbit/s, an hour later): the second a store's later traffic.
fn two_traces(dir: &Path, a_duration: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let (a, b) = (dir.join("a.pcap"), dir.join("b.pcap"));
    synth(&a, &dir.join("ta.json"), 11, a_duration, "6M", None);
    synth(
        &b,
        &dir.join("tb.json"),
        12,
        "2s",
        "4M",
        Some("2026-11-30T03:00:00Z"),
    );
    (a, b)
}

/// Issue 34, round 5: a catalog written when the writer closes proves the segment listing
/// and the ledger (their identities), and a question then takes its rows for both, ruling
/// whole slices out from their summaries. The answers are those of the directory and the
/// ledger: on the store as written, after a segment was sealed after the catalog (the
/// writer killed before its catalog write: an older catalog put back), after a line was
/// appended to the ledger (a seal of more packets than the file holds), and after a segment file was removed
/// outside capsule (named as missing).
#[test]
fn a_proven_catalog_answers_as_the_directory_and_the_ledger_do() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = two_traces(tmp.path(), "6s");
    let store = tmp.path().join("s");
    // slices of 16 rows: a store of a hundred segments in several slices
    run_ok(
        capsule()
            .env("CAPSULE_CATALOG_SLICE_ROWS", "16")
            .args(["import", "--store", p(&store)])
            .args(SMALL)
            .arg(p(&a)),
    );
    let s = Store::open(&store).unwrap();
    let v = Catalog::load_shared(&s.index_dir()).unwrap().unwrap();
    assert!(v.proven(&s).is_some(), "no proof: {:?}", v.proof);
    assert!(v.slices.len() >= 5, "{} slices", v.slices.len());

    let (client, server, port) = a_dns_exchange(&store);
    let w =
        |from: &str, to: &str| vec!["--from".to_string(), from.into(), "--to".into(), to.into()];
    let mut questions = vec![
        w("2026-11-30T02:00:03Z", "+1ms"),
        w("2026-11-30T02:00:01.5Z", "+300ms"),
        w("2026-11-30T02:30:00Z", "+1s"),
        vec![format!("host {client}")],
        vec![format!(
            "udp and host {client} and port {port} and host {server} and port 53"
        )],
        vec!["host 192.0.2.77".to_string()],
        vec!["port 53 or arp".to_string()],
        vec![],
    ];
    let mut tail = w("2026-11-30T02:00:04Z", "+1s");
    tail.push(format!("host {client}"));
    questions.push(tail);
    let (with, without) = with_and_without_catalog(&store, &questions);
    assert_eq!(with, without);
    assert!(proven(&store));

    // segments sealed after the catalog was written: the old catalog put back
    let cat = catalog::path(&s.index_dir());
    let old = std::fs::read(&cat).unwrap();
    run_ok(
        capsule()
            .env("CAPSULE_CATALOG_SLICE_ROWS", "16")
            .args(["import", "--store", p(&store)])
            .args(SMALL)
            .arg(p(&b)),
    );
    let fresh = counts_and_exports(&store, &questions);
    assert_ne!(fresh, with, "the second import added nothing");
    capsule_store::fsx::write_atomic(&cat, &old).unwrap();
    assert!(!proven(&store));
    assert_eq!(counts_and_exports(&store, &questions), fresh);
    let (with, without) = with_and_without_catalog(&store, &questions);
    assert_eq!(with, without);

    // a new writer proves the listing again; then a repair recorded in the ledger
    run_ok(capsule().args(["reindex", "--store", p(&store)]));
    assert!(proven(&store));
    let segs = segments(&store);
    let victim = &segs[segs.len() / 3];
    let ledger = store.join("segments").join("ledger");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&ledger)
        .unwrap();
    // the seal recorded again with more packets than the file holds (as a repair leaves
    // it): every answer over its span names the loss, and no question may skip it
    let line = format!(
        "sealed {} {} {} {} {}\n",
        victim.seq,
        victim.first_ns.unwrap(),
        victim.last_ns.unwrap(),
        victim.packets + 5,
        victim.bytes
    );
    std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
    drop(f);
    assert!(!proven(&store));
    let (with, without) = with_and_without_catalog(&store, &questions);
    assert_eq!(with, without);
    assert!(
        with.iter()
            .any(|a| a.contains(&format!("segment {}", victim.seq))),
        "{with:#?}"
    );

    // a segment file removed outside capsule: named as missing, as without the catalog
    run_ok(capsule().args(["reindex", "--store", p(&store)]));
    assert!(proven(&store));
    std::fs::remove_file(&segs[segs.len() / 2].path).unwrap();
    assert!(!proven(&store));
    let (with, without) = with_and_without_catalog(&store, &questions);
    assert_eq!(with, without);
    assert!(
        with.iter().any(|a| a.contains("the file is missing")),
        "{with:#?}"
    );
}

/// Waits (up to 10 s) until the catalog proves the listing and the ledger, and has for a
/// second: the writer is quiet (no block cut by age, no seal) and its catalog's keeper has
/// written a proof of the store as it is.
fn wait_proven_and_still(store: &Path) -> bool {
    let t = std::time::Instant::now();
    let mut since: Option<std::time::Instant> = None;
    while t.elapsed() < std::time::Duration::from_secs(10) {
        let files = segment_files(store);
        if proven(store) && segment_files(store) == files {
            let s = *since.get_or_insert_with(std::time::Instant::now);
            if s.elapsed() >= std::time::Duration::from_secs(1) {
                return true;
            }
        } else {
            since = None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// Issue 34, round 6: a store being written (a writer open, sealing segments after it
/// opened, retention deleting the oldest, a segment removed by hand while it runs) is
/// answered from a proof of its listing and its ledger as one at rest is, within moments of
/// its last change, and the answers are those of the directory and the ledger.
#[test]
fn a_live_store_is_answered_from_a_proof_of_its_listing() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = two_traces(tmp.path(), "3s");
    let store = tmp.path().join("s");
    import_ok(&store, &SMALL, &[p(&a)]);
    let before = segments(&store);
    let budget = segments_dir_bytes(&store) * 9 / 10;

    // a writer that stays open: `import -` of a pipe fed by hand, with a budget that makes
    // retention delete the oldest segments as it seals new ones
    let mut child = capsule()
        .args(["import", "--store", p(&store)])
        .args(SMALL)
        .args(["--max-bytes", &budget.to_string(), "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut feed = child.stdin.take().unwrap();
    let bytes = std::fs::read(&b).unwrap();
    feed.write_all(&bytes[..bytes.len() / 2]).unwrap();
    feed.flush().unwrap();
    let last_before = before.last().unwrap().seq;
    let t = std::time::Instant::now();
    while !segments(&store)
        .iter()
        .any(|g| g.seq > last_before + 2 && g.state == "sealed")
    {
        assert!(t.elapsed().as_secs() < 20, "the live writer sealed nothing");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        wait_proven_and_still(&store),
        "no proof of the listing while the writer runs"
    );
    assert!(child.try_wait().unwrap().is_none(), "the writer closed");
    let now = segments(&store);
    assert!(
        now[0].seq > before[0].seq,
        "retention deleted nothing: {} {}",
        now[0].seq,
        before[0].seq
    );

    let (client, server, port) = a_dns_exchange(&store);
    let w =
        |from: &str, to: &str| vec!["--from".to_string(), from.into(), "--to".into(), to.into()];
    let questions = vec![
        w("2026-11-30T02:00:02Z", "+1ms"),
        w("2026-11-30T03:00:00.3Z", "+300ms"),
        vec![format!("host {client}")],
        vec![format!(
            "udp and host {client} and port {port} and host {server} and port 53"
        )],
        vec!["port 53 or arp".to_string()],
        vec![],
    ];
    let (with, without) = with_and_without_catalog(&store, &questions);
    assert!(proven(&store), "the proof went while the questions ran");
    assert_eq!(with, without);

    // a sealed segment removed by hand while the writer runs: proven again, and named as
    // missing as without the catalog
    let victim = &now[now.len() / 2];
    assert_eq!(victim.state, "sealed");
    std::fs::remove_file(&victim.path).unwrap();
    assert!(!proven(&store));
    assert!(
        wait_proven_and_still(&store),
        "no proof of the listing after a segment was removed by hand"
    );
    let (with, without) = with_and_without_catalog(&store, &questions);
    assert_eq!(with, without);
    assert!(
        with.iter().any(|a| a.contains("the file is missing")),
        "{with:#?}"
    );
    assert!(child.try_wait().unwrap().is_none(), "the writer closed");

    // the rest of the feed; the writer closes
    feed.write_all(&bytes[bytes.len() / 2..]).unwrap();
    drop(feed);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr_str(&out));
    assert!(proven(&store));
    let (with, without) = with_and_without_catalog(&store, &questions);
    assert_eq!(with, without);
}
