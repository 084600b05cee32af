#!/usr/bin/env bash
# Build the GPU test and bench binaries here (the GPU machine has no Rust) and
# copy them, with the data they need, into .device/ (git-ignored), which the
# device tool carries. Then run `bash .device/device-run.sh` there.
#
# With IBP_STAGE_WORKTREE=DIR it builds the committed HEAD in a separate
# worktree (so edits in progress in this checkout do not get in the way).
# Only the GPU binaries travel (the carry limit is 64 MiB), plus MiniLM's
# word-embedding table cut out of model.safetensors (47 MB). The criterion
# benches stay behind unless IBP_STAGE_BENCHES=1 (with them the carry is at
# its limit); `ibp bench` measures the same and more.
#
# The fused-decode examples (issue 11) travel too, as NAME.example, with a
# bf16 row sample of MiniLM's layer weights (every layer,
# IBP_STAGE_LAYER_MB, default 4 MB); `bash .device/device-run.sh examples`
# runs them.
#
# With IBP_STAGE_NVCOMP=1 nvCOMP travels too, for device-float.sh (issue 34's
# float coding beside nvCOMP).
#
# With IBP_BASELINE=COMMIT it also builds that commit's `ibp` binary as
# .device/bin/ibp-baseline.bin, and device-run.sh then runs its decode
# benchmark in the same session, for before/after tables from one machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/env.sh
rm -rf .device && mkdir -p .device/bin .device/data
src=$root
if [ -n "${IBP_STAGE_WORKTREE:-}" ]; then
  src=$IBP_STAGE_WORKTREE
  [ -d "$src" ] || git worktree add --detach "$src" HEAD >/dev/null
  git -C "$src" checkout -q --detach "$(git rev-parse HEAD)"
  export CARGO_TARGET_DIR="$src-target"
  cp -r .tools "$src/" 2>/dev/null || true
fi
# The whole workspace: the `ibp` binary is package ibp-cli (cli/), the
# GPU tests are the library's and cli/tests/gpu_cli.rs. tests/gpu_foundation.rs
# needs `testing`, the command line `bench-hooks`; the same features for
# all four keep one build of the library per profile. `cudarc`: ibp on
# cudarc's memory and streams (tests/gpu_cudarc.rs, the example
# cudarc_interop). `nccl`: the compressed collectives through NCCL
# (tests/gpu_collective.rs, `ibp bench --section collective`; libnccl is
# loaded at run time, scripts/device-collective.sh finds it). The candle integration (candle/, package ibp-candle)
# stages its own binaries (scripts/stage-candle.sh).
feats=ibp/cuda,ibp/testing,ibp/bench-hooks,ibp-cli/cuda,ibp/cudarc,ibp/nccl,ibp-cli/nccl
{ cd "$src"
  cargo test --release --workspace --exclude ibp-candle --features "$feats" --no-run --message-format=json
  cargo bench --workspace --exclude ibp-candle --features "$feats" --no-run --message-format=json
  cargo build --release --workspace --exclude ibp-candle --features "$feats" --bin ibp --message-format=json
  cargo build --release --workspace --exclude ibp-candle --features "$feats" --example embedding_bag --example gemv_stream --example float_gemv --example cudarc_interop --message-format=json
  cd "$root"; } 2>/dev/null | python3 -c '
import json, os, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    exe = m.get("executable")
    if m.get("reason") != "compiler-artifact" or not exe: continue
    kinds, test = m["target"]["kind"], m["profile"]["test"]
    kind = "bench" if "bench" in kinds else ("test" if test else "bin")
    name = m["target"]["name"]
    if kind == "bench" and os.environ.get("IBP_STAGE_BENCHES") != "1": continue
    if "example" in kinds:
        # Only the examples that run on the GPU by themselves (`cargo test`
        # also builds the others: tools that want arguments or host data).
        if name in ("embedding_bag", "gemv_stream", "float_gemv", "cudarc_interop"):
            print(name + ".example", exe)
        continue
    # nvCOMP'"'"'s test travels with scripts/stage-peers.sh, not here.
    if name == "gpu_peers": continue
    if kind == "bin" or name.startswith("gpu_"):
        print(name + "." + kind, exe)
' | sort -u | while read -r name exe; do cp "$exe" "$root/.device/bin/$name"; done
# A kernel crate outside the repository: kernel-builder's test writes the
# device-API tutorial's crate (docs/DEVICE-API.md's listings) in a temporary
# folder and builds it to PTX with the builder; the PTX travels, and
# tests/gpu_device_api.rs runs its kernels on the GPU (issue 11).
(cd "$src" && IBP_USER_PTX_OUT="$root/.device/data/user-kernels.ptx" \
  cargo test --quiet --manifest-path kernel-builder/Cargo.toml --test user_crate >&2)
[ -s .device/data/user-kernels.ptx ] || { echo "stage-device: the user crate's PTX was not built" >&2; exit 1; }
if [ -n "${IBP_BASELINE:-}" ]; then
  base=$root/target/baseline-src
  [ -d "$base" ] || git worktree add --detach "$base" "$IBP_BASELINE" >/dev/null
  git -C "$base" checkout -q --detach "$IBP_BASELINE"
  cp -r .tools "$base/" 2>/dev/null || true
  # The binary is package ibp-cli (cli/) since the workspace split; before
  # it, the root package's with feature `cli`; before that, without.
  if [ -f "$base/cli/Cargo.toml" ]; then
    how=(-p ibp-cli --features cuda)
  elif grep -q '^cli = ' "$base/Cargo.toml"; then
    how=(--features cli,cuda)
  else
    how=(--features cuda)
  fi
  (cd "$base" && CARGO_TARGET_DIR="$root/target/baseline" cargo build --release "${how[@]}" --bin ibp >&2)
  cp "$root/target/baseline/release/ibp" .device/bin/ibp-baseline.bin
  echo "$IBP_BASELINE" >.device/baseline-commit
fi
strip .device/bin/* 2>/dev/null || true
cp scripts/device-run.sh scripts/device-profile.sh scripts/device-kv-profile.sh scripts/device-compress-check.sh scripts/device-unpack.sh scripts/device-reliability.sh scripts/device-structural-check.sh scripts/sweep-points.sh scripts/device-decoder.sh scripts/device-collective.sh scripts/device-nccl.sh scripts/device-lanes.sh scripts/device-float.sh scripts/bench-compare.py scripts/sweep-compare.py .device/
git rev-parse --short=12 HEAD >.device/commit
# IBP_STAGE_NVCOMP=1: nvCOMP too (trimmed to sm_90 and gzip'd, about 4 MB),
# for `ibp bench --peers nvcomp` from .device (device-float.sh).
if [ "${IBP_STAGE_NVCOMP:-0}" = 1 ]; then
  [ -s .tools/nvcomp/libnvcomp.so.6 ] || IBP_FETCH_NVCOMP=1 bash scripts/setup.sh
  python3 scripts/nvcomp-trim.py .tools/nvcomp/libnvcomp.so.6 .device/libnvcomp.so.6 90 >&2
  gzip -9 .device/libnvcomp.so.6
fi
# What travels is limited to 64 MiB: MiniLM's table goes compressed by ibp
# itself, the binaries as one xz archive; .device/device-unpack.sh restores
# both on the GPU machine (and checks the table's hash).
python3 scripts/minilm-cut.py "$IBP_DATA_DIR/model.safetensors" .device/data/model.safetensors
if [ -f .device/data/model.safetensors ]; then
  sha256sum .device/data/model.safetensors | cut -d' ' -f1 >.device/data/model.sha256
  .device/bin/ibp.bin compress --device cpu .device/data/model.safetensors -o .device/data/model.ibp --force >/dev/null
  rm .device/data/model.safetensors
fi
if [ -f "$IBP_DATA_DIR/model.safetensors" ]; then
# MiniLM's layer weights for examples/gemv_stream.rs: every 2-D
# encoder.layer.*.weight as rows of 384, every k-th row (k chosen so the
# sample fits IBP_STAGE_LAYER_MB), rounded to bf16 (to nearest, ties to
# even), as one [rows, 384] BF16 tensor.
python3 - "$IBP_DATA_DIR/model.safetensors" .device/data/minilm-layers-bf16.safetensors "${IBP_STAGE_LAYER_MB:-4}" <<'PY'
import array, json, struct, sys
src, dst, mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
    base = 8 + n
    mats = []
    for name, t in hdr.items():
        if name.startswith("encoder.layer.") and name.endswith(".weight") and len(t.get("shape", [])) == 2:
            a, b = t["data_offsets"]
            f.seek(base + a)
            w = array.array("I")
            w.frombytes(f.read(b - a))
            mats.append(w)
total_rows = sum(len(w) // 384 for w in mats)
k = max(1, -(-total_rows * 768 // int(mb * 1e6)))
out = array.array("H")
for w in mats:
    for r in range(0, len(w) // 384, k):
        out.extend((x + 0x7FFF + ((x >> 16) & 1)) >> 16 & 0xFFFF for x in w[384 * r: 384 * (r + 1)])
rows = len(out) // 384
h = json.dumps({"layers.rows": {"dtype": "BF16", "shape": [rows, 384], "data_offsets": [0, 2 * len(out)]}}).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(dst, "wb") as o:
    o.write(struct.pack("<Q", len(h)))
    o.write(h)
    o.write(out.tobytes())
print(f"layer sample: {len(mats)} matrices, every {k}th of {total_rows} rows: {rows} rows", file=sys.stderr)
PY
fi
# Real KV rows for tests/gpu_kv_store.rs, tests/gpu_float_kv.rs and `ibp bench --section kv`
# (issue 12): all-MiniLM-L6-v2 run by `ibp kv-data` over the first
# IBP_STAGE_KV_CHARS characters (default 4000, about a thousand tokens) of
# its model card, in bf16, compressed by ibp itself to fit the carry
# (device-unpack.sh restores it). With IBP_STAGE_KV_ALL=1 the f16 and f32
# rows too (the float-coded store's capacity rows; 33 MB more, over the
# carry beside MiniLM's table).
if [ -f "$IBP_DATA_DIR/model.safetensors" ] && [ -f "$IBP_DATA_DIR/minilm-card.md" ]; then
  python3 -c 'import sys; sys.stdout.write(open(sys.argv[1], encoding="utf-8").read()[:int(sys.argv[2])])' \
    "$IBP_DATA_DIR/minilm-card.md" "${IBP_STAGE_KV_CHARS:-4000}" >.device/kv-text.md
  dtypes=(bf16)
  [ "${IBP_STAGE_KV_ALL:-0}" = 1 ] && dtypes=(bf16 f16 f32)
  for dtype in "${dtypes[@]}"; do
    .device/bin/ibp.bin kv-data --text .device/kv-text.md --data-dir "$IBP_DATA_DIR" \
      --dtype "$dtype" -o ".device/kv-$dtype.safetensors" --force
    .device/bin/ibp.bin compress ".device/kv-$dtype.safetensors" -o ".device/data/kv-$dtype.ibp" --force >/dev/null
    sha256sum ".device/kv-$dtype.safetensors" | cut -d' ' -f1 >".device/data/kv-$dtype.sha256"
    rm ".device/kv-$dtype.safetensors"
  done
  rm .device/kv-text.md
fi
ls -la .device/bin
tar cJf .device/bin.tar.xz -C .device bin && rm -rf .device/bin
du -sh .device
