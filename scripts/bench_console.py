#!/usr/bin/env python3
"""The web console on a big store (issue 29, "Fast on a big store"): the first view of a
10 GB store paints in under 1 s, the sessions page answers in under 200 ms.

Two stores of the same synthetic traffic (synth runs at --rate, one after another in time,
piped into `capsule import`): a small one (--small-gb, runs of --small-chunk) and a big one
(--size-gb in stored bytes, runs of --chunk). For each, `capsule serve` with a self-signed certificate and a token, then:

* the first view: headless Chromium (chromedriver, driven here over WebDriver's HTTP API
  with urllib: no client library) signs in and opens `/`, which is the whole store's
  timeline; the time from the navigation's start to the first contentful paint and to the
  load event (the Paint and Navigation Timing APIs), best of --runs fresh navigations;
* the sessions page (`/sessions`: 50 flows a page), for the whole store sorted by bytes,
  for one minute in its middle, its second page, and sorted by start: the time to the last
  byte of the answer over one kept-alive TLS connection with the session's cookie, best of
  --runs;
* the same flows from the command line (`capsule flows --limit 50`) for scale.

Printed with the ratio of the big store to the small one, measured in the same run. The
stores are built once under --dir and kept (--rebuild to start again).

    python3 scripts/bench_console.py [--bin target/release/capsule] [--size-gb 10]
        [--small-gb 0.5] [--dir /tmp/capsule-bench-console] [--runs 5] [--rebuild]
        [--build-only]
"""
import argparse, base64, http.client, json, os, re, shutil, socket, ssl, subprocess, sys, time
import urllib.parse, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="target/release/capsule")
ap.add_argument("--size-gb", type=float, default=10.0)
ap.add_argument("--small-gb", type=float, default=0.5)
ap.add_argument("--chunk", default="20s")
ap.add_argument("--small-chunk", default="4s")
ap.add_argument("--rate", default="1G")
ap.add_argument("--dir", default="/tmp/capsule-bench-console")
ap.add_argument("--runs", type=int, default=5)
ap.add_argument("--rebuild", action="store_true")
ap.add_argument("--build-only", action="store_true")
a = ap.parse_args()
capsule = os.path.abspath(a.bin)
os.makedirs(a.dir, exist_ok=True)


def store_bytes(store):
    seg = os.path.join(store, "segments")
    return sum(os.path.getsize(os.path.join(seg, f)) for f in os.listdir(seg)) if os.path.isdir(seg) else 0


def build(store, gb, chunk):
    """Imports synth runs of `chunk`, one after another in time, until the store holds gb."""
    if a.rebuild:
        shutil.rmtree(store, ignore_errors=True)
    secs = int(re.match(r"(\d+)s$", chunk).group(1))
    start = 1796004000  # 2026-11-30T02:00:00Z
    k = 0
    while store_bytes(store) < gb * 1e9:
        chunk_start = start + k * secs
        t0 = time.time()
        synth = subprocess.Popen([capsule, "synth", "--seed", str(k + 1), "--duration", chunk,
                                  "--rate", a.rate, "--start", str(chunk_start), "-w", "-"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        imp = subprocess.run([capsule, "import", "--store", store, "-"], stdin=synth.stdout,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        synth.stdout.close()
        if synth.wait() != 0 or imp.returncode != 0:
            sys.exit(f"building {store} failed: {imp.stderr[-2000:]}")
        k += 1
        print(f"  {store}: chunk {k} in {time.time() - t0:.0f} s, {store_bytes(store) / 1e9:.2f} GB",
              flush=True)
        # A store built before is only checked: its chunks are there already.
        if k > 1000:
            sys.exit("too many chunks")
    return store


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pki():
    d = os.path.join(a.dir, "pki")
    if not os.path.exists(os.path.join(d, "srv.pem")):
        os.makedirs(d, exist_ok=True)
        subprocess.run(f"""cd {d}
          openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout ca.key -out ca.pem -days 30 -subj /CN=bench-ca 2>/dev/null
          openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout srv.key -out srv.csr -subj /CN=localhost 2>/dev/null
          printf 'subjectAltName=IP:127.0.0.1\\n' > ext
          openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -out srv.pem -days 30 -extfile ext 2>/dev/null""", shell=True, check=True)
    return d


def serve(store):
    d = pki()
    tokens = os.path.join(a.dir, "tokens")
    if os.path.exists(tokens):
        os.remove(tokens)
    token = subprocess.run([capsule, "token", "add", "--tokens", tokens, "--user", "bench"],
                           check=True, capture_output=True, text=True).stdout.strip()
    p = subprocess.Popen([capsule, "serve", "--store", store, "--listen", "127.0.0.1:0",
                          "--cert", os.path.join(d, "srv.pem"), "--key", os.path.join(d, "srv.key"),
                          "--tokens", tokens, "--max-query-time", "60s"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    addr = line.strip().rsplit("https://", 1)[1]
    return p, addr, token


class WebDriver:
    """chromedriver's HTTP API, enough to open pages, type a token and read the timings."""

    def __init__(self, downloads):
        self.port = free_port()
        self.proc = subprocess.Popen(["chromedriver", f"--port={self.port}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {
            "acceptInsecureCerts": True,
            "goog:chromeOptions": {"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--window-size=1280,900",
                f"--user-data-dir={downloads}"]}}}}
        self.sid = self.call("POST", "/session", caps)["sessionId"]

    def call(self, method, path, body=None):
        url = f"http://127.0.0.1:{self.port}{path}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())["value"]

    def s(self, method, path, body=None):
        return self.call(method, f"/session/{self.sid}{path}", body)

    def goto(self, url):
        self.s("POST", "/url", {"url": url})

    def js(self, script):
        return self.s("POST", "/execute/sync", {"script": script, "args": []})

    def testid(self, tid):
        e = self.s("POST", "/element", {"using": "css selector", "value": f"[data-testid={tid}]"})
        return list(e.values())[0]

    def close(self):
        try:
            self.s("DELETE", "")
        finally:
            self.proc.kill()


def first_view(wd, addr, token):
    """Best of --runs fresh navigations to `/`: first contentful paint and load, seconds."""
    wd.goto(f"https://{addr}/login")
    el = wd.testid("login-token")
    wd.s("POST", f"/element/{el}/value", {"text": token})
    wd.s("POST", f"/element/{wd.testid('login-submit')}/click", {})
    fcp, load = [], []
    for _ in range(a.runs):
        wd.goto("about:blank")
        wd.goto(f"https://{addr}/")
        # The paint entry is recorded when the frame is presented, a moment after load.
        for _ in range(50):
            t = wd.js("""
                var p = performance.getEntriesByType('paint')
                  .filter(function (e) { return e.name === 'first-contentful-paint'; });
                var n = performance.getEntriesByType('navigation')[0];
                return [p.length ? p[0].startTime : null, n.loadEventEnd, location.pathname,
                        document.querySelector('[data-testid=timeline-step]').textContent];""")
            if t[0] is not None:
                break
            time.sleep(0.1)
        assert t[0] is not None, "no first-contentful-paint entry"
        assert t[2] == "/timeline", t
        fcp.append(t[0] / 1000)
        load.append(t[1] / 1000)
    cookies = wd.s("GET", "/cookie")
    sid = next(c["value"] for c in cookies if c["name"] == "capsule_session")
    return min(fcp), min(load), sid, t[3]


def timed_gets(addr, sid, paths):
    """Best of --runs, per path: seconds from the request to the answer's last byte over one
    kept-alive connection."""
    ctx = ssl.create_default_context(cafile=os.path.join(pki(), "ca.pem"))
    conn = http.client.HTTPSConnection(addr, context=ctx, timeout=120)
    out = {}
    for path in paths:
        best = None
        for _ in range(a.runs):
            t0 = time.perf_counter()
            conn.request("GET", path, headers={"Cookie": f"capsule_session={sid}"})
            r = conn.getresponse()
            body = r.read()
            dt = time.perf_counter() - t0
            assert r.status == 200, (path, r.status, body[:300])
            best = dt if best is None else min(best, dt)
        m = re.search(rb"(\d+) flows in the window", body)
        out[path] = (best, int(m.group(1)) if m else None)
    conn.close()
    return out


def cli_flows(store, args):
    best = None
    for _ in range(a.runs):
        t0 = time.perf_counter()
        subprocess.run([capsule, "flows", "--store", store, "--limit", "50"] + args,
                       check=True, stdout=subprocess.DEVNULL)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best


def span(store):
    st = json.loads(subprocess.run([capsule, "status", "--store", store, "--json"],
                                   check=True, capture_output=True, text=True).stdout)
    return st["store"]["first_ns"], st["store"]["last_ns"]


def iso(ns):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns // 10**9))


STORES = [("small", a.small_gb, a.small_chunk), ("big", a.size_gb, a.chunk)]
if a.build_only:
    for name, gb, chunk in STORES:
        build(os.path.join(a.dir, f"store-{name}"), gb, chunk)
    sys.exit(0)

results = {}
for name, gb, chunk in STORES:
    store = build(os.path.join(a.dir, f"store-{name}"), gb, chunk)
    first, last = span(store)
    mid = (first + last) // 2
    minute = f"from={urllib.parse.quote(iso(mid - 30 * 10**9))}&to={urllib.parse.quote(iso(mid + 30 * 10**9))}"
    paths = {
        "sessions, whole store, by bytes": "/sessions",
        "sessions, whole store, page 2": "/sessions?sort=bytes&page=2",
        "sessions, whole store, by start": "/sessions?sort=start",
        "sessions, one minute": f"/sessions?{minute}",
    }
    server, addr, token = serve(store)
    wd = WebDriver(os.path.join(a.dir, f"profile-{name}"))
    try:
        fcp, load, sid, step = first_view(wd, addr, token)
        gets = timed_gets(addr, sid, list(paths.values()))
    finally:
        wd.close()
        server.kill()
        server.wait()
    r = {"stored GB": store_bytes(store) / 1e9,
         "first view: first contentful paint": fcp, "first view: load": load}
    for label, path in paths.items():
        r[label] = gets[path][0]
        r[label + " (flows)"] = gets[path][1]
    r["capsule flows --limit 50, whole store (CLI)"] = cli_flows(store, [])
    results[name] = r
    print(f"{name}: {r['stored GB']:.2f} GB stored, first view in bins of {step}", flush=True)

print(f"\n{'':48} {'small':>10} {'big':>10} {'big/small':>10}")
for k in results["small"]:
    s, b = results["small"][k], results["big"][k]
    if k.endswith("(flows)") or k == "stored GB":
        print(f"{k:48} {s:>10} {b:>10}" if k.endswith("(flows)") else f"{k:48} {s:>10.2f} {b:>10.2f}")
    else:
        print(f"{k:48} {s:>9.3f}s {b:>9.3f}s {b / s:>10.2f}")
big = results["big"]
print(f"\ngoals: first view paints in under 1 s: {big['first view: first contentful paint']:.3f} s; "
      f"the sessions page in under 200 ms: "
      f"{max(v for k, v in big.items() if k.startswith('sessions') and not k.endswith('(flows)')) * 1000:.0f} ms at worst")
