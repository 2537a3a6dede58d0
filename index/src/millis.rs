//! The millisecond series of a window, from the side index alone (`capsule bursts`): every
//! block's series (sideindex/series.rs) of the segments the window reaches, cut to the
//! window. No segment file is opened: a sealed segment's `.idx` is used when its recorded
//! length equals the file's (one `stat`, from the listing), the open segment's journal is
//! folded against its own records, as [`crate::flows::list_index_only`] does.

use capsule_store::{Result, SegmentState, Store};

use crate::sideindex::journal;
use crate::sideindex::series::BlockSeries;
use crate::sideindex::{index_name, SegmentIndex};

/// What the window's series are, and what they miss.
#[derive(Debug, Clone, Default)]
pub struct SeriesListing {
    /// Every block's series, its bins and fan-ins cut to the window (empty ones left out).
    /// Blocks of different lanes overlap in time: a millisecond may be in several.
    pub blocks: Vec<BlockSeries>,
    /// Segments in the window whose index predates the series (version 4 or 3): their
    /// traffic is missing until `capsule reindex` rebuilds them.
    pub no_series: Vec<u64>,
    /// Segments in the window without a usable index (missing, stale or damaged).
    pub unindexed: Vec<u64>,
}

/// The series of [from, to) (ns) from the side index alone.
pub fn list_index_only(store: &Store, from: u64, to: u64) -> Result<SeriesListing> {
    let mut blocks = Vec::new();
    let mut out = visit_index_only(store, from, to, |s| blocks.push(s))?;
    out.blocks = blocks;
    Ok(out)
}

/// [`list_index_only`] handing each block's series to `visit` as it is read, none kept:
/// what a caller folds into its own bins reads a long window in bounded memory. The
/// listing returned names what is missing; its `blocks` is empty.
pub fn visit_index_only(
    store: &Store,
    from: u64,
    to: u64,
    mut visit: impl FnMut(BlockSeries),
) -> Result<SeriesListing> {
    let (from_ms, to_ms) = (from / 1_000_000, to.div_ceil(1_000_000));
    let mut out = SeriesListing::default();
    let dir = store.index_dir();
    for entry in store.list_held()? {
        let series = match entry.state {
            SegmentState::Sealed => {
                let path = store.index_dir_of(entry.seq).join(index_name(entry.seq));
                let bytes = match capsule_store::fsx::read(&path, "read index") {
                    Ok(b) => b,
                    Err(e) if e.is_not_found() => {
                        out.unindexed.push(entry.seq);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                match SegmentIndex::peek(&bytes) {
                    Some(h) if h.seq == entry.seq && h.segment_len == entry.bytes => {
                        match h.span {
                            Some((a, b)) if b >= from && a < to => {}
                            _ => continue, // outside the window
                        }
                    }
                    _ => {
                        out.unindexed.push(entry.seq);
                        continue;
                    }
                }
                match SegmentIndex::decode_series(&bytes) {
                    Ok(s) => s.series,
                    Err(_) => {
                        out.unindexed.push(entry.seq);
                        continue;
                    }
                }
            }
            SegmentState::Open => {
                let path = dir.join(journal::journal_name(entry.seq));
                let bytes = match capsule_store::fsx::read(&path, "read index journal") {
                    Ok(b) => b,
                    Err(e) if e.is_not_found() => {
                        out.unindexed.push(entry.seq);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let ck = journal::checkpoint::load(&dir, entry.seq);
                journal::fold_journal(entry.seq, None, entry.bytes, &bytes, ck)
                    .index
                    .series
            }
        };
        let Some(series) = series else {
            out.no_series.push(entry.seq);
            continue;
        };
        for mut s in series {
            s.bins.retain(|b| b.ms >= from_ms && b.ms < to_ms);
            s.fanin.retain(|f| f.ms >= from_ms && f.ms < to_ms);
            if !s.bins.is_empty() || !s.fanin.is_empty() {
                visit(s);
            }
        }
    }
    Ok(out)
}
