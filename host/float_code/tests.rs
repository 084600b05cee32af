//! Tests of the float coding: bit-exact round trips on every type, the
//! bound, the table's bytes, and hostile input.

use super::*;
use crate::ErrorKind;

/// A xorshift generator, seeded.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A roughly normal value: the sum of four uniforms, centred.
    fn normal(&mut self) -> f32 {
        let s: f32 = (0..4)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32)
            .sum();
        s - 2.0
    }
}

/// Bits of `x` in `t`: bf16 and f16 rounded to nearest even, FP8 by the
/// test data's casts.
fn cast(t: FloatType, x: f32) -> u32 {
    match t {
        FloatType::F32 => x.to_bits(),
        FloatType::Bf16 => u32::from(half::bf16::from_f32(x).to_bits()),
        FloatType::F16 => u32::from(half::f16::from_f32(x).to_bits()),
        FloatType::E4M3 => u32::from(ibp_testdata::fp8::E4M3.from_f32(x)),
        FloatType::E5M2 => u32::from(ibp_testdata::fp8::E5M2.from_f32(x)),
    }
}

fn to_bytes(t: FloatType, bits: &[u32]) -> Vec<u8> {
    bits.iter()
        .flat_map(|&b| b.to_le_bytes()[..t.bytes()].to_vec())
        .collect()
}

/// `rows × n` bell-shaped values of scale `scale`, in `t`.
fn weights(t: FloatType, rows: usize, n: usize, scale: f32, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    let bits: Vec<u32> = (0..rows * n).map(|_| cast(t, r.normal() * scale)).collect();
    to_bytes(t, &bits)
}

/// Compress, check the bound and every stored row's length, decode by
/// range, by gather and from the bytes; all must give `data` back.
fn round_trip(t: FloatType, data: &[u8], row_bytes: usize, opts: &FitOptions) -> FloatCoded {
    let rows = Rows::new(data, row_bytes).unwrap();
    let table = fit(t, rows, opts).unwrap();
    let g = compress(&table, rows).unwrap();
    let bytes = g.to_bytes();
    assert_eq!(bytes.len() as u64, g.stored_bytes());
    assert!(g.stored_bytes() <= max_stored_bytes(rows.rows() as u64, row_bytes));
    for i in 0..rows.rows() {
        assert!(g.row_range(i).unwrap().len() <= max_stored_row_bytes(row_bytes));
    }
    assert_eq!(g.decompress().unwrap(), data, "{t} {opts:?}");
    let back = FloatCoded::from_bytes(&bytes).unwrap();
    assert_eq!(back, g);
    let n = rows.rows();
    if n > 0 {
        let ids: Vec<u64> = (0..n as u64).rev().step_by(3).chain([0, 0]).collect();
        let mut out = vec![0u8; ids.len() * row_bytes];
        back.gather(&ids, &mut out).unwrap();
        for (o, &i) in out.chunks(row_bytes).zip(&ids) {
            assert_eq!(o, rows.row(i as usize));
        }
        let mid = n / 3..n;
        let mut out = vec![0u8; mid.len() * row_bytes];
        back.decompress_rows(mid.clone(), &mut out).unwrap();
        assert_eq!(out, &data[mid.start * row_bytes..]);
    }
    g
}

#[test]
fn every_type_round_trips_and_compresses_bell_shaped_values() {
    for t in FloatType::ALL {
        // 37 elements a row: no sub-stream count divides it.
        let data = weights(t, 300, 37, 0.05, 7);
        let mut sizes = Vec::new();
        for s in [1, 2, 4, 6, 8, 32] {
            for len in [8, 11, 12, 15] {
                let o = FitOptions::default()
                    .with_sub_streams(s)
                    .with_max_code_len(len);
                let g = round_trip(t, &data, 37 * t.bytes(), &o);
                sizes.push(g.stored_bytes());
                assert!(g.table().max_code_len() >= len);
            }
        }
        // With one sub-stream, the code must save on such data.
        assert!(
            sizes[0] < data.len() as u64,
            "{t}: {} of {}",
            sizes[0],
            data.len()
        );
    }
}

#[test]
fn every_split_round_trips() {
    for t in FloatType::ALL {
        let data = weights(t, 64, 24, 3.0, 11);
        let bits = t.bits() as u8;
        for low in [0, 1, t.mantissa_bits(), bits.saturating_sub(12)] {
            for width in [1, 5, 8, 12] {
                let s = Split::new(low, width);
                if s.check(t).is_err() {
                    continue;
                }
                let o = FitOptions::default().with_split(s).with_sub_streams(6);
                let g = round_trip(t, &data, 24 * t.bytes(), &o);
                assert_eq!(g.table().split(), s);
            }
        }
        for sign in [false, true] {
            for m in 0..=3 {
                let s = Split::exponent(t, sign, m);
                round_trip(
                    t,
                    &data,
                    24 * t.bytes(),
                    &FitOptions::default().with_split(s),
                );
            }
        }
    }
}

#[test]
fn adversarial_rows_round_trip_within_the_bound() {
    for t in FloatType::ALL {
        let e = t.exponent_bits();
        let m = t.mantissa_bits();
        let sign = 1u32 << (t.bits() - 1);
        let exp_max = (1u32 << e) - 1;
        let mut bits = Vec::new();
        // Every exponent once, with both signs and mantissas 0, 1, max:
        // infinities and NaNs (exponent all ones), subnormals (exponent 0).
        for ex in 0..=exp_max {
            for mant in [0, 1, (1u32 << m) - 1] {
                bits.push((ex << m) | mant);
                bits.push(sign | (ex << m) | mant);
            }
        }
        let mut r = Rng(99);
        // Random bits, then a run of one value.
        bits.extend((0..512).map(|_| r.next() as u32 & (u32::MAX >> (32 - t.bits()))));
        bits.extend(std::iter::repeat_n(1u32 << m, 512));
        let row = 16;
        bits.truncate(bits.len() / row * row);
        let data = to_bytes(t, &bits);
        for s in [1, 4, 32] {
            round_trip(
                t,
                &data,
                row * t.bytes(),
                &FitOptions::default()
                    .with_sub_streams(s)
                    .with_max_code_len(8),
            );
        }
    }
}

#[test]
fn a_lone_symbol_takes_no_bits_and_rows_outside_the_table_stay_raw() {
    // Every value 1.5: one symbol, coded in 0 bits.
    let data: Vec<u8> = std::iter::repeat_n(1.5f32.to_bits().to_le_bytes(), 4 * 100)
        .flatten()
        .collect();
    let rows = Rows::new(&data, 16).unwrap();
    let t = fit(FloatType::F32, rows, &FitOptions::default()).unwrap();
    assert_eq!(t.symbols().len(), 1);
    assert_eq!(t.symbols()[0].1, 0);
    let g = round_trip(FloatType::F32, &data, 16, &FitOptions::default());
    assert_eq!(g.coded_rows(), 100);
    // A row with an exponent the table lacks is stored raw, and decodes.
    let mut other = data.clone();
    other[..4].copy_from_slice(&1e30f32.to_le_bytes());
    let g = compress(&t, Rows::new(&other, 16).unwrap()).unwrap();
    assert_eq!(g.coded_rows(), 99);
    assert_eq!(g.row_range(0).unwrap().len(), 16);
    assert_eq!(g.decompress().unwrap(), other);
}

#[test]
fn empty_groups_and_bad_arguments() {
    let g = round_trip(FloatType::Bf16, &[], 8, &FitOptions::default());
    assert_eq!((g.rows(), g.table().symbols().len()), (0, 0));
    let data = weights(FloatType::Bf16, 4, 4, 1.0, 3);
    let rows = Rows::new(&data, 8).unwrap();
    let kind = |r: Result<Table>| r.unwrap_err().kind();
    let o = FitOptions::default();
    assert_eq!(
        kind(fit(FloatType::F32, Rows::new(&data, 2).unwrap(), &o)),
        ErrorKind::InvalidArgument
    );
    // 0: by the row's length (four for these short rows).
    assert_eq!(
        fit(FloatType::Bf16, rows, &o.with_sub_streams(0))
            .unwrap()
            .sub_streams(),
        4
    );
    assert_eq!(
        kind(fit(FloatType::Bf16, rows, &o.with_sub_streams(3))),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(fit(FloatType::Bf16, rows, &o.with_max_code_len(16))),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(fit(FloatType::Bf16, rows, &o.with_split(Split::new(8, 9)))),
        ErrorKind::InvalidArgument
    );
    let t = fit(FloatType::Bf16, rows, &o).unwrap();
    let g = compress(&t, rows).unwrap();
    assert_eq!(
        compress(&t, Rows::new(&data[..30], 3).unwrap())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let mut out = vec![0u8; 8];
    assert_eq!(
        g.gather(&[4], &mut out).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        g.decompress_rows(2..5, &mut [0u8; 24]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        g.decompress_rows(0..2, &mut [0u8; 15]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn limited_codes_are_complete_and_within_the_limit() {
    // Fibonacci counts: Huffman's depth grows by one a symbol.
    let mut counts = vec![0u64; 64];
    let (mut a, mut b) = (1u64, 1u64);
    for c in counts.iter_mut().take(40) {
        *c = a;
        (a, b) = (b, a + b);
    }
    for limit in [6, 8, 11, 15] {
        let (lens, ml) = table::code_lengths(&counts, limit);
        assert_eq!(ml, limit);
        assert_eq!(lens.len(), 40);
        assert!(lens.iter().all(|&(_, l)| (1..=limit).contains(&l)));
        let kraft: u64 = lens.iter().map(|&(_, l)| 1u64 << (limit - l)).sum();
        assert_eq!(kraft, 1 << limit);
        Table::from_lengths(FloatType::Bf16, Split::new(10, 6), 1, ml, lens).unwrap();
    }
    // More symbols than 2^limit: the limit rises to fit them.
    let counts = vec![1u64; 300];
    let (lens, ml) = table::code_lengths(&counts, 8);
    assert_eq!(ml, 9);
    Table::from_lengths(FloatType::F16, Split::new(0, 9), 1, ml, lens).unwrap();
}

#[test]
fn table_bytes_are_checked() {
    let data = weights(FloatType::F16, 50, 16, 0.1, 5);
    let rows = Rows::new(&data, 32).unwrap();
    let t = fit(FloatType::F16, rows, &FitOptions::default()).unwrap();
    let b = t.to_bytes();
    assert_eq!(b.len(), t.encoded_len());
    assert_eq!(Table::from_bytes(&b).unwrap(), (t.clone(), b.len()));
    for cut in 0..b.len() {
        assert_eq!(
            Table::from_bytes(&b[..cut]).unwrap_err().kind(),
            ErrorKind::Truncated
        );
    }
    // A code length changed breaks the Kraft sum; a type code 0 is none.
    let mut bad = b.clone();
    bad[super::table::TABLE_HEADER + 2] ^= 1;
    assert_eq!(
        Table::from_bytes(&bad).unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    let mut bad = b.clone();
    bad[0] = 0;
    assert_eq!(
        Table::from_bytes(&bad).unwrap_err().kind(),
        ErrorKind::Corrupt
    );
}

/// Decode all of a possibly damaged group; an error is fine, a panic is
/// not. Returns whether it decoded.
fn decode_damaged(bytes: &[u8]) -> Option<Vec<u8>> {
    let g = FloatCoded::from_bytes(bytes).ok()?;
    let all = g.decompress().ok();
    for i in 0..g.rows() {
        let mut row = vec![0u8; g.row_bytes()];
        let _ = g.gather(&[i as u64], &mut row);
    }
    all
}

#[test]
fn truncated_and_flipped_groups_never_panic() {
    for (t, s) in [
        (FloatType::Bf16, 4),
        (FloatType::F32, 1),
        (FloatType::E4M3, 8),
    ] {
        let data = weights(t, 40, 24, 0.02, 13);
        let rows = Rows::new(&data, 24 * t.bytes()).unwrap();
        let table = fit(t, rows, &FitOptions::default().with_sub_streams(s)).unwrap();
        let g = compress(&table, rows).unwrap();
        assert!(g.coded_rows() > 30, "{t}: {} rows coded", g.coded_rows());
        let bytes = g.to_bytes();
        for cut in 0..bytes.len() {
            let e = FloatCoded::from_bytes(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(e.kind(), ErrorKind::Truncated | ErrorKind::Corrupt),
                "{e}"
            );
        }
        let mut detected = 0;
        let mut r = Rng(5);
        for pos in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[pos] ^= 1 << (r.next() % 8);
            match decode_damaged(&bad) {
                None => detected += 1,
                // A residual bit changed decodes to another value; that
                // is the container's checksum's to catch, not the coding's.
                Some(out) => assert_eq!(out.len(), data.len()),
            }
            let mut bad = bytes.clone();
            bad[pos] = r.next() as u8;
            decode_damaged(&bad);
        }
        assert!(detected > 0, "{t}: no flip detected");
    }
}

/// The worked example of `docs/FORMAT.md` §7.7, byte for byte.
#[test]
fn the_worked_example_of_format_md_has_its_bytes() {
    // Two equal rows of E4M3 values 1.0, 2.0, 1.125, -1.0.
    let data = [0x38u8, 0x40, 0x39, 0xb8, 0x38, 0x40, 0x39, 0xb8];
    let rows = Rows::new(&data, 4).unwrap();
    let opts = FitOptions::default()
        .with_split(Split::new(3, 4))
        .with_sub_streams(2)
        .with_max_code_len(4);
    let t = fit(FloatType::E4M3, rows, &opts).unwrap();
    let g = compress(&t, rows).unwrap();
    #[rustfmt::skip]
    let expected: Vec<u8> = [
        // table: E4M3, low 3, width 4, S 2, M 4, reserved, 2 symbols:
        // 7 and 8, both 1 bit long.
        &[4, 3, 4, 2, 4, 0, 2, 0, 7, 0, 1, 8, 0, 1][..],
        // index: L = 4, N = 2, B = 2^8, w = 2, reserved.
        &[4, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 8, 2, 0, 0],
        // block bases: 0, then the payload's length 6.
        &[0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0],
        // relative starts: 0 and 3.
        &[0, 0, 3, 0],
        // payload: two rows of residuals 0, 0, 1, 8 and one code byte.
        &[0x00, 0x81, 0x80, 0x00, 0x81, 0x80],
    ]
    .concat();
    assert_eq!(g.to_bytes(), expected);
    assert_eq!(
        FloatCoded::from_bytes(&expected)
            .unwrap()
            .decompress()
            .unwrap(),
        data
    );
}

mod random {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any rows, bell-shaped or random bits, under any valid options:
        /// the round trip is exact and every stored row within the bound.
        #[test]
        fn any_rows_under_any_options_round_trip(
            ti in 0usize..5,
            n in 1usize..50,
            rows in 0usize..24,
            s in prop::sample::select(vec![1u8, 2, 4, 6, 8, 16, 32]),
            max_len in 1u8..=15,
            random_bits in any::<bool>(),
            seed in 1u64..u64::MAX,
        ) {
            let t = FloatType::ALL[ti];
            let data = if random_bits {
                let mut r = Rng(seed);
                (0..rows * n * t.bytes()).map(|_| r.next() as u8).collect()
            } else {
                weights(t, rows, n, 0.1, seed)
            };
            let opts = FitOptions::default().with_sub_streams(s).with_max_code_len(max_len);
            round_trip(t, &data, n * t.bytes(), &opts);
        }
    }
}

#[test]
fn sub_streams_follow_the_row_length() {
    use super::sub_streams_for;
    let got: Vec<u8> = [1, 384, 512, 513, 1024, 2048, 4096, 1 << 20]
        .into_iter()
        .map(sub_streams_for)
        .collect();
    assert_eq!(got, [4, 4, 4, 8, 8, 16, 32, 32]);
    // The default fit takes the rule; an explicit count stays.
    let data = weights(FloatType::Bf16, 3, 2048, 1.0, 5);
    let rows = Rows::new(&data, 4096).unwrap();
    let t = fit(FloatType::Bf16, rows, &FitOptions::default()).unwrap();
    assert_eq!(t.sub_streams(), 16);
    let t = fit(
        FloatType::Bf16,
        rows,
        &FitOptions::default().with_sub_streams(6),
    )
    .unwrap();
    assert_eq!(t.sub_streams(), 6);
}
