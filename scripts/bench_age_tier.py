#!/usr/bin/env python3
"""What the age tier buys: a synthetic trace imported at level 1, then compacted (a copy of
the store each time) at higher levels. Prints store bytes, the ratio to level 1 and the CPU
seconds (user + sys of `capsule compact`, from /usr/bin/time -v) per GB of level-1 store.

    python3 scripts/bench_age_tier.py [--bin target/release/capsule] [--levels 3,6,9,15,19]
"""
import argparse, json, os, re, shutil, subprocess, sys, tempfile

def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr}")
    return r

def store_bytes(store):
    total = 0
    for root, _, files in os.walk(os.path.join(store, "segments")):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".pcapng.zst"))
    return total

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/capsule")
    ap.add_argument("--levels", default="3,6,9,15,19")
    ap.add_argument("--rate", default="200M")
    ap.add_argument("--duration", default="10s")
    a = ap.parse_args()
    capsule = os.path.abspath(a.bin)
    with tempfile.TemporaryDirectory(prefix="capsule-agetier-") as d:
        pcap = os.path.join(d, "t.pcap")
        run([capsule, "synth", "--seed", "5", "--duration", a.duration, "--rate", a.rate, "--write", pcap])
        base = os.path.join(d, "l1")
        run([capsule, "import", "--store", base, "--level", "1", pcap])
        b1 = store_bytes(base)
        print(f"trace {os.path.getsize(pcap)} bytes; level 1 store {b1} bytes")
        print(f"{'level':>5} {'bytes':>12} {'vs level 1':>10} {'CPU s':>7} {'CPU s/GB':>9}")
        print(f"{1:>5} {b1:>12} {1.0:>10.3f} {'-':>7} {'-':>9}")
        for lv in a.levels.split(","):
            s = os.path.join(d, f"l{lv}")
            shutil.copytree(base, s)
            r = run(["/usr/bin/time", "-v", capsule, "compact", "--store", s, "--level", lv, "--json"])
            user = float(re.search(r"User time \(seconds\): ([\d.]+)", r.stderr).group(1))
            sys_ = float(re.search(r"System time \(seconds\): ([\d.]+)", r.stderr).group(1))
            b = store_bytes(s)
            cpu = user + sys_
            print(f"{lv:>5} {b:>12} {b / b1:>10.3f} {cpu:>7.2f} {cpu / (b1 / 1e9):>9.1f}", flush=True)
            shutil.rmtree(s)

if __name__ == "__main__":
    main()
