//! The container writer's API by hand, what it refuses (what the reader
//! would refuse), and the hashes a restore checks: each group's and the
//! original file's fingerprint.

mod common;

use ibp::ErrorKind;
use ibp::Rows;
use ibp::codebook::Codebook;
use ibp::container::{ContainerWriter, GroupData, GroupMeta, IbpFile, SourceInfo};
use ibp::fit::{FitOptions, fit};
use ibp::io::{self, DType, Fingerprint, ParseOptions, Segment, SourceFormat};
use ibp::layout::{LayoutOptions, compress_packed};
use ibp::pipeline::CompressOptions;

use common::container::*;

#[test]
fn writer_api_by_hand() {
    // Two groups of the same rows in two layouts, raw pieces around them.
    let data = features(50, 8, 5);
    let rows = Rows::new(&data, 32).unwrap();
    let f = fit(rows, &FitOptions::default()).unwrap();
    let packed = compress_packed(&f.codebook, rows, &LayoutOptions::default()).unwrap();
    let fixed = ibp::layout::compress_fixed(&f.codebook, rows, &LayoutOptions::default()).unwrap();
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
    let packed = compress_packed(&f.codebook, rows, &LayoutOptions::default()).unwrap();
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
    let mut packed = compress_packed(&f.codebook, rows, &LayoutOptions::default()).unwrap();
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
