//! Device side of ibp: the device API, by which a user's own Rust GPU
//! kernel decodes ibp-compressed rows, and ibp's own kernels.
//!
//! # The public surface (semver; docs/DEVICE-API.md, "Versions")
//!
//! - [`device`]: decode inside your own kernel (a row at a time, into a
//!   [`step::Sink`]), and [`DatasetView`](device::DatasetView), the one
//!   description of a compressed dataset that crosses to the device.
//! - [`prelude`]: `cuda_std`'s names for user kernels (`#[kernel]`,
//!   `thread`, `warp`, `shared_array!`), on the intrinsics of `arch`.
//! - [`step`]: the decoder's consumer, [`step::Sink`], and ibp's own sink,
//!   [`step::RowStore`].
//! - [`simt`]: the lane and memory operations a kernel body needs, as
//!   traits, so that a body runs on the GPU and, emulated, in host tests.
//! - `hw` (nvptx only): the [`simt`] traits on the real machine, one PTX
//!   instruction a method.
//! - `arch` (nvptx only): thread ids, shuffles, ballot, shared memory,
//!   `cp.async`.
//!
//! # ibp's own, with no semver promise
//!
//! - [`params`]: the `#[repr(C)]` parameter blocks of ibp's kernels and
//!   [`params::kernels`], the one list of those kernels (name, parameter
//!   block, register cap) that ibp's build script and its host launch code
//!   both read. Shared with ibp's host crate of the same release.
//! - [`detail`]: the internals ibp's kernels and its host share (chunk
//!   geometry, the decode book and step, the encoder, the feature cache's
//!   and the KV store's bodies), public only so that the host runs the very
//!   same functions on the CPU and tests the bodies emulated; as CUB's
//!   `detail` namespace, they may change in any release.
//! - `kernels` (nvptx, feature `builtin`): the thin entry points, private.
//!
//! Everything outside `arch`, `hw`, `detail::scan` and `kernels` is plain
//! integer code that compiles for the host as well as for
//! `nvptx64-nvidia-cuda`, so the CPU codec and the GPU kernels run
//! literally the same functions and the host can test them without a GPU.
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

pub mod detail;
pub mod device;
pub mod params;
pub mod prelude;
pub mod simt;
pub mod step;

#[cfg(target_arch = "nvptx64")]
pub mod arch;
#[cfg(target_arch = "nvptx64")]
pub mod hw;
#[cfg(all(target_arch = "nvptx64", feature = "builtin"))]
mod kernels;

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
