//! The decompression kernel: one warp per tensor (paper §4.3–4.4).
//!
//! Per tensor a warp
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
use crate::params::{DECODE_MODE_IDEAL, DecodeParams, STATUS_BAD_INDEX, STATUS_CORRUPT};
use crate::table;

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
    /// Lines below this are resident (their copies completed).
    ready: u64,
}

impl Ring {
    /// Start streaming `[src, src + len)`.
    #[inline(always)]
    fn new(smem: u32, lines: u32, src: u64, len: u64) -> Self {
        let first = src / LINE;
        Ring { smem, lines: lines as u64, src, end_line: (src + len).div_ceil(LINE), fetched: first, ready: first }
    }

    /// Line holding tensor byte `b`.
    #[inline(always)]
    fn line_of(&self, b: u64) -> u64 {
        (self.src + b) / LINE
    }

    /// Issue `cp.async` copies for lines `[fetched, min(end_line, limit))`.
    #[inline(always)]
    fn fetch_until(&mut self, limit: u64) {
        let stop = if limit < self.end_line { limit } else { self.end_line };
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
            unsafe { arch::cp_async::<16>(dst, line * LINE + part) };
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
    ring: u32,
    pbuf: u32,
}

impl Ctx {
    /// Table word `i` (u32) of the entries region.
    #[inline(always)]
    fn table_u32(&self, byte: u64) -> u32 {
        if self.in_smem {
            // SAFETY: byte < table_smem_bytes (the whole table is in smem).
            unsafe { arch::ld_shared_u32(self.table_smem + byte as u32) }
        } else {
            // SAFETY: the table holds this entry (host-built, k < chunks).
            unsafe { arch::ld_global_u32(self.table + byte) }
        }
    }

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

    /// Entry of chunk `k` as eight u32 (`C ≤ 4`).
    #[inline(always)]
    fn entry32(&self, k: u64) -> [u32; 8] {
        let base = k * 32;
        if self.in_smem {
            // SAFETY: 16-aligned entries inside the table copy.
            let a = unsafe { arch::ld_shared_v4(self.table_smem + base as u32) };
            // SAFETY: as above.
            let b = unsafe { arch::ld_shared_v4(self.table_smem + base as u32 + 16) };
            [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
        } else {
            core::array::from_fn(|i| self.table_u32(base + i as u64 * 4))
        }
    }

    /// Entry of chunk `k` for 8-byte chunks.
    #[inline(always)]
    fn entry64(&self, k: u64) -> table::Entry {
        let base = k * 72;
        let f = |i: u64| (self.table_u32(base + i * 8) as u64) | ((self.table_u32(base + i * 8 + 4) as u64) << 32);
        table::Entry { mask: f(0), bitval: f(1), free: f(2), mv: [f(3), f(4), f(5), f(6), f(7), f(8)] }
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
        let mut ring = Ring::new(self.ring, self.p.ring_lines, src, if packed { slot } else { pbytes });
        ring.ensure(ring.line_of(pbytes - 1) + 1, ring.line_of(0));
        let mut w = lane;
        while w < self.pwords {
            let first = w * 32;
            let n = if first + 32 <= k_total { 32 } else { k_total - first };
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
        let decoded = if c == 8 {
            self.decode_chunks::<true>(&mut ring, out, limit_bits)
        } else {
            self.decode_chunks::<false>(&mut ring, out, limit_bits)
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

    /// Decode every chunk, 32 per step; `WIDE` for 8-byte chunks. Returns the
    /// stream bit where the payload ended, or `None` on inconsistent bits.
    #[inline(always)]
    fn decode_chunks<const WIDE: bool>(&self, ring: &mut Ring, out: u64, limit_bits: u64) -> Option<u64> {
        let k_total = self.chunks;
        let l = self.p.row_bytes;
        let c = self.p.chunk as u64;
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
            if WIDE {
                let e = if valid { self.entry64(k) } else { table::Entry::default() };
                let width = if valid { table::payload_width(&e, part) } else { 0 };
                let bit = self.step(ring, &mut pos, width, limit_bits)?;
                if valid {
                    let v = ring.bits(bit, width);
                    self.store_chunk(out, k, table::decode_chunk(&e, part, v, 8), bytes);
                }
            } else {
                let e = if valid { self.entry32(k) } else { [0; 8] };
                let width = if !valid {
                    0
                } else if part {
                    e[2].count_ones()
                } else {
                    (bytes * 8) as u32
                };
                let bit = self.step(ring, &mut pos, width, limit_bits)?;
                if valid {
                    let v = ring.bits32(bit, width);
                    self.store_chunk(out, k, table::decode_chunk32(&e, part, v, self.p.chunk) as u64, bytes);
                }
            }
            g += 1;
        }
        Some(pos)
    }

    /// Benchmark baseline: fetch the stored bytes, write `L` bytes.
    #[inline(always)]
    fn ideal(&self, src: u64, slot: u64, out: u64) {
        let mut ring = Ring::new(self.ring, self.p.ring_lines, src, slot);
        let mut b = 0;
        while b < slot {
            let end = if b + (self.p.ring_lines as u64 - 1) * LINE < slot { b + (self.p.ring_lines as u64 - 1) * LINE } else { slot };
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
pub unsafe fn run(p: DecodeParams) {
    let base = arch::dyn_smem_base();
    let table_smem = base;
    let in_smem = p.table_smem_bytes > 0;
    // Chunk sizes are powers of two (1, 2, 4, 8): shifts and masks, no
    // division (and no division-by-zero panic path in the PTX).
    let shift = p.chunk.trailing_zeros() & 3;
    let cmask = (1u64 << shift) - 1;
    let chunks = (p.row_bytes + cmask) >> shift;
    let table = arch::to_global(p.table);
    if in_smem {
        // The codebook is loaded once per block (paper: metadata stays on the
        // GPU; here it also stays in shared memory when it fits).
        let words = p.table_smem_bytes / 4;
        let mut i = arch::thread_idx();
        while i < words {
            // SAFETY: i·4 < table_smem_bytes <= table length.
            unsafe { arch::st_shared_u32(table_smem + i * 4, arch::ld_global_u32(table + i as u64 * 4)) };
            i += arch::block_dim();
        }
        arch::sync_threads();
    }
    let warp_bytes = p.pbuf_words * 4 + p.ring_lines * LINE as u32;
    let warp_base = base + p.table_smem_bytes + arch::warp_in_block() * warp_bytes;
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
        pbuf: warp_base,
        ring: warp_base + p.pbuf_words * 4,
    };
    let flags = arch::to_global(p.flags);
    let index = arch::to_global(p.index);
    let offsets = arch::to_global(p.offsets);
    let packed = p.offsets != 0;
    let (mut i, warps) = arch::global_warp();
    while i < p.count {
        let out = out_base + i * p.out_stride;
        // SAFETY: i < count = index length.
        let t = if p.index != 0 { unsafe { arch::ld_global_u64(index + i * 8) } } else { p.first + i };
        if t >= p.rows {
            ctx.fail(i, out, STATUS_BAD_INDEX);
            i += warps;
            continue;
        }
        // SAFETY: t < rows: flag byte t / 8 and offsets t, t + 1 exist.
        let encoded = unsafe { arch::ld_global_u8(flags + t / 8) } >> (t % 8) & 1 == 1;
        let (start, slot) = if packed {
            // SAFETY: as above.
            let (a, b) = unsafe { (arch::ld_global_u64(offsets + t * 8), arch::ld_global_u64(offsets + t * 8 + 8)) };
            (a, b.wrapping_sub(a))
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
