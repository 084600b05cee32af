//! CPU codec throughput: fit, compress and decompress (packed layout),
//! multi-threaded, on the real tables:
//!
//! - `cora`: the Cora node features (2708 × 1433 f32 bag-of-words,
//!   `data/cora-features.npz` in the repository);
//! - `minilm-f32`: all-MiniLM-L6-v2's word embeddings (30522 × 384 f32,
//!   fetched by `scripts/setup.sh` into `.tools/data`), and `minilm-bf16`, the
//!   same table rounded to bf16.
//!
//! When the MiniLM weights are missing, a synthetic table of the same shape
//! stands in, and the bench says so. Throughput is uncompressed bytes per
//! second. Every round trip is checked once before timing.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ibp::Rows;
use ibp::fit::{FitOptions, fit};
use ibp::layout::{LayoutOptions, compress_packed, decompress_packed};

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

fn cora() -> (Vec<u8>, usize) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/cora-features.npz");
    let file = ibp::io::InputFile::open(&path).expect("data/cora-features.npz");
    let doc = ibp::io::parse(
        file.bytes(),
        ibp::io::SourceFormat::Npz,
        &Default::default(),
    )
    .expect("npz");
    let g = &doc.groups[0];
    (
        g.data.to_vec(),
        g.row_shape(None).expect("shape").row_bytes as usize,
    )
}

/// MiniLM's word embeddings as f32 bytes and their row length, or a
/// synthetic stand-in of the same shape.
fn minilm() -> (Vec<u8>, usize, bool) {
    let dir = std::env::var_os("IBP_DATA_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/data"));
    if let Ok(file) = ibp::io::InputFile::open(&dir.join("model.safetensors")) {
        let opts =
            ibp::io::ParseOptions::default().with_select(["embeddings.word_embeddings.weight"]);
        if let Ok(doc) = ibp::io::parse(file.bytes(), ibp::io::SourceFormat::Safetensors, &opts) {
            let g = &doc.groups[0];
            return (
                g.data.to_vec(),
                g.row_shape(None).expect("shape").row_bytes as usize,
                true,
            );
        }
    }
    eprintln!(
        "codec bench: model.safetensors not found (run scripts/setup.sh); using a synthetic 30522 × 384 table"
    );
    let mut rng = Rng(2);
    // Sum of four uniforms, centred and scaled: roughly normal, σ ≈ 0.05.
    let values: Vec<u8> = (0..30522 * 384)
        .flat_map(|_| {
            let s: f32 = (0..4).map(|_| rng.unit()).sum::<f32>() - 2.0;
            (s * 0.05 / 0.577).to_le_bytes()
        })
        .collect();
    (values, 1536, false)
}

fn bench_dataset(c: &mut Criterion, name: &str, data: &[u8], row_bytes: usize) {
    let rows = Rows::new(data, row_bytes).expect("rows");
    let bytes = rows.bytes().len() as u64;
    let opts = FitOptions::default();
    let fitted = fit(rows, &opts).expect("fit");
    let cb = fitted.codebook.clone();
    let packed = compress_packed(&cb, rows, &LayoutOptions::default()).expect("compress");
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
        b.iter(|| compress_packed(&cb, rows, &LayoutOptions::default()).expect("compress"))
    });
    g.bench_function("decompress_packed", |b| {
        b.iter(|| decompress_packed(&cb, &packed.view(), &mut out).expect("decompress"))
    });
    g.finish();
}

fn codec(c: &mut Criterion) {
    let (data, row) = cora();
    bench_dataset(c, "cora", &data, row);
    let (data, row, real) = minilm();
    let tag = if real {
        "minilm"
    } else {
        "synthetic-embedding"
    };
    bench_dataset(c, &format!("{tag}-f32"), &data, row);
    let bf16: Vec<u8> = data
        .as_chunks::<4>()
        .0
        .iter()
        .flat_map(|b| half::bf16::from_f32(f32::from_le_bytes(*b)).to_le_bytes())
        .collect();
    bench_dataset(c, &format!("{tag}-bf16"), &bf16, row / 2);
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
