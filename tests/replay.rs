//! `capsule replay` onto a real link: two network namespaces joined by a veth pair (names
//! unique per run, `capsule-r<pid>-<n>-a` / `-b`), `capsule replay` sending from the store
//! onto the `a` end, `capsule capture --mode afpacket` storing what arrives on the `b` end.
//! Nothing is sent outside these namespaces: the veth is created directly inside them, has
//! no addresses and IPv6 off (so the kernel sends nothing of its own), and the namespaces
//! are deleted when the test ends, also when it fails; those of a killed earlier run (its
//! pid gone) are deleted by the next.
//!
//! What must hold:
//! * a filtered window replayed is captured on the other end as exactly the packets
//!   `capsule query` exports for the same filter and window: same bytes, same order;
//! * paced replay keeps the recorded inter-packet gaps, measured on the receiver's capture
//!   timestamps, within the tolerance stated in `paced_replay_keeps_the_recorded_gaps` (and
//!   in docs/capture.md), at speed 1 and 2, and the schedule does not drift;
//! * packets stored truncated or longer than the MTU are not sent, and counted by cause;
//! * an interface a running capture of the same store reads is refused; a missing
//!   interface is an error naming it; without CAP_NET_RAW the error says so.
//!
//! Needs root (network namespaces, packet sockets), iproute2 and setpriv; CI runs as root.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Once;
use std::time::{Duration, Instant};

use common::*;

/// Prefix of every namespace these tests make; the pid of the test process follows it.
const NS_PREFIX: &str = "capsule-r";

fn need_root() {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        .unwrap_or("?");
    assert_eq!(
        uid, "0",
        "replay tests need root (network namespaces, packet sockets); CI runs as root"
    );
}

fn ip(args: &[&str]) {
    run_ok(Command::new("ip").args(args));
}

/// A `Command` that runs `program` inside network namespace `ns`.
fn in_ns(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

/// Deletes the namespaces of earlier runs of these tests whose process is gone, after
/// stopping what still runs in them (by pid).
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
                let pids = run(Command::new("ip").args(["netns", "pids", name]));
                for orphan in stdout_str(&pids).split_whitespace() {
                    if let Ok(orphan) = orphan.parse() {
                        signal(orphan, Signal::TERM);
                    }
                }
                let _ = Command::new("ip")
                    .args(["netns", "del", name])
                    .stdin(Stdio::null())
                    .status();
            }
        }
    });
}

/// A network namespace made for one test, deleted when dropped (also when the test panics).
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

/// Two namespaces joined by a veth pair: `a` replays, `b` captures.
struct Link {
    a: Netns,
    b: Netns,
    if_a: String,
    if_b: String,
}

impl Link {
    fn new(mtu: u32) -> Link {
        need_root();
        need_tool("ip");
        sweep_stale_namespaces();
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let a = Netns::new(format!("{NS_PREFIX}{pid}-{n}-a"));
        let b = Netns::new(format!("{NS_PREFIX}{pid}-{n}-b"));
        // At most 15 bytes (IFNAMSIZ - 1).
        let if_a = format!("rpa{pid}x{n}");
        let if_b = format!("rpb{pid}x{n}");
        ip(&[
            "link", "add", "name", &if_a, "netns", &a.name, "type", "veth", "peer", "name", &if_b,
            "netns", &b.name,
        ]);
        for (ns, ifname) in [(&a.name, &if_a), (&b.name, &if_b)] {
            run_ok(in_ns(ns, "sysctl").args([
                "-q",
                "-w",
                &format!("net.ipv6.conf.{ifname}.disable_ipv6=1"),
            ]));
            ip(&["-n", ns, "link", "set", ifname, "mtu", &mtu.to_string()]);
            ip(&["-n", ns, "link", "set", ifname, "up"]);
        }
        Link { a, b, if_a, if_b }
    }

    /// `capsule replay --store STORE --iface IF_A --json ARGS...` in namespace `a`.
    fn replay(&self, store: &Path, args: &[&str]) -> Output {
        self.replay_wrapped(&[], store, args)
    }

    /// [`Link::replay`] with capsule run by `wrapper` (a command that execs its arguments,
    /// such as `chrt -f 10`).
    fn replay_wrapped(&self, wrapper: &[&str], store: &Path, args: &[&str]) -> Output {
        let mut cmd = match wrapper.split_first() {
            None => in_ns(&self.a.name, bin()),
            Some((program, rest)) => {
                let mut c = in_ns(&self.a.name, program);
                c.args(rest).arg(bin());
                c
            }
        };
        cmd.env_remove("CAPSULE_LOG")
            .args([
                "replay",
                "--store",
                p(store),
                "--iface",
                &self.if_a,
                "--json",
            ])
            .args(args);
        run(&mut cmd)
    }
}

/// The JSON report of a replay that exited with `status`.
fn report(out: &Output, status: i32) -> serde_json::Value {
    assert_eq!(
        out.status.code(),
        Some(status),
        "replay exited {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        stdout_str(out),
        stderr_str(out)
    );
    serde_json::from_str(&stdout_str(out))
        .unwrap_or_else(|e| panic!("replay --json: {e}: {}", stdout_str(out)))
}

/// A running `ip netns exec NS capsule capture --mode afpacket ...` (`ip netns exec` execs,
/// so the pid is capsule's). Dropped unstopped: SIGTERM, then SIGKILL, by pid.
struct Capture {
    child: Child,
    reaped: bool,
}

impl Capture {
    fn start(ns: &str, iface: &str, store: &Path) -> Capture {
        let mut cmd = in_ns(ns, bin());
        cmd.env_remove("CAPSULE_LOG")
            .args(["capture", "--iface", iface, "--store", p(store)])
            .args(["--mode", "afpacket", "--block-size", "64K"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let what = show(&cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let want = format!("capturing on {iface}");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut said = String::new();
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l.contains(&want) => break,
                Ok(l) => said.push_str(&format!("{l}\n")),
                Err(_) => panic!("{what} did not say {want:?} within 10 s:\n{said}"),
            }
        }
        // Keep draining stderr so the capture never blocks on a full pipe.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        Capture {
            child,
            reaped: false,
        }
    }

    fn signal(&self, sig: Signal) {
        signal(self.child.id(), sig);
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM and waits (up to 10 s) for a clean exit.
    fn stop(mut self) {
        self.signal(Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                self.reaped = true;
                assert!(st.success(), "capture exited {st:?}");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("capture did not exit within 10 s of SIGTERM");
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        self.signal(Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Packets in `store` (`query --count --json`).
fn count(store: &Path) -> u64 {
    let o = run_ok(capsule().args(["query", "--store", p(store), "--count", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&stdout_str(&o)).unwrap();
    v["packets"].as_u64().unwrap()
}

/// Waits (up to 10 s) until a running capture has stored `n` packets.
fn wait_stored(store: &Path, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = count(store);
        if got >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the capture stored {got} of {n} packets within 10 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every packet of `store`, in time order.
fn stored(store: &Path, out: &Path) -> Vec<Pkt> {
    query_ok(store, out, &[]);
    decode_file(out).whole("capsule query export").packets
}

/// An Ethernet/IPv4/UDP frame of `payload` bytes, ports and payload byte set by `n`.
fn udp4_frame(n: u16, payload: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    let total = (20 + 8 + payload) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[
        0, 0, 0x40, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2,
    ]);
    let sum = f[14..34]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&(10_000 + n).to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(f.len() + payload, n as u8);
    f
}

fn assert_same_packets(want: &[Pkt], got: &[Pkt]) {
    assert_eq!(
        got.len(),
        want.len(),
        "captured {} packets, the window has {}",
        got.len(),
        want.len()
    );
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        assert!(
            w.data == g.data && w.orig_len == g.orig_len,
            "packet {i} differs: sent {} bytes, captured {} bytes (first difference at byte \
             {:?})",
            w.data.len(),
            g.data.len(),
            w.data.iter().zip(&g.data).position(|(a, b)| a != b)
        );
    }
}

/// The tests of this file run one at a time: `paced_replay_keeps_the_recorded_gaps`
/// measures the sender's timing, and a sibling replaying at top speed beside it on a
/// 2-core machine stalled its real-time sender by up to 0.79 s (seen with the builds of two
/// sessions: a clean-clone run failed on a gap error p50 of 294 us, then 653 us; run alone
/// or with `--test-threads=1`, six runs in a row had a worst lateness of 0.09-5 ms). Each
/// test takes this lock first; a test that failed leaves it poisoned, which is ignored.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn a_filtered_window_arrives_with_the_same_bytes_in_the_same_order() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("synth.pcap");
    synth(
        &input,
        &tmp.path().join("truth.json"),
        11,
        "1s",
        "10M",
        None,
    );
    let src = tmp.path().join("src");
    import_ok(&src, &[], &[p(&input)]);
    let all = decode_file(&input).whole("synth").packets;
    let first = all.iter().map(|k| k.ts_ns).min().unwrap();
    // A window inside the trace and a filter that keeps part of it.
    let (from, to) = (first + 200_000_000, first + 600_000_000);
    let (from_s, to_s) = (format!("@{from}"), format!("@{to}"));
    let filter = "tcp or vlan";
    let expected = tmp.path().join("expected.pcap");
    query_ok(&src, &expected, &["--from", &from_s, "--to", &to_s, filter]);
    let want = decode_file(&expected).whole("query export").packets;
    let in_window = all
        .iter()
        .filter(|k| k.ts_ns >= from && k.ts_ns < to)
        .count();
    assert!(
        want.len() > 100 && want.len() < in_window,
        "the filter keeps {} of the window's {in_window} packets: not a test of both",
        want.len()
    );

    let link = Link::new(1500);
    let got_store = tmp.path().join("got");
    let cap = Capture::start(&link.b.name, &link.if_b, &got_store);
    let out = link.replay(
        &src,
        &["--from", &from_s, "--to", &to_s, "--speed", "4", filter],
    );
    let rep = report(&out, 0);
    assert_eq!(rep["sent"], want.len() as u64, "{rep}");
    assert_eq!(rep["packets"], want.len() as u64, "{rep}");
    assert_eq!(rep["not_sent_total"], 0, "{rep}");
    assert_eq!(rep["iface"], link.if_a.as_str());
    assert_eq!(
        rep["bytes_sent"],
        want.iter().map(|k| k.data.len() as u64).sum::<u64>()
    );
    assert_eq!(rep["first_ns"], want[0].ts_ns);
    wait_stored(&got_store, want.len() as u64);
    cap.stop();
    let got = stored(&got_store, &tmp.path().join("got.pcap"));
    assert_same_packets(&want, &got);
}

/// Gap errors of a replay measured on the receiver: `sent` are the original timestamps,
/// `got` the capture's, `speed` the replay's. Returns (p50, p99, max, drift of the whole
/// span) in ns.
fn gap_errors(sent: &[u64], got: &[u64], speed: f64) -> (u64, u64, u64, u64) {
    let mut errs: Vec<u64> = sent
        .windows(2)
        .zip(got.windows(2))
        .map(|(s, g)| {
            let want = (s[1] - s[0]) as f64 / speed;
            ((g[1] - g[0]) as f64 - want).abs() as u64
        })
        .collect();
    errs.sort_unstable();
    let q = |f: f64| errs[((errs.len() - 1) as f64 * f) as usize];
    let span_want = (sent[sent.len() - 1] - sent[0]) as f64 / speed;
    let span_got = (got[got.len() - 1] - got[0]) as f64;
    (
        q(0.5),
        q(0.99),
        *errs.last().unwrap(),
        (span_got - span_want).abs() as u64,
    )
}

/// What one paced replay did, measured on the receiver.
struct Paced {
    /// Gap errors: median, 99th percentile, worst; and how far the whole span drifted.
    p50: u64,
    p99: u64,
    max: u64,
    drift: u64,
    /// The sender's own account of its lateness against the schedule.
    late_max: u64,
    late_mean: u64,
}

impl Paced {
    /// The bounds asserted (see [`paced_replay_keeps_the_recorded_gaps`]); `Err` says
    /// which one failed.
    fn check(&self) -> Result<(), String> {
        if self.p50 >= 200_000 {
            return Err(format!("gap error p50 {} ns", self.p50));
        }
        if self.p99 >= 10_000_000 {
            return Err(format!("gap error p99 {} ns", self.p99));
        }
        if self.drift >= 2_000_000 {
            return Err(format!("the span drifted {} ns", self.drift));
        }
        Ok(())
    }
}

/// Replays `src` (the 300 `frames`) at `speed` onto the link, captures it into a fresh
/// store, checks the bytes and returns the figures.
fn paced_run(
    link: &Link,
    src: &Path,
    dir: &Path,
    frames: &[(u64, u32, Vec<u8>)],
    speed: f64,
) -> Paced {
    let got_store = tempfile::tempdir_in(dir).unwrap().keep().join("store");
    let cap = Capture::start(&link.b.name, &link.if_b, &got_store);
    // At real-time priority, as docs/capture.md advises for paced replay: on a loaded
    // machine an ordinary process wakes up milliseconds late.
    let out = link.replay_wrapped(&["chrt", "-f", "10"], src, &["--speed", &speed.to_string()]);
    let rep = report(&out, 0);
    let n = frames.len() as u64;
    assert_eq!(rep["sent"], n, "{rep}");
    assert!(
        rep["lateness_max_ns"].as_u64().is_some(),
        "a paced replay reports its lateness: {rep}"
    );
    let elapsed = rep["elapsed_seconds"].as_f64().unwrap();
    let sent: Vec<u64> = frames.iter().map(|f| f.0).collect();
    let span = (sent[sent.len() - 1] - sent[0]) as f64 / 1e9 / speed;
    assert!(
        elapsed >= span * 0.99,
        "speed {speed}: replay took {elapsed} s for a {span} s recording: too fast"
    );
    wait_stored(&got_store, n);
    cap.stop();
    let got = stored(&got_store, &got_store.with_extension("pcap"));
    assert_eq!(got.len(), frames.len());
    for (k, f) in got.iter().zip(frames) {
        assert_eq!(k.data, f.2, "speed {speed}: a packet differs");
    }
    let rx: Vec<u64> = got.iter().map(|k| k.ts_ns).collect();
    let (p50, p99, max, drift) = gap_errors(&sent, &rx, speed);
    let fig = Paced {
        p50,
        p99,
        max,
        drift,
        late_max: rep["lateness_max_ns"].as_u64().unwrap(),
        late_mean: rep["lateness_mean_ns"].as_u64().unwrap(),
    };
    eprintln!(
        "speed {speed}: gap error p50 {} ns, p99 {} ns, max {} ns; span drift {} ns; sender \
         lateness worst {} ns, mean {} ns",
        fig.p50, fig.p99, fig.max, fig.drift, fig.late_max, fig.late_mean
    );
    fig
}

/// Tolerance of paced replay, as measured on the shared 2-core test machine (load average
/// about 12 from other builds), veth, AF_PACKET capture timestamps on the receiving end,
/// replay under `chrt -f 10`; 300 packets with gaps of 100 µs to 4 ms: gap error p50 2-3
/// µs, p99 30-50 µs at speed 1 and up to 330 µs at speed 2, worst 70-400 µs; the whole span
/// within 25 µs of the recording (no drift). Now and then the machine stalls the sender for
/// tens of milliseconds (seen once in four runs: 49 ms); a run that misses a bound is
/// repeated once, and both figures are printed. The bounds asserted are generous: p50
/// under 200 µs, p99 under 10 ms, drift under 2 ms. An unpaced sender misses the p50 bound
/// by ten times (its gap errors are the gaps themselves, 2 ms on average) and the elapsed
/// time check; the p99 bound only catches a scheduler gone wrong, because under the load of
/// a full test run the sender itself was seen woken 3 ms late for 1% of its packets (p99 3.2
/// ms in two runs back to back, 0.2-0.7 ms a minute later): the tolerance is what the
/// figures printed say, not what a loaded CI machine can promise.
#[test]
fn paced_replay_keeps_the_recorded_gaps() {
    let _one = one_at_a_time();
    need_tool("chrt");
    let tmp = tempfile::tempdir().unwrap();
    // Gaps from 100 µs to 4 ms, a fixed pseudo-random sequence.
    let mut ts = 1_700_000_000_000_000_000u64;
    let mut x = 0x9e37_79b9u64;
    let mut frames = Vec::new();
    for i in 0..300u16 {
        let f = udp4_frame(i, 64 + usize::from(i % 7) * 100);
        frames.push((ts, f.len() as u32, f));
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        ts += 100_000 + (x >> 33) % 3_900_000;
    }
    let input = tmp.path().join("gaps.pcap");
    std::fs::write(&input, write_pcap_ns(1, 65535, &frames)).unwrap();
    let src = tmp.path().join("src");
    import_ok(&src, &[], &[p(&input)]);

    let link = Link::new(1500);
    for speed in [1.0f64, 2.0] {
        let first = paced_run(&link, &src, tmp.path(), &frames, speed);
        if let Err(why) = first.check() {
            eprintln!("speed {speed}: {why}; repeating the run once");
            let second = paced_run(&link, &src, tmp.path(), &frames, speed);
            if let Err(why) = second.check() {
                panic!("speed {speed}: {why} (and in the first run)");
            }
        }
    }
}

#[test]
fn truncated_and_oversized_packets_are_counted_not_sent() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let base = 1_700_000_000_000_000_000u64;
    let mut frames = Vec::new();
    for i in 0..20u16 {
        let f = udp4_frame(i, 100);
        frames.push((base + u64::from(i) * 1_000_000, f.len() as u32, f));
    }
    // 1514 bytes fit an MTU of 1500; 1515 do not.
    let big = udp4_frame(100, 1501 - 28);
    assert_eq!(big.len(), 1515);
    frames.push((base + 21_000_000, big.len() as u32, big));
    let fits = udp4_frame(101, 1500 - 28);
    frames.push((base + 22_000_000, fits.len() as u32, fits));
    // Stored truncated: 60 of 1000 bytes.
    let mut cut = udp4_frame(102, 1000 - 42);
    cut.truncate(60);
    frames.push((base + 23_000_000, 1000, cut));
    let input = tmp.path().join("edges.pcap");
    std::fs::write(&input, write_pcap_ns(1, 65535, &frames)).unwrap();
    let src = tmp.path().join("src");
    import_ok(&src, &[], &[p(&input)]);

    let link = Link::new(1500);
    let got_store = tmp.path().join("got");
    let cap = Capture::start(&link.b.name, &link.if_b, &got_store);
    let out = link.replay(&src, &["--pps", "2000"]);
    // Exit 3: some packets were not sent.
    let rep = report(&out, 3);
    assert_eq!(rep["packets"], 23, "{rep}");
    assert_eq!(rep["sent"], 21, "{rep}");
    assert_eq!(rep["not_sent"]["over_mtu"], 1, "{rep}");
    assert_eq!(rep["not_sent"]["truncated"], 1, "{rep}");
    assert_eq!(rep["not_sent_total"], 2, "{rep}");
    assert_eq!(rep["mtu"], 1500);
    wait_stored(&got_store, 21);
    cap.stop();
    let got = stored(&got_store, &tmp.path().join("got.pcap"));
    let want: Vec<Pkt> = frames
        .iter()
        .filter(|f| f.2.len() <= 1514 && f.2.len() as u32 == f.1)
        .map(|f| Pkt {
            ts_ns: f.0,
            orig_len: f.1,
            linktype: 1,
            data: f.2.clone(),
        })
        .collect();
    assert_same_packets(&want, &got);
    // The text report names the causes.
    let mut cmd = in_ns(&link.a.name, bin());
    cmd.args([
        "replay",
        "--store",
        p(&src),
        "--iface",
        &link.if_a,
        "--topspeed",
    ]);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(3), "{}", stderr_str(&out));
    let text = stdout_str(&out);
    assert!(text.contains("sent 21 of 23 packets"), "{text}");
    assert!(
        text.contains("1 truncated in the store, 1 over the MTU (1500)"),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
}

#[test]
fn refuses_the_interface_a_capture_of_the_store_reads_and_names_a_missing_one() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let link = Link::new(1500);
    let cap = Capture::start(&link.b.name, &link.if_b, &store);
    // The capture writes its status file before it says it is capturing.
    let mut cmd = in_ns(&link.b.name, bin());
    cmd.args(["replay", "--store", p(&store), "--iface", &link.if_b]);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_str(&out));
    let err = stderr_str(&out);
    assert!(
        err.contains(&format!("refusing to replay onto {}", link.if_b))
            && err.contains(&format!("pid {}", cap.pid())),
        "{err}"
    );
    // The other end, which no capture of this store reads, is allowed (the store is empty:
    // nothing to send, exit 0).
    let rep = report(&link.replay(&store, &[]), 0);
    assert_eq!(rep["sent"], 0);
    cap.stop();
    // Once the capture has stopped, its interface is free.
    let mut cmd = in_ns(&link.b.name, bin());
    cmd.args(["replay", "--store", p(&store), "--iface", &link.if_b]);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_str(&out));

    let missing = format!("rpnone{}", std::process::id());
    let mut cmd = in_ns(&link.a.name, bin());
    cmd.args(["replay", "--store", p(&store), "--iface", &missing]);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_str(&out));
    let err = stderr_str(&out);
    assert!(
        err.contains(&format!("no network interface named \"{missing}\"")),
        "{err}"
    );
}

#[test]
fn without_cap_net_raw_the_error_says_so() {
    let _one = one_at_a_time();
    need_tool("setpriv");
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("one.pcap");
    let f = udp4_frame(1, 10);
    std::fs::write(&input, write_pcap_ns(1, 65535, &[(1, f.len() as u32, f)])).unwrap();
    let store = tmp.path().join("store");
    import_ok(&store, &[], &[p(&input)]);
    let link = Link::new(1500);
    // Root without CAP_NET_RAW: dropped from the bounding set, so the exec'd capsule lacks
    // it.
    let mut cmd = in_ns(&link.a.name, "setpriv");
    cmd.args([
        "--bounding-set",
        "-net_raw",
        "--inh-caps",
        "-net_raw",
        bin(),
    ])
    .args(["replay", "--store", p(&store), "--iface", &link.if_a]);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_str(&out));
    let err = stderr_str(&out);
    assert!(
        err.contains(&format!("sending onto {} needs CAP_NET_RAW", link.if_a)),
        "{err}"
    );
}
