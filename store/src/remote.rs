//! Segments read from somewhere other than the local disk: the seam through which the tier
//! (capsule-tier, an object store) serves the segments retention trimmed. The store knows
//! nothing of object stores: it reads a tiered segment through [`RangeRead`] exactly as it
//! reads a local file, through its footer, and opens one through [`RemoteSegments`], a typed
//! value given to the store that reads the tier ([`crate::Store::with_tier`]); a store opened
//! without one names the trimmed segments as unreadable.
//!
//! What a reader learns of a trimmed segment once is kept beside its side index, so that the
//! next reader asks the object store for nothing it does not need:
//!
//! ```text
//! STORE/index/seg-N.idx      the side index; when missing, fetched from the object store
//!                            (uploaded with the segment) and written here
//! STORE/index/seg-N.footer   the byte ranges opening the segment read (its trailer and
//!                            footer, its head and header) and its blocks of no packets
//!                            (interface statistics, which every export reads), as a
//!                            footer cache (below)
//! ```
//!
//! The footer cache (docs/format.md, "footer cache 1"), little-endian:
//!
//! ```text
//! "CPFC" | version u8 = 1 | 3 zero bytes | seq u64 | object length u64
//! | etag length u16 | etag (UTF-8) | ranges u32 | per range: offset u64, length u32, bytes
//! | crc32c u32 of everything before it
//! ```
//!
//! It is used only when its segment number, object length and ETag are the ledger's for the
//! segment and its checksum holds; the ranges are then read through exactly the code that
//! reads them from the object store (the footer's own frame checksum, the header's segment
//! number), so a cache that is stale, damaged or from another object costs a fetch, never a
//! wrong answer.

use std::fmt::Debug;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;

/// Reads byte ranges of one segment's bytes.
pub trait RangeRead: Send + Sync + Debug {
    /// Fills `buf` with the bytes at `offset`; an error when fewer are there.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

impl RangeRead for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

/// Opens the segments that live only in the object store.
pub trait RemoteSegments: Send + Sync + Debug {
    /// Segment `seq`, `bytes` long (what the ledger recorded at upload): its bytes by range,
    /// and a name for messages (the object's URL). Makes no request.
    fn open(&self, seq: u64, bytes: u64) -> Result<(Arc<dyn RangeRead>, String)>;

    /// The side index of segment `seq` as it was uploaded with the segment (the file
    /// `seg-N.idx` of the index directory); `None` when the object store has none.
    fn fetch_index(&self, seq: u64) -> std::io::Result<Option<Vec<u8>>>;

    /// Where a reader that cannot write the store's index directory keeps what it fetched of
    /// segment `seq`, whose object has ETag `etag` (its side index and its footer cache):
    /// a directory outside the store, named by the object's identity (the bucket, the
    /// store's prefix, the segment and the ETag), so that a file there is only ever used for
    /// the object it came from. `None`: no such place (the reader pays the round trips).
    fn cache_dir(&self, seq: u64, etag: &str) -> Option<std::path::PathBuf> {
        let _ = (seq, etag);
        None
    }

    /// Called once a file was written under a [`RemoteSegments::cache_dir`]: keeps the
    /// directories under their bound (the oldest go first).
    fn cache_written(&self) {}
}

/// The tier a store reads its trimmed segments through.
pub type Tier = Arc<dyn RemoteSegments>;

/// The footer cache's file name for segment `seq` (in the index directory).
pub fn footer_cache_name(seq: u64) -> String {
    format!("seg-{seq:012}.footer")
}

const MAGIC: &[u8; 4] = b"CPFC";
const VERSION: u8 = 1;
/// No footer cache is larger than this (a footer is about 50 bytes a block).
const MAX_CACHE: u64 = 64 << 20;
/// The most a footer cache keeps of a segment's blocks of no packets (a few hundred bytes
/// each: one or two a segment).
pub(crate) const CACHED_BLOCK_BYTES: u64 = 256 << 10;

/// What a footer cache is for: the segment, its object's length and ETag.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CacheKey<'a> {
    pub seq: u64,
    pub bytes: u64,
    pub etag: &'a str,
}

/// Ranges of a segment's bytes, as read at their offsets.
pub(crate) type Ranges = Vec<(u64, Vec<u8>)>;

/// The footer cache `bytes` encodes for `key`, as it would be written.
pub(crate) fn encode_cache(key: CacheKey<'_>, ranges: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let etag = &key.etag.as_bytes()[..key.etag.len().min(u16::MAX as usize)];
    let mut b = Vec::with_capacity(64 + ranges.iter().map(|r| 12 + r.1.len()).sum::<usize>());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&[VERSION, 0, 0, 0]);
    b.extend_from_slice(&key.seq.to_le_bytes());
    b.extend_from_slice(&key.bytes.to_le_bytes());
    b.extend_from_slice(&(etag.len() as u16).to_le_bytes());
    b.extend_from_slice(etag);
    b.extend_from_slice(&(ranges.len() as u32).to_le_bytes());
    for (at, r) in ranges {
        b.extend_from_slice(&at.to_le_bytes());
        b.extend_from_slice(&(r.len() as u32).to_le_bytes());
        b.extend_from_slice(r);
    }
    let crc = crate::crc::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// The ranges a footer cache holds, when it is whole and for `key`; why not otherwise.
pub(crate) fn decode_cache(
    key: CacheKey<'_>,
    b: &[u8],
) -> std::result::Result<Ranges, &'static str> {
    let Some((body, crc)) = b.split_last_chunk::<4>() else {
        return Err("shorter than its checksum");
    };
    if crate::crc::crc32c(body) != u32::from_le_bytes(*crc) {
        return Err("its checksum does not hold");
    }
    let mut r = body;
    let mut take = |n: usize| -> std::result::Result<&[u8], &'static str> {
        if r.len() < n {
            return Err("cut short");
        }
        let (a, rest) = r.split_at(n);
        r = rest;
        Ok(a)
    };
    let u64_of = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
    if take(4)? != MAGIC {
        return Err("not a footer cache");
    }
    if take(4)?[0] != VERSION {
        return Err("of another version");
    }
    if u64_of(take(8)?) != key.seq {
        return Err("of another segment");
    }
    if u64_of(take(8)?) != key.bytes {
        return Err("of an object of another length");
    }
    let n = u16::from_le_bytes(take(2)?.try_into().expect("2 bytes")) as usize;
    if take(n)? != key.etag.as_bytes() {
        return Err("of an object with another ETag");
    }
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
    let mut out = Vec::new();
    for _ in 0..count {
        let at = u64_of(take(8)?);
        let len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let bytes = take(len)?.to_vec();
        if at.checked_add(len as u64).is_none_or(|end| end > key.bytes) {
            return Err("a range past the object's end");
        }
        out.push((at, bytes));
    }
    if !r.is_empty() {
        return Err("bytes after its last range");
    }
    Ok(out)
}

/// Reads the footer cache at `path` for `key`: `None` when there is none or it is not
/// usable (a damaged or stale one is removed, with a note in the log).
pub(crate) fn load_cache(path: &Path, key: CacheKey<'_>) -> Option<Ranges> {
    let f = crate::fsx::open(path, crate::fsx::Open::Read, "open footer cache").ok()?;
    if f.metadata().ok()?.len() > MAX_CACHE {
        drop_cache(path, "larger than any footer");
        return None;
    }
    let b = crate::fsx::read(path, "read footer cache").ok()?;
    match decode_cache(key, &b) {
        Ok(r) => Some(r),
        Err(why) => {
            drop_cache(path, why);
            None
        }
    }
}

/// Removes a footer cache that cannot be used (the next reader writes it again).
pub(crate) fn drop_cache(path: &Path, why: &str) {
    tracing::debug!("{}: {why}; it is fetched again", path.display());
    let _ = crate::fsx::remove(path, "remove footer cache");
}

/// Writes the footer cache of `key` at `path`; `false` when it could not (a reader without
/// write access to the store: the caller tries the reader's own cache directory), logged.
pub(crate) fn save_cache(path: &Path, key: CacheKey<'_>, ranges: &[(u64, Vec<u8>)]) -> bool {
    if !path.parent().is_some_and(Path::is_dir) {
        return false;
    }
    match crate::fsx::replace(path, &encode_cache(key, ranges)) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(
                "cannot cache the footer of segment {}: {}",
                key.seq,
                crate::error::chain(&e)
            );
            false
        }
    }
}

/// Writes `bytes` as file `name` of a reader's own cache directory `dir`
/// ([`RemoteSegments::cache_dir`]), made (owner-only) when missing; atomically (a temporary
/// file renamed), so a reader never finds a file half-written. Its path, or why not.
pub(crate) fn write_cached(
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> std::result::Result<std::path::PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("create {}: {e}", dir.display()))?;
    let path = dir.join(name);
    crate::fsx::replace(&path, bytes).map_err(|e| crate::error::chain(&e))?;
    Ok(path)
}

/// A segment's bytes with some ranges held in memory (a footer cache's), the rest read from
/// `inner`.
#[derive(Debug)]
pub(crate) struct Pinned {
    pub ranges: Ranges,
    pub inner: Arc<dyn RangeRead>,
}

impl RangeRead for Pinned {
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        let end = at + buf.len() as u64;
        for (off, b) in &self.ranges {
            if at >= *off && end <= off + b.len() as u64 {
                let from = (at - off) as usize;
                buf.copy_from_slice(&b[from..from + buf.len()]);
                return Ok(());
            }
        }
        self.inner.read_exact_at(buf, at)
    }
}

/// Reads through `inner`, keeping a copy of each range read until [`Recording::take`].
#[derive(Debug)]
pub(crate) struct Recording {
    inner: Arc<dyn RangeRead>,
    on: AtomicBool,
    read: Mutex<Ranges>,
}

impl Recording {
    pub(crate) fn new(inner: Arc<dyn RangeRead>) -> Self {
        Recording {
            inner,
            on: AtomicBool::new(true),
            read: Mutex::new(Vec::new()),
        }
    }

    /// The ranges read so far; later reads are not kept.
    pub(crate) fn take(&self) -> Ranges {
        self.on.store(false, Ordering::Relaxed);
        std::mem::take(&mut *self.read.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl RangeRead for Recording {
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        self.inner.read_exact_at(buf, at)?;
        if self.on.load(Ordering::Relaxed) {
            let mut r = self.read.lock().unwrap_or_else(|p| p.into_inner());
            r.push((at, buf.to_vec()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_footer_cache_round_trips_and_refuses_what_is_not_its_object() {
        let key = CacheKey {
            seq: 7,
            bytes: 1000,
            etag: "abc-2",
        };
        let ranges = vec![(0u64, vec![1u8, 2, 3]), (990, vec![9u8; 10])];
        let b = encode_cache(key, &ranges);
        assert_eq!(decode_cache(key, &b).unwrap(), ranges);
        let other = |k: CacheKey<'_>| decode_cache(k, &b).unwrap_err();
        assert_eq!(other(CacheKey { seq: 8, ..key }), "of another segment");
        assert_eq!(
            other(CacheKey { bytes: 999, ..key }),
            "of an object of another length"
        );
        assert_eq!(
            other(CacheKey {
                etag: "abd-2",
                ..key
            }),
            "of an object with another ETag"
        );
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 1;
            assert!(decode_cache(key, &d).is_err(), "byte {i} flipped");
        }
        for n in 0..b.len() {
            assert!(decode_cache(key, &b[..n]).is_err(), "cut at {n}");
        }
    }

    #[test]
    fn pinned_ranges_serve_reads_inside_them_and_pass_the_rest_on() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, (0..=255u8).collect::<Vec<_>>()).unwrap();
        let file: Arc<dyn RangeRead> = Arc::new(std::fs::File::open(&p).unwrap());
        let pinned = Pinned {
            ranges: vec![(10, vec![0xEE; 10])],
            inner: file,
        };
        let mut b = [0u8; 4];
        pinned.read_exact_at(&mut b, 12).unwrap();
        assert_eq!(b, [0xEE; 4], "inside the pinned range");
        pinned.read_exact_at(&mut b, 18).unwrap();
        assert_eq!(b, [18, 19, 20, 21], "across its end: from the inner source");
        let rec = Recording::new(Arc::new(pinned));
        rec.read_exact_at(&mut b, 100).unwrap();
        assert_eq!(rec.take(), vec![(100, vec![100, 101, 102, 103])]);
        rec.read_exact_at(&mut b, 0).unwrap();
        assert!(rec.take().is_empty(), "not kept after take");
    }
}
