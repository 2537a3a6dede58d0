//! Per-slice rollups of the side index (issue 34, Build item 2): the flows of
//! [`SLICE`] consecutive sealed segments merged once, so an answer over many segments
//! (`top`, `flows`, the other analytics: [`crate::flows::list_index_only`]) reads one file
//! per slice instead of one index per segment.
//!
//! ```text
//! STORE/index/rollup-<k>.slice     segments k*SLICE .. (k+1)*SLICE-1 that have a current index
//!   header: magic, version, members (seq, segment length, span of their flows)
//!   the window's DNS answers of the members' flows (address -> names, in order)
//!   the members' flows merged as the listing merges them, as a side index body (file.rs)
//!   CRC-32C of all of the above
//! ```
//!
//! Exactness: a slice is used for a question only when its filter selects every flow (no
//! filter) and every member's flows lie inside the window; then every member's record is
//! taken whole ([`crate::flows`] `windowed` is the identity), and the listing's merge is a
//! fold of associative steps (sums, minima, maxima, "first known wins", capped lists in
//! order, buckets summed by second), so merging a slice's members first and the slice
//! into the listing afterwards gives the listing merging every member in turn. Every member
//! must still be listed as sealed with the length the slice recorded, and the slice's
//! members must be the listing's segments between the first and last of them (no segment
//! among them left out): otherwise, or when the file does not decode, the members' own
//! indexes are read, as without rollups. A slice is written when its last segment is sealed,
//! its member's length patched when one is compacted, removed when one is deleted, and
//! written again at recovery and by `capsule reindex` when missing or not current.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use capsule_store::{fsx, Result};

use crate::names::DnsNames;
use crate::sideindex::{index_name, Bucket, FlowCounts, FlowRecord, SegmentIndex, TcpState};

/// Segments per slice: slice `k` holds segments `k * SLICE ..= k * SLICE + SLICE - 1`.
pub const SLICE: u64 = 1024;

const MAGIC: [u8; 8] = *b"CAPSROLL";
/// Version 2: the names of an address are the first four in name order, not the first four
/// seen (`crate::names::DnsNames`); a slice of version 1 is not current (its file is made
/// again; until then the answers read its members' indexes).
const VERSION: u16 = 2;

/// Why a slice of an earlier version is not read: not damage (see [`verify`]).
const OLDER: &str = "made by an earlier release: not current, made again at the writer's open";

/// The slice a segment belongs to.
pub fn slice_of(seq: u64) -> u64 {
    seq / SLICE
}

/// The file of slice `k` in index directory `dir`.
pub fn path(dir: &Path, k: u64) -> PathBuf {
    dir.join(format!("rollup-{k:09}.slice"))
}

/// Slice `k`'s number, from its file name.
pub fn parse_name(name: &str) -> Option<u64> {
    name.strip_prefix("rollup-")?
        .strip_suffix(".slice")?
        .parse()
        .ok()
}

/// One segment a slice holds, as it was when the slice was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub seq: u64,
    /// The sealed segment file's length its index described.
    pub segment_len: u64,
    /// The first and last packet time of the flows its index holds (none: no flows).
    pub held: Option<(u64, u64)>,
}

/// The merged flows of a slice's segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub k: u64,
    /// Ascending by segment number.
    pub members: Vec<Member>,
    /// The DNS answers of the members' flows, in the order a listing adds them.
    pub dns: DnsNames,
    /// The members' flows with packets, merged, in first-seen order.
    pub flows: Vec<FlowCounts>,
}

impl Slice {
    /// The first and last packet time of the members' flows.
    pub fn held(&self) -> Option<(u64, u64)> {
        self.members
            .iter()
            .filter_map(|m| m.held)
            .reduce(|(a, b), (x, y)| (a.min(x), b.max(y)))
    }

    /// Merges the indexes of `members` (ascending; each index as read from its file),
    /// as the listing does for a question with no filter whose window holds them all.
    /// `None` when an index keeps no names or no encapsulations (written before index
    /// version 7): a slice keeps both for every flow, so it would claim what it does not
    /// know.
    pub fn merge(k: u64, indexes: Vec<crate::sideindex::CountsIndex>) -> Option<Slice> {
        let mut members = Vec::with_capacity(indexes.len());
        let mut dns = DnsNames::default();
        let mut merged = crate::flows::Merger::default();
        for i in indexes {
            if !i.named || !i.tunnels || slice_of(i.seq) != k {
                return None;
            }
            let held = i
                .flows
                .iter()
                .map(|f| (f.totals.first_ns, f.totals.last_ns))
                .reduce(|(a, b), (x, y)| (a.min(x), b.max(y)));
            members.push(Member {
                seq: i.seq,
                segment_len: i.segment_len,
                held,
            });
            for f in &i.flows {
                if let Some(n) = f.totals.names.as_deref() {
                    dns.add_flow(n);
                }
            }
            for f in i.flows {
                // What the listing's selection drops with no filter: records without packets.
                if f.totals.total_packets() > 0 {
                    merged.add(f);
                }
            }
        }
        if members.is_empty() || members.windows(2).any(|w| w[0].seq >= w[1].seq) {
            return None;
        }
        Some(Slice {
            k,
            members,
            dns,
            flows: merged.into_flows(),
        })
    }

    /// Makes slice `k` from the current indexes in `dir` of the segments `listed` (seq,
    /// length) of the slice: `None` when one of them has no current index (missing, stale,
    /// damaged, or of a version before 7) or there are none.
    pub fn make(dir: &Path, k: u64, listed: &[(u64, u64)]) -> Option<Slice> {
        let mut indexes = Vec::with_capacity(listed.len());
        for &(seq, len) in listed.iter().filter(|(s, _)| slice_of(*s) == k) {
            let bytes = fsx::read(&dir.join(index_name(seq)), "read index").ok()?;
            let i = SegmentIndex::decode_counts(&bytes, None).ok()?;
            if i.seq != seq || i.segment_len != len {
                return None;
            }
            indexes.push(i);
        }
        Slice::merge(k, indexes)
    }

    /// Makes slice `k` from whatever current-version indexes `dir` holds of its segments
    /// (each member's length as its index records it; readers check it against the
    /// listing). What the writer does when it seals a slice's last segment.
    pub fn make_from_dir(dir: &Path, k: u64) -> Option<Slice> {
        let mut indexes = Vec::new();
        for seq in k * SLICE..k * SLICE + SLICE {
            let bytes = match fsx::read(&dir.join(index_name(seq)), "read index") {
                Ok(b) => b,
                Err(e) if e.is_not_found() => continue,
                Err(_) => return None,
            };
            let i = SegmentIndex::decode_counts(&bytes, None).ok()?;
            if i.seq != seq {
                return None;
            }
            indexes.push(i);
        }
        Slice::merge(k, indexes)
    }

    /// Whether the slice stands for the listed segments `entries` (ascending) between its
    /// first and last member: each member listed sealed with its length (or listed without
    /// one, [`capsule_store::SegmentEntry::UNSIZED`]: the only rewrite of a sealed file
    /// under its name that keeps its index is a compaction, which keeps its flows; a repair
    /// is the caller's to rule out, from the ledger), nothing else listed among them. The
    /// members' position in `entries`, when it does.
    pub fn stands_for(&self, entries: &[capsule_store::SegmentEntry]) -> Option<usize> {
        let first = self.members.first()?.seq;
        let at = entries.partition_point(|e| e.seq < first);
        let run = entries.get(at..at + self.members.len())?;
        let same = run.iter().zip(&self.members).all(|(e, m)| {
            e.seq == m.seq
                && e.state == capsule_store::SegmentState::Sealed
                && (e.bytes == m.segment_len || e.bytes == capsule_store::SegmentEntry::UNSIZED)
        });
        let next_in = entries
            .get(at + self.members.len())
            .is_some_and(|e| e.seq <= self.members[self.members.len() - 1].seq);
        (same && !next_in).then_some(at)
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.k.to_le_bytes());
        out.extend_from_slice(&(self.members.len() as u32).to_le_bytes());
        for m in &self.members {
            out.extend_from_slice(&m.seq.to_le_bytes());
            out.extend_from_slice(&m.segment_len.to_le_bytes());
            let (a, b) = m.held.unwrap_or((u64::MAX, 0));
            out.extend_from_slice(&a.to_le_bytes());
            out.extend_from_slice(&b.to_le_bytes());
        }
        let dns: Vec<(&IpAddr, &Vec<String>)> = self.dns.entries().collect();
        out.extend_from_slice(&(dns.len() as u32).to_le_bytes());
        for (addr, names) in dns {
            match addr {
                IpAddr::V4(a) => {
                    out.push(4);
                    out.extend_from_slice(&a.octets());
                }
                IpAddr::V6(a) => {
                    out.push(6);
                    out.extend_from_slice(&a.octets());
                }
            }
            out.push(names.len() as u8);
            for n in names {
                let n = &n.as_bytes()[..n.len().min(u16::MAX as usize)];
                out.extend_from_slice(&(n.len() as u16).to_le_bytes());
                out.extend_from_slice(n);
            }
        }
        // The flows as a side index body (version 7: names and encapsulations kept), of no
        // blocks: every counter the listing reads is in a record.
        let index = SegmentIndex {
            seq: self.k,
            segment_len: 0,
            blocks: Vec::new(),
            flows: self.flows.iter().map(record_of).collect(),
            series: Some(Vec::new()),
            named: true,
            tunnels: true,
        }
        .encode();
        out.extend_from_slice(&(index.len() as u64).to_le_bytes());
        out.extend_from_slice(&index);
        let crc = capsule_store::crc::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a slice file. Never panics; every failure says what is wrong.
    pub fn decode(b: &[u8]) -> std::result::Result<Slice, String> {
        let (body, crc) = b
            .split_last_chunk::<4>()
            .ok_or_else(|| "shorter than its checksum".to_string())?;
        if capsule_store::crc::crc32c(body) != u32::from_le_bytes(*crc) {
            return Err("checksum mismatch".into());
        }
        let mut c = Cursor { b: body, at: 0 };
        if c.take(8)? != MAGIC {
            return Err("not a rollup slice (bad magic)".into());
        }
        let version = c.u16()?;
        if version < VERSION {
            return Err(format!("{OLDER} (version {version})"));
        }
        if version != VERSION {
            return Err(format!("rollup slice version {version} is not known"));
        }
        let k = c.u64()?;
        let n = c.u32()? as usize;
        let mut members = Vec::with_capacity(n.min(SLICE as usize));
        for _ in 0..n {
            let (seq, segment_len, a, b) = (c.u64()?, c.u64()?, c.u64()?, c.u64()?);
            if slice_of(seq) != k {
                return Err(format!("segment {seq} is not of slice {k}"));
            }
            members.push(Member {
                seq,
                segment_len,
                held: (a <= b).then_some((a, b)),
            });
        }
        if members.is_empty() || members.windows(2).any(|w| w[0].seq >= w[1].seq) {
            return Err("members not ascending".into());
        }
        let mut dns = DnsNames::default();
        for _ in 0..c.u32()? {
            let addr = match c.u8()? {
                4 => IpAddr::from(<[u8; 4]>::try_from(c.take(4)?).map_err(|e| e.to_string())?),
                6 => IpAddr::from(<[u8; 16]>::try_from(c.take(16)?).map_err(|e| e.to_string())?),
                v => return Err(format!("address of version {v}")),
            };
            for _ in 0..c.u8()? {
                let len = c.u16()? as usize;
                let name = std::str::from_utf8(c.take(len)?).map_err(|e| e.to_string())?;
                dns.add(addr, name);
            }
        }
        let len = usize::try_from(c.u64()?).map_err(|e| e.to_string())?;
        let index = c.take(len)?;
        if c.at != body.len() {
            return Err("bytes after the flows".into());
        }
        let i = SegmentIndex::decode_counts(index, None).map_err(|e| e.to_string())?;
        if i.seq != k || !i.named || !i.tunnels {
            return Err("its flows are not this slice's".into());
        }
        Ok(Slice {
            k,
            members,
            dns,
            flows: i.flows,
        })
    }

    /// Reads slice `k` from `dir`: `Ok(None)` when there is none.
    pub fn load(dir: &Path, k: u64) -> Result<Option<std::result::Result<Slice, String>>> {
        match fsx::read(&path(dir, k), "read rollup slice") {
            Ok(b) => Ok(Some(Slice::decode(&b))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes the slice (an atomic replace).
    pub fn write(&self, dir: &Path) -> Result<()> {
        fsx::write_atomic(&path(dir, self.k), &self.encode())
    }
}

/// A merged flow as an index record: no blocks, no carried TCP state (the listing reads
/// neither), its buckets widened back (the listing's 32-bit counters read back the same).
fn record_of(f: &FlowCounts) -> FlowRecord {
    FlowRecord {
        key: f.key,
        totals: f.totals.clone(),
        blocks: Vec::new(),
        buckets: f
            .buckets
            .iter()
            .map(|b| Bucket {
                second: b.second,
                packets: b.packets.map(u64::from),
                bytes: b.bytes,
                data: b.data.map(u64::from),
                retransmissions: b.retransmissions.map(u64::from),
                zero_windows: b.zero_windows.map(u64::from),
                resets: b.resets.map(u64::from),
            })
            .collect(),
        tcp_in: TcpState::default(),
        tcp_out: TcpState::default(),
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| format!("short at byte {}", self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> std::result::Result<u16, String> {
        Ok(u16::from_le_bytes([self.take(1)?[0], self.take(1)?[0]]))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        let mut a = [0; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

/// Makes the slice of `k` again from the listed segments (seq, length) when its file is
/// missing, does not decode, or does not stand for them; removes it when no slice can be
/// made (a member without a current index). The caller asks only for whole slices (their
/// last segment sealed). Returns whether it was written.
pub fn refresh(dir: &Path, k: u64, listed: &[(u64, u64)]) -> Result<bool> {
    let mine: Vec<(u64, u64)> = listed
        .iter()
        .copied()
        .filter(|(s, _)| slice_of(*s) == k)
        .collect();
    if let Some(Ok(s)) = Slice::load(dir, k)? {
        let same = s.members.len() == mine.len()
            && s.members
                .iter()
                .zip(&mine)
                .all(|(m, (seq, len))| m.seq == *seq && m.segment_len == *len);
        if same {
            return Ok(false);
        }
    }
    match Slice::make(dir, k, &mine) {
        Some(s) => {
            s.write(dir)?;
            Ok(true)
        }
        None => {
            remove(dir, k)?;
            Ok(false)
        }
    }
}

/// The slice of `seq` after a compaction changed its length from `old` to `new` (its
/// blocks, and so its flows, are the same): the member's length is updated. A slice that
/// did not record `old` for it is left as it is (readers do not use it for that segment).
pub fn compacted(dir: &Path, seq: u64, old: u64, new: u64) -> Result<()> {
    let Some(Ok(mut s)) = Slice::load(dir, slice_of(seq))? else {
        return Ok(());
    };
    match s.members.iter_mut().find(|m| m.seq == seq) {
        Some(m) if m.segment_len == old => {
            m.segment_len = new;
            s.write(dir)
        }
        _ => Ok(()),
    }
}

/// Removes slice `k`'s file, if any.
pub fn remove(dir: &Path, k: u64) -> Result<()> {
    match fsx::remove(&path(dir, k), "remove rollup slice") {
        Err(e) if !e.is_not_found() => Err(e),
        _ => Ok(()),
    }
}

/// The slices every sealed segment of `store` should have, made again where missing,
/// damaged or not current; slice files of no listed segment removed. Every slice but the
/// one of the highest listed segment (it may still grow) is made; with `all`, every slice is
/// made again from the indexes (after `reindex` rewrote them). Returns the slices written.
pub fn rebuild(store: &capsule_store::Store, all: bool) -> Result<usize> {
    let dir = store.index_dir();
    let entries = store.list()?;
    let Some(last) = entries.last().map(|e| e.seq) else {
        return Ok(0);
    };
    let sealed: Vec<(u64, u64)> = entries
        .iter()
        .filter(|e| e.state == capsule_store::SegmentState::Sealed)
        .map(|e| (e.seq, e.bytes))
        .collect();
    let mut written = 0;
    let mut ks: Vec<u64> = sealed.iter().map(|(s, _)| slice_of(*s)).collect();
    ks.dedup();
    for &k in ks.iter().filter(|&&k| k < slice_of(last) || whole(k, last)) {
        if all {
            remove(&dir, k)?;
        }
        written += usize::from(refresh(&dir, k, &sealed)?);
    }
    if dir.exists() {
        for e in fsx::list_names(&dir)? {
            if let Some(k) = e.name.to_str().and_then(parse_name) {
                if !ks.contains(&k) {
                    remove(&dir, k)?;
                }
            }
        }
    }
    Ok(written)
}

/// Whether slice `k` ends with segment `last`.
pub fn whole(k: u64, last: u64) -> bool {
    last == k * SLICE + SLICE - 1
}

/// What is wrong with the slices of `store`, if anything: a slice that does not decode,
/// or one that stands for its listed segments but whose flows are not what their indexes
/// merge to. (A slice that no longer stands for its segments is not wrong: readers use the
/// indexes instead, and the writer makes it again.)
pub fn verify(store: &capsule_store::Store) -> Option<String> {
    let dir = store.index_dir();
    let entries = store.list().ok()?;
    let listed: Vec<(u64, u64)> = entries.iter().map(|e| (e.seq, e.bytes)).collect();
    let mut ks: Vec<u64> = entries.iter().map(|e| slice_of(e.seq)).collect();
    ks.dedup();
    let mut wrong = Vec::new();
    for k in ks {
        match Slice::load(&dir, k) {
            Ok(None) => {}
            // An earlier release's slice is not current, as one that no longer stands for
            // its segments is not: readers use the indexes, and the writer makes it again.
            Ok(Some(Err(why))) if why.starts_with(OLDER) => {}
            Ok(Some(Err(why))) => wrong.push(format!("slice {k}: {why}")),
            Err(e) => wrong.push(format!("slice {k}: {}", capsule_store::error::chain(&e))),
            Ok(Some(Ok(s))) => {
                if s.stands_for(&entries).is_some()
                    && Slice::make(&dir, k, &listed).as_ref() != Some(&s)
                {
                    wrong.push(format!(
                        "slice {k}: its flows are not what its segments' indexes hold"
                    ));
                }
            }
        }
    }
    (!wrong.is_empty()).then(|| format!("rollups: {}", wrong.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sideindex::CountsIndex;

    /// The listing tests' flow record, with a DNS answer naming `answer` when given.
    fn rec(a: &str, first_s: u64, packets: u64, answer: Option<&str>) -> FlowCounts {
        let mut f = crate::flows::tests::rec(a, first_s, packets);
        if let Some(name) = answer {
            f.totals.names = Some(Box::new(capsule_names::FlowNames {
                dns_answers: vec![(name.into(), "192.0.2.7".parse().unwrap())],
                ..Default::default()
            }));
        }
        f
    }

    fn index(seq: u64, flows: Vec<FlowCounts>) -> CountsIndex {
        CountsIndex {
            seq,
            segment_len: 4096 + seq,
            blocks: 1,
            flows,
            named: true,
            tunnels: true,
        }
    }

    fn slice() -> Slice {
        Slice::merge(
            1,
            vec![
                index(
                    1024,
                    vec![
                        rec("10.0.0.1", 5, 2, Some("a.example")),
                        rec("10.0.0.2", 5, 0, None),
                    ],
                ),
                index(
                    1025,
                    vec![
                        rec("10.0.0.3", 6, 1, Some("b.example")),
                        rec("10.0.0.1", 6, 3, None),
                    ],
                ),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_slice_merges_its_members_in_order_and_reads_back_the_same() {
        let s = slice();
        // first-seen order; the record without packets left out (as the listing does)
        let keys: Vec<String> = s.flows.iter().map(|f| f.key.a.to_string()).collect();
        assert_eq!(keys, ["10.0.0.1", "10.0.0.3"]);
        assert_eq!(s.flows[0].totals.packets, [5, 0]);
        assert_eq!(s.flows[0].buckets.len(), 2);
        // its span is every record's, with or without packets
        assert_eq!(s.members[0].held, Some((5_000_000_000, 5_000_000_010)));
        assert_eq!(
            s.dns.of("192.0.2.7".parse().unwrap()),
            ["a.example", "b.example"]
        );
        assert_eq!(Slice::decode(&s.encode()).unwrap(), s);
    }

    /// A slice of version 1 kept an address's first names seen: it is not read (its
    /// answers could name an address otherwise than its members' indexes), and it is named
    /// as an earlier release's, which `verify` does not count as damage.
    #[test]
    fn a_slice_of_version_1_is_not_current() {
        let mut b = slice().encode();
        b[8..10].copy_from_slice(&1u16.to_le_bytes());
        let end = b.len() - 4;
        let crc = capsule_store::crc::crc32c(&b[..end]);
        b[end..].copy_from_slice(&crc.to_le_bytes());
        let why = Slice::decode(&b).unwrap_err();
        assert!(why.starts_with(OLDER), "{why}");
    }

    #[test]
    fn a_damaged_or_cut_slice_is_refused_never_misread() {
        let b = slice().encode();
        for cut in 0..b.len() {
            assert!(Slice::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(Slice::decode(&d).is_err(), "byte {i} flipped");
        }
    }

    #[test]
    fn no_slice_of_indexes_without_names_or_encapsulations_or_of_another_slice() {
        let mut old = index(1024, vec![rec("10.0.0.1", 5, 2, None)]);
        old.tunnels = false;
        assert_eq!(Slice::merge(1, vec![old]), None);
        assert_eq!(Slice::merge(0, vec![index(1024, vec![])]), None);
        assert_eq!(Slice::merge(1, vec![]), None);
    }
}
