//! The whole decode kernel on emulated warps: ranges and gathers in both
//! modes, u32 indices and strided output, corrupt and oversized tensors.

use super::*;

#[test]
fn emulated_decode_kernel_equals_the_original_rows_in_every_mode() {
    use ibp_kernels::params::{FETCH_CP_ASYNC, FETCH_LOAD_STORE, STATUS_BAD_INDEX};
    let mut cases = 0;
    let mut corrupted = [0usize; 2];
    for (kind, l, n) in [
        (0usize, 5usize, 24usize),
        (1, 100, 12),
        (2, 1024, 6),
        (1, 1531, 5),
        (2, 5732, 4),
        (1, 6400, 4),
    ] {
        let seed = 3 + l as u64;
        let data = match kind {
            0 => dataset(n, l, seed),
            1 => float_rows(n, l, seed),
            _ => sparse_rows(n, l, seed),
        };
        let rows = Rows::new(&data, l).unwrap();
        for chunk in ChunkSize::ALL {
            let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
            let cb = fit(rows, &opts).unwrap().codebook;
            // Streaming mode reads no length table: its fixed-stride case is
            // `Fixed` alone.
            for (layout, kernel) in [
                (EmuStorage::PACKED, EmuKernel::Batch),
                (EmuStorage::FIXED, EmuKernel::Batch),
                (EmuStorage::FIXED_LENGTHS, EmuKernel::Batch),
                (EmuStorage::PACKED, EmuKernel::Streaming),
                (EmuStorage::FIXED, EmuKernel::Streaming),
                (EmuStorage::PACKED, EmuKernel::Lanes),
                (EmuStorage::FIXED, EmuKernel::Lanes),
            ] {
                {
                    let fetch = if cases % 2 == 0 {
                        FETCH_CP_ASYNC
                    } else {
                        FETCH_LOAD_STORE
                    };
                    cases += 1;
                    let what = format!("kind {kind} L={l} C={chunk} {layout:?} {kernel:?}");
                    // A range of every row.
                    let (out, st) =
                        emu_kernel(&cb, rows, layout, None, n as u64, kernel, fetch, None);
                    assert_eq!(st, [0, u64::MAX], "status: {what}");
                    assert!(out == data, "range differs: {what}");
                    if layout == EmuStorage::FIXED_LENGTHS {
                        continue;
                    }
                    // A gather with repeats and one bad index.
                    let ix: Vec<u64> = (0..n as u64 + 3)
                        .map(|i| {
                            if i == 2 {
                                n as u64 + 7
                            } else {
                                (i * 7 + 3) % n as u64
                            }
                        })
                        .collect();
                    let (out, st) = emu_kernel(
                        &cb,
                        rows,
                        layout,
                        Some(&ix),
                        ix.len() as u64,
                        kernel,
                        fetch,
                        None,
                    );
                    assert_eq!(st, [STATUS_BAD_INDEX, 2], "gather status: {what}");
                    check_gathered(&out, &ix, &data, l, Some(2), &what);
                }
            }
            // A corrupt encoded tensor (packed) is reported and zeroed, and
            // the others still decode.
            let ran =
                corrupt_tensor_is_reported(&cb, rows, &format!("kind {kind} L={l} C={chunk}"));
            corrupted[0] += ran[0];
            corrupted[1] += ran[1];
        }
    }
    assert!(cases >= 100);
    assert!(
        corrupted.iter().all(|&c| c > 0),
        "corruptions run: {corrupted:?}"
    );
}

/// Row `i` of a gather's output `out` is row `ix[i]` of `data` (rows of
/// `l` bytes), but row `bad`, a bad index's, which is zeroed.
fn check_gathered(out: &[u8], ix: &[u64], data: &[u8], l: usize, bad: Option<usize>, what: &str) {
    for (i, &t) in ix.iter().enumerate() {
        let got = &out[i * l..(i + 1) * l];
        if Some(i) == bad {
            assert!(
                got.iter().all(|&b| b == 0),
                "bad index row not zeroed: {what}"
            );
        } else {
            let t = t as usize;
            assert!(got == &data[t * l..(t + 1) * l], "gather row {i}: {what}");
        }
    }
}

/// Row `r` of `data` (rows of `l` bytes) replaced by noise: stored raw,
/// so a batch holds a raw tensor beside encoded ones (the group kernels
/// share out the encoded ones around it).
fn noise_row(data: &mut [u8], l: usize, r: usize) {
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ l as u64;
    for b in &mut data[r * l..(r + 1) * l] {
        *b = xorshift(&mut s) as u8;
    }
}

#[test]
fn emulated_uniform_kernels_equal_the_original_rows() {
    use ibp_kernels::params::{FETCH_CP_ASYNC, FETCH_LOAD_STORE};
    let mut ran = 0;
    for chunk in [ChunkSize::One, ChunkSize::Two, ChunkSize::Four] {
        // Whole steps, and a last step past the tensor's end.
        for l in [768usize, 600, 1000] {
            let n = 64;
            let mut data = uniform_columns(n, l, chunk.bytes(), 9 + l as u64);
            noise_row(&mut data, l, 5);
            let rows = Rows::new(&data, l).unwrap();
            let t = Threshold::from_basis_points(8500).unwrap();
            let cb = Codebook::from_counts(&count_bits(rows), n as u64, t, chunk).unwrap();
            let what = format!("L={l} C={chunk}");
            // What makes `emu_launch` take the uniform kernels.
            assert!(
                crate::kernel_tables::book_is_uniform(&cb, &decode_book(&cb)),
                "{what}: not uniform"
            );
            let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
            assert_eq!(packed.flags[0] >> 5 & 1, 0, "{what}: row 5 not stored raw");
            // Batch mode: pairs (cp.async) and one tensor a warp (loads and
            // stores), and four a warp with either; streaming mode: the
            // book in shared memory (cp.async) and in place (loads and
            // stores).
            for (fetch, kernel) in [
                (FETCH_CP_ASYNC, EmuKernel::Batch),
                (FETCH_LOAD_STORE, EmuKernel::Batch),
                (FETCH_CP_ASYNC, EmuKernel::Quads),
                (FETCH_LOAD_STORE, EmuKernel::Quads),
                (FETCH_CP_ASYNC, EmuKernel::Streaming),
                (FETCH_LOAD_STORE, EmuKernel::Streaming),
            ] {
                for layout in [EmuStorage::PACKED, EmuStorage::FIXED] {
                    let what = format!("{what} {kernel:?}");
                    let (out, st) =
                        emu_kernel(&cb, rows, layout, None, n as u64, kernel, fetch, None);
                    assert_eq!(st, [0, u64::MAX], "status: {what} {layout:?}");
                    assert!(
                        out == data,
                        "range differs: {what} {layout:?} fetch {fetch}"
                    );
                    // Three rows more than the table: sets of fewer than
                    // four at a window's end.
                    let ix: Vec<u64> = (0..n as u64 + 3).map(|i| (i * 13 + 5) % n as u64).collect();
                    let m = ix.len() as u64;
                    let (out, st) =
                        emu_kernel(&cb, rows, layout, Some(&ix), m, kernel, fetch, None);
                    assert_eq!(st, [0, u64::MAX], "gather status: {what} {layout:?}");
                    check_gathered(&out, &ix, &data, l, None, &format!("{what} {layout:?}"));
                    ran += 1;
                }
            }
            let bad = corrupt_tensor_is_reported(&cb, rows, &format!("uniform {what}"));
            assert!(
                bad.iter().all(|&c| c > 0),
                "{what}: corruptions run {bad:?}"
            );
        }
    }
    assert_eq!(ran, 108);
}

#[test]
fn emulated_periodic_kernel_equals_the_original_rows() {
    use ibp_kernels::params::{FETCH_CP_ASYNC, FETCH_LOAD_STORE};
    let mut ran = 0;
    let mut corruptions = [0usize; 2];
    for chunk in [ChunkSize::Two, ChunkSize::Four] {
        // Rows of fp8 MiniLM (384 bytes: less than one step), whole steps,
        // and a last step past the tensor's end.
        // A piece of 2 bytes: f16-like values, the pattern in each 16-bit
        // half of a 4-byte chunk (bits 12-14 fixed: sign and low bits free).
        for (l, piece, pattern, fixed) in [
            (384usize, 1usize, 0x60u16, 0x40u16),
            (384, 1, 0x70, 0x20),
            (1024, 1, 0x60, 0x40),
            (1000, 1, 0x70, 0x20),
            (600, 2, 0x7000, 0x2000),
            (1024, 2, 0x7c00, 0x3800),
        ] {
            if piece == 2 && chunk != ChunkSize::Four {
                continue;
            }
            let n = 64;
            let mut data = periodic_pieces(n, l, piece, pattern, fixed, 13 + l as u64);
            noise_row(&mut data, l, 5);
            let rows = Rows::new(&data, l).unwrap();
            let t = Threshold::from_basis_points(8500).unwrap();
            let cb = Codebook::from_counts(&count_bits(rows), n as u64, t, chunk).unwrap();
            let what = format!("L={l} C={chunk}");
            // What makes `emu_launch` take the periodic kernels (batch
            // mode: two tensors a warp with cp.async, one with loads and
            // stores).
            assert!(
                crate::kernel_tables::book_period(&cb).is_some(),
                "{what}: not periodic"
            );
            let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
            assert_eq!(packed.flags[0] >> 5 & 1, 0, "{what}: row 5 not stored raw");
            for (layout, fetch, k) in [EmuStorage::PACKED, EmuStorage::FIXED]
                .into_iter()
                .flat_map(|x| [(x, FETCH_CP_ASYNC), (x, FETCH_LOAD_STORE)])
                .flat_map(|(x, f)| [(x, f, EmuKernel::Batch), (x, f, EmuKernel::Quads)])
            {
                let what = format!("{what} fetch {fetch} {k:?}");
                let (out, st) = emu_kernel(&cb, rows, layout, None, n as u64, k, fetch, None);
                assert_eq!(st, [0, u64::MAX], "status: {what} {layout:?}");
                assert!(out == data, "range differs: {what} {layout:?}");
                // Three rows more than the table: sets of fewer than four
                // at a window's end.
                let ix: Vec<u64> = (0..n as u64 + 3).map(|i| (i * 13 + 5) % n as u64).collect();
                let m = ix.len() as u64;
                let (out, st) = emu_kernel(&cb, rows, layout, Some(&ix), m, k, fetch, None);
                assert_eq!(st, [0, u64::MAX], "gather status: {what} {layout:?}");
                check_gathered(&out, &ix, &data, l, None, &format!("{what} {layout:?}"));
                ran += 1;
            }
            // Padding bits exist only where a tensor's bits are not whole
            // bytes: never with two fixed bits a byte (payloads of 6 bits
            // a byte, whole bytes a chunk), so both cases are asked of the
            // whole test, not of each table.
            let bad = corrupt_tensor_is_reported(&cb, rows, &format!("periodic {what}"));
            corruptions[0] += bad[0];
            corruptions[1] += bad[1];
        }
    }
    assert_eq!(ran, 80);
    assert!(
        corruptions.iter().all(|&c| c > 0),
        "corruptions run {corruptions:?}"
    );
}

#[test]
fn emulated_gathers_take_u32_indices_and_strided_output() {
    use ibp_kernels::params::FETCH_CP_ASYNC;
    for (l, n, chunk) in [
        (100usize, 9usize, ChunkSize::Four),
        (5732, 4, ChunkSize::Eight),
    ] {
        let data = float_rows(n, l, 41);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let cb = fit(rows, &opts).unwrap().codebook;
        let ix: Vec<u32> = (0..2 * n as u32).map(|i| (i * 5 + 1) % n as u32).collect();
        for kernel in [EmuKernel::Batch, EmuKernel::Streaming, EmuKernel::Lanes] {
            // An odd stride: rows 3 bytes apart from a multiple of L, so
            // neither the row starts nor the stores are aligned.
            let stride = l + 3;
            let (out, st) = emu_kernel_with(
                &cb,
                rows,
                EmuStorage::PACKED,
                Some(EmuIndex::U32(&ix)),
                ix.len() as u64,
                kernel,
                FETCH_CP_ASYNC,
                None,
                stride,
                None,
            );
            let what = format!("L={l} {kernel:?}");
            assert_eq!(st, [0, u64::MAX], "{what}");
            for (i, &t) in ix.iter().enumerate() {
                let t = t as usize;
                let got = &out[i * stride..i * stride + l];
                assert!(got == &data[t * l..(t + 1) * l], "{what}: row {i}");
                if i + 1 < ix.len() {
                    let gap = &out[i * stride + l..(i + 1) * stride];
                    assert!(gap.iter().all(|&b| b == 0xa7), "{what}: gap after row {i}");
                }
            }
        }
    }
}

#[test]
fn a_tensor_larger_than_the_half_is_reported_and_the_rest_decode() {
    use ibp_kernels::params::{FETCH_CP_ASYNC, STATUS_CORRUPT};
    // Batch mode sizes its halves by the largest stored tensor; one larger
    // than the half (a table changed under the launch) must be reported,
    // not fetched past the half, and must not stall the batch loop.
    let (l, n, big) = (5732usize, 6usize, 3usize);
    let mut data = sparse_rows(n, l, 77);
    data[big * l..(big + 1) * l].copy_from_slice(&float_rows(1, l, 78));
    let rows = Rows::new(&data, l).unwrap();
    let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(ChunkSize::Eight));
    let cb = fit(rows, &opts).unwrap().codebook;
    let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    let span = |i: usize| {
        let (a, b) = (packed.offsets[i], packed.offsets[i + 1]);
        (b.div_ceil(128) - a / 128) as u32
    };
    // One line of slack: the fixed-stride slots sit at other alignments.
    let half = (0..n).filter(|&i| i != big).map(span).max().unwrap() + 1;
    assert!(span(big) > half + 1, "the dense row must be the largest");
    for layout in [EmuStorage::PACKED, EmuStorage::FIXED_LENGTHS] {
        let (out, st) = emu_kernel_with(
            &cb,
            rows,
            layout,
            None,
            n as u64,
            EmuKernel::Batch,
            FETCH_CP_ASYNC,
            None,
            l,
            Some(half),
        );
        assert_eq!(st, [STATUS_CORRUPT, big as u64], "{layout:?}");
        for i in 0..n {
            let got = &out[i * l..(i + 1) * l];
            if i == big {
                assert!(got.iter().all(|&b| b == 0), "{layout:?}: not zeroed");
            } else {
                assert!(got == &data[i * l..(i + 1) * l], "{layout:?}: row {i}");
            }
        }
    }
}

/// A corrupt encoded tensor of the packed layout is reported and zeroed in
/// both modes, and the other rows still decode: one whose stream ends
/// inside its last byte with its top padding bit set, and one whose
/// payload runs past its stored bytes (in batch mode, beside its pair).
fn corrupt_tensor_is_reported(cb: &Codebook, rows: Rows<'_>, what: &str) -> [usize; 2] {
    use ibp_kernels::params::{FETCH_CP_ASYNC, STATUS_CORRUPT};
    let (n, l, data) = (rows.rows(), rows.row_bytes(), rows.bytes());
    let packed = compress_packed(cb, rows, &LayoutOptions::default()).unwrap();
    let bits = |i: usize| {
        let s = &packed.payload[packed.offsets[i] as usize..];
        let ents = cb.tables().entries();
        ents.len()
            + ents
                .iter()
                .enumerate()
                .map(|(j, e)| {
                    if s[j / 8] >> (j % 8) & 1 == 1 {
                        e.free_bits as usize
                    } else {
                        e.width as usize
                    }
                })
                .sum::<usize>()
    };
    let ents = cb.tables().entries();
    let padded = (0..n).find(|&i| packed.flags[i / 8] >> (i % 8) & 1 == 1 && bits(i) % 8 != 0);
    // A tensor whose first eight chunks, read as mismatching, run its
    // payload past its stored bytes.
    let overruns = (0..n).find(|&i| {
        let (a, b) = (packed.offsets[i] as usize, packed.offsets[i + 1] as usize);
        let p0 = packed.payload[a];
        let extra: usize = (0..8.min(ents.len()))
            .filter(|&j| p0 >> j & 1 == 1)
            .map(|j| (ents[j].width - ents[j].free_bits) as usize)
            .sum();
        packed.flags[i / 8] >> (i % 8) & 1 == 1 && bits(i) + extra > 8 * (b - a)
    });
    let cases = [
        padded.map(Corrupt::LastBit),
        overruns.map(Corrupt::Participation),
    ];
    let ran = [padded.is_some() as usize, overruns.is_some() as usize];
    for (c, kernel) in cases.into_iter().flatten().flat_map(|c| {
        [
            (c, EmuKernel::Batch),
            (c, EmuKernel::Quads),
            (c, EmuKernel::Streaming),
            (c, EmuKernel::Lanes),
        ]
    }) {
        let t = c.tensor();
        let (out, st) = emu_kernel(
            cb,
            rows,
            EmuStorage::PACKED,
            None,
            n as u64,
            kernel,
            FETCH_CP_ASYNC,
            Some(c),
        );
        let what = format!("{c:?}: {what} {kernel:?}");
        assert_eq!(st, [STATUS_CORRUPT, t as u64], "{what}");
        for i in 0..n {
            let got = &out[i * l..(i + 1) * l];
            if i == t {
                assert!(got.iter().all(|&b| b == 0), "{what}: not zeroed");
            } else {
                assert!(got == &data[i * l..(i + 1) * l], "{what}: row {i}");
            }
        }
    }
    ran
}
