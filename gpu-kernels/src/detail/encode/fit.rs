//! The fit's evaluation pass: every candidate codebook's saved bits per
//! tensor, reduce-scattered so that candidate `l` ends in lane `l`.

use super::rows::each_batch;
use super::words::{stored_len, word_lost};
use crate::params::{MAX_THRESHOLDS, MeasureParams};
use crate::simt::{Lanes, Mem};

/// One level of a warp reduce-scatter over `2H` values: afterwards the low
/// `H` entries of `a` hold the sums of the half of the values this lane keeps
/// (the upper half when lane bit `H` is set).
#[inline(always)]
fn scatter_level<W: Lanes, const H: usize>(w: &W, a: &mut [u32; 32]) {
    let upper = w.lane() & H as u32 != 0;
    let mut i = 0;
    while i < H {
        let (keep, send) = if upper {
            (a[i + H], a[i])
        } else {
            (a[i], a[i + H])
        };
        a[i] = keep + w.shfl_xor(send, H as u32);
        i += 1;
    }
}

/// Warp reduce-scatter: lane `l` gets the warp's sum of `a[l]` (31 shuffles
/// instead of 32 × 5 for summing every entry everywhere).
#[inline(always)]
pub fn reduce_scatter<W: Lanes>(w: &W, a: &[u32; 32]) -> u32 {
    let mut a = *a;
    scatter_level::<W, 16>(w, &mut a);
    scatter_level::<W, 8>(w, &mut a);
    scatter_level::<W, 4>(w, &mut a);
    scatter_level::<W, 2>(w, &mut a);
    scatter_level::<W, 1>(w, &mut a);
    a[0]
}

/// Add the bits word `x` loses under threshold `T` (its mask at
/// `b + field · (1 + T)`, [`word_lost`]) to `acc[4T..4T + 4]`, when
/// `T < nt` and no looser threshold found the word matching (`*alive`);
/// clear `*alive` when it matches under `T`.
///
/// Q: why may a word that matches under one threshold skip the rest?
/// A: the thresholds of a group ascend (the host's sweep sorts them), so
/// each mask is a subset of the one before it (a bit invariant under a
/// threshold `≥ 0.5` is invariant under every lower one, with the same
/// value: `ibp_fit_candidates` builds them so). A word with no mismatch
/// under a mask has none under its subsets, and loses nothing there.
///
/// # Safety
/// The book has `1 + nt` fields of `field` bytes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn add_lost<M: Mem, const T: usize>(
    m: &M,
    acc: &mut [u32; 32],
    alive: &mut bool,
    b: u64,
    field: u64,
    nt: u32,
    x: u64,
    v: u64,
) {
    if T as u32 >= nt || !*alive {
        return;
    }
    // SAFETY: T < nt.
    let mask = unsafe { m.ld_ro_u64(b + field * (1 + T as u64)) };
    if (x ^ v) & mask == 0 {
        *alive = false;
        return;
    }
    let s = word_lost(x, v, mask);
    acc[4 * T] += s[0];
    acc[4 * T + 1] += s[1];
    acc[4 * T + 2] += s[2];
    acc[4 * T + 3] += s[3];
}

/// Add what word `q` (8 bytes `x`; nothing when `q ≥ words`) loses under
/// each of the book's `nt` thresholds to `acc`, stopping at the first it
/// matches under ([`add_lost`]).
///
/// # Safety
/// The book holds `1 + nt` fields of `words` u64.
#[inline(always)]
unsafe fn add_word<M: Mem>(
    m: &M,
    acc: &mut [u32; 32],
    book: u64,
    words: u64,
    nt: u32,
    q: u64,
    x: u64,
) {
    if q >= words {
        return;
    }
    let field = 8 * words;
    let b = book + 8 * q;
    // SAFETY: (all) q < words, and each threshold's t < nt is checked
    // inside add_lost.
    unsafe {
        let v = m.ld_ro_u64(b);
        // Written out per threshold: a loop of eight with this much in its
        // body is not unrolled, and `acc` indexed by a variable would live
        // in local memory.
        let mut alive = true;
        add_lost::<M, 0>(m, acc, &mut alive, b, field, nt, x, v);
        add_lost::<M, 1>(m, acc, &mut alive, b, field, nt, x, v);
        add_lost::<M, 2>(m, acc, &mut alive, b, field, nt, x, v);
        add_lost::<M, 3>(m, acc, &mut alive, b, field, nt, x, v);
        add_lost::<M, 4>(m, acc, &mut alive, b, field, nt, x, v);
        add_lost::<M, 5>(m, acc, &mut alive, b, field, nt, x, v);
        add_lost::<M, 6>(m, acc, &mut alive, b, field, nt, x, v);
        add_lost::<M, 7>(m, acc, &mut alive, b, field, nt, x, v);
    }
}

/// The fit's evaluation pass (see the module doc and [`MeasureParams`]).
/// Warp `wid` of `nwarps` takes sampled tensors `wid, wid + nwarps, …`.
///
/// # Safety
/// As [`MeasureParams`] states.
pub unsafe fn eval<W: Lanes, M: Mem>(w: &W, m: &M, p: &MeasureParams, wid: u64, nwarps: u64) {
    let lane = w.lane();
    let l = p.row_bytes;
    let words = l.div_ceil(8);
    let nt = if p.nt > MAX_THRESHOLDS {
        MAX_THRESHOLDS
    } else {
        p.nt
    };
    // Field-major book: field f of word q at book + 8 (f · words + q).
    let field = 8 * words;
    // This lane's candidate: threshold lane / 4, chunk size 2^(lane % 4).
    let chunks = l.div_ceil(1 << (lane % 4));
    // What a tensor saves when every chunk matches: the book's trailer.
    let all = if lane / 4 < nt {
        // SAFETY: the trailer's entry lane / 4 < nt.
        unsafe { m.ld_ro_u64(p.book + field * (1 + nt as u64) + 8 * (lane / 4) as u64) }
    } else {
        0
    };
    if wid >= p.sample {
        return;
    }
    let (mut stored, mut encoded) = (0u64, 0u64);
    let mut acc = [0u32; 32];
    // SAFETY: (each_batch) MeasureParams' contract; (add_word) the book
    // holds 1 + nt fields of `words` u64.
    unsafe {
        each_batch(m, p, wid, nwarps, lane as u64, |_, k, x, last| {
            let q = 128 * k + lane as u64;
            add_word(m, &mut acc, p.book, words, nt, q, x[0]);
            add_word(m, &mut acc, p.book, words, nt, q + 32, x[1]);
            add_word(m, &mut acc, p.book, words, nt, q + 64, x[2]);
            add_word(m, &mut acc, p.book, words, nt, q + 96, x[3]);
            if last {
                let saved = all - reduce_scatter(w, &acc) as u64;
                let s = stored_len(l, chunks, saved);
                stored += s;
                encoded += (s < l) as u64;
                acc = [0; 32];
            }
        });
    }
    if lane / 4 < nt {
        // SAFETY: totals holds 2 u64 per candidate lane.
        unsafe {
            m.add_u64(p.totals + 16 * lane as u64, stored);
            m.add_u64(p.totals + 16 * lane as u64 + 8, encoded);
        }
    }
}
