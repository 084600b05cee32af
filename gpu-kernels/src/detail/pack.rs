//! A warp's bit stream packed through shared memory: the writer of the bulk
//! encoder ([`RingWriter`], used by `crate::detail::encode::encode`).
//!
//! Q: why through shared memory, when [`crate::detail::encode::WarpWriter`]
//! assembles the words in registers?
//! A: in registers, a word that several lanes' segments share is put
//! together by a segmented OR-scan (ten shuffles a step) and stored by the
//! lane that ends it, 4 bytes a lane. Here each lane ORs the pieces of its
//! segments into a ring of words in shared memory, where no lane needs to
//! know which others touch a word, and the warp then copies the finished
//! words out 16 bytes a lane. A lane lays up to three segments a step
//! (the bulk encoder's 768 bytes of input) with two scans, where the
//! register writer needs three steps of one scan each.
//!
//! The ring holds [`RING_WORDS`] words; word `k` of the stream (counted
//! from the 16-aligned base `a0`) lives in slot `k mod RING_WORDS`. Between
//! streams every slot is zero: a flush zeroes what it copies out.

use crate::simt::{Async, Lanes, Mem, Shared, inclusive_scan};

/// Words in a warp's ring. A step of `N` segments a lane lays at most
/// `64·N` words (`32·N` segments of 64 bits) past the 4-word group being
/// filled, so 256 never wraps onto words not yet copied out for `N ≤ 3`.
pub const RING_WORDS: u32 = 256;

/// Bytes of shared memory a warp's ring takes (16-aligned).
pub const RING_BYTES: u32 = 4 * RING_WORDS;

/// Warps per block of the kernels that give each warp a ring (the bulk
/// encoder): its shared memory is `RING_WARPS · RING_BYTES`.
pub const RING_WARPS: u32 = 2;

/// Zero a warp's ring (once, before its first stream).
///
/// # Safety
/// `ring` is the 16-aligned shared address of [`RING_BYTES`] bytes that
/// belong to this warp.
#[inline(always)]
pub unsafe fn clear<W: Lanes, S: Shared + Async>(w: &W, s: &S, ring: u32) {
    let mut a = 16 * w.lane();
    while a < RING_BYTES {
        // SAFETY: inside the warp's ring, 16-aligned.
        unsafe { s.sts_v4(ring + a, [0; 4]) };
        a += 16 * 32;
    }
    s.sync_warp();
}

/// Writes the stream of one region through the warp's ring (see the module
/// doc). The stream's first bits (the participation bits) may be written
/// directly by the caller ([`RingWriter::put`]); the ring owns the words
/// from the one holding bit [`RingWriter::new`]'s `first_bit` on. When
/// that word also holds the caller's bits, both sides OR their bits into
/// it (in memory the host zeroed), in either order.
///
/// Words are addressed from `a0`, the destination rounded down to 16
/// bytes; the region is bits `[lo, hi)` from `a0`. Whole 16-byte groups
/// inside the region are stored; the words of a group at either end of it
/// are OR-ed into memory the host zeroed (a word shared with a neighbouring
/// region, only the first and last can be, is then finished by two warps
/// in either order); a word outside is not touched.
///
/// Q: why are positions 32-bit?
/// A: a region is one tensor's stored form, at most 2^28 bytes (the host's
/// `MAX_ROW_BYTES`), so its bits from `a0` stay below 2^31; 64-bit
/// positions cost two instructions for every add and compare, and the
/// writer's bookkeeping is most of what a step executes.
pub struct RingWriter {
    ring: u32,
    a0: u64,
    lo: u32,
    hi: u32,
    /// First word the ring owns.
    first: u32,
    /// First word the ring owns alone: `first`, or `first + 1` when the
    /// caller's bits share `first`.
    own: u32,
    /// Next stream bit, from `a0`.
    pos: u32,
    /// Words below `next` are copied out (a multiple of 4 after the first
    /// flush).
    next: u32,
}

impl RingWriter {
    /// A writer for the region of `len` bytes at byte address `dst` whose
    /// stream continues at bit `first_bit` of the region (the bits before
    /// it are the caller's, to [`RingWriter::put`]). `len < 2^28`.
    #[inline(always)]
    pub const fn new(ring: u32, dst: u64, len: u32, first_bit: u32) -> Self {
        let lo = (dst % 16) as u32 * 8;
        let pos = lo + first_bit;
        let shared = first_bit > 0 && !pos.is_multiple_of(32);
        RingWriter {
            ring,
            a0: dst - dst % 16,
            lo,
            hi: lo + 8 * len,
            first: pos / 32,
            own: pos / 32 + shared as u32,
            pos,
            next: pos / 32,
        }
    }

    /// The region's first bit, from `a0` (the stream's bit 0).
    #[inline(always)]
    pub const fn start_bit(&self) -> u32 {
        self.lo
    }

    /// Bits written so far, counted from the region's start.
    #[inline(always)]
    pub const fn written(&self) -> u32 {
        self.pos - self.lo
    }

    /// Write word `k` (from `a0`) of the caller's bits, a word at or past
    /// the region's first (`32k + 32 > lo`) and inside it, straight to
    /// memory: stored, or OR-ed when it is shared with the region before or
    /// with the ring. Words the ring owns alone are left to it (the
    /// caller's bits in them must be zero).
    ///
    /// # Safety
    /// The region is writable (and zeroed where it shares a word).
    #[inline(always)]
    pub unsafe fn put<M: Mem>(&self, m: &M, k: u32, v: u32) {
        if k >= self.own {
            return;
        }
        let a = self.a0 + 4 * k as u64;
        // SAFETY: (both) word k is inside the region (the caller's
        // contract).
        unsafe {
            if 32 * k >= self.lo && k < self.first {
                m.st_u32(a, v);
            } else {
                m.or_u32(a, v);
            }
        }
    }

    /// Shared address of word `k`'s slot.
    #[inline(always)]
    const fn slot(&self, k: u32) -> u32 {
        self.ring + 4 * (k % RING_WORDS)
    }

    /// OR the `n ≤ 64`-bit `v` in at stream bit `p` (from `a0`).
    ///
    /// # Safety
    /// The ring is this warp's; `p` is at or past the first word the ring
    /// owns and within [`RING_WORDS`] − 4 words of `next`.
    #[inline(always)]
    unsafe fn lay<S: Shared>(&self, s: &S, p: u32, v: u64, n: u32) {
        if n == 0 {
            return;
        }
        let k = p / 32;
        let sh = p % 32;
        let low = v << sh;
        let top = if sh == 0 { 0 } else { (v >> (64 - sh)) as u32 };
        let nw = (sh + n).div_ceil(32);
        // SAFETY: (all) slots of the ring.
        unsafe {
            s.ors_u32(self.slot(k), low as u32);
            if nw >= 2 {
                s.ors_u32(self.slot(k + 1), (low >> 32) as u32);
            }
            if nw == 3 {
                s.ors_u32(self.slot(k + 2), top);
            }
        }
    }

    /// Append every lane's `N` segments (`N ≤ 3`, see [`RING_WORDS`]):
    /// segment `j` is the low `n ≤ 64` bits of `v` (no bit at or above `n`
    /// set), laid in the order: every lane's segment 0, lane 0 first, then
    /// every lane's segment 1, and so on. Copies out the words this
    /// completes.
    ///
    /// # Safety
    /// The ring is this warp's; the stream stays inside the region.
    #[inline(always)]
    pub unsafe fn step<W: Lanes, S: Shared + Async, M: Mem, const N: usize>(
        &mut self,
        w: &W,
        s: &S,
        m: &M,
        segs: [(u64, u32); N],
    ) {
        const { assert!(N >= 1 && 64 * N as u32 + 4 <= RING_WORDS) };
        // Q: how does one scan give two segments' offsets?
        // A: the widths are packed as n0 + 2^16 n1 (each sum stays below
        // 2^16: 32 segments of at most 64 bits), so the low half of the
        // scan is the first segments' and the high half the second's. A
        // third segment takes a scan of its own; the two scans do not
        // depend on each other.
        let mut pos = self.pos;
        let mut j = 0;
        while j < N {
            let (v0, n0) = segs[j];
            let (v1, n1) = if j + 1 < N { segs[j + 1] } else { (0, 0) };
            let packed = n0 | n1 << 16;
            let incl = inclusive_scan(w, packed);
            let excl = incl - packed;
            let tot = w.shfl_idx(incl, 31);
            let total0 = tot & 0xffff;
            // SAFETY: (both) the ring is this warp's; the step's words stay
            // within RING_WORDS − 4 of `next` (see RING_WORDS).
            unsafe {
                self.lay(s, pos + (excl & 0xffff), v0, n0);
                if j + 1 < N {
                    self.lay(s, pos + total0 + (excl >> 16), v1, n1);
                }
            }
            pos += total0 + (tot >> 16);
            j += 2;
        }
        self.pos = pos;
        s.sync_warp();
        // SAFETY: the words below pos / 32 are complete.
        unsafe { self.copy_out(w, s, m, self.pos / 128) };
    }

    /// Copy out the 4-word groups from `next`'s up to (not including)
    /// `end`, zeroing their slots, then meet the warp.
    ///
    /// # Safety
    /// The groups' words are complete; the region as the type says.
    #[inline(always)]
    unsafe fn copy_out<W: Lanes, S: Shared + Async, M: Mem>(
        &mut self,
        w: &W,
        s: &S,
        m: &M,
        end: u32,
    ) {
        let mut g = self.next / 4 + w.lane();
        while g < end {
            let k = 4 * g;
            let slot = self.slot(k);
            // SAFETY: (this block) the group's slots are the ring's
            // (RING_WORDS is a multiple of 4, so they are contiguous and
            // 16-aligned); its words overlap the region or are skipped.
            unsafe {
                let v = s.lds_v4(slot);
                s.sts_v4(slot, [0; 4]);
                if k >= self.own && 32 * k >= self.lo && 32 * (k + 4) <= self.hi {
                    m.st_v4(self.a0 + 16 * g as u64, v);
                } else {
                    // A group at the region's ends: each of its words
                    // inside the region is OR-ed (the memory is zeroed, and
                    // a neighbour or the caller may hold bits of it).
                    let mut i = 0;
                    while i < 4 {
                        let ki = k + i;
                        if ki >= self.first && 32 * ki < self.hi && 32 * ki + 32 > self.lo {
                            m.or_u32(self.a0 + 4 * ki as u64, v[i as usize]);
                        }
                        i += 1;
                    }
                }
            }
            g += 32;
        }
        if end > self.next / 4 {
            self.next = 4 * end;
        }
        s.sync_warp();
    }

    /// Copy out the rest of the stream (its last word's padding bits are
    /// zero), leaving the ring zeroed for the next stream.
    ///
    /// # Safety
    /// As [`RingWriter::step`].
    #[inline(always)]
    pub unsafe fn finish<W: Lanes, S: Shared + Async, M: Mem>(&mut self, w: &W, s: &S, m: &M) {
        // SAFETY: every word up to the stream's end is complete now.
        unsafe { self.copy_out(w, s, m, self.pos.div_ceil(128)) }
    }
}
