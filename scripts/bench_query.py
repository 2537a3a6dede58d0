#!/usr/bin/env python3
"""Query benchmark: capsule's indexed store against plain-file tools on the same packets.

What it measures, in one run:

* four queries, each answered by `capsule query` from a store and by the usual tool from the
  original pcap: a 1 ms window and a 1 s window in the middle of the capture (editcap -A/-B),
  one TCP 5-tuple over the whole capture, and every DSCP 46 (EF) packet (tcpdump -r with a
  BPF filter); optionally tshark -Y for reference (--tshark, about 25 s a query on 2 GB);
* for each: best-of-N wall time of both sides (whole process, start to exit; the machine is
  shared and noisy, the best run is the least disturbed), the speed-up, the fraction of
  blocks capsule's plan reads (`capsule query ... --explain`), and the packet count of both
  outputs, counted here by walking the pcap records (and the truth file's count where it
  knows it); a count mismatch is printed loudly and makes the exit status 1;
* the store's size against the pcap's, and the side index as a fraction of the segments;
* the targets of the query issue next to the measured values, each marked met or MISSED.

How: `capsule synth --seed 5` writes a ~2.2 GB pcap and its truth file (the 5-tuple is an
office TCP flow picked from the truth, whose packet counts are shown too), `capsule import`
stores it; both are reused when already in --dir (the store only if it is newer than the
capsule binary). Every input file is read once before timing, so all tools run from the page
cache. Outputs go to a temporary directory on tmpfs (/dev/shm) and are deleted at the end.

    python3 scripts/bench_query.py [--dir /tmp/capsule-bench-query] [--runs 3]
                                   [--size-gb 2.2] [--capsule PATH] [--tshark]
                                   [--live] [--live-size-gb 0.5] [--live-mbps 1000]

With --live (root; iproute2 and tcpreplay), the open segment against the sealed one
(issue 10): a pcap of --live-size-gb (`capsule synth --seed 5`) is replayed with tcpreplay
over a veth between two network namespaces this script makes (and deletes on exit, also on
failure or Ctrl-C) into `capsule capture --mode afpacket` with one segment for the whole run;
once every packet is stored and while the segment is still open (its side index is its
journal), each capsule query is timed (best of --runs), then capture is stopped (SIGTERM
seals the segment and writes its index) and each is timed again. It prints both times, the
open/sealed ratio against the target (open within 1.5x of sealed), the blocks each plan
reads, and the packet counts (open and sealed must agree); with strace installed, also the
pread64 and system calls of one run of each query (a figure the machine's load does not
move). Traffic goes only over that veth.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

# `capsule synth --rate 1G` writes about 127.2 MB of pcap per second of traffic (the wire
# rate plus 16 bytes of record header a packet): 17 s make 2.16 GB.
PCAP_BYTES_PER_SECOND = 127.2e6
SEED = 5
DEFAULT_CAPSULE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                "..", "target", "release", "capsule"))
UTC_ENV = dict(os.environ, TZ="UTC")  # editcap and tshark read times in local time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/capsule-bench-query")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per command; the best counts")
    ap.add_argument("--size-gb", type=float, default=2.2, help="size of the synthetic pcap")
    ap.add_argument("--capsule", default=DEFAULT_CAPSULE, help="default: %(default)s")
    ap.add_argument("--tshark", action="store_true",
                    help="also time tshark -Y (one run per query, about 25 s each on 2 GB)")
    ap.add_argument("--live", action="store_true",
                    help="time queries on a live capture's open segment, then sealed")
    ap.add_argument("--live-size-gb", type=float, default=0.5,
                    help="size of the pcap replayed into the live capture")
    ap.add_argument("--live-mbps", default="1000", help="tcpreplay --mbps for --live")
    return ap.parse_args()


# ---------------------------------------------------------------- data set


def prepare_pcap(args, pcap, truth_path, size_gb=None):
    """Writes the synthetic pcap and truth file unless a pcap of about the right size is there."""
    want = (size_gb or args.size_gb) * 1e9
    if (os.path.exists(pcap) and os.path.exists(truth_path)
            and abs(os.path.getsize(pcap) - want) <= 0.1 * want):
        return False
    seconds = max(1, round(want / PCAP_BYTES_PER_SECOND))
    print(f"writing {pcap}: capsule synth --seed {SEED} --duration {seconds}s --rate 1G",
          flush=True)
    subprocess.run([args.capsule, "synth", "--seed", str(SEED), "--duration", f"{seconds}s",
                    "--rate", "1G", "-w", pcap, "--truth", truth_path],
                   check=True, stdout=subprocess.DEVNULL)
    return True


def store_packets(capsule, store):
    """Packets in the store's sealed segments, or None when it has none or an open segment."""
    if not os.path.isdir(os.path.join(store, "segments")):
        return None
    out = subprocess.run([capsule, "segments", "--store", store, "--json"],
                         check=True, capture_output=True, text=True).stdout
    segs = [json.loads(line) for line in out.splitlines() if line.strip()]
    if not segs or any(s["state"] != "sealed" for s in segs):
        return None
    return sum(s["packets"] for s in segs)


def prepare_store(args, store, pcap, truth, pcap_is_new):
    """Imports the pcap unless the store already holds exactly its packets and was written
    by this capsule binary or a later one (a rebuilt writer may lay blocks out differently)."""
    stamp = os.path.join(store, "capsule-store.json")
    if pcap_is_new:
        why = "new pcap"
    elif store_packets(args.capsule, store) != truth["packets"]:
        why = "no store of this pcap"
    elif os.path.getmtime(stamp) < os.path.getmtime(args.capsule):
        why = "capsule binary is newer than the store"
    else:
        return
    shutil.rmtree(store, ignore_errors=True)
    print(f"importing into {store} ({why})", flush=True)
    subprocess.run([args.capsule, "import", "--store", store, pcap],
                   check=True, stdout=subprocess.DEVNULL)


def files_under(path):
    return [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]


def warm(paths):
    """Reads every file once so that the timed runs find it in the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def dir_bytes(path):
    return sum(os.path.getsize(p) for p in files_under(path))


# ---------------------------------------------------------------- queries


def ns_iso(ns, sep="T"):
    """ns since the epoch as 'YYYY-MM-DD<sep>hh:mm:ss.nnnnnnnnn' (UTC)."""
    t = datetime.datetime.fromtimestamp(ns // 10**9, datetime.timezone.utc)
    return t.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + f".{ns % 10**9:09d}"


def window_query(name, pcap, from_ns, to_ns, out):
    """A time window: capsule --from/--to against editcap -A/-B (both [from, to), UTC)."""
    return {
        "name": name,
        "capsule": ["--from", f"@{from_ns}", "--to", f"@{to_ns}"],
        "tool": "editcap",
        "tool_cmd": ["editcap", "-F", "nsecpcap", "-A", ns_iso(from_ns) + "Z",
                     "-B", ns_iso(to_ns) + "Z", pcap, out],
        "tshark": f'frame.time >= "{ns_iso(from_ns, " ")}" and frame.time < "{ns_iso(to_ns, " ")}"',
        "truth": None,
    }


def bpf_either_tag(expr):
    """tcpdump needs `vlan and` before the fields of a VLAN-tagged packet: match both kinds."""
    return f"({expr}) or (vlan and {expr})"


def pick_flow(truth):
    """An office TCP flow to port 443 or 80 of a few dozen packets, nearest the middle.

    Returns (a, b, port_a, port_b, packets in both directions). Skips the persistent
    GPU, storage, rogue-EF and exfil flows (none is on the office VLAN 200 with those ports)
    and any 5-tuple not seen exactly once in each direction."""
    facts = truth["facts"]
    special = set(facts["gpu_nodes"]) | set(facts["rogue_ef_hosts"]) | {facts["exfil"]["src"]}
    by_tuple = {}
    for f in truth["flows"]:
        if f["protocol"] == 6:
            key = frozenset([(f["src"], f["src_port"]), (f["dst"], f["dst_port"])])
            by_tuple.setdefault(key, []).append(f)
    mid = truth["config"]["start_ns"] + truth["config"]["duration_ns"] // 2
    candidates = []
    for key, flows in by_tuple.items():
        fwd = [f for f in flows if f["dst_port"] in (443, 80)]
        if len(flows) != 2 or len(fwd) != 1 or len(key) != 2:
            continue
        f = fwd[0]
        packets = sum(x["packets"] for x in flows)
        if (f["vlan"] == 200 and f["ip_version"] == 4 and 24 <= packets <= 96
                and f["src"] not in special and f["dst"] not in special):
            candidates.append((abs(f["first_ns"] - mid), f["src"], f["dst"],
                               f["src_port"], f["dst_port"], packets))
    if not candidates:
        sys.exit("no suitable office TCP flow in the truth file")
    return min(candidates)[1:]


def five_tuple_query(pcap, truth, out):
    a, b, pa, pb, packets = pick_flow(truth)
    bpf = f"host {a} and host {b} and tcp port {pa} and tcp port {pb}"
    return {
        "name": "5-tuple",
        "detail": f"{a}:{pa} <-> {b}:{pb} tcp",
        "capsule": [f"host {a} and host {b} and tcp and port {pa} and port {pb}"],
        "tool": "tcpdump -r",
        "tool_cmd": ["tcpdump", "-r", pcap, "-w", out, bpf_either_tag(bpf)],
        "tshark": f"ip.addr == {a} and ip.addr == {b} and tcp.port == {pa} and tcp.port == {pb}",
        "truth": packets,
    }


def dscp_query(pcap, truth, out):
    dscp46 = "((ip and (ip[1] & 0xfc) = 0xb8) or (ip6 and (ip6[0:2] & 0x0fc0) = 0x0b80))"
    flows = [f for f in truth["flows"] if 46 in f["dscp"]]
    known = all(f["dscp"] == [46] for f in flows)  # a mixed flow: truth cannot count its EF
    return {
        "name": "DSCP 46",
        "capsule": ["dscp 46"],
        "tool": "tcpdump -r",
        "tool_cmd": ["tcpdump", "-r", pcap, "-w", out, bpf_either_tag(dscp46)],
        "tshark": "ip.dsfield.dscp == 46 or ipv6.tclass.dscp == 46",
        "truth": sum(f["packets"] for f in flows) if known else None,
    }


def queries(pcap, truth, out):
    start, duration = truth["config"]["start_ns"], truth["config"]["duration_ns"]
    mid = start + duration // 2
    ms, s = 10**6, 10**9
    return [
        window_query("1 ms window", pcap, mid, mid + ms, out),
        window_query("1 s window", pcap, mid - s // 2, mid + s // 2, out),
        five_tuple_query(pcap, truth, out),
        dscp_query(pcap, truth, out),
    ]


# ---------------------------------------------------------------- measuring


def run(cmd, env=None):
    """Runs cmd to completion, returns its wall time in seconds; exits if it fails."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.decode(errors='replace')}")
    return wall


def best_of(runs, cmd, out, env=None):
    """Best wall time of `runs` runs; the output file is removed before each."""
    walls = []
    for _ in range(runs):
        if os.path.exists(out):
            os.remove(out)
        walls.append(run(cmd, env))
    return min(walls)


def count_pcap(path):
    """Packets in a pcap file (any byte order, µs or ns), by walking the record headers."""
    with open(path, "rb") as f:
        magic = f.read(24)[:4]
        order = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",
                 b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}.get(magic)
        if order is None:
            sys.exit(f"{path}: not a pcap file (magic {magic.hex()})")
        n = 0
        while len(rec := f.read(16)) == 16:
            f.seek(struct.unpack(order + "I", rec[8:12])[0], os.SEEK_CUR)
            n += 1
        return n


PLAN = re.compile(r"plan: read (\d+) of (\d+) blocks \(([\d.]+)%\) in (\d+) of (\d+) segments")


def explain(capsule, store, q):
    """(blocks read, blocks total) from capsule's plan for the query."""
    out = subprocess.run([capsule, "query", "--store", store, *q["capsule"], "--explain"],
                         check=True, capture_output=True, text=True).stdout
    m = PLAN.search(out)
    if not m:
        sys.exit(f"no plan line in `capsule query --explain` output:\n{out}")
    if "without an index" in out:
        print(f"warning: {q['name']}: some segments have no side index", file=sys.stderr)
    return int(m.group(1)), int(m.group(2))


def measure(args, store, pcap, q, out):
    """Times capsule and the tool (and tshark) on one query and counts what each selected."""
    r = {"q": q}
    r["blocks"], r["blocks_total"] = explain(args.capsule, store, q)
    r["capsule_s"] = best_of(args.runs, [args.capsule, "query", "--store", store,
                                         *q["capsule"], "-w", out], out)
    r["capsule_n"] = count_pcap(out)
    r["tool_s"] = best_of(args.runs, q["tool_cmd"], out, UTC_ENV)
    r["tool_n"] = count_pcap(out)
    if args.tshark:
        r["tshark_s"] = best_of(1, ["tshark", "-r", pcap, "-Y", q["tshark"], "-F", "nsecpcap",
                                    "-w", out], out, UTC_ENV)
        r["tshark_n"] = count_pcap(out)
    os.remove(out)
    return r


# ---------------------------------------------------------------- report


def mark(ok):
    return "met" if ok else "MISSED"


def counts_agree(r):
    """Capsule, the tool, tshark (if run) and the truth file (if it knows) count the same."""
    n = r["capsule_n"]
    return (r["tool_n"] == n and r.get("tshark_n", n) == n
            and r["q"]["truth"] in (None, n))


def print_results(args, results):
    tshark = f" {'tshark s':>9} {'tshark pkts':>11}" if args.tshark else ""
    print(f"{'query':<12} {'capsule ms':>10} {'tool':<11} {'tool ms':>8} {'speed-up':>8} "
          f"{'blocks read':>16} {'capsule pkts':>12} {'tool pkts':>10} {'truth':>8} "
          f"{'counts':<8}{tshark}")
    for r in results:
        q = r["q"]
        blocks = f"{r['blocks']}/{r['blocks_total']} {100 * r['blocks'] / r['blocks_total']:5.2f}%"
        line = (f"{q['name']:<12} {1e3 * r['capsule_s']:10.1f} {q['tool']:<11} "
                f"{1e3 * r['tool_s']:8.1f} {r['tool_s'] / r['capsule_s']:7.1f}x {blocks:>16} "
                f"{r['capsule_n']:12d} {r['tool_n']:10d} "
                f"{'-' if q['truth'] is None else q['truth']:>8} "
                f"{'same' if counts_agree(r) else '*MISMATCH*':<8}")
        if args.tshark:
            line += f" {r['tshark_s']:9.1f} {r['tshark_n']:11d}"
        print(line)
    for r in results:
        if "detail" in r["q"]:
            print(f"{r['q']['name']}: {r['q']['detail']}")
    for r in results:
        if not counts_agree(r):
            print(f"!!! MISMATCH in {r['q']['name']}: capsule selected {r['capsule_n']} packets, "
                  f"{r['q']['tool']} {r['tool_n']}"
                  + (f", tshark {r['tshark_n']}" if args.tshark else "")
                  + (f", the truth file says {r['q']['truth']}" if r["q"]["truth"] else ""))


def print_sizes(pcap, store):
    pcap_b = os.path.getsize(pcap)
    seg_b = dir_bytes(os.path.join(store, "segments"))
    idx_b = dir_bytes(os.path.join(store, "index"))
    print(f"pcap {pcap_b / 1e6:.0f} MB; store {(seg_b + idx_b) / 1e6:.0f} MB "
          f"({(seg_b + idx_b) / pcap_b:.2f}x the pcap): segments {seg_b / 1e6:.0f} MB, "
          f"index {idx_b / 1e3:.0f} kB = {100 * idx_b / seg_b:.3f}% of stored bytes")
    return idx_b / seg_b


def print_targets(results, index_fraction):
    by = {r["q"]["name"]: r for r in results}
    w, t, d = by["1 ms window"], by["5-tuple"], by["DSCP 46"]
    rows = [
        ("1 ms window wall", "< 50 ms", f"{1e3 * w['capsule_s']:.1f} ms", w["capsule_s"] < 0.05),
        ("1 ms window vs editcap", ">= 20x", f"{w['tool_s'] / w['capsule_s']:.1f}x",
         w["tool_s"] / w["capsule_s"] >= 20),
        ("5-tuple vs tcpdump -r", ">= 10x", f"{t['tool_s'] / t['capsule_s']:.1f}x",
         t["tool_s"] / t["capsule_s"] >= 10),
        ("DSCP 46 vs tcpdump -r", ">= 2x", f"{d['tool_s'] / d['capsule_s']:.2f}x",
         d["tool_s"] / d["capsule_s"] >= 2),
        ("index size", "<= 3% stored", f"{100 * index_fraction:.3f}%", index_fraction <= 0.03),
    ]
    print(f"{'target':<24} {'goal':<13} {'measured':>10}  result")
    for name, goal, measured, ok in rows:
        print(f"{name:<24} {goal:<13} {measured:>10}  {mark(ok)}")


# ---------------------------------------------------------------- live: open vs sealed


class Netns:
    """Two network namespaces joined by a veth pair (a sends, b captures), deleted by
    close(). Nothing is configured on the veth but the link: no addresses, IPv6 off, so the
    kernel sends nothing of its own and replayed traffic goes nowhere else."""

    def __init__(self):
        pid = os.getpid()
        self.a, self.b = f"capsule-bq{pid}-a", f"capsule-bq{pid}-b"
        self.if_a, self.if_b = f"cbqa{pid % 10**7}", f"cbqb{pid % 10**7}"
        self.made = []
        for ns in (self.a, self.b):
            subprocess.run(["ip", "netns", "add", ns], check=True)
            self.made.append(ns)
        subprocess.run(["ip", "link", "add", self.if_a, "netns", self.a, "type", "veth",
                        "peer", self.if_b, "netns", self.b], check=True)
        for ns, ifname in ((self.a, self.if_a), (self.b, self.if_b)):
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                            f"net.ipv6.conf.{ifname}.disable_ipv6=1"], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", ifname, "mtu", "1600"], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", ifname, "up"], check=True)

    def close(self):
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        self.made = []


def segments_json(capsule, store):
    out = subprocess.run([capsule, "segments", "--store", store, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def live_queries(capsule, store, pcap, truth, out):
    """The queries of the plain-file benchmark, with the windows moved to capture time."""
    segs = segments_json(capsule, store)
    first = min(s["first_ns"] for s in segs if s["first_ns"])
    last = max(s["last_ns"] for s in segs if s["last_ns"])
    mid = (first + last) // 2
    ms, sec = 10**6, 10**9
    return [
        window_query("1 ms window", pcap, mid, mid + ms, out),
        window_query("1 s window", pcap, mid - sec // 2, mid + sec // 2, out),
        five_tuple_query(pcap, truth, out),
        dscp_query(pcap, truth, out),
    ]


def syscalls(cmd, out):
    """(pread64 calls, all system calls) of one run of `cmd` under `strace -c -f`: a figure
    the machine's load does not move. None without strace."""
    if shutil.which("strace") is None:
        return None
    if os.path.exists(out):
        os.remove(out)
    with tempfile.NamedTemporaryFile(mode="r", suffix=".strace") as log:
        subprocess.run(["strace", "-c", "-f", "-o", log.name, *cmd], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        preads = total = 0
        for line in log.read().splitlines():
            f = line.split()
            if len(f) >= 5 and f[-1] == "pread64":
                preads = int(f[3])
            if len(f) >= 4 and f[-1] == "total":
                total = int(f[3])
    return preads, total


def cpu_of(runs, cmd, out):
    """Least CPU time (user + system, of the process and its threads) of `runs` runs."""
    import resource
    best = None
    for _ in range(runs):
        if os.path.exists(out):
            os.remove(out)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        run(cmd)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = cpu if best is None else min(best, cpu)
    return best


def time_capsule(args, store, q, out):
    r = {}
    r["blocks"], r["blocks_total"] = explain(args.capsule, store, q)
    cmd = [args.capsule, "query", "--store", store, *q["capsule"], "-w", out]
    r["s"] = best_of(args.runs, cmd, out)
    r["cpu"] = cpu_of(args.runs, cmd, out)
    r["n"] = count_pcap(out)
    r["sys"] = syscalls(cmd, out)
    os.remove(out)
    return r


def live_bench(args):
    """Queries on a live capture's open segment, then on the same segment sealed."""
    for tool in ("ip", "tcpreplay"):
        if shutil.which(tool) is None:
            sys.exit(f"--live needs {tool}")
    if os.geteuid() != 0:
        sys.exit("--live needs root (network namespaces, a packet socket)")
    os.makedirs(args.dir, exist_ok=True)
    pcap = os.path.join(args.dir, "live.pcap")
    truth_path = os.path.join(args.dir, "live-truth.json")
    prepare_pcap(args, pcap, truth_path, args.live_size_gb)
    with open(truth_path) as f:
        truth = json.load(f)
    store = os.path.join(args.dir, "live-store")
    shutil.rmtree(store, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix="capsule-bench-query-",
                           dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    net = Netns()
    cap = None
    try:
        cap = subprocess.Popen(["ip", "netns", "exec", net.b, args.capsule, "capture",
                                "--iface", net.if_b, "--store", store, "--mode", "afpacket",
                                "--segment-size", "1T"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        while True:
            line = cap.stderr.readline()
            if "capturing on" in line:
                break
            if not line or time.time() > deadline:
                sys.exit(f"capture did not start: {line}")
        warm([pcap])
        print(f"replaying {pcap} ({truth['packets']} packets) at {args.live_mbps} Mbit/s",
              file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", net.a, "tcpreplay", "-q", "-i", net.if_a,
                        "--mbps", args.live_mbps, pcap], check=True, stdout=subprocess.DEVNULL)
        replay_s = time.perf_counter() - t0
        # Every packet stored (the count stops growing), the segment still open.
        last, stable_since = -1, time.time()
        while time.time() - stable_since < 1.5:
            time.sleep(0.25)
            n = sum(s["packets"] for s in segments_json(args.capsule, store))
            if n != last:
                last, stable_since = n, time.time()
        segs = segments_json(args.capsule, store)
        if any(s["state"] == "sealed" for s in segs):
            sys.exit("a segment was sealed during the replay; the open segment must hold it all")
        out = os.path.join(tmp, "out.pcap")
        qs = live_queries(args.capsule, store, pcap, truth, out)
        warm(files_under(store))
        opened = []
        for q in qs:
            print(f"timing {q['name']} on the open segment ...", file=sys.stderr, flush=True)
            opened.append(time_capsule(args, store, q, out))
        cap.terminate()
        summary, _ = cap.communicate(timeout=60)
        cap = None
        warm(files_under(store))
        sealed = []
        for q in qs:
            print(f"timing {q['name']} sealed ...", file=sys.stderr, flush=True)
            sealed.append(time_capsule(args, store, q, out))
    finally:
        if cap is not None:
            cap.terminate()
            try:
                cap.wait(timeout=30)
            except subprocess.TimeoutExpired:
                cap.kill()
        net.close()
        shutil.rmtree(tmp, ignore_errors=True)

    stored = sum(s["packets"] for s in segments_json(args.capsule, store))
    dropped = re.search(r"(\d+) dropped", summary or "")
    print(f"open segment vs sealed: {truth['packets']} packets replayed at {args.live_mbps} "
          f"Mbit/s in {replay_s:.1f} s, {stored} stored"
          + (f", capture says {dropped.group(1)} dropped" if dropped else "")
          + f"; best of {args.runs} runs")
    print(f"{'query':<12} {'open ms':>9} {'sealed ms':>9} {'open/sealed':>11} {'target':<8} "
          f"{'blocks open':>12} {'blocks sealed':>13} {'pkts open':>10} {'pkts sealed':>11}")
    ok = True
    for q, o, s in zip(qs, opened, sealed):
        ratio = o["s"] / s["s"]
        same = o["n"] == s["n"]
        ok &= same
        print(f"{q['name']:<12} {1e3 * o['s']:9.1f} {1e3 * s['s']:9.1f} {ratio:10.2f}x "
              f"{mark(ratio <= 1.5):<8} {o['blocks']:>5}/{o['blocks_total']:<6} "
              f"{s['blocks']:>6}/{s['blocks_total']:<6} {o['n']:10d} {s['n']:11d}"
              + ("" if same else "  *MISMATCH*"))
    if all(o["sys"] for o in opened) and all(s["sys"] for s in sealed):
        print("system calls of one run (strace -c -f), and CPU ms (user + system, best of "
              f"{args.runs}), open vs sealed:")
        print(f"{'query':<12} {'pread64 open':>12} {'pread64 sealed':>14} "
              f"{'all open':>9} {'all sealed':>10} {'cpu open':>9} {'cpu sealed':>10}")
        for q, o, s in zip(qs, opened, sealed):
            print(f"{q['name']:<12} {o['sys'][0]:12d} {s['sys'][0]:14d} {o['sys'][1]:9d} "
                  f"{s['sys'][1]:10d} {1e3 * o['cpu']:9.1f} {1e3 * s['cpu']:10.1f}")
    for q in qs:
        if "detail" in q:
            print(f"{q['name']}: {q['detail']}")
    return 0 if ok else 1


def main():
    args = parse_args()
    if not os.access(args.capsule, os.X_OK):
        sys.exit(f"{args.capsule} not found: build it with `cargo build --release`")
    if args.live:
        return live_bench(args)
    os.makedirs(args.dir, exist_ok=True)
    pcap, truth_path = os.path.join(args.dir, "synth.pcap"), os.path.join(args.dir, "truth.json")
    store = os.path.join(args.dir, "store")
    new = prepare_pcap(args, pcap, truth_path)
    with open(truth_path) as f:
        truth = json.load(f)
    prepare_store(args, store, pcap, truth, new)
    warm([pcap, *files_under(store)])

    tmp = tempfile.mkdtemp(prefix="capsule-bench-query-",
                           dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        out = os.path.join(tmp, "out.pcap")
        results = []
        for q in queries(pcap, truth, out):
            print(f"timing {q['name']} ...", file=sys.stderr, flush=True)
            results.append(measure(args, store, pcap, q, out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"capsule query vs plain-file tools on {pcap} ({truth['packets']} packets, "
          f"{truth['config']['duration_ns'] / 1e9:g} s of traffic); best of {args.runs} runs"
          + (", tshark one run" if args.tshark else "") + "; speed-up = tool / capsule")
    print_results(args, results)
    print()
    index_fraction = print_sizes(pcap, store)
    print()
    print_targets(results, index_fraction)
    return 0 if all(counts_agree(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
