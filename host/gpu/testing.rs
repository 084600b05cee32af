//! The test kernels of the GPU foundation (feature `testing`): the warp
//! helpers and the shared-memory / `cp.async` copies, launched as the
//! library launches its own kernels, for `tests/gpu_foundation.rs`.
//!
//! Q: why a feature? A: they are no part of the library's API, and a
//! separate test crate can only reach what is public.

use cust::memory::DeviceBuffer;
use cust::stream::Stream;
use ibp_kernels::params::{CpAsyncTestParams, WarpTestParams};

use super::Gpu;
use super::kernels;
use super::memory::GpuReadable;
use crate::error::{Error, Result};

/// Run the warp-helper test kernel on `gpu`: see
/// `ibp_kernels::params::WarpTestParams`.
pub fn warp(
    gpu: &Gpu,
    input: &DeviceBuffer<u32>,
    out: &mut DeviceBuffer<u32>,
    stream: &Stream,
) -> Result<()> {
    let lanes = input.len();
    if !lanes.is_multiple_of(32) || out.len() != lanes * 8 {
        return Err(Error::invalid(
            "the warp test needs whole warps and 8 outputs per lane",
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
    unsafe { gpu.launch(kernels::TEST_WARP, grid, block, 0, stream, p) }
}

/// Run the shared-memory / `cp.async` test kernel: each of `blocks`
/// blocks copies `bytes` from `src` to `dst` through dynamic shared
/// memory with copies of `width` bytes.
pub fn cp_async<S: GpuReadable + ?Sized>(
    gpu: &Gpu,
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
    if bytes > gpu.info().max_shared_per_block {
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
    unsafe { gpu.launch(kernels::TEST_CP_ASYNC, blocks, 128, bytes, stream, p) }
}
