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
/// answers the index keeps per flow), with the names that were asked for it: the first
/// [`MAX_NAMES_PER_ADDR`] in name order (ASCII case ignored; of one name's spellings, the
/// first in byte order). What names a destination that carries no name of its own (no TLS
/// server name, no HTTP host), and what an egress allow-list by name is checked against.
///
/// The names kept do not depend on the order the answers are added in: a store merges its
/// segments in time order, a fleet its nodes' rows in node order, a rollup slice its
/// members' maps, and each must name an address alike (before, the first names seen were
/// kept, and a fleet's `top` could name an address other than its nodes' store did).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsNames {
    by_addr: std::collections::HashMap<std::net::IpAddr, Vec<String>>,
}

/// `a` against `b` in name order: bytes compared with ASCII case ignored.
fn name_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (a.bytes(), b.bytes());
    a.map(|c| c.to_ascii_lowercase())
        .cmp(b.map(|c| c.to_ascii_lowercase()))
}

impl DnsNames {
    /// Adds that a DNS answer gave `addr` for `name` (a name after the first
    /// [`MAX_NAMES_PER_ADDR`] of the address's in name order is not kept).
    pub fn add(&mut self, addr: std::net::IpAddr, name: &str) {
        let names = self.by_addr.entry(addr).or_default();
        let name = name.trim_end_matches('.');
        match names.binary_search_by(|n| name_order(n, name)) {
            // One name spelled otherwise: the spelling first in byte order stands for it.
            Ok(at) => {
                if name < names[at].as_str() {
                    names[at] = name.to_string();
                }
            }
            Err(at) if at < MAX_NAMES_PER_ADDR => {
                names.insert(at, name.to_string());
                names.truncate(MAX_NAMES_PER_ADDR);
            }
            Err(_) => {}
        }
    }

    /// Adds the answers of one flow's names.
    pub fn add_flow(&mut self, n: &capsule_names::FlowNames) {
        for (name, addr) in &n.dns_answers {
            self.add(*addr, name);
        }
    }

    /// The names DNS answers gave `addr` for, in name order (none: empty).
    pub fn of(&self, addr: std::net::IpAddr) -> &[String] {
        self.by_addr.get(&addr).map_or(&[], Vec::as_slice)
    }

    /// Adds every answer of `other`.
    pub fn absorb(&mut self, other: &DnsNames) {
        for (addr, names) in &other.by_addr {
            for n in names {
                self.add(*addr, n);
            }
        }
    }

    /// Every address named, with its names in name order (in no order of addresses).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// However the answers come (a store's segments in time order, a fleet's rows in node
    /// order, maps merged), an address keeps the same names: the first four in name order,
    /// each name in one spelling.
    #[test]
    fn the_names_kept_do_not_depend_on_the_order_answers_come_in() {
        let addr: std::net::IpAddr = "192.0.2.7".parse().unwrap();
        let answers = [
            "git.corp.example",
            "chat.example.com.",
            "Chat.Example.com",
            "zeta.example",
            "b.example",
            "a.example",
            "CDN.example",
        ];
        let want = ["a.example", "b.example", "CDN.example", "Chat.Example.com"];
        // Every rotation, forwards and backwards, added one by one and as two merged maps.
        for turn in 0..answers.len() {
            for back in [false, true] {
                let mut order: Vec<&str> = answers.to_vec();
                order.rotate_left(turn);
                if back {
                    order.reverse();
                }
                let mut one = DnsNames::default();
                for n in &order {
                    one.add(addr, n);
                }
                assert_eq!(one.of(addr), want, "added in the order {order:?}");
                let (mut first, mut second) = (DnsNames::default(), DnsNames::default());
                for (i, n) in order.iter().enumerate() {
                    if i % 2 == 0 { &mut first } else { &mut second }.add(addr, n);
                }
                second.absorb(&first);
                assert_eq!(second, one, "merged, in the order {order:?}");
            }
        }
    }
}
