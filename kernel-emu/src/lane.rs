//! The emulated machine: the lanes of a block, each a coroutine on the
//! calling thread, meeting at a barrier for every shuffle and every
//! `sync_threads`; their shared memory; their asynchronous copies.

use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use ibp_kernels::simt::{Async, Block, Counter, Lanes, Mem, Shared};

use crate::mem::{Buffer, HostBytes, HostMem};

/// A barrier of `n` emulated lanes. A lane that arrives suspends itself
/// until the last one arrives and the round turns.
struct LaneBarrier {
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
struct Exchange {
    barrier: LaneBarrier,
    slots: [AtomicU32; 32],
}

/// A group of asynchronous copies: (shared destination, the 16 bytes read
/// at issue).
type CopyGroup = Vec<(u32, [u32; 4])>;

/// Where a lane sits in its launch.
#[derive(Clone, Copy, Debug)]
struct Place {
    warp: u32,
    warps: u32,
    block: u32,
    blocks: u32,
}

/// One lane (thread) of the emulated machine: what a kernel body gets
/// where the GPU gives it `ibp_kernels::hw::Hw`.
///
/// It implements every [`ibp_kernels::simt`] trait:
/// - [`Lanes`]: lane id, shuffles and ballot with the PTX semantics under
///   a full member mask; every lane of the warp must make the same
///   sequence of these calls, as on the GPU (a body that breaks the rule
///   makes the launch panic, "stuck", instead of hanging);
/// - [`Mem`]: global memory is host memory ([`HostMem`]);
/// - [`Shared`]: the block's shared memory, by offset;
/// - [`Async`]: `cp.async` copies land in shared memory only when a wait
///   says they must have, so a body that reads its workspace too early
///   reads stale bytes here, as it may on the GPU;
/// - [`Block`]: `sync_threads`, the block's barrier.
///
/// Its own methods give the ids that `ibp_kernels::arch` reads from
/// special registers on the GPU, so a body can take them as arguments.
pub struct Lane<'a> {
    lane: u32,
    place: Place,
    ex: &'a Exchange,
    /// The block's barrier (every lane of every warp of the block).
    block: &'a LaneBarrier,
    /// Suspends this lane's coroutine, handing the thread to the next lane.
    yielder: &'a corosensei::Yielder<(), ()>,
    /// Counts barrier arrivals and finished lanes, for the deadlock check.
    progress: &'a AtomicU64,
    /// Host address of the block's shared memory (0: none).
    smem: u64,
    /// This lane's asynchronous copies not yet landed: committed groups in
    /// order, then the open group.
    pending: RefCell<Vec<CopyGroup>>,
}

impl Lane<'_> {
    /// Warp index within the block (`arch::warp_in_block`).
    pub fn warp_in_block(&self) -> u32 {
        self.place.warp
    }
    /// Thread index within the block (`threadIdx.x`).
    pub fn thread_idx(&self) -> u32 {
        32 * self.place.warp + self.lane
    }
    /// Threads per block (`blockDim.x`).
    pub fn block_dim(&self) -> u32 {
        32 * self.place.warps
    }
    /// Block index (`blockIdx.x`).
    pub fn block_idx(&self) -> u32 {
        self.place.block
    }
    /// Blocks in the grid (`gridDim.x`).
    pub fn grid_dim(&self) -> u32 {
        self.place.blocks
    }
    /// Thread index in the grid (`arch::global_thread`).
    pub fn global_thread(&self) -> u64 {
        self.block_idx() as u64 * self.block_dim() as u64 + self.thread_idx() as u64
    }
    /// Threads in the grid (`arch::grid_threads`).
    pub fn grid_threads(&self) -> u64 {
        self.grid_dim() as u64 * self.block_dim() as u64
    }
    /// The warp's index in the grid and the grid's warps
    /// (`arch::global_warp`).
    pub fn global_warp(&self) -> (u64, u64) {
        let per_block = self.place.warps as u64;
        (
            self.place.block as u64 * per_block + self.place.warp as u64,
            self.place.blocks as u64 * per_block,
        )
    }
    /// Host address of the block's shared memory (0 when the launch has
    /// none): shared address `a` is host address `shared_base() + a`.
    pub fn shared_base(&self) -> u64 {
        self.smem
    }

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

    /// Write landed copies into shared memory.
    /// Land every committed group of copies but the newest `n`; the open
    /// group (after the last commit) is not waited for either.
    fn wait_all_but(&self, n: usize) {
        let mut p = self.pending.borrow_mut();
        let open = p.pop().unwrap_or_default();
        let keep = p.len().saturating_sub(n);
        let newest = p.split_off(keep);
        let done: Vec<_> = std::mem::take(&mut *p).into_iter().flatten().collect();
        p.extend(newest);
        p.push(open);
        drop(p);
        self.land(done.into_iter());
    }

    fn land(&self, copies: impl Iterator<Item = (u32, [u32; 4])>) {
        for (dst, v) in copies {
            // SAFETY: `dst` was a valid destination when the copy was
            // issued (`Async::cp16`'s contract).
            unsafe { HostBytes(self.smem).sts_v4(dst, v) };
        }
    }
}

impl std::fmt::Debug for Lane<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("lane", &self.lane)
            .field("warp", &self.place.warp)
            .field("block", &self.place.block)
            .finish()
    }
}

impl Lanes for Lane<'_> {
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

// SAFETY: forwarded to `HostMem`, as `Counter` requires.
impl Counter for Lane<'_> {
    unsafe fn fetch_add_u64(&self, a: u64, v: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.fetch_add_u64(a, v) }
    }
}

// SAFETY: (every method) forwarded to `HostMem`, as `Mem` requires.
impl Mem for Lane<'_> {
    unsafe fn ld_u8(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_u8(a) }
    }
    unsafe fn ld_u32(&self, a: u64) -> u32 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_u32(a) }
    }
    unsafe fn ld_u64(&self, a: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_u64(a) }
    }
    unsafe fn ld_ro_u64(&self, a: u64) -> u64 {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_ro_u64(a) }
    }
    unsafe fn ld_v4(&self, a: u64) -> [u32; 4] {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.ld_v4(a) }
    }
    unsafe fn st_u8(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.st_u8(a, v) }
    }
    unsafe fn st_u16(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.st_u16(a, v) }
    }
    unsafe fn st_u32(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.st_u32(a, v) }
    }
    unsafe fn st_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.st_u64(a, v) }
    }
    unsafe fn st_v4(&self, a: u64, v: [u32; 4]) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.st_v4(a, v) }
    }
    unsafe fn or_u32(&self, a: u64, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.or_u32(a, v) }
    }
    unsafe fn or_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.or_u64(a, v) }
    }
    unsafe fn min_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.min_u64(a, v) }
    }
    unsafe fn add_u64(&self, a: u64, v: u64) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostMem.add_u64(a, v) }
    }
}

// SAFETY: (every method) the block's shared memory is a host buffer at
// `smem`; offsets are checked against nothing, as on the GPU, so a test
// gives the kernel exactly the shared memory its launch would.
impl Shared for Lane<'_> {
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
    unsafe fn sts_u8(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostBytes(self.smem).sts_u8(a, v) }
    }
    unsafe fn sts_u16(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostBytes(self.smem).sts_u16(a, v) }
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
    unsafe fn adds_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract (this method's `# Safety`).
        unsafe { HostBytes(self.smem).adds_u32(a, v) }
    }
}

/// Asynchronous copies as the hardware may perform them: a copy lands in
/// shared memory only when a wait says it must have (`cp.async.wait_all`:
/// every copy; `wait_group 1`: every committed group but the newest).
impl Async for Lane<'_> {
    unsafe fn cp16(&self, dst: u32, src: u64) {
        // SAFETY: as `Async::cp16` requires of its caller.
        let v = unsafe { HostMem.ld_v4(src) };
        let mut p = self.pending.borrow_mut();
        match p.last_mut() {
            Some(open) => open.push((dst, v)),
            None => p.push(vec![(dst, v)]),
        }
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
        self.wait_all_but(1);
    }
    fn wait_all_but_two(&self) {
        self.wait_all_but(2);
    }
    fn sync_warp(&self) {
        self.wait(&self.ex.barrier);
    }
}

impl Block for Lane<'_> {
    fn sync_threads(&self) {
        self.wait(self.block);
    }
}

/// The shape of an emulated launch: `blocks` blocks of `warps_per_block`
/// warps, each block with `shared_bytes` of dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Blocks in the grid (`gridDim.x`).
    pub blocks: u32,
    /// Warps a block (`blockDim.x / 32`).
    pub warps_per_block: u32,
    /// Dynamic shared memory a block, in bytes.
    pub shared_bytes: usize,
}

impl Grid {
    /// `blocks` blocks of `warps_per_block` warps, no shared memory.
    pub fn new(blocks: u32, warps_per_block: u32) -> Self {
        Grid {
            blocks,
            warps_per_block,
            shared_bytes: 0,
        }
    }

    /// The same grid with `bytes` of dynamic shared memory a block.
    pub fn with_shared_bytes(self, bytes: usize) -> Self {
        Grid {
            shared_bytes: bytes,
            ..self
        }
    }
}

/// The byte a block's shared memory starts filled with in [`launch`].
///
/// Q: why not zero? A: the GPU promises nothing about shared memory at a
/// block's start; a body that reads it before writing it reads these
/// bytes and its test fails, instead of passing on zeros it would not get
/// on the GPU.
pub const SHARED_FILL: u8 = 0xa5;

/// Run `body` as every thread of `grid`, as a kernel launch would.
///
/// Blocks run one after another, each with fresh shared memory of
/// `grid.shared_bytes` bytes filled with [`SHARED_FILL`]; within a block
/// every lane of every warp runs at once, meeting the others at shuffles
/// and barriers. Q: why one block at a time? A: blocks of a launch cannot
/// wait for each other (no grid barrier), so any order is one the GPU may
/// choose; a body that only works in some order is wrong on the GPU too.
///
/// # Panics
/// When a lane panics (the panic reaches the caller, the other lanes are
/// unwound where they wait), and when the block is stuck: some lanes wait
/// at a barrier (a shuffle, `sync_warp`, `sync_threads`) that the others
/// have passed or never reach.
pub fn launch(grid: Grid, body: impl Fn(&Lane<'_>) + Sync) {
    for block in 0..grid.blocks {
        let mut smem = Buffer::zeroed(grid.shared_bytes);
        smem.bytes_mut().fill(SHARED_FILL);
        let smem_addr = if grid.shared_bytes == 0 {
            0
        } else {
            smem.addr()
        };
        run(
            Place {
                warp: 0,
                warps: grid.warps_per_block,
                block,
                blocks: grid.blocks,
            },
            smem_addr,
            |l| body(l),
        );
    }
}

/// Run `body` as one warp (32 lanes), with no shared memory.
pub fn run_warp(body: impl Fn(&Lane<'_>) + Sync) {
    run_warp_with(0, body)
}

/// Run `body` as one warp whose shared memory is the host memory at
/// `smem` (e.g. a [`Buffer::addr`]; 0 for none).
pub fn run_warp_with(smem: u64, body: impl Fn(&Lane<'_>) + Sync) {
    run_block(1, smem, |w, _| body(w))
}

/// Run `body` as one block of `warps` warps whose shared memory is the
/// host memory at `smem` (0 for none); `body` also gets the lane's warp
/// index in the block.
///
/// # Panics
/// As [`launch`].
pub fn run_block(warps: u32, smem: u64, body: impl Fn(&Lane<'_>, u32) + Sync) {
    let place = Place {
        warp: 0,
        warps,
        block: 0,
        blocks: 1,
    };
    run(place, smem, |l| body(l, l.place.warp))
}

/// Run one block.
///
/// Q: why coroutines and not a thread a lane? A: a lane waits at a barrier
/// for every shuffle; with threads each wait is a sleep and a wake-up in the
/// kernel, and 32 threads a warp on a 2-core machine spent minutes doing
/// little else (ibp's emulated encoder test took 316 s). A coroutine switch
/// is a few register moves. Lanes run in turn on the calling thread, each
/// until it waits at a barrier or ends; the schedule changes nothing a
/// kernel may rely on, since lanes only meet at barriers.
fn run(place: Place, smem: u64, body: impl Fn(&Lane<'_>) + Sync) {
    use corosensei::{Coroutine, CoroutineResult, Yielder, stack::DefaultStack};
    let exs: Vec<Exchange> = (0..place.warps)
        .map(|_| Exchange {
            barrier: LaneBarrier::new(32),
            slots: std::array::from_fn(|_| AtomicU32::new(0)),
        })
        .collect();
    let block = LaneBarrier::new(32 * place.warps as usize);
    let progress = AtomicU64::new(0);
    let (body, block, progress) = (&body, &block, &progress);
    let mut lanes: Vec<Coroutine<(), (), ()>> = Vec::new();
    for (warp, ex) in exs.iter().enumerate() {
        for lane in 0..32 {
            let place = Place {
                warp: warp as u32,
                ..place
            };
            let run = move |yielder: &Yielder<(), ()>, ()| {
                body(&Lane {
                    lane,
                    place,
                    ex,
                    block,
                    yielder,
                    progress,
                    smem,
                    pending: Default::default(),
                });
                progress.fetch_add(1, Relaxed);
            };
            let stack = STACKS
                .with(|s| s.borrow_mut().pop())
                .unwrap_or_else(|| DefaultStack::new(STACK_BYTES).expect("a lane's stack"));
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
    // Every lane has ended: its stack goes back to the pool.
    STACKS.with(|s| {
        let mut pool = s.borrow_mut();
        for c in lanes {
            if pool.len() < POOLED_STACKS {
                pool.push(c.into_stack());
            }
        }
    });
}

/// A lane's stack: 2 MiB, as a thread gets (kernel bodies are deep in a
/// debug build).
const STACK_BYTES: usize = 2 << 20;

/// Stacks kept for the next block: 16 warps' worth. Q: why a pool? A: a
/// stack is a fresh mapping (and a guard page) from the kernel; a test that
/// launches a few hundred small grids spent most of its time mapping and
/// unmapping them. Only the pages a lane touched stay resident.
const POOLED_STACKS: usize = 512;

thread_local! {
    /// The finished lanes' stacks, for this thread's next blocks.
    static STACKS: RefCell<Vec<corosensei::stack::DefaultStack>> = const { RefCell::new(Vec::new()) };
}
