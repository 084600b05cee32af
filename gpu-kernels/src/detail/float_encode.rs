//! The float coding's encoder (`docs/FORMAT.md` §7), over the
//! [`crate::simt`] traits: the bodies of `ibp_float_hist` (the fit's
//! symbol counts), `ibp_float_size` (every row's stored length) and
//! `ibp_float_encode` (the rows' bytes and the index), run by the emulated
//! warp in ibp's tests and compared there with the CPU codec
//! (`ibp::float_code`) byte for byte.
//!
//! # Lanes and rows
//!
//! As in the decoder (`crate::detail::float_decode`), a row of `S`
//! sub-streams is taken by a group of `G` consecutive lanes, `G` the power
//! of two at or above `S`: lane `k < S` sums, then writes, sub-stream `k`
//! (elements `k, k + S, …`). The region lengths are a scan over the group
//! (two shuffles a round), and every lane of the group writes a share of
//! the residual section (32 elements at a time, whole 32-bit words of the
//! row).
//!
//! # Race-free writes
//!
//! Rows start at any byte of the payload, and within a row the
//! sub-streams meet at any bit, so one 32-bit word may hold bits of two
//! sub-streams, of the residuals and a stream, or of two rows. The payload
//! is zeroed first and every write is an atomic OR (`red.global.or.b32`) of
//! the bits a lane owns: no lane's write can undo another's, whatever the
//! order, so the bytes are the CPU's bytes.
//!
//! Q: why OR into zeroed memory and not assemble each row in shared
//! memory and store whole words? A: a row in shared memory bounds the row
//! length by the block's shared memory (8 rows a warp at `S = 4`), and the
//! row's first and last words still belong to two rows. The OR costs a
//! memset of the payload (one write of at most the input's bytes) and
//! turns each word's store into a reduction that L2 performs; each lane
//! gathers 32 bits before it writes, so a word takes one reduction except
//! where two owners meet (a few a row).

use crate::params::{FLOAT_NO_CODE, FloatEncodeParams};
use crate::simt::{Block, Book, Lanes, Mem, Shared};

/// What every row of a launch shares, derived once from the parameters.
#[derive(Clone, Copy)]
struct Shape {
    /// Bytes of a row.
    l: u32,
    /// Elements of a row.
    n: u32,
    /// log2 of an element's bytes.
    eshift: u32,
    /// Sub-streams, regions and the bits of a stored region length.
    s: u32,
    nreg: u32,
    len_bits: u32,
    /// Residual bits of an element; bytes of the residual section.
    r: u32,
    res_bytes: u32,
    /// The symbol field: its lowest bit, its mask; the mask of the bits
    /// below it; the first bit above it.
    low: u32,
    wmask: u32,
    lo_mask: u32,
    hi_shift: u32,
}

impl Shape {
    #[inline(always)]
    fn of(p: &FloatEncodeParams) -> Self {
        // Shifts only: no division, so no panic path for a zero divisor.
        let eshift = p.elem_bytes.trailing_zeros() & 3;
        let n = p.row_bytes >> eshift;
        let r = p.residual_bits & 31;
        let s = p.sub_streams.clamp(1, 32);
        let low = p.low & 31;
        let width = p.width.clamp(1, 12);
        Shape {
            l: p.row_bytes,
            n,
            eshift,
            s,
            nreg: s.div_ceil(2),
            len_bits: p.len_bits & 31,
            r,
            res_bytes: (n * r).div_ceil(8),
            low,
            wmask: (1u32 << width) - 1,
            lo_mask: if low == 0 { 0 } else { u32::MAX >> (32 - low) },
            hi_shift: low + width,
        }
    }

    /// The symbol of element value `v`.
    #[inline(always)]
    fn symbol(&self, v: u32) -> u32 {
        (v >> self.low) & self.wmask
    }

    /// The residual of element value `v`: the bits below the field, then
    /// those above it.
    #[inline(always)]
    fn residual(&self, v: u32) -> u32 {
        let hi = if self.hi_shift >= 32 {
            0
        } else {
            v >> self.hi_shift
        };
        (v & self.lo_mask) | (hi << self.low)
    }

    /// The stored length of a row whose codes take `code_bits` bits (the
    /// CPU's rule, `ibp::float_code::row`): coded when that is shorter than
    /// the row and every symbol has a code, else the raw row.
    #[inline(always)]
    fn stored_len(&self, code_bits: u32, missing: bool) -> u32 {
        let bits = (self.nreg - 1) as u64 * self.len_bits as u64 + code_bits as u64;
        let coded = self.res_bytes as u64 + bits.div_ceil(8);
        if missing || coded >= self.l as u64 {
            self.l
        } else {
            coded as u32
        }
    }
}

/// Element `i` of `2^E` bytes of the row at `row`.
///
/// # Safety
/// `i < n`; the row readable in whole aligned 4-byte words, aligned to the
/// element size.
#[inline(always)]
unsafe fn element<H: Mem, const E: u32>(h: &H, row: u64, i: u32) -> u32 {
    let a = row + ((i as u64) << E);
    // SAFETY: the caller's contract; a 1- or 2-byte element is read in the
    // aligned word that holds it.
    unsafe {
        match E {
            0 => h.ld_u8(a),
            1 => (h.ld_u32(a & !3) >> ((a & 2) * 8)) & 0xffff,
            _ => h.ld_u32(a),
        }
    }
}

/// Entry `sym` of the encode table: `rev | code << 12 | len << 24`.
///
/// # Safety
/// `sym < 2^width`, the table's length.
#[inline(always)]
unsafe fn code<B: Book>(table: &B, sym: u32) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { table.ld_u32(4 * sym) }
}

/// OR `len` bits (those of `v`, whose other bits are 0) into memory from
/// bit `bit` of the 4-aligned address `al` on; zero words are not
/// written.
///
/// # Safety
/// The words holding those bits writable.
#[inline(always)]
unsafe fn or_bits<H: Mem>(h: &H, al: u64, bit: u32, v: u32, len: u32) {
    let a = al + ((bit >> 5) << 2) as u64;
    let w = (v as u64) << (bit & 31);
    // SAFETY: the caller's contract.
    unsafe {
        if w as u32 != 0 {
            h.or_u32(a, w as u32);
        }
        if (bit & 31) + len > 32 && (w >> 32) as u32 != 0 {
            h.or_u32(a + 4, (w >> 32) as u32);
        }
    }
}

/// A bit stream written upward from a bit of memory by atomic ORs, 32 bits
/// gathered before each write.
struct Sink {
    /// The 4-aligned address of the word being gathered.
    a: u64,
    /// Bits gathered, from bit `bits`'s word start; at most 63 held.
    acc: u64,
    bits: u32,
}

impl Sink {
    /// A stream from bit `bit` of the 4-aligned address `al` on.
    #[inline(always)]
    fn new(al: u64, bit: u32) -> Self {
        Sink {
            a: al + ((bit >> 5) << 2) as u64,
            acc: 0,
            bits: bit & 31,
        }
    }

    /// Append the low `len` (at most 32) bits of `v` (its other bits 0).
    ///
    /// # Safety
    /// The words the stream reaches writable.
    #[inline(always)]
    unsafe fn put<H: Mem>(&mut self, h: &H, v: u32, len: u32) {
        self.acc |= (v as u64) << self.bits;
        self.bits += len;
        if self.bits >= 32 {
            if self.acc as u32 != 0 {
                // SAFETY: the caller's contract.
                unsafe { h.or_u32(self.a, self.acc as u32) };
            }
            self.a += 4;
            self.acc >>= 32;
            self.bits -= 32;
        }
    }

    /// Write the last, partial word.
    ///
    /// # Safety
    /// As [`Sink::put`].
    #[inline(always)]
    unsafe fn finish<H: Mem>(self, h: &H) {
        if self.bits > 0 && self.acc as u32 != 0 {
            // SAFETY: the caller's contract.
            unsafe { h.or_u32(self.a, self.acc as u32) };
        }
    }
}

/// The code bits of sub-stream `k` (< S) of the row at `row`, whether one
/// of its symbols has no code, and its last element (`u32::MAX` when it has
/// none).
///
/// # Safety
/// As [`element`] for the row; `table` the encode table.
#[inline(always)]
unsafe fn sub_stream_bits<H: Mem, B: Book, const E: u32>(
    h: &H,
    table: &B,
    sh: &Shape,
    row: u64,
    k: u32,
) -> (u32, bool, u32) {
    let (mut bits, mut missing, mut last) = (0u32, false, u32::MAX);
    let mut i = k;
    while i < sh.n {
        // SAFETY: i < n; the symbol is below 2^width.
        let e = unsafe { code(table, sh.symbol(element::<H, E>(h, row, i))) };
        missing |= e == FLOAT_NO_CODE;
        // Q: why wrapping? A: a missing code's entry adds 255; the row
        // is then raw, whatever the sum.
        bits = bits.wrapping_add(e >> 24);
        last = i;
        i += sh.s;
    }
    (bits, missing, last)
}

/// The sum over each group of `g` lanes.
#[inline(always)]
fn group_sum<W: Lanes>(w: &W, x: u32, g: u32) -> u32 {
    let mut s = x;
    let mut m = 1;
    while m < g {
        s = s.wrapping_add(w.shfl_xor(s, m));
        m *= 2;
    }
    s
}

/// The rows a warp takes, as in the decoder: `32 / G` rows at once, the
/// warp's first at `warp · 32 / G`, then every `warps · 32 / G`-th.
#[derive(Clone, Copy)]
struct Groups {
    g: u32,
    gshift: u32,
    per_warp: u64,
    k: u32,
}

impl Groups {
    #[inline(always)]
    fn of<H: Lanes>(h: &H, sh: &Shape) -> Self {
        let g = sh.s.next_power_of_two();
        let gshift = g.trailing_zeros();
        Groups {
            g,
            gshift,
            per_warp: (32 >> gshift) as u64,
            k: h.lane() & (g - 1),
        }
    }
}

/// The code bits, missing flag and last element of this lane's sub-stream
/// of row `i` (0 bits for a lane past `S` or a row past the end).
///
/// # Safety
/// As [`measure`].
#[inline(always)]
unsafe fn lane_bits<H: Mem, B: Book>(
    h: &H,
    table: &B,
    p: &FloatEncodeParams,
    sh: &Shape,
    i: u64,
    k: u32,
) -> (u32, bool, u32) {
    if i >= p.rows || k >= sh.s {
        return (0, false, u32::MAX);
    }
    let row = p.src + i * sh.l as u64;
    // SAFETY: row i < rows; E is the element size's log2.
    unsafe {
        match sh.eshift {
            0 => sub_stream_bits::<H, B, 0>(h, table, sh, row, k),
            1 => sub_stream_bits::<H, B, 1>(h, table, sh, row, k),
            _ => sub_stream_bits::<H, B, 2>(h, table, sh, row, k),
        }
    }
}

/// `ibp_float_size`: every row's stored length into `p.sizes`.
///
/// # Safety
/// The host filled `p` as [`FloatEncodeParams`] says; `table` reads the
/// encode table.
#[inline(always)]
pub unsafe fn measure<H: Lanes + Mem, B: Book>(
    h: &H,
    table: &B,
    p: &FloatEncodeParams,
    warp: u64,
    warps: u64,
) {
    let sh = Shape::of(p);
    let gr = Groups::of(h, &sh);
    let mut i0 = warp * gr.per_warp;
    // Every lane runs the same iterations (the shuffles are warp-wide).
    while i0 < p.rows {
        let i = i0 + (h.lane() >> gr.gshift) as u64;
        // SAFETY: forwarded contract.
        let (mine, missing, _) = unsafe { lane_bits(h, table, p, &sh, i, gr.k) };
        if p.lane_bits != 0 && i < p.rows && gr.k < sh.s {
            // SAFETY: lane_bits holds rows · S u32.
            unsafe { h.st_u32(p.lane_bits + 4 * (i * sh.s as u64 + gr.k as u64), mine) };
        }
        let bits = group_sum(h, mine, gr.g);
        let missing = crate::simt::group_or(h, missing as u32, gr.g) != 0;
        if gr.k == 0 && i < p.rows {
            // SAFETY: sizes holds `rows` u64.
            unsafe { h.st_u64(p.sizes + 8 * i, sh.stored_len(bits, missing) as u64) };
        }
        i0 += warps * gr.per_warp;
    }
}

/// Write raw row `i` (at `row`) into the payload at bit `sbit` of `al`,
/// lane `k` of `g` taking every `g`-th 4-byte word of the row.
///
/// # Safety
/// As [`encode`]; the payload's words of the row writable.
#[inline(always)]
unsafe fn write_raw<H: Mem>(h: &H, sh: &Shape, row: u64, al: u64, sbit: u32, k: u32, g: u32) {
    let mut j = k * 4;
    while j < sh.l {
        let nb = (sh.l - j).min(4);
        let v = if row & 3 == 0 {
            // SAFETY: the aligned word at row + j is readable (whole words).
            let w = unsafe { h.ld_u32(row + j as u64) };
            if nb == 4 {
                w
            } else {
                w & ((1u32 << (8 * nb)) - 1)
            }
        } else {
            let mut w = 0;
            let mut b = 0;
            while b < nb {
                // SAFETY: inside the row.
                w |= unsafe { h.ld_u8(row + (j + b) as u64) } << (8 * b);
                b += 1;
            }
            w
        };
        // SAFETY: the row's stored bytes, inside the payload.
        unsafe { or_bits(h, al, sbit + 8 * j, v, 8 * nb) };
        j += 4 * g;
    }
}

/// Write the residual section of the row at `row`: lane `k` of `g` takes
/// every `g`-th run of 32 elements (`32·r` bits, whole words of the row).
///
/// # Safety
/// As [`write_raw`].
#[inline(always)]
unsafe fn write_residuals<H: Mem, const E: u32>(
    h: &H,
    sh: &Shape,
    row: u64,
    al: u64,
    sbit: u32,
    k: u32,
    g: u32,
) {
    let mut c = k * 32;
    while c < sh.n {
        let mut sink = Sink::new(al, sbit + c * sh.r);
        let end = (c + 32).min(sh.n);
        let mut i = c;
        while i < end {
            // SAFETY: i < n; the sink stays inside the row's residuals.
            unsafe { sink.put(h, sh.residual(element::<H, E>(h, row, i)), sh.r) };
            i += 1;
        }
        // SAFETY: as above.
        unsafe { sink.finish(h) };
        c += 32 * g;
    }
}

/// Write sub-stream `k` of the row at `row` into its region of the code
/// area (which starts at bit `area` of `al`): an even one forward from
/// `start`, its codes' bits reversed (`rev`); an odd one from `end − bits`
/// up, its codes in reverse element order (`code`), so that it reads
/// downward from `end`.
///
/// # Safety
/// As [`write_raw`]; `last` the sub-stream's last element (or `u32::MAX`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn write_sub_stream<H: Mem, B: Book, const E: u32>(
    h: &H,
    table: &B,
    sh: &Shape,
    row: u64,
    al: u64,
    at: u32,
    k: u32,
    last: u32,
) {
    if last == u32::MAX {
        return;
    }
    // Q: why one loop for both directions? A: the even and odd lanes of a
    // group run side by side; with a loop a direction the warp would run
    // both loops one after the other. The direction is three values chosen
    // once: where to start and stop, the step, and which form of the code
    // (`rev` at bit 0 or `code` at bit 12) to write.
    let back = k & 1 == 1;
    let (mut i, stop) = if back { (last, k) } else { (k, last) };
    let step = if back { sh.s.wrapping_neg() } else { sh.s };
    let form = if back { 12 } else { 0 };
    let mut sink = Sink::new(al, at);
    loop {
        // SAFETY: i is an element of the sub-stream (k ≤ i ≤ last < n); the
        // symbol is below 2^width; the sink stays in the sub-stream's bits.
        unsafe {
            let e = code(table, sh.symbol(element::<H, E>(h, row, i)));
            sink.put(h, (e >> form) & 0xfff, e >> 24);
        }
        if i == stop {
            break;
        }
        i = i.wrapping_add(step);
    }
    // SAFETY: as above.
    unsafe { sink.finish(h) };
}

/// `ibp_float_encode`: every row's stored bytes ORed into the zeroed
/// payload at its offset, and the index; with `STRIDED`
/// (`ibp_float_encode_strided`), at `i · p.stride` and without an index.
///
/// Q: why a const parameter, not a test of `p.stride`?
/// A: the test kept a second offset live through the row's writes: 48
/// registers instead of 40 for sm_90 (ptxas), five blocks an SM instead of
/// six for the bulk encoder, which never strides.
///
/// # Safety
/// The host filled `p` as [`FloatEncodeParams`] says (the offsets the scan
/// of this table's sizes of these rows, or with `STRIDED` the sizes and a
/// stride; the payload zeroed); `table` reads the encode table.
#[inline(always)]
pub unsafe fn encode<H: Lanes + Mem, B: Book, const STRIDED: bool>(
    h: &H,
    table: &B,
    p: &FloatEncodeParams,
    warp: u64,
    warps: u64,
) {
    let sh = Shape::of(p);
    let gr = Groups::of(h, &sh);
    let k = gr.k;
    let head = (sh.nreg - 1) * sh.len_bits;
    let mut i0 = warp * gr.per_warp;
    while i0 < p.rows {
        let i = i0 + (h.lane() >> gr.gshift) as u64;
        // SAFETY: forwarded contract.
        let live = i < p.rows;
        let (bits, last) = if p.lane_bits == 0 {
            // SAFETY: forwarded contract.
            let (b, _, last) = unsafe { lane_bits(h, table, p, &sh, i, k) };
            (b, last)
        } else if live && k < sh.s && k < sh.n {
            // Q: why keep the size pass's sums? A: counting again costs
            // about 15 instructions an element, a fifth of the encoder's
            // work; reading them back costs a load a lane a row.
            // SAFETY: lane_bits holds rows · S u32, written by the size
            // pass for these rows.
            let b = unsafe { h.ld_u32(p.lane_bits + 4 * (i * sh.s as u64 + k as u64)) };
            let per = (sh.n - 1 - k).checked_div(sh.s).unwrap_or(0);
            (b, k + per * sh.s)
        } else {
            (0, u32::MAX)
        };
        // Regions: an even lane's region holds its sub-stream and its odd
        // partner's; their starts are a scan over the group. Every lane
        // makes every shuffle.
        let partner = h.shfl_xor(bits, 1);
        let x = if k & 1 == 0 && k < sh.s {
            bits.wrapping_add(if k + 1 < sh.s { partner } else { 0 })
        } else {
            0
        };
        let mut incl = x;
        let mut d = 1;
        while d < gr.g {
            incl = h.shfl_up_add_in(incl, d, gr.g);
            d *= 2;
        }
        let excl = incl.wrapping_sub(x);
        let (p_excl, p_x) = (h.shfl_xor(excl, 1), h.shfl_xor(x, 1));
        let (reg_start, reg_len) = if k & 1 == 0 { (excl, x) } else { (p_excl, p_x) };
        // The stored length is the size pass's, read back from the scan
        // (or from the sizes, at a fixed stride).
        let (off, len) = if !live {
            (0, 0)
        } else if STRIDED {
            // SAFETY: i < rows; sizes holds rows u64 (the size pass).
            (i * p.stride, unsafe { h.ld_u64(p.sizes + 8 * i) } as u32)
        } else {
            // SAFETY: i < rows; offsets holds rows + 1 u64 (the scan).
            unsafe {
                let off = h.ld_u64(p.offsets + 8 * i);
                (off, (h.ld_u64(p.offsets + 8 * (i + 1)) - off) as u32)
            }
        };
        let coded = live && len < sh.l;
        let al = p.payload + (off & !3);
        let sbit = ((off & 3) * 8) as u32;
        let area = sbit + sh.res_bytes * 8;
        // The region lengths, written by lane 0 of the group.
        let gbase = h.lane() & !(gr.g - 1);
        let mut q = 0;
        while q + 1 < sh.nreg {
            let v = h.shfl_idx(x, gbase + 2 * q);
            if coded && k == 0 {
                // SAFETY: the head's bits, inside the row's stored bytes.
                unsafe { or_bits(h, al, area + q * sh.len_bits, v, sh.len_bits) };
            }
            q += 1;
        }
        if live {
            let row = p.src + i * sh.l as u64;
            if k == 0 && !STRIDED {
                // SAFETY: the index holds what FloatEncodeParams says.
                unsafe { write_index(h, p, i, off, len) };
            }
            if !coded {
                // SAFETY: the row's stored bytes, inside the payload.
                unsafe { write_raw(h, &sh, row, al, sbit, k, gr.g) };
            } else {
                // SAFETY: the row's stored bytes, inside the payload; E is
                // the element size's log2.
                unsafe {
                    match sh.eshift {
                        0 => write_residuals::<H, 0>(h, &sh, row, al, sbit, k, gr.g),
                        1 => write_residuals::<H, 1>(h, &sh, row, al, sbit, k, gr.g),
                        _ => write_residuals::<H, 2>(h, &sh, row, al, sbit, k, gr.g),
                    }
                }
                if k < sh.s {
                    let at = if k & 1 == 0 {
                        head + reg_start
                    } else if (k >> 1) + 1 < sh.nreg {
                        head + reg_start + reg_len - bits
                    } else {
                        // The last region ends at the row's end, after the
                        // padding.
                        (len - sh.res_bytes) * 8 - bits
                    };
                    let at = area + at;
                    // SAFETY: as above.
                    unsafe {
                        match sh.eshift {
                            0 => write_sub_stream::<H, B, 0>(h, table, &sh, row, al, at, k, last),
                            1 => write_sub_stream::<H, B, 1>(h, table, &sh, row, al, at, k, last),
                            _ => write_sub_stream::<H, B, 2>(h, table, &sh, row, al, at, k, last),
                        }
                    }
                }
            }
        }
        i0 += warps * gr.per_warp;
    }
}

/// Row `i`'s index entries: its start relative to its block's base, the
/// base when it is a block's first row, and the payload's length after the
/// last row.
///
/// # Safety
/// `i < rows`; offsets, bases and rel as [`FloatEncodeParams`] says.
#[inline(always)]
unsafe fn write_index<H: Mem>(h: &H, p: &FloatEncodeParams, i: u64, off: u64, len: u32) {
    let block = i >> p.block_log2;
    // SAFETY: the block's first row is at most i; the bases hold one u64 a
    // block and one more; rel holds rel_width bytes a row.
    unsafe {
        let base = h.ld_u64(p.offsets + 8 * (block << p.block_log2));
        let rel = (off - base) as u32;
        match p.rel_width {
            2 => h.st_u16(p.rel + 2 * i, rel),
            4 => h.st_u32(p.rel + 4 * i, rel),
            _ => {}
        }
        if i == block << p.block_log2 {
            h.st_u64(p.bases + 8 * block, off);
        }
        if i + 1 == p.rows {
            h.st_u64(p.bases + 8 * (block + 1), off + len as u64);
        }
    }
}

/// `ibp_float_hist`: the count of every value of the field over every
/// element, added into `p.hist`. Thread `t` of `threads` in the grid takes
/// every `threads`-th 4-byte word; the block counts in shared memory at
/// `smem` (`2^width` u32), then adds its non-zero bins.
///
/// # Safety
/// The host filled `p` as [`FloatEncodeParams`] says; `smem` is the
/// launch's `4 · 2^width` bytes of shared memory; every thread of the
/// block calls it (two block barriers).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn histogram<H: Mem + Shared + Block>(
    h: &H,
    p: &FloatEncodeParams,
    smem: u32,
    tid: u32,
    block_threads: u32,
    thread: u64,
    threads: u64,
) {
    let bins = 1u32 << p.width.clamp(1, 12);
    let wmask = bins - 1;
    let low = p.low & 31;
    let mut j = tid;
    while j < bins {
        // SAFETY: j < bins, inside the launch's shared memory.
        unsafe { h.sts_u32(smem + 4 * j, 0) };
        j += block_threads;
    }
    h.sync_threads();
    let bytes = p.rows * p.row_bytes as u64;
    let words = bytes / 4;
    let count = |v: u32| {
        // SAFETY: the symbol is below 2^width.
        unsafe { h.adds_u32(smem + 4 * ((v >> low) & wmask), 1) }
    };
    let mut w = thread;
    while w < words {
        // SAFETY: w < words: inside the rows.
        let v = unsafe { h.ld_u32(p.src + 4 * w) };
        match p.elem_bytes {
            1 => {
                count(v & 0xff);
                count((v >> 8) & 0xff);
                count((v >> 16) & 0xff);
                count(v >> 24);
            }
            2 => {
                count(v & 0xffff);
                count(v >> 16);
            }
            _ => count(v),
        }
        w += threads;
    }
    // The last bytes, past the whole words (1- and 2-byte elements).
    if thread == 0 {
        let mut b = words * 4;
        while b < bytes {
            // SAFETY: b < bytes: inside the rows.
            let v = unsafe {
                if p.elem_bytes == 2 {
                    h.ld_u8(p.src + b) | h.ld_u8(p.src + b + 1) << 8
                } else {
                    h.ld_u8(p.src + b)
                }
            };
            count(v);
            b += p.elem_bytes.clamp(1, 2) as u64;
        }
    }
    h.sync_threads();
    let mut j = tid;
    while j < bins {
        // SAFETY: j < bins; the histogram holds 2^width u64.
        unsafe {
            let c = h.lds_u32(smem + 4 * j);
            if c != 0 {
                h.add_u64(p.hist + 8 * j as u64, c as u64);
            }
        }
        j += block_threads;
    }
}
