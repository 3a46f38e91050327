#!/usr/bin/env bash
# Regenerates the committed `remora repro all --scale quick` report into a scratch
# directory and fails if it differs from docs/repro/report.json: the same claim rows, every
# ratio on the same side of 1, and no row's class worse than committed (faithful -> rough or
# off, rough -> off; wall-clock rows excepted). The figures themselves may move with the code
# within their class.
# To accept a new shape, regenerate the committed report:
#   cargo run --release -p remora-bins -- repro all --scale quick --out docs/repro
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release -p remora-bins
./target/release/remora repro all --scale quick --out "$out" --quiet \
    --check docs/repro/report.json
