//! Fit and compression on the GPU, written once over [`Lanes`] and [`Mem`]
//! so that the host tests run the same bodies (see `crate::simt`).
//!
//! Three warp-per-tensor bodies:
//!
//! - [`eval`]: the fit's one pass. For every sampled tensor and every
//!   candidate `(threshold, chunk size)` at once, the bits the codebook
//!   saves (the mask's bits less what mismatching chunks lose, each word's
//!   thresholds weighed until one matches); a warp reduce-scatter leaves
//!   candidate `l` in lane `l`, which adds the tensor's stored length
//!   `min(E, L)` to its running total.
//!
//! `eval` and `size` walk their tensors with `each_batch`; `encode` has
//! its own (row, step) loop, which carries a writer across steps.
//! - [`size`]: the compressed-size query for one codebook: each tensor's
//!   stored length, optionally copying the tensor to a staging buffer as it
//!   goes (the host path reads pinned memory once this way).
//! - [`encode`]: the stored form of each tensor (`docs/FORMAT.md` §2–§3),
//!   written through a ring of shared memory ([`RingWriter`]).
//!
//! A lane owns 8 bytes of a tensor per step (`q = 32·step + lane`), so every
//! chunk size 1, 2, 4, 8 divides a lane's share, and a lane's payload fits a
//! `u64`.

use crate::detail::bits;
use crate::detail::pack::RingWriter;
use crate::detail::table::steps;
use crate::params::{
    ClearParams, ENCODE_SLOTS_SCRATCH, ENCODE_TWO_RUNS, EncodeParams, MAX_THRESHOLDS, MeasureParams,
};
use crate::simt::{Async, Lanes, Mem, Shared, exclusive_scan, warp_sum};

/// Row `i` of a sample of `sample` of `rows` rows: `⌊i · rows / sample⌋`
/// (`docs/FORMAT.md` §4). The host guarantees `i · rows` fits in a u64
/// whenever `sample < rows`.
#[inline(always)]
pub const fn sample_row(i: u64, rows: u64, sample: u64) -> u64 {
    if sample >= rows { i } else { i * rows / sample }
}

/// Bytes `[8q, 8q + 8)` of the `len`-byte tensor at `start`, little-endian,
/// zero past the end.
///
/// # Safety
/// The tensor's bytes are readable.
#[inline(always)]
pub unsafe fn row_word<M: Mem>(m: &M, start: u64, len: u64, q: u64) -> u64 {
    // 32-bit offsets: tensors are at most 2^28 bytes (the host's
    // `MAX_ROW_BYTES`), and a lane's word index stays near the tensor's.
    let (len, off) = (len as u32, 8 * q as u32);
    if off >= len {
        return 0;
    }
    let a = start + off as u64;
    // SAFETY: (all loads) inside the tensor, aligned as each width needs.
    unsafe {
        if off + 8 <= len {
            if a.is_multiple_of(8) {
                return m.ld_u64(a);
            }
            if a.is_multiple_of(4) {
                return m.ld_u32(a) as u64 | (m.ld_u32(a + 4) as u64) << 32;
            }
        }
        let n = if len - off < 8 { len - off } else { 8 };
        let mut w = 0u64;
        let mut k = 0;
        while k < n {
            w |= (m.ld_u8(a + k as u64) as u64) << (8 * k);
            k += 1;
        }
        w
    }
}

/// Store the low `n` bytes of `w` at `a`.
///
/// # Safety
/// `a .. a + n` writable.
#[inline(always)]
pub unsafe fn store_bytes<M: Mem>(m: &M, a: u64, w: u64, n: u64) {
    // SAFETY: (all stores) inside the destination, aligned as each needs.
    unsafe {
        if n == 8 && a.is_multiple_of(8) {
            m.st_u64(a, w);
        } else if n == 8 && a.is_multiple_of(4) {
            m.st_u32(a, w as u32);
            m.st_u32(a + 4, (w >> 32) as u32);
        } else {
            let mut k = 0;
            while k < n {
                m.st_u8(a + k, ((w >> (8 * k)) & 0xff) as u32);
                k += 1;
            }
        }
    }
}

/// The top bit of every lane of `m` that is not zero, lanes marked by
/// their top bits in `hi` (`0x8080_8080`: bytes; `0x8000_8000`: 16-bit
/// lanes; `0x8000_0000`: the whole word). `(m & lo) + lo` with `lo = !hi`
/// carries into a lane's top bit when its low bits are not all zero, and
/// cannot carry out of the lane.
#[inline(always)]
const fn nonzero_lanes(m: u32, hi: u32) -> u32 {
    let lo = !hi;
    (((m & lo) + lo) | m) & hi
}

/// `0x80` in every byte of the 4-byte `m` that is not zero.
#[inline(always)]
const fn nonzero_bytes(m: u32) -> u32 {
    nonzero_lanes(m, 0x8080_8080)
}

/// Bits one 8-byte word of a tensor saves under one codebook word, for chunk
/// sizes 1, 2, 4, 8 (index `log2 C`): the mask bits of the chunks that
/// match. `v` holds the codebook's bit values (any value outside `mask` is
/// ignored), `mask` its invariant bits; past the tensor's end both the word
/// and the mask are zero, so a tail chunk matches exactly when its real bytes
/// do. The same rule as the CPU fit's `row_saved_bits`, in 32-bit halves.
#[inline(always)]
pub const fn word_saved(x: u64, v: u64, mask: u64) -> [u32; 4] {
    let all = mask.count_ones();
    let lost = word_lost(x, v, mask);
    [all - lost[0], all - lost[1], all - lost[2], all - lost[3]]
}

/// The mask bits of one 8-byte word that its mismatching chunks do not
/// save, for chunk sizes 1, 2, 4, 8 (index `log2 C`): `popcount(mask)`
/// less [`word_saved`]. All zero when the word matches (`(x ^ v) & mask`
/// is 0).
#[inline(always)]
pub const fn word_lost(x: u64, v: u64, mask: u64) -> [u32; 4] {
    let d = (x ^ v) & mask;
    let (dl, dh) = (d as u32, (d >> 32) as u32);
    let (kl, kh) = (mask as u32, (mask >> 32) as u32);
    // Every byte of a mismatching 1-byte (b1) or 2-byte (b2) chunk set.
    let b1l = (nonzero_bytes(dl) >> 7) * 0xff;
    let b1h = (nonzero_bytes(dh) >> 7) * 0xff;
    let b2l = b1l | ((b1l >> 8) & 0x00ff_00ff) | ((b1l << 8) & 0xff00_ff00);
    let b2h = b1h | ((b1h >> 8) & 0x00ff_00ff) | ((b1h << 8) & 0xff00_ff00);
    let (pl, ph) = (kl.count_ones(), kh.count_ones());
    let l4 = if dl != 0 { pl } else { 0 } + if dh != 0 { ph } else { 0 };
    [
        (kl & b1l).count_ones() + (kh & b1h).count_ones(),
        (kl & b2l).count_ones() + (kh & b2h).count_ones(),
        l4,
        if d != 0 { pl + ph } else { 0 },
    ]
}

/// Participation bits of the `8 / C` chunks of one 8-byte word (bit `c` for
/// the word's chunk `c`): 1 when no bit of the chunk has a mismatching
/// invariant bit.
///
/// Q: how is a chunk tested without a loop over its bytes?
/// A: `nonzero_lanes` on each 32-bit half, with `C`-byte lanes, gives
/// each chunk's verdict as one bit; the word's are gathered with a few
/// shifts.
#[inline(always)]
pub const fn word_participation<const C: u32>(x: u64, v: u64, mask: u64) -> u32 {
    let d = (x ^ v) & mask;
    if C == 8 {
        return (d == 0) as u32;
    }
    let hi: u32 = if C == 1 {
        0x8080_8080
    } else if C == 2 {
        0x8000_8000
    } else {
        0x8000_0000
    };
    let nl = nonzero_lanes(d as u32, hi);
    let nh = nonzero_lanes((d >> 32) as u32, hi);
    // Bit c: chunk c has a mismatch.
    let bad = if C == 1 {
        ((nl >> 7) | (nl >> 14) | (nl >> 21) | (nl >> 28)) & 0xf
            | (((nh >> 7) | (nh >> 14) | (nh >> 21) | (nh >> 28)) & 0xf) << 4
    } else if C == 2 {
        (nl >> 15) & 1 | (nl >> 30) & 2 | (nh >> 13) & 4 | (nh >> 28) & 8
    } else {
        nl >> 31 | (nh >> 30) & 2
    };
    !bad & ((1 << (8 / C)) - 1)
}

/// Stored length of a tensor of `len` bytes and `chunks` chunks that saves
/// `saved` bits: `min(E, L)` with `E = ⌈(K + 8L − saved) / 8⌉`.
#[inline(always)]
pub const fn stored_len(len: u64, chunks: u64, saved: u64) -> u64 {
    let e = (chunks + 8 * len - saved).div_ceil(8);
    if e < len { e } else { len }
}

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

/// Visit the sampled tensors `wid, wid + nwarps, …` of `p` (warp-uniform)
/// a batch of four words a lane at a time: `visit(i, k, x, last)` gets
/// tensor `i`, batch `k` (this lane's words `128k + lane + 32j`, zero past
/// the tensor's end) and whether it is the tensor's last batch. The size
/// pass and the fit's evaluation share this loop.
///
/// Q: why one loop over every (tensor, batch), each batch loaded one ahead?
/// A: so that the next batch's loads are in flight, across the end of a
/// tensor too, while this one is worked on: a warp that waits for its
/// loads at every tensor runs at the memory's latency. Tensors under 1 KiB
/// (MiniLM's rows) are one batch each, and were measured at 1.3–1.6 TB/s
/// by the size pass loading as it went.
///
/// # Safety
/// As [`MeasureParams`] states (the tensors are readable).
#[inline(always)]
unsafe fn each_batch<M: Mem>(
    m: &M,
    p: &MeasureParams,
    wid: u64,
    nwarps: u64,
    lane: u64,
    mut visit: impl FnMut(u64, u64, [u64; 4], bool),
) {
    let l = p.row_bytes;
    let batches = l.div_ceil(8).div_ceil(128);
    let start_of = |i: u64| p.src + sample_row(i, p.rows, p.sample) * p.stride;
    // SAFETY: (the closure's body) row_word reads inside the tensor only.
    let load = |start: u64, k: u64| unsafe {
        let q = 128 * k + lane;
        // Written out, not looped, so that the words stay in registers.
        [
            row_word(m, start, l, q),
            row_word(m, start, l, q + 32),
            row_word(m, start, l, q + 64),
            row_word(m, start, l, q + 96),
        ]
    };
    if wid >= p.sample {
        return;
    }
    let (mut i, mut k) = (wid, 0);
    let mut start = start_of(i);
    let mut x = load(start, 0);
    loop {
        let (ni, nk) = if k + 1 < batches {
            (i, k + 1)
        } else {
            (i + nwarps, 0)
        };
        let nstart = if nk == 0 && ni < p.sample {
            start_of(ni)
        } else {
            start
        };
        let xn = if ni < p.sample {
            load(nstart, nk)
        } else {
            [0; 4]
        };
        visit(i, k, x, nk == 0);
        if nk == 0 && ni >= p.sample {
            break;
        }
        (i, k, start, x) = (ni, nk, nstart, xn);
    }
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

/// Writes one tensor's bit stream into memory, a step of 32 lane segments at
/// a time, each 32-bit word exactly once.
///
/// Q: how do 32 lanes write a bit stream without atomics?
/// A: a step's segments (lane `l`: `n_l ≤ 64` bits) are laid end to end by an
/// exclusive scan of `n_l`. A segment touches at most three words: its head
/// word, perhaps a middle word it fills alone, and its last word. A word is
/// then the OR of the segments that end in it (a run of lanes, found by a
/// segmented OR-scan keyed by last word) and the head of the one segment
/// that starts in it and runs on. The lane at the end of the run writes it;
/// a segment whose head word no run ends in writes that word itself. The
/// step's last, partial word is carried in a register to the next step, so
/// nothing is read back from memory.
///
/// Words are addressed from `a0`, the destination rounded down to 4 bytes;
/// the stream starts `s0` bits into word 0. A word entirely inside the
/// destination region is stored; a word shared with a neighbouring region
/// (only the first and last of a region can be) is OR-ed into memory that the
/// host zeroed, so two warps can finish it in either order. A *clipped*
/// writer drops the words at or past the region's end instead (a stream
/// that may turn out longer than its slot: [`encode_slot`]).
pub struct WarpWriter {
    a0: u64,
    /// Region in bits from `a0`: `[lo, hi)`.
    lo: u64,
    hi: u64,
    /// Next stream bit, from `a0`.
    pos: u64,
    /// Bits already laid in word `pos / 32` (below `pos % 32`).
    pend: u32,
    /// Drop words at or past `hi` (see the type's doc).
    clip: bool,
}

impl WarpWriter {
    /// A writer for the region of `len` bytes at byte address `dst`.
    #[inline(always)]
    pub const fn new(dst: u64, len: u64) -> Self {
        let s0 = (dst % 4) * 8;
        WarpWriter {
            a0: dst - dst % 4,
            lo: s0,
            hi: s0 + 8 * len,
            pos: s0,
            pend: 0,
            clip: false,
        }
    }

    /// A writer for the same region that continues a stream: `bits` stream
    /// bits are already in place (written by the caller), the last
    /// `bits % 32`-bit partial word's bits being `pend` (not yet written).
    #[inline(always)]
    pub const fn resume(dst: u64, len: u64, bits: u64, pend: u32) -> Self {
        let mut w = Self::new(dst, len);
        w.pos += bits;
        w.pend = pend;
        w
    }

    /// A writer for the bits `[lo, hi)` counted from the 4-aligned byte
    /// address `a0`: a stream laid down by several warps, each writing its
    /// own span of it. Words shared with the neighbouring spans are OR-ed,
    /// as [`WarpWriter::put`] says, into memory zeroed before.
    #[inline(always)]
    pub const fn span(a0: u64, lo: u64, hi: u64) -> Self {
        WarpWriter {
            a0,
            lo,
            hi,
            pos: lo,
            pend: 0,
            clip: false,
        }
    }

    /// Bits written so far.
    #[inline(always)]
    pub const fn written(&self) -> u64 {
        self.pos - self.lo
    }

    /// Store word `k` (counted from the region's first word): a plain store
    /// when the word lies inside the region, an OR otherwise.
    ///
    /// # Safety
    /// The region is writable (and zeroed where it shares a word).
    #[inline(always)]
    pub unsafe fn put<M: Mem>(&self, m: &M, k: u64, v: u32) {
        if self.clip && 32 * k >= self.hi {
            return;
        }
        let a = self.a0 + 4 * k;
        // SAFETY: word k overlaps the region; the caller's contract.
        unsafe {
            if 32 * k >= self.lo && 32 * k + 32 <= self.hi {
                m.st_u32(a, v);
            } else {
                m.or_u32(a, v);
            }
        }
    }

    /// Append every lane's segment: the low `n ≤ 64` bits of `v` (no bit of
    /// `v` at or above `n` may be set), lane 0 first.
    ///
    /// # Safety
    /// The stream stays inside the region.
    #[inline(always)]
    pub unsafe fn step<W: Lanes, M: Mem>(&mut self, w: &W, m: &M, v: u64, n: u32) {
        let lane = w.lane();
        let (off, total) = exclusive_scan(w, n);
        let base = self.pos / 32;
        let p0 = self.pos + off as u64;
        let s = (p0 % 32) as u32;
        // Relative index of the head word, and the words the segment covers.
        let rf = (p0 / 32 - base) as u32;
        let nw = if n == 0 { 0 } else { (s + n).div_ceil(32) };
        let lo = v << s;
        let head = lo as u32;
        let mid = (lo >> 32) as u32;
        let top = if s == 0 { 0 } else { (v >> (64 - s)) as u32 };
        let last = match nw {
            0 => 0,
            1 => head,
            2 => mid,
            _ => top,
        };
        // Key: the word the segment ends in (an empty segment: where the
        // next bit goes), non-decreasing over lanes.
        let rk = if nw == 0 { rf } else { rf + nw - 1 };
        let mut run = last;
        let mut d = 1;
        while d < 32 {
            let y = w.shfl_up(run, d);
            let k = w.shfl_up(rk, d);
            if lane >= d && k == rk {
                run |= y;
            }
            d *= 2;
        }
        let next_rk = w.shfl_down(rk, 1);
        let next_rf = w.shfl_down(rf, 1);
        let next_head = w.shfl_down(head, 1);
        let next_multi = w.shfl_down((nw >= 2) as u32, 1);
        let prev_rk = w.shfl_up(rk, 1);
        let end = self.pos + total as u64;
        // Relative words below `complete` are whole after this step.
        let complete = (end / 32 - base) as u32;
        let pend = if !self.pos.is_multiple_of(32) {
            self.pend
        } else {
            0
        };
        let is_last = lane == 31;
        // SAFETY: (puts) every word written holds stream bits inside the
        // region (the caller's contract).
        unsafe {
            if (is_last || next_rk != rk) && rk < complete {
                let mut val = run;
                if !is_last && next_rf == rk && next_multi != 0 {
                    val |= next_head;
                }
                if rk == 0 {
                    val |= pend;
                }
                self.put(m, base + rk as u64, val);
            }
            if nw >= 2 && (lane == 0 || prev_rk != rf) {
                let val = if rf == 0 { head | pend } else { head };
                self.put(m, base + rf as u64, val);
            }
            if nw == 3 {
                self.put(m, base + rf as u64 + 1, mid);
            }
        }
        let tail = w.shfl_idx(run, 31);
        self.pend = if !end.is_multiple_of(32) {
            tail | if complete == 0 { pend } else { 0 }
        } else {
            0
        };
        self.pos = end;
    }

    /// Write the last, partial word (its padding bits are zero).
    ///
    /// # Safety
    /// As [`WarpWriter::step`].
    #[inline(always)]
    pub unsafe fn flush<W: Lanes, M: Mem>(&mut self, w: &W, m: &M) {
        if !self.pos.is_multiple_of(32) && w.lane() == 0 {
            // SAFETY: the word holds the stream's last bits.
            unsafe { self.put(m, self.pos / 32, self.pend) }
        }
    }
}

/// A tensor's shape as the encoder's lanes see it, in 32 bits (the GPU
/// compresses tensors of at most 2^28 bytes, the host's `MAX_ROW_BYTES`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneShape {
    /// 8-byte words, `⌈L / 8⌉`.
    pub words: u32,
    /// Chunks, `K = ⌈L / C⌉`.
    pub chunks: u32,
    /// Chunks of the last word.
    last_have: u32,
    /// Bits the tail chunk stored raw has fewer than a whole chunk
    /// (`C·K − L` bytes).
    cut: u32,
    /// Bytes from one field of the encoder book to the next, `8 · words`.
    field: u64,
}

impl LaneShape {
    /// The shape of `l`-byte tensors (`0 < l ≤ 2^28`) with chunks of `C`
    /// bytes.
    #[inline(always)]
    pub(crate) const fn new<const C: u32>(l: u64) -> Self {
        let l = l as u32;
        let words = l.div_ceil(8);
        let chunks = l.div_ceil(C);
        LaneShape {
            words,
            chunks,
            last_have: chunks - (words - 1) * (8 / C),
            cut: 8 * (chunks * C - l),
            field: 8 * words as u64,
        }
    }

    /// Chunks of word `q` inside the tensor.
    #[inline(always)]
    const fn have<const C: u32>(&self, q: u32) -> u32 {
        if q + 1 < self.words {
            8 / C
        } else if q + 1 == self.words {
            self.last_have
        } else {
            0
        }
    }
}

/// Payload of lane word `q` (8 bytes `x`, zero past the tensor's end):
/// its chunks' payloads laid end to end, and their total width; `(0, 0)`
/// for a word wholly past the end (`q ≥ words`). Bit `c` of `part` says
/// whether the word's chunk `c` matches.
///
/// The chunks' free bits, two-run fields and move masks come from the
/// encoder book (`crate::params::EncodeParams::book`): each field is a byte
/// string as long as the tensor, chunk `j`'s value in its `C` bytes, so a
/// lane loads one u64 per field for all its chunks and the warp's loads are
/// contiguous.
///
/// Q: where did the tail's special cases go?
/// A: into the book and one subtraction. The free bits are 0 past the
/// tensor's end, so a matching tail chunk's payload holds only its own
/// bits; chunks wholly past the end count as matching, with no free bits,
/// so they add nothing; and a raw tail chunk, always the word's last, is
/// laid whole (its bytes past the end are zero) and the width is cut back
/// by the bits past the end. Every chunk is then the same few selects, with
/// no branch per chunk.
///
/// # Safety
/// The book holds `5 + steps(C)` fields of `words` u64 (two-run fields only
/// read when `RUNS`, move masks only when not).
#[inline(always)]
pub(crate) unsafe fn lane_payload<M: Mem, const C: u32, const RUNS: bool>(
    m: &M,
    book: u64,
    shape: &LaneShape,
    x: u64,
    q: u32,
    part: u32,
) -> (u64, u32) {
    if C <= 2 {
        // SAFETY: forwarded (the move masks are in every book).
        return unsafe { word_payload::<M, C>(m, book, shape, x, q, part) };
    }
    let per = 8 / C;
    let have = shape.have::<C>(q);
    let a = book_word(book, shape, q);
    let f = shape.field;
    // SAFETY: (loads) fields inside the book (the contract).
    let free = unsafe { m.ld_ro_u64(a + 2 * f) };
    let (r1w, sdw) = if RUNS {
        // SAFETY: as above.
        unsafe { (m.ld_ro_u64(a + 3 * f), m.ld_ro_u64(a + 4 * f)) }
    } else {
        (0, 0)
    };
    let mut mvw = [0u64; 6];
    if !RUNS {
        let mut i = 0;
        while i < steps(C) {
            // SAFETY: as above.
            mvw[i as usize] = unsafe { m.ld_ro_u64(a + (5 + i as u64) * f) };
            i += 1;
        }
    }
    let hit_all = matching::<C>(part, have);
    let (mut val, mut n) = (0u64, 0u32);
    let mut c = 0;
    while c < per {
        let sh = 8 * C * c;
        let hit = (hit_all >> c) & 1 != 0;
        if C == 8 {
            // Q: what does the two-run path compute?
            // A: pext(x, free) when free = r1 | r2, two runs: the bits of
            // the lowest run r1 moved down by its first bit s1, and those
            // of r2 = free ^ r1 moved down to just above them (by
            // d2 = s2 − |r1|). Five operations instead of the log2(8C)
            // rounds of the move masks.
            let v = if RUNS {
                let (s1, d2) = ((sdw & 0x3f) as u32, ((sdw >> 8) & 0x3f) as u32);
                ((x & r1w) >> s1) | ((x & (free ^ r1w)) >> d2)
            } else {
                bits::compress(x, free, &mvw, steps(C))
            };
            (val, n) = if hit { (v, free.count_ones()) } else { (x, 64) };
        } else {
            let lm = bits::low_mask(8 * C) as u32;
            let (xc, fc) = ((x >> sh) as u32 & lm, (free >> sh) as u32 & lm);
            let v = if RUNS {
                // x and free hold no bit past the chunk, so the
                // neighbouring chunks' run bits in r1 drop out.
                let r1 = (r1w >> sh) as u32;
                let (s1, d2) = if C == 1 {
                    ((sdw >> sh) as u32 & 7, (sdw >> (sh + 4)) as u32 & 7)
                } else {
                    ((sdw >> sh) as u32 & 0x3f, (sdw >> (sh + 8)) as u32 & 0x3f)
                };
                ((xc & r1) >> s1) | ((xc & (fc ^ r1)) >> d2)
            } else {
                let mv = [
                    (mvw[0] >> sh) as u32,
                    (mvw[1] >> sh) as u32,
                    (mvw[2] >> sh) as u32,
                    (mvw[3] >> sh) as u32,
                    (mvw[4] >> sh) as u32,
                ];
                bits::compress32(xc, fc, &mv, steps(C))
            };
            let (v, nb) = if hit {
                (v, fc.count_ones())
            } else {
                (xc, 8 * C)
            };
            val |= (v as u64) << n;
            n += nb;
        }
        c += 1;
    }
    tail_cut(shape, q, part, have, val, n)
}

/// The chunks of a lane word that take their payload as matching: those
/// whose participation bit in `part` is set, and those past the word's
/// `have` chunks inside the tensor (no free bits there, so they add
/// nothing).
#[inline(always)]
const fn matching<const C: u32>(part: u32, have: u32) -> u32 {
    part | (((1u32 << (8 / C)) - 1) & !((1u32 << have) - 1))
}

/// A lane word's payload `(val, n)` as stored: a raw tail chunk keeps only
/// its bytes inside the tensor, and a word past the tensor's end (whose
/// fields [`book_word`] read from the last word) has none.
#[inline(always)]
const fn tail_cut(shape: &LaneShape, q: u32, part: u32, have: u32, val: u64, n: u32) -> (u64, u32) {
    if q >= shape.words {
        (0, 0)
    } else if q + 1 == shape.words && (part >> (have - 1)) & 1 == 0 {
        (val, n - shape.cut)
    } else {
        (val, n)
    }
}

/// Every bit of the word's chunk `c` (chunks of `C` ≤ 2 bytes) set where
/// bit `c` of `bits` is, in the word's two 32-bit halves.
///
/// Q: why a multiply?
/// A: each chunk's bit is first moved to the chunk's lowest bit (for
/// 1-byte chunks by one multiply whose partial products never meet),
/// then the product with the chunk's all-ones fills the chunk; no chunk
/// carries into the next.
#[inline(always)]
fn chunk_fill<const C: u32>(bits: u32) -> [u32; 2] {
    let spread = |b: u32| {
        if C == 1 {
            ((b & 0xf).wrapping_mul(0x0020_4081) & 0x0101_0101) * 0xff
        } else {
            ((b & 1) | ((b & 2) << 15)) * 0xffff
        }
    };
    [spread(bits), spread(bits >> (4 / C))]
}

/// [`lane_payload`] for chunks of 1 and 2 bytes: all the word's chunks at
/// once, in its two 32-bit halves (no chunk straddles them).
///
/// Q: how are four or eight chunks compressed at once?
/// A: a round of the move masks (`bits::compress32`) moves bits only
/// within their chunk, and the book holds each chunk's move masks at the
/// chunk's place in the word, so one round on a half moves the bits of
/// all its chunks. A chunk stored raw keeps every bit and takes the rounds
/// with its move masks cleared. Each chunk's payload then sits at the
/// bottom of its chunk; the payloads are closed up pairwise, lanes of `2s`
/// bits at a time: a lane whose low `s` bits hold `a` payload bits moves
/// its high half down by `s − a`, and every `a` is a popcount of the bits
/// kept. For 2-byte chunks that is 4 rounds and one closing level a half,
/// where the chunk-by-chunk form took a path of its own per chunk.
///
/// # Safety
/// As [`lane_payload`] (the move masks are read, whatever `RUNS`).
#[inline(always)]
unsafe fn word_payload<M: Mem, const C: u32>(
    m: &M,
    book: u64,
    shape: &LaneShape,
    x: u64,
    q: u32,
    part: u32,
) -> (u64, u32) {
    let have = shape.have::<C>(q);
    let a = book_word(book, shape, q);
    let f = shape.field;
    let mut mv = [0u64; 4];
    // SAFETY: (loads) fields inside the book (the contract): the free
    // bits, then move mask i in field 5 + i.
    let free = unsafe { m.ld_ro_u64(a + 2 * f) };
    let mut i = 0;
    while i < steps(C) {
        // SAFETY: as above.
        mv[i as usize] = unsafe { m.ld_ro_u64(a + (5 + i as u64) * f) };
        i += 1;
    }
    let (val, n) = pack_chunks::<C>(x, free, &mv, matching::<C>(part, have));
    tail_cut(shape, q, part, have, val, n)
}

/// The payloads of the `8 / C` chunks of word `x` (`C` ≤ 2), laid end to
/// end, and their total width: chunk `c` gives its bits at the set bits of
/// `free` (chunk-wise `pext`) when bit `c` of `hits` is set, else all its
/// `8C` bits. `mv` holds each chunk's move masks of its free bits
/// (`bits::move_masks`) at the chunk's place, as [`word_payload`] reads
/// them from the encoder book.
#[inline(always)]
pub(crate) fn pack_chunks<const C: u32>(x: u64, free: u64, mv: &[u64; 4], hits: u32) -> (u64, u32) {
    let halves = |v: u64| [v as u32, (v >> 32) as u32];
    let hit = chunk_fill::<C>(hits);
    let (xs, free) = (halves(x), halves(free));
    // The bits kept: a matching chunk's free bits, all of a raw one's.
    let keep = [free[0] | !hit[0], free[1] | !hit[1]];
    let mut y = [xs[0] & keep[0], xs[1] & keep[1]];
    let mut i = 0;
    while i < steps(C) {
        let mvi = halves(mv[i as usize]);
        let mut h = 0;
        while h < 2 {
            let t = y[h] & mvi[h] & hit[h];
            y[h] = (y[h] ^ t) | (t >> (1u32 << i));
            h += 1;
        }
        i += 1;
    }
    // Close up: lanes of 2s bits, each half moved down onto the other's
    // payload.
    let mut s = 8 * C;
    while s < 32 {
        let low = bits::low_mask(s) as u32;
        let mut h = 0;
        while h < 2 {
            let mut r = 0;
            let mut b = 0;
            while b < 32 {
                let lo = low << b;
                let kept = (keep[h] & lo).count_ones();
                r |= (y[h] & lo) | ((y[h] & (lo << s)) >> (s - kept));
                b += 2 * s;
            }
            y[h] = r;
            h += 1;
        }
        s *= 2;
    }
    let nl = keep[0].count_ones();
    (y[0] as u64 | (y[1] as u64) << nl, nl + keep[1].count_ones())
}

/// This lane's 8 bytes `x` of a tensor (word `q`), their participation bits
/// (`8 / C` of them, only for chunks inside the tensor) and that count.
///
/// # Safety
/// The book holds the bit values then the masks, `words` u64 each.
#[inline(always)]
pub(crate) unsafe fn lane_participation<M: Mem, const C: u32>(
    m: &M,
    book: u64,
    shape: &LaneShape,
    x: u64,
    q: u32,
) -> (u32, u32) {
    let have = shape.have::<C>(q);
    // SAFETY: the word's fields (the last word's past the end: see
    // `book_word`).
    let (v, mask) = unsafe {
        let a = book_word(book, shape, q);
        (m.ld_ro_u64(a), m.ld_ro_u64(a + shape.field))
    };
    // No bits past the end (have = 0).
    (
        word_participation::<C>(x, v, mask) & ((1u32 << have) - 1),
        have,
    )
}

/// Address of lane word `q`'s entry in the first field of an encoder book
/// of `shape`; the last word's for `q` past the tensor's end.
///
/// Q: why read a word that is not there, rather than branch around it?
/// A: a step's two or three lane words are independent chains of loads and
/// dependent arithmetic, and the bulk encoder waits on those chains
/// (Nsight Compute: "wait" the first stall reason). A branch around each
/// word (it may lie past the end in a row's last step) kept the words
/// apart, so the compiler could not interleave them; past the end the
/// results are masked off instead.
#[inline(always)]
const fn book_word(book: u64, shape: &LaneShape, q: u32) -> u64 {
    let q = if q < shape.words { q } else { shape.words - 1 };
    book + 8 * q as u64
}

/// Participation word of this lane's group: the 32 participation bits
/// (chunks `32w … 32w + 31`) that the `4C` lanes of a group hold between
/// them, OR-ed together in every lane of the group.
#[inline(always)]
pub(crate) fn group_word<W: Lanes, const C: u32>(w: &W, part: u32) -> u32 {
    if C == 8 {
        // One bit a lane: the warp's vote is the word.
        return w.ballot(part & 1 != 0);
    }
    let g = 4 * C;
    crate::simt::group_or(w, part << ((w.lane() % g) * (8 / C)), g)
}

/// Participation word `pw` of the tensor at `start` (0 past the last chunk),
/// in every lane. Warp-uniform.
///
/// # Safety
/// As [`encode`].
#[inline(always)]
unsafe fn participation_word<W: Lanes, M: Mem, const C: u32>(
    w: &W,
    m: &M,
    p: &EncodeParams,
    start: u64,
    pw: u64,
) -> u32 {
    let l = p.row_bytes;
    let chunks = l.div_ceil(C as u64);
    if 32 * pw >= chunks {
        return 0;
    }
    let groups = (8 / C) as u64;
    let q = 32 * (pw / groups) + w.lane() as u64;
    let shape = LaneShape::new::<C>(l);
    // SAFETY: row_word reads inside the tensor; the book as the contract.
    let (part, _) = unsafe {
        let x = row_word(m, start, l, q);
        lane_participation::<M, C>(m, p.book, &shape, x, q as u32)
    };
    let word = group_word::<W, C>(w, part);
    w.shfl_idx(word, ((pw % groups) * 4 * C as u64) as u32)
}

/// Write one encoded tensor (stored length `< L`) into its region `dst`,
/// `len` bytes, in a single pass over its bytes, and return the writer (to
/// flush).
///
/// Q: how are the participation bits written in the same pass as the
/// payload, when they come first in the stream?
/// A: their place is known: bits `s0 … s0 + K` from the word-aligned base
/// (`s0` the region's misalignment). Each step's participation bits are
/// whole 32-bit words (`8 / C` of them, one per group of `4C` lanes), so a
/// group leader stores its word, shifted by `s0` and completed with the top
/// of the previous word. Only the word holding bit `s0 + K`, shared with the
/// payload, must wait: it is computed first (from the tensor's last chunks)
/// and handed to the payload's writer as its partial word.
///
/// # Safety
/// As [`encode`].
#[inline(always)]
unsafe fn encoded_tensor<W: Lanes, M: Mem, const C: u32>(
    w: &W,
    m: &M,
    p: &EncodeParams,
    start: u64,
    dst: u64,
    len: u64,
    clip: bool,
) -> WarpWriter {
    let lane = w.lane();
    let l = p.row_bytes;
    let words = l.div_ceil(8);
    let chunks = l.div_ceil(C as u64);
    let shape = LaneShape::new::<C>(l);
    let g = 4 * C;
    let s0 = ((dst % 4) * 8) as u32;
    let end = s0 as u64 + chunks;
    let boundary = end / 32;
    // SAFETY: (this block) the contract of `encode`.
    unsafe {
        let pend = if end.is_multiple_of(32) {
            0
        } else {
            let hi = participation_word::<W, M, C>(w, m, p, start, boundary);
            let v = if s0 == 0 {
                hi
            } else {
                let lo = if boundary >= 1 {
                    participation_word::<W, M, C>(w, m, p, start, boundary - 1)
                } else {
                    0
                };
                (hi << s0) | (lo >> (32 - s0))
            };
            v & (bits::low_mask((end % 32) as u32) as u32)
        };
        let mut wr = WarpWriter::resume(dst, len, chunks, pend);
        wr.clip = clip;
        let mut carry = 0u32;
        let mut k = 0;
        while k < words.div_ceil(32) {
            let q = 32 * k + lane as u64;
            let x = row_word(m, start, l, q);
            let (part, _) = lane_participation::<M, C>(m, p.book, &shape, x, q as u32);
            let word = group_word::<W, C>(w, part);
            let prev = w.shfl_up(word, g);
            let prev = if lane < g { carry } else { prev };
            let out = if s0 == 0 {
                word
            } else {
                (word << s0) | (prev >> (32 - s0))
            };
            let pw = k * (8 / C) as u64 + (lane / g) as u64;
            if lane.is_multiple_of(g) && pw < boundary {
                wr.put(m, pw, out);
            }
            carry = w.shfl_idx(word, 31);
            let (val, n) = if q < words {
                lane_payload::<M, C, false>(m, p.book, &shape, x, q as u32, part)
            } else {
                (0, 0)
            };
            wr.step(w, m, val, n);
            k += 1;
        }
        wr
    }
}

/// Write the stored form of the tensor at `start` (`p.row_bytes` bytes,
/// stored length `stored`: `L` or more means raw) into its region `dst`,
/// `len` bytes, under `p.book`. Returns the bits written; when `dst` is
/// 4-aligned, the 32-bit words `dst + 4k` for `k < ⌈bits / 32⌉` are written
/// exactly once and none after them.
///
/// # Safety
/// As [`EncodeParams`] states for one tensor and its region.
#[inline(always)]
pub unsafe fn encode_row<W: Lanes, M: Mem, const C: u32>(
    w: &W,
    m: &M,
    p: &EncodeParams,
    start: u64,
    stored: u64,
    dst: u64,
    len: u64,
) -> u64 {
    let l = p.row_bytes;
    let words = l.div_ceil(8);
    // SAFETY: (this block) the contract.
    unsafe {
        let mut wr = if stored >= l {
            // Raw: the tensor's bytes as they are.
            let mut wr = WarpWriter::new(dst, len);
            let mut k = 0;
            while k < words.div_ceil(32) {
                let q = 32 * k + w.lane() as u64;
                let x = row_word(m, start, l, q);
                let n = if q >= words {
                    0
                } else if l - 8 * q >= 8 {
                    64
                } else {
                    8 * (l - 8 * q) as u32
                };
                wr.step(w, m, x, n);
                k += 1;
            }
            wr
        } else {
            encoded_tensor::<W, M, C>(w, m, p, start, dst, len, false)
        };
        wr.flush(w, m);
        wr.written()
    }
}

/// Write the stored form of the tensor at `start` (`p.row_bytes` = `L`
/// bytes, a multiple of 4) into its slot `dst` (4-aligned, `L` bytes)
/// without measuring it first: encode it with a clipped writer, and when
/// its stored length turns out to be `L` or more, write the raw form over
/// it. Returns the stored length `min(E, L)` and the bits written (the
/// words `dst + 4k`, `k < ⌈bits / 32⌉`, each written; for a raw tensor
/// `8L`).
///
/// Q: why encode before knowing whether the tensor is stored raw?
/// A: the size is only needed for that choice, and a tensor rarely turns
/// out raw; measuring first is one more dependent pass over the tensor
/// (its loads, a warp reduction), which for a few hundred short tensors
/// (a KV decode step) is a sizeable part of the kernel.
///
/// # Safety
/// As [`EncodeParams`] states for one tensor and its slot.
#[inline(always)]
pub unsafe fn encode_slot<W: Lanes, M: Mem, const C: u32>(
    w: &W,
    m: &M,
    p: &EncodeParams,
    start: u64,
    dst: u64,
) -> (u64, u64) {
    let l = p.row_bytes;
    // SAFETY: (this block) the contract; the clipped writer stays inside
    // the slot whatever the stream's length.
    unsafe {
        let mut wr = encoded_tensor::<W, M, C>(w, m, p, start, dst, l, true);
        wr.flush(w, m);
        let bits = wr.written();
        let e = bits.div_ceil(8);
        if e < l {
            (e, bits)
        } else {
            (l, encode_row::<W, M, C>(w, m, p, start, l, dst, l))
        }
    }
}

/// Thread `t`'s share of `ibp_encode_clear` ([`ClearParams`]): for `t <
/// rows`, zero the 16-byte groups of tensor `t`'s region that another
/// write shares; for `t == rows`, the output's padding (which also holds
/// the last region's last group).
///
/// Q: which groups does the encoder OR into, and why are these enough?
/// A: a region's writer ([`RingWriter`]) stores whole the 16-byte groups
/// that lie inside the part of the region it owns, and ORs word by word
/// into the rest: the group of the word where the participation bits end
/// and the payload begins (bit `K` of the stream, `K` the tensor's chunks;
/// [`RingWriter::put`] stores the participation words before it whole),
/// and the groups at the region's two ends. The group of a region's last
/// byte is the next region's first group, or the padding's, unless the
/// next region starts on a group: then it lies inside this region and is
/// stored whole, unless it is this region's first group or holds bit `K`,
/// both zeroed. So the first groups, the `K` groups and the padding cover
/// every OR. (A raw region has no participation bits: only its ends.)
/// Zeroing them instead of the whole output saves a pass over the
/// output's bytes (the stored size of the table: most of it for dense
/// tensors).
///
/// # Safety
/// As [`ClearParams`] states; `t ≤ rows`.
#[inline(always)]
pub unsafe fn clear_shared_groups<M: Mem>(m: &M, p: &ClearParams, t: u64) {
    // Q: why zero the group's whole 32-byte sector?
    // A: a 16-byte store is half a sector of L2 and DRAM; written alone
    // it is a partial write the memory completes by reading the sector
    // first. Measured on the H200: 0.177 ms for bf16's 1.34 M rows with
    // 16-byte stores. The other half of the sector is zeroed before any
    // write of the encoder's lands there, so it costs nothing but a store.
    let zero = |a: u64| {
        let sector = a & !31;
        // SAFETY: every group named below lies inside the output, and so
        // does its sector (the caller's contract: `out` 32-aligned,
        // `out_len` a multiple of 32).
        unsafe {
            m.st_v4(sector, [0; 4]);
            m.st_v4(sector + 16, [0; 4]);
        }
    };
    // SAFETY: (loads) sizes holds rows u64 and offsets rows + 1.
    unsafe {
        if t < p.rows {
            let a = p.out + m.ld_u64(p.offsets + 8 * t) - p.offset_base;
            zero(a);
            if m.ld_u64(p.sizes + 8 * t) < p.row_bytes {
                // Stream bit K, counted from the group of the region's
                // first byte (the writer's base).
                // (chunk is a power of two: a shift, not a 64-bit
                // division's call.)
                let chunks = (p.row_bytes + p.chunk - 1) >> p.chunk.trailing_zeros();
                let k = (a % 16) * 8 + chunks;
                zero((a & !15) + 16 * (k / 128));
            }
        } else {
            let mut g = (p.out + p.data_len) & !31;
            while g < p.out + p.out_len {
                zero(g);
                g += 32;
            }
        }
    }
}

/// Row `i`'s region `(dst, len)` and whether it is stored encoded (its
/// stored length below `L`).
///
/// # Safety
/// As [`EncodeParams`] states; `i < rows`.
#[inline(always)]
unsafe fn row_region<M: Mem, const SLOTS: bool>(
    m: &M,
    p: &EncodeParams,
    i: u64,
) -> (u64, u64, bool) {
    if SLOTS {
        // Not measured: the slot, encoded until the stream outgrows it.
        return (p.out + i * p.row_bytes, p.row_bytes, true);
    }
    // SAFETY: (this block) sizes holds `rows` u64, offsets `rows + 1`
    // (packed).
    unsafe {
        let stored = m.ld_u64(p.sizes + 8 * i);
        if p.offsets != 0 {
            let o = m.ld_u64(p.offsets + 8 * i) - p.offset_base;
            let e = m.ld_u64(p.offsets + 8 * i + 8) - p.offset_base;
            (p.out + o, e - o, stored < p.row_bytes)
        } else {
            (p.out + i * p.row_bytes, p.row_bytes, stored < p.row_bytes)
        }
    }
}

/// Unmeasured slots (`encode::<_, _, _, C, true>`): before the warp writes
/// the `len`-byte slot at `dst`, zero the slot's words in the two 16-byte
/// groups the writer ORs into: the one holding stream bit `k` (the
/// tensor's `K` chunks: where its participation bits meet its payload) and
/// the slot's last group when the slot ends inside it. Words of a
/// neighbouring slot in those groups are not touched.
///
/// Q: why only those two?
/// A: the writer stores every other word it writes: participation words
/// with `st`, whole groups inside the slot with `st.v4`
/// ([`RingWriter`]), so stale bytes there are overwritten; a group the
/// slot shares with a neighbour (its first, when `dst` is not 16-aligned)
/// is ORed into only from the word of bit `k` on, which is the first of
/// the two. Words past the stream are zeroed by [`finish_slot`].
///
/// # Safety
/// The slot is this warp's, 4-aligned, `len` a multiple of 4, and holds
/// bit `k`.
#[inline(always)]
unsafe fn clear_slot_groups<W: Lanes, M: Mem, S: Shared + Async>(
    w: &W,
    m: &M,
    s: &S,
    dst: u64,
    len: u64,
    k: u32,
) {
    let lane = w.lane();
    let a0 = dst & !15;
    let lo = (dst % 16) as u32 * 8;
    let hi = lo + 8 * len as u32;
    // Lanes 0–3: the words of bit k's group; lanes 4–7: the last group's
    // (when the slot ends inside a group).
    let word = if lane < 4 {
        Some(4 * ((lo + k) / 128) + lane)
    } else if lane < 8 && !hi.is_multiple_of(128) {
        Some(4 * (hi / 128) + lane - 4)
    } else {
        None
    };
    if let Some(kw) = word
        && 32 * kw >= lo
        && 32 * kw < hi
    {
        // SAFETY: a word of the slot (the contract).
        unsafe { m.st_u32(a0 + 4 * kw as u64, 0) };
    }
    // The stores before any lane's OR into the groups.
    s.sync_warp();
}

/// Unmeasured slots, after tensor `i`'s stream (`bits` long, from the
/// slot's first bit) went through the writer into its slot `dst`: when
/// it fits (`⌈bits / 8⌉ < L`) zero the slot past the groups written
/// (unless the slots are scratch, [`ENCODE_SLOTS_SCRATCH`]), else
/// store the tensor raw over it; record the stored length in `sizes[i]`.
///
/// Q: how can a stream longer than the slot be written first?
/// A: the writer writes no word past its region (`RingWriter`: whole
/// groups only inside it, single words only inside it), so the stream is
/// clipped at the slot's end; the raw copy then overwrites all of it.
/// A tensor rarely turns out raw, and measuring every tensor first is a
/// pass over the whole table (the size kernel: 0.4–0.6 ms a GiB).
///
/// Q: which words past the stream are zeroed here?
/// A: the whole 16-byte groups after the one the stream ends in. The rest
/// of that group was written by the writer (zeros past the stream, stored
/// whole or ORed into a group [`clear_slot_groups`] zeroed), and a slot's
/// last group, when the slot ends inside it, was zeroed before.
///
/// # Safety
/// As [`EncodeParams`] states, with `sizes` written here; the slot is
/// this warp's and 4-aligned, `L` a multiple of 4; the writer is
/// finished (its last step met the warp).
#[inline(always)]
unsafe fn finish_slot<W: Lanes, M: Mem, S: Shared + Async>(
    w: &W,
    m: &M,
    s: &S,
    p: &EncodeParams,
    i: u64,
    dst: u64,
    bits: u32,
) {
    let l = p.row_bytes;
    let lane = w.lane() as u64;
    let e = bits.div_ceil(8) as u64;
    let a0 = dst & !15;
    let lo = (dst % 16) * 8;
    let hi = lo + 8 * l;
    // SAFETY: (this block) inside the slot, and inside the tensor for the
    // loads; 16-byte stores at 16-aligned addresses, the raw words' at
    // 4-aligned ones (store_bytes picks the widths).
    unsafe {
        let stored = if e < l {
            // Scratch slots (`ibp_compact` reads the stored form only):
            // the tail stays as it is.
            if p.flags & ENCODE_SLOTS_SCRATCH == 0 {
                let mut g = (lo + bits as u64).div_ceil(128) + lane;
                while 128 * (g + 1) <= hi {
                    m.st_v4(a0 + 16 * g, [0; 4]);
                    g += 32;
                }
            }
            e
        } else {
            let start = p.src + i * p.stride;
            let mut q = lane;
            while 8 * q < l {
                let n = if l - 8 * q < 8 { l - 8 * q } else { 8 };
                store_bytes(m, dst + 8 * q, row_word(m, start, l, q), n);
                q += 32;
            }
            l
        };
        if lane == 0 {
            m.st_u64(p.sizes + 8 * i, stored);
        }
    }
    // The slot's stores before the next tensor's.
    s.sync_warp();
}

/// Lane words (8 bytes each) a step of the bulk encoder with chunks of
/// `c` bytes: `32 · step_words(c)` words of a tensor, one
/// [`RingWriter::step`].
///
/// Q: why three for chunks of 1 and 2 bytes, two for 4 and 8?
/// A: measured (H200, docs/archive/PERF-NOTES-2026-11-28.md, "Three lane words a step"). A
/// step's bookkeeping (the scans, the ring's copy-out and its two meetings
/// of the warp, the loop) is the same for any number of words, and the
/// 768-byte rows of bf16 tables and KV caches (384 values) are one step of
/// three where steps of two took two, the second half empty: the bf16
/// encoder ran 10% faster. With 4- and 8-byte chunks (MiniLM f32; Cora
/// and the synthetic tables) three words a step ran 0–20% slower: more
/// registers (fewer warps an SM) for a longer chain of waits a step.
const fn step_words(c: u32) -> u32 {
    if c <= 2 { 3 } else { 2 }
}

/// The most lane words a step ([`step_words`]): the size of the step's
/// arrays. The ring holds three ([`crate::detail::pack::RING_WORDS`]).
const MAX_STEP_WORDS: usize = 3;

/// Run `$body` for `$j` = 0, 1, … up to `$n` ≤ [`MAX_STEP_WORDS`] (each of
/// a step's lane words; `$n` a constant) with `$j` a constant in each copy:
/// the step's words live in small arrays, and a loop LLVM declines to
/// unroll (the payload's body is large) would index them at run time, in
/// local memory.
macro_rules! each_step_word {
    ($n:expr, $j:ident => $body:block) => {{
        const _: () = assert!(MAX_STEP_WORDS == 3, "each_step_word! unrolls three copies");
        {
            let $j: usize = 0;
            $body
        }
        {
            let $j: usize = 1;
            if ($j as u32) < $n {
                $body
            }
        }
        {
            let $j: usize = 2;
            if ($j as u32) < $n {
                $body
            }
        }
    }};
}

/// The warp's rows `wid, wid + nwarps, …` written through its ring,
/// [`step_words`]`(C)` = `n` 8-byte lane words a step (words
/// `32(nk + j) + lane`, `j < n`), so one [`RingWriter::step`] serves 256n
/// bytes. The
/// participation bits are stored directly; the word they share with the
/// payload is OR-ed by both sides.
///
/// Q: why one loop over every (row, step) rather than a loop per row?
/// A: so that each step's words are loaded one step ahead, across the end
/// of a row too: a warp that waits for its loads at every step runs at
/// the memory's latency, not its bandwidth (the first version of this
/// writer, loading as it went, ran MiniLM's 768-byte rows at 0.26 TB/s).
/// The next row's region is loaded a whole row ahead.
///
/// # Safety
/// As [`EncodeParams`] states; `ring` is the warp's ring, zeroed.
#[inline(always)]
unsafe fn encode_rows<
    W: Lanes,
    M: Mem,
    S: Shared + Async,
    const C: u32,
    const RUNS: bool,
    const SLOTS: bool,
>(
    w: &W,
    m: &M,
    s: &S,
    p: &EncodeParams,
    ring: u32,
    wid: u64,
    nwarps: u64,
) {
    let lane = w.lane();
    let l = p.row_bytes;
    let shape = LaneShape::new::<C>(l);
    let words = shape.words;
    let sw = step_words(C);
    // Q: why are a step's words joined (no branch around a word past the
    // tensor's end) only in the slots kernels of 4- and 8-byte chunks?
    // A: joined, the words' chains of loads and arithmetic interleave
    // (Nsight Compute: "wait" stalls fall, 8.1 → 6.5 cycles between a
    // warp's issues), but the compiler then wants 8 to 16 more registers.
    // A warp's registers come from one of four 16384-register partitions
    // of the SM, so 88 or 92 hold five warps a partition where 80 hold
    // six. Measured on the H200 (docs/archive/PERF-NOTES-2026-11-28.md, "A step's lane words
    // without a branch each"): at their natural registers the measured
    // path's encoders ran 8–11% slower and the 2-byte slots encoder 5%
    // slower; the 4- and 8-byte slots encoders capped at 80 (build.rs; no
    // spills) keep six warps a partition and ran 2–6% faster than with a
    // branch a word (Cora, MiniLM f32). The 2-byte one spills at 80.
    let joined = SLOTS && C >= 4;
    let steps = words.div_ceil(32 * sw);
    let g = 4 * C;
    // Participation words of 32 lane words.
    let per_words = 8 / C;
    // A row's writer, the word of its first bit (from the writer's base)
    // and that bit's place in it.
    let open = |(dst, len, encoded): (u64, u64, bool)| {
        let first = if encoded { shape.chunks } else { 0 };
        let wr = RingWriter::new(ring, dst, len as u32, first);
        let s0 = wr.start_bit();
        (wr, s0 / 32, s0 % 32)
    };
    if wid >= p.rows {
        return;
    }
    // SAFETY: (this block) the contract of `encode`: every row index is
    // below `rows`, row_word reads inside its tensor, the writer stays in
    // its region.
    unsafe {
        let mut i = wid;
        let mut k = 0u32;
        let mut region = row_region::<M, SLOTS>(m, p, i);
        let mut next_region = if i + nwarps < p.rows {
            row_region::<M, SLOTS>(m, p, i + nwarps)
        } else {
            region
        };
        if SLOTS {
            clear_slot_groups(w, m, s, region.0, region.1, shape.chunks);
        }
        let (mut wr, mut base, mut sh) = open(region);
        let mut x = [0u64; MAX_STEP_WORDS];
        {
            let start = p.src + i * p.stride;
            each_step_word!(sw, j => {
                x[j] = row_word(m, start, l, (32 * j as u32 + lane) as u64);
            });
        }
        let mut carry = 0u32;
        loop {
            let (ni, nk) = if k + 1 < steps {
                (i, k + 1)
            } else {
                (i + nwarps, 0)
            };
            let mut xn = [0u64; MAX_STEP_WORDS];
            if ni < p.rows {
                let start = p.src + ni * p.stride;
                each_step_word!(sw, j => {
                    let q = 32 * (sw * nk + j as u32) + lane;
                    xn[j] = row_word(m, start, l, q as u64);
                });
            }
            let encoded = region.2;
            let q0 = 32 * sw * k + lane;
            let mut part = [0u32; MAX_STEP_WORDS];
            if encoded {
                each_step_word!(sw, j => {
                    let q = q0 + 32 * j as u32;
                    if joined || q < words {
                        part[j] = lane_participation::<M, C>(m, p.book, &shape, x[j], q).0;
                    }
                });
                // The participation words of each lane word, shifted by the
                // region's misalignment, each group's completed with the
                // top of the one before it.
                each_step_word!(sw, j => {
                    let third = j as u32;
                    let word = group_word::<W, C>(w, part[j]);
                    let prev = w.shfl_up(word, g);
                    let prev = if lane < g { carry } else { prev };
                    let out = if sh == 0 {
                        word
                    } else {
                        (word << sh) | (prev >> (32 - sh))
                    };
                    let pw = (sw * k + third) * per_words + lane / g;
                    if lane.is_multiple_of(g) {
                        wr.put(m, base + pw, out);
                    }
                    carry = w.shfl_idx(word, 31);
                });
            }
            let mut seg = [(0u64, 0u32); MAX_STEP_WORDS];
            each_step_word!(sw, j => {
                let q = q0 + 32 * j as u32;
                if joined || q < words {
                    seg[j] = lane_payload::<M, C, RUNS>(m, p.book, &shape, x[j], q, part[j]);
                }
            });
            if sw == 3 {
                wr.step(w, s, m, seg);
            } else {
                wr.step(w, s, m, [seg[0], seg[1]]);
            }
            if nk == 0 {
                // The row's last step: the top bits of its last
                // participation word go to the word after it.
                if encoded && sh != 0 && lane == 0 {
                    wr.put(m, base + sw * steps * per_words, carry >> (32 - sh));
                }
                wr.finish(w, s, m);
                if SLOTS {
                    finish_slot(w, m, s, p, i, region.0, wr.written());
                }
                if ni >= p.rows {
                    break;
                }
                region = next_region;
                if ni + nwarps < p.rows {
                    next_region = row_region::<M, SLOTS>(m, p, ni + nwarps);
                }
                if SLOTS {
                    clear_slot_groups(w, m, s, region.0, region.1, shape.chunks);
                }
                (wr, base, sh) = open(region);
                carry = 0;
            }
            i = ni;
            k = nk;
            x = xn;
        }
    }
}

/// Compression with chunks of `C` bytes (see [`EncodeParams`]), each warp
/// writing through its ring of shared memory at `ring` ([`crate::detail::pack`]).
/// `SLOTS`: the fixed-stride layout with nothing measured first (the
/// `ibp_encode_slots_c*` kernels; see [`EncodeParams`]).
///
/// Q: why are the unmeasured slots kernels of their own?
/// A: a kernel's registers are those of its most demanding path; in one
/// kernel with the measured paths, the slots' row ends took `ibp_encode_c2`
/// from 77 registers to the cap of 96 and gave it an 80-byte stack frame
/// (ptxas sm_90), fewer warps an SM for every packed compression.
///
/// Q: why not [`encode_row`], which the KV store's append uses?
/// A: it writes through [`WarpWriter`], one 256-byte step per scan and a
/// segmented OR-scan per step; for whole tables the ring writer's
/// step of two or three words (512 or 768 bytes) does the same work in
/// fewer instructions. The KV append writes rows of a few hundred bytes as spans
/// split over warps, which the register writer's span form serves.
///
/// # Safety
/// As [`EncodeParams`] states; `ring` is the 16-aligned shared address of
/// [`crate::detail::pack::RING_BYTES`] bytes that belong to this warp.
#[inline(always)]
pub unsafe fn encode<W: Lanes, M: Mem, S: Shared + Async, const C: u32, const SLOTS: bool>(
    w: &W,
    m: &M,
    s: &S,
    p: &EncodeParams,
    ring: u32,
    wid: u64,
    nwarps: u64,
) {
    // SAFETY: (this block) the ring is the warp's; the rest forwarded.
    unsafe {
        crate::detail::pack::clear(w, s, ring);
        // Chunks of 1 and 2 bytes take one payload path (`word_payload`).
        if C > 2 && p.flags & ENCODE_TWO_RUNS != 0 {
            encode_rows::<W, M, S, C, true, SLOTS>(w, m, s, p, ring, wid, nwarps);
        } else {
            encode_rows::<W, M, S, C, false, SLOTS>(w, m, s, p, ring, wid, nwarps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{pack_chunks, word_participation};
    use crate::detail::bits::{low_mask, move_masks};

    /// Chunk by chunk, as FORMAT.md §2 states it.
    fn reference<const C: u32>(x: u64, v: u64, mask: u64) -> u32 {
        let w = 8 * C;
        let lane = if C == 8 { u64::MAX } else { (1u64 << w) - 1 };
        (0..8 / C)
            .filter(|&c| ((x ^ v) & mask) >> (w * c) & lane == 0)
            .fold(0, |p, c| p | 1 << c)
    }

    fn check(x: u64, v: u64, mask: u64) {
        assert_eq!(
            word_participation::<1>(x, v, mask),
            reference::<1>(x, v, mask)
        );
        assert_eq!(
            word_participation::<2>(x, v, mask),
            reference::<2>(x, v, mask)
        );
        assert_eq!(
            word_participation::<4>(x, v, mask),
            reference::<4>(x, v, mask)
        );
        assert_eq!(
            word_participation::<8>(x, v, mask),
            reference::<8>(x, v, mask)
        );
    }

    #[test]
    fn participation_bits_equal_a_chunk_by_chunk_test() {
        // One mismatching bit at every place, in a full and a sparse mask,
        // and mismatches in the top bits of every lane (the carry's edge).
        for b in 0..64 {
            check(1 << b, 0, u64::MAX);
            check(1 << b, 0, 0x8000_8000_8080_0080);
            check(!(1u64 << b), u64::MAX, u64::MAX);
        }
        check(0x8080_8080_8080_8080, 0, u64::MAX);
        check(0x7f7f_7fff_7fff_ffff, 0, u64::MAX);
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..20000 {
            let (x, v, m) = (next(), next(), next());
            // Sparse differences, so that chunks match often.
            check(v ^ (x & next() & next() & next()), v, m);
            check(x, v, m & next() & next());
        }
    }

    /// `pack_chunks::<C>` against one chunk at a time: its free bits gathered
    /// bit by bit when it matches, all of it otherwise, laid end to end.
    fn check_pack<const C: u32>(x: u64, free: u64, hits: u32) {
        let w = 8 * C;
        let (mut want, mut n) = (0u64, 0u32);
        let mut mv = [0u64; 4];
        for c in 0..8 / C {
            let (xc, fc) = (x >> (w * c) & low_mask(w), free >> (w * c) & low_mask(w));
            for (i, m) in move_masks(fc, w.trailing_zeros())
                .iter()
                .take(4)
                .enumerate()
            {
                mv[i] |= m << (w * c);
            }
            if hits >> c & 1 == 0 {
                want |= xc << n;
                n += w;
            } else {
                for b in (0..w).filter(|b| fc >> b & 1 == 1) {
                    want |= (xc >> b & 1) << n;
                    n += 1;
                }
            }
        }
        assert_eq!(
            pack_chunks::<C>(x, free, &mv, hits),
            (want, n),
            "C={C} x={x:#x} free={free:#x} hits={hits:#b}"
        );
    }

    #[test]
    fn chunks_packed_a_word_at_a_time_equal_a_chunk_by_chunk_pack() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for free in [0, u64::MAX, 0x00ff_ff00_0f0f_8001] {
            for hits in 0..256 {
                check_pack::<1>(next(), free, hits);
                check_pack::<2>(next(), free, hits & 0xf);
            }
        }
        for _ in 0..20000 {
            let (x, free, hits) = (next(), next() & next(), next() as u32);
            check_pack::<1>(x, free, hits & 0xff);
            check_pack::<2>(x, free, hits & 0xf);
            check_pack::<2>(x, free | next(), hits & 0xf);
        }
    }
}
