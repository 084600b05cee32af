//! Kernel entry points. Each one derives its indices, checks bounds and calls
//! shared code; the host launches them from `host/gpu/launch.rs`. They are
//! declared with the prelude's `#[kernel]`, as a user kernel is.

use crate::arch;
use crate::detail::scan::{block_exclusive_scan, global_scan, thread_sizes};
use crate::hw::Hw;
use crate::params::{
    CandidatesParams, ClearParams, CompactParams, CopyRunsParams, CountParams, CpAsyncTestParams,
    EncodeParams, KvAppendParams, MeasureParams, SCAN_PER_THREAD, SCAN_TILE, ScanParams,
    WarpTestParams,
};
use crate::prelude::kernel;
use crate::simt;

mod decode;
mod float;

/// One `#[kernel]` entry point per chunk size, each calling the body
/// given with its chunk size (`name => body::<C, ..>`): a kernel per chunk
/// size, so that each gets only the registers its own path needs. The doc
/// line given is completed with the chunk size.
macro_rules! per_chunk {
    (
        #[doc = $what:literal]
        $p:ty, $safety:literal;
        $($name:ident => $body:ident::<$c:literal $(, $arg:literal)*>),+ $(,)?
    ) => {
        $(
            #[doc = concat!($what, ", ", stringify!($c), "-byte chunks.")]
            ///
            /// # Safety
            #[doc = $safety]
            #[kernel]
            pub unsafe fn $name(p: $p) {
                // SAFETY: forwarded contract.
                unsafe { $body::<$c $(, $arg)*>(p) }
            }
        )+
    };
}

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
#[kernel]
pub unsafe fn ibp_count_bits(p: CountParams) {
    let p = CountParams {
        data: arch::to_global(p.data),
        counts: arch::to_global(p.counts),
        ..p
    };
    // SAFETY: forwarded contract; `global_thread() < grid_threads()`.
    unsafe {
        crate::detail::count::count_rows(&Hw, &p, arch::global_thread(), arch::grid_threads())
    }
}

/// Division that is 0 for a zero divisor, so no panic path reaches the PTX.
#[inline(always)]
fn div(a: u64, b: u64) -> u64 {
    if b == 0 { 0 } else { a / b }
}

/// Device test of the warp helpers (see [`WarpTestParams`]).
///
/// # Safety
/// `input` holds `lanes` u32 and `out` has room for `8 * lanes` u32.
#[kernel]
pub unsafe fn ibp_test_warp(p: WarpTestParams) {
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
    let (exclusive, _) = simt::exclusive_scan(&Hw, x);
    let vals = [
        l,
        warp as u32,
        arch::shfl_up(x, 1),
        arch::shfl_down(x, 2),
        arch::shfl_idx(x, 31 - l),
        simt::inclusive_scan(&Hw, x),
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
#[kernel]
pub unsafe fn ibp_test_cp_async(p: CpAsyncTestParams) {
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

/// Global addresses of a [`MeasureParams`].
#[inline(always)]
fn global_measure(p: MeasureParams) -> MeasureParams {
    MeasureParams {
        src: arch::to_global(p.src),
        book: arch::to_global(p.book),
        totals: arch::to_global(p.totals),
        sizes: arch::to_global(p.sizes),
        stage: if p.stage == 0 {
            0
        } else {
            arch::to_global(p.stage)
        },
        ..p
    }
}

/// The fit's evaluation pass (`crate::detail::encode::eval`).
///
/// # Safety
/// As [`MeasureParams`] states.
#[kernel]
pub unsafe fn ibp_fit_eval(p: MeasureParams) {
    let (wid, nwarps) = arch::global_warp();
    // SAFETY: forwarded contract.
    unsafe { crate::detail::encode::eval(&Hw, &Hw, &global_measure(p), wid, nwarps) }
}

/// The fit's candidate codebooks from the bit counts
/// (`crate::detail::candidates`).
///
/// # Safety
/// As [`CandidatesParams`] states.
#[kernel]
pub unsafe fn ibp_fit_candidates(p: CandidatesParams) {
    let (wid, nwarps) = arch::global_warp();
    let p = CandidatesParams {
        counts: arch::to_global(p.counts),
        book: arch::to_global(p.book),
        ..p
    };
    // SAFETY: forwarded contract.
    unsafe { crate::detail::candidates::candidates(&Hw, &Hw, &p, wid, nwarps) }
}

/// The size query (`crate::detail::encode::size`).
///
/// # Safety
/// As [`MeasureParams`] states.
#[kernel]
pub unsafe fn ibp_size(p: MeasureParams) {
    let (wid, nwarps) = arch::global_warp();
    let p = global_measure(p);
    // SAFETY: forwarded contract.
    unsafe {
        match p.chunk {
            1 => crate::detail::encode::size::<Hw, Hw, 1>(&Hw, &Hw, &p, wid, nwarps),
            2 => crate::detail::encode::size::<Hw, Hw, 2>(&Hw, &Hw, &p, wid, nwarps),
            4 => crate::detail::encode::size::<Hw, Hw, 4>(&Hw, &Hw, &p, wid, nwarps),
            _ => crate::detail::encode::size::<Hw, Hw, 8>(&Hw, &Hw, &p, wid, nwarps),
        }
    }
}

/// The KV store's append of one piece with chunks of `C` bytes: the body
/// behind the four `ibp_kv_append_c*` entry points (one per chunk size, as
/// for the encoder).
#[inline(always)]
unsafe fn kv_append_entry<const C: u32>(p: KvAppendParams) {
    let p = KvAppendParams {
        src: arch::to_global(p.src),
        book: arch::to_global(p.book),
        lengths: arch::to_global(p.lengths),
        flags: arch::to_global(p.flags),
        out: arch::to_global(p.out),
        pages: if p.pages == 0 {
            0
        } else {
            arch::to_global(p.pages)
        },
        ..p
    };
    // The launch's shape follows the same test (the host calls
    // `kv::block_shape` too): a block per `R` rows, or a warp per row.
    if p.zero_tail != 0 && crate::detail::kv::block_shape(p.row_bytes).is_some() {
        let totals =
            crate::shared_array!(KV_TOTALS: [u32; crate::detail::kv::BLOCK_WARPS as usize]);
        let warp = arch::thread_idx() / 32;
        // SAFETY: forwarded contract; `totals` holds BLOCK_WARPS u32, and
        // every thread of the block gets here.
        unsafe {
            crate::detail::kv::append_block::<Hw, Hw, Hw, C>(
                &Hw,
                &Hw,
                &Hw,
                &p,
                arch::block_idx() as u64,
                warp,
                totals.addr(),
            )
        }
    } else {
        let (wid, nwarps) = arch::global_warp();
        // SAFETY: forwarded contract.
        unsafe { crate::detail::kv::append::<Hw, Hw, C>(&Hw, &Hw, &p, wid, nwarps) }
    }
}

per_chunk! {
    /// The KV store's append
    KvAppendParams, "As [`KvAppendParams`] states.";
    ibp_kv_append_c1 => kv_append_entry::<1>,
    ibp_kv_append_c2 => kv_append_entry::<2>,
    ibp_kv_append_c4 => kv_append_entry::<4>,
    ibp_kv_append_c8 => kv_append_entry::<8>,
}

/// Copy sampled tensors (`crate::detail::encode::gather`).
///
/// # Safety
/// As [`MeasureParams`] states.
#[kernel]
pub unsafe fn ibp_gather(p: MeasureParams) {
    let (wid, nwarps) = arch::global_warp();
    // SAFETY: forwarded contract.
    unsafe { crate::detail::encode::gather(&Hw, &Hw, &global_measure(p), wid, nwarps) }
}

/// Compression with chunks of `C` bytes: the body behind the four
/// `ibp_encode_c*` entry points.
///
/// Q: why four entry points?
/// A: registers are allocated per kernel for its most demanding path; one
/// kernel per chunk size lets 1-byte chunks (eight table entries per lane)
/// and 8-byte chunks (64-bit arithmetic) each get only what they need.
#[inline(always)]
unsafe fn encode_entry<const C: u32, const SLOTS: bool>(p: EncodeParams) {
    let (wid, nwarps) = arch::global_warp();
    let p = EncodeParams {
        src: arch::to_global(p.src),
        book: arch::to_global(p.book),
        sizes: arch::to_global(p.sizes),
        offsets: if p.offsets == 0 {
            0
        } else {
            arch::to_global(p.offsets)
        },
        out: arch::to_global(p.out),
        ..p
    };
    let rings = crate::shared_array!(
        ENCODE_RINGS: [u32; (crate::detail::pack::RING_WARPS * crate::detail::pack::RING_WORDS) as usize]
    );
    let ring = rings.addr() + (arch::thread_idx() / 32) * crate::detail::pack::RING_BYTES;
    // SAFETY: forwarded contract; the launch has RING_WARPS warps a block,
    // so each warp's ring lies inside the array.
    unsafe {
        crate::detail::encode::encode::<Hw, Hw, Hw, C, SLOTS>(&Hw, &Hw, &Hw, &p, ring, wid, nwarps)
    }
}

per_chunk! {
    /// Compression
    EncodeParams, "As [`EncodeParams`] states.";
    ibp_encode_c1 => encode_entry::<1, false>,
    ibp_encode_c2 => encode_entry::<2, false>,
    ibp_encode_c4 => encode_entry::<4, false>,
    ibp_encode_c8 => encode_entry::<8, false>,
}

per_chunk! {
    /// Compression into unmeasured fixed-stride slots
    EncodeParams, "As [`EncodeParams`] states for `ibp_encode_slots_c*`.";
    ibp_encode_slots_c1 => encode_entry::<1, true>,
    ibp_encode_slots_c2 => encode_entry::<2, true>,
    ibp_encode_slots_c4 => encode_entry::<4, true>,
    ibp_encode_slots_c8 => encode_entry::<8, true>,
}

/// Before a packed encode: zero the output's groups two writes share.
///
/// # Safety
/// As [`ClearParams`] states.
#[kernel]
pub unsafe fn ibp_encode_clear(p: ClearParams) {
    let p = ClearParams {
        sizes: arch::to_global(p.sizes),
        offsets: arch::to_global(p.offsets),
        out: arch::to_global(p.out),
        ..p
    };
    let mut t = arch::global_thread();
    let threads = arch::grid_threads();
    while t <= p.rows {
        // SAFETY: forwarded contract; t ≤ rows.
        unsafe { crate::detail::encode::clear_shared_groups(&Hw, &p, t) };
        t += threads;
    }
}

/// After `ibp_encode_slots_c*` into scratch slots and the scan: the
/// packed layout, one warp a tensor.
///
/// # Safety
/// As [`CompactParams`] states.
#[kernel]
pub unsafe fn ibp_compact(p: CompactParams) {
    let (wid, nwarps) = arch::global_warp();
    let p = CompactParams {
        src: arch::to_global(p.src),
        offsets: arch::to_global(p.offsets),
        out: arch::to_global(p.out),
        ..p
    };
    // SAFETY: forwarded contract.
    unsafe { crate::detail::compact::compact(&Hw, &Hw, &p, wid, nwarps) }
}

/// Byte ranges from one buffer to another, one warp a range.
///
/// # Safety
/// As [`CopyRunsParams`] states.
#[kernel]
pub unsafe fn ibp_copy_runs(p: CopyRunsParams) {
    let (wid, nwarps) = arch::global_warp();
    let p = CopyRunsParams {
        ranges: arch::to_global(p.ranges),
        src: arch::to_global(p.src),
        dst: arch::to_global(p.dst),
        ..p
    };
    // SAFETY: forwarded contract.
    unsafe { crate::detail::copy_runs::copy_runs(&Hw, &Hw, &p, wid, nwarps) }
}

/// Scan, phase 1: each block sums its tile into `partials[tile]` and writes
/// the tile's flag bytes.
///
/// # Safety
/// As [`ScanParams`] states; one block per tile, `SCAN_BLOCK` threads.
#[kernel]
pub unsafe fn ibp_scan_tiles(p: ScanParams) {
    let p = global_scan(p);
    let tile = arch::block_idx() as u64;
    let first = tile * SCAN_TILE + arch::thread_idx() as u64 * SCAN_PER_THREAD;
    // SAFETY: bounds checked inside.
    let (_, sum, flags) = unsafe { thread_sizes(&p, first) };
    if first < p.rows {
        // SAFETY: byte first / 8 < ⌈rows / 8⌉.
        unsafe { arch::st_global_u8(p.flags + first / SCAN_PER_THREAD, flags) }
    }
    // Block sum: warp sums, then warp 0 adds them up.
    let ws = simt::warp_sum64(&Hw, sum);
    let smem = arch::dyn_smem_base();
    let warp = arch::warp_in_block();
    // SAFETY (shared): indices below 32.
    unsafe {
        if arch::lane() == 0 {
            arch::st_shared_u64(smem + 8 * warp, ws);
        }
        arch::sync_threads();
        if arch::thread_idx() == 0 {
            let mut t = 0u64;
            let mut w = 0;
            while w < arch::block_dim() / 32 {
                t += arch::ld_shared_u64(smem + 8 * w);
                w += 1;
            }
            arch::st_global_u64(p.partials + 8 * tile, t);
        }
    }
}

/// Scan, phase 2 (one block): the exclusive scan of the tile sums, in
/// place; the total to `offsets[rows]` (and `total`).
///
/// # Safety
/// As [`ScanParams`] states; one block.
#[kernel]
pub unsafe fn ibp_scan_partials(p: ScanParams) {
    let p = global_scan(p);
    let mut carry = 0u64;
    let mut base = 0u64;
    let t = arch::thread_idx() as u64;
    while base < p.tiles {
        let i = base + t;
        // SAFETY: i < tiles.
        let x = if i < p.tiles {
            unsafe { arch::ld_global_u64(p.partials + 8 * i) }
        } else {
            0
        };
        let (ex, total) = block_exclusive_scan(x);
        if i < p.tiles {
            // SAFETY: as above.
            unsafe { arch::st_global_u64(p.partials + 8 * i, carry + ex) }
        }
        carry += total;
        base += arch::block_dim() as u64;
    }
    if t == 0 {
        // SAFETY: offsets holds rows + 1 u64; total, when given, one.
        unsafe {
            arch::st_global_u64(p.offsets + 8 * p.rows, carry);
            if p.total != 0 {
                arch::st_global_u64(p.total, carry);
            }
        }
    }
}

/// Scan, phase 3: each block writes its tile's offsets.
///
/// # Safety
/// As [`ScanParams`] states; one block per tile, `SCAN_BLOCK` threads.
#[kernel]
pub unsafe fn ibp_scan_apply(p: ScanParams) {
    let p = global_scan(p);
    let tile = arch::block_idx() as u64;
    let first = tile * SCAN_TILE + arch::thread_idx() as u64 * SCAN_PER_THREAD;
    // SAFETY: bounds checked inside.
    let (pre, sum, _) = unsafe { thread_sizes(&p, first) };
    let (ex, _) = block_exclusive_scan(sum);
    // SAFETY: partials holds a value per tile.
    let base = unsafe { arch::ld_global_u64(p.partials + 8 * tile) } + ex;
    let mut j = 0;
    while j < SCAN_PER_THREAD {
        if first + j < p.rows {
            // SAFETY: first + j < rows.
            unsafe { arch::st_global_u64(p.offsets + 8 * (first + j), base + pre[j as usize]) }
        }
        j += 1;
    }
}

/// Probe kernels for `scripts/sass.sh` (feature `probe`, never in the
/// shipped PTX): the batch decoder's step loop with one path fixed at
/// compile time, so that its loop body in the SASS is that path's cost per
/// step. `ibp_probe_c{C}_{path}`: `none` (no free bits, every chunk
/// matches: the Cora case), `two` (two runs, every chunk matches), `twoscan`
/// (two runs with the scan: some chunk of the step does not match), `gen`
/// (move masks, scan); `nonescan` (no free bits, some chunk does not match);
/// `any` (class and shortcut decided at run time, as the kernels do: the
/// loop holds every path).
/// A `_half` suffix: the same path decoded by half-warps, two tensors a
/// warp (`decode_in` with `G = 16`), whose step covers 256 output bytes.
#[cfg(feature = "probe")]
mod probe {
    use super::kernel;
    use crate::detail::book::{
        CLASS_GENERAL, CLASS_NONE_FREE, CLASS_PERIODIC, CLASS_PERIODIC_HALVES, CLASS_TWO_RUNS,
        CLASS_UNIFORM, Layout,
    };
    use crate::detail::step::{ANY, Contig, Geometry, RowStore, decode_in};
    use crate::hw::{Hw, SharedBook};
    use crate::params::DecodeParams;

    macro_rules! probe {
        ($name:ident, $c:literal, $class:expr, $prefix:literal) => {
            probe!($name, $c, $class, $prefix, 32);
        };
        ($name:ident, $c:literal, $class:expr, $prefix:literal, $g:literal) => {
            /// Probe (see the module).
            ///
            /// # Safety
            /// Never launched; built for its SASS only.
            #[kernel]
            pub unsafe fn $name(p: DecodeParams) {
                let chunks = (p.row_bytes as u32).div_ceil($c);
                let g = Geometry {
                    chunks,
                    row_bytes: p.row_bytes as u32,
                    layout: Layout::new(chunks, $c),
                    entries: p.table,
                    flags: 0,
                };
                // SAFETY: never launched.
                let mut src = unsafe { Contig::new(&Hw, p.ring_lines) };
                // SAFETY: never launched (a 16-aligned row: the probes
                // count the steady state's 16-byte store).
                let mut sink = unsafe { RowStore::new(&Hw, p.out & !15) };
                // SAFETY: never launched.
                let ok = unsafe {
                    decode_in::<$c, $g, { $class }, $prefix, false, _, _, _, _, _>(
                        &Hw,
                        &mut src,
                        &SharedBook(0),
                        &Hw,
                        &g,
                        p.pbuf_words,
                        &mut sink,
                    )
                };
                if !ok {
                    // SAFETY: never launched.
                    unsafe { crate::arch::st_global_u32(p.status, 1) };
                }
            }
        };
    }
    probe!(ibp_probe_c8_none, 8, CLASS_NONE_FREE, 1);
    probe!(ibp_probe_c8_nonescan, 8, CLASS_NONE_FREE, 0);
    probe!(ibp_probe_c8_two, 8, CLASS_TWO_RUNS, 1);
    probe!(ibp_probe_c8_twoscan, 8, CLASS_TWO_RUNS, 0);
    probe!(ibp_probe_c8_gen, 8, CLASS_GENERAL, 0);
    probe!(ibp_probe_c4_none, 4, CLASS_NONE_FREE, 1);
    probe!(ibp_probe_c4_two, 4, CLASS_TWO_RUNS, 1);
    probe!(ibp_probe_c4_twoscan, 4, CLASS_TWO_RUNS, 0);
    probe!(ibp_probe_c4_gen, 4, CLASS_GENERAL, 0);
    probe!(ibp_probe_c2_two, 2, CLASS_TWO_RUNS, 1);
    probe!(ibp_probe_c2_twoscan, 2, CLASS_TWO_RUNS, 0);
    probe!(ibp_probe_c2_gen, 2, CLASS_GENERAL, 0);
    probe!(ibp_probe_c1_two, 1, CLASS_TWO_RUNS, 1);
    probe!(ibp_probe_c1_twoscan, 1, CLASS_TWO_RUNS, 0);
    probe!(ibp_probe_c1_gen, 1, CLASS_GENERAL, 0);
    probe!(ibp_probe_c8_any, 8, ANY, 255);
    probe!(ibp_probe_c4_any, 4, ANY, 255);
    probe!(ibp_probe_c2_any, 2, ANY, 255);
    probe!(ibp_probe_c1_any, 1, ANY, 255);
    /// The lane decoder (`crate::detail::decode::lanes`) with its class
    /// fixed: `ibp_probe_lanes_c{C}_{two,gen}`; its loop body is a lane
    /// step (512 output bytes a warp, as the batch step).
    macro_rules! lanes_probe {
        ($name:ident, $c:literal, $class:expr) => {
            /// Probe (see the module).
            ///
            /// # Safety
            /// Never launched; built for its SASS only.
            #[kernel]
            pub unsafe fn $name(p: DecodeParams) {
                // SAFETY: never launched.
                unsafe {
                    crate::detail::decode::lanes::probe::<$c, { $class }, _, _>(
                        &Hw,
                        &SharedBook(0),
                        p,
                    )
                }
            }
        };
    }
    lanes_probe!(ibp_probe_lanes_c8_two, 8, CLASS_TWO_RUNS);
    lanes_probe!(ibp_probe_lanes_c4_two, 4, CLASS_TWO_RUNS);
    lanes_probe!(ibp_probe_lanes_c2_two, 2, CLASS_TWO_RUNS);
    lanes_probe!(ibp_probe_lanes_c1_two, 1, CLASS_TWO_RUNS);
    lanes_probe!(ibp_probe_lanes_c4_none, 4, CLASS_NONE_FREE);
    probe!(ibp_probe_c8_none_half, 8, CLASS_NONE_FREE, 1, 16);
    probe!(ibp_probe_c8_two_half, 8, CLASS_TWO_RUNS, 1, 16);
    probe!(ibp_probe_c4_two_half, 4, CLASS_TWO_RUNS, 1, 16);
    probe!(ibp_probe_c4_twoscan_half, 4, CLASS_TWO_RUNS, 0, 16);
    probe!(ibp_probe_c2_two_half, 2, CLASS_TWO_RUNS, 1, 16);
    probe!(ibp_probe_c2_twoscan_half, 2, CLASS_TWO_RUNS, 0, 16);
    probe!(ibp_probe_c1_two_half, 1, CLASS_TWO_RUNS, 1, 16);
    probe!(ibp_probe_c4_uni, 4, CLASS_UNIFORM, 0);
    probe!(ibp_probe_c2_uni, 2, CLASS_UNIFORM, 0);
    probe!(ibp_probe_c1_uni, 1, CLASS_UNIFORM, 0);
    probe!(ibp_probe_c4_uni_half, 4, CLASS_UNIFORM, 0, 16);
    probe!(ibp_probe_c2_uni_half, 2, CLASS_UNIFORM, 0, 16);
    probe!(ibp_probe_c1_uni_half, 1, CLASS_UNIFORM, 0, 16);
    probe!(ibp_probe_c4_per, 4, CLASS_PERIODIC, 0);
    probe!(ibp_probe_c2_per, 2, CLASS_PERIODIC, 0);
    probe!(ibp_probe_c4_per_halves, 4, CLASS_PERIODIC_HALVES, 0);
    probe!(ibp_probe_c4_per_half, 4, CLASS_PERIODIC, 0, 16);
    probe!(ibp_probe_c2_per_half, 2, CLASS_PERIODIC, 0, 16);
    probe!(
        ibp_probe_c4_per_halves_half,
        4,
        CLASS_PERIODIC_HALVES,
        0,
        16
    );
    probe!(ibp_probe_c8_two_quarter, 8, CLASS_TWO_RUNS, 1, 8);
    probe!(ibp_probe_c4_two_quarter, 4, CLASS_TWO_RUNS, 1, 8);
    probe!(ibp_probe_c4_twoscan_quarter, 4, CLASS_TWO_RUNS, 0, 8);
    probe!(ibp_probe_c4_per_quarter, 4, CLASS_PERIODIC, 0, 8);
    probe!(ibp_probe_c2_per_quarter, 2, CLASS_PERIODIC, 0, 8);
    probe!(ibp_probe_c4_uni_quarter, 4, CLASS_UNIFORM, 0, 8);
    probe!(ibp_probe_c2_uni_quarter, 2, CLASS_UNIFORM, 0, 8);
    probe!(
        ibp_probe_c4_per_halves_quarter,
        4,
        CLASS_PERIODIC_HALVES,
        0,
        8
    );
}
