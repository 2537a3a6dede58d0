//! The TLS ClientHello: server name, ALPN and a JA4-style client fingerprint.
//!
//! Input is the client's first bytes of the TCP stream (reassembled by the caller, up to
//! [`crate::STREAM_CAP`]); the handshake message may span several TLS records, each of which
//! is unwrapped here. Everything is read through [`Reader`]; any short or lying length gives
//! `None` (or [`Hello::Incomplete`] when more bytes could complete it), never a panic.

use capsule_wire::view::Reader;
use sha2::{Digest, Sha256};

use crate::{clean_name, Name};

/// What the client's first bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// A whole ClientHello.
    Client(ClientHello),
    /// A ClientHello so far, cut before its end: more stream bytes may complete it.
    Incomplete,
    /// Not a ClientHello.
    Not,
}

/// The fields capsule keeps of a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientHello {
    /// The server_name extension's host name.
    pub sni: Option<Name>,
    /// The ALPN protocols offered, in order (at most [`crate::MAX_ALPN`]).
    pub alpn: Vec<Name>,
    /// JA4-style fingerprint: `t13d1516h2_<12 hex>_<12 hex>`.
    pub ja4: String,
}

/// Whether `b` starts like a TLS record (handshake, alert, change cipher spec or
/// application data, version 3.x).
pub fn looks_like_tls(b: &[u8]) -> bool {
    matches!(b, [0x14..=0x17, 0x03, 0x00..=0x04, ..])
}

fn grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && (v >> 8) == (v & 0xff)
}

/// Parses the ClientHello at the start of `stream` (TLS records as sent by the client).
#[allow(clippy::while_let_loop)] // the loop has several exits, each commented
pub fn client_hello(stream: &[u8]) -> Hello {
    // Unwrap handshake records into one message buffer (fixed cap).
    let mut msg: Vec<u8> = Vec::new();
    let mut r = Reader::new(stream);
    let mut need: Option<usize> = None;
    loop {
        let Ok(hdr) = r.array::<5>() else {
            break;
        };
        if hdr[0] != 0x16 || hdr[1] != 3 {
            if msg.is_empty() {
                return Hello::Not;
            }
            break;
        }
        let len = usize::from(u16::from_be_bytes([hdr[3], hdr[4]]));
        let rest = r.rest();
        let take = len.min(rest.len());
        if msg.len() + take > crate::STREAM_CAP {
            break;
        }
        msg.extend_from_slice(&rest[..take]);
        if r.skip(take).is_err() {
            break;
        }
        if msg.len() >= 4 && need.is_none() {
            if msg[0] != 1 {
                return Hello::Not;
            }
            need = Some(
                4 + ((usize::from(msg[1]) << 16)
                    | (usize::from(msg[2]) << 8)
                    | usize::from(msg[3])),
            );
        }
        if let Some(n) = need {
            if msg.len() >= n {
                break;
            }
        }
        if take < len {
            break;
        }
    }
    match need {
        None if msg.is_empty() && stream.len() < 5 && looks_like_tls_prefix(stream) => {
            Hello::Incomplete
        }
        None if msg.first().is_some_and(|&t| t != 1) => Hello::Not,
        None => Hello::Incomplete,
        Some(n) if msg.len() < n => {
            if n > crate::STREAM_CAP {
                // Larger than the cap: read what is there as far as it goes.
                parse(&msg[4..], 't').map_or(Hello::Not, Hello::Client)
            } else {
                Hello::Incomplete
            }
        }
        Some(n) => parse(&msg[4..n], 't').map_or(Hello::Not, Hello::Client),
    }
}

/// Parses the ClientHello handshake message at the start of `msg`, without a record layer
/// (as QUIC's CRYPTO frames carry it). With `quic`, its fingerprint starts with `q`.
pub fn handshake_message(msg: &[u8], quic: bool) -> Hello {
    let proto = if quic { 'q' } else { 't' };
    match msg {
        [] => Hello::Incomplete,
        [t, ..] if *t != 1 => Hello::Not,
        [_, a, b, c, body @ ..] => {
            let n = (usize::from(*a) << 16) | (usize::from(*b) << 8) | usize::from(*c);
            if body.len() >= n {
                parse(&body[..n], proto).map_or(Hello::Not, Hello::Client)
            } else if 4 + n > crate::STREAM_CAP && msg.len() >= crate::STREAM_CAP {
                // Larger than the cap: read what is there as far as it goes.
                parse(body, proto).map_or(Hello::Not, Hello::Client)
            } else {
                Hello::Incomplete
            }
        }
        _ => Hello::Incomplete,
    }
}

#[allow(clippy::match_like_matches_macro)] // one arm a case reads better
fn looks_like_tls_prefix(b: &[u8]) -> bool {
    match b {
        [] => true,
        [0x16] => true,
        [0x16, 3, ..] => true,
        _ => false,
    }
}

/// The ClientHello body (after the 4-byte handshake header).
#[allow(clippy::collapsible_match)] // one arm an extension, its checks inside
fn parse(body: &[u8], proto: char) -> Option<ClientHello> {
    let mut r = Reader::new(body);
    let legacy_version = r.u16_be().ok()?;
    r.skip(32).ok()?;
    let sid = usize::from(r.u8().ok()?);
    r.skip(sid).ok()?;
    let cs_len = usize::from(r.u16_be().ok()?);
    let mut cs = Reader::new(r.take(cs_len).ok()?);
    let mut ciphers: Vec<u16> = Vec::new();
    while let Ok(c) = cs.u16_be() {
        if !grease(c) && ciphers.len() < 256 {
            ciphers.push(c);
        }
    }
    let comp = usize::from(r.u8().ok()?);
    r.skip(comp).ok()?;
    let mut hello = ClientHello::default();
    let mut exts: Vec<u16> = Vec::new();
    let mut sigalgs: Vec<u16> = Vec::new();
    let mut version = legacy_version;
    if let Ok(ext_len) = r.u16_be() {
        // A ClientHello cut by the cap: read the extensions that are whole.
        let avail = usize::from(ext_len).min(r.remaining());
        let mut e = Reader::new(r.take(avail).ok()?);
        while let (Ok(ty), Ok(len)) = (e.u16_be(), e.u16_be()) {
            let Ok(data) = e.take(usize::from(len)) else {
                break;
            };
            if grease(ty) {
                continue;
            }
            if exts.len() < 256 {
                exts.push(ty);
            }
            let mut d = Reader::new(data);
            match ty {
                0 => {
                    // server_name: list length, then (type, length, name)s.
                    if d.u16_be().is_ok() {
                        while let (Ok(kind), Ok(n)) = (d.u8(), d.u16_be()) {
                            let Ok(name) = d.take(usize::from(n)) else {
                                break;
                            };
                            if kind == 0 && hello.sni.is_none() {
                                hello.sni = clean_name(name);
                            }
                        }
                    }
                }
                16 => {
                    if d.u16_be().is_ok() {
                        while let Ok(n) = d.u8() {
                            let Ok(p) = d.take(usize::from(n)) else {
                                break;
                            };
                            if hello.alpn.len() < crate::MAX_ALPN {
                                if let Some(p) = clean_name(p) {
                                    hello.alpn.push(p);
                                }
                            }
                        }
                    }
                }
                13 => {
                    if d.u16_be().is_ok() {
                        while let Ok(s) = d.u16_be() {
                            if !grease(s) && sigalgs.len() < 128 {
                                sigalgs.push(s);
                            }
                        }
                    }
                }
                43 => {
                    if d.u8().is_ok() {
                        while let Ok(v) = d.u16_be() {
                            if !grease(v) && v > version && v <= 0x0304 {
                                version = v;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    hello.ja4 = ja4(proto, version, &hello, &ciphers, &exts, &sigalgs);
    Some(hello)
}

fn hex12(s: &str) -> String {
    if s.is_empty() {
        return "000000000000".into();
    }
    let d = Sha256::digest(s.as_bytes());
    d.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

fn ja4(
    proto: char,
    version: u16,
    h: &ClientHello,
    ciphers: &[u16],
    exts: &[u16],
    sigalgs: &[u16],
) -> String {
    let v = match version {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        _ => "00",
    };
    let sni = if h.sni.is_some() { 'd' } else { 'i' };
    let alpn = match h.alpn.first().map(|a| a.as_bytes()) {
        Some([a, .., b]) => format!("{}{}", *a as char, *b as char),
        Some([a]) => format!("{}{}", *a as char, *a as char),
        _ => "00".into(),
    };
    let mut c: Vec<u16> = ciphers.to_vec();
    c.sort_unstable();
    let cs = c
        .iter()
        .map(|x| format!("{x:04x}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut e: Vec<u16> = exts
        .iter()
        .copied()
        .filter(|&x| x != 0 && x != 16)
        .collect();
    e.sort_unstable();
    let mut es = e
        .iter()
        .map(|x| format!("{x:04x}"))
        .collect::<Vec<_>>()
        .join(",");
    if !sigalgs.is_empty() {
        es.push('_');
        es.push_str(
            &sigalgs
                .iter()
                .map(|x| format!("{x:04x}"))
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    format!(
        "{proto}{v}{sni}{:02}{:02}{alpn}_{}_{}",
        ciphers.len().min(99),
        exts.len().min(99),
        hex12(&cs),
        hex12(&es)
    )
}
