#!/usr/bin/env bash
# SASS of the kernels, with no GPU: build the kernels' PTX, assemble it for
# sm_90 (IBP_SASS_ARCH to change) with ptxas (as the driver's JIT would, with the same register cap),
# and disassemble it with nvdisasm (both installed by scripts/setup.sh).
#
#   scripts/sass.sh [KERNEL]   registers, spills and instruction counts of
#                              KERNEL (default ibp_decode), its SASS in
#                              target/sass/KERNEL.sass
#   scripts/sass.sh --steps    the batch decoder's step loop per path (`_half`:
#                              decoded by half-warps, two tensors a warp): the
#                              probe kernels (gpu-kernels feature `probe`)
#                              fix one path at compile time, and the body of
#                              their step loop is that path's instructions
#                              per warp step (512 output bytes). With
#                              IBP_STEP_BUDGET=N it fails when a 4- or
#                              8-byte-chunk path other than the general one
#                              (the paths f32 and sparse tables take;
#                              `_any` probes hold every path and are
#                              not budgeted)
#                              exceeds N per 256 output bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out=target/sass
mkdir -p "$out"
mode=${1:-ibp_decode}
features=()
[ "$mode" = --steps ] && features=(--features probe)
(cd gpu-kernels && CARGO_ENCODED_RUSTFLAGS=-Ctarget-cpu=sm_80 cargo rustc --quiet --lib --crate-type cdylib \
  --target nvptx64-nvidia-cuda -Zbuild-std=core --release "${features[@]}" --target-dir ../target/sass-build)
ptx=target/sass-build/nvptx64-nvidia-cuda/release/ibp_kernels.ptx
"$IBP_PTXAS" -arch="${IBP_SASS_ARCH:-sm_90}" -v --maxrregcount=128 "$ptx" -o "$out/k.cubin" 2>"$out/ptxas.txt"
"$IBP_NVDISASM" -c "$out/k.cubin" 2>/dev/null >"$out/all.sass"
# One kernel's section: from its .text label to the next kernel's .global.
source "$(dirname "${BASH_SOURCE[0]}")/sass-lib.sh"
section() { sass_section "$out/all.sass" "$1"; }
ops() { sass_ops; }

if [ "$mode" != --steps ]; then
  grep -A2 "Compiling entry function '$mode'" "$out/ptxas.txt" | grep -E "registers|spill" | sed 's/ptxas info *: //'
  section "$mode" >"$out/$mode.sass"
  printf '%s: %d SASS instructions\n' "$mode" "$(ops <"$out/$mode.sass" | wc -l)"
  ops <"$out/$mode.sass" | sort | uniq -c | sort -rn | head -"${IBP_SASS_TOP:-16}" | awk '{printf "  %-10s %d\n", $2, $1}'
  exit 0
fi

# The step loop: the longest span from a label back to a branch to it.
loop_body() {
  python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
ins, label_at = [], {}
for l in lines:
    m = re.match(r"\s*(\.L_x_\d+):", l)
    if m:
        label_at[m.group(1)] = len(ins)
    elif re.match(r"\s+/\*[0-9a-f]+\*/\s+\S", l):
        ins.append(l)
best = None
for i, l in enumerate(ins):
    m = re.search(r"BRA[^`]*`\((\.L_x_\d+)\)", l)
    if m and m.group(1) in label_at and label_at[m.group(1)] <= i:
        span = ins[label_at[m.group(1)]: i + 1]
        if best is None or len(span) > len(best):
            best = span
best = best or []
ops = [re.sub(r"^(@!?U?P\w+ )", "", re.sub(r"^\s+/\*[0-9a-f]+\*/\s+", "", l)).split()[0].split(".")[0] for l in best]
top = {}
for o in ops:
    top[o] = top.get(o, 0) + 1
print(len(ops), " ".join(f"{k}:{v}" for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:6]))
'
}
printf '%-22s %8s %9s  %s\n' path "per step" "per 256 B" "top opcodes in the loop"
fail=0
for k in $(grep -oE '^\.text\.ibp_probe_[a-z0-9_]+' "$out/all.sass" | sed 's/^\.text\.//' | sort -V); do
  read -r n top < <(section "$k" | loop_body)
  # A `_half` probe's step is two half-warps' (256 output bytes of each of
  # two tensors): 512 output bytes, as a whole-warp step.
  half=$(( (n + 1) / 2 ))
  printf '%-22s %8d %9d  %s\n' "${k#ibp_probe_}" "$n" "$half" "$top"
  case $k in
    *_c4_gen|*_c8_gen|*_any) ;;
    *_c4_*|*_c8_*) if [ -n "${IBP_STEP_BUDGET:-}" ] && [ "$half" -gt "$IBP_STEP_BUDGET" ]; then fail=1; fi ;;
  esac
done
if [ "$fail" = 1 ]; then echo "a real-table path exceeds IBP_STEP_BUDGET=$IBP_STEP_BUDGET instructions per 256 output bytes"; exit 1; fi
