//! An arbitrary codebook and arbitrary stored bytes through the decoders:
//! one tensor (`decode_row`), a packed dataset and a fixed-stride dataset.
//! Errors are fine; panics and out-of-bounds access are not. Also checks the
//! round trip: a row the encoder encodes decodes back to itself.
//!
//! Input: byte 0 = chunk size (bits 0-1) and mode (bits 2-3); bytes 1-2 =
//! row length `L` (mod 200, plus 1); then `Mask` and `Bitval` (`L` bytes
//! each, `Bitval` masked so the codebook is valid); then the mode's data.
#![no_main]

use std::borrow::Cow;

use ibp::codebook::{ChunkSize, Codebook};
use ibp::encode::{decode_row, encode_row, stream_len};
use ibp::layout::{
    FixedStrideRef, PackedRef, decompress_fixed, decompress_fixed_row, decompress_packed,
    decompress_packed_row,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [head, l0, l1, rest @ ..] = data else {
        return;
    };
    let chunk = ChunkSize::ALL[usize::from(head & 3)];
    let l = 1 + usize::from(u16::from_le_bytes([*l0, *l1])) % 200;
    if rest.len() < 2 * l {
        return;
    }
    let mask = rest[..l].to_vec();
    let bitval = rest[l..2 * l]
        .iter()
        .zip(&mask)
        .map(|(b, m)| b & m)
        .collect();
    let cb = Codebook::new(chunk, mask, bitval).expect("bitval is masked");
    let tail = &rest[2 * l..];
    let mut out = vec![0u8; l];
    match (head >> 2) & 3 {
        0 => {
            if let Ok(e) = decode_row(&cb, tail, &mut out) {
                assert_eq!(stream_len(&cb, tail).ok(), Some(e));
            }
        }
        1 => {
            let Some(row) = tail.get(..l) else { return };
            let mut enc = vec![0u8; l];
            if let Some(e) = encode_row(&cb, row, &mut enc).expect("row has the codebook's length")
            {
                let n = decode_row(&cb, &enc[..e], &mut out).expect("an encoding decodes");
                assert_eq!(n, e);
                assert_eq!(out, row);
            }
        }
        2 => {
            // rows (1 byte), flags, offsets (8 (rows + 1) bytes), payload.
            let Some((&n, tail)) = tail.split_first() else {
                return;
            };
            let n = usize::from(n % 32);
            let (fl, ol) = (n.div_ceil(8), 8 * (n + 1));
            if tail.len() < fl + ol {
                return;
            }
            let (flags, tail) = tail.split_at(fl);
            let (offsets, payload) = tail.split_at(ol);
            let Ok(p) = PackedRef::from_le_offsets(l, n, flags, offsets, payload) else {
                return;
            };
            let _ = p.validate();
            let mut all = vec![0u8; n * l];
            let _ = decompress_packed(&cb, &p, &mut all);
            for i in 0..n {
                let _ = decompress_packed_row(&cb, &p, i, &mut out);
            }
            let copy = PackedRef::new(l, n, flags, Cow::Owned(p.offsets().to_vec()), payload)
                .expect("same lengths");
            let _ = decompress_packed(&cb, &copy, &mut all);
        }
        _ => {
            // rows (1 byte), flags, slots (rows · L bytes).
            let Some((&n, tail)) = tail.split_first() else {
                return;
            };
            let n = usize::from(n % 32);
            let fl = n.div_ceil(8);
            if tail.len() < fl + n * l {
                return;
            }
            let (flags, slots) = tail.split_at(fl);
            let Ok(f) = FixedStrideRef::new(l, n, flags, &slots[..n * l]) else {
                return;
            };
            let _ = f.validate(&cb);
            let mut all = vec![0u8; n * l];
            let _ = decompress_fixed(&cb, &f, &mut all);
            for i in 0..n {
                let _ = decompress_fixed_row(&cb, &f, i, &mut out);
            }
        }
    }
});
