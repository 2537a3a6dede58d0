//! The arguments of the questions: `query`, `replay`, `flows`, and the analytics commands
//! (`top`, `tcp`, `dscp`, `bursts`, `matrix`, `stragglers`, `alerts`, `triage`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::select::{OldClientCert, Selection, StoredWindow};
use crate::units;

#[derive(Args, Debug)]
pub struct QueryArgs {
    #[command(flatten)]
    pub q: Selection,
    #[command(flatten)]
    pub old_cert: OldClientCert,
    /// Output file; `-` writes to standard output.
    #[arg(short = 'w', long = "write", required_unless_present_any = ["explain", "count"])]
    pub write: Option<String>,
    /// Output format. Default: from the `-w` file's extension (`.pcapng`, `.ntar`: pcapng),
    /// else pcap.
    #[arg(long, value_enum)]
    pub format: Option<OutFormat>,
    /// A tcpdump filter, applied (by libpcap) after the index and FILTER narrowed the search.
    /// At most 4096 bytes; it is first compiled in a child process limited to 10 s of CPU
    /// and wall-clock time and 1 GiB of address space, and refused if libpcap's compiler
    /// does not finish within them.
    #[arg(long)]
    pub bpf: Option<String>,
    /// Print the plan (segments and blocks to read) without reading packets.
    #[arg(long)]
    pub explain: bool,
    /// Print how many packets and bytes the query would export, and write nothing.
    #[arg(long, conflicts_with = "explain")]
    pub count: bool,
    /// With --count or --explain: print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// A config file whose `[tier]` section (docs/tier.md) says where the segments trimmed
    /// after upload are: they are read from the object store by range, as part of the store.
    #[arg(long, conflicts_with = "to_server")]
    pub config: Option<PathBuf>,
}

/// `capsule replay`'s exit statuses.
pub(super) const REPLAY_EXIT_STATUS: &str =
    "Exit status: 0 every packet of the window was sent; 1 an \
error (nothing sent, or the interface went away midway); 2 bad usage; 3 some packets were \
not sent (each cause counted in the report) or damaged blocks were skipped.";

#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub q: StoredWindow,
    /// The interface to send onto (an Ethernet interface; not one a capture of this store
    /// is reading).
    #[arg(long)]
    pub iface: String,
    /// Pace the packets at their recorded gaps divided by X (2: twice as fast, 0.5: half
    /// as fast). The default, at 1.
    #[arg(long, value_name = "X", value_parser = parse_positive, conflicts_with_all = ["pps", "topspeed"])]
    pub speed: Option<f64>,
    /// Send at a fixed N packets per second, whatever the recorded gaps.
    #[arg(long, value_name = "N", value_parser = parse_positive, conflicts_with = "topspeed")]
    pub pps: Option<f64>,
    /// No pacing: each packet as soon as the interface takes it.
    #[arg(long)]
    pub topspeed: bool,
    /// Print the report as one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A number above zero (`--speed`, `--pps`).
fn parse_positive(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number above 0, found {s:?}"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("expected a number above 0, found {s:?}"));
    }
    Ok(v)
}

#[derive(Args, Debug)]
pub struct FlowsArgs {
    #[command(flatten)]
    pub q: Selection,
    #[command(flatten)]
    pub old_cert: OldClientCert,
    /// Order of the listing.
    #[arg(long, value_enum, default_value_t = FlowSort::Bytes)]
    pub sort: FlowSort,
    /// Show at most this many flows.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A config file whose `[tier]` section (docs/tier.md) says where the segments trimmed
    /// after upload are: they are read from the object store by range, as part of the store.
    #[arg(long, conflicts_with = "to_server")]
    pub config: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum FlowSort {
    /// Most bytes first.
    Bytes,
    /// Most packets first.
    Packets,
    /// Earliest first packet first.
    First,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum OutFormat {
    /// Classic pcap with nanosecond timestamps (one link type per file).
    Pcap,
    /// pcapng: one interface block per capture interface, interface statistics kept.
    Pcapng,
}

/// What every analytics command takes besides its own options.
#[derive(Args, Debug)]
pub struct AnswerArgs {
    #[command(flatten)]
    pub q: Selection,
    /// The config file with `[groups]`, `[dscp]` and `[egress]` (the file `capsule capture
    /// --config` reads). With --server the server's config answers.
    #[arg(long, conflicts_with = "to_server")]
    pub config: Option<PathBuf>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub a: AnswerArgs,
    /// What rows rank by.
    #[arg(long, value_enum, default_value_t = TopBy::Bytes)]
    pub by: TopBy,
    /// What a row is (`group` needs --config).
    #[arg(long, value_enum, default_value_t = TopKey::Flow)]
    pub key: TopKey,
    /// Rows shown before "other".
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum TopBy {
    Bytes,
    Packets,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum TopKey {
    Flow,
    Src,
    Dst,
    Pair,
    Group,
    Dscp,
    /// The TLS server name of each flow (from the ClientHello).
    Sni,
    /// The application recognised from each flow's payload (tls, quic, http, dns, ssh, ...).
    App,
    /// The tunnel each flow direction arrived in: kind, VNI/key/session, MPLS label and
    /// outer endpoints (both ways of a tunnel in one row; `(none)`: not encapsulated).
    Tunnel,
}

#[derive(Args, Debug)]
pub struct TcpArgs {
    #[command(flatten)]
    pub a: AnswerArgs,
    /// Interval length, whole seconds (`1m`, `10s`, `1h`).
    #[arg(long, default_value = "1m", value_parser = parse_interval)]
    pub interval: u64,
}

#[derive(Args, Debug)]
pub struct DscpArgs {
    #[command(flatten)]
    pub a: AnswerArgs,
}

#[derive(Args, Debug)]
pub struct BurstsArgs {
    #[command(flatten)]
    pub a: AnswerArgs,
    /// The rate a millisecond must exceed to count as above (time above, bursts): a share
    /// of the link's rate from the config's `[links]` (`80%`), or a rate in bits per second
    /// (`5G`, `400M`).
    #[arg(long, default_value = "80%", value_parser = parse_above)]
    pub above: capsule_analytics::bursts::Above,
    /// Distinct senders to one destination within one millisecond that make an incast
    /// (4 or more: the index keeps the senders of destinations with at least 4).
    #[arg(long, default_value_t = capsule_answers::params::BURSTS_INCAST)]
    pub incast: u32,
    /// Bursts listed, the largest first.
    #[arg(long, default_value_t = capsule_answers::params::BURSTS_LIMIT)]
    pub limit: usize,
    /// List every millisecond of the window with traffic (bytes and packets, per DSCP
    /// value): the series itself. Meant for short windows.
    #[arg(long)]
    pub series: bool,
}

fn parse_above(s: &str) -> Result<capsule_analytics::bursts::Above, String> {
    capsule_answers::params::above(s)
}

#[derive(Args, Debug)]
pub struct MatrixArgs {
    #[command(flatten)]
    pub a: AnswerArgs,
    /// What the cells show.
    #[arg(long, value_enum, default_value_t = MatrixBy::Bytes)]
    pub by: MatrixBy,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum MatrixBy {
    Bytes,
    Packets,
    Flows,
}

#[derive(Args, Debug)]
pub struct AlertsArgs {
    #[command(flatten)]
    pub a: AnswerArgs,
}

/// `triage` runs beside the store (its evidence is read from the store's packets): the
/// server options every analytics command shares are hidden from its help, and refused
/// with the way to triage a remote store.
#[derive(Args, Debug)]
#[command(
    mut_arg("server", |a| a.hide(true)),
    mut_arg("remote", |a| a.hide(true)),
    mut_arg("token_file", |a| a.hide(true)),
    mut_arg("ca", |a| a.hide(true)),
    mut_arg("client_cert", |a| a.hide(true)),
    mut_arg("client_key", |a| a.hide(true)),
    mut_arg("config", |a| a.help(
        "The config file with `[groups]`, `[dscp]`, `[egress]` and `[alerts]` (the file \
         `capsule capture --config` reads): the host groups and policy triage answers with"
    ))
)]
pub struct TriageArgs {
    #[command(flatten)]
    pub a: AnswerArgs,
    /// The directory the report is written into: made, or replaced whole when it holds a
    /// previous triage report; refused when it holds a file triage did not write.
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// Do not print report.txt.
    #[arg(long)]
    pub quiet: bool,
    /// The most bytes one finding's evidence file holds (default: `[alerts] evidence_max`,
    /// 64M): past it the file keeps the finding's first packets and the report says so.
    #[arg(long, value_name = "BYTES", value_parser = units::parse_size)]
    pub evidence_max: Option<u64>,
}

#[derive(Args, Debug)]
pub struct StragglersArgs {
    #[command(flatten)]
    pub a: AnswerArgs,
    /// The group whose members should send alike.
    #[arg(long)]
    pub group: String,
    /// Interval length, whole seconds.
    #[arg(long, default_value = "10s", value_parser = parse_interval)]
    pub interval: u64,
    /// A member under this fraction of the group median is under.
    #[arg(long, default_value_t = 0.5)]
    pub ratio: f64,
    /// Intervals where the median member sent less are idle and judge nothing (default
    /// 1 MB: below it ratios are noise of keepalives and ACKs).
    #[arg(long, default_value_t = capsule_analytics::stragglers::DEFAULT_MIN_BYTES)]
    pub min_bytes: u64,
}

/// An interval: a duration (`1m`, `10s`) of whole seconds, in nanoseconds.
fn parse_interval(s: &str) -> Result<u64, String> {
    capsule_answers::params::interval(s)
}
