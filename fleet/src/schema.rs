//! The fleet tables' DDL, chosen by the server's version (as Akvorado does).
//!
//! Debian's ClickHouse 18.16 has no DateTime64, no IPv4/IPv6 types, no TTL and no skip
//! indexes: times are UInt64 nanoseconds, addresses FixedString(16) (IPv4 as IPv4-mapped
//! IPv6), partitions by day of the row's first packet, retention by dropping partitions.
//! From 20.1 on, addresses are IPv6 and node names LowCardinality(String): in RowBinary the
//! same bytes, so the nodes' encoder and the askers' decoder do not depend on the version.
//! Every table is a ReplacingMergeTree whose sorting key identifies a row (node, segment,
//! and the flow, minute or nothing), its version column the time it was published: a row
//! pushed twice collapses to one.

use crate::clickhouse::{ClickHouse, Version};
use crate::{FleetError, DATABASE};

/// The DDL variant of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    /// IPv6 and LowCardinality columns (20.1 and later).
    pub modern: bool,
}

/// The placeholders of the column types in rows.rs's lists: an address, a node name.
const ADDR: &str = "{ADDR}";
const NODE: &str = "{NODE}";

impl Schema {
    pub fn for_version(v: Version) -> Schema {
        Schema {
            modern: v
                >= Version {
                    major: 20,
                    minor: 1,
                },
        }
    }

    fn ty(&self, t: &str) -> String {
        let (addr, node) = if self.modern {
            ("IPv6", "LowCardinality(String)")
        } else {
            ("FixedString(16)", "String")
        };
        t.replace(ADDR, addr).replace(NODE, node)
    }

    /// `CREATE TABLE IF NOT EXISTS` of every table, in order.
    pub fn ddl(&self) -> Vec<String> {
        let cols = |c: &[(String, String)]| {
            c.iter()
                .map(|(n, t)| format!("    {n} {}", self.ty(t)))
                .collect::<Vec<_>>()
                .join(",\n")
        };
        let day_of = |ns: &str| format!("toYYYYMMDD(toDateTime(intDiv({ns}, 1000000000)))");
        // A table of published rows: the newest push of a row wins, partitioned by the day
        // of `day_ns`, ordered by `order`.
        let published = |table: &str, columns: &[(String, String)], day_ns: &str, order: &str| {
            format!(
                "CREATE TABLE IF NOT EXISTS {DATABASE}.{table} (\n{}\n) ENGINE = \
                 ReplacingMergeTree(published_ns)\nPARTITION BY {}\nORDER BY {order}",
                cols(columns),
                day_of(day_ns),
            )
        };
        vec![
            format!("CREATE DATABASE IF NOT EXISTS {DATABASE}"),
            published(
                "flows",
                &crate::rows::flow_columns(),
                "first_ns",
                &format!("({})", crate::rows::FLOW_KEY.join(", ")),
            ),
            published(
                "flow_packed",
                &crate::rows::packed_columns(),
                "first_ns",
                &format!("({})", crate::rows::FLOW_KEY.join(", ")),
            ),
            published(
                "segments",
                &crate::rows::segment_columns(),
                "first_ns",
                "(node, segment)",
            ),
            published(
                "minutes",
                &crate::rows::minute_columns(),
                "minute * 60000000000",
                "(node, segment, minute, dscp, grp)",
            ),
            published(
                "ms_bins",
                &crate::series::bin_columns(),
                "second * 1000000000",
                "(node, segment, second)",
            ),
            published(
                "ms_fanins",
                &crate::series::fanin_columns(),
                "ms * 1000000",
                "(node, segment, ms, dst, dst_v6)",
            ),
            published(
                "ms_segments",
                &crate::series::segment_columns(),
                "first_ns",
                "(node, segment)",
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {DATABASE}.nodes (\n{}\n) ENGINE = \
                 ReplacingMergeTree(last_seen_ns)\nORDER BY node",
                cols(&crate::rows::node_columns()),
            ),
        ]
    }

    /// Creates the tables of `ch`'s version that are missing, and the columns a release
    /// added since a table was created (`segments.location`). One round trip when every
    /// table and column is there (each question and each publish asks); the version and the
    /// DDL only when one is not.
    pub fn ensure(ch: &ClickHouse) -> Result<(), FleetError> {
        let names: Vec<String> = TABLES
            .iter()
            .chain(&FILLED)
            .map(|t| format!("'{t}'"))
            .collect();
        let added: Vec<String> = ADDED
            .iter()
            .map(|(t, c, _)| format!("(table = '{t}' AND name = '{c}')"))
            .collect();
        let have = || -> Result<(usize, usize), FleetError> {
            let text = ch.execute(&format!(
                "SELECT (SELECT count() FROM system.tables WHERE database = '{DATABASE}' AND \
                 name IN ({})), (SELECT count() FROM system.columns WHERE database = \
                 '{DATABASE}' AND ({})) FORMAT TabSeparated",
                names.join(", "),
                added.join(" OR ")
            ))?;
            let text = String::from_utf8_lossy(&text);
            let mut it = text.split_whitespace().map(|n| n.parse::<usize>().ok());
            match (it.next().flatten(), it.next().flatten()) {
                (Some(t), Some(c)) => Ok((t, c)),
                _ => Err(FleetError::Decode {
                    what: format!("the table count ClickHouse at {} gave", ch.url()),
                    problem: format!("expected two numbers, found {:?}", text.trim()),
                }),
            }
        };
        if have()? == (TABLES.len() + FILLED.len(), ADDED.len()) {
            return Ok(());
        }
        let s = Schema::for_version(ch.version()?);
        for stmt in s.ddl() {
            ch.execute(&stmt)?;
        }
        // Tables created by an earlier release: the columns added since, at the end (18.16
        // has no ADD COLUMN IF NOT EXISTS: asked for one by one).
        for (table, column, ty) in ADDED {
            let text = ch.execute(&format!(
                "SELECT count() FROM system.columns WHERE database = '{DATABASE}' AND \
                 table = '{table}' AND name = '{column}' FORMAT TabSeparated"
            ))?;
            if String::from_utf8_lossy(&text).trim() == "0" {
                ch.execute(&format!(
                    "ALTER TABLE {DATABASE}.{table} ADD COLUMN {column} {ty}"
                ))?;
            }
        }
        fill_packed(ch)
    }
}

/// The packed flow table's filling: the materialised view that packs each block inserted
/// into `capsule.flows` into `capsule.flow_packed`, and the marker that says the rows
/// published before the view are in it too.
pub const FILLED: [&str; 2] = ["flows_to_packed", "flow_packed_filled"];

/// Makes `capsule.flow_packed` hold every flow row, whichever release published it: the
/// view first (every row inserted from then on is packed by ClickHouse itself, also a row
/// an earlier release's node pushes), then the rows already there packed once (a row both
/// reach collapses, the table being a ReplacingMergeTree with the flow table's key and
/// version), then the marker the packed questions name, so a catalog whose copy did not
/// finish (a crash) is never read packed: its questions are refused, the copy is made
/// again and the question asked again ([`with_tables`]). A catalog an earlier release made
/// keeps its narrow table (`flow_totals`, its view and marker): this release neither reads
/// nor fills it, and an asker of that release still can.
fn fill_packed(ch: &ClickHouse) -> Result<(), FleetError> {
    let text = ch.execute(&format!(
        "SELECT count() FROM system.tables WHERE database = '{DATABASE}' AND name = '{}' \
         FORMAT TabSeparated",
        FILLED[1]
    ))?;
    if String::from_utf8_lossy(&text).trim() != "0" {
        return Ok(());
    }
    let select = crate::rows::packed_view_select();
    ch.execute(&format!(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS {DATABASE}.{} TO {DATABASE}.flow_packed AS \
         SELECT {select} FROM {DATABASE}.flows",
        FILLED[0]
    ))?;
    ch.execute(&format!(
        "INSERT INTO {DATABASE}.flow_packed SELECT {select} FROM {DATABASE}.flows"
    ))?;
    ch.execute(&format!(
        "CREATE TABLE IF NOT EXISTS {DATABASE}.{} (filled_ns UInt64) ENGINE = TinyLog",
        FILLED[1]
    ))?;
    Ok(())
}

/// Runs `ask` (questions that read the tables) without checking the tables first; when
/// ClickHouse refuses it (a catalog no node published to yet, or one an earlier release
/// made, misses a table or a column), makes them ([`Schema::ensure`]) and asks once more.
/// A question over a current catalog costs no round trip for the check.
pub fn with_tables<T>(
    ch: &ClickHouse,
    ask: impl Fn() -> Result<T, FleetError>,
) -> Result<T, FleetError> {
    match ask() {
        Err(FleetError::Server { .. }) => {
            Schema::ensure(ch)?;
            ask()
        }
        other => other,
    }
}

/// The columns added to a table after its first release, with their type and default (what
/// a row published before them reads as): each is the table's last column.
/// The flows' attributes (`names`, `encap`, [`crate::rows::ATTRIBUTES`]) of a row an
/// earlier release published read empty: not kept.
const ADDED: [(&str, &str, &str); 3] = [
    ("segments", "location", "String DEFAULT 'local'"),
    ("flows", "names", "String DEFAULT ''"),
    ("flows", "encap", "String DEFAULT ''"),
];

/// Every table of the catalog, as [`Schema::ddl`] creates them.
pub const TABLES: [&str; 8] = [
    "flows",
    "flow_packed",
    "segments",
    "minutes",
    "ms_bins",
    "ms_fanins",
    "ms_segments",
    "nodes",
];

#[cfg(test)]
#[test]
fn every_table_the_ddl_creates_is_listed() {
    let ddl = Schema { modern: false }.ddl();
    let created: Vec<&str> = ddl
        .iter()
        .filter_map(|s| s.strip_prefix(&format!("CREATE TABLE IF NOT EXISTS {DATABASE}.")))
        .filter_map(|s| s.split(' ').next())
        .collect();
    assert_eq!(created, TABLES);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debians_server_gets_no_type_it_lacks() {
        let old = Schema::for_version(Version {
            major: 18,
            minor: 16,
        });
        assert!(!old.modern);
        let ddl = old.ddl().join("\n");
        for absent in [
            "DateTime64",
            "IPv6",
            "IPv4",
            "TTL",
            "INDEX",
            "LowCardinality",
            "{",
        ] {
            assert!(!ddl.contains(absent), "{absent} in\n{ddl}");
        }
        assert!(ddl.contains("a FixedString(16)"), "{ddl}");
        let new = Schema::for_version(Version {
            major: 24,
            minor: 3,
        })
        .ddl()
        .join("\n");
        assert!(
            new.contains("a IPv6") && new.contains("node LowCardinality(String)"),
            "{new}"
        );
    }
}
