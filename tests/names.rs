//! Application names from real clients: curl over TLS 1.2 and 1.3 to `openssl s_server`,
//! curl over HTTP/1.1 and HTTP/2 (prior knowledge) to python's http.server, and `dig`
//! against a small python DNS responder, all on loopback, captured with `tcpdump -i lo`,
//! imported, and each flow's names (`capsule flows --json`) compared with what tshark
//! extracts from the same packets.
//!
//! Run: `cargo test --release --test names`. Needs tcpdump, tshark, openssl, curl, dig,
//! python3 (scripts/deps.sh), and the right to capture on lo (root or CAP_NET_RAW).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A child process killed (by its PID) and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_tcp(port: u16) {
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const DNS_RESPONDER: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(sys.argv[1])))
a4 = bytes(int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "127.0.0.77").split("."))
print("ready", flush=True)
while True:
    q, peer = s.recvfrom(4096)
    tid, flags, qd = struct.unpack("!HHH", q[:6])
    i = 12
    while q[i] != 0:
        i += q[i] + 1
    qtype = struct.unpack("!H", q[i+1:i+3])[0]
    question = q[12:i+5]
    ans = b""
    n = 0
    if qtype == 1:
        ans = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + a4
        n = 1
    elif qtype == 28:
        ans = b"\xc0\x0c" + struct.pack("!HHIH", 28, 1, 60, 16) + bytes.fromhex("20010db8000000000000000000000077")
        n = 1
    s.sendto(struct.pack("!HHHHHH", tid, 0x8180, 1, n, 0, 0) + question + ans, peer)
"#;

/// A self-signed certificate and its key, in `dir`.
fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    run_ok(Command::new("openssl").args([
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        p(&key),
        "-out",
        p(&cert),
        "-days",
        "1",
        "-subj",
        "/CN=capsule-test",
    ]));
    (key, cert)
}

/// `tcpdump -i lo` writing `cap`, started and listening.
fn tcpdump_lo(cap: &Path, filter: &str) -> Proc {
    let mut t = Proc(
        Command::new("tcpdump")
            // Immediate mode: no packet waits in the ring for a block to fill (those would be
            // lost at SIGINT).
            .args([
                "-i",
                "lo",
                "-U",
                "--immediate-mode",
                "-n",
                "-w",
                p(cap),
                filter,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    use std::io::BufRead;
    let err = t.0.stderr.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(err).read_line(&mut line).unwrap();
    assert!(line.contains("listening"), "tcpdump: {line}");
    std::thread::sleep(Duration::from_millis(500));
    t
}

/// Stops `tcpdump_lo`'s capture (it writes its last packets on SIGINT).
fn stop_tcpdump(mut t: Proc) {
    std::thread::sleep(Duration::from_millis(1000));
    assert!(signal(t.0.id(), Signal::INT), "tcpdump is gone");
    let _ = t.0.wait();
}

/// `dig` asking the responder on 127.0.0.1:`port` for `name`'s records of type `ty`.
fn dig(port: u16, name: &str, ty: &str) {
    run_ok(Command::new("dig").args([
        "@127.0.0.1",
        "-p",
        &port.to_string(),
        "+tries=1",
        "+time=3",
        name,
        ty,
    ]));
}

/// `python3 -c SCRIPT ARGS...`, started, once it printed `ready`.
fn python_ready(script: &str, args: &[&str]) -> Proc {
    let mut child = Proc(
        Command::new("python3")
            .args(["-c", script])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

/// The DNS responder on 127.0.0.1:`port`, answering every A question with `a`; ready.
fn dns_responder(port: u16, a: &str) -> Proc {
    python_ready(DNS_RESPONDER, &[&port.to_string(), a])
}

/// tshark's `-d` (decode as) rules for the test's ports.
static DECODE_AS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn flows_json(store: &Path) -> Vec<serde_json::Value> {
    let o = run_ok(capsule().args(["flows", "--store", p(store), "--json", "--limit", "100000"]));
    stdout_str(&o)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON flow line"))
        .collect()
}

/// The flow (TCP or UDP) one of whose ports is `port`.
fn flow_of_port(flows: &[serde_json::Value], proto: u64, port: u16) -> &serde_json::Value {
    let found: Vec<_> = flows
        .iter()
        .filter(|f| {
            f["proto"].as_u64() == Some(proto)
                && (f["a_port"].as_u64() == Some(port.into())
                    || f["b_port"].as_u64() == Some(port.into()))
        })
        .collect();
    assert_eq!(found.len(), 1, "one flow with port {port}: {found:?}");
    found[0]
}

#[test]
fn names_of_real_clients_equal_what_tshark_extracts() {
    for t in ["tcpdump", "tshark", "openssl", "curl", "dig", "python3"] {
        need_tool(t);
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, cert) = self_signed(d);
    let (tls_port, web_port, dns_port) = (free_tcp_port(), free_tcp_port(), free_udp_port());
    *DECODE_AS.lock().unwrap() = vec![
        format!("tcp.port=={tls_port},tls"),
        format!("tcp.port=={web_port},http"),
        format!("udp.port=={dns_port},dns"),
    ];
    let cap = d.join("lo.pcap");
    let tcpdump = tcpdump_lo(
        &cap,
        &format!("port {tls_port} or port {web_port} or port {dns_port}"),
    );
    let _tls = Proc(
        Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{tls_port}"))
            .args(["-cert", p(&cert), "-key", p(&key)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _web = Proc(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &web_port.to_string(),
            ])
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The address the DNS answers give, served too: `dns NAME` finds the flows to it.
    let _answered = Proc(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.77",
                &web_port.to_string(),
            ])
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _dns = dns_responder(dns_port, "127.0.0.77");
    // No probe of the TLS server (s_server serves one connection at a time): curl retries
    // while it is not listening yet.
    wait_tcp(web_port);

    let curl = |args: &[&str]| {
        let mut c = Command::new("curl");
        c.args(["-s", "-o", "/dev/null", "--max-time", "10"])
            .args(args);
        run(&mut c)
    };
    let tls = |host: &str, v: &[&str]| {
        let mut a = vec!["-k", "--resolve"];
        let r = format!("{host}:{tls_port}:127.0.0.1");
        let u = format!("https://{host}:{tls_port}/");
        a.push(&r);
        a.extend_from_slice(v);
        a.push(&u);
        curl(&a)
    };
    let mut curls = vec![tls(
        "tls12.example.test",
        &["--tlsv1.2", "--tls-max", "1.2", "--http1.1"],
    )];
    curls.push(tls("models.example-hub.io", &["--tlsv1.3"]));
    let web = |host: &str, v: &str| {
        let r = format!("{host}:{web_port}:127.0.0.1");
        let u = format!("http://{host}:{web_port}/");
        curl(&["--resolve", &r, v, &u])
    };
    web("web.example.test", "--http1.1");
    web("h2.example.test", "--http2-prior-knowledge");
    for ty in ["A", "AAAA"] {
        dig(dns_port, "models.example-hub.io", ty);
    }
    {
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.77", web_port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "nothing listens on 127.0.0.77"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let r = format!("models.example-hub.io:{web_port}:127.0.0.77");
    let u = format!("http://models.example-hub.io:{web_port}/");
    curl(&["--resolve", &r, "--http1.1", &u]);
    stop_tcpdump(tcpdump);

    let store = d.join("store");
    import_ok(&store, &[], &[p(&cap)]);
    let flows = flows_json(&store);

    // TLS: server name and ALPN of every ClientHello, per client port.
    let hellos = tshark_fields_filtered(
        &cap,
        "tls.handshake.type == 1",
        &[
            "tcp.srcport",
            "tls.handshake.extensions_server_name",
            "tls.handshake.extensions_alpn_str",
        ],
    );
    let snis: BTreeSet<&str> = hellos.iter().map(|h| h[1].as_str()).collect();
    assert_eq!(
        snis,
        BTreeSet::from(["models.example-hub.io", "tls12.example.test"]),
        "ClientHellos: {hellos:?}; {curls:?}; packets: {:?}",
        tshark_fields_filtered(
            &cap,
            &format!("tcp.port == {tls_port}"),
            &[
                "frame.number",
                "tcp.srcport",
                "tcp.dstport",
                "tcp.flags.str",
                "tcp.len",
                "_ws.col.Info"
            ]
        )
    );
    let mut tls_ports = BTreeSet::new();
    for h in &hellos {
        let port: u16 = h[0].parse().unwrap();
        tls_ports.insert(port);
        let f = flow_of_port(&flows, 6, port);
        let n = &f["names"];
        assert_eq!(n["app"], "tls", "{f}");
        assert_eq!(n["sni"].as_str(), Some(h[1].as_str()), "{f}");
        let alpn: Vec<&str> = n["alpn"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(alpn.join(","), h[2], "{f}");
        assert!(n["ja4"].as_str().unwrap().starts_with('t'), "{f}");
    }
    // HTTP/1: Host and method of every request.
    let reqs = tshark_fields_filtered(
        &cap,
        "http.request",
        &["tcp.srcport", "http.host", "http.request.method"],
    );
    assert!(!reqs.is_empty());
    let mut http_ports = BTreeSet::new();
    for r in &reqs {
        let port: u16 = r[0].parse().unwrap();
        http_ports.insert(port);
        let f = flow_of_port(&flows, 6, port);
        assert_eq!(f["names"]["app"], "http", "{f}");
        assert_eq!(f["names"]["http_host"].as_str(), Some(r[1].as_str()), "{f}");
        assert_eq!(
            f["names"]["http_method"].as_str(),
            Some(r[2].as_str()),
            "{f}"
        );
    }
    // HTTP/2 prior knowledge: the connection preface.
    let h2 = tshark_fields_filtered(
        &cap,
        "tcp.payload contains \"PRI * HTTP/2.0\"",
        &["tcp.srcport"],
    );
    assert_eq!(h2.len(), 1, "{h2:?}");
    let f = flow_of_port(&flows, 6, h2[0][0].parse().unwrap());
    assert_eq!(f["names"]["app"], "http2", "{f}");
    // DNS: query names and A/AAAA answers, per client port.
    let answers = tshark_fields_filtered(
        &cap,
        "dns.flags.response == 1",
        &["udp.dstport", "dns.qry.name", "dns.a", "dns.aaaa"],
    );
    assert_eq!(answers.len(), 2, "{answers:?}");
    let mut dns_ports = BTreeSet::new();
    for a in &answers {
        let port: u16 = a[0].parse().unwrap();
        dns_ports.insert(port);
        let f = flow_of_port(&flows, 17, port);
        let n = &f["names"];
        assert_eq!(n["app"], "dns", "{f}");
        assert_eq!(n["dns_queries"][0].as_str(), Some(a[1].as_str()), "{f}");
        let addr = if a[2].is_empty() { &a[3] } else { &a[2] };
        let got: Vec<&str> = n["dns_answers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["addr"].as_str().unwrap())
            .collect();
        assert_eq!(got, vec![addr.as_str()], "{f}");
    }
    // The application of every flow: the ones tshark names, and nothing else named.
    let mut by_app: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    for f in &flows {
        let app = f["names"]["app"].as_str().unwrap_or("none").to_string();
        let client = [f["a_port"].as_u64(), f["b_port"].as_u64()]
            .into_iter()
            .flatten()
            .map(|p| p as u16)
            .find(|p| ![tls_port, web_port, dns_port].contains(p))
            .unwrap();
        by_app.entry(app).or_default().insert(client);
    }
    assert!(
        by_app.get("tls").is_some_and(|t| t.is_superset(&tls_ports)),
        "{by_app:?}"
    );
    assert_eq!(by_app.get("http"), Some(&http_ports), "{by_app:?}");
    assert_eq!(by_app.get("dns"), Some(&dns_ports), "{by_app:?}");

    // Name filters select exactly the flows tshark's display filters select (client ports).
    let fixed = [tls_port, web_port, dns_port];
    let capsule_ports = |filter: &str| -> BTreeSet<u16> {
        let o = run_ok(capsule().args([
            "flows",
            "--store",
            p(&store),
            "--json",
            "--limit",
            "100000",
            filter,
        ]));
        stdout_str(&o)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let f: serde_json::Value = serde_json::from_str(l).unwrap();
                [f["a_port"].as_u64(), f["b_port"].as_u64()]
                    .into_iter()
                    .flatten()
                    .map(|p| p as u16)
                    .find(|p| !fixed.contains(p))
                    .unwrap()
            })
            .collect()
    };
    let tshark_ports = |filter: &str| -> BTreeSet<u16> {
        tshark_fields_filtered(
            &cap,
            filter,
            &["tcp.srcport", "tcp.dstport", "udp.srcport", "udp.dstport"],
        )
        .iter()
        .flat_map(|l| {
            l.iter()
                .filter_map(|x| x.parse::<u16>().ok())
                .collect::<Vec<_>>()
        })
        .filter(|p| !fixed.contains(p))
        .collect()
    };
    for (ours, theirs) in [
        (
            "sni models.example-hub.io",
            "tls.handshake.extensions_server_name == \"models.example-hub.io\"",
        ),
        (
            "sni *.example.test",
            "tls.handshake.extensions_server_name contains \".example.test\"",
        ),
        // A connection closed before its ClientHello (the test's probe) gets the server's
        // TLS alert: TLS for tshark and capsule alike.
        ("app tls", "tls"),
        ("app dns", "dns"),
        (
            "http.host web.example.test",
            "http.host == \"web.example.test:WEB\"",
        ),
        (
            "http.host *.example-hub.io",
            "http.host contains \".example-hub.io\"",
        ),
        ("dns models.example-hub.io", "ip.addr == 127.0.0.77"),
        (
            "dns *.example-hub.io and tcp",
            "ip.addr == 127.0.0.77 and tcp",
        ),
        (
            "sni nothing.example",
            "tls.handshake.extensions_server_name == \"nothing.example\"",
        ),
    ] {
        let theirs = theirs.replace("WEB", &web_port.to_string());
        let want = tshark_ports(&theirs);
        assert_eq!(capsule_ports(ours), want, "{ours} vs tshark {theirs}");
    }
    let answered: Vec<_> = flows
        .iter()
        .filter(|f| f["a"] == "127.0.0.77" || f["b"] == "127.0.0.77")
        .collect();
    assert!(
        !capsule_ports("dns models.example-hub.io").is_empty(),
        "flows of 127.0.0.77: {answered:?}; tshark: {:?}",
        tshark_fields_filtered(
            &cap,
            "ip.addr == 127.0.0.77",
            &["frame.number", "ip.src", "ip.dst"]
        )
    );
    // A packet query by name: exactly the packets of the flows named.
    let sni_client = *capsule_ports("sni models.example-hub.io")
        .iter()
        .next()
        .unwrap();
    let out = d.join("sni.pcap");
    query_ok(&store, &out, &["sni models.example-hub.io"]);
    let want = tshark_fields_filtered(
        &cap,
        &format!("tcp.port == {sni_client}"),
        &["frame.number"],
    )
    .len() as u64;
    assert_eq!(capinfos_packets(&out), want);

    // The table names the server.
    let o = run_ok(capsule().args(["flows", "--store", p(&store)]));
    assert!(
        stdout_str(&o).contains("(tls: models.example-hub.io)"),
        "{}",
        stdout_str(&o)
    );
}

/// `tshark -r FILE -Y FILTER -T fields -e ...`, each line split at tabs.
fn tshark_fields_filtered(file: &Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    let decode = DECODE_AS.lock().unwrap().clone();
    tshark_fields_as(file, &decode, filter, fields)
}

/// [`tshark_fields_filtered`] with the `-d` (decode as) rules `decode`.
fn tshark_fields_as(
    file: &Path,
    decode: &[String],
    filter: &str,
    fields: &[&str],
) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r", p(file), "-Y", filter, "-T", "fields"]);
    // The servers listen on unregistered ports: tell tshark what they speak.
    for d in decode {
        cmd.args(["-d", d]);
    }
    for f in fields {
        cmd.args(["-e", f]);
    }
    stdout_str(&run_ok(&mut cmd))
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// TLS servers on some loopback addresses and plain TCP sinks on others, all on one port:
/// each connection is read to its end. Prints `ready` once every socket listens.
const SERVERS: &str = r#"
import socket, ssl, sys, threading
port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
def handle(c, tls):
    try:
        if tls:
            c = ctx.wrap_socket(c, server_side=True)
        while c.recv(65536):
            pass
    except Exception:
        pass
    c.close()
def accept(s, tls):
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c, tls), daemon=True).start()
for addrs, tls in ((sys.argv[4], True), (sys.argv[5], False)):
    for a in addrs.split(","):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((a, port))
        s.listen(16)
        threading.Thread(target=accept, args=(s, tls), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#;

/// One client connection: from SRC to DST:PORT, TOS byte TOS on its packets, TLS with the
/// server name SNI (`-`: plain TCP), N bytes sent, then closed.
const CLIENT: &str = r#"
import socket, ssl, sys
src, dst, port, sni, tos, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
s = socket.socket()
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
s.bind((src, 0))
s.connect((dst, port))
if sni != "-":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = ctx.wrap_socket(s, server_hostname=sni)
s.sendall(b"x" * n)
s.close()
"#;

/// `capsule ARGS --json` that must succeed, as one JSON document.
fn json_of(args: &[&str]) -> serde_json::Value {
    let mut cmd = capsule();
    cmd.args(args).arg("--json");
    let o = run_ok(&mut cmd);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{}: not one JSON document: {e}", show(&cmd)))
}

/// A day name three days from today (UTC): working hours on it leave all of today out.
fn not_today() -> &'static str {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 86_400;
    // 1970-01-01 was a Thursday.
    ["thu", "fri", "sat", "sun", "mon", "tue", "wed"][((days + 3) % 7) as usize]
}

/// Names in the analytics and the policy, on traffic of real clients on loopback: a sender
/// in group `store` (127.0.0.5, EF marked where the policy gives EF to another group only)
/// opens TLS to 127.0.0.77 (`models.example-hub.io`) and 127.0.0.78
/// (`files.backup.example.com`), asks a DNS server for `files.backup.example.com`
/// (127.0.0.79) and sends to that address over plain TCP, and to 127.0.0.80, which nothing
/// names. With `[egress] store = ["*.backup.example.com"]`: the two destinations named
/// under that name (by a ClientHello, by a DNS answer) are allowed, the other two are found
/// by `alerts`, `matrix` and `triage`, each named as tshark names it (or not at all); the
/// off-hours rule, the DSCP violation, `top` and `tcp` name them too. Then the index of the
/// store is put back to version 5 (no names): a name filter over it is a partial answer
/// (exit 3) naming the segment, in `flows`, `query` and `top`, until `capsule reindex`.
#[test]
fn names_reach_every_answer_and_egress_allow_lists_take_names() {
    for t in ["tcpdump", "tshark", "openssl", "dig", "python3"] {
        need_tool(t);
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, cert) = self_signed(d);
    let (port, dns_port) = (free_tcp_port(), free_udp_port());
    let decode = [
        format!("tcp.port=={port},tls"),
        format!("udp.port=={dns_port},dns"),
    ];
    let cap = d.join("lo.pcap");
    let tcpdump = tcpdump_lo(&cap, &format!("port {port} or port {dns_port}"));
    let _servers = python_ready(
        SERVERS,
        &[
            &port.to_string(),
            p(&cert),
            p(&key),
            "127.0.0.77,127.0.0.78",
            "127.0.0.79,127.0.0.80",
        ],
    );
    let _dns = dns_responder(dns_port, "127.0.0.79");
    let client = |dst: &str, sni: &str, tos: u8| {
        run_ok(Command::new("python3").args([
            "-c",
            CLIENT,
            "127.0.0.5",
            dst,
            &port.to_string(),
            sni,
            &tos.to_string(),
            "20000",
        ]));
    };
    client("127.0.0.77", "models.example-hub.io", 46 << 2);
    client("127.0.0.78", "files.backup.example.com", 0);
    dig(dns_port, "files.backup.example.com", "A");
    client("127.0.0.79", "-", 0);
    client("127.0.0.80", "-", 0);
    stop_tcpdump(tcpdump);

    let store = d.join("store");
    import_ok(&store, &[], &[p(&cap)]);
    let config = d.join("capsule.toml");
    std::fs::write(
        &config,
        format!(
            "[groups]\nstore = [\"127.0.0.5\"]\nvoice = [\"127.0.0.200\"]\n\
             [dscp]\nef = [\"voice\"]\n\
             [egress]\nstore = [\"*.backup.example.com\"]\n\
             [work_hours]\ndays = \"{}\"\nstart = \"08:00\"\nend = \"19:00\"\n\
             timezone = \"UTC\"\n\
             [alerts]\negress_bytes = 1000\negress_window = \"10s\"\n\
             off_hours_bytes = 1000\ndscp_bytes = 1000\n",
            not_today()
        ),
    )
    .unwrap();
    let (s, c) = (p(&store), p(&config));

    // What tshark reads: each ClientHello's server name by destination, and the address
    // the DNS answer gave for the name asked.
    let sni_of: BTreeMap<String, String> = tshark_fields_as(
        &cap,
        &decode,
        "tls.handshake.type == 1",
        &["ip.dst", "tls.handshake.extensions_server_name"],
    )
    .into_iter()
    .map(|l| (l[0].clone(), l[1].clone()))
    .collect();
    assert_eq!(sni_of.len(), 2, "{sni_of:?}");
    let answers = tshark_fields_as(
        &cap,
        &decode,
        "dns.flags.response == 1",
        &["dns.qry.name", "dns.a"],
    );
    assert_eq!(
        answers,
        vec![vec![
            "files.backup.example.com".to_string(),
            "127.0.0.79".to_string()
        ]]
    );
    let hub = &sni_of["127.0.0.77"];
    let asked = &answers[0][0];

    // Alerts: egress to the two destinations no allowed name names; off hours to all four.
    let a = json_of(&["alerts", "--store", s, "--config", c]);
    let alerts = a["alerts"].as_array().unwrap();
    let of = |rule: &str| -> BTreeMap<String, &serde_json::Value> {
        alerts
            .iter()
            .filter(|x| x["rule"] == rule)
            .map(|x| (x["entity"]["hosts"][1].as_str().unwrap().to_string(), x))
            .collect()
    };
    let egress = of("egress");
    assert_eq!(
        egress.keys().collect::<Vec<_>>(),
        ["127.0.0.77", "127.0.0.80"],
        "{alerts:#?}"
    );
    let e77 = egress["127.0.0.77"];
    assert_eq!(
        e77["figures"]["dst_name"]["name"].as_str(),
        Some(hub.as_str()),
        "{e77:#}\n{}",
        stdout_str(&run_ok(capsule().args(["flows", "--store", s, "--json"])))
    );
    assert_eq!(e77["figures"]["dst_name"]["by"], "sni");
    let named = format!("127.0.0.77:{port} (tls: {hub})");
    assert!(
        e77["summary"].as_str().unwrap().contains(&named),
        "{}",
        e77["summary"]
    );
    assert!(egress["127.0.0.80"]["figures"]["dst_name"].is_null());
    let off = of("off_hours");
    assert_eq!(off.len(), 4, "{alerts:#?}");
    assert_eq!(
        off["127.0.0.79"]["figures"]["dst_name"]["dns_names"],
        serde_json::json!([asked])
    );
    assert!(off["127.0.0.79"]["summary"]
        .as_str()
        .unwrap()
        .contains(&format!("127.0.0.79:{port} (dns answer: {asked})")));
    assert_eq!(
        off["127.0.0.78"]["figures"]["dst_name"]["name"].as_str(),
        Some(sni_of["127.0.0.78"].as_str())
    );
    // The DSCP violation names its destination.
    let dscp = of("dscp");
    assert_eq!(dscp.len(), 1, "{alerts:#?}");
    let v = &dscp["127.0.0.77"]["figures"]["destinations"][0];
    assert_eq!(v["dst_name"]["name"].as_str(), Some(hub.as_str()));

    // matrix: the flagged flows of store -> unassigned are the two, named as above.
    let m = json_of(&["matrix", "--store", s, "--config", c]);
    let cell = m["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["src_group"] == "store" && x["dst_group"] == "unassigned")
        .unwrap();
    let flagged: BTreeMap<&str, &serde_json::Value> = cell["flagged_flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["dst"].as_str().unwrap(), &f["dst_name"]))
        .collect();
    assert_eq!(
        flagged.keys().copied().collect::<Vec<_>>(),
        ["127.0.0.77", "127.0.0.80"]
    );
    assert_eq!(
        flagged["127.0.0.77"]["describe"].as_str(),
        Some(format!("tls: {hub}").as_str())
    );
    let text = stdout_str(&run_ok(
        capsule().args(["matrix", "--store", s, "--config", c]),
    ));
    assert!(text.contains(&format!("127.0.0.77 (tls: {hub})")), "{text}");
    // dscp: the violation's destination.
    let dj = json_of(&["dscp", "--store", s, "--config", c]);
    let viol = &dj["violations"][0];
    assert_eq!(viol["dst"], "127.0.0.77");
    assert_eq!(viol["dst_name"]["name"].as_str(), Some(hub.as_str()));
    // top: each flow row named as `flows` names it, the answered address by the answer.
    let t = json_of(&["top", "--store", s, "--key", "flow", "--limit", "100"]);
    let row_name = |host: &str| {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["key"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("{host}:{port}"))
            })
            .unwrap()["name"]
            .clone()
    };
    assert_eq!(row_name("127.0.0.77"), format!("tls: {hub}"));
    assert_eq!(row_name("127.0.0.79"), format!("dns answer: {asked}"));
    assert!(row_name("127.0.0.80").is_null());
    let td = json_of(&["top", "--store", s, "--key", "dst", "--limit", "100"]);
    let dst79 = td["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "127.0.0.79")
        .unwrap();
    assert_eq!(dst79["name"], format!("dns answer: {asked}"));

    // triage: the findings and the report name the destinations too.
    let out = d.join("triage");
    run_ok(capsule().args([
        "triage",
        "--store",
        s,
        "--config",
        c,
        "-o",
        p(&out),
        "--quiet",
    ]));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("findings.json")).unwrap()).unwrap();
    let f77 = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["kind"] == "egress" && x["hosts"][1] == "127.0.0.77")
        .unwrap();
    assert!(f77["summary"].as_str().unwrap().contains(&named), "{f77}");
    assert_eq!(
        f77["figures"]["dst_name"]["name"].as_str(),
        Some(hub.as_str())
    );
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(report.contains(&named), "{report}");

    // An index without names (version 5, as before names were kept): a name filter over
    // it says which segment it could not see, and exits 3; other filters do not.
    let idx_dir = store.join("index");
    let idx: Vec<_> = std::fs::read_dir(&idx_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|x| x.extension().is_some_and(|e| e == "idx"))
        .collect();
    assert_eq!(idx.len(), 1, "{idx:?}");
    let mut old =
        capsule_index::sideindex::SegmentIndex::decode(&std::fs::read(&idx[0]).unwrap()).unwrap();
    let seq = old.seq;
    old.named = false;
    std::fs::write(&idx[0], old.encode()).unwrap();
    let sni = format!("sni {hub}");
    let flows = |filter: &str| run(capsule().args(["flows", "--store", s, "--json", filter]));
    let o = flows(&sni);
    assert_eq!(o.status.code(), Some(3), "{}", stderr_str(&o));
    assert!(
        stderr_str(&o).contains(&format!("segment(s) [{seq}] have no names")),
        "{}",
        stderr_str(&o)
    );
    assert_eq!(flows("tcp").status.code(), Some(0));
    let o = run(capsule().args(["query", "--store", s, "-w", p(&d.join("q.pcap")), &sni]));
    assert_eq!(o.status.code(), Some(3), "{}", stderr_str(&o));
    assert!(
        stderr_str(&o).contains(&format!("[{seq}]")),
        "{}",
        stderr_str(&o)
    );
    let o = run(capsule().args(["top", "--store", s, "--key", "flow", &sni]));
    assert_eq!(o.status.code(), Some(3), "{}", stderr_str(&o));
    // reindex writes the names again: whole answers, the flow found.
    run_ok(capsule().args(["reindex", "--store", s]));
    let o = flows(&sni);
    assert_eq!(o.status.code(), Some(0), "{}", stderr_str(&o));
    assert_eq!(stdout_str(&o).lines().count(), 1, "{}", stdout_str(&o));
}

/// A QUIC client (aioquic, a real one, with its own TLS 1.3) to a UDP port that only reads:
/// it sends its Initial packets (and resends them) until its timeout.
const QUIC_CLIENT: &str = r#"
import asyncio, ssl, sys
from aioquic.asyncio import connect
from aioquic.quic.configuration import QuicConfiguration
async def main():
    cfg = QuicConfiguration(is_client=True, alpn_protocols=["h3"], server_name=sys.argv[3])
    cfg.verify_mode = ssl.CERT_NONE
    async with connect(sys.argv[1], int(sys.argv[2]), configuration=cfg) as c:
        pass
try:
    asyncio.run(asyncio.wait_for(main(), 1.5))
except BaseException:
    pass
"#;

/// The QUIC Initial's server name and ALPN, from a real client's packets: what capsule
/// reads (keys derived from the client's first DCID, header protection and AES-128-GCM
/// removed, CRYPTO frames joined) equals what tshark decrypts from the same packets, and
/// the `sni` and `app quic` filters select exactly tshark's QUIC flows.
#[test]
fn the_quic_initials_server_name_equals_what_tshark_decrypts() {
    for t in ["tcpdump", "tshark", "python3"] {
        need_tool(t);
    }
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/install_aioquic.sh"
        ))
        .output()
        .expect("run scripts/install_aioquic.sh");
    assert!(
        out.status.success(),
        "install_aioquic.sh: {}",
        stderr_str(&out)
    );
    let py = stdout_str(&out).trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A UDP socket that reads and answers nothing (so no ICMP port-unreachable ends the
    // client early).
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sink.local_addr().unwrap().port();
    let decode = [format!("udp.port=={port},quic")];
    let cap = d.join("quic.pcap");
    let tcpdump = tcpdump_lo(&cap, &format!("udp port {port}"));
    for name in ["models.example-hub.io", "cdn.example.test"] {
        let o =
            run(Command::new(&py).args(["-c", QUIC_CLIENT, "127.0.0.1", &port.to_string(), name]));
        assert!(o.status.success(), "{}", stderr_str(&o));
    }
    stop_tcpdump(tcpdump);
    drop(sink);
    let store = d.join("store");
    import_ok(&store, &[], &[p(&cap)]);
    let flows = flows_json(&store);
    let hellos = tshark_fields_as(
        &cap,
        &decode,
        "tls.handshake.type == 1",
        &[
            "udp.srcport",
            "tls.handshake.extensions_server_name",
            "tls.handshake.extensions_alpn_str",
        ],
    );
    let by_port: BTreeMap<u16, (String, String)> = hellos
        .iter()
        .map(|h| (h[0].parse().unwrap(), (h[1].clone(), h[2].clone())))
        .collect();
    assert_eq!(by_port.len(), 2, "tshark's ClientHellos: {hellos:?}");
    for (port, (sni, alpn)) in &by_port {
        let f = flow_of_port(&flows, 17, *port);
        let n = &f["names"];
        assert_eq!(n["app"], "quic", "{f}");
        assert_eq!(n["sni"].as_str(), Some(sni.as_str()), "{f}");
        let got: Vec<&str> = n["alpn"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(got.join(","), *alpn, "{f}");
        assert!(n["ja4"].as_str().unwrap().starts_with('q'), "{f}");
    }
    // The name filters select exactly tshark's flows.
    let ports = |filter: &str| -> BTreeSet<u16> {
        let o = run_ok(capsule().args(["flows", "--store", p(&store), "--json", filter]));
        stdout_str(&o)
            .lines()
            .map(|l| {
                let f: serde_json::Value = serde_json::from_str(l).unwrap();
                [f["a_port"].as_u64(), f["b_port"].as_u64()]
                    .into_iter()
                    .flatten()
                    .map(|x| x as u16)
                    .find(|x| *x != port)
                    .unwrap()
            })
            .collect()
    };
    let theirs = |filter: &str| -> BTreeSet<u16> {
        tshark_fields_as(&cap, &decode, filter, &["udp.srcport"])
            .iter()
            .filter_map(|l| l[0].parse().ok())
            .filter(|x| *x != port)
            .collect()
    };
    assert_eq!(
        ports("sni models.example-hub.io"),
        theirs("tls.handshake.extensions_server_name == \"models.example-hub.io\"")
    );
    assert_eq!(ports("app quic"), theirs("quic"));
    assert_eq!(ports("app quic").len(), 2);
}

/// The two ends of a flow or a packet, (address, port) each, in a fixed order.
type Ends = ((String, u16), (String, u16));

fn ends(x: (String, u16), y: (String, u16)) -> Ends {
    if x <= y {
        (x, y)
    } else {
        (y, x)
    }
}

/// (ends, the row's remaining fields) of every packet tshark's display filter `filter`
/// selects: IPv4 or IPv6 addresses, TCP or UDP ports, then `fields`.
fn tshark_ends(file: &Path, filter: &str, fields: &[&str]) -> Vec<(Ends, Vec<String>)> {
    let mut all = vec![
        "ip.src",
        "ipv6.src",
        "tcp.srcport",
        "udp.srcport",
        "ip.dst",
        "ipv6.dst",
        "tcp.dstport",
        "udp.dstport",
    ];
    all.extend_from_slice(fields);
    tshark_fields_as(file, &[], filter, &all)
        .into_iter()
        .map(|r| {
            let pick = |a: &str, b: &str| if a.is_empty() { b } else { a }.to_string();
            let port = |a: &str, b: &str| pick(a, b).parse::<u16>().unwrap();
            let src = (pick(&r[0], &r[1]), port(&r[2], &r[3]));
            let dst = (pick(&r[4], &r[5]), port(&r[6], &r[7]));
            (ends(src, dst), r[8..].to_vec())
        })
        .collect()
}

/// The synthetic generator's HTTP requests, DNS questions and answers and TLS sessions, as
/// capsule names them per flow, equal what tshark extracts from the same packets; no other
/// flow is given an application.
#[test]
fn the_synthetic_generators_names_equal_what_tshark_extracts() {
    need_tool("tshark");
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("synth.pcap");
    synth(&pcap, &d.path().join("truth.json"), 7, "3s", "20M", None);
    let store = d.path().join("store");
    import_ok(&store, &[], &[p(&pcap)]);
    let mut flows: BTreeMap<Ends, serde_json::Value> = BTreeMap::new();
    for f in flows_json(&store) {
        let end = |k: &str| {
            let port = f[format!("{k}_port")].as_u64().unwrap_or(0) as u16;
            (f[k].as_str().unwrap().to_string(), port)
        };
        let key = ends(end("a"), end("b"));
        assert!(flows.insert(key.clone(), f).is_none(), "{key:?} twice");
    }
    let named = |app: &str| -> BTreeSet<Ends> {
        flows
            .iter()
            .filter(|(_, f)| f["names"]["app"].as_str() == Some(app))
            .map(|(k, _)| k.clone())
            .collect()
    };

    // HTTP/1: every request's Host and method on its flow.
    let reqs = tshark_ends(&pcap, "http.request", &["http.host", "http.request.method"]);
    assert!(reqs.len() >= 5, "{} HTTP requests", reqs.len());
    for (k, r) in &reqs {
        let n = &flows[k]["names"];
        assert_eq!(n["http_host"].as_str(), Some(r[0].as_str()), "{k:?}: {n}");
        assert_eq!(n["http_method"].as_str(), Some(r[1].as_str()), "{k:?}: {n}");
    }
    let http: BTreeSet<Ends> = tshark_ends(&pcap, "http", &[])
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(named("http"), http, "flows named http vs tshark's");

    // DNS: the question's name and every A/AAAA answer, per flow.
    let answers = tshark_ends(
        &pcap,
        "dns.flags.response == 1",
        &["dns.qry.name", "dns.a", "dns.aaaa"],
    );
    assert!(answers.len() >= 5, "{} DNS answers", answers.len());
    let mut want: BTreeMap<Ends, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    for (k, r) in &answers {
        let w = want.entry(k.clone()).or_default();
        w.0.insert(r[0].clone());
        let addrs = r[1].split(',').chain(r[2].split(','));
        w.1.extend(addrs.filter(|a| !a.is_empty()).map(str::to_string));
    }
    for (k, (names, addrs)) in &want {
        let n = &flows[k]["names"];
        let got_names: BTreeSet<String> = n["dns_queries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect();
        let got_addrs: BTreeSet<String> = n["dns_answers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["addr"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(&got_names, names, "{k:?}: {n}");
        assert_eq!(&got_addrs, addrs, "{k:?}: {n}");
    }
    let dns: BTreeSet<Ends> = tshark_ends(&pcap, "dns", &[])
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(named("dns"), dns, "flows named dns vs tshark's");

    // TLS: the sessions tshark decodes, and their server names where a ClientHello has one.
    let tls: BTreeSet<Ends> = tshark_ends(&pcap, "tls", &[])
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert!(!tls.is_empty());
    assert_eq!(named("tls"), tls, "flows named tls vs tshark's");
    for (k, r) in tshark_ends(
        &pcap,
        "tls.handshake.type == 1",
        &["tls.handshake.extensions_server_name"],
    ) {
        let sni = flows[&k]["names"]["sni"].as_str().map(str::to_string);
        assert_eq!(sni, Some(r[0].clone()).filter(|s| !s.is_empty()), "{k:?}");
    }

    // Nothing else is given an application.
    let others: Vec<_> = flows
        .iter()
        .filter(|(_, f)| {
            let app = f["names"]["app"].as_str().unwrap_or("unknown");
            !["http", "dns", "tls", "unknown"].contains(&app)
        })
        .collect();
    assert!(others.is_empty(), "named by capsule only: {others:#?}");
}

/// A flow's names do not depend on the order the index sees its packets in: the same trace
/// with microsecond timestamps (many packets then share one, and a run of equal timestamps
/// stays in one lane of the store, so a flow's packets lie in several lanes' blocks, cut at
/// other times) gives every flow the names the nanosecond trace gives (issue 32).
#[test]
fn names_do_not_depend_on_where_the_store_cut_a_flows_packets() {
    need_tool("editcap");
    let d = tempfile::tempdir().unwrap();
    let ns = d.path().join("s3.pcap");
    synth(&ns, &d.path().join("t3.json"), 3, "2s", "20M", None);
    let us = d.path().join("s3us.pcap");
    run_ok(Command::new("editcap").args(["-F", "pcap", p(&ns), p(&us)]));
    let names = |file: &Path, store: &str| -> BTreeMap<String, serde_json::Value> {
        let store = d.path().join(store);
        import_ok(&store, &["--segment-size", "1M"], &[p(file)]);
        let mut m = BTreeMap::new();
        for f in flows_json(&store) {
            let key = format!(
                "{} {}:{} {}:{}",
                f["proto"], f["a"], f["a_port"], f["b"], f["b_port"]
            );
            assert!(
                m.insert(key.clone(), f["names"].clone()).is_none(),
                "{key} twice"
            );
        }
        m
    };
    let (a, b) = (names(&ns, "ns"), names(&us, "us"));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "the same flows"
    );
    let named = a.values().filter(|n| !n.is_null()).count();
    assert!(named > 20, "{named} flows named");
    let differ: Vec<String> = a
        .iter()
        .filter(|(k, n)| b[*k] != **n)
        .map(|(k, n)| format!("{k}: ns {n} us {}", b[k]))
        .collect();
    assert!(
        differ.is_empty(),
        "{} flows named differently:\n{}",
        differ.len(),
        differ.join("\n")
    );
    // The flow the issue found: its client's first segment is a TLS record's start.
    let k = a
        .keys()
        .find(|k| k.contains("57540") && k.contains("203.0.113.77"));
    let k = k.expect("the flow 10.60.0.5:57540 -> 203.0.113.77:443");
    assert_eq!(b[k]["app"], "tls", "{k}");
}

/// `query --count --json` in the window [from, to] (ns), the packets it counts.
fn count_packets(store: &Path, from: u64, to: u64, filter: &str) -> u64 {
    let o = run_ok(capsule().args([
        "query",
        "--store",
        p(store),
        "--from",
        &format!("@{from}"),
        "--to",
        &format!("@{to}"),
        "--count",
        "--json",
        filter,
    ]));
    let v: serde_json::Value = serde_json::from_str(&stdout_str(&o)).expect("a JSON count");
    v["packets"].as_u64().expect("packets")
}

/// A flow's names go on into the segments after the one with its first bytes (issue 32):
/// asked with a window that covers a later segment only, every flow named in the whole store
/// that started before the window and has packets in it is named there too (the same
/// application, server name and HTTP host), and `app APP` selects all its packets in the
/// window. Before, such a window gave the flow no name: the synthetic trace's long TLS flow
/// (10.60.0.5:57540 -> 203.0.113.77:443) was `tls` in its first segment and nothing after.
#[test]
fn a_window_that_leaves_out_a_flows_first_segment_still_names_it() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("s3.pcap");
    synth(&file, &d.path().join("t3.json"), 3, "2s", "20M", None);
    let store = d.path().join("store");
    // Segments cut by packet time: several, one after the other.
    import_ok(&store, &["--segment-age", "300ms"], &[p(&file)]);
    let key = |f: &serde_json::Value| {
        format!(
            "{} {}:{} {}:{}",
            f["proto"], f["a"], f["a_port"], f["b"], f["b_port"]
        )
    };
    let whole: BTreeMap<String, serde_json::Value> = flows_json(&store)
        .into_iter()
        .map(|f| (key(&f), f))
        .collect();
    let segs = segments(&store);
    assert!(segs.len() >= 3, "{} segments", segs.len());
    let mut before_end = 0u64;
    let (mut windows, mut checked) = (0, BTreeSet::new());
    for s in &segs {
        let (Some(first), Some(last)) = (s.first_ns, s.last_ns) else {
            continue;
        };
        let alone = before_end > 0 && first > before_end;
        before_end = before_end.max(last);
        if !alone {
            continue;
        }
        // The window holds this segment's packets and none of an earlier segment's.
        windows += 1;
        let o = run_ok(capsule().args([
            "flows",
            "--store",
            p(&store),
            "--from",
            &format!("@{first}"),
            "--to",
            &format!("@{last}"),
            "--json",
            "--limit",
            "100000",
        ]));
        for l in stdout_str(&o).lines().filter(|l| !l.trim().is_empty()) {
            let f: serde_json::Value = serde_json::from_str(l).expect("a JSON flow line");
            let w = &whole[&key(&f)];
            if w["names"].is_null() || w["first_ns"].as_u64().unwrap() >= first {
                continue;
            }
            let at = format!(
                "{} in the window of segment {} ({first}..{last}), first packet at {}",
                key(&f),
                s.seq,
                w["first_ns"]
            );
            assert!(!f["names"].is_null(), "{at}: not named");
            for field in ["app", "sni", "http_host"] {
                assert_eq!(f["names"][field], w["names"][field], "{at}: {field}");
            }
            let proto = if f["proto"] == 6 { "tcp" } else { "udp" };
            let tuple = format!(
                "{proto} and host {} and host {} and port {} and port {}",
                f["a"].as_str().unwrap(),
                f["b"].as_str().unwrap(),
                f["a_port"],
                f["b_port"]
            );
            let app = w["names"]["app"].as_str().unwrap();
            let all = count_packets(&store, first, last, &tuple);
            assert!(all > 0, "{at}");
            assert_eq!(
                count_packets(&store, first, last, &format!("app {app} and {tuple}")),
                all,
                "{at}: `app {app}` selects its packets"
            );
            checked.insert(key(&f));
        }
    }
    assert!(windows >= 2, "{windows} windows of one segment alone");
    assert!(
        checked.iter().any(|k| k.contains("57540")),
        "the long TLS flow was checked: {checked:?}"
    );
}
