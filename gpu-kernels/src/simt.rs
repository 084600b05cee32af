//! The two things a warp-level kernel body needs from the machine, as
//! traits: the lanes of its warp ([`Lanes`]: id and shuffles) and memory
//! ([`Mem`]: loads, stores, reductions).
//!
//! Q: why traits instead of calling `arch` directly?
//! A: so that one kernel body runs in two places. On the GPU the traits are
//! implemented by `hw::Hw` with single PTX instructions (every call is
//! `#[inline(always)]`, so nothing is left of the abstraction in the PTX). On
//! the host the `ibp-kernel-emu` crate implements them with 32 lanes (as
//! coroutines) and a barrier per shuffle, and ibp's tests run the very same
//! kernel code against the CPU codec on machines without a GPU.
//!
//! Every lane must make the same sequence of [`Lanes`] calls (the real
//! shuffles use the full member mask); the host emulation reports a stuck
//! warp when a body breaks that rule, which its tests would catch.

use crate::detail::warp::{SCAN_DISTANCES, scan_step, scan_step64};

/// One lane's view of its warp: its id and the `shfl.sync` family, with the
/// semantics of the PTX instructions under a full member mask (out-of-range
/// sources return the caller's own value).
pub trait Lanes {
    /// Lane id, 0..32.
    fn lane(&self) -> u32;
    /// Value of lane `lane - d` (own value when `lane < d`).
    fn shfl_up(&self, x: u32, d: u32) -> u32;
    /// Value of lane `lane + d` (own value when `lane + d > 31`).
    fn shfl_down(&self, x: u32, d: u32) -> u32;
    /// Value of lane `src`.
    fn shfl_idx(&self, x: u32, src: u32) -> u32;
    /// Value of lane `lane ^ m`.
    fn shfl_xor(&self, x: u32, m: u32) -> u32;
    /// `vote.sync.ballot`: bit `l` set when lane `l` passes `pred`.
    fn ballot(&self, pred: bool) -> u32;
    /// One round of a warp prefix sum: `x` plus lane `lane - d`'s `x`, or
    /// `x` alone when `lane < d`.
    ///
    /// Q: why a method of its own?
    /// A: the GPU does it in two instructions, a shuffle that also yields
    /// "the source lane exists" and an add under that predicate; written
    /// as a shuffle, a lane compare and a select it was four, and the
    /// compare and select sat on the scan's dependent chain (the decode
    /// loop's five rounds are its longest chain).
    #[inline(always)]
    fn shfl_up_add(&self, x: u32, d: u32) -> u32 {
        scan_step(self.lane(), d, x, self.shfl_up(x, d))
    }
    /// [`Lanes::shfl_up_add`] within groups of `g` consecutive lanes (`g` a
    /// power of two ≤ 32): `x` plus lane `lane - d`'s `x` when that lane is
    /// in the caller's group, else `x` alone. One shuffle with a segment
    /// mask on the GPU.
    #[inline(always)]
    fn shfl_up_add_in(&self, x: u32, d: u32, g: u32) -> u32 {
        scan_step(self.lane() & (g - 1), d, x, self.shfl_up(x, d))
    }
}

/// Memory as the kernels use it. Addresses are plain `u64`.
///
/// # Safety
/// Every method is `unsafe`: the caller guarantees that the address is valid
/// for the access and aligned to its width.
pub trait Mem {
    /// Load a byte (zero-extended).
    ///
    /// # Safety
    /// `a` readable.
    unsafe fn ld_u8(&self, a: u64) -> u32;
    /// Load a 4-aligned u32.
    ///
    /// # Safety
    /// `a` readable and 4-aligned.
    unsafe fn ld_u32(&self, a: u64) -> u32;
    /// Load an 8-aligned u64.
    ///
    /// # Safety
    /// `a` readable and 8-aligned.
    unsafe fn ld_u64(&self, a: u64) -> u64;
    /// Load an 8-aligned u64 that no thread writes during the kernel
    /// (codebook tables), through the read-only path.
    ///
    /// # Safety
    /// `a` readable and 8-aligned, not written during the kernel.
    unsafe fn ld_ro_u64(&self, a: u64) -> u64;
    /// Store a byte.
    ///
    /// # Safety
    /// `a` writable.
    unsafe fn st_u8(&self, a: u64, v: u32);
    /// Store a 4-aligned u32.
    ///
    /// # Safety
    /// `a` writable and 4-aligned.
    unsafe fn st_u32(&self, a: u64, v: u32);
    /// Store an 8-aligned u64.
    ///
    /// # Safety
    /// `a` writable and 8-aligned.
    unsafe fn st_u64(&self, a: u64, v: u64);
    /// Load 16 bytes at a 16-aligned address.
    ///
    /// # Safety
    /// `a` readable and 16-aligned.
    unsafe fn ld_v4(&self, a: u64) -> [u32; 4];
    /// Store a 2-aligned u16 (the low half of `v`).
    ///
    /// # Safety
    /// `a` writable and 2-aligned.
    unsafe fn st_u16(&self, a: u64, v: u32);
    /// Atomically OR into an 8-aligned u64.
    ///
    /// # Safety
    /// `a` writable and 8-aligned.
    unsafe fn or_u64(&self, a: u64, v: u64);
    /// Atomically take the minimum with an 8-aligned u64.
    ///
    /// # Safety
    /// `a` writable and 8-aligned.
    unsafe fn min_u64(&self, a: u64, v: u64);
    /// Store 16 bytes at a 16-aligned address.
    ///
    /// # Safety
    /// `a` writable and 16-aligned.
    unsafe fn st_v4(&self, a: u64, v: [u32; 4]);
    /// Atomically OR into a 4-aligned u32.
    ///
    /// # Safety
    /// `a` writable and 4-aligned.
    unsafe fn or_u32(&self, a: u64, v: u32);
    /// Atomically add to an 8-aligned u64.
    ///
    /// # Safety
    /// `a` writable and 8-aligned.
    unsafe fn add_u64(&self, a: u64, v: u64);
}

/// Atomics whose result a kernel uses: a counter that hands out places
/// (`red.global` of [`Mem`] returns nothing).
///
/// # Safety
/// Every method is `unsafe`: the caller guarantees that the address is valid
/// for the access and aligned to its width.
pub trait Counter {
    /// Atomically add `v` to an 8-aligned u64; returns the value before.
    ///
    /// # Safety
    /// `a` writable and 8-aligned.
    unsafe fn fetch_add_u64(&self, a: u64, v: u64) -> u64;
}

/// The block's shared memory (the decoder's workspace), by 32-bit
/// shared-space address.
///
/// # Safety
/// Every method is `unsafe`: the address must be inside the launch's shared
/// memory and aligned to the access width.
pub trait Shared {
    /// Load a byte.
    ///
    /// # Safety
    /// `a` inside shared memory.
    unsafe fn lds_u8(&self, a: u32) -> u32;
    /// Load a u32.
    ///
    /// # Safety
    /// `a` inside shared memory, 4-aligned.
    unsafe fn lds_u32(&self, a: u32) -> u32;
    /// Store a u32.
    ///
    /// # Safety
    /// `a` inside shared memory, 4-aligned.
    unsafe fn sts_u32(&self, a: u32, v: u32);
    /// Store the low byte of `v`.
    ///
    /// # Safety
    /// `a` inside shared memory.
    unsafe fn sts_u8(&self, a: u32, v: u32);
    /// Store the low 16 bits of `v`.
    ///
    /// # Safety
    /// `a` inside shared memory, 2-aligned.
    unsafe fn sts_u16(&self, a: u32, v: u32);
    /// Store 16 bytes.
    ///
    /// # Safety
    /// `a` inside shared memory, 16-aligned.
    unsafe fn sts_v4(&self, a: u32, v: [u32; 4]);
    /// Load 16 bytes.
    ///
    /// # Safety
    /// `a` inside shared memory, 16-aligned.
    unsafe fn lds_v4(&self, a: u32) -> [u32; 4];
    /// OR `v` into the u32 at `a`, atomically (lanes may OR into one word
    /// at once).
    ///
    /// # Safety
    /// `a` inside shared memory, 4-aligned.
    unsafe fn ors_u32(&self, a: u32, v: u32);
    /// Add `v` to the u32 at `a`, atomically (a histogram's bins).
    ///
    /// # Safety
    /// `a` inside shared memory, 4-aligned.
    unsafe fn adds_u32(&self, a: u32, v: u32);
}

/// Asynchronous copies from global into shared memory, and the warp's
/// barrier: what a warp needs to keep its workspace filled ahead of use.
pub trait Async {
    /// `cp.async.cg` of 16 bytes (may complete later).
    ///
    /// # Safety
    /// `dst` a 16-aligned shared address, `src` a 16-aligned readable global
    /// address.
    unsafe fn cp16(&self, dst: u32, src: u64);
    /// Close the lane's current group of copies.
    fn commit(&self);
    /// Wait for every copy of the lane.
    fn wait_all(&self);
    /// Wait for every group of the lane but the most recent one.
    fn wait_all_but_last(&self);
    /// Wait for every group of the lane but the two most recent ones.
    fn wait_all_but_two(&self);
    /// `bar.warp.sync`: the warp's lanes meet; shared-memory writes before
    /// it are visible to every lane after it.
    fn sync_warp(&self);
}

/// The block's barrier: what the warps of a block that share one job (a
/// KV row split over several warps) need to hand each other results
/// through shared memory.
pub trait Block {
    /// `bar.sync 0`: every thread of the block meets; global and shared
    /// memory writes before it are visible to every thread after it. Every
    /// thread of the block must reach the same calls.
    fn sync_threads(&self);
}

/// A read-only table (the decode book), by byte offset from its start; it
/// lives in shared memory when it fits, else in global memory.
///
/// # Safety
/// Every method is `unsafe`: the offset must be inside the table and aligned
/// to the access width.
pub trait Book {
    /// Load a byte.
    ///
    /// # Safety
    /// `off` inside the table.
    unsafe fn ld_u8(&self, off: u32) -> u32;
    /// Load a u32.
    ///
    /// # Safety
    /// `off` inside the table, 4-aligned.
    unsafe fn ld_u32(&self, off: u32) -> u32;
    /// Load a u16 (by default from the aligned word that holds it).
    ///
    /// # Safety
    /// `off` inside the table, 2-aligned, its 4-aligned word inside too.
    #[inline(always)]
    unsafe fn ld_u16(&self, off: u32) -> u32 {
        // SAFETY: the caller's contract.
        let w = unsafe { self.ld_u32(off & !3) };
        (w >> ((off & 2) * 8)) & 0xffff
    }
    /// Load 8 bytes.
    ///
    /// # Safety
    /// `off` inside the table, 8-aligned.
    unsafe fn ld_v2(&self, off: u32) -> [u32; 2];
    /// Load 16 bytes.
    ///
    /// # Safety
    /// `off` inside the table, 16-aligned.
    unsafe fn ld_v4(&self, off: u32) -> [u32; 4];
}

/// Exclusive prefix sum over the warp and the warp's total: the Kogge–Stone
/// rounds of [`crate::detail::warp`] over `shfl_up`.
#[inline(always)]
pub fn exclusive_scan<W: Lanes>(w: &W, x: u32) -> (u32, u32) {
    let s = inclusive_scan(w, x);
    (s.wrapping_sub(x), w.shfl_idx(s, 31))
}

/// Inclusive prefix sum over the warp.
#[inline(always)]
pub fn inclusive_scan<W: Lanes>(w: &W, x: u32) -> u32 {
    let mut s = x;
    let mut i = 0;
    while i < SCAN_DISTANCES.len() {
        let d = SCAN_DISTANCES[i];
        s = w.shfl_up_add(s, d);
        i += 1;
    }
    s
}

/// Exclusive prefix sum within each group of `G` consecutive lanes (`G` a
/// power of two ≤ 32), and the group's total: `log2 G` rounds of
/// [`Lanes::shfl_up_add_in`]. `G = 32` is [`exclusive_scan`].
#[inline(always)]
pub fn exclusive_scan_in<const G: u32, W: Lanes>(w: &W, x: u32) -> (u32, u32) {
    if G == 32 {
        return exclusive_scan(w, x);
    }
    let mut s = x;
    let mut d = 1;
    while d < G {
        s = w.shfl_up_add_in(s, d, G);
        d *= 2;
    }
    (s.wrapping_sub(x), w.shfl_idx(s, w.lane() | (G - 1)))
}

/// 64-bit inclusive prefix sum over the warp (two shuffles a round).
#[inline(always)]
pub fn inclusive_scan64<W: Lanes>(w: &W, x: u64) -> u64 {
    let lane = w.lane();
    let mut s = x;
    let mut i = 0;
    while i < SCAN_DISTANCES.len() {
        let d = SCAN_DISTANCES[i];
        let up = (w.shfl_up(s as u32, d) as u64) | ((w.shfl_up((s >> 32) as u32, d) as u64) << 32);
        s = scan_step64(lane, d, s, up);
        i += 1;
    }
    s
}

/// Lane `src`'s 64-bit value (two shuffles).
#[inline(always)]
pub fn shfl_idx64<W: Lanes>(w: &W, x: u64, src: u32) -> u64 {
    (w.shfl_idx(x as u32, src) as u64) | ((w.shfl_idx((x >> 32) as u32, src) as u64) << 32)
}

/// 64-bit sum over the warp, in every lane.
#[inline(always)]
pub fn warp_sum64<W: Lanes>(w: &W, x: u64) -> u64 {
    let mut s = x;
    let mut m = 16;
    while m > 0 {
        let lo = w.shfl_xor(s as u32, m) as u64;
        let hi = w.shfl_xor((s >> 32) as u32, m) as u64;
        s = s.wrapping_add(lo | hi << 32);
        m /= 2;
    }
    s
}

/// Everything the decode kernel body needs from the machine.
pub trait Machine: Lanes + Mem + Shared + Async {}
impl<T: Lanes + Mem + Shared + Async> Machine for T {}

/// Sum over the warp, in every lane (butterfly).
#[inline(always)]
pub fn warp_sum<W: Lanes>(w: &W, x: u32) -> u32 {
    let mut s = x;
    let mut m = 16;
    while m > 0 {
        s += w.shfl_xor(s, m);
        m /= 2;
    }
    s
}

/// OR over groups of `g` consecutive lanes (`g` a power of two ≤ 32), in
/// every lane of the group.
#[inline(always)]
pub fn group_or<W: Lanes>(w: &W, x: u32, g: u32) -> u32 {
    let mut s = x;
    let mut m = 1;
    while m < g {
        s |= w.shfl_xor(s, m);
        m *= 2;
    }
    s
}
