//! The descriptor budget of segment readers: a reader of a local segment does not hold its
//! file open for its whole life. The process keeps at most [`budget`] segment files open (a
//! quarter of its soft `RLIMIT_NOFILE`), closing the least recently read one to open
//! another, and reopens a closed one when it is read again. A store of more segments than
//! the process may open files is then answered like a small one, instead of failing with
//! "Too many open files" (EMFILE) when the readers are opened.
//!
//! ```text
//! SegmentReader::open: open, read head and footer -> Handle::new (the file goes into the pool)
//! read_exact_at: pool hit -> pread;  miss -> reopen by path, same device and inode as the
//!                first open? (else: the segment was removed or replaced since, an error
//!                that says so) -> into the pool, closing the least recently read file
//! drop: its file leaves the pool (closed)
//! ```
//!
//! A store no larger than the budget keeps every segment open, as before. Past it, a
//! segment deleted by retention (or replaced by compaction) after it was closed cannot be
//! read again: the read fails with a NotFound error that names it, where a held descriptor
//! would still have read the unlinked file.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Fewest segment files the pool keeps open whatever the limit says.
const MIN_BUDGET: usize = 8;

/// How many segment files this process keeps open at most: a quarter of the soft
/// `RLIMIT_NOFILE` (the rest is left to index files, sockets, the writer and pipes), at
/// least 8 (`MIN_BUDGET`).
pub fn budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        usize::try_from(soft / 4)
            .unwrap_or(usize::MAX)
            .max(MIN_BUDGET)
    })
}

/// The open segment files of the process, least recently read first.
#[derive(Default)]
struct Pool {
    /// Handle id -> (last use, file).
    open: HashMap<u64, (u64, Arc<File>)>,
    /// Last use -> handle id.
    by_use: BTreeMap<u64, u64>,
    tick: u64,
}

impl Pool {
    fn get(&mut self, id: u64) -> Option<Arc<File>> {
        self.tick += 1;
        let tick = self.tick;
        let (used, file) = self.open.get_mut(&id)?;
        self.by_use.remove(used);
        *used = tick;
        self.by_use.insert(tick, id);
        Some(file.clone())
    }

    fn put(&mut self, id: u64, file: Arc<File>, cap: usize) {
        self.remove(id);
        while self.open.len() >= cap {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            // A reader in the middle of a read keeps its Arc: the descriptor closes when
            // that read ends.
            self.open.remove(&oldest);
        }
        self.tick += 1;
        self.by_use.insert(self.tick, id);
        self.open.insert(id, (self.tick, file));
    }

    fn remove(&mut self, id: u64) {
        if let Some((used, _)) = self.open.remove(&id) {
            self.by_use.remove(&used);
        }
    }
}

fn pool() -> &'static Mutex<Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(|| Mutex::new(Pool::default()))
}

fn lock() -> std::sync::MutexGuard<'static, Pool> {
    // A thread that panicked holding the lock left a consistent map (no step above panics
    // half way): go on with it.
    pool().lock().unwrap_or_else(|p| p.into_inner())
}

/// Closes every segment descriptor the pool holds, as the budget does to the least
/// recently read ones: each reader reopens its file by path at its next read (and finds it
/// removed or replaced if retention or compaction changed it meanwhile). A read in progress
/// keeps its descriptor until it ends.
pub fn close_all() {
    let mut p = lock();
    p.open.clear();
    p.by_use.clear();
}

/// A local segment file read through the pool.
#[derive(Debug)]
pub struct Handle {
    id: u64,
    path: PathBuf,
    /// Device and inode of the file first opened: a reopened file must be the same.
    dev: u64,
    ino: u64,
}

impl Handle {
    /// Puts `file` (opened from `path`, `m` its metadata) into the pool.
    pub fn new(path: &Path, file: File, m: &std::fs::Metadata) -> Handle {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let h = Handle {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            path: path.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
        };
        lock().put(h.id, Arc::new(file), budget());
        h
    }

    /// The file, from the pool or reopened.
    fn file(&self) -> std::io::Result<Arc<File>> {
        if let Some(f) = lock().get(self.id) {
            return Ok(f);
        }
        let gone = |what: &str| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "the segment was {what} after it was opened (its descriptor had been \
                     closed: more segments than the descriptor budget of {} were read)",
                    budget()
                ),
            )
        };
        let file = match crate::fsx::open(&self.path, crate::fsx::Open::Read, "reopen segment") {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Err(gone("removed (retention?)")),
            Err(crate::error::StoreError::Io { error, .. }) => return Err(error),
            Err(e) => return Err(std::io::Error::other(crate::error::chain(&e))),
        };
        let m = file.metadata()?;
        if (m.dev(), m.ino()) != (self.dev, self.ino) {
            return Err(gone("replaced (compaction?)"));
        }
        let file = Arc::new(file);
        lock().put(self.id, file.clone(), budget());
        Ok(file)
    }
}

impl crate::remote::RangeRead for Handle {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&*self.file()?, buf, offset)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        lock().remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::RangeRead;

    #[test]
    fn the_pool_closes_the_least_recently_read_and_reopens_it() {
        let mut p = Pool::default();
        let dir = tempfile::tempdir().unwrap();
        let f = |n: u8| {
            let path = dir.path().join(format!("f{n}"));
            std::fs::write(&path, [n; 4]).unwrap();
            Arc::new(File::open(&path).unwrap())
        };
        p.put(1, f(1), 2);
        p.put(2, f(2), 2);
        assert!(p.get(1).is_some());
        p.put(3, f(3), 2);
        // 2 was the least recently used
        assert!(p.get(2).is_none());
        assert!(p.get(1).is_some() && p.get(3).is_some());
        assert_eq!(p.open.len(), 2);
        p.remove(1);
        assert_eq!((p.open.len(), p.by_use.len()), (1, 1));
    }

    #[test]
    fn a_closed_handle_reopens_its_file_and_refuses_a_replaced_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        std::fs::write(&path, b"abcdefgh").unwrap();
        let f = File::open(&path).unwrap();
        let m = f.metadata().unwrap();
        let h = Handle::new(&path, f, &m);
        // closed, as the pool does past its budget
        lock().remove(h.id);
        let mut b = [0u8; 3];
        h.read_exact_at(&mut b, 2).unwrap();
        assert_eq!(&b, b"cde");
        // replaced by another file under the same name, and closed again
        let tmp = dir.path().join("new");
        std::fs::write(&tmp, b"ABCDEFGH").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        lock().remove(h.id);
        let e = h.read_exact_at(&mut b, 2).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().contains("replaced"), "{e}");
        std::fs::remove_file(&path).unwrap();
        let e = h.read_exact_at(&mut b, 2).unwrap_err();
        assert!(e.to_string().contains("removed"), "{e}");
    }
}
