//! The bearer-token file of `capsule serve` (`--tokens FILE`), written by `capsule token add`.
//!
//! A token is 32 random bytes from the operating system (getrandom), shown once to the
//! operator as 64 hex digits; the file keeps only its SHA-256, one JSON object a line:
//! `{"user":"alice","sha256":"<64 hex>","created":"2026-12-02T02:00:00Z"}`, with
//! `"expires":"..."` when `token add --expires` gave one. A token's id, shown by `token
//! list`, is the first 12 hex digits of its SHA-256. The file is created 0600. The server
//! re-reads it when its modification time or length changes, so a token added, revoked
//! (`token revoke` rewrites the file without the user's lines: a temporary file renamed over
//! it) or expired takes effect at the next request.

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires: Option<String>,
}

/// One token of the file as `token list` shows it (never the hash in full).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listed {
    pub user: String,
    /// The first 12 hex digits of the token's SHA-256.
    pub id: String,
    pub created: Option<String>,
    pub expires: Option<String>,
    pub expired: bool,
}

/// Hex digits of the SHA-256 that make a token's id.
const ID_DIGITS: usize = 12;

/// One valid line: user, SHA-256 hex, creation and expiry as the file has them, and the
/// expiry as an instant.
#[derive(Debug, Clone)]
struct Entry {
    user: String,
    sha256: String,
    created: Option<String>,
    expires: Option<String>,
    expires_at: Option<SystemTime>,
}

impl Entry {
    fn expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }
}

/// What a token presented to the server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// A token of this user, in force.
    User(String),
    /// A token of this user whose expiry has passed.
    Expired(String),
    /// No token of the file.
    Unknown,
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

/// Adds a new token for `user` to `path` (created 0600 if missing) and returns the token;
/// with `valid_for`, the token expires that long from now.
pub fn add(path: &Path, user: &str, valid_for: Option<std::time::Duration>) -> Result<String> {
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
    let now = SystemTime::now();
    let line = Line {
        user: user.to_string(),
        sha256: hash_hex(&token),
        created: Some(humantime::format_rfc3339_seconds(now).to_string()),
        expires: valid_for.map(|d| humantime::format_rfc3339_seconds(now + d).to_string()),
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

/// The valid lines of the file at `path`. A bad line names its number and what was
/// expected.
fn load(path: &Path) -> Result<Vec<Entry>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            continue;
        }
        let line = parse_line(path, i + 1, l)?;
        let expires_at = match &line.expires {
            None => None,
            Some(e) => Some(humantime::parse_rfc3339_weak(e).with_context(|| {
                format!(
                    "{}: line {}: expires: expected an RFC 3339 time, found {e:?}",
                    path.display(),
                    i + 1
                )
            })?),
        };
        out.push(Entry {
            user: line.user,
            sha256: line.sha256.to_ascii_lowercase(),
            created: line.created,
            expires: line.expires,
            expires_at,
        });
    }
    Ok(out)
}

/// Line `n` of the file, checked.
fn parse_line(path: &Path, n: usize, l: &str) -> Result<Line> {
    let line: Line = serde_json::from_str(l).with_context(|| {
        format!(
            "{}: line {n}: expected a JSON object {{\"user\": ..., \"sha256\": ...}}",
            path.display(),
        )
    })?;
    if line.sha256.len() != 64 || !line.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!(
            "{}: line {n}: sha256: expected 64 hex digits, found {:?}",
            path.display(),
            line.sha256
        );
    }
    if !valid_user(&line.user) {
        bail!(
            "{}: line {n}: user {:?} is not a valid user name",
            path.display(),
            line.user
        );
    }
    Ok(line)
}

/// The tokens of the file at `path`, in file order.
pub fn list(path: &Path) -> Result<Vec<Listed>> {
    let now = SystemTime::now();
    Ok(load(path)?
        .into_iter()
        .map(|e| Listed {
            expired: e.expired(now),
            id: e.sha256[..ID_DIGITS].to_string(),
            user: e.user,
            created: e.created,
            expires: e.expires,
        })
        .collect())
}

/// Removes every token of `user` from the file at `path` and returns how many there were
/// (an error when none). The file is rewritten whole: a temporary file beside it (0600,
/// fsynced) renamed over it, then the directory fsynced; comments and other users' lines
/// are kept as they were.
pub fn revoke(path: &Path, user: &str) -> Result<usize> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let mut kept = String::with_capacity(text.len());
    let mut removed = 0;
    for (i, l) in text.lines().enumerate() {
        let is_token = !(l.trim().is_empty() || l.trim_start().starts_with('#'));
        if is_token && parse_line(path, i + 1, l)?.user == user {
            removed += 1;
            continue;
        }
        kept.push_str(l);
        kept.push('\n');
    }
    if removed == 0 {
        bail!("{}: no token of user {user:?}", path.display());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut raw = [0u8; 8];
    getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("cannot get random bytes: {e}"))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", hex(&raw)));
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(kept.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot rewrite the token file {}", path.display()));
    }
    Ok(removed)
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
    entries: Vec<Entry>,
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

    /// The user whose token `token` is, in force (the tests' shorthand of [`Tokens::check`]).
    #[cfg(test)]
    pub fn user_of(&self, token: &str) -> Option<String> {
        match self.check(token) {
            Auth::User(u) => Some(u),
            Auth::Expired(_) | Auth::Unknown => None,
        }
    }

    /// What `token` is: a user's token in force, an expired one, or none of the file's,
    /// re-reading the file first if it changed. A file that was removed, or became
    /// unreadable or invalid, admits no token until it is readable again (and says so on
    /// stderr, once per change): a revocation by deleting or breaking the file never fails
    /// open.
    pub fn check(&self, token: &str) -> Auth {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = stamp(&self.path);
        if now != st.stamp {
            st.stamp = now;
            match load(&self.path) {
                Ok(entries) => st.entries = entries,
                Err(e) => {
                    st.entries.clear();
                    eprintln!(
                        "capsule serve: error: no token is accepted until the token file \
                         reads again: {e:#}"
                    )
                }
            }
        }
        let want = hash_hex(token);
        let now = SystemTime::now();
        // Every entry is compared in full, whatever matches, so timing tells nothing.
        let mut found = Auth::Unknown;
        for e in &st.entries {
            let same = e
                .sha256
                .bytes()
                .zip(want.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            if same && found == Auth::Unknown {
                found = if e.expired(now) {
                    Auth::Expired(e.user.clone())
                } else {
                    Auth::User(e.user.clone())
                };
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
        let a = add(&p, "alice", None).unwrap();
        let b = add(&p, "bob", None).unwrap();
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
        let c = add(&p, "carol", None).unwrap();
        assert_eq!(t.user_of(&c).as_deref(), Some("carol"));
    }

    #[test]
    fn a_bad_line_names_the_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tokens");
        std::fs::write(&p, "{\"user\":\"a\",\"sha256\":\"00\"}\n").unwrap();
        let e = format!("{:#}", Tokens::open(&p).unwrap_err());
        assert!(e.contains("line 1") && e.contains("64 hex digits"), "{e}");
        let e = format!("{:#}", add(&p, "bob", None).unwrap_err());
        assert!(e.contains("line 1"), "{e}");
        assert!(add(&p, "bad user", None).is_err());
    }

    #[test]
    fn revoke_removes_every_token_of_the_user_and_a_running_reader_sees_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tokens");
        let a1 = add(&p, "alice", None).unwrap();
        let b = add(&p, "bob", None).unwrap();
        let a2 = add(&p, "alice", None).unwrap();
        let t = Tokens::open(&p).unwrap();
        assert_eq!(t.user_of(&a2).as_deref(), Some("alice"));
        assert_eq!(revoke(&p, "alice").unwrap(), 2);
        assert_eq!(t.check(&a1), Auth::Unknown);
        assert_eq!(t.check(&a2), Auth::Unknown);
        assert_eq!(t.user_of(&b).as_deref(), Some("bob"));
        let e = format!("{:#}", revoke(&p, "alice").unwrap_err());
        assert!(e.contains("no token of user \"alice\""), "{e}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            1,
            "no temporary left"
        );
    }

    #[test]
    fn a_removed_or_broken_file_admits_no_token_until_it_reads_again() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tokens");
        let a = add(&p, "alice", None).unwrap();
        let t = Tokens::open(&p).unwrap();
        assert_eq!(t.user_of(&a).as_deref(), Some("alice"));
        let good = std::fs::read_to_string(&p).unwrap();
        // Revoking by deleting the file.
        std::fs::remove_file(&p).unwrap();
        assert_eq!(t.check(&a), Auth::Unknown);
        // An edit that breaks the file (a stray character) also refuses.
        std::fs::write(&p, format!("{good}x\n")).unwrap();
        assert_eq!(t.check(&a), Auth::Unknown);
        assert_eq!(
            t.check(&a),
            Auth::Unknown,
            "still refused on the next request"
        );
        // Mended: admitted again.
        std::fs::write(&p, &good).unwrap();
        assert_eq!(t.user_of(&a).as_deref(), Some("alice"));
    }

    #[test]
    fn list_shows_ids_not_hashes_and_an_expired_token_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tokens");
        let a = add(
            &p,
            "alice",
            Some(std::time::Duration::from_secs(90 * 86400)),
        )
        .unwrap();
        let l = list(&p).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].user, "alice");
        assert_eq!(l[0].id, hash_hex(&a)[..12]);
        assert!(l[0].expires.is_some() && !l[0].expired);
        // A line whose expiry has passed.
        let b = "b".repeat(64);
        let line = format!(
            "{{\"user\":\"bob\",\"sha256\":\"{}\",\"expires\":\"2020-01-01T00:00:00Z\"}}\n",
            hash_hex(&b)
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        let t = Tokens::open(&p).unwrap();
        assert_eq!(t.check(&a), Auth::User("alice".into()));
        assert_eq!(t.check(&b), Auth::Expired("bob".into()));
        assert_eq!(t.user_of(&b), None);
        assert!(list(&p).unwrap()[1].expired);
        std::fs::write(
            &p,
            "{\"user\":\"c\",\"sha256\":\"".to_string()
                + &"0".repeat(64)
                + "\",\"expires\":\"soon\"}\n",
        )
        .unwrap();
        let e = format!("{:#}", Tokens::open(&p).unwrap_err());
        assert!(e.contains("line 1") && e.contains("expires"), "{e}");
    }
}
