//! Every `capsule ...` example of README.md, run as written against a store built like the
//! demo's (synthetic traffic dated up to now, so `--from -10m` finds data): each must exit 0
//! and return data.
//!
//! The examples are taken from the fenced `sh` blocks (a line starting with `capsule `,
//! continued by a trailing `\`). Machine paths are moved into the test's directory
//! (`/var/lib/capsule` is the store, completion and man page directories are temporary,
//! `/etc/capsule/capsule.toml` is docs/examples/capsule.toml);
//! `capsule` is found on PATH as the binary under test; the input files the examples name
//! are made as a reader would make them (`traffic.pcap` by the synth example itself).
//! `capture` needs a network interface and root, and runs until SIGTERM: it is listed, not
//! run (tests/capture_live.rs covers it); so does `replay` (tests/replay.rs covers it); `--watch` runs for two seconds.
//!
//! Run: `cargo test --release --test readme_examples`. Needs tshark and zstd.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The example commands of README.md, continuation lines joined, comments removed.
fn examples(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut cur: Option<String> = None;
    for line in readme.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = !in_sh && (t == "```sh" || t == "```bash");
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = strip_comment(line);
        let code = code.trim();
        match cur.take() {
            Some(mut c) => {
                c.push(' ');
                c.push_str(code.trim_end_matches('\\').trim());
                if code.ends_with('\\') {
                    cur = Some(c);
                } else {
                    out.push(c);
                }
            }
            None if code.starts_with("capsule ") => {
                let c = code.trim_end_matches('\\').trim().to_string();
                if code.ends_with('\\') {
                    cur = Some(c);
                } else {
                    out.push(c);
                }
            }
            None => {}
        }
    }
    out
}

/// `line` without a shell comment (a `#` outside quotes, at a word's start).
fn strip_comment(line: &str) -> String {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return line[..i].to_string(),
            _ => {}
        }
        prev = c;
    }
    line.to_string()
}

#[test]
fn every_readme_example_runs_and_returns_data() {
    need_tool("tshark");
    need_tool("zstd");
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("read README.md");
    let cmds = examples(&readme);
    assert!(cmds.len() >= 15, "examples found: {cmds:#?}");

    let d = tempfile::tempdir().unwrap();
    let work = d.path();
    // The store, like the demo's but dated up to now: 11 minutes ending now.
    let store = work.join("store");
    let now_pcap = work.join("now.pcap");
    synth(
        &now_pcap,
        &work.join("now.json"),
        7,
        "11m",
        "2M",
        Some("-11m"),
    );
    import_ok(&store, &[], &[p(&now_pcap)]);
    // The second input of the import example, compressed as a capture is shipped.
    let pcapng = work.join("other.pcapng");
    run_ok(capsule().args([
        "query",
        "--store",
        p(&store),
        "--from",
        "-1m",
        "-w",
        p(&pcapng),
    ]));
    sh_ok(&format!(
        "zstd -q -f {} -o {}",
        p(&pcapng),
        p(&work.join("other.pcapng.zst"))
    ));
    std::fs::copy(&now_pcap, work.join("big.pcap")).unwrap();
    std::fs::create_dir_all(work.join("completions")).unwrap();

    // `capsule` on PATH is the binary under test.
    let bin_dir = Path::new(bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (mut ran, mut not_run) = (0, 0);
    for example in &cmds {
        let cmd = example
            .replace("/var/lib/capsule", p(&store))
            .replace(
                "/etc/bash_completion.d/",
                &format!("{}/completions/", p(work)),
            )
            .replace("/usr/local/share/man/man1", &format!("{}/man", p(work)))
            // The config file: the example shipped in docs/ (its groups match synth's).
            .replace(
                "/etc/capsule/capsule.toml",
                concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/capsule.toml"),
            )
            .replace(" [--repair]", "")
            .replace("/etc/capsule/tokens", &format!("{}/tokens", p(work)));
        let sub = cmd
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        if sub == "capture" || sub == "replay" {
            eprintln!("not run (needs an interface and root; tests/capture_live.rs, tests/replay.rs): {example}");
            not_run += 1;
            continue;
        }
        // A server runs until stopped, and the pulls need one with certificates:
        // tests/serve.rs starts one and runs these forms against it.
        if sub == "serve" || cmd.contains("--server") {
            eprintln!("not run (needs a running capsule serve; tests/serve.rs): {example}");
            not_run += 1;
            continue;
        }
        let mut sh = Command::new("bash");
        // `--watch` runs until stopped: exec'd, so that the child killed below is capsule.
        let exec = if cmd.contains("--watch") { "exec " } else { "" };
        sh.args(["-c", &format!("set -eo pipefail; {exec}{cmd}")])
            .current_dir(work)
            .env("PATH", &path)
            .env_remove("CAPSULE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = if cmd.contains("--watch") {
            // Runs until interrupted: two seconds of it.
            let mut child = sh.spawn().expect("start bash");
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(2) && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "{example}: --watch stopped by itself"
            );
            let _ = child.kill();
            child.wait_with_output().unwrap()
        } else {
            sh.output().expect("run bash")
        };
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if !cmd.contains("--watch") {
            assert!(
                out.status.success(),
                "{example}\n(run as {cmd})\nexit {:?}\nstdout: {stdout}\nstderr: {stderr}",
                out.status.code()
            );
        }
        check_data(example, &cmd, &stdout, work);
        ran += 1;
    }
    assert_eq!(
        ran + not_run,
        cmds.len(),
        "every example but capture and replay ran"
    );
    assert!(ran > 10, "{ran} examples ran");
}

/// What "returns data" means for each kind of example.
fn check_data(example: &str, cmd: &str, stdout: &str, work: &Path) {
    let what = format!("{example}\nstdout: {stdout}");
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let after = |flag: &str| {
        words
            .iter()
            .position(|w| *w == flag)
            .and_then(|i| words.get(i + 1))
            .map(|w| w.trim_matches('\''))
    };
    let packets_in = |file: &str| decode_file(&work.join(file)).whole(file).packets.len();
    match words[1] {
        "synth" => {
            let file = after("-w").expect("synth -w");
            assert!(packets_in(file) > 1000, "{what}");
        }
        "query" if cmd.contains("--count") && cmd.contains("--json") => {
            let v: serde_json::Value = serde_json::from_str(stdout).expect("one JSON document");
            assert!(v["packets"].as_u64().unwrap() > 0, "{what}");
        }
        "query" if cmd.contains("--count") => {
            assert!(parse_packets_bytes(stdout).0 > 0, "{what}");
        }
        "query" if cmd.contains("--explain") => {
            assert!(
                parse_read_of(stdout.lines().find(|l| l.starts_with("plan:")).unwrap()).1 > 0,
                "{what}"
            );
        }
        "query" if after("-w") == Some("-") => {
            // Piped into tshark: its lines are the packets.
            assert!(stdout.lines().count() > 10, "{what}");
        }
        "query" => {
            let file = after("-w").expect("query -w");
            assert!(packets_in(file) > 0, "{what}");
        }
        "import" => {
            let n: u64 = stdout
                .lines()
                .find_map(|l| l.strip_prefix("stored "))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            assert!(n > 0, "{what}");
        }
        "flows" => assert!(stdout.lines().count() >= 2, "a header and flows: {what}"),
        "man" => {
            let dir = after("--dir").unwrap();
            assert!(Path::new(dir).join("capsule.1").is_file(), "{what}");
        }
        "triage" => {
            let dir = work.join(after("-o").expect("triage -o"));
            let f: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.join("findings.json")).unwrap()).unwrap();
            assert!(dir.join("report.html").is_file(), "{what}");
            assert!(!f["findings"].as_array().unwrap().is_empty(), "{what}");
        }
        "token" => assert_eq!(stdout.trim().len(), 64, "a 32-byte token in hex: {what}"),
        "completions" => {
            let file = cmd.rsplit('>').next().unwrap().trim();
            assert!(std::fs::metadata(file).unwrap().len() > 1000, "{what}");
        }
        _ => assert!(!stdout.trim().is_empty(), "{what}"),
    }
}
