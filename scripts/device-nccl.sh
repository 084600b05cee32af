#!/usr/bin/env bash
# Sourced by the device scripts on the GPU machine: makes NCCL loadable for
# ibp's collectives (feature `nccl`, tests/gpu_collective.rs, `ibp bench
# --section collective`). The image's PyPI wheel (nvidia-nccl-cu*) holds
# libnccl.so.2; cudarc loads libnccl.so, so a temporary directory with that
# link goes first on LD_LIBRARY_PATH. NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0) always: the shared machines forbid it.
export NCCL_NVLS_ENABLE=0
if [ -z "${IBP_NCCL_LINK:-}" ]; then
  _nccl_dir=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
  if [ ! -e "$_nccl_dir/libnccl.so.2" ]; then
    _nccl_dir=$(dirname "$(timeout 60 find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -n 1)" 2>/dev/null || true)
  fi
  if [ -e "$_nccl_dir/libnccl.so.2" ]; then
    IBP_NCCL_LINK=$(mktemp -d)
    ln -s "$_nccl_dir/libnccl.so.2" "$IBP_NCCL_LINK/libnccl.so"
    export IBP_NCCL_LINK LD_LIBRARY_PATH="$IBP_NCCL_LINK${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "NCCL: $_nccl_dir/libnccl.so.2 (as $IBP_NCCL_LINK/libnccl.so)"
  else
    echo "NCCL: no libnccl.so.2 found (pip show nvidia-nccl-cu12 or -cu13); the collectives' tests fail under IBP_REQUIRE_GPU=1"
  fi
  unset _nccl_dir
fi
