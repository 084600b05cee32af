#!/usr/bin/env bash
# The main job on the embedded default, from a fresh machine: set-up, build,
# then a bit-invariance analysis of the Cora node features (on the GPU when
# one is usable, on the CPU otherwise). Extra arguments go to `ibp analyze`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
cargo run --quiet --release --features cuda -- analyze --candidates "$@"
