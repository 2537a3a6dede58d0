//! The systemd unit in dist/ ([ops] daemon): `systemd-analyze verify` accepts it without a
//! warning (an unknown or misspelt hardening key is only a warning, and would silently
//! leave the service unhardened), and it asks for what capture needs and no more.
//! The notify protocol itself is tested on a live capture in tests/capture_live.rs.

mod common;

use common::*;

fn unit() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/dist/capsule-capture@.service"
    ))
    .unwrap()
}

#[test]
fn the_capture_unit_passes_systemd_analyze_verify_without_a_warning() {
    let tool = need_tool("systemd-analyze");
    let d = tempfile::tempdir().unwrap();
    // An instance, with ExecStart pointing at the binary under test (verify checks that
    // every program the unit runs exists).
    let path = d.path().join("capsule-capture@lo.service");
    std::fs::write(&path, unit().replace("/usr/local/bin/capsule", bin())).unwrap();
    let out = run(std::process::Command::new(tool).arg("verify").arg(&path));
    let err = stderr_str(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let about_it: Vec<_> = err
        .lines()
        .filter(|l| l.contains("capsule-capture@"))
        .collect();
    assert!(about_it.is_empty(), "systemd-analyze says: {about_it:#?}");
}

#[test]
fn the_capture_unit_is_a_hardened_notify_service_with_only_capture_capabilities() {
    let u = unit();
    let key = |k: &str| -> Vec<String> {
        u.lines()
            .filter_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(str::to_string)
            .collect()
    };
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
    let exec = key("ExecStart").pop().unwrap();
    let help = stdout_str(&run_ok(capsule().args(["capture", "--help"])));
    let words: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(words[1], "capture", "{exec}");
    for flag in words.iter().filter(|w| w.starts_with("--")) {
        assert!(
            help.contains(&format!("{flag} ")),
            "{flag} is not a capture flag"
        );
    }
}
