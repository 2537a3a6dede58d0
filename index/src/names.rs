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
//! name. [`DnsNames`] is that map as a value: flow listings carry it (every flow of the
//! window gives its answers, whatever the filter), so the analytics name a destination
//! whose own flow names nothing.

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

/// Names kept per address in a [`DnsNames`] map (a CDN address answers for many names).
pub const MAX_NAMES_PER_ADDR: usize = 4;

/// The per-window address -> name map: every address a DNS answer in the window gave (the
/// answers the index keeps per flow), with the names that were asked for it, first seen
/// first. What names a destination that carries no name of its own (no TLS server name, no
/// HTTP host), and what an egress allow-list by name is checked against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsNames {
    by_addr: std::collections::HashMap<std::net::IpAddr, Vec<String>>,
}

impl DnsNames {
    /// Adds that a DNS answer gave `addr` for `name` (a name already kept for it, or one
    /// past [`MAX_NAMES_PER_ADDR`], is not added).
    pub fn add(&mut self, addr: std::net::IpAddr, name: &str) {
        let names = self.by_addr.entry(addr).or_default();
        let name = name.trim_end_matches('.');
        if names.len() < MAX_NAMES_PER_ADDR && !names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            names.push(name.to_string());
        }
    }

    /// Adds the answers of one flow's names.
    pub fn add_flow(&mut self, n: &capsule_names::FlowNames) {
        for (name, addr) in &n.dns_answers {
            self.add(*addr, name);
        }
    }

    /// The names DNS answers gave `addr` for, first seen first (none: empty).
    pub fn of(&self, addr: std::net::IpAddr) -> &[String] {
        self.by_addr.get(&addr).map_or(&[], Vec::as_slice)
    }

    /// Adds every answer of `other` (after this map's own, for each address).
    pub fn absorb(&mut self, other: &DnsNames) {
        for (addr, names) in &other.by_addr {
            for n in names {
                self.add(*addr, n);
            }
        }
    }

    /// Every address named, with its names first seen first (in no order of addresses).
    pub fn entries(&self) -> impl Iterator<Item = (&std::net::IpAddr, &Vec<String>)> {
        self.by_addr.iter()
    }

    /// No address named.
    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }

    /// Addresses named.
    pub fn len(&self) -> usize {
        self.by_addr.len()
    }
}
