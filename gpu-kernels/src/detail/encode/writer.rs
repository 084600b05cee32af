//! A warp's bit stream written word by word from registers, with no
//! atomics ([`WarpWriter`]).

use crate::simt::{Lanes, Mem, exclusive_scan};

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
/// that may turn out longer than its slot: [`encode_slot`](super::encode_slot)).
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
    pub(super) clip: bool,
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
