//! The object-store tier end to end, against a real S3-compatible server on loopback
//! (SeaweedFS's `weed server -s3`, installed by scripts/install_weed.sh when missing):
//! segments leave the disk only once uploaded, come back byte-identical by range, a 5-tuple
//! question fetches a small part of what is tiered, and a dead endpoint only grows the
//! backlog.

mod common;

use std::collections::BTreeMap;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const KEY: &str = "capsulekey";
const SECRET: &str = "capsulesecret";

/// A `weed server -s3` on loopback ports of its own, stopped (by PID) when dropped.
struct Weed {
    bin: PathBuf,
    dir: PathBuf,
    ports: Vec<u16>,
    child: Option<Child>,
}

fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

impl Weed {
    fn start(dir: &Path) -> Weed {
        let out = Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/install_weed.sh"
            ))
            .output()
            .expect("run scripts/install_weed.sh");
        assert!(
            out.status.success(),
            "install_weed.sh: {}",
            stderr_str(&out)
        );
        let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(
            dir.join("s3.json"),
            format!(
                r#"{{"identities":[{{"name":"capsule","credentials":[{{"accessKey":"{KEY}","secretKey":"{SECRET}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
            ),
        )
        .unwrap();
        let mut w = Weed {
            bin,
            dir: dir.to_path_buf(),
            ports: free_ports(10),
            child: None,
        };
        w.restart();
        w
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports[6])
    }

    fn restart(&mut self) {
        let p = |i: usize| self.ports[i].to_string();
        let log = std::fs::File::create(self.dir.join("weed.log")).unwrap();
        let child = Command::new(&self.bin)
            .arg("server")
            .arg(format!("-dir={}", self.dir.join("data").display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-volume.max=8"])
            .args(["-master.volumeSizeLimitMB=64", "-filer", "-s3"])
            .arg(format!("-master.port={}", p(0)))
            .arg(format!("-master.port.grpc={}", p(1)))
            .arg(format!("-volume.port={}", p(2)))
            .arg(format!("-volume.port.grpc={}", p(3)))
            .arg(format!("-filer.port={}", p(4)))
            .arg(format!("-filer.port.grpc={}", p(5)))
            .arg(format!("-s3.port={}", p(6)))
            .arg(format!("-s3.port.grpc={}", p(7)))
            // Its Iceberg and Lance servers have fixed default ports: ephemeral ones too.
            .arg(format!("-s3.port.iceberg={}", p(8)))
            .arg(format!("-s3.port.lance={}", p(9)))
            .arg(format!("-s3.config={}", self.dir.join("s3.json").display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start weed");
        self.child = Some(child);
        // Ready once the bucket can be made (or is there): the S3 gateway answers for it.
        let t0 = Instant::now();
        loop {
            let out = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--aws-sigv4"])
                .arg("aws:amz:us-east-1:s3")
                .args(["--user", &format!("{KEY}:{SECRET}"), "-X", "PUT"])
                .arg(format!("{}/capsule", self.endpoint()))
                .output()
                .expect("run curl");
            let code = String::from_utf8_lossy(&out.stdout).to_string();
            if code == "200" || code == "409" {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "weed did not come up (last answer {code:?}); its log: {}",
                std::fs::read_to_string(self.dir.join("weed.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A config file with `[tier]` pointing at `weed`, and its credentials file.
fn tier_config(dir: &Path, weed: &Weed, prefix: &str) -> PathBuf {
    std::fs::write(dir.join("tier.cred"), format!("{KEY}\n{SECRET}\n")).unwrap();
    let path = dir.join(format!("{}.toml", prefix.replace('/', "-")));
    std::fs::write(
        &path,
        format!(
            "[tier]\nendpoint = \"{}\"\nbucket = \"capsule\"\nprefix = \"{prefix}\"\n\
             credentials_file = \"tier.cred\"\n",
            weed.endpoint()
        ),
    )
    .unwrap();
    path
}

fn status(store: &Path) -> serde_json::Value {
    let out = run_ok(capsule().args(["status", "--store", p(store), "--json"]));
    serde_json::from_slice(&out.stdout).expect("status --json")
}

fn count(store: &Path, config: Option<&Path>, filter: &[&str]) -> serde_json::Value {
    let mut cmd = capsule();
    cmd.args(["query", "--store", p(store), "--count", "--json"]);
    if let Some(c) = config {
        cmd.args(["--config", p(c)]);
    }
    let out = run_ok(cmd.args(filter));
    serde_json::from_slice(&out.stdout).expect("query --count --json")
}

/// Waits (up to 60 s, polling every `poll_ms`) until the store's ledger has a line
/// starting with `word`.
fn wait_for_ledger_line(store: &Path, word: &str, poll_ms: u64) {
    let ledger = store.join("segments/ledger");
    let t0 = Instant::now();
    while !std::fs::read_to_string(&ledger)
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with(word))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no {word:?} line in the ledger"
        );
        std::thread::sleep(Duration::from_millis(poll_ms));
    }
}

const SMALL: [&str; 6] = [
    "--block-size",
    "64K",
    "--segment-size",
    "1M",
    "--max-bytes",
    "2M",
];

/// A trace of `duration` (synth `seed`, 30 Mbit/s) imported twice: into `ref`, a store
/// without a budget (the reference), and into `store`, with `[tier]` under `prefix` and the
/// small local budget, so that most of its segments are only in the object store. The
/// segments are cut alike, so both stores' indexes are the same.
struct Pair {
    cfg: PathBuf,
    reference: PathBuf,
    store: PathBuf,
    truth: Truth,
}

fn tiered_pair(d: &Path, weed: &Weed, prefix: &str, seed: u64, duration: &str) -> Pair {
    let pcap = d.join("in.pcap");
    let truth = synth(&pcap, &d.join("truth.json"), seed, duration, "30M", None);
    let cfg = tier_config(d, weed, prefix);
    let reference = d.join("ref");
    import_ok(
        &reference,
        &["--block-size", "64K", "--segment-size", "1M"],
        &[p(&pcap)],
    );
    let store = d.join("store");
    let mut args = SMALL.to_vec();
    args.extend(["--config", p(&cfg)]);
    import_ok(&store, &args, &[p(&pcap)]);
    Pair {
        cfg,
        reference,
        store,
        truth,
    }
}

#[test]
fn tiered_segments_leave_the_disk_and_come_back_byte_identical_by_range() {
    let d = tempfile::tempdir().unwrap();
    let weed = Weed::start(&d.path().join("weed"));
    let Pair {
        cfg,
        reference,
        store,
        truth,
    } = tiered_pair(d.path(), &weed, "site-a/probe-1", 5, "6s");

    let t = &status(&store)["tier"];
    let total = t["tiered_segments"].as_u64().unwrap();
    let only = t["tiered_only_segments"].as_u64().unwrap();
    assert_eq!(t["backlog_segments"], 0, "{t}");
    assert!(
        total >= 6 && only * 3 >= total * 2,
        "most segments leave the disk: {t}"
    );
    assert!(segments_dir_bytes(&store) < 4 << 20, "{t}");

    // `segments` says where each segment lives; with the config the ones only in the object
    // store are described (from their footers) as the ledger recorded them at their seal.
    let out = run_ok(capsule().args([
        "segments",
        "--store",
        p(&store),
        "--json",
        "--config",
        p(&cfg),
    ]));
    let rows: Vec<serde_json::Value> = stdout_str(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let only_there = trimmed(&store);
    let ledger = std::fs::read_to_string(store.join("segments/ledger")).unwrap();
    let at_seal: BTreeMap<u64, Vec<u64>> = ledger
        .lines()
        .filter_map(|l| l.strip_prefix("sealed "))
        .map(|l| {
            l.split(' ')
                .map(|w| w.parse::<u64>().unwrap())
                .collect::<Vec<_>>()
        })
        .map(|w| (w[0], w[1..].to_vec()))
        .collect();
    assert_eq!(rows.len(), at_seal.len(), "{rows:#?}");
    let mut packets = 0;
    for r in &rows {
        let seq = r["seq"].as_u64().unwrap();
        let w = &at_seal[&seq];
        let got = ["first_ns", "last_ns", "packets", "bytes"].map(|k| r[k].as_u64().unwrap());
        assert_eq!(got.to_vec(), *w, "segment {seq}: {r}");
        assert!(r["blocks"].as_u64().unwrap() > 0, "{r}");
        let location = if only_there.contains(&seq) {
            "tiered"
        } else {
            "both"
        };
        assert_eq!(r["location"], location, "{r}");
        packets += w[2];
    }
    assert!(!only_there.is_empty());
    assert_eq!(packets, truth.packets);
    let out = run_ok(capsule().args(["segments", "--store", p(&reference), "--json"]));
    assert!(stdout_str(&out)
        .lines()
        .all(|l| l.contains(r#""location":"local""#)));
    // Without it they are named as unreadable, with what to give.
    let out = run_ok(capsule().args(["segments", "--store", p(&store)]));
    assert!(stderr_str(&out).contains("[tier]"), "{}", stderr_str(&out));
    assert!(stdout_str(&out).contains("where"), "{}", stdout_str(&out));

    // The answers from the side index count the segments only in the object store too
    // (their index stays local), with or without the config: the same as the reference's.
    for q in [&["dscp"][..], &["top", "--key", "src"], &["bursts"]] {
        let answer = |s: &Path| {
            let out = run_ok(capsule().args(q).args(["--store", p(s)]));
            stdout_str(&out).replace(p(s), "STORE")
        };
        assert_eq!(answer(&store), answer(&reference), "{q:?}");
    }

    // Every packet, byte-identical, from the object store and the disk together.
    let want = query_ok(&reference, &d.path().join("ref.pcapng"), &[]);
    let mut cmd = capsule();
    cmd.args(["query", "--store", p(&store), "--config", p(&cfg)])
        .args(["-w", p(&d.path().join("got.pcapng"))]);
    run_ok(&mut cmd);
    let got = std::fs::read(d.path().join("got.pcapng")).unwrap();
    assert_eq!(decode(&got).packets.len() as u64, truth.packets);
    assert!(got == want, "the export differs from the reference store's");
    // Without the config the trimmed segments are named, and the answer is partial.
    let out = run(capsule().args(["query", "--store", p(&store), "--count"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr_str(&out));
    assert!(stderr_str(&out).contains("[tier]"), "{}", stderr_str(&out));

    // A 5-tuple question over the tiered span reads a small part of what is tiered.
    let flows = run_ok(capsule().args([
        "flows",
        "--store",
        p(&reference),
        "--json",
        "--limit",
        "400",
    ]));
    let flow: serde_json::Value = stdout_str(&flows)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .rfind(|f| f["proto"] == 6)
        .expect("a tcp flow");
    let filter = format!(
        "tcp and host {} and host {} and port {} and port {}",
        flow["a"].as_str().unwrap(),
        flow["b"].as_str().unwrap(),
        flow["a_port"],
        flow["b_port"]
    );
    let want = count(&reference, None, &[&filter]);
    let got = count(&store, Some(&cfg), &[&filter]);
    assert_eq!(got["packets"], want["packets"], "{filter}");
    assert!(got["packets"].as_u64().unwrap() > 0, "{filter}");
    let fetched = got["tier_fetched_bytes"].as_u64().unwrap();
    let tiered = t["tiered_bytes"].as_u64().unwrap();
    assert!(
        fetched > 0 && fetched * 10 < tiered,
        "fetched {fetched} of {tiered} tiered bytes"
    );
    eprintln!("5-tuple query: fetched {fetched} of {tiered} tiered bytes");
}

#[test]
fn a_dead_endpoint_only_grows_the_backlog_and_it_drains_after_a_restart() {
    let d = tempfile::tempdir().unwrap();
    let mut weed = Weed::start(&d.path().join("weed"));
    let pcap = d.path().join("in.pcap");
    let truth = synth(&pcap, &d.path().join("truth.json"), 6, "6s", "30M", None);
    let cfg = tier_config(d.path(), &weed, "dead");
    let store = d.path().join("store");
    let mut args = SMALL.to_vec();
    args.extend(["--config", p(&cfg)]);
    // The import runs while the endpoint dies under it once the first upload is confirmed.
    let mut cmd = capsule();
    cmd.arg("import")
        .args(["--store", p(&store)])
        .args(&args)
        .arg(p(&pcap));
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ledger = store.join("segments/ledger");
    wait_for_ledger_line(&store, "tiered ", 20);
    weed.stop();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr_str(&out));
    assert!(
        stderr_str(&out).contains("wait for upload"),
        "{}",
        stderr_str(&out)
    );
    let t = &status(&store)["tier"];
    assert!(t["backlog_segments"].as_u64().unwrap() > 0, "{t}");
    // Nothing that is not uploaded left the disk: every packet is still there locally or
    // in the ledger's tiered segments.
    let text = std::fs::read_to_string(&ledger).unwrap();
    for line in text.lines().filter(|l| l.starts_with("trimmed ")) {
        let seq = line.split(' ').nth(1).unwrap();
        assert!(
            text.contains(&format!("tiered {seq} ")),
            "trimmed {seq} without its upload"
        );
    }
    for s in text.lines().filter(|l| l.starts_with("sealed ")) {
        let seq: u64 = s.split(' ').nth(1).unwrap().parse().unwrap();
        let file = store.join(format!("segments/seg-{seq:012}.pcapng.zst"));
        let tiered = text.contains(&format!("tiered {seq} "));
        assert!(
            tiered || file.exists(),
            "segment {seq} neither uploaded nor on disk"
        );
    }
    // Back up: the next writer drains the backlog, then trims.
    weed.restart();
    let empty = d.path().join("empty.pcap");
    std::fs::write(&empty, write_pcap_ns(1, 65535, &[])).unwrap();
    import_ok(&store, &args, &[p(&empty)]);
    let t = &status(&store)["tier"];
    assert_eq!(t["backlog_segments"], 0, "{t}");
    let c = count(&store, Some(&cfg), &[]);
    assert_eq!(c["packets"].as_u64().unwrap(), truth.packets, "{c}");
}

/// `curl --aws-sigv4` against the test's weed: (HTTP status, body).
fn s3(weed: &Weed, method: &str, key: &str, body: Option<&Path>) -> (String, Vec<u8>) {
    let d = tempfile::tempdir().unwrap();
    let out_file = d.path().join("body");
    let mut cmd = Command::new("curl");
    cmd.args([
        "-s",
        "-o",
        p(&out_file),
        "-w",
        "%{http_code}",
        "--aws-sigv4",
    ])
    .arg("aws:amz:us-east-1:s3")
    .args(["--user", &format!("{KEY}:{SECRET}")]);
    // A body goes with -T (curl signs its hash; --data-binary's form encoding is refused).
    match body {
        Some(b) => cmd.args(["-T", p(b)]),
        None => cmd.args(["-X", method]),
    };
    let out = cmd
        .arg(format!("{}/capsule/{key}", weed.endpoint()))
        .output()
        .expect("run curl");
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        std::fs::read(&out_file).unwrap_or_default(),
    )
}

fn verify(store: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = run(capsule()
        .args(["verify", "--store", p(store), "--json"])
        .args(extra));
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), v, stderr_str(&out))
}

/// Trimmed segments' numbers, from the ledger.
fn trimmed(store: &Path) -> Vec<u64> {
    std::fs::read_to_string(store.join("segments/ledger"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("trimmed "))
        .map(|s| s.trim().parse().unwrap())
        .collect()
}

#[test]
fn verify_checks_each_tiered_object_against_the_ledger_and_deep_reads_its_blocks() {
    let d = tempfile::tempdir().unwrap();
    let weed = Weed::start(&d.path().join("weed"));
    let pcap = d.path().join("in.pcap");
    synth(&pcap, &d.path().join("truth.json"), 7, "4s", "30M", None);
    let cfg = tier_config(d.path(), &weed, "verify");
    let store = d.path().join("store");
    let mut args = SMALL.to_vec();
    args.extend(["--config", p(&cfg)]);
    import_ok(&store, &args, &[p(&pcap)]);
    let t = status(&store)["tier"].clone();
    let only = trimmed(&store);
    assert!(only.len() >= 3, "segments left the disk: {t}");

    // Without the config: the segments only in the object store are named as not checked.
    let (code, v, err) = verify(&store, &[]);
    assert_eq!(code, Some(3), "{v} {err}");
    assert_eq!(v["tiered_not_checked"], only.len(), "{v}");
    assert!(
        err.contains("not checked") && err.contains("--config"),
        "{err}"
    );

    // With it: every tiered object checked, nothing wrong; --deep reads each whole.
    let (code, v, err) = verify(&store, &["--config", p(&cfg)]);
    assert_eq!(code, Some(0), "{v} {err}");
    assert_eq!(v["tiered_checked"], t["tiered_segments"], "{v} {t}");
    assert_eq!(v["tiered_only_checked"], only.len(), "{v}");
    assert_eq!(v["problems"].as_array().unwrap().len(), 0, "{v}");
    let (code, v, err) = verify(&store, &["--config", p(&cfg), "--deep"]);
    assert_eq!(code, Some(0), "{v} {err}");
    assert_eq!(v["tier_read_bytes"], t["tiered_bytes"], "{v} {t}");

    // One object replaced by the same bytes with one byte changed inside a block, another
    // deleted: each is named, by its key; --deep names the damaged block's offset too.
    let key = |seq: u64| format!("verify/segments/seg-{seq:012}.pcapng.zst");
    let (changed, gone) = (only[0], only[1]);
    let (code, mut bytes) = s3(&weed, "GET", &key(changed), None);
    assert_eq!(code, "200");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    let edited = d.path().join("edited");
    std::fs::write(&edited, &bytes).unwrap();
    assert_eq!(s3(&weed, "PUT", &key(changed), Some(&edited)).0, "200");
    assert_eq!(
        s3(&weed, "GET", &key(changed), None).1,
        bytes,
        "the object replaced"
    );
    assert_eq!(s3(&weed, "DELETE", &key(gone), None).0, "204");

    let (code, v, _) = verify(&store, &["--config", p(&cfg)]);
    assert_eq!(code, Some(1), "{v}");
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "{v}");
    let named = |seq: u64, what: &str| {
        problems.iter().any(|p| {
            p["path"].as_str().unwrap().ends_with(&key(seq))
                && p["detail"].as_str().unwrap().contains(what)
        })
    };
    assert!(named(changed, "ETag"), "{v}");
    assert!(named(gone, "gone"), "{v}");
    let (code, v, _) = verify(&store, &["--config", p(&cfg), "--deep"]);
    assert_eq!(code, Some(1), "{v}");
    let block = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["what"] == "block")
        .unwrap_or_else(|| panic!("a damaged block named: {v}"));
    assert!(
        block["path"].as_str().unwrap().ends_with(&key(changed)),
        "{v}"
    );
    let off = block["offset"].as_u64().unwrap();
    let len = block["len"].as_u64().unwrap_or(1);
    assert!(
        off <= at as u64 && (at as u64) < off + len.max(1),
        "the block at {off} (+{len}) holds the changed byte {at}: {v}"
    );
}

#[test]
fn kill_9_during_uploads_records_no_object_that_is_not_whole_and_the_next_writer_finishes() {
    let d = tempfile::tempdir().unwrap();
    let weed = Weed::start(&d.path().join("weed"));
    let pcap = d.path().join("in.pcap");
    let truth = synth(&pcap, &d.path().join("truth.json"), 8, "6s", "60M", None);
    let cfg = tier_config(d.path(), &weed, "killed");
    let store = d.path().join("store");
    // Segments over PART_BYTES (8 MiB): uploaded in parts, the slowest uploads there are.
    let args = [
        "--block-size",
        "256K",
        "--segment-size",
        "12M",
        "--max-bytes",
        "24M",
        "--config",
        p(&cfg),
    ];
    let mut child = capsule()
        .arg("import")
        .args(["--store", p(&store)])
        .args(args)
        .arg(p(&pcap))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed as soon as the first segment is sealed: its upload has just begun.
    wait_for_ledger_line(&store, "sealed ", 2);
    std::thread::sleep(Duration::from_millis(30));
    child.kill().unwrap();
    child.wait().unwrap();
    // Whatever the ledger records as tiered is whole in the object store. A segment sealed
    // just before the kill may lack its side index (the crash window between sealing and
    // indexing, named by verify and rebuilt by the next writer, checked below): that is
    // the store's, not the tier's, and segments here are written in tens of ms.
    let (code, v, err) = verify(&store, &["--config", p(&cfg)]);
    let tier_problems: Vec<_> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            !(p["what"] == "index"
                && p["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("missing:")))
        })
        .collect();
    assert!(tier_problems.is_empty(), "{v} {err}");
    // 1 only for that missing index.
    assert!(matches!(code, Some(0 | 1 | 3)), "{v} {err}");
    // The next writer drains what was left, and nothing is lost.
    let empty = d.path().join("empty.pcap");
    std::fs::write(&empty, write_pcap_ns(1, 65535, &[])).unwrap();
    import_ok(&store, &args, &[p(&empty)]);
    assert_eq!(status(&store)["tier"]["backlog_segments"], 0);
    let (code, v, err) = verify(&store, &["--config", p(&cfg), "--deep"]);
    assert_eq!(code, Some(0), "{v} {err}");
    let c = count(&store, Some(&cfg), &[]);
    // The kill lost what the importer had not stored yet, never what it had.
    let stored = c["packets"].as_u64().unwrap();
    assert!(stored > 0 && stored <= truth.packets, "{c}");
}

/// What one HTTPS GET of a `capsule serve` answered: status, headers (lowercase names) and
/// body.
struct Answer {
    status: u16,
    headers: String,
    body: Vec<u8>,
}

fn get(server: &common::serve::Server, token: &str, path: &str) -> Answer {
    let d = tempfile::tempdir().unwrap();
    let (body, head) = (d.path().join("body"), d.path().join("head"));
    let out = run_ok(
        Command::new(need_tool("curl"))
            .args(["-sS", "--cacert", p(&server.ca), "-o", p(&body)])
            .args(["-D", p(&head), "-w", "%{http_code}"])
            .args(["-H", &format!("Authorization: Bearer {token}")])
            .arg(server.url(path)),
    );
    Answer {
        status: stdout_str(&out).trim().parse().unwrap_or(0),
        headers: std::fs::read_to_string(&head).unwrap().to_lowercase(),
        body: std::fs::read(&body).unwrap_or_default(),
    }
}

#[test]
fn serve_reads_the_tier_byte_identical_and_says_what_each_answer_fetched() {
    let d = tempfile::tempdir().unwrap();
    let weed = Weed::start(&d.path().join("weed"));
    let pair = tiered_pair(d.path(), &weed, "serve", 9, "3s");
    assert!(trimmed(&pair.store).len() >= 4, "segments left the disk");
    let tokens = d.path().join("tokens");
    let token = common::serve::add_token(&tokens, "analyst");
    std::fs::create_dir_all(d.path().join("srv")).unwrap();
    let server = common::serve::start(
        &d.path().join("srv"),
        &pair.store,
        &tokens,
        &["--config", p(&pair.cfg)],
    );

    // The count of a window in a trimmed segment says what it fetched from the object store
    // (the blocks it read), as `query --count --json` does.
    let (a, b) = span_of(&pair.store, trimmed(&pair.store)[1]);
    let got = get(&server, &token, &format!("/v1/count?from=@{a}&to=@{b}"));
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert!(!got.headers.contains("capsule-partial"), "{}", got.headers);
    let c: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    let inside = window(a, Some(b));
    let inside = refs(&inside);
    assert_eq!(
        c["packets"],
        count(&pair.reference, None, &inside)["packets"]
    );
    assert!(c["tier_fetched_bytes"].as_u64().unwrap() > 0, "{c}");

    // Every packet of the whole span, byte-identical to the local reference's export.
    let want = query_ok(&pair.reference, &d.path().join("ref.pcapng"), &[]);
    let got = get(&server, &token, "/v1/packets?format=pcapng");
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(
        decode(&got.body).packets.len() as u64,
        pair.truth.packets,
        "every packet"
    );
    assert!(
        got.body == want,
        "the server's export differs from the reference's"
    );
    // The flows of the trimmed segments too: the reference's lines, byte for byte.
    let got = get(&server, &token, "/v1/flows?limit=100000");
    assert_eq!(got.status, 200);
    let want = run_ok(
        capsule()
            .args(["flows", "--store", p(&pair.reference)])
            .args(["--json", "--limit", "100000"]),
    );
    assert!(!got.headers.contains("capsule-partial"), "{}", got.headers);
    assert_eq!(String::from_utf8_lossy(&got.body), stdout_str(&want));
    // Each request's audit line says what that request fetched.
    let lines = server.audit_lines();
    let fetched = |endpoint: &str| {
        lines
            .iter()
            .find(|l| l["endpoint"] == endpoint)
            .and_then(|l| l["tier_fetched_bytes"].as_u64())
            .unwrap_or_else(|| panic!("{endpoint}: {lines:?}"))
    };
    assert!(fetched("/v1/packets") > 0);
    assert_eq!(
        fetched("/v1/count"),
        c["tier_fetched_bytes"].as_u64().unwrap()
    );

    // A server without the section names the trimmed segments and answers partial.
    drop(server);
    std::fs::create_dir_all(d.path().join("srv2")).unwrap();
    let bare = common::serve::start(&d.path().join("srv2"), &pair.store, &tokens, &[]);
    let got = get(&bare, &token, "/v1/count");
    assert!(got.headers.contains("capsule-partial"), "{}", got.headers);
}

/// `--from @FROM` and, with `to`, `--to @TO`.
fn window(from: u64, to: Option<u64>) -> Vec<String> {
    let mut w = vec!["--from".to_string(), format!("@{from}")];
    if let Some(t) = to {
        w.extend(["--to".to_string(), format!("@{t}")]);
    }
    w
}

/// `args` as the `&str`s [`count`] takes.
fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Every segment the store's ledger records as sealed: number, first and last packet time.
fn sealed(store: &Path) -> Vec<(u64, u64, u64)> {
    let text = std::fs::read_to_string(store.join("segments/ledger")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("sealed "))
        .map(|l| {
            l.split(' ')
                .map(|w| w.parse::<u64>().unwrap())
                .collect::<Vec<_>>()
        })
        .map(|w| (w[0], w[1], w[2]))
        .collect()
}

/// The first and last packet time of sealed segment `seq`, from the store's ledger.
fn span_of(store: &Path, seq: u64) -> (u64, u64) {
    sealed(store)
        .into_iter()
        .find(|s| s.0 == seq)
        .map(|s| (s.1, s.2))
        .unwrap_or_else(|| panic!("no seal of segment {seq}"))
}

#[test]
fn a_missing_index_comes_from_the_bucket_and_footers_are_cached_so_later_questions_fetch_only_what_they_read(
) {
    let d = tempfile::tempdir().unwrap();
    let weed = Weed::start(&d.path().join("weed"));
    let pair = tiered_pair(d.path(), &weed, "cache", 10, "3s");
    let (store, cfg) = (&pair.store, &pair.cfg);
    let only = trimmed(store);
    assert!(only.len() >= 4, "segments left the disk");
    let idx = |seq: u64| store.join(format!("index/seg-{seq:012}.idx"));
    let footer = |seq: u64| store.join(format!("index/seg-{seq:012}.footer"));

    // A window in the newest segment, which is local: the first question opens every
    // trimmed segment (their footers, from the object store) and caches what it read; the
    // next asks the object store for nothing.
    let newest = sealed(store).iter().map(|s| s.0).max().unwrap();
    assert!(!only.contains(&newest));
    let (a, _) = span_of(store, newest);
    let newest_ms = window(a, Some(a + 1_000_000));
    let newest_ms = refs(&newest_ms);
    let first = count(store, Some(cfg), &newest_ms);
    assert!(first["tier_fetched_bytes"].as_u64().unwrap() > 0, "{first}");
    for &q in &only {
        assert!(footer(q).exists(), "segment {q}'s footer is cached");
    }
    let again = count(store, Some(cfg), &newest_ms);
    assert_eq!(again["packets"], first["packets"]);
    assert_eq!(again["tier_fetched_bytes"], 0, "{again}");
    // A question over a trimmed segment fetches its blocks only, not its footer again.
    let (a, b) = span_of(store, only[1]);
    let inside = window(a, Some(b));
    let inside = refs(&inside);
    let want = count(&pair.reference, None, &inside);
    let got = count(store, Some(cfg), &inside);
    assert_eq!(got["packets"], want["packets"]);
    assert!(got["tier_fetched_bytes"].as_u64().unwrap() > 0, "{got}");
    // A damaged cache costs a fetch, never a wrong answer.
    std::fs::write(footer(only[1]), b"not a footer").unwrap();
    let got = count(store, Some(cfg), &inside);
    assert_eq!(got["packets"], want["packets"]);

    // Two trimmed segments' side indexes lost locally: fetched from the bucket (uploaded
    // with their segments) and kept, and the answers are the reference's.
    let lost = [only[0], only[2]];
    let kept: Vec<Vec<u8>> = lost
        .iter()
        .map(|&q| std::fs::read(idx(q)).unwrap())
        .collect();
    for &q in &lost {
        std::fs::remove_file(idx(q)).unwrap();
    }
    let flows = |s: &Path, config: Option<&Path>| {
        let mut cmd = capsule();
        cmd.args(["flows", "--store", p(s), "--json", "--limit", "100000"]);
        if let Some(c) = config {
            cmd.args(["--config", p(c)]);
        }
        stdout_str(&run_ok(&mut cmd))
    };
    assert_eq!(flows(store, Some(cfg)), flows(&pair.reference, None));
    for (q, bytes) in lost.iter().zip(&kept) {
        assert_eq!(
            &std::fs::read(idx(*q)).unwrap(),
            bytes,
            "segment {q}'s index"
        );
    }
    // The analytics too (their own path to the index): `dscp --config` as the reference's.
    std::fs::remove_file(idx(only[3])).unwrap();
    // (The same config for both: it says which policy the answer checks against.)
    let dscp = |s: &Path| {
        let out = run_ok(capsule().args(["dscp", "--store", p(s), "--config", p(cfg)]));
        stdout_str(&out).replace(p(s), "STORE")
    };
    assert_eq!(dscp(store), dscp(&pair.reference));
    assert!(idx(only[3]).exists());
}

#[test]
fn max_age_deletes_old_objects_and_answers_over_them_say_the_packets_are_gone() {
    let d = tempfile::tempdir().unwrap();
    let weed = Weed::start(&d.path().join("weed"));
    let pair = tiered_pair(d.path(), &weed, "aged", 11, "4s");
    let (store, cfg) = (&pair.store, &pair.cfg);
    let only = trimmed(store);
    assert!(only.len() >= 6, "segments left the disk");
    // A reader caches footers: expiry removes them with the objects.
    count(store, Some(cfg), &[]);
    let key = |seq: u64| format!("aged/segments/seg-{seq:012}.pcapng.zst");
    for &q in &only {
        assert_eq!(s3(&weed, "GET", &key(q), None).0, "200");
    }
    // The next writer runs with max_age = 2s: what ends more than 2 s before the newest
    // packet goes from the object store.
    let text = std::fs::read_to_string(cfg).unwrap();
    let aged = d.path().join("aged.toml");
    std::fs::write(&aged, format!("{text}max_age = \"2s\"\n")).unwrap();
    let empty = d.path().join("empty.pcap");
    std::fs::write(&empty, write_pcap_ns(1, 65535, &[])).unwrap();
    let mut args = SMALL.to_vec();
    args.extend(["--config", p(&aged)]);
    import_ok(store, &args, &[p(&empty)]);

    let ledger = std::fs::read_to_string(store.join("segments/ledger")).unwrap();
    let newest = sealed(store).iter().map(|s| s.2).max().unwrap();
    let cutoff = newest - 2_000_000_000;
    let expired: Vec<u64> = ledger
        .lines()
        .filter_map(|l| l.strip_prefix("expired "))
        .map(|s| s.trim().parse().unwrap())
        .collect();
    assert!(
        !expired.is_empty() && expired.len() < only.len(),
        "{ledger}"
    );
    for &q in &only {
        let (_, last) = span_of(store, q);
        let gone = expired.contains(&q);
        assert_eq!(
            gone,
            last < cutoff,
            "segment {q} ends at {last}, cutoff {cutoff}"
        );
        let want = if gone { "404" } else { "200" };
        assert_eq!(s3(&weed, "GET", &key(q), None).0, want, "segment {q}");
        let cached = store.join(format!("index/seg-{q:012}.footer"));
        assert_eq!(cached.exists(), !gone, "segment {q}'s cached footer");
        assert_eq!(
            store.join(format!("index/seg-{q:012}.idx")).exists(),
            !gone,
            "segment {q}'s index"
        );
    }
    let t = &status(store)["tier"];
    assert_eq!(
        t["tiered_only_segments"].as_u64().unwrap() as usize,
        trimmed(store).len() - expired.len(),
        "{t}"
    );

    // A window over what expired: the answers say the packets are gone (exit 3, named).
    let (first, _) = span_of(&pair.reference, 1);
    let over = window(first, Some(cutoff));
    let over = refs(&over);
    let out = run(capsule()
        .args(["query", "--store", p(store), "--config", p(cfg), "--count"])
        .args(&over));
    assert_eq!(out.status.code(), Some(3), "{}", stderr_str(&out));
    assert!(stderr_str(&out).contains("max_age"), "{}", stderr_str(&out));
    for q in [&["flows"][..], &["dscp"]] {
        let out = run(capsule()
            .args(q)
            .args(["--store", p(store), "--config", p(cfg)])
            .args(&over));
        assert_eq!(out.status.code(), Some(3), "{q:?}: {}", stderr_str(&out));
        let text = stdout_str(&out) + &stderr_str(&out);
        assert!(text.contains("max_age"), "{q:?}: {text}");
    }
    // A window after it is whole, and as the reference's; so is a question without a
    // start (what the store holds), as with local retention's horizon.
    let after = window(cutoff, None);
    let after = refs(&after);
    let got = count(store, Some(cfg), &after);
    assert_eq!(
        got["packets"],
        count(&pair.reference, None, &after)["packets"]
    );
    let all = count(store, Some(cfg), &[]);
    assert!(
        all["packets"].as_u64().unwrap() < pair.truth.packets,
        "{all}"
    );
}

/// `capsule segments --json` of `store` (its `[tier]` in `config`): (seq, location).
fn locations(store: &Path, config: &Path) -> Vec<(u64, String)> {
    let out = run_ok(capsule().args([
        "segments",
        "--store",
        p(store),
        "--json",
        "--config",
        p(config),
    ]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("segments --json line");
            (
                v["seq"].as_u64().unwrap(),
                v["location"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The catalog's ledger rows (as one reads them, FINAL): (segment, location).
fn catalog_locations(ch: &common::clickhouse::ClickHouse) -> Vec<(u64, String)> {
    let text = ch
        .sql("SELECT segment, location FROM capsule.segments FINAL ORDER BY segment FORMAT TabSeparated")
        .expect("ClickHouse answers");
    text.lines()
        .map(|l| {
            let (s, loc) = l.split_once('\t').expect("two columns");
            (s.parse().unwrap(), loc.to_string())
        })
        .collect()
}

/// `[tier]` and `[fleet]` together: the catalog's segment ledger (ClickHouse) says where
/// each segment lives, as the store's ledger does, and follows a segment published `local`
/// when a later writer uploads it and trims it; one row per segment as read (FINAL).
#[test]
fn the_fleet_catalog_says_where_each_segment_lives_and_follows_it_into_the_object_store() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let ch = common::clickhouse::ClickHouse::start(&d.join("ch"));
    let weed = Weed::start(&d.join("weed"));
    let fleet = format!("[fleet]\nnode = \"edge\"\nclickhouse = \"{}\"\n", ch.url());
    let fleet_only = d.join("fleet.toml");
    std::fs::write(&fleet_only, &fleet).unwrap();
    let both = tier_config(d, &weed, "where");
    let tier = std::fs::read_to_string(&both).unwrap();
    std::fs::write(&both, format!("{tier}\n{fleet}")).unwrap();
    let (one, two) = (d.join("one.pcap"), d.join("two.pcap"));
    synth(
        &one,
        &d.join("t1.json"),
        31,
        "2s",
        "30M",
        Some("2026-03-01T10:00:00Z"),
    );
    synth(
        &two,
        &d.join("t2.json"),
        32,
        "2s",
        "30M",
        Some("2026-03-01T10:00:10Z"),
    );
    let store = d.join("store");

    // A node without a tier: every segment published `local`.
    import_ok(
        &store,
        &[
            "--block-size",
            "64K",
            "--segment-size",
            "1M",
            "--config",
            p(&fleet_only),
        ],
        &[p(&one)],
    );
    let first = locations(&store, &fleet_only);
    assert!(first.len() >= 3, "{first:?}");
    assert!(first.iter().all(|(_, l)| l == "local"), "{first:?}");
    assert_eq!(catalog_locations(&ch), first);

    // The tier turned on with a small budget: the next import uploads every segment and
    // trims the oldest; its publish re-stages the ledger rows whose location changed.
    let mut args = SMALL.to_vec();
    args.extend(["--config", p(&both)]);
    import_ok(&store, &args, &[p(&two)]);
    let now = locations(&store, &both);
    let moved: Vec<_> = now
        .iter()
        .filter(|(s, l)| first.iter().any(|(f, _)| f == s) && l != "local")
        .collect();
    assert!(
        moved.iter().any(|(_, l)| l == "tiered"),
        "no segment of the first import was trimmed: {now:?}"
    );
    assert_eq!(catalog_locations(&ch), now, "the catalog against the store");

    // `fleet nodes` counts them; publishing again changes nothing.
    let nodes = run_ok(capsule().args(["fleet", "nodes", "--config", p(&fleet_only), "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&nodes.stdout).unwrap();
    let n = &v["nodes"][0];
    let count = |w: &str| now.iter().filter(|(_, l)| l == w).count() as u64;
    assert_eq!(n["tiered_segments"].as_u64(), Some(count("tiered")), "{v}");
    assert_eq!(n["both_segments"].as_u64(), Some(count("both")), "{v}");
    // A fleet packet plan names the candidates the node reads from its object store.
    let out = run_ok(capsule().args([
        "query",
        "--fleet",
        "--config",
        p(&fleet_only),
        "--explain",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = &v["nodes"][0];
    let listed = |k: &str| -> Vec<u64> {
        plan[k]
            .as_array()
            .unwrap_or_else(|| panic!("{k} in {v}"))
            .iter()
            .map(|s| s.as_u64().unwrap())
            .collect()
    };
    let tiered: Vec<u64> = now
        .iter()
        .filter(|(s, l)| l == "tiered" && listed("segments").contains(s))
        .map(|(s, _)| *s)
        .collect();
    assert!(!tiered.is_empty(), "{v}");
    assert_eq!(listed("tiered"), tiered, "{v}");
    let rows = ch.number("SELECT count() FROM capsule.segments");
    let out = run_ok(capsule().args([
        "fleet",
        "publish",
        "--store",
        p(&store),
        "--config",
        p(&both),
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["staged"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(ch.number("SELECT count() FROM capsule.segments"), rows);
    assert_eq!(catalog_locations(&ch), now);
}

/// `capsule ARGS` with the store's directory seen read-only at `ro` (a read-only bind mount
/// in a mount namespace of the command's own: not even root can write the store through
/// it) and `$XDG_CACHE_HOME` at `cache`.
fn read_only(store: &Path, ro: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    need_tool("unshare");
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$1\" \"$2\" && mount -o remount,bind,ro \"$2\" && shift 2 && exec \"$@\"")
        .args(["sh", p(store), p(ro)])
        .arg(capsule().get_program())
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("CACHE_DIRECTORY")
        .env_remove("CAPSULE_LOG");
    run(&mut cmd)
}

/// `query --count --json` over the store read-only (see [`read_only`]), with `config`.
fn count_read_only(
    store: &Path,
    ro: &Path,
    cache: &Path,
    config: &Path,
    filter: &[&str],
) -> serde_json::Value {
    let mut args = vec![
        "query",
        "--store",
        p(ro),
        "--count",
        "--json",
        "--config",
        p(config),
    ];
    args.extend(filter);
    let out = read_only(store, ro, cache, &args);
    assert!(
        out.status.success(),
        "query over the read-only store: {}\n{}",
        out.status,
        stderr_str(&out)
    );
    serde_json::from_slice(&out.stdout).expect("query --count --json")
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_reader_that_cannot_write_the_store_keeps_what_it_fetched_in_its_own_cache() {
    let d = tempfile::tempdir().unwrap();
    let weed = Weed::start(&d.path().join("weed"));
    let pair = tiered_pair(d.path(), &weed, "readonly", 12, "3s");
    let (store, cfg) = (&pair.store, &pair.cfg);
    let only = trimmed(store);
    assert!(only.len() >= 4, "segments left the disk");
    // A store restored without one trimmed segment's side index: the reader fetches it.
    let lost = only[1];
    let idx = store.join(format!("index/seg-{lost:012}.idx"));
    let lost_index = std::fs::read(&idx).unwrap();
    std::fs::remove_file(&idx).unwrap();
    let ro = d.path().join("ro");
    let cache = d.path().join("cache");
    std::fs::create_dir_all(&ro).unwrap();
    let before = files_under(&store.join("index"));

    // Two questions over the trimmed segment's window, as the reference answers them: the
    // second fetches only its blocks (no footer, no index again).
    let (a, b) = span_of(store, lost);
    let w = window(a, Some(b));
    let w = refs(&w);
    let want = count(&pair.reference, None, &w);
    assert!(want["packets"].as_u64().unwrap() > 0);
    let first = count_read_only(store, &ro, &cache, cfg, &w);
    let second = count_read_only(store, &ro, &cache, cfg, &w);
    for got in [&first, &second] {
        assert_eq!(got["packets"], want["packets"], "{got}");
        assert_eq!(got["bytes"], want["bytes"], "{got}");
    }
    let (f1, f2) = (
        first["tier_fetched_bytes"].as_u64().unwrap(),
        second["tier_fetched_bytes"].as_u64().unwrap(),
    );
    let index_len = lost_index.len() as u64;
    eprintln!(
        "read-only reader, {} trimmed segments: first question fetched {f1} B, second {f2} B",
        only.len()
    );
    // Each trimmed segment's opening costs at least 4 KiB the first time; the index too.
    assert!(
        f1 >= f2 + index_len + 4096 * only.len() as u64,
        "first {f1} bytes fetched, second {f2}: the second fetched the footers again"
    );
    // The store is as it was; what was fetched is under the reader's cache, by object.
    assert_eq!(
        files_under(&store.join("index")),
        before,
        "nothing written to the store"
    );
    let kept = files_under(&cache.join("capsule"));
    for &q in &only {
        let footer = format!("seg-{q:012}.footer");
        assert!(
            kept.iter().any(|f| f.ends_with(&footer)),
            "segment {q}'s footer kept in the reader's cache: {kept:?}"
        );
    }
    let cached_idx = kept
        .iter()
        .find(|f| f.ends_with(format!("seg-{lost:012}.idx")))
        .unwrap_or_else(|| panic!("the fetched index kept in the reader's cache: {kept:?}"));
    assert!(
        std::fs::read(cached_idx).unwrap() == lost_index,
        "the cached index is the one uploaded with the segment"
    );

    // A window in the newest segment (local): nothing fetched at all now.
    let newest = sealed(store).iter().map(|s| s.0).max().unwrap();
    let (a, _) = span_of(store, newest);
    let w = window(a, Some(a + 1_000_000));
    let got = count_read_only(store, &ro, &cache, cfg, &refs(&w));
    assert_eq!(got["tier_fetched_bytes"], 0, "{got}");

    // A damaged cached footer costs its fetch again, never a wrong answer.
    let footer = kept
        .iter()
        .find(|f| f.ends_with(format!("seg-{lost:012}.footer")))
        .unwrap();
    std::fs::write(footer, b"not a footer").unwrap();
    let (a, b) = span_of(store, lost);
    let w = window(a, Some(b));
    let got = count_read_only(store, &ro, &cache, cfg, &refs(&w));
    assert_eq!(got["packets"], want["packets"], "{got}");
    assert!(
        got["tier_fetched_bytes"].as_u64().unwrap() >= f2 + 4096,
        "{got}"
    );

    // `[tier] cache_dir` says where instead.
    let mine = d.path().join("mine");
    let text = std::fs::read_to_string(cfg).unwrap();
    let cfg2 = d.path().join("cache-dir.toml");
    std::fs::write(&cfg2, format!("{text}cache_dir = \"{}\"\n", p(&mine))).unwrap();
    let got = count_read_only(store, &ro, &cache, &cfg2, &refs(&w));
    assert_eq!(got["packets"], want["packets"], "{got}");
    assert!(files_under(&mine)
        .iter()
        .any(|f| f.ends_with(format!("seg-{lost:012}.idx"))));
}

/// The ledger's `tiered SEQ BYTES ETAG` lines: segment -> (bytes, ETag).
fn tiered_lines(store: &Path) -> BTreeMap<u64, (u64, String)> {
    std::fs::read_to_string(store.join("segments/ledger"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("tiered "))
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (
                w[0].parse().unwrap(),
                (w[1].parse().unwrap(), w[2].to_string()),
            )
        })
        .collect()
}

/// The uploader against the compactor, made deterministic: a compaction of a segment is
/// committed (`capsule compact`, the same rename the background compactor makes) after
/// the segment's objects were sent and before the upload is recorded. The upload is not
/// recorded for the old bytes (its objects are deleted); the next pass sends the compacted
/// file, and the ledger's line then names exactly what the object holds, which is the
/// local file.
#[test]
fn a_compaction_committed_while_a_segment_uploads_is_sent_again_and_the_ledger_matches_the_object()
{
    let d = tempfile::tempdir().unwrap();
    let weed = Weed::start(&d.path().join("weed"));
    let pcap = d.path().join("in.pcap");
    synth(&pcap, &d.path().join("truth.json"), 13, "2s", "30M", None);
    let store = d.path().join("store");
    // Stored blocks (what live capture writes when short of CPU): every segment compacts.
    import_ok(
        &store,
        &[
            "--level",
            "store",
            "--block-size",
            "64K",
            "--segment-size",
            "1M",
        ],
        &[p(&pcap)],
    );
    let cfg = tier_config(d.path(), &weed, "race");
    let config = capsule_config::Config::load(&cfg).unwrap();
    let client = capsule_tier::Client::for_uploads(config.tier().unwrap()).unwrap();
    let opened = capsule_store::Store::open(&store).unwrap();
    let seg = |seq: u64| store.join(format!("segments/seg-{seq:012}.pcapng.zst"));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut steps = Vec::new();
    let mut raced = None;
    let first = capsule_tier::drain_observed(&client, &opened, &stop, |step| {
        steps.push(step);
        if let (capsule_tier::Step::Sent(seq), None) = (step, raced) {
            let before = std::fs::read(seg(seq)).unwrap();
            run_ok(capsule().args(["compact", "--store", p(&store), "--level", "3"]));
            let after = std::fs::read(seg(seq)).unwrap();
            assert_ne!(before, after, "segment {seq} was compacted");
            raced = Some(seq);
        }
    })
    .unwrap();
    let raced = raced.expect("a segment was sent");
    assert!(
        steps.contains(&capsule_tier::Step::Changed(raced)),
        "the upload of segment {raced} went on as if nothing changed: {steps:?}"
    );
    assert!(
        !tiered_lines(&store).contains_key(&raced),
        "segment {raced} recorded as tiered with the bytes it had before its compaction"
    );
    assert!(first.left >= 1, "{first:?}");
    // The next pass sends what is there now; every line names what its object holds.
    let second = capsule_tier::drain(&client, &opened, &stop, || {}).unwrap();
    assert_eq!(second.left, 0, "{second:?}");
    let lines = tiered_lines(&store);
    assert!(lines.contains_key(&raced));
    for (seq, (bytes, etag)) in &lines {
        let local = std::fs::read(seg(*seq)).unwrap();
        let (code, object) = s3(
            &weed,
            "GET",
            &format!("race/segments/seg-{seq:012}.pcapng.zst"),
            None,
        );
        assert_eq!(code, "200");
        assert!(
            object == local,
            "segment {seq}: the object is not the local file"
        );
        assert_eq!(
            *bytes,
            local.len() as u64,
            "segment {seq}'s recorded length"
        );
        let md5: String = md5_hex(&local);
        assert_eq!(etag.trim_matches('"'), md5, "segment {seq}'s recorded ETag");
    }
    // And the store's own check agrees (size and ETag of each object, its blocks).
    let (code, v, err) = verify(&store, &["--config", p(&cfg), "--deep"]);
    assert_eq!(code, Some(0), "{v}\n{err}");
}

/// The hex MD5 of `b` (a single-part object's ETag).
fn md5_hex(b: &[u8]) -> String {
    let out = Command::new("md5sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b)?;
            c.wait_with_output()
        })
        .expect("run md5sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// Flow rows per segment the catalog holds for `node` (as one reads them, FINAL).
fn catalog_flows(ch: &common::clickhouse::ClickHouse, node: &str) -> Vec<(u64, u64)> {
    let text = ch
        .sql(&format!(
            "SELECT segment, count() FROM capsule.flows FINAL WHERE node = '{node}' \
             GROUP BY segment ORDER BY segment FORMAT TabSeparated"
        ))
        .expect("ClickHouse answers");
    text.lines()
        .map(|l| {
            let (s, n) = l.split_once('\t').expect("two columns");
            (s.parse().unwrap(), n.parse().unwrap())
        })
        .collect()
}

/// `serve` with `[tier]` and `[fleet]` publishing a store restored without the side indexes
/// of its segments that live only in the object store: its publisher fetches them from the
/// bucket (a few a pass) and every segment's flows reach ClickHouse, as a publish of a copy
/// of the store made before its indexes were lost puts them there.
#[test]
fn serve_publishes_the_flows_of_trimmed_segments_whose_index_it_fetches_from_the_bucket() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let ch = common::clickhouse::ClickHouse::start(&d.join("ch"));
    let weed = Weed::start(&d.join("weed"));
    let pair = tiered_pair(d, &weed, "publish", 14, "3s");
    let store = &pair.store;
    let only = trimmed(store);
    assert!(only.len() >= 4, "segments left the disk");
    // The reference: a copy of the store with every index, published as another node.
    let copy = d.join("copy");
    run_ok(Command::new("cp").args(["-a", p(store), p(&copy)]));
    let idx = |seq: u64| store.join(format!("index/seg-{seq:012}.idx"));
    for &q in &only {
        std::fs::remove_file(idx(q)).unwrap();
    }
    let fleet = |node: &str| {
        format!(
            "[fleet]\nnode = \"{node}\"\nclickhouse = \"{}\"\n",
            ch.url()
        )
    };
    let reference = d.join("ref.toml");
    std::fs::write(&reference, fleet("ref")).unwrap();
    run_ok(capsule().args([
        "fleet",
        "publish",
        "--store",
        p(&copy),
        "--config",
        p(&reference),
    ]));
    let want = catalog_flows(&ch, "ref");
    assert!(
        only.iter().all(|q| want.iter().any(|(s, _)| s == q)),
        "{want:?}"
    );
    let both = d.join("both.toml");
    let tier = std::fs::read_to_string(&pair.cfg).unwrap();
    std::fs::write(&both, format!("{tier}\n{}", fleet("edge"))).unwrap();

    let tokens = d.join("tokens");
    common::serve::add_token(&tokens, "analyst");
    std::fs::create_dir_all(d.join("srv")).unwrap();
    let _server = common::serve::start(&d.join("srv"), store, &tokens, &["--config", p(&both)]);
    let t0 = Instant::now();
    loop {
        let got = catalog_flows(&ch, "edge");
        if got == want {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "the node's flows in the catalog {got:?}, the reference's {want:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Fetched into the store (the server can write it), so never fetched again.
    for &q in &only {
        assert!(idx(q).exists(), "segment {q}'s index kept");
    }
}
