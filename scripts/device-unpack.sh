#!/usr/bin/env bash
# Sourced by the device scripts on the GPU machine: unpacks what
# scripts/stage-device.sh packed to fit the 64 MiB carry limit (the binaries'
# xz archive; MiniLM's table, compressed by ibp and checked against its
# SHA-256). Safe to source again: what is unpacked already is kept.
if [ -f .device/bin.tar.xz ] && [ ! -d .device/bin ]; then
  tar xJf .device/bin.tar.xz -C .device || { echo "device-unpack: the binaries' archive does not unpack"; exit 1; }
fi
if [ -f .device/data/model.ibp ] && [ ! -f .device/data/model.safetensors ]; then
  .device/bin/ibp.bin decompress .device/data/model.ibp -o .device/data/model.safetensors >/dev/null \
    || { echo "device-unpack: MiniLM's table does not decompress"; exit 1; }
  if [ "$(sha256sum .device/data/model.safetensors | cut -d' ' -f1)" != "$(cat .device/data/model.sha256)" ]; then
    echo "device-unpack: MiniLM's table restored with the wrong hash"; exit 1
  fi
fi
# Real KV rows (stage-device.sh), compressed by ibp to fit the carry.
for f in .device/data/kv-*.ibp; do
  [ -f "$f" ] || continue
  st=${f%.ibp}.safetensors
  [ -f "$st" ] && continue
  .device/bin/ibp.bin decompress "$f" -o "$st" >/dev/null || { echo "device-unpack: $f does not decompress"; exit 1; }
  if [ "$(sha256sum "$st" | cut -d' ' -f1)" != "$(cat "${f%.ibp}.sha256")" ]; then
    echo "device-unpack: $st restored with the wrong hash"; exit 1
  fi
done
