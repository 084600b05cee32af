# Source me (after scripts/env.sh) to build the candle integration's CUDA
# path (`cargo build -p ibp-candle --features cuda`) with the tools
# scripts/setup-candle.sh installed: nvcc 13.0 on PATH, a toolkit root for
# cudarc's link step, sm_90 for candle-kernels (the H200), and the CUDA
# libraries the binaries load (a binary here starts, finds no device and
# skips its GPU tests).
_ibp_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_candle_tools=${IBP_CANDLE_TOOLS:-$_ibp_root/.tools/candle}
export PATH="$_candle_tools/py/nvidia/cu13/bin:$PATH"
export CUDA_ROOT="$_candle_tools/cuda"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export LD_LIBRARY_PATH="$_candle_tools/py/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset _ibp_root _candle_tools
