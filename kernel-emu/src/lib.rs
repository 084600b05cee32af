//! Run a GPU kernel body on the CPU, in a test, with no GPU.
//!
//! ibp's kernels, and kernels of yours that use ibp's device API, are
//! written over the traits of [`ibp_kernels::simt`]: [`Lanes`] (lane id,
//! shuffles, ballot), [`Mem`] (global memory), [`Shared`] (shared memory),
//! [`Async`] (`cp.async`) and [`Block`] (the block barrier). On the GPU,
//! `ibp_kernels::hw::Hw` implements them with one PTX instruction a
//! method. This crate implements them on the host: a [`Lane`] of an
//! emulated warp, whose 32 lanes run as coroutines on the calling thread
//! and meet at a barrier for every shuffle, with host memory as global
//! memory and a host buffer as the block's shared memory. The body that
//! runs is the very function the GPU runs, so a test can compare its
//! output with a CPU reference on a laptop or in CI; ibp's own kernels
//! are tested this way against its CPU codec.
//!
//! Add it where your kernel body compiles for the host (your kernel crate,
//! with `#![cfg_attr(not(test), no_std)]`, or the host crate that uses
//! it), from your ibp checkout as `ibp-kernels` is:
//!
//! ```toml
//! [dev-dependencies]
//! ibp-kernel-emu = { path = "../ibp/kernel-emu" }
//! ```
//!
//! ibp's feature `emu` (`ibp::emu::EmuDataset`) lays rows that ibp
//! compressed out in host memory for a body that decodes them with the
//! device API.
//!
//! # Example: a warp-per-row sum
//!
//! The kernel body takes the machine as generic parameters, so the GPU
//! entry point calls it with `&Hw` and the test with a [`Lane`]:
//!
//! ```
//! use ibp_kernel_emu::{Buffer, Grid, launch};
//! use ibp_kernels::simt::{Lanes, Mem, warp_sum};
//!
//! /// The sum of each row of `cols` u32s into `out[row]`: one warp a row,
//! /// the warps of the grid striding over the rows.
//! ///
//! /// # Safety
//! /// `src` holds `rows * cols` u32s, `out` room for `rows` u32s, both
//! /// 4-aligned.
//! unsafe fn row_sums<M: Lanes + Mem>(
//!     m: &M, src: u64, out: u64, rows: u64, cols: u64, warp: u64, warps: u64,
//! ) {
//!     let mut r = warp;
//!     while r < rows {
//!         let mut s = 0u32;
//!         let mut c = m.lane() as u64;
//!         while c < cols {
//!             // SAFETY: r < rows and c < cols.
//!             s = s.wrapping_add(unsafe { m.ld_u32(src + 4 * (r * cols + c)) });
//!             c += 32;
//!         }
//!         let total = warp_sum(m, s);
//!         if m.lane() == 0 {
//!             // SAFETY: r < rows.
//!             unsafe { m.st_u32(out + 4 * r, total) }
//!         }
//!         r += warps;
//!     }
//! }
//!
//! // On the GPU: `#[kernel] pub unsafe fn sums(p: Params) { let (w, n) =
//! // arch::global_warp(); unsafe { row_sums(&Hw, p.src, …, w, n) } }`.
//! // Here: the same body on an emulated grid of 2 blocks of 3 warps.
//! let (rows, cols) = (10u64, 77u64);
//! let data: Vec<u32> = (0..(rows * cols) as u32).map(|i| i % 1000).collect();
//! let src = Buffer::from_slice(&data);
//! let out = Buffer::zeroed(4 * rows as usize);
//! launch(Grid::new(2, 3), |lane| {
//!     let (warp, warps) = lane.global_warp();
//!     // SAFETY: the buffers are sized as `row_sums` requires.
//!     unsafe { row_sums(lane, src.addr(), out.addr(), rows, cols, warp, warps) }
//! });
//! let want: Vec<u32> = data.chunks(cols as usize).map(|r| r.iter().sum()).collect();
//! assert_eq!(out.as_slice::<u32>(), &want[..]);
//! ```
//!
//! A body that decodes with the device API (`ibp_kernels::device`) runs
//! the same way: hand it a [`Lane`] as the machine, a [`HostBytes`] over
//! a [`Buffer`] as the decode book, and a `DatasetView` whose addresses
//! are [`Buffer::addr`]s of the compressed rows that ibp's host library
//! produced; give the launch `view.workspace_bytes()` of shared memory a
//! warp ([`Grid::with_shared_bytes`]).
//!
//! # The machine
//!
//! - [`launch`] runs a [`Grid`]: blocks one after another, each with fresh
//!   shared memory; [`run_warp`] and [`run_block`] run one warp or one
//!   block on shared memory you provide.
//! - [`Lane`] is one thread; its methods give the ids the GPU reads from
//!   special registers (`global_warp`, `global_thread`, `block_idx`, …).
//! - [`HostMem`] is global memory alone (a body's `Mem` parameter when the
//!   lanes are not needed), [`HostBytes`] host bytes as shared memory or a
//!   decode book, [`Buffer`] a host buffer in whole 128-byte lines to
//!   launch on.
//!
//! # What it checks, and what it does not
//!
//! It runs every lane and every shuffle, so a wrong index, a wrong
//! reduction or a lane that skips a shuffle the others make shows up as a
//! wrong result or a panic ("the emulated block is stuck"). Copies with
//! `cp.async` land only at the wait that covers them. It does not check
//! bounds: an out-of-range address is an out-of-range host access, as on
//! the GPU, so size buffers as the launch would. It says nothing of speed,
//! registers or memory coalescing; those need the GPU, or `ptxas -v`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod lane;
mod mem;

pub use lane::{Grid, Lane, SHARED_FILL, launch, run_block, run_warp, run_warp_with};
pub use mem::{Buffer, HostBytes, HostMem};

#[cfg(doc)]
use ibp_kernels::simt::{Async, Block, Lanes, Mem, Shared};
