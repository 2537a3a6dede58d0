#!/bin/bash
# Proves that two capsule binaries write the same side index for the same traffic: each
# imports the same synthetic trace (several sealed segments, so TCP state and names carry
# across segments), and a second time from a pipe held open, so the open segment's index
# journal is copied while it exists; then every file under index/ and every journal copy
# is compared byte for byte.
#
#   bash scripts/compare_index_output.sh OLD_BIN NEW_BIN [WORKDIR]
#
# Exits 0 when every file is identical, 1 when one differs or is missing, 2 on a setup
# failure. The old binary is also run twice, to show the output is deterministic (a
# comparison of two things that always differ would prove nothing).
set -u
old=${1:?old binary}
new=${2:?new binary}
dir=${3:-/tmp/compare-index}
rm -rf "$dir" && mkdir -p "$dir" || exit 2
cd "$dir" || exit 2

"$old" synth --seed 7 --duration 4s --rate 400M --write t.pcap >/dev/null 2>&1 || exit 2

run() { # BIN NAME
    local bin=$1 name=$2
    "$bin" import --store "$name" --segment-size 48M --block-age 1h --segment-age 1h --level store t.pcap >/dev/null 2>&1 || return 2
    # The open segment's journal: the trace through a pipe that stays open after it, so
    # the segment being written is not sealed until the copy is taken.
    mkdir -p "$name-open" "$name-journal"
    ( cat t.pcap; sleep 6 ) | "$bin" import --store "$name-open" --segment-size 1G --block-age 1h --segment-age 1h --level store - \
        >/dev/null 2>&1 &
    local pid=$!
    sleep 5
    cp -r "$name-open/index/." "$name-journal/" 2>/dev/null
    wait "$pid" || return 2
}

run "$old" A || exit 2
run "$old" A2 || exit 2
run "$new" B || exit 2

fail=0
compare() { # DIR_X DIR_Y
    local x=$1 y=$2 f n=0
    while IFS= read -r f; do
        n=$((n + 1))
        if ! cmp -s "$x/$f" "$y/$f"; then
            echo "DIFFERS: $f ($x vs $y)"
            fail=1
        fi
    done < <(cd "$x" && find . -type f -not -name '*.lock' | sort)
    # Files only the second has.
    while IFS= read -r f; do
        [ -e "$x/$f" ] || { echo "ONLY IN $y: $f"; fail=1; }
    done < <(cd "$y" && find . -type f -not -name '*.lock' | sort)
    echo "$x vs $y: $n files compared"
}
for d in index journal; do
    case $d in
        index) sx=A/index sy=B/index s2=A2/index ;;
        journal) sx=A-journal sy=B-journal s2=A2-journal ;;
    esac
    [ -n "$(ls "$sx")" ] || { echo "no files in $sx"; exit 2; }
    compare "$sx" "$s2"
    compare "$sx" "$sy"
done
ls A-journal
if [ "$fail" = 0 ]; then echo "IDENTICAL"; else echo "DIFFERENT"; fi
exit "$fail"
