//! The decode kernels' entry points: batch mode (one, two or four tensors
//! a warp, and their uniform and periodic forms), a lane a tensor, streaming mode, the clustered
//! kernels and the feature cache's gather, with the book's copy into shared
//! memory and the launch geometry they share; thin as the others in
//! `kernels`.

use crate::arch;
use crate::detail::book::{CLASS_PERIODIC, CLASS_PERIODIC_HALVES, CLASS_UNIFORM};
use crate::detail::decode::ANY_CLASS;
use crate::hw::{GlobalBook, Hw, SharedBook};
use crate::params::{CacheParams, DECODE_FLAG_HALVES, DecodeParams, workspace_bytes};
use crate::prelude::kernel;

/// Run `$body` with `$b` the launch's decode book: copied into shared
/// memory at `$base` where the host gave it `$bytes` there, read at global
/// address `$book` (through L1) otherwise.
macro_rules! with_book {
    ($book:expr, $bytes:expr, $base:expr, |$b:ident| $body:expr) => {
        if $bytes != 0 {
            // SAFETY: the launch provides `$bytes` of shared memory at
            // `$base`, and the book holds that many bytes.
            unsafe { book_to_shared($book, $bytes, $base) };
            let $b = &SharedBook($base);
            $body
        } else {
            let $b = &GlobalBook($book);
            $body
        }
    };
}

/// Decompression in batch mode (see `crate::detail::decode` and [`DecodeParams`]).
///
/// Q: why two entry points for one kernel body?
/// A: registers are allocated per kernel for its most demanding path; the
/// two modes need different amounts, and each mode runs with as many warps
/// per SM as its own path allows.
///
/// # Safety
/// As `crate::detail::decode::run`; the launch provides `book_smem_bytes` plus
/// one workspace per warp of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_decode(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_batch::<1, ANY_CLASS>(p) }
}

/// Decompression in batch mode, two tensors at a time, one a half-warp
/// (`GROUPS` = 2 of `crate::detail::decode::run`).
///
/// # Safety
/// As [`ibp_decode`].
#[kernel]
pub unsafe fn ibp_decode_pairs(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_batch::<2, ANY_CLASS>(p) }
}

/// [`ibp_decode`] for a book whose every step is uniform
/// (`crate::detail::book::CLASS_UNIFORM`; chunks of 1, 2 or 4 bytes).
///
/// Q: why kernels of their own?
/// A: one step loop holding the uniform path beside the others ran its
/// instructions predicated off in every other step (Nsight Compute: +15%
/// executed on a table of two-run steps), and a uniform decision inside
/// the loop waited on a shared-memory load every step; deciding in the
/// step cost every table 8–13% (H200, 2026-11-29).
///
/// # Safety
/// As [`ibp_decode`], and every step of the book is uniform.
#[kernel]
pub unsafe fn ibp_decode_uniform(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_batch::<1, CLASS_UNIFORM>(p) }
}

/// [`ibp_decode_pairs`] for a book whose every step is uniform.
///
/// # Safety
/// As [`ibp_decode_uniform`].
#[kernel]
pub unsafe fn ibp_decode_pairs_uniform(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_batch::<2, CLASS_UNIFORM>(p) }
}

/// [`ibp_decode`] for a book whose every step is periodic
/// (`crate::detail::book::CLASS_PERIODIC`: chunks of 2 or 4 bytes whose
/// free bits repeat one byte pattern, as an fp8 table's; with
/// [`DECODE_FLAG_HALVES`], `CLASS_PERIODIC_HALVES`: 4-byte chunks whose
/// free bits repeat one 16-bit pattern, as an f16 table's): the uniform
/// step with each word spread a piece at a time before its expansion.
///
/// Q: why one kernel, branching once, rather than two?
/// A: each branch inlines its own batch loop, so neither step pays for
/// the other (a piece size chosen per step cost the byte form 17
/// instructions a step, `scripts/sass.sh --steps`), and the host keeps
/// one periodic kernel to pick.
///
/// # Safety
/// As [`ibp_decode`], and every step of the book is periodic (by the half
/// when the flag is set).
#[kernel]
pub unsafe fn ibp_decode_periodic(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_periodic::<1>(p) }
}

/// [`ibp_decode_periodic`] two tensors a warp (as [`ibp_decode_pairs`]),
/// for rows the pairs rule gives two a warp (the host's `pairs_pay`).
///
/// # Safety
/// As [`ibp_decode_periodic`].
#[kernel]
pub unsafe fn ibp_decode_pairs_periodic(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_periodic::<2>(p) }
}

/// [`ibp_decode_uniform`] four tensors a warp, one a quarter-warp (eight
/// lanes, 128 output bytes a step), for rows the host's `quads_pay` rule
/// gives four a warp.
///
/// Q: why only the uniform and periodic steps?
/// A: their quarter-step costs what a whole one does to the instruction
/// (`scripts/sass.sh --steps`: `c2_uni_quarter` 132 against `c2_uni`
/// 133, `c4_per_quarter` 161 against `c4_per` 162), so a row of
/// `L mod 256` in `(0, 128]` bytes takes a quarter fewer steps than in
/// pairs (384 bytes: three quarter-steps for four tensors against four
/// half-steps); the general half-step already costs up to 1.16×.
///
/// # Safety
/// As [`ibp_decode_uniform`].
#[kernel]
pub unsafe fn ibp_decode_quads_uniform(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_batch::<4, CLASS_UNIFORM>(p) }
}

/// [`ibp_decode_periodic`] four tensors a warp (as
/// [`ibp_decode_quads_uniform`]).
///
/// # Safety
/// As [`ibp_decode_periodic`].
#[kernel]
pub unsafe fn ibp_decode_quads_periodic(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_periodic::<4>(p) }
}

/// The periodic kernels' body: the batch loop by the byte or, with
/// [`DECODE_FLAG_HALVES`], by the 16-bit half.
///
/// # Safety
/// As [`ibp_decode_periodic`].
#[inline(always)]
unsafe fn decode_periodic<const GROUPS: u32>(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe {
        if p.decode_flags & DECODE_FLAG_HALVES != 0 {
            decode_batch::<GROUPS, CLASS_PERIODIC_HALVES>(p)
        } else {
            decode_batch::<GROUPS, CLASS_PERIODIC>(p)
        }
    }
}

/// The body of the unclustered batch-mode kernels.
///
/// # Safety
/// As [`ibp_decode`].
#[inline(always)]
unsafe fn decode_batch<const GROUPS: u32, const UNI: u8>(p: DecodeParams) {
    let p = global_decode(p);
    let base = arch::dyn_smem_base();
    // The decode book, once per block (paper: metadata stays on the GPU;
    // here in shared memory).
    // SAFETY: the launch's contract.
    unsafe { book_to_shared(p.book, p.book_smem_bytes, base) };
    let at = launch(&p, base + p.book_smem_bytes);
    // SAFETY: forwarded contract; the book is in shared memory at `base`.
    unsafe {
        crate::detail::decode::run::<_, _, false, GROUPS, UNI>(&Hw, &SharedBook(base), p, true, at)
    }
}

/// Decompression a lane a tensor (`crate::detail::decode::lanes`): each
/// thread of the grid decodes output rows `thread, thread + threads, …`,
/// with the decode book copied into shared memory once per block.
///
/// # Safety
/// As `crate::detail::decode::lanes::run`; the launch provides
/// `book_smem_bytes` (the whole book), rounded up to 16, then
/// `LANE_RING_BYTES` a thread of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_decode_lanes(p: DecodeParams) {
    let p = global_decode(p);
    let base = arch::dyn_smem_base();
    // SAFETY: the launch's contract.
    unsafe { book_to_shared(p.book, p.book_smem_bytes, base) };
    let rings = base + p.book_smem_bytes.next_multiple_of(16);
    let ring = rings + arch::thread_idx() * crate::detail::decode::lanes::LANE_RING_BYTES;
    // SAFETY: forwarded contract; the book is in shared memory at `base`,
    // each thread's ring after it.
    unsafe {
        crate::detail::decode::lanes::run(
            &Hw,
            &SharedBook(base),
            p,
            ring,
            arch::global_thread(),
            arch::grid_threads(),
        )
    }
}

/// Decompression in streaming mode (large tensors): the decode book in
/// shared memory once per block when the host gave it room
/// (`book_smem_bytes`), read from global memory through L1 otherwise.
///
/// Q: why the book in shared memory when it fits?
/// A: through L1 its loads were the kernel's largest stall: 44% of the
/// stall samples on 16 KB rows of 2-byte chunks, waiting on the book's
/// fields (Nsight Compute, H200, 2026-11-28), where batch mode, whose book
/// is in shared memory, decoded the same rows a third faster. A step reads
/// about four bytes of book an output byte.
///
/// # Safety
/// As `crate::detail::decode::run`; the launch provides `book_smem_bytes`
/// (0 or the whole book) plus one workspace per warp of dynamic shared
/// memory.
#[kernel]
pub unsafe fn ibp_decode_stream(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_stream::<ANY_CLASS>(p) }
}

/// [`ibp_decode_stream`] for a book whose every step is uniform (see
/// [`ibp_decode_uniform`]).
///
/// # Safety
/// As [`ibp_decode_stream`], and every step of the book is uniform.
#[kernel]
pub unsafe fn ibp_decode_stream_uniform(p: DecodeParams) {
    // SAFETY: forwarded contract.
    unsafe { decode_stream::<CLASS_UNIFORM>(p) }
}

/// The body of the unclustered streaming-mode kernels.
///
/// # Safety
/// As [`ibp_decode_stream`].
#[inline(always)]
unsafe fn decode_stream<const UNI: u8>(p: DecodeParams) {
    let p = global_decode(p);
    let base = arch::dyn_smem_base();
    let at = launch(&p, base + p.book_smem_bytes);
    with_book!(p.book, p.book_smem_bytes, base, |book| {
        // SAFETY: forwarded contract; `book` is the launch's decode book.
        unsafe { crate::detail::decode::run::<_, _, false, 1, UNI>(&Hw, book, p, false, at) }
    })
}

/// Decompression of a clustered dataset in batch mode: the `k` clusters'
/// books, back to back, copied into shared memory once per block as
/// `ibp_decode` copies its one (the host takes batch mode only when they
/// fit), and each tensor decodes with its cluster's.
///
/// # Safety
/// As `crate::detail::decode::run` with `CL`; the launch provides `book_smem_bytes`
/// (all `k` books) plus one workspace per warp of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_decode_clustered(p: DecodeParams) {
    let mut p = global_decode(p);
    p.clusters = arch::to_global(p.clusters);
    let base = arch::dyn_smem_base();
    // SAFETY: the launch's contract (all `k` books).
    unsafe { book_to_shared(p.book, p.book_smem_bytes, base) };
    let at = launch(&p, base + p.book_smem_bytes);
    // SAFETY: forwarded contract; the books are in shared memory at `base`.
    unsafe {
        crate::detail::decode::run::<_, _, true, 1, ANY_CLASS>(&Hw, &SharedBook(base), p, true, at)
    }
}

/// Decompression of a clustered dataset in streaming mode (large tensors,
/// or books too large for shared memory): the books are read from global
/// memory through L1.
///
/// # Safety
/// As `crate::detail::decode::run` with `CL`; the launch provides one workspace per
/// warp of dynamic shared memory and no book.
#[kernel]
pub unsafe fn ibp_decode_clustered_stream(p: DecodeParams) {
    let mut p = global_decode(p);
    p.clusters = arch::to_global(p.clusters);
    let at = launch(&p, arch::dyn_smem_base());
    // SAFETY: forwarded contract; the books are read from global memory.
    unsafe {
        crate::detail::decode::run::<_, _, true, 1, ANY_CLASS>(
            &Hw,
            &GlobalBook(p.book),
            p,
            false,
            at,
        )
    }
}

/// The GPU feature cache's gather (`crate::detail::cache::gather`): one warp per
/// requested row, the decode book in shared memory once per block when the
/// host gave it room (`book_smem_bytes`), read from global memory
/// otherwise.
///
/// # Safety
/// As `crate::detail::cache::gather`; the launch provides `book_smem_bytes` plus
/// `ws_bytes` per warp of dynamic shared memory.
#[kernel]
pub unsafe fn ibp_cache_gather(p: CacheParams) {
    // SAFETY: forwarded contract.
    unsafe { cache_gather::<false>(p) }
}

/// [`ibp_cache_gather`] for a book whose every step is uniform (see
/// [`ibp_decode_uniform`]).
///
/// # Safety
/// As [`ibp_cache_gather`], and every step of the book is uniform.
#[kernel]
pub unsafe fn ibp_cache_gather_uniform(p: CacheParams) {
    // SAFETY: forwarded contract.
    unsafe { cache_gather::<true>(p) }
}

/// The body of the feature cache's gather kernels.
///
/// # Safety
/// As [`ibp_cache_gather`].
#[inline(always)]
unsafe fn cache_gather<const UNI: bool>(p: CacheParams) {
    let g = |a: u64| if a == 0 { 0 } else { arch::to_global(a) };
    let mut p = p;
    p.view.src = arch::to_global(p.view.src);
    p.view.offsets = g(p.view.offsets);
    p.view.lengths = g(p.view.lengths);
    p.view.flags = arch::to_global(p.view.flags);
    p.view.book = arch::to_global(p.view.book);
    p.view.entries = arch::to_global(p.view.entries);
    p.index = arch::to_global(p.index);
    p.ids = arch::to_global(p.ids);
    p.out = arch::to_global(p.out);
    p.status = arch::to_global(p.status);
    let mut s = 0;
    while s < p.slabs.len() {
        p.slabs[s] = g(p.slabs[s]);
        s += 1;
    }
    let base = arch::dyn_smem_base();
    let (warp, warps) = arch::global_warp();
    let ws = base + p.book_smem_bytes + arch::warp_in_block() * p.ws_bytes;
    with_book!(p.view.book, p.book_smem_bytes, base, |book| {
        // SAFETY: forwarded contract; `book` is the dataset's decode book.
        unsafe { crate::detail::cache::gather::<_, _, UNI>(&Hw, book, &p, ws, warp, warps) }
    })
}

/// Copy a decode book of `bytes` bytes (a multiple of 4) at global address
/// `book` to shared address `base`, by the whole block, then wait for it.
///
/// # Safety
/// Every thread of the block calls it; `book .. book + bytes` is readable
/// global memory and `base .. base + bytes` this block's shared memory.
#[inline(always)]
unsafe fn book_to_shared(book: u64, bytes: u32, base: u32) {
    let words = bytes / 4;
    let mut i = arch::thread_idx();
    while i < words {
        // SAFETY: i·4 < bytes (the caller's contract).
        unsafe { arch::st_shared_u32(base + i * 4, arch::ld_global_u32(book + i as u64 * 4)) };
        i += arch::block_dim();
    }
    arch::sync_threads();
}

/// This warp's place in the grid and its workspace after `first` (the
/// block's workspaces follow each other).
#[inline(always)]
fn launch(p: &DecodeParams, first: u32) -> crate::detail::decode::Launch {
    let (warp, warps) = arch::global_warp();
    let ws = workspace_bytes(p.pbuf_words, p.ring_lines);
    crate::detail::decode::Launch {
        warp,
        warps,
        workspace: first + arch::warp_in_block() * ws,
    }
}

/// Global addresses of a [`DecodeParams`] (the host passes generic ones).
#[inline(always)]
fn global_decode(p: DecodeParams) -> DecodeParams {
    let g = |a: u64| if a == 0 { 0 } else { arch::to_global(a) };
    DecodeParams {
        src: arch::to_global(p.src),
        offsets: g(p.offsets),
        flags: arch::to_global(p.flags),
        table: arch::to_global(p.table),
        index: g(p.index),
        out: arch::to_global(p.out),
        status: arch::to_global(p.status),
        lengths: g(p.lengths),
        book: arch::to_global(p.book),
        ..p
    }
}
