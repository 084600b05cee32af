//! What every kernel of the crate starts with.

use ibp_kernels::arch;
use ibp_kernels::device::RowError;
use ibp_kernels::prelude::*;

/// Copy the first `bytes` of the decode book at global `book` to the start
/// of dynamic shared memory, once per block (every thread calls); returns
/// the shared address after it, where the warps' workspaces begin.
///
/// # Safety
/// `book` holds `bytes` (a multiple of 4) readable bytes; the launch gives
/// at least `bytes` rounded up to 16 of dynamic shared memory.
#[inline(always)]
pub unsafe fn book_to_shared(book: u64, bytes: u32) -> u32 {
    let base = arch::dyn_smem_base();
    let mut i = thread::thread_idx_x();
    while i < bytes / 4 {
        // SAFETY: i·4 < bytes, inside the book and the shared memory.
        unsafe { arch::st_shared_u32(base + 4 * i, arch::ld_global_u32(book + 4 * i as u64)) };
        i += thread::block_dim_x();
    }
    thread::sync_threads();
    base + bytes.next_multiple_of(16)
}

/// The status code of a row's result.
#[inline(always)]
pub fn code(r: Result<(), RowError>) -> u32 {
    match r {
        Ok(()) => crate::OK,
        Err(RowError::BadIndex) => crate::BAD_INDEX,
        Err(RowError::Corrupt) => crate::CORRUPT,
    }
}

/// The warp's sum of `x`: a butterfly (after it every lane holds the same
/// bits, since `a + b == b + a` in IEEE arithmetic). The order is fixed:
/// lane partners 16, 8, 4, 2, 1.
#[inline(always)]
pub fn warp_sum_f32(mut x: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        x += warp::shuffle_xor_f32(x, m);
        m >>= 1;
    }
    x
}

/// Generic address → global address, keeping 0 as 0.
#[inline(always)]
pub fn global(a: u64) -> u64 {
    if a == 0 { 0 } else { arch::to_global(a) }
}
