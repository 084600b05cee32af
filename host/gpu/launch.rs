//! Every kernel of ibp, with the one parameter block it takes (`Kernel`),
//! and the one launch function: a kernel cannot be launched with another
//! kernel's parameters, and no launch names a kernel by string.
//!
//! Each launch validates its arguments on the host (so a kernel is never
//! handed an out-of-range buffer), derives the grid from the device's
//! properties, and enqueues on the caller's stream without synchronising.

use std::ffi::c_void;
use std::marker::PhantomData;

use super::driver::function;
use super::{Gpu, cuda_err};
use crate::error::{Error, Result};
use cust::stream::Stream;

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
    /// memory that one SM holds at once for kernel `k` (opting in to more
    /// than 48 KiB first).
    pub(crate) fn blocks_per_sm<P>(&self, k: Kernel<P>, block: u32, shared: usize) -> Result<u32> {
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
}
