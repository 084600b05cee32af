#!/usr/bin/env bash
# The README's quick start as a newcomer pastes it: a new crate beside a
# clone of this repository, with the README's `[dependencies]` line as its
# Cargo.toml and the README's first Rust example as its src/main.rs, built
# and run with the default (stable) toolchain, outside this repository's
# rust-toolchain.toml. Then checks that the library alone, as that crate
# gets it, compiles no command-line dependency (clap, indicatif).
#
# When IBP_FEATURES (scripts/env.sh) contains `cuda`, the README's second
# Rust example of "Quick start", the GPU one, is built too (not run: CI has
# no GPU) in a second new crate whose dependency line is the first one with
# `features = ["cuda"]`. It is built with the pinned nightly for now, as the
# kernels need it (rust-toolchain.toml copied in, as docs/GPU.md says a host
# app does); stable comes with prebuilt PTX.
#
#   scripts/host-app.sh        (scripts/test.sh runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "host-app: FAIL: $*"; exit 1; }

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
tree=$(cargo tree -e normal --prefix none --format '{p}')
if grep -E '^(clap|indicatif) ' <<<"$tree"; then
  fail "a host app that depends on ibp compiles the command line's dependencies (above)"
fi
echo "host-app: the library alone: $(sort -u <<<"$tree" | wc -l) crates, no clap, no indicatif"

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
cp "$root/Cargo.lock" "$root/rust-toolchain.toml" "$t/gpu-app/"
cd "$t/gpu-app"
# Q: why this repository's target/ here, when the CPU crate has its own?
# A: this crate is built by the same pinned nightly, with the same lock file,
# so the ibp library and its kernels' nested PTX build (target/ibp-kernels-*)
# already built for the tests are reused instead of compiled again (minutes).
export CARGO_TARGET_DIR="$root/target"
echo "host-app: $(cargo --version) builds the README's GPU quick start (features = [\"cuda\"])"
cargo build --quiet || fail "the README's GPU quick start does not build as pasted"
echo "host-app: the GPU quick start builds (not run here)"
