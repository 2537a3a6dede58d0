//! Publishing a store: staging its sealed segments' rows into the outbox (no network), then
//! pushing the outbox to ClickHouse. Both are idempotent: a segment staged is not staged
//! again (unless compacted since), and a batch pushed twice collapses in ClickHouse.

use std::path::Path;

use capsule_index::sideindex::{index_name, SegmentIndex};
use capsule_store::{SegmentState, Store};

use crate::clickhouse::ClickHouse;
use crate::outbox::{Batch, List, Outbox, LEDGER, TABLES};
use crate::rowbinary::Writer;
use crate::rows::{self, NodeRow, Origin, SegmentRow};
use crate::schema::Schema;
use crate::{FleetError, DATABASE};

/// The node publishing: its name, its `serve` URL, and the config whose groups name the
/// rollups' senders.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    pub name: &'a str,
    pub advertise: Option<&'a str>,
    pub config: Option<&'a capsule_config::Config>,
    /// The software's version, for the registry.
    pub version: &'a str,
    /// The node's `[tier]`: the side index of a segment only in the object store that is
    /// missing locally (a store restored without its indexes) is fetched through it, at most
    /// [`INDEX_FETCHES_PER_PASS`] a staging pass. `None`: such a segment stays unindexed.
    pub tier: Option<&'a capsule_store::remote::Tier>,
}

/// The most side indexes a staging pass fetches from the object store (`serve` and
/// `capture` stage every 5 s: at most 3.2 fetches a second); the rest wait for the next.
pub const INDEX_FETCHES_PER_PASS: usize = 16;

/// What a staging pass did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Staged {
    /// Segments staged now.
    pub staged: Vec<u64>,
    /// Sealed segments without a current side index (`capsule reindex` builds it): not
    /// staged, tried again next time.
    pub unindexed: Vec<u64>,
}

/// What a push did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Pushed {
    pub batches: usize,
    /// Rows inserted, per table of [`TABLES`].
    pub rows: [u64; 6],
    /// Damaged outbox files removed (their segments are staged again from the index).
    pub damaged: Vec<String>,
}

fn store_err(dir: &Path) -> impl Fn(capsule_store::StoreError) -> FleetError + '_ {
    move |source| FleetError::Store {
        store: dir.display().to_string(),
        source,
    }
}

/// Stages every sealed, indexed segment of the store at `dir` not staged yet: its flows,
/// rollups and ledger row, and its millisecond series (a segment whose flows a release
/// before the series staged gets its series alone, once); and the ledger row again of each
/// staged segment whose location (local, both, tiered) changed since it was staged.
pub fn stage(dir: &Path, node: &Node) -> Result<Staged, FleetError> {
    let store = Store::open(dir).map_err(store_err(dir))?;
    let outbox = Outbox::of(dir);
    let entries = store.list_held().map_err(store_err(dir))?;
    let before = [
        outbox.staged_in(List::Flows)?,
        outbox.staged_in(List::Series)?,
    ];
    let mut staged = before.clone();
    // Segments retention deleted are forgotten (their rows stay in ClickHouse until its
    // partitions are dropped).
    for s in &mut staged {
        s.retain(|(seq, _)| entries.iter().any(|e| e.seq == *seq));
    }
    // Where each segment lives (read after the listing, as `list_held` reads it), and the
    // location each one's ledger row was last staged with.
    let ledger = capsule_store::ledger::read(&store.segments_dir()).map_err(store_err(dir))?;
    let location_of = |seq: u64| {
        ledger
            .as_ref()
            .and_then(|l| l.location(seq))
            .map(rows::location_name)
            .unwrap_or(rows::LOCAL)
    };
    let where_before = outbox.staged_where()?;
    let mut where_now = where_before.clone();
    where_now.retain(|seq, _| entries.iter().any(|e| e.seq == *seq));
    let mut out = Staged::default();
    let published_ns = capsule_store::now_ns();
    // The store as a reader with the tier sees it: the indexes it fetches are kept in the
    // store (or, when it cannot be written, where `index_dir_of` finds them).
    let fetcher = node.tier.map(|t| store.clone().with_tier(Some(t.clone())));
    let mut fetches = 0;
    for e in entries.iter().filter(|e| e.state == SegmentState::Sealed) {
        let location = location_of(e.seq);
        let want = [
            !staged[0].contains(&(e.seq, e.bytes)),
            !staged[1].contains(&(e.seq, e.bytes)),
        ];
        // A segment staged before whose location changed since (uploaded, then trimmed):
        // its ledger row again, alone, with the new location.
        let moved = !want[0]
            && where_now
                .get(&e.seq)
                .map(String::as_str)
                .unwrap_or(rows::LOCAL)
                != location;
        if want == [false, false] && !moved {
            continue;
        }
        let trimmed = ledger.as_ref().and_then(|l| {
            l.trimmed
                .contains(&e.seq)
                .then(|| l.tiered.get(&e.seq))
                .flatten()
        });
        if let (Some(f), Some(t)) = (&fetcher, trimmed) {
            let missing = !store.index_dir_of(e.seq).join(index_name(e.seq)).exists();
            if missing && fetches < INDEX_FETCHES_PER_PASS {
                fetches += 1;
                f.fetch_missing_index(e.seq, &t.etag);
            }
        }
        let path = store.index_dir_of(e.seq).join(index_name(e.seq));
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                out.unindexed.push(e.seq);
                continue;
            }
            Err(err) => return Err(crate::io("read index", &path)(err)),
        };
        let origin = Origin {
            node: node.name.to_string(),
            segment: e.seq,
            segment_len: e.bytes,
            published_ns,
            kept: Default::default(),
        };
        let mut tables: [(u64, Vec<u8>); 6] = Default::default();
        let mut ledger_row = None;
        if want[0] || moved {
            let Some(t) = flow_tables(&bytes, e, &origin, node, location) else {
                out.unindexed.push(e.seq);
                continue;
            };
            let [flows, minutes, ledger] = t;
            if want[0] {
                tables[0] = flows;
                tables[1] = minutes;
                tables[LEDGER] = ledger;
            } else {
                ledger_row = Some(ledger);
            }
        }
        if want[1] {
            let current = SegmentIndex::peek(&bytes)
                .filter(|h| h.seq == e.seq && h.segment_len == e.bytes)
                .map(|h| h.span);
            let series = SegmentIndex::decode_series(&bytes).ok();
            let (Some(span), Some(series)) = (current, series) else {
                out.unindexed.push(e.seq);
                continue;
            };
            let [bins, fanins, ledger] =
                crate::series::rows(&origin, span, series.series.as_deref());
            tables[2] = bins;
            tables[3] = fanins;
            tables[4] = ledger;
        }
        if want != [false, false] {
            outbox.put(&Batch {
                segment: e.seq,
                segment_len: e.bytes,
                tables,
            })?;
        }
        if let Some(row) = ledger_row {
            let mut tables: [(u64, Vec<u8>); 6] = Default::default();
            tables[LEDGER] = row;
            outbox.put_location(&Batch {
                segment: e.seq,
                segment_len: e.bytes,
                tables,
            })?;
        }
        for (i, w) in want.iter().enumerate() {
            if *w {
                staged[i].insert((e.seq, e.bytes));
            }
        }
        if want[0] || moved {
            where_now.insert(e.seq, location.to_string());
        }
        out.staged.push(e.seq);
    }
    for (i, l) in [List::Flows, List::Series].into_iter().enumerate() {
        if staged[i] != before[i] {
            outbox.set_staged_in(l, &staged[i])?;
        }
    }
    if where_now != where_before {
        outbox.set_staged_where(&where_now)?;
    }
    Ok(out)
}

/// A segment's flow rows, rollups and ledger row from its index's bytes (`None`: the index
/// is not current or does not decode).
fn flow_tables(
    bytes: &[u8],
    e: &capsule_store::SegmentEntry,
    origin: &Origin,
    node: &Node,
    location: &str,
) -> Option<[(u64, Vec<u8>); 3]> {
    let group_of = |ip| {
        node.config
            .and_then(|c| capsule_analytics::Policy::group_of(c, ip))
            .unwrap_or_default()
    };
    let index = match SegmentIndex::decode_counts(bytes, None) {
        Ok(i) if i.seq == e.seq && i.segment_len == e.bytes => i,
        _ => return None,
    };
    // What this index kept of its flows' attributes, said in each of its rows.
    let origin = &Origin {
        kept: rows::Kept {
            names: index.named,
            tunnels: index.tunnels,
        },
        ..origin.clone()
    };
    let mut flows = Writer::default();
    for f in &index.flows {
        rows::put_flow(&mut flows, origin, f);
    }
    let mut minutes = Writer::default();
    let m = rows::minutes(&index.flows, &group_of);
    for row in &m {
        rows::put_minute(&mut minutes, origin, row);
    }
    let t = |f: fn(&capsule_index::sideindex::FlowTotals) -> u64| {
        index.flows.iter().map(|x| f(&x.totals)).sum::<u64>()
    };
    let seg = SegmentRow {
        node: origin.node.clone(),
        segment: e.seq,
        segment_len: e.bytes,
        published_ns: origin.published_ns,
        first_ns: index
            .flows
            .iter()
            .map(|f| f.totals.first_ns)
            .min()
            .unwrap_or(0),
        last_ns: index
            .flows
            .iter()
            .map(|f| f.totals.last_ns)
            .max()
            .unwrap_or(0),
        flows: index.flows.len() as u64,
        packets: t(|x| x.total_packets()),
        bytes: t(|x| x.total_bytes()),
        path: e.path.display().to_string(),
        location: location.to_string(),
    };
    let mut segs = Writer::default();
    rows::put_segment(&mut segs, &seg);
    Some([
        (index.flows.len() as u64, flows.buf),
        (m.len() as u64, minutes.buf),
        (1, segs.buf),
    ])
}

/// Pushes the outbox of the store at `dir` to `ch`, oldest first, each batch removed once
/// ClickHouse took it; then writes the node's registry row. Stops at the first failure
/// (what was not pushed stays in the outbox).
pub fn push(dir: &Path, node: &Node, ch: &ClickHouse) -> Result<Pushed, FleetError> {
    Schema::ensure(ch)?;
    let outbox = Outbox::of(dir);
    let mut out = Pushed::default();
    for path in outbox.pending()? {
        let batch = match outbox.read(&path) {
            Ok(b) => b,
            Err(FleetError::Decode { what, problem }) => {
                // Rebuilt from the index at the next staging.
                for l in [List::Flows, List::Series] {
                    let mut staged = outbox.staged_in(l)?;
                    staged.retain(|(s, _)| {
                        !path
                            .file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with(&format!("{s:020}.")))
                    });
                    outbox.set_staged_in(l, &staged)?;
                }
                outbox.done(&path)?;
                out.damaged.push(format!("{what}: {problem}"));
                continue;
            }
            Err(e) => return Err(e),
        };
        for (i, table) in TABLES.iter().enumerate() {
            let columns = rows::columns_of(table);
            ch.insert(&format!("{DATABASE}.{table}"), &columns, &batch.tables[i].1)?;
            out.rows[i] += batch.tables[i].0;
        }
        outbox.done(&path)?;
        out.batches += 1;
    }
    register(dir, node, ch)?;
    Ok(out)
}

/// Writes the node's registry row: last seen now, and its outbox backlog.
pub fn register(dir: &Path, node: &Node, ch: &ClickHouse) -> Result<(), FleetError> {
    let outbox = Outbox::of(dir);
    let row = NodeRow {
        node: node.name.to_string(),
        advertise: node.advertise.unwrap_or("").to_string(),
        version: node.version.to_string(),
        last_seen_ns: capsule_store::now_ns(),
        backlog: outbox.pending()?.len() as u64,
        published_segments: outbox.staged()?.len() as u64,
    };
    let mut w = Writer::default();
    rows::put_node(&mut w, &row);
    ch.insert(
        &format!("{DATABASE}.nodes"),
        &rows::columns_of("nodes"),
        &w.buf,
    )
}

/// Stages, then pushes: what `capsule fleet publish` and a capture's publisher do. The
/// staging's report, and the push's or why it failed (the outbox keeps the rest).
pub fn publish(
    dir: &Path,
    node: &Node,
    ch: &ClickHouse,
) -> Result<(Staged, Result<Pushed, FleetError>), FleetError> {
    let _lock = lock(dir)?;
    let staged = stage(dir, node)?;
    Ok((staged, push(dir, node, ch)))
}

/// An exclusive lock on the store's publishing (`STORE/fleet/publish.lock`), held until the
/// file is dropped: a capture and a `serve` beside it both publish the store, one at a time.
pub fn lock(dir: &Path) -> Result<std::fs::File, FleetError> {
    let d = dir.join("fleet");
    std::fs::create_dir_all(&d).map_err(crate::io("create", &d))?;
    let p = d.join("publish.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .map_err(crate::io("open", &p))?;
    f.lock().map_err(crate::io("lock", &p))?;
    Ok(f)
}

/// Batches waiting in the outbox of the store at `dir`.
pub fn backlog(dir: &Path) -> Result<usize, FleetError> {
    Ok(Outbox::of(dir).pending()?.len())
}
