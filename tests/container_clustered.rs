//! Clustered groups in the container (`docs/FORMAT.md` §6.8): round trips
//! through `compress_document`, the `auto` promise (never larger than
//! `off`), typed errors for damaged ids and codebook counts, how a reader
//! that does not know the feature reacts, hostile input, and the clustered
//! golden file.

mod common;

use std::borrow::Cow;

use ibp::cluster::{ClusterIds, compress_clustered_with_ids};
use ibp::codebook::{ChunkSize, Codebook};
use ibp::container::{
    ContainerWriter, GroupData, GroupLayout, GroupMeta, IbpFile, SectionKind, SourceInfo,
};
use ibp::io::{DType, Document, Fingerprint, Segment, SourceFormat, TensorGroup};
use ibp::pipeline::{Clustering, CompressOptions, compress_document};
use ibp::{ErrorKind, Rows};

use common::container::{Sections, assemble, sections_of};

/// xorshift64 step.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// `rows` f32 tensors of `cols` elements from `pops` populations: tensor
/// `i` belongs to population `i % pops`, whose elements share a sign and an
/// exponent of their own, so one codebook per population fixes far more
/// bits than one for all.
fn populations(rows: usize, cols: usize, pops: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(rows * cols * 4);
    for i in 0..rows {
        let p = (i % pops) as u32;
        let (sign, exp) = ((p & 1) << 31, (100 + 9 * p) << 23);
        for _ in 0..cols {
            let mant = (next(&mut s) as u32) & 0x007f_f000;
            out.extend((sign | exp | mant).to_le_bytes());
        }
    }
    out
}

/// A raw document of one 2-D f32 group.
fn doc(data: &[u8], rows: u64, cols: u64) -> Document<'_> {
    Document {
        format: SourceFormat::Raw,
        groups: vec![TensorGroup {
            name: "w".into(),
            dtype: DType::F32,
            shape: vec![rows, cols],
            data: Cow::Borrowed(data),
        }],
        envelope: vec![Segment::Group(0)],
        original: Fingerprint::of(data),
        notes: vec![],
        deferred: Vec::new(),
    }
}

fn compress(d: &Document<'_>, clusters: Clustering) -> Vec<u8> {
    let opts = CompressOptions::default().with_clusters(clusters);
    compress_document(d, &opts, Vec::new()).unwrap().0
}

#[test]
fn a_clustered_group_round_trips_and_beats_one_codebook() {
    let data = populations(240, 64, 2, 7);
    let d = doc(&data, 240, 64);
    let off = compress(&d, Clustering::Off);
    let auto = compress(&d, Clustering::Auto);
    assert!(
        auto.len() < off.len(),
        "auto {} vs off {}",
        auto.len(),
        off.len()
    );
    let file = IbpFile::from_bytes(&auto).unwrap();
    assert_eq!(file.restore_to_vec().unwrap(), data);
    let g = file.group(0).unwrap();
    assert_eq!(g.layout(), GroupLayout::Clustered);
    let (cbs, ids) = g.clusters().unwrap();
    assert!(cbs.len() >= 2 && g.info().clusters == Some(cbs.len() as u32));
    assert_eq!(ids.len(), 240);
    assert_eq!(ids.bits(), usize::BITS - (cbs.len() - 1).leading_zeros());
    // Population p's tensors share a cluster, and the two populations do
    // not.
    assert_ne!(ids.get(0), ids.get(1));
    assert!((0..240).all(|i| ids.get(i) == ids.get(i % 2)));
    // No single codebook is handed out, so no one-codebook decoder (the
    // GPU's dataset constructors take one) can misdecode the group.
    assert!(g.codebook().is_none());
    assert!(g.packed().is_some());
    // Rows decode on their own too.
    let mut rows = vec![0u8; 7 * 256];
    g.decompress_rows(100..107, &mut rows).unwrap();
    assert_eq!(rows, data[100 * 256..107 * 256]);
    // The ids section is required, so older readers refuse the file.
    let ids_entry = file
        .sections()
        .iter()
        .find(|e| e.kind == SectionKind::ClusterIds as u32)
        .unwrap();
    assert_eq!(ids_entry.flags & ibp::container::FLAG_REQUIRED, 1);
    assert_eq!(ids_entry.length, (240 * u64::from(ids.bits())).div_ceil(8));
}

#[test]
fn auto_is_never_larger_than_off_and_identical_when_it_keeps_one_codebook() {
    let one = populations(300, 48, 1, 3);
    let two = populations(256, 64, 2, 5);
    let four = populations(200, 32, 4, 9);
    let few = populations(6, 16, 2, 11);
    for (what, data, rows, cols) in [
        ("one population", &one, 300, 48),
        ("two", &two, 256, 64),
        ("four", &four, 200, 32),
        ("six rows", &few, 6, 16),
    ] {
        let d = doc(data, rows, cols);
        let off = compress(&d, Clustering::Off);
        let (auto, report) = compress_document(
            &d,
            &CompressOptions::default().with_clusters(Clustering::Auto),
            Vec::new(),
        )
        .unwrap();
        assert!(
            auto.len() <= off.len(),
            "{what}: {} > {}",
            auto.len(),
            off.len()
        );
        assert_eq!(
            IbpFile::from_bytes(&auto)
                .unwrap()
                .restore_to_vec()
                .unwrap(),
            *data,
            "{what}"
        );
        if report.groups[0].clusters.is_none() {
            assert!(auto == off, "{what}: one codebook but different bytes");
        }
    }
    // One population: nothing to gain, so exactly the version-1 packed file.
    let d = doc(&one, 300, 48);
    assert!(compress(&d, Clustering::Auto) == compress(&d, Clustering::Off));
}

#[test]
fn a_fixed_number_of_clusters_is_used_as_asked() {
    let data = populations(200, 32, 4, 9);
    let d = doc(&data, 200, 32);
    let (bytes, report) = compress_document(
        &d,
        &CompressOptions::default().with_clusters(Clustering::Fixed(4)),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(report.groups[0].clusters, Some(4));
    let file = IbpFile::from_bytes(&bytes).unwrap();
    assert_eq!(file.group(0).unwrap().clusters().unwrap().1.bits(), 2);
    assert_eq!(file.restore_to_vec().unwrap(), data);
    for bad in ["0", "-1", "many", "4097", ""] {
        let e = Clustering::parse(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}");
    }
    assert_eq!(Clustering::parse("1").unwrap(), Clustering::Off);
    assert_eq!(Clustering::parse("auto").unwrap(), Clustering::Auto);
}

// ------------------------------------------------------------ by hand

fn index_of(secs: &Sections, kind: SectionKind) -> usize {
    secs.iter().position(|s| s.0 == kind as u32).unwrap()
}

/// Edit the manifest's first group with `f` and reassemble.
fn with_group(secs: &Sections, f: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
    let mut secs = secs.clone();
    let mi = index_of(&secs, SectionKind::Manifest);
    let mut json: serde_json::Value = serde_json::from_slice(&secs[mi].3).unwrap();
    f(&mut json["groups"][0]);
    secs[mi].3 = serde_json::to_vec(&json).unwrap();
    assemble(1, &secs)
}

#[track_caller]
fn open_err(bytes: &[u8]) -> ibp::Error {
    IbpFile::from_bytes(bytes).err().expect("the file opened")
}

#[test]
fn damaged_ids_and_codebook_counts_are_corrupt_and_older_readers_refuse() {
    let (bytes, _) = golden_build();
    let secs = sections_of(&bytes);
    assert!(assemble(1, &secs) == bytes);
    let ii = index_of(&secs, SectionKind::ClusterIds);

    // k = 3 in 2-bit ids: id 3 is out of range.
    let mut bad_id = secs.clone();
    bad_id[ii].3[0] |= 0b11;
    let e = open_err(&assemble(1, &bad_id));
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    assert!(e.message().contains("cluster id 3"), "{e}");

    // Ids of the wrong length (12 ids of 2 bits fill 3 bytes exactly, so
    // there are no padding bits here; `ClusterIds::from_bytes` checks them).
    for len in [0, secs[ii].3.len() - 1, secs[ii].3.len() + 1] {
        let mut short = secs.clone();
        short[ii].3.resize(len, 0);
        assert_eq!(
            open_err(&assemble(1, &short)).kind(),
            ErrorKind::Corrupt,
            "{len}"
        );
    }

    // The manifest's k must match the codebook section and be ≥ 2; only
    // clustered groups have one; the ids section is not optional.
    for k in [
        serde_json::json!(2),
        serde_json::json!(4),
        serde_json::json!(1),
    ] {
        let e = open_err(&with_group(&secs, |g| g["clusters"] = k.clone()));
        assert_eq!(e.kind(), ErrorKind::Corrupt, "k = {k}: {e}");
    }
    let e = open_err(&with_group(&secs, |g| {
        g.as_object_mut().unwrap().remove("clusters");
    }));
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let e = open_err(&with_group(&secs, |g| g["layout"] = "packed".into()));
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let mut no_ids = secs.clone();
    no_ids.remove(ii);
    assert_eq!(open_err(&assemble(1, &no_ids)).kind(), ErrorKind::Corrupt);
    // A codebook section cut by one codebook.
    let mut cut = secs.clone();
    let ci = index_of(&cut, SectionKind::Codebook);
    let l2 = cut[ci].3.len() / 3;
    cut[ci].3.truncate(2 * l2);
    assert_eq!(open_err(&assemble(1, &cut)).kind(), ErrorKind::Corrupt);

    // How a reader that does not know clustered groups reacts: the ids
    // section's kind is one it does not know, marked required, and the
    // layout a name it does not know. Both are `Unsupported`, never a
    // misdecode. (Simulated here with a kind and a layout unknown to this
    // reader.)
    let mut unknown = secs.clone();
    unknown[ii].0 = 77;
    let e = open_err(&assemble(1, &unknown));
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.message().contains("required"), "{e}");
    let e = open_err(&with_group(&secs, |g| g["layout"] = "clustered2".into()));
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
}

#[test]
fn the_writer_refuses_inconsistent_clustered_groups() {
    let data = golden_rows();
    let rows = Rows::new(&data, 8).unwrap();
    let cbs = golden_codebooks();
    let ids = golden_ids();
    let cp = compress_clustered_with_ids(&cbs, &ids, rows).unwrap();
    let meta = GroupMeta::new("g", DType::U8, vec![12, 8], 12, 8, &data);
    let three_bit = ClusterIds::pack(&[0; 12], 8).unwrap();
    let short = ClusterIds::pack(&[0; 11], 3).unwrap();
    for (what, cbs, ids) in [
        ("one codebook", &cbs[..1], &cp.ids),
        ("ids for 8 clusters", &cbs[..], &three_bit),
        ("11 ids", &cbs[..], &short),
    ] {
        let mut w = ContainerWriter::new(Vec::new()).unwrap();
        let e = w
            .add_group(
                meta.clone(),
                GroupData::Clustered {
                    codebooks: cbs,
                    ids,
                    threshold: None,
                    packed: cp.packed.view(),
                },
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{what}");
    }
}

// ------------------------------------------------------- hostile input

#[test]
fn every_truncation_and_byte_change_of_a_clustered_file_is_an_error() {
    let (bytes, original) = golden_build();
    let read = |b: &[u8]| IbpFile::from_bytes(b)?.restore_to_vec();
    assert_eq!(read(&bytes).unwrap(), original);
    for len in 0..bytes.len() {
        let e = read(&bytes[..len]).expect_err("a truncation read");
        assert!(
            matches!(e.kind(), ErrorKind::Truncated | ErrorKind::Corrupt),
            "truncated to {len}: {e}"
        );
    }
    let mut m = bytes.clone();
    for i in 0..bytes.len() {
        for x in [0x01u8, 0x80, 0xff] {
            m[i] ^= x;
            if let Ok(out) = read(&m) {
                panic!("byte {i} ^ {x:#04x} still read (same: {})", out == original);
            }
            m[i] ^= x;
        }
    }
}

// -------------------------------------------------------------- golden

/// 12 tensors of 8 bytes from 3 families: family `f` has bytes 0-3 equal
/// to `0x10·(f+1)` in their top nibble, and a free low nibble.
fn golden_rows() -> Vec<u8> {
    (0u8..96)
        .map(|i| {
            let (row, col) = (i / 8, i % 8);
            let f = GOLDEN_IDS[row as usize];
            if col < 4 {
                (0x10 * (f + 1)) | (i.wrapping_mul(7) & 0x0f)
            } else {
                i.wrapping_mul(37)
            }
        })
        .collect()
}

/// Cluster of each tensor; tensor 11 is deliberately in a cluster whose
/// codebook it does not match, so it is stored raw.
const GOLDEN_IDS: [u8; 12] = [0, 1, 2, 0, 1, 2, 2, 2, 1, 0, 0, 1];

fn golden_ids() -> Vec<u32> {
    let mut ids: Vec<u32> = GOLDEN_IDS.iter().map(|&c| u32::from(c)).collect();
    ids[11] = 2;
    ids
}

fn golden_codebooks() -> Vec<Codebook> {
    (1u8..=3)
        .map(|f| {
            Codebook::new(
                ChunkSize::Two,
                vec![0xf0, 0xf0, 0xf0, 0xf0, 0, 0, 0, 0],
                vec![0x10 * f, 0x10 * f, 0x10 * f, 0x10 * f, 0, 0, 0, 0],
            )
            .unwrap()
        })
        .collect()
}

/// The clustered golden file, built with explicit codebooks and ids so
/// that only the format (§6.8) and the codec (§1-§3) decide its bytes: a
/// piece, a clustered group (k = 3, 2-bit ids) and a raw group.
fn golden_build() -> (Vec<u8>, Vec<u8>) {
    let rows = golden_rows();
    let cbs = golden_codebooks();
    let cp =
        compress_clustered_with_ids(&cbs, &golden_ids(), Rows::new(&rows, 8).unwrap()).unwrap();
    let mut original = b"HDR:".to_vec();
    original.extend(&rows);
    original.extend(b"tail");
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    w.set_source(Some(SourceInfo::new(
        SourceFormat::Raw,
        Fingerprint::of(&original),
    )));
    let hdr = w.add_piece(b"HDR:").unwrap();
    let g = w
        .add_group(
            GroupMeta::new("g", DType::U8, vec![12, 8], 12, 8, &rows),
            GroupData::Clustered {
                codebooks: &cbs,
                ids: &cp.ids,
                threshold: None,
                packed: cp.packed.view(),
            },
        )
        .unwrap();
    let t = w
        .add_group(
            GroupMeta::new("t", DType::U8, vec![4], 1, 4, b"tail"),
            GroupData::Raw(b"tail"),
        )
        .unwrap();
    let envelope = [
        Segment::Raw(hdr),
        Segment::Group(g as usize),
        Segment::Group(t as usize),
    ];
    (w.finish(&envelope).unwrap().0, original)
}

/// A container with a clustered group, frozen. Never regenerate it: every
/// later ibp must read this exact file (FORMAT.md §6.7, §6.8).
const GOLDEN_CLUSTERED: &[u8] = include_bytes!("golden/clustered-v1.ibp");

#[test]
fn golden_clustered_file() {
    let (built, original) = golden_build();
    assert!(
        GOLDEN_CLUSTERED == built,
        "the writer no longer produces the clustered golden file"
    );
    let file = IbpFile::from_bytes(GOLDEN_CLUSTERED).unwrap();
    assert_eq!(file.restore_to_vec().unwrap(), original);
    let g = file.find_group("g").unwrap();
    assert_eq!(g.decompress().unwrap(), golden_rows());
    let (cbs, ids) = g.clusters().unwrap();
    assert_eq!((cbs.len(), ids.bits()), (3, 2));
    // Ids by hand: 2 bits each, lowest first: 0,1,2,0 | 1,2,2,2 | 1,0,0,2.
    assert_eq!(
        ids.as_bytes(),
        [0b00_10_01_00, 0b10_10_10_01, 0b10_00_00_01]
    );
    // Tensor 11 is stored raw (its cluster's codebook does not match it).
    assert_eq!(g.stats().encoded_rows, 11);
    assert!(cbs.iter().zip(golden_codebooks()).all(|(a, b)| *a == b));
}
