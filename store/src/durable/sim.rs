//! Power-loss simulation (the store's unit tests only): a recorder of every durable operation
//! on one store directory, and the file system a power loss after any prefix of them leaves.
//!
//! The store does its I/O for real (so the real readers, recovery and direct I/O run against
//! a real file system); [`super`]'s functions also report each successful call here. A
//! [`Recording`] registered on a directory keeps the calls on files and directories below
//! it, in order, as [`Op`]s: files are named by an id given at creation (the recorder maps
//! the kernel's inode numbers to ids while a file is linked), directories and entries by
//! their path relative to the recorded root.
//!
//! [`crash`] replays a prefix of the log into a model that knows, for each file, what its
//! last fdatasync or fsync made durable and what was written since, and for each directory
//! its entries as of its last fsync and what changed since; then it keeps of what was not
//! durable what a [`Loss`] says:
//!
//! * file data: nothing, everything, a prefix of the writes cut into 4 KiB pieces (on page
//!   boundaries of the file), or a random subset of those pages, where a dropped page that
//!   had grown the file may still leave its length (zeros where its data was);
//! * directory entries: nothing, everything, or a random prefix of the changes (a journal
//!   commits them in order).
//!
//! [`Image::materialize`] writes that state into a fresh directory, for the real store to
//! open.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::File;
use std::io::Seek;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The unit of a torn write: a device writes (or does not write) whole pages.
pub(crate) const PAGE: u64 = 4096;

/// One successful durable operation. `dir` paths are relative to the recorded root (empty:
/// the root); `file` is the file's id.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Create {
        dir: PathBuf,
        name: OsString,
        file: usize,
    },
    Mkdir {
        dir: PathBuf,
        name: OsString,
    },
    Write {
        file: usize,
        offset: u64,
        data: Vec<u8>,
    },
    SetLen {
        file: usize,
        len: u64,
    },
    /// fdatasync or fsync: both make the data and the length durable.
    Sync {
        file: usize,
    },
    Rename {
        from_dir: PathBuf,
        from: OsString,
        to_dir: PathBuf,
        to: OsString,
    },
    Unlink {
        dir: PathBuf,
        name: OsString,
    },
    SyncDir {
        dir: PathBuf,
    },
}

/// What a directory entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    File(usize),
    Dir(PathBuf),
}

type Entries = BTreeMap<OsString, Node>;

#[derive(Debug)]
struct Log {
    root: PathBuf,
    ops: Vec<Op>,
    /// (device, inode) of each recorded file while it is linked, and its id.
    inos: HashMap<(u64, u64), usize>,
    next_id: usize,
    /// The tree as it is now, every operation applied.
    live: BTreeMap<PathBuf, Entries>,
}

impl Log {
    /// `path` split into its directory relative to the root and its name; `None` when it
    /// is not below the root.
    fn place(&self, path: &Path) -> Option<(PathBuf, OsString)> {
        let rel = path.strip_prefix(&self.root).ok()?;
        let name = rel.file_name()?.to_os_string();
        let dir = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        Some((dir, name))
    }

    fn create(&mut self, dir: PathBuf, name: OsString, key: (u64, u64)) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        self.inos.insert(key, id);
        self.link(&dir, name.clone(), Node::File(id));
        self.ops.push(Op::Create {
            dir,
            name,
            file: id,
        });
        id
    }

    fn mkdir(&mut self, dir: PathBuf, name: OsString) {
        let path = dir.join(&name);
        self.live.entry(path.clone()).or_default();
        self.link(&dir, name.clone(), Node::Dir(path));
        self.ops.push(Op::Mkdir { dir, name });
    }

    /// Links `node` as `name` in `dir`; a file it replaces is forgotten.
    fn link(&mut self, dir: &Path, name: OsString, node: Node) {
        let old = self
            .live
            .entry(dir.to_path_buf())
            .or_default()
            .insert(name, node);
        self.forget(old);
    }

    /// A file no entry names any more: its inode number may be reused by another file.
    fn forget(&mut self, node: Option<Node>) {
        if let Some(Node::File(id)) = node {
            self.inos.retain(|_, v| *v != id);
        }
    }
}

static LOGS: Mutex<Vec<Arc<Mutex<Log>>>> = Mutex::new(Vec::new());
/// How many recordings are registered: the hooks return at once when none is.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

fn logs() -> Vec<Arc<Mutex<Log>>> {
    if ACTIVE.load(Ordering::SeqCst) == 0 {
        return Vec::new();
    }
    LOGS.lock().unwrap().clone()
}

/// The log recording `path`, with the path's place in it.
fn log_of(path: &Path) -> Option<(Arc<Mutex<Log>>, PathBuf, OsString)> {
    logs().into_iter().find_map(|l| {
        let (dir, name) = l.lock().unwrap().place(path)?;
        Some((l, dir, name))
    })
}

fn key(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    let st = rustix::fs::fstat(fd).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// The log recording the file open as `fd`, and the file's id.
fn log_of_file(fd: BorrowedFd<'_>) -> Option<(Arc<Mutex<Log>>, usize)> {
    let logs = logs();
    if logs.is_empty() {
        return None;
    }
    let k = key(fd)?;
    logs.into_iter().find_map(|l| {
        let id = *l.lock().unwrap().inos.get(&k)?;
        Some((l, id))
    })
}

pub(super) fn exists(path: &Path) -> bool {
    log_of(path).is_some_and(|(l, dir, name)| {
        l.lock()
            .unwrap()
            .live
            .get(&dir)
            .is_some_and(|e| e.contains_key(&name))
    })
}

pub(super) fn created(path: &Path, fd: BorrowedFd<'_>) {
    if let (Some((l, dir, name)), Some(k)) = (log_of(path), key(fd)) {
        l.lock().unwrap().create(dir, name, k);
    }
}

pub(super) fn made_dir(path: &Path) {
    if let Some((l, dir, name)) = log_of(path) {
        l.lock().unwrap().mkdir(dir, name);
    }
}

pub(super) fn renamed(from: &Path, to: &Path) {
    let Some((l, from_dir, from_name)) = log_of(from) else {
        return;
    };
    let mut log = l.lock().unwrap();
    let (to_dir, to_name) = log
        .place(to)
        .expect("a rename out of the recorded directory");
    let node = log
        .live
        .get_mut(&from_dir)
        .and_then(|e| e.remove(&from_name))
        .expect("renamed an entry the recorder never saw");
    log.link(&to_dir, to_name.clone(), node);
    log.ops.push(Op::Rename {
        from_dir,
        from: from_name,
        to_dir,
        to: to_name,
    });
}

pub(super) fn unlinked(path: &Path) {
    if let Some((l, dir, name)) = log_of(path) {
        let mut log = l.lock().unwrap();
        let old = log.live.get_mut(&dir).and_then(|e| e.remove(&name));
        log.forget(old);
        log.ops.push(Op::Unlink { dir, name });
    }
}

pub(super) fn synced_dir(path: &Path) {
    for l in logs() {
        let mut log = l.lock().unwrap();
        if let Ok(rel) = path.strip_prefix(&log.root) {
            let dir = rel.to_path_buf();
            log.ops.push(Op::SyncDir { dir });
            return;
        }
    }
}

/// `bytes` were just written at the position of `file`, which is now behind them.
pub(super) fn wrote_at_position(file: &File, bytes: &[u8]) {
    if ACTIVE.load(Ordering::SeqCst) == 0 {
        return;
    }
    let mut f = file;
    let end = f.stream_position().expect("a regular file has a position");
    wrote(file, end - bytes.len() as u64, bytes);
}

pub(super) fn wrote(file: &File, offset: u64, data: &[u8]) {
    if let Some((l, file)) = log_of_file(file.as_fd()) {
        l.lock().unwrap().ops.push(Op::Write {
            file,
            offset,
            data: data.to_vec(),
        });
    }
}

pub(super) fn set_len(file: &File, len: u64) {
    if let Some((l, file)) = log_of_file(file.as_fd()) {
        l.lock().unwrap().ops.push(Op::SetLen { file, len });
    }
}

pub(super) fn synced(file: &File) {
    if let Some((l, file)) = log_of_file(file.as_fd()) {
        l.lock().unwrap().ops.push(Op::Sync { file });
    }
}

/// A recorder registered on a directory; unregistered when dropped.
pub(crate) struct Recording {
    log: Arc<Mutex<Log>>,
}

impl Recording {
    /// Records every durable operation below `root` from now on. What is in `root` already
    /// is taken as durable (logged as created, written, synced and its directory synced).
    pub(crate) fn start(root: &Path) -> Recording {
        let root = std::fs::canonicalize(root).unwrap();
        let mut log = Log {
            root: root.clone(),
            ops: Vec::new(),
            inos: HashMap::new(),
            next_id: 0,
            live: BTreeMap::new(),
        };
        log.live.insert(PathBuf::new(), Entries::new());
        seed(&mut log, &root, Path::new(""));
        let log = Arc::new(Mutex::new(log));
        LOGS.lock().unwrap().push(log.clone());
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        Recording { log }
    }

    /// Operations logged so far.
    pub(crate) fn len(&self) -> usize {
        self.log.lock().unwrap().ops.len()
    }

    /// A copy of the log.
    pub(crate) fn ops(&self) -> Vec<Op> {
        self.log.lock().unwrap().ops.clone()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        LOGS.lock().unwrap().retain(|l| !Arc::ptr_eq(l, &self.log));
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Logs what is in directory `rel` of the root as durable.
fn seed(log: &mut Log, root: &Path, rel: &Path) {
    let mut entries: Vec<_> = std::fs::read_dir(root.join(rel))
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            log.mkdir(rel.to_path_buf(), name.clone());
            seed(log, root, &rel.join(&name));
        } else if ty.is_file() {
            let f = File::open(e.path()).unwrap();
            let k = key(f.as_fd()).unwrap();
            let id = log.create(rel.to_path_buf(), name, k);
            let data = std::fs::read(e.path()).unwrap();
            log.ops.push(Op::Write {
                file: id,
                offset: 0,
                data,
            });
            log.ops.push(Op::Sync { file: id });
        }
    }
    log.ops.push(Op::SyncDir {
        dir: rel.to_path_buf(),
    });
}

/// What of the not yet durable state a power loss keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    Nothing,
    Everything,
    /// Files: a random prefix of the page pieces written since the last sync; directories:
    /// a random prefix of the changes since the last fsync.
    Prefix,
    /// Files: a random subset of the page pieces (a dropped one that grew the file may leave
    /// the length, with zeros); directories: as [`Keep::Prefix`].
    Pages,
}

/// How a power loss treats file data and directory entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loss {
    pub(crate) files: Keep,
    pub(crate) dirs: Keep,
}

/// splitmix64: a small seeded generator, so that every round can be replayed from its seed.
#[derive(Debug, Clone)]
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `num/den`.
    pub(crate) fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

#[derive(Debug, Clone)]
enum FileOp {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Debug, Default)]
struct FileState {
    durable: Vec<u8>,
    pending: Vec<FileOp>,
}

#[derive(Debug, Clone)]
enum DirOp {
    Link(OsString, Node),
    Rename(OsString, OsString),
    Unlink(OsString),
}

#[derive(Debug, Default)]
struct DirState {
    durable: Entries,
    pending: Vec<DirOp>,
}

fn apply_file(content: &mut Vec<u8>, op: &FileOp) {
    match op {
        FileOp::Write(off, data) => {
            let off = *off as usize;
            if content.len() < off + data.len() {
                content.resize(off + data.len(), 0);
            }
            content[off..off + data.len()].copy_from_slice(data);
        }
        FileOp::SetLen(len) => content.resize(*len as usize, 0),
    }
}

fn apply_dir(entries: &mut Entries, op: &DirOp) {
    match op {
        DirOp::Link(name, node) => {
            entries.insert(name.clone(), node.clone());
        }
        DirOp::Rename(from, to) => {
            if let Some(n) = entries.remove(from) {
                entries.insert(to.clone(), n);
            }
        }
        DirOp::Unlink(name) => {
            entries.remove(name);
        }
    }
}

/// Writes cut at the file's page boundaries.
fn pieces(ops: &[FileOp]) -> Vec<FileOp> {
    let mut out = Vec::new();
    for op in ops {
        match op {
            FileOp::Write(off, data) => {
                let mut at = *off;
                let mut rest = &data[..];
                while !rest.is_empty() {
                    let n = ((PAGE - at % PAGE) as usize).min(rest.len());
                    out.push(FileOp::Write(at, rest[..n].to_vec()));
                    at += n as u64;
                    rest = &rest[n..];
                }
            }
            FileOp::SetLen(_) => out.push(op.clone()),
        }
    }
    out
}

/// The file system a power loss right after `ops` leaves, under `loss` (random choices from
/// `rng`).
pub(crate) fn crash(ops: &[Op], loss: Loss, rng: &mut Rng) -> Image {
    let mut files: Vec<FileState> = Vec::new();
    let mut dirs: BTreeMap<PathBuf, DirState> = BTreeMap::new();
    dirs.insert(PathBuf::new(), DirState::default());
    let file = |files: &mut Vec<FileState>, id: usize| -> usize {
        if files.len() <= id {
            files.resize_with(id + 1, FileState::default);
        }
        id
    };
    for op in ops {
        match op {
            Op::Create {
                dir,
                name,
                file: id,
            } => {
                let id = file(&mut files, *id);
                files[id] = FileState::default();
                let d = dirs.entry(dir.clone()).or_default();
                d.pending.push(DirOp::Link(name.clone(), Node::File(id)));
            }
            Op::Mkdir { dir, name } => {
                let path = dir.join(name);
                dirs.entry(path.clone()).or_default();
                let d = dirs.entry(dir.clone()).or_default();
                d.pending.push(DirOp::Link(name.clone(), Node::Dir(path)));
            }
            Op::Write {
                file: id,
                offset,
                data,
            } => {
                let id = file(&mut files, *id);
                files[id].pending.push(FileOp::Write(*offset, data.clone()));
            }
            Op::SetLen { file: id, len } => {
                let id = file(&mut files, *id);
                files[id].pending.push(FileOp::SetLen(*len));
            }
            Op::Sync { file: id } => {
                let id = file(&mut files, *id);
                let f = &mut files[id];
                for p in std::mem::take(&mut f.pending) {
                    apply_file(&mut f.durable, &p);
                }
            }
            Op::Rename {
                from_dir,
                from,
                to_dir,
                to,
            } if from_dir == to_dir => {
                let d = dirs.entry(from_dir.clone()).or_default();
                d.pending.push(DirOp::Rename(from.clone(), to.clone()));
            }
            Op::Rename {
                from_dir,
                from,
                to_dir,
                to,
            } => {
                // Across directories: each side is durable with its own directory's fsync.
                let d = dirs.entry(from_dir.clone()).or_default();
                let mut now = d.durable.clone();
                d.pending.iter().for_each(|p| apply_dir(&mut now, p));
                let node = now.get(from).expect("renamed a missing entry").clone();
                d.pending.push(DirOp::Unlink(from.clone()));
                let t = dirs.entry(to_dir.clone()).or_default();
                t.pending.push(DirOp::Link(to.clone(), node));
            }
            Op::Unlink { dir, name } => {
                let d = dirs.entry(dir.clone()).or_default();
                d.pending.push(DirOp::Unlink(name.clone()));
            }
            Op::SyncDir { dir } => {
                let d = dirs.entry(dir.clone()).or_default();
                for p in std::mem::take(&mut d.pending) {
                    apply_dir(&mut d.durable, &p);
                }
            }
        }
    }
    let mut image = Image::default();
    for (path, d) in dirs {
        let n = d.pending.len();
        let keep = match loss.dirs {
            Keep::Nothing => 0,
            Keep::Everything => n,
            Keep::Prefix | Keep::Pages => rng.below(n as u64 + 1) as usize,
        };
        let mut entries = d.durable;
        d.pending[..keep]
            .iter()
            .for_each(|p| apply_dir(&mut entries, p));
        image.dirs.insert(path, entries);
    }
    for (id, f) in files.into_iter().enumerate() {
        let mut content = f.durable;
        let ps = pieces(&f.pending);
        image.unsynced_pieces += ps.len();
        match loss.files {
            Keep::Nothing => {}
            Keep::Everything => ps.iter().for_each(|p| apply_file(&mut content, p)),
            Keep::Prefix => {
                let keep = rng.below(ps.len() as u64 + 1) as usize;
                ps[..keep].iter().for_each(|p| apply_file(&mut content, p));
            }
            Keep::Pages => {
                for p in &ps {
                    if rng.chance(1, 2) {
                        apply_file(&mut content, p);
                        image.kept_pieces += 1;
                    } else if let FileOp::Write(off, data) = p {
                        // The length may reach the disk without the data.
                        let end = (*off as usize) + data.len();
                        if end > content.len() && rng.chance(1, 4) {
                            content.resize(end, 0);
                        }
                    }
                }
            }
        }
        image.files.insert(id, content);
    }
    image
}

/// The state a power loss left: every directory's entries and every file's bytes.
#[derive(Debug, Default)]
pub(crate) struct Image {
    dirs: BTreeMap<PathBuf, Entries>,
    files: HashMap<usize, Vec<u8>>,
    /// Page pieces written after their file's last sync, and how many of them [`Keep::Pages`]
    /// kept (to show a test exercised torn writes).
    pub(crate) unsynced_pieces: usize,
    pub(crate) kept_pieces: usize,
}

impl Image {
    /// Writes the state below `out` (an empty directory): the tree reachable from the root.
    pub(crate) fn materialize(&self, out: &Path) {
        self.write_dir(Path::new(""), out);
    }

    fn write_dir(&self, rel: &Path, out: &Path) {
        let Some(entries) = self.dirs.get(rel) else {
            return;
        };
        for (name, node) in entries {
            let at = out.join(name);
            match node {
                Node::File(id) => std::fs::write(&at, &self.files[id]).unwrap(),
                Node::Dir(p) => {
                    std::fs::create_dir(&at).unwrap();
                    self.write_dir(p, &at);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsx;

    const NOTHING: Loss = Loss {
        files: Keep::Nothing,
        dirs: Keep::Nothing,
    };
    const EVERYTHING: Loss = Loss {
        files: Keep::Everything,
        dirs: Keep::Everything,
    };

    /// The state after `ops` under `loss`, as name -> bytes of the files in the root.
    fn files_after(ops: &[Op], loss: Loss, seed: u64) -> BTreeMap<String, Vec<u8>> {
        let out = tempfile::tempdir().unwrap();
        crash(ops, loss, &mut Rng(seed)).materialize(out.path());
        std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).unwrap())
            })
            .collect()
    }

    fn create(name: &str, file: usize) -> Op {
        Op::Create {
            dir: PathBuf::new(),
            name: name.into(),
            file,
        }
    }

    fn write(file: usize, offset: u64, data: &[u8]) -> Op {
        Op::Write {
            file,
            offset,
            data: data.to_vec(),
        }
    }

    const SYNC_ROOT: Op = Op::SyncDir {
        dir: PathBuf::new(),
    };

    #[test]
    fn unsynced_data_and_entries_are_what_a_power_loss_takes() {
        let ops = vec![
            create("a", 0),
            SYNC_ROOT,
            write(0, 0, b"synced"),
            Op::Sync { file: 0 },
            write(0, 6, b" and not"),
            create("b", 1),
            write(1, 0, b"b's data"),
            Op::Sync { file: 1 },
        ];
        let none = files_after(&ops, NOTHING, 1);
        // b was fsynced but its directory was not: the name is gone with the data.
        assert_eq!(none.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(none["a"], b"synced");
        let all = files_after(&ops, EVERYTHING, 1);
        assert_eq!(all["a"], b"synced and not");
        assert_eq!(all["b"], b"b's data");
        // A rename is durable with its directory's fsync, not before.
        let mut ops = ops;
        ops.extend([
            SYNC_ROOT,
            Op::Rename {
                from_dir: PathBuf::new(),
                from: "b".into(),
                to_dir: PathBuf::new(),
                to: "a".into(),
            },
        ]);
        assert_eq!(files_after(&ops, NOTHING, 1)["a"], b"synced");
        assert_eq!(files_after(&ops, NOTHING, 1)["b"], b"b's data");
        assert_eq!(files_after(&ops, EVERYTHING, 1)["a"], b"b's data");
        ops.push(SYNC_ROOT);
        let after = files_after(&ops, NOTHING, 1);
        assert_eq!(after.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(after["a"], b"b's data");
    }

    #[test]
    fn torn_writes_keep_or_lose_whole_pages() {
        let old = vec![1u8; 3 * PAGE as usize];
        let new = vec![2u8; 2 * PAGE as usize];
        let ops = vec![
            create("f", 0),
            SYNC_ROOT,
            write(0, 0, &old),
            Op::Sync { file: 0 },
            // Two whole pages starting half way into page 0, and a page past the end.
            write(0, PAGE / 2, &new),
            write(0, 4 * PAGE, &[3u8; PAGE as usize]),
        ];
        let pages = Loss {
            files: Keep::Pages,
            dirs: Keep::Nothing,
        };
        let mut seen = std::collections::BTreeSet::new();
        // The write's pieces: the second half of page 0, page 1, the first half of page 2;
        // then the rest of page 2 (never written), page 3 (a hole), page 4.
        let h = PAGE / 2;
        let regions = [(h, PAGE), (PAGE, 2 * PAGE), (2 * PAGE, 2 * PAGE + h)];
        let rest = [
            (2 * PAGE + h, 3 * PAGE),
            (3 * PAGE, 4 * PAGE),
            (4 * PAGE, 5 * PAGE),
        ];
        for seed in 0..64 {
            let f = &files_after(&ops, pages, seed)["f"];
            assert!(f[..h as usize].iter().all(|&b| b == 1), "never written");
            assert!(f.len() == 3 * PAGE as usize || f.len() == 5 * PAGE as usize);
            // Each piece is old or new as a whole.
            let mut state = Vec::new();
            for (a, b) in regions.iter().chain(&rest) {
                let Some(r) = f.get(*a as usize..*b as usize) else {
                    continue;
                };
                assert!(r.iter().all(|&x| x == r[0]), "{a}..{b} torn inside");
                state.push(r[0]);
            }
            seen.insert(state);
        }
        // Kept and lost pieces mix; the page past the end leaves zeros when only the
        // length survived.
        assert!(seen.contains(&vec![2, 1, 2, 1]) || seen.contains(&vec![2, 1, 2, 1, 0, 3]));
        assert!(seen.contains(&vec![1, 1, 1, 1]));
        assert!(seen.iter().any(|s| s.len() == 6 && s[5] == 0));
        assert!(seen.len() > 4, "{seen:?}");
    }

    #[test]
    fn the_seam_records_the_store_calls_below_its_root_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let other = dir.path().join("other");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&other).unwrap();
        std::fs::write(root.join("old"), b"there before").unwrap();
        let rec = Recording::start(&root);
        let seeded = rec.len();
        let root = std::fs::canonicalize(&root).unwrap();
        fsx::write_atomic(&root.join("meta"), b"m1").unwrap();
        fsx::write_atomic(&other.join("meta"), b"elsewhere").unwrap();
        fsx::replace(&root.join("status"), b"s").unwrap();
        let mut f = fsx::open(&root.join("seg"), fsx::Open::CreateNew, "create").unwrap();
        super::super::append_all(&mut f, b"head").unwrap();
        super::super::sync_data(&f).unwrap();
        fsx::remove(&root.join("old"), "remove").unwrap();
        let ops = rec.ops();
        let kinds: Vec<&str> = ops[seeded..]
            .iter()
            .map(|o| match o {
                Op::Create { .. } => "create",
                Op::Mkdir { .. } => "mkdir",
                Op::Write { .. } => "write",
                Op::SetLen { .. } => "set_len",
                Op::Sync { .. } => "sync",
                Op::Rename { .. } => "rename",
                Op::Unlink { .. } => "unlink",
                Op::SyncDir { .. } => "sync_dir",
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "create", "write", "sync", "rename", "sync_dir", // write_atomic
                "create", "write", "rename", // replace: no syncs
                "create", "write", "sync", "unlink",
            ]
        );
        // A power loss now: "old" is back (its unlink was not synced), "seg" is gone (its
        // entry was not), the status file's replacement may be lost, the meta file is there.
        let none = files_after(&ops, NOTHING, 0);
        assert_eq!(none.keys().collect::<Vec<_>>(), ["meta", "old"]);
        assert_eq!(none["old"], b"there before");
        assert_eq!(none["meta"], b"m1");
        let all = files_after(&ops, EVERYTHING, 0);
        assert_eq!(all.keys().collect::<Vec<_>>(), ["meta", "seg", "status"]);
        assert_eq!(all["seg"], b"head");
    }
}
