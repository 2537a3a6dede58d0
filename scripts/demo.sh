#!/usr/bin/env bash
# capsule demo: make traffic, store it, and pull the evidence of a planted fault.
#
#   1. `capsule synth` writes 10 s of an AI cluster beside an enterprise network (1 Gbit/s),
#      with three rogue hosts marking bulk TCP as DSCP 46 (EF), and a truth file.
#   2. `capsule import` stores it: zstd-compressed pcapng segments with a block table.
#   3. `capsule flows` answers "which sessions marked EF, from which hosts, how many bytes, and
#      which are not on the EF allow-list?" from the side index alone, and `capsule query`
#      cuts exactly those packets into rogue-ef.pcap.
#   4. The result is checked against the truth file and summarised.
#   5. Live: two network namespaces joined by a veth pair (made here, removed on exit; no
#      packet leaves them). `capsule capture --mode auto` (AF_XDP when the kernel allows)
#      records a replay of 2 s of the traffic, `capsule status` shows the running capture,
#      and `capsule flows` lists the EF sessions while they are still in the open segment
#      (its index journal); after the capture, `capsule compact` recompresses what live
#      capture stored cheaply, and a query of the capture must return exactly the EF packets
#      that were sent. Needs root; skipped otherwise.
#   6. From the index alone (docs/examples/capsule.toml gives the groups and policy):
#      `capsule dscp` names the rogue EF senders as violations (the voice hosts may send EF),
#      and `capsule stragglers` the GPU node that sends less than its peers and from when;
#      `capsule bursts` the millisecond peaks the one-second view hides; `capsule top --key
#      app` the applications recognised from each flow's first payload bytes;
#      dscp and stragglers checked against the truth file.
#   7. `capsule triage` over the store: the config's [alerts] rules, each finding with its
#      evidence pcapng (packets and sha256 checked with capinfos and sha256sum), report.txt
#      and the one-file report.html.
#
# Output goes to ./demo-out (or $1). Installs missing system packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-demo-out}"
bash scripts/deps.sh
cargo build --release --quiet
capsule=target/release/capsule
rm -rf "$out" && mkdir -p "$out"

echo "== 1. synthetic traffic"
$capsule synth --seed 7 --duration 10s --rate 1G -w "$out/traffic.pcap" --truth "$out/truth.json"

echo "== 2. import into the store at $out/store"
$capsule import --store "$out/store" --segment-size 256M "$out/traffic.pcap"
$capsule segments --store "$out/store"

allow=$(python3 -c 'import json,sys; print(" or ".join("net "+n for n in json.load(open(sys.argv[1]))["facts"]["ef_allow_list"]))' "$out/truth.json")
filter="dscp ef and not ($allow)"
echo "== 3. EF sessions outside the allow-list: capsule flows $filter"
$capsule flows --store "$out/store" --limit 10 "$filter"
echo "== query: their packets into $out/rogue-ef.pcap"
$capsule query --store "$out/store" -w "$out/rogue-ef.pcap" "$filter"
rogues=$(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["facts"]["rogue_ef_hosts"]))' "$out/truth.json")

echo "== 4. what was found"
python3 - "$out/truth.json" "$out/rogue-ef.pcap" <<'PY'
import json, struct, sys
truth = json.load(open(sys.argv[1]))
rogues = set(truth["facts"]["rogue_ef_hosts"])
allow = truth["facts"]["ef_allow_list"]
# Count what the export holds, per rogue host, straight from the pcap.
data = open(sys.argv[2], "rb").read()
magic = struct.unpack_from("<I", data)[0]
assert magic in (0xa1b23c4d, 0xa1b2c3d4), "rogue-ef.pcap is not a little-endian pcap"
off, per_host, total, total_bytes = 24, {}, 0, 0
while off + 16 <= len(data):
    _, _, incl, orig = struct.unpack_from("<IIII", data, off)
    pkt = data[off + 16: off + 16 + incl]
    off += 16 + incl
    eth = 14 + (4 if pkt[12:14] == b"\x81\x00" else 0)
    src = ".".join(str(b) for b in pkt[eth + 12: eth + 16])
    dst = ".".join(str(b) for b in pkt[eth + 16: eth + 20])
    host = src if src in rogues else dst
    per_host[host] = per_host.get(host, 0) + orig
    total += 1
    total_bytes += orig
expected = sum(f["packets"] for f in truth["flows"]
               if (f["src"] in rogues or f["dst"] in rogues) and f["dscp"] == [46])
print(f"{total} EF packets ({total_bytes} bytes) from rogue hosts in {sys.argv[2]}")
for h in sorted(per_host):
    print(f"  {h}: {per_host[h]} bytes marked EF (allow-list for EF: {', '.join(allow)})")
print(f"truth file: {expected} packets in EF-only flows of the planted rogue hosts {sorted(rogues)}")
if set(per_host) != rogues:
    sys.exit(f"demo FAILED: found hosts {sorted(per_host)}, planted {sorted(rogues)}")
if total == 0 or total != expected:
    sys.exit(f"demo FAILED: found {total} packets, the truth file says {expected}")
print("stored traffic OK: open the evidence with `wireshark " + sys.argv[2] + "`")
PY

echo "== 5. live capture on a veth pair between two network namespaces"
# The last step, run whether or not the live part could: the operator's questions answered
# from the index, checked against what synth planted.
answers() {
  echo "== 6. capsule dscp: which senders mark packets EF without being allowed to (docs/examples/capsule.toml)"
  $capsule dscp --store "$out/store" --config docs/examples/capsule.toml
  echo "== capsule stragglers: which GPU node sends less than its peers, from when"
  $capsule stragglers --store "$out/store" --config docs/examples/capsule.toml \
    --group gpu --interval 1s --ratio 0.75
  echo "== capsule bursts: the millisecond view (the 1 s peak hides twice that rate at 1 ms)"
  $capsule bursts --store "$out/store" --above 1G --limit 3
  echo "== capsule top --key app: who talks what, from the first bytes of each flow (not the port)"
  $capsule top --store "$out/store" --key app --limit 6
  $capsule dscp --store "$out/store" --config docs/examples/capsule.toml --json >"$out/dscp.json"
  $capsule stragglers --store "$out/store" --config docs/examples/capsule.toml \
    --group gpu --interval 1s --ratio 0.75 --json >"$out/stragglers.json"
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
truth = json.load(open(f"{out}/truth.json"))["facts"]
d = json.load(open(f"{out}/dscp.json"))
s = json.load(open(f"{out}/stragglers.json"))
found = sorted({v["src"] for v in d["violations"]})
if found != sorted(truth["rogue_ef_hosts"]):
    sys.exit(f"demo FAILED: dscp violations from {found}, planted {truth['rogue_ef_hosts']}")
names = [x["host"] for x in s["stragglers"]]
if names != [truth["straggler"]]:
    sys.exit(f"demo FAILED: stragglers {names}, planted {truth['straggler']}")
print(f"dscp names the planted rogue EF hosts {found}; stragglers names {names[0]} "
      f"from {s['stragglers'][0]['from']}, as planted")
PY
}

report() {
  echo "== 7. capsule triage: the findings with the packets that prove them"
  $capsule triage --store "$out/store" --config docs/examples/capsule.toml -o "$out/triage"
  python3 - "$out/triage" <<'PY'
import json, subprocess, sys
d = sys.argv[1]
doc = json.load(open(f"{d}/findings.json"))
kinds = sorted({f["kind"] for f in doc["findings"]})
for f in doc["findings"]:
    ev = f["evidence"]
    path = f"{d}/{ev['pcap']}"
    sha = subprocess.run(["sha256sum", path], capture_output=True, text=True).stdout.split()[0]
    n = subprocess.run(["capinfos", "-c", "-M", path], capture_output=True, text=True).stdout
    if sha != ev["sha256"] or f"{ev['packets']}" not in n:
        sys.exit(f"demo FAILED: evidence {path} does not match findings.json")
for want in ["dscp", "egress", "off_hours", "straggler"]:
    if want not in kinds:
        sys.exit(f"demo FAILED: triage has no {want} finding ({kinds})")
print(f"triage: {len(doc['findings'])} findings ({', '.join(kinds)}), every evidence file "
      f"checked; open {d}/report.html")
PY
}

if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: live capture needs root (network namespaces, XDP)"
  answers
  report
  exit 0
fi
ns_a="capsule-demo-$$-a" ns_b="capsule-demo-$$-b"
cap_pid=""
cleanup() {
  if [ -n "$cap_pid" ]; then kill -TERM "$cap_pid" 2>/dev/null || true; wait "$cap_pid" 2>/dev/null || true; fi
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add cdemo-a netns "$ns_a" type veth peer name cdemo-b netns "$ns_b"
for pair in "$ns_a cdemo-a" "$ns_b cdemo-b"; do
  set -- $pair
  ip netns exec "$1" sysctl -qw "net.ipv6.conf.$2.disable_ipv6=1"
  ip -n "$1" link set "$2" mtu 1600 up
done
$capsule synth --seed 11 --duration 2s --rate 100M -w "$out/live.pcap" >/dev/null
echo "== which XDP program variant this kernel loads (capture probes the same way)"
$capsule xdp-probe || echo "(no XDP variant loads here: capture falls back to AF_PACKET and says why)"
ip netns exec "$ns_b" $capsule capture --iface cdemo-b --store "$out/live-store" \
  >"$out/capture.out" 2>"$out/capture.err" &
cap_pid=$!
for _ in $(seq 100); do grep -q "capturing on" "$out/capture.err" && break; sleep 0.1; done
grep "capturing on" "$out/capture.err" || { cat "$out/capture.err"; exit 1; }
ip netns exec "$ns_a" tcpreplay -q -i cdemo-a --mbps 100 "$out/live.pcap" >/dev/null
sleep 1.5
$capsule status --store "$out/live-store"
echo "== EF sessions in the segment still being written (from its index journal)"
$capsule flows --store "$out/live-store" --limit 5 'dscp ef'
kill -TERM "$cap_pid"; wait "$cap_pid"; cap_pid=""
cat "$out/capture.out"
echo "== compaction: blocks live capture stored at a cheap rung, recompressed at the target level"
$capsule compact --store "$out/live-store"
sent=$(tshark -r "$out/live.pcap" -Y 'ip.dsfield.dscp == 46 or ipv6.tclass.dscp == 46' 2>/dev/null | wc -l)
got=$($capsule query --store "$out/live-store" --count 'dscp ef' | awk '{print $1; exit}')
echo "EF packets sent (tshark on the replayed file): $sent; returned by a query of the live capture: $got"
[ "$sent" -gt 0 ] && [ "$sent" = "$got" ] || { echo "demo FAILED: live capture query"; exit 1; }
echo "stored and live traffic answer the same question"
trap - EXIT
cleanup
answers
report
echo "demo OK"
