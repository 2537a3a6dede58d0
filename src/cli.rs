//! The command line: every subcommand and flag, as clap definitions with typed values.
//!
//! Raw text becomes checked values here, before any command runs (ripgrep's lowargs ->
//! hiargs): sizes, durations, rates, instants, levels and queue lists are parsed by clap's
//! value parsers, so every usage error, whatever the flag, exits with status 2 and a message
//! naming the flag. The command bodies in `cmd/` receive values, never strings to parse.

use std::path::PathBuf;
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
    /// List flows from the side index alone.
    #[command(after_help = EXIT_STATUS, after_long_help = QUERY_LONG_AFTER)]
    Flows(FlowsArgs),
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
    /// Write deterministic synthetic traffic (AI cluster beside an enterprise network).
    Synth(SynthArgs),
    /// Check every checksum, header, footer and index of a store, naming each problem.
    #[command(
        after_help = "Exit status: 0 nothing is wrong (or everything wrong was repaired); 1 \
problems remain, each printed with its file, byte offset, and what was expected and found."
    )]
    Verify(VerifyArgs),
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
  port N|NAME           TCP, UDP or SCTP source or destination port; names
                        from a built-in table (http, https, domain, ssh, ...)
  portrange A-B         a port from A to B
  src ..., dst ...      one side only: src host 10.0.0.1, dst port 443;
                        src or dst ..., src and dst ... (both sides)
  tcp, udp, sctp, icmp, icmp6, ip, ip6
                        the protocol; `tcp port 80` is `tcp and port 80`
  proto N|NAME          IP protocol by number or name (gre, esp, ah, ...)
  vlan [ID]             an 802.1Q/802.1ad tag (any of up to two) is ID
  dscp N|NAME           DS field: 0-63, ef, va, le, be, default, cs0-cs7,
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
  and (&&), or (||), not (!), ( )
                        not binds tighter than and, and tighter than or;
                        after and/or a bare value repeats the last
                        qualifiers: tcp port 80 or 443

Examples:
  capsule query --store S --from -10m -w out.pcap host 10.1.2.3 and tcp port 443
  capsule flows --store S dscp ef and not net 10.4.0.0/24
  capsule query --store S --count 'udp and (dst port 53 or dst port 5353)'
  capsule query --store S --count 'tcpflags rst and port https or 8443'

Not supported (use --bpf with a tcpdump expression for these): host names,
byte offsets other than the TCP flags (ip[1] & 0xfc), icmptype, broadcast,
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
pub struct CaptureArgs {
    /// The interface to capture on (a dedicated SPAN/TAP port; it is put in promiscuous
    /// mode).
    #[arg(long)]
    pub iface: String,
    /// The store directory (created if missing).
    #[arg(long)]
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
    #[command(flatten)]
    pub writer: WriterArgs,
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

#[derive(Args, Debug)]
pub struct CompactArgs {
    /// The store directory.
    #[arg(long)]
    pub store: PathBuf,
    /// The target zstd level: blocks below it are recompressed at it.
    #[arg(long, default_value = "1", allow_negative_numbers = true)]
    pub level: capsule_store::writer::Level,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
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

/// A time on the command line, relative forms resolved against the wall clock now.
fn parse_time_now(s: &str) -> Result<u64, capsule_query::TimeError> {
    capsule_query::parse_time(s, capsule_store::now_ns())
}

/// The end of a window on the command line: as [`parse_time_now`], or `+DURATION` after the
/// start.
fn parse_end_now(s: &str) -> Result<capsule_query::TimeArg, capsule_query::TimeError> {
    capsule_query::TimeArg::parse_end(s, capsule_store::now_ns())
}

#[derive(ValueEnum, Clone, Copy, Debug)]
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
    /// Store-wide byte budget: the oldest segments are deleted to stay under it (e.g. 500G).
    #[arg(long, value_parser = units::parse_size)]
    pub max_bytes: Option<u64>,
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
    /// The store writer's configuration.
    pub fn config(&self) -> anyhow::Result<capsule_store::WriterConfig> {
        let mut c = capsule_store::WriterConfig {
            block_bytes: usize::try_from(self.block_size)?,
            block_age: self.block_age,
            segment_bytes: self.segment_size,
            segment_age: self.segment_age,
            max_bytes: self.max_bytes,
            level: self.level,
            ..capsule_store::WriterConfig::default()
        };
        if let Some(t) = self.threads {
            c.threads = t;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod help_audit {
    use clap::CommandFactory;

    /// Every subcommand (at any depth) and every one of its arguments, flags and positionals
    /// alike, has a description in `--help`.
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
