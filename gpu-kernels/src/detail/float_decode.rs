//! The float-coded rows' decoder (`docs/FORMAT.md` §7), over the
//! [`crate::simt`] traits: the body of `ibp_float_decode`, run by the
//! emulated warp in ibp's tests and compared there with the CPU decoder
//! (`ibp::float_code`). Its sub-stream decoder ([`decode_sub_stream`]) is
//! also the fused device API's
//! ([`crate::device::float::decode_float_row`]): one loop, which reads a
//! row's bytes through [`Words`] (global memory here, the warp's workspace
//! in shared memory there) and hands each element to a [`FloatSink`] (a
//! store into the output row here, the user's registers there).
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
//! Q: why one store an element, not a group's elements assembled into one
//! wide store? A: the loop issues about 70 SASS instructions a code, so
//! instructions, not stores, are the likely limit; assembling a group's four elements costs two or
//! three shuffles a code for the same number of store instructions (fewer
//! lanes, wider), and saves only L2 write requests. To be measured on the
//! GPU before it is paid for.
//!
//! Q: why a group of lanes a row, not a warp a row? A: a sub-stream is a
//! chain of dependent lookups (position, bits, table, length), so a row
//! offers exactly `S` lanes of work. Rows of 600–800 bytes decoded by a
//! whole warp would leave 28 of its 32 lanes idle.
//!
//! # Hostile input
//!
//! Every read of a row's bytes is bounded by the row's stored length: a
//! position at or past its end reads 0 without a load, and a read below
//! it never happens, so a corrupt length or a code running past its
//! region never reads outside the payload (and its padding). The decoder
//! then applies the CPU decoder's checks in the same terms (region lengths
//! inside the row, every code in the table, the sub-streams of each region
//! meeting, zero padding), so a row is reported corrupt here exactly when
//! the CPU decoder refuses it; its output row is zeroed and its output
//! number reported in the status.
//!
//! Q: the CPU decoder reads zeros past a row's end; a window here that
//! starts inside the row and runs past it holds the next row's bytes. Can
//! that change a result? A: no. A table lookup takes `M` bits of which
//! only the code's own matter (every entry that starts with a code holds
//! it), so a code that ends inside the row decodes the same; one that runs
//! past the end leaves its sub-stream's position past the row's end, where
//! both decoders fail the meeting check whatever the code decoded to. The
//! two checks that read up to a boundary (the residuals' padding, the gap
//! in the last region) mask the bits they take.

use crate::params::FloatView;
use crate::params::{FLOAT_DIRECT_INDEX, FLOAT_MAX_CODE_LEN, FLOAT_NO_SYMBOL};
use crate::params::{STATUS_BAD_INDEX, STATUS_CORRUPT};
use crate::simt::{Book, Mem, Shared};

/// Where a row's stored bytes are read from: aligned 4-byte words by
/// address.
pub trait Words {
    /// The 4-aligned word at `a`.
    ///
    /// # Safety
    /// `a` readable and 4-aligned.
    unsafe fn word(&self, a: u64) -> u32;
    /// The byte at `a` (by default from the word that holds it).
    ///
    /// # Safety
    /// The 4-aligned word holding `a` readable.
    #[inline(always)]
    unsafe fn byte(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract.
        (unsafe { self.word(a & !3) } >> ((a & 3) * 8)) & 0xff
    }
}

/// Row bytes in global memory (device or mapped pinned host memory).
pub struct GlobalWords<'a, H>(pub &'a H);

impl<H: Mem> Words for GlobalWords<'_, H> {
    #[inline(always)]
    unsafe fn word(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract.
        unsafe { self.0.ld_u32(a) }
    }
    #[inline(always)]
    unsafe fn byte(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract.
        unsafe { self.0.ld_u8(a) }
    }
}

/// Row bytes in shared memory (a warp's workspace), by shared address.
pub struct SharedWords<'a, H>(pub &'a H);

impl<H: Shared> Words for SharedWords<'_, H> {
    #[inline(always)]
    unsafe fn word(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (a shared address, below 2^32).
        unsafe { self.0.lds_u32(a as u32) }
    }
    #[inline(always)]
    unsafe fn byte(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (a shared address, below 2^32).
        unsafe { self.0.lds_u8(a as u32) }
    }
}

/// The consumer of a float-coded row's elements, one lane's share (the
/// fused API's, `crate::device::float::FloatSink`, and the bulk decode's
/// stores).
pub trait FloatSink {
    /// Element `i` of the row, its bits in the low `8·elem_bytes` bits of
    /// `v` (a bf16 as `u16` bits: `f32::from_bits(v << 16)`). Called by
    /// lanes `k < S` only, with `i = k, k + S, …` in that order, so a sink
    /// must not shuffle.
    fn put(&mut self, i: u32, v: u32);

    /// Element `i` of one of the first `n / 2S` pairs (`i < 2S·(n / 2S)`);
    /// [`FloatSink::put`] by default.
    #[inline(always)]
    fn put_pair(&mut self, i: u32, v: u32) {
        self.put(i, v);
    }

    /// Called after the `j`-th pair of elements (`2S·j + k` and `+ S`) of
    /// the first `n / 2S` pairs; nothing by default. The bulk decode's
    /// tiles flush here ([`crate::detail::float_bulk`]), warp-wide.
    #[inline(always)]
    fn pair_done(&mut self, j: u32) {
        let _ = j;
    }
}

/// The 32 bits of memory from bit `q` of the 4-aligned address `al` on,
/// LSB first: two aligned word loads and a shift.
///
/// # Safety
/// The two words at `al + 4·(q / 32)` readable.
#[inline(always)]
pub(crate) unsafe fn bits_at<W: Words>(h: &W, al: u64, q: u32) -> u32 {
    let a = al + ((q >> 5) << 2) as u64;
    // SAFETY: the caller's contract.
    let w = unsafe { h.word(a) as u64 | (h.word(a + 4) as u64) << 32 };
    (w >> (q & 31)) as u32
}

/// A forward or backward reader of a row's code area: positions in bits
/// from the area's first bit; a position at or past the area's end reads
/// 0. The last aligned word pair read is kept, so a lane stepping through
/// its sub-stream loads about once every 32 bits.
///
/// The payload must be readable in whole 4-byte words up to 8 bytes past
/// the aligned word that holds the area's last byte (its padding).
pub struct Bits {
    /// The 4-aligned address at or below the area's first byte.
    al: u64,
    /// Bits from `al` to the area's first bit (0, 8, 16 or 24).
    skip: u32,
    /// Bits of the area.
    len: u32,
    /// The word index (from `al`) of the pair held; `u32::MAX`: none.
    held: u32,
    word: u64,
}

impl Bits {
    /// The `len_bytes` bytes at `lo`.
    #[inline(always)]
    pub fn new(lo: u64, len_bytes: u32) -> Self {
        Bits {
            al: lo & !3,
            skip: ((lo & 3) * 8) as u32,
            len: len_bytes * 8,
            held: u32::MAX,
            word: 0,
        }
    }

    /// The 32 bits from bit `bit` on; 0 when `bit` is at or past the end.
    ///
    /// # Safety
    /// The payload readable as [`Bits`] says.
    #[inline(always)]
    pub unsafe fn peek<W: Words>(&mut self, h: &W, bit: u32) -> u32 {
        // Q: why read at bit 0 for a position past the end, and select 0
        // after? A: a lane's forward and backward reads reach the end at
        // different steps; a branch around the read would split the warp
        // there, a select does not.
        let inside = bit < self.len;
        let q = self.skip + if inside { bit } else { 0 };
        let wi = q >> 5;
        if wi != self.held {
            self.held = wi;
            let a = self.al + (wi << 2) as u64;
            // SAFETY: `q` is the area's first bit or a bit inside it, so
            // the word holding it and the next are inside the readable span.
            self.word = unsafe { h.word(a) as u64 | (h.word(a + 4) as u64) << 32 };
        }
        if inside {
            (self.word >> (q & 31)) as u32
        } else {
            0
        }
    }
}

/// Entry `j` of the decode table: `symbol | length << 12`.
///
/// # Safety
/// `j < 2^max_len`; the table holds `2^max_len` u16 in whole 4-byte words.
#[inline(always)]
unsafe fn entry<B: Book>(table: &B, j: u32) -> u32 {
    // SAFETY: the caller's contract; entry j and the word holding it.
    unsafe { table.ld_u16(2 * j) }
}

/// Where row `t` starts in the payload.
///
/// # Safety
/// `t < p.rows`; the index holds what [`FloatView`] says.
#[inline(always)]
unsafe fn row_start<H: Mem>(h: &H, p: &FloatView, t: u64) -> u64 {
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
/// The index holds what [`FloatView`] says.
#[inline(always)]
pub unsafe fn locate<H: Mem>(h: &H, p: &FloatView, t: u64) -> Result<(u64, u32), u64> {
    if t >= p.rows {
        return Err(STATUS_BAD_INDEX);
    }
    if p.rel_width == FLOAT_DIRECT_INDEX {
        // SAFETY: t < rows; a direct index holds a start and a length a row.
        let (start, len) = unsafe { (h.ld_u64(p.bases + 8 * t), h.ld_u32(p.rel + 4 * t)) };
        if len > p.row_bytes || start > p.payload_len || p.payload_len - start < len as u64 {
            return Err(STATUS_CORRUPT);
        }
        return Ok((start, len));
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
    Ok((start, (end - start) as u32))
}

/// What every row of a group shares, derived once from its view.
#[derive(Clone, Copy)]
pub struct Shape {
    /// Elements of a row.
    pub(crate) n: u32,
    /// log2 of an element's bytes.
    pub(crate) eshift: u32,
    /// Sub-streams.
    pub(crate) s: u32,
    /// Residual bits of an element, and their mask.
    pub(crate) r: u32,
    pub(crate) rmask: u32,
    /// Bytes of the residual section.
    pub(crate) res_bytes: u32,
    /// Regions, and the bits of each stored region length (and their mask).
    pub(crate) nreg: u32,
    pub(crate) len_bits: u32,
    pub(crate) lmask: u32,
    /// Bits of a decode-table index.
    pub(crate) m: u32,
    /// The symbol field: its lowest bit, the mask of the residual's bits
    /// below it, and where the residual's bits above it go.
    pub(crate) low: u32,
    pub(crate) lo_mask: u32,
    pub(crate) hi_shift: u32,
}

impl Shape {
    /// The shape of `p`'s rows.
    #[inline(always)]
    pub fn of(p: &FloatView) -> Self {
        // Shifts only: no division, so no panic path for a zero divisor.
        let eshift = p.elem_bytes.trailing_zeros() & 3;
        let n = p.row_bytes >> eshift;
        let r = p.residual_bits & 31;
        let s = p.sub_streams.clamp(1, 32);
        let low = p.low & 31;
        Shape {
            n,
            eshift,
            s,
            r,
            rmask: if r == 0 { 0 } else { u32::MAX >> (32 - r) },
            res_bytes: (n * r).div_ceil(8),
            nreg: s.div_ceil(2),
            len_bits: p.len_bits,
            lmask: if p.len_bits >= 32 {
                u32::MAX
            } else {
                (1u32 << p.len_bits) - 1
            },
            m: p.max_len.clamp(1, FLOAT_MAX_CODE_LEN),
            low,
            lo_mask: if low == 0 { 0 } else { u32::MAX >> (32 - low) },
            hi_shift: low + p.width,
        }
    }

    /// Element value from its residual and symbol (`docs/FORMAT.md`
    /// §7.3).
    #[inline(always)]
    fn compose(&self, residual: u32, sym: u32) -> u32 {
        let hi = if self.hi_shift >= 32 {
            0
        } else {
            (residual >> self.low) << self.hi_shift
        };
        (residual & self.lo_mask) | (sym << self.low) | hi
    }

    /// Sub-streams of a row: the lanes that decode it.
    #[inline(always)]
    pub fn sub_streams(&self) -> u32 {
        self.s
    }

    /// Store element `i` of the output row at `out`.
    ///
    /// # Safety
    /// `i < n`; `out` an output row aligned to the element size.
    #[inline(always)]
    pub(crate) unsafe fn store<H: Mem>(&self, h: &H, out: u64, i: u32, v: u32) {
        // SAFETY: forwarded contract.
        unsafe {
            match self.eshift {
                0 => store_as::<H, 0>(h, out, i, v),
                1 => store_as::<H, 1>(h, out, i, v),
                _ => store_as::<H, 2>(h, out, i, v),
            }
        }
    }
}

/// Store element `i` of `2^E` bytes of the output row at `out`.
///
/// # Safety
/// `i < n`; `out` an output row aligned to the element size.
#[inline(always)]
pub(crate) unsafe fn store_as<H: Mem, const E: u32>(h: &H, out: u64, i: u32, v: u32) {
    let a = out + (i << E) as u64;
    // SAFETY: inside the output row, aligned (the caller's contract).
    unsafe {
        match E {
            0 => h.st_u8(a, v),
            1 => h.st_u16(a, v),
            _ => h.st_u32(a, v),
        }
    }
}

/// Decode sub-stream `k` (< S) of a coded row stored at `src` (`len <
/// row_bytes` bytes, read through `h`): its elements `k, k + S, …` in
/// order, each handed to `sink` as `(i, value)`. Returns where the
/// sub-stream ended (an even lane's forward position, an odd lane's
/// backward one) and the errors seen (a region outside the row, a code not
/// in the table, non-zero residual padding); the meeting of the
/// sub-streams is checked by [`check_meet`].
///
/// The bulk kernel passes one sink type per element size (a store of that
/// width), so the loop has no branch a store.
///
/// # Safety
/// `h` reads `src .. src + len` and whole 4-byte words up to 8 bytes past
/// the aligned word that holds its last byte; `table` reads the group's
/// decode table (`2^max_len` entries).
#[inline(always)]
pub unsafe fn decode_sub_stream<W: Words, B: Book, K: FloatSink>(
    h: &W,
    table: &B,
    sh: &Shape,
    src: u64,
    len: u32,
    k: u32,
    sink: &mut K,
) -> (u32, u64) {
    // SAFETY: forwarded contract.
    unsafe { sub_stream::<W, B, K, false>(h, table, sh, src, len, k, true, sink) }
}

/// [`decode_sub_stream`]'s body. With `UNIFORM`, every lane of the warp
/// runs the same loop whatever its row: a lane without a row (`live`
/// false) or with a row whose regions fail their check decodes nothing
/// that counts, reading only the bytes at `src` (its index 0), and every
/// lane calls [`FloatSink::pair_done`] exactly `n / 2S` times, so a sink
/// may synchronise the warp there (the bulk decode's tiles). Without it, a
/// row failing its region check returns before any element.
///
/// Q: why `n / 2S` pairs for every lane, then single codes? A: a lane's
/// pair count would otherwise depend on its sub-stream (`n` not a multiple
/// of `2S`); after the uniform pairs at most two elements are left a lane.
///
/// # Safety
/// As [`decode_sub_stream`]; with `UNIFORM`, the bytes at `src` readable
/// as a row of at least 8 bytes is enough for a lane that is not `live`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn sub_stream<W: Words, B: Book, K: FloatSink, const UNIFORM: bool>(
    h: &W,
    table: &B,
    sh: &Shape,
    src: u64,
    len: u32,
    k: u32,
    live: bool,
    sink: &mut K,
) -> (u32, u64) {
    let mut ok = live && len >= sh.res_bytes;
    let area_len = if ok { len - sh.res_bytes } else { 0 };
    let area_at = if ok { src + sh.res_bytes as u64 } else { src };
    let mut area = Bits::new(area_at, area_len);
    let area_bits = area_len * 8;
    // This lane's region and its bounds: region q's length is the q-th
    // stored length (len_bits bits each, before region 0).
    let region = k >> 1;
    let mut start = (sh.nreg - 1) * sh.len_bits;
    let mut q = 0;
    while q < region {
        // SAFETY: Bits reads inside the row. Each length is below 2^len_bits
        // and there are at most 15: the sum stays far below 2^32.
        start += unsafe { area.peek(h, q * sh.len_bits) } & sh.lmask;
        q += 1;
    }
    let end = if region + 1 < sh.nreg {
        // SAFETY: as above.
        start + (unsafe { area.peek(h, region * sh.len_bits) } & sh.lmask)
    } else {
        area_bits
    };
    // Region starts ascend, so every lane checking its own bounds is the
    // CPU's check of the last region's start.
    ok &= start <= area_bits && end <= area_bits;
    if !UNIFORM && !ok {
        return (0, STATUS_CORRUPT);
    }
    let dmask = (1u32 << sh.m) - 1;
    // The residuals are read as aligned word pairs from the row's aligned
    // start (bit `sbit` of it is the row's first bit); a lane that decodes
    // nothing reads element 0's.
    let ral = src & !3;
    let sbit = ((src & 3) * 8) as u32;
    let at = |i: u32| if ok { i } else { 0 };
    // Both directions take one path ([`read_at`]).
    //
    // Q: why two codes a read? A: a read is the loop's longest part (the
    // held word's check and load, the direction's selects and shifts), and
    // 32 bits hold any two codes (2 × 12 bits, or a missing symbol's 15 and
    // a 12-bit look-up): the second code's bits are the read's bits after
    // the first code's, exactly the bits a read at its position would give,
    // with one exception that cannot change a verdict. A forward read at or
    // past the area's end gives 0 where this one gives the bytes after the
    // row; a first code ending there leaves the second one's end past the
    // area, which fails the meeting check whatever it decoded to, as a code
    // decoded from zeros would.
    let back = k & 1 == 1;
    let mut pos = if !ok {
        0
    } else if back {
        end
    } else {
        start
    };
    // Any code missing from the table, as a flag (no branch a code).
    let mut bad = false;
    let mut i = k;
    // Q: why a loop of whole pairs and a tail? A: the pair's second code
    // is then always an element, so the loop carries no test and no
    // branch for it.
    let pairs = sh.n / (2 * sh.s);
    let mut j = 0;
    while j < pairs {
        // SAFETY: Bits reads inside the row.
        let rd = unsafe { read_at(h, &mut area, pos, back) };
        // SAFETY: both indices are below 2^m, the table's length.
        let e1 = unsafe { entry(table, rd & dmask) };
        let l1 = e1 >> 12;
        // SAFETY: as above (l1 ≤ 15).
        let e2 = unsafe { entry(table, (rd >> l1) & dmask) };
        bad |= (e1 == FLOAT_NO_SYMBOL) | (e2 == FLOAT_NO_SYMBOL);
        pos = advance(pos, l1 + (e2 >> 12), back);
        let i2 = i + sh.s;
        // SAFETY: i < i2 < 2S·pairs ≤ n (k < S); a lane that decodes
        // nothing reads element 0.
        unsafe {
            sink.put_pair(
                i,
                sh.compose(residual(h, sh, src, ral, sbit, at(i)), e1 & 0xfff),
            );
            sink.put_pair(
                i2,
                sh.compose(residual(h, sh, src, ral, sbit, at(i2)), e2 & 0xfff),
            );
        }
        sink.pair_done(j);
        i = i2 + sh.s;
        j += 1;
    }
    while i < sh.n {
        // SAFETY: as in the loop.
        let rd = unsafe { read_at(h, &mut area, pos, back) };
        // SAFETY: as in the loop.
        let e1 = unsafe { entry(table, rd & dmask) };
        bad |= e1 == FLOAT_NO_SYMBOL;
        pos = advance(pos, e1 >> 12, back);
        // SAFETY: i < n, as in the loop.
        unsafe {
            sink.put(
                i,
                sh.compose(residual(h, sh, src, ral, sbit, at(i)), e1 & 0xfff),
            )
        };
        i += sh.s;
    }
    let mut err = if bad || !ok { STATUS_CORRUPT } else { 0 };
    // The residuals' padding, to a whole byte, is zero.
    let pad = sh.res_bytes * 8 - sh.n * sh.r;
    if ok && k == 0 && pad > 0 {
        // SAFETY: the padding bits are inside the row.
        let v = unsafe { bits_at(h, ral, sbit + sh.n * sh.r) };
        if v & ((1u32 << pad) - 1) != 0 {
            err = STATUS_CORRUPT;
        }
    }
    (pos, if live { err } else { 0 })
}

/// The 32 code bits at a sub-stream's position, in reading order from
/// bit 0: those from `pos` on (forward), or the 32 below `pos`
/// bit-reversed (backward; bits below the area's start read as 0).
///
/// Q: why one path for both directions, with selects? A: the even and
/// odd lanes of a group run side by side; with a branch a direction the
/// warp would run both paths for every read. A backward read is a forward
/// read of the 32 bits below the position, bit-reversed.
///
/// # Safety
/// As [`Bits::peek`].
#[inline(always)]
unsafe fn read_at<W: Words>(h: &W, area: &mut Bits, pos: u32, back: bool) -> u32 {
    let (q, up) = if back {
        (pos.max(32) - 32, 32 - pos.min(32))
    } else {
        (pos, 0)
    };
    // SAFETY: the caller's contract.
    let w = ((u64::from(unsafe { area.peek(h, q) }) << up) & 0xffff_ffff) as u32;
    if back { w.reverse_bits() } else { w }
}

/// A sub-stream's position after `step` bits.
///
/// Q: why wrapping? A: a damaged row's backward sub-stream may step below
/// 0; the position is then far past the row's end (rows are at most
/// FLOAT_MAX_ROW_BYTES), reads 0 and fails the meeting check, as the CPU
/// decoder's does.
#[inline(always)]
fn advance(pos: u32, step: u32, back: bool) -> u32 {
    if back {
        pos.wrapping_sub(step)
    } else {
        pos.wrapping_add(step)
    }
}

/// Element `i`'s residual bits, from the residual section of the row at
/// `src`, whose first bit is bit `sbit` of the 4-aligned address `ral`.
///
/// Q: why a path for 8 bits? A: bf16's default split leaves sign and
/// mantissa, 8 bits, as the residual: one byte load where a word pair
/// takes two loads, a funnel shift and the address arithmetic.
///
/// # Safety
/// `i < n`: bit i·r of the residuals is inside the row, and the word pair
/// read at most 7 bytes past it (the payload's padding).
#[inline(always)]
unsafe fn residual<W: Words>(h: &W, sh: &Shape, src: u64, ral: u64, sbit: u32, i: u32) -> u32 {
    if sh.r == 0 {
        0
    } else if sh.r == 8 {
        // SAFETY: byte i of the residuals is inside the row.
        unsafe { h.byte(src + i as u64) }
    } else {
        // SAFETY: the caller's contract.
        unsafe { bits_at(h, ral, sbit + i * sh.r) & sh.rmask }
    }
}

/// An even lane's check that its region's two sub-streams meet: exactly in
/// every region but the last, and in the last with fewer than 8 zero bits
/// between them (with one sub-stream, between its end and the row's end).
///
/// # Safety
/// As [`decode_sub_stream`].
#[inline(always)]
pub unsafe fn check_meet<W: Words>(
    h: &W,
    sh: &Shape,
    src: u64,
    len: u32,
    k: u32,
    f: u32,
    partner: u32,
) -> u64 {
    let area_len = len - sh.res_bytes;
    let area_bits = area_len * 8;
    let b = if sh.s == 1 { area_bits } else { partner };
    let ok = if (k >> 1) + 1 < sh.nreg {
        f == b
    } else {
        let mut area = Bits::new(src + sh.res_bytes as u64, area_len);
        // SAFETY: Bits reads inside the row.
        f <= b
            && b - f < 8
            && b <= area_bits
            && unsafe { area.peek(h, f) } & ((1u32 << (b - f)) - 1) == 0
    };
    if ok { 0 } else { STATUS_CORRUPT }
}

/// Hand the elements `k, k + S, …` of a raw row (`L` stored bytes at `src`,
/// read through `h`) to `sink`, as [`decode_sub_stream`] hands a coded
/// row's.
///
/// # Safety
/// As [`decode_sub_stream`], with `len = L`.
#[inline(always)]
pub unsafe fn put_raw<W: Words, K: FloatSink>(h: &W, sh: &Shape, src: u64, k: u32, sink: &mut K) {
    let (al, sbit) = (src & !3, ((src & 3) * 8) as u32);
    let bits = 8 << sh.eshift;
    let emask = if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    };
    let mut i = k;
    while i < sh.n {
        // SAFETY: element i is inside the row; the pair's second word at
        // most 7 bytes past it (the caller's contract).
        let v = unsafe { bits_at(h, al, sbit + (i << sh.eshift) * 8) } & emask;
        sink.put(i, v);
        i += sh.s;
    }
}

/// Copy the 16-byte pieces that hold the `len` bytes at `src` into shared
/// memory at `ws`, lane `k` of `g` taking pieces `k, k + g, …`; returns
/// the shared address the first byte lands at. The caller synchronises
/// before the bytes are read.
///
/// Q: why stage a row in shared memory? A: a lane reads its sub-stream a
/// word pair at a time and every element's residual as a word pair of its
/// own, scattered over the row: from global memory each such load is a
/// request to L1 (eight rows a warp, eight lines a load), and from mapped
/// host memory a transfer over the link. The group's 16-byte loads of
/// consecutive pieces read each stored byte once.
///
/// # Safety
/// `src`'s pieces are readable (a payload 16-aligned and readable up to its
/// length rounded up to 16); `ws` is 16-aligned and `ws ..
/// ws + FloatView::workspace_bytes()` is the group's shared memory.
#[inline(always)]
pub unsafe fn stage_row<H: Mem + Shared>(
    h: &H,
    src: u64,
    len: u32,
    ws: u32,
    k: u32,
    g: u32,
) -> u64 {
    let a0 = src & !15;
    let pieces = (((src + len as u64 + 15) & !15) - a0) as u32 / 16;
    let mut j = k;
    while j < pieces {
        // SAFETY: piece j holds bytes of the row (the caller's contract);
        // at most ⌈(L + 15) / 16⌉ pieces, inside the workspace.
        unsafe { h.sts_v4(ws + 16 * j, h.ld_v4(a0 + 16 * j as u64)) };
        j += g;
    }
    (ws + (src & 15) as u32) as u64
}
