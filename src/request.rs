//! From checked arguments to typed requests: the query of a window and filter, the
//! analytics request of an analytics command, the config file and the cut-off it states.
//! Commands build their requests here and nowhere else.

use std::process::ExitCode;

use anyhow::Result;
use capsule_answers::analytics::{self, Question};
use capsule_answers::{AnswerError, Source};

use crate::cli::{AnswerArgs, Selection, WindowArgs};
use crate::output::Usage;

impl Selection {
    /// The local store (clap requires `--store` unless `--server` is given).
    pub(crate) fn store(&self) -> &std::path::Path {
        self.store.as_deref().unwrap_or(std::path::Path::new("."))
    }

    /// The query these arguments ask for.
    pub(crate) fn query(&self) -> Result<capsule_query::Query> {
        self.window.query()
    }
}

impl WindowArgs {
    /// The query of this window and filter.
    pub(crate) fn query(&self) -> Result<capsule_query::Query> {
        make_query(&self.filter.join(" "), self.from, self.to)
    }
}

/// The query of a filter text and a window, as `query` and `flows` (and `serve`) take them;
/// a bad filter or a window that ends before it starts is a [`Usage`] error.
pub(crate) fn make_query(
    text: &str,
    from: Option<u64>,
    to: Option<capsule_query::TimeArg>,
) -> Result<capsule_query::Query> {
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

/// The per-class cut-off of a config file's `[cutoff]` section (`file` names it in
/// errors), with `bytes` overriding its byte limit; `None` when nothing would be cut. A keep
/// filter that does not parse is a [`Usage`] error naming the file, line, column and key.
pub(crate) fn cutoff_from(
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

/// Reads and validates a config file; any problem is the user's (exit 2). Its `[tunnels]`
/// ports are applied to the dissector from here on (every later dissection in this process).
pub(crate) fn load_config(path: &std::path::Path) -> Result<capsule_config::Config> {
    let config = capsule_config::Config::load(path).map_err(|e| -> anyhow::Error {
        match e {
            capsule_config::ConfigError::Read { path, source } => Usage(format!(
                "{}: cannot read the config file: {source}",
                path.display()
            ))
            .into(),
            e => Usage(crate::output::config_problems(&e)).into(),
        }
    })?;
    let t = config.tunnels();
    capsule_wire::set_tunnel_ports(&capsule_wire::TunnelPorts {
        vxlan: t.vxlan_ports.clone(),
        geneve: t.geneve_ports.clone(),
        gtpu: t.gtpu_ports.clone(),
    });
    Ok(config)
}

/// The config file at `path`, read and validated ([`load_config`]), when one is given.
pub(crate) fn config_of(path: Option<&std::path::Path>) -> Result<Option<capsule_config::Config>> {
    path.map(load_config).transpose()
}

/// The readers' way to the trimmed segments of `[tier]` in the config file at `path`
/// (`None` without a path or a section): this command's own, so the bytes it fetched are
/// its answer's.
pub(crate) fn tier_reader(path: Option<&std::path::Path>) -> Result<Option<capsule_tier::Remote>> {
    crate::tier::reader_of(config_of(path)?.as_ref())
}

/// The source and request of an analytics command: the store, the config (when given),
/// and the query of its window and filter.
pub(crate) fn analytics_request(
    a: &AnswerArgs,
    question: Question,
) -> Result<(Source, analytics::Request)> {
    let config = config_of(a.config.as_deref())?;
    let query = a.q.query()?;
    let store = a.q.store().to_path_buf();
    // Its `[tier]`: the trimmed segments' indexes, when missing locally, from the bucket.
    let tier = crate::tier::reader_of(config.as_ref())?;
    Ok((
        Source {
            store,
            config,
            tier: crate::tier::tier_of(tier.as_ref()),
        },
        analytics::Request { query, question },
    ))
}

/// An answer's error as the binary reports it: the asker's (exit 2) or not.
pub(crate) fn answer_error(e: AnswerError) -> anyhow::Error {
    if let AnswerError::Export(e) = e {
        // Kept whole: `main` tells a `--bpf` the user got wrong by its variant.
        return e.into();
    }
    if e.is_usage() {
        Usage(e.to_string()).into()
    } else {
        e.into()
    }
}

/// Runs an analytics command: its question asked of the local store, or of `--server`,
/// and the answer printed as a table or (`--json`) one document.
pub(crate) fn ask_analytics(a: &AnswerArgs, question: Question) -> Result<ExitCode> {
    if a.q.fleet {
        return ask_fleet(a, question);
    }
    if let Some(remote) = a.q.remote()? {
        let query = a.q.query()?;
        return crate::client::ask_analytics(&remote, &query, &question, a.json);
    }
    let (source, request) = analytics_request(a, question)?;
    let answer = analytics::answer(&source, &request).map_err(answer_error)?;
    let width = crate::render::table::output_width();
    let place = crate::render::Place::default();
    crate::render::print(&crate::render::analytics(&answer, a.json, place, width))
}

/// The config file and its `[fleet]` section (a usage error without one).
pub(crate) fn fleet_config(
    path: &std::path::Path,
) -> Result<(capsule_config::Config, capsule_config::Fleet)> {
    let config = crate::request::load_config(path)?;
    let fleet = config.fleet().cloned().ok_or_else(|| {
        Usage(format!(
            "{}: no [fleet] section: the fleet needs this node's name and the ClickHouse \
             server (node = \"NAME\", clickhouse = \"http://HOST:8123\"; docs/fleet.md)",
            path.display()
        ))
    })?;
    Ok((config, fleet))
}

/// An analytics question asked of the fleet's catalog (`--fleet`): the same answer type as
/// a local one, rendered by the same code; partial (exit 3) when a node had batches waiting
/// in its outbox at its last publish.
fn ask_fleet(a: &AnswerArgs, question: Question) -> Result<ExitCode> {
    let path = a.config.as_deref().ok_or_else(|| {
        Usage("--fleet needs --config FILE: its [fleet] section names the ClickHouse server".into())
    })?;
    let (config, fleet) = fleet_config(path)?;
    let ch = capsule_fleet::ClickHouse::of(&fleet)?;
    let request = analytics::Request {
        query: a.q.query()?,
        question,
    };
    let got = capsule_fleet::ask::answer(&ch, &request, Some(&config)).map_err(|e| {
        if e.is_usage() {
            Usage(e.to_string()).into()
        } else {
            anyhow::Error::from(e)
        }
    })?;
    let width = crate::render::table::output_width();
    let place = crate::render::Place::default();
    let mut r = crate::render::analytics(&got.answer, a.json, place, width);
    for n in &got.behind {
        r.why.push(format!(
            "node {} had {} batch(es) in its outbox at its last publish ({})",
            n.node,
            n.backlog,
            capsule_query::format_instant(n.last_seen_ns)
        ));
    }
    r.why.extend(got.missing.iter().cloned());
    crate::render::print(&r)
}
