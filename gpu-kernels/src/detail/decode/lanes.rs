//! The lane decoder: one lane decodes one whole tensor, bit after bit, as
//! the CPU decoder does, and the 32 lanes of a warp decode 32 tensors in
//! lockstep (kernel `ibp_decode_lanes`).
//!
//! Q: why a lane a tensor, when the batch decoder gives a tensor a warp?
//! A: because the lanes of a warp then stand at the same chunk at the same
//! time. Everything the codebook says about a chunk (bit values, free-bit
//! runs, widths) is the same for all 32 of them: one broadcast load of the
//! book serves 32 tensors, and no lane needs its bit offset from the
//! others, so the warp scan, the step's prefix and the batch bookkeeping
//! are gone. What is left per chunk is the chunk's own work: its
//! participation bit, its width, a funnel shift and the expansion. The
//! steps of the two decoders cost about the same (`scripts/sass.sh
//! --steps`: 245 against 234 SASS instructions a 512-byte step, 2-byte
//! chunks); what this one drops is the rest: about 370 warp instructions
//! a 768-byte bf16 row against the batch decoder's 650, and a row of 64
//! bytes costs a lane only its 32 chunks, where a warp step of 512 bytes
//! would run mostly empty.
//!
//! Q: what does it give up?
//! A: locality. Each lane fetches its own tensor, so a warp's fetch and
//! a warp's 16-byte store touch up to 32 rows (the batch decoder's touch
//! four lines), and a launch needs many tensors (a lane each) to fill the
//! GPU. Measured on the H200, it wins on rows of up to 128 bytes and loses
//! past 256; the host's rule is in `host/gpu/decode/decoder.rs`
//! (`lanes_pay`), and it only serves tensors in device memory.
//!
//! # A lane's stream reader
//!
//! A lane copies its tensor's 16-byte blocks with `cp.async` into its own
//! ring of eight blocks in shared memory (plus a second copy of the first,
//! so a window never wraps), six blocks ahead of its position; a lane step
//! moves at most one block on, so one copy a step keeps up, and each step
//! waits for the copies of two steps before. The chunks of an output word
//! (at most 32 payload bits for 1-, 2- and 4-byte chunks) come from one
//! 32-bit window at the lane's bit position: two shared loads and a funnel
//! shift. Copies are clamped to the tensor's own blocks, so a corrupt
//! tensor reads garbage from its own bytes, never past them; the stored
//! length check at the end then fails it.
//!
//! # Corrupt input
//!
//! As the batch decoder: a tensor whose stream does not end at its stored
//! length (packed layout), whose encoded length is not below `L`
//! (fixed-stride), whose padding bits are not zero, or whose index is past
//! the dataset, is reported in the status words and its output row is
//! zeroed. A lane reports only its own tensor.

use crate::detail::bits::{low_mask, low_mask32};
use crate::detail::book::{
    CLASS_GENERAL, CLASS_NONE_FREE, CLASS_TWO_RUNS, CLASS_UNIFORM, Layout, chunks_per_lane,
};
use crate::detail::step::{ANY, RowStore, Sink, entry};
use crate::detail::table;
use crate::params::{DECODE_FLAG_NO_CLASSES, DecodeParams, STATUS_BAD_INDEX, STATUS_CORRUPT};
use crate::simt::{Book, Machine, Mem};

/// Run `$body` for `$j` = 0, 1, … 15 with `$j` a constant in each copy
/// (the per-chunk values stay in registers; see `crate::detail::step`).
macro_rules! each {
    ($j:ident => $body:block) => {
        each!(@ $j $body 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $j:ident $body:block $($n:literal)*) => {
        $( { let $j: u32 = $n; $body } )*
    };
}

/// Bytes of a lane's ring in shared memory: eight blocks of 16
/// bytes, then a second copy of the first block (so that a window that
/// starts in the ring's last word reads its next word without a wrap).
pub const LANE_RING_BYTES: u32 = 16 * RING_BLOCKS + 16;

/// 16-byte blocks in a lane's ring.
const RING_BLOCKS: u32 = 8;

/// Blocks a lane keeps fetched from the one its position is in. A lane
/// step reads at most 159 bits past its position (the block it is in and
/// the next two), and a step waits for all but the two newest groups of
/// copies, so the blocks it reads were fetched two steps or more before.
///
/// Q: why two steps? A: with one (five blocks ahead, the newest group
/// pending) the first shared load after the wait held 24% of the lane
/// decoder's stall samples (Nsight Compute, 768-byte rows, H200).
const AHEAD: u32 = 6;

/// One lane's reader of its tensor's stored bits (see the module docs):
/// the tensor's 16-byte blocks copied by `cp.async` into the lane's ring,
/// [`AHEAD`] blocks ahead of its position, and 32-bit windows read from
/// the ring at any bit.
struct Reader {
    /// Shared address of the lane's ring ([`LANE_RING_BYTES`]).
    ring: u32,
    /// The 16-byte block that holds the tensor's first byte.
    base: u64,
    /// Stream position, in bits from `base`.
    pos: u32,
    /// Blocks (from `base`) fetched or skipped so far.
    fetched: u32,
    /// The tensor's last block (from `base`): none after it is fetched.
    last: u32,
}

impl Reader {
    /// Fetch block `fetched` into its slot (and the copy of slot 0), unless
    /// it lies past the tensor.
    #[inline(always)]
    fn issue<H: Machine>(&mut self, h: &H) {
        if self.fetched <= self.last {
            let slot = self.fetched % RING_BLOCKS;
            let src = self.base + self.fetched as u64 * 16;
            // SAFETY: `src` is a 16-aligned block that holds a byte of the
            // tensor's stored bytes, inside the payload's whole lines (the
            // host's contract); the slots are inside the lane's ring.
            unsafe {
                h.cp16(self.ring + 16 * slot, src);
                if slot == 0 {
                    h.cp16(self.ring + 16 * RING_BLOCKS, src);
                }
            }
        }
        self.fetched += 1;
    }

    /// A reader of the stored bytes `[row, row + len)` (`len ≥ 1`), from
    /// stream bit `bit` on, with its first blocks resident.
    #[inline(always)]
    fn new<H: Machine>(h: &H, ring: u32, row: u64, len: u64, bit: u32) -> Self {
        let base = row & !15;
        let pos = ((row & 15) * 8) as u32 + bit;
        let mut r = Reader {
            ring,
            base,
            pos,
            fetched: pos >> 7,
            last: ((row + len - 1 - base) >> 4) as u32,
        };
        let mut i = 0;
        while i < AHEAD {
            r.issue(h);
            i += 1;
        }
        h.commit();
        h.wait_all();
        r
    }

    /// Once a lane step, before its reads: keep [`AHEAD`] blocks fetched
    /// from the current one (a step moves at most one block on), and wait
    /// for all but the two newest groups.
    #[inline(always)]
    fn advance<H: Machine>(&mut self, h: &H) {
        if self.fetched < (self.pos >> 7) + AHEAD {
            self.issue(h);
        }
        h.commit();
        h.wait_all_but_two();
    }

    /// The 32 stream bits from bit `bit` (inside the resident blocks).
    #[inline(always)]
    fn window<H: Machine>(&self, h: &H, bit: u32) -> u32 {
        let a = self.ring + ((bit >> 3) & (4 * RING_BLOCKS * 4 - 4));
        // SAFETY: inside the ring: a word of its blocks and the next (the
        // copy of block 0 follows the last).
        let (w0, w1) = unsafe { (h.lds_u32(a), h.lds_u32(a + 4)) };
        ((w0 as u64 | (w1 as u64) << 32) >> (bit & 31)) as u32
    }
}

/// A lane's participation bits: 32 at a time from the tensor's first
/// bytes, read as aligned words, one word ahead of use.
///
/// Q: why ahead? A: read when used, the word's load (an L2 round trip: the
/// tensor's blocks go to the ring past L1) held 23% of the lane decoder's
/// stall samples (Nsight Compute, 768-byte rows, H200).
struct Pbits {
    al: u64,
    shift: u32,
    /// The last word (from `al`) that holds a byte of the tensor.
    last: u32,
    hi: u32,
    /// The word after `hi`, in flight while `hi` is used.
    nx: u32,
    /// 0 for a raw tensor, whose chunks all read as not matching.
    keep: u32,
}

impl Pbits {
    #[inline(always)]
    fn word<M: Mem>(&self, m: &M, i: u32) -> u32 {
        let a = self.al + 4 * (if i > self.last { self.last } else { i }) as u64;
        // SAFETY: a 4-aligned word holding a byte of the tensor's stored
        // bytes (clamped to its last), inside the payload.
        unsafe { m.ld_u32(a) }
    }

    #[inline(always)]
    fn new<M: Mem>(m: &M, row: u64, len: u64, encoded: bool) -> Self {
        let mut p = Pbits {
            al: row & !3,
            shift: ((row & 3) * 8) as u32,
            last: ((row + len - 1 - (row & !3)) >> 2) as u32,
            hi: 0,
            nx: 0,
            keep: if encoded { u32::MAX } else { 0 },
        };
        p.hi = p.word(m, 0);
        p.nx = p.word(m, 1);
        p
    }

    /// Participation bits of chunks `32·i … 32·i + 31` (call with `i` =
    /// 0, 1, 2, … in order).
    #[inline(always)]
    fn next<M: Mem>(&mut self, m: &M, i: u32) -> u32 {
        let lo = self.hi;
        self.hi = self.nx;
        self.nx = self.word(m, i + 2);
        let w = ((lo as u64 | (self.hi as u64) << 32) >> self.shift) as u32;
        w & self.keep
    }
}

/// The book's fields for one lane step (16 output bytes, `16/C` chunks
/// from `k0`): bit values, lowest runs, free bits (`C` bytes a chunk,
/// in output order) and `PARAMS` words.
struct Fields {
    bv: [u32; 4],
    r1: [u32; 4],
    fr: [u32; 4],
    prm: [u32; 16],
}

#[inline(always)]
fn fields<const C: u32, B: Book>(b: &B, lay: &Layout, k0: u32) -> Fields {
    let ob = k0 * C;
    let mut prm = [0u32; 16];
    // SAFETY: (all loads) inside the book's fields: chunk k0 .. k0 + 16/C
    // lies inside the book's whole steps, 16-aligned (k0·C is a multiple
    // of 16, and PARAMS holds 4 bytes a chunk).
    unsafe {
        let at = lay.params + 4 * k0;
        match C {
            1 => {
                prm[..4].copy_from_slice(&b.ld_v4(at));
                prm[4..8].copy_from_slice(&b.ld_v4(at + 16));
                prm[8..12].copy_from_slice(&b.ld_v4(at + 32));
                prm[12..].copy_from_slice(&b.ld_v4(at + 48));
            }
            2 => {
                prm[..4].copy_from_slice(&b.ld_v4(at));
                prm[4..8].copy_from_slice(&b.ld_v4(at + 16));
            }
            4 => prm[..4].copy_from_slice(&b.ld_v4(at)),
            _ => prm[..2].copy_from_slice(&b.ld_v2(at)),
        }
        Fields {
            bv: b.ld_v4(lay.bitval + ob),
            r1: b.ld_v4(lay.run1 + ob),
            fr: b.ld_v4(lay.free + ob),
            prm,
        }
    }
}

/// One chunk of at most 4 bytes: its payload `v` (low `wj` bits valid,
/// higher ones garbage), participation `matched`, `PARAMS` word `q`, at
/// byte `sh / 8` of its output word whose `RUN1`, `FREE` and bit-value
/// words are `r1`, `fr`, `bv`; the step's class `CLASS` (`k` the chunk,
/// `k_total` the tensor's chunks, for the general class).
///
/// Q: why compute both outputs and select? A: `matched` differs from lane
/// to lane; a branch on it would split the warp at every chunk, and each
/// output is a few logic operations (the batch decoder's step made the
/// same choice, `crate::detail::step`'s `expand`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn chunk32<const C: u32, const CLASS: u8, M: Mem>(
    mm: &M,
    entries: u64,
    k: u32,
    k_total: u32,
    v: u32,
    wj: u32,
    matched: bool,
    q: u32,
    sh: u32,
    r1: u32,
    fr: u32,
    bv: u32,
) -> u32 {
    let v = if C == 4 { v } else { v & low_mask32(wj) };
    let own = if C == 4 {
        u32::MAX
    } else {
        (low_mask(C * 8) as u32) << sh
    };
    let raw = v << sh;
    let e = if CLASS == CLASS_NONE_FREE {
        bv & own
    } else if CLASS == CLASS_GENERAL {
        if !matched || k >= k_total {
            0
        } else {
            let e = entry::<C, M>(mm, entries, k);
            (table::decode_entry::<C>(&e, true, v as u64) as u32) << sh
        }
    } else {
        crate::detail::book::expand2_32(v, q & 0xff, (q >> 8) & 0xff, r1, fr, bv & own)
    };
    if matched { e } else { raw }
}

/// Width of a chunk's payload from its `PARAMS` word.
#[inline(always)]
fn width(q: u32, matched: bool) -> u32 {
    if matched { (q >> 16) & 0xff } else { q >> 24 }
}

/// One lane step of chunks of `C ≤ 4` bytes and class `CLASS`: 16
/// output bytes from the reader, `p` the step's participation bits (bit
/// `j` for chunk `k0 + j`). Returns them and the stream bits used.
#[inline(always)]
fn step32<const C: u32, const CLASS: u8, M: Machine>(
    mm: &M,
    rd: &mut Reader,
    f: &Fields,
    entries: u64,
    k0: u32,
    k_total: u32,
    p: u32,
) -> ([u32; 4], u32) {
    let per_word = 4 / C;
    let mut o = [0u32; 4];
    let mut used = 0;
    each!(wi => {
        if wi < 4 {
            // One window for the word's chunks: their payloads take at
            // most 32 bits, each from its offset in the window.
            let win = rd.window(mm, rd.pos);
            let mut off = 0;
            each!(i => {
                if i < per_word {
                    let j = wi * per_word + i;
                    let q = f.prm[j as usize];
                    let matched = (p >> j) & 1 == 1;
                    let wj = width(q, matched);
                    let v = if i == 0 { win } else { win >> (off & 31) };
                    o[wi as usize] |= chunk32::<C, CLASS, M>(
                        mm, entries, k0 + j, k_total, v, wj, matched, q, i * C * 8,
                        f.r1[wi as usize], f.fr[wi as usize], f.bv[wi as usize],
                    );
                    off += wj;
                }
            });
            rd.pos += off;
            used += off;
        }
    });
    (o, used)
}

/// One lane step of 8-byte chunks (two a step).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn step64<M: Machine>(
    mm: &M,
    rd: &mut Reader,
    f: &Fields,
    entries: u64,
    class: u8,
    k0: u32,
    k_total: u32,
    p: u32,
) -> ([u32; 4], u32) {
    let mut o = [0u32; 4];
    let mut used = 0;
    each!(j => {
        if j < 2 {
            let q = f.prm[j as usize];
            let matched = (p >> j) & 1 == 1;
            let wj = width(q, matched);
            // Up to 64 bits: two windows.
            let lo = rd.window(mm, rd.pos);
            let hi = rd.window(mm, rd.pos + 32);
            rd.pos += wj;
            used += wj;
            let v = (lo as u64 | (hi as u64) << 32) & low_mask(wj);
            let bv = f.bv[2 * j as usize] as u64 | (f.bv[2 * j as usize + 1] as u64) << 32;
            let x = if !matched {
                v
            } else if class == CLASS_NONE_FREE {
                bv
            } else if class == CLASS_GENERAL {
                if k0 + j < k_total {
                    let e = entry::<8, M>(mm, entries, k0 + j);
                    table::decode_entry::<8>(&e, true, v)
                } else {
                    0
                }
            } else {
                let w64 = |a: &[u32; 4]| a[2 * j as usize] as u64 | (a[2 * j as usize + 1] as u64) << 32;
                crate::detail::book::expand2_64(v, q & 0xff, (q >> 8) & 0xff, w64(&f.r1), w64(&f.fr), bv)
            };
            o[2 * j as usize] = x as u32;
            o[2 * j as usize + 1] = (x >> 32) as u32;
        }
    });
    (o, used)
}

/// Decode one tensor (stored bytes `[row, row + len)`, `encoded` or raw)
/// into output row `out`; returns the stream bits it used and the bits
/// after them (for the padding check).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn decode_tensor<const C: u32, const FIXED: u8, M: Machine, B: Book>(
    mm: &M,
    ring: u32,
    b: &B,
    p: &DecodeParams,
    lay: &Layout,
    k_total: u32,
    row: u64,
    len: u64,
    encoded: bool,
    out: u64,
) -> (u32, u32) {
    let cpl = chunks_per_lane(C);
    let l = p.row_bytes as u32;
    let start = if encoded { k_total } else { 0 };
    let mut rd = Reader::new(mm, ring, row, len, start);
    let mut pb = Pbits::new(mm, row, len, encoded);
    // SAFETY: the row is inside the launch's output (`run`'s contract).
    let mut sink = unsafe { RowStore::new(mm, out) };
    let classes = p.decode_flags & DECODE_FLAG_NO_CLASSES == 0;
    let steps = l.div_ceil(16);
    let mut pw = 0u32;
    let mut class = CLASS_GENERAL;
    let mut used = 0u32;
    let mut s = 0;
    while s < steps {
        let k0 = s * cpl;
        // Warp-uniform: every lane stands at the same chunk.
        if k0.is_multiple_of(32) {
            pw = pb.next(mm, k0 / 32);
        }
        if FIXED != ANY {
            class = FIXED;
        } else if s.is_multiple_of(32) {
            class = if classes {
                // SAFETY: inside the CLASS field (book step s / 32).
                unsafe { b.ld_u8(lay.class + s / 32) as u8 }
            } else {
                CLASS_GENERAL
            };
            // A lane reads its own chunks' fields anyway: a uniform step
            // is a two-run one here.
            if class == CLASS_UNIFORM {
                class = CLASS_TWO_RUNS;
            }
        }
        let part = (pw >> (k0 % 32)) & low_mask32(cpl);
        rd.advance(mm);
        let f = fields::<C, B>(b, lay, k0);
        // The class is the same for every lane: a uniform branch.
        let (o, u) = if C == 8 {
            step64(mm, &mut rd, &f, p.table, class, k0, k_total, part)
        } else if class == CLASS_TWO_RUNS {
            step32::<C, CLASS_TWO_RUNS, M>(mm, &mut rd, &f, p.table, k0, k_total, part)
        } else if class == CLASS_NONE_FREE {
            step32::<C, CLASS_NONE_FREE, M>(mm, &mut rd, &f, p.table, k0, k_total, part)
        } else {
            step32::<C, CLASS_GENERAL, M>(mm, &mut rd, &f, p.table, k0, k_total, part)
        };
        used += u;
        let ob = s * 16;
        sink.put(ob, o, if l - ob < 16 { l - ob } else { 16 });
        s += 1;
    }
    let after = rd.window(mm, rd.pos);
    // No copy may land in the ring after the lane's next tensor starts.
    mm.wait_all();
    (start + used, after)
}

/// Kernel body for one lane, tensors `lane0, lane0 + lanes, …` of the
/// launch's output rows (see [`DecodeParams`]; every address global; `book`
/// holds the dataset's decode book). Unclustered datasets in device
/// memory; the ideal-copy mode is not served here.
///
/// # Safety
/// As `crate::detail::decode::run`, with no workspace: `src` covers every
/// slot in whole 16-byte blocks, `offsets`, `flags`, `table`, `index`,
/// `out` and `status` have the lengths the parameters imply.
#[inline(always)]
pub unsafe fn run<M: Machine, B: Book>(
    mm: &M,
    book: &B,
    p: DecodeParams,
    ring: u32,
    lane0: u64,
    lanes: u64,
) {
    let shift = p.chunk.trailing_zeros() & 3;
    let k_total = ((p.row_bytes + (1u64 << shift) - 1) >> shift) as u32;
    let lay = Layout::new(k_total, p.chunk);
    let l = p.row_bytes;
    let packed = p.offsets != 0;
    let pbytes = (k_total as u64).div_ceil(8);
    let mut i = lane0;
    while i < p.count {
        let out = p.out + i * p.out_stride;
        let t = if p.index == 0 {
            p.first + i
        } else if p.index_u32 != 0 {
            // SAFETY: i < count entries of 4 bytes.
            unsafe { mm.ld_u32(p.index + 4 * i) as u64 }
        } else {
            // SAFETY: i < count entries of 8 bytes.
            unsafe { mm.ld_u64(p.index + 8 * i) }
        };
        if t >= p.rows {
            fail(mm, &p, i, out, STATUS_BAD_INDEX);
            i += lanes;
            continue;
        }
        // SAFETY: t < rows: flag byte t / 8 and offsets t, t + 1 exist.
        let encoded = unsafe { mm.ld_u8(p.flags + t / 8) } >> (t % 8) & 1 == 1;
        let (start, len) = if packed {
            // SAFETY: as above.
            let (a, b) = unsafe {
                (
                    mm.ld_u64(p.offsets + t * 8),
                    mm.ld_u64(p.offsets + t * 8 + 8),
                )
            };
            (a.wrapping_sub(p.offset_base), b.wrapping_sub(a))
        } else {
            (t * l, l)
        };
        // A length the stream cannot have is corrupt before any read; the
        // tensor is still decoded (from its first byte, whatever it holds)
        // so the warp's lanes stay together, and reported after.
        let sane = !packed
            || if encoded {
                len >= pbytes.max(1) && len < l
            } else {
                len == l
            };
        let (row, rlen) = if sane {
            (p.src + start, len)
        } else {
            (p.src, 1)
        };
        let (end, after) = match p.chunk {
            1 => decode_tensor::<1, ANY, M, B>(
                mm, ring, book, &p, &lay, k_total, row, rlen, encoded, out,
            ),
            2 => decode_tensor::<2, ANY, M, B>(
                mm, ring, book, &p, &lay, k_total, row, rlen, encoded, out,
            ),
            4 => decode_tensor::<4, ANY, M, B>(
                mm, ring, book, &p, &lay, k_total, row, rlen, encoded, out,
            ),
            _ => decode_tensor::<8, ANY, M, B>(
                mm, ring, book, &p, &lay, k_total, row, rlen, encoded, out,
            ),
        };
        let e = (end as u64).div_ceil(8);
        let pad = (8 - end % 8) % 8;
        let ok = sane
            && (!encoded
                || (if packed { e == len } else { e < l }) && after & low_mask32(pad) == 0);
        if !ok {
            fail(mm, &p, i, out, STATUS_CORRUPT);
        }
        i += lanes;
    }
}

/// One tensor decoded with its step class fixed at compile time, for
/// counting that path's instructions (`scripts/sass.sh --steps` reads the
/// probe kernels built from this: the loop body is one lane step, 16
/// output bytes a lane, 512 a warp). Only `CLASS` = [`ANY`] decodes every
/// input correctly.
///
/// # Safety
/// As [`run`], for output row 0 and the tensor at `p.src`.
#[inline(always)]
pub unsafe fn probe<const C: u32, const CLASS: u8, M: Machine, B: Book>(
    mm: &M,
    book: &B,
    p: DecodeParams,
) {
    let k_total = p.row_bytes.div_ceil(C as u64) as u32;
    let lay = Layout::new(k_total, C);
    let (end, after) = decode_tensor::<C, CLASS, M, B>(
        mm,
        0,
        book,
        &p,
        &lay,
        k_total,
        p.src,
        p.row_bytes,
        true,
        p.out,
    );
    if end ^ after == 0 {
        zero_and_report(mm, p.status, 0, p.out, p.row_bytes, STATUS_CORRUPT);
    }
}

/// Report `code` for output row `i` of the launch and zero the row.
///
/// Q: why does it take the parameters' fields, not the block? A: a
/// reference to the block passed to a function that is not inlined puts
/// the block in local memory (a 176-byte stack frame).
#[inline(always)]
fn fail<M: Mem>(mm: &M, p: &DecodeParams, i: u64, out: u64, code: u64) {
    zero_and_report(
        mm,
        p.status,
        i.wrapping_add(p.row_base),
        out,
        p.row_bytes,
        code,
    );
}

/// Report `code` for row `row` of the call (status words at `status`)
/// and zero its `l` output bytes at `out`.
#[inline(never)]
fn zero_and_report<M: Mem>(mm: &M, status: u64, row: u64, out: u64, l: u64, code: u64) {
    // SAFETY: status holds two u64 (host-allocated); the row is the
    // launch's, `l` bytes.
    unsafe {
        mm.or_u64(status, code);
        mm.min_u64(status + 8, row);
        let mut j = 0;
        while j < l {
            mm.st_u8(out + j, 0);
            j += 1;
        }
    }
}
