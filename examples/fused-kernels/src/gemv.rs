//! `y = W·x`, `W` in bf16 rows of `cols` elements, `x` and `y` in f32, one
//! warp per row (grid-stride over the rows).
//!
//! Lane `l` owns the elements `8·l + 256·k .. + 8` of each row (step `k`,
//! 16 bytes), holds the matching `x` in registers for the whole launch,
//! and accumulates `w·x` in f32 in element order; the warp's partial sums
//! are then added by a butterfly (partners 16, 8, 4, 2, 1). The fused
//! kernel takes the row from the decoder in registers ([`GemvSink`]); the
//! baselines read plain bf16 rows into the same sink.

use ibp_kernels::arch;
use ibp_kernels::device::{RowError, decode_fetched, decode_row, fetch_row};
use ibp_kernels::hw::{Hw, SharedBook};
use ibp_kernels::prelude::*;
use ibp_kernels::step::Sink;

use crate::GemvParams;
use crate::util::{book_to_shared, code, global, warp_sum_f32};

/// A row's dot product with `x`, `S` steps of 8 bf16 a lane.
pub struct GemvSink<const S: usize> {
    x: [[f32; 8]; S],
    acc: f32,
}

impl<const S: usize> GemvSink<S> {
    /// The lane's elements of `x` (global f32, `cols` of them; 0 past the
    /// end).
    ///
    /// # Safety
    /// `x` is readable for `cols` f32.
    #[inline(always)]
    pub unsafe fn new(x: u64, cols: u32) -> Self {
        let lane = warp::lane_id();
        let mut xs = [[0f32; 8]; S];
        let mut k = 0;
        while k < S {
            let mut j = 0;
            while j < 8 {
                let e = 8 * lane + 256 * k as u32 + j;
                if e < cols {
                    // SAFETY: e < cols.
                    xs[k][j as usize] =
                        f32::from_bits(unsafe { arch::ld_global_u32(x + 4 * e as u64) });
                }
                j += 1;
            }
            k += 1;
        }
        GemvSink { x: xs, acc: 0.0 }
    }

    /// Add the products of the 16 bytes `w` of step `ob / 512`.
    #[inline(always)]
    fn add(&mut self, ob: u32, w: [u32; 4], n: u32) {
        let s = ob / 512;
        let mut k = 0;
        while k < S {
            if k as u32 == s {
                let mut j = 0;
                while j < 8 {
                    if 2 * j < n {
                        let h = w[j as usize / 2] >> (16 * (j % 2)) & 0xffff;
                        self.acc += f32::from_bits(h << 16) * self.x[k][j as usize];
                    }
                    j += 1;
                }
            }
            k += 1;
        }
    }

    /// Take the lane's sum and start the next row.
    #[inline(always)]
    fn take(&mut self) -> f32 {
        core::mem::replace(&mut self.acc, 0.0)
    }
}

impl<const S: usize> Sink for GemvSink<S> {
    #[inline(always)]
    fn put(&mut self, ob: u32, w: [u32; 4], n: u32) {
        self.add(ob, w, n);
    }
}

/// The global form of the parameters.
#[inline(always)]
fn globals(p: GemvParams) -> GemvParams {
    GemvParams {
        view: p.view.to_global(),
        plain: global(p.plain),
        x: global(p.x),
        y: global(p.y),
        status: global(p.status),
        ..p
    }
}

/// Fused GEMV, rows of at most 256 elements × 2 steps (512 bf16): each row
/// decoded in registers, the book in shared memory once per block, the
/// warp's next row loaded into registers while it decodes this one
/// ([`fetch_row`]).
///
/// # Safety
/// See [`GemvParams`]; the launch gives `book_smem` (rounded up to 16) `+
/// ws_bytes × warps` of dynamic shared memory.
#[kernel]
pub unsafe fn gemv_fused_s2(p: GemvParams) {
    // SAFETY: forwarded.
    unsafe { fused::<true>(p) }
}

/// [`gemv_fused_s2`] with one row at a time ([`decode_row`]: load, wait,
/// decode), for comparison.
///
/// # Safety
/// As [`gemv_fused_s2`].
#[kernel]
pub unsafe fn gemv_fused_one_s2(p: GemvParams) {
    // SAFETY: forwarded.
    unsafe { fused::<false>(p) }
}

/// The fused GEMV's body, with or without the next row fetched ahead.
///
/// # Safety
/// As [`gemv_fused_s2`].
#[inline(always)]
unsafe fn fused<const AHEAD: bool>(p: GemvParams) {
    let p = globals(p);
    // SAFETY: the launch's shared memory holds the book first.
    let ws0 = unsafe { book_to_shared(p.view.book, p.book_smem) };
    let book = SharedBook(arch::dyn_smem_base());
    let ws = ws0 + warp::warp_id() * p.ws_bytes;
    // SAFETY: x holds cols f32.
    let mut sink = unsafe { GemvSink::<2>::new(p.x, p.cols) };
    let (first, warps) = warp::global_warp();
    let mut status = crate::OK;
    let mut r = first;
    // Rows of up to 1024 stored bytes are held whole: two pieces a lane.
    // SAFETY: (fetch_row) a dataset's view.
    let mut cur = if AHEAD && r < p.view.rows {
        unsafe { fetch_row::<_, 2>(&Hw, &p.view, r) }
    } else {
        Err(RowError::BadIndex)
    };
    while r < p.view.rows {
        // SAFETY: a dataset's view, its book in shared memory, this warp's
        // workspace.
        let res = unsafe {
            if AHEAD {
                let next = if r + warps < p.view.rows {
                    fetch_row::<_, 2>(&Hw, &p.view, r + warps)
                } else {
                    Err(RowError::BadIndex)
                };
                let res = cur.and_then(|f| decode_fetched(&Hw, &p.view, &book, ws, &f, &mut sink));
                cur = next;
                res
            } else {
                decode_row(&Hw, &p.view, &book, ws, r, &mut sink)
            }
        };
        status |= code(res);
        let y = warp_sum_f32(sink.take());
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

/// GEMV over plain bf16 rows (in device memory after a decode, or in pinned
/// host memory), 16-byte loads: row bytes a multiple of 16, at most 1024.
///
/// # Safety
/// `p.plain` holds `view.rows` rows of `view.row_bytes` bytes, 16-aligned.
#[kernel]
pub unsafe fn gemv_plain_s2(p: GemvParams) {
    let p = globals(p);
    // SAFETY: x holds cols f32.
    let mut sink = unsafe { GemvSink::<2>::new(p.x, p.cols) };
    let l = p.view.row_bytes as u32;
    let lane = warp::lane_id();
    let (first, warps) = warp::global_warp();
    let mut r = first;
    while r < p.view.rows {
        let row = p.plain + r * l as u64;
        let (o0, o1) = (16 * lane, 16 * lane + 512);
        // Both loads first (two in flight a lane), then the products.
        let w0 = if o0 < l {
            // SAFETY: inside row r (o0 < l).
            unsafe { arch::ld_global_v4(row + o0 as u64) }
        } else {
            [0; 4]
        };
        let w1 = if o1 < l {
            // SAFETY: inside row r (o1 < l).
            unsafe { arch::ld_global_v4(row + o1 as u64) }
        } else {
            [0; 4]
        };
        sink.add(o0, w0, l.saturating_sub(o0).min(16));
        sink.add(o1, w1, l.saturating_sub(o1).min(16));
        let y = warp_sum_f32(sink.take());
        if lane == 0 {
            // SAFETY: r < rows.
            unsafe { arch::st_global_u32(p.y + 4 * r, y.to_bits()) };
        }
        r += warps;
    }
}
