//! The container: write → read → restore gives back the original bytes, for
//! every layout; the accessors show what was written; files are read from
//! memory maps, aligned and unaligned buffers; the batch size changes no
//! byte. The writer by hand and the hashes a restore checks are in
//! `container_writer.rs`; files assembled from `docs/FORMAT.md` §6 alone
//! (forward compatibility rules) and the golden file in
//! `container_format.rs`.

mod common;

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use ibp::ErrorKind;
use ibp::Rows;
use ibp::container::{GroupLayout, IbpFile, RestoreOptions, SourceInfo};
use ibp::fit::{FitOptions, fit};
use ibp::io::{
    self, DType, Document, Fingerprint, ParseOptions, Segment, SourceFormat, TensorGroup,
};
use ibp::layout::Layout;
use ibp::pipeline::{self, CompressOptions};

use common::container::*;
use common::data_file;

#[test]
fn packed_roundtrip_with_mixed_groups() {
    let original = mixed_file();
    let doc = parse_safetensors(&original);
    let (bytes, report) = compress(&doc, &CompressOptions::default());
    assert_eq!(report.output_bytes, bytes.len() as u64);
    assert_eq!(report.input_bytes, original.len() as u64);
    let layouts: Vec<(&str, GroupLayout)> = report
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.layout))
        .collect();
    assert_eq!(
        layouts,
        [
            ("emb", GroupLayout::Coded(Layout::Packed)),
            ("bias", GroupLayout::Raw),
            ("tiny", GroupLayout::Raw),
            ("noise", GroupLayout::Raw),
            ("ids", GroupLayout::Coded(Layout::Packed))
        ]
    );
    // `empty` (0 bytes) is under TINY_TENSOR_BYTES: no group.
    assert_eq!(report.verbatim_tensors, 1);
    assert!(
        report.groups[3]
            .raw_reason
            .as_deref()
            .unwrap()
            .contains("not smaller"),
        "{:?}",
        report.groups[3]
    );
    assert!(
        bytes.len() < original.len(),
        "{} >= {}",
        bytes.len(),
        original.len()
    );

    let file = IbpFile::from_bytes(&bytes).unwrap();
    check_restores(&file, &original);
    assert_eq!(file.version(), 1);
    assert_eq!(
        file.source(),
        Some(&SourceInfo::new(
            SourceFormat::Safetensors,
            Fingerprint::of(&original)
        ))
    );
    assert_eq!(
        file.source().unwrap().source_format(),
        Some(SourceFormat::Safetensors)
    );
    assert_eq!(file.group_count(), 5);
    for g in file.groups() {
        let d = doc.groups.iter().find(|d| d.name == g.name()).unwrap();
        assert_eq!(
            (g.name(), g.dtype(), g.shape()),
            (d.name.as_str(), &d.dtype, &d.shape[..])
        );
        assert!(g.decompress().unwrap() == d.data[..], "group {}", d.name);
    }
    let emb = file.find_group("emb").unwrap();
    assert_eq!((emb.rows(), emb.row_bytes()), (300, 96));
    assert_eq!(emb.layout(), GroupLayout::Coded(Layout::Packed));
    assert!(emb.packed().is_some() && emb.fixed().is_none() && emb.raw().is_none());
    let st = emb.stats();
    assert_eq!(st.original_bytes, 300 * 96);
    assert!(
        st.encoded_rows > 0 && st.stored_bytes < st.original_bytes,
        "{st:?}"
    );
    assert_eq!(report.groups[0].stats, st);
    assert!(emb.threshold().is_some());
    // The codebook is the one a fit of the same rows chooses.
    let fitted = fit(
        Rows::new(&doc.groups[0].data, 96).unwrap(),
        &FitOptions::default(),
    )
    .unwrap();
    assert_eq!(emb.codebook(), Some(&fitted.codebook));
    let bias = file.find_group("bias").unwrap();
    assert_eq!(bias.raw(), Some(&doc.groups[1].data[..]));
    assert!(bias.codebook().is_none());
}

#[test]
fn fixed_stride_and_raw_layouts() {
    let original = mixed_file();
    let doc = parse_safetensors(&original);
    for layout in [GroupLayout::Coded(Layout::FixedStride), GroupLayout::Raw] {
        let (bytes, report) = compress(&doc, &CompressOptions::default().with_layout(layout));
        let file = IbpFile::from_bytes(&bytes).unwrap();
        check_restores(&file, &original);
        let emb = file.find_group("emb").unwrap();
        assert_eq!(emb.layout(), layout);
        assert_eq!(report.groups[0].layout, layout);
        if layout == GroupLayout::Coded(Layout::FixedStride) {
            let f = emb.fixed().unwrap();
            assert_eq!(f.slots().len(), 300 * 96);
            assert!(emb.packed().is_none());
            // Fixed stride keeps "noise" too: it never claims to be smaller.
            assert_eq!(
                file.find_group("noise").unwrap().layout(),
                GroupLayout::Coded(Layout::FixedStride)
            );
        } else {
            assert!(file.groups().all(|g| g.codebook().is_none()));
        }
        // Row access by index agrees with the whole-group decompression.
        let all = emb.decompress().unwrap();
        let mut some = vec![0u8; 3 * 96];
        emb.decompress_rows(100..103, &mut some).unwrap();
        assert_eq!(&some[..], &all[100 * 96..103 * 96]);
    }
}

#[test]
fn row_length_override_and_verify_off() {
    let data = features(64, 16, 9);
    let original = data.clone();
    let doc = io::parse(
        &original,
        SourceFormat::Raw,
        &ParseOptions::default().with_raw(DType::F32, None),
    )
    .unwrap();
    // 1-D: raw by default ...
    let (bytes, report) = compress(&doc, &CompressOptions::default());
    assert_eq!(report.groups[0].layout, GroupLayout::Raw);
    check_restores(&IbpFile::from_bytes(&bytes).unwrap(), &original);
    // ... compressed when given a row length.
    let opts = CompressOptions::default()
        .with_row_len("array", 16)
        .with_verify(false);
    let (bytes, report) = compress(&doc, &opts);
    assert_eq!(report.groups[0].layout, GroupLayout::Coded(Layout::Packed));
    let file = IbpFile::from_bytes(&bytes).unwrap();
    assert_eq!(
        (
            file.group(0).unwrap().rows(),
            file.group(0).unwrap().row_bytes()
        ),
        (64, 64)
    );
    check_restores(&file, &original);
    let bad = CompressOptions::default().with_row_len("array", 7);
    assert_eq!(
        pipeline::compress_document(&doc, &bad, Vec::new())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn progress_reaches_the_total() {
    let original = mixed_file();
    let doc = parse_safetensors(&original);
    let max = AtomicU64::new(0);
    let total = AtomicU64::new(0);
    let hook = |d: u64, t: u64| {
        max.fetch_max(d, Ordering::Relaxed);
        total.store(t, Ordering::Relaxed);
    };
    let opts = CompressOptions::default().with_progress(&hook);
    let (bytes, _) = pipeline::compress_document(&doc, &opts, Vec::new()).unwrap();
    assert_eq!(max.load(Ordering::Relaxed), total.load(Ordering::Relaxed));
    assert_eq!(total.load(Ordering::Relaxed), original.len() as u64);

    let file = IbpFile::from_bytes(&bytes).unwrap();
    let (max, total) = (AtomicU64::new(0), AtomicU64::new(0));
    let hook = |d: u64, t: u64| {
        max.fetch_max(d, Ordering::Relaxed);
        total.store(t, Ordering::Relaxed);
    };
    let mut out = Vec::new();
    let opts = RestoreOptions::default().with_progress(&hook);
    file.restore(&mut out, &opts).unwrap();
    assert_eq!(
        (max.into_inner(), total.into_inner()),
        (original.len() as u64, original.len() as u64)
    );
}

#[test]
fn mmap_and_unaligned_buffers() {
    let (original, bytes) = mixed_container();

    let dir = std::env::temp_dir().join(format!("ibp-container-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mixed.ibp");
    std::fs::write(&path, &bytes).unwrap();
    let file = IbpFile::open(&path).unwrap();
    check_restores(&file, &original);
    // In place: the payload view points into the mapping.
    let p = file.find_group("emb").unwrap().packed().unwrap();
    let base = file.bytes().as_ptr() as usize;
    let at = p.payload().as_ptr() as usize - base;
    assert!(at < bytes.len() && at.is_multiple_of(64));
    assert!(matches!(p.offsets().as_ptr() as usize % 8, 0));
    drop(file);
    std::fs::remove_dir_all(&dir).unwrap();

    // A buffer starting at an odd address: offsets are copied, results equal.
    let mut shifted = vec![0u8; bytes.len() + 1];
    shifted[1..].copy_from_slice(&bytes);
    let file = IbpFile::from_bytes(&shifted[1..]).unwrap();
    check_restores(&file, &original);
    let owned = IbpFile::from_vec(bytes.clone()).unwrap();
    check_restores(&owned, &original);
    let doc2 = owned.to_document().unwrap();
    assert_eq!(doc2.restore_to_vec().unwrap(), original);
}

#[test]
fn document_with_deflate_segments_roundtrips() {
    // A document as the npz reader makes it: a deflated group.
    let data = features(40, 10, 8);
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(9));
    std::io::Write::write_all(&mut e, b"hdr").unwrap();
    std::io::Write::write_all(&mut e, &data).unwrap();
    let mut original = b"zip-ish".to_vec();
    original.extend(e.finish().unwrap());
    let doc = Document {
        format: SourceFormat::Npz,
        groups: vec![TensorGroup {
            name: "x".into(),
            dtype: DType::F32,
            shape: vec![40, 10],
            data: Cow::Borrowed(&data),
        }],
        envelope: vec![
            Segment::Raw(Cow::Borrowed(&b"zip-ish"[..])),
            Segment::Deflate {
                level: 9,
                inner: vec![Segment::Raw(Cow::Borrowed(&b"hdr"[..])), Segment::Group(0)],
            },
        ],
        original: Fingerprint::of(&original),
        notes: vec!["n".into()],
        deferred: Vec::new(),
    };
    assert_eq!(doc.restore_to_vec().unwrap(), original);
    let (bytes, report) = compress(&doc, &CompressOptions::default());
    assert_eq!(report.notes, ["n"]);
    let file = IbpFile::from_bytes(&bytes).unwrap();
    check_restores(&file, &original);
}

#[test]
fn empty_document() {
    let doc = Document {
        format: SourceFormat::Raw,
        groups: vec![],
        envelope: vec![],
        original: Fingerprint::of(b""),
        notes: vec![],
        deferred: Vec::new(),
    };
    let (bytes, _) = compress(&doc, &CompressOptions::default());
    let file = IbpFile::from_bytes(&bytes).unwrap();
    assert_eq!(file.group_count(), 0);
    assert_eq!(file.restore_to_vec().unwrap(), b"");
}

#[test]
fn cora_features_through_the_container() {
    let Some(path) = data_file("cora-features.npz") else {
        println!("skipped: cora-features.npz not found");
        return;
    };
    let input = io::InputFile::open(&path).unwrap();
    let doc = io::parse(input.bytes(), SourceFormat::Npz, &ParseOptions::default()).unwrap();
    let (bytes, report) = compress(&doc, &CompressOptions::default());
    assert_eq!(report.groups[0].layout, GroupLayout::Coded(Layout::Packed));
    let file = IbpFile::from_bytes(&bytes).unwrap();
    check_restores(&file, input.bytes());
    let st = file.find_group("features").unwrap().stats();
    println!(
        "cora: npz {} bytes -> ibp {} bytes; features {} -> {} bytes ({:.1}x), {} of {} rows encoded",
        input.bytes().len(),
        bytes.len(),
        st.original_bytes,
        st.stored_bytes,
        st.ratio(),
        st.encoded_rows,
        st.rows
    );
    assert!(st.ratio() > 2.0, "{st:?}");
}

#[test]
fn deferred_npz_members_give_the_same_container() {
    // The embedded Cora npz: one deflated member. Deferred, its group's
    // data is inflated only when used, and everything comes out the same.
    let original = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/cora-features.npz"
    ))
    .unwrap();
    let eager = io::parse(&original, SourceFormat::Npz, &ParseOptions::default()).unwrap();
    let lazy = io::parse(
        &original,
        SourceFormat::Npz,
        &ParseOptions::default().with_deferred_inflate(true),
    )
    .unwrap();
    assert!(eager.deferred.is_empty());
    assert_eq!(lazy.deferred.len(), lazy.groups.len());
    assert!(lazy.groups.iter().all(|g| g.data.is_empty()));
    for i in 0..eager.groups.len() {
        assert!(lazy.group_data(i).unwrap() == eager.group_data(i).unwrap());
        assert_eq!(lazy.group_len(i), eager.groups[i].data.len() as u64);
    }
    assert_eq!(lazy.group_bytes(), eager.group_bytes());
    assert!(lazy.restore_to_vec().unwrap() == original);
    let opts = CompressOptions::default();
    assert!(compress(&lazy, &opts).0 == compress(&eager, &opts).0);
    assert!(lazy.group_data(lazy.groups.len()).is_err());
}

/// Compression runs one batch of rows at a time (bounded memory); the
/// batch size must not change a byte of the container or of the report,
/// in either layout, with batches of one row (the flag bitmap's bytes
/// then span batches), of a number of rows that is not a multiple of 8,
/// and of a whole group.
#[test]
fn batch_size_does_not_change_the_container() {
    let original = mixed_file();
    let doc = parse_safetensors(&original);
    for layout in [
        GroupLayout::Coded(Layout::Packed),
        GroupLayout::Coded(Layout::FixedStride),
    ] {
        let opts = CompressOptions::default().with_layout(layout);
        let (whole, report) = compress(&doc, &opts);
        assert!(report.groups.iter().any(|g| g.layout == layout));
        // "emb" has rows of 96 bytes: 120 bytes of batch each.
        for batch in [1, 360, 960, 1560, 100_000] {
            let (bytes, r) = compress(&doc, &opts.clone().with_batch_bytes(batch));
            assert!(bytes == whole, "{layout:?}, batches of {batch} bytes");
            assert_eq!(r, report, "{layout:?}, batches of {batch} bytes");
        }
        check_restores(&IbpFile::from_bytes(&whole).unwrap(), &original);
    }
}
