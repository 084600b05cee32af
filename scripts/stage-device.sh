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
# The binary needs `cli`; the same features for all three keep one build of the
# library per profile.
{ cd "$src"; cargo test --release --features cli,cuda --no-run --message-format=json
  cargo bench --features cli,cuda --no-run --message-format=json
  cargo build --release --features cli,cuda --bin ibp --message-format=json; cd "$root"; } 2>/dev/null | python3 -c '
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
    if "example" in kinds: continue
    # nvCOMP'"'"'s test travels with scripts/stage-peers.sh, not here.
    if name == "gpu_peers": continue
    if kind == "bin" or name.startswith("gpu_"):
        print(name + "." + kind, exe)
' | sort -u | while read -r name exe; do cp "$exe" "$root/.device/bin/$name"; done
if [ -n "${IBP_BASELINE:-}" ]; then
  base=$root/target/baseline-src
  [ -d "$base" ] || git worktree add --detach "$base" "$IBP_BASELINE" >/dev/null
  git -C "$base" checkout -q --detach "$IBP_BASELINE"
  cp -r .tools "$base/" 2>/dev/null || true
  # Commits since the `cli` feature need it for the binary; older ones lack it.
  feats=cuda
  if grep -q '^cli = ' "$base/Cargo.toml"; then feats=cli,cuda; fi
  (cd "$base" && CARGO_TARGET_DIR="$root/target/baseline" cargo build --release --features "$feats" --bin ibp >&2)
  cp "$root/target/baseline/release/ibp" .device/bin/ibp-baseline.bin
  echo "$IBP_BASELINE" >.device/baseline-commit
fi
strip .device/bin/* 2>/dev/null || true
cp scripts/device-run.sh scripts/device-profile.sh scripts/device-unpack.sh .device/
# What travels is limited to 64 MiB: MiniLM's table goes compressed by ibp
# itself, the binaries as one xz archive; .device/device-unpack.sh restores
# both on the GPU machine (and checks the table's hash).
python3 scripts/minilm-cut.py "$IBP_DATA_DIR/model.safetensors" .device/data/model.safetensors
if [ -f .device/data/model.safetensors ]; then
  sha256sum .device/data/model.safetensors | cut -d' ' -f1 >.device/data/model.sha256
  .device/bin/ibp.bin compress --device cpu .device/data/model.safetensors -o .device/data/model.ibp --force >/dev/null
  rm .device/data/model.safetensors
fi
ls -la .device/bin
tar cJf .device/bin.tar.xz -C .device bin && rm -rf .device/bin
du -sh .device
