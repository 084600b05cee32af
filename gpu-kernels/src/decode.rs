//! The decompression kernel: one warp per tensor (paper §4.3–4.4).
//!
//! Two modes, chosen by the host from the tensor length:
//!
//! - **Batch mode** (tensors up to a few KB, the common case). A warp takes
//!   its output rows 32 at a time (one lane loads each row's index, flag and
//!   offsets), packs as many whole tensors as fit into one half of its ring,
//!   and fetches all their lines with one group of `cp.async` copies. While
//!   that batch is in flight the warp decodes the previous batch from the
//!   other half: the two halves are the double-buffered workspace of the
//!   paper, and a batch amortises one PCIe round trip over several tensors.
//!   Each tensor's bytes then sit contiguously in shared memory, so a lane's
//!   bit offset is a 32-bit shared-memory address.
//! - **Streaming mode** (large tensors): one tensor at a time through the ring,
//!   described below.
//!
//! In streaming mode, per tensor a warp
//! 1. streams the tensor's participation bits into its *participation
//!    buffer* (shared memory), through its *ring* of 128-byte lines;
//! 2. for the fixed-stride layout, computes the encoded length `E` from the
//!    participation bits alone (a warp reduction of the saved bits), so every
//!    later read is bounded by `E`;
//! 3. decodes it with the same step as batch mode ([`crate::step`], 16
//!    output bytes per lane), reading the stream through the ring, which is
//!    refilled ahead with `cp.async` as the steps advance.
//!
//! The body is written over the [`crate::simt`] traits: on the GPU every
//! trait call is one PTX instruction, and `host/kernel_emu.rs` runs the
//! whole kernel, batch and streaming, on the CPU.
//!
//! Q: why a ring of whole 128-byte lines?
//! A: PCIe and DRAM move 128-byte lines; a misaligned or partial request
//! costs a whole transaction anyway. Each line that overlaps the tensor's
//! bytes is fetched exactly once, aligned, and never past the last line that
//! holds a byte of the tensor (bounded copies, paper §4.4). Whole lines can
//! be fetched with 16-byte `cp.async.cg`, which bypasses L1 and lets the warp
//! keep decoding while the next lines arrive.
//!
//! Q: why is the error path so careful?
//! A: the input may be corrupt. Every read is bounded by the tensor's slot
//! (its offsets in the packed layout, `L` in the fixed-stride layout) before
//! it is issued; a tensor whose bits disagree with its slot is reported in
//! the status word and its output row is zeroed, never decoded into garbage.

use crate::bits::WARP;
use crate::book::Layout;
use crate::params::{
    DECODE_MODE_IDEAL, DecodeParams, FETCH_LOAD_STORE, STATUS_BAD_INDEX, STATUS_CORRUPT,
};
use crate::simt::{Book, Machine, inclusive_scan, shfl_idx64, warp_sum64};
use crate::step::{self, Contig, Geometry, RowStore, Source, shared_raw32};
use crate::table::{window32, window64};

const LINE: u64 = 128;

/// Where one warp works: its number among the grid's warps and its
/// workspace (participation buffer, then ring) in shared memory.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    /// This warp's number.
    pub warp: u64,
    /// Warps in the grid.
    pub warps: u64,
    /// Shared address of this warp's workspace
    /// ([`crate::params::workspace_bytes`] bytes).
    pub workspace: u32,
}

/// A warp's view of one tensor's bytes `[src, src + len)` in the source, and
/// of the ring lines that hold them.
struct Ring {
    /// Shared-space address of the ring.
    smem: u32,
    /// Lines in the ring (a power of two).
    lines: u64,
    /// Absolute address of the tensor's first byte.
    src: u64,
    /// One past the last line that may be fetched.
    end_line: u64,
    /// Next line to fetch.
    fetched: u64,
    /// Fetch with loads and stores instead of `cp.async`.
    load_store: bool,
    /// Lines below this are resident (their copies completed).
    ready: u64,
}

impl Ring {
    /// Start streaming `[src, src + len)`.
    #[inline(always)]
    fn new(smem: u32, lines: u32, src: u64, len: u64, load_store: bool) -> Self {
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
    fn line_of(&self, b: u64) -> u64 {
        (self.src + b) / LINE
    }

    /// Issue copies of lines `[fetched, min(end_line, limit))`.
    #[inline(always)]
    fn fetch_until<H: Machine>(&mut self, h: &H, limit: u64) {
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
    fn ensure<H: Machine>(&mut self, h: &H, need: u64, oldest: u64) {
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
    fn word<H: Machine>(&self, h: &H, a: u64) -> u32 {
        let line = a / LINE;
        let addr = self.smem + ((line & (self.lines - 1)) * LINE + a % LINE) as u32;
        // SAFETY: inside this warp's ring.
        unsafe { h.lds_u32(addr) }
    }

    /// `n ≤ 64` bits at bit `bit` of the tensor's stream (resident lines).
    #[inline(always)]
    fn bits64<H: Machine>(&self, h: &H, bit: u64, n: u32) -> u64 {
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
    fn bits32<H: Machine>(&self, h: &H, bit: u64, n: u32) -> u32 {
        let abs = self.src * 8 + bit;
        let w = (abs / 32) * 4;
        window32(self.word(h, w), self.word(h, w + 4), (abs % 32) as u32, n)
    }
}

/// The step's source in streaming mode: participation bits from the
/// participation buffer, payload through the ring.
struct Streamed<'a, H> {
    h: &'a H,
    ring: Ring,
    pbuf: u32,
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

/// Per-launch constants and the warp's workspace.
struct Ctx<'a, H, B> {
    h: &'a H,
    book: &'a B,
    p: DecodeParams,
    chunks: u64,
    pwords: u64,
    raw_aligned: bool,
    vec_out: bool,
    load_store: bool,
    ring: u32,
    pbuf: u32,
    geo: Geometry,
}

/// One tensor of a batch, held by one lane (lane `b` holds tensor `b`).
///
/// Q: why are four fields packed into one word?
/// A: a batch's descriptor is broadcast lane by lane (one shuffle per 32-bit
/// word) and three of them are live at once; packed, an item is six words
/// instead of nine: fewer shuffles per tensor and fewer registers (the
/// kernel sits at its register cap). Line counts fit a byte: a batch-mode
/// half holds at most 128 lines (the host caps it).
#[derive(Clone, Copy, Default)]
struct Item {
    /// Output row.
    row: u64,
    /// Global address of the tensor's first stored byte.
    src: u64,
    /// Stored bytes known to be needed (0 while a fixed-stride tensor's
    /// length is still to be derived).
    len: u32,
    /// Byte 0: first ring line of the tensor's region, within its half;
    /// byte 1: lines reserved for the region; byte 2: lines fetched so far;
    /// byte 3: [`ITEM_RAW`], [`ITEM_ENCODED`], or a `STATUS_*` error code +
    /// 8.
    meta: u32,
}

const ITEM_RAW: u32 = 0;
const ITEM_ENCODED: u32 = 1;
const ITEM_BAD_INDEX: u32 = 8 + STATUS_BAD_INDEX as u32;
const ITEM_CORRUPT: u32 = 8 + STATUS_CORRUPT as u32;
const ITEM_NONE: u32 = 255;

impl Item {
    /// Broadcast lane `src`'s item to the warp.
    #[inline(always)]
    fn shfl<H: Machine>(&self, h: &H, src: u32) -> Item {
        Item {
            row: shfl_idx64(h, self.row, src),
            src: shfl_idx64(h, self.src, src),
            len: h.shfl_idx(self.len, src),
            meta: h.shfl_idx(self.meta, src),
        }
    }

    /// The "no tensor" item.
    #[inline(always)]
    fn none() -> Item {
        Item {
            meta: ITEM_NONE << 24,
            ..Item::default()
        }
    }

    #[inline(always)]
    fn region(&self) -> u32 {
        self.meta & 0xff
    }
    #[inline(always)]
    fn span(&self) -> u32 {
        (self.meta >> 8) & 0xff
    }
    #[inline(always)]
    fn fetched(&self) -> u32 {
        (self.meta >> 16) & 0xff
    }
    #[inline(always)]
    fn code(&self) -> u32 {
        self.meta >> 24
    }
    #[inline(always)]
    fn set_region(&mut self, v: u32) {
        self.meta = (self.meta & !0xff) | (v & 0xff);
    }
    #[inline(always)]
    fn set_span(&mut self, v: u32) {
        self.meta = (self.meta & !0xff00) | ((v & 0xff) << 8);
    }
    #[inline(always)]
    fn set_fetched(&mut self, v: u32) {
        self.meta = (self.meta & !0xff_0000) | ((v & 0xff) << 16);
    }
    #[inline(always)]
    fn set_code(&mut self, v: u32) {
        self.meta = (self.meta & 0xff_ffff) | (v << 24);
    }
}

/// The warp's current window of 32 output rows (one per lane) and the first
/// lane not yet batched.
///
/// Q: why does window `r` of warp `w` hold rows `w + W·(32r + lane)` rather
/// than 32 consecutive rows?
/// A: so that, at any moment, the warps of the grid work on one narrow band
/// of rows. Reading pinned host memory goes through the host's IOMMU: a band
/// sweeping through memory keeps its translations cached, while 32
/// consecutive rows per warp scatter the warps over hundreds of MB and cap
/// zero-copy reads near 30 GB/s (measured on the H200).
struct Window {
    warp: u64,
    warps: u64,
    round: u64,
    s: u32,
    item: Item,
}

impl Window {
    /// Output row of `lane` in the current round.
    #[inline(always)]
    fn row(&self, lane: u32) -> u64 {
        self.warp + self.warps * (self.round * 32 + lane as u64)
    }
}

/// Lines covering `len` bytes from address `src` (0 for no bytes).
#[inline(always)]
fn lines(src: u64, len: u64) -> u32 {
    if len == 0 {
        0
    } else {
        ((src + len).div_ceil(LINE) - src / LINE) as u32
    }
}

impl<H: Machine, B: Book> Ctx<'_, H, B> {
    /// 32-bit read of `n` bits at bit `bit` of the bytes at shared address
    /// `base` (any alignment).
    #[inline(always)]
    fn sbits32(&self, base: u32, bit: u32, n: u32) -> u32 {
        let a = base * 8 + bit;
        let w = (a >> 5) << 2;
        // SAFETY: inside this warp's ring (plus its 16 bytes of padding).
        let (w0, w1) = unsafe { (self.h.lds_u32(w), self.h.lds_u32(w + 4)) };
        window32(w0, w1, a & 31, n)
    }

    /// Bits a matching chunk `k` saves (its width minus its payload width),
    /// from the decode book.
    #[inline(always)]
    fn saved(&self, k: u32) -> u32 {
        // SAFETY: k < K, inside the book's PARAMS field.
        let x = unsafe { self.book.ld_u32(self.geo.layout.params + 4 * k) };
        (x >> 24) - ((x >> 16) & 0xff)
    }

    /// The tensor that output row `i < count` receives.
    #[inline(always)]
    fn tensor(&self, i: u64) -> u64 {
        let (h, p) = (self.h, &self.p);
        if p.index == 0 {
            return p.first + i;
        }
        // Q: why two 4-byte loads for a u64 index?
        // A: one code path for both widths (the low word, and the high word
        // only for u64) costs fewer registers than two, and the kernel is at
        // its register cap; an index is read once per output row.
        let wide = p.index_u32 == 0;
        let a = p.index + (i << (2 + wide as u64));
        // SAFETY: i < count = index length; entries are 4 or 8 bytes, and
        // the high word is read only for 8-byte ones.
        unsafe {
            let lo = h.ld_u32(a) as u64;
            if wide {
                lo | (h.ld_u32(a + 4) as u64) << 32
            } else {
                lo
            }
        }
    }

    /// Fill output row `out` with zeros.
    #[inline(always)]
    fn zero_row(&self, out: u64) {
        // Q: why a barrier first?
        // A: a corrupt tensor is found at the end of its decode, after some
        // lanes stored decoded bytes; lane `j` zeroes other lanes' bytes,
        // so every lane's stores must come first.
        self.h.sync_warp();
        let l = self.p.row_bytes;
        let mut j = self.h.lane() as u64;
        while j < l {
            // SAFETY: j < L, inside the row.
            unsafe { self.h.st_u8(out + j, 0) };
            j += WARP as u64;
        }
    }

    /// Report `code` for output row `i` (one lane) and zero the row.
    #[inline(always)]
    fn fail(&self, i: u64, out: u64, code: u64) {
        if self.h.lane() == 0 {
            let s = self.p.status;
            // SAFETY: status holds two u64 (host-allocated).
            unsafe {
                self.h.or_u64(s, code);
                self.h.min_u64(s + 8, i);
            }
        }
        self.zero_row(out);
    }

    /// Decode with the step, reading through `src`, into row `out`.
    #[inline(always)]
    fn step<S: Source>(&self, src: &mut S, e_bytes: u32, out: u64) -> bool {
        let (g, h) = (&self.geo, self.h);
        // SAFETY: the row is inside the launch's output (`run`'s contract).
        let mut sink = unsafe { RowStore::new(h, out) };
        let k = &mut sink;
        // SAFETY: `src` holds the tensor's stored bytes; the book and entry
        // table are the dataset's (the host built both from one codebook).
        unsafe {
            match self.p.chunk {
                1 => step::decode_row::<1, _, _, _, _, _>(h, src, self.book, h, g, e_bytes, k),
                2 => step::decode_row::<2, _, _, _, _, _>(h, src, self.book, h, g, e_bytes, k),
                4 => step::decode_row::<4, _, _, _, _, _>(h, src, self.book, h, g, e_bytes, k),
                _ => step::decode_row::<8, _, _, _, _, _>(h, src, self.book, h, g, e_bytes, k),
            }
        }
    }

    // ---------------------------------------------------------------------
    // Streaming mode

    /// Copy `L` raw bytes at `src` to output row `out` through the ring.
    #[inline(always)]
    fn copy_raw(&self, src: u64, out: u64) {
        let l = self.p.row_bytes;
        let h = self.h;
        let mut ring = Ring::new(self.ring, self.p.ring_lines, src, l, self.load_store);
        let lane = h.lane() as u64;
        let mut base = 0;
        while base < l {
            let end = if base + 128 < l { base + 128 } else { l };
            ring.ensure(h, ring.line_of(end - 1) + 1, ring.line_of(base));
            let b = base + lane * 4;
            if b < l {
                let n = if b + 4 <= l { 4 } else { l - b };
                let v = ring.bits32(h, b * 8, (n * 8) as u32);
                let a = out + b;
                if n == 4 && self.raw_aligned {
                    // SAFETY: 4-aligned (row base and stride), inside the row.
                    unsafe { h.st_u32(a, v) };
                } else {
                    for j in 0..n {
                        // SAFETY: b + j < L.
                        unsafe { h.st_u8(a + j, v >> (8 * j)) };
                    }
                }
            }
            base = end;
        }
    }

    /// Decode the encoded tensor at `[src, src + slot)` into row `out`.
    /// `packed` says whether `slot` is the exact stored length (packed
    /// layout) or only an upper bound (`L`, fixed-stride). Returns false when
    /// the stored bits are inconsistent (nothing out of bounds was read).
    #[inline(always)]
    fn decode_streamed(&self, src: u64, slot: u64, packed: bool, out: u64) -> bool {
        let h = self.h;
        let k_total = self.chunks;
        let l = self.p.row_bytes;
        let lane = h.lane() as u64;
        let pbytes = k_total.div_ceil(8);
        if pbytes > slot || slot > l || (packed && slot == l) {
            return false;
        }
        // Phase 1: participation bits into the participation buffer. For the
        // packed layout the whole slot is known; for fixed-stride only the
        // participation bytes may be fetched before E is known.
        let mut ring = Ring::new(
            self.ring,
            self.p.ring_lines,
            src,
            if packed { slot } else { pbytes },
            self.load_store,
        );
        ring.ensure(h, ring.line_of(pbytes - 1) + 1, ring.line_of(0));
        let mut w = lane;
        while w < self.pwords {
            let first = w * 32;
            let n = if first + 32 <= k_total {
                32
            } else {
                k_total - first
            };
            let v = ring.bits32(h, first, n as u32);
            // SAFETY: w < pbuf_words.
            unsafe { h.sts_u32(self.pbuf + (w * 4) as u32, v) };
            w += WARP as u64;
        }
        h.sync_warp();

        // Phase 2 (fixed-stride): E from the participation bits alone.
        let e_bytes = if packed {
            slot
        } else {
            let mut saved = 0u64;
            let mut k = lane;
            while k < k_total {
                // SAFETY: k / 32 < pbuf_words.
                let pw = unsafe { h.lds_u32(self.pbuf + (k / 32 * 4) as u32) };
                if pw >> (k % 32) & 1 == 1 {
                    saved += self.saved(k as u32) as u64;
                }
                k += WARP as u64;
            }
            let saved = warp_sum64(h, saved);
            let e = (k_total + 8 * l - saved).div_ceil(8);
            if e >= l {
                return false;
            }
            ring.end_line = ring.line_of(e - 1) + 1;
            e
        };

        // Phase 3: the step, streaming the payload through the ring.
        let mut s = Streamed {
            h,
            ring,
            pbuf: self.pbuf,
        };
        self.step(&mut s, e_bytes as u32, out)
    }

    /// Benchmark baseline: fetch the stored bytes, write `L` bytes.
    #[inline(always)]
    fn ideal(&self, src: u64, slot: u64, out: u64) {
        let h = self.h;
        let mut ring = Ring::new(self.ring, self.p.ring_lines, src, slot, self.load_store);
        let mut b = 0;
        while b < slot {
            let end = if b + (self.p.ring_lines as u64 - 1) * LINE < slot {
                b + (self.p.ring_lines as u64 - 1) * LINE
            } else {
                slot
            };
            ring.ensure(h, ring.line_of(end - 1) + 1, ring.line_of(b));
            b = end;
        }
        let v = ring.word(h, (src / 4) * 4);
        let l = self.p.row_bytes;
        let mut j = h.lane() as u64 * 4;
        while j + 4 <= l {
            // SAFETY: inside the row; rows are 4-aligned in benchmarks
            // (checked by the host for this mode).
            unsafe { h.st_u32(out + j, v) };
            j += 128;
        }
    }

    /// Streaming mode main loop: one tensor at a time per warp.
    #[inline(always)]
    fn run_streaming(&self, warp: u64, warps: u64) {
        let (h, p) = (self.h, &self.p);
        let packed = p.offsets != 0;
        let mut i = warp;
        while i < p.count {
            let out = p.out + i * p.out_stride;
            let t = self.tensor(i);
            if t >= p.rows {
                self.fail(i, out, STATUS_BAD_INDEX);
                i += warps;
                continue;
            }
            // SAFETY: t < rows: flag byte t / 8 and offsets t, t + 1 exist.
            let encoded = unsafe { h.ld_u8(p.flags + t / 8) } >> (t % 8) & 1 == 1;
            let (start, slot) = if packed {
                // SAFETY: as above.
                let (a, b) =
                    unsafe { (h.ld_u64(p.offsets + t * 8), h.ld_u64(p.offsets + t * 8 + 8)) };
                (a.wrapping_sub(p.offset_base), b.wrapping_sub(a))
            } else {
                (t * p.row_bytes, p.row_bytes)
            };
            let src = p.src + start;
            if p.mode == DECODE_MODE_IDEAL {
                self.ideal(src, slot, out);
            } else if !encoded {
                if packed && slot != p.row_bytes {
                    self.fail(i, out, STATUS_CORRUPT);
                } else {
                    self.copy_raw(src, out);
                }
            } else if !self.decode_streamed(src, slot, packed, out) {
                self.fail(i, out, STATUS_CORRUPT);
            }
            // No copy may still be in flight into the ring when the next
            // tensor starts (an early exit on corrupt data leaves some
            // behind).
            h.wait_all();
            h.sync_warp();
            i += warps;
        }
    }

    // ---------------------------------------------------------------------
    // Batch mode

    /// Describe output row `row` (lane-local; `ITEM_NONE` past the end).
    #[inline(always)]
    fn load_item(&self, row: u64) -> Item {
        let (h, p) = (self.h, &self.p);
        let mut it = Item {
            row,
            ..Item::none()
        };
        if row >= p.count {
            return it;
        }
        let t = self.tensor(row);
        if t >= p.rows {
            it.set_code(ITEM_BAD_INDEX);
            return it;
        }
        let l = p.row_bytes;
        // SAFETY: t < rows: flag byte t / 8, offsets t and t + 1, length t.
        let encoded = unsafe { h.ld_u8(p.flags + t / 8) } >> (t % 8) & 1 == 1;
        let pbytes = self.chunks.div_ceil(8);
        let (start, known) = if p.offsets != 0 {
            let o = p.offsets + t * 8;
            // SAFETY: as above.
            let (a, b) = unsafe { (h.ld_u64(o), h.ld_u64(o + 8)) };
            (a.wrapping_sub(p.offset_base), Some(b.wrapping_sub(a)))
        } else if p.lengths != 0 {
            // SAFETY: as above.
            (t * l, Some(unsafe { h.ld_u32(p.lengths + t * 4) } as u64))
        } else {
            (t * l, if encoded { None } else { Some(l) })
        };
        it.src = p.src + start;
        let ideal = p.mode == DECODE_MODE_IDEAL;
        match known {
            Some(n) => {
                let ok = if ideal {
                    n <= l
                } else if encoded {
                    n >= pbytes && n < l
                } else {
                    n == l
                };
                if !ok {
                    it.set_code(ITEM_CORRUPT);
                    return it;
                }
                it.len = n as u32;
                it.set_span(lines(it.src, n));
                it.set_code(if encoded && !ideal {
                    ITEM_ENCODED
                } else {
                    ITEM_RAW
                });
            }
            None => {
                // Fixed-stride, encoded, length to be derived: reserve the
                // most an encoded tensor can take (L - 1 bytes).
                it.len = 0;
                it.set_span(lines(it.src, l - 1));
                it.set_code(ITEM_ENCODED);
            }
        }
        it
    }

    /// Issue copies of lines `[it.fetched, upto)` of (broadcast) item `it`
    /// into its region of the half at shared address `half`.
    #[inline(always)]
    fn fetch_item(&self, half: u32, it: &Item, upto: u32) {
        if upto <= it.fetched() {
            return;
        }
        let h = self.h;
        let first_line = it.src / LINE;
        let pieces = (upto - it.fetched()) * 8;
        let mut q = h.lane();
        while q < pieces {
            let rel = it.fetched() + q / 8;
            let part = (q % 8) * 16;
            let dst = half + (it.region() + rel) * LINE as u32 + part;
            let src = (first_line + rel as u64) * LINE + part as u64;
            // SAFETY: the line overlaps the tensor's stored bytes (rel <
            // lines(src, len)); dst is 16-aligned inside the region.
            unsafe {
                if self.load_store {
                    h.sts_v4(dst, h.ld_v4(src));
                } else {
                    h.cp16(dst, src);
                }
            }
            q += WARP;
        }
    }

    /// Copy `L` raw bytes held at shared address `base` to row `out`.
    #[inline(always)]
    fn copy_contig(&self, base: u32, out: u64) {
        let h = self.h;
        let l = self.p.row_bytes as u32;
        let lane = h.lane();
        if self.vec_out {
            // Q: why 16 bytes per lane?
            // A: one 512-byte store per warp instruction; the source may sit
            // at any byte offset in shared memory, so each lane funnels five
            // aligned words into four.
            let mut j = lane * 16;
            while j < l {
                let a = base + j;
                let w = a & !3;
                let sh = (a & 3) * 8;
                // SAFETY: inside the ring region (+ padding).
                let x: [u32; 5] = core::array::from_fn(|i| unsafe { h.lds_u32(w + 4 * i as u32) });
                let f = |i: usize| {
                    if sh == 0 {
                        x[i]
                    } else {
                        (x[i] >> sh) | (x[i + 1] << (32 - sh))
                    }
                };
                // SAFETY: out row is 16-aligned with L % 16 == 0 (vec_out).
                unsafe { h.st_v4(out + j as u64, [f(0), f(1), f(2), f(3)]) };
                j += 512;
            }
        } else {
            let mut j = lane * 4;
            while j < l {
                let n = if j + 4 <= l { 4 } else { l - j };
                let v = self.sbits32(base, j * 8, n * 8);
                if n == 4 && self.raw_aligned {
                    // SAFETY: 4-aligned, inside the row.
                    unsafe { h.st_u32(out + j as u64, v) };
                } else {
                    for b in 0..n {
                        // SAFETY: j + b < L.
                        unsafe { h.st_u8(out + (j + b) as u64, v >> (8 * b)) };
                    }
                }
                j += 128;
            }
        }
    }

    /// Next batch from the window of rows: lanes `[0, count)` of the result
    /// hold its items, regions assigned within a half of `half_lines`.
    #[inline(always)]
    fn form_batch(&self, w: &mut Window, half_lines: u32) -> (Item, u32) {
        let h = self.h;
        let lane = h.lane();
        loop {
            let left = h.ballot(lane >= w.s && w.item.code() != ITEM_NONE);
            if left == 0 {
                w.round += 1;
                if w.row(0) >= self.p.count {
                    return (Item::none(), 0);
                }
                w.item = self.load_item(w.row(lane));
                w.s = 0;
                continue;
            }
            let mine = lane >= w.s && w.item.code() != ITEM_NONE;
            let sp = if mine { w.item.span() } else { 0 };
            let incl = inclusive_scan(h, sp);
            let fits = mine && incl <= half_lines;
            let count = h.ballot(fits).count_ones();
            let mut placed = w.item;
            placed.set_region(incl - sp);
            placed.set_fetched(0);
            let got = placed.shfl(h, w.s + if lane < count { lane } else { 0 });
            let item = if lane < count { got } else { Item::none() };
            w.s += count;
            return (item, count);
        }
    }

    /// First fetch of a batch: whole tensors whose length is known, the
    /// participation bytes of those still to be derived.
    #[inline(always)]
    fn fetch_batch(&self, half: u32, batch: &mut Item, count: u32) {
        let h = self.h;
        let pbytes = self.chunks.div_ceil(8);
        let lane = h.lane();
        for b in 0..count {
            let it = batch.shfl(h, b);
            if it.code() > ITEM_ENCODED {
                continue;
            }
            let upto = if it.len == 0 {
                lines(it.src, pbytes)
            } else {
                it.span()
            };
            self.fetch_item(half, &it, upto);
            if lane == b {
                batch.set_fetched(upto);
            }
        }
        h.commit();
    }

    /// Fixed-stride tensors with no length table: derive each encoded
    /// tensor's length from its (resident) participation bits, then fetch
    /// the rest of it.
    #[inline(always)]
    fn derive_batch(&self, half: u32, batch: &mut Item, count: u32) {
        let h = self.h;
        let lane = h.lane();
        let k_total = self.chunks as u32;
        let l = self.p.row_bytes;
        for b in 0..count {
            let it = batch.shfl(h, b);
            if it.code() != ITEM_ENCODED || it.len != 0 {
                continue;
            }
            let base = half + it.region() * LINE as u32 + (it.src % LINE) as u32;
            let mut saved = 0u64;
            let mut k = lane;
            while k < k_total {
                if self.sbits32(base, k, 1) == 1 {
                    saved += self.saved(k) as u64;
                }
                k += WARP;
            }
            let saved = warp_sum64(h, saved);
            let e = (k_total as u64 + 8 * l - saved).div_ceil(8);
            let mut it2 = it;
            if e >= l {
                it2.set_code(ITEM_CORRUPT);
            } else {
                it2.len = e as u32;
                let upto = lines(it.src, e);
                self.fetch_item(half, &it2, upto);
                it2.set_fetched(upto);
            }
            if lane == b {
                *batch = it2;
            }
        }
        h.commit();
    }

    /// Decode (or, in ideal mode, write) every tensor of a resident batch.
    #[inline(always)]
    fn finish_batch(&self, half: u32, batch: &Item, count: u32) {
        let ideal = self.p.mode == DECODE_MODE_IDEAL;
        for b in 0..count {
            let it = batch.shfl(self.h, b);
            let out = self.p.out + it.row * self.p.out_stride;
            let base = half + it.region() * LINE as u32 + (it.src % LINE) as u32;
            match it.code() {
                ITEM_RAW if ideal => self.write_ideal(base, out),
                ITEM_RAW => self.copy_contig(base, out),
                ITEM_ENCODED => {
                    // SAFETY: the tensor's stored bytes are resident at
                    // `base`, followed by the rest of the half or the warp's
                    // 16 bytes of padding.
                    let mut src = unsafe { Contig::new(self.h, base) };
                    if !self.step(&mut src, it.len, out) {
                        self.fail(it.row, out, STATUS_CORRUPT);
                    }
                }
                ITEM_BAD_INDEX => self.fail(it.row, out, STATUS_BAD_INDEX),
                _ => self.fail(it.row, out, STATUS_CORRUPT),
            }
        }
    }

    /// Ideal mode: write `L` bytes from the region without decoding.
    #[inline(always)]
    fn write_ideal(&self, base: u32, out: u64) {
        let h = self.h;
        let l = self.p.row_bytes as u32;
        let mut j = h.lane() * 4;
        // SAFETY: inside the region.
        let v = unsafe { h.lds_u32(base & !3) };
        while j + 4 <= l {
            // SAFETY: inside the row (4-aligned rows in this mode).
            unsafe { h.st_u32(out + j as u64, v) };
            j += 128;
        }
    }

    /// Batch mode main loop: form, fetch, and decode batches, two halves of
    /// the ring in flight at once.
    #[inline(always)]
    fn run_batches(&self, warp: u64, warps: u64) {
        let h = self.h;
        let half_lines = self.p.ring_lines / 2;
        // Shared address of half `k` (arithmetic, not an array: a runtime
        // index into an array would put it in local memory).
        let half = |k: u32| self.ring + k * half_lines * LINE as u32;
        let derive = self.p.offsets == 0 && self.p.lengths == 0 && self.p.mode != DECODE_MODE_IDEAL;
        let mut w = Window {
            warp,
            warps,
            round: 0,
            s: 0,
            item: Item::default(),
        };
        w.item = self.load_item(w.row(h.lane()));
        let mut k = 0u32;
        let (mut cur, mut n) = self.form_batch(&mut w, half_lines);
        self.fetch_batch(half(k), &mut cur, n);
        while n > 0 {
            if derive {
                h.wait_all();
                h.sync_warp();
                self.derive_batch(half(k), &mut cur, n);
            }
            let (mut next, m) = self.form_batch(&mut w, half_lines);
            self.fetch_batch(half(k ^ 1), &mut next, m);
            // Everything but the batch just issued has landed.
            h.wait_all_but_last();
            h.sync_warp();
            self.finish_batch(half(k), &cur, n);
            // The next fetch into this half must not overtake the reads
            // above (lanes read each other's copies).
            h.sync_warp();
            cur = next;
            n = m;
            k ^= 1;
        }
        h.wait_all();
    }
}

/// Kernel body for one warp (see [`DecodeParams`]; every address in `p` is
/// a global one).
///
/// # Safety
/// The parameter block describes valid buffers (the host launcher checks
/// sizes): `src` covers every slot, `offsets`, `flags`, `table`, `index`,
/// `out` and `status` have the lengths the parameters imply; `book` holds
/// the dataset's decode book (in shared memory in batch mode); the warp's
/// workspace at `at.workspace` holds [`crate::params::workspace_bytes`]
/// bytes of shared memory.
#[inline(always)]
pub unsafe fn run<H: Machine, B: Book>(h: &H, book: &B, p: DecodeParams, batch: bool, at: Launch) {
    // Chunk sizes are powers of two (1, 2, 4, 8): shifts and masks, no
    // division (and no division-by-zero panic path in the PTX).
    let shift = p.chunk.trailing_zeros() & 3;
    let cmask = (1u64 << shift) - 1;
    let chunks = (p.row_bytes + cmask) >> shift;
    let ctx = Ctx {
        h,
        book,
        p,
        chunks,
        pwords: chunks.div_ceil(32),
        raw_aligned: p.out.is_multiple_of(4) && p.out_stride.is_multiple_of(4),
        vec_out: p.out.is_multiple_of(16)
            && p.out_stride.is_multiple_of(16)
            && p.row_bytes.is_multiple_of(16),
        load_store: p.fetch == FETCH_LOAD_STORE,
        pbuf: at.workspace,
        ring: at.workspace + p.pbuf_words * 4,
        geo: Geometry {
            chunks: chunks as u32,
            row_bytes: p.row_bytes as u32,
            layout: Layout::new(chunks as u32, p.chunk),
            entries: p.table,
            flags: p.decode_flags,
        },
    };
    if batch {
        ctx.run_batches(at.warp, at.warps);
    } else {
        ctx.run_streaming(at.warp, at.warps);
    }
}
