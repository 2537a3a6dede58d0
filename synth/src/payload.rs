//! Payload bytes: fixed pools and the content of every byte stream.
//!
//! Three pools are built once per process from a constant seed (they do not depend on the
//! run's seed, so they are shared between runs and cost nothing after the first):
//!
//! * **gradient** (16 MiB): bf16-like values, as in all-reduce and checkpoint traffic. The high
//!   byte of each value (sign and exponent) takes few values, the low byte is random, and a
//!   share of values are zero, so it compresses a little, as real gradients do.
//! * **random** (8 MiB): uniformly random bytes, for encrypted and already-compressed traffic.
//! * **text** (4 MiB): HTML, JSON, script and prose lines built from a word list, for HTTP.
//!
//! A TCP stream's content is a pure function of (flow salt, stream offset): the stream is cut
//! into 2 KiB blocks and each block is a slice of a pool at an offset hashed from the salt and
//! the block number. So a retransmission carries exactly the bytes of the original, segments
//! of any size fit together, and pools far larger than zstd's window keep compressors from
//! finding long repeats.

use std::sync::OnceLock;

use crate::rng::{mix64, Rng};

/// Bytes per pool block: a stream is a sequence of blocks, each taken from a hashed pool offset.
const BLOCK: u64 = 2048;

/// The shared payload pools.
#[derive(Debug)]
pub(crate) struct Pools {
    pub(crate) gradient: Vec<u8>,
    pub(crate) random: Vec<u8>,
    pub(crate) text: Vec<u8>,
}

/// The process-wide pools, built on first use.
pub(crate) fn pools() -> &'static Pools {
    static POOLS: OnceLock<Pools> = OnceLock::new();
    POOLS.get_or_init(|| Pools {
        gradient: gradient_pool(16 << 20, 0x6772_6164),
        random: random_pool(8 << 20, 0x7261_6e64),
        text: text_pool(4 << 20, 0x7465_7874),
    })
}

fn random_pool(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// bf16-like little-endian values in rows of 64-1023 values: a fifth of the rows are all zero
/// (sparse gradients, untouched embedding rows); in the others the sign + exponent byte comes
/// from a narrow, skewed set, the mantissa byte is random, and about one value in six is zero.
/// `zstd -1` compresses this about 1.65x.
fn gradient_pool(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut v = Vec::with_capacity(len + 2048);
    while v.len() < len {
        let row = 64 + rng.below(960) as usize;
        if rng.chance(200) {
            v.resize(v.len() + 2 * row, 0);
            continue;
        }
        for _ in 0..row {
            let bits = rng.next_u32();
            let sel = bits & 0x3f;
            let (lo, hi) = if sel < 10 {
                (0u8, 0u8)
            } else {
                // Exponent skewed towards small gradients: 0x3a most, 0x3c least.
                let e = match sel {
                    10..=31 => 0x3a,
                    32..=47 => 0x39,
                    48..=55 => 0x3b,
                    56..=60 => 0x38,
                    _ => 0x3c,
                };
                let sign = ((bits >> 6) & 1) as u8;
                ((bits >> 8) as u8, (sign << 7) | e)
            };
            v.push(lo);
            v.push(hi);
        }
    }
    v.truncate(len);
    v
}

const WORDS: &[&str] = &[
    "account",
    "action",
    "active",
    "admin",
    "agent",
    "alert",
    "align",
    "amount",
    "answer",
    "api",
    "app",
    "archive",
    "article",
    "asset",
    "audit",
    "author",
    "auto",
    "backup",
    "badge",
    "balance",
    "banner",
    "batch",
    "billing",
    "block",
    "board",
    "body",
    "border",
    "branch",
    "browser",
    "budget",
    "build",
    "button",
    "cache",
    "calendar",
    "campaign",
    "card",
    "cart",
    "category",
    "center",
    "channel",
    "chart",
    "check",
    "client",
    "cluster",
    "code",
    "color",
    "column",
    "comment",
    "commit",
    "config",
    "contact",
    "content",
    "context",
    "contract",
    "count",
    "country",
    "course",
    "create",
    "credit",
    "customer",
    "dashboard",
    "data",
    "date",
    "default",
    "delete",
    "delivery",
    "deploy",
    "design",
    "detail",
    "device",
    "display",
    "document",
    "domain",
    "draft",
    "driver",
    "edit",
    "email",
    "employee",
    "empty",
    "engine",
    "entry",
    "error",
    "event",
    "export",
    "feature",
    "feed",
    "field",
    "file",
    "filter",
    "finance",
    "footer",
    "form",
    "frame",
    "gallery",
    "global",
    "group",
    "header",
    "health",
    "help",
    "history",
    "home",
    "host",
    "icon",
    "image",
    "import",
    "index",
    "info",
    "input",
    "invoice",
    "issue",
    "item",
    "job",
    "journal",
    "key",
    "label",
    "language",
    "layout",
    "ledger",
    "level",
    "license",
    "limit",
    "link",
    "list",
    "load",
    "local",
    "location",
    "login",
    "logo",
    "main",
    "manager",
    "market",
    "media",
    "meeting",
    "member",
    "menu",
    "message",
    "meta",
    "metric",
    "mobile",
    "model",
    "module",
    "monitor",
    "name",
    "network",
    "news",
    "node",
    "note",
    "notice",
    "number",
    "office",
    "offset",
    "option",
    "order",
    "owner",
    "page",
    "panel",
    "parent",
    "partner",
    "password",
    "payment",
    "people",
    "period",
    "photo",
    "plan",
    "platform",
    "policy",
    "portal",
    "post",
    "price",
    "primary",
    "print",
    "private",
    "product",
    "profile",
    "project",
    "public",
    "query",
    "queue",
    "quote",
    "range",
    "rate",
    "record",
    "region",
    "release",
    "report",
    "request",
    "resource",
    "result",
    "review",
    "role",
    "route",
    "sales",
    "schedule",
    "schema",
    "score",
    "search",
    "section",
    "secure",
    "select",
    "server",
    "service",
    "session",
    "setting",
    "share",
    "shipping",
    "sidebar",
    "signal",
    "size",
    "source",
    "staff",
    "stage",
    "status",
    "storage",
    "store",
    "stream",
    "style",
    "subject",
    "summary",
    "support",
    "system",
    "table",
    "target",
    "task",
    "team",
    "template",
    "tenant",
    "text",
    "theme",
    "ticket",
    "time",
    "title",
    "token",
    "total",
    "track",
    "training",
    "type",
    "update",
    "upload",
    "user",
    "value",
    "vendor",
    "version",
    "video",
    "view",
    "volume",
    "warning",
    "widget",
    "window",
    "work",
    "year",
    "zone",
];

fn word(rng: &mut Rng) -> &'static str {
    WORDS[rng.below(WORDS.len() as u64) as usize]
}

/// Text-like content: HTML, JSON, script and prose lines from a word list.
fn text_pool(len: usize, seed: u64) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut rng = Rng::new(seed);
    let mut s = String::with_capacity(len + 1024);
    while s.len() < len {
        match rng.below(5) {
            0 => {
                let _ = writeln!(
                    s,
                    "<li class=\"{}-{}\"><a href=\"/{}/{}-{}.html\">{} {} {}</a></li>",
                    word(&mut rng),
                    word(&mut rng),
                    word(&mut rng),
                    word(&mut rng),
                    rng.below(100_000),
                    word(&mut rng),
                    word(&mut rng),
                    word(&mut rng)
                );
            }
            1 => {
                let _ = writeln!(
                    s,
                    "{{\"id\":{},\"user\":\"{}.{}\",\"action\":\"{}\",\"ts\":\"2026-11-{:02}T{:02}:{:02}:{:02}Z\",\"status\":{},\"tags\":[\"{}\",\"{}\"],\"value\":{}.{:02}}}",
                    rng.below(10_000_000),
                    word(&mut rng),
                    word(&mut rng),
                    word(&mut rng),
                    1 + rng.below(30),
                    rng.below(24),
                    rng.below(60),
                    rng.below(60),
                    [200, 200, 200, 201, 304, 404][rng.below(6) as usize],
                    word(&mut rng),
                    word(&mut rng),
                    rng.below(10_000),
                    rng.below(100)
                );
            }
            2 => {
                let a = word(&mut rng);
                let b = word(&mut rng);
                let _ = writeln!(
                    s,
                    "  function {a}_{b}(opts) {{ var {a} = opts.{} || \"{}\"; return render({a}, opts.{}); }}",
                    word(&mut rng),
                    word(&mut rng),
                    word(&mut rng)
                );
            }
            _ => {
                let n = 8 + rng.below(14);
                let mut first = true;
                for _ in 0..n {
                    if !first {
                        s.push(' ');
                    }
                    first = false;
                    s.push_str(word(&mut rng));
                }
                s.push_str(".\n");
            }
        }
    }
    let mut v = s.into_bytes();
    v.truncate(len);
    v
}

/// What a byte stream (one direction of a TCP connection) carries.
#[derive(Debug, Clone)]
pub(crate) enum Content {
    /// bf16-like tensors (all-reduce, checkpoints).
    Gradient,
    /// Uniformly random bytes (bulk transfers).
    Random,
    /// TLS 1.2 application-data records of `record` body bytes over random bytes; the stream is
    /// `len` bytes long and its last record is shortened to end exactly there.
    Tls { record: u32, len: u64 },
    /// `prefix` (an HTTP request or response head), then text (the body).
    Http { prefix: Box<[u8]> },
}

/// TLS record header length.
pub(crate) const TLS_HDR: u64 = 5;
/// Smallest TLS record body we emit (an AEAD tag).
const TLS_MIN_BODY: u64 = 17;

/// Adjusts a planned TLS stream length so that its last record has a full header and at
/// least an AEAD tag of body.
pub(crate) fn tls_fit_len(len: u64, record: u32) -> u64 {
    let unit = TLS_HDR + u64::from(record);
    let rem = len % unit;
    if rem == 0 || rem >= TLS_HDR + TLS_MIN_BODY {
        len.max(TLS_HDR + TLS_MIN_BODY)
    } else {
        len - rem + TLS_HDR + TLS_MIN_BODY
    }
}

/// Appends `len` bytes of pool content for the stream (`salt`) from offset `off`.
#[inline]
fn append_pool(buf: &mut Vec<u8>, pool: &[u8], salt: u64, mut off: u64, mut len: usize) {
    let span = pool.len() as u64 - BLOCK;
    while len > 0 {
        let blk = off / BLOCK;
        let within = (off % BLOCK) as usize;
        let n = len.min(BLOCK as usize - within);
        // Even start keeps bf16 values aligned in the gradient pool.
        let start = ((mix64(salt ^ blk.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % span) & !1) as usize;
        buf.extend_from_slice(&pool[start + within..start + within + n]);
        off += n as u64;
        len -= n;
    }
}

/// Appends `len` bytes of the stream `content`/`salt` starting at stream offset `off`.
pub(crate) fn append_stream(
    buf: &mut Vec<u8>,
    pools: &Pools,
    content: &Content,
    salt: u64,
    off: u64,
    len: usize,
) {
    match content {
        Content::Gradient => append_pool(buf, &pools.gradient, salt, off, len),
        Content::Random => append_pool(buf, &pools.random, salt, off, len),
        Content::Tls { record, len: total } => {
            let base = buf.len();
            append_pool(buf, &pools.random, salt, off, len);
            let unit = TLS_HDR + u64::from(*record);
            let end = off + len as u64;
            let mut rec = off / unit;
            loop {
                let rs = rec * unit;
                if rs >= end {
                    break;
                }
                let body = (total.saturating_sub(rs + TLS_HDR)).min(u64::from(*record)) as u16;
                let hdr = [0x17, 0x03, 0x03, (body >> 8) as u8, body as u8];
                for (i, &b) in hdr.iter().enumerate() {
                    let pos = rs + i as u64;
                    if pos >= off && pos < end {
                        buf[base + (pos - off) as usize] = b;
                    }
                }
                rec += 1;
            }
        }
        Content::Http { prefix, .. } => {
            let plen = prefix.len() as u64;
            let mut off = off;
            let mut len = len;
            if off < plen {
                let n = len.min((plen - off) as usize);
                buf.extend_from_slice(&prefix[off as usize..off as usize + n]);
                off += n as u64;
                len -= n;
            }
            if len > 0 {
                append_pool(buf, &pools.text, salt, off - plen, len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_content_is_a_function_of_offset() {
        let p = pools();
        let c = Content::Tls {
            record: 1000,
            len: tls_fit_len(10_000, 1000),
        };
        let mut whole = Vec::new();
        append_stream(&mut whole, p, &c, 42, 0, 10_000);
        let mut parts = Vec::new();
        let mut off = 0;
        for n in [1usize, 1460, 7, 3000, 2048, 10_000] {
            let n = n.min(10_000 - off);
            append_stream(&mut parts, p, &c, 42, off as u64, n);
            off += n;
        }
        assert_eq!(whole, parts);
        assert_eq!(&whole[..3], &[0x17, 0x03, 0x03]);
        assert_eq!(&whole[1005..1008], &[0x17, 0x03, 0x03]);
    }

    #[test]
    fn tls_len_fits() {
        for len in 0..3000 {
            let l = tls_fit_len(len, 1000);
            let rem = l % 1005;
            assert!(rem == 0 || rem >= 22, "{len} -> {l}");
            assert!(l >= len);
        }
    }

    #[test]
    fn text_is_text() {
        assert!(pools()
            .text
            .iter()
            .all(|&b| b == b'\n' || (0x20..0x7f).contains(&b)));
    }
}
