//! The decoder's per-chunk codebook table and the lane arithmetic of one
//! decode step, shared by the GPU kernel and its host emulation.
//!
//! One entry per chunk position `k` of a tensor, built once per codebook on
//! the host: the chunk's mask `m`, bit value `b`, free bits `f` and the
//! [`crate::bits::move_masks`] of `f`, each field `8·C` bits wide (32 bits for
//! chunks of 1, 2 or 4 bytes):
//!
//! | chunk C | field | steps | entry bytes |
//! | --- | --- | --- | --- |
//! | 1, 2, 4 | u32 | 3, 4, 5 | 32 (`m, b, f, mv0..mv4`) |
//! | 8 | u64 | 6 | 72 (`m, b, f, mv0..mv5`) |
//!
//! Q: why not 1- or 2-byte fields for small chunks?
//! A: one 32-byte entry is two 16-byte shared-memory loads; narrower fields
//! would need shifts and masks per field on the critical path. The table is
//! 8·L bytes for C ≤ 4 (9·L for C = 8): it fits in shared memory for tensors
//! up to ~20 KB, and is read through L1 beyond that.

use crate::bits;

/// Bytes of one table entry for chunks of `chunk` bytes.
#[inline(always)]
pub const fn entry_bytes(chunk: u32) -> u32 {
    if chunk == 8 { 72 } else { 32 }
}

/// Move-mask steps for chunks of `chunk` bytes.
#[inline(always)]
pub const fn steps(chunk: u32) -> u32 {
    bits::move_steps(chunk)
}

/// A decoded table entry (fields widened to u64).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// Invariant bits.
    pub mask: u64,
    /// Their values.
    pub bitval: u64,
    /// Free (non-invariant) bits within the chunk's width.
    pub free: u64,
    /// Move masks of `free`.
    pub mv: [u64; 6],
}

impl Entry {
    /// The entry for a chunk with this mask, bit value and width in bits.
    pub const fn new(mask: u64, bitval: u64, width: u32, chunk: u32) -> Self {
        let free = !mask & bits::low_mask(width);
        Entry { mask, bitval, free, mv: bits::move_masks(free, steps(chunk)) }
    }

    /// Width of the chunk in bits (`mask | free` covers exactly the width).
    #[inline(always)]
    pub const fn width(&self) -> u32 {
        (self.mask | self.free).count_ones()
    }

    /// Serialise into `out` (exactly [`entry_bytes`] bytes), little-endian.
    pub fn write(&self, chunk: u32, out: &mut [u8]) {
        let fields = [self.mask, self.bitval, self.free, self.mv[0], self.mv[1], self.mv[2], self.mv[3], self.mv[4], self.mv[5]];
        if chunk == 8 {
            for (i, f) in fields.iter().enumerate() {
                out[i * 8..i * 8 + 8].copy_from_slice(&f.to_le_bytes());
            }
        } else {
            for (i, f) in fields.iter().take(8).enumerate() {
                out[i * 4..i * 4 + 4].copy_from_slice(&(*f as u32).to_le_bytes());
            }
        }
    }

    /// Read back an entry from its 32-bit words (`C ≤ 4`).
    #[inline(always)]
    pub const fn from_words32(w: &[u32; 8]) -> Self {
        Entry {
            mask: w[0] as u64,
            bitval: w[1] as u64,
            free: w[2] as u64,
            mv: [w[3] as u64, w[4] as u64, w[5] as u64, w[6] as u64, w[7] as u64, 0],
        }
    }
}

/// Payload bits of chunk with entry `e` given its participation bit.
#[inline(always)]
pub const fn payload_width(e: &Entry, participates: bool) -> u32 {
    bits::payload_bits(participates, e.width(), e.free)
}

/// Rebuild a chunk from its payload bits `v` (already masked to its width).
#[inline(always)]
pub const fn decode_chunk(e: &Entry, participates: bool, v: u64, chunk: u32) -> u64 {
    if participates { bits::expand(v, e.free, &e.mv, steps(chunk)) | e.bitval } else { v }
}

/// 32-bit [`decode_chunk`] for chunks of at most 4 bytes.
#[inline(always)]
pub const fn decode_chunk32(w: &[u32; 8], participates: bool, v: u32, chunk: u32) -> u32 {
    if participates {
        let mv = [w[3], w[4], w[5], w[6], w[7]];
        bits::expand32(v, w[2], &mv, steps(chunk)) | w[1]
    } else {
        v
    }
}

/// The `n ≤ 64` bits starting `shift < 32` bits into the little-endian
/// concatenation of three consecutive 32-bit words.
#[inline(always)]
pub const fn window64(w0: u32, w1: u32, w2: u32, shift: u32, n: u32) -> u64 {
    let lo = (w0 as u64) | ((w1 as u64) << 32);
    let v = if shift == 0 { lo } else { (lo >> shift) | ((w2 as u64) << (64 - shift)) };
    v & bits::low_mask(n)
}

/// The `n ≤ 32` bits starting `shift < 32` bits into two consecutive words.
#[inline(always)]
pub const fn window32(w0: u32, w1: u32, shift: u32, n: u32) -> u32 {
    let lo = (w0 as u64) | ((w1 as u64) << 32);
    ((lo >> shift) as u32) & (bits::low_mask(n) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_decode_inverts_compress() {
        let mut s = 0x5eed_u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for chunk in [1u32, 2, 4, 8] {
            for width in [chunk * 8, (chunk * 8).saturating_sub(8).max(8)] {
                for _ in 0..500 {
                    let mask = next() & bits::low_mask(width);
                    let x = next() & bits::low_mask(width);
                    let bitval = x & mask; // a chunk that matches
                    let e = Entry::new(mask, bitval, width, chunk);
                    assert_eq!(e.width(), width);
                    let mut buf = [0u8; 72];
                    e.write(chunk, &mut buf);
                    let payload = bits::compress(x, e.free, &e.mv, steps(chunk));
                    assert_eq!(decode_chunk(&e, true, payload, chunk), x);
                    assert_eq!(decode_chunk(&e, false, x, chunk), x);
                    assert_eq!(payload_width(&e, true), e.free.count_ones());
                    assert_eq!(payload_width(&e, false), width);
                    if chunk <= 4 {
                        let w: [u32; 8] = core::array::from_fn(|i| u32::from_le_bytes(buf[i * 4..i * 4 + 4].try_into().unwrap()));
                        assert_eq!(Entry::from_words32(&w), e);
                        assert_eq!(decode_chunk32(&w, true, payload as u32, chunk) as u64, x);
                    } else {
                        let f = |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
                        assert_eq!([f(0), f(1), f(2)], [e.mask, e.bitval, e.free]);
                        assert_eq!(f(8), e.mv[5]);
                    }
                }
            }
        }
    }

    #[test]
    fn windows_read_any_offset() {
        let bytes: [u8; 12] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
        let w: [u32; 3] = core::array::from_fn(|i| u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap()));
        for shift in 0..32 {
            for n in [1, 7, 31, 32, 33, 63, 64] {
                assert_eq!(window64(w[0], w[1], w[2], shift, n), bits::read_bits(&bytes, shift as u64, n));
                if n <= 32 {
                    assert_eq!(window32(w[0], w[1], shift, n) as u64, bits::read_bits(&bytes, shift as u64, n));
                }
            }
        }
    }
}
