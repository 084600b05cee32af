//! The one launch function of ibp's kernels, each a typed [`Kernel`] of
//! `super::kernels` (declared once in the kernel crate): a kernel cannot be
//! launched with another kernel's parameters, and no launch names a kernel
//! by string.
//!
//! Each launch validates its arguments on the host (so a kernel is never
//! handed an out-of-range buffer), derives the grid from the device's
//! properties, and enqueues on the caller's stream without synchronising.

use std::ffi::c_void;

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::params::{
    CacheParams, CountParams, CpAsyncTestParams, DECODE_MODE_DECODE, DECODE_MODE_IDEAL,
    DecodeParams, WarpTestParams,
};

use super::dataset::GpuDataset;
use super::decode::{DecodeStatus, Decoder, LaunchVia, Target};
use super::kernels::{self, Kernel};
use super::memory::{GpuReadable, PinnedBuffer, Span};
use super::{Gpu, cuda_err};

use super::driver::copy_to_host_blocking;
use crate::dataset::Rows;
use crate::error::{Error, Result};

/// Threads per block of the bit-counting kernel.
const COUNT_BLOCK: u32 = 256;

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
        if shared_bytes > 48 * 1024 {
            // Q: why an attribute?
            // A: above 48 KiB of dynamic shared memory a kernel must opt in.
            // SAFETY: valid function handle and attribute.
            let r = unsafe {
                cust::sys::cuFuncSetAttribute(
                    f.to_raw(),
                    cust::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            };
            if r != cust::sys::CUresult::CUDA_SUCCESS {
                return Err(Error::cuda_code(
                    format!("{name}: cannot reserve {shared_bytes} bytes of shared memory: {r:?}"),
                    r as u32,
                ));
            }
        }
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
        let per_sm = f
            .max_active_blocks_per_multiprocessor(block.into(), shared_bytes)
            .map_err(cuda_err("querying occupancy"))?;
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
    /// memory that one SM holds at once for the decode kernel.
    pub(crate) fn decode_blocks_per_sm(
        &self,
        batch: bool,
        clustered: bool,
        block: u32,
        shared: usize,
    ) -> Result<u32> {
        self.blocks_per_sm(kernels::decode(batch, clustered), block, shared)
    }

    /// Blocks of `block` threads with `shared` bytes of dynamic shared
    /// memory that one SM holds at once for kernel `k` (opting in to more
    /// than 48 KiB first).
    fn blocks_per_sm<P>(&self, k: Kernel<P>, block: u32, shared: usize) -> Result<u32> {
        let f = self
            .module()
            .get_function(k.name())
            .map_err(cuda_err("finding a kernel"))?;
        if shared > 48 * 1024 {
            // SAFETY: valid function handle and attribute; the value is
            // within the device's opt-in limit (checked by the caller).
            let r = unsafe {
                cust::sys::cuFuncSetAttribute(
                    f.to_raw(),
                    cust::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared as i32,
                )
            };
            if r != cust::sys::CUresult::CUDA_SUCCESS {
                return Err(Error::cuda_code(
                    format!("reserving {shared} bytes of shared memory: {r:?}"),
                    r as u32,
                ));
            }
        }
        let n = f
            .max_active_blocks_per_multiprocessor(block.into(), shared)
            .map_err(cuda_err("querying occupancy"))?;
        if n == 0 {
            return Err(Error::unsupported(format!(
                "{} cannot run with {block} threads and {shared} bytes of shared memory per block",
                k.name()
            )));
        }
        Ok(n)
    }

    /// The feature cache's gather geometry for rows of `view`: threads per
    /// block, the grid that fills the device, dynamic shared memory per
    /// block and the part of it that holds the decode book (0: the book is
    /// read from global memory).
    ///
    /// Q: when does the book leave shared memory?
    /// A: when it and one warp's workspace do not fit a block together
    /// (rows of many KB with 1-byte chunks); the warps then read it through
    /// L1, as the streaming decoder does.
    pub(crate) fn cache_geometry(
        &self,
        view: &ibp_kernels::device::DatasetView,
        warps: u32,
    ) -> Result<(u32, u32, u32, u32)> {
        let budget = self.info().max_shared_per_block as u64;
        let ws = view.workspace_bytes() as u64;
        let book = view.book_bytes as u64;
        if ws > budget {
            return Err(Error::unsupported(format!(
                "rows of {} bytes need {ws} bytes of shared memory per warp; this GPU allows {budget}",
                view.row_bytes
            )));
        }
        let mut warps = warps.clamp(1, 32) as u64;
        // The workspaces follow the book: it must end 16-aligned (decode
        // books do; the check keeps a future layout from breaking it).
        let book_smem = if book + ws <= budget && book.is_multiple_of(16) {
            book
        } else {
            0
        };
        while warps > 1 && book_smem + warps * ws > budget {
            warps /= 2;
        }
        let shared = book_smem + warps * ws;
        let block = (warps * 32) as u32;
        let per_sm = self.blocks_per_sm(kernels::CACHE_GATHER, block, shared as usize)?;
        Ok((
            block,
            per_sm * self.info().sm_count,
            shared as u32,
            book_smem as u32,
        ))
    }

    /// Enqueue the feature cache's gather.
    ///
    /// The caller (`super::cache`) checked `p`: the view is a validated
    /// dataset on this GPU, the index and slabs are the cache's, the output
    /// holds `count` rows, the geometry comes from [`Gpu::cache_geometry`].
    pub(crate) fn launch_cache_gather(
        &self,
        p: CacheParams,
        grid: u32,
        block: u32,
        shared: u32,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: as the caller checked (above); CacheParams is the
        // kernel's parameter type and the shared memory its carving.
        unsafe { self.launch(kernels::CACHE_GATHER, grid, block, shared, stream, p) }
    }

    /// Enqueue the decode kernel (all checks on the host first).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_decode(
        &self,
        dec: &Decoder<'_>,
        ds: &GpuDataset,
        target: Target,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        ideal: bool,
        via: LaunchVia,
        stream: &Stream,
    ) -> Result<()> {
        let rows = via.rows.unwrap_or(ds.rows);
        let (index, first, count, wide) = match target {
            Target::Index { addr, len, wide } => (addr, 0, len, wide),
            Target::Range(first, count) => {
                if first.checked_add(count).is_none_or(|end| end > rows) {
                    return Err(Error::invalid(format!(
                        "rows {first}..{} requested from a dataset of {rows} tensors",
                        first.saturating_add(count),
                    )));
                }
                (0, first, count, true)
            }
        };
        if count == 0 {
            return Ok(());
        }
        let stride = via.out_stride.unwrap_or(ds.row_bytes);
        if stride < ds.row_bytes {
            return Err(Error::invalid(format!(
                "output stride of {stride} bytes is shorter than a row of {} bytes",
                ds.row_bytes
            )));
        }
        let need = (count + via.out_skip_rows - 1)
            .checked_mul(stride)
            .and_then(|b| b.checked_add(ds.row_bytes))
            .ok_or_else(|| Error::invalid("output size overflows u64"))?;
        if (out.len() as u64) < need {
            return Err(Error::invalid(format!(
                "output holds {} bytes; {count} rows of {} bytes, {stride} bytes apart, need {need}",
                out.len(),
                ds.row_bytes
            )));
        }
        if ideal
            && ((ds.offsets.is_none() && ds.lengths.is_none() && via.lengths.is_none())
                || !ds.row_bytes.is_multiple_of(4))
        {
            return Err(Error::invalid(
                "the ideal-copy baseline needs stored lengths (packed layout or a length table) and rows of whole u32",
            ));
        }
        let p = DecodeParams {
            src: via.src.unwrap_or_else(|| ds.payload.device_addr()),
            offsets: via.offsets.unwrap_or_else(|| {
                ds.offsets
                    .as_ref()
                    .map_or(0, |o| o.as_device_ptr().as_raw())
            }),
            flags: via
                .flags
                .unwrap_or_else(|| ds.flags.as_device_ptr().as_raw()),
            table: ds.table.as_device_ptr().as_raw(),
            index,
            first,
            count,
            rows,
            row_bytes: ds.row_bytes,
            out: out.as_device_ptr().as_raw() + via.out_skip_rows * stride,
            out_stride: stride,
            status: status.words.as_device_ptr().as_raw(),
            chunk: ds.chunk,
            ring_lines: dec.ring_lines,
            pbuf_words: dec.pbuf_words,
            cluster_bits: match (&ds.clusters, via.clusters) {
                (Some(_), Some((_, bits))) => bits,
                (Some(c), None) => c.bits,
                (None, _) => 0,
            },
            mode: if ideal {
                DECODE_MODE_IDEAL
            } else {
                DECODE_MODE_DECODE
            },
            batch: dec.batch as u32,
            lengths: via.lengths.unwrap_or_else(|| {
                ds.lengths
                    .as_ref()
                    .map_or(0, |b| b.as_device_ptr().as_raw())
            }),
            offset_base: via.offset_base,
            fetch: if via.load_store.unwrap_or(dec.load_store) {
                ibp_kernels::params::FETCH_LOAD_STORE
            } else {
                ibp_kernels::params::FETCH_CP_ASYNC
            },
            // Lines are trimmed to a tensor's pieces only when they come
            // over PCIe (`decode::batch`, `fetch_item`).
            decode_flags: dec.flags
                | if via.host_src.unwrap_or(
                    via.src.is_none() && matches!(ds.payload, super::dataset::Payload::Pinned(_)),
                ) {
                    ibp_kernels::params::DECODE_FLAG_TRIM
                } else {
                    0
                },
            book: ds.book.as_device_ptr().as_raw(),
            book_smem_bytes: dec.book_smem_bytes,
            index_u32: !wide as u32,
            row_base: via.out_skip_rows,
            clusters: match (&ds.clusters, via.clusters) {
                (Some(_), Some((addr, _))) => addr,
                (Some(c), None) => c.ids.as_device_ptr().as_raw(),
                (None, _) => 0,
            },
        };
        let warps = (dec.block / 32) as u64;
        let grid = (dec.grid as u64).min(count.div_ceil(warps)).max(1) as u32;
        // SAFETY: the dataset's buffers were sized and validated at upload
        // (payload covers every slot, flags ⌈N/8⌉ bytes, offsets N + 1, table
        // for this codebook), and so were a DMA piece's overrides by its
        // caller (`rows` tensors' offsets and flags, payload inside the
        // piece); `out` holds the rows (checked above); `index` holds
        // `count` entries of its width; status holds two u64; the shared
        // memory matches the Decoder's carving; DecodeParams is the kernel's
        // parameter type.
        unsafe {
            self.launch(
                kernels::decode(dec.batch, ds.clusters.is_some()),
                grid,
                dec.block,
                dec.shared_bytes,
                stream,
                p,
            )
        }
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
