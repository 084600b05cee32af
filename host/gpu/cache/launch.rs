//! The feature cache's gather launch: its geometry (threads, grid, shared
//! memory and where the decode book sits) and the launch itself.

use cust::stream::Stream;
use ibp_kernels::device::DatasetView;
use ibp_kernels::params::CacheParams;

use super::CacheOptions;
use crate::error::{Error, Result};
use crate::gpu::kernels::{self, Kernel};
use crate::gpu::{Gpu, GpuDataset};

/// The gather kernel for `ds`: the uniform one when every step of its
/// book is uniform and `opts` allows it (the default), else the general
/// one.
pub(super) fn kernel(ds: &GpuDataset, opts: &CacheOptions) -> Kernel<CacheParams> {
    if ds.book.uniform && opts.uniform.unwrap_or(true) {
        kernels::CACHE_GATHER_UNIFORM
    } else {
        kernels::CACHE_GATHER
    }
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
pub(super) fn geometry(
    gpu: &Gpu,
    view: &DatasetView,
    kernel: Kernel<CacheParams>,
    warps: u32,
) -> Result<(u32, u32, u32, u32)> {
    let budget = gpu.info().max_shared_per_block as u64;
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
    let per_sm = gpu.blocks_per_sm(kernel, block, shared as usize)?;
    Ok((
        block,
        per_sm * gpu.info().sm_count,
        shared as u32,
        book_smem as u32,
    ))
}

/// Enqueue the feature cache's gather, by `kernel` (from [`kernel`]).
///
/// The caller ([`super::FeatureCache::gather`]) checked `p`: the view is
/// a validated dataset on this GPU, the index and slabs are the cache's,
/// the output holds `count` rows, the geometry comes from [`geometry`].
pub(super) fn launch(
    gpu: &Gpu,
    kernel: Kernel<CacheParams>,
    p: CacheParams,
    grid: u32,
    block: u32,
    shared: u32,
    stream: &Stream,
) -> Result<()> {
    // SAFETY: as the caller checked (above); CacheParams is the
    // kernel's parameter type and the shared memory its carving; the
    // uniform kernel only for a book whose every step is uniform
    // ([`kernel`]).
    unsafe { gpu.launch(kernel, grid, block, shared, stream, p) }
}
