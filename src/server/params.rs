//! Query-string parameters: decoded, checked against what the endpoint takes, and the
//! window and filter made a query with the CLI's own syntax and messages.

use std::collections::HashMap;

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a space, `%XX` a
/// byte); `None` for a bad escape or bytes that are not UTF-8.
pub(super) fn url_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let h = b.get(i + 1..i + 3)?;
                let h = std::str::from_utf8(h).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The query string as (name, value) pairs, refusing names not in `allowed` and repeats.
pub(super) fn params(
    query: Option<&str>,
    allowed: &[&str],
) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = url_decode(k).ok_or_else(|| format!("bad escape in parameter name {k:?}"))?;
        let v = url_decode(v).ok_or_else(|| format!("bad escape in the value of {k}"))?;
        if !allowed.contains(&k.as_str()) {
            return Err(format!(
                "unknown parameter {k:?}: this endpoint takes {}",
                allowed.join(", ")
            ));
        }
        if out.insert(k.clone(), v).is_some() {
            return Err(format!("parameter {k} given twice"));
        }
    }
    Ok(out)
}

/// The query of `filter`, `from` and `to` with the CLI's syntax and messages.
pub(super) fn query_of(p: &HashMap<String, String>) -> Result<capsule_query::Query, String> {
    let now = capsule_store::now_ns();
    let from = p
        .get("from")
        .map(|s| capsule_query::parse_time(s, now))
        .transpose()
        .map_err(|e| format!("invalid value for from: {e}"))?;
    let to = p
        .get("to")
        .map(|s| capsule_query::TimeArg::parse_end(s, now))
        .transpose()
        .map_err(|e| format!("invalid value for to: {e}"))?;
    crate::request::make_query(p.get("filter").map_or("", String::as_str), from, to)
        .map_err(|e| format!("{e:#}"))
}

/// The `bpf` parameter: a tcpdump expression (absent or empty: none), checked by
/// [`super::guard::check_bpf`] before the export runs.
pub(super) fn bpf_of(p: &HashMap<String, String>) -> Option<String> {
    p.get("bpf").filter(|s| !s.trim().is_empty()).cloned()
}

/// The `segments` parameter: sequence numbers separated by commas (a fleet's candidate
/// segments for this node). `None` when absent; an empty list or a bad number is refused.
pub(super) fn segments_of(p: &HashMap<String, String>) -> Result<Option<Vec<u64>>, String> {
    let Some(v) = p.get("segments") else {
        return Ok(None);
    };
    v.split(',')
        .map(|s| {
            s.trim().parse::<u64>().map_err(|_| {
                format!(
                    "invalid value for segments: expected segment numbers separated by \
                     commas, found {s:?}"
                )
            })
        })
        .collect::<Result<Vec<u64>, String>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_numbers_separated_by_commas() {
        let p = params(Some("segments=3%2C5,9"), &["segments"]).unwrap();
        assert_eq!(segments_of(&p).unwrap(), Some(vec![3, 5, 9]));
        assert_eq!(segments_of(&HashMap::new()).unwrap(), None);
        for bad in ["segments=", "segments=3,,4", "segments=x", "segments=-1"] {
            let p = params(Some(bad), &["segments"]).unwrap();
            let e = segments_of(&p).unwrap_err();
            assert!(e.starts_with("invalid value for segments"), "{bad}: {e}");
        }
    }

    #[test]
    fn url_components_decode_and_bad_escapes_are_refused() {
        assert_eq!(url_decode("host+10.0.0.1").unwrap(), "host 10.0.0.1");
        assert_eq!(url_decode("a%20b%2Bc").unwrap(), "a b+c");
        assert_eq!(url_decode("%"), None);
        assert_eq!(url_decode("%zz"), None);
        assert_eq!(url_decode("%ff"), None);
        assert_eq!(url_decode("%e2%82%ac").unwrap(), "\u{20ac}");
    }

    #[test]
    fn parameters_not_taken_are_refused() {
        let p = params(Some("filter=tcp&from=-1m"), &["filter", "from"]).unwrap();
        assert_eq!(p["filter"], "tcp");
        let e = params(Some("fliter=tcp"), &["filter"]).unwrap_err();
        assert!(e.contains("unknown parameter"), "{e}");
        let e = params(Some("filter=a&filter=b"), &["filter"]).unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn a_bad_filter_gives_the_cli_message() {
        let p = params(Some("filter=host+nope"), &["filter"]).unwrap();
        let e = query_of(&p).unwrap_err();
        assert!(e.starts_with("bad filter:"), "{e}");
    }
}
