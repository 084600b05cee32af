//! One lane word of a stored tensor: its shape (`LaneShape`), its
//! payload (the chunks' free bits, or whole chunks, laid end to end) and its
//! participation bits.

use super::rows::row_word;
use super::words::word_participation;
use crate::detail::bits;
use crate::detail::table::steps;
use crate::params::EncodeParams;
use crate::simt::{Lanes, Mem};

/// A tensor's shape as the encoder's lanes see it, in 32 bits (the GPU
/// compresses tensors of at most 2^28 bytes, the host's `MAX_ROW_BYTES`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneShape {
    /// 8-byte words, `⌈L / 8⌉`.
    pub words: u32,
    /// Chunks, `K = ⌈L / C⌉`.
    pub chunks: u32,
    /// Chunks of the last word.
    last_have: u32,
    /// Bits the tail chunk stored raw has fewer than a whole chunk
    /// (`C·K − L` bytes).
    cut: u32,
    /// Bytes from one field of the encoder book to the next, `8 · words`.
    field: u64,
}

impl LaneShape {
    /// The shape of `l`-byte tensors (`0 < l ≤ 2^28`) with chunks of `C`
    /// bytes.
    #[inline(always)]
    pub(crate) const fn new<const C: u32>(l: u64) -> Self {
        let l = l as u32;
        let words = l.div_ceil(8);
        let chunks = l.div_ceil(C);
        LaneShape {
            words,
            chunks,
            last_have: chunks - (words - 1) * (8 / C),
            cut: 8 * (chunks * C - l),
            field: 8 * words as u64,
        }
    }

    /// Chunks of word `q` inside the tensor.
    #[inline(always)]
    const fn have<const C: u32>(&self, q: u32) -> u32 {
        if q + 1 < self.words {
            8 / C
        } else if q + 1 == self.words {
            self.last_have
        } else {
            0
        }
    }
}

/// Payload of lane word `q` (8 bytes `x`, zero past the tensor's end):
/// its chunks' payloads laid end to end, and their total width; `(0, 0)`
/// for a word wholly past the end (`q ≥ words`). Bit `c` of `part` says
/// whether the word's chunk `c` matches.
///
/// The chunks' free bits, two-run fields and move masks come from the
/// encoder book (`crate::params::EncodeParams::book`): each field is a byte
/// string as long as the tensor, chunk `j`'s value in its `C` bytes, so a
/// lane loads one u64 per field for all its chunks and the warp's loads are
/// contiguous.
///
/// Q: where did the tail's special cases go?
/// A: into the book and one subtraction. The free bits are 0 past the
/// tensor's end, so a matching tail chunk's payload holds only its own
/// bits; chunks wholly past the end count as matching, with no free bits,
/// so they add nothing; and a raw tail chunk, always the word's last, is
/// laid whole (its bytes past the end are zero) and the width is cut back
/// by the bits past the end. Every chunk is then the same few selects, with
/// no branch per chunk.
///
/// # Safety
/// The book holds `5 + steps(C)` fields of `words` u64 (two-run fields only
/// read when `RUNS`, move masks only when not).
#[inline(always)]
pub(crate) unsafe fn lane_payload<M: Mem, const C: u32, const RUNS: bool>(
    m: &M,
    book: u64,
    shape: &LaneShape,
    x: u64,
    q: u32,
    part: u32,
) -> (u64, u32) {
    if C <= 2 {
        // SAFETY: forwarded (the move masks are in every book).
        return unsafe { word_payload::<M, C>(m, book, shape, x, q, part) };
    }
    let per = 8 / C;
    let have = shape.have::<C>(q);
    let a = book_word(book, shape, q);
    let f = shape.field;
    // SAFETY: (loads) fields inside the book (the contract).
    let free = unsafe { m.ld_ro_u64(a + 2 * f) };
    let (r1w, sdw) = if RUNS {
        // SAFETY: as above.
        unsafe { (m.ld_ro_u64(a + 3 * f), m.ld_ro_u64(a + 4 * f)) }
    } else {
        (0, 0)
    };
    let mut mvw = [0u64; 6];
    if !RUNS {
        let mut i = 0;
        while i < steps(C) {
            // SAFETY: as above.
            mvw[i as usize] = unsafe { m.ld_ro_u64(a + (5 + i as u64) * f) };
            i += 1;
        }
    }
    let hit_all = matching::<C>(part, have);
    let (mut val, mut n) = (0u64, 0u32);
    let mut c = 0;
    while c < per {
        let sh = 8 * C * c;
        let hit = (hit_all >> c) & 1 != 0;
        if C == 8 {
            // Q: what does the two-run path compute?
            // A: pext(x, free) when free = r1 | r2, two runs: the bits of
            // the lowest run r1 moved down by its first bit s1, and those
            // of r2 = free ^ r1 moved down to just above them (by
            // d2 = s2 − |r1|). Five operations instead of the log2(8C)
            // rounds of the move masks.
            let v = if RUNS {
                let (s1, d2) = ((sdw & 0x3f) as u32, ((sdw >> 8) & 0x3f) as u32);
                ((x & r1w) >> s1) | ((x & (free ^ r1w)) >> d2)
            } else {
                bits::compress(x, free, &mvw, steps(C))
            };
            (val, n) = if hit { (v, free.count_ones()) } else { (x, 64) };
        } else {
            let lm = bits::low_mask(8 * C) as u32;
            let (xc, fc) = ((x >> sh) as u32 & lm, (free >> sh) as u32 & lm);
            let v = if RUNS {
                // x and free hold no bit past the chunk, so the
                // neighbouring chunks' run bits in r1 drop out.
                let r1 = (r1w >> sh) as u32;
                let (s1, d2) = if C == 1 {
                    ((sdw >> sh) as u32 & 7, (sdw >> (sh + 4)) as u32 & 7)
                } else {
                    ((sdw >> sh) as u32 & 0x3f, (sdw >> (sh + 8)) as u32 & 0x3f)
                };
                ((xc & r1) >> s1) | ((xc & (fc ^ r1)) >> d2)
            } else {
                let mv = [
                    (mvw[0] >> sh) as u32,
                    (mvw[1] >> sh) as u32,
                    (mvw[2] >> sh) as u32,
                    (mvw[3] >> sh) as u32,
                    (mvw[4] >> sh) as u32,
                ];
                bits::compress32(xc, fc, &mv, steps(C))
            };
            let (v, nb) = if hit {
                (v, fc.count_ones())
            } else {
                (xc, 8 * C)
            };
            val |= (v as u64) << n;
            n += nb;
        }
        c += 1;
    }
    tail_cut(shape, q, part, have, val, n)
}

/// The chunks of a lane word that take their payload as matching: those
/// whose participation bit in `part` is set, and those past the word's
/// `have` chunks inside the tensor (no free bits there, so they add
/// nothing).
#[inline(always)]
const fn matching<const C: u32>(part: u32, have: u32) -> u32 {
    part | (((1u32 << (8 / C)) - 1) & !((1u32 << have) - 1))
}

/// A lane word's payload `(val, n)` as stored: a raw tail chunk keeps only
/// its bytes inside the tensor, and a word past the tensor's end (whose
/// fields [`book_word`] read from the last word) has none.
#[inline(always)]
const fn tail_cut(shape: &LaneShape, q: u32, part: u32, have: u32, val: u64, n: u32) -> (u64, u32) {
    if q >= shape.words {
        (0, 0)
    } else if q + 1 == shape.words && (part >> (have - 1)) & 1 == 0 {
        (val, n - shape.cut)
    } else {
        (val, n)
    }
}

/// Every bit of the word's chunk `c` (chunks of `C` ≤ 2 bytes) set where
/// bit `c` of `bits` is, in the word's two 32-bit halves.
///
/// Q: why a multiply?
/// A: each chunk's bit is first moved to the chunk's lowest bit (for
/// 1-byte chunks by one multiply whose partial products never meet),
/// then the product with the chunk's all-ones fills the chunk; no chunk
/// carries into the next.
#[inline(always)]
fn chunk_fill<const C: u32>(bits: u32) -> [u32; 2] {
    let spread = |b: u32| {
        if C == 1 {
            ((b & 0xf).wrapping_mul(0x0020_4081) & 0x0101_0101) * 0xff
        } else {
            ((b & 1) | ((b & 2) << 15)) * 0xffff
        }
    };
    [spread(bits), spread(bits >> (4 / C))]
}

/// [`lane_payload`] for chunks of 1 and 2 bytes: all the word's chunks at
/// once, in its two 32-bit halves (no chunk straddles them).
///
/// Q: how are four or eight chunks compressed at once?
/// A: a round of the move masks (`bits::compress32`) moves bits only
/// within their chunk, and the book holds each chunk's move masks at the
/// chunk's place in the word, so one round on a half moves the bits of
/// all its chunks. A chunk stored raw keeps every bit and takes the rounds
/// with its move masks cleared. Each chunk's payload then sits at the
/// bottom of its chunk; the payloads are closed up pairwise, lanes of `2s`
/// bits at a time: a lane whose low `s` bits hold `a` payload bits moves
/// its high half down by `s − a`, and every `a` is a popcount of the bits
/// kept. For 2-byte chunks that is 4 rounds and one closing level a half,
/// where the chunk-by-chunk form took a path of its own per chunk.
///
/// # Safety
/// As [`lane_payload`] (the move masks are read, whatever `RUNS`).
#[inline(always)]
unsafe fn word_payload<M: Mem, const C: u32>(
    m: &M,
    book: u64,
    shape: &LaneShape,
    x: u64,
    q: u32,
    part: u32,
) -> (u64, u32) {
    let have = shape.have::<C>(q);
    let a = book_word(book, shape, q);
    let f = shape.field;
    let mut mv = [0u64; 4];
    // SAFETY: (loads) fields inside the book (the contract): the free
    // bits, then move mask i in field 5 + i.
    let free = unsafe { m.ld_ro_u64(a + 2 * f) };
    let mut i = 0;
    while i < steps(C) {
        // SAFETY: as above.
        mv[i as usize] = unsafe { m.ld_ro_u64(a + (5 + i as u64) * f) };
        i += 1;
    }
    let (val, n) = pack_chunks::<C>(x, free, &mv, matching::<C>(part, have));
    tail_cut(shape, q, part, have, val, n)
}

/// The payloads of the `8 / C` chunks of word `x` (`C` ≤ 2), laid end to
/// end, and their total width: chunk `c` gives its bits at the set bits of
/// `free` (chunk-wise `pext`) when bit `c` of `hits` is set, else all its
/// `8C` bits. `mv` holds each chunk's move masks of its free bits
/// (`bits::move_masks`) at the chunk's place, as [`word_payload`] reads
/// them from the encoder book.
#[inline(always)]
pub(crate) fn pack_chunks<const C: u32>(x: u64, free: u64, mv: &[u64; 4], hits: u32) -> (u64, u32) {
    let halves = |v: u64| [v as u32, (v >> 32) as u32];
    let hit = chunk_fill::<C>(hits);
    let (xs, free) = (halves(x), halves(free));
    // The bits kept: a matching chunk's free bits, all of a raw one's.
    let keep = [free[0] | !hit[0], free[1] | !hit[1]];
    let mut y = [xs[0] & keep[0], xs[1] & keep[1]];
    let mut i = 0;
    while i < steps(C) {
        let mvi = halves(mv[i as usize]);
        let mut h = 0;
        while h < 2 {
            let t = y[h] & mvi[h] & hit[h];
            y[h] = (y[h] ^ t) | (t >> (1u32 << i));
            h += 1;
        }
        i += 1;
    }
    // Close up: lanes of 2s bits, each half moved down onto the other's
    // payload.
    let mut s = 8 * C;
    while s < 32 {
        let low = bits::low_mask(s) as u32;
        let mut h = 0;
        while h < 2 {
            let mut r = 0;
            let mut b = 0;
            while b < 32 {
                let lo = low << b;
                let kept = (keep[h] & lo).count_ones();
                r |= (y[h] & lo) | ((y[h] & (lo << s)) >> (s - kept));
                b += 2 * s;
            }
            y[h] = r;
            h += 1;
        }
        s *= 2;
    }
    let nl = keep[0].count_ones();
    (y[0] as u64 | (y[1] as u64) << nl, nl + keep[1].count_ones())
}

/// This lane's 8 bytes `x` of a tensor (word `q`), their participation bits
/// (`8 / C` of them, only for chunks inside the tensor) and that count.
///
/// # Safety
/// The book holds the bit values then the masks, `words` u64 each.
#[inline(always)]
pub(crate) unsafe fn lane_participation<M: Mem, const C: u32>(
    m: &M,
    book: u64,
    shape: &LaneShape,
    x: u64,
    q: u32,
) -> (u32, u32) {
    let have = shape.have::<C>(q);
    // SAFETY: the word's fields (the last word's past the end: see
    // `book_word`).
    let (v, mask) = unsafe {
        let a = book_word(book, shape, q);
        (m.ld_ro_u64(a), m.ld_ro_u64(a + shape.field))
    };
    // No bits past the end (have = 0).
    (
        word_participation::<C>(x, v, mask) & ((1u32 << have) - 1),
        have,
    )
}

/// Address of lane word `q`'s entry in the first field of an encoder book
/// of `shape`; the last word's for `q` past the tensor's end.
///
/// Q: why read a word that is not there, rather than branch around it?
/// A: a step's two or three lane words are independent chains of loads and
/// dependent arithmetic, and the bulk encoder waits on those chains
/// (Nsight Compute: "wait" the first stall reason). A branch around each
/// word (it may lie past the end in a row's last step) kept the words
/// apart, so the compiler could not interleave them; past the end the
/// results are masked off instead.
#[inline(always)]
const fn book_word(book: u64, shape: &LaneShape, q: u32) -> u64 {
    let q = if q < shape.words { q } else { shape.words - 1 };
    book + 8 * q as u64
}

/// Participation word of this lane's group: the 32 participation bits
/// (chunks `32w … 32w + 31`) that the `4C` lanes of a group hold between
/// them, OR-ed together in every lane of the group.
#[inline(always)]
pub(crate) fn group_word<W: Lanes, const C: u32>(w: &W, part: u32) -> u32 {
    if C == 8 {
        // One bit a lane: the warp's vote is the word.
        return w.ballot(part & 1 != 0);
    }
    let g = 4 * C;
    crate::simt::group_or(w, part << ((w.lane() % g) * (8 / C)), g)
}

/// Participation word `pw` of the tensor at `start` (0 past the last chunk),
/// in every lane. Warp-uniform.
///
/// # Safety
/// As [`encode`].
#[inline(always)]
pub(super) unsafe fn participation_word<W: Lanes, M: Mem, const C: u32>(
    w: &W,
    m: &M,
    p: &EncodeParams,
    start: u64,
    pw: u64,
) -> u32 {
    let l = p.row_bytes;
    let chunks = l.div_ceil(C as u64);
    if 32 * pw >= chunks {
        return 0;
    }
    let groups = (8 / C) as u64;
    let q = 32 * (pw / groups) + w.lane() as u64;
    let shape = LaneShape::new::<C>(l);
    // SAFETY: row_word reads inside the tensor; the book as the contract.
    let (part, _) = unsafe {
        let x = row_word(m, start, l, q);
        lane_participation::<M, C>(m, p.book, &shape, x, q as u32)
    };
    let word = group_word::<W, C>(w, part);
    w.shfl_idx(word, ((pw % groups) * 4 * C as u64) as u32)
}

#[cfg(test)]
mod tests {
    use super::pack_chunks;
    use crate::detail::bits::{low_mask, move_masks};

    /// `pack_chunks::<C>` against one chunk at a time: its free bits gathered
    /// bit by bit when it matches, all of it otherwise, laid end to end.
    fn check_pack<const C: u32>(x: u64, free: u64, hits: u32) {
        let w = 8 * C;
        let (mut want, mut n) = (0u64, 0u32);
        let mut mv = [0u64; 4];
        for c in 0..8 / C {
            let (xc, fc) = (x >> (w * c) & low_mask(w), free >> (w * c) & low_mask(w));
            for (i, m) in move_masks(fc, w.trailing_zeros())
                .iter()
                .take(4)
                .enumerate()
            {
                mv[i] |= m << (w * c);
            }
            if hits >> c & 1 == 0 {
                want |= xc << n;
                n += w;
            } else {
                for b in (0..w).filter(|b| fc >> b & 1 == 1) {
                    want |= (xc >> b & 1) << n;
                    n += 1;
                }
            }
        }
        assert_eq!(
            pack_chunks::<C>(x, free, &mv, hits),
            (want, n),
            "C={C} x={x:#x} free={free:#x} hits={hits:#b}"
        );
    }

    #[test]
    fn chunks_packed_a_word_at_a_time_equal_a_chunk_by_chunk_pack() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for free in [0, u64::MAX, 0x00ff_ff00_0f0f_8001] {
            for hits in 0..256 {
                check_pack::<1>(next(), free, hits);
                check_pack::<2>(next(), free, hits & 0xf);
            }
        }
        for _ in 0..20000 {
            let (x, free, hits) = (next(), next() & next(), next() as u32);
            check_pack::<1>(x, free, hits & 0xff);
            check_pack::<2>(x, free, hits & 0xf);
            check_pack::<2>(x, free | next(), hits & 0xf);
        }
    }
}
