//! Writes a synthetic capture and its truth:
//! `synth SEED DURATION_S RATE_BPS OUT.pcap [TRUTH.json]`, and prints the time taken.

use std::io::BufWriter;
use std::time::Instant;

use capsule_synth::{generate, SynthConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: synth SEED DURATION_S RATE_BPS OUT.pcap [TRUTH.json]");
        std::process::exit(2);
    }
    let duration_s: f64 = args[2].parse().expect("duration in seconds");
    let cfg = SynthConfig {
        seed: args[1].parse().expect("seed"),
        duration_ns: (duration_s * 1e9) as u64,
        rate_bps: args[3].parse().expect("rate in bit/s"),
        ..SynthConfig::default()
    };
    let file = std::fs::File::create(&args[4]).expect("create output");
    let t = Instant::now();
    let truth = generate(&cfg, BufWriter::new(file)).expect("generate");
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "{} packets, {} frame bytes ({:.1}% of target) in {:.3} s: {:.0} MB/s of frames, {:.2} Gbit/s",
        truth.packets,
        truth.bytes,
        truth.bytes as f64 * 100.0 / cfg.target_bytes() as f64,
        secs,
        truth.bytes as f64 / secs / 1e6,
        truth.bytes as f64 * 8.0 / secs / 1e9
    );
    if let Some(p) = args.get(5) {
        std::fs::write(p, serde_json::to_vec_pretty(&truth).expect("json")).expect("write truth");
    }
}
