//! A step's payload prefixes from the book's all-match row and its few
//! escape lanes, in place of the warp scan (the uniform and periodic
//! kernels, a tensor a warp).

use crate::simt::{Book, Lanes};

/// The most lanes with a chunk that does not match (an *escape lane*) for
/// which a step takes `prefix_with_escapes` rather than the warp scan.
pub const ESCAPE_LANES: u32 = 4;

/// The group's payload prefixes from the book's all-match `PREFIX` row and
/// its few escape lanes: lane `l`'s exclusive prefix and the group's sum.
/// `at`: the group's first entry in the row (book offset), `sub`: the
/// group's half of the book step (0 for `G = 32`), `tot`: the lane's widths,
/// `matched`: every chunk of the lane matches, `esc`: the warp's ballot of
/// lanes that are not `matched`.
///
/// The all-match prefix is right for every lane up to the first escape
/// lane; each escape lane adds what its non-matching chunks widen, `δ` (its
/// widths less its all-match widths, the difference of two entries of the
/// book's row), to the lanes after it: one shuffle an escape lane, none
/// waiting on another, where the scan's five wait each on the last.
///
/// Q: why only in the uniform and periodic kernels, a tensor a warp?
/// A: measured in every kernel (H200, 2026-11-29): MiniLM f32 through
/// `ibp_decode_uniform` 1.08×, but Cora through `ibp_decode` 0.935× (the
/// path and its loop ran 12% more instructions a row than the scan it
/// replaced, and saved fewer stalls), MiniLM bf16 in pairs 0.95×. The
/// general and pair kernels keep the scan.
///
/// # Safety
/// `at + 4·G` is inside the book's PREFIX field and, for `sub > 0`, so is
/// `at − 4` (the row's entries of this group and the lane before it).
#[inline(always)]
pub(super) unsafe fn prefix_with_escapes<const G: u32, W: Lanes, B: Book>(
    w: &W,
    b: &B,
    at: u32,
    sub: u32,
    tot: u32,
    matched: bool,
    esc: u32,
) -> (u32, u32) {
    let lane = w.lane() & (G - 1);
    let first = w.lane() & !(G - 1);
    // SAFETY: the group's entries, the one before its first lane (a lane
    // 0 reads its own, unused), and the one before the group (`sub > 0`).
    let (incl, end, before, own_prev) = unsafe {
        (
            b.ld_u32(at + 4 * lane),
            b.ld_u32(at + 4 * (G - 1)),
            if sub > 0 { b.ld_u32(at - 4) } else { 0 },
            b.ld_u32(at + 4 * lane.max(1) - 4),
        )
    };
    // The prefix before the lane's chunks had every chunk matched.
    let prev = if matched {
        incl.wrapping_sub(tot)
    } else if lane == 0 {
        before
    } else {
        own_prev
    };
    let delta = tot.wrapping_sub(incl.wrapping_sub(prev));
    let (mut acc, mut gsum) = (0u32, 0u32);
    let mut e = esc;
    while e != 0 {
        let src = e.trailing_zeros();
        e &= e - 1;
        let v = w.shfl_idx(delta, src);
        if src & !(G - 1) == first {
            gsum = gsum.wrapping_add(v);
            if src < w.lane() {
                acc = acc.wrapping_add(v);
            }
        }
    }
    (
        prev.wrapping_sub(before).wrapping_add(acc),
        end.wrapping_sub(before).wrapping_add(gsum),
    )
}
