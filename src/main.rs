//! `capsule`: the capture daemon, query tool and engineers' CLI.
//!
//! Errors become exit codes here and only here: 0 success (a closed output pipe counts as
//! success, so `capsule query ... | head` behaves), 1 failure, 2 bad usage.

mod units;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use capsule_capture::live::{self, CaptureConfig, Mode, Queues};
use capsule_store::{Store, WriterConfig};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "capsule",
    version,
    about = "Full-packet capture and retention: keeps every packet, answers for any past window."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Import pcap or pcapng files (or `-` for stdin) into a store.
    Import {
        #[arg(long)]
        store: PathBuf,
        #[command(flatten)]
        writer: WriterArgs,
        /// Input files; `-` reads standard input.
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// Capture packets from a network interface into a store until SIGINT or SIGTERM.
    Capture {
        /// The interface to capture on (a dedicated SPAN/TAP port; it is put in promiscuous
        /// mode).
        #[arg(long)]
        iface: String,
        #[arg(long)]
        store: PathBuf,
        /// How to capture. `auto` tries AF_XDP with native XDP, then generic XDP, then
        /// AF_PACKET, and logs which it took and why.
        #[arg(long, value_enum, default_value_t = CaptureMode::Auto)]
        mode: CaptureMode,
        /// RX queues to capture with AF_XDP: `all` or a list such as `0,1` (one socket and
        /// worker thread each).
        #[arg(long, default_value = "all")]
        queues: Queues,
        /// AF_XDP UMEM frame size: 2048 or 4096 (frames larger than a frame arrive in several
        /// buffers and are joined).
        #[arg(long, default_value_t = 2048)]
        frame_size: u32,
        /// Bytes kept of each packet (0: whole packets).
        #[arg(long, default_value_t = 0)]
        snaplen: u32,
        /// PACKET_FANOUT group id, so several capture processes can share an interface
        /// (0: none).
        #[arg(long, default_value_t = 0)]
        fanout_group: u16,
        /// Kernel buffer that absorbs bursts while the store catches up (e.g. 256M). AF_PACKET:
        /// the TPACKET ring. AF_XDP: the UMEM of all queues together, split equally, a power
        /// of two of frames per queue (16384 at least).
        #[arg(long, default_value = "256M")]
        ring_size: String,
        #[command(flatten)]
        writer: WriterArgs,
    },
    /// Export packets from a store, in timestamp order.
    Query {
        #[command(flatten)]
        q: QueryArgs,
        /// Output file; `-` writes to standard output.
        #[arg(short = 'w', long = "write", required_unless_present_any = ["explain", "count"])]
        write: Option<String>,
        #[arg(long, value_enum, default_value_t = OutFormat::Pcap)]
        format: OutFormat,
        /// A tcpdump filter, applied (by libpcap) after the index and FILTER narrowed the search.
        #[arg(long)]
        bpf: Option<String>,
        /// Print the plan (segments and blocks to read) without reading packets.
        #[arg(long)]
        explain: bool,
        /// Print how many packets and bytes the query would export, and write nothing.
        #[arg(long, conflicts_with = "explain")]
        count: bool,
    },
    /// List flows from the side index alone.
    Flows {
        #[command(flatten)]
        q: QueryArgs,
        #[arg(long, value_enum, default_value_t = FlowSort::Bytes)]
        sort: FlowSort,
        /// Show at most this many flows.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild the side index of every sealed segment from the segments alone.
    Reindex {
        #[arg(long)]
        store: PathBuf,
    },
    /// List the segments of a store.
    /// Show a store's capture: how it captures, packets, drops by cause and rates (live while
    /// `capsule capture` runs), and what the store holds.
    Status {
        #[arg(long)]
        store: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Print again every second until interrupted.
        #[arg(long)]
        watch: bool,
    },
    Segments {
        #[arg(long)]
        store: PathBuf,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write deterministic synthetic traffic (AI cluster beside an enterprise network).
    Synth {
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Traffic time covered, e.g. 10s, 1m.
        #[arg(long, default_value = "10s")]
        duration: String,
        /// Average wire rate, e.g. 1G, 500M (bits per second).
        #[arg(long, default_value = "1G")]
        rate: String,
        /// Time of the first packet: RFC 3339, Unix seconds, or @NANOS.
        #[arg(long, default_value = "2026-11-30T02:00:00Z")]
        start: String,
        /// Output pcap; `-` writes to standard output.
        #[arg(short = 'w', long = "write")]
        write: String,
        /// Where to write the truth file (every flow and the planted facts) as JSON.
        #[arg(long)]
        truth: Option<PathBuf>,
    },
}

/// The store, filter and window shared by `query` and `flows`.
#[derive(Args, Debug)]
struct QueryArgs {
    #[arg(long)]
    store: PathBuf,
    /// Start of the window (inclusive): RFC 3339, Unix seconds, @NANOS, or relative (-10m, now).
    #[arg(long, allow_hyphen_values = true)]
    from: Option<String>,
    /// End of the window (exclusive): RFC 3339, Unix seconds, @NANOS, or relative (-10m, now).
    #[arg(long, allow_hyphen_values = true)]
    to: Option<String>,
    /// Filter, e.g. `host 10.1.2.3 and tcp port 443`, `dscp ef and not net 10.40.0.0/24`.
    filter: Vec<String>,
}

impl QueryArgs {
    fn query(&self) -> Result<capsule_query::Query> {
        let text = self.filter.join(" ");
        let filter =
            capsule_query::Filter::parse(&text).map_err(|e| anyhow::anyhow!("bad filter:\n{e}"))?;
        let now = capsule_store::now_ns();
        let from_ns = self
            .from
            .as_deref()
            .map(|t| capsule_query::parse_time(t, now))
            .transpose()
            .context("--from")?;
        let to_ns = self
            .to
            .as_deref()
            .map(|t| capsule_query::parse_time(t, now))
            .transpose()
            .context("--to")?;
        if let (Some(f), Some(t)) = (from_ns, to_ns) {
            if f > t {
                bail!(
                    "--from {} is after --to {}",
                    capsule_query::format_instant(f),
                    capsule_query::format_instant(t)
                );
            }
        }
        Ok(capsule_query::Query {
            filter,
            from_ns,
            to_ns,
        })
    }
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum CaptureMode {
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
enum FlowSort {
    Bytes,
    Packets,
    First,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum OutFormat {
    Pcap,
    Pcapng,
}

/// How the store writer cuts blocks and segments, and the disk budget.
#[derive(Args, Debug)]
struct WriterArgs {
    /// Uncompressed size of a block (e.g. 1M).
    #[arg(long, default_value = "1M")]
    block_size: String,
    /// A block older than this is cut even if not full (live capture).
    #[arg(long, default_value = "100ms")]
    block_age: String,
    /// On-disk size after which a segment is sealed (e.g. 1G).
    #[arg(long, default_value = "1G")]
    segment_size: String,
    /// Age (wall clock or packet time spanned) after which a segment is sealed.
    #[arg(long, default_value = "10m")]
    segment_age: String,
    /// Store-wide byte budget: the oldest segments are deleted to stay under it (e.g. 500G).
    #[arg(long)]
    max_bytes: Option<String>,
    /// zstd compression level, -1000 to 22 (higher compresses more and costs more CPU), or
    /// `store` (no compression: a copy). Live capture steps down to -10, -1000, then store,
    /// while blocks queue up for the compressors or a capture ring fills.
    #[arg(long, default_value = "1", value_parser = parse_level, allow_negative_numbers = true)]
    level: i32,
    /// Compression threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

/// `--level`: `store`, or a zstd level from -1000 to 22.
fn parse_level(s: &str) -> std::result::Result<i32, String> {
    if s == "store" {
        return Ok(capsule_store::writer::STORE_LEVEL);
    }
    match s.parse::<i32>() {
        Ok(l) if (capsule_store::writer::FASTEST_LEVEL..=22).contains(&l) => Ok(l),
        _ => Err(format!(
            "expected `store` or a zstd level from -1000 to 22, found {s:?}"
        )),
    }
}

impl WriterArgs {
    fn config(&self) -> Result<WriterConfig> {
        let mut c = WriterConfig {
            block_bytes: usize::try_from(
                units::parse_size(&self.block_size).context("--block-size")?,
            )?,
            block_age: capsule_query::parse_duration(&self.block_age).context("--block-age")?,
            segment_bytes: units::parse_size(&self.segment_size).context("--segment-size")?,
            segment_age: capsule_query::parse_duration(&self.segment_age)
                .context("--segment-age")?,
            max_bytes: self
                .max_bytes
                .as_deref()
                .map(units::parse_size)
                .transpose()
                .context("--max-bytes")?,
            level: self.level,
            ..WriterConfig::default()
        };
        if let Some(t) = self.threads {
            c.threads = t;
        }
        Ok(c)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CAPSULE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("capsule: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<capsule_replay::ExportError>()
                .is_some_and(|x| x.is_broken_pipe())
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Import {
            store,
            writer,
            files,
        } => import(&store, &writer, &files),
        Cmd::Query {
            q,
            write,
            format,
            bpf,
            explain,
            count,
        } => query(&q, write.as_deref(), format, bpf, explain, count),
        Cmd::Flows {
            q,
            sort,
            limit,
            json,
        } => flows(&q, sort, limit, json),
        Cmd::Capture {
            iface,
            store,
            mode,
            queues,
            frame_size,
            snaplen,
            fanout_group,
            ring_size,
            writer,
        } => capture(&CaptureArgs {
            iface,
            store,
            mode,
            queues,
            frame_size,
            snaplen,
            fanout_group,
            ring_size,
            writer,
        }),
        Cmd::Reindex { store } => reindex(&store),
        Cmd::Segments { store, json } => segments(&store, json),
        Cmd::Status { store, json, watch } => status(&store, json, watch),
        Cmd::Synth {
            seed,
            duration,
            rate,
            start,
            write,
            truth,
        } => synth(seed, &duration, &rate, &start, &write, truth.as_deref()),
    }
}

fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs.max(1e-9)
}

fn import(store: &Path, args: &WriterArgs, files: &[String]) -> Result<ExitCode> {
    let cfg = args.config()?;
    let t0 = Instant::now();
    let (mut writer, opened) = capsule_index::open_writer(store, cfg)?;
    print_open_report(&opened);
    let mut damaged = Vec::new();
    // A store failure stops the import, but what was written is still sealed below.
    let mut failed = None;
    for f in files {
        let rep = if f == "-" {
            // A pipe may stay open and idle: read it on a thread and cut blocks by age.
            capsule_capture::import_live(&mut writer, "<stdin>", std::io::stdin())
        } else {
            match std::fs::File::open(f) {
                Ok(file) => capsule_capture::import_reader(&mut writer, f, file),
                Err(e) => {
                    eprintln!("capsule: error: cannot open {f}: {e}");
                    damaged.push(f.clone());
                    continue;
                }
            }
        };
        let rep = match rep {
            Ok(r) => r,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        let disorder = if rep.out_of_order > 0 {
            format!(
                ", {} out of timestamp order (sorted within blocks)",
                rep.out_of_order
            )
        } else {
            String::new()
        };
        println!(
            "{}: {} packets, {} bytes, {} interface(s){disorder}",
            rep.source, rep.packets, rep.wire_bytes, rep.interfaces
        );
        if let Some(e) = rep.error {
            eprintln!(
                "capsule: error: {e}; the {} packets before it were kept",
                rep.packets
            );
            damaged.push(f.clone());
        }
    }
    let finished = writer.finish();
    if let Some(e) = failed {
        // After a store failure the writer has already stopped for the same reason; say
        // more only if sealing failed for another one.
        if let (Err(f), capsule_capture::ImportError::UndefinedInterface { .. }) = (&finished, &e) {
            eprintln!("capsule: error: sealing the store after the failure: {f}");
        }
        return Err(e.into());
    }
    let report = finished?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "stored {} packets ({} bytes) in {:.2} s, {:.0} MB/s; {} blocks, compression {:.2}x; \
         {} segment(s) sealed, {} deleted by retention; store now {} bytes",
        report.packets,
        report.wire_bytes,
        secs,
        mb_per_s(report.uncompressed_bytes, secs),
        report.blocks,
        report.uncompressed_bytes as f64 / report.compressed_bytes.max(1) as f64,
        report.sealed.len(),
        report.deleted.len(),
        report.store_bytes
    );
    if damaged.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        bail!(
            "{} input(s) were damaged: {}",
            damaged.len(),
            damaged.join(", ")
        )
    }
}

/// Says what opening the store for writing found: recovered torn segments and retention.
fn print_open_report(opened: &capsule_store::OpenReport) {
    for r in &opened.recovered {
        let why = match r.problem.as_deref() {
            Some(p) => format!(" ({p})"),
            // A walk that ends cleanly before the end of the file ended at direct-I/O padding.
            None if r.cut_bytes > 0 => " (zero padding after the last block)".to_string(),
            None => String::new(),
        };
        match (&r.sealed, &r.moved_aside) {
            (Some(s), _) => println!(
                "recovered segment {}: kept {} blocks ({} packets), cut {} bytes at offset {}{why}; \
                 sealed as {}",
                r.seq,
                r.kept_blocks,
                r.kept_packets,
                r.cut_bytes,
                r.cut_at,
                s.path.display()
            ),
            (None, Some(aside)) => println!(
                "recovered segment {}: its head is unreadable; kept for inspection as {}{why}",
                r.seq,
                aside.display()
            ),
            (None, None) => println!(
                "recovered segment {}: no whole block in it; its {} bytes were removed{why}",
                r.seq, r.cut_bytes
            ),
        }
    }
    if !opened.reindexed.is_empty() {
        println!(
            "rebuilt the side index of segment(s) {:?}",
            opened.reindexed
        );
    }
    for d in &opened.deleted {
        println!(
            "retention: deleted segment {} ({} bytes) to fit the byte budget",
            d.seq, d.bytes
        );
    }
}

fn query(
    args: &QueryArgs,
    write: Option<&str>,
    format: OutFormat,
    bpf: Option<String>,
    explain: bool,
    count: bool,
) -> Result<ExitCode> {
    let store = Store::open(&args.store)?;
    let opts = capsule_replay::ExportOptions {
        format: match format {
            OutFormat::Pcap => capsule_replay::Format::Pcap,
            OutFormat::Pcapng => capsule_replay::Format::PcapNg,
        },
        query: args.query()?,
        bpf,
        ..Default::default()
    };
    if explain {
        let plan = capsule_replay::export::explain(&store, &opts)?;
        print_plan(&plan);
        return Ok(ExitCode::SUCCESS);
    }
    let t0 = Instant::now();
    let report = match write {
        _ if count => capsule_replay::export(&store, &opts, std::io::sink())?,
        Some("-") => capsule_replay::export(&store, &opts, std::io::stdout().lock())?,
        Some(path) => {
            let f = std::fs::File::create(path).with_context(|| format!("cannot create {path}"))?;
            capsule_replay::export(&store, &opts, f)?
        }
        None => unreachable!("clap requires -w unless --explain or --count"),
    };
    if !report.unindexed.is_empty() {
        eprintln!(
            "capsule: note: segment(s) {:?} have no side index, so all their blocks in the window \
             were read; `capsule reindex` builds it",
            report.unindexed
        );
    }
    let drops = match report.drops_in_window {
        Some(d) => format!("; the capture reported {d} packets dropped in this window"),
        None => String::new(),
    };
    let summary = format!(
        "{} packets ({} bytes); read {} of {} blocks in {} of {} segments in {:.3} s{drops}",
        report.packets,
        report.captured_bytes,
        report.blocks_read,
        report.blocks_total,
        report.segments_touched,
        report.segments_total,
        t0.elapsed().as_secs_f64(),
    );
    if count {
        println!("{summary}");
    } else {
        eprintln!("exported {summary}");
    }
    Ok(ExitCode::SUCCESS)
}

struct CaptureArgs {
    iface: String,
    store: PathBuf,
    mode: CaptureMode,
    queues: Queues,
    frame_size: u32,
    snaplen: u32,
    fanout_group: u16,
    ring_size: String,
    writer: WriterArgs,
}

impl CaptureArgs {
    fn config(&self) -> Result<CaptureConfig> {
        Ok(CaptureConfig {
            iface: self.iface.clone(),
            mode: match self.mode {
                CaptureMode::Auto => Mode::Auto,
                CaptureMode::Xdp => Mode::Xdp,
                CaptureMode::XdpNative => Mode::XdpNative,
                CaptureMode::XdpGeneric => Mode::XdpGeneric,
                CaptureMode::Afpacket => Mode::Afpacket,
            },
            queues: self.queues.clone(),
            frame_size: self.frame_size,
            snaplen: self.snaplen,
            fanout_group: self.fanout_group,
            ring_bytes: units::parse_size(&self.ring_size).context("--ring-size")?,
        })
    }
}

fn capture(a: &CaptureArgs) -> Result<ExitCode> {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let iface = &a.iface;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install a signal handler")?;
    }
    let capturer = live::open(&a.config()?)?;
    let desc = capturer.description().to_string();
    let cfg = WriterConfig {
        // Live packets cannot wait: compress faster rather than let the ring overflow.
        adaptive: true,
        ..a.writer.config()?
    };
    let (mut writer, opened) = capsule_index::open_writer(&a.store, cfg)?;
    print_open_report(&opened);
    eprintln!("capsule: capturing on {iface} with {desc}");
    let mut status = capsule_capture::status::StatusFile::new(&a.store, iface, &desc);
    let t0 = Instant::now();
    let mut last_log = Instant::now();
    let gauge = writer.pressure_gauge();
    let on_stats = |r: &live::LiveReport| {
        status.update(r, gauge.read());
        if last_log.elapsed() >= std::time::Duration::from_secs(10) {
            tracing::info!(
                packets = r.packets,
                bytes = r.wire_bytes,
                drops = r.drops(),
                "capturing"
            );
            last_log = Instant::now();
        }
    };
    let result = capturer.run(&mut writer, &stop, on_stats);
    // Seal what was captured whether the capture ended well or not.
    let finished = writer.finish();
    status.finish();
    let rep = result?;
    let written = finished?;
    println!(
        "captured {} packets ({} bytes) on {iface} in {:.1} s; seen {}, dropped {}{}; \
         {} VLAN tags restored, {} packets over 256 KiB cut; {} segment(s) sealed, \
         store now {} bytes",
        rep.packets,
        rep.wire_bytes,
        t0.elapsed().as_secs_f64(),
        rep.seen(),
        rep.drops(),
        capsule_capture::status::drop_causes(&rep),
        rep.vlan_restored,
        rep.truncated,
        written.sealed.len(),
        written.store_bytes
    );
    Ok(ExitCode::SUCCESS)
}

fn print_plan(plan: &capsule_index::plan::Plan) {
    println!(
        "{:>6}  {:>8}  {:>10}  {:>8}  {:<7}",
        "seq", "blocks", "in window", "to read", "index"
    );
    for s in &plan.segments {
        println!(
            "{:>6}  {:>8}  {:>10}  {:>8}  {:<7}",
            s.seq,
            s.blocks_total,
            s.blocks_in_window,
            s.blocks.len(),
            if s.indexed { "used" } else { "-" }
        );
    }
    let total = plan.blocks_total().max(1);
    println!(
        "plan: read {} of {} blocks ({:.2}%) in {} of {} segments",
        plan.blocks_read(),
        plan.blocks_total(),
        100.0 * plan.blocks_read() as f64 / total as f64,
        plan.segments_touched(),
        plan.segments.len()
    );
    if !plan.unindexed.is_empty() {
        println!(
            "segments without an index (run `capsule reindex`): {:?}",
            plan.unindexed
        );
    }
}

fn flows(args: &QueryArgs, sort: FlowSort, limit: usize, json: bool) -> Result<ExitCode> {
    let store = Store::open(&args.store)?;
    let q = args.query()?;
    let segments = store.open_segments()?;
    let mut listing = capsule_index::flows::list(&store, &segments, &q)?;
    match sort {
        FlowSort::Bytes => {}
        FlowSort::Packets => listing
            .flows
            .sort_by_key(|f| std::cmp::Reverse(f.flow.total_packets())),
        FlowSort::First => listing.flows.sort_by_key(|f| f.flow.first_ns),
    }
    let mut out = std::io::stdout().lock();
    let dscps = |mask: u64| -> String {
        (0..64u8)
            .filter(|d| mask & (1 << d) != 0)
            .map(|d| capsule_query::filter::dscp_name(d).map_or(d.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(",")
    };
    if !json {
        writeln!(
            out,
            "{:<5} {:<5} {:<46} {:<46} {:>10} {:>14} {:<30} {:>9} {:<12} {:>7} {:>6} {:>5}",
            "proto",
            "vlan",
            "a",
            "b",
            "packets",
            "bytes",
            "first",
            "duration",
            "dscp",
            "retrans",
            "zwin",
            "rst"
        )?;
    }
    for s in listing.flows.iter().take(limit) {
        let f = &s.flow;
        let k = &f.key;
        let ep = |addr: std::net::IpAddr, port: Option<u16>| match (addr, port) {
            (std::net::IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
            (a, Some(p)) => format!("{a}:{p}"),
            (a, None) => a.to_string(),
        };
        let a = ep(k.a, k.ports.map(|p| p.0));
        let b = ep(k.b, k.ports.map(|p| p.1));
        let vlan = k
            .vlans
            .iter()
            .flatten()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(".");
        if json {
            let v = serde_json::json!({
                "vlans": k.vlans.iter().flatten().collect::<Vec<_>>(),
                "ip_version": k.ip_version, "proto": k.proto,
                "a": k.a.to_string(), "a_port": k.ports.map(|p| p.0),
                "b": k.b.to_string(), "b_port": k.ports.map(|p| p.1),
                "first_ns": f.first_ns, "last_ns": f.last_ns,
                "packets": f.packets, "bytes": f.bytes,
                "dscp": [(0..64).filter(|d| f.dscp[0] & (1u64 << d) != 0).collect::<Vec<u8>>(),
                         (0..64).filter(|d| f.dscp[1] & (1u64 << d) != 0).collect::<Vec<u8>>()],
                "tcp_flags": f.tcp_flags, "retransmissions": f.retransmissions,
                "zero_windows": f.zero_windows, "resets": f.resets, "approximate": s.approximate,
            });
            writeln!(out, "{v}")?;
        } else {
            writeln!(
                out,
                "{:<5} {:<5} {:<46} {:<46} {:>10} {:>14} {:<30} {:>8.3}s {:<12} {:>7} {:>6} {:>5}{}",
                k.proto,
                vlan,
                a,
                b,
                f.total_packets(),
                f.total_bytes(),
                capsule_query::format_instant(f.first_ns),
                (f.last_ns - f.first_ns) as f64 / 1e9,
                dscps(f.dscp[0] | f.dscp[1]),
                f.retransmissions[0] + f.retransmissions[1],
                f.zero_windows[0] + f.zero_windows[1],
                f.resets[0] + f.resets[1],
                if s.approximate { " ~" } else { "" }
            )?;
        }
    }
    if !listing.unindexed.is_empty() {
        eprintln!(
            "capsule: note: segment(s) {:?} have no side index and are not listed; \
             `capsule reindex` builds it",
            listing.unindexed
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn reindex(store: &Path) -> Result<ExitCode> {
    let store = Store::open(store)?;
    // Writers rebuild missing indexes themselves; take the lock so two never race.
    let _lock = store.lock_writer()?;
    let t0 = Instant::now();
    let mut bytes = 0u64;
    let mut idx_bytes = 0u64;
    let segs = store.open_segments()?;
    for seg in &segs {
        if seg.state() != capsule_store::SegmentState::Sealed {
            continue;
        }
        let idx = capsule_index::sideindex::rebuild(seg)?;
        let path = idx.write(&store.index_dir())?;
        bytes += seg.bytes();
        idx_bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        println!(
            "segment {}: {} blocks, {} flows -> {}",
            seg.seq(),
            idx.blocks.len(),
            idx.flows.len(),
            path.display()
        );
    }
    println!(
        "reindexed {} segment(s) in {:.2} s; index is {} bytes, {:.3}% of {} stored bytes",
        segs.len(),
        t0.elapsed().as_secs_f64(),
        idx_bytes,
        100.0 * idx_bytes as f64 / bytes.max(1) as f64,
        bytes
    );
    Ok(ExitCode::SUCCESS)
}

fn status(store_dir: &Path, json: bool, watch: bool) -> Result<ExitCode> {
    loop {
        let st = capsule_capture::status::read_status(store_dir)?;
        let store = Store::open(store_dir)?;
        let segs = store.open_segments()?;
        let packets: u64 = segs
            .iter()
            .flat_map(|s| s.blocks())
            .map(|b| u64::from(b.packets))
            .sum();
        let bytes: u64 = segs.iter().map(|s| s.bytes()).sum();
        let first = segs
            .iter()
            .flat_map(|s| s.blocks())
            .map(|b| b.first_ns)
            .min();
        let last = segs
            .iter()
            .flat_map(|s| s.blocks())
            .map(|b| b.last_ns)
            .max();
        let now = capsule_store::now_ns();
        // Live: the capture says it runs, its process exists, and it wrote within 5 s.
        let live = st.as_ref().is_some_and(|s| {
            s.running
                && Path::new(&format!("/proc/{}", s.pid)).exists()
                && now.saturating_sub(s.updated_ns) < 5_000_000_000
        });
        if json {
            let v = serde_json::json!({
                "capture": st, "live": live,
                "store": {"segments": segs.len(), "packets": packets, "bytes": bytes,
                          "first_ns": first, "last_ns": last},
            });
            println!("{v}");
        } else {
            match &st {
                None => println!("capture: none has run on this store"),
                Some(s) => {
                    let state = if live {
                        "running"
                    } else if s.running {
                        "not running (stopped without a clean exit)"
                    } else {
                        "stopped"
                    };
                    println!(
                        "capture: {state}, pid {}, on {} since {}",
                        s.pid,
                        s.iface,
                        capsule_query::format_instant(s.started_ns)
                    );
                    println!("  mode: {}", s.mode);
                    println!(
                        "  stored {} packets ({} bytes) of {} seen; dropped {}",
                        s.packets, s.wire_bytes, s.seen, s.drops
                    );
                    let c = &s.drop_causes;
                    println!(
                        "  drops by cause: packet ring full {}, AF_XDP RX ring full {}, AF_XDP \
                         dropped {}, queue without socket {}, store behind {}, invalid {}",
                        c.packet_ring_full,
                        c.xsk_ring_full,
                        c.xsk_dropped,
                        c.no_socket,
                        c.pipeline,
                        c.invalid
                    );
                    if live {
                        println!(
                            "  rate: {:.0} packets/s, {:.1} Mbit/s, {:.0} drops/s",
                            s.packets_per_s,
                            s.bits_per_s / 1e6,
                            s.drops_per_s
                        );
                    }
                    let p = &s.store;
                    let [level, fast, fastest, stored] = p.blocks_by_rung;
                    println!(
                        "  blocks written: {level} at the configured level, {fast} at -10, \
                         {fastest} at -1000, {stored} stored uncompressed; {}{}",
                        if p.disk_bound {
                            "the disk is the limit (compression kept at the configured level)"
                        } else {
                            "the disk keeps up"
                        },
                        match p.readers_behind {
                            0 => String::new(),
                            n => format!("; {n} capture reader(s) behind their ring"),
                        }
                    );
                    println!(
                        "  VLAN tags restored {}, packets cut at 256 KiB {}, NIC timestamps {}; \
                         updated {}",
                        s.vlan_restored,
                        s.truncated,
                        s.hw_timestamps,
                        capsule_query::format_instant(s.updated_ns)
                    );
                }
            }
            println!(
                "store: {} segment(s), {} packets, {} bytes, {} .. {}",
                segs.len(),
                packets,
                bytes,
                first.map(capsule_query::format_instant).unwrap_or_default(),
                last.map(capsule_query::format_instant).unwrap_or_default()
            );
        }
        if !watch {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

fn segments(store: &Path, json: bool) -> Result<ExitCode> {
    let store = Store::open(store)?;
    let segs = store.open_segments()?;
    let mut out = std::io::stdout().lock();
    if !json {
        writeln!(
            out,
            "{:>6}  {:<6}  {:>6}  {:>10}  {:>12}  {:<30}  {:<30}",
            "seq", "state", "blocks", "packets", "bytes", "first", "last"
        )?;
    }
    for s in &segs {
        let packets: u64 = s.blocks().iter().map(|b| u64::from(b.packets)).sum();
        let first = s.blocks().iter().map(|b| b.first_ns).min();
        let last = s.blocks().iter().map(|b| b.last_ns).max();
        let state = match s.state() {
            capsule_store::SegmentState::Sealed => "sealed",
            capsule_store::SegmentState::Open => "open",
        };
        if json {
            let v = serde_json::json!({
                "seq": s.seq(), "state": state, "path": s.path(), "blocks": s.blocks().len(),
                "packets": packets, "bytes": s.bytes(), "first_ns": first, "last_ns": last,
                "interfaces": s.interfaces().iter().map(|i| serde_json::json!({
                    "linktype": i.linktype, "snaplen": i.snaplen, "name": i.name })).collect::<Vec<_>>(),
            });
            writeln!(out, "{v}")?;
        } else {
            writeln!(
                out,
                "{:>6}  {:<6}  {:>6}  {:>10}  {:>12}  {:<30}  {:<30}",
                s.seq(),
                state,
                s.blocks().len(),
                packets,
                s.bytes(),
                first.map(capsule_query::format_instant).unwrap_or_default(),
                last.map(capsule_query::format_instant).unwrap_or_default()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn synth(
    seed: u64,
    duration: &str,
    rate: &str,
    start: &str,
    write: &str,
    truth_path: Option<&Path>,
) -> Result<ExitCode> {
    let cfg = capsule_synth::SynthConfig {
        seed,
        duration_ns: capsule_query::parse_duration(duration)
            .context("--duration")?
            .as_nanos() as u64,
        rate_bps: units::parse_rate(rate).context("--rate")?,
        start_ns: capsule_query::parse_instant(start).context("--start")?,
    };
    let t0 = Instant::now();
    let truth = if write == "-" {
        capsule_synth::generate(&cfg, std::io::stdout().lock())?
    } else {
        let f = std::fs::File::create(write).with_context(|| format!("cannot create {write}"))?;
        capsule_synth::generate(&cfg, f)?
    };
    let secs = t0.elapsed().as_secs_f64();
    if let Some(p) = truth_path {
        let body = serde_json::to_string_pretty(&truth)?;
        std::fs::write(p, body + "\n").with_context(|| format!("cannot write {}", p.display()))?;
    }
    eprintln!(
        "synth: {} packets, {} bytes, {} flows in {:.2} s ({:.2} Gbit/s of traffic per second)",
        truth.packets,
        truth.bytes,
        truth.flows.len(),
        secs,
        truth.bytes as f64 * 8.0 / 1e9 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}
