//! Two network namespaces joined by a veth pair, made by a test (named with its PID, and
//! removed when dropped): tcpreplay sends from one end, `capsule capture` runs on the other.
//! Needs root.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

pub fn ip(args: &[&str]) {
    run_ok(Command::new("ip").args(args));
}

/// Network namespaces a test made itself (beyond a [`Link`]), deleted on drop.
pub struct Namespaces(pub Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

pub struct Link {
    /// Namespaces: tcpreplay sends in `a`, capture runs in `b`.
    pub a: String,
    pub b: String,
    /// The veth's ends (interface names: at most 15 bytes, the PID in them).
    pub if_a: String,
    pub if_b: String,
}

impl Link {
    pub fn new(tag: &str) -> Link {
        assert!(
            rustix_is_root(),
            "this test needs root (network namespaces)"
        );
        let pid = std::process::id();
        let (a, b) = (
            format!("caltest-{pid}-{tag}-a"),
            format!("caltest-{pid}-{tag}-b"),
        );
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        let link = Link {
            a,
            b,
            if_a: format!("c{pid}{tag:.2}a"),
            if_b: format!("c{pid}{tag:.2}b"),
        };
        ip(&[
            "link", "add", "name", &link.if_a, "netns", &link.a, "type", "veth", "peer", "name",
            &link.if_b, "netns", &link.b,
        ]);
        for (ns, ifname) in [(&link.a, &link.if_a), (&link.b, &link.if_b)] {
            run_ok(Command::new("ip").args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{ifname}.disable_ipv6=1"),
            ]));
            ip(&["-n", ns, "link", "set", ifname, "mtu", "1600", "up"]);
        }
        // The capture's namespace has its own loopback: the test's sinks listen there.
        ip(&["-n", &link.b, "link", "set", "lo", "up"]);
        link
    }

    /// Runs `f` on a thread that entered the capture's namespace: sockets it makes are
    /// that namespace's (they stay there whichever thread uses them).
    pub fn in_capture_ns<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = std::fs::File::open(format!("/run/netns/{}", self.b)).unwrap();
        std::thread::spawn(move || {
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&ns),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .unwrap();
            f()
        })
        .join()
        .unwrap()
    }

    /// Replays `file` from the sending namespace at 100 Mbit/s; every packet must go out.
    pub fn send(&self, file: &Path) {
        self.send_at(file, "100");
    }

    /// Replays `file` from the sending namespace at `mbps` Mbit/s.
    pub fn send_at(&self, file: &Path, mbps: &str) {
        need_tool("tcpreplay");
        let out = run_ok(Command::new("ip").args([
            "netns",
            "exec",
            &self.a,
            "tcpreplay",
            "-i",
            &self.if_a,
            "--mbps",
            mbps,
            p(file),
        ]));
        let text = stdout_str(&out);
        let failed = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Failed packets:"))
            .map(str::trim);
        assert_eq!(failed, Some("0"), "{text}");
    }

    /// Starts `capsule capture` (AF_PACKET) on the capture namespace's end into `store`,
    /// with `extra` options; ready once its status file exists.
    pub fn capture(&self, store: &Path, extra: &[&str]) -> Running {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.b,
            bin(),
            "capture",
            "--iface",
            &self.if_b,
        ])
        .args(["--mode", "afpacket", "--store", p(store)])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let child = Running(Some(c.spawn().unwrap()));
        // Ready when the status file names the interface.
        let t0 = Instant::now();
        while !store.join("capture-status.json").exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "capture did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(500));
        child
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

pub fn rustix_is_root() -> bool {
    stdout_str(&run_ok(Command::new("id").arg("-u"))).trim() == "0"
}

/// A running capture, stopped (SIGTERM) when dropped: a failing test leaves none behind.
pub struct Running(pub Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            signal(c.id(), Signal::TERM);
            let _ = c.wait();
        }
    }
}

pub fn stop(mut r: Running) -> String {
    let child = r.0.take().unwrap();
    assert!(signal(child.id(), Signal::TERM), "the capture is gone");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tcpdump -n -U -i IFACE -w OUT [FILTER]` in namespace `ns`, returned once its file has
/// its header and half a second more has passed (tcpdump has opened its socket before it
/// writes the header, but a packet sent at once may still be missed on a busy machine).
/// Stop it with `signal(child.id(), Signal::INT)` and wait for it.
pub fn tcpdump_in(ns: &str, iface: &str, out: &Path, filter: Option<&str>) -> Child {
    let mut args = vec![
        "netns",
        "exec",
        ns,
        "tcpdump",
        "-n",
        "-U",
        "-i",
        iface,
        "-w",
        p(out),
    ];
    args.extend(filter);
    let dump = Command::new("ip")
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::fs::metadata(out).map_or(0, |m| m.len()) < 24 {
        assert!(started.elapsed().as_secs() < 10, "tcpdump did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    dump
}
