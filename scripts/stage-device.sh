#!/usr/bin/env bash
# Build the GPU test and bench binaries here (the GPU machine has no Rust) and
# copy them, with the data they need, into .device/ (git-ignored), which the
# device tool carries. Then run `bash .device/device-run.sh` there.
# Arguments: data files to carry along (they land in .device/data).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
rm -rf .device && mkdir -p .device/bin .device/data
{ cargo test --release --features cuda --no-run --message-format=json
  cargo bench --features cuda --no-run --message-format=json
  cargo build --release --features cuda --bin ibp --message-format=json; } 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    exe = m.get("executable")
    if m.get("reason") != "compiler-artifact" or not exe: continue
    kinds, test = m["target"]["kind"], m["profile"]["test"]
    kind = "bench" if "bench" in kinds else ("test" if test else "bin")
    print(m["target"]["name"] + "." + kind, exe)
' | sort -u | while read -r name exe; do cp "$exe" ".device/bin/$name"; done
strip .device/bin/* 2>/dev/null || true
cp scripts/device-run.sh .device/
for f in "$@"; do cp "$f" .device/data/; done
du -sh .device; ls -la .device/bin
