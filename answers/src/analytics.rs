//! The index-only questions: top talkers, TCP health, the DSCP audit, the group matrix,
//! stragglers and alerts. One [`Request`] (a query and a [`Question`]) gets one
//! [`Answer`]: the window actually answered, its limits, and the question's own result.

use capsule_analytics::{
    alerts, bursts, dscp, matrix, stragglers, tcp, top, Input, Limits, Policy,
};
use capsule_query::{format_instant, Query};
use serde::Serialize;

use crate::{AnswerError, Source};

/// What is asked of the window, with the question's own options.
#[derive(Debug, Clone, PartialEq)]
pub enum Question {
    /// The largest talkers by `key`, ranked `by`, at most `limit` rows.
    Top {
        key: top::Key,
        by: top::By,
        limit: usize,
    },
    /// TCP health per interval (whole seconds, in ns) and host.
    Tcp { interval_ns: u64 },
    /// The DSCP audit: classes, their senders, and (with a config) what the policy forbids.
    Dscp,
    /// Traffic from group to group (needs the config's groups).
    Matrix { by: matrix::By },
    /// Members of `group` sending under `ratio` of its median per interval.
    Stragglers {
        group: String,
        interval_ns: u64,
        ratio: f64,
        min_bytes: u64,
    },
    /// The config's `[alerts]` rules over the window.
    Alerts,
    /// The millisecond view: peaks at 1 ms to 1 s, time above a rate, bursts, incast.
    Bursts {
        above: bursts::Above,
        incast: u32,
        limit: usize,
        /// List every millisecond with traffic too.
        series: bool,
    },
}

/// The kinds of [`Question`], by the name the CLI and the API give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Top,
    Tcp,
    Dscp,
    Matrix,
    Stragglers,
    Alerts,
    Bursts,
}

impl Kind {
    /// Every kind, in the order the API lists them.
    pub const ALL: [Kind; 7] = [
        Kind::Top,
        Kind::Tcp,
        Kind::Dscp,
        Kind::Matrix,
        Kind::Stragglers,
        Kind::Alerts,
        Kind::Bursts,
    ];

    /// The command's name (`capsule top`, `/v1/top`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Top => "top",
            Kind::Tcp => "tcp",
            Kind::Dscp => "dscp",
            Kind::Matrix => "matrix",
            Kind::Stragglers => "stragglers",
            Kind::Alerts => "alerts",
            Kind::Bursts => "bursts",
        }
    }

    /// The kind of a command name.
    pub fn by_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl Question {
    pub fn kind(&self) -> Kind {
        match self {
            Question::Top { .. } => Kind::Top,
            Question::Tcp { .. } => Kind::Tcp,
            Question::Dscp => Kind::Dscp,
            Question::Matrix { .. } => Kind::Matrix,
            Question::Stragglers { .. } => Kind::Stragglers,
            Question::Alerts => Kind::Alerts,
            Question::Bursts { .. } => Kind::Bursts,
        }
    }

    /// When the question cannot be answered without the config: how to name it in the
    /// message (`top --key group`).
    pub fn needs_config(&self) -> Option<&'static str> {
        match self {
            Question::Top {
                key: top::Key::Group,
                ..
            } => Some("top --key group"),
            Question::Matrix { .. } => Some("matrix"),
            Question::Stragglers { .. } => Some("stragglers"),
            Question::Alerts => Some("alerts"),
            Question::Top { .. }
            | Question::Tcp { .. }
            | Question::Dscp
            | Question::Bursts { .. } => None,
        }
    }

    /// What `bursts` is asked, when this is `bursts`.
    pub fn bursts_ask(&self) -> Option<bursts::Ask> {
        match *self {
            Question::Bursts {
                above,
                incast,
                limit,
                series,
            } => Some(bursts::Ask {
                above,
                incast,
                limit,
                series,
            }),
            _ => None,
        }
    }

    /// Whether the answer reads each flow's 1-second buckets (not only its totals).
    pub fn buckets(&self) -> bool {
        !matches!(self, Question::Dscp | Question::Matrix { .. })
    }
}

/// A question about a window of the store.
#[derive(Debug, Clone)]
pub struct Request {
    pub query: Query,
    pub question: Question,
}

/// The window an answer covers and what limits it.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// The store as the asker named it.
    pub store: String,
    /// The filter, canonical ("" for none).
    pub filter: String,
    /// The window answered: the query's, bounded by what the index holds.
    pub from_ns: u64,
    pub to_ns: u64,
    pub limits: Limits,
}

impl Window {
    /// The window and limits of `input`.
    pub fn of(input: &Input) -> Window {
        Window {
            store: input.store.clone(),
            filter: input.filter.clone(),
            from_ns: input.from_ns,
            to_ns: input.to_ns,
            limits: input.limits.clone(),
        }
    }
}

/// The result of each kind of question.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Body {
    Top(Box<top::Top>),
    Tcp(tcp::Tcp),
    Dscp(dscp::Dscp),
    Matrix(matrix::Matrix),
    Stragglers(stragglers::Stragglers),
    Alerts { alerts: Vec<alerts::Alert> },
    Bursts(Box<bursts::Bursts>),
}

/// An answer: which question, over which window, and what it found. It serialises as its
/// JSON document ([`Answer::to_json`]).
#[derive(Debug, Clone)]
pub struct Answer {
    /// The question answered, with its options.
    pub question: Question,
    pub window: Window,
    pub body: Body,
}

impl Answer {
    /// The kind of question answered.
    pub fn kind(&self) -> Kind {
        self.question.kind()
    }

    /// The JSON document of `capsule KIND --json` and `GET /v1/KIND`: the command, the
    /// store, filter and window, the body's fields, and the limits.
    pub fn to_json(&self) -> serde_json::Value {
        let w = &self.window;
        let mut doc = serde_json::json!({
            "command": self.kind().name(),
            "store": w.store,
            "filter": w.filter,
            "from_ns": w.from_ns,
            "from": format_instant(w.from_ns),
            "to_ns": w.to_ns,
            "to": format_instant(w.to_ns),
        });
        if let (Some(d), Ok(serde_json::Value::Object(v))) =
            (doc.as_object_mut(), serde_json::to_value(&self.body))
        {
            d.extend(v);
            d.insert(
                "limits".into(),
                serde_json::to_value(&w.limits).unwrap_or_default(),
            );
        }
        doc
    }

    /// Why the answer misses flows, if it does (empty: it is whole). A partial answer exits
    /// 3 on the command line and carries `capsule-partial: true` over HTTP.
    pub fn missing(&self) -> Vec<String> {
        let mut why = self.window.limits.missing();
        if let Body::Bursts(b) = &self.body {
            if !b.no_series_segments.is_empty() {
                why.push(format!(
                    "no millisecond series in segment(s) {:?} (indexed before the series; \
                     `capsule reindex` rebuilds them)",
                    b.no_series_segments
                ));
            }
        }
        why
    }
}

impl Serialize for Answer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

/// The window's flows from the side index, with the capture's drops as a limit: what every
/// analytics answer starts from (`buckets`: each flow's 1-second buckets too). The triage
/// report draws its charts from it.
pub fn input(source: &Source, query: &Query, buckets: bool) -> Result<Input, AnswerError> {
    let filter = query.filter.to_string();
    let mut input =
        capsule_analytics::load(&source.store, source.tier.clone(), query, &filter, buckets)?;
    input.limits.drops = Some(drops_note(&source.store, input.from_ns, input.to_ns));
    Ok(input)
}

/// Answers `req` from `source`'s side index (no packet is read).
pub fn answer(source: &Source, req: &Request) -> Result<Answer, AnswerError> {
    let question = &req.question;
    let policy = match (&source.config, question.needs_config()) {
        (Some(c), _) => Some(c),
        (None, Some(what)) => {
            return Err(AnswerError::Usage(format!(
                "{what} needs --config FILE: the host groups (and policy) it answers with"
            )))
        }
        (None, None) => None,
    };
    let input = input(source, &req.query, question.buckets())?;
    if let Some(ask) = question.bursts_ask() {
        let body = bursts_body(source, &req.query, &input, ask)?;
        return Ok(Answer {
            question: question.clone(),
            window: Window::of(&input),
            body,
        });
    }
    let body = match (question, policy) {
        (Question::Alerts, Some(config)) => alerts_body(source, &input, config)?,
        _ => body(&input, question, policy)?,
    };
    Ok(Answer {
        question: question.clone(),
        window: Window::of(&input),
        body,
    })
}

/// The link whose rate `bursts` states rates against: the `[links]` entry of the store's
/// capture interface (from its capture status), or the only entry.
pub fn link_of(source: &Source) -> Option<bursts::LinkRate> {
    link_in(source.config.as_ref(), || {
        capsule_capture::status::read_status(&source.store)
            .ok()
            .flatten()
            .map(|s| s.iface)
    })
}

/// The `[links]` entry of `config` rates are stated against: the only one, or the one of
/// the interface `iface` names (asked only when there are several).
pub fn link_in(
    config: Option<&capsule_config::Config>,
    iface: impl FnOnce() -> Option<String>,
) -> Option<bursts::LinkRate> {
    let links = config?.links();
    let pick = match links {
        [one] => Some(one),
        _ => {
            let iface = iface()?;
            links.iter().find(|l| l.name == iface)
        }
    }?;
    Some(bursts::LinkRate {
        name: pick.name.clone(),
        bits_per_second: pick.bits_per_second,
    })
}

/// The `bursts` answer over `input`'s window: the index's millisecond series of the window
/// (no segment file is read) and the window's flows.
fn bursts_body(
    source: &Source,
    query: &Query,
    input: &Input,
    ask: bursts::Ask,
) -> Result<Body, AnswerError> {
    bursts_filter(query)?;
    let dir = &source.store;
    let err = |e| AnswerError::Store {
        store: dir.display().to_string(),
        source: e,
    };
    let store = source.open().map_err(err)?;
    let listing =
        capsule_index::millis::list_index_only(&store, input.from_ns, input.to_ns).map_err(err)?;
    let b = bursts::bursts(input, &listing, link_of(source), ask)?;
    Ok(Body::Bursts(Box::new(b)))
}

/// `bursts` takes no filter: the series is of the whole link.
pub fn bursts_filter(query: &Query) -> Result<(), AnswerError> {
    if !query.filter.to_string().is_empty() {
        return Err(AnswerError::Usage(
            "bursts answers for the whole link (the millisecond series is per DSCP value, \
             not per host): give no filter"
                .into(),
        ));
    }
    Ok(())
}

/// The `alerts` answer over `input`: the flow rules, and the millisecond rules over the
/// window's millisecond series (index only, no segment file read) when the config asks
/// for any (capsule_analytics::alerts::msrules::needs_series).
pub fn alerts_body(
    source: &Source,
    input: &Input,
    config: &capsule_config::Config,
) -> Result<Body, AnswerError> {
    if !capsule_analytics::alerts::msrules::needs_series(config) {
        return alerts_over(input, config, None);
    }
    let dir = &source.store;
    let err = |e| AnswerError::Store {
        store: dir.display().to_string(),
        source: e,
    };
    let store = source.open().map_err(err)?;
    let listing =
        capsule_index::millis::list_index_only(&store, input.from_ns, input.to_ns).map_err(err)?;
    let ms = capsule_analytics::alerts::msrules::MsInput {
        listing: &listing,
        link_bps: link_of(source).map(|l| l.bits_per_second),
    };
    alerts_over(input, config, Some(&ms))
}

/// The `alerts` answer over `input`, the millisecond rules over `ms` when given.
pub fn alerts_over(
    input: &Input,
    config: &capsule_config::Config,
    ms: Option<&capsule_analytics::alerts::msrules::MsInput<'_>>,
) -> Result<Body, AnswerError> {
    Ok(Body::Alerts {
        alerts: alerts::evaluate_with(input, config, ms).map_err(|e| match e {
            capsule_analytics::AnalyticsError::Usage(m) => {
                AnswerError::Usage(format!("[alerts]: {m}"))
            }
            e => e.into(),
        })?,
    })
}

/// The question's own result over `input` (`config`: checked present by [`answer`] when the
/// question needs it).
pub fn body(
    input: &Input,
    question: &Question,
    config: Option<&capsule_config::Config>,
) -> Result<Body, AnswerError> {
    let policy = config.map(|c| c as &dyn Policy);
    let need = || {
        config.ok_or_else(|| {
            AnswerError::Usage(format!(
                "{} needs --config FILE: the host groups (and policy) it answers with",
                question.needs_config().unwrap_or("this question")
            ))
        })
    };
    Ok(match question {
        Question::Top { key, by, limit } => {
            Body::Top(Box::new(top::top(input, *key, *by, *limit, policy)))
        }
        Question::Tcp { interval_ns } => Body::Tcp(tcp::tcp(input, *interval_ns)?),
        Question::Dscp => Body::Dscp(dscp::dscp(input, policy)),
        Question::Matrix { by } => Body::Matrix(matrix::matrix(input, need()?, *by)),
        Question::Stragglers {
            group,
            interval_ns,
            ratio,
            min_bytes,
        } => Body::Stragglers(stragglers::stragglers(
            input,
            need()?,
            group,
            *interval_ns,
            *ratio,
            *min_bytes,
        )?),
        Question::Bursts { .. } => {
            return Err(AnswerError::Usage(
                "bursts is answered from the index's millisecond series, not from a window's \
                 flows: ask it with analytics::answer"
                    .into(),
            ))
        }
        Question::Alerts => alerts_over(input, need()?, None)?,
    })
}

/// What the capture status says of drops in [from, to).
pub fn drops_note(store: &std::path::Path, from: u64, to: u64) -> String {
    let fmt = format_instant;
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
