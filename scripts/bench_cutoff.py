#!/usr/bin/env python3
"""Retention multiplier of the per-class cut-off, on the realistic synth trace.

What it measures, in one run: `capsule synth` makes the realistic trace once (an AI cluster
beside an enterprise network, with real payloads: --seed, --duration, --rate); it is imported
into a store whole (the baseline) and once per cut-off (`capsule import --config` with a
`[cutoff]` section: `bytes` per flow direction, and the keep rules given, by default EF, TCP
control packets and DNS stored whole). For each it prints the store's segment bytes on disk,
the multiplier (baseline bytes over these bytes: how many times as much time the same disk
holds), the share of packets stored, the import time, and checks that `capsule flows --json`
counts the same packets and bytes as the baseline (the index counts what was seen).

    python3 scripts/bench_cutoff.py [--dir /tmp/capsule-bench-cutoff] [--duration 20s]
                                    [--rate 400M] [--cutoffs 16K,64K,1M]
                                    [--keep 'dscp ef' --keep tcp-control ...]
                                    [--capsule target/release/capsule]

Needs a release build (`cargo build --release`). Writes only under --dir (removed first).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def flow_totals(capsule, store):
    out = run([capsule, "flows", "--store", store, "--json", "--limit", "100000000"]).stdout
    packets = seen = stored = cut = 0
    for line in out.splitlines():
        v = json.loads(line)
        packets += sum(v["packets"])
        seen += sum(v["bytes"])
        if v["cut"] is None:
            stored += sum(v["bytes"])
        else:
            cut += 1
            stored += sum(v["cut"]["stored_bytes"])
    return packets, seen, stored, cut


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/capsule-bench-cutoff")
    ap.add_argument("--duration", default="20s")
    ap.add_argument("--rate", default="400M")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--cutoffs", default="16K,64K,1M")
    ap.add_argument("--keep", action="append",
                    help="a keep filter (repeat); default: dscp ef, tcp-control, udp port 53")
    ap.add_argument("--capsule", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "capsule"))
    a = ap.parse_args()
    keep = a.keep if a.keep is not None else ["dscp ef", "tcp-control", "udp port 53"]
    capsule = os.path.abspath(a.capsule)
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    trace = os.path.join(a.dir, "trace.pcap")
    run([capsule, "synth", "--seed", a.seed, "--duration", a.duration, "--rate", a.rate,
         "-w", trace])
    print(f"trace: capsule synth --seed {a.seed} --duration {a.duration} --rate {a.rate}: "
          f"{os.path.getsize(trace)} bytes; keep whole: {', '.join(keep) or 'nothing'}")

    rows = []
    for cut in ["none"] + a.cutoffs.split(","):
        store = os.path.join(a.dir, f"store-{cut}")
        cmd = [capsule, "import", "--store", store, "--min-free", "0", "--json"]
        if cut != "none":
            conf = os.path.join(a.dir, f"cutoff-{cut}.toml")
            with open(conf, "w") as f:
                f.write("[cutoff]\n")
                f.write(f"bytes = {json.dumps(cut)}\n")
                f.write(f"keep = {json.dumps(keep)}\n")
            cmd += ["--config", conf]
        t0 = time.monotonic()
        rep = json.loads(run(cmd + [trace]).stdout)
        secs = time.monotonic() - t0
        seg = dir_bytes(os.path.join(store, "segments"))
        idx = dir_bytes(os.path.join(store, "index"))
        rows.append((cut, seg, idx, rep["packets"], rep.get("cut_packets", 0), secs,
                     flow_totals(capsule, store)))

    base = rows[0]
    print(f"{'cut-off':>8} {'segments':>12} {'index':>10} {'multiplier':>10} "
          f"{'stored pkts':>11} {'cut flows':>9} {'import s':>8}  counters")
    ok = True
    for cut, seg, idx, stored, cutp, secs, totals in rows:
        same = totals[:2] == base[6][:2]
        ok &= same
        share = stored / max(1, stored + cutp)
        print(f"{cut:>8} {seg:>12} {idx:>10} {base[1] / seg:>9.2f}x {share:>10.1%} "
              f"{totals[3]:>9} {secs:>8.2f}  {'= baseline' if same else 'DIFFER'}")
    print("multiplier: the baseline's segment bytes over these (ratios of one run); "
          "counters: flows --json packets and bytes seen, against the uncut import")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
