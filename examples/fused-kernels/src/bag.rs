//! Embedding bags: `out[b] = Σ rows[ids[i]]` over the ids of bag `b`, in
//! id order, each element in f32 (bf16 rows are widened first, exactly).
//!
//! One warp per bag. Each lane owns the row elements of its 16-byte pieces
//! (elements `4·lane + 128·k ..` of an f32 row, `8·lane + 256·k ..` of a
//! bf16 row, step `k`), and adds every row of the bag to them in
//! registers: the decoded row never reaches memory. Each element's sum is
//! `((0 + r₀) + r₁) + …` in bag order, so a CPU sum in that order equals
//! it bit for bit.

use ibp_kernels::arch;
use ibp_kernels::device::{DatasetView, RowError, decode_fetched, decode_row, fetch_row};
use ibp_kernels::hw::{Hw, SharedBook};
use ibp_kernels::prelude::*;
use ibp_kernels::step::Sink;

use crate::BagParams;
use crate::util::{book_to_shared, code, global};

/// A bag's sum in registers: `S` steps of 16 bytes a lane, rows of f32
/// (`BF16 = false`) or bf16.
///
/// Q: why `S` copies of the accumulators selected by a loop, not an array
/// indexed by the step?
/// A: an array indexed by a value the compiler cannot know lives in local
/// memory; a loop over a constant `S` unrolls into `S` compares and keeps
/// every accumulator in a register.
pub struct BagSum<const S: usize, const BF16: bool> {
    acc: [[f32; 8]; S],
}

impl<const S: usize, const BF16: bool> BagSum<S, BF16> {
    /// Zeros.
    #[inline(always)]
    pub fn new() -> Self {
        BagSum { acc: [[0.0; 8]; S] }
    }

    /// Elements per 16-byte piece.
    const PER: u32 = if BF16 { 8 } else { 4 };

    /// Store the lane's elements of the sum at `out` (f32, `dim` of them).
    ///
    /// # Safety
    /// `out` is writable for `dim` f32.
    #[inline(always)]
    pub unsafe fn store(&self, out: u64, dim: u32) {
        let lane = warp::lane_id();
        let mut k = 0;
        while k < S {
            let first = (16 * lane + 512 * k as u32) / (16 / Self::PER);
            let mut j = 0;
            while j < Self::PER {
                if first + j < dim {
                    // SAFETY: element first + j < dim of `out`.
                    unsafe {
                        arch::st_global_u32(
                            out + 4 * (first + j) as u64,
                            self.acc[k][j as usize].to_bits(),
                        )
                    };
                }
                j += 1;
            }
            k += 1;
        }
    }

    /// Add the 16 bytes `w` (`n` of them valid) of the step `ob / 512`.
    #[inline(always)]
    fn add(&mut self, ob: u32, w: [u32; 4], n: u32) {
        let s = ob / 512;
        let mut k = 0;
        while k < S {
            if k as u32 == s {
                let a = &mut self.acc[k];
                if BF16 {
                    let mut j = 0;
                    while j < 8 {
                        if 2 * j < n {
                            let h = w[j as usize / 2] >> (16 * (j % 2)) & 0xffff;
                            a[j as usize] += f32::from_bits(h << 16);
                        }
                        j += 1;
                    }
                } else {
                    let mut j = 0;
                    while j < 4 {
                        if 4 * j < n {
                            a[j as usize] += f32::from_bits(w[j as usize]);
                        }
                        j += 1;
                    }
                }
            }
            k += 1;
        }
    }
}

impl<const S: usize, const BF16: bool> Default for BagSum<S, BF16> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const S: usize, const BF16: bool> Sink for BagSum<S, BF16> {
    #[inline(always)]
    fn put(&mut self, ob: u32, w: [u32; 4], n: u32) {
        self.add(ob, w, n);
    }
}

/// The global form of the parameters (the host passes generic addresses).
#[inline(always)]
fn globals(p: BagParams) -> BagParams {
    BagParams {
        view: p.view.to_global(),
        plain: global(p.plain),
        ids: global(p.ids),
        bag_starts: global(p.bag_starts),
        out: global(p.out),
        status: global(p.status),
        ..p
    }
}

/// The ids `a .. b` of bag `bag`.
///
/// # Safety
/// `bag < p.bags`.
#[inline(always)]
unsafe fn bag_range(p: &BagParams, bag: u32) -> (u32, u32) {
    // SAFETY: bag + 1 <= bags, inside `bag_starts`.
    unsafe {
        (
            arch::ld_global_u32(p.bag_starts + 4 * bag as u64),
            arch::ld_global_u32(p.bag_starts + 4 * bag as u64 + 4),
        )
    }
}

/// Row id `i` of the bags.
///
/// # Safety
/// `i` is below the last `bag_starts` entry.
#[inline(always)]
unsafe fn row_id(p: &BagParams, i: u32) -> u64 {
    if p.ids == 0 {
        i as u64
    } else {
        // SAFETY: the caller's.
        unsafe { arch::ld_global_u32(p.ids + 4 * i as u64) as u64 }
    }
}

/// Decode rows `ids[a .. b]` into `sink`, each row's first `N` pieces a
/// lane loaded while the row before it decodes ([`fetch_row`]); the bag's
/// status (the last error's code, or OK).
///
/// # Safety
/// `p`'s view is a dataset's, `book` its decode book, `ws` this warp's
/// workspace; `a ≤ b ≤ bag_starts[bags]`.
#[inline(always)]
unsafe fn decode_bag<K: Sink, const N: usize>(
    p: &BagParams,
    book: &SharedBook,
    ws: u32,
    a: u32,
    b: u32,
    sink: &mut K,
) -> u32 {
    let mut status = crate::OK;
    // SAFETY: (row_id, fetch_row) i < b, inside the ids; the view is a
    // dataset's.
    let mut cur = if a < b {
        unsafe { fetch_row::<_, N>(&Hw, &p.view, row_id(p, a)) }
    } else {
        Err(RowError::BadIndex)
    };
    let mut i = a;
    while i < b {
        let next = if i + 1 < b {
            // SAFETY: as above.
            unsafe { fetch_row::<_, N>(&Hw, &p.view, row_id(p, i + 1)) }
        } else {
            Err(RowError::BadIndex)
        };
        // SAFETY: the caller's (book, workspace); `f` is this view's.
        let r = cur.and_then(|f| unsafe { decode_fetched(&Hw, &p.view, book, ws, &f, sink) });
        if r.is_err() {
            status = code(r);
        }
        cur = next;
        i += 1;
    }
    status
}

/// The fused kernel's body: decode each row of the warp's bags into a
/// [`BagSum`], the decode book in shared memory (once per block).
///
/// # Safety
/// `p`'s buffers are as [`BagParams`] states, the view is a dataset's
/// (`GpuDataset::device_view`), and the launch gives `p.book_smem` (the
/// whole book) plus `p.ws_bytes` per warp of dynamic shared memory.
#[inline(always)]
unsafe fn fused<const S: usize, const BF16: bool, const N: usize>(p: BagParams) {
    let p = globals(p);
    // SAFETY: the launch's shared memory holds the book first.
    let ws0 = unsafe { book_to_shared(p.view.book, p.book_smem) };
    let book = SharedBook(arch::dyn_smem_base());
    let ws = ws0 + warp::warp_id() * p.ws_bytes;
    let (first, warps) = warp::global_warp();
    let mut bag = first;
    while bag < p.bags as u64 {
        // SAFETY: bag < bags.
        let (a, b) = unsafe { bag_range(&p, bag as u32) };
        let mut sum = BagSum::<S, BF16>::new();
        // SAFETY: the kernel's contract: a dataset's view, its book in
        // shared memory, this warp's workspace; a .. b inside the ids.
        let status = unsafe { decode_bag::<_, N>(&p, &book, ws, a, b, &mut sum) };
        // SAFETY: bag < bags: its dim f32 of `out`, its status word.
        unsafe {
            sum.store(p.out + 4 * bag * p.dim as u64, p.dim);
            if warp::lane_id() == 0 {
                arch::st_global_u32(p.status + 4 * bag, status);
            }
        }
        bag += warps;
    }
}

/// The baselines' body: the same sum over plain rows (`p.plain`, in device
/// memory after a decode, or the uncompressed rows in pinned host memory),
/// 4-byte loads (rows need only be 4-aligned), fed to the same
/// [`BagSum`], hence the same order of additions.
///
/// # Safety
/// `p.plain` holds `view.rows` rows of `view.row_bytes` (a multiple of 4)
/// bytes; the rest as [`BagParams`] states.
#[inline(always)]
unsafe fn plain<const S: usize, const BF16: bool>(p: BagParams) {
    let p = globals(p);
    let l = p.view.row_bytes as u32;
    let lane = warp::lane_id();
    let (first, warps) = warp::global_warp();
    let mut bag = first;
    while bag < p.bags as u64 {
        // SAFETY: bag < bags.
        let (a, b) = unsafe { bag_range(&p, bag as u32) };
        let mut sum = BagSum::<S, BF16>::new();
        let mut status = crate::OK;
        let mut i = a;
        while i < b {
            // SAFETY: i < bag_starts[bags].
            let t = unsafe { row_id(&p, i) };
            if t >= p.view.rows {
                status = crate::BAD_INDEX;
            } else {
                let row = p.plain + t * l as u64;
                let mut w = [[0u32; 4]; S];
                // All loads first (S in flight), then the adds.
                let mut k = 0;
                while k < S {
                    let ob = 16 * lane + 512 * k as u32;
                    let mut q = 0;
                    while q < 4 {
                        if ob + 4 * q < l {
                            // SAFETY: a word of row t (t < rows).
                            w[k][q as usize] =
                                unsafe { arch::ld_global_u32(row + (ob + 4 * q) as u64) };
                        }
                        q += 1;
                    }
                    k += 1;
                }
                let mut k = 0;
                while k < S {
                    let ob = 16 * lane + 512 * k as u32;
                    sum.add(ob, w[k], l.saturating_sub(ob).min(16));
                    k += 1;
                }
            }
            i += 1;
        }
        // SAFETY: bag < bags.
        unsafe {
            sum.store(p.out + 4 * bag * p.dim as u64, p.dim);
            if lane == 0 {
                arch::st_global_u32(p.status + 4 * bag, status);
            }
        }
        bag += warps;
    }
}

/// The ideal: read each row's stored bytes exactly as `decode_row` fetches
/// them (whole 128-byte lines holding the slot, 16 bytes a lane, packed
/// layout) and do nothing else; the xor of the bag's bytes to `out[bag]`
/// (u32), so that the reads stay.
///
/// # Safety
/// As the fused kernel; the view is of the packed layout.
#[kernel]
pub unsafe fn bag_read(p: BagParams) {
    let p = globals(p);
    let v: DatasetView = p.view;
    let lane = warp::lane_id() as u64;
    let (first, warps) = warp::global_warp();
    let mut bag = first;
    while bag < p.bags as u64 {
        // SAFETY: bag < bags.
        let (a, b) = unsafe { bag_range(&p, bag as u32) };
        let mut x = 0u32;
        let mut i = a;
        while i < b {
            // SAFETY: i < bag_starts[bags].
            let t = unsafe { row_id(&p, i) };
            if t < v.rows {
                // SAFETY: t < rows: offsets t and t + 1.
                let (s, e) = unsafe {
                    (
                        arch::ld_global_u64(v.offsets + 8 * t),
                        arch::ld_global_u64(v.offsets + 8 * t + 8),
                    )
                };
                let line0 = (v.src + s) / 128;
                let pieces = ((v.src + e).div_ceil(128) - line0) * 8;
                let mut q = lane;
                while q < pieces {
                    // SAFETY: whole lines overlapping the slot (as decode_row).
                    let w = unsafe { arch::ld_global_v4(line0 * 128 + q * 16) };
                    x ^= w[0] ^ w[1] ^ w[2] ^ w[3];
                    q += 32;
                }
            }
            i += 1;
        }
        let x = warp::shuffle_xor(x, 16) ^ x;
        let x = warp::shuffle_xor(x, 8) ^ x;
        let x = warp::shuffle_xor(x, 4) ^ x;
        let x = warp::shuffle_xor(x, 2) ^ x;
        let x = warp::shuffle_xor(x, 1) ^ x;
        if lane == 0 {
            // SAFETY: bag < bags, one u32 of `out` each.
            unsafe { arch::st_global_u32(p.out + 4 * bag, x) };
        }
        bag += warps;
    }
}

/// A bag's sum of f32 rows in shared memory, for rows too long to keep in
/// registers (Cora's 5732 bytes: 12 steps). Each lane adds to the elements
/// of its own pieces, as [`BagSum`] does, so no lane touches another's and
/// the order of additions is the same.
pub struct SharedBagSum {
    acc: u32,
}

impl SharedBagSum {
    /// Zero the `dim` f32 at shared address `acc` (this warp's; 16-aligned,
    /// `dim` rounded up to 4 elements) and take them.
    ///
    /// # Safety
    /// The region is this warp's shared memory.
    #[inline(always)]
    pub unsafe fn new(acc: u32, dim: u32) -> Self {
        let mut ob = 16 * warp::lane_id();
        while ob < 4 * dim {
            // SAFETY: inside the region (ob < 4·dim rounded up to 16).
            unsafe { arch::st_shared_v4(acc + ob, [0; 4]) };
            ob += 512;
        }
        SharedBagSum { acc }
    }

    /// Store the lane's elements at `out` (f32, `dim` of them).
    ///
    /// # Safety
    /// `out` is writable for `dim` f32.
    #[inline(always)]
    pub unsafe fn store(&self, out: u64, dim: u32) {
        let mut ob = 16 * warp::lane_id();
        while ob < 4 * dim {
            let mut j = 0;
            while j < 4 && ob + 4 * j < 4 * dim {
                // SAFETY: the lane's own element of the region and of `out`.
                unsafe {
                    let v = arch::ld_shared_u32(self.acc + ob + 4 * j);
                    arch::st_global_u32(out + (ob + 4 * j) as u64, v);
                }
                j += 1;
            }
            ob += 512;
        }
    }

    /// Add the f32 of `w` (`n` bytes valid) at row offset `ob`.
    #[inline(always)]
    fn add(&mut self, ob: u32, w: [u32; 4], n: u32) {
        let mut j = 0;
        while j < 4 {
            if 4 * j < n {
                let a = self.acc + ob + 4 * j;
                // SAFETY: ob + 4j < L = 4·dim: the lane's own element.
                unsafe {
                    let v = f32::from_bits(arch::ld_shared_u32(a)) + f32::from_bits(w[j as usize]);
                    arch::st_shared_u32(a, v.to_bits());
                }
            }
            j += 1;
        }
    }
}

impl Sink for SharedBagSum {
    #[inline(always)]
    fn put(&mut self, ob: u32, w: [u32; 4], n: u32) {
        self.add(ob, w, n);
    }
}

/// Fused embedding bag of f32 rows of any length, the sum in shared memory
/// ([`SharedBagSum`]): after the book, each warp's workspace
/// (`ws_bytes`, which here includes the accumulator: `workspace_bytes()`
/// then `4·dim` rounded up to 16).
///
/// # Safety
/// See [`BagParams`]; the launch gives `book_smem` (rounded up to 16) `+ ws_bytes × warps` of
/// dynamic shared memory.
#[kernel]
pub unsafe fn bag_fused_f32_smem(p: BagParams) {
    let p = globals(p);
    // SAFETY: the launch's shared memory holds the book first.
    let ws0 = unsafe { book_to_shared(p.view.book, p.book_smem) };
    let book = SharedBook(arch::dyn_smem_base());
    let ws = ws0 + warp::warp_id() * p.ws_bytes;
    let acc = ws + p.view.workspace_bytes();
    let (first, warps) = warp::global_warp();
    let mut bag = first;
    while bag < p.bags as u64 {
        // SAFETY: bag < bags.
        let (a, b) = unsafe { bag_range(&p, bag as u32) };
        // SAFETY: the warp's region after its workspace.
        let mut sum = unsafe { SharedBagSum::new(acc, p.dim) };
        // SAFETY: a dataset's view, its book in shared memory, this warp's
        // workspace; a .. b inside the ids. Rows of up to 512 stored bytes
        // (most of Cora's) are held whole.
        // One row at a time: these rows (Cora's) decode 5732 bytes from
        // ~240, bound by the decode's instructions, and fetching the next
        // row ahead (`decode_bag`) measured 6–18% slower here (H200 and
        // H100, 2026-11-26): its registers live across the decode. In
        // blocks of sixteen warps, one piece a lane ahead: 5.09 ms against
        // 4.81 one at a time (H200, 2026-11-27): the host reads still
        // arrive after the decode of the row before.
        let mut status = crate::OK;
        let mut i = a;
        while i < b {
            // SAFETY: i < bag_starts[bags].
            let t = unsafe { row_id(&p, i) };
            // SAFETY: a dataset's view, its book in shared memory, this
            // warp's workspace.
            let r = unsafe { decode_row(&Hw, &p.view, &book, ws, t, &mut sum) };
            if r.is_err() {
                status = code(r);
            }
            i += 1;
        }
        // SAFETY: bag < bags.
        unsafe {
            sum.store(p.out + 4 * bag * p.dim as u64, p.dim);
            if warp::lane_id() == 0 {
                arch::st_global_u32(p.status + 4 * bag, status);
            }
        }
        bag += warps;
    }
}

/// The same sum over plain f32 rows of any length (4-aligned), in shared
/// memory: `ws_bytes` per warp holds the accumulator at its start.
///
/// # Safety
/// `p.plain` holds `view.rows` rows of `view.row_bytes` bytes; the launch
/// gives `ws_bytes × warps` of dynamic shared memory.
#[kernel]
pub unsafe fn bag_plain_f32_smem(p: BagParams) {
    let p = globals(p);
    let l = p.view.row_bytes as u32;
    let lane = warp::lane_id();
    let acc = arch::dyn_smem_base() + warp::warp_id() * p.ws_bytes;
    let (first, warps) = warp::global_warp();
    let mut bag = first;
    while bag < p.bags as u64 {
        // SAFETY: bag < bags.
        let (a, b) = unsafe { bag_range(&p, bag as u32) };
        // SAFETY: the warp's region.
        let mut sum = unsafe { SharedBagSum::new(acc, p.dim) };
        let mut status = crate::OK;
        let mut i = a;
        while i < b {
            // SAFETY: i < bag_starts[bags].
            let t = unsafe { row_id(&p, i) };
            if t >= p.view.rows {
                status = crate::BAD_INDEX;
                i += 1;
                continue;
            }
            let row = p.plain + t * l as u64;
            // Four steps' loads in flight, then their adds.
            let mut ob0 = 16 * lane;
            while ob0 < l {
                let mut w = [[0u32; 4]; 4];
                let mut k = 0;
                while k < 4 {
                    let ob = ob0 + 512 * k as u32;
                    let mut q = 0;
                    while q < 4 {
                        if ob + 4 * q < l {
                            // SAFETY: a word of row t.
                            w[k][q as usize] =
                                unsafe { arch::ld_global_u32(row + (ob + 4 * q) as u64) };
                        }
                        q += 1;
                    }
                    k += 1;
                }
                let mut k = 0;
                while k < 4 {
                    let ob = ob0 + 512 * k as u32;
                    if ob < l {
                        sum.add(ob, w[k], (l - ob).min(16));
                    }
                    k += 1;
                }
                ob0 += 4 * 512;
            }
            i += 1;
        }
        // SAFETY: bag < bags.
        unsafe {
            sum.store(p.out + 4 * bag * p.dim as u64, p.dim);
            if lane == 0 {
                arch::st_global_u32(p.status + 4 * bag, status);
            }
        }
        bag += warps;
    }
}

macro_rules! bag_kernels {
    ($fused:ident, $plain:ident, $s:literal, $bf16:literal, $n:literal) => {
        #[doc = concat!("Fused embedding bag (see the module), rows of at most ", stringify!($s), " steps of 512 bytes.")]
        ///
        /// # Safety
        /// See [`BagParams`]; the launch gives `book_smem` (rounded up to 16) `+ ws_bytes ×
        /// warps` of dynamic shared memory.
        #[kernel]
        pub unsafe fn $fused(p: BagParams) {
            // SAFETY: the kernel's contract.
            unsafe { fused::<$s, $bf16, $n>(p) }
        }

        /// The same sum over plain rows (see the module).
        ///
        /// # Safety
        /// See [`BagParams`].
        #[kernel]
        pub unsafe fn $plain(p: BagParams) {
            // SAFETY: the kernel's contract.
            unsafe { plain::<$s, $bf16>(p) }
        }
    };
}

// MiniLM bf16 (768 B rows) and f32 (1536 B); longer rows (Cora's 5732 B)
// take the `_smem` kernels.
// The last literal: pieces a lane held while the previous row decodes
// (512 bytes a row each; the rest is loaded when the row decodes).
bag_kernels!(bag_fused_bf16_s2, bag_plain_bf16_s2, 2, true, 2);
bag_kernels!(bag_fused_f32_s3, bag_plain_f32_s3, 3, false, 3);
