#!/usr/bin/env python3
"""Writes docs/churn/README.md from the churn runs' records (<index>.json, <index>.time).

Called by run.sh after the runs; `python3 docs/churn/table.py docs/churn` redoes it alone.
Every figure in the table comes from those files: nothing here is typed by hand.
"""
import json
import os
import re
import sys

ORDER = ["smart", "sherman", "fg-plus", "chime", "canrt", "erda", "wort", "woart", "catfish"]
MIB = 1 << 20


def time_v(path):
    """(wall seconds, user CPU seconds, system CPU seconds) from `/usr/bin/time -v`."""
    if not os.path.exists(path):
        return None
    text = open(path).read()
    if "User time" not in text:
        return None  # a run still going (or killed before `time` wrote its report)
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", text).group(1))
    sys_ = float(re.search(r"System time \(seconds\): ([\d.]+)", text).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text).group(1)
    secs = 0.0
    for part in wall.split(":"):
        secs = secs * 60 + float(part)
    return secs, user, sys_


def slope(pts):
    """Least-squares bytes per million operations over (ops, bytes) points."""
    if len(pts) < 2:
        return 0.0
    n = len(pts)
    mx = sum(p[0] for p in pts) / n
    my = sum(p[1] for p in pts) / n
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in pts)
    return 0.0 if sxx == 0 else sxy / sxx * 1e6


def mib(b):
    return f"{b / MIB:.0f}"


def order(stem):
    """Runs in ORDER by index, a tagged run (`<index><TAG>`) after its index's first."""
    for i, name in enumerate(ORDER):
        if stem == name or stem.startswith(name + "-"):
            return (i, stem)
    return (len(ORDER), stem)


def row(here, stem):
    path = os.path.join(here, stem + ".json")
    recs = json.load(open(path))
    r = recs[0] if isinstance(recs, list) else recs
    pts = [(s["ops"], sum(s["bytes_in_use"])) for s in r["samples"]]
    first, last = pts[0][1], pts[-1][1]
    peak = max(p[1] for p in pts)
    half = [p for p in pts if p[0] >= pts[-1][0] / 2]
    t = time_v(os.path.join(here, stem + ".time"))
    full = "yes" if (r["error"] and "full" in r["error"]) or peak >= r["region_bytes"] else "no"

    if r["error"]:
        check = "not run: " + r["error"].split(": ", 1)[-1]
    elif r["final_mismatches"] == 0 and r["resurrected"] == 0:
        check = f"all {r['records']:,} live read back exactly; 0 deleted found"
    else:
        check = f"{r['final_mismatches']} live wrong, {r['resurrected']} deleted found"
    return {
        "stem": stem,
        "cells": [
            r["index"] + ("" if stem in ORDER else f" ({stem})"),
            r["fabric"],
            f"{r['records']:,}",
            f"{mib(r['region_bytes'])} ({r['region_bytes'] / first:.1f}x)",
            f"{r['ops_done']:,}" + ("" if r["ops_done"] == r["operations"] else f" of {r['operations']:,}"),
            f"{r['churn_seconds']:.0f}",
            f"{first / MIB:.0f} / {last / MIB:.0f} / {peak / MIB:.0f}",
            full,
            f"{r['slope_bytes_per_mop'] / 1024:,.0f}",
            f"{slope(half) / 1024:,.0f}" if len(half) >= 3 else f"n/a ({len(pts)} samples)",
            check,
            f"{t[0]:.0f}" if t else "?",
            f"{t[1]:.0f} + {t[2]:.0f}" if t else "?",
        ],
        "rec": r,
    }


HEAD = """# Churn: remote bytes in use under deletes and inserts over a fixed live set

Issue 26 asks, for every index, for a churn of at least 100M operations (or an hour) in a
region four times the live set's size, showing that the index never fills, that its bytes in
use stay flat, and that every live key reads back exactly at the end. This page is written by
`docs/churn/table.py` from the JSON records and `/usr/bin/time -v` outputs that
`docs/churn/run.sh` leaves here; rerun `docs/churn/run.sh` to regenerate all of it.

**The run** (`remora bench --churn`, `bins/src/bench/churn.rs`): load `--records` keys, then
each operation deletes one live key (chosen uniformly) and inserts a new one, so the live set
stays the same size. Every `--operations / --churn-samples` operations (and, with
`--seconds S`, every `S / --churn-samples` seconds; runs started before 12:06 UTC sampled on
operations only) the bench reads the
memory node's region header through the fabric: its allocator cursor (`next_chunk`), the
bytes of the region handed out so far in whole chunks (1 MiB), is the **bytes in use**. An
index that reuses what it frees keeps it flat; one that leaks climbs until the node is full.
At the end every live key is read and compared with its value, and the latest 1,000 deleted
keys must not be found. For Catfish (`churn/rtree.rs`) the keys are rectangles: each live one
must be found exactly once, with its id, by an offloaded window search of itself, a search of
the whole space must return exactly the live set, and no recently deleted one may be found.

**The live set's size** is the index's bytes in use right after loading the live set (the
first sample of each run: 100,000 8-byte integer keys with 8-byte values, or 100,000
rectangles for Catfish). The region is four times that, rounded up to whole MiB (`run.sh`
holds the measured sizes; the table's region column shows the ratio to the first sample).

**Where it ran**: the soft fabric (an in-process memory node on this machine), one client
thread, on a 2-core machine shared with up to 7 other builds and runs (load average about
20 during these runs), each run under `nice -n 10`, two at a time. Wall time is the machine's
share, not remora's speed. Runs that could not finish 100M operations before the session's
deadline were capped by wall time (`--seconds`): the ops column says how many ran, of how
many asked. No run below is claimed longer than it ran.

The runs on this page were started, from the repository's root, as

    DEADLINE=12:33 nohup nice -n 10 docs/churn/run.sh        # the eight key-value indexes
    DEADLINE=12:38 nohup nice -n 10 docs/churn/run.sh catfish
    TAG=-clock DEADLINE=12:38 nohup nice -n 10 docs/churn/run.sh canrt

(the last again after the first CANRT run, which predates sampling on the clock and has two
samples only). Without `DEADLINE` every run goes to its 100M operations.

The soft rows of SMART, Sherman, FG+ and CHIME are from later runs (load average 5-8, beside
a CI run), SMART's after its leak was fixed (objects never linked go back to the reclaim
lists, and a delete shrinks an underfull Node16/Node48; the run before the fix filled its
44 MiB at 26.6M operations):

    DEADLINE=16:30 nohup nice -n 10 docs/churn/run.sh smart
    DEADLINE=16:45 nohup nice -n 10 docs/churn/run.sh sherman chime fg-plus

The rows whose fabric is `sim` ran on the simulated cluster, one client (deterministic: the
same command gives the same samples; wall and CPU are this machine's), five at a time under
`nice -n 19` beside eight helper builds, so the operations they ran are what their share of
the two cores allowed by the deadline:

    FABRIC=sim TAG=-sim DEADLINE=16:00 nohup nice -n 19 docs/churn/run.sh canrt   # and wort, woart, erda, catfish

Columns: the region (MiB, and its ratio to the live set's size); the operations run; the
churn's seconds (after loading, before the final check); bytes in use at the first sample,
the last and the peak (MiB); whether the node filled (the run stopped on a full node, or
the peak reached the region); the least-squares slope of the bytes in use over the whole run
and over its second half (KiB per million operations: a warm-up that settles shows in the
first and not the second; a leak shows in both); the final check; wall seconds and CPU
seconds (user + system) of the whole process, the load included.

"""


def main():
    here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    stems = [f[:-5] for f in os.listdir(here) if f.endswith(".json")]
    rows = [row(here, s) for s in sorted(stems, key=order)]
    out = [HEAD]
    out.append("| index | fabric | live set | region MiB | operations run | churn s | MiB in use first / last / peak "
               "| full | slope KiB/Mop | 2nd-half slope KiB/Mop | final check | wall s | CPU s (user + sys) |")
    out.append("|" + "---|" * 13)
    for r in rows:
        out.append("| " + " | ".join(r["cells"]) + " |")
    out.append("")
    for r in rows:
        rec = r["rec"]
        if rec["error"]:
            out.append(f"- **{r['stem']}** stopped: `{rec['error']}`")
    out.append("")
    out.append("## Charts (bytes in use over operations)\n")
    for r in rows:
        out.append(f"### {r['stem']}\n")
        out.append(f"![{r['stem']}]({r['stem']}.svg)\n")
    open(os.path.join(here, "README.md"), "w").write("\n".join(out))


if __name__ == "__main__":
    main()
