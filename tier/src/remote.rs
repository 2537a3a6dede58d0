//! Reading tiered segments by range: [`Remote`] opens a trimmed segment's object for the
//! store's readers, which read its footer and then only the blocks a plan needs. Small reads
//! are widened to a 4 KiB window (the trailer and the footer, and the header, each cost no round
//! trip of their own), and what was fetched is kept in a bounded in-memory cache.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use capsule_store::remote::{RangeRead, RemoteSegments};
use capsule_store::{segment, StoreError};

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
}

impl Remote {
    pub fn new(client: Arc<Client>) -> Self {
        Remote {
            client,
            fetched: Arc::new(AtomicU64::new(0)),
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
}
