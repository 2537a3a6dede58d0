//! `[cutoff]`: the per-class cut-off (the Time Machine idea): store only the first `bytes`
//! wire bytes and/or `packets` packets of each flow direction, except packets matching a
//! `keep` filter, which are stored whole; a direction idle for `idle` starts afresh.
//!
//! This crate checks the keys, types, sizes and durations; the `keep` filters are kept as
//! text with where they are, and parsed by capsule-index with the query language (a bad one
//! is reported at its line there, through [`KeepRule`]'s position).

use serde::Serialize;
use toml::de::DeTable;

use crate::alerts::{count, duration, size};
use crate::error::{line_col, ErrorKind};
use crate::walk::{join, Src};

/// The keys of `[cutoff]`.
pub const CUTOFF_KEYS: [&str; 4] = ["bytes", "packets", "keep", "idle"];

/// The idle time after which a flow direction starts afresh, when `idle` is not given.
pub const DEFAULT_IDLE_NS: u64 = 300_000_000_000;

/// The `[cutoff]` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cutoff {
    /// Wire bytes stored per flow direction (0: no byte limit). The packet that reaches the
    /// limit is stored whole.
    pub bytes: u64,
    /// Packets stored per flow direction (0: no packet limit).
    pub packets: u64,
    /// Filters (the query language) whose packets are stored whole, in file order.
    pub keep: Vec<KeepRule>,
    /// A flow direction with no packet for this long starts afresh, ns.
    pub idle_ns: u64,
}

impl Default for Cutoff {
    fn default() -> Self {
        Cutoff {
            bytes: 0,
            packets: 0,
            keep: Vec::new(),
            idle_ns: DEFAULT_IDLE_NS,
        }
    }
}

impl Cutoff {
    /// Whether any packet may be cut (a byte or a packet limit is set).
    pub fn enabled(&self) -> bool {
        self.bytes > 0 || self.packets > 0
    }
}

/// One `keep` filter, with where it is in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeepRule {
    /// `cutoff.keep[1]`.
    pub key: String,
    /// The filter's text.
    pub filter: String,
    /// 1-based line and column of the string.
    pub line: usize,
    pub column: usize,
}

/// The `[cutoff]` table; a problem is kept (see [`Src::keep`]) and the reading goes on.
pub(crate) fn parse(src: &Src<'_>, path: &str, table: &DeTable<'_>) -> Cutoff {
    src.only_keys(path, table, &CUTOFF_KEYS);
    let mut c = Cutoff::default();
    for (k, v) in table {
        let name = k.get_ref().as_ref();
        let key = join(path, name);
        match name {
            "bytes" => c.bytes = src.keep(size(src, &key, v)).unwrap_or(c.bytes),
            "packets" => c.packets = src.keep(count(src, &key, v)).unwrap_or(c.packets),
            "idle" => c.idle_ns = src.keep(duration(src, &key, v)).unwrap_or(c.idle_ns),
            "keep" => {
                let items = src.strings(&key, v, "filters (strings in the query language)");
                for it in src.keep(items).unwrap_or_default() {
                    if it.text.trim().is_empty() {
                        src.keep::<()>(Err(src.err(
                            it.span,
                            &it.path,
                            ErrorKind::BadValue,
                            "a filter (`udp port 53`, `dscp ef`, `tcp-control`)",
                            "an empty string",
                        )));
                        continue;
                    }
                    let (line, column) = line_col(src.text, it.span.start);
                    c.keep.push(KeepRule {
                        key: it.path,
                        filter: it.text,
                        line,
                        column,
                    });
                }
            }
            _ => {}
        }
    }
    c
}
