//! `[work_hours]`: the days and local times counted as working time, in an IANA time zone.
//!
//! ```text
//! days = "mon-fri"  start = "08:00"  end = "19:00"  timezone = "Europe/Berlin"
//! WorkHours::contains(unix_ns) -> the instant in the zone (jiff, bundled tz database, so
//!   daylight-saving changes follow the zone's rules on any machine) -> weekday, minute
//!   of the day -> start <= minute < end on a listed day
//! ```
//!
//! When `end` is before `start` the range runs overnight: it starts on a listed day and ends
//! on the next day (`days = "fri"`, 22:00-06:00 holds Saturday 05:00). `end = "24:00"` is the
//! end of the day.

use jiff::tz::{TimeZone, TimeZoneDatabase};
use jiff::Timestamp;
use serde::Serialize;
use toml::de::DeTable;

use crate::error::{ConfigError, ErrorKind};
use crate::walk::{join, Src};

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const FULL: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// The working week and day, in a time zone.
#[derive(Debug, Clone)]
pub struct WorkHours {
    /// Monday first.
    days: [bool; 7],
    /// Minutes after local midnight: start inclusive, end exclusive (1440: midnight).
    start: u16,
    end: u16,
    zone_name: String,
    zone: TimeZone,
}

/// `WorkHours` as `--json` prints it.
#[derive(Serialize)]
struct WorkHoursJson<'a> {
    days: String,
    start: String,
    end: String,
    overnight: bool,
    timezone: &'a str,
    description: String,
}

impl Serialize for WorkHours {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WorkHoursJson {
            days: self.days_text(),
            start: hhmm(self.start),
            end: hhmm(self.end),
            overnight: self.overnight(),
            timezone: &self.zone_name,
            description: self.describe(),
        }
        .serialize(s)
    }
}

impl WorkHours {
    /// Whether the instant `unix_ns` (nanoseconds since the Unix epoch, UTC) falls in the
    /// working hours, read as local time in the zone.
    pub fn contains(&self, unix_ns: u64) -> bool {
        let Ok(ts) = Timestamp::from_nanosecond(i128::from(unix_ns)) else {
            return false;
        };
        let local = self.zone.to_datetime(ts);
        let day = usize::from(local.weekday().to_monday_zero_offset().unsigned_abs());
        let minute = u16::try_from(local.hour()).unwrap_or(0) * 60
            + u16::try_from(local.minute()).unwrap_or(0);
        if self.start < self.end {
            self.days[day] && (self.start..self.end).contains(&minute)
        } else {
            let yesterday = (day + 6) % 7;
            (self.days[day] && minute >= self.start) || (self.days[yesterday] && minute < self.end)
        }
    }

    /// One line: `mon-fri 08:00-19:00 Europe/Berlin`, with `(overnight, ends the next day)`
    /// when it runs past midnight.
    pub fn describe(&self) -> String {
        let overnight = if self.overnight() {
            " (overnight, ends the next day)"
        } else {
            ""
        };
        format!(
            "{} {}-{}{overnight} {}",
            self.days_text(),
            hhmm(self.start),
            hhmm(self.end),
            self.zone_name
        )
    }

    /// The IANA name of the zone.
    pub fn timezone(&self) -> &str {
        &self.zone_name
    }

    /// Whether `end` is before `start`.
    pub fn overnight(&self) -> bool {
        self.end < self.start
    }

    /// The days in canonical form: runs of three or more as ranges (`mon-fri,sun`).
    pub fn days_text(&self) -> String {
        let mut parts = Vec::new();
        let mut d = 0;
        while d < 7 {
            if !self.days[d] {
                d += 1;
                continue;
            }
            let mut e = d;
            while e + 1 < 7 && self.days[e + 1] {
                e += 1;
            }
            match e - d {
                0 => parts.push(DAYS[d].to_string()),
                1 => parts.push(format!("{},{}", DAYS[d], DAYS[e])),
                _ => parts.push(format!("{}-{}", DAYS[d], DAYS[e])),
            }
            d = e + 1;
        }
        parts.join(",")
    }

    /// The `[work_hours]` table; `header` is the span of its key, for a missing key. `None`
    /// after keeping (see [`Src::keep`]) each problem found, every key checked.
    pub(crate) fn parse(
        src: &Src<'_>,
        path: &str,
        header: std::ops::Range<usize>,
        table: &DeTable<'_>,
    ) -> Option<WorkHours> {
        const KEYS: [&str; 4] = ["days", "start", "end", "timezone"];
        src.only_keys(path, table, &KEYS);
        let get = |name: &str, expected: &str| {
            let key = join(path, name);
            match table.get(name) {
                Some(v) => Ok((key.clone(), src.string(&key, v, expected)?, v.span())),
                None => Err(src.err(
                    header.clone(),
                    &key,
                    ErrorKind::MissingKey,
                    format!("`{name}` = {expected}"),
                    format!("[{path}] without it"),
                )),
            }
        };
        let days = get("days", "a string of days (\"mon-fri\", \"mon,wed,fri\")").and_then(
            |(key, text, span)| {
                parse_days(text).map_err(|why| {
                    src.err(
                        span,
                        &key,
                        ErrorKind::BadDays,
                        "days mon..sun, comma-separated, ranges with '-' (\"mon-fri\", \"mon-fri,sun\")",
                        format!("{text:?} ({why})"),
                    )
                })
            },
        );
        let days = src.keep(days);
        let time =
            |name: &str, allow_24: bool| -> Result<(u16, std::ops::Range<usize>), ConfigError> {
                let (key, text, span) = get(name, "a time of day as a string (\"08:00\")")?;
                let m = parse_hhmm(text)
                    .filter(|&m| m < 1440 || (allow_24 && m == 1440))
                    .ok_or_else(|| {
                        let range = if allow_24 {
                            "00:00 to 24:00"
                        } else {
                            "00:00 to 23:59"
                        };
                        src.err(
                            span.clone(),
                            &key,
                            ErrorKind::BadTime,
                            format!("a time of day HH:MM, {range}"),
                            format!("{text:?}"),
                        )
                    })?;
                Ok((m, span))
            };
        let start = src.keep(time("start", false));
        let end = src.keep(time("end", true));
        if let (Some((start, _)), Some((end, end_span))) = (&start, &end) {
            if start == end {
                src.keep::<()>(Err(src.err(
                    end_span.clone(),
                    &join(path, "end"),
                    ErrorKind::BadTime,
                    "an end different from the start (\"00:00\" to \"24:00\" for whole days)",
                    format!("start and end both {}", hhmm(*start)),
                )));
                return None;
            }
        }
        let zone = get(
            "timezone",
            "an IANA time zone name (\"Europe/Berlin\", \"UTC\")",
        )
        .and_then(|(key, zone_name, span)| {
            let zone = TimeZoneDatabase::bundled().get(zone_name).map_err(|_| {
                src.err(
                    span,
                    &key,
                    ErrorKind::UnknownZone,
                    "an IANA time zone name (\"Europe/Berlin\", \"America/New_York\", \"UTC\")",
                    format!("{zone_name:?}"),
                )
            })?;
            Ok((zone_name, zone))
        });
        let (zone_name, zone) = src.keep(zone)?;
        Some(WorkHours {
            days: days?,
            start: start?.0,
            end: end?.0,
            zone_name: zone_name.to_string(),
            zone,
        })
    }
}

/// `"mon-fri,sun"` -> Monday-first flags. Ranges may wrap (`fri-mon`).
fn parse_days(text: &str) -> Result<[bool; 7], String> {
    let day = |s: &str| -> Result<usize, String> {
        let l = s.trim().to_ascii_lowercase();
        DAYS.iter()
            .position(|d| *d == l)
            .or_else(|| FULL.iter().position(|d| *d == l))
            .ok_or_else(|| format!("`{}` is not a day", s.trim()))
    };
    let mut days = [false; 7];
    for part in text.split(',') {
        if part.trim().is_empty() {
            return Err("an empty item".to_string());
        }
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (day(a)?, day(b)?);
                let mut d = a;
                loop {
                    days[d] = true;
                    if d == b {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => days[day(part)?] = true,
        }
    }
    Ok(days)
}

/// `"08:00"` -> 480 minutes; `"24:00"` -> 1440.
pub(crate) fn parse_hhmm(text: &str) -> Option<u16> {
    let (h, m) = text.split_once(':')?;
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return None;
    }
    if !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    if m >= 60 || h > 24 || (h == 24 && m != 0) {
        return None;
    }
    Some(h * 60 + m)
}

pub(crate) fn hhmm(m: u16) -> String {
    format!("{:02}:{:02}", m / 60, m % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_parse_lists_ranges_and_wraps() {
        let d = |s: &str| parse_days(s).map(|d| d.map(u8::from));
        assert_eq!(d("mon-fri"), Ok([1, 1, 1, 1, 1, 0, 0]));
        assert_eq!(d("mon,wed,fri"), Ok([1, 0, 1, 0, 1, 0, 0]));
        assert_eq!(d("sat-sun"), Ok([0, 0, 0, 0, 0, 1, 1]));
        assert_eq!(d("mon-fri,sun"), Ok([1, 1, 1, 1, 1, 0, 1]));
        assert_eq!(d("fri-mon"), Ok([1, 0, 0, 0, 1, 1, 1]));
        assert_eq!(d("Monday - Wednesday"), Ok([1, 1, 1, 0, 0, 0, 0]));
        assert!(d("").is_err());
        assert!(d("mon,,fri").is_err());
        assert!(d("mon-").is_err());
        assert!(d("funday").unwrap_err().contains("funday"));
    }

    #[test]
    fn times_parse() {
        assert_eq!(parse_hhmm("08:00"), Some(480));
        assert_eq!(parse_hhmm("8:05"), Some(485));
        assert_eq!(parse_hhmm("23:59"), Some(1439));
        assert_eq!(parse_hhmm("24:00"), Some(1440));
        for bad in [
            "24:01", "25:00", "08:60", "08", "08:0", "-1:00", "+8:00", "08:00:00", "", ":",
        ] {
            assert_eq!(parse_hhmm(bad), None, "{bad}");
        }
    }
}
