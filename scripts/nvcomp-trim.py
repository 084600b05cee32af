#!/usr/bin/env python3
"""Shrink NVIDIA's libnvcomp.so for carrying to one known GPU: zero the
payloads of the embedded CUDA fatbin images (section .nv_fatbin) built for
other architectures, so that xz squeezes them to nothing. The file keeps its
size and layout; every image header stays, and the images for the kept
architectures are untouched, so the driver loads those as before.

Usage: nvcomp-trim.py IN OUT [ARCH ...]   (default ARCH: 90, i.e. sm_90:
H100 and H200). Prints what it kept and cleared.

Q: why not delete the other images?
A: deleting moves every later byte; offsets inside the library point into
the section. Zeroing changes no offset.
"""
import struct
import subprocess
import sys

FATBIN_MAGIC = 0xBA55ED50  # the fatbin container header
ELF_IMAGE, PTX_IMAGE = 2, 1


def section(path, name):
    out = subprocess.check_output(["readelf", "-S", "-W", path], text=True)
    for line in out.splitlines():
        if name in line:
            f = line.split("]", 1)[1].split()
            # Name Type Address Off Size ...
            return int(f[3], 16), int(f[4], 16)
    sys.exit(f"{path}: no {name} section")


def main():
    src, dst = sys.argv[1], sys.argv[2]
    keep = {int(a) for a in sys.argv[3:]} or {90}
    data = bytearray(open(src, "rb").read())
    off, size = section(src, ".nv_fatbin")
    pos, end = off, off + size
    kept = cleared = 0
    while pos + 16 <= end:
        magic, _ver, hsz, fsz = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned
            continue
        p, stop = pos + hsz, pos + hsz + fsz
        while p < stop:
            kind, _v, ehsz, psz = struct.unpack_from("<HHIQ", data, p)
            arch = struct.unpack_from("<I", data, p + 28)[0]
            if kind == ELF_IMAGE and arch in keep:
                kept += psz
            else:
                data[p + ehsz:p + ehsz + psz] = bytes(psz)
                cleared += psz
            p += ehsz + psz
        pos = stop
    if kept == 0:
        sys.exit(f"{src}: no image for sm_{sorted(keep)}; nothing would run")
    open(dst, "wb").write(data)
    print(f"nvcomp-trim: kept {kept >> 20} MiB of sm_{sorted(keep)} images, cleared {cleared >> 20} MiB")


if __name__ == "__main__":
    main()
