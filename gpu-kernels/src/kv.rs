//! The appendable KV store's append (`ibp::gpu::KvStore`): one warp per
//! row writes the row's stored form into its fixed-stride slot, records its
//! stored length in the store's length table and its encoded flag in the
//! store's flag bitmap, in one kernel (`ibp_kv_append_c*`). When slots are
//! whole 32-bit words (`L % 4 == 0`, every KV row) the warp encodes
//! without measuring first ([`encode_slot`]) and zeroes the slot past the
//! stored form; otherwise it measures ([`measure_row`]) and encodes
//! ([`encode_row`]) into a zeroed slot.
//!
//! Written over [`Lanes`] and [`Mem`] like `crate::encode`, whose row
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

use crate::encode::{encode_row, encode_slot, measure_row};
use crate::params::{EncodeParams, KvAppendParams};
use crate::simt::{Lanes, Mem};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_rows_record_their_width() {
        assert_eq!(stored_len(10, 768), 10);
        assert_eq!(stored_len(768, 768), 768);
        assert_eq!(stored_len(900, 768), 768);
    }
}
