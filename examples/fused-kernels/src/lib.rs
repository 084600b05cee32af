//! The kernels of ibp's fused examples (`examples/embedding_bag.rs`,
//! `examples/gemv_stream.rs`): a user kernel crate on ibp's device API
//! (`ibp_kernels::device`) and device prelude (`ibp_kernels::prelude`).
//!
//! - [`bag`]: embedding bags (DLRM): one warp per bag decodes each of its
//!   rows and adds it to the bag's sum in registers; the same sum over
//!   plain rows (the baselines); the read of the bag's compressed bytes
//!   alone (the ideal).
//! - [`gemv`]: `y = W·x` with `W` in bf16 rows and f32 accumulation, one
//!   warp per row: decoded in registers (fused), or plain rows (baselines).
//! - [`float_gemv`]: the same GEMV with `W`'s rows float-coded
//!   (`ibp::float_code`), each decoded in registers by the float-coded
//!   rows' device API (`ibp_kernels::device::float`).
//! - [`read`]: a sequential read of bytes (the zero-copy read rate).
//!
//! The parameter blocks are `#[repr(C)]` structs defined here once; the
//! host side of the examples uses this crate as an ordinary library for
//! them.
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

use ibp_kernels::device::DatasetView;
use ibp_kernels::device::float::FloatView;

/// Status of a bag (or, or-ed together, of a GEMV): every row decoded.
pub const OK: u32 = 0;
/// A row id was not below the dataset's rows (that row was skipped).
pub const BAD_INDEX: u32 = 1;
/// A stored row was corrupt (the result is not to be used).
pub const CORRUPT: u32 = 2;

/// Rows a [`bag`] kernel reads: compressed (`view`, fused and ideal) or
/// plain (`plain`, the baselines). Global addresses; 0 for "none".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BagParams {
    /// The compressed dataset (rows and row bytes also bound the plain
    /// kernels' ids).
    pub view: DatasetView,
    /// Plain rows: row `t` at `plain + t * view.row_bytes`.
    pub plain: u64,
    /// u32 row ids, bag after bag; 0: the ids are the positions
    /// (`bag_starts[b] ..`), as after a gather.
    pub ids: u64,
    /// u32, `bags + 1`: bag `b` is ids `bag_starts[b] .. bag_starts[b + 1]`.
    pub bag_starts: u64,
    /// f32, `bags × dim`: the sums (the ideal kernel: one u32 per bag).
    pub out: u64,
    /// u32 per bag: [`OK`], [`BAD_INDEX`] or [`CORRUPT`] (the last one
    /// seen).
    pub status: u64,
    /// Bags.
    pub bags: u32,
    /// Elements per row.
    pub dim: u32,
    /// Bytes of the decode book copied to shared memory (all of it).
    pub book_smem: u32,
    /// Bytes of shared memory per warp (`view.workspace_bytes()`).
    pub ws_bytes: u32,
}

/// `y = W·x` over the rows of `W` (bf16, `cols` a row).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GemvParams {
    /// `W` compressed (fused); its rows and row bytes bound every kernel.
    pub view: DatasetView,
    /// `W` plain (baselines): row `r` at `plain + r * view.row_bytes`.
    pub plain: u64,
    /// f32, `cols`.
    pub x: u64,
    /// f32, one per row.
    pub y: u64,
    /// One u32: [`BAD_INDEX`] / [`CORRUPT`] bits or-ed in.
    pub status: u64,
    /// Elements per row.
    pub cols: u32,
    /// Bytes of the decode book copied to shared memory.
    pub book_smem: u32,
    /// Bytes of shared memory per warp.
    pub ws_bytes: u32,
    /// Padding (keeps the layout free of implicit holes).
    pub _pad: u32,
}

/// `y = W·x` over the rows of a float-coded group `W` (bf16, `cols` a
/// row): [`float_gemv::float_gemv_bf16`]; [`float_gemv::float_rows_u16`]
/// stores the rows instead.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FloatGemvParams {
    /// `W`, float-coded (`ibp::gpu::FloatDecoder::device_view` or
    /// `device_view_staged`).
    pub view: FloatView,
    /// f32, `cols`, each a bf16 value (8-bit significand: the products are
    /// exact).
    pub x: u64,
    /// f32, one per row.
    pub y: u64,
    /// One u32: [`BAD_INDEX`] / [`CORRUPT`] bits or-ed in.
    pub status: u64,
    /// `float_rows_u16`: `rows × row_bytes` bytes, the decoded rows.
    pub out: u64,
    /// Elements per row.
    pub cols: u32,
    /// Bytes of shared memory per warp (`view.workspace_bytes()`).
    pub ws_bytes: u32,
}

/// A sequential read of `bytes` bytes at `src` (16-aligned; the tail past
/// the last whole 16 bytes is not read); the xor of what was read lands in
/// `out` (one u32), so that nothing is optimised away.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadParams {
    /// Global address.
    pub src: u64,
    /// Bytes.
    pub bytes: u64,
    /// One u32.
    pub out: u64,
}

#[cfg(target_arch = "nvptx64")]
pub mod bag;
#[cfg(target_arch = "nvptx64")]
pub mod float_gemv;
#[cfg(target_arch = "nvptx64")]
pub mod gemv;
#[cfg(target_arch = "nvptx64")]
pub mod read;
#[cfg(target_arch = "nvptx64")]
mod util;
