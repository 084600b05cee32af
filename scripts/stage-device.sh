#!/usr/bin/env bash
# Build the GPU test and bench binaries here (the GPU machine has no Rust) and
# copy them, with the data they need, into .device/ (git-ignored), which the
# device tool carries. Then run `bash .device/device-run.sh` there.
# Arguments: data files to carry along (they land in .device/data).
# With IBP_STAGE_WORKTREE=DIR it builds the committed HEAD in a separate
# worktree (so edits in progress in this checkout do not get in the way).
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
{ cd "$src"; cargo test --release --features cuda --no-run --message-format=json
  cargo bench --features cuda --no-run --message-format=json
  cargo build --release --features cuda --bin ibp --message-format=json; cd "$root"; } 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    exe = m.get("executable")
    if m.get("reason") != "compiler-artifact" or not exe: continue
    kinds, test = m["target"]["kind"], m["profile"]["test"]
    kind = "bench" if "bench" in kinds else ("test" if test else "bin")
    print(m["target"]["name"] + "." + kind, exe)
' | sort -u | while read -r name exe; do cp "$exe" "$root/.device/bin/$name"; done
strip .device/bin/* 2>/dev/null || true
cp scripts/device-run.sh .device/
for f in "$@"; do cp "$f" .device/data/; done
du -sh .device; ls -la .device/bin
