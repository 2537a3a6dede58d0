//! `[fleet]`: this node's part in a fleet (docs/fleet.md). The node publishes the flow
//! records of its sealed segments to a ClickHouse server, the fleet's catalog, and answers
//! fleet questions from it.
//!
//! ```toml
//! [fleet]
//! node = "core-uplink-1"                        # this node's name (letters, digits, . _ -)
//! clickhouse = "http://127.0.0.1:8123"          # ClickHouse's HTTP interface
//! clickhouse_password_file = "ch.password"      # optional; user `default` without it
//! advertise = "https://cap1.example:8443"       # optional: this node's `capsule serve`
//! ca = "/etc/capsule/ca.pem"                    # optional: to reach the other nodes
//! token_file = "fleet.token"                    # optional: the token the other nodes take
//! ```
//!
//! Relative paths are from the config file's directory ([`crate::Config::load`]).

use std::path::{Path, PathBuf};

use toml::de::DeTable;

use crate::error::ErrorKind;
use crate::walk::{join, Src};

/// The keys of `[fleet]`, in the order docs/config.md lists them.
pub const FLEET_KEYS: [&str; 6] = [
    "node",
    "clickhouse",
    "clickhouse_password_file",
    "advertise",
    "ca",
    "token_file",
];

/// The `[fleet]` section, checked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Fleet {
    /// This node's name: 1 to 64 letters, digits, `.`, `_` or `-`.
    pub node: String,
    /// ClickHouse's HTTP interface, `http://HOST:PORT`, no path.
    pub clickhouse: String,
    pub clickhouse_password_file: Option<PathBuf>,
    /// This node's `capsule serve` URL (`https://HOST:PORT`), for the fleet's registry.
    pub advertise: Option<String>,
    pub ca: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
}

impl Fleet {
    /// Relative paths made absolute against `dir` (the config file's directory).
    pub(crate) fn resolve(&mut self, dir: &Path) {
        for p in [
            &mut self.clickhouse_password_file,
            &mut self.ca,
            &mut self.token_file,
        ]
        .into_iter()
        .flatten()
        {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }
}

/// Whether `s` is a node name.
pub fn valid_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// Whether `url` is `SCHEME://HOST[:PORT]` with one of `schemes` and nothing after.
fn base_url(url: &str, schemes: &[&str]) -> bool {
    schemes.iter().any(|s| {
        url.strip_prefix(s)
            .and_then(|r| r.strip_prefix("://"))
            .is_some_and(|rest| {
                let rest = rest.strip_suffix('/').unwrap_or(rest);
                !rest.is_empty()
                    && !rest.contains(['/', '?', '#', '@', ' '])
                    && rest.rsplit_once(':').is_none_or(|(h, p)| {
                        !h.is_empty()
                            && (h.ends_with(']') || !h.contains(':'))
                            && p.parse::<u16>().is_ok()
                    })
            })
    })
}

/// Parses the `[fleet]` table; each problem is kept on `src` (the caller finishes).
pub(crate) fn parse(
    src: &Src,
    path: &str,
    t: &DeTable<'_>,
    at: std::ops::Range<usize>,
) -> Option<Fleet> {
    src.only_keys(path, t, &FLEET_KEYS);
    let text = |key: &str, expected: &str| -> Option<(String, std::ops::Range<usize>)> {
        let v = t.get(key)?;
        let dotted = join(path, key);
        let s = src.keep(src.string(&dotted, v, expected))?;
        if s.is_empty() {
            src.keep::<()>(Err(src.err(
                v.span(),
                &dotted,
                ErrorKind::BadValue,
                expected,
                "an empty string",
            )));
            return None;
        }
        Some((s.to_string(), v.span()))
    };
    let bad = |span: std::ops::Range<usize>, key: &str, expected: &str, found: &str| {
        src.keep::<()>(Err(src.err(
            span,
            &join(path, key),
            ErrorKind::BadValue,
            expected,
            format!("{found:?}"),
        )));
    };
    let missing = |key: &str, expected: &str| {
        src.keep::<()>(Err(src.err(
            at.clone(),
            &join(path, key),
            ErrorKind::MissingKey,
            expected,
            "",
        )));
    };
    const NODE: &str = "a node name: 1 to 64 letters, digits, '.', '_' or '-'";
    const CH: &str =
        "ClickHouse's HTTP interface, http://HOST:PORT, no path (HTTPS is not supported yet)";
    const ADV: &str = "this node's `capsule serve` URL, https://HOST:PORT";
    let node = match text("node", NODE) {
        Some((s, span)) if !valid_node_name(&s) => {
            bad(span, "node", NODE, &s);
            None
        }
        None if !t.contains_key("node") => {
            missing("node", NODE);
            None
        }
        n => n.map(|(s, _)| s),
    };
    let clickhouse = match text("clickhouse", CH) {
        Some((s, span)) if !base_url(&s, &["http"]) => {
            bad(span, "clickhouse", CH, &s);
            None
        }
        None if !t.contains_key("clickhouse") => {
            missing("clickhouse", CH);
            None
        }
        c => c.map(|(s, _)| s.trim_end_matches('/').to_string()),
    };
    let advertise = match text("advertise", ADV) {
        Some((s, span)) if !base_url(&s, &["https"]) => {
            bad(span, "advertise", ADV, &s);
            None
        }
        a => a.map(|(s, _)| s.trim_end_matches('/').to_string()),
    };
    let file = "a file name (a string)";
    let clickhouse_password_file = text("clickhouse_password_file", file).map(|(s, _)| s.into());
    let ca = text("ca", file).map(|(s, _)| s.into());
    let token_file = text("token_file", file).map(|(s, _)| s.into());
    Some(Fleet {
        node: node?,
        clickhouse: clickhouse?,
        clickhouse_password_file,
        advertise,
        ca,
        token_file,
    })
}

#[cfg(test)]
mod tests {
    use crate::{Config, ErrorKind};

    fn parse(text: &str) -> Result<Config, crate::ConfigError> {
        Config::parse(text, "t.toml")
    }

    #[test]
    fn a_fleet_section_is_read() {
        let c = parse(
            "[fleet]\nnode = \"core-1\"\nclickhouse = \"http://127.0.0.1:8123/\"\n\
             advertise = \"https://cap1:8443\"\ntoken_file = \"f.token\"\n",
        )
        .unwrap();
        let f = c.fleet().unwrap();
        assert_eq!(f.node, "core-1");
        assert_eq!(f.clickhouse, "http://127.0.0.1:8123");
        assert_eq!(f.advertise.as_deref(), Some("https://cap1:8443"));
        assert_eq!(
            f.token_file.as_deref(),
            Some(std::path::Path::new("f.token"))
        );
        assert_eq!(f.clickhouse_password_file, None);
        assert!(parse("").unwrap().fleet().is_none());
    }

    #[test]
    fn relative_paths_are_from_the_files_directory() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("c.toml");
        std::fs::write(
            &path,
            "[fleet]\nnode = \"n\"\nclickhouse = \"http://h:1\"\nclickhouse_password_file = \"pw\"\nca = \"/etc/ca.pem\"\n",
        )
        .unwrap();
        let c = Config::load(&path).unwrap();
        let f = c.fleet().unwrap();
        assert_eq!(
            f.clickhouse_password_file.as_deref(),
            Some(d.path().join("pw").as_path())
        );
        assert_eq!(f.ca.as_deref(), Some(std::path::Path::new("/etc/ca.pem")));
    }

    #[test]
    fn bad_fleet_sections_name_the_line_and_the_key() {
        for (text, key, kind, line) in [
            (
                "[fleet]\nclickhouse = \"http://h:1\"\n",
                "fleet.node",
                ErrorKind::MissingKey,
                1,
            ),
            (
                "[fleet]\nnode = \"n\"\n",
                "fleet.clickhouse",
                ErrorKind::MissingKey,
                1,
            ),
            (
                "[fleet]\nnode = \"a b\"\nclickhouse = \"http://h:1\"\n",
                "fleet.node",
                ErrorKind::BadValue,
                2,
            ),
            (
                "[fleet]\nnode = \"n\"\nclickhouse = \"h:8123\"\n",
                "fleet.clickhouse",
                ErrorKind::BadValue,
                3,
            ),
            (
                "[fleet]\nnode = \"n\"\nclickhouse = \"http://h:1/db\"\n",
                "fleet.clickhouse",
                ErrorKind::BadValue,
                3,
            ),
            (
                "[fleet]\nnode = \"n\"\nclickhouse = \"http://h:99999\"\n",
                "fleet.clickhouse",
                ErrorKind::BadValue,
                3,
            ),
            (
                "[fleet]\nnode = \"n\"\nclickhouse = \"https://h:8443\"\n",
                "fleet.clickhouse",
                ErrorKind::BadValue,
                3,
            ),
            (
                "[fleet]\nnode = \"n\"\nclickhouse = \"http://h:1\"\nadvertise = \"http://a:1\"\n",
                "fleet.advertise",
                ErrorKind::BadValue,
                4,
            ),
            (
                "[fleet]\nnode = \"n\"\nclickhouse = \"http://h:1\"\nca = 3\n",
                "fleet.ca",
                ErrorKind::WrongType,
                4,
            ),
            (
                "[fleet]\nnode = \"n\"\nclickhouse = \"http://h:1\"\ntoken = \"t\"\n",
                "fleet.token",
                ErrorKind::UnknownKey,
                4,
            ),
            ("fleet = 1\n", "fleet", ErrorKind::WrongType, 1),
        ] {
            let e = parse(text).unwrap_err();
            let i = e.invalid().unwrap_or_else(|| panic!("{e}"));
            assert_eq!((i.key.as_str(), i.kind, i.line), (key, kind, line), "{e}");
            assert!(e.to_string().starts_with(&format!("t.toml:{line}:")), "{e}");
        }
    }
}
