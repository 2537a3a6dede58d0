//! `[capture]`: the settings of `capsule capture`, one key per flag (`ring_size` for
//! `--ring-size`), kept as the text the flag takes with where it is in the file.
//!
//! This crate checks the key names and TOML types; the binary parses each value with the
//! flag's own parser (so a value means the same in the file and on the command line) and
//! reports a bad one at its line. Flags given on the command line override the file.

use serde::Serialize;
use toml::de::{DeTable, DeValue};

use crate::error::{line_col, ConfigError, ErrorKind};
use crate::walk::{join, Src};

/// What TOML types a key takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureType {
    /// A string.
    Text,
    /// A non-negative integer.
    Count,
    /// A size or a level: a string (`"256M"`, `"store"`) or an integer.
    TextOrCount,
    /// RX queues: `"all"`, `"0,1"`, an integer or an array of integers.
    Queues,
    /// A boolean (a switch such as `--take-interface`).
    Switch,
}

/// Every key of `[capture]`, with the flag it stands for and its type, in `--help` order.
pub const CAPTURE_KEYS: &[(&str, &str, CaptureType)] = &[
    ("iface", "--iface", CaptureType::Text),
    ("store", "--store", CaptureType::Text),
    ("mode", "--mode", CaptureType::Text),
    ("take_interface", "--take-interface", CaptureType::Switch),
    ("metrics", "--metrics", CaptureType::Text),
    ("queues", "--queues", CaptureType::Queues),
    ("frame_size", "--frame-size", CaptureType::Count),
    ("snaplen", "--snaplen", CaptureType::Count),
    ("fanout_group", "--fanout-group", CaptureType::Count),
    ("ring_size", "--ring-size", CaptureType::TextOrCount),
    ("block_size", "--block-size", CaptureType::TextOrCount),
    ("block_age", "--block-age", CaptureType::Text),
    ("segment_size", "--segment-size", CaptureType::TextOrCount),
    ("segment_age", "--segment-age", CaptureType::Text),
    ("max_bytes", "--max-bytes", CaptureType::TextOrCount),
    ("min_free", "--min-free", CaptureType::TextOrCount),
    ("max_age", "--max-age", CaptureType::Text),
    ("level", "--level", CaptureType::TextOrCount),
    ("threads", "--threads", CaptureType::Count),
    ("json", "--json", CaptureType::Switch),
    ("user", "--user", CaptureType::Text),
    ("group", "--group", CaptureType::Text),
    ("log_format", "--log-format", CaptureType::Text),
    ("log_level", "--log-level", CaptureType::Text),
];

/// One `[capture]` key: the flag it sets and the value as that flag's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaptureSetting {
    /// The key's dotted path, `capture.ring_size`.
    pub key: String,
    /// The flag, `--ring-size`.
    pub flag: &'static str,
    /// The value as the flag takes it (`"256M"`, `"0,1"`, `"true"` for a switch).
    pub value: String,
    /// Where the value is: 1-based line and column.
    pub line: usize,
    pub column: usize,
}

/// The `[capture]` table, in file order.
pub(crate) fn parse(
    src: &Src<'_>,
    path: &str,
    table: &DeTable<'_>,
) -> Result<Vec<CaptureSetting>, ConfigError> {
    let names: Vec<&str> = CAPTURE_KEYS.iter().map(|(k, _, _)| *k).collect();
    src.only_keys(path, table, &names)?;
    let mut out = Vec::new();
    for (k, v) in table {
        let name = k.get_ref().as_ref();
        let key = join(path, name);
        let Some(&(_, flag, ty)) = CAPTURE_KEYS.iter().find(|(n, _, _)| *n == name) else {
            continue;
        };
        let wrong =
            |expected: &str| src.err(v.span(), &key, ErrorKind::WrongType, expected, src.found(v));
        let count = |v: &DeValue<'_>| -> Option<String> {
            let DeValue::Integer(i) = v else { return None };
            u64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n.to_string())
        };
        let value = match (ty, v.get_ref()) {
            (
                CaptureType::Text | CaptureType::TextOrCount | CaptureType::Queues,
                DeValue::String(s),
            ) => s.to_string(),
            (
                CaptureType::Count | CaptureType::TextOrCount | CaptureType::Queues,
                DeValue::Integer(_),
            ) => {
                // A negative level (`level = -10`) is a valid level: the flag parses it.
                match count(v.get_ref()) {
                    Some(n) => n,
                    None if ty == CaptureType::TextOrCount => {
                        src.text.get(v.span()).unwrap_or_default().replace('_', "")
                    }
                    None => return Err(wrong("a non-negative integer")),
                }
            }
            (CaptureType::Queues, DeValue::Array(a)) => {
                let mut list = Vec::with_capacity(a.len());
                for (i, e) in a.iter().enumerate() {
                    let n = count(e.get_ref()).ok_or_else(|| {
                        src.err(
                            e.span(),
                            &format!("{key}[{i}]"),
                            ErrorKind::WrongType,
                            "a queue number (a non-negative integer)",
                            src.found(e),
                        )
                    })?;
                    list.push(n);
                }
                if list.is_empty() {
                    return Err(wrong(
                        "\"all\", a queue number or a non-empty array of them",
                    ));
                }
                list.join(",")
            }
            (CaptureType::Switch, DeValue::Boolean(b)) => b.to_string(),
            (CaptureType::Text, _) => return Err(wrong("a string")),
            (CaptureType::Count, _) => return Err(wrong("a non-negative integer")),
            (CaptureType::TextOrCount, _) => return Err(wrong("a string or an integer")),
            (CaptureType::Queues, _) => {
                return Err(wrong(
                    "\"all\", \"0,1\", a queue number or an array of them",
                ))
            }
            (CaptureType::Switch, _) => return Err(wrong("true or false")),
        };
        let (line, column) = line_col(src.text, v.span().start);
        out.push(CaptureSetting {
            key,
            flag,
            value,
            line,
            column,
        });
    }
    Ok(out)
}
