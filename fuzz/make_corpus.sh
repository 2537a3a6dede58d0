#!/usr/bin/env bash
# Regenerates the committed seed corpus in fuzz/corpus/<target>/ from files capsule itself
# makes (a tiny `capsule synth` pcap, its pcapng export, a sealed segment and its side index
# made by importing it) and from the filter strings and times of the query crate's tests and
# the README. Run from anywhere; builds the release binary if needed. The output is small
# (tens of KB) and committed; CI fuzzes a copy of it and never grows it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
C=$ROOT/fuzz/corpus
cargo build --release -q -p capsule
BIN=$ROOT/target/release/capsule
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

rm -rf "$C"
for t in dissect view filter time pcap_reader fragment segment_meta segment_file index_file index_journal config; do
    mkdir -p "$C/$t"
done

# ---- capture files ---------------------------------------------------------------------
# The smallest capture synth makes (100 ms at 80 Mbit/s, 1 MB), cut to its first 60 packets
# at a record boundary: a few of every kind synth makes.
"$BIN" synth --seed 1 --duration 100ms --rate 80M -w "$TMP/full.pcap" >/dev/null
python3 - "$TMP/full.pcap" "$TMP/synth.pcap" <<'PY'
import struct, sys
raw = open(sys.argv[1], "rb").read()
off = 24
for _ in range(60):
    off += 16 + struct.unpack_from("<I", raw, off + 8)[0]
open(sys.argv[2], "wb").write(raw[:off])
PY
mkdir -p "$TMP/store"
"$BIN" import --store "$TMP/store" "$TMP/synth.pcap" >/dev/null
"$BIN" query --store "$TMP/store" --format pcapng -w "$TMP/export.pcapng" >/dev/null
"$BIN" query --store "$TMP/store" -w "$TMP/export.pcap" >/dev/null
cp "$TMP/synth.pcap" "$C/pcap_reader/synth.pcap"
cp "$TMP/export.pcapng" "$C/pcap_reader/export.pcapng"
cp "$TMP/export.pcap" "$C/pcap_reader/export-ns.pcap"
# The same pcap cut short: a reader must stop with an error.
head -c 1000 "$TMP/synth.pcap" >"$C/pcap_reader/synth-cut.pcap"

seg=$(find "$TMP/store" -name 'seg-*.pcapng.zst' | sort | head -n 1)
idx=$(find "$TMP/store" -name 'seg-*.idx' | sort | head -n 1)
cp "$seg" "$C/segment_file/sealed.pcapng.zst"
# A torn copy (no footer): what the reader sees of an open segment.
head -c $(($(stat -c %s "$seg") * 2 / 3)) "$seg" >"$C/segment_file/torn.pcapng.zst"
cp "$idx" "$C/index_file/seg.idx"

# Seeds cut from the files with python: single packets for the dissector, fragments
# (pcapng blocks without a section header) for the fragment walkers, and the metadata
# frames and payloads of the segment for its decoders.
python3 - "$TMP" "$C" "$seg" <<'PY'
import os, struct, sys
tmp, c, seg = sys.argv[1:]

def put(target, name, data):
    with open(os.path.join(c, target, name), "wb") as f:
        f.write(data)

# Packets of the synth pcap (classic pcap, little endian, one link type).
raw = open(os.path.join(tmp, "synth.pcap"), "rb").read()
linktype = struct.unpack_from("<I", raw, 20)[0]
off, packets = 24, []
while off + 16 <= len(raw):
    incl = struct.unpack_from("<I", raw, off + 8)[0]
    packets.append(raw[off + 16 : off + 16 + incl])
    off += 16 + incl
# The dissector's input: 2 bytes of link type (LE), then the packet. Keep distinct shapes.
seen = set()
for p in packets:
    key = (len(p) // 64, p[12:14], p[23:24] if len(p) > 23 else b"")
    if key in seen:
        continue
    seen.add(key)
    put("dissect", f"pkt{len(seen):03d}", struct.pack("<H", linktype) + p)
    if len(seen) >= 40:
        break
# Raw IP versions of a few (link type 101), the Ethernet header dropped.
for i, p in enumerate(packets[:8]):
    put("dissect", f"raw{i}", struct.pack("<H", 101) + p[14:])

# pcapng blocks of the export: section header first, then blocks; the fragment walkers take
# runs of blocks without the section header.
ng = open(os.path.join(tmp, "export.pcapng"), "rb").read()
blocks, off = [], 0
while off + 12 <= len(ng):
    blen = struct.unpack_from("<I", ng, off + 4)[0]
    if blen < 12:
        break
    blocks.append(ng[off : off + blen])
    off += blen
body = blocks[1:]
put("fragment", "all", b"".join(body)[:16384])
put("fragment", "first", b"".join(body[:4]))
for i, b in enumerate(body):
    if struct.unpack_from("<I", b, 0)[0] == 5:  # ISB
        put("fragment", f"isb{i}", b)
        break

# The segment: raw zstd metadata frames (magic 28 b5 2f fd, descriptor a0) around the data
# frames. Cut out each metadata frame and its pcapng block payload.
s = open(seg, "rb").read()
magic = bytes.fromhex("28b52ffda0")
frames, pos = [], s.find(magic)
while pos >= 0:
    content = struct.unpack_from("<I", s, pos + 5)[0]
    flen = 9 + content + 3 * max(1, -(-content // (128 * 1024)))
    frames.append(s[pos : pos + flen])
    pos = s.find(magic, pos + flen)
for i, f in enumerate(frames[:6]):
    put("segment_meta", f"frame{i}", b"\x00" + f)
    # The payload: content after the 3-byte raw block header, minus the pcapng block's type
    # and length (8 bytes) and its closing length (4 bytes).
    payload = f[9 + 3 + 8 : len(f) - 4]
    if payload[:8] == b"CPSLSEG\0":
        put("segment_meta", "segment-header", b"\x01" + payload)
    elif payload[:8] == b"CPSLBLK\0":
        put("segment_meta", f"block-header{i}", b"\x02" + payload)
    elif payload[:8] == b"CPSLFTR\0":
        put("segment_meta", "footer", b"\x03" + payload)
put("segment_meta", "trailer", b"\x04" + s[-16:])
PY

# ---- text ------------------------------------------------------------------------------
# Filters: the query crate's tests and the README, good and bad.
i=0
while IFS= read -r f; do
    printf '%s' "$f" >"$C/filter/f$(printf %03d $i)"
    i=$((i + 1))
done <<'EOF_FILTERS'
tcp port 443 or dscp EF
host 10.0.0.300 and tcp
vlan or not vlan
(tcp or udp) and not (sctp or icmp)
((tcp) and ((udp)))
!!tcp
dscp 46 and dscp 45 and dscp be
dscp af41
dst portrange 010-20
host FD00:0::1
hots 10.0.0.1
ip and (tcp
ip6 dst net fd00::/8
not (tcp and udp)
proto 6 or proto 47 or proto 99
proto ipv6-icmp
sctp portrange 1-2
src net 10.1.2.3/16
tcp port 80 or udp port 53
tcp&&udp||!sctp
tcp) or udp
vlan 3 and host 10.0.0.1
vlan 5 and host 10.0.0.2 and port 2
vlan and vlan 7
host 10.1.2.3 and tcp port 443
net 10.50.0.0/16
dscp ef and not net 10.40.0.0/24
EOF_FILTERS

# Times: the time module's tests and the README.
i=0
while IFS= read -r t; do
    printf '%s' "$t" >"$C/time/t$(printf %03d $i)"
    i=$((i + 1))
done <<'EOF_TIMES'
now
-10m
-2h
-100ms
-2h30m
-1.5s
1.5
1.000000001
1.0000000001
@123
1970-01-01T00:00:00Z
1969-12-31T23:59:59Z
2000-02-29T00:00:00Z
2026-02-30T00:00:00Z
2026-11-29T21:30:00.5-04:30
2026-11-30 02:00:00.500Z
2026-11-30T02:00:00
2026-11-30T02:00:00.123456789Z
2026-11-30T02:00:01.5Z
2026-11-30T03:00:00.5+01:00
2026-11-30T24:00:00Z
2h 30m
yesterday
EOF_TIMES

# Config files: the example of docs/config.md, an overnight IPv6-heavy one with capture
# settings, and three with
# errors (a bad CIDR, an unknown section, an undefined group).
cat >"$C/config/example.toml" <<'EOF_CONFIG'
[groups]
voice = ["10.4.0.0/24", "fd00:4::/64"]
gpu = ["10.1.1.0/24"]
model-store = ["10.7.0.10"]
backup = ["10.8.0.20"]
lab = ["10.0.0.0/8"]
[dscp]
ef = ["voice"]
cs1 = []
[egress]
model-store = ["backup", "192.0.2.0/24"]
[work_hours]
days = "mon-fri"
start = "08:00"
end = "19:00"
timezone = "Europe/Berlin"
EOF_CONFIG
cat >"$C/config/overnight-v6.toml" <<'EOF_CONFIG'
[groups]
"night.ops" = ["fd00::/16", "fd00:1::/32", "::ffff:10.0.0.0/104", "fd00:1:2::7"]
day_ops = ["2001:db8::/32"]
[dscp]
46 = ["night.ops"]
AF41 = ["day_ops", "night.ops"]
[egress]
day_ops = ["night.ops", "2001:db8:ffff::/48", "0.0.0.0/0"]
[work_hours]
days = "fri-mon,wed"
start = "22:00"
end = "06:00"
timezone = "America/New_York"
[capture]
iface = "span0"
queues = [0, 1]
level = -10
ring_size = 0x1000_0000
take_interface = true
EOF_CONFIG
printf '[groups]\ngpu = ["10.1.1.0/24",\n  "10.1.2.0/33"]\n' >"$C/config/bad-cidr.toml"
printf '[groups]\na = []\n\n[alerts]\nrule = "x"\n' >"$C/config/unknown-section.toml"
printf '[groups]\nvoice = []\n[dscp]\nef = ["voice", "video"]\n' >"$C/config/undefined-group.toml"

# The Reader program: op codes then data (see fuzz_targets/view.rs).
printf '\x00\x01\x02\x03\x04\x05\x06\x0f\x0a\x03\x10\x02\x11\x12\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x80\x01' >"$C/view/ops"
printf '\x0f\x0f\x0f\x0f\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x80\x7f' >"$C/view/varints"

du -sh "$C"
