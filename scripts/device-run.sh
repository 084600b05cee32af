#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over binaries staged by
# scripts/stage-device.sh. Builds nothing. Every test runs with
# IBP_REQUIRE_GPU=1 (a missing GPU fails). Logs go to $OUT; a table is last.
# Usage: bash .device/device-run.sh [tests|benches|all] [bench-filter]
set -uo pipefail
what=${1:-all}
filter=${2:-}
out=${OUT:-/tmp/ibp-out}
mkdir -p "$out"
export IBP_REQUIRE_GPU=1 IBP_DATA_DIR="$PWD/.device/data" CRITERION_HOME="$out/criterion"
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
if [ "$what" = tests ] || [ "$what" = all ]; then
  for t in .device/bin/*.test; do
    n=$(basename "$t" .test)
    if "$t" --test-threads=1 >"$out/test-$n.log" 2>&1; then r=PASS; else r=FAIL; fi
    summary+=("test  $n: $r ($(grep -E '^test result' "$out/test-$n.log" | tail -1))")
  done
fi
if [ "$what" = benches ] || [ "$what" = all ]; then
  for b in .device/bin/*.bench; do
    n=$(basename "$b" .bench)
    "$b" --bench $filter >"$out/bench-$n.log" 2>&1
    summary+=("bench $n: rc=$?")
    grep -E '^[a-z_/=0-9A-Z. -]+$|time:|thrpt:' "$out/bench-$n.log" | grep -B1 -A1 thrpt | grep -v '^--' | tail -40
  done
fi
for f in "$out"/test-*.log; do grep -E 'FAILED|panicked' "$f" | head -5; done 2>/dev/null
printf '%s\n' "${summary[@]}"
