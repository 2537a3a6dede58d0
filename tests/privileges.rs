//! Least privilege of a live capture (docs/capture.md "Privileges"), JSON logs, and the
//! SIGHUP reload of the config file, on a real link.
//!
//! Each test makes its own pair of network namespaces joined by a veth pair (names carry
//! the test process's pid, `cpv<pid>-<n>-a` / `-b`), captures on the `b` end with `ip netns
//! exec`, sends from the `a` end with tcpreplay, and deletes the namespaces when it ends
//! (drop guards, also on a panic). Nothing is sent outside these namespaces: the veth is
//! made inside them, has no address, and IPv6 is off on both ends.
//!
//! What must hold:
//! * `--user` (a system user the test creates if absent, `capsule-test`): after start-up
//!   every thread of the capture runs as that user and its group only, with CapEff, CapPrm
//!   and CapBnd holding only what docs/capture.md says is kept (nothing for AF_PACKET;
//!   CAP_NET_ADMIN for XDP when capture turned receive VLAN offload off, to turn it back
//!   on at exit), no ambient or inheritable capability, and NoNewPrivs 1; the packets sent
//!   after the drop are stored and queryable (and the XDP program's counters, a BPF map
//!   read unprivileged, count them); every store file is the user's, files 0640,
//!   directories 0750; with `--log-format json` every line on standard error is a JSON
//!   object;
//! * as root without `--user`: still root, but CapEff/CapPrm/CapBnd empty and NoNewPrivs 1;
//! * a store the user cannot write is refused at start, naming the path, before the
//!   interface is touched;
//! * SIGHUP: a changed `max_age` is applied and saved (retention.json) and deletes old
//!   segments, a changed alert rule replaces the live rules, a changed restart-only key is
//!   logged as needing a restart, and a bad file is logged with its key and line while
//!   capture keeps running with the old settings.
//!
//! Needs root, iproute2 and tcpreplay; CI runs as root.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;

const TEST_USER: &str = "capsule-test";

fn need_root() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or("?");
    assert_eq!(
        uid, "0",
        "these tests need root (namespaces, packet sockets, users)"
    );
}

/// The uid and gid of the test user, made (a system user, no home, no login) if absent.
fn test_user() -> (u32, u32) {
    let ids = || -> Option<(u32, u32)> {
        let u = Command::new("id").args(["-u", TEST_USER]).output().ok()?;
        let g = Command::new("id").args(["-g", TEST_USER]).output().ok()?;
        if !u.status.success() || !g.status.success() {
            return None;
        }
        Some((
            stdout_str(&u).trim().parse().ok()?,
            stdout_str(&g).trim().parse().ok()?,
        ))
    };
    if let Some(found) = ids() {
        return found;
    }
    need_tool("useradd");
    // Another test may make it at the same time: whoever loses sees it exist.
    let _ = Command::new("useradd")
        .args(["-r", "-M", "-U", "-s", "/usr/sbin/nologin", TEST_USER])
        .stdin(Stdio::null())
        .status();
    ids().unwrap_or_else(|| panic!("cannot create the test user {TEST_USER}"))
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

struct Netns(String);

impl Netns {
    fn new(name: String) -> Netns {
        run_ok(Command::new("ip").args(["netns", "add", &name]));
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.0])
            .stdin(Stdio::null())
            .status();
    }
}

/// Two namespaces joined by a veth pair: `a` sends, `b` captures (its `lo` up, for a
/// metrics listener on 127.0.0.1).
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
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let a = Netns::new(format!("cpv{pid}-{n}-a"));
        let b = Netns::new(format!("cpv{pid}-{n}-b"));
        let if_a = format!("pva{pid}x{n}");
        let if_b = format!("pvb{pid}x{n}");
        run_ok(Command::new("ip").args([
            "link", "add", &if_a, "netns", &a.0, "type", "veth", "peer", &if_b, "netns", &b.0,
        ]));
        for (ns, ifname) in [(&a.0, &if_a), (&b.0, &if_b)] {
            run_ok(Command::new("ip").args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-q",
                "-w",
                &format!("net.ipv6.conf.{ifname}.disable_ipv6=1"),
            ]));
            run_ok(Command::new("ip").args(["-n", ns, "link", "set", ifname, "up"]));
        }
        run_ok(Command::new("ip").args(["-n", &b.0, "link", "set", "lo", "up"]));
        Link { a, b, if_a, if_b }
    }

    /// Sends `count` probe frames (ethertype 0x88b5, which nothing answers) from `a`.
    fn send(&self, dir: &Path, count: usize, marker: &str) {
        need_tool("tcpreplay");
        let mut frames = Vec::new();
        for i in 0..count {
            let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x88, 0xb5];
            f.extend_from_slice(format!("{marker}-{i:06}-").as_bytes());
            f.resize(120, b'.');
            frames.push((now_ns() + i as u64, f.len() as u32, f));
        }
        let file = dir.join(format!("{marker}.pcap"));
        std::fs::write(&file, write_pcap_ns(1, 65535, &frames)).unwrap();
        let out = run_ok(
            Command::new("ip")
                .args(["netns", "exec", &self.a.0, "tcpreplay", "-i", &self.if_a])
                .args(["--pps", "2000"])
                .arg(&file),
        );
        let text = stdout_str(&out);
        let sent = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Successful packets:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        assert_eq!(sent, Some(count), "tcpreplay:\n{text}");
    }
}

/// A running `ip netns exec NS capsule capture ...` (ip execs: the pid is capsule's).
struct Capture {
    child: Child,
    pid: u32,
    stderr: Arc<Mutex<Vec<String>>>,
    stdout: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    done: bool,
}

impl Capture {
    fn start(link: &Link, store: &Path, extra: &[&str]) -> Capture {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &link.b.0, bin()])
            .env("CAPSULE_LOG", "info")
            .args(["capture", "--iface", &link.if_b, "--store", p(store)])
            .args(["--block-size", "64K", "--block-age", "50ms"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = show(&cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let pid = child.id();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stdout = Arc::new(Mutex::new(String::new()));
        let (e, o) = (stderr.clone(), stdout.clone());
        let err_pipe = child.stderr.take().unwrap();
        let mut out_pipe = child.stdout.take().unwrap();
        let readers = vec![
            std::thread::spawn(move || {
                for line in BufReader::new(err_pipe).lines() {
                    let Ok(line) = line else { break };
                    e.lock().unwrap().push(line);
                }
            }),
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = out_pipe.read_to_string(&mut s);
                o.lock().unwrap().push_str(&s);
            }),
        ];
        let mut c = Capture {
            child,
            pid,
            stderr,
            stdout,
            readers,
            done: false,
        };
        c.wait_for_line(
            &format!("capturing on {}", link.if_b),
            Duration::from_secs(15),
        );
        c
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Waits for a stderr line holding `want`; fails if capsule exits first.
    fn wait_for_line(&mut self, want: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stderr.lock().unwrap().iter().any(|l| l.contains(want)) {
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                self.done = true;
                std::thread::sleep(Duration::from_millis(100));
                panic!("capsule exited ({st}) before {want:?}:\n{}", self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "no {want:?} on stderr within {timeout:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: Signal) {
        signal(self.pid, sig);
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then the exit: (success, stdout, stderr lines).
    fn stop(&mut self) -> (bool, String, Vec<String>) {
        self.signal(Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < deadline, "capsule ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        self.done = true;
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        (
            status.success(),
            self.stdout.lock().unwrap().clone(),
            self.stderr.lock().unwrap().clone(),
        )
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if !self.done {
            self.signal(Signal::TERM);
            std::thread::sleep(Duration::from_millis(500));
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The credential lines of `/proc/PID/task/TID/status`, by key.
fn creds(path: &Path) -> std::collections::BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.starts_with("Cap") || ["Uid", "Gid", "Groups", "NoNewPrivs"].contains(k))
        .map(|(k, v)| {
            (
                k.to_string(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect()
}

/// Checks every thread of `pid`: uid and gid (all four of each) as given, only `gid` as
/// group (or no check of groups with `None`), CapEff = CapPrm = CapBnd = `kept`, no
/// ambient or inheritable capability, NoNewPrivs 1. Returns the thread count.
fn assert_dropped(pid: u32, uid: u32, gid: u32, groups: Option<&str>, kept: u64) -> usize {
    let mut n = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let Ok(name) = std::fs::read_to_string(t.join("comm")) else {
            continue;
        };
        let c = creds(&t.join("status"));
        let ctx = format!("thread {} ({}): {c:#?}", t.display(), name.trim());
        assert_eq!(c["Uid"], format!("{uid} {uid} {uid} {uid}"), "{ctx}");
        assert_eq!(c["Gid"], format!("{gid} {gid} {gid} {gid}"), "{ctx}");
        if let Some(g) = groups {
            assert_eq!(c["Groups"], g, "{ctx}");
        }
        let hex = format!("{kept:016x}");
        for k in ["CapEff", "CapPrm", "CapBnd"] {
            assert_eq!(c[k], hex, "{k} of {ctx}");
        }
        for k in ["CapAmb", "CapInh"] {
            assert_eq!(c[k], "0000000000000000", "{k} of {ctx}");
        }
        assert_eq!(c["NoNewPrivs"], "1", "{ctx}");
        n += 1;
    }
    n
}

/// Every file and directory under `root` is owned by `uid:gid`, files 0640, directories
/// 0750. Returns the number of files.
fn assert_owned(root: &Path, uid: u32, gid: u32) -> usize {
    let mut files = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let m = std::fs::symlink_metadata(&path).unwrap();
        let mode = m.permissions().mode() & 0o7777;
        assert_eq!(
            (m.uid(), m.gid()),
            (uid, gid),
            "{} is not owned by {uid}:{gid}",
            path.display()
        );
        if m.is_dir() {
            assert_eq!(mode, 0o750, "{} mode {mode:04o}", path.display());
            for e in std::fs::read_dir(&path).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else {
            assert_eq!(mode, 0o640, "{} mode {mode:04o}", path.display());
            files += 1;
        }
    }
    files
}

/// The number of packets of the store carrying `marker`, by `capsule query`.
fn stored_with(store: &Path, out: &Path, marker: &str) -> usize {
    query_ok(store, out, &[]);
    decode_file(out)
        .whole("export")
        .packets
        .iter()
        .filter(|p| p.data.windows(marker.len()).any(|w| w == marker.as_bytes()))
        .count()
}

/// Every stderr line is one JSON object with tracing's keys.
fn assert_json_lines(lines: &[String]) {
    assert!(!lines.is_empty());
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l)
            .unwrap_or_else(|e| panic!("stderr line is not JSON ({e}): {l}"));
        assert!(v.is_object(), "{l}");
        assert!(v["timestamp"].is_string(), "no timestamp: {l}");
        assert!(v["level"].is_string(), "no level: {l}");
        assert!(v["fields"]["message"].is_string(), "no message: {l}");
    }
}

/// A directory the test user may enter, with the store path inside it (not made yet: the
/// capture makes it, as the user).
fn user_store(tmp: &tempfile::TempDir, uid: u32, gid: u32) -> std::path::PathBuf {
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let boxdir = tmp.path().join("box");
    std::fs::create_dir(&boxdir).unwrap();
    std::os::unix::fs::chown(&boxdir, Some(uid), Some(gid)).unwrap();
    boxdir.join("store")
}

fn capture_as_user(mode: &str) {
    const CAP_NET_ADMIN: u64 = 1 << 12;
    let (uid, gid) = test_user();
    let link = Link::new();
    let tmp = tempfile::tempdir().unwrap();
    let store = user_store(&tmp, uid, gid);
    let mut cap = Capture::start(
        &link,
        &store,
        &[
            "--mode",
            mode,
            "--user",
            TEST_USER,
            "--log-format",
            "json",
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    // What capture says it kept is what every thread holds: none for AF_PACKET; for XDP
    // CAP_NET_ADMIN exactly when it turned receive VLAN offload off.
    let err = cap.stderr();
    let offload_changed = err.contains("turned receive VLAN offload off");
    let kept = if offload_changed { CAP_NET_ADMIN } else { 0 };
    if mode == "afpacket" {
        assert!(!offload_changed, "{err}");
        assert!(err.contains("capabilities kept: none"), "{err}");
    } else if offload_changed {
        assert!(
            err.contains("capabilities kept: CAP_NET_ADMIN (to turn"),
            "{err}"
        );
    }
    let threads = assert_dropped(cap.pid, uid, gid, Some(&gid.to_string()), kept);
    assert!(
        threads >= 4,
        "only {threads} threads: the store's should run"
    );
    link.send(tmp.path(), 300, "after-drop");
    std::thread::sleep(Duration::from_millis(800));
    assert!(cap.running(), "{}", cap.stderr());
    let (ok, stdout, lines) = cap.stop();
    assert!(ok, "capture failed:\n{}", lines.join("\n"));
    assert_json_lines(&lines);
    // The kernel (AF_PACKET) or the XDP program's counters (a BPF map read after the drop)
    // saw them all.
    assert!(
        stdout.contains("captured 300 packets") && stdout.contains("seen 300, dropped 0"),
        "{stdout}"
    );
    if offload_changed {
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("could not turn receive VLAN offload back")),
            "{lines:#?}"
        );
    }
    let files = assert_owned(&store, uid, gid);
    assert!(files >= 4, "{files} files");
    let out = tmp.path().join("out.pcap");
    assert_eq!(stored_with(&store, &out, "after-drop"), 300);
}

#[test]
fn afpacket_capture_runs_as_the_user_with_no_capability() {
    capture_as_user("afpacket");
}

#[test]
fn xdp_generic_capture_runs_as_the_user_keeping_only_net_admin() {
    capture_as_user("xdp-generic");
}

#[test]
fn xdp_native_capture_runs_as_the_user_keeping_only_net_admin() {
    capture_as_user("xdp-native");
}

#[test]
fn a_root_capture_without_user_still_drops_every_capability() {
    let link = Link::new();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let mut cap = Capture::start(&link, &store, &["--mode", "afpacket"]);
    assert_dropped(cap.pid, 0, 0, None, 0);
    link.send(tmp.path(), 50, "root-run");
    std::thread::sleep(Duration::from_millis(500));
    let (ok, stdout, lines) = cap.stop();
    assert!(ok, "{lines:#?}");
    assert!(stdout.contains("captured 50 packets"), "{stdout}");
    let out = tmp.path().join("out.pcap");
    assert_eq!(stored_with(&store, &out, "root-run"), 50);
}

#[test]
fn a_store_the_user_cannot_write_is_refused_before_set_up() {
    need_root();
    test_user();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let store = tmp.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700)).unwrap();
    // An interface that exists (lo; capture checks the interface's existence first, which
    // touches nothing): the store's error comes before any set-up on it.
    let out = run(capsule().args([
        "capture",
        "--iface",
        "lo",
        "--store",
        p(&store),
        "--user",
        TEST_USER,
    ]));
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_str(&out);
    assert!(
        err.contains(&format!(
            "cannot use the store: {}: directory not writable",
            store.display()
        )) && err.contains("mode 0700")
            && err.contains(&format!("chown -R {TEST_USER}:")),
        "{err}"
    );
    assert!(!err.contains("capturing on"), "{err}");
    // A user that does not exist is named.
    let out = run(capsule().args([
        "capture",
        "--iface",
        "lo",
        "--store",
        p(&store),
        "--user",
        "capsule-no-such-user-x",
    ]));
    assert!(
        stderr_str(&out).contains("--user capsule-no-such-user-x: no such user"),
        "{}",
        stderr_str(&out)
    );
}

/// The retention budgets saved in the store.
fn saved_budgets(store: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(store.join("retention.json")).unwrap()).unwrap()
}

fn alerts_status(store: &Path) -> serde_json::Value {
    std::fs::read(store.join("alerts-status.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Waits until `ok` holds of `what()`, failing after `timeout` with its last value.
fn wait_until<T: std::fmt::Debug>(
    timeout: Duration,
    mut what: impl FnMut() -> T,
    ok: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let v = what();
        if ok(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "still {v:?} after {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sighup_reloads_budgets_alert_rules_and_log_level_and_a_bad_file_changes_nothing() {
    let (uid, gid) = test_user();
    let link = Link::new();
    let tmp = tempfile::tempdir().unwrap();
    let store = user_store(&tmp, uid, gid);
    let sink = tmp.path().join("box").join("alerts.jsonl");
    let conf = tmp.path().join("capsule.toml");
    let write_conf = |extra_capture: &str, alerts: &str| {
        let text = format!(
            "[capture]\nmode = \"afpacket\"\nsegment_age = \"1s\"\n{extra_capture}\n\
             [alerts]\nlive_file = \"{}\"\nlive_every = \"1s\"\n{alerts}\n",
            sink.display()
        );
        std::fs::write(&conf, text).unwrap();
        // Read after the drop: the user must be able to.
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
    };
    write_conf("", "");
    let mut cap = Capture::start(&link, &store, &["--config", p(&conf), "--user", TEST_USER]);
    assert_eq!(saved_budgets(&store)["max_age_ns"], serde_json::Value::Null);
    wait_until(
        Duration::from_secs(10),
        || alerts_status(&store)["rules"].clone(),
        |r| {
            r.as_array()
                .is_some_and(|r| r.iter().any(|n| n == "egress"))
        },
    );
    link.send(tmp.path(), 100, "old-batch");
    // Sealed by age (1 s) before the next batch, so it is a segment of its own.
    std::thread::sleep(Duration::from_millis(2500));
    link.send(tmp.path(), 100, "new-batch");
    std::thread::sleep(Duration::from_millis(1500));
    let out = tmp.path().join("out.pcap");
    assert_eq!(stored_with(&store, &out, "old-batch"), 100);

    // A good file: max_age, an alert rule and the log level change; snaplen needs a restart.
    write_conf(
        "max_age = \"1s\"\nsnaplen = 100\nlog_level = \"info\"",
        "disabled = [\"egress\"]",
    );
    cap.signal(Signal::HUP);
    cap.wait_for_line("reloaded", Duration::from_secs(10));
    let err = cap.stderr();
    assert!(
        err.contains("capture.snaplen changed to 100: needs a restart; it stays 0"),
        "{err}"
    );
    assert!(
        err.contains("retention budgets") && err.contains("log level info"),
        "{err}"
    );
    assert!(err.contains("alert rules and groups"), "{err}");
    assert_eq!(saved_budgets(&store)["max_age_ns"], 1_000_000_000u64);
    // The old batch is more than 1 s older than the newest packet: its segment goes.
    wait_until(
        Duration::from_secs(10),
        || stored_with(&store, &out, "old-batch"),
        |n| *n == 0,
    );
    assert_eq!(stored_with(&store, &out, "new-batch"), 100);
    let st = wait_until(
        Duration::from_secs(10),
        || alerts_status(&store),
        |s| s["reloads"] == 1,
    );
    assert!(
        !st["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "egress"),
        "{st}"
    );

    // A bad file: logged with its line and key; capture goes on with what it had.
    write_conf("max_age = \"soon\"", "");
    let bad_line = std::fs::read_to_string(&conf)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("max_age"))
        .unwrap()
        + 1;
    cap.signal(Signal::HUP);
    cap.wait_for_line("refused", Duration::from_secs(10));
    let err = cap.stderr();
    assert!(
        err.contains(&format!(
            "reload of {} refused, nothing changed: {}:{bad_line}:",
            conf.display(),
            conf.display()
        )) && err.contains("capture.max_age"),
        "{err}"
    );
    assert!(cap.running(), "{err}");
    assert_eq!(saved_budgets(&store)["max_age_ns"], 1_000_000_000u64);
    link.send(tmp.path(), 100, "after-bad-file");
    std::thread::sleep(Duration::from_millis(800));
    let (ok, stdout, lines) = cap.stop();
    assert!(ok, "{lines:#?}");
    assert!(stdout.contains("captured 300 packets"), "{stdout}");
    assert_eq!(stored_with(&store, &out, "after-bad-file"), 100);
    assert_owned(&store, uid, gid);
}
