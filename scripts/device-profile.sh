#!/usr/bin/env bash
# On the GPU machine: Nsight Compute on the device-resident range decode of
# each table whose name contains one of the arguments (`ibp bench --section
# device --only NAME`), one launch each (the first timed one). Prints the
# issue, occupancy and stall figures; the reports and a per-instruction CSV
# (executed counts and stall samples per SASS line) go to $OUT in one tar.
# Usage: bash .device/device-profile.sh "Cora" "MiniLM word embeddings f32"
# (IBP_PROFILE_ARGS: more `ibp bench` flags, e.g. `--pairs off`;
# IBP_PROFILE_TAG: appended to the reports' names.)
set -uo pipefail
source .device/device-unpack.sh
export IBP_DATA_DIR="$PWD/.device/data"
out=${OUT:-/tmp/ibp-out}
work=$(mktemp -d)
sections=(SpeedOfLight Occupancy LaunchStats WarpStateStats SchedulerStats InstructionStats MemoryWorkloadAnalysis SourceCounters)
for t in "$@"; do
  tag=$(echo "$t${IBP_PROFILE_TAG:-}" | tr -dc 'a-zA-Z0-9' | cut -c1-24)
  # Launches 0-2 are the check and the two warm-ups.
  timeout 240 ncu --clock-control none --kernel-name regex:'^ibp_decode' --launch-skip 3 --launch-count 1 \
    "${sections[@]/#/--section=}" -o "$work/$tag" \
    .device/bin/ibp.bin bench --section device --no-sweep ${IBP_PROFILE_ARGS:-} --rows 20000 --only "$t" --out "$work/$tag-bench.md" >"$work/$tag-ncu.log" 2>&1
  echo "== $t (ncu rc=$?)"
  ncu -i "$work/$tag.ncu-rep" --page details >"$work/$tag-details.txt" 2>&1
  ncu -i "$work/$tag.ncu-rep" --page source --csv --print-source sass >"$work/$tag-sass.csv" 2>/dev/null
  grep -E "^ +(Duration|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Memory Throughput  )" "$work/$tag-details.txt"
done
tar -C "$work" -czf "$out/profiles.tgz" .
