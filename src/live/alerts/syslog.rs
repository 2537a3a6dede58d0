//! The syslog sink: RFC 5424 messages whose MSG is the event's JSON, as UDP datagrams
//! (RFC 5426) to `syslog_udp` and/or as datagrams to a unix socket (`syslog_socket`, such
//! as `/dev/log`).
//!
//! ```text
//! <PRI>1 TIMESTAMP HOSTNAME capsule PROCID MSGID - {"state": "engaged", ...}
//!   PRI = facility * 8 + severity: high 3 (err), medium 4 (warning), low 5 (notice),
//!         released 6 (info)
//!   TIMESTAMP = the evaluation's time, RFC 3339 UTC with microseconds
//!   MSGID = the rule (`egress`, `dscp`, ...); no structured data (`-`)
//! ```

use std::net::{ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use capsule_analytics::alerts::Severity;

use super::{Deliver, Event};

/// The largest datagram sent (the most a UDP datagram over IPv4 carries).
const MAX_DATAGRAM: usize = 65_507;

enum To {
    Udp { addr: String },
    Unix { path: String, sock: UnixDatagram },
}

pub struct Syslog {
    to: To,
    facility: u8,
    host: String,
    pid: u32,
}

impl Syslog {
    pub fn udp(addr: &str, facility: u8) -> Result<Syslog> {
        Ok(Syslog::new(
            To::Udp {
                addr: addr.to_string(),
            },
            facility,
        ))
    }

    pub fn unix(path: &str, facility: u8) -> Result<Syslog> {
        let sock = UnixDatagram::unbound().context("cannot make a unix datagram socket")?;
        Ok(Syslog::new(
            To::Unix {
                path: path.to_string(),
                sock,
            },
            facility,
        ))
    }

    fn new(to: To, facility: u8) -> Syslog {
        Syslog {
            to,
            facility,
            host: hostname(),
            pid: std::process::id(),
        }
    }
}

/// This machine's name as RFC 5424's HOSTNAME: printable ASCII, at most 255, `-` if none.
fn hostname() -> String {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let h: String = h
        .trim()
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(255)
        .collect();
    if h.is_empty() {
        "-".into()
    } else {
        h
    }
}

/// The syslog severity of an event.
pub fn severity(s: Option<Severity>) -> u8 {
    match s {
        Some(Severity::High) => 3,
        Some(Severity::Medium) => 4,
        Some(Severity::Low) => 5,
        None => 6,
    }
}

/// RFC 3339 in UTC with at most 6 fraction digits (RFC 5424's TIME-SECFRAC).
fn timestamp(at_ns: u64) -> String {
    let t = capsule_query::format_instant(at_ns);
    match t.split_once('.') {
        Some((secs, frac)) => {
            let digits: String = frac
                .chars()
                .take_while(char::is_ascii_digit)
                .take(6)
                .collect();
            format!("{secs}.{digits:0<6}Z")
        }
        None => t,
    }
}

/// The whole message of `ev`.
pub fn message(ev: &Event, facility: u8, host: &str, pid: u32) -> String {
    let pri = u16::from(facility) * 8 + u16::from(severity(ev.severity));
    let msgid: String = ev
        .rule
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(32)
        .collect();
    let msgid = if msgid.is_empty() { "-".into() } else { msgid };
    format!(
        "<{pri}>1 {} {host} capsule {pid} {msgid} - {}",
        timestamp(ev.at_ns),
        ev.json
    )
}

impl Deliver for Syslog {
    fn deliver(&mut self, ev: &Event, _abandon: &AtomicBool) -> Result<(), String> {
        let msg = message(ev, self.facility, &self.host, self.pid);
        if msg.len() > MAX_DATAGRAM {
            return Err(format!(
                "the message is {} bytes, more than a datagram holds ({MAX_DATAGRAM})",
                msg.len()
            ));
        }
        match &self.to {
            To::Udp { addr } => {
                let target = addr
                    .to_socket_addrs()
                    .map_err(|e| format!("{addr}: cannot resolve: {e}"))?
                    .next()
                    .ok_or_else(|| format!("{addr}: the name has no address"))?;
                let local = if target.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                };
                let sock = UdpSocket::bind(local).map_err(|e| format!("{addr}: {e}"))?;
                sock.send_to(msg.as_bytes(), target)
                    .map_err(|e| format!("{addr}: {e}"))?;
            }
            To::Unix { path, sock } => {
                sock.send_to(msg.as_bytes(), path)
                    .map_err(|e| format!("{path}: {e}"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(severity: Option<Severity>) -> Event {
        Event {
            state: if severity.is_some() {
                "engaged"
            } else {
                "released"
            },
            rule: "dscp".into(),
            severity,
            seq: 1,
            at_ns: 1_796_004_005_123_456_789,
            json: "{\"state\":\"engaged\"}".into(),
        }
    }

    #[test]
    fn messages_are_rfc_5424_with_the_json_as_message() {
        // local0 (16) * 8 + warning (4) = 132.
        let m = message(&event(Some(Severity::Medium)), 16, "cap1", 42);
        assert_eq!(
            m,
            "<132>1 2026-11-30T02:00:05.123456Z cap1 capsule 42 dscp - {\"state\":\"engaged\"}"
        );
        assert!(message(&event(Some(Severity::High)), 3, "h", 1).starts_with("<27>1 "));
        assert!(message(&event(None), 3, "h", 1).starts_with("<30>1 "));
        assert_eq!(timestamp(1_000_000_000), "1970-01-01T00:00:01.000000Z");
    }

    #[test]
    fn a_unix_socket_receives_the_message_and_a_missing_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let rx = UnixDatagram::bind(&path).unwrap();
        let mut s = Syslog::unix(path.to_str().unwrap(), 3).unwrap();
        let stop = AtomicBool::new(false);
        s.deliver(&event(Some(Severity::Low)), &stop).unwrap();
        let mut buf = [0u8; 4096];
        let n = rx.recv(&mut buf).unwrap();
        let got = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(
            got.starts_with("<29>1 2026-11-30T02:00:05.123456Z "),
            "{got}"
        );
        assert!(
            got.ends_with(
                " capsule 4242 dscp - {\"state\":\"engaged\"}"
                    .replace("4242", &std::process::id().to_string())
                    .as_str()
            ),
            "{got}"
        );
        drop(rx);
        std::fs::remove_file(&path).unwrap();
        let e = s.deliver(&event(None), &stop).unwrap_err();
        assert!(e.contains(path.to_str().unwrap()), "{e}");
    }
}
