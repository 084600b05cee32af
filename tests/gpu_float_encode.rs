//! GPU fit and compression of the float coding (`ibp::gpu::FloatEncoder`),
//! byte for byte against the CPU (`ibp::float_code::fit` and `compress`):
//! MiniLM's whole word-embedding table in bf16, f16, f32 and FP8 (E4M3,
//! E5M2) under 1, 2 and 4 sub-streams, synthetic rows with raw rows and
//! ragged lengths, and the typed errors. Prints `skipped: no CUDA device`
//! without a GPU (a failure with `IBP_REQUIRE_GPU=1`).
//!
//! The MiniLM test also prints times (wall clock around each blocking
//! call, best of 5 after a warm-up: fit = histogram kernel, 32 KiB copy
//! and the host's choice; encode = size kernel, scan, an 8-byte read-back,
//! memset and encode kernel) with `eprintln!`: a rough hook, not a
//! benchmark, and nothing is asserted on them.
#![cfg(feature = "cuda")]

mod common;

use std::time::Instant;

use common::{data_file, float_rows, gpu_or_skip};
use cust::memory::DeviceBuffer;
use ibp::float_code::{FitOptions, FloatType, Split, compress, fit};
use ibp::gpu::{FloatEncoder, Gpu};
use ibp::{ErrorKind, Rows};

/// Fit and compress `rows` on the GPU and on the CPU; the two must be
/// equal. Returns the GPU's fit and encode times (ms, best of `reps`).
fn check(
    gpu: &Gpu,
    t: FloatType,
    rows: Rows<'_>,
    opts: &FitOptions,
    what: &str,
    reps: usize,
) -> (f64, f64) {
    let want_table = fit(t, rows, opts).unwrap();
    let want = compress(&want_table, rows).unwrap();
    let mut padded = rows.bytes().to_vec();
    padded.resize(padded.len().next_multiple_of(4).max(4), 0);
    let dev = DeviceBuffer::from_slice(&padded).unwrap();
    let input = dev.index(..rows.bytes().len());
    let mut enc = FloatEncoder::new(gpu, rows.rows(), rows.bytes().len()).unwrap();
    let table = enc.fit(t, &input, rows.row_bytes(), opts).unwrap();
    assert_eq!(table, want_table, "{what}: the table differs");
    let got = enc.compress(&table, &input, rows.row_bytes()).unwrap();
    assert!(got == want, "{what}: the group differs");
    assert_eq!(got.to_bytes(), want.to_bytes(), "{what}: the bytes differ");
    let (mut fit_ms, mut enc_ms) = (f64::MAX, f64::MAX);
    for _ in 0..reps {
        let a = Instant::now();
        enc.fit(t, &input, rows.row_bytes(), opts).unwrap();
        fit_ms = fit_ms.min(a.elapsed().as_secs_f64() * 1e3);
        let a = Instant::now();
        enc.encode(&table, &input, rows.row_bytes()).unwrap();
        enc_ms = enc_ms.min(a.elapsed().as_secs_f64() * 1e3);
    }
    (fit_ms, enc_ms)
}

#[test]
fn minilm_tables_encode_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("minilm_tables_encode_like_the_cpu") else {
        return;
    };
    let Some(path) = data_file("model.safetensors") else {
        eprintln!("minilm_tables_encode_like_the_cpu: skipped: model.safetensors not found");
        return;
    };
    let f = ibp::io::InputFile::open(&path).unwrap();
    let opts = ibp::io::ParseOptions::default().with_select(["embeddings.word_embeddings.weight"]);
    let doc = ibp::io::parse(f.bytes(), ibp::io::SourceFormat::Safetensors, &opts).unwrap();
    let g = &doc.groups[0];
    let l = g.row_shape(None).unwrap().row_bytes as usize;
    let f32s = g.data.to_vec();
    let cast = |f: &dyn Fn(f32) -> Vec<u8>| -> Vec<u8> {
        f32s.as_chunks::<4>()
            .0
            .iter()
            .flat_map(|b| f(f32::from_le_bytes(*b)))
            .collect()
    };
    let bf16 = cast(&|x| half::bf16::from_f32(x).to_le_bytes().to_vec());
    let f16 = cast(&|x| half::f16::from_f32(x).to_le_bytes().to_vec());
    let e4m3 = cast(&|x| vec![ibp_testdata::fp8::E4M3.from_f32(x * 16.0)]);
    let e5m2 = cast(&|x| vec![ibp_testdata::fp8::E5M2.from_f32(x * 16.0)]);
    let n = l / 4;
    for (t, data) in [
        (FloatType::Bf16, &bf16),
        (FloatType::F32, &f32s),
        (FloatType::F16, &f16),
        (FloatType::E4M3, &e4m3),
        (FloatType::E5M2, &e5m2),
    ] {
        for s in [4u8, 2, 1] {
            let rows = Rows::new(data, n * t.bytes()).unwrap();
            let opts = FitOptions::default().with_sub_streams(s);
            let what = format!("MiniLM {t} S={s}");
            let (fit_ms, enc_ms) = check(&gpu, t, rows, &opts, &what, 5);
            let gb = |ms: f64| data.len() as f64 / (ms * 1e6);
            eprintln!(
                "timing (rough, wall clock of blocking calls, best of 5; not a benchmark): {what}: {} rows of {} B: fit {fit_ms:.3} ms ({:.0} GB/s), encode {enc_ms:.3} ms ({:.0} GB/s), fit + encode {:.0} GB/s",
                rows.rows(),
                rows.row_bytes(),
                gb(fit_ms),
                gb(enc_ms),
                gb(fit_ms + enc_ms),
            );
        }
    }
}

#[test]
fn synthetic_rows_encode_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("synthetic_rows_encode_like_the_cpu") else {
        return;
    };
    for (t, n, s, split) in [
        (FloatType::E4M3, 1023, 4, None),
        (FloatType::E5M2, 333, 2, None),
        (FloatType::F16, 101, 6, None),
        (FloatType::Bf16, 77, 32, None),
        (FloatType::Bf16, 3, 1, None),
        (FloatType::F32, 129, 4, Some(Split::new(20, 12))),
    ] {
        let data = float_rows(t, 3001, n, n as u64, Some(13));
        let rows = Rows::new(&data, n * t.bytes()).unwrap();
        let mut opts = FitOptions::default().with_sub_streams(s);
        if let Some(sp) = split {
            opts = opts.with_split(sp);
        }
        check(&gpu, t, rows, &opts, &format!("{t} n={n} S={s}"), 0);
    }
    // From host rows, through the encoder's own input buffer.
    let data = float_rows(FloatType::Bf16, 500, 384, 3, Some(7));
    let rows = Rows::new(&data, 768).unwrap();
    let mut enc = FloatEncoder::with_host_input(&gpu, 500, data.len()).unwrap();
    let opts = FitOptions::default();
    let got = enc.compress_host(FloatType::Bf16, rows, &opts).unwrap();
    assert!(got == compress(&fit(FloatType::Bf16, rows, &opts).unwrap(), rows).unwrap());
}

#[test]
fn bad_arguments_are_typed_errors() {
    let Some(gpu) = gpu_or_skip("bad_arguments_are_typed_errors") else {
        return;
    };
    let data = float_rows(FloatType::Bf16, 100, 64, 5, Some(1000));
    let rows = Rows::new(&data, 128).unwrap();
    let dev = DeviceBuffer::from_slice(&data).unwrap();
    let table = fit(FloatType::Bf16, rows, &FitOptions::default()).unwrap();
    let mut small = FloatEncoder::new(&gpu, 10, 1280).unwrap();
    let kind = |r: ibp::Result<u64>| r.unwrap_err().kind();
    // More rows than the encoder takes; not whole rows; not 4-aligned.
    assert_eq!(
        kind(small.encode(&table, &dev, 128)),
        ErrorKind::InvalidArgument
    );
    let mut enc = FloatEncoder::new(&gpu, 100, data.len()).unwrap();
    assert_eq!(
        kind(enc.encode(&table, &dev, 96)),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(enc.encode(&table, &dev.index(2..2 + 99 * 128), 128)),
        ErrorKind::InvalidArgument
    );
    // Nothing compressed yet.
    assert_eq!(
        enc.coded(&table).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    // Codes longer than 12 bits.
    let long = fit(
        FloatType::Bf16,
        rows,
        &FitOptions::default().with_max_code_len(15),
    )
    .unwrap();
    if long.max_code_len() > 12 {
        assert_eq!(
            kind(enc.encode(&long, &dev, 128)),
            ErrorKind::InvalidArgument
        );
    }
    // No input buffer for host rows.
    assert_eq!(
        enc.compress_host(FloatType::Bf16, rows, &FitOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}
