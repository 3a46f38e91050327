#!/usr/bin/env bash
# Regenerates the committed quick reports into a scratch directory and fails if one differs
# from its committed report.json: `remora repro all` against docs/repro/report.json and
# `remora repro chime` against docs/repro-chime/report.json. Same claim rows, every ratio on
# the same side of 1, and no row's class worse than committed (faithful -> rough or off,
# rough -> off; wall-clock rows excepted). The figures themselves may move with the code
# within their class.
#
# The papers run two at a time (one per core), each into its own directory; then one
# `--resume` run per report loads their experiment files (same binary, so every point is
# reused and none measured again) and writes and checks the report, which is then what one
# run in one go writes (bins/tests/cli/resume.rs).
#
# To accept a new shape, regenerate the committed reports the same way, two papers at a
# time (`bash .ci/repro-check.sh --write`), or one run each:
#   cargo run --release -p remora-bins -- repro all --scale quick --out docs/repro
#   cargo run --release -p remora-bins -- repro chime --scale quick --out docs/repro-chime
set -euo pipefail
write=0
[ "${1:-}" = --write ] && write=1
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release -p remora-bins
remora=$PWD/target/release/remora
jobs=${REPRO_JOBS:-2}

# Longest first, so that the two lanes end close together.
papers="chime smart sherman catfish erda canrt"
start=$(date +%s)
if ! printf '%s\n' $papers | xargs -P "$jobs" -I{} sh -c \
    '"$1" repro "$2" --scale quick --out "$3/$2" --quiet > "$3/$2.log" 2>&1 \
        && echo "repro $2: $(($(date +%s) - $4)) s after the start" \
        || { echo "repro $2 failed:" >&2; cat "$3/$2.log" >&2; exit 255; }' \
    _ "$remora" {} "$out" "$start"; then
    exit 1
fi

if [ $write = 1 ]; then
    all=docs/repro chime=docs/repro-chime check_all=() check_chime=()
else
    all=$out/all chime=$out/chime-report
    check_all=(--check docs/repro/report.json) check_chime=(--check docs/repro-chime/report.json)
fi
mkdir -p "$all" "$chime"
for p in smart catfish erda canrt sherman; do
    find "$out/$p" -maxdepth 1 -name '*.json' ! -name report.json ! -name memory.json \
        -exec cp {} "$all/" \;
done
find "$out/chime" -maxdepth 1 -name '*.json' ! -name report.json -exec cp {} "$chime/" \;

"$remora" repro all --scale quick --out "$all" --quiet --resume \
    "${check_all[@]}" 2> >(grep -v '^resume: .*: reusing' >&2)
"$remora" repro chime --scale quick --out "$chime" --quiet --resume \
    "${check_chime[@]}" 2> >(grep -v '^resume: .*: reusing' >&2)
[ $write = 1 ] && echo "repro-check --write: $all and $chime regenerated ($(($(date +%s) - start)) s)" && exit 0
echo "repro-check: both reports match their committed shape ($(($(date +%s) - start)) s)"
