//! capsule's config file: one TOML file, given with `--config FILE`, parsed into a validated
//! model that the analytics, alerting and capture commands read.
//!
//! ```text
//! FILE text -> toml::de::DeTable::parse (keys and values with byte spans)
//!   -> walk.rs: each section's table, type checks; byte offsets -> line:column
//!   -> [groups] groups.rs: Groups (names in file order, longest-prefix lookup per family)
//!   -> [dscp] dscp.rs: DscpPolicy (value -> groups allowed to send it)
//!   -> [egress] egress.rs: Egress (group -> groups, prefixes and DNS names it may send to)
//!   -> [work_hours] hours.rs: WorkHours (days, local times, IANA zone via jiff)
//!   -> [capture] capture.rs: one key per `capsule capture` flag, kept as the flag's text
//!      with its line (the binary parses it with the flag's own parser)
//!   -> [cutoff] cutoff.rs: Cutoff (bytes and packets per flow direction, keep filters as
//!      text with their lines, idle time)
//!   -> [alerts] alerts.rs: AlertRules (each rule's thresholds, defaults for the rest)
//!   -> [serve] capture.rs too: one key per `capsule serve` flag, kept as text like
//!      [capture]
//!   -> [expect.GROUP] expect.rs: Expectation (a group's rate ceiling at a resolution,
//!      its active hours), read after [groups] and [work_hours]
//!   -> [fleet] fleet.rs: Fleet (node name, ClickHouse URL, advertised serve URL, files)
//!   -> [tunnels] tunnels.rs: Tunnels (UDP ports of VXLAN, Geneve and GTP-U)
//!   -> Config; any problem: ConfigError::Invalid naming file:line:column, the dotted key
//!      (`groups.gpu[2]`), what was expected and what was found; the parsers keep each
//!      problem (Src::keep) and go on with the next key or element, so a file with several
//!      gives ConfigError::Several, all of them in file order
//! ```
//!
//! The raw TOML types stay private: callers see only the typed model. Every section is
//! optional; an unknown top-level key is an error listing the known sections, so a section
//! added later (`[retention]`) is one more arm in
//! [`Config::parse`]. Parsing never panics, whatever the input (a proptest below and the
//! `config` fuzz target check it). The reference of every key is docs/config.md.
#![forbid(unsafe_code)]

mod alerts;
mod capture;
mod client;
mod cutoff;
mod dscp;
mod egress;
mod error;
mod expect;
mod fleet;
mod groups;
mod hours;
mod links;
mod tier;
mod tunnels;
mod walk;

use std::net::IpAddr;
use std::path::Path;

use serde::Serialize;
use toml::de::DeTable;

pub use alerts::{
    AlertRules, MsRate, Secret, SecretSource, Webhook, FACILITIES as SYSLOG_FACILITIES,
    RULES as ALERT_RULES,
};
pub use capture::{CaptureSetting, CaptureType, CAPTURE_KEYS, SERVE_KEYS};
pub use client::{ClientConfig, CLIENT_KEYS};
pub use cutoff::{Cutoff, KeepRule, CUTOFF_KEYS, DEFAULT_IDLE_NS};
pub use dscp::{dscp_name, parse_dscp, DscpRule};
pub use egress::EgressRule;
pub use error::{line_col, ConfigError, ErrorKind, Invalid};
pub use expect::{ActiveHours, Ceiling, Expectation, EXPECT_KEYS, PER_MS};
pub use fleet::{valid_node_name, Fleet, FLEET_KEYS};
pub use groups::{Group, GroupId, Groups, Prefix, PrefixError, UNASSIGNED};
pub use hours::WorkHours;
pub use links::{parse_rate, rate_text, Link};
pub use tier::{TierConfig, DEFAULT_REGION, TIER_KEYS};
pub use tunnels::{Tunnels, TUNNELS_KEYS};

use walk::Src;

/// The sections a config file may have, in the order they are read.
pub const SECTIONS: [&str; 13] = [
    "groups",
    "dscp",
    "egress",
    "work_hours",
    "capture",
    "cutoff",
    "alerts",
    "serve",
    "fleet",
    "links",
    "tier",
    "expect",
    "tunnels",
];

/// A validated config file.
#[derive(Debug, Clone, Default)]
pub struct Config {
    groups: Groups,
    dscp: dscp::DscpPolicy,
    egress: egress::Egress,
    work_hours: Option<WorkHours>,
    capture: Vec<CaptureSetting>,
    cutoff: Cutoff,
    alerts: AlertRules,
    serve: Vec<CaptureSetting>,
    fleet: Option<Fleet>,
    links: Vec<links::Link>,
    tier: Option<TierConfig>,
    expect: Vec<Expectation>,
    tunnels: Tunnels,
}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut c = Config::parse(&text, &path.display().to_string())?;
        if let Some(f) = &mut c.fleet {
            f.resolve(path.parent().unwrap_or(Path::new("")));
        }
        // A relative credentials file is the config file's neighbour.
        if let Some(t) = c.tier.as_mut() {
            if t.credentials_file.is_relative() {
                let dir = path.parent().unwrap_or(Path::new(""));
                t.credentials_file = dir.join(&t.credentials_file);
            }
            if let Some(c) = t.cache_dir.as_mut().filter(|c| c.is_relative()) {
                *c = path.parent().unwrap_or(Path::new("")).join(&*c);
            }
        }
        Ok(c)
    }

    /// Validates `text`; errors name `file` (the name to report, usually the path). Every
    /// problem found is reported, in file order ([`ConfigError::Several`] when more than
    /// one), except that a TOML syntax error stops the parse.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let found = std::cell::RefCell::new(Vec::new());
        let src = Src {
            file,
            text,
            found: &found,
        };
        let doc = DeTable::parse(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let message = e.message().trim().replace('\n', "; ");
            src.err(span, "", ErrorKind::Syntax, "", message)
        })?;
        let doc = doc.get_ref();
        src.only_keys("", doc, &SECTIONS);
        let mut c = Config::default();
        // A section with a problem is kept as far as it was read (a group with a bad prefix
        // stays defined, so the sections naming it report nothing more).
        // Groups first: the other sections name them.
        if let Some(v) = doc.get("groups") {
            let t = src.table("groups", v, "a table of group = [addresses or prefixes]");
            if let Some(t) = src.keep(t) {
                c.groups = Groups::parse(&src, "groups", t);
            }
        }
        if let Some(v) = doc.get("dscp") {
            let t = src.table("dscp", v, "a table of DSCP value = [group names]");
            if let Some(t) = src.keep(t) {
                c.dscp = dscp::DscpPolicy::parse(&src, "dscp", t, &c.groups);
            }
        }
        if let Some(v) = doc.get("egress") {
            let t = src.table(
                "egress",
                v,
                "a table of group = [group names, prefixes or DNS names]",
            );
            if let Some(t) = src.keep(t) {
                c.egress = egress::Egress::parse(&src, "egress", t, &c.groups);
            }
        }
        if let Some((k, v)) = doc.get_key_value("work_hours") {
            let t = src.table("work_hours", v, "a table with days, start, end, timezone");
            if let Some(t) = src.keep(t) {
                c.work_hours = WorkHours::parse(&src, "work_hours", k.span(), t);
            }
        }
        if let Some(v) = doc.get("capture") {
            let t = src.table(
                "capture",
                v,
                "a table of capture settings (iface, store, ...)",
            );
            if let Some(t) = src.keep(t) {
                c.capture = capture::parse(&src, "capture", t, CAPTURE_KEYS);
            }
        }
        if let Some(v) = doc.get("cutoff") {
            let t = src.table(
                "cutoff",
                v,
                "a table of cut-off rules (bytes, packets, keep, idle)",
            );
            if let Some(t) = src.keep(t) {
                c.cutoff = cutoff::parse(&src, "cutoff", t);
            }
        }
        if let Some(v) = doc.get("alerts") {
            let t = src.table(
                "alerts",
                v,
                "a table of alert thresholds (egress_bytes, ...)",
            );
            if let Some(t) = src.keep(t) {
                c.alerts = AlertRules::parse(&src, "alerts", t, &c.groups);
            }
        }
        if let Some(v) = doc.get("serve") {
            let t = src.table("serve", v, "a table of serve settings (listen, cert, ...)");
            if let Some(t) = src.keep(t) {
                c.serve = capture::parse(&src, "serve", t, SERVE_KEYS);
            }
        }
        if let Some((k, v)) = doc.get_key_value("fleet") {
            let t = src.table(
                "fleet",
                v,
                "a table of fleet settings (node, clickhouse, ...)",
            );
            if let Some(t) = src.keep(t) {
                c.fleet = fleet::parse(&src, "fleet", t, k.span());
            }
        }
        if let Some(v) = doc.get("links") {
            let t = src.table("links", v, "a table of interface = \"RATE\" (\"10G\")");
            if let Some(t) = src.keep(t) {
                c.links = links::parse(&src, "links", t);
            }
        }
        if let Some((k, v)) = doc.get_key_value("tier") {
            let t = src.table(
                "tier",
                v,
                "a table of tier settings (endpoint, bucket, ...)",
            );
            if let Some(t) = src.keep(t) {
                c.tier = tier::parse(&src, "tier", k.span(), t);
            }
        }
        if let Some(v) = doc.get("expect") {
            let t = src.table(
                "expect",
                v,
                "a table of group = { max_rate, per, hours } ([expect.GROUP])",
            );
            if let Some(t) = src.keep(t) {
                c.expect = expect::parse(&src, "expect", t, &c.groups, c.work_hours.as_ref());
            }
        }
        if let Some(v) = doc.get("tunnels") {
            let t = src.table(
                "tunnels",
                v,
                "a table of UDP port lists (vxlan_ports, geneve_ports, gtpu_ports)",
            );
            if let Some(t) = src.keep(t) {
                c.tunnels = tunnels::parse(&src, "tunnels", t);
            }
        }
        src.finish(c)
    }

    /// The `[expect.GROUP]` entries, in file order.
    pub fn expectations(&self) -> &[Expectation] {
        &self.expect
    }

    /// The `[tunnels]` UDP ports (the defaults when the file has no section).
    pub fn tunnels(&self) -> &Tunnels {
        &self.tunnels
    }

    /// The `[links]` line rates, in the file's order.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The line rate of interface `name`, bits per second, if `[links]` states it.
    pub fn link_rate(&self, name: &str) -> Option<u64> {
        self.links
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.bits_per_second)
    }

    /// The host groups.
    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// Whether a sender in `group` (`None`: in no group) may mark packets with `dscp`: a
    /// value without a `[dscp]` entry is free; a listed value only for its groups.
    pub fn dscp_allowed(&self, dscp: u8, group: Option<GroupId>) -> bool {
        self.dscp.allowed(dscp, group)
    }

    /// The `[dscp]` entries, in file order.
    pub fn dscp_rules(&self) -> &[DscpRule] {
        self.dscp.rules()
    }

    /// Whether a sender in `src` (`None`: in no group) may send to `dst`, which the traffic
    /// names `dst_names` (its TLS server name or HTTP host, the names DNS answers gave its
    /// address; empty when nothing names it): a group without an `[egress]` entry, and an
    /// address in no group, may send anywhere; a group with one may send to its own group
    /// and to the groups, prefixes and names listed.
    pub fn egress_allowed(&self, src: Option<GroupId>, dst: IpAddr, dst_names: &[&str]) -> bool {
        self.egress.allowed(&self.groups, src, dst, dst_names)
    }

    /// Whether some `[egress]` entry lists a DNS name.
    pub fn egress_has_names(&self) -> bool {
        self.egress.has_names()
    }

    /// The `[egress]` entries, in file order.
    pub fn egress_rules(&self) -> &[EgressRule] {
        self.egress.rules()
    }

    /// The `[work_hours]` section, if the file has one.
    pub fn work_hours(&self) -> Option<&WorkHours> {
        self.work_hours.as_ref()
    }

    /// The `[capture]` settings, in file order: each a `capsule capture` flag and its value
    /// as that flag's text, for the binary to parse with the flag's own parser.
    pub fn capture(&self) -> &[CaptureSetting] {
        &self.capture
    }

    /// The `[serve]` settings, in file order: each a `capsule serve` flag and its value as
    /// that flag's text (a list is one setting per element).
    pub fn serve(&self) -> &[CaptureSetting] {
        &self.serve
    }

    /// The `[cutoff]` rules (no cut-off when the file has no section).
    pub fn cutoff(&self) -> &Cutoff {
        &self.cutoff
    }

    /// The `[tier]` section, if the file has one.
    pub fn tier(&self) -> Option<&TierConfig> {
        self.tier.as_ref()
    }

    /// The `[alerts]` thresholds (every one at its default when the file has no section).
    pub fn alerts(&self) -> &AlertRules {
        &self.alerts
    }

    /// The `[fleet]` section, if the file has one (paths absolute when loaded from a file).
    pub fn fleet(&self) -> Option<&Fleet> {
        self.fleet.as_ref()
    }
}

/// The model as `capsule config check --json` prints it: group ids become names.
#[derive(Serialize)]
struct ConfigJson<'a> {
    groups: Vec<&'a Group>,
    dscp: Vec<DscpJson<'a>>,
    egress: Vec<EgressJson<'a>>,
    work_hours: Option<&'a WorkHours>,
    capture: &'a [CaptureSetting],
    cutoff: &'a Cutoff,
    alerts: &'a AlertRules,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    serve: &'a [CaptureSetting],
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<&'a Fleet>,
    tier: Option<&'a TierConfig>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    expect: &'a [Expectation],
}

#[derive(Serialize)]
struct DscpJson<'a> {
    value: u8,
    name: &'a str,
    groups: Vec<&'a str>,
}

#[derive(Serialize)]
struct EgressJson<'a> {
    group: &'a str,
    groups: Vec<&'a str>,
    prefixes: &'a [Prefix],
    names: &'a [String],
}

impl Serialize for Config {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let name = |g: &GroupId| self.groups.name(*g);
        ConfigJson {
            groups: self.groups.iter().collect(),
            dscp: self
                .dscp_rules()
                .iter()
                .map(|r| DscpJson {
                    value: r.value,
                    name: &r.name,
                    groups: r.groups.iter().map(name).collect(),
                })
                .collect(),
            egress: self
                .egress_rules()
                .iter()
                .map(|r| EgressJson {
                    group: name(&r.group),
                    groups: r.groups.iter().map(name).collect(),
                    prefixes: &r.prefixes,
                    names: &r.names,
                })
                .collect(),
            work_hours: self.work_hours.as_ref(),
            capture: &self.capture,
            cutoff: &self.cutoff,
            alerts: &self.alerts,
            serve: &self.serve,
            fleet: self.fleet.as_ref(),
            tier: self.tier.as_ref(),
            expect: &self.expect,
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests;
