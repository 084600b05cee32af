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
