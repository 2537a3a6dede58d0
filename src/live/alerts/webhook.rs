//! The webhook sink: each event POSTed as JSON to `webhook_url` (http or https), signed
//! with HMAC-SHA256, one connection per event (hyper's HTTP/1.1 client on a
//! single-threaded tokio runtime of the sink's own thread; rustls for https).
//!
//! ```text
//! POST PATH   Content-Type: application/json
//!             X-Capsule-Timestamp: UNIX_SECONDS      (when this attempt was signed)
//!             X-Capsule-Signature: sha256=HEX(HMAC-SHA256(key, "UNIX_SECONDS." + body))
//!             X-Capsule-Event: engaged | released
//!             X-Capsule-Delivery: SEQ-AT_NS          (the same for every attempt)
//! 2xx: sent. A connection error, a timeout, 408, 429 or 5xx: tried again after 0.5 s,
//! 1 s, 2 s, ... (at most 30 s apart), `webhook_retries` times. Any other answer: not
//! tried again. Each attempt (connect, send, the answer's head) has `webhook_timeout`.
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{Deliver, Event};

/// An `http://` or `https://` URL taken apart.
#[derive(Debug, PartialEq, Eq)]
pub struct Url {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// The Host header: `host:port`, `[v6]:port`.
    pub authority: String,
    /// Path and query, at least `/`.
    pub path: String,
}

pub fn parse_url(url: &str) -> Result<Url> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        bail!("webhook_url {url:?}: expected http:// or https://");
    };
    let (hostport, path) = match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    if hostport.contains('@') {
        bail!("webhook_url {url:?}: user info in the URL is not supported (the HMAC key signs)");
    }
    let (host, port) = if let Some(r) = hostport.strip_prefix('[') {
        let (h, after) = r
            .split_once(']')
            .with_context(|| format!("webhook_url {url:?}: an IPv6 address needs its `]`"))?;
        (h.to_string(), after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    let port = match port {
        None if tls => 443,
        None => 80,
        Some(p) => p.parse().with_context(|| {
            format!("webhook_url {url:?}: expected a port number after `:`, found {p:?}")
        })?,
    };
    if host.is_empty() {
        bail!("webhook_url {url:?}: no host");
    }
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok(Url {
        tls,
        host,
        port,
        authority,
        path,
    })
}

/// `sha256=HEX` of HMAC-SHA256 over `TIMESTAMP.BODY`.
pub fn signature(key: &[u8], timestamp: &str, body: &[u8]) -> String {
    // HMAC takes a key of any length: new_from_slice cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let mut out = String::with_capacity(71);
    out.push_str("sha256=");
    for b in mac.finalize().into_bytes() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

pub struct Webhook {
    url: Url,
    key: Vec<u8>,
    timeout: Duration,
    retries: u32,
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    rt: tokio::runtime::Runtime,
}

impl Webhook {
    pub fn new(w: &capsule_config::Webhook) -> Result<Webhook> {
        let url = parse_url(&w.url)?;
        let key = match &w.secret {
            capsule_config::SecretSource::Inline(s) => s.0.as_bytes().to_vec(),
            capsule_config::SecretSource::File(f) => {
                let text = std::fs::read(f)
                    .with_context(|| format!("cannot read the webhook secret file {f}"))?;
                let key = text.trim_ascii().to_vec();
                if key.is_empty() {
                    bail!("{f}: expected the webhook's HMAC key, found an empty file");
                }
                key
            }
        };
        let tls = if url.tls {
            Some(Arc::new(tls_config(w.ca.as_deref())?))
        } else {
            None
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the webhook's runtime")?;
        Ok(Webhook {
            url,
            key,
            timeout: Duration::from_nanos(w.timeout_ns),
            retries: w.retries,
            tls,
            rt,
        })
    }

    /// One attempt: the answer's status, or why there is none.
    fn attempt(&self, ev: &Event, body: &Bytes) -> Result<u16, String> {
        let ts = (super::now_ns() / 1_000_000_000).to_string();
        let req = hyper::Request::post(self.url.path.as_str())
            .header(hyper::header::HOST, self.url.authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(
                hyper::header::USER_AGENT,
                concat!("capsule/", env!("CARGO_PKG_VERSION")),
            )
            .header("X-Capsule-Timestamp", ts.as_str())
            .header("X-Capsule-Signature", signature(&self.key, &ts, body))
            .header("X-Capsule-Event", ev.state)
            .header("X-Capsule-Delivery", format!("{}-{}", ev.seq, ev.at_ns))
            .body(Full(Some(body.clone())))
            .map_err(|e| format!("cannot make the request: {e}"))?;
        let url = &self.url;
        let tls = self.tls.clone();
        let fut = async move {
            let tcp = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
                .await
                .map_err(|e| format!("cannot connect: {e}"))?;
            let _ = tcp.set_nodelay(true);
            match tls {
                None => send(hyper_util::rt::TokioIo::new(tcp), req).await,
                Some(cfg) => {
                    let name = rustls_pki_types::ServerName::try_from(url.host.clone())
                        .map_err(|e| format!("{:?} is not a host name: {e}", url.host))?;
                    let stream = tokio_rustls::TlsConnector::from(cfg)
                        .connect(name, tcp)
                        .await
                        .map_err(|e| format!("TLS failed: {e}"))?;
                    send(hyper_util::rt::TokioIo::new(stream), req).await
                }
            }
        };
        self.rt
            .block_on(async { tokio::time::timeout(self.timeout, fut).await })
            .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)))
    }
}

async fn send<IO>(io: IO, req: hyper::Request<Full>) -> Result<u16, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut tx, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP failed: {e}"))?;
    // The connection is driven here, not spawned: when the attempt ends (answered, or cut
    // by the timeout) it is dropped and closed, so a hung receiver holds no socket.
    let mut conn = std::pin::pin!(conn);
    let mut resp = std::pin::pin!(tx.send_request(req));
    let answer = |r: Result<hyper::Response<hyper::body::Incoming>, hyper::Error>| {
        r.map(|resp| resp.status().as_u16())
            .map_err(|e| format!("no answer: {e}"))
    };
    tokio::select! {
        biased;
        r = &mut resp => return answer(r),
        c = &mut conn => {
            if let Err(e) = c {
                return Err(format!("HTTP failed: {e}"));
            }
        }
    }
    // The connection ended cleanly (a receiver that answers and closes, in the same poll):
    // the answer, if one came, is already waiting.
    answer(resp.await)
}

impl Deliver for Webhook {
    fn deliver(&mut self, ev: &Event, abandon: &AtomicBool) -> Result<(), String> {
        let body = Bytes::from(ev.json.clone());
        let mut last = String::new();
        for attempt in 0..=self.retries {
            if attempt > 0 {
                let wait = Duration::from_millis(500u64 << (attempt - 1).min(6))
                    .min(Duration::from_secs(30));
                let t0 = Instant::now();
                while t0.elapsed() < wait {
                    if abandon.load(Ordering::Relaxed) {
                        return Err(format!(
                            "{last}; capture stopped before attempt {}",
                            attempt + 1
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(50).min(wait));
                }
            }
            match self.attempt(ev, &body) {
                Ok(code) if (200..300).contains(&code) => return Ok(()),
                Ok(code) if code == 408 || code == 429 || code >= 500 => {
                    last = format!("answered {code}");
                }
                Ok(code) => return Err(format!("answered {code} (not tried again)")),
                Err(e) => last = e,
            }
        }
        Err(format!("{last} ({} attempt(s))", self.retries + 1))
    }
}

/// A request body of one chunk.
pub struct Full(Option<Bytes>);

impl http_body::Body for Full {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.take().map(|d| Ok(http_body::Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0.as_ref().map_or(0, |b| b.len() as u64))
    }
}

/// The roots an https webhook is checked against: `webhook_ca`, else the system's.
fn tls_config(ca: Option<&str>) -> Result<tokio_rustls::rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    match ca {
        Some(p) => {
            let certs = CertificateDer::pem_file_iter(p)
                .with_context(|| format!("cannot read the webhook CA file {p}"))?
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("{p}: expected PEM certificates"))?;
            if certs.is_empty() {
                bail!("{p}: expected PEM certificates, found none");
            }
            for c in certs {
                roots
                    .add(c)
                    .with_context(|| format!("{p}: a certificate is not valid"))?;
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                bail!("no system CA certificates found: give the webhook's CA with webhook_ca");
            }
        }
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    Ok(
        tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("the TLS protocol versions")?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_scheme_host_port_and_path() {
        let u = parse_url("http://127.0.0.1:8080/hooks/capsule?x=1").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.path.as_str()),
            (false, "127.0.0.1", 8080, "/hooks/capsule?x=1")
        );
        assert_eq!(u.authority, "127.0.0.1:8080");
        let u = parse_url("https://[::1]/").unwrap();
        assert_eq!(
            (u.tls, u.port, u.authority.as_str()),
            (true, 443, "[::1]:443")
        );
        assert_eq!(parse_url("http://h").unwrap().path, "/");
        assert_eq!(parse_url("http://h?q").unwrap().path, "/?q");
        for bad in [
            "ftp://h",
            "http://",
            "http://h:x/",
            "http://u:p@h/",
            "http://[::1/",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // The value `openssl dgst -sha256 -hmac Jefe` gives for
        // `1796004005.{"state":"engaged"}` (docs/alerts.md verifies the same way).
        assert_eq!(
            signature(b"Jefe", "1796004005", br#"{"state":"engaged"}"#),
            "sha256=13ab6649f049f2e097eafcc65b4c87dba5fa159e3749e0c9bc7ceaa87612a950"
        );
        assert_ne!(
            signature(b"Jefe", "1796004006", br#"{"state":"engaged"}"#),
            signature(b"Jefe", "1796004005", br#"{"state":"engaged"}"#)
        );
    }

    fn event(seq: u64) -> Event {
        Event {
            state: "engaged",
            rule: "dscp".into(),
            severity: Some(capsule_analytics::alerts::Severity::Medium),
            seq,
            at_ns: 1_796_004_005_000_000_000,
            json: format!("{{\"state\":\"engaged\",\"n\":{seq}}}"),
        }
    }

    fn hook(url: &str, retries: u32, ca: Option<String>) -> Webhook {
        Webhook::new(&capsule_config::Webhook {
            url: url.into(),
            secret: capsule_config::SecretSource::Inline(capsule_config::Secret("k".into())),
            timeout_ns: 2_000_000_000,
            retries,
            ca,
        })
        .unwrap()
    }

    /// Reads one request's head and body; returns (head, body).
    fn read_request(r: &mut impl std::io::Read) -> (String, String) {
        let mut data = Vec::new();
        let mut byte = [0u8; 1];
        while !data.ends_with(b"\r\n\r\n") {
            assert_eq!(r.read(&mut byte).unwrap(), 1, "the request ended early");
            data.push(byte[0]);
        }
        let head = String::from_utf8(data).unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap();
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        (head, String::from_utf8(body).unwrap())
    }

    fn header<'a>(head: &'a str, name: &str) -> &'a str {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim())
            })
            .unwrap_or_else(|| panic!("no {name} in {head}"))
    }

    /// A plain HTTP receiver answering each connection with the next status of `codes`.
    fn receiver(codes: Vec<u16>) -> (u16, std::thread::JoinHandle<Vec<(String, String)>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            let mut got = Vec::new();
            for code in codes {
                let (mut s, _) = l.accept().unwrap();
                got.push(read_request(&mut s));
                let _ = std::io::Write::write_all(
                    &mut s,
                    format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                );
            }
            got
        });
        (port, h)
    }

    #[test]
    fn server_errors_are_retried_a_refusal_is_not_and_nothing_listening_fails() {
        let stop = AtomicBool::new(false);
        let (port, h) = receiver(vec![503, 429, 200]);
        let mut w = hook(&format!("http://127.0.0.1:{port}/in"), 3, None);
        w.deliver(&event(7), &stop).unwrap();
        let got = h.join().unwrap();
        assert_eq!(got.len(), 3);
        for (head, body) in &got {
            assert!(head.starts_with("POST /in HTTP/1.1\r\n"), "{head}");
            assert_eq!(body, "{\"state\":\"engaged\",\"n\":7}");
            let ts = header(head, "x-capsule-timestamp");
            assert_eq!(
                header(head, "x-capsule-signature"),
                signature(b"k", ts, body.as_bytes())
            );
            // The same delivery id on every attempt.
            assert_eq!(header(head, "x-capsule-delivery"), "7-1796004005000000000");
        }
        let (port, h) = receiver(vec![401]);
        let mut w = hook(&format!("http://127.0.0.1:{port}/"), 3, None);
        let e = w.deliver(&event(1), &stop).unwrap_err();
        assert!(e.contains("answered 401 (not tried again)"), "{e}");
        assert_eq!(h.join().unwrap().len(), 1);
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut w = hook(&format!("http://127.0.0.1:{port}/"), 1, None);
        let e = w.deliver(&event(1), &stop).unwrap_err();
        assert!(
            e.contains("cannot connect") && e.contains("(2 attempt(s))"),
            "{e}"
        );
    }

    #[test]
    fn an_https_receiver_with_its_own_ca_gets_the_signed_post() {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("sh")
            .current_dir(dir.path())
            .arg("-c")
            .arg(
                "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
                   -keyout ca.key -out ca.pem -days 2 -subj /CN=capsule-test-ca 2>/dev/null &&
                 openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
                   -keyout srv.key -out srv.csr -subj /CN=localhost 2>/dev/null &&
                 printf 'subjectAltName=DNS:localhost\\n' > ext &&
                 openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
                   -out srv.pem -days 2 -extfile ext 2>/dev/null",
            )
            .status()
            .expect("this test needs the openssl tool");
        assert!(ok.success(), "openssl failed");
        use rustls_pki_types::pem::PemObject;
        let certs = rustls_pki_types::CertificateDer::pem_file_iter(dir.path().join("srv.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key =
            rustls_pki_types::PrivateKeyDer::from_pem_file(dir.path().join("srv.key")).unwrap();
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let cfg = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            let (tcp, _) = l.accept().unwrap();
            let conn = tokio_rustls::rustls::ServerConnection::new(Arc::new(cfg)).unwrap();
            let mut tls = tokio_rustls::rustls::StreamOwned::new(conn, tcp);
            let got = read_request(&mut tls);
            std::io::Write::write_all(
                &mut tls,
                b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
            )
            .unwrap();
            let _ = std::io::Write::flush(&mut tls);
            tls.conn.send_close_notify();
            let _ = tls.conn.complete_io(&mut tls.sock);
            got
        });
        let ca = dir.path().join("ca.pem").to_str().unwrap().to_string();
        let mut w = hook(&format!("https://localhost:{port}/tls"), 0, Some(ca));
        w.deliver(&event(3), &AtomicBool::new(false)).unwrap();
        let (head, body) = h.join().unwrap();
        assert!(head.starts_with("POST /tls HTTP/1.1\r\n"), "{head}");
        let ts = header(&head, "x-capsule-timestamp");
        assert_eq!(
            header(&head, "x-capsule-signature"),
            signature(b"k", ts, body.as_bytes())
        );
        // A secret file that cannot be read fails the start, naming the file.
        let e = Webhook::new(&capsule_config::Webhook {
            url: "https://localhost:1/".into(),
            secret: capsule_config::SecretSource::File("/nonexistent/key".into()),
            timeout_ns: 1_000_000_000,
            retries: 0,
            ca: None,
        })
        .err()
        .unwrap();
        assert!(format!("{e:#}").contains("/nonexistent/key"), "{e:#}");
    }
}
