//! The fit on the GPU: bit counting and the threshold sweep's evaluation
//! pass, choosing exactly the codebook the CPU fit chooses.

use std::sync::Mutex;

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::params::{CandidatesParams, CountParams, MAX_THRESHOLDS, MeasureParams};

use super::compress::{WARP_BLOCK, row_count, warp_grid};
use super::driver::{
    Event, copy_to_host_blocking, device_buffer, ensure, new_stream, sync, zero_async,
};
use super::kernels;
use super::launch::resident_blocks;
use super::memory::{GpuReadable, PinnedBuffer, Span};
use super::{Gpu, cuda_err};
use crate::codebook::threshold_bounds;
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::fit::choose::{Totals, choose_evaluated};
use crate::fit::{Fit, FitOptions, SamplePlan};

/// What [`Fitter::fit_blocking`] keeps between calls: its stream and
/// device buffers, grown when a call needs more, so that a warm fit
/// allocates no device memory.
///
/// Q: why keep them in the [`Fitter`]?
/// A: a sampled fit of 1 GiB runs about a quarter of a millisecond of
/// kernels, and allocating and freeing these on every call (a 64 MiB
/// sample buffer, whose free waits for the device, the counters, books,
/// totals and a stream) was a sizeable part of the rest: keeping them took
/// MiniLM bf16's fit of 1/16 from 0.58 to 0.47–0.50 ms (H100). What is
/// left is not yet explained (`docs/archive/PERF-NOTES-2026-11-28.md`, "The device encoder").
struct FitScratch {
    stream: Stream,
    sample: DeviceBuffer<u8>,
    counts: DeviceBuffer<u64>,
    /// The candidates' book, its trailer and the evaluation's totals, in
    /// one buffer so that one fill zeroes and one copy returns them.
    book: DeviceBuffer<u64>,
}

impl FitScratch {
    fn new() -> Result<Self> {
        Ok(Self {
            stream: new_stream()?,
            sample: device_buffer(0, "allocating the sample")?,
            counts: device_buffer(0, "allocating counters")?,
            book: device_buffer(0, "allocating candidate codebooks")?,
        })
    }
}

/// Wall-clock seconds of the phases of one [`Fitter::fit_blocking`], for
/// `ibp bench --stages` (`Compressor::profile_stages`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FitPhases {
    /// Gathering the sample and counting its bits (kernels, synchronised
    /// only when the phases are timed).
    pub count: f64,
    /// Weighing the candidates: their book built from the counts on the
    /// device, the evaluation kernel, the totals and the book copied back.
    pub evaluate: f64,
    /// The rest, on the host: the choice, the chosen codebook's tables.
    pub host: f64,
}

impl FitPhases {
    /// Set `host` to what the fit started at `started` took beyond the
    /// other phases.
    fn finish(mut self, started: std::time::Instant) -> Self {
        self.host = started.elapsed().as_secs_f64() - self.count - self.evaluate;
        self
    }
}

/// Threads per block of the bit-counting kernel.
const COUNT_BLOCK: u32 = 256;

/// Enqueue a zero fill of `buf`.
fn zero<T: cust::memory::DeviceCopy>(buf: &DeviceSlice<T>, stream: &Stream) -> Result<()> {
    let bytes = buf.len() * size_of::<T>();
    // SAFETY: the same bytes, viewed as u8 (device memory has no type).
    let raw = unsafe { DeviceSlice::from_raw_parts(buf.as_device_ptr().cast::<u8>(), bytes) };
    zero_async(&raw, bytes, stream)
}

/// The fit on one GPU, and the bit counting it rests on: chooses the
/// codebook [`crate::fit::fit`] chooses, on rows the GPU reads. Keeps its
/// stream and device buffers between fits (keep one `Fitter` for many
/// fits); fits on one `Fitter` from several threads take turns.
pub struct Fitter<'g> {
    gpu: &'g Gpu,
    scratch: Mutex<Option<FitScratch>>,
}

impl<'g> Fitter<'g> {
    /// A fitter on `gpu`; allocates nothing until the first fit.
    pub fn new(gpu: &'g Gpu) -> Self {
        Self {
            gpu,
            scratch: Mutex::new(None),
        }
    }

    /// The GPU.
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Add the per-bit-position counts of the rows in `src` (device memory, or
    /// a [`PinnedBuffer`] read zero-copy) to `counts` (`8 * row_bytes` u64).
    ///
    /// Enqueued on `stream`; counts accumulate, so a dataset may be counted
    /// in batches into the same `counts`.
    pub fn count_bits<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        row_bytes: usize,
        counts: &mut DeviceSlice<u64>,
        stream: &Stream,
    ) -> Result<()> {
        if row_bytes == 0 {
            return Err(Error::invalid("row length is 0 bytes"));
        }
        if !src.byte_len().is_multiple_of(row_bytes) {
            return Err(Error::invalid(format!(
                "{} source bytes do not split into rows of {row_bytes} bytes",
                src.byte_len()
            )));
        }
        if counts.len() != 8 * row_bytes {
            return Err(Error::invalid(format!(
                "counts has {} entries; rows of {row_bytes} bytes need {}",
                counts.len(),
                8 * row_bytes
            )));
        }
        let rows = (src.byte_len() / row_bytes) as u64;
        if rows == 0 {
            return Ok(());
        }
        let cols = row_bytes.div_ceil(4) as u64;
        let wanted = (cols * rows).div_ceil(COUNT_BLOCK as u64);
        let grid = wanted
            .min(resident_blocks(self.gpu, kernels::COUNT_BITS, COUNT_BLOCK, 0)? as u64)
            as u32;
        let p = CountParams {
            data: src.device_addr(),
            rows,
            row_bytes: row_bytes as u64,
            counts: counts.as_device_ptr().as_raw(),
        };
        // SAFETY: `data` covers rows * row_bytes readable bytes and `counts`
        // 8 * row_bytes u64 (both checked above); CountParams is the kernel's
        // parameter type.
        unsafe {
            self.gpu
                .launch(kernels::COUNT_BITS, grid, COUNT_BLOCK, 0, stream, p)
        }
    }

    /// Count the bits of host rows on the GPU: the rows are staged through
    /// two pinned buffers of `batch_bytes` (rounded to whole rows) that the
    /// kernel reads zero-copy, so the copy of one batch overlaps the counting
    /// of the previous. Allocates its staging buffers and synchronises: use
    /// [`Fitter::count_bits`] with your own buffers on a hot path.
    pub fn count_bits_blocking(&self, rows: Rows<'_>, batch_bytes: usize) -> Result<Vec<u64>> {
        let l = rows.row_bytes();
        let batch_rows = (batch_bytes / l).max(1).min(rows.rows().max(1));
        let stream = new_stream()?;
        let mut counts =
            DeviceBuffer::<u64>::zeroed(8 * l).map_err(cuda_err("allocating counters"))?;
        let mut staging = [
            PinnedBuffer::<u8>::zeroed(batch_rows * l)?,
            PinnedBuffer::<u8>::zeroed(batch_rows * l)?,
        ];
        let mut done: [Option<Event>; 2] = [None, None];
        let mut start = 0;
        let mut k = 0;
        while start < rows.rows() {
            let end = (start + batch_rows).min(rows.rows());
            if let Some(ev) = done[k].take() {
                ev.synchronize()?;
            }
            let bytes = rows.slice(start, end).bytes();
            staging[k][..bytes.len()].copy_from_slice(bytes);
            let view = Span::of(&staging[k], 0, bytes.len())
                .ok_or_else(|| Error::invalid("batch larger than its staging buffer"))?;
            self.count_bits(&view, l, &mut counts, &stream)?;
            let ev = Event::new()?;
            ev.record(&stream)?;
            done[k] = Some(ev);
            start = end;
            k ^= 1;
        }
        sync(&stream, "counting bits")?;
        copy_to_host_blocking(&counts)
    }

    /// Choose a codebook for the rows in `src` (device memory, or host
    /// memory the GPU can read) by the rule of `docs/FORMAT.md` §4: the same
    /// [`Fit`] as [`crate::fit::fit`] on the same rows and options. Counts
    /// the sample's bits, then weighs every candidate threshold and chunk
    /// size in one pass over the sample per eight thresholds. A sample
    /// smaller than the dataset is first gathered into device memory.
    ///
    /// Runs on a stream of its own and returns when done. Its stream and
    /// device buffers (the gathered sample, the counters, the candidates'
    /// books and totals) stay with the `Fitter` for the next fit, grown when
    /// one needs more; fits on one `Fitter` from several threads take turns.
    pub fn fit_blocking<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        row_bytes: usize,
        opts: &FitOptions,
    ) -> Result<Fit> {
        self.fit_timed(src, row_bytes, opts, false)
            .map(|(fit, _)| fit)
    }

    /// [`Fitter::fit_blocking`], with the time of each of its phases.
    #[cfg(feature = "bench-hooks")]
    pub(crate) fn fit_phased<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        row_bytes: usize,
        opts: &FitOptions,
    ) -> Result<(Fit, FitPhases)> {
        self.fit_timed(src, row_bytes, opts, true)
    }

    /// The fit; `timed` waits for the counts before weighing, to time the
    /// phases (an untimed fit synchronises once, after the weighing).
    fn fit_timed<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        row_bytes: usize,
        opts: &FitOptions,
        timed: bool,
    ) -> Result<(Fit, FitPhases)> {
        let started = std::time::Instant::now();
        let mut ph = FitPhases::default();
        let n = row_count(src, row_bytes)?;
        let plan = SamplePlan::new(n as u64, opts.sample)?;
        let l = row_bytes as u64;
        // A fit that panicked left the buffers as they were: still usable.
        let mut guard = self
            .scratch
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let sc = match &mut *guard {
            Some(sc) => sc,
            None => guard.insert(FitScratch::new()?),
        };
        if plan.is_all() {
            self.count_sample(src, row_bytes, sc, timed, started, &mut ph)?;
            let fit = self.fit_counted(src, plan, row_bytes, opts, sc, &mut ph)?;
            return Ok((fit, ph.finish(started)));
        }
        if (n as u64).checked_mul(plan.len()).is_none() {
            return Err(Error::unsupported(
                "a sample this large of this many tensors overflows the index arithmetic; sample fewer tensors",
            ));
        }
        let bytes = plan.len() as usize * row_bytes;
        ensure(&mut sc.sample, bytes, "allocating the sample")?;
        let p = MeasureParams {
            src: src.device_addr(),
            stride: l,
            rows: n as u64,
            sample: plan.len(),
            row_bytes: l,
            stage: sc.sample.as_device_ptr().as_raw(),
            stage_stride: l,
            ..Default::default()
        };
        let grid = warp_grid(self.gpu, kernels::GATHER, plan.len())?;
        // SAFETY: the source holds n rows, the buffer `sample` rows of L
        // bytes; MeasureParams is the kernel's type.
        unsafe {
            self.gpu
                .launch(kernels::GATHER, grid, WARP_BLOCK, 0, &sc.stream, p)?
        };
        // Q: why a raw view, not a `Span` of `sc.sample`?
        // A: the span would borrow the scratch, which the counting and
        // weighing below need mutably; the buffer is neither moved nor
        // resized until this fit returns.
        // SAFETY: `bytes` is inside the sample buffer (ensured above).
        let whole = unsafe { DeviceSlice::from_raw_parts(sc.sample.as_device_ptr(), bytes) };
        let gathered = Span::of(&whole, 0, bytes)
            .ok_or_else(|| Error::invalid("sample larger than its buffer"))?;
        self.count_sample(&gathered, row_bytes, sc, timed, started, &mut ph)?;
        let fit = self.fit_counted(&gathered, plan, row_bytes, opts, sc, &mut ph)?;
        Ok((fit, ph.finish(started)))
    }

    /// Count the sample's bits into the scratch's counters (they stay on the
    /// device); when `timed`, wait for them and set `ph.count` to the time
    /// from `started` to the counts' kernel done.
    fn count_sample(
        &self,
        sample: &(impl GpuReadable + ?Sized),
        row_bytes: usize,
        sc: &mut FitScratch,
        timed: bool,
        started: std::time::Instant,
        ph: &mut FitPhases,
    ) -> Result<()> {
        ensure(&mut sc.counts, 8 * row_bytes, "allocating counters")?;
        let mut counts = sc.counts.index(..8 * row_bytes);
        zero(&counts, &sc.stream)?;
        self.count_bits(sample, row_bytes, &mut counts, &sc.stream)?;
        if timed {
            sync(&sc.stream, "counting bits")?;
            ph.count = started.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Weigh the candidates on `sample` (every row of it) and choose: each
    /// group of up to eight thresholds' book is built on the device from
    /// the counts `count_sample` left there (`ibp_fit_candidates`), weighed
    /// there, and copied back with the totals.
    fn fit_counted(
        &self,
        sample: &(impl GpuReadable + ?Sized),
        plan: SamplePlan,
        row_bytes: usize,
        opts: &FitOptions,
        sc: &mut FitScratch,
        ph: &mut FitPhases,
    ) -> Result<Fit> {
        let s = plan.len();
        let words = row_bytes.div_ceil(8);
        choose_evaluated(plan, row_bytes, opts, |thresholds| {
            let weighing = std::time::Instant::now();
            let mut totals_out = Vec::with_capacity(thresholds.len());
            let mut books = Vec::with_capacity(thresholds.len());
            for group in thresholds.chunks(MAX_THRESHOLDS as usize) {
                let nt = group.len();
                // The fields, the trailer of mask bit counts the candidates
                // kernel adds to, and the evaluation's 64 totals: the last
                // two zeroed by one fill, all three back in one copy.
                let fields = (1 + nt) * words;
                let trailer = fields + MAX_THRESHOLDS as usize;
                ensure(&mut sc.book, trailer + 64, "allocating candidate codebooks")?;
                let whole = sc.book.index(..trailer + 64);
                zero(&whole.index(fields..), &sc.stream)?;
                let book = whole.index(..trailer);
                let totals = whole.index(trailer..);
                let mut c = CandidatesParams {
                    counts: sc.counts.as_device_ptr().as_raw(),
                    book: book.as_device_ptr().as_raw(),
                    row_bytes: row_bytes as u64,
                    nt: nt as u32,
                    ..Default::default()
                };
                for (i, &t) in group.iter().enumerate() {
                    (c.one_above[i], c.zero_below[i]) = threshold_bounds(s, t);
                }
                let stream = &sc.stream;
                let grid = warp_grid(self.gpu, kernels::FIT_CANDIDATES, words as u64)?;
                // SAFETY: the counters hold 8·L counts (count_sample), the
                // book (1 + nt)·⌈L/8⌉ + 8 u64, its trailer zeroed;
                // CandidatesParams is the kernel's type.
                unsafe {
                    self.gpu
                        .launch(kernels::FIT_CANDIDATES, grid, WARP_BLOCK, 0, stream, c)?
                };
                let p = MeasureParams {
                    src: sample.device_addr(),
                    stride: row_bytes as u64,
                    rows: s,
                    sample: s,
                    row_bytes: row_bytes as u64,
                    book: book.as_device_ptr().as_raw(),
                    totals: totals.as_device_ptr().as_raw(),
                    nt: nt as u32,
                    ..Default::default()
                };
                let grid = warp_grid(self.gpu, kernels::FIT_EVAL, s)?;
                // SAFETY: the sample holds s rows of L bytes, the book 1 + nt
                // u64 per 8-byte word and its trailer, totals 64 u64;
                // MeasureParams is the kernel's type.
                unsafe {
                    self.gpu
                        .launch(kernels::FIT_EVAL, grid, WARP_BLOCK, 0, stream, p)?
                };
                sync(stream, "weighing candidates")?;
                let words_back = copy_to_host_blocking(&whole)?;
                let t = &words_back[trailer..];
                totals_out.extend((0..nt).map(|i| Totals {
                    stored: std::array::from_fn(|c| t[2 * (4 * i + c)]),
                    encoded: std::array::from_fn(|c| t[2 * (4 * i + c) + 1]),
                }));
                let bytes = |w: &[u64]| -> Vec<u8> {
                    let mut b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
                    b.truncate(row_bytes);
                    b
                };
                let v = &words_back[..words];
                for i in 0..nt {
                    let m = &words_back[(1 + i) * words..(2 + i) * words];
                    // A bit invariant under two thresholds (all ≥ 0.5) has
                    // the same value under both, so V masked is the
                    // threshold's bit values (`crate::kernel_tables::eval_book`).
                    let b: Vec<u64> = m.iter().zip(v).map(|(m, v)| m & v).collect();
                    books.push((bytes(m), bytes(&b)));
                }
            }
            ph.evaluate = weighing.elapsed().as_secs_f64();
            Ok((totals_out, books))
        })
    }
}
