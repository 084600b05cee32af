#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up, formatting, lints, the
# CPU tests, the GPU tests (they print "skipped: no CUDA device" without a
# GPU; IBP_REQUIRE_GPU=1 makes that a failure), ptxas on every embedded PTX,
# and a short fuzz run. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
step() { printf '\n=== %s\n' "$*"; }

step "format"
cargo fmt --all --check
cargo fmt --manifest-path gpu-kernels/Cargo.toml --all --check

step "clippy (CPU build, cuda feature, kernel crate on the host)"
cargo clippy --all-targets -- -D warnings
cargo clippy --all-targets --features cuda -- -D warnings
cargo clippy --manifest-path gpu-kernels/Cargo.toml --all-targets -- -D warnings

step "kernel crate: lane and bit arithmetic on the CPU"
cargo test --manifest-path gpu-kernels/Cargo.toml

step "tests without the cuda feature"
cargo test

step "tests with the cuda feature (GPU tests run, or say skipped: no CUDA device)"
cargo test --features cuda

step "ptxas on every embedded PTX (sm_80 and sm_90, spills are errors)"
ptx_dir=$(mktemp -d)
cargo run --quiet --features cuda -- ptx --out "$ptx_dir" >/dev/null
for ptx in "$ptx_dir"/*.ptx; do
  for arch in sm_80 sm_90; do
    # --maxrregcount matches the cap the driver's JIT gets (JIT_MAX_REGISTERS).
    "$IBP_PTXAS" -arch="$arch" -v --maxrregcount=128 --warn-on-spills --warning-as-error "$ptx" -o /dev/null 2>"$ptx_dir/report.txt" \
      || { cat "$ptx_dir/report.txt"; echo "ptxas rejected $(basename "$ptx") for $arch"; exit 1; }
    printf '%s %s: ' "$(basename "$ptx")" "$arch"
    grep -E "Used [0-9]+ registers" "$ptx_dir/report.txt" | sed 's/.*Used/used/' | sort | uniq -c | tr '\n' ';'
    echo
  done
done
rm -rf "$ptx_dir"

step "decode step instructions per path (SASS of the probe kernels; budget 100 per 256 output bytes)"
IBP_STEP_BUDGET=100 bash scripts/sass.sh --steps

if [ -x scripts/fuzz-smoke.sh ]; then
  step "fuzz smoke run"
  bash scripts/fuzz-smoke.sh "${IBP_FUZZ_SECONDS:-20}"
fi
step "all checks passed"
