//! `[alerts]`: the thresholds of the alert rules that `capsule alerts` and `capsule triage`
//! evaluate over the index. Every key is optional and has a default ([`AlertRules::default`],
//! listed in docs/alerts.md); an unknown key is an error naming the known ones.
//!
//! ```text
//! egress_bytes = "100M"   egress_window = "5m"     off_hours_bytes = "1G"
//! dscp_bytes = 1          pair_bytes = "1M"
//! straggler_groups = ["gpu"]  straggler_interval = "1m"  straggler_ratio = 0.5
//! straggler_min_bytes = "1MB"  retransmission_rate = 0.05  retransmission_min_segments = 1000
//! zero_windows = 10       disabled = ["tcp_zero_window"]
//! live_file = "/var/log/capsule/alerts.jsonl"  live_every = "5s"  suppress = "1h"
//! release_after = "30s"
//! syslog_udp = "127.0.0.1:514"  syslog_socket = "/dev/log"  syslog_facility = "local0"
//! webhook_url = "https://hooks.example/capsule"  webhook_secret_file = "/etc/capsule/hook.key"
//! webhook_timeout = "5s"  webhook_retries = 3  webhook_ca = "/etc/capsule/ca.pem"
//! sink_queue = 1000       evidence_max = "64M"
//! ef_share = 0.3  ef_share_for = "2ms"   microburst_rate = "80%"  microburst_for = "1ms"
//! microburst_class = "ef"  incast_senders = 16  active_hours_bytes = "1M"
//! ```
//!
//! The millisecond rules (`ef_share`, `microburst`, `incast`) run only when their key is
//! set; `rate_ceiling` and `active_hours` hold the groups of `[expect.GROUP]` to their
//! entries (config/src/expect.rs).
//!
//! Sizes are integers (bytes) or strings with a unit (`K`, `M`, `G`, `T`: powers of 1024;
//! `KB`, `MB`, `GB`, `TB`: powers of 1000); durations are strings (`10s`, `5m`, `1h`), whole
//! seconds since the index counts 1-second buckets.

use serde::Serialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::error::{ConfigError, ErrorKind};
use crate::groups::Groups;
use crate::walk::{join, Src};

/// The rule names, as alerts carry them in `rule` and `disabled` lists them.
pub const RULES: [&str; 12] = [
    "egress",
    "off_hours",
    "dscp",
    "group_pair",
    "straggler",
    "tcp_retransmissions",
    "tcp_zero_window",
    "ef_share",
    "microburst",
    "incast",
    "rate_ceiling",
    "active_hours",
];

/// The syslog facilities by name (RFC 5424 section 6.2.1), in code order.
pub const FACILITIES: [&str; 24] = [
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp", "ntp", "audit", "alert", "clock", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];

const KEYS: [&str; 35] = [
    "ef_share",
    "ef_share_for",
    "microburst_rate",
    "microburst_for",
    "microburst_class",
    "incast_senders",
    "active_hours_bytes",
    "live_file",
    "syslog_udp",
    "syslog_socket",
    "syslog_facility",
    "webhook_url",
    "webhook_secret",
    "webhook_secret_file",
    "webhook_timeout",
    "webhook_retries",
    "webhook_ca",
    "sink_queue",
    "evidence_max",
    "live_every",
    "suppress",
    "release_after",
    "egress_bytes",
    "egress_window",
    "off_hours_bytes",
    "dscp_bytes",
    "pair_bytes",
    "straggler_groups",
    "straggler_interval",
    "straggler_ratio",
    "straggler_min_bytes",
    "retransmission_rate",
    "retransmission_min_segments",
    "zero_windows",
    "disabled",
];

/// The webhook's HMAC key, given in the file: never printed or serialized.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("(hidden)")
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Where the webhook's HMAC key comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum SecretSource {
    /// `webhook_secret`: the key itself.
    Inline(Secret),
    /// `webhook_secret_file`: a file holding it (read when capture starts; surrounding
    /// white space is not part of the key).
    File(String),
}

/// The HTTP webhook sink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Webhook {
    /// `http://HOST[:PORT]/PATH` or `https://...`.
    pub url: String,
    pub secret: SecretSource,
    /// Per attempt: connecting, sending and the answer's status line (ns). Default 5 s.
    pub timeout_ns: u64,
    /// Attempts after the first one failed (a connection error, a timeout, a 5xx, 408 or
    /// 429 answer), 0.5 s, 1 s, 2 s, ... apart (at most 30 s). Default 3, at most 10.
    pub retries: u32,
    /// PEM CA certificates an https URL is checked against (default: the system's).
    pub ca: Option<String>,
}

/// A rate a millisecond rule compares with: bits per second, or a share of the link.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MsRate {
    BitsPerSecond(u64),
    /// Percent of the link's line rate (`[links]`), 0 < p <= 100.
    LinkPercent(f64),
}

impl MsRate {
    /// Bits per second, against a link of `link` bits per second (`None` when a share of
    /// an unknown link).
    pub fn bps(&self, link: Option<u64>) -> Option<u64> {
        match *self {
            MsRate::BitsPerSecond(b) => Some(b),
            MsRate::LinkPercent(p) => link.map(|l| (l as f64 * p / 100.0).round() as u64),
        }
    }

    /// As written: `80%`, `8G`.
    pub fn text(&self) -> String {
        match *self {
            MsRate::BitsPerSecond(b) => crate::links::rate_text(b),
            MsRate::LinkPercent(p) => format!("{p}%"),
        }
    }
}

/// The thresholds of every alert rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertRules {
    /// `egress`: bytes one direction of a flow sends, in one `egress_window`, to a
    /// destination its group's `[egress]` entry does not allow. Default 100 MiB.
    pub egress_bytes: u64,
    /// The window `egress_bytes` is counted in (ns, whole seconds). Default 5 minutes.
    pub egress_window_ns: u64,
    /// `off_hours`: bytes one direction of a flow sends outside `[work_hours]` from a group
    /// member to an address in no group. Default 1 GiB. Needs `[work_hours]`.
    pub off_hours_bytes: u64,
    /// `dscp`: bytes a sender marks with a value the `[dscp]` policy does not allow it, to
    /// one destination. Default 1 (any).
    pub dscp_bytes: u64,
    /// `group_pair`: bytes from one group to another group its `[egress]` entry does not
    /// list. Default 1 MiB.
    pub pair_bytes: u64,
    /// `straggler`: the groups whose members should send alike. Default none.
    pub straggler_groups: Vec<String>,
    /// Interval the straggler rule compares members in (ns). Default 1 minute.
    pub straggler_interval_ns: u64,
    /// A member under this fraction of the group median is under. Default 0.5.
    pub straggler_ratio: f64,
    /// Intervals where the median member sent less are idle. Default 1 MB.
    pub straggler_min_bytes: u64,
    /// `tcp_retransmissions`: a host whose retransmitted share of data segments sent is at
    /// least this. Default 0.05.
    pub retransmission_rate: f64,
    /// ... and that sent at least this many data segments. Default 1000.
    pub retransmission_min_segments: u64,
    /// `tcp_zero_window`: a host advertising a zero window at least this many times.
    /// Default 10.
    pub zero_windows: u64,
    /// `ef_share`: EF (46) above this share of the link's rate (0 < share <= 1) for
    /// `ef_share_for`. None (default): not evaluated. Needs the link's rate (`[links]`).
    pub ef_share: Option<f64>,
    /// Milliseconds in a row EF must stay above `ef_share` (ns, whole ms). Default 1 ms.
    pub ef_share_for_ns: u64,
    /// `microburst`: the link (or `microburst_class`) above this rate for
    /// `microburst_for`. None (default): not evaluated.
    pub microburst_rate: Option<MsRate>,
    /// Default 1 ms.
    pub microburst_for_ns: u64,
    /// The DSCP value held to `microburst_rate` (None: the whole link).
    pub microburst_class: Option<u8>,
    /// `incast`: at least this many distinct senders to one destination within one
    /// millisecond (4 or more). None (default): not evaluated.
    pub incast_senders: Option<u32>,
    /// `active_hours`: a group of `[expect]` sending at least this many bytes outside its
    /// hours. Default 1 (any).
    pub active_hours_bytes: u64,
    /// Rules not evaluated (names from [`RULES`]).
    pub disabled: Vec<String>,
    /// Live alerts: the JSON-lines file `capsule capture --config` appends alerts to (none:
    /// no live alerts).
    pub live_file: Option<String>,
    /// How often capture evaluates the rules on the live index (ns). Default 5 s.
    pub live_every_ns: u64,
    /// An engaged alert is sent again after this long (ns); a released one is sent once.
    /// Default 1 hour.
    pub suppress_ns: u64,
    /// Live alerts: an engaged alert is released only once no evaluation has raised it for
    /// this long (ns), so that one hovering at its threshold does not flap. Default 30 s.
    pub release_after_ns: u64,
    /// Live alerts to syslog over UDP: `HOST:PORT` (RFC 5424 with a JSON body).
    pub syslog_udp: Option<String>,
    /// Live alerts to syslog over a unix datagram socket (`/dev/log`).
    pub syslog_socket: Option<String>,
    /// The syslog facility code (0-23; names in [`FACILITIES`]). Default `daemon` (3).
    pub syslog_facility: u8,
    /// Live alerts POSTed as JSON, HMAC-SHA256 signed.
    pub webhook: Option<Webhook>,
    /// Events each sink's queue holds while the sink is slow; past it they are counted
    /// undelivered. Default 1000.
    pub sink_queue: usize,
    /// `capsule triage`: the most bytes one finding's evidence file holds. Default 64 MiB.
    pub evidence_max: u64,
}

impl Default for AlertRules {
    fn default() -> Self {
        AlertRules {
            egress_bytes: 100 << 20,
            egress_window_ns: 300 * 1_000_000_000,
            off_hours_bytes: 1 << 30,
            dscp_bytes: 1,
            pair_bytes: 1 << 20,
            straggler_groups: Vec::new(),
            straggler_interval_ns: 60 * 1_000_000_000,
            straggler_ratio: 0.5,
            straggler_min_bytes: 1_000_000,
            retransmission_rate: 0.05,
            retransmission_min_segments: 1000,
            zero_windows: 10,
            ef_share: None,
            ef_share_for_ns: 1_000_000,
            microburst_rate: None,
            microburst_for_ns: 1_000_000,
            microburst_class: None,
            incast_senders: None,
            active_hours_bytes: 1,
            disabled: Vec::new(),
            live_file: None,
            live_every_ns: 5 * 1_000_000_000,
            suppress_ns: 3600 * 1_000_000_000,
            release_after_ns: 30 * 1_000_000_000,
            syslog_udp: None,
            syslog_socket: None,
            syslog_facility: 3,
            webhook: None,
            sink_queue: 1000,
            evidence_max: 64 << 20,
        }
    }
}

impl AlertRules {
    /// Whether `rule` is evaluated.
    pub fn enabled(&self, rule: &str) -> bool {
        !self.disabled.iter().any(|d| d == rule)
    }

    /// Whether any live sink is configured (capture then evaluates the rules).
    pub fn live(&self) -> bool {
        self.live_file.is_some()
            || self.syslog_udp.is_some()
            || self.syslog_socket.is_some()
            || self.webhook.is_some()
    }

    pub(crate) fn parse(
        src: &Src<'_>,
        path: &str,
        table: &DeTable<'_>,
        groups: &Groups,
    ) -> AlertRules {
        src.only_keys(path, table, &KEYS);
        let mut r = AlertRules::default();
        let mut hook = HookKeys::default();
        for (k, v) in table {
            let name = k.get_ref().as_ref();
            let key = join(path, name);
            // One key: its problem is kept and the reading goes on with the next key.
            let one = (|| -> Result<(), ConfigError> {
                match name {
                    "egress_bytes" => r.egress_bytes = size(src, &key, v)?,
                    "egress_window" => r.egress_window_ns = duration(src, &key, v)?,
                    "off_hours_bytes" => r.off_hours_bytes = size(src, &key, v)?,
                    "dscp_bytes" => r.dscp_bytes = size(src, &key, v)?,
                    "pair_bytes" => r.pair_bytes = size(src, &key, v)?,
                    "straggler_groups" => {
                        r.straggler_groups = Vec::new();
                        for it in src.strings(&key, v, "group names (strings)")? {
                            if groups.by_name(&it.text).is_none() {
                                src.keep::<()>(Err(
                                    groups.unknown(src, &it.path, &it.text, it.span)
                                ));
                                continue;
                            }
                            if !r.straggler_groups.contains(&it.text) {
                                r.straggler_groups.push(it.text);
                            }
                        }
                    }
                    "straggler_interval" => r.straggler_interval_ns = duration(src, &key, v)?,
                    "straggler_ratio" => r.straggler_ratio = fraction(src, &key, v)?,
                    "straggler_min_bytes" => r.straggler_min_bytes = size(src, &key, v)?,
                    "retransmission_rate" => r.retransmission_rate = fraction(src, &key, v)?,
                    "retransmission_min_segments" => {
                        r.retransmission_min_segments = count(src, &key, v)?
                    }
                    "zero_windows" => r.zero_windows = count(src, &key, v)?,
                    "ef_share" => {
                        let x = fraction(src, &key, v)?;
                        if x == 0.0 {
                            return Err(src.err(
                                v.span(),
                                &key,
                                ErrorKind::BadValue,
                                "a share of the link above 0, at most 1 (0.3)",
                                src.found(v),
                            ));
                        }
                        r.ef_share = Some(x);
                    }
                    "ef_share_for" => r.ef_share_for_ns = ms_duration(src, &key, v)?,
                    "microburst_for" => r.microburst_for_ns = ms_duration(src, &key, v)?,
                    "microburst_rate" => r.microburst_rate = Some(ms_rate(src, &key, v)?),
                    "microburst_class" => {
                        let t = src.string(&key, v, "a DSCP name or value (\"ef\", \"46\")")?;
                        r.microburst_class = Some(crate::dscp::parse_dscp(t).ok_or_else(|| {
                            src.err(
                                v.span(),
                                &key,
                                ErrorKind::BadDscp,
                                "a DSCP name (df, le, cs0-cs7, af11-af43, va, ef) or a number \
                                 0-63",
                                src.found(v),
                            )
                        })?);
                    }
                    "incast_senders" => {
                        let n = count(src, &key, v)?;
                        if !(4..=65536).contains(&n) {
                            return Err(src.err(
                                v.span(),
                                &key,
                                ErrorKind::BadValue,
                                "4 to 65536 senders (the index keeps the senders of a \
                                 destination from 4 within a millisecond)",
                                src.found(v),
                            ));
                        }
                        r.incast_senders = Some(n as u32);
                    }
                    "active_hours_bytes" => r.active_hours_bytes = size(src, &key, v)?,
                    "live_file" => {
                        let f = src.string(&key, v, "a file path (a string)")?;
                        if f.is_empty() {
                            return Err(src.err(
                                v.span(),
                                &key,
                                ErrorKind::BadValue,
                                "a file path",
                                "an empty string",
                            ));
                        }
                        r.live_file = Some(f.to_string());
                    }
                    "syslog_udp" => {
                        let t = nonempty(src, &key, v, "HOST:PORT (a string)")?;
                        let port = t.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()));
                        match port {
                            Some((h, Ok(p))) if !h.is_empty() && p != 0 => {}
                            _ => {
                                return Err(src.err(
                                    v.span(),
                                    &key,
                                    ErrorKind::BadValue,
                                    "HOST:PORT (\"127.0.0.1:514\", \"[::1]:514\", \"logs:514\")",
                                    src.found(v),
                                ))
                            }
                        }
                        r.syslog_udp = Some(t.to_string());
                    }
                    "syslog_socket" => {
                        r.syslog_socket = Some(nonempty(src, &key, v, "a socket path (a string)")?)
                    }
                    "syslog_facility" => {
                        let f = src.string(&key, v, "a facility name (a string)")?;
                        r.syslog_facility =
                            FACILITIES.iter().position(|n| *n == f).ok_or_else(|| {
                                src.err(
                                    v.span(),
                                    &key,
                                    ErrorKind::BadValue,
                                    format!("one of {}", FACILITIES.join(", ")),
                                    src.found(v),
                                )
                            })? as u8;
                    }
                    "webhook_url" => {
                        let u = nonempty(src, &key, v, "a URL (a string)")?;
                        let rest = u
                            .strip_prefix("http://")
                            .or_else(|| u.strip_prefix("https://"));
                        let host = rest.map(|r| r.split(['/', '?']).next().unwrap_or(""));
                        if host.is_none_or(str::is_empty) || u.contains(char::is_whitespace) {
                            return Err(src.err(
                                v.span(),
                                &key,
                                ErrorKind::BadValue,
                                "an http:// or https:// URL with a host",
                                src.found(v),
                            ));
                        }
                        hook.url = Some((u, v.span()));
                    }
                    "webhook_secret" => {
                        let t = nonempty(src, &key, v, "the HMAC key (a string)")?;
                        hook.secret = Some(SecretSource::Inline(Secret(t)));
                        hook.both |= std::mem::replace(&mut hook.seen_secret, true);
                    }
                    "webhook_secret_file" => {
                        let t = nonempty(src, &key, v, "a file path (a string)")?;
                        hook.secret = Some(SecretSource::File(t));
                        hook.both |= std::mem::replace(&mut hook.seen_secret, true);
                    }
                    "webhook_timeout" => hook.timeout_ns = Some(any_duration(src, &key, v)?),
                    "webhook_retries" => {
                        let n = count(src, &key, v)?;
                        if n > 10 {
                            return Err(src.err(
                                v.span(),
                                &key,
                                ErrorKind::BadValue,
                                "0 to 10 retries",
                                src.found(v),
                            ));
                        }
                        hook.retries = Some(n as u32);
                    }
                    "webhook_ca" => {
                        hook.ca = Some(nonempty(src, &key, v, "a file path (a string)")?)
                    }
                    "sink_queue" => {
                        let n = count(src, &key, v)?;
                        if n == 0 || n > 1_000_000 {
                            return Err(src.err(
                                v.span(),
                                &key,
                                ErrorKind::BadValue,
                                "1 to 1000000 events",
                                src.found(v),
                            ));
                        }
                        r.sink_queue = n as usize;
                    }
                    "evidence_max" => r.evidence_max = size(src, &key, v)?,
                    "live_every" => r.live_every_ns = duration(src, &key, v)?,
                    "suppress" => r.suppress_ns = duration(src, &key, v)?,
                    "release_after" => r.release_after_ns = duration(src, &key, v)?,
                    "disabled" => {
                        r.disabled = Vec::new();
                        for it in src.strings(&key, v, "rule names (strings)")? {
                            if !RULES.contains(&it.text.as_str()) {
                                src.keep::<()>(Err(src.err(
                                    it.span,
                                    &it.path,
                                    ErrorKind::BadValue,
                                    format!("one of {}", RULES.join(", ")),
                                    format!("{:?}", it.text),
                                )));
                                continue;
                            }
                            r.disabled.push(it.text);
                        }
                    }
                    _ => {}
                }
                Ok(())
            })();
            src.keep(one);
        }
        r.webhook = src.keep(hook.finish(src, path, table)).flatten();
        r
    }
}

/// The `webhook_*` keys as read, checked together once the table is read.
#[derive(Default)]
struct HookKeys {
    url: Option<(String, std::ops::Range<usize>)>,
    secret: Option<SecretSource>,
    seen_secret: bool,
    both: bool,
    timeout_ns: Option<u64>,
    retries: Option<u32>,
    ca: Option<String>,
}

impl HookKeys {
    fn finish(
        self,
        src: &Src<'_>,
        path: &str,
        table: &DeTable<'_>,
    ) -> Result<Option<Webhook>, ConfigError> {
        let span_of = |name: &str| {
            table
                .iter()
                .find(|(k, _)| k.get_ref().as_ref() == name)
                .map_or(0..0, |(_, v)| v.span())
        };
        if self.both {
            return Err(src.err(
                span_of("webhook_secret_file"),
                &join(path, "webhook_secret_file"),
                ErrorKind::BadValue,
                "one of webhook_secret and webhook_secret_file",
                "both",
            ));
        }
        let Some((url, span)) = self.url else {
            for name in ["webhook_secret", "webhook_secret_file", "webhook_timeout"]
                .into_iter()
                .chain(["webhook_retries", "webhook_ca"])
            {
                if table.iter().any(|(k, _)| k.get_ref().as_ref() == name) {
                    return Err(src.err(
                        span_of(name),
                        &join(path, name),
                        ErrorKind::MissingKey,
                        "webhook_url beside it",
                        "no webhook_url",
                    ));
                }
            }
            return Ok(None);
        };
        let Some(secret) = self.secret else {
            return Err(src.err(
                span,
                &join(path, "webhook_secret"),
                ErrorKind::MissingKey,
                "webhook_secret or webhook_secret_file beside webhook_url (the HMAC key)",
                "neither",
            ));
        };
        Ok(Some(Webhook {
            url,
            secret,
            timeout_ns: self.timeout_ns.unwrap_or(5_000_000_000),
            retries: self.retries.unwrap_or(3),
            ca: self.ca,
        }))
    }
}

/// A string that is not empty.
fn nonempty(
    src: &Src<'_>,
    key: &str,
    v: &Spanned<DeValue<'_>>,
    expected: &str,
) -> Result<String, ConfigError> {
    let t = src.string(key, v, expected)?;
    if t.is_empty() {
        return Err(src.err(
            v.span(),
            key,
            ErrorKind::BadValue,
            expected,
            "an empty string",
        ));
    }
    Ok(t.to_string())
}

/// A duration string, not zero, at most an hour, any precision (`"500ms"`, `"5s"`), in ns.
fn any_duration(src: &Src<'_>, key: &str, v: &Spanned<DeValue<'_>>) -> Result<u64, ConfigError> {
    const EXPECTED: &str = "a duration from 1ms to 1h (\"500ms\", \"5s\")";
    let DeValue::String(s) = v.get_ref() else {
        return Err(src.err(v.span(), key, ErrorKind::WrongType, EXPECTED, src.found(v)));
    };
    let ns = humantime::parse_duration(s)
        .ok()
        .and_then(|d| u64::try_from(d.as_nanos()).ok())
        .filter(|&ns| (1_000_000..=3_600_000_000_000).contains(&ns));
    ns.ok_or_else(|| src.err(v.span(), key, ErrorKind::BadValue, EXPECTED, src.found(v)))
}

/// A duration of whole milliseconds, 1 ms to 1 h (`"2ms"`, `"1s"`), in ns.
fn ms_duration(src: &Src<'_>, key: &str, v: &Spanned<DeValue<'_>>) -> Result<u64, ConfigError> {
    let ns = any_duration(src, key, v)?;
    if !ns.is_multiple_of(1_000_000) {
        return Err(src.err(
            v.span(),
            key,
            ErrorKind::BadValue,
            "whole milliseconds (\"2ms\", \"10ms\"): the series counts 1 ms bins",
            src.found(v),
        ));
    }
    Ok(ns)
}

/// `"80%"` (of the link) or a rate (`"8G"`).
fn ms_rate(src: &Src<'_>, key: &str, v: &Spanned<DeValue<'_>>) -> Result<MsRate, ConfigError> {
    const EXPECTED: &str = "a share of the link (\"80%\") or a rate (\"8G\", \"400M\")";
    let t = src.string(key, v, EXPECTED)?;
    let bad = || src.err(v.span(), key, ErrorKind::BadValue, EXPECTED, src.found(v));
    match t.trim().strip_suffix('%') {
        Some(p) => match p.trim().parse::<f64>() {
            Ok(p) if p > 0.0 && p <= 100.0 => Ok(MsRate::LinkPercent(p)),
            _ => Err(bad()),
        },
        None => crate::links::parse_rate(t)
            .map(MsRate::BitsPerSecond)
            .map_err(|_| bad()),
    }
}

/// A non-negative integer.
pub(crate) fn count(
    src: &Src<'_>,
    key: &str,
    v: &Spanned<DeValue<'_>>,
) -> Result<u64, ConfigError> {
    let bad = |what: String| {
        src.err(
            v.span(),
            key,
            ErrorKind::BadValue,
            "a count (0 or more)",
            what,
        )
    };
    match v.get_ref() {
        DeValue::Integer(i) => u64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
            .map_err(|_| bad(src.found(v))),
        _ => Err(src.err(
            v.span(),
            key,
            ErrorKind::WrongType,
            "an integer",
            src.found(v),
        )),
    }
}

/// A fraction in [0, 1].
fn fraction(src: &Src<'_>, key: &str, v: &Spanned<DeValue<'_>>) -> Result<f64, ConfigError> {
    let x: Option<f64> = match v.get_ref() {
        DeValue::Float(f) => f.as_str().replace('_', "").parse().ok(),
        DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
            .ok()
            .map(|n| n as f64),
        _ => {
            return Err(src.err(
                v.span(),
                key,
                ErrorKind::WrongType,
                "a number from 0 to 1",
                src.found(v),
            ))
        }
    };
    match x {
        Some(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(src.err(
            v.span(),
            key,
            ErrorKind::BadValue,
            "a number from 0 to 1",
            src.found(v),
        )),
    }
}

/// A byte size: an integer, or a string with a unit.
pub(crate) fn size(src: &Src<'_>, key: &str, v: &Spanned<DeValue<'_>>) -> Result<u64, ConfigError> {
    const EXPECTED: &str = "a size in bytes (an integer, or a string such as \"100M\", \"1GB\")";
    let text = match v.get_ref() {
        DeValue::Integer(_) => return count(src, key, v),
        DeValue::String(s) => s.as_ref(),
        _ => return Err(src.err(v.span(), key, ErrorKind::WrongType, EXPECTED, src.found(v))),
    };
    parse_size(text)
        .ok_or_else(|| src.err(v.span(), key, ErrorKind::BadValue, EXPECTED, src.found(v)))
}

/// A duration string, whole seconds and not zero, in ns.
pub(crate) fn duration(
    src: &Src<'_>,
    key: &str,
    v: &Spanned<DeValue<'_>>,
) -> Result<u64, ConfigError> {
    const EXPECTED: &str = "a duration of whole seconds (\"10s\", \"5m\", \"1h\")";
    let DeValue::String(s) = v.get_ref() else {
        return Err(src.err(v.span(), key, ErrorKind::WrongType, EXPECTED, src.found(v)));
    };
    let ns = humantime::parse_duration(s)
        .ok()
        .and_then(|d| u64::try_from(d.as_nanos()).ok())
        .filter(|&ns| ns > 0 && ns.is_multiple_of(1_000_000_000));
    ns.ok_or_else(|| src.err(v.span(), key, ErrorKind::BadValue, EXPECTED, src.found(v)))
}

/// `1048576`, `64K`, `1.5G`, `10GB` (the units of the command line's sizes).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let n: f64 = s[..split].parse().ok()?;
    let mult: u64 = match s[split..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    let v = n * mult as f64;
    (n.is_finite() && v <= u64::MAX as f64).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use crate::{Config, ErrorKind};

    #[test]
    fn defaults_without_the_section_and_overrides_with_it() {
        let c = Config::parse("", "c.toml").unwrap();
        assert_eq!(c.alerts(), &super::AlertRules::default());
        let c = Config::parse(
            "[groups]\ngpu = [\"10.10.0.0/24\"]\n[alerts]\negress_bytes = \"10M\"\n\
             egress_window = \"1m\"\nstraggler_groups = [\"gpu\"]\nstraggler_ratio = 0.75\n\
             zero_windows = 3\ndisabled = [\"tcp_zero_window\"]\ndscp_bytes = 1_000\n",
            "c.toml",
        )
        .unwrap();
        let a = c.alerts();
        assert_eq!(a.egress_bytes, 10 << 20);
        assert_eq!(a.egress_window_ns, 60_000_000_000);
        assert_eq!(a.straggler_groups, vec!["gpu".to_string()]);
        assert_eq!(a.straggler_ratio, 0.75);
        assert_eq!(a.zero_windows, 3);
        assert_eq!(a.dscp_bytes, 1000);
        assert!(!a.enabled("tcp_zero_window") && a.enabled("egress"));
        assert_eq!(a.off_hours_bytes, 1 << 30);
        assert_eq!(
            (a.live_file.as_deref(), a.suppress_ns),
            (None, 3_600_000_000_000)
        );
        let c = Config::parse(
            "[alerts]\nlive_file = \"/var/log/a.jsonl\"\nlive_every = \"2s\"\nsuppress = \"10m\"\n\
             release_after = \"1m\"\n",
            "c.toml",
        )
        .unwrap();
        let a = c.alerts();
        assert_eq!(a.release_after_ns, 60_000_000_000);
        assert_eq!(a.live_file.as_deref(), Some("/var/log/a.jsonl"));
        assert_eq!(
            (a.live_every_ns, a.suppress_ns),
            (2_000_000_000, 600_000_000_000)
        );
        assert!(Config::parse("[alerts]\nlive_file = \"\"\n", "c.toml").is_err());
    }

    #[test]
    fn sinks_and_the_evidence_cap() {
        let c = Config::parse(
            "[alerts]\nsyslog_udp = \"[::1]:514\"\nsyslog_socket = \"/dev/log\"\n\
             syslog_facility = \"local3\"\nwebhook_url = \"https://h.example:8443/x\"\n\
             webhook_secret_file = \"/etc/k\"\nwebhook_timeout = \"500ms\"\n\
             webhook_retries = 0\nsink_queue = 5\nevidence_max = \"1M\"\n",
            "c.toml",
        )
        .unwrap();
        let a = c.alerts();
        assert!(a.live() && a.live_file.is_none());
        assert_eq!(a.syslog_udp.as_deref(), Some("[::1]:514"));
        assert_eq!(a.syslog_socket.as_deref(), Some("/dev/log"));
        assert_eq!(a.syslog_facility, 19);
        let w = a.webhook.as_ref().unwrap();
        assert_eq!(w.url, "https://h.example:8443/x");
        assert_eq!(w.secret, super::SecretSource::File("/etc/k".into()));
        assert_eq!((w.timeout_ns, w.retries), (500_000_000, 0));
        assert_eq!((a.sink_queue, a.evidence_max), (5, 1 << 20));
        let d = Config::parse("", "c.toml").unwrap();
        let d = d.alerts();
        assert!(!d.live());
        assert_eq!(
            (d.syslog_facility, d.sink_queue, d.evidence_max),
            (3, 1000, 64 << 20)
        );
        // An inline secret is never printed.
        let c = Config::parse(
            "[alerts]\nwebhook_url = \"http://127.0.0.1:9/\"\nwebhook_secret = \"s3cr3t\"\n",
            "c.toml",
        )
        .unwrap();
        let w = c.alerts().webhook.as_ref().unwrap();
        assert_eq!((w.timeout_ns, w.retries), (5_000_000_000, 3));
        assert!(!format!("{:?}", c.alerts()).contains("s3cr3t"));
        assert!(!serde_json::to_string(c.alerts())
            .unwrap()
            .contains("s3cr3t"));
        for (text, key, kind) in [
            (
                "syslog_udp = \"nohost\"",
                "alerts.syslog_udp",
                ErrorKind::BadValue,
            ),
            (
                "syslog_udp = \"h:0\"",
                "alerts.syslog_udp",
                ErrorKind::BadValue,
            ),
            (
                "syslog_facility = \"local9\"",
                "alerts.syslog_facility",
                ErrorKind::BadValue,
            ),
            (
                "webhook_url = \"ftp://h/\"",
                "alerts.webhook_url",
                ErrorKind::BadValue,
            ),
            (
                "webhook_url = \"http:///x\"",
                "alerts.webhook_url",
                ErrorKind::BadValue,
            ),
            (
                "webhook_url = \"http://h/\"",
                "alerts.webhook_secret",
                ErrorKind::MissingKey,
            ),
            (
                "webhook_url = \"http://h/\"\nwebhook_secret = \"a\"\nwebhook_secret_file = \"b\"",
                "alerts.webhook_secret_file",
                ErrorKind::BadValue,
            ),
            (
                "webhook_retries = 2",
                "alerts.webhook_retries",
                ErrorKind::MissingKey,
            ),
            (
                "webhook_url = \"http://h/\"\nwebhook_secret = \"a\"\nwebhook_retries = 11",
                "alerts.webhook_retries",
                ErrorKind::BadValue,
            ),
            (
                "webhook_url = \"http://h/\"\nwebhook_secret = \"a\"\nwebhook_timeout = \"0s\"",
                "alerts.webhook_timeout",
                ErrorKind::BadValue,
            ),
            ("sink_queue = 0", "alerts.sink_queue", ErrorKind::BadValue),
            (
                "evidence_max = \"lots\"",
                "alerts.evidence_max",
                ErrorKind::BadValue,
            ),
        ] {
            let text = format!("[alerts]\n{text}\n");
            let e = Config::parse(&text, "c.toml").unwrap_err();
            let i = e.invalid().unwrap_or_else(|| panic!("{text}: {e}"));
            assert_eq!((i.key.as_str(), i.kind), (key, kind), "{text}: {e}");
        }
    }

    #[test]
    fn bad_values_name_key_and_line() {
        for (text, key, kind, line) in [
            (
                "[alerts]\nbogus = 1\n",
                "alerts.bogus",
                ErrorKind::UnknownKey,
                2,
            ),
            (
                "[alerts]\n\negress_bytes = \"10X\"\n",
                "alerts.egress_bytes",
                ErrorKind::BadValue,
                3,
            ),
            (
                "[alerts]\negress_bytes = -1\n",
                "alerts.egress_bytes",
                ErrorKind::BadValue,
                2,
            ),
            (
                "[alerts]\negress_window = \"1.5s\"\n",
                "alerts.egress_window",
                ErrorKind::BadValue,
                2,
            ),
            (
                "[alerts]\negress_window = 5\n",
                "alerts.egress_window",
                ErrorKind::WrongType,
                2,
            ),
            (
                "[alerts]\nstraggler_ratio = 1.5\n",
                "alerts.straggler_ratio",
                ErrorKind::BadValue,
                2,
            ),
            (
                "[alerts]\nstraggler_groups = [\"nope\"]\n",
                "alerts.straggler_groups[0]",
                ErrorKind::UnknownGroup,
                2,
            ),
            (
                "[alerts]\ndisabled = [\"x\"]\n",
                "alerts.disabled[0]",
                ErrorKind::BadValue,
                2,
            ),
            (
                "[alerts]\nzero_windows = \"3\"\n",
                "alerts.zero_windows",
                ErrorKind::WrongType,
                2,
            ),
        ] {
            let e = Config::parse(text, "c.toml").unwrap_err();
            let i = e.invalid().unwrap_or_else(|| panic!("{text}: {e}"));
            assert_eq!(
                (i.key.as_str(), i.kind, i.line),
                (key, kind, line),
                "{text}: {e}"
            );
            assert!(e.to_string().starts_with(&format!("c.toml:{line}:")), "{e}");
        }
    }

    #[test]
    fn millisecond_rules_parse_and_bad_values_name_the_line() {
        let c = Config::parse(
            "[alerts]\nef_share = 0.3\nef_share_for = \"2ms\"\nmicroburst_rate = \"80%\"\n\
             microburst_for = \"3ms\"\nmicroburst_class = \"ef\"\nincast_senders = 16\n\
             active_hours_bytes = \"1M\"\n",
            "c.toml",
        )
        .unwrap();
        let a = c.alerts();
        assert_eq!((a.ef_share, a.ef_share_for_ns), (Some(0.3), 2_000_000));
        assert_eq!(a.microburst_rate, Some(super::MsRate::LinkPercent(80.0)));
        assert_eq!(
            a.microburst_rate.unwrap().bps(Some(10_000_000_000)),
            Some(8_000_000_000)
        );
        assert_eq!(
            (a.microburst_for_ns, a.microburst_class),
            (3_000_000, Some(46))
        );
        assert_eq!(
            (a.incast_senders, a.active_hours_bytes),
            (Some(16), 1 << 20)
        );
        let d = Config::parse("", "c.toml").unwrap();
        assert_eq!(
            (d.alerts().ef_share, d.alerts().incast_senders),
            (None, None)
        );
        for (text, key, kind) in [
            ("ef_share = 0", "alerts.ef_share", ErrorKind::BadValue),
            ("ef_share = 1.5", "alerts.ef_share", ErrorKind::BadValue),
            (
                "ef_share_for = \"1.5ms\"",
                "alerts.ef_share_for",
                ErrorKind::BadValue,
            ),
            (
                "microburst_rate = \"120%\"",
                "alerts.microburst_rate",
                ErrorKind::BadValue,
            ),
            (
                "microburst_rate = \"fast\"",
                "alerts.microburst_rate",
                ErrorKind::BadValue,
            ),
            (
                "microburst_class = \"zz\"",
                "alerts.microburst_class",
                ErrorKind::BadDscp,
            ),
            (
                "incast_senders = 3",
                "alerts.incast_senders",
                ErrorKind::BadValue,
            ),
            (
                "active_hours_bytes = \"x\"",
                "alerts.active_hours_bytes",
                ErrorKind::BadValue,
            ),
        ] {
            let text = format!("[alerts]\n\n{text}\n");
            let e = Config::parse(&text, "c.toml").unwrap_err();
            let i = e.invalid().unwrap_or_else(|| panic!("{text}: {e}"));
            assert_eq!(
                (i.key.as_str(), i.kind, i.line),
                (key, kind, 3),
                "{text}: {e}"
            );
            assert!(e.to_string().starts_with("c.toml:3:"), "{e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(super::parse_size("64K"), Some(65536));
        assert_eq!(super::parse_size("1GB"), Some(1_000_000_000));
        assert_eq!(super::parse_size("1.5M"), Some(1_572_864));
        assert_eq!(super::parse_size("x"), None);
        assert_eq!(super::parse_size(""), None);
    }
}
