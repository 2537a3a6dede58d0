#!/usr/bin/env python3
"""Analytics benchmark (issue 12, "Done when", third bullet): the five index-only commands
over a long store, and over the same flows with ten times the bytes.

What it does:

* builds two stores with `capsule synth --seed 3 ... -w - | capsule import --store S -` (no
  pcap on disk): `base` at --rate (default 1M) and `x10` at ten times the rate, both over
  --hours of traffic time. synth's flow count does not grow with the rate (its DNS, web and
  ICMP sessions are paced in time, the bulk transfers only get longer), so the two stores
  hold about the same flows and ten times the bytes; the script prints both counts;
* times each command (`top --key flow`, `top --key src`, `dscp`, `tcp --interval 1m`,
  `matrix`, `stragglers --group gpu`) over the whole store and over one hour in the middle,
  best of --runs (whole process, start to exit: the machine is shared, the best run is the
  least disturbed), with the store's index in the page cache;
* prints one table: command, window, seconds on `base` and on `x10`, the ratio, and the
  issue's targets (whole store under 2 s, one hour under 200 ms, no growth with bytes:
  x10/base under 1.5) marked met or MISSED.

The issue asks for at least 24 hours and 1 million flows; at 1 Mbit/s synth writes about
1.6 Mbit/s of frames and about 600 flows a minute, so --hours 30 gives about 1.08 million
flows, 21.7 GB of traffic and ten times that for `x10`: more than a small disk holds. With
--x10-cutoff SIZE the `x10` store is imported with `capsule import --cutoff SIZE` (the
per-class cut-off, docs/config.md): of each flow direction only its first SIZE bytes are
stored whole, the rest as headers only, while the side index still counts every packet and
byte of the ten-times traffic. The answers read the index alone (tests/analytics.rs proves
that no segment file is opened), so what they cost depends on the index, and the index of
the cut store describes the whole traffic: the comparison stays the one the issue asks for.
Pass smaller --hours on a small disk (the figures in docs/benchmarks.md say which size was
run).

Times are wall time, best of --runs, and beside it the CPU time (user + sys, wait4) of that
same run: the listing decodes segment indexes on two threads, so CPU can exceed wall.

    python3 scripts/bench_analytics.py [--dir /tmp/capsule-bench-analytics] [--hours 2]
                                       [--rate 1M] [--runs 3] [--capsule PATH] [--keep]
                                       [--x10-rate 16M] [--x10-cutoff 64K]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_NS = 1_796_004_000 * 1_000_000_000  # synth's default start (2026-11-30T02:00:00Z)


def rate_bps(text):
    units = {"K": 1e3, "M": 1e6, "G": 1e9}
    if text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def build(capsule, store, hours, rate, cutoff=None):
    if os.path.exists(os.path.join(store, "capsule-store.json")):
        print(f"reusing {store}")
        return
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.time()
    synth = subprocess.Popen(
        [capsule, "synth", "--seed", "3", "--duration", f"{hours}h", "--rate", str(rate),
         "-w", "-"],
        stdout=subprocess.PIPE,
    )
    cut = ["--cutoff", cutoff] if cutoff else []
    subprocess.run(
        [capsule, "import", "--store", store, "--segment-size", "256M"] + cut + ["-"],
        stdin=synth.stdout, check=True, stdout=subprocess.DEVNULL,
    )
    synth.stdout.close()
    if synth.wait() != 0:
        sys.exit("capsule synth failed")
    print(f"built {store} in {time.time() - t0:.0f} s")


def flows_and_bytes(capsule, store):
    out = subprocess.run(
        [capsule, "top", "--store", store, "--key", "flow", "--limit", "0", "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    total = json.loads(out)["total"]
    return total["flows"], total["bytes"]


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f))
               for d, _, files in os.walk(path) for f in files)


def best(cmd, runs):
    """The least wall time of `runs` runs, and that run's CPU time (user + sys)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}")
        times.append((wall, ru.ru_utime + ru.ru_stime))
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/capsule-bench-analytics")
    ap.add_argument("--hours", type=int, default=2)
    ap.add_argument("--rate", default="1M")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--capsule", default=os.path.join(ROOT, "target/release/capsule"))
    ap.add_argument("--keep", action="store_true", help="keep the stores for the next run")
    ap.add_argument("--x10-rate", metavar="RATE",
                    help="synth --rate of the x10 store (default: ten times --rate; synth's "
                         "floor sizes make 1M write 1.6 Mbit/s of frames, so 16M is what "
                         "gives ten times the bytes of 1M)")
    ap.add_argument("--x10-cutoff", metavar="SIZE",
                    help="import the x10 store with --cutoff SIZE (see above)")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    config = os.path.join(ROOT, "docs/examples/capsule.toml")
    base_rate = rate_bps(a.rate)
    x10_rate = rate_bps(a.x10_rate) if a.x10_rate else base_rate * 10
    stores = {
        "base": os.path.join(a.dir, f"base-{a.hours}h-{base_rate}"),
        "x10": os.path.join(a.dir, f"x10-{a.hours}h-{x10_rate}"
                            + (f"-cut{a.x10_cutoff}" if a.x10_cutoff else "")),
    }
    build(a.capsule, stores["base"], a.hours, base_rate)
    build(a.capsule, stores["x10"], a.hours, x10_rate, a.x10_cutoff)
    frames = {}
    for name, s in stores.items():
        flows, nbytes = flows_and_bytes(a.capsule, s)
        frames[name] = nbytes
        print(f"{name}: {flows} flows, {nbytes / 1e9:.2f} GB of frames, "
              f"{a.hours} h of traffic time, {tree_bytes(s) / 1e9:.2f} GB on disk")
    print(f"x10 / base: {frames['x10'] / frames['base']:.2f} times the bytes")
    mid = START_NS + a.hours * 3600 * 10**9 // 2
    windows = {
        "whole store": [],
        "one hour": ["--from", f"@{mid - 1800 * 10**9}", "--to", f"@{mid + 1800 * 10**9}"],
    }
    commands = {
        "top --key flow": ["top", "--key", "flow"],
        "top --key src": ["top", "--key", "src"],
        "dscp": ["dscp", "--config", config],
        "tcp --interval 1m": ["tcp", "--interval", "1m"],
        "matrix": ["matrix", "--config", config],
        "stragglers": ["stragglers", "--config", config, "--group", "gpu"],
    }
    target = {"whole store": 2.0, "one hour": 0.2}
    rows = []
    missed = 0
    for w, wargs in windows.items():
        for c, cargs in commands.items():
            t = {}
            for name, s in stores.items():
                cmd = [a.capsule] + cargs[:1] + ["--store", s] + cargs[1:] + wargs
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)  # warm the cache
                t[name] = best(cmd, a.runs)
            ratio = t["x10"][0] / t["base"][0]
            ok_t = max(v[0] for v in t.values()) < target[w]
            ok_r = ratio < 1.5
            missed += (not ok_t) + (not ok_r)
            rows.append((c, w, t["base"], t["x10"], ratio, ok_t, ok_r))
    print()
    print(f"{'command':<20} {'window':<12} {'base s':>8} {'cpu s':>6} {'x10 s':>8} "
          f"{'cpu s':>6} {'x10/base':>9}  {'target (wall)':<24}")
    for c, w, b, x, r, ok_t, ok_r in rows:
        tgt = f"< {target[w]:g} s {'met' if ok_t else 'MISSED'}, x10 {'met' if ok_r else 'MISSED'}"
        print(f"{c:<20} {w:<12} {b[0]:>8.3f} {b[1]:>6.2f} {x[0]:>8.3f} {x[1]:>6.2f} "
              f"{r:>9.2f}  {tgt}")
    if not a.keep:
        for s in stores.values():
            shutil.rmtree(s, ignore_errors=True)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
