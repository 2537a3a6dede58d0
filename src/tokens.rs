//! The bearer-token file of `capsule serve` (`--tokens FILE`), written by `capsule token add`.
//!
//! A token is 32 random bytes from the operating system (getrandom), shown once to the
//! operator as 64 hex digits; the file keeps only its SHA-256, one JSON object a line:
//! `{"user":"alice","sha256":"<64 hex>","created":"2026-12-02T02:00:00Z"}`. The file is
//! created 0600. The server re-reads it when its modification time or length changes, so a
//! token added or a line removed (revocation) takes effect at the next request.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// One line of the token file.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Line {
    user: String,
    sha256: String,
    #[serde(default)]
    created: Option<String>,
}

/// The SHA-256 of a token as the file writes it (lower-case hex).
fn hash_hex(token: &str) -> String {
    hex(&Sha256::digest(token.trim().as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `user` is a name the audit log and the file can carry as it is.
fn valid_user(user: &str) -> bool {
    !user.is_empty()
        && user.len() <= 64
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
}

/// Adds a new token for `user` to `path` (created 0600 if missing) and returns the token.
pub fn add(path: &Path, user: &str) -> Result<String> {
    if !valid_user(user) {
        bail!(
            "user name {user:?}: expected 1 to 64 characters among letters, digits, `-`, `_`, \
             `.` and `@`"
        );
    }
    if path.exists() {
        // A file that does not parse is not appended to: the operator must see why first.
        load(path)?;
    }
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("cannot get random bytes: {e}"))?;
    let token = hex(&raw);
    let line = Line {
        user: user.to_string(),
        sha256: hash_hex(&token),
        created: Some(humantime::format_rfc3339_seconds(SystemTime::now()).to_string()),
    };
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot open the token file {}", path.display()))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    let mut text = serde_json::to_string(&line)?;
    text.push('\n');
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write the token file {}", path.display()))?;
    Ok(token)
}

/// The (user, SHA-256 hex) pairs of the file at `path`. A bad line names its number and
/// what was expected.
fn load(path: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            continue;
        }
        let line: Line = serde_json::from_str(l).with_context(|| {
            format!(
                "{}: line {}: expected a JSON object {{\"user\": ..., \"sha256\": ...}}",
                path.display(),
                i + 1
            )
        })?;
        if line.sha256.len() != 64 || !line.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "{}: line {}: sha256: expected 64 hex digits, found {:?}",
                path.display(),
                i + 1,
                line.sha256
            );
        }
        if !valid_user(&line.user) {
            bail!(
                "{}: line {}: user {:?} is not a valid user name",
                path.display(),
                i + 1,
                line.user
            );
        }
        out.push((line.user, line.sha256.to_ascii_lowercase()));
    }
    Ok(out)
}

/// The token file as the server holds it, re-read when it changes.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    stamp: Option<(SystemTime, u64)>,
    entries: Vec<(String, String)>,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl Tokens {
    /// Reads the file at `path`; a file that does not parse is an error here, at start.
    pub fn open(path: &Path) -> Result<Tokens> {
        let entries = load(path)?;
        Ok(Tokens {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                stamp: stamp(path),
                entries,
            }),
        })
    }

    /// The user whose token `token` is, re-reading the file first if it changed. A file
    /// that became unreadable or invalid keeps the last good list (and says so on stderr).
    pub fn user_of(&self, token: &str) -> Option<String> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = stamp(&self.path);
        if now != st.stamp {
            match load(&self.path) {
                Ok(entries) => {
                    st.entries = entries;
                    st.stamp = now;
                }
                Err(e) => {
                    eprintln!("capsule serve: warning: keeping the tokens read before: {e:#}")
                }
            }
        }
        let want = hash_hex(token);
        // Every entry is compared in full, whatever matches, so timing tells nothing.
        let mut found = None;
        for (user, h) in &st.entries {
            let same = h
                .bytes()
                .zip(want.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            if same && found.is_none() {
                found = Some(user.clone());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_added_token_is_found_for_its_user_and_a_wrong_one_is_not() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tokens");
        let a = add(&p, "alice").unwrap();
        let b = add(&p, "bob").unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(!text.contains(&a), "the token itself must not be stored");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let t = Tokens::open(&p).unwrap();
        assert_eq!(t.user_of(&a).as_deref(), Some("alice"));
        assert_eq!(t.user_of(&b).as_deref(), Some("bob"));
        assert_eq!(t.user_of(&a.replace('a', "b")), None);
        assert_eq!(t.user_of(""), None);
        // Added while "running": found without reopening.
        let c = add(&p, "carol").unwrap();
        assert_eq!(t.user_of(&c).as_deref(), Some("carol"));
    }

    #[test]
    fn a_bad_line_names_the_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tokens");
        std::fs::write(&p, "{\"user\":\"a\",\"sha256\":\"00\"}\n").unwrap();
        let e = format!("{:#}", Tokens::open(&p).unwrap_err());
        assert!(e.contains("line 1") && e.contains("64 hex digits"), "{e}");
        let e = format!("{:#}", add(&p, "bob").unwrap_err());
        assert!(e.contains("line 1"), "{e}");
        assert!(add(&p, "bad user").is_err());
    }
}
