//! The float coding's kernel entry points (`docs/FORMAT.md` §7): the
//! decode, the encoder's three kernels and the float-coded KV store's
//! placement, thin as the others in `kernels`.

use crate::arch;
use crate::hw::{Hw, SharedBook};
use crate::params::{FloatDecodeParams, FloatEncodeParams, FloatKvPlaceParams};
use crate::prelude::kernel;

/// Decode of float-coded rows (`crate::detail::float_decode::decode`): a
/// group of lanes a row (4 with the default 4 sub-streams, 8 rows a warp),
/// the decode table (at most 8 KiB) copied into shared memory once per
/// block, each row read where it lies.
///
/// # Safety
/// As `crate::detail::float_decode::decode`; the launch provides
/// `table_smem_bytes` (the table's bytes) of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_float_decode(p: FloatDecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { float_decode::<false>(p) }
}

/// [`ibp_float_decode`] with each coded row staged in shared memory first
/// (`crate::detail::float_decode::stage_row`): a group's 16-byte loads
/// of the row's pieces, then its sub-streams decoded from there.
///
/// # Safety
/// As `crate::detail::float_decode::decode` with `STAGE`; the launch
/// provides the table's bytes rounded up to 16, plus `32 / G ·
/// stage_bytes` for each warp of the block, of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_float_decode_staged(p: FloatDecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { float_decode::<true>(p) }
}

/// The two decode kernels' body: global addresses, the table into shared
/// memory, each warp's workspace after it.
///
/// # Safety
/// As the kernels'.
#[inline(always)]
unsafe fn float_decode<const STAGE: bool>(p: FloatDecodeParams) {
    let mut p = p;
    p.payload = arch::to_global(p.payload);
    p.bases = arch::to_global(p.bases);
    p.rel = arch::to_global(p.rel);
    p.table = arch::to_global(p.table);
    if p.ids != 0 {
        p.ids = arch::to_global(p.ids);
    }
    p.out = arch::to_global(p.out);
    p.status = arch::to_global(p.status);
    let (warp, warps) = arch::global_warp();
    let base = arch::dyn_smem_base();
    let words = p.table_smem_bytes / 4;
    let mut i = arch::thread_idx();
    while i < words {
        // SAFETY: i·4 < table_smem_bytes, the table's length in whole words,
        // and inside the launch's shared memory.
        unsafe { arch::st_shared_u32(base + i * 4, arch::ld_global_u32(p.table + i as u64 * 4)) };
        i += arch::block_dim();
    }
    arch::sync_threads();
    // This warp's workspace: after the table, (32 / G) groups' stages.
    let g = p.sub_streams.clamp(1, 32).next_power_of_two();
    let per_warp = 32 / g;
    let stages = base + ((p.table_smem_bytes + 15) & !15);
    let ws = stages + arch::warp_in_block() * per_warp * p.stage_bytes;
    // The warps' tiles after every warp's stages.
    let tile = stages
        + (arch::block_dim() / 32) * per_warp * p.stage_bytes
        + arch::warp_in_block() * p.tile_warp_bytes();
    // SAFETY: forwarded contract; the table is in shared memory at `base`,
    // the workspaces after it, then the tiles (the launch's shared memory,
    // `ibp::gpu::FloatDecoder`'s plan).
    unsafe {
        crate::detail::float_bulk::decode::<_, _, STAGE>(
            &Hw,
            &SharedBook(base),
            &p,
            warp,
            warps,
            ws,
            tile,
        )
    }
}

/// The float coding's encode parameters with global addresses.
#[inline(always)]
fn float_encode_globals(p: FloatEncodeParams) -> FloatEncodeParams {
    let g = |a: u64| if a == 0 { 0 } else { arch::to_global(a) };
    FloatEncodeParams {
        src: g(p.src),
        table: g(p.table),
        hist: g(p.hist),
        sizes: g(p.sizes),
        offsets: g(p.offsets),
        payload: g(p.payload),
        bases: g(p.bases),
        rel: g(p.rel),
        ..p
    }
}

/// Copy the float coding's encode table (`table_smem_bytes`) into the
/// block's shared memory; returns its base.
///
/// # Safety
/// The table holds `table_smem_bytes` bytes in whole words; the launch
/// gives that much dynamic shared memory.
#[inline(always)]
unsafe fn float_table_to_shared(p: &FloatEncodeParams) -> u32 {
    let base = arch::dyn_smem_base();
    let mut i = arch::thread_idx();
    while i < p.table_smem_bytes / 4 {
        // SAFETY: i·4 < table_smem_bytes (the caller's contract).
        unsafe { arch::st_shared_u32(base + i * 4, arch::ld_global_u32(p.table + i as u64 * 4)) };
        i += arch::block_dim();
    }
    arch::sync_threads();
    base
}

/// The float coding's symbol histogram (`crate::detail::float_encode::histogram`),
/// a thread a 4-byte word, the bins in shared memory.
///
/// # Safety
/// As `crate::detail::float_encode::histogram`; the launch provides
/// `table_smem_bytes` (`4 · 2^width`) of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_float_hist(p: FloatEncodeParams) {
    let p = float_encode_globals(p);
    let tid = arch::thread_idx();
    let bd = arch::block_dim();
    let thread = arch::block_idx() as u64 * bd as u64 + tid as u64;
    let threads = arch::grid_dim() as u64 * bd as u64;
    // SAFETY: forwarded contract.
    unsafe {
        crate::detail::float_encode::histogram(
            &Hw,
            &p,
            arch::dyn_smem_base(),
            tid,
            bd,
            thread,
            threads,
        )
    }
}

/// The float coding's stored length of every row
/// (`crate::detail::float_encode::measure`), a group of lanes a row, the
/// encode table in shared memory.
///
/// # Safety
/// As `crate::detail::float_encode::measure`; the launch provides
/// `table_smem_bytes` of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_float_size(p: FloatEncodeParams) {
    let p = float_encode_globals(p);
    let (warp, warps) = arch::global_warp();
    // SAFETY: forwarded contract.
    unsafe {
        let base = float_table_to_shared(&p);
        crate::detail::float_encode::measure(&Hw, &SharedBook(base), &p, warp, warps)
    }
}

/// The float coding's rows and index (`crate::detail::float_encode::encode`),
/// a group of lanes a row, the encode table in shared memory.
///
/// # Safety
/// As `crate::detail::float_encode::encode`; the launch provides
/// `table_smem_bytes` of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_float_encode(p: FloatEncodeParams) {
    let p = float_encode_globals(p);
    let (warp, warps) = arch::global_warp();
    // SAFETY: forwarded contract.
    unsafe {
        let base = float_table_to_shared(&p);
        crate::detail::float_encode::encode::<_, _, false>(&Hw, &SharedBook(base), &p, warp, warps)
    }
}

/// The float coding's rows at a fixed stride, without an index
/// (`crate::detail::float_encode::encode` with `STRIDED`): the float-coded
/// KV store's stage.
///
/// # Safety
/// As `crate::detail::float_encode::encode`; the launch provides
/// `table_smem_bytes` of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_float_encode_strided(p: FloatEncodeParams) {
    let p = float_encode_globals(p);
    let (warp, warps) = arch::global_warp();
    // SAFETY: forwarded contract.
    unsafe {
        let base = float_table_to_shared(&p);
        crate::detail::float_encode::encode::<_, _, true>(&Hw, &SharedBook(base), &p, warp, warps)
    }
}

/// The float-coded KV store's placement
/// (`crate::detail::float_kv::place`): a warp a row, its stored form into
/// its slot or an overflow entry of the pages, and its index entry.
///
/// # Safety
/// As `crate::detail::float_kv::place`.
#[kernel]
pub unsafe fn ibp_float_kv_place(p: FloatKvPlaceParams) {
    let g = |a: u64| if a == 0 { 0 } else { arch::to_global(a) };
    let p = FloatKvPlaceParams {
        stage: g(p.stage),
        sizes: g(p.sizes),
        pages: g(p.pages),
        counters: g(p.counters),
        starts: g(p.starts),
        lens: g(p.lens),
        ..p
    };
    let (warp, warps) = arch::global_warp();
    // SAFETY: forwarded contract.
    unsafe { crate::detail::float_kv::place(&Hw, &Hw, &p, warp, warps) }
}
