//! Float coding: a second way to store a group of floating-point rows, beside
//! IBP's, that entropy-codes the exponent.
//!
//! IBP drops the bits that are the same in most rows; on dense floats that
//! leaves the exponent's variable part stored at full width. This coding
//! splits every element into a *symbol* (a field of its bits: the exponent,
//! with the sign or the top mantissa bits when that pays) and a *residual*
//! (the other bits, stored as they are). The symbols are written with a
//! length-limited canonical prefix code fitted to the group
//! ([`Table`]); each row is split into interleaved sub-streams so that
//! several lanes of a warp can decode one row.
//!
//! - Rows stay individually decodable: the [`FloatCoded`] index finds a
//!   row's bytes in O(1), and a gather reads only its rows.
//! - A stored row is never longer than the raw row: a row that the code
//!   does not shorten (or that holds a symbol the table lacks) is stored
//!   raw, and its length says so ([`max_stored_row_bytes`]).
//! - Every byte counts: [`FloatCoded::stored_bytes`] is the length of
//!   [`FloatCoded::to_bytes`], table and index included.
//!
//! The bytes are specified in `docs/FORMAT.md` §7. The `.ibp` container
//! stores a float-coded group as one section (§6.9,
//! [`crate::container::GroupLayout::Float`]), and the pipeline and the
//! command line choose it per group ([`crate::pipeline::Coding`]). The GPU
//! fits and encodes a group in device memory with `ibp::gpu::FloatEncoder`
//! (the same table and bytes as [`fit`] and [`compress`]) and decodes a
//! group's rows with `ibp::gpu::FloatDecoder` (feature `cuda`); a
//! container's float group reaches it through
//! `FloatCoded`, not yet through `GpuDataset`.
//!
//! # Which data it helps
//!
//! bf16, f16, f32 and FP8 (E4M3, E5M2) elements, little-endian. [`fit`]
//! chooses the split by the size it predicts (unless one is given). When the
//! code saves nothing (integers, random bits) every row is stored raw and
//! the group is a little larger than raw (the table and the index); a
//! caller compares [`FloatCoded::stored_bytes`] with IBP's size and keeps
//! IBP or raw instead.
//!
//! ```
//! use ibp::Rows;
//! use ibp::float_code::{FitOptions, FloatType, compress, fit};
//!
//! // 256 rows of 64 bf16 values of a bell-shaped spread.
//! let values: Vec<u16> = (0..16_384u32)
//!     .map(|i| {
//!         let x = (i.wrapping_mul(2_654_435_761) >> 20) as f32 / 4096.0 - 0.5;
//!         (x * x * x * 0.3 + x * 0.01).to_bits().wrapping_shr(16) as u16
//!     })
//!     .collect();
//! let rows = Rows::of(&values, 64)?;
//! let table = fit(FloatType::Bf16, rows, &FitOptions::default())?;
//! let coded = compress(&table, rows)?;
//! assert!(coded.stored_bytes() < rows.bytes().len() as u64);
//!
//! let mut row = vec![0u8; rows.row_bytes()];
//! coded.gather(&[200], &mut row)?;
//! assert_eq!(row, rows.row(200));
//! # Ok::<(), ibp::Error>(())
//! ```
#![forbid(unsafe_code)]

#[cfg(any(test, feature = "cuda"))]
mod device;
mod parts;
mod row;
mod table;
#[cfg(test)]
mod tests;

use std::fmt;
use std::ops::Range;

use rayon::prelude::*;

use crate::Rows;
use crate::error::{Error, Result};
use crate::io::DType;

pub use table::{MAX_CODE_LEN, MAX_SUB_STREAMS, MAX_SYMBOL_BITS, Table};

#[cfg(feature = "cuda")]
pub(crate) use device::DeviceImage;

use row::{RowShape, decode_row, encode_row};

/// The floating-point element types the coding knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatType {
    /// bfloat16: sign, 8 exponent bits, 7 mantissa bits.
    Bf16,
    /// IEEE binary16: sign, 5 exponent bits, 10 mantissa bits.
    F16,
    /// IEEE binary32: sign, 8 exponent bits, 23 mantissa bits.
    F32,
    /// FP8 E4M3 (OCP): sign, 4 exponent bits, 3 mantissa bits.
    E4M3,
    /// FP8 E5M2 (OCP): sign, 5 exponent bits, 2 mantissa bits.
    E5M2,
}

impl FloatType {
    /// Every type, in the order of their codes.
    pub const ALL: [FloatType; 5] = [
        FloatType::Bf16,
        FloatType::F16,
        FloatType::F32,
        FloatType::E4M3,
        FloatType::E5M2,
    ];

    /// Bits of an element.
    pub fn bits(self) -> u32 {
        match self {
            FloatType::F32 => 32,
            FloatType::Bf16 | FloatType::F16 => 16,
            FloatType::E4M3 | FloatType::E5M2 => 8,
        }
    }

    /// Bytes of an element.
    pub fn bytes(self) -> usize {
        self.bits() as usize / 8
    }

    /// Exponent bits.
    pub fn exponent_bits(self) -> u8 {
        match self {
            FloatType::Bf16 | FloatType::F32 => 8,
            FloatType::F16 | FloatType::E5M2 => 5,
            FloatType::E4M3 => 4,
        }
    }

    /// Mantissa (fraction) bits.
    pub fn mantissa_bits(self) -> u8 {
        self.bits() as u8 - 1 - self.exponent_bits()
    }

    /// The type of a parsed tensor's [`DType`]: bf16, f16, f32, and the
    /// safetensors names `F8_E4M3` and `F8_E5M2`; `None` for others.
    pub fn of_dtype(d: &DType) -> Option<Self> {
        match d {
            DType::BF16 => Some(FloatType::Bf16),
            DType::F16 => Some(FloatType::F16),
            DType::F32 => Some(FloatType::F32),
            DType::Other { name, size: 1 } if name == "F8_E4M3" => Some(FloatType::E4M3),
            DType::Other { name, size: 1 } if name == "F8_E5M2" => Some(FloatType::E5M2),
            _ => None,
        }
    }

    /// The type's code in a table (`docs/FORMAT.md` §7.2).
    pub(crate) fn code(self) -> u8 {
        match self {
            FloatType::Bf16 => 1,
            FloatType::F16 => 2,
            FloatType::F32 => 3,
            FloatType::E4M3 => 4,
            FloatType::E5M2 => 5,
        }
    }

    pub(crate) fn from_code(c: u8) -> Result<Self> {
        FloatType::ALL
            .into_iter()
            .find(|t| t.code() == c)
            .ok_or_else(|| Error::corrupt(format!("float type code {c} is not one of 1 to 5")))
    }
}

impl fmt::Display for FloatType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FloatType::Bf16 => "bf16",
            FloatType::F16 => "f16",
            FloatType::F32 => "f32",
            FloatType::E4M3 => "fp8 e4m3",
            FloatType::E5M2 => "fp8 e5m2",
        })
    }
}

/// Which bits of an element are the coded symbol: `width` bits from bit
/// `low` (bit 0 the least significant). The other bits are the residual,
/// stored as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Split {
    pub(crate) low: u8,
    pub(crate) width: u8,
}

impl Split {
    /// `width` bits from bit `low`; checked against the element type when
    /// used.
    pub fn new(low: u8, width: u8) -> Self {
        Self { low, width }
    }

    /// The exponent and the top `mantissa` mantissa bits, with the sign
    /// when `sign` is true.
    pub fn exponent(t: FloatType, sign: bool, mantissa: u8) -> Self {
        let m = t.mantissa_bits();
        Self {
            low: m.saturating_sub(mantissa),
            width: t.exponent_bits() + mantissa.min(m) + u8::from(sign),
        }
    }

    /// The lowest coded bit.
    pub fn low(self) -> u8 {
        self.low
    }

    /// Coded bits.
    pub fn width(self) -> u8 {
        self.width
    }

    /// Errors with [`crate::ErrorKind::InvalidArgument`] unless the field
    /// is 1 to [`MAX_SYMBOL_BITS`] bits inside an element of `t`.
    pub fn check(self, t: FloatType) -> Result<()> {
        if !(1..=MAX_SYMBOL_BITS).contains(&self.width)
            || u32::from(self.low) + u32::from(self.width) > t.bits()
        {
            return Err(Error::invalid(format!(
                "a symbol of {} bits from bit {} does not fit a {t} element (1 to {MAX_SYMBOL_BITS} bits inside its {} bits)",
                self.width,
                self.low,
                t.bits()
            )));
        }
        Ok(())
    }
}

/// Options of [`fit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FitOptions {
    /// The symbol field; `None` (the default) chooses the smallest of the
    /// exponent with 0 to 3 top mantissa bits, with or without the sign.
    pub split: Option<Split>,
    /// Sub-streams per row: 1, or an even number up to [`MAX_SUB_STREAMS`];
    /// 0 (the default) chooses by the row's length
    /// ([`sub_streams_for`]: 4 for rows of up to 512 elements, more for
    /// longer ones).
    pub sub_streams: u8,
    /// Longest code in bits, 1 to [`MAX_CODE_LEN`] (default 12); raised
    /// when the group has more symbols than `2^max_code_len`.
    pub max_code_len: u8,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            split: None,
            sub_streams: 0,
            max_code_len: 12,
        }
    }
}

impl FitOptions {
    /// Use this symbol field.
    pub fn with_split(mut self, split: Split) -> Self {
        self.split = Some(split);
        self
    }

    /// Split rows into `n` sub-streams (1 or even, up to 32; default 0: by
    /// the row's length, [`sub_streams_for`]).
    ///
    /// A row's sub-streams are decoded by as many lanes at once: the bulk
    /// GPU decoder (`ibp::gpu::FloatDecoder`) puts several rows in a
    /// warp, but a user kernel's fused decode
    /// (`ibp_kernels::device::float::decode_float_row`) takes a warp a row,
    /// so groups meant for it want `n = 32` (every lane decodes) or `16`
    /// (half the lanes, for a slightly better ratio: MiniLM's bf16
    /// embeddings 1.454 at 32, 1.477 at 16).
    pub fn with_sub_streams(mut self, n: u8) -> Self {
        self.sub_streams = n;
        self
    }

    /// Limit codes to `bits` bits.
    pub fn with_max_code_len(mut self, bits: u8) -> Self {
        self.max_code_len = bits;
        self
    }
}

/// The sub-streams [`FitOptions::default`] gives rows of `n` elements: the
/// smallest power of two from 4 to [`MAX_SUB_STREAMS`] that leaves a
/// sub-stream at most 128 elements (MiniLM's 384-value rows: 4; 1024
/// values: 8; 4096 or more: 32).
///
/// Q: why more sub-streams for longer rows? A: a sub-stream is one lane's
/// chain of dependent look-ups, and the GPU decodes a group's rows `32 / S`
/// to a warp: with four sub-streams, 64 MiB of 16 KB rows is 4,096 rows,
/// about four warps an SM, and decoded at 85 GB/s on the H200 against 425
/// for 768-byte rows (`ibp bench --section float`'s sweep, seventh
/// session). Each pair of sub-streams adds one stored region length to a
/// row (11–15 bits), under 0.3% of a 2 KB row.
pub fn sub_streams_for(n: usize) -> u8 {
    let want = n.div_ceil(128).next_power_of_two();
    want.clamp(4, usize::from(MAX_SUB_STREAMS)) as u8
}

/// The histogram of `split`'s field over every element of `rows`.
pub(crate) fn histogram(t: FloatType, split: Split, rows: Rows<'_>) -> Vec<u64> {
    let size = 1usize << split.width;
    let (low, wmask) = (u32::from(split.low), (1u32 << split.width) - 1);
    let e = t.bytes();
    rows.bytes()
        .par_chunks((1 << 20) / e * e)
        .map(|chunk| {
            let mut c = vec![0u32; size];
            match e {
                1 => chunk.iter().for_each(|&b| {
                    c[((u32::from(b) >> low) & wmask) as usize] += 1;
                }),
                2 => chunk.as_chunks::<2>().0.iter().for_each(|b| {
                    let v = u32::from(u16::from_le_bytes(*b));
                    c[((v >> low) & wmask) as usize] += 1;
                }),
                _ => chunk.as_chunks::<4>().0.iter().for_each(|b| {
                    let v = u32::from_le_bytes(*b);
                    c[((v >> low) & wmask) as usize] += 1;
                }),
            }
            c.into_iter().map(u64::from).collect::<Vec<u64>>()
        })
        .reduce(
            || vec![0u64; size],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        )
}

/// Fit a table to the rows of a group: count the symbols, choose the split
/// (unless `opts` names one) by the size it predicts, and build a
/// length-limited canonical code.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when the rows are not
/// whole elements of `t` or an option is out of range.
pub fn fit(t: FloatType, rows: Rows<'_>, opts: &FitOptions) -> Result<Table> {
    let plan = FitPlan::new(t, rows.row_bytes(), opts)?;
    let counts = histogram(t, plan.wide, rows);
    plan.choose(&counts, rows.rows())
}

/// What [`fit`] counts and how it chooses, once the options are checked:
/// the widest field (whose histogram every candidate's counts are read
/// off) and the candidates. The GPU fit (`ibp::gpu::FloatEncoder::fit`)
/// counts the same field on the device and calls the same
/// [`FitPlan::choose`], so both fits give the same table.
#[derive(Clone, Debug)]
pub(crate) struct FitPlan {
    pub t: FloatType,
    pub wide: Split,
    candidates: Vec<Split>,
    row_bytes: usize,
    opts: FitOptions,
}

impl FitPlan {
    /// Check `opts` for rows of `row_bytes` of `t`.
    ///
    /// Errors as [`fit`].
    pub fn new(t: FloatType, row_bytes: usize, opts: &FitOptions) -> Result<Self> {
        if !row_bytes.is_multiple_of(t.bytes()) {
            return Err(Error::invalid(format!(
                "rows of {row_bytes} bytes are not whole {t} elements"
            )));
        }
        let mut opts = *opts;
        if opts.sub_streams == 0 {
            opts.sub_streams = sub_streams_for(row_bytes / t.bytes());
        }
        if !table::valid_sub_streams(opts.sub_streams) {
            return Err(Error::invalid(format!(
                "{} sub-streams; 1 or an even number up to {MAX_SUB_STREAMS} are valid (or 0: by the row's length)",
                opts.sub_streams
            )));
        }
        if !(1..=MAX_CODE_LEN).contains(&opts.max_code_len) {
            return Err(Error::invalid(format!(
                "a code length limit of {} bits; 1 to {MAX_CODE_LEN} are valid",
                opts.max_code_len
            )));
        }
        // Count once over the widest field, and read every candidate's
        // counts off it.
        let (wide, candidates) = match opts.split {
            Some(s) => {
                s.check(t)?;
                (s, vec![s])
            }
            None => {
                let e = t.exponent_bits();
                let k = t.mantissa_bits().min(3).min(MAX_SYMBOL_BITS - 1 - e);
                let wide = Split::exponent(t, true, k);
                let mut c = Vec::new();
                for m in 0..=k {
                    c.push(Split::exponent(t, true, m));
                    c.push(Split::exponent(t, false, m));
                }
                (wide, c)
            }
        };
        Ok(Self {
            t,
            wide,
            candidates,
            row_bytes,
            opts,
        })
    }

    /// The table of the candidate with the fewest predicted bits, from the
    /// histogram of the wide field (`2^wide.width` counts) over `rows`
    /// rows.
    pub fn choose(&self, counts: &[u64], rows: usize) -> Result<Table> {
        let (t, wide, opts) = (self.t, self.wide, &self.opts);
        if counts.len() != 1 << wide.width {
            return Err(Error::invalid(format!(
                "{} counts of a {}-bit field",
                counts.len(),
                wide.width
            )));
        }
        let n = self.row_bytes / t.bytes();
        let elements = (rows * n) as u64;
        /// Predicted bits, the split, its code lengths and their limit.
        type Candidate = (u64, Split, Vec<(u16, u8)>, u8);
        let mut best: Option<Candidate> = None;
        for &c in &self.candidates {
            let shift = c.low - wide.low;
            let mut cc = vec![0u64; 1 << c.width];
            for (s, &v) in counts.iter().enumerate() {
                cc[(s >> shift) & ((1 << c.width) - 1)] += v;
            }
            let (lens, ml) = table::code_lengths(&cc, opts.max_code_len);
            let code_bits: u64 = lens
                .iter()
                .map(|&(s, l)| cc[usize::from(s)] * u64::from(l))
                .sum();
            let r = u64::from(t.bits() - u32::from(c.width));
            let s = usize::from(opts.sub_streams);
            let head = (s.div_ceil(2) as u64 - 1) * u64::from(row::len_bits(n, s, ml));
            let bits = code_bits + elements * r + rows as u64 * head;
            if best.as_ref().is_none_or(|b| bits < b.0) {
                best = Some((bits, c, lens, ml));
            }
        }
        let Some((_, split, lens, ml)) = best else {
            return Err(Error::invalid("no symbol field to fit"));
        };
        Table::from_lengths(t, split, opts.sub_streams, ml, lens)
    }
}

/// The most bytes a stored row takes in the payload: the raw row's, since
/// a row the code does not shorten is stored raw.
pub const fn max_stored_row_bytes(row_bytes: usize) -> usize {
    row_bytes
}

/// The most bytes [`FloatCoded::to_bytes`] takes for `rows` rows of
/// `row_bytes` bytes under any table: the longest table, the index and
/// every row raw.
pub fn max_stored_bytes(rows: u64, row_bytes: usize) -> u64 {
    let (log2, width) = index_shape(row_bytes);
    Table::MAX_ENCODED_LEN as u64
        + index_bytes(rows, log2, width)
        + rows.saturating_mul(max_stored_row_bytes(row_bytes) as u64)
}

/// Bytes of the index header (`docs/FORMAT.md` §7.4).
const INDEX_HEADER: usize = 16;

/// The index's block size (log2 rows) and relative-offset width (bytes)
/// for rows of `row_bytes`: 2-byte offsets in the largest block (up to 256
/// rows) whose rows all start within 65,535 bytes of its first, else
/// 4-byte offsets in blocks of 256 rows, else one block a row.
pub(crate) fn index_shape(row_bytes: usize) -> (u8, u8) {
    let max = max_stored_row_bytes(row_bytes) as u64;
    for log2 in (1..=8u8).rev() {
        if ((1u64 << log2) - 1) * max <= u64::from(u16::MAX) {
            return (log2, 2);
        }
    }
    if 255 * max <= u64::from(u32::MAX) {
        (8, 4)
    } else {
        (0, 0)
    }
}

/// Bytes of the index of `rows` rows.
fn index_bytes(rows: u64, log2: u8, width: u8) -> u64 {
    INDEX_HEADER as u64 + 8 * (rows.div_ceil(1 << log2) + 1) + u64::from(width) * rows
}

/// A group of float-coded rows: its table, the index of row starts and the
/// payload (`docs/FORMAT.md` §7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FloatCoded {
    table: Table,
    shape: RowShapeKey,
    rows: usize,
    block_log2: u8,
    rel_width: u8,
    /// Byte offset of every block's first row, then the payload's length.
    bases: Vec<u64>,
    /// Every row's start relative to its block's.
    rel: Vec<u32>,
    payload: Vec<u8>,
}

/// The row length a [`FloatCoded`] was made for (its shape is derived).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RowShapeKey {
    row_bytes: usize,
}

/// Rows per compression job: about 1 MiB of input.
fn job_rows(row_bytes: usize) -> usize {
    ((1usize << 20) / row_bytes).max(1)
}

/// Encode every row of `rows` with `table`, in parallel (rayon, about 1 MiB
/// of rows a job). A row the table does not shorten, or with a symbol it
/// has no code for, is stored raw.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when the rows are not
/// whole elements of the table's type or longer than 4 GiB, and with
/// [`crate::ErrorKind::OutOfMemory`] when the payload cannot be allocated.
pub fn compress(table: &Table, rows: Rows<'_>) -> Result<FloatCoded> {
    let sh = RowShape::new(table, rows.row_bytes())?;
    if u32::try_from(rows.row_bytes()).is_err() {
        return Err(Error::invalid(format!(
            "rows of {} bytes; the float coding stores rows of up to 4 GiB",
            rows.row_bytes()
        )));
    }
    let l = rows.row_bytes();
    let jobs: Vec<(Vec<u8>, Vec<u32>)> = rows
        .bytes()
        .par_chunks(job_rows(l) * l)
        .map(|chunk| {
            let mut out = Vec::with_capacity(chunk.len() + 8);
            let mut sizes = Vec::with_capacity(chunk.len() / l);
            let mut codes = Vec::with_capacity(sh.n);
            for row in chunk.chunks_exact(l) {
                sizes.push(encode_row(table, &sh, row, &mut codes, &mut out) as u32);
            }
            (out, sizes)
        })
        .collect();
    let (block_log2, rel_width) = index_shape(l);
    let n = rows.rows();
    let total: usize = jobs.iter().map(|j| j.0.len()).sum();
    let mut payload = Vec::new();
    payload
        .try_reserve_exact(total)
        .map_err(|_| Error::out_of_memory(total, "the float-coded payload"))?;
    let mut bases = Vec::with_capacity(n.div_ceil(1 << block_log2) + 1);
    let mut rel = Vec::with_capacity(n);
    let mut at = 0u64;
    let mut i = 0usize;
    for (bytes, sizes) in &jobs {
        payload.extend_from_slice(bytes);
        for &s in sizes {
            if i & ((1 << block_log2) - 1) == 0 {
                bases.push(at);
            }
            // Below 2^16 (or 2^32) by index_shape.
            rel.push((at - bases[bases.len() - 1]) as u32);
            at += u64::from(s);
            i += 1;
        }
    }
    bases.push(at);
    Ok(FloatCoded {
        table: table.clone(),
        shape: RowShapeKey { row_bytes: l },
        rows: n,
        block_log2,
        rel_width,
        bases,
        rel,
        payload,
    })
}

impl FloatCoded {
    /// The group's table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes of a row, raw.
    pub fn row_bytes(&self) -> usize {
        self.shape.row_bytes
    }

    /// The payload: every row's stored bytes, in order.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Every byte the group takes: table, index and payload (the length of
    /// [`FloatCoded::to_bytes`]).
    pub fn stored_bytes(&self) -> u64 {
        self.table.encoded_len() as u64
            + index_bytes(self.rows as u64, self.block_log2, self.rel_width)
            + self.payload.len() as u64
    }

    /// Rows stored coded (the others are stored raw).
    pub fn coded_rows(&self) -> usize {
        (0..self.rows)
            .filter(|&i| self.row_range(i).is_ok_and(|r| r.len() < self.row_bytes()))
            .count()
    }

    /// Where row `i`'s stored bytes are in the payload.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for a row past the
    /// end and [`crate::ErrorKind::Corrupt`] for an index that points
    /// outside the payload or gives a row more bytes than raw.
    pub fn row_range(&self, i: usize) -> Result<Range<usize>> {
        if i >= self.rows {
            return Err(Error::invalid(format!(
                "row {i} of a group of {} rows",
                self.rows
            )));
        }
        let start = self.start(i);
        let end = if i + 1 == self.rows {
            self.bases[self.bases.len() - 1]
        } else {
            self.start(i + 1)
        };
        let bad = || Error::corrupt(format!("the float-code index of row {i} is inconsistent"));
        if end < start || end - start > self.row_bytes() as u64 || end > self.payload.len() as u64 {
            return Err(bad());
        }
        Ok(start as usize..end as usize)
    }

    fn start(&self, i: usize) -> u64 {
        self.bases[i >> self.block_log2].saturating_add(u64::from(self.rel[i]))
    }

    /// Decode row `i` into `out` (`row_bytes` bytes).
    fn decode_into(&self, sh: &RowShape, i: usize, out: &mut [u8]) -> Result<()> {
        let r = self.row_range(i)?;
        decode_row(&self.table, sh, &self.payload[r], out)
    }

    /// Decode rows `range` into `out` (`range.len() · row_bytes` bytes), in
    /// parallel.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for a range past the
    /// end or a wrong `out` length, and with [`crate::ErrorKind::Corrupt`]
    /// for damaged rows (`out` is then partly written).
    pub fn decompress_rows(&self, range: Range<usize>, out: &mut [u8]) -> Result<()> {
        let l = self.row_bytes();
        if range.start > range.end || range.end > self.rows {
            return Err(Error::invalid(format!(
                "rows {range:?} of a group of {} rows",
                self.rows
            )));
        }
        if out.len() != range.len() * l {
            return Err(Error::invalid(format!(
                "{} rows need {} output bytes, not {}",
                range.len(),
                range.len() * l,
                out.len()
            )));
        }
        let sh = RowShape::new(&self.table, l)?;
        let per = job_rows(l);
        out.par_chunks_mut(per * l)
            .enumerate()
            .try_for_each(|(j, chunk)| {
                let first = range.start + j * per;
                chunk
                    .chunks_exact_mut(l)
                    .enumerate()
                    .try_for_each(|(k, o)| self.decode_into(&sh, first + k, o))
            })
    }

    /// Decode every row.
    pub fn decompress(&self) -> Result<Vec<u8>> {
        let mut out = crate::error::try_vec(self.rows * self.row_bytes(), 0u8, "the decoded rows")?;
        self.decompress_rows(0..self.rows, &mut out)?;
        Ok(out)
    }

    /// Decode rows `ids` (any order, repeats allowed) into `out`
    /// (`ids.len() · row_bytes` bytes), reading only their bytes.
    ///
    /// Errors as [`FloatCoded::decompress_rows`].
    pub fn gather(&self, ids: &[u64], out: &mut [u8]) -> Result<()> {
        let l = self.row_bytes();
        if out.len() != ids.len() * l {
            return Err(Error::invalid(format!(
                "{} rows need {} output bytes, not {}",
                ids.len(),
                ids.len() * l,
                out.len()
            )));
        }
        let sh = RowShape::new(&self.table, l)?;
        out.par_chunks_mut(l)
            .zip(ids.par_iter())
            .with_min_len(64)
            .try_for_each(|(o, &id)| {
                let i = usize::try_from(id).unwrap_or(usize::MAX);
                self.decode_into(&sh, i, o)
            })
    }

    /// The group's bytes: table, index, payload (`docs/FORMAT.md` §7.1).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.head_bytes();
        out.extend_from_slice(&self.payload);
        out
    }

    /// The group's bytes before its payload: table and index; followed by
    /// [`FloatCoded::payload`] they are [`FloatCoded::to_bytes`], so a
    /// writer need not copy the payload.
    pub fn head_bytes(&self) -> Vec<u8> {
        let head = self.stored_bytes() as usize - self.payload.len();
        let mut out = Vec::with_capacity(head);
        out.extend_from_slice(&self.table.to_bytes());
        out.extend_from_slice(&(self.row_bytes() as u32).to_le_bytes());
        out.extend_from_slice(&(self.rows as u64).to_le_bytes());
        out.extend_from_slice(&[self.block_log2, self.rel_width, 0, 0]);
        for b in &self.bases {
            out.extend_from_slice(&b.to_le_bytes());
        }
        for &r in &self.rel {
            out.extend_from_slice(&r.to_le_bytes()[..usize::from(self.rel_width)]);
        }
        out
    }

    /// Read a group from its bytes ([`FloatCoded::to_bytes`]), checking the
    /// table and the index (every row's bytes inside the payload and no
    /// longer than raw). Rows are checked when decoded.
    ///
    /// Errors with [`crate::ErrorKind::Truncated`] when `bytes` ends early
    /// and [`crate::ErrorKind::Corrupt`] when it is not a valid group.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (table, mut at) = Table::from_bytes(bytes)?;
        let take = |at: &mut usize, len: usize, what: &str| -> Result<&[u8]> {
            let end = at.checked_add(len).filter(|&e| e <= bytes.len());
            let s = end.map(|e| &bytes[*at..e]).ok_or_else(|| {
                Error::truncated(format!("a float-coded group ends inside its {what}"))
            })?;
            *at += len;
            Ok(s)
        };
        let h = take(&mut at, INDEX_HEADER, "index header")?;
        let row_bytes = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let rows = u64::from_le_bytes([h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11]]);
        let (block_log2, rel_width) = (h[12], h[13]);
        RowShape::new(&table, row_bytes).map_err(|e| Error::corrupt(e.message()))?;
        if (block_log2, rel_width) != index_shape(row_bytes) || h[14] != 0 || h[15] != 0 {
            return Err(Error::corrupt(
                "a float-coded group's index shape does not match its row length",
            ));
        }
        // Every row takes at least one index byte or a payload byte, so a
        // row count above the input's length is corrupt, not an allocation.
        let rows = usize::try_from(rows)
            .ok()
            .filter(|&r| r <= bytes.len())
            .ok_or_else(|| Error::corrupt(format!("a float-coded group claims {rows} rows")))?;
        let nb = rows.div_ceil(1 << block_log2) + 1;
        let b = take(&mut at, 8 * nb, "block offsets")?;
        let bases: Vec<u64> = b
            .as_chunks::<8>()
            .0
            .iter()
            .map(|c| u64::from_le_bytes(*c))
            .collect();
        let r = take(&mut at, usize::from(rel_width) * rows, "row offsets")?;
        Self::from_parts(&table, rows, row_bytes, bases, r, bytes[at..].to_vec())
    }
}
