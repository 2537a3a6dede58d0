//! The side index as the store writer's [`Indexer`]: built block by block on the writer
//! thread while a segment is written, written to `STORE/index/seg-N.idx` when it is sealed,
//! rewritten with its new length when compaction replaces it, deleted with it by retention,
//! and rebuilt at open for any sealed segment left without a
//! current one (a crash between sealing and writing the index, or an older build).

use std::path::{Path, PathBuf};

use capsule_store::format::BlockMeta;
use capsule_store::segment::SealedSegment;
use capsule_store::{
    Indexer, OpenReport, Result, SegmentEntry, SegmentReader, Store, StoreWriter, WriterConfig,
};

use crate::sideindex::{index_name, rebuild, IndexBuilder, SegmentIndex};

/// Opens the store at `root` for writing with its side index kept current: the writer that
/// capture and import use. See [`StoreWriter::open_with`].
pub fn open_writer(root: &Path, cfg: WriterConfig) -> Result<(StoreWriter, OpenReport)> {
    StoreWriter::open_with(root, cfg, Box::new(SideIndexer::default()))
}

/// Keeps `STORE/index/` current for a store writer.
#[derive(Debug, Default)]
pub struct SideIndexer {
    dir: PathBuf,
    /// The index of the open segment, built block by block.
    building: Option<IndexBuilder>,
}

impl Indexer for SideIndexer {
    fn reconcile(&mut self, store: &Store, sealed: &[SegmentEntry]) -> Result<Vec<u64>> {
        self.dir = store.index_dir();
        let mut rebuilt = Vec::new();
        for e in sealed {
            // Damage stays local: a segment that cannot be read, or whose blocks cannot all
            // be read, is left without an index (queries plan it as a scan) and logged; it
            // never stops the writer.
            let seg = match SegmentReader::open(&e.path) {
                Ok(seg) => seg,
                Err(err) => {
                    tracing::warn!(
                        "segment {} cannot be read, so it has no side index: {}",
                        e.seq,
                        capsule_store::error::chain(&err)
                    );
                    continue;
                }
            };
            if !SegmentIndex::is_current(&self.dir, &seg) {
                match rebuild(&seg) {
                    Ok(idx) => {
                        idx.write(&self.dir)?;
                        rebuilt.push(seg.seq());
                    }
                    Err(err) => tracing::warn!(
                        "the side index of segment {} cannot be rebuilt: {}",
                        e.seq,
                        capsule_store::error::chain(&err)
                    ),
                }
            }
        }
        Ok(rebuilt)
    }

    fn begin(&mut self, seq: u64) {
        self.building = Some(IndexBuilder::new(seq));
    }

    fn block(&mut self, meta: &BlockMeta, data: &[u8]) {
        if let Some(b) = self.building.as_mut() {
            b.add_block(meta, data);
        }
    }

    fn sealed(&mut self, sealed: &SealedSegment) -> Result<()> {
        if let Some(b) = self.building.take() {
            b.finish(sealed.bytes).write(&self.dir)?;
        }
        Ok(())
    }

    /// The blocks are the same, recompressed: the index is rewritten with the segment's new
    /// length, without dissecting a packet. An index that did not describe the old file
    /// (missing, stale, damaged) is rebuilt from the new one instead.
    fn compacted(&mut self, seg: &SealedSegment, old_bytes: u64) -> Result<()> {
        let path = self.dir.join(index_name(seg.seq));
        if let Ok(bytes) = capsule_store::fsx::read(&path, "read index") {
            if let Ok(mut idx) = SegmentIndex::decode(&bytes) {
                if idx.seq == seg.seq
                    && idx.segment_len == old_bytes
                    && idx.blocks.len() == seg.blocks
                {
                    idx.segment_len = seg.bytes;
                    idx.write(&self.dir)?;
                    return Ok(());
                }
            }
        }
        rebuild(&SegmentReader::open(&seg.path)?)?.write(&self.dir)?;
        Ok(())
    }

    fn deleted(&mut self, seq: u64) -> Result<()> {
        let idx = self.dir.join(index_name(seq));
        match capsule_store::fsx::remove(&idx, "delete old index") {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Checks the side index of sealed segment `seg` against the segment itself: it must
/// decode, describe this file, and equal the index rebuilt from the blocks (so an index that
/// decodes but says something else is caught too). `None`: it is right, or there is none
/// yet (a writer killed between sealing and indexing leaves none; the next one builds it).
/// Reads every block.
pub fn verify_index(store: &Store, seg: &SegmentReader) -> Option<String> {
    let dir = store.index_dir();
    if !dir.join(index_name(seg.seq())).exists() {
        return None;
    }
    let stored = match SegmentIndex::load(&dir, seg) {
        Ok(Some(idx)) => idx,
        Ok(None) => return Some("it describes another file (stale)".into()),
        Err(e) => return Some(capsule_store::error::chain(&e)),
    };
    match rebuild(seg) {
        Ok(fresh) if fresh == stored => None,
        Ok(_) => Some("it differs from the index rebuilt from the segment's blocks".into()),
        // The segment's own damage is reported as such.
        Err(_) => None,
    }
}

/// Rebuilds and writes the side index of sealed segment `seg`; returns the file written.
pub fn reindex(store: &Store, seg: &SegmentReader) -> Result<PathBuf> {
    rebuild(seg)?.write(&store.index_dir())
}
