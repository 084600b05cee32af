#!/usr/bin/env bash
# The row-length sweep's 4-byte-chunk cells measured one process each, by
# `ibp bench --point SIZE,SAVINGS,device`, on any ibp binary: `--point`
# decodes the figure-7 dataset (4-byte chunks, seed 11), the same bytes and
# the same measurement (median of 9 after 2 warm-ups, checked first) at
# every commit since before b8cf772, so a baseline binary without the sweep
# (`--section device --sweep-only`) measures the same cells as this one.
# Writes a Markdown table that scripts/bench-compare.py compares cell by
# cell (run it for both binaries, compare the two files).
#
# Usage: scripts/sweep-points.sh BIN OUT.md
#   SWEEP_ROWS="64 256 1024 4096 16384"  row lengths in bytes (multiples of 4)
#   SWEEP_SAVINGS="0.125 0.5 0.9"        target savings, fractions
#   SWEEP_MIB=128                        MiB decoded per cell
# Chunks other than 4 bytes: old binaries cannot make them (their --point
# takes no chunk size); compare those with `--sweep-only` of two binaries
# that both have the sweep.
set -u
bin=$1
out=$2
rows=${SWEEP_ROWS:-64 256 1024 4096 16384}
savings=${SWEEP_SAVINGS:-0.125 0.5 0.9}
mib=${SWEEP_MIB:-128}
{
  echo "# ibp --point sweep: $bin"
  echo
  echo "## Row-length sweep, one process per cell (--point, 4-byte chunks)"
  echo
  echo "| cell | target savings | range GB/s | moved GB/s |"
  echo "| --- | --- | --- | --- |"
} >"$out"
for r in $rows; do
  for s in $savings; do
    n=$(( (mib << 20) / r ))
    line=$("$bin" bench --rows "$n" --point "$r,$s,device" 2>/dev/null)
    rc=$?
    pct=$(python3 -c "print(f'{100*$s:g}%')")
    # "SIZE B at S: X GB/s decoded, Y GB/s moved"
    re='([0-9.]+) GB/s decoded, ([0-9.]+) GB/s moved'
    if [ $rc -ne 0 ] || ! [[ $line =~ $re ]]; then
      echo "sweep-points: $r B at $s failed (rc $rc)" >&2
      continue
    fi
    dec=${BASH_REMATCH[1]}
    mov=${BASH_REMATCH[2]}
    echo "| $r B, 4 B chunks | $pct | $dec | $mov |" >>"$out"
    echo "  $r B at $pct: $dec GB/s decoded, $mov GB/s moved" >&2
  done
done
