//! `capsule config check FILE` end to end: a valid file exits 0 with its summary (and its
//! model with `--json`); an unknown key, a bad CIDR, an unknown zone or an unreadable file
//! exit 2 with the file, line and key on standard error. And `capsule capture --config`:
//! the file's `[capture]` values are used, flags override them, a bad value exits 2 at its
//! line.

mod common;

use std::path::{Path, PathBuf};

use common::*;

const VALID: &str = r#"# the example of docs/config.md
[groups]
voice = ["10.4.0.0/24", "fd00:4::/64"]
gpu = ["10.1.1.0/24"]
model-store = ["10.7.0.10"]
backup = ["10.8.0.20"]

[dscp]
ef = ["voice"]

[egress]
model-store = ["backup"]

[work_hours]
days = "mon-fri"
start = "08:00"
end = "19:00"
timezone = "Europe/Berlin"
"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let f = dir.join(name);
    std::fs::write(&f, text).unwrap();
    f
}

/// Runs `capsule config check` and returns (exit code, stdout, stderr).
fn check(args: &[&str], file: &Path) -> (i32, String, String) {
    let out = run(capsule().args(["config", "check"]).args(args).arg(file));
    (
        out.status.code().expect("exited"),
        stdout_str(&out),
        stderr_str(&out),
    )
}

/// `VALID` with line `line` (1-based) replaced by `with`.
fn valid_but(line: usize, with: &str) -> String {
    let mut lines: Vec<&str> = VALID.lines().collect();
    lines[line - 1] = with;
    lines.join("\n") + "\n"
}

#[test]
fn a_valid_file_exits_0_with_its_summary() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "capsule.toml", VALID);
    let (code, out, err) = check(&[], &f);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.is_empty(), "{err}");
    assert!(
        out.starts_with(&format!("{}: valid\n", f.display())),
        "{out}"
    );
    for want in [
        "groups (4,",
        "voice",
        "2 prefixes  10.4.0.0/24, fd00:4::/64",
        "model-store      1 prefix  10.7.0.10/32",
        "ef (46)",
        "allowed for: voice",
        "may send to: its own group, backup",
        "work hours: mon-fri 08:00-19:00 Europe/Berlin",
    ] {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }
}

#[test]
fn json_prints_the_validated_model() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "capsule.toml", VALID);
    let (code, out, err) = check(&["--json"], &f);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let names: Vec<&str> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["voice", "gpu", "model-store", "backup"]);
    assert_eq!(v["groups"][2]["prefixes"][0], "10.7.0.10/32");
    assert_eq!(v["dscp"][0]["name"], "ef");
    assert_eq!(v["dscp"][0]["value"], 46);
    assert_eq!(v["dscp"][0]["groups"][0], "voice");
    assert_eq!(v["egress"][0]["group"], "model-store");
    assert_eq!(v["egress"][0]["groups"][0], "backup");
    assert_eq!(v["work_hours"]["timezone"], "Europe/Berlin");
    assert_eq!(v["work_hours"]["start"], "08:00");
}

/// Asserts exit 2, nothing on stdout, and one error line naming `file:line:` and `key`.
fn assert_refused(file: &Path, line: usize, key: &str, words: &[&str]) {
    let (code, out, err) = check(&[], file);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.is_empty(), "{out}");
    let prefix = format!("capsule: error: {}:{line}:", file.display());
    assert!(
        err.starts_with(&prefix),
        "{err:?} does not start with {prefix:?}"
    );
    assert!(
        err.contains(&format!(": {key}: ")),
        "{err:?} does not name {key}"
    );
    for w in words {
        assert!(err.contains(w), "{err:?} lacks {w:?}");
    }
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn an_unknown_key_exits_2_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    // Appended to the last section, [work_hours] (a replaced key would be missing too).
    let f = write(
        dir.path(),
        "c.toml",
        &(VALID.to_string() + "stat = \"08:00\"\n"),
    );
    assert_refused(
        &f,
        19,
        "work_hours.stat",
        &["unknown key", "days, start, end, timezone"],
    );
    let f = write(
        dir.path(),
        "d.toml",
        &(VALID.to_string() + "\n[alert]\nx = 1\n"),
    );
    assert_refused(
        &f,
        20,
        "alert",
        &["unknown key", "groups, dscp, egress, work_hours, capture"],
    );
}

#[test]
fn a_bad_cidr_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "c.toml",
        &valid_but(
            4,
            "gpu = [\"10.1.1.0/24\", \"10.1.2.0/24\", \"10.1.300.0/24\"]",
        ),
    );
    assert_refused(
        &f,
        4,
        "groups.gpu[2]",
        &["bad address or prefix", "\"10.1.300.0/24\""],
    );
    let f = write(
        dir.path(),
        "d.toml",
        &valid_but(4, "gpu = [\"10.1.1.1/24\"]"),
    );
    assert_refused(
        &f,
        4,
        "groups.gpu[0]",
        &["host bits set", "did you mean 10.1.1.0/24?"],
    );
}

#[test]
fn an_unknown_zone_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "c.toml",
        &valid_but(18, "timezone = \"Europe/Berlim\""),
    );
    assert_refused(
        &f,
        18,
        "work_hours.timezone",
        &["unknown time zone", "\"Europe/Berlim\""],
    );
}

#[test]
fn an_undefined_group_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "c.toml",
        &valid_but(9, "ef = [\"voice\", \"video\"]"),
    );
    assert_refused(&f, 9, "dscp.ef[1]", &["unknown group", "`video`"]);
}

#[test]
fn a_missing_file_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("none.toml");
    let (code, _, err) = check(&[], &f);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("none.toml: cannot read the config file"),
        "{err}"
    );
}

#[test]
fn help_states_the_exit_statuses() {
    let out = run_ok(capsule().args(["config", "check", "--help"]));
    let text = stdout_str(&out);
    assert!(
        text.contains("Exit status: 0 the file is valid; 2"),
        "{text}"
    );
}

/// `capsule capture` with `args` (an interface that does not exist, or a store that cannot
/// be created: it fails before capturing, naming the one it tried).
fn capture_run(args: &[&str]) -> (i32, String) {
    let out = run(capsule().arg("capture").args(args));
    (out.status.code().expect("exited"), stderr_str(&out))
}

#[test]
fn capture_takes_its_settings_from_the_file_and_flags_override_them() {
    let dir = tempfile::tempdir().unwrap();
    // Stores under a regular file: they cannot be created, and the error names them.
    std::fs::write(dir.path().join("file"), "").unwrap();
    let store = dir.path().join("file").join("store-from-file");
    let f = write(
        dir.path(),
        "c.toml",
        &format!(
            "{VALID}\n[capture]\niface = \"capsule-nx0\"\nstore = \"{}\"\nring_size = \"16M\"\n",
            store.display()
        ),
    );
    let (code, out, err) = check(&[], &f);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("--iface") && l.ends_with(" capsule-nx0")),
        "{out}"
    );
    assert!(out.contains("capture (3 settings; flags on the command line override them)"));

    // The file's interface is used: it is refused by name, before the store is touched.
    let (code, err) = capture_run(&["--config", p(&f)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no network interface named \"capsule-nx0\""),
        "{err}"
    );
    // An interface that exists: the file's store is the one tried.
    let (code, err) = capture_run(&["--config", p(&f), "--iface", "lo"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("cannot create store directory {}", p(&store))),
        "the file's store was not used: {err}"
    );

    // A flag overrides the file.
    let other = dir.path().join("file").join("store-from-flag");
    let (code, err) = capture_run(&["--config", p(&f), "--iface", "capsule-nx1"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no network interface named \"capsule-nx1\""),
        "{err}"
    );
    assert!(!err.contains("capsule-nx0"), "{err}");
    let (code, err) = capture_run(&["--config", p(&f), "--iface", "lo", "--store", p(&other)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("cannot create store directory {}", p(&other))),
        "the flag's store was not used: {err}"
    );
}

#[test]
fn capture_refuses_a_bad_file_value_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let f = write(
        dir.path(),
        "c.toml",
        &format!(
            "[capture]\niface = \"capsule-nx0\"\nstore = \"{}\"\nring_size = \"16Q\"\n",
            store.display()
        ),
    );
    let (code, err) = capture_run(&["--config", p(&f)]);
    assert_eq!(code, 2, "{err}");
    let want = format!(
        "capsule: error: {}:4:13: capture.ring_size: bad value for --ring-size: ",
        f.display()
    );
    assert!(err.starts_with(&want), "{err}");
    assert!(err.contains("16Q"), "{err}");
    assert!(!store.exists(), "nothing starts when the file is bad");
    // An unknown key too.
    let f = write(
        dir.path(),
        "d.toml",
        "[capture]\niface = \"x\"\nbuffer = \"1G\"\n",
    );
    let (code, err) = capture_run(&["--config", p(&f), "--store", p(&store)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("d.toml:3:1: capture.buffer: unknown key"),
        "{err}"
    );
    assert!(err.contains("ring_size"), "{err}");
}

#[test]
fn a_serve_section_is_listed_with_its_flags_and_a_bad_one_names_its_line() {
    let d = tempfile::tempdir().unwrap();
    let f = write(
        d.path(),
        "serve.toml",
        "[serve]\nlisten = \"0.0.0.0:8443\"\ncrl = [\"a.crl\", \"b.crl\"]\nmax_queries = 4\n",
    );
    let (code, out, err) = check(&[], &f);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("serve (4 settings"), "{out}");
    for flag in ["--listen", "--crl", "--max-queries"] {
        assert!(out.contains(flag), "{out}");
    }
    let (code, out, _) = check(&["--json"], &f);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["serve"][2]["key"], "serve.crl[1]");
    assert_eq!(v["serve"][2]["flag"], "--crl");
    let bad = write(
        d.path(),
        "bad.toml",
        "[serve]\nlisten = \"x\"\nmax_queries = -1\n",
    );
    let (code, _, err) = check(&[], &bad);
    assert_eq!(code, 2);
    assert!(
        err.contains(":3:") && err.contains("serve.max_queries"),
        "{err}"
    );
    // A file without the section lists none (and its JSON has no `serve` key).
    let plain = write(d.path(), "plain.toml", "[groups]\na = [\"10.0.0.0/8\"]\n");
    let (_, out, _) = check(&[], &plain);
    assert!(!out.contains("serve"), "{out}");
}

#[test]
fn every_error_of_a_file_is_reported_in_one_run() {
    // Six problems in five sections: an unknown section, a bad prefix (its group stays
    // defined, so [dscp] naming it is no further error), an unknown key and a bad value in
    // [alerts], a bad value in [cutoff], an unknown zone.
    let text = "[groups]\n\
                gpu = [\"10.1.1.0/33\"]\n\
                [dscp]\n\
                ef = [\"gpu\"]\n\
                [alerts]\n\
                egress_byte = \"1M\"\n\
                straggler_ratio = 2.0\n\
                [cutoff]\n\
                idle = \"soon\"\n\
                [work_hours]\n\
                days = \"mon-fri\"\n\
                start = \"08:00\"\n\
                end = \"19:00\"\n\
                timezone = \"Mars/Olympus\"\n\
                [alert]\n\
                x = 1\n";
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "c.toml", text);
    let (code, out, err) = check(&[], &f);
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.is_empty(), "{out}");
    let file = f.display().to_string();
    let want = [
        (2, "groups.gpu[0]", "bad address or prefix"),
        (6, "alerts.egress_byte", "unknown key"),
        (7, "alerts.straggler_ratio", "bad value"),
        (9, "cutoff.idle", "bad value"),
        (14, "work_hours.timezone", "unknown time zone"),
        (15, "alert", "unknown key"),
    ];
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), want.len(), "{err}");
    // In file order, each naming the file, line and key.
    for (l, (line, key, kind)) in lines.iter().zip(want) {
        let prefix = format!("capsule: error: {file}:{line}:");
        assert!(
            l.starts_with(&prefix),
            "{l:?} does not start with {prefix:?}"
        );
        assert!(
            l.contains(&format!(": {key}: {kind}")),
            "{l:?} lacks {key}: {kind}"
        );
    }
}

#[test]
fn the_summary_lists_the_alert_rules_with_their_thresholds() {
    let text = VALID.to_string()
        + "\n[alerts]\negress_bytes = \"10M\"\negress_window = \"1m\"\n\
           straggler_groups = [\"gpu\"]\ndisabled = [\"tcp_zero_window\"]\n";
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "c.toml", &text);
    let (code, out, err) = check(&[], &f);
    assert_eq!(code, 0, "{out}{err}");
    for want in [
        "alerts (11 rules on, 1 off):",
        "incast               nothing to check (no incast_senders)",
        "egress",
        "10.5 MB per flow direction in 1m 00s",
        "straggler",
        "groups gpu",
        "tcp_zero_window      off",
    ] {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }
}
