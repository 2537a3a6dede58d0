#!/usr/bin/env python3
"""What the application names (issue 32) cost at ingest, and what they add to the index.

One synth trace (realistic payloads: `capsule synth`), imported --runs times by a baseline
build (--base, e.g. main's target/release/capsule) and by this build; CPU is user + sys of
the import child (os.wait4), best of the runs (the machine is shared: the least disturbed run
counts). Then, for this build's store: the index files' bytes against the segment files'
bytes, and how many flows got names, per application.

    python3 scripts/bench_names.py --base /work/main/target/release/capsule \
        [--duration 10s] [--rate 200M] [--runs 3] [--dir /tmp/capsule-bench-names] \
        [--segment-size 16M]
"""
import argparse, collections, json, os, shutil, subprocess, time

ap = argparse.ArgumentParser()
ap.add_argument("--base", required=True)
ap.add_argument("--capsule", default="target/release/capsule")
ap.add_argument("--duration", default="10s")
ap.add_argument("--rate", default="200M")
ap.add_argument("--seed", default="1")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--dir", default="/tmp/capsule-bench-names")
ap.add_argument("--segment-size", default=None,
                help="import with this segment size (e.g. 16M: several segments, so flows and "
                     "their names go on from one segment's index to the next)")
a = ap.parse_args()

os.makedirs(a.dir, exist_ok=True)
pcap = os.path.join(a.dir, "trace.pcap")
if not os.path.exists(pcap):
    subprocess.run([a.capsule, "synth", "--seed", a.seed, "--duration", a.duration,
                    "--rate", a.rate, "-w", pcap], check=True, stdout=subprocess.DEVNULL)
with open(pcap, "rb") as f:
    while f.read(1 << 24):
        pass


def imp(binary, store):
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    extra = ["--segment-size", a.segment_size] if a.segment_size else []
    p = subprocess.Popen([binary, "import", "--store", store, *extra, pcap],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    assert status == 0, f"{binary} import failed"
    return ru.ru_utime + ru.ru_stime, time.perf_counter() - t0


res = {}
for name, binary in [("base", a.base), ("names", a.capsule)]:
    store = os.path.join(a.dir, f"store-{name}")
    runs = [imp(binary, store) for _ in range(a.runs)]
    res[name] = min(r[0] for r in runs)
    print(f"{name}: CPU s per run {[round(r[0], 2) for r in runs]}, best {res[name]:.2f}")
print(f"CPU ratio names/base: {res['names'] / res['base']:.3f}")

store = os.path.join(a.dir, "store-names")
def size(d, ext):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs if f.endswith(ext))
seg, idx = size(os.path.join(store, "segments") if os.path.isdir(os.path.join(store, "segments")) else store, ".pcapng.zst"), size(os.path.join(store, "index"), ".idx")
base_idx = size(os.path.join(a.dir, "store-base", "index"), ".idx")
print(f"segments {seg} B, index {idx} B ({100 * idx / seg:.3f} % of stored bytes); "
      f"base index {base_idx} B (+{idx - base_idx} B for names)")
out = subprocess.run([a.capsule, "flows", "--store", store, "--json", "--limit", "10000000"],
                     check=True, capture_output=True, text=True).stdout
apps = collections.Counter()
flows = 0
for line in out.splitlines():
    if line.strip():
        flows += 1
        n = json.loads(line).get("names")
        apps[n["app"] if n else "(none)"] += 1
print(f"flows {flows}: " + ", ".join(f"{k} {v}" for k, v in apps.most_common()))
