//! The store directory: its identity file, the writer lock, and the list of segments.
//!
//! ```text
//! STORE/
//!   capsule-store.json     identity and format version (written once, at creation)
//!   writer.lock            flock'ed by the one process that writes (capture or import)
//!   segments/
//!     last-seq                            the highest segment number ever handed out (seq.rs)
//!     seg-000000000001.pcapng.zst         sealed segments, oldest first
//!     .seg-000000000002.pcapng.zst.open   the segment being written (at most one)
//!   index/                 derived data, owned by capsule-index (see [`crate::Indexer`])
//!     seg-000000000001.idx                the side index of sealed segment 1
//!     seg-000000000001.footer             a trimmed segment's footer, cached by its readers
//!                                         (crate::remote; only with a tier)
//!   capture-status.json    what the running (or last) capture reports, owned by capture
//! ```
//!
//! Readers never take the lock and never change files (but for what a store read with a tier
//! caches of its trimmed segments, crate::remote): they list the directory, read sealed
//! segments through their footers and the open one through its block headers. A segment
//! deleted by retention between listing and reading is skipped and reported.
//!
//! Every file and directory below the root is opened through [`crate::fsx`]: none may be a
//! symlink. The root itself may be one (the operator's choice); it is resolved once, here.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::fsx;

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

impl SegmentEntry {
    /// `bytes` of an entry listed without a `stat` ([`Store::list_held_unsized_with_ledger`]).
    pub const UNSIZED: u64 = u64::MAX;

    /// The entry with its file's length (one `lstat` when it was listed without). `Ok(None)`:
    /// the file is gone since the listing (retention, or a seal's rename).
    pub fn sized(&self) -> Result<Option<SegmentEntry>> {
        if self.bytes != Self::UNSIZED {
            return Ok(Some(self.clone()));
        }
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) => Ok(Some(SegmentEntry {
                bytes: m.len(),
                ..self.clone()
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io("stat segment", &self.path, e)),
        }
    }
}

/// A store directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    /// Opens the segments that live only in the object store ([`Store::with_tier`]).
    tier: Option<crate::remote::Tier>,
    /// Trimmed segments whose side index this reader keeps outside the store (it cannot
    /// write the index directory): segment number -> the directory holding it
    /// ([`crate::remote::RemoteSegments::cache_dir`]). Shared by the store's clones.
    elsewhere: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u64, PathBuf>>>,
}

/// The file name of segment `seq`'s side index in the index directory (the side index is
/// capsule-index's; the name is here so that the tier fetches and caches it by the same).
pub fn index_file_name(seq: u64) -> String {
    format!("seg-{seq:012}.idx")
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
        let root = &fsx::resolve_root(root)?;
        let meta_path = root.join(META_FILE);
        let text = match fsx::read(&meta_path, "read") {
            Ok(t) => String::from_utf8_lossy(&t).into_owned(),
            Err(e) if e.is_not_found() => {
                return Err(StoreError::NotAStore {
                    path: root.to_path_buf(),
                    detail: format!(
                        "{META_FILE} is missing (create a store with `capsule import` or \
                         `capsule capture`)"
                    ),
                })
            }
            Err(e) => return Err(e),
        };
        let meta: StoreMeta = match serde_json::from_str(&text) {
            Ok(m) => m,
            // A damaged identity file in a directory laid out as a store (its `segments/`
            // is there) does not make the packets unreadable: the store is read as the
            // format this build writes, with a warning; `capsule verify --repair`
            // rewrites the file.
            Err(error) if fsx::check_dir(&root.join(SEGMENTS_DIR)).is_ok() => {
                tracing::warn!(
                    "{}: damaged ({error}); the store is read as format {FORMAT_VERSION} from \
                     its segments (`capsule verify --repair` rewrites the file)",
                    meta_path.display()
                );
                StoreMeta {
                    magic: MAGIC.into(),
                    format: FORMAT_VERSION,
                    created_ns: 0,
                }
            }
            Err(error) => {
                return Err(StoreError::BadIdentity {
                    path: meta_path.clone(),
                    error,
                })
            }
        };
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
            tier: None,
            elsewhere: Default::default(),
        })
    }

    /// What is wrong with the store's identity file, when it does not parse (a store
    /// opened anyway, see [`Store::open`]).
    pub fn identity_problem(&self) -> Option<String> {
        let bytes = fsx::read(&self.root.join(META_FILE), "read").ok()?;
        serde_json::from_slice::<StoreMeta>(&bytes)
            .err()
            .map(|e| format!("damaged: expected JSON with magic, format and created_ns: {e}"))
    }

    /// Rewrites a damaged identity file: the format this build writes, created at the
    /// oldest packet held (now when there is none). Only the writer-lock holder calls it.
    pub fn rewrite_identity(&self) -> Result<()> {
        let created_ns = self
            .open_segments()?
            .iter()
            .flat_map(|s| {
                s.blocks()
                    .iter()
                    .filter(|b| b.packets > 0)
                    .map(|b| b.first_ns)
            })
            .min()
            .unwrap_or_else(now_ns);
        let meta = StoreMeta {
            magic: MAGIC.into(),
            format: FORMAT_VERSION,
            created_ns,
        };
        let body = serde_json::to_string_pretty(&meta).expect("plain struct serializes");
        fsx::write_atomic(&self.root.join(META_FILE), (body + "\n").as_bytes())
    }

    /// The path of the store's identity file.
    pub fn identity_path(&self) -> PathBuf {
        self.root.join(META_FILE)
    }

    /// Opens a store, creating the directory and its identity file if absent.
    pub fn create_or_open(root: &Path) -> Result<Self> {
        Ok(Store::create_locked(root)?.0)
    }

    /// Opens a store for writing, creating it if absent, and takes its writer lock (see
    /// [`Store::lock_writer`]). The store is created under the lock, so of several writers
    /// creating one at once, one wins and every other gets [`StoreError::Locked`].
    pub fn create_locked(root: &Path) -> Result<(Self, File)> {
        if !root.exists() {
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(fsx::DIR_MODE)
                .create(root)
                .map_err(|e| StoreError::io("create store directory", root, e))?;
            // Exactly DIR_MODE, whatever the umask.
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(fsx::DIR_MODE))
                .map_err(|e| StoreError::io("set directory mode", root, e))?;
        }
        let store = Store {
            root: fsx::resolve_root(root)?,
            tier: None,
            elsewhere: Default::default(),
        };
        // The lock comes first, so the directory is judged while no other writer can be
        // half-way through creating a store in it (a loser would otherwise see the winner's
        // `segments/` before its identity file and call the directory foreign).
        let lock_path = store.root.join(LOCK_FILE);
        let lock_existed = lock_path.exists();
        let lock = store.lock_writer()?;
        if let Err(e) = store.refuse_foreign_directory() {
            drop(lock);
            if !lock_existed {
                // Leave a foreign directory as it was found.
                let _ = std::fs::remove_file(&lock_path);
            }
            return Err(e);
        }
        let meta_path = store.root.join(META_FILE);
        match fsx::open(&meta_path, fsx::Open::Read, "read") {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {
                // The segment directory first, the identity file last: a reader that finds
                // the identity finds a whole (empty) store, never one without `segments/`.
                fsx::create_dir(&store.segments_dir())?;
                let meta = StoreMeta {
                    magic: MAGIC.into(),
                    format: FORMAT_VERSION,
                    created_ns: now_ns(),
                };
                let body = serde_json::to_string_pretty(&meta).expect("plain struct serializes");
                fsx::write_atomic(&meta_path, (body + "\n").as_bytes())?;
            }
            Err(e) => return Err(e),
        }
        let store = Store::open(&store.root)?;
        fsx::create_dir(&store.segments_dir())?;
        Ok((store, lock))
    }

    /// A directory that holds files but no store identity is someone else's: writing a store
    /// into it (and later deleting "old segments" there) is refused before anything is
    /// created in it. What a creation cut short leaves (the lock file, an empty `segments/`,
    /// a temporary identity or status file) does not count.
    fn refuse_foreign_directory(&self) -> Result<()> {
        if self.root.join(META_FILE).exists() {
            return Ok(());
        }
        let entries = std::fs::read_dir(&self.root)
            .map_err(|e| StoreError::io("list store directory", &self.root, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io("list store directory", &self.root, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = name == LOCK_FILE
                || (name == SEGMENTS_DIR && is_empty_dir(&entry.path()))
                || ([META_FILE, "capture-status.json"]
                    .iter()
                    .any(|f| name.starts_with(&format!(".{f}.")))
                    && name.ends_with(".tmp"));
            if !ours {
                return Err(StoreError::NotAStore {
                    path: self.root.clone(),
                    detail: format!(
                        "the directory is not empty and holds no {META_FILE} (found {name:?}); \
                         give a new or empty directory, or an existing store"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The store, reading the segments the ledger records as trimmed (tiered, their local
    /// file removed) from `tier`. Without one they are named as unreadable, with their span.
    /// With one, a trimmed segment whose side index is missing locally has it fetched from
    /// the object store (uploaded with the segment) and kept in the index directory, and
    /// opening a trimmed segment keeps its footer there too ([`crate::remote`]).
    pub fn with_tier(mut self, tier: Option<crate::remote::Tier>) -> Self {
        self.tier = tier;
        self
    }

    /// What readers with a tier keep of segment `seq` in the index directory (its side
    /// index, fetched when it was missing, and its footer cache): removed with the
    /// segment's object.
    pub fn tier_cache_files(&self, seq: u64) -> [PathBuf; 2] {
        let dir = self.index_dir();
        [
            dir.join(index_file_name(seq)),
            dir.join(crate::remote::footer_cache_name(seq)),
        ]
    }

    /// The tier this store reads its trimmed segments through, if any.
    pub fn tier(&self) -> Option<&crate::remote::Tier> {
        self.tier.as_ref()
    }

    /// The directory holding the side index of segment `seq`, for readers: the store's
    /// index directory, unless the segment is trimmed, its index is missing there and this
    /// reader (which cannot write the store) keeps the one it fetched in its own cache
    /// directory ([`crate::remote::RemoteSegments::cache_dir`]).
    pub fn index_dir_of(&self, seq: u64) -> PathBuf {
        let held = self.elsewhere.lock().unwrap_or_else(|p| p.into_inner());
        match held.get(&seq) {
            Some(d) if !self.index_dir().join(index_file_name(seq)).exists() => d.clone(),
            _ => self.index_dir(),
        }
    }

    /// With a tier: fetches the side index of trimmed segment `seq` (its object's ETag
    /// `etag`) from the object store when the index directory has none, and keeps it there,
    /// or, when the store cannot be written, in the reader's cache directory (where the next
    /// question finds it). A failure is logged; the segment's answers then say its index is
    /// missing, as without a tier.
    pub fn fetch_missing_index(&self, seq: u64, etag: &str) {
        let Some(tier) = &self.tier else { return };
        let dir = self.index_dir();
        let path = dir.join(index_file_name(seq));
        if path.exists() || !dir.is_dir() {
            return;
        }
        let mine = tier.cache_dir(seq, etag);
        if let Some(m) = &mine {
            if m.join(index_file_name(seq)).exists() {
                self.keep_elsewhere(seq, m);
                return;
            }
        }
        let bytes = match tier.fetch_index(seq) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                return tracing::warn!(
                    seq,
                    "tier: the side index of a trimmed segment is missing, locally and in the \
                     object store"
                )
            }
            Err(e) => {
                return tracing::warn!(
                    seq,
                    "tier: cannot fetch the side index of a trimmed segment: {e}"
                )
            }
        };
        let kept = match fsx::write_atomic(&path, &bytes) {
            Ok(()) => Ok(path),
            Err(e) => match &mine {
                // A reader without write access to the store keeps it in its own directory.
                Some(m) => crate::remote::write_cached(m, &index_file_name(seq), &bytes)
                    .inspect(|_| {
                        self.keep_elsewhere(seq, m);
                        tier.cache_written();
                    })
                    .map_err(|e2| format!("{}; {}", crate::error::chain(&e), e2)),
                None => Err(crate::error::chain(&e)),
            },
        };
        match kept {
            Ok(p) => tracing::info!(
                seq,
                bytes = bytes.len(),
                "tier: the side index of a trimmed segment was missing; fetched it from \
                 the object store into {}",
                p.display()
            ),
            Err(e) => tracing::warn!(
                seq,
                "tier: cannot keep the side index fetched from the object store: {e}"
            ),
        }
    }

    fn keep_elsewhere(&self, seq: u64, dir: &Path) {
        self.elsewhere
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seq, dir.to_path_buf());
    }

    /// Opens trimmed segment `seq` through `tier`: from the footer cache when it has one for
    /// this object (no request; the store's, else the reader's own cache directory's), else
    /// by range from the object store, then caching what the opening read, and the
    /// segment's blocks of no packets (in the store, or where the reader can write).
    fn open_trimmed(
        &self,
        tier: &crate::remote::Tier,
        seq: u64,
        bytes: u64,
        etag: &str,
    ) -> Result<SegmentReader> {
        use crate::remote::{CacheKey, Pinned, Recording};
        let (src, name) = tier.open(seq, bytes)?;
        let key = CacheKey { seq, bytes, etag };
        let file = crate::remote::footer_cache_name(seq);
        let cache = self.index_dir().join(&file);
        let mine = tier.cache_dir(seq, etag).map(|d| d.join(&file));
        for c in std::iter::once(&cache).chain(mine.as_ref()) {
            if let Some(ranges) = crate::remote::load_cache(c, key) {
                let pinned = std::sync::Arc::new(Pinned {
                    ranges,
                    inner: src.clone(),
                });
                match SegmentReader::open_remote(&name, seq, bytes, pinned) {
                    Ok(r) => return Ok(r),
                    Err(e) => crate::remote::drop_cache(c, &crate::error::chain(&e)),
                }
            }
        }
        let rec = std::sync::Arc::new(Recording::new(src));
        let r = SegmentReader::open_remote(&name, seq, bytes, rec.clone())?;
        // The blocks of no packets (interface statistics, a few bytes each) too: every
        // export reads them, for its drop counters' baselines, whatever its window. Most lie
        // in the window the footer was fetched with. One that does not check out is left to
        // the reader that needs it.
        let mut frame = Vec::new();
        let mut budget = crate::remote::CACHED_BLOCK_BYTES;
        for (i, b) in r.blocks().iter().enumerate() {
            if b.packets == 0 && u64::from(b.compressed_len) <= budget {
                budget -= u64::from(b.compressed_len);
                let _ = r.read_frame(i, &mut frame);
            }
        }
        let ranges = rec.take();
        if !crate::remote::save_cache(&cache, key, &ranges) {
            if let Some(m) = &mine {
                let dir = m.parent().expect("a file in a directory");
                let body = crate::remote::encode_cache(key, &ranges);
                match crate::remote::write_cached(dir, &file, &body) {
                    Ok(_) => tier.cache_written(),
                    Err(e) => tracing::debug!("cannot cache the footer of segment {seq}: {e}"),
                }
            }
        }
        Ok(r)
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
        let f = fsx::open(&path, fsx::Open::Lock, "open lock file")?;
        match f.try_lock() {
            Ok(()) => Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked { path }),
            Err(std::fs::TryLockError::Error(e)) => Err(StoreError::io("lock", path, e)),
        }
    }

    /// Lists segment files, ordered by sequence number (oldest first).
    pub fn list(&self) -> Result<Vec<SegmentEntry>> {
        let mut out = Vec::new();
        // Entries deleted by retention, or sealed (renamed), while we list are left out.
        for entry in list_checked(&self.segments_dir())? {
            let Some((seq, state)) = segment::parse_name(&entry.name.to_string_lossy()) else {
                continue;
            };
            out.push(SegmentEntry {
                seq,
                state,
                path: entry.path,
                bytes: entry.len,
            });
        }
        out.sort_by_key(|e| (e.seq, e.state));
        out.dedup_by_key(|e| e.seq);
        Ok(out)
    }

    /// Lists segment files like [`Store::list`] but without their lengths (no `lstat` per
    /// file where the file system gives each entry's type): `(seq, state, path)`, ordered by
    /// sequence number.
    pub fn list_unsized(&self) -> Result<Vec<(u64, SegmentState, PathBuf)>> {
        let dir = self.segments_dir();
        let names = fsx::list_names(&dir)?;
        check_kinds(names.iter().map(|e| (&e.path, e.name.as_os_str(), e.kind)))?;
        let mut out: Vec<(u64, SegmentState, PathBuf)> = names
            .into_iter()
            .filter_map(|e| {
                let (seq, state) = segment::parse_name(&e.name.to_string_lossy())?;
                Some((seq, state, e.path))
            })
            .collect();
        out.sort_by_key(|e| (e.0, e.1));
        out.dedup_by_key(|e| e.0);
        Ok(out)
    }

    /// Every segment the store holds, wherever its bytes are: the segment files
    /// ([`Store::list`]) and the sealed segments the ledger records as trimmed after upload
    /// (their bytes only in the object store; each listed as sealed, with its path where its
    /// file was and the bytes the ledger recorded), ordered by sequence number. What the
    /// answers read from the side index alone list: a trimmed segment keeps its index.
    pub fn list_held(&self) -> Result<Vec<SegmentEntry>> {
        Ok(self.list_held_with_ledger()?.0)
    }

    /// [`Store::list_held`], and the ledger it read (right after the listing), so that a
    /// caller that needs both reads the ledger once (issue 34: 100,000 lines).
    pub fn list_held_with_ledger(
        &self,
    ) -> Result<(Vec<SegmentEntry>, Option<crate::ledger::Ledger>)> {
        self.held_and_ledger(self.list()?)
    }

    /// [`Store::list_held_with_ledger`] without a `stat` per segment file: the files'
    /// `bytes` are [`SegmentEntry::UNSIZED`] (a segment trimmed after upload has the bytes
    /// the ledger recorded). For a reader that needs the lengths of only some of them
    /// ([`SegmentEntry::sized`]).
    pub fn list_held_unsized_with_ledger(
        &self,
    ) -> Result<(Vec<SegmentEntry>, Option<crate::ledger::Ledger>)> {
        let out = self
            .list_unsized()?
            .into_iter()
            .map(|(seq, state, path)| SegmentEntry {
                seq,
                state,
                path,
                bytes: SegmentEntry::UNSIZED,
            })
            .collect();
        self.held_and_ledger(out)
    }

    /// The listing `out` with the trimmed segments the ledger (read now) records, and the
    /// ledger.
    fn held_and_ledger(
        &self,
        mut out: Vec<SegmentEntry>,
    ) -> Result<(Vec<SegmentEntry>, Option<crate::ledger::Ledger>)> {
        // Read after the listing: retention records a trim before it unlinks.
        let dir = self.segments_dir();
        let Some(l) = crate::ledger::read(&dir)? else {
            return Ok((out, None));
        };
        let have: std::collections::HashSet<u64> = out.iter().map(|e| e.seq).collect();
        for (seq, _, bytes, etag) in trimmed(&l, &have) {
            self.fetch_missing_index(seq, etag);
            out.push(SegmentEntry {
                seq,
                state: SegmentState::Sealed,
                path: dir.join(segment::sealed_name(seq)),
                bytes,
            });
        }
        out.sort_by_key(|e| e.seq);
        Ok((out, Some(l)))
    }

    /// The highest segment number ever used in this store, counting damaged segments moved
    /// aside and segments removed since (0 for a new store).
    pub fn highest_seq(&self) -> Result<u64> {
        let dir = self.segments_dir();
        let mut max = crate::seq::last_seq(&dir)?;
        for entry in list_checked(&dir)? {
            if let Some(seq) = segment::any_seq(&entry.name.to_string_lossy()) {
                max = max.max(seq);
            }
        }
        Ok(max)
    }

    /// The segments the ledger records as sealed (and capsule did not delete) that are not
    /// in `listed`, a listing of the segment directory made just before; none for a store
    /// without a ledger.
    pub fn missing_segments(&self, listed: &[SegmentEntry]) -> Result<Vec<crate::ledger::Missing>> {
        let dir = self.segments_dir();
        Ok(match crate::ledger::read(&dir)? {
            Some(l) => crate::ledger::missing(&dir, &l, listed.iter().map(|e| e.seq)),
            None => Vec::new(),
        })
    }

    /// The sealed segments of `segments` that hold fewer packets than the store's ledger
    /// records they were sealed with, and no damage left to show for it: `verify --repair`
    /// rebuilt them and moved the damaged bytes aside. Where in the segment the lost packets
    /// lay is unknown, so each is named with the span the ledger records: every answer over
    /// it misses them. None for a store without a ledger.
    pub fn short_segments(&self, segments: &[SegmentReader]) -> Result<Vec<Unreadable>> {
        Ok(crate::ledger::read(&self.segments_dir())?
            .map(|l| Unreadable::short_of(&l, segments))
            .unwrap_or_default())
    }

    /// What `[tier] max_age` removed from the object store, as an unreadable span, when the
    /// window `[from_ns, to_ns)` gives its start (`from_ns`) and reaches it: an answer over it
    /// misses what was there. A window without a start asks for what the store holds, as for
    /// local retention's horizon. `None` for a store without a ledger or an expiry.
    pub fn expired_in(&self, from_ns: Option<u64>, to_ns: u64) -> Result<Option<Unreadable>> {
        let Some(l) = crate::ledger::read(&self.segments_dir())? else {
            return Ok(None);
        };
        Ok(Unreadable::expired_of(
            &l,
            &self.segments_dir(),
            from_ns,
            to_ns,
        ))
    }

    /// Records in the ledger that `verify --repair` rebuilt segment `seq`, which now holds
    /// `packets`: answers over its span name what the repair lost ([`Store::lost_to_repairs`]).
    pub fn record_repair(&self, seq: u64, packets: u64) -> Result<()> {
        crate::ledger::record_repaired(&self.segments_dir(), seq, packets)
    }

    /// The live segments a repair left with fewer packets than they were sealed with, from
    /// the ledger alone (no segment file is read: what answers from the side index use),
    /// each with the packets it holds now. None for a store without a ledger.
    pub fn lost_to_repairs(&self) -> Result<Vec<(crate::ledger::Sealed, u64)>> {
        Ok(crate::ledger::read(&self.segments_dir())?
            .map(|l| l.short().map(|(s, held)| (*s, held)).collect())
            .unwrap_or_default())
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
    ///
    /// A segment the store's ledger records as sealed whose file is gone (removed outside
    /// capsule) is named too, with the span it held ([`Unreadable::span`]).
    pub fn open_segments_checked(&self) -> Result<(Vec<SegmentReader>, Vec<Unreadable>)> {
        let s = self.open_segments_selected(&|_, _| None)?;
        Ok((s.segments, s.unreadable))
    }

    /// [`Store::open_segments_checked`], leaving unopened the sealed segment files `skip`
    /// gives a length for (given the segment's number and the store's ledger, when it has
    /// one): they are returned in [`Selected::skipped`] with that length. The open segment
    /// and the segments that live only in the object store are always opened. What a
    /// question uses to skip the segments the catalog rules out (issue 34: a file opened
    /// costs a few system calls, and a store holds 100,000 segments). The directory is
    /// listed without a `lstat` per file ([`Store::list_unsized`]): a segment's length is
    /// read when it is opened.
    pub fn open_segments_selected(
        &self,
        skip: &dyn Fn(u64, Option<&crate::ledger::Ledger>) -> Option<u64>,
    ) -> Result<Selected> {
        let listed = self.list_unsized()?;
        // Read after the listing: retention records a deletion (or a trim) before it
        // unlinks.
        let dir = self.segments_dir();
        let ledger = crate::ledger::read(&dir)?;
        let missing = match &ledger {
            Some(l) => crate::ledger::missing(&dir, l, listed.iter().map(|e| e.0)),
            None => Vec::new(),
        };
        self.open_from_listing(listed, ledger, missing, skip)
    }

    /// [`Store::open_segments_selected`] over a listing made elsewhere: `listed` (number,
    /// state, path, ordered by number), the ledger read after it and the segments it
    /// records whose files are `missing`. What a question uses when the catalog proves its
    /// own listing current ([`Store::listing_snapshot`]): `listed` then holds only the
    /// segments the catalog cannot rule out, and `ledger` their records.
    pub fn open_from_listing(
        &self,
        listed: Vec<(u64, SegmentState, PathBuf)>,
        ledger: Option<crate::ledger::Ledger>,
        missing: Vec<crate::ledger::Missing>,
        skip: &dyn Fn(u64, Option<&crate::ledger::Ledger>) -> Option<u64>,
    ) -> Result<Selected> {
        let mut out = Vec::new();
        let mut unreadable = Vec::new();
        let mut skipped = Vec::new();
        let dir = self.segments_dir();
        for m in missing {
            unreadable.push(Unreadable {
                seq: m.sealed.seq,
                problem: m.problem(),
                span: Some((m.sealed.first_ns, m.sealed.last_ns)),
                path: m.path,
            });
        }
        // Segments that live only in the object store, oldest first, before the local ones.
        let have: std::collections::HashSet<u64> = listed.iter().map(|e| e.0).collect();
        for (seq, sealed, bytes, etag) in ledger.iter().flat_map(|l| trimmed(l, &have)) {
            let path = dir.join(segment::sealed_name(seq));
            let opened = match &self.tier {
                Some(t) => {
                    self.fetch_missing_index(seq, etag);
                    self.open_trimmed(t, seq, bytes, etag)
                        .map_err(|e| crate::error::chain(&e))
                }
                None => Err(TRIMMED_PROBLEM.to_string()),
            };
            match opened {
                Ok(r) => out.push(r),
                Err(problem) => unreadable.push(Unreadable {
                    seq,
                    path,
                    problem,
                    span: Some((sealed.first_ns, sealed.last_ns)),
                }),
            }
        }
        for (seq, state, path) in listed {
            if state == SegmentState::Sealed {
                if let Some(bytes) = skip(seq, ledger.as_ref()) {
                    skipped.push(SegmentEntry {
                        seq,
                        state,
                        path,
                        bytes,
                    });
                    continue;
                }
            }
            match SegmentReader::open(&path) {
                Ok(r) => out.push(r),
                Err(err) if err.is_not_found() => {
                    if state == SegmentState::Open {
                        let sealed = self.segments_dir().join(segment::sealed_name(seq));
                        match SegmentReader::open(&sealed) {
                            Ok(r) => out.push(r),
                            Err(err) if err.is_not_found() => {}
                            Err(err) => unreadable.push(Unreadable::of(seq, sealed, &err)),
                        }
                    }
                }
                Err(err @ (StoreError::Corrupt { .. } | StoreError::Io { .. })) => {
                    unreadable.push(Unreadable::of(seq, path.clone(), &err));
                }
                Err(err) => return Err(err),
            }
        }
        Ok(Selected {
            segments: out,
            unreadable,
            skipped,
            ledger,
        })
    }
}

/// The segment directory's listing and the ledger, each with the identity it had when it
/// was read ([`Store::listing_snapshot`]).
#[derive(Debug)]
pub struct ListingSnapshot {
    /// The segment directory's identity, unchanged from before the listing to after it.
    pub dir: fsx::FileId,
    /// The ledger's.
    pub ledger_id: fsx::FileId,
    /// The segment files: number and state, ordered by number.
    pub listed: Vec<(u64, SegmentState)>,
    pub ledger: crate::ledger::Ledger,
    /// The segments the ledger records whose files are gone (as a question names them).
    pub missing: Vec<crate::ledger::Missing>,
}

/// How much older than the listing a directory's change time must be for a reader to
/// trust that any later change moves it: file systems stamp changes from a clock that
/// advances by ticks (jiffies, up to 10 ms), so a change in the same tick as the last one
/// before the listing would leave the time as it was.
pub const LISTING_TICK_NS: u128 = 20_000_000;

impl Store {
    /// The segment listing and the ledger as a reader may later trust without listing the
    /// directory or parsing the ledger again, as long as both identities are unchanged
    /// ([`Store::snapshot_current`]; docs/decisions.md, issue 34 round 5). `None` when no
    /// such proof can be had: a store without a ledger, or with segments in an object
    /// store (tier: they are opened from the ledger every time), a file system whose
    /// times have whole seconds, or a directory or ledger that changed while they were
    /// read. Waits, at most [`LISTING_TICK_NS`], until the directory's last change is a
    /// tick older than the listing.
    pub fn listing_snapshot(&self) -> Result<Option<ListingSnapshot>> {
        let dir = self.segments_dir();
        let Some(before) = fsx::FileId::of_path(&dir)? else {
            return Ok(None);
        };
        if before.ctime.1 == 0 && before.mtime.1 == 0 {
            // times of whole seconds: a change within the second would not show
            return Ok(None);
        }
        let now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        };
        let ready = before.ctime_ns() + LISTING_TICK_NS;
        let t = now();
        if t < ready {
            if ready - t > LISTING_TICK_NS {
                // the clock went back: no proof
                return Ok(None);
            }
            std::thread::sleep(std::time::Duration::from_nanos((ready - t) as u64));
        }
        let listed = self.list_unsized()?;
        let Some((ledger, Some(ledger_id))) = crate::ledger::read_identified(&dir)? else {
            return Ok(None);
        };
        if !ledger.tiered.is_empty() || !ledger.trimmed.is_empty() {
            return Ok(None);
        }
        let missing = crate::ledger::missing(&dir, &ledger, listed.iter().map(|e| e.0));
        if fsx::FileId::of_path(&dir)? != Some(before) {
            return Ok(None);
        }
        Ok(Some(ListingSnapshot {
            dir: before,
            ledger_id,
            listed: listed.into_iter().map(|(seq, st, _)| (seq, st)).collect(),
            ledger,
            missing,
        }))
    }

    /// Whether the segment directory and the ledger are still those of a snapshot with
    /// identities `dir` and `ledger` (two `stat`s).
    pub fn snapshot_current(&self, dir: &fsx::FileId, ledger: &fsx::FileId) -> bool {
        let segs = self.segments_dir();
        fsx::FileId::of_path(&segs).ok().flatten().as_ref() == Some(dir)
            && fsx::FileId::of_path(&segs.join(crate::ledger::LEDGER_FILE))
                .ok()
                .flatten()
                .as_ref()
                == Some(ledger)
    }
}

/// What [`Store::open_segments_selected`] found.
#[derive(Debug)]
pub struct Selected {
    /// The segments opened, oldest first (those only in the object store before the local
    /// ones).
    pub segments: Vec<SegmentReader>,
    /// The segments that could not be read, or that the ledger records but are gone.
    pub unreadable: Vec<Unreadable>,
    /// The sealed segments left unopened, each with the length it was skipped with.
    pub skipped: Vec<SegmentEntry>,
    /// The store's ledger as read right after the listing (`None`: the store has none).
    pub ledger: Option<crate::ledger::Ledger>,
}

/// What a store holds, as the notes beside an answer need it: its first and last packet
/// and its lowest segment number (above 1: retention deleted older segments).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    pub lowest_seq: Option<u64>,
}

impl Held {
    /// What `segments` hold (their blocks of packets).
    pub fn of(segments: &[SegmentReader]) -> Held {
        let mut h = Held::default();
        for s in segments {
            h.add_seq(s.seq());
            for b in s.blocks().iter().filter(|b| b.packets > 0) {
                h.add_span(b.first_ns, b.last_ns);
            }
        }
        h
    }

    /// Adds a segment number.
    pub fn add_seq(&mut self, seq: u64) {
        self.lowest_seq = Some(self.lowest_seq.map_or(seq, |l| l.min(seq)));
    }

    /// Adds the span of some packets.
    pub fn add_span(&mut self, first_ns: u64, last_ns: u64) {
        self.first_ns = Some(self.first_ns.map_or(first_ns, |f| f.min(first_ns)));
        self.last_ns = Some(self.last_ns.map_or(last_ns, |l| l.max(last_ns)));
    }
}

/// The live segments `l` records as trimmed after upload whose number is not in `have` (the
/// segment files listed): number, the seal's record, the object's length and ETag.
fn trimmed<'a>(
    l: &'a crate::ledger::Ledger,
    have: &'a std::collections::HashSet<u64>,
) -> impl Iterator<Item = (u64, &'a crate::ledger::Sealed, u64, &'a str)> + 'a {
    l.live
        .iter()
        .filter(|(q, _)| l.trimmed.contains(q) && !have.contains(q))
        .map(|(&seq, sealed)| {
            let t = l.tiered.get(&seq);
            (
                seq,
                sealed,
                t.map_or(sealed.bytes, |t| t.bytes),
                t.map_or("", |t| t.etag.as_str()),
            )
        })
}

/// Why a segment trimmed after upload cannot be read by a store opened without a tier.
pub const TRIMMED_PROBLEM: &str = "it lives only in the object store (its local file was \
     trimmed after upload): give --config with the [tier] section to read it";

/// A segment no reader can use: what was found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub seq: u64,
    pub path: PathBuf,
    /// The error and its causes, as one line.
    pub problem: String,
    /// The first and last packet time it held, when known (a missing segment's, from the
    /// ledger): an answer whose window misses the span is whole. `None`: unknown, so every
    /// answer may miss what it held.
    pub span: Option<(u64, u64)>,
}

impl Unreadable {
    /// [`Store::short_segments`] with a ledger already read.
    pub fn short_of(ledger: &crate::ledger::Ledger, segments: &[SegmentReader]) -> Vec<Self> {
        let mut out = Vec::new();
        for seg in segments.iter().filter(|s| s.damaged().is_empty()) {
            let held: u64 = seg.blocks().iter().map(|b| u64::from(b.packets)).sum();
            let Some(r) = ledger.live.get(&seg.seq()).filter(|r| r.packets > held) else {
                continue;
            };
            out.push(Unreadable {
                seq: seg.seq(),
                path: seg.path().to_path_buf(),
                problem: format!(
                    "it holds {held} of the {} packets it was sealed with: {} were lost to \
                     damage (the store's ledger records the seal; `verify --repair` moves \
                     damaged bytes aside, next to the segment)",
                    r.packets,
                    r.packets - held
                ),
                span: Some((r.first_ns, r.last_ns)),
            });
        }
        out
    }

    /// [`Store::expired_in`] with a ledger already read (`segments_dir`: the store's).
    pub fn expired_of(
        l: &crate::ledger::Ledger,
        segments_dir: &Path,
        from_ns: Option<u64>,
        to_ns: u64,
    ) -> Option<Self> {
        let e = l.expired?;
        let from = from_ns?;
        e.overlaps(from, to_ns).then(|| Unreadable {
            seq: e.last_seq,
            path: segments_dir.join(segment::sealed_name(e.last_seq)),
            problem: e.problem(),
            span: Some((e.first_ns, e.last_ns)),
        })
    }

    fn of(seq: u64, path: PathBuf, err: &StoreError) -> Self {
        Unreadable {
            seq,
            path,
            problem: crate::error::chain(err),
            span: None,
        }
    }

    /// Whether the window `[from_ns, to_ns)` may reach what the segment held.
    pub fn reaches(&self, from_ns: u64, to_ns: u64) -> bool {
        self.span.is_none_or(|(a, b)| a < to_ns && b >= from_ns)
    }
}

/// Lists `dir` (through [`fsx::list`]), refusing any symlink or directory in it.
fn list_checked(dir: &Path) -> Result<Vec<fsx::Entry>> {
    let entries = fsx::list(dir)?;
    check_kinds(
        entries
            .iter()
            .map(|e| (&e.path, e.name.as_os_str(), e.kind)),
    )?;
    Ok(entries)
}

/// Refuses any symlink, and any directory or other non-file named like a segment, among
/// listed entries `(path, name, kind)`.
fn check_kinds<'a>(
    entries: impl Iterator<Item = (&'a PathBuf, &'a std::ffi::OsStr, fsx::Kind)>,
) -> Result<()> {
    for (path, name, kind) in entries {
        match kind {
            fsx::Kind::Symlink => return Err(StoreError::Symlink { path: path.clone() }),
            fsx::Kind::File => {}
            _ if segment::any_seq(&name.to_string_lossy()).is_none() => {}
            _ => {
                return Err(StoreError::WrongType {
                    path: path.clone(),
                    expected: "regular file",
                })
            }
        }
    }
    Ok(())
}

/// Whether `path` is a directory with nothing in it.
fn is_empty_dir(path: &Path) -> bool {
    std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_none())
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

    /// A creation cut short after `segments/` and before the identity file leaves a store
    /// being created, not a foreign directory; a `segments/` with files in it is foreign.
    #[test]
    fn a_creation_cut_short_is_finished_and_a_full_segments_dir_is_foreign() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(SEGMENTS_DIR)).unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), b"").unwrap();
        let s = Store::create_or_open(dir.path()).unwrap();
        assert!(s.list().unwrap().is_empty());
        Store::open(dir.path()).unwrap();
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir(other.path().join(SEGMENTS_DIR)).unwrap();
        std::fs::write(other.path().join(SEGMENTS_DIR).join("x"), b"x").unwrap();
        let err = Store::create_or_open(other.path()).unwrap_err();
        assert!(err.to_string().contains("holds no"), "{err}");
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

    /// Leaves empty torn segment `seq` in `segs`, as a writer that stopped between creating
    /// the file and writing its head does.
    fn empty_torn_segment(segs: &Path, seq: u64) {
        drop(segment::SegmentFile::create(segs, seq, 0).unwrap());
        let path = segs.join(segment::open_name(seq));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
    }

    /// Writes one packet through a new writer; returns the sequence numbers in the store.
    fn write_one(root: &Path) -> Vec<u64> {
        let (mut w, _) = crate::StoreWriter::open(root, crate::WriterConfig::default()).unwrap();
        let i = w.add_interface(capsule_pcap::Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        });
        w.append(i, 1, 60, &[0u8; 60]).unwrap();
        w.finish().unwrap();
        let s = Store::open(root).unwrap();
        s.list().unwrap().iter().map(|e| e.seq).collect()
    }

    #[test]
    fn segment_numbers_only_grow_even_when_recovery_removes_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let segs = Store::create_or_open(dir.path()).unwrap().segments_dir();
        empty_torn_segment(&segs, 1);
        // Recovery removes the empty segment 1: the next writer must not hand out 1 again.
        assert_eq!(write_one(dir.path()), vec![2]);
        empty_torn_segment(&segs, 3);
        assert_eq!(write_one(dir.path()), vec![2, 4]);
        assert_eq!(write_one(dir.path()), vec![2, 4, 5]);
    }

    #[test]
    fn symlinks_below_the_root_are_errors_naming_them_and_the_root_may_be_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let s = Store::create_or_open(&root).unwrap();
        let canary = dir.path().join("canary");
        std::fs::write(&canary, b"keep").unwrap();
        let planted = s.segments_dir().join(segment::sealed_name(7));
        std::os::unix::fs::symlink(&canary, &planted).unwrap();
        let err = s.list().unwrap_err();
        assert!(
            matches!(&err, StoreError::Symlink { path } if *path == planted),
            "{err}"
        );
        assert!(matches!(s.highest_seq(), Err(StoreError::Symlink { .. })));
        // The listing without lengths (a question's) refuses it too, and a directory named
        // like a segment.
        assert!(matches!(
            s.open_segments_checked(),
            Err(StoreError::Symlink { path }) if path == planted
        ));
        std::fs::remove_file(&planted).unwrap();
        std::fs::create_dir(&planted).unwrap();
        assert!(matches!(
            s.open_segments_checked(),
            Err(StoreError::WrongType { .. })
        ));
        std::fs::remove_dir(&planted).unwrap();
        // The root given as a symlink is the operator's choice.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let s = Store::create_or_open(&link).unwrap();
        assert_eq!(s.root(), std::fs::canonicalize(&root).unwrap());
        // The identity file, the lock and segments/ may not be symlinks.
        std::fs::rename(root.join(LOCK_FILE), dir.path().join("lock")).unwrap();
        std::os::unix::fs::symlink(&canary, root.join(LOCK_FILE)).unwrap();
        assert!(matches!(s.lock_writer(), Err(StoreError::Symlink { .. })));
        std::fs::remove_file(root.join(LOCK_FILE)).unwrap();
        std::fs::rename(root.join(SEGMENTS_DIR), dir.path().join("segs")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("segs"), root.join(SEGMENTS_DIR)).unwrap();
        let err = Store::create_or_open(&root).unwrap_err();
        assert!(err.to_string().contains("segments: is a symlink"), "{err}");
        std::fs::rename(root.join(META_FILE), dir.path().join("meta")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("meta"), root.join(META_FILE)).unwrap();
        assert!(matches!(
            Store::open(&root),
            Err(StoreError::Symlink { .. })
        ));
        assert_eq!(std::fs::read(&canary).unwrap(), b"keep");
    }
}

#[cfg(test)]
mod snapshot_tests {
    use super::*;

    /// A snapshot of the listing and the ledger stays current until the directory's entries
    /// or the ledger change: a new file, a removed one, an append to the ledger. A store
    /// without a ledger has none (nothing to prove the skips against).
    #[test]
    fn a_listing_snapshot_is_current_until_the_directory_or_the_ledger_changes() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::create_or_open(dir.path()).unwrap();
        let segs = s.segments_dir();
        std::fs::write(segs.join(segment::sealed_name(1)), b"x").unwrap();
        assert!(s.listing_snapshot().unwrap().is_none(), "no ledger");
        let sealed = |seq| crate::ledger::Sealed {
            seq,
            first_ns: 10,
            last_ns: 20,
            packets: 1,
            bytes: 1,
        };
        crate::ledger::record_sealed(&segs, &sealed(1)).unwrap();
        crate::ledger::record_sealed(&segs, &sealed(2)).unwrap();
        let snap = s.listing_snapshot().unwrap().expect("a snapshot");
        assert_eq!(snap.listed, vec![(1, SegmentState::Sealed)]);
        assert_eq!(snap.missing.len(), 1);
        assert_eq!(snap.missing[0].sealed.seq, 2);
        assert!(s.snapshot_current(&snap.dir, &snap.ledger_id));
        // the directory's change time is at least a tick older than the listing
        let listed_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        assert!(snap.dir.ctime_ns() + LISTING_TICK_NS <= listed_at);

        // a file created at once: the directory's change time moves
        std::fs::write(segs.join(segment::open_name(3)), b"y").unwrap();
        assert!(!s.snapshot_current(&snap.dir, &snap.ledger_id));
        let snap = s.listing_snapshot().unwrap().unwrap();
        assert_eq!(snap.listed.len(), 2);
        assert!(s.snapshot_current(&snap.dir, &snap.ledger_id));
        std::fs::remove_file(segs.join(segment::open_name(3))).unwrap();
        assert!(!s.snapshot_current(&snap.dir, &snap.ledger_id));
        let snap = s.listing_snapshot().unwrap().unwrap();
        crate::ledger::record_repaired(&segs, 1, 0).unwrap();
        assert!(!s.snapshot_current(&snap.dir, &snap.ledger_id));
        let snap = s.listing_snapshot().unwrap().unwrap();
        assert_eq!(snap.ledger.repaired.get(&1), Some(&0));
        assert!(s.snapshot_current(&snap.dir, &snap.ledger_id));
    }
}
