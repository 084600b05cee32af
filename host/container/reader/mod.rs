//! Reading a container: every structural fact is checked once, at open, so
//! that the accessors can hand out in-place views of the (memory-mapped)
//! bytes without re-checking.
//!
//! What open proves, before anything is allocated from a stored size:
//! - the header and trailer are intact and agree on the version and length;
//! - the directory lies between the sections and the trailer, and every
//!   section starts exactly where the canonical layout puts it, with zero
//!   padding in between, so every byte of the file belongs to exactly one
//!   checksummed structure or to checked padding;
//! - every section's xxh3-64 matches;
//! - the manifest parses, every group has exactly the sections its layout
//!   needs with exactly the lengths its shape implies, every codebook is
//!   valid, every packed table is consistent (`PackedRef::validate`),
//!   every fixed-stride group passes `FixedStrideRef::validate`, and every
//!   float-coded group's table and row index are valid
//!   (`FloatCoded::from_bytes`, `docs/FORMAT.md` §6.9);
//! - the envelope uses every group and piece exactly once.

use std::borrow::Cow;
use std::io::Write;
use std::ops::Range;
use std::path::Path;

use rayon::prelude::*;
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

use super::clustered::{self, ClusterTable};
use super::format::{
    self, DirEntry, ENTRY_LEN, FLAG_REQUIRED, HEADER_LEN, MAGIC, NO_OWNER, SectionKind,
    TRAILER_LEN, Trailer,
};
use super::manifest::{GroupInfo, GroupLayout, Manifest, SourceInfo};
use super::writer::{check_envelope, float_type_fits};
use crate::cluster::ClusterIds;
use crate::codebook::{Codebook, Threshold};
use crate::error::{Error, ErrorKind, Result};
use crate::float_code::FloatCoded;
use crate::io::{DType, Document, PieceSource, Segment, TensorGroup, restore_segments};
use crate::layout::{
    FixedStrideRef, Layout, PackedRef, decompress_fixed, decompress_fixed_row, decompress_packed,
    decompress_packed_row, flag_bytes,
};
use crate::progress::{Progress, notify};

/// The default [`RestoreOptions::block_bytes`]: 64 MiB.
pub const DEFAULT_RESTORE_BLOCK_BYTES: u64 = 64 << 20;

/// Options of [`IbpFile::restore`].
#[derive(Clone, Copy, Debug)]
pub struct RestoreOptions<'a> {
    /// Groups larger than this are decompressed in blocks of about this
    /// many bytes (at least one row), so a restore holds at most this much
    /// decompressed data at once (default
    /// [`DEFAULT_RESTORE_BLOCK_BYTES`]). The restored bytes do not depend
    /// on it.
    pub block_bytes: u64,
    /// Called with the bytes written so far and the original's length
    /// (default none).
    pub progress: Option<Progress<'a>>,
}

impl Default for RestoreOptions<'_> {
    fn default() -> Self {
        RestoreOptions {
            block_bytes: DEFAULT_RESTORE_BLOCK_BYTES,
            progress: None,
        }
    }
}

impl<'a> RestoreOptions<'a> {
    /// Decompress large groups in blocks of about `bytes`.
    pub fn with_block_bytes(mut self, bytes: u64) -> Self {
        self.block_bytes = bytes;
        self
    }

    /// Report progress to `hook` (see [`Progress`]).
    pub fn with_progress(mut self, hook: &'a (dyn Fn(u64, u64) + Sync)) -> Self {
        self.progress = Some(Progress::new(hook));
        self
    }
}

enum Storage<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
    File(crate::io::InputFile),
}

impl Storage<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Borrowed(b) => b,
            Storage::Owned(v) => v,
            Storage::File(f) => f.bytes(),
        }
    }
}

/// Sizes of a group, stored and uncompressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GroupStats {
    /// Rows (`N`).
    pub rows: u64,
    /// Rows stored encoded (flag set); 0 for raw groups.
    pub encoded_rows: u64,
    /// Uncompressed bytes (`N · L`).
    pub original_bytes: u64,
    /// Bytes of the group's sections (codebook, flags, offsets, payload or
    /// slots, or raw bytes), padding excluded.
    pub stored_bytes: u64,
}

impl GroupStats {
    /// `original_bytes / stored_bytes` (1 for empty groups).
    pub fn ratio(&self) -> f64 {
        if self.stored_bytes == 0 {
            1.0
        } else {
            self.original_bytes as f64 / self.stored_bytes as f64
        }
    }
}

/// Section byte ranges of one group, by kind.
#[derive(Clone, Debug, Default)]
struct GroupSections {
    codebook: Option<Range<usize>>,
    flags: Option<Range<usize>>,
    offsets: Option<Range<usize>>,
    payload: Option<Range<usize>>,
    slots: Option<Range<usize>>,
    raw: Option<Range<usize>>,
    ids: Option<Range<usize>>,
    float: Option<Range<usize>>,
}

impl GroupSections {
    fn slot(&mut self, kind: SectionKind) -> Option<&mut Option<Range<usize>>> {
        Some(match kind {
            SectionKind::Codebook => &mut self.codebook,
            SectionKind::Flags => &mut self.flags,
            SectionKind::Offsets => &mut self.offsets,
            SectionKind::Payload => &mut self.payload,
            SectionKind::Slots => &mut self.slots,
            SectionKind::Raw => &mut self.raw,
            SectionKind::ClusterIds => &mut self.ids,
            SectionKind::FloatGroup => &mut self.float,
            SectionKind::Manifest | SectionKind::Piece => return None,
        })
    }
}

struct GroupEntry {
    info: GroupInfo,
    sections: GroupSections,
    codebook: Option<Codebook>,
    /// The codebooks and ids of a clustered group.
    clusters: Option<ClusterTable>,
    /// The offsets table, decoded, when it cannot be used in place
    /// (unaligned buffer or big-endian machine).
    offsets_copy: Option<Vec<u64>>,
    stats: GroupStats,
}

/// A container, opened and checked; see the module docs for what is checked.
pub struct IbpFile<'a> {
    storage: Storage<'a>,
    version: u16,
    sections: Vec<DirEntry>,
    groups: Vec<GroupEntry>,
    pieces: Vec<Range<usize>>,
    envelope: Vec<Segment<u32>>,
    source: Option<SourceInfo>,
    notes: Vec<String>,
}

impl IbpFile<'static> {
    /// Open the container at `path`, memory-mapped.
    ///
    /// The file must not be modified while it is open (see
    /// [`crate::io::InputFile::open`]); the checks at open cannot protect
    /// against bytes that change afterwards.
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::io::InputFile::open(path)?;
        let parsed = Parsed::parse(file.bytes()).map_err(|e| in_file(e, path))?;
        Ok(parsed.into_file(Storage::File(file)))
    }

    /// A container held in a vector.
    pub fn from_vec(bytes: Vec<u8>) -> Result<Self> {
        let parsed = Parsed::parse(&bytes)?;
        Ok(parsed.into_file(Storage::Owned(bytes)))
    }
}

impl<'a> IbpFile<'a> {
    /// A container in borrowed bytes. Sections are used in place where
    /// aligned; an unaligned buffer only costs a copy of the offsets tables.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self> {
        let parsed = Parsed::parse(bytes)?;
        Ok(parsed.into_file(Storage::Borrowed(bytes)))
    }

    /// The container's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// The format version it was written with.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The directory: every section, in file order.
    pub fn sections(&self) -> &[DirEntry] {
        &self.sections
    }

    /// The original file's format and fingerprint, when recorded.
    pub fn source(&self) -> Option<&SourceInfo> {
        self.source.as_ref()
    }

    /// Notes the writer kept for people.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The recipe for the original file (`Raw(p)` is piece `p`).
    pub fn envelope(&self) -> &[Segment<u32>] {
        &self.envelope
    }

    /// Raw bytes of envelope piece `p`.
    pub fn piece(&self, p: u32) -> Option<&[u8]> {
        self.pieces
            .get(p as usize)
            .map(|r| &self.bytes()[r.clone()])
    }

    /// Number of groups.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Group `i`.
    pub fn group(&self, i: usize) -> Option<GroupView<'_>> {
        (i < self.groups.len()).then_some(GroupView {
            file: self,
            index: i,
        })
    }

    /// Every group, in order.
    pub fn groups(&self) -> impl ExactSizeIterator<Item = GroupView<'_>> {
        (0..self.groups.len()).map(|index| GroupView { file: self, index })
    }

    /// The first group called `name`.
    pub fn find_group(&self, name: &str) -> Option<GroupView<'_>> {
        self.groups().find(|g| g.name() == name)
    }

    /// Totals over all groups, plus the file's own size as `stored_bytes`.
    pub fn stats(&self) -> GroupStats {
        let mut s = self.groups().fold(GroupStats::default(), |mut acc, g| {
            let st = g.stats();
            acc.rows = acc.rows.saturating_add(st.rows);
            acc.encoded_rows = acc.encoded_rows.saturating_add(st.encoded_rows);
            acc.original_bytes = acc.original_bytes.saturating_add(st.original_bytes);
            acc
        });
        s.stored_bytes = self.bytes().len() as u64;
        s
    }

    /// Write the original file, byte for byte, to `out`.
    ///
    /// The restored bytes are hashed on the way out and must match the
    /// original's fingerprint the container records; a mismatch, or a
    /// container that records none, is [`ErrorKind::Corrupt`]. On any
    /// error, treat what was written as garbage. Large groups are
    /// decompressed in blocks of `opts.block_bytes`; bytes written go to
    /// `opts.progress`.
    pub fn restore(&self, out: &mut dyn Write, opts: &RestoreOptions<'_>) -> Result<()> {
        let RestoreOptions {
            block_bytes,
            progress,
        } = *opts;
        // Q: why refuse a container without the original's fingerprint?
        // A: each group's hash checks the group, but the envelope (the
        // order of pieces and groups, deflate levels) shapes the restored
        // bytes too, and only the whole file's hash covers it. Every
        // container ibp writes records it (docs/FORMAT.md §6.5).
        let Some(src) = &self.source else {
            return Err(Error::corrupt(
                "the manifest records no length and hash of the original file (`source`), so a restore could not be checked; the container is damaged or was not written by ibp",
            ));
        };
        let total = src.fingerprint.len;
        let mut sink = HashingWriter {
            inner: out,
            hash: Xxh3::new(),
            len: 0,
            total,
            progress,
        };
        restore_segments(
            &self.envelope,
            &mut FilePieces {
                file: self,
                block_bytes,
            },
            &mut sink,
        )?;
        let got = crate::io::Fingerprint {
            len: sink.len,
            xxh3: sink.hash.digest(),
        };
        if got != src.fingerprint {
            return Err(Error::corrupt(format!(
                "the restored file differs from the original ({} bytes, xxh3 {:016x}; expected {} bytes, {:016x})",
                got.len, got.xxh3, src.fingerprint.len, src.fingerprint.xxh3
            )));
        }
        sink.inner.flush().map_err(crate::io::write_error)
    }

    /// The original file as a vector.
    pub fn restore_to_vec(&self) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        if let Some(s) = &self.source {
            v.try_reserve_exact(usize::try_from(s.fingerprint.len).unwrap_or(0))
                .ok();
        }
        self.restore(&mut v, &RestoreOptions::default())?;
        Ok(v)
    }

    /// Decompress every group into a [`Document`] (pieces borrowed from
    /// the container): the inverse of [`crate::pipeline::compress_document`].
    pub fn to_document(&self) -> Result<Document<'_>> {
        let groups = self
            .groups()
            .map(|g| {
                Ok(TensorGroup {
                    name: g.name().to_string(),
                    dtype: g.dtype().clone(),
                    shape: g.shape().to_vec(),
                    data: Cow::Owned(g.decompress()?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        fn convert<'f>(
            file: &'f IbpFile<'_>,
            segs: &[Segment<u32>],
        ) -> Vec<Segment<Cow<'f, [u8]>>> {
            segs.iter()
                .map(|s| match s {
                    Segment::Raw(p) => {
                        Segment::Raw(Cow::Borrowed(file.piece(*p).unwrap_or_default()))
                    }
                    Segment::Group(g) => Segment::Group(*g),
                    Segment::Deflate { level, inner } => Segment::Deflate {
                        level: *level,
                        inner: convert(file, inner),
                    },
                })
                .collect()
        }
        let source = self.source.as_ref();
        Ok(Document {
            format: source
                .and_then(SourceInfo::source_format)
                .unwrap_or(crate::io::SourceFormat::Raw),
            groups,
            envelope: convert(self, &self.envelope),
            original: source.map_or_else(
                || crate::io::Fingerprint { len: 0, xxh3: 0 },
                |s| s.fingerprint,
            ),
            notes: self.notes.clone(),
            deferred: Vec::new(),
        })
    }
}

/// One group of an open container.
#[derive(Clone, Copy)]
pub struct GroupView<'f> {
    file: &'f IbpFile<'f>,
    index: usize,
}

impl<'f> GroupView<'f> {
    fn entry(&self) -> &'f GroupEntry {
        &self.file.groups[self.index]
    }

    fn range(&self, r: &Option<Range<usize>>) -> Option<&'f [u8]> {
        r.as_ref().map(|r| &self.file.bytes()[r.clone()])
    }

    /// Its position among the groups.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Everything the manifest says about it.
    pub fn info(&self) -> &'f GroupInfo {
        &self.entry().info
    }

    /// Tensor name.
    pub fn name(&self) -> &'f str {
        &self.info().name
    }

    /// Element type.
    pub fn dtype(&self) -> &'f DType {
        &self.info().dtype
    }

    /// Shape in storage order.
    pub fn shape(&self) -> &'f [u64] {
        &self.info().shape
    }

    /// Rows (`N`).
    pub fn rows(&self) -> u64 {
        self.info().rows
    }

    /// Bytes per row (`L`).
    pub fn row_bytes(&self) -> u64 {
        self.info().row_bytes
    }

    /// How it is stored.
    pub fn layout(&self) -> GroupLayout {
        self.info().layout
    }

    /// Its codebook (packed and fixed-stride groups; `None` for a
    /// clustered group, whose tensors need [`GroupView::clusters`]).
    ///
    /// Q: why `None` for a clustered group rather than its first codebook?
    /// A: so that no decoder that knows one codebook per group (the GPU's
    /// dataset constructors take a codebook and a [`PackedRef`]) can be
    /// handed a clustered group and decode it with the wrong codebook; it
    /// gets nothing to decode with instead.
    pub fn codebook(&self) -> Option<&'f Codebook> {
        self.entry().codebook.as_ref()
    }

    /// The codebooks, by cluster id, and the cluster id of each tensor
    /// (clustered groups only; all ids were checked at open to be `< k`).
    pub fn clusters(&self) -> Option<(&'f [Codebook], &'f ClusterIds)> {
        self.entry()
            .clusters
            .as_ref()
            .map(|c| (c.codebooks.as_slice(), &c.ids))
    }

    /// The float-coded form (float-coded groups only), read from its
    /// section; the table and every row's index entry were checked at
    /// open, and are again here.
    ///
    /// Q: why read it on each call, not once at open? A: `FloatCoded`
    /// owns its payload, so holding every float-coded group from open on
    /// would hold their coded forms all at once (a model's worth); read
    /// per call, one group's is held while it is decoded. Call it once and
    /// keep the result to decode many row ranges of one group.
    ///
    /// Errors as [`FloatCoded::from_bytes`] (which cannot fail on a
    /// section that passed open), and with [`ErrorKind::InvalidArgument`]
    /// for a group that is not float-coded.
    pub fn float(&self) -> Result<FloatCoded> {
        let info = self.info();
        if info.layout != GroupLayout::Float {
            return Err(Error::invalid(format!(
                "group {:?} is {}, not float-coded",
                info.name,
                info.layout.name()
            )));
        }
        let bytes = self
            .range(&self.entry().sections.float)
            .ok_or_else(|| missing(info))?;
        FloatCoded::from_bytes(bytes).map_err(|e| in_group(e, info))
    }

    /// The threshold its codebook was fitted at, when recorded.
    pub fn threshold(&self) -> Option<Threshold> {
        self.info().threshold
    }

    /// Sizes.
    pub fn stats(&self) -> GroupStats {
        self.entry().stats
    }

    /// The packed layout, in place (packed and clustered groups). Checked
    /// at open with [`PackedRef::validate`]; decoding checks each tensor's
    /// encoding.
    pub fn packed(&self) -> Option<PackedRef<'f>> {
        let e = self.entry();
        if !matches!(
            e.info.layout,
            GroupLayout::Coded(Layout::Packed) | GroupLayout::Clustered
        ) {
            return None;
        }
        let (flags, offsets, payload) = (
            self.range(&e.sections.flags)?,
            self.range(&e.sections.offsets)?,
            self.range(&e.sections.payload)?,
        );
        let (l, n) = (e.info.row_bytes as usize, e.info.rows as usize);
        match &e.offsets_copy {
            Some(copy) => PackedRef::new(l, n, flags, Cow::Borrowed(copy), payload).ok(),
            None => PackedRef::from_le_offsets(l, n, flags, offsets, payload).ok(),
        }
    }

    /// The fixed-stride layout, in place (fixed-stride groups only).
    pub fn fixed(&self) -> Option<FixedStrideRef<'f>> {
        let e = self.entry();
        if e.info.layout != GroupLayout::Coded(Layout::FixedStride) {
            return None;
        }
        let (flags, slots) = (
            self.range(&e.sections.flags)?,
            self.range(&e.sections.slots)?,
        );
        FixedStrideRef::new(
            e.info.row_bytes as usize,
            e.info.rows as usize,
            flags,
            slots,
        )
        .ok()
    }

    /// The bytes of a raw group, in place.
    pub fn raw(&self) -> Option<&'f [u8]> {
        self.range(&self.entry().sections.raw)
    }

    /// Decompress into `out` (`rows × row_bytes` bytes) and check the
    /// group's hash.
    pub fn decompress_into(&self, out: &mut [u8]) -> Result<()> {
        let info = self.info();
        if out.len() as u64 != info.data_len() {
            return Err(Error::invalid(format!(
                "group {:?} decompresses to {} bytes, the buffer has {}",
                info.name,
                info.data_len(),
                out.len()
            )));
        }
        match info.layout {
            GroupLayout::Raw => out.copy_from_slice(self.raw().unwrap_or_default()),
            GroupLayout::Coded(Layout::Packed) => {
                let (cb, p) = self
                    .codebook()
                    .zip(self.packed())
                    .ok_or_else(|| missing(info))?;
                decompress_packed(cb, &p, out).map_err(|e| in_group(e, info))?;
            }
            GroupLayout::Coded(Layout::FixedStride) => {
                let (cb, f) = self
                    .codebook()
                    .zip(self.fixed())
                    .ok_or_else(|| missing(info))?;
                decompress_fixed(cb, &f, out).map_err(|e| in_group(e, info))?;
            }
            GroupLayout::Clustered => {
                let (c, p) = (self.entry().clusters.as_ref())
                    .zip(self.packed())
                    .ok_or_else(|| missing(info))?;
                c.decode(&p, out).map_err(|e| in_group(e, info))?;
            }
            GroupLayout::Float => {
                let f = self.float()?;
                f.decompress_rows(0..f.rows(), out)
                    .map_err(|e| in_group(e, info))?;
            }
        }
        check_hash(info, xxh3_64(out))
    }

    /// Decompress into a new vector.
    pub fn decompress(&self) -> Result<Vec<u8>> {
        let mut out = alloc(self.info().data_len(), &self.info().name)?;
        self.decompress_into(&mut out)?;
        Ok(out)
    }

    /// Decompress rows `rows` into `out` (`rows.len() × row_bytes` bytes),
    /// checking only what concerns those rows. No hash check: the group's
    /// hash covers all of it.
    pub fn decompress_rows(&self, rows: Range<u64>, out: &mut [u8]) -> Result<()> {
        let info = self.info();
        let l = info.row_bytes as usize;
        if rows.start > rows.end
            || rows.end > info.rows
            || (rows.end - rows.start) * info.row_bytes != out.len() as u64
        {
            return Err(Error::invalid(format!(
                "rows {rows:?} of group {:?} ({} rows of {l} bytes) do not fit a {}-byte buffer",
                info.name,
                info.rows,
                out.len()
            )));
        }
        if l == 0 {
            return Ok(());
        }
        let start = rows.start as usize;
        match info.layout {
            GroupLayout::Raw => {
                let raw = self.raw().unwrap_or_default();
                out.copy_from_slice(&raw[start * l..start * l + out.len()]);
            }
            GroupLayout::Coded(Layout::Packed) => {
                let (cb, p) = self
                    .codebook()
                    .zip(self.packed())
                    .ok_or_else(|| missing(info))?;
                out.par_chunks_mut(l)
                    .enumerate()
                    .try_for_each(|(k, dst)| decompress_packed_row(cb, &p, start + k, dst))
                    .map_err(|e| in_group(e, info))?;
            }
            GroupLayout::Coded(Layout::FixedStride) => {
                let (cb, f) = self
                    .codebook()
                    .zip(self.fixed())
                    .ok_or_else(|| missing(info))?;
                out.par_chunks_mut(l)
                    .enumerate()
                    .try_for_each(|(k, dst)| decompress_fixed_row(cb, &f, start + k, dst))
                    .map_err(|e| in_group(e, info))?;
            }
            GroupLayout::Clustered => {
                let (c, p) = (self.entry().clusters.as_ref())
                    .zip(self.packed())
                    .ok_or_else(|| missing(info))?;
                out.par_chunks_mut(l)
                    .enumerate()
                    .try_for_each(|(k, dst)| c.decode_row(&p, start + k, dst))
                    .map_err(|e| in_group(e, info))?;
            }
            GroupLayout::Float => {
                let f = self.float()?;
                f.decompress_rows(start..rows.end as usize, out)
                    .map_err(|e| in_group(e, info))?;
            }
        }
        Ok(())
    }

    /// Write the decompressed group to `out` in one `write_all` per block
    /// of rows, holding at most one block, and check the group's hash.
    fn write_to(&self, out: &mut dyn Write, block_bytes: u64) -> Result<()> {
        let info = self.info();
        if let Some(raw) = self.raw() {
            check_hash(info, xxh3_64(raw))?;
            return out.write_all(raw).map_err(crate::io::write_error);
        }
        if info.data_len() <= block_bytes {
            let data = self.decompress()?;
            return out.write_all(&data).map_err(crate::io::write_error);
        }
        // Q: why is writing a large group in blocks still byte-exact inside
        // a deflate segment? A: at the levels used (1-9) zlib's output does
        // not depend on how the input is split across writes (FORMAT.md
        // §6.5); and the file's hash check after the restore would catch it
        // if it did.
        let block_rows = (block_bytes / info.row_bytes).max(1);
        let mut buf = alloc(block_rows * info.row_bytes, &info.name)?;
        let mut hash = Xxh3::new();
        let mut start = 0;
        // A float-coded group is read from its section once, not per block.
        let float = match info.layout {
            GroupLayout::Float => Some(self.float()?),
            _ => None,
        };
        while start < info.rows {
            let end = (start + block_rows).min(info.rows);
            let chunk = &mut buf[..((end - start) * info.row_bytes) as usize];
            match &float {
                Some(f) => f
                    .decompress_rows(start as usize..end as usize, chunk)
                    .map_err(|e| in_group(e, info))?,
                None => self.decompress_rows(start..end, chunk)?,
            }
            hash.update(chunk);
            out.write_all(chunk).map_err(crate::io::write_error)?;
            start = end;
        }
        check_hash(info, hash.digest())
    }
}

fn alloc(len: u64, name: &str) -> Result<Vec<u8>> {
    let n = usize::try_from(len)
        .map_err(|_| Error::unsupported(format!("group {name:?} is too large for this machine")))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::out_of_memory(len, &format!("decompressing group {name:?}")))?;
    v.resize(n, 0);
    Ok(v)
}

fn missing(info: &GroupInfo) -> Error {
    Error::corrupt(format!("group {:?}: sections missing", info.name))
}

fn in_group(e: Error, info: &GroupInfo) -> Error {
    Error::new(e.kind(), format!("group {:?}: {}", info.name, e.message()))
}

fn check_hash(info: &GroupInfo, got: u64) -> Result<()> {
    if got != info.xxh3 {
        return Err(Error::corrupt(format!(
            "group {:?} decompresses to data with xxh3 {got:016x}, not the recorded {:016x}",
            info.name, info.xxh3
        )));
    }
    Ok(())
}

fn in_file(e: Error, path: &Path) -> Error {
    Error::new(e.kind(), format!("{}: {}", path.display(), e.message()))
}

struct FilePieces<'f, 'a> {
    file: &'f IbpFile<'a>,
    /// Groups larger than this are written in blocks of about this size.
    block_bytes: u64,
}

impl PieceSource<u32> for FilePieces<'_, '_> {
    fn write_raw(&mut self, raw: &u32, out: &mut dyn Write) -> Result<()> {
        let bytes = self
            .file
            .piece(*raw)
            .ok_or_else(|| Error::corrupt(format!("envelope piece {raw} is missing")))?;
        out.write_all(bytes).map_err(crate::io::write_error)
    }

    fn write_group(&mut self, group: usize, out: &mut dyn Write) -> Result<()> {
        let g = self
            .file
            .group(group)
            .ok_or_else(|| Error::corrupt(format!("envelope group {group} is missing")))?;
        g.write_to(out, self.block_bytes)
    }
}

/// Hashes and counts what passes through, and reports progress.
struct HashingWriter<'o, 'p> {
    inner: &'o mut dyn Write,
    hash: Xxh3,
    len: u64,
    total: u64,
    progress: Option<Progress<'p>>,
}

impl Write for HashingWriter<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        notify(self.progress, self.len, self.total);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

mod open;

use open::Parsed;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::{ContainerWriter, GroupData, GroupMeta};
    use crate::dataset::Rows;
    use crate::fit::{FitOptions, fit};
    use crate::io::{Fingerprint, SourceFormat};
    use crate::layout::{LayoutOptions, compress_packed};

    /// Restoring a group in blocks of rows gives the same bytes as in one
    /// piece, raw and inside deflate segments of every level used.
    #[test]
    fn blockwise_restore_is_exact() {
        let data: Vec<u8> = (0..4000u32)
            .flat_map(|i| ((i % 37) as f32 * 0.25).to_le_bytes())
            .collect();
        // Two packed groups of 100 rows of 40 f32, written directly (the
        // pipeline is not the container's to use).
        let rows = Rows::new(&data, 160).unwrap();
        let fitted = fit(rows, &FitOptions::default()).unwrap();
        let packed = compress_packed(&fitted.codebook, rows, &LayoutOptions::default()).unwrap();
        for level in 1..=9 {
            let mut enc =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
            enc.write_all(b"head").unwrap();
            enc.write_all(&data).unwrap();
            let mut original = data.clone();
            original.extend(enc.finish().unwrap());
            let mut w = ContainerWriter::new(Vec::new()).unwrap();
            w.set_source(Some(SourceInfo::new(
                SourceFormat::Raw,
                Fingerprint::of(&original),
            )));
            for name in ["a", "b"] {
                let meta = GroupMeta::new(name, DType::F32, vec![100, 40], 100, 160, &data);
                let group = GroupData::Packed {
                    codebook: &fitted.codebook,
                    threshold: Some(fitted.threshold),
                    packed: packed.view(),
                };
                w.add_group(meta, group).unwrap();
            }
            let head = w.add_piece(b"head").unwrap();
            let envelope = [
                Segment::Group(0),
                Segment::Deflate {
                    level,
                    inner: vec![Segment::Raw(head), Segment::Group(1)],
                },
            ];
            let (bytes, _) = w.finish(&envelope).unwrap();
            let file = IbpFile::from_bytes(&bytes).unwrap();
            assert_eq!(
                file.group(0).unwrap().layout(),
                GroupLayout::Coded(Layout::Packed)
            );
            for block_bytes in [1, 160, 1000, 1 << 20] {
                let mut out = Vec::new();
                restore_segments(
                    &file.envelope,
                    &mut FilePieces {
                        file: &file,
                        block_bytes,
                    },
                    &mut out,
                )
                .unwrap();
                assert!(
                    out == original,
                    "level {level}, blocks of {block_bytes} bytes"
                );
            }
        }
    }
}
