//! The `[tier]` section: where sealed segments are uploaded (an S3-compatible bucket) and
//! for how long the object store keeps them.
//!
//! ```toml
//! [tier]
//! endpoint = "http://127.0.0.1:8333"     # the S3 API's URL (http or https)
//! bucket = "capsule"
//! prefix = "site-a/probe-1"              # optional; keys never start with "/"
//! region = "us-east-1"                   # optional (the default)
//! credentials_file = "tier.credentials"  # access key id, then the secret, on two lines
//! max_age = "90d"                        # optional: objects older by packet time go
//! path_style = true                      # optional (the default): BUCKET in the path
//! upload_rate = "200M"                   # optional: uploads average at most this (bits/s)
//! cache_dir = "/var/cache/capsule"       # optional: where a reader that cannot write the
//!                                        # store keeps fetched indexes and footers
//! ```
//!
//! A relative `credentials_file` is taken from the config file's directory
//! ([`crate::Config::load`]); the file itself is read by the tier client, so a config
//! check never needs the secret.

use std::path::PathBuf;

use serde::Serialize;
use toml::de::{DeTable, DeValue};

use crate::error::ErrorKind;
use crate::walk::{join, Src};

/// The keys of `[tier]`, in the order docs/config.md lists them.
pub const TIER_KEYS: [&str; 9] = [
    "endpoint",
    "bucket",
    "prefix",
    "region",
    "credentials_file",
    "max_age",
    "path_style",
    "upload_rate",
    "cache_dir",
];

/// The region when none is given (what S3-compatible servers accept).
pub const DEFAULT_REGION: &str = "us-east-1";

/// A validated `[tier]` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TierConfig {
    /// The S3 API's base URL, `http://HOST:PORT` or `https://HOST`.
    pub endpoint: String,
    pub bucket: String,
    /// Put before every key, without a leading or trailing "/" (empty: none).
    pub prefix: String,
    pub region: String,
    /// The file holding the access key id (line 1) and the secret (line 2).
    pub credentials_file: PathBuf,
    /// Objects whose last packet is older than this (by packet time, counted back from the
    /// newest packet the store holds) are deleted from the object store.
    pub max_age_ns: Option<u64>,
    /// `https://endpoint/bucket/key` (true) or `https://bucket.endpoint/key` (false).
    pub path_style: bool,
    /// The most the uploads send on average, in bits per second (`None`: no bound).
    pub upload_rate_bps: Option<u64>,
    /// Where a reader without write access to the store keeps the side indexes and footers
    /// it fetched (`None`: `$CACHE_DIRECTORY`, `$XDG_CACHE_HOME/capsule` or
    /// `$HOME/.cache/capsule`, the first set).
    pub cache_dir: Option<PathBuf>,
}

/// An S3 bucket name: 3 to 63 of lowercase letters, digits, '.' and '-', starting and
/// ending with a letter or digit.
fn bucket_ok(b: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&b.len())
        && b.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && edge(b.chars().next())
        && edge(b.chars().last())
}

/// The `[tier]` table; `None` when a problem was found (each is kept, see [`Src::keep`]).
pub(crate) fn parse(
    src: &Src<'_>,
    path: &str,
    span: std::ops::Range<usize>,
    table: &DeTable<'_>,
) -> Option<TierConfig> {
    src.only_keys(path, table, &TIER_KEYS);
    let text = |name: &str, expected: &str| -> Option<(String, std::ops::Range<usize>)> {
        let v = table.get(name)?;
        let key = join(path, name);
        let s = src.keep(src.string(&key, v, expected))?;
        if s.trim().is_empty() {
            src.keep::<()>(Err(src.err(
                v.span(),
                &key,
                ErrorKind::BadValue,
                expected,
                "an empty string",
            )));
            return None;
        }
        Some((s.to_string(), v.span()))
    };
    let mut ok = true;
    let mut required = |name: &str, expected: &str| {
        let got = text(name, expected);
        if got.is_none() {
            ok = false;
            if table.get(name).is_none() {
                src.keep::<()>(Err(src.err(
                    span.clone(),
                    &join(path, name),
                    ErrorKind::MissingKey,
                    format!("{name}: {expected}"),
                    "",
                )));
            }
        }
        got
    };
    const URL: &str = "the S3 API's URL, http://HOST:PORT or https://HOST";
    const BUCKET: &str = "a bucket name: 3 to 63 lowercase letters, digits, '.' and '-'";
    let endpoint = required("endpoint", URL);
    let bucket = required("bucket", BUCKET);
    let credentials = required(
        "credentials_file",
        "a file holding the access key id and the secret on two lines",
    );
    let bad = |key: &str, span: std::ops::Range<usize>, expected: &str, found: String| {
        src.keep::<()>(Err(src.err(
            span,
            &join(path, key),
            ErrorKind::BadValue,
            expected,
            found,
        )));
        false
    };
    if let Some((e, sp)) = &endpoint {
        let rest = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"));
        if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
            ok &= bad("endpoint", sp.clone(), URL, format!("{e:?}"));
        }
    }
    if let Some((b, sp)) = &bucket {
        if !bucket_ok(b) {
            ok &= bad("bucket", sp.clone(), BUCKET, format!("{b:?}"));
        }
    }
    let mut prefix = String::new();
    if let Some(v) = table.get("prefix") {
        const PREFIX: &str = "a key prefix without a leading \"/\" (site-a/probe-1)";
        match src.keep(src.string(&join(path, "prefix"), v, PREFIX)) {
            Some(p) if p.starts_with('/') || p.contains("//") => {
                // A leading "/" makes keys some S3-compatible servers refuse or misfile.
                ok &= bad("prefix", v.span(), PREFIX, format!("{p:?}"));
            }
            Some(p) => prefix = p.trim_end_matches('/').to_string(),
            None => ok = false,
        }
    }
    let region = match table.get("region") {
        Some(_) => match text("region", "a region name (us-east-1)") {
            Some((r, _)) => r,
            None => {
                ok = false;
                String::new()
            }
        },
        None => DEFAULT_REGION.to_string(),
    };
    let mut max_age_ns = None;
    if let Some(v) = table.get("max_age") {
        match src.keep(crate::alerts::duration(src, &join(path, "max_age"), v)) {
            Some(ns) => max_age_ns = Some(ns),
            None => ok = false,
        }
    }
    let mut path_style = true;
    if let Some(v) = table.get("path_style") {
        match v.get_ref() {
            DeValue::Boolean(b) => path_style = *b,
            _ => {
                src.keep::<()>(Err(src.err(
                    v.span(),
                    &join(path, "path_style"),
                    ErrorKind::WrongType,
                    "true or false",
                    src.found(v),
                )));
                ok = false;
            }
        }
    }
    let mut upload_rate_bps = None;
    if let Some(v) = table.get("upload_rate") {
        const RATE: &str = "a rate in bits per second (200M, 1G, 50Mbps)";
        match src.keep(src.string(&join(path, "upload_rate"), v, RATE)) {
            Some(t) => match crate::links::parse_rate(t) {
                Ok(bps) => upload_rate_bps = Some(bps),
                Err(_) => ok &= bad("upload_rate", v.span(), RATE, format!("{t:?}")),
            },
            None => ok = false,
        }
    }
    let mut cache_dir = None;
    if table.get("cache_dir").is_some() {
        match text("cache_dir", "a directory the readers can write") {
            Some((d, _)) => cache_dir = Some(PathBuf::from(d)),
            None => ok = false,
        }
    }
    Some(TierConfig {
        endpoint: endpoint?.0.trim_end_matches('/').to_string(),
        bucket: bucket?.0,
        prefix,
        region,
        credentials_file: PathBuf::from(credentials?.0),
        max_age_ns,
        path_style,
        upload_rate_bps,
        cache_dir,
    })
    .filter(|_| ok)
}
