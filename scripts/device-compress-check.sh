#!/usr/bin/env bash
# On the GPU machine: this build beside IBP_BASELINE (scripts/stage-device.sh):
# GPU tests, memcheck, compress bench (new, base, new), kv bench, Nsight
# Compute instruction counts of the encoder. Usage: bash .device/device-compress-check.sh
set -u
source .device/device-unpack.sh
export IBP_DATA_DIR=$PWD/.device/data IBP_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "base=$(cat .device/baseline-commit)"
mkdir -p /tmp/tests; OUT=/tmp/tests timeout 280 bash .device/device-run.sh tests > /tmp/tests.log 2>&1; echo "tests rc=$?"; grep -E "PASS|FAIL" /tmp/tests.log | awk '{print $2,$3}' | tr '\n' ' '; echo
grep -h "test result" /tmp/tests/test-*.log | awk '{print $4}' | tr '\n' ' '; echo
run() { local tag=$1 bin=$2; timeout 150 $bin bench --rows 100000 --section compress --stages --out $OUT/c-$tag.md >/tmp/c-$tag.log 2>&1; echo "$tag compress rc=$?"; }
run new .device/bin/ibp.bin
run base .device/bin/ibp-baseline.bin
run new2 .device/bin/ibp.bin
timeout 90 .device/bin/ibp.bin bench --section kv --out $OUT/kv-new.md >/tmp/kv-new.log 2>&1; echo "new kv rc=$?"
grep -E '^\| (append|gather)' $OUT/kv-new.md
timeout 150 compute-sanitizer --tool memcheck .device/bin/gpu_compress.test >/tmp/mc.log 2>&1; echo "memcheck gpu_compress rc=$?"; tail -1 /tmp/mc.log
timeout 100 compute-sanitizer --tool memcheck .device/bin/gpu_kv_store.test >/tmp/mc2.log 2>&1; echo "memcheck gpu_kv_store rc=$?"; tail -1 /tmp/mc2.log
for t in bf16 Cora; do
  timeout 100 ncu --clock-control none --kernel-name regex:"ibp_encode_c" --launch-count 1 --metrics smsp__inst_executed.sum,gpu__time_duration.sum .device/bin/ibp.bin bench --section compress --only "$t" --out /tmp/ncu.md >/tmp/ncu-$t.txt 2>&1
  echo "ncu new $t: $(grep -E 'inst_executed.sum|gpu__time_duration' /tmp/ncu-$t.txt | awk '{print $1,$(NF)}' | tr '\n' ' ')"
done
for f in new base new2; do echo "== $f"; grep -E "^\| (Cora|MiniLM|synthetic)" $OUT/c-$f.md | awk -F'|' 'NF>15 {print $2,"|",$7,"|",$10}'; grep -E "fit 1/16|encode \(packed\)|\| size \|" $OUT/c-$f.md | awk -F'|' '{print $2,$3,$4}'; done
