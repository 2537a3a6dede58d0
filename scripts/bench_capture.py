#!/usr/bin/env python3
"""Capture benchmark: capsule against `tcpdump -w` and Stenographer, one veth, one run.

What it measures, in one run: the same synthetic traffic (realistic payloads: `capsule synth`)
is sent at the sender's ceiling (`tcpreplay --topspeed`) into one end of a veth pair; on the
other end one capturer at a time records it, each with a 32 MiB kernel buffer (--ring-mib):

  tcpdump        `tcpdump -w -s 0 -B 32768` into a pcap
  stenographer   Debian's `stenotype` run directly with the options stenographer passes it
                 (`--threads=1 --dir=DIR --iface=IF` after the configured flags, here
                 `--blocks=32 --aiops=16`: 32 blocks of 1 MiB, at most 16 of them in flight
                 to the disk; its default --aiops of 128 must not exceed --blocks), into DIR/PKT0
                 and DIR/IDX0 as stenographer lays them out; installed with apt-get when missing
  capsule        `capsule capture --ring-size 32M` (default --level 1, the live ladder)
  capsule-store  the same with `--level store` (what capture and the side index cost alone)

For each it prints packets sent (tcpreplay's "Successful packets"), captured (the capturer's
own count; Stenographer's counted in its packet files), dropped (sent - captured), the
capturer's CPU during the traffic (user + system of the process, from /proc/PID/stat when
the traffic starts to when the capturer has gone idle after it, so the ring's allocation and
the exit are not counted), disk per captured byte right after capture (everything the capturer
wrote: pcap; packet and index files; segments and side index, over the captured bytes), and,
for capsule, after compaction: `capsule compact --store DIR` with its duration, when the binary
has that subcommand ("n/a" otherwise). Ratios are against baselines measured in the same run:
capsule's CPU over Stenographer's and over tcpdump's. The machine is shared and noisy: compare
rows of one run, not runs.

Each capturer runs --runs times, interleaved; every run is printed as it ends, and the table
shows the better run of each (fewer drops, then less CPU).

How: `capsule synth --seed 5 --duration 2s --rate 400M` makes ~100 MB of traffic once. The
script makes two network namespaces, capbench-<pid>-a and -b, joined by a veth pair created
directly inside them (MTU 1600, IPv6 off before "up", no addresses), so no packet ever leaves
them. tcpreplay runs in -a, the capturer in -b. The loop count is picked by a calibration
send without a capturer so that the sender runs about --seconds. Everything it starts is
stopped by pid, and both namespaces are deleted on exit, also on an error, Ctrl-C or
SIGTERM; children also get SIGTERM if the script itself is killed (PR_SET_PDEATHSIG).
Namespaces of earlier runs whose script is gone and that hold no process are deleted at
start. Stenotype does not exit by itself after SIGTERM (its watchdog aborts it two minutes
later): once its index is written it is killed by pid.

Needs root, iproute2, tcpreplay, tcpdump, apt-get (for stenographer) and a release build
(`cargo build --release`; the binary is copied into --dir first, so a rebuild during the run
does not change what runs).

    python3 scripts/bench_capture.py [--dir /tmp/capsule-bench-capture] [--runs 1]
                                     [--seconds 8] [--loop N] [--capsule PATH]
                                     [--only capsule,stenographer,...]
                                     [--capsule-opt=--threads=1 ...] [--senders 2]

With --senders 2 two tcpreplay processes send the file at once (packets sent is their sum):
on this 2-core machine that leaves the capturer no idle core, the "loaded server" of issue 10
where compressing in the capture path costs packets.
"""
import argparse
import ctypes
import glob
import math
import os
import re
import statistics
import shutil
import signal
import struct
import subprocess
import sys
import time

CAPTURERS = ("tcpdump", "stenographer", "capsule", "capsule-store")
# name -> extra capsule capture options
CAPSULE_OPTS = {"capsule": [], "capsule-store": ["--level", "store"]}
DEFAULT_CAPSULE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                "..", "target", "release", "capsule"))
STENOTYPE = "/usr/sbin/stenotype"
NS_PREFIX = "capbench-"
CLK_TCK = os.sysconf("SC_CLK_TCK")
READY_TIMEOUT = 15.0   # seconds for a capturer to say it is ready
STOP_TIMEOUT = 30.0    # seconds for a capturer to exit after its stop signal
STENO_BLOCK = 1 << 20  # stenotype's default --blocksize_kb=1024


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/capsule-bench-capture",
                    help="working directory: the pcap and every capturer's output (on disk, as "
                         "a capture server writes to disk); default %(default)s")
    ap.add_argument("--runs", type=int, default=1, help="runs per capturer; the best counts")
    ap.add_argument("--seconds", type=float, default=8.0,
                    help="about how long the sender sends (sets --loop by calibration)")
    ap.add_argument("--loop", type=int, default=0, help="tcpreplay --loop (0: calibrate)")
    ap.add_argument("--ring-mib", type=int, default=32,
                    help="every capturer's kernel buffer in MiB (default %(default)s)")
    ap.add_argument("--steno-aiops", type=int, default=16,
                    help="stenotype --aiops (at most --ring-mib; default %(default)s)")
    ap.add_argument("--capsule", default=DEFAULT_CAPSULE, help="default: %(default)s")
    ap.add_argument("--only", default=",".join(CAPTURERS),
                    help="capturers to run, comma-separated (default: all)")
    ap.add_argument("--capsule-opt", action="append", default=[], metavar="OPT",
                    help="extra option for capsule capture, repeatable")
    ap.add_argument("--no-compact", action="store_true",
                    help="skip `capsule compact` after each capsule run (quicker A/B of CPU)")
    ap.add_argument("--senders", type=int, default=1,
                    help="tcpreplay processes sending at once (default %(default)s); on a "
                         "2-core machine 2 keep both cores busy beside the capturer: a loaded "
                         "server, where a capturer that compresses or writes slowly drops")
    args = ap.parse_args()
    if args.senders < 1:
        ap.error("--senders must be at least 1")
    return args


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
                 "--store", store, "--ring-size", f"{args.ring_mib}M"] + opts
                + args.capsule_opt,
                os.path.join(workdir, "capsule.txt"), signal.SIGTERM, env=env)
    wait_for_line(proc, f"capturing on {iface}", "capsule")
    return proc, store


def start_tcpdump(args, ns, iface, workdir):
    out = os.path.join(workdir, "t.pcap")
    # -Z root: Debian's tcpdump otherwise drops to user tcpdump before it opens the file.
    proc = Proc(["ip", "netns", "exec", ns, "tcpdump", "-i", iface, "-w", out, "-s", "0",
                 "-B", str(args.ring_mib * 1024), "-Z", "root"],
                os.path.join(workdir, "tcpdump.txt"), signal.SIGINT)
    wait_for_line(proc, "listening on", "tcpdump")
    return proc, out


def start_stenotype(args, ns, iface, workdir):
    """stenotype as stenographer runs it: its configured Flags, then --threads, --dir and
    --iface (stenographer's env.go); packets in DIR/PKT0, index in DIR/IDX0."""
    out = os.path.join(workdir, "steno")
    for sub in ("PKT0", "IDX0"):
        os.makedirs(os.path.join(out, sub))
    # stenotype drops to nobody:nogroup (its defaults) once its socket is set up.
    for root, dirs, _files in os.walk(out):
        for d in [root] + [os.path.join(root, x) for x in dirs]:
            shutil.chown(d, "nobody", "nogroup")
    flags = [f"--blocks={args.ring_mib}", f"--aiops={args.steno_aiops}"]
    proc = Proc(["ip", "netns", "exec", ns, STENOTYPE] + flags
                + ["--threads=1", f"--dir={out}", f"--iface={iface}", "-v"],
                os.path.join(workdir, "stenotype.txt"), signal.SIGTERM)
    wait_for_line(proc, "starting to process packets", "stenotype")
    return proc, out


def ensure_stenographer():
    if os.access(STENOTYPE, os.X_OK):
        return
    print("stenotype missing: apt-get install stenographer", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "stenographer"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update"], stdin=subprocess.DEVNULL,
                       capture_output=True, env=env)
        r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends",
                            "stenographer"], stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, env=env)
    if r.returncode != 0 or not os.access(STENOTYPE, os.X_OK):
        raise RuntimeError(f"cannot install stenographer: {r.stderr.strip()[-2000:]}")


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
    # stop signal and the CPU read are its.
    with open(f"/proc/{proc.pid}/comm") as f:
        got = f.read().strip()
    if got != comm:
        raise RuntimeError(f"pid {proc.pid} is {got!r}, not {comm}: something forked")


def wait_idle(proc, min_wait=2.5, limit=20.0):
    """Waits until the capturer has read what the ring still holds: under 10% of a core over
    0.3 s, after at least min_wait seconds (at most `limit`). The minimum is longer than
    libpcap's block timeout (tcpdump's 1000 ms): a block the kernel has not handed over yet
    would count as missing."""
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
    # The byte count is exact ("(N bytes)") in older builds and three significant digits in
    # SI units ("(2.61 GB)") since the summary became human-readable: 0.5% at worst, which
    # only the disk-per-byte column uses.
    m = re.search(r"captured (\d+) packets \(([\d.]+) (bytes|B|kB|MB|GB|TB)\) on \S+ in "
                  r"[\d.]+ s; seen (\d+), dropped (\d+)", text)
    if not m:
        raise RuntimeError(f"no capsule summary line in:\n{text}")
    scale = {"bytes": 1, "B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m.group(3)]
    return {"captured": int(m.group(1)), "bytes": int(float(m.group(2)) * scale),
            "own_drops": int(m.group(5))}


def parse_tcpdump(text, pcap):
    got = {}
    for key, pat in (("captured", r"(\d+) packets? captured"),
                     ("dropped", r"(\d+) packets? dropped by kernel")):
        m = re.search(pat, text)
        if not m:
            raise RuntimeError(f"no {pat!r} in tcpdump's output:\n{text}")
        got[key] = int(m.group(1))
    # pcap: 24-byte file header, 16 bytes before each packet's captured bytes.
    size = os.path.getsize(pcap)
    return {"captured": got["captured"], "bytes": size - 24 - 16 * got["captured"],
            "own_drops": got["dropped"]}


def count_stenotype(out, text):
    """Packets and bytes in stenotype's packet files: 1 MiB TPACKET_V3 blocks as the kernel
    filled them (num_pkts at byte 12 of the block descriptor, the first packet at the offset
    in byte 16; each tpacket3_hdr: next offset, sec, nsec, snaplen)."""
    packets = captured_bytes = 0
    for path in glob.glob(os.path.join(out, "PKT0", "*")) + \
            glob.glob(os.path.join(out, "PKT0", ".*")):
        with open(path, "rb") as f:
            while True:
                block = f.read(STENO_BLOCK)
                if len(block) < 32:
                    break
                num, first = struct.unpack_from("<II", block, 12)
                at = first
                for _ in range(num):
                    if at + 16 > len(block):
                        break
                    nxt, _sec, _nsec, snap = struct.unpack_from("<IIII", block, at)
                    captured_bytes += snap
                    packets += 1
                    if nxt == 0:
                        break
                    at += nxt
    drops = [int(x) for x in re.findall(r" drops=(\d+)", text)]
    return {"captured": packets, "bytes": captured_bytes,
            "own_drops": drops[-1] if drops else None}


def has_compact(binary):
    r = subprocess.run([binary, "compact", "--help"], stdin=subprocess.DEVNULL,
                       capture_output=True)
    return r.returncode == 0


# ---------------------------------------------------------------- one run


def run_one(args, link, pcap, loops, capturer, rep):
    ns_a, if_a, ns_b, if_b = link
    workdir = os.path.join(args.dir, f"run-{capturer}-{rep}")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    WORKDIRS.append(workdir)
    if capturer == "tcpdump":
        proc, output = start_tcpdump(args, ns_b, if_b, workdir)
    elif capturer == "stenographer":
        proc, output = start_stenotype(args, ns_b, if_b, workdir)
    else:
        proc, output = start_capsule(args, ns_b, if_b, workdir, CAPSULE_OPTS[capturer])
    time.sleep(0.5)  # the same settling time for all, after each said it is ready
    setup_ticks = proc.cpu_ticks()
    if setup_ticks is None:
        raise RuntimeError(f"{capturer} exited before the traffic:\n{proc.log()}")
    drops0 = softnet_drops()
    sent, send_wall, retries, sender_cpu = send(ns_a, if_a, pcap, loops, args.senders,
                                                workdir)
    # stenotype hands a block to disk when it is full or 10 s old (--blockage_sec): wait
    # for its last one.
    wait_idle(proc, min_wait=11.0 if capturer == "stenographer" else 2.5)
    backlog = softnet_drops() - drops0
    idle_ticks = proc.cpu_ticks()
    if idle_ticks is None:
        raise RuntimeError(f"{capturer} exited during the traffic:\n{proc.log()}")
    if capturer == "stenographer":
        # It writes its index on SIGTERM, then never exits by itself (see the docs above).
        proc.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while "Wrote all index files" not in proc.log() and time.monotonic() < deadline \
                and not proc.poll():
            time.sleep(0.1)
        ticks = proc.cpu_ticks()  # its index is written: the CPU it took to get there
        cpu_indexed = None if ticks is None else (ticks - setup_ticks) / CLK_TCK
        time.sleep(0.5)
        proc.stop(timeout=1)  # SIGTERM again, then SIGKILL by pid
        if cpu_indexed is None:
            cpu_indexed = proc.rusage.ru_utime + proc.rusage.ru_stime - setup_ticks / CLK_TCK
        stats = count_stenotype(output, proc.log())
    else:
        if not proc.stop():
            raise RuntimeError(f"{capturer} did not exit within {STOP_TIMEOUT} s of its stop "
                               f"signal:\n{proc.log()}")
        text = proc.log()
        if proc.status != 0:
            raise RuntimeError(f"{capturer} exited {proc.status}:\n{text}")
        # Through its exit: capsule seals the open segment and writes its side index then.
        cpu_indexed = proc.rusage.ru_utime + proc.rusage.ru_stime - setup_ticks / CLK_TCK
        stats = parse_tcpdump(text, output) if capturer == "tcpdump" else parse_capsule(text)
    out_bytes = tree_bytes(output) if os.path.isdir(output) else os.path.getsize(output)
    compact_s = compact_bytes = None
    if capturer.startswith("capsule") and args.compact:
        t0 = time.monotonic()
        r = subprocess.run([args.capsule, "compact", "--store", output],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        compact_s = time.monotonic() - t0
        if r.returncode != 0:
            raise RuntimeError(f"capsule compact exited {r.returncode}: {r.stderr.strip()}")
        compact_bytes = tree_bytes(output)
    cpu = (idle_ticks - setup_ticks) / CLK_TCK
    captured = stats["captured"]
    row = {
        "capturer": capturer, "rep": rep, "sent": sent, "send_s": send_wall,
        "retries": retries, "sender_cpu": sender_cpu, "captured": captured,
        "dropped": sent - captured, "own_drops": stats["own_drops"], "backlog": backlog,
        "setup": setup_ticks / CLK_TCK, "cpu": cpu,
        "us_per_pkt": cpu * 1e6 / captured if captured else float("inf"),
        "cpu_indexed": cpu_indexed,
        "us_per_pkt_indexed": cpu_indexed * 1e6 / captured if captured else float("inf"),
        "bytes": stats["bytes"], "out_bytes": out_bytes,
        "per_byte": out_bytes / stats["bytes"] if stats["bytes"] else float("inf"),
        "compact_s": compact_s,
        "compact_per_byte": (compact_bytes / stats["bytes"]
                             if compact_bytes is not None and stats["bytes"] else None),
        "log_tail": proc.log()[-600:],
    }
    shutil.rmtree(workdir, ignore_errors=True)  # up to a few GB a run
    WORKDIRS.remove(workdir)
    return row


def better(a, b):
    """The better of two runs: fewer drops, then less CPU per packet."""
    key = lambda r: (r["dropped"], r["us_per_pkt"])
    return a if key(a) <= key(b) else b


# ---------------------------------------------------------------- main


def main():
    args = parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_capture.py needs root (network namespaces, packet sockets)")
    only = [c for c in args.only.split(",") if c]
    for c in only:
        if c not in CAPTURERS:
            sys.exit(f"unknown capturer {c!r}: pick from {', '.join(CAPTURERS)}")
    for tool in ("ip", "tcpreplay", "tcpdump", "sysctl"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found")
    if not os.access(args.capsule, os.X_OK):
        sys.exit(f"{args.capsule} missing: cargo build --release")
    if "stenographer" in only:
        ensure_stenographer()
    os.makedirs(args.dir, exist_ok=True)
    args.dir = os.path.abspath(args.dir)
    os.chmod(args.dir, 0o755)  # stenotype, as nobody, writes below it
    # A private copy: a `cargo build` during the run must not change what is measured.
    binary = os.path.join(args.dir, "capsule")
    shutil.copy2(args.capsule, binary)
    args.capsule = binary
    args.compact = has_compact(binary) and not args.no_compact

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
          f"load average {loadavg()} before the benchmark; kernel buffers {args.ring_mib} MiB; "
          "capsule compact: " + ("yes" if args.compact else
                                 "no (--no-compact)" if args.no_compact else
                                 "n/a (no such subcommand)"),
          flush=True)

    cal = os.path.join(args.dir, "calibrate")
    os.makedirs(cal, exist_ok=True)
    sent, wall, _, _ = send(ns_a, if_a, pcap, 3, args.senders, cal)
    per_file = sent // (3 * args.senders)
    rate = sent / wall
    loops = args.loop or max(1, math.ceil(args.seconds * rate / (per_file * args.senders)))
    shutil.rmtree(cal, ignore_errors=True)
    print(f"calibration (no capturer): {rate / 1e3:.0f} kpps; {per_file} packets a loop, "
          f"--loop {loops}", flush=True)

    runs = {c: [] for c in only}
    print("runs (interleaved; sent / captured / dropped; CPU s during traffic; us per packet; "
          "disk per captured byte; sender's CPU s):", flush=True)
    for rep in range(1, args.runs + 1):
        for capturer in only:
            r = run_one(args, link, pcap, loops, capturer, rep)
            runs[capturer].append(r)
            extra = ""
            if r["own_drops"] is not None and r["own_drops"] != r["dropped"]:
                extra += f"; its own drop count {r['own_drops']}"
            if r["retries"]:
                extra += f"; send retries (ENOBUFS, EAGAIN) {r['retries']}"
            print(f"  run {rep} {capturer:<13} {r['sent']} / {r['captured']} / {r['dropped']}; "
                  f"CPU {r['cpu']:.2f} ({r['cpu_indexed']:.2f} +index); "
                  f"{r['us_per_pkt']:.2f} us/pkt; {r['per_byte']:.3f}; sender {r['sender_cpu']:.2f}{extra}", flush=True)

    best = {}
    for c, rs in runs.items():
        best[c] = rs[0]
        for r in rs[1:]:
            best[c] = better(best[c], r)

    print()
    print(f"sender: {args.senders} x tcpreplay --topspeed --loop {loops}, {per_file} packets a "
          f"loop (capsule "
          f"synth --seed 5 --duration 2s --rate 400M); {args.ring_mib} MiB kernel buffers; "
          f"best of {args.runs} run(s) per row (fewest drops, then least CPU per packet)")
    if args.capsule_opt:
        print("capsule capture options: " + " ".join(args.capsule_opt))
    print(f"{'capturer':<14} {'sent':>9} {'send s':>6} {'kpps':>5} {'captured':>9} "
          f"{'dropped':>8} {'drop %':>6} {'CPU s':>6} {'us/pkt':>6} {'+index':>6} "
          f"{'us/pkt':>6} {'disk/B':>6} {'compacted':>9} {'compact s':>9} {'run':>3}")
    for c in only:
        r = best[c]
        comp = "n/a" if r["compact_per_byte"] is None else f"{r['compact_per_byte']:.3f}"
        comp_s = "n/a" if r["compact_s"] is None else f"{r['compact_s']:.2f}"
        if not c.startswith("capsule"):
            comp = comp_s = "-"
        print(f"{c:<14} {r['sent']:>9} {r['send_s']:>6.2f} "
              f"{r['sent'] / r['send_s'] / 1e3:>5.0f} {r['captured']:>9} {r['dropped']:>8} "
              f"{100 * r['dropped'] / max(r['sent'], 1):>6.2f} {r['cpu']:>6.2f} "
              f"{r['us_per_pkt']:>6.2f} {r['cpu_indexed']:>6.2f} "
              f"{r['us_per_pkt_indexed']:>6.2f} {r['per_byte']:>6.3f} {comp:>9} {comp_s:>9} "
              f"{r['rep']:>3}")
    for c in (x for x in only if x.startswith("capsule")):
        r = best[c]
        parts = []
        for base in ("stenographer", "tcpdump"):
            if base in best:
                b = best[base]
                parts.append(f"CPU / {base} {ratio(r['cpu'], b['cpu'])} "
                             f"(per packet {ratio(r['us_per_pkt'], b['us_per_pkt'])}; "
                             f"index written {ratio(r['cpu_indexed'], b['cpu_indexed'])}, "
                             f"per packet "
                             f"{ratio(r['us_per_pkt_indexed'], b['us_per_pkt_indexed'])})")
        print(f"{c}: " + "; ".join(parts))
        if "stenographer" in runs and c != "stenographer":
            # Paired: each run against Stenographer's run of the same round, which had the
            # same machine load (the rows above take each capturer's best run on its own).
            for key, what in (("cpu", "CPU"), ("cpu_indexed", "through the index written")):
                ks = [r[key] / s[key] for r, s in zip(runs[c], runs["stenographer"]) if s[key]]
                if ks:
                    print(f"{c}: {what} / stenographer's in the same round: "
                          + " ".join(f"{k:.2f}x" for k in ks)
                          + f"; median {statistics.median(ks):.2f}x")
    for c in (x for x in only if x.startswith("capsule")):
        r = best[c]
        verdicts = []
        if "tcpdump" in best:
            t = best["tcpdump"]
            if r["dropped"] == 0:
                verdicts.append("0 drops " + ("met" if t["dropped"] else
                                              "met (tcpdump did not drop either)"))
            else:
                verdicts.append(f"0 drops MISSED ({r['dropped']} vs tcpdump's {t['dropped']})")
        if "stenographer" in best:
            s = best["stenographer"]
            k = r["cpu"] / s["cpu"] if s["cpu"] else float("inf")
            verdicts.append(f"CPU <= 1.5x Stenographer's {'met' if k <= 1.5 else 'MISSED'} "
                            f"({k:.2f}x)")
            k = r["cpu_indexed"] / s["cpu_indexed"] if s["cpu_indexed"] else float("inf")
            verdicts.append(f"the same through the index written "
                            f"{'met' if k <= 1.5 else 'MISSED'} ({k:.2f}x)")
        if r["compact_per_byte"] is None:
            verdicts.append("disk per captured byte after compaction <= 0.70 n/a")
        else:
            ok = "met" if r["compact_per_byte"] <= 0.70 else "MISSED"
            verdicts.append(f"disk per captured byte after compaction <= 0.70 {ok} "
                            f"({r['compact_per_byte']:.3f})")
        print(f"target, {c}: " + "; ".join(verdicts))
    print("""
sent: tcpreplay's "Successful packets". send s: the sender's wall time. captured: the
capturer's own count (Stenographer: packets in its packet files). dropped: sent - captured.
CPU s: the capturer process's user + system time from the traffic's start until it went idle
after it (setup and exit not counted). us/pkt: CPU s per captured packet. +index: the same
from the traffic's start until the capturer's index is written (capsule and tcpdump: their
exit, where capsule seals the open segment and writes its side index; Stenographer: its
"Wrote all index files", which it does at each file rotation (4 GiB or a minute by
default) and on SIGTERM: CPU s leaves out its last file's index), with us/pkt beside it. disk/B: bytes the
capturer wrote (pcap; Stenographer's packet and index files; capsule's store) over the
captured packets' bytes. compacted: the same after `capsule compact`; compact s: its wall time.
The kernel's copy of each packet into a capturer's ring runs in the sender's softirq on veth
and is charged to the sender, not to the capturer.""")


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
