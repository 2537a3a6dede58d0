#!/usr/bin/env bash
# Runs every check capsule has: formatting, lints, docs, unit, property and end-to-end tests,
# and that the benches compile. Installs missing system packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo fmt --all -- --check
python3 scripts/check_layout.py
cargo clippy --workspace --all-targets --release -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
cargo bench --workspace --no-run
cargo test --workspace --release
bash scripts/fuzz.sh 20
