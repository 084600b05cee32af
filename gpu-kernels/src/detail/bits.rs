//! Bit-layout arithmetic of one encoded tensor (`docs/FORMAT.md`, "Tensor
//! encoding").
//!
//! A tensor of `len` bytes is cut into chunks of `chunk` bytes (1, 2, 4 or 8);
//! the last chunk may be shorter. A chunk is read as a little-endian integer of
//! `8 * bytes` bits. The codebook gives each chunk position a mask `m` (the
//! invariant bits) and a bit value `b` (`b & !m == 0`). The *free* bits of a
//! chunk are `f = !m & width_mask`.
//!
//! The encoded tensor is a bit stream, least significant bit of byte 0 first:
//! `K` participation bits (one per chunk), then for every chunk in order either
//! `pext(x, f)` (`popcount(f)` bits, when `x & m == b`) or all `width` bits of
//! `x`. Every function here is plain integer arithmetic shared by the CPU codec
//! and the kernels.

/// Lanes in a warp.
pub const WARP: u32 = 32;

/// Number of chunks in a tensor of `len` bytes.
#[inline(always)]
pub const fn chunk_count(len: u64, chunk: u32) -> u64 {
    len.div_ceil(chunk as u64)
}

/// Width in bits of chunk `j` of a tensor of `len` bytes (`j < chunk_count`).
#[inline(always)]
pub const fn chunk_width(len: u64, chunk: u32, j: u64) -> u32 {
    let rest = len - j * chunk as u64;
    if rest < chunk as u64 {
        (rest as u32) * 8
    } else {
        chunk * 8
    }
}

/// The low `bits` bits set (`bits <= 64`).
#[inline(always)]
pub const fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The low `n` bits set, `n ≤ 32`.
///
/// Q: why not `low_mask(n) as u32`?
/// A: the 64-bit form costs four instructions on the GPU (a shift, a NOT, a
/// compare and a select for `n = 64`). PTX defines a 32-bit right shift by 32
/// or more as 0, so `0xffffffff >> (32 - n)` is the whole mask in two; Rust
/// has no shift with that meaning, hence `arch::low_mask32`, one line of
/// PTX, on the GPU.
#[inline(always)]
pub fn low_mask32(n: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        crate::arch::low_mask32(n)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        if n >= 32 { u32::MAX } else { (1u32 << n) - 1 }
    }
}

/// The low 32 bits of `(hi:lo) >> (n mod 32)`.
#[inline(always)]
pub fn funnel_r32(lo: u32, hi: u32, n: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        crate::arch::funnel_r32(lo, hi, n)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        (((hi as u64) << 32 | lo as u64) >> (n & 31)) as u32
    }
}

/// `v << (n mod 32)`.
#[inline(always)]
pub fn shl_wrap32(v: u32, n: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        crate::arch::shl_wrap32(v, n)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        v << (n & 31)
    }
}

/// Bytes `[0, k)` of `a` and bytes `[k, 4)` of `b`, for `k` = 1, 2 or 3.
///
/// Q: why a function for a mask and a union?
/// A: with both masks constants, the GPU compiler emits two ANDs and an OR
/// (it folds only one immediate into a three-input logic operation); a
/// byte permute is one instruction.
#[inline(always)]
pub fn merge_bytes(a: u32, b: u32, k: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        // Bytes 0..k of `a`, then `b`'s own (selector nibble i: byte i's
        // source, 0–3 from `a`, 4–7 from `b`).
        let sel = match k {
            1 => 0x7650,
            2 => 0x7610,
            _ => 0x7210,
        };
        crate::arch::prmt(a, b, sel)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let keep = (1u32 << (8 * k)) - 1;
        (a & keep) | (b & !keep)
    }
}

/// Bytes `[0, k)` of `a`, then `b`'s low bytes from byte `k` on (`b`
/// shifted left by `k` bytes), for `k` = 1, 2 or 3: one byte permute, where
/// the shift, the mask and the union are three instructions.
#[inline(always)]
pub fn place_bytes(a: u32, b: u32, k: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        // Bytes 0..k of `a`, then `b`'s from its byte 0.
        let sel = match k {
            1 => 0x6540,
            2 => 0x5410,
            _ => 0x4210,
        };
        crate::arch::prmt(a, b, sel)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let keep = (1u32 << (8 * k)) - 1;
        (a & keep) | (b << (8 * k))
    }
}

/// Payload bits a chunk contributes: its free bits when it matches the
/// codebook, all of its bits otherwise.
#[inline(always)]
pub const fn payload_bits(matches: bool, width: u32, free: u64) -> u32 {
    if matches { free.count_ones() } else { width }
}

/// Does chunk value `x` match the codebook's `(mask, bitval)`?
#[inline(always)]
pub const fn matches(x: u64, mask: u64, bitval: u64) -> bool {
    x & mask == bitval
}

/// Encoded size in bytes of a tensor with `chunks` participation bits and
/// `payload` payload bits. (The tensor is stored encoded only when this is
/// strictly smaller than its raw length.)
#[inline(always)]
pub const fn encoded_bytes(chunks: u64, payload: u64) -> u64 {
    (chunks + payload).div_ceil(8)
}

/// Number of move-mask steps for a chunk of `chunk` bytes: `log2(8 * chunk)`.
#[inline(always)]
pub const fn move_steps(chunk: u32) -> u32 {
    (chunk * 8).trailing_zeros()
}

/// Move masks for [`compress`] and [`expand`] with the free-bit mask `free`.
///
/// Q: why not a bit-by-bit loop, or a loop over runs of free bits?
/// A: both cost time proportional to how scattered the free bits are, and
/// lanes of a warp with different masks would diverge. The masks depend only
/// on the codebook, so they are computed once per chunk position (on the host)
/// and every compress or expand is then `steps` branch-free shift/select
/// rounds (6 for 64-bit chunks), the same for every lane. This is the
/// parallel-suffix method of Hacker's Delight §7-4/7-5.
///
/// Entries past `steps` are zero.
pub const fn move_masks(free: u64, steps: u32) -> [u64; 6] {
    let mut out = [0u64; 6];
    let mut m = free;
    // Bit i of `mk` is set when the number of zero bits of `free` to the right
    // of position i is odd at the current step.
    let mut mk = !free << 1;
    let mut i = 0;
    while i < steps {
        let mut mp = mk ^ (mk << 1);
        mp ^= mp << 2;
        mp ^= mp << 4;
        mp ^= mp << 8;
        mp ^= mp << 16;
        mp ^= mp << 32;
        let mv = mp & m;
        out[i as usize] = mv;
        m = (m ^ mv) | (mv >> (1u32 << i));
        mk &= !mp;
        i += 1;
    }
    out
}

/// `pext`: gather the bits of `x` at the set positions of `free` into the low
/// bits of the result, lowest position first.
#[inline(always)]
pub const fn compress(x: u64, free: u64, mv: &[u64; 6], steps: u32) -> u64 {
    // Q: why loop over all six rounds and skip the late ones?
    // A: a loop bounded by the runtime `steps` indexes `mv` with a variable,
    // which puts the array in local memory on the GPU; a constant trip count
    // unrolls to constant indices (registers) and predicated rounds.
    let mut x = x & free;
    let mut i = 0;
    while i < 6 {
        if i < steps {
            let t = x & mv[i as usize];
            x = (x ^ t) | (t >> (1u32 << i));
        }
        i += 1;
    }
    x
}

/// `pdep`: scatter the low `popcount(free)` bits of `x` to the set positions
/// of `free`, lowest first. Inverse of [`compress`] on those bits.
#[inline(always)]
pub const fn expand(x: u64, free: u64, mv: &[u64; 6], steps: u32) -> u64 {
    // Constant trip count, as in `compress`.
    let mut x = x;
    let mut i = 6;
    while i > 0 {
        i -= 1;
        if i < steps {
            let m = mv[i as usize];
            x = (x & !m) | ((x << (1u32 << i)) & m);
        }
    }
    x & free
}

/// 32-bit [`compress`] for chunks of at most 4 bytes (`steps <= 5`).
///
/// Q: why a separate 32-bit path?
/// A: 64-bit shifts and logic cost two instructions each on the GPU; chunks
/// of 1, 2 and 4 bytes never need the upper half.
#[inline(always)]
pub const fn compress32(x: u32, free: u32, mv: &[u32; 5], steps: u32) -> u32 {
    let mut x = x & free;
    let mut i = 0;
    while i < 5 {
        if i < steps {
            let t = x & mv[i as usize];
            x = (x ^ t) | (t >> (1u32 << i));
        }
        i += 1;
    }
    x
}

/// 32-bit [`expand`] for chunks of at most 4 bytes (`steps <= 5`).
#[inline(always)]
pub const fn expand32(x: u32, free: u32, mv: &[u32; 5], steps: u32) -> u32 {
    let mut x = x;
    let mut i = 5;
    while i > 0 {
        i -= 1;
        if i < steps {
            let m = mv[i as usize];
            x = (x & !m) | ((x << (1u32 << i)) & m);
        }
    }
    x & free
}

/// Narrow 64-bit move masks to the 32-bit form (valid when `free < 2^32`).
#[inline(always)]
pub const fn move_masks32(mv: &[u64; 6]) -> [u32; 5] {
    [
        mv[0] as u32,
        mv[1] as u32,
        mv[2] as u32,
        mv[3] as u32,
        mv[4] as u32,
    ]
}

/// Read `n <= 57` bits starting at bit `pos` of a little-endian bit stream
/// held in `bytes`, through an unaligned 8-byte window. Bytes past the end of
/// `bytes` read as zero.
#[inline(always)]
pub fn read_bits_short(bytes: &[u8], pos: u64, n: u32) -> u64 {
    let byte = (pos / 8) as usize;
    let shift = (pos % 8) as u32;
    let mut w = [0u8; 8];
    let avail = bytes.len().saturating_sub(byte).min(8);
    if avail > 0 {
        w[..avail].copy_from_slice(&bytes[byte..byte + avail]);
    }
    (u64::from_le_bytes(w) >> shift) & low_mask(n)
}

/// Read `n <= 64` bits starting at bit `pos` of a little-endian bit stream.
/// Bytes past the end of `bytes` read as zero.
#[inline(always)]
pub fn read_bits(bytes: &[u8], pos: u64, n: u32) -> u64 {
    if n <= 32 {
        read_bits_short(bytes, pos, n)
    } else {
        let lo = read_bits_short(bytes, pos, 32);
        let hi = read_bits_short(bytes, pos + 32, n - 32);
        lo | (hi << 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference pext/pdep, one bit at a time.
    fn pext_ref(x: u64, m: u64) -> u64 {
        let (mut out, mut k) = (0u64, 0);
        for i in 0..64 {
            if m >> i & 1 == 1 {
                out |= (x >> i & 1) << k;
                k += 1;
            }
        }
        out
    }
    fn pdep_ref(x: u64, m: u64) -> u64 {
        let (mut out, mut k) = (0u64, 0);
        for i in 0..64 {
            if m >> i & 1 == 1 {
                out |= (x >> k & 1) << i;
                k += 1;
            }
        }
        out
    }

    /// xorshift64*, enough for test vectors without a dependency.
    fn rng(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[test]
    fn compress_expand_match_bitwise_reference_for_every_width() {
        let mut s = 0x1234_5678_9abc_def1u64;
        for chunk in [1u32, 2, 4, 8] {
            let steps = move_steps(chunk);
            for case in 0..4000 {
                let width = chunk * 8;
                // Mix dense, sparse, contiguous and alternating masks.
                let raw = match case % 4 {
                    0 => rng(&mut s),
                    1 => rng(&mut s) & rng(&mut s),
                    2 => low_mask((rng(&mut s) % 65) as u32) << (rng(&mut s) % 8),
                    _ => 0xAAAA_AAAA_AAAA_AAAA ^ (rng(&mut s) & rng(&mut s) & rng(&mut s)),
                };
                let free = raw & low_mask(width);
                let x = rng(&mut s) & low_mask(width);
                let mv = move_masks(free, steps);
                let c = compress(x, free, &mv, steps);
                assert_eq!(
                    c,
                    pext_ref(x, free),
                    "chunk {chunk} free {free:#x} x {x:#x}"
                );
                let y = rng(&mut s) & low_mask(free.count_ones());
                assert_eq!(expand(y, free, &mv, steps), pdep_ref(y, free));
                assert_eq!(expand(c, free, &mv, steps), x & free);
                if chunk <= 4 {
                    let mv32 = move_masks32(&mv);
                    let (x32, f32_) = (x as u32, free as u32);
                    assert_eq!(compress32(x32, f32_, &mv32, steps) as u64, c);
                    assert_eq!(
                        expand32(y as u32, f32_, &mv32, steps) as u64,
                        pdep_ref(y, free)
                    );
                }
            }
        }
    }

    #[test]
    fn move_masks_past_steps_are_zero() {
        let mv = move_masks(0b1010_0110, move_steps(1));
        assert_eq!(&mv[3..], &[0, 0, 0]);
    }

    #[test]
    fn chunk_geometry_handles_ragged_tails() {
        assert_eq!(chunk_count(10, 4), 3);
        assert_eq!(chunk_width(10, 4, 0), 32);
        assert_eq!(chunk_width(10, 4, 2), 16);
        assert_eq!(chunk_count(7, 8), 1);
        assert_eq!(chunk_width(7, 8, 0), 56);
        assert_eq!(chunk_count(1, 1), 1);
        assert_eq!(encoded_bytes(3, 6), 2);
        assert_eq!(encoded_bytes(3, 5), 1);
    }

    #[test]
    fn read_bits_crosses_bytes_and_zero_fills() {
        let b = [0b1011_0001u8, 0xff, 0x01];
        assert_eq!(read_bits(&b, 4, 4), 0b1011);
        assert_eq!(read_bits(&b, 6, 6), 0b11_1110);
        assert_eq!(read_bits(&b, 16, 8), 0x01);
        assert_eq!(read_bits(&b, 20, 40), 0); // past the end reads zeros
        assert_eq!(read_bits(&[0xffu8; 16], 3, 64), u64::MAX);
    }
}
