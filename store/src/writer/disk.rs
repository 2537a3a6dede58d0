//! The writer thread: the only thread that touches the disk. It receives compressed blocks
//! from the compressors (in any order), writes them in block order to the open segment,
//! hands each block to the indexer, seals segments as the producer cut them, syncs the open
//! segment every `sync_interval`, and runs retention before each block.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::retention::Retention;
use super::{Compressed, Ratio, WriteReport, WriterConfig};
use crate::error::{Result, StoreError};
use crate::format;
use crate::indexer::Indexer;
use crate::segment::{SegmentFile, SegmentState};
use crate::store::{now_ns, SegmentEntry};

/// The writer thread: puts compressed blocks in order and appends them to the open
/// segment, seals segments, and runs retention before each block.
pub(super) struct WriterThread {
    pub(super) dir: PathBuf,
    pub(super) retention: Retention,
    pub(super) cfg: WriterConfig,
    pub(super) ratio: Arc<Ratio>,
    pub(super) report: WriteReport,
    /// Keeps the derived data (the side index) of what is written.
    pub(super) indexer: Box<dyn Indexer>,
    /// Where block buffers go back to the producer.
    pub(super) pool: Sender<Vec<u8>>,
    /// Where frame buffers go back to the compressors.
    pub(super) frames: Sender<Vec<u8>>,
    /// Whether writing takes most of this thread's time (see [`DiskLoad`]).
    pub(super) disk: DiskLoad,
}

/// Tells the compressors whether the disk is what limits the store: the writer thread spent
/// at least half of the last quarter second (or more, until a block arrives) in write and
/// fsync calls. Then fewer bytes is what helps, and the ladder keeps the configured level.
#[derive(Debug)]
pub(super) struct DiskLoad {
    bound: Arc<AtomicBool>,
    since: Instant,
    busy: Duration,
}

impl DiskLoad {
    pub(super) fn new(bound: Arc<AtomicBool>) -> Self {
        DiskLoad {
            bound,
            since: Instant::now(),
            busy: Duration::ZERO,
        }
    }

    /// Counts `busy` time spent writing, and publishes the verdict every 250 ms.
    fn add(&mut self, busy: Duration) {
        self.busy += busy;
        let window = self.since.elapsed();
        if window >= Duration::from_millis(250) {
            self.bound.store(self.busy * 2 >= window, Ordering::Relaxed);
            self.since = Instant::now();
            self.busy = Duration::ZERO;
        }
    }
}

impl WriterThread {
    pub(super) fn run(mut self, rx: Receiver<Compressed>) -> Result<WriteReport> {
        let mut pending: BTreeMap<u64, Compressed> = BTreeMap::new();
        let mut next = 0u64;
        let mut current: Option<SegmentFile> = None;
        let mut last_sync = Instant::now();
        let result = (|| -> Result<()> {
            for c in rx.iter() {
                pending.insert(c.order, c);
                while let Some(c) = pending.remove(&next) {
                    next += 1;
                    self.write_block(&mut current, c, &mut last_sync)?;
                }
                // Staged blocks go to disk when no block waits (so an idle or light load
                // writes at once, and readers see blocks within the block age), or at most
                // after 200 ms; under load they gather into larger writes.
                if let Some(seg) = current.as_mut() {
                    let stale = seg
                        .unflushed_for()
                        .is_some_and(|t| t >= Duration::from_millis(200));
                    if stale || (rx.is_empty() && seg.unflushed_for().is_some()) {
                        let io = Instant::now();
                        seg.flush()?;
                        self.disk.add(io.elapsed());
                    }
                }
            }
            if !pending.is_empty() {
                return Err(StoreError::CompressorStopped {
                    pending: pending.len(),
                });
            }
            Ok(())
        })();
        let sealed = match current.take() {
            Some(seg) if result.is_ok() => self.seal(seg),
            // On error the open segment is left for recovery at the next open.
            _ => Ok(()),
        };
        result?;
        sealed?;
        self.report.store_bytes = self.retention.total();
        Ok(self.report)
    }

    fn seal(&mut self, seg: SegmentFile) -> Result<()> {
        let before = seg.len();
        if let Some(s) = seg.seal()? {
            self.indexer.sealed(&s)?;
            self.retention.grew(s.bytes - before);
            self.retention.sealed_one(SegmentEntry {
                seq: s.seq,
                state: SegmentState::Sealed,
                path: s.path.clone(),
                bytes: s.bytes,
            });
            self.report.sealed.push(s);
        }
        Ok(())
    }

    fn write_block(
        &mut self,
        current: &mut Option<SegmentFile>,
        c: Compressed,
        last_sync: &mut Instant,
    ) -> Result<()> {
        if current.as_ref().is_some_and(|s| s.seq() != c.segment) {
            let seg = current.take().expect("checked above");
            self.seal(seg)?;
        }
        let need = c.frame.len() as u64 + c.meta.header_frame_len() as u64;
        // Room for the block, the footer that sealing will add, and for a new segment its
        // head and header (a few hundred bytes; 4 KiB covers interface records too).
        let reserve = match current.as_ref() {
            Some(seg) => seg.footer_reserve(),
            None => 4096 + format::meta_frame_len(format::FOOTER_FIXED_LEN + 64 + 16) as u64,
        };
        let deleted = self
            .retention
            .make_room(self.indexer.as_mut(), need + reserve)?;
        self.report.deleted.extend(deleted);
        if current.is_none() {
            let seg = SegmentFile::create(&self.dir, c.segment, now_ns())?;
            self.indexer.begin(c.segment);
            self.retention.grew(seg.len());
            *current = Some(seg);
        }
        let seg = current.as_mut().expect("created above");
        let before = seg.len();
        self.ratio
            .compressed
            .fetch_add(c.frame.len() as u64, Ordering::Relaxed);
        self.ratio
            .uncompressed
            .fetch_add(u64::from(c.meta.uncompressed_len), Ordering::Relaxed);
        self.report.uncompressed_bytes += u64::from(c.meta.uncompressed_len);
        self.report.compressed_bytes += c.frame.len() as u64;
        self.indexer.block(&c.meta, &c.data);
        // Only block-sized buffers go back to the producer. An interface or statistics
        // block's buffer is a few dozen bytes: as a lane's next block it would grow through
        // a dozen reallocations and copies, and capture records statistics whenever the
        // kernel drops packets, which is when the producer can least afford it.
        let mut data = c.data;
        if data.capacity() >= self.cfg.block_bytes {
            data.clear();
            let _ = self.pool.try_send(data);
        }
        let io = Instant::now();
        seg.append(c.meta, &c.frame)?;
        let _ = self.frames.try_send(c.frame);
        self.retention.grew(seg.len() - before);
        if last_sync.elapsed() >= self.cfg.sync_interval {
            seg.sync_data()?;
            *last_sync = Instant::now();
        }
        self.disk.add(io.elapsed());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_counts_as_the_limit_when_writing_takes_half_the_time() {
        let bound = Arc::new(AtomicBool::new(false));
        let mut d = DiskLoad::new(bound.clone());
        d.add(Duration::from_millis(10));
        assert!(
            !bound.load(Ordering::Relaxed),
            "no verdict before the window ends"
        );
        d.since -= Duration::from_millis(300);
        d.add(Duration::from_millis(200)); // 210 ms of about 300
        assert!(bound.load(Ordering::Relaxed));
        d.since -= Duration::from_millis(300);
        d.add(Duration::from_millis(100)); // 100 ms of about 300
        assert!(!bound.load(Ordering::Relaxed));
    }
}
