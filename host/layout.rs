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

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::codebook::{ChunkTables, Codebook};
use crate::dataset::Rows;
use crate::encode::{decode_row, encode_exact, encoded_bits_unchecked, stream_len};
use crate::error::{Error, Result, try_vec};

/// A progress hook: called with the number of tensors finished so far, from
/// any worker thread, once per block of tensors (not once per tensor).
pub type Progress<'a> = &'a (dyn Fn(u64) + Sync);

/// No progress reporting.
fn no_progress(_: u64) {}

/// Q: why blocks of about 64 KiB of tensors, a multiple of 8 tensors each?
/// A: a block is the unit of parallel work and of progress reports: large
/// enough to amortise scheduling, small enough to balance across cores; and
/// with 8 tensors per flag byte, blocks own disjoint flag bytes, so they
/// write flags without synchronising.
const BLOCK_BYTES: usize = 64 << 10;

fn block_rows(row_bytes: usize) -> usize {
    (BLOCK_BYTES / row_bytes.max(1)).max(1).next_multiple_of(8)
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
    let t = cb.tables();
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

// ---------------------------------------------------------------------------
// Packed layout

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
pub fn compress_packed(cb: &Codebook, rows: Rows<'_>) -> Result<Packed> {
    compress_packed_with_progress(cb, rows, &no_progress)
}

/// [`compress_packed`], reporting tensors encoded to `progress`.
pub fn compress_packed_with_progress(
    cb: &Codebook,
    rows: Rows<'_>,
    progress: Progress<'_>,
) -> Result<Packed> {
    let sizes = size_query(cb, rows)?;
    let (l, n) = (rows.row_bytes(), rows.rows());
    let t = cb.tables();
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
            progress(
                done.fetch_add((last - first) as u64, Ordering::Relaxed) + (last - first) as u64,
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
    decompress_packed_with_progress(cb, packed, out, &no_progress)
}

/// [`decompress_packed`], reporting tensors decoded to `progress`.
pub fn decompress_packed_with_progress(
    cb: &Codebook,
    packed: &PackedRef<'_>,
    out: &mut [u8],
    progress: Progress<'_>,
) -> Result<()> {
    let l = packed.row_bytes;
    check_rows(cb, l)?;
    check_out(out, packed.rows, l)?;
    packed.check_ends()?;
    let t = cb.tables();
    let br = block_rows(l);
    let done = AtomicU64::new(0);
    out.par_chunks_mut(br * l)
        .enumerate()
        .try_for_each(|(b, block)| {
            for (k, dst) in block.chunks_exact_mut(l).enumerate() {
                decode_stored(t, packed, b * br + k, dst)?;
            }
            let rows = (block.len() / l) as u64;
            progress(done.fetch_add(rows, Ordering::Relaxed) + rows);
            Ok(())
        })
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
    decode_stored(cb.tables(), packed, i, out)
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

/// The same error, naming the tensor.
fn in_tensor(err: Error, i: usize) -> Error {
    Error::new(err.kind(), format!("tensor {i}: {}", err.message()))
}

// ---------------------------------------------------------------------------
// Fixed-stride layout

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
pub fn compress_fixed(cb: &Codebook, rows: Rows<'_>) -> Result<FixedStride> {
    compress_fixed_with_progress(cb, rows, &no_progress)
}

/// [`compress_fixed`], reporting tensors encoded to `progress`.
pub fn compress_fixed_with_progress(
    cb: &Codebook,
    rows: Rows<'_>,
    progress: Progress<'_>,
) -> Result<FixedStride> {
    check_rows(cb, rows.row_bytes())?;
    let (l, n) = (rows.row_bytes(), rows.rows());
    let t = cb.tables();
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
            let rows = (src.len() / l) as u64;
            progress(done.fetch_add(rows, Ordering::Relaxed) + rows);
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
    decompress_fixed_with_progress(cb, fixed, out, &no_progress)
}

/// [`decompress_fixed`], reporting tensors decoded to `progress`.
pub fn decompress_fixed_with_progress(
    cb: &Codebook,
    fixed: &FixedStrideRef<'_>,
    out: &mut [u8],
    progress: Progress<'_>,
) -> Result<()> {
    let l = fixed.row_bytes;
    check_rows(cb, l)?;
    check_out(out, fixed.rows, l)?;
    fixed.check_shape()?;
    check_flags(fixed.flags, fixed.rows)?;
    let t = cb.tables();
    let br = block_rows(l);
    let done = AtomicU64::new(0);
    out.par_chunks_mut(br * l)
        .enumerate()
        .try_for_each(|(b, block)| {
            for (k, dst) in block.chunks_exact_mut(l).enumerate() {
                decode_slot(t, fixed, b * br + k, dst)?;
            }
            let rows = (block.len() / l) as u64;
            progress(done.fetch_add(rows, Ordering::Relaxed) + rows);
            Ok(())
        })
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
    decode_slot(cb.tables(), fixed, i, out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use crate::codebook::ChunkSize;

    #[test]
    #[should_panic]
    fn flag_past_the_bitmap_panics_as_documented() {
        let _ = flag(&[0xff], 8);
    }

    #[test]
    #[should_panic]
    fn set_flag_past_the_bitmap_panics_as_documented() {
        set_flag(&mut [0], 8, true);
    }

    /// L = 6, C = 2, all bits invariant at 0: a zero row encodes to one byte
    /// (3 participation bits), a row with one non-zero chunk to 3 bytes, a
    /// row of 0xff stays raw.
    fn dataset() -> (Codebook, Vec<u8>) {
        let cb = Codebook::new(ChunkSize::Two, vec![0xff; 6], vec![0; 6]).unwrap();
        let mut data = vec![0u8; 6 * 11];
        data[6..12].copy_from_slice(&[0, 0, 0x34, 0x12, 0, 0]);
        data[12..18].fill(0xff);
        data[60] = 1;
        (cb, data)
    }

    #[test]
    fn flags_round_trip_and_padding_is_checked() {
        let mut f = vec![0u8; flag_bytes(11)];
        for i in [0, 3, 8, 10] {
            set_flag(&mut f, i, true);
        }
        set_flag(&mut f, 3, false);
        assert_eq!(f, [0b0000_0001, 0b0000_0101]);
        assert!(flag(&f, 10) && !flag(&f, 3));
        assert!(check_flags(&f, 11).is_ok());
        assert_eq!(check_flags(&f, 10).unwrap_err().kind(), ErrorKind::Corrupt);
        assert_eq!(check_flags(&f, 17).unwrap_err().kind(), ErrorKind::Corrupt);
        assert_eq!(flag_bytes(0), 0);
    }

    #[test]
    fn packed_and_fixed_round_trip_with_progress() {
        let (cb, data) = dataset();
        let rows = Rows::new(&data, 6).unwrap();
        let sizes = size_query(&cb, rows).unwrap();
        assert_eq!(sizes.stored[..3], [1, 3, 6]);
        assert_eq!((sizes.encoded_rows, sizes.raw_rows), (10, 1));
        let seen = AtomicU64::new(0);
        let p = compress_packed_with_progress(&cb, rows, &|d| {
            seen.fetch_max(d, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(seen.load(Ordering::Relaxed), 11);
        assert_eq!(p.payload.len() as u64, sizes.total_stored);
        assert_eq!(p.offsets[..4], [0, 1, 4, 10]);
        assert_eq!(p.flags, [0b1111_1011, 0b0000_0111]);
        p.view().validate().unwrap();
        let mut out = vec![0u8; data.len()];
        decompress_packed(&cb, &p.view(), &mut out).unwrap();
        assert_eq!(out, data);
        let mut one = [0u8; 6];
        decompress_packed_row(&cb, &p.view(), 1, &mut one).unwrap();
        assert_eq!(one, data[6..12]);

        let f = compress_fixed(&cb, rows).unwrap();
        assert_eq!(f.flags, p.flags);
        // Participation 0b101, then 0x1234 from bit 3: 0x91a5.
        assert_eq!(f.slots[6..12], [0xa5, 0x91, 0, 0, 0, 0]);
        f.view().validate(&cb).unwrap();
        out.fill(0);
        decompress_fixed(&cb, &f.view(), &mut out).unwrap();
        assert_eq!(out, data);
        decompress_fixed_row(&cb, &f.view(), 2, &mut one).unwrap();
        assert_eq!(one, [0xff; 6]);
    }

    #[test]
    fn le_offsets_are_read_in_place_or_copied() {
        let (cb, data) = dataset();
        let p = compress_packed(&cb, Rows::new(&data, 6).unwrap()).unwrap();
        let mut le: Vec<u8> = vec![0];
        le.extend(p.offsets.iter().flat_map(|o| o.to_le_bytes()));
        // Unaligned (offset by one byte): decoded into a vector.
        let view = PackedRef::from_le_offsets(6, 11, &p.flags, &le[1..], &p.payload).unwrap();
        assert_eq!(view.offsets(), p.offsets);
        let mut out = vec![0u8; data.len()];
        decompress_packed(&cb, &view, &mut out).unwrap();
        assert_eq!(out, data);
        assert!(
            PackedRef::from_le_offsets(6, 11, &p.flags, &le[1..le.len() - 1], &p.payload).is_err()
        );
        assert!(PackedRef::from_le_offsets(6, 10, &p.flags, &le[1..], &p.payload).is_err());
    }

    #[test]
    fn damaged_packed_datasets_are_typed_errors() {
        let (cb, data) = dataset();
        let p = compress_packed(&cb, Rows::new(&data, 6).unwrap()).unwrap();
        let mut out = vec![0u8; data.len()];
        let check = |p: &Packed, kind: ErrorKind| {
            let mut out = vec![0u8; data.len()];
            assert_eq!(p.view().validate().unwrap_err().kind(), kind);
            assert_eq!(
                decompress_packed(&cb, &p.view(), &mut out)
                    .unwrap_err()
                    .kind(),
                kind
            );
        };
        let mut bad = p.clone();
        bad.offsets[0] = 1;
        check(&bad, ErrorKind::Corrupt);
        let mut bad = p.clone();
        bad.offsets.swap(1, 2);
        check(&bad, ErrorKind::Corrupt);
        let mut bad = p.clone();
        bad.payload.pop();
        check(&bad, ErrorKind::Truncated);
        let mut bad = p.clone();
        bad.payload.push(0);
        check(&bad, ErrorKind::Corrupt);
        let mut bad = p.clone();
        bad.flags[0] ^= 0b100; // raw tensor 2 flagged encoded: 6 bytes, not < L
        check(&bad, ErrorKind::Corrupt);
        let mut bad = p.clone();
        bad.flags[0] ^= 0b1; // encoded tensor 0 flagged raw: 1 byte, not L
        check(&bad, ErrorKind::Corrupt);
        let mut bad = p.clone();
        bad.flags[1] |= 0x80; // padding
        check(&bad, ErrorKind::Corrupt);
        // Tensor 1 stored as 3 bytes but its participation bits say 1 byte:
        // only decoding sees this.
        let mut bad = p.clone();
        bad.payload[1] = 0b111;
        assert!(bad.view().validate().is_ok());
        assert_eq!(
            decompress_packed(&cb, &bad.view(), &mut out)
                .unwrap_err()
                .kind(),
            ErrorKind::Corrupt
        );
        // Wrong arguments.
        let other = Codebook::new(ChunkSize::Two, vec![0xff; 4], vec![0; 4]).unwrap();
        assert_eq!(
            decompress_packed(&other, &p.view(), &mut out)
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            decompress_packed(&cb, &p.view(), &mut out[1..])
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            decompress_packed_row(&cb, &p.view(), 11, &mut [0; 6])
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
        assert!(compress_packed(&other, Rows::new(&data, 6).unwrap()).is_err());
    }

    #[test]
    fn damaged_fixed_datasets_are_typed_errors() {
        let (cb, data) = dataset();
        let f = compress_fixed(&cb, Rows::new(&data, 6).unwrap()).unwrap();
        let mut out = vec![0u8; data.len()];
        let mut bad = f.clone();
        bad.slots[6] = 0b111; // every chunk claims to match: E = 1, rest not zero
        assert_eq!(
            bad.view().validate(&cb).unwrap_err().kind(),
            ErrorKind::Corrupt
        );
        let mut bad = f.clone();
        bad.flags[0] |= 0b100; // raw 0xff row flagged encoded: padding bits set
        assert_eq!(
            decompress_fixed(&cb, &bad.view(), &mut out)
                .unwrap_err()
                .kind(),
            ErrorKind::Corrupt
        );
        assert_eq!(
            FixedStrideRef::new(6, 11, &f.flags, &f.slots[1..])
                .unwrap_err()
                .kind(),
            ErrorKind::Truncated
        );
        assert!(FixedStrideRef::new(0, 11, &f.flags, &f.slots).is_err());
    }

    #[test]
    fn views_of_malformed_owned_layouts_are_errors_not_panics() {
        let (cb, data) = dataset();
        let rows = Rows::new(&data, 6).unwrap();
        let mut out = vec![0u8; data.len()];
        let mut p = compress_packed(&cb, rows).unwrap();
        p.offsets.pop();
        assert_eq!(
            decompress_packed(&cb, &p.view(), &mut out)
                .unwrap_err()
                .kind(),
            ErrorKind::Corrupt
        );
        assert!(decompress_packed_row(&cb, &p.view(), 10, &mut out[..6]).is_err());
        assert!(p.view().stored(10).is_err());
        let mut p = compress_packed(&cb, rows).unwrap();
        p.flags.pop();
        assert!(decompress_packed_row(&cb, &p.view(), 10, &mut out[..6]).is_err());
        let mut f = compress_fixed(&cb, rows).unwrap();
        f.slots.truncate(20);
        assert_eq!(
            decompress_fixed(&cb, &f.view(), &mut out)
                .unwrap_err()
                .kind(),
            ErrorKind::Truncated
        );
        assert!(decompress_fixed_row(&cb, &f.view(), 10, &mut out[..6]).is_err());
        assert!(f.view().validate(&cb).is_err());
    }

    #[test]
    fn empty_datasets_round_trip() {
        let (cb, _) = dataset();
        let rows = Rows::new(&[], 6).unwrap();
        let p = compress_packed(&cb, rows).unwrap();
        assert_eq!(
            (p.flags.len(), p.offsets.as_slice(), p.payload.len()),
            (0, &[0u64][..], 0)
        );
        p.view().validate().unwrap();
        decompress_packed(&cb, &p.view(), &mut []).unwrap();
        let f = compress_fixed(&cb, rows).unwrap();
        decompress_fixed(&cb, &f.view(), &mut []).unwrap();
    }
}
