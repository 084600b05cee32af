#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over what
# scripts/stage-peers.sh put into .peers/. Builds nothing. Unpacks nvCOMP and
# MiniLM into a temporary folder, runs nvCOMP's round-trip test (with
# IBP_REQUIRE_GPU=1 IBP_REQUIRE_NVCOMP=1: a missing GPU or library fails),
# then `ibp bench --section peers --peers nvcomp`. Logs and results go to
# $OUT; the comparison table is printed last. Arguments go to `ibp bench`
# (e.g. --real-bytes 268435456 for a quicker run on 256 MiB tables).
# Usage: bash .peers/device-peers.sh [IBP BENCH OPTIONS]
set -uo pipefail
out=${OUT:-/tmp/ibp-out}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/ibp-peers.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/data"
gzip -dc .peers/libnvcomp.so.6.gz >"$tmp/libnvcomp.so.6"
export IBP_NVCOMP="$tmp/libnvcomp.so.6" IBP_DATA_DIR="$tmp/data" IBP_REQUIRE_GPU=1 IBP_REQUIRE_NVCOMP=1
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
if [ -f .peers/data/model.ibp ]; then
  .peers/bin/ibp decompress .peers/data/model.ibp -o "$tmp/data/model.safetensors" >"$out/minilm-restore.log" 2>&1
  summary+=("restore MiniLM: rc=$?")
fi
if timeout 90 .peers/bin/gpu_peers.test --test-threads=1 >"$out/test-gpu_peers.log" 2>&1; then r=PASS; else r=FAIL; fi
summary+=("test  gpu_peers: $r ($(grep -E '^test result' "$out/test-gpu_peers.log" | tail -1))")
grep -E 'panicked' -A3 "$out/test-gpu_peers.log" | head -8
timeout 480 .peers/bin/ibp bench --section peers --peers nvcomp --out "$out/peers.md" "$@" >"$out/ibp-bench-peers.log" 2>&1
summary+=("ibp bench --section peers --peers nvcomp: rc=$?")
grep -E 'failed|^ibp:' "$out/ibp-bench-peers.log" | head -20
if [ -s "$out/peers.md" ]; then
  echo "== $out/peers.md"; grep -E '^(#|\||- )' "$out/peers.md" | grep -vE '^\| ---'
else # cut short: the tables measured so far, from the log
  echo "== (no results file) tables from $out/ibp-bench-peers.log"; grep -E '^\|' "$out/ibp-bench-peers.log" | grep -vE '^\| ---'
fi
printf '%s\n' "${summary[@]}"
