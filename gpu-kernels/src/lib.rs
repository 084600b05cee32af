//! Device side of ibp: the kernels, the few device intrinsics they need, and the
//! lane/bit arithmetic that the host shares with them.
//!
//! Everything outside `arch`, `hw`, `scan` and `kernels` is plain integer code that
//! compiles for the host as well as for `nvptx64-nvidia-cuda`, so the CPU codec
//! and the GPU kernels run literally the same functions and the host can test
//! them without a GPU.
//!
//! Layout:
//! - [`bits`]: geometry of chunks and the bit stream of one encoded tensor
//!   (`docs/FORMAT.md`), and the expand/compress (pdep/pext) move masks.
//! - [`count`]: the positional popcount (per-bit-position counter) used by the
//!   fit's bit counting, as a carry-save accumulator, and the bit-counting
//!   kernel's body over [`simt::Mem`].
//! - [`warp`]: warp-scan lane arithmetic and a host emulation of a warp.
//! - [`simt`]: the lane and memory operations a kernel body needs, as traits,
//!   so that [`encode`] runs on the GPU and, emulated, in host tests.
//! - [`encode`]: the fit's evaluation pass, the size query and compression.
//! - [`compact`]: the packed layout from stored forms written into slots.
//! - [`book`]: the decode book (the codebook laid out for 16 output bytes
//!   per lane) and the two-run expansion.
//! - [`step`]: the decoder's inner loop (16 output bytes per lane) over the
//!   [`simt`] traits.
//! - [`decode`]: the decode kernel's body (batch and streaming modes), over
//!   the same traits.
//! - [`device`]: decode inside your own kernel (a row at a time, into a
//!   [`step::Sink`]).
//! - [`cache`]: the GPU feature cache's index word and gather body (rows
//!   from a cache slab or, on a miss, from the dataset in host memory).
//! - [`kv`]: the appendable KV store's commit of stored lengths and
//!   flags.
//! - [`params`]: `#[repr(C)]` kernel parameter blocks, shared with the host.
//! - [`prelude`]: `cuda_std`'s names for user kernels (`#[kernel]`,
//!   `thread`, `warp`, `shared_array!`), on the intrinsics of `arch`.
//! - `arch` (nvptx only): thread ids, shuffles, ballot, shared memory, cp.async.
//! - `hw` (nvptx only): the [`simt`] traits on the real machine, one PTX
//!   instruction a method.
//! - `scan` (nvptx only): the device-wide scan of stored lengths.
//! - `kernels` (nvptx only): the thin `extern "ptx-kernel"` entry points.
#![cfg_attr(not(test), no_std)]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(asm_experimental_arch, stdarch_nvptx, allow_internal_unstable)
)]
// Q: why `allow_internal_unstable`, a compiler-internal feature?
// A: `shared_array!` expands to an `asm!` in the user's crate, and `asm!` on
// nvptx64 is still unstable; the attribute on the macro lets it expand
// there without the user enabling `asm_experimental_arch` too.
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
#![cfg_attr(all(target_arch = "nvptx64", feature = "builtin"), feature(abi_ptx))]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod bits;
pub mod book;
pub mod cache;
pub mod candidates;
pub mod compact;
pub mod count;
pub mod decode;
pub mod device;
pub mod encode;
pub mod kv;
pub mod pack;
pub mod params;
pub mod prelude;
pub mod simt;
pub mod step;
pub mod table;
pub mod warp;

#[cfg(target_arch = "nvptx64")]
pub mod arch;
#[cfg(target_arch = "nvptx64")]
pub mod hw;
#[cfg(all(target_arch = "nvptx64", feature = "builtin"))]
mod kernels;
#[cfg(all(target_arch = "nvptx64", feature = "builtin"))]
mod scan;

/// Q: why a trapping panic handler?
/// A: the default machinery (formatting, unwinding) would drag thousands of
/// lines into the PTX. Kernels are written so that no panic path survives
/// optimisation; if one ever does, the launch fails with an illegal-instruction
/// error that the host reports, instead of silently writing garbage.
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` aborts the kernel; it has no preconditions.
    unsafe { core::arch::nvptx::trap() }
}
