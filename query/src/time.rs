//! Time expressions: the instants, relative times and durations a query's window is written
//! in, and the one way capsule prints an instant.
//!
//! Every instant inside capsule is nanoseconds since the Unix epoch (`u64`). A person writes
//! RFC 3339 with up to nine fractional digits (`2026-11-30T02:00:01.5Z`, any offset), Unix
//! seconds with a fraction (`1796004001.5`), `@NANOS`, a date (`2026-11-30`, midnight UTC),
//! `now`, a duration before now (`-10m`), or, for the end of a window, a duration after its
//! start (`+1ms`, see [`TimeArg`]). Parsing never panics; every error names the input, what
//! was expected ([`ACCEPTED`]) and where it went wrong.

use std::time::Duration;

use crate::excerpt::quoted;

/// A time or duration that could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum TimeError {
    /// Not a duration.
    #[error("{}: not a duration; e.g. 10s, 100ms, 5m", quoted(input))]
    Duration {
        input: String,
        #[source]
        source: humantime::DurationError,
    },
    /// Not an instant (or a relative time) of any accepted form.
    #[error("{}: {problem}", quoted(input))]
    Instant { input: String, problem: String },
    /// Longer than any time or duration is ([`MAX_TIME_LEN`] bytes).
    #[error(
        "{}: expected a time or duration of at most {MAX_TIME_LEN} bytes",
        quoted(input)
    )]
    TooLong { input: String },
}

/// Longest time or duration text accepted, in bytes: the longest RFC 3339 instant with
/// nine fractional digits and an offset is 35; this leaves room for spaces in durations.
pub const MAX_TIME_LEN: usize = 100;

fn too_long(s: &str) -> Result<(), TimeError> {
    if s.len() > MAX_TIME_LEN {
        return Err(TimeError::TooLong {
            input: s.to_string(),
        });
    }
    Ok(())
}

/// The forms a time on the command line may take, for error messages.
pub const ACCEPTED: &str =
    "expected RFC 3339 (2026-11-30T02:00:00Z, 2026-11-30 02:00:00.5+01:00), \
a date (2026-11-30, midnight UTC), Unix seconds (1796004000.5), @NANOS, now, or a duration \
before now (-10m, -2h30m)";

fn bad(input: &str, problem: impl Into<String>) -> TimeError {
    TimeError::Instant {
        input: input.to_string(),
        problem: problem.into(),
    }
}

/// Parses a duration: `10s`, `100ms`, `1m`, `2h 30m`.
pub fn parse_duration(s: &str) -> Result<Duration, TimeError> {
    too_long(s)?;
    humantime::parse_duration(s).map_err(|source| TimeError::Duration {
        input: s.to_string(),
        source,
    })
}

/// Parses an instant: RFC 3339 with up to 9 fractional digits, a date alone (midnight UTC),
/// Unix seconds (with a fraction), or `@NANOS`. Returns ns since the epoch.
pub fn parse_instant(s: &str) -> Result<u64, TimeError> {
    too_long(s)?;
    let t = s.trim();
    if let Some(ns) = t.strip_prefix('@') {
        return ns
            .parse::<u64>()
            .map_err(|_| bad(s, "expected @ followed by nanoseconds since the epoch"));
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') && !t.is_empty() {
        let (secs, frac) = t.split_once('.').unwrap_or((t, ""));
        if frac.len() > 9 || frac.contains('.') {
            return Err(bad(s, "at most 9 fractional digits"));
        }
        let secs: u64 = secs.parse().map_err(|_| bad(s, "bad Unix seconds"))?;
        let frac_ns: u64 = if frac.is_empty() {
            0
        } else {
            format!("{frac:0<9}")
                .parse()
                .map_err(|_| bad(s, "bad fraction"))?
        };
        return secs
            .checked_mul(1_000_000_000)
            .and_then(|n| n.checked_add(frac_ns))
            .ok_or_else(|| bad(s, "too far in the future"));
    }
    // A date alone is its midnight, UTC.
    let full;
    let t = if t.len() == 10 && t.as_bytes().get(4) == Some(&b'-') {
        full = format!("{t}T00:00:00Z");
        full.as_str()
    } else {
        t
    };
    parse_rfc3339(t).map_err(|e| bad(s, format!("{e}; {ACCEPTED}")))
}

/// Parses an RFC 3339 timestamp (`2026-11-30T02:00:00.123456789+01:00`, `Z` for UTC, `T`
/// or a space between date and time, up to 9 fractional digits) into ns since the epoch.
fn parse_rfc3339(s: &str) -> std::result::Result<u64, String> {
    fn num(s: &str, at: usize, len: usize, what: &str) -> std::result::Result<i64, String> {
        let part = s
            .get(at..at + len)
            .ok_or_else(|| format!("{what} missing at position {at}"))?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "expected {len} digits of {what} at position {at}, found {part:?}"
            ));
        }
        part.parse().map_err(|_| format!("bad {what}"))
    }
    fn expect(s: &str, at: usize, chars: &[u8]) -> std::result::Result<(), String> {
        match s.as_bytes().get(at) {
            Some(c) if chars.contains(c) => Ok(()),
            other => Err(format!(
                "expected {:?} at position {at}, found {:?}",
                chars.iter().map(|&c| c as char).collect::<String>(),
                other.map(|&c| c as char)
            )),
        }
    }
    let (year, month, day) = (
        num(s, 0, 4, "year")?,
        num(s, 5, 2, "month")?,
        num(s, 8, 2, "day")?,
    );
    expect(s, 4, b"-")?;
    expect(s, 7, b"-")?;
    expect(s, 10, b"Tt ")?;
    let (hour, min, sec) = (
        num(s, 11, 2, "hour")?,
        num(s, 14, 2, "minute")?,
        num(s, 17, 2, "second")?,
    );
    expect(s, 13, b":")?;
    expect(s, 16, b":")?;
    let mut at = 19;
    let mut frac_ns = 0i64;
    if s.as_bytes().get(at) == Some(&b'.') {
        let digits = s[at + 1..].bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(format!(
                "expected 1 to 9 fractional digits at position {}",
                at + 1
            ));
        }
        frac_ns = num(s, at + 1, digits, "fraction")? * 10i64.pow(9 - digits as u32);
        at += 1 + digits;
    }
    let offset_s = match s.as_bytes().get(at) {
        Some(b'Z' | b'z') if at + 1 == s.len() => 0,
        Some(&sign @ (b'+' | b'-')) if at + 6 == s.len() => {
            expect(s, at + 3, b":")?;
            let (oh, om) = (
                num(s, at + 1, 2, "offset hours")?,
                num(s, at + 4, 2, "offset minutes")?,
            );
            if oh > 23 || om > 59 {
                return Err(format!("offset {} is out of range", &s[at..]));
            }
            let o = oh * 3600 + om * 60;
            if sign == b'+' {
                o
            } else {
                -o
            }
        }
        // The text ends after the seconds: a time with no zone, which would be read in
        // some zone or other. Say how to write it.
        None => {
            return Err(format!(
                "the time has no zone: add Z for UTC ({s}Z) or an offset ({s}+01:00)"
            ))
        }
        _ => {
            return Err(format!(
                "expected Z or an offset like +01:00 at position {at}"
            ))
        }
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month[(month - 1) as usize] {
        return Err(format!("{year:04}-{month:02}-{day:02} is not a date"));
    }
    if hour > 23 || min > 59 || sec > 60 {
        return Err(format!("{hour:02}:{min:02}:{sec:02} is not a time of day"));
    }
    // Days from 1970-01-01 to the date (proleptic Gregorian; H. Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_s;
    if secs < 0 {
        return Err("before 1970".into());
    }
    (secs as u64)
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(frac_ns as u64))
        .ok_or_else(|| "too far in the future".into())
}

/// Parses a time given on the command line: an instant ([`parse_instant`]), `now`, or a
/// duration before now (`-10m`, `-2h30m`, `-1.5s`). `now_ns` is the wall clock.
pub fn parse_time(s: &str, now_ns: u64) -> Result<u64, TimeError> {
    too_long(s)?;
    let t = s.trim();
    if t == "now" {
        return Ok(now_ns);
    }
    if let Some(ago) = t.strip_prefix('-') {
        let d = parse_duration(ago).map_err(|e| {
            bad(
                s,
                format!("expected a duration before now, like -10m or -2h ({e})"),
            )
        })?;
        return Ok(now_ns.saturating_sub(d.as_nanos().min(u128::from(u64::MAX)) as u64));
    }
    parse_instant(t)
}

/// A time on the command line before it is resolved: an instant, or (the end of a window
/// only) a duration after the window's start, written `+DURATION` (`--to +1ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeArg {
    /// Nanoseconds since the epoch (relative forms before now already resolved).
    At(u64),
    /// This long after the start of the window.
    AfterStart(Duration),
}

impl TimeArg {
    /// Parses a window's end: `+DURATION`, or any form of [`parse_time`].
    pub fn parse_end(s: &str, now_ns: u64) -> Result<TimeArg, TimeError> {
        too_long(s)?;
        match s.trim().strip_prefix('+') {
            Some(d) => parse_duration(d).map(TimeArg::AfterStart).map_err(|e| {
                bad(
                    s,
                    format!("expected a duration after --from, like +1ms or +10m ({e})"),
                )
            }),
            None => parse_time(s, now_ns).map(TimeArg::At),
        }
    }

    /// The instant, given the window's start `from` (needed by `+DURATION`; `None` when the
    /// window has no start, which is an error for that form).
    pub fn resolve(self, from: Option<u64>) -> Result<u64, String> {
        match self {
            TimeArg::At(ns) => Ok(ns),
            TimeArg::AfterStart(d) => {
                let from = from.ok_or("--to +DURATION needs --from")?;
                let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                Ok(from.saturating_add(d))
            }
        }
    }
}

/// Formats ns since the epoch as RFC 3339 with nanoseconds.
pub fn format_instant(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    humantime::format_rfc3339_nanos(t).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_huge_time_gives_a_short_error() {
        let huge = "1".repeat(100_000);
        for e in [
            super::parse_time(&huge, 0).unwrap_err(),
            super::parse_instant(&huge).unwrap_err(),
            super::parse_duration(&huge).unwrap_err(),
        ] {
            let msg = e.to_string();
            assert!(msg.len() < 400 && msg.contains("(100000 bytes)"), "{msg}");
        }
        let msg = super::parse_instant(&"x".repeat(90))
            .unwrap_err()
            .to_string();
        assert!(msg.len() < 400, "{msg}");
    }

    use super::*;

    #[test]
    fn relative_times() {
        let now = 1_796_004_000_000_000_000;
        assert_eq!(parse_time("now", now).unwrap(), now);
        assert_eq!(parse_time("-10m", now).unwrap(), now - 600_000_000_000);
        assert_eq!(parse_time("-2h", now).unwrap(), now - 7_200_000_000_000);
        assert_eq!(parse_time("-100ms", now).unwrap(), now - 100_000_000);
        assert_eq!(parse_time("@5", now).unwrap(), 5);
        assert!(parse_time("-ten minutes", now).is_err());
        let msg = parse_time("yesterday", now).unwrap_err().to_string();
        for form in [
            "RFC 3339",
            "Unix seconds",
            "@NANOS",
            "now",
            "-10m",
            "a date",
        ] {
            assert!(msg.contains(form), "{msg} does not name {form}");
        }
    }

    /// A time with no zone says how to write one (before: "expected Z or an offset at
    /// position 19").
    #[test]
    fn a_time_without_a_zone_says_how_to_add_one() {
        let msg = parse_instant("2026-11-30T02:00:01")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("no zone")
                && msg.contains("2026-11-30T02:00:01Z")
                && msg.contains("2026-11-30T02:00:01+01:00"),
            "{msg}"
        );
        let msg = parse_instant("2026-11-30 02:00:01.5")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("2026-11-30 02:00:01.5Z"), "{msg}");
    }

    #[test]
    fn a_window_end_may_follow_its_start() {
        let now = 1_796_004_000_000_000_000;
        let end = TimeArg::parse_end("+1ms", now).unwrap();
        assert_eq!(end, TimeArg::AfterStart(Duration::from_millis(1)));
        assert_eq!(end.resolve(Some(5)).unwrap(), 1_000_005);
        assert!(end.resolve(None).unwrap_err().contains("--from"));
        assert_eq!(
            TimeArg::parse_end("-10m", now).unwrap(),
            TimeArg::At(now - 600_000_000_000)
        );
        assert!(TimeArg::parse_end("+soon", now).is_err());
    }

    #[test]
    fn instants() {
        assert_eq!(parse_instant("@123").unwrap(), 123);
        assert_eq!(parse_instant("1.5").unwrap(), 1_500_000_000);
        assert_eq!(parse_instant("1.000000001").unwrap(), 1_000_000_001);
        assert_eq!(
            parse_instant("2026-11-30T02:00:00.123456789Z").unwrap(),
            1_796_004_000_123_456_789
        );
        assert!(parse_instant("yesterday").is_err());
        let utc = parse_instant("2026-11-30T02:00:00.5Z").unwrap();
        assert_eq!(parse_instant("2026-11-30T03:00:00.5+01:00").unwrap(), utc);
        assert_eq!(parse_instant("2026-11-29T21:30:00.5-04:30").unwrap(), utc);
        assert_eq!(parse_instant("2026-11-30 02:00:00.500Z").unwrap(), utc);
        assert_eq!(parse_instant("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(
            parse_instant("2000-02-29T00:00:00Z").unwrap(),
            951_782_400_000_000_000
        );
        for bad in [
            "2026-11-30T02:00:00",
            "2026-02-30T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T02:00:00.Z",
            "2026-11-30T02:00:00+1:00",
            "1969-12-31T23:59:59Z",
            "2026-11-30T02:00:00Zjunk",
            "２026-11-30T02:00:00Z",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad} was accepted");
        }
        assert!(parse_instant("1.0000000001").is_err());
        assert_eq!(
            parse_instant("2026-11-30").unwrap(),
            parse_instant("2026-11-30T00:00:00Z").unwrap()
        );
        assert!(parse_instant("2026-13-30").is_err());
        assert_eq!(
            format_instant(1_796_004_000_123_456_789),
            "2026-11-30T02:00:00.123456789Z"
        );
    }
}
