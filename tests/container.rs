//! The container: write → read → restore gives back the original bytes, for
//! every layout; the accessors show what was written; files are read from
//! memory maps, aligned and unaligned buffers; and a file assembled by hand
//! from `docs/FORMAT.md` §6 alone is read (forward compatibility rules).

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use ibp::ErrorKind;
use ibp::Rows;
use ibp::codebook::Codebook;
use ibp::container::{
    self, CompressOptions, ContainerWriter, GroupData, GroupLayout, GroupMeta, IbpFile,
    SectionKind, SourceInfo,
};
use ibp::fit::{FitOptions, fit};
use ibp::io::{
    self, DType, Document, Fingerprint, ParseOptions, Segment, SourceFormat, TensorGroup,
};
use ibp::layout::{Layout, compress_packed};

/// Rows of f32 features with invariant high bits (compressible), seeded.
fn features(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
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

fn noise(n: usize, seed: u64) -> Vec<u8> {
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
fn safetensors(tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) -> Vec<u8> {
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

fn mixed_file() -> Vec<u8> {
    safetensors(&[
        ("emb", "F32", vec![300, 24], features(300, 24, 1)),
        ("bias", "F32", vec![24], features(1, 24, 2)),
        ("tiny", "F32", vec![1, 24], features(1, 24, 3)),
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

fn compress(doc: &Document<'_>, opts: &CompressOptions) -> (Vec<u8>, container::CompressReport) {
    container::compress_document(doc, opts, Vec::new()).unwrap()
}

fn check_restores(file: &IbpFile<'_>, original: &[u8]) {
    let back = file.restore_to_vec().unwrap();
    assert!(
        back == original,
        "restored {} bytes differ from the original {}",
        back.len(),
        original.len()
    );
}

#[test]
fn packed_roundtrip_with_mixed_groups() {
    let original = mixed_file();
    let doc = io::parse(
        &original,
        SourceFormat::Safetensors,
        &ParseOptions::default(),
    )
    .unwrap();
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
            ("empty", GroupLayout::Raw),
            ("ids", GroupLayout::Coded(Layout::Packed))
        ]
    );
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
    assert_eq!(file.group_count(), 6);
    for (g, d) in file.groups().zip(&doc.groups) {
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
    let doc = io::parse(
        &original,
        SourceFormat::Safetensors,
        &ParseOptions::default(),
    )
    .unwrap();
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
        container::compress_document(&doc, &bad, Vec::new())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn progress_reaches_the_total() {
    let original = mixed_file();
    let doc = io::parse(
        &original,
        SourceFormat::Safetensors,
        &ParseOptions::default(),
    )
    .unwrap();
    let max = AtomicU64::new(0);
    let total = AtomicU64::new(0);
    let hook = |d: u64, t: u64| {
        max.fetch_max(d, Ordering::Relaxed);
        total.store(t, Ordering::Relaxed);
    };
    let (bytes, _) = container::compress_document_with_progress(
        &doc,
        &CompressOptions::default(),
        Vec::new(),
        &hook,
    )
    .unwrap();
    assert_eq!(max.load(Ordering::Relaxed), total.load(Ordering::Relaxed));
    assert_eq!(total.load(Ordering::Relaxed), original.len() as u64);

    let file = IbpFile::from_bytes(&bytes).unwrap();
    let (max, total) = (AtomicU64::new(0), AtomicU64::new(0));
    let hook = |d: u64, t: u64| {
        max.fetch_max(d, Ordering::Relaxed);
        total.store(t, Ordering::Relaxed);
    };
    let mut out = Vec::new();
    file.restore_with_progress(&mut out, &hook).unwrap();
    assert_eq!(
        (max.into_inner(), total.into_inner()),
        (original.len() as u64, original.len() as u64)
    );
}

#[test]
fn mmap_and_unaligned_buffers() {
    let original = mixed_file();
    let doc = io::parse(
        &original,
        SourceFormat::Safetensors,
        &ParseOptions::default(),
    )
    .unwrap();
    let (bytes, _) = compress(&doc, &CompressOptions::default());

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
fn writer_api_by_hand() {
    // Two groups of the same rows in two layouts, raw pieces around them.
    let data = features(50, 8, 5);
    let rows = Rows::new(&data, 32).unwrap();
    let f = fit(rows, &FitOptions::default()).unwrap();
    let packed = compress_packed(&f.codebook, rows).unwrap();
    let fixed = ibp::layout::compress_fixed(&f.codebook, rows).unwrap();
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let head = w.add_piece(b"HEAD").unwrap();
    let meta = GroupMeta::new("a", DType::F32, vec![50, 8], 50, 32, &data);
    let a = w
        .add_group(
            meta.clone(),
            GroupData::Packed {
                codebook: &f.codebook,
                threshold: Some(f.threshold),
                packed: packed.view(),
            },
        )
        .unwrap();
    let mid = w.add_piece(b"").unwrap();
    let b = w
        .add_group(
            GroupMeta {
                name: "b".into(),
                ..meta.clone()
            },
            GroupData::Fixed {
                codebook: &f.codebook,
                threshold: None,
                fixed: fixed.view(),
            },
        )
        .unwrap();
    let c = w
        .add_group(
            GroupMeta::new("c", DType::U8, vec![3], 1, 3, b"xyz"),
            GroupData::Raw(b"xyz"),
        )
        .unwrap();
    w.add_note("hello");
    let mut want = b"HEAD".to_vec();
    want.extend(&data);
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
    std::io::Write::write_all(&mut e, &data).unwrap();
    want.extend(e.finish().unwrap());
    want.extend(b"xyz");
    let source = SourceInfo::new(SourceFormat::Raw, Fingerprint::of(&want));
    w.set_source(Some(source.clone()));
    let envelope = [
        Segment::Raw(head),
        Segment::Group(a as usize),
        Segment::Raw(mid),
        Segment::Deflate {
            level: 6,
            inner: vec![Segment::Group(b as usize)],
        },
        Segment::Group(c as usize),
    ];
    let (bytes, len) = w.finish(&envelope).unwrap();
    assert_eq!(len, bytes.len() as u64);
    assert_eq!(len % 64, 0);

    let file = IbpFile::from_bytes(&bytes).unwrap();
    assert_eq!(file.notes(), ["hello"]);
    assert_eq!(file.source(), Some(&source));
    assert_eq!(file.envelope(), &envelope);
    assert_eq!(file.piece(head), Some(&b"HEAD"[..]));
    let ga = file.group(0).unwrap();
    assert_eq!(ga.codebook(), Some(&f.codebook));
    assert_eq!(ga.threshold(), Some(f.threshold));
    let pa = ga.packed().unwrap();
    assert_eq!(
        (pa.flags(), pa.offsets(), pa.payload()),
        (&packed.flags[..], &packed.offsets[..], &packed.payload[..])
    );
    let fb = file.group(1).unwrap().fixed().unwrap();
    assert_eq!(
        (fb.flags(), fb.slots()),
        (&fixed.flags[..], &fixed.slots[..])
    );
    assert_eq!(file.group(1).unwrap().threshold(), None);
    // Restore: HEAD, the data, the deflated data, xyz.
    assert_eq!(file.restore_to_vec().unwrap(), want);
    // The sections are where §6 says, each 64-aligned.
    let kinds: Vec<u32> = file.sections().iter().map(|s| s.kind).collect();
    assert_eq!(kinds, [2, 3, 4, 5, 6, 2, 3, 4, 7, 8, 1]);
    assert!(file.sections().iter().all(|s| s.offset.is_multiple_of(64)));
}

#[test]
fn writer_rejects_inconsistent_input() {
    let data = features(10, 4, 1);
    let rows = Rows::new(&data, 16).unwrap();
    let f = fit(rows, &FitOptions::default()).unwrap();
    let packed = compress_packed(&f.codebook, rows).unwrap();
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let wrong_rows = GroupMeta::new("a", DType::F32, vec![5, 8], 5, 32, &data);
    let e = w.add_group(
        wrong_rows,
        GroupData::Packed {
            codebook: &f.codebook,
            threshold: None,
            packed: packed.view(),
        },
    );
    assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidArgument);
    let short = GroupMeta::new("r", DType::U8, vec![4], 1, 4, b"abc");
    assert_eq!(
        w.add_group(short, GroupData::Raw(b"abc"))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let g = w
        .add_group(
            GroupMeta::new("r", DType::U8, vec![3], 1, 3, b"abc"),
            GroupData::Raw(b"abc"),
        )
        .unwrap();
    let p = w.add_piece(b"p").unwrap();
    // Every group and piece exactly once.
    for env in [
        vec![Segment::Group(g as usize)],
        vec![Segment::Raw(p), Segment::Group(g as usize), Segment::Raw(p)],
    ] {
        let mut w2 = ContainerWriter::new(Vec::new()).unwrap();
        w2.add_group(
            GroupMeta::new("r", DType::U8, vec![3], 1, 3, b"abc"),
            GroupData::Raw(b"abc"),
        )
        .unwrap();
        w2.add_piece(b"p").unwrap();
        assert_eq!(
            w2.finish(&env).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
    let _ = (
        g,
        p,
        Codebook::new(ibp::codebook::ChunkSize::One, vec![0], vec![0]).unwrap(),
    );
}

#[test]
fn writer_refuses_what_the_reader_refuses() {
    // A dtype named like a known type but of another size: the reader
    // refuses the manifest, so the writer must refuse the group.
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let odd = DType::Other {
        name: "f32".into(),
        size: 3,
    };
    let e = w.add_group(
        GroupMeta::new("t", odd, vec![2], 1, 6, b"abcdef"),
        GroupData::Raw(b"abcdef"),
    );
    assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidArgument);

    // A packed form whose offsets do not tile its payload: the reader's
    // validation refuses it, so must the writer.
    let data = features(16, 4, 3);
    let rows = Rows::new(&data, 16).unwrap();
    let f = fit(rows, &FitOptions::default()).unwrap();
    let mut packed = compress_packed(&f.codebook, rows).unwrap();
    packed.offsets[1] = packed.offsets[2] + 1;
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let e = w.add_group(
        GroupMeta::new("p", DType::F32, vec![16, 4], 16, 16, &data),
        GroupData::Packed {
            codebook: &f.codebook,
            threshold: None,
            packed: packed.view(),
        },
    );
    assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidArgument);
}

#[test]
fn restore_needs_the_original_fingerprint() {
    // Without `source`, nothing checks the envelope: here a deflate level
    // that shapes the restored bytes. Such a container opens (to inspect)
    // but does not restore.
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let g = w
        .add_group(
            GroupMeta::new("r", DType::U8, vec![3], 1, 3, b"abc"),
            GroupData::Raw(b"abc"),
        )
        .unwrap();
    let (bytes, _) = w
        .finish(&[Segment::Deflate {
            level: 9,
            inner: vec![Segment::Group(g as usize)],
        }])
        .unwrap();
    let file = IbpFile::from_bytes(&bytes).unwrap();
    assert_eq!(file.group(0).unwrap().decompress().unwrap(), b"abc");
    let e = file.restore_to_vec().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(e.message().contains("records no length and hash"), "{e}");
}

#[test]
fn group_hash_mismatch_is_caught() {
    // A writer handed a wrong hash produces a file whose restore fails.
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let mut meta = GroupMeta::new("r", DType::U8, vec![3], 1, 3, b"abc");
    meta.xxh3 ^= 1;
    w.set_source(Some(SourceInfo::new(
        SourceFormat::Raw,
        Fingerprint::of(b"abc"),
    )));
    let g = w.add_group(meta, GroupData::Raw(b"abc")).unwrap();
    let (bytes, _) = w.finish(&[Segment::Group(g as usize)]).unwrap();
    let file = IbpFile::from_bytes(&bytes).unwrap();
    assert_eq!(
        file.restore_to_vec().unwrap_err().kind(),
        ErrorKind::Corrupt
    );
}

#[test]
fn source_fingerprint_is_checked_on_restore() {
    let data = features(20, 4, 2);
    let mut doc = io::parse(
        &data,
        SourceFormat::Raw,
        &ParseOptions::default().with_raw(DType::F32, Some(vec![20, 4])),
    )
    .unwrap();
    doc.original.xxh3 ^= 1;
    let (bytes, _) = compress(&doc, &CompressOptions::default());
    let e = IbpFile::from_bytes(&bytes)
        .unwrap()
        .restore_to_vec()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(e.message().contains("differs from the original"), "{e}");
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

// ------------------------------------------------------------ by hand

/// Parse the directory of a container as §6 describes it.
fn sections_of(bytes: &[u8]) -> Vec<(u32, u16, u32, Vec<u8>)> {
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
fn assemble(version: u16, sections: &[(u32, u16, u32, Vec<u8>)]) -> Vec<u8> {
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

#[test]
fn a_shape_of_a_million_dimensions_is_refused() {
    // Ones do not change the element count, so only a limit on the number
    // of dimensions stops a small manifest from costing gigabytes to read
    // and print (issue 15: 37.7 MB took 1.34 GB to inspect).
    let original = mixed_file();
    let doc = io::parse(
        &original,
        SourceFormat::Safetensors,
        &ParseOptions::default(),
    )
    .unwrap();
    let (bytes, _) = compress(&doc, &CompressOptions::default());
    let mut secs = sections_of(&bytes);
    let mi = secs
        .iter()
        .position(|s| s.0 == SectionKind::Manifest as u32)
        .unwrap();
    let mut json: serde_json::Value = serde_json::from_slice(&secs[mi].3).unwrap();
    let mut shape = json["groups"][0]["shape"].as_array().unwrap().clone();
    let at_limit = shape.len()..io::MAX_DIMS;
    shape.extend(at_limit.map(|_| serde_json::json!(1)));
    json["groups"][0]["shape"] = serde_json::Value::Array(shape.clone());
    secs[mi].3 = serde_json::to_vec(&json).unwrap();
    // 64 dimensions still open and restore.
    check_restores(
        &IbpFile::from_bytes(&assemble(1, &secs)).unwrap(),
        &original,
    );
    shape.extend((0..1_000_000).map(|_| serde_json::json!(1)));
    json["groups"][0]["shape"] = serde_json::Value::Array(shape);
    secs[mi].3 = serde_json::to_vec(&json).unwrap();
    let e = IbpFile::from_bytes(&assemble(1, &secs)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(e.message().contains("at most 64"), "{e}");
    // And the writer does not write one.
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let e = w
        .add_group(
            GroupMeta::new("t", DType::U8, vec![1; 65], 1, 1, b"x"),
            GroupData::Raw(b"x"),
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn hand_assembled_files_and_forward_compatibility() {
    let original = mixed_file();
    let doc = io::parse(
        &original,
        SourceFormat::Safetensors,
        &ParseOptions::default(),
    )
    .unwrap();
    let (bytes, _) = compress(&doc, &CompressOptions::default());
    let secs = sections_of(&bytes);
    // Reassembling the same sections per the spec gives the same file.
    assert!(assemble(1, &secs) == bytes);

    // An unknown optional section anywhere is skipped.
    let mut extra = secs.clone();
    extra.insert(2, (77, 0, 0, b"from the future".to_vec()));
    extra.push((78, 0, u32::MAX, vec![]));
    let file_bytes = assemble(1, &extra);
    let file = IbpFile::from_bytes(&file_bytes).unwrap();
    check_restores(&file, &original);
    assert_eq!(file.sections().len(), secs.len() + 2);

    // An unknown required one is refused, as is a newer version.
    let mut req = secs.clone();
    req.push((77, 1, 0, b"needed".to_vec()));
    assert_eq!(
        IbpFile::from_bytes(&assemble(1, &req))
            .err()
            .unwrap()
            .kind(),
        ErrorKind::Unsupported
    );
    assert_eq!(
        IbpFile::from_bytes(&assemble(2, &secs))
            .err()
            .unwrap()
            .kind(),
        ErrorKind::Unsupported
    );

    // Unknown manifest keys are ignored.
    let mi = secs
        .iter()
        .position(|s| s.0 == SectionKind::Manifest as u32)
        .unwrap();
    let mut json: serde_json::Value = serde_json::from_slice(&secs[mi].3).unwrap();
    json["future_key"] = serde_json::json!({"x": 1});
    json["groups"][0]["future_group_key"] = serde_json::json!(true);
    let mut keyed = secs.clone();
    keyed[mi].3 = serde_json::to_vec(&json).unwrap();
    check_restores(
        &IbpFile::from_bytes(&assemble(1, &keyed)).unwrap(),
        &original,
    );

    // A source format this ibp does not know still restores.
    let mut json: serde_json::Value = serde_json::from_slice(&secs[mi].3).unwrap();
    json["source"]["format"] = serde_json::json!("gguf");
    let mut fmt = secs.clone();
    fmt[mi].3 = serde_json::to_vec(&json).unwrap();
    let fmt_bytes = assemble(1, &fmt);
    let f = IbpFile::from_bytes(&fmt_bytes).unwrap();
    assert_eq!(f.source().unwrap().source_format(), None);
    check_restores(&f, &original);

    // Sections in another order (manifest first) are fine too.
    let mut reordered = secs.clone();
    let m = reordered.remove(mi);
    reordered.insert(0, m);
    check_restores(
        &IbpFile::from_bytes(&assemble(1, &reordered)).unwrap(),
        &original,
    );

    // A group with a missing section, or a section of a group that does not
    // exist, is corrupt.
    let mut missing = secs.clone();
    let pi = missing
        .iter()
        .position(|s| s.0 == SectionKind::Offsets as u32)
        .unwrap();
    missing.remove(pi);
    assert_eq!(
        IbpFile::from_bytes(&assemble(1, &missing))
            .err()
            .unwrap()
            .kind(),
        ErrorKind::Corrupt
    );
    let mut stray = secs.clone();
    stray.push((SectionKind::Flags as u32, 1, 99, vec![0]));
    assert_eq!(
        IbpFile::from_bytes(&assemble(1, &stray))
            .err()
            .unwrap()
            .kind(),
        ErrorKind::Corrupt
    );
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

fn data_file(name: &str) -> Option<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("IBP_DATA_DIR") {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
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
fn packed_group_claiming_more_than_its_payload_is_refused_at_open() {
    // 100000 rows of 4 KiB "encoded" in 0 bytes each: 400 MB to allocate
    // from a file of a few kilobytes. Open must refuse before decompressing.
    let (n, l) = (100_000u64, 4096u64);
    let manifest = serde_json::json!({
        "groups": [{
            "name": "bomb", "dtype": "u8", "elem_bytes": 1, "shape": [n, l], "rows": n, "row_bytes": l,
            "layout": "packed", "chunk_bytes": 8, "xxh3": "0000000000000000"
        }],
        "envelope": [{"group": 0}]
    });
    let sections = vec![
        (
            3u32,
            1u16,
            0u32,
            vec![0xffu8; 2 * l as usize]
                .into_iter()
                .enumerate()
                .map(|(i, b)| if i < l as usize { b } else { 0 })
                .collect(),
        ),
        (4, 1, 0, vec![0xff; (n / 8) as usize]),
        (5, 1, 0, vec![0; 8 * (n as usize + 1)]),
        (6, 1, 0, vec![]),
        (1, 1, u32::MAX, serde_json::to_vec(&manifest).unwrap()),
    ];
    let e = IbpFile::from_bytes(&assemble(1, &sections)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(e.message().contains("payload cannot hold"), "{e}");
}

// ------------------------------------------------------------- golden

/// The golden file's contents, built with an explicit codebook so that only
/// the format (and the codec of §1–§3) decide its bytes.
fn golden_v1_build() -> (Vec<u8>, Vec<u8>) {
    use ibp::codebook::ChunkSize;
    // 6 tensors of 5 bytes; the codebook fixes the top nibble of bytes 0-3.
    let rows: Vec<u8> = (0u8..30)
        .map(|i| {
            if i % 5 == 4 {
                i.wrapping_mul(37)
            } else {
                0x30 | (i & 0x0f)
            }
        })
        .collect();
    let cb = Codebook::new(
        ChunkSize::Two,
        vec![0xf0, 0xf0, 0xf0, 0xf0, 0],
        vec![0x30, 0x30, 0x30, 0x30, 0],
    )
    .unwrap();
    let packed = compress_packed(&cb, Rows::new(&rows, 5).unwrap()).unwrap();
    let mut original = b"HDR:".to_vec();
    original.extend(&rows);
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
    std::io::Write::write_all(&mut e, b"in").unwrap();
    std::io::Write::write_all(&mut e, b"xyz").unwrap();
    original.extend(e.finish().unwrap());

    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    w.set_source(Some(SourceInfo::new(
        SourceFormat::Npz,
        Fingerprint::of(&original),
    )));
    let hdr = w.add_piece(b"HDR:").unwrap();
    let g = w
        .add_group(
            GroupMeta::new("g", DType::U8, vec![6, 5], 6, 5, &rows),
            GroupData::Packed {
                codebook: &cb,
                threshold: Some(ibp::codebook::Threshold::from_basis_points(9000).unwrap()),
                packed: packed.view(),
            },
        )
        .unwrap();
    let inn = w.add_piece(b"in").unwrap();
    let r = w
        .add_group(
            GroupMeta::new("r", DType::U8, vec![3], 1, 3, b"xyz"),
            GroupData::Raw(b"xyz"),
        )
        .unwrap();
    let envelope = [
        Segment::Raw(hdr),
        Segment::Group(g as usize),
        Segment::Deflate {
            level: 6,
            inner: vec![Segment::Raw(inn), Segment::Group(r as usize)],
        },
    ];
    (w.finish(&envelope).unwrap().0, original)
}

/// A version-1 container, frozen. Never regenerate it: every later ibp
/// must read this exact file (FORMAT.md §6.7).
const GOLDEN_V1_HEX: &str = concat!(
    "894942500d0a1a0a01004000000000000000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000923d66b01cffec234844523a00000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000000f0f0f0f0003030303000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "3f0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000040000000000000008000000000000000c00000000000000",
    "10000000000000001400000000000000180000000000000000000000000000008790a1042f3b6c02d7e536007f08f905",
    "a7b2c3034f5d8e0100000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "696e00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000078797a0000000000000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000000000000000000000000000000000007b22736f75726365223a7b22666f726d",
    "6174223a226e707a222c226c656e677468223a34312c2278786833223a2230633166623034306665636466376631227d",
    "2c2267726f757073223a5b7b226e616d65223a2267222c226474797065223a227538222c22656c656d5f627974657322",
    "3a312c227368617065223a5b362c355d2c22726f7773223a362c22726f775f6279746573223a352c226c61796f757422",
    "3a227061636b6564222c226368756e6b5f6279746573223a322c227468726573686f6c645f6270223a393030302c2278",
    "786833223a2266313138363435326330663738373935227d2c7b226e616d65223a2272222c226474797065223a227538",
    "222c22656c656d5f6279746573223a312c227368617065223a5b335d2c22726f7773223a312c22726f775f6279746573",
    "223a332c226c61796f7574223a22726177222c2278786833223a2236323736643236353666343131663166227d5d2c22",
    "656e76656c6f7065223a5b7b227069656365223a307d2c7b2267726f7570223a307d2c7b226465666c617465223a7b22",
    "656e67696e65223a227a6c6962222c226c6576656c223a362c22696e6e6572223a5b7b227069656365223a317d2c7b22",
    "67726f7570223a317d5d7d7d5d7d00000000000000000000000000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000200000001000000000000000000000040000000000000000400000000000000",
    "e870507daa6cc31100000000000000000300000001000000000000000000000080000000000000000a00000000000000",
    "b55517da1c254b35000000000000000004000000010000000000000000000000c0000000000000000100000000000000",
    "0b69fe195f30728b00000000000000000500000001000000000000000000000000010000000000003800000000000000",
    "384a2084b15a394800000000000000000600000001000000000000000000000040010000000000001800000000000000",
    "4ccd211c4ecb557400000000000000000200000001000000010000000000000080010000000000000200000000000000",
    "a6f9de568a8d0648000000000000000008000000010000000100000000000000c0010000000000000300000000000000",
    "1f1f416f65d2766200000000000000000100000001000000ffffffff000000000002000000000000ce01000000000000",
    "7f045bdc085557f2000000000000000089494250454e440a00040000000000000800000000000000105077d3d7acb1e9",
    "c005000000000000010000000000000000000000000000007d3df8fe835f0b3a",
);

#[test]
fn golden_v1_file() {
    let (built, original) = golden_v1_build();
    let hex: String = built.iter().map(|b| format!("{b:02x}")).collect();
    let golden: Vec<u8> = (0..GOLDEN_V1_HEX.len() / 2)
        .map(|i| u8::from_str_radix(&GOLDEN_V1_HEX[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    assert!(
        golden == built,
        "the writer no longer produces the golden v1 file; it now writes\n{hex}"
    );
    let file = IbpFile::from_bytes(&golden).unwrap();
    assert_eq!(file.restore_to_vec().unwrap(), original);
    let g = file.find_group("g").unwrap();
    assert_eq!((g.rows(), g.row_bytes(), g.stats().encoded_rows), (6, 5, 6));
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
    let doc = io::parse(
        &original,
        SourceFormat::Safetensors,
        &ParseOptions::default(),
    )
    .unwrap();
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
