//! Test data for ibp's tests, its command line (`ibp kv-data`, `ibp bench`)
//! and its benches. No part of the `ibp` library: a host app that depends on
//! ibp compiles none of it.
//!
//! - [`kv`]: real KV-cache rows, from all-MiniLM-L6-v2 run over real text by
//!   a tokenizer and BERT forward pass of our own;
//! - [`real_tables`]: Cora's features and MiniLM's word embeddings (f32 and
//!   bf16), the tables the GPU tests and `ibp bench` share;
//! - [`figure7_dataset`] and [`raw_packed`]: synthetic datasets of a chosen
//!   space saving, and the uncompressed baseline in the packed layout;
//! - [`fp8`]: FP8 (E4M3, E5M2) casts of f32 values, rounded to nearest even
//!   and saturating;
//! - [`data_file`]: where the data files `scripts/setup.sh` fetches are.

pub mod fp8;
pub mod kv;

use std::path::{Path, PathBuf};

use ibp::codebook::{ChunkSize, Codebook};
use ibp::io::{InputFile, ParseOptions, SourceFormat};
use ibp::layout::Packed;
use ibp::{Error, Result, Rows};

/// A test data file: `$IBP_DATA_DIR/name`, then `.tools/data/name` of the
/// repository, then `data/name` and `.device/data/name` relative to the
/// working directory (test binaries run on another machine, the GPU host,
/// from a copy of the repository), then the repository's `data/` and
/// `../shared/data/`.
pub fn data_file(name: &str) -> Option<PathBuf> {
    // This package is the repository's `testdata/` folder.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("IBP_DATA_DIR") {
        candidates.push(PathBuf::from(d).join(name));
    }
    candidates.push(root.join(".tools/data").join(name));
    candidates.push(PathBuf::from("data").join(name));
    candidates.push(PathBuf::from(".device/data").join(name));
    candidates.push(root.join("data").join(name));
    candidates.push(root.join("../shared/data").join(name));
    candidates.into_iter().find(|p| p.is_file())
}

/// One real table: its name, its rows back to back, and the row length in
/// bytes.
pub type RealTable = (String, Vec<u8>, usize);

/// The real tables: Cora's features from `cora_npz` (the `.npz` bytes; the
/// repository's `data/cora-features.npz`), then, when `model` (a MiniLM
/// `model.safetensors`) is given, its word embeddings in f32 and rounded to
/// bf16.
pub fn real_tables(cora_npz: &[u8], model: Option<&Path>) -> Result<Vec<RealTable>> {
    let mut out = Vec::new();
    let doc = ibp::io::parse(cora_npz, SourceFormat::Npz, &Default::default())?;
    let g = doc
        .groups
        .first()
        .ok_or_else(|| Error::invalid("the Cora file holds no tensor"))?;
    out.push((
        "Cora features f32".into(),
        g.data.to_vec(),
        g.row_shape(None)?.row_bytes as usize,
    ));
    if let Some(path) = model {
        let f = InputFile::open(path)?;
        let opts = ParseOptions::default().with_select(["embeddings.word_embeddings.weight"]);
        let doc = ibp::io::parse(f.bytes(), SourceFormat::Safetensors, &opts)?;
        let g = doc
            .groups
            .first()
            .ok_or_else(|| Error::invalid("model.safetensors holds no word embeddings"))?;
        let row = g.row_shape(None)?.row_bytes as usize;
        let bf16: Vec<u8> = g
            .data
            .as_chunks::<4>()
            .0
            .iter()
            .flat_map(|b| half::bf16::from_f32(f32::from_le_bytes(*b)).to_le_bytes())
            .collect();
        out.push(("MiniLM word embeddings f32".into(), g.data.to_vec(), row));
        out.push(("MiniLM word embeddings bf16".into(), bf16, row / 2));
    }
    Ok(out)
}

/// A synthetic dataset in the style of the paper's Figure 7: `rows` tensors
/// of `row_bytes`, 4-byte chunks, and a codebook whose mask has enough bits
/// per chunk that every tensor saves `savings` of its size (rounded to whole
/// bits per chunk). Free bits are random, so nothing else compresses.
pub fn figure7_dataset(
    rows: usize,
    row_bytes: usize,
    savings: f64,
    seed: u64,
) -> Result<(Vec<u8>, Codebook)> {
    if !row_bytes.is_multiple_of(4) {
        return Err(Error::invalid("figure-7 datasets use whole 4-byte chunks"));
    }
    // Saved bits per 32-bit chunk: m invariant bits minus one participation
    // bit. m = round(32·s) + 1, at most 32.
    let m = ((32.0 * savings).round() as u32 + 1).min(32);
    let chunk_mask: u32 = if m == 32 {
        u32::MAX
    } else {
        ((1u32 << m) - 1) << (32 - m)
    };
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mask: Vec<u8> = (0..row_bytes / 4)
        .flat_map(|_| chunk_mask.to_le_bytes())
        .collect();
    let bitval: Vec<u8> = mask.iter().map(|&b| b & (next() as u8)).collect();
    let mut data = vec![0u8; rows * row_bytes];
    for w in data.chunks_mut(8) {
        let r = next().to_le_bytes();
        w.copy_from_slice(&r[..w.len()]);
    }
    for row in data.chunks_mut(row_bytes) {
        for ((b, m), v) in row.iter_mut().zip(&mask).zip(&bitval) {
            *b = (*b & !m) | v;
        }
    }
    let cb = Codebook::new(ChunkSize::try_from(4)?, mask, bitval)?;
    Ok((data, cb))
}

/// Every row of `data` stored raw, in the packed layout: the uncompressed
/// baseline of the feature cache benchmarks, decoded by the same kernels
/// (its flag bitmap says "raw" for every row). Takes the bytes (no copy).
pub fn raw_packed(data: Vec<u8>, row_bytes: usize) -> Result<Packed> {
    let rows = Rows::new(&data, row_bytes)?.rows();
    Ok(Packed {
        row_bytes,
        rows,
        flags: vec![0; rows.div_ceil(8)],
        offsets: (0..=rows as u64).map(|i| i * row_bytes as u64).collect(),
        payload: data,
    })
}
