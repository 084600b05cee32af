#!/usr/bin/env bash
# The CUDA build of the candle integration (candle/, package ibp-candle,
# feature `cuda`): what candle's CUDA backend needs at build time, from PyPI,
# on a machine with no CUDA toolkit and no driver.
#
# - candle-kernels compiles CUDA C++ to PTX with nvcc: the CUDA 13.0 wheels
#   of nvcc, its front end (crt), NVVM (cicc), the runtime headers and CCCL.
#   Q: why 13.0 and not the newest 13.x? A: the PTX that nvcc writes
#   carries its ISA version, and a driver loads only the versions it knows:
#   the H200s run driver 580 (CUDA 13.0).
# - cudarc links cuBLAS, cuBLASLt, cuRAND and NVRTC (candle turns on its
#   `dynamic-linking`): their 13.0 wheels, with the unversioned names the
#   linker wants; the CUDA runtime (candle-kernels links libcudart for its
#   statically built MoE kernels); and libcuda.so, scripts/setup.sh's (a stub where there is
#   no driver). At run time the GPU machine's own toolkit provides them.
#
# It writes $IBP_CANDLE_TOOLS (default .tools/candle) and prints the
# variables to export (scripts/candle-env.sh sets them). Re-running is
# cheap: pip skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${IBP_CANDLE_TOOLS:-.tools/candle}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
pip=(python3 -m pip install -q --disable-pip-version-check --no-deps --upgrade-strategy only-if-needed)

if [ ! -x "$dest/py/nvidia/cu13/bin/nvcc" ] || [ ! -e "$dest/py/nvidia/cu13/lib/libcublasLt.so.13" ]; then
  "${pip[@]}" --target "$dest/py" \
    'nvidia-cuda-nvcc==13.0.88' 'nvidia-cuda-crt==13.0.88' 'nvidia-nvvm==13.0.88' \
    'nvidia-cuda-runtime==13.0.96' 'nvidia-cuda-cccl==13.0.85' \
    'nvidia-cuda-nvrtc==13.0.88' 'nvidia-curand==10.4.0.35' 'nvidia-cublas==13.0.2.14'
fi
cu=$dest/py/nvidia/cu13

# A toolkit root for cudarc's build script (CUDA_ROOT): lib64 with the
# unversioned names `-lcublas` and friends resolve to.
lib=$dest/cuda/lib64
mkdir -p "$lib"
for l in cublas:13 cublasLt:13 curand:10 nvrtc:13 cudart:13; do
  name=${l%%:*} so=${l##*:}
  ln -sfn "$cu/lib/lib$name.so.$so" "$lib/lib$name.so"
done
libcuda=.tools/cuda/lib64/libcuda.so
if [ ! -e "$libcuda" ]; then
  echo "no $libcuda: run scripts/setup.sh first (it provides libcuda.so, a stub where there is no driver)" >&2
  exit 1
fi
ln -sfn "$(readlink -f "$libcuda")" "$lib/libcuda.so"
"$cu/bin/nvcc" --version | tail -n 2
echo "candle's CUDA build tools are in $dest; source scripts/candle-env.sh to use them"
