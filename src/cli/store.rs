//! The arguments of the store's upkeep: `reindex`, `compact`, `status`, `segments`,
//! `verify`, and `synth` (traffic for tests and demos).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::select::{parse_time_now, RemoteArgs};
use crate::units;

#[derive(Args, Debug)]
pub struct ReindexArgs {
    /// The store directory.
    #[arg(long)]
    pub store: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CompactArgs {
    /// The store directory.
    #[arg(long)]
    pub store: PathBuf,
    /// The target zstd level: blocks below it are recompressed at it.
    #[arg(long, default_value = "1", allow_negative_numbers = true)]
    pub level: capsule_store::writer::Level,
    /// Only the segments whose newest packet is more than this (packet time, e.g. 7d, 12h)
    /// before the store's newest packet: the age tier, done offline. Younger segments are
    /// left as they are.
    #[arg(long, value_name = "DURATION", value_parser = parse_older_than)]
    pub older_than: Option<Duration>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--older-than`: a duration above zero (zero would be every segment but the newest,
/// which `--level` alone says better).
pub(super) fn parse_older_than(s: &str) -> anyhow::Result<Duration> {
    let d = capsule_query::parse_duration(s)?;
    if d.is_zero() {
        anyhow::bail!("{s:?}: an age of 0 is every segment; leave --older-than out for that");
    }
    Ok(d)
}

/// `--age-tier AGE:LEVEL`: a duration above zero and a zstd level (not `store`: the tier
/// compresses more, never less).
pub(super) fn parse_age_tier(s: &str) -> anyhow::Result<capsule_store::compact::AgeTier> {
    let Some((age, level)) = s.rsplit_once(':') else {
        anyhow::bail!("{s:?} is not AGE:LEVEL (e.g. 7d:9): no `:` found");
    };
    let age = parse_older_than(age)?;
    let level: capsule_store::writer::Level = level
        .parse()
        .map_err(|e| anyhow::anyhow!("{s:?}: the level after `:`: {e}"))?;
    if !matches!(level, capsule_store::writer::Level::Zstd(_)) {
        anyhow::bail!("{s:?}: the tier's level must be a zstd level (e.g. 9), not `store`");
    }
    Ok(capsule_store::compact::AgeTier { age, level })
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The store directory.
    #[arg(
        long,
        required_unless_present = "to_server",
        conflicts_with = "to_server"
    )]
    pub store: Option<PathBuf>,
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print again every second until interrupted (redrawn in place on a terminal).
    #[arg(long)]
    pub watch: bool,
    /// Also print the capture's whole setup and why `auto` fell back, if it did.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// The compaction target for `pending_compaction_bytes` when no running capture says
    /// (a running capture's `--level` wins).
    #[arg(
        long,
        default_value = "1",
        allow_negative_numbers = true,
        conflicts_with = "to_server"
    )]
    pub level: capsule_store::writer::Level,
    /// The byte budget for the retention horizon when no running capture says.
    #[arg(long, value_parser = units::parse_size, conflicts_with = "to_server")]
    pub max_bytes: Option<u64>,
}

#[derive(Args, Debug)]
pub struct SegmentsArgs {
    /// The store directory.
    #[arg(
        long,
        required_unless_present = "to_server",
        conflicts_with = "to_server"
    )]
    pub store: Option<PathBuf>,
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// A config file whose `[tier]` section (docs/tier.md) names the object store: the
    /// segments only there are described from their cached footers (fetched once). Without
    /// it they are named as unreadable.
    #[arg(long, conflicts_with = "to_server")]
    pub config: Option<PathBuf>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The store directory.
    #[arg(long)]
    pub store: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Rebuild what can be rebuilt without deleting data: side indexes, and damaged sealed
    /// segments (every verified block kept, damaged bytes moved aside, a new footer). Takes
    /// the writer lock.
    #[arg(long)]
    pub repair: bool,
    /// A config file whose `[tier]` section (docs/tier.md) names the object store: every
    /// tiered segment's object is checked against the ledger (there, its size and ETag).
    /// Without it, a store with segments only in the object store is verified in part
    /// (exit 3).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// With --config: also read each tiered object whole and verify its bytes (the ETag
    /// recomputed, the head frame, every block's checksum, the footer), as a local segment
    /// is verified. Costs one download of everything tiered.
    #[arg(long, requires = "config")]
    pub deep: bool,
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Seed of the generator: the same seed, duration, rate and start give the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Traffic time covered, e.g. 10s, 1m.
    #[arg(long, default_value = "10s", value_parser = capsule_query::parse_duration)]
    pub duration: Duration,
    /// Average wire rate, e.g. 1G, 500M (bits per second).
    #[arg(long, default_value = "1G", value_parser = units::parse_rate)]
    pub rate: u64,
    /// Time of the first packet: RFC 3339, a date, Unix seconds, @NANOS, `now`, or a
    /// duration before now (`--start -1m --duration 50s` makes traffic of the last minute,
    /// so relative windows such as `--from -10m` find it).
    #[arg(
        long,
        default_value = "2026-11-30T02:00:00Z",
        allow_hyphen_values = true,
        value_parser = parse_time_now
    )]
    pub start: u64,
    /// Output pcap; `-` writes to standard output.
    #[arg(short = 'w', long = "write")]
    pub write: String,
    /// Where to write the truth file (every flow and the planted facts) as JSON.
    #[arg(long)]
    pub truth: Option<PathBuf>,
}
