//! The device prelude: the names a `cuda_std` user knows, for kernels built
//! by rustc's NVPTX backend.
//!
//! ```ignore
//! #![no_std]
//! #![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]
//! use ibp_kernels::prelude::*;
//!
//! #[kernel]
//! pub unsafe fn scale(x: *mut f32, n: u32, k: f32) {
//!     let i = thread::index_1d();
//!     if i < n {
//!         // SAFETY: i < n, inside the caller's buffer.
//!         unsafe { *x.add(i as usize) *= k };
//!     }
//! }
//! ```
//!
//! - [`kernel`]: `#[kernel]` makes a function a `.entry` of the PTX
//!   (`#[unsafe(no_mangle)] extern "ptx-kernel"`, on nvptx64 only).
//! - `thread` (nvptx64): thread, block and grid indices, `sync_threads`.
//! - `warp` (nvptx64): lane and warp ids, `sync_warp`, shuffles and votes (full
//!   warp: every lane of the warp must make the call).
//! - [`shared_array!`](crate::shared_array): a fixed-size array in
//!   `.shared` memory.
//!
//! Each is one PTX instruction from `arch`, the intrinsics ibp's
//! own kernels use (and they use this prelude).
//!
//! Q: why not `cuda_std` itself?
//! A: its crates.io release does not compile on a current rustc, and its
//! GitHub version is written for `rustc_codegen_nvvm` (which needs the LLVM
//! 7 of an old libNVVM for sm_90): built by rustc's NVPTX backend its
//! `#[kernel]` yields no `.entry` and its `shared_array!` lands in global
//! memory. These are the same names on the backend ibp uses.

pub use ibp_kernels_macros::kernel;

pub use crate::shared_array;

/// A fixed-size array in `.shared` memory, made by
/// [`shared_array!`](crate::shared_array): one per block, alive for the
/// launch.
#[derive(Clone, Copy, Debug)]
pub struct SharedArray<T, const N: usize> {
    addr: u32,
    _t: core::marker::PhantomData<T>,
}

impl<T: Copy, const N: usize> SharedArray<T, N> {
    /// The array at shared address `addr` (what the macro computes).
    ///
    /// # Safety
    /// `addr` is the shared-space address of `N` `T`s of `.shared` memory,
    /// aligned for `T`.
    #[doc(hidden)]
    #[inline(always)]
    pub const unsafe fn from_shared_addr(addr: u32) -> Self {
        SharedArray {
            addr,
            _t: core::marker::PhantomData,
        }
    }

    /// The shared-space address of element 0 (what `ld.shared` takes, and
    /// the `ws` of [`crate::device::decode_row`]).
    #[inline(always)]
    pub const fn addr(&self) -> u32 {
        self.addr
    }

    /// Elements.
    #[inline(always)]
    pub const fn len(&self) -> usize {
        N
    }

    /// Whether `N` is 0.
    #[inline(always)]
    pub const fn is_empty(&self) -> bool {
        N == 0
    }

    /// A generic pointer to element 0 (for ordinary Rust loads and stores).
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub fn as_mut_ptr(&self) -> *mut T {
        crate::arch::shared_to_generic(self.addr) as *mut T
    }

    /// Element `i`.
    ///
    /// # Safety
    /// `i < N`; no other thread writes element `i` until a barrier orders
    /// the accesses.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub unsafe fn get(&self, i: usize) -> T {
        // SAFETY: the caller's (i < N, in the array).
        unsafe { self.as_mut_ptr().add(i).read() }
    }

    /// Set element `i`.
    ///
    /// # Safety
    /// As [`SharedArray::get`].
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub unsafe fn set(&self, i: usize, v: T) {
        // SAFETY: the caller's (i < N, in the array).
        unsafe { self.as_mut_ptr().add(i).write(v) }
    }
}

/// A fixed-size array in `.shared` memory: `shared_array!(NAME: [T; N])`
/// declares a `.shared` variable `ibp_shared_NAME` of `N` `T`s (16-aligned)
/// in the PTX and evaluates to its [`SharedArray`].
///
/// `NAME` names the PTX variable: it must be unique among the kernels of
/// the program. `T` and `N` are read at the enclosing module's level:
/// primitive types, or items visible there (not a function's local ones). Every thread of a block sees the same array; its contents
/// are undefined at the start of the launch.
///
/// ```ignore
/// let tile = shared_array!(TILE: [f32; 256]);
/// unsafe { tile.set(thread::thread_idx_x() as usize, 0.0) };
/// thread::sync_threads();
/// ```
#[macro_export]
#[cfg_attr(
    target_arch = "nvptx64",
    allow_internal_unstable(asm_experimental_arch)
)]
macro_rules! shared_array {
    ($name:ident : [$t:ty; $n:expr]) => {{
        // Q: why a module? A: `global_asm!` is an item that may not stand in
        // a statement's place; a module is an item that may, and holds it.
        #[allow(non_snake_case, unused_imports)]
        mod $name {
            use super::*;
            core::arch::global_asm!(
                concat!(".shared .align 16 .b8 ibp_shared_", stringify!($name), "[{bytes}];"),
                bytes = const { core::mem::size_of::<[$t; $n]>() },
            );
        }
        let addr: u32;
        // SAFETY: takes the address of the `.shared` variable declared above.
        unsafe {
            core::arch::asm!(
                concat!("mov.u32 {r}, ibp_shared_", stringify!($name), ";"),
                r = out(reg32) addr,
            )
        };
        // SAFETY: `addr` is that variable: N elements of T, 16-aligned.
        unsafe { $crate::prelude::SharedArray::<$t, { $n }>::from_shared_addr(addr) }
    }};
}

/// Thread, block and grid indices (x dimension), as `cuda_std::thread`.
#[cfg(target_arch = "nvptx64")]
pub mod thread {
    use crate::arch;

    /// `threadIdx.x`.
    #[inline(always)]
    pub fn thread_idx_x() -> u32 {
        arch::thread_idx()
    }

    /// `blockIdx.x`.
    #[inline(always)]
    pub fn block_idx_x() -> u32 {
        arch::block_idx()
    }

    /// `blockDim.x`.
    #[inline(always)]
    pub fn block_dim_x() -> u32 {
        arch::block_dim()
    }

    /// `gridDim.x`.
    #[inline(always)]
    pub fn grid_dim_x() -> u32 {
        arch::grid_dim()
    }

    /// `blockIdx.x * blockDim.x + threadIdx.x` (u32, as `cuda_std`'s).
    #[inline(always)]
    pub fn index_1d() -> u32 {
        arch::block_idx() * arch::block_dim() + arch::thread_idx()
    }

    /// The global thread index in 64 bits (grids over 2³² threads).
    #[inline(always)]
    pub fn index_1d_u64() -> u64 {
        arch::global_thread()
    }

    /// `__syncthreads()`: every thread of the block must reach it.
    #[inline(always)]
    pub fn sync_threads() {
        arch::sync_threads()
    }
}

/// Warp-level operations (full warp: every lane of the warp calls them
/// together), as `cuda_std::warp`.
#[cfg(target_arch = "nvptx64")]
pub mod warp {
    use crate::arch;

    /// Lane within the warp, 0..32.
    #[inline(always)]
    pub fn lane_id() -> u32 {
        arch::lane()
    }

    /// Warp within the block.
    #[inline(always)]
    pub fn warp_id() -> u32 {
        arch::warp_in_block()
    }

    /// Global warp index and the number of warps in the grid.
    #[inline(always)]
    pub fn global_warp() -> (u64, u64) {
        arch::global_warp()
    }

    /// `__syncwarp()`.
    #[inline(always)]
    pub fn sync_warp() {
        arch::sync_warp()
    }

    /// Lane `lane − d`'s `x` (own `x` for the first `d` lanes).
    #[inline(always)]
    pub fn shuffle_up(x: u32, d: u32) -> u32 {
        arch::shfl_up(x, d)
    }

    /// Lane `lane + d`'s `x` (own `x` for the last `d` lanes).
    #[inline(always)]
    pub fn shuffle_down(x: u32, d: u32) -> u32 {
        arch::shfl_down(x, d)
    }

    /// Lane `lane ^ m`'s `x` (the butterfly of reductions).
    #[inline(always)]
    pub fn shuffle_xor(x: u32, m: u32) -> u32 {
        arch::shfl_xor(x, m)
    }

    /// Lane `src`'s `x`.
    #[inline(always)]
    pub fn shuffle_idx(x: u32, src: u32) -> u32 {
        arch::shfl_idx(x, src)
    }

    /// [`shuffle_xor`] of an `f32`.
    #[inline(always)]
    pub fn shuffle_xor_f32(x: f32, m: u32) -> f32 {
        f32::from_bits(arch::shfl_xor(x.to_bits(), m))
    }

    /// Bit `l` set when lane `l` passes `pred`.
    #[inline(always)]
    pub fn vote_ballot(pred: bool) -> u32 {
        arch::ballot(pred)
    }

    /// Whether every lane passes `pred`.
    #[inline(always)]
    pub fn vote_all(pred: bool) -> bool {
        arch::vote_all(pred)
    }

    /// Whether some lane passes `pred`.
    #[inline(always)]
    pub fn vote_any(pred: bool) -> bool {
        arch::vote_any(pred)
    }
}
