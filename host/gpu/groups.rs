//! The GPU as a [`GroupDevice`]: whole tensor groups fitted and compressed
//! in device memory for `ibp compress --device gpu`
//! ([`crate::container::compress_document_on`]), with the container's bytes
//! the CPU's.
//!
//! Per group: the rows are copied into device memory a piece at a time
//! (host memory holds nothing more than the caller's rows), fitted by
//! [`Gpu::fit_blocking`] and compressed by [`Gpu::compress_into_blocking`]; the sections are
//! copied back a piece at a time as the container writes them, and the
//! compressed rows are decoded on the device and compared with the input.

use std::ffi::c_void;

use cust::memory::DeviceBuffer;
use cust::stream::Stream;
use cust::sys as cu;

use super::compress::{DeviceCompressed, GpuCodebook, MAX_ROW_BYTES};
use super::decode::{DecodeOptions, DecodeStatus, Decoder, GpuDataset};
use super::driver::{copy_prefix, device_buffer, new_stream, sync};
use super::memory::Span;
use super::{Gpu, cuda_err};
use crate::Progress;
use crate::codebook::Codebook;
use crate::container::{GroupDevice, GroupLayout, SectionKind};
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::fit::{Fit, FitOptions};
use crate::layout::{Layout, flag_bytes};

/// Bytes copied to or from the device per call while loading and reading.
///
/// Q: why pieces, and not one copy of the group? A: a piece at a time lets
/// the progress bar move and keeps the driver's staging of pageable memory
/// short; at 64 MiB the per-call cost is far below the copy's.
const PIECE: usize = 64 << 20;

/// Device memory left free beside a group's buffers (the decoder's tables,
/// the fit's counters, the driver's own needs).
const HEADROOM: u64 = 256 << 20;

/// [`GroupDevice`] on one [`Gpu`]: see the module notes.
pub struct GpuGroups<'g> {
    gpu: &'g Gpu,
    stream: Stream,
    /// The loaded rows (`rows · row_bytes` bytes) and their shape.
    input: Option<(DeviceBuffer<u8>, usize, usize)>,
    /// The compressed rows and their codebook.
    out: Option<(DeviceCompressed, Codebook)>,
}

impl<'g> GpuGroups<'g> {
    /// Compress groups on `gpu` (its context current on this thread);
    /// creates a stream. Device memory is allocated per group, by
    /// [`GroupDevice::load`].
    pub fn new(gpu: &'g Gpu) -> Result<Self> {
        gpu.make_current()?;
        Ok(GpuGroups {
            gpu,
            stream: new_stream()?,
            input: None,
            out: None,
        })
    }

    fn loaded(&self) -> Result<(&DeviceBuffer<u8>, usize, usize)> {
        self.input
            .as_ref()
            .map(|(b, n, l)| (b, *n, *l))
            .ok_or_else(|| Error::invalid("no group loaded on the GPU"))
    }
}

/// Is this error the driver running out of device memory?
fn out_of_memory(e: &Error) -> bool {
    e.cuda_result() == Some(cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32)
}

impl GroupDevice for GpuGroups<'_> {
    fn name(&self) -> String {
        self.gpu.info().name.clone()
    }

    fn load(&mut self, rows: Rows<'_>, progress: Progress<'_>) -> Result<bool> {
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
        let mut at = 0;
        for part in rows.bytes().chunks(PIECE) {
            // SAFETY: `part` is readable host memory of its length, and
            // `at .. at + part.len()` lies inside `buf` (its pieces tile
            // `bytes`); the copy is synchronous.
            let r = unsafe {
                cu::cuMemcpyHtoD_v2(base + at as u64, part.as_ptr() as *const c_void, part.len())
            };
            if r != cu::CUresult::CUDA_SUCCESS {
                return Err(Error::cuda_code(
                    format!("copying a group to the GPU: {r:?}"),
                    r as u32,
                ));
            }
            at += part.len();
            progress.report(at as u64, bytes as u64);
        }
        self.input = Some((buf, n, l));
        Ok(true)
    }

    fn fit(&mut self, opts: &FitOptions) -> Result<Fit> {
        let (buf, n, l) = self.loaded()?;
        let rows =
            Span::of(buf, 0, n * l).ok_or_else(|| Error::invalid("group outside its buffer"))?;
        self.gpu.fit_blocking(&rows, l, opts)
    }

    fn compress(&mut self, cb: &Codebook, layout: GroupLayout) -> Result<u64> {
        let layout = match layout {
            GroupLayout::Coded(l) => l,
            other => {
                return Err(Error::invalid(format!(
                    "the GPU compresses packed and fixed groups, not {}",
                    other.name()
                )));
            }
        };
        let mut out = match self.out.take() {
            Some((o, _)) => o,
            None => DeviceCompressed::empty()?,
        };
        let (buf, n, l) = self.loaded()?;
        let rows =
            Span::of(buf, 0, n * l).ok_or_else(|| Error::invalid("group outside its buffer"))?;
        let gcb = GpuCodebook::new(cb)?;
        self.gpu
            .compress_into_blocking(&gcb, &rows, layout, &mut out)?;
        let len = out.data_len() as u64;
        self.out = Some((out, cb.clone()));
        Ok(len)
    }

    fn read(&mut self, kind: SectionKind, at: u64, buf: &mut [u8]) -> Result<()> {
        let (out, _) = self
            .out
            .as_ref()
            .ok_or_else(|| Error::invalid("no group compressed on the GPU"))?;
        let (addr, len) = match kind {
            SectionKind::Flags => (out.flags_addr(), flag_bytes(out.rows()) as u64),
            SectionKind::Offsets if out.layout() == Layout::Packed => {
                (out.offsets_addr(), 8 * (out.rows() as u64 + 1))
            }
            SectionKind::Payload if out.layout() == Layout::Packed => {
                (out.data_addr(), out.data_len() as u64)
            }
            SectionKind::Slots if out.layout() == Layout::FixedStride => {
                (out.data_addr(), out.data_len() as u64)
            }
            other => {
                return Err(Error::invalid(format!(
                    "the group compressed on the GPU has no {other:?} section"
                )));
            }
        };
        if at.checked_add(buf.len() as u64).is_none_or(|end| end > len) {
            return Err(Error::invalid(format!(
                "bytes {at}..+{} of a {len}-byte {kind:?} section",
                buf.len()
            )));
        }
        if buf.is_empty() {
            return Ok(());
        }
        // Offsets are u64 on the device; CUDA's hosts are little-endian, the
        // file's order, so the bytes go as they are.
        // SAFETY: the range was checked to lie inside the section's buffer,
        // `buf` is writable host memory of its length, and the copy is
        // synchronous (the compression finished in `compress_into`).
        let r =
            unsafe { cu::cuMemcpyDtoH_v2(buf.as_mut_ptr() as *mut c_void, addr + at, buf.len()) };
        if r != cu::CUresult::CUDA_SUCCESS {
            return Err(Error::cuda_code(
                format!("copying a compressed section from the GPU: {r:?}"),
                r as u32,
            ));
        }
        Ok(())
    }

    fn verify(&mut self, rows: Rows<'_>, piece_bytes: usize) -> Result<()> {
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
        let mut first = 0u64;
        while first < n {
            let count = per.min(n - first);
            dec.range(self.gpu, first, count, &mut decoded, &status, &self.stream)?;
            sync(&self.stream, "decoding for the check")?;
            status.check_blocking()?;
            let got = copy_prefix(&decoded, count as usize * l)?;
            let want = rows.slice(first as usize, (first + count) as usize).bytes();
            if got != want {
                let row = (0..count as usize)
                    .find(|&i| got[i * l..(i + 1) * l] != want[i * l..(i + 1) * l])
                    .map_or(first, |i| first + i as u64);
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
