//! Shared test support: the GPU-or-visible-skip rule, test data lookup and
//! (in `container`) the container tests' documents.
#![allow(dead_code)]

pub mod container;

use std::io::Write;

/// Print a line that libtest's output capture does not swallow: the
/// "skipped" notices must be visible in CI logs even for passing tests.
pub fn notice(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// Whether `IBP_REQUIRE_GPU=1` turns a missing GPU into a failure.
pub fn gpu_required() -> bool {
    std::env::var("IBP_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// The GPU, or `None` after printing `skipped: no CUDA device` (a failure
/// instead when `IBP_REQUIRE_GPU=1`). Any other error fails the test.
#[cfg(feature = "cuda")]
pub fn gpu_or_skip(test: &str) -> Option<ibp::gpu::Gpu> {
    match ibp::gpu::Gpu::first() {
        Ok(g) => Some(g),
        Err(e) if ibp::gpu::is_no_device(&e) && !gpu_required() => {
            notice(&format!("{test}: skipped: no CUDA device ({e})"));
            None
        }
        Err(e) => panic!("{test}: GPU required but unusable: {e}"),
    }
}

/// A test data file (`ibp_testdata::data_file`: `$IBP_DATA_DIR`, the
/// repository's `.tools/data` and `data/`, ...).
pub use ibp_testdata::data_file;

/// A version-1.0 npy file: header dict with `descr` (e.g. `<f4`) and
/// `shape` (a Python tuple, e.g. `(4, 2)`), C order, then `data`.
pub fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6) + version (2) + length (2) + dict + '\n' is a multiple of 64.
    while !(10 + dict.len() + 1).is_multiple_of(64) {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((dict.len() as u16).to_le_bytes());
    out.extend(dict.as_bytes());
    out.extend(data);
    out
}

/// Deterministic xorshift64* generator for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Bytes whose bits are set with probability about 2^-density (density 0
    /// gives all ones, 1 gives 1/2).
    pub fn bytes(&mut self, n: usize, density: u32) -> Vec<u8> {
        (0..n)
            .map(|_| {
                let mut b = 0xffu8;
                for _ in 0..density {
                    b &= self.next() as u8;
                }
                b
            })
            .collect()
    }
}

/// The real tables as `(name, rows, row bytes)` (`ibp_testdata::real_tables`):
/// Cora's features (always), and MiniLM's word embeddings in f32 and rounded
/// to bf16 when `model.safetensors` is found (a visible notice naming `test`
/// otherwise).
pub fn real_tables(test: &str) -> Vec<(String, Vec<u8>, usize)> {
    let cora = ibp::io::InputFile::open(
        &data_file("cora-features.npz").expect("cora-features.npz (data/ in the repository)"),
    )
    .unwrap();
    let model = data_file("model.safetensors");
    if model.is_none() {
        notice(&format!(
            "{test}: MiniLM skipped: model.safetensors not found (run scripts/setup.sh)"
        ));
    }
    ibp_testdata::real_tables(cora.bytes(), model.as_deref()).unwrap()
}

/// Bell-shaped values of `t` (FP8 scaled up), `rows` rows of `n`; with
/// `raw_every`, every such row random bits instead (stored raw).
pub fn float_rows(
    t: ibp::float_code::FloatType,
    rows: usize,
    n: usize,
    seed: u64,
    raw_every: Option<usize>,
) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::new();
    for j in 0..rows * n {
        if raw_every.is_some_and(|e| (j / n) % e == e - 1) {
            out.extend_from_slice(&rng.next().to_le_bytes()[..t.bytes()]);
            continue;
        }
        let x: f32 =
            (0..4).map(|_| (rng.next() % (1 << 20)) as f32).sum::<f32>() / (1 << 21) as f32 - 1.0;
        let bits = match t {
            ibp::float_code::FloatType::F16 => u32::from(half::f16::from_f32(x / 16.0).to_bits()),
            ibp::float_code::FloatType::E4M3 => {
                u32::from(ibp_testdata::fp8::E4M3.from_f32(x * 4.0))
            }
            ibp::float_code::FloatType::E5M2 => {
                u32::from(ibp_testdata::fp8::E5M2.from_f32(x * 4.0))
            }
            ibp::float_code::FloatType::Bf16 => u32::from(half::bf16::from_f32(x).to_bits()),
            ibp::float_code::FloatType::F32 => x.to_bits(),
        };
        out.extend_from_slice(&bits.to_le_bytes()[..t.bytes()]);
    }
    out
}

/// Real bf16 KV tables, one a layer and part (layer 0 key, layer 0 value,
/// layer 1 key, …; `tokens × 384` values each): from the staged
/// `kv-bf16.safetensors` (what `ibp kv-data` writes), else from a forward
/// pass over the model card's start; `None` when neither is here.
#[allow(dead_code)]
pub fn real_kv_tables() -> Option<Vec<Vec<u8>>> {
    use ibp::io::DType;
    if let Some(p) = data_file("kv-bf16.safetensors") {
        let f = ibp::io::InputFile::open(&p).unwrap();
        let doc = ibp::io::parse(
            f.bytes(),
            ibp::io::SourceFormat::Safetensors,
            &Default::default(),
        )
        .unwrap();
        let mut out = Vec::new();
        for layer in 0..6 {
            for part in ["key", "value"] {
                let name = format!("layer.{layer}.{part}");
                let g = doc.groups.iter().find(|g| g.name == name).expect(&name);
                assert_eq!(g.dtype, DType::BF16);
                out.push(g.data.to_vec());
            }
        }
        return Some(out);
    }
    let files = ibp_testdata::kv::MiniLmFiles::in_dir(
        data_file("model.safetensors")
            .as_deref()
            .and_then(|p| p.parent())
            .unwrap_or(std::path::Path::new(".")),
    );
    if !files.exist() {
        return None;
    }
    let m = ibp_testdata::kv::MiniLm::load(&files).unwrap();
    let mut text = files.card_text().unwrap();
    // Q: why only the card's start?
    // A: the forward pass runs unoptimised in debug builds; 600
    // characters are still over a hundred real tokens.
    let cut = text.char_indices().nth(600).map_or(text.len(), |(i, _)| i);
    text.truncate(cut);
    let c = m.kv_cache(&text, &Default::default()).unwrap();
    let mut out = Vec::new();
    for layer in 0..c.layers() {
        for part in [
            ibp_testdata::kv::KvPart::Key,
            ibp_testdata::kv::KvPart::Value,
        ] {
            out.push(c.table_bytes(layer, part, &DType::BF16).unwrap());
        }
    }
    Some(out)
}
