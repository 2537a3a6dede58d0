//! Throughput, in bytes per second, on 64 MB of synthetic traffic:
//! * `synth/generate`: making the traffic (must stay far above 1 Gbit/s per CPU-second);
//! * `pcap/read`: the checked pcap reader alone;
//! * `store/ingest`: pcap parse + block build + zstd + write, into a fresh store;
//! * `store/export`: read + decompress + merge + pcap encode, to a sink.
//! * `store/append_cpu`: the producer's own CPU time to append the same packets (already
//!   parsed) into a fresh store: lane choice, block building, sorting, hand-over. This is what
//!   live capture pays per packet on its thread; `store/ingest` is wall time, mostly zstd on
//!   the other threads, so it hardly moves with the producer's cost on two cores;
//! * `store/append_cpu_unsorted`: the same with packets up to 240 µs late, so that the
//!   segment is written as one stream and most blocks are sorted before they are cut.
//!
//! And per packet, on the same traffic, the parts of ingest that run for every packet
//! (elements per second; criterion prints the time per pass over all packets):
//! * `packet/lane`: the producer's lane choice (DSCP only, [`capsule_wire::dscp_of`]);
//! * `packet/dissect`: a full dissection, as the side index does;
//! * `packet/index`: the side index of every block (walk, dissect, flow records).
//! * `packet/index_journal`: the same, plus each block's journal record encoded and
//!   appended to a file, as the writer thread does for the open segment.
//!
//! The end-to-end comparison against `zstd -1 -T2` on a 1 GB file, in the same run, is
//! scripts/bench_ingest.py.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn synth_pcap() -> Vec<u8> {
    let cfg = capsule_synth::SynthConfig {
        duration_ns: 512_000_000,
        rate_bps: 1_000_000_000,
        ..capsule_synth::SynthConfig::default()
    };
    let mut out = Vec::new();
    capsule_synth::generate(&cfg, &mut out).expect("synth writes to memory");
    out
}

fn synth_and_read(c: &mut Criterion) {
    let pcap = synth_pcap();
    let mut g = c.benchmark_group("synth");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(pcap.len() as u64));
    g.bench_function("generate", |b| {
        let cfg = capsule_synth::SynthConfig {
            duration_ns: 512_000_000,
            rate_bps: 1_000_000_000,
            ..capsule_synth::SynthConfig::default()
        };
        b.iter(|| capsule_synth::generate(&cfg, std::io::sink()).unwrap())
    });
    g.finish();
    let mut g = c.benchmark_group("pcap");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(pcap.len() as u64));
    g.bench_function("read", |b| {
        b.iter(|| {
            let mut r = capsule_pcap::CaptureReader::new("bench", &pcap[..]).unwrap();
            let mut n = 0u64;
            while let Some(rec) = r.next_record().unwrap() {
                if let capsule_pcap::Record::Packet(p) = rec {
                    n += p.data.len() as u64;
                }
            }
            n
        })
    });
    g.finish();
}

fn ingest(c: &mut Criterion) {
    let pcap = synth_pcap();
    let mut g = c.benchmark_group("store");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(pcap.len() as u64));
    g.bench_function("ingest", |b| {
        b.iter(|| {
            let dir = tempfile::tempdir().unwrap();
            let (mut w, _) = capsule_index::open_writer(dir.path(), Default::default()).unwrap();
            let rep = capsule_capture::import_reader(&mut w, "bench", &pcap[..]).unwrap();
            assert!(rep.error.is_none());
            w.finish().unwrap()
        })
    });
    let dir = tempfile::tempdir().unwrap();
    let (mut w, _) = capsule_index::open_writer(dir.path(), Default::default()).unwrap();
    capsule_capture::import_reader(&mut w, "bench", &pcap[..]).unwrap();
    w.finish().unwrap();
    let store = capsule_store::Store::open(dir.path()).unwrap();
    g.bench_function("export", |b| {
        b.iter(|| capsule_replay::export(&store, &Default::default(), std::io::sink()).unwrap())
    });
    g.finish();
}

/// CPU time the calling thread has run so far (Linux: `/proc/thread-self/schedstat`, whose
/// first field is nanoseconds on the CPU, brought up to date at each scheduler tick).
fn thread_cpu() -> std::time::Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux schedstat");
    let ns = s.split_whitespace().next().and_then(|f| f.parse().ok());
    std::time::Duration::from_nanos(ns.expect("schedstat starts with the run time in ns"))
}

fn append_cpu(c: &mut Criterion) {
    let pkts = packets(&synth_pcap());
    let bytes: usize = pkts.iter().map(|p| p.2.len()).sum();
    let span = pkts.last().unwrap().0 - pkts[0].0 + 1_000_000;
    let mut g = c.benchmark_group("store");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes as u64));
    // In order, and with every packet up to 240 µs late (most blocks are then sorted).
    for (name, jitter_ns) in [("append_cpu", 0), ("append_cpu_unsorted", 20_000)] {
        // One writer for every pass, as in a long capture: its buffers are warm, and the
        // budget keeps the store at a few segments.
        let dir = tempfile::tempdir().unwrap();
        let cfg = capsule_store::WriterConfig {
            max_bytes: Some(256 << 20),
            ..Default::default()
        };
        let (mut w, _) = capsule_index::open_writer(dir.path(), cfg).unwrap();
        let i = w.add_interface(capsule_pcap::Interface {
            linktype: 1,
            snaplen: 0,
            name: None,
            options: Default::default(),
        });
        let mut pass = 0u64;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut cpu = std::time::Duration::ZERO;
                for _ in 0..iters {
                    let start = thread_cpu();
                    for (k, (ts, orig, d)) in pkts.iter().enumerate() {
                        let late = (k as u64 * 7919 % 13) * jitter_ns;
                        w.append(i, ts + pass * span + late, *orig, d).unwrap();
                    }
                    w.flush().unwrap();
                    cpu += thread_cpu() - start;
                    pass += 1;
                }
                cpu
            })
        });
        w.finish().unwrap();
    }
    g.finish();
}

/// The synth traffic as (timestamp, original length, bytes), Ethernet, in file order.
fn packets(pcap: &[u8]) -> Vec<(u64, u32, Vec<u8>)> {
    let mut r = capsule_pcap::CaptureReader::new("bench", pcap).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if let capsule_pcap::Record::Packet(p) = rec {
            out.push((p.ts_ns, p.orig_len, p.data.to_vec()));
        }
    }
    out
}

fn per_packet(c: &mut Criterion) {
    use capsule_wire::{dissect, dscp_of};
    let pkts = packets(&synth_pcap());
    // Header parsing runs on a packet that was just copied, so it is in the cache: measure
    // it on a few thousand packets in a loop, not on 64 MB that come from memory each time.
    let hot = &pkts[..pkts.len().min(4096)];
    let mut g = c.benchmark_group("packet");
    g.sample_size(20);
    g.throughput(Throughput::Elements(hot.len() as u64));
    g.bench_function("lane", |b| {
        b.iter(|| {
            hot.iter()
                .map(|(_, _, d)| dscp_of(1, d).map_or(0, |x| usize::from(x >> 3)))
                .sum::<usize>()
        })
    });
    g.bench_function("dissect", |b| {
        b.iter(|| {
            hot.iter()
                .map(|(_, _, d)| dissect(1, d).ip.map_or(0, |ip| usize::from(ip.dscp >> 3)))
                .sum::<usize>()
        })
    });
    // Blocks as the writer cuts them (1 MiB, in arrival order; one stream, no lanes).
    let mut blocks: Vec<(capsule_store::format::BlockMeta, Vec<u8>)> = Vec::new();
    let mut buf = Vec::new();
    for (ts, orig, d) in &pkts {
        capsule_pcap::write::pcapng_epb(&mut buf, 0, *ts, *orig, d);
        if buf.len() >= 1 << 20 {
            blocks.push((Default::default(), std::mem::take(&mut buf)));
        }
    }
    blocks.push((Default::default(), buf));
    blocks[0].0.new_interfaces.push(capsule_pcap::Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        options: Default::default(),
    });
    g.throughput(Throughput::Elements(pkts.len() as u64));
    // The two index benches count the thread's CPU time, not wall time: on a shared
    // machine other work inflates wall time by whatever it takes.
    g.bench_function("index", |b| {
        b.iter_custom(|iters| {
            let t0 = thread_cpu();
            for _ in 0..iters {
                let mut ix = capsule_index::sideindex::IndexBuilder::new(1);
                for (meta, data) in &blocks {
                    ix.add_block(meta, data);
                }
                std::hint::black_box(ix.finish(0).flows.len());
            }
            thread_cpu() - t0
        })
    });
    let jdir = tempfile::tempdir().unwrap();
    let mut seq = 0u64;
    g.bench_function("index_journal", |b| {
        b.iter_custom(|iters| {
            let t0 = thread_cpu();
            for _ in 0..iters {
                seq += 1;
                let mut ix = capsule_index::sideindex::IndexBuilder::new(seq);
                let mut j =
                    capsule_index::sideindex::journal::JournalWriter::create(jdir.path(), seq)
                        .unwrap();
                for (meta, data) in &blocks {
                    ix.add_block(meta, data);
                    j.append(meta, ix.last_delta()).unwrap();
                }
                capsule_index::sideindex::journal::remove(jdir.path(), seq).unwrap();
                std::hint::black_box(ix.finish(0).flows.len());
            }
            thread_cpu() - t0
        })
    });
    g.finish();
}

criterion_group!(benches, synth_and_read, ingest, append_cpu, per_packet);
criterion_main!(benches);
