//! The batch decoder's step (`ibp_kernels::detail::step::decode_row`) alone on the
//! emulated warp, against the CPU decoder, with its fast paths on and off.

use super::*;

/// Decode one stored (encoded) tensor with the emulated batch-decoder step
/// (`ibp_kernels::detail::step::decode_row`): the tensor sits at byte `shift` of a
/// workspace of garbage, the output row at byte `out_shift` of a poisoned
/// buffer. Returns the row, or `None` when the step reports corruption.
fn emu_decode_row(
    cb: &Codebook,
    stored: &[u8],
    e_bytes: u32,
    shift: usize,
    out_shift: usize,
    flags: u32,
    kind: u8,
) -> Option<Vec<u8>> {
    use ibp_kernels::detail::book::{CLASS_PERIODIC, CLASS_PERIODIC_HALVES, CLASS_UNIFORM, Layout};
    use ibp_kernels::detail::step::{ANY, Contig, Geometry, RowStore, decode_row, decode_row_as};

    let l = cb.row_bytes();
    // Garbage around the tensor, and the 32 bytes of padding a warp's
    // workspace has after it (`WORKSPACE_PAD`).
    let mut ws = Aligned::from(&vec![0xa5u8; shift + stored.len() + 32]);
    ws.bytes_mut()[shift..shift + stored.len()].copy_from_slice(stored);
    let book = Aligned::from(&decode_book(cb));
    let entries = Aligned::from(&decoder_table(cb));
    let out = Aligned::from(&vec![0xeeu8; out_shift + l + 16]);
    let k = cb.chunks() as u32;
    let g = Geometry {
        chunks: k,
        row_bytes: l as u32,
        layout: Layout::new(k, cb.chunk().bytes()),
        entries: entries.addr(),
        flags,
    };
    let dst = out.addr() + out_shift as u64;
    let ok = AtomicU32::new(0);
    let ws_mem = HostBytes(ws.addr());
    let book_mem = HostBytes(book.addr());
    // SAFETY: the workspace holds the stored bytes plus 32 bytes, the book
    // and entries are this codebook's, the row is inside `out`.
    run_warp(|w| {
        // SAFETY: the row is inside `out`.
        let mut sink = unsafe { RowStore::new(&HostMem, dst) };
        // SAFETY: the stored bytes, then 32 bytes of the workspace.
        let mut src = unsafe { Contig::new(&ws_mem, shift as u32) };
        // SAFETY: as stated above the call: buffers sized for the kernel.
        let r = unsafe {
            if kind == CLASS_UNIFORM {
                // The uniform kernels' step.
                with_chunk_const!(cb.chunk(), C => decode_row_as::<C, CLASS_UNIFORM, ANY, true, _, _, _, _, _>(
                    w, &mut src, &book_mem, &HostMem, &g, e_bytes, &mut sink,
                ))
            } else if kind == CLASS_PERIODIC {
                // The periodic kernel's step.
                with_chunk_const!(cb.chunk(), C => decode_row_as::<C, CLASS_PERIODIC, ANY, true, _, _, _, _, _>(
                    w, &mut src, &book_mem, &HostMem, &g, e_bytes, &mut sink,
                ))
            } else if kind == CLASS_PERIODIC_HALVES {
                // The periodic kernel's step, by the 16-bit half.
                with_chunk_const!(cb.chunk(), C => decode_row_as::<C, CLASS_PERIODIC_HALVES, ANY, true, _, _, _, _, _>(
                    w, &mut src, &book_mem, &HostMem, &g, e_bytes, &mut sink,
                ))
            } else {
                with_chunk_const!(cb.chunk(), C => decode_row::<C, _, _, _, _, _>(
                    w, &mut src, &book_mem, &HostMem, &g, e_bytes, &mut sink,
                ))
            }
        };
        ok.fetch_add(r as u32, Relaxed);
    });
    let ok = ok.load(Relaxed);
    assert!(ok == 0 || ok == 32, "lanes disagree on the verdict");
    let row = out.bytes()[out_shift..out_shift + l].to_vec();
    assert!(
        out.bytes()[..out_shift].iter().all(|&b| b == 0xee),
        "wrote before the row"
    );
    assert!(
        out.bytes()[out_shift + l..].iter().all(|&b| b == 0xee),
        "wrote past the row"
    );
    (ok == 32).then_some(row)
}

/// Decode every encoded row of `rows` under `cb` with the emulated step,
/// the fast paths forced off by turns (row `i` takes the `i % 4`th set of
/// flags), and, where every step of the book is uniform, with the uniform
/// kernels' step too; check each against the row, and that a stored length
/// one byte short is reported corrupt. Returns the rows checked.
fn check_encoded_rows(cb: &Codebook, rows: Rows<'_>, what: &str) -> usize {
    use ibp_kernels::detail::book::{CLASS_PERIODIC, CLASS_PERIODIC_HALVES, CLASS_UNIFORM};
    use ibp_kernels::detail::decode::ANY_CLASS;
    use ibp_kernels::params::{DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX};
    let uniform = crate::kernel_tables::book_is_uniform(cb, &decode_book(cb));
    let period = crate::kernel_tables::book_period(cb);
    let periodic = period.is_some();
    let per_kind = if period == Some(16) {
        CLASS_PERIODIC_HALVES
    } else {
        CLASS_PERIODIC
    };
    let packed = compress_packed(cb, rows, &LayoutOptions::default()).unwrap();
    let mut checked = 0;
    for (i, row) in rows.iter().enumerate() {
        let (a, b) = (packed.offsets[i] as usize, packed.offsets[i + 1] as usize);
        if packed.flags[i / 8] >> (i % 8) & 1 == 0 {
            continue;
        }
        let stored = &packed.payload[a..b];
        let flags = [
            0,
            DECODE_FLAG_NO_CLASSES,
            DECODE_FLAG_NO_PREFIX,
            DECODE_FLAG_NO_CLASSES | DECODE_FLAG_NO_PREFIX,
        ][i % 4];
        for kind in [ANY_CLASS, CLASS_UNIFORM, per_kind] {
            if (kind == CLASS_UNIFORM && !uniform) || (kind == per_kind && !periodic) {
                continue;
            }
            let what = format!("{what} row {i} flags {flags} step kind {kind}");
            let got = emu_decode_row(
                cb,
                stored,
                stored.len() as u32,
                i % 5,
                (i * 3) % 17,
                flags,
                kind,
            );
            assert_eq!(got.as_deref(), Some(row), "{what}");
            checked += 1;
            // A stored length that disagrees with the bits is corrupt.
            if stored.len() > (cb.chunks().div_ceil(8)) + 1 {
                let short = emu_decode_row(cb, stored, stored.len() as u32 - 1, 1, 0, flags, kind);
                assert_eq!(short, None, "short length accepted: {what}");
            }
        }
    }
    checked
}

#[test]
fn emulated_decode_step_equals_the_cpu_decoder_with_fast_paths_on_and_off() {
    let mut checked = [0usize; 4];
    for (kind, l, n) in [
        (0, 1usize, 12usize),
        (0, 13, 10),
        (1, 16, 8),
        (2, 100, 8),
        (0, 517, 6),
        (1, 1024, 5),
        (2, 1531, 5),
        (1, 2052, 4),
    ] {
        let seed = 11 + l as u64;
        let data = match kind {
            0 => dataset(n, l, seed),
            1 => float_rows(n, l, seed),
            _ => sparse_rows(n, l, seed),
        };
        let rows = Rows::new(&data, l).unwrap();
        let counts = count_bits(rows);
        for chunk in ChunkSize::ALL {
            for bp in [6000, 9000] {
                let t = Threshold::from_basis_points(bp).unwrap();
                let cb = Codebook::from_counts(&counts, n as u64, t, chunk).unwrap();
                let what = format!("kind {kind} L={l} C={chunk} T={bp}");
                checked[chunk.bytes().trailing_zeros() as usize] +=
                    check_encoded_rows(&cb, rows, &what);
            }
        }
    }
    assert!(
        checked.iter().all(|&c| c >= 8),
        "too few encoded rows checked: {checked:?}"
    );
}

#[test]
fn emulated_decode_step_takes_uniform_steps_where_every_column_is_alike() {
    use ibp_kernels::detail::book::{CLASS_UNIFORM, Layout};
    for chunk in ChunkSize::ALL {
        let c = chunk.bytes();
        // Whole steps, a last step past the tensor's end, a tail chunk.
        for (l, n) in [(1024usize, 64usize), (1000, 64), (1001, 64), (40, 64)] {
            let data = uniform_columns(n, l, c, 5 + l as u64);
            let rows = Rows::new(&data, l).unwrap();
            let counts = count_bits(rows);
            // High thresholds: at 60% a random bit of 64 rows is taken for
            // invariant now and then, and its column is no longer alike.
            for bp in [8000, 8500] {
                let t = Threshold::from_basis_points(bp).unwrap();
                let cb = Codebook::from_counts(&counts, n as u64, t, chunk).unwrap();
                let book = decode_book(&cb);
                let lay = Layout::new(cb.chunks() as u32, c);
                let classes = &book[lay.class as usize..][..lay.steps as usize];
                // Every step inside the tensor is uniform but one holding
                // a tail chunk (rows of 1001 bytes, chunks of 2 to 8).
                let tail = !l.is_multiple_of(c as usize);
                let uniform = classes.iter().filter(|&&x| x == CLASS_UNIFORM).count();
                assert_eq!(
                    uniform,
                    lay.steps as usize - usize::from(tail),
                    "C={chunk} L={l} T={bp}: classes {classes:?}"
                );
                // The uniform kernels take every book without a tail
                // chunk, of chunks of up to 4 bytes.
                assert_eq!(
                    crate::kernel_tables::book_is_uniform(&cb, &book),
                    c <= 4 && !tail,
                    "C={chunk} L={l} T={bp}"
                );
                let what = format!("uniform L={l} C={chunk} T={bp}");
                assert!(check_encoded_rows(&cb, rows, &what) >= n / 2, "{what}");
            }
        }
    }
}

#[test]
fn emulated_decode_step_takes_periodic_steps_where_every_byte_is_alike() {
    for chunk in [ChunkSize::Two, ChunkSize::Four] {
        let c = chunk.bytes();
        // Whole steps, a last step past the tensor's end (384-byte rows:
        // an fp8 MiniLM row), a tail chunk.
        for (l, n) in [(1024usize, 64usize), (384, 64), (1000, 64), (1001, 64)] {
            for (pattern, fixed) in [(0x60u8, 0x40u8), (0x70, 0x20), (0x18, 0x08)] {
                let data = periodic_columns(n, l, pattern, fixed, 7 + l as u64);
                let rows = Rows::new(&data, l).unwrap();
                let t = Threshold::from_basis_points(8500).unwrap();
                let cb = Codebook::from_counts(&count_bits(rows), n as u64, t, chunk).unwrap();
                let tail = !l.is_multiple_of(c as usize);
                assert_eq!(
                    crate::kernel_tables::book_period(&cb).is_some(),
                    !tail,
                    "C={chunk} L={l} pattern {pattern:#x}"
                );
                // Never uniform: the byte pattern repeats, so a chunk's
                // free bits form more than two runs.
                assert!(!crate::kernel_tables::book_is_uniform(
                    &cb,
                    &decode_book(&cb)
                ));
                let what = format!("periodic L={l} C={chunk} pattern {pattern:#x}");
                assert!(check_encoded_rows(&cb, rows, &what) >= n / 2, "{what}");
            }
        }
    }
}

#[test]
fn emulated_decode_step_takes_periodic_steps_where_every_half_is_alike() {
    // f16-like values, two a 4-byte chunk: bits of each 16-bit half fixed
    // (a few exponent bits), the sign and the other bits free, so a chunk's
    // free bits repeat a 16-bit pattern whose bytes differ. Whole steps, a
    // last step past the tensor's end (600-byte rows), a tail chunk.
    for (l, n) in [(1024usize, 64usize), (600, 64), (1002, 64)] {
        for (pattern, fixed) in [(0x7000u16, 0x2000u16), (0x7c00, 0x3800), (0x00f0, 0x0050)] {
            let data = periodic_pieces(n, l, 2, pattern, fixed, 5 + l as u64);
            let rows = Rows::new(&data, l).unwrap();
            let t = Threshold::from_basis_points(8500).unwrap();
            let cb =
                Codebook::from_counts(&count_bits(rows), n as u64, t, ChunkSize::Four).unwrap();
            let tail = !l.is_multiple_of(4);
            let what = format!("periodic halves L={l} pattern {pattern:#x}");
            assert_eq!(
                crate::kernel_tables::book_period(&cb).is_some(),
                !tail,
                "{what}"
            );
            let free = cb.tables().entries()[0].free;
            assert_eq!(
                crate::kernel_tables::periodic_pattern(free, 4).map(|p| p.0),
                Some(16),
                "{what}: free {free:#x}"
            );
            assert!(check_encoded_rows(&cb, rows, &what) >= n / 2, "{what}");
        }
    }
}

#[test]
fn emulated_decode_step_widens_the_all_match_prefix_by_few_escape_lanes() {
    use ibp_kernels::detail::step::ESCAPE_LANES;
    // Rows alike but for a few chunks, in `n` distinct lanes of each warp
    // step (16 bytes a lane, 512 a step), `n` from 0 to ESCAPE_LANES + 2:
    // steps with no escape lane (the book's prefix), with up to
    // ESCAPE_LANES (the prefix widened lane by lane) and with more (the
    // scan). The escapes fall in rare chunk positions, so the codebook
    // keeps their bits fixed and those chunks do not match.
    let (l, rows_n) = (512 * 9 + 48, 128usize);
    // Every byte 0x3c but its two low bits (random): free bits in one run
    // a byte, alike in every column.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut data: Vec<u8> = (0..rows_n * l)
        .map(|_| 0x3c | (xorshift(&mut x) & 3) as u8)
        .collect();
    let most = ESCAPE_LANES as usize + 2;
    let mut escapes = 0;
    for r in 0..rows_n {
        for step in 0..l.div_ceil(512) {
            let n = (step + r) % (most + 1);
            for i in 0..n {
                let lane = (r * 7 + 11 * i + 3 * step) % 32;
                // A byte of the lane's 16, different in each row.
                let at = step * 512 + lane * 16 + (r * 5 + 3 * i) % 16;
                if at < l {
                    data[r * l + at] = 0xc0 | (data[r * l + at] & 3);
                    escapes += 1;
                }
            }
        }
    }
    assert!(escapes > rows_n * 9);
    let rows = Rows::new(&data, l).unwrap();
    let counts = count_bits(rows);
    for chunk in ChunkSize::ALL {
        let t = Threshold::from_basis_points(9000).unwrap();
        let cb = Codebook::from_counts(&counts, rows_n as u64, t, chunk).unwrap();
        // Two runs a chunk of 1 or 2 bytes (uniform), one byte pattern
        // repeated in 4 (periodic); the general step for 8.
        assert_eq!(
            crate::kernel_tables::book_is_uniform(&cb, &decode_book(&cb)),
            chunk.bytes() <= 2,
            "C={chunk}"
        );
        assert_eq!(
            crate::kernel_tables::book_period(&cb).is_some(),
            chunk.bytes() == 4,
            "C={chunk}"
        );
        let what = format!("escape lanes C={chunk}");
        assert!(check_encoded_rows(&cb, rows, &what) >= rows_n / 2, "{what}");
    }
}
