#!/usr/bin/env python3
"""Analytics CPU time, two binaries on one existing store, in the same run (issue 12).

For each index-only command (`top --key flow`, `top --key src`, `dscp`, `tcp --interval 1m`,
`matrix`, `stragglers --group gpu`: the command lines of scripts/bench_analytics.py) over the
whole store and over one hour in the middle, runs the baseline binary and the new one
alternately --runs times each and keeps the best CPU time (user + sys of the process, from
wait4's rusage: on a shared machine CPU time is steadier than wall time) and that run's peak
RSS. Before timing, it checks that both binaries print the same bytes (table and --json) for
every command and window, and stops if not. Prints one Markdown table: command, window,
baseline s, new s, new/baseline, new RSS MB, and whether the issue's targets (whole store
under 2 s, one hour under 200 ms) are met by the new binary.

The store is only read. Build one with
`capsule synth --seed 3 --duration 24h --rate 1M -w - | capsule import --store S --segment-size 256M -`.

    python3 scripts/bench_analytics_cpu.py --store S --hours 24 --old OLD_BIN --new NEW_BIN
                                           [--runs 3]
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_NS = 1_796_004_000 * 1_000_000_000  # synth's default start (2026-11-30T02:00:00Z)


def run(cmd):
    """Runs cmd, returns (stdout bytes, cpu seconds, max rss KB)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}")
    return out, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--hours", type=int, required=True, help="traffic time the store spans")
    ap.add_argument("--old", required=True, help="baseline capsule binary")
    ap.add_argument("--new", default=os.path.join(ROOT, "target/release/capsule"))
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    config = os.path.join(ROOT, "docs/examples/capsule.toml")
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
    rows = []
    for wname, w in windows.items():
        for cname, c in commands.items():
            args = c + ["--store", a.store] + w
            for extra in ([], ["--json"]):
                if run([a.old] + args + extra)[0] != run([a.new] + args + extra)[0]:
                    sys.exit(f"outputs differ: {cname} {wname} {' '.join(extra)}")
            best = {"old": (1e9, 0), "new": (1e9, 0)}
            for _ in range(a.runs):
                for name, binary in (("old", a.old), ("new", a.new)):
                    _, cpu, rss = run([binary] + args)
                    if cpu < best[name][0]:
                        best[name] = (cpu, rss)
            (o, _), (n, rss) = best["old"], best["new"]
            target = 2.0 if wname == "whole store" else 0.2
            rows.append((cname, wname, o, n, rss, "met" if n < target else "MISSED"))
            print(f"{cname:20} {wname:12} {o:.2f} {n:.2f}", file=sys.stderr)
    print("| command | window | before s | after s | after/before | after RSS MB | target |")
    print("|---|---|---:|---:|---:|---:|---|")
    for cname, wname, o, n, rss, met in rows:
        print(f"| {cname} | {wname} | {o:.3f} | {n:.3f} | {n / o:.2f} | {rss / 1024:.0f} | {met} |")


if __name__ == "__main__":
    main()
