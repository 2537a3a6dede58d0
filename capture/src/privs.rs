//! Least privilege for a live capture: set up with the privileges it takes, then run as an
//! unprivileged user with only the capabilities still needed.
//!
//! ```text
//! account(--user, --group)      look the user and group up (NSS), before anything else
//! check_store(store, account)   every directory on the way searchable, the store tree (or
//!                               the directory it will be made in) writable by that user
//! open_as(account)              this thread's file-system identity becomes the user's
//!                               (setgroups, setfsgid, setfsuid): every store file the
//!                               capture creates from here on is owned by user:group
//! ... sockets, rings, XDP program attached, store opened and locked, metrics bound ...
//! drop(account, keep)           in EVERY thread: bounding set and ambient set emptied but
//!                               for `keep`, setgroups/setresgid/setresuid to the account,
//!                               effective = permitted = `keep`, no_new_privs
//! ```
//!
//! Without an account the drop still runs: a capture started as root (or with ambient
//! capabilities from a service manager) keeps only `keep`. What a capture keeps, and why,
//! is for the capture itself to say (`Capture::kept_capabilities` in the live module).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use capsule_sys::privs as sys;

/// Capability numbers (linux/capability.h) that capture takes or keeps.
pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_NET_RAW: u32 = 13;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

/// A set of capabilities, bit n for capability n.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps(pub u64);

impl Caps {
    /// The empty set.
    pub const NONE: Caps = Caps(0);

    /// This set with capability `cap` added.
    pub fn with(self, cap: u32) -> Caps {
        Caps(self.0 | (1 << cap))
    }

    /// Whether the set holds `cap`.
    pub fn has(self, cap: u32) -> bool {
        self.0 & (1 << cap) != 0
    }

    /// The capability names in the set (`CAP_NET_ADMIN`), numbers for unknown ones.
    pub fn names(self) -> Vec<String> {
        (0..64)
            .filter(|&c| self.has(c))
            .map(|c| match cap_name(c) {
                Some(n) => n.to_string(),
                None => format!("cap_{c}"),
            })
            .collect()
    }
}

impl std::fmt::Display for Caps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == 0 {
            return f.write_str("none");
        }
        f.write_str(&self.names().join(", "))
    }
}

/// The name of capability `cap`, for the few capture deals with.
fn cap_name(cap: u32) -> Option<&'static str> {
    Some(match cap {
        CAP_NET_ADMIN => "CAP_NET_ADMIN",
        CAP_NET_RAW => "CAP_NET_RAW",
        CAP_SYS_ADMIN => "CAP_SYS_ADMIN",
        CAP_PERFMON => "CAP_PERFMON",
        CAP_BPF => "CAP_BPF",
        _ => return None,
    })
}

/// The user and group a capture runs as after set-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub user: String,
    pub uid: u32,
    pub group: String,
    pub gid: u32,
}

impl std::fmt::Display for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} (uid {}, gid {})",
            self.user, self.group, self.uid, self.gid
        )
    }
}

/// Why privileges cannot be dropped as asked.
#[derive(Debug, thiserror::Error)]
pub enum PrivsError {
    #[error("--user {0}: no such user")]
    NoUser(String),
    #[error("--group {0}: no such group")]
    NoGroup(String),
    #[error("cannot look up {what}")]
    Lookup {
        what: String,
        #[source]
        error: std::io::Error,
    },
    #[error(
        "--user {user} needs a capture started as root (this one runs as uid {uid}); under \
         a service manager that starts it as {user} already, leave --user out"
    )]
    NotRoot { user: String, uid: u32 },
    #[error(
        "{account} cannot use the store: {path}: {why}; give it the store with \
         `install -d -o {user} -g {group} -m 0750 DIR` or `chown -R {user}:{group} DIR`"
    )]
    Store {
        account: String,
        user: String,
        group: String,
        path: PathBuf,
        why: String,
    },
    #[error("cannot take the file-system identity of {account}")]
    Identity {
        account: String,
        #[source]
        error: std::io::Error,
    },
    #[error("cannot drop privileges")]
    Drop {
        #[source]
        error: std::io::Error,
    },
}

/// The account `--user`/`--group` name: the group defaults to the user's primary group.
/// `None` without a user.
pub fn account(user: Option<&str>, group: Option<&str>) -> Result<Option<Account>, PrivsError> {
    let Some(user) = user else { return Ok(None) };
    let ids = sys::user_by_name(user)
        .map_err(|error| PrivsError::Lookup {
            what: format!("user {user}"),
            error,
        })?
        .ok_or_else(|| PrivsError::NoUser(user.to_string()))?;
    let (group, gid) = match group {
        Some(g) => {
            let gid = sys::group_by_name(g)
                .map_err(|error| PrivsError::Lookup {
                    what: format!("group {g}"),
                    error,
                })?
                .ok_or_else(|| PrivsError::NoGroup(g.to_string()))?;
            (g.to_string(), gid)
        }
        None => (group_name(ids.gid), ids.gid),
    };
    let uid_now = current_uid();
    if uid_now != 0 && uid_now != ids.uid {
        return Err(PrivsError::NotRoot {
            user: user.to_string(),
            uid: uid_now,
        });
    }
    Ok(Some(Account {
        user: user.to_string(),
        uid: ids.uid,
        group,
        gid,
    }))
}

/// The name of group `gid` from /etc/group, else the number.
fn group_name(gid: u32) -> String {
    std::fs::read_to_string("/etc/group")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                let id = f.nth(1)?.parse::<u32>().ok()?;
                (id == gid).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| gid.to_string())
}

/// This process's real uid, from /proc/self/status.
fn current_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

/// Whether `account` (with its one group) may `want` (4 read, 2 write, 1 search/execute) on
/// a file with metadata `m`, by its mode bits (POSIX ACLs are not read).
fn may(m: &std::fs::Metadata, account: &Account, want: u32) -> bool {
    let mode = m.mode();
    let bits = if m.uid() == account.uid {
        mode >> 6
    } else if m.gid() == account.gid {
        mode >> 3
    } else {
        mode
    } & 7;
    bits & want == want
}

/// Checks, before any set-up, that `account` can run a capture into `store`: every
/// existing directory on the way is searchable, and either the store's whole tree is
/// readable and writable (files) and searchable and writable (directories) by it, or, for
/// a store still to be made, the nearest existing directory above is writable. The error
/// names the first path that fails, with its owner and mode.
pub fn check_store(store: &Path, account: &Account) -> Result<(), PrivsError> {
    let fail = |path: &Path, why: String| PrivsError::Store {
        account: account.to_string(),
        user: account.user.clone(),
        group: account.group.clone(),
        path: path.to_path_buf(),
        why,
    };
    let describe = |m: &std::fs::Metadata| {
        format!(
            "owned by uid {} gid {}, mode {:04o}",
            m.uid(),
            m.gid(),
            m.mode() & 0o7777
        )
    };
    let store = std::path::absolute(store).map_err(|e| fail(store, e.to_string()))?;
    // The directories above: searchable; the nearest existing one writable if the store is
    // missing.
    let mut missing = None;
    for dir in store
        .ancestors()
        .skip(1)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        match std::fs::metadata(dir) {
            Ok(m) if !may(&m, account, 1) => {
                return Err(fail(dir, format!("not searchable ({})", describe(&m))))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.get_or_insert(dir.to_path_buf());
                break;
            }
            Err(e) => return Err(fail(dir, e.to_string())),
        }
    }
    let made_in = |dir: &Path| -> Result<(), PrivsError> {
        let m = std::fs::metadata(dir).map_err(|e| fail(dir, e.to_string()))?;
        if may(&m, account, 3) {
            Ok(())
        } else {
            Err(fail(
                dir,
                format!(
                    "the store would be made here but it is not writable ({})",
                    describe(&m)
                ),
            ))
        }
    };
    if let Some(first_missing) = missing {
        let parent = first_missing.parent().unwrap_or(Path::new("/"));
        return made_in(parent);
    }
    match std::fs::symlink_metadata(&store) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return made_in(store.parent().unwrap_or(Path::new("/")))
        }
        Err(e) => return Err(fail(&store, e.to_string())),
        Ok(_) => {}
    }
    let mut stack = vec![store];
    while let Some(path) = stack.pop() {
        let m = std::fs::symlink_metadata(&path).map_err(|e| fail(&path, e.to_string()))?;
        if m.is_dir() {
            if !may(&m, account, 7) {
                return Err(fail(
                    &path,
                    format!("directory not writable by it ({})", describe(&m)),
                ));
            }
            for entry in std::fs::read_dir(&path).map_err(|e| fail(&path, e.to_string()))? {
                let entry = entry.map_err(|e| fail(&path, e.to_string()))?;
                stack.push(entry.path());
            }
        } else if m.is_file() && !may(&m, account, 6) {
            return Err(fail(
                &path,
                format!("file not readable and writable by it ({})", describe(&m)),
            ));
        }
    }
    Ok(())
}

/// Makes files this thread creates from now on owned by `account`, and its file access that
/// of the account (setgroups to its group, setfsgid, setfsuid); threads started from here on
/// inherit it. Call it before the store is opened and before any other thread starts: the
/// error says so when one already runs.
pub fn open_as(account: &Account) -> Result<(), PrivsError> {
    let err = |error| PrivsError::Identity {
        account: account.to_string(),
        error,
    };
    let threads = std::fs::read_dir("/proc/self/task").map_err(err)?.count();
    if threads > 1 {
        return Err(err(std::io::Error::other(format!(
            "{threads} threads already run; it must be taken before any other starts"
        ))));
    }
    sys::set_fs_identity(account.uid, account.gid).map_err(err)
}

/// What the process holds after [`drop`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub uid: u32,
    pub gid: u32,
    /// Effective (and permitted) capabilities kept.
    pub kept: Caps,
}

/// Drops, in every thread: to `account` when given (setgroups to its group, setresgid,
/// setresuid), every capability but `keep` (bounding set too, when the process may shrink it),
/// the ambient and inheritable sets, and sets no_new_privs. Call it after set-up.
pub fn drop(account: Option<&Account>, keep: Caps) -> Result<Dropped, PrivsError> {
    sys::drop_in_every_thread(sys::DropPlan {
        uid: account.map(|a| a.uid),
        gid: account.map(|a| a.gid),
        keep: keep.0,
    })
    .map_err(|error| PrivsError::Drop { error })?;
    let (effective, _) = sys::capabilities().map_err(|error| PrivsError::Drop { error })?;
    Ok(Dropped {
        uid: current_uid(),
        gid: account.map_or(u32::MAX, |a| a.gid),
        kept: Caps(effective),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(uid: u32, gid: u32) -> Account {
        Account {
            user: "u".into(),
            uid,
            group: "g".into(),
            gid,
        }
    }

    #[test]
    fn caps_print_their_names() {
        let c = Caps::NONE.with(CAP_NET_ADMIN).with(CAP_BPF);
        assert_eq!(c.to_string(), "CAP_NET_ADMIN, CAP_BPF");
        assert_eq!(Caps::NONE.to_string(), "none");
        assert!(c.has(CAP_BPF) && !c.has(CAP_NET_RAW));
    }

    #[test]
    fn a_missing_user_or_group_is_named() {
        let e = account(Some("capsule-no-such-user-x"), None).unwrap_err();
        assert_eq!(e.to_string(), "--user capsule-no-such-user-x: no such user");
        let e = account(Some("root"), Some("capsule-no-such-group-x")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--group capsule-no-such-group-x: no such group"
        );
        assert_eq!(account(None, None).unwrap(), None);
    }

    #[test]
    fn mode_bits_decide_by_owner_then_group_then_others() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let m = std::fs::metadata(&f).unwrap();
        let (owner, group) = (m.uid(), m.gid());
        assert!(may(&m, &acc(owner, 12345), 6));
        assert!(may(&m, &acc(54321, group), 4));
        assert!(!may(&m, &acc(54321, group), 2));
        assert!(!may(&m, &acc(54321, 12345), 4));
    }

    #[test]
    fn a_store_the_account_cannot_write_is_refused_naming_the_path() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        std::fs::create_dir(&store).unwrap();
        let f = store.join("identity");
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let m = std::fs::metadata(&f).unwrap();
        // An account with the file's group but not its owner: the 0600 file stops it.
        let stranger = Account {
            user: "cap".into(),
            uid: m.uid().wrapping_add(4242),
            group: "capg".into(),
            gid: m.gid(),
        };
        std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o770)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_store(&store, &stranger).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}: file not readable", f.display())),
            "{e}"
        );
        assert!(
            e.contains("mode 0600") && e.contains("chown -R cap:capg"),
            "{e}"
        );
        // The owner is fine, and a store still to be made needs its parent writable.
        let owner = Account {
            uid: m.uid(),
            ..stranger.clone()
        };
        check_store(&store, &owner).unwrap();
        let e = check_store(&dir.path().join("new"), &stranger)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the store would be made here"), "{e}");
    }
}
