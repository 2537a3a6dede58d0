//! Lexer and recursive-descent parser for the filter language (grammar in the module docs).

use std::net::IpAddr;

use capsule_wire::{ipproto, IpProto};

use super::{
    dscp_by_name, service_port, tcp_flag_by_name, Cmp, Direction, Expr, Layer, NameKind, NameText,
    Net, Prim, TunnelSel,
};

/// Nesting limit for parentheses and `not`, so that hostile input cannot overflow the stack.
const MAX_DEPTH: usize = 200;

/// A filter that does not parse: where, what was expected, what was found.
///
/// `Display` prints the expression, a caret line under the offending token and the message:
///
/// ```text
/// host 10.0.0.300 and tcp
///      ^^^^^^^^^^ expected an IPv4 or IPv6 address, found "10.0.0.300"
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct FilterError {
    /// The whole filter expression.
    pub input: String,
    /// Byte offset of the offending token in `input` (`input.len()` at the end of input).
    pub pos: usize,
    /// Byte length of the offending token (0 at the end of input).
    pub len: usize,
    /// What the parser expected there, e.g. `an IPv4 or IPv6 address`.
    pub expected: String,
    /// What it found: a quoted token, or `end of input`.
    pub found: String,
}

impl FilterError {
    /// The one-line message without the expression and caret line.
    pub fn message(&self) -> String {
        format!("expected {}, found {}", self.expected, self.found)
    }

    fn render(&self) -> String {
        // One column per char; control characters (tabs, newlines) become spaces so that the
        // caret line stays under the expression. A long expression is shown as a window
        // around the token, with its byte offset.
        let end = self.pos.saturating_add(self.len);
        let (line, col, width) = crate::excerpt::window(&self.input, self.pos, end);
        let at = if self.input.chars().count() > crate::excerpt::MAX_EXCERPT_CHARS {
            format!(" (at byte {} of {})", self.pos, self.input.len())
        } else {
            String::new()
        };
        format!(
            "{line}\n{}{} {}{at}",
            " ".repeat(col),
            "^".repeat(width),
            self.message()
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Word,
    LParen,
    RParen,
    Not,
    And,
    Or,
    /// A lone `&` or `|`.
    Bad,
    End,
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    kind: Kind,
    text: &'a str,
    start: usize,
}

impl Token<'_> {
    fn describe(&self) -> String {
        match self.kind {
            Kind::End => "end of input".to_string(),
            _ => format!("{:?}", self.text),
        }
    }

    /// The word, lowercased, if this is a word.
    fn word(&self) -> Option<String> {
        (self.kind == Kind::Word).then(|| self.text.to_ascii_lowercase())
    }
}

fn is_delim(c: char) -> bool {
    c.is_whitespace() || matches!(c, '(' | ')' | '!' | '&' | '|')
}

fn lex(src: &str) -> Vec<Token<'_>> {
    let mut toks = Vec::new();
    let mut it = src.char_indices().peekable();
    while let Some(&(start, c)) = it.peek() {
        if c.is_whitespace() {
            it.next();
            continue;
        }
        let (kind, end) = match c {
            '(' => (Kind::LParen, start + 1),
            ')' => (Kind::RParen, start + 1),
            '!' => (Kind::Not, start + 1),
            '&' | '|' => {
                if src[start + 1..].starts_with(c) {
                    (if c == '&' { Kind::And } else { Kind::Or }, start + 2)
                } else {
                    (Kind::Bad, start + 1)
                }
            }
            _ => {
                let end = src[start..].find(is_delim).map_or(src.len(), |i| start + i);
                // `tcp[tcpflags] & tcp-rst != 0` is one token: a byte-offset relation.
                let end = match src[start..end].find('[') {
                    Some(_) => relation_end(src, start),
                    None => end,
                };
                let word = &src[start..end];
                let kind = if word.eq_ignore_ascii_case("and") {
                    Kind::And
                } else if word.eq_ignore_ascii_case("or") {
                    Kind::Or
                } else if word.eq_ignore_ascii_case("not") {
                    Kind::Not
                } else {
                    Kind::Word
                };
                (kind, end)
            }
        };
        toks.push(Token {
            kind,
            text: &src[start..end],
            start,
        });
        while it.peek().is_some_and(|&(i, _)| i < end) {
            it.next();
        }
    }
    toks.push(Token {
        kind: Kind::End,
        text: "",
        start: src.len(),
    });
    toks
}

/// Where a byte-offset relation starting at `start` (a word with a `[`) ends: after
/// `NAME[...]`, an optional `& OPERAND`, a comparison and its right operand. Stops early
/// (leaving the rest to the parser's error) where the text does not have that shape.
fn relation_end(src: &str, start: usize) -> usize {
    let b = src.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    // An operand: a parenthesised group without nesting, or a run of word characters.
    let operand = |i: usize| -> usize {
        if b.get(i) == Some(&b'(') {
            return src[i..].find(')').map_or(i, |j| i + j + 1);
        }
        let mut j = i;
        while j < b.len() && !b[j].is_ascii_whitespace() && !b"()!&|=<>".contains(&b[j]) {
            j += 1;
        }
        j
    };
    let word_end = src[start..]
        .find(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .map_or(src.len(), |i| start + i);
    let Some(close) = src[start..word_end].find(']') else {
        return src[start..].find(is_delim).map_or(src.len(), |i| start + i);
    };
    let mut end = start + close + 1;
    let mut i = skip_ws(end);
    if b.get(i) == Some(&b'&') && b.get(i + 1) != Some(&b'&') {
        let j = operand(skip_ws(i + 1));
        if j == skip_ws(i + 1) {
            return end;
        }
        end = j;
        i = skip_ws(end);
    }
    let op_len = match (b.get(i), b.get(i + 1)) {
        (Some(b'!' | b'=' | b'<' | b'>'), Some(b'=')) => 2,
        (Some(b'=' | b'<' | b'>'), _) => 1,
        _ => return end,
    };
    let k = skip_ws(i + op_len);
    let j = operand(k);
    if j == k {
        i + op_len
    } else {
        j
    }
}

const EXPECTED_PRIMITIVE: &str = "a primitive (host, net, port, portrange, src, dst, tcp, \
     udp, sctp, icmp, icmp6, ip, ip6, proto, vlan, dscp, tcpflags, tcp[tcpflags], ether, arp, \
     greater, less), \"not\" or \"(\"";
const EXPECTED_ADDRESS: &str = "an IPv4 or IPv6 address";
const EXPECTED_NET: &str =
    "a network ADDRESS/PREFIX such as 10.1.0.0/16 or fd00::/8, or a short prefix such as 10.50";
const EXPECTED_PORT: &str = "a port number 0-65535 or service name (http, https, domain, ...)";
const EXPECTED_MAC: &str = "a MAC address such as 00:1b:21:0a:0b:0c";
const EXPECTED_LEN: &str = "a length in bytes 0-4294967295";
const EXPECTED_TCPFLAG: &str = "a TCP flag (fin, syn, rst, push, ack, urg, ece, cwr)";
const EXPECTED_BYTES: &str = "a byte expression LAYER[OFFSET] or LAYER[OFFSET:SIZE] (LAYER \
     one of ether, ip, ip6, tcp, udp, icmp; SIZE 1, 2 or 4), an optional \"& MASK\", a \
     comparison (==, !=, <, <=, >, >=) and a number, such as ip[1] & 0xfc == 0xb8";
const EXPECTED_RELATION: &str = "tcp[tcpflags] (or tcp[13]), an optional \"& MASK\", a \
     comparison (==, !=, <, <=, >, >=) and a value, such as tcp[tcpflags] & tcp-rst != 0; \
     MASK and value are numbers (decimal or 0x hex) or tcp-fin, tcp-syn, tcp-rst, tcp-push, \
     tcp-ack, tcp-urg, tcp-ece, tcp-cwr joined by |";
/// Appended where a tcpdump form has no equivalent in the filter language.
const USE_BPF: &str = "; tcpdump expressions capsule's filter does not know work with --bpf";
/// tcpdump (pcap-filter) keywords capsule's filter does not have.
const TCPDUMP_ONLY: &[&str] = &[
    "rarp",
    "broadcast",
    "multicast",
    "gateway",
    "len",
    "icmptype",
    "icmpcode",
    "icmp6type",
    "icmp6code",
    "inbound",
    "outbound",
    "ifname",
    "on",
    "mpls",
    "pppoed",
    "pppoes",
    "geneve",
    "vxlan",
    "llc",
    "iso",
    "decnet",
    "atalk",
    "aarp",
    "ipx",
    "netbeui",
    "stp",
    "igmp",
    "igrp",
    "pim",
    "vrrp",
    "carp",
    "wlan",
    "type",
    "subtype",
    "dir",
    "protochain",
    "mask",
    "fddi",
    "tr",
    "ppp",
    "slip",
    "link",
    "lat",
    "moprc",
    "mopdl",
    "sca",
    "isis",
    "clnp",
    "esis",
    "atm",
];
const EXPECTED_RANGE: &str = "a port range LOW-HIGH with 0 <= LOW <= HIGH <= 65535";
const EXPECTED_PROTO: &str =
    "an IP protocol number 0-255 or name (tcp, udp, sctp, icmp, icmp6, gre, esp, ah)";
const EXPECTED_VLAN: &str = "a VLAN id 0-4095";
const EXPECTED_NAME: &str =
    "a host name (printable, at most 255 characters; *.suffix for any name under suffix)";
const EXPECTED_APP: &str =
    "an application: tls, quic, http, http2, dns, ssh, rpc (nfs), smb, rocev2";
const EXPECTED_DSCP: &str = "a DSCP 0-63 or name (ef, va, le, default, be, cs0-cs7, af11-af43)";
const EXPECTED_OP: &str = "'and' or 'or'";

/// Parses a filter; `None` for the empty filter.
pub(super) fn parse(src: &str) -> Result<Option<Expr>, FilterError> {
    let mut p = Parser {
        src,
        toks: lex(src),
        i: 0,
        last: None,
    };
    if p.peek().kind == Kind::End {
        return Ok(None);
    }
    let e = p.or_expr(0)?;
    let t = p.peek();
    if t.kind != Kind::End {
        let expected = if t.kind == Kind::RParen {
            "'and' or 'or' (this \")\" closes nothing)"
        } else {
            EXPECTED_OP
        };
        return Err(p.error(t, expected));
    }
    Ok(Some(e))
}

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token<'a>>,
    i: usize,
    /// The qualifiers of the last `host` / `net` / `port` / `portrange` / `ether host`
    /// primitive: its protocol word, direction and keyword, which a bare operand after
    /// `and` / `or` inherits (`tcp port 80 or 443`).
    last: Option<(Option<Prim>, Direction, &'static str)>,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Token<'a> {
        self.toks[self.i.min(self.toks.len() - 1)]
    }

    fn next(&mut self) -> Token<'a> {
        let t = self.peek();
        if t.kind != Kind::End {
            self.i += 1;
        }
        t
    }

    fn error(&self, t: Token<'_>, expected: &str) -> FilterError {
        FilterError {
            input: self.src.to_string(),
            pos: t.start,
            len: t.text.len(),
            expected: expected.to_string(),
            found: t.describe(),
        }
    }

    /// A chain of operands joined by `and` / `or`, which bind equally and group from the
    /// left, as in tcpdump and libpcap: `tcp or udp and port 53` is `(tcp or udp) and port
    /// 53`. (`&&` and `||` are the same words.) `not` binds tighter than both.
    fn or_expr(&mut self, depth: usize) -> Result<Expr, FilterError> {
        let mut e = self.unary(depth)?;
        loop {
            let and = match self.peek().kind {
                Kind::And => true,
                Kind::Or => false,
                _ => return Ok(e),
            };
            self.next();
            let rhs = self.unary(depth)?;
            e = if and {
                Expr::and(vec![e, rhs])
            } else {
                Expr::or(vec![e, rhs])
            };
        }
    }

    fn unary(&mut self, depth: usize) -> Result<Expr, FilterError> {
        let t = self.next();
        match t.kind {
            Kind::Not | Kind::LParen if depth >= MAX_DEPTH => Err(self.error(
                t,
                &format!("at most {MAX_DEPTH} nested parentheses and negations"),
            )),
            Kind::Not => Ok(Expr::not(self.unary(depth + 1)?)),
            Kind::LParen => {
                let e = self.or_expr(depth + 1)?;
                let close = self.next();
                if close.kind != Kind::RParen {
                    let col = self.src[..t.start].chars().count() + 1;
                    return Err(self.error(
                        close,
                        &format!("'and' or 'or', or \")\" to close the \"(\" at column {col}"),
                    ));
                }
                Ok(e)
            }
            Kind::Word => self.primitive(t),
            _ => Err(self.error(t, EXPECTED_PRIMITIVE)),
        }
    }

    /// A primitive starting with the word `t` (already consumed).
    fn primitive(&mut self, t: Token<'a>) -> Result<Expr, FilterError> {
        self.primitive_in(t, None)
    }

    /// A primitive starting with `t`, after the protocol word `proto` if any (`tcp port 80`).
    fn primitive_in(&mut self, t: Token<'a>, proto: Option<Prim>) -> Result<Expr, FilterError> {
        let w = t.text.to_ascii_lowercase();
        let keyword = |w: &str| -> Option<&'static str> {
            ["host", "net", "port", "portrange"]
                .into_iter()
                .find(|k| *k == w)
        };
        let prim = match w.as_str() {
            "host" | "net" | "port" | "portrange" => {
                let kw = keyword(&w).expect("one of the four");
                // `port (80 or 443)`: tcpdump's list of values for one qualifier.
                if self.peek().kind == Kind::LParen {
                    return self.values(proto, Direction::SrcOrDst, kw, 0);
                }
                self.addressed(proto, Direction::SrcOrDst, kw)?
            }
            "src" | "dst" => {
                let dir = self.direction(&w);
                let k = self.next();
                match k.word().as_deref().and_then(keyword) {
                    Some(kw) if self.peek().kind == Kind::LParen => {
                        return self.values(proto, dir, kw, 0)
                    }
                    Some(kw) => self.addressed(proto, dir, kw)?,
                    // `src 10.0.0.1`, `dst 10.1.0.0/16`: tcpdump takes an address after a
                    // direction as `host` (a network as `net`).
                    None if k.kind == Kind::Word && k.text.parse::<IpAddr>().is_ok() => {
                        self.operand(k, proto, dir, "host")?
                    }
                    None if k.kind == Kind::Word && net(k.text).is_some() => {
                        self.operand(k, proto, dir, "net")?
                    }
                    None => {
                        return Err(self.error(
                            k,
                            &format!(
                                "\"host\", \"net\", \"port\" or \"portrange\" (or an \
                                 address) after {w:?}"
                            ),
                        ))
                    }
                }
            }
            // `len > 100`, `len<=1500`: the packet's length on the wire, as tcpdump's
            // `len` (`greater` and `less` are its other spellings).
            _ if w == "len"
                || (w.starts_with("len") && w[3..].starts_with(['<', '>', '=', '!'])) =>
            {
                return self.length(t);
            }
            "tcp" => return self.shorthand(Prim::Proto(ipproto::TCP)),
            "udp" => return self.shorthand(Prim::Proto(ipproto::UDP)),
            "sctp" => return self.shorthand(Prim::Proto(ipproto::SCTP)),
            "icmp" => return self.shorthand(Prim::Proto(ipproto::ICMP)),
            "icmp6" => return self.shorthand(Prim::Proto(ipproto::ICMPV6)),
            "ip" => return self.shorthand(Prim::Ip4),
            "ip6" => return self.shorthand(Prim::Ip6),
            "proto" => self.proto()?,
            "vlan" => {
                let n = self.peek();
                if n.kind == Kind::Word && n.text.starts_with(|c: char| c.is_ascii_digit()) {
                    self.next();
                    let id = number(n.text, 4095).ok_or_else(|| self.error(n, EXPECTED_VLAN))?;
                    Prim::Vlan(Some(id as u16))
                } else {
                    Prim::Vlan(None)
                }
            }
            "tunnel" => {
                let n = self.peek();
                let sel = |w: &str| n.kind == Kind::Word && n.text.eq_ignore_ascii_case(w);
                if sel("vni") {
                    self.next();
                    let v = self.next();
                    let vni = number(v.text, 0xff_ffff)
                        .filter(|_| v.kind == Kind::Word)
                        .ok_or_else(|| self.error(v, "a VNI 0-16777215"))?;
                    Prim::Tunnel(Some(TunnelSel::Vni(vni)))
                } else if sel("host") {
                    self.next();
                    let v = self.next();
                    let a = v
                        .text
                        .parse::<IpAddr>()
                        .ok()
                        .filter(|_| v.kind == Kind::Word)
                        .ok_or_else(|| self.error(v, "an IPv4 or IPv6 address"))?;
                    Prim::Tunnel(Some(TunnelSel::Host(a)))
                } else {
                    Prim::Tunnel(None)
                }
            }
            "mpls" => {
                let n = self.peek();
                if n.kind == Kind::Word && n.text.starts_with(|c: char| c.is_ascii_digit()) {
                    self.next();
                    let l = number(n.text, 0xf_ffff)
                        .ok_or_else(|| self.error(n, "an MPLS label 0-1048575"))?;
                    Prim::Mpls(Some(l))
                } else {
                    Prim::Mpls(None)
                }
            }
            "sni" | "dns" | "http.host" | "app" => {
                let kind = match w.as_str() {
                    "sni" => NameKind::Sni,
                    "dns" => NameKind::Dns,
                    "http.host" => NameKind::HttpHost,
                    _ => NameKind::App,
                };
                let n = self.next();
                let ok = n.kind == Kind::Word
                    && (kind != NameKind::App
                        || capsule_names::App::parse(n.text)
                            .is_some_and(|a| a != capsule_names::App::Unknown));
                let text = ok.then(|| NameText::new(n.text)).flatten();
                Prim::Name(
                    kind,
                    text.ok_or_else(|| {
                        self.error(
                            n,
                            if kind == NameKind::App {
                                EXPECTED_APP
                            } else {
                                EXPECTED_NAME
                            },
                        )
                    })?,
                )
            }
            "dscp" => {
                let n = self.next();
                let v = if n.kind != Kind::Word {
                    None
                } else if n.text.starts_with(|c: char| c.is_ascii_digit()) {
                    number(n.text, 63).map(|v| v as u8)
                } else {
                    dscp_by_name(n.text)
                };
                Prim::Dscp(v.ok_or_else(|| self.error(n, EXPECTED_DSCP))?)
            }
            "tcpflags" => {
                let n = self.next();
                let bit = n
                    .word()
                    .and_then(|w| tcp_flag_by_name(&w))
                    .ok_or_else(|| self.error(n, EXPECTED_TCPFLAG))?;
                Prim::TcpFlags {
                    mask: bit,
                    op: Cmp::Ne,
                    value: 0,
                }
            }
            "ether" => {
                let k = self.peek();
                let dir = match k.word().as_deref() {
                    Some(d @ ("src" | "dst")) => {
                        self.next();
                        self.direction(d)
                    }
                    _ => Direction::SrcOrDst,
                };
                let k = self.peek();
                if k.word().as_deref() == Some("host") {
                    self.next();
                } else if dir == Direction::SrcOrDst {
                    let k = self.next();
                    return Err(self.error(
                        k,
                        &format!("\"host\", \"src\" or \"dst\" after \"ether\"{USE_BPF}"),
                    ));
                }
                self.addressed(None, dir, "ether")?
            }
            "arp" => Prim::Arp,
            "greater" | "less" => {
                let n = self.next();
                let len = number(n.text, u32::MAX)
                    .filter(|_| n.kind == Kind::Word)
                    .ok_or_else(|| self.error(n, EXPECTED_LEN))?;
                if w == "greater" {
                    Prim::Greater(len)
                } else {
                    Prim::Less(len)
                }
            }
            _ if w.starts_with("tcp[") => {
                relation(t.text).ok_or_else(|| self.error(t, EXPECTED_RELATION))?
            }
            _ if w.contains('[') => match relation(t.text) {
                Some(p) => p,
                None => return Err(self.error(t, &format!("{EXPECTED_BYTES}{USE_BPF}"))),
            },
            _ if TCPDUMP_ONLY.contains(&w.as_str()) => {
                return Err(self.error(t, &format!("{EXPECTED_PRIMITIVE}{USE_BPF}")))
            }
            _ => match self.last {
                // A bare operand after `and` / `or` inherits the last qualifiers, as in
                // tcpdump: `tcp port 80 or 443` is `tcp port 80 or tcp port 443`.
                // A word that is not such an operand either is an unknown primitive.
                Some((proto, dir, kw)) => {
                    let second = match self.operand(t, proto, dir, kw) {
                        Ok(p) => Expr::Prim(p),
                        Err(_) => return Err(self.error(t, EXPECTED_PRIMITIVE)),
                    };
                    return Ok(match proto {
                        Some(first) => Expr::and(vec![Expr::Prim(first), second]),
                        None => second,
                    });
                }
                None => return Err(self.error(t, EXPECTED_PRIMITIVE)),
            },
        };
        if !matches!(
            prim,
            Prim::Host(..) | Prim::Net(..) | Prim::Port(..) | Prim::PortRange(..) | Prim::Ether(..)
        ) {
            self.last = None;
        }
        Ok(Expr::Prim(prim))
    }

    /// `len OP N` (the word `t`, consumed, may hold the whole relation): `greater` and
    /// `less` and their combinations.
    fn length(&mut self, t: Token<'a>) -> Result<Expr, FilterError> {
        const EXPECTED: &str = "a comparison (>, >=, <, <=, ==, !=) and a length in bytes after \
                                \"len\", such as len > 1000";
        let mut text = t.text[3..].to_string();
        // The relation may be spread over the next words: `len > 100`, `len >100`.
        while !text.starts_with(|c: char| c.is_ascii_digit())
            && text.trim_start_matches(['<', '>', '=', '!']).is_empty()
        {
            let n = self.peek();
            // `!` lexes as a negation of its own: `len != 100`.
            if n.kind != Kind::Word && !(n.kind == Kind::Not && n.text == "!") {
                break;
            }
            self.next();
            text.push_str(n.text);
        }
        let op_len = text
            .find(|c: char| !matches!(c, '<' | '>' | '=' | '!'))
            .unwrap_or(text.len());
        let (op, num) = text.split_at(op_len);
        let n = number(num, u32::MAX).ok_or_else(|| self.error(t, EXPECTED))?;
        let p = |prim| Expr::Prim(prim);
        let exactly = |n| Expr::and(vec![p(Prim::Greater(n)), p(Prim::Less(n))]);
        self.last = None;
        Ok(match op {
            ">=" => p(Prim::Greater(n)),
            ">" => match n.checked_add(1) {
                Some(m) => p(Prim::Greater(m)),
                None => Expr::not(p(Prim::Greater(0))),
            },
            "<=" => p(Prim::Less(n)),
            "<" => match n.checked_sub(1) {
                Some(m) => p(Prim::Less(m)),
                None => Expr::not(p(Prim::Greater(0))),
            },
            "==" | "=" => exactly(n),
            "!=" => Expr::not(exactly(n)),
            _ => return Err(self.error(t, EXPECTED)),
        })
    }

    /// `( v1 or v2 and not v3 ... )` after `host`, `net`, `port` or `portrange` (`kw`):
    /// each value is the primitive with the same qualifiers, combined as written, as
    /// tcpdump reads `port (80 or 443)`.
    fn values(
        &mut self,
        proto: Option<Prim>,
        dir: Direction,
        kw: &'static str,
        depth: usize,
    ) -> Result<Expr, FilterError> {
        let open = self.next();
        if depth >= MAX_DEPTH {
            return Err(self.error(
                open,
                &format!("at most {MAX_DEPTH} nested parentheses and negations"),
            ));
        }
        let mut e = self.value(proto, dir, kw, depth)?;
        loop {
            let t = self.next();
            match t.kind {
                Kind::RParen => break,
                Kind::And | Kind::Or => {
                    let rhs = self.value(proto, dir, kw, depth)?;
                    e = if t.kind == Kind::And {
                        Expr::and(vec![e, rhs])
                    } else {
                        Expr::or(vec![e, rhs])
                    };
                }
                _ => {
                    let col = self.src[..open.start].chars().count() + 1;
                    return Err(self.error(
                        t,
                        &format!("'and' or 'or', or \")\" to close the \"(\" at column {col}"),
                    ));
                }
            }
        }
        self.last = Some((proto, dir, kw));
        Ok(e)
    }

    /// One value of a [`Parser::values`] list: `not` a value, a nested list, or an operand.
    fn value(
        &mut self,
        proto: Option<Prim>,
        dir: Direction,
        kw: &'static str,
        depth: usize,
    ) -> Result<Expr, FilterError> {
        match self.peek().kind {
            Kind::Not if depth < MAX_DEPTH => {
                self.next();
                Ok(Expr::not(self.value(proto, dir, kw, depth + 1)?))
            }
            Kind::LParen => self.values(proto, dir, kw, depth + 1),
            _ => {
                let t = self.next();
                Ok(Expr::Prim(self.operand(t, proto, dir, kw)?))
            }
        }
    }

    /// The direction after `src` / `dst` (`w`, consumed), including `src or dst` and
    /// `src and dst` (the `or` / `and` and the second word are consumed here).
    fn direction(&mut self, w: &str) -> Direction {
        let one = if w == "src" {
            Direction::Src
        } else {
            Direction::Dst
        };
        let other = if w == "src" { "dst" } else { "src" };
        let op = self.peek();
        let then = self.toks.get(self.i + 1).copied();
        match (op.kind, then.and_then(|t| t.word())) {
            (Kind::Or | Kind::And, Some(t)) if t == other => {
                self.next();
                self.next();
                if op.kind == Kind::Or {
                    Direction::SrcOrDst
                } else {
                    Direction::SrcAndDst
                }
            }
            _ => one,
        }
    }

    /// `proto_word [follower]`: a protocol word directly followed by an address, port or
    /// protocol primitive means both.
    fn shorthand(&mut self, first: Prim) -> Result<Expr, FilterError> {
        let n = self.peek();
        match n.word().as_deref() {
            Some("host" | "net" | "port" | "portrange" | "src" | "dst" | "proto") => {
                self.next();
                let second = self.primitive_in(n, Some(first))?;
                Ok(Expr::and(vec![Expr::Prim(first), second]))
            }
            _ => {
                self.last = None;
                Ok(Expr::Prim(first))
            }
        }
    }

    /// The operand of `host`, `net`, `port`, `portrange` or `ether host` (`kw`), read from the
    /// next token; remembers the qualifiers for a bare operand after `and` / `or`.
    fn addressed(
        &mut self,
        proto: Option<Prim>,
        dir: Direction,
        kw: &'static str,
    ) -> Result<Prim, FilterError> {
        let t = self.next();
        self.operand(t, proto, dir, kw)
    }

    fn operand(
        &mut self,
        t: Token<'a>,
        proto: Option<Prim>,
        dir: Direction,
        kw: &'static str,
    ) -> Result<Prim, FilterError> {
        let text = if t.kind == Kind::Word { t.text } else { "" };
        let prim = match kw {
            "host" => text
                .parse::<IpAddr>()
                .map(|a| Prim::Host(dir, a))
                .map_err(|_| self.error(t, EXPECTED_ADDRESS))?,
            "net" if self.peek().word().as_deref() == Some("mask") => {
                // `net 10.0.0.0 mask 255.255.0.0`: the mask as a prefix length.
                self.next();
                let m = self.next();
                let len = m
                    .word()
                    .and_then(|w| w.parse::<std::net::Ipv4Addr>().ok())
                    .map(u32::from)
                    .filter(|m| m.leading_ones() + m.trailing_zeros() == 32)
                    .map(u32::leading_ones)
                    .ok_or_else(|| {
                        self.error(
                            m,
                            "a contiguous IPv4 netmask such as 255.255.0.0 after \"mask\"",
                        )
                    })?;
                match net(&format!("{text}/{len}")) {
                    Some(Ok(n)) if text.parse::<std::net::Ipv4Addr>().is_ok() => Prim::Net(dir, n),
                    _ => return Err(self.error(t, "an IPv4 network address before \"mask\"")),
                }
            }
            "net" => match net(text) {
                Some(Ok(n)) => Prim::Net(dir, n),
                Some(Err(IpAddr::V4(_))) => {
                    return Err(self.error(t, "a prefix length 0-32 for an IPv4 network"))
                }
                Some(Err(IpAddr::V6(_))) => {
                    return Err(self.error(t, "a prefix length 0-128 for an IPv6 network"))
                }
                None => return Err(self.error(t, EXPECTED_NET)),
            },
            "port" => port(text)
                .map(|p| Prim::Port(dir, p))
                .ok_or_else(|| self.error(t, EXPECTED_PORT))?,
            "ether" => mac(text)
                .map(|m| Prim::Ether(dir, m))
                .ok_or_else(|| self.error(t, EXPECTED_MAC))?,
            _ => text
                .split_once('-')
                .and_then(|(a, b)| Some((number(a, 65535)?, number(b, 65535)?)))
                .filter(|(a, b)| a <= b)
                .map(|(a, b)| Prim::PortRange(dir, a as u16, b as u16))
                .ok_or_else(|| self.error(t, EXPECTED_RANGE))?,
        };
        self.last = Some((proto, dir, kw));
        Ok(prim)
    }
    /// The operand of `proto` (consumed).
    fn proto(&mut self) -> Result<Prim, FilterError> {
        let t = self.next();
        // A number 0-255 or a name, as `IpProto` reads them.
        let n = (t.kind == Kind::Word)
            .then(|| t.text.parse::<IpProto>().ok())
            .flatten();
        n.map(|p| Prim::Proto(p.into()))
            .ok_or_else(|| self.error(t, EXPECTED_PROTO))
    }
}

/// A port number or a service name.
fn port(s: &str) -> Option<u16> {
    match number(s, 65535) {
        Some(n) => Some(n as u16),
        None => service_port(s),
    }
}

/// A network: `ADDRESS/PREFIX`, a whole address (a /32 or /128), or as in tcpdump an IPv4
/// prefix of one to three numbers (`10`, `10.50`, `10.50.1`: /8, /16, /24; with `/N`, that
/// prefix length instead). `Some(Err(addr))` when the prefix is too long for the address.
fn net(text: &str) -> Option<Result<Net, IpAddr>> {
    let (a, p) = match text.split_once('/') {
        Some((a, p)) => (a, Some(number(p, 255)? as u8)),
        None => (text, None),
    };
    let (addr, implied) = match a.parse::<IpAddr>() {
        Ok(addr @ IpAddr::V4(_)) => (addr, 32),
        Ok(addr @ IpAddr::V6(_)) => (addr, 128),
        Err(_) => {
            let parts: Vec<&str> = a.split('.').collect();
            if parts.len() > 3 {
                return None;
            }
            let mut octets = [0u8; 4];
            for (o, part) in octets.iter_mut().zip(&parts) {
                *o = number(part, 255)? as u8;
            }
            (IpAddr::from(octets), 8 * parts.len() as u8)
        }
    };
    let prefix = p.unwrap_or(implied);
    Some(Net::new(addr, prefix).ok_or(addr))
}

/// A MAC address: six hex bytes separated by `:` or `-` (`0:1b:21:a:b:c` too).
fn mac(s: &str) -> Option<[u8; 6]> {
    let sep = if s.contains('-') { '-' } else { ':' };
    let mut m = [0u8; 6];
    let mut parts = s.split(sep);
    for b in &mut m {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// A number in a relation: decimal, `0x` hex, or TCP flag constants (`tcp-syn`) joined by
/// `|`, optionally in parentheses.
fn flag_value(s: &str) -> Option<u8> {
    let s = s.trim();
    let s = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(s);
    let mut v = 0u8;
    for part in s.split('|') {
        let part = part.trim().to_ascii_lowercase();
        let n = if let Some(hex) = part.strip_prefix("0x") {
            if hex.is_empty() || hex.len() > 2 {
                return None;
            }
            u8::from_str_radix(hex, 16).ok()?
        } else if let Some(name) = part.strip_prefix("tcp-") {
            tcp_flag_by_name(name)?
        } else {
            number(&part, 255)? as u8
        };
        v |= n;
    }
    Some(v)
}

/// `tcp[tcpflags] [& MASK] OP VALUE` (or `tcp[13]`), as lexed into one token.
fn relation(text: &str) -> Option<Prim> {
    let (name, rest) = text.split_once('[')?;
    let name = name.trim().to_ascii_lowercase();
    let (index, rest) = rest.split_once(']')?;
    let index = index.trim().to_ascii_lowercase();
    let mut rest = rest.trim_start();
    let mut mask = None;
    if let Some(r) = rest.strip_prefix('&') {
        let at = r.find(['!', '=', '<', '>'])?;
        mask = Some(r[..at].trim());
        rest = &r[at..];
    }
    let (op, value) = [
        ("!=", Cmp::Ne),
        ("==", Cmp::Eq),
        ("<=", Cmp::Le),
        (">=", Cmp::Ge),
        ("=", Cmp::Eq),
        ("<", Cmp::Lt),
        (">", Cmp::Gt),
    ]
    .iter()
    .find_map(|&(sym, op)| rest.strip_prefix(sym).map(|v| (op, v.trim())))?;
    // The TCP flags byte: planned from the index's flag unions, and names allowed.
    if name == "tcp" && matches!(index.as_str(), "tcpflags" | "13") {
        return Some(Prim::TcpFlags {
            mask: mask.map_or(Some(0xff), flag_value)?,
            op,
            value: flag_value(value)?,
        });
    }
    let layer = Layer::by_name(&name)?;
    let (offset, size) = match index.split_once(':') {
        Some((o, s)) => (o.trim(), s.trim()),
        None => (index.as_str(), "1"),
    };
    let size = match size {
        "1" => 1u8,
        "2" => 2,
        "4" => 4,
        _ => return None,
    };
    let offset = u16::try_from(byte_value(offset)?).ok()?;
    let all = match size {
        1 => 0xff,
        2 => 0xffff,
        _ => u32::MAX,
    };
    Some(Prim::Bytes {
        layer,
        offset,
        size,
        mask: mask.map_or(Some(all), byte_value)? & all,
        op,
        value: byte_value(value)?,
    })
}

/// A number in a byte expression: decimal or `0x` hexadecimal, up to 32 bits.
fn byte_value(s: &str) -> Option<u32> {
    let s = s.trim();
    let s = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(s)
        .trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.len() <= 8 => u32::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None => number(s, u32::MAX),
    }
}

/// A plain decimal number (ASCII digits only, no sign) no greater than `max`.
fn number(s: &str, max: u32) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = s.trim_start_matches('0');
    if digits.len() > 10 {
        return None;
    }
    let n: u64 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    u32::try_from(n).ok().filter(|&n| n <= max)
}

#[cfg(test)]
mod tests {
    use super::super::Filter;
    use super::*;

    #[track_caller]
    fn canon(src: &str) -> String {
        let f = Filter::parse(src).unwrap_or_else(|e| panic!("{e}"));
        let s = f.to_string();
        assert_eq!(
            Filter::parse(&s).unwrap(),
            f,
            "round trip of {src:?} via {s:?}"
        );
        s
    }

    #[track_caller]
    fn expr(src: &str) -> Expr {
        parse(src).unwrap().unwrap()
    }

    #[track_caller]
    fn err(src: &str) -> FilterError {
        match Filter::parse(src) {
            Ok(f) => panic!("{src:?} parsed as {f:?}"),
            Err(e) => e,
        }
    }

    /// Asserts position, length, expected (substring) and found.
    #[track_caller]
    fn err_at(src: &str, pos: usize, len: usize, expected: &str, found: &str) {
        let e = err(src);
        assert_eq!((e.pos, e.len), (pos, len), "{e}");
        assert!(e.expected.contains(expected), "{e}");
        assert_eq!(e.found, found, "{e}");
        assert_eq!(e.input, src);
    }

    fn p(prim: Prim) -> Expr {
        Expr::Prim(prim)
    }

    fn a(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn filter_lex() {
        fn kinds(s: &str) -> Vec<(Kind, &str)> {
            lex(s).iter().map(|t| (t.kind, t.text)).collect()
        }
        assert_eq!(
            kinds("!(tcp)&&x||y & | AND Or nOt"),
            vec![
                (Kind::Not, "!"),
                (Kind::LParen, "("),
                (Kind::Word, "tcp"),
                (Kind::RParen, ")"),
                (Kind::And, "&&"),
                (Kind::Word, "x"),
                (Kind::Or, "||"),
                (Kind::Word, "y"),
                (Kind::Bad, "&"),
                (Kind::Bad, "|"),
                (Kind::And, "AND"),
                (Kind::Or, "Or"),
                (Kind::Not, "nOt"),
                (Kind::End, ""),
            ]
        );
        assert_eq!(
            kinds("net fd00::/8\tportrange 1-2\u{3000}é"),
            vec![
                (Kind::Word, "net"),
                (Kind::Word, "fd00::/8"),
                (Kind::Word, "portrange"),
                (Kind::Word, "1-2"),
                (Kind::Word, "é"),
                (Kind::End, ""),
            ]
        );
        assert_eq!(lex("&&&")[1].kind, Kind::Bad);
    }

    #[test]
    fn filter_parse_primitives() {
        assert_eq!(
            expr("host 10.0.0.1"),
            p(Prim::Host(Direction::SrcOrDst, a("10.0.0.1")))
        );
        assert_eq!(
            expr("src host fd00::1"),
            p(Prim::Host(Direction::Src, a("fd00::1")))
        );
        assert_eq!(expr("dst host ::"), p(Prim::Host(Direction::Dst, a("::"))));
        assert_eq!(
            expr("net 10.1.2.3/16"),
            p(Prim::Net(
                Direction::SrcOrDst,
                Net {
                    addr: a("10.1.0.0"),
                    prefix: 16
                }
            ))
        );
        assert_eq!(
            expr("dst net fd00::ff/8"),
            p(Prim::Net(
                Direction::Dst,
                Net {
                    addr: a("fd00::"),
                    prefix: 8
                }
            ))
        );
        assert_eq!(expr("port 0"), p(Prim::Port(Direction::SrcOrDst, 0)));
        assert_eq!(expr("src port 65535"), p(Prim::Port(Direction::Src, 65535)));
        assert_eq!(expr("dst port 0080"), p(Prim::Port(Direction::Dst, 80)));
        assert_eq!(
            expr("portrange 1-1024"),
            p(Prim::PortRange(Direction::SrcOrDst, 1, 1024))
        );
        assert_eq!(
            expr("src portrange 7-7"),
            p(Prim::PortRange(Direction::Src, 7, 7))
        );
        assert_eq!(expr("tcp"), p(Prim::Proto(6)));
        assert_eq!(expr("udp"), p(Prim::Proto(17)));
        assert_eq!(expr("sctp"), p(Prim::Proto(132)));
        assert_eq!(expr("icmp"), p(Prim::Proto(1)));
        assert_eq!(expr("icmp6"), p(Prim::Proto(58)));
        assert_eq!(expr("ip"), p(Prim::Ip4));
        assert_eq!(expr("ip6"), p(Prim::Ip6));
        assert_eq!(expr("proto 47"), p(Prim::Proto(47)));
        assert_eq!(expr("proto gre"), p(Prim::Proto(47)));
        assert_eq!(expr("proto esp"), p(Prim::Proto(50)));
        assert_eq!(expr("proto ah"), p(Prim::Proto(51)));
        assert_eq!(expr("proto ipv6-icmp"), p(Prim::Proto(58)));
        assert_eq!(expr("proto icmp6"), p(Prim::Proto(58)));
        assert_eq!(expr("proto udp"), p(Prim::Proto(17)));
        assert_eq!(expr("proto 0"), p(Prim::Proto(0)));
        assert_eq!(expr("proto 255"), p(Prim::Proto(255)));
        assert_eq!(expr("vlan"), p(Prim::Vlan(None)));
        assert_eq!(expr("vlan 0"), p(Prim::Vlan(Some(0))));
        assert_eq!(expr("vlan 4095"), p(Prim::Vlan(Some(4095))));
        assert_eq!(expr("dscp 0"), p(Prim::Dscp(0)));
        assert_eq!(expr("dscp 63"), p(Prim::Dscp(63)));
        assert_eq!(expr("dscp ef"), p(Prim::Dscp(46)));
        assert_eq!(expr("dscp AF41"), p(Prim::Dscp(34)));
        assert_eq!(expr("dscp be"), p(Prim::Dscp(0)));
        assert_eq!(expr("dscp cs0"), p(Prim::Dscp(0)));
        assert_eq!(expr("dscp default"), p(Prim::Dscp(0)));
        assert_eq!(expr("dscp cs5"), p(Prim::Dscp(40)));
        assert_eq!(expr("dscp va"), p(Prim::Dscp(44)));
        assert_eq!(expr("dscp le"), p(Prim::Dscp(1)));
        assert_eq!(expr("HOST 10.0.0.1"), expr("host 10.0.0.1"));
        assert_eq!(expr("Tcp Port 80"), expr("tcp port 80"));
    }

    #[test]
    fn filter_parse_shorthand() {
        let tcp443 = Expr::And(vec![
            p(Prim::Proto(6)),
            p(Prim::Port(Direction::SrcOrDst, 443)),
        ]);
        assert_eq!(expr("tcp port 443"), tcp443);
        assert_eq!(expr("tcp and port 443"), tcp443);
        assert_eq!(
            expr("udp src port 53"),
            Expr::And(vec![p(Prim::Proto(17)), p(Prim::Port(Direction::Src, 53))])
        );
        assert_eq!(
            expr("ip host 10.0.0.1"),
            Expr::And(vec![
                p(Prim::Ip4),
                p(Prim::Host(Direction::SrcOrDst, a("10.0.0.1")))
            ])
        );
        assert_eq!(
            expr("ip6 proto 47"),
            Expr::And(vec![p(Prim::Ip6), p(Prim::Proto(47))])
        );
        assert_eq!(canon("ip6 dst net fd00::/8"), "ip6 and dst net fd00::/8");
        assert_eq!(canon("sctp portrange 1-2"), "sctp and portrange 1-2");
        // Binds like one primitive.
        assert_eq!(canon("not tcp port 80"), "not (tcp and port 80)");
        assert_eq!(
            canon("tcp port 80 or udp port 53"),
            "(tcp and port 80) or (udp and port 53)"
        );
        // Only address, port and proto primitives follow a protocol word.
        err_at("tcp udp", 4, 3, EXPECTED_OP, "\"udp\"");
        err_at("tcp vlan", 4, 4, EXPECTED_OP, "\"vlan\"");
        err_at("tcp port", 8, 0, EXPECTED_PORT, "end of input");
    }

    #[test]
    fn filter_parse_precedence() {
        let (t, u, s) = (p(Prim::Proto(6)), p(Prim::Proto(17)), p(Prim::Proto(132)));
        // not binds tightest; and / or bind equally, from the left (tcpdump's rule).
        assert_eq!(
            expr("tcp or udp and sctp"),
            Expr::And(vec![Expr::Or(vec![t.clone(), u.clone()]), s.clone()])
        );
        assert_eq!(
            expr("tcp and udp or sctp and tcp"),
            Expr::And(vec![
                Expr::Or(vec![Expr::And(vec![t.clone(), u.clone()]), s.clone()]),
                t.clone()
            ])
        );
        assert_eq!(
            expr("tcp and udp or sctp"),
            Expr::Or(vec![Expr::And(vec![t.clone(), u.clone()]), s.clone()])
        );
        assert_eq!(
            expr("not tcp and udp"),
            Expr::And(vec![Expr::not(t.clone()), u.clone()])
        );
        assert_eq!(
            expr("! tcp || udp"),
            Expr::Or(vec![Expr::not(t.clone()), u.clone()])
        );
        assert_eq!(
            expr("not (tcp or udp)"),
            Expr::not(Expr::Or(vec![t.clone(), u.clone()]))
        );
        assert_eq!(
            expr("(tcp or udp) and sctp"),
            Expr::And(vec![Expr::Or(vec![t.clone(), u.clone()]), s.clone()])
        );
        assert_eq!(expr("not not tcp"), Expr::not(Expr::not(t.clone())));
        assert_eq!(expr("((tcp))"), t.clone());
        // and / or flatten, with or without parentheses.
        assert_eq!(
            expr("tcp and (udp and sctp)"),
            Expr::And(vec![t.clone(), u.clone(), s.clone()])
        );
        assert_eq!(expr("(tcp || udp) || sctp"), Expr::Or(vec![t, u, s]));
        // Canonical forms.
        assert_eq!(canon("tcp&&udp||!sctp"), "(tcp and udp) or not sctp");
        assert_eq!(canon("tcp or udp and sctp"), "(tcp or udp) and sctp");
        assert_eq!(
            canon("(tcp or udp) and not (sctp or icmp)"),
            "(tcp or udp) and not (sctp or icmp)"
        );
        assert_eq!(canon("not (tcp and udp)"), "not (tcp and udp)");
        assert_eq!(canon("((tcp) and ((udp)))"), "tcp and udp");
        assert_eq!(canon("!!tcp"), "not not tcp");
        assert_eq!(
            canon("proto 6 or proto 47 or proto 99"),
            "tcp or proto gre or proto 99"
        );
        assert_eq!(canon("proto ipv6-icmp"), "icmp6");
        assert_eq!(
            canon("dscp 46 and dscp 45 and dscp be"),
            "dscp ef and dscp 45 and dscp default"
        );
        assert_eq!(canon("src net 10.1.2.3/16"), "src net 10.1.0.0/16");
        assert_eq!(canon("host FD00:0::1"), "host fd00::1");
        assert_eq!(canon("dst portrange 010-20"), "dst portrange 10-20");
        assert_eq!(canon("vlan and vlan 7"), "vlan and vlan 7");
    }

    #[test]
    fn filter_error_display() {
        let e = err("host 10.0.0.300 and tcp");
        assert_eq!(
            e.to_string(),
            "host 10.0.0.300 and tcp\n     ^^^^^^^^^^ expected an IPv4 or IPv6 address, found \"10.0.0.300\""
        );
        assert_eq!(
            e.message(),
            "expected an IPv4 or IPv6 address, found \"10.0.0.300\""
        );
        let e = err("host");
        assert_eq!(
            e.to_string(),
            "host\n    ^ expected an IPv4 or IPv6 address, found end of input"
        );
        let e = err("hots 10.0.0.1");
        assert!(e
            .to_string()
            .starts_with("hots 10.0.0.1\n^^^^ expected a primitive"));
        // Columns count chars, and tabs and newlines become spaces.
        let e = err("vlan\t\u{e9}t\u{e9}");
        assert_eq!(
            e.to_string(),
            format!("vlan \u{e9}t\u{e9}\n     ^^^ expected {EXPECTED_OP}, found \"\u{e9}t\u{e9}\"")
        );
        let e = err("(tcp udp)");
        assert_eq!(
            e.to_string(),
            "(tcp udp)\n     ^^^ expected 'and' or 'or', or \")\" to close the \"(\" at column 1, found \"udp\""
        );
        let e = err("ip and (tcp");
        assert_eq!(
            e.to_string(),
            "ip and (tcp\n           ^ expected 'and' or 'or', or \")\" to close the \"(\" at column 8, found end of input"
        );
        let e = err("tcp) or udp");
        assert_eq!(
            e.to_string(),
            "tcp) or udp\n   ^ expected 'and' or 'or' (this \")\" closes nothing), found \")\""
        );
        let e = err("tcp and\nudp xx");
        assert_eq!(
            e.to_string(),
            format!("tcp and udp xx\n            ^^ expected {EXPECTED_OP}, found \"xx\"")
        );
    }

    #[test]
    fn filter_errors() {
        // Unknown words.
        err_at("hots 10.0.0.1", 0, 4, "a primitive", "\"hots\"");
        err_at("tcp and hots", 8, 4, "a primitive", "\"hots\"");
        err_at("443", 0, 3, "a primitive", "\"443\"");
        err_at("port 80 or tcp or 443", 18, 3, "a primitive", "\"443\"");
        err_at("port 80 or hots", 11, 4, "a primitive", "\"hots\"");
        err_at("ether host 1", 11, 1, EXPECTED_MAC, "\"1\"");
        err_at("ether proto 1", 6, 5, "--bpf", "\"proto\"");
        err_at("icmptype 3", 0, 8, "--bpf", "\"icmptype\"");
        err_at(
            "icmp[icmptype] != 0",
            0,
            19,
            "--bpf",
            "\"icmp[icmptype] != 0\"",
        );
        err_at(
            "tcp[tcpflags] & tcp-bad != 0",
            0,
            28,
            "tcp[tcpflags]",
            "\"tcp[tcpflags] & tcp-bad != 0\"",
        );
        err_at(
            "tcp[tcpflags] & 2",
            0,
            17,
            "comparison",
            "\"tcp[tcpflags] & 2\"",
        );
        err_at("tcpflags", 8, 0, EXPECTED_TCPFLAG, "end of input");
        err_at("tcpflags bogus", 9, 5, EXPECTED_TCPFLAG, "\"bogus\"");
        err_at("greater", 7, 0, EXPECTED_LEN, "end of input");
        err_at("less -1", 5, 2, EXPECTED_LEN, "\"-1\"");
        err_at(
            "ether src 00:11:22:33:44",
            10,
            14,
            EXPECTED_MAC,
            "\"00:11:22:33:44\"",
        );
        err_at(
            "ether 00:11:22:33:44:55",
            6,
            17,
            "after \"ether\"",
            "\"00:11:22:33:44:55\"",
        );
        // Missing operands.
        err_at("host", 4, 0, EXPECTED_ADDRESS, "end of input");
        err_at("host and tcp", 5, 3, EXPECTED_ADDRESS, "\"and\"");
        err_at(
            "src",
            3,
            0,
            "\"host\", \"net\", \"port\" or \"portrange\" (or an address) after \"src\"",
            "end of input",
        );
        err_at("dst tcp", 4, 3, "after \"dst\"", "\"tcp\"");
        err_at("net", 3, 0, EXPECTED_NET, "end of input");
        err_at("port", 4, 0, EXPECTED_PORT, "end of input");
        err_at("port ()", 6, 1, EXPECTED_PORT, "\")\"");
        err_at("portrange", 9, 0, EXPECTED_RANGE, "end of input");
        err_at("proto", 5, 0, EXPECTED_PROTO, "end of input");
        err_at("dscp", 4, 0, EXPECTED_DSCP, "end of input");
        err_at("tcp and", 7, 0, "a primitive", "end of input");
        err_at("tcp or", 6, 0, "a primitive", "end of input");
        err_at("not", 3, 0, "a primitive", "end of input");
        err_at("and tcp", 0, 3, "a primitive", "\"and\"");
        err_at("tcp and or udp", 8, 2, "a primitive", "\"or\"");
        // Juxtaposition.
        err_at("tcp udp", 4, 3, EXPECTED_OP, "\"udp\"");
        err_at("host 10.0.0.1 port 80", 14, 4, EXPECTED_OP, "\"port\"");
        err_at("vlan abc", 5, 3, EXPECTED_OP, "\"abc\"");
        err_at("tcp & udp", 4, 1, EXPECTED_OP, "\"&\"");
        err_at("tcp | udp", 4, 1, EXPECTED_OP, "\"|\"");
        err_at("tcp &&& udp", 6, 1, "a primitive", "\"&\"");
        // Parentheses.
        err_at(
            "(tcp",
            4,
            0,
            "\")\" to close the \"(\" at column 1",
            "end of input",
        );
        err_at(
            "ip and (tcp udp)",
            12,
            3,
            "\")\" to close the \"(\" at column 8",
            "\"udp\"",
        );
        err_at("tcp)", 3, 1, "closes nothing", "\")\"");
        err_at("(tcp))", 5, 1, "closes nothing", "\")\"");
        err_at("()", 1, 1, "a primitive", "\")\"");
        err_at(")", 0, 1, "a primitive", "\")\"");
        // Numbers out of range.
        err_at("port 65536", 5, 5, EXPECTED_PORT, "\"65536\"");
        err_at("port -1", 5, 2, EXPECTED_PORT, "\"-1\"");
        err_at("port +80", 5, 3, EXPECTED_PORT, "\"+80\"");
        err_at(
            "port 99999999999999999999999",
            5,
            23,
            EXPECTED_PORT,
            "\"99999999999999999999999\"",
        );
        err_at("port htp", 5, 3, EXPECTED_PORT, "\"htp\"");
        err_at("portrange 10-5", 10, 4, EXPECTED_RANGE, "\"10-5\"");
        err_at("portrange 10", 10, 2, EXPECTED_RANGE, "\"10\"");
        err_at("portrange 1-70000", 10, 7, EXPECTED_RANGE, "\"1-70000\"");
        err_at("portrange 1-2-3", 10, 5, EXPECTED_RANGE, "\"1-2-3\"");
        err_at("proto 256", 6, 3, EXPECTED_PROTO, "\"256\"");
        err_at("proto foo", 6, 3, EXPECTED_PROTO, "\"foo\"");
        err_at("vlan 4096", 5, 4, EXPECTED_VLAN, "\"4096\"");
        err_at("vlan 1x", 5, 2, EXPECTED_VLAN, "\"1x\"");
        err_at("dscp 64", 5, 2, EXPECTED_DSCP, "\"64\"");
        err_at("dscp af44", 5, 4, EXPECTED_DSCP, "\"af44\"");
        err_at("dscp (", 5, 1, EXPECTED_DSCP, "\"(\"");
        // Addresses and networks.
        err_at("host 10.0.0", 5, 6, EXPECTED_ADDRESS, "\"10.0.0\"");
        err_at(
            "host example.com",
            5,
            11,
            EXPECTED_ADDRESS,
            "\"example.com\"",
        );
        err_at(
            "host fe80::1%eth0",
            5,
            12,
            EXPECTED_ADDRESS,
            "\"fe80::1%eth0\"",
        );
        err_at("host 10.0.0.0/8", 5, 10, EXPECTED_ADDRESS, "\"10.0.0.0/8\"");
        err_at("net 10.0.0.0/", 4, 9, EXPECTED_NET, "\"10.0.0.0/\"");
        err_at("net 10.0.0.0.0", 4, 10, EXPECTED_NET, "\"10.0.0.0.0\"");
        err_at("net 10.256", 4, 6, EXPECTED_NET, "\"10.256\"");
        err_at("net 10.0.0.0/x", 4, 10, EXPECTED_NET, "\"10.0.0.0/x\"");
        err_at(
            "net 10.0.0.0/33",
            4,
            11,
            "0-32 for an IPv4",
            "\"10.0.0.0/33\"",
        );
        err_at(
            "net fd00::/129",
            4,
            10,
            "0-128 for an IPv6",
            "\"fd00::/129\"",
        );
        err_at(
            "net fd00::/999999",
            4,
            13,
            EXPECTED_NET,
            "\"fd00::/999999\"",
        );
        // Errors point into the middle of longer expressions.
        err_at(
            "tcp and (udp or dst net 10.0.0.0/40)",
            24,
            11,
            "0-32",
            "\"10.0.0.0/40\"",
        );
    }

    #[test]
    fn filter_parse_more_of_tcpdumps_language() {
        assert_eq!(
            expr("src 10.0.0.1"),
            p(Prim::Host(Direction::Src, a("10.0.0.1")))
        );
        for (src, want) in [
            // An address after a direction is a host, a network a net.
            ("dst 10.1.0.0/16", "dst net 10.1.0.0/16"),
            ("tcp and dst fd00::5", "tcp and dst host fd00::5"),
            // A list of values for one qualifier.
            ("port (80 or 443)", "port 80 or port 443"),
            ("tcp port (80 or 443)", "tcp and (port 80 or port 443)"),
            (
                "src host (10.0.0.1 or 10.0.0.2) and udp",
                "(src host 10.0.0.1 or src host 10.0.0.2) and udp",
            ),
            (
                "port (53 or (80 and not 443))",
                "port 53 or (port 80 and not port 443)",
            ),
            // A netmask.
            ("net 10.0.0.0 mask 255.255.0.0", "net 10.0.0.0/16"),
            ("src net 10.1.2.0 mask 255.255.255.0", "src net 10.1.2.0/24"),
            // Lengths.
            ("len > 100", "greater 101"),
            ("len>=100", "greater 100"),
            ("len <= 1500", "less 1500"),
            ("len < 64", "less 63"),
            ("len == 60", "greater 60 and less 60"),
            ("len != 60", "not (greater 60 and less 60)"),
        ] {
            assert_eq!(canon(src), want, "{src}");
        }
        // Byte expressions.
        for (src, want) in [
            ("ip[1] & 0xfc == 0xb8", "ip[1] & 0xfc == 184"),
            ("ip[9] = 17", "ip[9] == 17"),
            ("udp[2:2] == 53", "udp[2:2] == 53"),
            ("ether[12:2] = 0x0800", "ether[12:2] == 2048"),
            ("tcp[0:2] > 1023 and ip", "tcp[0:2] > 1023 and ip"),
            ("ip6[0:4] & 0x0ff00000 != 0", "ip6[0:4] & 0xff00000 != 0"),
            ("icmp[0] == 8", "icmp[0] == 8"),
        ] {
            assert_eq!(canon(src), want, "{src}");
        }
        for bad in [
            "ip[1:3] == 0",
            "ip[x] == 1",
            "foo[1] == 2",
            "ip[1] & == 2",
            "ip[70000] == 1",
        ] {
            assert!(parse(bad).is_err(), "{bad} parsed");
        }
        // Refusals name what was expected.
        for bad in [
            "port (80 or",
            "port ()",
            "net 10.0.0.0 mask 255.0.255.0",
            "net fd00:: mask 255.0.0.0",
            "len",
            "len > x",
            "len ~ 5",
            "src",
        ] {
            assert!(parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn filter_parse_tcpdump_forms() {
        let h = |s: &str| p(Prim::Host(Direction::SrcOrDst, a(s)));
        // src or dst / src and dst.
        assert_eq!(expr("src or dst host 10.0.0.1"), h("10.0.0.1"));
        assert_eq!(
            expr("src and dst host 10.0.0.1"),
            p(Prim::Host(Direction::SrcAndDst, a("10.0.0.1")))
        );
        assert_eq!(canon("src and dst port 53"), "src and dst port 53");
        assert_eq!(canon("dst or src net 10.0.0.0/8"), "net 10.0.0.0/8");
        assert_eq!(
            canon("tcp and src and dst host 10.0.0.1"),
            "tcp and src and dst host 10.0.0.1"
        );
        // Service names.
        assert_eq!(expr("port https"), p(Prim::Port(Direction::SrcOrDst, 443)));
        assert_eq!(expr("dst port DOMAIN"), p(Prim::Port(Direction::Dst, 53)));
        assert_eq!(canon("tcp port http"), "tcp and port 80");
        // Port lists: a bare operand inherits the last qualifiers.
        assert_eq!(
            canon("tcp port 80 or 443"),
            "(tcp and port 80) or (tcp and port 443)"
        );
        assert_eq!(
            canon("src port 80 or 443 or https"),
            "src port 80 or src port 443 or src port 443"
        );
        assert_eq!(
            // Left to right, as tcpdump reads it.
            canon("host 10.0.0.1 or 10.0.0.2 and port 22 or 23"),
            "((host 10.0.0.1 or host 10.0.0.2) and port 22) or port 23"
        );
        assert_eq!(
            canon("net 10.1 or 10.2"),
            "net 10.1.0.0/16 or net 10.2.0.0/16"
        );
        assert_eq!(canon("(port 1 or 2) and udp"), "(port 1 or port 2) and udp");
        // Short prefixes and whole addresses as networks.
        assert_eq!(canon("net 10"), "net 10.0.0.0/8");
        assert_eq!(canon("net 10.50"), "net 10.50.0.0/16");
        assert_eq!(canon("net 10.50.1"), "net 10.50.1.0/24");
        assert_eq!(canon("net 10.50.1.7"), "net 10.50.1.7/32");
        assert_eq!(canon("net 172.16/12"), "net 172.16.0.0/12");
        assert_eq!(canon("net fd00::1"), "net fd00::1/128");
        // TCP flags.
        let flags = |mask, op, value| p(Prim::TcpFlags { mask, op, value });
        assert_eq!(expr("tcpflags rst"), flags(4, Cmp::Ne, 0));
        assert_eq!(expr("tcp[tcpflags] & tcp-rst != 0"), flags(4, Cmp::Ne, 0));
        assert_eq!(expr("tcp[tcpflags]&tcp-rst!=0"), flags(4, Cmp::Ne, 0));
        assert_eq!(expr("tcp[13] & 4 != 0"), flags(4, Cmp::Ne, 0));
        assert_eq!(
            expr("tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn"),
            flags(0x12, Cmp::Eq, 2)
        );
        assert_eq!(expr("tcp[13] = 0x12"), flags(0xff, Cmp::Eq, 0x12));
        assert_eq!(expr("tcp[13] & 0x3f > 16"), flags(0x3f, Cmp::Gt, 16));
        assert_eq!(canon("tcp[tcpflags] & tcp-syn != 0"), "tcpflags syn");
        assert_eq!(
            canon("tcp[tcpflags] & (tcp-syn | tcp-ack) == tcp-syn and port 80"),
            "tcp[tcpflags] & 18 == 2 and port 80"
        );
        assert_eq!(canon("TCP[13] >= 2"), "tcp[tcpflags] >= 2");
        assert_eq!(
            canon("not tcp[13] & 1 != 0 or tcpflags PSH"),
            "not tcpflags fin or tcpflags push"
        );
        // Ethernet, ARP, lengths.
        let mac = [0x00, 0x1b, 0x21, 0x0a, 0x0b, 0x0c];
        assert_eq!(
            expr("ether host 00:1b:21:0a:0b:0c"),
            p(Prim::Ether(Direction::SrcOrDst, mac))
        );
        assert_eq!(
            expr("ether src 0:1B:21:a:b:c"),
            p(Prim::Ether(Direction::Src, mac))
        );
        assert_eq!(
            expr("ether dst host 00-1b-21-0a-0b-0c"),
            p(Prim::Ether(Direction::Dst, mac))
        );
        assert_eq!(
            canon("ether src 00:1b:21:0a:0b:0c or 00:1b:21:0a:0b:0d"),
            "ether src host 00:1b:21:0a:0b:0c or ether src host 00:1b:21:0a:0b:0d"
        );
        assert_eq!(expr("arp"), p(Prim::Arp));
        assert_eq!(expr("greater 1000"), p(Prim::Greater(1000)));
        assert_eq!(canon("less 64 and arp"), "less 64 and arp");
    }

    #[test]
    fn filter_nesting_limit() {
        let deep_ok = format!("{}tcp{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(canon(&deep_ok), "tcp");
        let nots = format!("{}tcp", "! ".repeat(MAX_DEPTH));
        Filter::parse(&nots).unwrap();
        let too_deep = format!("{}tcp", "(".repeat(MAX_DEPTH + 1));
        err_at(&too_deep, MAX_DEPTH, 1, "nested", "\"(\"");
        let huge = "(".repeat(1_000_000);
        assert!(Filter::parse(&huge).is_err());
        let long = vec!["tcp"; 100_000].join(" or ");
        assert!(Filter::parse(&long).is_ok());
    }

    #[test]
    fn filter_number() {
        assert_eq!(number("0", 5), Some(0));
        assert_eq!(number("000", 5), Some(0));
        assert_eq!(number("0005", 5), Some(5));
        assert_eq!(number("6", 5), None);
        assert_eq!(number("", 5), None);
        assert_eq!(number("+1", 5), None);
        assert_eq!(number("1 ", 5), None);
        assert_eq!(number("٣", 5), None);
        assert_eq!(number("4294967296", u32::MAX), None);
        assert_eq!(number("4294967295", u32::MAX), Some(u32::MAX));
        assert_eq!(number("00000000000004294967295", u32::MAX), Some(u32::MAX));
        assert_eq!(number("99999999999", u32::MAX), None);
    }
}
