//! Layouts of a whole dataset (`docs/FORMAT.md` §3): the flag bitmap, the
//! fixed-stride layout (each tensor keeps its slot) and the packed layout
//! (stored forms back to back, with an offsets table).
//!
//! Compression runs in two parallel passes: a size pass (the match test only)
//! gives every tensor's stored length, a prefix sum turns those into offsets,
//! and an encode pass writes each block of tensors into its own disjoint
//! slice of the output. Decompression checks every length it relies on and
//! reports damage as [`ErrorKind::Corrupt`] or [`ErrorKind::Truncated`]; it
//! never panics or reads out of bounds on bad input.
//!
//! [`ErrorKind::Corrupt`]: crate::ErrorKind::Corrupt
//! [`ErrorKind::Truncated`]: crate::ErrorKind::Truncated
#![forbid(unsafe_code)]

use rayon::prelude::*;

use crate::codebook::Codebook;
use crate::dataset::Rows;
use crate::encode::encoded_bits_unchecked;
use crate::error::{Error, Result, try_vec};
use crate::progress::Progress;

/// The two layouts of a coded dataset (`docs/FORMAT.md` §3), one name for
/// the library, the container, the GPU compressor and decoder, the
/// benchmarks and the command line (`--layout packed|fixed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Stored forms back to back, with an offsets table (§3.2): the
    /// smallest, and the one random access needs offsets for.
    Packed,
    /// Each stored form at the start of its tensor's `L`-byte slot, zeros
    /// after it (§3.1): no offsets, tensor `i` at byte `i·L`.
    FixedStride,
}

impl Layout {
    /// The layout's name in the container's manifest and on the command
    /// line: `packed` or `fixed`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Packed => "packed",
            Layout::FixedStride => "fixed",
        }
    }
}

/// Options of [`compress_packed`] and [`compress_fixed`].
#[derive(Clone, Copy, Debug, Default)]
pub struct LayoutOptions<'a> {
    /// Called with the input bytes encoded so far and the input's length,
    /// once per block of tensors (default none).
    pub progress: Option<Progress<'a>>,
}

impl<'a> LayoutOptions<'a> {
    /// Report progress to `hook` (see [`Progress`]).
    pub fn with_progress(mut self, hook: &'a (dyn Fn(u64, u64) + Sync)) -> Self {
        self.progress = Some(Progress::new(hook));
        self
    }
}

/// Q: why blocks of about 64 KiB of tensors, a multiple of 8 tensors each?
/// A: a block is the unit of parallel work and of progress reports: large
/// enough to amortise scheduling, small enough to balance across cores; and
/// with 8 tensors per flag byte, blocks own disjoint flag bytes, so they
/// write flags without synchronising.
const BLOCK_BYTES: usize = 64 << 10;

fn block_rows(row_bytes: usize) -> usize {
    (BLOCK_BYTES / row_bytes.max(1)).max(1).next_multiple_of(8)
}

/// Decode every row of `out` (rows of `l` bytes) in parallel, by blocks of
/// [`block_rows`]: `row(i, dst)` writes row `i` into `dst`.
fn decode_rows_par(
    out: &mut [u8],
    l: usize,
    row: impl Fn(usize, &mut [u8]) -> Result<()> + Sync,
) -> Result<()> {
    use rayon::prelude::*;
    let br = block_rows(l);
    out.par_chunks_mut(br * l)
        .enumerate()
        .try_for_each(|(b, block)| {
            for (k, dst) in block.chunks_exact_mut(l).enumerate() {
                row(b * br + k, dst)?;
            }
            Ok(())
        })
}

// ---------------------------------------------------------------------------
// Flag bitmap

/// Bytes of the flag bitmap of `rows` tensors: `⌈rows / 8⌉`.
pub(crate) fn flag_bytes(rows: usize) -> usize {
    rows.div_ceil(8)
}

/// Is tensor `i` stored encoded?
///
/// # Panics
///
/// If `flags` does not hold bit `i` (`i / 8 >= flags.len()`).
pub(crate) fn flag(flags: &[u8], i: usize) -> bool {
    flags[i / 8] >> (i % 8) & 1 == 1
}

/// Set tensor `i`'s flag to `encoded`.
///
/// # Panics
///
/// If `flags` does not hold bit `i` (`i / 8 >= flags.len()`).
pub(crate) fn set_flag(flags: &mut [u8], i: usize, encoded: bool) {
    let bit = 1u8 << (i % 8);
    if encoded {
        flags[i / 8] |= bit;
    } else {
        flags[i / 8] &= !bit;
    }
}

/// Check a flag bitmap of `rows` tensors: its length is `⌈rows / 8⌉` and the
/// bits past `rows` are zero.
pub(crate) fn check_flags(flags: &[u8], rows: usize) -> Result<()> {
    if flags.len() != flag_bytes(rows) {
        return Err(Error::corrupt(format!(
            "flag bitmap has {} bytes; {rows} tensors need {}",
            flags.len(),
            flag_bytes(rows)
        )));
    }
    if !rows.is_multiple_of(8) && flags[rows / 8] >> (rows % 8) != 0 {
        return Err(Error::corrupt("flag bits past the last tensor are set"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Sizes

/// Stored sizes of a dataset under a codebook, computed without encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeReport {
    /// Stored length of each tensor: `E` when encoded, `L` when raw.
    pub stored: Vec<u64>,
    /// Sum of `stored`: the packed layout's payload length.
    pub total_stored: u64,
    /// Tensors stored encoded (`E < L`).
    pub encoded_rows: u64,
    /// Tensors stored raw.
    pub raw_rows: u64,
}

/// Stored length of every tensor of `rows` under `cb` (the size pass of
/// compression, on its own).
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when the rows are not
/// the codebook's length.
pub fn size_query(cb: &Codebook, rows: Rows<'_>) -> Result<SizeReport> {
    check_rows(cb, rows.row_bytes())?;
    let t = cb.try_tables()?;
    let l = rows.row_bytes() as u64;
    let mut stored = try_vec(rows.rows(), 0u64, "the stored size of every tensor")?;
    stored
        .par_iter_mut()
        .zip(rows.bytes().par_chunks(rows.row_bytes()))
        .with_min_len(block_rows(rows.row_bytes()))
        .for_each(|(s, row)| *s = encoded_bits_unchecked(t, row).div_ceil(8).min(l));
    let total_stored = stored.iter().sum();
    let encoded_rows = stored.iter().filter(|&&s| s < l).count() as u64;
    Ok(SizeReport {
        raw_rows: stored.len() as u64 - encoded_rows,
        stored,
        total_stored,
        encoded_rows,
    })
}

fn check_rows(cb: &Codebook, row_bytes: usize) -> Result<()> {
    if row_bytes != cb.row_bytes() {
        return Err(Error::invalid(format!(
            "tensors have {row_bytes} bytes but the codebook is for {}-byte tensors",
            cb.row_bytes()
        )));
    }
    Ok(())
}

fn check_out(out: &[u8], rows: usize, row_bytes: usize) -> Result<()> {
    match rows.checked_mul(row_bytes) {
        Some(n) if n == out.len() => Ok(()),
        _ => Err(Error::invalid(format!(
            "output buffer has {} bytes; {rows} tensors of {row_bytes} bytes need rows × length",
            out.len()
        ))),
    }
}

/// The same error, naming the tensor.
fn in_tensor(err: Error, i: usize) -> Error {
    Error::new(err.kind(), format!("tensor {i}: {}", err.message()))
}

mod fixed;
mod packed;

pub use fixed::{
    FixedStride, FixedStrideRef, compress_fixed, decompress_fixed, decompress_fixed_row,
};
pub use packed::{
    Packed, PackedRef, Stored, compress_packed, decompress_packed, decompress_packed_row,
};

#[cfg(test)]
mod tests;
