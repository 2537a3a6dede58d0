//! The side index as the store writer's [`Indexer`]: built block by block on the writer
//! thread while a segment is written, each block's share journaled to
//! `STORE/index/seg-N.journal` as it is written (so readers see the open segment indexed),
//! written to `STORE/index/seg-N.idx` when it is sealed (and the journal removed), rewritten
//! with its new length when compaction replaces the segment, deleted with it by retention,
//! and rebuilt at open for any sealed segment left without a current one (a crash before the
//! index was written, or an older build).
//!
//! TCP state for retransmission counting carries from each segment's build to the next one
//! (and, across a restart, from the last sealed segment's index); see
//! [`crate::sideindex::rebuild`] for how a rebuild uses the same state.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capsule_store::format::BlockMeta;
use capsule_store::segment::SealedSegment;
use capsule_store::{
    Indexer, OpenReport, Result, SegmentEntry, SegmentReader, Store, StoreWriter, WriterConfig,
};

use crate::catalog::{self, Catalog, Row};
use crate::rollup;
use crate::scrub::{self, Scrubber};
use crate::sideindex::journal::checkpoint::{self, Checkpointer};
use crate::sideindex::journal::{self, JournalWriter};
use crate::sideindex::{index_name, rebuild, IndexBuilder, NameCarry, SegmentIndex, TcpCarry};

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
    /// The open segment's journal (`None` once a write to it failed: readers then plan the
    /// blocks it lacks as a scan).
    journal: Option<(u64, JournalWriter)>,
    /// The open segment's fold checkpoints (while its journal is written: a checkpoint is
    /// what folding the journal's first records gives).
    checkpoints: Option<Checkpointer>,
    /// TCP state after segment `.0`, for the build of segment `.0 + 1`.
    carry: Option<(u64, TcpCarry, NameCarry)>,
    /// Held while an index is written or deleted here, so the scrubber never overwrites a
    /// newer one nor recreates a deleted one (see [`crate::scrub`]).
    writes: Arc<Mutex<()>>,
    /// Rebuilds, in the background, indexes damaged or deleted while the writer runs.
    scrub: Option<Scrubber>,
    /// How often it looks ([`scrub::DEFAULT_INTERVAL`] when `None`).
    scrub_interval: Option<Duration>,
    /// The store's catalog (catalog.rs) as this writer keeps it: a row added at each seal,
    /// updated at compaction, removed at retention; written by its own thread with a proof
    /// of the listing once the directory is still, without one at most every
    /// [`catalog::FLUSH_EVERY`] otherwise, and when the writer closes. `None` until
    /// `reconcile`.
    catalog: Option<CatalogState>,
}

/// The writer's side of its catalog: row changes are handed to a thread of their own (the
/// catalog's keeper, [`Keeper`]), which writes the file and, whenever the segment directory
/// and the ledger have been still for a tick, a proof of them with it, so that questions on
/// a store being written read neither (docs/decisions.md, issue 34 round 6). The writer's
/// thread never waits for a listing, a ledger parse or a write of the catalog; only its open
/// and its close do (as before).
#[derive(Debug)]
struct CatalogState {
    tx: std::sync::mpsc::Sender<Change>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The keeper itself when its thread could not be started: kept here and written
    /// without a proof at most every [`catalog::FLUSH_EVERY`], as before the thread.
    inline: Option<Keeper>,
}

/// What the writer tells the keeper.
#[derive(Debug)]
enum Change {
    /// A segment's row, new (a seal) or replaced (a compaction).
    Put(Box<Row>),
    /// Retention deleted the segment.
    Remove(u64),
    /// The segment directory changed (a segment created): a proof is due.
    Touched,
    /// The writer closes: the last write, with a proof, then the thread ends.
    Close,
}

/// How often the keeper checks (two `stat`s) that its last proof still holds when nothing
/// told it of a change: a change it was not told of (the ledger's line after a seal,
/// another process's `rm`, `compact` or `verify --repair`) is proven again within this.
const KEEPER_POLL: Duration = Duration::from_millis(100);
/// The least time between two failed attempts at a proof (the directory changed while it
/// was listed): a store sealing faster than it can be listed is listed at most half the time.
const KEEPER_RETRY: Duration = Duration::from_millis(50);

/// The catalog as its keeper holds it, with what it knows of its last write.
#[derive(Debug)]
struct Keeper {
    store: Store,
    catalog: Catalog,
    /// Rows changed since the last write.
    dirty: bool,
    /// The identities (segment directory, ledger) the last written proof is of.
    proof: Option<(capsule_store::fsx::FileId, capsule_store::fsx::FileId)>,
    written: std::time::Instant,
    /// The identities when the last attempt at a proof failed, with no row changed since:
    /// not tried again until one of them changes.
    tried: Option<Ids>,
    next_try: std::time::Instant,
    /// The slices as last written: only the changed ones are encoded again.
    cache: catalog::SliceCache,
}

type Ids = (
    Option<capsule_store::fsx::FileId>,
    Option<capsule_store::fsx::FileId>,
);

impl Keeper {
    fn new(store: Store, catalog: Catalog) -> Keeper {
        let now = std::time::Instant::now();
        Keeper {
            store,
            catalog,
            dirty: true,
            proof: None,
            written: now,
            tried: None,
            next_try: now,
            cache: catalog::SliceCache::default(),
        }
    }

    /// Applies `c`; whether the writer closes.
    fn apply(&mut self, c: Change) -> bool {
        match c {
            Change::Put(row) => {
                self.cache.changed(row.seq);
                self.catalog.rows.insert(row.seq, *row);
                self.dirty = true;
            }
            Change::Remove(seq) => {
                self.cache.changed(seq);
                self.catalog.rows.remove(&seq);
                self.dirty = true;
            }
            Change::Touched => {}
            Change::Close => return true,
        }
        self.tried = None;
        false
    }

    fn ids(&self) -> Ids {
        let segs = self.store.segments_dir();
        (
            capsule_store::fsx::FileId::of_path(&segs).ok().flatten(),
            capsule_store::fsx::FileId::of_path(&segs.join(capsule_store::ledger::LEDGER_FILE))
                .ok()
                .flatten(),
        )
    }

    /// Whether the last write's proof still holds.
    fn current(&self) -> bool {
        self.proof
            .is_some_and(|(d, l)| self.store.snapshot_current(&d, &l))
    }

    /// Writes the catalog, with `proof` when given. A failed write is logged: the catalog
    /// is derived, and planning checks every row.
    fn write(&mut self, proof: Option<(catalog::Proof, capsule_store::ledger::Ledger)>) {
        let ids = proof.as_ref().map(|(p, _)| (p.dir, p.ledger));
        match self
            .catalog
            .write_cached(&self.store, proof.as_ref(), &mut self.cache)
        {
            Ok(_) => {
                self.dirty = false;
                self.proof = ids;
                self.written = std::time::Instant::now();
            }
            Err(e) => tracing::warn!(
                "the store's catalog cannot be written (planning reads each segment's index \
                 instead): {}",
                capsule_store::error::chain(&e)
            ),
        }
    }

    /// What is due: a proof when the last one no longer holds or the rows changed (and the
    /// directory and the ledger are not as they were at a failed attempt), else, with
    /// `prove` false or no proof to be had, the rows at most every [`catalog::FLUSH_EVERY`].
    fn tick(&mut self, prove: bool) {
        if !self.dirty && (!prove || self.current()) {
            return;
        }
        if prove {
            let now = std::time::Instant::now();
            let ids = self.ids();
            if self.tried.as_ref() != Some(&ids) && now >= self.next_try {
                let p = match self.prove() {
                    Ok(p) => Some(p),
                    Err(why) => {
                        self.no_proof(why, ids, now);
                        None
                    }
                };
                if let Some(p) = p {
                    let proved = now.elapsed();
                    self.write(Some(p));
                    tracing::debug!(
                        rows = self.catalog.rows.len(),
                        prove_ms = proved.as_secs_f64() * 1e3,
                        write_ms = (now.elapsed() - proved).as_secs_f64() * 1e3,
                        "catalog written with a proof of the listing"
                    );
                    return;
                }
            }
        }
        if self.dirty && self.written.elapsed() >= catalog::FLUSH_EVERY {
            self.write(None);
        }
    }

    /// A proof of the listing and the ledger for the rows ([`Catalog::try_prove`]). Rows of
    /// segments the listing does not have as sealed are dropped first (retention's row not
    /// yet removed, or a file removed by hand: the row describes no file, and the proof
    /// names the segment missing from the ledger as a listing would), then the proof is
    /// made again.
    fn prove(
        &mut self,
    ) -> std::result::Result<(catalog::Proof, capsule_store::ledger::Ledger), catalog::NoProof>
    {
        match self.catalog.try_prove(&self.store) {
            Err(catalog::NoProof::RowsNotListed(gone)) => {
                tracing::debug!(?gone, "catalog rows of segments no longer listed dropped");
                for seq in gone {
                    self.cache.changed(seq);
                    self.catalog.rows.remove(&seq);
                }
                self.dirty = true;
                self.catalog.try_prove(&self.store)
            }
            r => r,
        }
    }

    /// After an attempt at a proof begun at `started` with identities `ids` failed: not
    /// tried again before they change or a row does ([`Keeper::apply`]), nor before a
    /// pause: as long as the attempt took (at least [`KEEPER_RETRY`]) when the directory or
    /// the ledger changed while it was read, [`catalog::FLUSH_EVERY`] when nothing did (the
    /// store cannot have one: tiered segments, times of whole seconds).
    fn no_proof(&mut self, why: catalog::NoProof, ids: Ids, started: std::time::Instant) {
        let raced = matches!(why, catalog::NoProof::RowsNotListed(_)) || self.ids() != ids;
        self.tried = Some(ids);
        self.next_try = std::time::Instant::now()
            + if raced {
                started.elapsed().max(KEEPER_RETRY)
            } else {
                catalog::FLUSH_EVERY
            };
    }

    /// Written now with a proof when one can be had (the writer opens or closes), unless
    /// the rows are as written and the last proof still holds.
    fn flush_now(&mut self) {
        if self.dirty || !self.current() {
            let p = self.prove().ok();
            self.write(p);
        }
    }

    fn run(mut self, rx: std::sync::mpsc::Receiver<Change>) {
        use std::sync::mpsc::RecvTimeoutError;
        loop {
            let mut closing = match rx.recv_timeout(KEEPER_POLL) {
                Ok(c) => self.apply(c),
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => true,
            };
            while let Ok(c) = rx.try_recv() {
                closing |= self.apply(c);
            }
            if closing {
                self.flush_now();
                return;
            }
            self.tick(true);
        }
    }
}

impl CatalogState {
    /// The keeper of `catalog` (written now, with a proof when one can be had: the writer
    /// opens), on its thread.
    fn start(store: Store, catalog: Catalog) -> CatalogState {
        let mut k = Keeper::new(store, catalog);
        k.flush_now();
        let (tx, rx) = std::sync::mpsc::channel();
        let slot = Arc::new(Mutex::new(Some(k)));
        let theirs = Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("capsule-catalog".into())
            .spawn(move || {
                let k = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(k) = k {
                    k.run(rx)
                }
            });
        let thread = match spawned {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(
                    "the catalog's thread cannot be started (the catalog is written without a \
                     proof of the listing while the writer runs): {e}"
                );
                None
            }
        };
        // The thread takes the keeper as it starts; kept here only when it did not start.
        let inline = match thread {
            Some(_) => None,
            None => slot.lock().unwrap_or_else(|p| p.into_inner()).take(),
        };
        CatalogState { tx, thread, inline }
    }

    fn send(&mut self, c: Change) {
        match &mut self.inline {
            Some(k) => {
                k.apply(c);
                k.tick(false);
            }
            None => {
                // The thread ended only by a panic: the rows are no longer written (planning
                // checks every row of the file as it was).
                let _ = self.tx.send(c);
            }
        }
    }
}

/// The writer closes: the keeper writes what changed since the last write, with a proof,
/// before the writer's close returns.
impl Drop for CatalogState {
    fn drop(&mut self) {
        if let Some(k) = &mut self.inline {
            k.flush_now();
        }
        let _ = self.tx.send(Change::Close);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl SideIndexer {
    fn catalog_changed(&mut self, change: Change) {
        if let Some(c) = &mut self.catalog {
            c.send(change);
        }
    }
}

impl SideIndexer {
    /// A side indexer whose scrubber looks every `interval` (tests; capture uses the
    /// default).
    pub fn with_scrub_interval(interval: Duration) -> Self {
        SideIndexer {
            scrub_interval: Some(interval),
            ..SideIndexer::default()
        }
    }

    fn write_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Indexer for SideIndexer {
    fn reconcile(&mut self, store: &Store, sealed: &[SegmentEntry]) -> Result<Vec<u64>> {
        self.dir = store.index_dir();
        let mut rebuilt = Vec::new();
        // Recovery of the catalog: rows that still describe their segment are kept, the
        // others derived again below; a damaged catalog is rebuilt whole.
        let old = Catalog::load(&self.dir).ok().flatten().unwrap_or_default();
        let mut cat = Catalog::default();
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
                match rebuild(&self.dir, &seg) {
                    Ok(idx) => {
                        idx.write(&self.dir)?;
                        cat.rows.insert(idx.seq, Row::of_segment(&idx, &seg));
                        rebuilt.push(seg.seq());
                    }
                    Err(err) => tracing::warn!(
                        "the side index of segment {} cannot be rebuilt: {}",
                        e.seq,
                        capsule_store::error::chain(&err)
                    ),
                }
            } else if let Some(r) = old.row_for(&seg).filter(|r| r.held.is_some()) {
                cat.rows.insert(r.seq, r.clone());
            } else if let Ok(Some(idx)) = SegmentIndex::load(&self.dir, &seg) {
                cat.rows.insert(idx.seq, Row::of_segment(&idx, &seg));
            }
        }
        // Written now, with a proof of the listing when one can be had; then kept by its
        // thread. A catalog kept by an earlier reconcile is closed (written) first.
        self.catalog = None;
        self.catalog = Some(CatalogState::start(store.clone(), cat));
        // Recovery of the rollups: every whole slice of sealed segments made again when
        // missing, damaged or not current (a failure is logged: readers use the indexes).
        let listed: Vec<(u64, u64)> = sealed.iter().map(|e| (e.seq, e.bytes)).collect();
        if let Some(&(last, _)) = listed.last() {
            let mut ks: Vec<u64> = listed.iter().map(|(s, _)| rollup::slice_of(*s)).collect();
            ks.dedup();
            for k in ks {
                if k < rollup::slice_of(last) || rollup::whole(k, last) {
                    if let Err(e) = rollup::refresh(&self.dir, k, &listed) {
                        tracing::warn!(
                            "rollup slice {k} cannot be made: {}",
                            capsule_store::error::chain(&e)
                        );
                    }
                }
            }
        }
        // Journals of segments no longer open are stale: their segment was sealed (by
        // recovery, just now) and has its index, or is gone.
        let open: Vec<u64> = store
            .list()?
            .into_iter()
            .filter(|e| e.state == capsule_store::SegmentState::Open)
            .map(|e| e.seq)
            .collect();
        if self.dir.exists() {
            for e in capsule_store::fsx::list(&self.dir)? {
                let name = e.name.to_str().unwrap_or_default();
                if let Some(seq) = journal::parse_journal_name(name) {
                    if !open.contains(&seq) {
                        journal::remove(&self.dir, seq)?;
                    }
                } else if let Some(seq) = checkpoint::parse_checkpoint_name(name) {
                    // Fold checkpoints (and a temporary one a crash left) go with them.
                    if !open.contains(&seq) || name.starts_with('.') {
                        checkpoint::remove_file(&self.dir, name)?;
                    }
                }
            }
        }
        // From now on, indexes damaged or deleted while this writer runs are rebuilt too.
        if self.scrub.is_none() {
            self.scrub = Scrubber::spawn(
                store.clone(),
                self.writes.clone(),
                self.scrub_interval.unwrap_or(scrub::DEFAULT_INTERVAL),
            );
        }
        // The next segment carries TCP state on from the last sealed one.
        self.carry = sealed.last().and_then(|e| {
            let bytes =
                capsule_store::fsx::read(&self.dir.join(index_name(e.seq)), "read index").ok()?;
            let idx = SegmentIndex::decode(&bytes).ok()?;
            (idx.seq == e.seq).then(|| (e.seq, idx.carry_out(), idx.names_out()))
        });
        Ok(rebuilt)
    }

    fn begin(&mut self, seq: u64) {
        // A journal left by a segment that was not sealed through us (its index was left to
        // be rebuilt) goes.
        if let Some((old, j)) = self.journal.take() {
            drop(j);
            self.checkpoints = None;
            for r in [
                journal::remove(&self.dir, old),
                checkpoint::remove(&self.dir, old),
            ] {
                if let Err(e) = r {
                    tracing::warn!("{}", capsule_store::error::chain(&e));
                }
            }
        }
        // What the previous segment's build carried forward (its flows' states, and those
        // of flows idle in it within the carry horizon); after a gap in numbering, nothing.
        // The flows' names go on too (those of the previous segment's flows only, as a
        // rebuild finds them in its index).
        let (seed, names) = match self.carry.take() {
            Some((prev, carry, names)) if prev.checked_add(1) == Some(seq) => (carry, names),
            _ => Default::default(),
        };
        self.building = Some(IndexBuilder::with_seed(seq, seed).with_names(names));
        // The segment's file was just created: the catalog's proof of the listing is due.
        self.catalog_changed(Change::Touched);
        self.journal = match JournalWriter::create(&self.dir, seq) {
            Ok(j) => Some((seq, j)),
            Err(e) => {
                tracing::warn!(
                    seq,
                    "cannot create the index journal (the open segment is read by scans \
                     until it is sealed): {}",
                    capsule_store::error::chain(&e)
                );
                None
            }
        };
        self.checkpoints = match self.journal {
            Some(_) => Checkpointer::create(&self.dir, seq)
                .map_err(|e| {
                    tracing::warn!(
                        seq,
                        "no fold checkpoints for the open segment (readers fold its whole \
                         journal): {}",
                        capsule_store::error::chain(&e)
                    )
                })
                .ok(),
            None => None,
        };
    }

    fn wants_records(&self) -> bool {
        true
    }

    fn block(
        &mut self,
        meta: &BlockMeta,
        data: &[&[u8]],
        records: Option<&[capsule_store::indexer::Record]>,
    ) {
        let Some(b) = self.building.as_mut() else {
            return;
        };
        b.add_block_pieces(meta, data, records);
        if let Some((seq, j)) = self.journal.as_mut() {
            if let Err(e) = j.append(meta, b.last_delta()) {
                tracing::warn!(
                    seq = *seq,
                    "cannot append to the index journal (the rest of the open segment is \
                     read by scans until it is sealed): {}",
                    capsule_store::error::chain(&e)
                );
                self.journal = None;
                self.checkpoints = None;
            }
        }
        if let Some(c) = self.checkpoints.as_mut() {
            c.block(meta);
        }
    }

    fn deferred(&self) -> Option<Duration> {
        self.checkpoints.as_ref()?.due_in(std::time::Instant::now())
    }

    /// Writes the open segment's fold checkpoint. One that cannot be written is no harm
    /// (readers fold the journal; the old checkpoint, if any, still holds): no more are
    /// tried for this segment.
    fn catch_up(&mut self) {
        let (Some(c), Some(b)) = (self.checkpoints.as_mut(), self.building.as_ref()) else {
            return;
        };
        if let Err(e) = c.write(b) {
            tracing::warn!(
                seq = b.seq(),
                "cannot write the fold checkpoint (readers fold the rest of the open \
                 segment's journal): {}",
                capsule_store::error::chain(&e)
            );
            self.checkpoints = None;
        }
    }

    fn sealed(&mut self, sealed: &SealedSegment) -> Result<()> {
        if let Some(b) = self.building.take() {
            let (idx, idle) = b.finish_carry(sealed.bytes);
            {
                let _guard = self.writes.lock().unwrap_or_else(|p| p.into_inner());
                idx.write(&self.dir)?;
            }
            // What the segment holds, from its block headers (the footer just written).
            let row = match SegmentReader::open(&sealed.path) {
                Ok(seg) => Row::of_segment(&idx, &seg),
                Err(_) => Row::of(&idx),
            };
            self.catalog_changed(Change::Put(Box::new(row)));
            // Flows idle in this segment keep their state for the next (a stalled flow's
            // retransmission after its timer), within the carry horizon.
            self.carry = Some((idx.seq, idx.carry_forward(idle), idx.names_out()));
            // The slice's last segment: its rollup is made from the slice's indexes.
            let k = rollup::slice_of(sealed.seq);
            if rollup::whole(k, sealed.seq) {
                if let Some(s) = rollup::Slice::make_from_dir(&self.dir, k) {
                    if let Err(e) = s.write(&self.dir) {
                        tracing::warn!(
                            "rollup slice {k} cannot be written (answers read the indexes): {}",
                            capsule_store::error::chain(&e)
                        );
                    }
                }
            }
        }
        // The index is in place: the journal and its checkpoint are no longer needed.
        self.journal = None;
        if let Some(c) = self.checkpoints.take() {
            tracing::debug!(
                seq = sealed.seq,
                written = c.written,
                ms = c.spent.as_secs_f64() * 1e3,
                "fold checkpoints of the segment"
            );
        }
        journal::remove(&self.dir, sealed.seq)?;
        checkpoint::remove(&self.dir, sealed.seq)
    }

    /// The blocks are the same, recompressed: the index is rewritten with the segment's new
    /// length, without dissecting a packet. An index that did not describe the old file
    /// (missing, stale, damaged) is rebuilt from the new one instead.
    fn compacted(&mut self, seg: &SealedSegment, old_bytes: u64) -> Result<()> {
        let _guard = self.write_lock();
        let path = self.dir.join(index_name(seg.seq));
        if let Ok(bytes) = capsule_store::fsx::read(&path, "read index") {
            if let Ok(mut idx) = SegmentIndex::decode(&bytes) {
                if idx.seq == seg.seq
                    && idx.segment_len == old_bytes
                    && idx.blocks.len() == seg.blocks
                {
                    idx.segment_len = seg.bytes;
                    idx.write(&self.dir)?;
                    drop(_guard);
                    rollup::compacted(&self.dir, seg.seq, old_bytes, seg.bytes)?;
                    let row = match SegmentReader::open(&seg.path) {
                        Ok(s) => Row::of_segment(&idx, &s),
                        Err(_) => Row::of(&idx),
                    };
                    self.catalog_changed(Change::Put(Box::new(row)));
                    return Ok(());
                }
            }
        }
        // Rebuilt, the index may say more than the old one did: the slice goes (recovery
        // and `reindex` make it again).
        rollup::remove(&self.dir, rollup::slice_of(seg.seq))?;
        let reader = SegmentReader::open(&seg.path)?;
        let idx = rebuild(&self.dir, &reader)?;
        idx.write(&self.dir)?;
        drop(_guard);
        let row = Row::of_segment(&idx, &reader);
        self.catalog_changed(Change::Put(Box::new(row)));
        Ok(())
    }

    fn deleted(&mut self, seq: u64) -> Result<()> {
        self.catalog_changed(Change::Remove(seq));
        // The slice no longer stands for its segments (readers would not use it).
        rollup::remove(&self.dir, rollup::slice_of(seq))?;
        let _guard = self.write_lock();
        let idx = self.dir.join(index_name(seq));
        match capsule_store::fsx::remove(&idx, "delete old index") {
            Err(e) if !e.is_not_found() => return Err(e),
            _ => {}
        }
        journal::remove(&self.dir, seq)?;
        checkpoint::remove(&self.dir, seq)
    }
}

/// Checks the side index of sealed segment `seg` against the segment itself: it must
/// decode, describe this file, and equal the index rebuilt from the blocks (so an index that
/// decodes but says something else is caught too). `None`: it is right. A missing index (a
/// writer killed between sealing and indexing leaves none) and a stale one (it describes an
/// earlier state of the file: a capture killed between a compaction's rename and its index
/// update leaves one) are reported too: planning never uses them (the segment is read
/// whole) and the next writer rebuilds them, but until then every answer from the index
/// misses the segment's flows, so `capsule verify` names them and `--repair` rebuilds them.
/// Reads every block.
pub fn verify_index(store: &Store, seg: &SegmentReader) -> Option<String> {
    let dir = store.index_dir();
    // A missing or stale index is a problem too: every answer from the index (flows, the
    // analytics) misses the segment's flows until it is rebuilt.
    if !dir.join(index_name(seg.seq())).exists() {
        return Some(
            "missing: the segment's flows are absent from every answer from the index".into(),
        );
    }
    let stored = match SegmentIndex::load(&dir, seg) {
        Ok(Some(idx)) => idx,
        Ok(None) => {
            return Some(
                "stale: it describes another state of the segment's file, so the segment's \
                 flows are absent from every answer from the index"
                    .into(),
            )
        }
        Err(e) => return Some(capsule_store::error::chain(&e)),
    };
    match rebuild(&dir, seg) {
        Ok(fresh) if fresh == stored => None,
        Ok(_) => Some("it differs from the index rebuilt from the segment's blocks".into()),
        // The segment's own damage is reported as such.
        Err(_) => None,
    }
}

/// Rebuilds and writes the side index of sealed segment `seg`; returns the file written.
pub fn reindex(store: &Store, seg: &SegmentReader) -> Result<PathBuf> {
    rebuild(&store.index_dir(), seg)?.write(&store.index_dir())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sideindex::journal::{self, journal_name};
    use crate::sideindex::tests::{tcp4, A, B};
    use capsule_pcap::Interface;
    use std::time::{Duration, Instant};

    const S: u64 = 1_000_000_000;

    fn cfg() -> WriterConfig {
        WriterConfig {
            block_bytes: 4096,
            segment_age: Duration::from_secs(10),
            threads: 1,
            ..WriterConfig::default()
        }
    }

    fn eth() -> Interface {
        Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        }
    }

    fn put(w: &mut StoreWriter, iface: u32, ts: u64, frame: Vec<u8>) {
        w.append(iface, ts, frame.len() as u32, &frame).unwrap();
    }

    /// `w`, or with `restart` a new writer of `root` after `w` finished (its one interface
    /// declared again).
    fn reopened_if(restart: bool, w: StoreWriter, root: &Path) -> StoreWriter {
        if !restart {
            return w;
        }
        w.finish().unwrap();
        let (mut w, _) = open_writer(root, cfg()).unwrap();
        w.add_interface(eth());
        w
    }

    /// [`readers`] and every segment's side index, in segment order.
    fn indexes(root: &Path) -> (Store, Vec<SegmentReader>, Vec<SegmentIndex>) {
        let (store, segs) = readers(root);
        let dir = store.index_dir();
        let idx = segs
            .iter()
            .map(|s| SegmentIndex::load(&dir, s).unwrap().expect("an index"))
            .collect();
        (store, segs, idx)
    }

    fn readers(root: &Path) -> (Store, Vec<SegmentReader>) {
        let store = Store::open(root).unwrap();
        let segs = store
            .list()
            .unwrap()
            .iter()
            .map(|e| SegmentReader::open(&e.path).unwrap())
            .collect();
        (store, segs)
    }

    /// Data a -> b sent in one segment (seq 101..201) and sent again in the next is a
    /// retransmission in the next, counted once, by the live build and by a rebuild (from
    /// the segment's own index, and from the previous segment's when its own is gone); the
    /// same holds when a new writer (a restart) writes the next segment.
    #[test]
    fn a_retransmission_of_data_sent_in_the_previous_segment_is_counted() {
        for restart in [false, true] {
            let d = tempfile::tempdir().unwrap();
            let root = d.path();
            let (mut w, _) = open_writer(root, cfg()).unwrap();
            let i = w.add_interface(eth());
            put(
                &mut w,
                i,
                S,
                tcp4(None, A, B, 40000, 80, 100, 0x02, 1000, 0, 0),
            );
            put(
                &mut w,
                i,
                S + 1,
                tcp4(None, A, B, 40000, 80, 101, 0x18, 1000, 100, 0),
            );
            // An unrelated flow that is idle in the next segment and back in the third.
            put(
                &mut w,
                i,
                S + 2,
                tcp4(None, A, B, 5000, 22, 7, 0x18, 1000, 50, 0),
            );
            // And one idle until long after the carry horizon (120 s).
            put(
                &mut w,
                i,
                S + 3,
                tcp4(None, A, B, 6000, 22, 9, 0x18, 1000, 40, 0),
            );
            let mut w = reopened_if(restart, w, root);
            // 20 s later: the next segment (blocks are cut first; a segment starts with one).
            w.flush().unwrap();
            put(
                &mut w,
                0,
                21 * S,
                tcp4(None, A, B, 40000, 80, 101, 0x18, 1000, 100, 0),
            );
            put(
                &mut w,
                0,
                21 * S + 1,
                tcp4(None, A, B, 40000, 80, 201, 0x18, 1000, 100, 0),
            );
            // The third, 40 s after the idle flow's data: sent again, it is a retransmission
            // (the stalled flow's timer fired; the state was carried through segment 2).
            w.flush().unwrap();
            put(
                &mut w,
                0,
                41 * S,
                tcp4(None, A, B, 5000, 22, 7, 0x18, 1000, 50, 0),
            );
            // A fourth ending past the horizon of the last flow's data, and a fifth where
            // that flow sends its old data again: it starts fresh, no retransmission.
            w.flush().unwrap();
            put(
                &mut w,
                0,
                150 * S,
                tcp4(None, A, B, 7000, 22, 1, 0x18, 1000, 10, 0),
            );
            w.flush().unwrap();
            put(
                &mut w,
                0,
                170 * S,
                tcp4(None, A, B, 6000, 22, 9, 0x18, 1000, 40, 0),
            );
            w.finish().unwrap();

            let (store, segs, idx) = indexes(root);
            assert_eq!(idx.len(), 5, "restart {restart}");
            let dir = store.index_dir();
            let web = |i: &SegmentIndex| {
                i.flows
                    .iter()
                    .find(|f| f.key.ports == Some((40000, 80)))
                    .cloned()
                    .unwrap()
            };
            assert_eq!(web(&idx[0]).totals.retransmissions, [0, 0]);
            assert_eq!(
                web(&idx[1]).totals.retransmissions,
                [1, 0],
                "restart {restart}"
            );
            assert_eq!(web(&idx[1]).tcp_in.high[0], Some(201));
            assert_eq!(web(&idx[1]).tcp_out.high[0], Some(301));
            assert_eq!(idx[2].flows.len(), 1);
            assert_eq!(
                idx[2].flows[0].totals.retransmissions,
                [1, 0],
                "a flow idle for a whole segment keeps its state within the horizon"
            );
            assert_eq!(idx[2].flows[0].tcp_in.high[0], Some(57));
            assert_eq!(idx[4].flows.len(), 1);
            assert_eq!(
                idx[4].flows[0].totals.retransmissions,
                [0, 0],
                "a flow idle past the horizon starts fresh"
            );
            assert_eq!(
                idx[4].flows[0].tcp_in,
                crate::sideindex::TcpState::default()
            );
            for (s, i) in segs.iter().zip(&idx) {
                assert_eq!(&rebuild(&dir, s).unwrap(), i, "rebuild of {}", s.seq());
                assert_eq!(verify_index(&store, s), None);
            }
            // Without its own index, the seed comes from the previous segment's.
            std::fs::remove_file(dir.join(index_name(2))).unwrap();
            assert_eq!(rebuild(&dir, &segs[1]).unwrap(), idx[1]);
            // The next writer rebuilds it, the same.
            let (w, o) = open_writer(root, cfg()).unwrap();
            assert_eq!(o.reindexed, vec![2]);
            w.finish().unwrap();
            assert_eq!(SegmentIndex::load(&dir, &segs[1]).unwrap().unwrap(), idx[1]);
        }
    }

    /// A TLS 1.2 record holding a ClientHello that names `sni` (one cipher suite, the
    /// server_name extension alone).
    fn client_hello(sni: &str) -> Vec<u8> {
        let name = sni.as_bytes();
        let n = name.len() as u16;
        let mut ext = vec![0, 0];
        ext.extend_from_slice(&(n + 5).to_be_bytes());
        ext.extend_from_slice(&(n + 3).to_be_bytes());
        ext.push(0);
        ext.extend_from_slice(&n.to_be_bytes());
        ext.extend_from_slice(name);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    /// A TCP segment from A:40000 to B:443 (or back, `rev`) at `seq` with `payload`.
    fn tls_packet(rev: bool, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = if rev {
            tcp4(None, B, A, 443, 40000, seq, flags, 1000, payload.len(), 0)
        } else {
            tcp4(None, A, B, 40000, 443, seq, flags, 1000, payload.len(), 0)
        };
        let at = f.len() - payload.len();
        f[at..].copy_from_slice(payload);
        f
    }

    /// A flow whose ClientHello is in one segment is named in the next one's index too (its
    /// names carried on as its TCP state is), with a new writer (a restart) as with the
    /// same; a flow carried in with its application told is not inspected again (a
    /// mid-stream HTTP-looking payload does not name it); the
    /// journal of the open segment has them; a rebuild gives the same index, from the
    /// previous segment's index and, when that is gone, from the segment's own; a flow idle
    /// for a whole segment starts the one after unnamed.
    #[test]
    fn a_flows_names_are_carried_into_the_next_segment() {
        const SNI: &str = "models.example-hub.io";
        for restart in [false, true] {
            let d = tempfile::tempdir().unwrap();
            let root = d.path();
            let (mut w, _) = open_writer(root, cfg()).unwrap();
            let i = w.add_interface(eth());
            let hello = client_hello(SNI);
            put(&mut w, i, S, tls_packet(false, 100, 0x02, &[]));
            put(&mut w, i, S + 1, tls_packet(true, 900, 0x12, &[]));
            put(&mut w, i, S + 2, tls_packet(false, 101, 0x18, &hello));
            put(&mut w, i, S + 3, tls_packet(true, 901, 0x18, &[0x17; 200]));
            let mut w = reopened_if(restart, w, root);
            // 20 s later, the next segment: the flow goes on, one payload that looks like
            // an HTTP request.
            w.flush().unwrap();
            let next = 101 + hello.len() as u32;
            let get = b"GET / HTTP/1.1\r\nHost: other.example\r\n\r\n";
            put(&mut w, 0, 21 * S, tls_packet(false, next, 0x18, get));
            put(
                &mut w,
                0,
                21 * S + 1,
                tls_packet(true, 1101, 0x18, &[0x17; 60]),
            );
            w.flush().unwrap();
            // The open segment's journal names the flow (the writer thread writes it).
            let deadline = Instant::now() + Duration::from_secs(5);
            let live = loop {
                let (store, segs) = readers(root);
                if segs.len() == 2 {
                    let live = journal::load_open(&store.index_dir(), &segs[1]).unwrap();
                    if let Some(live) = live.filter(|l| {
                        l.index.flows.len() == 1 && l.index.flows[0].totals.total_packets() == 2
                    }) {
                        break live;
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "the journal never covered the packets"
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            let names = live.index.flows[0].totals.names.as_deref().expect("names");
            assert_eq!(names.sni.as_deref(), Some(SNI), "restart {restart}");
            assert_eq!(names.app, capsule_names::App::Tls);
            // A third segment in which the flow is idle, and a fourth where it is back.
            put(
                &mut w,
                0,
                41 * S,
                tcp4(None, A, B, 5000, 22, 7, 0x18, 1000, 50, 0),
            );
            w.flush().unwrap();
            put(&mut w, 0, 61 * S, tls_packet(true, 1161, 0x18, &[0x17; 60]));
            w.finish().unwrap();

            let (store, segs, idx) = indexes(root);
            assert_eq!(idx.len(), 4, "restart {restart}");
            let dir = store.index_dir();
            let tls = |i: &SegmentIndex| {
                i.flows
                    .iter()
                    .find(|f| f.key.ports == Some((40000, 443)))
                    .and_then(|f| f.totals.names.as_deref().cloned())
            };
            let first = tls(&idx[0]).expect("named in its first segment");
            assert_eq!(first.sni.as_deref(), Some(SNI));
            let second = tls(&idx[1]).expect("named in the next segment");
            assert_eq!(second.sni.as_deref(), Some(SNI), "restart {restart}");
            assert_eq!(second.app, capsule_names::App::Tls);
            assert_eq!(second.client, first.client);
            assert_eq!(
                second.http_host, None,
                "a TLS flow's later bytes are not read"
            );
            assert_eq!(tls(&idx[3]), None, "idle for a whole segment: not carried");
            assert_eq!(
                live.index.flows, idx[1].flows,
                "the journal folds to the sealed index"
            );
            for (s, i) in segs.iter().zip(&idx) {
                assert_eq!(&rebuild(&dir, s).unwrap(), i, "rebuild of {}", s.seq());
                assert_eq!(verify_index(&store, s), None);
            }
            // Without the previous segment's index, the names come from the segment's own.
            std::fs::remove_file(dir.join(index_name(segs[0].seq()))).unwrap();
            assert_eq!(rebuild(&dir, &segs[1]).unwrap(), idx[1]);
            assert_eq!(verify_index(&store, &segs[1]), None);
        }
    }

    /// A writer of store `root` given 200 packets of one TCP flow, flushed (its segment
    /// still open).
    fn two_hundred_packets(root: &Path) -> StoreWriter {
        let (mut w, _) = open_writer(root, cfg()).unwrap();
        let i = w.add_interface(eth());
        for n in 0..200u32 {
            let ts = S + u64::from(n) * 1000;
            put(
                &mut w,
                i,
                ts,
                tcp4(None, A, B, 40000, 80, 1 + 100 * n, 0x18, 9, 100, 0),
            );
        }
        w.flush().unwrap();
        w
    }

    /// While a segment is open its journal grows a record per block and folds to what the
    /// index says once it is sealed; sealing removes it, and retention removes a deleted
    /// segment's journal and index.
    #[test]
    fn the_open_segment_is_journaled_until_it_is_sealed() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let w = two_hundred_packets(root);
        let jpath = Store::open(root).unwrap().index_dir().join(journal_name(1));
        let deadline = Instant::now() + Duration::from_secs(5);
        let live = loop {
            let (store, segs) = readers(root);
            let live = journal::load_open(&store.index_dir(), &segs[0]).unwrap();
            if let Some(live) = live.filter(|l| l.index.blocks.len() > 1 && l.unseen.is_empty()) {
                if live.index.flows[0].totals.total_packets() == 200 {
                    break live;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the journal never covered the blocks"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(jpath.exists());
        w.finish().unwrap();
        assert!(!jpath.exists(), "sealing removes the journal");
        let (store, segs) = readers(root);
        let sealed = SegmentIndex::load(&store.index_dir(), &segs[0])
            .unwrap()
            .unwrap();
        assert_eq!(live.index.flows, sealed.flows);
        assert_eq!(live.index.blocks, sealed.blocks);

        // A journal left beside a segment that is no longer open goes at the next open.
        std::fs::write(store.index_dir().join(journal_name(1)), b"CPJR").unwrap();
        let mut ix = SideIndexer::default();
        ix.reconcile(&store, &store.list().unwrap()).unwrap();
        assert!(!jpath.exists(), "reconcile removes stale journals");
        // Retention's delete takes the journal too.
        std::fs::write(&jpath, b"CPJR").unwrap();
        ix.deleted(1).unwrap();
        assert!(!jpath.exists() && !store.index_dir().join(index_name(1)).exists());
    }

    /// A writer gone quiet checkpoints the open segment's fold (the writer thread calls
    /// `catch_up` with no block coming); readers then fold only the records after it, to
    /// the same index as the journal alone. Sealing removes the checkpoint with the journal;
    /// so do reconcile (a stale one, and a temporary one a crash left) and retention.
    #[test]
    fn a_quiet_writer_checkpoints_the_open_segments_fold() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let w = two_hundred_packets(root);
        let dir = Store::open(root).unwrap().index_dir();
        let cpath = dir.join(checkpoint::checkpoint_name(1));
        let deadline = Instant::now() + Duration::from_secs(10);
        let ck = loop {
            if let Some(ck) = checkpoint::load(&dir, 1) {
                let (_, segs) = readers(root);
                if ck.covered() == segs[0].blocks().len() {
                    break ck;
                }
            }
            assert!(Instant::now() < deadline, "no checkpoint of every block");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(ck.covered() > 1);
        let (store, segs) = readers(root);
        let with = journal::load_open(&store.index_dir(), &segs[0])
            .unwrap()
            .unwrap();
        let bytes = std::fs::read(dir.join(journal_name(1))).unwrap();
        let read = journal::parse(&bytes);
        let alone = journal::fold(1, segs[0].blocks(), segs[0].bytes(), &read);
        assert_eq!(with, alone);
        assert_eq!(with.index.flows[0].totals.total_packets(), 200);
        w.finish().unwrap();
        assert!(!cpath.exists(), "sealing removes the checkpoint");
        let (store, segs) = readers(root);
        let sealed = SegmentIndex::load(&store.index_dir(), &segs[0])
            .unwrap()
            .unwrap();
        assert_eq!(with.index.flows, sealed.flows);

        // Left beside a segment no longer open (and a temporary one): reconcile removes them.
        let tmp = dir.join(".seg-000000000001.fold.0123456789abcdef.tmp");
        std::fs::write(&cpath, b"CPSLFOLD").unwrap();
        std::fs::write(&tmp, b"CPSLFOLD").unwrap();
        let mut ix = SideIndexer::default();
        ix.reconcile(&store, &store.list().unwrap()).unwrap();
        assert!(!cpath.exists() && !tmp.exists(), "reconcile removes them");
        std::fs::write(&cpath, b"CPSLFOLD").unwrap();
        ix.deleted(1).unwrap();
        assert!(
            !cpath.exists(),
            "retention's delete takes the checkpoint too"
        );
    }

    /// The open segment's block table comes from its journal (no header walk), and equals
    /// what the walk over its block headers finds; once sealed, the footer's.
    #[test]
    fn the_open_segment_block_table_comes_from_the_journal() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let (mut w, _) = open_writer(root, cfg()).unwrap();
        let i = w.add_interface(eth());
        for n in 0..400u32 {
            let ts = S + u64::from(n) * 1000;
            let iface = if n >= 200 {
                // A second interface half way: its block header declares it.
                if n == 200 {
                    let j = w.add_interface(Interface {
                        linktype: 1,
                        snaplen: 0,
                        name: Some("second".into()),
                        options: Default::default(),
                    });
                    assert_eq!(j, 1);
                }
                1
            } else {
                i
            };
            put(
                &mut w,
                iface,
                ts,
                tcp4(None, A, B, 40000, 80, 1 + 100 * n, 0x18, 9, 100, 0),
            );
        }
        w.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let (open_blocks, open_ifaces) = loop {
            let (_, segs) = readers(root);
            let seg = &segs[0];
            assert_eq!(seg.state(), capsule_store::SegmentState::Open);
            let packets: u32 = seg.blocks().iter().map(|b| b.packets).sum();
            if packets == 400 && seg.blocks_from_journal() == seg.blocks().len() {
                // The walk over the block headers finds the same blocks.
                let file = std::fs::File::open(seg.path()).unwrap();
                let walk = capsule_store::segment::scan(seg.path(), &file, false).unwrap();
                assert_eq!(walk.blocks, seg.blocks());
                assert_eq!(walk.interfaces, seg.interfaces());
                assert!(seg.blocks().len() > 2, "{} blocks", seg.blocks().len());
                break (seg.blocks().to_vec(), seg.interfaces().to_vec());
            }
            assert!(
                Instant::now() < deadline,
                "the journal never covered the blocks ({} of {} from it, {packets} packets)",
                seg.blocks_from_journal(),
                seg.blocks().len()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(open_ifaces.len(), 2);
        w.finish().unwrap();
        let (_, segs) = readers(root);
        let sealed = &segs[0];
        assert_eq!(sealed.state(), capsule_store::SegmentState::Sealed);
        // The footer's entries leave the interfaces to its own list.
        let mut from_journal = open_blocks;
        for b in &mut from_journal {
            b.new_interfaces.clear();
        }
        assert_eq!(sealed.blocks(), &from_journal[..]);
        assert_eq!(sealed.interfaces(), &open_ifaces[..]);
        assert_eq!(sealed.blocks_from_journal(), 0);
    }

    #[test]
    fn the_thread_rebuilds_while_the_writer_is_open() {
        let d = tempfile::tempdir().unwrap();
        let store = crate::scrub::tests::store_with_two_sealed(d.path());
        let interval = Duration::from_millis(50);
        let indexer = SideIndexer::with_scrub_interval(interval);
        let (w, _) =
            StoreWriter::open_with(d.path(), crate::scrub::tests::cfg(), Box::new(indexer))
                .unwrap();
        let path = store
            .index_dir()
            .join(index_name(crate::scrub::tests::sealed(&store)[0]));
        let want = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let t0 = std::time::Instant::now();
        while !path.exists() && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(std::fs::read(&path).unwrap(), want, "rebuilt the same");
        w.finish().unwrap();
    }
}

#[cfg(test)]
mod series_tests {
    use super::*;
    use crate::sideindex::tests::{tcp4, A, B};
    use crate::sideindex::{index_name, SegmentIndex};
    use capsule_pcap::Interface;
    use std::time::Duration;

    /// The millisecond series of the open segment (journal) and of the sealed one (index)
    /// are the same; an index of version 4 has none, and the listing names its segment.
    #[test]
    fn the_series_is_listed_from_journal_and_index_and_old_indexes_are_named() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let cfg = WriterConfig {
            block_bytes: 4096,
            segment_age: Duration::from_secs(100),
            threads: 1,
            ..WriterConfig::default()
        };
        let (mut w, _) = open_writer(root, cfg).unwrap();
        let i = w.add_interface(Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        });
        const T: u64 = 1_000_000_000;
        for (k, ts) in [T, T + 10, T + 1_000_000, T + 3_500_000]
            .into_iter()
            .enumerate()
        {
            let f = tcp4(None, A, B, 40000, 80, 100 + k as u32, 0x18, 1000, 10, 46);
            w.append(i, ts, f.len() as u32, &f).unwrap();
        }
        w.flush().unwrap();
        let store = Store::open(root).unwrap();
        // The writer thread journals the blocks as they reach the disk.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let open = loop {
            let l = crate::millis::list_index_only(&store, 0, u64::MAX).unwrap();
            let n: u64 = l
                .blocks
                .iter()
                .flat_map(|s| s.bins.iter().map(|b| b.total().0))
                .sum();
            if n == 4 {
                break l;
            }
            assert!(std::time::Instant::now() < deadline, "never journaled");
            std::thread::sleep(Duration::from_millis(20));
        };
        w.finish().unwrap();
        let sealed = crate::millis::list_index_only(&store, 0, u64::MAX).unwrap();
        let bins = |l: &crate::millis::SeriesListing| -> Vec<(u64, u64)> {
            l.blocks
                .iter()
                .flat_map(|s| s.bins.iter().map(|b| (b.ms, b.total().0)))
                .collect()
        };
        assert_eq!(bins(&sealed), vec![(1000, 2), (1001, 1), (1003, 1)]);
        assert_eq!(
            bins(&open),
            bins(&sealed),
            "the journal's series is the index's"
        );
        assert!(sealed.no_series.is_empty());
        // The same index written as version 4: no series, its segment named.
        let path = store.index_dir().join(index_name(1));
        let mut idx = SegmentIndex::decode(&std::fs::read(&path).unwrap()).unwrap();
        idx.series = None;
        idx.write(&store.index_dir()).unwrap();
        let old = crate::millis::list_index_only(&store, 0, u64::MAX).unwrap();
        assert_eq!(old.no_series, vec![1]);
        assert!(old.blocks.is_empty());
    }
}
