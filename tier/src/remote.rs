//! Reading tiered segments by range: [`Remote`] opens a trimmed segment's object for the
//! store's readers, which read its footer and then only the blocks a plan needs. Small reads
//! are widened to a 4 KiB window (the trailer and the footer, and the header, each cost no round
//! trip of their own), and what was fetched is kept in a bounded in-memory cache.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use capsule_store::remote::{RangeRead, RemoteSegments};
use capsule_store::{segment, StoreError};
use md5::Digest;

use crate::client::Client;

/// The block cache's size: ranges beyond it are dropped, the oldest fetched first.
pub const CACHE_BYTES: u64 = 64 << 20;
/// Reads smaller than this fetch this much around them: the trailer and a small footer in
/// one GET, the head and header in another (a footer larger than this is one more GET).
const WINDOW: u64 = 4 << 10;

/// Ranges fetched, by object key and offset; the oldest go first past the bound.
#[derive(Debug)]
pub(crate) struct BlockCache {
    inner: Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    bound: u64,
    held: u64,
    ranges: BTreeMap<(String, u64), Bytes>,
    order: VecDeque<(String, u64)>,
}

impl BlockCache {
    pub(crate) fn new(bound: u64) -> Self {
        BlockCache {
            inner: Mutex::new(CacheInner {
                bound,
                ..Default::default()
            }),
        }
    }

    /// Copies `[at, at + buf.len())` of `key` into `buf` when one cached range holds it.
    fn get(&self, key: &str, at: u64, buf: &mut [u8]) -> bool {
        let c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let below = c
            .ranges
            .range((key.to_string(), 0)..=(key.to_string(), at))
            .next_back();
        match below {
            Some(((_, start), b)) if at + buf.len() as u64 <= start + b.len() as u64 => {
                let from = (at - start) as usize;
                buf.copy_from_slice(&b[from..from + buf.len()]);
                true
            }
            _ => false,
        }
    }

    fn put(&self, key: &str, at: u64, b: Bytes) {
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        c.held += b.len() as u64;
        if let Some(old) = c.ranges.insert((key.to_string(), at), b) {
            c.held -= old.len() as u64;
        } else {
            c.order.push_back((key.to_string(), at));
        }
        while c.held > c.bound {
            let Some(k) = c.order.pop_front() else { break };
            if let Some(old) = c.ranges.remove(&k) {
                c.held -= old.len() as u64;
            }
        }
    }
}

/// One tiered segment's object, read by range.
#[derive(Debug)]
struct Object {
    client: Arc<Client>,
    key: String,
    len: u64,
    /// The opener's count of bytes fetched ([`Remote::fetched_bytes`]).
    fetched: Arc<AtomicU64>,
}

impl RangeRead for Object {
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        let end = at + buf.len() as u64;
        if end > self.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: {} bytes at {at} lie past its {} bytes",
                    self.key,
                    buf.len(),
                    self.len
                ),
            ));
        }
        if buf.is_empty() || self.client.cache.get(&self.key, at, buf) {
            return Ok(());
        }
        // A small read fetches the window around it; near the end, the last window (the
        // trailer and the footer before it, in one GET).
        let (from, to) = if (buf.len() as u64) < WINDOW {
            if end + WINDOW > self.len {
                (self.len.saturating_sub(WINDOW).min(at), self.len)
            } else {
                let from = at - at % WINDOW;
                (from, (from + WINDOW).max(end).min(self.len))
            }
        } else {
            (at, end)
        };
        let got = self
            .client
            .get_range(&self.key, from..to)
            .map_err(std::io::Error::other)?;
        if got.len() as u64 != to - from {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: asked for {} bytes at {from}, got {}",
                    self.key,
                    to - from,
                    got.len()
                ),
            ));
        }
        self.fetched.fetch_add(got.len() as u64, Ordering::Relaxed);
        let off = (at - from) as usize;
        buf.copy_from_slice(&got[off..off + buf.len()]);
        self.client.cache.put(&self.key, from, got);
        Ok(())
    }
}

/// The store's readers' way to the segments that live only in the object store: given to
/// the store that reads them (`Store::with_tier`). Each counts the bytes fetched through it,
/// so one made per question (a server's request) says what that question fetched; the
/// client, its connections and its block cache are shared.
#[derive(Debug, Clone)]
pub struct Remote {
    client: Arc<Client>,
    fetched: Arc<AtomicU64>,
    /// Whether this reader has pruned its own cache directory ([`prune`]) yet.
    pruned: Arc<AtomicBool>,
}

impl Remote {
    pub fn new(client: Arc<Client>) -> Self {
        Remote {
            client,
            fetched: Arc::new(AtomicU64::new(0)),
            pruned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Bytes fetched from the object store through this value (and its clones): block
    /// ranges, footers and side indexes; what the block cache served is not counted.
    pub fn fetched_bytes(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }

    /// This value as the store takes it.
    pub fn tier(&self) -> capsule_store::remote::Tier {
        Arc::new(self.clone())
    }
}

/// The most a reader's own cache directory holds for one store (side indexes and footers of
/// trimmed segments, [`RemoteSegments::cache_dir`]); past it the least recently written
/// segments' files go.
pub const DIR_CACHE_BYTES: u64 = 1 << 30;

/// The base of the readers' own cache: `[tier] cache_dir`, else `$CACHE_DIRECTORY` (what
/// systemd's `CacheDirectory=` sets), `$XDG_CACHE_HOME/capsule`, `$HOME/.cache/capsule`, the
/// first set.
fn cache_base(client: &Client) -> Option<PathBuf> {
    if let Some(d) = &client.config().cache_dir {
        return Some(d.clone());
    }
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("CACHE_DIRECTORY")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("capsule")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/capsule")))
}

/// A file-name-safe form of `s`: letters, digits, '-' and '.' kept, anything else '_'.
fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The directory of one store's cached files under `base`: named by the store's place in
/// the object store (endpoint, bucket, prefix), which no other store shares.
fn store_cache_dir(client: &Client, base: &Path) -> PathBuf {
    let place = format!("{}/{}", client.url(), client.key(""));
    let digest = md5::Md5::digest(place.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    base.join("tier").join(hex)
}

/// Removes the least recently written segment directories under `dir` until what is left
/// holds at most `bound` bytes. Best effort: a file that cannot be removed is left.
pub(crate) fn prune(dir: &Path, bound: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut segs: Vec<(std::time::SystemTime, PathBuf, u64)> = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let Ok(files) = std::fs::read_dir(&path) else {
            continue;
        };
        let (mut newest, mut bytes) = (std::time::UNIX_EPOCH, 0);
        for f in files.flatten() {
            if let Ok(m) = f.metadata() {
                bytes += m.len();
                newest = newest.max(m.modified().unwrap_or(std::time::UNIX_EPOCH));
            }
        }
        segs.push((newest, path, bytes));
    }
    let mut held: u64 = segs.iter().map(|s| s.2).sum();
    segs.sort();
    for (_, path, bytes) in segs {
        if held <= bound {
            break;
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            held -= bytes;
        }
    }
}

/// The object key of sealed segment `seq` (under the prefix).
pub(crate) fn segment_key(client: &Client, seq: u64) -> String {
    client.key(&format!("segments/{}", segment::sealed_name(seq)))
}

/// The object key of the side index of segment `seq`.
pub(crate) fn index_key(client: &Client, seq: u64) -> String {
    client.key(&format!(
        "index/{}",
        capsule_store::store::index_file_name(seq)
    ))
}

impl RemoteSegments for Remote {
    fn open(&self, seq: u64, bytes: u64) -> capsule_store::Result<(Arc<dyn RangeRead>, String)> {
        let key = segment_key(&self.client, seq);
        if bytes == 0 {
            return Err(StoreError::Config(format!(
                "{key}: the ledger records 0 bytes"
            )));
        }
        let name = format!("{}/{key}", self.client.url());
        let obj = Object {
            client: self.client.clone(),
            key,
            len: bytes,
            fetched: self.fetched.clone(),
        };
        Ok((Arc::new(obj), name))
    }

    fn fetch_index(&self, seq: u64) -> std::io::Result<Option<Vec<u8>>> {
        let got = self
            .client
            .get(&index_key(&self.client, seq))
            .map_err(std::io::Error::other)?;
        if let Some(b) = &got {
            self.fetched.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        Ok(got.map(|b| b.to_vec()))
    }

    fn cache_dir(&self, seq: u64, etag: &str) -> Option<PathBuf> {
        let base = cache_base(&self.client)?;
        let name = format!("{}-{}", segment::sealed_name(seq), safe(etag));
        Some(store_cache_dir(&self.client, &base).join(name))
    }

    fn cache_written(&self) {
        // Once per process: the bound is kept to within one process's writes.
        if self.pruned.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(base) = cache_base(&self.client) {
            prune(&store_cache_dir(&self.client, &base), DIR_CACHE_BYTES);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_serves_ranges_inside_what_it_holds_and_stays_bounded() {
        let c = BlockCache::new(100);
        c.put("k", 10, Bytes::from(vec![7u8; 60]));
        let mut b = [0u8; 20];
        assert!(c.get("k", 30, &mut b) && b == [7u8; 20]);
        assert!(!c.get("k", 60, &mut b), "past the range");
        assert!(!c.get("j", 30, &mut b), "another key");
        c.put("k", 200, Bytes::from(vec![1u8; 60]));
        assert!(
            !c.get("k", 30, &mut b),
            "the oldest range went past the bound"
        );
        assert!(c.get("k", 210, &mut b));
    }

    #[test]
    fn pruning_removes_the_least_recently_written_segments_until_the_bound_holds() {
        let d = tempfile::tempdir().unwrap();
        let t0 = std::time::SystemTime::now();
        for (i, name) in ["old", "mid", "new"].iter().enumerate() {
            let dir = d.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            let f = dir.join("seg.footer");
            std::fs::write(&f, vec![0u8; 100]).unwrap();
            let when = t0 - std::time::Duration::from_secs(100 - 10 * i as u64);
            std::fs::File::options()
                .write(true)
                .open(&f)
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        prune(d.path(), 250);
        let left = |n: &str| d.path().join(n).exists();
        assert!(!left("old") && left("mid") && left("new"));
        prune(d.path(), 1000);
        assert!(left("mid") && left("new"), "under the bound nothing goes");
        prune(d.path(), 0);
        assert!(!left("mid") && !left("new"));
    }
}
