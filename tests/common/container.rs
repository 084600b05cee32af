//! Documents for the container tests (`container*.rs`): compressible and
//! noisy tensors, a safetensors file by hand, and the round-trip check.

use ibp::container::IbpFile;
use ibp::io::Document;
use ibp::pipeline::{self, CompressOptions};

/// Rows of f32 features with invariant high bits (compressible), seeded.
pub fn features(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(rows * cols * 4);
    for _ in 0..rows * cols {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let v = if s % 5 < 3 {
            0.0f32
        } else {
            1.0 + (s % 64) as f32 / 64.0
        };
        out.extend(v.to_le_bytes());
    }
    out
}

pub fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}

/// A safetensors file (header by hand) of the given tensors.
pub fn safetensors(tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) -> Vec<u8> {
    let mut header = String::from("{\"__metadata__\":{\"k\":\"v\"}");
    let mut data: Vec<u8> = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend(bytes);
        header.push_str(&format!(
            ",\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":{shape:?},\"data_offsets\":[{begin},{}]}}",
            data.len()
        ));
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

pub fn mixed_file() -> Vec<u8> {
    safetensors(&[
        ("emb", "F32", vec![300, 24], features(300, 24, 1)),
        // 320 bytes each, over the 256 under which a tensor stays verbatim
        // in the envelope (`ibp::pipeline::TINY_TENSOR_BYTES`); `empty`
        // stays verbatim.
        ("bias", "F32", vec![80], features(1, 80, 2)),
        ("tiny", "F32", vec![1, 80], features(1, 80, 3)),
        ("noise", "U8", vec![64, 32], noise(64 * 32, 4)),
        ("empty", "F16", vec![0, 8], vec![]),
        (
            "ids",
            "I64",
            vec![40, 2],
            (0..80u64).flat_map(|i| (i % 9).to_le_bytes()).collect(),
        ),
    ])
}

pub fn compress(doc: &Document<'_>, opts: &CompressOptions) -> (Vec<u8>, pipeline::CompressReport) {
    pipeline::compress_document(doc, opts, Vec::new()).unwrap()
}

pub fn check_restores(file: &IbpFile<'_>, original: &[u8]) {
    let back = file.restore_to_vec().unwrap();
    assert!(
        back == original,
        "restored {} bytes differ from the original {}",
        back.len(),
        original.len()
    );
}
