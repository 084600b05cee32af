//! Fit and compression on the GPU (`ibp_kernels::encode`).
//!
//! ```text
//! let fit = gpu.fit(&rows_on_gpu, row_bytes, &FitOptions::default())?;     // same codebook as ibp::fit::fit
//! let gcb = GpuCodebook::new(&fit.codebook)?;
//! let packed = gpu.compress(&gcb, &rows_on_gpu, OutputLayout::Packed)?;   // stays on the device
//! let host: Packed = packed.to_packed()?;                                   // byte-identical to the CPU's
//! // Host data: read zero-copy in batches, compressed batches handed back as they land.
//! gpu.compress_host(&gcb, &pinned_rows, &HostOptions::default(), |batch| { ...; Ok(()) })?;
//! ```
//!
//! The pipeline per dataset (or per batch) is four launches on one stream:
//! `ibp_size` (stored length of every tensor), the three-kernel scan
//! (offsets, flag bitmap), a memset of the output, and `ibp_encode_c*`. The
//! output is byte-identical to [`crate::layout::compress_packed`] and
//! [`crate::layout::compress_fixed`].

use std::ffi::c_void;
use std::marker::PhantomData;

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::{Stream, StreamFlags};
use cust::sys as cu;
use ibp_kernels::params::{
    EncodeParams, MAX_THRESHOLDS, MeasureParams, SCAN_BLOCK, SCAN_TILE, ScanParams,
};

use super::decode::{Event, wait};
use super::launch::copy_to_host;
use super::memory::{GpuReadable, PinnedBuffer, Span};
use super::{Gpu, cuda_err};
use crate::codebook::Codebook;
use crate::error::{Error, Result};
use crate::fit::choose::{Totals, choose_with};
use crate::fit::{Fit, FitOptions, SamplePlan};
use crate::kernel_tables::{encoder_book, eval_book};
use crate::layout::{FixedStride, Packed, SizeReport, flag_bytes};

/// Threads per block of the warp-per-tensor kernels.
///
/// Q: why blocks of only two warps?
/// A: the warps are independent (no shared memory, no barriers), and
/// registers are granted per block: at 80–90 registers a thread, blocks of
/// eight warps leave a third of the register file unused, blocks of two fill
/// it (more warps in flight to hide latency).
const WARP_BLOCK: u32 = 64;

/// Longest tensor the GPU fit and compression take: a lane's count of saved
/// bits is a u32 (`8 L < 2^32`).
pub const MAX_ROW_BYTES: usize = 1 << 28;

/// Which layout of `docs/FORMAT.md` §3 to produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputLayout {
    /// Stored forms back to back, with an offsets table.
    Packed,
    /// Each stored form at the start of its tensor's slot, zeros after it.
    FixedStride,
}

/// A codebook in device memory, as the size query and the encoder read it.
pub struct GpuCodebook {
    cb: Codebook,
    book: DeviceBuffer<u64>,
}

impl GpuCodebook {
    /// Upload `cb`'s tables. A CUDA context must be current (a [`Gpu`]).
    pub fn new(cb: &Codebook) -> Result<Self> {
        Ok(Self {
            cb: cb.clone(),
            book: DeviceBuffer::from_slice(&encoder_book(cb))
                .map_err(cuda_err("uploading the codebook"))?,
        })
    }

    /// The codebook.
    pub fn codebook(&self) -> &Codebook {
        &self.cb
    }
}

/// A dataset compressed on the device (by [`Gpu::compress`] or
/// [`Gpu::compress_into`], which reuses its buffers).
pub struct DeviceCompressed {
    layout: OutputLayout,
    rows: usize,
    row_bytes: usize,
    work: Work,
    data: DeviceBuffer<u8>,
    data_len: usize,
    total: PinnedBuffer<u64>,
    stream: Stream,
}

impl DeviceCompressed {
    /// An empty result, to compress into. A CUDA context must be current.
    pub fn empty() -> Result<Self> {
        Ok(Self {
            layout: OutputLayout::Packed,
            rows: 0,
            row_bytes: 0,
            work: Work::new(0)?,
            data: device_buffer(0, "allocating the compressed output")?,
            data_len: 0,
            total: PinnedBuffer::zeroed(1)?,
            stream: new_stream()?,
        })
    }

    /// The layout.
    pub fn layout(&self) -> OutputLayout {
        self.layout
    }

    /// Number of tensors.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes of payload (packed) or slots (fixed-stride).
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// Device address of the payload or slots (`data_len` bytes).
    pub fn data_addr(&self) -> u64 {
        self.data.as_device_ptr().as_raw()
    }

    /// Device address of the offsets (`rows + 1` u64; packed layout).
    pub fn offsets_addr(&self) -> u64 {
        self.work.offsets.as_device_ptr().as_raw()
    }

    /// Device address of the flag bitmap (`⌈rows / 8⌉` bytes).
    pub fn flags_addr(&self) -> u64 {
        self.work.flags.as_device_ptr().as_raw()
    }

    /// Take the result apart, for a [`super::GpuDataset`] over it, once its
    /// stream has finished.
    pub(crate) fn into_parts(self) -> Result<CompressedParts> {
        self.stream
            .synchronize()
            .map_err(cuda_err("waiting for the compression"))?;
        Ok(CompressedParts {
            layout: self.layout,
            rows: self.rows,
            row_bytes: self.row_bytes,
            data: self.data,
            data_len: self.data_len,
            offsets: self.work.offsets,
            flags: self.work.flags,
        })
    }

    /// Copy a packed result to the host.
    pub fn to_packed(&self) -> Result<Packed> {
        if self.layout != OutputLayout::Packed {
            return Err(Error::invalid("this result is in the fixed-stride layout"));
        }
        Ok(Packed {
            row_bytes: self.row_bytes,
            rows: self.rows,
            flags: copy_prefix(&self.work.flags, flag_bytes(self.rows))?,
            offsets: copy_prefix(&self.work.offsets, self.rows + 1)?,
            payload: copy_prefix(&self.data, self.data_len)?,
        })
    }

    /// Copy a fixed-stride result to the host.
    pub fn to_fixed(&self) -> Result<FixedStride> {
        if self.layout != OutputLayout::FixedStride {
            return Err(Error::invalid("this result is in the packed layout"));
        }
        Ok(FixedStride {
            row_bytes: self.row_bytes,
            rows: self.rows,
            flags: copy_prefix(&self.work.flags, flag_bytes(self.rows))?,
            slots: copy_prefix(&self.data, self.data_len)?,
        })
    }
}

/// A finished [`DeviceCompressed`], taken apart.
pub(crate) struct CompressedParts {
    pub layout: OutputLayout,
    pub rows: usize,
    pub row_bytes: usize,
    pub data: DeviceBuffer<u8>,
    pub data_len: usize,
    pub offsets: DeviceBuffer<u64>,
    pub flags: DeviceBuffer<u8>,
}

/// The first `len` elements of a device buffer, on the host (synchronous).
fn copy_prefix<T: cust::memory::DeviceCopy + bytemuck::Pod>(
    buf: &DeviceSlice<T>,
    len: usize,
) -> Result<Vec<T>> {
    if len > buf.len() {
        return Err(Error::invalid("copy larger than its buffer"));
    }
    let mut v = vec![T::zeroed(); len];
    if len == 0 {
        return Ok(v);
    }
    // SAFETY: `len` elements lie in both buffers; the copy is synchronous.
    let r = unsafe {
        cu::cuMemcpyDtoH_v2(
            v.as_mut_ptr() as *mut c_void,
            buf.as_device_ptr().as_raw(),
            len * size_of::<T>(),
        )
    };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(Error::cuda_code(
            format!("copying to the host: {r:?}"),
            r as u32,
        ));
    }
    Ok(v)
}

/// Grow `buf` to at least `len` elements (contents not kept).
fn ensure<T: cust::memory::DeviceCopy>(
    buf: &mut DeviceBuffer<T>,
    len: usize,
    what: &str,
) -> Result<()> {
    if buf.len() < len {
        *buf = device_buffer(len, what)?;
    }
    Ok(())
}

/// Batch buffers in flight in [`Gpu::compress_host`].
const SETS: usize = 3;

/// Device buffers of one batch in flight.
struct BatchSet {
    work: Work,
    stage: DeviceBuffer<u8>,
    out: DeviceBuffer<u8>,
    copied: Event,
    done: Event,
}

/// How [`Gpu::compress_host`] reads a batch of host rows (once, either way).
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

/// Options of [`Gpu::compress_host`].
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Layout of the batches.
    pub layout: OutputLayout,
    /// How batches are read.
    pub read: HostRead,
    /// Input bytes per batch (rounded to a multiple of 8 tensors, at least
    /// 8). Two batches of device buffers are allocated.
    pub batch_bytes: usize,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            layout: OutputLayout::Packed,
            read: HostRead::Dma,
            batch_bytes: 64 << 20,
        }
    }
}

/// One compressed batch of [`Gpu::compress_host`], in pinned host memory.
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

/// Host memory registered with the driver and mapped into the device's
/// address space for as long as this lives: the kernels read the caller's
/// own bytes zero-copy, with no pinned copy.
pub struct Registered<'a> {
    ptr: *mut c_void,
    device: u64,
    len: usize,
    _borrow: PhantomData<&'a [u8]>,
}

impl<'a> Registered<'a> {
    /// Page-lock and map `bytes` (read-only for the device). A CUDA context
    /// must be current. Fails when the range (or part of it) is already
    /// registered.
    pub fn new(bytes: &'a [u8]) -> Result<Self> {
        if bytes.is_empty() {
            return Err(Error::invalid("cannot register 0 bytes"));
        }
        let ptr = bytes.as_ptr() as *mut c_void;
        // Q: why try read-only first?
        // A: the bytes may be a read-only mapping (a memory-mapped file);
        // registering those writable fails. Devices without read-only
        // registration take the plain flag.
        let mut r = cu::CUresult::CUDA_ERROR_UNKNOWN;
        for flags in [
            cu::CU_MEMHOSTREGISTER_DEVICEMAP | cu::CU_MEMHOSTREGISTER_READ_ONLY,
            cu::CU_MEMHOSTREGISTER_DEVICEMAP,
        ] {
            // SAFETY: `ptr .. ptr + len` is a live borrow for 'a; it is
            // unregistered in Drop before the borrow ends.
            r = unsafe { cu::cuMemHostRegister_v2(ptr, bytes.len(), flags) };
            if r == cu::CUresult::CUDA_SUCCESS {
                break;
            }
        }
        if r != cu::CUresult::CUDA_SUCCESS {
            return Err(Error::cuda_code(
                format!("registering {} bytes of host memory: {r:?}", bytes.len()),
                r as u32,
            ));
        }
        let mut device: cu::CUdeviceptr = 0;
        // SAFETY: `ptr` is registered with DEVICEMAP.
        let r = unsafe { cu::cuMemHostGetDevicePointer_v2(&mut device, ptr, 0) };
        if r != cu::CUresult::CUDA_SUCCESS {
            // SAFETY: registered above, not used after this.
            unsafe { cu::cuMemHostUnregister(ptr) };
            return Err(Error::cuda_code(
                format!("mapping registered memory into the device: {r:?}"),
                r as u32,
            ));
        }
        Ok(Self {
            ptr,
            device,
            len: bytes.len(),
            _borrow: PhantomData,
        })
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        // SAFETY: registered in `new`, unregistered once.
        unsafe { cu::cuMemHostUnregister(self.ptr) };
    }
}

impl GpuReadable for Registered<'_> {
    fn device_addr(&self) -> u64 {
        self.device
    }
    fn byte_len(&self) -> usize {
        self.len
    }
}

/// Rows of `row_bytes` in `src`, validated.
fn row_count<S: GpuReadable + ?Sized>(src: &S, row_bytes: usize) -> Result<usize> {
    if row_bytes == 0 {
        return Err(Error::invalid("row length is 0 bytes"));
    }
    if row_bytes > MAX_ROW_BYTES {
        return Err(Error::unsupported(format!(
            "tensors of {row_bytes} bytes; the GPU fit and compression take up to {MAX_ROW_BYTES}"
        )));
    }
    if !src.byte_len().is_multiple_of(row_bytes) {
        return Err(Error::invalid(format!(
            "{} bytes do not split into tensors of {row_bytes} bytes",
            src.byte_len()
        )));
    }
    Ok(src.byte_len() / row_bytes)
}

fn new_stream() -> Result<Stream> {
    Stream::new(StreamFlags::NON_BLOCKING, None).map_err(cuda_err("creating a stream"))
}

fn sync(stream: &Stream, what: &str) -> Result<()> {
    stream.synchronize().map_err(cuda_err(what))
}

/// A device buffer of `len` elements (at least one allocated), not zeroed.
fn device_buffer<T: cust::memory::DeviceCopy>(len: usize, what: &str) -> Result<DeviceBuffer<T>> {
    // SAFETY: every element is written by a kernel or a memset before it is
    // read (the callers' pipelines), and T is plain data.
    unsafe { DeviceBuffer::uninitialized(len.max(1)) }.map_err(cuda_err(what))
}

/// Enqueue a zero fill of the first `bytes` bytes of `buf`.
fn zero_async(buf: &DeviceSlice<u8>, bytes: usize, stream: &Stream) -> Result<()> {
    let bytes = bytes.min(buf.len());
    // SAFETY: `bytes` is within the buffer; the stream is valid.
    let r =
        unsafe { cu::cuMemsetD8Async(buf.as_device_ptr().as_raw(), 0, bytes, stream.as_inner()) };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(Error::cuda_code(
            format!("zeroing {bytes} bytes: {r:?}"),
            r as u32,
        ));
    }
    Ok(())
}

/// Enqueue a copy of `len` elements of `src` into `dst` (pinned).
fn copy_to_pinned<T: bytemuck::Pod + cust::memory::DeviceCopy>(
    src: &DeviceSlice<T>,
    dst: &mut PinnedBuffer<T>,
    len: usize,
    stream: &Stream,
) -> Result<()> {
    copy_elements(src, 0, dst, len, stream)
}

/// Enqueue a copy of elements `from .. from + len` of `src` to the start of
/// `dst` (pinned).
fn copy_elements<T: bytemuck::Pod + cust::memory::DeviceCopy>(
    src: &DeviceSlice<T>,
    from: usize,
    dst: &mut PinnedBuffer<T>,
    len: usize,
    stream: &Stream,
) -> Result<()> {
    let bytes = len * size_of::<T>();
    if from + len > src.len() || len > dst.len() {
        return Err(Error::invalid("copy larger than its buffers"));
    }
    // SAFETY: both ranges are inside their buffers; `dst` is pinned, so an
    // asynchronous copy is allowed; the caller synchronises before reading.
    let r = unsafe {
        cu::cuMemcpyDtoHAsync_v2(
            dst.as_mut_ptr() as *mut c_void,
            src.as_device_ptr().as_raw() + (from * size_of::<T>()) as u64,
            bytes,
            stream.as_inner(),
        )
    };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(Error::cuda_code(
            format!("copying {bytes} bytes to the host: {r:?}"),
            r as u32,
        ));
    }
    Ok(())
}

/// Device buffers of one pipeline (a whole dataset, or one batch).
struct Work {
    sizes: DeviceBuffer<u64>,
    offsets: DeviceBuffer<u64>,
    flags: DeviceBuffer<u8>,
    partials: DeviceBuffer<u64>,
}

impl Work {
    /// Grow every buffer to hold `rows` tensors.
    fn ensure(&mut self, rows: usize) -> Result<()> {
        if self.sizes.len() < rows {
            *self = Work::new(rows)?;
        }
        Ok(())
    }

    fn new(rows: usize) -> Result<Self> {
        Ok(Self {
            sizes: device_buffer(rows, "allocating sizes")?,
            offsets: device_buffer(rows + 1, "allocating offsets")?,
            flags: device_buffer(flag_bytes(rows), "allocating flags")?,
            partials: device_buffer(
                (rows as u64).div_ceil(SCAN_TILE) as usize,
                "allocating scan partials",
            )?,
        })
    }
}

/// Reusable buffers for compressing host rows in batches (see
/// [`HostCompressor::compress`]).
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
    /// Buffers for tensors of `row_bytes` bytes: [`SETS`] batches of device
    /// buffers (input and output) and one of pinned output. A CUDA context
    /// must be current.
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
                out: device_buffer::<u8>(batch * l, "allocating the batch output")?,
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
    /// [`PinnedBuffer`] or [`Registered`]; `row_bytes` as given to
    /// [`HostCompressor::new`]) and hand each compressed batch to `sink`, in
    /// order. Returns the total compressed bytes (payload or slots).
    pub fn compress<S: GpuReadable + ?Sized>(
        &mut self,
        gpu: &Gpu,
        gcb: &GpuCodebook,
        src: &S,
        mut sink: impl FnMut(CompressedBatch<'_>) -> Result<()>,
    ) -> Result<u64> {
        let l = self.row_bytes;
        if gcb.cb.row_bytes() != l {
            return Err(Error::invalid(format!(
                "the codebook is for {}-byte tensors, this compressor for {l}-byte tensors",
                gcb.cb.row_bytes()
            )));
        }
        let rows = row_count(src, l)?;
        if rows == 0 {
            return Ok(0);
        }
        let batch = self.batch;
        let packed = self.opts.layout == OutputLayout::Packed;
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
        let enqueue = |k: usize| -> Result<()> {
            let set = &sets[k % SETS];
            let n = batch_rows(k);
            let src_addr = src.device_addr() + (k * batch * l) as u64;
            let stage_addr = set.stage.as_device_ptr().as_raw();
            if dma {
                // SAFETY: both ranges lie in their buffers; the set's previous
                // batch is finished (the host waited for it before reusing
                // the set).
                let r = unsafe { cu::cuMemcpyAsync(stage_addr, src_addr, n * l, h2d.as_inner()) };
                if r != cu::CUresult::CUDA_SUCCESS {
                    return Err(Error::cuda_code(
                        format!("copying a batch to the device: {r:?}"),
                        r as u32,
                    ));
                }
                set.copied.record(h2d)?;
                wait(compute, &set.copied)?;
                gpu.enqueue_size(gcb, stage_addr, n, &set.work.sizes, None, compute)?;
            } else {
                gpu.enqueue_size(
                    gcb,
                    src_addr,
                    n,
                    &set.work.sizes,
                    Some((stage_addr, stride as u64)),
                    compute,
                )?;
            }
            let total = if packed {
                totals.device_ptr() + 8 * (k % SETS) as u64
            } else {
                0
            };
            gpu.enqueue_scan(&set.work, n, l, packed, total, compute)?;
            zero_async(&set.out, n * l, compute)?;
            gpu.enqueue_encode(
                gcb,
                (stage_addr, stride as u64),
                n,
                &set.work,
                packed,
                &set.out,
                compute,
            )?;
            set.done.record(compute)
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

impl Gpu {
    /// Blocks for a warp-per-tensor kernel over `tensors` tensors.
    fn warp_grid(&self, kernel: &str, tensors: u64) -> Result<u32> {
        let per_block = (WARP_BLOCK / 32) as u64;
        let want = tensors.div_ceil(per_block).max(1);
        let full = self.resident_blocks(kernel, WARP_BLOCK, 0)? as u64;
        Ok(want.min(full) as u32)
    }

    /// Enqueue `ibp_size` over rows `src` (`rows` tensors, `stride` apart).
    #[allow(clippy::too_many_arguments)]
    fn enqueue_size(
        &self,
        gcb: &GpuCodebook,
        src: u64,
        rows: usize,
        sizes: &DeviceSlice<u64>,
        stage: Option<(u64, u64)>,
        stream: &Stream,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let l = gcb.cb.row_bytes() as u64;
        let p = MeasureParams {
            src,
            stride: l,
            rows: rows as u64,
            sample: rows as u64,
            row_bytes: l,
            book: gcb.book.as_device_ptr().as_raw(),
            sizes: sizes.as_device_ptr().as_raw(),
            stage: stage.map_or(0, |s| s.0),
            stage_stride: stage.map_or(0, |s| s.1),
            chunk: gcb.cb.chunk().bytes(),
            ..Default::default()
        };
        let grid = self.warp_grid("ibp_size", rows as u64)?;
        // SAFETY: `src` covers rows × L bytes, the book is this codebook's,
        // `sizes` holds `rows` u64 and the stage (when given) rows × stride
        // bytes (the callers' buffers); MeasureParams is the kernel's type.
        unsafe { self.launch("ibp_size", grid, WARP_BLOCK, 0, stream, p) }
    }

    /// Enqueue the scan of `rows` sizes: flags always, offsets when
    /// `offsets` (and the total to `total` when not 0).
    fn enqueue_scan(
        &self,
        work: &Work,
        rows: usize,
        row_bytes: usize,
        offsets: bool,
        total: u64,
        stream: &Stream,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let tiles = (rows as u64).div_ceil(SCAN_TILE);
        let p = ScanParams {
            sizes: work.sizes.as_device_ptr().as_raw(),
            rows: rows as u64,
            row_bytes: row_bytes as u64,
            offsets: work.offsets.as_device_ptr().as_raw(),
            flags: work.flags.as_device_ptr().as_raw(),
            partials: work.partials.as_device_ptr().as_raw(),
            tiles,
            total,
        };
        let smem = 33 * 8;
        // SAFETY: the Work buffers were sized for at least `rows` tensors;
        // ScanParams is the kernels' type; 33 u64 of shared memory as the
        // block scan needs.
        unsafe {
            self.launch("ibp_scan_tiles", tiles as u32, SCAN_BLOCK, smem, stream, p)?;
            if offsets {
                self.launch("ibp_scan_partials", 1, SCAN_BLOCK, smem, stream, p)?;
                self.launch("ibp_scan_apply", tiles as u32, SCAN_BLOCK, smem, stream, p)?;
            }
        }
        Ok(())
    }

    /// Enqueue `ibp_encode_c*` into `out` (zeroed), packed when `offsets`.
    #[allow(clippy::too_many_arguments)]
    fn enqueue_encode(
        &self,
        gcb: &GpuCodebook,
        src: (u64, u64),
        rows: usize,
        work: &Work,
        offsets: bool,
        out: &DeviceSlice<u8>,
        stream: &Stream,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let name = match gcb.cb.chunk().bytes() {
            1 => "ibp_encode_c1",
            2 => "ibp_encode_c2",
            4 => "ibp_encode_c4",
            _ => "ibp_encode_c8",
        };
        let p = EncodeParams {
            src: src.0,
            stride: src.1,
            rows: rows as u64,
            row_bytes: gcb.cb.row_bytes() as u64,
            book: gcb.book.as_device_ptr().as_raw(),
            sizes: work.sizes.as_device_ptr().as_raw(),
            offsets: if offsets {
                work.offsets.as_device_ptr().as_raw()
            } else {
                0
            },
            offset_base: 0,
            out: out.as_device_ptr().as_raw(),
        };
        let grid = self.warp_grid(name, rows as u64)?;
        // SAFETY: sizes (and offsets) were computed for these rows by the
        // size and scan kernels earlier on this stream, so every region lies
        // inside `out` (sized by the caller from them); EncodeParams is the
        // kernel's type.
        unsafe { self.launch(name, grid, WARP_BLOCK, 0, stream, p) }
    }

    /// Stored length of every tensor of `src` under `gcb` (blocking).
    pub fn size_query<S: GpuReadable + ?Sized>(
        &self,
        gcb: &GpuCodebook,
        src: &S,
    ) -> Result<SizeReport> {
        let rows = row_count(src, gcb.cb.row_bytes())?;
        let stream = new_stream()?;
        let sizes = device_buffer::<u64>(rows, "allocating sizes")?;
        self.enqueue_size(gcb, src.device_addr(), rows, &sizes, None, &stream)?;
        sync(&stream, "measuring sizes")?;
        let mut stored = copy_to_host(&sizes)?;
        stored.truncate(rows);
        let l = gcb.cb.row_bytes() as u64;
        let encoded_rows = stored.iter().filter(|&&s| s < l).count() as u64;
        Ok(SizeReport {
            total_stored: stored.iter().sum(),
            raw_rows: rows as u64 - encoded_rows,
            encoded_rows,
            stored,
        })
    }

    /// Compress the rows in `src` (device memory, or host memory the GPU
    /// can read: a [`PinnedBuffer`] or [`Registered`]) into `layout`, in
    /// device memory. Blocks until done. See [`Gpu::compress_into`] to reuse
    /// the output's buffers.
    ///
    /// Reads `src` twice (sizes, then the stored forms): for host memory,
    /// [`Gpu::compress_host`] reads it once.
    pub fn compress<S: GpuReadable + ?Sized>(
        &self,
        gcb: &GpuCodebook,
        src: &S,
        layout: OutputLayout,
    ) -> Result<DeviceCompressed> {
        let mut out = DeviceCompressed::empty()?;
        self.compress_into(gcb, src, layout, &mut out)?;
        Ok(out)
    }

    /// [`Gpu::compress`] into `out`, whose device buffers are reused when
    /// they are large enough (and grown otherwise).
    pub fn compress_into<S: GpuReadable + ?Sized>(
        &self,
        gcb: &GpuCodebook,
        src: &S,
        layout: OutputLayout,
        out: &mut DeviceCompressed,
    ) -> Result<()> {
        let l = gcb.cb.row_bytes();
        let rows = row_count(src, l)?;
        let stream = &out.stream;
        let packed = layout == OutputLayout::Packed;
        out.work.ensure(rows)?;
        let work = &out.work;
        self.enqueue_size(gcb, src.device_addr(), rows, &work.sizes, None, stream)?;
        self.enqueue_scan(work, rows, l, packed, 0, stream)?;
        let data_len = if packed {
            if rows == 0 {
                0
            } else {
                copy_elements(&work.offsets, rows, &mut out.total, 1, stream)?;
                sync(stream, "scanning sizes")?;
                out.total[0] as usize
            }
        } else {
            rows * l
        };
        ensure(&mut out.data, data_len, "allocating the compressed output")?;
        zero_async(&out.data, data_len, stream)?;
        self.enqueue_encode(
            gcb,
            (src.device_addr(), l as u64),
            rows,
            &out.work,
            packed,
            &out.data,
            stream,
        )?;
        sync(stream, "compressing")?;
        out.layout = layout;
        out.rows = rows;
        out.row_bytes = l;
        out.data_len = data_len;
        Ok(())
    }

    /// Compress rows in host memory the GPU can read (a [`PinnedBuffer`] or
    /// [`Registered`]) without a device copy of the dataset: see
    /// [`HostCompressor`], which this creates for the call (keep one to
    /// reuse its buffers). Returns the total compressed bytes.
    pub fn compress_host<S: GpuReadable + ?Sized>(
        &self,
        gcb: &GpuCodebook,
        src: &S,
        opts: &HostOptions,
        sink: impl FnMut(CompressedBatch<'_>) -> Result<()>,
    ) -> Result<u64> {
        let rows = row_count(src, gcb.cb.row_bytes())?;
        let mut opts = opts.clone();
        // No larger buffers than the dataset needs.
        opts.batch_bytes = opts
            .batch_bytes
            .min(rows.next_multiple_of(8) * gcb.cb.row_bytes());
        HostCompressor::new(gcb.cb.row_bytes(), &opts)?.compress(self, gcb, src, sink)
    }

    /// [`Gpu::compress_host`] into one [`Packed`] on the host.
    pub fn compress_host_packed<S: GpuReadable + ?Sized>(
        &self,
        gcb: &GpuCodebook,
        src: &S,
        batch_bytes: usize,
    ) -> Result<Packed> {
        let l = gcb.cb.row_bytes();
        let rows = row_count(src, l)?;
        let mut out = Packed {
            row_bytes: l,
            rows,
            flags: Vec::with_capacity(flag_bytes(rows)),
            offsets: Vec::with_capacity(rows + 1),
            payload: Vec::new(),
        };
        let opts = HostOptions {
            layout: OutputLayout::Packed,
            batch_bytes,
            ..Default::default()
        };
        self.compress_host(gcb, src, &opts, |b| {
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

    /// [`Gpu::compress_host`] into one [`FixedStride`] on the host.
    pub fn compress_host_fixed<S: GpuReadable + ?Sized>(
        &self,
        gcb: &GpuCodebook,
        src: &S,
        batch_bytes: usize,
    ) -> Result<FixedStride> {
        let l = gcb.cb.row_bytes();
        let rows = row_count(src, l)?;
        let mut out = FixedStride {
            row_bytes: l,
            rows,
            flags: Vec::with_capacity(flag_bytes(rows)),
            slots: Vec::with_capacity(rows * l),
        };
        let opts = HostOptions {
            layout: OutputLayout::FixedStride,
            batch_bytes,
            ..Default::default()
        };
        self.compress_host(gcb, src, &opts, |b| {
            out.flags.extend_from_slice(b.flags);
            out.slots.extend_from_slice(b.data);
            Ok(())
        })?;
        Ok(out)
    }

    /// Choose a codebook for the rows in `src` (device memory, or host
    /// memory the GPU can read) by the rule of `docs/FORMAT.md` §4: the same
    /// [`Fit`] as [`crate::fit::fit`] on the same rows and options. Counts
    /// the sample's bits, then weighs every candidate threshold and chunk
    /// size in one pass over the sample per eight thresholds. A sample
    /// smaller than the dataset is first gathered into device memory.
    pub fn fit<S: GpuReadable + ?Sized>(
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
        let grid = self.warp_grid("ibp_gather", plan.len())?;
        // SAFETY: the source holds n rows, the buffer `sample` rows of L
        // bytes; MeasureParams is the kernel's type.
        unsafe { self.launch("ibp_gather", grid, WARP_BLOCK, 0, &stream, p)? };
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
        copy_to_host(&counts)
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
                let grid = self.warp_grid("ibp_fit_eval", s)?;
                // SAFETY: the sample holds s rows of L bytes, the book 1 + nt
                // u64 per 8-byte word, totals 64 u64; MeasureParams is the
                // kernel's type.
                unsafe { self.launch("ibp_fit_eval", grid, WARP_BLOCK, 0, stream, p)? };
                sync(stream, "weighing candidates")?;
                let t = copy_to_host(&totals)?;
                out.extend((0..group.len()).map(|i| Totals {
                    stored: std::array::from_fn(|c| t[2 * (4 * i + c)]),
                    encoded: std::array::from_fn(|c| t[2 * (4 * i + c) + 1]),
                }));
            }
            Ok(out)
        })
    }
}

impl Gpu {
    /// Time each stage of fitting and compressing the rows in `src` on its
    /// own (median of `reps` runs, each launch followed by a synchronisation):
    /// `(stage, seconds)`. For `ibp bench --stages`; the stages run
    /// back-to-back in [`Gpu::fit`] and [`Gpu::compress`].
    #[doc(hidden)]
    pub fn profile_stages<S: GpuReadable + ?Sized>(
        &self,
        gcb: &GpuCodebook,
        src: &S,
        reps: usize,
    ) -> Result<Vec<(&'static str, f64)>> {
        let l = gcb.cb.row_bytes();
        let rows = row_count(src, l)?;
        let stream = new_stream()?;
        let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
            f()?;
            sync(&stream, "profiling")?;
            let mut t = Vec::with_capacity(reps);
            for _ in 0..reps.max(1) {
                let s = std::time::Instant::now();
                f()?;
                sync(&stream, "profiling")?;
                t.push(s.elapsed().as_secs_f64());
            }
            t.sort_by(f64::total_cmp);
            Ok(t[t.len() / 2])
        };
        let mut out = Vec::new();
        let mut counts = DeviceBuffer::<u64>::zeroed(8 * l).map_err(cuda_err("allocating"))?;
        out.push((
            "count bits",
            time(&mut || self.count_bits(src, l, &mut counts, &stream))?,
        ));
        let cpu_counts = copy_to_host(&counts)?;
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
        let grid = self.warp_grid("ibp_fit_eval", rows as u64)?;
        out.push((
            "evaluate 6 thresholds",
            // SAFETY: as in fit_counted.
            time(&mut || unsafe { self.launch("ibp_fit_eval", grid, WARP_BLOCK, 0, &stream, p) })?,
        ));
        let mut work = Work::new(rows)?;
        work.ensure(rows)?;
        out.push((
            "size",
            time(&mut || {
                self.enqueue_size(gcb, src.device_addr(), rows, &work.sizes, None, &stream)
            })?,
        ));
        out.push((
            "scan",
            time(&mut || self.enqueue_scan(&work, rows, l, true, 0, &stream))?,
        ));
        let data = device_buffer::<u8>(rows * l, "allocating")?;
        out.push((
            "zero the output (fixed)",
            time(&mut || zero_async(&data, rows * l, &stream))?,
        ));
        out.push((
            "encode (packed)",
            time(&mut || {
                self.enqueue_encode(
                    gcb,
                    (src.device_addr(), l as u64),
                    rows,
                    &work,
                    true,
                    &data,
                    &stream,
                )
            })?,
        ));
        out.push((
            "encode (fixed)",
            time(&mut || {
                self.enqueue_encode(
                    gcb,
                    (src.device_addr(), l as u64),
                    rows,
                    &work,
                    false,
                    &data,
                    &stream,
                )
            })?,
        ));
        Ok(out)
    }
}
