//! One row: its elements split into the coded symbol and the raw residual,
//! the symbols written as prefix codes into interleaved sub-streams
//! (`docs/FORMAT.md` §7.3).

use crate::error::{Error, Result};

use super::table::{NO_SYMBOL, Table};

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
    /// Bits of each stored sub-stream length (0 with one sub-stream).
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

/// Bits of a stored sub-stream length: enough for the longest sub-stream,
/// `ceil(n / s)` codes of `max_len` bits; none with one sub-stream.
pub(crate) fn len_bits(n: usize, s: usize, max_len: u8) -> u32 {
    if s <= 1 {
        0
    } else {
        let most = n.div_ceil(s) as u64 * u64::from(max_len);
        64 - most.leading_zeros()
    }
}

/// Element `i` of a row, as an unsigned integer.
#[inline(always)]
fn element(row: &[u8], elem: usize, i: usize) -> u32 {
    match elem {
        1 => u32::from(row[i]),
        2 => u32::from(u16::from_le_bytes([row[2 * i], row[2 * i + 1]])),
        _ => u32::from_le_bytes([row[4 * i], row[4 * i + 1], row[4 * i + 2], row[4 * i + 3]]),
    }
}

#[inline(always)]
fn set_element(out: &mut [u8], elem: usize, i: usize, v: u32) {
    match elem {
        1 => out[i] = v as u8,
        2 => out[2 * i..2 * i + 2].copy_from_slice(&(v as u16).to_le_bytes()),
        _ => out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
    }
}

#[inline(always)]
fn mask(bits: u32) -> u32 {
    if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    }
}

/// Bits appended LSB first to a byte vector.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    bits: u32,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        Self {
            out,
            acc: 0,
            bits: 0,
        }
    }

    /// Append the low `len` (at most 32) bits of `v`; the bits above `len`
    /// must be 0.
    #[inline(always)]
    fn put(&mut self, v: u32, len: u32) {
        self.acc |= u64::from(v) << self.bits;
        self.bits += len;
        if self.bits >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.bits -= 32;
        }
    }

    /// Pad with zeros to a whole byte.
    fn align(&mut self) {
        self.bits = (self.bits + 7) & !7;
        if self.bits >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.bits -= 32;
        }
    }

    /// Pad to a whole byte and write what is left.
    fn finish(mut self) {
        self.align();
        let bytes = (self.bits / 8) as usize;
        self.out
            .extend_from_slice(&self.acc.to_le_bytes()[..bytes]);
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

/// Encode `row` and append its stored bytes to `out`: coded when that is
/// shorter than the row, else the row itself. Returns the stored length.
/// `codes` is scratch space.
pub(crate) fn encode_row(
    t: &Table,
    sh: &RowShape,
    row: &[u8],
    codes: &mut Vec<u32>,
    out: &mut Vec<u8>,
) -> usize {
    debug_assert_eq!(row.len(), sh.row_bytes);
    let wmask = mask(sh.width);
    codes.clear();
    let mut stream_bits = [0u64; 32];
    let mut k = 0;
    for i in 0..sh.n {
        let sym = (element(row, sh.elem, i) >> sh.low) & wmask;
        let e = t.enc[sym as usize];
        if e == NO_SYMBOL {
            // A symbol the table does not code: the row stays raw.
            out.extend_from_slice(row);
            return sh.row_bytes;
        }
        codes.push(e);
        stream_bits[k] += u64::from(e >> 16);
        k += 1;
        if k == sh.s {
            k = 0;
        }
    }
    let head = (sh.s as u64 - 1) * u64::from(sh.len_bits);
    let bits: u64 = head + stream_bits[..sh.s].iter().sum::<u64>();
    let coded = sh.res_bytes + bits.div_ceil(8) as usize;
    if coded >= sh.row_bytes {
        out.extend_from_slice(row);
        return sh.row_bytes;
    }
    let start = out.len();
    let mut w = BitWriter::new(out);
    if sh.r > 0 {
        let lo = mask(sh.low);
        let hi_shift = sh.low + sh.width;
        for i in 0..sh.n {
            let v = element(row, sh.elem, i);
            let hi = if hi_shift >= 32 { 0 } else { v >> hi_shift };
            w.put((v & lo) | (hi << sh.low), sh.r);
        }
        w.align();
    }
    for &b in &stream_bits[..sh.s - 1] {
        // Each fits len_bits by its definition (len_bits()).
        w.put(b as u32, sh.len_bits);
    }
    for k in 0..sh.s {
        for &e in codes.iter().skip(k).step_by(sh.s) {
            w.put(e & 0xffff, e >> 16);
        }
    }
    w.finish();
    debug_assert_eq!(out.len() - start, coded);
    coded
}

/// Decode one stored row into `out` (`row_bytes` bytes).
///
/// Errors with [`crate::ErrorKind::Corrupt`] when the stored bytes are not a
/// row this table encodes to: a length above the row's, a code the table
/// lacks, a sub-stream that does not end where its length says, non-zero
/// padding.
pub(crate) fn decode_row(t: &Table, sh: &RowShape, stored: &[u8], out: &mut [u8]) -> Result<()> {
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
    // Sub-stream starts and ends, in bits from the start of `area`.
    let mut pos = [0usize; 32];
    let mut end = [0usize; 32];
    let mut at = (sh.s - 1) * sh.len_bits as usize;
    let lmask = u64::from(mask(sh.len_bits));
    for k in 0..sh.s {
        pos[k] = at;
        if k + 1 < sh.s {
            at += (peek(area, k * sh.len_bits as usize) & lmask) as usize;
        } else {
            at = area_bits;
        }
        end[k] = at;
    }
    if pos[sh.s - 1] > area_bits {
        return Err(Error::corrupt(
            "a float-coded row's sub-stream lengths run past its end",
        ));
    }
    let dmask = (1u64 << sh.max_len) - 1;
    let rmask = u64::from(mask(sh.r));
    let lo = mask(sh.low);
    let hi_shift = sh.low + sh.width;
    let mut k = 0;
    for i in 0..sh.n {
        let e = t.dec[(peek(area, pos[k]) & dmask) as usize];
        if e == NO_SYMBOL {
            return Err(Error::corrupt("a float-coded row holds a code its table lacks"));
        }
        pos[k] += (e >> 16) as usize;
        let sym = e & 0xffff;
        let residual = if sh.r > 0 {
            (peek(res, i * sh.r as usize) & rmask) as u32
        } else {
            0
        };
        let hi = if hi_shift >= 32 {
            0
        } else {
            (residual >> sh.low) << hi_shift
        };
        set_element(out, sh.elem, i, (residual & lo) | (sym << sh.low) | hi);
        k += 1;
        if k == sh.s {
            k = 0;
        }
    }
    // Every sub-stream but the last ends at its stored length; the last
    // ends in the row's last byte, and the padding bits are 0.
    for k in 0..sh.s - 1 {
        if pos[k] != end[k] {
            return Err(Error::corrupt(format!(
                "sub-stream {k} of a float-coded row ends at bit {}, its length says {}",
                pos[k], end[k]
            )));
        }
    }
    let last = pos[sh.s - 1];
    if last > area_bits || last.div_ceil(8) != area.len() || peek(area, last) != 0 {
        return Err(Error::corrupt(
            "a float-coded row's last sub-stream does not end in its last byte",
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
