#!/usr/bin/env bash
# Run on the GPU machine, from the repository root, what
# scripts/stage-candle.sh staged: the candle integration's GPU tests (with
# IBP_REQUIRE_GPU=1: a missing device fails) and its embedding benchmark.
# `bash .device-candle/run.sh [tests|bench|offload]` (default: all three).
# The offload bench pins ~20 GiB of host memory (raw, IBP and float-coded
# copies of the stack) and holds ~10 GiB on the GPU (IBP_OFFLOAD_GIB=8); it
# prints its table in a few minutes (IBP_OFFLOAD_FLOAT=0 leaves the
# float-coded way out).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
for f in bin/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
chmod +x bin/*
export IBP_DATA_DIR="$here/data"
export IBP_REQUIRE_GPU=1
# The CUDA libraries candle links (cuBLAS, cuBLASLt, cuRAND, NVRTC, the
# runtime), from the machine's toolkit or its Python CUDA wheels.
extra=
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  $(python3 -c 'import nvidia, os; [print(os.path.join(p, "cu13", "lib")) for p in nvidia.__path__]' 2>/dev/null || true) \
  $(python3 -c 'import nvidia, os, glob; [print(d) for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "*", "lib"))]' 2>/dev/null || true); do
  [ -d "$d" ] && extra="$extra${extra:+:}$d"
done
export LD_LIBRARY_PATH="$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ldd bin/gpu_minilm.test | grep 'not found'; then
  echo "run.sh: the libraries above are missing (searched: $extra)" >&2
  exit 1
fi
echo "commit $(cat commit 2>/dev/null), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
what=${1:-all}
if [ "$what" = all ] || [ "$what" = tests ]; then
  ./bin/gpu_minilm.test --test-threads=1 --nocapture
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  ./bin/gpu_embedding.bench --bench
fi
if [ "$what" = all ] || [ "$what" = offload ]; then
  ./bin/gpu_offload.bench --bench
fi
