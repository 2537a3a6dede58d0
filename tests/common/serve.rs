//! `capsule serve` started for a test: a CA and a server certificate made with the openssl
//! tool, the server on 127.0.0.1:0 with a tokens file and an audit log, killed when dropped.
//! Used by tests/serve.rs (the API) and tests/console.rs (the web console).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// A CA, a server certificate for 127.0.0.1 signed by it, and the server's key.
pub struct Pki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn make_pki(dir: &Path) -> Pki {
    need_tool("openssl");
    let d = p(dir);
    sh_ok(&format!(
        "cd {d}
         openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
           -keyout ca.key -out ca.pem -days 2 -subj /CN=capsule-test-ca 2>/dev/null
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
           -keyout srv.key -out srv.csr -subj /CN=localhost 2>/dev/null
         printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext
         openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
           -out srv.pem -days 2 -extfile ext 2>/dev/null"
    ));
    Pki {
        ca: dir.join("ca.pem"),
        cert: dir.join("srv.pem"),
        key: dir.join("srv.key"),
    }
}

pub fn add_token(tokens: &Path, user: &str) -> String {
    let out = run_ok(capsule().args(["token", "add", "--tokens", p(tokens), "--user", user]));
    let t = stdout_str(&out).trim().to_string();
    assert_eq!(t.len(), 64, "a token is 64 hex digits: {t:?}");
    t
}

/// A running `capsule serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub ca: PathBuf,
    pub audit: PathBuf,
    pub dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(dir: &Path, store: &Path, tokens: &Path, extra: &[&str]) -> Server {
    let pki = make_pki(dir);
    let audit = dir.join("audit.jsonl");
    let mut cmd = capsule();
    cmd.args(["serve", "--store", p(store), "--listen", "127.0.0.1:0"])
        .args(["--cert", p(&pki.cert), "--key", p(&pki.key)])
        .args(["--tokens", p(tokens), "--audit-log", p(&audit)])
        .args(extra);
    spawn(cmd, pki.ca, audit, dir)
}

/// Starts `cmd` (a `capsule serve` listening on port 0) and waits for the address it bound,
/// which it prints first on stderr; the rest of stderr is drained so it never blocks.
pub fn spawn(mut cmd: Command, ca: PathBuf, audit: PathBuf, dir: &Path) -> Server {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capsule serve");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("capsule serve: listening on https://")
        .unwrap_or_else(|| panic!("expected the bound address on stderr, found {line:?}"))
        .to_string();
    std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    Server {
        child,
        addr,
        ca,
        audit,
        dir: dir.to_path_buf(),
    }
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The audit log's lines once it is still for 150 ms (the line of a streamed answer is
    /// written when its body is done, a moment after the client has the last byte).
    pub fn audit_lines(&self) -> Vec<serde_json::Value> {
        let read = || std::fs::read_to_string(&self.audit).unwrap_or_default();
        let t0 = Instant::now();
        let mut text = read();
        loop {
            std::thread::sleep(Duration::from_millis(150));
            let now = read();
            if now == text || t0.elapsed() > Duration::from_secs(5) {
                break;
            }
            text = now;
        }
        text.lines()
            .map(|l| serde_json::from_str(l).expect("each audit line is JSON"))
            .collect()
    }
}

/// `s` percent-encoded as one URL query component.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
