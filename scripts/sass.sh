#!/usr/bin/env bash
# Build the kernels' PTX, assemble it for sm_90 with ptxas, and print each
# kernel's registers and SASS instruction counts (total, and the opcodes
# that dominate), with no GPU. Needs scripts/setup.sh's ptxas and nvdisasm.
#   scripts/sass.sh [KERNEL]   KERNEL defaults to ibp_decode; SASS goes to
#                              target/sass/KERNEL.sass for reading.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
kernel=${1:-ibp_decode}
out=target/sass
mkdir -p "$out"
(cd gpu-kernels && CARGO_ENCODED_RUSTFLAGS=-Ctarget-cpu=sm_80 cargo rustc --quiet --lib --crate-type cdylib \
  --target nvptx64-nvidia-cuda -Zbuild-std=core --release --target-dir ../target/sass-build)
ptx=target/sass-build/nvptx64-nvidia-cuda/release/ibp_kernels.ptx
"$IBP_PTXAS" -arch=sm_90 -v --maxrregcount=128 "$ptx" -o "$out/k.cubin" 2>"$out/ptxas.txt"
grep -A2 "Compiling entry function '$kernel'" "$out/ptxas.txt" | grep -E "registers|spill" | sed 's/ptxas info *: //'
"$IBP_NVDISASM" -c "$out/k.cubin" 2>/dev/null >"$out/all.sass"
# One kernel's section: from its .text label to the next kernel's .global.
awk -v k=".text.$kernel:" '$1 == k {on = 1; next} on && $1 == ".global" {on = 0} on' \
  "$out/all.sass" >"$out/$kernel.sass"
ops() { grep -oE '^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' "$1" | awk '{print $NF}' | sed 's/\..*//'; }
printf '%s: %d SASS instructions\n' "$kernel" "$(ops "$out/$kernel.sass" | wc -l)"
ops "$out/$kernel.sass" | sort | uniq -c | sort -rn | head -${IBP_SASS_TOP:-16} | awk '{printf "  %-10s %d\n", $2, $1}'
