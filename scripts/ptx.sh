#!/usr/bin/env bash
# The shipped PTX: gpu-kernels/ptx/ibp_kernels_sm_80.ptx (the library's
# kernels, with the register caps of build.rs) and
# examples/fused-kernels/ptx/fused_kernels.ptx (the fused examples' kernels),
# built from source on the pinned nightly (rust-toolchain.toml): the
# library's by build.rs with IBP_BUILD_KERNELS=1, the way `cargo build
# --features cuda` built them before the PTX was shipped; the examples' by
# the kernel builder itself (kernel-builder/examples/build_ptx.rs), since
# the library's build.rs does not build them.
#
#   scripts/ptx.sh           regenerate the shipped files (after editing
#                            gpu-kernels/ or examples/fused-kernels/)
#   scripts/ptx.sh --check   build, and fail unless the library's shipped
#                            PTX is byte for byte what the sources build and
#                            the examples' was built from the current
#                            sources (CI; why not byte for byte: below)
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
# Q: why the target folder of the library's kernels? A: `core` (built by
# -Zbuild-std with the same flags) is reused.
cargo run --quiet --manifest-path kernel-builder/Cargo.toml --example build_ptx -- \
  examples/fused-kernels "$target/ibp-ptx/fused_kernels.ptx" --arch sm_80 --target-dir "$target/ibp-kernels-sm_80"
# The fused examples' sources (their crate, ibp-kernels, the toolchain file): one SHA-256.
fused_sources() {
  find examples/fused-kernels/src examples/fused-kernels/Cargo.toml examples/fused-kernels/Cargo.lock \
    gpu-kernels/src gpu-kernels/macros gpu-kernels/Cargo.toml rust-toolchain.toml -type f -not -path '*/target/*' \
    | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1
}
status=0
lib=gpu-kernels/ptx/ibp_kernels_sm_80.ptx
fused=examples/fused-kernels/ptx/fused_kernels.ptx
stamp=examples/fused-kernels/ptx/sources.sha256
for f in "$target/ibp-ptx/ibp_kernels_sm_80.ptx" "$target/ibp-ptx/fused_kernels.ptx"; do
  [ -s "$f" ] || { echo "ptx: the build left no $f" >&2; exit 1; }
done
if [ "$check" = 0 ]; then
  mkdir -p "$(dirname "$lib")" "$(dirname "$fused")"
  cp "$target/ibp-ptx/ibp_kernels_sm_80.ptx" "$lib"
  cp "$target/ibp-ptx/fused_kernels.ptx" "$fused"
  fused_sources >"$stamp"
  echo "ptx: wrote $lib ($(wc -c <"$lib") bytes), $fused ($(wc -c <"$fused") bytes) and $stamp"
  exit 0
fi
# The library's PTX: byte for byte.
if cmp -s "$target/ibp-ptx/ibp_kernels_sm_80.ptx" "$lib"; then
  echo "ptx: $lib is byte for byte what the sources build ($(wc -c <"$lib") bytes)"
else
  echo "ptx: FAIL: $lib is not what the sources build; regenerate it with: bash scripts/ptx.sh" >&2
  status=1
fi
# Q: why are the fused examples' PTX checked by their sources' hash, not
# byte for byte? A: their crate depends on ibp-kernels by a path outside its
# own workspace (../../gpu-kernels), and cargo then hashes that dependency's
# absolute path into its -C metadata; the crates' stable ids change, and
# with them, in places, LLVM's register numbering: a clone at another path
# may build equivalent but different text (measured: the same sources in
# three folders built to two different texts, 288 lines of diff, register
# numbers only; cargo's hashes of both crates differed in all three, while
# gpu-kernels' hash, and its PTX, were the same in both folders that built it).
# gpu-kernels is its own workspace root with no path dependency outside it,
# so the library's PTX is the same from any folder. The examples' PTX must
# still build, and must have been regenerated since their sources changed.
if [ "$(fused_sources)" = "$(cat "$stamp" 2>/dev/null)" ]; then
  echo "ptx: $fused was built from the current sources ($stamp); they build ($(wc -c <"$target/ibp-ptx/fused_kernels.ptx") bytes here)"
else
  echo "ptx: FAIL: examples/fused-kernels or gpu-kernels changed since $fused was built; regenerate it with: bash scripts/ptx.sh" >&2
  status=1
fi
exit "$status"
