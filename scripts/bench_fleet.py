#!/usr/bin/env python3
"""The fleet's three figures (issue 30, item 5), on this machine, loopback:

  1. fleet `top` over 3 nodes against the same `top` on one store holding all the traffic
     (median wall time of --runs each; goal: ratio under 1.5);
  2. fleet `query` time to its first byte against the slowest node's own time to first
     byte (`query --server NODE`, each node asked alone; goal: within it + 100 ms);
  3. planning: `query --fleet --explain` wall time, process start included (p50; goal:
     under 50 ms).

A synthetic trace is imported into one store and, split by host into three parts, into
three node stores; the nodes publish to a ClickHouse server started here (Debian's
clickhouse-server, on loopback, stopped at the end) and are served by three
`capsule serve` with TLS and a token. Everything runs in a temporary directory.

    python3 scripts/bench_fleet.py [--bin target/release/capsule] [--duration 10s]
        [--rate 100M] [--runs 7] [--before OTHER_BINARY]

With --before, the fleet questions are also asked with OTHER_BINARY (an earlier build) in
the same runs, alternated with --bin's, so both builds' figures see the same load (the
stores, nodes and catalog are --bin's).
"""
import argparse, json, os, shutil, socket, statistics, subprocess, sys, tempfile, time


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({r.returncode}): {r.stderr[-2000:]!r}")
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_clickhouse(d):
    http, tcp, inter = free_port(), free_port(), free_port()
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "users.xml"), "w") as f:
        f.write("<yandex><profiles><default></default></profiles><users><default><password>"
                "</password><networks><ip>127.0.0.1</ip></networks><profile>default</profile>"
                "<quota>default</quota></default></users><quotas><default></default></quotas>"
                "</yandex>\n")
    with open(os.path.join(d, "config.xml"), "w") as f:
        f.write(f"<yandex><logger><level>warning</level><log>{d}/log.txt</log>"
                f"<errorlog>{d}/err.txt</errorlog><console>0</console></logger>"
                f"<http_port>{http}</http_port><tcp_port>{tcp}</tcp_port>"
                f"<interserver_http_port>{inter}</interserver_http_port>"
                f"<listen_host>127.0.0.1</listen_host><path>{d}/data/</path>"
                f"<tmp_path>{d}/tmp/</tmp_path><user_files_path>{d}/user_files/</user_files_path>"
                f"<format_schema_path>{d}/format_schemas/</format_schema_path>"
                f"<users_config>{d}/users.xml</users_config><default_profile>default"
                f"</default_profile><default_database>default</default_database>"
                f"<mark_cache_size>268435456</mark_cache_size></yandex>\n")
    exe = shutil.which("clickhouse-server") or sys.exit("clickhouse-server is not installed (scripts/deps.sh)")
    p = subprocess.Popen([exe, f"--config-file={d}/config.xml"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{http}"
    t0 = time.time()
    while True:
        r = subprocess.run(["curl", "-sf", "--max-time", "2", "--data-binary", "SELECT 1", url],
                           capture_output=True)
        if r.returncode == 0:
            return p, url
        if time.time() - t0 > 60:
            p.kill()
            sys.exit("ClickHouse did not answer within 60 s")
        time.sleep(0.1)


def make_pki(d):
    os.makedirs(d, exist_ok=True)
    sh = """
      openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout ca.key -out ca.pem -days 2 -subj /CN=capsule-bench-ca 2>/dev/null
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout srv.key -out srv.csr -subj /CN=localhost 2>/dev/null
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext
      openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
        -out srv.pem -days 2 -extfile ext 2>/dev/null
    """
    run(["sh", "-c", sh], cwd=d)
    return {k: os.path.join(d, f) for k, f in [("ca", "ca.pem"), ("cert", "srv.pem"), ("key", "srv.key")]}


def serve(capsule, d, name, store, pki, tokens):
    audit = os.path.join(d, f"{name}-audit.jsonl")
    p = subprocess.Popen([capsule, "serve", "--store", store, "--listen", "127.0.0.1:0",
                          "--cert", pki["cert"], "--key", pki["key"], "--tokens", tokens,
                          "--audit-log", audit],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    line = p.stderr.readline().strip()
    prefix = "capsule serve: listening on https://"
    if not line.startswith(prefix):
        p.kill()
        sys.exit(f"serve {name}: {line!r}")
    # Drain stderr so the server never blocks on it.
    import threading
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, line[len(prefix):]


def timed(cmd, runs):
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(cmd)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def first_byte(cmd):
    """Seconds until the command's stdout gives its first byte, and until it ends."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    b = p.stdout.read(1)
    t1 = time.perf_counter() - t0
    p.stdout.read()
    err = p.stderr.read()
    p.wait()
    t2 = time.perf_counter() - t0
    if p.returncode != 0 or not b:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}, {err[-1000:]!r}")
    return t1, t2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/capsule")
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--rate", default="100M")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--before", help="an earlier build, asked alternately in the same runs")
    a = ap.parse_args()
    capsule = os.path.abspath(a.bin)
    procs = []
    with tempfile.TemporaryDirectory(prefix="capsule-benchfleet-") as d:
        try:
            ch, url = start_clickhouse(os.path.join(d, "clickhouse"))
            procs.append(ch)
            pcap = os.path.join(d, "t.pcap")
            run([capsule, "synth", "--seed", "7", "--duration", a.duration, "--rate", a.rate,
                 "--write", pcap])
            allstore = os.path.join(d, "all")
            run([capsule, "import", "--store", allstore, pcap])
            pki = make_pki(os.path.join(d, "pki"))
            tokens = os.path.join(d, "tokens")
            tok = run([capsule, "token", "add", "--tokens", tokens, "--user", "bench"],
                      text=True).stdout.strip()
            token = os.path.join(d, "token")
            with open(token, "w") as f:
                f.write(tok + "\n")
            parts = ["net 10.10.0.0/16", "not net 10.10.0.0/16 and vlan 200",
                     "not net 10.10.0.0/16 and not vlan 200"]
            nodes = []
            for i, flt in enumerate(parts):
                part = os.path.join(d, f"part{i}.pcapng")
                run([capsule, "query", "--store", allstore, "-w", part, flt])
                store = os.path.join(d, f"node{i}")
                run([capsule, "import", "--store", store, part])
                sp, addr = serve(capsule, d, f"node{i}", store, pki, tokens)
                procs.append(sp)
                cfg = os.path.join(d, f"node{i}.toml")
                with open(cfg, "w") as f:
                    f.write(f'[fleet]\nnode = "node{i}"\nclickhouse = "{url}"\n'
                            f'advertise = "https://{addr}"\nca = "{pki["ca"]}"\n'
                            f'token_file = "{token}"\n')
                run([capsule, "fleet", "publish", "--store", store, "--config", cfg])
                nodes.append((f"node{i}", store, addr, cfg))
            cfg = nodes[0][3]
            if os.environ.get("BENCH_FLEET_HOLD"):
                # Keeps the catalog and nodes up for SECONDS, to look at by hand.
                print(f"holding: url {url} config {cfg} one store {allstore}", flush=True)
                time.sleep(int(os.environ["BENCH_FLEET_HOLD"]))
            size = os.path.getsize(pcap)
            print(f"trace: synth --duration {a.duration} --rate {a.rate}, {size} bytes; "
                  f"3 nodes; median of {a.runs} runs")

            # 1. top over the fleet against top on the one store.
            # Alternated, so that both see the same load of a shared machine.
            askers = [("", capsule)]
            if a.before:
                askers.append((" [before]", os.path.abspath(a.before)))
            one_cmd = [capsule, "top", "--store", allstore]
            for _, b in askers:
                timed([b, "top", "--fleet", "--config", cfg], 1)  # warm
            timed(one_cmd, 1)
            ft, ot = {k: [] for k, _ in askers}, []
            for _ in range(a.runs):
                for k, b in askers:
                    ft[k].append(timed([b, "top", "--fleet", "--config", cfg], 1)[0])
                ot.append(timed(one_cmd, 1)[0])
            one_top = statistics.median(ot)
            for k, _ in askers:
                fleet_top = statistics.median(ft[k])
                print(f"top{k}: fleet {fleet_top * 1000:.1f} ms, one store "
                      f"{one_top * 1000:.1f} ms, ratio {fleet_top / one_top:.2f} (goal < 1.5)")

            # Where the fleet top's time goes: process start, and each question it asks
            # ClickHouse, timed over one kept-alive HTTP connection (the server's time plus
            # loopback, no client start).
            import http.client, urllib.parse
            hp = urllib.parse.urlparse(url)
            conn = http.client.HTTPConnection(hp.hostname, hp.port, timeout=30)

            def post(sql):
                conn.request("POST", "/", body=sql.encode())
                r = conn.getresponse()
                body = r.read()
                if r.status != 200:
                    sys.exit(f"ClickHouse refused {sql[:80]}: {body[:300]!r}")
                return body

            def ch_ms(sql):
                post(sql)
                ts = []
                for _ in range(a.runs):
                    t = time.perf_counter()
                    post(sql)
                    ts.append(time.perf_counter() - t)
                return statistics.median(ts) * 1000

            cols = post("SELECT name FROM system.columns WHERE database = 'capsule' AND "
                        "table = 'flows' FORMAT TabSeparated").decode().split()
            flows_sql = (f"SELECT {', '.join(cols)} FROM capsule.flows FINAL WHERE last_ns >= 0 "
                         f"AND first_ns < 18446744073709551615 ORDER BY node, segment "
                         f"FORMAT RowBinary")
            # What a question that keeps no per-second series asks: a flow wholly inside
            # the window comes without its buckets (fleet/src/plan.rs flow_rows); with no
            # window, every flow.
            types = dict(line.split("\t") for line in post(
                "SELECT name, type FROM system.columns WHERE database = 'capsule' AND "
                "table = 'flows' FORMAT TabSeparated").decode().splitlines())
            whole = "first_ns >= 0 AND last_ns < 18446744073709551615"
            elided = [f"arrayFilter(x -> NOT ({whole}), {c})" if c.startswith("bucket_") else c
                      for c in cols]
            elided_sql = (f"SELECT {', '.join(elided)} FROM capsule.flows FINAL WHERE "
                          f"last_ns >= 0 AND first_ns < 18446744073709551615 ORDER BY node, "
                          f"segment FORMAT RowBinary")
            empty = [f"if({whole}, emptyArray{types[c][6:-1]}(), {c})"
                     if c.startswith("bucket_") else c for c in cols]
            empty_sql = elided_sql.replace(", ".join(elided), ", ".join(empty))
            # What top, dscp, matrix and the plan ask since the packed table (flow_packed:
            # the key and span as columns, the counts packed into one string and the
            # seconds into another; fleet/src/rows.rs).
            packed = ("node, segment, published_ns, a, b, first_ns, last_ns, rec, secs, names, "
                      "encap")
            packed_sql = (f"SELECT {packed} FROM capsule.flow_packed WHERE last_ns >= 0 AND "
                          f"first_ns < 18446744073709551615 AND (SELECT count() FROM "
                          f"capsule.flow_packed_filled) >= 0 FORMAT RowBinary")
            parts_ms = {
                "packed flow rows as top asks now (flow_packed: key and span, rec, secs, "
                "names, encap)": ch_ms(packed_sql),
                "flow rows, FINAL, no buckets of whole flows (arrayFilter: what the plan asked before)":
                    ch_ms(elided_sql),
                "flow rows, FINAL, no buckets of whole flows (if/emptyArray)": ch_ms(empty_sql),
                "process start (capsule --version)": timed([capsule, "--version"], a.runs)[0] * 1000,
                "SELECT 1": ch_ms("SELECT 1"),
                "tables check (system.tables, system.columns)": ch_ms(
                    "SELECT (SELECT count() FROM system.tables WHERE database = 'capsule'), "
                    "(SELECT count() FROM system.columns WHERE database = 'capsule' AND "
                    "table = 'segments' AND name = 'location') FORMAT TabSeparated"),
                "flow rows, FINAL, RowBinary (what top asked before)": ch_ms(flows_sql),
                "flow rows, no FINAL, RowBinary": ch_ms(flows_sql.replace(" FINAL", "")),
                "span (segments FINAL)": ch_ms(
                    "SELECT count(), min(first_ns), max(last_ns) FROM capsule.segments FINAL "
                    "WHERE flows > 0 FORMAT RowBinary"),
                "registry (nodes FINAL)": ch_ms(
                    "SELECT * FROM capsule.nodes FINAL ORDER BY node FORMAT RowBinary"),
            }
            rows = post("SELECT count() FROM capsule.flows").decode().strip()
            nparts = post("SELECT table, count() FROM system.parts WHERE database = 'capsule' "
                          "AND active AND table IN ('flows', 'flow_packed') GROUP BY table "
                          "FORMAT TabSeparated").decode().split()
            print(f"active parts (table, count): {nparts}")
            conn.close()
            print(f"top --fleet breakdown (median of {a.runs}; the catalog holds {rows} flow rows):")
            for k, v in parts_ms.items():
                print(f"  {k}: {v:.1f} ms")

            # 2. query's first byte against the slowest node's own first byte.
            fleet_fb, node_fb, fleet_end = {k: [] for k, _ in askers}, [], {k: [] for k, _ in askers}
            for _ in range(a.runs):
                slowest = 0.0
                for name, store, addr, _ in nodes:
                    fb, _ = first_byte([capsule, "query", "--server", f"https://{addr}",
                                        "--token-file", token, "--ca", pki["ca"],
                                        "--format", "pcapng", "-w", "-"])
                    slowest = max(slowest, fb)
                node_fb.append(slowest)
                for k, b in askers:
                    fb, end = first_byte([b, "query", "--fleet", "--config", cfg, "-w", "-"])
                    fleet_fb[k].append(fb)
                    fleet_end[k].append(end)
            n_fb = statistics.median(node_fb)
            for k, _ in askers:
                f_fb = statistics.median(fleet_fb[k])
                print(f"query first byte{k}: fleet {f_fb * 1000:.1f} ms (whole answer "
                      f"{statistics.median(fleet_end[k]) * 1000:.1f} ms), slowest node alone "
                      f"{n_fb * 1000:.1f} ms, fleet - slowest {(f_fb - n_fb) * 1000:+.1f} ms "
                      f"(goal < +100 ms)")

            # 3. planning: the ClickHouse round trips of a fleet packet question.
            runs = max(a.runs, 21)
            plan_t = {k: [] for k, _ in askers}
            for _ in range(runs):
                for k, b in askers:
                    plan_t[k].append(timed([b, "query", "--fleet", "--config", cfg, "--explain",
                                            "--json"], 1)[0])
            for k, _ in askers:
                print(f"planning{k} (query --fleet --explain, process start included): p50 "
                      f"{statistics.median(plan_t[k]) * 1000:.1f} ms over {runs} runs "
                      f"(goal < 50 ms)")
        finally:
            for p in procs:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
