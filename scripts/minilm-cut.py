#!/usr/bin/env python3
"""Cut MiniLM's word-embedding table out of model.safetensors into a
safetensors file of its own (47 MB of the 91), which is all `ibp bench` and
the GPU tests read from it. The staging scripts use it to keep what they
carry to the GPU machine small.

Usage: minilm-cut.py SRC DST   (does nothing when SRC does not exist)
"""
import json
import os
import struct
import sys

NAME = "embeddings.word_embeddings.weight"


def main():
    src, dst = sys.argv[1], sys.argv[2]
    if not os.path.exists(src):
        return
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        t = hdr[NAME]
        a, b = t["data_offsets"]
        f.seek(8 + n + a)
        data = f.read(b - a)
    h = json.dumps({NAME: {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [0, len(data)]}}).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(dst, "wb") as o:
        o.write(struct.pack("<Q", len(h)))
        o.write(h)
        o.write(data)


if __name__ == "__main__":
    main()
