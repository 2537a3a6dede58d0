#!/usr/bin/env bash
# Installs aioquic (PyPI; a QUIC client in Python, with its own TLS 1.3) into a venv under
# target/, when missing, and prints the venv's python. tests/names.rs runs it as a real
# QUIC client on loopback, whose Initial packets capsule must read the server name from.
# Safe to run repeatedly.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${CAPSULE_QUIC_VENV:-$root/target/quic-venv/venv}"
py="$venv/bin/python3"
if ! [ -x "$py" ] || ! "$py" -c 'import aioquic' 2>/dev/null; then
  command -v python3 >/dev/null || { echo "install_aioquic.sh: python3 is needed" >&2; exit 1; }
  python3 -m venv "$venv" >&2 || { apt-get install -y -qq python3-venv >&2 && python3 -m venv "$venv" >&2; }
  "$venv/bin/pip" install -q aioquic >&2
fi
echo "$py"
