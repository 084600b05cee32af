#!/usr/bin/env bash
# Peak anonymous memory of `ibp compress` on a large generated input.
#
#   scripts/memory-scale.sh [GIB] [FORMAT] [LAYOUT] [IBP]
#
# GIB (default 20) of tensors in FORMAT (safetensors, the default, npy, npz
# or raw), compressed in LAYOUT (packed, the default, or fixed) by the ibp
# binary IBP (default: a release build of this checkout). The input is
# built from real rows, never random bytes: the rows of the embedded Cora
# features (data/cora-features.npz, 2708 x 1433 f32) and, when scripts/setup.sh
# fetched it, of MiniLM's word embeddings (.tools/data/model.safetensors,
# 30522 x 384 f32), repeated in order. It prints the peak RssAnon (anonymous
# memory: the heap, not the memory-mapped input or the page cache) polled
# every 10 ms from /proc/PID/status, and the wall time.
#
# Needs python3 with numpy, and about GIB free for the input plus the size
# of the output (GIB again for the fixed layout) in SCRATCH (default
# target/memory-scale); both files are deleted at the end unless KEEP=1
# (REUSE=1 then measures again on the kept input, another binary say).
# Not run by scripts/test.sh: cli/tests/memory_bound.rs checks the same bound on
# a few hundred MB in seconds.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
gib=${1:-20}
format=${2:-safetensors}
layout=${3:-packed}
ibp=${4:-}
scratch=${SCRATCH:-$root/target/memory-scale}
# shellcheck source=scripts/env.sh
source "$root/scripts/env.sh"
if [ -z "$ibp" ]; then
  (cd "$root" && cargo build --release -p ibp-cli --bin ibp)
  ibp=$root/target/release/ibp
fi
mkdir -p "$scratch"
input=$scratch/input.$format
output=$scratch/output.ibp
cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then rm -f "$input" "$output"; fi
}
trap cleanup EXIT

start=$(date +%s)
if [ "${REUSE:-0}" = 1 ] && [ -e "$input" ]; then
  echo "reusing $input (REUSE=1)"
else
echo "generating $gib GiB of $format in $input"
python3 - "$root" "$input" "$format" "$gib" <<'PY'
import json, os, struct, sys, zipfile
import numpy as np

root, path, fmt, gib = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
total = int(gib * (1 << 30))
sources = [("cora", np.load(os.path.join(root, "data/cora-features.npz"))["features"])]
minilm = os.path.join(os.environ.get("IBP_DATA_DIR", ""), "model.safetensors")
if os.path.exists(minilm):
    with open(minilm, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        e = header["embeddings.word_embeddings.weight"]
        a, b = e["data_offsets"]
        f.seek(8 + n + a)
        rows = np.frombuffer(f.read(b - a), dtype="<f4").reshape(e["shape"])
    sources.append(("minilm", rows))
if fmt in ("npy", "raw", "npz"):
    sources = sources[:1]  # one array (npz: one member, stored)
each = total // len(sources)
tensors = []
for name, rows in sources:
    n = max(1, each // rows[0].nbytes)
    tensors.append((name, rows, n))

def write_rows(f, rows, n):
    """Rows 0, 1, ... of `rows`, repeated, n in all, in blocks of ~64 MiB."""
    block = np.concatenate([rows] * max(1, (64 << 20) // rows.nbytes))
    left = n
    while left:
        k = min(left, len(block))
        f.write(memoryview(block[:k]))
        left -= k

if fmt == "safetensors":
    header, off = {}, 0
    for name, rows, n in tensors:
        size = n * rows[0].nbytes
        header[name] = {"dtype": "F32", "shape": [n, rows.shape[1]], "data_offsets": [off, off + size]}
        off += size
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, rows, n in tensors:
            write_rows(f, rows, n)
elif fmt == "raw":
    _, rows, n = tensors[0]
    with open(path, "wb") as f:
        write_rows(f, rows, n)
elif fmt in ("npy", "npz"):
    _, rows, n = tensors[0]
    def npy(f):
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (n, rows.shape[1])})
        write_rows(f, rows, n)
    if fmt == "npy":
        with open(path, "wb") as f:
            npy(f)
    else:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            with z.open("features.npy", "w", force_zip64=True) as f:
                npy(f)
else:
    sys.exit(f"unknown format {fmt}")
for name, rows, n in tensors:
    print(f"  {name}: {n} rows of {rows[0].nbytes} bytes (from {len(rows)} real rows)")
PY
fi
echo "  $(du -h "$input" | cut -f1) in $(($(date +%s) - start)) s"

raw_args=()
if [ "$format" = raw ]; then raw_args=(--dtype f32 --shape "$(python3 -c "import os;print(os.path.getsize('$input')//5732)"),1433"); fi
echo "compressing with $ibp ($layout layout)"
python3 - "$ibp" compress "$input" "${raw_args[@]}" -o "$output" --force --layout "$layout" <<'PY'
import subprocess, sys, time

def anon_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0

start = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
peak = 0
while p.poll() is None:
    peak = max(peak, anon_kib(p.pid))
    time.sleep(0.01)
err = p.stderr.read().decode()
secs = time.monotonic() - start
if p.returncode != 0:
    sys.exit(f"ibp failed ({p.returncode}): {err}")
print(f"  done in {secs:.0f} s")
print(f"peak RssAnon: {peak / 1024:.1f} MiB")
PY
echo "  input $(stat -c %s "$input") bytes, output $(stat -c %s "$output") bytes"
