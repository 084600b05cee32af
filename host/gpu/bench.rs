//! The benchmark harness's hooks into the GPU path's internals (feature
//! `bench-hooks`; hidden from the docs, no part of the API): what `ibp
//! bench` (the package `ibp-cli`, whose measurements are `ibp_cli::measure`)
//! cannot do through the public API.
//!
//! - the raw copies the driver layer owns ([`copy_to_device_async`],
//!   [`copy_device_to_device_async`], [`copy_to_pinned_async`]) and its
//!   [`Event`]: the copy rooflines the decode rates are set against, and
//!   nvCOMP's measured paths;
//! - [`Compressor::profile_stages`]: the fit's and the encoder's internal
//!   stages (the evaluation pass, the encoder's kernels) timed one by one,
//!   for `ibp bench --stages`.
//!
//! Everything that only measures through the public API (event timing,
//! decodes and gathers in each storage and residency) is in the command
//! line's package.

use cust::memory::DeviceBuffer;
use cust::stream::Stream;

use super::compress::{
    Compressor, GpuCodebook, WARP_BLOCK, Work, encoder_out_bytes, row_count, warp_grid,
};
use super::cuda_err;
use super::driver::copy_to_host_blocking;
use super::driver::{copy, copy_elements, device_buffer, new_stream, sync, zero_async};
use super::fit::{FitPhases, Fitter};
use super::kernels;
use super::memory::{GpuReadable, PinnedBuffer};
use crate::error::Result;
use crate::fit::{FitOptions, Sample};
use crate::kernel_tables::eval_book;
use ibp_kernels::params::MeasureParams;

/// An event for ordering streams, for the measurement code outside the
/// library (`ibp bench --peers`).
pub use super::driver::Event;

/// Enqueue a copy of `src` (host memory; pinned, for the copy to be
/// asynchronous) to device address `dst` on `stream`: the DMA the
/// measurement code outside the library times.
///
/// # Safety
/// 1. `dst .. dst + src.len()` is device memory of the current context.
/// 2. Both ranges stay allocated, `src` unwritten and `dst` untouched by
///    other work, until the copy is done (the stream is synchronised).
pub unsafe fn copy_to_device_async(dst: u64, src: &[u8], stream: &Stream) -> Result<()> {
    // SAFETY: the caller's obligations 1–2 are the driver call's.
    unsafe { copy::htod_async(dst, src.as_ptr(), src.len(), stream, "host-to-device copy") }
}

/// Enqueue a device-to-device copy of `bytes` bytes from device address
/// `src` to `dst` on `stream`: the roofline the measurement code outside the
/// library times device-resident decode against.
///
/// # Safety
/// 1. `src .. src + bytes` and `dst .. dst + bytes` are device memory of
///    the current context, and they do not overlap.
/// 2. Both stay allocated, and no other work writes `src` or touches `dst`
///    unordered with the copy, until it is done (the stream is synchronised).
pub unsafe fn copy_device_to_device_async(
    dst: u64,
    src: u64,
    bytes: usize,
    stream: &Stream,
) -> Result<()> {
    // SAFETY: the caller's obligations 1–2 are the driver call's.
    unsafe { copy::dtod_async(dst, src, bytes, stream, "device copy") }
}

/// Enqueue a copy of the first `bytes` bytes of `src` (device memory) into
/// `dst` (pinned host memory) on `stream`: the device-to-host DMA the
/// measurement code outside the library times.
pub fn copy_to_pinned_async(
    src: &DeviceBuffer<u8>,
    dst: &mut PinnedBuffer<u8>,
    bytes: usize,
    stream: &Stream,
) -> Result<()> {
    super::driver::copy_to_pinned(src, dst, bytes, stream)
}

impl Compressor<'_> {
    /// Time each stage of fitting and compressing the rows in `src` on its
    /// own (median of `reps` runs, each launch followed by a synchronisation):
    /// `(stage, seconds)`. For `ibp bench --stages`; the stages run
    /// back-to-back in [`Fitter::fit_blocking`] and
    /// [`Compressor::compress_blocking`].
    #[doc(hidden)]
    pub fn profile_stages<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        reps: usize,
    ) -> Result<Vec<(&'static str, f64)>> {
        let l = self.codebook().row_bytes();
        let fitter = Fitter::new(self.gpu());
        let rows = row_count(src, l)?;
        let stream = new_stream()?;
        let t = Timer {
            stream: &stream,
            reps,
        };
        let mut out = fit_phases(&fitter, src, l, reps)?;
        out.push((
            "the codebook to the GPU: GpuCodebook::new (allocate, upload, free the old one)",
            t.time(&mut || GpuCodebook::new(self.codebook()).map(drop))?,
        ));
        let mut replaced = GpuCodebook::new(self.codebook())?;
        out.push((
            "the codebook to the GPU: GpuCodebook::replace (upload into its buffer)",
            t.time(&mut || replaced.replace(self.codebook()))?,
        ));
        let mut counts = DeviceBuffer::<u64>::zeroed(8 * l).map_err(cuda_err("allocating"))?;
        out.push((
            "count bits",
            t.time(&mut || fitter.count_bits(src, l, &mut counts, &stream))?,
        ));
        self.profile_eval(&fitter, src, rows, &t, &mut out)?;
        self.profile_encode(src, rows, &t, &mut out)?;
        Ok(out)
    }

    /// The fit's evaluation of 6 thresholds, on counts of `src` from zero.
    fn profile_eval<S: GpuReadable + ?Sized>(
        &self,
        fitter: &Fitter<'_>,
        src: &S,
        rows: usize,
        t: &Timer<'_>,
        out: &mut Vec<(&'static str, f64)>,
    ) -> Result<()> {
        let l = self.codebook().row_bytes();
        let stream = t.stream;
        // The timed runs added up their counts: count once more, from zero,
        // for the books the evaluation weighs (with the sums of several
        // runs every bit looked invariant, no word matched, and the timed
        // pass was not the fit's).
        let mut counts = DeviceBuffer::<u64>::zeroed(8 * l).map_err(cuda_err("allocating"))?;
        fitter.count_bits(src, l, &mut counts, stream)?;
        sync(stream, "counting bits")?;
        let cpu_counts = copy_to_host_blocking(&counts)?;
        let books: Vec<(Vec<u8>, Vec<u8>)> = crate::codebook::Threshold::default_sweep()
            .iter()
            .map(|&t| crate::codebook::mask_and_bitval(&cpu_counts, rows as u64, t))
            .collect();
        let book = DeviceBuffer::from_slice(&eval_book(&books)).map_err(cuda_err("uploading"))?;
        let totals = DeviceBuffer::<u64>::zeroed(64).map_err(cuda_err("allocating"))?;
        let p = MeasureParams {
            src: src.device_addr(),
            stride: l as u64,
            rows: rows as u64,
            sample: rows as u64,
            row_bytes: l as u64,
            book: book.as_device_ptr().as_raw(),
            totals: totals.as_device_ptr().as_raw(),
            nt: books.len() as u32,
            ..Default::default()
        };
        let grid = warp_grid(self.gpu(), kernels::FIT_EVAL, rows as u64)?;
        out.push((
            "evaluate 6 thresholds",
            // SAFETY: as in fit_counted.
            t.time(&mut || unsafe {
                self.gpu()
                    .launch(kernels::FIT_EVAL, grid, WARP_BLOCK, 0, stream, p)
            })?,
        ));
        Ok(())
    }

    /// The compression's stages, each on its own: size, scan, zero, clear,
    /// the encoders, and (rows of whole words) the slot encoders and the
    /// compaction.
    fn profile_encode<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        rows: usize,
        t: &Timer<'_>,
        out: &mut Vec<(&'static str, f64)>,
    ) -> Result<()> {
        let l = self.codebook().row_bytes();
        let stream = t.stream;
        let mut work = Work::new(rows)?;
        work.ensure(rows)?;
        out.push((
            "size",
            t.time(&mut || self.enqueue_size(src.device_addr(), rows, &work.sizes, None, stream))?,
        ));
        out.push((
            "scan",
            t.time(&mut || self.enqueue_scan(&work, rows, l, true, 0, stream))?,
        ));
        let data = device_buffer::<u8>(encoder_out_bytes(rows * l), "allocating")?;
        out.push((
            "zero the output (fixed)",
            t.time(&mut || zero_async(&data, rows * l, stream))?,
        ));
        let padded = encoder_out_bytes(rows * l);
        out.push((
            "clear where writes meet (packed)",
            t.time(&mut || self.enqueue_clear(rows, &work, padded, &data, padded, stream))?,
        ));
        out.push((
            "encode (packed)",
            t.time(&mut || {
                self.enqueue_encode(
                    (src.device_addr(), l as u64),
                    rows,
                    &work,
                    true,
                    &data,
                    stream,
                )
            })?,
        ));
        out.push((
            "encode (fixed)",
            t.time(&mut || {
                self.enqueue_encode(
                    (src.device_addr(), l as u64),
                    rows,
                    &work,
                    false,
                    &data,
                    stream,
                )
            })?,
        ));
        if l.is_multiple_of(4) {
            // Last: they write the sizes the stages above read. Into the
            // fixed-stride slots, then into scratch slots for the packed
            // layout (the tails left as they are; the scan gives offsets,
            // the compaction moves the bytes).
            for (stage, scratch) in [
                (
                    "encode (fixed, nothing measured: the slot's tail and raw rows written by the encoder)",
                    false,
                ),
                (
                    "encode into scratch slots (packed through slots: no tails written)",
                    true,
                ),
            ] {
                out.push((
                    stage,
                    t.time(&mut || {
                        self.enqueue_encode_slots(
                            (src.device_addr(), l as u64),
                            rows,
                            &work,
                            &data,
                            scratch,
                            stream,
                        )
                    })?,
                ));
            }
            self.enqueue_scan(&work, rows, l, true, 0, stream)?;
            let mut total = PinnedBuffer::<u64>::zeroed(1)?;
            copy_elements(&work.offsets, rows, &mut total, 1, stream)?;
            sync(stream, "scanning")?;
            let padded = encoder_out_bytes(total[0] as usize);
            let packed = device_buffer::<u8>(padded, "allocating")?;
            out.push((
                "compact the slots' stored bytes (packed through slots)",
                t.time(&mut || {
                    self.enqueue_compact(rows, l, &work, &data, &packed, padded, stream)
                })?,
            ));
        }
        Ok(())
    }
}

/// Times a stage: the median of `reps` runs after one warm-up, each
/// synchronised on `stream`.
struct Timer<'s> {
    stream: &'s Stream,
    reps: usize,
}

impl Timer<'_> {
    fn time(&self, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        f()?;
        sync(self.stream, "profiling")?;
        let mut t = Vec::with_capacity(self.reps);
        for _ in 0..self.reps.max(1) {
            let s = std::time::Instant::now();
            f()?;
            sync(self.stream, "profiling")?;
            t.push(s.elapsed().as_secs_f64());
        }
        t.sort_by(f64::total_cmp);
        Ok(t[t.len() / 2])
    }
}

/// The sampled fit's phases, each the median of `reps` fits.
fn fit_phases<S: GpuReadable + ?Sized>(
    fitter: &Fitter<'_>,
    src: &S,
    l: usize,
    reps: usize,
) -> Result<Vec<(&'static str, f64)>> {
    let mut out = Vec::new();
    // The sampled fit's phases, each the median of `reps` fits.
    let opts = FitOptions::default().with_sample(Sample::Fraction(1.0 / 16.0));
    fitter.fit_phased(src, l, &opts)?;
    let mut phases = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        phases.push(fitter.fit_phased(src, l, &opts)?.1);
    }
    let median = |f: fn(&FitPhases) -> f64| {
        let mut t: Vec<f64> = phases.iter().map(f).collect();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    out.push(("fit 1/16: gather and count the sample", median(|p| p.count)));
    out.push((
        "fit 1/16: weigh the candidates (book built on the GPU, kernel, totals and book back)",
        median(|p| p.evaluate),
    ));
    out.push((
        "fit 1/16: the rest on the host (choice, tables)",
        median(|p| p.host),
    ));
    Ok(out)
}
