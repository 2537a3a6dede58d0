//! The nodes of the fleet as the catalog knows them: the registry row each writes when it
//! publishes, and the span of the segments it published (`capsule fleet nodes`).

use crate::clickhouse::ClickHouse;
use crate::rowbinary::Reader;
use crate::rows::{self, NodeRow};
use crate::{FleetError, DATABASE};

/// A node, with what it published.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NodeInfo {
    #[serde(flatten)]
    pub row: NodeRow,
    /// Segments in the catalog, their first and last packet time, flows, packets, bytes.
    pub segments: u64,
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    pub flows: u64,
    pub packets: u64,
    pub bytes: u64,
    /// Of its segments, those in the object store only (`tiered`: trimmed locally) and
    /// those both local and in the object store (`both`), as its last publish said.
    pub tiered_segments: u64,
    pub both_segments: u64,
}

/// The registry rows, by node name.
pub fn registry(ch: &ClickHouse) -> Result<Vec<NodeRow>, FleetError> {
    let cols: Vec<String> = rows::node_columns().into_iter().map(|(n, _)| n).collect();
    let b = ch.execute(&format!(
        "SELECT {} FROM {DATABASE}.nodes FINAL ORDER BY node FORMAT RowBinary",
        cols.join(", ")
    ))?;
    let what = format!("the node rows ClickHouse at {} gave", ch.url());
    let mut r = Reader::new(&b, &what);
    let mut out = Vec::new();
    while !r.is_empty() {
        out.push(rows::get_node(&mut r)?);
    }
    Ok(out)
}

/// Every node the catalog knows, with the span of its published segments.
pub fn list(ch: &ClickHouse) -> Result<Vec<NodeInfo>, FleetError> {
    crate::schema::Schema::ensure(ch)?;
    let reg = registry(ch)?;
    let b = ch.execute(&format!(
        "SELECT node, count(), min(first_ns), max(last_ns), sum(flows), sum(packets), \
         sum(bytes), countIf(location = 'tiered'), countIf(location = 'both') \
         FROM {DATABASE}.segments FINAL GROUP BY node FORMAT RowBinary"
    ))?;
    let what = format!("the segment ledger ClickHouse at {} gave", ch.url());
    let mut r = Reader::new(&b, &what);
    let mut spans = std::collections::BTreeMap::new();
    while !r.is_empty() {
        let node = r.string()?;
        let v = [
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
        ];
        spans.insert(node, v);
    }
    Ok(reg
        .into_iter()
        .map(|row| {
            let s = spans.get(&row.node).copied();
            let [n, a, z, flows, packets, bytes, tiered, both] = s.unwrap_or_default();
            NodeInfo {
                row,
                segments: n,
                first_ns: s.map(|_| a),
                last_ns: s.map(|_| z),
                flows,
                packets,
                bytes,
                tiered_segments: tiered,
                both_segments: both,
            }
        })
        .collect())
}
