//! Reading the user's tensor files into a [`Document`], and writing them back
//! byte for byte.
//!
//! A [`Document`] splits a file into the tensors worth compressing
//! ([`TensorGroup`]s) and an *envelope*: the exact recipe, as a list of
//! [`Segment`]s, for putting the original bytes back together around them.
//!
//! Q: why an envelope instead of re-serialising the tensors on the way out?
//! A: the promise is "the same file back", not "an equivalent file". Headers
//! carry padding, key order, metadata and alignment that no writer of ours
//! would reproduce exactly; keeping their bytes verbatim makes restoration
//! trivially exact and independent of what the readers understood.
//!
//! # Example
//!
//! ```
//! use ibp::io::{self, DType, ParseOptions, SourceFormat};
//!
//! // Raw bytes need their dtype (and a shape); npy, npz and safetensors
//! // files describe themselves (`SourceFormat::detect` names the format).
//! let raw: Vec<u8> = (0..4096u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
//! let opts = ParseOptions::default().with_raw(DType::F32, Some(vec![32, 128]));
//! let doc = io::parse(&raw, SourceFormat::Raw, &opts)?;
//!
//! let g = &doc.groups[0];
//! assert_eq!((g.dtype.clone(), g.shape.clone()), (DType::F32, vec![32, 128]));
//! assert_eq!(g.row_shape(None)?.row_bytes, 512); // a row per index of the first axis
//! assert_eq!(doc.restore_to_vec()?, raw); // the envelope puts the file back
//! # Ok::<(), ibp::Error>(())
//! ```
//!
//! Every parser here treats its input as hostile: sizes are checked against
//! the input length before anything is allocated or sliced, and failures are
//! typed ([`crate::ErrorKind::Corrupt`], [`crate::ErrorKind::Truncated`],
//! [`crate::ErrorKind::Unsupported`]), never panics.

mod deflate;
mod dtype;
mod input_file;
mod npy;
mod npz;
mod raw;
pub(crate) mod safetensors;

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

pub(crate) use deflate::DEFLATE_ENGINE;
pub use dtype::DType;
pub use input_file::InputFile;
pub use safetensors::write as write_safetensors;

/// One tensor of a [`Document`]: what gets a codebook and is compressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorGroup<'a> {
    /// The tensor's name in its file (npz member without `.npy`, safetensors
    /// key); for single-array files, the name the caller chose.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape in storage order (a Fortran-ordered npy array has its shape
    /// reversed here, so the first axis is always the slowest).
    pub shape: Vec<u64>,
    /// The elements, `product(shape) × dtype.size()` bytes: borrowed from the
    /// input when it is stored plainly, owned when it had to be inflated;
    /// empty for a group of [`Document::deferred`] (use
    /// [`Document::group_data`]).
    pub data: Cow<'a, [u8]>,
}

impl TensorGroup<'_> {
    /// The default split of this tensor into rows; see [`row_shape`].
    pub fn row_shape(&self, row_len: Option<u64>) -> Result<RowShape> {
        row_shape(&self.shape, &self.dtype, row_len)
    }

    /// A copy that owns its data.
    pub fn into_owned(self) -> TensorGroup<'static> {
        TensorGroup {
            name: self.name,
            dtype: self.dtype,
            shape: self.shape,
            data: Cow::Owned(self.data.into_owned()),
        }
    }
}

/// One step of an envelope: the recipe for the original file's bytes.
///
/// `R` is how raw bytes are held: `Cow<[u8]>` in a [`Document`], an index of
/// a stored section in a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment<R> {
    /// These bytes, verbatim.
    Raw(R),
    /// The data bytes of group `i`.
    Group(usize),
    /// The bytes of `inner`, raw-deflated (RFC 1951, no zlib header) by the
    /// zlib's deflate (`docs/FORMAT.md`) at `level` (1–9). Only used when the parser checked
    /// that this reproduces the original compressed bytes exactly.
    Deflate {
        /// zlib compression level, 1–9 (level 0 output depends on how the
        /// input is split across writes, so it is never used).
        level: u32,
        /// What was compressed.
        inner: Vec<Segment<R>>,
    },
}

/// Length and xxh3-64 of a whole file: lets a restore check that it produced
/// exactly the original bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    /// Length in bytes.
    pub len: u64,
    /// xxh3-64 (seed 0) of the bytes.
    pub xxh3: u64,
}

impl Fingerprint {
    /// The fingerprint of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Fingerprint {
            len: bytes.len() as u64,
            xxh3: xxhash_rust::xxh3::xxh3_64(bytes),
        }
    }
}

/// The file formats ibp reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceFormat {
    /// A numpy `.npy` array.
    Npy,
    /// A numpy `.npz` archive (a zip of `.npy` members, stored or deflated).
    Npz,
    /// A `.safetensors` file.
    Safetensors,
    /// Bare bytes whose dtype and shape the caller gives.
    Raw,
}

impl SourceFormat {
    /// The name stored in containers and shown to people.
    pub fn name(self) -> &'static str {
        match self {
            SourceFormat::Npy => "npy",
            SourceFormat::Npz => "npz",
            SourceFormat::Safetensors => "safetensors",
            SourceFormat::Raw => "raw",
        }
    }

    /// The format called `name` (the inverse of [`SourceFormat::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        [
            SourceFormat::Npy,
            SourceFormat::Npz,
            SourceFormat::Safetensors,
            SourceFormat::Raw,
        ]
        .into_iter()
        .find(|f| f.name() == name)
    }

    /// Guess the format from the file's first bytes, then its extension.
    /// `None` means "give a dtype and shape and read it as raw".
    pub fn detect(path: Option<&Path>, bytes: &[u8]) -> Option<Self> {
        if bytes.starts_with(npy::MAGIC) {
            return Some(SourceFormat::Npy);
        }
        if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
            return Some(SourceFormat::Npz);
        }
        if safetensors::looks_like(bytes) {
            return Some(SourceFormat::Safetensors);
        }
        let ext = path?.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "npy" => Some(SourceFormat::Npy),
            "npz" => Some(SourceFormat::Npz),
            "safetensors" => Some(SourceFormat::Safetensors),
            _ => None,
        }
    }
}

impl fmt::Display for SourceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor file taken apart: its tensors plus the recipe to rebuild it.
#[derive(Clone, Debug)]
pub struct Document<'a> {
    /// Which reader produced it.
    pub format: SourceFormat,
    /// The tensors, in the order they appear in the file.
    pub groups: Vec<TensorGroup<'a>>,
    /// The recipe for the original bytes; refers to every group exactly once.
    pub envelope: Vec<Segment<Cow<'a, [u8]>>>,
    /// Length and hash of the original file.
    pub original: Fingerprint,
    /// Things a person may want to know: members kept verbatim and why.
    pub notes: Vec<String>,
    /// Groups whose `data` is left empty by the parser, to be inflated
    /// when used ([`ParseOptions::with_deferred_inflate`]); read a group's
    /// bytes with [`Document::group_data`], which handles both kinds.
    pub deferred: Vec<Deferred<'a>>,
}

/// A group still deflated in the input: an `.npz` member parsed with
/// [`ParseOptions::with_deferred_inflate`]. The parser inflated it once to
/// check it, then let it go, so that a document of many members holds one
/// at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferred<'a> {
    group: usize,
    what: String,
    compressed: &'a [u8],
    inflated_len: u64,
    crc32: u32,
    data_start: u64,
    data_len: u64,
}

impl<'a> Deferred<'a> {
    pub(crate) fn new(
        group: usize,
        what: String,
        compressed: &'a [u8],
        inflated_len: u64,
        crc32: u32,
        data: std::ops::Range<u64>,
    ) -> Self {
        Deferred {
            group,
            what,
            compressed,
            inflated_len,
            crc32,
            data_start: data.start,
            data_len: data.end - data.start,
        }
    }

    /// The group it holds.
    pub fn group(&self) -> usize {
        self.group
    }

    /// Inflate the member again and cut out the group's data, checking
    /// the member's CRC-32 (the input may have changed since the parse).
    fn inflate(&self) -> Result<Vec<u8>> {
        let mut v = deflate::inflate_exact(self.compressed, self.inflated_len, &self.what)?;
        let mut crc = flate2::Crc::new();
        crc.update(&v);
        if crc.sum() != self.crc32 {
            return Err(Error::corrupt(format!("{}: CRC-32 mismatch", self.what)));
        }
        // The parse checked these bounds on the same bytes.
        let start = usize::try_from(self.data_start).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(self.data_len).unwrap_or(usize::MAX));
        if end > v.len() {
            return Err(Error::corrupt(format!(
                "{}: shorter than when it was parsed",
                self.what
            )));
        }
        v.truncate(end);
        v.drain(..start);
        Ok(v)
    }
}

impl<'a> Document<'a> {
    /// The bytes of group `i`: borrowed, or inflated now for a deferred
    /// group (then each call inflates again; drop the result when done).
    /// Errors when `i` is out of range, or as inflating does.
    pub fn group_data(&self, i: usize) -> Result<Cow<'_, [u8]>> {
        let g = self
            .groups
            .get(i)
            .ok_or_else(|| Error::invalid(format!("group {i} does not exist")))?;
        match self.deferred.iter().find(|d| d.group == i) {
            Some(d) => d.inflate().map(Cow::Owned),
            None => Ok(Cow::Borrowed(&g.data)),
        }
    }

    /// Whether group `i`'s data is in [`TensorGroup::data`] (not deferred).
    pub fn is_inflated(&self, i: usize) -> bool {
        !self.deferred.iter().any(|d| d.group == i)
    }

    /// Group `i` with its data ([`Document::group_data`]).
    pub fn group_with_data(&self, i: usize) -> Result<TensorGroup<'_>> {
        let data = self.group_data(i)?;
        let g = &self.groups[i];
        Ok(TensorGroup {
            name: g.name.clone(),
            dtype: g.dtype.clone(),
            shape: g.shape.clone(),
            data,
        })
    }

    /// The length of group `i`'s data, deferred or not (0 if there is no
    /// such group).
    pub fn group_len(&self, i: usize) -> u64 {
        match self.deferred.iter().find(|d| d.group == i) {
            Some(d) => d.data_len,
            None => self.groups.get(i).map_or(0, |g| g.data.len() as u64),
        }
    }

    /// Bytes of all groups' data.
    pub fn group_bytes(&self) -> u64 {
        (0..self.groups.len()).map(|i| self.group_len(i)).sum()
    }
}

impl Document<'_> {
    /// Write the original file, byte for byte, to `out`.
    pub fn restore(&self, out: &mut dyn Write) -> Result<()> {
        restore_segments(
            &self.envelope,
            &mut DocumentPieces(&self.groups, &self.deferred),
            out,
        )
    }

    /// The original file as a vector (tests and small files).
    pub fn restore_to_vec(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(usize::try_from(self.original.len).unwrap_or(0));
        self.restore(&mut out)?;
        Ok(out)
    }

    /// Bytes held as raw envelope segments (outside any deflate), i.e. what
    /// a container stores without compressing.
    pub fn raw_bytes(&self) -> u64 {
        fn walk(segs: &[Segment<Cow<'_, [u8]>>]) -> u64 {
            segs.iter()
                .map(|s| match s {
                    Segment::Raw(b) => b.len() as u64,
                    Segment::Group(_) => 0,
                    Segment::Deflate { inner, .. } => walk(inner),
                })
                .sum()
        }
        walk(&self.envelope)
    }
}

/// Where the pieces of an envelope come from during a restore.
pub(crate) trait PieceSource<R> {
    /// Write the raw piece `raw` to `out`, in one `write_all`.
    fn write_raw(&mut self, raw: &R, out: &mut dyn Write) -> Result<()>;
    /// Write the data of group `group` to `out`, in one `write_all`.
    ///
    /// Q: why "in one write_all"? A: a deflate stream is only guaranteed to
    /// come out identical when the compressor sees the same sequence of
    /// writes; the parser checks reproduction with exactly this walk.
    fn write_group(&mut self, group: usize, out: &mut dyn Write) -> Result<()>;
}

pub(crate) struct DocumentPieces<'d, 'a>(pub &'d [TensorGroup<'a>], pub &'d [Deferred<'a>]);

impl<'a> PieceSource<Cow<'a, [u8]>> for DocumentPieces<'_, 'a> {
    fn write_raw(&mut self, raw: &Cow<'a, [u8]>, out: &mut dyn Write) -> Result<()> {
        out.write_all(raw).map_err(write_error)
    }

    fn write_group(&mut self, group: usize, out: &mut dyn Write) -> Result<()> {
        let g = self.0.get(group).ok_or_else(|| {
            Error::corrupt(format!(
                "envelope names group {group}, which does not exist"
            ))
        })?;
        match self.1.iter().find(|d| d.group == group) {
            Some(d) => out.write_all(&d.inflate()?).map_err(write_error),
            None => out.write_all(&g.data).map_err(write_error),
        }
    }
}

pub(crate) fn write_error(e: std::io::Error) -> Error {
    Error::io("writing the restored file", e)
}

/// Walk an envelope, writing the file it describes to `out`.
pub(crate) fn restore_segments<R>(
    segments: &[Segment<R>],
    src: &mut dyn PieceSource<R>,
    out: &mut dyn Write,
) -> Result<()> {
    for seg in segments {
        match seg {
            Segment::Raw(r) => src.write_raw(r, out)?,
            Segment::Group(i) => src.write_group(*i, out)?,
            Segment::Deflate { level, inner } => {
                let mut enc = deflate::encoder(out, *level)?;
                restore_segments(inner, src, &mut enc)?;
                enc.finish().map_err(write_error)?;
            }
        }
    }
    Ok(())
}

/// How a group is cut into rows for the codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowShape {
    /// Number of rows (`N`).
    pub rows: u64,
    /// Bytes per row (`L`); 0 only for a tensor with no bytes at all.
    pub row_bytes: u64,
}

impl RowShape {
    /// `rows × row_bytes`.
    pub fn total_bytes(&self) -> u64 {
        self.rows * self.row_bytes
    }
}

/// Split a tensor of `shape` and `dtype` into rows.
///
/// By default row `i` is `tensor[i]`: `rows = shape[0]` and a row is
/// `product(shape[1..])` elements, because the first axis is what ML datasets
/// index (nodes, tokens, embedding ids) and what is similar across rows.
/// 0-D and 1-D tensors are one row (they are then normally stored raw).
/// `row_len`, in elements, overrides this; it must divide the element count.
pub fn row_shape(shape: &[u64], dtype: &DType, row_len: Option<u64>) -> Result<RowShape> {
    let elems = element_count(shape)?;
    let total = elems.checked_mul(dtype.size()).ok_or_else(|| {
        Error::invalid(format!(
            "tensor of shape {shape:?} and dtype {dtype} overflows u64 bytes"
        ))
    })?;
    if total == 0 {
        return Ok(RowShape {
            rows: 0,
            row_bytes: 0,
        });
    }
    let row_elems = match row_len {
        Some(0) => {
            return Err(Error::invalid(
                "row length 0; a row needs at least one element",
            ));
        }
        Some(r) if elems % r != 0 => {
            return Err(Error::invalid(format!(
                "row length {r} does not divide the {elems} elements of shape {shape:?}"
            )));
        }
        Some(r) => r,
        None if shape.len() >= 2 => elems / shape[0],
        None => elems,
    };
    Ok(RowShape {
        rows: elems / row_elems,
        row_bytes: row_elems * dtype.size(),
    })
}

/// Dimensions a tensor may have: numpy's limit (`NPY_MAXDIMS`), more than
/// any tensor file ibp reads holds in practice.
///
/// Q: why a limit at all? A: a shape of a million ones has one element, so
/// sizes alone do not bound it; without a limit a small hostile file could
/// make every reader hold and print millions of dimensions.
pub const MAX_DIMS: usize = 64;

/// `product(shape)`, or an error when it overflows u64 or the shape has more
/// than [`MAX_DIMS`] dimensions ([`crate::ErrorKind::Unsupported`]).
pub(crate) fn element_count(shape: &[u64]) -> Result<u64> {
    if shape.len() > MAX_DIMS {
        return Err(Error::unsupported(format!(
            "a shape of {} dimensions; ibp supports at most {MAX_DIMS}, as numpy does",
            shape.len()
        )));
    }
    shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::corrupt(format!("shape {shape:?} has more elements than fit in u64")))
}

/// What to read and how, for [`parse`].
#[derive(Clone, Debug, Default)]
pub struct ParseOptions {
    /// Only these tensors become groups (npz members by key, safetensors
    /// keys); the others stay raw. `None` selects every tensor.
    pub select: Option<Vec<String>>,
    /// The group name for formats with a single unnamed array (npy, raw);
    /// default `"array"`.
    pub name: Option<String>,
    /// Element type of a raw file (required for [`SourceFormat::Raw`]).
    pub raw_dtype: Option<DType>,
    /// Shape of a raw file; default: one dimension covering the file.
    pub raw_shape: Option<Vec<u64>>,
    /// Leave deflated `.npz` members deflated once checked, to be inflated
    /// one at a time by whoever uses them ([`Document::deferred`]); default
    /// off, so that every group's `data` is filled in.
    pub defer_inflate: bool,
}

impl ParseOptions {
    /// Select only these tensors.
    pub fn with_select<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.select = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Name the single array of an npy or raw file.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Defer inflating `.npz` members (see [`ParseOptions::defer_inflate`]):
    /// memory then holds one member at a time instead of all of them.
    pub fn with_deferred_inflate(mut self, defer: bool) -> Self {
        self.defer_inflate = defer;
        self
    }

    /// Dtype and shape of a raw file.
    pub fn with_raw(mut self, dtype: DType, shape: Option<Vec<u64>>) -> Self {
        self.raw_dtype = Some(dtype);
        self.raw_shape = shape;
        self
    }

    pub(crate) fn array_name(&self) -> &str {
        self.name.as_deref().unwrap_or("array")
    }

    pub(crate) fn selection(&self) -> Selection<'_> {
        Selection {
            names: self
                .select
                .as_ref()
                .map(|v| v.iter().map(String::as_str).collect()),
        }
    }
}

/// A tensor selection, checked afterwards for names that matched nothing.
pub(crate) struct Selection<'o> {
    names: Option<BTreeSet<&'o str>>,
}

impl Selection<'_> {
    pub(crate) fn wants(&self, name: &str) -> bool {
        self.names.as_ref().is_none_or(|n| n.contains(name))
    }

    /// Error naming every selected tensor that is not among `found`.
    pub(crate) fn check_found<'n>(&self, found: impl IntoIterator<Item = &'n str>) -> Result<()> {
        let Some(names) = &self.names else {
            return Ok(());
        };
        let found: BTreeSet<&str> = found.into_iter().collect();
        let missing: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !found.contains(n))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut known: Vec<&str> = found.into_iter().collect();
        known.truncate(20);
        Err(Error::invalid(format!(
            "no tensor named {missing:?} in the file; it has {known:?}"
        )))
    }
}

/// Read `bytes` as `format`.
pub fn parse<'a>(
    bytes: &'a [u8],
    format: SourceFormat,
    opts: &ParseOptions,
) -> Result<Document<'a>> {
    let doc = match format {
        SourceFormat::Npy => npy::parse(bytes, opts)?,
        SourceFormat::Npz => return npz::parse(bytes, opts),
        SourceFormat::Safetensors => return safetensors::parse(bytes, opts),
        SourceFormat::Raw => {
            let dtype = opts.raw_dtype.clone().ok_or_else(|| {
                Error::invalid("a raw file needs its dtype (and optionally its shape)")
            })?;
            raw::parse(bytes, dtype, opts.raw_shape.as_deref(), opts.array_name())?
        }
    };
    // One tensor, whose name is ibp's: a selection must name it, or it
    // would be ignored (as it was) and everything compressed.
    opts.selection()
        .check_found(doc.groups.iter().map(|g| g.name.as_str()))
        .map_err(|e| {
            Error::invalid(format!(
                "{}; a{} file holds one tensor, so --tensor is not needed",
                e.message(),
                if format == SourceFormat::Npy {
                    "n .npy"
                } else {
                    " raw"
                }
            ))
        })?;
    Ok(doc)
}

/// Bounds-checked slicing for the parsers: `bytes[start..start+len]`, or a
/// [`crate::ErrorKind::Truncated`] error naming `what`.
pub(crate) fn take<'a>(bytes: &'a [u8], start: u64, len: u64, what: &str) -> Result<&'a [u8]> {
    let end = start
        .checked_add(len)
        .ok_or_else(|| Error::corrupt(format!("{what}: offset overflows")))?;
    if end > bytes.len() as u64 {
        return Err(Error::truncated(format!(
            "{what}: needs bytes {start}..{end} but the input has only {} bytes",
            bytes.len()
        )));
    }
    // Both bounds are at most bytes.len(), so they fit in usize.
    Ok(&bytes[start as usize..end as usize])
}

/// Little-endian integer readers over an already bounds-checked slice.
pub(crate) fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}
