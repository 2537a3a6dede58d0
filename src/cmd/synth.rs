//! `capsule synth`: deterministic synthetic traffic with planted faults and a truth file.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::cli::SynthArgs;

pub fn run(a: &SynthArgs) -> Result<ExitCode> {
    let (write, truth_path) = (a.write.as_str(), a.truth.as_deref());
    let cfg = capsule_synth::SynthConfig {
        seed: a.seed,
        duration_ns: u64::try_from(a.duration.as_nanos()).context("--duration is too long")?,
        rate_bps: a.rate,
        start_ns: a.start,
    };
    // Checked before the output is created: a bad config leaves no empty file behind.
    cfg.validate()?;
    let t0 = Instant::now();
    // The bytes written so far, on a terminal.
    let progress = crate::progress::Progress::bytes("synth", None);
    let truth = if write == "-" {
        capsule_synth::generate(&cfg, progress.writer(std::io::stdout().lock()))
    } else {
        let f = std::fs::File::create(write).with_context(|| format!("cannot create {write}"))?;
        capsule_synth::generate(&cfg, progress.writer(f))
    };
    progress.finish();
    let truth = truth?;
    let secs = t0.elapsed().as_secs_f64();
    if let Some(p) = truth_path {
        let body = serde_json::to_string_pretty(&truth)?;
        std::fs::write(p, body + "\n").with_context(|| format!("cannot write {}", p.display()))?;
    }
    eprintln!(
        "synth: {} packets, {}, {} flows in {:.2} s ({:.2} Gbit/s of traffic per second)",
        truth.packets,
        crate::units::format_bytes(truth.bytes),
        truth.flows.len(),
        secs,
        truth.bytes as f64 * 8.0 / 1e9 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}
