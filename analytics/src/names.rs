//! Who the other end is, in every answer that shows a flow or a destination: the names the
//! index keeps for each flow (capsule-names: TLS server name, HTTP host, DNS query) and the
//! window's DNS answers (capsule_index::names::DnsNames: the address -> name map).
//!
//! ```text
//! Input { flows, dns }                 (the listing's DNS answers, whatever the filter)
//!   -> end_name(f, side): the flow's own name when `side` is its server (the side that did
//!      send the client's hello, request or query: capsule_index::flows::client_side), and the names DNS
//!      answers of the window gave the address -> EndName { app, name, by, dns_names }
//!      "tls: models.example-hub.io", "quic; dns answer: models.example-hub.io"
//!   -> matrix, dscp, top, tcp rows, alerts (egress, off_hours, dscp) and through them
//!      triage; EndName::names() is what an [egress] allow-list by name is checked against
//! ```

use std::net::IpAddr;

use capsule_index::sideindex::FlowCounts;
use serde::Serialize;

use crate::Input;

/// Who one end of a flow is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndName {
    /// The flow's application (absent: not recognised).
    pub app: Option<&'static str>,
    /// The end's name from the flow's own payload: its TLS server name, HTTP host, or the
    /// name a DNS flow asked for (absent: none, or the end is the flow's client).
    pub name: Option<String>,
    /// Where `name` comes from: `sni`, `http.host` or `dns.query`.
    pub by: Option<&'static str>,
    /// The names DNS answers of the window gave the end's address (the first 4 in name
    /// order, ASCII case ignored).
    pub dns_names: Vec<String>,
    /// What a table shows after the address: `tls: models.example-hub.io`, `dns answer:
    /// models.example-hub.io`, `quic; dns answer: ...`, `tls`.
    pub describe: String,
}

impl EndName {
    /// Every name the end goes by for a policy: its TLS server name or HTTP host, and the
    /// names DNS answers gave its address (a DNS flow's question names no end).
    pub fn names(&self) -> Vec<&str> {
        let own = match self.by {
            Some("sni" | "http.host") => self.name.as_deref(),
            _ => None,
        };
        own.into_iter()
            .chain(self.dns_names.iter().map(String::as_str))
            .collect()
    }
}

impl Input {
    /// Who end `side` (0: the key's a, 1: b) of flow `f` is, if anything names it: the
    /// flow's own name when that end is its server (known from the side that sent the first
    /// payload, the handshake or the ports), and the names the window's DNS answers gave
    /// its address.
    pub fn end_name(&self, f: &FlowCounts, side: usize) -> Option<EndName> {
        let addr = if side == 0 { f.key.a } else { f.key.b };
        let server = capsule_index::flows::client_side(f).map(|c| 1 - c);
        let own = f.totals.names.as_deref().filter(|_| server == Some(side));
        let app = own
            .map(|n| n.app)
            .filter(|a| *a != capsule_names::App::Unknown)
            .map(capsule_names::App::as_str);
        let (name, by) = match own {
            Some(n) => match (&n.sni, &n.http_host, n.dns_queries.first()) {
                (Some(s), _, _) => (Some(s.clone()), Some("sni")),
                (None, Some(h), _) => (Some(h.clone()), Some("http.host")),
                (None, None, Some(q)) => (Some(q.clone()), Some("dns.query")),
                _ => (None, None),
            },
            None => (None, None),
        };
        let dns_names = self.dns.of(addr).to_vec();
        let describe = match (app, &name, dns_names.first()) {
            (Some(a), Some(n), _) => format!("{a}: {n}"),
            (None, Some(n), _) => n.clone(),
            (Some(a), None, Some(d)) => format!("{a}; dns answer: {d}"),
            (None, None, Some(d)) => format!("dns answer: {d}"),
            (Some(a), None, None) => a.to_string(),
            (None, None, None) => return None,
        };
        Some(EndName {
            app,
            name,
            by,
            dns_names,
            describe,
        })
    }

    /// Who the destination of direction `d` of flow `f` (0: a -> b) is.
    pub fn dst_name(&self, f: &FlowCounts, d: usize) -> Option<EndName> {
        self.end_name(f, 1 - (d & 1))
    }

    /// What names a flow as a whole (its table text after the flow): the flow's own names
    /// as `capsule flows` shows them (`tls: models.example-hub.io`), else what names its
    /// server end (or, when the server is not known, b's end, then a's).
    pub fn flow_name(&self, f: &FlowCounts) -> Option<String> {
        if let Some(d) = f.totals.names.as_deref().and_then(|n| n.describe()) {
            return Some(d);
        }
        let sides = match capsule_index::flows::client_side(f) {
            Some(c) => [Some(1 - c), None],
            None => [Some(1), Some(0)],
        };
        sides
            .into_iter()
            .flatten()
            .find_map(|s| self.end_name(f, s))
            .map(|e| e.describe)
    }

    /// The names DNS answers of the window gave `addr`, as a table shows them (`dns answer:
    /// NAME`), if any.
    pub fn host_name(&self, addr: IpAddr) -> Option<String> {
        self.dns
            .of(addr)
            .first()
            .map(|n| format!("dns answer: {n}"))
    }
}

/// `text` with `name` after it in parentheses, when there is one: `203.0.113.77:443 (tls:
/// models.example-hub.io)`.
pub fn with_name(text: &str, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("{text} ({n})"),
        None => text.to_string(),
    }
}

/// An address and port as a flow label writes it (`[2001:db8::1]:443`, `10.0.0.1:80`, an
/// address alone without a port).
pub fn endpoint(a: IpAddr, p: Option<u16>) -> String {
    match (a, p) {
        (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}
