//! The appendable KV store's append (`ibp::gpu::KvStore`): one warp per
//! row writes the row's stored form into its fixed-stride slot, records its
//! stored length in the store's length table and its encoded flag in the
//! store's flag bitmap, in one kernel (`ibp_kv_append_c*`). When slots are
//! whole 32-bit words (`L % 4 == 0`, every KV row) the warp encodes
//! without measuring first ([`encode_slot`]) and zeroes the slot past the
//! stored form; otherwise it measures ([`measure_row`]) and encodes
//! ([`encode_row`]) into a zeroed slot.
//!
//! Written over [`Lanes`] and [`Mem`] like `crate::detail::encode`, whose row
//! bodies it calls, so the host tests run it too.
//!
//! Q: why one kernel rather than the size kernel, a commit kernel and the
//! encoder?
//! A: a decode step is 384 rows of 768 bytes. Measured on the H200 with
//! three kernels (size 5.3 µs, commit 4.0 µs, encode 9.8 µs), each was a
//! chain of dependent loads across a few hundred warps, not a matter of
//! bandwidth, so the step paid three chains and two gaps. Here one warp
//! does all three for its row: one chain, one launch (10.7 µs by Nsight
//! Compute on the same step).
//!
//! Q: how are the flags written without a read-modify-write race?
//! A: a row's slot, length and flag are written once, when it is appended,
//! and the bitmap starts zeroed: an encoded row sets its bit with an atomic
//! OR on the bitmap's 32-bit word, a raw row leaves it clear. Rows of
//! different appends, or of different warps, share words safely.

use crate::detail::encode::{
    LaneShape, WarpWriter, encode_row, encode_slot, group_word, lane_participation, lane_payload,
    measure_row, row_word,
};
use crate::params::{EncodeParams, KvAppendParams};
use crate::simt::{Block, Lanes, Mem, Shared, exclusive_scan, warp_sum};

/// Warps of a block in the block append ([`append_block`]).
pub const BLOCK_WARPS: u64 = 8;

/// The block append's shape for rows of `row_bytes` bytes: (warps per row,
/// rows per block), a warp for each 256 bytes of the row (a lane word of 8
/// bytes each). `None`, and a warp per row ([`append`]), when the slots are
/// not whole 32-bit words or a row would take more than [`BLOCK_WARPS`]
/// warps (rows over 2 KiB).
#[inline(always)]
pub const fn block_shape(row_bytes: u64) -> Option<(u64, u64)> {
    let warps = row_bytes.div_ceil(256);
    if row_bytes == 0 || !row_bytes.is_multiple_of(4) || warps > BLOCK_WARPS {
        None
    } else {
        Some((warps, BLOCK_WARPS / warps))
    }
}

/// The length-table entry of a row of `row_bytes` measured at `size`
/// stored bytes (raw rows store `row_bytes`).
#[inline(always)]
pub const fn stored_len(size: u64, row_bytes: u64) -> u32 {
    if size < row_bytes {
        size as u32
    } else {
        row_bytes as u32
    }
}

/// The append of one piece with chunks of `C` bytes (see
/// [`KvAppendParams`]). Warp `wid` of `nwarps` takes rows `wid, wid +
/// nwarps, …`.
///
/// # Safety
/// As [`KvAppendParams`] states.
pub unsafe fn append<W: Lanes, M: Mem, const C: u32>(
    w: &W,
    m: &M,
    p: &KvAppendParams,
    wid: u64,
    nwarps: u64,
) {
    let l = p.row_bytes;
    let lane = w.lane() as u64;
    let e = EncodeParams {
        src: p.src,
        stride: l,
        rows: p.rows,
        row_bytes: l,
        book: p.book,
        out: p.out,
        ..EncodeParams::default()
    };
    let mut i = wid;
    while i < p.rows {
        let start = p.src + i * l;
        let slot = p.out + i * l;
        let r = p.first + i;
        // SAFETY: (this block) the row, the book, the slot, the length
        // table and the bitmap as KvAppendParams states.
        unsafe {
            let (stored, bits) = if p.zero_tail != 0 {
                encode_slot::<W, M, C>(w, m, &e, start, slot)
            } else {
                let stored = measure_row::<W, M, C>(w, m, p.book, start, l, 0, false);
                (
                    stored,
                    encode_row::<W, M, C>(w, m, &e, start, stored, slot, l),
                )
            };
            if p.zero_tail != 0 {
                // The slot is 4-aligned and a whole number of words: the
                // words past the stored form's are not written by anyone else.
                let mut k = bits.div_ceil(32) + lane;
                while k < l / 4 {
                    m.st_u32(slot + 4 * k, 0);
                    k += 32;
                }
            }
            // Last, and with no branch on `stored`: a lane-0 block that
            // tested `stored < l` let the compiler thread that test into
            // `encode_row`'s raw-or-encoded branch and run the encoder twice,
            // once for lane 0 and once for the others (measured on the H200:
            // twice the instructions, 16.8 active lanes of 32).
            if lane == 0 {
                m.st_u32(p.lengths + 4 * r, stored_len(stored, l));
                m.or_u32(p.flags + 4 * (r / 32), ((stored < l) as u32) << (r % 32));
            }
        }
        i += nwarps;
    }
}

/// The append of one piece with chunks of `C` bytes, a row split over the
/// warps of a block ([`block_shape`] gives `P` warps per row and `R` rows
/// per block; the block has `P · R` warps and is block `b` of
/// `⌈rows / R⌉`). Warp `warp` of the block takes row `b · R + warp / P`'s
/// lane words `32 (warp % P) …`, one each per lane. `totals` is the
/// shared-memory address of `P · R` u32. Every thread of the block must
/// call it (it meets the block's barrier once).
///
/// Q: how do the warps of a row write one stream without a pass to find
/// where each starts?
/// A: each warp encodes its words in registers (their participation bits
/// and payloads), zeroes its 256 bytes of the slot, and leaves its payload
/// width in `totals`. After the barrier it knows where its payload starts
/// (after the row's `K` participation bits and the payloads of the warps
/// before it), whether the row is stored raw (`⌈(K + payload) / 8⌉ ≥ L`),
/// and writes its span; the two words a span may share with its
/// neighbours are OR-ed into the zeroed slot. Against a warp per row
/// ([`append`]): the dependent chain of a warp is one lane word and two
/// warp scans, not three words (768-byte rows) with a scan and a writer
/// step each, and three times the warps hide each other's latency.
///
/// # Safety
/// As [`KvAppendParams`] states, with `zero_tail` 1; `block_shape(row_bytes)`
/// is `Some`; `totals` as above.
#[allow(clippy::too_many_arguments)]
pub unsafe fn append_block<W: Lanes + Block, M: Mem, S: Shared, const C: u32>(
    w: &W,
    m: &M,
    s: &S,
    p: &KvAppendParams,
    block: u64,
    warp: u32,
    totals: u32,
) {
    let l = p.row_bytes;
    let (per_row, rows_per_block) = block_shape(l).unwrap_or((1, 1));
    let lane = w.lane();
    let k = warp as u64 % per_row;
    let row = warp as u64 / per_row;
    let i = block * rows_per_block + row;
    // Warp-uniform: a warp past the last row (the last block's) only meets
    // the barrier.
    let active = row < rows_per_block && i < p.rows;
    let words = l.div_ceil(8);
    let shape = LaneShape::new::<C>(l);
    let start = p.src + i * l;
    let slot = p.out + i * l;
    let q = 32 * k + lane as u64;
    let (mut x, mut group, mut val, mut n) = (0u64, 0u32, 0u64, 0u32);
    // SAFETY: (this block) the row, the book and the slot as
    // KvAppendParams states; lane words past the row are not loaded.
    unsafe {
        if active {
            x = row_word(m, start, l, q);
            let (part, _) = lane_participation::<M, C>(m, p.book, &shape, x, q as u32);
            group = group_word::<W, C>(w, part);
            if q < words {
                (val, n) = lane_payload::<M, C, false>(m, p.book, &shape, x, q as u32, part);
            }
            // This warp's 256 bytes of the slot (64 words), zeroed for the
            // words shared between spans and the tail past the stored form.
            let mut j = 64 * k + lane as u64;
            while j < 64 * k + 64 && j < l / 4 {
                m.st_u32(slot + 4 * j, 0);
                j += 32;
            }
            let t = warp_sum(w, n);
            if lane == 0 {
                s.sts_u32(totals + 4 * warp, t);
            }
        }
    }
    w.sync_threads();
    if active {
        // SAFETY: the caller's contract.
        unsafe {
            write_span::<W, M, S, C>(w, m, s, p, i, row, per_row, k, totals, x, group, val, n)
        };
    }
    if p.pages != 0 {
        w.sync_threads();
        // SAFETY: the block's slots are written (the barrier), `pages`
        // holds the piece's slots (KvAppendParams).
        unsafe {
            copy_out(
                m,
                p,
                block,
                rows_per_block,
                32 * per_row * rows_per_block,
                warp,
                lane,
            )
        };
    }
}

/// The second half of [`append_block`]: warp `k` of the `per_row` of row
/// `i` (the block's `row`-th) writes its span of the row's stored form, from its encoded
/// lane word (`x` the row's bytes, `group` its group's participation word,
/// `val`/`n` its payload), and warp 0 the row's length and flag.
///
/// # Safety
/// As [`append_block`]; the block's barrier is behind (the widths are in
/// `totals`, the slot zeroed).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn write_span<W: Lanes, M: Mem, S: Shared, const C: u32>(
    w: &W,
    m: &M,
    s: &S,
    p: &KvAppendParams,
    i: u64,
    row: u64,
    per_row: u64,
    k: u64,
    totals: u32,
    x: u64,
    group: u32,
    val: u64,
    n: u32,
) {
    let l = p.row_bytes;
    let lane = w.lane();
    let words = l.div_ceil(8);
    let chunks = l.div_ceil(C as u64);
    let slot = p.out + i * l;
    let q = 32 * k + lane as u64;
    // SAFETY: (this block) `totals` holds the row's P widths; the slot,
    // the length table and the bitmap as KvAppendParams states.
    unsafe {
        let first = totals + 4 * (row * per_row) as u32;
        let t = if (lane as u64) < per_row {
            s.lds_u32(first + 4 * lane)
        } else {
            0
        };
        let (before, payload) = exclusive_scan(w, t);
        let before = w.shfl_idx(before, k as u32) as u64;
        let span = w.shfl_idx(t, k as u32) as u64;
        let bits = chunks + payload as u64;
        let stored = bits.div_ceil(8);
        if stored < l {
            // The participation words: whole ones stored, the one shared
            // with the payload's first bits OR-ed.
            let g = 4 * C;
            let pw = k * (8 / C) as u64 + (lane / g) as u64;
            if lane.is_multiple_of(g) && 32 * pw < chunks {
                if 32 * pw + 32 <= chunks {
                    m.st_u32(slot + 4 * pw, group);
                } else {
                    m.or_u32(slot + 4 * pw, group);
                }
            }
            let lo = chunks + before;
            let mut wr = WarpWriter::span(slot, lo, lo + span);
            wr.step(w, m, val, n);
            wr.flush(w, m);
        } else if q < words {
            // Raw: the row's bytes as they are (whole words: L % 4 == 0).
            m.st_u32(slot + 8 * q, x as u32);
            if l - 8 * q >= 8 {
                m.st_u32(slot + 8 * q + 4, (x >> 32) as u32);
            }
        }
        if k == 0 && lane == 0 {
            let r = p.first + i;
            m.st_u32(p.lengths + 4 * r, stored_len(stored, l));
            m.or_u32(p.flags + 4 * (r / 32), ((stored < l) as u32) << (r % 32));
        }
    }
}

/// The block's finished slots (rows `b · R …`, as many as the piece has)
/// copied from the staging half to the pages, 16 bytes a thread a step
/// when everything is 16-aligned, else 4 (`L % 4 == 0`).
///
/// Q: why copy from the block, when the host could copy the half by DMA?
/// A: a decode step is a few hundred KB. Its DMA copy waits for the
/// kernel's end and costs its own start-up: on the H200 (2026-11-26) the
/// kernel took 6.5 µs and the copy 8.9 µs alone, and the step 21–23 µs,
/// the rest being the hand-over between the two engines. Here each block
/// sends its slots as soon as they are written, with whole-line stores
/// (the slots are in L2), while other blocks still encode: 14–16 µs a
/// step, and 51.8 GB/s in bulk (DMA: 50.1). (Writing the stored forms
/// straight into the pages instead, with the writer's 32-bit stores and
/// ORs, ran at 7.5 GB/s: see `ibp::gpu::KvStore`.)
///
/// # Safety
/// `p.pages` holds `rows · L` bytes; the block's slots are written.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn copy_out<M: Mem>(
    m: &M,
    p: &KvAppendParams,
    block: u64,
    rows_per_block: u64,
    threads: u64,
    warp: u32,
    lane: u32,
) {
    let l = p.row_bytes;
    let first = block * rows_per_block;
    if first >= p.rows {
        return;
    }
    let rows = if p.rows - first < rows_per_block {
        p.rows - first
    } else {
        rows_per_block
    };
    let (src, dst, bytes) = (p.out + first * l, p.pages + first * l, rows * l);
    let t = 32 * warp as u64 + lane as u64;
    // SAFETY: (loads, stores) inside the block's slots and their pages,
    // aligned as each width needs.
    unsafe {
        if (src | dst | l).is_multiple_of(16) {
            let mut o = 16 * t;
            while o < bytes {
                m.st_v4(dst + o, m.ld_v4(src + o));
                o += 16 * threads;
            }
        } else {
            let mut o = 4 * t;
            while o < bytes {
                m.st_u32(dst + o, m.ld_u32(src + o));
                o += 4 * threads;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_whole_words_up_to_2_kib_take_a_block() {
        assert_eq!(block_shape(768), Some((3, 2)));
        assert_eq!(block_shape(256), Some((1, 8)));
        assert_eq!(block_shape(2048), Some((8, 1)));
        assert_eq!(block_shape(2052), None);
        assert_eq!(block_shape(6), None);
        assert_eq!(block_shape(0), None);
    }

    #[test]
    fn raw_rows_record_their_width() {
        assert_eq!(stored_len(10, 768), 10);
        assert_eq!(stored_len(768, 768), 768);
        assert_eq!(stored_len(900, 768), 768);
    }
}
