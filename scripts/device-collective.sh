#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over binaries staged by
# scripts/stage-device.sh (issue 39: compressed collectives through NCCL).
# Builds nothing. Logs and results go to $OUT; a short table is printed last.
#
# Usage: bash .device/device-collective.sh [all|tests|bench|cache|targets]
#   tests  tests/gpu_collective.rs with IBP_REQUIRE_GPU=1 and
#          IBP_REQUIRE_GPUS=<GPUs present> (a skip is a failure)
#   bench  `ibp bench --section collective` three ways: NCCL's default
#          transports (NVLink/P2P), NCCL_P2P_DISABLE=1 (through shared host
#          memory), and NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 with sockets
#          over loopback (the emulated slow inter-host link); a failed way
#          is reported and the next one runs
#   cache  `ibp bench --section cache --gpus <GPUs present>` (the feature
#          cache over every GPU; minutes at full scale: IBP_CACHE_ARGS adds
#          flags, e.g. "--vertices 600000 --edges 15000000")
#   all    tests, then bench (the default; cache is a run of its own)
#   targets  issue 39's two open targets in one call of under 8 minutes:
#          gpu_collective and gpu_cache with IBP_REQUIRE_GPU=1, the
#          collective bench over nvlink and sockets, then the cache bench on
#          Cora only at 1% and 5% with the default mini-batches (each split
#          over every GPU)
#
# NCCL: .device/device-nccl.sh links the image's PyPI libnccl.so.2 as
# libnccl.so (what cudarc loads) and keeps NVLink multicast off.
set -uo pipefail
source .device/device-unpack.sh
what=${1:-all}
out=${OUT:-/tmp/ibp-out}
mkdir -p "$out"
export IBP_REQUIRE_GPU=1 IBP_DATA_DIR="$PWD/.device/data"
gpus=$(nvidia-smi -L | wc -l)
export IBP_REQUIRE_GPUS=$gpus
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
nvidia-smi topo -m >"$out/topo.txt" 2>&1 && cat "$out/topo.txt"

source .device/device-nccl.sh

summary=("GPUs: $gpus")
if [ "$what" = targets ]; then
  export IBP_COLLECTIVE_WAYS=${IBP_COLLECTIVE_WAYS:-nvlink sockets}
  if timeout 120 .device/bin/gpu_cache.test --test-threads=1 >"$out/test-gpu_cache.log" 2>&1; then r=PASS; else r=FAIL; fi
  summary+=("test gpu_cache: $r ($(grep -E '^test result' "$out/test-gpu_cache.log" | tail -1))")
  grep -E 'panicked|skipped' -A3 "$out/test-gpu_cache.log" | head -20
fi
if [ "$what" = tests ] || [ "$what" = all ] || [ "$what" = targets ]; then
  if timeout 300 .device/bin/gpu_collective.test --test-threads=1 >"$out/test-gpu_collective.log" 2>&1; then r=PASS; else r=FAIL; fi
  summary+=("test gpu_collective: $r ($(grep -E '^test result' "$out/test-gpu_collective.log" | tail -1))")
  grep -E 'panicked|skipped' -A3 "$out/test-gpu_collective.log" | head -20
fi
if [ "$what" = bench ] || [ "$what" = all ] || [ "$what" = targets ]; then
  # IBP_COLLECTIVE_WAYS: which of the three (default all), e.g. "nvlink sockets".
  for way in ${IBP_COLLECTIVE_WAYS:-nvlink shm sockets}; do
    case $way in
      nvlink) env=() ;;
      shm) env=(NCCL_P2P_DISABLE=1) ;;
      sockets) env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo) ;;
    esac
    log=$out/collective-$way.log
    # NCCL_DEBUG=INFO: the log names the transport each channel took.
    env "${env[@]}" NCCL_DEBUG=INFO timeout "${IBP_COLLECTIVE_TIMEOUT:-200}" .device/bin/ibp.bin bench --section collective \
      --gpus "$gpus" ${IBP_COLLECTIVE_ARGS:-} --out "$out/collective-$way.md" >"$log" 2>&1
    rc=$?
    via=$(grep -oE 'via (P2P|SHM|NET)[^ ]*' "$log" | sort | uniq -c | tr '\n' ' ')
    summary+=("bench collective $way (${env[*]:-defaults}): rc=$rc; transports: ${via:-none logged}")
    [ $rc = 0 ] || { echo "bench $way failed (rc=$rc):"; grep -vE '^\S+:[0-9]+:[0-9]+ \[' "$log" | tail -5; }
  done
fi
if [ "$what" = targets ]; then
  timeout 300 .device/bin/ibp.bin bench --section cache --gpus "$gpus" --only Cora --budgets 1,5 \
    --out "$out/cache.md" >"$out/ibp-bench-cache.log" 2>&1
  summary+=("ibp bench --section cache --gpus $gpus (Cora, 1% and 5%): rc=$?")
  [ -s "$out/cache.md" ] && grep -E '^(\||- )' "$out/cache.md" | grep -E 'GPUs ≥|IBP\(C/M\), packed' | head -40
fi
if [ "$what" = cache ]; then
  # shellcheck disable=SC2086
  timeout 590 .device/bin/ibp.bin bench --section cache --gpus "$gpus" ${IBP_CACHE_ARGS:-} --out "$out/cache.md" >"$out/ibp-bench-cache.log" 2>&1
  summary+=("ibp bench --section cache --gpus $gpus: rc=$?")
  [ -s "$out/cache.md" ] && grep -E '^(#|\||- )' "$out/cache.md" | grep -vE '^\| ---' | head -80
fi
echo
for way in nvlink shm sockets; do
  f=$out/collective-$way.md
  [ -s "$f" ] || continue
  echo "== $way"
  grep -E '^(- NCCL|\| )' "$f" | grep -vE '^\|---'
done
echo
printf '%s\n' "${summary[@]}"
