//! The one place the store (and the data derived from it: the side index, capture's status
//! file) opens, creates, renames, removes and lists files.
//!
//! The store may run as root in a directory others can write into, so nothing here follows
//! a symlink planted in it:
//!
//! * every call opens the file's parent directory with `O_DIRECTORY|O_NOFOLLOW` and works
//!   relative to that handle (`openat`, `renameat`, `unlinkat`, `mkdirat`, `statat`), so
//!   neither the file nor the directory holding it (`segments/`, `index/`) may be a symlink;
//! * files are opened with `O_NOFOLLOW` and checked to be regular files after opening
//!   (reads add `O_NONBLOCK`, so a planted FIFO cannot hang a reader);
//! * new files are created with `O_CREAT|O_EXCL`; temporary files get an unpredictable name
//!   (`.NAME.<16 hex digits from getrandom>.tmp`), so nothing can be planted in their place;
//! * a symlink found where the store expects a file or directory is [`StoreError::Symlink`],
//!   any other type [`StoreError::WrongType`], both naming the path.
//!
//! Every call that changes what a power loss leaves (creating, renaming, removing, syncing)
//! goes through `crate::durable`, the seam the power-loss tests record.
//!
//! The store root itself is the operator's choice and may be a symlink: [`crate::Store`]
//! resolves it once when it opens the store, and everything below it is checked here.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

use crate::durable;
use crate::error::{Result, StoreError};

/// How [`open`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// An existing file, for reading.
    Read,
    /// An existing file, for appending (and truncating).
    Append,
    /// A new file (it must not exist), for appending.
    CreateNew,
    /// An existing file, for writing with direct I/O (`O_DIRECT`).
    Direct,
    /// A lock file: created if missing, never truncated, opened for writing.
    Lock,
}

/// What a directory entry is (never following a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// An entry of a directory listed by [`list`].
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: OsString,
    pub path: PathBuf,
    pub kind: Kind,
    /// Its length in bytes (as `lstat` gives it).
    pub len: u64,
}

/// An entry of a directory listed by [`list_names`]: its type without its length.
#[derive(Debug, Clone)]
pub struct Named {
    pub name: OsString,
    pub path: PathBuf,
    pub kind: Kind,
}

/// A file's identity and last change as `stat` gives them: what a reader compares to know
/// that a directory's listing, or a file's content, is still what it was (issue 34: the
/// catalog's proof of the segment listing). Every change to a directory's entries sets its
/// modification and change times; an append to a file changes its length; an atomic
/// replace gives another inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    /// Seconds and nanoseconds since the epoch.
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
}

impl FileId {
    /// The identity in `m`.
    pub fn of(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec().clamp(0, 999_999_999) as u32),
            ctime: (m.ctime(), m.ctime_nsec().clamp(0, 999_999_999) as u32),
        }
    }

    /// The identity of `path` (not following a symlink); `None` when it does not exist.
    pub fn of_path(path: &Path) -> Result<Option<FileId>> {
        match std::fs::symlink_metadata(path) {
            Ok(m) => Ok(Some(FileId::of(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io("stat", path, e)),
        }
    }

    /// The change time in nanoseconds since the epoch (0 before it).
    pub fn ctime_ns(&self) -> u128 {
        u128::try_from(self.ctime.0).unwrap_or(0) * 1_000_000_000 + u128::from(self.ctime.1)
    }
}

/// Files the store creates: owner read-write, group read (packet data is not for every
/// user of the machine), whatever the umask (a created file is fchmod'ed to it).
pub const FILE_MODE: u32 = 0o640;
/// Directories the store creates: owner all, group read and search.
pub const DIR_MODE: u32 = 0o750;
const MODE: u32 = FILE_MODE;

/// Gives a file just created exactly [`FILE_MODE`] (the umask may have taken more).
fn exact_mode(fd: &impl AsFd, path: &Path) -> Result<()> {
    rfs::fchmod(fd, Mode::from_raw_mode(FILE_MODE))
        .map_err(|e| StoreError::io("set file mode", path, e.into()))
}

/// The store root `root` resolved (it may be a symlink: the operator's choice); every path
/// below it is then checked by the calls here. A missing root is returned as given, for
/// the caller's own "missing" error.
pub fn resolve_root(root: &Path) -> Result<PathBuf> {
    match std::fs::canonicalize(root) {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(root.to_path_buf()),
        Err(e) => Err(StoreError::io("resolve", root, e)),
    }
}

fn kind_of(t: FileType) -> Kind {
    match t {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// The error for a failed call on `path`: a symlink (or wrong type) at `path` is named as
/// such, whatever the call's errno (ELOOP, ENOTDIR).
fn fail(op: &'static str, path: &Path, e: std::io::Error) -> StoreError {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => StoreError::Symlink {
            path: path.to_path_buf(),
        },
        _ => StoreError::io(op, path, e),
    }
}

/// Splits `path` into its parent (`.` when it has none) and its last component.
fn split(path: &Path) -> (&Path, &Path) {
    let name = path.file_name().map_or(path, Path::new);
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    (parent, name)
}

/// Opens directory `path` without following a symlink at its last component.
fn dir_fd(path: &Path) -> Result<OwnedFd> {
    rfs::openat(
        rfs::CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        let e = std::io::Error::from(e);
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => StoreError::Symlink {
                path: path.to_path_buf(),
            },
            Ok(m) if !m.is_dir() => StoreError::WrongType {
                path: path.to_path_buf(),
                expected: "directory",
            },
            _ => StoreError::io("open directory", path, e),
        }
    })
}

/// Opens the parent directory of `path`, returning it and the file's name in it.
fn parent(path: &Path) -> Result<(OwnedFd, &Path)> {
    let (dir, name) = split(path);
    Ok((dir_fd(dir)?, name))
}

fn check_regular(op: &'static str, path: &Path, f: &File) -> Result<()> {
    let st = rfs::fstat(f).map_err(|e| StoreError::io(op, path, e.into()))?;
    if kind_of(FileType::from_raw_mode(st.st_mode)) != Kind::File {
        return Err(StoreError::WrongType {
            path: path.to_path_buf(),
            expected: "regular file",
        });
    }
    Ok(())
}

/// Opens file `path` as `how` says, never through a symlink; `op` names the call in errors
/// ("open segment").
pub fn open(path: &Path, how: Open, op: &'static str) -> Result<File> {
    let (dir, name) = parent(path)?;
    let flags = OFlags::NOFOLLOW
        | OFlags::CLOEXEC
        | match how {
            Open::Read => OFlags::RDONLY | OFlags::NONBLOCK,
            Open::Append => OFlags::WRONLY | OFlags::APPEND | OFlags::NONBLOCK,
            Open::CreateNew => OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::EXCL,
            Open::Direct => OFlags::WRONLY | OFlags::DIRECT | OFlags::NONBLOCK,
            Open::Lock => OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK,
        };
    let fd = durable::openat(&dir, name, flags, Mode::from_raw_mode(MODE), path)
        .map_err(|e| fail(op, path, e.into()))?;
    let file = File::from(fd);
    check_regular(op, path, &file)?;
    if matches!(how, Open::CreateNew | Open::Lock) {
        exact_mode(&file, path)?;
    }
    if how != Open::Read {
        // Writes to a regular file never block anyway; clear the flag opening needed.
        let fl = rfs::fcntl_getfl(&file).map_err(|e| StoreError::io(op, path, e.into()))?;
        rfs::fcntl_setfl(&file, fl - OFlags::NONBLOCK)
            .map_err(|e| StoreError::io(op, path, e.into()))?;
    }
    Ok(file)
}

/// Reads the whole of file `path`.
pub fn read(path: &Path, op: &'static str) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut f = open(path, Open::Read, op)?;
    let mut out = Vec::new();
    f.read_to_end(&mut out)
        .map_err(|e| StoreError::io(op, path, e))?;
    Ok(out)
}

/// A temporary name for `name` no one can guess: `.NAME.<16 hex digits>.tmp`.
fn temp_name(name: &Path) -> Result<PathBuf> {
    let mut r = [0u8; 8];
    rustix::rand::getrandom(&mut r[..], rustix::rand::GetRandomFlags::empty())
        .map_err(|e| StoreError::io("get random bytes for", name, e.into()))?;
    let mut s = OsString::from(".");
    s.push(name.as_os_str());
    s.push(format!(".{:016x}.tmp", u64::from_le_bytes(r)));
    Ok(PathBuf::from(s))
}

fn write_temp(path: &Path, bytes: &[u8], synced: bool) -> Result<()> {
    let (dir, name) = parent(path)?;
    refuse_symlink(&dir, name, path)?;
    let tmp_name = temp_name(name)?;
    let tmp = path.with_file_name(&tmp_name);
    let fd = durable::openat(
        &dir,
        &tmp_name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(MODE),
        &tmp,
    )
    .map_err(|e| fail("create", &tmp, e.into()))?;
    let mut f = File::from(fd);
    let written = exact_mode(&f, &tmp)
        .and_then(|()| {
            durable::append_all(&mut f, bytes).map_err(|e| StoreError::io("write", &tmp, e))
        })
        .and_then(|()| {
            if synced {
                durable::sync_all(&f).map_err(|e| StoreError::io("fsync", &tmp, e))
            } else {
                Ok(())
            }
        })
        .and_then(|()| {
            durable::renameat(&dir, &tmp_name, &dir, name, (&tmp, path))
                .map_err(|e| fail("rename into place", path, e.into()))
        });
    if let Err(e) = written {
        let _ = durable::unlinkat(&dir, &tmp_name, &tmp);
        return Err(e);
    }
    if synced {
        let dir_path = split(path).0;
        durable::sync_dir(&dir, dir_path)
            .map_err(|e| StoreError::io("fsync directory", dir_path, e.into()))?;
    }
    Ok(())
}

/// Creates, exclusively and never through a symlink, a temporary file beside `path` under
/// an unpredictable name (`.NAME.<16 hex digits>.tmp`), opened for writing. Returns it and
/// its path; the caller renames it over `path` ([`rename`]) or removes it.
pub fn create_temp(path: &Path) -> Result<(File, PathBuf)> {
    let (dir, name) = parent(path)?;
    let tmp_name = temp_name(name)?;
    let tmp = path.with_file_name(&tmp_name);
    let fd = rfs::openat(
        &dir,
        &tmp_name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(MODE),
    )
    .map_err(|e| fail("create", &tmp, e.into()))?;
    let f = File::from(fd);
    exact_mode(&f, &tmp)?;
    Ok((f, tmp))
}

/// Whether `name` is a temporary name [`create_temp`] (or [`write_atomic`]) made for file
/// `of`: `.OF.<16 hex digits>.tmp`.
pub fn is_temp_of(name: &str, of: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.strip_prefix(of))
        .and_then(|n| n.strip_prefix('.'))
        .and_then(|n| n.strip_suffix(".tmp"))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Removes from `dir` the temporary files of [`create_temp`] (`.NAME.<16 hex digits>.tmp`)
/// last modified more than `older_than` ago: what a writer killed between writing and
/// renaming one left. A younger one may belong to a process still writing it (`capsule
/// reindex` needs no lock), so it stays. Returns the paths removed.
pub fn remove_stale_temps(dir: &Path, older_than: std::time::Duration) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let entries = match list(dir) {
        Ok(e) => e,
        Err(e) if e.is_not_found() => return Ok(removed),
        Err(e) => return Err(e),
    };
    for e in entries {
        let name = e.name.to_string_lossy();
        let temp = name
            .strip_suffix(".tmp")
            .and_then(|n| n.rsplit_once('.'))
            .is_some_and(|(of, hex)| {
                of.starts_with('.') && is_temp_of(&name, &of[1..]) && hex.len() == 16
            });
        if !temp || e.kind != Kind::File {
            continue;
        }
        let old = std::fs::symlink_metadata(&e.path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > older_than);
        if old {
            match remove(&e.path, "remove a stale temporary file") {
                Ok(()) => removed.push(e.path),
                Err(err) if err.is_not_found() => {}
                Err(err) => return Err(err),
            }
        }
    }
    if !removed.is_empty() {
        sync_dir(dir)?;
    }
    Ok(removed)
}

/// Replaces file `path` with `bytes` atomically and durably: a temporary file created
/// exclusively under an unpredictable name, written, fsynced, renamed into place, then the
/// directory fsynced. A symlink at `path` is refused (and would only be replaced, never
/// followed, if planted after the check).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_temp(path, bytes, true)
}

/// Like [`write_atomic`] without the fsyncs: for a file rewritten often whose loss in a
/// crash costs nothing (capture's status).
pub fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    write_temp(path, bytes, false)
}

/// Refuses a symlink at `name` in `dir` (`path` names it in the error); a missing file
/// is fine.
fn refuse_symlink(dir: &OwnedFd, name: &Path, path: &Path) -> Result<()> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if kind_of(FileType::from_raw_mode(st.st_mode)) == Kind::Symlink => {
            Err(StoreError::Symlink {
                path: path.to_path_buf(),
            })
        }
        Ok(_) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(StoreError::io("stat", path, e.into())),
    }
}

/// Renames `from` to `to`: neither directory may be a symlink, nor `from` or `to` (a
/// symlink planted at `to` after the check is replaced, never followed).
pub fn rename(from: &Path, to: &Path, op: &'static str) -> Result<()> {
    let (fdir, fname) = parent(from)?;
    let (tdir, tname) = parent(to)?;
    match rfs::statat(&fdir, fname, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if kind_of(FileType::from_raw_mode(st.st_mode)) == Kind::Symlink => {
            return Err(StoreError::Symlink {
                path: from.to_path_buf(),
            })
        }
        Ok(_) => {}
        Err(e) => return Err(StoreError::io(op, from, e.into())),
    }
    refuse_symlink(&tdir, tname, to)?;
    durable::renameat(&fdir, fname, &tdir, tname, (from, to))
        .map_err(|e| StoreError::io(op, from, e.into()))
}

/// Removes file `path` (a symlink there is removed itself, never its target). NotFound is
/// an error like any other: see [`StoreError::is_not_found`].
pub fn remove(path: &Path, op: &'static str) -> Result<()> {
    let (dir, name) = parent(path)?;
    durable::unlinkat(&dir, name, path).map_err(|e| StoreError::io(op, path, e.into()))
}

/// Creates directory `path` if it is missing; an existing one must be a directory, not a
/// symlink.
pub fn create_dir(path: &Path) -> Result<()> {
    let (dir, name) = parent(path)?;
    match durable::mkdirat(&dir, name, Mode::from_raw_mode(DIR_MODE), path) {
        Ok(()) => {
            // Exactly DIR_MODE, whatever the umask.
            rfs::chmodat(&dir, name, Mode::from_raw_mode(DIR_MODE), AtFlags::empty())
                .map_err(|e| StoreError::io("set directory mode", path, e.into()))?;
            let dir_path = split(path).0;
            durable::sync_dir(&dir, dir_path)
                .map_err(|e| StoreError::io("fsync directory", dir_path, e.into()))?;
        }
        Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(fail("create directory", path, e.into())),
    }
    dir_fd(path).map(drop)
}

/// fsyncs directory `path` so that creations, renames and unlinks in it are durable.
pub fn sync_dir(path: &Path) -> Result<()> {
    let fd = dir_fd(path)?;
    durable::sync_dir(&fd, path).map_err(|e| StoreError::io("fsync directory", path, e.into()))
}

/// Checks that `path` is a directory and not a symlink.
pub fn check_dir(path: &Path) -> Result<()> {
    dir_fd(path).map(drop)
}

/// Lists directory `path` (which must not be a symlink): every entry but `.` and `..`,
/// with its type and length as `lstat` gives them. Entries removed while listing are left
/// out.
pub fn list(path: &Path) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    each_entry(path, |fd, name, _| {
        let st = match rfs::statat(fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(StoreError::io("stat", path.join(&name), e.into())),
        };
        out.push(Entry {
            path: path.join(&name),
            kind: kind_of(FileType::from_raw_mode(st.st_mode)),
            len: st.st_size as u64,
            name,
        });
        Ok(())
    })?;
    Ok(out)
}

/// Lists directory `path` (which must not be a symlink) like [`list`], but without the
/// lengths: the type comes from the directory entry itself (`d_type`), and an entry is
/// `lstat`ed only where the file system does not give it (`DT_UNKNOWN`). A directory of
/// 100,000 segments is listed without 100,000 `lstat`s (issue 34).
pub fn list_names(path: &Path) -> Result<Vec<Named>> {
    let mut out = Vec::new();
    each_entry(path, |fd, name, d_type| {
        let kind = match d_type {
            FileType::Unknown => match rfs::statat(fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => kind_of(FileType::from_raw_mode(st.st_mode)),
                Err(rustix::io::Errno::NOENT) => return Ok(()),
                Err(e) => return Err(StoreError::io("stat", path.join(&name), e.into())),
            },
            t => kind_of(t),
        };
        out.push(Named {
            path: path.join(&name),
            kind,
            name,
        });
        Ok(())
    })?;
    Ok(out)
}

/// Calls `f` with the directory's descriptor, the name and the `d_type` of every entry of
/// directory `path` (which must not be a symlink) but `.` and `..`: what [`list`] and
/// [`list_names`] share.
fn each_entry(
    path: &Path,
    mut f: impl FnMut(&OwnedFd, OsString, FileType) -> Result<()>,
) -> Result<()> {
    let fd = dir_fd(path)?;
    let rd = rfs::Dir::read_from(&fd).map_err(|e| StoreError::io("list", path, e.into()))?;
    for entry in rd {
        let entry = entry.map_err(|e| StoreError::io("list", path, e.into()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        f(
            &fd,
            OsString::from(std::ffi::OsStr::from_bytes(name)),
            entry.file_type(),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listing without lengths gives every entry the type the listing with them does,
    /// and refuses a symlinked directory the same way.
    #[test]
    fn names_are_listed_with_the_types_lstat_gives() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("file"), dir.path().join("link")).unwrap();
        let mut named: Vec<(OsString, Kind)> = list_names(dir.path())
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        let mut stated: Vec<(OsString, Kind)> = list(dir.path())
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        stated.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(named.len(), 3);
        assert_eq!(format!("{named:?}"), format!("{stated:?}"));
        let sub = dir.path().join("linked");
        std::os::unix::fs::symlink(dir.path(), &sub).unwrap();
        assert!(matches!(list_names(&sub), Err(StoreError::Symlink { .. })));
    }

    #[test]
    fn symlinks_are_refused_and_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let canary = dir.path().join("canary");
        std::fs::write(&canary, b"keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&canary, &link).unwrap();
        for how in [Open::Read, Open::Append, Open::Direct, Open::Lock] {
            let err = open(&link, how, "open").unwrap_err();
            assert!(
                matches!(&err, StoreError::Symlink { path } if *path == link),
                "{err}"
            );
        }
        assert!(matches!(
            open(&link, Open::CreateNew, "create"),
            Err(StoreError::Symlink { .. })
        ));
        let sub = dir.path().join("sub");
        std::os::unix::fs::symlink(dir.path(), &sub).unwrap();
        let err = open(&sub.join("canary"), Open::Read, "open").unwrap_err();
        assert!(
            matches!(&err, StoreError::Symlink { path } if *path == sub),
            "{err}"
        );
        assert!(matches!(create_dir(&sub), Err(StoreError::Symlink { .. })));
        assert!(matches!(list(&sub), Err(StoreError::Symlink { .. })));
        assert!(matches!(
            rename(&link, &dir.path().join("x"), "rename"),
            Err(StoreError::Symlink { .. })
        ));
        assert!(matches!(
            write_atomic(&link, b"new"),
            Err(StoreError::Symlink { .. })
        ));
        assert_eq!(std::fs::read(&canary).unwrap(), b"keep");
        let kinds: Vec<_> = list(dir.path())
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert!(kinds.contains(&Kind::Symlink) && kinds.contains(&Kind::File));
    }

    #[test]
    fn temporary_names_are_unpredictable_and_cleaned_up() {
        let dir = tempfile::tempdir().unwrap();
        let a = temp_name(Path::new("f")).unwrap();
        let b = temp_name(Path::new("f")).unwrap();
        assert_ne!(a, b);
        assert!(a.to_string_lossy().starts_with(".f.") && a.to_string_lossy().ends_with(".tmp"));
        write_atomic(&dir.path().join("f"), b"1").unwrap();
        replace(&dir.path().join("f"), b"2").unwrap();
        let names: Vec<_> = list(dir.path())
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, vec![OsString::from("f")]);
        assert_eq!(read(&dir.path().join("f"), "read").unwrap(), b"2");
    }

    #[test]
    fn a_fifo_is_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rfs::mknodat(
            rfs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = open(&fifo, Open::Read, "open").unwrap_err();
        assert!(matches!(err, StoreError::WrongType { .. }), "{err}");
    }
}
