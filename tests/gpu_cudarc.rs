//! ibp on cudarc's memory and streams (`ibp::gpu::cudarc_interop`): gathers
//! and ranges into `CudaSlice`/`CudaViewMut` outputs with cudarc indices,
//! ordered on a cudarc stream with cudarc's own copies around them, against
//! the original rows; a too-short output and a bad index as typed errors;
//! compression from a `CudaSlice` and a `CudaView` against the CPU encoder.
//! Prints `skipped: no CUDA device` without a GPU (a failure with
//! `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cudarc")]

mod common;

use std::sync::Arc;

use common::{Rng, gpu_or_skip};
use cudarc::driver::{CudaContext, CudaStream};
use ibp::codebook::{ChunkSize, Codebook, Threshold};
use ibp::gpu::{
    Compressor, DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, Request, Residency,
    cudarc_interop as cr,
};
use ibp::layout::{Layout, LayoutOptions, compress_fixed, compress_packed};
use ibp::{ErrorKind, Rows};

const POISON: u8 = 0xA5;

/// `n` rows of `l` bytes, most close to one base row (encoded), every
/// fifth random (stored raw), and a codebook fitted to them.
fn dataset(rng: &mut Rng, l: usize, n: usize, chunk: ChunkSize) -> (Vec<u8>, Codebook) {
    let base: Vec<u8> = (0..l).map(|_| rng.next() as u8).collect();
    let mut data = Vec::with_capacity(l * n);
    for i in 0..n {
        for &b in &base {
            let r = rng.next();
            data.push(match (i % 5 == 4, r % 16) {
                (true, _) | (false, 0) => (r >> 8) as u8,
                (false, 1) => b ^ (1 << ((r >> 16) % 8)),
                _ => b,
            });
        }
    }
    let counts = ibp::fit::count_bits(Rows::new(&data, l).unwrap());
    let t = Threshold::from_basis_points(8000).unwrap();
    let cb = Codebook::from_counts(&counts, n as u64, t, chunk).unwrap();
    (data, cb)
}

fn expected(data: &[u8], l: usize, index: &[u64]) -> Vec<u8> {
    index
        .iter()
        .flat_map(|&t| data[t as usize * l..(t as usize + 1) * l].iter().copied())
        .collect()
}

/// cudarc's context and a fresh (non-blocking) stream on `gpu`'s device.
fn cudarc_stream(gpu: &Gpu) -> Arc<CudaStream> {
    let ctx = CudaContext::new(gpu.ordinal() as usize).expect("cudarc context");
    ctx.new_stream().expect("cudarc stream")
}

#[test]
fn gathers_into_cudarc_buffers_match_the_rows() {
    let Some(gpu) = gpu_or_skip("gathers_into_cudarc_buffers_match_the_rows") else {
        return;
    };
    let stream = cudarc_stream(&gpu);
    let mut rng = Rng(37);
    for (l, n, chunk) in [
        (64usize, 300usize, ChunkSize::ALL[0]),
        (1001, 40, ChunkSize::ALL[2]),
        (4096, 12, ChunkSize::ALL[3]),
    ] {
        let (data, cb) = dataset(&mut rng, l, n, chunk);
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        for residency in [Residency::Pinned, Residency::Device] {
            let what = format!("L={l} N={n} {residency:?}");
            let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), residency).unwrap();
            let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
            let mut status = DecodeStatus::new().unwrap();
            let index: Vec<u64> = (0..2 * n).map(|_| rng.next() % n as u64).collect();
            let index32: Vec<u32> = index.iter().map(|&i| i as u32).collect();
            let want = expected(&data, l, &index);

            // u32 indices into a whole CudaSlice; the poison is written by
            // cudarc on the same stream, unsynchronised: ordering alone
            // puts the gather after it.
            let d_index = stream.clone_htod(&index32).unwrap();
            let mut out = stream.alloc_zeros::<u8>(index.len() * l).unwrap();
            stream
                .memcpy_htod(&vec![POISON; index.len() * l], &mut out)
                .unwrap();
            cr::gather_into(&dec, &gpu, &d_index, &mut out, &status, &stream).unwrap();
            let got = stream.clone_dtoh(&out).unwrap();
            stream.synchronize().unwrap();
            status.check_blocking().unwrap();
            assert!(got == want, "{what}: u32 gather into a CudaSlice");

            // u64 indices into a CudaViewMut inside a guarded buffer.
            let d_index = stream.clone_htod(&index).unwrap();
            let guard = 256;
            let mut big = stream
                .clone_htod(&vec![POISON; index.len() * l + 2 * guard])
                .unwrap();
            {
                let mut view = big.slice_mut(guard..guard + index.len() * l);
                cr::gather_into(&dec, &gpu, &d_index, &mut view, &status, &stream).unwrap();
            }
            let got = stream.clone_dtoh(&big).unwrap();
            stream.synchronize().unwrap();
            status.check_blocking().unwrap();
            assert!(
                got[..guard].iter().all(|&b| b == POISON)
                    && got[guard + index.len() * l..].iter().all(|&b| b == POISON),
                "{what}: the gather wrote outside its view"
            );
            assert!(
                got[guard..guard + index.len() * l] == want,
                "{what}: u64 gather into a view"
            );

            // A range through decode_into.
            let mut out = stream.alloc_zeros::<u8>(n * l).unwrap();
            cr::decode_into(
                &dec,
                &gpu,
                &Request::range(0, n as u64),
                &mut out,
                &status,
                &stream,
            )
            .unwrap();
            let got = stream.clone_dtoh(&out).unwrap();
            stream.synchronize().unwrap();
            status.check_blocking().unwrap();
            assert!(got == data, "{what}: range");
        }
    }
}

#[test]
fn a_short_output_and_a_bad_index_are_typed_errors() {
    let Some(gpu) = gpu_or_skip("a_short_output_and_a_bad_index_are_typed_errors") else {
        return;
    };
    let stream = cudarc_stream(&gpu);
    let (l, n) = (100, 20);
    let (data, cb) = dataset(&mut Rng(5), l, n, ChunkSize::ALL[1]);
    let packed =
        compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
    let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Device).unwrap();
    let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
    let mut status = DecodeStatus::new().unwrap();

    // One byte short: refused on the host, nothing enqueued.
    let d_index = stream.clone_htod(&[1u32, 2, 3]).unwrap();
    let mut out = stream.alloc_zeros::<u8>(3 * l - 1).unwrap();
    let e = cr::gather_into(&dec, &gpu, &d_index, &mut out, &status, &stream).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");

    // An index past the rows: its output row zero-filled, the status says so.
    let d_index = stream.clone_htod(&[1u64, n as u64 + 7, 3]).unwrap();
    let mut out = stream.clone_htod(&vec![POISON; 3 * l]).unwrap();
    cr::gather_into(&dec, &gpu, &d_index, &mut out, &status, &stream).unwrap();
    let got = stream.clone_dtoh(&out).unwrap();
    stream.synchronize().unwrap();
    let e = status.check_blocking().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(
        got[l..2 * l].iter().all(|&b| b == 0),
        "the bad row is zero-filled"
    );
    assert_eq!(got[..l], data[l..2 * l], "the good rows are decoded");
    assert_eq!(got[2 * l..], data[3 * l..4 * l]);
}

#[test]
fn compression_from_cudarc_buffers_matches_the_cpu() {
    let Some(gpu) = gpu_or_skip("compression_from_cudarc_buffers_matches_the_cpu") else {
        return;
    };
    let stream = cudarc_stream(&gpu);
    let mut rng = Rng(3);
    for (l, n, chunk) in [
        (64usize, 257usize, ChunkSize::ALL[0]),
        (1000, 33, ChunkSize::ALL[3]),
    ] {
        let (data, cb) = dataset(&mut rng, l, n, chunk);
        let rows = Rows::new(&data, l).unwrap();
        let comp = Compressor::new(&gpu, &cb).unwrap();

        // Filled by a cudarc copy still in flight on the stream when the
        // call starts: the call orders the compressor after it.
        let mut src = stream.alloc_zeros::<u8>(data.len()).unwrap();
        stream.memcpy_htod(&data, &mut src).unwrap();
        let p = cr::compress_blocking(&comp, &src, Layout::Packed, &stream).unwrap();
        assert_eq!(
            p.to_packed_blocking().unwrap(),
            compress_packed(&cb, rows, &LayoutOptions::default()).unwrap(),
            "L={l}: packed from a CudaSlice"
        );
        let f = cr::compress_blocking(&comp, &src, Layout::FixedStride, &stream).unwrap();
        assert_eq!(
            f.to_fixed_blocking().unwrap(),
            compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap(),
            "L={l}: fixed from a CudaSlice"
        );

        // A view of whole rows inside a larger buffer.
        let mut big = stream.alloc_zeros::<u8>(data.len() + 3 * l).unwrap();
        stream
            .memcpy_htod(&data, &mut big.slice_mut(l..l + data.len()))
            .unwrap();
        let view = big.slice(l..l + data.len());
        let p = cr::compress_blocking(&comp, &view, Layout::Packed, &stream).unwrap();
        assert_eq!(
            p.to_packed_blocking().unwrap(),
            compress_packed(&cb, rows, &LayoutOptions::default()).unwrap(),
            "L={l}: packed from a CudaView"
        );
    }
}

/// The GPU guide's cudarc listing (an `ignore` block, since the guide's
/// doctests build without cudarc) is `examples/cudarc_interop.rs` below its
/// header, so the page shows code that builds. Runs without a GPU.
#[test]
fn the_guides_cudarc_listing_is_the_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let guide = std::fs::read_to_string(format!("{root}/docs/GPU.md")).unwrap();
    let example = std::fs::read_to_string(format!("{root}/examples/cudarc_interop.rs")).unwrap();
    let section = guide
        .split("## Memory and streams from cudarc")
        .nth(1)
        .expect("the guide has the cudarc section");
    let listing = section
        .split("```rust,ignore\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("the section has an ignore listing");
    let code = &example[example.find("use cudarc").expect("the example's first use")..];
    assert_eq!(
        listing, code,
        "docs/GPU.md's cudarc listing differs from the example"
    );
}
