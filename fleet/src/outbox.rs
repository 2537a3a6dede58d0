//! The node's outbox, `STORE/fleet/outbox/`: one file per staged segment holding the rows
//! of its ledger entry, flows and per-minute rollups, ready to insert (RowBinary), written
//! durably (temporary file, fsync, rename, directory fsync) before anything is pushed, and
//! removed only after ClickHouse took every table's rows. `STORE/fleet/staged` lists the
//! segments (sequence number and length) already staged, so staging again is a no-op; a
//! segment compacted since (another length) is staged again, and its rows replace the old.
//!
//! File layout (little-endian): the magic line `capsule fleet outbox 1\n`, the segment's
//! sequence number and length (u64 each), then three tables in the order
//! [`TABLES`] names them, each as rows (u64), length (u64) and its RowBinary bytes; then
//! the CRC-32C of everything before it (u32).

use std::path::{Path, PathBuf};

use capsule_store::fsx;

use crate::rowbinary::Reader;
use crate::FleetError;

const MAGIC: &[u8] = b"capsule fleet outbox 1\n";

/// The tables of a batch, in file order (and insert order: the ledger row last, so a
/// segment the ledger lists has its flows).
pub const TABLES: [&str; 3] = ["flows", "minutes", "segments"];

/// One segment's rows, ready to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub segment: u64,
    pub segment_len: u64,
    /// Per table of [`TABLES`]: the number of rows and their RowBinary bytes.
    pub tables: [(u64, Vec<u8>); 3],
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
        if !b.starts_with(MAGIC) {
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
        let mut tables: [(u64, Vec<u8>); 3] = Default::default();
        for t in &mut tables {
            let rows = r.u64()?;
            let len = r.u64()?;
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            *t = (rows, r.bytes(len)?.to_vec());
        }
        if !r.is_empty() {
            return Err(bad("bytes after the last table".into()));
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
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn name(segment: u64, len: u64) -> String {
        format!("{segment:020}.{len}.batch")
    }

    /// Writes `b` durably (before anything is pushed from it).
    pub fn put(&self, b: &Batch) -> Result<(), FleetError> {
        std::fs::create_dir_all(&self.dir).map_err(crate::io("create", &self.dir))?;
        let path = self.dir.join(Self::name(b.segment, b.segment_len));
        fsx::write_atomic(&path, &b.encode()).map_err(store_err(&self.dir))
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

    /// The segments staged so far: (sequence number, length).
    pub fn staged(&self) -> Result<std::collections::BTreeSet<(u64, u64)>, FleetError> {
        let text = match std::fs::read_to_string(&self.staged) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
            Err(e) => return Err(crate::io("read", &self.staged)(e)),
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
                        what: self.staged.display().to_string(),
                        problem: format!("line {}: expected `SEQ LENGTH`, found {line:?}", i + 1),
                    })
                }
            }
        }
        Ok(out)
    }

    /// Records the staged segments (the whole list, replaced durably).
    pub fn set_staged(&self, s: &std::collections::BTreeSet<(u64, u64)>) -> Result<(), FleetError> {
        let parent = self.staged.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(crate::io("create", parent))?;
        let text: String = s.iter().map(|(a, b)| format!("{a} {b}\n")).collect();
        fsx::write_atomic(&self.staged, text.as_bytes()).map_err(store_err(parent))
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
            tables: [(2, vec![1, 2, 3]), (0, vec![]), (1, vec![9])],
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
    }
}
