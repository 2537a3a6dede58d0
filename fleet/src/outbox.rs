//! The node's outbox, `STORE/fleet/outbox/`: one file per staged segment holding the rows
//! of its ledger entry, flows and per-minute rollups, ready to insert (RowBinary), written
//! durably (temporary file, fsync, rename, directory fsync) before anything is pushed, and
//! removed only after ClickHouse took every table's rows. `STORE/fleet/staged` lists the
//! segments (sequence number and length) already staged, so staging again is a no-op; a
//! segment compacted since (another length) is staged again, and its rows replace the old.
//!
//! A segment's first batch (`SEQ.LEN.batch`) holds every table; a batch of a segment whose
//! flows were staged by a release before the millisecond series (`SEQ.LEN.series.batch`)
//! holds only its series tables, staged once by the release that has them
//! (`STORE/fleet/staged-series` lists the segments whose series are staged).
//!
//! When a staged segment's location changes (uploaded to the object store, then its local
//! file trimmed), its ledger row alone is staged again with the new `location`
//! (`SEQ.LEN.where.batch`; `STORE/fleet/staged-where` lists the location each segment's
//! row was last staged with). Its newer `published_ns` makes it replace the older row.
//!
//! File layout (little-endian): the magic line `capsule fleet outbox 4\n`, the segment's
//! sequence number and length (u64 each), then six tables in the order
//! [`TABLES`] names them, each as rows (u64), length (u64) and its RowBinary bytes; then
//! the CRC-32C of everything before it (u32). Version 3 is the same with flow rows without
//! the attribute columns (`names`, `encap`); version 2 also with ledger rows without
//! `location`; version 1 (before the series) had three tables, `flows`, `minutes` and
//! `segments`. All are still read: their flow rows get attributes "not kept" (empty: what
//! an earlier release's row says in the catalog too), their ledger rows `location` `local`
//! (what the segment was when they were staged; a later change is staged on its own).

use std::path::{Path, PathBuf};

use capsule_store::fsx;

use crate::rowbinary::Reader;
use crate::FleetError;

const MAGIC: &[u8] = b"capsule fleet outbox 4\n";
/// The magic line of version 3, whose flow rows have no attribute columns.
const MAGIC_V3: &[u8] = b"capsule fleet outbox 3\n";
/// The magic line of version 2, whose ledger rows have no `location`.
const MAGIC_V2: &[u8] = b"capsule fleet outbox 2\n";
/// The magic line of version 1, whose three tables are [`TABLES`]' `V1`.
const MAGIC_V1: &[u8] = b"capsule fleet outbox 1\n";
const V1: [usize; 3] = [0, 1, 5];

/// The tables of a batch, in file order (and insert order: the ledger row last, so a
/// segment the ledger lists has its flows and series).
pub const TABLES: [&str; 6] = [
    "flows",
    "minutes",
    "ms_bins",
    "ms_fanins",
    "ms_segments",
    "segments",
];

/// Where the ledger row's table is in [`TABLES`].
pub const LEDGER: usize = 5;

/// One segment's rows, ready to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub segment: u64,
    pub segment_len: u64,
    /// Per table of [`TABLES`]: the number of rows and their RowBinary bytes.
    pub tables: [(u64, Vec<u8>); 6],
}

impl Batch {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&self.segment.to_le_bytes());
        b.extend_from_slice(&self.segment_len.to_le_bytes());
        for (rows, bytes) in &self.tables {
            b.extend_from_slice(&rows.to_le_bytes());
            b.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            b.extend_from_slice(bytes);
        }
        let crc = capsule_store::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes an outbox file's bytes (`what` names it in errors).
    pub fn decode(b: &[u8], what: &str) -> Result<Batch, FleetError> {
        let bad = |problem: String| FleetError::Decode {
            what: what.to_string(),
            problem,
        };
        let v1 = b.starts_with(MAGIC_V1);
        let v2 = b.starts_with(MAGIC_V2);
        let v3 = b.starts_with(MAGIC_V3);
        if !b.starts_with(MAGIC) && !v1 && !v2 && !v3 {
            return Err(bad(format!("expected the magic line {MAGIC:?} at byte 0")));
        }
        let Some((body, crc)) = b.split_last_chunk::<4>() else {
            return Err(bad("shorter than its checksum".into()));
        };
        let (want, got) = (u32::from_le_bytes(*crc), capsule_store::crc::crc32c(body));
        if want != got {
            return Err(bad(format!(
                "CRC-32C {got:08x} of bytes 0..{} differs from the recorded {want:08x}",
                body.len()
            )));
        }
        let mut r = Reader::new(&body[MAGIC.len()..], what);
        let segment = r.u64()?;
        let segment_len = r.u64()?;
        let mut tables: [(u64, Vec<u8>); 6] = Default::default();
        let order: Vec<usize> = if v1 {
            V1.to_vec()
        } else {
            (0..TABLES.len()).collect()
        };
        for i in order {
            let rows = r.u64()?;
            let len = r.u64()?;
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            tables[i] = (rows, r.bytes(len)?.to_vec());
        }
        if !r.is_empty() {
            return Err(bad("bytes after the last table".into()));
        }
        if v1 || v2 {
            // Ledger rows from before the `location` column: re-encoded with it.
            let (rows, old) = &tables[LEDGER];
            let mut r = Reader::new(old, what);
            let mut w = crate::rowbinary::Writer::default();
            for _ in 0..*rows {
                crate::rows::put_segment(&mut w, &crate::rows::get_segment(&mut r, false)?);
            }
            if !r.is_empty() {
                return Err(bad("bytes after the last ledger row".into()));
            }
            tables[LEDGER].1 = w.buf;
        }
        if v1 || v2 || v3 {
            // Flow rows from before the attribute columns: re-encoded with them, empty.
            let (rows, old) = &tables[0];
            let mut r = Reader::new(old, what);
            let mut w = crate::rowbinary::Writer::default();
            for _ in 0..*rows {
                let (o, f) = crate::rows::get_flow_of(&mut r, false)?;
                crate::rows::put_flow(&mut w, &o, &f);
            }
            if !r.is_empty() {
                return Err(bad("bytes after the last flow row".into()));
            }
            tables[0].1 = w.buf;
        }
        Ok(Batch {
            segment,
            segment_len,
            tables,
        })
    }
}

/// A store's outbox.
#[derive(Debug, Clone)]
pub struct Outbox {
    dir: PathBuf,
    staged: PathBuf,
    staged_series: PathBuf,
    staged_where: PathBuf,
}

/// Which staging list: of the segments' flows (and ledger rows), or of their series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Flows,
    Series,
}

fn store_err(dir: &Path) -> impl FnOnce(capsule_store::StoreError) -> FleetError + '_ {
    move |source| FleetError::Store {
        store: dir.display().to_string(),
        source,
    }
}

impl Outbox {
    /// The outbox of the store at `root` (created on first use).
    pub fn of(root: &Path) -> Outbox {
        Outbox {
            dir: root.join("fleet").join("outbox"),
            staged: root.join("fleet").join("staged"),
            staged_series: root.join("fleet").join("staged-series"),
            staged_where: root.join("fleet").join("staged-where"),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A batch's file name: `SEQ.LEN.batch` for one with the segment's ledger row,
    /// `SEQ.LEN.series.batch` for one with its series alone (so it never replaces a
    /// segment's first batch still waiting).
    fn name(b: &Batch) -> String {
        let series = if b.tables[LEDGER].0 == 0 {
            ".series"
        } else {
            ""
        };
        format!("{:020}.{}{series}.batch", b.segment, b.segment_len)
    }

    /// Writes `b` durably (before anything is pushed from it).
    pub fn put(&self, b: &Batch) -> Result<(), FleetError> {
        std::fs::create_dir_all(&self.dir).map_err(crate::io("create", &self.dir))?;
        let path = self.dir.join(Self::name(b));
        fsx::write_atomic(&path, &b.encode()).map_err(store_err(&self.dir))
    }

    /// Writes a batch holding a segment's ledger row alone, staged again because its
    /// location changed (`SEQ.LEN.where.batch`: it never replaces the segment's first
    /// batch, and sorts after it; a later change replaces it).
    pub fn put_location(&self, b: &Batch) -> Result<(), FleetError> {
        std::fs::create_dir_all(&self.dir).map_err(crate::io("create", &self.dir))?;
        let path = self
            .dir
            .join(format!("{:020}.{}.where.batch", b.segment, b.segment_len));
        fsx::write_atomic(&path, &b.encode()).map_err(store_err(&self.dir))
    }

    /// The location each segment's ledger row was last staged with (a segment staged
    /// before this list existed is not in it: it was staged `local`).
    pub fn staged_where(&self) -> Result<std::collections::BTreeMap<u64, String>, FleetError> {
        let path = &self.staged_where;
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
            Err(e) => return Err(crate::io("read", path)(e)),
        };
        let mut out = std::collections::BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let parsed = line
                .split_once(' ')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.to_string())));
            match parsed {
                Some((seq, loc)) if !loc.is_empty() && !loc.contains(' ') => {
                    out.insert(seq, loc);
                }
                _ => {
                    return Err(FleetError::Decode {
                        what: path.display().to_string(),
                        problem: format!("line {}: expected `SEQ LOCATION`, found {line:?}", i + 1),
                    })
                }
            }
        }
        Ok(out)
    }

    /// Records the locations staged (the whole list, replaced durably).
    pub fn set_staged_where(
        &self,
        m: &std::collections::BTreeMap<u64, String>,
    ) -> Result<(), FleetError> {
        let path = &self.staged_where;
        let parent = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(crate::io("create", parent))?;
        let text: String = m.iter().map(|(a, b)| format!("{a} {b}\n")).collect();
        fsx::write_atomic(path, text.as_bytes()).map_err(store_err(parent))
    }

    /// The batch files waiting, oldest segment first.
    pub fn pending(&self) -> Result<Vec<PathBuf>, FleetError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(crate::io("list", &self.dir)(e)),
        };
        let mut v: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "batch"))
            .collect();
        v.sort();
        Ok(v)
    }

    /// Reads a waiting batch.
    pub fn read(&self, path: &Path) -> Result<Batch, FleetError> {
        let b = std::fs::read(path).map_err(crate::io("read", path))?;
        Batch::decode(&b, &path.display().to_string())
    }

    /// Removes a batch ClickHouse took (the directory synced: it stays removed).
    pub fn done(&self, path: &Path) -> Result<(), FleetError> {
        std::fs::remove_file(path).map_err(crate::io("remove", path))?;
        fsx::sync_dir(&self.dir).map_err(store_err(&self.dir))
    }

    fn list(&self, l: List) -> &Path {
        match l {
            List::Flows => &self.staged,
            List::Series => &self.staged_series,
        }
    }

    /// The segments staged so far: (sequence number, length).
    pub fn staged(&self) -> Result<std::collections::BTreeSet<(u64, u64)>, FleetError> {
        self.staged_in(List::Flows)
    }

    /// The segments of list `l` staged so far: (sequence number, length).
    pub fn staged_in(&self, l: List) -> Result<std::collections::BTreeSet<(u64, u64)>, FleetError> {
        let path = self.list(l);
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
            Err(e) => return Err(crate::io("read", path)(e)),
        };
        let mut out = std::collections::BTreeSet::new();
        for (i, line) in text.lines().enumerate() {
            let parsed = line
                .split_once(' ')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
            match parsed {
                Some(p) => {
                    out.insert(p);
                }
                None => {
                    return Err(FleetError::Decode {
                        what: path.display().to_string(),
                        problem: format!("line {}: expected `SEQ LENGTH`, found {line:?}", i + 1),
                    })
                }
            }
        }
        Ok(out)
    }

    /// Records the staged segments (the whole list, replaced durably).
    pub fn set_staged(&self, s: &std::collections::BTreeSet<(u64, u64)>) -> Result<(), FleetError> {
        self.set_staged_in(List::Flows, s)
    }

    /// Records the segments of list `l` (the whole list, replaced durably).
    pub fn set_staged_in(
        &self,
        l: List,
        s: &std::collections::BTreeSet<(u64, u64)>,
    ) -> Result<(), FleetError> {
        let path = self.list(l);
        let parent = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(crate::io("create", parent))?;
        let text: String = s.iter().map(|(a, b)| format!("{a} {b}\n")).collect();
        fsx::write_atomic(path, text.as_bytes()).map_err(store_err(parent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_damage_is_named() {
        let d = tempfile::tempdir().unwrap();
        let o = Outbox::of(d.path());
        assert!(o.pending().unwrap().is_empty());
        let b = Batch {
            segment: 3,
            segment_len: 4096,
            tables: [
                (2, vec![1, 2, 3]),
                (0, vec![]),
                (1, vec![4]),
                (0, vec![]),
                (1, vec![5]),
                (1, vec![9]),
            ],
        };
        o.put(&b).unwrap();
        let p = o.pending().unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(o.read(&p[0]).unwrap(), b);
        let mut bytes = std::fs::read(&p[0]).unwrap();
        bytes[MAGIC.len() + 3] ^= 1;
        std::fs::write(&p[0], &bytes).unwrap();
        let e = o.read(&p[0]).unwrap_err().to_string();
        assert!(e.contains("CRC-32C") && e.contains(".batch"), "{e}");
        o.done(&p[0]).unwrap();
        assert!(o.pending().unwrap().is_empty());
        let s = [(1, 10), (2, 20)].into_iter().collect();
        o.set_staged(&s).unwrap();
        assert_eq!(o.staged().unwrap(), s);
        assert!(o.staged_in(List::Series).unwrap().is_empty());
    }

    /// Two flow rows as outbox versions 1 to 3 hold them, and as version 4 reads them.
    fn old_flow_rows() -> (Vec<u8>, Vec<u8>) {
        use capsule_index::sideindex::{FlowCounts, FlowKey};
        let o = crate::rows::Origin {
            node: "n".into(),
            segment: 3,
            segment_len: 4096,
            published_ns: 5,
            kept: Default::default(),
        };
        let (mut old, mut read) = (Vec::new(), Vec::new());
        for port in [53, 443] {
            let key = FlowKey {
                vlans: [None, None],
                ip_version: 4,
                proto: 17,
                a: "10.0.0.1".parse().unwrap(),
                b: "10.0.0.2".parse().unwrap(),
                ports: Some((40000, port)),
            };
            let mut f = FlowCounts::new(key, 6, 7);
            f.totals.packets = [1, 0];
            f.totals.bytes = [100, 0];
            let mut w = crate::rowbinary::Writer::default();
            crate::rows::put_flow(&mut w, &o, &f);
            read.extend_from_slice(&w.buf);
            // The two attribute columns, empty: one length byte each.
            assert_eq!(w.buf.split_off(w.buf.len() - 2), [0, 0]);
            old.extend_from_slice(&w.buf);
        }
        (old, read)
    }

    #[test]
    fn a_version_1_batch_is_read_and_a_series_batch_never_replaces_a_first_one() {
        // A ledger row as versions 1 and 2 wrote it (no `location`), and as it is read.
        let mut row = crate::rows::SegmentRow {
            node: "n".into(),
            segment: 3,
            segment_len: 4096,
            published_ns: 5,
            first_ns: 6,
            last_ns: 7,
            flows: 1,
            packets: 2,
            bytes: 100,
            path: "/s/seg".into(),
            location: String::new(),
        };
        let mut old = crate::rowbinary::Writer::default();
        crate::rows::put_segment(&mut old, &row);
        old.buf.pop(); // the empty location's length
        row.location = "local".into();
        let mut read = crate::rowbinary::Writer::default();
        crate::rows::put_segment(&mut read, &row);
        // Two flow rows as versions 1 to 3 wrote them (no attribute columns), and as they
        // are read: attributes not kept (two empty Strings).
        let (flow_old, flow_read) = old_flow_rows();
        // Version 1, as the release before the series wrote it: flows, minutes, segments.
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(&3u64.to_le_bytes());
        v1.extend_from_slice(&4096u64.to_le_bytes());
        for (rows, bytes) in [(2u64, &flow_old[..]), (1, &[3]), (1, &old.buf)] {
            v1.extend_from_slice(&rows.to_le_bytes());
            v1.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            v1.extend_from_slice(bytes);
        }
        let crc = capsule_store::crc::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        let b = Batch::decode(&v1, "v1").unwrap();
        assert_eq!(b.tables[0], (2, flow_read.clone()));
        assert_eq!(b.tables[1], (1, vec![3]));
        assert_eq!(b.tables[LEDGER], (1, read.buf.clone()));
        assert!(b.tables[2..LEDGER].iter().all(|t| t.0 == 0));

        let d = tempfile::tempdir().unwrap();
        let o = Outbox::of(d.path());
        o.put(&b).unwrap();
        let mut series = b.clone();
        series.tables = Default::default();
        series.tables[2] = (1, vec![7]);
        o.put(&series).unwrap();
        let p = o.pending().unwrap();
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(o.read(&p[0]).unwrap(), b);
        assert_eq!(o.read(&p[1]).unwrap(), series);
        assert!(p[1].to_string_lossy().ends_with(".4096.series.batch"));
        // A location change: its own file, after both, replaced by a later change.
        let mut moved = b.clone();
        moved.tables = Default::default();
        moved.tables[LEDGER] = (1, vec![8]);
        o.put_location(&moved).unwrap();
        moved.tables[LEDGER] = (1, vec![9]);
        o.put_location(&moved).unwrap();
        let p = o.pending().unwrap();
        assert_eq!(p.len(), 3, "{p:?}");
        assert_eq!(o.read(&p[2]).unwrap(), moved);
        assert!(p[2].to_string_lossy().ends_with(".4096.where.batch"));

        // Version 2: six tables, ledger rows without `location`.
        let mut v2 = MAGIC_V2.to_vec();
        v2.extend_from_slice(&3u64.to_le_bytes());
        v2.extend_from_slice(&4096u64.to_le_bytes());
        for i in 0..TABLES.len() {
            let (rows, bytes): (u64, &[u8]) = if i == LEDGER { (1, &old.buf) } else { (0, &[]) };
            v2.extend_from_slice(&rows.to_le_bytes());
            v2.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            v2.extend_from_slice(bytes);
        }
        let crc = capsule_store::crc::crc32c(&v2);
        v2.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Batch::decode(&v2, "v2").unwrap().tables[LEDGER],
            (1, read.buf.clone())
        );

        // Version 3: flow rows without the attribute columns, read with them empty; a
        // flow row cut short is refused, not read as another.
        let v3 = |flows: &[u8]| {
            let mut v3 = MAGIC_V3.to_vec();
            v3.extend_from_slice(&3u64.to_le_bytes());
            v3.extend_from_slice(&4096u64.to_le_bytes());
            for i in 0..TABLES.len() {
                let (rows, bytes): (u64, &[u8]) = match i {
                    0 => (2, flows),
                    LEDGER => (1, &read.buf),
                    _ => (0, &[]),
                };
                v3.extend_from_slice(&rows.to_le_bytes());
                v3.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                v3.extend_from_slice(bytes);
            }
            let crc = capsule_store::crc::crc32c(&v3);
            v3.extend_from_slice(&crc.to_le_bytes());
            v3
        };
        let b3 = Batch::decode(&v3(&flow_old), "v3").unwrap();
        assert_eq!(b3.tables[0], (2, flow_read.clone()));
        assert_eq!(b3.tables[LEDGER], (1, read.buf.clone()));
        assert!(Batch::decode(&v3(&flow_old[..flow_old.len() - 1]), "v3").is_err());
        // Version 4 (this one) keeps the attributes as written.
        let mut b4 = b3.clone();
        b4.tables[0] = (2, flow_read.clone());
        assert_eq!(Batch::decode(&b4.encode(), "v4").unwrap(), b4);

        let m = [(3, "both".to_string()), (4, "tiered".to_string())].into();
        o.set_staged_where(&m).unwrap();
        assert_eq!(o.staged_where().unwrap(), m);
    }
}
