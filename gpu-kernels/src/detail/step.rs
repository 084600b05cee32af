//! The batch decoder's inner loop: one encoded tensor, resident contiguously
//! in shared memory, decoded by one warp into its output row, 16 output
//! bytes per lane per step (paper §4.3, with the step widened and the work
//! per chunk cut).
//!
//! Written over the [`crate::simt`] traits, so the kernels and the host
//! emulation (`host/kernel_emu/`) run this very body; the tests compare it
//! with the CPU decoder with every fast path forced on and forced off.
//!
//! A step, per lane:
//! 1. its `16/C` participation bits (one shared-memory word);
//! 2. its chunks' payload widths from the book's `PARAMS` (`pw` when the
//!    chunk matches, `fw` otherwise) and their sum;
//! 3. its first payload bit: an exclusive warp scan of the sums, or, when
//!    every chunk of the step matches (one ballot), the book's precomputed
//!    `PREFIX`, which needs no shuffle at all, or (the uniform and periodic
//!    kernels, a tensor a warp), when at most [`ESCAPE_LANES`] lanes hold a
//!    chunk that does not match, `PREFIX` widened by those lanes' extra
//!    bits, one shuffle each;
//! 4. each chunk's payload (two or three shared-memory words and a funnel
//!    shift), expanded by the step's class (see [`crate::detail::book`]): nothing to
//!    expand when the step's columns have no free bits, two shifts and two
//!    logic operations when their free bits form at most two runs, the
//!    move-mask rounds otherwise;
//! 5. one 16-byte store.
//!
//! Q: why 16 bytes per lane rather than one chunk?
//! A: the scan (five dependent shuffles), the participation read and the
//! loop overhead are paid once per 16 output bytes instead of once per
//! chunk, and the output leaves in one 16-byte store per lane (a 512-byte
//! warp store) when the row is aligned.

use crate::detail::bits::{funnel_r32, low_mask, low_mask32, merge_bytes};
use crate::detail::book::{
    CLASS_GENERAL, CLASS_NONE_FREE, CLASS_PERIODIC, CLASS_PERIODIC_HALVES, CLASS_TWO_RUNS,
    CLASS_UNIFORM, Layout, chunks_per_lane, expand2_64, expand2_own,
};
use crate::detail::table::{self, Entry, entry_bytes, window64};
use crate::params::{DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX};
use crate::simt::{Book, Lanes, Mem, Shared, exclusive_scan_in};

/// Run `$body` for `$j` = 0, 1, … 15 with `$j` a constant in each copy.
///
/// Q: why a macro rather than a loop?
/// A: the per-chunk values live in small arrays; a loop LLVM declines to
/// unroll (its bodies are large for 1-byte chunks) indexes them at run time,
/// which moves them to local memory. Sixteen constant copies, the ones past
/// `16/C` folded away, keep every index constant.
macro_rules! each_chunk {
    ($j:ident => $body:block) => {
        each_chunk!(@ $j $body 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $j:ident $body:block $($n:literal)*) => {
        $( { let $j: u32 = $n; $body } )*
    };
}

mod escapes;
mod uniform;

pub use escapes::ESCAPE_LANES;
use escapes::prefix_with_escapes;
use uniform::{Uniform, expand_periodic, expand_uniform};

/// What the step needs to know about the tensors of a launch.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Chunks per tensor (`K`).
    pub chunks: u32,
    /// Bytes per tensor (`L`).
    pub row_bytes: u32,
    /// The decode book's layout.
    pub layout: Layout,
    /// Global address of the per-chunk entry table (`crate::detail::table`), read
    /// only by [`CLASS_GENERAL`] steps.
    pub entries: u64,
    /// `DECODE_FLAG_*` bits (fast paths forced off, for tests).
    pub flags: u32,
}

/// Where the step puts each lane's decoded bytes.
///
/// Q: why a sink rather than a store?
/// A: a consumer kernel can take the row in registers, 16 bytes a lane a
/// step (reduce it, convert it, multiply it), without writing it to memory
/// and reading it back; ibp's own kernels use [`RowStore`]. Every lane calls
/// [`Sink::put`] once a step, so a sink may use shuffles.
pub trait Sink {
    /// Row bytes `[ob, ob + n)` are in `w` (little-endian, byte `i` of the
    /// lane's 16 in byte `i % 4` of word `i / 4`); `n` is 16 inside the
    /// row, less in its last step, and 0 for lanes past its end (their
    /// `w` is meaningless).
    fn put(&mut self, ob: u32, w: [u32; 4], n: u32);
}

/// A sink that stores the row at a global address.
pub struct RowStore<'a, M> {
    m: &'a M,
    out: u64,
    align: u32,
}

impl<'a, M: Mem> RowStore<'a, M> {
    /// The row at global address `out`.
    ///
    /// # Safety
    /// `out .. out + L` is writable global memory for the whole decode.
    #[inline(always)]
    pub unsafe fn new(m: &'a M, out: u64) -> Self {
        let low = (out as u32) & 15;
        let align = if low == 0 {
            16
        } else {
            1 << low.trailing_zeros()
        };
        RowStore { m, out, align }
    }
}

impl<M: Mem> Sink for RowStore<'_, M> {
    #[inline(always)]
    fn put(&mut self, ob: u32, w: [u32; 4], n: u32) {
        if n == 16 {
            store16(self.m, self.out + ob as u64, w, self.align);
        } else if n > 0 {
            // SAFETY: the row's last bytes, [ob, ob + n) (`RowStore::new`).
            unsafe { store_tail(self.m, self.out + ob as u64, w[0], w[1], w[2], w[3], n) };
        }
    }
}

/// Where the step reads one tensor's encoded stream: contiguous in shared
/// memory (batch mode, [`Contig`]) or streamed through a ring of lines
/// (streaming mode). Every call is warp-uniform in control flow.
///
/// Q: why do the reads return whole windows, unmasked?
/// A: masking to a width costs as much as the read; the step masks only
/// where stray high bits could land in another chunk's bytes (chunks of 1
/// or 2 bytes, the participation bits, the padding).
pub trait Source {
    /// 32 participation bits from chunk `k0` (`k0 < K`; bits past `K` are
    /// unspecified).
    fn pbits(&self, k0: u32) -> u32;
    /// 32 stream bits from `bit` (inside what [`Source::ready`] made
    /// resident, or within 8 bytes past the stored bytes); bits past the
    /// stored bytes are unspecified.
    fn raw32(&self, bit: u32) -> u32;
    /// 64 stream bits from `bit`, likewise.
    fn raw64(&self, bit: u32) -> u64;
    /// Make stream bits `[start, end)` resident (`end ≤ 8E`); bits before
    /// `start` are not read again.
    fn ready(&mut self, start: u32, end: u32);
}

/// 32 bits from bit `bit` of the bytes at shared address `base`.
#[inline(always)]
pub fn shared_raw32<S: Shared>(s: &S, base: u32, bit: u32) -> u32 {
    let a = base * 8 + bit;
    let w = (a >> 5) << 2;
    // SAFETY: the caller's (every user reads inside its region plus the
    // 16 bytes of padding after it).
    let (w0, w1) = unsafe { (s.lds_u32(w), s.lds_u32(w + 4)) };
    funnel_r32(w0, w1, a)
}

/// A tensor's stored bytes held contiguously in shared memory.
pub struct Contig<'a, S> {
    s: &'a S,
    base: u32,
}

impl<'a, S: Shared> Contig<'a, S> {
    /// The stored bytes at shared address `base`.
    ///
    /// # Safety
    /// `base .. base + E + 32` is readable shared memory (a bit window may
    /// touch 16 bytes past the stored bytes, the uniform step's last step
    /// 20, a corrupt tensor beside another 24; `WORKSPACE_PAD`).
    #[inline(always)]
    pub unsafe fn new(s: &'a S, base: u32) -> Self {
        Contig { s, base }
    }
}

impl<S: Shared> Source for Contig<'_, S> {
    #[inline(always)]
    fn pbits(&self, k0: u32) -> u32 {
        self.raw32(k0)
    }
    #[inline(always)]
    fn raw32(&self, bit: u32) -> u32 {
        shared_raw32(self.s, self.base, bit)
    }
    #[inline(always)]
    fn raw64(&self, bit: u32) -> u64 {
        let a = self.base * 8 + bit;
        let w = (a >> 5) << 2;
        // SAFETY: inside the stored bytes plus padding (`Contig::new`).
        let (w0, w1, w2) = unsafe {
            (
                self.s.lds_u32(w),
                self.s.lds_u32(w + 4),
                self.s.lds_u32(w + 8),
            )
        };
        window64(w0, w1, w2, a & 31, 64)
    }
    #[inline(always)]
    fn ready(&mut self, _: u32, _: u32) {}
}

/// Field of chunk `j ∈ {0, 1}` for 8-byte chunks.
#[inline(always)]
fn field64(w: &[u32; 4], j: u32) -> u64 {
    (w[(2 * j) as usize] as u64) | ((w[(2 * j + 1) as usize] as u64) << 32)
}

/// Payload width of chunk `j` of a lane from its `PARAMS` word `x` and the
/// lane's participation bits `p`.
#[inline(always)]
fn width(x: u32, p: u32, j: u32) -> u32 {
    if (p >> j) & 1 == 1 {
        (x >> 16) & 0xff
    } else {
        x >> 24
    }
}

/// Load the lane's `PARAMS` words for chunks of 4 or 8 bytes (`16/C` of
/// them; the rest are 0).
#[inline(always)]
fn load_params<const C: u32, B: Book>(b: &B, off: u32) -> [u32; 16] {
    let mut p = [0u32; 16];
    // SAFETY: (all loads) inside the book's PARAMS field (whole steps),
    // aligned to the load width (`off` is a multiple of 4·16/C bytes).
    unsafe {
        match C {
            8 => {
                let x = b.ld_v2(off);
                p[0] = x[0];
                p[1] = x[1];
            }
            _ => p[..4].copy_from_slice(&b.ld_v4(off)),
        }
    }
    p
}

/// Four `PARAMS` words at book offset `off` (16-aligned).
#[inline(always)]
fn param4<B: Book>(b: &B, off: u32) -> [u32; 4] {
    // SAFETY: inside the PARAMS field (whole steps), 16-aligned.
    unsafe { b.ld_v4(off) }
}

/// Entry of chunk `k` from the global entry table (general path).
#[inline(always)]
pub(crate) fn entry<const C: u32, M: Mem>(m: &M, entries: u64, k: u32) -> Entry {
    let a = entries + k as u64 * entry_bytes(C) as u64;
    let mut w = [0u32; 18];
    let mut i = 0;
    while i < 9 {
        if i * 8 < entry_bytes(C) {
            // SAFETY: inside entry k of the table (k < K), 8-aligned.
            let x = unsafe { m.ld_ro_u64(a + 8 * i as u64) };
            w[2 * i as usize] = x as u32;
            w[2 * i as usize + 1] = (x >> 32) as u32;
        }
        i += 1;
    }
    Entry::from_words::<C>(&w)
}

/// Store the lane's 16 output bytes at `a`; `align` is the largest power of
/// two (at most 16) dividing `a`.
///
/// Q: why three widths?
/// A: a row whose length is not a multiple of 16 (Cora's 5732 bytes) leaves
/// most rows 4- or 8-aligned; two 8-byte or four 4-byte stores are still far
/// cheaper than byte stores, which only the tail of a row and rows at odd
/// addresses need ([`store_tail`], kept out of line).
#[inline(always)]
fn store16<M: Mem>(m: &M, a: u64, w: [u32; 4], align: u32) {
    // SAFETY: (all stores) the caller owns bytes [a, a + 16) of the output
    // row; each store is aligned to its width by `align`.
    unsafe {
        if align >= 16 {
            m.st_v4(a, w);
        } else if align >= 8 {
            m.st_u64(a, (w[0] as u64) | ((w[1] as u64) << 32));
            m.st_u64(a + 8, (w[2] as u64) | ((w[3] as u64) << 32));
        } else if align >= 4 {
            m.st_u32(a, w[0]);
            m.st_u32(a + 4, w[1]);
            m.st_u32(a + 8, w[2]);
            m.st_u32(a + 12, w[3]);
        } else {
            store_tail(m, a, w[0], w[1], w[2], w[3], 16);
        }
    }
}

/// Store bytes `[0, n)` of the lane's output at `a`, one byte at a time.
///
/// Q: why four words rather than an array or a tuple?
/// A: an aggregate argument of a function that is not inlined travels
/// through local memory (a stack frame); four scalars stay in registers.
///
/// # Safety
/// The caller owns bytes `[a, a + n)`.
#[inline(never)]
unsafe fn store_tail<M: Mem>(m: &M, a: u64, w0: u32, w1: u32, w2: u32, w3: u32, n: u32) {
    let mut b = 0;
    while b < n && b < 16 {
        let x = match b / 4 {
            0 => w0,
            1 => w1,
            2 => w2,
            _ => w3,
        };
        // SAFETY: inside [a, a + n).
        unsafe { m.st_u8(a + b as u64, x >> (8 * (b % 4))) };
        b += 1;
    }
}

/// A lane's 16 output bytes of a step that is not all bit values: its
/// chunks `k0 ..`, participation bits `p`, payload from stream bit `bit`,
/// `PARAMS` words `prm` (chunks of 4 or 8 bytes; 1- and 2-byte chunks
/// reload theirs four at a time).
///
/// `CLASS`: the step's class (warp-uniform). A matching chunk is its bit
/// value ([`CLASS_NONE_FREE`]), [`expand2_32`]/[`expand2_64`] of its
/// payload with the step's `RUN1` and `FREE` words `r1`, `fr`
/// ([`CLASS_TWO_RUNS`]), or its payload expanded by its entry's move
/// masks, read from the global table ([`CLASS_GENERAL`]).
///
/// Q: why does a chunk compute both of its outputs and select one?
/// A: the participation bit differs from lane to lane; branching on it
/// put a reconvergence barrier (BSSY/BSYNC) and two or three branches
/// around every chunk, about a fifth of the step's instructions and its
/// most sampled stalls (Nsight Compute on MiniLM bf16, 2026-11-28). Both
/// outputs cost a few logic operations; the select is one.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
#[allow(unused_assignments)] // the last chunk's `bit +=` is never read
fn expand<const C: u32, const CLASS: u8, S: Source, B: Book, M: Mem>(
    s: &S,
    b: &B,
    m: &M,
    g: &Geometry,
    k0: u32,
    p: u32,
    mut bit: u32,
    bv: [u32; 4],
    prm: &[u32; 16],
) -> [u32; 4] {
    let cpl = chunks_per_lane(C);
    let lay = g.layout;
    // 1- and 2-byte chunks: the lane's RUN1 and FREE words (two-run
    // steps) read a word at a time, where its chunks are expanded.
    //
    // Q: why not one 16-byte load of each, as for the bit values?
    // A: eight more registers live across the step pushed the kernels past
    // their cap (56–160 bytes of spills on sm_90); a word's two shared loads
    // are cheap beside that.
    let ob = k0 * C;
    // SAFETY: inside the RUN1 field (word i < 4 of the lane's 16 bytes).
    let r1w = |i: u32| unsafe { b.ld_u32(lay.run1 + ob + 4 * i) };
    // SAFETY: inside the FREE field, likewise.
    let frw = |i: u32| unsafe { b.ld_u32(lay.free + ob + 4 * i) };
    let mut o = [0u32; 4];
    if C == 8 {
        each_chunk!(j => {
          if j < 2 {
            let q = prm[j as usize];
            let wj = width(q, p, j);
            let v = s.raw64(bit);
            bit += wj;
            let x = if CLASS == CLASS_GENERAL {
                if (p >> j) & 1 == 0 {
                    v
                } else {
                    let e = entry::<8, M>(m, g.entries, k0 + j);
                    table::decode_entry::<8>(&e, true, v)
                }
            } else if CLASS == CLASS_NONE_FREE {
                if (p >> j) & 1 == 1 { field64(&bv, j) } else { v }
            } else if (p >> j) & 1 == 0 {
                // Two 8-byte chunks a lane: a branch costs less here than
                // both 64-bit outputs (measured: 0.93–1.01 with the select).
                v
            } else {
                // SAFETY: inside the RUN1 and FREE fields (chunk j of the
                // lane's two), 8-aligned.
                let (r, f) = unsafe { (b.ld_v2(lay.run1 + ob + 8 * j), b.ld_v2(lay.free + ob + 8 * j)) };
                let w64 = |x: [u32; 2]| (x[0] as u64) | ((x[1] as u64) << 32);
                expand2_64(v, q & 0xff, (q >> 8) & 0xff, w64(r), w64(f), field64(&bv, j))
            };
            o[2 * j as usize] = x as u32;
            o[2 * j as usize + 1] = (x >> 32) as u32;
          }
        });
        return o;
    }
    // 4-byte chunks: the lane's RUN1 and FREE words in one load each, as
    // its bit values.
    let (r4, f4) = if C == 4 && CLASS == CLASS_TWO_RUNS {
        // SAFETY: inside the RUN1 and FREE fields, 16-aligned.
        unsafe { (b.ld_v4(lay.run1 + ob), b.ld_v4(lay.free + ob)) }
    } else {
        ([0; 4], [0; 4])
    };
    let mut grp = [0u32; 4];
    let (mut r1c, mut frc) = (0u32, 0u32);
    let mut win = 0u32;
    each_chunk!(j => {
        if j < cpl {
            if C <= 2 && j.is_multiple_of(4) {
                grp = param4(b, lay.params + 4 * (k0 + j));
            }
            let q = if C <= 2 { grp[(j % 4) as usize] } else { prm[j as usize] };
            let wj = width(q, p, j);
            // Q: why one read per 4 bytes of chunks?
            // A: chunks of 1 or 2 bytes have payloads of at most
            // 8 or 16 bits, so the 4/C chunks of one output word
            // fit one 32-bit read; each then shifts its bits out
            // (one instruction instead of a read's eight).
            //
            // Q: why is a chunk's payload not masked to its width?
            // A: a chunk's output is kept only in its own bytes (the
            // merge below), and there the bits above its payload (the
            // next chunks') cannot land: a raw chunk's own bytes are
            // its 8C bits, and the two-run expansion shifts them past
            // its second run, where FREE has no bit. That saves a
            // mask (three instructions) a chunk. The general path's
            // move masks read every bit, so it masks.
            let v = if C == 4 {
                let v = s.raw32(bit);
                bit += wj;
                v
            } else {
                let per_word = 4 / C;
                if j.is_multiple_of(per_word) {
                    if CLASS == CLASS_TWO_RUNS {
                        r1c = r1w(j / per_word);
                        frc = frw(j / per_word);
                    }
                    let mut gw = 0;
                    each_chunk!(i => {
                        if i < per_word {
                            gw += width(grp[((j + i) % 4) as usize], p, (j + i) % 16);
                        }
                    });
                    win = s.raw32(bit);
                    bit += gw;
                }
                let v = win;
                win >>= wj & 31;
                v
            };
            // Q: why expand in place in the output word?
            // A: the book's `s1` and `d2` of a 1- or 2-byte chunk
            // already include the chunk's offset in its output
            // word, and a chunk's shifted payload never leaves its
            // own bytes, so the word's whole RUN1 and FREE words
            // serve every chunk in it: no per-chunk field
            // extraction, no repacking.
            let byte = j * C;
            let wi = (byte / 4) as usize;
            let sh = (byte % 4) * 8;
            let x = if CLASS == CLASS_GENERAL {
                let v = if C == 4 { v } else { v & low_mask32(wj) };
                if (p >> j) & 1 == 0 {
                    v << sh
                } else if k0 + j < g.chunks {
                    let e = entry::<C, M>(m, g.entries, k0 + j);
                    (table::decode_entry::<C>(&e, true, v as u64) as u32) << sh
                } else {
                    0
                }
            } else if CLASS == CLASS_NONE_FREE {
                if (p >> j) & 1 == 1 { bv[wi] } else { v << sh }
            } else {
                let (r, f) = if C == 4 { (r4[wi], f4[wi]) } else { (r1c, frc) };
                let e = expand2_own(v, q, r, f, bv[wi]);
                if (p >> j) & 1 == 1 { e } else { v << sh }
            };
            // The chunk's own bytes of `x` into its word: bytes below
            // `sh` are the earlier chunks' (one byte permute), bytes
            // above are overwritten by the later ones.
            if sh == 0 {
                o[wi] = x;
            } else {
                o[wi] = merge_bytes(o[wi], x, sh / 8);
            }
        }
    });
    o
}

/// Decode the encoded tensor of `e_bytes` stored bytes read through `s`,
/// handing its row to `sink` 16 bytes a lane a step. Returns false when its bits disagree with its
/// length or padding (corrupt); nothing outside the stored bytes (plus the
/// region's padding) is read either way.
///
/// Every lane calls this with the same arguments (warp-uniform control).
///
/// # Safety
/// `s` holds the tensor's `e_bytes` stored bytes; the book `b` holds a
/// [`Layout`] of `g.layout`; `g.entries` holds `K` entries; `e_bytes ≥
/// ⌈K/8⌉`.
#[inline(always)]
pub unsafe fn decode_row<const C: u32, W: Lanes, S: Source, B: Book, M: Mem, K: Sink>(
    w: &W,
    s: &mut S,
    b: &B,
    m: &M,
    g: &Geometry,
    e_bytes: u32,
    sink: &mut K,
) -> bool {
    // SAFETY: forwarded.
    unsafe { decode_row_as::<C, ANY, ANY, true, W, S, B, M, K>(w, s, b, m, g, e_bytes, sink) }
}

/// `CLASS` / `PREFIX` value of [`decode_row_as`]: decided at run time.
pub const ANY: u8 = u8::MAX;

/// [`decode_row`] with the step class and the all-match shortcut fixed at
/// compile time, for counting one path's instructions (`scripts/sass.sh`
/// reads the probe kernels built from this): `CLASS` is a `CLASS_*` or
/// [`ANY`]; `PREFIX` is 1 (every step matches: prefix, no scan), 0 (always
/// scan) or [`ANY`]; `TAIL` false drops the store of a row's last partial
/// 16 bytes (which the steady state never takes). Only [`ANY`]/[`ANY`]/true
/// decodes every input correctly.
///
/// # Safety
/// As [`decode_row`].
#[inline(always)]
#[allow(unused_assignments)] // the last chunk's `bit +=` is never read
pub unsafe fn decode_row_as<
    const C: u32,
    const CLASS: u8,
    const PREFIX: u8,
    const TAIL: bool,
    W: Lanes,
    S: Source,
    B: Book,
    M: Mem,
    K: Sink,
>(
    w: &W,
    s: &mut S,
    b: &B,
    m: &M,
    g: &Geometry,
    e_bytes: u32,
    sink: &mut K,
) -> bool {
    // SAFETY: forwarded.
    unsafe { decode_in::<C, 32, CLASS, PREFIX, TAIL, W, S, B, M, K>(w, s, b, m, g, e_bytes, sink) }
}

/// [`decode_row`] by groups of `G` lanes (`G` = 8, 16 or 32): each group
/// of `G` consecutive lanes decodes its own tensor, in lockstep with the
/// other groups, `16·G` output bytes a group step. Lane `l` of a group in
/// group step `s` decodes chunks `(s·G + l)·16/C` on, so a group step is a
/// quarter, a half or all of a book step, and the book needs no other
/// layout.
///
/// The tensor arguments (`s`, `e_bytes`, `sink`, and for a clustered
/// dataset the book `b` and `g.entries`) are uniform within a group, not
/// across the warp; `g.chunks`, `g.row_bytes` and `g.layout` are the
/// warp's. Returns, in every lane, whether its group's tensor decoded.
///
/// Q: why several tensors per warp?
/// A: a warp step covers 512 output bytes, so a 768-byte row takes two
/// steps with the second half empty, and each tensor's batch bookkeeping
/// (its descriptor broadcast, its sink, its end check) is paid by the
/// whole warp. Two tensors a warp, 256 bytes a group step, decode a
/// 768-byte row in 1.5 steps' instructions and share that bookkeeping.
///
/// Q: what does a group do when its tensor is corrupt?
/// A: it cannot leave the loop alone (the others still shuffle), so it
/// keeps stepping with its read position pinned at bit 0 of its stored
/// bytes (reads stay within them plus the region's padding), stores
/// garbage, and reports false; the caller then zeroes its row.
///
/// # Safety
/// As [`decode_row`], per group.
#[inline(always)]
#[allow(unused_assignments)] // the last chunk's `bit +=` is never read
pub unsafe fn decode_in<
    const C: u32,
    const G: u32,
    const CLASS: u8,
    const PREFIX: u8,
    const TAIL: bool,
    W: Lanes,
    S: Source,
    B: Book,
    M: Mem,
    K: Sink,
>(
    w: &W,
    s: &mut S,
    b: &B,
    m: &M,
    g: &Geometry,
    e_bytes: u32,
    sink: &mut K,
) -> bool {
    let cpl = chunks_per_lane(C);
    let k_total = g.chunks;
    let lay = g.layout;
    // Groups per book step (1, 2 or 4), the lane within its group, and the
    // group's first lane.
    let per = 32 / G;
    let lane = w.lane() & (G - 1);
    let first = w.lane() & !(G - 1);
    let limit = e_bytes * 8;
    let classes = g.flags & DECODE_FLAG_NO_CLASSES == 0;
    let prefix = g.flags & DECODE_FLAG_NO_PREFIX == 0;
    let mut pos = k_total;
    let mut ok = true;
    // Group steps: whole book steps for G = 32; for G < 32 only those that
    // hold a chunk (the book's last step may be half past the tensor).
    let steps = if G == 32 {
        lay.steps
    } else {
        k_total.div_ceil(G * cpl)
    };
    // Q: how does the step know a tensor's steps are uniform?
    // A: from the kernel: `CLASS` = [`CLASS_UNIFORM`] is a kernel of its
    // own (`ibp_decode_uniform`, `ibp_decode_pairs_uniform`), launched by
    // the host only for a book whose every step is uniform. Deciding in
    // the step put a shared-memory load's latency before every step's
    // widths, and one loop holding both paths ran the uniform path's
    // instructions predicated off in every two-run step (Nsight Compute:
    // +15% executed on a 4096-byte table, 8–13% slower, 2026-11-29).
    let uni = (CLASS == CLASS_UNIFORM || CLASS == CLASS_PERIODIC || CLASS == CLASS_PERIODIC_HALVES)
        && C <= 4;
    // The whole group steps (a step past the tensor's end has zero-width
    // chunks).
    let whole = k_total / (G * cpl);
    let mut step = 0;
    macro_rules! group_steps {
        ($uni:expr, $whole:expr, $end:expr) => {
            while step < $end {
                let k0 = (step * G + lane) * cpl;
                let nvalid = if $whole {
                    cpl
                } else if k0 >= k_total {
                    0
                } else if k_total - k0 < cpl {
                    k_total - k0
                } else {
                    cpl
                };
                let vmask = if nvalid == cpl {
                    low_mask(cpl) as u32
                } else {
                    low_mask32(nvalid)
                };
                // Bits past K are payload, not participation: masked off. A lane
                // past the tensor's end (`vmask` 0) reads the last chunk's bits
                // rather than branching around the read.
                let p = s.pbits(k0.min(k_total - 1)) & vmask;
                // The book step holding this group step, and the group step's
                // half of it (0 for G = 32).
                let bstep = step / per;
                let sub = step % per;
                let un = if $uni {
                    Uniform::load::<C, B>(b, &lay, bstep)
                } else {
                    Uniform { q: 0, run1: 0, free: 0, bitval: 0 }
                };
                // Q: why are 1- and 2-byte chunks' PARAMS loaded twice, four at a
                // time?
                // A: sixteen (or eight) words held from the widths to the expansion
                // push the kernel past its register cap (it spilled); two 16-byte
                // shared loads per group cost less than the spill.
                let prm = if C >= 4 && !$uni {
                    load_params::<C, B>(b, lay.params + 4 * k0)
                } else {
                    [0; 16]
                };
                let mut tot = 0;
                if $uni {
                    // Chunks past the tensor's end (a last step's) have
                    // width 0 here, as in the book; their reads in
                    // `expand_uniform` still advance by `fw` (at most
                    // three words', 96 bits), so a window may end 20
                    // bytes past the stored bytes: inside the 32 bytes a
                    // batch region is followed by (`WORKSPACE_PAD`).
                    tot = nvalid * un.fw() - (un.fw() - un.pw()) * p.count_ones();
                } else {
                    let mut grp = [0u32; 4];
                    each_chunk!(j => {
                        if j < cpl {
                            if C <= 2 && j.is_multiple_of(4) {
                                grp = param4(b, lay.params + 4 * (k0 + j));
                            }
                            let x = if C <= 2 { grp[(j % 4) as usize] } else { prm[j as usize] };
                            tot += width(x, p, j);
                        }
                    });
                }
                let vote = w.ballot(p == vmask);
                // Every chunk of the group's step matches; and of the warp's, which
                // decides between the prefix and the scan (a shuffle: warp-uniform).
                let all_match = match PREFIX {
                    ANY if G == 32 => vote == u32::MAX,
                    ANY => (vote >> first) & low_mask32(G) == low_mask32(G),
                    x => x == 1,
                };
                let warp_match = match PREFIX {
                    ANY => vote == u32::MAX,
                    x => x == 1,
                };
                let (excl, sum) = if warp_match && prefix {
                    let row = lay.prefix + 128 * bstep;
                    let at = row + 4 * (sub * G);
                    // SAFETY: inside the book's PREFIX field (bstep < book steps):
                    // the group's lanes' inclusive prefixes, the prefix at its last
                    // lane, and (second half) the prefix at the lane before it.
                    let (incl, end, before) = unsafe {
                        (
                            b.ld_u32(at + 4 * lane),
                            b.ld_u32(at + 4 * (G - 1)),
                            if sub > 0 { b.ld_u32(at - 4) } else { 0 },
                        )
                    };
                    (
                        incl.wrapping_sub(before).wrapping_sub(tot),
                        end.wrapping_sub(before),
                    )
                } else if $uni
                    && G == 32
                    && PREFIX == ANY
                    && prefix
                    && (!vote).count_ones() <= ESCAPE_LANES
                {
                    let at = lay.prefix + 128 * bstep + 4 * (sub * G);
                    // SAFETY: the group's lanes' entries of the book's PREFIX
                    // field (`prefix_with_escapes`).
                    unsafe { prefix_with_escapes::<G, W, B>(w, b, at, sub, tot, p == vmask, !vote) }
                } else {
                    exclusive_scan_in::<G, W>(w, tot)
                };
                if sum > limit || pos > limit - sum {
                    if G == 32 {
                        return false;
                    }
                    ok = false;
                }
                s.ready(pos, pos + sum);
                let ob = k0 * C;
                // A corrupt group reads from its first stored bit (see above).
                let bit = if ok { pos + excl } else { 0 };
                let o = if $uni {
                    if CLASS == CLASS_PERIODIC || CLASS == CLASS_PERIODIC_HALVES {
                        expand_periodic::<C, CLASS, S>(s, p, bit, &un)
                    } else {
                        expand_uniform::<C, S>(s, p, bit, &un)
                    }
                } else {
                    let class = if CLASS != ANY {
                        CLASS
                    } else if classes {
                        // SAFETY: inside the CLASS field.
                        unsafe { b.ld_u8(lay.class + bstep) as u8 }
                    } else {
                        CLASS_GENERAL
                    };
                    // SAFETY: inside the BITVAL field, 16-aligned.
                    let bv = unsafe { b.ld_v4(lay.bitval + ob) };
                    if class == CLASS_NONE_FREE && all_match {
                        bv
                    } else if class == CLASS_NONE_FREE {
                        expand::<C, CLASS_NONE_FREE, S, B, M>(s, b, m, g, k0, p, bit, bv, &prm)
                    } else if class == CLASS_GENERAL {
                        expand::<C, CLASS_GENERAL, S, B, M>(s, b, m, g, k0, p, bit, bv, &prm)
                    } else {
                        // Two runs (a uniform step is one too).
                        expand::<C, CLASS_TWO_RUNS, S, B, M>(s, b, m, g, k0, p, bit, bv, &prm)
                    }
                };
                let n = if !TAIL {
                    16
                } else {
                    g.row_bytes.saturating_sub(ob).min(16)
                };
                sink.put(ob, o, n);
                if ok {
                    pos += sum;
                }
                step += 1;
            }
        };
    }
    if uni {
        group_steps!(true, true, whole);
        group_steps!(true, false, steps);
    } else {
        group_steps!(false, false, steps);
    }
    // The stream must end exactly at E, with zero padding.
    let pad = (8 - pos % 8) % 8;
    ok && pos.div_ceil(8) == e_bytes && s.raw32(pos) & low_mask32(pad) == 0
}
