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
) -> Option<Vec<u8>> {
    use ibp_kernels::detail::book::Layout;
    use ibp_kernels::detail::step::{Contig, Geometry, RowStore, decode_row};

    let l = cb.row_bytes();
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
        // SAFETY: as stated above the call: buffers sized for the kernel.
        let r = unsafe {
            with_chunk_const!(cb.chunk(), C => decode_row::<C, _, _, _, _, _>(
                w,
                &mut Contig::new(&ws_mem, shift as u32),
                &book_mem,
                &HostMem,
                &g,
                e_bytes,
                &mut sink,
            ))
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

#[test]
fn emulated_decode_step_equals_the_cpu_decoder_with_fast_paths_on_and_off() {
    use ibp_kernels::params::{DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX};
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
                let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
                for (i, row) in rows.iter().enumerate() {
                    let (a, b) = (packed.offsets[i] as usize, packed.offsets[i + 1] as usize);
                    if packed.flags[i / 8] >> (i % 8) & 1 == 0 {
                        continue;
                    }
                    let stored = &packed.payload[a..b];
                    let flags = [0, DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX, 3][i % 4];
                    let what = format!("kind {kind} L={l} C={chunk} T={bp} row {i} flags {flags}");
                    let got = emu_decode_row(
                        &cb,
                        stored,
                        stored.len() as u32,
                        i % 5,
                        (i * 3) % 17,
                        flags,
                    );
                    assert_eq!(got.as_deref(), Some(row), "{what}");
                    checked[chunk.bytes().trailing_zeros() as usize] += 1;
                    // A stored length that disagrees with the bits is corrupt.
                    if stored.len() > (cb.chunks().div_ceil(8)) + 1 {
                        let short =
                            emu_decode_row(&cb, stored, stored.len() as u32 - 1, 1, 0, flags);
                        assert_eq!(short, None, "short length accepted: {what}");
                    }
                }
            }
        }
    }
    assert!(
        checked.iter().all(|&c| c >= 8),
        "too few encoded rows checked: {checked:?}"
    );
}
