#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over binaries staged by
# scripts/stage-device.sh. Builds nothing. Every test runs with
# IBP_REQUIRE_GPU=1 (a missing GPU fails). Logs and results go to $OUT; a
# short table is printed last.
# Usage: bash .device/device-run.sh [tests|benches|all|cache|examples|cli]
set -uo pipefail
source .device/device-unpack.sh
# NCCL for tests/gpu_collective.rs (and NCCL_NVLS_ENABLE=0).
source .device/device-nccl.sh
what=${1:-all}
out=${OUT:-/tmp/ibp-out}
mkdir -p "$out"
export IBP_REQUIRE_GPU=1 IBP_DATA_DIR="$PWD/.device/data" CRITERION_HOME="$out/criterion"
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
if [ "$what" = tests ] || [ "$what" = all ]; then
  for t in .device/bin/*.test; do
    n=$(basename "$t" .test)
    if timeout 300 "$t" --test-threads=1 >"$out/test-$n.log" 2>&1; then r=PASS; else r=FAIL; fi
    summary+=("test  $n: $r ($(grep -E '^test result' "$out/test-$n.log" | tail -1))")
    grep -E 'panicked' -A3 "$out/test-$n.log" | head -8
  done
fi
if [ "$what" = benches ] || [ "$what" = all ]; then
  for b in .device/bin/*.bench; do
    n=$(basename "$b" .bench)
    timeout 300 "$b" --bench >"$out/bench-$n.log" 2>&1
    summary+=("bench $n: rc=$?")
    grep -E 'thrpt:' -B2 "$out/bench-$n.log" | grep -vE '^--|time:' | paste - - | sed 's/  */ /g' > "$out/bench-$n.txt"
  done
  timeout 400 .device/bin/ibp.bin bench --rows 100000 --out "$out/results.md" >"$out/ibp-bench.log" 2>&1
  summary+=("ibp bench: rc=$?")
  if [ -x .device/bin/ibp-baseline.bin ]; then
    timeout 300 .device/bin/ibp-baseline.bin bench --section decode --rows 100000 --out "$out/baseline.md" >"$out/baseline-bench.log" 2>&1
    summary+=("baseline ($(cat .device/baseline-commit)) ibp bench: rc=$?")
  fi
fi
# `cache`: only the feature-cache benchmark (IBP(C/M)); IBP_CACHE_ARGS adds
# flags, e.g. "--vertices 200000 --edges 5000000" for a quick run.
if [ "$what" = cache ]; then
  # shellcheck disable=SC2086
  timeout 590 .device/bin/ibp.bin bench --section cache ${IBP_CACHE_ARGS:-} --out "$out/cache.md" >"$out/ibp-bench-cache.log" 2>&1
  summary+=("ibp bench --section cache: rc=$?")
  tail -5 "$out/ibp-bench-cache.log"
  [ -s "$out/cache.md" ] && grep -E '^(#|\||- )' "$out/cache.md" | grep -vE '^\| ---' | head -250
fi
# `examples`: the fused-decode examples (issue 11): their tables, checks and targets. EXAMPLE_ARGS_BAG,
# EXAMPLE_ARGS_GEMV and EXAMPLE_ARGS_FLOAT_GEMV add flags (e.g. "--bags 4096", "--gb 0.5", "--sub-streams 16").
if [ "$what" = examples ]; then
  for e in .device/bin/*.example; do
    [ -x "$e" ] || continue
    n=$(basename "$e" .example)
    case $n in
      embedding_bag) args=${EXAMPLE_ARGS_BAG:-} ;;
      gemv_stream) args=${EXAMPLE_ARGS_GEMV:-} ;;
      float_gemv) args=${EXAMPLE_ARGS_FLOAT_GEMV:-} ;;
      *) args= ;;
    esac
    # shellcheck disable=SC2086
    timeout 400 "$e" $args >"$out/example-$n.log" 2>&1
    summary+=("example $n: rc=$?")
    grep -vE '^\|-' "$out/example-$n.log" | grep -v '^$' | tail -70
  done
fi
# `cli`: the command line on the GPU (issue 13): peak memory of --device gpu
# (gpu_cli's test prints it), compression of a 4 GiB raw f32 file on the GPU
# and on the CPU (same bytes?), and `ibp bench FILE` on MiniLM's table.
if [ "$what" = cli ]; then
  .device/bin/gpu_cli.test --test-threads=1 --nocapture >"$out/cli-test.log" 2>&1
  summary+=("gpu_cli --nocapture: rc=$?")
  grep -E "RssAnon|test result" "$out/cli-test.log"
  python3 - .device/data/model.safetensors /tmp/big.f32 <<'PY'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    f.seek(8 + n)
    data = f.read()
with open(dst, "wb") as o:
    for _ in range((4 << 30) // len(data)):
        o.write(data)
PY
  rows=$(( $(stat -c %s /tmp/big.f32) / 1536 ))
  for d in gpu cpu; do
    /usr/bin/time -f "$d: max RSS %M KiB, %e s" .device/bin/ibp.bin compress /tmp/big.f32 --dtype f32 --shape "$rows,384" \
      --device $d -o /tmp/big-$d.ibp --force >"$out/cli-compress-$d.log" 2>"$out/cli-compress-$d.time" \
      || .device/bin/ibp.bin compress /tmp/big.f32 --dtype f32 --shape "$rows,384" --device $d -o /tmp/big-$d.ibp --force >"$out/cli-compress-$d.log" 2>&1
    summary+=("ibp compress --device $d (4 GiB): rc=$?")
    tail -3 "$out/cli-compress-$d.log"; cat "$out/cli-compress-$d.time" 2>/dev/null | tail -1
  done
  cmp /tmp/big-gpu.ibp /tmp/big-cpu.ibp && summary+=("--device gpu and cpu: identical files") || summary+=("--device gpu and cpu: FILES DIFFER")
  # The same without the disk: written to /dev/null (no temporary file, no
  # fsync), so the device's own speed shows.
  for d in gpu cpu; do
    .device/bin/ibp.bin compress /tmp/big.f32 --dtype f32 --shape "$rows,384" --device $d -o /dev/null \
      >"$out/cli-null-$d.log" 2>&1
    summary+=("ibp compress --device $d -o /dev/null: rc=$?")
    tail -3 "$out/cli-null-$d.log"
  done
  .device/bin/ibp.bin bench .device/data/model.safetensors >"$out/bench-file.txt" 2>"$out/bench-file.log"
  summary+=("ibp bench FILE (MiniLM): rc=$?")
  cat "$out/bench-file.txt"
fi
cat "$out"/bench-*.txt 2>/dev/null
# The decode tables of this build (and of the baseline, if staged).
for f in "$out/results.md" "$out/baseline.md"; do
  [ -s "$f" ] && { echo "== $f"; grep -E '^(#|\|)' "$f" | grep -vE '^\| ---' | head -80; }
done
printf '%s\n' "${summary[@]}"
