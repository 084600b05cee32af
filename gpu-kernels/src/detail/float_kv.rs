//! The float-coded KV store's placement (`ibp::gpu::FloatKvStore`), the
//! body of `ibp_float_kv_place`: after `ibp_float_encode_strided` has written an
//! append's stored forms into a device staging area, a row every
//! `stage_stride` bytes, a warp
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
//! Q: why 16-byte stores, and a stage of fixed stride?
//! A: the pages are mapped pinned host memory: a store crosses PCIe, and
//! whole 16-byte pieces of consecutive lanes make whole lines (the KV
//! store's Q/A in `crate::detail::kv`: 32-bit stores there ran at 4.9
//! GB/s). With the stage's rows at a stride of 16
//! (`ibp_float_encode_strided`) a piece is one 16-byte load too, and the encoder needs no
//! scan of the sizes first: the append is the size pass, a memset, the
//! write pass and this kernel.

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

/// The 16 bytes at `a` (16-aligned), those from `valid` on zeroed.
///
/// # Safety
/// The 16 bytes at `a` readable.
#[inline(always)]
unsafe fn piece<M: Mem>(m: &M, a: u64, valid: u64) -> [u32; 4] {
    // SAFETY: the caller's contract.
    let mut v = unsafe { m.ld_v4(a) };
    let mut k = 0;
    while k < 4 {
        let keep = valid.saturating_sub(4 * k as u64);
        if keep < 4 {
            v[k] &= (1u32 << (8 * keep as u32)) - 1;
        }
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
        // Every lane reads the same word (one transaction).
        // SAFETY: i < rows; sizes holds rows u64.
        let len = unsafe { m.ld_u64(p.sizes + 8 * i) };
        let off = i * p.stage_stride;
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
                // SAFETY: the row's bytes lie in its stride of the stage,
                // 16-aligned and a multiple of 16 long; the slot or entry
                // at `dst` holds `len` rounded up to 16 (len ≤ slot_bytes
                // for a slot, ≤ entry_bytes for an entry), 16-aligned.
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
        unsafe fn ld_v4(&self, a: u64) -> [u32; 4] {
            // SAFETY: the caller's contract.
            core::array::from_fn(|k| unsafe { self.ld_u32(a + 4 * k as u64) })
        }
        unsafe fn st_u16(&self, _: u64, _: u32) {}
        unsafe fn or_u64(&self, _: u64, _: u64) {}
        unsafe fn min_u64(&self, _: u64, _: u64) {}
        unsafe fn st_v4(&self, _: u64, _: [u32; 4]) {}
        unsafe fn or_u32(&self, _: u64, _: u32) {}
        unsafe fn add_u64(&self, _: u64, _: u64) {}
    }

    #[test]
    fn a_piece_is_16_bytes_cut_at_its_length() {
        let mut b = [0u8; 64];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 + 1;
        }
        let m = Bytes(RefCell::new(b));
        for a in [0u64, 16, 32, 48] {
            for valid in [0u64, 1, 5, 15, 16, 40] {
                // SAFETY: the 16 bytes read lie inside the 64.
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
