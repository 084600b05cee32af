# Source me: variables for building and running ibp with the tools that
# scripts/setup.sh installed into .tools.
_ibp_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# IBP_FEATURES: the cargo features the scripts build with, `cuda` when there
# is a libcuda.so to link (scripts/setup.sh), empty otherwise (or with
# IBP_CPU_ONLY=1): the CPU path needs no CUDA. Both the library (`ibp`) and
# the command line (`ibp-cli`, cli/) name the GPU path `cuda`.
if [ "${IBP_CPU_ONLY:-0}" != 1 ] && [ -e "$_ibp_root/.tools/cuda/lib64/libcuda.so" ]; then
  export CUDA_LIBRARY_PATH="$_ibp_root/.tools/cuda"
  # With a driver the folder holds only a libcuda.so link (for the linker);
  # without one, Debian's libcuda.so.1 that the binaries load.
  export LD_LIBRARY_PATH="$_ibp_root/.tools/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export IBP_FEATURES=cuda
else
  export IBP_FEATURES=
fi
export IBP_PTXAS="$_ibp_root/.tools/py/nvidia/cuda_nvcc/bin/ptxas"
IBP_NVDISASM=$(ls "$_ibp_root"/.tools/nvd/nvidia/*/bin/nvdisasm 2>/dev/null | head -n 1 || true)
export IBP_NVDISASM="${IBP_NVDISASM:-nvdisasm}"
export IBP_DATA_DIR="${IBP_DATA_DIR:-$_ibp_root/.tools/data}"
unset _ibp_root
