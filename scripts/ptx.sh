#!/usr/bin/env bash
# The shipped PTX: gpu-kernels/ptx/ibp_kernels_sm_80.ptx (the library's
# kernels, with the register caps of build.rs) and
# examples/fused-kernels/ptx/fused_kernels.ptx (the fused examples' kernels),
# built from source by build.rs with IBP_BUILD_KERNELS=1 on the pinned
# nightly (rust-toolchain.toml), the way `cargo build --features cuda` built
# them before the PTX was shipped.
#
#   scripts/ptx.sh           regenerate the shipped files (after editing
#                            gpu-kernels/ or examples/fused-kernels/)
#   scripts/ptx.sh --check   build, and fail unless the shipped files are
#                            byte for byte what the sources build (CI)
#
# Needs scripts/env.sh sourced (cust's build script wants CUDA_LIBRARY_PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: scripts/ptx.sh [--check]" >&2; exit 2 ;;
esac
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
# Q: why `cargo check`? A: only the build script's work is wanted; checking
# the host crates skips their code generation.
IBP_BUILD_KERNELS=1 cargo check --quiet --lib --features cuda
status=0
for pair in "ibp_kernels_sm_80.ptx gpu-kernels/ptx" "fused_kernels.ptx examples/fused-kernels/ptx"; do
  read -r name dir <<<"$pair"
  built="$target/ibp-ptx/$name"
  [ -s "$built" ] || { echo "ptx: the build left no $built" >&2; exit 1; }
  if [ "$check" = 1 ]; then
    if cmp -s "$built" "$dir/$name"; then
      echo "ptx: $dir/$name is what the sources build ($(wc -c <"$built") bytes)"
    else
      echo "ptx: FAIL: $dir/$name is not what the sources build; regenerate it with: bash scripts/ptx.sh" >&2
      status=1
    fi
  else
    mkdir -p "$dir"
    cp "$built" "$dir/$name"
    echo "ptx: wrote $dir/$name ($(wc -c <"$built") bytes)"
  fi
done
exit "$status"
