#!/usr/bin/env python3
"""Fidelity classes of a full-scale report beside the quick report's, over the same rows.

    python3 docs/repro-full/compare.py docs/repro-full/all/report.json docs/repro/report.json

Prints a markdown table of class counts (full, and quick over the same rows) and the rows
whose class differs, with both ratios and the paper's range.
"""
import json
import sys

CLASSES = ["faithful", "rough", "off", "direction only", "unmeasured"]


def rows(path):
    r = json.load(open(path))
    return {(p["key"], c["id"]): c for p in r["papers"] for c in p["rows"]}


def counts(rs):
    n = {k: 0 for k in CLASSES}
    for c in rs:
        n[c["class"]] = n.get(c["class"], 0) + 1
    return ", ".join(f"{k} {n[k]}" for k in CLASSES)


def ratio(c):
    return "—" if c.get("remora") is None else f"{c['remora']:.2f}x"


def main(full_path, quick_path):
    full, quick = rows(full_path), rows(quick_path)
    same = [k for k in full if k in quick]
    print("| report | rows | full | quick, same rows |")
    print("|---|---:|---|---|")
    for paper in sorted({k[0] for k in same}):
        ks = [k for k in same if k[0] == paper]
        print(f"| {paper} | {len(ks)} | {counts(full[k] for k in ks)} | {counts(quick[k] for k in ks)} |")
    print(f"| all | {len(same)} | {counts(full[k] for k in same)} | {counts(quick[k] for k in same)} |")
    only = [k for k in full if k not in quick]
    if only:
        print(f"\nRows in the full report only: {', '.join(f'{p} `{i}`' for p, i in only)}")
    print("\nRows whose class differs between quick and full:")
    for k in same:
        f, q = full[k], quick[k]
        if f["class"] != q["class"]:
            lo, hi = f.get("paper_lo"), f.get("paper_hi")
            paper = f"; paper {lo:g}-{hi:g}x" if lo is not None and hi is not None else ""
            print(f"- {k[0]} `{k[1]}` ({f['what']}{paper}): quick {ratio(q)} {q['class']} -> full {ratio(f)} {f['class']}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
