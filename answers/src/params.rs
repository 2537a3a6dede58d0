//! Questions as name=value parameters and back: what `capsule KIND --server` sends and
//! `GET /v1/KIND` takes. One codec, so a remote question is the local one: the client
//! encodes a [`Question`] with [`Question::params`], the server decodes it with
//! [`Question::from_params`], and each value is checked by the same parser the command
//! line uses ([`interval`], the names of [`top::Key`] ...). A bad value is refused with a
//! message that names the parameter.

use capsule_analytics::bursts::Above;
use capsule_analytics::{matrix, top};

use crate::analytics::{Kind, Question};

/// The defaults of the command line and the API.
pub const TOP_LIMIT: usize = 10;
pub const TCP_INTERVAL_NS: u64 = 60_000_000_000;
pub const STRAGGLERS_INTERVAL_NS: u64 = 10_000_000_000;
pub const STRAGGLERS_RATIO: f64 = 0.5;
pub const BURSTS_ABOVE: Above = Above::Percent(80.0);
pub const BURSTS_INCAST: u32 = 16;
pub const BURSTS_LIMIT: usize = 10;

/// A `bursts --above` threshold: a share of the link's rate (`80%`) or a rate in bits per
/// second (`5G`, `400M`).
pub fn above(s: &str) -> Result<Above, String> {
    match s.strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| p.is_finite() && *p > 0.0 && *p <= 1000.0)
            .map(Above::Percent)
            .ok_or_else(|| format!("expected a percentage of the link's rate (80%), found {s:?}")),
        None => capsule_config::parse_rate(s).map(Above::Rate),
    }
}

/// A threshold as a parameter value: `80%` or `5G`.
pub fn above_text(a: Above) -> String {
    match a {
        Above::Percent(p) => format!("{p}%"),
        Above::Rate(r) => r.to_string(),
    }
}

/// An interval: a duration (`1m`, `10s`) of whole seconds, in nanoseconds.
pub fn interval(s: &str) -> Result<u64, String> {
    let d = capsule_query::parse_duration(s).map_err(|e| e.to_string())?;
    let ns = u64::try_from(d.as_nanos()).map_err(|_| format!("{s:?} is too long"))?;
    if ns == 0 || !ns.is_multiple_of(1_000_000_000) {
        return Err(format!(
            "{s:?} is not a whole number of seconds (the index counts 1-second buckets)"
        ));
    }
    Ok(ns)
}

/// An interval as a parameter value: `60s`.
pub fn interval_text(ns: u64) -> String {
    format!("{}s", ns / 1_000_000_000)
}

/// The names of [`top::Key`], as `--key` takes them.
pub const TOP_KEYS: [(top::Key, &str); 9] = [
    (top::Key::Flow, "flow"),
    (top::Key::Src, "src"),
    (top::Key::Dst, "dst"),
    (top::Key::Pair, "pair"),
    (top::Key::Group, "group"),
    (top::Key::Dscp, "dscp"),
    (top::Key::Sni, "sni"),
    (top::Key::App, "app"),
    (top::Key::Tunnel, "tunnel"),
];

/// The names of [`top::By`], as `top --by` takes them.
pub const TOP_BY: [(top::By, &str); 2] = [(top::By::Bytes, "bytes"), (top::By::Packets, "packets")];

/// The names of [`matrix::By`], as `matrix --by` takes them.
pub const MATRIX_BY: [(matrix::By, &str); 3] = [
    (matrix::By::Bytes, "bytes"),
    (matrix::By::Packets, "packets"),
    (matrix::By::Flows, "flows"),
];

/// The name of `v` in `table`.
pub fn name_of<T: PartialEq + Copy>(table: &[(T, &'static str)], v: T) -> &'static str {
    table.iter().find(|(x, _)| *x == v).map_or("", |(_, n)| *n)
}

/// The value named `name` in `table`; the error lists the names.
pub fn by_name<T: Copy>(table: &[(T, &'static str)], name: &str) -> Result<T, String> {
    table
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(v, _)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = table.iter().map(|(_, n)| *n).collect();
            format!("expected one of {}, found {name:?}", names.join(", "))
        })
}

impl Kind {
    /// The question's own parameters, besides the window and filter, named as the command
    /// line's flags without `--`.
    pub fn param_names(self) -> &'static [&'static str] {
        match self {
            Kind::Top => &["by", "key", "limit"],
            Kind::Tcp => &["interval"],
            Kind::Dscp | Kind::Alerts => &[],
            Kind::Matrix => &["by"],
            Kind::Stragglers => &["group", "interval", "ratio", "min-bytes"],
            Kind::Bursts => &["above", "incast", "limit", "series"],
        }
    }
}

impl Question {
    /// The question's own parameters, each as `(name, value)`.
    pub fn params(&self) -> Vec<(&'static str, String)> {
        match self {
            Question::Top { key, by, limit } => vec![
                ("by", name_of(&TOP_BY, *by).to_string()),
                ("key", name_of(&TOP_KEYS, *key).to_string()),
                ("limit", limit.to_string()),
            ],
            Question::Tcp { interval_ns } => vec![("interval", interval_text(*interval_ns))],
            Question::Dscp | Question::Alerts => Vec::new(),
            Question::Matrix { by } => vec![("by", name_of(&MATRIX_BY, *by).to_string())],
            Question::Stragglers {
                group,
                interval_ns,
                ratio,
                min_bytes,
            } => vec![
                ("group", group.clone()),
                ("interval", interval_text(*interval_ns)),
                ("ratio", ratio.to_string()),
                ("min-bytes", min_bytes.to_string()),
            ],
            Question::Bursts {
                above,
                incast,
                limit,
                series,
            } => vec![
                ("above", above_text(*above)),
                ("incast", incast.to_string()),
                ("limit", limit.to_string()),
                ("series", series.to_string()),
            ],
        }
    }

    /// The question of `kind` that the parameters `get` ask (absent ones take the command
    /// line's defaults). The error names the parameter and what was wrong with it.
    pub fn from_params(
        kind: Kind,
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Question, String> {
        fn parsed<T>(
            name: &str,
            v: Option<String>,
            parse: impl FnOnce(&str) -> Result<T, String>,
            default: T,
        ) -> Result<T, String> {
            match v {
                None => Ok(default),
                Some(v) => parse(&v).map_err(|e| format!("invalid value for {name}: {e}")),
            }
        }
        let number = |what: &'static str| {
            move |s: &str| {
                s.parse::<u64>()
                    .map_err(|_| format!("expected {what}, found {s:?}"))
            }
        };
        Ok(match kind {
            Kind::Top => Question::Top {
                by: parsed("by", get("by"), |s| by_name(&TOP_BY, s), top::By::Bytes)?,
                key: parsed("key", get("key"), |s| by_name(&TOP_KEYS, s), top::Key::Flow)?,
                limit: parsed(
                    "limit",
                    get("limit"),
                    |s| number("a whole number")(s).map(|n| n as usize),
                    TOP_LIMIT,
                )?,
            },
            Kind::Tcp => Question::Tcp {
                interval_ns: parsed("interval", get("interval"), interval, TCP_INTERVAL_NS)?,
            },
            Kind::Dscp => Question::Dscp,
            Kind::Alerts => Question::Alerts,
            Kind::Matrix => Question::Matrix {
                by: parsed(
                    "by",
                    get("by"),
                    |s| by_name(&MATRIX_BY, s),
                    matrix::By::Bytes,
                )?,
            },
            Kind::Bursts => Question::Bursts {
                above: parsed("above", get("above"), above, BURSTS_ABOVE)?,
                incast: parsed(
                    "incast",
                    get("incast"),
                    |s| {
                        number("a number of senders")(s).and_then(|n| {
                            u32::try_from(n).map_err(|_| format!("{n} senders is too many"))
                        })
                    },
                    BURSTS_INCAST,
                )?,
                limit: parsed(
                    "limit",
                    get("limit"),
                    |s| number("a whole number")(s).map(|n| n as usize),
                    BURSTS_LIMIT,
                )?,
                series: parsed(
                    "series",
                    get("series"),
                    |s| match s {
                        "true" => Ok(true),
                        "false" => Ok(false),
                        _ => Err(format!("expected true or false, found {s:?}")),
                    },
                    false,
                )?,
            },
            Kind::Stragglers => Question::Stragglers {
                group: get("group")
                    .ok_or("missing parameter group: this endpoint needs it".to_string())?,
                interval_ns: parsed(
                    "interval",
                    get("interval"),
                    interval,
                    STRAGGLERS_INTERVAL_NS,
                )?,
                ratio: parsed(
                    "ratio",
                    get("ratio"),
                    |s| {
                        s.parse::<f64>()
                            .ok()
                            .filter(|r| r.is_finite() && *r > 0.0)
                            .ok_or_else(|| format!("expected a positive number, found {s:?}"))
                    },
                    STRAGGLERS_RATIO,
                )?,
                min_bytes: parsed(
                    "min-bytes",
                    get("min-bytes"),
                    number("a number of bytes"),
                    capsule_analytics::stragglers::DEFAULT_MIN_BYTES,
                )?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn decode(kind: Kind, pairs: &[(&str, &str)]) -> Result<Question, String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Question::from_params(kind, &|n| m.get(n).cloned())
    }

    #[test]
    fn every_question_round_trips_through_its_parameters() {
        let questions = [
            Question::Top {
                key: top::Key::Pair,
                by: top::By::Packets,
                limit: 3,
            },
            Question::Tcp {
                interval_ns: 5_000_000_000,
            },
            Question::Dscp,
            Question::Matrix {
                by: matrix::By::Flows,
            },
            Question::Stragglers {
                group: "gpu".into(),
                interval_ns: 20_000_000_000,
                ratio: 0.25,
                min_bytes: 1000,
            },
            Question::Alerts,
            Question::Bursts {
                above: Above::Percent(62.5),
                incast: 24,
                limit: 3,
                series: true,
            },
            Question::Bursts {
                above: Above::Rate(5_000_000_000),
                incast: 16,
                limit: 10,
                series: false,
            },
        ];
        for q in questions {
            let p = q.params();
            for (name, _) in &p {
                assert!(q.kind().param_names().contains(name), "{name}");
            }
            let pairs: Vec<(&str, &str)> = p.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(decode(q.kind(), &pairs).unwrap(), q);
        }
    }

    #[test]
    fn defaults_are_the_command_lines_and_bad_values_name_the_parameter() {
        assert_eq!(
            decode(Kind::Top, &[]).unwrap(),
            Question::Top {
                key: top::Key::Flow,
                by: top::By::Bytes,
                limit: 10
            }
        );
        for (kind, pairs, name) in [
            (Kind::Top, &[("key", "nope")][..], "key"),
            (Kind::Top, &[("limit", "-3")][..], "limit"),
            (Kind::Tcp, &[("interval", "1500ms")][..], "interval"),
            (
                Kind::Stragglers,
                &[("group", "g"), ("ratio", "half")][..],
                "ratio",
            ),
            (Kind::Stragglers, &[][..], "group"),
            (Kind::Bursts, &[("above", "fast")][..], "above"),
            (Kind::Bursts, &[("above", "-5%")][..], "above"),
            (Kind::Bursts, &[("incast", "many")][..], "incast"),
        ] {
            let e = decode(kind, pairs).unwrap_err();
            assert!(e.contains(name), "{e}");
        }
    }
}
