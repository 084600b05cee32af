//! The KV store's append body (`ibp_kernels::detail::kv::append`) on the emulated
//! warp: successive appends of pieces that start anywhere in a bitmap word,
//! against the CPU's fixed-stride layout (slots, flags) and size query
//! (lengths).

use ibp_kernels::detail::kv::{BLOCK_WARPS, append, append_block, block_shape};
use ibp_kernels::params::KvAppendParams;

use super::*;

/// Append `rows` as successive pieces of `piece` rows, each into a fresh
/// staging half (poisoned when the kernel zeroes the slots' tails itself,
/// zeroed otherwise), store rows numbered from `first`; with `direct`, the
/// blocks also copy their slots into poisoned pages, which must then equal
/// the half. Returns the slots as the pages would hold them, the length
/// table and the bitmap.
fn emu_appends(
    cb: &Codebook,
    rows: Rows<'_>,
    first: u64,
    piece: usize,
    direct: bool,
) -> (Vec<u8>, Vec<u32>, Vec<u8>) {
    let l = rows.row_bytes();
    let n = rows.rows();
    let end = first as usize + n;
    let book = encoder_book(cb);
    let lengths = Aligned::zeroed(4 * end);
    let flags = Aligned::zeroed(4 * end.div_ceil(32));
    let zero_tail = l.is_multiple_of(4);
    let mut out = Vec::with_capacity(n * l);
    let mut at = 0;
    while at < n {
        let k = piece.min(n - at);
        let src = Aligned::from(&rows.bytes()[at * l..(at + k) * l]);
        let fill = if zero_tail { 0xC3 } else { 0 };
        // A guard slot after the half: nothing may be written there.
        let half = Aligned::from(&vec![fill; (k + 1) * l]);
        let shape = block_shape(l as u64).filter(|_| zero_tail);
        let direct = direct && shape.is_some();
        let pages = Aligned::from(&vec![0x3C; (k + 1) * l]);
        let p = KvAppendParams {
            src: src.addr(),
            rows: k as u64,
            row_bytes: l as u64,
            book: book.as_ptr() as u64,
            lengths: lengths.addr(),
            flags: flags.addr(),
            first: first + at as u64,
            out: half.addr(),
            pages: if direct { pages.addr() } else { 0 },
            zero_tail: zero_tail as u32,
        };
        match shape {
            // As the host launches it: rows of whole words in blocks of R
            // rows (a warp per 256 bytes), last block first: a block that
            // wrote past its slots would spoil the next, already written
            // ones.
            Some((per_row, rows_per_block)) => {
                let totals = Aligned::zeroed(4 * BLOCK_WARPS as usize);
                let warps = (per_row * rows_per_block) as u32;
                for b in (0..(k as u64).div_ceil(rows_per_block)).rev() {
                    // SAFETY: as below, and `totals` holds BLOCK_WARPS u32
                    // of the block's shared memory.
                    run_block(warps, totals.addr(), |w, warp| unsafe {
                        with_chunk_const!(cb.chunk(), C => append_block::<_, _, _, C>(
                            w, &HostMem, w, &p, b, warp, 0
                        ))
                    });
                }
            }
            // One warp per row (warp j of k takes row j), last row first.
            _ => {
                for j in (0..k as u64).rev() {
                    // SAFETY: every buffer is sized as KvAppendParams
                    // requires (the tables for `end` rows, the half for `k`
                    // slots) and outlives the warp.
                    run_warp(|w| unsafe {
                        with_chunk_const!(cb.chunk(), C => append::<_, _, C>(w, &HostMem, &p, j, k as u64))
                    });
                }
            }
        }
        let (slots, guard) = half.bytes().split_at(k * l);
        assert!(
            guard.iter().all(|&b| b == fill),
            "a write past the last slot"
        );
        if direct {
            let (copied, guard) = pages.bytes().split_at(k * l);
            assert_eq!(copied, slots, "the pages the blocks wrote");
            assert!(
                guard.iter().all(|&b| b == 0x3C),
                "a write past the last page slot"
            );
        }
        out.extend_from_slice(slots);
        at += k;
    }
    let lengths = bytemuck::cast_slice::<u8, u32>(lengths.bytes()).to_vec();
    (out, lengths, flags.bytes().to_vec())
}

#[test]
fn emulated_appends_equal_the_cpu_fixed_layout_with_lengths_and_flags() {
    for (seed, (l, n)) in [
        (2usize, 40usize),
        (6, 37),
        (24, 45),
        (61, 33),
        (96, 41),
        (516, 23),
        (768, 21),
    ]
    .into_iter()
    .enumerate()
    {
        let data = dataset(n, l, 11 + seed as u64);
        let rows = Rows::new(&data, l).unwrap();
        let counts = count_bits(rows);
        for chunk in ChunkSize::ALL {
            let t = Threshold::from_basis_points(8000).unwrap();
            let cb = Codebook::from_counts(&counts, n as u64, t, chunk).unwrap();
            let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
            let sizes = size_query(&cb, rows).unwrap().stored;
            assert!(
                fixed.flags.iter().any(|&b| b != 0) && sizes.iter().any(|&s| s >= l as u64),
                "the data has encoded and raw rows"
            );
            // Store rows start mid-word (first = 13) and pieces of 7 rows
            // cross word boundaries; one piece of everything too.
            for (first, piece, direct) in [(13u64, 7usize, true), (0, n, false)] {
                let what = format!("L={l} C={chunk} first={first} piece={piece}");
                let (pages, lengths, flags) = emu_appends(&cb, rows, first, piece, direct);
                assert_eq!(pages, fixed.slots, "slots {what}");
                for i in 0..n {
                    let r = first as usize + i;
                    let want = sizes[i].min(l as u64) as u32;
                    assert_eq!(lengths[r], want, "length of row {i} {what}");
                    let bit = flags[r / 8] >> (r % 8) & 1;
                    let cpu = fixed.flags[i / 8] >> (i % 8) & 1;
                    assert_eq!(bit, cpu, "flag of row {i} {what}");
                }
                assert!(lengths[..first as usize].iter().all(|&x| x == 0), "{what}");
                let below = (0..first as usize).any(|r| flags[r / 8] >> (r % 8) & 1 == 1);
                assert!(!below, "no flag below the first row {what}");
            }
        }
    }
}
