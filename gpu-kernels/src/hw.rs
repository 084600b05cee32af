//! The real machine behind the [`crate::simt`] traits: every method is one
//! PTX instruction (global memory for `Mem`, shared memory for `Shared`,
//! `cp.async` for `Async`), inlined, so nothing of the abstraction is left
//! in the PTX.

use crate::arch;
use crate::simt::{Async, Block, Book, Counter, Lanes, Mem, Shared};

/// The real machine behind [`Lanes`], [`Mem`] and [`Shared`]: each method is
/// one PTX instruction (global memory for `Mem`, shared memory for
/// `Shared`).
pub struct Hw;

impl Lanes for Hw {
    #[inline(always)]
    fn lane(&self) -> u32 {
        arch::lane()
    }
    #[inline(always)]
    fn shfl_up(&self, x: u32, d: u32) -> u32 {
        arch::shfl_up(x, d)
    }
    #[inline(always)]
    fn shfl_down(&self, x: u32, d: u32) -> u32 {
        arch::shfl_down(x, d)
    }
    #[inline(always)]
    fn shfl_idx(&self, x: u32, src: u32) -> u32 {
        arch::shfl_idx(x, src)
    }
    #[inline(always)]
    fn shfl_xor(&self, x: u32, m: u32) -> u32 {
        arch::shfl_xor(x, m)
    }
    #[inline(always)]
    fn ballot(&self, pred: bool) -> u32 {
        arch::ballot(pred)
    }
    #[inline(always)]
    fn shfl_up_add(&self, x: u32, d: u32) -> u32 {
        arch::shfl_up_add(x, d)
    }
    #[inline(always)]
    fn shfl_up_add_in(&self, x: u32, d: u32, g: u32) -> u32 {
        arch::shfl_up_add_in(x, d, g)
    }
}

impl Block for Hw {
    #[inline(always)]
    fn sync_threads(&self) {
        arch::sync_threads()
    }
}

// SAFETY (every method): forwarded to the caller, as `Shared` documents.
impl Shared for Hw {
    #[inline(always)]
    unsafe fn lds_u8(&self, a: u32) -> u32 {
        unsafe { arch::ld_shared_u8(a) }
    }
    #[inline(always)]
    unsafe fn lds_u32(&self, a: u32) -> u32 {
        unsafe { arch::ld_shared_u32(a) }
    }
    #[inline(always)]
    unsafe fn sts_u32(&self, a: u32, v: u32) {
        unsafe { arch::st_shared_u32(a, v) }
    }
    #[inline(always)]
    unsafe fn sts_u8(&self, a: u32, v: u32) {
        unsafe { arch::st_shared_u8(a, v) }
    }
    #[inline(always)]
    unsafe fn sts_u16(&self, a: u32, v: u32) {
        unsafe { arch::st_shared_u16(a, v) }
    }
    #[inline(always)]
    unsafe fn sts_v4(&self, a: u32, v: [u32; 4]) {
        unsafe { arch::st_shared_v4(a, v) }
    }
    #[inline(always)]
    unsafe fn lds_v4(&self, a: u32) -> [u32; 4] {
        unsafe { arch::ld_shared_v4(a) }
    }
    #[inline(always)]
    unsafe fn ors_u32(&self, a: u32, v: u32) {
        unsafe { arch::red_shared_or_u32(a, v) }
    }
    #[inline(always)]
    unsafe fn adds_u32(&self, a: u32, v: u32) {
        unsafe { arch::red_shared_add_u32(a, v) }
    }
}

impl Async for Hw {
    #[inline(always)]
    unsafe fn cp16(&self, dst: u32, src: u64) {
        // SAFETY: forwarded to the caller, as `Async` documents.
        unsafe { arch::cp_async::<16>(dst, src) }
    }
    #[inline(always)]
    fn commit(&self) {
        arch::cp_async_commit()
    }
    #[inline(always)]
    fn wait_all(&self) {
        arch::cp_async_wait_all()
    }
    #[inline(always)]
    fn wait_all_but_last(&self) {
        arch::cp_async_wait_group::<1>()
    }
    #[inline(always)]
    fn wait_all_but_two(&self) {
        arch::cp_async_wait_group::<2>()
    }
    #[inline(always)]
    fn sync_warp(&self) {
        arch::sync_warp()
    }
}

/// The decode book copied into shared memory, at this shared address.
pub struct SharedBook(pub u32);

// SAFETY (every method): forwarded to the caller, as `Book` documents.
impl Book for SharedBook {
    #[inline(always)]
    unsafe fn ld_u8(&self, off: u32) -> u32 {
        unsafe { arch::ld_shared_u8(self.0 + off) }
    }
    #[inline(always)]
    unsafe fn ld_u32(&self, off: u32) -> u32 {
        unsafe { arch::ld_shared_u32(self.0 + off) }
    }
    #[inline(always)]
    unsafe fn ld_u16(&self, off: u32) -> u32 {
        unsafe { arch::ld_shared_u16(self.0 + off) }
    }
    #[inline(always)]
    unsafe fn ld_v2(&self, off: u32) -> [u32; 2] {
        unsafe { arch::ld_shared_v2(self.0 + off) }
    }
    #[inline(always)]
    unsafe fn ld_v4(&self, off: u32) -> [u32; 4] {
        unsafe { arch::ld_shared_v4(self.0 + off) }
    }
}

/// The decode book in global memory (read-only path), at this address.
pub struct GlobalBook(pub u64);

// SAFETY (every method): forwarded to the caller, as `Book` documents; the
// book is never written during a launch.
impl Book for GlobalBook {
    #[inline(always)]
    unsafe fn ld_u8(&self, off: u32) -> u32 {
        unsafe { arch::ld_global_u8(self.0 + off as u64) }
    }
    #[inline(always)]
    unsafe fn ld_u32(&self, off: u32) -> u32 {
        unsafe { arch::ld_global_u32(self.0 + off as u64) }
    }
    #[inline(always)]
    unsafe fn ld_v2(&self, off: u32) -> [u32; 2] {
        unsafe { arch::ld_global_nc_v2(self.0 + off as u64) }
    }
    #[inline(always)]
    unsafe fn ld_v4(&self, off: u32) -> [u32; 4] {
        unsafe { arch::ld_global_nc_v4(self.0 + off as u64) }
    }
}

// SAFETY (every method): forwarded to the caller, as `Counter` documents.
impl Counter for Hw {
    #[inline(always)]
    unsafe fn fetch_add_u64(&self, a: u64, v: u64) -> u64 {
        unsafe { arch::atom_add_u64(a, v) }
    }
}

// SAFETY (every method): forwarded to the caller, as `Mem` documents.
impl Mem for Hw {
    #[inline(always)]
    unsafe fn ld_u8(&self, a: u64) -> u32 {
        unsafe { arch::ld_global_u8(a) }
    }
    #[inline(always)]
    unsafe fn ld_u32(&self, a: u64) -> u32 {
        unsafe { arch::ld_global_u32(a) }
    }
    #[inline(always)]
    unsafe fn ld_u64(&self, a: u64) -> u64 {
        unsafe { arch::ld_global_u64(a) }
    }
    #[inline(always)]
    unsafe fn ld_ro_u64(&self, a: u64) -> u64 {
        unsafe { arch::ld_global_nc_u64(a) }
    }
    #[inline(always)]
    unsafe fn st_u8(&self, a: u64, v: u32) {
        unsafe { arch::st_global_u8(a, v) }
    }
    #[inline(always)]
    unsafe fn st_u32(&self, a: u64, v: u32) {
        unsafe { arch::st_global_u32(a, v) }
    }
    #[inline(always)]
    unsafe fn st_u64(&self, a: u64, v: u64) {
        unsafe { arch::st_global_u64(a, v) }
    }
    #[inline(always)]
    unsafe fn ld_v4(&self, a: u64) -> [u32; 4] {
        unsafe { arch::ld_global_v4(a) }
    }
    #[inline(always)]
    unsafe fn st_u16(&self, a: u64, v: u32) {
        unsafe { arch::st_global_u16(a, v) }
    }
    #[inline(always)]
    unsafe fn or_u64(&self, a: u64, v: u64) {
        unsafe { arch::red_or_u64(a, v) }
    }
    #[inline(always)]
    unsafe fn min_u64(&self, a: u64, v: u64) {
        unsafe { arch::red_min_u64(a, v) }
    }
    #[inline(always)]
    unsafe fn st_v4(&self, a: u64, v: [u32; 4]) {
        unsafe { arch::st_global_v4(a, v) }
    }
    #[inline(always)]
    unsafe fn or_u32(&self, a: u64, v: u32) {
        unsafe { arch::red_or_u32(a, v) }
    }
    #[inline(always)]
    unsafe fn add_u64(&self, a: u64, v: u64) {
        unsafe { arch::red_add_u64(a, v) }
    }
}
