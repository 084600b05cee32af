#!/usr/bin/env python3
"""Provide the libcuda.so that ibp's `cuda` feature links against (cust).

    python3 scripts/libcuda.py DEST_DIR [--cache DIR] [--offline]

Puts libcuda.so into DEST_DIR (scripts/setup.sh: .tools/cuda/lib64) and
prints one line saying where it came from. Works on any Linux with Python 3
(Debian, Ubuntu, others): reads no release codename and needs no root.

- A machine with an NVIDIA driver: DEST_DIR/libcuda.so links to the
  driver's own libcuda.so.1 (found with `ldconfig -p`). Q: why a link when
  the library is installed? A: cust's build looks only in CUDA_LIBRARY_PATH,
  /usr/local/cuda* and /opt/cuda, and a driver without the toolkit (most
  Ubuntu machines) installs only libcuda.so.1 elsewhere.
- No driver: the real libcuda.so.1 from Debian 12 (bookworm)'s libcuda1
  package (non-free), whatever this machine's distribution. It links, and
  without a GPU CUDA then fails cleanly at run time. The package is checked
  against a SHA-256 pinned here; when Debian has replaced that version, the
  current one is found through bookworm's signed index (InRelease, checked
  with gpgv and Debian's archive keyring) and checked against the index.
- Neither possible (offline, no keyring): exit status 3 and what to do.
  The CPU path needs no CUDA at all; scripts/setup.sh goes on without it.

Environment, for tests: IBP_LDCONFIG (the ldconfig to run, "none" for no
driver), IBP_DEBIAN_MIRROR (default http://deb.debian.org/debian),
IBP_LIBCUDA_PIN ("none" skips the pinned version), IBP_DEBIAN_KEYRING (a
keyring file, "none" for no keyring).
"""

import hashlib
import io
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request

SUITE = "bookworm"
# libcuda1 in Debian 12, with the SHA-256 of its .deb from the suite's index.
PIN_VERSION = "535.261.03-1"
PIN_SHA256 = {
    "amd64": "de1e9ca34164a5983b3f752e6699cf1ad924790f1a843b7d582bab6f99206e1e",
    "arm64": "0190c83543ebd28b7fc286f5a62609de5b41e0bd2f33654eecbbac94990f8a86",
}
POOL = "pool/non-free/n/nvidia-graphics-drivers"
KEYRINGS = [
    "/usr/share/keyrings/debian-archive-keyring.gpg",
    "/usr/share/keyrings/debian-archive-bookworm-automatic.gpg",
]
ARCHES = {"x86_64": ("amd64", "x86-64"), "aarch64": ("arm64", "AArch64")}


class Unavailable(Exception):
    """No libcuda.so could be provided; the message says what to do."""


def say(msg):
    print(f"[libcuda] {msg}", file=sys.stderr)


def machine():
    m = os.uname().machine
    if m not in ARCHES:
        raise Unavailable(f"no libcuda1 for this machine ({m}): Debian ships amd64 and arm64")
    return ARCHES[m]


def driver_library(ldconfig_tag):
    """The driver's libcuda.so.1 for this architecture, or None."""
    ldconfig = os.environ.get("IBP_LDCONFIG")
    if ldconfig == "none":
        return None
    candidates = [ldconfig] if ldconfig else ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
    for exe in candidates:
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, check=False).stdout
        except OSError:
            continue
        for line in out.splitlines():
            # "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
            m = re.match(r"\s*libcuda\.so\.1 \(([^)]*)\) => (\S+)", line)
            if m and ldconfig_tag in m.group(1) and os.path.exists(m.group(2)):
                return m.group(2)
        return None
    return None


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise Unavailable(f"{url}: HTTP {e.code}") from e
    except (urllib.error.URLError, OSError) as e:
        raise Unavailable(f"{url}: {e}") from e


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def keyring():
    override = os.environ.get("IBP_DEBIAN_KEYRING")
    if override == "none":
        return None
    for k in [override] if override else KEYRINGS:
        if os.path.isfile(k):
            return k
    return None


def from_signed_index(mirror, arch):
    """(name, bytes) of bookworm's current libcuda1, through the signed index."""
    ring = keyring()
    if ring is None or shutil.which("gpgv") is None:
        raise Unavailable(
            f"libcuda1 {PIN_VERSION} is no longer in Debian's pool, and checking the current "
            "one needs gpgv and Debian's archive keyring: install them (Debian/Ubuntu: "
            "`sudo apt-get install gpgv debian-archive-keyring`) and re-run, or put a "
            "libcuda.so into .tools/cuda/lib64 yourself"
        )
    release = fetch(f"{mirror}/dists/{SUITE}/InRelease")
    if release is None:
        raise Unavailable(f"{mirror}/dists/{SUITE}/InRelease: not found")
    with tempfile.TemporaryDirectory() as tmp:
        signed = os.path.join(tmp, "InRelease")
        with open(signed, "wb") as f:
            f.write(release)
        plain = os.path.join(tmp, "Release")
        check = subprocess.run(
            ["gpgv", "--keyring", ring, "--output", plain, signed], capture_output=True, text=True
        )
        if check.returncode != 0:
            raise Unavailable(f"bookworm's InRelease failed its signature check:\n{check.stderr}")
        with open(plain, encoding="utf-8") as f:
            release_text = f.read()
    index = f"non-free/binary-{arch}/Packages.xz"
    m = re.search(r"^ ([0-9a-f]{64}) +\d+ " + re.escape(index) + "$", release_text.split("SHA256:", 1)[-1], re.M)
    if not m:
        raise Unavailable(f"bookworm's Release lists no {index}")
    packed = fetch(f"{mirror}/dists/{SUITE}/{index}")
    if packed is None or sha256(packed) != m.group(1):
        raise Unavailable(f"{index} does not match bookworm's signed Release")
    for stanza in lzma.decompress(packed).decode("utf-8").split("\n\n"):
        fields = dict(re.findall(r"^(\w[\w-]*): (.*)$", stanza, re.M))
        if fields.get("Package") == "libcuda1":
            deb = fetch(f"{mirror}/{fields['Filename']}")
            if deb is None or sha256(deb) != fields.get("SHA256"):
                raise Unavailable(f"{fields['Filename']} does not match bookworm's signed index")
            return f"libcuda1 {fields['Version']} (bookworm's signed index)", deb
    raise Unavailable(f"bookworm's {index} has no libcuda1")


def debian_package(arch, cache):
    """(description, bytes) of a checked libcuda1 .deb."""
    mirror = os.environ.get("IBP_DEBIAN_MIRROR", "http://deb.debian.org/debian").rstrip("/")
    name = f"libcuda1_{PIN_VERSION}_{arch}.deb"
    pinned = os.environ.get("IBP_LIBCUDA_PIN") != "none"
    cached = os.path.join(cache, name) if cache else None
    if pinned and cached and os.path.isfile(cached):
        with open(cached, "rb") as f:
            deb = f.read()
        if sha256(deb) == PIN_SHA256[arch]:
            return f"libcuda1 {PIN_VERSION} (cached, SHA-256 checked)", deb
        say(f"{cached}: SHA-256 mismatch, fetching it again")
    if os.environ.get("IBP_OFFLINE") == "1":
        raise Unavailable("offline (IBP_OFFLINE=1) and no checked libcuda1 in the cache")
    if pinned:
        deb = fetch(f"{mirror}/{POOL}/{name}")
        if deb is not None:
            if sha256(deb) != PIN_SHA256[arch]:
                raise Unavailable(f"{mirror}/{POOL}/{name}: SHA-256 differs from the pinned one")
            if cached:
                os.makedirs(cache, exist_ok=True)
                with open(cached, "wb") as f:
                    f.write(deb)
            return f"libcuda1 {PIN_VERSION} (SHA-256 checked)", deb
        say(f"libcuda1 {PIN_VERSION} is no longer in Debian's pool; looking up bookworm's current one")
    return from_signed_index(mirror, arch)


def deb_member(deb, want):
    """The bytes of the ar member whose name starts with `want`."""
    if deb[:8] != b"!<arch>\n":
        raise Unavailable("the libcuda1 package is not a .deb (ar) archive")
    pos = 8
    while pos + 60 <= len(deb):
        header = deb[pos : pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        if name.startswith(want):
            return name, deb[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)
    raise Unavailable(f"the libcuda1 package has no {want}* member")


def extract_libcuda(deb, dest):
    """Write libcuda.so.<version> from the .deb into dest; return its name.

    Q: why not dpkg-deb? A: it is missing outside Debian's family; a .deb is
    an ar archive holding a compressed tar, which Python reads itself.
    """
    name, data = deb_member(deb, "data.tar")
    if name.endswith(".zst"):
        raise Unavailable("the libcuda1 package's data is zstd-compressed, which Python cannot read")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for member in tar.getmembers():
            base = os.path.basename(member.name)
            if member.isfile() and re.fullmatch(r"libcuda\.so\.\d+\.\d+(\.\d+)?", base):
                src = tar.extractfile(member)
                if src is None:
                    break
                with open(os.path.join(dest, base), "wb") as out:
                    shutil.copyfileobj(src, out)
                return base
    raise Unavailable("the libcuda1 package holds no libcuda.so.<version>")


def link(dest, name, target):
    path = os.path.join(dest, name)
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(target, path)


def clear(dest):
    # Q: why clear the folder? A: scripts/env.sh puts it on LD_LIBRARY_PATH;
    # a Debian libcuda.so.1 left there from before a driver was installed
    # would shadow the driver's own library at run time.
    for f in os.listdir(dest):
        if f.startswith("libcuda.so"):
            os.remove(os.path.join(dest, f))


def provide(dest, cache):
    deb_arch, ldconfig_tag = machine()
    os.makedirs(dest, exist_ok=True)
    driver = driver_library(ldconfig_tag)
    if driver:
        clear(dest)
        link(dest, "libcuda.so", driver)
        return f"the driver's {driver}"
    present = os.path.join(dest, "libcuda.so.1")
    if os.path.isfile(present) and os.path.isfile(os.path.join(dest, "libcuda.so")):
        return f"Debian's libcuda1, already there ({os.path.realpath(present)})"
    # Fetched and checked before anything in dest is touched.
    what, deb = debian_package(deb_arch, cache)
    clear(dest)
    lib = extract_libcuda(deb, dest)
    link(dest, "libcuda.so.1", lib)
    link(dest, "libcuda.so", "libcuda.so.1")
    return f"Debian's {what}"


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    dest = argv[1]
    cache = None
    if "--cache" in argv:
        i = argv.index("--cache")
        if i + 1 >= len(argv):
            print("--cache needs a folder", file=sys.stderr)
            return 2
        cache = argv[i + 1]
    if "--offline" in argv:
        os.environ["IBP_OFFLINE"] = "1"
    try:
        print(f"libcuda.so in {dest}: {provide(dest, cache)}")
    except Unavailable as e:
        say(f"no libcuda.so: {e}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
