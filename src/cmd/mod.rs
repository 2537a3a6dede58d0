//! The command bodies, one file per subcommand, and what they share: the one place that
//! turns a [`Selection`] into a query, and the wording of what opening a store for writing
//! found.
//!
//! A command returns its exit status or an error; `main` turns errors into messages and
//! statuses. An error that is the user's (a bad filter, a window that ends before it
//! starts) is a [`Usage`] error and exits 2 like clap's own.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::{Cli, Cmd, Selection};

mod alerts;
mod capture;
mod capture_privs;
pub mod check_bpf;
mod compact;
mod config;
mod dscp;
mod flows;
mod import;
mod live_alerts;
mod matrix;
mod query;
mod reindex;
mod reload;
mod remote;
mod replay;
mod segments;
mod serve;
mod status;
mod stragglers;
mod synth;
mod tcp;
mod top;
mod triage;
mod verify;

/// Prints one JSON document on stdout, with an RFC 3339 string beside every instant.
fn print_json(mut v: serde_json::Value) {
    with_times(&mut v);
    println!("{v}");
}

/// Keys ending in `_ns` that hold durations, not instants (matched inside the name).
const DURATION_KEYS: &[&str] = &[
    "horizon", "span", "duration", "age", "elapsed", "interval", "lateness",
];

/// Beside every `NAME_ns` key holding an instant (nanoseconds since the epoch), `NAME` as
/// RFC 3339 text, in every object of `v`: jq and JavaScript read integers above 2^53 as
/// doubles and round them to about 256 ns. A null instant gets a null beside it; a key that
/// already has its `NAME` is left as it is.
fn with_times(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let add: Vec<(String, Value)> = m
                .iter()
                .filter_map(|(k, v)| {
                    let stem = k.strip_suffix("_ns")?;
                    if stem.is_empty()
                        || m.contains_key(stem)
                        || DURATION_KEYS.iter().any(|d| stem.contains(d))
                    {
                        return None;
                    }
                    match v {
                        Value::Null => Some((stem.to_string(), Value::Null)),
                        v => Some((
                            stem.to_string(),
                            capsule_query::format_instant(v.as_u64()?).into(),
                        )),
                    }
                })
                .collect();
            m.values_mut().for_each(with_times);
            m.extend(add);
        }
        Value::Array(a) => a.iter_mut().for_each(with_times),
        _ => {}
    }
}

/// The exit status of an answer that is partial: the command worked, but damaged data in
/// the store was skipped (what was skipped is printed).
pub const PARTIAL: u8 = 3;

/// An error in what the user asked for, found after parsing: exits 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// The per-class cut-off of a config file's `[cutoff]` section (`file` names it in
/// errors), with `bytes` overriding its byte limit; `None` when nothing would be cut. A keep
/// filter that does not parse is a [`Usage`] error naming the file, line, column and key.
pub fn cutoff_from(
    config: Option<(&capsule_config::Config, &std::path::Path)>,
    bytes: Option<u64>,
) -> Result<Option<capsule_index::cutoff::Cutoff>> {
    let section = config.map(|(c, _)| c.cutoff().clone()).unwrap_or_default();
    let file = config.map_or(String::new(), |(_, p)| p.display().to_string());
    let mut keep = Vec::with_capacity(section.keep.len());
    for k in &section.keep {
        let f = capsule_index::cutoff::parse_keep(&k.filter).map_err(|e| {
            Usage(format!(
                "{file}:{}:{}: {}: bad filter (expected a filter in the query language or \
                 `tcp-control`):\n{e}",
                k.line, k.column, k.key
            ))
        })?;
        keep.push(f);
    }
    let rules = capsule_index::cutoff::Rules {
        bytes: bytes.unwrap_or(section.bytes),
        packets: section.packets,
        keep,
        idle_ns: section.idle_ns,
        max_directions: capsule_index::cutoff::MAX_DIRECTIONS,
    };
    if rules.bytes == 0 && rules.packets == 0 {
        return Ok(None);
    }
    Ok(Some(capsule_index::cutoff::Cutoff::new(rules)))
}

/// Runs the subcommand.
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Import(a) => import::run(&a),
        Cmd::Capture(a) => capture::run(&a),
        Cmd::Query(a) => query::run(&a),
        Cmd::Replay(a) => replay::run(&a),
        Cmd::Flows(a) => flows::run(&a),
        Cmd::Top(a) => top::run(&a),
        Cmd::Tcp(a) => tcp::run(&a),
        Cmd::Dscp(a) => dscp::run(&a),
        Cmd::Matrix(a) => matrix::run(&a),
        Cmd::Stragglers(a) => stragglers::run(&a),
        Cmd::Alerts(a) => alerts::run(&a),
        Cmd::Triage(a) => triage::run(&a),
        Cmd::Reindex(a) => reindex::run(&a),
        Cmd::Compact(a) => compact::run(&a),
        Cmd::Status(a) => status::run(&a),
        Cmd::Segments(a) => segments::run(&a),
        Cmd::Synth(a) => synth::run(&a),
        Cmd::Verify(a) => verify::run(&a),
        Cmd::Config(c) => config::run(&c),
        Cmd::Serve(a) => serve::run(&a),
        Cmd::Token(crate::cli::TokenCmd::Revoke(a)) => {
            let n = crate::tokens::revoke(&a.tokens, &a.user)?;
            println!(
                "revoked {n} token{} of {} in {} (a running server refuses {} at its next \
                 request)",
                if n == 1 { "" } else { "s" },
                a.user,
                a.tokens.display(),
                if n == 1 { "it" } else { "them" }
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Token(crate::cli::TokenCmd::List(a)) => token_list(&a),
        Cmd::Token(crate::cli::TokenCmd::Add(a)) => {
            let token = crate::tokens::add(&a.tokens, &a.user, a.expires)?;
            println!("{token}");
            eprintln!(
                "capsule: added a token for {} to {} (only its SHA-256 is stored: keep the token \
                 now, it cannot be shown again)",
                a.user,
                a.tokens.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Completions(a) => {
            // Into a buffer first: clap_complete panics on a failed write, and a closed pipe
            // (`| head`) must end quietly like every other command's output.
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(a.shell, &mut cmd, "capsule", &mut out);
            std::io::Write::write_all(&mut std::io::stdout().lock(), &out)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Man(a) => man(&a.dir),
        Cmd::Filters => {
            let text = crate::cli::FILTERS_HELP.as_bytes();
            std::io::Write::write_all(&mut std::io::stdout().lock(), text)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::CheckBpf(a) => check_bpf::child(&a),
        Cmd::XdpProbe(a) => xdp_probe(&a),
    }
}

/// `capsule xdp-probe`: the carriers this kernel accepts, best first, as capture's ladder
/// sees them.
fn xdp_probe(a: &crate::cli::XdpProbeArgs) -> Result<ExitCode> {
    use std::io::Write;
    let probed = capsule_capture::live::probe_xdp();
    let best = probed
        .iter()
        .find(|p| p.refused.is_none())
        .map(|p| p.carrier);
    let mut out = std::io::stdout().lock();
    if a.json {
        let doc = serde_json::json!({
            "kernel": kernel_release(),
            "best": best,
            "carriers": probed.iter().map(|p| serde_json::json!({
                "carrier": p.carrier,
                "accepted": p.refused.is_none(),
                "refused": p.refused,
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc}")?;
    } else {
        writeln!(out, "kernel {}", kernel_release())?;
        for p in probed {
            match &p.refused {
                None => writeln!(out, "  {:<9} loads", p.carrier.name())?,
                Some(why) => writeln!(out, "  {:<9} refused: {why}", p.carrier.name())?,
            }
        }
        match best {
            Some(c) => writeln!(
                out,
                "capture takes the {} variant ({})",
                c.name(),
                c.describe()
            )?,
            None => writeln!(out, "no variant loads: capture falls back to AF_PACKET")?,
        }
    }
    Ok(if best.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The running kernel's release (`uname -r`), or `unknown`.
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `capsule token list`: a table (or one JSON document) of the file's tokens.
fn token_list(a: &crate::cli::TokenListArgs) -> Result<ExitCode> {
    use std::io::Write;
    let list = crate::tokens::list(&a.tokens)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::json!({ "tokens": list }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        writeln!(out, "no tokens in {}", a.tokens.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = crate::table::Table::new(vec![
        crate::table::Column::left("user", u8::MAX),
        crate::table::Column::left("id", 9),
        crate::table::Column::left("created", 5),
        crate::table::Column::left("expires", 3),
    ]);
    for x in &list {
        t.push(vec![
            x.user.clone(),
            x.id.clone(),
            x.created.clone().unwrap_or_else(|| "-".into()),
            match (&x.expires, x.expired) {
                (None, _) => "never".into(),
                (Some(e), true) => format!("{e} (expired)"),
                (Some(e), false) => e.clone(),
            },
        ]);
    }
    for line in t.render(crate::table::output_width()) {
        writeln!(out, "{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

impl Selection {
    /// The local store (clap requires `--store` unless `--server` is given).
    pub fn store(&self) -> &std::path::Path {
        self.store.as_deref().unwrap_or(std::path::Path::new("."))
    }

    /// The query these arguments ask for.
    pub fn query(&self) -> Result<capsule_query::Query> {
        make_query(&self.filter.join(" "), self.from, self.to)
    }
}

/// The query of a filter text and a window, as `query` and `flows` (and `serve`) take them;
/// a bad filter or a window that ends before it starts is a [`Usage`] error.
pub fn make_query(
    text: &str,
    from: Option<u64>,
    to: Option<capsule_query::TimeArg>,
) -> Result<capsule_query::Query> {
    {
        let filter =
            capsule_query::Filter::parse(text).map_err(|e| Usage(format!("bad filter:\n{e}")))?;
        let to = to.map(|t| t.resolve(from)).transpose().map_err(Usage)?;
        if let (Some(f), Some(t)) = (from, to) {
            if f > t {
                return Err(Usage(format!(
                    "--from {} is after --to {}",
                    capsule_query::format_instant(f),
                    capsule_query::format_instant(t)
                ))
                .into());
            }
        }
        Ok(capsule_query::Query {
            filter,
            from_ns: from,
            to_ns: to,
        })
    }
}

/// Names, on standard error, each segment that could not be read, and what that costs the
/// answer (`consequence`, e.g. "its flows are missing"; empty for none).
fn warn_unreadable(unreadable: &[capsule_store::Unreadable], consequence: &str) {
    let consequence = if consequence.is_empty() {
        String::new()
    } else {
        format!(", {consequence}")
    };
    for u in unreadable {
        eprintln!(
            "capsule: warning: segment {} ({}) cannot be read{consequence}: {}",
            u.seq,
            u.path.display(),
            u.problem
        );
    }
}

/// Megabytes per second.
fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs.max(1e-9)
}

/// Says what opening the store for writing found: recovered torn segments and retention.
/// On standard error with `--json` (standard output holds the one JSON document).
fn print_open_report(opened: &capsule_store::OpenReport, json: bool) {
    macro_rules! println {
        ($($t:tt)*) => {
            if json { crate::logging::note(&format!($($t)*)) } else { std::println!($($t)*) }
        };
    }
    for r in &opened.recovered {
        println!("{r}");
    }
    for t in &opened.stale_temps {
        println!(
            "removed {} (a temporary file a killed process left)",
            t.display()
        );
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
    for d in &opened.deleted_for_space {
        println!(
            "disk full: deleted segment {} ({} bytes) to recover a torn segment",
            d.seq, d.bytes
        );
    }
    for p in &opened.left_open {
        println!(
            "disk full: torn segment {} left open (nothing left to delete); the next open \
             recovers it",
            p.display()
        );
    }
}

/// Says what a full disk cost a writer, if anything: segments deleted for space, and
/// packets dropped when nothing was left to delete.
fn print_disk_full(w: &capsule_store::WriteReport, json: bool) {
    macro_rules! println {
        ($($t:tt)*) => {
            if json { crate::logging::note(&format!($($t)*)) } else { std::println!($($t)*) }
        };
    }
    if !w.deleted_for_space.is_empty() {
        let bytes: u64 = w.deleted_for_space.iter().map(|d| d.bytes).sum();
        println!(
            "disk full: deleted the {} oldest segment(s) ({bytes} bytes) to make room",
            w.deleted_for_space.len()
        );
    }
    if w.disk_full_blocks > 0 {
        println!(
            "disk full: dropped {} packets ({} blocks) with no segment left to delete",
            w.disk_full_drops, w.disk_full_blocks
        );
    }
}

/// Writes `capsule.1` and a page per visible subcommand (`capsule-query.1`, ...) into `dir`.
fn man(dir: &std::path::Path) -> Result<ExitCode> {
    use anyhow::Context;
    use std::io::Write;
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let cmd = <Cli as clap::CommandFactory>::command();
    let mut pages = vec![("capsule".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("capsule-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page)
            .render(&mut out)
            .with_context(|| format!("render {name}.1"))?;
        std::fs::write(&path, out).with_context(|| format!("write {}", path.display()))?;
        writeln!(std::io::stdout(), "{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Says on standard error when the window starts before the retention horizon (the oldest
/// packet still held, where older segments were deleted), so a shorter answer is never
/// mistaken for less traffic; and, when the answer came back empty (`empty`), whether the
/// window lies outside what the store holds, with the store's span, so an empty answer is
/// never mistaken for "nothing happened" (the data may be older than the window, or not yet
/// captured, or already deleted by retention).
fn note_window(segments: &[capsule_store::SegmentReader], q: &capsule_query::Query, empty: bool) {
    let (from, to) = q.window();
    let first = segments
        .iter()
        .flat_map(|s| s.blocks())
        .filter(|b| b.packets > 0)
        .map(|b| b.first_ns)
        .min();
    // Segment numbers start at 1: a store whose lowest is higher has deleted older data.
    let deleted = segments
        .iter()
        .map(|s| s.seq())
        .min()
        .is_some_and(|s| s > 1);
    // A window given from a time before it; without --from the question is "all we hold".
    let given = q.from_ns.is_some();
    if let Some(first) = first.filter(|f| given && deleted && from < *f && to > *f) {
        eprintln!(
            "capsule: note: the window starts before the retention horizon: packets older \
             than {} were deleted by retention, so the answer covers {} onwards",
            capsule_query::format_instant(first),
            capsule_query::format_instant(first)
        );
    }
    if empty {
        note_if_window_misses(segments, q);
    }
}

/// When an answer came back empty, says whether the window lies outside what the store
/// holds (see [`note_window`]).
fn note_if_window_misses(segments: &[capsule_store::SegmentReader], q: &capsule_query::Query) {
    let blocks = || {
        segments
            .iter()
            .flat_map(|s| s.blocks())
            .filter(|b| b.packets > 0)
    };
    let (Some(first), Some(last)) = (
        blocks().map(|b| b.first_ns).min(),
        blocks().map(|b| b.last_ns).max(),
    ) else {
        eprintln!("capsule: note: the store holds no packets");
        return;
    };
    let (from, to) = q.window();
    let fmt = capsule_query::format_instant;
    if to <= first {
        eprintln!(
            "capsule: note: the window ends before the oldest packet held ({}); the store \
             spans {} to {}",
            fmt(first),
            fmt(first),
            fmt(last)
        );
    } else if from > last {
        eprintln!(
            "capsule: note: the window starts after the newest packet held ({}); the store \
             spans {} to {}",
            fmt(last),
            fmt(first),
            fmt(last)
        );
    }
}

/// What an analytics command starts from: the window's flows from the index, and the
/// config when one was given (or is `required` by the command).
struct Answer {
    input: capsule_analytics::Input,
    config: Option<capsule_config::Config>,
}

impl Answer {
    fn policy(&self) -> Option<&dyn capsule_analytics::Policy> {
        self.config
            .as_ref()
            .map(|c| c as &dyn capsule_analytics::Policy)
    }
}

/// Loads the config (when given; `need` names the command that cannot go without one) and
/// the window's flows from the side index, with the capture's drops as a limit; with
/// `buckets`, each flow's 1-second buckets in the window (see [`capsule_analytics::load`]).
fn answer(a: &crate::cli::AnswerArgs, need: Option<&str>, buckets: bool) -> Result<Answer> {
    let config = match (&a.config, need) {
        (Some(path), _) => Some(config::load(path)?),
        (None, Some(what)) => {
            return Err(Usage(format!(
                "{what} needs --config FILE: the host groups (and policy) it answers with"
            ))
            .into())
        }
        (None, None) => None,
    };
    let filter = a.q.filter.join(" ");
    let q = make_query(&filter, a.q.from, a.q.to)?;
    let store = a.q.store.as_deref().unwrap_or(std::path::Path::new("."));
    let mut input = capsule_analytics::load(store, &q, &filter, buckets)?;
    input.limits.drops = Some(drops_note(store, input.from_ns, input.to_ns));
    Ok(Answer { input, config })
}

/// What the capture status says of drops in [from, to).
fn drops_note(store: &std::path::Path, from: u64, to: u64) -> String {
    let fmt = capsule_query::format_instant;
    match capsule_capture::status::read_status(store) {
        Ok(Some(s)) if s.started_ns < to && s.updated_ns >= from => {
            if s.drops == 0 {
                format!(
                    "capture on {} ({} to {}) dropped no packets",
                    s.iface,
                    fmt(s.started_ns),
                    fmt(s.updated_ns)
                )
            } else {
                format!(
                    "capture on {} ({} to {}) dropped {} of {} packets; they are missing \
                     from this answer (when, within the run, is not recorded)",
                    s.iface,
                    fmt(s.started_ns),
                    fmt(s.updated_ns),
                    s.drops,
                    s.seen
                )
            }
        }
        Ok(Some(s)) => format!(
            "drops: the last capture run ({} to {}) is outside the window; no drop counts \
             are held for it",
            fmt(s.started_ns),
            fmt(s.updated_ns)
        ),
        Ok(None) => "drops: no capture status in the store (imported traffic is stored \
                     whole; a capture's drops are recorded while it runs)"
            .to_string(),
        Err(e) => format!("drops: unknown, the capture status cannot be read: {e}"),
    }
}

/// An analytics answer as the command prints it: the text of its standard output, and
/// whether it is partial (flows are missing: an index missing, stale or damaged), with why.
pub struct Rendered {
    pub text: String,
    /// Why it is partial ([`capsule_analytics::Limits::missing`]); empty: it is whole.
    pub why: Vec<String>,
}

impl Rendered {
    pub fn partial(&self) -> bool {
        !self.why.is_empty()
    }
}

/// Renders an analytics answer: JSON (`answer`'s fields, the window and the limits, one
/// document) or the table lines and then the limits, wrapped to `width` (none: not
/// wrapped). `capsule serve` renders with the same code, so a `--server` answer is the
/// local one byte for byte.
fn render_answer(
    ans: &Answer,
    json: bool,
    command: &str,
    value: serde_json::Value,
    table: Vec<String>,
    width: Option<usize>,
) -> Result<Rendered> {
    use std::fmt::Write;
    let input = &ans.input;
    let limits = &input.limits;
    let mut out = String::new();
    if json {
        let mut doc = serde_json::json!({
            "command": command,
            "store": input.store,
            "filter": input.filter,
            "from_ns": input.from_ns,
            "from": capsule_query::format_instant(input.from_ns),
            "to_ns": input.to_ns,
            "to": capsule_query::format_instant(input.to_ns),
        });
        if let (Some(d), serde_json::Value::Object(v)) = (doc.as_object_mut(), value) {
            d.extend(v);
            d.insert("limits".into(), serde_json::to_value(limits)?);
        }
        writeln!(out, "{doc}")?;
    } else {
        writeln!(
            out,
            "{command} {} to {}{}",
            capsule_query::format_instant(input.from_ns),
            capsule_query::format_instant(input.to_ns),
            if input.filter.is_empty() {
                String::new()
            } else {
                format!(", filter {}", input.filter)
            }
        )?;
        // Lines of text wrap to the terminal like the table (whose rows already fit);
        // `capsule query` command lines stay whole, to be copied.
        for line in table {
            if line.contains("capsule query ") {
                writeln!(out, "{line}")?;
            } else {
                for l in crate::table::wrap(&line, width) {
                    writeln!(out, "{l}")?;
                }
            }
        }
        for line in limits.lines() {
            for l in crate::table::wrap(&format!("note: {line}"), width) {
                writeln!(out, "{l}")?;
            }
        }
    }
    Ok(Rendered {
        text: out,
        why: limits.missing(),
    })
}

/// Prints a rendered analytics answer and returns the exit status (partial when damaged
/// index data was skipped).
fn print_rendered(r: &Rendered) -> Result<ExitCode> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(r.text.as_bytes())?;
    out.flush()?;
    if r.partial() {
        eprintln!(
            "capsule: the answer is partial: {}; their flows are missing (exit status \
             {PARTIAL})",
            r.why.join("; ")
        );
        Ok(ExitCode::from(PARTIAL))
    } else {
        Ok(ExitCode::SUCCESS)
    }
}

/// `query` (a `capsule query ...` command line of an answer) with `-w FILE` after `capsule
/// query`, so the printed line runs as pasted.
pub fn pasteable(query: &str, file: &str) -> String {
    match query.strip_prefix("capsule query ") {
        Some(rest) => format!("capsule query -w {file} {rest}"),
        None => query.to_string(),
    }
}

/// The header of a `/v1/` analytics answer that is partial (`capsule-partial: true`).
pub const PARTIAL_HEADER: &str = "capsule-partial";

/// Runs analytics `command` on the server of `a` (`--server`): the filter, the window
/// (relative times resolved here, to `@NANOS`) and the command's own flags (`flags`, the
/// names of `/v1/COMMAND`'s parameters) go as the query string; `--json` asks for the
/// JSON document, else the text at this terminal's width. Prints what comes back.
fn remote_answer(
    a: &crate::cli::AnswerArgs,
    command: &str,
    flags: &[(&str, String)],
) -> Result<ExitCode> {
    let remote = a.remote.remote().expect("called with --server");
    let filter = a.q.filter.join(" ");
    let q = make_query(&filter, a.q.from, a.q.to)?;
    let mut path = format!("/v1/{command}?filter={}", remote::encode(&filter));
    if let Some(f) = q.from_ns {
        path += &format!("&from=%40{f}");
    }
    if let Some(t) = q.to_ns {
        path += &format!("&to=%40{t}");
    }
    for (k, v) in flags {
        path += &format!("&{k}={}", remote::encode(v));
    }
    if a.json {
        path += "&format=json";
    } else {
        path += "&format=text";
        if let Some(w) = crate::table::output_width() {
            path += &format!("&width={w}");
        }
    }
    let mut text = Vec::new();
    let got = remote::get(&remote, &path, &mut text, false)?;
    let partial = got
        .headers
        .get(PARTIAL_HEADER)
        .is_some_and(|v| v.as_bytes() == b"true");
    print_rendered(&Rendered {
        text: String::from_utf8(text).context("the server's answer is not UTF-8")?,
        why: if partial {
            vec!["the server says flows are missing (its notes above name them)".into()]
        } else {
            Vec::new()
        },
    })
}

/// The name of a clap value (`--by bytes`) as the command line spells it.
fn value_name<T: clap::ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

/// An interval in nanoseconds (whole seconds) as a flag value: `60s`.
fn interval_text(ns: u64) -> String {
    format!("{}s", ns / 1_000_000_000)
}

/// A ratio as a percentage with one decimal.
fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Bits per second, with a unit.
fn bps(x: f64) -> String {
    let (v, u) = if x >= 1e9 {
        (x / 1e9, "Gbit/s")
    } else if x >= 1e6 {
        (x / 1e6, "Mbit/s")
    } else if x >= 1e3 {
        (x / 1e3, "kbit/s")
    } else {
        (x, "bit/s")
    };
    format!("{v:.1} {u}")
}

/// An instant to the millisecond, for tables.
/// Times in an answer's tables: the time of day to the millisecond (`02:00:01.956`) when
/// the answer's window lies within one UTC day (its header line gives the date), else the
/// full RFC 3339 time. Keeps the time columns narrow enough for an 80-column terminal.
#[derive(Debug, Clone, Copy)]
struct Clock {
    one_day: bool,
}

impl Clock {
    fn of(input: &capsule_analytics::Input) -> Clock {
        const DAY: u64 = 86_400_000_000_000;
        Clock {
            one_day: input.from_ns / DAY == input.to_ns.saturating_sub(1).max(input.from_ns) / DAY,
        }
    }

    fn ms(self, ns: u64) -> String {
        let full = ms(ns);
        match (self.one_day, full.find('T')) {
            (true, Some(t)) => full[t + 1..].to_string(),
            _ => full,
        }
    }
}

fn ms(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns - ns % 1_000_000);
    humantime::format_rfc3339_millis(t).to_string()
}
