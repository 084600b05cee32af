//! Kernel entry points. Each one derives its indices, checks bounds and calls
//! shared code; the host launches them from `host/gpu/launch.rs`.

use crate::arch;
use crate::count::PosPopcnt32;
use crate::params::{CountParams, CpAsyncTestParams, DecodeParams, WarpTestParams};

/// Bit counting (paper §4.1): `counts[8 * row_bytes] += per-bit-position
/// popcount over all rows`.
///
/// Q: why "super-rows" rather than one thread per (row, 4-byte column)?
/// A: a row of 5732 bytes (Cora) or 1001 bytes starts at an address that is
/// not a multiple of 128, so a warp reading 128 bytes of one row straddles two
/// lines: twice the PCIe or DRAM transactions, and rows of odd length need
/// byte loads. Instead the kernel groups `g = 128 / gcd(L, 128)` rows into a
/// super-row of `g·L` bytes, a multiple of 128. Each thread owns one 4-byte
/// word *column* of the super-row and walks a strided subset of super-rows;
/// consecutive threads read consecutive words, so every warp load is one
/// aligned 128-byte line. A word may straddle two rows; that only changes
/// which tensor bit positions its 32 counters are credited to at the end.
///
/// # Safety
/// `p.data` is readable for `rows * row_bytes` bytes and `p.counts` writable
/// for `8 * row_bytes` u64 counters.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn ibp_count_bits(p: CountParams) {
    if p.row_bytes == 0 || p.rows == 0 {
        return;
    }
    let l = p.row_bytes;
    let group = 128 / gcd(l, 128);
    let sr = SuperRows {
        data: arch::to_global(p.data),
        counts: arch::to_global(p.counts),
        row_bytes: l,
        bytes: group * l,
        full: div(p.rows, group),
        tail_bytes: (p.rows - div(p.rows, group) * group) * l,
        // Q: why keep a byte path?
        // A: word loads need a 4-aligned base; a caller may hand a view that
        // starts anywhere. The choice is uniform for the whole launch.
        aligned: p.data % 4 == 0,
    };
    let cols = sr.bytes / 4;
    let count = sr.full + (sr.tail_bytes > 0) as u64;
    let t = arch::global_thread();
    let threads = arch::grid_threads();
    if threads >= cols {
        let groups = div(threads, cols);
        if t < groups * cols {
            let g = div(t, cols);
            // SAFETY: column and super-rows in bounds; forwarded contract.
            unsafe { sr.count_column(t - g * cols, g, groups, count) }
        }
    } else {
        let mut col = t;
        while col < cols {
            // SAFETY: as above.
            unsafe { sr.count_column(col, 0, 1, count) }
            col += threads;
        }
    }
}

/// Division that is 0 for a zero divisor, so no panic path reaches the PTX.
#[inline(always)]
fn div(a: u64, b: u64) -> u64 {
    if b == 0 { 0 } else { a / b }
}

/// Greatest common divisor (`b` a power of two here, so this is short).
#[inline(always)]
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// The rows seen as `full` super-rows of `bytes` bytes, then a partial one of
/// `tail_bytes`.
struct SuperRows {
    data: u64,
    counts: u64,
    row_bytes: u64,
    bytes: u64,
    full: u64,
    tail_bytes: u64,
    aligned: bool,
}

impl SuperRows {
    /// Word `col` of a full super-row `s < full`.
    ///
    /// # Safety
    /// `s < full`, `col < bytes / 4`, and the kernel's contract holds.
    #[inline(always)]
    unsafe fn load_full(&self, s: u64, col: u64) -> u32 {
        let a = self.data + s * self.bytes + col * 4;
        if self.aligned {
            // SAFETY: 4-aligned (base and offset) and inside the data.
            unsafe { arch::ld_global_u32(a) }
        } else {
            let mut w = 0u32;
            for k in 0..4u64 {
                // SAFETY: inside a full super-row.
                w |= unsafe { arch::ld_global_u8(a + k) } << (8 * k);
            }
            w
        }
    }

    /// Word `col` of super-row `s` (full or the tail), zero past the end.
    ///
    /// # Safety
    /// `s <= full`, `col < bytes / 4`, and the kernel's contract holds.
    #[inline(always)]
    unsafe fn load(&self, s: u64, col: u64) -> u32 {
        let off = s * self.bytes + col * 4;
        let a = self.data + off;
        let end = self.full * self.bytes + self.tail_bytes;
        if self.aligned && off + 4 <= end {
            // SAFETY: 4-aligned (base and offset) and inside the data.
            unsafe { arch::ld_global_u32(a) }
        } else {
            let mut w = 0u32;
            for k in 0..4u64 {
                if off + k < end {
                    // SAFETY: byte inside the data.
                    w |= unsafe { arch::ld_global_u8(a + k) } << (8 * k);
                }
            }
            w
        }
    }

    /// Count column `col` over super-rows `s0, s0 + stride, …` below `count`.
    ///
    /// # Safety
    /// `col < bytes / 4`, `count <= full + 1`, and the kernel's contract holds.
    #[inline(always)]
    unsafe fn count_column(&self, col: u64, s0: u64, stride: u64, count: u64) {
        let mut acc = PosPopcnt32::new();
        // Tensor byte positions of this column's 4 bytes (fixed for every
        // super-row, since a super-row holds whole rows).
        let first = col * 4;
        let pos0 = first - div(first, self.row_bytes) * self.row_bytes;
        let counts = self.counts;
        let l = self.row_bytes;
        let mut sink = |b: usize, v: u64| {
            // A word can span several rows when rows are shorter than 4 bytes.
            let x = pos0 + (b / 8) as u64;
            let byte = x - div(x, l) * l;
            // SAFETY: byte < row_bytes, so the counter index < 8 * row_bytes.
            unsafe { arch::red_add_u64(counts + (byte * 8 + (b % 8) as u64) * 8, v) }
        };
        // SAFETY (all loads below): s < full (ld) or s <= full (ld_any), and
        // col in range.
        let ld = |s: u64| unsafe { self.load_full(s, col) };
        let ld_any = |s: u64| unsafe { self.load(s, col) };
        let mut s = s0;
        // Q: why sixteen loads before any arithmetic?
        // A: they are independent, so each thread keeps sixteen requests in
        // flight; that is what hides DRAM and, above all, PCIe latency.
        while s + 15 * stride < self.full {
            // Written out so the words stay in registers (`from_fn`'s loop
            // left them in local memory).
            let d = stride;
            let x = [
                ld(s),
                ld(s + d),
                ld(s + 2 * d),
                ld(s + 3 * d),
                ld(s + 4 * d),
                ld(s + 5 * d),
                ld(s + 6 * d),
                ld(s + 7 * d),
                ld(s + 8 * d),
                ld(s + 9 * d),
                ld(s + 10 * d),
                ld(s + 11 * d),
                ld(s + 12 * d),
                ld(s + 13 * d),
                ld(s + 14 * d),
                ld(s + 15 * d),
            ];
            acc.add16(&x, &mut sink);
            s += 16 * d;
        }
        while s < count {
            acc.add(ld_any(s), &mut sink);
            s += stride;
        }
        acc.drain(&mut sink);
    }
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

/// Decompression in batch mode (see `crate::decode` and [`DecodeParams`]).
///
/// Q: why two entry points for one kernel body?
/// A: registers are allocated per kernel for its most demanding path; the
/// two modes need different amounts, and each mode runs with as many warps
/// per SM as its own path allows.
///
/// # Safety
/// As `crate::decode::run`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn ibp_decode(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { crate::decode::run(p, true) }
}

/// Decompression in streaming mode (large tensors).
///
/// # Safety
/// As `crate::decode::run`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn ibp_decode_stream(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { crate::decode::run(p, false) }
}
