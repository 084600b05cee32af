#!/usr/bin/env bash
# The main job on the embedded Cora node features (2708 × 1433 f32), from a
# fresh machine: set-up and build, then
#   1. analyse them (bit invariance, threshold and chunk choice),
#   2. compress them to an .ibp file,
#   3. inspect the file,
#   4. decode it: on the GPU from pinned memory when one is usable (with the
#      rate of a plain copy beside it), on the CPU otherwise,
#   5. verify the result byte for byte,
# and one closing line: what was saved and how fast. Extra arguments go to
# `ibp analyze`. IBP_CPU_ONLY=1 leaves the GPU out. The analysis is also
# drawn, to target/demo/cora-analyze.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
step() { printf '\n== %s\n' "$*"; }
now() { date +%s.%N; }
# rate BYTES SECONDS: "123.4 MB/s"
rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f MB/s", b / s / 1e6 }'; }

# Q: why decide here and not take env.sh's IBP_FEATURES? A: env.sh chooses
# `cuda` whenever there is a libcuda to link, and set-up provides one even
# on a machine without a GPU (CI builds the cuda feature that way). The
# demo runs the binary, so it asks whether a GPU is usable: the driver
# lists one in /proc/driver/nvidia/gpus, or `nvidia-smi -L` names one.
gpu_usable() {
  [ "${IBP_CPU_ONLY:-0}" != 1 ] || return 1
  if [ -d /proc/driver/nvidia/gpus ] && [ -n "$(ls -A /proc/driver/nvidia/gpus 2>/dev/null)" ]; then
    return 0
  fi
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}
if [[ ",$IBP_FEATURES," == *,cuda,* ]] && ! gpu_usable; then
  IBP_FEATURES=
fi

if [[ ",$IBP_FEATURES," == *,cuda,* ]]; then
  step "building ibp with its GPU path (features $IBP_FEATURES)"
  echo "A GPU is usable. A first build takes a minute or two: the GPU kernels'"
  echo "PTX ships with ibp (gpu-kernels/ptx/), nothing is compiled for the GPU."
else
  step "building ibp for the CPU (no features)"
  echo "No usable GPU (IBP_CPU_ONLY=1, or no GPU in /proc/driver/nvidia/gpus"
  echo "or nvidia-smi -L): building the CPU path only, without the GPU kernels."
  echo "A first build takes a minute or two."
fi
# Q: why not --quiet? A: a first build takes minutes on a laptop; cargo's
# progress bar (or its "Compiling" lines in a log) shows that it is at work.
# The command line is package ibp-cli (cli/); its `cuda` is the library's.
cargo build --release -p ibp-cli --features "$IBP_FEATURES" --bin ibp
ibp=target/release/ibp
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
picture=target/demo/cora-analyze.svg
mkdir -p "$(dirname "$picture")"

step "1. analyse the embedded Cora node features"
"$ibp" analyze --candidates --plot "$picture" "$@"
echo "drawn: $picture (savings per tensor by bytes, then each (threshold, chunk) candidate)"

step "2. compress them to an .ibp file"
# The tensor as a program holds it: the .npy inside data/cora-features.npz
# (the .npz itself is deflated; the .ibp would restore it too, byte for byte).
python3 - data/cora-features.npz "$work/cora.npy" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("features.npy") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
raw=$(stat -c %s "$work/cora.npy")
t0=$(now)
"$ibp" compress "$work/cora.npy" -o "$work/cora.ibp"
t_compress=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { print b - a }')
packed=$(stat -c %s "$work/cora.ibp")

step "3. inspect the file"
"$ibp" inspect "$work/cora.ibp"

step "4. decode it"
gpu_line=""
if [[ ",$IBP_FEATURES," == *,cuda,* ]]; then
  echo "a GPU is present: decoding from pinned host memory (cli/examples/gpu_decode.rs)"
  cargo build --release --quiet -p ibp-cli --features "$IBP_FEATURES" --example gpu_decode
  rc=0
  target/release/examples/gpu_decode "$work/cora.ibp" | tee "$work/gpu.txt" || rc=$?
  if [ "$rc" = 0 ]; then
    gbps=$(sed -n 's/^gpu_decode_gbps=\([0-9.]*\) copy_gbps=\([0-9.]*\)$/\1 GB\/s on the GPU from pinned memory (a plain copy: \2 GB\/s)/p' "$work/gpu.txt")
    gpu_line="decoded at $gbps, "
  elif [ "$rc" = 10 ]; then
    echo "no usable GPU after all: decoding on the CPU"
  else
    echo "the GPU decode failed (exit $rc)"; exit "$rc"
  fi
else
  echo "no usable GPU (or IBP_CPU_ONLY=1): decoding on the CPU"
fi
t0=$(now)
"$ibp" decompress "$work/cora.ibp" -o "$work/restored.npy"
t_decompress=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { print b - a }')

step "5. verify byte for byte"
cmp "$work/cora.npy" "$work/restored.npy"
echo "identical: $raw bytes"

echo
awk -v r="$raw" -v p="$packed" 'BEGIN { printf "Cora features: %.2f MB -> %.2f MB in the .ibp file, %.1f%% saved (%.1fx smaller); ", r / 1e6, p / 1e6, 100 * (1 - p / r), r / p }'
# Q: why does this rate differ from the one `ibp compress` printed? A: its
# "at X MB/s" is the work alone (fit, compress, write); these are end to
# end, the whole process as a stopwatch sees it (start-up, reading, the
# final check), the figure its report gives as "end to end". Both in MB/s.
echo "${gpu_line}ibp compress at $(rate "$raw" "$t_compress") and ibp decompress at $(rate "$raw" "$t_decompress") end to end (each whole command: start, read, work, checks, write; $(nproc) CPU threads); byte for byte identical."
# Q: why this check? A: a `cuda` build needs libcuda.so.1 at load time
# (docs/GPU.md#set-up); where only .tools/cuda/lib64 has it, the binary
# run from a fresh shell would stop with exit 127, so say so in one line.
if [[ ",$IBP_FEATURES," == *,cuda,* ]] && ! env -u LD_LIBRARY_PATH "$ibp" --version >/dev/null 2>&1; then
  echo "note: $ibp loads libcuda.so.1 at start, found here only in .tools/cuda/lib64: run \`source scripts/env.sh\` first in a new shell"
fi
