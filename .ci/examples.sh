#!/usr/bin/env bash
# Runs every example of the root crate (each checks its own answers and exits non-zero on a
# wrong one), builds the docs with warnings as errors, and packages the crates.
#
# Publishable crates: remora-layouts, remora-core, remora-pmem, remora-poller, remora and
# remora-bins (path dependencies carry versions, so they publish in that order). The three
# leaf crates are verified here (built from their packages); the others are packaged
# without verification, since verifying them builds the whole workspace a second time.
set -euo pipefail
cd "$(dirname "$0")/.."

# One example per index (catfish.rs: the spatial one), plus the embedding ones: a missing
# file fails here rather than silently dropping out of the loop below.
for want in smart_threads smart_tokio memnode_processes sherman chime canrt erda catfish verbs_cluster; do
    test -f "examples/$want.rs" || { echo "examples/$want.rs is missing" >&2; exit 1; }
done

# Examples that need feature `verbs` (Cargo.toml's required-features): built and run (over
# the fake verbs device, no NIC needed) where rdma-core's headers are installed.
VERBS_EXAMPLES="verbs_cluster"
cargo build --release -p remora --examples
if [ -e /usr/include/infiniband/verbs.h ]; then
    cargo build --release -p remora --features verbs --examples
else
    echo "+ no rdma-core headers (libibverbs-dev): skipping the verbs examples: $VERBS_EXAMPLES"
fi
for ex in examples/*.rs; do
    name=$(basename "$ex" .rs)
    case " $VERBS_EXAMPLES " in
    *" $name "*) [ -e /usr/include/infiniband/verbs.h ] || continue ;;
    esac
    echo "+ example $name"
    timeout 300 "target/release/examples/$name"
done

echo "+ cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

echo "+ cargo package"
cargo package --allow-dirty -p remora-layouts -p remora-core -p remora-pmem
cargo package --allow-dirty --no-verify --workspace
