//! capsule's query language: what a person types to ask the store for packets.
//!
//! A query is a filter expression and a time window. This crate owns both languages and the
//! [`Query`] they make, and nothing else: it reads no file and knows no store, so the CLI,
//! the planner, the exporter and the server all parse the same text the same way,
//! and the parsers are tested and fuzzed alone.
//!
//! ```text
//! "host 10.1.2.3 and tcp port 443"  -> filter::Filter::parse -> Filter (canonical, Display)
//! Filter::host(Direction::SrcOrDst, ip).and(Filter::proto(IpProto::Tcp))
//!                                   -> the same Filter, built as a value (no text)
//! "--from -10m" "--to now"          -> time::parse_time(text, now) -> ns since the epoch
//! Filter + [from, to)               -> Query (comparable; serde with the filter as its text)
//!   used per packet:       Filter::matches_packet(&Dissected, linktype, bytes, wire len)
//!                                                                             exact
//!   used over flow records: Filter::matches_side(&FlowSide) -> Tri (yes/no/maybe), planning
//! ```
//!
//! A filter is made either way: parsed from text, or built with the constructors
//! ([`Filter::host`], [`Filter::net`], [`Filter::port`], [`Filter::proto`], ...,
//! [`Filter::and`], [`Filter::or`], [`Filter::not`]) by code that has the values (an answer's
//! finding, the server, a console). The tree itself stays private, so every filter keeps the
//! parser's normal form and `Filter::parse(&f.to_string()) == Ok(f)` holds however `f` was
//! made. Protocols are [`IpProto`] values (from `capsule-wire`, re-exported here), the one
//! map between protocol numbers and names.
//!
//! ```
//! use capsule_query::{Direction, Filter, IpProto, Query};
//!
//! let web = Filter::host(Direction::Src, "10.0.0.1".parse().unwrap())
//!     .and(Filter::proto(IpProto::Tcp))
//!     .and(Filter::port(Direction::Dst, 443).or(Filter::port(Direction::Dst, 80)));
//! assert_eq!(web.to_string(), "src host 10.0.0.1 and tcp and (dst port 443 or dst port 80)");
//! assert_eq!(Filter::parse(&web.to_string()), Ok(web.clone()));
//!
//! let q = Query { filter: web, from_ns: Some(0), to_ns: None };
//! let json = serde_json::to_string(&q).unwrap();
//! assert_eq!(
//!     json,
//!     r#"{"filter":"src host 10.0.0.1 and tcp and (dst port 443 or dst port 80)","from_ns":0,"to_ns":null}"#
//! );
//! assert_eq!(serde_json::from_str::<Query>(&json).unwrap(), q);
//! ```
//!
//! Parsing never panics, whatever the input; a filter error points at the token, a time
//! error names the forms it accepts.
#![forbid(unsafe_code)]

pub mod excerpt;
pub mod filter;
pub mod time;

pub use capsule_wire::IpProto;
pub use filter::{
    Direction, Filter, FilterError, FilterValueError, FlowSide, IndexKey, NameKind, NameText,
    NamedFlow, Tri,
};
pub use time::{
    format_instant, parse_duration, parse_instant, parse_time, TimeArg, TimeError, ACCEPTED,
};

/// What a query asks for: packets that pass `filter` in the window [`from_ns`, `to_ns`).
///
/// Serialised (serde) as `{"filter": TEXT, "from_ns": N or null, "to_ns": N or null}`, the
/// filter as its canonical text. `Display` is for messages and logs, not a command line:
/// `tcp and port 443, from 2024-05-01T10:00:00.000000000Z to ...`, `all packets` for the
/// empty filter, an open end left out.
///
/// [`from_ns`]: Query::from_ns
/// [`to_ns`]: Query::to_ns
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Query {
    pub filter: Filter,
    /// Inclusive start of the window, ns since the epoch.
    pub from_ns: Option<u64>,
    /// Exclusive end of the window, ns since the epoch.
    pub to_ns: Option<u64>,
}

impl Query {
    /// Everything in the store.
    pub fn all() -> Self {
        Query {
            filter: Filter::all(),
            from_ns: None,
            to_ns: None,
        }
    }

    /// The window as [from, to), open ends filled in.
    pub fn window(&self) -> (u64, u64) {
        (self.from_ns.unwrap_or(0), self.to_ns.unwrap_or(u64::MAX))
    }

    /// Whether a packet's timestamp is inside the window.
    pub fn in_window(&self, ts_ns: u64) -> bool {
        let (from, to) = self.window();
        ts_ns >= from && ts_ns < to
    }
}

impl std::fmt::Display for Query {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.filter.is_all() {
            f.write_str("all packets")?;
        } else {
            write!(f, "{}", self.filter)?;
        }
        if self.from_ns.is_some() || self.to_ns.is_some() {
            f.write_str(",")?;
        }
        if let Some(from) = self.from_ns {
            write!(f, " from {}", format_instant(from))?;
        }
        if let Some(to) = self.to_ns {
            write!(f, " to {}", format_instant(to))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_prints_and_serialises_with_its_filter_text() {
        let all = Query::all();
        assert_eq!(all.to_string(), "all packets");
        assert_eq!(
            serde_json::to_string(&all).unwrap(),
            r#"{"filter":"","from_ns":null,"to_ns":null}"#
        );
        let q = Query {
            filter: Filter::parse("TCP  port 443 || dscp 46").unwrap(),
            from_ns: Some(1_700_000_000_000_000_000),
            to_ns: Some(1_700_000_060_000_000_000),
        };
        assert_eq!(
            q.to_string(),
            "(tcp and port 443) or dscp ef, from 2023-11-14T22:13:20.000000000Z \
             to 2023-11-14T22:14:20.000000000Z"
        );
        let json = serde_json::to_string(&q).unwrap();
        assert_eq!(
            json,
            r#"{"filter":"(tcp and port 443) or dscp ef","from_ns":1700000000000000000,"to_ns":1700000060000000000}"#
        );
        assert_eq!(serde_json::from_str::<Query>(&json).unwrap(), q);
        assert_ne!(q, all);
        let open_start = Query {
            from_ns: None,
            ..q.clone()
        };
        assert_eq!(
            open_start.to_string(),
            "(tcp and port 443) or dscp ef, to 2023-11-14T22:14:20.000000000Z"
        );

        // A filter that does not parse is a serde error with the parser's message.
        let err =
            serde_json::from_str::<Query>(r#"{"filter":"port x","from_ns":null,"to_ns":null}"#)
                .unwrap_err()
                .to_string();
        assert!(err.contains("expected a port"), "{err}");
        assert!(serde_json::from_str::<Filter>("42").is_err());
        assert_eq!(
            serde_json::from_str::<Filter>("\"\"").unwrap(),
            Filter::all()
        );
    }
}
