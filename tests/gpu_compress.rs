//! GPU fit and compression against the CPU, byte for byte: every chunk
//! size, ragged tensor lengths, all-encoded / all-raw / mixed sets, both
//! layouts, every source (device memory, pinned host memory, registered
//! pageable memory) and the batched host path with several batches; the GPU
//! fit against the CPU fit (all rows, samples, fixed chunk sizes, more than
//! eight thresholds); and the real Cora and MiniLM (f32, bf16) tables.
//! Prints `skipped: no CUDA device` without a GPU (a failure with
//! `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod common;

use common::{Rng, gpu_or_skip};
use cust::memory::DeviceBuffer;
use ibp::Rows;
use ibp::codebook::{ChunkSize, Codebook, Threshold};
use ibp::fit::{ChunkChoice, Fit, FitOptions, Sample, fit};
use ibp::gpu::{Compressor, Fitter, Gpu, HostOptions, HostRead, PinnedBuffer, Registered};
use ibp::layout::{Layout, LayoutOptions, compress_fixed, compress_packed, size_query};

/// `n` rows of `l` bytes: a noisy base pattern (most rows compress), every
/// `raw_every`-th row random (stored raw).
fn dataset(rng: &mut Rng, l: usize, n: usize, raw_every: usize) -> Vec<u8> {
    let base: Vec<u8> = (0..l).map(|_| rng.next() as u8).collect();
    let mut out = Vec::with_capacity(l * n);
    for i in 0..n {
        let raw = raw_every > 0 && i % raw_every == raw_every - 1;
        for &b in &base {
            let r = rng.next();
            out.push(match (raw, r % 16) {
                (true, _) | (false, 0) => (r >> 8) as u8,
                (false, 1 | 2) => b ^ (1 << ((r >> 16) % 8)),
                _ => b,
            });
        }
    }
    out
}

/// Compress `data` every GPU way and compare with the CPU encoder.
fn check_compress(gpu: &Gpu, data: &[u8], l: usize, cb: &Codebook, what: &str) {
    let rows = Rows::new(data, l).unwrap();
    let cpu_packed = compress_packed(cb, rows, &LayoutOptions::default()).unwrap();
    let cpu_fixed = compress_fixed(cb, rows, &LayoutOptions::default()).unwrap();
    let comp = Compressor::new(gpu, cb).unwrap();
    let device = DeviceBuffer::from_slice(data).unwrap();
    let pinned = PinnedBuffer::from_slice(data).unwrap();

    let sizes = comp.size_query_blocking(&device).unwrap();
    assert_eq!(sizes, size_query(cb, rows).unwrap(), "{what}: size query");

    let p = comp.compress_blocking(&device, Layout::Packed).unwrap();
    assert_eq!(
        p.to_packed_blocking().unwrap(),
        cpu_packed,
        "{what}: device, packed"
    );
    let f = comp
        .compress_blocking(&device, Layout::FixedStride)
        .unwrap();
    assert_eq!(
        f.to_fixed_blocking().unwrap(),
        cpu_fixed,
        "{what}: device, fixed"
    );
    let p = comp.compress_blocking(&pinned, Layout::Packed).unwrap();
    assert_eq!(
        p.to_packed_blocking().unwrap(),
        cpu_packed,
        "{what}: pinned, packed"
    );

    // The batched host path, with batches small enough that there are
    // several (and a short last one).
    let batch = (data.len() / 3).max(1);
    let hp = comp.compress_host_packed_blocking(&pinned, batch).unwrap();
    assert_eq!(hp, cpu_packed, "{what}: host batches, packed");
    let hf = comp.compress_host_fixed_blocking(&pinned, batch).unwrap();
    assert_eq!(hf, cpu_fixed, "{what}: host batches, fixed");
    let reg = Registered::new(data).unwrap();
    let hr = comp.compress_host_packed_blocking(&reg, batch).unwrap();
    assert_eq!(hr, cpu_packed, "{what}: registered pageable memory");
    // Zero-copy reads instead of DMA, batch by batch.
    for layout in [Layout::Packed, Layout::FixedStride] {
        let opts = HostOptions {
            layout,
            read: HostRead::ZeroCopy,
            batch_bytes: batch,
        };
        let (mut flags, mut out, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
        let mut next = 0u64;
        let total = comp
            .compress_host_blocking(&pinned, &opts, |b| {
                assert_eq!(b.first_row, next, "{what}: batches in order");
                next += b.rows as u64;
                flags.extend_from_slice(b.flags);
                out.extend_from_slice(b.data);
                sizes.extend(b.offsets.windows(2).map(|w| w[1] - w[0]));
                Ok(())
            })
            .unwrap();
        assert_eq!(total as usize, out.len());
        match layout {
            Layout::Packed => {
                assert_eq!(out, cpu_packed.payload, "{what}: zero-copy, packed");
                assert_eq!(flags, cpu_packed.flags, "{what}: zero-copy flags");
                let want: Vec<u64> = cpu_packed.offsets.windows(2).map(|w| w[1] - w[0]).collect();
                assert_eq!(sizes, want, "{what}: zero-copy offsets");
            }
            Layout::FixedStride => {
                assert_eq!(out, cpu_fixed.slots, "{what}: zero-copy, fixed");
                assert_eq!(flags, cpu_fixed.flags, "{what}: zero-copy flags");
            }
        }
    }
}

fn assert_same_fit(gpu: &Fit, cpu: &Fit, what: &str) {
    assert_eq!(gpu.candidates, cpu.candidates, "{what}: candidates");
    assert_eq!(gpu.chosen, cpu.chosen, "{what}: chosen");
    assert_eq!(gpu.threshold, cpu.threshold, "{what}: threshold");
    assert_eq!(gpu.codebook, cpu.codebook, "{what}: codebook");
    assert_eq!(
        (gpu.sample_rows, gpu.sample_bytes),
        (cpu.sample_rows, cpu.sample_bytes),
        "{what}: sample"
    );
}

#[test]
fn random_data_compresses_byte_identically() {
    let Some(gpu) = gpu_or_skip("random_data_compresses_byte_identically") else {
        return;
    };
    let mut rng = Rng(11);
    let mut checked = 0;
    for (l, n) in [
        (1usize, 300usize),
        (3, 257),
        (7, 100),
        (8, 64),
        (13, 77),
        (64, 40),
        (100, 33),
        (255, 20),
        (1001, 17),
        (5732, 9),
        (70001, 3),
    ] {
        for raw_every in [0, 3, 1] {
            let data = dataset(&mut rng, l, n, raw_every);
            let counts = ibp::fit::count_bits(Rows::new(&data, l).unwrap());
            for chunk in ChunkSize::ALL {
                for t in [7000, 9000] {
                    let t = Threshold::from_basis_points(t).unwrap();
                    let cb = Codebook::from_counts(&counts, n as u64, t, chunk).unwrap();
                    check_compress(
                        &gpu,
                        &data,
                        l,
                        &cb,
                        &format!("L={l} N={n} raw_every={raw_every} C={chunk} T={t}"),
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 11 * 3 * 4 * 2);
}

#[test]
fn gpu_fit_chooses_the_cpu_codebook() {
    let Some(gpu) = gpu_or_skip("gpu_fit_chooses_the_cpu_codebook") else {
        return;
    };
    let mut rng = Rng(5);
    let many: Vec<Threshold> = (0..11)
        .map(|i| Threshold::from_basis_points(5000 + 500 * i).unwrap())
        .collect();
    for (l, n) in [
        (1usize, 50usize),
        (6, 300),
        (13, 97),
        (100, 64),
        (1536, 40),
        (5732, 30),
    ] {
        let data = dataset(&mut rng, l, n, 4);
        let rows = Rows::new(&data, l).unwrap();
        let device = DeviceBuffer::from_slice(&data).unwrap();
        let pinned = PinnedBuffer::from_slice(&data).unwrap();
        for (name, opts) in [
            ("default", FitOptions::default()),
            (
                "sample 1/3",
                FitOptions::default().with_sample(Sample::Fraction(1.0 / 3.0)),
            ),
            (
                "sample 7",
                FitOptions::default().with_sample(Sample::Count(7)),
            ),
            (
                "C=2",
                FitOptions::default().with_chunk(ChunkChoice::Fixed(ChunkSize::Two)),
            ),
            (
                "11 thresholds",
                FitOptions::default().with_thresholds(many.clone()),
            ),
        ] {
            let cpu = fit(rows, &opts).unwrap();
            let what = format!("L={l} N={n} {name}");
            assert_same_fit(
                &Fitter::new(&gpu).fit_blocking(&device, l, &opts).unwrap(),
                &cpu,
                &format!("{what}, device"),
            );
            assert_same_fit(
                &Fitter::new(&gpu).fit_blocking(&pinned, l, &opts).unwrap(),
                &cpu,
                &format!("{what}, pinned"),
            );
        }
    }
}

#[test]
fn bad_arguments_are_typed_errors() {
    let Some(gpu) = gpu_or_skip("bad_arguments_are_typed_errors") else {
        return;
    };
    let data = vec![1u8; 30];
    let device = DeviceBuffer::from_slice(&data).unwrap();
    let kind = |r: ibp::Result<Fit>| r.unwrap_err().kind();
    assert_eq!(
        kind(Fitter::new(&gpu).fit_blocking(&device, 0, &FitOptions::default())),
        ibp::ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(Fitter::new(&gpu).fit_blocking(&device, 7, &FitOptions::default())),
        ibp::ErrorKind::InvalidArgument
    );
    let cb = Codebook::new(ChunkSize::One, vec![0xff; 4], vec![1; 4]).unwrap();
    let comp = Compressor::new(&gpu, &cb).unwrap();
    let err = comp
        .compress_blocking(&device, Layout::Packed)
        .err()
        .unwrap();
    assert_eq!(err.kind(), ibp::ErrorKind::InvalidArgument);
    assert!(Registered::new(&[]).is_err());
}

#[test]
fn real_tables_fit_and_compress_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("real_tables_fit_and_compress_like_the_cpu") else {
        return;
    };
    let tables = common::real_tables("real_tables_fit_and_compress_like_the_cpu");
    for (name, data, l) in &tables {
        let rows = Rows::new(data, *l).unwrap();
        let device = DeviceBuffer::from_slice(data).unwrap();
        for opts in [
            FitOptions::default(),
            FitOptions::default().with_sample(Sample::Fraction(1.0 / 16.0)),
        ] {
            let cpu = fit(rows, &opts).unwrap();
            let g = Fitter::new(&gpu).fit_blocking(&device, *l, &opts).unwrap();
            assert_same_fit(&g, &cpu, &format!("{name} {:?}", opts.sample));
        }
        let cb = fit(rows, &FitOptions::default()).unwrap().codebook;
        check_compress(&gpu, data, *l, &cb, name);
    }
    assert!(!tables.is_empty());
}

#[test]
fn reused_buffers_give_the_same_bytes() {
    let Some(gpu) = gpu_or_skip("reused_buffers_give_the_same_bytes") else {
        return;
    };
    // 301-byte rows take the measured path; 300-byte rows (slots that
    // share 16-byte groups word by word) and 320-byte rows (whole groups)
    // the fixed-stride encoder that measures nothing first and zeroes no
    // output.
    for l in [301usize, 300, 320] {
        reused_buffers_for_rows_of(&gpu, l);
    }
}

fn reused_buffers_for_rows_of(gpu: &Gpu, l: usize) {
    let mut rng = Rng(23 + l as u64);
    let mut dev_out = ibp::gpu::DeviceCompressed::empty().unwrap();
    let mut hc = ibp::gpu::HostCompressor::new(
        l,
        &HostOptions {
            batch_bytes: 40 * l,
            ..Default::default()
        },
    )
    .unwrap();
    // Large, small, large again: buffers grow, are reused, and stale bytes
    // from the larger run must not leak into the smaller one.
    for (n, raw_every) in [(500usize, 5usize), (37, 0), (700, 2)] {
        let data = dataset(&mut rng, l, n, raw_every);
        let rows = Rows::new(&data, l).unwrap();
        let cb = fit(rows, &FitOptions::default()).unwrap().codebook;
        let comp = Compressor::new(gpu, &cb).unwrap();
        let device = DeviceBuffer::from_slice(&data).unwrap();
        for layout in [Layout::Packed, Layout::FixedStride] {
            comp.compress_into_blocking(&device, layout, &mut dev_out)
                .unwrap();
            match layout {
                Layout::Packed => {
                    assert_eq!(
                        dev_out.to_packed_blocking().unwrap(),
                        compress_packed(&cb, rows, &LayoutOptions::default()).unwrap()
                    )
                }
                Layout::FixedStride => {
                    assert_eq!(
                        dev_out.to_fixed_blocking().unwrap(),
                        compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap()
                    )
                }
            }
        }
        let pinned = PinnedBuffer::from_slice(&data).unwrap();
        let mut payload = Vec::new();
        let mut batches = 0;
        hc.compress_blocking(&comp, &pinned, |b| {
            payload.extend_from_slice(b.data);
            batches += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(
            payload,
            compress_packed(&cb, rows, &LayoutOptions::default())
                .unwrap()
                .payload,
            "N={n}"
        );
        assert_eq!(batches, n.div_ceil(40), "N={n}");
    }
}

#[test]
fn packed_compression_goes_through_slots_when_it_pays() {
    let Some(gpu) = gpu_or_skip("packed_compression_goes_through_slots_when_it_pays") else {
        return;
    };
    let mut rng = Rng(31);
    let (l, n) = (320usize, 400usize);
    // Rows around one base pattern (nearly every bit invariant) go through
    // scratch slots and `ibp_compact`; random rows (nothing invariant) take
    // the measured path and allocate no scratch.
    let random: Vec<u8> = (0..l * n).map(|_| rng.next() as u8).collect();
    for (data, through) in [(dataset(&mut rng, l, n, 0), true), (random, false)] {
        let rows = Rows::new(&data, l).unwrap();
        let cb = fit(rows, &FitOptions::default()).unwrap().codebook;
        assert_eq!(
            5 * cb.invariant_bits() >= 8 * l as u64,
            through,
            "invariant share of the codebook"
        );
        let comp = Compressor::new(&gpu, &cb).unwrap();
        let device = DeviceBuffer::from_slice(&data).unwrap();
        let mut out = ibp::gpu::DeviceCompressed::empty().unwrap();
        comp.compress_into_blocking(&device, Layout::Packed, &mut out)
            .unwrap();
        assert_eq!(
            out.to_packed_blocking().unwrap(),
            compress_packed(&cb, rows, &LayoutOptions::default()).unwrap(),
            "through slots: {through}"
        );
        assert_eq!(out.scratch_bytes() >= n * l, through, "scratch held");
    }
}

#[test]
fn a_sink_error_stops_the_batches_and_the_compressor_still_works() {
    let Some(gpu) = gpu_or_skip("a_sink_error_stops_the_batches_and_the_compressor_still_works")
    else {
        return;
    };
    let mut rng = Rng(31);
    let l = 256;
    let data = dataset(&mut rng, l, 400, 6);
    let rows = Rows::new(&data, l).unwrap();
    let cb = fit(rows, &FitOptions::default()).unwrap().codebook;
    let comp = Compressor::new(&gpu, &cb).unwrap();
    let mut hc = ibp::gpu::HostCompressor::new(
        l,
        &HostOptions {
            batch_bytes: 16 * l,
            ..Default::default()
        },
    )
    .unwrap();
    {
        // Registered memory, unregistered as soon as the call returns: the
        // batches still in flight must be finished by then.
        let reg = Registered::new(&data).unwrap();
        let mut seen = 0;
        let err = hc
            .compress_blocking(&comp, &reg, |_| {
                seen += 1;
                Err(ibp::Error::invalid("the sink gives up"))
            })
            .unwrap_err();
        assert_eq!(err.kind(), ibp::ErrorKind::InvalidArgument);
        assert_eq!(seen, 1, "no batch after the sink's error");
    }
    let pinned = PinnedBuffer::from_slice(&data).unwrap();
    let mut payload = Vec::new();
    hc.compress_blocking(&comp, &pinned, |b| {
        payload.extend_from_slice(b.data);
        Ok(())
    })
    .unwrap();
    assert_eq!(
        payload,
        compress_packed(&cb, rows, &LayoutOptions::default())
            .unwrap()
            .payload
    );
}

#[test]
fn device_compressed_output_decodes_in_place() {
    let Some(gpu) = gpu_or_skip("device_compressed_output_decodes_in_place") else {
        return;
    };
    let mut rng = Rng(0xd0c5);
    for (l, n) in [(100usize, 500usize), (1531, 300), (5732, 120)] {
        let data = dataset(&mut rng, l, n, 9);
        let rows = Rows::new(&data, l).unwrap();
        let cb = fit(rows, &FitOptions::default()).unwrap().codebook;
        let comp = Compressor::new(&gpu, &cb).unwrap();
        let device = DeviceBuffer::from_slice(&data).unwrap();
        for layout in [Layout::Packed, Layout::FixedStride] {
            let dc = comp.compress_blocking(&device, layout).unwrap();
            let ds = ibp::gpu::GpuDataset::from_device_compressed(&gpu, &cb, dc).unwrap();
            let dec = ibp::gpu::Decoder::new(&gpu, &ds, &Default::default()).unwrap();
            let mut out = DeviceBuffer::from_slice(&vec![0x5au8; n * l]).unwrap();
            let mut status = ibp::gpu::DecodeStatus::new().unwrap();
            let s =
                cust::stream::Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None).unwrap();
            dec.range(&gpu, 0, n as u64, &mut out, &status, &s).unwrap();
            s.synchronize().unwrap();
            status.check_blocking().unwrap();
            let host = ibp::gpu::copy_to_host_blocking(&out).unwrap();
            assert!(host == data, "L={l} {layout:?}: decoded output differs");
        }
    }
}

#[test]
fn a_replaced_codebook_compresses_as_a_new_one() {
    let Some(gpu) = gpu_or_skip("a_replaced_codebook_compresses_as_a_new_one") else {
        return;
    };
    let mut rng = Rng(0x5e7);
    let mut comp: Option<Compressor<'_>> = None;
    let mut dev_out = ibp::gpu::DeviceCompressed::empty().unwrap();
    // Longer rows (a larger book: the buffer grows), shorter ones (the
    // book copied into the front of the larger buffer), another chunk
    // size, and back.
    for (l, chunk) in [
        (300usize, ChunkSize::Eight),
        (700, ChunkSize::Four),
        (300, ChunkSize::Two),
        (96, ChunkSize::One),
        (700, ChunkSize::Eight),
    ] {
        let data = dataset(&mut rng, l, 400, 7);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions {
            chunk: ChunkChoice::Fixed(chunk),
            ..Default::default()
        };
        let cb = fit(rows, &opts).unwrap().codebook;
        match comp.as_mut() {
            Some(g) => g.replace(&cb).unwrap(),
            None => comp = Some(Compressor::new(&gpu, &cb).unwrap()),
        }
        let g = comp.as_ref().unwrap();
        assert_eq!(g.codebook(), &cb);
        let device = DeviceBuffer::from_slice(&data).unwrap();
        g.compress_into_blocking(&device, Layout::Packed, &mut dev_out)
            .unwrap();
        assert_eq!(
            dev_out.to_packed_blocking().unwrap(),
            compress_packed(&cb, rows, &LayoutOptions::default()).unwrap(),
            "L={l} C={chunk:?}"
        );
        assert_eq!(
            g.size_query_blocking(&device).unwrap(),
            size_query(&cb, rows).unwrap(),
            "sizes L={l} C={chunk:?}"
        );
    }
}

#[test]
fn a_single_row_compresses_into_a_fresh_output() {
    // Found by tests/gpu_stress.rs: one row into a new `DeviceCompressed`
    // failed with "copy larger than its buffers" (its work buffers, sized
    // for no rows, passed for one row but held no room for two offsets).
    let Some(gpu) = gpu_or_skip("a_single_row_compresses_into_a_fresh_output") else {
        return;
    };
    let mut rng = Rng(5);
    for l in [4usize, 8, 100, 5732] {
        let data = dataset(&mut rng, l, 9, 0);
        let counts = ibp::fit::count_bits(Rows::new(&data, l).unwrap());
        let t = Threshold::from_basis_points(9000).unwrap();
        for chunk in ChunkSize::ALL {
            let cb = Codebook::from_counts(&counts, 9, t, chunk).unwrap();
            // Every single row, through every path check_compress takes.
            for i in 0..3 {
                check_compress(
                    &gpu,
                    &data[i * l..(i + 1) * l],
                    l,
                    &cb,
                    &format!("one row, L={l} C={chunk}"),
                );
            }
        }
    }
}
