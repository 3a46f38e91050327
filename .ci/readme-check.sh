#!/usr/bin/env bash
# Runs the README's main command (the first ```sh block after "## The two commands") and
# fails if its side-by-side table differs from the one the README shows between
# <!-- main:output --> and <!-- /main:output -->. The sim is deterministic (same seed, same
# figures), so a README figure that no longer matches the code fails CI instead of going
# stale. To accept new figures, paste the command's new table into the README.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=$(awk '/^## The two commands/{f=1} f && /^```sh/{g=1; next} g {print; exit}' README.md)
[ -n "$cmd" ] || { echo "README.md: no main command under '## The two commands'" >&2; exit 1; }
shown=$(awk '/<!-- main:output -->/{f=1; next} /<!-- \/main:output -->/{f=0} f' README.md \
    | awk '/^side by side/{f=1} f && /^```/{exit} f')
[ -n "$shown" ] || { echo "README.md: no side-by-side table between the main:output markers" >&2; exit 1; }
echo "+ $cmd"
got=$(bash -o pipefail -c "$cmd" 2>&1 | awk '/^side by side/{f=1} f')
if [ "$got" != "$shown" ]; then
    echo "README.md's main-job table is stale; the command now prints:" >&2
    diff <(echo "$shown") <(echo "$got") >&2 || true
    exit 1
fi
echo "README main-job table matches the command's output"
