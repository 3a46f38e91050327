#!/usr/bin/env bash
# Regenerates docs/churn: a churn run (`remora bench --churn`) per key-value index on the soft
# fabric, over a live set of 100,000 keys in a region four times that live set's size, then
# docs/churn/README.md's table from the JSON records (`./run.sh table` redoes only the table).
# Catfish, the R-tree, churns 100,000 rectangles the same way (`bins/src/bench/churn/rtree.rs`).
#
#   docs/churn/run.sh            # every index, 100M operations each, two at a time
#   OPS=1000000 docs/churn/run.sh sherman smart
#   DEADLINE=12:33 docs/churn/run.sh   # cap each run's churn so each lane ends by 12:33 UTC
#   TAG=-again docs/churn/run.sh canrt  # writes canrt-again.* beside canrt.*
#   FABRIC=sim TAG=-sim docs/churn/run.sh wort  # on the simulated cluster instead of soft
#
# Per index it writes <index>.json (the record, samples included), <index>.txt (the printed
# table), <index>.time (`/usr/bin/time -v`: wall and CPU) and <index>.svg/.png (the chart);
# with TAG set, <index>$TAG.json and so on.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${REMORA:-$root/target/release/remora}"
RECORDS="${RECORDS:-100000}"
OPS="${OPS:-100000000}"
SAMPLES="${SAMPLES:-50}"

# The live set's size is the index's bytes in use right after loading RECORDS keys (the first
# sample of every run: its allocator cursor, in 1 MiB chunks, header included), measured with
#   remora bench --fabric soft --index I --churn --records 100000 --operations 20000 \
#     --churn-samples 2 --region-mib 512
# (Catfish's 5 MiB by the same command with --index catfish.)
# The region is four times that, in MiB (the README's table shows region / first sample).
declare -A LIVE_MIB=([smart]=11 [sherman]=8 [fg-plus]=8 [chime]=9 [canrt]=11 [erda]=97 [wort]=17 [woart]=13 [catfish]=5)
# Two lanes run side by side; each pairs a one-sided index with a server-assisted one.
LANE_A=(sherman canrt fg-plus erda)
LANE_B=(smart wort chime woart catfish)

one() { # index cap-seconds-or-empty
    local i="$1" cap="$2" region=$((4 * LIVE_MIB[$1])) f="$here/$1${TAG:-}"
    local extra=()
    [[ -n "$cap" ]] && extra=(--seconds "$cap")
    echo "$(date -u +%T) $i: region $region MiB, $OPS operations ${cap:+(at most $cap s)}"
    /usr/bin/time -v -o "$f.time" "$bin" bench --fabric "${FABRIC:-soft}" --index "$i" --churn \
        --records "$RECORDS" --operations "$OPS" --churn-samples "$SAMPLES" \
        --region-mib "$region" --churn-chart "$f" --json "$f.json" --quiet \
        "${extra[@]}" >"$f.txt" 2>&1 || echo "$i: exit $? (see $f.txt)"
}

lane() { # indexes...
    local left=$#
    for i in "$@"; do
        local cap=""
        if [[ -n "${DEADLINE:-}" ]]; then
            # Share what is left until DEADLINE among this lane's remaining runs, keeping 120 s
            # of each for loading and the final check.
            local now end
            now=$(date -u +%s)
            end=$(date -u -d "$DEADLINE" +%s)
            cap=$(((end - now) / left - 120))
            ((cap < 30)) && cap=30
        fi
        one "$i" "$cap"
        left=$((left - 1))
    done
}

if [[ "${1:-}" != table ]]; then
    if [[ $# -gt 0 ]]; then
        lane "$@"
    else
        lane "${LANE_A[@]}" &
        lane "${LANE_B[@]}" &
        wait
    fi
fi
python3 "$here/table.py" "$here"
