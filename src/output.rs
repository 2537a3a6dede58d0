//! How a command's outcome reaches the operator: the exit status of a partial answer, the
//! error that is the operator's (a usage error, exit 2), and JSON documents with every
//! instant also as RFC 3339 text.

/// The exit status of an answer that is partial: the command worked, but damaged data in
/// the store was skipped (what was skipped is printed).
pub(crate) const PARTIAL: u8 = 3;

/// The header of a `/v1/` analytics answer that is partial (`capsule-partial: true`).
pub(crate) const PARTIAL_HEADER: &str = "capsule-partial";

/// An error in what the user asked for, found after parsing: exits 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Usage(pub String);

/// The text of a config file's problems (not a read error): one `FILE:LINE:COL: KEY: ...`
/// per problem, the later ones on lines of their own with the `capsule: error: ` that
/// `main` puts before the first, so each line reads alike.
pub(crate) fn config_problems(e: &capsule_config::ConfigError) -> String {
    let all = e.all_invalid();
    if all.is_empty() {
        return e.to_string();
    }
    let lines: Vec<String> = all.iter().map(ToString::to_string).collect();
    lines.join("\ncapsule: error: ")
}

/// Prints one JSON document on stdout, with an RFC 3339 string beside every instant.
pub(crate) fn print_json(mut v: serde_json::Value) {
    with_times(&mut v);
    println!("{v}");
}

/// Keys ending in `_ns` that hold durations, not instants (matched inside the name).
pub(crate) const DURATION_KEYS: &[&str] = &[
    "horizon", "span", "duration", "age", "elapsed", "interval", "lateness",
];

/// Beside every `NAME_ns` key holding an instant (nanoseconds since the epoch), `NAME` as
/// RFC 3339 text, in every object of `v`: jq and JavaScript read integers above 2^53 as
/// doubles and round them to about 256 ns. A null instant gets a null beside it; a key that
/// already has its `NAME` is left as it is.
pub(crate) fn with_times(v: &mut serde_json::Value) {
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
