#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over what
# scripts/stage-device.sh put into .device/, staged with IBP_STAGE_NVCOMP=1
# (nvCOMP, trimmed to sm_90, as .device/libnvcomp.so.6.gz). Builds nothing. Issue 34's measurements in one call:
#   1. the float coding's GPU tests (IBP_REQUIRE_GPU=1);
#   2. Nsight Compute on one bulk float decode (MiniLM bf16): issue rate,
#      occupancy, the warps' stall reasons (IBP_FLOAT_NCU=0 skips it);
#   3. the fused API on float-coded rows, its GEMV example, and the GPU
#      encoder's bench (`ibp bench --section float`);
#   4. `ibp bench --section peers --peers nvcomp`: the float code's row beside
#      IBP's and nvCOMP's on every real table and MiniLM's FP8 casts.
# Logs and results go to $OUT; a short table is printed last. Arguments go to
# `ibp bench` (e.g. --real-bytes 268435456).
# Usage: bash .device/device-float.sh [IBP BENCH OPTIONS]
set -uo pipefail
out=${OUT:-/tmp/ibp-out}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/ibp-float.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source .device/device-unpack.sh
gzip -dc .device/libnvcomp.so.6.gz >"$tmp/libnvcomp.so.6" || { echo "no .device/libnvcomp.so.6.gz: stage with IBP_STAGE_NVCOMP=1"; exit 1; }
export IBP_NVCOMP="$tmp/libnvcomp.so.6" IBP_DATA_DIR="$PWD/.device/data" IBP_REQUIRE_GPU=1 IBP_REQUIRE_NVCOMP=1
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
for t in .device/bin/gpu_float_*.test; do
  [ -x "$t" ] || continue
  n=$(basename "$t" .test)
  if timeout 120 "$t" --test-threads=1 >"$out/test-$n.log" 2>&1; then r=PASS; else r=FAIL; fi
  summary+=("test  $n: $r ($(grep -E '^test result' "$out/test-$n.log" | tail -1))")
  grep -E 'panicked' -A3 "$out/test-$n.log" | head -8
  grep -E '^timing' "$out/test-$n.log" | cut -c1-220
done
if [ "${IBP_FLOAT_NCU:-1}" = 1 ] && [ -x .device/bin/gpu_float_decode.test ]; then
  timeout 150 ncu --clock-control none --kernel-name regex:'^ibp_float_decode' --launch-skip 0 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
    --section LaunchStats --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    --csv .device/bin/gpu_float_decode.test minilm_rows_decode_like_the_cpu --test-threads=1 \
    >"$out/ncu-float.csv" 2>"$out/ncu-float.err"
  summary+=("ncu ibp_float_decode: rc=$?")
  python3 - "$out/ncu-float.csv" <<'EOF' || true
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = next((i for i, r in enumerate(rows) if "Metric Name" in r), None)
if head is None:
    sys.exit("no ncu table")
h = rows[head]
name, val, unit = h.index("Metric Name"), h.index("Metric Value"), h.index("Metric Unit")
keep = ("Duration", "Registers Per Thread", "Achieved Occupancy", "Issued Warp Per Scheduler",
        "No Eligible", "Active Warps Per Scheduler", "Eligible Warps Per Scheduler",
        "Memory Throughput", "DRAM Throughput", "L1/TEX Cache Throughput", "Compute (SM) Throughput",
        "Warp Cycles Per Issued Instruction", "Avg. Active Threads Per Warp",
        "Avg. Not Predicated Off Threads Per Warp")
stalls = []
for r in rows[head + 1:]:
    if len(r) > val and r[name] in keep:
        print(f"ncu: {r[name]}: {r[val]} {r[unit]}")
    elif len(r) > val and "issue_stalled" in r[name]:
        try:
            stalls.append((float(r[val].replace(",", "")), r[name]))
        except ValueError:
            pass
for v, n in sorted(stalls, reverse=True)[:8]:
    print(f"ncu stall: {n.replace('smsp__average_warps_issue_stalled_', '').replace('_per_issue_active.ratio', '')}: {v:.2f} cycles an issue")
EOF
fi
# The fused API on float-coded rows (tests/gpu_device_api.rs) and its bf16
# GEMV example (examples/float_gemv.rs, S = 32; EXAMPLE_ARGS_FLOAT_GEMV adds
# flags); the GPU encoder's bench (fit + compress, MiniLM to 1 GiB).
if [ -x .device/bin/gpu_device_api.test ]; then
  if timeout 120 .device/bin/gpu_device_api.test fused_float --test-threads=1 >"$out/test-device-api-float.log" 2>&1; then r=PASS; else r=FAIL; fi
  summary+=("test  gpu_device_api fused_float: $r ($(grep -E '^test result' "$out/test-device-api-float.log" | tail -1))")
  grep -E 'panicked' -A3 "$out/test-device-api-float.log" | head -8
fi
if [ -x .device/bin/float_gemv.example ]; then
  # shellcheck disable=SC2086
  timeout 150 .device/bin/float_gemv.example ${EXAMPLE_ARGS_FLOAT_GEMV:-} >"$out/example-float_gemv.log" 2>&1
  summary+=("example float_gemv: rc=$?")
  grep -vE '^\|-' "$out/example-float_gemv.log" | grep -v '^$' | tail -30
fi
# The encoder's table and the decode's row-length sweep (IBP_FLOAT_ENCODE_BENCH=0:
# the sweep alone); with a baseline binary (stage-device.sh's IBP_BASELINE), its
# sweep too, in the same call.
float_args=()
[ "${IBP_FLOAT_ENCODE_BENCH:-1}" = 1 ] || float_args=(--sweep-only)
timeout 200 .device/bin/ibp.bin bench --section float "${float_args[@]}" --out "$out/float.md" >"$out/ibp-bench-float.log" 2>&1
summary+=("ibp bench --section float: rc=$?")
grep -E '^(\||- )' "$out/float.md" 2>/dev/null | grep -vE '^\| ---' | tail -30
if [ -x .device/bin/ibp-baseline.bin ]; then
  timeout 200 .device/bin/ibp-baseline.bin bench --section float --sweep-only --out "$out/float-baseline.md" >"$out/ibp-bench-float-baseline.log" 2>&1
  summary+=("baseline ($(cat .device/baseline-commit)) ibp bench --section float --sweep-only: rc=$?")
  echo "== baseline $(cat .device/baseline-commit)"
  grep -E '^\|' "$out/float-baseline.md" 2>/dev/null | grep -vE '^\| ---' | tail -20
fi
timeout 420 .device/bin/ibp.bin bench --section peers --peers nvcomp --out "$out/peers.md" "$@" >"$out/ibp-bench-peers.log" 2>&1
summary+=("ibp bench --section peers --peers nvcomp: rc=$?")
grep -E 'failed|^ibp:' "$out/ibp-bench-peers.log" | head -20
if [ -s "$out/peers.md" ]; then
  echo "== $out/peers.md"; grep -E '^(#|\||- )' "$out/peers.md" | grep -vE '^\| ---'
else # cut short: the tables measured so far, from the log
  echo "== (no results file) tables from $out/ibp-bench-peers.log"; grep -E '^\|' "$out/ibp-bench-peers.log" | grep -vE '^\| ---'
fi
printf '%s\n' "${summary[@]}"
