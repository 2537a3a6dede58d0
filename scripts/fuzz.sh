#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser (fuzz/README.md): builds the cargo-fuzz targets
# with the nightly toolchain and runs each one for SECONDS (default 20) on a copy of the
# committed seed corpus (fuzz/corpus/<target>/), which CI never grows. Fails, naming the
# reproducer, if any target finds a crash or a property failure. Installs cargo-fuzz when
# it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-20}

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
cargo +nightly fuzz build

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failed=()
for target in $(cargo +nightly fuzz list); do
    mkdir -p "$WORK/corpus/$target" "$WORK/artifacts/$target"
    if [ -d "fuzz/corpus/$target" ]; then
        cp -r "fuzz/corpus/$target/." "$WORK/corpus/$target/"
    fi
    log=$WORK/$target.log
    echo "fuzz: $target for ${SECONDS_PER_TARGET}s"
    if cargo +nightly fuzz run "$target" "$WORK/corpus/$target" -- \
        -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 \
        -artifact_prefix="$WORK/artifacts/$target/" >"$log" 2>&1; then
        grep -E '^stat::number_of_executed_units' "$log" | sed "s/^/fuzz: $target: /" || true
    else
        tail -n 40 "$log"
        mkdir -p fuzz/artifacts/"$target"
        cp "$WORK/artifacts/$target/"* fuzz/artifacts/"$target"/ 2>/dev/null || true
        for f in fuzz/artifacts/"$target"/*; do
            [ -e "$f" ] && echo "fuzz: $target: reproducer $f (cargo +nightly fuzz run $target $f)"
        done
        failed+=("$target")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: crashes in: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: every target ran ${SECONDS_PER_TARGET}s without a crash"
