//! Batch mode: whole tensors per half of the ring, several per batch,
//! double-buffered (see the module above).

use super::{Ctx, LINE};
use crate::detail::bits::WARP;
use crate::detail::step::Contig;
use crate::params::{STATUS_BAD_INDEX, STATUS_CORRUPT};
use crate::simt::{Book, Machine, inclusive_scan, shfl_idx64, warp_sum64};

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

impl<H: Machine, B: Book, const CL: bool> Ctx<'_, H, B, CL> {
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
        let (start, known) = if self.packed() {
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
        let ideal = self.ideal_mode();
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
                // Q: can a tensor be larger than the half?
                // A: the host sizes the half by the largest stored tensor
                // it knows of; one larger (offsets or lengths that changed
                // after that) is reported, never fetched: it would overrun
                // the half, and it could never join a batch.
                let span = lines(it.src, n);
                if span > p.ring_lines / 2 {
                    it.set_code(ITEM_CORRUPT);
                    return it;
                }
                it.len = n as u32;
                it.set_span(span);
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
        // Q: which 16-byte pieces of a tensor's first and last lines are
        // skipped, and why not all that hold none of its bytes?
        // A: over PCIe the link carries what is read, but a partly read
        // line costs more than its bytes: measured on the H200 (zero-copy,
        // 100000 rows), reading only the pieces that hold the tensor made
        // gathers 2–20% faster and fixed-stride ranges of 256-byte rows
        // (24–64 stored bytes in the last line) 1.5× faster, but packed
        // ranges of short rows 8–21% slower and fixed-stride ranges of
        // 1024-byte rows at 96 stored bytes 13–16% slower. Our reading: a
        // line shared with the next tensor is then fetched in two parts
        // where the whole line was read once and then hit in L2, and a
        // line's sectors read apart cost more than the line read whole.
        // So, for stored bytes in host memory (`self.trim`, decided once
        // per launch): a gather (whose neighbours nobody reads) skips every
        // piece outside the tensor; a fixed-stride range trims its last
        // line only when the tensor holds at most 64 bytes of it; a packed
        // range reads whole lines. While a fixed-stride tensor's length is
        // still to be derived (`len` 0), its lines are read whole. Device
        // memory is read whole-line with no test: its decode is bound by
        // instruction issue, and per-tensor tests cost it 4–7% (measured).
        if self.trim && it.len != 0 {
            let gather = self.p.index != 0;
            let tail = (it.src + it.len as u64) % LINE;
            if gather || (tail != 0 && tail <= 64) {
                let lo = if gather { it.src } else { 0 };
                let hi = it.src + it.len as u64;
                self.fetch_pieces::<true>(half, it, upto, lo, hi);
                return;
            }
        }
        self.fetch_pieces::<false>(half, it, upto, 0, 0);
    }

    /// Issue the copies of [`Ctx::fetch_item`]: the 16-byte pieces of lines
    /// `[it.fetched, upto)`, only those overlapping `[lo, hi)` when `TRIM`.
    #[inline(always)]
    fn fetch_pieces<const TRIM: bool>(&self, half: u32, it: &Item, upto: u32, lo: u64, hi: u64) {
        let h = self.h;
        let pieces = (upto - it.fetched()) * 8;
        // Q: why addresses stepped by 512 bytes rather than derived from
        // the piece's index?
        // A: piece `q` of the lines from `fetched` on is 16 bytes at `16q`
        // past their first byte, in the ring as in memory (a tensor's
        // lines are consecutive in its region), and a warp takes 32 pieces
        // a round: two adds a round instead of a line and an offset
        // (sm_90 SASS: 21–22 instructions a round → 15, trimmed 32 → 26;
        // a 768-byte bf16 row takes two rounds).
        let first = (it.src / LINE + it.fetched() as u64) * LINE;
        let mut dst = half + (it.region() + it.fetched()) * LINE as u32 + 16 * h.lane();
        let mut src = first + 16 * h.lane() as u64;
        let mut q = h.lane();
        while q < pieces {
            if !TRIM || (src + 16 > lo && src < hi) {
                // SAFETY: the piece lies in a line that overlaps the
                // tensor's stored bytes (q < pieces: lines before `upto`),
                // inside its 16-aligned allocation; dst is 16-aligned
                // inside the region.
                unsafe {
                    if self.load_store {
                        h.sts_v4(dst, h.ld_v4(src));
                    } else {
                        h.cp16(dst, src);
                    }
                }
            }
            q += WARP;
            dst += 16 * WARP;
            src += 16 * WARP as u64;
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
    ///
    /// `GROUPS` (tensors a warp: 1, 2 or 4): a multiple of `GROUPS`
    /// tensors when at least that many fit (the rest wait for the next
    /// batch), so that groups share a tensor only in a window's last
    /// batch, a half that holds fewer than `GROUPS`, or a set with raw or
    /// failed tensors (`finish_batch`).
    #[inline(always)]
    fn form_batch<const GROUPS: u32>(&self, w: &mut Window, half_lines: u32) -> (Item, u32) {
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
            let mut count = h.ballot(fits).count_ones();
            if GROUPS > 1 && count >= GROUPS {
                count &= !(GROUPS - 1);
            }
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
    ///
    /// `GROUPS` > 1 (kernels `ibp_decode_pairs*`, two tensors a warp, and
    /// `ibp_decode_quads*`, four): `GROUPS` tensors at a time, each decoded
    /// by a group of `32 / GROUPS` lanes; where fewer of them are encoded
    /// (a raw tensor, a failed one, a batch's last few), the groups share
    /// out the encoded ones, two or more groups decoding one tensor alike
    /// (the same bytes to the same row). `GROUPS` = 1: one tensor at a
    /// time by the whole warp.
    ///
    /// Q: why groups?
    /// A: a group's step covers `512 / GROUPS` output bytes, so a row
    /// decodes in `⌈L·GROUPS/512⌉` group steps for `GROUPS` tensors
    /// instead of `⌈L/512⌉` whole ones for each, and the per-tensor work
    /// around the step (descriptor broadcast, sink, end check) is shared by
    /// `GROUPS` tensors. A group step costs about what a whole step does
    /// (`scripts/sass.sh --steps`, the `_half` and `_quarter` probes).
    ///
    /// Q: why a kernel of its own for each?
    /// A: registers are allocated per kernel for its most demanding path.
    /// Each group's tensor state is per lane where the whole warp's was
    /// uniform; one kernel with both steps spilled (128 registers, 140
    /// bytes), while each alone fits.
    #[inline(always)]
    fn finish_batch<const GROUPS: u32, const UNI: u8>(&self, half: u32, batch: &Item, count: u32) {
        const { assert!(GROUPS == 1 || GROUPS == 2 || GROUPS == 4) };
        let h = self.h;
        if GROUPS == 1 || self.ideal_mode() {
            for b in 0..count {
                let it = batch.shfl(h, b);
                self.finish_item::<UNI>(half, &it);
            }
            return;
        }
        let g = h.lane() / (32 / GROUPS);
        let mut b = 0;
        while b < count {
            let n = (count - b).min(GROUPS);
            // Group g takes tensor b + g (b for groups past the batch's end).
            let it = batch.shfl(h, b + if g < n { g } else { 0 });
            let enc = h.ballot(it.code() == ITEM_ENCODED);
            // One call site of the group decode (each inlined copy of the
            // step is thousands of instructions): every group its own
            // encoded tensor, or the encoded ones of the set shared out.
            let mine = if enc == u32::MAX {
                it
            } else {
                // Bit j: tensor b + j is encoded (its item, broadcast).
                let mut m = 0u32;
                for j in 0..n {
                    let x = batch.shfl(h, b + j);
                    if x.code() == ITEM_ENCODED {
                        m |= 1 << j;
                    } else {
                        self.finish_other(half, &x);
                    }
                }
                // Group g takes the (g mod encoded)-th encoded tensor.
                let c = m.count_ones().max(1);
                let mut want = g;
                while want >= c {
                    want -= c;
                }
                let mut left = m;
                for _ in 0..want {
                    left &= left.wrapping_sub(1);
                }
                batch.shfl(h, b + left.trailing_zeros().min(GROUPS - 1))
            };
            if enc != 0 {
                self.finish_group::<GROUPS, UNI>(half, &mine);
            }
            b += GROUPS;
        }
    }

    /// Decode `GROUPS` encoded tensors, one a group of `32 / GROUPS`
    /// lanes (`it` is the lane's group's item).
    #[inline(always)]
    fn finish_group<const GROUPS: u32, const UNI: u8>(&self, half: u32, it: &Item) {
        let h = self.h;
        let out = self.p.out + it.row * self.p.out_stride;
        let base = half + it.region() * LINE as u32 + (it.src % LINE) as u32;
        // SAFETY: as in `finish_item`, per group.
        let mut src = unsafe { Contig::new(h, base) };
        let id = if CL {
            self.cluster_id(self.tensor(it.row))
        } else {
            0
        };
        let ok = if GROUPS == 2 {
            self.step::<_, 16, UNI>(&mut src, it.len, out, id)
        } else {
            self.step::<_, 8, UNI>(&mut src, it.len, out, id)
        };
        let bad = h.ballot(!ok);
        if bad != 0 {
            // The whole warp zeroes each corrupt tensor's row in turn (once
            // where groups decoded the same tensor).
            let lanes = 32 / GROUPS;
            for j in 0..GROUPS {
                let row = shfl_idx64(h, it.row, lanes * j);
                let mut seen = false;
                for i in 0..j {
                    seen |=
                        (bad >> (lanes * i)) & 1 == 1 && shfl_idx64(h, it.row, lanes * i) == row;
                }
                if (bad >> (lanes * j)) & 1 == 1 && !seen {
                    self.fail(row, self.p.out + row * self.p.out_stride, STATUS_CORRUPT);
                }
            }
        }
    }

    /// Decode (or, in ideal mode, write) one tensor of a resident batch
    /// (`it`, broadcast) with the whole warp.
    #[inline(always)]
    fn finish_item<const UNI: u8>(&self, half: u32, it: &Item) {
        if it.code() != ITEM_ENCODED || self.ideal_mode() {
            self.finish_other(half, it);
            return;
        }
        let out = self.p.out + it.row * self.p.out_stride;
        let base = half + it.region() * LINE as u32 + (it.src % LINE) as u32;
        // SAFETY: the tensor's stored bytes are resident at `base`, followed
        // by the rest of the half or the warp's padding.
        let mut src = unsafe { Contig::new(self.h, base) };
        // Its cluster, from the tensor (the item keeps only the output row).
        let id = if CL {
            self.cluster_id(self.tensor(it.row))
        } else {
            0
        };
        if !self.step::<_, 32, UNI>(&mut src, it.len, out, id) {
            self.fail(it.row, out, STATUS_CORRUPT);
        }
    }

    /// A tensor of a resident batch that needs no step (`it`, broadcast):
    /// copy a raw one (write it, in ideal mode), report a failed one.
    #[inline(always)]
    fn finish_other(&self, half: u32, it: &Item) {
        let out = self.p.out + it.row * self.p.out_stride;
        let base = half + it.region() * LINE as u32 + (it.src % LINE) as u32;
        match it.code() {
            ITEM_RAW | ITEM_ENCODED if self.ideal_mode() => self.write_ideal(base, out),
            ITEM_RAW => self.copy_contig(base, out),
            ITEM_BAD_INDEX => self.fail(it.row, out, STATUS_BAD_INDEX),
            _ => self.fail(it.row, out, STATUS_CORRUPT),
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
    pub(super) fn run_batches<const GROUPS: u32, const UNI: u8>(&self, warp: u64, warps: u64) {
        let h = self.h;
        let half_lines = self.p.ring_lines / 2;
        // Shared address of half `k` (arithmetic, not an array: a runtime
        // index into an array would put it in local memory).
        let half = |k: u32| self.ring + k * half_lines * LINE as u32;
        let derive = !self.packed() && self.p.lengths == 0 && !self.ideal_mode();
        let mut w = Window {
            warp,
            warps,
            round: 0,
            s: 0,
            item: Item::default(),
        };
        w.item = self.load_item(w.row(h.lane()));
        let mut k = 0u32;
        let (mut cur, mut n) = self.form_batch::<GROUPS>(&mut w, half_lines);
        self.fetch_batch(half(k), &mut cur, n);
        while n > 0 {
            if derive {
                h.wait_all();
                h.sync_warp();
                self.derive_batch(half(k), &mut cur, n);
            }
            let (mut next, m) = self.form_batch::<GROUPS>(&mut w, half_lines);
            self.fetch_batch(half(k ^ 1), &mut next, m);
            // Everything but the batch just issued has landed.
            h.wait_all_but_last();
            h.sync_warp();
            self.finish_batch::<GROUPS, UNI>(half(k), &cur, n);
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
