//! The float-coded rows' bulk decode, the body of `ibp_float_decode` and
//! `ibp_float_decode_staged` (`docs/FORMAT.md` §7): ranges and gathers of
//! whole rows into an output buffer, over the row-level pieces of
//! [`crate::detail::float_decode`] (the same sub-stream loop the fused API
//! runs). Run by the emulated warp in ibp's tests and compared there with
//! the CPU decoder.
//!
//! # Output through tiles
//!
//! A lane's elements are `k, k + S, …`, so a store an element puts eight
//! rows' 2-byte (bf16) pieces into one warp store: eight partly written
//! sectors for 64 bytes. With `FloatDecodeParams::tile_elems` set, each
//! group writes its elements into a tile in shared memory (`2S · 8`
//! elements, [`crate::params::FLOAT_TILE_PAIRS`] pairs a lane), and after
//! every eight pairs the warp synchronises and each group copies its tile
//! to the output row with 16-byte stores: whole sectors, a sixteenth of the
//! store instructions for bf16.
//!
//! Q: why must every lane run the loop then? A: the tile's flush is a warp
//! barrier. Every lane runs the same `n / 2S` pairs
//! ([`crate::detail::float_decode::sub_stream`] with `UNIFORM`): a lane
//! whose group holds a raw row, a row that failed, or no row, and the idle
//! lanes `S..G` of a group, decode nothing that counts and store nothing.

use crate::detail::float_decode::{
    FloatSink, GlobalWords, Shape, SharedWords, Words, bits_at, check_meet, decode_sub_stream,
    locate, stage_row, store_as, sub_stream,
};
use crate::params::{FLOAT_TILE_PAIRS, FloatDecodeParams};
use crate::simt::{Async, Book, Lanes, Mem, Shared, group_or};

/// The bulk decode's sink without tiles: element `i` stored into the
/// output row at `out`, `2^E` bytes an element.
struct StoreRow<'a, H, const E: u32> {
    h: &'a H,
    out: u64,
}

impl<H: Mem, const E: u32> FloatSink for StoreRow<'_, H, E> {
    #[inline(always)]
    fn put(&mut self, i: u32, v: u32) {
        // SAFETY: made by `decode` for output row `out` (aligned to the
        // element), which the decoder hands only its own elements (i < n).
        unsafe { store_as::<H, E>(self.h, self.out, i, v) }
    }
}

/// The bulk decode's sink with tiles: the first `split` elements of the
/// row go through the group's tile in shared memory, `t` elements a tile
/// (the pairs `8m .. 8m + 8` of every lane), copied out with 16-byte
/// stores after every [`FLOAT_TILE_PAIRS`] pairs; the rest (at most two a
/// lane) are stored directly.
struct TileRow<'a, H, const E: u32> {
    h: &'a H,
    /// The output row (16-aligned).
    out: u64,
    /// The group's tile (16-aligned shared address).
    tile: u32,
    /// Elements a tile, and the elements that go through tiles.
    t: u32,
    split: u32,
    /// The first element of the current tile.
    base: u32,
    /// Whether this lane's elements count (`k < S` of a coded row).
    live: bool,
    /// Whether the group copies its tiles out (its row is coded).
    write: bool,
    /// This lane in its group, the group's lanes and the sub-streams.
    kk: u32,
    g: u32,
    s: u32,
}

impl<H: Mem + Shared + Async, const E: u32> TileRow<'_, H, E> {
    /// Copy the current tile's first `count` elements out (the group's
    /// lanes, 16-byte pieces then words), between two warp barriers.
    #[inline(always)]
    fn flush(&mut self, count: u32) {
        self.h.sync_warp();
        if self.write {
            let bytes = count << E;
            let dst = self.out + ((self.base << E) as u64);
            let mut j = self.kk * 16;
            while j + 16 <= bytes {
                // SAFETY: the tile holds `t << E ≥ bytes` bytes from a
                // 16-aligned address; the output row is 16-aligned and holds
                // elements `base .. base + count` (below `split ≤ n`).
                unsafe { self.h.st_v4(dst + j as u64, self.h.lds_v4(self.tile + j)) };
                j += 16 * self.g;
            }
            // The last piece's words (bytes are whole words: `2S · m`
            // elements, S even).
            let mut w = (bytes & !15) + 4 * self.kk;
            while w < bytes {
                // SAFETY: as above, a word inside both.
                unsafe { self.h.st_u32(dst + w as u64, self.h.lds_u32(self.tile + w)) };
                w += 4 * self.g;
            }
        }
        self.h.sync_warp();
        self.base += count;
    }

    /// Copy out what the last tile holds (every lane calls it, after the
    /// loop).
    #[inline(always)]
    fn finish(&mut self) {
        if self.t != 0 && self.split > self.base {
            self.flush(self.split - self.base);
        }
    }
}

impl<H: Mem + Shared + Async, const E: u32> FloatSink for TileRow<'_, H, E> {
    /// An element after the pairs (at most two a lane): stored directly.
    #[inline(always)]
    fn put(&mut self, i: u32, v: u32) {
        if self.live {
            // SAFETY: i < n, the output row aligned to the element.
            unsafe { store_as::<H, E>(self.h, self.out, i, v) }
        }
    }

    /// An element of the pairs: into the tile.
    ///
    /// Q: why may a lane of a row that is not coded write its tile? A: its
    /// group's tile is never copied out, and writing keeps the store free
    /// of a branch; only the idle lanes `S..G` (S not a power of two) are
    /// kept out, whose elements would land past their tile.
    #[inline(always)]
    fn put_pair(&mut self, i: u32, v: u32) {
        let a = self.tile + ((i - self.base) << E);
        if self.kk < self.s {
            // SAFETY: `i - base < t` for a lane below S (the pair's
            // elements lie in the current tile), so `a` is inside the
            // group's tile, aligned to the element.
            unsafe {
                match E {
                    0 => self.h.sts_u8(a, v),
                    1 => self.h.sts_u16(a, v),
                    _ => self.h.sts_u32(a, v),
                }
            }
        }
    }

    #[inline(always)]
    fn pair_done(&mut self, j: u32) {
        if self.t != 0 && (j + 1).is_multiple_of(FLOAT_TILE_PAIRS) {
            self.flush(self.t);
        }
    }
}

/// Copy a raw row (`L` stored bytes at `src`) into the output row at `out`,
/// lane `k` of `g` taking every `g`-th word (or byte).
///
/// # Safety
/// As [`decode`]; `src .. src + L` inside the payload.
#[inline(always)]
unsafe fn copy_raw<H: Mem>(h: &H, l: u32, src: u64, out: u64, k: u32, g: u32) {
    if (out | l as u64) & 3 == 0 {
        // Q: why aligned word pairs and a shift? A: a raw row starts
        // anywhere in the payload (rows before it are of any length); the
        // output row is aligned, so each output word is read as the two
        // aligned words around it.
        let (al, sbit) = (src & !3, ((src & 3) * 8) as u32);
        let mut j = k * 4;
        while j < l {
            // SAFETY: both words hold bytes of the row or of the payload's
            // padding (readable, as FloatDecodeParams says); the output word
            // is inside the row.
            unsafe { h.st_u32(out + j as u64, bits_at(&GlobalWords(h), al, sbit + 8 * j)) };
            j += 4 * g;
        }
    } else {
        let mut j = k;
        while j < l {
            // SAFETY: inside the stored row and the output row.
            unsafe { h.st_u8(out + j as u64, h.ld_u8(src + j as u64)) };
            j += g;
        }
    }
}

/// Zero the elements `k, k + S, …` of the output row at `out` (every lane
/// of a group zeroes the elements it would have written, so no lane waits
/// for another's stores).
///
/// # Safety
/// `out` an output row.
#[inline(always)]
unsafe fn zero_row<H: Mem>(h: &H, sh: &Shape, out: u64, k: u32) {
    let mut i = k;
    while i < sh.n {
        // SAFETY: i < n.
        unsafe { sh.store(h, out, i, 0) };
        i += sh.s;
    }
}

/// The decode: output row `i` gets row `ids[i]` (or `first + i`), for every
/// `i` of this warp's groups (the warp takes rows `warp · R, …` and then
/// every `warps · R`-th, `R = 32 / G` rows at once). A bad id or a corrupt
/// row is reported in the status and its output row zeroed.
///
/// With `STAGE`, each group first copies its coded row into its part of
/// the warp's shared workspace at `ws` ([`stage_row`]; `p.stage_bytes` a
/// group, [`crate::params::FloatView::workspace_bytes`]) and decodes it
/// from there; raw rows are copied where they lie. With `p.tile_elems`,
/// elements go out through the groups' tiles at `tile` (this module's
/// documentation).
///
/// # Safety
/// The host filled `p` as [`FloatDecodeParams`] says (the group's payload,
/// index and table, `count` output rows `out_stride` bytes apart, two
/// status words, rows of at most [`crate::params::FLOAT_MAX_ROW_BYTES`]);
/// `table` reads the decode table. With `STAGE`: the payload 16-aligned
/// and readable up to its length rounded up to 16, and
/// `ws .. ws + (32 / G) · stage_bytes` this warp's shared memory,
/// 16-aligned, `stage_bytes` at least
/// [`crate::params::FloatView::workspace_bytes`] and a multiple of 16.
/// With `tile_elems`: `out` and `out_stride` multiples of 16, and
/// `tile .. tile + p.tile_warp_bytes()` this warp's shared memory,
/// 16-aligned.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn decode<H: Lanes + Mem + Shared + Async, B: Book, const STAGE: bool>(
    h: &H,
    table: &B,
    p: &FloatDecodeParams,
    warp: u64,
    warps: u64,
    ws: u32,
    tile: u32,
) {
    let v = p.view();
    let sh = Shape::of(&v);
    let g = sh.s.next_power_of_two();
    let gshift = g.trailing_zeros();
    let per_warp = (32 >> gshift) as u64;
    let lane = h.lane();
    let k = lane & (g - 1);
    let grp = lane >> gshift;
    let wsg = ws + grp * p.stage_bytes;
    // Tiles only for 16-aligned output rows (16-byte stores): the host
    // asks for them only then.
    let t = p.tile_elems;
    let tg = tile + grp * p.tile_stride();
    let mut i0 = warp * per_warp;
    // Every lane runs the same iterations (the shuffles below are
    // warp-wide); a group past the end idles through its last one.
    while i0 < p.count {
        let i = i0 + (lane >> gshift) as u64;
        let out = p.out + i * p.out_stride;
        let mut err = 0;
        let mut pos = 0;
        // A coded row: where its bytes are read (global or shared) and its
        // stored length.
        let mut coded = None;
        if i < p.count {
            let row = if p.ids == 0 {
                p.first + i
            } else {
                // SAFETY: i < count, and ids holds count u64.
                unsafe { h.ld_u64(p.ids + 8 * i) }
            };
            // SAFETY: forwarded contract.
            match unsafe { locate(h, &v, row) } {
                Err(e) => err = e,
                Ok((start, len)) if len == p.row_bytes => {
                    // SAFETY: the row's bytes are inside the payload.
                    unsafe { copy_raw(h, p.row_bytes, p.payload + start, out, k, g) };
                }
                Ok((start, len)) => {
                    let src = p.payload + start;
                    let at = if STAGE {
                        // SAFETY: the payload and the workspace as the
                        // contract says for STAGE.
                        unsafe { stage_row(h, src, len, wsg, k, g) }
                    } else {
                        src
                    };
                    coded = Some((at, len));
                }
            }
        }
        if STAGE {
            // The group's pieces are in shared memory (warp-wide: every
            // lane runs this iteration).
            h.sync_warp();
        }
        let live = coded.is_some() && k < sh.s;
        if t != 0 {
            // Every lane: a lane that decodes nothing reads its group's
            // stage, or the status words (16 readable bytes).
            let (src, len) = coded.unwrap_or((if STAGE { wsg as u64 } else { p.status }, 0));
            let mut sink = Tiles {
                out,
                tile: tg,
                t,
                split: 2 * sh.s * (sh.n / (2 * sh.s)),
                live,
                write: coded.is_some(),
                kk: k,
                g,
                s: sh.s,
            };
            // SAFETY: as below; a lane without a row reads 16 readable
            // bytes at `src`; the tile is this group's.
            let r = unsafe {
                if STAGE {
                    decode_tiled(&SharedWords(h), h, table, &sh, src, len, k, &mut sink)
                } else {
                    decode_tiled(&GlobalWords(h), h, table, &sh, src, len, k, &mut sink)
                }
            };
            // A lane without a row keeps what `locate` said.
            if live {
                (pos, err) = r;
            }
        } else if let Some((src, len)) = coded
            && k < sh.s
        {
            // SAFETY: the row's bytes are at `src` (global, inside the
            // payload, or shared, in the group's workspace, with the bytes
            // after them readable as `Bits` needs), and `out` is output row
            // i, aligned to the element (the sink's width is the element
            // size).
            (pos, err) = unsafe {
                if STAGE {
                    decode_into(&SharedWords(h), h, table, &sh, src, len, k, out)
                } else {
                    decode_into(&GlobalWords(h), h, table, &sh, src, len, k, out)
                }
            };
        }
        // The odd lane's end to its even partner.
        let partner = h.shfl_xor(pos, 1);
        if let Some((src, len)) = coded
            && k < sh.s
            && k & 1 == 0
            && err == 0
        {
            // SAFETY: as above.
            err = unsafe {
                if STAGE {
                    check_meet(&SharedWords(h), &sh, src, len, k, pos, partner)
                } else {
                    check_meet(&GlobalWords(h), &sh, src, len, k, pos, partner)
                }
            };
        }
        let err = group_or(h, err as u32, g) as u64;
        if err != 0 {
            if k < sh.s && i < p.count {
                // SAFETY: out is output row i < count.
                unsafe { zero_row(h, &sh, out, k) };
            }
            if k == 0 && i < p.count {
                // SAFETY: the status holds two u64.
                unsafe {
                    h.or_u64(p.status, err);
                    h.min_u64(p.status + 8, i);
                }
            }
        }
        if STAGE {
            // The next iteration's pieces overwrite the workspace.
            h.sync_warp();
        }
        i0 += warps * per_warp;
    }
}

/// A group's tile sink before its element size is known: [`TileRow`]'s
/// fields but the memory.
struct Tiles {
    out: u64,
    tile: u32,
    t: u32,
    split: u32,
    live: bool,
    write: bool,
    kk: u32,
    g: u32,
    s: u32,
}

/// Sub-stream `k` of the coded row at `src` (read through `w`) decoded
/// through the group's tiles, every lane of the warp taking part
/// ([`sub_stream`] with `UNIFORM`), one copy of the loop an element size.
///
/// # Safety
/// As [`decode_sub_stream`] for a lane with a row; a lane without one
/// reads 16 bytes at `src`; `sink`'s tile is this group's, its output row
/// 16-aligned.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn decode_tiled<W: Words, H: Mem + Shared + Async, B: Book>(
    w: &W,
    h: &H,
    table: &B,
    sh: &Shape,
    src: u64,
    len: u32,
    k: u32,
    s: &mut Tiles,
) -> (u32, u64) {
    // SAFETY: forwarded contract.
    unsafe {
        match sh.eshift {
            0 => run_tiled::<W, H, B, 0>(w, h, table, sh, src, len, k, s),
            1 => run_tiled::<W, H, B, 1>(w, h, table, sh, src, len, k, s),
            _ => run_tiled::<W, H, B, 2>(w, h, table, sh, src, len, k, s),
        }
    }
}

/// [`decode_tiled`] for `2^E`-byte elements.
///
/// # Safety
/// As [`decode_tiled`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn run_tiled<W: Words, H: Mem + Shared + Async, B: Book, const E: u32>(
    w: &W,
    h: &H,
    table: &B,
    sh: &Shape,
    src: u64,
    len: u32,
    k: u32,
    s: &Tiles,
) -> (u32, u64) {
    let mut sink = TileRow::<H, E> {
        h,
        out: s.out,
        tile: s.tile,
        t: s.t,
        split: s.split,
        base: 0,
        live: s.live,
        write: s.write,
        kk: s.kk,
        g: s.g,
        s: s.s,
    };
    // SAFETY: forwarded contract.
    let r = unsafe { sub_stream::<W, B, _, true>(w, table, sh, src, len, k, s.live, &mut sink) };
    sink.finish();
    r
}

/// Sub-stream `k` of the coded row at `src` (read through `w`) decoded
/// into output row `out`, one copy of the loop an element size.
///
/// # Safety
/// As [`decode_sub_stream`]; `out` an output row aligned to the element.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn decode_into<W: Words, H: Mem, B: Book>(
    w: &W,
    h: &H,
    table: &B,
    sh: &Shape,
    src: u64,
    len: u32,
    k: u32,
    out: u64,
) -> (u32, u64) {
    // SAFETY: forwarded contract.
    unsafe {
        match sh.eshift {
            0 => decode_sub_stream(w, table, sh, src, len, k, &mut StoreRow::<H, 0> { h, out }),
            1 => decode_sub_stream(w, table, sh, src, len, k, &mut StoreRow::<H, 1> { h, out }),
            _ => decode_sub_stream(w, table, sh, src, len, k, &mut StoreRow::<H, 2> { h, out }),
        }
    }
}
