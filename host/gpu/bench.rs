//! Measurement helpers shared by `ibp bench` and the criterion benches:
//! synthetic datasets with a chosen space saving (the paper's Figure 7), and
//! event-timed launches.
//!
//! Every timing is the median of several CUDA-event-timed repetitions after a
//! warm-up, and every configuration is decoded once and compared with the
//! original bytes before it is timed.

use cust::event::{Event as TimingEvent, EventFlags};
use cust::memory::DeviceBuffer;
use cust::stream::Stream;

use super::compress::{
    Compressor, GpuCodebook, WARP_BLOCK, Work, encoder_out_bytes, row_count, warp_grid,
};
use super::dataset::{GpuDataset, Residency};
use super::decode::{DecodeOptions, DecodeStatus, Decoder, Mode, Request};
use super::driver::copy_to_host_blocking;
use super::driver::{copy, copy_elements, device_buffer, new_stream, sync, zero_async};
use super::fit::{FitPhases, Fitter};
use super::kernels;
use super::memory::{GpuReadable, PinnedBuffer};
use super::{Gpu, cuda_err};
use crate::codebook::Codebook;
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::fit::{FitOptions, Sample};
use crate::kernel_tables::eval_book;
use crate::layout::{Layout, LayoutOptions, compress_fixed, compress_packed};
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

/// Median of event-timed repetitions of `f`, in seconds per call.
pub fn time_median(
    stream: &Stream,
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    stream.synchronize().map_err(cuda_err("warm-up"))?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let a = TimingEvent::new(EventFlags::DEFAULT).map_err(cuda_err("event"))?;
        let b = TimingEvent::new(EventFlags::DEFAULT).map_err(cuda_err("event"))?;
        a.record(stream).map_err(cuda_err("event"))?;
        f()?;
        b.record(stream).map_err(cuda_err("event"))?;
        b.synchronize().map_err(cuda_err("timing"))?;
        times.push(b.elapsed_time_f32(&a).map_err(cuda_err("timing"))? as f64 / 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Median time of one DMA copy of `bytes` from device memory into pinned
/// host memory, in seconds (event-timed, as [`time_median`]): the floor of
/// anything that ends by copying that many bytes to the host.
pub fn time_dtoh_copy(stream: &Stream, bytes: usize) -> Result<f64> {
    let src = device_buffer::<u8>(bytes.max(1), "allocating the copy's source")?;
    let mut dst = super::memory::PinnedBuffer::<u8>::zeroed(bytes.max(1))?;
    time_median(stream, 2, 21, || {
        super::driver::copy_to_pinned(&src, &mut dst, bytes, stream)
    })
}

/// How a measured dataset is stored: its layout and, for the fixed-stride
/// layout, whether the device also keeps a table of stored lengths
/// ([`GpuDataset::with_length_table`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchStorage {
    /// Packed or fixed-stride.
    pub layout: Layout,
    /// Fixed-stride only: a device length table (packed offsets give the
    /// lengths already).
    pub length_table: bool,
}

impl BenchStorage {
    /// Packed, offsets on the GPU.
    pub const PACKED: Self = BenchStorage {
        layout: Layout::Packed,
        length_table: false,
    };
    /// Fixed-stride, lengths from the participation bits.
    pub const FIXED: Self = BenchStorage {
        layout: Layout::FixedStride,
        length_table: false,
    };
    /// Fixed-stride with a device length table.
    pub const FIXED_LENGTHS: Self = BenchStorage {
        layout: Layout::FixedStride,
        length_table: true,
    };
}

/// One measured configuration.
#[derive(Clone, Debug)]
pub struct DecodeMeasurement {
    /// Decoded bytes per call.
    pub decoded_bytes: u64,
    /// Stored (compressed) bytes read per call.
    pub stored_bytes: u64,
    /// Seconds per call (median).
    pub seconds: f64,
}

impl DecodeMeasurement {
    /// Decoded bytes per second.
    pub fn decoded_rate(&self) -> f64 {
        self.decoded_bytes as f64 / self.seconds
    }

    /// Bytes moved per second: stored bytes read plus decoded bytes written.
    pub fn moved_rate(&self) -> f64 {
        (self.decoded_bytes + self.stored_bytes) as f64 / self.seconds
    }
}

/// Decode all rows of `data` (compressed with `cb` as `storage` says, placed per
/// `residency`) repeatedly; `ideal` times the copy-only baseline instead.
/// Checks the decoded bytes against `data` first.
#[allow(clippy::too_many_arguments)]
pub fn measure_decode(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    storage: BenchStorage,
    residency: Residency,
    ideal: bool,
    opts: &DecodeOptions,
) -> Result<DecodeMeasurement> {
    let rows = Rows::new(data, row_bytes)?;
    let ds = match (storage.layout, storage.length_table) {
        (Layout::Packed, _) => GpuDataset::upload_packed(
            gpu,
            cb,
            &compress_packed(cb, rows, &LayoutOptions::default())?.view(),
            residency,
        )?,
        (Layout::FixedStride, false) => GpuDataset::upload_fixed(
            gpu,
            cb,
            &compress_fixed(cb, rows, &LayoutOptions::default())?.view(),
            residency,
        )?,
        (Layout::FixedStride, true) => {
            let f = compress_fixed(cb, rows, &LayoutOptions::default())?;
            GpuDataset::upload_fixed(gpu, cb, &f.view(), residency)?
                .with_length_table(cb, &f.view())?
        }
    };
    let n = rows.rows() as u64;
    let dec = Decoder::new(gpu, &ds, opts)?;
    let mut status = DecodeStatus::new()?;
    let mut out =
        DeviceBuffer::<u8>::zeroed(data.len()).map_err(cuda_err("allocating the output"))?;
    // Correctness first (the warm-up round trip).
    dec.range(gpu, 0, n, &mut out, &status, stream)?;
    stream.synchronize().map_err(cuda_err("decoding"))?;
    status.check_blocking()?;
    if copy_to_host_blocking(&out)? != data {
        return Err(Error::corrupt(
            "benchmark decode differs from the original data",
        ));
    }
    let mode = if ideal { Mode::Ideal } else { Mode::Decode };
    let req = Request::range(0, n).with_mode(mode);
    let seconds = time_median(stream, 2, 9, || {
        dec.enqueue(gpu, &req, &mut out, &status, stream)
    })?;
    status.check_blocking()?;
    Ok(DecodeMeasurement {
        decoded_bytes: data.len() as u64,
        stored_bytes: ds.stored_bytes(),
        seconds,
    })
}

/// Device-to-device copy of `bytes`, seconds (median): the roofline for
/// device-resident decode.
pub fn measure_device_copy(stream: &Stream, bytes: usize) -> Result<f64> {
    let src = DeviceBuffer::<u8>::zeroed(bytes).map_err(cuda_err("allocating"))?;
    let mut dst = DeviceBuffer::<u8>::zeroed(bytes).map_err(cuda_err("allocating"))?;
    time_median(stream, 2, 9, || {
        // SAFETY: both buffers hold `bytes` bytes and stay alive until the
        // stream is synchronised inside time_median.
        let r = unsafe {
            copy::dtod_async(
                dst.as_device_ptr().as_raw(),
                src.as_device_ptr().as_raw(),
                bytes,
                stream,
                "device copy",
            )
        };
        let _ = &mut dst;
        r
    })
}

/// Host-to-device DMA copy of `bytes` from pinned memory, seconds (median):
/// the PCIe ceiling of this machine.
pub fn measure_h2d_copy(stream: &Stream, bytes: usize) -> Result<f64> {
    let src = super::PinnedBuffer::<u8>::zeroed(bytes)?;
    let dst = DeviceBuffer::<u8>::zeroed(bytes).map_err(cuda_err("allocating"))?;
    time_median(stream, 2, 9, || {
        // SAFETY: both buffers hold `bytes` bytes and outlive the copy (the
        // stream is synchronised inside time_median).
        unsafe {
            copy::htod_async(
                dst.as_device_ptr().as_raw(),
                src.as_ptr(),
                bytes,
                stream,
                "host-to-device copy",
            )
        }
    })
}

/// Zero-copy read of `bytes` of pinned host memory by the bit-counting
/// kernel (rows of 1536 bytes), seconds (median): the kernel-side PCIe read
/// ceiling.
pub fn measure_zero_copy_read(gpu: &Gpu, stream: &Stream, bytes: usize) -> Result<f64> {
    let l = 1536;
    let src = super::PinnedBuffer::<u8>::zeroed(bytes / l * l)?;
    let mut counts = DeviceBuffer::<u64>::zeroed(8 * l).map_err(cuda_err("allocating"))?;
    let fitter = Fitter::new(gpu);
    time_median(stream, 2, 9, || {
        fitter.count_bits(&src, l, &mut counts, stream)
    })
}

/// Decode all rows of a packed pinned dataset through the DMA path
/// ([`Decoder::range_dma`], pieces of `piece` bytes), checked first.
pub fn measure_decode_dma(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    piece: usize,
) -> Result<DecodeMeasurement> {
    let rows = Rows::new(data, row_bytes)?;
    let ds = GpuDataset::upload_packed(
        gpu,
        cb,
        &compress_packed(cb, rows, &LayoutOptions::default())?.view(),
        Residency::Pinned,
    )?;
    let n = rows.rows() as u64;
    let dec = Decoder::new(gpu, &ds, &DecodeOptions::default())?;
    let mut status = DecodeStatus::new()?;
    let mut scratch = super::DmaScratch::new(piece)?;
    let mut out =
        DeviceBuffer::<u8>::zeroed(data.len()).map_err(cuda_err("allocating the output"))?;
    dec.range_dma(gpu, 0, n, &mut out, &status, &mut scratch, stream)?;
    stream.synchronize().map_err(cuda_err("decoding"))?;
    status.check_blocking()?;
    if copy_to_host_blocking(&out)? != data {
        return Err(Error::corrupt(
            "benchmark DMA-path decode differs from the original data",
        ));
    }
    let seconds = time_median(stream, 2, 9, || {
        dec.range_dma(gpu, 0, n, &mut out, &status, &mut scratch, stream)
    })?;
    status.check_blocking()?;
    Ok(DecodeMeasurement {
        decoded_bytes: data.len() as u64,
        stored_bytes: ds.stored_bytes(),
        seconds,
    })
}

/// Random gathers of compressed rows: `batch` uniform random row ids of a
/// packed dataset placed per `residency`, decoded into a device buffer.
/// Eight index sets rotate (so device-resident gathers are not served from
/// L2 alone); every set's output is checked against `data` first.
#[allow(clippy::too_many_arguments)]
pub fn measure_gather(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    residency: Residency,
    batch: usize,
    opts: &DecodeOptions,
) -> Result<DecodeMeasurement> {
    measure_gather_by(
        gpu, stream, data, row_bytes, cb, residency, batch, opts, None,
    )
}

/// [`measure_gather`] through the DMA gather
/// ([`Decoder::gather_dma_blocking`], pinned dataset, pieces of `piece`
/// bytes, the row ids in host memory), on the same index sets.
#[allow(clippy::too_many_arguments)]
pub fn measure_gather_dma(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    batch: usize,
    piece: usize,
    opts: &DecodeOptions,
) -> Result<DecodeMeasurement> {
    let pinned = Residency::Pinned;
    measure_gather_by(
        gpu,
        stream,
        data,
        row_bytes,
        cb,
        pinned,
        batch,
        opts,
        Some(piece),
    )
}

#[allow(clippy::too_many_arguments)]
fn measure_gather_by(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    residency: Residency,
    batch: usize,
    opts: &DecodeOptions,
    dma_piece: Option<usize>,
) -> Result<DecodeMeasurement> {
    let rows = Rows::new(data, row_bytes)?;
    let packed = compress_packed(cb, rows, &LayoutOptions::default())?;
    let ds = GpuDataset::upload_packed(gpu, cb, &packed.view(), residency)?;
    let n = rows.rows() as u64;
    let dec = Decoder::new(gpu, &ds, opts)?;
    let mut status = DecodeStatus::new()?;
    let mut scratch = dma_piece.map(super::DmaScratch::new).transpose()?;
    let mut out =
        DeviceBuffer::<u8>::zeroed(batch * row_bytes).map_err(cuda_err("allocating the output"))?;
    let mut gather = |ids: &(Vec<u64>, DeviceBuffer<u64>),
                      out: &mut DeviceBuffer<u8>,
                      status: &DecodeStatus| match &mut scratch {
        Some(scratch) => dec.gather_dma_blocking(gpu, &ids.0, out, status, scratch, stream),
        None => dec.gather(gpu, &ids.1, out, status, stream),
    };
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ batch as u64;
    let mut sets = Vec::new();
    let mut stored = 0u64;
    for _ in 0..8 {
        let ids: Vec<u64> = (0..batch)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s % n
            })
            .collect();
        stored += ids
            .iter()
            .map(|&t| packed.offsets[t as usize + 1] - packed.offsets[t as usize])
            .sum::<u64>();
        let dev = DeviceBuffer::from_slice(&ids).map_err(cuda_err("uploading ids"))?;
        let set = (ids, dev);
        gather(&set, &mut out, &status)?;
        stream.synchronize().map_err(cuda_err("gathering"))?;
        status.check_blocking()?;
        let got = copy_to_host_blocking(&out)?;
        for (i, &t) in set.0.iter().enumerate() {
            let t = t as usize;
            if got[i * row_bytes..(i + 1) * row_bytes] != data[t * row_bytes..(t + 1) * row_bytes] {
                return Err(Error::corrupt(
                    "benchmark gather differs from the original data",
                ));
            }
        }
        sets.push(set);
    }
    let mut k = 0;
    let seconds = time_median(stream, 8, 24, || {
        k = (k + 1) % sets.len();
        gather(&sets[k], &mut out, &status)
    })?;
    status.check_blocking()?;
    Ok(DecodeMeasurement {
        decoded_bytes: (batch * row_bytes) as u64,
        stored_bytes: stored / sets.len() as u64,
        seconds,
    })
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
