//! Name terms of a filter (`sni`, `dns`, `http.host`, `app`) resolved from the side index's
//! names tables, before a query is planned or its flows are listed: a name lookup never
//! reads a packet.
//!
//! ```text
//! query with a name term -> the window's flows, from the index (filter: all)
//!   -> the flows that have names (capsule-names, index version 6)
//!   -> Filter::resolve_names: sni / http.host / app -> those flows' exact 5-tuples,
//!      dns NAME -> `host A` for every address A a DNS answer in the window gave for NAME
//!   -> the query with the resolved filter: planned, listed and matched per packet as any other
//! ```
//!
//! The per-window address -> name map is this: a flow is named by a DNS answer anywhere in
//! the query's window, so an address seen after the answer that produced it is found by the
//! name.

use capsule_query::{Filter, NamedFlow, Query};
use capsule_store::{Result, SegmentReader, Store};

use crate::flows;

/// `q` with its name terms resolved over the flows of its window in `segments` (the index
/// alone); `q` itself when it has none.
pub fn resolve(store: &Store, segments: &[SegmentReader], q: &Query) -> Result<Query> {
    if !q.filter.has_names() {
        return Ok(q.clone());
    }
    let all = Query {
        filter: Filter::all(),
        ..q.clone()
    };
    let listing = flows::list(store, segments, &all)?;
    Ok(Query {
        filter: resolve_over(&q.filter, &listing),
        ..q.clone()
    })
}

/// [`resolve`] from the index alone (no segment opened), as [`flows::list_index_only`].
pub fn resolve_index_only(store: &Store, q: &Query) -> Result<Query> {
    if !q.filter.has_names() {
        return Ok(q.clone());
    }
    let all = Query {
        filter: Filter::all(),
        ..q.clone()
    };
    let listing = flows::list_index_only(store, &all, false)?;
    Ok(Query {
        filter: resolve_over(&q.filter, &listing),
        ..q.clone()
    })
}

fn resolve_over(filter: &Filter, listing: &flows::FlowListing) -> Filter {
    let named: Vec<NamedFlow<'_>> = listing
        .flows
        .iter()
        .filter_map(|s| {
            let f = &s.flow;
            Some(NamedFlow {
                proto: f.key.proto,
                a: f.key.a,
                b: f.key.b,
                ports: f.key.ports,
                names: f.totals.names.as_deref()?,
            })
        })
        .collect();
    filter.resolve_names(&named)
}
