#!/usr/bin/env python3
"""Compare `ibp bench` results files cell by cell (GB/s columns).

    scripts/bench-compare.py NEW.md [NEW2.md ...] --base BASE.md [BASE2.md ...]

Rows are matched by section heading and the row's first two cells; only
columns whose header says GB/s are compared. With two or more runs of a
side, a cell's value is the median of its runs and the run-to-run spread
is the largest relative difference between runs of one side. Prints, per
section, the cells compared and the new/base ratios (min, median, max),
then every cell below 0.97 with its spread, and a last line with the worst
cell.
"""
import re
import statistics
import sys


def tables(path):
    """{(section, row key, column): value}"""
    out = {}
    section = ""
    header = None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("#"):
            section = line.lstrip("# ").strip()
            header = None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        key = " / ".join(cells[:2])
        for h, c in zip(header, cells):
            if "GB/s" not in h:
                continue
            m = re.match(r"^([0-9]+(?:\.[0-9]+)?)", c)
            if m:
                out[(section, key, h)] = float(m.group(1))
    return out


def main():
    args = sys.argv[1:]
    if "--base" not in args:
        sys.exit(__doc__)
    i = args.index("--base")
    new = [tables(p) for p in args[:i]]
    base = [tables(p) for p in args[i + 1:]]
    keys = set(new[0]) & set(base[0])
    for t in new[1:] + base[1:]:
        keys &= set(t)
    by_section = {}
    low = []

    def spread(runs, k):
        v = [r[k] for r in runs]
        return (max(v) - min(v)) / max(min(v), 1e-9) if len(v) > 1 else float("nan")

    for k in sorted(keys):
        n = statistics.median(r[k] for r in new)
        b = statistics.median(r[k] for r in base)
        if b <= 0:
            continue
        ratio = n / b
        by_section.setdefault(k[0], []).append(ratio)
        if ratio < 0.97:
            low.append((ratio, k, n, b, spread(new, k), spread(base, k)))
    for s, rs in by_section.items():
        print(f"{s[:60]:60} {len(rs):4} cells  new/base min {min(rs):.3f}  median {statistics.median(rs):.3f}  max {max(rs):.3f}")
    for ratio, k, n, b, sn, sb in sorted(low):
        print(f"  below 0.97: {ratio:.3f}  {k[1]} | {k[2]}  new {n:g} base {b:g}  spread new {sn:.1%} base {sb:.1%}")
    allr = [r for rs in by_section.values() for r in rs]
    if allr:
        print(f"all: {len(allr)} cells, new/base median {statistics.median(allr):.3f}, worst {min(allr):.3f}, {len(low)} below 0.97")


if __name__ == "__main__":
    main()
