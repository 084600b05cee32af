#!/usr/bin/env bash
# Stage `ibp bench --peers nvcomp` for the GPU machine: build here (the GPU
# machine has no Rust) and put into .peers/ (git-ignored), which the device
# tool carries (64 MiB at most; .device/ is too full to share):
#
#   .peers/bin/ibp                 the release binary (ibp-cli, feature cuda), stripped
#   .peers/bin/gpu_peers.test      nvCOMP's round-trip test (cli/tests/gpu_peers.rs)
#   .peers/libnvcomp.so.6.gz       nvCOMP 6, gzip'd, its fatbin trimmed to the
#                                  GPU's architecture (scripts/nvcomp-trim.py)
#   .peers/data/model.ibp          MiniLM's word-embedding table, compressed by
#                                  ibp itself (restored there, hash checked)
#   .peers/device-peers.sh         the run script
#
# Cora is embedded in the binary. Then, on the GPU machine (carry .peers):
#   bash .peers/device-peers.sh
#
# nvCOMP comes from IBP_NVCOMP (the library or a folder holding it), else
# .tools/nvcomp, else `IBP_FETCH_NVCOMP=1 scripts/setup.sh` fetches it.
# IBP_PEERS_ARCHS: the sm_ versions to keep in nvCOMP (default 90: H100,
# H200); `all` keeps every one (then the library alone is 22 MB packed and
# MiniLM no longer fits: IBP_PEERS_NO_MINILM=1 leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
limit=$((60 << 20))

lib=${IBP_NVCOMP:-}
if [ -n "$lib" ] && [ -d "$lib" ]; then
  for sub in . lib64 lib nvidia/libnvcomp/lib64; do
    [ -f "$lib/$sub/libnvcomp.so.6" ] && { lib="$lib/$sub/libnvcomp.so.6"; break; }
  done
fi
if [ -z "$lib" ]; then
  [ -s .tools/nvcomp/libnvcomp.so.6 ] || IBP_FETCH_NVCOMP=1 bash scripts/setup.sh
  lib=.tools/nvcomp/libnvcomp.so.6
fi
[ -f "$lib" ] || { echo "stage-peers: nvCOMP not found at $lib" >&2; exit 1; }

rm -rf .peers && mkdir -p .peers/bin .peers/data
echo "stage-peers: building ibp and cli/tests/gpu_peers.rs (release, ibp-cli with feature cuda)" >&2
cargo build --release -p ibp-cli --features cuda --bin ibp >&2
test_exe=$(cargo test --release -p ibp-cli --features cuda --test gpu_peers --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gpu_peers" and m.get("executable"):
        print(m["executable"])
')
cp target/release/ibp .peers/bin/ibp
cp "$test_exe" .peers/bin/gpu_peers.test
strip .peers/bin/*

archs=${IBP_PEERS_ARCHS:-90}
if [ "$archs" = all ]; then
  cp "$lib" .peers/libnvcomp.so.6
else
  # shellcheck disable=SC2086 # a list of architectures
  python3 scripts/nvcomp-trim.py "$lib" .peers/libnvcomp.so.6 $archs >&2
fi
gzip -9 .peers/libnvcomp.so.6

if [ "${IBP_PEERS_NO_MINILM:-0}" != 1 ] && [ -f "$IBP_DATA_DIR/model.safetensors" ]; then
  python3 scripts/minilm-cut.py "$IBP_DATA_DIR/model.safetensors" .peers/data/model.safetensors
  .peers/bin/ibp compress .peers/data/model.safetensors -o .peers/data/model.ibp >&2
  rm .peers/data/model.safetensors
fi
cp scripts/device-peers.sh .peers/
total=$(du -sb .peers | cut -f1)
ls -la .peers .peers/bin .peers/data >&2
echo "stage-peers: .peers holds $((total >> 20)) MiB" >&2
if [ "$total" -gt "$limit" ]; then
  echo "stage-peers: over 60 MiB; keep fewer architectures or set IBP_PEERS_NO_MINILM=1" >&2
  exit 1
fi
