//! The decoder's per-chunk codebook table and the lane arithmetic of one
//! decode step, shared by the GPU kernels and their host emulation.
//!
//! The table is built once per codebook on the host. It is a structure of
//! arrays: field `f` of every chunk position `k`, `C` bytes each,
//! little-endian, at byte `f · KP · C + k · C`, where `KP` is the number of
//! chunks rounded up to a multiple of 64. The fields are the chunk's mask
//! `m`, its bit value `b`, and the `steps = log2(8C)` move masks of its free
//! bits `f = ~m` (within the chunk's width):
//!
//! | chunk C | fields | table bytes per tensor byte |
//! | --- | --- | --- |
//! | 1 | `m, b, mv0..mv2` | 5 |
//! | 2 | `m, b, mv0..mv3` | 6 |
//! | 4 | `m, b, mv0..mv4` | 7 |
//! | 8 | `m, b, mv0..mv5` | 8 |
//!
//! Q: why a structure of arrays?
//! A: a lane decodes the `8 / C` consecutive chunks that make 8 output
//! bytes, so each field of all its chunks is one aligned 8-byte load, and the
//! 32 lanes of a warp read 256 consecutive bytes: no shared-memory bank
//! conflicts (an array of 32-byte entries put 16 lanes on the same banks).
//! The free bits and the mask popcounts are derived, not stored.

use crate::bits;

/// Number of fields per chunk.
#[inline(always)]
pub const fn fields(chunk: u32) -> u32 {
    2 + steps(chunk)
}

/// Chunk positions per field array (chunks rounded up to 64).
#[inline(always)]
pub const fn padded_chunks(chunks: u64) -> u64 {
    chunks.div_ceil(64) * 64
}

/// Bytes of the table for `chunks` chunks of `chunk` bytes.
#[inline(always)]
pub const fn table_bytes(chunk: u32, chunks: u64) -> u64 {
    fields(chunk) as u64 * padded_chunks(chunks) * chunk as u64
}

/// Byte offset of field `f` of chunk `k`.
#[inline(always)]
pub const fn field_offset(chunk: u32, chunks: u64, f: u32, k: u64) -> u64 {
    (f as u64 * padded_chunks(chunks) + k) * chunk as u64
}

/// Write chunk `k`'s entry (mask `m`, bit value `b`, width in bits) into the
/// table `out` of [`table_bytes`] bytes.
pub fn write_entry(
    out: &mut [u8],
    chunk: u32,
    chunks: u64,
    k: u64,
    mask: u64,
    bitval: u64,
    width: u32,
) {
    let e = Entry::new(mask, bitval, width, chunk);
    let vals = [
        e.mask, e.bitval, e.mv[0], e.mv[1], e.mv[2], e.mv[3], e.mv[4], e.mv[5],
    ];
    let c = chunk as usize;
    for f in 0..fields(chunk) {
        let o = field_offset(chunk, chunks, f, k) as usize;
        out[o..o + c].copy_from_slice(&vals[f as usize].to_le_bytes()[..c]);
    }
}

/// Chunk `j`'s value of a field within a lane's 8-byte field word.
#[inline(always)]
pub const fn lane_part(word: u64, chunk: u32, j: u32) -> u64 {
    if chunk == 8 {
        word
    } else {
        (word >> (8 * chunk * j)) & bits::low_mask(8 * chunk)
    }
}

/// Entry of one chunk from its mask, bit value, width and move masks.
#[inline(always)]
pub const fn entry_from(mask: u64, bitval: u64, width: u32, mv: [u64; 6]) -> Entry {
    Entry {
        mask,
        bitval,
        free: !mask & bits::low_mask(width),
        mv,
    }
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

/// Chunks one lane decodes per step: every lane produces 8 output bytes.
///
/// Q: why several chunks per lane?
/// A: the warp scan (five dependent shuffles) and the bit-window read are
/// paid once per lane per step instead of once per chunk: for 1-byte chunks
/// eight times fewer scans. A lane's payload bits are at most 64, so one
/// 64-bit window holds them all, and its 8-byte output is one store.
#[inline(always)]
pub const fn chunks_per_lane(chunk: u32) -> u32 {
    8 / chunk
}

/// Payload width of chunk `j` of a lane: its participation bit (bit `j` of
/// `p`), its mask (from the lane's mask word) and its width (`8C` bits, or
/// `last_width` for the tensor's last chunk, index `last` in the lane);
/// zero past the lane's `n` valid chunks.
#[inline(always)]
pub const fn lane_width(
    c: u32,
    n: u32,
    p: u32,
    masks: u64,
    last: u32,
    last_width: u32,
    j: u32,
) -> u32 {
    if j >= n {
        return 0;
    }
    let full = if j == last { last_width } else { c * 8 };
    let saved = lane_part(masks, c, j).count_ones();
    if (p >> j) & 1 == 1 {
        full - saved
    } else {
        full
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

    fn read_field(t: &[u8], c: u32, k_total: u64, f: u32, k: u64) -> u64 {
        let o = field_offset(c, k_total, f, k) as usize;
        let mut b = [0u8; 8];
        b[..c as usize].copy_from_slice(&t[o..o + c as usize]);
        u64::from_le_bytes(b)
    }

    fn check<const C: u32>(next: &mut impl FnMut() -> u64) {
        let k_total = 70u64;
        let mut table = vec![0u8; table_bytes(C, k_total) as usize];
        let mut expect = Vec::new();
        for k in 0..k_total {
            let width = if k == k_total - 1 {
                (C * 8).saturating_sub(8).max(8)
            } else {
                C * 8
            };
            let mask = next() & bits::low_mask(width);
            let x = next() & bits::low_mask(width);
            let bitval = x & mask; // a chunk that matches
            write_entry(&mut table, C, k_total, k, mask, bitval, width);
            expect.push((mask, bitval, width, x));
        }
        for (k, &(mask, bitval, width, x)) in expect.iter().enumerate() {
            let k = k as u64;
            let mv: [u64; 6] = core::array::from_fn(|i| {
                if (i as u32) < steps(C) {
                    read_field(&table, C, k_total, 2 + i as u32, k)
                } else {
                    0
                }
            });
            let e = entry_from(
                read_field(&table, C, k_total, 0, k),
                read_field(&table, C, k_total, 1, k),
                width,
                mv,
            );
            assert_eq!(e, Entry::new(mask, bitval, width, C), "C={C} k={k}");
            let payload = bits::compress(x, e.free, &e.mv, steps(C));
            assert_eq!(decode_entry::<C>(&e, true, payload), x);
            assert_eq!(decode_entry::<C>(&e, false, x), x);
            assert_eq!(payload_width(&e, true), e.free.count_ones());
            assert_eq!(payload_width(&e, false), width);
        }
        // A lane's 8-byte field word holds its 8 / C chunks in order.
        let cpl = chunks_per_lane(C) as u64;
        let o = field_offset(C, k_total, 0, cpl) as usize;
        let word = u64::from_le_bytes(table[o..o + 8].try_into().unwrap());
        for j in 0..cpl {
            assert_eq!(lane_part(word, C, j as u32), expect[(cpl + j) as usize].0);
        }
    }

    #[test]
    fn table_round_trips_and_decode_inverts_compress() {
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
    fn lane_widths_follow_participation_and_tail() {
        // Four 2-byte chunks, the last a 1-byte tail; chunks 0 and 2 match,
        // with 5 and 3 invariant bits.
        let masks = 0x0000_0007_0000_001fu64;
        let w: [u32; 4] = core::array::from_fn(|j| lane_width(2, 4, 0b0101, masks, 3, 8, j as u32));
        assert_eq!(w, [11, 16, 13, 8]);
        // Fewer valid chunks than the lane's share.
        assert_eq!(lane_width(2, 2, 0b0101, masks, 3, 8, 2), 0);
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
