//! Writing a container front to back, to any [`Write`], without seeking.
//!
//! Sections are written as the caller hands them over; the writer keeps only
//! their directory entries and the groups' descriptions, and writes the
//! manifest, the directory and the trailer in [`ContainerWriter::finish`].
//! A multi-gigabyte input therefore never has to be held twice: compress a
//! group, hand it over, drop it; or, inside the crate, hand a group over in
//! pieces ([`ContainerWriter::add_group_in_pieces`]), so that not even one
//! group's compressed form is held at once.

use std::io::Write;

use xxhash_rust::xxh3::Xxh3;

use super::format::{
    self, ALIGN, DirEntry, FLAG_REQUIRED, HEADER_LEN, NO_OWNER, SectionKind, TRAILER_LEN, Trailer,
    VERSION,
};
use super::manifest::{GroupInfo, GroupLayout, Manifest, SourceInfo};
use crate::cluster::{ClusterIds, id_bits};
use crate::codebook::{Codebook, Threshold};
use crate::error::{Error, Result};
use crate::float_code::{FloatCoded, FloatType};
use crate::io::{DType, Segment, element_count};
use crate::layout::{FixedStrideRef, Layout, PackedRef, flag_bytes};

/// How one group is to be stored.
#[derive(Clone, Debug)]
pub enum GroupData<'a> {
    /// The bytes as they are.
    Raw(&'a [u8]),
    /// Packed layout with its codebook.
    Packed {
        /// The codebook the payload was encoded with.
        codebook: &'a Codebook,
        /// The threshold it was fitted at, recorded for `ibp inspect`.
        threshold: Option<Threshold>,
        /// Flags, offsets and payload.
        packed: PackedRef<'a>,
    },
    /// Fixed-stride layout with its codebook.
    Fixed {
        /// The codebook the slots were encoded with.
        codebook: &'a Codebook,
        /// The threshold it was fitted at, recorded for `ibp inspect`.
        threshold: Option<Threshold>,
        /// Flags and slots.
        fixed: FixedStrideRef<'a>,
    },
    /// Packed layout with one codebook per cluster (`docs/FORMAT.md` §6.8).
    Clustered {
        /// The `k ≥ 2` codebooks, by cluster id; one chunk size.
        codebooks: &'a [Codebook],
        /// The cluster id of each tensor.
        ids: &'a ClusterIds,
        /// The threshold they were fitted at, recorded for `ibp inspect`.
        threshold: Option<Threshold>,
        /// Flags, offsets and payload, tensor `i` encoded with
        /// `codebooks[ids[i]]`.
        packed: PackedRef<'a>,
    },
    /// Float-coded (`docs/FORMAT.md` §6.9): one section holding
    /// [`FloatCoded::to_bytes`].
    Float(&'a FloatCoded),
}

/// What the writer needs to know about a group besides its stored form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMeta {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape in storage order.
    pub shape: Vec<u64>,
    /// Rows the codec saw (`N`).
    pub rows: u64,
    /// Bytes per row (`L`).
    pub row_bytes: u64,
    /// xxh3-64 of the uncompressed bytes, so that a reader can check its
    /// decompression of this group alone.
    pub xxh3: u64,
}

impl GroupMeta {
    /// Metadata for `data` (its hash is computed here) cut into `rows` rows
    /// of `row_bytes`.
    pub fn new(
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<u64>,
        rows: u64,
        row_bytes: u64,
        data: &[u8],
    ) -> Self {
        GroupMeta {
            name: name.into(),
            dtype,
            shape,
            rows,
            row_bytes,
            xxh3: xxhash_rust::xxh3::xxh3_64(data),
        }
    }
}

/// A container being written. Create it, add pieces and groups in any order,
/// then [`ContainerWriter::finish`] with the envelope.
pub struct ContainerWriter<W: Write> {
    out: W,
    pos: u64,
    entries: Vec<DirEntry>,
    groups: Vec<GroupInfo>,
    pieces: u32,
    source: Option<SourceInfo>,
    notes: Vec<String>,
}

impl<W: Write> ContainerWriter<W> {
    /// Start a container on `out` (writes the header).
    pub fn new(mut out: W) -> Result<Self> {
        out.write_all(&format::encode_header()).map_err(write_err)?;
        Ok(ContainerWriter {
            out,
            pos: HEADER_LEN,
            entries: Vec::new(),
            groups: Vec::new(),
            pieces: 0,
            source: None,
            notes: Vec::new(),
        })
    }

    /// Record the original file's format and fingerprint, so that restores
    /// check they reproduced it exactly.
    pub fn set_source(&mut self, source: Option<SourceInfo>) {
        self.source = source;
    }

    /// Keep a note for people (shown by `ibp inspect`).
    pub fn add_note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Bytes written so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Store raw envelope bytes; returns the piece number for
    /// [`Segment::Raw`] in the envelope.
    pub fn add_piece(&mut self, bytes: &[u8]) -> Result<u32> {
        self.add_piece_parts(&[bytes])
    }

    /// [`ContainerWriter::add_piece`] of the concatenation of `parts`,
    /// without copying them together first.
    pub fn add_piece_parts(&mut self, parts: &[&[u8]]) -> Result<u32> {
        let id = self.pieces;
        self.section(SectionKind::Piece, id, parts)?;
        self.pieces += 1;
        Ok(id)
    }

    /// The number the next group added will get.
    pub(crate) fn next_group_id(&self) -> Result<u32> {
        u32::try_from(self.groups.len())
            .ok()
            .filter(|&i| i != NO_OWNER)
            .ok_or_else(|| Error::invalid("too many groups for one container"))
    }

    /// Store a group; returns its number for [`Segment::Group`].
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] when the metadata
    /// and the stored form disagree (shape, rows, row length, codebook), or
    /// when a reader would refuse the group (a dtype whose name is a known
    /// type's with another size, a stored form that does not validate).
    pub fn add_group(&mut self, meta: GroupMeta, data: GroupData<'_>) -> Result<u32> {
        let id = self.next_group_id()?;
        let (layout, chunk, threshold, clusters) = check_group(&meta, &data)?;
        match &data {
            GroupData::Raw(bytes) => {
                self.section(SectionKind::Raw, id, &[bytes])?;
            }
            GroupData::Packed {
                codebook, packed, ..
            } => {
                self.section(
                    SectionKind::Codebook,
                    id,
                    &[codebook.mask(), codebook.bitval()],
                )?;
                self.section(SectionKind::Flags, id, &[packed.flags()])?;
                self.section(
                    SectionKind::Offsets,
                    id,
                    &[bytemuck::cast_slice(&le_offsets(packed.offsets()))],
                )?;
                self.section(SectionKind::Payload, id, &[packed.payload()])?;
            }
            GroupData::Fixed {
                codebook, fixed, ..
            } => {
                self.section(
                    SectionKind::Codebook,
                    id,
                    &[codebook.mask(), codebook.bitval()],
                )?;
                self.section(SectionKind::Flags, id, &[fixed.flags()])?;
                self.section(SectionKind::Slots, id, &[fixed.slots()])?;
            }
            GroupData::Clustered {
                codebooks,
                ids,
                packed,
                ..
            } => {
                let parts: Vec<&[u8]> = codebooks
                    .iter()
                    .flat_map(|cb| [cb.mask(), cb.bitval()])
                    .collect();
                self.section(SectionKind::Codebook, id, &parts)?;
                self.section(SectionKind::ClusterIds, id, &[ids.as_bytes()])?;
                self.section(SectionKind::Flags, id, &[packed.flags()])?;
                self.section(
                    SectionKind::Offsets,
                    id,
                    &[bytemuck::cast_slice(&le_offsets(packed.offsets()))],
                )?;
                self.section(SectionKind::Payload, id, &[packed.payload()])?;
            }
            GroupData::Float(coded) => {
                let head = coded.head_bytes();
                self.section(SectionKind::FloatGroup, id, &[&head, coded.payload()])?;
            }
        }
        self.push_group(meta, layout, chunk, threshold);
        if let Some(g) = self.groups.last_mut() {
            g.clusters = clusters;
        }
        Ok(id)
    }

    /// Store a compressed group whose sections the caller writes one at a
    /// time, in `layout`'s order (codebook, flags, then offsets and payload
    /// or slots), each from any number of pieces: see [`GroupSections`].
    /// Returns the group's number once every section has its announced
    /// length.
    ///
    /// Q: why pieces? A: a tensor of many gigabytes is compressed one batch
    /// of rows at a time, and each batch is written and dropped before the
    /// next, so memory does not grow with the tensor; see
    /// `compress_document`.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] as
    /// [`ContainerWriter::add_group`] does, when a section's pieces do not
    /// add up to its length, or when `write` skips a section.
    pub(crate) fn add_group_in_pieces(
        &mut self,
        meta: GroupMeta,
        codebook: &Codebook,
        threshold: Option<Threshold>,
        layout: GroupLayout,
        write: impl FnOnce(&mut GroupSections<'_, W>) -> Result<()>,
    ) -> Result<u32> {
        let id = self.next_group_id()?;
        let bad = |m: &str| Error::invalid(format!("group {:?}: {m}", meta.name));
        check_meta(&meta)?;
        if codebook.row_bytes() as u64 != meta.row_bytes {
            return Err(bad(&format!(
                "the codebook is for {}-byte rows, the metadata says {}",
                codebook.row_bytes(),
                meta.row_bytes
            )));
        }
        let rows_plus_one = meta
            .rows
            .checked_add(1)
            .ok_or_else(|| bad("too many rows"))?;
        let min_row = meta
            .row_bytes
            .div_ceil(u64::from(codebook.chunk().bytes()))
            .div_ceil(8);
        // The length each section must have, or for the payload, the least
        // it may have (every stored tensor has its participation bits).
        let flags = SectionLen::Exactly(meta.rows.div_ceil(8));
        let expected = match layout {
            GroupLayout::Coded(Layout::Packed) => vec![
                (SectionKind::Flags, flags),
                (
                    SectionKind::Offsets,
                    SectionLen::Exactly(
                        rows_plus_one
                            .checked_mul(8)
                            .ok_or_else(|| bad("too many rows"))?,
                    ),
                ),
                (
                    SectionKind::Payload,
                    SectionLen::AtLeast(meta.rows.saturating_mul(min_row)),
                ),
            ],
            GroupLayout::Coded(Layout::FixedStride) => vec![
                (SectionKind::Flags, flags),
                (
                    SectionKind::Slots,
                    SectionLen::Exactly(meta.rows * meta.row_bytes),
                ),
            ],
            GroupLayout::Raw | GroupLayout::Clustered | GroupLayout::Float => {
                return Err(bad(&format!(
                    "a {} group is stored with add_group",
                    layout.name()
                )));
            }
        };
        self.section(
            SectionKind::Codebook,
            id,
            &[codebook.mask(), codebook.bitval()],
        )?;
        let mut sections = GroupSections {
            w: self,
            id,
            expected,
            done: 0,
            open: None,
        };
        write(&mut sections)?;
        sections.close()?;
        if let Some((kind, _)) = sections.expected.get(sections.done) {
            return Err(bad(&format!("its {kind:?} section was not written")));
        }
        self.push_group(meta, layout, Some(codebook.chunk()), threshold);
        Ok(id)
    }

    fn push_group(
        &mut self,
        meta: GroupMeta,
        layout: GroupLayout,
        chunk: Option<crate::codebook::ChunkSize>,
        threshold: Option<Threshold>,
    ) {
        self.groups.push(GroupInfo {
            name: meta.name,
            dtype: meta.dtype,
            shape: meta.shape,
            rows: meta.rows,
            row_bytes: meta.row_bytes,
            layout,
            chunk,
            threshold,
            clusters: None,
            xxh3: meta.xxh3,
        });
    }

    /// Write the manifest, directory and trailer; returns the writer and the
    /// container's length in bytes.
    ///
    /// `envelope` must name every group and every piece exactly once
    /// (errors with [`crate::ErrorKind::InvalidArgument`] otherwise), so
    /// that a restore writes everything that was stored.
    pub fn finish(mut self, envelope: &[Segment<u32>]) -> Result<(W, u64)> {
        let mut seen_groups = vec![false; self.groups.len()];
        let mut seen_pieces = vec![false; self.pieces as usize];
        check_envelope(envelope, &mut seen_groups, &mut seen_pieces, 0).map_err(Error::invalid)?;
        if let Some(g) = seen_groups.iter().position(|s| !s) {
            return Err(Error::invalid(format!(
                "the envelope does not use group {g}"
            )));
        }
        if let Some(p) = seen_pieces.iter().position(|s| !s) {
            return Err(Error::invalid(format!(
                "the envelope does not use piece {p}"
            )));
        }
        let manifest = Manifest {
            source: self.source.take(),
            groups: std::mem::take(&mut self.groups),
            envelope: envelope.to_vec(),
            notes: std::mem::take(&mut self.notes),
        };
        let json = manifest.to_json();
        // Q: why parse the manifest just written? A: so that the writer
        // cannot accept what the reader refuses (a dtype name with the
        // wrong size, say): whatever does not come back equal is refused
        // here, as an invalid argument, instead of becoming a file that
        // does not open.
        match Manifest::from_json(&json) {
            Ok(back) if back == manifest => {}
            Ok(_) => {
                return Err(Error::invalid(
                    "the manifest does not read back as written; check the group descriptions",
                ));
            }
            Err(e) => {
                return Err(Error::invalid(format!(
                    "the container would not open: {}",
                    e.message()
                )));
            }
        }
        self.section(SectionKind::Manifest, NO_OWNER, &[&json])?;

        let dir_offset = self.pos;
        let dir: Vec<u8> = self.entries.iter().flat_map(DirEntry::encode).collect();
        self.write(&dir)?;
        self.pad()?;
        let trailer = Trailer {
            dir_offset,
            dir_count: self.entries.len() as u64,
            dir_xxh3: xxhash_rust::xxh3::xxh3_64(&dir),
            file_len: self.pos + TRAILER_LEN,
            version: VERSION,
        };
        self.write(&trailer.encode())?;
        self.out.flush().map_err(write_err)?;
        Ok((self.out, self.pos))
    }

    /// Write one section from `parts` (concatenated), pad, and record it.
    fn section(&mut self, kind: SectionKind, owner: u32, parts: &[&[u8]]) -> Result<()> {
        let offset = self.pos;
        let mut h = Xxh3::new();
        for p in parts {
            h.update(p);
            self.write(p)?;
        }
        let length = self.pos - offset;
        self.pad()?;
        self.entries.push(DirEntry {
            kind: kind as u32,
            flags: FLAG_REQUIRED,
            owner,
            offset,
            length,
            xxh3: h.digest(),
        });
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(write_err)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> Result<()> {
        const ZEROS: [u8; ALIGN as usize] = [0; ALIGN as usize];
        let n = format::padding(self.pos);
        self.write(&ZEROS[..n])
    }
}

/// The length a section written in pieces must have.
#[derive(Clone, Copy, Debug)]
enum SectionLen {
    Exactly(u64),
    AtLeast(u64),
}

/// The sections of a group being written in pieces
/// ([`ContainerWriter::add_group_in_pieces`]): [`GroupSections::start`] a
/// section, [`GroupSections::write`] its bytes in any number of pieces,
/// then start the next.
pub(crate) struct GroupSections<'w, W: Write> {
    w: &'w mut ContainerWriter<W>,
    id: u32,
    /// The sections still to come after the codebook, in file order.
    expected: Vec<(SectionKind, SectionLen)>,
    /// How many of `expected` were started.
    done: usize,
    /// The section being written: where it starts, and its running hash.
    open: Option<(u64, Xxh3)>,
}

impl<W: Write> GroupSections<'_, W> {
    /// Close the current section and start `kind`, which must be the next
    /// one of the layout.
    pub(crate) fn start(&mut self, kind: SectionKind) -> Result<()> {
        self.close()?;
        match self.expected.get(self.done) {
            Some((k, _)) if *k == kind => {}
            other => {
                return Err(Error::invalid(format!(
                    "section {kind:?} of group {} out of order (expected {:?})",
                    self.id,
                    other.map(|o| o.0)
                )));
            }
        }
        self.done += 1;
        self.open = Some((self.w.pos, Xxh3::new()));
        Ok(())
    }

    /// Append `bytes` to the current section.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        let Some((_, hash)) = &mut self.open else {
            return Err(Error::invalid("no section started"));
        };
        hash.update(bytes);
        self.w.write(bytes)
    }

    /// Pad and record the current section after checking its length.
    fn close(&mut self) -> Result<()> {
        let Some((offset, hash)) = self.open.take() else {
            return Ok(());
        };
        let (kind, want) = self.expected[self.done - 1];
        let length = self.w.pos - offset;
        let ok = match want {
            SectionLen::Exactly(n) => length == n,
            SectionLen::AtLeast(n) => length >= n,
        };
        if !ok {
            return Err(Error::invalid(format!(
                "section {kind:?} of group {} has {length} bytes, {want:?} expected",
                self.id
            )));
        }
        self.w.pad()?;
        self.w.entries.push(DirEntry {
            kind: kind as u32,
            flags: FLAG_REQUIRED,
            owner: self.id,
            offset,
            length,
            xxh3: hash.digest(),
        });
        Ok(())
    }
}

fn write_err(e: std::io::Error) -> Error {
    Error::io("writing the container", e)
}

/// The offsets table in its file form (little-endian u64).
fn le_offsets(offsets: &[u64]) -> Vec<u64> {
    offsets.iter().map(|o| o.to_le()).collect()
}

type Described = (
    GroupLayout,
    Option<crate::codebook::ChunkSize>,
    Option<Threshold>,
    Option<u32>,
);

/// The checks the reader makes of a group's description; returns its
/// bytes (`N · L`).
fn check_meta(meta: &GroupMeta) -> Result<u64> {
    let bad = |m: String| Error::invalid(format!("group {:?}: {m}", meta.name));
    DType::from_stored(meta.dtype.name(), meta.dtype.size())
        .map_err(|e| bad(e.message().to_string()))?;
    let bytes = element_count(&meta.shape)
        .map_err(|e| bad(e.message().to_string()))?
        .checked_mul(meta.dtype.size());
    match bytes {
        Some(b)
            if meta.rows.checked_mul(meta.row_bytes) == Some(b)
                && (meta.row_bytes != 0 || meta.rows == 0) =>
        {
            Ok(b)
        }
        _ => Err(bad(format!(
            "{} rows of {} bytes do not hold shape {:?} of {}",
            meta.rows, meta.row_bytes, meta.shape, meta.dtype
        ))),
    }
}

fn check_group(meta: &GroupMeta, data: &GroupData<'_>) -> Result<Described> {
    let c = GroupCheck { meta };
    // The checks the reader makes of the manifest and the sections, made
    // here so that every group the writer takes is one the reader opens.
    let bytes = Some(check_meta(meta)?);
    Ok(match data {
        GroupData::Raw(b) => {
            if Some(b.len() as u64) != bytes {
                return Err(c.bad(format!(
                    "{} bytes given for {} bytes of data",
                    b.len(),
                    meta.rows * meta.row_bytes
                )));
            }
            (GroupLayout::Raw, None, None, None)
        }
        GroupData::Packed {
            codebook,
            threshold,
            packed,
        } => {
            c.packed(codebook, packed)?;
            (
                GroupLayout::Coded(Layout::Packed),
                Some(codebook.chunk()),
                *threshold,
                None,
            )
        }
        GroupData::Fixed {
            codebook,
            threshold,
            fixed,
        } => {
            c.codebook(codebook, fixed.rows(), fixed.flags())?;
            if fixed.row_bytes() != codebook.row_bytes() {
                return Err(c.bad("fixed-stride rows and codebook differ in length".into()));
            }
            fixed
                .validate(codebook)
                .map_err(|e| c.bad(e.message().to_string()))?;
            (
                GroupLayout::Coded(Layout::FixedStride),
                Some(codebook.chunk()),
                *threshold,
                None,
            )
        }
        GroupData::Clustered {
            codebooks,
            ids,
            threshold,
            packed,
        } => {
            let k = c.clustered(codebooks, ids, packed)?;
            (
                GroupLayout::Clustered,
                Some(codebooks[0].chunk()),
                *threshold,
                Some(k),
            )
        }
        GroupData::Float(coded) => {
            c.float(coded)?;
            (GroupLayout::Float, None, None, None)
        }
    })
}

/// The checks of one group's stored form against its metadata.
struct GroupCheck<'m> {
    meta: &'m GroupMeta,
}

impl GroupCheck<'_> {
    fn bad(&self, m: String) -> Error {
        Error::invalid(format!("group {:?}: {m}", self.meta.name))
    }

    /// A float-coded group: its rows and type against the metadata (the
    /// reader's check, `docs/FORMAT.md` §6.9).
    fn float(&self, coded: &FloatCoded) -> Result<()> {
        let meta = self.meta;
        if coded.rows() as u64 != meta.rows || coded.row_bytes() as u64 != meta.row_bytes {
            return Err(self.bad(format!(
                "float-coded form has {} rows of {} bytes, metadata says {} of {}",
                coded.rows(),
                coded.row_bytes(),
                meta.rows,
                meta.row_bytes
            )));
        }
        float_type_fits(coded.table().float_type(), &meta.dtype).map_err(|m| self.bad(m))
    }

    /// A codebook's rows and flag bitmap against the metadata.
    fn codebook(&self, cb: &Codebook, rows: usize, flags: &[u8]) -> Result<()> {
        let meta = self.meta;
        if cb.row_bytes() as u64 != meta.row_bytes || rows as u64 != meta.rows {
            return Err(self.bad(format!(
                "stored form has {rows} rows of {} bytes, metadata says {} of {}",
                cb.row_bytes(),
                meta.rows,
                meta.row_bytes
            )));
        }
        if flags.len() != flag_bytes(rows) {
            return Err(self.bad("flag bitmap has the wrong length".into()));
        }
        Ok(())
    }

    /// The packed payload of a packed or clustered group: rows as long as
    /// the codebook's, valid offsets, and at least the participation bytes
    /// of every tensor.
    fn packed(&self, cb: &Codebook, packed: &crate::layout::PackedRef<'_>) -> Result<()> {
        self.codebook(cb, packed.rows(), packed.flags())?;
        if packed.row_bytes() != cb.row_bytes() {
            return Err(self.bad("packed rows and codebook differ in length".into()));
        }
        packed
            .validate()
            .map_err(|e| self.bad(e.message().to_string()))?;
        let min_row = (packed.row_bytes().div_ceil(cb.chunk().bytes() as usize)).div_ceil(8) as u64;
        if self
            .meta
            .rows
            .checked_mul(min_row)
            .is_none_or(|m| m > packed.payload().len() as u64)
        {
            return Err(self.bad("the payload is too short for its tensors".into()));
        }
        Ok(())
    }

    /// A clustered group: 2 or more codebooks of one row length and chunk
    /// size, its packed payload, and one id below `k` per tensor. Returns
    /// `k`.
    fn clustered(
        &self,
        codebooks: &[Codebook],
        ids: &ClusterIds,
        packed: &crate::layout::PackedRef<'_>,
    ) -> Result<u32> {
        let k = codebooks.len();
        let first = codebooks
            .first()
            .ok_or_else(|| self.bad("a clustered group without codebooks".into()))?;
        let k32 = u32::try_from(k).ok().filter(|&k| k >= 2).ok_or_else(|| {
            self.bad(format!(
                "{k} codebooks; a clustered group has 2 to 2^32 - 1 (store one codebook as packed)"
            ))
        })?;
        if let Some(i) = codebooks
            .iter()
            .position(|c| c.row_bytes() != first.row_bytes() || c.chunk() != first.chunk())
        {
            return Err(self.bad(format!(
                "codebook {i} differs from codebook 0 in row length or chunk size"
            )));
        }
        self.packed(first, packed)?;
        if ids.len() != packed.rows() || ids.bits() != id_bits(k) {
            return Err(self.bad(format!(
                "{} cluster ids of {} bits for {} tensors in {k} clusters",
                ids.len(),
                ids.bits(),
                packed.rows()
            )));
        }
        if let Some(i) = (0..ids.len()).find(|&i| ids.get(i).is_none_or(|c| c >= k32)) {
            return Err(self.bad(format!("tensor {i} has a cluster id ≥ {k}")));
        }
        Ok(k32)
    }
}

/// Whether a group of `dtype` may be float-coded as `t`: the dtype must be
/// that float type (`docs/FORMAT.md` §6.9); the message says why not.
pub(crate) fn float_type_fits(t: FloatType, dtype: &DType) -> std::result::Result<(), String> {
    if FloatType::of_dtype(dtype) == Some(t) {
        Ok(())
    } else {
        Err(format!("a {dtype} group cannot be float-coded as {t}"))
    }
}

/// Mark every group and piece `segs` uses; error on unknown or repeated ones.
pub(crate) fn check_envelope(
    segs: &[Segment<u32>],
    groups: &mut [bool],
    pieces: &mut [bool],
    depth: u32,
) -> std::result::Result<(), String> {
    if depth > super::manifest::MAX_ENVELOPE_DEPTH {
        return Err("the envelope nests deflate segments too deep".into());
    }
    for s in segs {
        match s {
            Segment::Raw(p) => match pieces.get_mut(*p as usize) {
                Some(seen @ false) => *seen = true,
                Some(true) => return Err(format!("the envelope uses piece {p} twice")),
                None => {
                    return Err(format!(
                        "the envelope names piece {p}, which does not exist"
                    ));
                }
            },
            Segment::Group(g) => match groups.get_mut(*g) {
                Some(seen @ false) => *seen = true,
                Some(true) => return Err(format!("the envelope uses group {g} twice")),
                None => {
                    return Err(format!(
                        "the envelope names group {g}, which does not exist"
                    ));
                }
            },
            Segment::Deflate { level, inner } => {
                if !(1..=9).contains(level) {
                    return Err(format!("deflate level {level} is not 1-9"));
                }
                check_envelope(inner, groups, pieces, depth + 1)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
