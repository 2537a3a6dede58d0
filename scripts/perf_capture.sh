#!/usr/bin/env bash
# Profiles one live capture at the sender's ceiling: what bench_capture.py measures, cut down
# to capsule alone, for comparing builds and taking perf profiles of the capture path.
#
# Two network namespaces joined by a veth pair (MTU 1600, IPv6 off, no addresses: no packet
# leaves them); `capsule capture` on one end, `tcpreplay --topspeed --loop LOOPS` of a
# `capsule synth` trace (the benchmark's: seed 5, 2 s at 400 Mbit/s, ~100 MB) into the other.
# Prints the capture's summary line, each thread's CPU ticks (1/100 s, from /proc) and
# voluntary context switches (its sleeps: naps, waits for work), and the
# process's ticks while the traffic ran. With PERF=1 also records `perf record` of the
# capture process into OUT/perf.data (PERF_OPTS, default -g; e.g. "--call-graph dwarf,16384
# -F 499" for stacks through code without frame pointers).
#
#   sudo [BIN=target/release/capsule] [OPTS="--level store"] [LOOPS=40] [PERF=1]
#        [OUT=/tmp/capsule-perf] [TRACE=OUT/trace.pcap] bash scripts/perf_capture.sh
#
# The machine is shared and noisy: compare builds by interleaving runs (A B A B ...), and
# their CPU against Stenographer's with bench_capture.py. Everything started is stopped by
# pid, and both namespaces are deleted on exit (also on an error or Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/capsule}
LOOPS=${LOOPS:-40}
OUT=${OUT:-/tmp/capsule-perf}
TRACE=${TRACE:-$OUT/trace.pcap}
OPTS=${OPTS:---level store}
NS_A=capperf-$$-a
NS_B=capperf-$$-b
CAP=""
PERF_PID=""

cleanup() {
    [ -n "$PERF_PID" ] && kill -INT "$PERF_PID" 2>/dev/null && wait "$PERF_PID" 2>/dev/null
    [ -n "$CAP" ] && kill "$CAP" 2>/dev/null && wait "$CAP" 2>/dev/null
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
}
trap cleanup EXIT

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

mkdir -p "$OUT"
rm -rf "$OUT/store"
[ -f "$TRACE" ] || "$BIN" synth --seed 5 --duration 2s --rate 400M --write "$TRACE" >/dev/null
ip netns add "$NS_A"
ip netns add "$NS_B"
ip link add va netns "$NS_A" type veth peer name vb netns "$NS_B"
for pair in "$NS_A va" "$NS_B vb"; do
    set -- $pair
    ip netns exec "$1" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1
    ip -n "$1" link set "$2" mtu 1600
    ip -n "$1" link set "$2" up
done

# shellcheck disable=SC2086 # OPTS is a list of options
ip netns exec "$NS_B" "$BIN" capture --iface vb --store "$OUT/store" --ring-size 32M $OPTS \
    >"$OUT/capture.log" 2>&1 &
CAP=$!
for _ in $(seq 100); do
    grep -q "capturing" "$OUT/capture.log" 2>/dev/null && break
    sleep 0.1
done
sleep 1
before=$(ticks "$CAP")
if [ "${PERF:-0}" = 1 ]; then
    # shellcheck disable=SC2086 # PERF_OPTS is a list of options
    perf record ${PERF_OPTS:--g} -o "$OUT/perf.data" -p "$CAP" 2>/dev/null &
    PERF_PID=$!
    sleep 0.5
fi
ip netns exec "$NS_A" tcpreplay -i va --topspeed --loop "$LOOPS" "$TRACE" 2>&1 |
    grep -E "Actual|Successful"
sleep 1
after=$(ticks "$CAP")
for t in /proc/"$CAP"/task/*; do
    echo "thread $(cat "$t/comm"): $(awk '{print $14 + $15}' "$t/stat") ticks," \
        "$(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status") sleeps"
done
if [ -n "$PERF_PID" ]; then
    kill -INT "$PERF_PID"
    wait "$PERF_PID" || true
    PERF_PID=""
fi
kill -INT "$CAP"
wait "$CAP" || true
CAP=""
grep -E "^captured" "$OUT/capture.log" || tail -3 "$OUT/capture.log"
echo "cpu ticks during traffic: $((after - before))"
