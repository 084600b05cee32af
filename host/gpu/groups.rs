//! The GPU as a [`GroupDevice`]: whole tensor groups fitted and compressed
//! in device memory for `ibp compress --device gpu`
//! ([`crate::pipeline::compress_document_on`]), with the container's bytes
//! the CPU's.
//!
//! Per group: the rows are copied into device memory a piece at a time
//! (host memory holds nothing more than the caller's rows and two pinned
//! pieces), fitted by [`Fitter::fit_blocking`](super::Fitter::fit_blocking) and compressed by
//! [`Compressor::compress_into_blocking`](super::Compressor::compress_into_blocking); the sections are copied back a piece at
//! a time as the container writes them, and the compressed rows are decoded
//! on the device and compared with the input. Every copy goes through
//! [`Staging`], the next piece in flight while the host fills, writes or
//! compares the last.

use cust::memory::DeviceBuffer;
use cust::stream::Stream;

use super::compress::{Compressor, DeviceCompressed, MAX_ROW_BYTES};
use super::dataset::GpuDataset;
use super::decode::{DecodeOptions, DecodeStatus, Decoder};
use super::driver::{device_buffer, new_stream, out_of_memory};
use super::fit::Fitter;
use super::memory::Span;
use super::staging::{Staging, equal};
use super::{Gpu, cuda_err};
use crate::Progress;
use crate::codebook::Codebook;
use crate::container::SectionKind;
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::fit::{Fit, FitOptions};
use crate::layout::{Layout, flag_bytes};
use crate::pipeline::GroupDevice;

/// Rows decoded per launch of the check, in bytes (at most).
const PIECE: usize = 64 << 20;

/// Bytes of each of the two pinned pieces of [`Staging`].
///
/// Q: why 16 MiB? A: a piece costs an event wait and a thread-pool round
/// (tens of µs) against ~0.6 ms to copy it at 25–55 GB/s, and the first
/// and last pieces, which nothing overlaps, stay short. Two pieces are
/// 32 MiB of the 512 MiB bound on the CLI's anonymous memory.
const STAGE: usize = 16 << 20;

/// Device memory left free beside a group's buffers (the decoder's tables,
/// the fit's counters, the driver's own needs).
const HEADROOM: u64 = 256 << 20;

/// [`GroupDevice`] on one [`Gpu`]: see the module notes.
pub struct GpuGroups<'g> {
    gpu: &'g Gpu,
    /// Every group's fit (its buffers kept from one group to the next).
    fitter: Fitter<'g>,
    stream: Stream,
    /// The loaded rows (`rows · row_bytes` bytes) and their shape.
    input: Option<(DeviceBuffer<u8>, usize, usize)>,
    /// The compressed rows and their codebook.
    out: Option<(DeviceCompressed, Codebook)>,
    /// Pinned pieces for every copy, allocated by the first load.
    staging: Option<Staging>,
}

impl<'g> GpuGroups<'g> {
    /// Compress groups on `gpu` (its context current on this thread);
    /// creates a stream. Device memory is allocated per group, by
    /// [`GroupDevice::load`].
    pub fn new(gpu: &'g Gpu) -> Result<Self> {
        gpu.make_current()?;
        Ok(GpuGroups {
            gpu,
            fitter: Fitter::new(gpu),
            stream: new_stream()?,
            input: None,
            out: None,
            staging: None,
        })
    }

    fn loaded(&self) -> Result<(&DeviceBuffer<u8>, usize, usize)> {
        self.input
            .as_ref()
            .map(|(b, n, l)| (b, *n, *l))
            .ok_or_else(|| Error::invalid("no group loaded on the GPU"))
    }

    /// The device address and length of section `kind` of the compressed
    /// rows.
    fn section(&self, kind: SectionKind) -> Result<(u64, u64)> {
        let (out, _) = self
            .out
            .as_ref()
            .ok_or_else(|| Error::invalid("no group compressed on the GPU"))?;
        match kind {
            SectionKind::Flags => Ok((out.flags_addr(), flag_bytes(out.rows()) as u64)),
            SectionKind::Offsets if out.layout() == Layout::Packed => {
                Ok((out.offsets_addr(), 8 * (out.rows() as u64 + 1)))
            }
            SectionKind::Payload if out.layout() == Layout::Packed => {
                Ok((out.data_addr(), out.data_len() as u64))
            }
            SectionKind::Slots if out.layout() == Layout::FixedStride => {
                Ok((out.data_addr(), out.data_len() as u64))
            }
            other => Err(Error::invalid(format!(
                "the group compressed on the GPU has no {other:?} section"
            ))),
        }
    }
}

/// The staging pieces, allocated on first use.
fn staging(s: &mut Option<Staging>) -> Result<&mut Staging> {
    if s.is_none() {
        *s = Some(Staging::new(STAGE)?);
    }
    Ok(s.as_mut().expect("allocated above"))
}

impl<'r> GroupDevice<'r> for GpuGroups<'_> {
    fn name(&self) -> String {
        self.gpu.info().name.clone()
    }

    fn load(&mut self, rows: Rows<'r>, progress: Progress<'r>) -> Result<bool> {
        self.unload();
        let (n, l) = (rows.rows(), rows.row_bytes());
        let bytes = rows.bytes().len();
        if n == 0 || l == 0 || l > MAX_ROW_BYTES {
            return Ok(false);
        }
        // The input, the compressed form (at most as large), and per row a
        // size, an offset and scan partials; the decoder's output piece.
        let need = (3 * bytes as u64)
            .saturating_add(24 * n as u64)
            .saturating_add(PIECE as u64)
            .saturating_add(HEADROOM);
        let (free, _) = cust::memory::mem_get_info().map_err(cuda_err("reading free memory"))?;
        if need > free as u64 {
            return Ok(false);
        }
        let buf = match device_buffer::<u8>(bytes, "allocating the group on the GPU") {
            Ok(b) => b,
            Err(e) if out_of_memory(&e) => return Ok(false),
            Err(e) => return Err(e),
        };
        let base = buf.as_device_ptr().as_raw();
        let stage = staging(&mut self.staging)?;
        // SAFETY: `buf` holds `bytes` = `rows.bytes().len()` bytes of device
        // memory of the current context, used by nothing else until `upload`
        // returns (after its last copy).
        unsafe {
            stage.upload(rows.bytes(), base, &self.stream, &mut |at| {
                progress.report(at, bytes as u64)
            })?
        };
        self.input = Some((buf, n, l));
        Ok(true)
    }

    fn fit(&mut self, opts: &FitOptions) -> Result<Fit> {
        let (buf, n, l) = self.loaded()?;
        let rows =
            Span::of(buf, 0, n * l).ok_or_else(|| Error::invalid("group outside its buffer"))?;
        self.fitter.fit_blocking(&rows, l, opts)
    }

    fn compress(&mut self, cb: &Codebook, layout: Layout) -> Result<u64> {
        let mut out = match self.out.take() {
            Some((o, _)) => o,
            None => DeviceCompressed::empty()?,
        };
        let (buf, n, l) = self.loaded()?;
        let rows =
            Span::of(buf, 0, n * l).ok_or_else(|| Error::invalid("group outside its buffer"))?;
        Compressor::new(self.gpu, cb)?.compress_into_blocking(&rows, layout, &mut out)?;
        let len = out.data_len() as u64;
        self.out = Some((out, cb.clone()));
        Ok(len)
    }

    fn read(&mut self, kind: SectionKind, at: u64, buf: &mut [u8]) -> Result<()> {
        let (addr, len) = self.section(kind)?;
        if at.checked_add(buf.len() as u64).is_none_or(|end| end > len) {
            return Err(Error::invalid(format!(
                "bytes {at}..+{} of a {len}-byte {kind:?} section",
                buf.len()
            )));
        }
        let mut got = 0;
        let stage = staging(&mut self.staging)?;
        // SAFETY: the range was checked to lie inside the section's device
        // buffer, which nothing writes once the compression finished.
        unsafe {
            stage.download(addr + at, buf.len() as u64, &self.stream, &mut |piece| {
                buf[got..got + piece.len()].copy_from_slice(piece);
                got += piece.len();
                Ok(())
            })
        }
    }

    fn read_section(
        &mut self,
        kind: SectionKind,
        len: u64,
        _piece: usize,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let (addr, have) = self.section(kind)?;
        if len > have {
            return Err(Error::invalid(format!(
                "{len} bytes of a {have}-byte {kind:?} section"
            )));
        }
        // Offsets are u64 on the device; CUDA's hosts are little-endian, the
        // file's order, so the bytes go as they are.
        let stage = staging(&mut self.staging)?;
        // SAFETY: `addr .. addr + len` lies inside the section's device
        // buffer, which nothing writes once the compression finished.
        unsafe { stage.download(addr, len, &self.stream, sink) }
    }

    fn verify(&mut self, rows: Rows<'r>, piece_bytes: usize) -> Result<()> {
        let (out, cb) = self
            .out
            .take()
            .ok_or_else(|| Error::invalid("no group compressed on the GPU"))?;
        let l = rows.row_bytes();
        let n = rows.rows() as u64;
        if out.rows() as u64 != n || cb.row_bytes() != l {
            return Err(Error::invalid("verifying other rows than were compressed"));
        }
        let ds = GpuDataset::from_device_compressed(self.gpu, &cb, out)?;
        let dec = Decoder::new(self.gpu, &ds, &DecodeOptions::default())?;
        let mut status = DecodeStatus::new()?;
        let per = (piece_bytes.min(PIECE) / l).max(1) as u64;
        let mut decoded = device_buffer::<u8>(per as usize * l, "allocating the check buffer")?;
        let stage = staging(&mut self.staging)?;
        let mut first = 0u64;
        while first < n {
            let count = per.min(n - first);
            dec.range(self.gpu, first, count, &mut decoded, &status, &self.stream)?;
            let want = rows.slice(first as usize, (first + count) as usize).bytes();
            // The first differing byte of the block, if any.
            let mut at = 0usize;
            let mut differs = None;
            // SAFETY: the copies read the first count·L bytes of `decoded`,
            // after the decode enqueued before them on the same stream;
            // nothing else writes it during the call.
            unsafe {
                stage.download(
                    decoded.as_device_ptr().as_raw(),
                    count * l as u64,
                    &self.stream,
                    &mut |got| {
                        let w = &want[at..at + got.len()];
                        if differs.is_none() && !equal(got, w) {
                            differs = got.iter().zip(w).position(|(a, b)| a != b).map(|i| at + i);
                        }
                        at += got.len();
                        Ok(())
                    },
                )?
            };
            // The decoder's own report first: it names a corrupt tensor.
            status.check_blocking()?;
            if let Some(byte) = differs {
                let row = first + (byte / l) as u64;
                return Err(Error::corrupt(format!(
                    "verification failed: row {row} does not decompress to its input on the GPU; this is an ibp bug, please report it (--device cpu compresses without the GPU)"
                )));
            }
            first += count;
        }
        Ok(())
    }

    fn unload(&mut self) {
        self.out = None;
        self.input = None;
    }
}
