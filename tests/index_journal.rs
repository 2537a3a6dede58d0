//! The open segment's index journal, end to end through the binary: readers plan the open
//! segment from it and list its flows, a kill -9 that leaves a half-written record is
//! recovered to a correct index. (Live capture on a veth: tests/capture_live.rs,
//! `the_open_segment_is_planned_from_its_journal`.)

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// `capsule flows --json` over the whole store: (exit code, flows, stderr).
fn flows(store: &Path) -> (i32, Vec<serde_json::Value>, String) {
    let o = run(capsule().args(["flows", "--store", p(store), "--json", "--limit", "100000"]));
    let flows = stdout_str(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line per flow"))
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

/// An import killed with SIGKILL while its segment is open, its journal then given a
/// half-written record: readers ignore the torn tail (flows listed, the open segment planned
/// from the journal), and the next writer recovers the segment and indexes it: `capsule
/// verify` is clean (the index equals the one rebuilt from the segment), the journal is
/// gone, and flows and plans say what they said from the journal.
#[test]
fn kill_9_with_a_half_written_journal_record_recovers_to_a_correct_index() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.pcap");
    synth(&input, &d.path().join("truth.json"), 7, "4s", "100M", None);
    let bytes = std::fs::read(&input).unwrap();
    let store = d.path().join("store");
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
    // Wait until what import was given is on disk and journaled (both stop growing).
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
        if now.0 > 0 && now.1 > 0 && now == last {
            break;
        }
        last = now;
        assert!(
            Instant::now() < deadline,
            "the journal and {} never settled: {now:?}",
            segment.display()
        );
    }
    // SIGKILL, by the pid of the child this test started.
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stdin);
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
