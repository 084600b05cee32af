//! The compression pipeline: a [`crate::io::Document`] into an `.ibp`
//! container ([`crate::container`]). Per group it decides how the group is
//! stored (raw, packed, fixed-stride or clustered), fits and compresses it
//! on the CPU or on a [`GroupDevice`], verifies it, and hands its sections
//! to the [`crate::container::ContainerWriter`].
//!
//! - [`compress_document`] compresses on the CPU;
//!   [`compress_document_on`] hands the groups it can hold to a device.
//! - [`CompressOptions`] says how; [`CompressReport`] says what happened.
//!
//! # Example
//!
//! ```
//! use ibp::container::IbpFile;
//! use ibp::io::{self, DType, ParseOptions, SourceFormat};
//! use ibp::pipeline::{CompressOptions, compress_document};
//!
//! // A raw file of little-endian f32: 512 rows of 128 values.
//! let values: Vec<f32> = (0..65_536).map(|i| (i % 7) as f32).collect();
//! let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
//! let opts = ParseOptions::default().with_raw(DType::F32, Some(vec![512, 128]));
//! let doc = io::parse(&raw, SourceFormat::Raw, &opts)?;
//! let (bytes, report) = compress_document(&doc, &CompressOptions::default(), Vec::new())?;
//! assert_eq!(report.groups[0].raw_reason, None); // compressed
//! assert_eq!(IbpFile::from_bytes(&bytes)?.restore_to_vec()?, raw);
//! # Ok::<(), ibp::Error>(())
//! ```

// No unsafe code in the pipeline: devices that need it implement
// `GroupDevice` in their own modules.
#![forbid(unsafe_code)]

mod clustered;
mod cpu;
mod device;
mod float;
mod group;
mod layouts;
mod plan;

use std::collections::BTreeMap;
use std::io::Write;

pub use clustered::{Clustering, MAX_CLUSTERED_GROUP_BYTES, MAX_CLUSTERS};
pub use device::{DeviceSeconds, GroupDevice, compress_document_on};
pub use float::Coding;

use crate::cluster::ClusterOptions;
use crate::codebook::{ChunkSize, Threshold};
use crate::container::{ContainerWriter, GroupLayout, GroupMeta, GroupStats, SourceInfo};
use crate::error::{Error, Result};
use crate::fit::FitOptions;
use crate::io::{Document, Segment, TensorGroup};
use crate::layout::Layout;
use crate::progress::{Progress, notify};
use group::Group;
use plan::{Facts, device_applies};

/// Options of [`compress_document`] and [`compress_document_on`].
#[derive(Clone, Debug)]
pub struct CompressOptions<'a> {
    /// How codebooks are fitted.
    pub fit: FitOptions,
    /// Layout of compressed groups: [`GroupLayout::Coded`] with
    /// [`Layout::Packed`] (default, the small one) or
    /// [`Layout::FixedStride`] (random access by index, never smaller than
    /// the input), or [`GroupLayout::Raw`] (store everything as is).
    pub layout: GroupLayout,
    /// Groups with fewer rows are stored raw: a codebook costs `2 L` bytes
    /// and cannot pay for itself over a handful of rows.
    pub min_rows: u64,
    /// Row length in elements for named groups, overriding the default
    /// split (`rows = shape[0]`); see [`crate::io::row_shape`].
    pub row_len: BTreeMap<String, u64>,
    /// Decompress every compressed group again and compare with the input
    /// before writing it (default on: the original may be deleted next).
    pub verify: bool,
    /// Memory for one batch of rows: a group is compressed, verified and
    /// written one batch at a time, so compression holds about this much
    /// whatever the input's size (default [`DEFAULT_BATCH_BYTES`]). A
    /// batch holds at least one row. The output does not depend on it.
    pub batch_bytes: usize,
    /// Clustered codebooks for packed groups (default [`Clustering::Off`]).
    pub clusters: Clustering,
    /// How clusters are fitted and swept (its `fit` is replaced by
    /// [`CompressOptions::fit`]).
    pub cluster_options: ClusterOptions,
    /// Which coding groups are stored with: IBP (default), float coding
    /// where it applies, or per group whichever is smaller ([`Coding`]).
    pub coding: Coding,
    /// Called with the input bytes processed so far and the input's length
    /// (default none).
    pub progress: Option<Progress<'a>>,
}

/// The default [`CompressOptions::batch_bytes`]: 64 MiB.
///
/// Q: why 64 MiB? A: large enough that each batch keeps every core busy
/// (the codec splits a batch into 64 KiB blocks) and the per-batch costs
/// (three short passes, a write) vanish; small enough that a batch, its
/// stored sizes and offsets stay far below the 512 MiB docs/GUARANTEES.md promises.
pub const DEFAULT_BATCH_BYTES: usize = 64 << 20;

impl Default for CompressOptions<'_> {
    fn default() -> Self {
        CompressOptions {
            fit: FitOptions::default(),
            layout: GroupLayout::Coded(Layout::Packed),
            min_rows: 2,
            row_len: BTreeMap::new(),
            verify: true,
            batch_bytes: DEFAULT_BATCH_BYTES,
            clusters: Clustering::Off,
            cluster_options: ClusterOptions::default(),
            coding: Coding::default(),
            progress: None,
        }
    }
}

impl<'a> CompressOptions<'a> {
    /// Fit codebooks with these options.
    pub fn with_fit(mut self, fit: FitOptions) -> Self {
        self.fit = fit;
        self
    }

    /// Store compressed groups in this layout.
    pub fn with_layout(mut self, layout: GroupLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Store groups with fewer rows raw.
    pub fn with_min_rows(mut self, min_rows: u64) -> Self {
        self.min_rows = min_rows;
        self
    }

    /// Cut group `name` into rows of `elems` elements.
    pub fn with_row_len(mut self, name: impl Into<String>, elems: u64) -> Self {
        self.row_len.insert(name.into(), elems);
        self
    }

    /// Check each compressed group by decompressing it (default on).
    pub fn with_verify(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// Use clustered codebooks for packed groups ([`Clustering`]).
    pub fn with_clusters(mut self, clusters: Clustering) -> Self {
        self.clusters = clusters;
        self
    }

    /// Fit and sweep clusters with these options.
    pub fn with_cluster_options(mut self, opts: ClusterOptions) -> Self {
        self.cluster_options = opts;
        self
    }

    /// Store groups with this coding ([`Coding`]).
    pub fn with_coding(mut self, coding: Coding) -> Self {
        self.coding = coding;
        self
    }

    /// Compress in batches of about `bytes` of memory (see
    /// [`CompressOptions::batch_bytes`]).
    pub fn with_batch_bytes(mut self, bytes: usize) -> Self {
        self.batch_bytes = bytes;
        self
    }

    /// Report progress to `hook` (see [`Progress`]).
    pub fn with_progress(mut self, hook: &'a (dyn Fn(u64, u64) + Sync)) -> Self {
        self.progress = Some(Progress::new(hook));
        self
    }
}

/// What happened to one group.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupReport {
    /// Tensor name.
    pub name: String,
    /// How it was stored ([`GroupLayout::Float`] when float-coded).
    pub layout: GroupLayout,
    /// Sizes.
    pub stats: GroupStats,
    /// Bytes IBP's form took (its sections: raw, packed, fixed or
    /// clustered, as IBP alone would store it), when it was worked out:
    /// not when [`Coding::Float`] coded the group, nor for groups stored
    /// raw before any fit.
    pub ibp_bytes: Option<u64>,
    /// Bytes the float-coded form took (table, index and payload), when
    /// float coding was tried: [`Coding::Auto`] or [`Coding::Float`] on a
    /// float dtype.
    pub float_bytes: Option<u64>,
    /// Fitted threshold and chunk size (compressed groups).
    pub threshold: Option<Threshold>,
    /// Chunk size of the codebook (compressed groups).
    pub chunk: Option<ChunkSize>,
    /// Number of clusters (clustered groups).
    pub clusters: Option<usize>,
    /// Why it is stored raw, when it is.
    pub raw_reason: Option<String>,
    /// What else a person should know about how it was stored: clustering
    /// asked for but not done, or done with fewer clusters than asked.
    pub note: Option<String>,
    /// Whether a [`GroupDevice`] fitted and compressed it
    /// ([`compress_document_on`]); the bytes are the same either way.
    pub on_device: bool,
    /// Where the device's time went, for groups it compressed.
    pub device_seconds: Option<DeviceSeconds>,
}

/// What [`compress_document`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct CompressReport {
    /// Per group, in order.
    pub groups: Vec<GroupReport>,
    /// Bytes of the original file.
    pub input_bytes: u64,
    /// Bytes of the container.
    pub output_bytes: u64,
    /// The document's notes (members kept verbatim and why).
    pub notes: Vec<String>,
    /// Tensors under [`TINY_TENSOR_BYTES`] kept verbatim in the envelope
    /// (no group, no report of their own).
    pub verbatim_tensors: u64,
    /// Their bytes.
    pub verbatim_bytes: u64,
}

/// Compress `doc` into a container written to `out`; returns `out` and a
/// report. Input bytes processed go to `opts.progress`.
///
/// Each group is cut into rows ([`crate::io::row_shape`], with
/// `opts.row_len` overrides) and fitted; then it is compressed, optionally
/// verified and written one batch of rows at a time
/// ([`CompressOptions::batch_bytes`]), so that memory does not grow with
/// the input: the flag bitmap, the offsets table and the payload (or the
/// slots) each come from their own pass over the batches, sizing each
/// batch again instead of holding a stored size per row. Groups that are
/// empty, 0-D or 1-D (without an override), shorter than `opts.min_rows`,
/// or whose compressed form would not be smaller are stored raw. Raw
/// envelope bytes become pieces.
pub fn compress_document<W: Write>(
    doc: &Document<'_>,
    opts: &CompressOptions<'_>,
    out: W,
) -> Result<(W, CompressReport)> {
    compress_document_inner(doc, opts, out, None)
}

/// [`compress_document`], with an optional device for the groups it can
/// hold ([`compress_document_on`]).
fn compress_document_inner<W: Write>(
    doc: &Document<'_>,
    opts: &CompressOptions<'_>,
    out: W,
    device: Option<&mut dyn for<'r> GroupDevice<'r>>,
) -> Result<(W, CompressReport)> {
    let total = doc.group_bytes() + doc.raw_bytes();
    let mut w = ContainerWriter::new(out)?;
    w.set_source(Some(SourceInfo::new(doc.format, doc.original)));
    for n in &doc.notes {
        w.add_note(n.clone());
    }
    let mut state = State {
        w,
        done: 0,
        total,
        progress: opts.progress,
        reports: std::collections::BTreeMap::new(),
        ids: vec![None; doc.groups.len()],
        device,
        verbatim: (0, 0),
    };
    let envelope = state.segments(doc, &doc.envelope, opts)?;
    if let Some(g) = state.ids.iter().position(Option::is_none) {
        return Err(Error::invalid(format!(
            "the document's envelope does not use group {g}"
        )));
    }
    let (out, output_bytes) = state.w.finish(&envelope)?;
    let report = CompressReport {
        groups: state.reports.into_values().collect(),
        input_bytes: doc.original.len,
        output_bytes,
        notes: doc.notes.clone(),
        verbatim_tensors: state.verbatim.0,
        verbatim_bytes: state.verbatim.1,
    };
    Ok((out, report))
}

struct State<'p, 'd, W: Write> {
    w: ContainerWriter<W>,
    done: u64,
    total: u64,
    progress: Option<Progress<'p>>,
    /// By group index, for the groups written (not the tensors kept
    /// verbatim): a report is some hundred bytes, so no slot is held for
    /// a tensor that has none.
    reports: std::collections::BTreeMap<usize, GroupReport>,
    ids: Vec<Option<u32>>,
    device: Option<&'d mut dyn for<'r> GroupDevice<'r>>,
    /// Tensors kept verbatim in the envelope for their size, and their
    /// bytes.
    verbatim: (u64, u64),
}

/// Tensors smaller than this are kept verbatim in the envelope, with the
/// raw bytes around them, instead of becoming groups.
///
/// Q: why? A: a group costs a manifest entry, a directory entry per
/// section and padding to 64 bytes, about 300 bytes of file and as much of
/// memory while compressing, while a tensor this small cannot save that
/// much (its codebook alone is twice a row). A safetensors file of a
/// million tiny tensors became a container 3.7 times its size, and its
/// compression held 2.3 GiB (issue 38).
pub const TINY_TENSOR_BYTES: u64 = 256;

/// Parts of one envelope piece at most (raw bytes and tiny tensors in a
/// row), so that a run of a million tiny tensors is not one list.
const MAX_RUN_PARTS: usize = 4096;

/// The group id of a tensor kept verbatim (no group).
const VERBATIM: u32 = u32::MAX;

impl<W: Write> State<'_, '_, W> {
    fn segments(
        &mut self,
        doc: &Document<'_>,
        segs: &[Segment<std::borrow::Cow<'_, [u8]>>],
        opts: &CompressOptions,
    ) -> Result<Vec<Segment<u32>>> {
        let mut out = Vec::new();
        // Raw bytes and tiny tensors in a row, written as one piece.
        let mut run: Vec<&[u8]> = Vec::new();
        for s in segs {
            match s {
                Segment::Raw(bytes) => self.run_push(&mut run, &mut out, bytes)?,
                Segment::Group(i) => {
                    if *i >= doc.groups.len() {
                        return Err(Error::invalid(format!(
                            "the document's envelope names group {i}, which does not exist"
                        )));
                    }
                    if self.ids[*i].is_some() {
                        return Err(Error::invalid(format!(
                            "the document's envelope uses group {i} twice"
                        )));
                    }
                    let g = &doc.groups[*i];
                    if doc.is_inflated(*i) && (g.data.len() as u64) < TINY_TENSOR_BYTES {
                        self.ids[*i] = Some(VERBATIM);
                        self.verbatim.0 += 1;
                        self.verbatim.1 += g.data.len() as u64;
                        self.run_push(&mut run, &mut out, &g.data)?;
                        continue;
                    }
                    self.run_flush(&mut run, &mut out)?;
                    // A deferred npz member is inflated here and
                    // dropped once written: one member in memory at a
                    // time.
                    let g = doc.group_with_data(*i)?;
                    let (id, report) = self.group(&g, opts)?;
                    self.ids[*i] = Some(id);
                    self.reports.insert(*i, report);
                    out.push(Segment::Group(id as usize));
                }
                Segment::Deflate { level, inner } => {
                    self.run_flush(&mut run, &mut out)?;
                    let inner = self.segments(doc, inner, opts)?;
                    out.push(Segment::Deflate {
                        level: *level,
                        inner,
                    });
                }
            }
        }
        self.run_flush(&mut run, &mut out)?;
        Ok(out)
    }

    /// Add `bytes` to the run of raw bytes; a run of [`MAX_RUN_PARTS`]
    /// parts is written out.
    fn run_push<'b>(
        &mut self,
        run: &mut Vec<&'b [u8]>,
        out: &mut Vec<Segment<u32>>,
        bytes: &'b [u8],
    ) -> Result<()> {
        if run.len() == MAX_RUN_PARTS {
            self.run_flush(run, out)?;
        }
        run.push(bytes);
        self.done += bytes.len() as u64;
        notify(self.progress, self.done, self.total);
        Ok(())
    }

    /// Write the run of raw bytes as one piece.
    fn run_flush(&mut self, run: &mut Vec<&[u8]>, out: &mut Vec<Segment<u32>>) -> Result<()> {
        if !run.is_empty() {
            out.push(Segment::Raw(self.w.add_piece_parts(run)?));
            run.clear();
        }
        Ok(())
    }

    fn group(&mut self, g: &TensorGroup<'_>, opts: &CompressOptions) -> Result<(u32, GroupReport)> {
        let base = self.done;
        let (progress, total) = (self.progress, self.total);
        let shape = g.row_shape(opts.row_len.get(&g.name).copied())?;
        if shape.total_bytes() != g.data.len() as u64 {
            return Err(Error::invalid(format!(
                "group {:?}: shape {:?} of {} needs {} bytes, the data has {}",
                g.name,
                g.shape,
                g.dtype,
                shape.total_bytes(),
                g.data.len()
            )));
        }
        let meta = GroupMeta::new(
            g.name.clone(),
            g.dtype.clone(),
            g.shape.clone(),
            shape.rows,
            shape.row_bytes,
            &g.data,
        );
        let facts = Facts {
            layout: opts.layout,
            clustering: opts.clusters,
            fit_chunk: opts.fit.chunk,
            min_rows: opts.min_rows,
            rows: shape.rows,
            row_bytes: shape.row_bytes,
            dims: g.shape.len(),
            row_len_given: opts.row_len.contains_key(&g.name),
            chunk: None,
            data: None,
            clustered: None,
        };
        let mut report = GroupReport {
            name: g.name.clone(),
            layout: GroupLayout::Raw,
            stats: GroupStats {
                rows: shape.rows,
                encoded_rows: 0,
                original_bytes: shape.total_bytes(),
                stored_bytes: shape.total_bytes(),
            },
            ibp_bytes: None,
            float_bytes: None,
            threshold: None,
            chunk: None,
            clusters: None,
            raw_reason: None,
            note: None,
            on_device: false,
            device_seconds: None,
        };
        let device = match self.device.as_deref_mut() {
            Some(d) if device_applies(opts.layout, opts.clusters) => Some(d),
            _ => None,
        };
        let hook = |b, _| notify(progress, base + b, total);
        let group = Group {
            meta,
            data: &g.data,
            facts,
        };
        let id = group::store(
            &mut self.w,
            device.map(|d| d as &mut dyn GroupDevice<'_>),
            group,
            opts,
            &mut report,
            Progress::new(&hook),
        )
        .map_err(|e| in_group(e, &g.name))?;
        if report.raw_reason.is_some() {
            report.threshold = None;
            report.chunk = None;
            report.clusters = None;
        }
        self.done = base + shape.total_bytes();
        notify(self.progress, self.done, self.total);
        Ok((id, report))
    }
}

fn popcount(flags: &[u8]) -> u64 {
    // Eight bytes at a time: without the `popcnt` instruction (the default
    // x86-64 target) a byte-wise count runs at about 1 GB/s, a word-wise one
    // at over 10.
    let (words, tail) = flags.as_chunks::<8>();
    let ones: u64 = words
        .iter()
        .map(|w| u64::from(u64::from_le_bytes(*w).count_ones()))
        .sum();
    ones + tail.iter().map(|b| u64::from(b.count_ones())).sum::<u64>()
}

fn in_group(e: Error, name: &str) -> Error {
    Error::new(e.kind(), format!("group {name:?}: {}", e.message()))
}
