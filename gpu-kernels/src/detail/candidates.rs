//! The fit's candidate codebooks built on the device, from the bit counts
//! the counting kernel left there: the evaluation pass's book
//! ([`crate::params::CandidatesParams`]), with no round trip of the counts
//! through the host.
//!
//! Q: why on the device, when the rule is a compare or two a bit?
//! A: on the host it was a copy of `8L` u64 counts and a pass over them per
//! threshold (Cora: 367 KB and about 0.3 ms of CPU for six thresholds, a
//! third of the sampled fit of a 1 GiB table); here it is one coalesced
//! read of the counts and ballots, a few microseconds.

use crate::params::{CandidatesParams, MAX_THRESHOLDS};
use crate::simt::{Lanes, Mem};

/// Run `$body` for `$t` = 0, 1, … 7 (`MAX_THRESHOLDS`), a constant in each
/// copy.
///
/// Q: why not a loop?
/// A: LLVM kept the loop (its body holds ballots), so `one_above[t]` and
/// `zero_below[t]` were indexed at run time and the parameters copied to
/// local memory (a 160-byte stack frame, ptxas sm_90); constant copies
/// read them from the constant bank.
const _: () = assert!(MAX_THRESHOLDS == 8, "each_threshold! unrolls eight copies");

macro_rules! each_threshold {
    ($t:ident => $body:block) => {
        each_threshold!(@ $t $body 0 1 2 3 4 5 6 7)
    };
    (@ $t:ident $body:block $($n:literal)*) => {
        $( { let $t: usize = $n; $body } )*
    };
}

/// Build the book for the words `wid, wid + nwarps, …`: lane `l` takes the
/// counts of bits `l` and `32 + l` of the word, and a ballot per threshold
/// and verdict gathers each 32-bit half.
///
/// # Safety
/// `p.counts` holds `8 · row_bytes` readable u64 and `p.book` `(1 + nt) ·
/// ⌈row_bytes / 8⌉ + MAX_THRESHOLDS` writable u64 (8-aligned), its trailer
/// (the last `MAX_THRESHOLDS`) zeroed; every lane calls with the same
/// arguments.
#[inline(always)]
pub unsafe fn candidates<W: Lanes, M: Mem>(
    w: &W,
    m: &M,
    p: &CandidatesParams,
    wid: u64,
    nwarps: u64,
) {
    let bits = 8 * p.row_bytes;
    let words = p.row_bytes.div_ceil(8);
    let lane = w.lane() as u64;
    let nt = if p.nt > MAX_THRESHOLDS {
        MAX_THRESHOLDS
    } else {
        p.nt
    };
    let mut q = wid;
    while q < words {
        let (i0, i1) = (64 * q + lane, 64 * q + 32 + lane);
        // Bits past the tensor are in no mask (counts of 0 would read as
        // invariant zeros).
        // SAFETY: i0 < 8 · row_bytes, inside the counts.
        let c0 = (i0 < bits).then(|| unsafe { m.ld_u64(p.counts + 8 * i0) });
        // SAFETY: i1 < 8 · row_bytes, inside the counts.
        let c1 = (i1 < bits).then(|| unsafe { m.ld_u64(p.counts + 8 * i1) });
        let mut v = 0u64;
        each_threshold!(t => {
            if (t as u32) < nt {
                let (above, below) = (p.one_above[t], p.zero_below[t]);
                let one = |c: Option<u64>| c.is_some_and(|c| c > above);
                let inv = |c: Option<u64>| c.is_some_and(|c| c > above || c < below);
                let mask = w.ballot(inv(c0)) as u64 | (w.ballot(inv(c1)) as u64) << 32;
                let val = w.ballot(one(c0)) as u64 | (w.ballot(one(c1)) as u64) << 32;
                v |= val;
                if lane == 0 {
                    // SAFETY: field 1 + t, word q < words, inside the book;
                    // the trailer's entry t after the nt + 1 fields.
                    unsafe {
                        m.st_u64(p.book + 8 * ((1 + t as u64) * words + q), mask);
                        m.add_u64(
                            p.book + 8 * ((1 + nt as u64) * words + t as u64),
                            mask.count_ones() as u64,
                        );
                    }
                }
            }
        });
        if lane == 0 {
            // SAFETY: field 0, word q, inside the book.
            unsafe { m.st_u64(p.book + 8 * q, v) };
        }
        q += nwarps;
    }
}
