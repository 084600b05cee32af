//! The only place with `asm!` and device intrinsics: thread and warp ids,
//! shuffles, ballot, dynamic shared memory, loads and stores, `cp.async`,
//! global reductions, a few shifts and a byte permute. Everything else
//! calls these thin wrappers (the kernel bodies through the `simt` traits,
//! whose scans are written once in `simt`).
//!
//! All shuffles and votes use the full member mask: ibp's kernels always run
//! whole warps through these calls (lanes with no work carry a neutral value
//! instead of branching around the call).

use core::arch::asm;
use core::arch::nvptx;

// Q: why one `.extern .shared` array for every kernel?
// A: PTX has no other way to ask for shared memory whose size is chosen at
// launch. Each kernel carves its own regions out of it; the host passes the
// byte count through cust's `shared_mem_bytes`.
core::arch::global_asm!(".extern .shared .align 16 .b8 IBP_DYN_SMEM[];");

/// Thread index within the block (x).
#[inline(always)]
pub fn thread_idx() -> u32 {
    // SAFETY: reads a special register; no preconditions.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// Threads per block (x).
#[inline(always)]
pub fn block_dim() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_dim_x() as u32 }
}

/// Block index (x).
#[inline(always)]
pub fn block_idx() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_x() as u32 }
}

/// Blocks in the grid (x).
#[inline(always)]
pub fn grid_dim() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// Global thread index.
#[inline(always)]
pub fn global_thread() -> u64 {
    block_idx() as u64 * block_dim() as u64 + thread_idx() as u64
}

/// Threads in the grid.
#[inline(always)]
pub fn grid_threads() -> u64 {
    grid_dim() as u64 * block_dim() as u64
}

/// Lane within the warp.
#[inline(always)]
pub fn lane() -> u32 {
    thread_idx() & 31
}

/// Warp index within the block.
#[inline(always)]
pub fn warp_in_block() -> u32 {
    thread_idx() >> 5
}

/// Global warp index and the number of warps in the grid.
#[inline(always)]
pub fn global_warp() -> (u64, u64) {
    let per_block = (block_dim() >> 5) as u64;
    (
        block_idx() as u64 * per_block + warp_in_block() as u64,
        grid_dim() as u64 * per_block,
    )
}

/// `__syncthreads()`.
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: every thread of the block reaches the call sites (callers keep
    // the barrier out of divergent code).
    unsafe { nvptx::_syncthreads() }
}

/// `__syncwarp()` with the full mask.
#[inline(always)]
pub fn sync_warp() {
    // SAFETY: a warp-level barrier; all lanes reach it in ibp's kernels.
    unsafe { asm!("bar.warp.sync 0xffffffff;") }
}

/// `shfl.sync.up.b32` (full warp).
#[inline(always)]
pub fn shfl_up(x: u32, d: u32) -> u32 {
    let r: u32;
    // SAFETY: full-mask shuffle; all 32 lanes execute it.
    unsafe {
        asm!("shfl.sync.up.b32 {r}, {x}, {d}, 0, -1;", r = out(reg32) r, x = in(reg32) x, d = in(reg32) d)
    }
    r
}

/// `x` plus lane `lane - d`'s `x` (just `x` when `lane < d`): a
/// `shfl.sync.up` whose predicate output guards the add.
#[inline(always)]
pub fn shfl_up_add(x: u32, d: u32) -> u32 {
    let mut s = x;
    // SAFETY: full-mask shuffle; all 32 lanes execute it.
    unsafe {
        asm!(
            "{{ .reg .pred p; .reg .b32 t; shfl.sync.up.b32 t|p, {s}, {d}, 0, -1; @p add.u32 {s}, {s}, t; }}",
            s = inout(reg32) s,
            d = in(reg32) d,
        )
    }
    s
}

/// [`shfl_up_add`] within groups of `g` lanes: the shuffle's segment mask
/// (`c = (32 - g) << 8`) keeps the source inside the caller's group, and
/// the predicate says whether it was.
#[inline(always)]
pub fn shfl_up_add_in(x: u32, d: u32, g: u32) -> u32 {
    let mut s = x;
    let c = (32 - g) << 8;
    // SAFETY: full-mask shuffle; all 32 lanes execute it.
    unsafe {
        asm!(
            "{{ .reg .pred p; .reg .b32 t; shfl.sync.up.b32 t|p, {s}, {d}, {c}, -1; @p add.u32 {s}, {s}, t; }}",
            s = inout(reg32) s,
            d = in(reg32) d,
            c = in(reg32) c,
        )
    }
    s
}

/// `shfl.sync.down.b32` (full warp).
#[inline(always)]
pub fn shfl_down(x: u32, d: u32) -> u32 {
    let r: u32;
    // SAFETY: full-mask shuffle.
    unsafe {
        asm!("shfl.sync.down.b32 {r}, {x}, {d}, 31, -1;", r = out(reg32) r, x = in(reg32) x, d = in(reg32) d)
    }
    r
}

/// `shfl.sync.idx.b32` (full warp): the value of lane `src`.
#[inline(always)]
pub fn shfl_idx(x: u32, src: u32) -> u32 {
    let r: u32;
    // SAFETY: full-mask shuffle.
    unsafe {
        asm!("shfl.sync.idx.b32 {r}, {x}, {s}, 31, -1;", r = out(reg32) r, x = in(reg32) x, s = in(reg32) src)
    }
    r
}

/// `shfl.sync.bfly.b32` (full warp): the value of lane `lane ^ m`.
#[inline(always)]
pub fn shfl_xor(x: u32, m: u32) -> u32 {
    let r: u32;
    // SAFETY: full-mask shuffle.
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {x}, {m}, 31, -1;", r = out(reg32) r, x = in(reg32) x, m = in(reg32) m)
    }
    r
}

/// `vote.sync.ballot.b32`: bit `l` set when lane `l` passes `pred`.
#[inline(always)]
pub fn ballot(pred: bool) -> u32 {
    let r: u32;
    // SAFETY: full-mask vote.
    unsafe {
        asm!(
            "{{ .reg .pred p; setp.ne.u32 p, {x}, 0; vote.sync.ballot.b32 {r}, p, -1; }}",
            r = out(reg32) r,
            x = in(reg32) pred as u32,
        )
    }
    r
}

/// `vote.sync.all.pred`: whether every lane passes `pred`.
#[inline(always)]
pub fn vote_all(pred: bool) -> bool {
    let r: u32;
    // SAFETY: full-mask vote.
    unsafe {
        asm!(
            "{{ .reg .pred p, q; setp.ne.u32 p, {x}, 0; vote.sync.all.pred q, p, -1; selp.u32 {r}, 1, 0, q; }}",
            r = out(reg32) r,
            x = in(reg32) pred as u32,
        )
    }
    r != 0
}

/// `vote.sync.any.pred`: whether some lane passes `pred`.
#[inline(always)]
pub fn vote_any(pred: bool) -> bool {
    let r: u32;
    // SAFETY: full-mask vote.
    unsafe {
        asm!(
            "{{ .reg .pred p, q; setp.ne.u32 p, {x}, 0; vote.sync.any.pred q, p, -1; selp.u32 {r}, 1, 0, q; }}",
            r = out(reg32) r,
            x = in(reg32) pred as u32,
        )
    }
    r != 0
}

/// A shared-space address as a generic one (`cvta.shared`), for ordinary
/// Rust pointers into shared memory.
#[inline(always)]
pub fn shared_to_generic(a: u32) -> u64 {
    let r: u64;
    // SAFETY: pure address conversion.
    unsafe { asm!("cvta.shared.u64 {r}, {a};", r = out(reg64) r, a = in(reg64) a as u64) }
    r
}

/// Shared-space address (32-bit) of the dynamic shared memory array.
#[inline(always)]
pub fn dyn_smem_base() -> u32 {
    let r: u32;
    // SAFETY: takes the address of the extern shared array.
    unsafe { asm!("mov.u32 {r}, IBP_DYN_SMEM;", r = out(reg32) r) }
    r
}

/// Convert a generic address (what the host passes) to a global one.
#[inline(always)]
pub fn to_global(p: u64) -> u64 {
    let r: u64;
    // SAFETY: pure address conversion.
    unsafe { asm!("cvta.to.global.u64 {r}, {p};", r = out(reg64) r, p = in(reg64) p) }
    r
}

/// Load a u32 from shared memory.
///
/// # Safety
/// `addr` is 4-aligned and inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_shared_u32(addr: u32) -> u32 {
    let r: u32;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.shared.u32 {r}, [{a}];", r = out(reg32) r, a = in(reg32) addr) }
    r
}

/// Store the low byte of `v` to shared memory.
///
/// # Safety
/// `addr` inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_u8(addr: u32, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.shared.u8 [{a}], {v};", a = in(reg32) addr, v = in(reg16) v as u16) }
}

/// Store the low 16 bits of `v` to shared memory.
///
/// # Safety
/// `addr` 2-aligned and inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_u16(addr: u32, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.shared.u16 [{a}], {v};", a = in(reg32) addr, v = in(reg16) v as u16) }
}

/// Store a u32 to shared memory.
///
/// # Safety
/// `addr` is 4-aligned and inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_u32(addr: u32, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.shared.u32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v) }
}

/// Load 16 bytes from shared memory.
///
/// # Safety
/// `addr` is 16-aligned and inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("ld.shared.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr)
    }
    [a, b, c, d]
}

/// Store 16 bytes to global memory.
///
/// # Safety
/// `addr` is a 16-aligned global address the kernel may write.
#[inline(always)]
pub unsafe fn st_global_v4(addr: u64, v: [u32; 4]) {
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("st.global.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
            p = in(reg64) addr, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3])
    }
}

/// `cp.async` of 4, 8 or 16 bytes from global to shared memory.
///
/// Q: why `.ca` for 4 and 8 bytes but `.cg` for 16?
/// A: PTX allows `.cg` (bypass L1) only for 16-byte copies. Streamed source
/// data is read once, so L1 caching buys nothing; 16-byte copies skip it.
///
/// # Safety
/// `dst` (shared) and `src` (global) are aligned to `WIDTH` and the ranges are
/// valid for the launch. Complete the copy with [`cp_async_commit`] and
/// [`cp_async_wait_all`] (or `wait_group`) before reading `dst`.
#[inline(always)]
pub unsafe fn cp_async<const WIDTH: u32>(dst: u32, src: u64) {
    // SAFETY: the caller guarantees alignment and validity.
    unsafe {
        match WIDTH {
            4 => {
                asm!("cp.async.ca.shared.global [{d}], [{s}], 4;", d = in(reg32) dst, s = in(reg64) src)
            }
            8 => {
                asm!("cp.async.ca.shared.global [{d}], [{s}], 8;", d = in(reg32) dst, s = in(reg64) src)
            }
            _ => {
                asm!("cp.async.cg.shared.global [{d}], [{s}], 16;", d = in(reg32) dst, s = in(reg64) src)
            }
        }
    }
}

/// Close the current group of `cp.async` copies.
#[inline(always)]
pub fn cp_async_commit() {
    // SAFETY: no operands.
    unsafe { asm!("cp.async.commit_group;") }
}

/// Wait until at most `N` committed groups are still in flight.
#[inline(always)]
pub fn cp_async_wait_group<const N: u32>() {
    // SAFETY: no memory operands; the immediate is a const generic.
    unsafe {
        match N {
            0 => asm!("cp.async.wait_group 0;"),
            1 => asm!("cp.async.wait_group 1;"),
            _ => asm!("cp.async.wait_group 2;"),
        }
    }
}

/// Wait for every `cp.async` of this thread.
#[inline(always)]
pub fn cp_async_wait_all() {
    // SAFETY: no operands.
    unsafe { asm!("cp.async.wait_all;") }
}

/// Load a u32 from global memory (through L1, no coherence assumptions).
///
/// # Safety
/// `addr` is a 4-aligned readable global address.
#[inline(always)]
pub unsafe fn ld_global_u32(addr: u64) -> u32 {
    let r: u32;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.global.u32 {r}, [{a}];", r = out(reg32) r, a = in(reg64) addr) }
    r
}

/// Load a byte from global memory.
///
/// # Safety
/// `addr` is a readable global address.
#[inline(always)]
pub unsafe fn ld_global_u8(addr: u64) -> u32 {
    let r: u16;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.global.u8 {r}, [{a}];", r = out(reg16) r, a = in(reg64) addr) }
    r as u32
}

/// Store a u32 to global memory.
///
/// # Safety
/// `addr` is a 4-aligned writable global address.
#[inline(always)]
pub unsafe fn st_global_u32(addr: u64, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.global.u32 [{a}], {v};", a = in(reg64) addr, v = in(reg32) v) }
}

/// `red.global.add.u64`: atomic add with no result.
///
/// # Safety
/// `addr` is an 8-aligned writable global address.
#[inline(always)]
pub unsafe fn red_add_u64(addr: u64, v: u64) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("red.global.add.u64 [{a}], {v};", a = in(reg64) addr, v = in(reg64) v) }
}

/// `atom.global.add.u64`: atomic add returning the value before it.
///
/// # Safety
/// `addr` is an 8-aligned writable global address.
#[inline(always)]
pub unsafe fn atom_add_u64(addr: u64, v: u64) -> u64 {
    let r: u64;
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("atom.global.add.u64 {r}, [{a}], {v};", r = out(reg64) r, a = in(reg64) addr, v = in(reg64) v)
    }
    r
}

/// Store a byte to global memory.
///
/// # Safety
/// `addr` is a writable global address.
#[inline(always)]
pub unsafe fn st_global_u8(addr: u64, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.global.u8 [{a}], {v};", a = in(reg64) addr, v = in(reg16) v as u16) }
}

/// Store a u16 to global memory.
///
/// # Safety
/// `addr` is a 2-aligned writable global address.
#[inline(always)]
pub unsafe fn st_global_u16(addr: u64, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.global.u16 [{a}], {v};", a = in(reg64) addr, v = in(reg16) v as u16) }
}

/// Store a u64 to global memory.
///
/// # Safety
/// `addr` is an 8-aligned writable global address.
#[inline(always)]
pub unsafe fn st_global_u64(addr: u64, v: u64) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.global.u64 [{a}], {v};", a = in(reg64) addr, v = in(reg64) v) }
}

/// Load a u64 from global memory.
///
/// # Safety
/// `addr` is an 8-aligned readable global address.
#[inline(always)]
pub unsafe fn ld_global_u64(addr: u64) -> u64 {
    let r: u64;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.global.u64 {r}, [{a}];", r = out(reg64) r, a = in(reg64) addr) }
    r
}

/// Load a u16 from shared memory.
///
/// # Safety
/// `addr` a valid, 2-aligned shared address.
#[inline(always)]
pub unsafe fn ld_shared_u16(addr: u32) -> u32 {
    let r: u16;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.shared.u16 {r}, [{a}];", r = out(reg16) r, a = in(reg32) addr) }
    r as u32
}

/// Load a byte from shared memory.
///
/// # Safety
/// `addr` is inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_shared_u8(addr: u32) -> u32 {
    let r: u16;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.shared.u8 {r}, [{a}];", r = out(reg16) r, a = in(reg32) addr) }
    r as u32
}

/// `atom.global.or.b64` with no result used.
///
/// # Safety
/// `addr` is an 8-aligned writable global address.
#[inline(always)]
pub unsafe fn red_or_u64(addr: u64, v: u64) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("red.global.or.b64 [{a}], {v};", a = in(reg64) addr, v = in(reg64) v) }
}

/// `red.global.min.u64`.
///
/// # Safety
/// `addr` is an 8-aligned writable global address.
#[inline(always)]
pub unsafe fn red_min_u64(addr: u64, v: u64) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("red.global.min.u64 [{a}], {v};", a = in(reg64) addr, v = in(reg64) v) }
}

/// Load 16 bytes through the read-only (non-coherent) cache.
///
/// # Safety
/// `addr` is a 16-aligned global address of data no thread writes during
/// the launch.
#[inline(always)]
pub unsafe fn ld_global_nc_v4(addr: u64) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("ld.global.nc.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) addr)
    }
    [a, b, c, d]
}

/// Load 8 bytes from shared memory.
///
/// # Safety
/// `addr` is 8-aligned and inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v2(addr: u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("ld.shared.v2.u32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg32) addr)
    }
    [a, b]
}

/// Load 8 bytes through the read-only cache.
///
/// # Safety
/// `addr` is an 8-aligned global address of data no thread writes during
/// the launch.
#[inline(always)]
pub unsafe fn ld_global_nc_v2(addr: u64) -> [u32; 2] {
    let (a, b): (u32, u32);
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("ld.global.nc.v2.u32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg64) addr)
    }
    [a, b]
}

/// Load 16 bytes from global memory.
///
/// # Safety
/// `addr` is a 16-aligned readable global address.
#[inline(always)]
pub unsafe fn ld_global_v4(addr: u64) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("ld.global.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) addr)
    }
    [a, b, c, d]
}

/// Store 16 bytes to shared memory.
///
/// # Safety
/// `addr` is 16-aligned and inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_v4(addr: u32, v: [u32; 4]) {
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("st.shared.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};",
            p = in(reg32) addr, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3])
    }
}

/// `red.global.or.b32`.
///
/// # Safety
/// `addr` is a writable, 4-aligned global address.
#[inline(always)]
pub unsafe fn red_or_u32(addr: u64, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("red.global.or.b32 [{a}], {v};", a = in(reg64) addr, v = in(reg32) v) }
}

/// `red.shared.or.b32`.
///
/// # Safety
/// `addr` is a 4-aligned shared address inside the block's allocation.
#[inline(always)]
pub unsafe fn red_shared_or_u32(addr: u32, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("red.shared.or.b32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v) }
}

/// `red.shared.add.u32`.
///
/// # Safety
/// `addr` is a 4-aligned shared address inside the block's allocation.
#[inline(always)]
pub unsafe fn red_shared_add_u32(addr: u32, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("red.shared.add.u32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v) }
}

/// `ld.global.nc.u64`: a read-only 8-aligned load.
///
/// # Safety
/// `addr` is a readable, 8-aligned global address not written by the kernel.
#[inline(always)]
pub unsafe fn ld_global_nc_u64(addr: u64) -> u64 {
    let r: u64;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.global.nc.u64 {r}, [{a}];", r = out(reg64) r, a = in(reg64) addr) }
    r
}

/// `st.shared.u64`.
///
/// # Safety
/// `addr` is an 8-aligned shared address inside the block's allocation.
#[inline(always)]
pub unsafe fn st_shared_u64(addr: u32, v: u64) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.shared.u64 [{a}], {v};", a = in(reg32) addr, v = in(reg64) v) }
}

/// `ld.shared.u64`.
///
/// # Safety
/// `addr` is an 8-aligned shared address inside the block's allocation.
#[inline(always)]
pub unsafe fn ld_shared_u64(addr: u32) -> u64 {
    let r: u64;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.shared.u64 {r}, [{a}];", r = out(reg64) r, a = in(reg32) addr) }
    r
}

/// The low `n ≤ 32` bits set: `shr.b32` of all ones by `32 − n`, which PTX
/// defines as 0 for a shift of 32 (Rust's `>>` has no such case). The
/// constant is an immediate, so it costs no register.
#[inline(always)]
pub fn low_mask32(n: u32) -> u32 {
    let r: u32;
    // SAFETY: a pure register operation.
    unsafe {
        asm!(
            "shr.b32 {r}, 0xffffffff, {s};",
            r = out(reg32) r,
            s = in(reg32) 32 - n,
            options(pure, nomem, nostack)
        )
    };
    r
}

/// `((hi:lo) >> (n mod 32))`'s low 32 bits: one funnel shift
/// (`shf.r.wrap`), where Rust's 64-bit shift of the pair needs the shift
/// amount masked first.
#[inline(always)]
pub fn funnel_r32(lo: u32, hi: u32, n: u32) -> u32 {
    let r: u32;
    // SAFETY: a pure register operation.
    unsafe {
        asm!(
            "shf.r.wrap.b32 {r}, {lo}, {hi}, {n};",
            r = out(reg32) r,
            lo = in(reg32) lo,
            hi = in(reg32) hi,
            n = in(reg32) n,
            options(pure, nomem, nostack)
        )
    };
    r
}

/// `v << (n mod 32)`: one funnel shift (`shf.l.wrap` of `v:0`), where
/// Rust's shift needs the amount masked first.
#[inline(always)]
pub fn shl_wrap32(v: u32, n: u32) -> u32 {
    let r: u32;
    // SAFETY: a pure register operation.
    unsafe {
        asm!(
            "shf.l.wrap.b32 {r}, 0, {v}, {n};",
            r = out(reg32) r,
            v = in(reg32) v,
            n = in(reg32) n,
            options(pure, nomem, nostack)
        )
    };
    r
}

/// `prmt.b32`: byte `i` of the result is byte `sel` nibble `i` of the
/// eight bytes of `b:a` (0–3 from `a`, 4–7 from `b`); `bits::merge_bytes`
/// and `bits::place_bytes` pick the selectors.
#[inline(always)]
pub fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let r: u32;
    // SAFETY: a pure register operation.
    unsafe {
        asm!(
            "prmt.b32 {r}, {a}, {b}, {s};",
            r = out(reg32) r,
            a = in(reg32) a,
            b = in(reg32) b,
            s = in(reg32) sel,
            options(pure, nomem, nostack)
        )
    };
    r
}
