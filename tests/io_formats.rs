//! The input readers: every format is taken apart and put back together, and
//! the result must be the original file byte for byte.
//!
//! Files are built here by hand from their specs (npy header dicts, zip
//! records, safetensors JSON) so that the tests do not depend on Python.

use std::borrow::Cow;
use std::io::Write;
use std::path::PathBuf;

use ibp::ErrorKind;
use ibp::io::{self, DType, Document, ParseOptions, RowShape, Segment, SourceFormat};

// ---------------------------------------------------------------- builders

/// An npy file as numpy writes it: the dict padded with spaces and a final
/// newline so that the data starts at a multiple of 64.
fn npy(version: u8, descr: &str, fortran: bool, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let shape_txt = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        ds => format!(
            "({})",
            ds.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        ),
    };
    let fo = if fortran { "True" } else { "False" };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': {fo}, 'shape': {shape_txt}, }}");
    let pre = if version == 1 { 10 } else { 12 };
    while (pre + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    if version == 1 {
        out.extend((dict.len() as u16).to_le_bytes());
    } else {
        out.extend((dict.len() as u32).to_le_bytes());
    }
    out.extend(dict.as_bytes());
    out.extend(data);
    out
}

/// Deterministic pseudo-random bytes (xorshift), with structure: the high
/// bytes of each f32 are near-constant, like real features.
fn floats(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(4 * n);
    for _ in 0..n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let v = if s.is_multiple_of(3) {
            0.0f32
        } else {
            1.0 + (s % 1000) as f32 / 1000.0
        };
        out.extend(v.to_le_bytes());
    }
    out
}

#[derive(Clone)]
struct ZipMember {
    name: String,
    data: Vec<u8>,
    /// None: stored; Some(level): deflated at that level.
    level: Option<u32>,
    /// Write sizes in a data descriptor after the data (flag bit 3).
    descriptor: bool,
    /// Python's force_zip64: 0xFFFFFFFF sizes in the local header plus a
    /// zip64 extra field.
    zip64: bool,
    /// Replace the compressed bytes (to simulate another compressor).
    compressed_override: Option<Vec<u8>>,
}

fn member(name: &str, data: Vec<u8>, level: Option<u32>) -> ZipMember {
    ZipMember {
        name: name.into(),
        data,
        level,
        descriptor: false,
        zip64: false,
        compressed_override: None,
    }
}

fn deflate(data: &[u8], level: u32) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn crc(data: &[u8]) -> u32 {
    let mut c = flate2::Crc::new();
    c.update(data);
    c.sum()
}

/// A zip archive, laid out as Python's zipfile lays it out; `zip64_end`
/// adds a zip64 end of central directory record and locator.
fn zip(members: &[ZipMember], zip64_end: bool, comment: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for m in members {
        let comp = m
            .compressed_override
            .clone()
            .unwrap_or_else(|| match m.level {
                None => m.data.clone(),
                Some(l) => deflate(&m.data, l),
            });
        let method: u16 = if m.level.is_some() { 8 } else { 0 };
        let flags: u16 = if m.descriptor { 8 } else { 0 };
        let c = crc(&m.data);
        let offset = out.len() as u32;
        let mut local_extra = Vec::new();
        if m.zip64 {
            local_extra.extend(1u16.to_le_bytes());
            local_extra.extend(16u16.to_le_bytes());
            local_extra.extend((m.data.len() as u64).to_le_bytes());
            local_extra.extend((comp.len() as u64).to_le_bytes());
        }
        out.extend(0x0403_4b50u32.to_le_bytes());
        out.extend(45u16.to_le_bytes());
        out.extend(flags.to_le_bytes());
        out.extend(method.to_le_bytes());
        out.extend([0, 0, 0x21, 0]);
        if m.descriptor {
            out.extend([0u8; 12]);
        } else if m.zip64 {
            out.extend(c.to_le_bytes());
            out.extend([0xff; 8]);
        } else {
            out.extend(c.to_le_bytes());
            out.extend((comp.len() as u32).to_le_bytes());
            out.extend((m.data.len() as u32).to_le_bytes());
        }
        out.extend((m.name.len() as u16).to_le_bytes());
        out.extend((local_extra.len() as u16).to_le_bytes());
        out.extend(m.name.as_bytes());
        out.extend(&local_extra);
        out.extend(&comp);
        if m.descriptor {
            out.extend(0x0807_4b50u32.to_le_bytes());
            out.extend(c.to_le_bytes());
            out.extend((comp.len() as u32).to_le_bytes());
            out.extend((m.data.len() as u32).to_le_bytes());
        }
        central.extend(0x0201_4b50u32.to_le_bytes());
        central.extend(0x032du16.to_le_bytes());
        central.extend(45u16.to_le_bytes());
        central.extend(flags.to_le_bytes());
        central.extend(method.to_le_bytes());
        central.extend([0, 0, 0x21, 0]);
        central.extend(c.to_le_bytes());
        central.extend((comp.len() as u32).to_le_bytes());
        central.extend((m.data.len() as u32).to_le_bytes());
        central.extend((m.name.len() as u16).to_le_bytes());
        central.extend([0u8; 8]); // extra len, comment len, disk, internal attrs
        central.extend(0x0180_0000u32.to_le_bytes());
        central.extend(offset.to_le_bytes());
        central.extend(m.name.as_bytes());
    }
    let cd_offset = out.len() as u64;
    out.extend(&central);
    if zip64_end {
        let z64 = out.len() as u64;
        out.extend(0x0606_4b50u32.to_le_bytes());
        out.extend(44u64.to_le_bytes());
        out.extend([45, 0, 45, 0]);
        out.extend([0u8; 8]);
        out.extend((members.len() as u64).to_le_bytes());
        out.extend((members.len() as u64).to_le_bytes());
        out.extend((central.len() as u64).to_le_bytes());
        out.extend(cd_offset.to_le_bytes());
        out.extend(0x0706_4b50u32.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend(z64.to_le_bytes());
        out.extend(1u32.to_le_bytes());
    }
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u8; 4]);
    let n = if zip64_end {
        0xFFFF
    } else {
        members.len() as u16
    };
    out.extend(n.to_le_bytes());
    out.extend(n.to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    let off = if zip64_end {
        0xFFFF_FFFF
    } else {
        cd_offset as u32
    };
    out.extend(off.to_le_bytes());
    out.extend((comment.len() as u16).to_le_bytes());
    out.extend(comment);
    out
}

/// A safetensors file with tensors in the given order, a header padded to
/// a multiple of 8 with spaces, and `gap` junk bytes after each tensor.
fn safetensors(tensors: &[(&str, &str, &[u64], &[u8])], metadata: bool, gap: usize) -> Vec<u8> {
    let mut header = String::from("{");
    if metadata {
        header.push_str("\"__metadata__\":{\"format\":\"pt\"},");
    }
    let mut data = Vec::new();
    for (i, (name, dtype, shape, bytes)) in tensors.iter().enumerate() {
        let begin = data.len();
        data.extend(*bytes);
        let end = data.len();
        data.extend(std::iter::repeat_n(0xAB, gap));
        let sep = if i + 1 == tensors.len() { "" } else { "," };
        header.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":{shape:?},\"data_offsets\":[{begin},{end}]}}{sep}"
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

fn roundtrip<'a>(bytes: &'a [u8], format: SourceFormat, opts: &ParseOptions) -> Document<'a> {
    let doc = io::parse(bytes, format, opts).unwrap_or_else(|e| panic!("{format}: {e}"));
    let back = doc.restore_to_vec().unwrap();
    assert!(
        back == bytes,
        "{format}: restored {} bytes differ from the original {}",
        back.len(),
        bytes.len()
    );
    assert_eq!(doc.original, io::Fingerprint::of(bytes));
    doc
}

fn has_deflate(segs: &[Segment<Cow<'_, [u8]>>], level: u32) -> bool {
    segs.iter()
        .any(|s| matches!(s, Segment::Deflate { level: l, .. } if *l == level))
}

// ------------------------------------------------------------------- npy

#[test]
fn npy_versions_dtypes_and_shapes() {
    let cases: &[(&str, DType, &[u64])] = &[
        ("<f4", DType::F32, &[7, 5]),
        ("<f8", DType::F64, &[3, 2, 2]),
        ("<f2", DType::F16, &[9]),
        ("<i8", DType::I64, &[4, 1]),
        ("<i4", DType::I32, &[]),
        ("<i2", DType::I16, &[2, 3]),
        ("|i1", DType::I8, &[5, 5]),
        ("<u8", DType::U64, &[1, 3]),
        ("<u4", DType::U32, &[3, 1]),
        ("<u2", DType::U16, &[6]),
        ("|u1", DType::U8, &[0, 4]),
        ("|b1", DType::Bool, &[2, 2]),
        (
            "<c8",
            DType::Other {
                name: "<c8".into(),
                size: 8,
            },
            &[2, 3],
        ),
        (
            "|V2",
            DType::Other {
                name: "|V2".into(),
                size: 2,
            },
            &[4, 3],
        ),
    ];
    for version in [1u8, 2, 3] {
        for (descr, dtype, shape) in cases {
            let n: u64 = shape.iter().product();
            let data: Vec<u8> = (0..n * dtype.size())
                .map(|i| (i * 37 % 251) as u8)
                .collect();
            let file = npy(version, descr, false, shape, &data);
            let doc = roundtrip(
                &file,
                SourceFormat::Npy,
                &ParseOptions::default().with_name("x"),
            );
            assert_eq!(doc.groups.len(), 1);
            let g = &doc.groups[0];
            assert_eq!((&g.name[..], &g.dtype, &g.shape[..]), ("x", dtype, *shape));
            assert!(g.data[..] == data[..], "{descr} {shape:?}: group bytes");
            assert_eq!(&file[file.len() - data.len()..], &g.data[..]);
        }
    }
}

#[test]
fn npy_fortran_order_reverses_the_shape() {
    let data = floats(12, 3);
    let file = npy(1, "<f4", true, &[3, 4], &data);
    let doc = roundtrip(&file, SourceFormat::Npy, &ParseOptions::default());
    assert_eq!(doc.groups[0].shape, vec![4, 3]);
    assert_eq!(doc.groups[0].name, "array");
}

#[test]
fn npy_trailing_bytes_are_kept() {
    let mut file = npy(1, "<i4", false, &[2, 2], &[1u8; 16]);
    file.extend(b"trailing junk");
    let doc = roundtrip(&file, SourceFormat::Npy, &ParseOptions::default());
    assert_eq!(doc.groups[0].data.len(), 16);
}

#[test]
fn npy_header_edge_cases() {
    // Python 2 longs, double quotes, no trailing comma, extra whitespace.
    let dict = "{\"descr\": \"<u2\", \"shape\": (2L, 3L), \"fortran_order\": False}   \n";
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    file.extend((dict.len() as u16).to_le_bytes());
    file.extend(dict.as_bytes());
    file.extend([7u8; 12]);
    let doc = roundtrip(&file, SourceFormat::Npy, &ParseOptions::default());
    assert_eq!(doc.groups[0].shape, vec![2, 3]);
    assert_eq!(doc.groups[0].dtype, DType::U16);
}

#[test]
fn npy_rejections_are_typed() {
    let data = [0u8; 24];
    let be = npy(1, ">f4", false, &[2, 3], &data);
    let e = io::parse(&be, SourceFormat::Npy, &ParseOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.message().contains("big-endian"), "{e}");

    let obj = npy(1, "|O", false, &[3], &data);
    assert_eq!(
        io::parse(&obj, SourceFormat::Npy, &ParseOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::Unsupported
    );

    let short = npy(1, "<f4", false, &[2, 3], &data[..20]);
    assert_eq!(
        io::parse(&short, SourceFormat::Npy, &ParseOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::Truncated
    );

    let mut v9 = npy(1, "<f4", false, &[2, 3], &data);
    v9[6] = 9;
    assert_eq!(
        io::parse(&v9, SourceFormat::Npy, &ParseOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::Unsupported
    );

    let huge = npy(1, "<f4", false, &[1 << 40, 1 << 40], &data);
    assert_eq!(
        io::parse(&huge, SourceFormat::Npy, &ParseOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::Corrupt
    );
}

// ------------------------------------------------------------------- npz

fn npz_members() -> Vec<ZipMember> {
    vec![
        member(
            "features.npy",
            npy(1, "<f4", false, &[50, 33], &floats(50 * 33, 1)),
            Some(6),
        ),
        member(
            "labels.npy",
            npy(
                1,
                "<i8",
                false,
                &[50],
                &(0..50u64)
                    .flat_map(|i| (i % 7).to_le_bytes())
                    .collect::<Vec<_>>(),
            ),
            None,
        ),
        member(
            "adj.npy",
            npy(2, "|u1", false, &[16, 16], &[1u8; 256]),
            Some(9),
        ),
    ]
}

#[test]
fn npz_stored_and_deflated_members() {
    for zip64_end in [false, true] {
        let file = zip(&npz_members(), zip64_end, b"");
        let doc = roundtrip(&file, SourceFormat::Npz, &ParseOptions::default());
        let names: Vec<&str> = doc.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["features", "labels", "adj"]);
        assert_eq!(doc.groups[0].shape, vec![50, 33]);
        assert_eq!(&doc.groups[0].data[..], &floats(50 * 33, 1)[..]);
        // Both deflated members re-deflate (the small one at whichever level
        // first reproduces it; several levels coincide on tiny inputs).
        assert!(has_deflate(&doc.envelope, 6), "{:?}", doc.notes);
        let deflates = doc
            .envelope
            .iter()
            .filter(|s| matches!(s, Segment::Deflate { .. }))
            .count();
        assert_eq!(deflates, 2);
        assert!(doc.notes.is_empty(), "{:?}", doc.notes);
        // The stored member's array is borrowed from the file, not copied.
        assert!(matches!(doc.groups[1].data, Cow::Borrowed(_)));
    }
}

#[test]
fn npz_every_level_is_found() {
    let arr = npy(1, "<f4", false, &[40, 10], &floats(400, 9));
    for level in 1..=9 {
        let file = zip(&[member("a.npy", arr.clone(), Some(level))], false, b"");
        let doc = roundtrip(&file, SourceFormat::Npz, &ParseOptions::default());
        assert_eq!(doc.groups.len(), 1);
        // Low levels can coincide (tiny inputs); what matters is that the
        // level found reproduces the stream, which roundtrip() checked.
        assert!(
            doc.envelope
                .iter()
                .any(|s| matches!(s, Segment::Deflate { .. })),
            "level {level}"
        );
    }
    // Level 0 (stored deflate blocks) depends on how the writer split its
    // input, so it is never re-created: the member stays verbatim.
    let file = zip(&[member("a.npy", arr.clone(), Some(0))], false, b"");
    let doc = roundtrip(&file, SourceFormat::Npz, &ParseOptions::default());
    assert!(
        doc.groups.is_empty() && doc.notes.len() == 1,
        "{:?}",
        doc.notes
    );
}

#[test]
fn npz_zip64_local_headers_and_data_descriptors() {
    let mut ms = npz_members();
    ms[0].zip64 = true;
    ms[1].descriptor = true;
    ms[2].descriptor = true;
    let file = zip(&ms, true, b"a comment");
    let doc = roundtrip(&file, SourceFormat::Npz, &ParseOptions::default());
    assert_eq!(doc.groups.len(), 3);
}

#[test]
fn npz_unreproducible_stream_is_kept_verbatim() {
    // A valid deflate stream no plain zlib level produces: a sync flush in
    // the middle, as a streaming writer might emit.
    let arr = npy(1, "<f4", false, &[30, 20], &floats(600, 4));
    let mut c = flate2::Compress::new(flate2::Compression::new(6), false);
    let mut comp = Vec::with_capacity(arr.len() * 2);
    c.compress_vec(&arr[..1000], &mut comp, flate2::FlushCompress::Sync)
        .unwrap();
    c.compress_vec(&arr[1000..], &mut comp, flate2::FlushCompress::Finish)
        .unwrap();
    let mut m = member("odd.npy", arr, Some(6));
    m.compressed_override = Some(comp.clone());
    let file = zip(
        &[
            m,
            member(
                "ok.npy",
                npy(1, "<f4", false, &[4, 4], &floats(16, 5)),
                Some(6),
            ),
        ],
        false,
        b"",
    );
    let doc = roundtrip(&file, SourceFormat::Npz, &ParseOptions::default());
    assert_eq!(doc.groups.len(), 1);
    assert_eq!(doc.groups[0].name, "ok");
    assert_eq!(doc.notes.len(), 1);
    assert!(
        doc.notes[0].contains("odd.npy") && doc.notes[0].contains("re-deflating"),
        "{:?}",
        doc.notes
    );
    assert!(
        doc.envelope
            .iter()
            .any(|s| matches!(s, Segment::Raw(b) if b[..] == comp[..]))
    );
}

#[test]
fn npz_other_members_and_selection() {
    let mut ms = npz_members();
    ms.push(member("README.txt", b"hello".to_vec(), None));
    ms.push(member(
        "objects.npy",
        npy(1, "|O", false, &[1], &[0x80, 4, 0x4e, 0x2e]),
        Some(6),
    ));
    let file = zip(&ms, false, b"");
    let doc = roundtrip(
        &file,
        SourceFormat::Npz,
        &ParseOptions::default().with_select(["adj", "objects"]),
    );
    assert_eq!(doc.groups.len(), 1);
    assert_eq!(doc.groups[0].name, "adj");
    assert!(
        doc.notes.iter().any(|n| n.contains("objects.npy")),
        "{:?}",
        doc.notes
    );

    let e = io::parse(
        &file,
        SourceFormat::Npz,
        &ParseOptions::default().with_select(["nope"]),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn npz_bad_crc_is_corrupt() {
    let mut file = zip(&npz_members()[1..2], false, b"");
    let last_data = 30 + "labels.npy".len() + 200;
    file[last_data] ^= 1;
    assert_eq!(
        io::parse(&file, SourceFormat::Npz, &ParseOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::Corrupt
    );
}

// ----------------------------------------------------------- safetensors

#[test]
fn safetensors_roundtrip_with_gaps_and_metadata() {
    let a = floats(6 * 4, 7);
    let b: Vec<u8> = (0..10u16).flat_map(|i| (i * 3).to_le_bytes()).collect();
    let c = vec![1u8, 0, 1];
    let d = vec![0x3fu8, 0x80, 0x40, 0x00];
    for (meta, gap) in [(false, 0), (true, 0), (true, 5)] {
        let file = safetensors(
            &[
                ("w", "F32", &[6, 4], &a),
                ("b", "BF16", &[2, 5], &b),
                ("m", "BOOL", &[3], &c),
                ("q", "F8_E4M3", &[2, 2], &d),
            ],
            meta,
            gap,
        );
        let doc = roundtrip(&file, SourceFormat::Safetensors, &ParseOptions::default());
        let got: Vec<(&str, &DType, &[u64])> = doc
            .groups
            .iter()
            .map(|g| (g.name.as_str(), &g.dtype, &g.shape[..]))
            .collect();
        let fp8 = DType::Other {
            name: "F8_E4M3".into(),
            size: 1,
        };
        assert_eq!(
            got,
            [
                ("w", &DType::F32, &[6u64, 4][..]),
                ("b", &DType::BF16, &[2, 5]),
                ("m", &DType::Bool, &[3]),
                ("q", &fp8, &[2, 2])
            ]
        );
        assert_eq!(&doc.groups[0].data[..], &a[..]);
        assert_eq!(
            io::SourceFormat::detect(None, &file),
            Some(SourceFormat::Safetensors)
        );
    }
}

#[test]
fn safetensors_header_order_differs_from_data_order() {
    // The header lists tensors in a different order from their data.
    let header = "{\"z\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[4,8]},\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.extend([1, 2, 3, 4, 5, 6, 7, 8]);
    let doc = roundtrip(&file, SourceFormat::Safetensors, &ParseOptions::default());
    assert_eq!(doc.groups[0].name, "a");
    assert_eq!(&doc.groups[1].data[..], &[5, 6, 7, 8]);
}

#[test]
fn safetensors_selection_and_errors() {
    let a = floats(8, 1);
    let file = safetensors(
        &[
            ("x", "F32", &[2, 4], &a),
            ("y", "F32", &[8], &a),
            ("s", "F4", &[4], &[0u8; 2]),
        ],
        false,
        0,
    );
    let doc = roundtrip(
        &file,
        SourceFormat::Safetensors,
        &ParseOptions::default().with_select(["y"]),
    );
    assert_eq!(doc.groups.len(), 1);
    assert_eq!(doc.groups[0].name, "y");
    assert!(
        io::parse(
            &file,
            SourceFormat::Safetensors,
            &ParseOptions::default().with_select(["nope"])
        )
        .unwrap_err()
        .kind()
            == ErrorKind::InvalidArgument
    );

    // Shape disagrees with the byte range.
    let bad = safetensors(&[("x", "F32", &[3, 4], &a)], false, 0);
    assert_eq!(
        io::parse(&bad, SourceFormat::Safetensors, &ParseOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::Corrupt
    );
    // Overlapping tensors.
    let header = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}";
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend(header.as_bytes());
    f.extend([0u8; 6]);
    assert_eq!(
        io::parse(&f, SourceFormat::Safetensors, &ParseOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::Corrupt
    );
    // Header length past the end.
    let mut g = file.clone();
    g[..8].copy_from_slice(&(file.len() as u64).to_le_bytes());
    assert_eq!(
        io::parse(&g, SourceFormat::Safetensors, &ParseOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::Truncated
    );
}

// ------------------------------------------------------------ raw, rows

#[test]
fn raw_files() {
    let data = floats(30, 2);
    let doc = roundtrip(
        &data,
        SourceFormat::Raw,
        &ParseOptions::default().with_raw(DType::F32, Some(vec![5, 6])),
    );
    assert_eq!(doc.groups[0].shape, vec![5, 6]);
    let doc = roundtrip(
        &data,
        SourceFormat::Raw,
        &ParseOptions::default().with_raw(DType::F64, None),
    );
    assert_eq!(doc.groups[0].shape, vec![15]);
    let e = io::parse(
        &data,
        SourceFormat::Raw,
        &ParseOptions::default().with_raw(DType::F32, Some(vec![7, 5])),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        io::parse(&data, SourceFormat::Raw, &ParseOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn rows_of_a_tensor() {
    let rs = |shape: &[u64], d: DType, o| io::row_shape(shape, &d, o).unwrap();
    assert_eq!(
        rs(&[2708, 1433], DType::F32, None),
        RowShape {
            rows: 2708,
            row_bytes: 5732
        }
    );
    assert_eq!(
        rs(&[4, 3, 2], DType::F16, None),
        RowShape {
            rows: 4,
            row_bytes: 12
        }
    );
    assert_eq!(
        rs(&[100], DType::F64, None),
        RowShape {
            rows: 1,
            row_bytes: 800
        }
    );
    assert_eq!(
        rs(&[], DType::I32, None),
        RowShape {
            rows: 1,
            row_bytes: 4
        }
    );
    assert_eq!(
        rs(&[0, 5], DType::I32, None),
        RowShape {
            rows: 0,
            row_bytes: 0
        }
    );
    assert_eq!(
        rs(&[100], DType::F32, Some(10)),
        RowShape {
            rows: 10,
            row_bytes: 40
        }
    );
    assert_eq!(
        rs(&[4, 6], DType::U8, Some(12)),
        RowShape {
            rows: 2,
            row_bytes: 12
        }
    );
    assert_eq!(
        io::row_shape(&[4, 6], &DType::U8, Some(5))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        io::row_shape(&[4, 6], &DType::U8, Some(0))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn dtype_names() {
    for d in [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I8,
        DType::U32,
        DType::Bool,
    ] {
        assert_eq!(DType::from_name(d.name()), Some(d.clone()));
        assert_eq!(
            DType::from_safetensors(d.safetensors_name().unwrap()),
            Some(d.clone())
        );
        if let Some(descr) = d.numpy_descr() {
            assert_eq!(DType::from_numpy_descr(descr).unwrap(), d);
        }
    }
    assert_eq!(DType::parse("float32").unwrap(), DType::F32);
    assert_eq!(DType::parse("<f2").unwrap(), DType::F16);
    assert_eq!(DType::parse("BF16").unwrap(), DType::BF16);
    assert_eq!(
        DType::parse("complex").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

// ------------------------------------------------------------ real data

/// `cora-features.npz` from `$IBP_DATA_DIR` or `../shared/data`.
pub fn data_file(name: &str) -> Option<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("IBP_DATA_DIR") {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

#[test]
fn cora_features_npz() {
    let Some(path) = data_file("cora-features.npz") else {
        println!("skipped: cora-features.npz not found");
        return;
    };
    let file = io::InputFile::open(&path).unwrap();
    let bytes = file.bytes();
    assert_eq!(
        SourceFormat::detect(Some(&path), bytes),
        Some(SourceFormat::Npz)
    );
    let doc = roundtrip(bytes, SourceFormat::Npz, &ParseOptions::default());
    assert_eq!(doc.groups.len(), 1);
    let g = &doc.groups[0];
    assert_eq!(
        (g.name.as_str(), &g.dtype, &g.shape[..]),
        ("features", &DType::F32, &[2708u64, 1433][..])
    );
    assert!(
        has_deflate(&doc.envelope, 6),
        "cora's member should re-deflate at level 6: {:?}",
        doc.notes
    );
    assert!(doc.notes.is_empty());
    // What is left raw is only headers: a few hundred bytes of 129 KB.
    assert!(doc.raw_bytes() < 400, "{}", doc.raw_bytes());
}
