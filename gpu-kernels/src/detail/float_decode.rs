//! The float-coded rows' decoder (`docs/FORMAT.md` §7), over the
//! [`crate::simt`] traits: the body of `ibp_float_decode`, run by the
//! emulated warp in ibp's tests and compared there with the CPU decoder
//! (`ibp::float_code`).
//!
//! # Lanes and rows
//!
//! A row of `S` sub-streams is decoded by a group of `G` consecutive lanes,
//! `G` the power of two at or above `S` (lanes `S..G` of a group idle): with
//! the default `S = 4`, a warp decodes 8 rows at once. Lane `k < S` of a
//! group decodes sub-stream `k`, whose elements are `k, k + S, k + 2S, …`:
//! an even lane reads its region forward from its first bit, an odd lane
//! backward from its last, each with one lookup of the `2^M`-entry decode
//! table a code. A raw row (stored length `L`) is copied by the group's
//! lanes.
//!
//! Q: why a group of lanes a row, not a warp a row? A: a sub-stream is a
//! chain of dependent lookups (position, bits, table, length), so a row
//! offers exactly `S` lanes of work. Rows of 600–800 bytes decoded by a
//! whole warp would leave 28 of its 32 lanes idle.
//!
//! # Hostile input
//!
//! Every read of a row's bytes goes through [`Bits`], which reads zeros
//! outside the row's stored range (as the CPU decoder's `peek` does), so a
//! corrupt length or a code running past its region never reads outside
//! the payload. The decoder then applies the CPU decoder's checks in the
//! same terms (region lengths inside the row, every code in the table, the
//! sub-streams of each region meeting, zero padding), so a row is reported
//! corrupt here exactly when the CPU decoder refuses it; its output row is
//! zeroed and its output number reported in the status.

use crate::params::{FLOAT_MAX_CODE_LEN, FLOAT_NO_SYMBOL, FloatDecodeParams};
use crate::params::{STATUS_BAD_INDEX, STATUS_CORRUPT};
use crate::simt::{Book, Lanes, Mem, group_or};

/// Bits of a byte range of global memory, LSB first, with bits outside the
/// range read as 0; the last aligned 8 bytes read are kept, so a lane
/// stepping through its sub-stream loads a new pair of words about once
/// every 32 bits.
///
/// The range's memory must be readable in whole 4-byte words from the
/// 4-aligned address at or below `lo` to 8 bytes past the 4-aligned
/// address at or below its last byte (the payload's padding).
pub struct Bits {
    lo: u64,
    len: u64,
    /// Aligned address of the words held (`u64::MAX`: none).
    at: u64,
    /// The 8 bytes at `at`, those outside the range zeroed.
    word: u64,
}

impl Bits {
    /// The `len` bytes at `lo`.
    #[inline(always)]
    pub fn new(lo: u64, len: u64) -> Self {
        Bits {
            lo,
            len,
            at: u64::MAX,
            word: 0,
        }
    }

    /// The 32 bits from bit `bit` on, bits outside the range 0.
    ///
    /// Q: are all 32 exact? A: the word pair starts at most 3 bytes and 7
    /// bits before `bit`, so at least 64 − 31 = 33 bits from `bit` on are
    /// held.
    ///
    /// # Safety
    /// The range's memory is readable as [`Bits`] says.
    #[inline(always)]
    pub unsafe fn peek<H: Mem>(&mut self, h: &H, bit: u64) -> u32 {
        let off = bit >> 3;
        if off >= self.len {
            return 0;
        }
        let byte = self.lo + off;
        let at = byte & !3;
        if at != self.at {
            self.at = at;
            // SAFETY: `at` is at or above the aligned address below `lo` and
            // at most 3 bytes below a byte of the range, so both words are
            // inside the readable span the caller guarantees.
            let w = unsafe { h.ld_u32(at) as u64 | (h.ld_u32(at + 4) as u64) << 32 };
            let skip = self.lo.saturating_sub(at);
            let keep = self.lo + self.len - at;
            let mut m = if keep >= 8 {
                u64::MAX
            } else {
                (1u64 << (8 * keep)) - 1
            };
            m &= u64::MAX << (8 * skip);
            self.word = w & m;
        }
        (self.word >> ((byte - at) * 8 + (bit & 7))) as u32
    }

    /// The `len` (1 to 15) bits below bit `end`, reversed (bit 0 of the
    /// result is bit `end − 1`); bits below 0 read as 0.
    ///
    /// # Safety
    /// As [`Bits::peek`].
    #[inline(always)]
    pub unsafe fn peek_back<H: Mem>(&mut self, h: &H, end: u64, len: u32) -> u32 {
        // SAFETY: forwarded contract.
        let w = unsafe {
            if end >= len as u64 {
                self.peek(h, end - len as u64)
            } else {
                self.peek(h, 0) << (len as u64 - end) as u32
            }
        };
        w.reverse_bits() >> (32 - len)
    }
}

/// Entry `j` of the decode table: `symbol | length << 12`.
///
/// # Safety
/// `j < 2^max_len`; the table holds `2^max_len` u16 in whole 4-byte words.
#[inline(always)]
unsafe fn entry<B: Book>(table: &B, j: u32) -> u32 {
    // SAFETY: the caller's contract; the word holding entry j.
    let w = unsafe { table.ld_u32((2 * j) & !3) };
    (w >> ((j & 1) * 16)) & 0xffff
}

/// Where row `t` starts in the payload.
///
/// # Safety
/// `t < p.rows`; the index holds what [`FloatDecodeParams`] says.
#[inline(always)]
unsafe fn row_start<H: Mem>(h: &H, p: &FloatDecodeParams, t: u64) -> u64 {
    // SAFETY: t < rows, so block t >> log2 has a base, and row t a relative
    // start (read in the aligned word that holds it).
    unsafe {
        let base = h.ld_u64(p.bases + 8 * (t >> p.block_log2));
        let rel = match p.rel_width {
            2 => {
                let a = p.rel + 2 * t;
                (h.ld_u32(a & !3) >> ((a & 2) * 8)) & 0xffff
            }
            4 => h.ld_u32(p.rel + 4 * t),
            _ => 0,
        };
        base.saturating_add(rel as u64)
    }
}

/// Row `t`'s stored bytes: payload offset and length, or the status bit
/// that says why not (an id past the end, an index entry outside the
/// payload or longer than the raw row).
///
/// # Safety
/// The index holds what [`FloatDecodeParams`] says.
#[inline(always)]
unsafe fn locate<H: Mem>(h: &H, p: &FloatDecodeParams, t: u64) -> Result<(u64, u64), u64> {
    if t >= p.rows {
        return Err(STATUS_BAD_INDEX);
    }
    // SAFETY: t < rows (and t + 1 < rows for the next start).
    let (start, end) = unsafe {
        let start = row_start(h, p, t);
        let end = if t + 1 == p.rows {
            let blocks = (p.rows + (1u64 << p.block_log2) - 1) >> p.block_log2;
            h.ld_u64(p.bases + 8 * blocks)
        } else {
            row_start(h, p, t + 1)
        };
        (start, end)
    };
    if end < start || end - start > p.row_bytes as u64 || end > p.payload_len {
        return Err(STATUS_CORRUPT);
    }
    Ok((start, end - start))
}

/// Elements of a row (`row_bytes / elem_bytes`, as a shift: no division,
/// so no panic path for a zero divisor).
#[inline(always)]
fn elements(p: &FloatDecodeParams) -> u64 {
    (p.row_bytes >> (p.elem_bytes.trailing_zeros() & 3)) as u64
}

/// What a lane knows of its row after decoding its sub-stream: where the
/// sub-stream ended (an even lane's forward position, an odd lane's
/// backward one) and the errors it saw.
struct Decoded {
    pos: u64,
    err: u64,
}

/// The element `i`'s value from its residual and symbol.
#[inline(always)]
fn compose(p: &FloatDecodeParams, residual: u32, sym: u32) -> u32 {
    let lo_mask = if p.low == 0 {
        0
    } else {
        u32::MAX >> (32 - p.low)
    };
    let hi_shift = p.low + p.width;
    let hi = if hi_shift >= 32 {
        0
    } else {
        (residual >> p.low) << hi_shift
    };
    (residual & lo_mask) | (sym << p.low) | hi
}

/// Store element `i` (of `p.elem_bytes`) of the output row at `out`.
///
/// # Safety
/// `i` below the row's elements; `out` aligned to the element size.
#[inline(always)]
unsafe fn store<H: Mem>(h: &H, p: &FloatDecodeParams, out: u64, i: u64, v: u32) {
    // SAFETY: inside the output row, aligned (the caller's contract).
    unsafe {
        match p.elem_bytes {
            1 => h.st_u8(out + i, v),
            2 => h.st_u16(out + 2 * i, v),
            _ => h.st_u32(out + 4 * i, v),
        }
    }
}

/// Decode sub-stream `k` (< S) of a coded row stored at `src` (`len <
/// row_bytes` bytes) into the output row at `out`: its elements' symbols
/// and residuals. Returns where the sub-stream ended and the errors seen
/// (a region start outside the row, a code not in the table); the meeting
/// of the sub-streams is checked by [`check_meet`].
///
/// # Safety
/// As [`decode`]; `src .. src + len` inside the payload, `out` an output
/// row.
#[inline(always)]
unsafe fn decode_sub_stream<H: Mem, B: Book>(
    h: &H,
    table: &B,
    p: &FloatDecodeParams,
    src: u64,
    len: u64,
    out: u64,
    k: u32,
) -> Decoded {
    let s = p.sub_streams as u64;
    let n = elements(p);
    let r = p.residual_bits;
    let res_bytes = (n * r as u64).div_ceil(8);
    if len < res_bytes {
        return Decoded {
            pos: 0,
            err: STATUS_CORRUPT,
        };
    }
    let mut res = Bits::new(src, res_bytes);
    let mut area = Bits::new(src + res_bytes, len - res_bytes);
    let area_bits = (len - res_bytes) * 8;
    // This lane's region and its bounds: region q's length is the q-th
    // stored length (len_bits bits each, before region 0).
    let nreg = (s as u32).div_ceil(2);
    let region = k / 2;
    let lmask = if p.len_bits >= 32 {
        u32::MAX
    } else {
        (1u32 << p.len_bits) - 1
    };
    let mut start = (nreg - 1) as u64 * p.len_bits as u64;
    let mut q = 0;
    while q < region {
        // SAFETY: Bits reads inside the row.
        start += unsafe { area.peek(h, q as u64 * p.len_bits as u64) & lmask } as u64;
        q += 1;
    }
    let end = if region + 1 < nreg {
        // SAFETY: as above.
        start + unsafe { area.peek(h, region as u64 * p.len_bits as u64) & lmask } as u64
    } else {
        area_bits
    };
    // Region starts are ascending, so every lane checking its own bounds
    // is the CPU's check of the last region's start.
    if start > area_bits || end > area_bits {
        return Decoded {
            pos: 0,
            err: STATUS_CORRUPT,
        };
    }
    let m = p.max_len.clamp(1, FLOAT_MAX_CODE_LEN);
    let dmask = (1u32 << m) - 1;
    let rmask = if r == 0 { 0 } else { u32::MAX >> (32 - r) };
    let forward = k & 1 == 0;
    let mut pos = if forward { start } else { end };
    let mut err = 0;
    let mut i = k as u64;
    while i < n {
        // SAFETY: Bits reads inside the row; the index is below 2^m.
        let e = unsafe {
            let bits = if forward {
                area.peek(h, pos) & dmask
            } else {
                area.peek_back(h, pos, m)
            };
            entry(table, bits)
        };
        if e == FLOAT_NO_SYMBOL {
            err = STATUS_CORRUPT;
        }
        let l = (e >> 12) as u64;
        pos = if forward {
            pos + l
        } else {
            pos.wrapping_sub(l)
        };
        let residual = if r == 0 {
            0
        } else {
            // SAFETY: as above.
            unsafe { res.peek(h, i * r as u64) & rmask }
        };
        // SAFETY: i < n.
        unsafe { store(h, p, out, i, compose(p, residual, e & 0xfff)) };
        i += s;
    }
    // The residuals' padding, to a whole byte, is zero.
    if k == 0 && r > 0 {
        // SAFETY: as above.
        if unsafe { res.peek(h, n * r as u64) } != 0 {
            err = STATUS_CORRUPT;
        }
    }
    Decoded { pos, err }
}

/// An even lane's check that its region's two sub-streams meet: exactly in
/// every region but the last, and in the last with fewer than 8 zero bits
/// between them (with one sub-stream, between its end and the row's end).
///
/// # Safety
/// As [`decode_sub_stream`].
#[inline(always)]
unsafe fn check_meet<H: Mem>(
    h: &H,
    p: &FloatDecodeParams,
    src: u64,
    len: u64,
    k: u32,
    f: u64,
    partner: u64,
) -> u64 {
    let n = elements(p);
    let res_bytes = (n * p.residual_bits as u64).div_ceil(8);
    let area_bits = (len - res_bytes) * 8;
    let nreg = p.sub_streams.div_ceil(2);
    let b = if p.sub_streams == 1 {
        area_bits
    } else {
        partner
    };
    let ok = if k / 2 + 1 < nreg {
        f == b
    } else {
        let mut area = Bits::new(src + res_bytes, len - res_bytes);
        // SAFETY: Bits reads inside the row.
        f <= b
            && b - f < 8
            && b <= area_bits
            && unsafe { area.peek(h, f) } & ((1u32 << (b - f)) - 1) == 0
    };
    if ok { 0 } else { STATUS_CORRUPT }
}

/// Copy a raw row (`L` stored bytes at `src`) into the output row at `out`,
/// lane `k` of `g` taking every `g`-th word (or byte).
///
/// # Safety
/// As [`decode`]; `src .. src + L` inside the payload.
#[inline(always)]
unsafe fn copy_raw<H: Mem>(h: &H, p: &FloatDecodeParams, src: u64, out: u64, k: u32, g: u32) {
    let l = p.row_bytes as u64;
    if (out | l) & 3 == 0 {
        // Q: why aligned word pairs and a shift? A: a raw row starts
        // anywhere in the payload (rows before it are of any length); the
        // output row is aligned, so each output word is read as the two
        // aligned words around it.
        let sh = (src & 3) * 8;
        let mut j = k as u64 * 4;
        while j < l {
            let a = (src + j) & !3;
            // SAFETY: both words hold bytes of the row or of the payload's
            // padding (readable, as FloatDecodeParams says); the output word
            // is inside the row.
            unsafe {
                let w = h.ld_u32(a) as u64 | (h.ld_u32(a + 4) as u64) << 32;
                h.st_u32(out + j, (w >> sh) as u32);
            }
            j += 4 * g as u64;
        }
    } else {
        let mut j = k as u64;
        while j < l {
            // SAFETY: inside the stored row and the output row.
            unsafe { h.st_u8(out + j, h.ld_u8(src + j)) };
            j += g as u64;
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
unsafe fn zero_row<H: Mem>(h: &H, p: &FloatDecodeParams, out: u64, k: u32) {
    let n = elements(p);
    let mut i = k as u64;
    while i < n {
        // SAFETY: i < n.
        unsafe { store(h, p, out, i, 0) };
        i += p.sub_streams as u64;
    }
}

/// The decode: output row `i` gets row `ids[i]` (or `first + i`), for every
/// `i` of this warp's groups (the warp takes rows `warp · R, …` and then
/// every `warps · R`-th, `R = 32 / G` rows at once). A bad id or a corrupt
/// row is reported in the status and its output row zeroed.
///
/// # Safety
/// The host filled `p` as [`FloatDecodeParams`] says (the group's payload,
/// index and table, `count` output rows `out_stride` bytes apart, two
/// status words); `table` reads the decode table.
#[inline(always)]
pub unsafe fn decode<H: Lanes + Mem, B: Book>(
    h: &H,
    table: &B,
    p: &FloatDecodeParams,
    warp: u64,
    warps: u64,
) {
    let s = p.sub_streams.clamp(1, 32);
    let g = s.next_power_of_two();
    let per_warp = (32 >> g.trailing_zeros()) as u64;
    let lane = h.lane();
    let k = lane & (g - 1);
    let mut i0 = warp * per_warp;
    // Every lane runs the same iterations (the shuffles below are
    // warp-wide); a group past the end idles through its last one.
    while i0 < p.count {
        let i = i0 + (lane >> g.trailing_zeros()) as u64;
        let out = p.out + i * p.out_stride;
        let mut err = 0;
        let mut pos = 0;
        let mut coded = None;
        if i < p.count {
            let t = if p.ids == 0 {
                p.first + i
            } else {
                // SAFETY: i < count, and ids holds count u64.
                unsafe { h.ld_u64(p.ids + 8 * i) }
            };
            // SAFETY: forwarded contract.
            match unsafe { locate(h, p, t) } {
                Err(e) => err = e,
                Ok((start, len)) if len == p.row_bytes as u64 => {
                    // SAFETY: the row's bytes are inside the payload.
                    unsafe { copy_raw(h, p, p.payload + start, out, k, g) };
                }
                Ok((start, len)) => {
                    if k < s {
                        // SAFETY: the row's bytes are inside the payload.
                        let d = unsafe {
                            decode_sub_stream(h, table, p, p.payload + start, len, out, k)
                        };
                        (err, pos) = (d.err, d.pos);
                    }
                    coded = Some((p.payload + start, len));
                }
            }
        }
        // The odd lane's end to its even partner.
        let partner =
            h.shfl_xor(pos as u32, 1) as u64 | (h.shfl_xor((pos >> 32) as u32, 1) as u64) << 32;
        if let Some((src, len)) = coded
            && k < s
            && k & 1 == 0
            && err == 0
        {
            // SAFETY: as above.
            err = unsafe { check_meet(h, p, src, len, k, pos, partner) };
        }
        let err = group_or(h, err as u32, g) as u64;
        if err != 0 {
            if k < s {
                // SAFETY: out is output row i < count.
                unsafe { zero_row(h, p, out, k) };
            }
            if k == 0 {
                // SAFETY: the status holds two u64.
                unsafe {
                    h.or_u64(p.status, err);
                    h.min_u64(p.status + 8, i);
                }
            }
        }
        i0 += warps * per_warp;
    }
}
