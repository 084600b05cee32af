//! Kernel entry points. Each one derives its indices, checks bounds and calls
//! shared code; the host launches them from `host/gpu/launch.rs`.

use crate::arch;
use crate::count::PosPopcnt32;
use crate::params::{CountParams, CpAsyncTestParams, WarpTestParams};

/// Bit counting (paper §4.1): `counts[8 * row_bytes] += per-bit-position
/// popcount over all rows`.
///
/// Each thread owns one 4-byte column (32 bit positions) and a strided subset
/// of rows; consecutive threads take consecutive columns of the same row, so
/// a warp reads 128 contiguous bytes (one PCIe or DRAM line) per step.
///
/// # Safety
/// `p.data` is readable for `rows * row_bytes` bytes and `p.counts` writable
/// for `8 * row_bytes` u64 counters.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn ibp_count_bits(p: CountParams) {
    if p.row_bytes == 0 || p.rows == 0 {
        return;
    }
    let cols = p.row_bytes.div_ceil(4);
    let t = arch::global_thread();
    let threads = arch::grid_threads();
    let data = arch::to_global(p.data);
    let counts = arch::to_global(p.counts);
    // Q: why two load paths?
    // A: a 4-byte load needs a 4-aligned address; rows whose length is not a
    // multiple of 4 (or a misaligned base) are read byte by byte. The choice
    // is uniform for the whole launch, so no warp diverges on it.
    let aligned = p.row_bytes % 4 == 0 && data % 4 == 0;
    if threads >= cols {
        let groups = div(threads, cols);
        if t < groups * cols {
            // SAFETY: column and rows are in bounds; forwarded contract.
            unsafe { count_column(&p, data, counts, t - div(t, cols) * cols, div(t, cols), groups, aligned) }
        }
    } else {
        let mut col = t;
        while col < cols {
            // SAFETY: as above.
            unsafe { count_column(&p, data, counts, col, 0, 1, aligned) }
            col += threads;
        }
    }
}

/// Division that is 0 for a zero divisor, so no panic path reaches the PTX.
#[inline(always)]
fn div(a: u64, b: u64) -> u64 {
    if b == 0 { 0 } else { a / b }
}

/// Count one 4-byte column over rows `r0, r0 + stride, ...`.
///
/// # Safety
/// `col < ceil(row_bytes / 4)`, and the kernel's contract holds.
#[inline(always)]
unsafe fn count_column(
    p: &CountParams,
    data: u64,
    counts: u64,
    col: u64,
    r0: u64,
    stride: u64,
    aligned: bool,
) {
    let base = data + col * 4;
    let bytes = core::cmp::min(4, p.row_bytes - col * 4);
    let load = |r: u64| -> u32 {
        let a = base + r * p.row_bytes;
        if aligned {
            // SAFETY: 4-aligned (checked by the caller) and inside row r.
            unsafe { arch::ld_global_u32(a) }
        } else {
            let mut w = 0u32;
            for k in 0..bytes {
                // SAFETY: byte k < bytes of the column lies inside row r.
                w |= unsafe { arch::ld_global_u8(a + k) } << (8 * k);
            }
            w
        }
    };
    let mut sink = |b: usize, v: u64| {
        if (b as u64) < bytes * 8 {
            // SAFETY: counter index col * 32 + b < 8 * row_bytes.
            unsafe { arch::red_add_u64(counts + (col * 32 + b as u64) * 8, v) }
        }
    };
    let mut acc = PosPopcnt32::new();
    let mut r = r0;
    // Q: why sixteen loads before any arithmetic?
    // A: they are independent, so each thread keeps sixteen requests in
    // flight; that is what hides DRAM and, above all, PCIe latency.
    while r + 15 * stride < p.rows {
        // Written out so the sixteen words stay in registers (`from_fn`'s loop
        // left them in local memory).
        let s = stride;
        let x = [
            load(r),
            load(r + s),
            load(r + 2 * s),
            load(r + 3 * s),
            load(r + 4 * s),
            load(r + 5 * s),
            load(r + 6 * s),
            load(r + 7 * s),
            load(r + 8 * s),
            load(r + 9 * s),
            load(r + 10 * s),
            load(r + 11 * s),
            load(r + 12 * s),
            load(r + 13 * s),
            load(r + 14 * s),
            load(r + 15 * s),
        ];
        acc.add16(&x, &mut sink);
        r += 16 * stride;
    }
    while r < p.rows {
        acc.add(load(r), &mut sink);
        r += stride;
    }
    acc.drain(&mut sink);
}

/// Device test of the warp helpers (see [`WarpTestParams`]).
///
/// # Safety
/// `input` holds `lanes` u32 and `out` has room for `8 * lanes` u32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn ibp_test_warp(p: WarpTestParams) {
    let g = arch::global_thread();
    // Whole warps only: lanes is a multiple of 32, so a warp is in or out.
    if g >= p.lanes {
        return;
    }
    let input = arch::to_global(p.input);
    let out = arch::to_global(p.out);
    // SAFETY: g < lanes.
    let x = unsafe { arch::ld_global_u32(input + g * 4) };
    let l = arch::lane();
    let (warp, _) = arch::global_warp();
    let (exclusive, _) = arch::warp_exclusive_scan(x);
    let vals = [
        l,
        warp as u32,
        arch::shfl_up(x, 1),
        arch::shfl_down(x, 2),
        arch::shfl_idx(x, 31 - l),
        arch::warp_inclusive_scan(x),
        exclusive,
        arch::ballot(x & 1 == 1),
    ];
    for (k, v) in vals.into_iter().enumerate() {
        // SAFETY: g * 8 + k < 8 * lanes.
        unsafe { arch::st_global_u32(out + (g * 8 + k as u64) * 4, v) }
    }
}

/// Device test of dynamic shared memory and `cp.async` (see
/// [`CpAsyncTestParams`]).
///
/// # Safety
/// The launch provides `bytes` of dynamic shared memory; `src` and `dst` hold
/// `grid * bytes` bytes aligned to `width`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn ibp_test_cp_async(p: CpAsyncTestParams) {
    let smem = arch::dyn_smem_base();
    let block = arch::block_idx() as u64;
    let src = arch::to_global(p.src) + block * p.bytes as u64;
    let dst = arch::to_global(p.dst) + block * p.bytes as u64;
    let n = div(p.bytes as u64, p.width as u64) as u32;
    let mut i = arch::thread_idx();
    while i < n {
        let off = i * p.width;
        // SAFETY: off + width <= bytes, all aligned to width.
        unsafe {
            match p.width {
                4 => arch::cp_async::<4>(smem + off, src + off as u64),
                8 => arch::cp_async::<8>(smem + off, src + off as u64),
                _ => arch::cp_async::<16>(smem + off, src + off as u64),
            }
        }
        i += arch::block_dim();
    }
    arch::cp_async_commit();
    arch::cp_async_wait_all();
    arch::sync_threads();
    let mut w = arch::thread_idx();
    while w < p.bytes / 4 {
        // SAFETY: w * 4 < bytes, 4-aligned in both spaces.
        unsafe { arch::st_global_u32(dst + w as u64 * 4, arch::ld_shared_u32(smem + w * 4)) }
        w += arch::block_dim();
    }
}
