//! The flow records of a window, from the side index: `capsule flows` and `GET /v1/flows`.

use capsule_index::flows::{FlowListing, FlowSummary};
use capsule_query::Query;
use capsule_store::{SegmentReader, Store, Unreadable};
use serde::{Deserialize, Serialize};

use crate::{AnswerError, Source};

/// The order flows are listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sort {
    /// Most bytes first.
    #[default]
    Bytes,
    /// Most packets first.
    Packets,
    /// Earliest first packet first.
    First,
    /// Longest (last packet minus first) first.
    Duration,
    /// Most retransmissions (both directions) first.
    Retransmissions,
}

impl Sort {
    /// The name the CLI and the API give it.
    pub fn name(self) -> &'static str {
        match self {
            Sort::Bytes => "bytes",
            Sort::Packets => "packets",
            Sort::First => "first",
            Sort::Duration => "duration",
            Sort::Retransmissions => "retransmissions",
        }
    }

    /// The order of a name.
    pub fn by_name(name: &str) -> Option<Sort> {
        [
            Sort::Bytes,
            Sort::Packets,
            Sort::First,
            Sort::Duration,
            Sort::Retransmissions,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }
}

/// Which flows, in which order, how many (`None`: all).
#[derive(Debug, Clone)]
pub struct Request {
    pub query: Query,
    pub sort: Sort,
    pub limit: Option<usize>,
}

/// The flows of a window, and what the listing misses.
#[derive(Debug)]
pub struct Answer {
    /// The listing in the request's order, cut to its limit.
    pub listing: FlowListing,
    /// Segments that could not be read at all.
    pub unreadable: Vec<Unreadable>,
    /// Why the answer misses flows, if it does ([`missing`]); empty: it is whole.
    pub missing: Vec<String>,
    /// The open segments the listing read, for notes about the store's span.
    pub segments: Vec<SegmentReader>,
}

/// `{"flows": [...], "missing": [...]}`: each flow as its JSON line ([`json_line`]).
impl Serialize for Answer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let flows: Vec<serde_json::Value> = self.listing.flows.iter().map(json_line).collect();
        serde_json::json!({ "flows": flows, "missing": self.missing }).serialize(s)
    }
}

/// Lists the flows `req` asks for from `source`'s side index.
pub fn answer(source: &Source, req: &Request) -> Result<Answer, AnswerError> {
    let store_err = |e| AnswerError::Store {
        store: source.store.display().to_string(),
        source: e,
    };
    let store = source.open().map_err(store_err)?;
    let (segments, mut unreadable) = store.open_segments_checked().map_err(store_err)?;
    // A segment a repair left short: its lost packets are missing from its flows too.
    unreadable.extend(store.short_segments(&segments).map_err(store_err)?);
    // What [tier] max_age removed, when the window gives its start before it.
    let to = req.query.window().1;
    unreadable.extend(store.expired_in(req.query.from_ns, to).map_err(store_err)?);
    let mut listing = list(&store, &segments, &req.query, req.sort).map_err(store_err)?;
    let missing = missing(&listing, &unreadable, &req.query);
    if let Some(n) = req.limit {
        listing.flows.truncate(n);
    }
    Ok(Answer {
        listing,
        unreadable,
        missing,
        segments,
    })
}

/// Why a flow listing misses flows of `q`'s window, if it does: segments without an index,
/// with a damaged one, or unreadable (where the window reaches them), damaged journal
/// records. Such an answer is partial (exit 3, `capsule-partial` over HTTP).
pub fn missing(listing: &FlowListing, unreadable: &[Unreadable], q: &Query) -> Vec<String> {
    let mut why = Vec::new();
    if !listing.unindexed.is_empty() {
        why.push(format!(
            "segment(s) {:?} have no side index",
            listing.unindexed
        ));
    }
    for (seq, _) in &listing.damaged_index {
        why.push(format!("the index of segment {seq} is damaged"));
    }
    for (seq, _) in &listing.journal_notes {
        why.push(format!("damaged index journal records of segment {seq}"));
    }
    let (from, to) = q.window();
    for u in unreadable.iter().filter(|u| u.reaches(from, to)) {
        why.push(format!("segment {} cannot be read", u.seq));
    }
    if !listing.names_unseen.is_empty() {
        why.push(format!(
            "segment(s) {:?} have no names in their index: the filter's name terms cannot \
             select their flows",
            listing.names_unseen
        ));
    }
    why
}

/// The flows of `q`'s window in `segments`, in `sort` order.
fn list(
    store: &Store,
    segments: &[SegmentReader],
    q: &Query,
    sort: Sort,
) -> capsule_store::Result<FlowListing> {
    let mut listing = capsule_index::flows::list(store, segments, q)?;
    match sort {
        Sort::Bytes => {}
        Sort::Packets => listing
            .flows
            .sort_by_key(|f| std::cmp::Reverse(f.flow.totals.total_packets())),
        Sort::First => listing.flows.sort_by_key(|f| f.flow.totals.first_ns),
        Sort::Duration => listing.flows.sort_by_key(|f| {
            let t = &f.flow.totals;
            std::cmp::Reverse(t.last_ns.saturating_sub(t.first_ns))
        }),
        Sort::Retransmissions => listing.flows.sort_by_key(|f| {
            let r = f.flow.totals.retransmissions;
            std::cmp::Reverse(r[0] + r[1])
        }),
    }
    Ok(listing)
}

/// One flow as the JSON object of `capsule flows --json` (one line each; also
/// `GET /v1/flows` of `capsule serve`).
pub fn json_line(s: &FlowSummary) -> serde_json::Value {
    let f = &s.flow;
    let k = &f.key;
    serde_json::json!({
        "vlans": k.vlans.iter().flatten().collect::<Vec<_>>(),
        "ip_version": k.ip_version, "proto": k.proto,
        "proto_name": capsule_wire::IpProto::from(k.proto).name(),
        "a": k.a.to_string(), "a_port": k.ports.map(|p| p.0),
        "b": k.b.to_string(), "b_port": k.ports.map(|p| p.1),
        "client": client_side(f).map(|d| if d == 0 { "a" } else { "b" }),
        "first_ns": f.totals.first_ns, "first": capsule_query::format_instant(f.totals.first_ns),
        "last_ns": f.totals.last_ns, "last": capsule_query::format_instant(f.totals.last_ns),
        "packets": f.totals.packets, "bytes": f.totals.bytes,
        "dscp": [(0..64).filter(|d| f.totals.dscp[0] & (1u64 << d) != 0).collect::<Vec<u8>>(),
                 (0..64).filter(|d| f.totals.dscp[1] & (1u64 << d) != 0).collect::<Vec<u8>>()],
        "tcp_flags": f.totals.tcp_flags, "retransmissions": f.totals.retransmissions,
        // What of a TCP handshake each direction sent (bit 0 SYN, bit 1 SYN-ACK): with the
        // names, what `client` is judged from, so a remote table judges as the local one.
        "handshake": f.totals.handshake,
        "zero_windows": f.totals.zero_windows, "resets": f.totals.resets, "approximate": s.approximate,
        // What the cut-off stored of a cut flow (packets and bytes above count what was
        // seen); null for a flow stored whole.
        "cut": f.totals.is_cut().then(|| serde_json::json!({
            "stored_packets": [f.totals.packets[0] - f.totals.cut_packets[0], f.totals.packets[1] - f.totals.cut_packets[1]],
            "stored_bytes": [f.totals.bytes[0] - f.totals.cut_bytes[0], f.totals.bytes[1] - f.totals.cut_bytes[1]],
            "cut_packets": f.totals.cut_packets, "cut_bytes": f.totals.cut_bytes,
            "cut_at_ns": f.totals.cut_at_ns,
            "cut_at": f.totals.cut_at().map(capsule_query::format_instant),
        })),
        // The application and names read from the flow's payload (null when none).
        "names": f.totals.names.as_deref().map(names_json),
        // The encapsulation each direction's packets arrived in ([a -> b, b -> a], each null
        // when none did; the whole field null when no packet was encapsulated).
        "encap": f.totals.encap.as_deref().map(|e| encap_json(e, f.totals.packets)),
    })
}

/// A flow's encapsulations as JSON (`encap` of a flow line): per direction, its kind, outer
/// endpoints, identifier, top MPLS label, layers, packets that arrived encapsulated,
/// whether some arrived in another encapsulation (`mixed`) and whether all arrived in this
/// one (`whole`), the outer DSCP values; and the text the table shows.
pub fn encap_json(e: &capsule_index::sideindex::FlowEncap, packets: [u64; 2]) -> serde_json::Value {
    let dir = |d: &Option<capsule_index::sideindex::EncapDir>, n: u64| {
        d.map(|d| {
            serde_json::json!({
                "kind": d.kind.name(),
                "outer_src": d.outer.map(|o| o.0.to_string()),
                "outer_dst": d.outer.map(|o| o.1.to_string()),
                "id": d.id, "mpls": d.mpls, "layers": d.layers,
                "packets": d.packets, "mixed": d.mixed, "whole": d.is_whole(n),
                "outer_dscp": (0..64u8).filter(|v| d.outer_dscp & (1u64 << v) != 0).collect::<Vec<_>>(),
            })
        })
    };
    serde_json::json!({
        "dirs": [dir(&e.dirs[0], packets[0]), dir(&e.dirs[1], packets[1])],
        "describe": e.describe(packets),
    })
}

/// [`encap_json`] read back (`None` for anything else).
fn encap_from_json(v: &serde_json::Value) -> Option<capsule_index::sideindex::FlowEncap> {
    let dir = |d: &serde_json::Value| -> Option<Option<capsule_index::sideindex::EncapDir>> {
        if d.is_null() {
            return Some(None);
        }
        let addr = |k: &str| d.get(k)?.as_str()?.parse::<std::net::IpAddr>().ok();
        let u32_of = |k: &str| d.get(k)?.as_u64().and_then(|x| u32::try_from(x).ok());
        let kind = d.get("kind")?.as_str()?;
        Some(Some(capsule_index::sideindex::EncapDir {
            kind: capsule_wire::EncapKind::ALL
                .into_iter()
                .find(|k| k.name() == kind)?,
            outer: addr("outer_src").zip(addr("outer_dst")),
            id: u32_of("id"),
            mpls: u32_of("mpls"),
            layers: d
                .get("layers")?
                .as_u64()
                .and_then(|x| u8::try_from(x).ok())?,
            packets: d.get("packets")?.as_u64()?,
            mixed: d.get("mixed")?.as_bool()?,
            outer_dscp: d
                .get("outer_dscp")?
                .as_array()?
                .iter()
                .filter_map(|x| x.as_u64().filter(|x| *x < 64))
                .fold(0u64, |m, x| m | 1 << x),
        }))
    };
    let dirs = v.get("dirs")?.as_array()?;
    Some(capsule_index::sideindex::FlowEncap {
        dirs: [dir(dirs.first()?)?, dir(dirs.get(1)?)?],
    })
}

/// A flow's application and names as JSON (`names` of a flow line).
pub fn names_json(n: &capsule_names::FlowNames) -> serde_json::Value {
    serde_json::json!({
        "app": n.app.as_str(),
        "describe": n.describe(),
        "sni": n.sni, "alpn": n.alpn, "ja4": n.ja4,
        "http_host": n.http_host, "http_method": n.http_method,
        "ssh": n.ssh,
        "dns_queries": n.dns_queries,
        "dns_answers": n.dns_answers.iter().map(|(q, a)| serde_json::json!({"name": q, "addr": a.to_string()})).collect::<Vec<_>>(),
        // The side that sent the first payload (`a` or `b`; null: unknown).
        "client": n.client.map(|c| if c == 0 { "a" } else { "b" }),
    })
}

/// [`names_json`] read back.
fn names_from_json(v: &serde_json::Value) -> Option<capsule_names::FlowNames> {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
    let list = |k: &str| -> Vec<String> {
        v.get(k)
            .and_then(|x| x.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let ssh = v.get("ssh").and_then(|x| x.as_array());
    let ssh_at = |i: usize| {
        ssh.and_then(|a| a.get(i))
            .and_then(|x| x.as_str())
            .map(String::from)
    };
    Some(capsule_names::FlowNames {
        app: capsule_names::App::parse(v.get("app")?.as_str()?)?,
        sni: s("sni"),
        alpn: list("alpn"),
        ja4: s("ja4"),
        http_host: s("http_host"),
        http_method: s("http_method"),
        ssh: [ssh_at(0), ssh_at(1)],
        client: match v.get("client").and_then(|x| x.as_str()) {
            Some("a") => Some(0),
            Some("b") => Some(1),
            _ => None,
        },
        dns_queries: list("dns_queries"),
        dns_answers: v
            .get("dns_answers")
            .and_then(|x| x.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|e| {
                        Some((
                            e.get("name")?.as_str()?.to_string(),
                            e.get("addr")?.as_str()?.parse().ok()?,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// One line of `capsule flows --json` (`GET /v1/flows`) read back: what the table shows of
/// the flow (its key, totals and cut; not the counts the line leaves out, such as buckets).
pub fn from_json_line(line: &str) -> Result<FlowSummary, String> {
    #[derive(Deserialize)]
    struct Cut {
        cut_packets: [u64; 2],
        cut_bytes: [u64; 2],
        cut_at_ns: [Option<u64>; 2],
    }
    #[derive(Deserialize)]
    struct Line {
        vlans: Vec<u16>,
        ip_version: u8,
        proto: u8,
        a: std::net::IpAddr,
        a_port: Option<u16>,
        b: std::net::IpAddr,
        b_port: Option<u16>,
        first_ns: u64,
        last_ns: u64,
        packets: [u64; 2],
        bytes: [u64; 2],
        dscp: [Vec<u8>; 2],
        tcp_flags: [u8; 2],
        retransmissions: [u64; 2],
        zero_windows: [u64; 2],
        resets: [u64; 2],
        approximate: bool,
        cut: Option<Cut>,
        #[serde(default)]
        handshake: [u8; 2],
        #[serde(default)]
        names: Option<serde_json::Value>,
        #[serde(default)]
        encap: Option<serde_json::Value>,
    }
    let l: Line = serde_json::from_str(line).map_err(|e| format!("not a flow line: {e}"))?;
    if l.vlans.len() > 2 || l.dscp.iter().flatten().any(|d| *d > 63) {
        return Err("not a flow line: more than 2 VLANs or a DSCP above 63".into());
    }
    let key = capsule_index::sideindex::FlowKey {
        vlans: [l.vlans.first().copied(), l.vlans.get(1).copied()],
        ip_version: l.ip_version,
        proto: l.proto,
        a: l.a,
        b: l.b,
        ports: l.a_port.zip(l.b_port),
    };
    let mut flow = capsule_index::sideindex::FlowCounts::new(key, l.first_ns, l.last_ns);
    let t = &mut flow.totals;
    t.packets = l.packets;
    t.bytes = l.bytes;
    t.dscp = l.dscp.map(|ds| ds.iter().fold(0u64, |m, d| m | 1 << d));
    t.tcp_flags = l.tcp_flags;
    t.retransmissions = l.retransmissions;
    t.zero_windows = l.zero_windows;
    t.resets = l.resets;
    t.handshake = l.handshake;
    t.names = l.names.as_ref().and_then(names_from_json).map(Box::new);
    t.encap = l.encap.as_ref().and_then(encap_from_json).map(Box::new);
    if let Some(c) = l.cut {
        t.cut_packets = c.cut_packets;
        t.cut_bytes = c.cut_bytes;
        t.cut_at_ns = c.cut_at_ns;
    }
    Ok(FlowSummary {
        flow,
        approximate: l.approximate,
    })
}

pub use capsule_index::flows::client_side;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sort_has_a_name_that_reads_back() {
        for s in [
            Sort::Bytes,
            Sort::Packets,
            Sort::First,
            Sort::Duration,
            Sort::Retransmissions,
        ] {
            assert_eq!(Sort::by_name(s.name()), Some(s));
        }
        assert_eq!(Sort::by_name("size"), None);
    }

    #[test]
    fn a_json_line_reads_back_into_the_same_line() {
        let key = capsule_index::sideindex::FlowKey {
            vlans: [Some(10), None],
            ip_version: 6,
            proto: 6,
            a: "2001:db8::1".parse().unwrap(),
            b: "2001:db8::2".parse().unwrap(),
            ports: Some((443, 50000)),
        };
        let mut flow = capsule_index::sideindex::FlowCounts::new(key, 5, 9);
        let t = &mut flow.totals;
        t.packets = [3, 4];
        t.bytes = [300, 4000];
        t.dscp = [1 << 46 | 1, 1 << 10];
        t.tcp_flags = [0x12, 0x18];
        t.retransmissions = [1, 0];
        t.zero_windows = [0, 2];
        t.resets = [0, 1];
        t.cut_packets = [0, 2];
        t.cut_bytes = [0, 2000];
        t.cut_at_ns = [None, Some(7)];
        for approximate in [false, true] {
            let s = FlowSummary {
                flow: flow.clone(),
                approximate,
            };
            let line = json_line(&s);
            let back = from_json_line(&line.to_string()).unwrap();
            assert_eq!(json_line(&back), line);
        }
        assert!(from_json_line("{}").is_err());
    }
}
