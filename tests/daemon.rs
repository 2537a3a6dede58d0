//! The systemd units in dist/ ([ops] daemon, [serve]): `systemd-analyze verify` accepts
//! each without a warning (an unknown or misspelt hardening key is only a warning, and would
//! silently leave the service unhardened); capture's asks for what capture needs and no
//! more, the server's for no capability at all.
//! The notify protocol itself is tested on a live capture in tests/capture_live.rs.

mod common;

use common::*;

fn read_unit(name: &str) -> String {
    std::fs::read_to_string(format!("{}/dist/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn unit() -> String {
    read_unit("capsule-capture@.service")
}

/// The `KEY=` values of a unit, in order.
fn keys(u: &str, k: &str) -> Vec<String> {
    u.lines()
        .filter_map(|l| l.strip_prefix(&format!("{k}=")))
        .map(str::to_string)
        .collect()
}

/// `systemd-analyze verify` of `text` saved as `name`, with ExecStart pointing at the binary
/// under test (verify checks that every program the unit runs exists): exit 0 and not a
/// word about the unit.
fn verify(name: &str, text: &str) {
    let tool = need_tool("systemd-analyze");
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join(name);
    std::fs::write(&path, text.replace("/usr/local/bin/capsule", bin())).unwrap();
    let out = run(std::process::Command::new(tool).arg("verify").arg(&path));
    let err = stderr_str(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let stem = name.split(['@', '.']).next().unwrap();
    let about_it: Vec<_> = err.lines().filter(|l| l.contains(stem)).collect();
    assert!(about_it.is_empty(), "systemd-analyze says: {about_it:#?}");
}

/// Every `--flag` of a unit's ExecStart is one its subcommand has.
fn exec_flags_exist(u: &str, sub: &str) {
    let exec = keys(u, "ExecStart").pop().unwrap();
    let help = stdout_str(&run_ok(capsule().args([sub, "--help"])));
    let words: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(words[1], sub, "{exec}");
    for flag in words.iter().filter(|w| w.starts_with("--")) {
        assert!(
            help.contains(&format!("{flag} ")),
            "{flag} is not a {sub} flag"
        );
    }
}

#[test]
fn the_capture_unit_passes_systemd_analyze_verify_without_a_warning() {
    // An instance: the template itself cannot be verified.
    verify("capsule-capture@lo.service", &unit());
}

#[test]
fn the_serve_unit_passes_systemd_analyze_verify_without_a_warning() {
    verify("capsule-serve.service", &read_unit("capsule-serve.service"));
}

#[test]
fn the_serve_unit_holds_no_capability_reads_the_stores_and_writes_only_its_log() {
    let u = read_unit("capsule-serve.service");
    let key = |k: &str| keys(&u, k);
    assert_eq!(key("Type"), ["notify"]);
    assert_eq!(
        key("User"),
        ["capsule-serve"],
        "never root, not the capture user"
    );
    assert_eq!(
        key("SupplementaryGroups"),
        ["capsule"],
        "the stores' reader group"
    );
    assert_eq!(key("CapabilityBoundingSet"), [""], "no capability");
    assert_eq!(key("AmbientCapabilities"), [""]);
    assert_eq!(key("NoNewPrivileges"), ["yes"]);
    assert_eq!(key("ProtectSystem"), ["strict"]);
    assert_eq!(key("ReadOnlyPaths"), ["/var/lib/capsule"]);
    assert!(
        key("ReadWritePaths").is_empty(),
        "writes only its LogsDirectory and CacheDirectory"
    );
    assert_eq!(
        key("CacheDirectory"),
        ["capsule-serve"],
        "where it keeps what it fetched from the object store (the store is read-only)"
    );
    assert_eq!(key("RestrictAddressFamilies"), ["AF_UNIX AF_INET AF_INET6"]);
    let exec = key("ExecStart").pop().unwrap();
    assert!(
        exec.contains("--audit-log /var/log/capsule-serve/"),
        "the audit log is in its LogsDirectory: {exec}"
    );
    exec_flags_exist(&u, "serve");
}

#[test]
fn the_capture_unit_is_a_hardened_notify_service_with_only_capture_capabilities() {
    let u = unit();
    let key = |k: &str| keys(&u, k);
    assert_eq!(key("Type"), ["notify"]);
    assert_eq!(key("NoNewPrivileges"), ["yes"]);
    assert_eq!(key("ProtectSystem"), ["strict"]);
    assert_eq!(key("ReadWritePaths"), ["/var/lib/capsule/%i"]);
    assert!(!key("WatchdogSec").is_empty());
    assert_eq!(key("User"), ["capsule"], "never root");
    let caps = key("CapabilityBoundingSet");
    assert_eq!(
        caps,
        ["CAP_NET_RAW CAP_NET_ADMIN CAP_BPF CAP_PERFMON"],
        "only what AF_PACKET and AF_XDP capture need"
    );
    assert_eq!(key("AmbientCapabilities"), caps);
    // Every flag of the command line it runs is one `capsule capture` has.
    exec_flags_exist(&u, "capture");
}
