//! The worked examples of `docs/FORMAT.md` §5, byte for byte. The expected
//! bytes were derived by hand from the spec (the derivations are in the doc);
//! every test checks the encoder against them and the decoder on them.

use ibp::codebook::{ChunkSize, Codebook, Threshold};
use ibp::encode::{decode_row, encode_row, encoded_bits, encoded_len, stored_len};
use ibp::fit::{FitOptions, count_bits, fit};
use ibp::layout::{
    FixedStrideRef, LayoutOptions, PackedRef, compress_fixed, compress_packed, decompress_fixed,
    decompress_packed,
};
use ibp::{ErrorKind, Rows};

/// §5.1's codebook.
fn cb1() -> Codebook {
    Codebook::new(
        ChunkSize::One,
        vec![0xf0, 0xff, 0x0f],
        vec![0x30, 0x00, 0x05],
    )
    .unwrap()
}

/// §5.2's codebook.
fn cb4() -> Codebook {
    Codebook::new(
        ChunkSize::Four,
        vec![0xff, 0xff, 0x00, 0xc0, 0xff, 0x0f],
        vec![0, 0, 0, 0x40, 0x12, 0x03],
    )
    .unwrap()
}

const A: [u8; 6] = [0x00, 0x00, 0x48, 0x42, 0x12, 0xa3];
const A_ENC: [u8; 3] = [0x23, 0x09, 0x0a];
const B: [u8; 6] = [0x00, 0x00, 0x48, 0xc2, 0x12, 0xa3];
const B_ENC: [u8; 5] = [0x02, 0x00, 0x20, 0x09, 0x2b];
const R: [u8; 6] = [0xff; 6];

/// Encode `row` (which must be stored encoded), compare with `want`, and
/// decode `want` back to `row`.
fn check_encoded(cb: &Codebook, row: &[u8], want: &[u8]) {
    let mut out = vec![0u8; row.len()];
    assert_eq!(encode_row(cb, row, &mut out).unwrap(), Some(want.len()));
    assert_eq!(&out[..want.len()], want);
    assert_eq!(stored_len(cb, row).unwrap(), want.len());
    let mut back = vec![0u8; row.len()];
    assert_eq!(decode_row(cb, want, &mut back).unwrap(), want.len());
    assert_eq!(back, row);
}

#[test]
fn example_5_1_one_byte_chunks() {
    let cb = cb1();
    let e = &cb.tables().entries();
    assert_eq!(
        e.iter().map(|t| t.free).collect::<Vec<_>>(),
        [0x0f, 0x00, 0xf0]
    );
    assert_eq!(encoded_bits(&cb, &[0x3a, 0x00, 0xc5]).unwrap(), 11);
    check_encoded(&cb, &[0x3a, 0x00, 0xc5], &[0x57, 0x06]);
    // A set padding bit (bits 11–15) is corrupt.
    let err = decode_row(&cb, &[0x57, 0x06 | 0x08], &mut [0u8; 3]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
}

#[test]
fn example_5_2_four_byte_chunks_with_a_ragged_tail() {
    let cb = cb4();
    let e = cb.tables().entries();
    assert_eq!(
        (e[0].mask, e[0].bitval, e[0].free, e[0].width),
        (0xc000_ffff, 0x4000_0000, 0x3fff_0000, 32)
    );
    assert_eq!(
        (e[1].mask, e[1].bitval, e[1].free, e[1].width),
        (0x0fff, 0x0312, 0xf000, 16)
    );
    assert_eq!(encoded_bits(&cb, &A).unwrap(), 20);
    check_encoded(&cb, &A, &A_ENC);
    assert_eq!(encoded_bits(&cb, &B).unwrap(), 38);
    check_encoded(&cb, &B, &B_ENC);
}

#[test]
fn example_5_3_raw_tensors() {
    let (cb, x) = (cb1(), [0x3a, 0x01, 0xc5]);
    assert_eq!(encoded_bits(&cb, &x).unwrap(), 19);
    assert_eq!(
        (encoded_len(&cb, &x).unwrap(), stored_len(&cb, &x).unwrap()),
        (3, 3)
    );
    let mut out = [0xeeu8; 3];
    assert_eq!(encode_row(&cb, &x, &mut out).unwrap(), None);
    assert_eq!(out, [0xee; 3]);
    // A decoder given such a stream as "encoded" rejects it: E is not < L.
    let stream = 0b101u32 | 0xa << 3 | 0x01 << 7 | 0xc << 15;
    let err = decode_row(&cb, &stream.to_le_bytes()[..3], &mut [0u8; 3]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);

    let cb = cb4();
    assert_eq!(
        (
            encoded_bits(&cb, &R).unwrap(),
            encoded_len(&cb, &R).unwrap()
        ),
        (50, 7)
    );
    assert_eq!(encode_row(&cb, &R, &mut [0u8; 6]).unwrap(), None);
}

#[test]
fn example_5_4_both_layouts_of_three_tensors() {
    let cb = cb4();
    let data: Vec<u8> = [A, R, B].concat();
    let rows = Rows::new(&data, 6).unwrap();
    let payload: Vec<u8> = [&A_ENC[..], &R, &B_ENC].concat();

    let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    assert_eq!(packed.flags, [0x05]);
    assert_eq!(packed.offsets, [0, 3, 9, 14]);
    assert_eq!(packed.payload, payload);
    // Decode the hand-written bytes, offsets as stored in a file.
    let offsets_le: Vec<u8> = [0u64, 3, 9, 14]
        .iter()
        .flat_map(|o| o.to_le_bytes())
        .collect();
    let view = PackedRef::from_le_offsets(6, 3, &[0x05], &offsets_le, &payload).unwrap();
    view.validate().unwrap();
    let mut out = vec![0u8; 18];
    decompress_packed(&cb, &view, &mut out).unwrap();
    assert_eq!(out, data);

    let slots: Vec<u8> = [&A_ENC[..], &[0; 3], &R, &B_ENC, &[0]].concat();
    let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
    assert_eq!(
        (fixed.flags.as_slice(), fixed.slots.as_slice()),
        (&[0x05u8][..], slots.as_slice())
    );
    let view = FixedStrideRef::new(6, 3, &[0x05], &slots).unwrap();
    view.validate(&cb).unwrap();
    out.fill(0);
    decompress_fixed(&cb, &view, &mut out).unwrap();
    assert_eq!(out, data);
}

#[test]
fn example_5_5_codebook_from_counts_and_the_tie_break() {
    let data = [0x01, 0x03, 0x01, 0x81];
    let rows = Rows::new(&data, 1).unwrap();
    let counts = count_bits(rows);
    assert_eq!(counts, [4, 1, 0, 0, 0, 0, 0, 1]);
    let at = |bp| {
        let cb = Codebook::from_counts(
            &counts,
            4,
            Threshold::from_basis_points(bp).unwrap(),
            ChunkSize::One,
        )
        .unwrap();
        (cb.mask().to_vec(), cb.bitval().to_vec())
    };
    assert_eq!(at(7000), (vec![0xff], vec![0x01]));
    assert_eq!(at(8000), (vec![0x7d], vec![0x01]));
    assert_eq!(at(9500), (vec![0x7d], vec![0x01]));

    let f = fit(rows, &FitOptions::default()).unwrap();
    assert_eq!(f.candidates.len(), 24);
    assert!(
        f.candidates
            .iter()
            .all(|c| c.stored_bytes == 4 && c.encoded_rows == 0)
    );
    assert_eq!(
        (f.threshold.basis_points(), f.codebook.chunk()),
        (9500, ChunkSize::Eight)
    );
    assert_eq!(
        (f.codebook.mask(), f.codebook.bitval()),
        (&[0x7d][..], &[0x01][..])
    );
}
