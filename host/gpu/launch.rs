//! Every kernel of ibp, with the one parameter block it takes (`Kernel`),
//! and the one launch function: a kernel cannot be launched with another
//! kernel's parameters, and no launch names a kernel by string.
//!
//! Each launch validates its arguments on the host (so a kernel is never
//! handed an out-of-range buffer), derives the grid from the device's
//! properties, and enqueues on the caller's stream without synchronising.

use std::ffi::c_void;

use super::driver::function;
use super::kernels::Kernel;
use super::stream::GpuStream;
use super::{Gpu, cuda_err};
use crate::error::{Error, Result};

/// Blocks of `block` threads with `shared_bytes` of dynamic shared memory
/// that fill `gpu` once (all SMs at full occupancy) for kernel `k` (at
/// least one a SM).
pub(crate) fn resident_blocks<P>(
    gpu: &Gpu,
    k: Kernel<P>,
    block: u32,
    shared_bytes: usize,
) -> Result<u32> {
    let f = gpu
        .module
        .get_function(k.name())
        .map_err(cuda_err("finding a kernel"))?;
    let per_sm = function::max_active_blocks(&f, block, shared_bytes)?;
    Ok(per_sm.max(1) * gpu.info().sm_count)
}

impl Gpu {
    /// Enqueue kernel `k` with its parameter block.
    ///
    /// # Safety
    /// Every address inside `params` must be valid for the accesses the
    /// kernel makes (each kernel's doc in `gpu-kernels` states them), and the
    /// launch must give it the shared memory it expects.
    pub(crate) unsafe fn launch<P: Copy, S: GpuStream + ?Sized>(
        &self,
        k: Kernel<P>,
        grid: u32,
        block: u32,
        shared_bytes: u32,
        stream: &S,
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
        let mut args = [&mut p as *mut P as *mut c_void];
        // SAFETY: the caller guarantees the parameter type and its addresses
        // (2, 3); the driver copies `size_of::<P>()` bytes from `args[0]`
        // during the call; a `GpuStream` is cust's own stream or a
        // `ForeignStream`, whose unsafe constructor promised a live stream
        // of this context (1).
        unsafe {
            function::launch_kernel(
                &f,
                name,
                grid,
                block,
                shared_bytes,
                stream.raw_stream(),
                &mut args,
            )
        }
    }

    /// Blocks of `block` threads with `shared` bytes of dynamic shared
    /// memory that one SM holds at once for kernel `k` (opting in to more
    /// than 48 KiB first).
    ///
    /// Q: why remember the answers?
    /// A: every `Decoder::new` asks, and a caller that makes a decoder per
    /// call (a candle module's forward pass, an offloaded layer's load)
    /// would pay the driver's occupancy calculation each time: several µs
    /// of host time, as much as a small gather's kernel. The answer depends
    /// only on the kernel, the block and the shared memory.
    pub(crate) fn blocks_per_sm<P>(&self, k: Kernel<P>, block: u32, shared: usize) -> Result<u32> {
        let key = (k.name(), block, shared);
        let memo = || {
            self.occupancy
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(&n) = memo().get(&key) {
            return Ok(n);
        }
        let n = self.blocks_per_sm_uncached(k, block, shared)?;
        memo().insert(key, n);
        Ok(n)
    }

    fn blocks_per_sm_uncached<P>(&self, k: Kernel<P>, block: u32, shared: usize) -> Result<u32> {
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
