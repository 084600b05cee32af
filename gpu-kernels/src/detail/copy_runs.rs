//! Byte ranges copied from one buffer to another, one warp a range
//! (`ibp_copy_runs`, [`CopyRunsParams`]): the pack and unpack of an
//! all-to-all, which moves each pair of ranks' runs of rows in one send
//! (the sender gathers its runs for a peer into one staging buffer, the
//! receiver puts each back at its place in its payload).
//!
//! Q: why one kernel for both directions?
//! A: pack and unpack are the same operation, a list of (source offset,
//! destination offset, length) copies; only the list and the two buffers
//! differ.
//!
//! Q: why 16-byte stores on the destination's alignment, whatever the
//! source's?
//! A: ranges start at any byte (compressed rows are packed back to back),
//! so source and destination rarely share an alignment. Each warp stores
//! the 16-byte groups wholly inside its range with one vector store a lane
//! (loaded with one vector load when the source is 16-aligned there too,
//! else as words funnelled from four or five aligned loads, as
//! [`compact`](super::compact) does), and the at most 15 bytes before the
//! first group and after the last one byte by byte. No byte outside a
//! range is written, so ranges may meet inside a group.

use super::compact::group_at;
use crate::params::CopyRunsParams;
use crate::simt::{Lanes, Mem};

/// Copy `len` bytes from address `src` to address `dst` (the calling
/// warp, every lane with the same arguments).
///
/// # Safety
/// `dst ..+ len` is writable and touched by no other thread meanwhile;
/// the aligned 4-byte words holding `src ..+ len` are readable.
#[inline(always)]
pub unsafe fn copy_range<W: Lanes, M: Mem>(w: &W, m: &M, src: u64, dst: u64, len: u64) {
    let lane = w.lane() as u64;
    let end = dst.wrapping_add(len);
    // The first group boundary at or after `dst`, not past the end; the
    // last one at or before the end, not before that.
    let head_end = (dst.wrapping_add(15) & !15).min(end);
    let body_end = (end & !15).max(head_end);
    let delta = src.wrapping_sub(dst);
    // SAFETY: (this block) every store is a byte of dst..end or a 16-byte
    // group inside it (head_end and body_end are 16-aligned when they
    // differ); every load is the matching source byte, or aligned words
    // holding source bytes of the range (`group_at`'s contract, 16 bytes
    // from a range byte inside the range).
    unsafe {
        // Lanes 0–15: the bytes before the first group; 16–31: after the
        // last (at most 15 each).
        let b = if lane < 16 {
            dst.wrapping_add(lane)
        } else {
            body_end.wrapping_add(lane - 16)
        };
        let limit = if lane < 16 { head_end } else { end };
        if b < limit {
            m.st_u8(b, m.ld_u8(b.wrapping_add(delta)));
        }
        let from = head_end.wrapping_add(delta);
        let mut g = head_end.wrapping_add(16 * lane);
        if from.is_multiple_of(16) {
            while g < body_end {
                m.st_v4(g, m.ld_v4(g.wrapping_add(delta)));
                g = g.wrapping_add(512);
            }
        } else {
            let sh = 8 * (from % 4) as u32;
            while g < body_end {
                m.st_v4(g, group_at(m, g.wrapping_add(delta), sh));
                g = g.wrapping_add(512);
            }
        }
    }
}

/// Warp `wid` of `nwarps`: ranges `wid, wid + nwarps, …`.
///
/// # Safety
/// As [`CopyRunsParams`] states; every lane of a warp calls it with the
/// same arguments.
pub unsafe fn copy_runs<W: Lanes, M: Mem>(w: &W, m: &M, p: &CopyRunsParams, wid: u64, nwarps: u64) {
    let mut i = wid;
    while i < p.count {
        let at = p.ranges.wrapping_add(24 * i);
        // SAFETY: range i's triple lies in the list (i < count); its
        // bytes lie in the buffers (the contract).
        unsafe {
            let (s, d, len) = (m.ld_u64(at), m.ld_u64(at + 8), m.ld_u64(at + 16));
            copy_range(w, m, p.src.wrapping_add(s), p.dst.wrapping_add(d), len);
        }
        i = i.wrapping_add(nwarps);
    }
}
