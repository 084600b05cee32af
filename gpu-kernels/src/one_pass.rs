//! Packed compression in one pass over the input (`ibp_encode_packed_c*`,
//! [`OnePassParams`]): tiles of rows encoded into a block's scratch slots,
//! placed by a decoupled look-back, and copied to their packed offsets by
//! the same block while the slots are still in L2.
//!
//! Q: what does it replace, and why?
//! A: packed compression needs every tensor's offset before its bytes can
//! be placed. The two-kernel way (`ibp_encode_slots_c*` into a scratch
//! buffer as large as the input, the scan, then `ibp_compact`) writes every
//! stored form to DRAM, reads it back and writes it again: for MiniLM's
//! bf16 weights, whose stored forms are 77% of the input, the compaction
//! alone took 0.44 ms a GiB on the H200, and the measured way (a size pass,
//! then the encoder) reads the input twice. Here a tile's stored forms
//! travel from the encoder's slots to their offsets through L2: the slots
//! of all resident blocks together are tens of MB, rewritten every tile.
//!
//! Q: how does a tile learn its offset without waiting for the tiles
//! before it to finish?
//! A: the decoupled look-back of single-pass prefix scans. Tiles are taken
//! in order from an atomic counter, so every tile before a block's current
//! one belongs to a block that is running. As soon as its rows are
//! encoded, a tile publishes its stored bytes (its *aggregate*); warp 0
//! then reads the status words of the 32 tiles before it at once and sums
//! aggregates back to the nearest tile that has published its *inclusive*
//! offset (the sum of everything up to its end), and publishes its own.
//! It waits only while a tile in that window has published nothing, that
//! is, is still encoding.
//!
//! Q: two tiles meet inside a 16-byte group of the output; who writes it?
//! A: the one that comes second. Each side puts its bytes of the group
//! (zeros elsewhere) in the boundary's hand-off slot, fences, and adds 1 to
//! the boundary's arrival count; the side that reads 1 back loads the other
//! side's bytes and stores the whole group. Every group is stored once,
//! whole, so the output needs no clearing first. Every tile but the last
//! holds at least 16 stored bytes (the host chooses the tile size so), so
//! a group is never shared by three tiles.

use crate::compact::{copy_row, group_word, packed_byte, region, zero_padding};
use crate::encode::encode;
use crate::params::{CompactParams, ENCODE_SLOTS_SCRATCH, EncodeParams, OnePassParams};
use crate::simt::{
    Async, Block, Coherent, Lanes, Mem, Shared, inclusive_scan64, shfl_idx64, warp_sum64,
};

/// A tile's status word: its aggregate published.
const AGGREGATE: u64 = 1 << 62;
/// A tile's status word: its inclusive offset published.
const INCLUSIVE: u64 = 2 << 62;
/// A status word's value bits.
const VALUE: u64 = (1 << 62) - 1;

/// Where [`OnePassParams::state`] keeps what the tiles hand each other,
/// in bytes from its start, for `tiles` tiles: the tile counter (a u32) at
/// 0, a status word (u64) a tile at `status`, an arrival count (u32) a
/// boundary (`tiles + 1` of them) at `arrivals`, and a 32-byte hand-off
/// slot a boundary (16 bytes a side) at `hand`. The first `zeroed` bytes
/// must be zero at launch; the state is `bytes` long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateLayout {
    pub status: u64,
    pub arrivals: u64,
    pub hand: u64,
    pub zeroed: u64,
    pub bytes: u64,
}

/// The [`StateLayout`] for `tiles` tiles.
pub const fn state_layout(tiles: u64) -> StateLayout {
    let status = 16;
    let arrivals = status + 8 * tiles;
    let zeroed = (arrivals + 4 * (tiles + 1)).next_multiple_of(16);
    StateLayout {
        status,
        arrivals,
        hand: zeroed,
        zeroed,
        bytes: zeroed + 32 * (tiles + 1),
    }
}

/// The fewest rows a tile of `l`-byte tensors with chunks of `c` bytes may
/// hold: an even number (a row for each of the block's two warps), and
/// enough that the tile stores 16 bytes or more, since a stored form holds
/// at least its participation bits, `⌈⌈L / C⌉ / 8⌉` bytes.
pub const fn least_tile_rows(l: u64, c: u64) -> u64 {
    let least = l.div_ceil(c).div_ceil(8);
    16u64.div_ceil(least).next_multiple_of(2)
}

/// Publish tile `t`'s stored bytes `agg` (lane 0): as its aggregate, or,
/// for tile 0, as its inclusive offset.
///
/// # Safety
/// `status` holds a status word a tile up to `t`.
#[inline(always)]
unsafe fn publish<W: Lanes, X: Coherent>(w: &W, x: &X, status: u64, t: u64, agg: u64) {
    if w.lane() == 0 {
        let flag = if t == 0 { INCLUSIVE } else { AGGREGATE };
        // SAFETY: the contract.
        unsafe { x.st_relaxed_u64(status + 8 * t, flag | agg) };
    }
}

/// The offset of tile `t`, whose stored bytes are `agg` (published by
/// [`publish`]): the sum of the stored bytes of tiles `0 … t − 1`, from
/// their status words (warp 0 of the tile's block, every lane); then its
/// inclusive offset published.
///
/// # Safety
/// `status` holds a status word a tile up to `t`, zero for tiles that have
/// published nothing; every tile before `t` belongs to a block that
/// publishes it without waiting on anything.
#[inline(always)]
unsafe fn look_back<W: Lanes, X: Coherent>(w: &W, x: &X, status: u64, t: u64, agg: u64) -> u64 {
    let lane = w.lane();
    if t == 0 {
        return 0;
    }
    // SAFETY: (this block) status words of tiles 0 … t.
    unsafe {
        let mut before = 0u64;
        // Lane `l` reads tile `top − 1 − l`.
        let mut top = t;
        loop {
            let v = if top > lane as u64 {
                x.ld_relaxed_u64(status + 8 * (top - 1 - lane as u64))
            } else {
                // Before tile 0: nothing, and nothing further to read.
                INCLUSIVE
            };
            let inclusive = w.ballot(v & INCLUSIVE == INCLUSIVE);
            let published = w.ballot(v != 0);
            // The lanes whose tiles count: up to the nearest inclusive one.
            let counted = if inclusive == 0 || inclusive.trailing_zeros() == 31 {
                u32::MAX
            } else {
                (2u32 << inclusive.trailing_zeros()) - 1
            };
            if published & counted != counted {
                // A tile in the window is still encoding: read again.
                continue;
            }
            let mine = if (counted >> lane) & 1 != 0 { v & VALUE } else { 0 };
            before += warp_sum64(w, mine);
            if inclusive != 0 {
                break;
            }
            top -= 32;
        }
        if lane == 0 {
            x.st_relaxed_u64(status + 8 * t, INCLUSIVE | (before + agg));
        }
        before
    }
}

/// Hand one side's bytes of a 16-byte output group two tiles share to the
/// other side (`side` 0: the earlier tile's, 1: the later one's; word `l`
/// in lane `l`, zeros outside the side's bytes), or, when the other side's
/// are already there, store the whole group at `group`.
///
/// # Safety
/// `hand` is the boundary's 16-aligned 32-byte slot and `arrivals` its
/// count (zero at launch); each side calls this once; `group` is the
/// 16-aligned output group.
#[inline(always)]
unsafe fn meet<W: Lanes, M: Mem, X: Coherent>(
    w: &W,
    m: &M,
    x: &X,
    hand: u64,
    arrivals: u64,
    side: u64,
    word: u32,
    group: u64,
) {
    let v = [
        w.shfl_idx(word, 0),
        w.shfl_idx(word, 1),
        w.shfl_idx(word, 2),
        w.shfl_idx(word, 3),
    ];
    if w.lane() != 0 {
        return;
    }
    // SAFETY: (this block) the contract.
    unsafe {
        m.st_v4(hand + 16 * side, v);
        x.fence();
        if x.atom_add_u32(arrivals, 1) == 1 {
            // The other side's bytes, stored before its own fence and its
            // arrival, which this lane has just observed.
            x.fence();
            let other = hand + 16 * (1 - side);
            let (lo, hi) = (x.ld_relaxed_u64(other), x.ld_relaxed_u64(other + 8));
            m.st_v4(
                group,
                [
                    v[0] | lo as u32,
                    v[1] | (lo >> 32) as u32,
                    v[2] | hi as u32,
                    v[3] | (hi >> 32) as u32,
                ],
            );
        }
    }
}

/// The stored bytes of tile `t`'s `n` rows (their lengths in `p.sizes`),
/// in every lane.
///
/// # Safety
/// As [`OnePassParams`] states; the rows' sizes are written and visible to
/// this warp.
#[inline(always)]
unsafe fn tile_bytes<W: Lanes, M: Mem>(w: &W, m: &M, p: &OnePassParams, t: u64, n: u64) -> u64 {
    let sizes = p.sizes + 8 * t * p.tile_rows;
    let mut own = 0;
    let mut r = w.lane() as u64;
    while r < n {
        // SAFETY: the tile's sizes (the contract).
        own += unsafe { m.ld_u64(sizes + 8 * r) };
        r += 32;
    }
    warp_sum64(w, own)
}

/// Warp 0 of the block holding tile `t` (rows `first … first + n − 1`,
/// their stored lengths in `p.sizes`, published by [`publish`]): the
/// tile's offset by [`look_back`] over the status words at `status`, and
/// the offsets of its rows and of its end at `offs` (`n + 1` u64).
///
/// # Safety
/// As [`OnePassParams`] states; the sizes of the tile's rows are written
/// and visible to this warp.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn place_tile<W: Lanes, M: Mem, X: Coherent>(
    w: &W,
    m: &M,
    x: &X,
    p: &OnePassParams,
    status: u64,
    t: u64,
    n: u64,
    offs: u64,
) {
    let lane = w.lane() as u64;
    let sizes = p.sizes + 8 * t * p.tile_rows;
    // SAFETY: (this block) the tile's sizes; offs holds n + 1 u64; the
    // status words as `look_back` needs (the contract).
    unsafe {
        let agg = tile_bytes(w, m, p, t, n);
        let base = look_back(w, x, status, t, agg);
        let mut run = base;
        let mut k = 0;
        while k < n {
            let r = k + lane;
            let size = if r < n { m.ld_u64(sizes + 8 * r) } else { 0 };
            let inc = inclusive_scan64(w, size);
            if r < n {
                m.st_u64(offs + 8 * r, run + inc - size);
            }
            run += shfl_idx64(w, inc, 31);
            k += 32;
        }
        if lane == 0 {
            m.st_u64(offs + 8 * n, base + agg);
        }
    }
}

/// Bytes of the block's shared record ([`encode_packed`]'s `meta`): the
/// tile of this round, the tile count and the tile of the round before,
/// then the addresses every tile uses, read back from shared memory where
/// they are needed.
///
/// Q: why keep addresses in shared memory rather than in registers?
/// A: the encoder's loop sits at the slots kernels' cap of 80 registers.
/// Kept as values, the tile's addresses (and what the compiler derives
/// from them once, outside the tile loop) stayed live through the encoder
/// and took the kernels to 122–128 registers uncapped, spilling 100–130
/// bytes at 80 (ptxas, sm_80 and sm_90). Loaded back after the encoder,
/// they live only where they are used.
pub const TILE_RECORD_BYTES: u32 = 80;

/// The record's "no tile" (the round before the first).
const NO_TILE: u32 = u32::MAX;

/// Two u64 from a 16-byte shared load.
#[inline(always)]
const fn pair(v: [u32; 4]) -> (u64, u64) {
    (
        v[0] as u64 | (v[1] as u64) << 32,
        v[2] as u64 | (v[3] as u64) << 32,
    )
}

/// Two u64 as a 16-byte shared store's words.
#[inline(always)]
const fn words(a: u64, b: u64) -> [u32; 4] {
    [a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32]
}

/// Bytes from one of a block's two halves of slots to the next: a tile's
/// slots rounded up to 16 (the slots encoder wants its first slot
/// 16-aligned).
pub const fn half_bytes(tile_rows: u64, row_bytes: u64) -> u64 {
    (tile_rows * row_bytes).next_multiple_of(16)
}

/// Block `block` of the grid, warp `warp` of its `warps`, in rounds until
/// no tile is left: take a tile and encode it into one half of the block's
/// slots (rows `warp, warp + warps, …` of the tile, [`encode`]), publish
/// its stored bytes; then place the tile of the round before
/// ([`place_tile`]) and copy its stored forms from the other half to their
/// offsets, the groups it shares with its neighbours through [`meet`].
/// `ring` is the warp's encoder ring and `meta` [`TILE_RECORD_BYTES`]
/// (16-aligned) of the block's shared memory.
///
/// Q: why place a tile a round late?
/// A: a tile's offset needs every earlier tile's stored bytes, and the
/// tiles taken just before it are still being encoded by other blocks
/// when it is done. Placed at once (the first build), every block waited
/// each round for the slowest of the blocks before it: Cora's compression
/// took 1.58 ms a GiB against 1.08 for the slots encoder alone (H200).
/// A round later, the tiles before it have had a whole tile's encoding
/// to publish.
///
/// # Safety
/// As [`OnePassParams`] states; every thread of the block calls it with
/// the same arguments but `warp` and `ring`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn encode_packed<
    W: Lanes,
    M: Mem,
    S: Shared + Async,
    B: Block,
    X: Coherent,
    const C: u32,
>(
    w: &W,
    m: &M,
    s: &S,
    b: &B,
    x: &X,
    p: &OnePassParams,
    ring: u32,
    meta: u32,
    warp: u32,
    warps: u32,
    block: u64,
) {
    let lane = w.lane();
    let l = p.row_bytes;
    let tr = p.tile_rows;
    let half = half_bytes(tr, l);
    let rows_of = |t: u64| if p.rows - t * tr < tr { p.rows - t * tr } else { tr };
    // SAFETY: (this block) the contract: the block's slots and offsets,
    // the state's words, the output's groups at the tiles' offsets; the
    // record lies in the block's shared memory.
    unsafe {
        if warp == 0 && lane == 0 {
            let tiles = p.rows.div_ceil(tr);
            let st = state_layout(tiles);
            s.sts_v4(meta, [0, tiles as u32, NO_TILE, 0]);
            s.sts_v4(meta + 16, words(p.state, p.state + st.status));
            s.sts_v4(meta + 32, words(p.state + st.arrivals, p.state + st.hand));
            s.sts_v4(meta + 48, words(p.slots + block * 2 * half, p.offs + block * 8 * (tr + 1)));
            s.sts_v4(meta + 64, words(p.out, 0));
        }
        let mut round = 0u64;
        loop {
            if warp == 0 && lane == 0 {
                let (counter, _) = pair(s.lds_v4(meta + 16));
                s.sts_u32(meta, x.atom_add_u32(counter, 1));
            }
            b.sync_threads();
            let rec = s.lds_v4(meta);
            let (t, tiles) = (rec[0] as u64, rec[1] as u64);
            // Decided here: the record's tile changes once the round's
            // last barrier is passed, possibly before a slower warp reads
            // it again.
            let done = t >= tiles;
            if !done {
                let first = t * tr;
                let enc = EncodeParams {
                    src: p.src + first * p.stride,
                    stride: p.stride,
                    rows: rows_of(t),
                    row_bytes: l,
                    book: p.book,
                    sizes: p.sizes + 8 * first,
                    offsets: 0,
                    offset_base: 0,
                    out: pair(s.lds_v4(meta + 48)).0 + (round % 2) * half,
                    flags: p.flags | ENCODE_SLOTS_SCRATCH,
                };
                encode::<W, M, S, C, true>(w, m, s, &enc, ring, warp as u64, warps as u64);
                b.sync_threads();
                if warp == 0 {
                    let t = s.lds_u32(meta) as u64;
                    let (_, status) = pair(s.lds_v4(meta + 16));
                    publish(w, x, status, t, tile_bytes(w, m, p, t, rows_of(t)));
                }
            }
            // The tile of the round before, from the record, read again.
            let rec = s.lds_v4(meta);
            if rec[2] != NO_TILE {
                let (t, tiles) = (rec[2] as u64, rec[1] as u64);
                let n = rows_of(t);
                let (_, status) = pair(s.lds_v4(meta + 16));
                let (arrivals, hand) = pair(s.lds_v4(meta + 32));
                let (slots, offs) = pair(s.lds_v4(meta + 48));
                let (out, _) = pair(s.lds_v4(meta + 64));
                if warp == 0 {
                    place_tile(w, m, x, p, status, t, n, offs);
                }
                b.sync_threads();
                let cp = CompactParams {
                    src: slots + ((round + 1) % 2) * half,
                    stride: l,
                    rows: n,
                    offsets: offs,
                    out,
                    out_len: 0,
                };
                let base = m.ld_u64(offs);
                let end = m.ld_u64(offs + 8 * n);
                let last = t + 1 == tiles;
                let mut r = warp as u64;
                while r < n {
                    if let (Some(g), word) = copy_row(w, m, &cp, r, region(m, &cp, r)) {
                        if !last && g == end / 16 {
                            // The group holding the tile's end (it ends
                            // inside it): shared with the next tile.
                            let k = t + 1;
                            meet(w, m, x, hand + 32 * k, arrivals + 4 * k, 0, word, out + 16 * g);
                        } else if lane < 4 {
                            m.st_u32(out + 16 * g + 4 * lane as u64, word);
                        }
                    }
                    r += warps as u64;
                }
                if warp + 1 == warps {
                    if t > 0 && !base.is_multiple_of(16) {
                        // The group holding the tile's first byte, shared
                        // with the tile before: this tile's bytes of it
                        // (and, for the last tile, the padding's zeros
                        // after them).
                        let g = base / 16;
                        let at = 16 * g + lane as u64;
                        let byte = if lane < 16 && at >= base {
                            packed_byte(m, &cp, 0, at, region(m, &cp, 0))
                        } else {
                            0
                        };
                        let word = group_word(w, byte);
                        meet(w, m, x, hand + 32 * t, arrivals + 4 * t, 1, word, out + 16 * g);
                    }
                    if last {
                        zero_padding(w, m, out, end, end.next_multiple_of(128));
                    }
                }
            }
            // The half just copied from, the offsets and the record are
            // the next round's.
            b.sync_threads();
            if done {
                break;
            }
            if warp == 0 && lane == 0 {
                s.sts_u32(meta + 8, s.lds_u32(meta));
            }
            round += 1;
        }
    }
}
