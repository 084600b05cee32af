#!/usr/bin/env bash
# On the GPU machine (issue 33): the batch decoder two tensors a warp
# (`--pairs on`, the default) against one (`--pairs off`) in one binary,
# and against IBP_BASELINE's binary, interleaved in one call; then the
# row-length sweep both ways. Compared cell by cell by bench-compare.py.
# Usage: bash .device/device-decoder.sh [bench|sweep|all]
set -u
source .device/device-unpack.sh
export IBP_DATA_DIR=$PWD/.device/data IBP_REQUIRE_GPU=1
out=${OUT:-/tmp/ibp-out}
mkdir -p "$out"
what=${1:-all}
bin=.device/bin/ibp.bin
base=.device/bin/ibp-baseline.bin
rows=${BENCH_ROWS:-100000}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "new=$(cat .device/commit 2>/dev/null) base=$(cat .device/baseline-commit)"
if [ "$what" = bench ] || [ "$what" = all ]; then
  for round in 1 2; do
    for side in on off base; do
      if [ $side = base ]; then
        timeout 150 $base bench --rows "$rows" --section device --out "$out/dev-base$round.md" >"$out/dev-base$round.log" 2>&1
      else
        timeout 150 $bin bench --rows "$rows" --section device --no-sweep --pairs $side --out "$out/dev-$side$round.md" >"$out/dev-$side$round.log" 2>&1
      fi
      echo "device $side$round rc=$?"
    done
  done
fi
if [ "$what" = sweep ] || [ "$what" = all ]; then
  for side in on off; do
    flag="--pairs $side"
    [ $side = on ] && [ "${SWEEP_ON:-on}" = auto ] && flag=
    timeout 200 $bin bench --section device --sweep-only --sweep-mib "${SWEEP_MIB:-64}" ${SWEEP_ARGS:-} $flag --out "$out/sweep-$side.md" >"$out/sweep-$side.log" 2>&1
    echo "sweep $side rc=$?"
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  echo "== device section: pairs on / off"
  python3 .device/bench-compare.py "$out/dev-on1.md" "$out/dev-on2.md" --base "$out/dev-off1.md" "$out/dev-off2.md"
  echo "== device section: pairs on / $(cat .device/baseline-commit)"
  python3 .device/bench-compare.py "$out/dev-on1.md" "$out/dev-on2.md" --base "$out/dev-base1.md" "$out/dev-base2.md"
fi
if [ "$what" = sweep ] || [ "$what" = all ]; then
  echo "== sweep: pairs ${SWEEP_ON:-on} / off, per cell (row, savings, GB/s ${SWEEP_ON:-on}, GB/s off, ratio, moved/copy ${SWEEP_ON:-on})"
  python3 .device/sweep-compare.py "$out/sweep-on.md" "$out/sweep-off.md"
fi
