//! The arguments of the writers: `capture` and `import`, and the writer options they share
//! (segments, blocks, compression, budgets).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::store::parse_age_tier;
use crate::units;

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The store directory (created if missing).
    #[arg(long)]
    pub store: PathBuf,
    #[command(flatten)]
    pub writer: WriterArgs,
    /// A config file whose `[cutoff]` section (docs/config.md) applies to this import: of
    /// each flow direction only the first `bytes` / `packets` are stored, packets matching
    /// a `keep` filter whole. A bad file exits 2 naming the key and line.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Store only the first SIZE wire bytes of each flow direction (e.g. 64K; 0: no
    /// cut-off); overrides `bytes` of the config's `[cutoff]`. The flow counters of the
    /// index still count every packet seen.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size)]
    pub cutoff: Option<u64>,
    /// Input files; `-` reads standard input.
    #[arg(required = true)]
    pub files: Vec<String>,
    /// Print one JSON document (per input and in total) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct XdpProbeArgs {
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// A config file whose `[capture]` section gives any of these flags (`ring_size =
    /// "512M"` for `--ring-size 512M`, docs/config.md); a flag on the command line overrides
    /// the file. A bad file exits 2 naming the line. Its `[alerts]` sinks (`live_file`,
    /// `syslog_udp`, `syslog_socket`, `webhook_url`) turn live alerts on (docs/alerts.md).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The interface to capture on (a dedicated SPAN/TAP port; it is put in promiscuous
    /// mode). Repeat it for several interfaces into the one store (`--iface a --iface b`):
    /// each gets its own interface block, counters and mode (the ladder walked for each).
    #[arg(long, required = false, required_unless_present = "config")]
    pub iface: Vec<String>,
    /// The mode of one interface, overriding --mode for it: `IFACE=MODE`, e.g. `--iface-mode
    /// eth1=afpacket` (repeatable; IFACE must be one of the --iface).
    #[arg(long, value_name = "IFACE=MODE", value_parser = parse_iface_mode)]
    pub iface_mode: Vec<(String, CaptureMode)>,
    /// The store directory (created if missing).
    #[arg(long, required = false, required_unless_present = "config")]
    pub store: PathBuf,
    /// How to capture. `auto` tries AF_XDP with native XDP, then generic XDP, then
    /// AF_PACKET, and logs which it took and why. On an interface that has an address of
    /// this host (its own traffic goes through it), `auto` takes AF_PACKET, and the XDP
    /// modes refuse without --take-interface: AF_XDP takes every packet from the kernel.
    #[arg(long, value_enum, default_value_t = CaptureMode::Auto)]
    pub mode: CaptureMode,
    /// Let XDP capture an interface that carries this host's own traffic, cutting the host's
    /// connections on it while capture runs (a warning is printed).
    #[arg(long)]
    pub take_interface: bool,
    /// XDP: which program variant carries each packet's arrival time to capsule. `auto`
    /// probes the kernel once and takes the best it accepts: `metadata` (the XDP metadata
    /// area), else `headroom` (16 bytes claimed in front of the packet, stripped before it
    /// is stored: the same times, the same stored bytes), else `plain` (no record: capsule
    /// stamps packets as it reads its ring, coarser). Naming one this kernel refuses is an
    /// error with the verifier's reason (docs/capture.md).
    #[arg(long, value_enum, default_value_t = XdpVariant::Auto)]
    pub xdp_variant: XdpVariant,
    /// Serve Prometheus metrics at http://ADDR/metrics while capturing (e.g.
    /// 127.0.0.1:9108; port 0 picks a free one, printed at start): packets, drops by cause,
    /// store and disk use, retention horizon, freshness lag. No authentication: bind it to
    /// loopback or a management network.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// RX queues to capture with AF_XDP: `all` or a list such as `0,1` (one socket and
    /// worker thread each).
    #[arg(long, default_value = "all")]
    pub queues: capsule_capture::live::Queues,
    /// AF_XDP UMEM frame size: 2048 or 4096 (frames larger than a frame arrive in several
    /// buffers and are joined).
    #[arg(long, default_value_t = 2048)]
    pub frame_size: u32,
    /// Bytes kept of each packet (0: whole packets).
    #[arg(long, default_value_t = 0)]
    pub snaplen: u32,
    /// PACKET_FANOUT group id, so several capture processes can share an interface
    /// (0: none).
    #[arg(long, default_value_t = 0)]
    pub fanout_group: u16,
    /// Kernel buffer that absorbs bursts while the store catches up (e.g. 256M). AF_PACKET:
    /// the TPACKET ring. AF_XDP: the UMEM of all queues together, split equally, a power
    /// of two of frames per queue (16384 at least).
    #[arg(long, default_value = "256M", value_parser = units::parse_size)]
    pub ring_size: u64,
    /// Print the summary at exit as one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// After set-up (sockets, rings, XDP program, store, metrics listener) run as this user,
    /// with only the capabilities capture still needs (docs/capture.md). Needs a capture
    /// started as root; the store must be the user's (checked at start). Store files are
    /// created owned by it.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// With --user: the group to run as (and of the store's files), instead of the user's
    /// primary group. The process keeps no other group.
    #[arg(long, value_name = "NAME", requires = "user")]
    pub group: Option<String>,
    /// How log lines on standard error are written: `text`, or `json` (one JSON object a
    /// line, the start and status lines included).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Which log lines are written: a tracing filter such as `info` or
    /// `warn,capsule_store=debug` (default: $CAPSULE_LOG, else `warn`). A SIGHUP re-reads it
    /// from the config file.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// The age tier, `AGE:LEVEL` (e.g. `7d:9`): once the background compactor has brought
    /// every sealed segment to --level, it recompresses those whose newest packet is more
    /// than AGE (packet time) before the store's newest at zstd LEVEL, at the same lowest
    /// priority. Off by default: on realistic payloads level 9 saves about 4% over level 1
    /// (docs/benchmarks.md).
    #[arg(long, value_name = "AGE:LEVEL", value_parser = parse_age_tier)]
    pub age_tier: Option<capsule_store::compact::AgeTier>,
    #[command(flatten)]
    pub writer: WriterArgs,
}

/// How log lines are written.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line (tracing-subscriber's JSON format).
    Json,
}

/// `IFACE=MODE` of `--iface-mode`.
fn parse_iface_mode(s: &str) -> Result<(String, CaptureMode), String> {
    let (iface, mode) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?} is not IFACE=MODE (e.g. eth1=afpacket)"))?;
    if iface.is_empty() {
        return Err(format!("{s:?} names no interface before `=`"));
    }
    let mode = CaptureMode::from_str(mode, false).map_err(|_| {
        let modes: Vec<String> = CaptureMode::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_string()))
            .collect();
        format!("{mode:?} is not a mode (one of {})", modes.join(", "))
    })?;
    Ok((iface.to_string(), mode))
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    /// XDP native, then XDP generic, then AF_PACKET: the first that works.
    Auto,
    /// AF_XDP with the XDP program in the driver, else in generic mode.
    Xdp,
    /// AF_XDP with the XDP program in the driver only.
    XdpNative,
    /// AF_XDP with the XDP program in the kernel's generic path (any driver).
    XdpGeneric,
    /// AF_PACKET TPACKET_V3 ring (no XDP).
    Afpacket,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpVariant {
    /// The best this kernel accepts: metadata, else headroom, else plain.
    Auto,
    /// The record in the XDP metadata area (bpf_xdp_adjust_meta).
    Metadata,
    /// The record in headroom in front of the packet (bpf_xdp_adjust_head), stripped.
    Headroom,
    /// No record; timestamps taken at ring read.
    Plain,
}

/// How the store writer cuts blocks and segments, and the disk budget.
#[derive(Args, Debug)]
pub struct WriterArgs {
    /// Uncompressed size of a block (e.g. 1M).
    #[arg(long, default_value = "1M", value_parser = units::parse_size)]
    pub block_size: u64,
    /// A block older than this is cut even if not full (live capture).
    #[arg(long, default_value = "100ms", value_parser = capsule_query::parse_duration)]
    pub block_age: Duration,
    /// On-disk size after which a segment is sealed (e.g. 1G); at least the block size.
    #[arg(long, default_value = "1G", value_parser = units::parse_size)]
    pub segment_size: u64,
    /// Age (wall clock or packet time spanned) after which a segment is sealed.
    #[arg(long, default_value = "10m", value_parser = capsule_query::parse_duration)]
    pub segment_age: Duration,
    /// Store-wide byte budget: the oldest segments are deleted to stay under it (e.g. 500G,
    /// or `none` to remove a saved one). Saved in the store: later runs keep it.
    #[arg(long, value_name = "SIZE|none", value_parser = parse_budget_size)]
    pub max_bytes: Option<Setting<u64>>,
    /// Free space to keep on the store's disk: the oldest segments are deleted to keep it
    /// (e.g. 10% or 20G; 0 or `none`: let the disk fill, then delete the oldest for room).
    /// Saved in the store. A store given no floor keeps 10% or 5 GiB, whichever is smaller.
    #[arg(long, value_name = "PERCENT|SIZE|none", value_parser = parse_min_free)]
    pub min_free: Option<Setting<capsule_store::budget::FreeSpace>>,
    /// Maximum age of data by packet time, back from the newest packet (e.g. 30d, 12h;
    /// `none` to remove a saved one): older segments are deleted. Saved in the store.
    #[arg(long, value_name = "DURATION|none", value_parser = parse_max_age)]
    pub max_age: Option<Setting<Duration>>,
    /// zstd compression level, -1000 to 22 (higher compresses more and costs more CPU), or
    /// `store` (no compression). Live capture starts at store and climbs to -1000, -10, then
    /// this level while the compressors keep up; it falls back while blocks queue up for the
    /// compressors or a capture ring fills, so it never drops a packet to compress one.
    #[arg(long, default_value = "1", allow_negative_numbers = true)]
    pub level: capsule_store::writer::Level,
    /// Compression threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
}

impl WriterArgs {
    /// The budget flags given, for [`capsule_store::budget::BudgetFlags::apply`].
    pub fn budget_flags(&self) -> capsule_store::budget::BudgetFlags {
        capsule_store::budget::BudgetFlags {
            max_bytes: self.max_bytes.map(Setting::value),
            min_free: self.min_free.map(Setting::value),
            max_age: self.max_age.map(Setting::value),
        }
    }

    /// The store writer's configuration for the store at `store`: the budgets saved there,
    /// with those given on the command line in their place (and then saved). A store that
    /// has none saved gets the default floor of free space saved, and the note to print
    /// once the writer is open says so.
    pub fn config(
        &self,
        store: &Path,
    ) -> anyhow::Result<(capsule_store::WriterConfig, Option<String>)> {
        let flags = self.budget_flags();
        let saved = if store.join(capsule_store::budget::BUDGET_FILE).exists() {
            match capsule_store::budget::load(store) {
                Ok(b) => b,
                // A damaged budget file never stops a writer: it is named, the defaults
                // (and the flags given) apply and are saved over it.
                Err(e @ capsule_store::StoreError::BadBudgets { .. }) => {
                    eprintln!(
                        "capsule: warning: {e}; ignored: the budgets given (or the default \
                         floor of free space) apply and are saved in its place"
                    );
                    None
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            None
        };
        let budgets = flags.apply(saved);
        let note = (saved.is_none()
            && budgets.min_free == Some(capsule_store::budget::FreeSpace::Default))
        .then(|| {
            "capsule: note: retention: this store keeps at least 10% of its disk or 5 GiB free, \
             whichever is smaller (the default; --min-free changes it, --min-free 0 removes \
             it); the oldest segments are deleted to keep it"
                .to_string()
        });
        let mut c = capsule_store::WriterConfig {
            block_bytes: usize::try_from(self.block_size)?,
            block_age: self.block_age,
            segment_bytes: self.segment_size,
            segment_age: self.segment_age,
            max_bytes: budgets.max_bytes,
            min_free: budgets.min_free,
            max_age: budgets.max_age,
            save_budgets: !flags.is_empty() || saved.is_none(),
            level: self.level,
            ..capsule_store::WriterConfig::default()
        };
        if let Some(t) = self.threads {
            c.threads = t;
        }
        Ok((c, note))
    }
}

/// A budget given on the command line: a value, or `none` (remove it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Setting<T> {
    Set(T),
    Off,
}

impl<T> Setting<T> {
    /// `Some(v)` for a value, `None` for `none`.
    pub fn value(self) -> Option<T> {
        match self {
            Setting::Set(v) => Some(v),
            Setting::Off => None,
        }
    }
}

fn is_none_word(s: &str) -> bool {
    matches!(s.trim().to_ascii_lowercase().as_str(), "none" | "off")
}

fn parse_budget_size(s: &str) -> anyhow::Result<Setting<u64>> {
    if is_none_word(s) {
        return Ok(Setting::Off);
    }
    units::parse_size(s).map(Setting::Set)
}

fn parse_min_free(s: &str) -> anyhow::Result<Setting<capsule_store::budget::FreeSpace>> {
    use capsule_store::budget::FreeSpace;
    if is_none_word(s) {
        return Ok(Setting::Off);
    }
    if let Some(p) = FreeSpace::parse_percent(s) {
        return p.map(Setting::Set).map_err(anyhow::Error::msg);
    }
    let bytes = units::parse_size(s)
        .map_err(|e| anyhow::anyhow!("{e}; or a percentage of the disk such as 10%"))?;
    Ok(Setting::Set(FreeSpace::Bytes(bytes)))
}

fn parse_max_age(s: &str) -> anyhow::Result<Setting<Duration>> {
    if is_none_word(s) {
        return Ok(Setting::Off);
    }
    let d = capsule_query::parse_duration(s)?;
    if d.is_zero() {
        anyhow::bail!(
            "{s:?}: an age budget of 0 would delete everything; give `none` to remove it"
        );
    }
    Ok(Setting::Set(d))
}
