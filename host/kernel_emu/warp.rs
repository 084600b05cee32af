//! The emulated machine the kernel bodies run on: a warp of 32 lanes, each
//! a coroutine on the calling thread, that meet at a barrier for every
//! shuffle ([`run_block`]); host memory through atomics ([`EmuMem`]); a
//! warp's shared memory as a host buffer ([`HostBytes`]) with asynchronous
//! copies that land only when waited for.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering::Relaxed};

use ibp_kernels::simt::{Async, Block, Book, Lanes, Mem, Shared};

/// A barrier of `n` emulated lanes. Lanes are coroutines on one thread
/// (see [`run_block`]): a lane that arrives suspends itself until the last
/// one arrives and the round turns.
pub(super) struct LaneBarrier {
    n: usize,
    /// Lanes arrived in this round, the round's number.
    state: Mutex<(usize, u64)>,
}

impl LaneBarrier {
    fn new(n: usize) -> Self {
        LaneBarrier {
            n,
            state: Mutex::new((0, 0)),
        }
    }

    /// Arrive at the barrier and return the round to wait for the end of
    /// (`None`: this lane was the last one, the round has turned).
    fn arrive(&self) -> Option<u64> {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let round = g.1;
        g.0 += 1;
        if g.0 == self.n {
            *g = (0, round + 1);
            return None;
        }
        Some(round)
    }

    /// Whether round `round` has ended.
    fn turned(&self, round: u64) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 != round
    }
}

/// The shuffle exchange shared by the 32 lanes of a warp.
pub(super) struct Exchange {
    barrier: LaneBarrier,
    slots: [AtomicU32; 32],
}

/// A group of asynchronous copies: (shared destination, 16 bytes).
pub(super) type CopyGroup = Vec<(u32, [u32; 4])>;

/// One lane of the emulated warp.
pub(super) struct EmuLane<'a> {
    lane: u32,
    ex: &'a Exchange,
    /// The block's barrier (every lane of every warp of the block).
    block: &'a LaneBarrier,
    /// Suspends this lane's coroutine, handing the thread to the next lane.
    yielder: &'a corosensei::Yielder<(), ()>,
    /// Counts barrier arrivals and finished lanes, for [`run_block`]'s
    /// deadlock check.
    progress: &'a AtomicU64,
    /// Host address of the warp's shared memory (0: none).
    smem: u64,
    /// This lane's asynchronous copies not yet landed: committed groups in
    /// order, then the open group (destination, the 16 bytes read at issue).
    pending: std::cell::RefCell<Vec<CopyGroup>>,
}

impl EmuLane<'_> {
    fn exchange(&self, x: u32, src: u32) -> u32 {
        self.ex.slots[self.lane as usize].store(x, Relaxed);
        self.wait(&self.ex.barrier);
        let r = self.ex.slots[src as usize].load(Relaxed);
        self.wait(&self.ex.barrier);
        r
    }

    /// Wait at `barrier`: suspend until every lane it counts has arrived.
    fn wait(&self, barrier: &LaneBarrier) {
        self.progress.fetch_add(1, Relaxed);
        if let Some(round) = barrier.arrive() {
            while !barrier.turned(round) {
                self.yielder.suspend(());
            }
        }
    }
}

impl Lanes for EmuLane<'_> {
    fn lane(&self) -> u32 {
        self.lane
    }
    fn shfl_up(&self, x: u32, d: u32) -> u32 {
        let src = if self.lane >= d {
            self.lane - d
        } else {
            self.lane
        };
        self.exchange(x, src)
    }
    fn shfl_down(&self, x: u32, d: u32) -> u32 {
        let src = if self.lane + d < 32 {
            self.lane + d
        } else {
            self.lane
        };
        self.exchange(x, src)
    }
    fn shfl_idx(&self, x: u32, src: u32) -> u32 {
        self.exchange(x, src & 31)
    }
    fn shfl_xor(&self, x: u32, m: u32) -> u32 {
        self.exchange(x, (self.lane ^ m) & 31)
    }
    fn ballot(&self, pred: bool) -> u32 {
        // Five exchanges OR the 32 predicate bits together (butterfly).
        let mut v = (pred as u32) << self.lane;
        for m in [1, 2, 4, 8, 16] {
            v |= self.exchange(v, (self.lane ^ m) & 31);
        }
        v
    }
}

/// Host memory through atomics. Q: why atomics, when the lanes share one
/// thread? A: the kernel bodies take memory as `Mem`, whose contract is the
/// GPU's: two lanes may OR into one word; relaxed atomics keep that defined
/// here whatever the schedule.
pub(super) struct EmuMem;

// SAFETY: (every method) the caller passes addresses of live, aligned host
// memory, as `Mem` requires.
impl Mem for EmuMem {
    unsafe fn ld_u8(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU8::from_ptr(a as *mut u8) }.load(Relaxed) as u32
    }
    unsafe fn ld_u32(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU32::from_ptr(a as *mut u32) }.load(Relaxed)
    }
    unsafe fn ld_u64(&self, a: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.load(Relaxed)
    }
    unsafe fn ld_ro_u64(&self, a: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { self.ld_u64(a) }
    }
    unsafe fn st_u8(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU8::from_ptr(a as *mut u8) }.store(v as u8, Relaxed)
    }
    unsafe fn st_u32(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU32::from_ptr(a as *mut u32) }.store(v, Relaxed)
    }
    unsafe fn st_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.store(v, Relaxed)
    }
    unsafe fn ld_v4(&self, a: u64) -> [u32; 4] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        std::array::from_fn(|i| unsafe { self.ld_u32(a + 4 * i as u64) })
    }
    unsafe fn st_u16(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU16::from_ptr(a as *mut u16) }.store(v as u16, Relaxed)
    }
    unsafe fn or_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.fetch_or(v, Relaxed);
    }
    unsafe fn min_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.fetch_min(v, Relaxed);
    }
    unsafe fn st_v4(&self, a: u64, v: [u32; 4]) {
        for (i, x) in v.into_iter().enumerate() {
            // SAFETY: the caller's contract (this method's `# Safety`).
            unsafe { self.st_u32(a + 4 * i as u64, x) };
        }
    }
    unsafe fn or_u32(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU32::from_ptr(a as *mut u32) }.fetch_or(v, Relaxed);
    }
    unsafe fn add_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { AtomicU64::from_ptr(a as *mut u64) }.fetch_add(v, Relaxed);
    }
}

/// Host bytes read as shared memory (by offset) or as a decode book.
pub(super) struct HostBytes(pub(super) u64);

// SAFETY: (every method) the caller passes offsets inside the buffer, as
// `Shared` and `Book` require.
impl Shared for HostBytes {
    unsafe fn lds_u8(&self, a: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_u8(self.0 + a as u64) }
    }
    unsafe fn lds_u32(&self, a: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_u32(self.0 + a as u64) }
    }
    unsafe fn sts_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.st_u32(self.0 + a as u64, v) }
    }
    unsafe fn sts_v4(&self, a: u32, v: [u32; 4]) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.st_v4(self.0 + a as u64, v) }
    }
    unsafe fn lds_v4(&self, a: u32) -> [u32; 4] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_v4(self.0 + a as u64) }
    }
    unsafe fn ors_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.or_u32(self.0 + a as u64, v) }
    }
}

// SAFETY: as above.
impl Book for HostBytes {
    unsafe fn ld_u8(&self, off: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_u8(self.0 + off as u64) }
    }
    unsafe fn ld_u32(&self, off: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_u32(self.0 + off as u64) }
    }
    unsafe fn ld_v2(&self, off: u32) -> [u32; 2] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        std::array::from_fn(|i| unsafe { EmuMem.ld_u32(self.0 + (off + 4 * i as u32) as u64) })
    }
    unsafe fn ld_v4(&self, off: u32) -> [u32; 4] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        std::array::from_fn(|i| unsafe { EmuMem.ld_u32(self.0 + (off + 4 * i as u32) as u64) })
    }
}

// SAFETY: (every method) forwarded to `EmuMem`, as `Mem` requires.
impl Mem for EmuLane<'_> {
    unsafe fn ld_u8(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_u8(a) }
    }
    unsafe fn ld_u32(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_u32(a) }
    }
    unsafe fn ld_u64(&self, a: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_u64(a) }
    }
    unsafe fn ld_ro_u64(&self, a: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_ro_u64(a) }
    }
    unsafe fn ld_v4(&self, a: u64) -> [u32; 4] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.ld_v4(a) }
    }
    unsafe fn st_u8(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.st_u8(a, v) }
    }
    unsafe fn st_u16(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.st_u16(a, v) }
    }
    unsafe fn st_u32(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.st_u32(a, v) }
    }
    unsafe fn st_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.st_u64(a, v) }
    }
    unsafe fn st_v4(&self, a: u64, v: [u32; 4]) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.st_v4(a, v) }
    }
    unsafe fn or_u32(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.or_u32(a, v) }
    }
    unsafe fn or_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.or_u64(a, v) }
    }
    unsafe fn min_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.min_u64(a, v) }
    }
    unsafe fn add_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { EmuMem.add_u64(a, v) }
    }
}

// SAFETY: (every method) the warp's shared memory is a host buffer at
// `smem`; offsets are checked against nothing, as on the GPU, so the tests
// give the kernel exactly the shared memory the host launcher would.
impl Shared for EmuLane<'_> {
    unsafe fn lds_u8(&self, a: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostBytes(self.smem).lds_u8(a) }
    }
    unsafe fn lds_u32(&self, a: u32) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostBytes(self.smem).lds_u32(a) }
    }
    unsafe fn sts_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostBytes(self.smem).sts_u32(a, v) }
    }
    unsafe fn sts_v4(&self, a: u32, v: [u32; 4]) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostBytes(self.smem).sts_v4(a, v) }
    }
    unsafe fn lds_v4(&self, a: u32) -> [u32; 4] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostBytes(self.smem).lds_v4(a) }
    }
    unsafe fn ors_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostBytes(self.smem).ors_u32(a, v) }
    }
}

/// Asynchronous copies as the hardware may perform them: a copy lands in
/// shared memory only when a wait says it must have (`cp.async.wait_all`:
/// every copy; `wait_group 1`: every committed group but the newest), so a
/// kernel that reads its workspace before waiting reads stale bytes here,
/// and the tests catch it.
impl Async for EmuLane<'_> {
    unsafe fn cp16(&self, dst: u32, src: u64) {
        // SAFETY: as `Async::cp16` requires of its caller.
        let v = unsafe { EmuMem.ld_v4(src) };
        let mut p = self.pending.borrow_mut();
        if p.is_empty() {
            p.push(Vec::new());
        }
        p.last_mut().unwrap().push((dst, v));
    }
    fn commit(&self) {
        // The open group is closed; later copies open a new one.
        self.pending.borrow_mut().push(Vec::new());
    }
    fn wait_all(&self) {
        let groups = std::mem::take(&mut *self.pending.borrow_mut());
        self.land(groups.into_iter().flatten());
    }
    fn wait_all_but_last(&self) {
        let mut p = self.pending.borrow_mut();
        // The open group (after the last commit) is not waited for, nor is
        // the newest committed group.
        let open = p.pop().unwrap_or_default();
        let newest = p.pop().unwrap_or_default();
        let done: Vec<_> = std::mem::take(&mut *p).into_iter().flatten().collect();
        p.push(newest);
        p.push(open);
        drop(p);
        self.land(done.into_iter());
    }
    fn sync_warp(&self) {
        self.wait(&self.ex.barrier);
    }
}

impl EmuLane<'_> {
    /// Write landed copies into shared memory.
    fn land(&self, copies: impl Iterator<Item = (u32, [u32; 4])>) {
        for (dst, v) in copies {
            // SAFETY: `dst` was a valid destination when the copy was issued.
            unsafe { HostBytes(self.smem).sts_v4(dst, v) };
        }
    }
}

/// Run `body` as one warp (32 lanes).
pub(super) fn run_warp(body: impl Fn(&EmuLane<'_>) + Sync) {
    run_warp_with(0, body)
}

/// Run `body` as one warp whose shared memory is the host buffer at `smem`.
pub(super) fn run_warp_with(smem: u64, body: impl Fn(&EmuLane<'_>) + Sync) {
    run_block(1, smem, |w, _| body(w))
}

/// Run `body` as a block of `warps` warps (32 lanes each, all at once:
/// they meet at the block's barrier) whose shared memory is the host buffer
/// at `smem`; `body` gets the warp's index in the block.
///
/// Q: why coroutines and not a thread a lane? A: a lane waits at a barrier
/// for every shuffle; with threads each wait is a sleep and a wake-up in the
/// kernel, and 32 threads a warp on a 2-core CI machine spent minutes doing
/// little else (the emulated encoder test alone took 316 s). A coroutine
/// switch is a few register moves. Lanes run in turn on the calling thread,
/// each until it waits at a barrier or ends; the schedule changes nothing a
/// kernel may rely on, since lanes only meet at barriers.
///
/// A lane that panics ends the block: the panic reaches the caller at once,
/// and the other lanes are unwound where they wait.
pub(super) fn run_block(warps: u32, smem: u64, body: impl Fn(&EmuLane<'_>, u32) + Sync) {
    use corosensei::{Coroutine, CoroutineResult, Yielder, stack::DefaultStack};
    let exs: Vec<Exchange> = (0..warps)
        .map(|_| Exchange {
            barrier: LaneBarrier::new(32),
            slots: std::array::from_fn(|_| AtomicU32::new(0)),
        })
        .collect();
    let block = LaneBarrier::new(32 * warps as usize);
    let progress = AtomicU64::new(0);
    let (body, block, progress) = (&body, &block, &progress);
    let mut lanes: Vec<Coroutine<(), (), ()>> = Vec::new();
    for (warp, ex) in exs.iter().enumerate() {
        for lane in 0..32 {
            let run = move |yielder: &Yielder<(), ()>, ()| {
                body(
                    &EmuLane {
                        lane,
                        ex,
                        block,
                        yielder,
                        progress,
                        smem,
                        pending: Default::default(),
                    },
                    warp as u32,
                );
                progress.fetch_add(1, Relaxed);
            };
            // 2 MiB, as a thread gets: the kernel bodies are deep in a
            // debug build.
            let stack = DefaultStack::new(2 << 20).expect("a lane's stack");
            // SAFETY: `run` borrows `exs`, `body`, `block` and `progress`,
            // which are declared before `lanes` and so outlive it; every
            // coroutine in `lanes` is dropped (run to its end, or unwound
            // by `Coroutine`'s drop) when `lanes` is, at the end of this
            // function or while a lane's panic unwinds through it; none is
            // forgotten.
            lanes.push(unsafe { Coroutine::with_stack_unchecked(stack, run) });
        }
    }
    let mut live: Vec<usize> = (0..lanes.len()).collect();
    while !live.is_empty() {
        let before = progress.load(Relaxed);
        live.retain(|&i| matches!(lanes[i].resume(()), CoroutineResult::Yield(())));
        assert!(
            live.is_empty() || progress.load(Relaxed) != before,
            "the emulated block is stuck: {} lanes wait at barriers that the others never reach",
            live.len()
        );
    }
}

impl Block for EmuLane<'_> {
    fn sync_threads(&self) {
        self.wait(self.block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_that_panics_fails_the_warp_instead_of_hanging_it() {
        // Lane 5 panics before the shuffle the other 31 wait at; with a
        // barrier that cannot be broken this test would never return.
        let r = std::panic::catch_unwind(|| {
            run_warp(|w| {
                assert!(w.lane() != 5, "lane 5 fails");
                w.shfl_idx(w.lane(), 0);
            })
        });
        assert!(r.is_err(), "the warp's panic reaches its caller");
        // A warp after it runs normally.
        let sum = AtomicU32::new(0);
        run_warp(|w| {
            sum.fetch_add(w.shfl_idx(w.lane(), 31), Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 32 * 31);
    }
}
