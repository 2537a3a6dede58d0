//! DNS messages: the query names, and the A/AAAA addresses of the answers.
//!
//! A message over UDP is the payload; over TCP it follows a 2-byte length. Names may use
//! compression pointers (at most [`MAX_JUMPS`] followed, each strictly backwards, so a loop
//! ends). Counts are bounded by [`crate::MAX_DNS_NAMES`] and [`crate::MAX_DNS_ANSWERS`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use capsule_wire::view::Reader;

use crate::Name;

/// Pointers followed in one name.
pub const MAX_JUMPS: usize = 16;

/// What a DNS message holds that capsule keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    /// Whether it is a response (QR bit).
    pub response: bool,
    /// Query names, in order.
    pub queries: Vec<Name>,
    /// A and AAAA answers: the name asked (the first query name) and the address.
    pub answers: Vec<(Name, IpAddr)>,
}

/// Reads a name at `r`, moving past it; `None` when it is malformed.
fn name<'a>(msg: &'a [u8], r: &mut Reader<'a>) -> Option<String> {
    let mut out = String::new();
    let mut cur = *r;
    let mut jumped = false;
    let mut jumps = 0;
    let mut lowest = r.position();
    loop {
        let len = cur.u8().ok()?;
        match len & 0xc0 {
            0x00 => {
                if len == 0 {
                    break;
                }
                let label = cur.take(usize::from(len)).ok()?;
                if !out.is_empty() {
                    out.push('.');
                }
                for &b in label {
                    if !(0x21..0x7f).contains(&b) {
                        return None;
                    }
                    out.push(char::from(b));
                }
                if out.len() > 253 {
                    return None;
                }
            }
            0xc0 => {
                let lo = cur.u8().ok()?;
                let at = (usize::from(len & 0x3f) << 8) | usize::from(lo);
                if !jumped {
                    *r = cur;
                    jumped = true;
                }
                jumps += 1;
                if jumps > MAX_JUMPS || at >= lowest {
                    return None;
                }
                lowest = at;
                cur = Reader::new(msg).at(at);
            }
            _ => return None,
        }
    }
    if !jumped {
        *r = cur;
    }
    if out.is_empty() {
        out.push('.');
    }
    Some(out)
}

/// Parses one DNS message. Strict enough to recognise DNS from its bytes: opcode 0 (query),
/// 1 to 16 questions, every question whole with class IN (1) or ANY (255).
pub fn parse(msg: &[u8]) -> Option<Message> {
    let mut r = Reader::new(msg);
    let _id = r.u16_be().ok()?;
    let flags = r.u16_be().ok()?;
    let qd = r.u16_be().ok()?;
    let an = r.u16_be().ok()?;
    let _ns = r.u16_be().ok()?;
    let _ar = r.u16_be().ok()?;
    if (flags >> 11) & 0xf != 0 || !(1..=16).contains(&qd) || flags & 0x0040 != 0 {
        return None;
    }
    let mut m = Message {
        response: flags & 0x8000 != 0,
        ..Message::default()
    };
    if !m.response && an != 0 {
        return None;
    }
    for _ in 0..qd {
        let n = name(msg, &mut r)?;
        let _ty = r.u16_be().ok()?;
        let class = r.u16_be().ok()? & 0x7fff;
        if class != 1 && class != 255 {
            return None;
        }
        if m.queries.len() < crate::MAX_DNS_NAMES {
            m.queries.push(n);
        }
    }
    let asked = m.queries.first().cloned()?;
    for _ in 0..an {
        let Some(_owner) = name(msg, &mut r) else {
            break;
        };
        let (Ok(ty), Ok(_class), Ok(_ttl), Ok(len)) =
            (r.u16_be(), r.u16_be(), r.u32_be(), r.u16_be())
        else {
            break;
        };
        let Ok(data) = r.take(usize::from(len)) else {
            break;
        };
        let addr = match (ty, data.len()) {
            (1, 4) => IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3])),
            (28, 16) => {
                let mut a = [0u8; 16];
                a.copy_from_slice(data);
                IpAddr::V6(Ipv6Addr::from(a))
            }
            _ => continue,
        };
        if m.answers.len() < crate::MAX_DNS_ANSWERS {
            m.answers.push((asked.clone(), addr));
        }
    }
    Some(m)
}

/// A DNS message over TCP: the 2-byte length, then the message (whole).
pub fn parse_tcp(stream: &[u8]) -> Option<Message> {
    let mut r = Reader::new(stream);
    let len = usize::from(r.u16_be().ok()?);
    parse(r.take(len).ok()?)
}
