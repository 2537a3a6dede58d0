//! ClickHouse's HTTP interface (port 8123 by default): a statement is the body of a POST, an
//! insert is `?query=INSERT INTO t FORMAT RowBinary` with the rows as the body. Every
//! request has a deadline (connect, and the whole exchange), so a hung server makes a
//! publish or a question fail with [`FleetError::Unreachable`], never hang.

use std::io::Read;
use std::time::Duration;

use crate::FleetError;

/// A ClickHouse server, as one node or asker reaches it.
#[derive(Debug, Clone)]
pub struct ClickHouse {
    url: String,
    agent: ureq::Agent,
    /// `Basic base64(default:PASSWORD)`, when a password file is configured.
    auth: Option<String>,
}

/// The whole exchange's deadline (an insert of one segment's rows, a question's rows).
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// Connecting: a server that does not accept within this is unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl ClickHouse {
    /// The server at `url` (`http://HOST:PORT`), as user `default` with `password` if given.
    pub fn new(url: &str, password: Option<&str>) -> ClickHouse {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .http_status_as_error(false)
            .build();
        let agent = ureq::Agent::with_parts(
            config,
            ureq::unversioned::transport::DefaultConnector::new(),
            Literal::default(),
        );
        ClickHouse {
            url: url.trim_end_matches('/').to_string(),
            agent,
            auth: password.map(|p| format!("Basic {}", base64(format!("default:{p}").as_bytes()))),
        }
    }

    /// The server of a config's `[fleet]` section (its password file read, one line).
    pub fn of(f: &capsule_config::Fleet) -> Result<ClickHouse, FleetError> {
        let password = match &f.clickhouse_password_file {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(crate::io("read the ClickHouse password file", p))?;
                Some(text.trim_end_matches(['\n', '\r']).to_string())
            }
            None => None,
        };
        Ok(ClickHouse::new(&f.clickhouse, password.as_deref()))
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn post(&self, query: Option<&str>, body: &[u8], what: &str) -> Result<Vec<u8>, FleetError> {
        self.post_with(query, body, what, |r| {
            let mut bytes = Vec::new();
            r.read_to_end(&mut bytes).map_err(|e| self.io_error(e))?;
            Ok(bytes)
        })
    }

    /// What an error reading an answer is: the server unreachable mid-answer.
    pub(crate) fn io_error(&self, e: std::io::Error) -> FleetError {
        FleetError::Unreachable {
            url: self.url.clone(),
            source: Box::new(ureq::Error::Io(e)),
        }
    }

    /// Posts `body` (with `query` in the URL) and hands `read` the answer's body as it
    /// arrives, when ClickHouse answered 200; else its error message as an error.
    fn post_with<T>(
        &self,
        query: Option<&str>,
        body: &[u8],
        what: &str,
        read: impl FnOnce(&mut dyn std::io::Read) -> Result<T, FleetError>,
    ) -> Result<T, FleetError> {
        let mut url = format!("{}/", self.url);
        if let Some(q) = query {
            url.push_str("?query=");
            url.push_str(&percent_encode(q));
        }
        let mut req = self.agent.post(&url);
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let unreachable = |source| FleetError::Unreachable {
            url: self.url.clone(),
            source: Box::new(source),
        };
        let mut resp = req.send(body).map_err(unreachable)?;
        let status = resp.status().as_u16();
        let mut reader = resp.body_mut().with_config().limit(u64::MAX).reader();
        if status != 200 {
            let mut bytes = Vec::new();
            reader
                .read_to_end(&mut bytes)
                .map_err(|e| self.io_error(e))?;
            let message = String::from_utf8_lossy(&bytes);
            return Err(FleetError::Server {
                url: self.url.clone(),
                what: what.to_string(),
                status,
                message: message.trim().chars().take(500).collect(),
            });
        }
        read(&mut reader)
    }

    /// Runs `sql` (a statement, or a query with its FORMAT) and returns what it answered.
    pub fn execute(&self, sql: &str) -> Result<Vec<u8>, FleetError> {
        let what: String = sql.split_whitespace().take(6).collect::<Vec<_>>().join(" ");
        self.post(None, sql.as_bytes(), &format!("`{what} ...`"))
    }

    /// Runs `sql` (a query with its FORMAT) and hands `read` its answer as it arrives (rows
    /// decoded while ClickHouse still sends: fleet/src/plan.rs).
    pub fn execute_with<T>(
        &self,
        sql: &str,
        read: impl FnOnce(&mut dyn std::io::Read) -> Result<T, FleetError>,
    ) -> Result<T, FleetError> {
        let what: String = sql.split_whitespace().take(6).collect::<Vec<_>>().join(" ");
        self.post_with(None, sql.as_bytes(), &format!("`{what} ...`"), read)
    }

    /// Inserts `rows` (RowBinary, the values of `columns` in that order) into `table`. The
    /// columns are named, so a column a later release adds to the table (with its default)
    /// does not make this release's inserts refused.
    pub fn insert(&self, table: &str, columns: &[String], rows: &[u8]) -> Result<(), FleetError> {
        if rows.is_empty() {
            return Ok(());
        }
        let q = format!(
            "INSERT INTO {table} ({}) FORMAT RowBinary",
            columns.join(", ")
        );
        self.post(Some(&q), rows, &format!("an insert into {table}"))
            .map(|_| ())
    }

    /// The server's version, `SELECT version()`.
    pub fn version(&self) -> Result<Version, FleetError> {
        let text = self.execute("SELECT version() FORMAT TabSeparated")?;
        let text = String::from_utf8_lossy(&text).trim().to_string();
        Version::parse(&text).ok_or_else(|| FleetError::Decode {
            what: format!("the version ClickHouse at {} gave", self.url),
            problem: format!("expected MAJOR.MINOR..., found {text:?}"),
        })
    }
}

/// ureq's resolver, but for an address given as an IP literal (`http://127.0.0.1:8123`,
/// `http://[::1]:8123`), used as it is. With a deadline, ureq's own resolver looks every
/// name up on a thread it starts for the lookup, literals too: a thread started and ended
/// for each connection of a question, while the question's first rows wait. (A resolver
/// is ureq's unversioned interface: the lock file pins its release.)
#[derive(Debug, Default)]
struct Literal(ureq::unversioned::resolver::DefaultResolver);

impl ureq::unversioned::resolver::Resolver for Literal {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        // "HOST:PORT" as ureq's resolver makes it (the scheme's port when none is given; an
        // IPv6 literal in brackets), which parses as an address only for a literal.
        let literal = match (uri.scheme(), uri.authority()) {
            (Some(scheme), Some(authority)) => {
                ureq::unversioned::resolver::DefaultResolver::host_and_port(scheme, authority)
                    .and_then(|hp| hp.parse::<std::net::SocketAddr>().ok())
            }
            _ => None,
        };
        match literal {
            Some(addr) => {
                let mut out = self.empty();
                out.push(addr);
                Ok(out)
            }
            None => self.0.resolve(uri, config, timeout),
        }
    }
}

/// A ClickHouse release, as `version()` gives it (`18.16.1`, `24.3.2.23`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let mut it = s.split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some(Version { major, minor })
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// `s` for a URL's query string (RFC 3986 unreserved characters kept).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Standard base64 with padding (RFC 4648), for the Basic authorization header.
fn base64(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = u32::from(c[0]) << 16
            | u32::from(*c.get(1).unwrap_or(&0)) << 8
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Literal addresses are used as they are (no lookup, so no lookup thread), with the
    /// scheme's port when the URL gives none; names go to ureq's resolver.
    #[test]
    fn literal_addresses_are_used_as_they_are() {
        use ureq::unversioned::resolver::Resolver;
        let config = ureq::Agent::config_builder().build();
        let resolve = |url: &str| {
            let uri: ureq::http::Uri = url.parse().unwrap();
            Literal::default()
                .resolve(&uri, &config, Default::default())
                .map(|a| a.to_vec())
        };
        let one = |s: &str| vec![s.parse::<std::net::SocketAddr>().unwrap()];
        assert_eq!(
            resolve("http://127.0.0.1:8123/").unwrap(),
            one("127.0.0.1:8123")
        );
        assert_eq!(resolve("http://[::1]:9000/").unwrap(), one("[::1]:9000"));
        assert_eq!(resolve("http://192.0.2.9/").unwrap(), one("192.0.2.9:80"));
        assert_eq!(resolve("https://192.0.2.9/").unwrap(), one("192.0.2.9:443"));
        // A name is looked up (`localhost` by the system's resolver).
        let looked_up = resolve("http://localhost:8123/").unwrap();
        assert!(
            looked_up
                .iter()
                .all(|a| a.port() == 8123 && a.ip().is_loopback()),
            "{looked_up:?}"
        );
    }

    #[test]
    fn versions_encodings_and_an_unreachable_server() {
        assert_eq!(
            Version::parse("18.16.1"),
            Some(Version {
                major: 18,
                minor: 16
            })
        );
        assert_eq!(Version::parse("24.3.2.23").unwrap().major, 24);
        assert_eq!(Version::parse("x"), None);
        assert_eq!(base64(b"default:pw"), "ZGVmYXVsdDpwdw==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(percent_encode("INSERT INTO a.b"), "INSERT%20INTO%20a.b");
        // A port nothing listens on: unreachable, quickly, never a hang.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = ClickHouse::new(&format!("http://127.0.0.1:{port}"), None)
            .version()
            .unwrap_err();
        assert!(e.is_unreachable(), "{e}");
    }
}
