#!/usr/bin/env bash
# The README's quick start as a newcomer pastes it: a new crate beside a
# clone of this repository, with the README's `[dependencies]` line as its
# Cargo.toml and the README's first Rust example as its src/main.rs, built
# and run with the default (stable) toolchain, outside this repository's
# rust-toolchain.toml. Then checks that the library alone, as that crate
# gets it, compiles nothing of the command line or the benchmarks (issue 35:
# those are the workspace's packages ibp-cli and ibp-testdata): no clap,
# indicatif, plotters or criterion in its dependency tree, no libc of its own
# (memmap2 and libz-sys bring libc as their own dependency), and not ibp's
# `bench-hooks` feature (the benchmark harness, `ibp::gpu::bench`).
#
# When IBP_FEATURES (scripts/env.sh) contains `cuda`, the README's second
# Rust example of "Quick start", the GPU one, is built too (not run: CI has
# no GPU) in a second new crate whose dependency line is the first one with
# `features = ["cuda"]`. It is built with the stable toolchain and no
# toolchain file, like the CPU one: the library embeds its shipped PTX
# (gpu-kernels/ptx/), so no nightly and no nested kernel build is involved.
# Its build's seconds are printed (issue 35: a first build under 2 minutes
# on 2 cores once dependencies are downloaded; IBP_HOST_APP_FRESH=1 builds
# in an empty target folder to measure that). Then its binary is started with
# no LD_LIBRARY_PATH, as on a machine without the NVIDIA driver: it must
# fail with the dynamic loader's one line naming libcuda.so.1 (exit 127),
# the behaviour docs/GPU.md documents (cust links the driver at load time).
#
#   scripts/host-app.sh        (scripts/test.sh runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "host-app: FAIL: $*"; exit 1; }
# lean WHAT: the crate in the current folder, a host app of ibp, compiles
# none of the command line's or the benchmarks' code (see the top).
lean() {
  local tree direct feats
  tree=$(cargo "${stable[@]}" tree -e normal --prefix none --format '{p}')
  if grep -E '^(clap|indicatif|plotters|criterion|ibp-cli|ibp-testdata) ' <<<"$tree"; then
    fail "$1 compiles the command line's or the benchmarks' crates (above)"
  fi
  direct=$(cargo "${stable[@]}" tree -p ibp -e normal --depth 1 --prefix none --format '{p}')
  if grep -E '^libc ' <<<"$direct"; then
    fail "ibp, in $1, depends on libc itself (the command line's signal handling came back?)"
  fi
  feats=$(cargo "${stable[@]}" tree -e features -i ibp --prefix none | grep -o '^ibp feature "[^"]*"' | sort -u)
  if grep -F '"bench-hooks"' <<<"$feats"; then
    fail "$1 builds ibp with its benchmark harness (feature bench-hooks)"
  fi
  echo "host-app: $1: $(sort -u <<<"$tree" | wc -l) crates; no clap, indicatif, plotters or criterion; no libc of ibp's own; ibp's features: $(sed 's/^ibp feature //' <<<"$feats" | paste -sd ' ')"
}
# `+stable` where rustup has it (CI's default toolchain may be another).
stable=()
if rustup run stable cargo --version >/dev/null 2>&1; then stable=(+stable); fi

# The README's blocks: the first ```toml and the first two ```rust of "Quick start".
python3 - README.md "$t" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
quick = text.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"^```(\S*)\n(.*?)^```$", quick, re.S | re.M)
toml = next(b for lang, b in blocks if lang == "toml")
rust = [b for lang, b in blocks if lang == "rust"]
if len(rust) < 2:
    sys.exit("host-app: the README's Quick start needs two ```rust blocks (CPU, then GPU)")
open(sys.argv[2] + "/deps.toml", "w").write(toml)
open(sys.argv[2] + "/main.rs", "w").write(rust[0])
open(sys.argv[2] + "/gpu.rs", "w").write(rust[1])
EOF
grep -q '^ibp = ' "$t/deps.toml" || fail "the README's toml block has no ibp line"

# The clone, named as the README's path expects, beside the new crate.
ln -s "$root" "$t/ibp"
mkdir -p "$t/app/src"
{ printf '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2024"\n\n'; cat "$t/deps.toml"; } >"$t/app/Cargo.toml"
cp "$t/main.rs" "$t/app/src/main.rs"
# The same dependency versions as this repository's build.
cp Cargo.lock "$t/app/"
cd "$t/app"
# Q: why a target folder of its own? A: the default toolchain builds this
# crate, not the pinned nightly, so nothing could be shared with target/.
export CARGO_TARGET_DIR="$root/target/host-app"
echo "host-app: $(cargo --version) builds the README's quick start ($(grep '^ibp = ' "$t/deps.toml"))"
out=$(cargo run --quiet) || fail "the README's quick start does not build or run as pasted"
echo "host-app: it runs: $out"
lean "the quick start"

# The GPU quick start, when this machine builds the cuda feature.
case ",${IBP_FEATURES:-}," in
  *,cuda,*) ;;
  *) echo "host-app: the GPU quick start not built (IBP_FEATURES has no cuda)"; exit 0 ;;
esac
mkdir -p "$t/gpu-app/src"
{
  printf '[package]\nname = "gpu-app"\nversion = "0.1.0"\nedition = "2024"\n\n'
  sed 's/^ibp = { path = "\([^"]*\)" }$/ibp = { path = "\1", features = ["cuda"] }/' "$t/deps.toml"
} >"$t/gpu-app/Cargo.toml"
grep -q 'features = \["cuda"\]' "$t/gpu-app/Cargo.toml" || fail "could not add the cuda feature to the README's dependency line"
cp "$t/gpu.rs" "$t/gpu-app/src/main.rs"
cp "$root/Cargo.lock" "$t/gpu-app/"
cd "$t/gpu-app"
# Q: why target/host-app, shared with the CPU program above? A: CI's time:
# the build reuses the stable build of the library's dependencies. A nested
# kernel build coming back would still show: it needs the nightly, and this
# is stable. (A first build in an empty folder took 23-24 s on 2 cores,
# 2026-11-28; IBP_HOST_APP_FRESH=1 measures it again.)
if [ "${IBP_HOST_APP_FRESH:-0}" = 1 ]; then
  export CARGO_TARGET_DIR="$t/gpu-target"
fi
echo "host-app: $(cargo "${stable[@]}" --version) builds the README's GPU quick start (features = [\"cuda\"])"
start=$SECONDS
cargo "${stable[@]}" build --quiet || fail "the README's GPU quick start does not build on stable as pasted"
echo "host-app: the GPU quick start builds on stable in $((SECONDS - start)) s (not run here: no GPU)"
lean "the GPU quick start (feature cuda)"
# The benchmark harness is not compiled into the library with `cuda` alone:
# a program of the same crate that names it must not build (the error is
# rustc's "could not find `bench` in `gpu`").
mkdir -p src/bin
printf 'fn main() {\n    let _ = ibp::gpu::bench::measure_h2d_copy;\n}\n' >src/bin/bench-probe.rs
if probe=$(cargo "${stable[@]}" build --quiet --bin bench-probe 2>&1); then
  fail "a host app with feature cuda compiles ibp's benchmark harness (ibp::gpu::bench)"
fi
grep -q 'could not find `bench` in `gpu`' <<<"$probe" \
  || fail "the benchmark-harness probe failed for another reason: $probe"
rm -r src/bin
echo "host-app: ibp::gpu::bench is not in its build (feature bench-hooks off)"
# No driver: the binary must not start with anything but the loader's line.
set +e
err=$(env -u LD_LIBRARY_PATH "$CARGO_TARGET_DIR/debug/gpu-app" 2>&1 >/dev/null)
rc=$?
set -e
if [ "$rc" = 127 ] && [ "$(wc -l <<<"$err")" = 1 ] && grep -q 'libcuda\.so\.1' <<<"$err"; then
  echo "host-app: without the driver it exits 127 with one line: $err"
elif ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  echo "host-app: this machine has a system libcuda.so.1 (driver); the no-driver start not checked (exit $rc)"
else
  fail "without libcuda.so.1 the GPU app should exit 127 with the loader's one line; it exited $rc: $err"
fi
