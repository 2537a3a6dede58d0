//! The store directory: its identity file, the writer lock, and the list of segments.
//!
//! ```text
//! STORE/
//!   capsule-store.json     identity and format version (written once, at creation)
//!   writer.lock            flock'ed by the one process that writes (capture or import)
//!   segments/
//!     seg-000000000001.pcapng.zst         sealed segments, oldest first
//!     .seg-000000000002.pcapng.zst.open   the segment being written (at most one)
//!   index/                 derived data, owned by capsule-index (see [`crate::Indexer`])
//!     seg-000000000001.idx                the side index of sealed segment 1
//!   capture-status.json    what the running (or last) capture reports, owned by capture
//! ```
//!
//! Readers never take the lock and never change files: they list the directory, read sealed
//! segments through their footers and the open one through its block headers. A segment
//! deleted by retention between listing and reading is skipped and reported.

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::format::FORMAT_VERSION;
use crate::segment::{self, SegmentReader, SegmentState};

const META_FILE: &str = "capsule-store.json";
const MAGIC: &str = "capsule-store";
const LOCK_FILE: &str = "writer.lock";
const SEGMENTS_DIR: &str = "segments";
/// Directory of the data derived from segments (the side index), one file per segment.
pub const INDEX_DIR: &str = "index";

#[derive(Debug, Serialize, Deserialize)]
struct StoreMeta {
    magic: String,
    format: u16,
    created_ns: u64,
}

/// A segment file found in the store directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEntry {
    pub seq: u64,
    pub state: SegmentState,
    pub path: PathBuf,
    pub bytes: u64,
}

/// A store directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// Wall-clock time now, in ns since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Store {
    /// Opens an existing store for reading.
    pub fn open(root: &Path) -> Result<Self> {
        let meta_path = root.join(META_FILE);
        let text = match std::fs::read_to_string(&meta_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotAStore {
                    path: root.to_path_buf(),
                    detail: format!(
                        "{META_FILE} is missing (create a store with `capsule import` or \
                         `capsule capture`)"
                    ),
                })
            }
            Err(e) => return Err(StoreError::io("read", meta_path, e)),
        };
        let meta: StoreMeta =
            serde_json::from_str(&text).map_err(|error| StoreError::BadIdentity {
                path: meta_path.clone(),
                error,
            })?;
        if meta.magic != MAGIC {
            return Err(StoreError::NotAStore {
                path: meta_path,
                detail: format!("expected magic {MAGIC:?}, found {:?}", meta.magic),
            });
        }
        if meta.format != FORMAT_VERSION {
            return Err(StoreError::NotAStore {
                path: meta_path,
                detail: format!(
                    "store format version {} is not supported (this build reads version {})",
                    meta.format, FORMAT_VERSION
                ),
            });
        }
        Ok(Store {
            root: root.to_path_buf(),
        })
    }

    /// Opens a store, creating the directory and its identity file if absent.
    pub fn create_or_open(root: &Path) -> Result<Self> {
        if !root.join(META_FILE).exists() {
            std::fs::create_dir_all(root.join(SEGMENTS_DIR))
                .map_err(|e| StoreError::io("create store directory", root, e))?;
            let meta = StoreMeta {
                magic: MAGIC.into(),
                format: FORMAT_VERSION,
                created_ns: now_ns(),
            };
            let tmp = root.join(format!(".{META_FILE}.tmp"));
            let body = serde_json::to_string_pretty(&meta).expect("plain struct serializes");
            std::fs::write(&tmp, body + "\n").map_err(|e| StoreError::io("write", &tmp, e))?;
            File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| StoreError::io("fsync", &tmp, e))?;
            std::fs::rename(&tmp, root.join(META_FILE))
                .map_err(|e| StoreError::io("rename into place", &tmp, e))?;
            segment::sync_dir(root)?;
        }
        let store = Store::open(root)?;
        std::fs::create_dir_all(store.segments_dir())
            .map_err(|e| StoreError::io("create directory", store.segments_dir(), e))?;
        Ok(store)
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory holding the side index (one file per sealed segment).
    pub fn index_dir(&self) -> PathBuf {
        self.root.join(INDEX_DIR)
    }

    /// The directory holding segment files.
    pub fn segments_dir(&self) -> PathBuf {
        self.root.join(SEGMENTS_DIR)
    }

    /// Takes the writer lock. It is released when the returned file is dropped or the
    /// process dies.
    pub fn lock_writer(&self) -> Result<File> {
        let path = self.root.join(LOCK_FILE);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::io("open lock file", &path, e))?;
        match f.try_lock() {
            Ok(()) => Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked { path }),
            Err(std::fs::TryLockError::Error(e)) => Err(StoreError::io("lock", path, e)),
        }
    }

    /// Lists segment files, ordered by sequence number (oldest first).
    pub fn list(&self) -> Result<Vec<SegmentEntry>> {
        let dir = self.segments_dir();
        let rd = std::fs::read_dir(&dir).map_err(|e| StoreError::io("list", &dir, e))?;
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| StoreError::io("list", &dir, e))?;
            let name = entry.file_name();
            let Some((seq, state)) = segment::parse_name(&name.to_string_lossy()) else {
                continue;
            };
            let bytes = match entry.metadata() {
                Ok(m) => m.len(),
                // Deleted by retention, or sealed (renamed) while we listed.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(StoreError::io("stat", entry.path(), e)),
            };
            out.push(SegmentEntry {
                seq,
                state,
                path: entry.path(),
                bytes,
            });
        }
        out.sort_by_key(|e| (e.seq, e.state));
        out.dedup_by_key(|e| e.seq);
        Ok(out)
    }

    /// The highest segment number ever used in this store, counting damaged segments moved
    /// aside (0 for a new store).
    pub fn highest_seq(&self) -> Result<u64> {
        let dir = self.segments_dir();
        let rd = std::fs::read_dir(&dir).map_err(|e| StoreError::io("list", &dir, e))?;
        let mut max = 0;
        for entry in rd {
            let entry = entry.map_err(|e| StoreError::io("list", &dir, e))?;
            if let Some(seq) = segment::any_seq(&entry.file_name().to_string_lossy()) {
                max = max.max(seq);
            }
        }
        Ok(max)
    }

    /// Opens every segment for reading. Segments that vanish while being opened (retention)
    /// are skipped; an open segment sealed meanwhile is opened under its sealed name. A
    /// segment that cannot be read at all (its head is damaged) is skipped with a warning in
    /// the log; [`Store::open_segments_checked`] also returns it.
    pub fn open_segments(&self) -> Result<Vec<SegmentReader>> {
        let (readers, unreadable) = self.open_segments_checked()?;
        for u in &unreadable {
            tracing::warn!("skipping segment {}: {}", u.seq, u.problem);
        }
        Ok(readers)
    }

    /// Opens every segment for reading, and names those that cannot be read: damage in one
    /// segment never stops a command from reading the others.
    pub fn open_segments_checked(&self) -> Result<(Vec<SegmentReader>, Vec<Unreadable>)> {
        let mut out = Vec::new();
        let mut unreadable = Vec::new();
        for e in self.list()? {
            match SegmentReader::open(&e.path) {
                Ok(r) => out.push(r),
                Err(err) if err.is_not_found() => {
                    if e.state == SegmentState::Open {
                        let sealed = self.segments_dir().join(segment::sealed_name(e.seq));
                        match SegmentReader::open(&sealed) {
                            Ok(r) => out.push(r),
                            Err(e) if e.is_not_found() => {}
                            Err(err) => unreadable.push(Unreadable::of(e.seq, sealed, &err)),
                        }
                    }
                }
                Err(err @ (StoreError::Corrupt { .. } | StoreError::Io { .. })) => {
                    unreadable.push(Unreadable::of(e.seq, e.path.clone(), &err));
                }
                Err(err) => return Err(err),
            }
        }
        Ok((out, unreadable))
    }
}

/// A segment no reader can use: what was found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub seq: u64,
    pub path: PathBuf,
    /// The error and its causes, as one line.
    pub problem: String,
}

impl Unreadable {
    fn of(seq: u64, path: PathBuf, err: &StoreError) -> Self {
        Unreadable {
            seq,
            path,
            problem: crate::error::chain(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_open_and_reject_foreign_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("capsule-store.json is missing"),
            "{err}"
        );
        let s = Store::create_or_open(dir.path()).unwrap();
        assert!(s.list().unwrap().is_empty());
        Store::open(dir.path()).unwrap();
        std::fs::write(
            dir.path().join(META_FILE),
            r#"{"magic":"capsule-store","format":9,"created_ns":0}"#,
        )
        .unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("format version 9 is not supported"),
            "{err}"
        );
    }

    #[test]
    fn writer_lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::create_or_open(dir.path()).unwrap();
        let held = s.lock_writer().unwrap();
        assert!(matches!(s.lock_writer(), Err(StoreError::Locked { .. })));
        drop(held);
        s.lock_writer().unwrap();
    }
}
