//! Live alerts (issue 13): `capsule capture --config FILE` with `[alerts]` sinks on one end
//! of a veth pair between two network namespaces made here (named with the test's PID, and
//! removed), while synth's scenario is replayed from the other end with tcpreplay. The
//! JSON-lines file, a webhook (an HTTP server of the test, listening on the loopback of the
//! capture's namespace), a syslog UDP listener there and a syslog unix socket each receive
//! the exfil's egress alert and each rogue EF host's DSCP alert engaged exactly once, and
//! each released once after its traffic left the look-back window; every webhook request's
//! HMAC signature is checked. Dead sinks (a missing directory, a webhook that never
//! answers) cost no packet and their events are counted as undelivered per sink by
//! `capsule status`. Needs root.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::netns::*;
use common::*;
use hmac::{Hmac, Mac};
use serde_json::Value;

/// The scenario's policy and `[alerts]` thresholds, with `sinks` (lines of `[alerts]`).
fn config(dir: &Path, truth: &Value, sinks: &str) -> std::path::PathBuf {
    let facts = &truth["facts"];
    let path = dir.join("live.toml");
    std::fs::write(
        &path,
        format!(
            "[groups]\nvoice = [\"{}\"]\nmodel-store = [\"{}\"]\n\n[dscp]\nef = [\"voice\"]\n\n\
             [egress]\nmodel-store = [\"voice\"]\n\n\
             [alerts]\negress_bytes = \"1M\"\negress_window = \"10s\"\n\
             straggler_interval = \"1s\"\nlive_every = \"1s\"\nrelease_after = \"1s\"\n{sinks}\
             disabled = [\"off_hours\", \"straggler\", \"group_pair\", \
             \"tcp_retransmissions\", \"tcp_zero_window\"]\n",
            facts["ef_allow_list"][0].as_str().unwrap(),
            facts["exfil"]["src"].as_str().unwrap(),
        ),
    )
    .unwrap();
    path
}

/// A request the test's webhook server received.
#[derive(Debug, Clone)]
struct Request {
    line: String,
    headers: BTreeMap<String, String>,
    body: String,
}

/// Reads one HTTP/1.1 request (head, then `Content-Length` bytes of body).
fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let n: usize = headers.get("content-length")?.parse().ok()?;
    let mut body = vec![0; n];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        line: line.trim_end().to_string(),
        headers,
        body: String::from_utf8(body).ok()?,
    })
}

/// The test's webhook: answers 200 to each request and keeps it; `answer: false` takes the
/// connection and never answers (a hung receiver).
fn webhook_server(listener: TcpListener, answer: bool) -> Arc<Mutex<Vec<Request>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            if let Some(req) = read_request(&stream) {
                g.lock().unwrap().push(req);
            }
            if answer {
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            } else {
                held.push(stream);
            }
        }
    });
    got
}

/// Collects the datagrams of a socket (UDP or unix) as text.
fn collect(
    recv: impl Fn(&mut [u8]) -> std::io::Result<usize> + Send + 'static,
) -> Arc<Mutex<Vec<String>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = recv(&mut buf) {
            g.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    });
    got
}

/// `sha256=HEX` of HMAC-SHA256(key, "TIMESTAMP.BODY"), as docs/alerts.md says to verify.
fn expected_signature(key: &[u8], ts: &str, body: &str) -> String {
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).unwrap();
    mac.update(format!("{ts}.{body}").as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A syslog message `<PRI>1 TIMESTAMP HOST capsule PID MSGID - JSON` taken apart:
/// (PRI, MSGID, JSON).
fn syslog_parts(m: &str) -> (u32, String, String) {
    let (pri, rest) = m
        .strip_prefix('<')
        .and_then(|r| r.split_once(">1 "))
        .unwrap_or_else(|| panic!("not RFC 5424: {m}"));
    let f: Vec<&str> = rest.splitn(7, ' ').collect();
    assert_eq!(f.len(), 7, "{m}");
    let ts = f[0];
    assert!(
        ts.ends_with('Z') && ts.len() == "2026-11-30T02:00:05.123456Z".len(),
        "{m}"
    );
    assert!(!f[1].is_empty() && f[1].is_ascii(), "{m}");
    assert_eq!(f[2], "capsule", "{m}");
    assert!(f[3].parse::<u32>().is_ok(), "{m}");
    assert_eq!(f[5], "-", "{m}");
    (pri.parse().unwrap(), f[4].to_string(), f[6].to_string())
}

fn setup(name: &str) -> (std::path::PathBuf, std::path::PathBuf, Value) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("synth.pcap");
    let truth = dir.join("truth.json");
    synth(&pcap, &truth, 3, "4s", "50M", None);
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    (dir, pcap, truth)
}

/// The JSON-lines file's events, one object a line.
fn file_events(sink: &Path) -> Vec<String> {
    std::fs::read_to_string(sink)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn live_alerts_engage_once_each_and_release_into_every_sink() {
    let (dir, pcap, truth) = setup("alerts-live");
    let sink = dir.join("alerts.jsonl");
    let link = Link::new("ok");
    let (http, udp) = link.in_capture_ns(|| {
        (
            TcpListener::bind("127.0.0.1:0").unwrap(),
            UdpSocket::bind("127.0.0.1:0").unwrap(),
        )
    });
    let http_port = http.local_addr().unwrap().port();
    let udp_port = udp.local_addr().unwrap().port();
    let hooks = webhook_server(http, true);
    let udp_got = collect(move |b| udp.recv(b));
    let sock_path = dir.join("log.sock");
    let _ = std::fs::remove_file(&sock_path);
    let unix = UnixDatagram::bind(&sock_path).unwrap();
    let unix_got = collect(move |b| unix.recv(b));
    let key = "a webhook key, not a password";
    let key_file = dir.join("hook.key");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    let cfg = config(
        &dir,
        &truth,
        &format!(
            "live_file = \"{}\"\nwebhook_url = \"http://127.0.0.1:{http_port}/hooks/capsule\"\n\
             webhook_secret_file = \"{}\"\nsyslog_udp = \"127.0.0.1:{udp_port}\"\n\
             syslog_socket = \"{}\"\nsyslog_facility = \"local3\"\n",
            p(&sink),
            p(&key_file),
            p(&sock_path)
        ),
    );
    let store = dir.join("store");
    let cap = link.capture(&store, &["--config", p(&cfg)]);
    link.send(&pcap);
    // Engaged within a few seconds of the traffic; released once it left the 10 s window;
    // every sink has every event.
    let t0 = Instant::now();
    let lines = loop {
        let lines = file_events(&sink);
        let events: Vec<Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
            .collect();
        let engaged = events.iter().filter(|e| e["state"] == "engaged").count();
        let released = events.iter().filter(|e| e["state"] == "released").count();
        let n = lines.len();
        if engaged >= 4
            && released >= engaged
            && hooks.lock().unwrap().len() >= n
            && udp_got.lock().unwrap().len() >= n
            && unix_got.lock().unwrap().len() >= n
        {
            break lines;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "events so far: {events:#?}; webhook {}, syslog udp {}, unix {}",
            hooks.lock().unwrap().len(),
            udp_got.lock().unwrap().len(),
            unix_got.lock().unwrap().len()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    stop(cap);
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut per: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &events {
        per.entry(e["key"].as_str().unwrap().to_string())
            .or_default()
            .push(e["state"].as_str().unwrap().to_string());
    }
    // Every key engaged once, then released once (suppression: 1 h by default).
    for (k, states) in &per {
        assert_eq!(states, &["engaged", "released"], "{k}");
    }
    let facts = &truth["facts"];
    let dscp: BTreeSet<String> = per
        .keys()
        .filter_map(|k| k.strip_prefix("dscp|").map(str::to_string))
        .collect();
    let rogue: BTreeSet<String> = facts["rogue_ef_hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_string())
        .collect();
    assert_eq!(dscp, rogue);
    let egress: Vec<&Value> = events
        .iter()
        .filter(|e| e["state"] == "engaged" && e["alert"]["rule"] == "egress")
        .collect();
    assert_eq!(egress.len(), 1, "{egress:#?}");
    assert_eq!(
        egress[0]["alert"]["entity"]["hosts"][0],
        facts["exfil"]["src"]
    );
    assert!(egress[0]["alert"]["query"]
        .as_str()
        .unwrap()
        .starts_with("capsule query"));

    // The webhook got each event once, in order, each signed with the key.
    let hooks = hooks.lock().unwrap().clone();
    let bodies: Vec<&str> = hooks.iter().map(|r| r.body.as_str()).collect();
    assert_eq!(bodies, lines, "the webhook's bodies are the file's lines");
    let mut ids = BTreeSet::new();
    for r in &hooks {
        assert_eq!(r.line, "POST /hooks/capsule HTTP/1.1");
        assert_eq!(r.headers["content-type"], "application/json");
        assert_eq!(r.headers["host"], format!("127.0.0.1:{http_port}"));
        let ts = &r.headers["x-capsule-timestamp"];
        let t: u64 = ts.parse().unwrap();
        assert!(t.abs_diff(now_s()) < 120, "{ts}");
        assert_eq!(
            r.headers["x-capsule-signature"],
            expected_signature(key.as_bytes(), ts, &r.body),
            "{r:?}"
        );
        // A wrong key or another timestamp does not verify.
        assert_ne!(
            r.headers["x-capsule-signature"],
            expected_signature(b"another key", ts, &r.body)
        );
        assert_ne!(
            r.headers["x-capsule-signature"],
            expected_signature(key.as_bytes(), &(t + 1).to_string(), &r.body)
        );
        let body: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(
            r.headers["x-capsule-event"],
            body["state"].as_str().unwrap()
        );
        assert!(ids.insert(r.headers["x-capsule-delivery"].clone()), "{r:?}");
    }

    // Syslog, over UDP and the unix socket: the same messages, local3 (19), severity from
    // the alert (egress high: err 3, dscp medium: warning 4, released: info 6).
    let udp = udp_got.lock().unwrap().clone();
    let unix = unix_got.lock().unwrap().clone();
    assert_eq!(udp, unix);
    assert_eq!(udp.len(), lines.len());
    for (m, line) in udp.iter().zip(&lines) {
        let (pri, msgid, json) = syslog_parts(m);
        assert_eq!(&json, line, "{m}");
        let e: Value = serde_json::from_str(&json).unwrap();
        let rule = e["key"].as_str().unwrap().split('|').next().unwrap();
        assert_eq!(msgid, rule, "{m}");
        let sev = match (e["state"].as_str().unwrap(), rule) {
            ("released", _) => 6,
            (_, "egress") => 3,
            (_, "dscp") => 4,
            other => panic!("{other:?}"),
        };
        assert_eq!(pri, 19 * 8 + sev, "{m}");
    }

    // capsule status counts what each sink sent.
    let st: Value = serde_json::from_slice(
        &run_ok(capsule().args(["status", "--store", p(&store), "--json"])).stdout,
    )
    .unwrap();
    let n = events.len() as u64;
    assert_eq!(st["alerts"]["sent"].as_u64().unwrap(), 4 * n, "{st:#}");
    assert_eq!(st["alerts"]["undelivered"], 0);
    let sinks: BTreeMap<&str, &Value> = st["alerts"]["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["sink"].as_str().unwrap(), s))
        .collect();
    assert_eq!(
        sinks.keys().copied().collect::<Vec<_>>(),
        ["file", "syslog-udp", "syslog-unix", "webhook"]
    );
    for (name, s) in &sinks {
        assert_eq!(s["sent"].as_u64().unwrap(), n, "{name}");
        assert_eq!(s["undelivered"], 0, "{name}");
        assert!(s["last_error"].is_null(), "{name}: {s}");
    }
    assert_eq!(
        sinks["webhook"]["target"],
        format!("http://127.0.0.1:{http_port}/hooks/capsule")
    );
    let text = stdout_str(&run_ok(capsule().env("COLUMNS", "80").args([
        "status",
        "--store",
        p(&store),
    ])));
    assert!(
        text.lines()
            .any(|l| l.starts_with("  alert sink webhook http://127.0.0.1:")),
        "{text}"
    );
    assert!(
        text.lines()
            .filter(|l| l.contains("alert"))
            .all(|l| l.chars().count() <= 80),
        "{text}"
    );
}

#[test]
fn dead_sinks_cost_no_packet_and_are_counted_undelivered() {
    let (dir, pcap, truth) = setup("alerts-live-dead");
    let sink = dir.join("no-such-dir").join("alerts.jsonl");
    let link = Link::new("dead");
    // A webhook that takes the connection and the request and never answers.
    let http = link.in_capture_ns(|| TcpListener::bind("127.0.0.1:0").unwrap());
    let http_port = http.local_addr().unwrap().port();
    let hung = webhook_server(http, false);
    let cfg = config(
        &dir,
        &truth,
        &format!(
            "live_file = \"{}\"\nwebhook_url = \"http://127.0.0.1:{http_port}/\"\n\
             webhook_secret = \"k\"\nwebhook_timeout = \"500ms\"\nwebhook_retries = 1\n",
            p(&sink)
        ),
    );
    let store = dir.join("store");
    let cap = link.capture(&store, &["--config", p(&cfg)]);
    link.send(&pcap);
    std::thread::sleep(Duration::from_secs(3));
    let t0 = Instant::now();
    let summary = stop(cap);
    // Stopping waits for the sinks at most 5 s (the drain) and one attempt.
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    let sent = truth["packets"].as_u64().unwrap();
    assert!(
        summary.starts_with(&format!("captured {sent} packets")) && summary.contains("dropped 0"),
        "{summary}"
    );
    let st: Value = serde_json::from_slice(
        &run_ok(capsule().args(["status", "--store", p(&store), "--json"])).stdout,
    )
    .unwrap();
    assert_eq!(st["capture"]["drops"], 0, "{st:#}");
    assert_eq!(st["capture"]["packets"].as_u64().unwrap(), sent, "{st:#}");
    let sinks: BTreeMap<&str, &Value> = st["alerts"]["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["sink"].as_str().unwrap(), s))
        .collect();
    let (file, hook) = (sinks["file"], sinks["webhook"]);
    // Every event was raised (the file counts them all as undelivered) and none reached
    // either sink; the webhook was tried.
    let events = file["undelivered"].as_u64().unwrap();
    assert!(events >= 4, "{st:#}");
    assert_eq!(file["sent"], 0);
    assert_eq!(hook["sent"], 0);
    assert_eq!(hook["undelivered"].as_u64().unwrap(), events, "{st:#}");
    assert_eq!(st["alerts"]["undelivered"].as_u64().unwrap(), 2 * events);
    assert!(
        file["last_error"].as_str().unwrap().contains("no-such-dir"),
        "{file}"
    );
    let err = hook["last_error"].as_str().unwrap();
    assert!(
        err.contains("no answer within") || err.contains("capture stopped"),
        "{err}"
    );
    assert!(
        !hung.lock().unwrap().is_empty(),
        "the webhook was never tried"
    );
    let text = stdout_str(&run_ok(capsule().args(["status", "--store", p(&store)])));
    let line = text
        .lines()
        .find(|l| l.starts_with("live alerts:"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("0 event(s) sent"), "{line}");
    assert!(
        text.contains(&format!(
            "alert sink webhook http://127.0.0.1:{http_port}/: 0 sent, {events} undelivered"
        )),
        "{text}"
    );
}

/// A capture with docs/examples' config and a `live_file` sink on a port that carries
/// nothing: the store stays empty, and live alerts (stragglers among them) must run over it
/// for 30 s without a crash; SIGTERM then ends the capture with exit 0 and no alert sent.
/// Before, capture died within 2 s (an empty store's window ran from 1970 to 2554 and
/// stragglers allocated a bucket per second of it): under systemd an idle port crash-looped.
#[test]
fn an_idle_port_with_the_example_config_keeps_capturing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let link = Link::new("id");
    let sink = dir.join("alerts.jsonl");
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/examples/capsule.toml"
    ))
    .unwrap();
    let cfg = dir.join("capsule.toml");
    // The example's [alerts] section, with a live sink and the live rules evaluated every
    // second (the shortest look-back turn).
    let text = example.replacen(
        "[alerts]",
        &format!(
            "[alerts]\nlive_file = \"{}\"\nlive_every = \"1s\"",
            p(&sink)
        ),
        1,
    );
    assert_ne!(
        text, example,
        "docs/examples/capsule.toml has no [alerts] section"
    );
    std::fs::write(&cfg, text).unwrap();
    let store = dir.join("store");
    let cap = link.capture(&store, &["--config", p(&cfg)]);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_secs(1));
        let st = run_ok(capsule().args(["status", "--store", p(&store), "--json"]));
        let v: Value = serde_json::from_str(stdout_str(&st).trim()).unwrap();
        assert_eq!(
            v["live"],
            true,
            "capture on an idle port stopped after {:?}: {v}",
            t0.elapsed()
        );
    }
    let summary = stop(cap);
    assert!(summary.contains("captured 0 packets"), "{summary}");
    assert!(
        file_events(&sink).is_empty(),
        "alerts from an empty store: {:?}",
        file_events(&sink)
    );
}

/// A whole Ethernet/IPv4/UDP frame of `len` bytes (tcpreplay sends what is captured):
/// `planted::udp`'s headers, from port 8000 to 9000, padded with zeros.
fn udp_frame(src: [u8; 4], dst: [u8; 4], dscp: u8, len: usize) -> Vec<u8> {
    let mut f = common::planted::udp(src, dst, dscp, (8000, 9000), len as u64);
    f.resize(len, 0);
    f
}

/// Issue 33: the millisecond rules and the group expectations evaluated live. Replayed at
/// 100 Mbit/s onto a link the config states as 100M: an EF run from group `backup` (above
/// half the link, and above backup's 20M-per-10-ms ceiling), 24 senders to one address in
/// a fraction of a millisecond, and group `night` sending outside its hours (set two hours
/// ahead of now). Each engages exactly once; nothing else does.
#[test]
fn live_millisecond_rules_and_expectations_engage_where_planted() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("alerts-live-ms");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut packets = Vec::new();
    let mut t = 1_000_000_000u64;
    let mut push = |f: Vec<u8>| {
        t += 10_000;
        packets.push((t, f.len() as u32, f));
    };
    for _ in 0..300 {
        push(udp_frame([10, 50, 0, 1], [10, 50, 0, 2], 0, 1000));
    }
    for _ in 0..400 {
        push(udp_frame([10, 77, 0, 1], [10, 77, 0, 2], 46, 1514));
    }
    for s in 1..=24u8 {
        push(udp_frame([10, 88, 0, s], [10, 88, 1, 1], 0, 100));
    }
    for _ in 0..20 {
        push(udp_frame([10, 66, 0, 1], [10, 66, 1, 1], 0, 500));
    }
    for _ in 0..300 {
        push(udp_frame([10, 50, 0, 1], [10, 50, 0, 2], 0, 1000));
    }
    let pcap = dir.join("planted.pcap");
    std::fs::write(&pcap, write_pcap_ns(1, 65535, &packets)).unwrap();
    let sink = dir.join("alerts.jsonl");
    let h = now_s() / 3600 % 24;
    let cfg = dir.join("ms.toml");
    std::fs::write(
        &cfg,
        format!(
            "[links]\nveth = \"100M\"\n\n[groups]\nbackup = [\"10.77.0.0/24\"]\n\
             night = [\"10.66.0.0/24\"]\nquiet = [\"10.88.0.0/24\"]\n\n\
             [expect.backup]\nmax_rate = \"20M\"\nper = \"10ms\"\nhours = \"00:00-24:00\"\n\n\
             [expect.night]\nhours = \"{:02}:00-{:02}:00\"\n\n\
             [expect.quiet]\nmax_rate = \"10M\"\nper = \"1s\"\n\n\
             [alerts]\nef_share = 0.5\nef_share_for = \"1ms\"\nincast_senders = 12\n\
             live_every = \"1s\"\nlive_file = \"{}\"\n\
             disabled = [\"egress\", \"off_hours\", \"dscp\", \"group_pair\", \"straggler\", \
             \"tcp_retransmissions\", \"tcp_zero_window\"]\n",
            (h + 2) % 24,
            (h + 4) % 24,
            p(&sink)
        ),
    )
    .unwrap();
    let link = Link::new("ms");
    let store = dir.join("store");
    let cap = link.capture(&store, &["--config", p(&cfg)]);
    link.send(&pcap);
    let want: BTreeSet<&str> = [
        "ef_share|ef",
        "incast|10.88.1.1",
        "rate_ceiling|backup",
        "active_hours|night",
    ]
    .into();
    let t0 = Instant::now();
    let events: Vec<Value> = loop {
        let events: Vec<Value> = file_events(&sink)
            .iter()
            .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
            .collect();
        let engaged: BTreeSet<&str> = events
            .iter()
            .filter(|e| e["state"] == "engaged")
            .map(|e| e["key"].as_str().unwrap())
            .collect();
        if engaged.is_superset(&want) {
            // One more evaluation: a late extra alert would show.
            std::thread::sleep(Duration::from_secs(2));
            break file_events(&sink)
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "events so far: {events:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    stop(cap);
    let engaged: Vec<&Value> = events.iter().filter(|e| e["state"] == "engaged").collect();
    let keys: Vec<&str> = engaged.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), want.len(), "each once, nothing else: {keys:?}");
    assert_eq!(keys.iter().copied().collect::<BTreeSet<_>>(), want);
    let alert = |k: &str| &engaged.iter().find(|e| e["key"] == k).unwrap()["alert"];
    let x = &alert("incast|10.88.1.1")["figures"];
    assert!(x["senders"].as_u64().unwrap() >= 12, "{x}");
    assert_eq!(x["window_ms"], 1);
    let x = &alert("active_hours|night")["figures"];
    assert_eq!(
        (x["bytes"].as_u64(), x["packets"].as_u64()),
        (Some(10_000), Some(20)),
        "{x}"
    );
    let x = &alert("rate_ceiling|backup")["figures"];
    assert_eq!(
        (x["proven"].as_bool(), x["per_ms"].as_u64()),
        (Some(true), Some(10)),
        "{x}"
    );
    let x = &alert("ef_share|ef")["figures"];
    assert_eq!(x["threshold_bits_per_second"], 50_000_000u64, "{x}");
    assert!(x["window_start"].as_str().unwrap().ends_with('Z'));
}
