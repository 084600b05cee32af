//! CPU codec throughput: fit, compress and decompress (packed layout) on two
//! synthetic datasets shaped like real ones.
//!
//! - `cora`: 2708 × 1433 f32 bag-of-words features, about 1.3% of the values
//!   1.0 and the rest 0.0 (sparse, compresses ~20×).
//! - `embedding`: 30522 × 384 f32 values spread around ±0.05, like a dense
//!   word-embedding table (a few invariant exponent bits per value).
//!
//! Throughput is uncompressed bytes per second. Every round trip is checked
//! once before timing.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ibp::Rows;
use ibp::fit::{FitOptions, fit};
use ibp::layout::{compress_packed, decompress_packed};

/// splitmix64: a fixed, dependency-free stream of pseudo-random words.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn cora() -> (Vec<f32>, usize) {
    let (rows, cols) = (2708, 1433);
    let mut rng = Rng(1);
    let values = (0..rows * cols)
        .map(|_| if rng.next() % 1000 < 13 { 1.0 } else { 0.0 })
        .collect();
    (values, cols)
}

fn embedding() -> (Vec<f32>, usize) {
    let (rows, cols) = (30522, 384);
    let mut rng = Rng(2);
    // Sum of four uniforms, centred and scaled: roughly normal, σ ≈ 0.05.
    let values = (0..rows * cols)
        .map(|_| {
            let s: f32 = (0..4).map(|_| rng.unit()).sum::<f32>() - 2.0;
            s * 0.05 / 0.577
        })
        .collect();
    (values, cols)
}

fn bench_dataset(c: &mut Criterion, name: &str, values: &[f32], cols: usize) {
    let rows = Rows::of(values, cols).expect("rows");
    let bytes = rows.bytes().len() as u64;
    let opts = FitOptions::default();
    let fitted = fit(rows, &opts).expect("fit");
    let cb = fitted.codebook.clone();
    let packed = compress_packed(&cb, rows).expect("compress");
    let mut out = vec![0u8; rows.bytes().len()];
    decompress_packed(&cb, &packed.view(), &mut out).expect("decompress");
    assert!(out == rows.bytes(), "{name}: round trip differs");
    println!(
        "{name}: {} rows × {} B, T = {}, C = {}, {} B → {} B ({:.2}×), {} of {} rows encoded",
        rows.rows(),
        rows.row_bytes(),
        fitted.threshold,
        cb.chunk(),
        bytes,
        packed.payload.len(),
        bytes as f64 / packed.payload.len() as f64,
        fitted.chosen.encoded_rows,
        rows.rows()
    );

    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("fit", |b| b.iter(|| fit(rows, &opts).expect("fit")));
    g.bench_function("compress_packed", |b| {
        b.iter(|| compress_packed(&cb, rows).expect("compress"))
    });
    g.bench_function("decompress_packed", |b| {
        b.iter(|| decompress_packed(&cb, &packed.view(), &mut out).expect("decompress"))
    });
    g.finish();
}

fn codec(c: &mut Criterion) {
    let (values, cols) = cora();
    bench_dataset(c, "cora", &values, cols);
    let (values, cols) = embedding();
    bench_dataset(c, "embedding", &values, cols);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = codec
}
criterion_main!(benches);
