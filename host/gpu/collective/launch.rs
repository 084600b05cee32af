//! The collectives' one kernel of their own: `ibp_copy_runs`, the pack
//! and unpack of an all-to-all (the decodes go through the decoder's
//! launch).

use cust::stream::Stream;
use ibp_kernels::params::CopyRunsParams;

use crate::error::Result;
use crate::gpu::Gpu;
use crate::gpu::compress::WARP_BLOCK;
use crate::gpu::kernels;

/// Enqueue `ibp_copy_runs` on `stream`: the `count` ranges at device
/// address `ranges` (`[src offset, dst offset, bytes]` triples of u64)
/// from the buffer at `src` to the one at `dst`. Nothing for no ranges.
///
/// # Safety
/// (1) `ranges` holds `count` triples, and `src`, `dst`, `ranges` and
/// `stream` belong to `gpu`'s context (or are reachable from it);
/// (2) every source range lies inside `src`'s allocation, whole aligned
/// 4-byte words included, and every destination range inside `dst`'s;
/// (3) the destination ranges overlap neither each other nor any source
/// range, and nothing else touches them until the copy is done.
pub(super) unsafe fn copy_runs(
    gpu: &Gpu,
    ranges: u64,
    count: u64,
    src: u64,
    dst: u64,
    stream: &Stream,
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    let p = CopyRunsParams {
        ranges,
        count,
        src,
        dst,
    };
    // One warp a range, at most the warps the GPU holds at once (the
    // kernel loops over the rest). The occupancy answer is remembered.
    let per_block = (WARP_BLOCK / 32) as u64;
    let full =
        gpu.blocks_per_sm(kernels::COPY_RUNS, WARP_BLOCK, 0)? as u64 * gpu.info().sm_count as u64;
    let grid = count.div_ceil(per_block).min(full).max(1) as u32;
    // SAFETY: the caller's (1)–(3); CopyRunsParams is the kernel's type
    // and it uses no shared memory.
    unsafe { gpu.launch(kernels::COPY_RUNS, grid, WARP_BLOCK, 0, stream, p) }
}
