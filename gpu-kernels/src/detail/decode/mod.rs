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
//! 3. decodes it with the same step as batch mode ([`crate::detail::step`], 16
//!    output bytes per lane), reading the stream through the ring, which is
//!    refilled ahead with `cp.async` as the steps advance.
//!
//! The body is written over the [`crate::simt`] traits: on the GPU every
//! trait call is one PTX instruction, and `host/kernel_emu/` runs the
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

use crate::detail::bits::WARP;
use crate::detail::book::Layout;
use crate::detail::step::{self, Geometry, RowStore, Source};
use crate::detail::table::{table_bytes, window32};
use crate::params::{
    DECODE_FLAG_TRIM, DECODE_MODE_IDEAL, DecodeParams, FETCH_LOAD_STORE, LINE, STATUS_BAD_INDEX,
    STATUS_CORRUPT,
};
use crate::simt::{Book, Machine, warp_sum64};

mod batch;
pub mod lanes;
mod ring;

use ring::{Ring, Streamed};

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

/// Per-launch constants and the warp's workspace.
///
/// `CL`: tensors choose their book and table by cluster id
/// (`DecodeParams::clusters`); a constant of each kernel, so the kernels of
/// unclustered datasets carry no trace of it.
struct Ctx<'a, H, B, const CL: bool> {
    h: &'a H,
    book: &'a B,
    p: DecodeParams,
    chunks: u64,
    pwords: u64,
    raw_aligned: bool,
    vec_out: bool,
    load_store: bool,
    /// Trim lines to the tensor's pieces where nobody reads the rest (see
    /// `batch`'s `fetch_item`): `DECODE_FLAG_TRIM`, and a gather or a
    /// fixed-stride dataset. Decided once per launch.
    trim: bool,
    ring: u32,
    pbuf: u32,
    geo: Geometry,
}

impl<H: Machine, B: Book, const CL: bool> Ctx<'_, H, B, CL> {
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
        crate::detail::book::saved_bits(x)
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

    /// Report `code` for output row `i` of the launch (row `row_base + i`
    /// of the call; one lane) and zero the row.
    #[inline(always)]
    fn fail(&self, i: u64, out: u64, code: u64) {
        if self.h.lane() == 0 {
            let s = self.p.status;
            // SAFETY: status holds two u64 (host-allocated).
            unsafe {
                self.h.or_u64(s, code);
                self.h.min_u64(s + 8, i.wrapping_add(self.p.row_base));
            }
        }
        self.zero_row(out);
    }

    /// Packed layout (offsets given)? Always for a clustered dataset, so
    /// its kernels carry no fixed-stride paths.
    #[inline(always)]
    fn packed(&self) -> bool {
        CL || self.p.offsets != 0
    }

    /// The ideal-copy benchmark mode? Never for a clustered dataset.
    #[inline(always)]
    fn ideal_mode(&self) -> bool {
        !CL && self.p.mode == DECODE_MODE_IDEAL
    }

    /// Cluster id of tensor `t` (clustered datasets).
    #[inline(always)]
    fn cluster_id(&self, t: u64) -> u32 {
        let p = &self.p;
        let a = t * p.cluster_bits as u64;
        let w = p.clusters + (a >> 5) * 4;
        // SAFETY: t < rows; the ids are readable 8 bytes past the last id's
        // word (`DecodeParams::clusters`).
        let (w0, w1) = unsafe { (self.h.ld_u32(w), self.h.ld_u32(w + 4)) };
        window32(w0, w1, (a & 31) as u32, p.cluster_bits)
    }

    /// Decode a tensor with the step, reading through `src`, into row
    /// `out`; a clustered dataset's tensor with the book and table of its
    /// cluster `id` (ignored otherwise).
    ///
    /// `G`: lanes per tensor (32, or 16 with each half-warp decoding its own
    /// tensor; the arguments are then its half's, and so is the result).
    #[inline(always)]
    fn step<S: Source, const G: u32, const UNI: u8>(
        &self,
        src: &mut S,
        e_bytes: u32,
        out: u64,
        id: u32,
    ) -> bool {
        if CL {
            let book = Rebased {
                book: self.book,
                off: id * self.geo.layout.bytes,
            };
            let mut geo = self.geo;
            geo.entries += id as u64 * table_bytes(geo.chunks, self.p.chunk) as u64;
            return self.step_with::<S, _, G, UNI>(src, &book, &geo, e_bytes, out);
        }
        self.step_with::<S, B, G, UNI>(src, self.book, &self.geo, e_bytes, out)
    }

    /// Decode with the step, reading through `src`, into row `out`.
    #[inline(always)]
    fn step_with<S: Source, B2: Book, const G: u32, const UNI: u8>(
        &self,
        src: &mut S,
        book: &B2,
        g: &Geometry,
        e_bytes: u32,
        out: u64,
    ) -> bool {
        use step::{ANY, decode_in};
        let h = self.h;
        // SAFETY: the row is inside the launch's output (`run`'s contract).
        let mut sink = unsafe { RowStore::new(h, out) };
        let k = &mut sink;
        // SAFETY: `src` holds the tensor's stored bytes; the book and entry
        // table are the dataset's (the host built both from one codebook,
        // or one per cluster).
        unsafe {
            if UNI != ANY_CLASS {
                // The uniform or periodic kernels: every step of the book
                // is of that kind (the host launches them for no other;
                // 8-byte chunks never are, 1-byte ones never periodic).
                return match self.p.chunk {
                    1 => decode_in::<1, G, UNI, ANY, true, _, _, _, _, _>(
                        h, src, book, h, g, e_bytes, k,
                    ),
                    2 => decode_in::<2, G, UNI, ANY, true, _, _, _, _, _>(
                        h, src, book, h, g, e_bytes, k,
                    ),
                    _ => decode_in::<4, G, UNI, ANY, true, _, _, _, _, _>(
                        h, src, book, h, g, e_bytes, k,
                    ),
                };
            }
            match self.p.chunk {
                1 => {
                    decode_in::<1, G, ANY, ANY, true, _, _, _, _, _>(h, src, book, h, g, e_bytes, k)
                }
                2 => {
                    decode_in::<2, G, ANY, ANY, true, _, _, _, _, _>(h, src, book, h, g, e_bytes, k)
                }
                4 => {
                    decode_in::<4, G, ANY, ANY, true, _, _, _, _, _>(h, src, book, h, g, e_bytes, k)
                }
                _ => {
                    decode_in::<8, G, ANY, ANY, true, _, _, _, _, _>(h, src, book, h, g, e_bytes, k)
                }
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
            ring.ensure(
                h,
                ring.line_of((end - 1) as u32) + 1,
                ring.line_of(base as u32),
            );
            let b = base + lane * 4;
            if b < l {
                let n = if b + 4 <= l { 4 } else { l - b };
                let v = ring.bits32(h, (b * 8) as u32, (n * 8) as u32);
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
    fn decode_streamed<const UNI: u8>(
        &self,
        t: u64,
        src: u64,
        slot: u64,
        packed: bool,
        out: u64,
    ) -> bool {
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
        ring.ensure(h, ring.line_of((pbytes - 1) as u32) + 1, ring.line_of(0));
        let mut w = lane;
        while w < self.pwords {
            let first = w * 32;
            let n = if first + 32 <= k_total {
                32
            } else {
                k_total - first
            };
            let v = ring.bits32(h, first as u32, n as u32);
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
            ring.end_line = ring.line_of((e - 1) as u32) + 1;
            e
        };

        // Phase 3: the step, streaming the payload through the ring.
        let mut s = Streamed {
            h,
            ring,
            pbuf: self.pbuf,
        };
        let id = if CL { self.cluster_id(t) } else { 0 };
        self.step::<_, 32, UNI>(&mut s, e_bytes as u32, out, id)
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
            ring.ensure(
                h,
                ring.line_of((end - 1) as u32) + 1,
                ring.line_of(b as u32),
            );
            b = end;
        }
        let v = ring.first_word(h);
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
    fn run_streaming<const UNI: u8>(&self, warp: u64, warps: u64) {
        let (h, p) = (self.h, &self.p);
        let packed = self.packed();
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
            if self.ideal_mode() {
                self.ideal(src, slot, out);
            } else if !encoded {
                if packed && slot != p.row_bytes {
                    self.fail(i, out, STATUS_CORRUPT);
                } else {
                    self.copy_raw(src, out);
                }
            } else if !self.decode_streamed::<UNI>(t, src, slot, packed, out) {
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
}

/// `UNI` of [`run`]: each step decoded by the class the book gives it
/// (the general kernels); otherwise `UNI` is the one step kind of every
/// step, `CLASS_UNIFORM` or `CLASS_PERIODIC` (`crate::detail::book`).
pub const ANY_CLASS: u8 = 0;

/// Kernel body for one warp (see [`DecodeParams`]; every address in `p` is
/// a global one).
///
/// # Safety
/// The parameter block describes valid buffers (the host launcher checks
/// sizes): `src` covers every slot, `offsets`, `flags`, `table`, `index`,
/// `out` and `status` have the lengths the parameters imply; `book` holds
/// the dataset's decode book (in shared memory in batch mode); the warp's
/// workspace at `at.workspace` holds [`crate::params::workspace_bytes`]
/// bytes of shared memory. `GROUPS` (batch mode): tensors a warp, 1, 2
/// (one a half-warp) or 4 (one a quarter; `batch`'s `finish_batch`). `CL`: the dataset is clustered, `book` holds
/// every cluster's book back to back and `p.clusters` their ids
/// (`DecodeParams::clusters`). `UNI`: [`ANY_CLASS`], or the kind of every
/// step of an unclustered book.
#[inline(always)]
pub unsafe fn run<H: Machine, B: Book, const CL: bool, const GROUPS: u32, const UNI: u8>(
    h: &H,
    book: &B,
    p: DecodeParams,
    batch: bool,
    at: Launch,
) {
    // Chunk sizes are powers of two (1, 2, 4, 8): shifts and masks, no
    // division (and no division-by-zero panic path in the PTX).
    let shift = p.chunk.trailing_zeros() & 3;
    let cmask = (1u64 << shift) - 1;
    let chunks = (p.row_bytes + cmask) >> shift;
    let ctx = Ctx::<H, B, CL> {
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
        trim: p.decode_flags & DECODE_FLAG_TRIM != 0 && (p.index != 0 || !CL && p.offsets == 0),
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
        ctx.run_batches::<GROUPS, UNI>(at.warp, at.warps);
    } else {
        ctx.run_streaming::<UNI>(at.warp, at.warps);
    }
}

/// A book read at byte `off` of another: one cluster's book among the
/// clustered dataset's books, which lie back to back.
struct Rebased<'b, B> {
    book: &'b B,
    off: u32,
}

// SAFETY (every method): the caller's offset is inside this cluster's book,
// which lies inside the whole (the host sized it `k · B < 2^32` bytes and
// checked every id below `k`), so the sum does not overflow.
//
// Q: why `unchecked_add`? A: it tells LLVM the sum does not wrap, so a
// global book's address is rebased once per tensor in 64 bits instead of
// adding and widening at every load (a register fewer: the batch kernel is
// at its cap of 128 on sm_80).
impl<B: Book> Book for Rebased<'_, B> {
    #[inline(always)]
    unsafe fn ld_u8(&self, off: u32) -> u32 {
        // SAFETY: as above.
        unsafe { self.book.ld_u8(self.off.unchecked_add(off)) }
    }
    #[inline(always)]
    unsafe fn ld_u32(&self, off: u32) -> u32 {
        // SAFETY: as above.
        unsafe { self.book.ld_u32(self.off.unchecked_add(off)) }
    }
    #[inline(always)]
    unsafe fn ld_v2(&self, off: u32) -> [u32; 2] {
        // SAFETY: as above.
        unsafe { self.book.ld_v2(self.off.unchecked_add(off)) }
    }
    #[inline(always)]
    unsafe fn ld_v4(&self, off: u32) -> [u32; 4] {
        // SAFETY: as above.
        unsafe { self.book.ld_v4(self.off.unchecked_add(off)) }
    }
}
