#!/usr/bin/env bash
# On the GPU machine (issue 33): the lane decoder (`ibp_decode_lanes`, a
# lane a tensor) against the batch decoder (a warp a tensor) in one binary,
# `--lanes on` / `--lanes off`, and the default rule (`auto`).
# Usage: bash .device/device-lanes.sh [tests|sweep|tables|all]
#   tests   tests/gpu_decode.rs with IBP_REQUIRE_GPU=1
#   sweep   the row-length sweep (64 MiB cells; SWEEP_ARGS adds flags) on/off
#   tables  the device section's real and synthetic tables, on/off/auto,
#           twice each, interleaved
# Builds nothing; prints a short table last.
set -u
source .device/device-unpack.sh
export IBP_DATA_DIR=$PWD/.device/data IBP_REQUIRE_GPU=1
out=${OUT:-/tmp/ibp-out}
mkdir -p "$out"
what=${1:-all}
bin=.device/bin/ibp.bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "commit $(cat .device/commit 2>/dev/null)"
summary=()
if [ "$what" = tests ] || [ "$what" = all ]; then
  timeout 300 .device/bin/gpu_decode.test --test-threads=1 >"$out/test-gpu_decode.log" 2>&1
  summary+=("gpu_decode: rc=$? $(grep -E '^test result' "$out/test-gpu_decode.log" | tail -1)")
  grep -E 'panicked' -A4 "$out/test-gpu_decode.log" | head -20
fi
if [ "$what" = sweep ] || [ "$what" = all ]; then
  for side in on off; do
    timeout 200 $bin bench --section device --sweep-only --sweep-mib "${SWEEP_MIB:-64}" ${SWEEP_ARGS:-} --lanes $side --out "$out/sweep-$side.md" >"$out/sweep-$side.log" 2>&1
    summary+=("sweep lanes $side rc=$?")
  done
fi
if [ "$what" = tables ] || [ "$what" = all ]; then
  for round in 1 2; do
    for side in on off auto; do
      flag="--lanes $side"
      [ $side = auto ] && flag=
      timeout 120 $bin bench --rows "${BENCH_ROWS:-100000}" --section device --no-sweep $flag --out "$out/dev-$side$round.md" >"$out/dev-$side$round.log" 2>&1
      summary+=("tables lanes $side round $round rc=$?")
    done
  done
fi
printf '%s\n' "${summary[@]}"
if [ -f "$out/sweep-on.md" ] && [ -f "$out/sweep-off.md" ]; then
  echo "== sweep: cell, savings, GB/s lanes on, GB/s off, on/off, moved/copy on, moved/copy off"
  python3 .device/sweep-compare.py "$out/sweep-on.md" "$out/sweep-off.md"
fi
if [ -f "$out/dev-on1.md" ] && [ -f "$out/dev-off1.md" ]; then
  echo "== device tables: lanes on / off"
  python3 .device/bench-compare.py "$out/dev-on1.md" "$out/dev-on2.md" --base "$out/dev-off1.md" "$out/dev-off2.md"
  echo "== device tables: auto / off"
  python3 .device/bench-compare.py "$out/dev-auto1.md" "$out/dev-auto2.md" --base "$out/dev-off1.md" "$out/dev-off2.md"
fi
