//! Bit counting on the CPU (paper §4.1): for every bit position of a row, how
//! many rows have it set. Multi-threaded with rayon; the per-word arithmetic
//! is [`ibp_kernels::detail::count::PosPopcnt64`], the same carry-save accumulator the
//! GPU kernel runs on 32-bit words, so the two agree by construction.

use std::ops::Range;

use ibp_kernels::detail::count::PosPopcnt64;
use rayon::prelude::*;

use crate::dataset::Rows;
use crate::error::{Error, Result};

/// Rows per parallel task. Large enough to amortise the per-task counter
/// vector, small enough to balance two to a hundred cores.
const ROWS_PER_TASK: usize = 4096;

/// Add the bit counts of `rows` into `counts`, which must hold
/// `8 * rows.row_bytes()` counters. Counts accumulate, so a dataset can be
/// counted in batches (and counts are u64: no overflow at any dataset size).
pub fn count_bits_into(rows: Rows<'_>, counts: &mut [u64]) -> Result<()> {
    let l = rows.row_bytes();
    if counts.len() != 8 * l {
        return Err(Error::invalid(format!(
            "counts has {} entries; rows of {l} bytes need {} (8 per byte)",
            counts.len(),
            8 * l
        )));
    }
    count_columns_into(rows.rows(), &|i| rows.row(i), 0..l, counts);
    Ok(())
}

/// Add the bit counts of the byte columns `cols` of `n` rows into `counts`
/// (`8 * cols.len()` counters, checked by the caller); `row(i)` is row `i`,
/// at least `cols.end` bytes long.
///
/// Q: why columns? A: the counters of a row of `L` bytes take `64 L` bytes
/// per thread; counting a fixed-size block of columns at a time bounds that
/// for rows of any length (see `fit`).
pub(crate) fn count_columns_into<'r>(
    n: usize,
    row: &(dyn Fn(usize) -> &'r [u8] + Sync),
    cols: Range<usize>,
    counts: &mut [u64],
) {
    let width = cols.len();
    if n == 0 || width == 0 {
        return;
    }
    let tasks = n.div_ceil(ROWS_PER_TASK);
    let partial = (0..tasks)
        .into_par_iter()
        .fold(
            || vec![0u64; 8 * width],
            |mut acc, t| {
                let start = t * ROWS_PER_TASK;
                let end = (start + ROWS_PER_TASK).min(n);
                count_range(start..end, row, cols.clone(), &mut acc);
                acc
            },
        )
        .reduce(
            || vec![0u64; 8 * width],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            },
        );
    counts.iter_mut().zip(&partial).for_each(|(x, y)| *x += y);
}

/// Bit counts of `rows` as a new vector of `8 * row_bytes` counters.
pub fn count_bits(rows: Rows<'_>) -> Vec<u64> {
    let mut counts = vec![0u64; 8 * rows.row_bytes()];
    count_bits_into(rows, &mut counts).expect("counts sized from the rows");
    counts
}

/// Little-endian 8-byte word `c` of `row`, zero-padded past the end.
#[inline(always)]
fn word(row: &[u8], c: usize) -> u64 {
    let start = c * 8;
    match row.get(start..start + 8) {
        Some(w) => u64::from_le_bytes(w.try_into().expect("8 bytes")),
        None => {
            let mut w = [0u8; 8];
            let tail = &row[start..];
            w[..tail.len()].copy_from_slice(tail);
            u64::from_le_bytes(w)
        }
    }
}

/// Count columns `cols` of rows `range`, column by column in blocks of 16
/// rows.
fn count_range<'r>(
    range: Range<usize>,
    row: &(dyn Fn(usize) -> &'r [u8] + Sync),
    cols: Range<usize>,
    counts: &mut [u64],
) {
    let l = cols.len();
    let words = l.div_ceil(8);
    let mut accs = vec![PosPopcnt64::new(); words];
    let sink_for = |c: usize| {
        let valid = (l - c * 8).min(8) * 8;
        move |counts: &mut [u64], b: usize, v: u64| {
            if b < valid {
                counts[c * 64 + b] += v;
            }
        }
    };
    let part = |i: usize| &row(i)[cols.clone()];
    let mut r = range.start;
    while r + 16 <= range.end {
        let block: [&[u8]; 16] = std::array::from_fn(|i| part(r + i));
        for (c, acc) in accs.iter_mut().enumerate() {
            let x: [u64; 16] = std::array::from_fn(|i| word(block[i], c));
            let sink = sink_for(c);
            acc.add16(&x, &mut |b, v| sink(counts, b, v));
        }
        r += 16;
    }
    for i in r..range.end {
        let row = part(i);
        for (c, acc) in accs.iter_mut().enumerate() {
            let sink = sink_for(c);
            acc.add(word(row, c), &mut |b, v| sink(counts, b, v));
        }
    }
    for (c, acc) in accs.iter_mut().enumerate() {
        let sink = sink_for(c);
        acc.drain(&mut |b, v| sink(counts, b, v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(rows: Rows<'_>) -> Vec<u64> {
        let mut c = vec![0u64; 8 * rows.row_bytes()];
        for row in rows.iter() {
            for (i, byte) in row.iter().enumerate() {
                for b in 0..8 {
                    c[i * 8 + b] += (byte >> b & 1) as u64;
                }
            }
        }
        c
    }

    #[test]
    fn counts_equal_naive_for_ragged_lengths_and_batch_sizes() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for (l, n) in [(1, 1), (3, 17), (8, 16), (13, 40), (64, 5000), (7, 9000)] {
            let bytes: Vec<u8> = (0..l * n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s & (s >> 8)) as u8
                })
                .collect();
            let rows = Rows::new(&bytes, l).unwrap();
            assert_eq!(count_bits(rows), naive(rows), "L={l} N={n}");
            // Counting in two batches accumulates to the same result.
            let mut acc = vec![0u64; 8 * l];
            count_bits_into(rows.slice(0, n / 3), &mut acc).unwrap();
            count_bits_into(rows.slice(n / 3, n), &mut acc).unwrap();
            assert_eq!(acc, naive(rows));
        }
    }

    #[test]
    fn wrong_counter_length_is_an_invalid_argument() {
        let rows = Rows::new(&[0u8; 8], 4).unwrap();
        let err = count_bits_into(rows, &mut [0u64; 3]).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
    }
}
