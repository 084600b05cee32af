//! Property tests of the CPU codec: round trips through both layouts, size
//! queries, the fit's choice against a brute-force evaluation, and hostile
//! input (truncations, byte flips) that must give errors, never panics.
//!
//! Tensor lengths run from 1 to 299 bytes, so every chunk size meets ragged
//! tails; datasets are all-compressible, all-raw, mixed, or sparse.

use ibp::codebook::{ChunkSize, Codebook, Threshold};
use ibp::encode::{decode_row, encode_row, encoded_len, stored_len};
use ibp::fit::{ChunkChoice, FitOptions, Sample, SamplePlan, count_bits, fit};
use ibp::layout::{
    FixedStrideRef, LayoutOptions, PackedRef, compress_fixed, compress_packed, decompress_fixed,
    decompress_fixed_row, decompress_packed, decompress_packed_row, size_query,
};
use ibp::{ErrorKind, Rows};
use proptest::prelude::*;

/// Bit `i` of a flag bitmap (`docs/FORMAT.md` §3: bit `i % 8` of byte `i / 8`
/// is set when tensor `i` is stored encoded), read here from the format's
/// definition rather than through the library's helper.
fn flag(flags: &[u8], i: usize) -> bool {
    flags[i / 8] >> (i % 8) & 1 == 1
}

/// xorshift64*: test data from a seed, so proptest shrinks the seed and the
/// shape instead of megabytes of bytes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn byte(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }

    /// True with probability `pct` percent.
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

/// The kinds of dataset the properties run on.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Every row matches a random codebook in every chunk.
    Compressible,
    /// Uniformly random bytes: under a dense codebook every row stays raw.
    Raw,
    /// Rows of a random codebook with some bytes flipped (`pct` percent).
    Mixed(u64),
    /// Mostly zero bytes, a few random ones (like sparse features).
    Sparse,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Compressible),
        Just(Kind::Raw),
        (1u64..40).prop_map(Kind::Mixed),
        Just(Kind::Sparse),
    ]
}

fn chunk() -> impl Strategy<Value = ChunkSize> {
    prop::sample::select(ChunkSize::ALL.to_vec())
}

/// A random codebook (each bit invariant with probability 3/4) and `n` rows
/// of `l` bytes of the given kind.
fn dataset(l: usize, n: usize, kind: Kind, seed: u64) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut rng = Rng::new(seed);
    let mask: Vec<u8> = (0..l).map(|_| rng.byte() | rng.byte()).collect();
    let bitval: Vec<u8> = mask.iter().map(|m| m & rng.byte()).collect();
    let data = (0..n * l)
        .map(|i| {
            let (m, b) = (mask[i % l], bitval[i % l]);
            let matching = b | (rng.byte() & !m);
            match kind {
                Kind::Compressible => matching,
                Kind::Raw => rng.byte(),
                Kind::Mixed(pct) if rng.chance(pct) => matching ^ (1 << (rng.next() % 8)),
                Kind::Mixed(_) => matching,
                Kind::Sparse if rng.chance(3) => rng.byte(),
                Kind::Sparse => 0,
            }
        })
        .collect();
    (mask, bitval, data)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 192,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Both layouts decode to the original bytes, tensor by tensor and as a
    /// whole, and the size query predicts the packed layout exactly.
    #[test]
    fn layouts_round_trip_and_size_query_is_exact(
        l in 1usize..300, n in 1usize..60, c in chunk(), kind in kind(), seed in any::<u64>(),
        fitted in any::<bool>(),
    ) {
        let (mask, bitval, data) = dataset(l, n, kind, seed);
        let rows = Rows::new(&data, l).unwrap();
        let cb = if fitted {
            fit(rows, &FitOptions::default().with_chunk(ChunkChoice::Fixed(c))).unwrap().codebook
        } else {
            Codebook::new(c, mask, bitval).unwrap()
        };
        let sizes = size_query(&cb, rows).unwrap();
        let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
        packed.view().validate().unwrap();
        prop_assert_eq!(sizes.total_stored, packed.payload.len() as u64);
        for i in 0..n {
            let stored = packed.offsets[i + 1] - packed.offsets[i];
            prop_assert_eq!(sizes.stored[i], stored);
            prop_assert_eq!(stored, stored_len(&cb, rows.row(i)).unwrap() as u64);
            prop_assert_eq!(flag(&packed.flags, i), stored < l as u64);
        }
        let encoded = (0..n).filter(|&i| flag(&packed.flags, i)).count() as u64;
        prop_assert_eq!((sizes.encoded_rows, sizes.raw_rows), (encoded, n as u64 - encoded));
        if matches!(kind, Kind::Compressible) && !fitted {
            // Every chunk matches: E = ⌈(K + 8L − popcount(mask)) / 8⌉.
            let e = (cb.chunks() as u64 + 8 * l as u64 - cb.invariant_bits()).div_ceil(8);
            prop_assert!(sizes.stored.iter().all(|&s| s == e.min(l as u64)));
        }

        let mut out = vec![0u8; data.len()];
        decompress_packed(&cb, &packed.view(), &mut out).unwrap();
        prop_assert_eq!(&out, &data);

        let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
        prop_assert_eq!(&fixed.flags, &packed.flags);
        fixed.view().validate(&cb).unwrap();
        out.fill(0);
        decompress_fixed(&cb, &fixed.view(), &mut out).unwrap();
        prop_assert_eq!(&out, &data);

        let mut one = vec![0u8; l];
        for i in 0..n {
            decompress_packed_row(&cb, &packed.view(), i, &mut one).unwrap();
            prop_assert_eq!(&one[..], rows.row(i));
            decompress_fixed_row(&cb, &fixed.view(), i, &mut one).unwrap();
            prop_assert_eq!(&one[..], rows.row(i));
            // The packed stored form is the fixed slot's prefix, then zeros.
            let s = &packed.payload[packed.offsets[i] as usize..packed.offsets[i + 1] as usize];
            let slot = &fixed.slots[i * l..(i + 1) * l];
            prop_assert_eq!(&slot[..s.len()], s);
            prop_assert!(slot[s.len()..].iter().all(|&b| b == 0));
        }
    }

    /// The fit's candidates equal a brute-force evaluation (a codebook per
    /// candidate, `stored_len` per sampled row), and it picks the smallest
    /// total with the spec's tie-break.
    #[test]
    fn fit_chooses_the_smallest_brute_force_total(
        l in 1usize..120, n in 1usize..60, kind in kind(), seed in any::<u64>(),
        sample in prop_oneof![Just(Sample::All), (1u64..70).prop_map(Sample::Count)],
        fixed in prop::option::of(chunk()),
        custom in prop::option::of(prop::collection::vec(5000u16..=10000, 1..4)),
    ) {
        let (_, _, data) = dataset(l, n, kind, seed);
        let rows = Rows::new(&data, l).unwrap();
        let mut opts = FitOptions::default().with_sample(sample);
        if let Some(c) = fixed {
            opts = opts.with_chunk(ChunkChoice::Fixed(c));
        }
        if let Some(bps) = &custom {
            opts = opts.with_thresholds(bps.iter().map(|&bp| Threshold::from_basis_points(bp).unwrap()));
        }
        let f = fit(rows, &opts).unwrap();

        let plan = SamplePlan::new(n as u64, sample).unwrap();
        let sample_bytes: Vec<u8> =
            (0..plan.len()).flat_map(|i| rows.row(plan.index(i) as usize).to_vec()).collect();
        let srows = Rows::new(&sample_bytes, l).unwrap();
        let counts = count_bits(srows);
        let mut thresholds = opts.thresholds.clone();
        thresholds.sort();
        thresholds.dedup();
        let chunks = fixed.map_or(ChunkSize::ALL.to_vec(), |c| vec![c]);
        prop_assert_eq!(f.candidates.len(), thresholds.len() * chunks.len());
        let mut best: Option<(u64, Threshold, ChunkSize)> = None;
        let mut k = 0;
        for &t in &thresholds {
            for &c in &chunks {
                let cb = Codebook::from_counts(&counts, plan.len(), t, c).unwrap();
                let lens: Vec<usize> = srows.iter().map(|r| stored_len(&cb, r).unwrap()).collect();
                let total: u64 = lens.iter().map(|&s| s as u64).sum();
                let enc = lens.iter().filter(|&&s| s < l).count() as u64;
                let cand = f.candidates[k];
                prop_assert_eq!((cand.threshold, cand.chunk), (t, c));
                prop_assert_eq!((cand.stored_bytes, cand.encoded_rows), (total, enc));
                // Strictly smaller wins; on a tie the later (larger T, then
                // larger C) candidate wins, as the loop runs in ascending order.
                if best.is_none_or(|(b, _, _)| total <= b) {
                    best = Some((total, t, c));
                }
                k += 1;
            }
        }
        let (total, t, c) = best.unwrap();
        prop_assert_eq!((f.chosen.stored_bytes, f.threshold, f.codebook.chunk()), (total, t, c));
        prop_assert_eq!(&f.codebook, &Codebook::from_counts(&counts, plan.len(), t, c).unwrap());
        prop_assert_eq!((f.sample_rows, f.sample_bytes), (plan.len(), plan.len() * l as u64));
    }

    /// Every truncation of an encoded tensor is `Truncated`; flipped bytes
    /// give an error or some decoding, never a panic or a read past the end.
    #[test]
    fn hostile_encoded_tensors_are_errors_not_panics(
        l in 1usize..300, c in chunk(), kind in kind(), seed in any::<u64>(),
        flips in prop::collection::vec((any::<usize>(), 1u8..=255), 1..4),
    ) {
        let (mask, bitval, data) = dataset(l, 1, kind, seed);
        let cb = Codebook::new(c, mask, bitval).unwrap();
        let mut enc = vec![0u8; l];
        let mut out = vec![0u8; l];
        let Some(e) = encode_row(&cb, &data, &mut enc).unwrap() else {
            prop_assert!(encoded_len(&cb, &data).unwrap() >= l);
            return Ok(());
        };
        enc.truncate(e);
        for cut in 0..e {
            let err = decode_row(&cb, &enc[..cut], &mut out).unwrap_err();
            prop_assert_eq!(err.kind(), ErrorKind::Truncated);
        }
        let mut bad = enc.clone();
        for &(at, x) in &flips {
            bad[at % e] ^= x;
        }
        match decode_row(&cb, &bad, &mut out) {
            Ok(e2) => prop_assert!(e2 <= bad.len() && e2 < l),
            Err(err) => prop_assert!(matches!(err.kind(), ErrorKind::Corrupt | ErrorKind::Truncated)),
        }
        // The same with slack after it: still in bounds.
        bad.resize(l + 16, 0xff);
        let _ = decode_row(&cb, &bad, &mut out);
    }

    /// Damaged layouts (flags, offsets, payload, slots) decode to an error or
    /// to some bytes, never a panic; truncated payloads are always errors.
    #[test]
    fn hostile_layouts_are_errors_not_panics(
        l in 1usize..80, n in 1usize..20, c in chunk(), kind in kind(), seed in any::<u64>(),
        part in 0u8..4, at in any::<usize>(), x in 1u64..=u64::MAX,
    ) {
        let (mask, bitval, data) = dataset(l, n, kind, seed);
        let cb = Codebook::new(c, mask, bitval).unwrap();
        let rows = Rows::new(&data, l).unwrap();
        let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
        let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
        let mut out = vec![0u8; data.len()];
        let mut bad = packed.clone();
        match part {
            0 => { let i = at % bad.flags.len(); bad.flags[i] ^= x as u8 | 1; }
            1 => { let i = at % bad.offsets.len(); bad.offsets[i] ^= x; }
            2 if !bad.payload.is_empty() => { let i = at % bad.payload.len(); bad.payload[i] ^= x as u8 | 1; }
            _ => { bad.payload.truncate(at % (bad.payload.len() + 1)); }
        }
        let shortened = bad.payload.len() < packed.payload.len();
        let r = decompress_packed(&cb, &bad.view(), &mut out);
        prop_assert!(!(shortened && r.is_ok()), "a truncated payload decoded");
        let _ = bad.view().validate();
        for i in 0..n {
            let _ = decompress_packed_row(&cb, &bad.view(), i, &mut out[..l]);
        }
        let offsets_le: Vec<u8> = bad.offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
        if let Ok(v) = PackedRef::from_le_offsets(l, n, &bad.flags, &offsets_le, &bad.payload) {
            let _ = decompress_packed(&cb, &v, &mut out);
        }

        let mut bad = fixed.clone();
        match part {
            0 | 1 => { let i = at % bad.flags.len(); bad.flags[i] ^= x as u8 | 1; }
            _ => { let i = at % bad.slots.len(); bad.slots[i] ^= x as u8 | 1; }
        }
        let _ = decompress_fixed(&cb, &bad.view(), &mut out);
        let _ = bad.view().validate(&cb);
        prop_assert!(FixedStrideRef::new(l, n, &bad.flags, &bad.slots[1..]).is_err());
    }
}
