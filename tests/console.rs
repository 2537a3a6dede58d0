//! The web console of `capsule serve` in a real browser: headless Chromium driven over
//! WebDriver (chromedriver, started here on loopback) by fantoccini, against a server of a
//! synthetic store. One server and one browser session for the whole walk: sign in with a
//! wrong token then the right one, find the rogue EF senders of the synth truth file, see a
//! bad filter's caret, download the selection and compare it with `capsule query`, drag a
//! window on the timeline, look at the status, sign out. Every page is checked for requests
//! that leave the origin and for errors in the browser's console, and a screenshot of each
//! view is kept under target/console-shots/. Plain HTTP checks (curl) prove that no console
//! URL gives data without a session.
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
        let _ = Command::new("kill")
            .args(["-KILL", &format!("-{}", self.child.id())])
            .status();
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
/// self-signed certificate, its console log kept.
async fn browser(d: &Driver, chromium: &Path, profile: &Path) -> Client {
    let caps = serde_json::json!({
        "acceptInsecureCerts": true,
        "goog:loggingPrefs": {"browser": "ALL"},
        "goog:chromeOptions": {
            "binary": p(chromium),
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
        "/status",
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
    let tokens = dir.join("tokens");
    let token = add_token(&tokens, "alice");
    let s = start(dir, &store, &tokens, &[]);

    no_data_without_a_session(&s, &rogue, &token);

    let (chromium, driver_bin) = match browser_tools() {
        Ok(t) => t,
        Err(why) => {
            let m =
                format!("SKIPPED the browser part of the console test: {why}; run scripts/deps.sh");
            if std::env::var_os("CAPSULE_REQUIRE_BROWSER").is_some() {
                panic!("{m} (CAPSULE_REQUIRE_BROWSER is set)");
            }
            eprintln!("\n{}\n!!! {m}\n{}\n", "!".repeat(80), "!".repeat(80));
            return;
        }
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
    let want = query_ok(
        &store,
        &dir.join("want.pcapng"),
        &["--from", FROM, "--to", TO, "--format", "pcapng", FILTER],
    );
    let bad = run(capsule().args(["query", "--store", p(&store), "-w", "/dev/null", BAD_FILTER]));
    assert_eq!(bad.status.code(), Some(2));
    let cli_error = stderr_str(&bad);

    let driver = start_driver(&driver_bin, dir);
    let profile = dir.join("profile");
    std::fs::create_dir_all(&profile).unwrap();
    let origin = format!("https://{}", s.addr);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = browser(&driver, &chromium, &profile).await;
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
        fill(&c, "login-token", "not-a-token").await;
        testid(&c, "login-submit").await.click().await.unwrap();
        let err = testid(&c, "login-error").await.text().await.unwrap();
        assert_eq!(err, "the token is not valid");
        shot(&c, "login-refused").await;
        seen.extend(resources(&c).await);
        log.extend(console_log(&driver, &session));
        fill(&c, "login-token", &token).await;
        testid(&c, "login-submit").await.click().await.unwrap();
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
        testid(&c, "filter-submit").await.click().await.unwrap();
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
        shot(&c, "sessions").await;
        seen.extend(resources(&c).await);
        log.extend(console_log(&driver, &session));

        // Sorting by start puts the earliest first.
        testid(&c, "sort-start").await.click().await.unwrap();
        let by_start = rows(&c).await;
        let first = flows.iter().min_by_key(|f| f["first_ns"].as_u64()).unwrap();
        assert!(
            by_start[0].contains(first["a"].as_str().unwrap()),
            "{by_start:#?}"
        );

        // The selection's download: the bytes of `capsule query` of the same window and
        // filter, fetched with the session as the link does.
        let href = testid(&c, "download-pcap")
            .await
            .attr("href")
            .await
            .unwrap()
            .unwrap();
        let hex = c
            .execute_async(
                "var done = arguments[arguments.length - 1];\
                 fetch(arguments[0]).then(function (r) { return r.arrayBuffer(); })\
                 .then(function (b) { done(Array.from(new Uint8Array(b), function (x) {\
                   return ('0' + x.toString(16)).slice(-2); }).join('')); });",
                vec![serde_json::json!(href)],
            )
            .await
            .unwrap();
        let hex = hex.as_str().unwrap();
        let got: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert!(
            got == want,
            "the console's selection ({} bytes) differs from capsule query's ({} bytes)",
            got.len(),
            want.len()
        );

        // A bad filter: the CLI's message, its caret under the same column.
        fill(&c, "filter-input", BAD_FILTER).await;
        testid(&c, "filter-submit").await.click().await.unwrap();
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
        seen.extend(resources(&c).await);
        log.extend(console_log(&driver, &session));

        // The timeline of the whole store; a drag selects a window, which the sessions
        // view then shows.
        c.goto(&s.url("/timeline")).await.unwrap();
        let chart = testid(&c, "timeline-chart").await;
        testid(&c, "view-timeline").await;
        shot(&c, "timeline").await;
        seen.extend(resources(&c).await);
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
        let t0 = Instant::now();
        while !here(&c).await.contains("from=") {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the drag set no window"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let url = here(&c).await;
        let arg = |k: &str| {
            url.split(['?', '&'])
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")[..]))
                .unwrap_or_else(|| panic!("no {k} in {url}"))
                .to_string()
        };
        let (from, to) = (arg("from"), arg("to"));
        testid(&c, "view-timeline").await;
        shot(&c, "timeline-selected").await;
        testid(&c, "timeline-sessions").await.click().await.unwrap();
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
        let (window, all) = (cli(&["--from", &from, "--to", &to]), cli(&[]));
        assert!(
            text.contains(&format!("{window} flows in the window")) && window < all,
            "the dragged window {from}..{to} shows the CLI's {window} flows (of {all}): {text}"
        );
        seen.extend(resources(&c).await);
        log.extend(console_log(&driver, &session));

        // The status view, which refreshes itself.
        c.find(Locator::Css("header nav a[href^=\"/status\"]"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let st = testid(&c, "view-status").await.text().await.unwrap();
        assert!(
            st.contains("Retention horizon") && st.contains("Last packet"),
            "{st}"
        );
        let refresh = c
            .find(Locator::Css("meta[http-equiv=refresh]"))
            .await
            .unwrap();
        assert_eq!(refresh.attr("content").await.unwrap().as_deref(), Some("5"));
        shot(&c, "status").await;
        seen.extend(resources(&c).await);
        log.extend(console_log(&driver, &session));

        // Sign-out ends the session: the views ask for sign-in again.
        testid(&c, "logout-submit").await.click().await.unwrap();
        testid(&c, "login-token").await;
        c.goto(&s.url("/sessions")).await.unwrap();
        assert!(here(&c).await.starts_with("/login"), "{}", here(&c).await);
        log.extend(console_log(&driver, &session));
        c.close().await.unwrap();

        // Nothing left the origin; nothing went wrong in the browser's console but the
        // refusals the walk asked for (the wrong token, the bad filter).
        for u in &seen {
            assert!(u.starts_with(&origin), "a request left the origin: {u}");
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
    assert!(of("/timeline").iter().any(|r| r["user"] == "alice"));
    assert!(of("/login")
        .iter()
        .any(|r| r["outcome"] == "console sign-in" && r["user"] == "alice"));
    assert!(of("/login")
        .iter()
        .any(|r| r["outcome"] == "console sign-in refused: unknown token (or revoked)"));
}
