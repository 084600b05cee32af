//! Compression of rows in host memory: batches read once (by DMA or
//! zero-copy), compressed on the device, and handed back to the caller as
//! they land, three in flight.

use cust::memory::DeviceBuffer;
use cust::stream::Stream;

use super::compress::{Compressor, MAX_ROW_BYTES, Work, encoder_out_bytes, row_count};
use super::driver::{
    Event, copy, copy_to_pinned, device_buffer, new_stream, sync, wait, zero_async,
};
use super::memory::{GpuReadable, PinnedBuffer};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::layout::{FixedStride, Packed, flag_bytes};

/// Batch buffers in flight in [`Compressor::compress_host_blocking`].
const SETS: usize = 3;

/// Device buffers of one batch in flight.
struct BatchSet {
    work: Work,
    stage: DeviceBuffer<u8>,
    out: DeviceBuffer<u8>,
    copied: Event,
    done: Event,
}

/// How [`Compressor::compress_host_blocking`] reads a batch of host rows (once, either way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostRead {
    /// A DMA copy into a device batch buffer, overlapped with the
    /// compression of the previous batch (the copy engine reaches the
    /// link's rate).
    #[default]
    Dma,
    /// The size kernel reads the rows zero-copy over PCIe and stages them in
    /// device memory as it goes.
    ZeroCopy,
}

/// Options of [`Compressor::compress_host_blocking`].
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Layout of the batches.
    pub layout: Layout,
    /// How batches are read.
    pub read: HostRead,
    /// Input bytes per batch (rounded to a multiple of 8 tensors, at least
    /// 8). Two batches of device buffers are allocated.
    pub batch_bytes: usize,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            layout: Layout::Packed,
            read: HostRead::Dma,
            batch_bytes: 64 << 20,
        }
    }
}

/// One compressed batch of [`Compressor::compress_host_blocking`], in pinned host memory.
#[derive(Debug)]
pub struct CompressedBatch<'a> {
    /// Index of the batch's first tensor in the dataset.
    pub first_row: u64,
    /// Tensors in the batch (a multiple of 8 except in the last batch, so
    /// flag bytes concatenate).
    pub rows: usize,
    /// The batch's flag bitmap, `⌈rows/8⌉` bytes.
    pub flags: &'a [u8],
    /// Packed layout: `rows + 1` offsets into `data`, from 0. Empty for the
    /// fixed-stride layout.
    pub offsets: &'a [u64],
    /// Packed payload, or `rows · L` bytes of fixed-stride slots.
    pub data: &'a [u8],
}

/// Reusable buffers for compressing host rows in batches (see
/// [`HostCompressor::compress_blocking`]).
///
/// Batch by batch, the rows are read once ([`HostRead`]: copied by DMA into
/// a device batch buffer, or read zero-copy by the size kernel, which stages
/// them), compressed on the device, copied back into pinned memory and handed
/// to the caller, while the next batches are already being read and
/// compressed. No device copy of the whole dataset is made.
pub struct HostCompressor {
    row_bytes: usize,
    batch: usize,
    stride: usize,
    opts: HostOptions,
    sets: Vec<BatchSet>,
    totals: PinnedBuffer<u64>,
    out_data: PinnedBuffer<u8>,
    out_offsets: PinnedBuffer<u64>,
    out_flags: PinnedBuffer<u8>,
    h2d: Stream,
    compute: Stream,
    d2h: Stream,
}

impl HostCompressor {
    /// Allocates the buffers for tensors of `row_bytes` bytes: three batches
    /// of device buffers (input and output) and one of pinned output, and
    /// three streams. A CUDA context must be current.
    pub fn new(row_bytes: usize, opts: &HostOptions) -> Result<Self> {
        if row_bytes == 0 || row_bytes > MAX_ROW_BYTES {
            return Err(Error::invalid(format!(
                "tensors of {row_bytes} bytes; use 1 to {MAX_ROW_BYTES}"
            )));
        }
        let l = row_bytes;
        let batch = (opts.batch_bytes / l).max(8) / 8 * 8;
        // Zero-copy: the size kernel stages rows at an 8-byte stride; DMA:
        // the batch as it is in host memory.
        let stride = match opts.read {
            HostRead::Dma => l,
            HostRead::ZeroCopy => l.next_multiple_of(8),
        };
        // Q: why three sets of device buffers?
        // A: while batch k is copied back and handed to the sink, batch k + 1
        // is being compressed and batch k + 2 read: the copy engines and the
        // SMs all stay busy.
        let mut sets = Vec::with_capacity(SETS);
        for _ in 0..SETS {
            sets.push(BatchSet {
                work: Work::new(batch)?,
                stage: device_buffer::<u8>(batch * stride, "allocating the batch input")?,
                out: device_buffer::<u8>(
                    encoder_out_bytes(batch * l),
                    "allocating the batch output",
                )?,
                copied: Event::new()?,
                done: Event::new()?,
            });
        }
        Ok(Self {
            row_bytes,
            batch,
            stride,
            opts: opts.clone(),
            sets,
            totals: PinnedBuffer::zeroed(SETS)?,
            out_data: PinnedBuffer::zeroed(batch * l)?,
            out_offsets: PinnedBuffer::zeroed(batch + 1)?,
            out_flags: PinnedBuffer::zeroed(flag_bytes(batch))?,
            h2d: new_stream()?,
            compute: new_stream()?,
            d2h: new_stream()?,
        })
    }

    /// Compress the rows in `src` (host memory the GPU can read: a
    /// [`PinnedBuffer`] or [`Registered`](super::Registered); `row_bytes` as given to
    /// [`HostCompressor::new`]) and hand each compressed batch to `sink`, in
    /// order. Returns the total compressed bytes (payload or slots).
    ///
    /// Runs on the compressor's own streams and allocates nothing past its
    /// buffers; blocks while batches are in flight and returns when the last
    /// one has been handed over.
    pub fn compress_blocking<S: GpuReadable + ?Sized>(
        &mut self,
        comp: &Compressor<'_>,
        src: &S,
        mut sink: impl FnMut(CompressedBatch<'_>) -> Result<()>,
    ) -> Result<u64> {
        let l = self.row_bytes;
        if comp.codebook().row_bytes() != l {
            return Err(Error::invalid(format!(
                "the codebook is for {}-byte tensors, this compressor for {l}-byte tensors",
                comp.codebook().row_bytes()
            )));
        }
        let rows = row_count(src, l)?;
        if rows == 0 {
            return Ok(0);
        }
        let batch = self.batch;
        let packed = self.opts.layout == Layout::Packed;
        let dma = self.opts.read == HostRead::Dma;
        let stride = self.stride;
        let Self {
            sets,
            totals,
            out_data,
            out_offsets,
            out_flags,
            h2d,
            compute,
            d2h,
            ..
        } = self;
        let (h2d, compute, d2h) = (&*h2d, &*compute, &*d2h);
        let batches = rows.div_ceil(batch);
        let batch_rows = |k: usize| (rows - k * batch).min(batch);
        let plan = BatchPlan {
            l,
            stride,
            packed,
            dma,
        };
        let enqueue = |k: usize| -> Result<()> {
            let total = totals.device_ptr() + 8 * (k % SETS) as u64;
            let src_addr = src.device_addr() + (k * batch * l) as u64;
            plan.enqueue(
                comp,
                &sets[k % SETS],
                src_addr,
                batch_rows(k),
                total,
                h2d,
                compute,
            )
        };
        let mut written = 0u64;
        let mut run = || -> Result<()> {
            for k in 0..batches.min(SETS) {
                enqueue(k)?;
            }
            for k in 0..batches {
                let set = &sets[k % SETS];
                set.done.synchronize()?;
                let n = batch_rows(k);
                let data_len = if packed {
                    totals[k % SETS] as usize
                } else {
                    n * l
                };
                copy_to_pinned(&set.out, out_data, data_len, d2h)?;
                copy_to_pinned(&set.work.flags, out_flags, flag_bytes(n), d2h)?;
                if packed {
                    copy_to_pinned(&set.work.offsets, out_offsets, n + 1, d2h)?;
                }
                sync(d2h, "copying a compressed batch back")?;
                // The set is free again: start reading batch k + SETS into
                // it before the sink runs.
                if k + SETS < batches {
                    enqueue(k + SETS)?;
                }
                written += data_len as u64;
                sink(CompressedBatch {
                    first_row: (k * batch) as u64,
                    rows: n,
                    flags: &out_flags[..flag_bytes(n)],
                    offsets: if packed { &out_offsets[..n + 1] } else { &[] },
                    data: &out_data[..data_len],
                })?;
            }
            Ok(())
        };
        let result = run();
        if result.is_err() {
            // Q: why wait before returning an error?
            // A: batches already enqueued still read `src` and write these
            // buffers; the caller may free `src` (or unregister it) as soon
            // as we return.
            for s in [h2d, compute, d2h] {
                let _ = s.synchronize();
            }
        }
        result.map(|()| written)
    }
}

impl Compressor<'_> {
    /// Compress rows in host memory the GPU can read (a [`PinnedBuffer`] or
    /// [`Registered`](super::Registered)) without a device copy of the dataset: see
    /// [`HostCompressor`], which this creates for the call (keep one to
    /// reuse its buffers). Returns the total compressed bytes. Allocates the
    /// compressor's buffers and blocks until done.
    pub fn compress_host_blocking<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        opts: &HostOptions,
        sink: impl FnMut(CompressedBatch<'_>) -> Result<()>,
    ) -> Result<u64> {
        let rows = row_count(src, self.codebook().row_bytes())?;
        let mut opts = opts.clone();
        // No larger buffers than the dataset needs.
        opts.batch_bytes = opts
            .batch_bytes
            .min(rows.next_multiple_of(8) * self.codebook().row_bytes());
        HostCompressor::new(self.codebook().row_bytes(), &opts)?.compress_blocking(self, src, sink)
    }

    /// [`Compressor::compress_host_blocking`] into one [`Packed`] on the host.
    pub fn compress_host_packed_blocking<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        batch_bytes: usize,
    ) -> Result<Packed> {
        let l = self.codebook().row_bytes();
        let rows = row_count(src, l)?;
        let mut out = Packed {
            row_bytes: l,
            rows,
            flags: Vec::with_capacity(flag_bytes(rows)),
            offsets: Vec::with_capacity(rows + 1),
            payload: Vec::new(),
        };
        let opts = HostOptions {
            layout: Layout::Packed,
            batch_bytes,
            ..Default::default()
        };
        self.compress_host_blocking(src, &opts, |b| {
            let base = out.payload.len() as u64;
            out.offsets
                .extend(b.offsets[..b.rows].iter().map(|o| o + base));
            out.flags.extend_from_slice(b.flags);
            out.payload.extend_from_slice(b.data);
            Ok(())
        })?;
        out.offsets.push(out.payload.len() as u64);
        Ok(out)
    }

    /// [`Compressor::compress_host_blocking`] into one [`FixedStride`] on the host.
    pub fn compress_host_fixed_blocking<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        batch_bytes: usize,
    ) -> Result<FixedStride> {
        let l = self.codebook().row_bytes();
        let rows = row_count(src, l)?;
        let mut out = FixedStride {
            row_bytes: l,
            rows,
            flags: Vec::with_capacity(flag_bytes(rows)),
            slots: Vec::with_capacity(rows * l),
        };
        let opts = HostOptions {
            layout: Layout::FixedStride,
            batch_bytes,
            ..Default::default()
        };
        self.compress_host_blocking(src, &opts, |b| {
            out.flags.extend_from_slice(b.flags);
            out.slots.extend_from_slice(b.data);
            Ok(())
        })?;
        Ok(out)
    }
}

/// What every batch of one [`HostCompressor::compress_blocking`] call
/// shares.
struct BatchPlan {
    l: usize,
    stride: usize,
    packed: bool,
    dma: bool,
}

impl BatchPlan {
    /// Enqueue batch `n` rows at `src` into `set`: the copy (DMA) or the
    /// size pass reading zero-copy, the scan (the packed total into
    /// `total`, pinned), and the encoder; `set.done` is recorded after.
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &self,
        comp: &Compressor<'_>,
        set: &BatchSet,
        src: u64,
        n: usize,
        total: u64,
        h2d: &Stream,
        compute: &Stream,
    ) -> Result<()> {
        let l = self.l;
        let stage = set.stage.as_device_ptr().as_raw();
        if self.dma {
            // SAFETY: both ranges lie in their buffers; the set's previous
            // batch is finished (the host waited for it before reusing
            // the set).
            unsafe {
                copy::unified_async(stage, src, n * l, h2d, "copying a batch to the device")?
            };
            set.copied.record(h2d)?;
            wait(compute, &set.copied)?;
            comp.enqueue_size(stage, n, &set.work.sizes, None, compute)?;
        } else {
            let staged = Some((stage, self.stride as u64));
            comp.enqueue_size(src, n, &set.work.sizes, staged, compute)?;
        }
        let total = if self.packed { total } else { 0 };
        comp.enqueue_scan(&set.work, n, l, self.packed, total, compute)?;
        zero_async(&set.out, encoder_out_bytes(n * l), compute)?;
        let staged = (stage, self.stride as u64);
        comp.enqueue_encode(staged, n, &set.work, self.packed, &set.out, compute)?;
        set.done.record(compute)
    }
}
