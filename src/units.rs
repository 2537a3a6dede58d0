//! Parsing of the sizes and rates the CLI accepts (times and durations: capsule-query).

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
    if !(1.0..=1e15).contains(&v) {
        bail!("{s:?}: rate must be between 1 bit/s and 1 Pbit/s");
    }
    Ok(v as u64)
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
}
