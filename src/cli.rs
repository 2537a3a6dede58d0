//! The command line: every subcommand and flag, as clap definitions with typed values.
//!
//! Raw text becomes checked values here, before any command runs (ripgrep's lowargs ->
//! hiargs): sizes, durations, rates, instants, levels and queue lists are parsed by clap's
//! value parsers, so every usage error, whatever the flag, exits with status 2 and a message
//! naming the flag. The command bodies in `cmd/` receive values, never strings to parse.
//! [`parse_args`] also reads `capture --config FILE`: the file's `[capture]` values become
//! the flags the command line lacks, checked by the same parsers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::units;

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
        e => ArgsError::Config(e.to_string()),
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

/// The filter language and the time forms, for `capsule filters`, `capsule help filters` and
/// the long help of `query` and `flows`. The reference is in capsule-query's filter module.
pub const FILTERS_HELP: &str = filters_help!();

/// The text of [`FILTERS_HELP`], as a macro so `concat!` can join it to other help texts.
macro_rules! filters_help {
    () => {
        "\
FILTERS select packets by what their headers say; the words after the flags
form one filter. The empty filter selects every packet.

  host ADDR             IP source or destination (IPv4 or IPv6 literal)
  net ADDR/LEN          address inside a prefix (10.1.0.0/16, fd00::/64);
  net 10.50             a short prefix, as tcpdump: 10.50 = 10.50.0.0/16
  net ADDR mask MASK    the same with a netmask: net 10.1.0.0 mask 255.255.0.0
  port N|NAME           TCP, UDP or SCTP source or destination port; names
                        from a built-in table (http, https, domain, ssh, ...)
  portrange A-B         a port from A to B
  src ..., dst ...      one side only: src host 10.0.0.1, dst port 443,
                        src 10.0.0.1 (an address alone is a host);
                        src or dst ..., src and dst ... (both sides)
  port (80 or 443)      a list of values for one qualifier, as tcpdump:
                        tcp dst port (80 or 443), host (10.0.0.1 or 10.0.0.2)
  tcp, udp, sctp, icmp, icmp6, ip, ip6
                        the protocol; `tcp port 80` is `tcp and port 80`
  proto N|NAME          IP protocol by number or name (gre, esp, ah, ...)
  vlan [ID]             an 802.1Q/802.1ad tag (any of up to two) is ID
  dscp N|NAME           DS field: 0-63, ef, va, le, df (be, default), cs0-cs7,
                        af11-af43
  tcpflags FLAG         the TCP flag is set: fin, syn, rst, push, ack, urg,
                        ece, cwr
  tcp[tcpflags] & MASK OP VALUE
                        tcpdump's form (also tcp[13]); MASK and VALUE are
                        numbers or tcp-syn, tcp-ack, ... joined by |:
                        tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn
  ether host|src|dst MAC
                        an Ethernet address (00:1b:21:0a:0b:0c)
  arp                   ARP frames
  greater N, less N     length on the wire >= N, <= N bytes
  len > N               the same as a comparison: len >, >=, <, <=, ==, != N
  ip[1] & 0xfc == 0xb8  tcpdump's byte expressions: LAYER[OFFSET] or
                        LAYER[OFFSET:SIZE] (ether, ip, ip6, tcp, udp, icmp;
                        SIZE 1, 2 or 4 bytes), an optional & MASK, a
                        comparison and a number (decimal or 0x hex); read
                        from each packet, after any VLAN tags
  and (&&), or (||), not (!), ( )
                        not binds tightest; and and or bind equally,
                        from the left, as in tcpdump: tcp or udp and
                        port 53 is (tcp or udp) and port 53;
                        after and/or a bare value repeats the last
                        qualifiers: tcp port 80 or 443

Examples:
  capsule query --store S --from -10m -w out.pcap host 10.1.2.3 and tcp port 443
  capsule flows --store S dscp ef and not net 10.4.0.0/24
  capsule query --store S --count 'udp and (dst port 53 or dst port 5353)'
  capsule query --store S --count 'tcpflags rst and port https or 8443'

Not supported (use --bpf with a tcpdump expression for these): host names,
named offsets other than tcp[tcpflags] (icmp[icmptype]), icmptype, broadcast,
multicast, ether proto, rarp. `vlan 100 and vlan 200` means both tags, in any
order; every primitive looks through VLAN tags, and tcp[tcpflags] covers IPv6.

TIMES (--from inclusive, --to exclusive; both optional):
  2026-11-30T02:00:00.123456789Z   RFC 3339, up to 9 fraction digits, any offset
  2026-11-30 02:00:00+01:00        a space instead of T
  2026-11-30                       a date: its midnight, UTC
  1796004000.5                     Unix seconds, with a fraction
  @1796004000123456789             nanoseconds since the epoch
  now, -10m, -2h30m, -1.5s         the wall clock now, or a duration before it
  --to +1ms, --to +10m             a duration after --from
"
    };
}
use filters_help;

/// The exit statuses of the commands that answer from the store.
const EXIT_STATUS: &str = exit_status!();

/// The text of [`EXIT_STATUS`], as a macro so `concat!` can join it to other help texts.
macro_rules! exit_status {
    () => {
        "Exit status: 0 the answer is whole; 1 an error; 2 bad usage; 3 the answer is \
partial: damaged data in the store was skipped, and each skipped block or segment is named \
on standard error (file, block, byte range, packets and time span lost)."
    };
}
use exit_status;

/// `query --help` and `flows --help`: the filter language, then the exit statuses.
const QUERY_LONG_AFTER: &str = concat!(filters_help!(), "\n", exit_status!());
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
pub struct ReindexArgs {
    /// The store directory.
    #[arg(long)]
    pub store: PathBuf,
    /// Print one JSON document instead of text.
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

#[derive(Args, Debug)]
pub struct QueryArgs {
    #[command(flatten)]
    pub q: Selection,
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
}

/// `capsule replay`'s exit statuses.
const REPLAY_EXIT_STATUS: &str = "Exit status: 0 every packet of the window was sent; 1 an \
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
    /// Order of the listing.
    #[arg(long, value_enum, default_value_t = FlowSort::Bytes)]
    pub sort: FlowSort,
    /// Show at most this many flows.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What every analytics command takes besides its own options.
#[derive(Args, Debug)]
pub struct AnswerArgs {
    #[command(flatten)]
    pub q: LocalSelection,
    /// The config file with `[groups]`, `[dscp]` and `[egress]` (the file `capsule capture
    /// --config` reads). With --server the server's config answers.
    #[arg(long, conflicts_with = "server")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub remote: RemoteArgs,
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

#[derive(Args, Debug)]
pub struct TriageArgs {
    #[command(flatten)]
    pub a: AnswerArgs,
    /// The directory the report is written into (created; files in it are replaced).
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

/// An interval: a duration (`1m`, `10s`) in nanoseconds.
fn parse_interval(s: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?} is no duration: {e}"))?;
    let ns = u64::try_from(d.as_nanos()).map_err(|_| format!("{s:?} is too long"))?;
    if ns == 0 || !ns.is_multiple_of(1_000_000_000) {
        return Err(format!(
            "{s:?} is not a whole number of seconds (the index counts 1-second buckets)"
        ));
    }
    Ok(ns)
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
fn parse_older_than(s: &str) -> anyhow::Result<Duration> {
    let d = capsule_query::parse_duration(s)?;
    if d.is_zero() {
        anyhow::bail!("{s:?}: an age of 0 is every segment; leave --older-than out for that");
    }
    Ok(d)
}

/// `--age-tier AGE:LEVEL`: a duration above zero and a zstd level (not `store`: the tier
/// compresses more, never less).
fn parse_age_tier(s: &str) -> anyhow::Result<capsule_store::compact::AgeTier> {
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
    #[arg(long)]
    pub store: PathBuf,
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
    #[arg(long, default_value = "1", allow_negative_numbers = true)]
    pub level: capsule_store::writer::Level,
    /// The byte budget for the retention horizon when no running capture says.
    #[arg(long, value_parser = units::parse_size)]
    pub max_bytes: Option<u64>,
}

#[derive(Args, Debug)]
pub struct SegmentsArgs {
    /// The store directory.
    #[arg(long)]
    pub store: PathBuf,
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

/// The store, filter and window shared by `query` and `flows`.
#[derive(Args, Debug)]
pub struct Selection {
    /// The store directory.
    #[arg(long, required_unless_present = "server", conflicts_with = "server")]
    pub store: Option<PathBuf>,
    /// Ask a `capsule serve` (https://HOST:PORT) instead of a local store: the same answer
    /// as the local command (docs/api.md).
    #[arg(long, value_name = "URL", requires = "token_file")]
    pub server: Option<String>,
    /// With --server: a file holding the bearer token (`capsule token add` printed it).
    #[arg(long, value_name = "FILE", requires = "server")]
    pub token_file: Option<PathBuf>,
    /// With --server: CA certificates (PEM) to verify the server with. Default: the
    /// system's.
    #[arg(long, value_name = "FILE", requires = "server")]
    pub ca: Option<PathBuf>,
    /// With --server: a client certificate (PEM) for a server that asks for one (mutual
    /// TLS, `serve --client-ca`).
    #[arg(long, value_name = "FILE", requires_all = ["server", "key"])]
    pub cert: Option<PathBuf>,
    /// With --cert: its private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Start of the window (inclusive): RFC 3339 (`2026-11-30T02:00:00.5Z`), a date
    /// (`2026-11-30`, midnight UTC), Unix seconds, `@NANOS`, `now`, or a duration before now
    /// (`-10m`). Default: the oldest packet held.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_time_now)]
    pub from: Option<u64>,
    /// End of the window (exclusive): any form `--from` takes, or a duration after `--from`
    /// (`+1ms`, `+10m`). Default: after the newest packet.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_end_now)]
    pub to: Option<capsule_query::TimeArg>,
    /// Filter, e.g. `host 10.1.2.3 and tcp port 443`, `dscp ef and not net 10.40.0.0/24`.
    pub filter: Vec<String>,
}

/// The store, filter and window of the analytics commands: a local store only (no
/// `--server` and its TLS options, whose `--key` would collide with `top --key`).
#[derive(Args, Debug)]
pub struct LocalSelection {
    /// The store directory.
    #[arg(long, required_unless_present = "server", conflicts_with = "server")]
    pub store: Option<PathBuf>,
    /// Start of the window (inclusive): RFC 3339 (`2026-11-30T02:00:00.5Z`), a date
    /// (`2026-11-30`, midnight UTC), Unix seconds, `@NANOS`, `now`, or a duration before now
    /// (`-10m`). Default: the oldest packet held.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_time_now)]
    pub from: Option<u64>,
    /// End of the window (exclusive): any form `--from` takes, or a duration after `--from`
    /// (`+1ms`, `+10m`). Default: after the newest packet.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_end_now)]
    pub to: Option<capsule_query::TimeArg>,
    /// Filter, e.g. `host 10.1.2.3 and tcp port 443`, `dscp ef and not net 10.40.0.0/24`.
    pub filter: Vec<String>,
}

/// The store, filter and window of a command that only runs beside the store (`replay`).
#[derive(Args, Debug)]
pub struct StoredWindow {
    /// The store directory.
    #[arg(long)]
    pub store: PathBuf,
    /// Start of the window (inclusive): RFC 3339 (`2026-11-30T02:00:00.5Z`), a date
    /// (`2026-11-30`, midnight UTC), Unix seconds, `@NANOS`, `now`, or a duration before now
    /// (`-10m`). Default: the oldest packet held.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_time_now)]
    pub from: Option<u64>,
    /// End of the window (exclusive): any form `--from` takes, or a duration after `--from`
    /// (`+1ms`, `+10m`). Default: after the newest packet.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_end_now)]
    pub to: Option<capsule_query::TimeArg>,
    /// Filter, e.g. `host 10.1.2.3 and tcp port 443`, `dscp ef and not net 10.40.0.0/24`.
    pub filter: Vec<String>,
}

/// `--server` and its options for the analytics commands. The client certificate is
/// `--client-cert`/`--client-key` here: `top --key` is taken.
#[derive(Args, Debug)]
pub struct RemoteArgs {
    /// Ask a `capsule serve` (https://HOST:PORT) instead of a local store: the same answer
    /// as the local command, from the server's store and config (docs/api.md).
    #[arg(long, value_name = "URL", requires = "token_file")]
    pub server: Option<String>,
    /// With --server: a file holding the bearer token (`capsule token add` printed it).
    #[arg(long, value_name = "FILE", requires = "server")]
    pub token_file: Option<PathBuf>,
    /// With --server: CA certificates (PEM) to verify the server with. Default: the
    /// system's.
    #[arg(long, value_name = "FILE", requires = "server")]
    pub ca: Option<PathBuf>,
    /// With --server: a client certificate (PEM) for a server that asks for one (mutual
    /// TLS, `serve --client-ca`).
    #[arg(long, value_name = "FILE", requires_all = ["server", "client_key"])]
    pub client_cert: Option<PathBuf>,
    /// With --client-cert: its private key (PEM).
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
}

/// A time on the command line, relative forms resolved against the wall clock now.
fn parse_time_now(s: &str) -> Result<u64, capsule_query::TimeError> {
    capsule_query::parse_time(s, capsule_store::now_ns())
}

/// The end of a window on the command line: as [`parse_time_now`], or `+DURATION` after the
/// start.
fn parse_end_now(s: &str) -> Result<capsule_query::TimeArg, capsule_query::TimeError> {
    capsule_query::TimeArg::parse_end(s, capsule_store::now_ns())
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn args(list: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("capsule")
            .chain(list.iter().copied())
            .map(Into::into)
            .collect()
    }

    fn capture(list: &[&str]) -> Result<CaptureArgs, String> {
        match parse_args(args(list)) {
            Ok(Cli {
                cmd: Cmd::Capture(a),
            }) => Ok(a),
            Ok(other) => panic!("not capture: {other:?}"),
            Err(ArgsError::Config(m)) => Err(m),
            Err(ArgsError::Clap(e)) => Err(e.to_string()),
        }
    }

    fn file(dir: &tempfile::TempDir, text: &str) -> String {
        let f = dir.path().join("capsule.toml");
        std::fs::write(&f, text).unwrap();
        f.display().to_string()
    }

    fn serve(list: &[&str]) -> Result<ServeArgs, String> {
        match parse_args(args(list)) {
            Ok(Cli { cmd: Cmd::Serve(a) }) => Ok(a),
            Ok(other) => panic!("not serve: {other:?}"),
            Err(ArgsError::Config(m)) => Err(m),
            Err(ArgsError::Clap(e)) => Err(e.to_string()),
        }
    }

    /// Every long flag of `sub` (but --help and --config) has a key in `keys`, named like
    /// the flag with `_` for `-`, and every key a flag.
    fn flags_match_keys(sub: &str, keys: &[(&str, &str, capsule_config::CaptureType)]) {
        let cmd = Cli::command();
        let sub = cmd.find_subcommand(sub).unwrap();
        let mut flags: Vec<String> = sub
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .filter(|f| f != "--help" && f != "--config")
            .collect();
        let mut keys: Vec<String> = keys
            .iter()
            .map(|(k, f, _)| {
                assert_eq!(f.trim_start_matches("--").replace('-', "_"), *k);
                f.to_string()
            })
            .collect();
        flags.sort();
        keys.sort();
        assert_eq!(flags, keys);
    }

    #[test]
    fn every_serve_flag_has_a_config_key_and_every_key_a_flag() {
        flags_match_keys("serve", capsule_config::SERVE_KEYS);
    }

    #[test]
    fn the_serve_section_fills_in_flags_and_the_command_line_overrides_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(
            &dir,
            "[groups]\na = []\n[serve]\nstore = \"/srv/capsule\"\nlisten = \"127.0.0.1:8443\"\n\
             cert = \"srv.pem\"\nkey = \"srv.key\"\ntokens = \"tokens\"\n\
             client_ca = \"ca.pem\"\ncrl = [\"a.crl\", \"b.crl\"]\nmax_queries = 3\n\
             max_bytes_per_query = \"1G\"\nmax_query_time = \"5m\"\n",
        );
        let a = serve(&["serve", "--config", &f]).unwrap();
        assert_eq!(a.store, PathBuf::from("/srv/capsule"));
        assert_eq!(a.listen, "127.0.0.1:8443");
        assert_eq!(a.crl, vec![PathBuf::from("a.crl"), PathBuf::from("b.crl")]);
        assert_eq!(a.max_queries, 3);
        assert_eq!(a.max_queries_per_user, 2);
        assert_eq!(a.max_bytes_per_query, 1 << 30);
        assert_eq!(a.max_query_time, Duration::from_secs(300));
        assert_eq!(a.config.as_deref(), Some(Path::new(&f)));
        let a = serve(&[
            "serve",
            "--config",
            &f,
            "--listen",
            "[::1]:9",
            "--max-queries=7",
        ])
        .unwrap();
        assert_eq!(a.listen, "[::1]:9");
        assert_eq!(a.max_queries, 7);
        // A value its flag refuses names the file, line and key.
        let bad = file(
            &dir,
            "[serve]\nlisten = \"x:1\"\nmax_query_time = \"soon\"\n",
        );
        let e = serve(&["serve", "--config", &bad]).unwrap_err();
        assert!(
            e.contains(":3:")
                && e.contains("serve.max_query_time")
                && e.contains("--max-query-time"),
            "{e}"
        );
        // What neither gives is named with its key.
        let part = file(&dir, "[serve]\nlisten = \"x:1\"\n");
        let e = serve(&["serve", "--config", &part]).unwrap_err();
        assert!(
            e.contains("--store is needed") && e.contains("[serve]"),
            "{e}"
        );
        let unknown = file(&dir, "[serve]\nlisten = \"x:1\"\nport = 3\n");
        let e = serve(&["serve", "--config", &unknown]).unwrap_err();
        assert!(e.contains(":3:") && e.contains("serve.port"), "{e}");
    }

    #[test]
    fn every_capture_flag_has_a_config_key_and_every_key_a_flag() {
        flags_match_keys("capture", capsule_config::CAPTURE_KEYS);
    }

    #[test]
    fn the_age_tier_is_age_colon_level_from_the_flag_or_the_file() {
        use capsule_store::compact::AgeTier;
        let t = |age: u64, level: i32| AgeTier {
            age: Duration::from_secs(age),
            level: capsule_store::writer::Level::Zstd(level),
        };
        let a = capture(&[
            "capture",
            "--iface",
            "x",
            "--store",
            "s",
            "--age-tier",
            "7d:9",
        ])
        .unwrap();
        assert_eq!(a.age_tier, Some(t(7 * 86400, 9)));
        let a = capture(&["capture", "--iface", "x", "--store", "s"]).unwrap();
        assert_eq!(a.age_tier, None, "the tier is off unless asked for");
        for (bad, says) in [
            ("7d", "no `:`"),
            ("7d:store", "zstd level"),
            ("7d:99", "level"),
            ("0s:9", "age of 0"),
            ("soon:9", "soon"),
        ] {
            let e = capture(&["capture", "--iface", "x", "--store", "s", "--age-tier", bad])
                .unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let f = file(
            &dir,
            "[capture]\niface = \"eth9\"\nstore = \"/srv/capsule\"\nage_tier = \"12h:6\"\n",
        );
        let a = capture(&["capture", "--config", &f]).unwrap();
        assert_eq!(a.age_tier, Some(t(12 * 3600, 6)));
        let a = capture(&["capture", "--config", &f, "--age-tier", "1d:15"]).unwrap();
        assert_eq!(a.age_tier, Some(t(86400, 15)));
        let bad = file(&dir, "[capture]\niface = \"eth9\"\nage_tier = \"12h\"\n");
        let e = capture(&["capture", "--config", &bad, "--store", "s"]).unwrap_err();
        assert!(e.contains(":3:") && e.contains("age_tier"), "{e}");
    }

    #[test]
    fn the_file_fills_in_flags_and_the_command_line_overrides_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(
            &dir,
            "[groups]\na = []\n[capture]\niface = \"eth9\"\nstore = \"/srv/capsule\"\n\
             ring_size = \"64M\"\nsnaplen = 96\nqueues = [0, 2]\nlevel = -10\n\
             take_interface = true\nmode = \"afpacket\"\nmax_bytes = \"2G\"\n",
        );
        let a = capture(&["capture", "--config", &f]).unwrap();
        assert_eq!(a.iface, ["eth9"]);
        assert_eq!(a.store, PathBuf::from("/srv/capsule"));
        assert_eq!(a.ring_size, 64 << 20);
        assert_eq!(a.snaplen, 96);
        assert_eq!(
            format!("{:?}", a.queues),
            format!(
                "{:?}",
                "0,2".parse::<capsule_capture::live::Queues>().unwrap()
            )
        );
        assert_eq!(
            format!("{:?}", a.writer.level),
            format!(
                "{:?}",
                "-10".parse::<capsule_store::writer::Level>().unwrap()
            )
        );
        assert!(a.take_interface);
        assert!(matches!(a.mode, CaptureMode::Afpacket));
        assert_eq!(a.writer.max_bytes, Some(Setting::Set(2 << 30)));
        // Defaults stay for keys the file lacks.
        assert_eq!(a.frame_size, 2048);

        let a = capture(&[
            "capture",
            "--ring-size",
            "32M",
            "--config",
            &f,
            "--iface=lo",
            "--snaplen",
            "0",
            "--mode",
            "auto",
        ])
        .unwrap();
        assert_eq!(a.iface, ["lo"]);
        assert_eq!(a.ring_size, 32 << 20);
        assert_eq!(a.snaplen, 0);
        assert!(matches!(a.mode, CaptureMode::Auto));
        assert_eq!(a.store, PathBuf::from("/srv/capsule"));
        assert_eq!(a.writer.max_bytes, Some(Setting::Set(2 << 30)));
    }

    #[test]
    fn several_interfaces_come_from_the_command_line_or_the_file_with_their_modes() {
        let a = capture(&[
            "capture",
            "--iface",
            "a",
            "--iface",
            "b",
            "--store",
            "s",
            "--iface-mode",
            "b=afpacket",
        ])
        .unwrap();
        assert_eq!(a.iface, ["a", "b"]);
        assert_eq!(a.iface_mode, [("b".to_string(), CaptureMode::Afpacket)]);
        let e = capture(&[
            "capture",
            "--iface",
            "a",
            "--store",
            "s",
            "--iface-mode",
            "a",
        ])
        .unwrap_err();
        assert!(e.contains("IFACE=MODE"), "{e}");
        let e = capture(&[
            "capture",
            "--iface",
            "a",
            "--store",
            "s",
            "--iface-mode",
            "a=turbo",
        ])
        .unwrap_err();
        assert!(
            e.contains("\"turbo\" is not a mode") && e.contains("afpacket"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let f = file(
            &dir,
            "[capture]\niface = [\"eth1\", \"eth2\"]\nstore = \"s\"\n\
             [capture.interfaces.eth2]\nmode = \"afpacket\"\n",
        );
        let a = capture(&["capture", "--config", &f]).unwrap();
        assert_eq!(a.iface, ["eth1", "eth2"]);
        assert_eq!(a.iface_mode, [("eth2".to_string(), CaptureMode::Afpacket)]);
        // The command line's interfaces replace the file's.
        let a = capture(&["capture", "--config", &f, "--iface", "x"]).unwrap();
        assert_eq!(a.iface, ["x"]);
        let f = file(&dir, "[capture.interfaces.eth2]\nmode = \"fast\"\n");
        let e = capture(&["capture", "--config", &f, "--iface", "x", "--store", "s"]).unwrap_err();
        assert!(
            e.contains(":2:8: capture.interfaces.eth2.mode: bad value for --iface-mode"),
            "{e}"
        );
    }

    #[test]
    fn a_switch_set_false_in_the_file_stays_off() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(
            &dir,
            "[capture]\niface = \"eth9\"\nstore = \"s\"\ntake_interface = false\n",
        );
        assert!(
            !capture(&["capture", "--config", &f])
                .unwrap()
                .take_interface
        );
        assert!(
            capture(&["capture", "--config", &f, "--take-interface"])
                .unwrap()
                .take_interface
        );
    }

    #[test]
    fn a_bad_value_in_the_file_names_its_line_and_flag() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(
            &dir,
            "[capture]\niface = \"eth9\"\n\nblock_age = \"soon\"\n",
        );
        let e = capture(&["capture", "--config", &f, "--store", "s"]).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "{f}:4:13: capture.block_age: bad value for --block-age: "
            )),
            "{e}"
        );
        assert!(e.contains("soon"), "{e}");
        // The same value on the command line overrides the bad one: the file's is not used.
        capture(&[
            "capture",
            "--config",
            &f,
            "--store",
            "s",
            "--block-age",
            "1s",
        ])
        .unwrap();
        let f = file(&dir, "[capture]\nmode = \"xdp-turbo\"\n");
        let e = capture(&["capture", "--config", &f, "--store", "s", "--iface", "x"]).unwrap_err();
        assert!(
            e.contains(":2:8: capture.mode: bad value for --mode: "),
            "{e}"
        );
    }

    #[test]
    fn iface_and_store_are_needed_from_one_place_or_the_other() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(&dir, "[capture]\nstore = \"s\"\n");
        let e = capture(&["capture", "--config", &f]).unwrap_err();
        assert!(e.contains("--iface is needed"), "{e}");
        assert_eq!(
            capture(&["capture", "--config", &f, "--iface", "x"])
                .unwrap()
                .iface,
            ["x"]
        );
        let e = capture(&["capture", "--iface", "x"]).unwrap_err();
        assert!(e.contains("--store"), "{e}");
    }

    #[test]
    fn an_invalid_file_is_refused_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(
            &dir,
            "[capture]\niface = \"x\"\nstore = \"s\"\nringsize = \"1G\"\n",
        );
        let e = capture(&["capture", "--config", &f]).unwrap_err();
        assert!(
            e.starts_with(&format!("{f}:4:1: capture.ringsize: unknown key")),
            "{e}"
        );
    }
}

#[cfg(test)]
mod help_audit {
    use clap::CommandFactory;

    /// Every subcommand (at any depth) and every one of its arguments, flags and positionals
    /// alike, has a description in `--help`.
    /// clap checks its definitions (no two arguments of a command with one long name, valid
    /// `requires`, ...) only in debug builds: run those checks here, since the tests run in
    /// release. A flattened `--key` once hid `top --key` behind `query --server`'s TLS key.
    #[test]
    fn the_command_line_definitions_pass_clap_s_own_checks() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_and_argument_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>, args: &mut usize) {
            let here = format!("{path} {}", cmd.get_name()).trim().to_string();
            if cmd.get_about().is_none() && cmd.get_long_about().is_none() && !path.is_empty() {
                missing.push(format!("`{here}` has no description"));
            }
            for a in cmd.get_arguments() {
                if matches!(a.get_id().as_str(), "help" | "version") {
                    continue;
                }
                *args += 1;
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("`{here}` argument {} has no help", a.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_name() != "help" {
                    walk(sub, &here, missing, args);
                }
            }
        }
        let cmd = super::Cli::command();
        let (mut missing, mut args) = (Vec::new(), 0);
        walk(&cmd, "", &mut missing, &mut args);
        assert!(args > 50, "the walk saw only {args} arguments");
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
