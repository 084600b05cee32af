#!/usr/bin/env bash
# Tests of the set-up's libcuda step (scripts/libcuda.py) and of the feature
# choice in scripts/env.sh, in a scratch folder: nothing in .tools changes.
#
#   scripts/test-setup.sh            offline cases (a checked .deb from
#                                    .tools/debs; fetched once if missing)
#   scripts/test-setup.sh --online   also Debian's pool and bookworm's signed
#                                    index over the network
#
# Each case prints "ok: …"; the first failure stops with "FAIL: …".
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
lib=$root/scripts/libcuda.py
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok: $*"; }
case $(uname -m) in
  x86_64) arch=amd64 tag=x86-64 ;;
  aarch64) arch=arm64 tag=AArch64 ;;
  *) echo "test-setup: skipped: Debian has no libcuda1 for $(uname -m)"; exit 0 ;;
esac
deb_sha=$(sed -n "s/^ *\"$arch\": \"\([0-9a-f]*\)\",/\1/p" "$lib")
[ -n "$deb_sha" ] || fail "no pinned SHA-256 for $arch in $lib"

# A checked libcuda1 .deb to work from.
cache=$root/.tools/debs
if ! ls "$cache"/libcuda1_*.deb >/dev/null 2>&1; then
  python3 "$lib" "$t/seed" --cache "$cache" >/dev/null
fi

# 1. No driver: Debian's library from the cache, extracted without dpkg-deb.
IBP_LDCONFIG=none python3 "$lib" "$t/d" --cache "$cache" --offline >"$t/out"
grep -q "Debian's libcuda1 .* (cached, SHA-256 checked)" "$t/out" || fail "no-driver case said: $(cat "$t/out")"
[ "$(readlink "$t/d/libcuda.so")" = libcuda.so.1 ] || fail "libcuda.so should link to libcuda.so.1"
real=$(readlink -f "$t/d/libcuda.so")
[[ $(basename "$real") =~ ^libcuda\.so\.[0-9]+\.[0-9]+ ]] || fail "libcuda.so.1 resolves to $real"
if command -v dpkg-deb >/dev/null; then
  dpkg-deb -x "$(ls "$cache"/libcuda1_*_$arch.deb | head -n 1)" "$t/x"
  cmp -s "$real" "$(find "$t/x" -name "$(basename "$real")" -type f)" || fail "extracted library differs from dpkg-deb's"
fi
ok "no driver: Debian's libcuda.so.1 from the checked cache ($(basename "$real"))"

# 2. A second run changes nothing and needs no network.
IBP_LDCONFIG=none python3 "$lib" "$t/d" --offline | grep -q "already there" || fail "second run is not a no-op"
ok "second run: already there, offline"

# 3. A driver appears: only a libcuda.so link to it is left (a Debian
#    libcuda.so.1 on LD_LIBRARY_PATH would shadow the driver's).
mkdir -p "$t/drv" && cp "$real" "$t/drv/libcuda.so.1"
cat >"$t/ldconfig" <<EOF
#!/bin/sh
printf '2 libs found\n'
printf '\tlibcuda.so.1 (libc6) => /nonexistent/libcuda.so.1\n'
printf '\tlibcuda.so.1 (libc6,$tag) => $t/drv/libcuda.so.1\n'
EOF
chmod +x "$t/ldconfig"
IBP_LDCONFIG=$t/ldconfig python3 "$lib" "$t/d" --offline | grep -q "the driver's $t/drv/libcuda.so.1" || fail "driver not used"
[ "$(ls "$t/d")" = libcuda.so ] || fail "left beside the driver's link: $(ls "$t/d")"
[ "$(readlink "$t/d/libcuda.so")" = "$t/drv/libcuda.so.1" ] || fail "libcuda.so does not link to the driver's library"
ok "driver: libcuda.so links to the driver's libcuda.so.1, nothing else left"

# 4. A corrupt cache offline: exit 3, what is there stays.
mkdir -p "$t/bad" && head -c 4096 /dev/urandom >"$t/bad/$(basename "$(ls "$cache"/libcuda1_*_$arch.deb | head -n 1)")"
rc=0; IBP_LDCONFIG=none python3 "$lib" "$t/d2" --cache "$t/bad" --offline 2>"$t/err" || rc=$?
[ "$rc" = 3 ] || fail "corrupt cache: exit $rc, want 3"
grep -q "SHA-256 mismatch" "$t/err" || fail "corrupt cache not named: $(cat "$t/err")"
ok "corrupt cache: refused (exit 3, SHA-256 mismatch)"

# 5. env.sh: the cuda feature only where there is a libcuda.so to link.
mkdir -p "$t/repo/scripts" "$t/repo/.tools/cuda/lib64"
cp scripts/env.sh "$t/repo/scripts/"
# features [CPU_ONLY]: IBP_FEATURES as env.sh sets it (whatever this shell's
# own IBP_CPU_ONLY is).
features() { (unset IBP_FEATURES; export IBP_CPU_ONLY="${1:-0}"; source "$t/repo/scripts/env.sh"; echo "$IBP_FEATURES"); }
[ -z "$(features)" ] || fail "no libcuda: IBP_FEATURES=$(features)"
ln -s "$t/drv/libcuda.so.1" "$t/repo/.tools/cuda/lib64/libcuda.so"
[ "$(features)" = cuda ] || fail "libcuda present: IBP_FEATURES=$(features)"
[ -z "$(features 1)" ] || fail "IBP_CPU_ONLY=1: IBP_FEATURES=$(features 1)"
ok "env.sh: no features without libcuda or with IBP_CPU_ONLY=1, cuda with it"

# 6. Nothing reads the OS codename (the old apt source broke on Ubuntu).
! grep -n "os-release\|VERSION_CODENAME" scripts/setup.sh "$lib" || fail "the set-up reads the OS codename"
ok "no OS codename read (Debian and Ubuntu take the same path)"

if [ "${1:-}" = --online ]; then
  IBP_LDCONFIG=none python3 "$lib" "$t/o1" --cache "$t/c" | grep -q "(SHA-256 checked)" || fail "pinned download"
  [ "$(sha256sum "$t"/c/*.deb | cut -d' ' -f1)" = "$deb_sha" ] || fail "pinned download: cached .deb has another SHA-256"
  ok "online: pinned libcuda1 from Debian's pool"
  IBP_LDCONFIG=none IBP_LIBCUDA_PIN=none python3 "$lib" "$t/o2" | grep -q "bookworm's signed index" || fail "signed index"
  [ -f "$t/o2/libcuda.so.1" ] || fail "signed index: no libcuda.so.1"
  ok "online: the pin gone, bookworm's current libcuda1 through the signed index (gpgv)"
  rc=0; IBP_LDCONFIG=none IBP_LIBCUDA_PIN=none IBP_DEBIAN_KEYRING=none python3 "$lib" "$t/o3" 2>"$t/err" || rc=$?
  [ "$rc" = 3 ] && grep -q "debian-archive-keyring" "$t/err" || fail "no keyring: exit $rc: $(cat "$t/err")"
  ok "online: no keyring: exit 3, says to install debian-archive-keyring"
fi
echo "test-setup: all passed"
