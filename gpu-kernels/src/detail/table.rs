//! The decoder's per-chunk codebook table and the lane arithmetic of one
//! decode step, shared by the GPU kernels and their host emulation.
//!
//! One entry per chunk position `k` of a tensor, built once per codebook on
//! the host: the chunk's mask `m`, bit value `b`, free bits `f` and the
//! [`crate::detail::bits::move_masks`] of `f` (`steps = log2(8C)` of them), each field
//! `C` bytes wide, little-endian, padded to a power of two:
//!
//! | chunk C | fields | entry bytes |
//! | --- | --- | --- |
//! | 1 | `m, b, f, mv0..mv2` as u8 | 8 |
//! | 2 | `m, b, f, mv0..mv3` as u16 | 16 |
//! | 4 | `m, b, f, mv0..mv4` as u32 | 32 |
//! | 8 | `m, b, f, mv0..mv5` as u64 | 72 |
//!
//! After the entries comes one byte per chunk: the popcount of its mask
//! (the bits a matching chunk saves), which is all a lane needs to compute
//! payload widths and a tensor's encoded length.
//!
//! Q: why fields as wide as the chunk?
//! A: the table is then 8 bytes per tensor byte for C ≤ 4 (9 for C = 8) and
//! an entry is one or two aligned vector loads; it fits in shared memory for
//! tensors of a few KB and is read through L1 beyond that.

use crate::detail::bits;

/// Bytes of the table of a tensor of `chunks` chunks of `chunk` bytes: the
/// entries, one popcount byte per chunk, and 16 bytes of padding (a lane may
/// read a whole 8-byte group of popcounts past the last chunk), rounded up
/// to 16.
#[inline(always)]
pub const fn table_bytes(chunks: u32, chunk: u32) -> u32 {
    (chunks * entry_bytes(chunk) + chunks + 16).next_multiple_of(16)
}

/// Bytes of one table entry for chunks of `chunk` bytes.
#[inline(always)]
pub const fn entry_bytes(chunk: u32) -> u32 {
    match chunk {
        1 => 8,
        2 => 16,
        4 => 32,
        _ => 72,
    }
}

/// u32 words of one table entry.
#[inline(always)]
pub const fn entry_words(chunk: u32) -> u32 {
    entry_bytes(chunk) / 4
}

/// Move-mask steps for chunks of `chunk` bytes.
#[inline(always)]
pub const fn steps(chunk: u32) -> u32 {
    bits::move_steps(chunk)
}

/// A table entry (fields widened to u64).
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
        Entry {
            mask,
            bitval,
            free,
            mv: bits::move_masks(free, steps(chunk)),
        }
    }

    /// Width of the chunk in bits (`mask | free` covers exactly the width).
    #[inline(always)]
    pub const fn width(&self) -> u32 {
        (self.mask | self.free).count_ones()
    }

    /// Serialise into `out` (exactly [`entry_bytes`] bytes), little-endian.
    pub fn write(&self, chunk: u32, out: &mut [u8]) {
        let fields = [
            self.mask,
            self.bitval,
            self.free,
            self.mv[0],
            self.mv[1],
            self.mv[2],
            self.mv[3],
            self.mv[4],
            self.mv[5],
        ];
        let c = chunk as usize;
        out[..entry_bytes(chunk) as usize].fill(0);
        for (i, f) in fields.iter().take(3 + steps(chunk) as usize).enumerate() {
            out[i * c..(i + 1) * c].copy_from_slice(&f.to_le_bytes()[..c]);
        }
    }

    /// Read an entry back from its u32 words (as loaded by a kernel).
    #[inline(always)]
    pub const fn from_words<const C: u32>(w: &[u32; 18]) -> Self {
        Entry {
            mask: field::<C>(w, 0),
            bitval: field::<C>(w, 1),
            free: field::<C>(w, 2),
            mv: [
                field::<C>(w, 3),
                field::<C>(w, 4),
                field::<C>(w, 5),
                if 6 < 3 + steps(C) {
                    field::<C>(w, 6)
                } else {
                    0
                },
                if 7 < 3 + steps(C) {
                    field::<C>(w, 7)
                } else {
                    0
                },
                if 8 < 3 + steps(C) {
                    field::<C>(w, 8)
                } else {
                    0
                },
            ],
        }
    }
}

/// Field `i` (`C` bytes) of an entry held as u32 words.
#[inline(always)]
pub const fn field<const C: u32>(w: &[u32; 18], i: u32) -> u64 {
    let bit = i * C * 8;
    let word = (bit / 32) as usize;
    match C {
        8 => (w[word] as u64) | ((w[word + 1] as u64) << 32),
        4 => w[word] as u64,
        _ => ((w[word] >> (bit % 32)) as u64) & bits::low_mask(C * 8),
    }
}

/// Decode one chunk from its payload bits `v` (masked to its width): chunks
/// of at most 4 bytes with 32-bit arithmetic (64-bit logic costs two
/// instructions on the GPU), 8-byte chunks with 64-bit.
#[inline(always)]
pub const fn decode_entry<const C: u32>(e: &Entry, participates: bool, v: u64) -> u64 {
    if !participates {
        return v;
    }
    if C == 8 {
        bits::expand(v, e.free, &e.mv, steps(8)) | e.bitval
    } else {
        let mv = [
            e.mv[0] as u32,
            e.mv[1] as u32,
            e.mv[2] as u32,
            e.mv[3] as u32,
            e.mv[4] as u32,
        ];
        (bits::expand32(v as u32, e.free as u32, &mv, steps(C)) | e.bitval as u32) as u64
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
    if participates {
        bits::expand(v, e.free, &e.mv, steps(chunk)) | e.bitval
    } else {
        v
    }
}

/// The `n ≤ 64` bits starting `shift < 32` bits into the little-endian
/// concatenation of three consecutive 32-bit words.
#[inline(always)]
pub const fn window64(w0: u32, w1: u32, w2: u32, shift: u32, n: u32) -> u64 {
    let lo = (w0 as u64) | ((w1 as u64) << 32);
    let v = if shift == 0 {
        lo
    } else {
        (lo >> shift) | ((w2 as u64) << (64 - shift))
    };
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

    fn words(buf: &[u8]) -> [u32; 18] {
        core::array::from_fn(|i| {
            if i * 4 + 4 <= buf.len() {
                u32::from_le_bytes(buf[i * 4..i * 4 + 4].try_into().unwrap())
            } else {
                0
            }
        })
    }

    fn check<const C: u32>(next: &mut impl FnMut() -> u64) {
        for width in [C * 8, (C * 8).saturating_sub(8).max(8)] {
            for _ in 0..500 {
                let mask = next() & bits::low_mask(width);
                let x = next() & bits::low_mask(width);
                let bitval = x & mask; // a chunk that matches
                let e = Entry::new(mask, bitval, width, C);
                assert_eq!(e.width(), width);
                let mut buf = [0u8; 72];
                e.write(C, &mut buf);
                assert_eq!(Entry::from_words::<C>(&words(&buf)), e, "C={C}");
                let payload = bits::compress(x, e.free, &e.mv, steps(C));
                assert_eq!(decode_entry::<C>(&e, true, payload), x);
                assert_eq!(decode_entry::<C>(&e, false, x), x);
                assert_eq!(payload_width(&e, true), e.free.count_ones());
                assert_eq!(payload_width(&e, false), width);
            }
        }
    }

    #[test]
    fn entries_round_trip_and_decode_inverts_compress() {
        let mut s = 0x5eed_u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        check::<1>(&mut next);
        check::<2>(&mut next);
        check::<4>(&mut next);
        check::<8>(&mut next);
    }

    #[test]
    fn windows_read_any_offset() {
        let bytes: [u8; 12] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
        let w: [u32; 3] = core::array::from_fn(|i| {
            u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap())
        });
        for shift in 0..32 {
            for n in [1, 7, 31, 32, 33, 63, 64] {
                assert_eq!(
                    window64(w[0], w[1], w[2], shift, n),
                    bits::read_bits(&bytes, shift as u64, n)
                );
                if n <= 32 {
                    assert_eq!(
                        window32(w[0], w[1], shift, n) as u64,
                        bits::read_bits(&bytes, shift as u64, n)
                    );
                }
            }
        }
    }
}
