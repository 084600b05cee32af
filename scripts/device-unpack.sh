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
# Real KV rows (stage-device.sh): bf16 for both KV stores, f16 and f32 for
# the float-coded store's capacity rows, made here from the staged text.
if [ -f .device/data/kv-text.md ] && [ -f .device/data/model.safetensors ]; then
  for dtype in bf16 f16 f32; do
    [ -f ".device/data/kv-$dtype.safetensors" ] && continue
    .device/bin/ibp.bin kv-data --text .device/data/kv-text.md --data-dir .device/data \
      --dtype "$dtype" -o ".device/data/kv-$dtype.safetensors" --force >/dev/null \
      || { echo "device-unpack: kv-data ($dtype) failed"; exit 1; }
  done
fi
