//! Throughput, in bytes per second, on 64 MB of synthetic traffic:
//! * `synth/generate`: making the traffic (must stay far above 1 Gbit/s per CPU-second);
//! * `pcap/read`: the checked pcap reader alone;
//! * `store/ingest`: pcap parse + block build + zstd + write, into a fresh store;
//! * `store/export`: read + decompress + merge + pcap encode, to a sink.
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
            let (mut w, _) =
                capsule_index::StoreWriter::open(dir.path(), Default::default()).unwrap();
            let rep = capsule_capture::import_reader(&mut w, "bench", &pcap[..]).unwrap();
            assert!(rep.error.is_none());
            w.finish().unwrap()
        })
    });
    let dir = tempfile::tempdir().unwrap();
    let (mut w, _) = capsule_index::StoreWriter::open(dir.path(), Default::default()).unwrap();
    capsule_capture::import_reader(&mut w, "bench", &pcap[..]).unwrap();
    w.finish().unwrap();
    let store = capsule_index::Store::open(dir.path()).unwrap();
    g.bench_function("export", |b| {
        b.iter(|| capsule_replay::export(&store, &Default::default(), std::io::sink()).unwrap())
    });
    g.finish();
}

criterion_group!(benches, synth_and_read, ingest);
criterion_main!(benches);
