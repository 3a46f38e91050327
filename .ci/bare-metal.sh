#!/usr/bin/env bash
# The no_std crates build for bare-metal targets: a 32-bit Cortex-M4F without 64-bit atomics
# (what SmartNIC and custom firmware look like) and x86_64 without an OS. Installs the
# targets' core libraries with rustup first.
set -euo pipefail
cd "$(dirname "$0")/.."
targets="thumbv7em-none-eabihf x86_64-unknown-none"
for t in $targets; do
    if ! rustup target list --installed | grep -qx "$t"; then
        rustup target add "$t" || { echo "bare-metal: cannot install the $t target with rustup" >&2; exit 1; }
    fi
done
for t in $targets; do
    echo "bare-metal: remora-layouts and remora-core (alloc) for $t"
    cargo build --quiet -p remora-layouts -p remora-core --features remora-core/alloc --target "$t"
done
echo "bare-metal: ok"
