//! The compressed-size query of one codebook (with the optional copy of
//! each tensor to a staging row), and the copy of sampled tensors.

use super::rows::{each_batch, row_word, sample_row, store_bytes};
use super::words::{stored_len, word_saved};
use crate::params::MeasureParams;
use crate::simt::{Lanes, Mem, warp_sum};

/// Bits word `q` (8 bytes `x`) of a tensor saves under the book at `book`
/// (bit values then masks, `words` u64 each) with chunks of `C` bytes;
/// when `stage` is not 0 the word is also copied to `stage + 8q` (whole
/// when `whole`, else only the tensor's bytes of it).
///
/// # Safety
/// `q < words`; the book as stated; the stage (when given) writable there.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn measure_word<M: Mem, const C: u32>(
    m: &M,
    book: u64,
    words: u64,
    l: u64,
    q: u64,
    x: u64,
    stage: u64,
    whole: bool,
) -> u32 {
    let ci = C.trailing_zeros() as usize;
    // SAFETY: (this block) the caller's contract.
    unsafe {
        let v = m.ld_ro_u64(book + 8 * q);
        let mask = m.ld_ro_u64(book + 8 * (words + q));
        if stage != 0 {
            let n = if whole || l - 8 * q >= 8 {
                8
            } else {
                l - 8 * q
            };
            store_bytes(m, stage + 8 * q, x, n);
        }
        word_saved(x, v, mask)[ci]
    }
}

/// Stored length (`min(E, L)`, `docs/FORMAT.md` §2) of the `l`-byte tensor
/// at `start` under the book at `book` (bit values then masks, `⌈l / 8⌉`
/// u64 each), in every lane. When `stage` is not 0 the tensor is also
/// copied there as it is read, whole 8-byte words when `whole`.
///
/// # Safety
/// The tensor is readable, the book as stated, the stage (when given)
/// writable for `l` bytes (`8 · ⌈l / 8⌉` when `whole`).
#[inline(always)]
pub unsafe fn measure_row<W: Lanes, M: Mem, const C: u32>(
    w: &W,
    m: &M,
    book: u64,
    start: u64,
    l: u64,
    stage: u64,
    whole: bool,
) -> u64 {
    let words = l.div_ceil(8);
    let chunks = l.div_ceil(C as u64);
    let mut saved = 0u32;
    let mut q = w.lane() as u64;
    while q < words {
        // SAFETY: row_word reads inside the tensor only.
        let x = unsafe {
            [
                row_word(m, start, l, q),
                row_word(m, start, l, q + 32),
                row_word(m, start, l, q + 64),
                row_word(m, start, l, q + 96),
            ]
        };
        // Written out, not looped: `x` indexed by a variable would live in
        // local memory.
        let mut add = |qj: u64, xj: u64| {
            if qj < words {
                // SAFETY: qj < words; the contract.
                saved += unsafe { measure_word::<M, C>(m, book, words, l, qj, xj, stage, whole) };
            }
        };
        add(q, x[0]);
        add(q + 32, x[1]);
        add(q + 64, x[2]);
        add(q + 96, x[3]);
        q += 128;
    }
    stored_len(l, chunks, warp_sum(w, saved) as u64)
}

/// The size query for one codebook of chunk size `C` (see [`MeasureParams`]),
/// over the tensors' batches as `each_batch` loads them.
///
/// # Safety
/// As [`MeasureParams`] states.
pub unsafe fn size<W: Lanes, M: Mem, const C: u32>(
    w: &W,
    m: &M,
    p: &MeasureParams,
    wid: u64,
    nwarps: u64,
) {
    let l = p.row_bytes;
    let words = l.div_ceil(8);
    let chunks = l.div_ceil(C as u64);
    let lane = w.lane() as u64;
    // Whole 8-byte stores into the staging rows when their stride allows.
    let whole = p.stage_stride.is_multiple_of(8) && p.stage_stride >= 8 * l.div_ceil(8);
    let mut saved = 0u32;
    // SAFETY: (each_batch) MeasureParams' contract; (measure_word) q <
    // words, the book and stage as MeasureParams states; (the store) sizes
    // holds `sample` u64.
    unsafe {
        each_batch(m, p, wid, nwarps, lane, |i, b, x, last| {
            let stage = if p.stage == 0 {
                0
            } else {
                p.stage + i * p.stage_stride
            };
            // Written out, not looped: `x` indexed by a variable would live
            // in local memory.
            let mut add = |q: u64, xj: u64| {
                if q < words {
                    saved += measure_word::<M, C>(m, p.book, words, l, q, xj, stage, whole);
                }
            };
            let q = 128 * b + lane;
            add(q, x[0]);
            add(q + 32, x[1]);
            add(q + 64, x[2]);
            add(q + 96, x[3]);
            if last {
                let stored = stored_len(l, chunks, warp_sum(w, saved) as u64);
                if lane == 0 {
                    m.st_u64(p.sizes + 8 * i, stored);
                }
                saved = 0;
            }
        });
    }
}

/// Copy sampled tensors to a staging buffer (`stage + i · stage_stride`)
/// without measuring anything: the fit counts bits of a sample this way.
///
/// # Safety
/// As [`MeasureParams`] states.
pub unsafe fn gather<W: Lanes, M: Mem>(w: &W, m: &M, p: &MeasureParams, wid: u64, nwarps: u64) {
    let l = p.row_bytes;
    let words = l.div_ceil(8);
    let whole = p.stage_stride.is_multiple_of(8) && p.stage_stride >= 8 * words;
    let mut i = wid;
    while i < p.sample {
        let start = p.src + sample_row(i, p.rows, p.sample) * p.stride;
        let stage = p.stage + i * p.stage_stride;
        let mut q = w.lane() as u64;
        while q < words {
            let n = if whole || l - 8 * q >= 8 {
                8
            } else {
                l - 8 * q
            };
            // SAFETY: inside the tensor and the staging row.
            unsafe { store_bytes(m, stage + 8 * q, row_word(m, start, l, q), n) }
            q += 32;
        }
        i += nwarps;
    }
}
