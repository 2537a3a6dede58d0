//! `capsule matrix`: traffic from group to group (an `unassigned` row and column for hosts in
//! no group), each cell's bytes, packets and flows, and the cells the egress policy does not
//! allow flagged with their flows.
//!
//! Bytes and packets are counted in the cell of the direction that carried them (sender's
//! group to receiver's group). A flow is counted once, in the cell of its opening direction:
//! the one that sent the SYN, else the one that sent more packets (then direction a -> b);
//! so the cells sum to the window's flow, byte and packet totals.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::names::EndName;
use crate::top::flow_label;
use crate::{rfc, side_filter, Export, Input, Policy};

/// What the table shows in its cells (JSON carries all three).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    Bytes,
    Packets,
    Flows,
}

/// The row and column of hosts in no group.
pub const UNASSIGNED: &str = "unassigned";

/// A flow direction the egress policy does not allow.
#[derive(Debug, Clone, Serialize)]
pub struct Flagged {
    pub flow: String,
    pub src: String,
    pub dst: String,
    /// Who the destination is, if anything names it (names.rs).
    pub dst_name: Option<EndName>,
    /// The encapsulation the direction arrived in (absent: none).
    pub tunnel: Option<crate::tunnel::DirTunnel>,
    pub bytes: u64,
    pub packets: u64,
    pub first_ns: u64,
    pub first: String,
    pub last_ns: u64,
    pub last: String,
    pub query: Export,
}

/// One cell with traffic.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub src_group: String,
    pub dst_group: String,
    pub bytes: u64,
    pub packets: u64,
    pub flows: u64,
    /// Some traffic in the cell is not allowed by `[egress]`.
    pub flagged: bool,
    /// Those flow directions, largest first.
    pub flagged_flows: Vec<Flagged>,
}

/// Totals of the window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub bytes: u64,
    pub packets: u64,
    pub flows: u64,
}

/// The answer of `capsule matrix`.
#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    pub by: By,
    /// Rows and columns: the groups with traffic, in the file's order, then `unassigned`.
    pub groups: Vec<String>,
    /// Cells with traffic, by row then column.
    pub cells: Vec<Cell>,
    pub total: Totals,
}

/// The group-by-group matrix of the window.
pub fn matrix(input: &Input, policy: &dyn Policy, by: By) -> Matrix {
    let order: Vec<String> = policy.groups();
    let pos = |g: &str| order.iter().position(|x| x == g).unwrap_or(order.len());
    let mut cells: BTreeMap<(usize, usize), Cell> = BTreeMap::new();
    let mut total = Totals::default();
    for s in &input.flows {
        let f = &s.flow;
        use capsule_index::sideindex::SENT_SYN;
        let syn = |d: usize| f.totals.handshake[d] & SENT_SYN != 0;
        let opener = if syn(0) {
            0
        } else {
            usize::from(syn(1) || f.totals.packets[1] > f.totals.packets[0])
        };
        total.flows += 1;
        for d in 0..2 {
            if f.totals.packets[d] == 0 && d != opener {
                continue;
            }
            let (src, dst, _) = f.key.side(d);
            let gs = policy.group_of(src).unwrap_or_else(|| UNASSIGNED.into());
            let gd = policy.group_of(dst).unwrap_or_else(|| UNASSIGNED.into());
            let c = cells.entry((pos(&gs), pos(&gd))).or_insert_with(|| Cell {
                src_group: gs.clone(),
                dst_group: gd.clone(),
                bytes: 0,
                packets: 0,
                flows: 0,
                flagged: false,
                flagged_flows: Vec::new(),
            });
            c.bytes += f.totals.bytes[d];
            c.packets += f.totals.packets[d];
            total.bytes += f.totals.bytes[d];
            total.packets += f.totals.packets[d];
            if d == opener {
                c.flows += 1;
            }
            // Names are looked up only for what the groups and prefixes do not allow.
            if f.totals.packets[d] == 0 || policy.egress_allowed(src, dst, &[]) {
                continue;
            }
            let dst_name = input.dst_name(f, d);
            let names = dst_name.as_ref().map(EndName::names).unwrap_or_default();
            if !policy.egress_allowed(src, dst, &names) {
                c.flagged = true;
                c.flagged_flows.push(Flagged {
                    flow: flow_label(f),
                    src: src.to_string(),
                    dst: dst.to_string(),
                    dst_name,
                    tunnel: crate::tunnel::dir_tunnel(f, d),
                    bytes: f.totals.bytes[d],
                    packets: f.totals.packets[d],
                    first_ns: f.totals.first_ns,
                    first: rfc(f.totals.first_ns),
                    last_ns: f.totals.last_ns,
                    last: rfc(f.totals.last_ns),
                    query: input.export(f.totals.first_ns, f.totals.last_ns + 1, side_filter(f, d)),
                });
            }
        }
    }
    let mut used: Vec<usize> = cells.keys().flat_map(|&(a, b)| [a, b]).collect();
    used.sort_unstable();
    used.dedup();
    let groups = used
        .into_iter()
        .map(|i| order.get(i).cloned().unwrap_or_else(|| UNASSIGNED.into()))
        .collect();
    let cells = cells
        .into_values()
        .map(|mut c| {
            c.flagged_flows
                .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.flow.cmp(&b.flow)));
            c
        })
        .collect();
    Matrix {
        by,
        groups,
        cells,
        total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{flow, input, Groups};

    #[test]
    fn cells_sum_to_the_totals_and_forbidden_egress_is_flagged() {
        let i = input(
            vec![
                flow([10, 0, 0, 1], [10, 0, 0, 2], &[(0, 500), (1, 700)]),
                flow([10, 0, 0, 3], [192, 0, 2, 1], &[(0, 300)]),
                flow([192, 0, 2, 9], [10, 0, 0, 1], &[(1, 100)]),
            ],
            0,
            2_000_000_000,
        );
        let m = matrix(&i, &Groups, By::Bytes);
        assert_eq!(m.groups, vec!["g".to_string(), UNASSIGNED.to_string()]);
        assert_eq!((m.total.bytes, m.total.flows), (1600, 3));
        let cell = |a: &str, b: &str| {
            m.cells
                .iter()
                .find(|c| c.src_group == a && c.dst_group == b)
                .unwrap()
        };
        assert_eq!(cell("g", "g").bytes, 1200);
        assert!(!cell("g", "g").flagged);
        let out = cell("g", UNASSIGNED);
        assert!(out.flagged);
        assert_eq!(out.flagged_flows[0].dst, "192.0.2.1");
        assert!(out.flagged_flows[0]
            .query
            .filter
            .to_string()
            .contains("dst host 192.0.2.1"));
        assert!(
            !cell(UNASSIGNED, "g").flagged,
            "unassigned senders have no egress rule"
        );
        assert!(out.flagged_flows[0].dst_name.is_none());
        let sum: u64 = m.cells.iter().map(|c| c.flows).sum();
        assert_eq!(sum, 3);
    }

    #[test]
    fn a_destination_named_by_a_dns_answer_is_allowed_by_name_and_others_are_named() {
        use crate::tests::{dns, tls, with_dns};
        use std::net::IpAddr;
        // 10.0.0.3 asks 10.0.0.53 for files.allowed.example: 192.0.2.7. It then sends to
        // 192.0.2.7 (allowed by that name) and, over TLS, to 192.0.2.8 (named
        // models.example-hub.io by its ClientHello: not allowed).
        let me = [10, 0, 0, 3];
        let i = with_dns(input(
            vec![
                dns(
                    flow(me, [10, 0, 0, 53], &[(0, 100)]),
                    "files.allowed.example",
                    [192, 0, 2, 7],
                ),
                flow(me, [192, 0, 2, 7], &[(1, 5000)]),
                tls(
                    flow(me, [192, 0, 2, 8], &[(1, 3000)]),
                    me,
                    "models.example-hub.io",
                ),
            ],
            0,
            2_000_000_000,
        ));
        let m = matrix(&i, &Groups, By::Bytes);
        let out = m
            .cells
            .iter()
            .find(|c| c.src_group == "g" && c.dst_group == UNASSIGNED)
            .unwrap();
        assert_eq!(out.bytes, 8000);
        assert_eq!(out.flagged_flows.len(), 1, "{:?}", out.flagged_flows);
        let f = &out.flagged_flows[0];
        assert_eq!(f.dst, "192.0.2.8");
        let n = f.dst_name.as_ref().unwrap();
        assert_eq!(n.describe, "tls: models.example-hub.io");
        assert_eq!(
            (n.by, n.names()),
            (Some("sni"), vec!["models.example-hub.io"])
        );
        // The allowed one is named by the DNS answer only; the TLS flow's client end is not
        // named by the server's name.
        let to7 = &i.flows[1].flow;
        let d = usize::from(to7.key.a != IpAddr::from(me));
        let named = i.dst_name(to7, d).unwrap();
        assert_eq!(named.describe, "dns answer: files.allowed.example");
        assert_eq!(named.names(), vec!["files.allowed.example"]);
        let t = &i.flows[2].flow;
        let client_side = usize::from(t.key.a != IpAddr::from(me));
        assert!(i.end_name(t, client_side).is_none());
        assert_eq!(
            i.flow_name(to7).as_deref(),
            Some("dns answer: files.allowed.example")
        );
    }
}
