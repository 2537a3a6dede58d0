//! Live capture in AF_PACKET mode (TPACKET_V3) on a real link.
//!
//! Each test makes its own pair of network namespaces joined by a veth pair (names unique per
//! run, `capsule-t<pid>-<n>-a` / `-b`), starts `capsule capture` on the receiving end with
//! `ip netns exec`, and sends from the other end with tcpreplay. Nothing is ever sent outside
//! these namespaces: the veth is created directly inside them, has no addresses, IPv6 is off
//! on both ends (so the kernel sends no neighbour discovery or MLD), and the namespaces are
//! deleted when the test ends, also when it fails. Namespaces left behind by a killed test
//! run (their pid is gone) are deleted by the next run, after their capture is stopped. One
//! test also sends on `lo` of its capturing namespace: that too stays inside the namespace.
//!
//! What must hold:
//! * every packet sent is stored, in order, with identical bytes and length, VLAN tags
//!   included (the kernel strips 802.1Q tags into metadata on veth; capture puts them back),
//!   the summary reports zero drops, and SIGTERM leaves only sealed segments;
//! * a packet sent to a running capture is returned by `capsule query` within 1 s;
//! * a capture stores its own interface's packets only, from its first packet on;
//! * a link that goes down and up again neither stops capture nor makes it spin;
//! * a missing interface is an error that names it.
//!
//! Needs root (network namespaces), iproute2, tcpreplay and taskset; CI runs as root.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;

/// Prefix of every namespace these tests make; the pid of the test process follows it.
const NS_PREFIX: &str = "capsule-t";

/// How long `capsule capture` may take to say it is ready, and to exit after SIGTERM.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Writer options of every capture here: small blocks and segments, so that blocks and
/// segments are cut while packets arrive.
const WRITER_OPTS: [&str; 4] = ["--block-size", "64K", "--segment-size", "1M"];

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

fn need_root() {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        .unwrap_or("?");
    assert_eq!(
        uid, "0",
        "live capture tests need root (network namespaces, packet sockets); CI runs as root"
    );
}

/// The first CPU this process may run on. tcpreplay is pinned to it: veth delivers a packet
/// on the sender's CPU, so a sender that moved between CPUs could reorder packets on the
/// wire, and the test would blame capture for it.
fn first_allowed_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|v| {
            v.trim()
                .split([',', '-'])
                .next()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "0".to_string())
}

/// Runs `ip ARGS...` and fails the test unless it exits 0.
fn ip(args: &[&str]) {
    run_ok(Command::new("ip").args(args));
}

/// A `Command` that runs `program` inside network namespace `ns`.
fn in_ns(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

/// Deletes the namespaces of earlier runs of these tests whose process is gone (a test
/// killed with SIGKILL cannot clean up after itself). Namespaces of live processes, and any
/// namespace not named by these tests, are left alone. A capture still running in such a
/// namespace (its test was killed) gets SIGTERM first.
fn sweep_stale_namespaces() {
    static SWEEP: Once = Once::new();
    SWEEP.call_once(|| {
        let out = run(Command::new("ip").args(["netns", "list"]));
        for line in stdout_str(&out).lines() {
            let Some(name) = line.split_whitespace().next() else {
                continue;
            };
            let Some(rest) = name.strip_prefix(NS_PREFIX) else {
                continue;
            };
            let Some(pid) = rest.split('-').next().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                // A capture that outlived its test: stop it (it seals its store) by pid.
                let pids = run(Command::new("ip").args(["netns", "pids", name]));
                for orphan in stdout_str(&pids).split_whitespace() {
                    let _ = Command::new("kill")
                        .args(["-TERM", orphan])
                        .stdin(Stdio::null())
                        .status();
                }
                let _ = Command::new("ip")
                    .args(["netns", "del", name])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    });
}

/// A network namespace made for one test, deleted when dropped (also when the test panics).
/// Deleting it destroys its end of the veth pair, and with it the whole pair.
struct Netns {
    name: String,
}

impl Netns {
    fn new(name: String) -> Netns {
        ip(&["netns", "add", &name]);
        Netns { name }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdin(Stdio::null())
            .status();
    }
}

/// Two namespaces joined by a veth pair: `a` sends, `b` captures.
struct Link {
    a: Netns,
    b: Netns,
    if_a: String,
    if_b: String,
}

impl Link {
    fn new() -> Link {
        need_root();
        need_tool("ip");
        sweep_stale_namespaces();
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let a = Netns::new(format!("{NS_PREFIX}{pid}-{n}-a"));
        let b = Netns::new(format!("{NS_PREFIX}{pid}-{n}-b"));
        // At most 15 bytes (IFNAMSIZ - 1): "cpa" + up to 7 pid digits + "x" + n.
        let if_a = format!("cpa{pid}x{n}");
        let if_b = format!("cpb{pid}x{n}");
        // Created directly inside the namespaces: the pair never exists in the host's.
        ip(&[
            "link", "add", &if_a, "netns", &a.name, "type", "veth", "peer", "name", &if_b, "netns",
            &b.name,
        ]);
        for (ns, ifname) in [(&a.name, &if_a), (&b.name, &if_b)] {
            // IPv6 off before the link is up: no router/neighbour solicitation, no MLD.
            run_ok(in_ns(ns, "sysctl").args([
                "-q",
                "-w",
                &format!("net.ipv6.conf.{ifname}.disable_ipv6=1"),
            ]));
            // 1518-byte frames (1500 bytes of payload behind a VLAN tag) must pass.
            ip(&["-n", ns, "link", "set", ifname, "mtu", "1600"]);
            ip(&["-n", ns, "link", "set", ifname, "up"]);
        }
        Link { a, b, if_a, if_b }
    }

    /// Sends `file` from the `a` end with tcpreplay at `mbps`; fails unless every packet was
    /// sent. Returns tcpreplay's count of successful packets.
    fn send(&self, file: &Path, mbps: &str) -> u64 {
        need_tool("tcpreplay");
        need_tool("taskset");
        let mut cmd = in_ns(&self.a.name, "taskset");
        cmd.args(["-c", &first_allowed_cpu(), "tcpreplay", "-i", &self.if_a])
            .args(["--mbps", mbps])
            .arg(file);
        let out = run_ok(&mut cmd);
        let text = stdout_str(&out);
        let count = |key: &str| -> u64 {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key:?} line in tcpreplay's output:\n{text}"))
        };
        let failed = count("Failed packets:");
        assert_eq!(failed, 0, "tcpreplay failed to send packets:\n{text}");
        count("Successful packets:")
    }
}

/// What `capsule capture` left when it exited.
struct Stopped {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// A running `ip netns exec NS capsule capture ...`. `ip netns exec` execs, so the child's
/// pid is capsule's own. Dropping a capture that was not stopped sends SIGTERM, then SIGKILL.
struct Capture {
    child: Child,
    pid: u32,
    what: String,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    lines: mpsc::Receiver<String>,
    readers: Vec<JoinHandle<()>>,
    reaped: bool,
}

impl Capture {
    fn start(ns: &str, iface: &str, store: &Path, extra: &[&str]) -> Capture {
        let mut cmd = in_ns(ns, bin());
        cmd.env_remove("CAPSULE_LOG")
            .args(["capture", "--iface", iface, "--store", p(store)])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = show(&cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let pid = child.id();
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel();
        let mut out_pipe = child.stdout.take().unwrap();
        let err_pipe = child.stderr.take().unwrap();
        let out_buf = Arc::clone(&stdout);
        let err_buf = Arc::clone(&stderr);
        let readers = vec![
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = out_pipe.read_to_string(&mut s);
                out_buf.lock().unwrap().push_str(&s);
            }),
            std::thread::spawn(move || {
                for line in BufReader::new(err_pipe).lines() {
                    let Ok(line) = line else { break };
                    {
                        let mut b = err_buf.lock().unwrap();
                        b.push_str(&line);
                        b.push('\n');
                    }
                    let _ = tx.send(line);
                }
            }),
        ];
        Capture {
            child,
            pid,
            what,
            stdout,
            stderr,
            lines,
            readers,
            reaped: false,
        }
    }

    fn stderr_so_far(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits for the `capturing on IFACE` line on stderr.
    fn wait_ready(&mut self, iface: &str) {
        let want = format!("capturing on {iface}");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(&want) => break,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no {want:?} line on stderr within {READY_TIMEOUT:?}; stderr so far:\n{}",
                    self.what,
                    self.stderr_so_far()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    self.reaped = true;
                    for r in self.readers.drain(..) {
                        let _ = r.join();
                    }
                    panic!(
                        "{} exited ({status:?}) before saying {want:?}\n--- stdout\n{}\n--- stderr\n{}",
                        self.what,
                        self.stdout.lock().unwrap(),
                        self.stderr_so_far()
                    );
                }
            }
        }
        // Signals go to this pid: it must be capsule itself, not an `ip` that forked.
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", self.pid)).unwrap_or_default();
        assert_eq!(
            comm.trim(),
            "capsule",
            "pid {} of {} is not capsule; `ip netns exec` was expected to exec it",
            self.pid,
            self.what
        );
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.pid.to_string()])
            .stdin(Stdio::null())
            .status();
    }

    /// Waits up to `timeout` for the process to exit.
    fn wait_for(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                self.reaped = true;
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits for the exit and collects the output.
    fn stop(&mut self) -> Stopped {
        self.signal("-TERM");
        let Some(status) = self.wait_for(STOP_TIMEOUT) else {
            let err = self.stderr_so_far();
            self.signal("-KILL");
            let _ = self.wait_for(STOP_TIMEOUT);
            panic!(
                "{} did not exit within {STOP_TIMEOUT:?} of SIGTERM; stderr:\n{err}",
                self.what
            );
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Stopped {
            status,
            stdout: self.stdout.lock().unwrap().clone(),
            stderr: self.stderr_so_far(),
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        self.signal("-TERM");
        if self.wait_for(Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The numbers of capture's summary line, `captured N packets (B bytes) on IF; kernel drops
/// D; ...`, with every other `... drops N` of that line.
#[derive(Debug)]
struct Summary {
    packets: u64,
    bytes: u64,
    iface: String,
    kernel_drops: u64,
    all_drops: Vec<(String, u64)>,
}

fn parse_summary(stdout: &str) -> Summary {
    let line = stdout
        .lines()
        .find(|l| l.contains("captured "))
        .unwrap_or_else(|| panic!("no \"captured N packets ...\" summary on stdout:\n{stdout}"));
    let bad = || -> ! {
        panic!(
            "summary {line:?} is not \"captured N packets (B bytes) on IF; kernel drops D; ...\""
        )
    };
    let rest = &line[line.find("captured ").unwrap() + "captured ".len()..];
    let w: Vec<&str> = rest.split_whitespace().collect();
    if w.len() < 6 || w[1] != "packets" || w[3] != "bytes)" || w[4] != "on" {
        bad();
    }
    let packets = w[0].parse().unwrap_or_else(|_| bad());
    let bytes = w[2]
        .trim_start_matches('(')
        .parse()
        .unwrap_or_else(|_| bad());
    let iface = w[5].trim_end_matches([';', ',']).to_string();
    // Every "<cause> drops N" on the line.
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut all_drops = Vec::new();
    for i in 1..words.len() {
        if words[i - 1].trim_end_matches(':') == "drops" || words[i - 1] == "dropped" {
            let num = words[i].trim_end_matches([';', ',', ')']);
            if let Ok(n) = num.parse::<u64>() {
                let cause = if i >= 2 { words[i - 2] } else { "" };
                all_drops.push((cause.to_string(), n));
            }
        }
    }
    let kernel_drops = all_drops
        .iter()
        .find(|(c, _)| c == "kernel")
        .map(|&(_, n)| n)
        .unwrap_or_else(|| bad());
    Summary {
        packets,
        bytes,
        iface,
        kernel_drops,
        all_drops,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn is_vlan(frame: &[u8]) -> bool {
    matches!(frame.get(12..14), Some([0x81, 0x00]) | Some([0x88, 0xa8]))
}

/// Frames tagged in the ways a SPAN port may carry that synth does not make: priority tags
/// (VID 0, with and without PCP), VID 4095 with DEI, QinQ (802.1ad outer, 802.1Q inner), a
/// lone 802.1ad tag, two 802.1Q tags, and a 0x9100 tag (which the kernel does not strip).
/// As (timestamp, length, bytes) for `write_pcap_ns`.
fn vlan_edge_frames() -> Vec<(u64, u32, Vec<u8>)> {
    let cases: [&[(u16, u16)]; 8] = [
        &[(0x8100, 0x0000)],
        &[(0x8100, 0x6000)],
        &[(0x8100, 0x1fff)],
        &[(0x8100, 0xefff)],
        &[(0x88a8, 100), (0x8100, 200)],
        &[(0x88a8, 7)],
        &[(0x8100, 5), (0x8100, 6)],
        &[(0x9100, 300)],
    ];
    let t0 = now_ns();
    cases
        .iter()
        .enumerate()
        .map(|(i, tags)| {
            let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a];
            for (tpid, tci) in tags.iter() {
                f.extend_from_slice(&tpid.to_be_bytes());
                f.extend_from_slice(&tci.to_be_bytes());
            }
            f.extend_from_slice(&[0x88, 0xb5]);
            while f.len() < 80 {
                f.extend_from_slice(format!("vlan edge case {i} ").as_bytes());
            }
            (t0 + i as u64 * 1000, f.len() as u32, f)
        })
        .collect()
}

/// Fails unless `got` holds exactly the frames of `sent`, in order, same bytes and length,
/// as Ethernet. Timestamps are not compared (capture stamps its own).
fn assert_same_frames(sent: &[Pkt], got: &[Pkt]) {
    for (i, (s, g)) in sent.iter().zip(got).enumerate() {
        assert_eq!(g.linktype, 1, "captured packet {i} is not Ethernet");
        if s.data == g.data && s.orig_len == g.orig_len {
            continue;
        }
        let mut why = String::new();
        if is_vlan(&s.data) && !is_vlan(&g.data) && g.data.len() + 4 == s.data.len() {
            let mut untagged = s.data[..12].to_vec();
            untagged.extend_from_slice(&s.data[16..]);
            if untagged == g.data {
                why = " (the VLAN tag was not restored)".into();
            }
        }
        if why.is_empty() {
            if let Some(at) = sent.iter().position(|x| x.data == g.data) {
                why = format!(" (the captured frame is sent frame {at}: order or loss)");
            }
        }
        let diff = s
            .data
            .iter()
            .zip(&g.data)
            .position(|(a, b)| a != b)
            .unwrap_or(s.data.len().min(g.data.len()));
        let lo = diff.saturating_sub(8);
        panic!(
            "packet {i} differs{why}: sent {} bytes (orig {}), captured {} bytes (orig {}); \
             first difference at byte {diff}\n  sent     [{lo}..] {}\n  captured [{lo}..] {}",
            s.data.len(),
            s.orig_len,
            g.data.len(),
            g.orig_len,
            hex(&s.data[lo..(lo + 32).min(s.data.len())]),
            hex(&g.data[lo.min(g.data.len())..(lo + 32).min(g.data.len())]),
        );
    }
    if got.len() > sent.len() {
        let extra: Vec<String> = got[sent.len()..]
            .iter()
            .take(5)
            .map(|k| {
                format!(
                    "{} bytes {}",
                    k.data.len(),
                    hex(&k.data[..k.data.len().min(20)])
                )
            })
            .collect();
        panic!(
            "{} packets captured, {} sent: unexpected extra packets, the first: {extra:#?}",
            got.len(),
            sent.len()
        );
    }
    assert_eq!(
        got.len(),
        sent.len(),
        "{} of {} sent packets captured; the first missing is sent packet {} ({} bytes)",
        got.len(),
        sent.len(),
        got.len(),
        sent[got.len()].data.len()
    );
}

/// An Ethernet frame of `len` bytes and the local experimental ethertype 0x88b5 (nothing in
/// the kernel answers it), its payload `marker` repeated.
fn probe_frame(marker: &str, len: usize) -> Vec<u8> {
    let mut frame = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x88, 0xb5];
    while frame.len() < len {
        frame.extend_from_slice(marker.as_bytes());
    }
    frame.truncate(len);
    frame
}

fn write_one_packet_pcap(path: &Path, frame: &[u8]) {
    let pcap = write_pcap_ns(1, 65535, &[(now_ns(), frame.len() as u32, frame.to_vec())]);
    std::fs::write(path, pcap).unwrap();
}

/// A background process started with `ip netns exec` (so its pid is the program's own),
/// stopped by pid with SIGTERM when dropped.
struct Background {
    child: Child,
    what: String,
}

impl Background {
    fn spawn(cmd: &mut Command) -> Background {
        let what = show(cmd);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Background { child, what }
    }

    fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stdin(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("{} ignored SIGTERM; killing it", self.what);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// The packets of a store, exported with `capsule query` as a ns pcap.
fn export(store: &Path, out: &Path) -> Vec<Pkt> {
    query_ok(store, out, &[]);
    decode_file(out).whole("capsule query export").packets
}

/// After a clean stop the store holds sealed segments only, and they add up to `packets`.
fn assert_all_sealed(store: &Path, packets: u64) {
    let segs = segments(store);
    let open: Vec<_> = segs.iter().filter(|s| s.state != "sealed").collect();
    assert!(
        open.is_empty(),
        "segments not sealed after SIGTERM: {open:#?}"
    );
    assert_eq!(
        segs.iter().map(|s| s.packets).sum::<u64>(),
        packets,
        "packets in the segments: {segs:#?}"
    );
    let leftovers: Vec<String> = segment_files(store)
        .into_iter()
        .filter(|f| f.ends_with(".open") || f.starts_with('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "files of an open segment left in {}: {leftovers:?}",
        store.join("segments").display()
    );
}

/// Fails unless the process exited 0.
fn assert_clean_exit(st: &Stopped) {
    assert!(
        st.status.success(),
        "capsule capture exited with {} after SIGTERM\n--- stdout\n{}\n--- stderr\n{}",
        st.status,
        st.stdout,
        st.stderr
    );
}

#[test]
fn afpacket_capture_stores_every_packet_with_identical_bytes_and_vlan_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("f.pcap");
    synth(&input, &tmp.path().join("truth.json"), 5, "1s", "20M", None);
    let synth_sent = decode_file(&input).whole("synth output").packets;
    // Then the tag shapes synth does not make, each once.
    let edges = tmp.path().join("vlan-edges.pcap");
    let edge_frames = vlan_edge_frames();
    std::fs::write(&edges, write_pcap_ns(1, 65535, &edge_frames)).unwrap();
    let mut sent = synth_sent.clone();
    sent.extend(decode_file(&edges).whole("vlan edge cases").packets);
    let sent_bytes: u64 = sent.iter().map(|k| u64::from(k.orig_len)).sum();
    let sent_vlan = sent.iter().filter(|k| is_vlan(&k.data)).count();
    // The input must exercise what this test is about.
    assert!(
        sent_vlan > 100,
        "synth made only {sent_vlan} VLAN-tagged frames"
    );
    assert!(sent.iter().any(|k| k.data.len() == 1514));
    assert!(sent
        .iter()
        .any(|k| is_vlan(&k.data) && k.data.len() == 1518));

    let link = Link::new();
    let store = tmp.path().join("store");
    let mut extra = vec!["--mode", "afpacket"];
    extra.extend(WRITER_OPTS);
    let mut cap = Capture::start(&link.b.name, &link.if_b, &store, &extra);
    cap.wait_ready(&link.if_b);

    let t_send = now_ns();
    let ok = link.send(&input, "50");
    assert_eq!(
        ok,
        synth_sent.len() as u64,
        "tcpreplay's successful packets"
    );
    let ok = link.send(&edges, "10");
    assert_eq!(
        ok,
        edge_frames.len() as u64,
        "tcpreplay's successful packets"
    );
    std::thread::sleep(Duration::from_secs(1));
    let stopped = cap.stop();
    let t_stop = now_ns();
    assert_clean_exit(&stopped);

    eprintln!("capture summary: {}", stopped.stdout.trim());
    let sum = parse_summary(&stopped.stdout);
    assert_eq!(sum.iface, link.if_b, "summary: {}", stopped.stdout);
    assert_eq!(sum.kernel_drops, 0, "summary: {}", stopped.stdout);
    assert!(
        sum.all_drops.iter().all(|&(_, n)| n == 0),
        "drops reported: {:?} in {}",
        sum.all_drops,
        stopped.stdout
    );
    assert_eq!(
        (sum.packets, sum.bytes),
        (sent.len() as u64, sent_bytes),
        "summary (packets, bytes) against what was sent: {}",
        stopped.stdout
    );

    assert_all_sealed(&store, sent.len() as u64);

    let got = export(&store, &tmp.path().join("out.pcap"));
    assert_same_frames(&sent, &got);
    let got_vlan = got.iter().filter(|k| is_vlan(&k.data)).count();
    assert_eq!(got_vlan, sent_vlan, "VLAN-tagged frames kept");
    // Capture time, taken by the kernel: between the send and the stop, in export order.
    for (i, k) in got.iter().enumerate() {
        assert!(
            k.ts_ns >= t_send.saturating_sub(1_000_000_000) && k.ts_ns <= t_stop,
            "packet {i}: timestamp {} outside the capture [{t_send}, {t_stop}]",
            k.ts_ns
        );
    }
    assert!(got.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
}

#[test]
fn afpacket_packet_is_queryable_within_one_second() {
    let tmp = tempfile::tempdir().unwrap();
    let link = Link::new();
    let store = tmp.path().join("store");
    let mut extra = vec!["--mode", "afpacket"];
    extra.extend(WRITER_OPTS);
    let mut cap = Capture::start(&link.b.name, &link.if_b, &store, &extra);
    cap.wait_ready(&link.if_b);

    // One Ethernet frame of the local experimental ethertype 0x88b5 (nothing in the kernel
    // answers it), with a payload that names this run.
    let marker = format!(
        "capsule freshness probe {} {}",
        std::process::id(),
        now_ns()
    );
    let frame = probe_frame(&marker, 128);
    let probe = tmp.path().join("probe.pcap");
    write_one_packet_pcap(&probe, &frame);
    assert_eq!(link.send(&probe, "10"), 1, "tcpreplay's successful packets");
    let sent_at = Instant::now();

    let out = tmp.path().join("poll.pcap");
    let mut polls = 0;
    let found_after = loop {
        let asked_at = sent_at.elapsed();
        let got = export(&store, &out);
        polls += 1;
        if got.iter().any(|k| k.data == frame) {
            break asked_at;
        }
        assert!(
            asked_at < Duration::from_secs(1),
            "the packet sent {asked_at:?} ago is not returned by `capsule query` ({polls} \
             queries, the last returned {} packets); capture's stderr:\n{}",
            got.len(),
            cap.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "freshness: the packet was returned by a query started {found_after:?} after it was sent"
    );

    let stopped = cap.stop();
    assert_clean_exit(&stopped);
    let sum = parse_summary(&stopped.stdout);
    assert_eq!(
        (sum.packets, sum.bytes, sum.kernel_drops),
        (1, frame.len() as u64, 0),
        "summary: {}",
        stopped.stdout
    );
    assert_all_sealed(&store, 1);
    let got = export(&store, &tmp.path().join("out.pcap"));
    assert_eq!(got.len(), 1, "packets stored");
    assert_eq!(hex(&got[0].data), hex(&frame));
    assert_eq!(got[0].orig_len as usize, frame.len());
}

/// A capture bound to one interface stores that interface's packets and no other's, also
/// while it starts: a packet socket opened with protocol ETH_P_ALL receives from every
/// interface until it is bound, so one that sets up its ring before binding fills the ring
/// with other interfaces' traffic (and counts their drops). Here `lo` of the capturing
/// namespace carries a steady stream while capture starts on the veth, which carries nothing.
#[test]
fn afpacket_capture_stores_only_its_own_interface_from_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let link = Link::new();
    ip(&["-n", &link.b.name, "link", "set", "lo", "up"]);
    let marker = format!("capsule foreign lo traffic {}", std::process::id());
    let frame = probe_frame(&marker, 64);
    let probe = tmp.path().join("lo.pcap");
    write_one_packet_pcap(&probe, &frame);
    need_tool("tcpreplay");
    let mut flood_cmd = in_ns(&link.b.name, "tcpreplay");
    flood_cmd
        .args(["-i", "lo", "--loop", "0", "--pps", "20000"])
        .arg(&probe);
    let flood = Background::spawn(&mut flood_cmd);
    std::thread::sleep(Duration::from_millis(300));

    let store = tmp.path().join("store");
    let mut extra = vec!["--mode", "afpacket"];
    extra.extend(WRITER_OPTS);
    let mut cap = Capture::start(&link.b.name, &link.if_b, &store, &extra);
    cap.wait_ready(&link.if_b);
    std::thread::sleep(Duration::from_millis(300));
    flood.stop();
    let stopped = cap.stop();
    assert_clean_exit(&stopped);

    let got = export(&store, &tmp.path().join("out.pcap"));
    let foreign = got
        .iter()
        .filter(|k| k.data.windows(marker.len()).any(|w| w == marker.as_bytes()))
        .count();
    assert!(
        got.is_empty(),
        "capture on {} (which carried no traffic) stored {} packets, {foreign} of them sent on \
         `lo`: the socket received other interfaces' packets before it was bound to {}; \
         summary: {}",
        link.if_b,
        got.len(),
        link.if_b,
        stopped.stdout.trim()
    );
    let sum = parse_summary(&stopped.stdout);
    assert_eq!(
        (sum.packets, sum.kernel_drops),
        (0, 0),
        "summary of a capture on a silent link: {}",
        stopped.stdout
    );
}

/// CPU time (user + system, in clock ticks of 1/100 s) used so far by process `pid`.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').expect("stat has (comm)") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// A SPAN port's link goes down and comes back (a switch reload, a cable): capture waits
/// quietly while it is down, without spinning on the socket's error, and stores the packets
/// that arrive once it is up again.
#[test]
fn afpacket_capture_survives_a_link_flap_without_spinning() {
    let tmp = tempfile::tempdir().unwrap();
    let link = Link::new();
    let store = tmp.path().join("store");
    let mut extra = vec!["--mode", "afpacket"];
    extra.extend(WRITER_OPTS);
    let mut cap = Capture::start(&link.b.name, &link.if_b, &store, &extra);
    cap.wait_ready(&link.if_b);

    ip(&["-n", &link.b.name, "link", "set", &link.if_b, "down"]);
    std::thread::sleep(Duration::from_millis(200));
    let t0 = cpu_ticks(cap.pid);
    std::thread::sleep(Duration::from_secs(1));
    let down_ticks = cpu_ticks(cap.pid) - t0;
    ip(&["-n", &link.b.name, "link", "set", &link.if_b, "up"]);
    std::thread::sleep(Duration::from_millis(200));

    let marker = format!("capsule after the link flap {}", std::process::id());
    let frame = probe_frame(&marker, 100);
    let probe = tmp.path().join("probe.pcap");
    write_one_packet_pcap(&probe, &frame);
    assert_eq!(link.send(&probe, "10"), 1, "tcpreplay's successful packets");
    std::thread::sleep(Duration::from_millis(500));
    let stopped = cap.stop();
    assert_clean_exit(&stopped);
    let got = export(&store, &tmp.path().join("out.pcap"));
    assert!(
        got.iter().any(|k| k.data == frame),
        "the packet sent after the link came back up was not stored ({} packets stored); \
         summary: {}\nstderr:\n{}",
        got.len(),
        stopped.stdout.trim(),
        stopped.stderr
    );
    // A capture that waits uses next to nothing; one spinning on poll() uses the whole core
    // (100 ticks a second).
    assert!(
        down_ticks <= 30,
        "capsule capture used {down_ticks} of 100 CPU ticks in the 1 s its link was down: it \
         spins instead of waiting for the link; stderr:\n{}",
        stopped.stderr
    );
}

#[test]
fn afpacket_capture_on_a_missing_interface_fails_naming_it() {
    need_root();
    sweep_stale_namespaces();
    // Inside an empty namespace of its own: whatever the binary does, it sees only `lo`.
    static N: AtomicUsize = AtomicUsize::new(1000);
    let ns = Netns::new(format!(
        "{NS_PREFIX}{}-{}-x",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let tmp = tempfile::tempdir().unwrap();
    let store: PathBuf = tmp.path().join("store");
    let mut cap = Capture::start(&ns.name, "does-not-exist0", &store, &["--mode", "afpacket"]);
    let Some(status) = cap.wait_for(Duration::from_secs(10)) else {
        panic!(
            "capture on a missing interface was still running after 10 s; stderr:\n{}",
            cap.stderr_so_far()
        );
    };
    for r in cap.readers.drain(..) {
        let _ = r.join();
    }
    let err = cap.stderr_so_far();
    assert!(
        !status.success(),
        "capture on a missing interface exited 0; stderr:\n{err}"
    );
    assert!(
        matches!(status.code(), Some(1) | Some(2)),
        "exit status {status} (a panic or a signal, not an error exit); stderr:\n{err}"
    );
    assert!(
        err.contains("does-not-exist0"),
        "the error does not name the interface:\n{err}"
    );
    assert!(!err.contains("capturing on"), "{err}");
}
