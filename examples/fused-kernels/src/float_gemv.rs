//! `y = W·x` with `W`'s rows float-coded (`ibp::float_code`, bf16, `S`
//! sub-streams a row), `x` and `y` in f32: one warp per row (grid-stride),
//! each row decoded into registers by
//! `ibp_kernels::device::float::decode_float_row`.
//!
//! Lane `k < S` is handed elements `k, k + S, …` of the row, in that
//! order, and adds `w·x` to its f32 sum in that order; the 32 lanes' sums
//! (lanes `S..32` hold 0) are then added by a butterfly (partners 16, 8, 4,
//! 2, 1). So the order of every addition is defined, and a CPU computing
//! the same order gets the same bits (`examples/float_gemv.rs` and
//! `tests/gpu_device_api.rs` check them): with `x` of 8-bit significands
//! (bf16 values), each product of two bf16 is exact in f32, so it does not
//! matter whether the compiler fuses the multiply and the add.
//!
//! The decode table and `x` are copied into shared memory once per block;
//! each warp's workspace follows them.

use ibp_kernels::arch;
use ibp_kernels::device::float::{FloatSink, decode_float_row};
use ibp_kernels::hw::{Hw, SharedBook};
use ibp_kernels::prelude::*;

use crate::FloatGemvParams;
use crate::util::{book_to_shared, code, global, warp_sum_f32};

/// A row's dot product with `x` (f32 in shared memory): one lane's share.
struct Dot {
    /// Shared address of `x`.
    x: u32,
    acc: f32,
}

impl FloatSink for Dot {
    #[inline(always)]
    fn put(&mut self, i: u32, v: u32) {
        // SAFETY: i < cols (the decoder hands only the row's elements), and
        // x holds cols f32 in shared memory.
        let x = f32::from_bits(unsafe { arch::ld_shared_u32(self.x + 4 * i) });
        self.acc += f32::from_bits(v << 16) * x;
    }
}

/// The fused API's decode stored: element `i` of row `r` at
/// `out + r·row_bytes + 2i` (bf16 or f16 rows).
struct Store(u64);

impl FloatSink for Store {
    #[inline(always)]
    fn put(&mut self, i: u32, v: u32) {
        // SAFETY: i < n: inside the output row (the kernel's contract).
        unsafe { arch::st_global_u16(self.0 + 2 * i as u64, v) };
    }
}

/// The global form of the parameters.
#[inline(always)]
fn globals(p: FloatGemvParams) -> FloatGemvParams {
    FloatGemvParams {
        view: p.view.to_global(),
        x: global(p.x),
        y: global(p.y),
        status: global(p.status),
        out: global(p.out),
        ..p
    }
}

/// The table, then `x` (for the GEMV), into shared memory, once per block;
/// returns the shared address of `x` and this warp's workspace.
///
/// # Safety
/// As [`float_gemv_bf16`].
#[inline(always)]
unsafe fn setup(p: &FloatGemvParams, with_x: bool) -> (u32, u32) {
    // SAFETY: the table holds table_bytes bytes (a multiple of 4); the
    // launch's shared memory holds it first.
    let xs = unsafe { book_to_shared(p.view.table, p.view.table_bytes) };
    let cols = if with_x { p.cols } else { 0 };
    let mut i = thread::thread_idx_x();
    while i < cols {
        // SAFETY: i < cols: inside x and the shared memory after the table.
        unsafe { arch::st_shared_u32(xs + 4 * i, arch::ld_global_u32(p.x + 4 * i as u64)) };
        i += thread::block_dim_x();
    }
    thread::sync_threads();
    let ws = xs + (4 * cols).next_multiple_of(16) + warp::warp_id() * p.ws_bytes;
    (xs, ws)
}

/// Fused GEMV over float-coded bf16 rows: each row decoded in registers
/// (a warp a row), `y[r] = Σ W[r, i]·x[i]` in the order the module doc
/// gives. Damaged rows and the like are or-ed into `status`
/// ([`crate::CORRUPT`]).
///
/// # Safety
/// See [`FloatGemvParams`]; the launch gives `table_bytes` (rounded up to
/// 16) `+ 4·cols` (rounded up to 16) `+ ws_bytes × warps` of dynamic
/// shared memory.
#[kernel]
pub unsafe fn float_gemv_bf16(p: FloatGemvParams) {
    let p = globals(p);
    // SAFETY: the caller's.
    let (xs, ws) = unsafe { setup(&p, true) };
    let table = SharedBook(arch::dyn_smem_base());
    let (first, warps) = warp::global_warp();
    let mut status = crate::OK;
    let mut r = first;
    while r < p.view.rows {
        let mut dot = Dot { x: xs, acc: 0.0 };
        // SAFETY: a group's view, its table in shared memory, this warp's
        // workspace (the caller's).
        let res = unsafe { decode_float_row(&Hw, &p.view, &table, ws, r, &mut dot) };
        status |= code(res);
        let y = warp_sum_f32(dot.acc);
        if warp::lane_id() == 0 {
            // SAFETY: r < rows, one f32 of y each.
            unsafe { arch::st_global_u32(p.y + 4 * r, y.to_bits()) };
        }
        r += warps;
    }
    if status != crate::OK && warp::lane_id() == 0 {
        // SAFETY: one u32.
        unsafe { arch::red_or_u32(p.status, status) };
    }
}

/// The fused API's decode of every row of a group of 2-byte elements,
/// stored at `out` (row `r` at `out + r·row_bytes`): the rows the GEMV
/// multiplies, for a check against the original bytes.
///
/// # Safety
/// As [`float_gemv_bf16`] (without `x`: `4·cols` of shared memory not
/// needed), and `out` holds `rows × row_bytes` writable bytes.
#[kernel]
pub unsafe fn float_rows_u16(p: FloatGemvParams) {
    let p = globals(p);
    // SAFETY: the caller's.
    let (_, ws) = unsafe { setup(&p, false) };
    let table = SharedBook(arch::dyn_smem_base());
    let (first, warps) = warp::global_warp();
    let mut status = crate::OK;
    let mut r = first;
    while r < p.view.rows {
        let mut st = Store(p.out + r * p.view.row_bytes as u64);
        // SAFETY: as in float_gemv_bf16; the output row is row r's.
        let res = unsafe { decode_float_row(&Hw, &p.view, &table, ws, r, &mut st) };
        status |= code(res);
        r += warps;
    }
    if status != crate::OK && warp::lane_id() == 0 {
        // SAFETY: one u32.
        unsafe { arch::red_or_u32(p.status, status) };
    }
}
