//! The bit-counting kernel's body (`ibp_kernels::detail::count::count_rows`, the
//! whole of `ibp_count_bits`) on the emulated machine, against the CPU
//! counter (`fit::count_bits`).

use ibp_kernel_emu::{Buffer, Grid, launch};
use ibp_kernels::detail::count::count_rows;
use ibp_kernels::params::CountParams;

use super::*;

/// `rows` rows of `l` bytes whose bits are set with different densities
/// by position (so every counter differs from its neighbours).
fn biased_rows(rows: usize, l: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let masks = [0xff, 0x0f, 0x81, 0x3c, 0x00, 0xf7, 0x55];
    (0..rows * l)
        .map(|i| {
            let (a, b) = (xorshift(&mut s), xorshift(&mut s));
            let x = if i % 3 == 0 { a & b } else { a | b };
            x as u8 & masks[i % l % masks.len()]
        })
        .collect()
}

/// Counts from the emulated kernel over `grid`, the rows starting `shift`
/// bytes past a 16-aligned address, added to `start` (the kernel
/// accumulates).
fn emu_counts(data: &[u8], l: usize, shift: usize, grid: Grid, start: &[u64]) -> Vec<u64> {
    let src = Buffer::from_bytes(&[&vec![0xee; shift][..], data].concat());
    let counts = Buffer::from_slice(start);
    let p = CountParams {
        data: src.addr() + shift as u64,
        rows: (data.len() / l) as u64,
        row_bytes: l as u64,
        counts: counts.addr(),
    };
    launch(grid, |lane| {
        // SAFETY: `src` holds the rows from `p.data` on, `counts` holds
        // 8 * l u64s, 16-aligned; `global_thread() < grid_threads()`.
        unsafe { count_rows(lane, &p, lane.global_thread(), lane.grid_threads()) }
    });
    counts.as_slice::<u64>().to_vec()
}

#[test]
fn emulated_bit_counts_equal_the_cpu_counter() {
    // Row lengths: below a word, ragged (not a multiple of 4), powers of
    // two, around the 128-byte super-row, and the odd lengths of real
    // tables (1001, 5732 B). Grids with more threads than a super-row has
    // columns (threads split over super-rows) and with fewer (threads
    // stride over columns). Shifts 1 and 3 take the byte-load path.
    let mut seed = 0x2545_f491_4f6c_dd1d;
    for l in [1usize, 2, 3, 4, 5, 7, 12, 33, 100, 128, 131, 1001, 5732] {
        // (700 rows of the long ones would cost seconds and add no path.)
        for rows in [0usize, 1, 3, 17, 129, if l < 1000 { 700 } else { 200 }] {
            let data = biased_rows(rows, l, xorshift(&mut seed));
            let want = count_bits(Rows::new(&data, l).unwrap());
            for (i, grid) in [Grid::new(1, 1), Grid::new(3, 2), Grid::new(2, 8)]
                .into_iter()
                .enumerate()
            {
                let shift = [0, 1, 3][(i + l + rows) % 3];
                let start: Vec<u64> = (0..8 * l as u64).map(|k| k * 1000).collect();
                let got = emu_counts(&data, l, shift, grid, &start);
                let want: Vec<u64> = want.iter().zip(&start).map(|(w, s)| w + s).collect();
                assert_eq!(got, want, "L={l} rows={rows} grid={grid:?} shift={shift}");
            }
        }
    }
}

#[test]
fn emulated_bit_counts_survive_the_accumulators_flushes() {
    // Enough super-rows a thread that its carry-save planes flush (every
    // 255 blocks of 16 words) several times, in the 16-word loop and the
    // word-at-a-time tail, on both load paths.
    let l = 3;
    let rows = 128 * (255 * 16 * 2 + 37) + 50;
    let data = biased_rows(rows, l, 99);
    let want = count_bits(Rows::new(&data, l).unwrap());
    for shift in [0, 2] {
        let got = emu_counts(&data, l, shift, Grid::new(1, 1), &vec![0; 8 * l]);
        assert_eq!(got, want, "shift {shift}");
    }
}
