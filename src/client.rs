//! `--server` (and `--remote`, the server of the client file): the same answers from a
//! `capsule serve` over HTTPS (docs/api.md), for `query`, `flows`, `status`, `segments` and
//! the analytics commands. One GET on a fresh connection (rustls, hyper's HTTP/1.1 client on a
//! single-threaded tokio runtime); the body is written out as it arrives. Relative times
//! are resolved here, before the request, so the window is the one the local command would
//! use.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body::Body as _;

use crate::cli::{OldClientCert, RemoteArgs, Selection};

/// Where and how to ask a server: from `--server`/`--remote` and the options beside them,
/// the rest from the client file ([`client_file`]).
#[derive(Debug, Clone)]
pub struct Remote {
    pub url: String,
    pub token_file: PathBuf,
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The options as this command line gave them (`--remote`, or `--server URL` and the
    /// flags typed): what a printed command needs in place of `--store DIR`. Those the
    /// client file supplied are left to it.
    pub given: String,
}

/// The environment variable naming the client file, over the default place.
pub const CLIENT_CONFIG_ENV: &str = "CAPSULE_CLIENT_CONFIG";

/// The client file: `$CAPSULE_CLIENT_CONFIG`, else `$XDG_CONFIG_HOME/capsule/client.toml`,
/// else `~/.config/capsule/client.toml`; with whether it was named explicitly (then it
/// must exist). `None` when no home is known.
pub fn client_file() -> Option<(PathBuf, bool)> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(p) = var(CLIENT_CONFIG_ENV) {
        return Some((p, true));
    }
    let base = var("XDG_CONFIG_HOME").or_else(|| var("HOME").map(|h| h.join(".config")))?;
    Some((base.join("capsule").join("client.toml"), false))
}

/// The client file's settings (the default ones when there is none) and its path.
fn load_client_file() -> Result<(capsule_config::ClientConfig, Option<PathBuf>)> {
    let Some((path, named)) = client_file() else {
        return Ok(Default::default());
    };
    if !named && !path.exists() {
        return Ok((Default::default(), Some(path)));
    }
    let c = capsule_config::ClientConfig::load(&path).map_err(|e| match e {
        capsule_config::ConfigError::Read { path, source } => crate::output::Usage(format!(
            "{}: cannot read the client file ({CLIENT_CONFIG_ENV} or \
             ~/.config/capsule/client.toml): {source}",
            path.display()
        )),
        e => crate::output::Usage(crate::output::config_problems(&e)),
    })?;
    Ok((c, Some(path)))
}

impl Selection {
    /// The server to ask, with `--server` or `--remote`.
    pub fn remote(&self) -> Result<Option<Remote>> {
        self.remote.remote(None)
    }

    /// `query` and `flows` refuse `--fleet` (a usage error saying so).
    pub fn no_fleet(&self) -> Result<()> {
        if self.fleet {
            return Err(crate::output::Usage(
                "--fleet answers `query`, `flows` and the analytics commands (top, tcp, dscp, \
                 matrix, stragglers, alerts), not with --server (docs/fleet.md)"
                    .into(),
            )
            .into());
        }
        Ok(())
    }

    /// As [`Selection::remote`], with `query`/`flows`' older `--cert`/`--key` names.
    pub fn remote_with(&self, old: &OldClientCert) -> Result<Option<Remote>> {
        self.no_fleet()?;
        self.remote.remote(Some(old))
    }
}

impl RemoteArgs {
    /// Whether a server is asked (`--server` or `--remote`).
    pub fn is_remote(&self) -> bool {
        self.server.is_some() || self.remote
    }

    /// The server to ask, with `--server` or `--remote`: the options given on the command
    /// line, the others from the client file. `None` without either flag (the client file
    /// is not read then: a local command never depends on it).
    pub fn remote(&self, old: Option<&OldClientCert>) -> Result<Option<Remote>> {
        if !self.is_remote() {
            return Ok(None);
        }
        let (file, path) = load_client_file()?;
        let place = || {
            path.as_ref()
                .map_or("the client file (no home directory)".into(), |p| {
                    p.display().to_string()
                })
        };
        let url = match (&self.server, &file.server) {
            (Some(u), _) => u.clone(),
            (None, Some(u)) => u.clone(),
            (None, None) => {
                return Err(crate::output::Usage(format!(
                    "--remote asks the server named by `server` in {}, which names none: \
                     give --server URL or add `server = \"https://HOST:PORT\"` there",
                    place()
                ))
                .into())
            }
        };
        let token_file = match (&self.token_file, &file.token_file) {
            (Some(t), _) | (None, Some(t)) => t.clone(),
            (None, None) => {
                return Err(crate::output::Usage(format!(
                    "--server {url} needs a token: give --token-file FILE or set `token_file` \
                     in {}",
                    place()
                ))
                .into())
            }
        };
        let old_cert = old.and_then(|o| o.cert.clone().zip(o.key.clone()));
        let flag_cert = self
            .client_cert
            .clone()
            .zip(self.client_key.clone())
            .or(old_cert);
        let (cert, key) = match (&flag_cert, &file.client_cert, &file.client_key) {
            (Some((c, k)), _, _) => (Some(c.clone()), Some(k.clone())),
            (None, c, k) => (c.clone(), k.clone()),
        };
        let q = |p: &Path| capsule_analytics::shell_quote(&p.display().to_string());
        let mut given = match &self.server {
            Some(u) => format!("--server {}", capsule_analytics::shell_quote(u)),
            None => "--remote".to_string(),
        };
        if let Some(t) = &self.token_file {
            given += &format!(" --token-file {}", q(t));
        }
        if let Some(ca) = &self.ca {
            given += &format!(" --ca {}", q(ca));
        }
        if let Some((c, k)) = &flag_cert {
            given += &format!(" --client-cert {} --client-key {}", q(c), q(k));
        }
        Ok(Some(Remote {
            url,
            token_file,
            ca: self.ca.clone().or(file.ca),
            cert,
            key,
            given,
        }))
    }
}

impl Remote {
    /// The options that reach this server, as this command line wrote them: what a printed
    /// `capsule query` needs in place of `--store DIR`.
    pub fn store_as(&self) -> String {
        self.given.clone()
    }
}

/// What a successful GET brought: the bytes written, the answer's headers and its
/// trailers (a streamed answer that turned out partial says so there).
#[derive(Debug)]
pub struct Got {
    pub bytes: u64,
    pub headers: hyper::HeaderMap,
    pub trailers: hyper::HeaderMap,
}

impl Got {
    /// The server's word that the answer is partial, from a header or a trailer.
    pub fn partial(&self) -> Option<String> {
        self.headers
            .get(crate::output::PARTIAL_HEADER)
            .or_else(|| self.trailers.get(crate::output::PARTIAL_HEADER))
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }
}

/// The query string of a selection: filter and the window as absolute `@NANOS`.
pub fn selection_params(s: &Selection) -> Result<String> {
    let q = s.query()?;
    let mut out = format!("filter={}", encode(&q.filter.to_string()));
    if let Some(f) = q.from_ns {
        out += &format!("&from=%40{f}");
    }
    if let Some(t) = q.to_ns {
        out += &format!("&to=%40{t}");
    }
    Ok(out)
}

/// Percent-encodes a query-string value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `https://HOST[:PORT]` as host and port (443 by default).
fn split_url(url: &str) -> Result<(String, u16)> {
    let rest = url.strip_prefix("https://").with_context(|| {
        format!("--server {url:?}: expected https://HOST:PORT (only HTTPS is served)")
    })?;
    let rest = rest.trim_end_matches('/');
    if rest.contains('/') {
        bail!("--server {url:?}: expected https://HOST:PORT without a path");
    }
    let (host, port) = if let Some(r) = rest.strip_prefix('[') {
        let (h, after) = r
            .split_once(']')
            .with_context(|| format!("--server {url:?}: an IPv6 address needs its `]`"))?;
        (h.to_string(), after.strip_prefix(':'))
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (rest.to_string(), None),
        }
    };
    let port = match port {
        None => 443,
        Some(p) => p.parse().with_context(|| {
            format!("--server {url:?}: expected a port number after `:`, found {p:?}")
        })?,
    };
    if host.is_empty() {
        bail!("--server {url:?}: no host");
    }
    Ok((host, port))
}

fn tls(sel: &Remote) -> Result<tokio_rustls::rustls::ClientConfig> {
    let ca = sel.ca.as_deref();
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    match ca {
        Some(p) => {
            let certs = CertificateDer::pem_file_iter(p)
                .with_context(|| format!("cannot read the CA file {}", p.display()))?
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("{}: expected PEM certificates", p.display()))?;
            if certs.is_empty() {
                bail!("{}: expected PEM certificates, found none", p.display());
            }
            for c in certs {
                roots
                    .add(c)
                    .with_context(|| format!("{}: a certificate is not valid", p.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                bail!("no system CA certificates found: give the server's CA with --ca");
            }
        }
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS protocol versions")?
        .with_root_certificates(roots);
    match (sel.cert.as_deref(), sel.key.as_deref()) {
        (Some(cert), Some(key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .with_context(|| format!("cannot read the certificate {}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("{}: expected PEM certificates", cert.display()))?;
            let key = rustls_pki_types::PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("{}: expected a PEM private key", key.display()))?;
            builder
                .with_client_auth_cert(certs, key)
                .context("the client certificate and key do not make a TLS identity")
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// GETs `path_and_query` from the server of `sel` and writes the body into `out` as it
/// arrives. An error answer becomes an error carrying the server's message (a 400 is a
/// usage error, as the local command's would be).
///
/// With `progress`, bytes received and the rate are shown on standard error (rewritten in
/// place every 250 ms, cleared at the end): for a person at a terminal.
pub fn get(sel: &Remote, path_and_query: &str, out: &mut dyn Write, progress: bool) -> Result<Got> {
    get_with(sel, path_and_query, out, progress, None)
}

/// How long a pull may wait: to connect (TCP, TLS and HTTP handshakes), for the answer's
/// head after the request, and between two pieces of its body. A fleet query asks every
/// node with these, so a node that hangs makes the answer partial, never the asker hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    pub connect: std::time::Duration,
    pub first_byte: std::time::Duration,
    pub idle: std::time::Duration,
}

/// `fut` within `d` (when given), else an error saying which deadline passed.
async fn within<T>(
    d: Option<std::time::Duration>,
    what: impl FnOnce() -> String,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match d {
        None => fut.await,
        Some(d) => match tokio::time::timeout(d, fut).await {
            Ok(r) => r,
            Err(_) => Err(anyhow::anyhow!(
                "{} (no answer within {:.1} s)",
                what(),
                d.as_secs_f64()
            )),
        },
    }
}

/// [`get`], with `deadlines` when given.
pub fn get_with(
    sel: &Remote,
    path_and_query: &str,
    out: &mut dyn Write,
    progress: bool,
    deadlines: Option<&Deadlines>,
) -> Result<Got> {
    let token = read_token(sel)?;
    let c = connect(sel, deadlines.map(|d| d.connect))?;
    get_on(c, &token, path_and_query, out, progress, deadlines)
}

/// The bearer token of `sel`'s token file, checked to be one token.
pub(crate) fn read_token(sel: &Remote) -> Result<String> {
    let token_file = sel.token_file.as_path();
    let token = std::fs::read_to_string(token_file)
        .with_context(|| format!("cannot read the token file {}", token_file.display()))?;
    let token = token.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        bail!(
            "{}: expected one token (64 hex digits), found {} characters",
            token_file.display(),
            token.len()
        );
    }
    Ok(token.to_string())
}

/// A connection to a server made before its request: TCP, TLS and HTTP handshakes done
/// (a fleet query connects to the nodes while ClickHouse plans; [`get_on`] asks on it).
pub struct Connected {
    rt: tokio::runtime::Runtime,
    send: hyper::client::conn::http1::SendRequest<EmptyBody>,
    url: String,
    host: String,
    port: u16,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected").field("url", &self.url).finish()
    }
}

/// Connects to the server of `sel` within `deadline` (when given).
pub fn connect(sel: &Remote, deadline: Option<std::time::Duration>) -> Result<Connected> {
    let url = sel.url.as_str();
    let (host, port) = split_url(url)?;
    let cfg = Arc::new(tls(sel)?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the client runtime")?;
    let send = rt.block_on(async {
        let (send, conn) = within(deadline, || format!("cannot connect to {url}"), async {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .with_context(|| format!("cannot connect to {url}"))?;
            let name = rustls_pki_types::ServerName::try_from(host.clone())
                .with_context(|| format!("--server {url:?}: {host:?} is not a host name"))?;
            let stream = tokio_rustls::TlsConnector::from(cfg)
                .connect(name, tcp)
                .await
                .with_context(|| format!("TLS with {url} failed"))?;
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .with_context(|| format!("HTTP with {url} failed"))
        })
        .await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        anyhow::Ok(send)
    })?;
    Ok(Connected {
        rt,
        send,
        url: url.to_string(),
        host,
        port,
    })
}

/// GETs `path_and_query` on the connection `c` with `token`, as [`get_with`].
pub fn get_on(
    c: Connected,
    token: &str,
    path_and_query: &str,
    out: &mut dyn Write,
    progress: bool,
    deadlines: Option<&Deadlines>,
) -> Result<Got> {
    let Connected {
        rt,
        mut send,
        url,
        host,
        port,
    } = c;
    let url = url.as_str();
    let (first_byte, idle) = (deadlines.map(|d| d.first_byte), deadlines.map(|d| d.idle));
    rt.block_on(async {
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let req = hyper::Request::get(path_and_query)
            .header(hyper::header::HOST, authority)
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            // A streamed answer that turns out partial says so in a trailer.
            .header(hyper::header::TE, "trailers")
            .body(http_body_util_empty())
            .context("cannot make the request")?;
        let resp = within(first_byte, || format!("{url} did not answer"), async {
            send.send_request(req)
                .await
                .with_context(|| format!("{url} did not answer"))
        })
        .await?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let mut body = resp.into_body();
        let mut n = 0u64;
        let mut trailers = hyper::HeaderMap::new();
        let t0 = std::time::Instant::now();
        let mut last_shown = t0;
        if !status.is_success() {
            let mut text = Vec::new();
            while let Some(f) =
                std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
            {
                if let Ok(Ok(d)) = f.map(|f| f.into_data()) {
                    text.extend_from_slice(&d);
                }
                if text.len() > 1 << 20 {
                    break;
                }
            }
            let msg = serde_json::from_slice::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&text).trim().to_string());
            if status == hyper::StatusCode::BAD_REQUEST {
                return Err(crate::output::Usage(msg).into());
            }
            bail!("{url} answered {status}: {msg}");
        }
        loop {
            let next = within(
                idle,
                || format!("{url} stopped sending after {n} bytes"),
                async {
                    Ok(
                        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx))
                            .await,
                    )
                },
            )
            .await?;
            let Some(f) = next else { break };
            let f = f.with_context(|| {
                format!(
                    "the answer from {url} was cut after {n} bytes (a server limit or a \
                     failure: the server's audit log says which)"
                )
            })?;
            let d = match f.into_data() {
                Ok(d) => d,
                Err(f) => {
                    if let Ok(t) = f.into_trailers() {
                        trailers.extend(t);
                    }
                    continue;
                }
            };
            {
                out.write_all(&d).context("cannot write the answer")?;
                n += d.len() as u64;
                if progress && last_shown.elapsed() >= std::time::Duration::from_millis(250) {
                    last_shown = std::time::Instant::now();
                    let secs = t0.elapsed().as_secs_f64().max(1e-3);
                    eprint!(
                        "\r{} received, {}/s   ",
                        crate::units::format_bytes(n),
                        crate::units::format_bytes((n as f64 / secs) as u64)
                    );
                }
            }
        }
        if progress {
            eprint!("\r\x1b[2K");
        }
        out.flush().context("cannot write the answer")?;
        Ok(Got {
            bytes: n,
            headers,
            trailers,
        })
    })
}

/// GETs the JSON document at `path` from the server of `remote`.
pub fn get_json(remote: &Remote, path: &str) -> Result<serde_json::Value> {
    let mut body = Vec::new();
    get(remote, path, &mut body, false)?;
    serde_json::from_slice(&body).with_context(|| {
        format!(
            "{} answered {path} with something else than JSON",
            remote.url
        )
    })
}

/// An empty request body.
fn http_body_util_empty() -> EmptyBody {
    EmptyBody
}

/// The body of a GET: nothing.
#[derive(Debug)]
struct EmptyBody;

impl http_body::Body for EmptyBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        true
    }
}

/// Asks the server of `remote` the analytics `question` over `query`: the filter, the
/// window (relative times already resolved, sent as `@NANOS`) and the question's own
/// parameters (capsule_answers::params, the codec the server decodes with) go as the
/// query string; `json` asks for the JSON document, else the text at this terminal's
/// width. Prints what comes back.
pub(crate) fn ask_analytics(
    remote: &Remote,
    query: &capsule_query::Query,
    question: &capsule_answers::analytics::Question,
    json: bool,
) -> Result<std::process::ExitCode> {
    let mut path = format!(
        "/v1/{}?filter={}",
        question.kind().name(),
        encode(&query.filter.to_string())
    );
    if let Some(f) = query.from_ns {
        path += &format!("&from=%40{f}");
    }
    if let Some(t) = query.to_ns {
        path += &format!("&to=%40{t}");
    }
    for (k, v) in question.params() {
        path += &format!("&{k}={}", encode(&v));
    }
    if json {
        path += "&format=json";
    } else {
        path += "&format=text";
        if let Some(w) = crate::render::table::output_width() {
            path += &format!("&width={w}");
        }
        // The printed commands name the server as this command line does.
        path += &format!("&store-as={}", encode(&remote.store_as()));
    }
    let mut text = Vec::new();
    let got = get(remote, &path, &mut text, false)?;
    let partial = got
        .headers
        .get(crate::output::PARTIAL_HEADER)
        .is_some_and(|v| v.as_bytes() == b"true");
    crate::render::print(&crate::render::Rendered {
        text: String::from_utf8(text).context("the server's answer is not UTF-8")?,
        why: if partial {
            vec!["the server says flows are missing (its notes above name them)".into()]
        } else {
            Vec::new()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_split_into_host_and_port() {
        assert_eq!(
            split_url("https://10.0.0.1:8443").unwrap(),
            ("10.0.0.1".into(), 8443)
        );
        assert_eq!(
            split_url("https://cap.example/").unwrap(),
            ("cap.example".into(), 443)
        );
        assert_eq!(split_url("https://[::1]:9").unwrap(), ("::1".into(), 9));
        assert!(split_url("http://x:1").is_err());
        assert!(split_url("https://x:port").is_err());
        assert!(split_url("https://x:1/v1").is_err());
    }
}
