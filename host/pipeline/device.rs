//! What a device must do to fit and compress whole groups
//! ([`GroupDevice`]), and [`compress_document_on`], which hands it the
//! groups it can hold.
//!
//! The CPU is one such device (`super::cpu`), the GPU another
//! (`ibp::gpu::GpuGroups`, feature `cuda`). One orchestrator
//! (`super::group`) drives either through the same plan
//! (`super::plan`): the device fits (the same [`Fit`] as
//! [`crate::fit::fit`]: both choose by `docs/FORMAT.md` §4 through one
//! chooser) and compresses, and the sections are then copied back and
//! written a piece at a time. Every decision between raw and compressed
//! storage is the plan's, on the same sizes, so the file is byte for byte
//! the one [`super::compress_document`] writes.
//!
//! Q: why a whole group on the GPU, and not the CPU's batches?
//! A: the CPU reads each batch three or four times (sizes, flags,
//! offsets, payload) to keep host memory bounded; on the GPU the group
//! is read from the host once, and what the host holds is one piece in
//! flight. A group the GPU cannot hold is compressed on the CPU.

use std::io::Write;
use std::time::Instant;

use super::{CompressOptions, CompressReport};
use crate::codebook::Codebook;
use crate::container::SectionKind;
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::fit::{Fit, FitOptions};
use crate::io::Document;
use crate::layout::Layout;
use crate::progress::Progress;

/// A device that fits and compresses a whole group of rows: the GPU's
/// `ibp::gpu::GpuGroups` (feature `cuda`, in its own memory), or the CPU
/// (on the caller's rows). The pipeline calls, per group:
/// [`GroupDevice::load`], [`GroupDevice::fit`], [`GroupDevice::compress`],
/// [`GroupDevice::read_section`] per section in file order,
/// [`GroupDevice::verify`] when asked to, and always
/// [`GroupDevice::unload`]; which of them, and in which layout, the plan
/// decides. `'r` is how long the rows given to [`GroupDevice::load`]
/// live: a device that keeps them (the CPU) borrows them that long.
pub trait GroupDevice<'r> {
    /// A name for reports (the GPU's, e.g. "NVIDIA H200").
    fn name(&self) -> String;

    /// Copy `rows` into device memory, calling `progress` with the bytes
    /// copied so far and the rows' length. `Ok(false)` when the device cannot hold them (too
    /// large, or rows too long for its kernels): the CPU compresses that
    /// group instead.
    fn load(&mut self, rows: Rows<'r>, progress: Progress<'r>) -> Result<bool>;

    /// Fit the loaded rows: the [`Fit`] [`crate::fit::fit`] chooses for them.
    fn fit(&mut self, opts: &FitOptions) -> Result<Fit>;

    /// Compress the loaded rows with `cb` into `layout`; returns the bytes
    /// of the payload (packed) or of the slots (fixed). A device may only
    /// size them here and encode as [`GroupDevice::read_section`] reads.
    fn compress(&mut self, cb: &Codebook, layout: Layout) -> Result<u64>;

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
    fn verify(&mut self, rows: Rows<'r>, piece_bytes: usize) -> Result<()>;

    /// Free the group's device memory.
    fn unload(&mut self);
}

/// Seconds a [`GroupDevice`] spent on one group, phase by phase
/// ([`super::GroupReport::device_seconds`]); `ibp compress` prints their sums with
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
pub(super) fn timed<T>(to: &mut f64, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    *to += t.elapsed().as_secs_f64();
    r
}

/// [`super::compress_document`] with `device` compressing
/// every group it can hold ([`GroupDevice`]); the container is byte for
/// byte the one the CPU writes. The report marks the groups the device
/// compressed ([`super::GroupReport::on_device`]).
pub fn compress_document_on<W: Write>(
    doc: &Document<'_>,
    opts: &CompressOptions<'_>,
    out: W,
    device: &mut dyn for<'r> GroupDevice<'r>,
) -> Result<(W, CompressReport)> {
    super::compress_document_inner(doc, opts, out, Some(device))
}
