//! The device-wide scan of stored lengths (compression's offsets and flag
//! bitmap): per-thread sums, a block scan over shared memory, and the
//! kernels' address conversion. The kernels themselves are in `kernels`.

use crate::arch;
use crate::hw::Hw;
use crate::params::{SCAN_PER_THREAD, ScanParams};
use crate::simt::inclusive_scan64;

/// Exclusive scan of one u64 per thread over the block (at most 32 warps),
/// and the block's total. Uses 33 u64 of dynamic shared memory; every
/// thread of the block must call it.
#[inline(always)]
pub(crate) fn block_exclusive_scan(x: u64) -> (u64, u64) {
    let smem = arch::dyn_smem_base();
    let lane = arch::lane();
    let warp = arch::warp_in_block();
    let warps = arch::block_dim() / 32;
    let inc = inclusive_scan64(&Hw, x);
    // SAFETY (shared accesses): indices below 33, 8-aligned.
    unsafe {
        if lane == 31 {
            arch::st_shared_u64(smem + 8 * warp, inc);
        }
        arch::sync_threads();
        if warp == 0 {
            let y = if lane < warps {
                arch::ld_shared_u64(smem + 8 * lane)
            } else {
                0
            };
            let yi = inclusive_scan64(&Hw, y);
            if lane < warps {
                arch::st_shared_u64(smem + 8 * lane, yi - y);
            }
            if lane == 31 {
                arch::st_shared_u64(smem + 8 * 32, yi);
            }
        }
        arch::sync_threads();
        let r = (
            inc - x + arch::ld_shared_u64(smem + 8 * warp),
            arch::ld_shared_u64(smem + 8 * 32),
        );
        arch::sync_threads();
        r
    }
}

/// This thread's stored lengths: (their sum, their flag byte), summing
/// into `out` (when given) the exclusive prefix of each.
///
/// # Safety
/// `p.sizes` holds `p.rows` u64.
#[inline(always)]
pub(crate) unsafe fn thread_sizes(
    p: &ScanParams,
    first: u64,
) -> ([u64; SCAN_PER_THREAD as usize], u64, u32) {
    let mut pre = [0u64; SCAN_PER_THREAD as usize];
    let (mut sum, mut flags) = (0u64, 0u32);
    let mut j = 0;
    while j < SCAN_PER_THREAD {
        pre[j as usize] = sum;
        if first + j < p.rows {
            // SAFETY: in bounds.
            let s = unsafe { arch::ld_global_u64(p.sizes + 8 * (first + j)) };
            sum += s;
            if s < p.row_bytes {
                flags |= 1 << j;
            }
        }
        j += 1;
    }
    (pre, sum, flags)
}

/// Global addresses of a [`ScanParams`].
#[inline(always)]
pub(crate) fn global_scan(p: ScanParams) -> ScanParams {
    ScanParams {
        sizes: arch::to_global(p.sizes),
        offsets: arch::to_global(p.offsets),
        flags: arch::to_global(p.flags),
        partials: arch::to_global(p.partials),
        total: if p.total == 0 {
            0
        } else {
            arch::to_global(p.total)
        },
        ..p
    }
}
