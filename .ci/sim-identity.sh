#!/usr/bin/env bash
# Checks that a change leaves the sim's figures byte-identical: runs the same small
# `remora bench --fabric sim` points with two binaries (a baseline built from the commit
# before the change, and the one under test) and compares their JSON records and their
# stderr (the engine's event, verb and poll counts included), wall-clock lines aside.
# For changes that must not move a figure (a faster sim, a file split).
#
#   cp target/release/remora /tmp/remora-before     # built before the change
#   cargo build --release -p remora-bins              # after it
#   bash .ci/sim-identity.sh /tmp/remora-before target/release/remora
#
# About a minute on an idle 2-core machine: SMART (A, E with string keys, an inserted
# LOAD), Sherman (A, write-intensive, an inserted LOAD), CANRT (A, range), Erda (A,
# update-only) and Catfish (C, B), 2 compute nodes x 4 clients x 4 coroutines.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BASELINE_BINARY TESTED_BINARY" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
points=(
    "smart-a --index smart --workload a --records 50000 --operations 100000"
    "smart-e --index smart --workload e --records 20000 --operations 20000 --keys string"
    "smart-load --index smart --workload load --records 30000 --no-bulk-load"
    "sherman-a --index sherman --workload a --records 50000 --operations 100000"
    "sherman-wi --index sherman --workload write-intensive --records 30000 --operations 60000"
    "sherman-load --index sherman --workload load --records 30000 --no-bulk-load"
    "canrt-a --index canrt --workload a --records 30000 --operations 60000"
    "canrt-range --index canrt --workload range --records 20000 --operations 5000"
    "erda-a --index erda --workload a --records 30000 --operations 60000"
    "erda-u --index erda --workload update-only --records 30000 --operations 60000"
    "catfish-c --index catfish --workload c --records 20000 --operations 20000"
    "catfish-b --index catfish --workload b --records 20000 --operations 20000"
)
# Lines that carry wall-clock or CPU time.
strip() { sed -E 's/in [0-9.]+ wall s/in - wall s/; /^sim speed:/d; /^bulk load:/d' "$1"; }
bad=0
for p in "${points[@]}"; do
    read -r name args <<<"$p"
    for side in 0 1; do
        bin=$1
        [ $side = 1 ] && bin=$2
        # shellcheck disable=SC2086
        "$bin" bench --fabric sim --compute-nodes 2 --clients-per-node 4 --coroutines 4 \
            $args --json "$out/$name.$side.json" >"$out/$name.$side.err" 2>&1
    done
    if cmp -s "$out/$name.0.json" "$out/$name.1.json" &&
        cmp -s <(strip "$out/$name.0.err") <(strip "$out/$name.1.err"); then
        echo "$name: identical ($(wc -l <"$out/$name.0.json") JSON records)"
    else
        echo "$name: DIFFERENT"
        diff <(strip "$out/$name.0.err") <(strip "$out/$name.1.err") | head -5 || true
        bad=$((bad + 1))
    fi
done
[ $bad = 0 ] && echo "all ${#points[@]} points identical" || { echo "$bad point(s) differ"; exit 1; }
