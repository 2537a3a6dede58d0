//! `[links]`: each capture interface's line rate, `span0 = "10G"`: what `capsule bursts`
//! states rates against (a share of the link, `--above 80%`).
//!
//! ```text
//! name = "RATE"   RATE: a number of bits per second with an optional decimal suffix
//!                 k/K, M, G, T (10^3 .. 10^12) and an optional `bps` or `bit/s`:
//!                 "10G", "2.5Gbps", "400M", "1000000"
//! ```

use toml::de::DeTable;

use crate::error::ErrorKind;
use crate::walk::{join, Src};

/// One link: an interface name and its line rate.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Link {
    pub name: String,
    pub bits_per_second: u64,
}

/// A rate as `[links]` and `capsule bursts --above` write it: bits per second, with an
/// optional decimal suffix (k, M, G, T) and an optional `bps` or `bit/s`. The error says
/// what was expected.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("bit/s")
        .or_else(|| t.strip_suffix("bps"))
        .unwrap_or(t)
        .trim_end();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'M')) => (&t[..i], 1e6),
        Some((i, 'G')) => (&t[..i], 1e9),
        Some((i, 'T')) => (&t[..i], 1e12),
        _ => (t, 1.0),
    };
    let expected =
        || format!("a rate in bits per second (10G, 2.5Gbps, 400M, 1000000), found {s:?}");
    let v: f64 = num.trim().parse().map_err(|_| expected())?;
    let bps = v * mult;
    if !bps.is_finite() || !(1.0..=1e15).contains(&bps) {
        return Err(expected());
    }
    Ok(bps.round() as u64)
}

/// A rate as text: the largest suffix that keeps it whole to three decimals ("10G",
/// "2.5G", "400M").
pub fn rate_text(bps: u64) -> String {
    for (m, suffix) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        let v = bps as f64 / m;
        if v >= 1.0 {
            let s = format!("{v:.3}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            return format!("{s}{suffix}");
        }
    }
    bps.to_string()
}

pub(crate) fn parse(src: &Src<'_>, path: &str, t: &DeTable<'_>) -> Vec<Link> {
    let mut out = Vec::new();
    for (k, v) in t.iter() {
        let key = join(path, k.get_ref());
        let Some(text) = src.keep(src.string(&key, v, "a rate such as \"10G\"")) else {
            continue;
        };
        match parse_rate(text) {
            Ok(bits_per_second) => out.push(Link {
                name: k.get_ref().to_string(),
                bits_per_second,
            }),
            Err(e) => {
                src.keep::<()>(Err(src.err(
                    v.span(),
                    &key,
                    ErrorKind::BadValue,
                    "a rate in bits per second (10G, 2.5Gbps, 400M)",
                    e.rsplit("found ").next().unwrap_or("").to_string(),
                )));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_suffixes_and_bad_ones_are_refused() {
        assert_eq!(parse_rate("10G"), Ok(10_000_000_000));
        assert_eq!(parse_rate("2.5Gbps"), Ok(2_500_000_000));
        assert_eq!(parse_rate("400M"), Ok(400_000_000));
        assert_eq!(parse_rate("100 kbit/s"), Ok(100_000));
        assert_eq!(parse_rate("1000000"), Ok(1_000_000));
        for bad in ["", "G", "-1G", "10X", "ten", "0"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(rate_text(10_000_000_000), "10G");
        assert_eq!(rate_text(2_500_000_000), "2.5G");
        assert_eq!(rate_text(999), "999");
    }

    #[test]
    fn links_section_gives_each_interface_its_rate() {
        let c = crate::Config::parse("[links]\nspan0 = \"10G\"\neth1 = \"25G\"\n", "f").unwrap();
        assert_eq!(c.links().len(), 2);
        assert_eq!(c.link_rate("span0"), Some(10_000_000_000));
        let e = crate::Config::parse("[links]\nspan0 = \"fast\"\n", "f").unwrap_err();
        assert!(e.to_string().contains("links.span0"), "{e}");
    }
}
