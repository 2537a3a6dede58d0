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
//!         checked at open (recovery); the file rewritten (atomic replace) by the writer's
//!         catalog thread with a proof of the listing once the directory is still after a
//!         change (else at most every FLUSH_EVERY), and when the writer opens and closes
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
use std::sync::{Arc, Mutex, OnceLock};

use capsule_query::{Filter, IndexKey, Tri};
use capsule_store::ledger::{Expired, Ledger, Sealed};
use capsule_store::{fsx, Result, SegmentReader, SegmentState, Store, StoreError};

use crate::sideindex::SegmentIndex;

/// The catalog's file name in `STORE/index/`.
pub const CATALOG_FILE: &str = "catalog";
const MAGIC: &[u8; 8] = b"CAPSCATL";
/// Version of the catalog's bytes (docs/format.md). Versions 1 (rows without
/// [`Row::held`]) and 2 (one run of rows, decoded whole) are still read.
pub const CATALOG_VERSION: u32 = 3;
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

/// What the catalog's writer knew of the segment listing and the ledger when it wrote the
/// file (version 3): a reader that finds the segment directory and the ledger with these
/// identities still may take the catalog's rows and [`Proof::others`] for the listing, and
/// the ledger's records kept beside the rows for the ledger, without reading either
/// ([`CatalogView::proven`]; docs/decisions.md, issue 34 round 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub dir: fsx::FileId,
    pub ledger: fsx::FileId,
    /// The listed segments without a row (the open one, a sealed one without an index):
    /// number, state and the ledger's record of its seal.
    pub others: Vec<(u64, SegmentState, Option<Sealed>)>,
    /// The segments the ledger records as sealed whose files were gone.
    pub missing: Vec<Sealed>,
    /// The ledger's repairs (segment, packets held since).
    pub repaired: Vec<(u64, u64)>,
    pub expired: Option<Expired>,
}

/// Why [`Catalog::try_prove`] made no proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoProof {
    /// [`Store::listing_snapshot`] had none: the directory or the ledger changed while they
    /// were read, or the store cannot have one (no ledger, tiered segments, times of whole
    /// seconds).
    Unavailable,
    /// Rows of segments not listed as sealed (retention deleted them and the rows are not
    /// yet dropped, or their files were removed by hand): their numbers.
    RowsNotListed(Vec<u64>),
}

/// Rows per slice of a version-3 file as this build writes it: slice `k` holds the rows of
/// segments `k * SLICE_ROWS ..= k * SLICE_ROWS + SLICE_ROWS - 1`. The file says its own
/// (readers take any from 1).
pub const SLICE_ROWS: u64 = 1024;

/// The rows per slice a writer uses: [`SLICE_ROWS`], or `CAPSULE_CATALOG_SLICE_ROWS` (a test
/// hook: stores of a few hundred segments in several slices).
fn slice_rows() -> u64 {
    static N: OnceLock<u64> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("CAPSULE_CATALOG_SLICE_ROWS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&n| (1..=u64::from(u32::MAX)).contains(&n))
            .unwrap_or(SLICE_ROWS)
    })
}

/// One slice of rows as the header of a version-3 file sums it up: what a question needs
/// to leave all its segments unopened without decoding its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceHead {
    pub k: u64,
    offset: u64,
    len: u32,
    crc: u32,
    pub rows: u32,
    /// Blocks of its rows' segments.
    pub blocks: u64,
    pub first_seq: u64,
    /// First and last packet of the rows' segments that hold packets (their `held`).
    pub held: Option<(u64, u64)>,
    /// With a proof: every row says what its segment holds and the ledger records its seal
    /// with as many packets (what [`Row::skips`] asks of each row).
    pub skippable: bool,
    /// The union of every row's span of packets and the ledger's span of its seal.
    pub span: Option<(u64, u64)>,
    /// The earliest interface statistics record of its rows' segments.
    pub stats_first_ns: u64,
    /// The union of its rows' keys, when every row's are exact (`None`: unknown).
    pub keys: Option<Keys>,
}

impl SliceHead {
    /// Whether a question over `[from, to)` with `filter` leaves every segment of the slice
    /// unopened: what [`Row::skips`] says of each of its rows follows from it (the slice's
    /// span bounds each row's and each seal's, its statistics time is the earliest, and a
    /// filter its keys rule out is ruled out by every row's, a subset, in Kleene logic).
    /// Only valid with a proven catalog (the ledger records of the rows are current).
    pub fn skips(&self, filter: &Filter, from: u64, to: u64) -> bool {
        if !self.skippable || self.stats_first_ns < to {
            return false;
        }
        let reaches = self.span.is_some_and(|(a, z)| z >= from && a < to);
        if !reaches {
            return true;
        }
        !filter.is_all()
            && self
                .keys
                .as_ref()
                .is_some_and(|k| filter.matches_keys(&|key| k.may_have(key_hash(key))) == Tri::No)
    }
}

/// A little reader over bytes: every read bounds-checked, never a panic.
struct Bytes<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.at..self.at.checked_add(n).ok_or("length overflows")?)
            .ok_or_else(|| format!("truncated at byte {}", self.at))?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn done(&self) -> bool {
        self.at == self.b.len()
    }
}

fn put_keys(b: &mut Vec<u8>, keys: &Keys) {
    let (kind, probes, words) = match keys {
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

fn get_keys(r: &mut Bytes<'_>, seq: u64) -> std::result::Result<Keys, String> {
    let kind = r.u8()?;
    let probes = r.u8()?;
    let words = r.u32()? as usize;
    let raw = r.take(words.checked_mul(8).ok_or("word count overflows")?)?;
    let v: Vec<u64> = raw
        .chunks_exact(8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        .collect();
    match (kind, probes) {
        (0, 0) if v.windows(2).all(|w| w[0] < w[1]) => Ok(Keys::Exact(v)),
        (1, 1..=32) if !v.is_empty() => Ok(Keys::Bloom { probes, bits: v }),
        _ => Err(format!("segment {seq}: bad key set (kind {kind})")),
    }
}

fn put_row(b: &mut Vec<u8>, r: &Row) {
    b.extend_from_slice(&r.seq.to_le_bytes());
    b.extend_from_slice(&r.segment_len.to_le_bytes());
    b.extend_from_slice(&r.blocks.to_le_bytes());
    b.extend_from_slice(&r.first_ns.to_le_bytes());
    b.extend_from_slice(&r.last_ns.to_le_bytes());
    put_keys(b, &r.keys);
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

fn get_row(r: &mut Bytes<'_>, version: u32) -> std::result::Result<Row, String> {
    let seq = r.u64()?;
    let segment_len = r.u64()?;
    let blocks = r.u32()?;
    let first_ns = r.u64()?;
    let last_ns = r.u64()?;
    let keys = get_keys(r, seq)?;
    let held = match version {
        1 => None,
        _ => match r.u8()? {
            0 => None,
            1 => Some(RowHeld {
                packets: r.u64()?,
                first_ns: r.u64()?,
                last_ns: r.u64()?,
                stats_first_ns: r.u64()?,
            }),
            k => return Err(format!("segment {seq}: bad held flag {k}")),
        },
    };
    Ok(Row {
        seq,
        segment_len,
        blocks,
        first_ns,
        last_ns,
        keys,
        held,
    })
}

fn put_sealed(b: &mut Vec<u8>, s: Option<&Sealed>) {
    match s {
        None => b.push(0),
        Some(s) => {
            b.push(1);
            for v in [s.seq, s.first_ns, s.last_ns, s.packets, s.bytes] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

fn get_sealed(r: &mut Bytes<'_>) -> std::result::Result<Option<Sealed>, String> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(Sealed {
            seq: r.u64()?,
            first_ns: r.u64()?,
            last_ns: r.u64()?,
            packets: r.u64()?,
            bytes: r.u64()?,
        })),
        k => Err(format!("bad ledger record flag {k}")),
    }
}

fn put_span(b: &mut Vec<u8>, s: Option<(u64, u64)>) {
    match s {
        None => b.push(0),
        Some((a, z)) => {
            b.push(1);
            b.extend_from_slice(&a.to_le_bytes());
            b.extend_from_slice(&z.to_le_bytes());
        }
    }
}

fn put_id(b: &mut Vec<u8>, id: &fsx::FileId) {
    for v in [id.dev, id.ino, id.len] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for (s, ns) in [id.mtime, id.ctime] {
        b.extend_from_slice(&s.to_le_bytes());
        b.extend_from_slice(&ns.to_le_bytes());
    }
}

fn get_id(r: &mut Bytes<'_>) -> std::result::Result<fsx::FileId, String> {
    let (dev, ino, len) = (r.u64()?, r.u64()?, r.u64()?);
    let mtime = (r.u64()? as i64, r.u32()?);
    let ctime = (r.u64()? as i64, r.u32()?);
    Ok(fsx::FileId {
        dev,
        ino,
        len,
        mtime,
        ctime,
    })
}

fn put_proof(b: &mut Vec<u8>, p: &Proof) {
    put_id(b, &p.dir);
    put_id(b, &p.ledger);
    b.extend_from_slice(&(p.others.len() as u32).to_le_bytes());
    for (seq, state, rec) in &p.others {
        b.extend_from_slice(&seq.to_le_bytes());
        b.push(u8::from(*state == SegmentState::Open));
        put_sealed(b, rec.as_ref());
    }
    b.extend_from_slice(&(p.missing.len() as u32).to_le_bytes());
    for s in &p.missing {
        put_sealed(b, Some(s));
    }
    b.extend_from_slice(&(p.repaired.len() as u32).to_le_bytes());
    for (seq, packets) in &p.repaired {
        b.extend_from_slice(&seq.to_le_bytes());
        b.extend_from_slice(&packets.to_le_bytes());
    }
    match &p.expired {
        None => b.push(0),
        Some(e) => {
            b.push(1);
            for v in [e.segments, e.last_seq, e.first_ns, e.last_ns, e.packets] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

fn get_proof(r: &mut Bytes<'_>) -> std::result::Result<Proof, String> {
    let dir = get_id(r)?;
    let ledger = get_id(r)?;
    let mut others = Vec::new();
    for _ in 0..r.u32()? {
        let seq = r.u64()?;
        let state = match r.u8()? {
            0 => SegmentState::Sealed,
            1 => SegmentState::Open,
            k => return Err(format!("bad segment state {k}")),
        };
        others.push((seq, state, get_sealed(r)?));
    }
    let mut missing = Vec::new();
    for _ in 0..r.u32()? {
        missing.push(get_sealed(r)?.ok_or("a missing segment without its record")?);
    }
    let mut repaired = Vec::new();
    for _ in 0..r.u32()? {
        repaired.push((r.u64()?, r.u64()?));
    }
    let expired = match r.u8()? {
        0 => None,
        1 => Some(Expired {
            segments: r.u64()?,
            last_seq: r.u64()?,
            first_ns: r.u64()?,
            last_ns: r.u64()?,
            packets: r.u64()?,
        }),
        k => return Err(format!("bad expired flag {k}")),
    };
    Ok(Proof {
        dir,
        ledger,
        others,
        missing,
        repaired,
        expired,
    })
}

/// A slice's rows, and the ledger's records of their seals (with a proof).
#[derive(Debug, Default)]
pub struct SliceRows {
    pub rows: BTreeMap<u64, Row>,
    pub sealed: BTreeMap<u64, Sealed>,
}

fn decode_slice(body: &[u8], head: &SliceHead, per: u64) -> std::result::Result<SliceRows, String> {
    if capsule_store::crc::crc32c(body) != head.crc {
        return Err(format!("slice {}: crc32c mismatch", head.k));
    }
    let mut r = Bytes { b: body, at: 0 };
    let mut out = SliceRows::default();
    for _ in 0..head.rows {
        let row = get_row(&mut r, CATALOG_VERSION)?;
        if row.seq / per != head.k {
            return Err(format!("segment {} in slice {}", row.seq, head.k));
        }
        if let Some(s) = get_sealed(&mut r)? {
            out.sealed.insert(row.seq, s);
        }
        let seq = row.seq;
        if out.rows.insert(seq, row).is_some() {
            return Err(format!("segment {seq} listed twice"));
        }
    }
    if !r.done() {
        return Err(format!("slice {}: bytes after its last row", head.k));
    }
    Ok(out)
}

/// The header of a version-3 file (`b` from its start): the proof and the slices.
type Header = (Option<Proof>, Vec<SliceHead>, u64);

fn decode_header(b: &[u8]) -> std::result::Result<Header, String> {
    let mut r = Bytes { b, at: 8 };
    let _version = r.u32()?;
    let len = r.u32()? as usize;
    let end = 16usize.checked_add(len).ok_or("header length overflows")?;
    let crc_at = b
        .get(end..end + 4)
        .ok_or_else(|| format!("header of {len} bytes cut"))?;
    if capsule_store::crc::crc32c(&b[..end])
        != u32::from_le_bytes(crc_at.try_into().expect("4 bytes"))
    {
        return Err("header crc32c mismatch".into());
    }
    let mut r = Bytes {
        b: &b[..end],
        at: 16,
    };
    let per = u64::from(r.u32()?);
    if per == 0 {
        return Err("slices of 0 rows".into());
    }
    let proof = match r.u8()? {
        0 => None,
        1 => Some(get_proof(&mut r)?),
        k => return Err(format!("bad proof flag {k}")),
    };
    let mut slices: Vec<SliceHead> = Vec::new();
    for _ in 0..r.u32()? {
        let k = r.u64()?;
        let (offset, len, crc) = (r.u64()?, r.u32()?, r.u32()?);
        let (rows, blocks, first_seq) = (r.u32()?, r.u64()?, r.u64()?);
        let held = match r.u8()? {
            0 => None,
            _ => Some((r.u64()?, r.u64()?)),
        };
        let skippable = r.u8()? == 1;
        let span = match r.u8()? {
            0 => None,
            _ => Some((r.u64()?, r.u64()?)),
        };
        let stats_first_ns = r.u64()?;
        let keys = match r.u8()? {
            0 => None,
            _ => Some(get_keys(&mut r, first_seq)?),
        };
        if slices.last().is_some_and(|l| l.k >= k) {
            return Err(format!("slice {k} out of order"));
        }
        slices.push(SliceHead {
            k,
            offset,
            len,
            crc,
            rows,
            blocks,
            first_seq,
            held,
            skippable,
            span,
            stats_first_ns,
            keys,
        });
    }
    if !r.done() {
        return Err("bytes after the header's last slice".into());
    }
    Ok((proof, slices, per))
}

/// The encoded rows of slices, kept between writes by the writer's catalog thread so that a
/// write re-encodes only the slices that changed ([`Catalog::encode_cached`]).
#[derive(Debug, Default)]
pub struct SliceCache {
    per: u64,
    proven: bool,
    slices: BTreeMap<u64, CachedSlice>,
}

#[derive(Debug)]
struct CachedSlice {
    /// Its summary (offset 0).
    head: SliceHead,
    body: Vec<u8>,
    /// The ledger records its rows were encoded with.
    recs: Vec<Option<Sealed>>,
}

impl SliceCache {
    /// The row of segment `seq` was added, replaced or removed: its slice is encoded again.
    pub fn changed(&mut self, seq: u64) {
        if let Some(k) = seq.checked_div(self.per) {
            self.slices.remove(&k);
        }
    }
}

/// Slice `k`'s rows (each with its ledger record: with a proof, `proven`) and summary (offset
/// 0).
fn encode_slice(k: u64, slice: &[(&Row, Option<Sealed>)], proven: bool) -> (SliceHead, Vec<u8>) {
    let mut body = Vec::with_capacity(slice.len() * 64);
    let mut h = SliceHead {
        k,
        offset: 0,
        len: 0,
        crc: 0,
        rows: 0,
        blocks: 0,
        first_seq: slice.first().map_or(0, |(r, _)| r.seq),
        held: None,
        skippable: proven,
        span: None,
        stats_first_ns: u64::MAX,
        keys: None,
    };
    let mut union: Option<Vec<u64>> = Some(Vec::new());
    let widen = |s: &mut Option<(u64, u64)>, a: u64, z: u64| {
        *s = Some(s.map_or((a, z), |(x, y)| (x.min(a), y.max(z))));
    };
    for &(r, rec) in slice {
        put_row(&mut body, r);
        put_sealed(&mut body, rec.as_ref());
        h.rows += 1;
        h.blocks += u64::from(r.blocks);
        match (&r.held, rec) {
            (Some(held), Some(rec)) if rec.packets == held.packets => {
                h.stats_first_ns = h.stats_first_ns.min(held.stats_first_ns);
                if held.packets > 0 {
                    widen(&mut h.held, held.first_ns, held.last_ns);
                    widen(&mut h.span, held.first_ns, held.last_ns);
                }
                if rec.packets > 0 {
                    widen(&mut h.span, rec.first_ns, rec.last_ns);
                }
            }
            (held, _) => {
                h.skippable = false;
                if let Some(held) = held.filter(|h| h.packets > 0) {
                    widen(&mut h.held, held.first_ns, held.last_ns);
                }
            }
        }
        match (&r.keys, &mut union) {
            (Keys::Exact(v), Some(u)) => u.extend_from_slice(v),
            _ => union = None,
        }
    }
    h.keys = union.map(Keys::of);
    h.len = body.len() as u32;
    h.crc = capsule_store::crc::crc32c(&body);
    (h, body)
}

/// A whole catalog file: its rows, its proof, and the ledger records kept beside the rows.
pub type Decoded = (Catalog, Option<Proof>, BTreeMap<u64, Sealed>);

impl Catalog {
    /// The bytes of the file (docs/format.md "Catalog"), without a proof.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(None)
    }

    /// The bytes of the file, with `proof` of the listing and the ledger (`ledger`: the one
    /// the proof's identity is of) when given.
    pub fn encode_with(&self, proof: Option<(&Proof, &Ledger)>) -> Vec<u8> {
        self.encode_cached(proof, &mut SliceCache::default())
    }

    /// [`Catalog::encode_with`], taking from `cache` the encoded rows of every slice whose
    /// rows were not changed since (the cache is told, [`SliceCache::changed`]) and whose
    /// ledger records are the same, and keeping there the slices it encodes.
    pub fn encode_cached(
        &self,
        proof: Option<(&Proof, &Ledger)>,
        cache: &mut SliceCache,
    ) -> Vec<u8> {
        let mut bodies: Vec<u8> = Vec::with_capacity(self.rows.len() * 64);
        let mut heads = Vec::new();
        let per = slice_rows();
        if cache.per != per || cache.proven != proof.is_some() {
            *cache = SliceCache {
                per,
                proven: proof.is_some(),
                ..SliceCache::default()
            };
        }
        let mut kept = BTreeMap::new();
        let mut rows = self.rows.values().peekable();
        while let Some(first) = rows.peek() {
            let k = first.seq / per;
            let mut slice = Vec::new();
            while let Some(r) = rows.next_if(|r| r.seq / per == k) {
                slice.push((r, proof.and_then(|(_, l)| l.live.get(&r.seq)).copied()));
            }
            let recs: Vec<Option<Sealed>> = slice.iter().map(|(_, rec)| *rec).collect();
            let (mut h, body) = match cache.slices.remove(&k) {
                Some(c) if c.recs == recs && c.head.rows as usize == slice.len() => {
                    (c.head, c.body)
                }
                _ => encode_slice(k, &slice, proof.is_some()),
            };
            h.offset = bodies.len() as u64;
            bodies.extend_from_slice(&body);
            heads.push(h.clone());
            h.offset = 0;
            kept.insert(
                k,
                CachedSlice {
                    head: h,
                    body,
                    recs,
                },
            );
        }
        cache.slices = kept;
        let mut head = Vec::new();
        head.extend_from_slice(&(per as u32).to_le_bytes());
        match proof {
            None => head.push(0),
            Some((p, _)) => {
                head.push(1);
                put_proof(&mut head, p);
            }
        }
        head.extend_from_slice(&(heads.len() as u32).to_le_bytes());
        // Slice offsets are from the file's start: the header's length is known only once
        // it is encoded, and its size does not depend on the offsets' values.
        let encode_heads = |base: u64, out: &mut Vec<u8>| {
            for h in &heads {
                out.extend_from_slice(&h.k.to_le_bytes());
                out.extend_from_slice(&(h.offset + base).to_le_bytes());
                out.extend_from_slice(&h.len.to_le_bytes());
                out.extend_from_slice(&h.crc.to_le_bytes());
                out.extend_from_slice(&h.rows.to_le_bytes());
                out.extend_from_slice(&h.blocks.to_le_bytes());
                out.extend_from_slice(&h.first_seq.to_le_bytes());
                put_span(out, h.held);
                out.push(u8::from(h.skippable));
                put_span(out, h.span);
                out.extend_from_slice(&h.stats_first_ns.to_le_bytes());
                match &h.keys {
                    None => out.push(0),
                    Some(k) => {
                        out.push(1);
                        put_keys(out, k);
                    }
                }
            }
        };
        let mut probe = head.clone();
        encode_heads(0, &mut probe);
        let base = (16 + probe.len() + 4) as u64;
        encode_heads(base, &mut head);
        let mut b = Vec::with_capacity(base as usize + bodies.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&CATALOG_VERSION.to_le_bytes());
        b.extend_from_slice(&(head.len() as u32).to_le_bytes());
        b.extend_from_slice(&head);
        let crc = capsule_store::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&bodies);
        b
    }

    /// Reads the bytes back (every version this build reads); what is wrong otherwise.
    pub fn decode(b: &[u8]) -> std::result::Result<Catalog, String> {
        Catalog::decode_proven(b).map(|(c, _)| c)
    }

    /// [`Catalog::decode`], and the proof a version-3 file carries.
    pub fn decode_proven(b: &[u8]) -> std::result::Result<(Catalog, Option<Proof>), String> {
        Catalog::decode_all(b).map(|(c, p, _)| (c, p))
    }

    /// [`Catalog::decode_proven`], and the ledger records kept beside the rows.
    pub fn decode_all(b: &[u8]) -> std::result::Result<Decoded, String> {
        if b.len() < 20 || &b[..8] != MAGIC {
            return Err("not a catalog (bad magic or shorter than its header)".into());
        }
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if version == CATALOG_VERSION {
            let (proof, heads, per) = decode_header(b)?;
            let mut rows = BTreeMap::new();
            let mut sealed = BTreeMap::new();
            for h in &heads {
                let body = usize::try_from(h.offset)
                    .ok()
                    .and_then(|o| b.get(o..o.checked_add(h.len as usize)?))
                    .ok_or_else(|| format!("slice {} cut", h.k))?;
                let s = decode_slice(body, h, per)?;
                sealed.extend(s.sealed);
                for (seq, r) in s.rows {
                    if rows.insert(seq, r).is_some() {
                        return Err(format!("segment {seq} listed twice"));
                    }
                }
            }
            return Ok((Catalog { rows }, proof, sealed));
        }
        let (body, tail) = b.split_at(b.len() - 4);
        let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
        if stored != capsule_store::crc::crc32c(body) {
            return Err("crc32c mismatch".into());
        }
        if version != 1 && version != 2 {
            return Err(format!(
                "version {version} is not supported (this build reads 1 to {CATALOG_VERSION})"
            ));
        }
        let mut r = Bytes { b: body, at: 12 };
        let n = r.u32()?;
        let mut rows = BTreeMap::new();
        for _ in 0..n {
            let row = get_row(&mut r, version)?;
            let seq = row.seq;
            if rows.insert(seq, row).is_some() {
                return Err(format!("segment {seq} listed twice"));
            }
        }
        if !r.done() {
            return Err(format!("{} bytes after the last row", body.len() - r.at));
        }
        Ok((Catalog { rows }, None, BTreeMap::new()))
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
            .map_err(|detail| damaged(p, detail))
    }

    /// The catalog of index directory `dir` as a question reads it ([`CatalogView`]):
    /// opened once per process while the file stays the same (its identity: device,
    /// inode, length, modification and change times, from the open file), its header
    /// decoded, its slices of rows each decoded when first asked for. Every rewrite is an
    /// atomic replace (a new file), so a changed catalog is never mistaken for the one
    /// open. `Ok(None)`: there is none; a damaged header is a
    /// [`StoreError::DerivedDamaged`].
    pub fn load_shared(dir: &Path) -> Result<Option<Arc<CatalogView>>> {
        use std::io::Read;
        use std::os::unix::fs::FileExt;
        static LAST: Mutex<Option<(fsx::FileId, Arc<CatalogView>)>> = Mutex::new(None);
        let p = path(dir);
        let mut f = match fsx::open(&p, fsx::Open::Read, "open catalog") {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let m = f
            .metadata()
            .map_err(|e| StoreError::io("stat catalog", &p, e))?;
        let id = fsx::FileId::of(&m);
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((have, c)) = last.as_ref() {
            if *have == id {
                return Ok(Some(Arc::clone(c)));
            }
        }
        let io = |e| StoreError::io("read catalog", &p, e);
        let mut start = vec![0u8; 16.min(m.len() as usize)];
        f.read_exact_at(&mut start, 0).map_err(io)?;
        let view = if start.len() == 16
            && &start[..8] == MAGIC
            && start[8..12] == CATALOG_VERSION.to_le_bytes()
        {
            let len = u32::from_le_bytes(start[12..16].try_into().expect("4 bytes")) as u64;
            let want = (16 + len + 4).min(m.len());
            let mut head = vec![0u8; want as usize];
            f.read_exact_at(&mut head, 0).map_err(io)?;
            let (proof, slices, per) = decode_header(&head).map_err(|d| damaged(p.clone(), d))?;
            let decoded = slices.iter().map(|_| OnceLock::new()).collect();
            CatalogView {
                file: Some(f),
                path: p.clone(),
                per,
                proof,
                slices,
                decoded,
                whole: None,
            }
        } else {
            let mut bytes = Vec::with_capacity(m.len() as usize);
            f.read_to_end(&mut bytes).map_err(io)?;
            let c = Catalog::decode(&bytes).map_err(|d| damaged(p.clone(), d))?;
            CatalogView {
                file: None,
                path: p.clone(),
                per: SLICE_ROWS,
                proof: None,
                slices: Vec::new(),
                decoded: Vec::new(),
                whole: Some(c),
            }
        };
        let c = Arc::new(view);
        *last = Some((id, Arc::clone(&c)));
        Ok(Some(c))
    }

    /// Writes the catalog to the index directory of `store` with a proof of the segment
    /// listing and the ledger as they are now ([`Catalog::prove`]) when one can be had;
    /// without one otherwise. What the writer does when it opens and closes and what
    /// `capsule reindex` does: a question on a store at rest then reads neither the segment
    /// directory nor the ledger (issue 34).
    pub fn write_proven(&self, store: &Store) -> Result<()> {
        let proof = self.prove(store);
        self.write_given(store, proof.as_ref()).map(|_| ())
    }

    /// A proof of the segment listing and the ledger as they are now for these rows
    /// ([`Store::listing_snapshot`]), with the ledger it is of; `None` when none can be had
    /// (see there) or a row is of a segment not listed as sealed. Lists the directory and
    /// reads the ledger: the writer's catalog thread calls it, never the writer's own.
    pub fn prove(&self, store: &Store) -> Option<(Proof, Ledger)> {
        self.try_prove(store).ok()
    }

    /// [`Catalog::prove`], saying why there is no proof.
    pub fn try_prove(&self, store: &Store) -> std::result::Result<(Proof, Ledger), NoProof> {
        let snap = match store.listing_snapshot() {
            Ok(Some(s)) => s,
            Ok(None) => return Err(NoProof::Unavailable),
            Err(e) => {
                tracing::debug!("no listing proof: {}", capsule_store::error::chain(&e));
                return Err(NoProof::Unavailable);
            }
        };
        let sealed: std::collections::BTreeSet<u64> = snap
            .listed
            .iter()
            .filter(|(_, st)| *st == SegmentState::Sealed)
            .map(|(seq, _)| *seq)
            .collect();
        let unlisted: Vec<u64> = self
            .rows
            .keys()
            .filter(|seq| !sealed.contains(seq))
            .copied()
            .collect();
        if !unlisted.is_empty() {
            return Err(NoProof::RowsNotListed(unlisted));
        }
        let others = snap
            .listed
            .iter()
            .filter(|(seq, st)| *st == SegmentState::Open || !self.rows.contains_key(seq))
            .map(|&(seq, st)| (seq, st, snap.ledger.live.get(&seq).copied()))
            .collect();
        let proof = Proof {
            dir: snap.dir,
            ledger: snap.ledger_id,
            others,
            missing: snap.missing.iter().map(|m| m.sealed).collect(),
            repaired: snap.ledger.repaired.iter().map(|(a, b)| (*a, *b)).collect(),
            expired: snap.ledger.expired,
        };
        Ok((proof, snap.ledger))
    }

    /// Writes the catalog to the index directory of `store`, with `proof` (from
    /// [`Catalog::prove`] over these rows) when given; the file's length.
    pub fn write_given(&self, store: &Store, proof: Option<&(Proof, Ledger)>) -> Result<usize> {
        self.write_cached(store, proof, &mut SliceCache::default())
    }

    /// [`Catalog::write_given`], encoding through `cache` ([`Catalog::encode_cached`]).
    pub fn write_cached(
        &self,
        store: &Store,
        proof: Option<&(Proof, Ledger)>,
        cache: &mut SliceCache,
    ) -> Result<usize> {
        let dir = store.index_dir();
        fsx::create_dir(&dir)?;
        let bytes = self.encode_cached(proof.map(|(p, l)| (p, l)), cache);
        fsx::write_atomic(&path(&dir), &bytes)?;
        Ok(bytes.len())
    }
}

fn damaged(path: PathBuf, detail: String) -> StoreError {
    StoreError::DerivedDamaged {
        path,
        problem: capsule_store::format::DecodeError::Invalid {
            what: "catalog",
            detail,
        },
    }
}

/// The catalog as a question reads it ([`Catalog::load_shared`]): a version-3 file's
/// header (the proof and every slice's summary) decoded, its slices of rows decoded when
/// first asked for; an older file decoded whole.
#[derive(Debug)]
pub struct CatalogView {
    file: Option<std::fs::File>,
    path: PathBuf,
    /// Rows per slice.
    per: u64,
    /// The proof of the listing and the ledger the file was written with, if any.
    pub proof: Option<Proof>,
    /// The slices' summaries, by slice number (empty for an older file).
    pub slices: Vec<SliceHead>,
    decoded: Vec<OnceLock<Option<SliceRows>>>,
    whole: Option<Catalog>,
}

impl CatalogView {
    /// The rows of slice `i` (of [`CatalogView::slices`]), decoded now if not yet: `None`
    /// when they do not decode (damage: those segments are opened and planned from their
    /// own indexes, as without a catalog; logged once).
    pub fn slice(&self, i: usize) -> Option<&SliceRows> {
        let (h, cell) = (self.slices.get(i)?, self.decoded.get(i)?);
        cell.get_or_init(|| {
            use std::os::unix::fs::FileExt;
            let f = self.file.as_ref()?;
            let mut body = vec![0u8; h.len as usize];
            let got = f
                .read_exact_at(&mut body, h.offset)
                .map_err(|e| e.to_string())
                .and_then(|()| decode_slice(&body, h, self.per));
            match got {
                Ok(rows) => Some(rows),
                Err(e) => {
                    tracing::warn!(
                        "{}: slice {} does not decode ({e}): its segments are planned from \
                         their own indexes",
                        self.path.display(),
                        h.k
                    );
                    None
                }
            }
        })
        .as_ref()
    }

    /// The row of segment `seq`, if any (decoding its slice).
    pub fn row(&self, seq: u64) -> Option<&Row> {
        if let Some(c) = &self.whole {
            return c.rows.get(&seq);
        }
        let k = seq / self.per;
        let i = self.slices.binary_search_by_key(&k, |h| h.k).ok()?;
        self.slice(i)?.rows.get(&seq)
    }

    /// The row describing `seg` as it is now, if any.
    pub fn row_for(&self, seg: &SegmentReader) -> Option<&Row> {
        self.row(seg.seq()).filter(|r| r.describes(seg))
    }

    /// The proof, when the segment directory and the ledger are still as it says (two
    /// `stat`s): the rows and the proof's other segments are then the directory's listing
    /// of segments, and the records beside the rows with the proof's lists are the ledger.
    pub fn proven(&self, store: &Store) -> Option<&Proof> {
        self.proof
            .as_ref()
            .filter(|p| store.snapshot_current(&p.dir, &p.ledger))
    }
}
impl Catalog {
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
    c.write_proven(store)?;
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
    let p = path(&store.index_dir());
    let (c, proof, sealed) = match fsx::read(&p, "read catalog") {
        Ok(b) => match Catalog::decode_all(&b) {
            Ok(all) => all,
            Err(detail) => return Some(capsule_store::error::chain(&damaged(p, detail))),
        },
        Err(e) if e.is_not_found() => return None,
        Err(e) => return Some(capsule_store::error::chain(&e)),
    };
    let fresh = refreshed(store, segments, None);
    let mut problems = Vec::new();
    // A proof still current (the directory and the ledger as it says) is what questions
    // take for the listing and the ledger: it must be theirs.
    if let Some(p) = proof
        .as_ref()
        .filter(|p| store.snapshot_current(&p.dir, &p.ledger))
    {
        if let Some(why) = proof_differs(store, &c, p, &sealed) {
            problems.push(format!("its proof of the listing does not hold: {why}"));
        }
    }
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

/// What differs between proof `p` (with rows `c` and their ledger records `sealed`) and
/// the segment listing and the ledger as they are; `None`: nothing.
fn proof_differs(
    store: &Store,
    c: &Catalog,
    p: &Proof,
    sealed: &BTreeMap<u64, Sealed>,
) -> Option<String> {
    let listed = match store.list_unsized() {
        Ok(l) => l,
        Err(e) => return Some(capsule_store::error::chain(&e)),
    };
    let ledger = match capsule_store::ledger::read(&store.segments_dir()) {
        Ok(Some(l)) => l,
        Ok(None) => return Some("the store has no ledger".into()),
        Err(e) => return Some(capsule_store::error::chain(&e)),
    };
    let mut said: Vec<(u64, SegmentState)> = c
        .rows
        .keys()
        .map(|&s| (s, SegmentState::Sealed))
        .chain(p.others.iter().map(|&(s, st, _)| (s, st)))
        .collect();
    said.sort_unstable();
    let have: Vec<(u64, SegmentState)> = listed.iter().map(|&(s, st, _)| (s, st)).collect();
    if said != have {
        return Some(format!(
            "it lists {} segments, the directory {}",
            said.len(),
            have.len()
        ));
    }
    let rec = |seq: u64| ledger.live.get(&seq);
    if let Some(seq) = c.rows.keys().find(|&&s| sealed.get(&s) != rec(s)) {
        return Some(format!("segment {seq}: its ledger record differs"));
    }
    if let Some((seq, ..)) = p.others.iter().find(|(s, _, r)| r.as_ref() != rec(*s)) {
        return Some(format!("segment {seq}: its ledger record differs"));
    }
    let missing: Vec<Sealed> =
        capsule_store::ledger::missing(&store.segments_dir(), &ledger, listed.iter().map(|e| e.0))
            .into_iter()
            .map(|m| m.sealed)
            .collect();
    let repaired: Vec<(u64, u64)> = ledger.repaired.iter().map(|(a, b)| (*a, *b)).collect();
    (missing != p.missing || repaired != p.repaired || ledger.expired != p.expired)
        .then(|| "the ledger's missing, repaired or expired segments differ".into())
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
        assert_eq!(a.row(1), c.rows.get(&1));
        assert_eq!(a.row(2), None);
        c.rows.insert(2, row(2));
        c.write(dir.path()).unwrap();
        let d = Catalog::load_shared(dir.path()).unwrap().unwrap();
        assert_eq!(d.row(1), c.rows.get(&1));
        assert_eq!(d.row(2), c.rows.get(&2));
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

    fn v3_row(seq: u64, keys: Keys, held: Option<RowHeld>) -> Row {
        Row {
            seq,
            segment_len: 100 + seq,
            blocks: 2,
            first_ns: seq * 10,
            last_ns: seq * 10 + 5,
            keys,
            held,
        }
    }

    fn held(seq: u64) -> RowHeld {
        RowHeld {
            packets: 3,
            first_ns: seq * 10,
            last_ns: seq * 10 + 5,
            stats_first_ns: u64::MAX,
        }
    }

    fn sealed(seq: u64, packets: u64) -> Sealed {
        Sealed {
            seq,
            first_ns: seq * 10,
            last_ns: seq * 10 + 5,
            packets,
            bytes: 100 + seq,
        }
    }

    /// Version 3: slices of rows, each with its summary in the header and its own CRC,
    /// written with a proof of the listing and the ledger; read back whole and slice by
    /// slice; a damaged slice is one slice lost, not the catalog.
    #[test]
    fn a_version_3_catalog_reads_back_whole_and_by_slice() {
        let mut c = Catalog::default();
        let mut ledger = Ledger::default();
        for seq in 1..=3000u64 {
            let keys = Keys::of(vec![key_hash(IndexKey::Port((seq % 7) as u16))]);
            c.rows.insert(seq, v3_row(seq, keys, Some(held(seq))));
            // segment 1500 was repaired short: its slice cannot be skipped whole
            ledger
                .live
                .insert(seq, sealed(seq, if seq == 1500 { 4 } else { 3 }));
        }
        let proof = Proof {
            dir: fsx::FileId {
                dev: 1,
                ino: 2,
                len: 3,
                mtime: (4, 5),
                ctime: (6, 7),
            },
            ledger: fsx::FileId {
                dev: 1,
                ino: 9,
                len: 10,
                mtime: (11, 12),
                ctime: (13, 14),
            },
            others: vec![(3001, SegmentState::Open, None)],
            missing: vec![sealed(0, 3)],
            repaired: vec![(1500, 3)],
            expired: None,
        };
        let b = c.encode_with(Some((&proof, &ledger)));
        let (back, p) = Catalog::decode_proven(&b).unwrap();
        assert_eq!(back, c);
        assert_eq!(p.as_ref(), Some(&proof));
        assert_eq!(Catalog::decode_proven(&c.encode()).unwrap().1, None);

        let dir = tempfile::tempdir().unwrap();
        fsx::write_atomic(&path(dir.path()), &b).unwrap();
        let v = Catalog::load_shared(dir.path()).unwrap().unwrap();
        assert_eq!(v.slices.len(), 3);
        let h = &v.slices[1];
        assert_eq!((h.k, h.rows, h.first_seq, h.blocks), (1, 1024, 1024, 2048));
        assert_eq!(h.held, Some((10240, 20475)));
        assert!(v.slices[0].skippable && !h.skippable && v.slices[2].skippable);
        assert_eq!(v.row(1500), c.rows.get(&1500));
        assert_eq!(v.slice(1).unwrap().sealed[&1500].packets, 4);
        // a slice's summary rules out only what each of its rows would
        let f: Filter = "port 9".parse().unwrap();
        assert!(v.slices[0].skips(&f, 0, u64::MAX));
        assert!(!v.slices[0].skips(&"port 3".parse().unwrap(), 0, u64::MAX));
        assert!(v.slices[2].skips(&Filter::default(), 0, 20480));
        assert!(!v.slices[2].skips(&Filter::default(), 0, 20481));
        for (i, h) in v.slices.iter().enumerate() {
            for (from, to, f) in [(0, u64::MAX, "port 9"), (5000, 5001, ""), (0, 1, "")] {
                let f: Filter = f.parse().unwrap();
                if h.skips(&f, from, to) {
                    let rows = v.slice(i).unwrap();
                    let l = Ledger {
                        live: rows.sealed.clone(),
                        ..Ledger::default()
                    };
                    assert!(rows
                        .rows
                        .iter()
                        .all(|(s, r)| r.skips(*s, Some(&l), &f, from, to)));
                }
            }
        }

        // a damaged slice: its rows are lost, the others still read
        let mut bad = b.clone();
        let at = v.slices[1].offset as usize + 10;
        bad[at] ^= 1;
        fsx::write_atomic(&path(dir.path()), &bad).unwrap();
        let v = Catalog::load_shared(dir.path()).unwrap().unwrap();
        assert!(v.slice(1).is_none() && v.row(1500).is_none());
        assert_eq!(v.row(2500), c.rows.get(&2500));
        assert!(Catalog::decode(&bad).unwrap_err().contains("crc32c"));
        for cut in [16, 40, b.len() / 2, b.len() - 1] {
            assert!(Catalog::decode(&b[..cut]).is_err());
        }
    }

    /// `verify`'s check of a current proof: the one `write_proven` made holds; one whose
    /// listing or ledger records differ from the directory's and the ledger's does not.
    #[test]
    fn a_current_proof_is_checked_against_the_listing_and_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create_or_open(dir.path()).unwrap();
        let segs = store.segments_dir();
        let mut c = Catalog::default();
        let mut lines = String::new();
        for seq in 1..=3u64 {
            std::fs::write(segs.join(capsule_store::segment::sealed_name(seq)), b"x").unwrap();
            let s = sealed(seq, 3);
            lines += &format!(
                "sealed {} {} {} {} {}\n",
                s.seq, s.first_ns, s.last_ns, s.packets, s.bytes
            );
            if seq < 3 {
                c.rows
                    .insert(seq, v3_row(seq, Keys::of(vec![seq]), Some(held(seq))));
            }
        }
        std::fs::write(segs.join("ledger"), lines).unwrap();
        c.write_proven(&store).unwrap();
        let b = std::fs::read(path(&store.index_dir())).unwrap();
        let (back, proof, recs) = Catalog::decode_all(&b).unwrap();
        let p = proof.expect("a proof");
        assert!(store.snapshot_current(&p.dir, &p.ledger));
        assert_eq!(
            p.others,
            vec![(3, SegmentState::Sealed, Some(sealed(3, 3)))]
        );
        assert_eq!(proof_differs(&store, &back, &p, &recs), None);
        let mut wrong = p.clone();
        wrong.others.clear();
        assert!(proof_differs(&store, &back, &wrong, &recs).is_some());
        let mut wrong_recs = recs.clone();
        wrong_recs.insert(1, sealed(1, 4));
        assert!(proof_differs(&store, &back, &p, &wrong_recs).is_some());
        // a row of a segment not listed: no proof is written
        c.rows
            .insert(9, v3_row(9, Keys::of(vec![9]), Some(held(9))));
        c.write_proven(&store).unwrap();
        let b = std::fs::read(path(&store.index_dir())).unwrap();
        assert!(Catalog::decode_all(&b).unwrap().1.is_none());
    }

    /// A catalog of version 2 (one run of rows with what each holds, one CRC) is still read,
    /// whole and through a view.
    /// The writer's catalog thread encodes through a cache of slices: after rows were
    /// added, replaced and removed (the cache told) and a ledger record changed (found by
    /// comparing), and with and without a proof, the bytes are those of a fresh encoding.
    #[test]
    fn a_cached_encoding_is_the_fresh_one() {
        let mut c = Catalog::default();
        let mut ledger = Ledger::default();
        for seq in 1..=3000u64 {
            let keys = Keys::of(vec![key_hash(IndexKey::Port((seq % 7) as u16))]);
            c.rows.insert(seq, v3_row(seq, keys, Some(held(seq))));
            ledger.live.insert(seq, sealed(seq, 3));
        }
        let id = fsx::FileId {
            dev: 1,
            ino: 2,
            len: 3,
            mtime: (4, 5),
            ctime: (6, 7),
        };
        let proof = Proof {
            dir: id,
            ledger: id,
            others: vec![],
            missing: vec![],
            repaired: vec![],
            expired: None,
        };
        let mut cache = SliceCache::default();
        let fresh = |c: &Catalog, l: &Ledger| c.encode_with(Some((&proof, l)));
        assert_eq!(
            c.encode_cached(Some((&proof, &ledger)), &mut cache),
            fresh(&c, &ledger)
        );
        // a row replaced (slice 1), one removed (slice 2), one added (slice 3)
        let keys = Keys::of(vec![key_hash(IndexKey::Port(80))]);
        for (seq, row) in [
            (1100, Some(v3_row(1100, keys.clone(), None))),
            (2500, None),
            (3100, Some(v3_row(3100, keys, Some(held(3100))))),
        ] {
            cache.changed(seq);
            match row {
                Some(r) => c.rows.insert(seq, r),
                None => c.rows.remove(&seq),
            };
        }
        // a repair recorded again with more packets (slice 0): not told, found by comparing
        ledger.live.insert(500, sealed(500, 4));
        let b = c.encode_cached(Some((&proof, &ledger)), &mut cache);
        assert_eq!(b, fresh(&c, &ledger));
        assert_ne!(
            b,
            c.encode_with(Some((
                &proof,
                &Ledger {
                    live: ledger
                        .live
                        .iter()
                        .filter(|(s, _)| **s != 500)
                        .map(|(a, b)| (*a, *b))
                        .collect(),
                    ..Ledger::default()
                }
            )))
        );
        let v = Catalog::decode_all(&b).unwrap();
        assert_eq!(v.0, c);
        assert_eq!(v.2[&500].packets, 4);
        // without a proof, then with one again
        assert_eq!(c.encode_cached(None, &mut cache), c.encode());
        assert_eq!(
            c.encode_cached(Some((&proof, &ledger)), &mut cache),
            fresh(&c, &ledger)
        );
    }

    #[test]
    fn a_version_2_catalog_is_still_read() {
        let mut c = Catalog::default();
        for seq in [4u64, 2000] {
            c.rows
                .insert(seq, v3_row(seq, Keys::of(vec![seq]), Some(held(seq))));
        }
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&(c.rows.len() as u32).to_le_bytes());
        for r in c.rows.values() {
            put_row(&mut b, r);
        }
        let crc = capsule_store::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(Catalog::decode(&b).unwrap(), c);
        let dir = tempfile::tempdir().unwrap();
        fsx::write_atomic(&path(dir.path()), &b).unwrap();
        let v = Catalog::load_shared(dir.path()).unwrap().unwrap();
        assert!(v.proof.is_none() && v.slices.is_empty());
        assert_eq!(v.row(2000), c.rows.get(&2000));
        assert_eq!(v.row(5), None);
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
