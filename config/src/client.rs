//! The client's own file, `~/.config/capsule/client.toml`: the server a remote question goes
//! to and how to reach it, so `capsule top --remote` is the whole command. It is not the
//! `--config` file (that one holds a site's groups and policy; this one a person's access),
//! so it has its own five keys and no sections:
//!
//! ```toml
//! server = "https://capsule.example:8443"
//! token_file = "alice.token"      # relative paths are from this file's directory
//! ca = "/etc/capsule/ca.pem"
//! client_cert = "alice.pem"       # with client_key, for a server that asks (mutual TLS)
//! client_key = "alice.key"
//! ```
//!
//! Each key is the flag of the same name (`--token-file` ...); a flag given on the command
//! line wins over the file.

use std::path::{Path, PathBuf};

use toml::de::DeTable;

use crate::error::{ConfigError, ErrorKind};
use crate::walk::Src;

/// The keys of the client file, in the order docs/serve.md lists them.
pub const CLIENT_KEYS: [&str; 5] = ["server", "token_file", "ca", "client_cert", "client_key"];

/// What the client file says; paths already made absolute against the file's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientConfig {
    /// The server `--remote` asks (`https://HOST:PORT`).
    pub server: Option<String>,
    pub token_file: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

impl ClientConfig {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<ClientConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        ClientConfig::parse(&text, &path.display().to_string(), dir)
    }

    /// Checks `text`; errors name `file`. Relative paths are taken from `dir`.
    pub fn parse(text: &str, file: &str, dir: &Path) -> Result<ClientConfig, ConfigError> {
        let found = std::cell::RefCell::new(Vec::new());
        let src = Src {
            file,
            text,
            found: &found,
        };
        let doc = DeTable::parse(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let message = e.message().trim().replace('\n', "; ");
            src.err(span, "", ErrorKind::Syntax, "", message)
        })?;
        let doc = doc.get_ref();
        // Unknown keys are all reported together, before the values are read.
        src.only_keys("", doc, &CLIENT_KEYS);
        src.finish(())?;
        let text_of = |key: &str, expected: &str| -> Result<Option<(String, _)>, ConfigError> {
            let Some(v) = doc.get(key) else {
                return Ok(None);
            };
            let s = src.string(key, v, expected)?;
            if s.is_empty() {
                return Err(src.err(
                    v.span(),
                    key,
                    ErrorKind::BadValue,
                    expected,
                    "an empty string",
                ));
            }
            Ok(Some((s.to_string(), v.span())))
        };
        let path_of = |key: &str| -> Result<Option<PathBuf>, ConfigError> {
            Ok(text_of(key, "a file name (a string)")?.map(|(s, _)| dir.join(s)))
        };
        let server = match text_of("server", "a URL, https://HOST:PORT")? {
            Some((s, span)) if !s.starts_with("https://") => {
                return Err(src.err(
                    span,
                    "server",
                    ErrorKind::BadValue,
                    "a URL, https://HOST:PORT (only HTTPS is served)",
                    format!("{s:?}"),
                ))
            }
            s => s.map(|(s, _)| s),
        };
        let c = ClientConfig {
            server,
            token_file: path_of("token_file")?,
            ca: path_of("ca")?,
            client_cert: path_of("client_cert")?,
            client_key: path_of("client_key")?,
        };
        if c.client_cert.is_some() != c.client_key.is_some() {
            let (has, lacks) = if c.client_cert.is_some() {
                ("client_cert", "client_key")
            } else {
                ("client_key", "client_cert")
            };
            let span = doc.get(has).map_or(0..0, |v| v.span());
            return Err(src.err(
                span,
                lacks,
                ErrorKind::MissingKey,
                format!("{lacks} beside {has} (a certificate and its key)"),
                "",
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ClientConfig, ConfigError> {
        ClientConfig::parse(text, "client.toml", Path::new("/home/a/.config/capsule"))
    }

    #[test]
    fn keys_are_read_and_relative_paths_are_from_the_files_directory() {
        let c = parse(
            "server = \"https://cap:8443\"\ntoken_file = \"a.token\"\nca = \"/etc/ca.pem\"\n",
        )
        .unwrap();
        assert_eq!(c.server.as_deref(), Some("https://cap:8443"));
        assert_eq!(
            c.token_file.unwrap(),
            Path::new("/home/a/.config/capsule/a.token")
        );
        assert_eq!(c.ca.unwrap(), Path::new("/etc/ca.pem"));
        assert_eq!(parse("").unwrap(), ClientConfig::default());
    }

    #[test]
    fn bad_files_name_the_line_and_the_key() {
        for (text, key, kind, line) in [
            (
                "server = \"https://a\"\ntoken = \"t\"\n",
                "token",
                ErrorKind::UnknownKey,
                2,
            ),
            ("\nca = 3\n", "ca", ErrorKind::WrongType, 2),
            (
                "server = \"http://a:1\"\n",
                "server",
                ErrorKind::BadValue,
                1,
            ),
            ("token_file = \"\"\n", "token_file", ErrorKind::BadValue, 1),
            (
                "\n\nclient_cert = \"c.pem\"\n",
                "client_key",
                ErrorKind::MissingKey,
                3,
            ),
            ("server = \n", "", ErrorKind::Syntax, 1),
        ] {
            let e = parse(text).unwrap_err();
            let i = e.invalid().unwrap();
            assert_eq!((i.key.as_str(), i.kind, i.line), (key, kind, line), "{e}");
            assert!(
                e.to_string().starts_with(&format!("client.toml:{line}:")),
                "{e}"
            );
        }
    }
}
