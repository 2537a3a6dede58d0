//! `capsule dscp`: every DSCP value seen in the window (EF and CS5 apart, every packet
//! counted, not a sample), the senders whose packets carry a value the policy does not allow
//! them (`violations`), and the flows whose marking changed mid-flow (`remarked`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use capsule_query::Direction::{Dst, Src};
use capsule_query::Filter;
use serde::Serialize;

use crate::names::EndName;
use crate::top::flow_label;
use crate::{dscp_filter, dscp_in_window, dscp_name, rfc, side_filter, Export, Input, Policy};

/// A sender of one value.
#[derive(Debug, Clone, Serialize)]
pub struct Sender {
    pub host: String,
    pub bytes: u64,
    pub packets: u64,
}

/// One DSCP value seen.
#[derive(Debug, Clone, Serialize)]
pub struct Value {
    pub dscp: u8,
    pub name: String,
    pub bytes: u64,
    pub packets: u64,
    /// Flow directions carrying it.
    pub flows: u64,
    /// The largest senders of the value, at most 5.
    pub top_senders: Vec<Sender>,
    pub query: Export,
}

/// A sender's packets to one destination carrying a value it may not send.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    pub src: String,
    pub src_group: Option<String>,
    pub dst: String,
    /// Who the destination is, if anything names it (names.rs).
    pub dst_name: Option<EndName>,
    /// The encapsulation the first of its flows' packets that carries one arrived in
    /// (tunnel.rs), when any did.
    pub tunnel: Option<crate::tunnel::DirTunnel>,
    pub dscp: u8,
    pub name: String,
    pub bytes: u64,
    pub packets: u64,
    /// First and last packet of the flows carrying it (either direction).
    pub first_ns: u64,
    pub first: String,
    pub last_ns: u64,
    pub last: String,
    pub mean_packet_size: f64,
    pub flows: u64,
    pub query: Export,
}

/// A flow direction whose DSCP changed mid-flow: the first change.
#[derive(Debug, Clone, Serialize)]
pub struct Remark {
    pub flow: String,
    pub src: String,
    pub dst: String,
    /// Who the destination is, if anything names it (names.rs).
    pub dst_name: Option<EndName>,
    /// The encapsulation that direction's packets arrived in (tunnel.rs), when they did.
    pub tunnel: Option<crate::tunnel::DirTunnel>,
    /// The packet carrying the new value: its ordinal in that direction (1-based, from the
    /// flow's first packet) and time.
    pub packet: u64,
    pub at_ns: u64,
    pub at: String,
    pub from_dscp: u8,
    pub from_name: String,
    pub to_dscp: u8,
    pub to_name: String,
    /// Exports that direction of the flow, the changed packet among them.
    pub query: Export,
}

/// The answer of `capsule dscp`.
#[derive(Debug, Clone, Serialize)]
pub struct Dscp {
    pub values: Vec<Value>,
    /// Absent without a policy (`--config`).
    pub violations: Option<Vec<Violation>>,
    pub remarked: Vec<Remark>,
}

#[derive(Default)]
struct ValueAcc {
    bytes: u64,
    packets: u64,
    flows: u64,
    senders: HashMap<IpAddr, (u64, u64)>,
}

#[derive(Default)]
struct ViolationAcc {
    bytes: u64,
    packets: u64,
    flows: u64,
    first: u64,
    last: u64,
    /// The destination as the first of its flows that names it names it.
    dst_name: Option<EndName>,
    /// The first of its flows' directions that arrived in an encapsulation's.
    tunnel: Option<crate::tunnel::DirTunnel>,
}

/// Audits the window's DSCP marks (against `policy` when given).
pub fn dscp(input: &Input, policy: Option<&dyn Policy>) -> Dscp {
    let mut values: BTreeMap<u8, ValueAcc> = BTreeMap::new();
    let mut violations: BTreeMap<(IpAddr, IpAddr, u8), ViolationAcc> = BTreeMap::new();
    let mut remarked = Vec::new();
    for s in &input.flows {
        let f = &s.flow;
        for d in 0..2 {
            let (src, dst, _) = f.key.side(d);
            for c in dscp_in_window(s, d).iter() {
                if c.packets == 0 {
                    continue;
                }
                let v = values.entry(c.dscp).or_default();
                v.bytes += c.bytes;
                v.packets += c.packets;
                v.flows += 1;
                let e = v.senders.entry(src).or_default();
                e.0 += c.bytes;
                e.1 += c.packets;
                if let Some(p) = policy {
                    if !p.dscp_allowed(c.dscp, src) {
                        let x = violations
                            .entry((src, dst, c.dscp))
                            .or_insert(ViolationAcc {
                                first: f.totals.first_ns,
                                last: f.totals.last_ns,
                                ..ViolationAcc::default()
                            });
                        x.bytes += c.bytes;
                        x.packets += c.packets;
                        x.flows += 1;
                        x.first = x.first.min(f.totals.first_ns);
                        x.last = x.last.max(f.totals.last_ns);
                        if x.tunnel.is_none() {
                            x.tunnel = crate::tunnel::dir_tunnel(f, d);
                        }
                        if x.dst_name.as_ref().is_none_or(|n| n.name.is_none()) {
                            if let Some(n) = input.dst_name(f, d) {
                                if x.dst_name.is_none() || n.name.is_some() {
                                    x.dst_name = Some(n);
                                }
                            }
                        }
                    }
                }
            }
            if let Some(ch) = f.totals.dscp_change[d] {
                if ch.ts_ns >= input.from_ns && ch.ts_ns < input.to_ns {
                    remarked.push(Remark {
                        flow: flow_label(f),
                        src: src.to_string(),
                        dst: dst.to_string(),
                        dst_name: input.dst_name(f, d),
                        tunnel: crate::tunnel::dir_tunnel(f, d),
                        packet: ch.ordinal,
                        at_ns: ch.ts_ns,
                        at: rfc(ch.ts_ns),
                        from_dscp: ch.from,
                        from_name: dscp_name(ch.from),
                        to_dscp: ch.to,
                        to_name: dscp_name(ch.to),
                        query: input.export(
                            f.totals.first_ns,
                            f.totals.last_ns + 1,
                            side_filter(f, d),
                        ),
                    });
                }
            }
        }
    }
    remarked.sort_by(|a, b| a.at_ns.cmp(&b.at_ns).then(a.flow.cmp(&b.flow)));
    let values = values
        .into_iter()
        .map(|(dscp, v)| {
            let mut senders: Vec<Sender> = v
                .senders
                .into_iter()
                .map(|(h, (bytes, packets))| Sender {
                    host: h.to_string(),
                    bytes,
                    packets,
                })
                .collect();
            senders.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.host.cmp(&b.host)));
            senders.truncate(5);
            Value {
                dscp,
                name: dscp_name(dscp),
                bytes: v.bytes,
                packets: v.packets,
                flows: v.flows,
                top_senders: senders,
                query: input.export(input.from_ns, input.to_ns, dscp_filter(dscp)),
            }
        })
        .collect();
    let violations = policy.map(|p| {
        let mut out: Vec<Violation> = violations
            .into_iter()
            .map(|((src, dst, dscp), v)| Violation {
                src: src.to_string(),
                src_group: p.group_of(src),
                dst: dst.to_string(),
                dst_name: v.dst_name,
                tunnel: v.tunnel,
                dscp,
                name: dscp_name(dscp),
                bytes: v.bytes,
                packets: v.packets,
                first_ns: v.first,
                first: rfc(v.first),
                last_ns: v.last,
                last: rfc(v.last),
                mean_packet_size: v.bytes as f64 / v.packets.max(1) as f64,
                flows: v.flows,
                query: input.export(
                    v.first,
                    v.last + 1,
                    Filter::host(Src, src)
                        .and(Filter::host(Dst, dst))
                        .and(dscp_filter(dscp)),
                ),
            })
            .collect();
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.src.cmp(&b.src)));
        out
    });
    Dscp {
        values,
        violations,
        remarked,
    }
}

/// Bytes per DSCP value per interval: (value, bytes per slot), values by total bytes.
pub fn over_time(input: &Input, interval_ns: u64) -> Vec<(u8, Vec<u64>)> {
    let n = (input.to_ns - input.from_ns).div_ceil(interval_ns).max(1) as usize;
    let mut per: std::collections::BTreeMap<u8, Vec<u64>> = Default::default();
    for s in &input.flows {
        let f = &s.flow;
        for d in 0..2 {
            let counts = crate::dscp_in_window(s, d);
            let total: u64 = counts.iter().map(|c| c.bytes).sum();
            if total == 0 {
                continue;
            }
            for b in f.buckets.iter().filter(|b| b.bytes[d] > 0) {
                let ns = b.second * 1_000_000_000;
                if ns < input.from_ns || ns >= input.to_ns.max(input.from_ns + 1) {
                    continue;
                }
                let slot = (((ns - input.from_ns) / interval_ns) as usize).min(n - 1);
                for c in counts.iter() {
                    let part =
                        (u128::from(b.bytes[d]) * u128::from(c.bytes) / u128::from(total)) as u64;
                    per.entry(c.dscp).or_insert_with(|| vec![0; n])[slot] += part;
                }
            }
        }
    }
    let mut v: Vec<(u8, Vec<u64>)> = per.into_iter().collect();
    v.sort_by_key(|(_, s)| std::cmp::Reverse(s.iter().sum::<u64>()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{flow, input, Groups};
    use capsule_index::sideindex::{DscpChange, DscpCount};

    #[test]
    fn values_violations_and_remarks() {
        let mut ef = flow([10, 0, 0, 2], [10, 0, 0, 9], &[(0, 1000), (1, 1000)]);
        let d = usize::from(ef.flow.key.a != IpAddr::from([10, 0, 0, 2]));
        ef.flow.totals.dscp_counts[d] = vec![
            DscpCount {
                dscp: 0,
                packets: 4,
                bytes: 400,
            },
            DscpCount {
                dscp: 46,
                packets: 16,
                bytes: 1600,
            },
        ];
        ef.flow.totals.dscp_change[d] = Some(DscpChange {
            ordinal: 5,
            ts_ns: 400_000_000,
            from: 0,
            to: 46,
        });
        let mut allowed = flow([10, 0, 0, 1], [10, 0, 0, 9], &[(0, 500)]);
        let d1 = usize::from(allowed.flow.key.a != IpAddr::from([10, 0, 0, 1]));
        allowed.flow.totals.dscp_counts[d1] = vec![DscpCount {
            dscp: 46,
            packets: 5,
            bytes: 500,
        }];
        let i = input(vec![ef, allowed], 0, 2_000_000_000);
        let a = dscp(&i, Some(&Groups));
        let v46 = a.values.iter().find(|v| v.dscp == 46).unwrap();
        assert_eq!((v46.bytes, v46.packets, v46.flows), (2100, 21, 2));
        assert_eq!(v46.name, "ef");
        let v = a.violations.unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].src.as_str(), v[0].bytes, v[0].dscp),
            ("10.0.0.2", 1600, 46)
        );
        assert_eq!(a.remarked.len(), 1);
        assert_eq!((a.remarked[0].packet, a.remarked[0].to_dscp), (5, 46));
        assert!(a.remarked[0].tunnel.is_none() && v[0].tunnel.is_none());
        // Without a policy: no violations list at all.
        assert!(dscp(&i, None).violations.is_none());
    }
}

#[cfg(test)]
mod tunnel_tests {
    use super::*;
    use crate::tests::{flow, input, Groups};
    use capsule_index::sideindex::{DscpChange, DscpCount, EncapDir, FlowEncap};
    use capsule_wire::EncapKind;

    /// A remark and a violation of a flow that arrived in a VXLAN tunnel name the tunnel,
    /// as the matrix's flagged flows and `top`'s rows do.
    #[test]
    fn remarks_and_violations_name_the_tunnel_their_packets_arrived_in() {
        let mut ef = flow([10, 0, 0, 2], [10, 0, 0, 9], &[(0, 1000), (1, 1000)]);
        let d = usize::from(ef.flow.key.a != IpAddr::from([10, 0, 0, 2]));
        ef.flow.totals.dscp_counts[d] = vec![DscpCount {
            dscp: 46,
            packets: 16,
            bytes: 1600,
        }];
        ef.flow.totals.dscp_change[d] = Some(DscpChange {
            ordinal: 5,
            ts_ns: 400_000_000,
            from: 0,
            to: 46,
        });
        let mut e = FlowEncap::default();
        e.dirs[d] = Some(EncapDir {
            kind: EncapKind::Vxlan,
            outer: Some(("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap())),
            id: Some(42),
            mpls: None,
            layers: 1,
            packets: ef.flow.totals.packets[d],
            mixed: false,
            outer_dscp: 1,
        });
        ef.flow.totals.encap = Some(Box::new(e));
        let i = input(vec![ef], 0, 2_000_000_000);
        let a = dscp(&i, Some(&Groups));
        let want = "vxlan vni 42 192.0.2.1>192.0.2.2";
        let r = &a.remarked[0];
        assert_eq!(r.tunnel.as_ref().map(|t| t.describe.as_str()), Some(want));
        let v = a.violations.unwrap();
        assert_eq!(
            v[0].tunnel.as_ref().map(|t| t.describe.as_str()),
            Some(want)
        );
    }
}
