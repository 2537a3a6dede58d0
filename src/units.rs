//! Parsing of the sizes, rates, durations and instants the CLI accepts.

use anyhow::{anyhow, bail, Result};

/// Splits "12.5KiB" into (12.5, "KiB").
fn split_number(s: &str) -> Result<(f64, &str)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow!("{s:?}: expected a number followed by an optional unit"))?;
    if !n.is_finite() || n < 0.0 {
        bail!("{s:?}: expected a non-negative number");
    }
    Ok((n, unit.trim()))
}

/// Parses a byte size: `1048576`, `64K`, `64KiB`, `1.5G`, `10GB`. K/M/G/T are powers of 1024.
pub fn parse_size(s: &str) -> Result<u64> {
    let (n, unit) = split_number(s)?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => bail!("{s:?}: unknown size unit {other:?} (expected K, M, G or T)"),
    };
    let v = n * mult as f64;
    if v > u64::MAX as f64 {
        bail!("{s:?}: size too large");
    }
    Ok(v as u64)
}

/// Parses a bit rate: `1G`, `500M`, `10k`, `2.5Gbit`. Powers of 1000, in bits per second.
pub fn parse_rate(s: &str) -> Result<u64> {
    let (n, unit) = split_number(s)?;
    let unit = unit.to_ascii_lowercase();
    let unit = unit
        .trim_end_matches("bit/s")
        .trim_end_matches("bps")
        .trim_end_matches("bit");
    let mult: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        other => bail!("{s:?}: unknown rate unit {other:?} (expected k, M, G, T bits per second)"),
    };
    let v = n * mult;
    if v < 1.0 || v > 1e15 {
        bail!("{s:?}: rate must be between 1 bit/s and 1 Pbit/s");
    }
    Ok(v as u64)
}

/// Parses a duration: `10s`, `100ms`, `1m`, `2h 30m`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration> {
    humantime::parse_duration(s)
        .map_err(|e| anyhow!("{s:?}: not a duration ({e}); e.g. 10s, 100ms, 5m"))
}

/// Parses an instant: RFC 3339 with up to 9 fractional digits, Unix seconds (with a
/// fraction), or `@NANOS`. Returns ns since the epoch.
pub fn parse_instant(s: &str) -> Result<u64> {
    let t = s.trim();
    if let Some(ns) = t.strip_prefix('@') {
        return ns
            .parse::<u64>()
            .map_err(|_| anyhow!("{s:?}: expected @ followed by nanoseconds since the epoch"));
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') && !t.is_empty() {
        let (secs, frac) = t.split_once('.').unwrap_or((t, ""));
        if frac.len() > 9 || frac.contains('.') {
            bail!("{s:?}: at most 9 fractional digits");
        }
        let secs: u64 = secs
            .parse()
            .map_err(|_| anyhow!("{s:?}: bad Unix seconds"))?;
        let frac_ns: u64 = if frac.is_empty() {
            0
        } else {
            format!("{frac:0<9}")
                .parse()
                .map_err(|_| anyhow!("{s:?}: bad fraction"))?
        };
        return secs
            .checked_mul(1_000_000_000)
            .and_then(|n| n.checked_add(frac_ns))
            .ok_or_else(|| anyhow!("{s:?}: too far in the future"));
    }
    let st = humantime::parse_rfc3339_weak(t)
        .map_err(|e| anyhow!("{s:?}: not RFC 3339, Unix seconds or @NANOS ({e})"))?;
    let d = st
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| anyhow!("{s:?}: before 1970"))?;
    Ok(d.as_nanos() as u64)
}

/// Formats ns since the epoch as RFC 3339 with nanoseconds.
pub fn format_instant(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    humantime::format_rfc3339_nanos(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("1.5MiB").unwrap(), 1_572_864);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("500Mbit").unwrap(), 500_000_000);
        assert_eq!(parse_rate("2.5gbps").unwrap(), 2_500_000_000);
        assert!(parse_rate("0").is_err());
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
        assert!(parse_instant("1.0000000001").is_err());
        assert_eq!(
            format_instant(1_796_004_000_123_456_789),
            "2026-11-30T02:00:00.123456789Z"
        );
    }
}
