//! The ledger of sealed segments, `segments/ledger`: a durable record of every segment the
//! store sealed and every one capsule deleted, so that a segment whose file is gone without
//! capsule deleting it (an `rm`, a restore that missed a file) is a named gap in every
//! answer over its span, not a silent one.
//!
//! One line per event, appended and fdatasynced when it happens:
//!
//! ```text
//! sealed SEQ FIRST_NS LAST_NS PACKETS BYTES
//! tiered SEQ BYTES ETAG
//! trimmed SEQ
//! deleted SEQ
//! expired SEQ
//! expired-all SEGMENTS LAST_SEQ FIRST_NS LAST_NS PACKETS
//! repaired SEQ PACKETS
//! ```
//!
//! With a `[tier]` section, the uploader appends `tiered` once the segment's object is
//! confirmed in the object store (its size and ETag checked), and retention appends
//! `trimmed` before it unlinks a tiered segment's local file: the segment lives on in the
//! object store ([`Location`]). `deleted` ends a segment wherever it lives. `expired` ends a
//! trimmed segment that `[tier] max_age` removed from the object store, and keeps its span
//! ([`Expired`]): every answer whose window reaches it says what is gone. A rewrite folds
//! the expired segments into one `expired-all` line.
//!
//! A writer appends `sealed` when it seals a segment (capture, import, recovery), and
//! `deleted` before retention unlinks a file: a reader that lists the directory first and
//! reads the ledger after never takes a segment retention is deleting for a missing one.
//! `capsule verify --repair` appends `repaired` with the packets a rebuilt segment still
//! holds: the `sealed` line keeps what it was sealed with, so every answer (also one read
//! from the side index alone) can name what the repair lost.
//! A line that does not parse (torn by a crash) is skipped. When a writer opens the store
//! it adds a line for every sealed segment it finds without one (a store made before the
//! ledger, or a crash between a seal and its line), records as deleted the missing ones
//! older than every segment kept (retention would have deleted them by now), and rewrites
//! the file without deleted segments once they make more than half of it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};
use crate::fsx;
use crate::segment::{self, SegmentReader};

/// A sealed segment's file as a writer found it: number, path, bytes.
pub(crate) type Present<'a> = (u64, &'a Path, u64);

/// In `segments/`: the ledger.
pub const LEDGER_FILE: &str = "ledger";

/// A sealed segment as the ledger records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    pub seq: u64,
    /// Time of its first and last packet (both 0 for a segment of no packets).
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: u64,
    pub bytes: u64,
}

impl From<&segment::SealedSegment> for Sealed {
    fn from(s: &segment::SealedSegment) -> Self {
        Sealed {
            seq: s.seq,
            first_ns: s.first_ns,
            last_ns: s.last_ns,
            packets: s.packets,
            bytes: s.bytes,
        }
    }
}

/// A segment's object in the object store, as the uploader confirmed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiered {
    pub bytes: u64,
    /// The ETag the object store gave the object (checked against its content at upload).
    pub etag: String,
}

/// Where a live segment's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Location {
    /// On the local disk only (not uploaded yet, or no tier).
    Local,
    /// In the object store only (its local file trimmed).
    Tiered,
    /// Both.
    Both,
}

/// What the ledger holds: the sealed segments not deleted since, by number.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    pub live: BTreeMap<u64, Sealed>,
    /// Of the live segments, those `verify --repair` rebuilt: the packets each holds since.
    pub repaired: BTreeMap<u64, u64>,
    /// Of the live segments, those confirmed in the object store.
    pub tiered: BTreeMap<u64, Tiered>,
    /// Of the tiered segments, those whose local file retention removed.
    pub trimmed: std::collections::BTreeSet<u64>,
    /// What `[tier] max_age` removed from the object store, as one span.
    pub expired: Option<Expired>,
    /// Lines in the file, and of them the ones that did not parse.
    pub lines: usize,
    pub bad_lines: usize,
}

/// The segments `[tier] max_age` removed from the object store, as one span: whatever they
/// held is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub segments: u64,
    /// The newest of them.
    pub last_seq: u64,
    /// The first and last packet time of all of them.
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: u64,
}

impl Expired {
    /// The span with segment `s` added.
    fn with(self, s: &Sealed) -> Expired {
        Expired {
            segments: self.segments + 1,
            last_seq: self.last_seq.max(s.seq),
            first_ns: self.first_ns.min(s.first_ns),
            last_ns: self.last_ns.max(s.last_ns),
            packets: self.packets + s.packets,
        }
    }

    fn merge(a: Option<Expired>, b: Expired) -> Expired {
        match a {
            None => b,
            Some(a) => Expired {
                segments: a.segments + b.segments,
                last_seq: a.last_seq.max(b.last_seq),
                first_ns: a.first_ns.min(b.first_ns),
                last_ns: a.last_ns.max(b.last_ns),
                packets: a.packets + b.packets,
            },
        }
    }

    /// What is gone, in one line.
    pub fn problem(&self) -> String {
        let at = |ns: u64| {
            humantime::format_rfc3339_nanos(
                std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns),
            )
        };
        format!(
            "{} segment(s) up to segment {} with {} packets from {} to {} were deleted from \
             the object store by [tier] max_age: what they held is gone",
            self.segments,
            self.last_seq,
            self.packets,
            at(self.first_ns),
            at(self.last_ns)
        )
    }

    /// Whether the window `[from_ns, to_ns)` reaches what they held.
    pub fn overlaps(&self, from_ns: u64, to_ns: u64) -> bool {
        self.packets > 0 && self.first_ns < to_ns && self.last_ns >= from_ns
    }

    fn line(&self) -> String {
        format!(
            "expired-all {} {} {} {} {}\n",
            self.segments, self.last_seq, self.first_ns, self.last_ns, self.packets
        )
    }
}

impl Ledger {
    /// Where live segment `seq` lives (`None`: not live).
    pub fn location(&self, seq: u64) -> Option<Location> {
        self.live.get(&seq)?;
        Some(
            match (self.tiered.contains_key(&seq), self.trimmed.contains(&seq)) {
                (true, true) => Location::Tiered,
                (true, false) => Location::Both,
                (false, _) => Location::Local,
            },
        )
    }

    /// The live segments not confirmed in the object store yet: the upload backlog.
    pub fn backlog(&self) -> impl Iterator<Item = &Sealed> {
        self.live
            .values()
            .filter(|s| !self.tiered.contains_key(&s.seq))
    }
}

/// A segment the ledger records as sealed and not deleted whose file is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub path: PathBuf,
    pub sealed: Sealed,
}

impl Missing {
    /// Whether the window `[from_ns, to_ns)` reaches what the segment held.
    pub fn overlaps(&self, from_ns: u64, to_ns: u64) -> bool {
        self.sealed.packets > 0 && self.sealed.first_ns < to_ns && self.sealed.last_ns >= from_ns
    }

    /// What is wrong, in one line.
    pub fn problem(&self) -> String {
        let at = |ns: u64| {
            humantime::format_rfc3339_nanos(
                std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns),
            )
        };
        format!(
            "the file is missing: the store's ledger records segment {} sealed with {} \
             packets ({} bytes) from {} to {}, and capsule did not delete it (removed or \
             lost outside capsule?)",
            self.sealed.seq,
            self.sealed.packets,
            self.sealed.bytes,
            at(self.sealed.first_ns),
            at(self.sealed.last_ns)
        )
    }
}

fn path_of(segments_dir: &Path) -> PathBuf {
    segments_dir.join(LEDGER_FILE)
}

/// Reads the ledger of `segments_dir`; `None` when the store has none (made before it).
pub fn read(segments_dir: &Path) -> Result<Option<Ledger>> {
    let bytes = match fsx::read(&path_of(segments_dir), "read the ledger") {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(parse(segments_dir, &bytes)))
}

/// [`read`], and the identity of the file read (from the opened file, before its bytes:
/// `None` when the file grew or changed while it was read).
pub fn read_identified(segments_dir: &Path) -> Result<Option<(Ledger, Option<fsx::FileId>)>> {
    use std::io::Read;
    let path = path_of(segments_dir);
    let mut f = match fsx::open(&path, fsx::Open::Read, "read the ledger") {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let m = f
        .metadata()
        .map_err(|e| StoreError::io("read the ledger", &path, e))?;
    let id = fsx::FileId::of(&m);
    let mut bytes = Vec::with_capacity(m.len() as usize);
    f.read_to_end(&mut bytes)
        .map_err(|e| StoreError::io("read the ledger", &path, e))?;
    let same =
        bytes.len() as u64 == id.len && f.metadata().is_ok_and(|m| fsx::FileId::of(&m) == id);
    Ok(Some((parse(segments_dir, &bytes), same.then_some(id))))
}

/// The ledger in `bytes` (the file of `segments_dir`).
fn parse(segments_dir: &Path, bytes: &[u8]) -> Ledger {
    let mut l = Ledger::default();
    for line in String::from_utf8_lossy(bytes).lines() {
        if line.trim().is_empty() {
            continue;
        }
        l.lines += 1;
        let w: Vec<&str> = line.split_ascii_whitespace().collect();
        let num = |i: usize| w.get(i).and_then(|s| s.parse::<u64>().ok());
        match (w.first().copied(), w.len()) {
            (Some("sealed"), 6) => match (num(1), num(2), num(3), num(4), num(5)) {
                (Some(seq), Some(first_ns), Some(last_ns), Some(packets), Some(bytes)) => {
                    l.live.insert(
                        seq,
                        Sealed {
                            seq,
                            first_ns,
                            last_ns,
                            packets,
                            bytes,
                        },
                    );
                }
                _ => l.bad_lines += 1,
            },
            (Some("tiered"), 4) => match (num(1), num(2)) {
                (Some(seq), Some(bytes)) if !w[3].is_empty() => {
                    let etag = w[3].to_string();
                    l.tiered.insert(seq, Tiered { bytes, etag });
                }
                _ => l.bad_lines += 1,
            },
            (Some("trimmed"), 2) => match num(1) {
                Some(seq) => {
                    l.trimmed.insert(seq);
                }
                None => l.bad_lines += 1,
            },
            (Some("deleted"), 2) => match num(1) {
                Some(seq) => {
                    l.live.remove(&seq);
                    l.repaired.remove(&seq);
                    l.tiered.remove(&seq);
                    l.trimmed.remove(&seq);
                }
                None => l.bad_lines += 1,
            },
            (Some("expired"), 2) => match num(1) {
                Some(seq) => {
                    if let Some(s) = l.live.remove(&seq) {
                        let none = Expired {
                            segments: 0,
                            last_seq: 0,
                            first_ns: u64::MAX,
                            last_ns: 0,
                            packets: 0,
                        };
                        // A segment of no packets expires without a span.
                        if s.packets > 0 {
                            l.expired = Some(l.expired.unwrap_or(none).with(&s));
                        }
                    }
                    l.repaired.remove(&seq);
                    l.tiered.remove(&seq);
                    l.trimmed.remove(&seq);
                }
                None => l.bad_lines += 1,
            },
            (Some("expired-all"), 6) => match (num(1), num(2), num(3), num(4), num(5)) {
                (Some(segments), Some(last_seq), Some(first_ns), Some(last_ns), Some(packets)) => {
                    let e = Expired {
                        segments,
                        last_seq,
                        first_ns,
                        last_ns,
                        packets,
                    };
                    l.expired = Some(Expired::merge(l.expired, e));
                }
                _ => l.bad_lines += 1,
            },
            (Some("repaired"), 3) => match (num(1), num(2)) {
                (Some(seq), Some(packets)) => {
                    l.repaired.insert(seq, packets);
                }
                _ => l.bad_lines += 1,
            },
            _ => l.bad_lines += 1,
        }
    }
    if l.bad_lines > 0 {
        tracing::warn!(
            "{}: {} line(s) do not parse (a crash mid-append?); skipped",
            path_of(segments_dir).display(),
            l.bad_lines
        );
    }
    // Repairs of segments deleted since, or never recorded as sealed, say nothing.
    let live = &l.live;
    l.repaired.retain(|seq, _| live.contains_key(seq));
    l
}

impl Ledger {
    /// The live segments a repair left with fewer packets than they were sealed with, and
    /// the packets each holds now.
    pub fn short(&self) -> impl Iterator<Item = (&Sealed, u64)> {
        self.repaired.iter().filter_map(|(seq, &held)| {
            self.live
                .get(seq)
                .filter(|s| s.packets > held)
                .map(|s| (s, held))
        })
    }
}

fn sealed_line(s: &Sealed) -> String {
    format!(
        "sealed {} {} {} {} {}\n",
        s.seq, s.first_ns, s.last_ns, s.packets, s.bytes
    )
}

/// Appends `text` to the ledger (created if missing) and syncs it. A line torn by an
/// earlier crash is ended first, so it never swallows this one.
fn append(segments_dir: &Path, text: &str) -> Result<()> {
    let path = path_of(segments_dir);
    let mut f = match fsx::open(&path, fsx::Open::Append, "append to the ledger") {
        Ok(f) => f,
        Err(e) if e.is_not_found() => {
            let f = fsx::open(&path, fsx::Open::CreateNew, "create the ledger")?;
            fsx::sync_dir(segments_dir)?;
            f
        }
        Err(e) => return Err(e),
    };
    let len = f
        .metadata()
        .map_err(|e| StoreError::io("append to the ledger", &path, e))?
        .len();
    let mut text = text.to_string();
    if len > 0 {
        use std::os::unix::fs::FileExt;
        let r = fsx::open(&path, fsx::Open::Read, "read the ledger")?;
        let mut last = [0u8; 1];
        r.read_exact_at(&mut last, len - 1)
            .map_err(|e| StoreError::io("read the ledger", &path, e))?;
        if last[0] != b'\n' {
            text.insert(0, '\n');
        }
    }
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| StoreError::io("append to the ledger", &path, e))
}

/// Records that segment `s` was sealed.
pub(crate) fn record_sealed(segments_dir: &Path, s: &Sealed) -> Result<()> {
    append(segments_dir, &sealed_line(s))
}

/// Records that `verify --repair` rebuilt segment `seq`, which holds `packets` since.
pub(crate) fn record_repaired(segments_dir: &Path, seq: u64, packets: u64) -> Result<()> {
    append(segments_dir, &format!("repaired {seq} {packets}\n"))
}

/// Serialises, within the writer-lock holder's process, the two steps that must not
/// interleave for one segment: a compaction's rename of its new file over the segment, and
/// an upload's confirmation ([`record_tiered`]). Whichever holds it first wins: a segment
/// compacted before its upload is confirmed is uploaded again (the uploader sees another
/// file under the name than the one it sent), and a segment recorded as tiered is never
/// renamed over: its object, its local file and its side index stay the same bytes, which
/// readers check against one another once the local file is trimmed.
pub fn tier_commit_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether the ledger in `segments_dir` records segment `seq` as in the object store.
pub fn is_tiered(segments_dir: &Path, seq: u64) -> Result<bool> {
    Ok(read(segments_dir)?.is_some_and(|l| l.tiered.contains_key(&seq)))
}

/// Records that segment `seq` is in the object store as `bytes` bytes with ETag `etag`,
/// after the upload was confirmed. Called by the writer-lock holder's uploader.
pub fn record_tiered(segments_dir: &Path, seq: u64, bytes: u64, etag: &str) -> Result<()> {
    // An ETag is one word in the line: quotes and spaces are not part of it.
    let etag: String = etag
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '"')
        .collect();
    let etag = if etag.is_empty() {
        "-".to_string()
    } else {
        etag
    };
    append(segments_dir, &format!("tiered {seq} {bytes} {etag}\n"))
}

/// Records that tiered segment `seq`'s local file is being removed (it lives on in the
/// object store): called before the file is unlinked.
pub(crate) fn record_trimmed(segments_dir: &Path, seq: u64) -> Result<()> {
    append(segments_dir, &format!("trimmed {seq}\n"))
}

/// Records that capsule deleted segment `seq` from the object store by `[tier] max_age`
/// (after its local file, if any, was gone): its span is no longer kept anywhere, and the
/// answers over it say so ([`Ledger::expired`]).
pub fn record_expired(segments_dir: &Path, seq: u64) -> Result<()> {
    append(segments_dir, &format!("expired {seq}\n"))
}

/// Records that capsule is deleting segment `seq`: called before its file is unlinked.
pub(crate) fn record_deleted(segments_dir: &Path, seq: u64) -> Result<()> {
    append(segments_dir, &format!("deleted {seq}\n"))
}

/// The ledger entry of sealed segment `(seq, path, bytes)`, from its footer (its block
/// table).
fn entry_of((seq, path, bytes): Present<'_>) -> Result<Sealed> {
    let r = SegmentReader::open(path)?;
    let with = || r.blocks().iter().filter(|b| b.packets > 0);
    Ok(Sealed {
        seq,
        first_ns: with().map(|b| b.first_ns).min().unwrap_or(0),
        last_ns: with().map(|b| b.last_ns).max().unwrap_or(0),
        packets: r.blocks().iter().map(|b| u64::from(b.packets)).sum(),
        bytes,
    })
}

/// At a writer's open: adds a line for each of the sealed segments `present` the ledger
/// lacks, and rewrites it without deleted segments when they are most of it. Returns how
/// many lines were added. A segment that cannot be read is left out (it is named by the
/// readers as unreadable; nothing would be gained by recording a guess).
pub(crate) fn reconcile(segments_dir: &Path, present: &[Present<'_>]) -> Result<usize> {
    let ledger = read(segments_dir)?.unwrap_or_default();
    let mut added = Vec::new();
    for &e in present {
        if ledger.live.contains_key(&e.0) {
            continue;
        }
        match entry_of(e) {
            Ok(s) => added.push(s),
            Err(err) => tracing::warn!(
                seq = e.0,
                "the ledger cannot record this segment: {}",
                crate::error::chain(&err)
            ),
        }
    }
    // Missing segments older than every segment kept: retention would have deleted them
    // by now, so their gap is no longer news (an operator's deliberate `rm` of the oldest
    // is named until the store has moved past it).
    let oldest = present.iter().map(|e| e.0).min();
    let have: std::collections::HashSet<u64> = present.iter().map(|e| e.0).collect();
    let expired: Vec<u64> = match oldest {
        Some(o) => ledger
            .live
            .keys()
            .copied()
            // A trimmed segment lives in the object store: not gone.
            .filter(|q| *q < o && !have.contains(q) && !ledger.trimmed.contains(q))
            .collect(),
        None => Vec::new(),
    };
    let live = ledger.live.len() + added.len() - expired.len();
    if ledger.lines > 64 && ledger.lines > 2 * live {
        let mut all: Vec<Sealed> = ledger
            .live
            .values()
            .filter(|s| !expired.contains(&s.seq))
            .copied()
            .collect();
        all.extend(added.iter().copied());
        all.sort_by_key(|s| s.seq);
        let mut text: String = all.iter().map(sealed_line).collect();
        for (seq, packets) in &ledger.repaired {
            if !expired.contains(seq) {
                text.push_str(&format!("repaired {seq} {packets}\n"));
            }
        }
        for (q, t) in ledger.tiered.iter().filter(|(q, _)| !expired.contains(q)) {
            text.push_str(&format!("tiered {q} {} {}\n", t.bytes, t.etag));
        }
        for q in ledger.trimmed.iter().filter(|q| !expired.contains(q)) {
            text.push_str(&format!("trimmed {q}\n"));
        }
        if let Some(e) = &ledger.expired {
            text.push_str(&e.line());
        }
        fsx::write_atomic(&path_of(segments_dir), text.as_bytes())?;
    } else if !added.is_empty() || !expired.is_empty() {
        let mut text: String = added.iter().map(sealed_line).collect();
        text.extend(expired.iter().map(|q| format!("deleted {q}\n")));
        append(segments_dir, &text)?;
    }
    Ok(added.len())
}

/// The segments `ledger` records as sealed whose numbers are not among `listed` (the
/// numbers of a listing of the directory made before the ledger was read).
pub fn missing(
    segments_dir: &Path,
    ledger: &Ledger,
    listed: impl IntoIterator<Item = u64>,
) -> Vec<Missing> {
    let have: std::collections::HashSet<u64> = listed.into_iter().collect();
    ledger
        .live
        .values()
        // A trimmed segment lives in the object store.
        .filter(|s| !have.contains(&s.seq) && !ledger.trimmed.contains(&s.seq))
        .map(|s| Missing {
            path: segments_dir.join(segment::sealed_name(s.seq)),
            sealed: *s,
        })
        // A segment sealed after the listing was taken is in the ledger but not the
        // listing: its file is there now (the seal is recorded after the rename).
        .filter(|m| !m.path.exists())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(seq: u64) -> Sealed {
        Sealed {
            seq,
            first_ns: seq * 10,
            last_ns: seq * 10 + 5,
            packets: 3,
            bytes: 100,
        }
    }

    #[test]
    fn seals_and_deletions_read_back_and_a_torn_line_is_skipped_not_joined() {
        let d = tempfile::tempdir().unwrap();
        assert!(read(d.path()).unwrap().is_none());
        record_sealed(d.path(), &s(1)).unwrap();
        record_sealed(d.path(), &s(2)).unwrap();
        // A crash mid-append leaves a torn line; the next append starts on its own line.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.path().join(LEDGER_FILE))
            .unwrap();
        f.write_all(b"sealed 3 30 3").unwrap();
        drop(f);
        record_deleted(d.path(), 1).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        assert_eq!(l.live.keys().copied().collect::<Vec<_>>(), [2]);
        assert_eq!(l.live[&2], s(2));
        assert_eq!((l.lines, l.bad_lines), (4, 1));
    }

    #[test]
    fn a_repair_is_short_until_its_segment_is_deleted_and_survives_a_rewrite() {
        let d = tempfile::tempdir().unwrap();
        for q in 1..=3 {
            record_sealed(d.path(), &s(q)).unwrap();
        }
        record_repaired(d.path(), 2, 1).unwrap();
        // A repair that lost nothing (a damaged head frame) is not short.
        record_repaired(d.path(), 3, 3).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        let short: Vec<(u64, u64)> = l.short().map(|(s, held)| (s.seq, held)).collect();
        assert_eq!(short, [(2, 1)]);
        // The rewrite at a writer's open (most lines deleted) keeps the repair.
        for q in 4..=80 {
            record_sealed(d.path(), &s(q)).unwrap();
            record_deleted(d.path(), q).unwrap();
        }
        let present: Vec<PathBuf> = (1..=3).map(|q| d.path().join(format!("{q}"))).collect();
        let present: Vec<Present<'_>> = (1..=3)
            .map(|q| (q, present[q as usize - 1].as_path(), 100))
            .collect();
        reconcile(d.path(), &present).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        assert_eq!(l.lines, 5, "rewritten: 3 sealed and 2 repaired lines");
        assert_eq!(l.short().map(|(s, _)| s.seq).collect::<Vec<_>>(), [2]);
        record_deleted(d.path(), 2).unwrap();
        assert_eq!(read(d.path()).unwrap().unwrap().short().count(), 0);
    }

    #[test]
    fn tiered_and_trimmed_segments_are_located_and_never_missing_or_expired() {
        let d = tempfile::tempdir().unwrap();
        for q in 1..=4 {
            record_sealed(d.path(), &s(q)).unwrap();
        }
        record_tiered(d.path(), 1, 100, "\"abc-2\"").unwrap();
        record_tiered(d.path(), 2, 100, "def").unwrap();
        record_trimmed(d.path(), 1).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        assert_eq!(l.tiered[&1].etag, "abc-2");
        assert_eq!(l.location(1), Some(Location::Tiered));
        assert_eq!(l.location(2), Some(Location::Both));
        assert_eq!(l.location(3), Some(Location::Local));
        assert_eq!(l.backlog().map(|s| s.seq).collect::<Vec<_>>(), [3, 4]);
        // Segment 1's file is gone (trimmed): not missing, and not expired at a writer's open.
        assert!(missing(d.path(), &l, [2, 3, 4]).is_empty());
        let seg = |q: u64| d.path().join(segment::sealed_name(q));
        let present: Vec<(u64, PathBuf)> = (2..=4).map(|q| (q, seg(q))).collect();
        let present: Vec<Present<'_>> = present
            .iter()
            .map(|(q, p)| (*q, p.as_path(), 100))
            .collect();
        reconcile(d.path(), &present).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        assert_eq!(l.location(1), Some(Location::Tiered));
        record_deleted(d.path(), 1).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        assert_eq!(
            (l.location(1), l.tiered.len(), l.trimmed.len()),
            (None, 1, 0)
        );
    }

    #[test]
    fn a_missing_segment_is_one_the_ledger_holds_and_the_listing_lacks() {
        let d = tempfile::tempdir().unwrap();
        for q in 1..=3 {
            record_sealed(d.path(), &s(q)).unwrap();
        }
        record_deleted(d.path(), 1).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        let m = missing(d.path(), &l, [3]);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].sealed.seq, 2);
        assert!(m[0].overlaps(0, 21) && m[0].overlaps(25, 26) && !m[0].overlaps(26, 99));
        assert!(m[0].problem().contains("segment 2 sealed with 3 packets"));
    }

    #[test]
    fn expired_segments_leave_one_span_that_survives_a_rewrite() {
        let d = tempfile::tempdir().unwrap();
        for q in 1..=4 {
            record_sealed(d.path(), &s(q)).unwrap();
            record_tiered(d.path(), q, 100, "e").unwrap();
            record_trimmed(d.path(), q).unwrap();
        }
        record_expired(d.path(), 1).unwrap();
        record_expired(d.path(), 2).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        assert_eq!(l.live.keys().copied().collect::<Vec<_>>(), [3, 4]);
        assert_eq!((l.tiered.len(), l.trimmed.len()), (2, 2));
        let want = Expired {
            segments: 2,
            last_seq: 2,
            first_ns: 10,
            last_ns: 25,
            packets: 6,
        };
        assert_eq!(l.expired, Some(want));
        assert!(want.overlaps(0, 11) && want.overlaps(25, 26) && !want.overlaps(26, 99));
        let p = want.problem();
        assert!(
            p.contains("2 segment(s) up to segment 2 with 6 packets") && p.contains("max_age"),
            "{p}"
        );
        // The rewrite at a writer's open keeps the span in one line, and later expiries add
        // to it.
        for q in 5..=80 {
            record_sealed(d.path(), &s(q)).unwrap();
            record_deleted(d.path(), q).unwrap();
        }
        reconcile(d.path(), &[]).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        assert!(l.lines < 10, "rewritten: {} lines", l.lines);
        assert_eq!(l.expired, Some(want));
        record_expired(d.path(), 3).unwrap();
        let l = read(d.path()).unwrap().unwrap();
        assert_eq!(
            l.expired,
            Some(Expired {
                segments: 3,
                last_seq: 3,
                last_ns: 35,
                packets: 9,
                ..want
            })
        );
    }
}
