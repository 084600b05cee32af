//! Hostile input: every truncation and every single-byte change of a small
//! valid container is an error (at open or at restore), never a panic and
//! never a silently different file. The input readers get the same
//! treatment: whatever they accept, they must restore exactly.

mod common;

use std::borrow::Cow;
use std::io::Write;

use common::npy;
use ibp::ErrorKind;
use ibp::Rows;
use ibp::container::{ContainerWriter, GroupData, GroupMeta, IbpFile, RestoreOptions, SourceInfo};
use ibp::fit::{FitOptions, fit};
use ibp::io::{self, DType, Fingerprint, ParseOptions, Segment, SourceFormat};
use ibp::layout::{LayoutOptions, compress_fixed, compress_packed};
use proptest::prelude::*;

/// The container tests' features, in 16 steps.
fn features(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    common::container::features_of(rows, cols, seed, 16)
}

fn deflate(parts: &[&[u8]], level: u32) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
    for p in parts {
        e.write_all(p).unwrap();
    }
    e.finish().unwrap()
}

/// A small container that uses every structure: a packed group, a
/// fixed-stride group inside a deflate segment, a raw group, pieces, notes
/// and the source fingerprint. Returns it and the file it restores to.
fn small_container() -> (Vec<u8>, Vec<u8>) {
    let a = features(12, 3, 1);
    let b = features(8, 2, 2);
    let rows_a = Rows::new(&a, 12).unwrap();
    let rows_b = Rows::new(&b, 8).unwrap();
    let fa = fit(rows_a, &FitOptions::default()).unwrap();
    let fb = fit(rows_b, &FitOptions::default()).unwrap();
    let pa = compress_packed(&fa.codebook, rows_a, &LayoutOptions::default()).unwrap();
    let xb = compress_fixed(&fb.codebook, rows_b, &LayoutOptions::default()).unwrap();
    assert!(
        pa.flags.iter().any(|&f| f != 0) && xb.flags.iter().any(|&f| f != 0),
        "groups should encode rows"
    );

    let mut original = b"HEAD".to_vec();
    original.extend(&a);
    original.extend(deflate(&[b"in", &b], 6));
    original.extend(b"raw!");

    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    w.set_source(Some(SourceInfo::new(
        SourceFormat::Npz,
        Fingerprint::of(&original),
    )));
    w.add_note("note");
    let head = w.add_piece(b"HEAD").unwrap();
    let ga = w
        .add_group(
            GroupMeta::new("a", DType::F32, vec![12, 3], 12, 12, &a),
            GroupData::Packed {
                codebook: &fa.codebook,
                threshold: Some(fa.threshold),
                packed: pa.view(),
            },
        )
        .unwrap();
    let inn = w.add_piece(b"in").unwrap();
    let gb = w
        .add_group(
            GroupMeta::new("b", DType::F32, vec![8, 2], 8, 8, &b),
            GroupData::Fixed {
                codebook: &fb.codebook,
                threshold: None,
                fixed: xb.view(),
            },
        )
        .unwrap();
    let gc = w
        .add_group(
            GroupMeta::new("c", DType::U8, vec![4], 1, 4, b"raw!"),
            GroupData::Raw(b"raw!"),
        )
        .unwrap();
    let envelope = [
        Segment::Raw(head),
        Segment::Group(ga as usize),
        Segment::Deflate {
            level: 6,
            inner: vec![Segment::Raw(inn), Segment::Group(gb as usize)],
        },
        Segment::Group(gc as usize),
    ];
    let (bytes, _) = w.finish(&envelope).unwrap();
    (bytes, original)
}

/// Open and restore; `Ok` only if both succeed.
fn open_and_restore(bytes: &[u8]) -> ibp::Result<Vec<u8>> {
    IbpFile::from_bytes(bytes)?.restore_to_vec()
}

#[test]
fn small_container_is_valid() {
    let (bytes, original) = small_container();
    assert_eq!(open_and_restore(&bytes).unwrap(), original);
    println!("small container: {} bytes", bytes.len());
    assert!(
        bytes.len() <= 4096,
        "keep the container small: every byte is mutated ({} bytes)",
        bytes.len()
    );
}

#[test]
fn every_truncation_is_an_error() {
    let (bytes, original) = small_container();
    for len in 0..bytes.len() {
        match open_and_restore(&bytes[..len]) {
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::Truncated | ErrorKind::Corrupt),
                "truncated to {len}: {e}"
            ),
            Ok(out) => panic!(
                "truncated to {len} bytes and still read (same content: {})",
                out == original
            ),
        }
    }
    // So is anything appended.
    for extra in [&[0u8][..], &[0; 64], b"junk"] {
        let mut longer = bytes.clone();
        longer.extend(extra);
        assert!(open_and_restore(&longer).is_err());
    }
}

#[test]
fn every_byte_change_is_an_error() {
    let (bytes, original) = small_container();
    let mut by_kind = std::collections::BTreeMap::new();
    let mut m = bytes.clone();
    for i in 0..bytes.len() {
        for x in [0x01u8, 0x80, 0xff] {
            m[i] ^= x;
            match open_and_restore(&m) {
                Err(e) => *by_kind.entry(format!("{:?}", e.kind())).or_insert(0) += 1,
                Ok(out) => panic!(
                    "byte {i} ^ {x:#04x} still read (same content: {})",
                    out == original
                ),
            }
            m[i] ^= x;
        }
    }
    println!("{} mutations, errors by kind: {by_kind:?}", 3 * bytes.len());
}

#[test]
fn errors_name_the_damaged_section() {
    let (bytes, _) = small_container();
    let file = IbpFile::from_bytes(&bytes).unwrap();
    for (i, s) in file
        .sections()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.length > 0)
    {
        let mut m = bytes.clone();
        m[s.offset as usize] ^= 0x10;
        let e = IbpFile::from_bytes(&m).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        assert!(e.message().contains("checksum"), "section {i}: {e}");
        assert!(e.message().contains(&s.describe(i)), "section {i}: {e}");
    }
}

// ------------------------------------------------------------- readers

fn crc(data: &[u8]) -> u32 {
    let mut c = flate2::Crc::new();
    c.update(data);
    c.sum()
}

/// A one-member zip (deflated or stored) with a zip64 local extra field.
fn zip1(name: &str, data: &[u8], deflated: bool) -> Vec<u8> {
    let comp = if deflated {
        deflate(&[data], 6)
    } else {
        data.to_vec()
    };
    let method: u16 = if deflated { 8 } else { 0 };
    let mut out = Vec::new();
    out.extend(0x0403_4b50u32.to_le_bytes());
    out.extend([45, 0, 0, 0]);
    out.extend(method.to_le_bytes());
    out.extend([0, 0, 0x21, 0]);
    out.extend(crc(data).to_le_bytes());
    out.extend([0xff; 8]);
    out.extend((name.len() as u16).to_le_bytes());
    out.extend(20u16.to_le_bytes());
    out.extend(name.as_bytes());
    out.extend([1, 0, 16, 0]);
    out.extend((data.len() as u64).to_le_bytes());
    out.extend((comp.len() as u64).to_le_bytes());
    out.extend(&comp);
    let cd = out.len();
    out.extend(0x0201_4b50u32.to_le_bytes());
    out.extend([45, 3, 45, 0, 0, 0]);
    out.extend(method.to_le_bytes());
    out.extend([0, 0, 0x21, 0]);
    out.extend(crc(data).to_le_bytes());
    out.extend((comp.len() as u32).to_le_bytes());
    out.extend((data.len() as u32).to_le_bytes());
    out.extend((name.len() as u16).to_le_bytes());
    out.extend([0u8; 12]);
    out.extend(0u32.to_le_bytes());
    out.extend(name.as_bytes());
    let cd_len = out.len() - cd;
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0, 0, 0, 0, 1, 0, 1, 0]);
    out.extend((cd_len as u32).to_le_bytes());
    out.extend((cd as u32).to_le_bytes());
    out.extend([0, 0]);
    out
}

fn safetensors_small() -> Vec<u8> {
    let header = "{\"__metadata__\":{\"a\":\"b\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},\"m\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[26,30]}}  ";
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(features(2, 3, 4));
    out.extend([9, 9, 1, 2, 3, 4, 5]);
    out
}

/// Whatever a reader accepts, it must restore exactly; errors must be of
/// the input kinds.
fn check_reader(bytes: &[u8], format: SourceFormat, what: &str) {
    match io::parse(bytes, format, &ParseOptions::default()) {
        Ok(doc) => {
            let back = doc
                .restore_to_vec()
                .unwrap_or_else(|e| panic!("{what}: accepted but cannot restore: {e}"));
            assert!(
                back == bytes,
                "{what}: accepted and restored different bytes"
            );
        }
        Err(e) => assert!(
            matches!(
                e.kind(),
                ErrorKind::Corrupt | ErrorKind::Truncated | ErrorKind::Unsupported
            ),
            "{what}: {e}"
        ),
    }
}

fn sweep(valid: &[u8], format: SourceFormat) {
    check_reader(valid, format, "valid");
    for len in 0..valid.len() {
        check_reader(
            &valid[..len],
            format,
            &format!("{format} truncated to {len}"),
        );
    }
    let mut m = valid.to_vec();
    for i in 0..valid.len() {
        for x in [0x01u8, 0xff] {
            m[i] ^= x;
            check_reader(&m, format, &format!("{format} byte {i} ^ {x:#x}"));
            m[i] ^= x;
        }
    }
}

#[test]
fn npy_hostile() {
    sweep(&npy("<f4", "(3, 2)", &features(3, 2, 1)), SourceFormat::Npy);
}

#[test]
fn npz_hostile() {
    let arr = npy("<f4", "(4, 2)", &features(4, 2, 2));
    sweep(&zip1("x.npy", &arr, true), SourceFormat::Npz);
    sweep(&zip1("y.npy", &arr, false), SourceFormat::Npz);
}

#[test]
fn safetensors_hostile() {
    sweep(&safetensors_small(), SourceFormat::Safetensors);
}

#[test]
fn zip_bomb_claims_are_refused_before_allocating() {
    // A deflated member whose central directory claims 4 GiB from a few
    // dozen compressed bytes.
    let arr = npy("<f4", "(4, 2)", &features(4, 2, 2));
    let mut z = zip1("x.npy", &arr, true);
    let cd = z.len() - 22 - (46 + 5);
    z[cd + 24..cd + 28].copy_from_slice(&0xFFFF_FFFEu32.to_le_bytes());
    let e = io::parse(&z, SourceFormat::Npz, &ParseOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(e.message().contains("more than deflate can produce"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for f in [SourceFormat::Npy, SourceFormat::Npz, SourceFormat::Safetensors] {
            check_reader(&bytes, f, "arbitrary");
        }
        prop_assert!(IbpFile::from_bytes(&bytes).is_err());
    }

    #[test]
    fn arbitrary_headers_never_panic(header in "\\{('[a-z_]{1,12}': ([0-9]{1,4}|'[<|>]?[a-zA-Z][0-9]{0,2}'|True|False|\\(([0-9]{1,3}, ?){0,3}\\)), ?){0,4}\\}") {
        let mut f = b"\x93NUMPY\x01\x00".to_vec();
        f.extend((header.len() as u16).to_le_bytes());
        f.extend(header.as_bytes());
        f.extend([0u8; 64]);
        check_reader(&f, SourceFormat::Npy, "arbitrary header");
    }
}

#[test]
fn a_restore_into_a_failing_writer_is_an_io_error() {
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let (bytes, _) = small_container();
    let file = IbpFile::from_bytes(&bytes).unwrap();
    assert_eq!(
        file.restore(&mut Full, &RestoreOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::Io
    );
    let doc = io::Document {
        format: SourceFormat::Raw,
        groups: vec![],
        envelope: vec![Segment::Raw(Cow::Borrowed(&b"x"[..]))],
        original: Fingerprint::of(b"x"),
        notes: vec![],
        deferred: Vec::new(),
    };
    assert_eq!(doc.restore(&mut Full).unwrap_err().kind(), ErrorKind::Io);
}
