#!/usr/bin/env python3
"""Scale benchmark (issue 34, "Done when"): the same synthetic traffic imported into stores of
about 10, 1,000 and 100,000 segments (the same --block-size, the segment size chosen so the
store holds the wanted count), then, for each store, the best of --runs (whole process, start
to exit, index and catalog in the page cache) of:

* a 1 ms window, `query --count`;
* a 5-tuple over the whole store, `query --count` (a short DNS exchange);
* a host over the whole store, `query --count` (the client of that exchange);
* `top --key src` over the whole span;

printed with the ratio to the smallest store. Goals: every lookup under 1.5x at 100,000
segments, `top` under 2 s.

    python3 scripts/bench_scale.py [--bin target/release/capsule] [--dir /dev/shm/capsule-scale]
        [--counts 10,1000,100000] [--rate 320M] [--duration 20s] [--keep]
        [--live [--live-rate 4000]]

With --live, each store's questions are asked while a writer is open on it (the appliance's
normal state): `capsule import -` of a pipe fed --live-rate bytes a second of other traffic
(a later hour of the same day, so the 1 ms window's answer does not change), which seals a
segment about every second on the small-segment stores (blocks cut by age every 0.1 s) and
keeps one open on the others. The questions start once the writer has opened (its open
checks every segment) and sealed two.
Each question is then timed --runs times, a quarter of a second apart, and the median and
the slowest are printed (the best would hide the questions that come just after a seal).
The live writer's segments stay in the store (a --keep store grows by them).

The stores go under --dir (default /dev/shm: a tmpfs, so building 100,000 segments is not
bound by one fsync per seal; a disk works too, slower to build). With --keep, stores already
built there (same counts, same traffic) are reused and left in place.
"""
import argparse, json, os, re, resource, shutil, statistics, struct, subprocess, sys, threading, time

# The questions run under the ordinary open-file limit: readers keep at most a quarter of
# it open (store/src/segment/handles.rs). Printed, since a store of more segments than the
# limit failed every lookup with "Too many open files" before that budget.
print(f"open-file limit (soft, hard): {resource.getrlimit(resource.RLIMIT_NOFILE)}", flush=True)

def run(cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode not in (0,):
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r

def runs_of(cmd, runs, gap=0.0):
    """`runs` runs of `cmd`, `gap` seconds before each: their times and the first line of
    the last one's output, or None and the failure."""
    times, out = [], None
    for _ in range(runs):
        time.sleep(gap)
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if r.returncode not in (0, 3):
            return None, f"failed ({r.returncode}): {r.stderr.strip().splitlines()[-1][-160:]}"
        out = r.stdout.strip().splitlines()[:1]
    return times, (out[0] if out else "")

def best(cmd, runs):
    times, out = runs_of(cmd, runs)
    return (min(times) if times else None), out

def timed(cmd, runs, gap):
    """The median and the slowest of `runs` runs, `gap` seconds apart (a live store)."""
    times, out = runs_of(cmd, runs, gap)
    return ((statistics.median(times), max(times)) if times else None), out

class Live:
    """A writer open on `store`: `capsule import -` fed `rate` bytes a second of `pcap`."""
    def __init__(self, capsule, store, pcap, rate, block_size, seg):
        self.p = subprocess.Popen(
            [capsule, "import", "--store", store, "--block-size", str(block_size),
             "--segment-size", str(seg), "--min-free", "0", "-"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.stop = threading.Event()
        self.fed = 0
        self.go = threading.Event()
        def feed():
            # whole packet records (a classic pcap) paced at `rate` bytes a second, so that
            # stopping leaves no packet cut short; the first one alone until the writer has
            # opened (`go`: its open checks every segment, and a pipe filled meanwhile would
            # come as a burst of seals)
            with open(pcap, "rb") as f:
                b = f.read(24)
                end = "<" if b[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
                first = True
                while not self.stop.is_set():
                    h = f.read(16)
                    if len(h) < 16:
                        break
                    b += h + f.read(struct.unpack(end + "IIII", h)[2])
                    try:
                        self.p.stdin.write(b)
                        self.p.stdin.flush()
                    except BrokenPipeError:
                        break
                    self.fed += len(b)
                    if first:
                        first = False
                        self.go.wait()
                    time.sleep(len(b) / rate)
                    b = b""
        self.t = threading.Thread(target=feed, daemon=True)
        self.t.start()

    def close(self):
        self.stop.set()
        self.t.join()
        self.p.stdin.close()
        err = self.p.stderr.read()
        if self.p.wait() != 0:
            sys.exit(f"the live writer failed ({self.p.returncode}): {err[-2000:]}")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/capsule")
    ap.add_argument("--dir", default="/dev/shm/capsule-scale" if os.path.isdir("/dev/shm") else "/tmp/capsule-scale")
    ap.add_argument("--counts", default="10,1000,100000")
    ap.add_argument("--rate", default="320M")
    ap.add_argument("--duration", default="20s")
    ap.add_argument("--block-size", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--live", action="store_true")
    ap.add_argument("--live-rate", type=int, default=4000)
    a = ap.parse_args()
    capsule = os.path.abspath(a.bin)
    os.makedirs(a.dir, exist_ok=True)
    pcap = os.path.join(a.dir, f"synth-{a.rate}-{a.duration}.pcap")
    if not os.path.exists(pcap):
        run([capsule, "synth", "--seed", "7", "--duration", a.duration, "--rate", a.rate, "--write", pcap + ".part"])
        os.rename(pcap + ".part", pcap)
    size = os.path.getsize(pcap)
    counts = [int(c) for c in a.counts.split(",")]
    stores, segsize = {}, {}
    for n in counts:
        s = os.path.join(a.dir, f"store-{n}")
        done = os.path.join(s, "bench-built")
        if not (a.keep and os.path.exists(done)):
            shutil.rmtree(s, ignore_errors=True)
            # compressed blocks are about 1/1.45 of the traffic: n segments of this size
            seg = int(size / 1.45 / n)
            # a 4K block compresses to about 2.8K: a segment of the block size seals after
            # two blocks, the most segments this traffic makes at this block size
            seg = a.block_size if seg < 1.5 * a.block_size else seg
            open(os.path.join(a.dir, f"segment-size-{n}"), "w").write(str(seg))
            t = time.perf_counter()
            run([capsule, "import", "--store", s, "--block-size", str(a.block_size),
                 "--segment-size", str(seg), "--min-free", "0", pcap])
            open(done, "w").write(f"{time.perf_counter() - t:.1f}\n")
        segs = sum(1 for f in os.listdir(os.path.join(s, "segments")) if f.endswith(".pcapng.zst"))
        stores[n] = (s, segs)
        sz = os.path.join(a.dir, f"segment-size-{n}")
        seg = int(size / 1.45 / n)
        segsize[n] = int(open(sz).read()) if os.path.exists(sz) else (a.block_size if seg < 1.5 * a.block_size else seg)
        print(f"store of {segs} segments: {s} (built in {open(done).read().strip()} s)", flush=True)
    if a.build_only:
        return
    s0 = stores[counts[0]][0]
    # a short DNS exchange: its 5-tuple and its client
    flows = run([capsule, "flows", "--store", s0, "--json", "udp port 53"], check=False).stdout
    rows = [json.loads(l) for l in flows.splitlines() if l.startswith("{")]
    f = rows[len(rows) // 2]
    cli, srv = ("b", "a") if f.get("client") == "b" else ("a", "b")
    qs = [
        ("1 ms window --count", ["query", "--count", "--from", "2026-11-30T02:00:10Z", "--to", "+1ms"]),
        ("5-tuple, whole store --count", ["query", "--count", f"{f['proto_name']} and host {f[cli]} and port {f[cli + '_port']} and host {f[srv]} and port {f[srv + '_port']}"]),
        ("host, whole store --count", ["query", "--count", f"host {f[cli]}"]),
        ("top --key src, whole span", ["top", "--key", "src"]),
    ]
    if a.live:
        return live(a, capsule, counts, stores, segsize, qs)
    print(f"\n{'question':<30}" + "".join(f"{stores[n][1]:>12} seg {'ratio':>6}" for n in counts))
    for name, args in qs:
        line, base = f"{name:<30}", None
        answers = []
        for n in counts:
            secs, first = best([capsule] + args[:1] + ["--store", stores[n][0]] + args[1:], a.runs)
            answers.append(first)
            if secs is None:
                line += f"{'failed':>15} {'-':>6}"
                continue
            base = base or secs
            line += f"{secs * 1000:>13.1f}ms {secs / base:>5.2f}x"
        print(line, flush=True)
        if name.endswith("--count") or any(x.startswith("failed") for x in answers):
            print(f"{'':<30}" + "".join(f"  {x.split(';')[0]:>20}" for x in answers))
    print(f"\n5-tuple: {qs[1][1][-1]}")

def live(a, capsule, counts, stores, segsize, qs):
    """Each store's questions while a writer is open on it: median and slowest of --runs."""
    pcap = os.path.join(a.dir, "live-1M-300s.pcap")
    if not os.path.exists(pcap):
        run([capsule, "synth", "--seed", "8", "--duration", "300s", "--rate", "1M",
             "--start", "2026-11-30T05:00:00Z", "--write", pcap + ".part"])
        os.rename(pcap + ".part", pcap)
    res = {}
    for n in counts:
        s = stores[n][0]
        before = sum(1 for f in os.listdir(os.path.join(s, "segments")) if f.endswith(".pcapng.zst"))
        w = Live(capsule, s, pcap, a.live_rate, a.block_size, segsize[n])
        # the writer's open checks every segment (seconds at 100,000): the questions start
        # once it writes (a new segment in the directory) and, where it seals, has sealed two
        seals = 2 if segsize[n] <= 2 * a.block_size else 0
        t = time.perf_counter()
        while True:
            names = os.listdir(os.path.join(s, "segments"))
            sealed = sum(1 for f in names if f.endswith(".pcapng.zst"))
            if any(f.endswith(".pcapng.zst.open") for f in names):
                w.go.set()
                if sealed >= before + seals:
                    break
            if time.perf_counter() - t > 300 or w.p.poll() is not None:
                w.close()
                sys.exit("the live writer wrote nothing")
            time.sleep(0.2)
        time.sleep(1)
        t = time.perf_counter()
        for name, args in qs:
            res[(name, n)] = timed([capsule] + args[:1] + ["--store", s] + args[1:], a.runs, 0.25)
        secs = time.perf_counter() - t
        w.close()
        after = sum(1 for f in os.listdir(os.path.join(s, "segments")) if f.endswith(".pcapng.zst"))
        print(f"store of {stores[n][1]} segments, live: {after - before} sealed while asked "
              f"({secs:.0f} s of questions, {w.fed} bytes fed)", flush=True)
    print(f"\n{'question (live writer)':<30}" + "".join(f"{stores[n][1]:>10} seg median (slowest) {'ratio':>6}" for n in counts))
    for name, _ in qs:
        line, base = f"{name:<30}", None
        answers = []
        for n in counts:
            t, first = res[(name, n)]
            answers.append(first)
            if t is None:
                line += f"{'failed':>31} {'-':>6}"
                continue
            med, worst = t
            base = base or med
            line += f"{med * 1000:>19.1f}ms ({worst * 1000:>7.1f}ms) {med / base:>5.2f}x"
        print(line, flush=True)
        if name.endswith("--count") or any(x.startswith("failed") for x in answers):
            print(f"{'':<30}" + "".join(f"  {x.split(';')[0]:>36}" for x in answers))
    print(f"\n5-tuple: {qs[1][1][-1]}")

if __name__ == "__main__":
    main()
