//! Positional popcount: for a stream of words, count how often each bit
//! position is set. This is the preprocessing counter of the IBP paper (§4.1):
//! one counter per bit position of the tensor, over all tensors.
//!
//! Q: why carry-save adders instead of `count[b] += (w >> b) & 1`?
//! A: the direct form costs two or three instructions per *bit*, about 20 per
//! byte. The accumulator keeps the counts bit-sliced: a 16-word block is
//! reduced by a Harley–Seal tree of carry-save adders (two 3-input logic ops
//! each, a single `lop3` on the GPU) into planes worth 1, 2, 4 and 8, and the
//! overflow (worth 16) is rippled into eight more planes. Only every 255
//! overflows are the planes unpacked into integer counts. That is under one
//! instruction per byte, so the GPU kernel stays bound by memory, not ALUs.
//!
//! The same accumulator serves the CPU counter (64-bit words) and the kernel
//! (32-bit words), so both produce identical counts by construction.
//!
//! [`count_rows`] is the kernel's body over [`Mem`]: the nvptx entry point
//! `ibp_count_bits` runs it on the GPU, and ibp's host tests run it on the
//! emulated machine (`ibp-kernel-emu`) against the CPU counter.

use crate::params::CountParams;
use crate::simt::Mem;

/// Carry-save adder: `(carry, sum)` of three bit-sliced one-bit inputs.
macro_rules! define_pospopcnt {
    ($name:ident, $word:ty, $bits:expr) => {
        /// Bit-sliced positional popcount accumulator over
        #[doc = concat!("`", stringify!($word), "` words.")]
        #[derive(Clone, Copy)]
        pub struct $name {
            ones: $word,
            twos: $word,
            fours: $word,
            eights: $word,
            /// Ripple counter of sixteens, bit-sliced: plane `p` is worth `16 << p`.
            high: [$word; 8],
            /// Number of sixteens rippled into `high` since the last flush (< 255).
            pending: u32,
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl $name {
            /// Bit positions per word.
            pub const BITS: usize = $bits;

            /// An empty accumulator.
            #[inline(always)]
            pub const fn new() -> Self {
                Self {
                    ones: 0,
                    twos: 0,
                    fours: 0,
                    eights: 0,
                    high: [0; 8],
                    pending: 0,
                }
            }

            #[inline(always)]
            const fn csa(a: $word, b: $word, c: $word) -> ($word, $word) {
                let u = a ^ b;
                ((a & b) | (u & c), u ^ c)
            }

            /// Ripple one word worth 16 into the high planes. Flushes through
            /// `sink(bit, count)` when the planes could overflow.
            #[inline(always)]
            fn push_sixteens(&mut self, mut c: $word, sink: &mut impl FnMut(usize, u64)) {
                let mut p = 0;
                while p < 8 {
                    let t = self.high[p] & c;
                    self.high[p] ^= c;
                    c = t;
                    p += 1;
                }
                self.pending += 1;
                if self.pending == 255 {
                    self.flush_high(sink);
                }
            }

            /// Send the high planes' counts to `sink` and clear them.
            #[inline(always)]
            fn flush_high(&mut self, sink: &mut impl FnMut(usize, u64)) {
                let mut b = 0;
                while b < $bits {
                    let mut v = 0u64;
                    let mut p = 0;
                    while p < 8 {
                        v |= ((self.high[p] >> b) as u64 & 1) << p;
                        p += 1;
                    }
                    if v != 0 {
                        sink(b, v << 4);
                    }
                    b += 1;
                }
                self.high = [0; 8];
                self.pending = 0;
            }

            /// Add one word.
            #[inline(always)]
            pub fn add(&mut self, w: $word, sink: &mut impl FnMut(usize, u64)) {
                let c1 = self.ones & w;
                self.ones ^= w;
                let c2 = self.twos & c1;
                self.twos ^= c1;
                let c3 = self.fours & c2;
                self.fours ^= c2;
                let c4 = self.eights & c3;
                self.eights ^= c3;
                if c4 != 0 {
                    self.push_sixteens(c4, sink);
                }
            }

            /// Add sixteen words through a Harley–Seal carry-save tree.
            #[inline(always)]
            pub fn add16(&mut self, x: &[$word; 16], sink: &mut impl FnMut(usize, u64)) {
                let (twos_a, ones) = Self::csa(self.ones, x[0], x[1]);
                let (twos_b, ones) = Self::csa(ones, x[2], x[3]);
                let (fours_a, twos) = Self::csa(self.twos, twos_a, twos_b);
                let (twos_a, ones) = Self::csa(ones, x[4], x[5]);
                let (twos_b, ones) = Self::csa(ones, x[6], x[7]);
                let (fours_b, twos) = Self::csa(twos, twos_a, twos_b);
                let (eights_a, fours) = Self::csa(self.fours, fours_a, fours_b);
                let (twos_a, ones) = Self::csa(ones, x[8], x[9]);
                let (twos_b, ones) = Self::csa(ones, x[10], x[11]);
                let (fours_a, twos) = Self::csa(twos, twos_a, twos_b);
                let (twos_a, ones) = Self::csa(ones, x[12], x[13]);
                let (twos_b, ones) = Self::csa(ones, x[14], x[15]);
                let (fours_b, twos) = Self::csa(twos, twos_a, twos_b);
                let (eights_b, fours) = Self::csa(fours, fours_a, fours_b);
                let (sixteens, eights) = Self::csa(self.eights, eights_a, eights_b);
                self.ones = ones;
                self.twos = twos;
                self.fours = fours;
                self.eights = eights;
                self.push_sixteens(sixteens, sink);
            }

            /// Send every count held to `sink(bit, count)` and reset.
            #[inline(always)]
            pub fn drain(&mut self, sink: &mut impl FnMut(usize, u64)) {
                self.flush_high(sink);
                let mut b = 0;
                while b < $bits {
                    let v = ((self.ones >> b) as u64 & 1)
                        | (((self.twos >> b) as u64 & 1) << 1)
                        | (((self.fours >> b) as u64 & 1) << 2)
                        | (((self.eights >> b) as u64 & 1) << 3);
                    if v != 0 {
                        sink(b, v);
                    }
                    b += 1;
                }
                self.ones = 0;
                self.twos = 0;
                self.fours = 0;
                self.eights = 0;
            }
        }
    };
}

define_pospopcnt!(PosPopcnt32, u32, 32);
define_pospopcnt!(PosPopcnt64, u64, 64);

/// The bit-counting kernel's body (paper §4.1), for thread `t` of a grid
/// of `threads`: adds, for every bit position of a row, how many of the
/// rows have it set into `counts[8 * row_bytes]` ([`CountParams`]). Every
/// thread of the grid runs it; together they count every row once.
///
/// Q: why "super-rows" rather than one thread per (row, 4-byte column)?
/// A: a row of 5732 bytes (Cora) or 1001 bytes starts at an address that is
/// not a multiple of 128, so a warp reading 128 bytes of one row straddles two
/// lines: twice the PCIe or DRAM transactions, and rows of odd length need
/// byte loads. Instead the body groups `g = 128 / gcd(L, 128)` rows into a
/// super-row of `g·L` bytes, a multiple of 128. Each thread owns one 4-byte
/// word *column* of the super-row and walks a strided subset of super-rows;
/// consecutive threads read consecutive words, so every warp load is one
/// aligned 128-byte line. A word may straddle two rows; that only changes
/// which tensor bit positions its 32 counters are credited to at the end.
///
/// It needs no lane of its warp (no shuffle), only memory, so `m` may be
/// the GPU (`hw::Hw`) or any host implementation of [`Mem`].
///
/// # Safety
/// `p.data` is readable for `rows * row_bytes` bytes and `p.counts` writable
/// for `8 * row_bytes` u64 counters (8-aligned), both addresses as `m`
/// takes them; `t < threads`.
#[inline(always)]
pub unsafe fn count_rows<M: Mem>(m: &M, p: &CountParams, t: u64, threads: u64) {
    if p.row_bytes == 0 || p.rows == 0 {
        return;
    }
    let l = p.row_bytes;
    let group = 128 / gcd(l, 128);
    let sr = SuperRows {
        m,
        data: p.data,
        counts: p.counts,
        row_bytes: l,
        bytes: group * l,
        full: div(p.rows, group),
        tail_bytes: (p.rows - div(p.rows, group) * group) * l,
        // Q: why keep a byte path?
        // A: word loads need a 4-aligned base; a caller may hand a view that
        // starts anywhere. The choice is uniform for the whole launch.
        aligned: p.data.is_multiple_of(4),
    };
    let cols = sr.bytes / 4;
    let count = sr.full + (sr.tail_bytes > 0) as u64;
    if threads >= cols {
        let groups = div(threads, cols);
        if t < groups * cols {
            let g = div(t, cols);
            // SAFETY: column and super-rows in bounds; forwarded contract.
            unsafe { sr.count_column(t - g * cols, g, groups, count) }
        }
    } else {
        let mut col = t;
        while col < cols {
            // SAFETY: as above.
            unsafe { sr.count_column(col, 0, 1, count) }
            col += threads;
        }
    }
}

/// Division that is 0 for a zero divisor, so no panic path reaches the PTX.
#[inline(always)]
fn div(a: u64, b: u64) -> u64 {
    a.checked_div(b).unwrap_or(0)
}

/// Greatest common divisor (`b` a power of two here, so this is short).
#[inline(always)]
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// The rows seen as `full` super-rows of `bytes` bytes, then a partial one of
/// `tail_bytes`.
struct SuperRows<'m, M> {
    m: &'m M,
    data: u64,
    counts: u64,
    row_bytes: u64,
    bytes: u64,
    full: u64,
    tail_bytes: u64,
    aligned: bool,
}

impl<M: Mem> SuperRows<'_, M> {
    /// Word `col` of a full super-row `s < full`.
    ///
    /// # Safety
    /// `s < full`, `col < bytes / 4`, and [`count_rows`]' contract holds.
    #[inline(always)]
    unsafe fn load_full(&self, s: u64, col: u64) -> u32 {
        let a = self.data + s * self.bytes + col * 4;
        if self.aligned {
            // SAFETY: 4-aligned (base and offset) and inside the data.
            unsafe { self.m.ld_u32(a) }
        } else {
            let mut w = 0u32;
            for k in 0..4u64 {
                // SAFETY: inside a full super-row.
                w |= unsafe { self.m.ld_u8(a + k) } << (8 * k);
            }
            w
        }
    }

    /// Word `col` of super-row `s` (full or the tail), zero past the end.
    ///
    /// # Safety
    /// `s <= full`, `col < bytes / 4`, and [`count_rows`]' contract holds.
    #[inline(always)]
    unsafe fn load(&self, s: u64, col: u64) -> u32 {
        let off = s * self.bytes + col * 4;
        let a = self.data + off;
        let end = self.full * self.bytes + self.tail_bytes;
        if self.aligned && off + 4 <= end {
            // SAFETY: 4-aligned (base and offset) and inside the data.
            unsafe { self.m.ld_u32(a) }
        } else {
            let mut w = 0u32;
            for k in 0..4u64 {
                if off + k < end {
                    // SAFETY: byte inside the data.
                    w |= unsafe { self.m.ld_u8(a + k) } << (8 * k);
                }
            }
            w
        }
    }

    /// Count column `col` over super-rows `s0, s0 + stride, …` below `count`.
    ///
    /// # Safety
    /// `col < bytes / 4`, `count <= full + 1`, and [`count_rows`]' contract
    /// holds.
    #[inline(always)]
    unsafe fn count_column(&self, col: u64, s0: u64, stride: u64, count: u64) {
        let mut acc = PosPopcnt32::new();
        // Tensor byte positions of this column's 4 bytes (fixed for every
        // super-row, since a super-row holds whole rows).
        let first = col * 4;
        let pos0 = first - div(first, self.row_bytes) * self.row_bytes;
        let (m, counts, l) = (self.m, self.counts, self.row_bytes);
        let mut sink = |b: usize, v: u64| {
            // A word can span several rows when rows are shorter than 4 bytes.
            let x = pos0 + (b / 8) as u64;
            let byte = x - div(x, l) * l;
            // SAFETY: byte < row_bytes, so the counter index < 8 * row_bytes.
            unsafe { m.add_u64(counts + (byte * 8 + (b % 8) as u64) * 8, v) }
        };
        // SAFETY: called below with s < full (the 16-word loop's
        // condition), and col in range.
        let ld = |s: u64| unsafe { self.load_full(s, col) };
        // SAFETY: called below with s < count <= full + 1, and col in range.
        let ld_any = |s: u64| unsafe { self.load(s, col) };
        let mut s = s0;
        // Q: why sixteen loads before any arithmetic?
        // A: they are independent, so each thread keeps sixteen requests in
        // flight; that is what hides DRAM and, above all, PCIe latency.
        while s + 15 * stride < self.full {
            // Written out so the words stay in registers (`from_fn`'s loop
            // left them in local memory).
            let d = stride;
            let x = [
                ld(s),
                ld(s + d),
                ld(s + 2 * d),
                ld(s + 3 * d),
                ld(s + 4 * d),
                ld(s + 5 * d),
                ld(s + 6 * d),
                ld(s + 7 * d),
                ld(s + 8 * d),
                ld(s + 9 * d),
                ld(s + 10 * d),
                ld(s + 11 * d),
                ld(s + 12 * d),
                ld(s + 13 * d),
                ld(s + 14 * d),
                ld(s + 15 * d),
            ];
            acc.add16(&x, &mut sink);
            s += 16 * d;
        }
        while s < count {
            acc.add(ld_any(s), &mut sink);
            s += stride;
        }
        acc.drain(&mut sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct(words: &[u64]) -> [u64; 64] {
        let mut c = [0u64; 64];
        for w in words {
            for (b, slot) in c.iter_mut().enumerate() {
                *slot += w >> b & 1;
            }
        }
        c
    }

    #[test]
    fn accumulator_equals_direct_count_across_flushes() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        // Long enough to flush the high planes several times (255 * 16 words).
        for (n, density) in [
            (0usize, 0u32),
            (1, 1),
            (17, 2),
            (4080 * 3 + 5, 1),
            (70_001, 3),
        ] {
            let words: Vec<u64> = (0..n)
                .map(|_| {
                    let mut w = u64::MAX;
                    for _ in 0..density {
                        s = s
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        w &= s ^ (s >> 29);
                    }
                    if density == 0 { 0 } else { w }
                })
                .collect();
            let want = direct(&words);

            // 64-bit words, mixing single adds and 16-word blocks.
            let mut got = [0u64; 64];
            let mut acc = PosPopcnt64::new();
            let mut sink = |b: usize, v: u64| got[b] += v;
            let mut it = words.chunks(16);
            for (i, block) in it.by_ref().enumerate() {
                if block.len() == 16 && i % 3 != 1 {
                    acc.add16(block.try_into().unwrap(), &mut sink);
                } else {
                    for &w in block {
                        acc.add(w, &mut sink);
                    }
                }
            }
            acc.drain(&mut sink);
            assert_eq!(got, want, "n={n}");

            // 32-bit halves.
            let mut got32 = [0u64; 64];
            let mut lo = PosPopcnt32::new();
            let mut hi = PosPopcnt32::new();
            for w in &words {
                lo.add(*w as u32, &mut |b, v| got32[b] += v);
                hi.add((*w >> 32) as u32, &mut |b, v| got32[b + 32] += v);
            }
            lo.drain(&mut |b, v| got32[b] += v);
            hi.drain(&mut |b, v| got32[b + 32] += v);
            assert_eq!(got32, want, "n={n} (32-bit)");
        }
    }
}
