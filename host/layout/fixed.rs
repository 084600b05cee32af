//! The fixed-stride layout (`docs/FORMAT.md` §3.1): each stored form at the
//! start of its tensor's `L`-byte slot.

use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use super::{
    LayoutOptions, block_rows, check_flags, check_out, check_rows, decode_rows_par, flag,
    flag_bytes, in_tensor, set_flag,
};
use crate::codebook::{ChunkTables, Codebook};
use crate::dataset::Rows;
use crate::encode::{decode_row, encode_exact, encoded_bits_unchecked, stream_len};
use crate::error::{Error, Result, try_vec};
use crate::progress::notify;

/// A dataset in the fixed-stride layout (`docs/FORMAT.md` §3.1), owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedStride {
    /// Tensor length `L` in bytes.
    pub row_bytes: usize,
    /// Number of tensors `N`.
    pub rows: usize,
    /// Flag bitmap: bit `i` set when tensor `i` is stored encoded.
    pub flags: Vec<u8>,
    /// `N · L` bytes; tensor `i`'s stored form at the start of slot
    /// `[iL, (i+1)L)`, zeros after it.
    pub slots: Vec<u8>,
}

impl FixedStride {
    /// A borrowed view, for decompression.
    pub fn view(&self) -> FixedStrideRef<'_> {
        FixedStrideRef {
            row_bytes: self.row_bytes,
            rows: self.rows,
            flags: &self.flags,
            slots: &self.slots,
        }
    }
}

/// A borrowed fixed-stride dataset.
#[derive(Clone, Copy, Debug)]
pub struct FixedStrideRef<'a> {
    row_bytes: usize,
    rows: usize,
    flags: &'a [u8],
    slots: &'a [u8],
}

impl<'a> FixedStrideRef<'a> {
    /// A view of `rows` tensors of `row_bytes` bytes.
    ///
    /// Errors with [`crate::ErrorKind::Corrupt`] when `flags` is not
    /// `⌈rows / 8⌉` bytes, with [`crate::ErrorKind::Truncated`] when `slots`
    /// is not `rows · row_bytes` bytes, and with
    /// [`crate::ErrorKind::InvalidArgument`] when `row_bytes` is 0.
    pub fn new(row_bytes: usize, rows: usize, flags: &'a [u8], slots: &'a [u8]) -> Result<Self> {
        let view = Self {
            row_bytes,
            rows,
            flags,
            slots,
        };
        view.check_shape()?;
        Ok(view)
    }

    /// The length checks of [`FixedStrideRef::new`], repeated (O(1)) wherever
    /// a view built by [`FixedStride::view`] is indexed.
    fn check_shape(&self) -> Result<()> {
        let (l, n) = (self.row_bytes, self.rows);
        if l == 0 {
            return Err(Error::invalid(
                "tensor length is 0 bytes; every tensor needs at least one byte",
            ));
        }
        if self.flags.len() != flag_bytes(n) {
            return Err(Error::corrupt(format!(
                "flag bitmap has {} bytes; {n} tensors need {}",
                self.flags.len(),
                flag_bytes(n)
            )));
        }
        if n.checked_mul(l) != Some(self.slots.len()) {
            return Err(Error::truncated(format!(
                "slots have {} bytes; {n} tensors of {l} bytes need rows × length",
                self.slots.len()
            )));
        }
        Ok(())
    }

    /// Tensor length `L`.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Number of tensors `N`.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The flag bitmap.
    pub fn flags(&self) -> &'a [u8] {
        self.flags
    }

    /// All slots.
    pub fn slots(&self) -> &'a [u8] {
        self.slots
    }

    /// Tensor `i`'s whole slot (`L` bytes) and whether it is encoded.
    pub fn slot(&self, i: usize) -> Result<(bool, &'a [u8])> {
        self.check_shape()?;
        if i >= self.rows {
            return Err(Error::invalid(format!(
                "tensor {i} does not exist; there are {}",
                self.rows
            )));
        }
        Ok((
            flag(self.flags, i),
            &self.slots[i * self.row_bytes..(i + 1) * self.row_bytes],
        ))
    }

    /// Check everything decoding relies on plus the zeros after each
    /// encoding: flag padding and, for each encoded tensor, its length from
    /// the participation bits (`E < L`, zero padding) and a zero slot tail.
    pub fn validate(&self, cb: &Codebook) -> Result<()> {
        check_rows(cb, self.row_bytes)?;
        self.check_shape()?;
        check_flags(self.flags, self.rows)?;
        (0..self.rows).into_par_iter().try_for_each(|i| {
            let (encoded, slot) = self.slot(i)?;
            if encoded {
                let e = stream_len(cb, slot).map_err(|err| in_tensor(err, i))?;
                if slot[e..].iter().any(|&b| b != 0) {
                    return Err(Error::corrupt(format!(
                        "tensor {i}: slot bytes after its encoding are not zero"
                    )));
                }
            }
            Ok(())
        })
    }
}

/// Compress `rows` into the fixed-stride layout.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when the rows are not
/// the codebook's length.
pub fn compress_fixed(
    cb: &Codebook,
    rows: Rows<'_>,
    opts: &LayoutOptions<'_>,
) -> Result<FixedStride> {
    check_rows(cb, rows.row_bytes())?;
    let (l, n) = (rows.row_bytes(), rows.rows());
    let t = cb.try_tables()?;
    let mut slots = try_vec(rows.bytes().len(), 0u8, "the fixed-stride slots")?;
    let mut flags = try_vec(flag_bytes(n), 0u8, "the flag bitmap")?;
    let br = block_rows(l);
    let done = AtomicU64::new(0);
    // Q: why no separate size pass here?
    // A: each tensor's slot is known in advance; the size is needed only to
    // decide between encoding and copying, right before doing it.
    slots
        .par_chunks_mut(br * l)
        .zip(rows.bytes().par_chunks(br * l))
        .zip(flags.par_chunks_mut(br / 8))
        .for_each(|((dst, src), flags)| {
            for (k, (slot, row)) in dst.chunks_exact_mut(l).zip(src.chunks_exact(l)).enumerate() {
                let e = encoded_bits_unchecked(t, row).div_ceil(8) as usize;
                if e < l {
                    encode_exact(t, row, &mut slot[..e]);
                    set_flag(flags, k, true);
                } else {
                    slot.copy_from_slice(row);
                }
            }
            let bytes = src.len() as u64;
            let total = rows.bytes().len() as u64;
            notify(
                opts.progress,
                done.fetch_add(bytes, Ordering::Relaxed) + bytes,
                total,
            );
        });
    Ok(FixedStride {
        row_bytes: l,
        rows: n,
        flags,
        slots,
    })
}

/// Decompress a fixed-stride dataset into `out` (`N · L` bytes). Reads only
/// the first `E` bytes of an encoded tensor's slot (use
/// [`FixedStrideRef::validate`] to check the zeros after them).
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] for a codebook of
/// another tensor length or a wrong `out` length, and with
/// [`crate::ErrorKind::Corrupt`] for damaged flags or encodings.
pub fn decompress_fixed(cb: &Codebook, fixed: &FixedStrideRef<'_>, out: &mut [u8]) -> Result<()> {
    let l = fixed.row_bytes;
    check_rows(cb, l)?;
    check_out(out, fixed.rows, l)?;
    fixed.check_shape()?;
    check_flags(fixed.flags, fixed.rows)?;
    let t = cb.try_tables()?;
    decode_rows_par(out, l, |i, dst| decode_slot(t, fixed, i, dst))
}

/// Decompress tensor `i` of a fixed-stride dataset into `out` (`L` bytes).
pub fn decompress_fixed_row(
    cb: &Codebook,
    fixed: &FixedStrideRef<'_>,
    i: usize,
    out: &mut [u8],
) -> Result<()> {
    check_rows(cb, fixed.row_bytes)?;
    check_out(out, 1, fixed.row_bytes)?;
    decode_slot(cb.try_tables()?, fixed, i, out)
}

fn decode_slot(
    t: &ChunkTables,
    fixed: &FixedStrideRef<'_>,
    i: usize,
    out: &mut [u8],
) -> Result<()> {
    match fixed.slot(i)? {
        (false, slot) => out.copy_from_slice(slot),
        (true, slot) => {
            decode_row(t, slot, out).map_err(|err| in_tensor(err, i))?;
        }
    }
    Ok(())
}
