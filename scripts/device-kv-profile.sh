#!/usr/bin/env bash
# On the GPU machine: Nsight Compute on the KV bench's decode launches
# (`ibp_decode` over the store's pinned pages, the verification's and the
# timed gathers'): per launch, grid, time, sysmem sectors, PCIe bytes read,
# instructions, occupancy and issue. The CSV goes to $OUT.
# Usage: bash .device/device-kv-profile.sh
set -uo pipefail
source .device/device-unpack.sh
export IBP_DATA_DIR="$PWD/.device/data"
work=$(mktemp -d)
timeout 400 ncu --clock-control none --kernel-name regex:'^ibp_decode' --launch-count 60 \
  --metrics launch__grid_size,launch__block_size,gpu__time_duration.sum,lts__t_sectors_aperture_sysmem.sum,pcie__read_bytes.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active \
  --csv .device/bin/ibp.bin bench --section kv --out "$work/kv.md" >"${OUT:-/tmp}/ncu-kv.csv" 2>"$work/err.log"
echo "ncu rc=$?"; tail -2 "$work/err.log"
grep -E '^\| (gather)' "$work/kv.md"
python3 - "${OUT:-/tmp}/ncu-kv.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; idx = {k: h.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault(r[idx["ID"]], {})[r[idx["Metric Name"]]] = r[idx["Metric Value"]]
keys = ["launch__grid_size","gpu__time_duration.sum","lts__t_sectors_aperture_sysmem.sum","pcie__read_bytes.sum","smsp__inst_executed.sum","sm__warps_active.avg.pct_of_peak_sustained_active","smsp__issue_active.avg.pct_of_peak_sustained_active"]
print("id " + " ".join(k.split("__")[1][:18] for k in keys))
for i, m in per.items():
    print(i, " ".join(m.get(k, "-") for k in keys))
PY
