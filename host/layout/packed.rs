//! The packed layout (`docs/FORMAT.md` §3.2): stored forms back to back,
//! with an offsets table.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use super::{
    LayoutOptions, block_rows, check_flags, check_out, check_rows, decode_rows_par, flag,
    flag_bytes, in_tensor, set_flag, size_query,
};
use crate::codebook::{ChunkTables, Codebook};
use crate::dataset::Rows;
use crate::encode::{decode_row, encode_exact};
use crate::error::{Error, Result, try_vec};
use crate::progress::notify;

/// A dataset in the packed layout (`docs/FORMAT.md` §3.2), owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed {
    /// Tensor length `L` in bytes.
    pub row_bytes: usize,
    /// Number of tensors `N`.
    pub rows: usize,
    /// Flag bitmap: bit `i` set when tensor `i` is stored encoded.
    pub flags: Vec<u8>,
    /// `N + 1` offsets into `payload`; tensor `i` is
    /// `payload[offsets[i]..offsets[i + 1]]`.
    pub offsets: Vec<u64>,
    /// Stored forms, back to back.
    pub payload: Vec<u8>,
}

impl Packed {
    /// A borrowed view, for decompression.
    pub fn view(&self) -> PackedRef<'_> {
        PackedRef {
            row_bytes: self.row_bytes,
            rows: self.rows,
            flags: &self.flags,
            offsets: Cow::Borrowed(&self.offsets),
            payload: &self.payload,
        }
    }
}

/// A tensor's stored form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored<'a> {
    /// The raw `L` bytes.
    Raw(&'a [u8]),
    /// The `E < L` bytes of its encoding.
    Encoded(&'a [u8]),
}

/// A borrowed packed dataset, e.g. the sections of a memory-mapped file.
///
/// Construction checks only the lengths of the flag bitmap and the offsets
/// table; [`PackedRef::validate`] checks the rest, and decompression checks
/// each tensor it touches.
#[derive(Clone, Debug)]
pub struct PackedRef<'a> {
    row_bytes: usize,
    rows: usize,
    flags: &'a [u8],
    offsets: Cow<'a, [u64]>,
    payload: &'a [u8],
}

impl<'a> PackedRef<'a> {
    /// A view of `rows` tensors of `row_bytes` bytes from its three parts.
    ///
    /// Errors with [`crate::ErrorKind::Corrupt`] when `flags` is not
    /// `⌈rows / 8⌉` bytes or `offsets` not `rows + 1` entries, and with
    /// [`crate::ErrorKind::InvalidArgument`] when `row_bytes` is 0.
    pub fn new(
        row_bytes: usize,
        rows: usize,
        flags: &'a [u8],
        offsets: Cow<'a, [u64]>,
        payload: &'a [u8],
    ) -> Result<Self> {
        let view = Self {
            row_bytes,
            rows,
            flags,
            offsets,
            payload,
        };
        view.check_shape()?;
        Ok(view)
    }

    /// The length checks of [`PackedRef::new`].
    ///
    /// Q: why repeat them outside `new`?
    /// A: [`Packed::view`] builds a view from public fields without them;
    /// every accessor that indexes calls this (it is O(1)), so no view can
    /// make decoding panic.
    fn check_shape(&self) -> Result<()> {
        if self.row_bytes == 0 {
            return Err(Error::invalid(
                "tensor length is 0 bytes; every tensor needs at least one byte",
            ));
        }
        if self.flags.len() != flag_bytes(self.rows) {
            return Err(Error::corrupt(format!(
                "flag bitmap has {} bytes; {} tensors need {}",
                self.flags.len(),
                self.rows,
                flag_bytes(self.rows)
            )));
        }
        if self.offsets.len() != self.rows.wrapping_add(1) {
            return Err(Error::corrupt(format!(
                "offsets table has {} entries; {} tensors need one more",
                self.offsets.len(),
                self.rows
            )));
        }
        Ok(())
    }

    /// Like [`PackedRef::new`], with the offsets table given as its file
    /// form: `8 (rows + 1)` bytes of little-endian u64.
    ///
    /// Q: why `Cow` offsets?
    /// A: on a little-endian machine an 8-byte-aligned table in a mapped
    /// file is used in place; otherwise (unaligned, big-endian) it is decoded
    /// once into a vector.
    pub fn from_le_offsets(
        row_bytes: usize,
        rows: usize,
        flags: &'a [u8],
        offsets_le: &'a [u8],
        payload: &'a [u8],
    ) -> Result<Self> {
        if !offsets_le.len().is_multiple_of(8) {
            return Err(Error::corrupt(format!(
                "offsets table has {} bytes, not a whole number of u64",
                offsets_le.len()
            )));
        }
        let offsets = match bytemuck::try_cast_slice::<u8, u64>(offsets_le) {
            Ok(o) if cfg!(target_endian = "little") => Cow::Borrowed(o),
            _ => Cow::Owned(
                offsets_le
                    .as_chunks::<8>()
                    .0
                    .iter()
                    .map(|b| u64::from_le_bytes(*b))
                    .collect(),
            ),
        };
        Self::new(row_bytes, rows, flags, offsets, payload)
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

    /// The offsets table (`N + 1` entries).
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// The payload.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Tensor `i`'s stored form, after the checks that concern it alone:
    /// offsets in order and inside the payload, length `L` when raw and less
    /// than `L` when encoded. (Whether an encoding's length is its `E` is
    /// checked by decoding it.)
    pub fn stored(&self, i: usize) -> Result<Stored<'a>> {
        self.check_shape()?;
        if i >= self.rows {
            return Err(Error::invalid(format!(
                "tensor {i} does not exist; there are {}",
                self.rows
            )));
        }
        let (a, b) = (self.offsets[i], self.offsets[i + 1]);
        if a > b {
            return Err(Error::corrupt(format!(
                "offsets of tensor {i} decrease ({a} > {b})"
            )));
        }
        if b > self.payload.len() as u64 {
            return Err(Error::truncated(format!(
                "tensor {i} ends at byte {b} but the payload has {} bytes",
                self.payload.len()
            )));
        }
        let bytes = &self.payload[a as usize..b as usize];
        let l = self.row_bytes;
        if flag(self.flags, i) {
            if bytes.len() >= l {
                return Err(Error::corrupt(format!(
                    "tensor {i} is flagged encoded but stores {} bytes, not less than its {l}",
                    bytes.len()
                )));
            }
            Ok(Stored::Encoded(bytes))
        } else {
            if bytes.len() != l {
                return Err(Error::corrupt(format!(
                    "tensor {i} is flagged raw but stores {} bytes instead of {l}",
                    bytes.len()
                )));
            }
            Ok(Stored::Raw(bytes))
        }
    }

    /// The checks on the whole table: flag padding, `offset_0 = 0` and
    /// `offset_N` = payload length.
    fn check_ends(&self) -> Result<()> {
        self.check_shape()?;
        check_flags(self.flags, self.rows)?;
        if self.offsets[0] != 0 {
            return Err(Error::corrupt(format!(
                "first offset is {}, not 0",
                self.offsets[0]
            )));
        }
        let (last, len) = (self.offsets[self.rows], self.payload.len() as u64);
        if last > len {
            return Err(Error::truncated(format!(
                "offsets end at byte {last} but the payload has {len} bytes"
            )));
        }
        if last < len {
            return Err(Error::corrupt(format!(
                "offsets end at byte {last} but the payload has {len} bytes (trailing bytes)"
            )));
        }
        Ok(())
    }

    /// Check the structure without decoding: flags, offsets (start at 0,
    /// non-decreasing, end at the payload length) and every tensor's stored
    /// length against its flag. Does not check encoded lengths against the
    /// participation bits; [`decompress_packed`] does that too.
    pub fn validate(&self) -> Result<()> {
        self.check_ends()?;
        (0..self.rows).try_for_each(|i| self.stored(i).map(|_| ()))
    }
}

/// Compress `rows` into the packed layout.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when the rows are not
/// the codebook's length.
pub fn compress_packed(cb: &Codebook, rows: Rows<'_>, opts: &LayoutOptions<'_>) -> Result<Packed> {
    let sizes = size_query(cb, rows)?;
    let (l, n) = (rows.row_bytes(), rows.rows());
    let t = cb.try_tables()?;
    let mut offsets = try_vec(n + 1, 0u64, "the offsets table")?;
    let mut end = 0u64;
    for (o, &s) in offsets[1..].iter_mut().zip(&sizes.stored) {
        end += s;
        *o = end;
    }
    let payload_len = usize::try_from(sizes.total_stored)
        .map_err(|_| Error::unsupported("the packed payload is too large for this machine"))?;
    let mut payload = try_vec(payload_len, 0u8, "the packed payload")?;
    let mut flags = try_vec(flag_bytes(n), 0u8, "the flag bitmap")?;
    let br = block_rows(l);
    // Cut the payload into one disjoint slice per block, in order.
    let mut blocks = Vec::with_capacity(n.div_ceil(br));
    let mut rest = payload.as_mut_slice();
    for b in 0..n.div_ceil(br) {
        let (first, last) = (b * br, ((b + 1) * br).min(n));
        let (here, tail) = rest.split_at_mut((offsets[last] - offsets[first]) as usize);
        blocks.push((first, here));
        rest = tail;
    }
    let done = AtomicU64::new(0);
    blocks
        .into_par_iter()
        .zip(flags.par_chunks_mut(br / 8))
        .for_each(|((first, mut dst), flags)| {
            let last = (first + br).min(n);
            for (i, &s) in sizes.stored.iter().enumerate().take(last).skip(first) {
                let s = s as usize;
                let (here, tail) = dst.split_at_mut(s);
                let row = rows.row(i);
                if s < l {
                    encode_exact(t, row, here);
                    set_flag(flags, i - first, true);
                } else {
                    here.copy_from_slice(row);
                }
                dst = tail;
            }
            let bytes = ((last - first) * l) as u64;
            let total = rows.bytes().len() as u64;
            notify(
                opts.progress,
                done.fetch_add(bytes, Ordering::Relaxed) + bytes,
                total,
            );
        });
    Ok(Packed {
        row_bytes: l,
        rows: n,
        flags,
        offsets,
        payload,
    })
}

/// Decompress a packed dataset into `out` (`N · L` bytes).
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] for a codebook of
/// another tensor length or a wrong `out` length, and with
/// [`crate::ErrorKind::Corrupt`] or [`crate::ErrorKind::Truncated`] for any
/// inconsistency in `packed`; `out` is then partly written.
pub fn decompress_packed(cb: &Codebook, packed: &PackedRef<'_>, out: &mut [u8]) -> Result<()> {
    let l = packed.row_bytes;
    check_rows(cb, l)?;
    check_out(out, packed.rows, l)?;
    packed.check_ends()?;
    let t = cb.try_tables()?;
    decode_rows_par(out, l, |i, dst| decode_stored(t, packed, i, dst))
}

/// Decompress tensor `i` of a packed dataset into `out` (`L` bytes), checking
/// only what concerns tensor `i` (so a fetch by index costs `O(L)`).
pub fn decompress_packed_row(
    cb: &Codebook,
    packed: &PackedRef<'_>,
    i: usize,
    out: &mut [u8],
) -> Result<()> {
    check_rows(cb, packed.row_bytes)?;
    check_out(out, 1, packed.row_bytes)?;
    decode_stored(cb.try_tables()?, packed, i, out)
}

fn decode_stored(t: &ChunkTables, packed: &PackedRef<'_>, i: usize, out: &mut [u8]) -> Result<()> {
    match packed.stored(i)? {
        Stored::Raw(bytes) => out.copy_from_slice(bytes),
        Stored::Encoded(bytes) => {
            let e = decode_row(t, bytes, out).map_err(|err| in_tensor(err, i))?;
            if e != bytes.len() {
                return Err(Error::corrupt(format!(
                    "tensor {i} stores {} bytes but its participation bits say {e}",
                    bytes.len()
                )));
            }
        }
    }
    Ok(())
}
