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
//! 3. walks the chunks 32 at a time, one per lane: the lane's payload width
//!    comes from its participation bit and the codebook, an exclusive warp
//!    scan over `shfl.sync` gives its bit offset, and the lane re-inserts the
//!    invariant bits around its payload bits (`pdep` by move masks) and
//!    writes its chunk. Meanwhile the ring is refilled ahead with `cp.async`.
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

use crate::arch;
use crate::bits::WARP;
use crate::kernels::{Hw, SharedBook};
use crate::params::{DECODE_MODE_IDEAL, DecodeParams, STATUS_BAD_INDEX, STATUS_CORRUPT};
use crate::{book, step, table};

const LINE: u64 = 128;

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
    fn new(smem: u32, lines: u32, src: u64, len: u64) -> Self {
        let first = src / LINE;
        Ring {
            smem,
            lines: lines as u64,
            src,
            end_line: (src + len).div_ceil(LINE),
            fetched: first,
            ready: first,
            load_store: false,
        }
    }

    /// Line holding tensor byte `b`.
    #[inline(always)]
    fn line_of(&self, b: u64) -> u64 {
        (self.src + b) / LINE
    }

    /// Issue `cp.async` copies for lines `[fetched, min(end_line, limit))`.
    #[inline(always)]
    fn fetch_until(&mut self, limit: u64) {
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
        let mut q = arch::lane() as u64;
        while q < pieces {
            let line = self.fetched + q / 8;
            let part = (q % 8) * 16;
            let dst = self.smem + ((line & (self.lines - 1)) * LINE + part) as u32;
            // SAFETY: the line overlaps the tensor's slot (line < end_line),
            // and whole 128-byte lines of a slot lie in its allocation's
            // pages; dst is 16-aligned inside this warp's ring.
            unsafe {
                if self.load_store {
                    arch::st_shared_v4(dst, arch::ld_global_v4(line * LINE + part));
                } else {
                    arch::cp_async::<16>(dst, line * LINE + part);
                }
            }
            q += WARP as u64;
        }
        arch::cp_async_commit();
        self.fetched = stop;
    }

    /// Make lines below `need` resident, then refill ahead: lines from
    /// `oldest` (the oldest line still to be read) up to a full ring.
    #[inline(always)]
    fn ensure(&mut self, need: u64, oldest: u64) {
        if need > self.ready {
            if need > self.fetched {
                self.fetch_until(need);
            }
            arch::cp_async_wait_all();
            // Each lane waited for its own copies; the barrier publishes
            // every lane's copies to the whole warp.
            arch::sync_warp();
            self.ready = self.fetched;
        }
        self.fetch_until(oldest + self.lines);
    }

    /// The aligned u32 word holding absolute address `a` (`a % 4 == 0`).
    #[inline(always)]
    fn word(&self, a: u64) -> u32 {
        let line = a / LINE;
        let addr = self.smem + ((line & (self.lines - 1)) * LINE + a % LINE) as u32;
        // SAFETY: inside this warp's ring.
        unsafe { arch::ld_shared_u32(addr) }
    }

    /// `n ≤ 64` bits at bit `bit` of the tensor's stream (resident lines).
    #[inline(always)]
    fn bits(&self, bit: u64, n: u32) -> u64 {
        let abs = self.src * 8 + bit;
        let w = (abs / 32) * 4;
        let shift = (abs % 32) as u32;
        table::window64(self.word(w), self.word(w + 4), self.word(w + 8), shift, n)
    }

    /// `n ≤ 32` bits at bit `bit` of the tensor's stream.
    #[inline(always)]
    fn bits32(&self, bit: u64, n: u32) -> u32 {
        let abs = self.src * 8 + bit;
        let w = (abs / 32) * 4;
        table::window32(self.word(w), self.word(w + 4), (abs % 32) as u32, n)
    }
}

/// Per-launch constants and the block's shared-memory carving.
struct Ctx {
    p: DecodeParams,
    table: u64,
    table_smem: u32,
    in_smem: bool,
    chunks: u64,
    pwords: u64,
    aligned_out: bool,
    raw_aligned: bool,
    vec_out: bool,
    out_base: u64,
    ring: u32,
    pbuf: u32,
    /// Batch mode: the step's geometry and where its book is.
    geo: step::Geometry,
    book_smem: u32,
}

/// One tensor of a batch, held by one lane (lane `b` holds tensor `b`).
#[derive(Clone, Copy, Default)]
struct Item {
    /// Output row.
    row: u64,
    /// Global address of the tensor's first stored byte.
    src: u64,
    /// Stored bytes known to be needed (0 while a fixed-stride tensor's
    /// length is still to be derived).
    len: u32,
    /// First ring line of the tensor's region, within its half.
    region: u32,
    /// Lines reserved for the region.
    span: u32,
    /// Lines fetched so far.
    fetched: u32,
    /// [`ITEM_RAW`], [`ITEM_ENCODED`], or a `STATUS_*` error code + 8.
    code: u32,
}

const ITEM_RAW: u32 = 0;
const ITEM_ENCODED: u32 = 1;
const ITEM_BAD_INDEX: u32 = 8 + STATUS_BAD_INDEX as u32;
const ITEM_CORRUPT: u32 = 8 + STATUS_CORRUPT as u32;
const ITEM_NONE: u32 = 255;

impl Item {
    /// Broadcast lane `src`'s item to the warp.
    #[inline(always)]
    fn shfl(&self, src: u32) -> Item {
        Item {
            row: arch::shfl_idx64(self.row, src),
            src: arch::shfl_idx64(self.src, src),
            len: arch::shfl_idx(self.len, src),
            region: arch::shfl_idx(self.region, src),
            span: arch::shfl_idx(self.span, src),
            fetched: arch::shfl_idx(self.fetched, src),
            code: arch::shfl_idx(self.code, src),
        }
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

/// 32-bit read of `n` bits at bit `bit` of the bytes starting at shared
/// address `base` (any alignment).
#[inline(always)]
fn sbits32(base: u32, bit: u32, n: u32) -> u32 {
    let a = base * 8 + bit;
    let w = (a >> 5) << 2;
    // SAFETY: inside this warp's ring (plus its 16 bytes of padding).
    let (w0, w1) = unsafe { (arch::ld_shared_u32(w), arch::ld_shared_u32(w + 4)) };
    table::window32(w0, w1, a & 31, n)
}

impl Ctx {
    /// Popcount of chunk `k`'s mask.
    #[inline(always)]
    fn inv(&self, k: u64) -> u32 {
        let byte = self.chunks * table::entry_bytes(self.p.chunk) as u64 + k;
        if self.in_smem {
            // SAFETY: inside the table copy.
            unsafe { arch::ld_shared_u8(self.table_smem + byte as u32) }
        } else {
            // SAFETY: inside the table.
            unsafe { arch::ld_global_u8(self.table + byte) }
        }
    }

    /// Table entry of chunk `k` (layout in `crate::table`).
    #[inline(always)]
    fn entry<const C: u32>(&self, k: u64) -> table::Entry {
        let base = k * table::entry_bytes(C) as u64;
        let mut w = [0u32; 18];
        // Q: why these load widths?
        // A: the widest aligned loads each entry size allows: 8-byte entries
        // (C = 1) and 72-byte ones (C = 8) are 8-aligned, the others 16.
        if self.in_smem {
            let a = self.table_smem + base as u32;
            // SAFETY (all loads): the entry lies inside the shared copy.
            match C {
                1 => {
                    let x = unsafe { arch::ld_shared_v2(a) };
                    w[0] = x[0];
                    w[1] = x[1];
                }
                2 => {
                    let x = unsafe { arch::ld_shared_v4(a) };
                    w[..4].copy_from_slice(&x);
                }
                4 => {
                    let x = unsafe { arch::ld_shared_v4(a) };
                    let y = unsafe { arch::ld_shared_v4(a + 16) };
                    w[..4].copy_from_slice(&x);
                    w[4..8].copy_from_slice(&y);
                }
                _ => {
                    for i in 0..9 {
                        let x = unsafe { arch::ld_shared_v2(a + 8 * i) };
                        w[2 * i as usize] = x[0];
                        w[2 * i as usize + 1] = x[1];
                    }
                }
            }
        } else {
            let a = self.table + base;
            // SAFETY (all loads): the entry lies inside the table, which no
            // thread writes during the launch.
            match C {
                1 => {
                    let x = unsafe { arch::ld_global_nc_v2(a) };
                    w[0] = x[0];
                    w[1] = x[1];
                }
                2 => {
                    let x = unsafe { arch::ld_global_nc_v4(a) };
                    w[..4].copy_from_slice(&x);
                }
                4 => {
                    let x = unsafe { arch::ld_global_nc_v4(a) };
                    let y = unsafe { arch::ld_global_nc_v4(a + 16) };
                    w[..4].copy_from_slice(&x);
                    w[4..8].copy_from_slice(&y);
                }
                _ => {
                    for i in 0..9u64 {
                        let x = unsafe { arch::ld_global_nc_v2(a + 8 * i) };
                        w[2 * i as usize] = x[0];
                        w[2 * i as usize + 1] = x[1];
                    }
                }
            }
        }
        table::Entry::from_words::<C>(&w)
    }

    /// Write chunk `k` (value `x`, `bytes` bytes) of output row `out`.
    #[inline(always)]
    fn store_chunk(&self, out: u64, k: u64, x: u64, bytes: u64) {
        let a = out + k * self.p.chunk as u64;
        // SAFETY (all stores): k·C + bytes <= L, inside output row `out`.
        if self.aligned_out && bytes == self.p.chunk as u64 {
            match self.p.chunk {
                1 => unsafe { arch::st_global_u8(a, x as u32) },
                2 => unsafe { arch::st_global_u16(a, x as u32) },
                4 => unsafe { arch::st_global_u32(a, x as u32) },
                _ => unsafe { arch::st_global_u64(a, x) },
            }
        } else {
            for j in 0..bytes {
                unsafe { arch::st_global_u8(a + j, (x >> (8 * j)) as u32) };
            }
        }
    }

    /// Fill output row `out` with zeros.
    #[inline(always)]
    fn zero_row(&self, out: u64) {
        let l = self.p.row_bytes;
        let mut j = arch::lane() as u64;
        while j < l {
            // SAFETY: j < L, inside the row.
            unsafe { arch::st_global_u8(out + j, 0) };
            j += WARP as u64;
        }
    }

    /// Report `code` for output row `i` (one lane) and zero the row.
    #[inline(always)]
    fn fail(&self, i: u64, out: u64, code: u64) {
        if arch::lane() == 0 {
            let s = arch::to_global(self.p.status);
            // SAFETY: status holds two u64 (host-allocated).
            unsafe {
                arch::red_or_u64(s, code);
                arch::red_min_u64(s + 8, i);
            }
        }
        self.zero_row(out);
    }

    /// Copy `L` raw bytes at `src` to output row `out` through the ring.
    #[inline(always)]
    fn copy_raw(&self, src: u64, out: u64) {
        let l = self.p.row_bytes;
        let mut ring = Ring::new(self.ring, self.p.ring_lines, src, l);
        ring.load_store = self.p.fetch == crate::params::FETCH_LOAD_STORE;
        let lane = arch::lane() as u64;
        let mut base = 0;
        while base < l {
            let end = if base + 128 < l { base + 128 } else { l };
            ring.ensure(ring.line_of(end - 1) + 1, ring.line_of(base));
            let b = base + lane * 4;
            if b < l {
                let n = if b + 4 <= l { 4 } else { l - b };
                let v = ring.bits32(b * 8, (n * 8) as u32);
                let a = out + b;
                if n == 4 && self.raw_aligned {
                    // SAFETY: 4-aligned (row base and stride), inside the row.
                    unsafe { arch::st_global_u32(a, v) };
                } else {
                    for j in 0..n {
                        // SAFETY: b + j < L.
                        unsafe { arch::st_global_u8(a + j, v >> (8 * j)) };
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
    fn decode(&self, src: u64, slot: u64, packed: bool, out: u64) -> bool {
        let k_total = self.chunks;
        let l = self.p.row_bytes;
        let c = self.p.chunk as u64;
        let lane = arch::lane() as u64;
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
        );
        ring.load_store = self.p.fetch == crate::params::FETCH_LOAD_STORE;
        ring.ensure(ring.line_of(pbytes - 1) + 1, ring.line_of(0));
        let mut w = lane;
        while w < self.pwords {
            let first = w * 32;
            let n = if first + 32 <= k_total {
                32
            } else {
                k_total - first
            };
            let v = ring.bits32(first, n as u32);
            // SAFETY: w < pbuf_words.
            unsafe { arch::st_shared_u32(self.pbuf + (w * 4) as u32, v) };
            w += WARP as u64;
        }
        arch::sync_warp();

        // Phase 2 (fixed-stride): E from the participation bits alone.
        let e_bytes = if packed {
            slot
        } else {
            let mut saved = 0u64;
            let mut k = lane;
            while k < k_total {
                // SAFETY: k / 32 < pbuf_words.
                let pw = unsafe { arch::ld_shared_u32(self.pbuf + (k / 32 * 4) as u32) };
                if pw >> (k % 32) & 1 == 1 {
                    saved += self.inv(k) as u64;
                }
                k += WARP as u64;
            }
            let saved = arch::warp_inclusive_scan64(saved);
            let saved = arch::shfl_idx64(saved, 31);
            let bits = k_total + 8 * l - saved;
            let e = bits.div_ceil(8);
            if e >= l {
                return false;
            }
            ring.end_line = ring.line_of(e - 1) + 1;
            e
        };
        let limit_bits = e_bytes * 8;

        // Phase 3: 32 chunks per step, one per lane.
        let decoded = match c {
            1 => self.decode_chunks::<1>(&mut ring, out, limit_bits),
            2 => self.decode_chunks::<2>(&mut ring, out, limit_bits),
            4 => self.decode_chunks::<4>(&mut ring, out, limit_bits),
            _ => self.decode_chunks::<8>(&mut ring, out, limit_bits),
        };
        let Some(pos) = decoded else { return false };
        // The stream must end exactly at E, with zero padding.
        if pos.div_ceil(8) != e_bytes {
            return false;
        }
        let pad = (8 - pos % 8) % 8;
        let pad_ok = pad == 0 || ring.bits32(pos, pad as u32) == 0;
        arch::ballot(pad_ok) == u32::MAX
    }

    /// One scan step: the warp's total payload width after the lanes'
    /// `width`s, with every line it spans made resident. Returns the lane's
    /// start bit, or `None` when the group would run past `limit_bits`.
    #[inline(always)]
    fn step(&self, ring: &mut Ring, pos: &mut u64, width: u32, limit_bits: u64) -> Option<u64> {
        let (excl, total) = arch::warp_exclusive_scan(width);
        let end = *pos + total as u64;
        if end > limit_bits {
            return None;
        }
        if total > 0 {
            ring.ensure(ring.line_of((end - 1) / 8) + 1, ring.line_of(*pos / 8));
        }
        let bit = *pos + excl as u64;
        *pos = end;
        Some(bit)
    }

    /// Decode every chunk, 32 per step (one per lane). Returns the stream
    /// bit where the payload ended, or `None` on inconsistent bits.
    #[inline(always)]
    fn decode_chunks<const C: u32>(
        &self,
        ring: &mut Ring,
        out: u64,
        limit_bits: u64,
    ) -> Option<u64> {
        let k_total = self.chunks;
        let l = self.p.row_bytes;
        let c = C as u64;
        let lane = arch::lane() as u64;
        let mut pos = k_total;
        let mut g = 0;
        while g * 32 < k_total {
            let k = g * 32 + lane;
            let valid = k < k_total;
            // SAFETY: g < pbuf_words.
            let pw = unsafe { arch::ld_shared_u32(self.pbuf + (g * 4) as u32) };
            let part = valid && (pw >> lane & 1) == 1;
            let bytes = if !valid {
                0
            } else if (k + 1) * c <= l {
                c
            } else {
                l - k * c
            };
            let e = if valid {
                self.entry::<C>(k)
            } else {
                table::Entry::default()
            };
            let width = if valid {
                table::payload_width(&e, part)
            } else {
                0
            };
            let bit = self.step(ring, &mut pos, width, limit_bits)?;
            if valid {
                let v = if C == 8 {
                    ring.bits(bit, width)
                } else {
                    ring.bits32(bit, width) as u64
                };
                self.store_chunk(out, k, table::decode_entry::<C>(&e, part, v), bytes);
            }
            g += 1;
        }
        Some(pos)
    }

    // ---------------------------------------------------------------------
    // Batch mode

    /// Describe output row `row` (lane-local; `ITEM_NONE` past the end).
    #[inline(always)]
    fn load_item(&self, row: u64) -> Item {
        let p = &self.p;
        let mut it = Item {
            row,
            code: ITEM_NONE,
            ..Item::default()
        };
        if row >= p.count {
            return it;
        }
        // SAFETY: row < count = index length.
        let t = if p.index != 0 {
            unsafe { arch::ld_global_u64(arch::to_global(p.index) + row * 8) }
        } else {
            p.first + row
        };
        if t >= p.rows {
            it.code = ITEM_BAD_INDEX;
            return it;
        }
        let l = p.row_bytes;
        // SAFETY: t < rows: flag byte t / 8, offsets t and t + 1, length t.
        let encoded =
            unsafe { arch::ld_global_u8(arch::to_global(p.flags) + t / 8) } >> (t % 8) & 1 == 1;
        let pbytes = self.chunks.div_ceil(8);
        let (start, known) = if p.offsets != 0 {
            let o = arch::to_global(p.offsets) + t * 8;
            // SAFETY: as above.
            let (a, b) = unsafe { (arch::ld_global_u64(o), arch::ld_global_u64(o + 8)) };
            (a.wrapping_sub(p.offset_base), Some(b.wrapping_sub(a)))
        } else if p.lengths != 0 {
            // SAFETY: as above.
            (
                t * l,
                Some(unsafe { arch::ld_global_u32(arch::to_global(p.lengths) + t * 4) } as u64),
            )
        } else {
            (t * l, if encoded { None } else { Some(l) })
        };
        it.src = arch::to_global(p.src) + start;
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
                    it.code = ITEM_CORRUPT;
                    return it;
                }
                it.len = n as u32;
                it.span = lines(it.src, n);
                it.code = if encoded && !ideal {
                    ITEM_ENCODED
                } else {
                    ITEM_RAW
                };
            }
            None => {
                // Fixed-stride, encoded, length to be derived: reserve the
                // most an encoded tensor can take (L - 1 bytes).
                it.len = 0;
                it.span = lines(it.src, l - 1);
                it.code = ITEM_ENCODED;
            }
        }
        it
    }

    /// Issue `cp.async` copies of lines `[it.fetched, upto)` of (broadcast)
    /// item `it` into its region of the half at shared address `half`.
    #[inline(always)]
    fn fetch_item(&self, half: u32, it: &Item, upto: u32) {
        if upto <= it.fetched {
            return;
        }
        let first_line = it.src / LINE;
        let pieces = (upto - it.fetched) * 8;
        let mut q = arch::lane();
        while q < pieces {
            let rel = it.fetched + q / 8;
            let part = (q % 8) * 16;
            let dst = half + (it.region + rel) * LINE as u32 + part;
            let src = (first_line + rel as u64) * LINE + part as u64;
            // SAFETY: the line overlaps the tensor's stored bytes (rel <
            // lines(src, len)); dst is 16-aligned inside the region.
            unsafe {
                if self.p.fetch == crate::params::FETCH_LOAD_STORE {
                    arch::st_shared_v4(dst, arch::ld_global_v4(src));
                } else {
                    arch::cp_async::<16>(dst, src);
                }
            }
            q += WARP;
        }
    }

    /// Decode an encoded tensor held contiguously at shared address `base`
    /// (`e_bytes` stored bytes) into row `out` with the 16-bytes-per-lane
    /// step ([`step::decode_row`]). False on inconsistent bits.
    #[inline(always)]
    fn decode_step<B: crate::simt::Book>(&self, b: &B, base: u32, e_bytes: u32, out: u64) -> bool {
        let (g, r) = (&self.geo, step::RowAt::new(base, e_bytes, out));
        // SAFETY: the tensor's stored bytes are resident at `base` (plus the
        // warp's padding); the book and entry table are the dataset's (the
        // host sized them from the same codebook); the row is inside `out`.
        unsafe {
            match self.p.chunk {
                1 => step::decode_row::<1, _, _, _, _>(&Hw, &Hw, b, &Hw, g, r),
                2 => step::decode_row::<2, _, _, _, _>(&Hw, &Hw, b, &Hw, g, r),
                4 => step::decode_row::<4, _, _, _, _>(&Hw, &Hw, b, &Hw, g, r),
                _ => step::decode_row::<8, _, _, _, _>(&Hw, &Hw, b, &Hw, g, r),
            }
        }
    }

    /// Copy `L` raw bytes held at shared address `base` to row `out`.
    #[inline(always)]
    fn copy_contig(&self, base: u32, out: u64) {
        let l = self.p.row_bytes as u32;
        let lane = arch::lane();
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
                let x: [u32; 5] =
                    core::array::from_fn(|i| unsafe { arch::ld_shared_u32(w + 4 * i as u32) });
                let f = |i: usize| {
                    if sh == 0 {
                        x[i]
                    } else {
                        (x[i] >> sh) | (x[i + 1] << (32 - sh))
                    }
                };
                // SAFETY: out row is 16-aligned with L % 16 == 0 (vec_out).
                unsafe { arch::st_global_v4(out + j as u64, [f(0), f(1), f(2), f(3)]) };
                j += 512;
            }
        } else {
            let mut j = lane * 4;
            while j < l {
                let n = if j + 4 <= l { 4 } else { l - j };
                let v = sbits32(base, j * 8, n * 8);
                if n == 4 && self.raw_aligned {
                    // SAFETY: 4-aligned, inside the row.
                    unsafe { arch::st_global_u32(out + j as u64, v) };
                } else {
                    for b in 0..n {
                        // SAFETY: j + b < L.
                        unsafe { arch::st_global_u8(out + (j + b) as u64, v >> (8 * b)) };
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
        let lane = arch::lane();
        loop {
            let left = arch::ballot(lane >= w.s && w.item.code != ITEM_NONE);
            if left == 0 {
                w.round += 1;
                if w.row(0) >= self.p.count {
                    return (
                        Item {
                            code: ITEM_NONE,
                            ..Item::default()
                        },
                        0,
                    );
                }
                w.item = self.load_item(w.row(lane));
                w.s = 0;
                continue;
            }
            let mine = lane >= w.s && w.item.code != ITEM_NONE;
            let sp = if mine { w.item.span } else { 0 };
            let incl = arch::warp_inclusive_scan(sp);
            let fits = mine && incl <= half_lines;
            let count = arch::ballot(fits).count_ones();
            let mut placed = w.item;
            placed.region = incl - sp;
            placed.fetched = 0;
            let got = placed.shfl(w.s + if lane < count { lane } else { 0 });
            let item = if lane < count {
                got
            } else {
                Item {
                    code: ITEM_NONE,
                    ..Item::default()
                }
            };
            w.s += count;
            return (item, count);
        }
    }

    /// First fetch of a batch: whole tensors whose length is known, the
    /// participation bytes of those still to be derived.
    #[inline(always)]
    fn fetch_batch(&self, half: u32, batch: &mut Item, count: u32) {
        let pbytes = self.chunks.div_ceil(8);
        let lane = arch::lane();
        for b in 0..count {
            let it = batch.shfl(b);
            if it.code > ITEM_ENCODED {
                continue;
            }
            let upto = if it.len == 0 {
                lines(it.src, pbytes)
            } else {
                it.span
            };
            self.fetch_item(half, &it, upto);
            if lane == b {
                batch.fetched = upto;
            }
        }
        arch::cp_async_commit();
    }

    /// Fixed-stride tensors with no length table: derive each encoded
    /// tensor's length from its (resident) participation bits, then fetch
    /// the rest of it.
    #[inline(always)]
    fn derive_batch(&self, half: u32, batch: &mut Item, count: u32) {
        let lane = arch::lane();
        let k_total = self.chunks as u32;
        let l = self.p.row_bytes;
        for b in 0..count {
            let it = batch.shfl(b);
            if it.code != ITEM_ENCODED || it.len != 0 {
                continue;
            }
            let base = half + it.region * LINE as u32 + (it.src % LINE) as u32;
            let mut saved = 0u32;
            let mut k = lane;
            while k < k_total {
                if sbits32(base, k, 1) == 1 {
                    saved += self.inv(k as u64);
                }
                k += WARP;
            }
            let saved = arch::warp_inclusive_scan(saved);
            let saved = arch::shfl_idx(saved, 31) as u64;
            let e = (k_total as u64 + 8 * l - saved).div_ceil(8);
            let mut it2 = it;
            if e >= l {
                it2.code = ITEM_CORRUPT;
            } else {
                it2.len = e as u32;
                let upto = lines(it.src, e);
                self.fetch_item(half, &it2, upto);
                it2.fetched = upto;
            }
            if lane == b {
                *batch = it2;
            }
        }
        arch::cp_async_commit();
    }

    /// Decode (or, in ideal mode, write) every tensor of a resident batch.
    #[inline(always)]
    fn finish_batch(&self, half: u32, batch: &Item, count: u32) {
        let ideal = self.p.mode == DECODE_MODE_IDEAL;
        for b in 0..count {
            let it = batch.shfl(b);
            let out = self.out_base + it.row * self.p.out_stride;
            let base = half + it.region * LINE as u32 + (it.src % LINE) as u32;
            match it.code {
                ITEM_RAW if ideal => self.write_ideal(base, out),
                ITEM_RAW => self.copy_contig(base, out),
                ITEM_ENCODED => {
                    let ok = self.decode_step(&SharedBook(self.book_smem), base, it.len, out);
                    if !ok {
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
        let l = self.p.row_bytes as u32;
        let mut j = arch::lane() * 4;
        // SAFETY: inside the region.
        let v = unsafe { arch::ld_shared_u32(base & !3) };
        while j + 4 <= l {
            // SAFETY: inside the row (4-aligned rows in this mode).
            unsafe { arch::st_global_u32(out + j as u64, v) };
            j += 128;
        }
    }

    /// Batch mode main loop: form, fetch, and decode batches, two halves of
    /// the ring in flight at once.
    #[inline(always)]
    fn run_batches(&self, warp: u64, warps: u64) {
        let half_lines = self.p.ring_lines / 2;
        // Shared address of half `h` (arithmetic, not an array: a runtime
        // index into an array would put it in local memory).
        let half = |h: u32| self.ring + h * half_lines * LINE as u32;
        let derive = self.p.offsets == 0 && self.p.lengths == 0 && self.p.mode != DECODE_MODE_IDEAL;
        let mut w = Window {
            warp,
            warps,
            round: 0,
            s: 0,
            item: Item::default(),
        };
        w.item = self.load_item(w.row(arch::lane()));
        let mut h = 0u32;
        let (mut cur, mut n) = self.form_batch(&mut w, half_lines);
        self.fetch_batch(half(h), &mut cur, n);
        while n > 0 {
            if derive {
                arch::cp_async_wait_all();
                arch::sync_warp();
                self.derive_batch(half(h), &mut cur, n);
            }
            let (mut next, m) = self.form_batch(&mut w, half_lines);
            self.fetch_batch(half(h ^ 1), &mut next, m);
            // Everything but the batch just issued has landed.
            arch::cp_async_wait_group::<1>();
            arch::sync_warp();
            self.finish_batch(half(h), &cur, n);
            // The next fetch into this half must not overtake the reads
            // above (lanes read each other's copies).
            arch::sync_warp();
            cur = next;
            n = m;
            h ^= 1;
        }
        arch::cp_async_wait_all();
    }

    /// Benchmark baseline: fetch the stored bytes, write `L` bytes.
    #[inline(always)]
    fn ideal(&self, src: u64, slot: u64, out: u64) {
        let mut ring = Ring::new(self.ring, self.p.ring_lines, src, slot);
        ring.load_store = self.p.fetch == crate::params::FETCH_LOAD_STORE;
        let mut b = 0;
        while b < slot {
            let end = if b + (self.p.ring_lines as u64 - 1) * LINE < slot {
                b + (self.p.ring_lines as u64 - 1) * LINE
            } else {
                slot
            };
            ring.ensure(ring.line_of(end - 1) + 1, ring.line_of(b));
            b = end;
        }
        let v = ring.word((src / 4) * 4);
        let l = self.p.row_bytes;
        let mut j = arch::lane() as u64 * 4;
        while j + 4 <= l {
            // SAFETY: inside the row; rows are 4-aligned in benchmarks
            // (checked by the host for this mode).
            unsafe { arch::st_global_u32(out + j, v) };
            j += 128;
        }
    }
}

/// Kernel body (see [`DecodeParams`]).
///
/// # Safety
/// The parameter block describes valid buffers (the host launcher checks
/// sizes): `src` covers every slot, `offsets`, `flags`, `table`, `index`,
/// `out` and `status` have the lengths the parameters imply, and the launch
/// provides the dynamic shared memory the carving below uses.
#[inline(always)]
pub unsafe fn run(p: DecodeParams, batch: bool) {
    let base = arch::dyn_smem_base();
    let table_smem = base;
    let in_smem = p.table_smem_bytes > 0;
    // Chunk sizes are powers of two (1, 2, 4, 8): shifts and masks, no
    // division (and no division-by-zero panic path in the PTX).
    let shift = p.chunk.trailing_zeros() & 3;
    let cmask = (1u64 << shift) - 1;
    let chunks = (p.row_bytes + cmask) >> shift;
    let table = arch::to_global(p.table);
    if batch {
        // Q: why must the book fit in shared memory?
        // A: batch mode is for tensors of a few KB, whose book (at most
        // 7 bytes per tensor byte) always fits beside the workspaces; the
        // host checks it and uses streaming mode otherwise.
        // The decode book, once per block.
        let words = p.book_smem_bytes / 4;
        let src = arch::to_global(p.book);
        let mut i = arch::thread_idx();
        while i < words {
            // SAFETY: i·4 < book_smem_bytes <= book length.
            unsafe { arch::st_shared_u32(base + i * 4, arch::ld_global_u32(src + i as u64 * 4)) };
            i += arch::block_dim();
        }
        arch::sync_threads();
    }
    if in_smem {
        // The codebook is loaded once per block (paper: metadata stays on the
        // GPU; here it also stays in shared memory when it fits).
        let words = p.table_smem_bytes / 4;
        let mut i = arch::thread_idx();
        while i < words {
            // SAFETY: i·4 < table_smem_bytes <= table length.
            unsafe {
                arch::st_shared_u32(
                    table_smem + i * 4,
                    arch::ld_global_u32(table + i as u64 * 4),
                )
            };
            i += arch::block_dim();
        }
        arch::sync_threads();
    }
    // 16 bytes of padding per warp: bit reads may look up to 8 bytes past a
    // tensor's last byte.
    let warp_bytes = p.pbuf_words * 4 + p.ring_lines * LINE as u32 + 16;
    let warp_base =
        base + p.table_smem_bytes + p.book_smem_bytes + arch::warp_in_block() * warp_bytes;
    let out_base = arch::to_global(p.out);
    let ctx = Ctx {
        p,
        table,
        table_smem,
        in_smem,
        chunks,
        pwords: chunks.div_ceil(32),
        aligned_out: out_base % 8 == 0 && p.out_stride & cmask == 0 && p.row_bytes & cmask == 0,
        raw_aligned: out_base % 4 == 0 && p.out_stride % 4 == 0,
        vec_out: out_base % 16 == 0 && p.out_stride % 16 == 0 && p.row_bytes % 16 == 0,
        out_base,
        pbuf: warp_base,
        ring: warp_base + p.pbuf_words * 4,
        geo: step::Geometry {
            chunks: chunks as u32,
            row_bytes: p.row_bytes as u32,
            layout: book::Layout::new(chunks as u32, p.chunk),
            entries: table,
            flags: p.decode_flags,
        },
        book_smem: base,
    };
    if batch {
        let (warp, warps) = arch::global_warp();
        ctx.run_batches(warp, warps);
        return;
    }
    let flags = arch::to_global(p.flags);
    let index = arch::to_global(p.index);
    let offsets = arch::to_global(p.offsets);
    let packed = p.offsets != 0;
    let (mut i, warps) = arch::global_warp();
    while i < p.count {
        let out = out_base + i * p.out_stride;
        // SAFETY: i < count = index length.
        let t = if p.index != 0 {
            unsafe { arch::ld_global_u64(index + i * 8) }
        } else {
            p.first + i
        };
        if t >= p.rows {
            ctx.fail(i, out, STATUS_BAD_INDEX);
            i += warps;
            continue;
        }
        // SAFETY: t < rows: flag byte t / 8 and offsets t, t + 1 exist.
        let encoded = unsafe { arch::ld_global_u8(flags + t / 8) } >> (t % 8) & 1 == 1;
        let (start, slot) = if packed {
            // SAFETY: as above.
            let (a, b) = unsafe {
                (
                    arch::ld_global_u64(offsets + t * 8),
                    arch::ld_global_u64(offsets + t * 8 + 8),
                )
            };
            (a.wrapping_sub(p.offset_base), b.wrapping_sub(a))
        } else {
            (t * p.row_bytes, p.row_bytes)
        };
        let src = arch::to_global(p.src) + start;
        if p.mode == DECODE_MODE_IDEAL {
            ctx.ideal(src, slot, out);
        } else if !encoded {
            if packed && slot != p.row_bytes {
                ctx.fail(i, out, STATUS_CORRUPT);
            } else {
                ctx.copy_raw(src, out);
            }
        } else if !ctx.decode(src, slot, packed, out) {
            ctx.fail(i, out, STATUS_CORRUPT);
        }
        // No copy may still be in flight into the ring when the next tensor
        // starts (an early exit on corrupt data leaves some behind).
        arch::cp_async_wait_all();
        arch::sync_warp();
        i += warps;
    }
}
