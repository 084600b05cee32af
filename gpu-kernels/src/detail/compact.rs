//! The packed layout from stored forms in slots: `ibp_compact` moves each
//! tensor's stored form from its slot (as `ibp_encode_slots_c*` writes it)
//! to its packed offset ([`CompactParams`]).
//!
//! Q: why compress a packed table through slots at all?
//! A: the packed encoder must know every tensor's offset before it
//! writes, so it needs the size pass first: a whole second read of the
//! input (0.4–0.6 ms a GiB on the H200), plus a clear of the groups where
//! writes meet. Slots need no offsets: the slots encoder writes each
//! tensor into its own `L` bytes and reports the stored length, the scan
//! gives the offsets, and this pass moves the stored bytes, which at high
//! savings are a small part of the input (Cora: 4%).
//!
//! Q: why does each 16-byte group belong to one warp?
//! A: stored forms start at any byte, so two tensors meet inside a group.
//! If each warp wrote only its own bytes, the shared groups would need a
//! clear first and OR-ed stores. Here the warp of the tensor that holds a
//! group's first byte writes the whole group, taking the bytes past its
//! own stored form from the next tensors' slots; every group is stored
//! once, whole, and nothing needs zeroing first.

use crate::params::CompactParams;
use crate::simt::{Lanes, Mem};

/// The 16 bytes from `a`, whose place in its 4-byte word is `sh / 8`:
/// four aligned loads from `a − sh / 8`, and a fifth when `sh` is not 0,
/// each output word funnelled from two of them.
///
/// # Safety
/// The aligned words from `a & !3` are readable up to the one holding
/// byte `a + 15`.
#[inline(always)]
pub(crate) unsafe fn group_at<M: Mem>(m: &M, a: u64, sh: u32) -> [u32; 4] {
    let w = a & !3;
    // SAFETY: (this block) the contract.
    unsafe {
        let x = [
            m.ld_u32(w),
            m.ld_u32(w + 4),
            m.ld_u32(w + 8),
            m.ld_u32(w + 12),
        ];
        if sh == 0 {
            return x;
        }
        let x4 = m.ld_u32(w + 16);
        let f = |lo: u32, hi: u32| (lo >> sh) | (hi << (32 - sh));
        [f(x[0], x[1]), f(x[1], x[2]), f(x[2], x[3]), f(x[3], x4)]
    }
}

/// Byte `b` of the packed output: from tensor `i`'s stored form (region
/// `[o, e)`) when `b < e`, from the next one's (ending at `e2`) when
/// `b < e2`, else from the first later one that holds it, or 0 past the
/// last.
///
/// # Safety
/// As [`CompactParams`] states; `i < rows`, `o ≤ b`, `[o, e)` is tensor
/// `i`'s region and `e2` the end of tensor `i + 1`'s (`e` when there is
/// none).
#[inline(always)]
unsafe fn packed_byte<M: Mem>(m: &M, p: &CompactParams, i: u64, b: u64, r: [u64; 3]) -> u32 {
    let [o, e, e2] = r;
    // SAFETY: (this block) offsets holds rows + 1 u64; byte b − o of slot
    // i is inside its stored form when o ≤ b < e.
    unsafe {
        if b < e {
            return m.ld_u8(p.src + i * p.stride + (b - o));
        }
        if i + 1 >= p.rows {
            return 0;
        }
        if b < e2 {
            return m.ld_u8(p.src + (i + 1) * p.stride + (b - e));
        }
        // Tensors of under 16 stored bytes: walk on.
        let (mut i, mut o, mut e) = (i + 1, e, e2);
        loop {
            if b < e {
                return m.ld_u8(p.src + i * p.stride + (b - o));
            }
            i += 1;
            if i >= p.rows {
                return 0;
            }
            o = e;
            e = m.ld_u64(p.offsets + 8 * i + 8);
        }
    }
}

/// The 16-byte groups of `out` whose first byte lies in tensor `i`'s
/// region `[o, e)` (`r = [o, e, e2]`, `e2` the end of the next tensor's):
/// those inside it copied from its slot, four aligned words a lane; the
/// one it ends in (if it starts inside) assembled byte by byte, lanes
/// 0–15, with the next tensors' bytes or the padding's zeros.
///
/// Q: why load the last group's bytes first?
/// A: a warp's row is a chain of waits on memory (the region, the copy's
/// loads, which cannot pass the stores before them, the last group's
/// bytes, and before them the next tensor's end); a stored form of
/// 0.5–2 KB is one or two loads a lane, so the number of waits in the
/// chain, not the bytes, sets the time. With the regions (and the next
/// tensor's end) loaded a tensor ahead, a row is one wait.
///
/// # Safety
/// As [`CompactParams`] states; `i < rows`, `r` as above; every lane of
/// the warp calls it with the same arguments.
#[inline(always)]
unsafe fn compact_row<W: Lanes, M: Mem>(w: &W, m: &M, p: &CompactParams, i: u64, r: [u64; 3]) {
    let [o, e, _] = r;
    let lane = w.lane() as u64;
    // SAFETY: (this block) the bytes 16g.. of a group copied whole lie in
    // [o, e), so its aligned words lie in the slot (slots are whole 4-byte
    // words); the stores are groups of `out` below out_len.
    unsafe {
        let last = e / 16;
        let partial = !e.is_multiple_of(16) && 16 * last >= o;
        let b = if partial && lane < 16 {
            packed_byte(m, p, i, 16 * last + lane, r)
        } else {
            0
        };
        // Slot byte for output byte b is b − o from the slot's start.
        let from = (p.src + i * p.stride).wrapping_sub(o);
        let sh = 8 * (from % 4) as u32;
        let mut g = o.div_ceil(16) + lane;
        while 16 * g + 16 <= e {
            m.st_v4(p.out + 16 * g, group_at(m, from.wrapping_add(16 * g), sh));
            g += 32;
        }
        if partial {
            let q = 4 * (lane % 4) as u32;
            let word = w.shfl_idx(b, q)
                | w.shfl_idx(b, q + 1) << 8
                | w.shfl_idx(b, q + 2) << 16
                | w.shfl_idx(b, q + 3) << 24;
            if lane < 4 {
                m.st_u32(p.out + 16 * last + 4 * lane, word);
            }
        }
    }
}

/// Warp `wid` of `nwarps`: tensors `wid, wid + nwarps, …` (each one's
/// region, and the next tensor's end, loaded a tensor ahead), and warp 0
/// also zeroes the whole groups of padding after the stored bytes.
///
/// # Safety
/// As [`CompactParams`] states.
pub unsafe fn compact<W: Lanes, M: Mem>(w: &W, m: &M, p: &CompactParams, wid: u64, nwarps: u64) {
    let lane = w.lane() as u64;
    // SAFETY: (this block) offsets holds rows + 1 u64; the padding's
    // groups lie below out_len; the rest forwarded.
    unsafe {
        if wid == 0 {
            let total = m.ld_u64(p.offsets + 8 * p.rows);
            let mut g = total.div_ceil(16) + lane;
            while 16 * g < p.out_len {
                m.st_v4(p.out + 16 * g, [0; 4]);
                g += 32;
            }
        }
        let region = |i: u64| {
            if i < p.rows {
                let o = m.ld_u64(p.offsets + 8 * i);
                let e = m.ld_u64(p.offsets + 8 * i + 8);
                let e2 = if i + 1 < p.rows {
                    m.ld_u64(p.offsets + 8 * i + 16)
                } else {
                    e
                };
                [o, e, e2]
            } else {
                [0; 3]
            }
        };
        let mut i = wid;
        let mut r = region(i);
        while i < p.rows {
            let next = region(i + nwarps);
            compact_row(w, m, p, i, r);
            i += nwarps;
            r = next;
        }
    }
}
