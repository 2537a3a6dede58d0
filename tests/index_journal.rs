//! The open segment's index journal, end to end through the binary: readers plan the open
//! segment from it and list its flows, a kill -9 that leaves a half-written record is
//! recovered to a correct index. (Live capture on a veth: tests/capture_live.rs,
//! `the_open_segment_is_planned_from_its_journal`.)

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// `capsule flows --json` over the whole store: (exit code, flows, stderr).
///
/// Without the flows' application names: the open segment's journal records do not carry
/// them yet (they come with the sealed index and the fold checkpoint), so the journal's and
/// the index's listings are compared on everything else.
fn flows(store: &Path) -> (i32, Vec<serde_json::Value>, String) {
    let o = run(capsule().args(["flows", "--store", p(store), "--json", "--limit", "100000"]));
    let flows = stdout_str(&o)
        .lines()
        .map(|l| {
            let mut f: serde_json::Value = serde_json::from_str(l).expect("a JSON line per flow");
            f.as_object_mut().map(|o| o.remove("names"));
            f
        })
        .collect();
    (o.status.code().unwrap_or(-1), flows, stderr_str(&o))
}

/// The 5-tuple filter of a flow as `capsule flows --json` prints it.
fn five_tuple(f: &serde_json::Value) -> String {
    let proto = match f["proto"].as_u64() {
        Some(6) => "tcp",
        Some(17) => "udp",
        other => panic!("not TCP or UDP: {other:?}"),
    };
    format!(
        "{proto} and host {} and host {} and port {} and port {}",
        f["a"].as_str().unwrap(),
        f["b"].as_str().unwrap(),
        f["a_port"],
        f["b_port"]
    )
}

/// A store in `d` written by an import of half of a synthetic trace, killed with SIGKILL
/// (by the pid of the child this test started) while its one segment is open, once what it
/// was given is on disk and journaled (the journal and the segment stop growing) and
/// `ready` says so of the store's index directory. Returns the store and the journal.
fn import_killed_half_way(d: &Path, ready: impl Fn(&Path) -> bool) -> (PathBuf, PathBuf) {
    let input = d.join("in.pcap");
    synth(&input, &d.join("truth.json"), 7, "4s", "100M", None);
    let bytes = std::fs::read(&input).unwrap();
    let store = d.join("store");
    let mut child = capsule()
        .args(["import", "--store", p(&store), "--block-size", "64K"])
        .args(["--segment-size", "1G", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes[..bytes.len() / 2]).unwrap();
    stdin.flush().unwrap();
    let journal = store.join("index").join("seg-000000000001.journal");
    let segment = store
        .join("segments")
        .join(".seg-000000000001.pcapng.zst.open");
    let size = |f: &Path| std::fs::metadata(f).map_or(0, |m| m.len());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = (0, 0);
    loop {
        std::thread::sleep(Duration::from_millis(400));
        let now = (size(&journal), size(&segment));
        if now.0 > 0 && now.1 > 0 && now == last && ready(&store.join("index")) {
            break;
        }
        last = now;
        assert!(
            Instant::now() < deadline,
            "the journal and {} never settled: {now:?}",
            segment.display()
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stdin);
    (store, journal)
}

/// An import killed with SIGKILL while its segment is open, its journal then given a
/// half-written record: readers ignore the torn tail (flows listed, the open segment planned
/// from the journal), and the next writer recovers the segment and indexes it: `capsule
/// verify` is clean (the index equals the one rebuilt from the segment), the journal is
/// gone, and flows and plans say what they said from the journal.
#[test]
fn kill_9_with_a_half_written_journal_record_recovers_to_a_correct_index() {
    let d = tempfile::tempdir().unwrap();
    let (store, journal) = import_killed_half_way(d.path(), |_| true);
    // Half of a record, as a writer killed mid-write leaves it.
    let mut j = std::fs::read(&journal).unwrap();
    assert_eq!(&j[..4], b"CPJR");
    let first = 12 + u32::from_le_bytes(j[4..8].try_into().unwrap()) as usize;
    let half = j[..first / 2].to_vec();
    j.extend_from_slice(&half);
    std::fs::write(&journal, &j).unwrap();

    let (code, open_flows, err) = flows(&store);
    assert_eq!(code, 0, "{err}");
    assert!(!open_flows.is_empty(), "no flows from the journal: {err}");
    assert!(
        !err.contains("index journal"),
        "the torn tail is no damage: {err}"
    );
    let web = open_flows
        .iter()
        .find(|f| matches!(f["proto"].as_u64(), Some(6 | 17)))
        .expect("a TCP or UDP flow");
    let filter = five_tuple(web);
    let (r_open, t_open, row) = explain(&store, &filter, 1);
    assert!(
        row.contains("used"),
        "the open segment is planned from its journal: {row}"
    );
    assert!(
        r_open >= 1 && r_open < t_open,
        "{filter}: read {r_open} of {t_open}"
    );

    // The next writer recovers the segment and indexes it.
    let tiny = d.path().join("tiny.pcap");
    std::fs::write(&tiny, write_pcap_ns(1, 0, &[(1, 60, vec![0; 60])])).unwrap();
    import_ok(&store, &[], &[p(&tiny)]);
    assert!(
        !journal.exists(),
        "the recovered segment's journal is removed"
    );
    let v = run(capsule().args(["verify", "--store", p(&store)]));
    assert!(v.status.success(), "verify: {}", stdout_str(&v));
    let (code, sealed_flows, err) = flows(&store);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        sealed_flows, open_flows,
        "flows from the journal = from the index"
    );
    let (r_sealed, _, row) = explain(&store, &filter, 1);
    assert!(row.contains("used"), "{row}");
    assert_eq!(r_open, r_sealed, "{filter}");
}

/// The same with the fold checkpoint the writer wrote once it went quiet: readers fold the
/// journal onto it, and list and plan exactly what the journal alone gives (the checkpoint
/// removed, or damaged: ignored); the next writer recovers the segment to an index equal to
/// both, and removes the checkpoint with the journal.
#[test]
fn kill_9_with_a_fold_checkpoint_present_recovers_to_a_correct_index() {
    let d = tempfile::tempdir().unwrap();
    let fold = |ix: &Path| ix.join("seg-000000000001.fold");
    let (store, journal) = import_killed_half_way(d.path(), |ix| fold(ix).exists());
    let ck = fold(&store.join("index"));
    let bytes = std::fs::read(&ck).unwrap();
    assert_eq!(&bytes[..8], b"CPSLFOLD");

    let (code, with, err) = flows(&store);
    assert_eq!(code, 0, "{err}");
    assert!(!with.is_empty() && err.is_empty(), "{err}");
    let filter = five_tuple(
        with.iter()
            .find(|f| matches!(f["proto"].as_u64(), Some(6 | 17)))
            .expect("a TCP or UDP flow"),
    );
    let planned = explain(&store, &filter, 1);
    assert!(planned.2.contains("used"), "{}", planned.2);
    // The checkpoint is what is read for the blocks it covers: with a middle record's body
    // made undecodable (its crc32c fixed up), readers say the same and note nothing; without
    // the checkpoint they would note the record and miss its block.
    let j = std::fs::read(&journal).unwrap();
    let mut starts = vec![0];
    while let Some(&at) = starts.last().filter(|&&at| at + 12 <= j.len()) {
        starts.push(at + 12 + u32::from_le_bytes(j[at + 4..at + 8].try_into().unwrap()) as usize);
    }
    let (at, end) = (starts[starts.len() / 2], starts[starts.len() / 2 + 1]);
    let mut broken = j.clone();
    broken[end - 3..end].copy_from_slice(&[0xff; 3]);
    let crc = capsule_store::crc::crc32c(&broken[at + 12..end]);
    broken[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&journal, &broken).unwrap();
    assert_eq!(flows(&store), (0, with.clone(), String::new()), "covered");
    std::fs::rename(&ck, d.path().join("aside")).unwrap();
    let (code, without, err) = flows(&store);
    assert!(
        err.contains("journal"),
        "the damaged record is noted: {err}"
    );
    assert_ne!(without, with);
    // An answer that misses the damaged record's flows is partial, from every reader of
    // the index (issue [mend-store] 4: a damaged journal answered exit 0).
    assert_eq!(code, 3, "flows over a damaged journal record: {err}");
    let top = run(capsule().args(["top", "--store", p(&store)]));
    assert_eq!(top.status.code(), Some(3), "top: {}", stderr_str(&top));
    assert!(stderr_str(&top).contains("journal"), "{}", stderr_str(&top));
    // Packets come from the segment itself: whole, or partial and named.
    let total = run(capsule().args(["query", "--store", p(&store), "--count"]));
    let count = run(capsule().args(["query", "--store", p(&store), "--count", &filter]));
    match count.status.code() {
        Some(0) => assert!(
            parse_packets_bytes(&stdout_str(&count)).0 > 0 && total.status.success(),
            "{}",
            stderr_str(&count)
        ),
        Some(3) => assert!(
            stderr_str(&count).contains("journal"),
            "{}",
            stderr_str(&count)
        ),
        other => panic!("query --count exit {other:?}: {}", stderr_str(&count)),
    }
    std::fs::rename(d.path().join("aside"), &ck).unwrap();
    std::fs::write(&journal, &j).unwrap();
    // Damaged (one bit of its index), then gone: the journal alone says the same.
    let mut bad = bytes.clone();
    let at = bad.len() / 2;
    bad[at] ^= 1;
    std::fs::write(&ck, &bad).unwrap();
    assert_eq!(flows(&store), (0, with.clone(), String::new()), "damaged");
    assert_eq!(explain(&store, &filter, 1), planned, "damaged");
    std::fs::remove_file(&ck).unwrap();
    assert_eq!(flows(&store), (0, with.clone(), String::new()), "removed");
    assert_eq!(explain(&store, &filter, 1), planned, "removed");
    std::fs::write(&ck, &bytes).unwrap();

    let tiny = d.path().join("tiny.pcap");
    std::fs::write(&tiny, write_pcap_ns(1, 0, &[(1, 60, vec![0; 60])])).unwrap();
    import_ok(&store, &[], &[p(&tiny)]);
    assert!(!journal.exists() && !ck.exists(), "both go with recovery");
    let v = run(capsule().args(["verify", "--store", p(&store)]));
    assert!(v.status.success(), "verify: {}", stdout_str(&v));
    let (code, sealed, err) = flows(&store);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sealed, with, "flows from the checkpoint = from the index");
    let (r_sealed, _, row) = explain(&store, &filter, 1);
    assert!(row.contains("used"), "{row}");
    assert_eq!(r_sealed, planned.0, "{filter}");
}
