//! `capsule triage` (issue 13) on synth's scenario: every finding's evidence pcap opens in
//! `tshark` and `capinfos` with the packet count and SHA-256 `findings.json` states (checked
//! with `sha256sum`), report.txt is printed unless `--quiet`, and report.html, rendered by a
//! real headless Chromium with every host name unresolvable, holds the findings and an
//! `<svg>` per chart, names no URL, and makes a readable screenshot (written beside the
//! test's store as `triage-report.png`).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

struct Fixture {
    dir: PathBuf,
    store: PathBuf,
    config: PathBuf,
    truth: Value,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("triage");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pcap = dir.join("synth.pcap");
        let truth_path = dir.join("truth.json");
        synth(&pcap, &truth_path, 1, "10s", "100M", None);
        let truth: Value = serde_json::from_slice(&std::fs::read(&truth_path).unwrap()).unwrap();
        let store = dir.join("store");
        import_ok(&store, &["--segment-size", "8M"], &[p(&pcap)]);
        let facts = &truth["facts"];
        let gpu: Vec<String> = facts["gpu_nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| format!("\"{}\"", h.as_str().unwrap()))
            .collect();
        let config = dir.join("capsule.toml");
        std::fs::write(
            &config,
            format!(
                "[groups]\nvoice = [\"{}\"]\ngpu = [{}]\nstorage = [\"{}\"]\n\
                 model-store = [\"{}\"]\n\n[dscp]\nef = [\"voice\"]\n\n\
                 [egress]\nmodel-store = [\"storage\"]\ngpu = [\"storage\"]\n\n\
                 [work_hours]\ndays = \"mon-fri\"\nstart = \"08:00\"\nend = \"19:00\"\n\
                 timezone = \"UTC\"\n\n\
                 [alerts]\negress_bytes = \"1M\"\negress_window = \"10s\"\n\
                 off_hours_bytes = \"1M\"\nstraggler_groups = [\"gpu\"]\n\
                 straggler_interval = \"1s\"\nstraggler_ratio = 0.75\n",
                facts["ef_allow_list"][0].as_str().unwrap(),
                gpu.join(", "),
                facts["storage_subnet"].as_str().unwrap(),
                facts["exfil"]["src"].as_str().unwrap(),
            ),
        )
        .unwrap();
        Fixture {
            dir,
            store,
            config,
            truth,
        }
    })
}

/// Runs `capsule triage -o DIR` (with `extra`) and returns its output and findings.json.
fn triage(f: &Fixture, name: &str, extra: &[&str]) -> (PathBuf, String, Value) {
    let out = f.dir.join(name);
    let _ = std::fs::remove_dir_all(&out);
    let mut cmd = capsule();
    cmd.args([
        "triage",
        "--store",
        p(&f.store),
        "--config",
        p(&f.config),
        "-o",
        p(&out),
    ])
    .args(extra);
    let o = run_ok(&mut cmd);
    let doc: Value =
        serde_json::from_slice(&std::fs::read(out.join("findings.json")).unwrap()).unwrap();
    (out, stdout_str(&o), doc)
}

fn report() -> &'static (PathBuf, String, Value) {
    static R: OnceLock<(PathBuf, String, Value)> = OnceLock::new();
    R.get_or_init(|| triage(fixture(), "report", &[]))
}

#[test]
fn every_evidence_pcap_opens_with_the_stated_packets_and_sha256() {
    let f = fixture();
    let (dir, _, doc) = report();
    let findings = doc["findings"].as_array().unwrap();
    let kinds: BTreeSet<&str> = findings
        .iter()
        .map(|x| x["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["dscp", "egress", "off_hours", "straggler"])
    );
    assert_eq!(findings.len(), 6);
    need_tool("tshark");
    need_tool("sha256sum");
    for x in findings {
        assert!(x["hosts"].as_array().is_some_and(|h| !h.is_empty()), "{x}");
        let ev = &x["evidence"];
        let rel = ev["pcap"].as_str().unwrap();
        assert!(
            !rel.starts_with('/'),
            "relative to the report directory: {rel}"
        );
        let file = dir.join(rel);
        let packets = ev["packets"].as_u64().unwrap();
        assert!(packets > 0, "{x}");
        assert_eq!(capinfos_packets(&file), packets, "{rel}");
        let info = capinfos(&file);
        assert!(capinfo(&info, "File type").contains("pcapng"), "{info:?}");
        // tshark reads every packet without an error.
        let out = run_ok(Command::new("tshark").args([
            "-r",
            p(&file),
            "-T",
            "fields",
            "-e",
            "frame.number",
        ]));
        assert_eq!(stdout_str(&out).lines().count() as u64, packets, "{rel}");
        let sum = run_ok(Command::new("sha256sum").arg(&file));
        let sum = stdout_str(&sum);
        assert_eq!(
            sum.split_whitespace().next().unwrap(),
            ev["sha256"],
            "{rel}"
        );
        assert_eq!(
            std::fs::metadata(&file).unwrap().len(),
            ev["bytes"].as_u64().unwrap()
        );
    }
    // The exfil's evidence holds exactly the truth's packets of its upload.
    let ex = &f.truth["facts"]["exfil"];
    let want: u64 = f.truth["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["src"] == ex["src"] && t["dst"] == ex["dst"])
        .map(|t| t["packets"].as_u64().unwrap())
        .sum();
    let e = findings.iter().find(|x| x["kind"] == "egress").unwrap();
    assert_eq!(e["evidence"]["packets"].as_u64().unwrap(), want);
    assert_eq!(e["flows"].as_array().unwrap().len(), 1);
}

#[test]
fn report_txt_is_printed_unless_quiet() {
    let f = fixture();
    let (dir, stdout, doc) = report();
    let txt = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert_eq!(stdout, &txt);
    for x in doc["findings"].as_array().unwrap() {
        assert!(
            txt.contains(x["evidence"]["pcap"].as_str().unwrap()),
            "{txt}"
        );
        assert!(txt.contains(x["query"].as_str().unwrap()), "{txt}");
        assert!(txt.contains(x["evidence"]["sha256"].as_str().unwrap()));
    }
    assert!(txt.contains("note: capture sees only"), "{txt}");
    let (_, quiet, _) = triage(f, "quiet", &["--quiet"]);
    assert_eq!(quiet, "");
}

#[test]
fn report_html_renders_in_chromium_with_the_findings_and_a_chart_each_offline() {
    let (dir, _, doc) = report();
    let html_path = dir.join("report.html");
    let html = std::fs::read_to_string(&html_path).unwrap();
    // Self-contained: no URL of any scheme a browser would fetch, no external resource.
    for bad in ["http://", "https://", "src=", "<link", "@import", "url("] {
        assert!(!html.contains(bad), "report.html has {bad:?}");
    }
    assert!(html.matches("<svg").count() >= 5, "a chart per section");
    need_tool("chromium");
    let url = format!("file://{}", p(&html_path));
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--host-resolver-rules=MAP * ~NOTFOUND",
    ];
    let out = run_ok(Command::new("chromium").args(common).args([
        "--enable-logging=stderr",
        "--v=0",
        "--dump-dom",
        &url,
    ]));
    let dom = stdout_str(&out);
    // No console message (an error in the page would be one) and no failed load.
    let log = stderr_str(&out);
    assert!(!log.contains("CONSOLE"), "{log}");
    assert!(
        !log.contains("ERR_NAME_NOT_RESOLVED"),
        "a request went out: {log}"
    );
    for id in [
        "findings",
        "alerts",
        "dscp",
        "top",
        "matrix",
        "tcp",
        "stragglers",
        "limits",
    ] {
        assert!(
            dom.contains(&format!("id=\"{id}\"")),
            "section {id} missing"
        );
    }
    assert!(dom.matches("<svg").count() >= 5);
    for x in doc["findings"].as_array().unwrap() {
        let pcap = x["evidence"]["pcap"].as_str().unwrap();
        assert!(dom.contains(&format!("href=\"{pcap}\"")), "{pcap}");
        assert!(dom.contains(x["evidence"]["sha256"].as_str().unwrap()));
    }
    assert!(dom.contains("retention horizon"));
    // The charts hold drawn marks (not empty SVGs).
    assert!(dom.matches("<rect").count() > 50);
    // A screenshot, as a test artefact to look at.
    let shot = fixture().dir.join("triage-report.png");
    let _ = std::fs::remove_file(&shot);
    run_ok(Command::new("chromium").args(common).args([
        "--window-size=1000,4000",
        &format!("--screenshot={}", p(&shot)),
        &url,
    ]));
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert!(
        png.len() > 50_000,
        "a blank page is small: {} bytes",
        png.len()
    );
}

/// `tshark`'s (time, length) of every packet of `file`.
fn frames(file: &Path) -> Vec<String> {
    let out = run_ok(Command::new("tshark").args([
        "-r",
        p(file),
        "-T",
        "fields",
        "-e",
        "frame.time_epoch",
        "-e",
        "frame.len",
    ]));
    stdout_str(&out).lines().map(str::to_string).collect()
}

#[test]
fn an_evidence_cap_keeps_the_first_packets_and_says_so() {
    let f = fixture();
    let (full_dir, _, full) = report();
    let (dir, stdout, doc) = triage(f, "capped", &["--evidence-max", "200K"]);
    need_tool("tshark");
    let mut cut = 0;
    for (x, whole) in doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .zip(full["findings"].as_array().unwrap())
    {
        let ev = &x["evidence"];
        let file = dir.join(ev["pcap"].as_str().unwrap());
        let packets = ev["packets"].as_u64().unwrap();
        // capinfos agrees with the stated stored count, the file is within the cap.
        assert_eq!(capinfos_packets(&file), packets, "{x}");
        assert_eq!(ev["max_bytes"], 200 * 1024);
        let size = std::fs::metadata(&file).unwrap().len();
        assert!(size <= 200 * 1024, "{size}");
        assert_eq!(ev["bytes"], size);
        // The finding's own counts are those of the whole export.
        let we = &whole["evidence"];
        assert_eq!(ev["finding_packets"], we["packets"], "{x}");
        assert_eq!(ev["finding_captured_bytes"], we["captured_bytes"], "{x}");
        if ev["truncated"] == true {
            cut += 1;
            assert!(packets < we["packets"].as_u64().unwrap(), "{x}");
            // The first packets of the finding, in order.
            let all = frames(&full_dir.join(we["pcap"].as_str().unwrap()));
            let got = frames(&file);
            assert_eq!(got.len() as u64, packets);
            assert_eq!(got[..], all[..got.len()]);
            // The next one would not have fit.
            let next_len: u64 = all[got.len()].split('\t').nth(1).unwrap().parse().unwrap();
            assert!(size + next_len + 35 > 200 * 1024, "{size} + {next_len}");
        } else {
            assert_eq!(ev["truncated"], false, "{x}");
            assert_eq!(ev["packets"], we["packets"], "{x}");
            assert_eq!(ev["sha256"], we["sha256"], "an uncut file is the same file");
        }
    }
    // The exfil's upload (tens of MB) is cut; the reports state it.
    let e = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["kind"] == "egress")
        .unwrap();
    assert_eq!(e["evidence"]["truncated"], true);
    assert!(cut >= 1);
    let cuts = stdout
        .matches("evidence cut at the cap of 204800 bytes")
        .count();
    assert_eq!(cuts, cut, "{stdout}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(
        html.matches("<p class=\"cut\">evidence cut at").count(),
        cut
    );
    for line in stdout.lines() {
        if line.contains("cut at") || line.contains("the command gives them all") {
            assert!(line.chars().count() <= 80, "{line}");
        }
    }
    // The config's `evidence_max` is the default the flag overrides.
    let text = std::fs::read_to_string(&f.config).unwrap();
    let cfg = f.dir.join("capped.toml");
    std::fs::write(
        &cfg,
        text.replace("[alerts]\n", "[alerts]\nevidence_max = \"100K\"\n"),
    )
    .unwrap();
    let out = f.dir.join("capped-config");
    let _ = std::fs::remove_dir_all(&out);
    run_ok(capsule().args([
        "triage",
        "--store",
        p(&f.store),
        "--config",
        p(&cfg),
        "-o",
        p(&out),
        "--quiet",
    ]));
    let doc: Value =
        serde_json::from_slice(&std::fs::read(out.join("findings.json")).unwrap()).unwrap();
    for x in doc["findings"].as_array().unwrap() {
        assert_eq!(x["evidence"]["max_bytes"], 100 * 1024, "{x}");
        let file = out.join(x["evidence"]["pcap"].as_str().unwrap());
        assert!(std::fs::metadata(&file).unwrap().len() <= 100 * 1024);
        assert_eq!(
            capinfos_packets(&file),
            x["evidence"]["packets"].as_u64().unwrap()
        );
    }
}

/// Every file under `dir`, relative to it, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn a_rerun_into_the_same_directory_leaves_only_its_own_report() {
    let f = fixture();
    let out = f.dir.join("rerun");
    let _ = std::fs::remove_dir_all(&out);
    let run = |extra: &[&str]| {
        let mut cmd = capsule();
        cmd.args(["triage", "--store", p(&f.store), "--config", p(&f.config)])
            .args(["-o", p(&out), "--quiet"])
            .args(extra);
        run_ok(&mut cmd);
        let doc: Value =
            serde_json::from_slice(&std::fs::read(out.join("findings.json")).unwrap()).unwrap();
        doc
    };
    let first = run(&[]);
    let first_files = tree(&out);
    // A second run over a shorter window, with fewer findings.
    let from = first["from_ns"].as_u64().unwrap();
    let second = run(&["--from", &epoch(from), "--to", "+1s"]);
    let n = second["findings"].as_array().unwrap().len();
    assert!(n < first["findings"].as_array().unwrap().len());
    let mut want: BTreeSet<String> = ["findings.json", "report.html", "report.txt"]
        .into_iter()
        .map(String::from)
        .collect();
    want.insert("manifest.json".into());
    for x in second["findings"].as_array().unwrap() {
        want.insert(x["evidence"]["pcap"].as_str().unwrap().to_string());
    }
    let got: BTreeSet<String> = tree(&out).into_iter().collect();
    assert_eq!(got, want, "after a first run of {first_files:?}");
    // Nothing beside the directory either (no staging directory left over).
    let siblings: Vec<String> = std::fs::read_dir(&f.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("rerun"))
        .collect();
    assert_eq!(siblings, ["rerun"]);
}

#[test]
fn triage_refuses_a_directory_holding_files_it_did_not_write() {
    let f = fixture();
    let out = f.dir.join("foreign");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let mut cmd = capsule();
    cmd.args(["triage", "--store", p(&f.store), "--config", p(&f.config)])
        .args(["-o", p(&out), "--quiet"]);
    let o = run(&mut cmd);
    assert_eq!(o.status.code(), Some(2), "{}", stderr_str(&o));
    assert!(stderr_str(&o).contains("notes.txt"), "{}", stderr_str(&o));
    assert_eq!(tree(&out), ["notes.txt"]);
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "mine"
    );
    // A file added beside a previous report is kept too: the run is refused.
    std::fs::remove_file(out.join("notes.txt")).unwrap();
    run_ok(&mut cmd);
    let report = tree(&out);
    std::fs::write(out.join("evidence").join("mine.pcap"), "x").unwrap();
    let o = run(&mut cmd);
    assert_eq!(o.status.code(), Some(2), "{}", stderr_str(&o));
    assert!(stderr_str(&o).contains("mine.pcap"), "{}", stderr_str(&o));
    let mut want = report.clone();
    want.push("evidence/mine.pcap".into());
    want.sort();
    assert_eq!(tree(&out), want);
}

/// README's `synth --duration 10s --rate 100M` with docs/examples/capsule.toml (the demo's
/// config): every fault the matrix and the DSCP chart show red is a finding, the exfil too.
#[test]
fn the_example_config_finds_the_planted_faults_of_the_readme_traffic() {
    let f = fixture();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/capsule.toml");
    let out = f.dir.join("example");
    let _ = std::fs::remove_dir_all(&out);
    run_ok(
        capsule()
            .args(["triage", "--store", p(&f.store), "--config", p(&config)])
            .args(["-o", p(&out), "--quiet"]),
    );
    let doc: Value =
        serde_json::from_slice(&std::fs::read(out.join("findings.json")).unwrap()).unwrap();
    let facts = &f.truth["facts"];
    let ex = &facts["exfil"];
    let findings = doc["findings"].as_array().unwrap();
    for kind in ["egress", "off_hours"] {
        let x = findings.iter().find(|x| x["kind"] == kind);
        let x = x.unwrap_or_else(|| panic!("no {kind} finding of the exfil: {doc:#}"));
        assert_eq!(x["hosts"][0], ex["src"], "{x}");
        assert_eq!(x["hosts"][1], ex["dst"], "{x}");
    }
    let senders: BTreeSet<&str> = findings
        .iter()
        .filter(|x| x["kind"] == "dscp")
        .map(|x| x["hosts"][0].as_str().unwrap())
        .collect();
    let rogues: BTreeSet<&str> = facts["rogue_ef_hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert_eq!(senders, rogues);
}

/// A red matrix cell under every alert threshold is not silent: the report lists its flows
/// as having no finding, with their commands.
#[test]
fn a_flagged_cell_under_the_thresholds_is_listed_as_having_no_finding() {
    let f = fixture();
    let text = std::fs::read_to_string(&f.config).unwrap();
    let cfg = f.dir.join("high.toml");
    let high = text
        .replace("egress_bytes = \"1M\"", "egress_bytes = \"1G\"")
        .replace("off_hours_bytes = \"1M\"", "off_hours_bytes = \"1G\"");
    std::fs::write(&cfg, high).unwrap();
    let out = f.dir.join("high");
    let _ = std::fs::remove_dir_all(&out);
    run_ok(
        capsule()
            .args(["triage", "--store", p(&f.store), "--config", p(&cfg)])
            .args(["-o", p(&out), "--quiet"]),
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let ex = &f.truth["facts"]["exfil"];
    let (_, rest) = html
        .split_once("<p class=\"unalerted\">")
        .expect("no list of red flows without a finding");
    let list = &rest[..rest.find("</ul>").unwrap()];
    assert!(list.contains(ex["dst"].as_str().unwrap()), "{list}");
    assert!(list.contains("capsule query"), "{list}");
    // With the fixture's thresholds the exfil is a finding, and the list is not there.
    let (dir, _, _) = report();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(!html.contains("class=\"unalerted\""));
}

/// The text of the element with `id="ID"` up to the next `<h2`.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no section {id}"));
    let rest = &html[at..];
    &rest[..rest[1..].find("<h2").map_or(rest.len(), |e| e + 1)]
}

#[test]
fn report_html_opens_with_a_summary_and_reads_in_milliseconds() {
    let (dir, _, doc) = report();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    // The summary comes first: counts by severity, window, store, version, when made.
    let summary = section(&html, "summary");
    assert!(
        html.find("id=\"summary\"").unwrap() < html.find("id=\"findings\"").unwrap(),
        "the summary is at the top"
    );
    let findings = doc["findings"].as_array().unwrap();
    for sev in ["high", "medium", "low"] {
        let n = findings.iter().filter(|x| x["severity"] == sev).count();
        assert!(
            summary.contains(&format!("data-severity=\"{sev}\">{n}<")),
            "{sev}: {n} in {summary}"
        );
    }
    assert!(
        summary.contains(doc["store"].as_str().unwrap()),
        "{summary}"
    );
    assert!(summary.contains(&format!("capsule {}", env!("CARGO_PKG_VERSION"))));
    assert!(summary.contains("generated"), "{summary}");
    let from = doc["from"].as_str().unwrap();
    assert!(
        summary.contains(&from[..23]),
        "the window to the ms: {summary}"
    );
    // Times in tables to the millisecond, the full nanoseconds on hover.
    let alerts = section(&html, "alerts");
    let ns = |s: &str| {
        s.split(|c: char| !c.is_ascii_digit() && c != '.')
            .any(|w| w.split_once('.').is_some_and(|(_, f)| f.len() == 9))
    };
    let cells: Vec<&str> = alerts
        .split("<td")
        .skip(1)
        .map(|c| &c[c.find('>').unwrap() + 1..c.find("</td>").unwrap()])
        .collect();
    assert!(!cells.is_empty());
    for c in &cells {
        let shown = c.split("title=").next().unwrap();
        let text: String = {
            let mut t = String::new();
            let mut tag = false;
            for ch in c.chars() {
                match ch {
                    '<' => tag = true,
                    '>' => tag = false,
                    ch if !tag => t.push(ch),
                    _ => {}
                }
            }
            t
        };
        assert!(!ns(&text), "a table cell in ns: {c} ({shown})");
    }
    for x in findings {
        let first = x["first"].as_str().unwrap();
        assert!(alerts.contains(&format!("title=\"{first}\"")), "{first}");
        assert!(alerts.contains(&first[..23]), "{first}");
    }
    // Axis labels say a unit once.
    for unit in ["B", "kB", "MB", "GB"] {
        assert!(
            !html.contains(&format!(" {unit} bytes<")),
            "doubled unit {unit}"
        );
    }
    // The TCP chart's scale says what share of the data segments its tallest bar is.
    let tcp = section(&html, "tcp");
    assert!(tcp.contains("% of the"), "{tcp}");
    assert!(tcp.contains("data segments"), "{tcp}");
}
