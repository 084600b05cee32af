//! Every kernel of ibp, with the one parameter block it takes (`Kernel`),
//! and the one launch function: a kernel cannot be launched with another
//! kernel's parameters, and no launch names a kernel by string.
//!
//! Each launch validates its arguments on the host (so a kernel is never
//! handed an out-of-range buffer), derives the grid from the device's
//! properties, and enqueues on the caller's stream without synchronising.

use std::ffi::c_void;
use std::marker::PhantomData;

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::params::{CountParams, CpAsyncTestParams, WarpTestParams};

use super::memory::{GpuReadable, PinnedBuffer, Span};
use super::{Gpu, cuda_err};

use super::driver::{copy_to_host_blocking, function};
use crate::dataset::Rows;
use crate::error::{Error, Result};

/// Threads per block of the bit-counting kernel.
const COUNT_BLOCK: u32 = 256;

/// A kernel of the embedded PTX and the parameter block it takes
/// (`ibp_kernels::params`).
pub(crate) struct Kernel<P> {
    name: &'static str,
    params: PhantomData<fn(P)>,
}

impl<P> Clone for Kernel<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Kernel<P> {}

impl<P> Kernel<P> {
    const fn new(name: &'static str) -> Self {
        Kernel {
            name,
            params: PhantomData,
        }
    }

    /// The kernel's name in the PTX.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }
}

/// Every kernel, by what it does.
pub(crate) mod kernels {
    use ibp_kernels::params::{
        CacheParams, CandidatesParams, ClearParams, CompactParams, CountParams, CpAsyncTestParams,
        DecodeParams, EncodeParams, KvAppendParams, MeasureParams, ScanParams, WarpTestParams,
    };

    use super::Kernel;

    pub(crate) const COUNT_BITS: Kernel<CountParams> = Kernel::new("ibp_count_bits");
    pub(crate) const GATHER: Kernel<MeasureParams> = Kernel::new("ibp_gather");
    pub(crate) const FIT_CANDIDATES: Kernel<CandidatesParams> = Kernel::new("ibp_fit_candidates");
    pub(crate) const FIT_EVAL: Kernel<MeasureParams> = Kernel::new("ibp_fit_eval");
    pub(crate) const SIZE: Kernel<MeasureParams> = Kernel::new("ibp_size");
    pub(crate) const SCAN_TILES: Kernel<ScanParams> = Kernel::new("ibp_scan_tiles");
    pub(crate) const SCAN_PARTIALS: Kernel<ScanParams> = Kernel::new("ibp_scan_partials");
    pub(crate) const SCAN_APPLY: Kernel<ScanParams> = Kernel::new("ibp_scan_apply");
    pub(crate) const ENCODE_CLEAR: Kernel<ClearParams> = Kernel::new("ibp_encode_clear");
    pub(crate) const COMPACT: Kernel<CompactParams> = Kernel::new("ibp_compact");
    pub(crate) const DECODE_BATCH: Kernel<DecodeParams> = Kernel::new("ibp_decode");
    pub(crate) const DECODE_STREAM: Kernel<DecodeParams> = Kernel::new("ibp_decode_stream");
    pub(crate) const DECODE_CLUSTERED: Kernel<DecodeParams> = Kernel::new("ibp_decode_clustered");
    pub(crate) const DECODE_CLUSTERED_STREAM: Kernel<DecodeParams> =
        Kernel::new("ibp_decode_clustered_stream");
    pub(crate) const CACHE_GATHER: Kernel<CacheParams> = Kernel::new("ibp_cache_gather");
    pub(crate) const TEST_WARP: Kernel<WarpTestParams> = Kernel::new("ibp_test_warp");
    pub(crate) const TEST_CP_ASYNC: Kernel<CpAsyncTestParams> = Kernel::new("ibp_test_cp_async");

    /// Compression for chunks of `chunk` bytes.
    pub(crate) const fn encode(chunk: u32) -> Kernel<EncodeParams> {
        match chunk {
            1 => Kernel::new("ibp_encode_c1"),
            2 => Kernel::new("ibp_encode_c2"),
            4 => Kernel::new("ibp_encode_c4"),
            _ => Kernel::new("ibp_encode_c8"),
        }
    }

    /// Compression into unmeasured fixed-stride slots for chunks of
    /// `chunk` bytes.
    pub(crate) const fn encode_slots(chunk: u32) -> Kernel<EncodeParams> {
        match chunk {
            1 => Kernel::new("ibp_encode_slots_c1"),
            2 => Kernel::new("ibp_encode_slots_c2"),
            4 => Kernel::new("ibp_encode_slots_c4"),
            _ => Kernel::new("ibp_encode_slots_c8"),
        }
    }

    /// The KV store's append for chunks of `chunk` bytes.
    pub(crate) const fn kv_append(chunk: u32) -> Kernel<KvAppendParams> {
        match chunk {
            1 => Kernel::new("ibp_kv_append_c1"),
            2 => Kernel::new("ibp_kv_append_c2"),
            4 => Kernel::new("ibp_kv_append_c4"),
            _ => Kernel::new("ibp_kv_append_c8"),
        }
    }

    /// The decode kernel for batch or streaming mode, of a clustered
    /// dataset or not.
    pub(crate) const fn decode(batch: bool, clustered: bool) -> Kernel<DecodeParams> {
        match (batch, clustered) {
            (true, false) => DECODE_BATCH,
            (false, false) => DECODE_STREAM,
            (true, true) => DECODE_CLUSTERED,
            (false, true) => DECODE_CLUSTERED_STREAM,
        }
    }
}

impl Gpu {
    /// Enqueue kernel `k` with its parameter block.
    ///
    /// # Safety
    /// Every address inside `params` must be valid for the accesses the
    /// kernel makes (each kernel's doc in `gpu-kernels` states them), and the
    /// launch must give it the shared memory it expects.
    pub(crate) unsafe fn launch<P: Copy>(
        &self,
        k: Kernel<P>,
        grid: u32,
        block: u32,
        shared_bytes: u32,
        stream: &Stream,
        params: P,
    ) -> Result<()> {
        let name = k.name();
        let f = self
            .module()
            .get_function(name)
            .map_err(cuda_err("finding a kernel"))?;
        // Q: why an attribute?
        // A: above 48 KiB of dynamic shared memory a kernel must opt in.
        function::set_max_dynamic_shared(&f, shared_bytes)?;
        let mut p = params;
        let args = [&mut p as *mut P as *mut c_void];
        // SAFETY: the caller guarantees the parameter type and its addresses;
        // the driver copies `size_of::<P>()` bytes from `args[0]` at launch.
        unsafe { stream.launch(&f, grid, block, shared_bytes, &args) }
            .map_err(|e| Error::cuda_code(format!("launching {name}: {e}"), e as u32))
    }

    /// Blocks of `block` threads that fill the device once (all SMs at full
    /// occupancy) for kernel `name`.
    pub(crate) fn resident_blocks<P>(
        &self,
        k: Kernel<P>,
        block: u32,
        shared_bytes: usize,
    ) -> Result<u32> {
        let f = self
            .module()
            .get_function(k.name())
            .map_err(cuda_err("finding a kernel"))?;
        let per_sm = function::max_active_blocks(&f, block, shared_bytes)?;
        Ok(per_sm.max(1) * self.info().sm_count)
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
        let grid =
            wanted.min(self.resident_blocks(kernels::COUNT_BITS, COUNT_BLOCK, 0)? as u64) as u32;
        let p = CountParams {
            data: src.device_addr(),
            rows,
            row_bytes: row_bytes as u64,
            counts: counts.as_device_ptr().as_raw(),
        };
        // SAFETY: `data` covers rows * row_bytes readable bytes and `counts`
        // 8 * row_bytes u64 (both checked above); CountParams is the kernel's
        // parameter type.
        unsafe { self.launch(kernels::COUNT_BITS, grid, COUNT_BLOCK, 0, stream, p) }
    }

    /// Count the bits of host rows on the GPU: the rows are staged through
    /// two pinned buffers of `batch_bytes` (rounded to whole rows) that the
    /// kernel reads zero-copy, so the copy of one batch overlaps the counting
    /// of the previous. Allocates its staging buffers and synchronises: use
    /// [`Gpu::count_bits`] with your own buffers on a hot path.
    pub fn count_bits_blocking(&self, rows: Rows<'_>, batch_bytes: usize) -> Result<Vec<u64>> {
        let l = rows.row_bytes();
        let batch_rows = (batch_bytes / l).max(1).min(rows.rows().max(1));
        let stream = Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None)
            .map_err(cuda_err("creating a stream"))?;
        let mut counts =
            DeviceBuffer::<u64>::zeroed(8 * l).map_err(cuda_err("allocating counters"))?;
        let mut staging = [
            PinnedBuffer::<u8>::zeroed(batch_rows * l)?,
            PinnedBuffer::<u8>::zeroed(batch_rows * l)?,
        ];
        let mut done: [Option<cust::event::Event>; 2] = [None, None];
        let mut start = 0;
        let mut k = 0;
        while start < rows.rows() {
            let end = (start + batch_rows).min(rows.rows());
            if let Some(ev) = done[k].take() {
                ev.synchronize()
                    .map_err(cuda_err("waiting for a staging buffer"))?;
            }
            let bytes = rows.slice(start, end).bytes();
            staging[k][..bytes.len()].copy_from_slice(bytes);
            let view = Span::of(&staging[k], 0, bytes.len())
                .ok_or_else(|| Error::invalid("batch larger than its staging buffer"))?;
            self.count_bits(&view, l, &mut counts, &stream)?;
            let ev = cust::event::Event::new(cust::event::EventFlags::DISABLE_TIMING)
                .map_err(cuda_err("creating an event"))?;
            ev.record(&stream).map_err(cuda_err("recording an event"))?;
            done[k] = Some(ev);
            start = end;
            k ^= 1;
        }
        stream.synchronize().map_err(cuda_err("counting bits"))?;
        copy_to_host_blocking(&counts)
    }

    /// Blocks of `block` threads with `shared` bytes of dynamic shared
    /// memory that one SM holds at once for kernel `k` (opting in to more
    /// than 48 KiB first).
    pub(crate) fn blocks_per_sm<P>(&self, k: Kernel<P>, block: u32, shared: usize) -> Result<u32> {
        let f = self
            .module()
            .get_function(k.name())
            .map_err(cuda_err("finding a kernel"))?;
        let bytes = u32::try_from(shared)
            .map_err(|_| Error::invalid(format!("{shared} bytes of shared memory a block")))?;
        function::set_max_dynamic_shared(&f, bytes)?;
        let n = function::max_active_blocks(&f, block, shared)?;
        if n == 0 {
            return Err(Error::unsupported(format!(
                "{} cannot run with {block} threads and {shared} bytes of shared memory per block",
                k.name()
            )));
        }
        Ok(n)
    }

    /// Run the warp-helper test kernel: see `ibp_kernels::params::WarpTestParams`.
    ///
    /// Hidden from the docs: a test kernel, public only because
    /// `tests/gpu_foundation.rs` is a separate crate.
    #[doc(hidden)]
    pub fn test_warp(
        &self,
        input: &DeviceBuffer<u32>,
        out: &mut DeviceBuffer<u32>,
        stream: &Stream,
    ) -> Result<()> {
        let lanes = input.len();
        if !lanes.is_multiple_of(32) || out.len() != lanes * 8 {
            return Err(Error::invalid(
                "test_warp needs whole warps and 8 outputs per lane",
            ));
        }
        let p = WarpTestParams {
            input: input.as_device_ptr().as_raw(),
            out: out.as_device_ptr().as_raw(),
            lanes: lanes as u64,
        };
        let block = 128u32;
        let grid = (lanes as u32).div_ceil(block).max(1);
        // SAFETY: sizes checked above; matching parameter type.
        unsafe { self.launch(kernels::TEST_WARP, grid, block, 0, stream, p) }
    }

    /// Run the shared-memory / `cp.async` test kernel: each of `blocks`
    /// blocks copies `bytes` from `src` to `dst` through dynamic shared
    /// memory with copies of `width` bytes.
    ///
    /// Hidden from the docs, like [`Gpu::test_warp`].
    #[doc(hidden)]
    pub fn test_cp_async<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        dst: &mut DeviceBuffer<u8>,
        bytes: u32,
        width: u32,
        stream: &Stream,
    ) -> Result<()> {
        if ![4, 8, 16].contains(&width)
            || bytes == 0
            || !bytes.is_multiple_of(width)
            || !bytes.is_multiple_of(4)
        {
            return Err(Error::invalid(
                "cp.async test needs width 4/8/16 dividing a non-zero byte count",
            ));
        }
        if src.byte_len() != dst.len() || !src.byte_len().is_multiple_of(bytes as usize) {
            return Err(Error::invalid(
                "cp.async test needs equal source and destination sizes, whole blocks",
            ));
        }
        if !src.device_addr().is_multiple_of(width as u64) {
            return Err(Error::invalid(
                "cp.async test source is not aligned to the copy width",
            ));
        }
        if bytes > self.info().max_shared_per_block {
            return Err(Error::invalid(
                "cp.async test block larger than the shared memory limit",
            ));
        }
        let blocks = (src.byte_len() / bytes as usize) as u32;
        let p = CpAsyncTestParams {
            src: src.device_addr(),
            dst: dst.as_device_ptr().as_raw(),
            bytes,
            width,
        };
        // SAFETY: sizes and alignment checked above; matching parameter type.
        unsafe { self.launch(kernels::TEST_CP_ASYNC, blocks, 128, bytes, stream, p) }
    }
}
