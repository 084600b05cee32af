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
#
# Quiet when it passes: libFuzzer prints a line per new input (thousands),
# so each step's output goes to a log under target/fuzz-smoke/, and only a
# summary line per target is printed. A failing step prints the end of its
# log (IBP_FUZZ_TAIL lines, default 80) and the log's path.
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

logs=target/fuzz-smoke
mkdir -p "$logs"
tail_lines=${IBP_FUZZ_TAIL:-80}

# run LOG CMD...: run CMD with its output in LOG; on failure show the end of
# LOG and stop with CMD's exit status.
run() {
    local log=$1 rc=0
    shift
    "$@" >"$log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "fuzz-smoke: FAILED (exit $rc): $*"
        echo "---- last $tail_lines lines of $log"
        tail -n "$tail_lines" "$log"
        echo "----"
        exit "$rc"
    fi
}

echo "fuzz-smoke: building ${targets[*]} (log: $logs/build.log)"
# Q: why `--dev`? A: a smoke run needs the targets built and run, not
# optimised: the debug build (still with the sanitizer) takes CI's 2 cores
# about half the time of the release one. Longer runs: `cargo fuzz run`.
run "$logs/build.log" cargo fuzz build --dev

# Q: why all targets at once, each for longer? A: libFuzzer runs on one
# core; run one after another they left the other core idle. Together each
# gets SECONDS of a core's time (SECONDS × targets / cores of wall time),
# the same fuzzing in less time.
cores=$(nproc 2>/dev/null || echo 1)
[ "$cores" -gt "${#targets[@]}" ] && cores=${#targets[@]}
wall=$(( (seconds * ${#targets[@]} + cores - 1) / cores ))
pids=()
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    # The first corpus directory collects new inputs; the seeds are read only.
    ( run "$logs/$t.log" cargo fuzz run --dev "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$wall" -rss_limit_mb=2048 -max_len=8192 -timeout=10 -print_final_stats=1 ) &
    pids+=("$!")
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ "$rc" = 0 ] || exit 1
for t in "${targets[@]}"; do
    # -print_final_stats=1 ends the log with "stat::name: value" lines.
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -n 1)
    peak=$(sed -n 's/^stat::peak_rss_mb: *//p' "$logs/$t.log" | tail -n 1)
    echo "fuzz-smoke: $t: ${runs:-?} runs in ${wall}s beside the others, peak RSS ${peak:-?} MB, no crash (log: $logs/$t.log)"
done
echo "fuzz-smoke: ok (${#targets[@]} targets at once on $cores cores, ${seconds}s of a core each)"
