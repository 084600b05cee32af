//! Streaming mode's ring of lines: one tensor's bytes fetched in aligned
//! 128-byte lines, ahead of the step that reads them.

use crate::detail::bits::WARP;
use crate::detail::step::{Source, shared_raw32};
use crate::detail::table::{window32, window64};
use crate::params::LINE;
use crate::simt::Machine;

/// A warp's view of one tensor's bytes `[src, src + len)` in the source, and
/// of the ring lines that hold them.
pub(super) struct Ring {
    /// Shared-space address of the ring.
    pub(super) smem: u32,
    /// Lines in the ring (a power of two).
    pub(super) lines: u64,
    /// Absolute address of the tensor's first byte.
    pub(super) src: u64,
    /// One past the last line that may be fetched.
    pub(super) end_line: u64,
    /// Next line to fetch.
    pub(super) fetched: u64,
    /// Fetch with loads and stores instead of `cp.async`.
    pub(super) load_store: bool,
    /// Lines below this are resident (their copies completed).
    pub(super) ready: u64,
}

impl Ring {
    /// Start streaming `[src, src + len)`.
    #[inline(always)]
    pub(super) fn new(smem: u32, lines: u32, src: u64, len: u64, load_store: bool) -> Self {
        let first = src / LINE;
        Ring {
            smem,
            lines: lines as u64,
            src,
            end_line: (src + len).div_ceil(LINE),
            fetched: first,
            ready: first,
            load_store,
        }
    }

    /// Line holding tensor byte `b`.
    #[inline(always)]
    pub(super) fn line_of(&self, b: u64) -> u64 {
        (self.src + b) / LINE
    }

    /// Issue copies of lines `[fetched, min(end_line, limit))`.
    #[inline(always)]
    pub(super) fn fetch_until<H: Machine>(&mut self, h: &H, limit: u64) {
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
        let mut q = h.lane() as u64;
        while q < pieces {
            let line = self.fetched + q / 8;
            let part = (q % 8) * 16;
            let dst = self.smem + ((line & (self.lines - 1)) * LINE + part) as u32;
            // SAFETY: the line overlaps the tensor's slot (line < end_line),
            // and whole 128-byte lines of a slot lie in its allocation's
            // pages; dst is 16-aligned inside this warp's ring.
            unsafe {
                if self.load_store {
                    h.sts_v4(dst, h.ld_v4(line * LINE + part));
                } else {
                    h.cp16(dst, line * LINE + part);
                }
            }
            q += WARP as u64;
        }
        h.commit();
        self.fetched = stop;
    }

    /// Make lines below `need` resident, then refill ahead: lines from
    /// `oldest` (the oldest line still to be read) up to a full ring.
    #[inline(always)]
    pub(super) fn ensure<H: Machine>(&mut self, h: &H, need: u64, oldest: u64) {
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
        self.fetch_until(h, oldest + self.lines);
    }

    /// The aligned u32 word holding absolute address `a` (`a % 4 == 0`).
    #[inline(always)]
    pub(super) fn word<H: Machine>(&self, h: &H, a: u64) -> u32 {
        let line = a / LINE;
        let addr = self.smem + ((line & (self.lines - 1)) * LINE + a % LINE) as u32;
        // SAFETY: inside this warp's ring.
        unsafe { h.lds_u32(addr) }
    }

    /// `n ≤ 64` bits at bit `bit` of the tensor's stream (resident lines).
    #[inline(always)]
    pub(super) fn bits64<H: Machine>(&self, h: &H, bit: u64, n: u32) -> u64 {
        let abs = self.src * 8 + bit;
        let w = (abs / 32) * 4;
        let shift = (abs % 32) as u32;
        window64(
            self.word(h, w),
            self.word(h, w + 4),
            self.word(h, w + 8),
            shift,
            n,
        )
    }

    /// `n ≤ 32` bits at bit `bit` of the tensor's stream.
    #[inline(always)]
    pub(super) fn bits32<H: Machine>(&self, h: &H, bit: u64, n: u32) -> u32 {
        let abs = self.src * 8 + bit;
        let w = (abs / 32) * 4;
        window32(self.word(h, w), self.word(h, w + 4), (abs % 32) as u32, n)
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
        self.ring.bits32(self.h, bit as u64, 32)
    }
    #[inline(always)]
    fn raw64(&self, bit: u32) -> u64 {
        self.ring.bits64(self.h, bit as u64, 64)
    }
    #[inline(always)]
    fn ready(&mut self, start: u32, end: u32) {
        if end > start {
            let need = self.ring.line_of((end as u64 - 1) / 8) + 1;
            let oldest = self.ring.line_of(start as u64 / 8);
            self.ring.ensure(self.h, need, oldest);
        }
    }
}
