#!/usr/bin/env bash
# The class counts of every committed repro report, read from its report.json (written by the
# `remora repro` command its report.md names). Prints the table README.md shows between
# <!-- gen:docs/report-classes.sh --> and <!-- /gen -->; .ci/readme-check.sh reruns it, so a
# report regenerated without its README line fails CI instead of going stale.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "| report | scale | claims | faithful | rough | off | direction only | unmeasured |"
echo "|---|---|---|---|---|---|---|---|"
for dir in docs/repro docs/repro-full/all docs/repro-chime docs/repro-chime-full; do
    python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/report.json"))
c = r["classes"]
n = sum(len(p["rows"]) for p in r["papers"])
print(f"| [`{d}`]({d}/report.md) | {r['scale']} | {n} | {c['faithful']} | {c['rough']} "
      f"| {c['off']} | {c['direction only']} | {c['unmeasured']} |")
PY
done
