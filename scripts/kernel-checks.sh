#!/usr/bin/env bash
# The kernels' static checks, with no GPU: the shipped PTX is what the
# sources build (scripts/ptx.sh --check), ptxas (sm_80 and sm_90) on it,
# where a spill is an error but one (below), and the SASS
# instruction counts of the decode step's probe kernels against a budget
# (scripts/sass.sh --steps, IBP_STEP_BUDGET, default 100 per 256 output
# bytes).
#
#   scripts/kernel-checks.sh            run the checks
#   scripts/kernel-checks.sh --stamp    run them and, when they pass, record
#                                       the hash of what they read in
#                                       gpu-kernels/ptx/checked.sha256
#   scripts/kernel-checks.sh --stamped  exit 0 when that record matches what
#                                       the checks would read now (nothing run)
#
# scripts/test.sh skips the checks when --stamped says they passed on these
# very kernels; after changing the kernels, regenerate the PTX
# (scripts/ptx.sh) and run this with --stamp.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
stamp=gpu-kernels/ptx/checked.sha256
ptxs=(gpu-kernels/ptx/ibp_kernels_sm_80.ptx examples/fused-kernels/ptx/fused_kernels.ptx)

# Everything the checks read: the kernels' sources (the library's, the fused
# examples', the probe build), what builds them (build.rs with its register
# caps, the kernel builder, the toolchain), the shipped PTX and the scripts;
# and the kernel builder's own test (a user crate on the device API), which
# scripts/test.sh skips under the same record.
inputs_hash() {
  find gpu-kernels/src gpu-kernels/macros gpu-kernels/Cargo.toml gpu-kernels/Cargo.lock \
    examples/fused-kernels/src examples/fused-kernels/Cargo.toml examples/fused-kernels/Cargo.lock \
    examples/fused-kernels/ptx/sources.sha256 build.rs kernel-builder/src kernel-builder/examples kernel-builder/Cargo.toml \
    kernel-builder/tests \
    "${ptxs[@]}" rust-toolchain.toml scripts/kernel-checks.sh scripts/sass.sh scripts/ptx.sh \
    -type f -not -path '*/target/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1
}

case "${1:-}" in
  --stamped) [ -s "$stamp" ] && [ "$(cat "$stamp")" = "$(inputs_hash)" ]; exit ;;
  --stamp | "") ;;
  *) echo "usage: scripts/kernel-checks.sh [--stamp | --stamped]" >&2; exit 2 ;;
esac

case ",$IBP_FEATURES," in
  *,cuda,*) bash scripts/ptx.sh --check ;;
  *)
    # ptx.sh checks through the cuda feature's build script, which needs a
    # libcuda.so to link (scripts/setup.sh).
    [ "${1:-}" = --stamp ] && { echo "kernel-checks: --stamp needs the cuda feature (no libcuda.so here)" >&2; exit 1; }
    echo "kernel-checks: no libcuda.so to build the cuda feature: the shipped PTX is not compared with the sources here"
    ;;
esac

# The spills allowed. ibp_decode_clustered on sm_80 keeps a
# loop-invariant address in local memory (4 bytes, stored and loaded once
# per batch of tensors, outside the decode step), at the 128-register cap
# that ibp_decode itself reaches there; sm_90 has none.
# docs/archive/PERF-NOTES-2026-11-28.md, "Clustered datasets on the GPU".
#
# Issue 33's branch-free expansion (every chunk's two outputs computed and
# one selected) took the batch kernels to the cap, and two of them spill:
# - ibp_decode_pairs (two tensors a warp, a tensor's state per half-warp):
#   4 bytes on sm_80, 144 on sm_90. Allowed because it was measured faster
#   with them: MiniLM bf16 1.42 ms a launch against 1.61 without the
#   change and 2.02 with one tensor a warp (Nsight Compute, H200,
#   docs/results/nvidia-h200-decoder-2026-11-28.md); the host uses it only
#   where a row's last step would be half empty (`pairs_pay`).
# - ibp_decode_clustered on sm_90: 52 bytes, not yet timed (its tests
#   pass); docs/LEADS.md lists both as leads to take back.
allowed_spill() {
  case "$1 $2" in
    "ibp_decode_clustered sm_80") [ "$3" -le 8 ] ;;
    "ibp_decode_clustered sm_90") [ "$3" -le 64 ] ;;
    "ibp_decode_pairs sm_80") [ "$3" -le 8 ] ;;
    "ibp_decode_pairs sm_90") [ "$3" -le 160 ] ;;
    # The fused examples' kernels (docs/DEVICE-API.md), the same step in a
    # user's kernel beside its own state: 24–32 bytes on sm_90; timed by
    # `device-run.sh examples` against their ideals.
    "gemv_fused_s2 sm_90" | "bag_fused_f32_s3 sm_90" | "bag_fused_bf16_s2 sm_90") [ "$3" -le 32 ] ;;
    # The float decode with output tiles (seventh session): 12–24 bytes at
    # its 64-register cap, stored and loaded in a row's set-up and in the
    # divergent-barrier fallbacks, none in the pair loops
    # (docs/DESIGN-GPU.md, "Output tiles").
    "ibp_float_decode sm_80" | "ibp_float_decode sm_90" | "ibp_float_decode_staged sm_80" | "ibp_float_decode_staged sm_90") [ "$3" -le 32 ] ;;
    *) false ;;
  esac
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# ptxas runs on one core: every (file, arch) at once, read in order after.
pids=()
for ptx in "${ptxs[@]}"; do
  for arch in sm_80 sm_90; do
    r=$dir/$(basename "$ptx").$arch
    # --maxrregcount matches the cap the driver's JIT gets (JIT_MAX_REGISTERS).
    { "$IBP_PTXAS" -arch="$arch" -v --maxrregcount=128 "$ptx" -o /dev/null 2>"$r.txt"; echo $? >"$r.rc"; } &
    pids+=("$!")
  done
done
wait "${pids[@]}"
for ptx in "${ptxs[@]}"; do
  for arch in sm_80 sm_90; do
    r=$dir/$(basename "$ptx").$arch
    [ "$(cat "$r.rc")" = 0 ] || { cat "$r.txt"; echo "ptxas rejected $ptx for $arch"; exit 1; }
    while read -r kernel bytes; do
      allowed_spill "$kernel" "$arch" "$bytes" && continue
      cat "$r.txt"; echo "$kernel spills $bytes bytes on $arch ($ptx)"; exit 1
    done < <(awk -F"'" '/Compiling entry function/ {k = $2} /bytes spill stores/ {n = split($0, a, " "); for (i = 3; i < n; i++) if (a[i] == "spill" && a[i+1] == "stores," && a[i-2] + 0 > 0) print k, a[i-2]}' "$r.txt")
    printf '%s %s: ' "$(basename "$ptx")" "$arch"
    grep -E "Used [0-9]+ registers" "$r.txt" | sed 's/.*Used/used/' | sort | uniq -c | tr '\n' ';'
    echo
  done
done

IBP_STEP_BUDGET=${IBP_STEP_BUDGET:-100} bash scripts/sass.sh --steps

if [ "${1:-}" = --stamp ]; then
  # The kernel builder's test is skipped under the same record
  # (scripts/test.sh), so it passes here first.
  cargo clippy --manifest-path kernel-builder/Cargo.toml --all-targets -- -D warnings
  cargo test --manifest-path kernel-builder/Cargo.toml
  inputs_hash >"$stamp"
  echo "kernel-checks: passed; recorded $(cut -c1-12 "$stamp") in $stamp"
fi
