#!/usr/bin/env bash
# remora's ideas on CHIME's experiment, each row's ratio (the median over seeds 1-3, the
# smallest and largest beside it) in the quick and full CHIME reports, read from their
# report.json (written by `remora repro chime --scale quick|full`, the commands each
# report.md names). Prints the table README.md shows between <!-- gen:docs/chime-ideas.sh -->
# and <!-- /gen -->; .ci/readme-check.sh reruns it.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - docs/repro-chime docs/repro-chime-full <<'PY'
import json, sys
reports = [json.load(open(f"{d}/report.json")) for d in sys.argv[1:]]
rows = [{r["id"]: r for p in rep["papers"] for r in p["rows"] if r["id"].startswith("idea-")}
        for rep in reports]
def cell(r):
    if r is None:
        return "—"
    s = r.get("seeds") or {}
    if s:
        return f"{s['median']:.3f}x ({s['min']['ratio']:.3f}-{s['max']['ratio']:.3f})"
    return f"{r['remora']:.3f}x"
print("| row | bars | quick (10,000 keys) | full (500,000 keys) |")
print("|---|---|---|---|")
for id in rows[0]:
    what = rows[0][id]["what"].split(", throughput")[0].replace("remora's idea ", "")
    print(f"| `{id}` | {what} | {cell(rows[0].get(id))} | {cell(rows[1].get(id))} |")
PY
