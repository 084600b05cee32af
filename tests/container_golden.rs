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
//! `IBP_WRITE_GOLDEN=1 cargo test --test container_golden`.

mod common;

use std::path::PathBuf;

use ibp::container::{GroupLayout, IbpFile};
use ibp::io::{self, Fingerprint, SourceFormat};
use ibp::layout::Layout;
use ibp::pipeline::{Clustering, CompressOptions, compress_document};

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
