//! GPU decompression, bit for bit against the original tensors (and hence
//! the CPU decoder): every chunk size, tensors from 1 B to 64 KB with ragged
//! lengths, all-encoded / all-raw / mixed sets, both layouts, both sources
//! (pinned host memory read zero-copy, device memory), random gathers with
//! repeats, a poisoned output with guard bytes, corrupt input, and the real
//! Cora and MiniLM tables. Prints `skipped: no CUDA device` without a GPU
//! (a failure with `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod common;

use common::{Rng, gpu_or_skip};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::Rows;
use ibp::codebook::{ChunkSize, Codebook};
use ibp::gpu::copy_to_host_blocking;
use ibp::gpu::{DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, Mode, Request, Residency};
use ibp::layout::{LayoutOptions, compress_fixed, compress_packed};

const POISON: u8 = 0xA5;

/// Builds a GPU dataset from (possibly damaged) stored bytes.
type Uploader<'a> = Box<dyn Fn(&[u8]) -> GpuDataset + 'a>;
const GUARD: usize = 256;

#[derive(Clone, Copy, Debug)]
enum Mix {
    /// Every tensor matches the codebook closely: all stored encoded.
    Encoded,
    /// No invariant bits: every tensor stored raw.
    Raw,
    /// Half the tensors match, half are random.
    Mixed,
}

/// A dataset of `n` rows of `l` bytes and a codebook for it.
fn dataset(rng: &mut Rng, l: usize, n: usize, chunk: ChunkSize, mix: Mix) -> (Vec<u8>, Codebook) {
    let mask: Vec<u8> = match mix {
        Mix::Raw => vec![0; l],
        _ => (0..l)
            .map(|_| (rng.next() as u8) | (rng.next() as u8))
            .collect(), // ~75% invariant
    };
    let bitval: Vec<u8> = mask.iter().map(|m| m & rng.next() as u8).collect();
    let mut data = vec![0u8; l * n];
    for (i, row) in data.chunks_mut(l).enumerate() {
        let matching = match mix {
            Mix::Encoded => true,
            Mix::Raw => false,
            Mix::Mixed => i % 2 == 0,
        };
        for (j, b) in row.iter_mut().enumerate() {
            let r = rng.next() as u8;
            *b = if matching {
                (r & !mask[j]) | bitval[j]
            } else {
                r
            };
        }
        if matching && l > 8 {
            // A few chunks that do not match, so both chunk kinds occur.
            let j = (rng.next() as usize) % l;
            row[j] ^= mask[j];
        }
    }
    (
        data,
        Codebook::new(chunk, mask, bitval).expect("valid codebook"),
    )
}

fn stream() -> Stream {
    Stream::new(StreamFlags::NON_BLOCKING, None).expect("stream")
}

/// Decode `index` rows of `ds` on the GPU into a poisoned buffer with guard
/// bytes; check the guard and return the rows.
fn gpu_gather(
    gpu: &Gpu,
    ds: &GpuDataset,
    index: &[u64],
    opts: &DecodeOptions,
) -> ibp::Result<Vec<u8>> {
    let l = ds.row_bytes() as usize;
    let dec = Decoder::new(gpu, ds, opts)?;
    let mut status = DecodeStatus::new()?;
    let s = stream();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; index.len() * l + GUARD]).unwrap();
    assert!(!index.is_empty());
    let d_index = DeviceBuffer::from_slice(index).unwrap();
    dec.gather(gpu, &d_index, &mut out, &status, &s)?;
    s.synchronize().unwrap();
    let host = copy_to_host_blocking(&out).unwrap();
    assert!(
        host[index.len() * l..].iter().all(|&b| b == POISON),
        "decoder wrote past the output rows"
    );
    status.check_blocking()?;
    Ok(host[..index.len() * l].to_vec())
}

fn expected(data: &[u8], l: usize, index: &[u64]) -> Vec<u8> {
    index
        .iter()
        .flat_map(|&t| data[t as usize * l..(t as usize + 1) * l].iter().copied())
        .collect()
}

/// Every combination on one dataset: both layouts × both residencies, a
/// full range and a random gather with repeats.
fn check_all(gpu: &Gpu, rng: &mut Rng, data: &[u8], l: usize, cb: &Codebook, what: &str) {
    check_with(gpu, rng, data, l, cb, what, &DecodeOptions::default());
}

fn check_with(
    gpu: &Gpu,
    rng: &mut Rng,
    data: &[u8],
    l: usize,
    cb: &Codebook,
    what: &str,
    opts: &DecodeOptions,
) {
    let n = data.len() / l;
    let rows = Rows::new(data, l).unwrap();
    let packed = compress_packed(cb, rows, &LayoutOptions::default()).unwrap();
    let fixed = compress_fixed(cb, rows, &LayoutOptions::default()).unwrap();
    let all: Vec<u64> = (0..n as u64).collect();
    let gather: Vec<u64> = (0..(2 * n).min(3000))
        .map(|_| rng.next() % n as u64)
        .collect();
    for residency in [Residency::Pinned, Residency::Device] {
        let sets = [
            (
                "packed",
                GpuDataset::upload_packed(gpu, cb, &packed.view(), residency).unwrap(),
            ),
            (
                "fixed",
                GpuDataset::upload_fixed(gpu, cb, &fixed.view(), residency).unwrap(),
            ),
            (
                "fixed+lengths",
                GpuDataset::upload_fixed(gpu, cb, &fixed.view(), residency)
                    .unwrap()
                    .with_length_table(cb, &fixed.view())
                    .unwrap(),
            ),
        ];
        for (layout, ds) in &sets {
            for (name, index) in [("range", &all), ("gather", &gather)] {
                let got = gpu_gather(gpu, ds, index, opts)
                    .unwrap_or_else(|e| panic!("{what} {layout} {residency:?} {name}: {e}"));
                let want = expected(data, l, index);
                if got != want {
                    let row = got
                        .chunks(l)
                        .zip(want.chunks(l))
                        .position(|(a, b)| a != b)
                        .unwrap();
                    panic!(
                        "{what} {layout} {residency:?} {name}: output row {row} (tensor {}) differs",
                        index[row]
                    );
                }
            }
        }
    }
}

#[test]
fn decode_matches_original_for_every_chunk_size_length_and_mix() {
    let Some(gpu) = gpu_or_skip("decode_matches_original_for_every_chunk_size_length_and_mix")
    else {
        return;
    };
    let mut rng = Rng(0x1b9);
    let lengths = [
        1usize, 3, 4, 7, 33, 100, 256, 1000, 1024, 1531, 4096, 4099, 16384, 65536,
    ];
    for chunk in ChunkSize::ALL {
        for &l in &lengths {
            for mix in [Mix::Encoded, Mix::Raw, Mix::Mixed] {
                let n = (2_000_000 / l).clamp(3, 700);
                let (data, cb) = dataset(&mut rng, l, n, chunk, mix);
                check_all(
                    &gpu,
                    &mut rng,
                    &data,
                    l,
                    &cb,
                    &format!("C={} L={l} {mix:?}", chunk.bytes()),
                );
            }
        }
    }
    // Small tensors through streaming mode too (a ring too small for batch
    // mode forces it), so both kernels see every chunk size and mix, with
    // streaming mode's book in shared memory and read through L1.
    for shared in [true, false] {
        let streaming = DecodeOptions::default()
            .with_ring_bytes(256)
            .with_stream_book(shared);
        for chunk in ChunkSize::ALL {
            for &l in &[5usize, 130, 1000, 4096] {
                for mix in [Mix::Encoded, Mix::Raw, Mix::Mixed] {
                    let (data, cb) = dataset(&mut rng, l, 300, chunk, mix);
                    let what = format!(
                        "streaming (book in shared memory: {shared}) C={} L={l} {mix:?}",
                        chunk.bytes()
                    );
                    check_with(&gpu, &mut rng, &data, l, &cb, &what, &streaming);
                }
            }
        }
    }
}

#[test]
fn lane_decoder_matches_original_for_every_chunk_size_length_and_mix() {
    let Some(gpu) =
        gpu_or_skip("lane_decoder_matches_original_for_every_chunk_size_length_and_mix")
    else {
        return;
    };
    // A lane a tensor (`ibp_decode_lanes`) forced on: it serves the rows in
    // device memory; pinned rows still take the batch decoder.
    let lanes = DecodeOptions::default().with_lanes(true);
    let mut rng = Rng(0x1a9e5);
    for chunk in ChunkSize::ALL {
        for &l in &[1usize, 3, 4, 7, 33, 100, 256, 768, 1000, 1531, 4099] {
            for mix in [Mix::Encoded, Mix::Raw, Mix::Mixed] {
                let n = (2_000_000 / l).clamp(3, 900);
                let (data, cb) = dataset(&mut rng, l, n, chunk, mix);
                let what = format!("lanes C={} L={l} {mix:?}", chunk.bytes());
                check_with(&gpu, &mut rng, &data, l, &cb, &what, &lanes);
            }
        }
        for kind in 0..3 {
            let l = 1536;
            let data = class_rows(&mut rng, kind, 300, l);
            let rows = Rows::new(&data, l).unwrap();
            let opts =
                ibp::fit::FitOptions::default().with_chunk(ibp::fit::ChunkChoice::Fixed(chunk));
            let cb = ibp::fit::fit(rows, &opts).unwrap().codebook;
            let what = format!("lanes classes C={} kind {kind}", chunk.bytes());
            check_with(&gpu, &mut rng, &data, l, &cb, &what, &lanes);
        }
    }
}

/// Rows whose codebooks put every step class of the batch decoder to work:
/// f32 values with a narrow exponent range (free bits in two runs), sparse
/// rows (columns without free bits, Cora's shape), random patterns (three
/// or more runs: the general path), and fixed bits repeated in every byte
/// (kind 3, fp8-like) or every 16-bit half (kind 4, f16-like): the
/// periodic kernel by the byte (2- and 4-byte chunks) and by the half (4).
fn class_rows(rng: &mut Rng, kind: u32, n: usize, l: usize) -> Vec<u8> {
    (0..n * l.div_ceil(4))
        .flat_map(|_| {
            let x = rng.next();
            let v: u32 = match kind {
                0 if x.is_multiple_of(11) => x as u32,
                0 => (1.0f32 + (x >> 40) as f32 / 16_777_216.0).to_bits() | (x as u32 & 1) << 31,
                1 if x.is_multiple_of(53) => (x >> 3) as u32,
                1 => 0,
                3 if x.is_multiple_of(29) => (x >> 7) as u32,
                3 => (x as u32 & !0x6060_6060) | 0x2020_2020,
                4 if x.is_multiple_of(29) => (x >> 7) as u32,
                4 => (x as u32 & !0x7000_7000) | 0x2000_2000,
                _ => (x as u32 & 0x0f0f_3c3c) | 0x4000_0001,
            };
            v.to_le_bytes()
        })
        .take(n * l)
        .collect()
}

#[test]
fn decode_fast_paths_on_and_off_give_the_same_bytes() {
    let Some(gpu) = gpu_or_skip("decode_fast_paths_on_and_off_give_the_same_bytes") else {
        return;
    };
    let mut rng = Rng(0xfa57);
    let on = DecodeOptions::default();
    let off = DecodeOptions::default().with_fast_paths(false);
    // Four tensors a warp wherever the uniform and periodic kernels take
    // the book, at any launch size (the rule's launches of these few rows
    // keep the pairs).
    let quads = DecodeOptions::default().with_quads(true);
    // The same on one SM in blocks of one warp: many tensors a warp, so
    // sets of four different tensors, and short sets at a window's end.
    let quads_few_warps = quads.clone().with_max_sms(1).with_warps_per_block(1);
    for chunk in ChunkSize::ALL {
        for &l in &[4usize, 100, 384, 600, 1024, 1531, 5732] {
            for kind in 0..5 {
                let n = (1_000_000 / l).clamp(8, 400);
                let data = class_rows(&mut rng, kind, n, l);
                let rows = Rows::new(&data, l).unwrap();
                let opts =
                    ibp::fit::FitOptions::default().with_chunk(ibp::fit::ChunkChoice::Fixed(chunk));
                let cb = ibp::fit::fit(rows, &opts).unwrap().codebook;
                for (fast, o) in [
                    ("on", &on),
                    ("off", &off),
                    ("on, quads", &quads),
                    ("on, quads, one SM", &quads_few_warps),
                ] {
                    let what = format!("fast paths {fast} C={} L={l} kind {kind}", chunk.bytes());
                    check_with(&gpu, &mut rng, &data, l, &cb, &what, o);
                }
            }
        }
    }
}

#[test]
fn decode_options_change_geometry_not_results() {
    let Some(gpu) = gpu_or_skip("decode_options_change_geometry_not_results") else {
        return;
    };
    let mut rng = Rng(77);
    let (l, n) = (5732, 400);
    let (data, cb) = dataset(&mut rng, l, n, ChunkSize::try_from(4).unwrap(), Mix::Mixed);
    let packed =
        compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
    let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
    let index: Vec<u64> = (0..n as u64).rev().collect();
    let ds_dec = |o: &DecodeOptions| Decoder::new(&gpu, &ds, o).unwrap().is_batch_mode();
    assert!(
        ds_dec(&DecodeOptions::default()),
        "5732-byte tensors decode in batch mode by default"
    );
    assert!(
        !ds_dec(&DecodeOptions::default().with_ring_bytes(512)),
        "a 512-byte ring forces streaming mode"
    );
    for opts in [
        DecodeOptions::default().with_max_sms(3),
        DecodeOptions::default().with_ring_bytes(512), // streaming mode: tensor larger than the ring
        DecodeOptions::default()
            .with_ring_bytes(512)
            .with_stream_book(false),
        DecodeOptions::default().with_warps_per_block(1),
        DecodeOptions::default()
            .with_ring_bytes(16384)
            .with_warps_per_block(4),
        DecodeOptions::default().with_fetch(ibp::gpu::Fetch::CpAsync),
        DecodeOptions::default()
            .with_fetch(ibp::gpu::Fetch::LoadStore)
            .with_ring_bytes(512),
    ] {
        assert_eq!(
            gpu_gather(&gpu, &ds, &index, &opts).unwrap(),
            expected(&data, l, &index),
            "{opts:?}"
        );
    }
}

#[test]
fn corrupt_tensors_are_reported_and_zeroed_without_stray_writes() {
    let Some(gpu) = gpu_or_skip("corrupt_tensors_are_reported_and_zeroed_without_stray_writes")
    else {
        return;
    };
    let mut rng = Rng(4242);
    let (l, n) = (1024, 64);
    let (data, cb) = dataset(
        &mut rng,
        l,
        n,
        ChunkSize::try_from(4).unwrap(),
        Mix::Encoded,
    );
    let rows = Rows::new(&data, l).unwrap();
    let mut found = 0;
    for (layout, opts) in [
        ("packed", DecodeOptions::default()),
        ("fixed", DecodeOptions::default()),
        ("packed", DecodeOptions::default().with_lanes(true)),
        ("fixed", DecodeOptions::default().with_lanes(true)),
    ] {
        for trial in 0..40 {
            let (mut bytes, ds_of): (Vec<u8>, Uploader) = if layout == "packed" {
                let p = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
                let (flags, offsets, r) = (p.flags.clone(), p.offsets.clone(), p.rows);
                let cb2 = cb.clone();
                let g = &gpu;
                (
                    p.payload.clone(),
                    Box::new(move |payload: &[u8]| {
                        let v = ibp::layout::PackedRef::new(
                            l,
                            r,
                            &flags,
                            std::borrow::Cow::Borrowed(&offsets),
                            payload,
                        )
                        .unwrap();
                        GpuDataset::upload_packed(g, &cb2, &v, Residency::Device).unwrap()
                    }),
                )
            } else {
                let f = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
                let (flags, r) = (f.flags.clone(), f.rows);
                let cb2 = cb.clone();
                let g = &gpu;
                (
                    f.slots.clone(),
                    Box::new(move |slots: &[u8]| {
                        let v = ibp::layout::FixedStrideRef::new(l, r, &flags, slots).unwrap();
                        GpuDataset::upload_fixed(g, &cb2, &v, Residency::Device).unwrap()
                    }),
                )
            };
            // Damage the participation bits of one tensor (the decoder's
            // length and offsets come from them).
            let victim = rng.next() as usize % n;
            let start = if layout == "packed" {
                compress_packed(&cb, rows, &LayoutOptions::default())
                    .unwrap()
                    .offsets[victim] as usize
            } else {
                victim * l
            };
            let bit = rng.next() as usize % 256;
            bytes[start + bit / 8] ^= 1 << (bit % 8);
            let ds = ds_of(&bytes);
            let index: Vec<u64> = (0..n as u64).collect();
            match gpu_gather(&gpu, &ds, &index, &opts) {
                Ok(out) => {
                    // The flip landed where it changes only the value of a
                    // raw chunk's bits: then only that tensor may differ.
                    let want = expected(&data, l, &index);
                    for (r, (a, b)) in out.chunks(l).zip(want.chunks(l)).enumerate() {
                        assert!(
                            a == b || r == victim,
                            "{layout} {:?} trial {trial}: row {r} changed",
                            opts.lanes
                        );
                    }
                }
                Err(e) => {
                    assert_eq!(
                        e.kind(),
                        ibp::ErrorKind::Corrupt,
                        "{layout} {:?} trial {trial}: {e}",
                        opts.lanes
                    );
                    found += 1;
                }
            }
        }
    }
    assert!(
        found > 20,
        "only {found} of 160 damaged datasets were reported corrupt"
    );
    // An index out of range is reported, not read.
    let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Device).unwrap();
    for opts in [
        DecodeOptions::default(),
        DecodeOptions::default().with_lanes(true),
    ] {
        let err = gpu_gather(&gpu, &ds, &[0, n as u64 + 5, 1], &opts).unwrap_err();
        assert_eq!(err.kind(), ibp::ErrorKind::InvalidArgument);
    }
}

#[test]
fn real_tables_decode_bit_exactly() {
    let Some(gpu) = gpu_or_skip("real_tables_decode_bit_exactly") else {
        return;
    };
    let mut rng = Rng(1);
    let mut ran = 0;
    for (name, data, l) in common::real_tables("real_tables_decode_bit_exactly") {
        let fit = ibp::fit::fit(Rows::new(&data, l).unwrap(), &Default::default()).unwrap();
        check_all(&gpu, &mut rng, &data, l, &fit.codebook, &name);
        ran += 1;
    }
    assert!(ran >= 1);
}

#[test]
fn dma_range_path_matches_original_and_checks_its_inputs() {
    let Some(gpu) = gpu_or_skip("dma_range_path_matches_original_and_checks_its_inputs") else {
        return;
    };
    let mut rng = Rng(909);
    for (l, n, chunk, mix, piece) in [
        (1024usize, 3000usize, 4u32, Mix::Mixed, 64 * 1024usize),
        (256, 5000, 2, Mix::Encoded, 4096),
        (5732, 400, 8, Mix::Encoded, 1 << 20),
        (100, 2000, 1, Mix::Raw, 300),
    ] {
        let (data, cb) = dataset(&mut rng, l, n, ChunkSize::try_from(chunk).unwrap(), mix);
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
        let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
        let mut scratch = ibp::gpu::DmaScratch::new(piece).unwrap();
        let mut status = DecodeStatus::new().unwrap();
        let s = stream();
        for (first, count) in [(0u64, n as u64), (7, n as u64 / 3), (n as u64 - 1, 1)] {
            let rows = count as usize;
            let mut out = DeviceBuffer::from_slice(&vec![POISON; rows * l + GUARD]).unwrap();
            // Twice on the same stream and scratch: the second call must wait
            // for the first one's decode before reusing the buffers.
            for _ in 0..2 {
                dec.range_dma(&gpu, first, count, &mut out, &status, &mut scratch, &s)
                    .unwrap();
            }
            s.synchronize().unwrap();
            status.check_blocking().unwrap();
            let host = copy_to_host_blocking(&out).unwrap();
            let f = first as usize;
            assert!(
                host[rows * l..].iter().all(|&b| b == POISON),
                "L={l}: wrote past the rows"
            );
            assert!(
                host[..rows * l] == data[f * l..(f + rows) * l],
                "L={l} rows {first}+{count}: DMA path differs"
            );
        }
    }
    // The auto rule: large tensors go by DMA, small stored ones zero-copy.
    let mut pick = |l: usize, mix: Mix| {
        let (data, cb) = dataset(&mut rng, l, 64, ChunkSize::try_from(4).unwrap(), mix);
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
        Decoder::new(&gpu, &ds, &DecodeOptions::default())
            .unwrap()
            .prefers_dma()
    };
    assert!(pick(4096, Mix::Encoded));
    assert!(!pick(256, Mix::Encoded));
    // Inputs the DMA path cannot serve are refused, not mishandled.
    let (data, cb) = dataset(
        &mut rng,
        512,
        100,
        ChunkSize::try_from(4).unwrap(),
        Mix::Mixed,
    );
    let packed = compress_packed(
        &cb,
        Rows::new(&data, 512).unwrap(),
        &LayoutOptions::default(),
    )
    .unwrap();
    let dev = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Device).unwrap();
    let dec = Decoder::new(&gpu, &dev, &DecodeOptions::default()).unwrap();
    let mut scratch = ibp::gpu::DmaScratch::new(1 << 16).unwrap();
    let status = DecodeStatus::new().unwrap();
    let mut out = DeviceBuffer::<u8>::zeroed(100 * 512).unwrap();
    let s = stream();
    let e = dec
        .range_dma(&gpu, 0, 100, &mut out, &status, &mut scratch, &s)
        .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
    let pinned = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
    let dec = Decoder::new(&gpu, &pinned, &DecodeOptions::default()).unwrap();
    let e = dec
        .range_dma(&gpu, 90, 20, &mut out, &status, &mut scratch, &s)
        .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
    let mut tiny = ibp::gpu::DmaScratch::new(8).unwrap();
    let e = dec
        .range_dma(&gpu, 0, 100, &mut out, &status, &mut tiny, &s)
        .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
}

#[test]
fn range_auto_calibrates_once_and_decodes_like_range() {
    let Some(gpu) = gpu_or_skip("range_auto_calibrates_once_and_decodes_like_range") else {
        return;
    };
    use ibp::gpu::{DmaScratch, RangePath};
    let mut rng = Rng(3131);
    // Small pieces, so that the sample spans several of them and stops
    // short of the range (8 pieces of 64 KB; the tables store far more).
    let piece = 64 * 1024;
    for (l, n, chunk, mix) in [
        (4096usize, 2000usize, 4u32, Mix::Encoded),
        (256, 20000, 2, Mix::Mixed),
        (1536, 3000, 8, Mix::Encoded),
    ] {
        let (data, cb) = dataset(&mut rng, l, n, ChunkSize::try_from(chunk).unwrap(), mix);
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
        let s = stream();
        let mut status = DecodeStatus::new().unwrap();
        let mut scratch = DmaScratch::new(piece).unwrap();
        let (first, count) = (5u64, n as u64 - 9);
        let rows = count as usize;
        let want = &data[5 * l..(5 + rows) * l];
        // range_auto's first call calibrates, then decodes by the winner.
        let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
        assert_eq!(dec.range_calibration(), None);
        let mut out = DeviceBuffer::from_slice(&vec![POISON; rows * l + GUARD]).unwrap();
        dec.range_auto(
            &gpu,
            first,
            count,
            &mut out,
            &status,
            Some(&mut scratch),
            &s,
        )
        .unwrap();
        s.synchronize().unwrap();
        status.check_blocking().unwrap();
        let host = copy_to_host_blocking(&out).unwrap();
        assert!(host[..rows * l] == *want, "L={l}: range_auto differs");
        assert!(
            host[rows * l..].iter().all(|&b| b == POISON),
            "L={l}: wrote past the rows"
        );
        let c = dec
            .range_calibration()
            .expect("the first range_auto calibrates");
        let (zc, dma) = (c.zero_copy_seconds.unwrap(), c.dma_seconds.unwrap());
        assert!(zc > 0.0 && dma > 0.0, "L={l}: timings {zc} {dma}");
        assert_eq!(
            c.path == RangePath::Dma,
            dma < zc,
            "L={l}: not the faster path"
        );
        assert_eq!(dec.prefers_dma(), c.path == RangePath::Dma);
        assert!(
            c.sample_rows >= 1 && c.sample_rows < count,
            "L={l}: sample {}",
            c.sample_rows
        );
        // Later calls keep it, and decode bit for bit as range does.
        let mut plain = DeviceBuffer::from_slice(&vec![POISON; rows * l + GUARD]).unwrap();
        dec.range(&gpu, first, count, &mut plain, &status, &s)
            .unwrap();
        let mut out = DeviceBuffer::from_slice(&vec![POISON; rows * l + GUARD]).unwrap();
        dec.range_auto(
            &gpu,
            first,
            count,
            &mut out,
            &status,
            Some(&mut scratch),
            &s,
        )
        .unwrap();
        s.synchronize().unwrap();
        status.check_blocking().unwrap();
        assert_eq!(dec.range_calibration(), Some(c));
        assert!(copy_to_host_blocking(&out).unwrap() == copy_to_host_blocking(&plain).unwrap());
        // Calibrating on demand, twice: each a full result, kept.
        for _ in 0..2 {
            let again = dec
                .calibrate_range_blocking(&gpu, first, count, &mut out, &status, &mut scratch, &s)
                .unwrap();
            assert_eq!(again.sample_rows, c.sample_rows);
            assert!(again.zero_copy_seconds.is_some() && again.dma_seconds.is_some());
            assert_eq!(dec.range_calibration(), Some(again));
            assert_eq!(dec.prefers_dma(), again.path == RangePath::Dma);
            s.synchronize().unwrap();
            status.check_blocking().unwrap();
        }
        // Without a scratch: zero-copy, nothing timed.
        let fresh = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
        fresh
            .range_auto(&gpu, first, count, &mut out, &status, None, &s)
            .unwrap();
        s.synchronize().unwrap();
        assert_eq!(fresh.range_calibration(), None);
        assert!(copy_to_host_blocking(&out).unwrap()[..rows * l] == *want);
    }
    // A device-resident dataset is never timed: zero-copy, untimed.
    let (data, cb) = dataset(
        &mut rng,
        512,
        300,
        ChunkSize::try_from(4).unwrap(),
        Mix::Mixed,
    );
    let packed = compress_packed(
        &cb,
        Rows::new(&data, 512).unwrap(),
        &LayoutOptions::default(),
    )
    .unwrap();
    let dev = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Device).unwrap();
    let dec = Decoder::new(&gpu, &dev, &DecodeOptions::default()).unwrap();
    let mut scratch = DmaScratch::new(piece).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let mut out = DeviceBuffer::<u8>::zeroed(300 * 512).unwrap();
    let s = stream();
    dec.range_auto(&gpu, 0, 300, &mut out, &status, Some(&mut scratch), &s)
        .unwrap();
    s.synchronize().unwrap();
    status.check_blocking().unwrap();
    assert!(copy_to_host_blocking(&out).unwrap() == data);
    assert_eq!(dec.range_calibration(), None);
    assert!(!dec.prefers_dma());
    let c = dec
        .calibrate_range_blocking(&gpu, 0, 300, &mut out, &status, &mut scratch, &s)
        .unwrap();
    assert_eq!(
        (c.path, c.sample_rows, c.dma_seconds),
        (RangePath::ZeroCopy, 0, None)
    );
    // A pinned dataset, calibrated over rows it does not hold: refused.
    let pinned = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
    let dec = Decoder::new(&gpu, &pinned, &DecodeOptions::default()).unwrap();
    for (first, count) in [(290u64, 20u64), (0, 0)] {
        let e = dec
            .calibrate_range_blocking(&gpu, first, count, &mut out, &status, &mut scratch, &s)
            .unwrap_err();
        assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
    }
    assert_eq!(dec.range_calibration(), None);
}

#[test]
fn gathers_take_u32_indices_and_strided_output() {
    let Some(gpu) = gpu_or_skip("gathers_take_u32_indices_and_strided_output") else {
        return;
    };
    let mut rng = Rng(0x5711);
    for (l, chunk) in [(100usize, 4u32), (1531, 2), (5732, 8), (9000, 4)] {
        let n = 200;
        let (data, cb) = dataset(
            &mut rng,
            l,
            n,
            ChunkSize::try_from(chunk).unwrap(),
            Mix::Mixed,
        );
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        for residency in [Residency::Pinned, Residency::Device] {
            let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), residency).unwrap();
            let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
            let ix: Vec<u32> = (0..300).map(|_| (rng.next() % n as u64) as u32).collect();
            let stride = l + 13;
            let len = (ix.len() - 1) * stride + l;
            let mut out = DeviceBuffer::from_slice(&vec![POISON; len + GUARD]).unwrap();
            let d_ix = DeviceBuffer::from_slice(&ix).unwrap();
            let mut status = DecodeStatus::new().unwrap();
            let s = stream();
            dec.gather_strided(&gpu, &d_ix, &mut out, stride, &status, &s)
                .unwrap();
            s.synchronize().unwrap();
            status.check_blocking().unwrap();
            let host = copy_to_host_blocking(&out).unwrap();
            for (i, &t) in ix.iter().enumerate() {
                let t = t as usize;
                assert!(
                    host[i * stride..i * stride + l] == data[t * l..(t + 1) * l],
                    "L={l} {residency:?}: row {i}"
                );
                let gap_end = if i + 1 < ix.len() {
                    (i + 1) * stride
                } else {
                    len + GUARD
                };
                assert!(
                    host[i * stride + l..gap_end].iter().all(|&b| b == POISON),
                    "L={l} {residency:?}: wrote between rows after row {i}"
                );
            }
            // A stride shorter than a row is refused.
            let e = dec
                .gather_strided(&gpu, &d_ix, &mut out, l - 1, &status, &s)
                .unwrap_err();
            assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
        }
    }
}

#[path = "gpu_decode/dma_gather.rs"]
mod dma_gather;

#[path = "gpu_decode/staged.rs"]
mod staged;

/// `Decoder::enqueue` with each kind of request: a range from the middle, a
/// u32 gather into strided rows (the bytes between rows untouched), and the
/// ideal read (it needs stored lengths: refused on fixed-stride rows without
/// a length table, and it writes no more than its rows).
#[test]
fn one_request_type_covers_ranges_gathers_strides_and_the_ideal_read() {
    let Some(gpu) =
        gpu_or_skip("one_request_type_covers_ranges_gathers_strides_and_the_ideal_read")
    else {
        return;
    };
    let mut rng = Rng(0x5e9);
    let (l, n) = (1000usize, 400usize);
    let (data, cb) = dataset(&mut rng, l, n, ChunkSize::Four, Mix::Mixed);
    let rows = Rows::new(&data, l).unwrap();
    let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
    let s = stream();
    for residency in [Residency::Pinned, Residency::Device] {
        let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), residency).unwrap();
        let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
        let mut status = DecodeStatus::new().unwrap();
        // A range from the middle.
        let (first, count) = (123usize, 200usize);
        let mut out = DeviceBuffer::from_slice(&vec![POISON; count * l + GUARD]).unwrap();
        let req = Request::range(first as u64, count as u64);
        dec.enqueue(&gpu, &req, &mut out, &status, &s).unwrap();
        s.synchronize().unwrap();
        status.check_blocking().unwrap();
        let host = copy_to_host_blocking(&out).unwrap();
        assert!(
            host[..count * l] == data[first * l..(first + count) * l],
            "{residency:?} range"
        );
        assert!(
            host[count * l..].iter().all(|&b| b == POISON),
            "{residency:?} range overran"
        );
        // A u32 gather into rows 1040 bytes apart.
        let stride = l + 40;
        let index: Vec<u32> = (0..300).map(|_| (rng.next() % n as u64) as u32).collect();
        let d_index = DeviceBuffer::from_slice(&index).unwrap();
        let mut out = DeviceBuffer::from_slice(&vec![POISON; index.len() * stride]).unwrap();
        let req = Request::gather(&d_index).with_out_stride(stride);
        dec.enqueue(&gpu, &req, &mut out, &status, &s).unwrap();
        s.synchronize().unwrap();
        status.check_blocking().unwrap();
        let host = copy_to_host_blocking(&out).unwrap();
        for (i, &t) in index.iter().enumerate() {
            let row = &host[i * stride..][..stride];
            assert!(
                row[..l] == data[t as usize * l..][..l],
                "{residency:?} strided row {i}"
            );
            assert!(
                row[l..].iter().all(|&b| b == POISON),
                "{residency:?} gap {i} written"
            );
        }
        // The ideal read of the packed rows writes exactly its rows.
        let mut out = DeviceBuffer::from_slice(&vec![POISON; count * l + GUARD]).unwrap();
        let req = Request::range(0, count as u64).with_mode(Mode::Ideal);
        dec.enqueue(&gpu, &req, &mut out, &status, &s).unwrap();
        s.synchronize().unwrap();
        status.check_blocking().unwrap();
        let host = copy_to_host_blocking(&out).unwrap();
        assert!(
            host[count * l..].iter().all(|&b| b == POISON),
            "{residency:?} ideal overran"
        );
        // Fixed-stride rows without a length table have no ideal read.
        let fx = GpuDataset::upload_fixed(&gpu, &cb, &fixed.view(), residency).unwrap();
        let dec = Decoder::new(&gpu, &fx, &DecodeOptions::default()).unwrap();
        let err = dec.enqueue(&gpu, &req, &mut out, &status, &s).unwrap_err();
        assert_eq!(err.kind(), ibp::ErrorKind::InvalidArgument, "{err}");
        // An output too short for the request is refused before launch.
        let mut short = DeviceBuffer::from_slice(&vec![0u8; l]).unwrap();
        let err = dec
            .enqueue(&gpu, &Request::range(0, 2), &mut short, &status, &s)
            .unwrap_err();
        assert_eq!(err.kind(), ibp::ErrorKind::InvalidArgument, "{err}");
    }
}
