#!/usr/bin/env bash
# usage: scripts/sass-table.sh PTX ARCH: one line per .entry of PTX, assembled
# for ARCH with the register cap (ptxas, nvdisasm from scripts/setup.sh):
# registers, spill bytes, SASS instructions and a hash of the opcode mix.
# Two tables diffed show whether a structural change moved any kernel's SASS.
set -euo pipefail
ptx=$1; arch=$2; d=$(mktemp -d)
"$IBP_PTXAS" -arch="$arch" -v --maxrregcount=128 "$ptx" -o "$d/k.cubin" 2>"$d/ptxas.txt"
"$IBP_NVDISASM" -c "$d/k.cubin" 2>/dev/null >"$d/all.sass"
source "$(dirname "${BASH_SOURCE[0]}")/sass-lib.sh"
section() { sass_section "$d/all.sass" "$1"; }
ops() { sass_ops; }
for k in $(grep -oE '^\.visible \.entry [a-z0-9_]+' "$ptx" | awk '{print $3}' | sort); do
  regs=$(grep -A3 "Compiling entry function '$k'" "$d/ptxas.txt" | grep -oE 'Used [0-9]+ registers' | grep -oE '[0-9]+')
  sp=$(grep -A3 "Compiling entry function '$k'" "$d/ptxas.txt" | grep -oE '[0-9]+ bytes spill stores, [0-9]+ bytes spill loads' | awk '{print $1"/"$5}')
  n=$(section "$k" | ops | wc -l)
  hist=$(section "$k" | ops | sort | md5sum | cut -c1-8)
  printf '%-30s %s regs=%-3s spill=%-5s instrs=%-6s ophist=%s\n' "$k" "$arch" "$regs" "$sp" "$n" "$hist"
done
rm -rf "$d"
