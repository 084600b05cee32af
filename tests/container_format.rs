//! Containers assembled from `docs/FORMAT.md` §6 alone are read (forward
//! compatibility rules), hostile sizes are refused at open, and the
//! version-1 golden file is read forever.

mod common;

use ibp::ErrorKind;
use ibp::Rows;
use ibp::codebook::Codebook;
use ibp::container::{ContainerWriter, GroupData, GroupMeta, IbpFile, SectionKind, SourceInfo};
use ibp::io::{self, DType, Fingerprint, ParseOptions, Segment, SourceFormat};
use ibp::layout::{LayoutOptions, compress_packed};
use ibp::pipeline::CompressOptions;

use common::container::*;

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
    let packed =
        compress_packed(&cb, Rows::new(&rows, 5).unwrap(), &LayoutOptions::default()).unwrap();
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
