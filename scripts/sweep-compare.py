#!/usr/bin/env python3
"""Cell-by-cell comparison of two `ibp bench --section device` sweep files.

Usage: sweep-compare.py A.md B.md
Prints, for each cell of A that B also has: row and chunk size, savings,
decoded GB/s of A and of B, A / B, and each side's moved / copy. Used by
the device scripts (device-decoder.sh, device-lanes.sh) on the GPU machine.
"""
import sys


def cells(path):
    d = {}
    for line in open(path):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) >= 8 and c[0].endswith("chunks") and c[0][0].isdigit():
            d[(c[0], c[1])] = (float(c[4]), c[6])
    return d


a, b = cells(sys.argv[1]), cells(sys.argv[2])
for k in a:
    if k in b:
        print(f"{k[0]:>18} {k[1]:>6} {a[k][0]:7.0f} {b[k][0]:7.0f} {a[k][0] / b[k][0]:5.2f} {a[k][1]:>5} {b[k][1]:>5}")
