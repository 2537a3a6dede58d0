//! `[expect.GROUP]`: what a group is expected to send (the "baseline ledger"): a rate
//! ceiling at a stated resolution and the hours it is active. The `rate_ceiling` and
//! `active_hours` alert rules hold each group to its entry.
//!
//! ```text
//! [expect.backup]
//! max_rate = "2G"          bits per second, as [links] writes rates ("2G", "400M")
//! per = "10ms"             the resolution the ceiling holds at: 1ms, 10ms, 100ms or 1s
//! hours = "22:00-06:00"    active from..to every day (overnight when to < from)
//! timezone = "UTC"         the hours' zone (default: [work_hours]'s, else UTC)
//! ```
//!
//! `max_rate` and `per` go together (`per` defaults to `1s`); an entry may hold only
//! `hours`. The group must be defined in `[groups]`.

use jiff::tz::{TimeZone, TimeZoneDatabase};
use serde::Serialize;
use toml::de::DeTable;

use crate::error::ErrorKind;
use crate::groups::{GroupId, Groups};
use crate::hours::{hhmm, parse_hhmm, WorkHours};
use crate::walk::{join, Src};

/// The keys of one `[expect.GROUP]` table.
pub const EXPECT_KEYS: [&str; 4] = ["max_rate", "per", "hours", "timezone"];

/// The resolutions a ceiling may hold at, in milliseconds (the index's millisecond series
/// answers each exactly for the link; see docs/alerts.md for a group's).
pub const PER_MS: [u64; 4] = [1, 10, 100, 1000];

/// A group's rate ceiling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ceiling {
    pub bits_per_second: u64,
    /// The resolution: 1, 10, 100 or 1000 ms.
    pub per_ms: u64,
}

impl Ceiling {
    /// The most bytes one window of `per_ms` may hold.
    pub fn bytes_per_window(&self) -> u64 {
        (u128::from(self.bits_per_second) * u128::from(self.per_ms) / 8000) as u64
    }
}

/// The hours a group is active: every day from `start` to `end` (minutes after local
/// midnight; overnight when `end < start`), in a zone.
#[derive(Debug, Clone)]
pub struct ActiveHours {
    pub start: u16,
    pub end: u16,
    zone_name: String,
    zone: TimeZone,
}

impl Serialize for ActiveHours {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.describe())
    }
}

impl ActiveHours {
    /// Whether the instant `unix_ns` is inside the hours, as local time in the zone.
    pub fn contains(&self, unix_ns: u64) -> bool {
        let Ok(ts) = jiff::Timestamp::from_nanosecond(i128::from(unix_ns)) else {
            return false;
        };
        let local = self.zone.to_datetime(ts);
        let minute = u16::try_from(local.hour()).unwrap_or(0) * 60
            + u16::try_from(local.minute()).unwrap_or(0);
        if self.start < self.end {
            (self.start..self.end).contains(&minute)
        } else {
            minute >= self.start || minute < self.end
        }
    }

    /// `22:00-06:00 UTC`.
    pub fn describe(&self) -> String {
        format!("{}-{} {}", hhmm(self.start), hhmm(self.end), self.zone_name)
    }
}

/// One group's expectations.
#[derive(Debug, Clone, Serialize)]
pub struct Expectation {
    #[serde(skip)]
    pub group: GroupId,
    #[serde(rename = "group")]
    pub group_name: String,
    pub max_rate: Option<Ceiling>,
    pub hours: Option<ActiveHours>,
}

/// `"22:00-06:00"` -> (1320, 360).
fn parse_range(text: &str) -> Option<(u16, u16)> {
    let (a, b) = text.split_once('-')?;
    let a = parse_hhmm(a.trim()).filter(|&m| m < 1440)?;
    let b = parse_hhmm(b.trim())?;
    (a != b).then_some((a, b))
}

/// `"10ms"` -> 10 (only the resolutions of [`PER_MS`]).
fn parse_per(text: &str) -> Option<u64> {
    let ns = humantime::parse_duration(text.trim()).ok()?.as_nanos();
    PER_MS
        .into_iter()
        .find(|&ms| u128::from(ms) * 1_000_000 == ns)
}

pub(crate) fn parse(
    src: &Src<'_>,
    path: &str,
    table: &DeTable<'_>,
    groups: &Groups,
    work_hours: Option<&WorkHours>,
) -> Vec<Expectation> {
    let mut out = Vec::new();
    for (k, v) in table {
        let name = k.get_ref().as_ref();
        let key = join(path, name);
        let Some(group) = groups.by_name(name) else {
            src.keep::<()>(Err(groups.unknown(src, &key, name, k.span())));
            continue;
        };
        let t = src.table(
            &key,
            v,
            "a table of expectations (max_rate, per, hours, timezone)",
        );
        let Some(t) = src.keep(t) else { continue };
        src.only_keys(&key, t, &EXPECT_KEYS);
        let field = |n: &str, expected: &str| {
            t.get(n).map(|v| {
                let k = join(&key, n);
                src.string(&k, v, expected)
                    .map(|s| (k.clone(), s.to_string(), v.span()))
            })
        };
        let rate = field("max_rate", "a rate in bits per second (\"2G\")").and_then(|r| {
            let (k, s, span) = src.keep(r)?;
            let got = crate::links::parse_rate(&s).map_err(|_| {
                src.err(
                    span,
                    &k,
                    ErrorKind::BadValue,
                    "a rate in bits per second (\"2G\", \"400M\", \"2.5Gbps\")",
                    format!("{s:?}"),
                )
            });
            src.keep(got)
        });
        let per =
            field("per", "a resolution (\"1ms\", \"10ms\", \"100ms\", \"1s\")").and_then(|r| {
                let (k, s, span) = src.keep(r)?;
                let got = parse_per(&s).ok_or_else(|| {
                    src.err(
                        span,
                        &k,
                        ErrorKind::BadValue,
                        "one of the resolutions \"1ms\", \"10ms\", \"100ms\", \"1s\"",
                        format!("{s:?}"),
                    )
                });
                src.keep(got)
            });
        if per.is_some() && rate.is_none() && !t.contains_key("max_rate") {
            let span = t.get("per").map_or(k.span(), |v| v.span());
            src.keep::<()>(Err(src.err(
                span,
                &join(&key, "per"),
                ErrorKind::MissingKey,
                "max_rate beside it (the ceiling `per` is the resolution of)",
                "no max_rate",
            )));
        }
        let zone = match field("timezone", "an IANA time zone name (\"UTC\")") {
            Some(r) => src.keep(r).and_then(|(k, s, span)| {
                let z = TimeZoneDatabase::bundled().get(&s).map_err(|_| {
                    src.err(
                        span,
                        &k,
                        ErrorKind::UnknownZone,
                        "an IANA time zone name (\"Europe/Berlin\", \"UTC\")",
                        format!("{s:?}"),
                    )
                });
                src.keep(z).map(|z| (s, z))
            }),
            None => Some(match work_hours {
                Some(w) => (
                    w.timezone().to_string(),
                    TimeZoneDatabase::bundled()
                        .get(w.timezone())
                        .unwrap_or(TimeZone::UTC),
                ),
                None => ("UTC".to_string(), TimeZone::UTC),
            }),
        };
        let hours = field("hours", "a range of times (\"22:00-06:00\")").and_then(|r| {
            let (k, s, span) = src.keep(r)?;
            let got = parse_range(&s).ok_or_else(|| {
                src.err(
                    span,
                    &k,
                    ErrorKind::BadTime,
                    "HH:MM-HH:MM, two different times of day (\"22:00-06:00\", \
                     \"08:00-24:00\")",
                    format!("{s:?}"),
                )
            });
            let (start, end) = src.keep(got)?;
            let (zone_name, zone) = zone.clone()?;
            Some(ActiveHours {
                start,
                end,
                zone_name,
                zone,
            })
        });
        out.push(Expectation {
            group,
            group_name: name.to_string(),
            max_rate: rate.map(|bits_per_second| Ceiling {
                bits_per_second,
                per_ms: per.unwrap_or(1000),
            }),
            hours,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::{Config, ErrorKind};

    #[test]
    fn expectations_parse_and_hours_wrap_midnight() {
        let c = Config::parse(
            "[groups]\nbackup = [\"10.9.0.0/24\"]\ngpu = [\"10.1.0.0/24\"]\n\
             [expect.backup]\nmax_rate = \"2G\"\nper = \"10ms\"\nhours = \"22:00-06:00\"\n\
             [expect.gpu]\nhours = \"08:00-18:00\"\ntimezone = \"Europe/Berlin\"\n",
            "c.toml",
        )
        .unwrap();
        let e = c.expectations();
        assert_eq!(e.len(), 2);
        let b = &e[0];
        assert_eq!(b.group_name, "backup");
        let m = b.max_rate.as_ref().unwrap();
        assert_eq!((m.bits_per_second, m.per_ms), (2_000_000_000, 10));
        assert_eq!(m.bytes_per_window(), 2_500_000);
        let h = b.hours.as_ref().unwrap();
        let at = |hh: u64, mm: u64| (hh * 3600 + mm * 60) * 1_000_000_000;
        assert!(h.contains(at(23, 0)) && h.contains(at(5, 59)) && h.contains(at(22, 0)));
        assert!(!h.contains(at(6, 0)) && !h.contains(at(12, 0)));
        assert_eq!(h.describe(), "22:00-06:00 UTC");
        // 07:30 UTC is 08:30 in Berlin (winter).
        let g = e[1].hours.as_ref().unwrap();
        assert!(g.contains(at(7, 30)) && !g.contains(at(6, 30)));
        assert!(e[1].max_rate.is_none());
    }

    #[test]
    fn bad_entries_name_the_line_and_what_was_expected() {
        for (text, key, kind, line) in [
            (
                "[expect.nope]\nhours = \"22:00-06:00\"\n",
                "expect.nope",
                ErrorKind::UnknownGroup,
                3,
            ),
            (
                "[expect.g]\nmax_rate = \"fast\"\n",
                "expect.g.max_rate",
                ErrorKind::BadValue,
                4,
            ),
            (
                "[expect.g]\nmax_rate = \"2G\"\nper = \"5ms\"\n",
                "expect.g.per",
                ErrorKind::BadValue,
                5,
            ),
            (
                "[expect.g]\nper = \"10ms\"\n",
                "expect.g.per",
                ErrorKind::MissingKey,
                4,
            ),
            (
                "[expect.g]\nhours = \"22:00\"\n",
                "expect.g.hours",
                ErrorKind::BadTime,
                4,
            ),
            (
                "[expect.g]\nhours = \"06:00-06:00\"\n",
                "expect.g.hours",
                ErrorKind::BadTime,
                4,
            ),
            (
                "[expect.g]\nhours = 22\n",
                "expect.g.hours",
                ErrorKind::WrongType,
                4,
            ),
            (
                "[expect.g]\nhours = \"01:00-02:00\"\ntimezone = \"Mars/Base\"\n",
                "expect.g.timezone",
                ErrorKind::UnknownZone,
                5,
            ),
            (
                "[expect.g]\nrate = \"2G\"\n",
                "expect.g.rate",
                ErrorKind::UnknownKey,
                4,
            ),
            ("[expect]\ng = 1\n", "expect.g", ErrorKind::WrongType, 4),
        ] {
            let text = format!("[groups]\ng = [\"10.0.0.0/8\"]\n{text}");
            let e = Config::parse(&text, "c.toml").unwrap_err();
            let i = e.invalid().unwrap_or_else(|| panic!("{text}: {e}"));
            assert_eq!(
                (i.key.as_str(), i.kind, i.line),
                (key, kind, line),
                "{text}: {e}"
            );
            assert!(e.to_string().starts_with(&format!("c.toml:{line}:")), "{e}");
            assert!(!i.expected.is_empty(), "{e}");
        }
    }
}
