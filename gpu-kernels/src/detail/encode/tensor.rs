//! One tensor's stored form written by a warp through a [`WarpWriter`]:
//! into the packed layout ([`encode_row`]) or a fixed-stride slot
//! ([`encode_slot`]).

use super::lane::{LaneShape, group_word, lane_participation, lane_payload, participation_word};
use super::rows::row_word;
use super::writer::WarpWriter;
use crate::detail::bits;
use crate::params::EncodeParams;
use crate::simt::{Lanes, Mem};

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
