//! `capsule query`: a window's packets out as pcap or pcapng, its plan, or its count.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use capsule_answers::{export, Source};
use capsule_store::Store;

use crate::cli::{OutFormat, QueryArgs};
use crate::files::{create, write_file};
use crate::request::answer_error;

pub fn run(a: &QueryArgs) -> Result<ExitCode> {
    let (args, write, format, bpf, explain, count) = (
        &a.q,
        a.write.as_deref(),
        a.format,
        a.bpf.clone(),
        a.explain,
        a.count,
    );
    if args.fleet {
        return crate::cmd::fleet::query(a);
    }
    if a.json && !explain && !count {
        return Err(crate::output::Usage(
            "--json goes with --count or --explain (an export writes packets, not JSON)".into(),
        )
        .into());
    }
    args.no_fleet()?;
    if args.remote.is_remote() {
        return remote(a);
    }
    let query = args.query()?;
    // The trimmed segments' way (`[tier]` in --config): this command's own, so the bytes it
    // fetched are this answer's.
    let remote = crate::request::tier_reader(a.config.as_deref())?;
    let tier = crate::tier::tier_of(remote.as_ref());
    let store = Store::open(args.store())?.with_tier(tier.clone());
    if let (Some(expr), false) = (&bpf, explain) {
        // Before any output: compiled in a child process with a time and memory limit.
        let linktypes = capsule_replay::bpf_linktypes(&store.open_segments()?);
        crate::bpf_check::check(expr, &linktypes)?;
    }
    let format = out_format(format, write, count);
    let request = export::Request {
        format: match format {
            OutFormat::Pcap => capsule_replay::Format::Pcap,
            OutFormat::Pcapng => capsule_replay::Format::PcapNg,
        },
        query,
        bpf,
        max_bytes: None,
        segments: None,
    };
    let source = Source::store(args.store()).with_tier(tier);
    if explain {
        let plan = export::plan(&source, &request).map_err(answer_error)?;
        print_plan(&export::PlanShown::of(&plan), a.json);
        return Ok(ExitCode::SUCCESS);
    }
    let t0 = Instant::now();
    let (c, report) = match write {
        _ if count => {
            let progress = crate::progress::Progress::spinner("counting", a.json);
            let c = export::counted(&source, &request);
            progress.finish();
            let c = c.map_err(answer_error)?;
            (c.count, c.report)
        }
        _ => {
            let report = match write {
                Some("-") => export::stream(&source, &request, std::io::stdout().lock())
                    .map_err(answer_error)?,
                Some(path) => write_file(&source, &request, path)?,
                None => unreachable!("clap requires -w unless --explain or --count"),
            };
            let seconds = t0.elapsed().as_secs_f64();
            // Which flows of the window the cut-off did not store whole (from the side
            // index).
            let segments = store.open_segments_checked()?.0;
            let cut = capsule_index::flows::cut_summary(&store, &segments, &request.query)?;
            (
                export::Count::of(&report, &cut, &request.query, seconds),
                report,
            )
        }
    };
    if !report.unindexed.is_empty() {
        eprintln!(
            "capsule: note: segment(s) {:?} have no side index, so all their blocks in the window \
             were read; `capsule reindex` builds it",
            report.unindexed
        );
    }
    let mut c = c;
    c.tier_fetched_bytes = remote
        .as_ref()
        .map_or(0, capsule_tier::Remote::fetched_bytes);
    if count {
        print_count(&c, a.json);
    } else {
        eprintln!("exported {}", summary(&c));
    }
    note_cut(&c);
    for (seq, why) in &report.damaged_index {
        eprintln!("capsule: note: segment {seq} was read whole: {why}");
    }
    // The report's account of what the store holds: the segments the catalog ruled out
    // were never opened.
    crate::notes::note_window_held(&report.held, &request.query, report.packets == 0);
    if !report.is_partial() {
        return Ok(ExitCode::SUCCESS);
    }
    for s in &report.skipped {
        eprintln!(
            "capsule: warning: skipped damaged block {} of segment {} ({}, bytes {}..{}): {} \
             packets from {} to {} are missing: {}",
            s.block,
            s.seq,
            s.path.display(),
            s.offset,
            s.offset + s.len,
            s.packets,
            capsule_query::format_instant(s.first_ns),
            capsule_query::format_instant(s.last_ns),
            s.problem
        );
    }
    crate::notes::warn_unreadable(&report.unreadable, "whatever it holds is missing");
    crate::notes::warn_names_unseen(&report.names_unseen, "packets");
    for l in &report.lost {
        eprintln!(
            "capsule: warning: segment {} ({}) lost a stretch this window reaches, whatever \
             it held is missing: {}",
            l.seq,
            l.path.display(),
            l.problem
        );
    }
    eprintln!(
        "capsule: the answer is partial: damaged or missing data was skipped (exit status {})",
        crate::output::PARTIAL
    );
    Ok(ExitCode::from(crate::output::PARTIAL))
}

/// The format of `-w FILE` unless `--format` says: from the file's extension.
fn out_format(format: Option<OutFormat>, write: Option<&str>, count: bool) -> OutFormat {
    format.unwrap_or(match write {
        Some(w) if w.ends_with(".pcapng") || w.ends_with(".ntar") => OutFormat::Pcapng,
        // A count writes nothing; pcapng holds every link type a store may mix.
        _ if count => OutFormat::Pcapng,
        _ => OutFormat::Pcap,
    })
}

/// `query --server`: the packets from a `capsule serve`, into `-w` as they arrive; with
/// `--count` or `--explain`, the server's count or plan (`GET /v1/count`, `/v1/plan`)
/// printed here as the local one is.
fn remote(a: &QueryArgs) -> Result<ExitCode> {
    let remote = a.q.remote_with(&a.old_cert)?.expect("called with --server");
    let url = remote.url.as_str();
    // --bpf: the server applies it (checked in its guard's child), for packets and counts.
    let bpf = a.bpf.as_deref().map_or(String::new(), |b| {
        format!("&bpf={}", crate::client::encode(b))
    });
    let name = |f: OutFormat| match f {
        OutFormat::Pcap => "pcap",
        OutFormat::Pcapng => "pcapng",
    };
    if a.explain || a.count {
        let mut path = format!(
            "/v1/{}?{}",
            if a.explain { "plan" } else { "count" },
            crate::client::selection_params(&a.q)?
        );
        if a.count {
            path += &format!("&format={}{bpf}", name(out_format(a.format, None, true)));
        }
        let mut body = Vec::new();
        let got = crate::client::get(&remote, &path, &mut body, false)?;
        let bad = || format!("{url} answered {path} with something else than the document");
        if a.explain {
            let plan: export::PlanShown = serde_json::from_slice(&body).with_context(bad)?;
            print_plan(&plan, a.json);
            return Ok(ExitCode::SUCCESS);
        }
        let c: export::Count = serde_json::from_slice(&body).with_context(bad)?;
        print_count(&c, a.json);
        note_cut(&c);
        return Ok(partial_exit(url, got.partial()));
    }
    let write = a.write.as_deref().unwrap_or("-");
    let format = name(out_format(a.format, Some(write), false));
    let path = format!(
        "/v1/packets?{}&format={format}{bpf}",
        crate::client::selection_params(&a.q)?
    );
    let t0 = Instant::now();
    let got = if write == "-" {
        crate::client::get(&remote, &path, &mut std::io::stdout().lock(), false)?
    } else {
        let existed = std::path::Path::new(write).exists();
        let mut f = std::io::BufWriter::with_capacity(1 << 20, create(write, existed)?);
        // A progress line only for a person watching: stderr on a terminal.
        let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
        match crate::client::get(&remote, &path, &mut f, progress) {
            Ok(got) => got,
            Err(e) => {
                drop(f);
                if !existed {
                    let _ = std::fs::remove_file(write);
                }
                return Err(e);
            }
        }
    };
    eprintln!(
        "received {} bytes from {url} in {:.3} s",
        got.bytes,
        t0.elapsed().as_secs_f64()
    );
    Ok(partial_exit(url, got.partial()))
}

/// Exit 0, or (the server said the answer is partial) its word and exit 3.
fn partial_exit(url: &str, partial: Option<String>) -> ExitCode {
    match partial {
        None => ExitCode::SUCCESS,
        Some(why) => {
            eprintln!("capsule: warning: {url} says: {why}");
            eprintln!(
                "capsule: the answer is partial: damaged or missing data was skipped (exit status {})",
                crate::output::PARTIAL
            );
            ExitCode::from(crate::output::PARTIAL)
        }
    }
}

/// The count's line: `N packets (B, in SI units); read ... in S s`.
fn summary(c: &export::Count) -> String {
    let drops = match c.drops_in_window {
        Some(d) => format!("; the capture reported {d} packets dropped in this window"),
        None => String::new(),
    };
    format!(
        "{} packets ({}); read {} of {} blocks in {} of {} segments in {:.3} s{drops}",
        c.packets,
        crate::units::format_bytes(c.bytes),
        c.blocks_read,
        c.blocks_total,
        c.segments_touched,
        c.segments_total,
        c.seconds,
    )
}

/// `query --count`: the line, or (`--json`) the document.
fn print_count(c: &export::Count, json: bool) {
    if json {
        crate::output::print_json(serde_json::to_value(c).expect("a count is JSON"));
    } else {
        println!("{}", summary(c));
    }
}

/// The note on the flows of the window the cut-off did not store whole, if any.
fn note_cut(c: &export::Count) {
    if let (n @ 1.., Some(from)) = (c.cut_flows, c.cut_from_ns) {
        eprintln!(
            "capsule: note: {n} flow(s) of this window were cut by the cut-off (only their \
             first packets were stored), the first from {}; `capsule flows` shows them",
            capsule_query::format_instant(from)
        );
    }
}

/// `query --explain`: the plan as a table, or (`--json`) the document.
fn print_plan(plan: &export::PlanShown, json: bool) {
    if json {
        crate::output::print_json(serde_json::to_value(plan).expect("a plan is JSON"));
        return;
    }
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
            s.blocks_to_read,
            if s.indexed { "used" } else { "-" }
        );
    }
    let total = plan.blocks_total.max(1);
    println!(
        "plan: read {} of {} blocks ({:.2}%) in {} of {} segments",
        plan.blocks_read,
        plan.blocks_total,
        100.0 * plan.blocks_read as f64 / total as f64,
        plan.segments_touched,
        plan.segments.len()
    );
    if !plan.unindexed.is_empty() {
        println!(
            "segments without an index (run `capsule reindex`): {:?}",
            plan.unindexed
        );
    }
    for s in plan.segments.iter().filter(|s| s.unjournaled_blocks > 0) {
        println!(
            "open segment {}: {} block(s) in the window not in its index journal yet, read whole",
            s.seq, s.unjournaled_blocks
        );
    }
    for n in &plan.journal_notes {
        println!("open segment {}: index journal: {}", n.seq, n.note);
    }
}
