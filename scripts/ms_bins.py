#!/usr/bin/env python3
"""Bins the frames of classic pcap files by epoch millisecond and DSCP value, independently
of capsule: an exact reference for the side index's millisecond series (tests/bursts.rs).

Usage: ms_bins.py FILE.pcap...  ->  JSON on stdout: {"MS": {"DSCP": [packets, bytes]}}
where MS is the millisecond since the Unix epoch, DSCP the value 0-63 (64: not IPv4/IPv6)
and bytes the frames' original (wire) lengths. Ethernet only; 802.1Q/802.1ad tags are
skipped. Both microsecond (a1b2c3d4) and nanosecond (a1b23c4d) pcap, either byte order.
"""
import json
import struct
import sys


def dscp_of(frame):
    """The DSCP value of an Ethernet frame, or 64 when it is not IP."""
    off = 12
    if len(frame) < off + 2:
        return 64
    etype = struct.unpack_from(">H", frame, off)[0]
    while etype in (0x8100, 0x88A8) and len(frame) >= off + 6:
        off += 4
        etype = struct.unpack_from(">H", frame, off)[0]
    ip = off + 2
    if etype == 0x0800 and len(frame) > ip + 1 and frame[ip] >> 4 == 4:
        return frame[ip + 1] >> 2
    if etype == 0x86DD and len(frame) > ip + 1 and frame[ip] >> 4 == 6:
        tclass = ((frame[ip] & 0x0F) << 4) | (frame[ip + 1] >> 4)
        return tclass >> 2
    return 64


def main():
    bins = {}
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            data = f.read()
        magic = data[:4]
        for order in ("<", ">"):
            m = struct.unpack_from(order + "I", magic)[0]
            if m in (0xA1B2C3D4, 0xA1B23C4D):
                break
        else:
            sys.exit(f"{path}: not a classic pcap file (magic {magic.hex()})")
        frac = 1 if m == 0xA1B23C4D else 1000
        at = 24
        while at + 16 <= len(data):
            sec, sub, incl, orig = struct.unpack_from(order + "IIII", data, at)
            frame = data[at + 16 : at + 16 + incl]
            at += 16 + incl
            ms = (sec * 1_000_000_000 + sub * frac) // 1_000_000
            d = bins.setdefault(str(ms), {})
            c = d.setdefault(str(dscp_of(frame)), [0, 0])
            c[0] += 1
            c[1] += max(orig, incl)
    json.dump(bins, sys.stdout)


if __name__ == "__main__":
    main()
