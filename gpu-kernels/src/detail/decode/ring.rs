//! Streaming mode's ring of lines: one tensor's bytes fetched in aligned
//! 128-byte lines, ahead of the step that reads them.

use crate::detail::bits::WARP;
use crate::detail::step::{Source, shared_raw32};
use crate::detail::table::{window32, window64};
use crate::params::LINE;
use crate::simt::Machine;

/// A warp's view of one tensor's bytes `[src, src + len)` in the source, and
/// of the ring lines that hold them.
///
/// Lines are counted from the tensor's first line and positions from that
/// line's first byte, in 32 bits (a tensor's bits fit in 32 bits: the step
/// counts them so).
///
/// Q: why relative 32-bit positions rather than the source's addresses?
/// A: every stream read (five a lane a step on 2-byte chunks) and every
/// step's refill computed its line and ring slot in 64 bits from the
/// absolute address; streaming mode ran 35% more instructions than batch
/// mode on the same 4 KB rows (Nsight Compute, H200). Relative to the
/// first line, a read's ring address is one add and one mask.
pub(super) struct Ring {
    /// Shared-space address of the ring.
    pub(super) smem: u32,
    /// The ring's bytes less one (lines × 128 − 1, lines a power of two).
    mask: u32,
    /// The tensor's first line (absolute).
    first: u64,
    /// The tensor's byte 0 in its first line (`src % 128`).
    lead: u32,
    /// The first line's place in the ring, in bytes, before the mask
    /// (`first · 128`, wrapping).
    rbase: u32,
    /// One past the last line that may be fetched.
    pub(super) end_line: u32,
    /// Next line to fetch.
    fetched: u32,
    /// Fetch with loads and stores instead of `cp.async`.
    load_store: bool,
    /// Lines below this are resident (their copies completed).
    ready: u32,
}

impl Ring {
    /// Start streaming `[src, src + len)`.
    #[inline(always)]
    pub(super) fn new(smem: u32, lines: u32, src: u64, len: u64, load_store: bool) -> Self {
        let first = src / LINE;
        let lead = (src % LINE) as u32;
        Ring {
            smem,
            mask: lines * LINE as u32 - 1,
            first,
            lead,
            rbase: (first as u32).wrapping_mul(LINE as u32),
            end_line: (lead as u64 + len).div_ceil(LINE) as u32,
            fetched: 0,
            ready: 0,
            load_store,
        }
    }

    /// Line holding tensor byte `b`.
    #[inline(always)]
    pub(super) fn line_of(&self, b: u32) -> u32 {
        (self.lead + b) / LINE as u32
    }

    /// Issue copies of lines `[fetched, min(end_line, limit))`.
    #[inline(always)]
    pub(super) fn fetch_until<H: Machine>(&mut self, h: &H, limit: u32) {
        let stop = if limit < self.end_line {
            limit
        } else {
            self.end_line
        };
        if stop <= self.fetched {
            return;
        }
        // 8 pieces of 16 bytes per line, spread over the lanes.
        let pieces = (stop - self.fetched) * 8;
        let mut q = h.lane();
        while q < pieces {
            let line = self.fetched + q / 8;
            let part = (q % 8) * 16;
            let at = line * LINE as u32 + part;
            let dst = self.smem + (self.rbase.wrapping_add(at) & self.mask);
            let from = self.first * LINE + at as u64;
            // SAFETY: the line overlaps the tensor's slot (line < end_line),
            // and whole 128-byte lines of a slot lie in its allocation's
            // pages; dst is 16-aligned inside this warp's ring.
            unsafe {
                if self.load_store {
                    h.sts_v4(dst, h.ld_v4(from));
                } else {
                    h.cp16(dst, from);
                }
            }
            q += WARP;
        }
        h.commit();
        self.fetched = stop;
    }

    /// Make lines below `need` resident, then refill ahead: lines from
    /// `oldest` (the oldest line still to be read) up to a full ring.
    #[inline(always)]
    pub(super) fn ensure<H: Machine>(&mut self, h: &H, need: u32, oldest: u32) {
        if need > self.ready {
            if need > self.fetched {
                self.fetch_until(h, need);
            }
            h.wait_all();
            // Each lane waited for its own copies; the barrier publishes
            // every lane's copies to the whole warp.
            h.sync_warp();
            self.ready = self.fetched;
        }
        self.fetch_until(h, oldest + (self.mask + 1) / LINE as u32);
    }

    /// The u32 word at byte `a` of the tensor's first line on (`a % 4 ==
    /// 0`; `lead + b` for tensor byte `b`).
    #[inline(always)]
    pub(super) fn word<H: Machine>(&self, h: &H, a: u32) -> u32 {
        // SAFETY: inside this warp's ring (the mask).
        unsafe { h.lds_u32(self.smem + (self.rbase.wrapping_add(a) & self.mask)) }
    }

    /// The word holding tensor byte 0, aligned down.
    #[inline(always)]
    pub(super) fn first_word<H: Machine>(&self, h: &H) -> u32 {
        self.word(h, self.lead & !3)
    }

    /// `n ≤ 64` bits at bit `bit` of the tensor's stream (resident lines).
    #[inline(always)]
    pub(super) fn bits64<H: Machine>(&self, h: &H, bit: u32, n: u32) -> u64 {
        let a = self.lead * 8 + bit;
        let w = (a / 32) * 4;
        window64(
            self.word(h, w),
            self.word(h, w + 4),
            self.word(h, w + 8),
            a % 32,
            n,
        )
    }

    /// `n ≤ 32` bits at bit `bit` of the tensor's stream.
    #[inline(always)]
    pub(super) fn bits32<H: Machine>(&self, h: &H, bit: u32, n: u32) -> u32 {
        let a = self.lead * 8 + bit;
        let w = (a / 32) * 4;
        window32(self.word(h, w), self.word(h, w + 4), a % 32, n)
    }
}

/// The step's source in streaming mode: participation bits from the
/// participation buffer, payload through the ring.
pub(super) struct Streamed<'a, H> {
    pub(super) h: &'a H,
    pub(super) ring: Ring,
    pub(super) pbuf: u32,
}

impl<H: Machine> Source for Streamed<'_, H> {
    #[inline(always)]
    fn pbits(&self, k0: u32) -> u32 {
        // Inside the participation buffer, or (bits the caller masks off)
        // the first word of the ring after it.
        shared_raw32(self.h, self.pbuf, k0)
    }
    #[inline(always)]
    fn raw32(&self, bit: u32) -> u32 {
        self.ring.bits32(self.h, bit, 32)
    }
    #[inline(always)]
    fn raw64(&self, bit: u32) -> u64 {
        self.ring.bits64(self.h, bit, 64)
    }
    #[inline(always)]
    fn ready(&mut self, start: u32, end: u32) {
        if end > start {
            let need = self.ring.line_of((end - 1) / 8) + 1;
            let oldest = self.ring.line_of(start / 8);
            self.ring.ensure(self.h, need, oldest);
        }
    }
}
