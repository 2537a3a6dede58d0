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
    /// A flag that may be repeated: a string, or a non-empty array of strings (one flag
    /// each, e.g. `iface = ["eth1", "eth2"]` for `--iface eth1 --iface eth2`, `serve.crl`).
    TextList,
}

/// Every key of `[capture]`, with the flag it stands for and its type, in `--help` order.
pub const CAPTURE_KEYS: &[(&str, &str, CaptureType)] = &[
    ("iface", "--iface", CaptureType::TextList),
    ("iface_mode", "--iface-mode", CaptureType::TextList),
    ("store", "--store", CaptureType::Text),
    ("mode", "--mode", CaptureType::Text),
    ("take_interface", "--take-interface", CaptureType::Switch),
    ("xdp_variant", "--xdp-variant", CaptureType::Text),
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
    ("age_tier", "--age-tier", CaptureType::Text),
];

/// Every key of `[serve]`, with the `capsule serve` flag it stands for and its type.
pub const SERVE_KEYS: &[(&str, &str, CaptureType)] = &[
    ("store", "--store", CaptureType::Text),
    ("listen", "--listen", CaptureType::Text),
    ("cert", "--cert", CaptureType::Text),
    ("key", "--key", CaptureType::Text),
    ("tokens", "--tokens", CaptureType::Text),
    ("client_ca", "--client-ca", CaptureType::Text),
    ("crl", "--crl", CaptureType::TextList),
    ("audit_log", "--audit-log", CaptureType::Text),
    ("max_queries", "--max-queries", CaptureType::Count),
    (
        "max_queries_per_user",
        "--max-queries-per-user",
        CaptureType::Count,
    ),
    (
        "max_bytes_per_query",
        "--max-bytes-per-query",
        CaptureType::TextOrCount,
    ),
    ("max_query_time", "--max-query-time", CaptureType::Text),
];

/// One `[capture]` (or `[serve]`) key: the flag it sets and the value as that flag's text.
/// A `[serve]` list (`crl = ["a.pem", "b.pem"]`) is one setting per element
/// (`serve.crl[0]`, ...).
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

/// The sub-table of per-interface settings, `[capture.interfaces.NAME]`.
pub const INTERFACES_KEY: &str = "interfaces";

/// The keys of `[capture.interfaces.NAME]`, each with the flag it becomes: `mode = "afpacket"`
/// is `--iface-mode NAME=afpacket`.
pub const INTERFACE_KEYS: &[(&str, &str)] = &[("mode", "--iface-mode")];

/// `[capture.interfaces.NAME]` tables: one `--iface-mode NAME=MODE` setting per key.
fn interfaces(
    src: &Src<'_>,
    path: &str,
    v: &toml::Spanned<DeValue<'_>>,
    out: &mut Vec<CaptureSetting>,
) {
    let key = join(path, INTERFACES_KEY);
    let t = src.table(
        &key,
        v,
        "a table of interfaces, e.g. [capture.interfaces.eth1]",
    );
    let Some(t) = src.keep(t) else { return };
    let names: Vec<&str> = INTERFACE_KEYS.iter().map(|(k, _)| *k).collect();
    for (name, per) in t {
        let ikey = join(&key, name.get_ref());
        let per = src.table(&ikey, per, "a table of settings of this interface (mode)");
        let Some(per) = src.keep(per) else { continue };
        src.only_keys(&ikey, per, &names);
        for (k, v) in per {
            let Some(&(_, flag)) = INTERFACE_KEYS
                .iter()
                .find(|(n, _)| *n == k.get_ref().as_ref())
            else {
                continue;
            };
            let skey = join(&ikey, k.get_ref());
            let Some(text) = src.keep(src.string(&skey, v, "a string")) else {
                continue;
            };
            let (line, column) = line_col(src.text, v.span().start);
            out.push(CaptureSetting {
                key: skey,
                flag,
                value: format!("{}={text}", name.get_ref()),
                line,
                column,
            });
        }
    }
}

/// A table of flag settings (`[capture]` with [`CAPTURE_KEYS`] and its
/// `[capture.interfaces.NAME]`, `[serve]` with [`SERVE_KEYS`]), in file order. A repeated
/// flag's array gives one setting per element (keyed `capture.iface[1]`).
pub(crate) fn parse(
    src: &Src<'_>,
    path: &str,
    table: &DeTable<'_>,
    keys: &[(&str, &'static str, CaptureType)],
) -> Vec<CaptureSetting> {
    let mut names: Vec<&str> = keys.iter().map(|(k, _, _)| *k).collect();
    let per_interface = path == "capture";
    if per_interface {
        names.push(INTERFACES_KEY);
    }
    src.only_keys(path, table, &names);
    let mut out = Vec::new();
    for (k, v) in table {
        let name = k.get_ref().as_ref();
        let key = join(path, name);
        if per_interface && name == INTERFACES_KEY {
            interfaces(src, path, v, &mut out);
            continue;
        }
        let Some(&(_, flag, ty)) = keys.iter().find(|(n, _, _)| *n == name) else {
            continue;
        };
        // One key: its problem is kept and the reading goes on with the next key.
        let one = (|| -> Result<(), ConfigError> {
            let wrong = |expected: &str| {
                src.err(v.span(), &key, ErrorKind::WrongType, expected, src.found(v))
            };
            let count = |v: &DeValue<'_>| -> Option<String> {
                let DeValue::Integer(i) = v else { return None };
                u64::from_str_radix(i.as_str(), i.radix())
                    .ok()
                    .map(|n| n.to_string())
            };
            if let (CaptureType::TextList, DeValue::Array(_)) = (ty, v.get_ref()) {
                let items = src.strings(&key, v, "strings")?;
                if items.is_empty() {
                    return Err(wrong("a string or a non-empty array of strings"));
                }
                for it in items {
                    let (line, column) = line_col(src.text, it.span.start);
                    out.push(CaptureSetting {
                        key: it.path,
                        flag,
                        value: it.text,
                        line,
                        column,
                    });
                }
                return Ok(());
            }
            let value = match (ty, v.get_ref()) {
                (
                    CaptureType::Text
                    | CaptureType::TextList
                    | CaptureType::TextOrCount
                    | CaptureType::Queues,
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
                (CaptureType::TextList, _) => {
                    return Err(wrong("a string or a non-empty array of strings"))
                }
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
            Ok(())
        })();
        src.keep(one);
    }
    out
}
