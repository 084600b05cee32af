//! One row: its elements split into the coded symbol and the raw residual,
//! the symbols written as prefix codes into interleaved sub-streams
//! (`docs/FORMAT.md` §7.3).

use crate::error::{Error, Result};

use super::table::{NO_CODE, NO_SYMBOL, Table};

/// What every row of a group shares: element count and the sizes of the
/// row's sections.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowShape {
    /// Bytes of a row, raw.
    pub row_bytes: usize,
    /// Elements of a row.
    pub n: usize,
    /// Bytes of an element.
    pub elem: usize,
    /// Residual bits of an element.
    pub r: u32,
    /// Bytes of the residual section (`n·r` bits, rounded up).
    pub res_bytes: usize,
    /// Bits of each stored region length (0 with one region).
    pub len_bits: u32,
    /// Sub-streams.
    pub s: usize,
    /// The symbol field: its lowest bit and its width.
    pub low: u32,
    pub width: u32,
    /// Bits of a decode-table index.
    pub max_len: u32,
}

impl RowShape {
    /// The shape of rows of `row_bytes` under `t`.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] when `row_bytes` is
    /// 0 or not a whole number of elements.
    pub fn new(t: &Table, row_bytes: usize) -> Result<Self> {
        let elem = t.ftype.bytes();
        if row_bytes == 0 || !row_bytes.is_multiple_of(elem) {
            return Err(Error::invalid(format!(
                "rows of {row_bytes} bytes are not a whole number of {} elements ({elem} bytes each)",
                t.ftype
            )));
        }
        let n = row_bytes / elem;
        let r = t.ftype.bits() - u32::from(t.split.width);
        let s = usize::from(t.sub_streams);
        Ok(Self {
            row_bytes,
            n,
            elem,
            r,
            res_bytes: (n * r as usize).div_ceil(8),
            len_bits: len_bits(n, s, t.max_len),
            s,
            low: u32::from(t.split.low),
            width: u32::from(t.split.width),
            max_len: u32::from(t.max_len),
        })
    }
}

/// Bits of each stored region length: enough for the longest region, two
/// sub-streams of `ceil(n / s)` codes of `max_len` bits; none with one
/// region (one or two sub-streams).
pub(crate) fn len_bits(n: usize, s: usize, max_len: u8) -> u32 {
    if s <= 2 {
        0
    } else {
        let most = 2 * n.div_ceil(s) as u64 * u64::from(max_len);
        64 - most.leading_zeros()
    }
}

/// An element of `E` bytes (1, 2 or 4), as an unsigned integer.
#[inline(always)]
fn element<const E: usize>(b: &[u8; E]) -> u32 {
    let mut v = [0u8; 4];
    v[..E].copy_from_slice(b);
    u32::from_le_bytes(v)
}

#[inline(always)]
fn set_element<const E: usize>(out: &mut [u8; E], v: u32) {
    out.copy_from_slice(&v.to_le_bytes()[..E]);
}

#[inline(always)]
fn mask(bits: u32) -> u32 {
    if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    }
}

/// Bits written LSB first into a byte slice that has 8 bytes to spare
/// past the last byte written.
///
/// Q: why store 8 bytes on every `put` instead of 4 when 32 bits are full?
/// A: code lengths vary, so "32 bits full" is a branch the CPU mispredicts
/// about once in every few codes; an unaligned 8-byte store and a shift
/// cost less than that.
struct BitWriter<'a> {
    buf: &'a mut [u8],
    at: usize,
    acc: u64,
    bits: u32,
}

impl<'a> BitWriter<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        Self {
            buf,
            at: 0,
            acc: 0,
            bits: 0,
        }
    }

    /// Append the low `len` (at most 56) bits of `v`; the bits above `len`
    /// must be 0.
    #[inline(always)]
    fn put(&mut self, v: u64, len: u32) {
        debug_assert!(len <= 56 && (len == 64 || v >> len == 0));
        self.acc |= v << self.bits;
        self.bits += len;
        if let Some(w) = self.buf.get_mut(self.at..self.at + 8) {
            w.copy_from_slice(&self.acc.to_le_bytes());
        }
        // At most 7 + 56 bits are held, so `whole` is at most 7.
        let whole = self.bits >> 3;
        self.at += whole as usize;
        self.acc >>= 8 * whole;
        self.bits &= 7;
    }

    /// Pad with zeros to a whole byte.
    fn align(&mut self) {
        let pad = (8 - (self.bits & 7)) & 7;
        self.put(0, pad);
    }

    /// Pad to a whole byte; returns the bytes written.
    fn finish(mut self) -> usize {
        self.align();
        self.at
    }
}

/// The 64 bits of `bytes` from bit `pos` on, LSB first; bits past the end
/// read as 0.
#[inline(always)]
fn peek(bytes: &[u8], pos: usize) -> u64 {
    let at = pos >> 3;
    let word = match bytes.get(at..at + 8) {
        Some(w) => u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]),
        None => {
            let mut w = [0u8; 8];
            if let Some(tail) = bytes.get(at..) {
                w[..tail.len()].copy_from_slice(tail);
            }
            u64::from_le_bytes(w)
        }
    };
    word >> (pos & 7)
}

/// Regions of a row's code area: one per pair of sub-streams (one with a
/// single sub-stream).
#[inline(always)]
fn regions(s: usize) -> usize {
    s.div_ceil(2)
}

/// `len` bits of `bytes` ending before bit `end`, reversed: bit 0 of the
/// result is bit `end - 1`. Bits below 0 read as 0.
#[inline(always)]
fn peek_back(bytes: &[u8], end: usize, len: u32) -> u32 {
    let w = if end >= len as usize {
        peek(bytes, end - len as usize) as u32
    } else {
        (peek(bytes, 0) as u32) << (len as usize - end)
    };
    w.reverse_bits() >> (32 - len)
}

/// Encode `row` and append its stored bytes to `out`: coded when that is
/// shorter than the row, else the row itself. Returns the stored length.
/// `codes` is scratch space.
///
/// The code area holds `ceil(S/2)` regions, each with an even sub-stream
/// written forward from its start and the next odd one written backward
/// from its end, so that a region needs no length of its own sub-streams
/// (`docs/FORMAT.md` §7.3).
pub(crate) fn encode_row(
    t: &Table,
    sh: &RowShape,
    row: &[u8],
    codes: &mut Vec<u64>,
    out: &mut Vec<u8>,
) -> usize {
    match sh.elem {
        1 => encode_row_of::<1>(t, sh, row, codes, out),
        2 => encode_row_of::<2>(t, sh, row, codes, out),
        _ => encode_row_of::<4>(t, sh, row, codes, out),
    }
}

fn encode_row_of<const E: usize>(
    t: &Table,
    sh: &RowShape,
    row: &[u8],
    codes: &mut Vec<u64>,
    out: &mut Vec<u8>,
) -> usize {
    debug_assert_eq!(row.len(), sh.row_bytes);
    let wmask = mask(sh.width);
    codes.clear();
    codes.resize(sh.n, 0);
    let start = out.len();
    // The row's room, and 8 bytes for the writer's whole-word stores.
    out.resize(start + sh.row_bytes + 8, 0);
    let mut w = BitWriter::new(&mut out[start..]);
    // One pass: the residuals written, the codes looked up and their bits
    // summed.
    let lo = mask(sh.low);
    let hi_shift = sh.low + sh.width;
    // Three simple passes, each of which the compiler unrolls or
    // vectorises: the codes looked up, their bits summed, the residuals
    // written.
    for (v, c) in row.as_chunks::<E>().0.iter().zip(codes.iter_mut()) {
        *c = t.enc[((element::<E>(v) >> sh.low) & wmask) as usize];
    }
    let (mut code_bits, mut missing) = (0u64, false);
    for &e in codes.iter() {
        code_bits += (e >> 32) & 0xff;
        missing |= e == NO_CODE;
    }
    if sh.r > 0 {
        // Q: why gather residuals into a word before writing? A: each write
        // depends on the one before (the bit position); packing `per`
        // residuals at fixed shifts first shortens that chain `per` times.
        let residual = |v: &[u8; E]| {
            let v = element::<E>(v);
            let hi = if hi_shift >= 32 { 0 } else { v >> hi_shift };
            u64::from((v & lo) | (hi << sh.low))
        };
        let elems = row.as_chunks::<E>().0;
        // Q: why a fixed group size per width? A: an inner loop of a
        // run-time length costs a mispredicted exit per group; K fixed
        // unrolls it. K·r stays within the writer's 56 bits.
        match sh.r {
            // One-byte elements with a one-bit residual (FP8's defaults:
            // the sign, or the lowest mantissa bit): eight residuals are
            // gathered from one word by a multiply.
            1 if E == 1 => {
                let bit = if sh.low == 0 { sh.width } else { 0 };
                put_byte_bits(&mut w, row, bit);
            }
            1..=7 => put_residuals::<E, 8>(&mut w, elems, sh.r, residual),
            8..=14 => put_residuals::<E, 4>(&mut w, elems, sh.r, residual),
            15..=28 => put_residuals::<E, 2>(&mut w, elems, sh.r, residual),
            _ => put_residuals::<E, 1>(&mut w, elems, sh.r, residual),
        }
    }
    if sh.r > 0 {
        w.align();
    }
    let nreg = regions(sh.s);
    let head = (nreg - 1) as u32 * sh.len_bits;
    let bits = u64::from(head) + code_bits;
    let coded = sh.res_bytes + bits.div_ceil(8) as usize;
    if missing || coded >= sh.row_bytes {
        // A symbol the table lacks, or no saving: the row stays raw.
        out[start..start + sh.row_bytes].copy_from_slice(row);
        out.truncate(start + sh.row_bytes);
        return sh.row_bytes;
    }
    // Room for the region lengths, filled in once the regions are written.
    let mut left = head;
    while left > 0 {
        let b = left.min(32);
        w.put(0, b);
        left -= b;
    }
    let pad = (bits.div_ceil(8) * 8 - bits) as u32;
    let mut region_bits = [0u64; 16];
    let per_write = 56 / sh.max_len.max(1);
    for p in 0..nreg {
        let mut rb = 0u64;
        // As many codes a write as surely fit 56 bits (4 with M = 12), as
        // for the residuals.
        let fwd = codes.get(2 * p..).unwrap_or(&[]).iter().step_by(sh.s);
        let (mut word, mut wl, mut held) = (0u64, 0u32, 0u32);
        for &e in fwd {
            word |= (e & 0xffff) << wl;
            wl += (e >> 32) as u32;
            held += 1;
            if held == per_write {
                w.put(word, wl);
                rb += u64::from(wl);
                (word, wl, held) = (0, 0, 0);
            }
        }
        w.put(word, wl);
        rb += u64::from(wl);
        if p == nreg - 1 && pad > 0 {
            w.put(0, pad);
        }
        if 2 * p + 1 < sh.s {
            // Backward: the last code first, each code's bits last first
            // (the canonical code LSB first), so that reading down from the
            // region's end meets the first code's first bit first.
            let n_odd = (sh.n + sh.s).saturating_sub(2 * p + 2) / sh.s;
            let (mut word, mut wl, mut held) = (0u64, 0u32, 0u32);
            for j in (0..n_odd).rev() {
                let e = codes[2 * p + 1 + j * sh.s];
                word |= ((e >> 16) & 0xffff) << wl;
                wl += (e >> 32) as u32;
                held += 1;
                if held == per_write {
                    w.put(word, wl);
                    rb += u64::from(wl);
                    (word, wl, held) = (0, 0, 0);
                }
            }
            w.put(word, wl);
            rb += u64::from(wl);
        }
        region_bits[p] = rb;
    }
    let written = w.finish();
    debug_assert_eq!(written, coded);
    let area = &mut out[start + sh.res_bytes..start + coded];
    for (p, &rb) in region_bits[..nreg - 1].iter().enumerate() {
        // Each fits len_bits by its definition (len_bits()).
        or_bits(area, p * sh.len_bits as usize, rb, sh.len_bits);
    }
    out.truncate(start + coded);
    coded
}

/// Write every element's residual (`r` bits, from `residual`), `K` to a
/// write.
#[inline(always)]
fn put_residuals<const E: usize, const K: usize>(
    w: &mut BitWriter<'_>,
    elems: &[[u8; E]],
    r: u32,
    residual: impl Fn(&[u8; E]) -> u64,
) {
    let (groups, tail) = elems.as_chunks::<K>();
    for g in groups {
        let mut word = 0u64;
        for (j, v) in g.iter().enumerate() {
            word |= residual(v) << (j as u32 * r);
        }
        w.put(word, K as u32 * r);
    }
    for v in tail {
        w.put(residual(v), r);
    }
}

/// Write bit `bit` of every byte of `bytes`, byte `j`'s at position `j`.
///
/// Q: how does one multiply gather eight bits? A: with the bits isolated at
/// positions `8j` of a word, the multiplier `Σ 2^(56 − 7j)` moves bit `8j`
/// to `56 + j`; every other product lands at `56 + 8(i − j) + j`, outside
/// bits 56–63 for `i ≠ j`, and no two products share a position, so
/// nothing carries. Measured on MiniLM fp8 (docs/results/entropy-ratio-cpu.md):
/// compress 0.33 → 0.43 GB/s a core.
#[inline(always)]
fn put_byte_bits(w: &mut BitWriter<'_>, bytes: &[u8], bit: u32) {
    let gather = |g: &[u8; 8]| {
        let x = (u64::from_le_bytes(*g) >> bit) & 0x0101_0101_0101_0101;
        x.wrapping_mul(0x0102_0408_1020_4080) >> 56
    };
    let (groups, tail) = bytes.as_chunks::<8>();
    for g in groups {
        w.put(gather(g), 8);
    }
    for &v in tail {
        w.put(u64::from(v >> bit & 1), 1);
    }
}

/// OR the low `len` bits of `v` into `bytes` from bit `pos` on, LSB first.
fn or_bits(bytes: &mut [u8], pos: usize, v: u64, len: u32) {
    for j in 0..len as usize {
        if v >> j & 1 == 1 {
            let q = pos + j;
            if let Some(b) = bytes.get_mut(q >> 3) {
                *b |= 1 << (q & 7);
            }
        }
    }
}

/// Decode one stored row into `out` (`row_bytes` bytes).
///
/// Errors with [`crate::ErrorKind::Corrupt`] when the stored bytes are not a
/// row this table encodes to: a length above the row's, a code the table
/// lacks, sub-streams that do not meet where the region lengths say,
/// non-zero padding.
pub(crate) fn decode_row(t: &Table, sh: &RowShape, stored: &[u8], out: &mut [u8]) -> Result<()> {
    match sh.elem {
        1 => decode_row_of::<1>(t, sh, stored, out),
        2 => decode_row_of::<2>(t, sh, stored, out),
        _ => decode_row_of::<4>(t, sh, stored, out),
    }
}

fn decode_row_of<const E: usize>(
    t: &Table,
    sh: &RowShape,
    stored: &[u8],
    out: &mut [u8],
) -> Result<()> {
    debug_assert_eq!(out.len(), sh.row_bytes);
    if stored.len() == sh.row_bytes {
        out.copy_from_slice(stored);
        return Ok(());
    }
    if stored.len() > sh.row_bytes || stored.len() < sh.res_bytes {
        return Err(Error::corrupt(format!(
            "a float-coded row of {} bytes is stored in {} bytes",
            sh.row_bytes,
            stored.len()
        )));
    }
    let (res, area) = stored.split_at(sh.res_bytes);
    let area_bits = area.len() * 8;
    // Sub-stream positions, in bits from the start of `area`: an even one
    // reads up from its region's start, an odd one down from its end.
    let nreg = regions(sh.s);
    let mut pos = [0usize; 32];
    let mut at = (nreg - 1) * sh.len_bits as usize;
    let lmask = (1u64 << sh.len_bits) - 1;
    for p in 0..nreg {
        pos[2 * p] = at;
        if p + 1 < nreg {
            at += (peek(area, p * sh.len_bits as usize) & lmask) as usize;
        } else {
            at = area_bits;
        }
        pos[2 * p + 1] = at;
    }
    if pos[2 * nreg - 2] > area_bits {
        return Err(Error::corrupt(
            "a float-coded row's region lengths run past its end",
        ));
    }
    let ml = sh.max_len;
    let dmask = (1u64 << ml) - 1;
    let rmask = u64::from(mask(sh.r));
    let lo = mask(sh.low);
    let hi_shift = sh.low + sh.width;
    let res_bits = sh.r as usize;
    let compose = |i: usize, sym: u32| -> u32 {
        let residual = if sh.r > 0 {
            (peek(res, i * res_bits) & rmask) as u32
        } else {
            0
        };
        let hi = if hi_shift >= 32 {
            0
        } else {
            (residual >> sh.low) << hi_shift
        };
        (residual & lo) | (sym << sh.low) | hi
    };
    let elems = out.as_chunks_mut::<E>().0;
    let mut bad = false;
    let fwd = |f: &mut usize| {
        let e = t.dec[(peek(area, *f) & dmask) as usize];
        *f += (e >> 16) as usize;
        e
    };
    let bwd = |b: &mut usize| {
        let e = t.dec[peek_back(area, *b, ml) as usize];
        *b = b.wrapping_sub((e >> 16) as usize);
        e
    };
    let mut store = |i: usize, e: u32| {
        bad |= e == NO_SYMBOL;
        set_element::<E>(&mut elems[i], compose(i, e & 0xffff));
    };
    // Q: why all sub-streams of a row in one loop? A: each is a chain of
    // dependent lookups (position, bits, table, length); the CPU overlaps
    // independent chains, so S chains in flight decode faster than one.
    // With S = 4 (the default) the positions stay in registers.
    let mut f = [0usize; 16];
    let mut b = [0usize; 16];
    for p in 0..nreg {
        (f[p], b[p]) = (pos[2 * p], pos[2 * p + 1]);
    }
    let mut base = 0;
    if sh.s == 4 {
        let (mut f0, mut b0, mut f1, mut b1) = (f[0], b[0], f[1], b[1]);
        while base + 4 <= sh.n {
            let e0 = fwd(&mut f0);
            let e1 = bwd(&mut b0);
            let e2 = fwd(&mut f1);
            let e3 = bwd(&mut b1);
            store(base, e0);
            store(base + 1, e1);
            store(base + 2, e2);
            store(base + 3, e3);
            base += 4;
        }
        (f[0], b[0], f[1], b[1]) = (f0, b0, f1, b1);
    }
    // Any other S, and the last elements: element by element.
    for i in base..sh.n {
        let k = (i - base) % sh.s;
        let e = if k & 1 == 0 {
            fwd(&mut f[k / 2])
        } else {
            bwd(&mut b[k / 2])
        };
        store(i, e);
    }
    for p in 0..nreg {
        (pos[2 * p], pos[2 * p + 1]) = (f[p], b[p]);
    }
    if bad {
        return Err(Error::corrupt(
            "a float-coded row holds a code its table lacks",
        ));
    }
    // The two sub-streams of a region meet exactly; in the last region
    // they leave the byte padding between them, fewer than 8 zero bits.
    for p in 0..nreg {
        let (f, b) = (
            pos[2 * p],
            if sh.s == 1 { area_bits } else { pos[2 * p + 1] },
        );
        let gap_ok = if p + 1 < nreg {
            f == b
        } else {
            f <= b && b - f < 8 && b <= area_bits && peek(area, f) & ((1 << (b - f)) - 1) == 0
        };
        if !gap_ok {
            return Err(Error::corrupt(format!(
                "the sub-streams of region {p} of a float-coded row do not meet (bits {f} and {b})"
            )));
        }
    }
    if nreg == 1 && sh.s > 1 && pos[1] > area_bits {
        return Err(Error::corrupt(
            "a float-coded row's sub-stream runs past its end",
        ));
    }
    let res_bits = sh.n * sh.r as usize;
    if sh.r > 0 && peek(res, res_bits) != 0 {
        return Err(Error::corrupt(
            "a float-coded row's residual padding is not zero",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bits `put_byte_bits` writes are those of the general residual
    /// writer for one-byte elements with one residual bit, for every bit
    /// position and every tail length.
    #[test]
    fn byte_bits_by_multiply_equal_the_general_writer() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let bytes: Vec<u8> = (0..75)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect();
        for bit in 0..8 {
            for n in 0..bytes.len() {
                let row = &bytes[..n];
                let (mut a, mut b) = (vec![0u8; n + 16], vec![0u8; n + 16]);
                let mut wa = BitWriter::new(&mut a);
                put_byte_bits(&mut wa, row, bit);
                let la = wa.finish();
                let mut wb = BitWriter::new(&mut b);
                let elems = row.as_chunks::<1>().0;
                put_residuals::<1, 8>(&mut wb, elems, 1, |v| u64::from(v[0] >> bit & 1));
                let lb = wb.finish();
                assert_eq!((la, &a[..la]), (lb, &b[..lb]), "bit {bit}, {n} bytes");
            }
        }
    }
}
