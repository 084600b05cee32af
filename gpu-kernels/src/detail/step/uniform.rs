//! The uniform and periodic kernels' expansion (`CLASS_UNIFORM`,
//! `CLASS_PERIODIC`, `CLASS_PERIODIC_HALVES`): a step's shared fields read once, each output word's
//! chunks expanded at once. Used by [`super::decode_in`] in those kernels only.

use super::Source;
use crate::detail::bits::{merge_bytes, place_bytes};
use crate::detail::book::{CLASS_PERIODIC_HALVES, Layout, chunks_per_lane, expand2_own, spread};
use crate::simt::Book;

/// What every chunk of a [`CLASS_UNIFORM`](crate::detail::book::CLASS_UNIFORM) step shares: the `PARAMS` word
/// of a chunk at the start of an output word, and one output word of
/// `RUN1`, `FREE` and `BITVAL` (the same pattern in each chunk's bytes).
#[derive(Clone, Copy)]
pub(super) struct Uniform {
    pub(super) q: u32,
    pub(super) run1: u32,
    pub(super) free: u32,
    pub(super) bitval: u32,
}

impl Uniform {
    /// The shared fields of book step `bstep` (four broadcast loads).
    #[inline(always)]
    pub(super) fn load<const C: u32, B: Book>(b: &B, lay: &Layout, bstep: u32) -> Self {
        let k = bstep * 32 * chunks_per_lane(C);
        // SAFETY: the step's first chunk and output word, inside the
        // PARAMS, RUN1, FREE and BITVAL fields, 4-aligned.
        unsafe {
            Uniform {
                q: b.ld_u32(lay.params + 4 * k),
                run1: b.ld_u32(lay.run1 + k * C),
                free: b.ld_u32(lay.free + k * C),
                bitval: b.ld_u32(lay.bitval + k * C),
            }
        }
    }

    /// Payload width of a matching chunk (`pw`).
    #[inline(always)]
    pub(super) fn pw(&self) -> u32 {
        (self.q >> 16) & 0xff
    }

    /// Width of a chunk (`fw`).
    #[inline(always)]
    pub(super) fn fw(&self) -> u32 {
        self.q >> 24
    }
}

/// The body of [`expand_uniform`] and [`expand_periodic`]: per output word
/// the chunks' payloads placed at the bottom of their bytes (`$y`), the word
/// expanded by `$expand`, each chunk keeping its expanded or raw bytes.
macro_rules! uniform_words {
    ($c:ident, $s:ident, $p:ident, $bit:ident, $u:ident, $y:ident => $expand:expr) => {{
        let mut bit = $bit;
        let per_word = 4 / $c;
        let (pw, fw) = ($u.pw(), $u.fw());
        let mut o = [0u32; 4];
        each_chunk!(wi => {
            if wi < 4 {
                let win = $s.raw32(bit);
                let mut $y = win;
                let mut off = 0u32;
                each_chunk!(i => {
                    if i < per_word {
                        if i > 0 {
                            $y = place_bytes($y, win >> (off & 31), i * $c);
                        }
                        off += if ($p >> (wi * per_word + i)) & 1 == 1 { pw } else { fw };
                    }
                });
                let e = $expand;
                let mut x = 0u32;
                each_chunk!(i => {
                    if i < per_word {
                        let t = if ($p >> (wi * per_word + i)) & 1 == 1 { e } else { $y };
                        x = if i == 0 { t } else { merge_bytes(x, t, i * $c) };
                    }
                });
                o[wi as usize] = x;
                bit += off;
            }
        });
        o
    }};
}

/// A lane's 16 output bytes of a [`CLASS_UNIFORM`](crate::detail::book::CLASS_UNIFORM) step of chunks of `C ≤
/// 4` bytes, every one inside the tensor: participation bits `p`, payload
/// from stream bit `bit`.
///
/// Per output word: one 32-bit read holds its chunks' payloads; each chunk's
/// bits are placed in its own bytes (a shift and a byte permute), the word
/// is expanded once for all of them ([`expand2_own`] with the shared
/// fields: the argument that keeps a chunk's stray bits out of its own
/// bytes keeps them out of the next chunk's too), and each chunk keeps its
/// expanded or its raw bytes by its participation bit.
#[inline(always)]
#[allow(unused_assignments)] // the last word's `bit +=` is never read
pub(super) fn expand_uniform<const C: u32, S: Source>(
    s: &S,
    p: u32,
    bit: u32,
    u: &Uniform,
) -> [u32; 4] {
    uniform_words!(C, s, p, bit, u, y => expand2_own(y, u.q, u.run1, u.free, u.bitval))
}

/// [`expand_uniform`] for a [`CLASS_PERIODIC`](crate::detail::book::CLASS_PERIODIC)
/// or [`CLASS_PERIODIC_HALVES`] step (`P`): each word spread a piece at a
/// time ([`spread`]: a byte, or a 16-bit half) before the expansion, which
/// then deposits every piece by the pattern's two runs (`RUN1`'s first
/// piece in every piece; `FREE` and `BITVAL` are whole words already).
#[inline(always)]
#[allow(unused_assignments)] // the last word's `bit +=` is never read
pub(super) fn expand_periodic<const C: u32, const P: u8, S: Source>(
    s: &S,
    p: u32,
    bit: u32,
    u: &Uniform,
) -> [u32; 4] {
    if C == 4 && P == CLASS_PERIODIC_HALVES {
        let (wh, r1) = (u.pw() / 2, (u.run1 & 0xffff) * 0x0001_0001);
        uniform_words!(C, s, p, bit, u, y => expand2_own(spread::<C, true>(y, wh), u.q, r1, u.free, u.bitval))
    } else {
        let (wb, r1) = (u.pw() / C, (u.run1 & 0xff) * 0x0101_0101);
        uniform_words!(C, s, p, bit, u, y => expand2_own(spread::<C, false>(y, wb), u.q, r1, u.free, u.bitval))
    }
}
