//! Golden containers of format version 1, one per layout (packed, fixed,
//! raw, clustered), decoded forever (`docs/FORMAT.md` §6.7): each file in
//! `tests/golden/` must restore to the bytes whose length and xxh3-64 are
//! recorded beside it (`NAME.ibp.expected`), and its group must be stored
//! in the layout its name says. The files were written once from real data
//! (a corner of Cora's features: 64 papers × 128 words, an npy file) and
//! are never regenerated when the writer changes: an ibp that cannot read
//! them breaks the compatibility promise.
//!
//! To write them (only for a new format version, or a new layout):
//! `IBP_WRITE_GOLDEN=1 cargo test --test container_golden`. The
//! float-coded one (`v1-float.ibp`) is made from a synthetic bf16
//! safetensors file built here, so it needs no data set; write it alone
//! with `IBP_WRITE_GOLDEN=1 cargo test --test container_golden golden_float`.

mod common;

use std::path::PathBuf;

use ibp::container::{GroupLayout, IbpFile};
use ibp::io::{self, Fingerprint, SourceFormat};
use ibp::layout::Layout;
use ibp::pipeline::{Clustering, Coding, CompressOptions, compress_document};

/// The golden files: name, layout asked for, clusters, layout stored.
const GOLDEN: [(&str, GroupLayout, Clustering, GroupLayout); 4] = [
    (
        "v1-packed",
        GroupLayout::Coded(Layout::Packed),
        Clustering::Off,
        GroupLayout::Coded(Layout::Packed),
    ),
    (
        "v1-fixed",
        GroupLayout::Coded(Layout::FixedStride),
        Clustering::Off,
        GroupLayout::Coded(Layout::FixedStride),
    ),
    (
        "v1-raw",
        GroupLayout::Raw,
        Clustering::Off,
        GroupLayout::Raw,
    ),
    (
        "v1-clustered",
        GroupLayout::Coded(Layout::Packed),
        Clustering::Fixed(4),
        GroupLayout::Clustered,
    ),
];

const ROWS: usize = 64;
const COLS: usize = 128;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The input: rows 0..64, columns 0..128 of Cora's features (f32), as an
/// npy file.
fn cora_corner_npy() -> Vec<u8> {
    let path = common::data_file("cora-features.npz").expect("cora-features.npz (data/)");
    let f = io::InputFile::open(&path).unwrap();
    let doc = io::parse(f.bytes(), SourceFormat::Npz, &Default::default()).unwrap();
    let g = &doc.groups[0];
    let row_bytes = g.row_shape(None).unwrap().row_bytes as usize;
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({ROWS}, {COLS}), }}");
    // Magic, version 1.0, the header's length, the header padded with
    // spaces and ended by a newline to a multiple of 64 bytes.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for r in 0..ROWS {
        out.extend_from_slice(&g.data[r * row_bytes..][..COLS * 4]);
    }
    out
}

/// `len xxh3` of `bytes`, as the `.expected` files hold it.
fn expected_line(bytes: &[u8]) -> String {
    let f = Fingerprint::of(bytes);
    format!("{} {:016x}\n", f.len, f.xxh3)
}

#[test]
fn golden_files_of_every_layout_decode() {
    if std::env::var("IBP_WRITE_GOLDEN").is_ok_and(|v| v == "1") {
        write_golden();
    }
    for (name, _, _, stored) in GOLDEN {
        let path = golden_dir().join(format!("{name}.ibp"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let expected = std::fs::read_to_string(path.with_extension("ibp.expected")).unwrap();
        let file = IbpFile::from_bytes(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let g = file.group(0).unwrap();
        assert_eq!(g.layout(), stored, "{name}: stored layout");
        assert_eq!((g.rows(), g.row_bytes()), (ROWS as u64, 4 * COLS as u64));
        // One group decoded alone, and the whole original file restored.
        let group_rows = g.decompress().unwrap();
        assert_eq!(group_rows.len(), ROWS * COLS * 4, "{name}");
        let restored = file.restore_to_vec().unwrap();
        assert_eq!(expected_line(&restored), expected, "{name}: restored bytes");
        assert!(restored.ends_with(&group_rows), "{name}: the group's rows");
    }
}

/// Write every golden file and its expected hash (`IBP_WRITE_GOLDEN=1`).
fn write_golden() {
    let npy = cora_corner_npy();
    let doc = io::parse(&npy, SourceFormat::Npy, &Default::default()).unwrap();
    for (name, layout, clusters, stored) in GOLDEN {
        let opts = CompressOptions::default()
            .with_layout(layout)
            .with_clusters(clusters);
        let (bytes, report) = compress_document(&doc, &opts, Vec::new()).unwrap();
        assert_eq!(report.groups[0].layout, stored, "{name}");
        let path = golden_dir().join(format!("{name}.ibp"));
        std::fs::write(&path, &bytes).unwrap();
        std::fs::write(path.with_extension("ibp.expected"), expected_line(&npy)).unwrap();
    }
}

/// The float-coded golden file (`docs/FORMAT.md` §6.9): one bf16 tensor
/// of 64 rows of 96 values, float-coded, from [`synthetic_bf16`].
const FLOAT_GOLDEN: &str = "v1-float";

/// A safetensors file of one bf16 tensor `w` of shape [64, 96], whose
/// values are a fixed bell-shaped spread (a hash of the index, cubed):
/// built here, so that the float golden file needs no data set.
fn synthetic_bf16() -> Vec<u8> {
    let (rows, cols) = (64usize, 96usize);
    let data: Vec<u8> = (0..(rows * cols) as u32)
        .flat_map(|i| {
            let x = (i.wrapping_mul(2_654_435_761) >> 20) as f32 / 4096.0 - 0.5;
            let v = ((x * x * x * 0.3 + x * 0.01).to_bits() >> 16) as u16;
            v.to_le_bytes()
        })
        .collect();
    let mut header = format!(
        "{{\"w\":{{\"dtype\":\"BF16\",\"shape\":[{rows},{cols}],\"data_offsets\":[0,{}]}}}}",
        data.len()
    );
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

#[test]
fn golden_float_file_decodes() {
    let path = golden_dir().join(format!("{FLOAT_GOLDEN}.ibp"));
    let src = synthetic_bf16();
    if std::env::var("IBP_WRITE_GOLDEN").is_ok_and(|v| v == "1") {
        let doc = io::parse(&src, SourceFormat::Safetensors, &Default::default()).unwrap();
        let opts = CompressOptions::default().with_coding(Coding::Float);
        let (bytes, report) = compress_document(&doc, &opts, Vec::new()).unwrap();
        assert_eq!(report.groups[0].layout, GroupLayout::Float);
        std::fs::write(&path, &bytes).unwrap();
        std::fs::write(path.with_extension("ibp.expected"), expected_line(&src)).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected = std::fs::read_to_string(path.with_extension("ibp.expected")).unwrap();
    let file = IbpFile::from_bytes(&bytes).unwrap();
    let g = file.group(0).unwrap();
    assert_eq!(g.layout(), GroupLayout::Float);
    assert_eq!((g.rows(), g.row_bytes()), (64, 192));
    let f = g.float().expect("a float-coded group has its coded form");
    assert!(f.coded_rows() > 0, "no row was coded");
    assert!(g.stats().stored_bytes < 64 * 192, "not smaller than raw");
    // The group alone, a range of rows, and the whole file restored.
    let rows = g.decompress().unwrap();
    let mut some = vec![0u8; 5 * 192];
    g.decompress_rows(30..35, &mut some).unwrap();
    assert_eq!(some, rows[30 * 192..35 * 192]);
    let restored = file.restore_to_vec().unwrap();
    assert_eq!(expected_line(&restored), expected, "restored bytes");
    assert!(
        restored == src,
        "the golden file restores to the synthetic document"
    );
}
