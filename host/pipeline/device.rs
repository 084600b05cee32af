//! Compressing whole groups on a device with its own memory (the GPU),
//! writing the same container bytes as the CPU path.
//!
//! [`compress_document_on`] hands each group that the CPU path would
//! compress (packed without clusters, or fixed-stride) to a
//! [`GroupDevice`]: the device takes a copy of the rows, fits them (the
//! same [`Fit`] as [`crate::fit::fit`]: both choose by `docs/FORMAT.md` §4
//! through one chooser), compresses them, and the sections are then copied
//! back and written a piece at a time. Every decision between raw and
//! compressed storage is the CPU path's, on the same sizes, so the file is
//! byte for byte the one [`super::compress_document`] writes.
//!
//! Q: why a whole group on the device, and not the CPU path's batches?
//! A: the CPU path reads each batch three or four times (sizes, flags,
//! offsets, payload) to keep host memory bounded; on the device the group
//! is read from the host once, and what the host holds is one piece in
//! flight. A group the device cannot hold is compressed on the CPU.

use std::io::Write;
use std::time::Instant;

use super::{CompressOptions, CompressReport, GroupReport, packed_floor, popcount};
use crate::codebook::Codebook;
use crate::container::{
    ContainerWriter, GroupData, GroupLayout, GroupMeta, GroupSections, SectionKind,
};
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::fit::{Fit, FitOptions};
use crate::io::Document;
use crate::layout::Layout;
use crate::progress::Progress;

/// A device that fits and compresses a whole group of rows in its own
/// memory: the GPU's `ibp::gpu::GpuGroups` (feature `cuda`). The
/// container calls, per group: [`GroupDevice::load`], [`GroupDevice::fit`],
/// [`GroupDevice::compress`], [`GroupDevice::read`] per section piece,
/// [`GroupDevice::verify`] when asked to, and always [`GroupDevice::unload`].
pub trait GroupDevice {
    /// A name for reports (the GPU's, e.g. "NVIDIA H200").
    fn name(&self) -> String;

    /// Copy `rows` into device memory, calling `progress` with the bytes
    /// copied so far and the rows' length. `Ok(false)` when the device cannot hold them (too
    /// large, or rows too long for its kernels): the CPU compresses that
    /// group instead.
    fn load(&mut self, rows: Rows<'_>, progress: Progress<'_>) -> Result<bool>;

    /// Fit the loaded rows: the [`Fit`] [`crate::fit::fit`] chooses for them.
    fn fit(&mut self, opts: &FitOptions) -> Result<Fit>;

    /// Compress the loaded rows with `cb` into `layout` ([`GroupLayout::Coded`]`(Layout::Packed)`
    /// or `GroupLayout::Coded(Layout::FixedStride)`); returns the bytes of the payload (packed)
    /// or of the slots (fixed).
    fn compress(&mut self, cb: &Codebook, layout: GroupLayout) -> Result<u64>;

    /// Copy bytes `at .. at + buf.len()` of a section of the compressed
    /// rows ([`SectionKind::Flags`], [`SectionKind::Offsets`] as
    /// little-endian u64, [`SectionKind::Payload`] or [`SectionKind::Slots`])
    /// into `buf`.
    fn read(&mut self, kind: SectionKind, at: u64, buf: &mut [u8]) -> Result<()>;

    /// Hand bytes `0 .. len` of section `kind` (as [`GroupDevice::read`]
    /// reads them) to `sink`, in order, in pieces of about `piece` bytes.
    /// The provided method reads each piece with [`GroupDevice::read`]; a
    /// device whose copies can run ahead overrides it, so that the next
    /// piece travels while `sink` writes the last.
    fn read_section(
        &mut self,
        kind: SectionKind,
        len: u64,
        piece: usize,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let piece = u64::try_from(piece)
            .unwrap_or(u64::MAX)
            .clamp(1, len.max(1));
        let mut buf =
            vec![0u8; usize::try_from(piece).map_err(|_| Error::invalid("piece too large"))?];
        let mut at = 0u64;
        while at < len {
            let k = (len - at).min(piece) as usize;
            self.read(kind, at, &mut buf[..k])?;
            sink(&buf[..k])?;
            at += k as u64;
        }
        Ok(())
    }

    /// Decode the compressed rows on the device and compare them with
    /// `rows` (the rows loaded), about `piece_bytes` at a time. Called after
    /// the sections were read; an error fails the whole compression.
    fn verify(&mut self, rows: Rows<'_>, piece_bytes: usize) -> Result<()>;

    /// Free the group's device memory.
    fn unload(&mut self);
}

/// Seconds a [`GroupDevice`] spent on one group, phase by phase
/// ([`GroupReport::device_seconds`]); `ibp compress` prints their sums with
/// `IBP_TIMINGS=1`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceSeconds {
    /// [`GroupDevice::load`]: the rows copied to the device.
    pub load: f64,
    /// [`GroupDevice::fit`].
    pub fit: f64,
    /// [`GroupDevice::compress`].
    pub compress: f64,
    /// The sections copied back ([`GroupDevice::read`]) and written.
    pub read: f64,
    /// [`GroupDevice::verify`].
    pub verify: f64,
}

/// The phases of two reports added up.
impl std::ops::Add for DeviceSeconds {
    type Output = DeviceSeconds;

    fn add(self, other: DeviceSeconds) -> DeviceSeconds {
        DeviceSeconds {
            load: self.load + other.load,
            fit: self.fit + other.fit,
            compress: self.compress + other.compress,
            read: self.read + other.read,
            verify: self.verify + other.verify,
        }
    }
}

/// Run `f`, adding its seconds to `*to`.
fn timed<T>(to: &mut f64, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    *to += t.elapsed().as_secs_f64();
    r
}

/// [`super::compress_document`] with `device` compressing
/// every group it can hold ([`GroupDevice`]); the container is byte for
/// byte the one the CPU writes. The report marks the groups the device
/// compressed ([`GroupReport::on_device`]).
pub fn compress_document_on<W: Write>(
    doc: &Document<'_>,
    opts: &CompressOptions<'_>,
    out: W,
    device: &mut dyn GroupDevice,
) -> Result<(W, CompressReport)> {
    super::compress_document_inner(doc, opts, out, Some(device))
}

/// Whether the device path applies to groups compressed with `opts`:
/// clustered codebooks are fitted by the CPU.
pub(super) fn applies(opts: &CompressOptions) -> bool {
    opts.clusters == super::Clustering::Off
        && matches!(
            opts.layout,
            GroupLayout::Coded(Layout::Packed) | GroupLayout::Coded(Layout::FixedStride)
        )
}

/// Compress one group on `dev`, as the CPU path would store it, and write
/// it; `report` arrives as the CPU path fills it before fitting. `None`
/// when the device does not take the group.
pub(super) fn group<W: Write>(
    w: &mut ContainerWriter<W>,
    dev: &mut dyn GroupDevice,
    meta: GroupMeta,
    rows: Rows<'_>,
    opts: &CompressOptions,
    report: &mut GroupReport,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Option<u32>> {
    let mut secs = DeviceSeconds::default();
    if !timed(&mut secs.load, || dev.load(rows, Progress::new(progress)))? {
        return Ok(None);
    }
    let r = stored(w, dev, meta, rows, opts, report, &mut secs);
    dev.unload();
    report.device_seconds = Some(secs);
    r.map(Some)
}

fn stored<W: Write>(
    w: &mut ContainerWriter<W>,
    dev: &mut dyn GroupDevice,
    meta: GroupMeta,
    rows: Rows<'_>,
    opts: &CompressOptions,
    report: &mut GroupReport,
    secs: &mut DeviceSeconds,
) -> Result<u32> {
    let n = rows.rows() as u64;
    let l = rows.row_bytes() as u64;
    let total_bytes = n * l;
    let fitted = timed(&mut secs.fit, || dev.fit(&opts.fit))?;
    let cb = &fitted.codebook;
    report.threshold = Some(fitted.threshold);
    report.chunk = Some(cb.chunk());
    report.on_device = true;
    let cb_bytes = 2 * l;
    let flag_len = n.div_ceil(8);
    let piece = opts.batch_bytes.max(1 << 16);
    let layout = opts.layout;
    let packed = layout == GroupLayout::Coded(Layout::Packed);
    // The same decisions, in the same order, as the CPU path in
    // `State::group`.
    if let Some(floor) = packed_floor(n, l, cb.chunk()).filter(|&f| packed && f >= total_bytes) {
        report.raw_reason = Some(format!(
            "compressed form (at least {floor} bytes) is not smaller"
        ));
        return w.add_group(meta, GroupData::Raw(rows.bytes()));
    }
    let data = timed(&mut secs.compress, || dev.compress(cb, layout))?;
    // The sections in file order, after the codebook's 2·L bytes.
    let sections: &[(SectionKind, u64)] = if packed {
        &[
            (SectionKind::Flags, flag_len),
            (SectionKind::Offsets, 8 * (n + 1)),
            (SectionKind::Payload, data),
        ]
    } else {
        &[
            (SectionKind::Flags, flag_len),
            (SectionKind::Slots, total_bytes),
        ]
    };
    let stored = cb_bytes + sections.iter().map(|&(_, len)| len).sum::<u64>();
    if packed && stored >= total_bytes {
        report.raw_reason = Some(format!("compressed form ({stored} bytes) is not smaller"));
        return w.add_group(meta, GroupData::Raw(rows.bytes()));
    }
    let mut encoded = 0;
    let id = w.add_group_in_pieces(meta, cb, Some(fitted.threshold), layout, |s| {
        timed(&mut secs.read, || -> Result<()> {
            for &(kind, len) in sections {
                s.start(kind)?;
                let ones = copy(dev, s, kind, len, piece)?;
                if kind == SectionKind::Flags {
                    encoded = ones;
                }
            }
            Ok(())
        })?;
        if opts.verify {
            timed(&mut secs.verify, || dev.verify(rows, piece))?;
        }
        Ok(())
    })?;
    report.layout = layout;
    report.stats.encoded_rows = encoded;
    report.stats.stored_bytes = stored;
    Ok(id)
}

/// Copy `len` bytes of section `kind` from the device into the open
/// section, about `piece` bytes at a time; returns the bits set in the
/// flags section (its encoded rows), 0 for any other.
fn copy<W: Write>(
    dev: &mut dyn GroupDevice,
    s: &mut GroupSections<'_, W>,
    kind: SectionKind,
    len: u64,
    piece: usize,
) -> Result<u64> {
    let mut ones = 0u64;
    let flags = kind == SectionKind::Flags;
    dev.read_section(kind, len, piece, &mut |b| {
        if flags {
            ones += popcount(b);
        }
        s.write(b)
    })?;
    Ok(ones)
}
