//! The web console of `capsule serve` in a real browser: headless Chromium driven over
//! WebDriver (chromedriver, started here on loopback) by fantoccini, against a server of a
//! synthetic store with a config (groups, policy, alert rules).
//!
//! The walk (one server, one browser session): sign in with a wrong token then the right
//! one; find the rogue EF senders of the synth truth file in the sessions; see a bad
//! filter's caret; read the selection's size before its download and download it by its
//! link, with its progress, comparing the saved file with `capsule query`; the timeline of
//! the whole store in millisecond bins, a bin zoomed into down to 1 ms, a window dragged;
//! the analytics (the rogue senders among the DSCP violations, top senders as `capsule
//! top` ranks them); the alerts by cause, an evidence download compared with `capsule
//! query`; the status; sign-out. A second test watches the status view of a store a live
//! capture is writing (root: a veth pair between two namespaces made here).
//!
//! Every page is checked for requests that leave the origin and for errors in the browser's
//! console, and a screenshot of each view is kept under target/console-shots/. Plain HTTP
//! checks (curl) prove that no console URL gives data without a session.
//!
//! Without chromium and chromedriver on the machine (scripts/deps.sh installs both) the
//! browser part is skipped with a loud message naming what is missing; set
//! CAPSULE_REQUIRE_BROWSER=1 to make that a failure.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::*;
use common::serve::*;
use common::*;
use fantoccini::actions::{InputSource, MouseActions, PointerAction, MOUSE_BUTTON_LEFT};
use fantoccini::{Client, Locator};

/// The window and filter of the walk: the rogue EF flows of seed 7 are all in it.
const FROM: &str = "2026-11-30T02:00:00.5Z";
const TO: &str = "2026-11-30T02:00:01.5Z";
const FILTER: &str = "dscp ef";
const BAD_FILTER: &str = "dscp ef and hots 10.0.0.1";

/// A running chromedriver, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver and the Chromium it started are one process group of their own: all
        // of it goes, also when a panic left the browser session open.
        signal_group(self.child.id(), Signal::KILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Finds `tool` on PATH.
fn on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// chromium and chromedriver, or why the browser test cannot run here.
fn browser_tools() -> Result<(PathBuf, PathBuf), String> {
    let chromium = on_path("chromium").ok_or("no `chromium` on PATH")?;
    let driver = on_path("chromedriver")
        .ok_or("no `chromedriver` on PATH (Debian package chromium-driver)")?;
    Ok((chromium, driver))
}

/// Starts chromedriver on a free loopback port and waits until it listens.
fn start_driver(bin: &Path, dir: &Path) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(dir.join("chromedriver.log")).unwrap();
    let child = Command::new(bin)
        .process_group(0)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start chromedriver");
    let d = Driver { child, port };
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "chromedriver did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d
}

/// A WebDriver session of headless Chromium with a new empty profile, accepting the test's
/// self-signed certificate, its console log kept, its downloads saved in `downloads`.
async fn browser(d: &Driver, chromium: &Path, profile: &Path, downloads: &Path) -> Client {
    let caps = serde_json::json!({
        "acceptInsecureCerts": true,
        "goog:loggingPrefs": {"browser": "ALL"},
        "goog:chromeOptions": {
            "binary": p(chromium),
            "prefs": {
                "download.default_directory": p(downloads),
                "download.prompt_for_download": false,
            },
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--window-size=1280,900",
                format!("--user-data-dir={}", p(profile)),
            ],
        },
    });
    let caps = caps.as_object().unwrap().clone();
    let conn = hyper_util::client::legacy::connect::HttpConnector::new();
    fantoccini::ClientBuilder::new(conn)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", d.port))
        .await
        .expect("a WebDriver session of chromium")
}

/// The browser's console messages since the last call (chromedriver's log endpoint).
fn console_log(d: &Driver, session: &str) -> Vec<serde_json::Value> {
    let body = r#"{"type":"browser"}"#;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    write!(
        s,
        "POST /session/{session}/se/log HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The head, then exactly Content-Length bytes (chromedriver may keep the connection).
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s);
    let mut len = 0;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "chromedriver's log answer is not JSON ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    v["value"].as_array().cloned().unwrap_or_default()
}

/// What one curl got: the status, the headers (lower-cased names) and the body.
struct Got {
    status: u16,
    headers: String,
    body: Vec<u8>,
}

fn curl(s: &Server, path: &str, extra: &[&str]) -> Got {
    let (h, b) = (s.dir.join("curl.h"), s.dir.join("curl.b"));
    let o = run(Command::new(need_tool("curl"))
        .args(["-sS", "--cacert", p(&s.ca), "-D", p(&h), "-o", p(&b)])
        .args(["-w", "%{http_code}"])
        .args(extra)
        .arg(s.url(path)));
    Got {
        status: stdout_str(&o).trim().parse().unwrap_or(0),
        headers: std::fs::read_to_string(&h)
            .unwrap_or_default()
            .to_ascii_lowercase(),
        body: std::fs::read(&b).unwrap_or_default(),
    }
}

/// Every console URL without a valid session: a redirect to sign-in (GET) or 401 (POST),
/// never a byte of data.
fn no_data_without_a_session(s: &Server, rogue: &[String], token: &str) {
    let paths = [
        "/",
        "/sessions",
        "/sessions?filter=dscp%20ef",
        "/timeline",
        "/timeline?from=2026-11-30T02%3A00%3A00Z&to=2026-11-30T02%3A00%3A00.020Z",
        "/analytics",
        "/analytics?key=src",
        "/alerts",
        "/status",
        "/selection",
        "/selection?filter=dscp%20ef",
        "/download?format=pcapng",
        "/download?format=pcapng&filter=dscp%20ef",
        "/static/console.js",
    ];
    for cookie in [None, Some("capsule_session=00ff00ff")] {
        let extra: Vec<&str> = cookie.map(|c| vec!["-b", c]).unwrap_or_default();
        for path in paths {
            let g = curl(s, path, &extra);
            assert_eq!(g.status, 303, "{path} with {cookie:?}: {}", g.headers);
            assert!(
                g.headers.contains("\nlocation: /login?next="),
                "{path}: redirected to sign-in: {}",
                g.headers
            );
            assert!(g.body.is_empty(), "{path}: no body without a session");
        }
        let mut post = extra.clone();
        post.extend(["--data", "csrf=x"]);
        let g = curl(s, "/logout", &post);
        assert_eq!(g.status, 401, "POST /logout without a session");
        for r in rogue {
            assert!(!String::from_utf8_lossy(&g.body).contains(r.as_str()));
        }
    }
    // A valid token posted from elsewhere (no Origin, no CSRF cookie) opens no session.
    let g = curl(
        s,
        "/login",
        &["--data", &format!("token={token}&csrf=abc&next=/sessions")],
    );
    assert_eq!(g.status, 403, "a cross-site sign-in is refused");
    assert!(!g.headers.contains("capsule_session="), "{}", g.headers);
    // The sign-in page and its stylesheet are all an anonymous client gets.
    let g = curl(s, "/login", &[]);
    assert_eq!(g.status, 200);
    assert!(g
        .headers
        .contains("content-security-policy: default-src 'none'"));
    assert!(g.headers.contains("httponly; secure; samesite=strict"));
}

/// The names of every resource the page loaded (the Resource Timing API) and its URL.
async fn resources(c: &Client) -> Vec<String> {
    let v = c
        .execute(
            "return [location.href].concat(performance.getEntriesByType('resource')\
             .map(function (e) { return e.name; }));",
            vec![],
        )
        .await
        .unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// Keeps a screenshot of the page as `name`.png under target/console-shots/.
async fn shot(c: &Client, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-shots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = c.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Keeps a screenshot of the element `id` (all of it, scrolled into view) as `name`.png
/// under target/console-shots/.
async fn shot_of(c: &Client, id: &str, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-shots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = testid(c, id).await.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

async fn testid(c: &Client, id: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(&format!("[data-testid=\"{id}\"]")))
        .await
        .unwrap_or_else(|e| panic!("no [data-testid={id}] on the page: {e}"))
}

/// The path and query of the page.
async fn here(c: &Client) -> String {
    let u = c.current_url().await.unwrap();
    match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_string(),
    }
}

/// Types `text` into the input `id` in place of what it holds.
async fn fill(c: &Client, id: &str, text: &str) {
    let e = testid(c, id).await;
    e.clear().await.unwrap();
    e.send_keys(text).await.unwrap();
}

/// The rows of the flows table: their text.
async fn rows(c: &Client) -> Vec<String> {
    testid(c, "flows-table").await;
    let mut out = Vec::new();
    for r in c
        .find_all(Locator::Css("[data-testid=\"flows-table\"] tbody tr"))
        .await
        .unwrap()
    {
        out.push(r.text().await.unwrap());
    }
    out
}

/// Decodes a URL query component (`%XX`, `+` for a space).
fn unenc(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                i += 2;
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// The value of `k` in the query of `url` (a path and query), decoded.
fn arg(url: &str, k: &str) -> String {
    url.split(['?', '&'])
        .find_map(|kv| kv.strip_prefix(&format!("{k}=")[..]))
        .map(unenc)
        .unwrap_or_else(|| panic!("no {k} in {url}"))
}

/// Polls `f` every 100 ms until it gives a value, at most `secs` seconds.
async fn until<T, F>(secs: u64, what: &str, mut f: impl FnMut() -> F) -> T
where
    F: std::future::Future<Output = Option<T>>,
{
    let t0 = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "waited {secs} s for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Clicks `e`, which loads a new page, and waits until that page has replaced this one:
/// elements found before then may belong to the page being left and go stale under the
/// reader (a StaleElementReference seen in CI right after a form submit).
async fn follow(c: &Client, e: fantoccini::elements::Element) {
    c.execute("window.__capsule_left = true", vec![])
        .await
        .unwrap();
    e.click().await.unwrap();
    until(20, "the next page", || async {
        c.execute(
            "return window.__capsule_left === undefined && document.readyState === 'complete'",
            vec![],
        )
        .await
        .ok()?
        .as_bool()
        .filter(|b| *b)
    })
    .await;
}

/// The attribute `name` of the element `id`, if both are there.
async fn attr(c: &Client, id: &str, name: &str) -> Option<String> {
    let e = c
        .find(Locator::Css(&format!("[data-testid=\"{id}\"]")))
        .await
        .ok()?;
    e.attr(name).await.ok().flatten()
}

/// The text of the element `id`, if it is there.
async fn text_of(c: &Client, id: &str) -> Option<String> {
    let e = c
        .find(Locator::Css(&format!("[data-testid=\"{id}\"]")))
        .await
        .ok()?;
    e.text().await.ok()
}

/// The file `name` once the browser has saved it whole in `dir`.
fn downloaded(dir: &Path, name: &str) -> Vec<u8> {
    let path = dir.join(name);
    let t0 = Instant::now();
    loop {
        let partial = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with(".crdownload"))
            })
            .unwrap_or(false);
        if path.exists() && !partial {
            return std::fs::read(&path).unwrap();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the browser saved no {} in {}",
            name,
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Bytes `url` gives to the page's own `fetch` (with the session's cookie).
async fn fetched(c: &Client, url: &str) -> Vec<u8> {
    let hex = c
        .execute_async(
            "var done = arguments[arguments.length - 1];\
             fetch(arguments[0]).then(function (r) { return r.arrayBuffer(); })\
             .then(function (b) { done(Array.from(new Uint8Array(b), function (x) {\
               return ('0' + x.toString(16)).slice(-2); }).join('')); });",
            vec![serde_json::json!(url)],
        )
        .await
        .unwrap();
    let hex = hex.as_str().unwrap();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// What the walk saw of a page: the resources it loaded and the browser's console.
async fn collect(
    c: &Client,
    d: &Driver,
    session: &str,
    seen: &mut Vec<String>,
    log: &mut Vec<serde_json::Value>,
) {
    seen.extend(resources(c).await);
    log.extend(console_log(d, session));
}

/// chromium and chromedriver, or None after saying loudly why the browser part is skipped
/// (a failure with CAPSULE_REQUIRE_BROWSER).
fn tools_or_skip() -> Option<(PathBuf, PathBuf)> {
    match browser_tools() {
        Ok(t) => Some(t),
        Err(why) => {
            let m =
                format!("SKIPPED the browser part of the console test: {why}; run scripts/deps.sh");
            if std::env::var_os("CAPSULE_REQUIRE_BROWSER").is_some() {
                panic!("{m} (CAPSULE_REQUIRE_BROWSER is set)");
            }
            eprintln!("\n{}\n!!! {m}\n{}\n", "!".repeat(80), "!".repeat(80));
            None
        }
    }
}

/// Signs in with `token` from the sign-in page the browser is on.
async fn sign_in(c: &Client, token: &str) {
    fill(c, "login-token", token).await;
    follow(c, testid(c, "login-submit").await).await;
}

/// The packets and captured bytes `capsule query --count` gives for `args`.
fn count(store: &Path, args: &[&str]) -> (u64, u64) {
    let o = run_ok(
        capsule()
            .args(["query", "--store", p(store), "--count", "--json"])
            .args(args),
    );
    let v: serde_json::Value = serde_json::from_str(stdout_str(&o).trim()).unwrap();
    (v["packets"].as_u64().unwrap(), v["bytes"].as_u64().unwrap())
}

/// The config of the walk: synth's groups, its DSCP and egress policy, and `[alerts]`
/// thresholds sized for 2 s of traffic at 20 Mbit/s.
fn config(dir: &Path, truth: &serde_json::Value) -> PathBuf {
    let f = &truth["facts"];
    let gpu: Vec<String> = f["gpu_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("\"{}\"", h.as_str().unwrap()))
        .collect();
    let path = dir.join("capsule.toml");
    std::fs::write(
        &path,
        format!(
            "[groups]\nvoice = [\"{}\"]\ngpu = [{}]\nstorage = [\"{}\"]\n\
             ml-bulk = [\"10.30.0.0/23\"]\nmodel-store = [\"{}\"]\n\n\
             [dscp]\nef = [\"voice\"]\n\n[egress]\nmodel-store = [\"storage\"]\n\n\
             [work_hours]\ndays = \"mon-fri\"\nstart = \"08:00\"\nend = \"19:00\"\n\
             timezone = \"UTC\"\n\n\
             [alerts]\negress_bytes = \"100k\"\negress_window = \"2s\"\n\
             off_hours_bytes = \"100k\"\nstraggler_groups = [\"gpu\"]\n\
             straggler_interval = \"1s\"\nstraggler_ratio = 0.75\n\
             straggler_min_bytes = \"10k\"\n",
            f["ef_allow_list"][0].as_str().unwrap(),
            gpu.join(", "),
            f["storage_subnet"].as_str().unwrap(),
            f["exfil"]["src"].as_str().unwrap(),
        ),
    )
    .unwrap();
    path
}

/// Nothing left the origin; nothing went wrong in the browser's console but the refusals
/// a walk asked for (the wrong token, the bad filter).
fn assert_clean(origin: &str, seen: &[String], log: &[serde_json::Value]) {
    for u in seen {
        assert!(u.starts_with(origin), "a request left the origin: {u}");
    }
    let unexpected: Vec<_> = log
        .iter()
        .filter(|e| {
            let m = e["message"].as_str().unwrap_or("");
            let asked = (m.contains("/login") && m.contains("401"))
                || (m.contains("/sessions") && m.contains("400"));
            e["level"] != "INFO" && !asked
        })
        .collect();
    assert!(unexpected.is_empty(), "browser console: {unexpected:#?}");
}

#[test]
fn the_console_in_a_browser_finds_the_rogue_senders_and_downloads_what_query_does() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let pcap = dir.join("in.pcap");
    synth(&pcap, &dir.join("truth.json"), 7, "2s", "20M", None);
    let store = dir.join("store");
    import_ok(&store, &[], &[p(&pcap)]);
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("truth.json")).unwrap()).unwrap();
    let rogue: Vec<String> = truth["facts"]["rogue_ef_hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_string())
        .collect();
    assert_eq!(rogue.len(), 3, "the truth file names the rogue senders");
    let cfg = config(dir, &truth);
    let tokens = dir.join("tokens");
    let token = add_token(&tokens, "alice");
    let s = start(dir, &store, &tokens, &["--config", p(&cfg)]);

    no_data_without_a_session(&s, &rogue, &token);

    let Some((chromium, driver_bin)) = tools_or_skip() else {
        return;
    };
    // What the CLI says of the same window and filter: the flows, the packets, the caret.
    let flows_out = run_ok(capsule().args([
        "flows",
        "--store",
        p(&store),
        "--json",
        "--from",
        FROM,
        "--to",
        TO,
        FILTER,
    ]));
    let flows: Vec<serde_json::Value> = stdout_str(&flows_out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        !flows.is_empty() && flows.len() <= 50,
        "{} flows",
        flows.len()
    );
    let window = ["--from", FROM, "--to", TO, FILTER];
    let want = query_ok(
        &store,
        &dir.join("want.pcapng"),
        &["--from", FROM, "--to", TO, "--format", "pcapng", FILTER],
    );
    let (want_packets, _) = count(&store, &window);
    let bad = run(capsule().args(["query", "--store", p(&store), "-w", "/dev/null", BAD_FILTER]));
    assert_eq!(bad.status.code(), Some(2));
    let cli_error = stderr_str(&bad);
    let cli_json = |args: &[&str]| -> serde_json::Value {
        let o = run_ok(capsule().args(args).args([
            "--store",
            p(&store),
            "--config",
            p(&cfg),
            "--json",
        ]));
        serde_json::from_str(stdout_str(&o).trim()).unwrap()
    };
    let top_src = cli_json(&["top", "--key", "src", "--limit", "20"]);
    let alerts = cli_json(&["alerts"]);

    let driver = start_driver(&driver_bin, dir);
    let profile = dir.join("profile");
    let downloads = dir.join("downloads");
    std::fs::create_dir_all(&profile).unwrap();
    std::fs::create_dir_all(&downloads).unwrap();
    let origin = format!("https://{}", s.addr);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = browser(&driver, &chromium, &profile, &downloads).await;
        let session = c.session_id().await.unwrap().expect("a session id");
        let mut log = Vec::new();
        let mut seen = Vec::new();

        // Sign-in: a wrong token stays on the form with the error; the right one opens the
        // page asked for.
        c.goto(&s.url("/sessions")).await.unwrap();
        assert!(
            here(&c).await.starts_with("/login?next="),
            "{}",
            here(&c).await
        );
        sign_in(&c, "not-a-token").await;
        let err = testid(&c, "login-error").await.text().await.unwrap();
        assert_eq!(err, "the token is not valid");
        shot(&c, "login-refused").await;
        collect(&c, &driver, &session, &mut seen, &mut log).await;
        sign_in(&c, &token).await;
        testid(&c, "view-sessions").await;
        assert_eq!(here(&c).await, "/sessions");
        let cookies = c.execute("return document.cookie", vec![]).await.unwrap();
        assert!(
            !cookies.as_str().unwrap().contains("capsule_session"),
            "the session cookie is HttpOnly: {cookies}"
        );

        // The rogue EF senders in the sessions of the window, one row per flow, in the
        // CLI's order (bytes).
        fill(&c, "from-input", FROM).await;
        fill(&c, "to-input", TO).await;
        fill(&c, "filter-input", FILTER).await;
        follow(&c, testid(&c, "filter-submit").await).await;
        let got = rows(&c).await;
        assert_eq!(got.len(), flows.len(), "{got:#?}");
        for (row, f) in got.iter().zip(&flows) {
            let (a, b) = (f["a"].as_str().unwrap(), f["b"].as_str().unwrap());
            assert!(
                row.contains(a) && row.contains(b),
                "{row:?} is the flow {a} {b}"
            );
        }
        for r in &rogue {
            assert!(
                got.iter().any(|row| row.contains(r.as_str())),
                "{r} in {got:#?}"
            );
        }

        // The selection's size before its download: the packets of `capsule query` and
        // the exact size of its file; then the download by its link, its progress shown,
        // saved by the browser: the bytes of `capsule query` of the same window and filter.
        let size = until(20, "the selection's size", || attr(&c, "download-size", "data-bytes"))
            .await;
        assert_eq!(size.parse::<usize>().unwrap(), want.len(), "the size shown before");
        let size_text = testid(&c, "download-size").await.text().await.unwrap();
        assert!(
            size_text.starts_with(&format!("{want_packets} packets, a pcapng file of ")),
            "{size_text}"
        );
        shot(&c, "sessions").await;
        testid(&c, "download-pcap").await.click().await.unwrap();
        let done = until(30, "the download's end", || {
            attr(&c, "download-status", "data-bytes")
        })
        .await;
        assert_eq!(done.parse::<usize>().unwrap(), want.len());
        let progress = c
            .execute(
                "var p = document.querySelector('[data-testid=download-progress]');\
                 return [p.hidden, p.value, p.max];",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(
            progress,
            serde_json::json!([false, want.len(), want.len()]),
            "the progress bar ends full"
        );
        let saved = downloaded(&downloads, "capsule-selection.pcapng");
        assert!(
            saved == want,
            "the saved selection ({} bytes) differs from capsule query's ({} bytes)",
            saved.len(),
            want.len()
        );
        shot(&c, "sessions-downloaded").await;
        collect(&c, &driver, &session, &mut seen, &mut log).await;

        // Sorting by start puts the earliest first.
        follow(&c, testid(&c, "sort-start").await).await;
        let by_start = rows(&c).await;
        let first = flows.iter().min_by_key(|f| f["first_ns"].as_u64()).unwrap();
        assert!(
            by_start[0].contains(first["a"].as_str().unwrap()),
            "{by_start:#?}"
        );

        // A bad filter: the CLI's message, its caret under the same column.
        fill(&c, "filter-input", BAD_FILTER).await;
        follow(&c, testid(&c, "filter-submit").await).await;
        let shown = testid(&c, "filter-error").await.text().await.unwrap();
        let caret = |t: &str| {
            let l = t.lines().find(|l| l.contains('^')).expect("a caret line");
            (l.find('^').unwrap(), l.trim().to_string())
        };
        assert!(shown.contains(BAD_FILTER), "{shown}");
        assert_eq!(
            caret(&shown),
            caret(&cli_error),
            "{shown}\n--- cli\n{cli_error}"
        );
        shot(&c, "sessions-bad-filter").await;
        collect(&c, &driver, &session, &mut seen, &mut log).await;

        // The timeline of the whole store (2 s) in bins of 20 ms from the millisecond
        // series, every packet in it; one bin zoomed into: bins of 1 ms, the packets and
        // bytes `capsule query --count` gives for that window.
        c.goto(&s.url("/timeline")).await.unwrap();
        testid(&c, "view-timeline").await;
        assert_eq!(text_of(&c, "timeline-step").await.unwrap(), "20 ms");
        let totals = |c: &Client| {
            let c = c.clone();
            async move {
                (
                    attr(&c, "timeline-summary", "data-packets").await.unwrap().parse().unwrap(),
                    attr(&c, "timeline-summary", "data-bytes").await.unwrap().parse().unwrap(),
                )
            }
        };
        assert_eq!(totals(&c).await, count(&store, &[]), "the whole store's packets");
        shot(&c, "timeline").await;
        collect(&c, &driver, &session, &mut seen, &mut log).await;
        let bins = c
            .find_all(Locator::Css("[data-testid=\"bin\"]"))
            .await
            .unwrap();
        assert_eq!(bins.len(), 100, "2 s in bins of 20 ms");
        let zoom = bins[50].attr("href").await.unwrap().unwrap();
        c.goto(&s.url(&zoom)).await.unwrap();
        assert_eq!(text_of(&c, "timeline-step").await.unwrap(), "1 ms");
        let (zf, zt) = (arg(&zoom, "from"), arg(&zoom, "to"));
        let zoomed = count(&store, &["--from", &zf, "--to", &zt]);
        assert!(zoomed.0 > 0, "traffic in {zf} .. {zt}");
        assert_eq!(totals(&c).await, zoomed, "the 20 ms window {zf} .. {zt}");
        shot(&c, "timeline-ms").await;
        // The same chart in packets.
        testid(&c, "unit-toggle").await.click().await.unwrap();
        until(10, "the chart in packets", || async {
            attr(&c, "timeline-chart", "aria-label")
                .await
                .filter(|l| l.starts_with("packets"))
        })
        .await;
        assert_eq!(totals(&c).await, zoomed);
        collect(&c, &driver, &session, &mut seen, &mut log).await;

        // A drag across the whole store's chart selects a window, which the sessions view
        // then shows.
        c.goto(&s.url("/timeline")).await.unwrap();
        let chart = testid(&c, "timeline-chart").await;
        let drag = MouseActions::new("mouse".into())
            .then(PointerAction::MoveToElement {
                element: chart.clone(),
                duration: None,
                x: -300.0,
                y: 0.0,
            })
            .then(PointerAction::Down {
                button: MOUSE_BUTTON_LEFT,
            })
            .then(PointerAction::MoveToElement {
                element: chart,
                duration: Some(Duration::from_millis(100)),
                x: -100.0,
                y: 0.0,
            })
            .then(PointerAction::Up {
                button: MOUSE_BUTTON_LEFT,
            });
        c.perform_actions(drag).await.unwrap();
        let url = until(10, "the dragged window", || async {
            Some(here(&c).await).filter(|u| u.contains("from="))
        })
        .await;
        let (from, to) = (arg(&url, "from"), arg(&url, "to"));
        testid(&c, "view-timeline").await;
        assert_eq!(
            testid(&c, "from-input").await.prop("value").await.unwrap().as_deref(),
            Some(from.as_str()),
            "the window's fields show RFC 3339 times"
        );
        shot(&c, "timeline-selected").await;
        follow(&c, testid(&c, "timeline-sessions").await).await;
        testid(&c, "view-sessions").await;
        let text = testid(&c, "view-sessions").await.text().await.unwrap();
        let cli = |args: &[&str]| {
            let o = run_ok(
                capsule()
                    .args(["flows", "--store", p(&store), "--json"])
                    .args(["--limit", "100000"])
                    .args(args),
            );
            stdout_str(&o).lines().count()
        };
        let (window_flows, all) = (cli(&["--from", &from, "--to", &to]), cli(&[]));
        assert!(
            text.contains(&format!("{window_flows} flows in the window")) && window_flows < all,
            "the dragged window {from}..{to} shows the CLI's {window_flows} flows (of {all}): {text}"
        );
        collect(&c, &driver, &session, &mut seen, &mut log).await;

        // Analytics of the whole store: the rogue senders among the DSCP violations, the
        // TCP health per host, the group matrix; the top senders as `capsule top` ranks
        // them.
        c.goto(&s.url("/analytics")).await.unwrap();
        testid(&c, "view-analytics").await;
        let violations = testid(&c, "dscp-violations").await.text().await.unwrap();
        for r in &rogue {
            assert!(violations.contains(r.as_str()), "{r} in {violations}");
        }
        testid(&c, "tcp-heatmap").await;
        c.find(Locator::Css("[data-testid=\"analytics-matrix\"] svg"))
            .await
            .expect("the group matrix");
        shot(&c, "analytics").await;
        for part in ["top", "dscp", "tcp", "matrix", "stragglers"] {
            shot_of(&c, &format!("analytics-{part}"), &format!("analytics-{part}")).await;
        }
        collect(&c, &driver, &session, &mut seen, &mut log).await;
        follow(&c, testid(&c, "top-key-src").await).await;
        let first = c
            .find(Locator::Css("[data-testid=\"top-table\"] tbody tr"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let top1 = top_src["rows"][0]["key"].as_str().unwrap();
        assert!(first.starts_with(&format!("1 {top1} ")), "{first} ranks {top1} first");

        // Alerts of the whole store by cause, as many as `capsule alerts` gives; the
        // rogue senders under the DSCP cause, and one alert's evidence: the packets of
        // `capsule query` for its window and filter.
        c.goto(&s.url("/alerts")).await.unwrap();
        let n = alerts["alerts"].as_array().unwrap().len();
        let summary = testid(&c, "alerts-summary").await.text().await.unwrap();
        assert!(summary.starts_with(&format!("{n} alert(s)")), "{summary}");
        let dscp = testid(&c, "cause-dscp").await.text().await.unwrap();
        for r in &rogue {
            assert!(dscp.contains(r.as_str()), "{r} in {dscp}");
        }
        shot(&c, "alerts").await;
        collect(&c, &driver, &session, &mut seen, &mut log).await;
        let ev = c
            .find(Locator::Css(
                "[data-testid=\"cause-dscp\"] [data-testid=\"evidence\"]",
            ))
            .await
            .unwrap()
            .attr("href")
            .await
            .unwrap()
            .unwrap();
        let (ef, et, eq) = (arg(&ev, "from"), arg(&ev, "to"), arg(&ev, "filter"));
        let evidence = query_ok(
            &store,
            &dir.join("evidence.pcapng"),
            &["--from", &ef, "--to", &et, "--format", "pcapng", &eq],
        );
        assert!(fetched(&c, &ev).await == evidence, "the evidence of {ev}");

        // The status view, which reloads itself.
        let status = c
            .find(Locator::Css("header nav a[href^=\"/status\"]"))
            .await
            .unwrap();
        follow(&c, status).await;
        let st = testid(&c, "view-status").await.text().await.unwrap();
        assert!(
            st.contains("Retention horizon") && st.contains("Newest packet (freshness)"),
            "{st}"
        );
        let refresh = c
            .find(Locator::Css("meta[http-equiv=refresh]"))
            .await
            .unwrap();
        assert_eq!(refresh.attr("content").await.unwrap().as_deref(), Some("5"));
        shot(&c, "status").await;
        collect(&c, &driver, &session, &mut seen, &mut log).await;

        // Sign-out ends the session: the views ask for sign-in again.
        follow(&c, testid(&c, "logout-submit").await).await;
        testid(&c, "login-token").await;
        c.goto(&s.url("/sessions")).await.unwrap();
        assert!(here(&c).await.starts_with("/login"), "{}", here(&c).await);
        log.extend(console_log(&driver, &session));
        c.close().await.unwrap();
        assert_clean(&origin, &seen, &log);
    });

    // Every page of flows and every download was audited under alice.
    let audit = s.audit_lines();
    let of = |ep: &str| -> Vec<&serde_json::Value> {
        audit.iter().filter(|r| r["endpoint"] == ep).collect()
    };
    let downloads = of("/download");
    assert!(
        downloads.iter().any(|r| r["user"] == "alice"
            && r["status"] == 200
            && r["bytes"].as_u64() == Some(want.len() as u64)),
        "{downloads:#?}"
    );
    assert!(of("/sessions")
        .iter()
        .any(|r| r["user"] == "alice" && r["params"]["filter"] == FILTER));
    for ep in [
        "/timeline",
        "/analytics",
        "/alerts",
        "/selection",
        "/status",
    ] {
        assert!(
            of(ep)
                .iter()
                .any(|r| r["user"] == "alice" && r["status"] == 200),
            "{ep} audited under alice"
        );
    }
    assert!(of("/login")
        .iter()
        .any(|r| r["outcome"] == "console sign-in" && r["user"] == "alice"));
    assert!(of("/login")
        .iter()
        .any(|r| r["outcome"] == "console sign-in refused: unknown token (or revoked)"));
}

/// The packets stored and the time of the status view's text, as it shows them.
async fn live_status(c: &Client) -> Option<(u64, String, String)> {
    let packets = text_of(c, "status-packets").await?;
    let stored = packets.split(' ').next()?.parse().ok()?;
    Some((
        stored,
        text_of(c, "status-time").await?,
        text_of(c, "status-capture").await?,
    ))
}

#[test]
fn the_status_view_updates_while_a_capture_runs() {
    if !rustix_is_root() {
        skip(
            "console::the_status_view_updates_while_a_capture_runs",
            "needs root (network namespaces for a live capture)",
        );
        return;
    }
    let Some((chromium, driver_bin)) = tools_or_skip() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let pcap = dir.join("in.pcap");
    synth(&pcap, &dir.join("truth.json"), 3, "2s", "20M", None);
    let store = dir.join("store");
    let link = Link::new("co");
    let cap = link.capture(&store, &[]);
    let tokens = dir.join("tokens");
    let token = add_token(&tokens, "alice");
    let s = start(dir, &store, &tokens, &[]);
    let driver = start_driver(&driver_bin, dir);
    let profile = dir.join("profile");
    std::fs::create_dir_all(&profile).unwrap();
    let origin = format!("https://{}", s.addr);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // About 10 s of traffic at 4 Mbit/s: the page reloads twice or more meanwhile.
    let sender = std::thread::spawn(move || {
        link.send_at(&pcap, "4");
        link
    });
    rt.block_on(async {
        let c = browser(&driver, &chromium, &profile, dir).await;
        let session = c.session_id().await.unwrap().expect("a session id");
        let (mut seen, mut log) = (Vec::new(), Vec::new());
        c.goto(&s.url("/status")).await.unwrap();
        sign_in(&c, &token).await;
        testid(&c, "view-status").await;
        let (p1, t1, state) = until(20, "stored packets of the running capture", || async {
            live_status(&c).await.filter(|(p, _, _)| *p > 0)
        })
        .await;
        assert!(state.starts_with("running"), "{state}");
        let rates = text_of(&c, "status-rates").await.unwrap_or_default();
        assert!(rates.contains("packets/s"), "live rates: {rates}");
        // The page reloads by itself and shows more packets stored.
        let (p2, t2, _) = until(15, "the status view's own reload", || async {
            live_status(&c)
                .await
                .filter(|(p, t, _)| *t != t1 && *p > p1)
        })
        .await;
        assert!(p2 > p1 && t2 != t1, "{p1} at {t1}, then {p2} at {t2}");
        shot(&c, "status-live").await;
        collect(&c, &driver, &session, &mut seen, &mut log).await;
        c.close().await.unwrap();
        assert_clean(&origin, &seen, &log);
    });
    let link = sender.join().unwrap();
    stop(cap);
    drop(link);
}
