#!/usr/bin/env bash
# On the GPU machine, for a change that should not move performance (issue
# 32): every GPU suite with IBP_REQUIRE_GPU=1, then `ibp bench --section
# device` and `--section decode` of this build and of IBP_BASELINE
# (scripts/stage-device.sh), interleaved (new, base, new, base) in one call,
# compared cell by cell by scripts/bench-compare.py.
# `sweep`: the row-length sweep's 4-byte cells through `--point` on both
# binaries (scripts/sweep-points.sh: the baseline has no sweep of its own),
# new, base, new, base, compared the same way.
# Usage: bash .device/device-structural-check.sh [tests|bench|sweep|all]
set -u
source .device/device-unpack.sh
export IBP_DATA_DIR=$PWD/.device/data IBP_REQUIRE_GPU=1
out=${OUT:-/tmp/ibp-out}
mkdir -p "$out"
what=${1:-all}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "new=$(cat .device/commit 2>/dev/null) base=$(cat .device/baseline-commit)"
if [ "$what" = tests ] || [ "$what" = all ]; then
  OUT=$out/tests timeout 420 bash .device/device-run.sh tests >"$out/tests.log" 2>&1
  echo "tests rc=$?"
  grep -E "^test " "$out/tests.log" | sed 's/^test  *//'
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  rows=${BENCH_ROWS:-100000}
  for round in 1 2; do
    for side in new base; do
      bin=.device/bin/ibp.bin
      [ $side = base ] && bin=.device/bin/ibp-baseline.bin
      for sec in device decode; do
        timeout 240 $bin bench --rows "$rows" --section $sec --out "$out/$sec-$side$round.md" >"$out/$sec-$side$round.log" 2>&1
        echo "$sec $side$round rc=$?"
      done
    done
  done
  for sec in device decode; do
    echo "== --section $sec: new/base"
    python3 .device/bench-compare.py "$out/$sec-new1.md" "$out/$sec-new2.md" --base "$out/$sec-base1.md" "$out/$sec-base2.md"
  done
fi
if [ "$what" = sweep ]; then
  for round in 1 2; do
    for side in new base; do
      bin=.device/bin/ibp.bin
      [ $side = base ] && bin=.device/bin/ibp-baseline.bin
      timeout 280 bash .device/sweep-points.sh $bin "$out/sweep-$side$round.md" 2>"$out/sweep-$side$round.log"
      echo "sweep $side$round rc=$?"
    done
  done
  echo "== row-length sweep (--point, 4-byte chunks): new/base"
  python3 .device/bench-compare.py "$out/sweep-new1.md" "$out/sweep-new2.md" --base "$out/sweep-base1.md" "$out/sweep-base2.md"
fi
