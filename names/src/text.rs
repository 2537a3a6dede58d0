//! Text protocols: the HTTP/1 request line and Host header, SSH version strings.

use crate::{clean_name, Name};

const METHODS: [&[u8]; 9] = [
    b"GET ",
    b"POST ",
    b"PUT ",
    b"HEAD ",
    b"DELETE ",
    b"OPTIONS ",
    b"PATCH ",
    b"CONNECT ",
    b"TRACE ",
];

/// Whether `p` starts an HTTP/1 request (a known method) or response (`HTTP/1.`).
pub fn looks_like_http(p: &[u8]) -> bool {
    METHODS.iter().any(|m| p.starts_with(m)) || p.starts_with(b"HTTP/1.")
}

/// What an HTTP/1 request's head gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Http {
    Request {
        method: Option<Name>,
        host: Option<Name>,
    },
    /// The head is not whole yet.
    Incomplete,
    Not,
}

/// The method and Host of the request at the start of `p` (its head up to the blank line,
/// or as much of it as [`crate::STREAM_CAP`] holds).
pub fn http_request(p: &[u8]) -> Http {
    let Some(sp) = METHODS.iter().find(|m| p.starts_with(m)) else {
        return Http::Not;
    };
    let method = clean_name(&sp[..sp.len() - 1]);
    let complete = p.windows(4).any(|w| w == b"\r\n\r\n") || p.len() >= crate::STREAM_CAP;
    let mut host = None;
    for line in p.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        if line.len() > 5 && line[..5].eq_ignore_ascii_case(b"host:") {
            let v = line[5..].trim_ascii();
            host = clean_name(v);
            break;
        }
    }
    if host.is_none() && !complete {
        return Http::Incomplete;
    }
    Http::Request { method, host }
}

/// What an SSH identification line gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ssh {
    /// The line after `SSH-`, e.g. `2.0-OpenSSH_9.6`.
    Version(Name),
    Incomplete,
    Not,
}

/// The SSH version string at the start of `p` (RFC 4253: `SSH-protoversion-softwareversion
/// SP comments CR LF`, at most 255 bytes); the version up to the first space or CR.
pub fn ssh_version(p: &[u8]) -> Ssh {
    if !p.starts_with(b"SSH-") {
        return if b"SSH-".starts_with(p) {
            Ssh::Incomplete
        } else {
            Ssh::Not
        };
    }
    let Some(end) = p.iter().take(255).position(|&b| b == b'\n') else {
        return if p.len() < 255 {
            Ssh::Incomplete
        } else {
            Ssh::Not
        };
    };
    let line = &p[..end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let v = line.split(|&b| b == b' ').next().unwrap_or_default();
    match v.strip_prefix(b"SSH-").and_then(clean_name) {
        Some(v) => Ssh::Version(v),
        None => Ssh::Not,
    }
}
