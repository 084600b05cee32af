# Source me: variables for building and running ibp with the tools that
# scripts/setup.sh installed into .tools.
_ibp_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -e "$_ibp_root/.tools/cuda/lib64/libcuda.so" ]; then
  export CUDA_LIBRARY_PATH="$_ibp_root/.tools/cuda"
  export LD_LIBRARY_PATH="$_ibp_root/.tools/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export IBP_PTXAS="$_ibp_root/.tools/py/nvidia/cuda_nvcc/bin/ptxas"
IBP_NVDISASM=$(ls "$_ibp_root"/.tools/nvd/nvidia/*/bin/nvdisasm 2>/dev/null | head -n 1 || true)
export IBP_NVDISASM="${IBP_NVDISASM:-nvdisasm}"
export IBP_DATA_DIR="${IBP_DATA_DIR:-$_ibp_root/.tools/data}"
unset _ibp_root
