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
        ans = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes([127, 0, 0, 77])
        n = 1
    elif qtype == 28:
        ans = b"\xc0\x0c" + struct.pack("!HHIH", 28, 1, 60, 16) + bytes.fromhex("20010db8000000000000000000000077")
        n = 1
    s.sendto(struct.pack("!HHHHHH", tid, 0x8180, 1, n, 0, 0) + question + ans, peer)
"#;

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
    let (key, cert) = (d.join("key.pem"), d.join("cert.pem"));
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
    let (tls_port, web_port, dns_port) = (free_tcp_port(), free_tcp_port(), free_udp_port());
    *DECODE_AS.lock().unwrap() = vec![
        format!("tcp.port=={tls_port},tls"),
        format!("tcp.port=={web_port},http"),
        format!("udp.port=={dns_port},dns"),
    ];
    let cap = d.join("lo.pcap");
    let mut tcpdump = Proc(
        Command::new("tcpdump")
            // Immediate mode: no packet waits in the ring for a block to fill (those would be
            // lost at SIGINT).
            .args(["-i", "lo", "-U", "--immediate-mode", "-n", "-w", p(&cap)])
            .arg(format!(
                "port {tls_port} or port {web_port} or port {dns_port}"
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    {
        use std::io::BufRead;
        let err = tcpdump.0.stderr.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(err).read_line(&mut line).unwrap();
        assert!(line.contains("listening"), "tcpdump: {line}");
        std::thread::sleep(Duration::from_millis(500));
    }
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
    let mut dns = Proc(
        Command::new("python3")
            .args(["-c", DNS_RESPONDER, &dns_port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(dns.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
    }
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
        run_ok(Command::new("dig").args([
            "@127.0.0.1",
            "-p",
            &dns_port.to_string(),
            "+tries=1",
            "+time=3",
            "models.example-hub.io",
            ty,
        ]));
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
    std::thread::sleep(Duration::from_millis(1000));
    // tcpdump writes its last packets on SIGINT.
    run_ok(Command::new("kill").args(["-INT", &tcpdump.0.id().to_string()]));
    let _ = tcpdump.0.wait();

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
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r", p(file), "-Y", filter, "-T", "fields"]);
    // The servers listen on unregistered ports: tell tshark what they speak.
    for d in DECODE_AS.lock().unwrap().iter() {
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
