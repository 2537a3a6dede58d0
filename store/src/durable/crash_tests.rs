//! Power-loss proofs of docs/format.md's promises: a seeded writer creates segments, appends
//! blocks, flushes and fdatasyncs them at random, seals segments and deletes old ones as
//! retention does, while [`Recording`] logs every durable operation. Then, for cut points
//! across the whole log, the file system a power loss there leaves (under every kind of
//! [`Loss`]: unsynced data and directory changes all lost, all kept, a prefix of them, or
//! random pages) is written to a fresh directory and opened with the real writer (which
//! recovers it), and checked:
//!
//! * every block whose segment's fdatasync or fsync completed before the cut is there,
//!   byte for byte;
//! * a sealed name, before recovery and after, is a complete file whose footer lists exactly
//!   the blocks written to that segment, each verified;
//! * every block recovery kept is one that was written to that segment, in order, verified
//!   (nothing half written, nothing from elsewhere);
//! * the next writer numbers its segment above every number handed out before the cut.
//!
//! A round is reproducible from its seed: `CAPSULE_POWERLOSS_SEED=N` runs only round N,
//! `CAPSULE_POWERLOSS_ROUNDS=N` runs N rounds (default 12).

use std::collections::BTreeMap;
use std::path::Path;

use super::sim::{crash, Keep, Loss, Op, Recording, Rng};
use crate::segment::{self, SegmentFile, SegmentReader, SegmentState};
use crate::{fsx, Store, StoreWriter, WriterConfig};

/// A block the writer appended.
#[derive(Debug)]
struct Written {
    frame: Vec<u8>,
    /// Index in the log of the fdatasync/fsync of its segment that made it durable.
    synced_at: Option<usize>,
}

/// A segment the writer created.
#[derive(Debug, Default)]
struct Seg {
    /// Index in the log of the creation of its file.
    created_at: usize,
    blocks: Vec<Written>,
    /// Index in the log of the directory fsync that ended its seal.
    sealed_at: Option<usize>,
    /// Index in the log of the unlink that deleted it (retention).
    removed_at: Option<usize>,
}

/// What one seeded writer did, and the log of it.
struct Run {
    segs: BTreeMap<u64, Seg>,
    ops: Vec<Op>,
    /// Where the writer's own tree starts in the log (after the empty root's seed).
    start: usize,
}

use crate::segment::tests::block;

/// A unique payload of random length: mostly noise (frames of about its size, so blocks
/// straddle pages and direct writes of several pages happen), sometimes compressible.
fn payload(rng: &mut Rng, seq: u64, n: usize) -> Vec<u8> {
    let len = match rng.below(4) {
        0 => 20 + rng.below(200) as usize,
        1 => 3000 + rng.below(3000) as usize,
        _ => 500 + rng.below(20_000) as usize,
    };
    let mut p = format!("segment {seq} block {n} ").into_bytes();
    let noisy = rng.chance(3, 4);
    while p.len() < len {
        p.push(if noisy { rng.next() as u8 } else { b'a' });
    }
    p
}

/// Index of the last fdatasync/fsync in the log.
fn last_sync(rec: &Recording) -> usize {
    let ops = rec.ops();
    ops.iter()
        .rposition(|o| matches!(o, Op::Sync { .. }))
        .expect("a sync was logged")
}

fn write_run(seed: u64, root: &Path) -> Run {
    let mut rng = Rng(seed);
    let rec = Recording::start(root);
    let start = rec.len();
    let (store, lock) = Store::create_locked(root).unwrap();
    let dir = store.segments_dir();
    let mut segs: BTreeMap<u64, Seg> = BTreeMap::new();
    let nseg = 2 + rng.below(3);
    for s in 0..nseg {
        let seq = store.highest_seq().unwrap() + 1;
        let mut seg = SegmentFile::create(&dir, seq, seed).unwrap();
        let mut rec_seg = Seg {
            created_at: rec.len(),
            ..Seg::default()
        };
        // Empty segments now and then: sealing removes them.
        let nblocks = if rng.chance(1, 6) {
            0
        } else {
            1 + rng.below(12)
        };
        for n in 0..nblocks as usize {
            let (meta, frame) = block(n as u64, &payload(&mut rng, seq, n));
            seg.append(meta, &frame).unwrap();
            rec_seg.blocks.push(Written {
                frame,
                synced_at: None,
            });
            if rng.chance(1, 3) {
                seg.flush().unwrap();
            }
            if rng.chance(1, 4) {
                seg.sync_data().unwrap();
                let at = last_sync(&rec);
                assert_eq!(at, rec.len() - 1, "sync_data ends with its fdatasync");
                for b in rec_seg.blocks.iter_mut().filter(|b| b.synced_at.is_none()) {
                    b.synced_at = Some(at);
                }
            }
        }
        if s + 1 == nseg && rng.chance(1, 3) {
            // The writer is still in this segment at the end of the log.
            drop(seg);
        } else {
            let sealed = seg.seal().unwrap();
            assert_eq!(sealed.is_some(), nblocks > 0);
            if sealed.is_some() {
                let at = last_sync(&rec);
                for b in rec_seg.blocks.iter_mut().filter(|b| b.synced_at.is_none()) {
                    b.synced_at = Some(at);
                }
                rec_seg.sealed_at = Some(rec.len() - 1);
            }
        }
        segs.insert(seq, rec_seg);
        // Retention: the oldest sealed segment deleted, the directory fsynced.
        let sealed: Vec<u64> = segs
            .iter()
            .filter(|(_, g)| g.sealed_at.is_some() && g.removed_at.is_none())
            .map(|(&q, _)| q)
            .collect();
        if sealed.len() > 1 && rng.chance(1, 3) {
            let q = sealed[0];
            segs.get_mut(&q).unwrap().removed_at = Some(rec.len());
            fsx::remove(&dir.join(segment::sealed_name(q)), "delete old segment").unwrap();
            segment::sync_dir(&dir).unwrap();
        }
    }
    drop(lock);
    let ops = rec.ops();
    // `created_at` was taken after the create returned; the file's creation itself is
    // earlier: find it.
    for (seq, g) in segs.iter_mut() {
        let name = segment::open_name(*seq);
        g.created_at = ops
            .iter()
            .position(|o| matches!(o, Op::Create { name: n, .. } if n.to_str() == Some(&name)))
            .expect("the segment's creation was logged");
    }
    Run { segs, ops, start }
}

/// Totals over all the crash states a test checked.
#[derive(Debug, Default)]
struct Tally {
    states: usize,
    required_blocks: usize,
    sealed_before_recovery: usize,
    recovered_segments: usize,
    cut_bytes: u64,
    damage_moved: usize,
    torn_states: usize,
    by_loss: BTreeMap<String, usize>,
}

/// Opens the state a power loss after `run.ops[..cut]` left under `loss`, and checks the
/// promises.
fn check_cut(run: &Run, cut: usize, loss: Loss, rng: &mut Rng, tally: &mut Tally, ctx: &str) {
    let image = crash(&run.ops[..cut], loss, rng);
    let out = scratch_dir();
    let root = out.path().join("store");
    std::fs::create_dir(&root).unwrap();
    image.materialize(&root);
    tally.states += 1;
    *tally.by_loss.entry(format!("{loss:?}")).or_default() += 1;
    if image.kept_pieces > 0 && image.kept_pieces < image.unsynced_pieces {
        tally.torn_states += 1;
    }
    let expect = Expect {
        // Every block whose segment's fdatasync/fsync completed before the cut, unless
        // retention had begun deleting the segment.
        block: &|seq, j| {
            let g = &run.segs[&seq];
            g.removed_at.is_none_or(|r| r >= cut) && g.blocks[j].synced_at.is_some_and(|s| s < cut)
        },
        // A seal that completed (its directory fsync) is never undone.
        sealed: &|seq| {
            let g = &run.segs[&seq];
            g.removed_at.is_none_or(|r| r >= cut) && g.sealed_at.is_some_and(|s| s < cut)
        },
        handed_out: handed_out(run, cut),
        whole: true,
    };
    check_state(run, &root, &expect, tally, ctx);
}

/// The highest segment number handed out (its file created) before op `cut`.
fn handed_out(run: &Run, cut: usize) -> u64 {
    run.segs
        .iter()
        .filter(|(_, g)| g.created_at < cut)
        .map(|(&q, _)| q)
        .max()
        .unwrap_or(0)
}

/// What a state must hold after recovery.
struct Expect<'a> {
    /// Whether block `j` of segment `seq` must be there.
    block: &'a dyn Fn(u64, usize) -> bool,
    /// Whether segment `seq` must be there under its sealed name before recovery.
    sealed: &'a dyn Fn(u64) -> bool,
    /// The next writer's segment number must be above this.
    handed_out: u64,
    /// Whether every sealed name there holds all the blocks written to its segment (only
    /// the writer sealed; recovery seals what it could keep).
    whole: bool,
}

/// Blocks of `run` found in the store at `root` after recovery: segment, and for each of
/// its blocks the index of the written block it is. Checks each is verified, a block
/// written to that segment, and in order.
fn present_blocks(run: &Run, root: &Path, skip: u64, ctx: &str) -> BTreeMap<u64, Vec<usize>> {
    let store = Store::open(root).unwrap();
    let (readers, unreadable) = store.open_segments_checked().unwrap();
    assert!(unreadable.is_empty(), "{ctx}: unreadable {unreadable:?}");
    let mut present = BTreeMap::new();
    for r in &readers {
        let seq = r.seq();
        assert_eq!(r.state(), SegmentState::Sealed, "{ctx}: segment {seq}");
        assert_eq!(r.footer_problem(), None, "{ctx}: segment {seq}");
        if seq == skip {
            continue;
        }
        let g = run
            .segs
            .get(&seq)
            .unwrap_or_else(|| panic!("{ctx}: segment {seq} was never written"));
        let mut frame = Vec::new();
        let mut next = 0;
        let mut found = Vec::new();
        for b in 0..r.blocks().len() {
            r.read_frame(b, &mut frame)
                .unwrap_or_else(|e| panic!("{ctx}: segment {seq} block {b}: {e}"));
            let j = (next..g.blocks.len())
                .find(|&j| g.blocks[j].frame == frame)
                .unwrap_or_else(|| {
                    panic!(
                        "{ctx}: segment {seq} block {b} ({} bytes) is not a block written \
                         there after block {next}",
                        frame.len()
                    )
                });
            found.push(j);
            next = j + 1;
        }
        present.insert(seq, found);
    }
    present
}

/// Checks the crash state at `root` against `expect`: before recovery, every sealed name
/// is a complete segment and the seals `expect` names are there; the real writer opens the
/// store (recovering it) and writes one more segment, numbered above `expect.handed_out`;
/// after that no segment is open or unreadable, every block is verified and one written to
/// its segment, in order, and every block `expect` names is there.
fn check_state(run: &Run, root: &Path, expect: &Expect<'_>, tally: &mut Tally, ctx: &str) {
    let segs_dir = root.join("segments");
    // A sealed name always points at a complete, verified file.
    let mut sealed_before = Vec::new();
    if segs_dir.exists() {
        for e in std::fs::read_dir(&segs_dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((seq, SegmentState::Sealed)) = segment::parse_name(&name) {
                let ctx = format!("{ctx}: before recovery");
                check_complete(run, seq, &e.path(), expect.whole, &ctx);
                sealed_before.push(seq);
                tally.sealed_before_recovery += 1;
            }
        }
    }
    for seq in run.segs.keys() {
        if (expect.sealed)(*seq) {
            assert!(
                sealed_before.contains(seq),
                "{ctx}: segment {seq} was sealed before the cut, but its sealed name is gone"
            );
        }
    }

    // The real store opens it: recovery, then one more segment from a new writer.
    let cfg = WriterConfig {
        threads: 1,
        ..WriterConfig::default()
    };
    let (mut w, report) = StoreWriter::open(root, cfg)
        .unwrap_or_else(|e| panic!("{ctx}: the writer cannot open the store: {e}"));
    tally.recovered_segments += report.recovered.len();
    for r in &report.recovered {
        tally.cut_bytes += r.cut_bytes;
        tally.damage_moved += r.damaged.len();
    }
    assert!(report.left_open.is_empty(), "{ctx}: {report:?}");
    let i = w.add_interface(capsule_pcap::Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    w.append(i, 1, 60, &[0u8; 60]).unwrap();
    let done = w.finish().unwrap();
    let new_seq = done.sealed.iter().map(|s| s.seq).max().expect("one sealed");
    // Segment numbers never repeat: above every number handed out before the cut.
    assert!(
        new_seq > expect.handed_out,
        "{ctx}: the next writer numbered its segment {new_seq}, but {} was handed out \
         before the power loss",
        expect.handed_out
    );

    // After recovery: every block verified and one that was written there, a sealed
    // segment still complete, every block that must be there present.
    let present = present_blocks(run, root, new_seq, ctx);
    for &seq in &sealed_before {
        if present.contains_key(&seq) {
            let path = segs_dir.join(segment::sealed_name(seq));
            let ctx = format!("{ctx}: after recovery");
            check_complete(run, seq, &path, expect.whole, &ctx);
        }
    }
    for (seq, g) in &run.segs {
        for j in 0..g.blocks.len() {
            if (expect.block)(*seq, j) {
                tally.required_blocks += 1;
                assert!(
                    present.get(seq).is_some_and(|f| f.contains(&j)),
                    "{ctx}: block {j} of segment {seq} was durable before the power loss \
                     (fdatasynced at log op {:?}) but is not in the recovered store; found \
                     {:?}",
                    g.blocks[j].synced_at,
                    present.get(seq)
                );
            }
        }
    }
    let leftovers: Vec<_> = std::fs::read_dir(&segs_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".open") || n.ends_with(".rebuilding"))
        .collect();
    assert!(leftovers.is_empty(), "{ctx}: {leftovers:?}");
}

/// A fresh directory for a crash state: in memory when the machine has a tmpfs at
/// /dev/shm (the recovered store's fsyncs cost nothing there; the writer's own run stays on
/// the disk of the temporary directory, where direct I/O is taken).
fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

/// Segment `seq` at `path` is a sealed segment whose footer is sound and whose blocks are
/// blocks written to it, in order, each verified and byte-identical; with `whole`, exactly
/// all of them (a seal by the writer; one by recovery may hold fewer).
fn check_complete(run: &Run, seq: u64, path: &Path, whole: bool, ctx: &str) {
    let g = run
        .segs
        .get(&seq)
        .unwrap_or_else(|| panic!("{ctx}: sealed segment {seq} was never written"));
    let r = SegmentReader::open(path)
        .unwrap_or_else(|e| panic!("{ctx}: sealed segment {seq} does not open: {e}"));
    assert_eq!(r.footer_problem(), None, "{ctx}: sealed segment {seq}");
    assert!(r.damaged().is_empty(), "{ctx}: sealed segment {seq}");
    if whole {
        assert_eq!(
            r.blocks().len(),
            g.blocks.len(),
            "{ctx}: sealed segment {seq} lists {} blocks, {} were written",
            r.blocks().len(),
            g.blocks.len()
        );
    }
    let mut frame = Vec::new();
    let mut next = 0;
    for i in 0..r.blocks().len() {
        r.read_frame(i, &mut frame)
            .unwrap_or_else(|e| panic!("{ctx}: sealed segment {seq} block {i}: {e}"));
        let j = (next..g.blocks.len())
            .find(|&j| g.blocks[j].frame == frame)
            .unwrap_or_else(|| {
                panic!("{ctx}: sealed segment {seq} block {i} is not one written after {next}")
            });
        assert!(
            !whole || j == i,
            "{ctx}: sealed segment {seq} block {i} differs"
        );
        next = j + 1;
    }
}

const LOSSES: [Loss; 8] = [
    Loss {
        files: Keep::Nothing,
        dirs: Keep::Nothing,
    },
    Loss {
        files: Keep::Everything,
        dirs: Keep::Everything,
    },
    Loss {
        files: Keep::Nothing,
        dirs: Keep::Everything,
    },
    Loss {
        files: Keep::Everything,
        dirs: Keep::Nothing,
    },
    Loss {
        files: Keep::Prefix,
        dirs: Keep::Prefix,
    },
    Loss {
        files: Keep::Pages,
        dirs: Keep::Prefix,
    },
    Loss {
        files: Keep::Pages,
        dirs: Keep::Nothing,
    },
    Loss {
        files: Keep::Pages,
        dirs: Keep::Everything,
    },
];

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The seeds to run: `CAPSULE_POWERLOSS_SEED` alone, or `CAPSULE_POWERLOSS_ROUNDS` of them.
fn seeds(default_rounds: u64) -> Vec<u64> {
    match env_u64("CAPSULE_POWERLOSS_SEED") {
        Some(s) => vec![s],
        None => (0..env_u64("CAPSULE_POWERLOSS_ROUNDS").unwrap_or(default_rounds)).collect(),
    }
}

#[test]
fn a_power_loss_keeps_every_synced_block_and_every_seal() {
    let mut tally = Tally::default();
    for seed in seeds(12) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        std::fs::create_dir(&root).unwrap();
        let run = write_run(seed, &root);
        let mut rng = Rng(seed ^ 0x5eed);
        // Every cut point, under a loss chosen for it; then random cuts under each loss.
        for cut in run.start..=run.ops.len() {
            let loss = LOSSES[rng.below(LOSSES.len() as u64) as usize];
            let ctx = format!(
                "seed {seed}, cut after op {cut} of {}, {loss:?}",
                run.ops.len()
            );
            check_cut(&run, cut, loss, &mut rng, &mut tally, &ctx);
        }
        for loss in LOSSES {
            let cut = run.start + rng.below((run.ops.len() - run.start + 1) as u64) as usize;
            let ctx = format!(
                "seed {seed}, cut after op {cut} of {}, {loss:?}",
                run.ops.len()
            );
            check_cut(&run, cut, loss, &mut rng, &mut tally, &ctx);
        }
    }
    eprintln!("power loss: {tally:?}");
    // The test is not vacuous: durable blocks were required, torn states occurred, and
    // recovery had work to do.
    if env_u64("CAPSULE_POWERLOSS_SEED").is_none() {
        assert!(tally.required_blocks > 100, "{tally:?}");
        assert!(tally.torn_states > 10, "{tally:?}");
        assert!(tally.recovered_segments > 10, "{tally:?}");
        assert!(tally.sealed_before_recovery > 10, "{tally:?}");
    }
}

/// Power lost again while the writer recovers a crash state (cutting torn segments back,
/// sealing them, rebuilding those with damage inside): recovery's own writes are recorded,
/// and for every cut in them the state left is recovered once more. It must keep every
/// block the uninterrupted recovery kept, and stay within what was written.
#[test]
fn a_power_loss_during_recovery_loses_nothing_recovery_would_keep() {
    let mut tally = Tally::default();
    let mut rebuilt = 0;
    for seed in seeds(8) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        std::fs::create_dir(&root).unwrap();
        let run = write_run(seed, &root);
        let mut rng = Rng(seed ^ 0xc0ffee);
        for _ in 0..4 {
            // A first power loss with torn pages, so that recovery has damage to go past.
            let cut = run.start + rng.below((run.ops.len() - run.start + 1) as u64) as usize;
            let loss = Loss {
                files: Keep::Pages,
                dirs: Keep::Prefix,
            };
            let first = crash(&run.ops[..cut], loss, &mut rng);
            // On the disk of the temporary directory, so the rebuild writes with direct I/O.
            let disk = tempfile::tempdir().unwrap();
            let a = disk.path().join("store");
            std::fs::create_dir(&a).unwrap();
            first.materialize(&a);
            if !a.join("segments").exists() {
                continue; // lost before the store existed: nothing to recover
            }
            // Recovery, recorded; what it keeps is what a second power loss must not lose.
            let rec = Recording::start(&a);
            let from = rec.len();
            let cfg = WriterConfig {
                threads: 1,
                ..WriterConfig::default()
            };
            let (w, report) = StoreWriter::open(&a, cfg).unwrap();
            w.finish().unwrap();
            let ops = rec.ops();
            drop(rec);
            rebuilt += report
                .recovered
                .iter()
                .filter(|r| !r.damaged.is_empty())
                .count();
            let kept = present_blocks(&run, &a, 0, "uninterrupted recovery");
            let sub = Run {
                segs: BTreeMap::new(),
                ops,
                start: from,
            };
            for cut2 in sub.start..=sub.ops.len() {
                let loss2 = LOSSES[rng.below(LOSSES.len() as u64) as usize];
                let ctx = format!(
                    "seed {seed}, cut after op {cut} of {}, {loss:?}, then during recovery \
                     after op {cut2} of {}, {loss2:?}",
                    run.ops.len(),
                    sub.ops.len()
                );
                let image = crash(&sub.ops[..cut2], loss2, &mut rng);
                let out = scratch_dir();
                let b = out.path().join("store");
                std::fs::create_dir(&b).unwrap();
                image.materialize(&b);
                tally.states += 1;
                *tally.by_loss.entry(format!("{loss2:?}")).or_default() += 1;
                let expect = Expect {
                    block: &|seq, j| kept.get(&seq).is_some_and(|f| f.contains(&j)),
                    sealed: &|_| false,
                    handed_out: handed_out(&run, cut),
                    whole: false,
                };
                check_state(&run, &b, &expect, &mut tally, &ctx);
            }
        }
    }
    eprintln!("power loss during recovery: {rebuilt} rebuilds, {tally:?}");
    if env_u64("CAPSULE_POWERLOSS_SEED").is_none() {
        assert!(tally.required_blocks > 100, "{tally:?}");
        assert!(tally.recovered_segments > 10, "{tally:?}");
        assert!(rebuilt > 0, "no recovery went past damage");
    }
}

/// docs/format.md: on power loss the writer loses at most what was written in the last
/// sync interval. That must hold when no block follows the last one too (a capture gone
/// quiet): the writer thread fdatasyncs the open segment within the interval of its last
/// write, not only when the next block arrives.
#[test]
fn an_idle_writer_syncs_its_last_block_within_the_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    std::fs::create_dir(&root).unwrap();
    let rec = Recording::start(&root);
    let cfg = WriterConfig {
        threads: 1,
        sync_interval: std::time::Duration::from_millis(50),
        ..WriterConfig::default()
    };
    let (mut w, _) = StoreWriter::open(&root, cfg).unwrap();
    let i = w.add_interface(capsule_pcap::Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    for n in 0..3u8 {
        w.append(i, 1_000 + u64::from(n), 60, &[n; 60]).unwrap();
    }
    w.flush().unwrap();
    // Wait for the block's write, then for an fdatasync after it (at most 5 s: a hundred
    // intervals).
    let started = std::time::Instant::now();
    let synced = loop {
        let ops = rec.ops();
        let last_write = ops.iter().rposition(|o| matches!(o, Op::Write { .. }));
        // The identity file, last-seq, the segment's head, then the block.
        let wrote_block = ops.iter().filter(|o| matches!(o, Op::Write { .. })).count() >= 4;
        if let (true, Some(at)) = (wrote_block, last_write) {
            if ops[at..].iter().any(|o| matches!(o, Op::Sync { .. })) {
                break Some(ops);
            }
        }
        if started.elapsed() > std::time::Duration::from_secs(5) {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let ops = synced.expect("no fdatasync within 5 s of the last block's write (interval 50 ms)");
    // A power loss now, with everything not synced lost, keeps the three packets.
    let loss = Loss {
        files: Keep::Nothing,
        dirs: Keep::Nothing,
    };
    let out = scratch_dir();
    let lost = out.path().join("store");
    std::fs::create_dir(&lost).unwrap();
    crash(&ops, loss, &mut Rng(0)).materialize(&lost);
    let (w2, report) = StoreWriter::open(&lost, WriterConfig::default()).unwrap();
    w2.finish().unwrap();
    assert_eq!(report.recovered.len(), 1, "{report:?}");
    assert_eq!(
        report.recovered[0].kept_packets(),
        3,
        "{}",
        report.recovered[0]
    );
    w.finish().unwrap();
}

/// A packet of the pipeline test: `PKT!`, its number, then bytes derived from it.
fn packet(n: u32) -> Vec<u8> {
    let len = 60 + (n as usize * 37) % 900;
    let mut p = b"PKT!".to_vec();
    p.extend_from_slice(&n.to_le_bytes());
    let mut r = Rng(u64::from(n));
    while p.len() < len {
        p.push(r.next() as u8);
    }
    p
}

/// The packets in the store at `root` after recovery (numbers; each checked whole), and
/// checks that no segment is open or unreadable.
fn packets_in(root: &Path, ctx: &str) -> Vec<u32> {
    let (readers, unreadable) = Store::open(root).unwrap().open_segments_checked().unwrap();
    assert!(unreadable.is_empty(), "{ctx}: unreadable {unreadable:?}");
    let mut dctx = zstd::bulk::Decompressor::new().unwrap();
    let (mut frame, mut out) = (Vec::new(), Vec::new());
    let mut found = Vec::new();
    for r in &readers {
        assert_eq!(r.state(), SegmentState::Sealed, "{ctx}: {}", r.seq());
        assert_eq!(r.footer_problem(), None, "{ctx}: {}", r.seq());
        for b in 0..r.blocks().len() {
            r.read_block(b, &mut dctx, &mut frame, &mut out)
                .unwrap_or_else(|e| panic!("{ctx}: segment {} block {b}: {e}", r.seq()));
            let mut at = 0;
            while let Some(i) = out[at..].windows(4).position(|w| w == b"PKT!") {
                let start = at + i;
                let n = u32::from_le_bytes(out[start + 4..start + 8].try_into().unwrap());
                let p = packet(n);
                assert_eq!(
                    out.get(start..start + p.len()),
                    Some(&p[..]),
                    "{ctx}: packet {n} in segment {} block {b} differs",
                    r.seq()
                );
                found.push(n);
                at = start + p.len();
            }
        }
    }
    found.sort_unstable();
    let before = found.len();
    found.dedup();
    assert_eq!(found.len(), before, "{ctx}: a packet is stored twice");
    found
}

/// The whole writer (producer, compressor and writer threads, sealing by size, syncing by
/// time) recorded; power cut after every operation. The packets recovered when everything
/// unsynced is lost never shrink as the cut moves later (what was durable stays durable),
/// and whatever else of the unsynced writes survives (all of them, a prefix, torn pages)
/// recovery keeps at least those, each packet whole and once. (The threads' timing decides
/// where flushes fall, so a round is not replayed exactly from its seed.)
#[test]
fn the_writer_pipeline_never_loses_durable_packets_to_a_power_loss() {
    let mut tally = Tally::default();
    for seed in seeds(3) {
        let mut rng = Rng(seed ^ 0x919e);
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        std::fs::create_dir(&root).unwrap();
        let rec = Recording::start(&root);
        let start = rec.len();
        let cfg = WriterConfig {
            threads: 1,
            block_bytes: 4096,
            segment_bytes: 24 << 10,
            sync_interval: std::time::Duration::from_millis(1 + rng.below(5)),
            ..WriterConfig::default()
        };
        let (mut w, _) = StoreWriter::open(&root, cfg).unwrap();
        let i = w.add_interface(capsule_pcap::Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        });
        let total = 150 + rng.below(100) as u32;
        for n in 0..total {
            let p = packet(n);
            w.append(i, 1_000 + u64::from(n), p.len() as u32, &p)
                .unwrap();
            if rng.chance(1, 20) {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        w.finish().unwrap();
        let ops = rec.ops();
        drop(rec);
        let mut floor: Vec<u32> = Vec::new();
        for cut in start..=ops.len() {
            let ctx = format!("seed {seed}, cut after op {cut} of {}", ops.len());
            let mut open = |loss: Loss, rng: &mut Rng| {
                let out = scratch_dir();
                let r = out.path().join("store");
                std::fs::create_dir(&r).unwrap();
                crash(&ops[..cut], loss, rng).materialize(&r);
                let (w, report) = StoreWriter::open(&r, WriterConfig::default())
                    .unwrap_or_else(|e| panic!("{ctx}, {loss:?}: cannot open: {e}"));
                w.finish().unwrap();
                tally.states += 1;
                tally.recovered_segments += report.recovered.len();
                *tally.by_loss.entry(format!("{loss:?}")).or_default() += 1;
                packets_in(&r, &format!("{ctx}, {loss:?}"))
            };
            let durable = open(LOSSES[0], &mut rng);
            assert!(
                floor.iter().all(|n| durable.binary_search(n).is_ok()),
                "{ctx}: packets durable at an earlier cut are gone: had {floor:?}, now \
                 {durable:?}"
            );
            let loss = LOSSES[1 + rng.below(LOSSES.len() as u64 - 1) as usize];
            let some = open(loss, &mut rng);
            assert!(
                durable.iter().all(|n| some.binary_search(n).is_ok()),
                "{ctx}, {loss:?}: unsynced writes that survived cost durable packets: \
                 durable {durable:?}, recovered {some:?}"
            );
            tally.required_blocks += durable.len();
            floor = durable;
        }
        // Once the writer finished, every packet is durable.
        assert_eq!(floor, (0..total).collect::<Vec<_>>(), "seed {seed}");
    }
    eprintln!(
        "power loss in the writer pipeline: {} states, {} durable packets checked, {} torn \
         segments recovered, by loss {:?}",
        tally.states, tally.required_blocks, tally.recovered_segments, tally.by_loss
    );
    if env_u64("CAPSULE_POWERLOSS_SEED").is_none() {
        assert!(tally.required_blocks > 1000, "{tally:?}");
        assert!(tally.recovered_segments > 10, "{tally:?}");
    }
}
