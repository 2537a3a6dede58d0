#!/usr/bin/env bash
# Runs every check capsule has: formatting, lints, docs, unit, property and end-to-end tests,
# that the benches compile, and the fuzzers. Installs missing system packages first.
#
# Every step runs even when an earlier one failed, and every test binary runs even when
# another failed (--no-fail-fast), so one red test never hides the rest. The script exits
# non-zero when any step failed, and ends with a summary: the steps that failed, the tests
# that could not run on this machine and why (a kernel that refuses an XDP variant, say:
# they are counted as skipped, never as passed), and one closing line of totals.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh || exit 1

failed=()
step() {
    local name=$1
    shift
    echo "== $name: $*"
    if ! "$@"; then
        failed+=("$name")
        echo "== $name: FAILED"
    fi
}

step fmt cargo fmt --all -- --check
step layout python3 scripts/check_layout.py
step clippy cargo clippy --workspace --all-targets --release -- -D warnings
step rustdoc env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
step benches cargo bench --workspace --no-run

mkdir -p target/tmp
skipped_ledger=target/tmp/capsule-skipped.txt
test_log=target/tmp/capsule-test-output.log
rm -f "$skipped_ledger"
echo "== tests: cargo test --workspace --release --no-fail-fast"
cargo test --workspace --release --no-fail-fast 2>&1 | tee "$test_log"
[ "${PIPESTATUS[0]}" -eq 0 ] || failed+=(tests)

step fuzz bash scripts/fuzz.sh 20

# Totals of every test binary's "test result:" line.
read -r passed tfailed < <(awk '/^test result:/ {
        for (i = 1; i <= NF; i++) {
            if ($(i) ~ /^passed;?$/) p += $(i - 1);
            if ($(i) ~ /^failed;?$/) f += $(i - 1);
        }
    } END { print p + 0, f + 0 }' "$test_log")
skipped=0
if [ -s "$skipped_ledger" ]; then
    skipped=$(sort -u "$skipped_ledger" | wc -l)
    echo
    echo "skipped on this machine ($skipped; each reported as passed by cargo, counted here as skipped):"
    sort -u "$skipped_ledger" | sed 's/^/  /'
fi
echo
if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed steps: ${failed[*]}"
fi
echo "tests: $((passed - skipped)) passed, $tfailed failed, $skipped skipped"
[ "${#failed[@]}" -eq 0 ]
