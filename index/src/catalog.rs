//! The store-wide catalog (`STORE/index/catalog`): one row per sealed segment, derived from
//! its side index, saying what the segment spans and which addresses and ports occur in it.
//! Planning asks it first: a segment whose row rules the filter out
//! ([`capsule_query::Filter::matches_keys`] is `No`) is planned without opening its index.
//!
//! ```text
//! sealed index seg-N.idx -> Row { seq, segment bytes, blocks, first/last ns, keys }
//!   keys: every flow's two addresses and two ports, hashed (FNV-1a 64): the sorted hashes
//!         when at most EXACT_MAX, else a Bloom filter (10 bits a key, 7 probes: about 1%
//!         false positives)
//! writer: row added at seal, updated at compaction, removed at retention, all rows
//!         checked at open (recovery); the file rewritten (atomic replace) at most every
//!         FLUSH_EVERY and when the writer closes
//! reader: a row is used only when its seq, segment length and block count are the
//!         segment's own (else: the segment's index, as without a catalog)
//! ```
//!
//! The catalog is derived data and never makes an answer wrong: a missing, damaged or stale
//! catalog (or row) only makes planning read the segments' own indexes, and `capsule
//! reindex` or the next writer rebuilds it. Bytes: docs/format.md "Catalog".

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use capsule_query::{Filter, IndexKey, Tri};
use capsule_store::{fsx, Result, SegmentReader, SegmentState, Store, StoreError};

use crate::sideindex::SegmentIndex;

/// The catalog's file name in `STORE/index/`.
pub const CATALOG_FILE: &str = "catalog";
const MAGIC: &[u8; 8] = b"CAPSCATL";
/// Version of the catalog's bytes (docs/format.md).
pub const CATALOG_VERSION: u32 = 1;
/// At most this many distinct keys are kept exactly (sorted hashes); more go into a Bloom
/// filter.
pub const EXACT_MAX: usize = 1024;
const BLOOM_BITS_PER_KEY: usize = 10;
const BLOOM_PROBES: u8 = 7;
/// How often a writer rewrites the catalog while it seals segments.
pub const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The keys that occur in a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    /// Sorted, distinct hashes of every key.
    Exact(Vec<u64>),
    /// A Bloom filter of `bits.len() * 64` bits probed `probes` times per key.
    Bloom { probes: u8, bits: Vec<u64> },
}

impl Keys {
    fn of(mut hashes: Vec<u64>) -> Keys {
        hashes.sort_unstable();
        hashes.dedup();
        if hashes.len() <= EXACT_MAX {
            return Keys::Exact(hashes);
        }
        let words = (hashes.len() * BLOOM_BITS_PER_KEY).div_ceil(64);
        let mut bits = vec![0u64; words];
        for h in hashes {
            for bit in probes(h, BLOOM_PROBES, words * 64) {
                bits[bit / 64] |= 1 << (bit % 64);
            }
        }
        Keys::Bloom {
            probes: BLOOM_PROBES,
            bits,
        }
    }

    /// Whether key hash `h` may occur (a Bloom filter may say yes wrongly, never no).
    pub fn may_have(&self, h: u64) -> bool {
        match self {
            Keys::Exact(v) => v.binary_search(&h).is_ok(),
            Keys::Bloom { probes: k, bits } => {
                !bits.is_empty()
                    && probes(h, *k, bits.len() * 64).all(|b| bits[b / 64] & (1 << (b % 64)) != 0)
            }
        }
    }
}

/// Double hashing: probe i is h1 + i * h2 modulo the bit count.
fn probes(h: u64, k: u8, m: usize) -> impl Iterator<Item = usize> {
    let h1 = h;
    let h2 = h.rotate_left(32) | 1;
    (0..u64::from(k)).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % m as u64) as usize)
}

/// FNV-1a 64 of a key: a tag byte (4: IPv4 address, 6: IPv6 address, `P`: port) then the
/// address's bytes or the port big-endian.
pub fn key_hash(k: IndexKey) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    match k {
        IndexKey::Addr(IpAddr::V4(a)) => {
            eat(4);
            a.octets().into_iter().for_each(&mut eat);
        }
        IndexKey::Addr(IpAddr::V6(a)) => {
            eat(6);
            a.octets().into_iter().for_each(&mut eat);
        }
        IndexKey::Port(p) => {
            eat(b'P');
            p.to_be_bytes().into_iter().for_each(&mut eat);
        }
    }
    h
}

/// One sealed segment as the catalog knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub seq: u64,
    /// Length of the segment file the row was derived from (its index's `segment_len`).
    pub segment_len: u64,
    pub blocks: u32,
    /// First and last IP packet of its flows (0, 0 for a segment without flows).
    pub first_ns: u64,
    pub last_ns: u64,
    pub keys: Keys,
}

impl Row {
    /// The row of a segment, from its side index (the filter's keys: both addresses and
    /// both ports of every flow, as `Filter::matches_side` compares them).
    pub fn of(idx: &SegmentIndex) -> Row {
        let mut hashes = Vec::with_capacity(idx.flows.len() * 4);
        for f in &idx.flows {
            hashes.push(key_hash(IndexKey::Addr(f.key.a)));
            hashes.push(key_hash(IndexKey::Addr(f.key.b)));
            if let Some((p, q)) = f.key.ports {
                hashes.push(key_hash(IndexKey::Port(p)));
                hashes.push(key_hash(IndexKey::Port(q)));
            }
        }
        // The span of its flows (IP packets; 0, 0 without any).
        let span = idx.flows.iter().fold(None, |s: Option<(u64, u64)>, f| {
            let (a, z) = (f.totals.first_ns, f.totals.last_ns);
            Some(s.map_or((a, z), |(x, y)| (x.min(a), y.max(z))))
        });
        let (first_ns, last_ns) = span.unwrap_or((0, 0));
        Row {
            seq: idx.seq,
            segment_len: idx.segment_len,
            blocks: idx.blocks.len() as u32,
            first_ns,
            last_ns,
            keys: Keys::of(hashes),
        }
    }

    /// Whether this row describes `seg` as it is now (same number, length and blocks).
    pub fn describes(&self, seg: &SegmentReader) -> bool {
        seg.state() == SegmentState::Sealed
            && self.seq == seg.seq()
            && self.segment_len == seg.bytes()
            && self.blocks as usize == seg.blocks().len()
    }

    /// Whether a packet of this segment may match `filter` (`false`: none can).
    pub fn may_match(&self, filter: &Filter) -> bool {
        filter.matches_keys(&|k| self.keys.may_have(key_hash(k))) != Tri::No
    }
}

/// The catalog: rows by segment number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    pub rows: BTreeMap<u64, Row>,
}

/// The catalog's path in index directory `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(CATALOG_FILE)
}

impl Catalog {
    /// The bytes of the file (docs/format.md "Catalog").
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16 + self.rows.len() * 64);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&CATALOG_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.rows.len() as u32).to_le_bytes());
        for r in self.rows.values() {
            b.extend_from_slice(&r.seq.to_le_bytes());
            b.extend_from_slice(&r.segment_len.to_le_bytes());
            b.extend_from_slice(&r.blocks.to_le_bytes());
            b.extend_from_slice(&r.first_ns.to_le_bytes());
            b.extend_from_slice(&r.last_ns.to_le_bytes());
            let (kind, probes, words) = match &r.keys {
                Keys::Exact(v) => (0u8, 0u8, v),
                Keys::Bloom { probes, bits } => (1, *probes, bits),
            };
            b.push(kind);
            b.push(probes);
            b.extend_from_slice(&(words.len() as u32).to_le_bytes());
            for w in words {
                b.extend_from_slice(&w.to_le_bytes());
            }
        }
        let crc = capsule_store::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads the bytes back; what is wrong otherwise.
    pub fn decode(b: &[u8]) -> std::result::Result<Catalog, String> {
        if b.len() < 20 || &b[..8] != MAGIC {
            return Err("not a catalog (bad magic or shorter than its header)".into());
        }
        let (body, tail) = b.split_at(b.len() - 4);
        let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
        if stored != capsule_store::crc::crc32c(body) {
            return Err("crc32c mismatch".into());
        }
        let mut at = 8usize;
        let mut take = |n: usize| -> std::result::Result<&[u8], String> {
            let s = body
                .get(at..at + n)
                .ok_or_else(|| format!("truncated at byte {at}"))?;
            at += n;
            Ok(s)
        };
        let u32_ = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4 bytes"));
        let u64_ = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
        let version = u32_(take(4)?);
        if version != CATALOG_VERSION {
            return Err(format!(
                "version {version} is not supported (this build reads {CATALOG_VERSION})"
            ));
        }
        let n = u32_(take(4)?);
        let mut rows = BTreeMap::new();
        for _ in 0..n {
            let seq = u64_(take(8)?);
            let segment_len = u64_(take(8)?);
            let blocks = u32_(take(4)?);
            let first_ns = u64_(take(8)?);
            let last_ns = u64_(take(8)?);
            let kind = take(1)?[0];
            let probes = take(1)?[0];
            let words = u32_(take(4)?) as usize;
            let raw = take(words.checked_mul(8).ok_or("word count overflows")?)?;
            let v: Vec<u64> = raw.chunks_exact(8).map(u64_).collect();
            let keys = match (kind, probes) {
                (0, 0) if v.windows(2).all(|w| w[0] < w[1]) => Keys::Exact(v),
                (1, 1..=32) => Keys::Bloom { probes, bits: v },
                _ => return Err(format!("segment {seq}: bad key set (kind {kind})")),
            };
            if rows
                .insert(
                    seq,
                    Row {
                        seq,
                        segment_len,
                        blocks,
                        first_ns,
                        last_ns,
                        keys,
                    },
                )
                .is_some()
            {
                return Err(format!("segment {seq} listed twice"));
            }
        }
        if at != body.len() {
            return Err(format!("{} bytes after the last row", body.len() - at));
        }
        Ok(Catalog { rows })
    }

    /// Loads the catalog of index directory `dir`: `Ok(None)` when there is none, a
    /// [`StoreError::DerivedDamaged`] when it does not decode.
    pub fn load(dir: &Path) -> Result<Option<Catalog>> {
        let p = path(dir);
        let bytes = match fsx::read(&p, "read catalog") {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        Catalog::decode(&bytes)
            .map(Some)
            .map_err(|detail| StoreError::DerivedDamaged {
                path: p,
                problem: capsule_store::format::DecodeError::Invalid {
                    what: "catalog",
                    detail,
                },
            })
    }

    /// Writes the catalog to index directory `dir` (temporary file, fsync, rename).
    pub fn write(&self, dir: &Path) -> Result<()> {
        fsx::write_atomic(&path(dir), &self.encode())
    }

    /// The row describing `seg` as it is now, if any.
    pub fn row_for(&self, seg: &SegmentReader) -> Option<&Row> {
        self.rows.get(&seg.seq()).filter(|r| r.describes(seg))
    }
}

/// The catalog `segments` of `store` should have: existing rows kept where they still
/// describe their segment, the others derived from the segments' current side indexes
/// (a segment without one gets no row: planning reads it as before). Rows of segments no
/// longer listed are dropped.
pub fn refreshed(store: &Store, segments: &[SegmentReader], old: Option<&Catalog>) -> Catalog {
    let dir = store.index_dir();
    let mut out = Catalog::default();
    for seg in segments
        .iter()
        .filter(|s| s.state() == SegmentState::Sealed)
    {
        if let Some(r) = old.and_then(|c| c.row_for(seg)) {
            out.rows.insert(r.seq, r.clone());
        } else if let Ok(Some(idx)) = SegmentIndex::load(&dir, seg) {
            out.rows.insert(idx.seq, Row::of(&idx));
        }
    }
    out
}

/// Rebuilds the catalog of `store` from its segments' side indexes and writes it; returns
/// the number of rows. A damaged catalog is replaced.
pub fn rebuild(store: &Store) -> Result<usize> {
    let segments = store.open_segments()?;
    let old = Catalog::load(&store.index_dir()).ok().flatten();
    let c = refreshed(store, &segments, old.as_ref());
    c.write(&store.index_dir())?;
    Ok(c.rows.len())
}

/// What `capsule verify` says of the catalog: `None` when it is absent (nothing to check:
/// it is optional) or every row that describes its segment as the segment is now (same
/// length and blocks) equals the one derived from its index; otherwise what is wrong. Rows
/// behind the store (none yet for a segment sealed since the last rewrite, or one from
/// before a compaction) are no problem: planning does not use them (it checks each row's
/// segment number, length and blocks) and the next writer brings them up to date. A row
/// that matches its segment and differs from it would be used, wrongly: `capsule reindex`
/// or `verify --repair` rewrites the catalog.
pub fn verify(store: &Store, segments: &[SegmentReader]) -> Option<String> {
    let c = match Catalog::load(&store.index_dir()) {
        Ok(Some(c)) => c,
        Ok(None) => return None,
        Err(e) => return Some(capsule_store::error::chain(&e)),
    };
    let fresh = refreshed(store, segments, None);
    let mut problems = Vec::new();
    // A row that is behind (none yet for a segment sealed since the last rewrite, or one
    // for the segment before its compaction: another length or block count) is never used
    // by planning, and the next writer brings it up to date: after a kill -9 that is the
    // expected state, not damage. A row that claims to describe the segment as it is (same
    // length and blocks) and differs from it would be used, wrongly: that is a problem.
    for (seq, r) in &fresh.rows {
        match c.rows.get(seq) {
            Some(have)
                if have.segment_len == r.segment_len && have.blocks == r.blocks && have != r =>
            {
                problems.push(format!(
                    "segment {seq}: its row differs from the one derived from its index"
                ))
            }
            _ => {}
        }
    }
    (!problems.is_empty()).then(|| {
        let n = problems.len();
        problems.truncate(5);
        format!(
            "{n} problem(s), planning reads those segments' indexes instead: {}",
            problems.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_exact_and_bloom_never_deny_a_present_key() {
        let present: Vec<u64> = (0..5000u16).map(|p| key_hash(IndexKey::Port(p))).collect();
        for n in [10usize, 5000] {
            let k = Keys::of(present[..n].to_vec());
            assert_eq!(matches!(k, Keys::Exact(_)), n <= EXACT_MAX);
            assert!(present[..n].iter().all(|&h| k.may_have(h)));
            let absent = (10_000..20_000u16)
                .filter(|&p| k.may_have(key_hash(IndexKey::Port(p))))
                .count();
            // exact: none; Bloom at 10 bits a key: about 1%
            assert!(absent < 300, "{absent} false positives of 10000");
        }
    }

    #[test]
    fn a_row_rules_a_filter_out_only_when_no_packet_can_match() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let keys = Keys::of(vec![
            key_hash(IndexKey::Addr(a)),
            key_hash(IndexKey::Port(53)),
        ]);
        let row = Row {
            seq: 1,
            segment_len: 1,
            blocks: 1,
            first_ns: 1,
            last_ns: 2,
            keys,
        };
        let may = |f: &str| row.may_match(&f.parse::<Filter>().unwrap());
        assert!(may("host 10.0.0.1"));
        assert!(may("src host 10.0.0.1 and udp port 53"));
        assert!(!may("host 10.0.0.2"));
        assert!(!may("host 10.0.0.1 and port 54"));
        assert!(!may("host 10.0.0.2 or port 54"));
        // what the row does not know decides nothing
        assert!(may("not host 10.0.0.2"));
        assert!(may("host 10.0.0.2 or arp"));
        assert!(may("net 10.0.0.0/8"));
        assert!(may("vlan 7 or host 10.0.0.2 or portrange 1-2"));
        assert!(may(""));
    }

    #[test]
    fn a_catalog_reads_back_and_damage_is_named() {
        let mut c = Catalog::default();
        for (seq, keys) in [
            (1u64, Keys::of(vec![3, 1, 2])),
            (7, Keys::of((0..2000).collect())),
        ] {
            c.rows.insert(
                seq,
                Row {
                    seq,
                    segment_len: 100 + seq,
                    blocks: 3,
                    first_ns: 10,
                    last_ns: 20,
                    keys,
                },
            );
        }
        let b = c.encode();
        assert_eq!(Catalog::decode(&b).unwrap(), c);
        for cut in [0, 10, b.len() / 2, b.len() - 1] {
            assert!(Catalog::decode(&b[..cut]).is_err());
        }
        let mut flipped = b.clone();
        flipped[30] ^= 1;
        assert!(Catalog::decode(&flipped).unwrap_err().contains("crc32c"));
    }
}
