//! The command line: every subcommand and flag, as clap definitions with typed values.
//!
//! Raw text becomes checked values here, before any command runs (ripgrep's lowargs ->
//! hiargs): sizes, durations, rates, instants, levels and queue lists are parsed by clap's
//! value parsers, so every usage error, whatever the flag, exits with status 2 and a message
//! naming the flag. The filter is the exception: its words are joined and parsed into a
//! `Filter` by `request.rs` right after clap (a filter error points at its token with a
//! caret, which a clap value parser cannot show), together with the window it goes with.
//! The command bodies in `cmd/` receive values, never strings to parse. [`parse_args`]
//! also reads `capture --config FILE`: the file's `[capture]` values become the flags the
//! command line lacks, checked by the same parsers.
//!
//! `select.rs` holds the groups every question shares, defined once (the window and filter,
//! the server to ask, the store); `questions.rs`, `capture.rs` and `store.rs` the commands'
//! own flags; `help.rs` the long help texts; `tests.rs` the parsing tests and clap's own
//! checks of the definitions.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::units;

mod capture;
mod help;
mod questions;
mod select;
mod store;
#[cfg(test)]
mod tests;

use help::{EXIT_STATUS, QUERY_LONG_AFTER};
use questions::REPLAY_EXIT_STATUS;

pub use capture::*;
pub use help::FILTERS_HELP;
pub use questions::*;
pub use select::*;
pub use store::*;

/// `capsule --version`: the release, the commit it was built from, and the versions of the
/// on-disk formats it writes (docs/format.md), so a bug report says what wrote a store.
pub static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} (commit {}; segment format {}, index format {})",
        env!("CARGO_PKG_VERSION"),
        env!("CAPSULE_GIT_COMMIT"),
        capsule_store::format::FORMAT_VERSION,
        capsule_index::sideindex::INDEX_VERSION,
    )
});

/// Why the command line could not be turned into a [`Cli`].
#[derive(Debug)]
pub enum ArgsError {
    /// clap's own error (usage, `--help`, `--version`): clap prints it and picks the status.
    Clap(clap::Error),
    /// A config file given with `--config` that cannot be read or is not valid, or a value
    /// in it that its flag refuses: the message names the file, line and key (exit 2).
    Config(String),
}

/// Parses the command line. For `capture --config FILE`, each `[capture]` key of the file
/// whose flag is not on the command line is parsed by that flag's own value parser (so a
/// value means the same in the file and on the command line; a bad one is an error at its
/// line) and then added to the command line: flags given override the file.
pub fn parse_args(mut args: Vec<std::ffi::OsString>) -> Result<Cli, ArgsError> {
    use clap::{CommandFactory, FromArgMatches};
    let cmd = Cli::command();
    let m = cmd
        .clone()
        .try_get_matches_from(&args)
        .map_err(ArgsError::Clap)?;
    let (name, sub) = match m.subcommand() {
        Some((name @ ("capture" | "serve"), sub)) => (name, sub),
        _ => return Cli::from_arg_matches(&m).map_err(ArgsError::Clap),
    };
    let Some(path) = sub.get_one::<PathBuf>("config") else {
        return Cli::from_arg_matches(&m).map_err(ArgsError::Clap);
    };
    let config = capsule_config::Config::load(path).map_err(|e| match e {
        capsule_config::ConfigError::Read { path, source } => ArgsError::Config(format!(
            "{}: cannot read the config file: {source}",
            path.display()
        )),
        e => ArgsError::Config(crate::output::config_problems(&e)),
    })?;
    let command = cmd.find_subcommand(name).expect("the subcommand exists");
    let (settings, needed): (_, &[&str]) = if name == "capture" {
        (config.capture(), &["iface", "store"])
    } else {
        (
            config.serve(),
            &["store", "listen", "cert", "key", "tokens"],
        )
    };
    let extra = capture_flags_from(command, sub, &path.display().to_string(), settings)?;
    // After the subcommand's name: the file's flags are ones the command line lacks.
    let at = args
        .iter()
        .position(|a| a == name)
        .map_or(args.len(), |i| i + 1);
    args.splice(at..at, extra);
    let m = cmd.try_get_matches_from(&args).map_err(ArgsError::Clap)?;
    if let Some((_, sub)) = m.subcommand() {
        for id in needed {
            if !sub.contains_id(id) {
                return Err(ArgsError::Config(format!(
                    "--{} is needed: on the command line, or as `{id}` in the [{name}] \
                     section of {}",
                    id.replace('_', "-"),
                    path.display()
                )));
            }
        }
    }
    Cli::from_arg_matches(&m).map_err(ArgsError::Clap)
}

/// The flags a config file's `[capture]` settings stand for, leaving out those given on the
/// command line (`given`); each value checked by its flag's parser.
fn capture_flags_from(
    capture: &clap::Command,
    given: &clap::ArgMatches,
    file: &str,
    settings: &[capsule_config::CaptureSetting],
) -> Result<Vec<std::ffi::OsString>, ArgsError> {
    let mut extra = Vec::new();
    for s in settings {
        let id = s.flag.trim_start_matches("--").replace('-', "_");
        if given.value_source(&id) == Some(clap::parser::ValueSource::CommandLine) {
            continue;
        }
        let arg = capture
            .get_arguments()
            .find(|a| a.get_id() == id.as_str())
            .ok_or_else(|| {
                ArgsError::Config(format!(
                    "{file}:{}:{}: {}: {} has no flag {} (a capsule-config key without \
                     a flag: a bug)",
                    s.line,
                    s.column,
                    s.key,
                    capture.get_name(),
                    s.flag
                ))
            })?;
        if !arg.get_action().takes_values() {
            // A switch: `true` sets it, `false` leaves it off.
            if s.value == "true" {
                extra.push(s.flag.into());
            }
            continue;
        }
        // The flag alone (with `--config`, so nothing else is required) through the
        // subcommand's own parser.
        let flag = format!("{}={}", s.flag, s.value);
        capture
            .clone()
            .no_binary_name(true)
            .try_get_matches_from([flag.as_str(), "--config=-"])
            .or_else(|e| match e.kind() {
                // `serve --crl` needs `--client-ca`: checked on the whole command line.
                clap::error::ErrorKind::MissingRequiredArgument => Ok(Default::default()),
                _ => Err(e),
            })
            .map_err(|e| {
                let text = e.to_string();
                let first = text.lines().next().unwrap_or_default();
                let why = first.strip_prefix("error: ").unwrap_or(first);
                ArgsError::Config(format!(
                    "{file}:{}:{}: {}: bad value for {}: {why}",
                    s.line, s.column, s.key, s.flag
                ))
            })?;
        extra.push(format!("{}={}", s.flag, s.value).into());
    }
    Ok(extra)
}

#[derive(Parser, Debug)]
#[command(
    name = "capsule",
    version = VERSION.as_str(),
    about = "Full-packet capture and retention: keeps every packet, answers for any past window."
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Import pcap or pcapng files (or `-` for stdin) into a store.
    Import(ImportArgs),
    /// Capture packets from a network interface into a store until SIGINT or SIGTERM.
    Capture(CaptureArgs),
    /// Export packets from a store, in timestamp order.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Query(QueryArgs),
    /// Send a past window's packets onto an interface, with their recorded pacing.
    ///
    /// The packets are those `capsule query` exports for the same filter and window, in the
    /// same order, sent through an AF_PACKET raw socket (needs CAP_NET_RAW) with their
    /// recorded gaps (`--speed 2`: twice as fast), at a fixed rate (`--pps`), or unpaced
    /// (`--topspeed`). Packets stored truncated, or longer than the interface's MTU, are
    /// not sent and are counted by cause. Refuses an interface a running capture of the
    /// same store is reading.
    #[command(after_help = REPLAY_EXIT_STATUS)]
    Replay(ReplayArgs),
    /// List flows from the side index alone.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Flows(FlowsArgs),
    /// Rank a window's traffic by flow, host, pair, group or DSCP value, from the index.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Top(TopArgs),
    /// TCP health per interval and host: retransmissions, zero windows, RSTs, lost SYNs.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Tcp(TcpArgs),
    /// DSCP values seen, senders the policy does not allow, flows remarked mid-flow.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Dscp(DscpArgs),
    /// The millisecond view: peaks at 1 ms, 10 ms, 100 ms and 1 s for the link and each
    /// DSCP value, time above a rate, microbursts and the flows that made them, incast.
    ///
    /// From the side index's millisecond series alone (no segment file is read). Rates
    /// are stated against the link's rate from the config's `[links]` (`span0 = "10G"`),
    /// or the link's rate is stated as unknown. A burst is a run of consecutive
    /// milliseconds with the link above `--above`; its flows are those of its DSCP values
    /// with the most bytes in its second (the index counts flows per second). An incast is
    /// a destination that `--incast` or more distinct senders reached within one
    /// millisecond. Segments indexed before the series (by an earlier build) are named and
    /// the answer is partial until `capsule reindex` rebuilds them.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Bursts(BurstsArgs),
    /// Traffic from group to group, cells the egress policy does not allow flagged.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Matrix(MatrixArgs),
    /// Members of a group that send less than the group's median, interval after interval.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Stragglers(StragglersArgs),
    /// The config's `[alerts]` rules over stored history, from the index alone.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Alerts(AlertsArgs),
    /// The triage report of a window: findings with evidence pcaps, report.txt and
    /// report.html, written into a directory.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Triage(TriageArgs),
    /// Rebuild the side index of every sealed segment from the segments alone.
    Reindex(ReindexArgs),
    /// Recompress at a target level every block of the sealed segments written below it.
    ///
    /// Blocks stored, or compressed at a cheaper level by live capture while it was short
    /// of CPU, are recompressed; block boundaries, times and the index stay as they are.
    /// Takes the writer lock: while a capture runs it exits at once with the lock error (the
    /// capture's own compactor does this work in the background).
    #[command(
        after_help = "Exit status: 0 every pending segment was compacted; 1 an error; 2 bad \
usage; 3 some segments were skipped (damaged: each is named on standard error)."
    )]
    Compact(CompactArgs),
    /// Show how a store's capture runs and what the store holds.
    ///
    /// The capture's mode, packets, drops by cause and rates (live while `capsule capture`
    /// runs), then the store's segments, packets, bytes and time span.
    Status(StatusArgs),
    /// List the segments of a store: state, blocks, packets, bytes and time span.
    Segments(SegmentsArgs),
    /// Which XDP program variants this kernel loads (capture probes the same way at start
    /// and takes the best): each carrier of the packet's arrival time, accepted or refused
    /// with the verifier's reason. Needs root (CAP_BPF).
    #[command(
        name = "xdp-probe",
        after_help = "Exit status: 0 some variant loads (AF_XDP capture is possible); 1 none \
loads (capture falls back to AF_PACKET); 2 bad usage."
    )]
    XdpProbe(XdpProbeArgs),
    /// Write deterministic synthetic traffic (AI cluster beside an enterprise network).
    Synth(SynthArgs),
    /// Check every checksum, header, footer and index of a store, naming each problem.
    #[command(
        after_help = "Exit status: 0 nothing is wrong (or everything wrong was repaired); 1 \
problems remain, each printed with its file, byte offset, and what was expected and found."
    )]
    Verify(VerifyArgs),
    /// Serve the store over HTTPS to holders of a bearer token: packets, flows, status and
    /// metrics (docs/api.md). Reads the store only; runs beside a capture.
    Serve(ServeArgs),
    /// Manage the bearer tokens of `capsule serve`.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Publish a store to the fleet's ClickHouse catalog, and list the fleet's nodes
    /// (docs/fleet.md).
    #[command(subcommand)]
    Fleet(FleetCmd),
    /// Work with the config file (`--config FILE`: host groups, DSCP and egress policy, work
    /// hours; docs/config.md).
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to standard
    /// output, e.g. `capsule completions bash > /etc/bash_completion.d/capsule`.
    Completions(CompletionsArgs),
    /// Write man pages (capsule.1 and one per subcommand, capsule-query.1, ...) into a
    /// directory, e.g. `capsule man --dir /usr/local/share/man/man1`.
    Man(ManArgs),
    /// Describe the filter language and the time forms that `query` and `flows` take.
    #[command(long_about = FILTERS_HELP)]
    Filters,
    /// Internal: compiles a `--bpf` expression under CPU-time and address-space limits and
    /// exits 0 (compiles), 3 (does not; libpcap's message on stderr) or 4 (out of memory).
    /// `capsule query` runs it as a child process before an export.
    #[command(name = "__check-bpf", hide = true)]
    CheckBpf(CheckBpfArgs),
}

#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Validate a config file without starting anything, and summarise what it says.
    ///
    /// Prints the groups with their prefix counts, the DSCP policy with canonical names,
    /// the egress policy and the work hours. An error names the file, line and column, the
    /// key (`groups.gpu[2]`), what was expected and what was found.
    #[command(
        after_help = "Exit status: 0 the file is valid; 2 it is not (or cannot be read): the \
error is printed with its line and key."
    )]
    Check(ConfigCheckArgs),
}

#[derive(Subcommand, Debug)]
pub enum FleetCmd {
    /// Catch a store up with the fleet catalog: stage every sealed, indexed segment not
    /// staged yet into the store's outbox (STORE/fleet/outbox), then push the outbox to
    /// ClickHouse. Idempotent: run it again, nothing is published twice.
    #[command(
        after_help = "Exit status: 0 everything staged reached ClickHouse; 1 an error; 2 bad \
usage; 3 ClickHouse could not take it all (unreachable or refusing): the rest waits in the \
outbox, and the next publish sends it."
    )]
    Publish(FleetPublishArgs),
    /// List the fleet's nodes: their serve URL, version, span of published traffic, last
    /// publish and outbox backlog (as each node last reported it).
    Nodes(FleetNodesArgs),
    /// Which hop loses the packets: the packets of the flows both NODE_A and NODE_B saw,
    /// matched across the two captures by what a switch does not change (addresses, ports,
    /// IP ID, TCP sequence and length, a hash of the payload's first bytes) within a
    /// clock-skew tolerance; per flow and per second the packets one saw and the other did
    /// not, and the one-way delay between them (docs/fleet.md).
    #[command(
        after_help = "Exit status: 0 compared (whatever was lost); 1 an error; 2 bad usage; 3 a \
node did not answer whole (the comparison is then not made)."
    )]
    Diff(FleetDiffArgs),
}

#[derive(Args, Debug)]
pub struct FleetDiffArgs {
    /// The two nodes, as the fleet names them: packets NODE_A saw and NODE_B did not are
    /// the ones lost between them (and the reverse).
    #[arg(long, num_args = 2, value_names = ["NODE_A", "NODE_B"], required = true)]
    pub between: Vec<String>,
    #[command(flatten)]
    pub window: WindowArgs,
    /// The config file whose `[fleet]` section names the ClickHouse server, and the CA and
    /// token to pull the nodes' packets with.
    #[arg(long)]
    pub config: PathBuf,
    /// How far apart the two nodes' clocks (and the path between them) may put one
    /// packet's two times: `500ms`, `2s`.
    #[arg(long, default_value = "500ms", value_parser = parse_tolerance)]
    pub tolerance: std::time::Duration,
    /// Write the packets NODE_A saw and NODE_B did not to FILE (pcapng).
    #[arg(short = 'w', long, value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// Print the per-flow table as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Flows shown in the table (all are in --json).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

fn parse_tolerance(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 500ms, 2s)"))
}

#[derive(Args, Debug)]
pub struct FleetPublishArgs {
    /// The store directory.
    #[arg(long)]
    pub store: PathBuf,
    /// The config file whose `[fleet]` section names this node and the ClickHouse server
    /// (its `[groups]` name the senders of the per-minute rollups).
    #[arg(long)]
    pub config: PathBuf,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct FleetNodesArgs {
    /// The config file whose `[fleet]` section names the ClickHouse server.
    #[arg(long)]
    pub config: PathBuf,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum TokenCmd {
    /// Make a new random token for USER, print it once, and store only its SHA-256 in FILE
    /// (created 0600). A running server picks it up at its next request.
    Add(TokenAddArgs),
    /// Remove every token of USER from FILE (a running server refuses them at its next
    /// request, 401, and audits the attempt).
    Revoke(TokenRevokeArgs),
    /// List the tokens of FILE: user, id (the first 12 hex digits of the SHA-256; the hash
    /// is never shown whole), creation and expiry.
    List(TokenListArgs),
}

#[derive(Args, Debug)]
pub struct TokenRevokeArgs {
    /// The token file.
    #[arg(long)]
    pub tokens: PathBuf,
    /// Whose tokens to remove (all of them).
    #[arg(long)]
    pub user: String,
}

#[derive(Args, Debug)]
pub struct TokenListArgs {
    /// The token file.
    #[arg(long)]
    pub tokens: PathBuf,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TokenAddArgs {
    /// The token file (JSON lines of user and SHA-256).
    #[arg(long)]
    pub tokens: PathBuf,
    /// Who the token is for (recorded in the audit log).
    #[arg(long)]
    pub user: String,
    /// The token stops working this long from now (`90d`, `12h`); default: until revoked.
    #[arg(long, value_parser = capsule_query::parse_duration)]
    pub expires: Option<Duration>,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The store directory (read only: the writer lock is never taken).
    #[arg(long, required = false, required_unless_present = "config")]
    pub store: PathBuf,
    /// Address to listen on, e.g. 0.0.0.0:8443 (port 0 picks a free one; the address bound
    /// is printed on standard error).
    #[arg(long, required = false, required_unless_present = "config")]
    pub listen: String,
    /// The server's certificate chain (PEM).
    #[arg(long, required = false, required_unless_present = "config")]
    pub cert: PathBuf,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, required = false, required_unless_present = "config")]
    pub key: PathBuf,
    /// The token file made by `capsule token add` (re-read when it changes).
    #[arg(long, required = false, required_unless_present = "config")]
    pub tokens: PathBuf,
    /// Mutual TLS: require a client certificate signed by a CA in this PEM file (on top of
    /// the bearer token); its SHA-256 is recorded in the audit log. Re-read when it changes.
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// With --client-ca: certificate revocation lists (PEM) whose certificates are refused.
    /// Re-read when they change.
    #[arg(long, value_name = "FILE", requires = "client_ca")]
    pub crl: Vec<PathBuf>,
    /// Append one JSON line per request here, fsynced (who, from where, what, outcome).
    #[arg(long)]
    pub audit_log: Option<PathBuf>,
    /// Queries (packets, flows or analytics answers) running at once, all users together;
    /// more get 429.
    #[arg(long, default_value_t = 8)]
    pub max_queries: usize,
    /// Queries running at once for one user; more get 429.
    #[arg(long, default_value_t = 2)]
    pub max_queries_per_user: usize,
    /// Bytes one packet export may send (e.g. 10G); over it the answer is refused (413) or,
    /// once streaming, cut.
    #[arg(long, default_value = "64G", value_parser = units::parse_size)]
    pub max_bytes_per_query: u64,
    /// Time one query may run (e.g. 10m); over it the query is stopped.
    #[arg(long, default_value = "30m", value_parser = capsule_query::parse_duration)]
    pub max_query_time: Duration,
    /// The config file: its groups and policy answer /v1/top, /v1/matrix, /v1/alerts...
    /// (never the client's), and its `[serve]` section sets these flags (flags given here
    /// override it; docs/config.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ConfigCheckArgs {
    /// The config file (TOML).
    pub file: PathBuf,
    /// Print the validated model as one JSON document instead of the summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct CheckBpfArgs {
    /// The link type to compile for.
    #[arg(long)]
    pub linktype: u16,
    /// The expression.
    pub expr: String,
}
