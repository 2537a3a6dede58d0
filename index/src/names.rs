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

use capsule_query::{Filter, NamedFlow};

use crate::sideindex::FlowKey;

/// `filter` with its name terms resolved over `flows` (the window's flows as listed from the
/// index: their keys and names). The listing itself is `flows::resolve`'s.
pub fn resolve_over<'a>(
    filter: &Filter,
    flows: impl Iterator<Item = (&'a FlowKey, Option<&'a capsule_names::FlowNames>)>,
) -> Filter {
    let named: Vec<NamedFlow<'_>> = flows
        .filter_map(|(k, n)| {
            Some(NamedFlow {
                proto: k.proto,
                a: k.a,
                b: k.b,
                ports: k.ports,
                names: n?,
            })
        })
        .collect();
    filter.resolve_names(&named)
}
