//! The sizes and rates the CLI accepts and prints (times and durations: capsule-query).
//!
//! Sizes follow what the unit says: `KB`, `MB`, `GB`, `TB` are powers of 1000 (SI), `KiB`,
//! `MiB`, `GiB`, `TiB` powers of 1024, and a bare `K`, `M`, `G`, `T` (as in `--ring-size 256M`
//! or `--max-bytes 500G`, the forms tcpdump, dd and most tools use) powers of 1024. Sizes are
//! printed in SI units with three significant digits (`812 MB`, `1.25 GB`).

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

/// Parses a byte size: `1048576`, `64K`, `64KiB`, `1.5G`, `10GB` (see the module docs: `GB`
/// is 10^9 bytes, `G` and `GiB` 2^30).
pub fn parse_size(s: &str) -> Result<u64> {
    let (n, unit) = split_number(s)?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => bail!(
            "{s:?}: unknown size unit {other:?} (expected K, M, G, T or KiB, MiB, GiB, TiB: \
             powers of 1024; KB, MB, GB, TB: powers of 1000)"
        ),
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
    if !(1.0..=1e15).contains(&v) {
        bail!("{s:?}: rate must be between 1 bit/s and 1 Pbit/s");
    }
    Ok(v as u64)
}

/// `n` with three significant digits in the largest unit of `units` (steps of 1000) that
/// keeps it under 1000: `999`, `1.25k`, `812M`. `units[0]` is the unit of `n` itself; `sep`
/// goes between number and unit.
fn three_digits(n: u64, units: &[&str], sep: &str) -> String {
    if n < 1000 {
        return format!("{n}{sep}{}", units[0]);
    }
    let mut v = n as f64;
    let mut unit = units[0];
    for u in &units[1..] {
        if v < 999.5 {
            break;
        }
        v /= 1000.0;
        unit = u;
    }
    let digits = if v >= 99.95 {
        0
    } else if v >= 9.995 {
        1
    } else {
        2
    };
    format!("{v:.digits$}{sep}{unit}")
}

/// A byte count for people: SI units, three significant digits (`999 B`, `1.25 kB`,
/// `812 MB`, `1.25 GB`).
pub fn format_bytes(n: u64) -> String {
    three_digits(n, &["B", "kB", "MB", "GB", "TB", "PB", "EB"], " ")
}

/// A count for people: `999`, `12.3k`, `4.56M`, `1.23G`.
pub fn format_count(n: u64) -> String {
    three_digits(n, &["", "k", "M", "G", "T", "P", "E"], "")
}

/// A duration for people, in the one style capsule prints: `850 ms`, `12.5 s`, `3m 05s`,
/// `2h 10m`.
pub fn format_duration_ns(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if ns < 1_000_000 {
        format!("{:.0} µs", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.0} ms", ns as f64 / 1e6)
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        let t = s as u64;
        format!("{}m {:02}s", t / 60, t % 60)
    } else {
        let t = s as u64;
        format!("{}h {:02}m", t / 3600, (t % 3600) / 60)
    }
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
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("500MB").unwrap(), 500_000_000);
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
    fn sizes_for_people() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(999), "999 B");
        assert_eq!(format_bytes(1250), "1.25 kB");
        assert_eq!(format_bytes(812_000_000), "812 MB");
        assert_eq!(format_bytes(1_250_000_000), "1.25 GB");
        assert_eq!(format_bytes(999_999), "1.00 MB");
        assert_eq!(format_bytes(u64::MAX), "18.4 EB");
        assert_eq!(format_count(12_345), "12.3k");
        assert_eq!(format_count(7), "7");
        assert_eq!(format_duration_ns(850_000_000), "850 ms");
        assert_eq!(format_duration_ns(12_500_000_000), "12.5 s");
        assert_eq!(format_duration_ns(185_000_000_000), "3m 05s");
    }
}
