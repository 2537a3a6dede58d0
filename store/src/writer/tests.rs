//! Tests of the writer pipeline: what goes in comes back, the ladder, recovery, retention.

use std::path::PathBuf;

use super::*;
use crate::format;
use crate::segment::{self, SegmentFile, SegmentState};
use crate::store::Store;
use capsule_pcap::read::fragment_packets;

/// `n` pseudo-random bytes (xorshift from `state`): payloads that do not compress.
fn incompressible(n: usize, state: &mut u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            *state as u8
        })
        .collect()
}

fn eth(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .map(|i| (seed as usize).wrapping_mul(31).wrapping_add(i * 7) as u8)
        .collect()
}

/// A frame with the ARP EtherType: non-IP, so it always goes to lane 0.
fn arp(seed: u64) -> Vec<u8> {
    let mut f = eth(64, seed);
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    f
}

fn small() -> WriterConfig {
    WriterConfig {
        block_bytes: 16 * 1024,
        segment_bytes: 64 * 1024,
        threads: 2,
        ..WriterConfig::default()
    }
}

/// Opens a writer and registers one Ethernet interface.
fn open_eth(root: &std::path::Path, cfg: WriterConfig) -> (StoreWriter, u32) {
    let (mut w, _) = StoreWriter::open(root, cfg).unwrap();
    let i = w.add_interface(Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    (w, i)
}

/// Every packet of the store, in file order: (segment interface, ts, orig_len, data).
fn read_all(root: &std::path::Path) -> Vec<(Interface, u64, u32, Vec<u8>)> {
    let store = Store::open(root).unwrap();
    let mut dctx = zstd::bulk::Decompressor::new().unwrap();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for seg in store.open_segments().unwrap() {
        for i in 0..seg.blocks().len() {
            seg.read_block(i, &mut dctx, &mut Vec::new(), &mut buf)
                .unwrap();
            let mut n = 0;
            for p in fragment_packets(&buf) {
                let p = p.unwrap();
                let iface = seg.interfaces()[p.iface as usize].clone();
                out.push((iface, p.ts_ns, p.orig_len, p.data.to_vec()));
                n += 1;
            }
            assert_eq!(n, seg.blocks()[i].packets as usize);
        }
    }
    // Lanes (DSCP classes) fill blocks side by side, so file order is not arrival order;
    // time order (stable) is what export gives back.
    out.sort_by_key(|p| p.1);
    out
}

#[test]
fn packets_come_back_whole_across_blocks_and_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
    assert_eq!(rep.existing_segments, 0);
    let a = w.add_interface(Interface {
        linktype: 1,
        snaplen: 65535,
        name: Some("eth0".into()),
        options: Default::default(),
    });
    let b = w.add_interface(Interface {
        linktype: 101,
        snaplen: 9000,
        name: None,
        options: Default::default(),
    });
    assert_eq!(
        w.add_interface(Interface {
            linktype: 1,
            snaplen: 65535,
            name: Some("eth0".into()),
            options: Default::default(),
        }),
        a
    );
    let mut want = Vec::new();
    for i in 0..3000u64 {
        let iface = if i % 3 == 0 { b } else { a };
        let data = eth(60 + (i as usize * 13) % 1400, i);
        let orig = data.len() as u32 + (i % 5) as u32;
        w.append(iface, 1_000_000_000 + i * 1000, orig, &data)
            .unwrap();
        want.push((
            w.ifaces[iface as usize].clone(),
            1_000_000_000 + i * 1000,
            orig,
            data,
        ));
    }
    let report = w.finish().unwrap();
    assert_eq!(report.packets, 3000);
    assert!(
        report.sealed.len() >= 2,
        "expected several segments, got {}",
        report.sealed.len()
    );
    assert_eq!(read_all(dir.path()), want);
    // Each segment is self-contained: its own interface list, starting at 0.
    for seg in Store::open(dir.path()).unwrap().open_segments().unwrap() {
        assert!(seg.interfaces().len() <= 2);
        assert_eq!(seg.state(), SegmentState::Sealed);
    }
}

/// Writes 2000 compressible packets with `cfg`, `urgent` set on the writer's urgency
/// counter first; returns how many blocks were stored raw and how many compressed.
fn raw_and_compressed_blocks(cfg: WriterConfig, urgent: u32) -> (usize, usize) {
    raw_and_compressed_blocks_with(cfg, urgent, false)
}

/// The same, with the disk held busy (`disk_bound` set every millisecond while the packets
/// are appended, whatever the writer thread measures) when `disk_busy`.
fn raw_and_compressed_blocks_with(
    cfg: WriterConfig,
    urgent: u32,
    disk_busy: bool,
) -> (usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, i) = open_eth(dir.path(), cfg);
    w.urgency().store(urgent, Ordering::Relaxed);
    let busy = w.pressure_gauge().disk_bound.clone();
    busy.store(disk_busy, Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let holder = disk_busy.then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                busy.store(true, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    });
    let mut want = Vec::new();
    for k in 0..2000u64 {
        let data = eth(200 + (k as usize * 7) % 700, k);
        w.append(i, 5_000 + k, data.len() as u32, &data).unwrap();
        want.push(data);
    }
    w.flush().unwrap();
    stop.store(true, Ordering::Relaxed);
    if let Some(h) = holder {
        h.join().unwrap();
    }
    w.finish().unwrap();
    let got: Vec<Vec<u8>> = read_all(dir.path()).into_iter().map(|p| p.3).collect();
    assert_eq!(got, want);
    let (mut raw, mut packed) = (0, 0);
    for seg in Store::open(dir.path()).unwrap().open_segments().unwrap() {
        for b in seg.blocks() {
            if b.compressed_len as usize == format::raw_frame_len(b.uncompressed_len as usize) {
                raw += 1;
            } else {
                packed += 1;
            }
        }
    }
    (raw, packed)
}

#[test]
fn store_level_keeps_blocks_uncompressed_in_raw_zstd_frames() {
    let store = WriterConfig {
        level: Level::Store,
        ..small()
    };
    let (raw, packed) = raw_and_compressed_blocks(store, 0);
    assert!(raw > 0 && packed == 0, "{raw} raw, {packed} compressed");
    let (raw, packed) = raw_and_compressed_blocks(small(), 0);
    assert!(
        raw == 0 && packed > 0,
        "level 1: {raw} raw, {packed} compressed"
    );
}

#[test]
fn a_reader_behind_makes_adaptive_compression_store_blocks() {
    let live = WriterConfig {
        adaptive: true,
        ..small()
    };
    // Blocks are stored unless the disk is the limit (busy, and blocks queue for the writer:
    // then compressed, see the ladder test); the first ones always are.
    let (raw, packed) = raw_and_compressed_blocks(live.clone(), 1);
    assert!(raw > 0, "urgent: {raw} raw, {packed} compressed");
    // A busy disk (the writer thread writing half its time) whose writer keeps up is not
    // the limit: a reader behind still gets stored blocks. (Busy alone used to mean level 1
    // for every block, and the reader dropped packets at the sender's ceiling.)
    let (raw, packed) = raw_and_compressed_blocks_with(live.clone(), 1, true);
    assert!(raw > 0, "urgent, disk busy: {raw} raw, {packed} compressed");
    // Not adaptive (import): urgency is ignored.
    let (raw, _) = raw_and_compressed_blocks(small(), 1);
    assert_eq!(raw, 0);
    // Live capture starts at the store rung, no reader behind: nothing is known yet about
    // the CPU it can spend (the ladder climbs after 2 s of calm, see compress.rs).
    let (raw, packed) = raw_and_compressed_blocks(live.clone(), 0);
    assert!(raw > 0, "at startup: {raw} raw, {packed} compressed");
    // The gauge counts the rungs used and the readers behind.
    let dir = tempfile::tempdir().unwrap();
    let (mut w, i) = open_eth(dir.path(), live);
    let gauge = w.pressure_gauge();
    w.urgency().store(2, Ordering::Relaxed);
    for k in 0..50u64 {
        w.append(i, k, 100, &eth(100, k)).unwrap();
    }
    w.flush().unwrap();
    let p = gauge.read();
    assert_eq!(p.readers_behind, 2);
    w.finish().unwrap();
    assert!(gauge.read().blocks_by_rung[3] > 0, "{:?}", gauge.read());
}

#[test]
fn unsorted_input_is_sorted_within_each_block_stably() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, i) = open_eth(dir.path(), small());
    let ts = [50u64, 10, 30, 10, 20];
    for (k, t) in ts.iter().enumerate() {
        w.append(i, *t, 64, &arp(k as u64)).unwrap();
    }
    w.finish().unwrap();
    let got: Vec<(u64, Vec<u8>)> = read_all(dir.path())
        .into_iter()
        .map(|(_, t, _, d)| (t, d))
        .collect();
    let mut want: Vec<(u64, Vec<u8>)> = ts
        .iter()
        .enumerate()
        .map(|(k, t)| (*t, arp(k as u64)))
        .collect();
    want.sort_by_key(|x| x.0);
    assert_eq!(got, want);
    // The first packet back in time cut the open blocks; the rest of the segment is one
    // stream, sorted (stably) within its block.
    let seg = &Store::open(dir.path()).unwrap().open_segments().unwrap()[0];
    let spans: Vec<(u64, u64, u32)> = seg
        .blocks()
        .iter()
        .filter(|b| b.packets > 0)
        .map(|b| (b.first_ns, b.last_ns, b.packets))
        .collect();
    assert_eq!(spans, vec![(50, 50, 1), (10, 30, 4)]);
}

#[test]
fn the_open_segment_is_readable_while_being_written() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = WriterConfig {
        segment_bytes: 1 << 30,
        ..small()
    };
    let (mut w, i) = open_eth(dir.path(), cfg);
    for k in 0..500u64 {
        w.append(i, k, 1000, &eth(1000, k)).unwrap();
    }
    w.flush().unwrap();
    // The writer thread writes asynchronously; wait until every block is visible.
    let store = Store::open(dir.path()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let segs = store.open_segments().unwrap();
        let n: u64 = segs
            .iter()
            .flat_map(|s| s.blocks())
            .map(|b| u64::from(b.packets))
            .sum();
        if n == 500 {
            assert_eq!(segs[0].state(), SegmentState::Open);
            break;
        }
        assert!(Instant::now() < deadline, "only {n} packets visible");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(matches!(
        StoreWriter::open(dir.path(), small()),
        Err(StoreError::Locked { .. })
    ));
    w.finish().unwrap();
    assert_eq!(read_all(dir.path()).len(), 500);
}

/// Writes a segment of `blocks` blocks through SegmentFile and leaves it unsealed, as a
/// crash would. Returns the path and the offsets of the blocks, then of the end of the
/// last block (the file may go on with zero padding after it: direct I/O).
fn torn_segment(dir: &std::path::Path, blocks: u32) -> (PathBuf, Vec<u64>) {
    let segdir = Store::create_or_open(dir).unwrap().segments_dir();
    let mut seg = SegmentFile::create(&segdir, 1, 0).unwrap();
    let mut c = zstd::bulk::Compressor::new(1).unwrap();
    c.include_checksum(true).unwrap();
    let mut offsets = Vec::new();
    for b in 0..blocks {
        let mut data = Vec::new();
        let mut new_interfaces = Vec::new();
        if b == 0 {
            let iface = Interface {
                linktype: 1,
                snaplen: 0,
                name: None,
                options: Default::default(),
            };
            pw::pcapng_idb(&mut data, &iface);
            new_interfaces.push(iface);
        }
        for k in 0..10u64 {
            pw::pcapng_epb(&mut data, 0, u64::from(b) * 100 + k, 500, &eth(500, k));
        }
        let frame = c.compress(&data).unwrap();
        let meta = BlockMeta {
            first_ns: u64::from(b) * 100,
            last_ns: u64::from(b) * 100 + 9,
            packets: 10,
            wire_bytes: 5000,
            compressed_len: frame.len() as u32,
            uncompressed_len: data.len() as u32,
            frame_crc: crate::crc::crc32c(&frame),
            new_interfaces,
            ..BlockMeta::default()
        };
        offsets.push(seg.len());
        seg.append(meta, &frame).unwrap();
    }
    offsets.push(seg.len());
    let path = segdir.join(segment::open_name(1));
    drop(seg);
    (path, offsets)
}

#[test]
fn recovery_cuts_a_torn_tail_back_to_the_last_whole_block() {
    for cut_into_block in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (path, offsets) = torn_segment(dir.path(), 5);
        let full = offsets[5];
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        if cut_into_block {
            // Tear the last block in the middle of its frame.
            f.set_len(full - 40).unwrap();
        } else {
            // Garbage after the last block, as a torn write of the next one leaves.
            std::os::unix::fs::FileExt::write_all_at(&f, &[0xAB; 300], full).unwrap();
        }
        let (w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
        assert_eq!(rep.recovered.len(), 1);
        let r = &rep.recovered[0];
        let kept = if cut_into_block { 4 } else { 5 };
        assert_eq!(r.kept_blocks(), kept);
        assert_eq!(r.kept_packets(), kept as u64 * 10);
        let good = if cut_into_block { offsets[4] } else { full };
        assert_eq!(r.cut_at, good);
        assert!(r.problem.is_some());
        assert!(r.sealed().is_some());
        w.finish().unwrap();
        let got = read_all(dir.path());
        assert_eq!(got.len(), kept * 10);
        assert!(got.windows(2).all(|p| p[0].1 <= p[1].1));
        assert!(
            !path.exists(),
            "the torn file was sealed under its final name"
        );
    }
}

#[test]
fn recovery_goes_past_a_block_whose_frame_checksum_fails_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (path, offsets) = torn_segment(dir.path(), 3);
    // Flip a byte inside block 1's frame (after its header frame).
    let bytes = std::fs::read(&path).unwrap();
    let mut bad = bytes.clone();
    let at = offsets[2] as usize - 5;
    bad[at] ^= 0xFF;
    std::fs::write(&path, &bad).unwrap();
    let (w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
    let r = &rep.recovered[0];
    // Blocks 0 and 2 are kept; block 1's bytes are moved aside, not deleted.
    assert_eq!(r.kept_blocks(), 2, "{r}");
    assert_eq!(r.damaged.len(), 1, "{r}");
    assert!(r.damaged[0].problem.contains("crc32c"), "{r}");
    let aside = std::fs::read(&r.damaged[0].aside).unwrap();
    let d = &r.damaged[0];
    assert_eq!(
        aside,
        bad[d.offset as usize..(d.offset + d.len) as usize],
        "the damaged bytes, verbatim"
    );
    assert!(r.to_string().contains("went past"), "{r}");
    w.finish().unwrap();
    let got = read_all(dir.path());
    assert_eq!(got.len(), 20, "both intact blocks' packets");
    // The rebuilt segment is a valid sealed segment: stock zstd reads it whole.
    let sealed = r.sealed().unwrap().path.clone();
    let all = zstd::stream::decode_all(std::fs::File::open(&sealed).unwrap()).unwrap();
    assert!(!all.is_empty());
}

#[test]
fn recovery_goes_past_a_damaged_block_header_to_the_next_block() {
    let dir = tempfile::tempdir().unwrap();
    let (path, offsets) = torn_segment(dir.path(), 4);
    // Flip a byte inside block 1's header frame.
    let mut bad = std::fs::read(&path).unwrap();
    let at = offsets[1] as usize + 30;
    bad[at] ^= 0xFF;
    std::fs::write(&path, &bad).unwrap();
    let (w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
    let r = &rep.recovered[0];
    assert_eq!(r.kept_blocks(), 3, "{r}");
    assert_eq!(r.damaged.len(), 1, "{r}");
    w.finish().unwrap();
    assert_eq!(read_all(dir.path()).len(), 30);
}

#[test]
fn a_rebuild_interrupted_by_a_crash_starts_again_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (path, offsets) = torn_segment(dir.path(), 3);
    let mut bad = std::fs::read(&path).unwrap();
    bad[offsets[2] as usize - 5] ^= 0xFF;
    std::fs::write(&path, &bad).unwrap();
    // As if the writer died right after moving the torn file aside for its rebuild, with a
    // partial rebuild under the open name.
    let rebuilding = path.with_extension("open.rebuilding");
    std::fs::rename(&path, &rebuilding).unwrap();
    std::fs::write(&path, b"partial").unwrap();
    let (w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
    assert_eq!(rep.recovered[0].kept_blocks(), 2, "{}", rep.recovered[0]);
    w.finish().unwrap();
    assert!(!rebuilding.exists());
    assert_eq!(read_all(dir.path()).len(), 20);
}

#[test]
fn a_segment_with_a_damaged_head_is_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = torn_segment(dir.path(), 2);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[0] = 0; // not a zstd frame any more
    std::fs::write(&path, &bytes).unwrap();
    let (w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
    assert!(rep.recovered[0].sealed().is_none());
    let aside = rep.recovered[0].moved_aside().unwrap().to_path_buf();
    assert_eq!(aside, path.with_extension("open.damaged"));
    w.finish().unwrap();
    assert!(aside.exists());
    assert!(read_all(dir.path()).is_empty());
    // Segment numbers are never reused, and a second damaged file does not replace it.
    torn_segment(dir.path(), 1);
    std::fs::write(&path, b"not zstd at all").unwrap();
    let (mut w, rep) = StoreWriter::open(dir.path(), small()).unwrap();
    let aside2 = rep.recovered[0].moved_aside().unwrap().to_path_buf();
    assert_ne!(aside2, aside);
    assert!(aside.exists() && aside2.exists());
    let i = w.add_interface(Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    w.append(i, 1, 60, &[0; 60]).unwrap();
    let rep = w.finish().unwrap();
    assert_eq!(rep.sealed[0].seq, 2, "seq 1 was used by the damaged files");
}

#[test]
fn retention_keeps_the_store_under_its_budget_and_deletes_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let max = 400 * 1024;
    let cfg = WriterConfig {
        max_bytes: Some(max),
        ..small()
    };
    let (mut w, _) = StoreWriter::open(dir.path(), cfg).unwrap();
    assert_eq!(w.config().segment_bytes, 64 * 1024);
    let i = w.add_interface(Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    // Incompressible payloads so the disk really fills.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for k in 0..3000u64 {
        w.append(i, k, 1000, &incompressible(1000, &mut x)).unwrap();
    }
    let report = w.finish().unwrap();
    assert!(!report.deleted.is_empty());
    assert!(report.store_bytes <= max, "{} > {max}", report.store_bytes);
    let store = Store::open(dir.path()).unwrap();
    let on_disk: u64 = store.list().unwrap().iter().map(|e| e.bytes).sum();
    assert!(on_disk <= max, "{on_disk} > {max}");
    assert_eq!(on_disk, report.store_bytes);
    let first = store.list().unwrap()[0].seq;
    assert_eq!(
        first,
        report.deleted.len() as u64 + 1,
        "oldest deleted first"
    );
    // What remains is the newest packets, whole and in order, ending with the last.
    let got = read_all(dir.path());
    assert_eq!(got.last().unwrap().1, 2999);
    assert!(got.windows(2).all(|p| p[1].1 == p[0].1 + 1));

    // A smaller budget at the next open deletes old segments before anything is written.
    let smaller = 260 * 1024;
    assert!(
        on_disk > smaller,
        "the test needs a store larger than the new budget"
    );
    let cfg = WriterConfig {
        max_bytes: Some(smaller),
        ..small()
    };
    let (w, rep) = StoreWriter::open(dir.path(), cfg).unwrap();
    assert!(!rep.deleted.is_empty());
    w.finish().unwrap();
    let on_disk: u64 = store.list().unwrap().iter().map(|e| e.bytes).sum();
    assert!(on_disk <= smaller, "{on_disk} > {smaller}");
}

#[test]
fn with_a_tier_retention_trims_only_uploaded_segments_oldest_first_keeping_them_live() {
    let dir = tempfile::tempdir().unwrap();
    let max = 400 * 1024;
    let cfg = || WriterConfig {
        max_bytes: Some(max),
        tier: true,
        ..small()
    };
    let (mut w, i) = open_eth(dir.path(), cfg());
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for k in 0..3000u64 {
        w.append(i, k, 1000, &incompressible(1000, &mut x)).unwrap();
    }
    let report = w.finish().unwrap();
    // Nothing uploaded: nothing deleted, whatever the budget.
    assert!(report.deleted.is_empty(), "{:?}", report.deleted);
    assert!(report.store_bytes > max);
    let store = Store::open(dir.path()).unwrap();
    let segs = store.segments_dir();
    let all: Vec<u64> = store.list().unwrap().iter().map(|e| e.seq).collect();
    // Segments 2 and 3 uploaded (not 1): the next writer trims those two only.
    for q in [all[1], all[2]] {
        let e = &store.list().unwrap()[(q - all[0]) as usize];
        crate::ledger::record_tiered(&segs, q, e.bytes, "etag").unwrap();
    }
    let (w, rep) = StoreWriter::open(dir.path(), cfg()).unwrap();
    let trimmed: Vec<u64> = rep.deleted.iter().map(|d| d.seq).collect();
    assert_eq!(trimmed, [all[1], all[2]]);
    w.finish().unwrap();
    let left: Vec<u64> = store.list().unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(left[0], all[0], "the segment not uploaded stays");
    let l = crate::ledger::read(&segs).unwrap().unwrap();
    use crate::ledger::Location;
    assert_eq!(l.location(all[0]), Some(Location::Local));
    assert_eq!(l.location(all[1]), Some(Location::Tiered));
    assert_eq!(l.location(all[2]), Some(Location::Tiered));
    // Readers do not call a trimmed segment missing; without a tier they name it unreadable
    // with its span and how to read it.
    let (_, unreadable) = store.open_segments_checked().unwrap();
    assert_eq!(unreadable.len(), 2, "{unreadable:?}");
    assert!(
        unreadable[0].problem.contains("[tier]"),
        "{}",
        unreadable[0].problem
    );
    assert!(unreadable[0].span.is_some());
}

#[test]
fn segments_rotate_by_the_packet_time_they_span() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = WriterConfig {
        segment_age: Duration::from_secs(1),
        block_bytes: 4096,
        ..small()
    };
    let (mut w, i) = open_eth(dir.path(), cfg);
    // 5 s of packet time, 10 ms apart, small enough that size never cuts a segment.
    for k in 0..500u64 {
        w.append(i, k * 10_000_000, 100, &eth(100, k)).unwrap();
    }
    let rep = w.finish().unwrap();
    assert!(
        (5..=6).contains(&rep.sealed.len()),
        "{} segments",
        rep.sealed.len()
    );
    for s in &rep.sealed {
        assert!(s.last_ns - s.first_ns < 1_000_000_000 + 4096 * 10_000_000 / 100);
    }
}

#[test]
fn tick_cuts_a_block_once_it_is_old_enough() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = WriterConfig {
        block_age: Duration::from_millis(20),
        ..small()
    };
    let (mut w, i) = open_eth(dir.path(), cfg);
    w.append(i, 1, 100, &eth(100, 1)).unwrap();
    // The interface's own block was sent at once.
    assert_eq!(w.blocks, 1);
    w.tick().unwrap();
    assert_eq!(w.blocks, 1, "a fresh block is not cut");
    std::thread::sleep(Duration::from_millis(30));
    w.tick().unwrap();
    assert_eq!(w.blocks, 2, "an old block is cut");
    w.tick().unwrap();
    assert_eq!(w.blocks, 2, "an empty block is never cut");
    w.finish().unwrap();
}

/// An idle link seals a sizeable open segment (so its raw blocks reach the compactor), and a
/// small one stays open; traffic after the seal goes into the next segment, and nothing is
/// lost or duplicated.
#[test]
fn an_idle_link_seals_a_sizeable_open_segment() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = WriterConfig {
        block_age: Duration::from_millis(10),
        // 96 KB of traffic below: past an eighth (64 KiB), far from a size rotation even
        // when the compression ratio is still guessed.
        segment_bytes: 512 * 1024,
        idle_seal: Duration::from_millis(100),
        ..small()
    };
    let (mut w, i) = open_eth(dir.path(), cfg);
    let sealed = |dir: &std::path::Path| {
        Store::open(dir)
            .unwrap()
            .list()
            .unwrap()
            .iter()
            .filter(|e| e.state == SegmentState::Sealed)
            .count()
    };
    // A few packets: under an eighth of the segment size, so idle time leaves it open.
    for t in 0..4u64 {
        w.append(i, t, 200, &eth(200, t)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(150));
    w.tick().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        sealed(dir.path()),
        0,
        "a small open segment was sealed when idle"
    );
    // Past an eighth of the segment (in what it takes on disk: random bytes, which do not
    // compress): the next idle tick seals it.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for t in 4..100u64 {
        w.append(i, t, 1000, &incompressible(1000, &mut x)).unwrap();
    }
    w.tick().unwrap();
    assert_eq!(sealed(dir.path()), 0, "sealed while packets still arrive");
    std::thread::sleep(Duration::from_millis(150));
    w.tick().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while sealed(dir.path()) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle segment was not sealed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Traffic again: a new segment, sealed at finish.
    for t in 100..110u64 {
        w.append(i, t, 200, &eth(200, t)).unwrap();
    }
    let rep = w.finish().unwrap();
    assert_eq!(rep.sealed.len(), 2, "{:?}", rep.sealed);
    assert_eq!(rep.packets, 110);
    assert_eq!(sealed(dir.path()), 2);
}

#[test]
fn bad_configurations_and_packets_are_refused_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = WriterConfig {
        max_bytes: Some(1000),
        ..small()
    };
    let err = StoreWriter::open(dir.path(), cfg).unwrap_err();
    assert!(err.to_string().contains("too small"), "{err}");
    let (mut w, _) = StoreWriter::open(dir.path(), small()).unwrap();
    let err = w.append(0, 0, 10, &[0; 10]).unwrap_err();
    assert!(err.to_string().contains("unknown interface"), "{err}");
    let i = w.add_interface(Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    let err = w.append(i, 0, 10, &vec![0; MAX_PACKET + 1]).unwrap_err();
    assert!(err.to_string().contains("exceed"), "{err}");
    w.finish().unwrap();
}

#[test]
fn budgets_set_while_writing_are_saved_and_applied_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, _) = StoreWriter::open(dir.path(), small()).unwrap();
    let i = w.add_interface(Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for k in 0..1500u64 {
        let data: Vec<u8> = (0..1000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        w.append(i, k * 1_000_000_000, 1000, &data).unwrap();
    }
    w.flush().unwrap();
    let handle = w.budget_handle();
    // Too small a byte budget is refused, as at open, and nothing is saved.
    assert!(handle
        .set(crate::budget::Budgets {
            max_bytes: Some(1000),
            ..Default::default()
        })
        .is_err());
    assert_eq!(crate::budget::load(dir.path()).unwrap(), None);
    // An age budget of 100 s back from the newest packet (1499 s): the writer thread deletes
    // every sealed segment older than that without another packet written.
    let b = crate::budget::Budgets {
        max_age: Some(Duration::from_secs(100)),
        ..Default::default()
    };
    handle.set(b).unwrap();
    assert_eq!(crate::budget::load(dir.path()).unwrap(), Some(b));
    let store = Store::open(dir.path()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.list().unwrap()[0].seq == 1 {
        assert!(std::time::Instant::now() < deadline, "nothing deleted");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The gauge (status, metrics) reports the byte budget now in force.
    assert_eq!(w.pressure_gauge().read().budget_bytes, None);
    handle
        .set(crate::budget::Budgets {
            max_bytes: Some(10 << 20),
            ..b
        })
        .unwrap();
    assert_eq!(w.pressure_gauge().read().budget_bytes, Some(10 << 20));
    let report = w.finish().unwrap();
    assert!(!report.deleted.is_empty());
    let got = read_all(dir.path());
    assert!(got[0].1 >= 1300 * 1_000_000_000, "kept from {}", got[0].1);
    assert_eq!(got.last().unwrap().1, 1499 * 1_000_000_000);
}

/// Cuts every packet whose timestamp is odd, keeping its first 20 bytes.
#[derive(Debug)]
struct OddCut;

impl CutPolicy for OddCut {
    fn decide(
        &mut self,
        _: u16,
        ts_ns: u64,
        _: u32,
        _: &[u8],
        _: &capsule_wire::Dissected,
    ) -> Option<usize> {
        (ts_ns % 2 == 1).then_some(20)
    }
}

#[test]
fn cut_packets_leave_header_records_sorted_with_the_packets_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, i) = open_eth(dir.path(), small());
    w.set_cut_policy(Box::new(OddCut));
    // Out of time order now and then: blocks are sorted, the records with them.
    let mut ts: Vec<u64> = (0..2000u64).map(|n| 1000 + n).collect();
    for k in (0..ts.len() - 1).step_by(7) {
        ts.swap(k, k + 1);
    }
    for &t in &ts {
        w.append(i, t, 100, &arp(t)).unwrap();
    }
    assert_eq!((w.packets(), w.cut_packets()), (1000, 1000));
    let rep = w.finish().unwrap();
    assert!(rep.sealed.len() > 1, "several segments");
    assert_eq!((rep.packets, rep.cut_packets), (1000, 1000));
    // Readers see the stored packets only; their counts match the block headers.
    let stored = read_all(dir.path());
    assert_eq!(stored.len(), 1000);
    assert!(stored.iter().all(|p| p.1 % 2 == 0 && p.3 == arp(p.1)));
    // The records hold every cut packet's first bytes and original length, in time order.
    let store = Store::open(dir.path()).unwrap();
    let mut dctx = zstd::bulk::Decompressor::new().unwrap();
    let (mut buf, mut cut) = (Vec::new(), 0);
    for seg in store.open_segments().unwrap() {
        for b in 0..seg.blocks().len() {
            seg.read_block(b, &mut dctx, &mut Vec::new(), &mut buf)
                .unwrap();
            let mut prev = 0;
            for r in capsule_pcap::read::fragment_records(&buf) {
                let (p, is_cut) = r.unwrap();
                assert!(p.ts_ns >= prev, "sorted");
                prev = p.ts_ns;
                assert_eq!(is_cut, p.ts_ns % 2 == 1);
                if is_cut {
                    assert_eq!((p.orig_len, p.data), (100, &arp(p.ts_ns)[..20]));
                    cut += 1;
                }
            }
        }
    }
    assert_eq!(cut, 1000);
}

/// Counts the packets and pieces of the blocks it is given, as the side index reads them.
#[derive(Debug, Default, Clone)]
struct CountingIndexer {
    packets: Arc<AtomicU64>,
    pieces: Arc<AtomicU64>,
}

impl crate::indexer::Indexer for CountingIndexer {
    fn reconcile(&mut self, _: &Store, _: &[crate::store::SegmentEntry]) -> Result<Vec<u64>> {
        Ok(Vec::new())
    }
    fn begin(&mut self, _: u64) {}
    fn block(&mut self, meta: &BlockMeta, data: &[&[u8]], _: Option<&[crate::indexer::Record]>) {
        let n = data
            .iter()
            .flat_map(|piece| fragment_packets(piece))
            .inspect(|p| assert!(p.is_ok(), "a bad record"))
            .count();
        assert_eq!(n, meta.packets as usize, "block {}", meta.index);
        self.packets.fetch_add(n as u64, Ordering::Relaxed);
        self.pieces.fetch_add(data.len() as u64, Ordering::Relaxed);
    }
    fn sealed(&mut self, _: &SealedSegment) -> Result<()> {
        Ok(())
    }
    fn deleted(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
}

/// At the store level, blocks of the default size are built in their frames and written from
/// the producer's buffers: every packet comes back, the side index is handed each block in
/// its raw blocks (whole records in each), headers are padded to place the bodies, and a
/// packet larger than a raw block, or a block that needs sorting, takes the copying path.
#[test]
fn store_level_blocks_built_in_their_frames_come_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = WriterConfig {
        level: Level::Store,
        block_bytes: 1 << 20,
        segment_bytes: 16 << 20,
        ..WriterConfig::default()
    };
    let ix = CountingIndexer::default();
    let (mut w, _) = StoreWriter::open_with(dir.path(), cfg, Box::new(ix.clone())).unwrap();
    let i = w.add_interface(Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    let mut want = Vec::new();
    let mut ts = 1_000u64;
    for k in 0..40_000u64 {
        let n = match k {
            5_000 => MAX_PACKET, // larger than a raw block
            _ => 60 + (k as usize * 7919) % 1455,
        };
        let data = eth(n, k);
        // Two equal timestamps now and then: a tie stays in its lane.
        ts += u64::from(k % 50 != 0);
        w.append(i, ts, data.len() as u32, &data).unwrap();
        want.push((ts, data));
    }
    w.finish().unwrap();
    let got: Vec<(u64, Vec<u8>)> = read_all(dir.path())
        .into_iter()
        .map(|p| (p.1, p.3))
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "packets differ");
    assert_eq!(ix.packets.load(Ordering::Relaxed), want.len() as u64);
    let mut padded = 0;
    let mut stored = 0;
    for e in Store::open(dir.path()).unwrap().list().unwrap() {
        let file = std::fs::File::open(&e.path).unwrap();
        let s = crate::segment::scan(&e.path, &file, false).unwrap();
        assert_eq!(s.problem, None);
        stored += s
            .blocks
            .iter()
            .filter(|b| b.compression == format::Compression::Stored)
            .count();
        padded += s.blocks.iter().filter(|b| b.header_pad > 0).count();
        assert!(crate::verify::verify_segment(&e.path).is_empty());
    }
    // 30 MB of packets in 1 MiB blocks: most were written from their buffers.
    assert!(
        stored > 20 && padded > stored / 2,
        "{stored} stored, {padded} padded"
    );
    // Each block came to the index in raw blocks of at most 128 KiB.
    assert!(ix.pieces.load(Ordering::Relaxed) > 8 * stored as u64);
}

#[test]
fn block_buffers_are_on_huge_pages_and_the_blocks_read_back_are_not() {
    // The unit tests run on the binary's allocator (lib.rs): only what asked is mapped.
    let dir = tempfile::tempdir().unwrap();
    let live = WriterConfig {
        adaptive: true,
        level: Level::Store,
        ..small()
    };
    let block = 2 << 20;
    let (mut w, i) = open_eth(
        dir.path(),
        WriterConfig {
            block_bytes: block,
            segment_bytes: 8 * block as u64,
            ..live
        },
    );
    let mut state = 7;
    for k in 0..6_000u64 {
        w.append(i, k, 1500, &incompressible(1500, &mut state))
            .unwrap();
    }
    // The open blocks (warm at open, and those handed back after cuts).
    for lane in &w.lanes {
        assert!(capsule_sys::huge::is_mapped(lane.buf.as_ptr()));
    }
    w.flush().unwrap();
    drop(w);
    // A reader's block of the same size is an ordinary allocation.
    let store = Store::open(dir.path()).unwrap();
    let mut dctx = zstd::bulk::Decompressor::new().unwrap();
    let mut largest = 0;
    for seg in store.open_segments().unwrap() {
        for k in 0..seg.blocks().len() {
            let mut buf = Vec::new();
            seg.read_block(k, &mut dctx, &mut Vec::new(), &mut buf)
                .unwrap();
            largest = largest.max(buf.len());
            assert!(!capsule_sys::huge::is_mapped(buf.as_ptr()));
        }
    }
    assert!(largest >= capsule_sys::huge::LARGE, "{largest}");
}
