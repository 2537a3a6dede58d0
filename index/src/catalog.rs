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
//!         segment's own (else: the segment's index, as without a catalog); a question
//!         leaves a sealed segment unopened on its row, its number and the ledger alone
//!         (Row::skips; the file is not even stat'ed)
//! ```
//!
//! The catalog is derived data and never makes an answer wrong: a missing, damaged or stale
//! catalog (or row) only makes planning read the segments' own indexes, and `capsule
//! reindex` or the next writer rebuilds it. Bytes: docs/format.md "Catalog".

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use capsule_query::{Filter, IndexKey, Tri};
use capsule_store::{fsx, Result, SegmentReader, SegmentState, Store, StoreError};

use crate::sideindex::SegmentIndex;

/// The catalog's file name in `STORE/index/`.
pub const CATALOG_FILE: &str = "catalog";
const MAGIC: &[u8; 8] = b"CAPSCATL";
/// Version of the catalog's bytes (docs/format.md). Version 1 (rows without
/// [`Row::held`]) is still read.
pub const CATALOG_VERSION: u32 = 2;
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

/// What a question reads from every segment besides its packets, kept in the row (catalog
/// version 2) so that a segment the row rules out is not opened at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowHeld {
    /// Packets in its blocks (the ledger's count at seal, unless damage was repaired away).
    pub packets: u64,
    /// First and last packet of its blocks of packets (any packet, IP or not; 0, 0 without).
    pub first_ns: u64,
    pub last_ns: u64,
    /// Time of its earliest interface statistics record (the drop counters, in its blocks
    /// without packets: what every export reads before its window's end for the counters'
    /// baselines), `u64::MAX` when it has none; 0 when such a block could not be read.
    pub stats_first_ns: u64,
}

impl RowHeld {
    /// What `seg` holds, from its block headers and its blocks without packets (a few
    /// bytes each: interface declarations and statistics).
    pub fn of(seg: &SegmentReader) -> RowHeld {
        let mut dctx = zstd::bulk::Decompressor::new().ok();
        let (mut frame, mut data) = (Vec::new(), Vec::new());
        let mut h = RowHeld {
            packets: 0,
            first_ns: u64::MAX,
            last_ns: 0,
            stats_first_ns: u64::MAX,
        };
        for b in seg.blocks() {
            if b.packets > 0 {
                h.packets += u64::from(b.packets);
                h.first_ns = h.first_ns.min(b.first_ns);
                h.last_ns = h.last_ns.max(b.last_ns);
            }
        }
        for (i, _) in seg
            .blocks()
            .iter()
            .enumerate()
            .filter(|(_, b)| b.packets == 0)
        {
            let read = dctx
                .as_mut()
                .is_some_and(|d| seg.read_block(i, d, &mut frame, &mut data).is_ok());
            if !read {
                // what it holds is unknown: every question opens the segment
                h.stats_first_ns = 0;
                break;
            }
            for st in capsule_pcap::read::fragment_stats(&data) {
                h.stats_first_ns = h.stats_first_ns.min(st.ts_ns);
            }
        }
        if h.packets == 0 {
            (h.first_ns, h.last_ns) = (0, 0);
        }
        h
    }
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
    /// What its blocks hold (version 2; `None` in a version-1 row, or one derived from the
    /// index alone): without it, a question opens the segment.
    pub held: Option<RowHeld>,
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
            held: None,
        }
    }

    /// [`Row::of`] with what `seg` (the segment `idx` describes) holds.
    pub fn of_segment(idx: &SegmentIndex, seg: &SegmentReader) -> Row {
        let mut r = Row::of(idx);
        if r.seq == seg.seq()
            && r.segment_len == seg.bytes()
            && r.blocks as usize == seg.blocks().len()
        {
            r.held = Some(RowHeld::of(seg));
        }
        r
    }

    /// Whether a question over `[from, to)` with `filter` may leave sealed segment `seq`
    /// (listed under its sealed name) unopened: the row is that segment's and says what it
    /// holds, the store's ledger records the seal with as many packets as the segment holds
    /// (none lost to a repair, and the index the keys come from saw every packet), and then
    /// either neither its packets nor the span the ledger records (which bounds any stretch
    /// lost to damage since) reach the window, or no packet of it can match the filter; and
    /// it has no interface statistics before the window's end (the drop baselines).
    ///
    /// The file's length is not compared (it would cost a `lstat` per listed file): the one
    /// rewrite of a sealed file under its name, a compaction, keeps every fact this reads
    /// (blocks, times, packet counts, interfaces; docs/decisions.md, issue 34).
    pub fn skips(
        &self,
        seq: u64,
        ledger: Option<&capsule_store::ledger::Ledger>,
        filter: &Filter,
        from: u64,
        to: u64,
    ) -> bool {
        let Some(h) = self.held else { return false };
        let Some(rec) = ledger.and_then(|l| l.live.get(&seq)) else {
            return false;
        };
        if self.seq != seq || rec.packets != h.packets || h.stats_first_ns < to {
            return false;
        }
        let reaches = h.packets > 0 && h.last_ns >= from && h.first_ns < to;
        let recorded = rec.packets > 0 && rec.last_ns >= from && rec.first_ns < to;
        if !reaches && !recorded {
            return true;
        }
        !filter.is_all() && !self.may_match(filter)
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
            match &r.held {
                None => b.push(0),
                Some(h) => {
                    b.push(1);
                    for v in [h.packets, h.first_ns, h.last_ns, h.stats_first_ns] {
                        b.extend_from_slice(&v.to_le_bytes());
                    }
                }
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
        if version != 1 && version != CATALOG_VERSION {
            return Err(format!(
                "version {version} is not supported (this build reads 1 to {CATALOG_VERSION})"
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
            let held = match version {
                1 => None,
                _ => match take(1)?[0] {
                    0 => None,
                    1 => Some(RowHeld {
                        packets: u64_(take(8)?),
                        first_ns: u64_(take(8)?),
                        last_ns: u64_(take(8)?),
                        stats_first_ns: u64_(take(8)?),
                    }),
                    k => return Err(format!("segment {seq}: bad held flag {k}")),
                },
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
                        held,
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

    /// [`Catalog::load`], decoded once per process while the file stays the same: the
    /// file is opened, and when its identity (device, inode, length, modification and
    /// change times, from the open file) is that of the catalog this process decoded last,
    /// that one is returned. One question asks for the catalog up to three times (the
    /// window, the plan, the flow listing) and at 100,000 segments it is 21 MB to decode
    /// (issue 34). A rewrite is an atomic replace (a new file), so a changed catalog is
    /// never mistaken for the one decoded.
    pub fn load_shared(dir: &Path) -> Result<Option<Arc<Catalog>>> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        type Id = (u64, u64, u64, i64, i64, i64, i64);
        static LAST: Mutex<Option<(Id, Arc<Catalog>)>> = Mutex::new(None);
        let p = path(dir);
        let mut f = match fsx::open(&p, fsx::Open::Read, "open catalog") {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let m = f
            .metadata()
            .map_err(|e| StoreError::io("stat catalog", &p, e))?;
        let id: Id = (
            m.dev(),
            m.ino(),
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        );
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((have, c)) = last.as_ref() {
            if *have == id {
                return Ok(Some(Arc::clone(c)));
            }
        }
        let mut bytes = Vec::with_capacity(m.len() as usize);
        f.read_to_end(&mut bytes)
            .map_err(|e| StoreError::io("read catalog", &p, e))?;
        let c = Arc::new(
            Catalog::decode(&bytes).map_err(|detail| StoreError::DerivedDamaged {
                path: p,
                problem: capsule_store::format::DecodeError::Invalid {
                    what: "catalog",
                    detail,
                },
            })?,
        );
        *last = Some((id, Arc::clone(&c)));
        Ok(Some(c))
    }

    /// Writes the catalog to index directory `dir` (temporary file, fsync, rename).
    pub fn write(&self, dir: &Path) -> Result<()> {
        // A new store's writer writes its first (empty) catalog before any segment is
        // sealed, so before any index has made the directory.
        fsx::create_dir(dir)?;
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
        if let Some(r) = old
            .and_then(|c| c.row_for(seg))
            .filter(|r| r.held.is_some())
        {
            out.rows.insert(r.seq, r.clone());
        } else if let Ok(Some(idx)) = SegmentIndex::load(&dir, seg) {
            out.rows.insert(idx.seq, Row::of_segment(&idx, seg));
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
                if have.segment_len == r.segment_len
                    && have.blocks == r.blocks
                    // a version-1 row says nothing of what the segment holds
                    && (have.held.is_some() && have != r
                        || have.held.is_none() && *have != Row { held: None, ..r.clone() }) =>
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
            held: None,
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
                    held: (seq == 7).then_some(RowHeld {
                        packets: 5,
                        first_ns: 9,
                        last_ns: 21,
                        stats_first_ns: u64::MAX,
                    }),
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

    /// The catalog decoded once per process is the one on disk: loaded again unchanged, it
    /// is the same; rewritten (an atomic replace, as every writer does), the new one; gone,
    /// none; damaged, an error.
    #[test]
    fn a_catalog_is_written_before_the_index_directory_exists() {
        // A new store: the writer's first catalog comes before its first index.
        let store = tempfile::tempdir().unwrap();
        let dir = store.path().join("index");
        Catalog::default().write(&dir).unwrap();
        assert_eq!(Catalog::load(&dir).unwrap(), Some(Catalog::default()));
    }

    #[test]
    fn a_shared_catalog_is_decoded_once_and_follows_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Catalog::load_shared(dir.path()).unwrap().is_none());
        let row = |seq: u64| Row {
            seq,
            segment_len: 100,
            blocks: 1,
            first_ns: 1,
            last_ns: 2,
            keys: Keys::of(vec![seq]),
            held: None,
        };
        let mut c = Catalog::default();
        c.rows.insert(1, row(1));
        c.write(dir.path()).unwrap();
        let a = Catalog::load_shared(dir.path()).unwrap().unwrap();
        let b = Catalog::load_shared(dir.path()).unwrap().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(*a, c);
        c.rows.insert(2, row(2));
        c.write(dir.path()).unwrap();
        let d = Catalog::load_shared(dir.path()).unwrap().unwrap();
        assert_eq!(*d, c);
        assert_eq!(d.rows.len(), 2);
        let mut bytes = c.encode();
        bytes[20] ^= 1;
        fsx::write_atomic(&path(dir.path()), &bytes).unwrap();
        assert!(Catalog::load_shared(dir.path()).is_err());
        std::fs::remove_file(path(dir.path())).unwrap();
        assert!(Catalog::load_shared(dir.path()).unwrap().is_none());
    }

    /// A catalog written before version 2 (rows without what their segment holds) is still
    /// read: its rows rule segments out by keys once opened, and never skip an open.
    #[test]
    fn a_version_1_catalog_is_still_read_and_its_rows_skip_nothing() {
        let keys = Keys::of(vec![key_hash(IndexKey::Port(53))]);
        let Keys::Exact(words) = &keys else {
            unreachable!()
        };
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        for v in [4u64, 1000] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&2u32.to_le_bytes());
        for v in [10u64, 20] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&(words.len() as u32).to_le_bytes());
        for w in words {
            b.extend_from_slice(&w.to_le_bytes());
        }
        let crc = capsule_store::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let c = Catalog::decode(&b).unwrap();
        let r = &c.rows[&4];
        assert_eq!((r.segment_len, r.blocks, r.held), (1000, 2, None));
        assert!(!r.may_match(&"port 54".parse().unwrap()));
        assert!(!r.skips(4, None, &"port 54".parse().unwrap(), 100, 200));
        // written again, it is version 2
        assert_eq!(&c.encode()[8..12], &CATALOG_VERSION.to_le_bytes());
    }

    /// A row skips its segment only when it describes the listed file, the ledger records
    /// as many packets, and neither the window nor the filter can reach it; statistics
    /// before the window's end keep it.
    #[test]
    fn a_row_skips_its_segment_only_when_nothing_of_it_can_be_in_the_answer() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let held = RowHeld {
            packets: 10,
            first_ns: 1000,
            last_ns: 2000,
            stats_first_ns: u64::MAX,
        };
        let row = Row {
            seq: 3,
            segment_len: 500,
            blocks: 2,
            first_ns: 1000,
            last_ns: 2000,
            keys: Keys::of(vec![key_hash(IndexKey::Addr(a))]),
            held: Some(held),
        };
        let e = 3;
        let mut ledger = capsule_store::ledger::Ledger::default();
        let rec = capsule_store::ledger::Sealed {
            seq: 3,
            first_ns: 1000,
            last_ns: 2000,
            packets: 10,
            bytes: 500,
        };
        ledger.live.insert(3, rec);
        let all = Filter::default();
        let other: Filter = "host 10.0.0.2".parse().unwrap();
        let mine: Filter = "host 10.0.0.1".parse().unwrap();
        let l = Some(&ledger);
        // outside the window, any filter; inside, only a filter its keys rule out
        assert!(row.skips(e, l, &all, 3000, 4000));
        assert!(row.skips(e, l, &mine, 0, 1000));
        assert!(!row.skips(e, l, &all, 1500, 1501));
        assert!(row.skips(e, l, &other, 1500, 1501));
        assert!(!row.skips(e, l, &mine, 1500, 1501));
        // another segment's row, no ledger, a repair left it short, statistics before the
        // window's end: opened
        let mut four = ledger.clone();
        four.live
            .insert(4, capsule_store::ledger::Sealed { seq: 4, ..rec });
        assert!(!row.skips(4, Some(&four), &all, 3000, 4000));
        assert!(!row.skips(e, None, &all, 3000, 4000));
        let mut short = ledger.clone();
        short
            .live
            .insert(3, capsule_store::ledger::Sealed { packets: 11, ..rec });
        assert!(!row.skips(e, Some(&short), &all, 3000, 4000));
        let stats = Row {
            held: Some(RowHeld {
                stats_first_ns: 2500,
                ..held
            }),
            ..row.clone()
        };
        assert!(!stats.skips(e, l, &all, 3000, 4000));
        assert!(stats.skips(e, l, &all, 2100, 2500));
        // the ledger's span (which bounds a stretch lost to damage since) reaches the window
        let mut wider = ledger.clone();
        wider.live.insert(
            3,
            capsule_store::ledger::Sealed {
                last_ns: 3500,
                ..rec
            },
        );
        assert!(!row.skips(e, Some(&wider), &all, 3000, 4000));
    }
}
