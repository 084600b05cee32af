//! The zero-copy read rate: a sequential read of bytes, 16 a thread at a
//! time, four loads in flight a thread, grid-stride.

use ibp_kernels::arch;
use ibp_kernels::prelude::*;

use crate::ReadParams;
use crate::util::global;

/// Read `p.bytes` at `p.src`; the xor of every word to `p.out`.
///
/// # Safety
/// See [`ReadParams`].
#[kernel]
pub unsafe fn read_bytes(p: ReadParams) {
    let src = global(p.src);
    let pieces = p.bytes / 16;
    let threads = thread::grid_dim_x() as u64 * thread::block_dim_x() as u64;
    let mut i = thread::index_1d_u64();
    let mut x = 0u32;
    while i + 3 * threads < pieces {
        // SAFETY: four pieces below `pieces`, inside the buffer.
        let w = unsafe {
            [
                arch::ld_global_v4(src + 16 * i),
                arch::ld_global_v4(src + 16 * (i + threads)),
                arch::ld_global_v4(src + 16 * (i + 2 * threads)),
                arch::ld_global_v4(src + 16 * (i + 3 * threads)),
            ]
        };
        for v in w {
            x ^= v[0] ^ v[1] ^ v[2] ^ v[3];
        }
        i += 4 * threads;
    }
    while i < pieces {
        // SAFETY: i < pieces.
        let v = unsafe { arch::ld_global_v4(src + 16 * i) };
        x ^= v[0] ^ v[1] ^ v[2] ^ v[3];
        i += threads;
    }
    let mut m = 16;
    while m > 0 {
        x ^= warp::shuffle_xor(x, m);
        m >>= 1;
    }
    if warp::lane_id() == 0 && x != 0 {
        // SAFETY: one u32.
        unsafe { arch::red_or_u32(global(p.out), x) };
    }
}
