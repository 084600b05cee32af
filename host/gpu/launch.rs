//! Every kernel of ibp, with the one parameter block it takes (`Kernel`),
//! and the one launch function: a kernel cannot be launched with another
//! kernel's parameters, and no launch names a kernel by string.
//!
//! Each launch validates its arguments on the host (so a kernel is never
//! handed an out-of-range buffer), derives the grid from the device's
//! properties, and enqueues on the caller's stream without synchronising.

use std::ffi::c_void;
use std::marker::PhantomData;

use cust::memory::DeviceSlice;
use cust::stream::Stream;
use ibp_kernels::params::{CacheParams, DECODE_MODE_DECODE, DECODE_MODE_IDEAL, DecodeParams};

use super::dataset::GpuDataset;
use super::decode::{DecodeStatus, Decoder, LaunchVia, Target};
use super::driver::function;
use super::{Gpu, cuda_err};
use crate::error::{Error, Result};

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

    /// Blocks of `block` threads with `shared_bytes` of dynamic shared
    /// memory that fill `gpu` once (all SMs at full occupancy) for this
    /// kernel (at least one a SM).
    pub(crate) fn resident_blocks(self, gpu: &Gpu, block: u32, shared_bytes: usize) -> Result<u32> {
        let f = gpu
            .module
            .get_function(self.name)
            .map_err(cuda_err("finding a kernel"))?;
        let per_sm = function::max_active_blocks(&f, block, shared_bytes)?;
        Ok(per_sm.max(1) * gpu.info().sm_count)
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

// The test kernels are launched only by `gpu::testing` (feature
// `testing`); without it this keeps them from counting as dead code.
#[cfg(not(feature = "testing"))]
const _: (
    Kernel<ibp_kernels::params::WarpTestParams>,
    Kernel<ibp_kernels::params::CpAsyncTestParams>,
) = (kernels::TEST_WARP, kernels::TEST_CP_ASYNC);

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
            .module
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
            .module
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
}
