#!/usr/bin/env python3
"""Tier benchmark: questions over segments in the object store against the same over local ones.

What it measures, in one run: the same synthetic traffic (`capsule synth --seed 5`, --size-mb
of realistic payloads) imported twice, into a local store and into a store with `[tier]`
pointing at a SeaweedFS `weed server -s3` this script starts on loopback ports of its own
(installed by scripts/install_weed.sh when missing) and a local byte budget so small that
nearly every segment is uploaded and trimmed. Then, on both stores, best of --runs (whole
process, start to exit):

  1 ms window   `query --count` of one millisecond in the middle of the capture
  5-tuple       `query --count` of one TCP flow picked from the truth file, whole span
  1 s export    `query -w` of one second in the middle (the packets themselves)

For each it prints the local time, the tiered time of one cold run (no footer cached: the
readers' footer cache, STORE/index/seg-N.footer, removed first) and the best tiered time
after it (the footers cached by the runs before), the ratio of the best tiered time over
the local one, the bytes fetched from the object store (`tier_fetched_bytes`) cold and
cached against the bytes tiered, and checks that both stores give the same packet count (a
mismatch makes the exit status 1). Each capsule process starts with an empty block cache,
so every tiered run pays a GET per block it reads; a cold run also pays the fixed cost of
opening the trimmed segments (two GETs each, see docs/tier.md). A build without the footer
cache (--capsule of an older binary) pays it on every run. The machine is shared and noisy:
compare the rows of one run.

    python3 scripts/bench_tier.py [--dir /tmp/capsule-bench-tier] [--runs 5]
                                  [--size-mb 200] [--segment-size 16M] [--capsule PATH]

Everything it starts (weed) is stopped by PID at the end, also on an error or Ctrl-C.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time


def parse_args():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--dir", default="/tmp/capsule-bench-tier")
    a.add_argument("--runs", type=int, default=5)
    a.add_argument("--size-mb", type=int, default=200)
    a.add_argument("--segment-size", default="16M")
    a.add_argument("--capsule", default=None)
    return a.parse_args()


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY, SECRET = "benchkey", "benchsecret"


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start_weed(d):
    weed = subprocess.run(["bash", os.path.join(ROOT, "scripts/install_weed.sh")],
                          check=True, capture_output=True, text=True).stdout.strip()
    os.makedirs(os.path.join(d, "weed/data"), exist_ok=True)
    cfg = os.path.join(d, "weed/s3.json")
    with open(cfg, "w") as f:
        json.dump({"identities": [{"name": "bench", "credentials": [
            {"accessKey": KEY, "secretKey": SECRET}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
    p = free_ports(10)
    log = open(os.path.join(d, "weed/weed.log"), "w")
    proc = subprocess.Popen(
        [weed, "server", f"-dir={d}/weed/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
         "-volume.max=16", "-master.volumeSizeLimitMB=64", "-filer", "-s3",
         f"-master.port={p[0]}", f"-master.port.grpc={p[1]}", f"-volume.port={p[2]}",
         f"-volume.port.grpc={p[3]}", f"-filer.port={p[4]}", f"-filer.port.grpc={p[5]}",
         f"-s3.port={p[6]}", f"-s3.port.grpc={p[7]}", f"-s3.port.iceberg={p[8]}",
         f"-s3.port.lance={p[9]}", f"-s3.config={cfg}"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    endpoint = f"http://127.0.0.1:{p[6]}"
    t0 = time.time()
    while True:
        code = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--aws-sigv4",
             "aws:amz:us-east-1:s3", "--user", f"{KEY}:{SECRET}", "-X", "PUT",
             f"{endpoint}/bench"], capture_output=True, text=True).stdout
        if code in ("200", "409"):
            return proc, endpoint
        if time.time() - t0 > 60 or proc.poll() is not None:
            proc.kill()
            sys.exit(f"bench_tier.py: weed did not come up; see {d}/weed/weed.log")
        time.sleep(0.3)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0,):
        sys.exit(f"bench_tier.py: {' '.join(cmd)} exited {r.returncode}:\n{r.stderr}")
    return r.stdout


def best_of(runs, cmd):
    best = None
    for _ in range(runs):
        t = time.perf_counter()
        run(cmd)
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return best


def drop_footers(store):
    """Removes the readers' footer cache of `store` (the next reader fetches them)."""
    for f in glob.glob(os.path.join(store, "index", "*.footer")):
        os.remove(f)


def pick_flow(truth):
    """A TCP flow of a few dozen packets nearest the middle of the capture, as a filter."""
    mid = truth["config"]["start_ns"] + truth["config"]["duration_ns"] // 2
    flows = [f for f in truth["flows"] if f["protocol"] == 6 and 24 <= f["packets"] <= 200]
    if not flows:
        sys.exit("bench_tier.py: the truth file names no suitable TCP flow")
    f = min(flows, key=lambda f: abs(f["first_ns"] - mid))
    return (f"tcp and host {f['src']} and host {f['dst']} and port {f['src_port']} "
            f"and port {f['dst_port']}")


def main():
    args = parse_args()
    capsule = args.capsule or os.path.join(ROOT, "target/release/capsule")
    d = args.dir
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    weed, endpoint = start_weed(d)

    def stop(*_):
        weed.terminate()
        try:
            weed.wait(10)
        except subprocess.TimeoutExpired:
            weed.kill()
    signal.signal(signal.SIGTERM, lambda *_: (stop(), sys.exit(1)))
    try:
        bench(args, capsule, d, endpoint)
    finally:
        stop()


def bench(args, capsule, d, endpoint):
    pcap, truth_path = f"{d}/in.pcap", f"{d}/truth.json"
    # `synth --rate 1G` writes about 127 MB of pcap per second of traffic.
    seconds = max(1, round(args.size_mb / 127))
    run([capsule, "synth", "--seed", "5", "--duration", f"{seconds}s", "--rate", "1G",
         "-w", pcap, "--truth", truth_path])
    truth = json.load(open(truth_path))
    with open(f"{d}/tier.cred", "w") as f:
        f.write(f"{KEY}\n{SECRET}\n")
    cfg = f"{d}/tier.toml"
    with open(cfg, "w") as f:
        f.write(f'[tier]\nendpoint = "{endpoint}"\nbucket = "bench"\nprefix = "b"\n'
                f'credentials_file = "{d}/tier.cred"\n')
    local, tiered = f"{d}/local", f"{d}/tiered"
    seg = ["--segment-size", args.segment_size]
    run([capsule, "import", "--store", local, *seg, pcap])
    run([capsule, "import", "--store", tiered, *seg, "--max-bytes", args.segment_size,
         "--config", cfg, pcap])
    st = json.loads(run([capsule, "status", "--store", tiered, "--json"]))["tier"]
    mid = truth["config"]["start_ns"] + truth["config"]["duration_ns"] // 2
    questions = [
        ("1 ms window", ["--from", f"@{mid}", "--to", f"@{mid + 1_000_000}"], True),
        ("5-tuple", [pick_flow(truth)], True),
        ("1 s export", ["--from", f"@{mid}", "--to", f"@{mid + 1_000_000_000}"], False),
    ]
    print(f"{args.size_mb} MB of traffic, segments of {args.segment_size}: "
          f"{st['tiered_segments']} tiered ({st['tiered_only_segments']} only in the object "
          f"store, {st['tiered_bytes']} bytes); best of {args.runs}")
    print(f"{'question':<12} {'local s':>9} {'cold s':>9} {'tiered s':>9} {'ratio':>7} "
          f"{'cold B':>11} {'fetched B':>11} {'of tiered':>9} {'packets':>9}")
    bad = False
    for name, q, count_only in questions:
        def cmd(store, extra):
            c = [capsule, "query", "--store", store]
            if store == tiered:
                c += ["--config", cfg]
            return c + extra + q
        out = f"{d}/out.pcapng"
        extra = ["--count", "--json"] if count_only else ["-w", out]
        t_local = best_of(args.runs, cmd(local, extra))
        drop_footers(tiered)
        t_cold = best_of(1, cmd(tiered, extra))
        t_tier = best_of(args.runs, cmd(tiered, extra))
        a = json.loads(run(cmd(local, ["--count", "--json"])))
        drop_footers(tiered)
        cold = json.loads(run(cmd(tiered, ["--count", "--json"])))
        b = json.loads(run(cmd(tiered, ["--count", "--json"])))
        if a["packets"] != b["packets"] or a["packets"] != cold["packets"]:
            bad = True
        fetched = b.get("tier_fetched_bytes", 0)
        print(f"{name:<12} {t_local:>9.3f} {t_cold:>9.3f} {t_tier:>9.3f} "
              f"{t_tier / t_local:>6.1f}x {cold.get('tier_fetched_bytes', 0):>11} "
              f"{fetched:>11} {100 * fetched / max(1, st['tiered_bytes']):>8.2f}% "
              f"{b['packets']:>9}{'' if a['packets'] == b['packets'] else ' MISMATCH'}")
    if bad:
        sys.exit("bench_tier.py: the tiered store's answers differ from the local store's")


if __name__ == "__main__":
    main()
