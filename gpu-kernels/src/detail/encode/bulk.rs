//! The bulk encoder: every row of a warp written through its ring of
//! shared memory ([`encode`]), and the clearing of the groups two writes
//! share ([`clear_shared_groups`]).

use super::lane::{LaneShape, group_word, lane_participation, lane_payload};
use super::rows::{row_word, store_bytes};
use crate::detail::pack::RingWriter;
use crate::params::{ClearParams, ENCODE_SLOTS_SCRATCH, ENCODE_TWO_RUNS, EncodeParams};
use crate::simt::{Async, Lanes, Mem, Shared};

/// Thread `t`'s share of `ibp_encode_clear` ([`ClearParams`]): for `t <
/// rows`, zero the 16-byte groups of tensor `t`'s region that another
/// write shares; for `t == rows`, the output's padding (which also holds
/// the last region's last group).
///
/// Q: which groups does the encoder OR into, and why are these enough?
/// A: a region's writer ([`RingWriter`]) stores whole the 16-byte groups
/// that lie inside the part of the region it owns, and ORs word by word
/// into the rest: the group of the word where the participation bits end
/// and the payload begins (bit `K` of the stream, `K` the tensor's chunks;
/// [`RingWriter::put`] stores the participation words before it whole),
/// and the groups at the region's two ends. The group of a region's last
/// byte is the next region's first group, or the padding's, unless the
/// next region starts on a group: then it lies inside this region and is
/// stored whole, unless it is this region's first group or holds bit `K`,
/// both zeroed. So the first groups, the `K` groups and the padding cover
/// every OR. (A raw region has no participation bits: only its ends.)
/// Zeroing them instead of the whole output saves a pass over the
/// output's bytes (the stored size of the table: most of it for dense
/// tensors).
///
/// # Safety
/// As [`ClearParams`] states; `t ≤ rows`.
#[inline(always)]
pub unsafe fn clear_shared_groups<M: Mem>(m: &M, p: &ClearParams, t: u64) {
    // Q: why zero the group's whole 32-byte sector?
    // A: a 16-byte store is half a sector of L2 and DRAM; written alone
    // it is a partial write the memory completes by reading the sector
    // first. Measured on the H200: 0.177 ms for bf16's 1.34 M rows with
    // 16-byte stores. The other half of the sector is zeroed before any
    // write of the encoder's lands there, so it costs nothing but a store.
    let zero = |a: u64| {
        let sector = a & !31;
        // SAFETY: every group named below lies inside the output, and so
        // does its sector (the caller's contract: `out` 32-aligned,
        // `out_len` a multiple of 32).
        unsafe {
            m.st_v4(sector, [0; 4]);
            m.st_v4(sector + 16, [0; 4]);
        }
    };
    // SAFETY: (loads) sizes holds rows u64 and offsets rows + 1.
    unsafe {
        if t < p.rows {
            let a = p.out + m.ld_u64(p.offsets + 8 * t) - p.offset_base;
            zero(a);
            if m.ld_u64(p.sizes + 8 * t) < p.row_bytes {
                // Stream bit K, counted from the group of the region's
                // first byte (the writer's base).
                // (chunk is a power of two: a shift, not a 64-bit
                // division's call.)
                let chunks = (p.row_bytes + p.chunk - 1) >> p.chunk.trailing_zeros();
                let k = (a % 16) * 8 + chunks;
                zero((a & !15) + 16 * (k / 128));
            }
        } else {
            let mut g = (p.out + p.data_len) & !31;
            while g < p.out + p.out_len {
                zero(g);
                g += 32;
            }
        }
    }
}

/// Row `i`'s region `(dst, len)` and whether it is stored encoded (its
/// stored length below `L`).
///
/// # Safety
/// As [`EncodeParams`] states; `i < rows`.
#[inline(always)]
unsafe fn row_region<M: Mem, const SLOTS: bool>(
    m: &M,
    p: &EncodeParams,
    i: u64,
) -> (u64, u64, bool) {
    if SLOTS {
        // Not measured: the slot, encoded until the stream outgrows it.
        return (p.out + i * p.row_bytes, p.row_bytes, true);
    }
    // SAFETY: (this block) sizes holds `rows` u64, offsets `rows + 1`
    // (packed).
    unsafe {
        let stored = m.ld_u64(p.sizes + 8 * i);
        if p.offsets != 0 {
            let o = m.ld_u64(p.offsets + 8 * i) - p.offset_base;
            let e = m.ld_u64(p.offsets + 8 * i + 8) - p.offset_base;
            (p.out + o, e - o, stored < p.row_bytes)
        } else {
            (p.out + i * p.row_bytes, p.row_bytes, stored < p.row_bytes)
        }
    }
}

/// Unmeasured slots (`encode::<_, _, _, C, true>`): before the warp writes
/// the `len`-byte slot at `dst`, zero the slot's words in the two 16-byte
/// groups the writer ORs into: the one holding stream bit `k` (the
/// tensor's `K` chunks: where its participation bits meet its payload) and
/// the slot's last group when the slot ends inside it. Words of a
/// neighbouring slot in those groups are not touched.
///
/// Q: why only those two?
/// A: the writer stores every other word it writes: participation words
/// with `st`, whole groups inside the slot with `st.v4`
/// ([`RingWriter`]), so stale bytes there are overwritten; a group the
/// slot shares with a neighbour (its first, when `dst` is not 16-aligned)
/// is ORed into only from the word of bit `k` on, which is the first of
/// the two. Words past the stream are zeroed by [`finish_slot`].
///
/// # Safety
/// The slot is this warp's, 4-aligned, `len` a multiple of 4, and holds
/// bit `k`.
#[inline(always)]
unsafe fn clear_slot_groups<W: Lanes, M: Mem, S: Shared + Async>(
    w: &W,
    m: &M,
    s: &S,
    dst: u64,
    len: u64,
    k: u32,
) {
    let lane = w.lane();
    let a0 = dst & !15;
    let lo = (dst % 16) as u32 * 8;
    let hi = lo + 8 * len as u32;
    // Lanes 0–3: the words of bit k's group; lanes 4–7: the last group's
    // (when the slot ends inside a group).
    let word = if lane < 4 {
        Some(4 * ((lo + k) / 128) + lane)
    } else if lane < 8 && !hi.is_multiple_of(128) {
        Some(4 * (hi / 128) + lane - 4)
    } else {
        None
    };
    if let Some(kw) = word
        && 32 * kw >= lo
        && 32 * kw < hi
    {
        // SAFETY: a word of the slot (the contract).
        unsafe { m.st_u32(a0 + 4 * kw as u64, 0) };
    }
    // The stores before any lane's OR into the groups.
    s.sync_warp();
}

/// Unmeasured slots, after tensor `i`'s stream (`bits` long, from the
/// slot's first bit) went through the writer into its slot `dst`: when
/// it fits (`⌈bits / 8⌉ < L`) zero the slot past the groups written
/// (unless the slots are scratch, [`ENCODE_SLOTS_SCRATCH`]), else
/// store the tensor raw over it; record the stored length in `sizes[i]`.
///
/// Q: how can a stream longer than the slot be written first?
/// A: the writer writes no word past its region (`RingWriter`: whole
/// groups only inside it, single words only inside it), so the stream is
/// clipped at the slot's end; the raw copy then overwrites all of it.
/// A tensor rarely turns out raw, and measuring every tensor first is a
/// pass over the whole table (the size kernel: 0.4–0.6 ms a GiB).
///
/// Q: which words past the stream are zeroed here?
/// A: the whole 16-byte groups after the one the stream ends in. The rest
/// of that group was written by the writer (zeros past the stream, stored
/// whole or ORed into a group [`clear_slot_groups`] zeroed), and a slot's
/// last group, when the slot ends inside it, was zeroed before.
///
/// # Safety
/// As [`EncodeParams`] states, with `sizes` written here; the slot is
/// this warp's and 4-aligned, `L` a multiple of 4; the writer is
/// finished (its last step met the warp).
#[inline(always)]
unsafe fn finish_slot<W: Lanes, M: Mem, S: Shared + Async>(
    w: &W,
    m: &M,
    s: &S,
    p: &EncodeParams,
    i: u64,
    dst: u64,
    bits: u32,
) {
    let l = p.row_bytes;
    let lane = w.lane() as u64;
    let e = bits.div_ceil(8) as u64;
    let a0 = dst & !15;
    let lo = (dst % 16) * 8;
    let hi = lo + 8 * l;
    // SAFETY: (this block) inside the slot, and inside the tensor for the
    // loads; 16-byte stores at 16-aligned addresses, the raw words' at
    // 4-aligned ones (store_bytes picks the widths).
    unsafe {
        let stored = if e < l {
            // Scratch slots (`ibp_compact` reads the stored form only):
            // the tail stays as it is.
            if p.flags & ENCODE_SLOTS_SCRATCH == 0 {
                let mut g = (lo + bits as u64).div_ceil(128) + lane;
                while 128 * (g + 1) <= hi {
                    m.st_v4(a0 + 16 * g, [0; 4]);
                    g += 32;
                }
            }
            e
        } else {
            let start = p.src + i * p.stride;
            let mut q = lane;
            while 8 * q < l {
                let n = if l - 8 * q < 8 { l - 8 * q } else { 8 };
                store_bytes(m, dst + 8 * q, row_word(m, start, l, q), n);
                q += 32;
            }
            l
        };
        if lane == 0 {
            m.st_u64(p.sizes + 8 * i, stored);
        }
    }
    // The slot's stores before the next tensor's.
    s.sync_warp();
}

/// Lane words (8 bytes each) a step of the bulk encoder with chunks of
/// `c` bytes: `32 · step_words(c)` words of a tensor, one
/// [`RingWriter::step`].
///
/// Q: why three for chunks of 1 and 2 bytes, two for 4 and 8?
/// A: measured (H200, docs/archive/PERF-NOTES-2026-11-28.md, "Three lane words a step"). A
/// step's bookkeeping (the scans, the ring's copy-out and its two meetings
/// of the warp, the loop) is the same for any number of words, and the
/// 768-byte rows of bf16 tables and KV caches (384 values) are one step of
/// three where steps of two took two, the second half empty: the bf16
/// encoder ran 10% faster. With 4- and 8-byte chunks (MiniLM f32; Cora
/// and the synthetic tables) three words a step ran 0–20% slower: more
/// registers (fewer warps an SM) for a longer chain of waits a step.
const fn step_words(c: u32) -> u32 {
    if c <= 2 { 3 } else { 2 }
}

/// The most lane words a step ([`step_words`]): the size of the step's
/// arrays. The ring holds three ([`crate::detail::pack::RING_WORDS`]).
const MAX_STEP_WORDS: usize = 3;

/// Run `$body` for `$j` = 0, 1, … up to `$n` ≤ [`MAX_STEP_WORDS`] (each of
/// a step's lane words; `$n` a constant) with `$j` a constant in each copy:
/// the step's words live in small arrays, and a loop LLVM declines to
/// unroll (the payload's body is large) would index them at run time, in
/// local memory.
macro_rules! each_step_word {
    ($n:expr, $j:ident => $body:block) => {{
        const _: () = assert!(MAX_STEP_WORDS == 3, "each_step_word! unrolls three copies");
        {
            let $j: usize = 0;
            $body
        }
        {
            let $j: usize = 1;
            if ($j as u32) < $n {
                $body
            }
        }
        {
            let $j: usize = 2;
            if ($j as u32) < $n {
                $body
            }
        }
    }};
}

/// The warp's rows `wid, wid + nwarps, …` written through its ring,
/// [`step_words`]`(C)` = `n` 8-byte lane words a step (words
/// `32(nk + j) + lane`, `j < n`), so one [`RingWriter::step`] serves 256n
/// bytes. The
/// participation bits are stored directly; the word they share with the
/// payload is OR-ed by both sides.
///
/// Q: why one loop over every (row, step) rather than a loop per row?
/// A: so that each step's words are loaded one step ahead, across the end
/// of a row too: a warp that waits for its loads at every step runs at
/// the memory's latency, not its bandwidth (the first version of this
/// writer, loading as it went, ran MiniLM's 768-byte rows at 0.26 TB/s).
/// The next row's region is loaded a whole row ahead.
///
/// # Safety
/// As [`EncodeParams`] states; `ring` is the warp's ring, zeroed.
#[inline(always)]
unsafe fn encode_rows<
    W: Lanes,
    M: Mem,
    S: Shared + Async,
    const C: u32,
    const RUNS: bool,
    const SLOTS: bool,
>(
    w: &W,
    m: &M,
    s: &S,
    p: &EncodeParams,
    ring: u32,
    wid: u64,
    nwarps: u64,
) {
    let lane = w.lane();
    let l = p.row_bytes;
    let shape = LaneShape::new::<C>(l);
    let words = shape.words;
    let sw = step_words(C);
    // Q: why are a step's words joined (no branch around a word past the
    // tensor's end) only in the slots kernels of 4- and 8-byte chunks?
    // A: joined, the words' chains of loads and arithmetic interleave
    // (Nsight Compute: "wait" stalls fall, 8.1 → 6.5 cycles between a
    // warp's issues), but the compiler then wants 8 to 16 more registers.
    // A warp's registers come from one of four 16384-register partitions
    // of the SM, so 88 or 92 hold five warps a partition where 80 hold
    // six. Measured on the H200 (docs/archive/PERF-NOTES-2026-11-28.md, "A step's lane words
    // without a branch each"): at their natural registers the measured
    // path's encoders ran 8–11% slower and the 2-byte slots encoder 5%
    // slower; the 4- and 8-byte slots encoders capped at 80 (build.rs; no
    // spills) keep six warps a partition and ran 2–6% faster than with a
    // branch a word (Cora, MiniLM f32). The 2-byte one spills at 80.
    let joined = SLOTS && C >= 4;
    let steps = words.div_ceil(32 * sw);
    let g = 4 * C;
    // Participation words of 32 lane words.
    let per_words = 8 / C;
    // A row's writer, the word of its first bit (from the writer's base)
    // and that bit's place in it.
    let open = |(dst, len, encoded): (u64, u64, bool)| {
        let first = if encoded { shape.chunks } else { 0 };
        let wr = RingWriter::new(ring, dst, len as u32, first);
        let s0 = wr.start_bit();
        (wr, s0 / 32, s0 % 32)
    };
    if wid >= p.rows {
        return;
    }
    // SAFETY: (this block) the contract of `encode`: every row index is
    // below `rows`, row_word reads inside its tensor, the writer stays in
    // its region.
    unsafe {
        let mut i = wid;
        let mut k = 0u32;
        let mut region = row_region::<M, SLOTS>(m, p, i);
        let mut next_region = if i + nwarps < p.rows {
            row_region::<M, SLOTS>(m, p, i + nwarps)
        } else {
            region
        };
        if SLOTS {
            clear_slot_groups(w, m, s, region.0, region.1, shape.chunks);
        }
        let (mut wr, mut base, mut sh) = open(region);
        let mut x = [0u64; MAX_STEP_WORDS];
        {
            let start = p.src + i * p.stride;
            each_step_word!(sw, j => {
                x[j] = row_word(m, start, l, (32 * j as u32 + lane) as u64);
            });
        }
        let mut carry = 0u32;
        loop {
            let (ni, nk) = if k + 1 < steps {
                (i, k + 1)
            } else {
                (i + nwarps, 0)
            };
            let mut xn = [0u64; MAX_STEP_WORDS];
            if ni < p.rows {
                let start = p.src + ni * p.stride;
                each_step_word!(sw, j => {
                    let q = 32 * (sw * nk + j as u32) + lane;
                    xn[j] = row_word(m, start, l, q as u64);
                });
            }
            let encoded = region.2;
            let q0 = 32 * sw * k + lane;
            let mut part = [0u32; MAX_STEP_WORDS];
            if encoded {
                each_step_word!(sw, j => {
                    let q = q0 + 32 * j as u32;
                    if joined || q < words {
                        part[j] = lane_participation::<M, C>(m, p.book, &shape, x[j], q).0;
                    }
                });
                // The participation words of each lane word, shifted by the
                // region's misalignment, each group's completed with the
                // top of the one before it.
                each_step_word!(sw, j => {
                    let third = j as u32;
                    let word = group_word::<W, C>(w, part[j]);
                    let prev = w.shfl_up(word, g);
                    let prev = if lane < g { carry } else { prev };
                    let out = if sh == 0 {
                        word
                    } else {
                        (word << sh) | (prev >> (32 - sh))
                    };
                    let pw = (sw * k + third) * per_words + lane / g;
                    if lane.is_multiple_of(g) {
                        wr.put(m, base + pw, out);
                    }
                    carry = w.shfl_idx(word, 31);
                });
            }
            let mut seg = [(0u64, 0u32); MAX_STEP_WORDS];
            each_step_word!(sw, j => {
                let q = q0 + 32 * j as u32;
                if joined || q < words {
                    seg[j] = lane_payload::<M, C, RUNS>(m, p.book, &shape, x[j], q, part[j]);
                }
            });
            if sw == 3 {
                wr.step(w, s, m, seg);
            } else {
                wr.step(w, s, m, [seg[0], seg[1]]);
            }
            if nk == 0 {
                // The row's last step: the top bits of its last
                // participation word go to the word after it.
                if encoded && sh != 0 && lane == 0 {
                    wr.put(m, base + sw * steps * per_words, carry >> (32 - sh));
                }
                wr.finish(w, s, m);
                if SLOTS {
                    finish_slot(w, m, s, p, i, region.0, wr.written());
                }
                if ni >= p.rows {
                    break;
                }
                region = next_region;
                if ni + nwarps < p.rows {
                    next_region = row_region::<M, SLOTS>(m, p, ni + nwarps);
                }
                if SLOTS {
                    clear_slot_groups(w, m, s, region.0, region.1, shape.chunks);
                }
                (wr, base, sh) = open(region);
                carry = 0;
            }
            i = ni;
            k = nk;
            x = xn;
        }
    }
}

/// Compression with chunks of `C` bytes (see [`EncodeParams`]), each warp
/// writing through its ring of shared memory at `ring` ([`crate::detail::pack`]).
/// `SLOTS`: the fixed-stride layout with nothing measured first (the
/// `ibp_encode_slots_c*` kernels; see [`EncodeParams`]).
///
/// Q: why are the unmeasured slots kernels of their own?
/// A: a kernel's registers are those of its most demanding path; in one
/// kernel with the measured paths, the slots' row ends took `ibp_encode_c2`
/// from 77 registers to the cap of 96 and gave it an 80-byte stack frame
/// (ptxas sm_90), fewer warps an SM for every packed compression.
///
/// Q: why not [`encode_row`](super::encode_row), which the KV store's append uses?
/// A: it writes through [`WarpWriter`](super::WarpWriter), one 256-byte step per scan and a
/// segmented OR-scan per step; for whole tables the ring writer's
/// step of two or three words (512 or 768 bytes) does the same work in
/// fewer instructions. The KV append writes rows of a few hundred bytes as spans
/// split over warps, which the register writer's span form serves.
///
/// # Safety
/// As [`EncodeParams`] states; `ring` is the 16-aligned shared address of
/// [`crate::detail::pack::RING_BYTES`] bytes that belong to this warp.
#[inline(always)]
pub unsafe fn encode<W: Lanes, M: Mem, S: Shared + Async, const C: u32, const SLOTS: bool>(
    w: &W,
    m: &M,
    s: &S,
    p: &EncodeParams,
    ring: u32,
    wid: u64,
    nwarps: u64,
) {
    // SAFETY: (this block) the ring is the warp's; the rest forwarded.
    unsafe {
        crate::detail::pack::clear(w, s, ring);
        // Chunks of 1 and 2 bytes take one payload path (`word_payload`).
        if C > 2 && p.flags & ENCODE_TWO_RUNS != 0 {
            encode_rows::<W, M, S, C, true, SLOTS>(w, m, s, p, ring, wid, nwarps);
        } else {
            encode_rows::<W, M, S, C, false, SLOTS>(w, m, s, p, ring, wid, nwarps);
        }
    }
}
