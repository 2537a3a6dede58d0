//! capsule's query language: what a person types to ask the store for packets.
//!
//! A query is a filter expression and a time window. This crate owns both languages and the
//! [`Query`] they make, and nothing else: it reads no file and knows no store, so the CLI,
//! the planner, the exporter and the server all parse the same text the same way,
//! and the parsers are tested and fuzzed alone.
//!
//! ```text
//! "host 10.1.2.3 and tcp port 443"  -> filter::Filter::parse -> Filter (canonical, Display)
//! "--from -10m" "--to now"          -> time::parse_time(text, now) -> ns since the epoch
//! Filter + [from, to)               -> Query
//!   used per packet:       Filter::matches_packet(&Dissected, linktype, bytes, wire len)
//!                                                                             exact
//!   used over flow records: Filter::matches_side(&FlowSide) -> Tri (yes/no/maybe), planning
//! ```
//!
//! Parsing never panics, whatever the input; a filter error points at the token, a time
//! error names the forms it accepts.
#![forbid(unsafe_code)]

pub mod excerpt;
pub mod filter;
pub mod time;

pub use filter::{Filter, FilterError, FlowSide, Tri};
pub use time::{
    format_instant, parse_duration, parse_instant, parse_time, TimeArg, TimeError, ACCEPTED,
};

/// What a query asks for: packets that pass `filter` in the window [`from_ns`, `to_ns`).
///
/// [`from_ns`]: Query::from_ns
/// [`to_ns`]: Query::to_ns
#[derive(Debug, Clone)]
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
