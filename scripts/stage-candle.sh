#!/usr/bin/env bash
# Build the candle integration's GPU binaries here (the GPU machine has no
# Rust and no network) and put them, with the MiniLM data they need, into
# .device-candle/ (git-ignored), which the device tool carries. Then, on the
# GPU machine, from the repository root: `bash .device-candle/run.sh`.
#
# - Built in release with feature `cuda` (scripts/setup-candle.sh's tools,
#   CUDA_COMPUTE_CAP=90 for the H200), stripped, xz-compressed:
#   tests/gpu_minilm.rs, benches/gpu_embedding.rs and benches/gpu_offload.rs
#   of candle/.
# - Data: MiniLM rounded to bf16 and compressed by ibp (minilm-bf16.ibp,
#   ~35 MB; the f32 file is 87 MB, over the 64 MiB carry limit: the tests
#   restore the bf16 file there and widen it for their f32 runs), and the
#   vocabulary.
# - At run time the binaries load the CUDA libraries of the GPU machine's
#   toolkit: libcuda.so.1 (the driver), libcublas.so.13, libcublasLt.so.13,
#   libcurand.so.10, libnvrtc.so.13, libcudart.so.13; run.sh finds them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/candle-env.sh
[ -x "$(command -v nvcc)" ] || { echo "no nvcc: run scripts/setup-candle.sh first" >&2; exit 1; }
# Lints first: CI's clippy leaves this package out (scripts/test.sh says
# why), so its CUDA half is checked here, where it is built.
cargo clippy --release -p ibp-candle --features cuda --all-targets -- -D warnings
out=.device-candle
rm -rf "$out" && mkdir -p "$out/bin" "$out/data"
{
  cargo test --release -p ibp-candle --features cuda --test gpu_minilm --no-run --message-format=json
  cargo bench -p ibp-candle --features cuda --bench gpu_embedding --bench gpu_offload --no-run --message-format=json
} 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        kind = "bench" if "bench" in m["target"]["kind"] else "test"
        print(m["target"]["name"] + "." + kind, m["executable"])
' | sort -u | while read -r name exe; do cp "$exe" "$out/bin/$name"; done
[ -f "$out/bin/gpu_minilm.test" ] && [ -f "$out/bin/gpu_embedding.bench" ] && [ -f "$out/bin/gpu_offload.bench" ] || {
  echo "stage-candle: the binaries were not built (run: cargo test --release -p ibp-candle --features cuda --no-run)" >&2
  exit 1
}
strip "$out"/bin/*
cargo run --quiet --release -p ibp-candle --example compress_bf16 -- \
  "$IBP_DATA_DIR/model.safetensors" "$out/data/minilm-bf16.ibp"
cp "$IBP_DATA_DIR/minilm-vocab.txt" "$out/data/"
xz -T0 -6 "$out"/bin/*
cp scripts/device-candle-run.sh "$out/run.sh"
git rev-parse --short=12 HEAD >"$out/commit"
du -sh "$out" "$out"/bin/* "$out"/data/*
