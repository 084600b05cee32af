//! The harness of the command-line tests (`cli.rs`, `cli_analyze.rs`):
//! the real `ibp` binary run on real files in a scratch folder, exit codes,
//! `--json` output, and the test files it reads.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ibp::io::Fingerprint;
use serde_json::{Value, json};

#[macro_use]
#[path = "../cli_base/mod.rs"]
mod base;
pub use base::*;

pub const EMBEDDINGS: &str = "embeddings.word_embeddings.weight";

pub fn cora() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/cora-features.npz")
}

/// Run `ibp args`, insist on success, and return stdout.
pub fn ok(args: &[OsString]) -> String {
    let o = ibp(args);
    assert!(
        o.status.success(),
        "ibp {args:?} failed ({}):\n{}",
        o.status,
        stderr(&o)
    );
    // Nothing on stderr when it is not a terminal: no progress bar in logs.
    // (analyze may say it counts on the CPU because no GPU is usable.)
    if args[0] != "analyze" {
        assert_eq!(stderr(&o), "", "ibp {args:?} wrote to stderr");
    }
    String::from_utf8(o.stdout).expect("stdout is UTF-8")
}

pub fn ok_json(args: &[OsString]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ibp {args:?}: not JSON ({e}):\n{out}"))
}

pub fn same_bytes(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    // Not assert_eq: a failure should not print megabytes.
    assert!(
        x.len() == y.len() && x == y,
        "{} ({} bytes) differs from {} ({} bytes)",
        a.display(),
        x.len(),
        b.display(),
        y.len()
    );
}

pub fn hex(x: u64) -> String {
    format!("{x:016x}")
}

/// compress (with `extra` options) → inspect → decompress, checking the
/// restored file byte for byte and everything both reports say about the
/// file that can be checked from outside. Returns inspect's JSON.
pub fn round_trip(dir: &Scratch, input: &Path, layout: &str, extra: &[&str]) -> Value {
    let stem = input.file_name().unwrap().to_string_lossy().into_owned();
    let packed = dir.path(&format!("{stem}.{layout}.ibp"));
    let restored = dir.path(&format!("{stem}.{layout}.restored"));
    let mut compress = args![
        "compress", input, "-o", &packed, "--layout", layout, "--json"
    ]
    .to_vec();
    compress.extend(extra.iter().map(OsString::from));
    // Q: why `--coding ibp` unless asked otherwise? A: `layout` names the
    // IBP layout the callers check; on dense floats `--coding auto` (the
    // default) may float-code instead (`coding_picks_per_tensor_...`).
    if !extra.contains(&"--coding") {
        compress.extend(args!["--coding", "ibp"]);
    }
    let c = ok_json(&compress);
    let i = ok_json(&args!["inspect", &packed, "--json"]);
    let d = ok(&args!["decompress", &packed, "-o", &restored,]);
    same_bytes(input, &restored);
    assert!(
        d.contains("verified"),
        "decompress does not say it verified:\n{d}"
    );

    let original = std::fs::read(input).unwrap();
    let fp = Fingerprint::of(&original);
    let file_len = std::fs::metadata(&packed).unwrap().len();
    assert_eq!(c["input_bytes"], json!(fp.len));
    assert_eq!(c["output_bytes"], json!(file_len));
    assert_eq!(c["layout"], json!(layout));
    let fs = c["file_savings"].as_f64().unwrap();
    assert!((fs - (1.0 - file_len as f64 / fp.len as f64)).abs() < 1e-9);

    assert_eq!(i["format_version"], json!(1));
    assert_eq!(i["file_bytes"], json!(file_len));
    assert_eq!(i["source"]["format"], c["input_format"]);
    assert_eq!(i["source"]["length"], json!(fp.len));
    assert_eq!(i["source"]["xxh3"], json!(hex(fp.xxh3)));
    assert_eq!(c["totals"], i["totals"]);
    // What compress reported is what the file holds (compress adds why a
    // group is raw, and the size of the coding it did not choose, which
    // only it knows).
    let mut groups = c["groups"].as_array().unwrap().clone();
    for g in &mut groups {
        let raw = g["layout"] == json!("raw");
        let reason = g.as_object_mut().unwrap().remove("raw_reason");
        assert_eq!(reason.is_some(), raw, "raw_reason of {g}");
        let float = g.as_object_mut().unwrap().remove("float_bytes");
        let ibp = g.as_object_mut().unwrap().remove("ibp_bytes");
        if g["layout"] == json!("float") {
            assert_eq!(float, Some(g["stored_bytes"].clone()), "float_bytes of {g}");
            if let Some(i) = ibp {
                assert!(i.as_u64() >= g["stored_bytes"].as_u64(), "ibp_bytes of {g}");
            }
        }
    }
    assert_eq!(Value::Array(groups), i["groups"]);
    for g in i["groups"].as_array().unwrap() {
        let (raw, stored) = (
            g["raw_bytes"].as_f64().unwrap(),
            g["stored_bytes"].as_f64().unwrap(),
        );
        let n = g["rows"].as_u64().unwrap();
        assert_eq!(g["raw_bytes"], json!(n * g["row_bytes"].as_u64().unwrap()));
        assert_eq!(
            g["encoded_rows"].as_u64().unwrap() + g["raw_rows"].as_u64().unwrap(),
            n
        );
        if raw > 0.0 {
            assert!((g["savings"].as_f64().unwrap() - (1.0 - stored / raw)).abs() < 1e-9);
        }
        if g["layout"] == json!("raw") {
            assert_eq!(g["stored_bytes"], g["raw_bytes"]);
            assert_eq!(g["chunk_bytes"], Value::Null);
        } else if g["layout"] == json!("float") {
            // Float-coded (`--coding auto` or `float`): no codebook.
            assert_eq!(g["chunk_bytes"], Value::Null);
            assert!(g["float_code"].is_string(), "float_code of {g}");
        } else {
            assert_eq!(g["layout"], json!(layout));
            assert!([1, 2, 4, 8].contains(&g["chunk_bytes"].as_u64().unwrap()));
            assert!(g["invariant_bits"].as_u64().unwrap() <= 8 * g["row_bytes"].as_u64().unwrap());
        }
    }
    // The sections tile the file as FORMAT.md §6.1 says.
    let mut at = 64;
    let sections = i["sections"].as_array().unwrap();
    for s in sections {
        assert_eq!(s["offset"], json!(at), "section {s}");
        at = (at + s["length"].as_u64().unwrap()).next_multiple_of(64);
    }
    assert_eq!(
        sections
            .iter()
            .filter(|s| s["kind"] == json!("manifest"))
            .count(),
        1
    );
    i
}

/// A safetensors file, header written by hand as the format describes it:
/// an 8-byte length, a JSON header padded with spaces to 8 bytes, data.
pub fn safetensors(tensors: &[(&str, &str, &[u64], Vec<u8>)]) -> Vec<u8> {
    let mut entries = vec![r#""__metadata__":{"format":"pt"}"#.to_string()];
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
        entries.push(format!(
            r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{},{}]}}"#,
            shape.join(","),
            data.len(),
            data.len() + bytes.len()
        ));
        data.extend_from_slice(bytes);
    }
    let mut header = format!("{{{}}}", entries.join(","));
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// A version-1.0 npy file of little-endian f32, C order.
pub fn npy_f32(shape: &[u64], values: &[f32]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let dims = if dims.len() == 1 {
        format!("{},", dims[0])
    } else {
        dims.join(", ")
    };
    crate::common::npy("<f4", &format!("({dims})"), &f32_bytes(values))
}

/// f32 values that look like features: a few distinct magnitudes per
/// column, so high bits are invariant across rows and low bits are not.
pub fn features(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = crate::common::Rng(seed | 1);
    (0..rows * cols)
        .map(|i| {
            let r = rng.next();
            if r.is_multiple_of(8) {
                0.0
            } else {
                (1.0 + (r >> 40) as f32 / (1u64 << 24) as f32) * (1 + i % cols % 3) as f32
            }
        })
        .collect()
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect()
}

pub fn group<'a>(inspect: &'a Value, name: &str) -> &'a Value {
    inspect["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == json!(name))
        .unwrap_or_else(|| panic!("no group {name} in {inspect}"))
}
