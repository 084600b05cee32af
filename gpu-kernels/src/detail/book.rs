//! The decode book: the codebook laid out for the batch decoder's step of
//! 16 output bytes per lane ([`crate::detail::step`]), built once per codebook on the
//! host and read by the kernels (and by their host emulation).
//!
//! A step of a warp covers `32 · 16 / C` consecutive chunks; lane `l` of
//! step `g` decodes chunks `k0 = (32g + l) · 16/C` to `k0 + 16/C − 1`, i.e.
//! output bytes `16·(32g + l)` to `16·(32g + l) + 15`. Every field is stored
//! in chunk order, so a lane's share of a field is one contiguous, aligned
//! run and a warp's loads are contiguous (no bank conflicts). `KP` is the
//! chunk count rounded up to whole steps; chunks past the tensor's end are
//! zero in every field (width 0), so the last step needs no bounds logic.
//!
//! | field | bytes | per chunk |
//! | --- | --- | --- |
//! | `BITVAL` | `KP·C` | the codebook's bit values (`C` bytes, little-endian) |
//! | `RUN1` | `KP·C` | the lowest run of free bits |
//! | `FREE` | `KP·C` | all free bits |
//! | `PARAMS` | `KP·4` | `s1, d2, pw, fw` (one byte each, see below) |
//! | `CLASS` | one byte per step, padded to 16 | [`CLASS_NONE_FREE`], [`CLASS_UNIFORM`], [`CLASS_TWO_RUNS`] or [`CLASS_GENERAL`] |
//! | `PREFIX` | `4·32` per step | lane `l`'s inclusive prefix of payload widths when every chunk of the step matches |
//!
//! `s1` is the first bit of the lowest run of free bits, `d2 = s2 − n1` the
//! left shift that takes the payload's bits past that run to the second run
//! (first bit `s2`), `pw` the payload width of a matching chunk
//! (`popcount(free)`), `fw` the chunk's width in bits (0 past the end).
//!
//! Q: why two runs?
//! A: a float column whose exponent is invariant has its free bits in the
//! low mantissa and the sign: two runs (all of MiniLM's f32 and bf16
//! columns), and Cora's columns have none or one. With at most two runs the
//! inverse of `pext` is two shifts and two three-input logic operations
//! ([`expand2_32`]) instead of `log2(8C)` move-mask rounds, and the same
//! holds for every lane, so a warp never diverges on it. A step with any
//! column of three or more runs takes the general move-mask path
//! ([`CLASS_GENERAL`]).
//!
//! Q: why a class for steps whose columns are all alike?
//! A: a dense float table's columns usually share one mask and one bit
//! value (every column of MiniLM's bf16 and f32 embeddings does: the
//! exponent's high bits). Then a lane needs no chunk's own `PARAMS`,
//! `RUN1`, `FREE` or `BITVAL`: four broadcast loads a step give them all,
//! a lane's payload width is `cpl·fw − (fw − pw)·popcount(p)`, and the
//! chunks of an output word are placed side by side and expanded as one
//! ([`crate::detail::step`]). Only the book's class bytes say so: the
//! fields stay as for [`CLASS_TWO_RUNS`], which every other kernel reads.

use crate::detail::bits;

/// Output bytes one lane produces per step.
pub const LANE_BYTES: u32 = 16;

/// Chunks one lane decodes per step.
#[inline(always)]
pub const fn chunks_per_lane(chunk: u32) -> u32 {
    // A shift, not a division: `chunk` may be a run-time value in a kernel,
    // and a division would bring a division-by-zero panic path along.
    LANE_BYTES >> (chunk.trailing_zeros() & 3)
}

/// Chunks per warp step.
#[inline(always)]
pub const fn step_chunks(chunk: u32) -> u32 {
    32 * chunks_per_lane(chunk)
}

/// Every chunk of the step has no free bits: a matching chunk is its bit
/// value, and reads no payload.
pub const CLASS_NONE_FREE: u8 = 0;
/// Every chunk's free bits form at most two runs.
pub const CLASS_TWO_RUNS: u8 = 1;
/// Some chunk needs the general move-mask expansion.
pub const CLASS_GENERAL: u8 = 2;
/// A [`CLASS_TWO_RUNS`] step whose chunks inside the tensor all have the
/// same free bits, bit values and width, with at least one free bit: the
/// step's first chunk's `PARAMS`, and the first output word of its `RUN1`,
/// `FREE` and `BITVAL`, hold every chunk's. A book whose every step is
/// uniform is decoded by the uniform kernels
/// (`crate::detail::step`); any other kernel treats a uniform step as a
/// two-run one.
pub const CLASS_UNIFORM: u8 = 3;
/// Not a value of the book's `CLASS` field (such steps are stored as
/// [`CLASS_GENERAL`], which every other kernel decodes them as) but the
/// step kind of the periodic kernel: a book whose every step's chunks
/// (of 2 or 4 bytes) inside the tensor share free bits, bit values and
/// width, the free bits the same pattern with at most two runs in every
/// byte (an fp8 table's exponent bits, invariant in every byte). The
/// step's first chunk's `PARAMS` word holds the pattern's two-run shifts
/// in its low 16 bits (general chunks' are not read), its `RUN1` the
/// pattern's low run in its first byte.
pub const CLASS_PERIODIC: u8 = 4;
/// [`CLASS_PERIODIC`] with the pattern in each 16-bit half of a 4-byte
/// chunk instead of each byte (two f16 values a chunk, each one's sign and
/// low bits free): `RUN1` holds the low run in its first half. Not a value
/// of the `CLASS` field either; the host asks for it with
/// `crate::params::DECODE_FLAG_HALVES`, for a book whose every step's
/// pattern is by the half.
pub const CLASS_PERIODIC_HALVES: u8 = 5;

/// Byte offsets of the fields of a decode book.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Steps per tensor.
    pub steps: u32,
    /// `BITVAL` (always 0).
    pub bitval: u32,
    /// `RUN1`.
    pub run1: u32,
    /// `FREE`.
    pub free: u32,
    /// `PARAMS`.
    pub params: u32,
    /// `CLASS`.
    pub class: u32,
    /// `PREFIX`.
    pub prefix: u32,
    /// Total bytes (a multiple of 16).
    pub bytes: u32,
}

impl Layout {
    /// The layout for tensors of `chunks` chunks of `chunk` bytes.
    #[inline(always)]
    pub const fn new(chunks: u32, chunk: u32) -> Self {
        let per_step = step_chunks(chunk);
        // per_step is a power of two: a shift instead of a division.
        let steps = (chunks + per_step - 1) >> per_step.trailing_zeros();
        let kp = steps * per_step;
        let field = kp * chunk;
        let params = 3 * field;
        let class = params + 4 * kp;
        let prefix = class + steps.div_ceil(16) * 16;
        Layout {
            steps,
            bitval: 0,
            run1: field,
            free: 2 * field,
            params,
            class,
            prefix,
            bytes: prefix + steps * 128,
        }
    }
}

/// The `PARAMS` word of a chunk with free bits `free` (within a chunk of
/// `width` bits) when they form at most two runs, else `None` (its `pw` and
/// `fw` bytes then still come from [`params_general`]).
pub const fn params_two_runs(free: u64, width: u32) -> Option<u32> {
    let pw = free.count_ones();
    if free == 0 {
        return Some(pw << 16 | width << 24);
    }
    let s1 = free.trailing_zeros();
    let n1 = (free >> s1).trailing_ones();
    let rest = if s1 + n1 >= 64 {
        0
    } else {
        free & !bits::low_mask(s1 + n1)
    };
    let (d2, ok) = if rest == 0 {
        (0, true)
    } else {
        let s2 = rest.trailing_zeros();
        let n2 = (rest >> s2).trailing_ones();
        (s2 - n1, n1 + n2 == pw)
    };
    if ok {
        Some(s1 | d2 << 8 | pw << 16 | width << 24)
    } else {
        None
    }
}

/// The `PARAMS` word of a chunk that needs the general path (only `pw` and
/// `fw` are read).
pub const fn params_general(free: u64, width: u32) -> u32 {
    free.count_ones() << 16 | width << 24
}

/// Bits a matching chunk saves (its width minus its payload width), from
/// its `PARAMS` word: what a stored length is derived from.
#[inline(always)]
pub const fn saved_bits(params: u32) -> u32 {
    (params >> 24) - ((params >> 16) & 0xff)
}

/// The lowest run of the set bits of `free`.
pub const fn lowest_run(free: u64) -> u64 {
    if free == 0 {
        return 0;
    }
    let s1 = free.trailing_zeros();
    let n1 = (free >> s1).trailing_ones();
    bits::low_mask(n1) << s1
}

/// Rebuild a matching chunk of at most 4 bytes from its payload `v` (its
/// `pw` low bits; higher bits of `v` must be zero), given its `PARAMS`
/// shifts, `RUN1`, `FREE` and `BITVAL`: the inverse of `pext` when the free
/// bits form at most two runs.
#[inline(always)]
pub const fn expand2_32(v: u32, s1: u32, d2: u32, run1: u32, free: u32, bitval: u32) -> u32 {
    let t1 = v << (s1 & 31);
    let t2 = v << (d2 & 31);
    let y = (t1 & run1) | (t2 & !run1);
    (y & free) | bitval
}

/// A word of chunks of `C` bytes whose payloads sit at the bottom of each
/// chunk's bytes spread a piece at a time, a piece being a byte or (with
/// `HALVES`, 4-byte chunks only) a 16-bit half: bits `w·i ..` of a chunk's
/// payload to the bottom of its piece `i`, the bits above `w` in every
/// piece cleared (a [`CLASS_PERIODIC`] or [`CLASS_PERIODIC_HALVES`] step's
/// first move).
///
/// Q: why can the shifts run across the word, not a chunk at a time?
/// A: each term keeps only piece `i` of each chunk (`low_mask(w)` at the
/// piece's offset, repeated a chunk), and the bits a shift carries in from
/// the chunk below are its payload's upper bits, which land above `w` in
/// that piece or beyond it; a chunk's payload never reaches the next
/// chunk's piece `i` after a shift of `i·(piece − w)`.
#[inline(always)]
pub fn spread<const C: u32, const HALVES: bool>(y: u32, w: u32) -> u32 {
    if C == 4 && HALVES {
        let m = bits::low_mask32(w);
        return (y & m) | ((y << (16 - w)) & (m << 16));
    }
    let rep = if C == 2 { 0x0001_0001 } else { 1 };
    let m = bits::low_mask32(w) * rep;
    let s = 8 - w;
    let mut z = y & m;
    let mut i = 1;
    while i < C {
        z |= (y << (i * s)) & (m << (8 * i));
        i += 1;
    }
    z
}

/// [`expand2_32`] of a chunk at bit `8·(byte offset)` of its output word,
/// straight from its `PARAMS` word `q` and the word's `RUN1`, `FREE` and
/// `BITVAL` words, with `v` unmasked: bits of `v` above the chunk's
/// payload may be set. The result is right in the chunk's own bytes only
/// (the caller keeps those): there the stray bits land past the chunk's
/// second run, where `free` has no bit, and the other chunks' bits of
/// `run1`, `free` and `bitval` stay in their own bytes.
#[inline(always)]
pub fn expand2_own(v: u32, q: u32, run1: u32, free: u32, bitval: u32) -> u32 {
    // `s1` and `d2` are below 32: the shifts take them modulo 32 from the
    // PARAMS word (one instruction each, no masks).
    let t1 = bits::shl_wrap32(v, q);
    let t2 = bits::shl_wrap32(v, q >> 8);
    (((t1 & run1) | (t2 & !run1)) & free) | bitval
}

/// 64-bit [`expand2_32`] for 8-byte chunks.
#[inline(always)]
pub const fn expand2_64(v: u64, s1: u32, d2: u32, run1: u64, free: u64, bitval: u64) -> u64 {
    let t1 = v << (s1 & 63);
    let t2 = v << (d2 & 63);
    let y = (t1 & run1) | (t2 & !run1);
    (y & free) | bitval
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    #[test]
    fn two_run_expansion_inverts_pext() {
        let mut s = 0x1234_5678_9abc_def1;
        for width in [8u32, 16, 24, 32, 40, 64] {
            for _ in 0..4000 {
                // Free bits: zero, one or two runs, or random (often more).
                let r = next(&mut s);
                let a = (r % width as u64) as u32;
                let b = a + ((r >> 8) % (width - a) as u64) as u32;
                let c = b + ((r >> 16) % (width - b + 1) as u64) as u32;
                let d = c + ((r >> 24) % (width - c + 1) as u64) as u32;
                let run = |lo: u32, hi: u32| bits::low_mask(hi) & !bits::low_mask(lo);
                let free = match r >> 60 {
                    0 => 0,
                    1..=4 => run(a, b + 1),
                    5..=12 => run(a, b + 1) | run(c, d),
                    _ => next(&mut s) & bits::low_mask(width),
                };
                let mask = !free & bits::low_mask(width);
                let x = next(&mut s) & bits::low_mask(width);
                let bitval = x & mask;
                let steps = bits::move_steps(if width > 32 { 8 } else { 4 });
                let mv = bits::move_masks(free, steps);
                let payload = bits::compress(x, free, &mv, steps);
                match params_two_runs(free, width) {
                    Some(p) => {
                        assert_eq!(p >> 16 & 0xff, free.count_ones());
                        assert_eq!(p >> 24, width);
                        let (s1, d2) = (p & 0xff, p >> 8 & 0xff);
                        let r1 = lowest_run(free);
                        assert_eq!(expand2_64(payload, s1, d2, r1, free, bitval), x);
                        if width <= 32 {
                            let y = expand2_32(
                                payload as u32,
                                s1,
                                d2,
                                r1 as u32,
                                free as u32,
                                bitval as u32,
                            );
                            assert_eq!(y as u64, x);
                        }
                    }
                    None => {
                        // Three runs or more.
                        let runs = (free ^ (free << 1)).count_ones().div_ceil(2);
                        assert!(runs >= 3, "free {free:#x} has {runs} runs");
                    }
                }
            }
        }
    }

    #[test]
    fn a_periodic_word_spread_then_expanded_by_its_byte_pattern_inverts_pext() {
        let mut s = 0x0f0f_1234_5678_9abc;
        for c in [2u32, 4] {
            // Every byte pattern with one or two runs and a fixed bit.
            for f8 in 1u32..255 {
                let runs = (f8 ^ (f8 << 1)).count_ones().div_ceil(2);
                if runs > 2 {
                    continue;
                }
                let w = f8.count_ones();
                let free = (0..4).fold(0u32, |x, i| x | f8 << (8 * i));
                let mask = !free;
                // The byte pattern's two-run shifts, as the PARAMS word's
                // low 16 bits; RUN1's first byte repeated.
                let q = params_two_runs(f8 as u64, 8).unwrap() & 0xffff;
                let run1 = (lowest_run(free as u64) as u32 & 0xff) * 0x0101_0101;
                for _ in 0..64 {
                    let x = next(&mut s) as u32;
                    let bitval = (next(&mut s) as u32) & mask;
                    // The word's chunks, and each one's payload at the
                    // bottom of its bytes (as the uniform step's window and
                    // byte placement leave them).
                    let want = (x & free) | bitval;
                    let mut y = 0u32;
                    for k in 0..4 / c {
                        let own = (bits::low_mask(8 * c) as u32) << (8 * c * k);
                        let chunk = ((x & own) >> (8 * c * k)) as u64;
                        let f = ((free & own) >> (8 * c * k)) as u64;
                        let steps = bits::move_steps(4);
                        let mv = bits::move_masks(f, steps);
                        let pay = bits::compress(chunk, f, &mv, steps) as u32;
                        assert_eq!(pay >> (c * w), 0);
                        // Stray bits above a chunk's payload (the next
                        // chunk's, in the uniform step's window) must not
                        // matter: the spread keeps w bits a byte.
                        let stray = (next(&mut s) as u32) << (c * w) & bits::low_mask(8 * c) as u32;
                        y |= (pay | stray) << (8 * c * k);
                    }
                    let z = if c == 4 {
                        spread::<4, false>(y, w)
                    } else {
                        spread::<2, false>(y, w)
                    };
                    let got = expand2_own(z, q, run1, free, bitval);
                    assert_eq!(got, want, "C={c} f8={f8:#x} x={x:#x}");
                }
            }
        }
    }

    #[test]
    fn a_chunk_spread_by_its_halves_then_expanded_by_their_pattern_inverts_pext() {
        let mut s = 0x5eed_0f16_1234_abcd;
        let mut tried = 0;
        // Every 16-bit pattern with one or two runs and a fixed bit whose
        // bytes differ (two f16 values a 4-byte chunk: sign and low bits).
        for f16 in 1u32..0xffff {
            let runs = (f16 ^ (f16 << 1)).count_ones().div_ceil(2);
            if runs > 2 || f16 & 0xff == f16 >> 8 {
                continue;
            }
            tried += 1;
            let w = f16.count_ones();
            let free = f16 | f16 << 16;
            let mask = !free;
            let q = params_two_runs(f16 as u64, 16).unwrap() & 0xffff;
            let run1 = (lowest_run(free as u64) as u32 & 0xffff) * 0x0001_0001;
            for _ in 0..8 {
                let x = next(&mut s) as u32;
                let bitval = (next(&mut s) as u32) & mask;
                let want = (x & free) | bitval;
                let steps = bits::move_steps(4);
                let mv = bits::move_masks(free as u64, steps);
                let pay = bits::compress(x as u64, free as u64, &mv, steps) as u32;
                // Stray bits above the payload (the next chunk's) must not
                // matter.
                let stray = if 2 * w < 32 {
                    (next(&mut s) as u32) << (2 * w)
                } else {
                    0
                };
                let z = spread::<4, true>(pay | stray, w);
                let got = expand2_own(z, q, run1, free, bitval);
                assert_eq!(got, want, "f16={f16:#x} x={x:#x}");
            }
        }
        assert!(tried > 1000, "{tried} patterns");
    }

    #[test]
    fn layout_is_aligned_and_whole_steps() {
        for chunk in [1u32, 2, 4, 8] {
            for chunks in [1u32, 7, 64, 511, 512, 513, 717, 5732] {
                let l = Layout::new(chunks, chunk);
                assert!(l.steps * step_chunks(chunk) >= chunks);
                for off in [l.run1, l.free, l.params, l.class, l.prefix, l.bytes] {
                    assert_eq!(off % 16, 0, "C={chunk} K={chunks}");
                }
                assert!(l.class - l.params == 4 * l.steps * step_chunks(chunk));
            }
        }
    }
}
