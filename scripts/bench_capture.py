#!/usr/bin/env python3
"""Capture benchmark: `capsule capture` (AF_XDP and AF_PACKET) against `tcpdump -w` on one veth.

What it measures, in one run: the same synthetic traffic is sent as fast as the machine can
(tcpreplay --topspeed), by one sender and by two senders at once, into one end of a veth pair;
on the other end one capturer at a time records it: capsule with AF_XDP (`--mode xdp-native`,
"capsule-xdp"), capsule with AF_PACKET (`--mode afpacket`, "capsule-afp"), the AF_XDP capture
without compression ("capsule-xdp-store", `--level store`: what capture and indexing cost
without zstd), all
into a store,
or tcpdump (into a pcap, with the same 256 MiB kernel buffer as capsule's default ring). For each
(capturer, senders) configuration it prints packets sent (tcpreplay's "Successful packets"),
captured, dropped by the kernel (the socket's ring was full), missing (sent - captured: kernel
drops plus whatever was lost before the socket), the capturer's CPU time and that time per
captured packet, and the size of what it wrote. CPU is user + system time of the capturer
process itself (`ip netns exec` execs it): wait4's rusage at its exit minus /proc/PID/stat at
the start of the traffic, so the setup before it (mostly the kernel allocating the 256 MiB
ring, 0.01 to 0.6 s, varying with free-memory fragmentation) is shown apart and not counted.
Each configuration runs --runs times (interleaved, so machine noise hits both tools alike);
every run is printed as it ends, and the table shows the better run of each configuration
(fewer kernel drops, then fewer missing, then less CPU per packet).

Target (the capture issue): capsule 0 drops where tcpdump drops, at lower CPU per packet.

How: `capsule synth --seed 5 --duration 2s --rate 400M` makes ~100 MB of traffic (1518-byte
VLAN frames among others) once. The script makes two network namespaces, capbench-<pid>-a and
-b, joined by a veth pair created directly inside them (MTU 1600, IPv6 off before "up", no
addresses), so no packet ever leaves them. tcpreplay runs in -a (`ip netns exec`), the
capturer in -b. The loop count is picked by a calibration send without a capturer so that one
sender runs about --seconds. Everything it starts is stopped by pid, and both namespaces are
deleted on exit, also on an error, Ctrl-C or SIGTERM; children also get SIGTERM if the script
itself is killed (PR_SET_PDEATHSIG). Namespaces of earlier runs whose script is gone and that
hold no process are deleted at start.

Needs root, iproute2, tcpreplay, tcpdump and a release build (`cargo build --release`; the
binary is copied into --dir first, so a rebuild during the run does not change what runs).

    python3 scripts/bench_capture.py [--dir /tmp/capsule-bench-capture] [--runs 2]
                                     [--seconds 4] [--loop N] [--capsule PATH]
                                     [--capsule-opt=--ring-size=1G ...]
"""
import argparse
import ctypes
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

# name -> capsule capture options (tcpdump: none)
CAPSULE_OPTS = {
    "capsule-xdp": ["--mode", "xdp-native"],
    "capsule-afp": ["--mode", "afpacket"],
    # The same AF_XDP capture storing blocks uncompressed: what capture and indexing cost without
    # level-1 compression (which is most of capsule's CPU).
    "capsule-xdp-store": ["--mode", "xdp-native", "--level", "store"],
}
CAPTURERS = ("capsule-xdp", "capsule-afp", "capsule-xdp-store", "tcpdump")
DEFAULT_CAPSULE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                "..", "target", "release", "capsule"))
NS_PREFIX = "capbench-"
CLK_TCK = os.sysconf("SC_CLK_TCK")
READY_TIMEOUT = 15.0   # seconds for a capturer to say it is ready
STOP_TIMEOUT = 30.0    # seconds for a capturer to exit after its stop signal
TCPDUMP_BUFFER_KIB = 262144  # tcpdump -B is in KiB: 256 MiB, capsule's default --ring-size


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/capsule-bench-capture",
                    help="working directory: the pcap, stores and tcpdump output (on disk, as "
                         "a capture server writes to disk); default %(default)s")
    ap.add_argument("--runs", type=int, default=2, help="runs per configuration; the best counts")
    ap.add_argument("--seconds", type=float, default=4.0,
                    help="about how long one sender sends (sets --loop by calibration)")
    ap.add_argument("--loop", type=int, default=0, help="tcpreplay --loop (0: calibrate)")
    ap.add_argument("--capsule", default=DEFAULT_CAPSULE, help="default: %(default)s")
    ap.add_argument("--capsule-opt", action="append", default=[], metavar="OPT",
                    help="extra option for capsule capture, repeatable (e.g. "
                         "--capsule-opt=--ring-size=1G); default: none, capsule's defaults")
    return ap.parse_args()


# ---------------------------------------------------------------- processes and cleanup

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # Runs in the child between fork and exec (this script has no other threads). The
    # setting survives `ip netns exec`'s exec, so the capturer or sender itself gets SIGTERM
    # if this script dies without cleaning up (SIGKILL).
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class Proc:
    """A process this script started, with stdout and stderr going to one file."""

    def __init__(self, argv, log_path, stop_sig, env=None):
        self.log_path = log_path
        self.stop_sig = stop_sig
        self.argv = argv
        with open(log_path, "wb") as log:
            # Its own session: a Ctrl-C in the terminal reaches this script only, which then
            # stops everything in order.
            self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True,
                                          preexec_fn=_die_with_parent, env=env)
        self.pid = self.popen.pid
        self.status = None
        self.rusage = None
        RUNNING[self.pid] = self

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def poll(self):
        """True once exited (reaped here with wait4, keeping its rusage)."""
        if self.status is None:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.status, self.rusage = os.waitstatus_to_exitcode(status), ru
                self.popen.returncode = self.status  # so subprocess never waits for it again
                RUNNING.pop(self.pid, None)
        return self.status is not None

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.poll():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def signal(self, sig):
        if self.status is None:
            try:
                os.kill(self.pid, sig)  # by pid only
            except ProcessLookupError:
                pass

    def stop(self, timeout=STOP_TIMEOUT):
        """Sends the stop signal, waits; SIGKILL (by pid) if it does not exit in time."""
        self.signal(self.stop_sig)
        if not self.wait(timeout):
            self.signal(signal.SIGKILL)
            self.wait(5)
            return False
        return True

    def cpu_ticks(self):
        """User + system clock ticks so far, from /proc/PID/stat (None once gone)."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                stat = f.read()
        except OSError:
            return None
        fields = stat[stat.rfind(")") + 2:].split()
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


RUNNING = {}        # pid -> Proc, every process started here and not yet reaped
NAMESPACES = []     # every namespace created here, deleted at exit
WORKDIRS = []       # the run directory in use (a store or pcap of up to a few GB)


def cleanup():
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not stop the cleanup
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for proc in list(RUNNING.values()):
        proc.stop(timeout=10)
    for ns in reversed(NAMESPACES):
        subprocess.run(["ip", "netns", "del", ns], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    NAMESPACES.clear()
    for d in WORKDIRS:
        shutil.rmtree(d, ignore_errors=True)


def _on_term(signum, _frame):
    raise SystemExit(128 + signum)


def run_ok(argv):
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def sweep_stale_namespaces():
    """Deletes capbench-<pid>-* namespaces of earlier runs whose script is gone and in which
    no process runs (so nothing is stopped here that this run did not start)."""
    for line in run_ok(["ip", "netns", "list"]).splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(re.escape(NS_PREFIX) + r"(\d+)-[ab]", name)
        if not m or int(m.group(1)) == os.getpid() or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        if run_ok(["ip", "netns", "pids", name]).split():
            print(f"note: stale namespace {name} still holds processes; left alone",
                  file=sys.stderr)
            continue
        subprocess.run(["ip", "netns", "del", name], stdin=subprocess.DEVNULL)
        print(f"deleted stale namespace {name}", file=sys.stderr)


def make_link():
    """Two namespaces joined by a veth pair created inside them; returns (nsA, ifA, nsB, ifB)."""
    pid = os.getpid()
    ns_a, ns_b = f"{NS_PREFIX}{pid}-a", f"{NS_PREFIX}{pid}-b"
    if_a, if_b = f"cba{pid}", f"cbb{pid}"   # at most 15 bytes
    for ns in (ns_a, ns_b):
        run_ok(["ip", "netns", "add", ns])
        NAMESPACES.append(ns)
    # Created directly inside the namespaces: the pair never exists in the host's.
    run_ok(["ip", "link", "add", if_a, "netns", ns_a, "type", "veth",
            "peer", "name", if_b, "netns", ns_b])
    for ns, ifname in ((ns_a, if_a), (ns_b, if_b)):
        # IPv6 off before the link is up: no neighbour discovery or MLD is ever sent.
        run_ok(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                f"net.ipv6.conf.{ifname}.disable_ipv6=1"])
        run_ok(["ip", "-n", ns, "link", "set", ifname, "mtu", "1600"])  # 1518-byte VLAN frames
        run_ok(["ip", "-n", ns, "link", "set", ifname, "up"])
    return ns_a, if_a, ns_b, if_b


# ---------------------------------------------------------------- senders


def tcpreplay_count(text, key):
    m = re.search(re.escape(key) + r"\s*(\d+)", text)
    if not m:
        raise RuntimeError(f"no {key!r} in tcpreplay's output:\n{text}")
    return int(m.group(1))


def send(ns, iface, pcap, loops, senders, workdir):
    """Runs `senders` tcpreplay processes at once; returns (successful packets, wall seconds,
    ENOBUFS/EAGAIN retries, senders' CPU seconds)."""
    procs = []
    t0 = time.monotonic()
    for i in range(senders):
        procs.append(Proc(["ip", "netns", "exec", ns, "tcpreplay", "-i", iface, "--topspeed",
                           "--loop", str(loops), pcap],
                          os.path.join(workdir, f"tcpreplay-{i}.txt"), signal.SIGTERM))
    for p in procs:
        p.wait()
    wall = time.monotonic() - t0
    sent = retries = 0
    cpu = 0.0
    for p in procs:
        text = p.log()
        if p.status != 0:
            raise RuntimeError(f"tcpreplay exited {p.status}:\n{text}")
        failed = tcpreplay_count(text, "Failed packets:")
        if failed:
            raise RuntimeError(f"tcpreplay failed to send {failed} packets:\n{text}")
        sent += tcpreplay_count(text, "Successful packets:")
        retries += (tcpreplay_count(text, "Retried packets (ENOBUFS):")
                    + tcpreplay_count(text, "Retried packets (EAGAIN):"))
        cpu += p.rusage.ru_utime + p.rusage.ru_stime
    return sent, wall, retries, cpu


def softnet_drops():
    """Host-wide packets dropped because a CPU's input backlog was full (column 2 of
    /proc/net/softnet_stat, summed over CPUs; veth delivers through that backlog)."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f if line.split())


# ---------------------------------------------------------------- capturers


def start_capsule(args, ns, iface, workdir, opts):
    store = os.path.join(workdir, "store")
    env = {k: v for k, v in os.environ.items() if k != "CAPSULE_LOG"}
    proc = Proc(["ip", "netns", "exec", ns, args.capsule, "capture", "--iface", iface,
                 "--store", store] + opts + args.capsule_opt,
                os.path.join(workdir, "capsule.txt"), signal.SIGTERM, env=env)
    wait_for_line(proc, f"capturing on {iface}", "capsule")
    return proc, store


def start_tcpdump(_args, ns, iface, workdir):
    out = os.path.join(workdir, "t.pcap")
    # -Z root: Debian's tcpdump otherwise drops to user tcpdump before it opens the file.
    proc = Proc(["ip", "netns", "exec", ns, "tcpdump", "-i", iface, "-w", out, "-s", "0",
                 "-B", str(TCPDUMP_BUFFER_KIB), "-Z", "root"],
                os.path.join(workdir, "tcpdump.txt"), signal.SIGINT)
    wait_for_line(proc, "listening on", "tcpdump")
    return proc, out


def wait_for_line(proc, want, comm):
    deadline = time.monotonic() + READY_TIMEOUT
    while want not in proc.log():
        if proc.poll():
            raise RuntimeError(f"{comm} exited {proc.status} before saying {want!r}:\n"
                               f"{proc.log()}")
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{comm}: no {want!r} within {READY_TIMEOUT} s:\n{proc.log()}")
        time.sleep(0.02)
    # `ip netns exec` execs: the pid must now be the capturer's own, so that the
    # stop signal and wait4's rusage are its.
    with open(f"/proc/{proc.pid}/comm") as f:
        got = f.read().strip()
    if got != comm:
        raise RuntimeError(f"pid {proc.pid} is {got!r}, not {comm}: something forked")


def wait_idle(proc, min_wait=1.5, limit=20.0):
    """Waits until the capturer has read what the ring still holds: under 10% of a core over
    0.3 s, after at least min_wait seconds (at most `limit`). The minimum is longer than
    libpcap's block timeout (tcpdump's 1000 ms): tcpdump stops on SIGINT without reading a
    block the kernel has not handed over yet, so stopping earlier would count its last
    packets as missing (capsule takes that block when it stops)."""
    time.sleep(min_wait)
    t_end = time.monotonic() + limit
    last = proc.cpu_ticks()
    while time.monotonic() < t_end:
        time.sleep(0.3)
        now = proc.cpu_ticks()
        if now is None or last is None or now - last <= 0.3 * CLK_TCK * 0.1:
            return
        last = now


def tree_bytes(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def parse_capsule(text):
    m = re.search(r"captured (\d+) packets \((\d+) bytes\) on \S+ in [\d.]+ s; "
                  r"seen (\d+), dropped (\d+)", text)
    if not m:
        raise RuntimeError(f"no capsule summary line in:\n{text}")
    return {"captured": int(m.group(1)), "dropped": int(m.group(4)), "freezes": None}


def parse_tcpdump(text):
    got = {}
    for key, pat in (("captured", r"(\d+) packets? captured"),
                     ("received", r"(\d+) packets? received by filter"),
                     ("dropped", r"(\d+) packets? dropped by kernel")):
        m = re.search(pat, text)
        if not m:
            raise RuntimeError(f"no {pat!r} in tcpdump's output:\n{text}")
        got[key] = int(m.group(1))
    return got


# ---------------------------------------------------------------- one run


def run_one(args, link, pcap, loops, capturer, senders, rep):
    ns_a, if_a, ns_b, if_b = link
    workdir = os.path.join(args.dir, f"run-{capturer}-{senders}-{rep}")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    WORKDIRS.append(workdir)
    if capturer == "tcpdump":
        proc, output = start_tcpdump(args, ns_b, if_b, workdir)
    else:
        proc, output = start_capsule(args, ns_b, if_b, workdir, CAPSULE_OPTS[capturer])
    time.sleep(0.5)  # the same settling time for both, after each said it is ready
    # CPU spent so far is setup, mostly the kernel allocating (and, for capsule, touching)
    # the 256 MiB ring: 0.1 to 0.8 s here, varying with how fragmented free memory is, and
    # for tcpdump several times what capturing costs. It is reported apart; the capture CPU
    # is what the process used from here to its exit (draining, and sealing for capsule).
    setup_ticks = proc.cpu_ticks()
    if setup_ticks is None:
        raise RuntimeError(f"{capturer} exited before the traffic:\n{proc.log()}")
    drops0 = softnet_drops()
    sent, send_wall, retries, sender_cpu = send(ns_a, if_a, pcap, loops, senders, workdir)
    wait_idle(proc)
    backlog = softnet_drops() - drops0
    stop_ticks = proc.cpu_ticks()
    if not proc.stop():
        raise RuntimeError(f"{capturer} did not exit within {STOP_TIMEOUT} s of its stop "
                           f"signal:\n{proc.log()}")
    text = proc.log()
    if proc.status != 0:
        raise RuntimeError(f"{capturer} exited {proc.status}:\n{text}")
    stats = parse_tcpdump(text) if capturer == "tcpdump" else parse_capsule(text)
    out_bytes = tree_bytes(output) if os.path.isdir(output) else os.path.getsize(output)
    total = proc.rusage.ru_utime + proc.rusage.ru_stime
    setup = setup_ticks / CLK_TCK
    cpu = total - setup
    row = {
        "capturer": capturer, "senders": senders, "rep": rep, "sent": sent,
        "send_s": send_wall, "retries": retries, "sender_cpu": sender_cpu,
        "captured": stats["captured"], "dropped": stats["dropped"],
        "freezes": stats.get("freezes"), "missing": sent - stats["captured"],
        "backlog": backlog, "setup": setup, "cpu": cpu, "total": total,
        "at_stop": None if stop_ticks is None else stop_ticks / CLK_TCK - setup,
        "us_per_pkt": cpu * 1e6 / stats["captured"] if stats["captured"] else float("inf"),
        "out_bytes": out_bytes,
    }
    shutil.rmtree(workdir, ignore_errors=True)  # up to a few GB a run
    WORKDIRS.remove(workdir)
    return row


def better(a, b):
    """The better of two runs: fewer kernel drops, then fewer missing, then less CPU/packet."""
    key = lambda r: (r["dropped"], r["missing"], r["us_per_pkt"])
    return a if key(a) <= key(b) else b


# ---------------------------------------------------------------- main


def main():
    args = parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_capture.py needs root (network namespaces, packet sockets)")
    for tool in ("ip", "tcpreplay", "tcpdump", "sysctl"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found")
    if not os.access(args.capsule, os.X_OK):
        sys.exit(f"{args.capsule} missing: cargo build --release")
    os.makedirs(args.dir, exist_ok=True)
    args.dir = os.path.abspath(args.dir)
    # A private copy: a `cargo build` during the run must not change what is measured.
    binary = os.path.join(args.dir, "capsule")
    shutil.copy2(args.capsule, binary)
    args.capsule = binary

    pcap = os.path.join(args.dir, "f.pcap")
    subprocess.run([args.capsule, "synth", "--seed", "5", "--duration", "2s", "--rate", "400M",
                    "-w", pcap], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(pcap, "rb") as f:  # warm the page cache: tcpreplay reads it every loop
        while f.read(1 << 24):
            pass

    sweep_stale_namespaces()
    link = make_link()
    ns_a, if_a, ns_b, if_b = link
    print(f"link: {ns_a}/{if_a} -> {ns_b}/{if_b} (veth, MTU 1600, IPv6 off); "
          f"pcap {pcap}, {os.path.getsize(pcap) / 1e6:.0f} MB; {os.cpu_count()} CPUs, "
          f"load average {loadavg()} before the benchmark", flush=True)

    cal = os.path.join(args.dir, "calibrate")
    os.makedirs(cal, exist_ok=True)
    sent, wall, _, _ = send(ns_a, if_a, pcap, 3, 1, cal)
    per_file = sent // 3
    rate = sent / wall
    loops = args.loop or max(1, math.ceil(args.seconds * rate / per_file))
    shutil.rmtree(cal, ignore_errors=True)
    print(f"calibration (no capturer): {rate / 1e3:.0f} kpps from one sender; "
          f"{per_file} packets a loop, --loop {loops}", flush=True)

    configs = [(c, s) for s in (1, 2) for c in CAPTURERS]
    runs = {cfg: [] for cfg in configs}
    print("runs (interleaved; sent / captured / kernel drops / missing; capturer CPU s: setup, "
          "capture; us per captured packet; senders' CPU s):", flush=True)
    for rep in range(1, args.runs + 1):
        for capturer, senders in configs:
            r = run_one(args, link, pcap, loops, capturer, senders, rep)
            runs[(capturer, senders)].append(r)
            freezes = "" if r["freezes"] is None else f"; ring freezes {r['freezes']}"
            if r["retries"]:
                freezes += f"; send retries (ENOBUFS, EAGAIN) {r['retries']}"
            print(f"  run {rep} {capturer:<16} {senders} sender(s): {r['sent']} / "
                  f"{r['captured']} / {r['dropped']} / {r['missing']}; CPU {r['setup']:.2f}, "
                  f"{r['cpu']:.2f}; {r['us_per_pkt']:.2f} us/pkt; senders {r['sender_cpu']:.2f}"
                  f"{freezes}", flush=True)

    best = {cfg: rs[0] for cfg, rs in runs.items()}
    for cfg, rs in runs.items():
        for r in rs[1:]:
            best[cfg] = better(best[cfg], r)

    print()
    print(f"each sender: tcpreplay --topspeed --loop {loops}, {per_file} packets a loop "
          f"(capsule synth --seed 5 --duration 2s --rate 400M); best of {args.runs} runs per "
          f"row (fewest kernel drops, then fewest missing, then least CPU per packet)")
    if args.capsule_opt:
        print("capsule capture options: " + " ".join(args.capsule_opt))
    print(f"{'capturer':<16} {'snd':>3} {'sent':>9} {'send s':>6} {'kpps':>5} {'captured':>9} "
          f"{'dropped':>8} {'missing':>8} {'backlog':>7} {'setup s':>7} {'CPU s':>6} "
          f"{'us/pkt':>6} {'out MB':>7} {'run':>3}")
    for capturer, senders in configs:
        r = best[(capturer, senders)]
        print(f"{capturer:<16} {senders:>3} {r['sent']:>9} {r['send_s']:>6.2f} "
              f"{r['sent'] / r['send_s'] / 1e3:>5.0f} {r['captured']:>9} {r['dropped']:>8} "
              f"{r['missing']:>8} {r['backlog']:>7} {r['setup']:>7.2f} {r['cpu']:>6.2f} "
              f"{r['us_per_pkt']:>6.2f} {r['out_bytes'] / 1e6:>7.0f} {r['rep']:>3}")
    for senders, capsule in ((s, c) for s in (1, 2) for c in CAPTURERS[:3]):
        c, t = best[(capsule, senders)], best[("tcpdump", senders)]
        c_bpp = c["out_bytes"] / max(c["captured"], 1)
        t_bpp = t["out_bytes"] / max(t["captured"], 1)
        print(f"{capsule} / tcpdump, {senders} sender(s): CPU per packet "
              f"{ratio(c['us_per_pkt'], t['us_per_pkt'])}, capture CPU {ratio(c['cpu'], t['cpu'])}"
              f", whole-process CPU {ratio(c['total'], t['total'])}, output bytes per packet "
              f"{ratio(c_bpp, t_bpp)}; "
              f"drops {c['dropped']} vs {t['dropped']}")
    for capsule in ("capsule-xdp", "capsule-xdp-store"):
        verdicts = []
        for senders in (1, 2):
            c, t = best[(capsule, senders)], best[("tcpdump", senders)]
            if c["dropped"] == 0:
                drops = "met" if t["dropped"] else "met (tcpdump did not drop either)"
            else:
                drops = f"MISSED ({c['dropped']} vs tcpdump's {t['dropped']})"
            cpu = "met" if c["us_per_pkt"] < t["us_per_pkt"] else "MISSED"
            verdicts.append(f"{senders} sender(s): 0 drops {drops}, lower CPU/pkt {cpu}")
        print(f"target, {capsule}: 0 drops where tcpdump drops, at lower CPU per packet: "
              + "; ".join(verdicts))
    print("""
snd: tcpreplay processes at once. sent: their "Successful packets". send s: until the last
sender exited. captured: the capturer's own count. dropped: its own count of drops (tcpdump:
the socket's ring was full; capsule: every cause, see `capsule status`). missing: sent - captured (drops, and anything lost before the socket). backlog:
host-wide softnet backlog drops during the run (veth delivers through it; tcpreplay retries
such sends). setup s: capturer CPU before the traffic, mostly the kernel allocating the
256 MiB ring; not counted in CPU s. CPU s: capturer user + system time from the traffic's
start to its exit (wait4 rusage minus setup; includes draining and capsule sealing the
store). us/pkt: CPU s per captured packet. out MB: capsule's store (segments and index) or
tcpdump's pcap. run: which run the row is.
capsule does more than tcpdump here: it restores VLAN tags, dissects every packet for lanes
and the side index, compresses blocks with zstd and seals segments; tcpdump appends raw
frames to a pcap. The kernel's copy into either ring mostly runs in the senders' softirq
context and is charged to them. veth on a shared 2-core VM is limited by the senders, which
take the same cores the capturer needs: the figures compare the two tools in one run; they
are not what either does on a capture server.""")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def ratio(a, b):
    return f"{a / b:.2f}x" if b else "-"


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGHUP, _on_term)
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except RuntimeError as e:
        print(f"bench_capture.py: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        cleanup()
