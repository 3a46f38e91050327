#!/usr/bin/env bash
# Per-compute-node index state against one per client thread, on the sim (issue 23). Prints
# the markdown table README.md shows between <!-- gen:docs/node-state.sh --> and <!-- /gen -->;
# .ci/readme-check.sh reruns it and fails if the README's copy differs. The sim is
# deterministic: the same commands give the same figures. REMORA picks the binary (default:
# cargo run --release).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${REMORA:-}" ]; then remora=("$REMORA"); else
    cargo build --release -q -p remora-bins
    remora=(target/release/remora)
fi
smart="--fabric sim --profile smart --set server_llc_lines=66 --records 10000 --warmup 51200 \
--compute-nodes 16 --memory-nodes 2 --clients-per-node 4 --coroutines 4 --index smart --keys int \
--no-bulk-load"
sherman="--fabric sim --records 10000 --operations 10000 --warmup 8800 --profile sherman \
--set server_llc_lines=64 --compute-nodes 8 --memory-nodes 8 --coroutines 1 \
--clients-per-node 22 --index sherman --workload a --no-bulk-load"

# One row: label, state, the bench flags.
row() {
    local label=$1 state=$2
    shift 2
    local out wl
    out=$("${remora[@]}" bench "$@" 2>&1)
    wl=$(grep -oE -- '--workload [a-z]+' <<<"$*" | awk '{print toupper($2)}')
    awk -v label="$label" -v state="$state" -v wl="$wl" '
        $1 == wl && $2 == "run" && $3 ~ /^[0-9]+$/ { mops = $4; bytes = $11 }
        / run: .* reads delegated/ { split($0, a, ": "); shared = a[2] }
        / run: .* locks taken/ { split($0, a, ": "); shared = a[2] }
        /^note: client state:/ { n = split($0, a, ", "); per = a[n]; sub(/ per client thread/, "", per) }
        END {
            if (mops == "") { print "node-state.sh: no " wl " run row" > "/dev/stderr"; exit 1 }
            printf "| %s | %s | %s | %s | %s | %s |\n", label, state, mops, bytes, shared, per
        }' <<<"$out"
}

echo "| run | state | Mops | B read per op | shared work in the measured phase | client state per thread |"
echo "|---|---|---|---|---|---|"
row "SMART, hot YCSB-A" "per node" $smart --operations 10000 --workload a
row "SMART, hot YCSB-A" "per thread" $smart --operations 10000 --workload a --per-thread-state
row "SMART, YCSB-C" "per node" $smart --operations 20000 --workload c
row "SMART, YCSB-C" "per thread" $smart --operations 20000 --workload c --per-thread-state
row "Sherman, YCSB-A, 8 x 22 clients" "hand-over (cap 7)" $sherman
row "Sherman, YCSB-A, 8 x 22 clients" "no hand-over (--handover-cap 0)" $sherman --handover-cap 0
