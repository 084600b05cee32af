//! Lane-word arithmetic of the fit and the size query: the bits one 8-byte
//! word saves or loses under a codebook word, its participation bits, and a
//! tensor's stored length.

/// The top bit of every lane of `m` that is not zero, lanes marked by
/// their top bits in `hi` (`0x8080_8080`: bytes; `0x8000_8000`: 16-bit
/// lanes; `0x8000_0000`: the whole word). `(m & lo) + lo` with `lo = !hi`
/// carries into a lane's top bit when its low bits are not all zero, and
/// cannot carry out of the lane.
#[inline(always)]
const fn nonzero_lanes(m: u32, hi: u32) -> u32 {
    let lo = !hi;
    (((m & lo) + lo) | m) & hi
}

/// `0x80` in every byte of the 4-byte `m` that is not zero.
#[inline(always)]
const fn nonzero_bytes(m: u32) -> u32 {
    nonzero_lanes(m, 0x8080_8080)
}

/// Bits one 8-byte word of a tensor saves under one codebook word, for chunk
/// sizes 1, 2, 4, 8 (index `log2 C`): the mask bits of the chunks that
/// match. `v` holds the codebook's bit values (any value outside `mask` is
/// ignored), `mask` its invariant bits; past the tensor's end both the word
/// and the mask are zero, so a tail chunk matches exactly when its real bytes
/// do. The same rule as the CPU fit's `row_saved_bits`, in 32-bit halves.
#[inline(always)]
pub const fn word_saved(x: u64, v: u64, mask: u64) -> [u32; 4] {
    let all = mask.count_ones();
    let lost = word_lost(x, v, mask);
    [all - lost[0], all - lost[1], all - lost[2], all - lost[3]]
}

/// The mask bits of one 8-byte word that its mismatching chunks do not
/// save, for chunk sizes 1, 2, 4, 8 (index `log2 C`): `popcount(mask)`
/// less [`word_saved`]. All zero when the word matches (`(x ^ v) & mask`
/// is 0).
#[inline(always)]
pub const fn word_lost(x: u64, v: u64, mask: u64) -> [u32; 4] {
    let d = (x ^ v) & mask;
    let (dl, dh) = (d as u32, (d >> 32) as u32);
    let (kl, kh) = (mask as u32, (mask >> 32) as u32);
    // Every byte of a mismatching 1-byte (b1) or 2-byte (b2) chunk set.
    let b1l = (nonzero_bytes(dl) >> 7) * 0xff;
    let b1h = (nonzero_bytes(dh) >> 7) * 0xff;
    let b2l = b1l | ((b1l >> 8) & 0x00ff_00ff) | ((b1l << 8) & 0xff00_ff00);
    let b2h = b1h | ((b1h >> 8) & 0x00ff_00ff) | ((b1h << 8) & 0xff00_ff00);
    let (pl, ph) = (kl.count_ones(), kh.count_ones());
    let l4 = if dl != 0 { pl } else { 0 } + if dh != 0 { ph } else { 0 };
    [
        (kl & b1l).count_ones() + (kh & b1h).count_ones(),
        (kl & b2l).count_ones() + (kh & b2h).count_ones(),
        l4,
        if d != 0 { pl + ph } else { 0 },
    ]
}

/// Participation bits of the `8 / C` chunks of one 8-byte word (bit `c` for
/// the word's chunk `c`): 1 when no bit of the chunk has a mismatching
/// invariant bit.
///
/// Q: how is a chunk tested without a loop over its bytes?
/// A: `nonzero_lanes` on each 32-bit half, with `C`-byte lanes, gives
/// each chunk's verdict as one bit; the word's are gathered with a few
/// shifts.
#[inline(always)]
pub const fn word_participation<const C: u32>(x: u64, v: u64, mask: u64) -> u32 {
    let d = (x ^ v) & mask;
    if C == 8 {
        return (d == 0) as u32;
    }
    let hi: u32 = if C == 1 {
        0x8080_8080
    } else if C == 2 {
        0x8000_8000
    } else {
        0x8000_0000
    };
    let nl = nonzero_lanes(d as u32, hi);
    let nh = nonzero_lanes((d >> 32) as u32, hi);
    // Bit c: chunk c has a mismatch.
    let bad = if C == 1 {
        ((nl >> 7) | (nl >> 14) | (nl >> 21) | (nl >> 28)) & 0xf
            | (((nh >> 7) | (nh >> 14) | (nh >> 21) | (nh >> 28)) & 0xf) << 4
    } else if C == 2 {
        (nl >> 15) & 1 | (nl >> 30) & 2 | (nh >> 13) & 4 | (nh >> 28) & 8
    } else {
        nl >> 31 | (nh >> 30) & 2
    };
    !bad & ((1 << (8 / C)) - 1)
}

/// Stored length of a tensor of `len` bytes and `chunks` chunks that saves
/// `saved` bits: `min(E, L)` with `E = ⌈(K + 8L − saved) / 8⌉`.
#[inline(always)]
pub const fn stored_len(len: u64, chunks: u64, saved: u64) -> u64 {
    let e = (chunks + 8 * len - saved).div_ceil(8);
    if e < len { e } else { len }
}

#[cfg(test)]
mod tests {
    use super::word_participation;

    /// Chunk by chunk, as FORMAT.md §2 states it.
    fn reference<const C: u32>(x: u64, v: u64, mask: u64) -> u32 {
        let w = 8 * C;
        let lane = if C == 8 { u64::MAX } else { (1u64 << w) - 1 };
        (0..8 / C)
            .filter(|&c| ((x ^ v) & mask) >> (w * c) & lane == 0)
            .fold(0, |p, c| p | 1 << c)
    }

    fn check(x: u64, v: u64, mask: u64) {
        assert_eq!(
            word_participation::<1>(x, v, mask),
            reference::<1>(x, v, mask)
        );
        assert_eq!(
            word_participation::<2>(x, v, mask),
            reference::<2>(x, v, mask)
        );
        assert_eq!(
            word_participation::<4>(x, v, mask),
            reference::<4>(x, v, mask)
        );
        assert_eq!(
            word_participation::<8>(x, v, mask),
            reference::<8>(x, v, mask)
        );
    }

    #[test]
    fn participation_bits_equal_a_chunk_by_chunk_test() {
        // One mismatching bit at every place, in a full and a sparse mask,
        // and mismatches in the top bits of every lane (the carry's edge).
        for b in 0..64 {
            check(1 << b, 0, u64::MAX);
            check(1 << b, 0, 0x8000_8000_8080_0080);
            check(!(1u64 << b), u64::MAX, u64::MAX);
        }
        check(0x8080_8080_8080_8080, 0, u64::MAX);
        check(0x7f7f_7fff_7fff_ffff, 0, u64::MAX);
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..20000 {
            let (x, v, m) = (next(), next(), next());
            // Sparse differences, so that chunks match often.
            check(v ^ (x & next() & next() & next()), v, m);
            check(x, v, m & next() & next());
        }
    }
}
