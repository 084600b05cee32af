#!/usr/bin/env bash
# On the GPU machine (issue 38): the GPU decoders' fuzzer under
# `compute-sanitizer --tool memcheck`, the fuzzer again without the
# sanitizer and with more cases, then the concurrency stress test, all with
# IBP_REQUIRE_GPU=1 (a missing GPU fails). Runs from the repository root
# over the binaries scripts/stage-device.sh staged in .device/; full logs go
# to $OUT, a short table is printed last.
#
# Usage: bash .device/device-reliability.sh [all|fuzz|stress]
#   all (default): the three steps; fuzz: the two fuzz steps; stress: the
#   stress test alone (e.g. on the 2-GPU machine).
# Sizes (environment), chosen so that `all` fits one 10-minute command
# (at most 220 + 170 + 120 s, by the timeouts; about 5 minutes as a rule):
#   FUZZ_SAN_CASES (600) and FUZZ_SAN_SECS (140): the sanitized run stops
#     starting cases after FUZZ_SAN_SECS; the table shows how many ran;
#   FUZZ_CASES (20000) and FUZZ_SECS (110): the plain run, another seed;
#   STRESS_ROUNDS (25), STRESS_THREADS (4): per GPU, every GPU present.
set -uo pipefail
source .device/device-unpack.sh
what=${1:-all}
case $what in all|fuzz|stress) ;; *) echo "usage: $0 [all|fuzz|stress]"; exit 2 ;; esac
out=${OUT:-/tmp/ibp-out}
mkdir -p "$out"
export IBP_REQUIRE_GPU=1 IBP_DATA_DIR="$PWD/.device/data"
bin=.device/bin
rows=()
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/reliability-gpu.txt"

# The fuzzer's summary line in a log: "<cases> cases" and its failures.
fuzz_cases() { sed -n 's/.*gpu_fuzz summary: seed [^,]*, \([0-9]*\) cases.*/\1/p' "$1" | tail -1; }
# compute-sanitizer's own count ("ERROR SUMMARY: N errors").
san_errors() { sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$1" | tail -1; }
fail=0
verdict() { if [ "$1" = 0 ]; then echo PASS; else fail=1; echo "FAIL (rc=$1)"; fi; }

if [ "$what" = all ] || [ "$what" = fuzz ]; then
  [ -x "$bin/gpu_fuzz.test" ] || { echo "no $bin/gpu_fuzz.test: stage with scripts/stage-device.sh"; exit 1; }
  # 1. Under memcheck: every device access checked; the cases' outputs are
  # sized exactly on odd cases, so a write past a row is an error here.
  log=$out/fuzz-memcheck.log
  IBP_FUZZ_CASES=${FUZZ_SAN_CASES:-600} IBP_FUZZ_MAX_SECONDS=${FUZZ_SAN_SECS:-140} \
    timeout 220 compute-sanitizer --tool memcheck --print-limit 50 --error-exitcode 86 \
    "$bin/gpu_fuzz.test" --test-threads=1 gpu_decoders_match >"$log" 2>&1
  rc=$?
  errs=$(san_errors "$log")
  r=$(verdict $rc)
  [ "$rc" = 0 ] || fail=1
  [ "${errs:-x}" = 0 ] || { r="FAIL (rc=$rc)"; fail=1; }
  rows+=("fuzz, memcheck|$(fuzz_cases "$log")|${errs:-none reported}|$r")
  grep -E "gpu_fuzz (summary|FAIL)|panicked|Invalid|ERROR SUMMARY" "$log" | head -20
  # 2. Without the sanitizer: more cases, another seed.
  log=$out/fuzz.log
  IBP_FUZZ_CASES=${FUZZ_CASES:-20000} IBP_FUZZ_MAX_SECONDS=${FUZZ_SECS:-110} IBP_FUZZ_SEED=0x5eed2 \
    timeout 170 "$bin/gpu_fuzz.test" --test-threads=1 gpu_decoders_match >"$log" 2>&1
  rc=$?
  [ "$rc" = 0 ] || fail=1
  rows+=("fuzz|$(fuzz_cases "$log")|-|$(verdict $rc)")
  grep -E "gpu_fuzz (summary|FAIL)|panicked" "$log" | head -20
fi
if [ "$what" = all ] || [ "$what" = stress ]; then
  [ -x "$bin/gpu_stress.test" ] || { echo "no $bin/gpu_stress.test: stage with scripts/stage-device.sh"; exit 1; }
  # 3. Threads and streams at once, on every GPU present; the test's own
  # watchdog ends it (exit 101) if a thread stops making progress.
  log=$out/stress.log
  IBP_STRESS_ROUNDS=${STRESS_ROUNDS:-25} IBP_STRESS_THREADS=${STRESS_THREADS:-4} IBP_STRESS_WATCHDOG_SECS=60 \
    timeout 120 "$bin/gpu_stress.test" --test-threads=1 >"$log" 2>&1
  rc=$?
  rounds=$(sed -n 's/.*gpu_stress summary: .* in [0-9.]* s: \([0-9]*\) rounds done.*/\1/p' "$log" | tail -1)
  [ "$rc" = 0 ] || fail=1
  rows+=("stress ($(nvidia-smi -L | wc -l) GPU)|${rounds:-?} rounds|-|$(verdict $rc)")
  grep -E "gpu_stress (summary|FAIL)|panicked" "$log" | head -20
fi
echo
echo "| step | cases | sanitizer errors | result |"
echo "|---|---:|---:|---|"
for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
exit $fail
