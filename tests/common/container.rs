//! Documents for the container tests (`container*.rs`): compressible and
//! noisy tensors, a safetensors file by hand, and the round-trip check.

use ibp::container::IbpFile;
use ibp::io::{self, Document, ParseOptions, SourceFormat};
use ibp::pipeline::{self, CompressOptions};

/// Rows of f32 features with invariant high bits (compressible), seeded.
pub fn features(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    features_of(rows, cols, seed, 64)
}

/// [`features`] whose nonzero values take `levels` steps in [1, 2).
pub fn features_of(rows: usize, cols: usize, seed: u64, levels: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(rows * cols * 4);
    for _ in 0..rows * cols {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let v = if s % 5 < 3 {
            0.0f32
        } else {
            1.0 + (s % levels) as f32 / levels as f32
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

/// `bytes` parsed as safetensors with the default options.
pub fn parse_safetensors(bytes: &[u8]) -> Document<'_> {
    io::parse(bytes, SourceFormat::Safetensors, &ParseOptions::default()).unwrap()
}

/// [`mixed_file`] and its container under the default options.
pub fn mixed_container() -> (Vec<u8>, Vec<u8>) {
    let original = mixed_file();
    let (bytes, _) = compress(&parse_safetensors(&original), &CompressOptions::default());
    (original, bytes)
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

// ------------------------------------------------------------ by hand

/// Sections of a container: (kind, flags, owner, bytes).
pub type Sections = Vec<(u32, u16, u32, Vec<u8>)>;

/// Parse the directory of a container as §6 describes it.
pub fn sections_of(bytes: &[u8]) -> Sections {
    let t = &bytes[bytes.len() - 64..];
    let dir_off = u64::from_le_bytes(t[8..16].try_into().unwrap()) as usize;
    let n = u64::from_le_bytes(t[16..24].try_into().unwrap()) as usize;
    (0..n)
        .map(|i| {
            let e = &bytes[dir_off + 48 * i..dir_off + 48 * (i + 1)];
            let off = u64::from_le_bytes(e[16..24].try_into().unwrap()) as usize;
            let len = u64::from_le_bytes(e[24..32].try_into().unwrap()) as usize;
            let kind = u32::from_le_bytes(e[0..4].try_into().unwrap());
            let flags = u16::from_le_bytes(e[4..6].try_into().unwrap());
            let owner = u32::from_le_bytes(e[8..12].try_into().unwrap());
            (kind, flags, owner, bytes[off..off + len].to_vec())
        })
        .collect()
}

/// Assemble a container from sections, following §6 only.
pub fn assemble(version: u16, sections: &[(u32, u16, u32, Vec<u8>)]) -> Vec<u8> {
    use xxhash_rust::xxh3::xxh3_64;
    let pad = |v: &mut Vec<u8>| v.resize(v.len().next_multiple_of(64), 0);
    let mut out = vec![0u8; 64];
    out[..8].copy_from_slice(b"\x89IBP\r\n\x1a\n");
    out[8..10].copy_from_slice(&version.to_le_bytes());
    out[10..12].copy_from_slice(&64u16.to_le_bytes());
    let h = xxh3_64(&out[..56]);
    out[56..64].copy_from_slice(&h.to_le_bytes());
    let mut dir = Vec::new();
    for (kind, flags, owner, body) in sections {
        let off = out.len() as u64;
        out.extend(body);
        pad(&mut out);
        let mut e = [0u8; 48];
        e[0..4].copy_from_slice(&kind.to_le_bytes());
        e[4..6].copy_from_slice(&flags.to_le_bytes());
        e[8..12].copy_from_slice(&owner.to_le_bytes());
        e[16..24].copy_from_slice(&off.to_le_bytes());
        e[24..32].copy_from_slice(&(body.len() as u64).to_le_bytes());
        e[32..40].copy_from_slice(&xxh3_64(body).to_le_bytes());
        dir.extend(e);
    }
    let dir_off = out.len() as u64;
    out.extend(&dir);
    pad(&mut out);
    let mut t = [0u8; 64];
    t[0..8].copy_from_slice(b"\x89IBPEND\n");
    t[8..16].copy_from_slice(&dir_off.to_le_bytes());
    t[16..24].copy_from_slice(&(sections.len() as u64).to_le_bytes());
    t[24..32].copy_from_slice(&xxh3_64(&dir).to_le_bytes());
    t[32..40].copy_from_slice(&(out.len() as u64 + 64).to_le_bytes());
    t[40..42].copy_from_slice(&version.to_le_bytes());
    let h = xxh3_64(&t[..56]);
    t[56..64].copy_from_slice(&h.to_le_bytes());
    out.extend(t);
    out
}
