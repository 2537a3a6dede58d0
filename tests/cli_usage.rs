//! Usage errors: every bad value, whatever the flag, is refused by the argument parser
//! before any command runs, with exit status 2 and a message naming the flag. Nothing is
//! created or touched on the way.

mod common;

use common::*;

/// Runs `capsule ARGS` and checks it exits 2, names `flag` and the bad value, and leaves
/// `store` uncreated.
fn refused(args: &[&str], flag: &str, value: &str, store: &std::path::Path) {
    let out = run(capsule().args(args));
    let err = stderr_str(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.contains(flag),
        "{args:?}: the message names {flag}: {err}"
    );
    assert!(
        err.contains(value),
        "{args:?}: the message quotes {value:?}: {err}"
    );
    assert!(stdout_str(&out).is_empty(), "{args:?}: {out:?}");
    assert!(
        !store.exists(),
        "{args:?}: a refused command creates no store"
    );
}

#[test]
fn bad_sizes_durations_times_and_levels_exit_2_naming_the_flag() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    let s = p(&store);
    let input = d.path().join("in.pcap");
    std::fs::write(&input, write_pcap_ns(1, 0, &[(1, 60, vec![0; 60])])).unwrap();
    let f = p(&input);
    for (flag, value) in [
        ("--block-size", "12parsecs"),
        ("--block-size", "1.2.3"),
        ("--segment-size", "lots"),
        ("--segment-age", "ten minutes"),
        ("--block-age", "5 fortnights"),
        ("--max-bytes", "500X"),
        ("--level", "23"),
        ("--level", "fast"),
    ] {
        refused(
            &["import", "--store", s, flag, value, f],
            flag,
            value,
            &store,
        );
    }
    for (flag, value) in [("--from", "yesterday"), ("--to", "2026-13-01T00:00:00Z")] {
        refused(
            &["query", "--store", s, flag, value, "-w", "-"],
            flag,
            value,
            &store,
        );
        refused(&["flows", "--store", s, flag, value], flag, value, &store);
    }
    refused(
        &[
            "capture",
            "--iface",
            "lo",
            "--store",
            s,
            "--ring-size",
            "big",
        ],
        "--ring-size",
        "big",
        &store,
    );
    let out = d.path().join("synth.pcap");
    for (flag, value) in [
        ("--duration", "forever"),
        ("--rate", "fast"),
        ("--start", "tomorrow"),
    ] {
        refused(&["synth", flag, value, "-w", p(&out)], flag, value, &store);
        assert!(!out.exists(), "{flag}: no output written");
    }
}

#[test]
fn a_window_that_ends_before_it_starts_is_a_usage_error() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    for cmd in ["query", "flows"] {
        let mut c = capsule();
        c.args([cmd, "--store", p(&store), "--from", "@5", "--to", "@1"]);
        if cmd == "query" {
            c.args(["-w", "-"]);
        }
        let out = run(&mut c);
        let err = stderr_str(&out);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains("--from") && err.contains("--to"),
            "{cmd}: {err}"
        );
    }
}

#[test]
fn every_subcommand_has_its_own_description() {
    let out = run_ok(capsule().arg("--help"));
    let help = stdout_str(&out);
    let mut seen = std::collections::HashSet::new();
    for cmd in [
        "import", "capture", "query", "flows", "reindex", "status", "segments", "synth", "verify",
    ] {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{cmd} ")))
            .unwrap_or_else(|| panic!("{cmd} is not listed: {help}"));
        let about = line.trim_start()[cmd.len()..].trim().to_string();
        assert!(!about.is_empty(), "{cmd} has no description: {help}");
        assert!(
            seen.insert(about.clone()),
            "{cmd} shares its description: {about}"
        );
        let sub = stdout_str(&run_ok(capsule().args([cmd, "--help"])));
        assert!(
            sub.starts_with(&about),
            "`{cmd} --help` opens with its own description {about:?}: {sub}"
        );
    }
}

#[test]
fn help_is_wrapped_to_the_terminal_width() {
    let subcommands: Vec<String> = {
        let help = stdout_str(&run_ok(capsule().arg("--help")));
        help.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .filter(|c| c != "help")
            .collect()
    };
    assert!(subcommands.len() > 10, "{subcommands:?}");
    for args in std::iter::once(vec![])
        .chain(subcommands.iter().map(|s| vec![s.as_str()]))
        .flat_map(|a| {
            let mut short = a.clone();
            short.push("-h");
            let mut long = a;
            long.push("--help");
            [short, long]
        })
    {
        let out = run_ok(capsule().args(&args).env("COLUMNS", "60"));
        for line in stdout_str(&out).lines() {
            // Wider only where one word (a URL, a long example) does not fit, and on the usage
            // line, which clap does not wrap.
            let unbreakable = line.split_whitespace().count() == 1 || line.starts_with("Usage: ");
            assert!(
                line.chars().count() <= 60 || unbreakable,
                "capsule {args:?} with COLUMNS=60, a line of {}: {line:?}",
                line.chars().count()
            );
        }
    }
}
