//! The application of a flow, from its first payload bytes.

use capsule_wire::view::Reader;

/// A flow's application, as recognised from its first payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
pub enum App {
    #[default]
    Unknown = 0,
    Tls = 1,
    Quic = 2,
    Http1 = 3,
    Http2 = 4,
    Dns = 5,
    Ssh = 6,
    OncRpc = 7,
    Smb = 8,
    Rocev2 = 9,
}

impl App {
    /// Every application, in code order.
    pub const ALL: [App; 10] = [
        App::Unknown,
        App::Tls,
        App::Quic,
        App::Http1,
        App::Http2,
        App::Dns,
        App::Ssh,
        App::OncRpc,
        App::Smb,
        App::Rocev2,
    ];

    /// The name capsule prints and reads.
    pub fn as_str(self) -> &'static str {
        match self {
            App::Unknown => "unknown",
            App::Tls => "tls",
            App::Quic => "quic",
            App::Http1 => "http",
            App::Http2 => "http2",
            App::Dns => "dns",
            App::Ssh => "ssh",
            App::OncRpc => "rpc",
            App::Smb => "smb",
            App::Rocev2 => "rocev2",
        }
    }

    /// The application of a name ([`App::as_str`]; `nfs` is `rpc`, `http1` is `http`).
    pub fn parse(s: &str) -> Option<App> {
        let s = s.to_ascii_lowercase();
        match s.as_str() {
            "nfs" | "onc-rpc" => Some(App::OncRpc),
            "http1" => Some(App::Http1),
            _ => App::ALL.into_iter().find(|a| a.as_str() == s),
        }
    }

    /// The application of a code in the index (unknown codes are [`App::Unknown`]).
    pub fn from_code(c: u8) -> App {
        App::ALL.get(usize::from(c)).copied().unwrap_or_default()
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Recognises the application from a flow's first payload (`tcp`: it came over TCP;
/// `dst_port`: its destination port, used for RoCEv2 only, whose BTH has too little
/// structure to be told from bytes alone).
pub fn app(p: &[u8], tcp: bool, dst_port: u16) -> App {
    if tcp {
        if crate::tls::looks_like_tls(p) {
            return App::Tls;
        }
        if p.starts_with(H2_PREFACE)
            || (p.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(p) && p.len() >= 4)
        {
            return App::Http2;
        }
        if crate::text::looks_like_http(p) {
            return App::Http1;
        }
        if p.starts_with(b"SSH-") {
            return App::Ssh;
        }
        if smb(p) {
            return App::Smb;
        }
        if p.len() >= 4 && p[0] & 0x80 != 0 && rpc(&p[4..]) {
            return App::OncRpc;
        }
        if crate::dns::parse_tcp(p).is_some() {
            return App::Dns;
        }
        return App::Unknown;
    }
    if dst_port == 4791 && bth(p) {
        return App::Rocev2;
    }
    if quic(p) {
        return App::Quic;
    }
    if rpc(p) {
        return App::OncRpc;
    }
    if crate::dns::parse(p).is_some() {
        return App::Dns;
    }
    App::Unknown
}

/// NetBIOS session message then an SMB1/2/3 (or transform) header.
fn smb(p: &[u8]) -> bool {
    matches!(p, [0x00, _, _, _, 0xfd..=0xff, b'S', b'M', b'B', ..])
}

/// An ONC-RPC call: xid, message type 0, RPC version 2.
fn rpc(p: &[u8]) -> bool {
    let mut r = Reader::new(p);
    matches!((r.u32_be(), r.u32_be(), r.u32_be()), (Ok(_), Ok(0), Ok(2)))
}

/// A QUIC long-header Initial packet of version 1, 2 or a draft.
fn quic(p: &[u8]) -> bool {
    let mut r = Reader::new(p);
    let (Ok(first), Ok(version), Ok(dcid)) = (r.u8(), r.u32_be(), r.u8()) else {
        return false;
    };
    let known = matches!(version, 1 | 0x6b33_43cf) || version >> 8 == 0x00ff_0000;
    // Long header + fixed bit; Initial is type 0 in v1 (type 1 in v2).
    let initial = match version {
        0x6b33_43cf => first & 0xf0 == 0xd0,
        _ => first & 0xf0 == 0xc0,
    };
    known && initial && dcid <= 20 && p.len() >= 1200
}

/// An InfiniBand base transport header: transport version 0, and a reserved byte of 0.
fn bth(p: &[u8]) -> bool {
    p.len() >= 12 && p[1] & 0x0f == 0 && p[4] == 0
}
