//! Tests of the layouts.

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::ErrorKind;
use crate::codebook::ChunkSize;

#[test]
#[should_panic]
fn flag_past_the_bitmap_panics_as_documented() {
    let _ = flag(&[0xff], 8);
}

#[test]
#[should_panic]
fn set_flag_past_the_bitmap_panics_as_documented() {
    set_flag(&mut [0], 8, true);
}

/// L = 6, C = 2, all bits invariant at 0: a zero row encodes to one byte
/// (3 participation bits), a row with one non-zero chunk to 3 bytes, a
/// row of 0xff stays raw.
fn dataset() -> (Codebook, Vec<u8>) {
    let cb = Codebook::new(ChunkSize::Two, vec![0xff; 6], vec![0; 6]).unwrap();
    let mut data = vec![0u8; 6 * 11];
    data[6..12].copy_from_slice(&[0, 0, 0x34, 0x12, 0, 0]);
    data[12..18].fill(0xff);
    data[60] = 1;
    (cb, data)
}

#[test]
fn flags_round_trip_and_padding_is_checked() {
    let mut f = vec![0u8; flag_bytes(11)];
    for i in [0, 3, 8, 10] {
        set_flag(&mut f, i, true);
    }
    set_flag(&mut f, 3, false);
    assert_eq!(f, [0b0000_0001, 0b0000_0101]);
    assert!(flag(&f, 10) && !flag(&f, 3));
    assert!(check_flags(&f, 11).is_ok());
    assert_eq!(check_flags(&f, 10).unwrap_err().kind(), ErrorKind::Corrupt);
    assert_eq!(check_flags(&f, 17).unwrap_err().kind(), ErrorKind::Corrupt);
    assert_eq!(flag_bytes(0), 0);
}

#[test]
fn packed_and_fixed_round_trip_with_progress() {
    let (cb, data) = dataset();
    let rows = Rows::new(&data, 6).unwrap();
    let sizes = size_query(&cb, rows).unwrap();
    assert_eq!(sizes.stored[..3], [1, 3, 6]);
    assert_eq!((sizes.encoded_rows, sizes.raw_rows), (10, 1));
    let seen = AtomicU64::new(0);
    let hook = |done, total| {
        assert_eq!(total, data.len() as u64);
        seen.fetch_max(done, Ordering::Relaxed);
    };
    let p = compress_packed(&cb, rows, &LayoutOptions::default().with_progress(&hook)).unwrap();
    assert_eq!(seen.load(Ordering::Relaxed), data.len() as u64);
    assert_eq!(p.payload.len() as u64, sizes.total_stored);
    assert_eq!(p.offsets[..4], [0, 1, 4, 10]);
    assert_eq!(p.flags, [0b1111_1011, 0b0000_0111]);
    p.view().validate().unwrap();
    let mut out = vec![0u8; data.len()];
    decompress_packed(&cb, &p.view(), &mut out).unwrap();
    assert_eq!(out, data);
    let mut one = [0u8; 6];
    decompress_packed_row(&cb, &p.view(), 1, &mut one).unwrap();
    assert_eq!(one, data[6..12]);

    let f = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
    assert_eq!(f.flags, p.flags);
    // Participation 0b101, then 0x1234 from bit 3: 0x91a5.
    assert_eq!(f.slots[6..12], [0xa5, 0x91, 0, 0, 0, 0]);
    f.view().validate(&cb).unwrap();
    out.fill(0);
    decompress_fixed(&cb, &f.view(), &mut out).unwrap();
    assert_eq!(out, data);
    decompress_fixed_row(&cb, &f.view(), 2, &mut one).unwrap();
    assert_eq!(one, [0xff; 6]);
}

#[test]
fn le_offsets_are_read_in_place_or_copied() {
    let (cb, data) = dataset();
    let p = compress_packed(&cb, Rows::new(&data, 6).unwrap(), &LayoutOptions::default()).unwrap();
    let mut le: Vec<u8> = vec![0];
    le.extend(p.offsets.iter().flat_map(|o| o.to_le_bytes()));
    // Unaligned (offset by one byte): decoded into a vector.
    let view = PackedRef::from_le_offsets(6, 11, &p.flags, &le[1..], &p.payload).unwrap();
    assert_eq!(view.offsets(), p.offsets);
    let mut out = vec![0u8; data.len()];
    decompress_packed(&cb, &view, &mut out).unwrap();
    assert_eq!(out, data);
    assert!(PackedRef::from_le_offsets(6, 11, &p.flags, &le[1..le.len() - 1], &p.payload).is_err());
    assert!(PackedRef::from_le_offsets(6, 10, &p.flags, &le[1..], &p.payload).is_err());
}

#[test]
fn damaged_packed_datasets_are_typed_errors() {
    let (cb, data) = dataset();
    let p = compress_packed(&cb, Rows::new(&data, 6).unwrap(), &LayoutOptions::default()).unwrap();
    let mut out = vec![0u8; data.len()];
    let check = |p: &Packed, kind: ErrorKind| {
        let mut out = vec![0u8; data.len()];
        assert_eq!(p.view().validate().unwrap_err().kind(), kind);
        assert_eq!(
            decompress_packed(&cb, &p.view(), &mut out)
                .unwrap_err()
                .kind(),
            kind
        );
    };
    let mut bad = p.clone();
    bad.offsets[0] = 1;
    check(&bad, ErrorKind::Corrupt);
    let mut bad = p.clone();
    bad.offsets.swap(1, 2);
    check(&bad, ErrorKind::Corrupt);
    let mut bad = p.clone();
    bad.payload.pop();
    check(&bad, ErrorKind::Truncated);
    let mut bad = p.clone();
    bad.payload.push(0);
    check(&bad, ErrorKind::Corrupt);
    let mut bad = p.clone();
    bad.flags[0] ^= 0b100; // raw tensor 2 flagged encoded: 6 bytes, not < L
    check(&bad, ErrorKind::Corrupt);
    let mut bad = p.clone();
    bad.flags[0] ^= 0b1; // encoded tensor 0 flagged raw: 1 byte, not L
    check(&bad, ErrorKind::Corrupt);
    let mut bad = p.clone();
    bad.flags[1] |= 0x80; // padding
    check(&bad, ErrorKind::Corrupt);
    // Tensor 1 stored as 3 bytes but its participation bits say 1 byte:
    // only decoding sees this.
    let mut bad = p.clone();
    bad.payload[1] = 0b111;
    assert!(bad.view().validate().is_ok());
    assert_eq!(
        decompress_packed(&cb, &bad.view(), &mut out)
            .unwrap_err()
            .kind(),
        ErrorKind::Corrupt
    );
    // Wrong arguments.
    let other = Codebook::new(ChunkSize::Two, vec![0xff; 4], vec![0; 4]).unwrap();
    assert_eq!(
        decompress_packed(&other, &p.view(), &mut out)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        decompress_packed(&cb, &p.view(), &mut out[1..])
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        decompress_packed_row(&cb, &p.view(), 11, &mut [0; 6])
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert!(
        compress_packed(
            &other,
            Rows::new(&data, 6).unwrap(),
            &LayoutOptions::default()
        )
        .is_err()
    );
}

#[test]
fn damaged_fixed_datasets_are_typed_errors() {
    let (cb, data) = dataset();
    let f = compress_fixed(&cb, Rows::new(&data, 6).unwrap(), &LayoutOptions::default()).unwrap();
    let mut out = vec![0u8; data.len()];
    let mut bad = f.clone();
    bad.slots[6] = 0b111; // every chunk claims to match: E = 1, rest not zero
    assert_eq!(
        bad.view().validate(&cb).unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    let mut bad = f.clone();
    bad.flags[0] |= 0b100; // raw 0xff row flagged encoded: padding bits set
    assert_eq!(
        decompress_fixed(&cb, &bad.view(), &mut out)
            .unwrap_err()
            .kind(),
        ErrorKind::Corrupt
    );
    assert_eq!(
        FixedStrideRef::new(6, 11, &f.flags, &f.slots[1..])
            .unwrap_err()
            .kind(),
        ErrorKind::Truncated
    );
    assert!(FixedStrideRef::new(0, 11, &f.flags, &f.slots).is_err());
}

#[test]
fn views_of_malformed_owned_layouts_are_errors_not_panics() {
    let (cb, data) = dataset();
    let rows = Rows::new(&data, 6).unwrap();
    let mut out = vec![0u8; data.len()];
    let mut p = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    p.offsets.pop();
    assert_eq!(
        decompress_packed(&cb, &p.view(), &mut out)
            .unwrap_err()
            .kind(),
        ErrorKind::Corrupt
    );
    assert!(decompress_packed_row(&cb, &p.view(), 10, &mut out[..6]).is_err());
    assert!(p.view().stored(10).is_err());
    let mut p = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    p.flags.pop();
    assert!(decompress_packed_row(&cb, &p.view(), 10, &mut out[..6]).is_err());
    let mut f = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
    f.slots.truncate(20);
    assert_eq!(
        decompress_fixed(&cb, &f.view(), &mut out)
            .unwrap_err()
            .kind(),
        ErrorKind::Truncated
    );
    assert!(decompress_fixed_row(&cb, &f.view(), 10, &mut out[..6]).is_err());
    assert!(f.view().validate(&cb).is_err());
}

#[test]
fn empty_datasets_round_trip() {
    let (cb, _) = dataset();
    let rows = Rows::new(&[], 6).unwrap();
    let p = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    assert_eq!(
        (p.flags.len(), p.offsets.as_slice(), p.payload.len()),
        (0, &[0u64][..], 0)
    );
    p.view().validate().unwrap();
    decompress_packed(&cb, &p.view(), &mut []).unwrap();
    let f = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
    decompress_fixed(&cb, &f.view(), &mut []).unwrap();
}
