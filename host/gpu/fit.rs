//! The fit on the GPU: bit counting and the threshold sweep's evaluation
//! pass, choosing exactly the codebook the CPU fit chooses.

use cust::memory::DeviceBuffer;
use cust::stream::Stream;
use ibp_kernels::params::MeasureParams;

use super::compress::{WARP_BLOCK, row_count};
use super::driver::{copy_to_host_blocking, device_buffer, new_stream, sync};
use super::launch::kernels;
use super::memory::{GpuReadable, Span};
use super::{Gpu, cuda_err};
use crate::error::{Error, Result};
use crate::fit::choose::{Totals, choose_with};
use crate::fit::{Fit, FitOptions, SamplePlan};
use crate::kernel_tables::eval_book;
use ibp_kernels::params::MAX_THRESHOLDS;

impl Gpu {
    /// Choose a codebook for the rows in `src` (device memory, or host
    /// memory the GPU can read) by the rule of `docs/FORMAT.md` §4: the same
    /// [`Fit`] as [`crate::fit::fit`] on the same rows and options. Counts
    /// the sample's bits, then weighs every candidate threshold and chunk
    /// size in one pass over the sample per eight thresholds. A sample
    /// smaller than the dataset is first gathered into device memory.
    ///
    /// Allocates its counters and scratch and runs on a stream of its own;
    /// returns when done.
    pub fn fit_blocking<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        row_bytes: usize,
        opts: &FitOptions,
    ) -> Result<Fit> {
        let n = row_count(src, row_bytes)?;
        let plan = SamplePlan::new(n as u64, opts.sample)?;
        let stream = new_stream()?;
        let l = row_bytes as u64;
        if plan.is_all() {
            let counts = self.count_sample(src, row_bytes, &stream)?;
            return self.fit_counted(src, &counts, plan, row_bytes, opts, &stream);
        }
        if (n as u64).checked_mul(plan.len()).is_none() {
            return Err(Error::unsupported(
                "a sample this large of this many tensors overflows the index arithmetic; sample fewer tensors",
            ));
        }
        let bytes = plan.len() as usize * row_bytes;
        let buf = device_buffer::<u8>(bytes, "allocating the sample")?;
        let p = MeasureParams {
            src: src.device_addr(),
            stride: l,
            rows: n as u64,
            sample: plan.len(),
            row_bytes: l,
            stage: buf.as_device_ptr().as_raw(),
            stage_stride: l,
            ..Default::default()
        };
        let grid = self.warp_grid(kernels::GATHER, plan.len())?;
        // SAFETY: the source holds n rows, the buffer `sample` rows of L
        // bytes; MeasureParams is the kernel's type.
        unsafe { self.launch(kernels::GATHER, grid, WARP_BLOCK, 0, &stream, p)? };
        let gathered = Span::of(&buf, 0, bytes)
            .ok_or_else(|| Error::invalid("sample larger than its buffer"))?;
        let counts = self.count_sample(&gathered, row_bytes, &stream)?;
        self.fit_counted(&gathered, &counts, plan, row_bytes, opts, &stream)
    }

    fn count_sample(
        &self,
        sample: &(impl GpuReadable + ?Sized),
        row_bytes: usize,
        stream: &Stream,
    ) -> Result<Vec<u64>> {
        let mut counts =
            DeviceBuffer::<u64>::zeroed(8 * row_bytes).map_err(cuda_err("allocating counters"))?;
        self.count_bits(sample, row_bytes, &mut counts, stream)?;
        sync(stream, "counting bits")?;
        copy_to_host_blocking(&counts)
    }

    /// Weigh the candidates on `sample` (every row of it) and choose.
    fn fit_counted(
        &self,
        sample: &(impl GpuReadable + ?Sized),
        counts: &[u64],
        plan: SamplePlan,
        row_bytes: usize,
        opts: &FitOptions,
        stream: &Stream,
    ) -> Result<Fit> {
        let s = plan.len();
        choose_with(counts, s, plan, row_bytes, opts, |books| {
            let mut out = Vec::with_capacity(books.len());
            for group in books.chunks(MAX_THRESHOLDS as usize) {
                let book = DeviceBuffer::from_slice(&eval_book(group))
                    .map_err(cuda_err("uploading candidate codebooks"))?;
                let totals = DeviceBuffer::<u64>::zeroed(64)
                    .map_err(cuda_err("allocating candidate totals"))?;
                let p = MeasureParams {
                    src: sample.device_addr(),
                    stride: row_bytes as u64,
                    rows: s,
                    sample: s,
                    row_bytes: row_bytes as u64,
                    book: book.as_device_ptr().as_raw(),
                    totals: totals.as_device_ptr().as_raw(),
                    nt: group.len() as u32,
                    ..Default::default()
                };
                let grid = self.warp_grid(kernels::FIT_EVAL, s)?;
                // SAFETY: the sample holds s rows of L bytes, the book 1 + nt
                // u64 per 8-byte word, totals 64 u64; MeasureParams is the
                // kernel's type.
                unsafe { self.launch(kernels::FIT_EVAL, grid, WARP_BLOCK, 0, stream, p)? };
                sync(stream, "weighing candidates")?;
                let t = copy_to_host_blocking(&totals)?;
                out.extend((0..group.len()).map(|i| Totals {
                    stored: std::array::from_fn(|c| t[2 * (4 * i + c)]),
                    encoded: std::array::from_fn(|c| t[2 * (4 * i + c) + 1]),
                }));
            }
            Ok(out)
        })
    }
}
