//! The float-coded KV store's placement (`ibp::gpu::FloatKvStore`), the
//! body of `ibp_float_kv_place`: after `ibp_float_encode` has written an
//! append's stored forms back to back into a device staging area, a warp
//! a row copies each into its fixed-size slot in the store's pages, or,
//! when it is longer than a slot, into the next entry of the overflow area
//! (a device counter hands the entries out), and writes the row's direct
//! index entry (a start and a length, `FLOAT_DIRECT_INDEX`). A row that
//! finds the overflow area full is not stored: its length says so
//! ([`FLOAT_KV_REFUSED`]) and the store's counters record it.
//!
//! Written over [`Lanes`], [`Mem`] and [`Counter`], so the host's tests run
//! it on the emulated warp against a CPU model.
//!
//! Q: why a warp a row, and not a warp a group of 32 rows with one counter
//! update for the group's overflowing rows?
//! A: the copy is a dependent chain (the index, the stage's words, the
//! stores); a warp that copied 32 rows one after another would pay 32
//! chains, and a decode step (384 rows) would run on 12 warps. A row
//! overflows rarely (by the slot's rule, about one in a thousand of the
//! prefill's), so the counter sees few updates either way.
//!
//! Q: why 16-byte stores built from 4-byte loads?
//! A: the pages are mapped pinned host memory: a store crosses PCIe, and
//! whole 16-byte pieces of consecutive lanes make whole lines (the KV
//! store's Q/A in `crate::detail::kv`: 32-bit stores there ran at 4.9
//! GB/s). The stage is in device memory (L2), where a row's unaligned
//! start costs only a fifth 4-byte load a piece.

use crate::params::{FLOAT_KV_REFUSED, FloatKvPlaceParams};
use crate::simt::{Counter, Lanes, Mem, shfl_idx64};

/// Where row `i` of the append goes: the span offset of its bytes and the
/// length its index records (`FLOAT_KV_REFUSED` when it is not stored).
/// Warp-uniform; lane 0 takes the overflow entry.
///
/// # Safety
/// As [`place`]; `i < p.rows`.
#[inline(always)]
unsafe fn destination<W: Lanes, M: Mem + Counter>(
    w: &W,
    m: &M,
    p: &FloatKvPlaceParams,
    i: u64,
    len: u64,
) -> (u64, u32) {
    let r = p.first + i;
    if len <= p.slot_bytes {
        return (r * p.slot_bytes, len as u32);
    }
    let mut e = 0;
    if w.lane() == 0 {
        // SAFETY: counters holds two u64 (the caller's contract).
        e = unsafe { m.fetch_add_u64(p.counters, 1) };
    }
    let e = shfl_idx64(w, e, 0);
    if e < p.overflow_entries {
        (p.overflow_at + e * p.entry_bytes, len as u32)
    } else {
        (0, FLOAT_KV_REFUSED)
    }
}

/// 16 bytes of the stage from `a` (any byte), the bytes from `valid` on
/// zeroed.
///
/// # Safety
/// The aligned words from `a & !3` through `a + 16` readable.
#[inline(always)]
unsafe fn piece<M: Mem>(m: &M, a: u64, valid: u64) -> [u32; 4] {
    let a0 = a & !3;
    let sh = ((a & 3) * 8) as u32;
    // SAFETY: the caller's contract.
    let w = unsafe {
        [
            m.ld_u32(a0),
            m.ld_u32(a0 + 4),
            m.ld_u32(a0 + 8),
            m.ld_u32(a0 + 12),
            if sh == 0 { 0 } else { m.ld_u32(a0 + 16) },
        ]
    };
    let mut v = [0u32; 4];
    let mut k = 0;
    while k < 4 {
        let x = if sh == 0 {
            w[k]
        } else {
            (w[k] >> sh) | (w[k + 1] << (32 - sh))
        };
        let keep = valid.saturating_sub(4 * k as u64);
        v[k] = if keep >= 4 {
            x
        } else {
            x & ((1u32 << (8 * keep as u32)) - 1)
        };
        k += 1;
    }
    v
}

/// `ibp_float_kv_place`: warp `warp` of `warps` places rows `warp, warp +
/// warps, …` of the append (see [`FloatKvPlaceParams`]).
///
/// # Safety
/// The host filled `p` as [`FloatKvPlaceParams`] says.
#[inline(always)]
pub unsafe fn place<W: Lanes, M: Mem + Counter>(
    w: &W,
    m: &M,
    p: &FloatKvPlaceParams,
    warp: u64,
    warps: u64,
) {
    let lane = w.lane() as u64;
    let mut i = warp;
    while i < p.rows {
        // Every lane reads the same two words (one transaction).
        // SAFETY: i < rows; offsets holds rows + 1 u64.
        let (off, end) = unsafe {
            (
                m.ld_u64(p.offsets + 8 * i),
                m.ld_u64(p.offsets + 8 * (i + 1)),
            )
        };
        let len = end.saturating_sub(off);
        // SAFETY: forwarded contract; i < rows.
        let (dst, stored) = unsafe { destination(w, m, p, i, len) };
        let r = p.first + i;
        if lane == 0 {
            // SAFETY: starts and lens hold first + rows entries; counters
            // two u64.
            unsafe {
                m.st_u64(p.starts + 8 * r, dst);
                m.st_u32(p.lens + 4 * r, stored);
                if stored == FLOAT_KV_REFUSED {
                    m.min_u64(p.counters + 8, r);
                }
            }
        }
        if stored != FLOAT_KV_REFUSED {
            let mut c = 16 * lane;
            while c < len {
                // SAFETY: the row's bytes lie in the stage, readable 20
                // bytes past its end; the slot or entry at `dst` holds
                // `len` rounded up to 16 (len ≤ slot_bytes for a slot, ≤
                // entry_bytes for an entry), 16-aligned.
                unsafe { m.st_v4(p.pages + dst + c, piece(m, p.stage + off + c, len - c)) };
                c += 16 * 32;
            }
        }
        i += warps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;

    /// A byte array as memory, for the lane-free helper.
    struct Bytes(RefCell<[u8; 64]>);

    impl Mem for Bytes {
        unsafe fn ld_u8(&self, a: u64) -> u32 {
            self.0.borrow()[a as usize] as u32
        }
        unsafe fn ld_u32(&self, a: u64) -> u32 {
            let b = self.0.borrow();
            u32::from_le_bytes([
                b[a as usize],
                b[a as usize + 1],
                b[a as usize + 2],
                b[a as usize + 3],
            ])
        }
        unsafe fn ld_u64(&self, _: u64) -> u64 {
            unreachable!()
        }
        unsafe fn ld_ro_u64(&self, _: u64) -> u64 {
            unreachable!()
        }
        unsafe fn st_u8(&self, _: u64, _: u32) {}
        unsafe fn st_u32(&self, _: u64, _: u32) {}
        unsafe fn st_u64(&self, _: u64, _: u64) {}
        unsafe fn ld_v4(&self, _: u64) -> [u32; 4] {
            unreachable!()
        }
        unsafe fn st_u16(&self, _: u64, _: u32) {}
        unsafe fn or_u64(&self, _: u64, _: u64) {}
        unsafe fn min_u64(&self, _: u64, _: u64) {}
        unsafe fn st_v4(&self, _: u64, _: [u32; 4]) {}
        unsafe fn or_u32(&self, _: u64, _: u32) {}
        unsafe fn add_u64(&self, _: u64, _: u64) {}
    }

    #[test]
    fn a_piece_is_16_bytes_from_any_start_cut_at_its_length() {
        let mut b = [0u8; 64];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 + 1;
        }
        let m = Bytes(RefCell::new(b));
        for a in 0..24u64 {
            for valid in [0u64, 1, 5, 15, 16, 40] {
                // SAFETY: the words read lie inside the 64 bytes.
                let v = unsafe { piece(&m, a, valid) };
                let got: Vec<u8> = v.iter().flat_map(|w| w.to_le_bytes()).collect();
                let want: Vec<u8> = (0..16u64)
                    .map(|k| if k < valid { b[(a + k) as usize] } else { 0 })
                    .collect();
                assert_eq!(got, want, "start {a}, {valid} valid");
            }
        }
    }
}
