#!/usr/bin/env bash
# Fuzz smoke run: build the cargo-fuzz targets in fuzz/ and run each for a
# few seconds from its seeds, failing on the first crash, hang or leak.
#
#   scripts/fuzz-smoke.sh [SECONDS_PER_TARGET]    (default 20)
#
# Installs cargo-fuzz (cargo install --locked) when it is missing. Crashes
# land in fuzz/artifacts/<target>/; reproduce one with
#   cargo fuzz run <target> fuzz/artifacts/<target>/<file>
# and keep it as a regression test.
set -euo pipefail

seconds="${1:-20}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
    echo "usage: $0 [SECONDS_PER_TARGET]" >&2
    exit 2
fi

cd "$(dirname "$0")/.."

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

targets=(container_reader tensor_decoder input_readers)

echo "fuzz-smoke: building ${targets[*]}"
cargo fuzz build

for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    echo "fuzz-smoke: $t for ${seconds}s"
    # The first corpus directory collects new inputs; the seeds are read only.
    cargo fuzz run "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=8192 -timeout=10 -print_final_stats=1
done
echo "fuzz-smoke: ok (${#targets[@]} targets, ${seconds}s each)"
