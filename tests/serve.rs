//! `capsule serve` end to end: a CA and a server certificate made with the openssl tool at
//! test time, the server started on 127.0.0.1:0, and pulls with curl over HTTPS. Answers
//! must be byte-identical to the local commands'; refusals, limits and disconnects must
//! show in the status, the body and the audit log.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::serve::*;
use common::*;

/// A store of synthetic traffic (2 s at `rate`), and the pcap it was made from.
fn make_store(dir: &Path, rate: &str) -> PathBuf {
    let pcap = dir.join("in.pcap");
    synth(&pcap, &dir.join("truth.json"), 7, "2s", rate, None);
    let store = dir.join("store");
    import_ok(&store, &[], &[p(&pcap)]);
    store
}

/// What one curl got: the HTTP status (0 for none), the body, and curl's exit status.
struct Got {
    status: u16,
    body: Vec<u8>,
    curl_exit: i32,
}

impl Server {
    fn curl_cmd(&self, path: &str, token: Option<&str>, out: &Path) -> Command {
        let mut c = Command::new(need_tool("curl"));
        c.args([
            "-sS",
            "--cacert",
            p(&self.ca),
            "-o",
            p(out),
            "-w",
            "%{http_code}",
        ]);
        if let Some(t) = token {
            c.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        c.arg(self.url(path));
        c
    }

    fn get(&self, path: &str, token: Option<&str>) -> Got {
        let out = self.dir.join(format!(
            "got-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let o = run(&mut self.curl_cmd(path, token, &out));
        let body = std::fs::read(&out).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        Got {
            status: stdout_str(&o).trim().parse().unwrap_or(0),
            body,
            curl_exit: o.status.code().unwrap_or(-1),
        }
    }
}

fn error_of(g: &Got) -> String {
    let v: serde_json::Value = serde_json::from_slice(&g.body).unwrap_or_else(|_| {
        panic!(
            "expected a JSON error body, found {:?}",
            String::from_utf8_lossy(&g.body)
        )
    });
    let obj = v.as_object().expect("an object");
    assert_eq!(obj.len(), 1, "only the error is returned: {v}");
    v["error"].as_str().expect("error is a string").to_string()
}

#[test]
fn packets_are_byte_identical_to_local_query_in_pcap_and_pcapng() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "50M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &[]);
    let cases: &[(&str, Option<&str>, Option<&str>)] = &[
        ("", None, None),
        ("tcp", None, None),
        ("udp or icmp", Some("2026-11-30T02:00:00.5Z"), Some("+1s")),
        (
            "not tcp port 443",
            Some("1796004000.25"),
            Some("2026-11-30T02:00:01.75Z"),
        ),
        ("host 10.255.255.1", None, None),
    ];
    for (filter, from, to) in cases {
        for format in ["pcap", "pcapng"] {
            let local = d.path().join(format!("local.{format}"));
            let mut args: Vec<&str> = Vec::new();
            if let Some(f) = from {
                args.extend(["--from", f]);
            }
            if let Some(t) = to {
                args.extend(["--to", t]);
            }
            args.extend(["--format", format]);
            if !filter.is_empty() {
                args.push(filter);
            }
            let want = query_ok(&store, &local, &args);
            let mut path = format!("/v1/packets?format={format}&filter={}", enc(filter));
            if let Some(f) = from {
                path += &format!("&from={}", enc(f));
            }
            if let Some(t) = to {
                path += &format!("&to={}", enc(t));
            }
            let got = s.get(&path, Some(&t));
            assert_eq!(
                got.status,
                200,
                "{path}: {}",
                String::from_utf8_lossy(&got.body)
            );
            assert!(
                got.body == want,
                "{path}: the served file ({} bytes) differs from `capsule query` ({} bytes)",
                got.body.len(),
                want.len()
            );
            let remote = d.path().join(format!("remote.{format}"));
            std::fs::write(&remote, &got.body).unwrap();
            let n = run_ok(Command::new(need_tool("tshark")).args(["-r", p(&remote)]));
            let lines = stdout_str(&n).lines().count();
            let c = decode(&want);
            assert!(c.error.is_none(), "{path}: {:?}", c.error);
            assert_eq!(lines, c.packets.len(), "{path}: tshark reads every packet");
        }
    }
    // Every pull is audited as alice, with its filter and the bytes sent.
    let audit = s.audit_lines();
    let pulls: Vec<_> = audit
        .iter()
        .filter(|r| r["endpoint"] == "/v1/packets")
        .collect();
    assert_eq!(pulls.len(), cases.len() * 2);
    for r in &pulls {
        assert_eq!(r["user"], "alice");
        assert_eq!(r["status"], 200);
        assert_eq!(r["outcome"], "ok");
        assert!(r["bytes"].as_u64().unwrap() > 0);
        assert!(r["packets"].as_u64().is_some());
        assert!(r["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    }
    assert_eq!(pulls[2]["params"]["filter"], "tcp");
}

#[test]
fn flows_and_status_are_the_cli_json() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "20M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &[]);
    for (filter, extra) in [
        ("", ""),
        ("tcp", "&sort=packets&limit=7"),
        ("udp", "&from=2026-11-30T02:00:01Z&sort=first&limit=1000"),
    ] {
        let mut cli = capsule();
        cli.args(["flows", "--store", p(&store), "--json"]);
        for kv in extra.split('&').filter(|x| !x.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap();
            cli.args([format!("--{k}"), v.to_string()]);
        }
        if !filter.is_empty() {
            cli.arg(filter);
        }
        let want = run_ok(&mut cli).stdout;
        assert!(!want.is_empty());
        let got = s.get(
            &format!("/v1/flows?filter={}{extra}", enc(filter)),
            Some(&t),
        );
        assert_eq!(got.status, 200);
        assert!(
            got.body == want,
            "flows {filter} {extra}: differ from the CLI's"
        );
    }
    let want = run_ok(capsule().args(["status", "--store", p(&store), "--json"])).stdout;
    let got = s.get("/v1/status", Some(&t));
    assert_eq!(got.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&got.body),
        String::from_utf8_lossy(&want)
    );
    // Metrics need the token too.
    let m = s.get("/metrics", Some(&t));
    assert_eq!(m.status, 200);
    assert!(String::from_utf8_lossy(&m.body).contains("capsule_store_segments 1"));
    assert_eq!(s.get("/metrics", None).status, 401);
}

#[test]
fn refusals_return_nothing_but_the_error_and_are_audited() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "5M");
    let tokens = d.path().join("tokens");
    let alice = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &[]);

    // /healthz needs no token.
    let h = s.get("/healthz", None);
    assert_eq!(
        (h.status, h.body.as_slice()),
        (200, &b"{\"status\":\"ok\"}\n"[..])
    );

    let none = s.get("/v1/packets", None);
    assert_eq!(none.status, 401);
    assert!(error_of(&none).contains("Bearer"), "{}", error_of(&none));
    let wrong = s.get("/v1/packets", Some(&alice.replace(|c: char| c != '0', "0")));
    assert_eq!(wrong.status, 401);
    assert_eq!(error_of(&wrong), "the bearer token is not valid");

    // A token added while the server runs works at once, recorded as its user.
    let bob = add_token(&tokens, "bob");
    let b = s.get("/v1/flows?limit=1", Some(&bob));
    assert_eq!(b.status, 200, "{}", String::from_utf8_lossy(&b.body));

    // A bad filter or time: 400 with the CLI's message.
    let bad = s.get("/v1/packets?filter=host+nope", Some(&alice));
    assert_eq!(bad.status, 400);
    let cli = run(capsule().args(["query", "--store", p(&store), "--count", "host", "nope"]));
    assert_eq!(cli.status.code(), Some(2));
    let cli_msg = stderr_str(&cli);
    let msg = error_of(&bad);
    assert!(msg.starts_with("bad filter:"), "{msg}");
    assert!(
        cli_msg.contains(&msg),
        "CLI said {cli_msg:?}, server said {msg:?}"
    );
    let bad_time = s.get("/v1/packets?from=yesterday", Some(&alice));
    assert_eq!(bad_time.status, 400);
    assert!(
        error_of(&bad_time).contains("from"),
        "{}",
        error_of(&bad_time)
    );
    let unknown = s.get("/v1/packets?fliter=tcp", Some(&alice));
    assert_eq!(unknown.status, 400);
    assert_eq!(s.get("/v2/packets", Some(&alice)).status, 404);

    // Plain HTTP on the HTTPS port gets no answer.
    let plain = run(Command::new(need_tool("curl")).args([
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://{}/healthz", s.addr),
    ]));
    assert!(!plain.status.success(), "plain HTTP must fail");
    assert_eq!(stdout_str(&plain).trim(), "000");

    let audit = s.audit_lines();
    let refused: Vec<_> = audit.iter().filter(|r| r["status"] == 401).collect();
    assert_eq!(refused.len(), 2, "{audit:?}");
    assert!(refused.iter().all(|r| r["user"].is_null()));
    assert!(refused[0]["outcome"]
        .as_str()
        .unwrap()
        .contains("no bearer token"));
    assert!(refused[1]["outcome"]
        .as_str()
        .unwrap()
        .contains("unknown token"));
    assert!(audit
        .iter()
        .any(|r| r["user"] == "bob" && r["endpoint"] == "/v1/flows" && r["status"] == 200));
    assert!(audit.iter().any(|r| r["user"] == "alice"
        && r["status"] == 400
        && r["params"]["filter"] == "host nope"));
}

/// Starts a slow pull (curl reading at `rate`) and waits until bytes arrive.
fn slow_pull(s: &Server, token: &str, out: &Path, rate: &str, max_time: &str) -> Child {
    let mut c = s.curl_cmd("/v1/packets", Some(token), out);
    c.args(["--limit-rate", rate, "--max-time", max_time])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = c.spawn().expect("start curl");
    let t0 = Instant::now();
    while std::fs::metadata(out).map(|m| m.len()).unwrap_or(0) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the slow pull never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn concurrency_limits_answer_429_and_a_gone_client_frees_its_query_at_once() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "200M");
    let tokens = d.path().join("tokens");
    let alice = add_token(&tokens, "alice");
    let bob = add_token(&tokens, "bob");
    let carol = add_token(&tokens, "carol");
    let s = start(
        d.path(),
        &store,
        &tokens,
        &["--max-queries", "2", "--max-queries-per-user", "1"],
    );
    let mut a = slow_pull(&s, &alice, &d.path().join("slow-a"), "200K", "30");
    let again = s.get("/v1/packets", Some(&alice));
    assert_eq!(again.status, 429);
    assert!(
        error_of(&again).contains("--max-queries-per-user"),
        "{}",
        error_of(&again)
    );
    let mut b = slow_pull(&s, &bob, &d.path().join("slow-b"), "200K", "30");
    let c = s.get("/v1/flows", Some(&carol));
    assert_eq!(c.status, 429);
    assert!(error_of(&c).contains("--max-queries)"), "{}", error_of(&c));
    // The analytics answers count against the same limits.
    let c = s.get("/v1/top", Some(&carol));
    assert_eq!(c.status, 429);
    assert!(error_of(&c).contains("--max-queries)"), "{}", error_of(&c));
    let again = s.get("/v1/dscp", Some(&alice));
    assert_eq!(again.status, 429);
    assert!(error_of(&again).contains("--max-queries-per-user"));

    // Alice's client goes away: her query is freed at once.
    a.kill().unwrap();
    a.wait().unwrap();
    let t0 = Instant::now();
    let next = loop {
        let g = s.get("/v1/flows?limit=1", Some(&alice));
        if g.status != 429 || t0.elapsed() > Duration::from_secs(1) {
            break g;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(next.status, 200, "{}", String::from_utf8_lossy(&next.body));
    assert!(t0.elapsed() < Duration::from_secs(1));
    b.kill().unwrap();
    b.wait().unwrap();
    // The server is healthy, and the audit says alice's pull ended with her client.
    let t0 = Instant::now();
    loop {
        let gone = s
            .audit_lines()
            .into_iter()
            .filter(|r| r["endpoint"] == "/v1/packets" && r["status"] == 499)
            .count();
        if gone == 2 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{:?}",
            s.audit_lines()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let audit = s.audit_lines();
    let gone = audit
        .iter()
        .find(|r| r["user"] == "alice" && r["status"] == 499)
        .unwrap();
    assert!(gone["outcome"]
        .as_str()
        .unwrap()
        .contains("the client went away"));
    assert!(gone["bytes"].as_u64().unwrap() > 0);
    assert_eq!(s.get("/healthz", None).status, 200);
}

#[test]
fn a_client_that_times_out_frees_a_limit_of_one_at_once() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "200M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &["--max-queries", "1"]);
    let out = d.path().join("cut.pcap");
    let st = run(s.curl_cmd("/v1/packets", Some(&t), &out).args([
        "--max-time",
        "1",
        "--limit-rate",
        "1M",
    ]));
    assert_eq!(st.status.code(), Some(28), "curl timed out mid-stream");
    let t0 = Instant::now();
    let g = s.get("/v1/packets?filter=icmp", Some(&t));
    assert_eq!(g.status, 200, "{}", String::from_utf8_lossy(&g.body));
    assert!(t0.elapsed() < Duration::from_secs(2));
}

/// A client that reads 1.5 MB of an export and resets the connection (its receive buffer
/// small, as on a slow WAN link) is audited with what reached its TCP: before, with
/// everything the server's socket took, 4.4 MB more.
#[test]
fn a_cut_stream_is_audited_with_what_reached_the_client() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "200M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &[]);
    let client = r#"
import socket, ssl, struct, sys, time
ca, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
s.connect(("127.0.0.1", port))
t = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname="127.0.0.1")
t.sendall(("GET /v1/packets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n" % token).encode())
got = 0
while got < 1500000:
    got += len(t.recv(65536))
time.sleep(1.0)  # the server fills its socket meanwhile
t.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
t.close()
print(got)
"#;
    let out = run_ok(Command::new(need_tool("python3")).args([
        "-c",
        client,
        p(&s.ca),
        s.addr.rsplit(':').next().unwrap(),
        &t,
    ]));
    // What the client read: the body, its chunk framing and the response head.
    let read: u64 = stdout_str(&out).trim().parse().unwrap();
    let audit = s.audit_lines();
    let cut = audit
        .iter()
        .find(|r| r["status"] == 499)
        .unwrap_or_else(|| panic!("no 499 line: {audit:?}"));
    let bytes = cut["bytes"].as_u64().unwrap();
    // More only by what the client's socket held unread (128 KiB here) and the server's
    // HTTP and TLS buffers.
    assert!(
        bytes + (64 << 10) >= read && bytes < read + (1 << 20),
        "audit says {bytes} bytes, the client read {read}: {}",
        cut["outcome"]
    );
}

#[test]
fn the_byte_limit_answers_413_or_cuts_the_stream() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "50M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &["--max-bytes-per-query", "3M"]);
    // Over the limit before the first chunk went out is a 413.
    let small = start(
        &d.path().join("small").tap_mkdir(),
        &store,
        &tokens,
        &["--max-bytes-per-query", "1000"],
    );
    let g = small.get("/v1/packets", Some(&t));
    assert_eq!(g.status, 413);
    assert!(
        error_of(&g).contains("--max-bytes-per-query"),
        "{}",
        error_of(&g)
    );
    // Over it later: the stream is cut (curl sees a transfer that did not end), and the
    // audit says why.
    let g = s.get("/v1/packets", Some(&t));
    assert_eq!(g.status, 200);
    assert_eq!(
        g.curl_exit, 18,
        "a cut transfer, not a file that looks whole"
    );
    assert!(g.body.len() as u64 <= 3 << 20);
    // A query that fits is whole.
    let want = query_ok(&store, &d.path().join("icmp.pcap"), &["icmp"]);
    assert!(want.len() < 3 << 20, "the icmp export must fit the limit");
    let ok = s.get("/v1/packets?filter=icmp", Some(&t));
    assert_eq!((ok.status, ok.curl_exit), (200, 0));
    assert!(ok.body == want);
    let audit = s.audit_lines();
    assert!(audit.iter().any(|r| r["status"] == 413
        && r["outcome"]
            .as_str()
            .unwrap()
            .contains("larger than the limit")));
    assert!(audit.iter().any(|r| r["status"] == 413
        && r["outcome"]
            .as_str()
            .unwrap()
            .contains("larger than the limit")));
}

#[test]
fn the_time_limit_cuts_a_slow_pull() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "100M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &["--max-query-time", "1s"]);
    let out = d.path().join("slow");
    let t0 = Instant::now();
    let st = run(s
        .curl_cmd("/v1/packets?format=pcapng", Some(&t), &out)
        .args(["--limit-rate", "1M", "--max-time", "60"]));
    // Whole, the file would take about 25 s at 1 MB/s; cut after 1 s, only what the
    // sockets already hold arrives.
    assert!(
        matches!(st.status.code(), Some(18 | 56)),
        "cut by the time limit: {st:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    let audit = s.audit_lines();
    assert!(
        audit
            .iter()
            .any(|r| r["status"] == 413
                && r["outcome"].as_str().unwrap().contains("ran longer than")),
        "{audit:?}"
    );
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

#[test]
fn query_and_flows_with_server_give_the_local_output() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "20M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let token_file = d.path().join("alice.token");
    std::fs::write(&token_file, format!("{t}\n")).unwrap();
    let s = start(d.path(), &store, &tokens, &[]);
    let url = format!("https://{}", s.addr);
    let remote = |cmd: &str| {
        let mut c = capsule();
        c.args([
            cmd,
            "--server",
            &url,
            "--token-file",
            p(&token_file),
            "--ca",
            p(&s.ca),
        ]);
        c
    };
    let windows: &[&[&str]] = &[
        &[],
        &["--from", "2026-11-30T02:00:00.5Z", "--to", "+1s", "udp"],
        &["--to", "1796004001", "tcp", "and", "not", "port", "443"],
    ];
    for w in windows {
        for ext in ["pcap", "pcapng"] {
            let local = d.path().join(format!("local.{ext}"));
            let want = query_ok(&store, &local, w);
            let out = d.path().join(format!("remote.{ext}"));
            let o = run_ok(remote("query").args(["-w", p(&out)]).args(*w));
            // No progress line when standard error is not a terminal.
            assert!(!stderr_str(&o).contains('\r'), "{}", stderr_str(&o));
            let got = std::fs::read(&out).unwrap();
            assert!(
                got == want,
                "query --server {w:?} -w {ext}: differs from local"
            );
        }
        let mut lf = capsule();
        lf.args(["flows", "--store", p(&store), "--json", "--sort", "first"])
            .args(*w);
        let want = run_ok(&mut lf).stdout;
        let got = run_ok(remote("flows").args(["--json", "--sort", "first"]).args(*w)).stdout;
        assert!(got == want, "flows --server {w:?}: differs from local");
    }
    // To standard output too.
    let want = query_ok(&store, &d.path().join("all.pcap"), &["icmp"]);
    let got = run_ok(remote("query").args(["-w", "-", "icmp"])).stdout;
    assert!(got == want);

    // A bad filter is a usage error with the same message as locally; nothing is written.
    let out = d.path().join("bad.pcap");
    let bad = run(remote("query").args(["-w", p(&out), "host", "nope"]));
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr_str(&bad).contains("expected an IPv4 or IPv6 address"));
    assert!(!out.exists());
    // A wrong token: refused, nothing written.
    std::fs::write(&token_file, "0".repeat(64)).unwrap();
    let refused = run(remote("query").args(["-w", p(&out)]));
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr_str(&refused).contains("401"),
        "{}",
        stderr_str(&refused)
    );
    assert!(!out.exists());
    // A server whose certificate another CA signed: TLS fails.
    let other = make_pki(&d.path().join("other").tap_mkdir());
    std::fs::write(&token_file, &t).unwrap();
    let tls = run(capsule().args([
        "query",
        "--server",
        &url,
        "--token-file",
        p(&token_file),
        "--ca",
        p(&other.ca),
        "-w",
        p(&out),
    ]));
    assert_eq!(tls.status.code(), Some(1));
    assert!(stderr_str(&tls).contains("TLS"), "{}", stderr_str(&tls));
    assert!(!out.exists());
}

#[test]
fn twenty_concurrent_clients_pulling_different_windows_all_get_their_files() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "20M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(
        d.path(),
        &store,
        &tokens,
        &["--max-queries", "20", "--max-queries-per-user", "20"],
    );
    let t0 = 1_796_004_000_000_000_000u64;
    let windows: Vec<(u64, u64)> = (0..20u64)
        .map(|i| (t0 + i * 100_000_000, t0 + i * 100_000_000 + 150_000_000))
        .collect();
    let got: Vec<Got> = std::thread::scope(|sc| {
        let hs: Vec<_> = windows
            .iter()
            .map(|(f, e)| {
                let (s, t) = (&s, &t);
                sc.spawn(move || {
                    s.get(
                        &format!("/v1/packets?from=%40{f}&to=%40{e}&format=pcapng"),
                        Some(t),
                    )
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((f, e), g) in windows.iter().zip(&got) {
        let want = query_ok(
            &store,
            &d.path().join("w.pcapng"),
            &["--from", &format!("@{f}"), "--to", &format!("@{e}")],
        );
        assert_eq!((g.status, g.curl_exit), (200, 0));
        assert!(
            g.body == want,
            "window @{f}..@{e} differs from the local export"
        );
        assert!(!decode(&want).packets.is_empty());
    }
}

#[test]
fn a_cut_transfer_leaves_no_file_behind_with_query_server() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "50M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let token_file = d.path().join("alice.token");
    std::fs::write(&token_file, &t).unwrap();
    let s = start(d.path(), &store, &tokens, &["--max-bytes-per-query", "3M"]);
    let out = d.path().join("cut.pcap");
    let o = run(capsule().args([
        "query",
        "--server",
        &format!("https://{}", s.addr),
        "--token-file",
        p(&token_file),
        "--ca",
        p(&s.ca),
        "-w",
        p(&out),
    ]));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr_str(&o).contains("was cut after"),
        "{}",
        stderr_str(&o)
    );
    assert!(!out.exists(), "a cut answer must not look like a file");
}

/// A client CA, two client certificates (`good`, `bad`) signed by it, and an openssl `ca`
/// database so a CRL can be made and remade.
fn make_client_pki(dir: &Path) {
    sh_ok(&format!(
        "cd {}
         openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
           -keyout cca.key -out cca.pem -days 2 -subj /CN=capsule-clients 2>/dev/null
         printf 'extendedKeyUsage=clientAuth\\n' > cext
         for u in good bad; do
           openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
             -keyout $u.key -out $u.csr -subj /CN=$u 2>/dev/null
           openssl x509 -req -in $u.csr -CA cca.pem -CAkey cca.key -CAcreateserial \
             -out $u.pem -days 2 -extfile cext 2>/dev/null
         done
         : > index.txt; echo 01 > crlnumber; echo 1000 > serial
         printf '[ca]\\ndefault_ca=c\\n[c]\\ndatabase=index.txt\\ncrlnumber=crlnumber\\ndefault_md=sha256\\ndefault_crl_days=2\\nnew_certs_dir=.\\nserial=serial\\npolicy=pol\\n[pol]\\ncommonName=supplied\\n' > ca.cnf
         # `old`: issued by the same CA, valid for one day in 2020.
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
           -keyout old.key -out old.csr -subj /CN=old 2>/dev/null
         openssl ca -batch -notext -config ca.cnf -keyfile cca.key -cert cca.pem -in old.csr \
           -out old.pem -startdate 20200101000000Z -enddate 20200102000000Z -extfile cext 2>/dev/null
         openssl ca -config ca.cnf -gencrl -keyfile cca.key -cert cca.pem -out crl.pem 2>/dev/null",
        p(dir)
    ));
}

#[test]
fn mutual_tls_refuses_no_certificate_another_ca_an_expired_and_a_revoked_one_reloading_the_crl() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "5M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let c = d.path().join("clients").tap_mkdir();
    make_client_pki(&c);
    let s = start(
        d.path(),
        &store,
        &tokens,
        &[
            "--client-ca",
            p(&c.join("cca.pem")),
            "--crl",
            p(&c.join("crl.pem")),
        ],
    );
    let get_with = |cert: Option<(&Path, &Path)>| {
        let out = d.path().join("m.out");
        let _ = std::fs::remove_file(&out);
        let mut cmd = s.curl_cmd("/v1/status", Some(&t), &out);
        if let Some((crt, key)) = cert {
            cmd.args(["--cert", p(crt), "--key", p(key)]);
        }
        let o = run(&mut cmd);
        let body = std::fs::read(&out).unwrap_or_default();
        (stdout_str(&o).trim().to_string(), body)
    };
    let good = (c.join("good.pem"), c.join("good.key"));
    let bad = (c.join("bad.pem"), c.join("bad.key"));
    assert_eq!(get_with(Some((&good.0, &good.1))).0, "200");
    assert_eq!(get_with(Some((&bad.0, &bad.1))).0, "200", "not revoked yet");
    let (code, body) = get_with(None);
    assert_eq!(
        (code.as_str(), body.len()),
        ("000", 0),
        "no client certificate"
    );
    let other = make_pki(&d.path().join("other").tap_mkdir());
    let (code, body) = get_with(Some((&other.cert, &other.key)));
    assert_eq!(
        (code.as_str(), body.len()),
        ("000", 0),
        "a certificate of another CA"
    );
    let (code, body) = get_with(Some((&c.join("old.pem"), &c.join("old.key"))));
    assert_eq!(
        (code.as_str(), body.len()),
        ("000", 0),
        "an expired certificate of the right CA"
    );
    // Revoke `bad` and remake the CRL: refused from the next connection, no restart.
    sh_ok(&format!(
        "cd {}
         openssl ca -config ca.cnf -revoke bad.pem -keyfile cca.key -cert cca.pem 2>/dev/null
         openssl ca -config ca.cnf -gencrl -keyfile cca.key -cert cca.pem -out crl.new 2>/dev/null
         mv crl.new crl.pem",
        p(&c)
    ));
    let (code, body) = get_with(Some((&bad.0, &bad.1)));
    assert_eq!(
        (code.as_str(), body.len()),
        ("000", 0),
        "a revoked certificate"
    );
    assert_eq!(get_with(Some((&good.0, &good.1))).0, "200");

    // `query --server --cert --key` pulls through mutual TLS: the local bytes.
    let token_file = d.path().join("alice.token");
    std::fs::write(&token_file, &t).unwrap();
    let out = d.path().join("mtls.pcap");
    run_ok(capsule().args([
        "query",
        "--server",
        &format!("https://{}", s.addr),
        "--token-file",
        p(&token_file),
        "--ca",
        p(&s.ca),
        "--cert",
        p(&good.0),
        "--key",
        p(&good.1),
        "-w",
        p(&out),
        "udp",
    ]));
    let want = query_ok(&store, &d.path().join("local.pcap"), &["udp"]);
    assert!(std::fs::read(&out).unwrap() == want);

    let audit = s.audit_lines();
    let failed: Vec<_> = audit
        .iter()
        .filter_map(|r| r["outcome"].as_str())
        .filter(|o| o.starts_with("TLS handshake failed"))
        .collect();
    assert_eq!(failed.len(), 4, "{failed:?}");
    assert!(failed[0].contains("no certificates"), "{failed:?}");
    assert!(failed[1].contains("UnknownIssuer"), "{failed:?}");
    assert!(failed[2].contains("certificate expired"), "{failed:?}");
    assert!(failed[3].contains("Revoked"), "{failed:?}");
    let ok = audit
        .iter()
        .filter(|r| r["status"] == 200)
        .collect::<Vec<_>>();
    assert_eq!(ok.len(), 4);
    assert!(ok.iter().all(|r| r["user"] == "alice"
        && r["client_cert_sha256"]
            .as_str()
            .is_some_and(|h| h.len() == 64)));
    assert_ne!(ok[0]["client_cert_sha256"], ok[1]["client_cert_sha256"]);
}

/// The config of synth's scenario (groups, DSCP and egress policy) from its truth file, as
/// tests/analytics.rs writes it.
fn scenario_config(dir: &Path) -> PathBuf {
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("truth.json")).unwrap()).unwrap();
    let facts = &truth["facts"];
    let gpu: Vec<String> = facts["gpu_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("\"{}\"", h.as_str().unwrap()))
        .collect();
    let config = dir.join("capsule.toml");
    std::fs::write(
        &config,
        format!(
            "[groups]\nvoice = [\"{}\"]\ngpu = [{}]\nstorage = [\"{}\"]\n\
             model-store = [\"{}\"]\n\n[dscp]\nef = [\"voice\"]\n\n\
             [egress]\nmodel-store = [\"storage\"]\n",
            facts["ef_allow_list"][0].as_str().unwrap(),
            gpu.join(", "),
            facts["storage_subnet"].as_str().unwrap(),
            facts["exfil"]["src"].as_str().unwrap(),
        ),
    )
    .unwrap();
    config
}

#[test]
fn analytics_with_server_give_the_local_output_table_and_json() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "20M");
    let config = scenario_config(d.path());
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let token_file = d.path().join("alice.token");
    std::fs::write(&token_file, format!("{t}\n")).unwrap();
    let s = start(d.path(), &store, &tokens, &["--config", p(&config)]);
    let url = format!("https://{}", s.addr);
    let cases: &[&[&str]] = &[
        &["top"],
        &[
            "top", "--key", "src", "--by", "packets", "--limit", "3", "udp",
        ],
        &[
            "top",
            "--key",
            "group",
            "--from",
            "2026-11-30T02:00:00.5Z",
            "--to",
            "+1s",
        ],
        &["top", "--key", "dscp", "--to", "1796004001"],
        &["tcp"],
        &[
            "tcp",
            "--interval",
            "1s",
            "tcp",
            "and",
            "not",
            "port",
            "443",
        ],
        &["dscp"],
        &["dscp", "--from", "2026-11-30T02:00:01Z"],
        &["bursts", "--above", "100M", "--incast", "4"],
        &[
            "bursts",
            "--series",
            "--from",
            "2026-11-30T02:00:01Z",
            "--to",
            "+50ms",
        ],
        &["matrix"],
        &["matrix", "--by", "flows"],
        &["stragglers", "--group", "gpu", "--interval", "1s"],
        &[
            "stragglers",
            "--group",
            "gpu",
            "--interval",
            "1s",
            "--ratio",
            "0.9",
            "--min-bytes",
            "1000",
        ],
        &["alerts"],
    ];
    for case in cases {
        for (json, columns) in [(true, None), (false, None), (false, Some("80"))] {
            let mut local = capsule();
            local
                .args(&case[..1])
                .args(["--store", p(&store), "--config", p(&config)])
                .args(&case[1..]);
            let mut remote = capsule();
            remote
                .args(&case[..1])
                .args(["--server", &url, "--token-file", p(&token_file)])
                .args(["--ca", p(&s.ca)])
                .args(&case[1..]);
            for c in [&mut local, &mut remote] {
                if json {
                    c.arg("--json");
                }
                match columns {
                    Some(w) => c.env("COLUMNS", w),
                    None => c.env_remove("COLUMNS"),
                };
            }
            let mut want = run_ok(&mut local);
            let got = run_ok(&mut remote);
            assert!(!want.stdout.is_empty());
            if !json {
                // The text's export commands name the store as each reader reaches it: the
                // local one by its directory, the remote one by this command's own --server
                // options (never by the server's path).
                let text = stdout_str(&want).replace(
                    &format!("--store {}", p(&store)),
                    &format!(
                        "--server {url} --token-file {} --ca {}",
                        p(&token_file),
                        p(&s.ca)
                    ),
                );
                want.stdout = text.into_bytes();
            }
            assert!(
                got.stdout == want.stdout,
                "{case:?} json={json} columns={columns:?}: --server differs from local\n\
                 local:\n{}\nremote:\n{}",
                stdout_str(&want),
                stdout_str(&got)
            );
        }
    }
    // The endpoint itself answers the --json document.
    let g = s.get("/v1/dscp", Some(&t));
    assert_eq!(g.status, 200);
    let want = run_ok(capsule().args([
        "dscp",
        "--store",
        p(&store),
        "--config",
        p(&config),
        "--json",
    ]));
    assert!(g.body == want.stdout, "GET /v1/dscp is dscp --json");
    // Bad parameters: 400 naming the parameter; the client's config is never taken.
    for (path, names) in [
        ("/v1/top?key=nope", "key"),
        ("/v1/top?limit=-3", "limit"),
        ("/v1/tcp?interval=1500ms", "interval"),
        ("/v1/stragglers?group=gpu&ratio=half", "ratio"),
        ("/v1/top?config=%2Fetc%2Fcapsule.toml", "config"),
        ("/v1/top?store=%2Ftmp", "store"),
        ("/v1/matrix?format=xml", "format"),
        ("/v1/top?format=text&width=3", "width"),
        ("/v1/dscp?filter=host+nope", "filter"),
        ("/v1/stragglers?group=nosuch", "nosuch"),
        ("/v1/stragglers", "group"),
    ] {
        let g = s.get(path, Some(&t));
        assert_eq!(g.status, 400, "{path}");
        let e = error_of(&g);
        assert!(e.contains(names), "{path}: the message names {names}: {e}");
    }
    // The server's config edited into something invalid: the server's fault, 500, with
    // the file's line; restored, answers come back.
    let good = std::fs::read(&config).unwrap();
    std::fs::write(&config, "[groups]\ngpu = [\"10.1.2.300\"]\n").unwrap();
    let g = s.get("/v1/dscp", Some(&t));
    assert_eq!(g.status, 500);
    let e = error_of(&g);
    assert!(e.contains("config") && e.contains(":2:"), "{e}");
    std::fs::write(&config, &good).unwrap();
    assert_eq!(s.get("/v1/dscp", Some(&t)).status, 200);
    // A flag value cannot smuggle in another flag.
    let g = s.get("/v1/top?limit=3+--config%3D%2Fetc%2Fpasswd", Some(&t));
    assert_eq!(g.status, 400);
    // No token: refused with nothing else.
    let g = s.get("/v1/top", None);
    assert_eq!(g.status, 401);
    error_of(&g);
    // Each answer is audited as the user, with its parameters and bytes.
    let audit = s.audit_lines();
    let tops: Vec<&serde_json::Value> = audit
        .iter()
        .filter(|r| r["endpoint"] == "/v1/top" && r["status"] == 200)
        .collect();
    assert!(
        tops.len() >= 12,
        "every top answered is audited: {}",
        tops.len()
    );
    assert!(tops
        .iter()
        .all(|r| r["user"] == "alice" && r["bytes"].as_u64() > Some(0)));
    assert!(tops
        .iter()
        .any(|r| r["params"]["key"] == "src" && r["params"]["limit"] == "3"));
    assert!(audit
        .iter()
        .any(|r| r["endpoint"] == "/v1/top" && r["status"] == 400 && r["user"] == "alice"));
    assert!(audit
        .iter()
        .any(|r| r["endpoint"] == "/v1/top" && r["status"] == 401 && r["user"].is_null()));
}

#[test]
fn analytics_without_a_server_config_or_over_a_limit_are_refused_with_the_reason() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "5M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &["--max-bytes-per-query", "200"]);
    for path in [
        "/v1/matrix",
        "/v1/alerts",
        "/v1/stragglers?group=gpu",
        "/v1/top?key=group",
    ] {
        let g = s.get(path, Some(&t));
        assert_eq!(g.status, 400, "{path}");
        let e = error_of(&g);
        assert!(e.contains("no config"), "{path}: {e}");
    }
    let g = s.get("/v1/top", Some(&t));
    assert_eq!(g.status, 413);
    assert!(error_of(&g).contains("--max-bytes-per-query"));
    let last = s.audit_lines().pop().unwrap();
    assert_eq!(last["status"], 413);
    assert_eq!(last["endpoint"], "/v1/top");
}

#[test]
fn a_revoked_or_expired_token_gets_401_and_is_audited() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "5M");
    let tokens = d.path().join("tokens");
    let a = add_token(&tokens, "alice");
    let a2 = add_token(&tokens, "alice");
    let b = add_token(&tokens, "bob");
    let e = stdout_str(&run_ok(capsule().args([
        "token",
        "add",
        "--tokens",
        p(&tokens),
        "--user",
        "carol",
        "--expires",
        "90d",
    ])))
    .trim()
    .to_string();
    let s = start(d.path(), &store, &tokens, &[]);
    for tok in [&a, &a2, &b, &e] {
        assert_eq!(s.get("/v1/status", Some(tok)).status, 200);
    }
    // The list: users, ids and times, never a hash in full.
    let listed = run_ok(capsule().args(["token", "list", "--tokens", p(&tokens), "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let list = v["tokens"].as_array().unwrap();
    let users: Vec<&str> = list.iter().map(|x| x["user"].as_str().unwrap()).collect();
    assert_eq!(users, ["alice", "alice", "bob", "carol"]);
    assert!(list[3]["expires"].is_string() && list[0]["expires"].is_null());
    let file = std::fs::read_to_string(&tokens).unwrap();
    let text = stdout_str(&run_ok(capsule().args([
        "token",
        "list",
        "--tokens",
        p(&tokens),
    ])));
    for line in file.lines() {
        let l: serde_json::Value = serde_json::from_str(line).unwrap();
        let h = l["sha256"].as_str().unwrap();
        assert!(text.contains(&h[..12]), "{text}");
        assert!(
            !text.contains(&h[..13]),
            "no more of the hash than the id: {text}"
        );
        assert!(!stdout_str(&listed).contains(&h[..13]));
    }
    assert!(text.contains("never") && text.contains("carol"), "{text}");

    // Revoked while the server runs: refused at the next request, audited.
    let o = run_ok(capsule().args(["token", "revoke", "--tokens", p(&tokens), "--user", "alice"]));
    assert!(
        stdout_str(&o).contains("revoked 2 tokens of alice"),
        "{}",
        stdout_str(&o)
    );
    for tok in [&a, &a2] {
        let g = s.get("/v1/status", Some(tok));
        assert_eq!(g.status, 401);
        assert_eq!(error_of(&g), "the bearer token is not valid");
    }
    assert_eq!(s.get("/v1/status", Some(&b)).status, 200);
    let audit = s.audit_lines();
    let refused: Vec<_> = audit.iter().filter(|r| r["status"] == 401).collect();
    assert_eq!(refused.len(), 2);
    assert!(refused
        .iter()
        .all(|r| r["outcome"].as_str().unwrap().contains("revoked") && r["user"].is_null()));
    // Revoking a user with no token is an error.
    let o = run(capsule().args(["token", "revoke", "--tokens", p(&tokens), "--user", "alice"]));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr_str(&o).contains("no token of user \"alice\""));

    // An expired line: refused, and the audit log says whose it was.
    let old = "c".repeat(64);
    let digest = sh_ok(&format!("printf %s {old} | sha256sum | cut -c1-64"));
    let line = format!(
        "{{\"user\":\"dave\",\"sha256\":\"{}\",\"expires\":\"2020-01-01T00:00:00Z\"}}\n",
        String::from_utf8(digest).unwrap().trim()
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&tokens)
        .unwrap();
    std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
    drop(f);
    let g = s.get("/v1/status", Some(&old));
    assert_eq!(g.status, 401);
    let last = s.audit_lines().pop().unwrap();
    assert_eq!(last["user"], "dave");
    assert_eq!(last["outcome"], "unauthorized: expired token");
    assert_eq!(
        s.get("/v1/status", Some(&e)).status,
        200,
        "carol's has 90 days left"
    );

    // Revoked by deleting the file, or by an edit that breaks it: no token is accepted
    // (before, the server kept the last good list: a removed token still got 200).
    let good = std::fs::read_to_string(&tokens).unwrap();
    std::fs::remove_file(&tokens).unwrap();
    assert_eq!(s.get("/v1/status", Some(&b)).status, 401, "deleted file");
    std::fs::write(&tokens, format!("{good}{{not json\n")).unwrap();
    assert_eq!(s.get("/v1/status", Some(&b)).status, 401, "broken file");
    std::fs::write(&tokens, &good).unwrap();
    assert_eq!(s.get("/v1/status", Some(&b)).status, 200, "mended file");
}

/// The audit log never holds a token, whatever a client puts in the URL, and a request
/// without a valid token writes a short line however long its URL. Before, `?token=...`
/// was written in clear and each anonymous request appended up to about 60 KB.
#[test]
fn the_audit_log_holds_no_secret_and_little_of_an_anonymous_request() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "5M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &[]);
    // A client that put its token in the URL (refused: no endpoint takes `token`).
    let g = s.get(&format!("/v1/status?token={t}"), Some(&t));
    assert_eq!(g.status, 400);
    let g = s.get(&format!("/v1/flows?filter=tcp&access_token={t}"), None);
    assert_eq!(g.status, 401);
    let g = s.get(&format!("/v1/flows?filter={t}"), Some(&t));
    assert_eq!(g.status, 400);
    // Anonymous requests with 30 KB of URL.
    let long = "a".repeat(30_000);
    for path in [
        format!("/{long}"),
        format!("/v1/flows?filter={long}&x={long}"),
    ] {
        assert_eq!(s.get(&path, None).status, 401);
    }
    let text = std::fs::read_to_string(&s.audit).unwrap();
    assert!(!text.contains(&t), "a token in the audit log: {text}");
    assert!(!text.contains(&t[..32]), "half a token in the audit log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    for l in &lines[3..] {
        assert!(l.len() < 1024, "an anonymous line of {} bytes", l.len());
    }
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(first["user"], "alice");
    assert_eq!(first["params"]["token"], "(not recorded: 64 bytes)");
}

/// A pull over damaged data says it is partial in-band: an HTTP trailer the CLI turns into
/// exit 3, and (pcapng) a last section whose comment names what is missing, as a local
/// export's file does. Before, the server's pcap looked whole and `query --server` exited 0.
#[test]
fn a_partial_pull_says_so_in_a_trailer_and_in_the_file() {
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("in.pcap");
    synth(&pcap, &d.path().join("truth.json"), 7, "2s", "50M", None);
    let store = d.path().join("store");
    import_ok(&store, &["--segment-size", "1M"], &[p(&pcap)]);
    let mut segs: Vec<PathBuf> = std::fs::read_dir(store.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("seg-"))
        .collect();
    segs.sort();
    assert!(segs.len() >= 3, "{segs:?}");
    let len = std::fs::metadata(&segs[1]).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segs[1])
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let token_file = d.path().join("alice.token");
    std::fs::write(&token_file, format!("{t}\n")).unwrap();
    let s = start(d.path(), &store, &tokens, &[]);
    let url = format!("https://{}", s.addr);
    let comment = |f: &Path| {
        let o = run_ok(Command::new(need_tool("capinfos")).arg(p(f)));
        stdout_str(&o)
            .lines()
            .find(|l| l.contains("comment"))
            .map(str::to_string)
    };
    // Locally: exit 3, and the pcapng file says it too.
    let local = d.path().join("local.pcapng");
    let o = run(capsule().args(["query", "--store", p(&store), "-w", p(&local)]));
    assert_eq!(o.status.code(), Some(3), "{}", stderr_str(&o));
    let note = comment(&local).expect("a local partial pcapng names its gap");
    assert!(
        note.contains("this answer is partial") && note.contains("segment"),
        "{note}"
    );
    let pull = |out: &Path, window: &[&str]| {
        run(capsule()
            .args(["query", "--server", &url, "--token-file", p(&token_file)])
            .args(["--ca", p(&s.ca), "-w", p(out)])
            .args(window))
    };
    for ext in ["pcap", "pcapng"] {
        let out = d.path().join(format!("remote.{ext}"));
        let o = pull(&out, &[]);
        assert_eq!(o.status.code(), Some(3), "{ext}: {}", stderr_str(&o));
        assert!(
            stderr_str(&o).contains("this answer is partial"),
            "{}",
            stderr_str(&o)
        );
        let local = d.path().join(format!("local2.{ext}"));
        let _ = run(capsule().args(["query", "--store", p(&store), "-w", p(&local)]));
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&local).unwrap(),
            "{ext}: the pull differs from the local export"
        );
        if ext == "pcapng" {
            assert!(comment(&out).is_some_and(|c| c.contains("this answer is partial")));
        }
    }
    // Flows over a segment whose index is gone: the header, and `flows --server` exits 3.
    let idx: Vec<PathBuf> = std::fs::read_dir(store.join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".idx"))
        .collect();
    std::fs::remove_file(&idx[0]).unwrap();
    let o = run(capsule()
        .args(["flows", "--server", &url, "--token-file", p(&token_file)])
        .args(["--ca", p(&s.ca), "--json"]));
    assert_eq!(
        o.status.code(),
        Some(3),
        "flows --server: {}",
        stderr_str(&o)
    );
    // A whole answer has neither.
    let before = d.path().join("first.pcapng");
    let first_end = run_ok(capsule().args(["segments", "--store", p(&store), "--json"]));
    let line = stdout_str(&first_end).lines().next().unwrap().to_string();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let to = format!("@{}", v["last_ns"]);
    let o = pull(&before, &["--to", &to]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr_str(&o));
    assert_eq!(comment(&before), None);
    let audit = s.audit_lines();
    let pulls: Vec<_> = audit
        .iter()
        .filter(|r| r["endpoint"] == "/v1/packets")
        .collect();
    assert_eq!(pulls.len(), 3);
    assert!(audit
        .iter()
        .any(|r| r["endpoint"] == "/v1/flows"
            && r["outcome"].as_str().unwrap().starts_with("partial: ")));
    assert!(pulls[..2]
        .iter()
        .all(|r| r["outcome"].as_str().unwrap().starts_with("partial: ")));
    assert_eq!(pulls[2]["outcome"], "ok");
}

#[test]
fn serve_takes_its_flags_from_the_config_file_and_names_a_bad_key() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "5M");
    let pki = make_pki(d.path());
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let audit = d.path().join("audit.jsonl");
    let groups = std::fs::read_to_string(scenario_config(d.path())).unwrap();
    let config = d.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "{groups}\n[serve]\nstore = \"{}\"\nlisten = \"127.0.0.1:1\"\ncert = \"{}\"\n\
             key = \"{}\"\ntokens = \"{}\"\naudit_log = \"{}\"\nmax_queries_per_user = 1\n",
            p(&store),
            p(&pki.cert),
            p(&pki.key),
            p(&tokens),
            p(&audit)
        ),
    )
    .unwrap();
    // --listen on the command line overrides the file's.
    let mut cmd = capsule();
    cmd.args(["serve", "--config", p(&config), "--listen", "127.0.0.1:0"]);
    let s = spawn(cmd, pki.ca.clone(), audit, d.path());
    // The groups of the same file answer the matrix.
    let g = s.get("/v1/matrix", Some(&t));
    assert_eq!(g.status, 200, "{}", String::from_utf8_lossy(&g.body));
    let want = run_ok(capsule().args([
        "matrix",
        "--store",
        p(&store),
        "--config",
        p(&config),
        "--json",
    ]));
    assert!(g.body == want.stdout);
    assert_eq!(s.audit_lines().len(), 1, "the file's audit_log is used");
    drop(s);

    // A bad value names the file, line and key; an unknown key too; exit 2 before serving.
    for (text, want) in [
        (
            "[serve]\nstore = \"/x\"\nmax_queries = \"many\"\n",
            "serve.max_queries",
        ),
        (
            "[serve]\nstore = \"/x\"\nmax_query_time = \"soon\"\n",
            "serve.max_query_time",
        ),
        (
            "[serve]\nstore = \"/x\"\nlisen = \"127.0.0.1:0\"\n",
            "serve.lisen",
        ),
    ] {
        let bad = d.path().join("bad.toml");
        std::fs::write(&bad, text).unwrap();
        let o = run(capsule().args(["serve", "--config", p(&bad)]));
        assert_eq!(o.status.code(), Some(2), "{text}");
        let e = stderr_str(&o);
        assert!(e.contains(":3:") && e.contains(want), "{text}: {e}");
    }
}

/// A token file for `user` in `dir`, and the token.
fn token_file(dir: &Path, tokens: &Path, user: &str) -> PathBuf {
    let t = add_token(tokens, user);
    let f = dir.join(format!("{user}.token"));
    std::fs::write(&f, format!("{t}\n")).unwrap();
    f
}

/// `capsule CMD --server URL --token-file TOKEN --ca CA`.
fn remote_cmd(s: &Server, token: &Path, cmd: &str) -> Command {
    let mut c = capsule();
    let url = format!("https://{}", s.addr);
    c.args([
        cmd,
        "--server",
        &url,
        "--token-file",
        p(token),
        "--ca",
        p(&s.ca),
    ]);
    c
}

/// `query --count` and `--explain` with `--server`: the server counts and plans
/// (`/v1/count`, `/v1/plan`, audited), the client prints them as the local command does, and a
/// partial count exits 3 there too. Before, both flags were refused with --server.
#[test]
fn query_count_and_explain_with_server_are_the_local_ones_and_a_partial_count_exits_3() {
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("in.pcap");
    synth(&pcap, &d.path().join("truth.json"), 7, "2s", "50M", None);
    let store = d.path().join("store");
    import_ok(&store, &["--segment-size", "1M"], &[p(&pcap)]);
    let tokens = d.path().join("tokens");
    let tf = token_file(d.path(), &tokens, "alice");
    let s = start(d.path(), &store, &tokens, &[]);
    let local = |args: &[&str]| run(capsule().args(["query", "--store", p(&store)]).args(args));
    let remote = |args: &[&str]| run(remote_cmd(&s, &tf, "query").args(args));
    // The seconds a count took are the only figure that may differ.
    let no_seconds = |o: &std::process::Output, json: bool| -> String {
        let out = stdout_str(o);
        if json {
            let mut v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert!(v["seconds"].is_f64(), "{v}");
            v.as_object_mut().unwrap().remove("seconds");
            v.to_string()
        } else {
            let (head, _) = out.rsplit_once(" in ").expect("`... in S s`");
            head.to_string()
        }
    };
    let windows: &[&[&str]] = &[
        &[],
        &["--from", "2026-11-30T02:00:00.5Z", "--to", "+1s", "udp"],
    ];
    for w in windows {
        for json in [false, true] {
            let j: &[&str] = if json { &["--json"] } else { &[] };
            let args = |flag: &'static str| [&[flag][..], j, w].concat();
            let (l, r) = (local(&args("--count")), remote(&args("--count")));
            assert_eq!(l.status.code(), Some(0), "{}", stderr_str(&l));
            assert_eq!(r.status.code(), Some(0), "{}", stderr_str(&r));
            assert_eq!(no_seconds(&r, json), no_seconds(&l, json), "--count {w:?}");
            let (l, r) = (local(&args("--explain")), remote(&args("--explain")));
            assert_eq!(r.status.code(), Some(0), "{}", stderr_str(&r));
            assert!(stdout_str(&l).contains("blocks"), "{}", stdout_str(&l));
            assert_eq!(stdout_str(&r), stdout_str(&l), "--explain {w:?}");
        }
    }
    // A bad filter: the local message, exit 2.
    let bad = remote(&["--count", "host", "nope"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr_str(&bad).contains("expected an IPv4 or IPv6 address"));
    // Damage a segment: the count is partial, exit 3 with the server's word.
    let mut segs: Vec<PathBuf> = std::fs::read_dir(store.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("seg-"))
        .collect();
    segs.sort();
    assert!(segs.len() >= 3, "{segs:?}");
    let len = std::fs::metadata(&segs[1]).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segs[1])
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (l, r) = (
        local(&["--count", "--json"]),
        remote(&["--count", "--json"]),
    );
    assert_eq!(l.status.code(), Some(3), "{}", stderr_str(&l));
    assert_eq!(r.status.code(), Some(3), "{}", stderr_str(&r));
    assert!(
        stderr_str(&r).contains("the answer is partial"),
        "{}",
        stderr_str(&r)
    );
    assert_eq!(no_seconds(&r, true), no_seconds(&l, true));
    let audit = s.audit_lines();
    let counts: Vec<_> = audit
        .iter()
        .filter(|r| r["endpoint"] == "/v1/count")
        .collect();
    // (The bad filter was refused by the client, as locally, before any request.)
    assert_eq!(counts.len(), 5, "{audit:?}");
    assert!(counts[..4].iter().all(|r| r["outcome"] == "ok"));
    assert!(counts[4]["outcome"]
        .as_str()
        .unwrap()
        .starts_with("partial: "));
    assert!(
        counts[4]["packets"].as_u64().unwrap() > 0,
        "{:?}",
        counts[4]
    );
    let plans = audit.iter().filter(|r| r["endpoint"] == "/v1/plan").count();
    assert_eq!(plans, 4);
}

/// `flows --server` without `--json`, `status --server` and `segments --server` (text and
/// JSON) print what the local commands print: the table is made by the client from the
/// typed answer. Before, flows needed --json and status and segments took no --server.
#[test]
fn flows_status_and_segments_with_server_print_the_local_output() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "20M");
    let tokens = d.path().join("tokens");
    let tf = token_file(d.path(), &tokens, "alice");
    let s = start(d.path(), &store, &tokens, &[]);
    let same = |cmd: &str, args: &[&str]| {
        let l = run_ok(
            capsule()
                .args([cmd, "--store", p(&store)])
                .args(args)
                .env("COLUMNS", "100"),
        );
        let r = run_ok(remote_cmd(&s, &tf, cmd).args(args).env("COLUMNS", "100"));
        assert!(!stdout_str(&l).is_empty(), "{cmd} {args:?}");
        assert_eq!(stdout_str(&r), stdout_str(&l), "{cmd} {args:?}");
    };
    same("flows", &[]);
    same("flows", &["--sort", "first", "--limit", "7", "udp"]);
    same(
        "flows",
        &["--from", "2026-11-30T02:00:00.5Z", "--to", "+1s", "tcp"],
    );
    for cmd in ["status", "segments"] {
        same(cmd, &[]);
        same(cmd, &["--json"]);
    }
    let audit = s.audit_lines();
    for e in ["/v1/flows", "/v1/status", "/v1/segments"] {
        assert!(
            audit
                .iter()
                .any(|r| r["endpoint"] == e && r["outcome"] == "ok"),
            "{e}: {audit:?}"
        );
    }
}

/// `triage` writes evidence from a local store's packets: its help does not offer
/// `--server`, and given one it says how to triage a remote store (exit 2).
#[test]
fn triage_does_not_offer_server_and_refuses_it_with_the_way_round() {
    let help = stdout_str(&run_ok(capsule().args(["triage", "--help"])));
    for flag in ["--server", "--remote", "--token-file", "--client-cert"] {
        assert!(!help.contains(flag), "{flag} in triage --help:\n{help}");
    }
    let d = tempfile::tempdir().unwrap();
    let tf = d.path().join("t");
    std::fs::write(&tf, "0".repeat(64)).unwrap();
    let o = run(capsule()
        .args(["triage", "--server", "https://127.0.0.1:1"])
        .args(["--token-file", p(&tf), "-o", p(&d.path().join("out"))]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr_str(&o));
    assert!(
        stderr_str(&o).contains("capsule query --server"),
        "{}",
        stderr_str(&o)
    );
}

/// The client file (`~/.config/capsule/client.toml`, or `$XDG_CONFIG_HOME/capsule/`, or
/// `$CAPSULE_CLIENT_CONFIG`): `--remote` asks its server with its token and CA, flags given
/// on the command line win, a command without `--server`/`--remote` stays local, and a bad
/// file is refused naming its line and key.
#[test]
fn a_client_file_gives_the_server_token_and_ca_and_flags_win_over_it() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "5M");
    let tokens = d.path().join("tokens");
    let home = d.path().join("home");
    let conf = home.join(".config/capsule").tap_mkdir();
    // A relative token_file is read beside the file.
    token_file(&conf, &tokens, "alice");
    let s = start(d.path(), &store, &tokens, &[]);
    let url = format!("https://{}", s.addr);
    std::fs::write(
        conf.join("client.toml"),
        format!(
            "server = \"{url}\"\ntoken_file = \"alice.token\"\nca = \"{}\"\n",
            p(&s.ca)
        ),
    )
    .unwrap();
    let client = |env: &[(&str, &Path)]| {
        let mut c = capsule();
        c.env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("CAPSULE_CLIENT_CONFIG");
        for (k, v) in env {
            c.env(k, v);
        }
        c
    };
    let local = stdout_str(&run_ok(capsule().args(["segments", "--store", p(&store)])));
    let got = run_ok(client(&[]).args(["segments", "--remote"]));
    assert_eq!(stdout_str(&got), local);
    // --server with the file's token and CA.
    let got = run_ok(client(&[]).args(["segments", "--server", &url]));
    assert_eq!(stdout_str(&got), local);
    // The same through $XDG_CONFIG_HOME (HOME has none).
    let xdg = d.path().join("xdg");
    std::fs::create_dir_all(xdg.join("capsule")).unwrap();
    std::fs::rename(conf.join("client.toml"), xdg.join("capsule/client.toml")).unwrap();
    std::fs::rename(conf.join("alice.token"), xdg.join("capsule/alice.token")).unwrap();
    let o = run(client(&[]).args(["segments", "--remote"]));
    assert_eq!(o.status.code(), Some(2), "HOME has no file now");
    assert!(stderr_str(&o).contains("server"), "{}", stderr_str(&o));
    let got = run_ok(client(&[("XDG_CONFIG_HOME", &xdg)]).args(["segments", "--remote"]));
    assert_eq!(stdout_str(&got), local);
    let xdg_env: &[(&str, &Path)] = &[("XDG_CONFIG_HOME", &xdg)];
    // The commands a remote answer prints name the server as the command line did, so
    // they run as pasted here; the file's settings are left to the file.
    let top = stdout_str(&run_ok(client(xdg_env).args(["top", "--remote"])));
    assert!(
        top.contains("capsule query -w top-1.pcap --remote --from "),
        "{top}"
    );
    assert!(!top.contains("alice.token"), "{top}");
    // A flag wins over the file: another token (unknown: 401), another CA (TLS fails).
    let wrong = d.path().join("wrong.token");
    std::fs::write(&wrong, "0".repeat(64)).unwrap();
    let o = run(client(xdg_env).args(["segments", "--remote", "--token-file", p(&wrong)]));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr_str(&o).contains("401"), "{}", stderr_str(&o));
    let other = make_pki(&d.path().join("other").tap_mkdir());
    let o = run(client(xdg_env).args(["segments", "--remote", "--ca", p(&other.ca)]));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr_str(&o).contains("TLS"), "{}", stderr_str(&o));
    // Without --server or --remote a command is local: --store is still needed.
    let o = run(client(xdg_env).args(["segments"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr_str(&o).contains("--store"), "{}", stderr_str(&o));
    // A bad file named by $CAPSULE_CLIENT_CONFIG: its line and key; a local command does
    // not read it.
    let bad = d.path().join("bad.toml");
    std::fs::write(&bad, format!("server = \"{url}\"\n\nca = 3\n")).unwrap();
    let bad_env: &[(&str, &Path)] = &[("CAPSULE_CLIENT_CONFIG", &bad)];
    let o = run(client(bad_env).args(["segments", "--remote"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr_str(&o).contains("bad.toml:3:6: ca: wrong type"),
        "{}",
        stderr_str(&o)
    );
    run_ok(client(bad_env).args(["segments", "--store", p(&store)]));
}

/// `segments=` on `/v1/packets` and `/v1/count` (what a fleet question sends each node: its
/// candidate segments): only those are read, and a listed segment the store does not hold
/// is named in the answer's partial note (header or trailer), never silently skipped.
#[test]
fn a_segment_list_reads_only_those_segments_and_names_one_not_held() {
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("in.pcap");
    synth(&pcap, &d.path().join("truth.json"), 7, "2s", "30M", None);
    let store = d.path().join("store");
    import_ok(&store, &["--segment-size", "1M"], &[p(&pcap)]);
    let segs = segments(&store);
    assert!(segs.len() >= 3, "{} segments", segs.len());
    let (one, two) = (&segs[0], &segs[2]);
    let total: u64 = segs.iter().map(|s| s.packets).sum();
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let s = start(d.path(), &store, &tokens, &[]);
    // The count, and its capsule-partial header (curl -D).
    let count = |query: &str| {
        let (body, head) = (d.path().join("count.json"), d.path().join("count.head"));
        let mut c = s.curl_cmd(&format!("/v1/count?{query}"), Some(&t), &body);
        c.args(["-D", p(&head)]);
        let o = run_ok(&mut c);
        assert_eq!(stdout_str(&o).trim(), "200", "{query}");
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&body).unwrap()).expect("a count");
        let partial = std::fs::read_to_string(&head)
            .unwrap()
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("capsule-partial:"))
            .map(str::to_string);
        (v["packets"].as_u64().unwrap(), partial)
    };
    assert_eq!(count(""), (total, None));
    let list = format!("segments={}%2C{}", one.seq, two.seq);
    assert_eq!(count(&list), (one.packets + two.packets, None));
    let (n, partial) = count(&format!("{list}%2C99999"));
    assert_eq!(n, one.packets + two.packets);
    let partial = partial.expect("a segment not held makes the answer partial");
    assert!(partial.contains("segment 99999"), "{partial}");

    // The packets: exactly those of the listed segment, and the trailer names the other.
    let body = d.path().join("pulled.pcap");
    let o = run_ok(&mut s.curl_cmd(
        &format!("/v1/packets?segments={}", one.seq),
        Some(&t),
        &body,
    ));
    assert_eq!(stdout_str(&o).trim(), "200");
    let got = decode_file(&body);
    assert_eq!(got.packets.len() as u64, one.packets);
    let (a, z) = (one.first_ns.unwrap(), one.last_ns.unwrap());
    assert!(got.packets.iter().all(|p| p.ts_ns >= a && p.ts_ns <= z));
    let g = s.get("/v1/packets?segments=1%2Cx", Some(&t));
    assert_eq!(g.status, 400);
    assert!(
        error_of(&g).starts_with("invalid value for segments"),
        "{}",
        error_of(&g)
    );
    let g = s.get("/v1/packets?segments=99999&format=pcapng", Some(&t));
    assert_eq!(g.status, 200);
    let c = decode(&g.body);
    assert!(c.packets.is_empty());
    // The file says what it misses (its closing section's comment).
    assert!(String::from_utf8_lossy(&g.body).contains("segment 99999"));
}

/// `bpf=` on `/v1/packets` and `/v1/count`: the server applies the tcpdump expression as
/// `query --bpf` does (byte-identical files, equal counts; `query --server --bpf` uses it),
/// and refuses one that does not compile with 400, checked in its guard's child.
#[test]
fn bpf_is_served_as_the_local_query_applies_it() {
    let d = tempfile::tempdir().unwrap();
    let store = make_store(d.path(), "30M");
    let tokens = d.path().join("tokens");
    let t = add_token(&tokens, "alice");
    let token_file = d.path().join("alice.token");
    std::fs::write(&token_file, format!("{t}\n")).unwrap();
    let s = start(d.path(), &store, &tokens, &[]);
    let url = format!("https://{}", s.addr);
    let expr = "tcp[tcpflags] & tcp-syn != 0 or udp";
    for format in ["pcap", "pcapng"] {
        let local = d.path().join(format!("local.{format}"));
        let want = query_ok(&store, &local, &["--format", format, "--bpf", expr]);
        let all = query_ok(&store, &local, &["--format", format]);
        assert!(decode(&want).packets.len() < decode(&all).packets.len() / 2);
        assert!(!decode(&want).packets.is_empty());
        let got = s.get(
            &format!("/v1/packets?format={format}&bpf={}", enc(expr)),
            Some(&t),
        );
        assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
        assert!(got.body == want, "{format}: the served file differs");
        let out = d.path().join(format!("remote.{format}"));
        run_ok(
            capsule()
                .args(["query", "--server", &url, "--token-file", p(&token_file)])
                .args(["--ca", p(&s.ca), "-w", p(&out), "--format", format])
                .args(["--bpf", expr]),
        );
        assert!(std::fs::read(&out).unwrap() == want, "query --server --bpf");
    }
    let count = |server: bool| {
        let mut c = capsule();
        c.args(["query", "--count", "--json", "--bpf", expr]);
        if server {
            c.args([
                "--server",
                &url,
                "--token-file",
                p(&token_file),
                "--ca",
                p(&s.ca),
            ]);
        } else {
            c.args(["--store", p(&store)]);
        }
        let v: serde_json::Value = serde_json::from_slice(&run_ok(&mut c).stdout).unwrap();
        (v["packets"].as_u64().unwrap(), v["bytes"].as_u64().unwrap())
    };
    assert_eq!(count(true), count(false));
    let g = s.get(&format!("/v1/packets?bpf={}", enc("tcp[[")), Some(&t));
    assert_eq!(g.status, 400);
    assert!(error_of(&g).contains("bpf"), "{}", error_of(&g));
    let g = s.get(&format!("/v1/count?bpf={}", enc("tcp[[")), Some(&t));
    assert_eq!(g.status, 400);
}
