#!/usr/bin/env python3
"""How far each capture method's timestamps are from the truth, on one veth, same traffic.

For each method (AF_PACKET, and every XDP program variant this kernel loads: metadata,
headroom, plain) the same pcap is replayed at a fixed packet rate (`tcpreplay --pps`) into
one end of a veth pair while `capsule capture` records the other end. In the same run,
`tcpdump --time-stamp-precision nano -Q out` records the *sending* end: its kernel
timestamps, taken as each packet is handed to the veth, are the reference. The packets are
matched one to one (by content, in order) and compared by their inter-packet gaps, so the
clocks' offsets cancel out:

  gap error of packet i = (t_method[i] - t_method[i-1]) - (t_ref[i] - t_ref[i-1])

It prints, per method, the p50 / p99 / max of |gap error| in microseconds, and, as the
issue that asked for the table put it, the same statistics of each method's gaps against
AF_PACKET's gaps (the runs are one after the other, so that column also holds the sender's
own jitter between two runs).

Everything runs in two network namespaces this script makes (tsbench-<pid>-a and -b, the
veth created inside them, IPv6 off, no addresses) and deletes on exit; every process it
starts is stopped by pid. Needs root, iproute2, tcpreplay, tcpdump and a release build.

    python3 scripts/bench_timestamps.py [--pps 20000] [--seconds 2] [--mode native|generic]
                                        [--capsule target/release/capsule] [--dir DIR]
"""
import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

NS = f"tsbench-{os.getpid()}"
CHILDREN = []


def sh(*argv, check=True, **kw):
    return subprocess.run(argv, check=check, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, **kw)


def cleanup():
    for p in CHILDREN:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    for side in ("a", "b"):
        sh("ip", "netns", "del", f"{NS}-{side}", check=False)


def make_link():
    for side in ("a", "b"):
        sh("ip", "netns", "add", f"{NS}-{side}")
    sh("ip", "link", "add", "tsa", "netns", f"{NS}-a", "type", "veth", "peer", "name", "tsb",
       "netns", f"{NS}-b")
    for side in ("a", "b"):
        ns = f"{NS}-{side}"
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "set", f"ts{side}", "mtu", "1600", "up")


def read_pcap(path):
    """(ts_ns, bytes) of every packet of a pcap (µs or ns magic, either byte order)."""
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        e = "<"
    else:
        e = ">"
        magic = struct.unpack(">I", data[:4])[0]
    scale = 1 if magic == 0xA1B23C4D else 1000
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack(e + "IIII", data[off:off + 16])
        off += 16
        out.append((sec * 1_000_000_000 + frac * scale, data[off:off + incl]))
        off += incl
    return out


def match(ref, got):
    """Pairs (t_ref, t_got) of the same packets, in order: each packet of `got` is matched
    to the next packet of `ref` with the same bytes."""
    pairs, j = [], 0
    for t, b in got:
        k = j
        while k < len(ref) and ref[k][1] != b:
            k += 1
        if k == len(ref):
            continue
        pairs.append((ref[k][0], t))
        j = k + 1
    return pairs


def stats(errors_ns):
    a = sorted(abs(e) for e in errors_ns)
    if not a:
        return (float("nan"),) * 3
    pick = lambda q: a[min(len(a) - 1, int(q * len(a)))]
    return pick(0.5) / 1000, pick(0.99) / 1000, a[-1] / 1000


def run_method(args, label, mode_args, pcap, work):
    store = os.path.join(work, f"store-{label}")
    ref_path = os.path.join(work, f"ref-{label}.pcap")
    out_path = os.path.join(work, f"got-{label}.pcap")
    dump = subprocess.Popen(
        ["ip", "netns", "exec", f"{NS}-a", "tcpdump", "-i", "tsa", "-Q", "out", "-s", "0",
         "-B", "65536", "--time-stamp-precision", "nano", "-w", ref_path, "-U"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    CHILDREN.append(dump)
    line = dump.stderr.readline()
    if "listening" not in line:
        raise RuntimeError(f"tcpdump did not start: {line}")
    cap = subprocess.Popen(
        ["ip", "netns", "exec", f"{NS}-b", args.capsule, "capture", "--iface", "tsb",
         "--store", store, "--min-free", "0"] + mode_args,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    CHILDREN.append(cap)
    desc = None
    deadline = time.time() + 15
    while time.time() < deadline:
        l = cap.stderr.readline()
        if not l:
            break
        if "capturing on tsb with " in l:
            desc = l.split("capturing on tsb with ", 1)[1].strip()
            break
    if desc is None:
        cap.wait(5)
        raise RuntimeError(f"{label}: capture did not start: {cap.stderr.read()}")
    sh("ip", "netns", "exec", f"{NS}-a", "tcpreplay", "-q", "-i", "tsa", "--pps",
       str(args.pps), pcap)
    time.sleep(1.0)
    cap.send_signal(signal.SIGTERM)
    summary = cap.communicate(timeout=30)[0].strip()
    dump.send_signal(signal.SIGTERM)
    dump.wait(10)
    st = json.loads(sh(args.capsule, "status", "--store", store, "--json").stdout)
    method = st["capture"]["interfaces"][0].get("method", {})
    sh(args.capsule, "query", "--store", store, "-w", out_path)
    ref, got = read_pcap(ref_path), read_pcap(out_path)
    pairs = match(ref, got)
    return {"label": label, "desc": desc, "summary": summary, "method": method,
            "sent": len(ref), "stored": len(got), "matched": len(pairs), "pairs": pairs,
            "got": got}


def gap_errors(pairs):
    return [(g1 - g0) - (r1 - r0) for (r0, g0), (r1, g1) in zip(pairs, pairs[1:])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pps", type=int, default=20000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--mode", choices=["native", "generic"], default="native")
    ap.add_argument("--capsule", default="target/release/capsule")
    ap.add_argument("--dir")
    args = ap.parse_args()
    args.capsule = os.path.abspath(args.capsule)
    work = args.dir or tempfile.mkdtemp(prefix="capsule-tsbench-")
    os.makedirs(work, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        make_link()
        big = os.path.join(work, "synth.pcap")
        sh(args.capsule, "synth", "--seed", "7", "--duration", "4s", "--rate", "200M", "-w", big)
        # Exactly pps x seconds packets of it, so each run is the same packets at the same rate.
        n = int(args.pps * args.seconds)
        pcap = os.path.join(work, "traffic.pcap")
        with open(big, "rb") as f:
            data = f.read()
        head, off, count, parts = data[:24], 24, 0, []
        e = "<" if struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        while off + 16 <= len(data) and count < n:
            incl = struct.unpack(e + "I", data[off + 8:off + 12])[0]
            parts.append(data[off:off + 16 + incl])
            off += 16 + incl
            count += 1
        with open(pcap, "wb") as f:
            f.write(head + b"".join(parts))
        probe = json.loads(sh(args.capsule, "xdp-probe", "--json", check=False).stdout)
        methods = [("af_packet", ["--mode", "afpacket"])]
        for c in probe["carriers"]:
            if c["accepted"]:
                methods.append((f"xdp {args.mode} {c['carrier']}",
                                ["--mode", f"xdp-{args.mode}", "--xdp-variant", c["carrier"]]))
            else:
                print(f"skipped xdp {c['carrier']}: {c['refused']}")
        results = [run_method(args, label, m, pcap, work) for label, m in methods]
        base = next(r for r in results if r["label"] == "af_packet")
        print(f"\nkernel {probe.get('kernel')}, {count} packets at {args.pps} packets/s, "
              f"gap error in µs (p50 / p99 / max)\n")
        print("| method | timestamps | stored / sent | vs sender (same run) | vs AF_PACKET's gaps |")
        print("|---|---|---|---|---|")
        for r in results:
            own = stats(gap_errors(r["pairs"]))
            n = min(len(r["got"]), len(base["got"]))
            vs_ap = stats([(r["got"][i][0] - r["got"][i - 1][0])
                           - (base["got"][i][0] - base["got"][i - 1][0]) for i in range(1, n)])
            fmt = lambda s: " / ".join(f"{x:.1f}" for x in s)
            ts = r["method"].get("timestamps", "?")
            print(f"| {r['label']} | {ts} | {r['stored']} / {r['sent']} | {fmt(own)} | "
                  f"{fmt(vs_ap) if r is not base else '-'} |")
        print(f"\n(the work directory: {work})")
    finally:
        cleanup()


if __name__ == "__main__":
    main()
