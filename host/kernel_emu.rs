//! The GPU fit and compression kernel bodies (`ibp_kernels::encode`), run on
//! the CPU by an emulated warp: 32 threads, one per lane, that meet at a
//! barrier for every shuffle. Slow, but it runs the very code the GPU runs,
//! on machines without one (CI), and compares it with the CPU encoder byte
//! for byte. The same comparisons run on the GPU in `tests/gpu_compress.rs`.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering::Relaxed};

use ibp_kernels::encode::{self, WarpWriter};
use ibp_kernels::params::{EncodeParams, MeasureParams};
use ibp_kernels::simt::{Async, Book, Lanes, Mem, Shared};

use crate::codebook::{ChunkSize, Codebook, Threshold};
use crate::dataset::Rows;
use crate::fit::{FitOptions, count_bits, fit};
use crate::kernel_tables::{decode_book, decoder_table, encoder_book, eval_book};
use crate::layout::{compress_fixed, compress_packed, size_query};

/// The shuffle exchange shared by the 32 lane threads.
struct Exchange {
    barrier: Barrier,
    slots: [AtomicU32; 32],
}

/// One lane of the emulated warp.
/// A group of asynchronous copies: (shared destination, 16 bytes).
type CopyGroup = Vec<(u32, [u32; 4])>;

struct EmuLane<'a> {
    lane: u32,
    ex: &'a Exchange,
    /// Host address of the warp's shared memory (0: none).
    smem: u64,
    /// This lane's asynchronous copies not yet landed: committed groups in
    /// order, then the open group (destination, the 16 bytes read at issue).
    pending: std::cell::RefCell<Vec<CopyGroup>>,
}

impl EmuLane<'_> {
    fn exchange(&self, x: u32, src: u32) -> u32 {
        self.ex.slots[self.lane as usize].store(x, Relaxed);
        self.ex.barrier.wait();
        let r = self.ex.slots[src as usize].load(Relaxed);
        self.ex.barrier.wait();
        r
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

/// Host memory through atomics (lanes are threads; a word two lanes OR into
/// must not be a data race).
struct EmuMem;

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
struct HostBytes(u64);

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
        self.ex.barrier.wait();
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

/// Run `body` as one warp (32 lane threads).
fn run_warp(body: impl Fn(&EmuLane<'_>) + Sync) {
    run_warp_with(0, body)
}

/// Run `body` as one warp whose shared memory is the host buffer at `smem`.
fn run_warp_with(smem: u64, body: impl Fn(&EmuLane<'_>) + Sync) {
    let ex = Exchange {
        barrier: Barrier::new(32),
        slots: std::array::from_fn(|_| AtomicU32::new(0)),
    };
    std::thread::scope(|s| {
        for lane in 0..32 {
            let (ex, body) = (&ex, &body);
            s.spawn(move || {
                body(&EmuLane {
                    lane,
                    ex,
                    smem,
                    pending: Default::default(),
                })
            });
        }
    });
}

/// u64 words aligned for the emulated kernels (a `Vec<u8>` is only
/// byte-aligned), viewed as bytes.
struct Aligned(Vec<u64>, usize);

impl Aligned {
    fn zeroed(len: usize) -> Self {
        Aligned(vec![0; len.div_ceil(8) + 1], len)
    }
    fn from(bytes: &[u8]) -> Self {
        let mut a = Self::zeroed(bytes.len());
        a.bytes_mut().copy_from_slice(bytes);
        a
    }
    fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.0)[..self.1]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.1;
        &mut bytemuck::cast_slice_mut(&mut self.0)[..n]
    }
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Rows that mostly repeat a base pattern (so codebooks have invariant
/// bits), with noise, and a few rows of pure noise (stored raw).
fn dataset(rows: usize, l: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let base: Vec<u8> = (0..l).map(|_| xorshift(&mut s) as u8).collect();
    let mut out = Vec::with_capacity(rows * l);
    for r in 0..rows {
        let noisy = r % 7 == 3;
        for &b in &base {
            let x = xorshift(&mut s);
            out.push(match (noisy, x % 10) {
                (true, _) | (false, 0) => (x >> 8) as u8,
                (false, 1) => b ^ (1 << ((x >> 16) % 8)),
                _ => b,
            });
        }
    }
    out
}

/// Stored lengths from the emulated `size` body.
fn emu_sizes(cb: &Codebook, rows: Rows<'_>, stage: Option<&mut Aligned>) -> Vec<u64> {
    let src = Aligned::from(rows.bytes());
    let book = encoder_book(cb);
    let sizes = Aligned::zeroed(8 * rows.rows());
    let l = rows.row_bytes() as u64;
    let stage_stride = l.next_multiple_of(8);
    let p = MeasureParams {
        src: src.addr(),
        stride: l,
        rows: rows.rows() as u64,
        sample: rows.rows() as u64,
        row_bytes: l,
        book: book.as_ptr() as u64,
        sizes: sizes.addr(),
        stage: stage.as_ref().map_or(0, |s| s.addr()),
        stage_stride,
        chunk: cb.chunk().bytes(),
        ..Default::default()
    };
    // SAFETY: every buffer is sized as MeasureParams requires and outlives
    // the warp.
    run_warp(|w| unsafe {
        match cb.chunk() {
            ChunkSize::One => encode::size::<_, _, 1>(w, &EmuMem, &p, 0, 1),
            ChunkSize::Two => encode::size::<_, _, 2>(w, &EmuMem, &p, 0, 1),
            ChunkSize::Four => encode::size::<_, _, 4>(w, &EmuMem, &p, 0, 1),
            ChunkSize::Eight => encode::size::<_, _, 8>(w, &EmuMem, &p, 0, 1),
        }
    });
    bytemuck::cast_slice::<u8, u64>(sizes.bytes()).to_vec()
}

/// Output bytes of the emulated `encode` body: packed when `offsets` is
/// given (with `base` subtracted from each), fixed-stride otherwise.
fn emu_encode(
    cb: &Codebook,
    rows: Rows<'_>,
    sizes: &[u64],
    offsets: Option<(&[u64], u64)>,
    out_len: usize,
) -> Vec<u8> {
    let src = Aligned::from(rows.bytes());
    let book = encoder_book(cb);
    let out = Aligned::zeroed(out_len);
    let p = EncodeParams {
        src: src.addr(),
        stride: rows.row_bytes() as u64,
        rows: rows.rows() as u64,
        row_bytes: rows.row_bytes() as u64,
        book: book.as_ptr() as u64,
        sizes: sizes.as_ptr() as u64,
        offsets: offsets.map_or(0, |(o, _)| o.as_ptr() as u64),
        offset_base: offsets.map_or(0, |(_, b)| b),
        out: out.addr(),
    };
    // SAFETY: as in emu_sizes; the output covers every region.
    run_warp(|w| unsafe {
        match cb.chunk() {
            ChunkSize::One => encode::encode::<_, _, 1>(w, &EmuMem, &p, 0, 1),
            ChunkSize::Two => encode::encode::<_, _, 2>(w, &EmuMem, &p, 0, 1),
            ChunkSize::Four => encode::encode::<_, _, 4>(w, &EmuMem, &p, 0, 1),
            ChunkSize::Eight => encode::encode::<_, _, 8>(w, &EmuMem, &p, 0, 1),
        }
    });
    out.bytes().to_vec()
}

#[test]
fn emulated_size_and_encode_equal_the_cpu_encoder() {
    for (seed, (l, n)) in [
        (1usize, 9usize),
        (3, 12),
        (8, 10),
        (13, 9),
        (64, 8),
        (301, 6),
    ]
    .into_iter()
    .enumerate()
    {
        let data = dataset(n, l, 7 + seed as u64);
        let rows = Rows::new(&data, l).unwrap();
        let counts = count_bits(rows);
        for chunk in ChunkSize::ALL {
            let t = Threshold::from_basis_points(8000).unwrap();
            let cb = Codebook::from_counts(&counts, n as u64, t, chunk).unwrap();
            let what = format!("L={l} C={chunk}");

            let mut stage = Aligned::zeroed(n * l.next_multiple_of(8));
            let sizes = emu_sizes(&cb, rows, Some(&mut stage));
            let want = size_query(&cb, rows).unwrap();
            assert_eq!(sizes, want.stored, "sizes {what}");
            for (i, row) in rows.iter().enumerate() {
                let s = l.next_multiple_of(8) * i;
                assert_eq!(&stage.bytes()[s..s + l], row, "staged row {i} {what}");
            }

            let packed = compress_packed(&cb, rows).unwrap();
            let got = emu_encode(
                &cb,
                rows,
                &sizes,
                Some((&packed.offsets, 0)),
                packed.payload.len(),
            );
            assert_eq!(got, packed.payload, "packed {what}");

            // A batch of the packed layout: offsets that start at `base`.
            let base = 1000;
            let shifted: Vec<u64> = packed.offsets.iter().map(|o| o + base).collect();
            let got = emu_encode(
                &cb,
                rows,
                &sizes,
                Some((&shifted, base)),
                packed.payload.len(),
            );
            assert_eq!(got, packed.payload, "packed with a base {what}");

            let fixed = compress_fixed(&cb, rows).unwrap();
            let got = emu_encode(&cb, rows, &sizes, None, fixed.slots.len());
            assert_eq!(got, fixed.slots, "fixed {what}");
        }
    }
}

#[test]
fn emulated_evaluation_equals_the_cpu_fit() {
    for (l, n, sample) in [(5usize, 40usize, 40u64), (24, 33, 11), (70, 20, 20)] {
        let data = dataset(n, l, l as u64);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_sample(crate::fit::Sample::Count(sample));
        let cpu = fit(rows, &opts).unwrap();
        // Counts of the sample, books of the six default thresholds.
        let plan = crate::fit::SamplePlan::new(n as u64, opts.sample).unwrap();
        let sample_rows: Vec<u8> = (0..plan.len())
            .flat_map(|i| rows.row(plan.index(i) as usize).to_vec())
            .collect();
        let counts = count_bits(Rows::new(&sample_rows, l).unwrap());
        let books: Vec<(Vec<u8>, Vec<u8>)> = opts
            .thresholds
            .iter()
            .map(|&t| crate::codebook::mask_and_bitval(&counts, plan.len(), t))
            .collect();
        let book = eval_book(&books);
        let src = Aligned::from(&data);
        let totals = vec![0u64; 64];
        let p = MeasureParams {
            src: src.addr(),
            stride: l as u64,
            rows: n as u64,
            sample: plan.len(),
            row_bytes: l as u64,
            book: book.as_ptr() as u64,
            totals: totals.as_ptr() as u64,
            nt: books.len() as u32,
            ..Default::default()
        };
        // SAFETY: buffers sized as MeasureParams requires.
        run_warp(|w| unsafe { encode::eval(w, &EmuMem, &p, 0, 1) });
        for cand in &cpu.candidates {
            let t = opts
                .thresholds
                .iter()
                .position(|&x| x == cand.threshold)
                .unwrap();
            let lane = 4 * t + cand.chunk.bytes().trailing_zeros() as usize;
            assert_eq!(
                (totals[2 * lane], totals[2 * lane + 1]),
                (cand.stored_bytes, cand.encoded_rows),
                "L={l} {cand:?}"
            );
        }
    }
}

/// Reference: the bit stream of segments, laid end to end from bit `s0`.
fn reference_stream(segs: &[(u64, u32)], s0: u64, bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes];
    let mut pos = s0;
    for &(v, n) in segs {
        for b in 0..n as u64 {
            if v >> b & 1 == 1 {
                out[((pos + b) / 8) as usize] |= 1 << ((pos + b) % 8);
            }
        }
        pos += n as u64;
    }
    out
}

#[test]
fn warp_writer_lays_random_segments_end_to_end() {
    let mut s = 99u64;
    for case in 0..24 {
        // Steps of 32 segments, often empty or tiny (high compression),
        // sometimes 64 bits (raw), at every byte alignment.
        let steps = 1 + case % 3;
        let segs: Vec<(u64, u32)> = (0..32 * steps)
            .map(|_| {
                let r = xorshift(&mut s);
                let n = match (case / 3) % 4 {
                    0 => (r % 4) as u32,
                    1 => (r % 65) as u32,
                    2 => 64,
                    _ => [0, 1, 31, 32, 33, 63][(r % 6) as usize],
                };
                (xorshift(&mut s) & crate_low_mask(n), n)
            })
            .collect();
        let bits: u64 = segs.iter().map(|&(_, n)| n as u64).sum();
        let shift = case as u64 % 4;
        let len = bits.div_ceil(8) as usize;
        let out = Aligned::zeroed(len + 8);
        let dst = out.addr() + shift;
        run_warp(|w| {
            let mut wr = WarpWriter::new(dst, len as u64);
            for k in 0..steps as usize {
                let (v, n) = segs[32 * k + w.lane() as usize];
                // SAFETY: the region is inside `out`, which is zeroed.
                unsafe { wr.step(w, &EmuMem, v, n) };
            }
            // SAFETY: as above.
            unsafe { wr.flush(w, &EmuMem) };
            assert_eq!(wr.written(), bits);
        });
        let want = reference_stream(&segs, 8 * shift, len + 8);
        assert_eq!(out.bytes(), &want[..], "case {case}");
    }
}

fn crate_low_mask(n: u32) -> u64 {
    ibp_kernels::bits::low_mask(n)
}

/// Decode one stored (encoded) tensor with the emulated batch-decoder step
/// (`ibp_kernels::step::decode_row`): the tensor sits at byte `shift` of a
/// workspace of garbage, the output row at byte `out_shift` of a poisoned
/// buffer. Returns the row, or `None` when the step reports corruption.
fn emu_decode_row(
    cb: &Codebook,
    stored: &[u8],
    e_bytes: u32,
    shift: usize,
    out_shift: usize,
    flags: u32,
) -> Option<Vec<u8>> {
    use ibp_kernels::book::Layout;
    use ibp_kernels::step::{Contig, Geometry, RowStore, decode_row};

    let l = cb.row_bytes();
    let mut ws = Aligned::from(&vec![0xa5u8; shift + stored.len() + 32]);
    ws.bytes_mut()[shift..shift + stored.len()].copy_from_slice(stored);
    let book = Aligned::from(&decode_book(cb));
    let entries = Aligned::from(&decoder_table(cb));
    let out = Aligned::from(&vec![0xeeu8; out_shift + l + 16]);
    let k = cb.chunks() as u32;
    let g = Geometry {
        chunks: k,
        row_bytes: l as u32,
        layout: Layout::new(k, cb.chunk().bytes()),
        entries: entries.addr(),
        flags,
    };
    let dst = out.addr() + out_shift as u64;
    let ok = AtomicU32::new(0);
    let ws_mem = HostBytes(ws.addr());
    let book_mem = HostBytes(book.addr());
    // SAFETY: the workspace holds the stored bytes plus 32 bytes, the book
    // and entries are this codebook's, the row is inside `out`.
    run_warp(|w| {
        // SAFETY: the row is inside `out`.
        let mut sink = unsafe { RowStore::new(&EmuMem, dst) };
        // SAFETY: as stated above the call: buffers sized for the kernel.
        let r = unsafe {
            match cb.chunk() {
                ChunkSize::One => decode_row::<1, _, _, _, _, _>(
                    w,
                    &mut Contig::new(&ws_mem, shift as u32),
                    &book_mem,
                    &EmuMem,
                    &g,
                    e_bytes,
                    &mut sink,
                ),
                ChunkSize::Two => decode_row::<2, _, _, _, _, _>(
                    w,
                    &mut Contig::new(&ws_mem, shift as u32),
                    &book_mem,
                    &EmuMem,
                    &g,
                    e_bytes,
                    &mut sink,
                ),
                ChunkSize::Four => decode_row::<4, _, _, _, _, _>(
                    w,
                    &mut Contig::new(&ws_mem, shift as u32),
                    &book_mem,
                    &EmuMem,
                    &g,
                    e_bytes,
                    &mut sink,
                ),
                ChunkSize::Eight => decode_row::<8, _, _, _, _, _>(
                    w,
                    &mut Contig::new(&ws_mem, shift as u32),
                    &book_mem,
                    &EmuMem,
                    &g,
                    e_bytes,
                    &mut sink,
                ),
            }
        };
        ok.fetch_add(r as u32, Relaxed);
    });
    let ok = ok.load(Relaxed);
    assert!(ok == 0 || ok == 32, "lanes disagree on the verdict");
    let row = out.bytes()[out_shift..out_shift + l].to_vec();
    assert!(
        out.bytes()[..out_shift].iter().all(|&b| b == 0xee),
        "wrote before the row"
    );
    assert!(
        out.bytes()[out_shift + l..].iter().all(|&b| b == 0xee),
        "wrote past the row"
    );
    (ok == 32).then_some(row)
}

/// f32 rows whose exponents vary little (free bits in two runs: the low
/// mantissa and the sign), with some outliers that do not match.
fn float_rows(rows: usize, l: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..rows * l.div_ceil(4))
        .flat_map(|_| {
            let x = xorshift(&mut s);
            let v = if x.is_multiple_of(13) {
                f32::from_bits(x as u32)
            } else {
                (1.0 + (x >> 40) as f32 / (1u64 << 24) as f32) * if x & 1 == 0 { 1.0 } else { -1.0 }
            };
            v.to_le_bytes()
        })
        .take(rows * l)
        .collect()
}

/// Sparse rows: mostly zero bytes (no free bits), a few random ones.
fn sparse_rows(rows: usize, l: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..rows * l)
        .map(|_| {
            let x = xorshift(&mut s);
            if x.is_multiple_of(97) {
                (x >> 8) as u8
            } else {
                0
            }
        })
        .collect()
}

#[test]
fn emulated_decode_step_equals_the_cpu_decoder_with_fast_paths_on_and_off() {
    use ibp_kernels::params::{DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX};
    let mut checked = [0usize; 4];
    for (kind, l, n) in [
        (0, 1usize, 12usize),
        (0, 13, 10),
        (1, 16, 8),
        (2, 100, 8),
        (0, 517, 6),
        (1, 1024, 5),
        (2, 1531, 5),
        (1, 2052, 4),
    ] {
        let seed = 11 + l as u64;
        let data = match kind {
            0 => dataset(n, l, seed),
            1 => float_rows(n, l, seed),
            _ => sparse_rows(n, l, seed),
        };
        let rows = Rows::new(&data, l).unwrap();
        let counts = count_bits(rows);
        for chunk in ChunkSize::ALL {
            for bp in [6000, 9000] {
                let t = Threshold::from_basis_points(bp).unwrap();
                let cb = Codebook::from_counts(&counts, n as u64, t, chunk).unwrap();
                let packed = compress_packed(&cb, rows).unwrap();
                for (i, row) in rows.iter().enumerate() {
                    let (a, b) = (packed.offsets[i] as usize, packed.offsets[i + 1] as usize);
                    if packed.flags[i / 8] >> (i % 8) & 1 == 0 {
                        continue;
                    }
                    let stored = &packed.payload[a..b];
                    let flags = [0, DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX, 3][i % 4];
                    let what = format!("kind {kind} L={l} C={chunk} T={bp} row {i} flags {flags}");
                    let got = emu_decode_row(
                        &cb,
                        stored,
                        stored.len() as u32,
                        i % 5,
                        (i * 3) % 17,
                        flags,
                    );
                    assert_eq!(got.as_deref(), Some(row), "{what}");
                    checked[chunk.bytes().trailing_zeros() as usize] += 1;
                    // A stored length that disagrees with the bits is corrupt.
                    if stored.len() > (cb.chunks().div_ceil(8)) + 1 {
                        let short =
                            emu_decode_row(&cb, stored, stored.len() as u32 - 1, 1, 0, flags);
                        assert_eq!(short, None, "short length accepted: {what}");
                    }
                }
            }
        }
    }
    assert!(
        checked.iter().all(|&c| c >= 8),
        "too few encoded rows checked: {checked:?}"
    );
}

/// A buffer whose first byte is 128-aligned, with a line of slack after its
/// end: the decoder fetches whole 128-byte lines around a tensor's bytes,
/// as a GPU allocation (256-byte aligned, whole pages) allows.
struct Lined(Vec<u64>, usize);

impl Lined {
    fn from(bytes: &[u8]) -> Self {
        let mut v = vec![0u64; bytes.len().div_ceil(8) + 48];
        let skip = (128 - (v.as_ptr() as usize % 128)) % 128;
        bytemuck::cast_slice_mut::<u64, u8>(&mut v)[skip..skip + bytes.len()]
            .copy_from_slice(bytes);
        Lined(v, skip)
    }
    fn addr(&self) -> u64 {
        self.0.as_ptr() as u64 + self.1 as u64
    }
}

/// Which tensors an emulated launch decodes and how it is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EmuLayout {
    Packed,
    Fixed,
    FixedLengths,
}

/// Run the whole decode kernel (`ibp_kernels::decode::run`) on the CPU, one
/// emulated warp after another, as the host launcher would size it (batch
/// mode unless `streaming`, or when tensors are too long for it). Returns
/// the output rows (poisoned first) and the two status words.
#[allow(clippy::too_many_arguments)]
fn emu_kernel(
    cb: &Codebook,
    rows: Rows<'_>,
    layout: EmuLayout,
    index: Option<&[u64]>,
    count: u64,
    streaming: bool,
    fetch: u32,
    corrupt: Option<usize>,
) -> (Vec<u8>, [u64; 2]) {
    let wide: Option<Vec<u64>> = index.map(|ix| ix.to_vec());
    emu_kernel_with(
        cb,
        rows,
        layout,
        wide.as_deref().map(EmuIndex::U64),
        count,
        streaming,
        fetch,
        corrupt,
        rows.row_bytes(),
    )
}

/// Row numbers of an emulated gather, in either width.
#[derive(Clone, Copy)]
enum EmuIndex<'a> {
    U32(&'a [u32]),
    U64(&'a [u64]),
}

/// [`emu_kernel`] with u32 or u64 indices and output rows `stride` bytes
/// apart (the bytes between rows must stay poisoned).
#[allow(clippy::too_many_arguments)]
fn emu_kernel_with(
    cb: &Codebook,
    rows: Rows<'_>,
    layout: EmuLayout,
    index: Option<EmuIndex<'_>>,
    count: u64,
    streaming: bool,
    fetch: u32,
    corrupt: Option<usize>,
    stride: usize,
) -> (Vec<u8>, [u64; 2]) {
    use ibp_kernels::decode::{Launch, run};
    use ibp_kernels::params::{DECODE_MODE_DECODE, DecodeParams, workspace_bytes};

    let l = rows.row_bytes();
    let n = rows.rows();
    let c = cb.chunk().bytes();
    let k = cb.chunks();
    let (flags, offsets, mut payload, lengths) = match layout {
        EmuLayout::Packed => {
            let p = compress_packed(cb, rows).unwrap();
            (p.flags, Some(p.offsets), p.payload, None)
        }
        _ => {
            let f = compress_fixed(cb, rows).unwrap();
            let lens: Vec<u32> = (0..n)
                .map(|i| {
                    let s = &f.slots[i * l..(i + 1) * l];
                    if f.flags[i / 8] >> (i % 8) & 1 == 1 {
                        crate::encode::stream_len(cb, s).unwrap() as u32
                    } else {
                        l as u32
                    }
                })
                .collect();
            let lengths = (layout == EmuLayout::FixedLengths).then_some(lens);
            (f.flags, None, f.slots, lengths)
        }
    };
    // Corrupt one encoded tensor: set its last stored bit (padding or
    // payload), which the decoder must report, not decode.
    if let Some(t) = corrupt {
        let end = match &offsets {
            Some(o) => o[t + 1] as usize,
            None => t * l + lengths.as_ref().map_or(l, |x| x[t] as usize),
        };
        payload[end - 1] ^= 0x80;
    }
    let src = Lined::from(&payload);
    let offs = offsets
        .as_ref()
        .map(|o| Aligned::from(bytemuck::cast_slice(o)));
    let lens = lengths
        .as_ref()
        .map(|o| Aligned::from(bytemuck::cast_slice(o)));
    let flag_buf = Aligned::from(&flags);
    let table = Aligned::from(&decoder_table(cb));
    let book = Aligned::from(&decode_book(cb));
    let idx = index.map(|ix| match ix {
        EmuIndex::U32(v) => Aligned::from(bytemuck::cast_slice(v)),
        EmuIndex::U64(v) => Aligned::from(bytemuck::cast_slice(v)),
    });
    let out = Aligned::from(&vec![0xa7u8; (count as usize - 1) * stride + l]);
    let status = Aligned::from(bytemuck::cast_slice(&[0u64, u64::MAX]));
    // Geometry as the host launcher computes it (host/gpu/decode.rs).
    let span_max = (l as u64 + 127).div_ceil(128);
    let batch = !streaming && span_max <= 48;
    let (ring_lines, pbuf_words) = if batch {
        (2 * span_max.max(16) as u32, 0)
    } else {
        let pbytes = k.div_ceil(8) as u64;
        let min_lines = (pbytes.div_ceil(128) + 2).next_power_of_two();
        (
            min_lines.max(8) as u32,
            (k.div_ceil(32)).next_multiple_of(4) as u32,
        )
    };
    let book_smem = if batch { book.1 as u32 } else { 0 };
    let ws = workspace_bytes(pbuf_words, ring_lines);
    let p = DecodeParams {
        src: src.addr(),
        offsets: offs.as_ref().map_or(0, |o| o.addr()),
        flags: flag_buf.addr(),
        table: table.addr(),
        index: idx.as_ref().map_or(0, |i| i.addr()),
        first: 0,
        count,
        rows: n as u64,
        row_bytes: l as u64,
        out: out.addr(),
        out_stride: stride as u64,
        index_u32: matches!(index, Some(EmuIndex::U32(_))) as u32,
        status: status.addr(),
        chunk: c,
        ring_lines,
        pbuf_words,
        mode: DECODE_MODE_DECODE,
        batch: batch as u32,
        lengths: lens.as_ref().map_or(0, |x| x.addr()),
        fetch,
        offset_base: 0,
        book: book.addr(),
        book_smem_bytes: book_smem,
        ..Default::default()
    };
    let warps = 2u64;
    for warp in 0..warps {
        // The block's shared memory: the book (batch mode), then this
        // warp's workspace, filled with garbage.
        let smem = Aligned::from(&vec![0x5au8; (book_smem + ws) as usize]);
        let smem_addr = smem.addr();
        if batch {
            // SAFETY: both buffers hold book_smem bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    book.addr() as *const u8,
                    smem_addr as *mut u8,
                    book_smem as usize,
                )
            };
        }
        let at = Launch {
            warp,
            warps,
            workspace: book_smem,
        };
        // SAFETY: every buffer is sized as DecodeParams requires, the book
        // is at shared offset 0 (batch) or in host memory (streaming), and
        // the workspace holds `ws` bytes.
        run_warp_with(smem_addr, |w| unsafe {
            if batch {
                run(w, &HostBytes(smem_addr), p, true, at)
            } else {
                run(w, &HostBytes(book.addr()), p, false, at)
            }
        });
    }
    let st = bytemuck::cast_slice::<u8, u64>(status.bytes());
    (out.bytes().to_vec(), [st[0], st[1]])
}

#[test]
fn emulated_decode_kernel_equals_the_original_rows_in_every_mode() {
    use ibp_kernels::params::{FETCH_CP_ASYNC, FETCH_LOAD_STORE, STATUS_BAD_INDEX, STATUS_CORRUPT};
    let mut cases = 0;
    for (kind, l, n) in [
        (0usize, 5usize, 24usize),
        (1, 100, 12),
        (2, 1024, 6),
        (1, 1531, 5),
        (2, 5732, 4),
        (1, 6400, 4),
    ] {
        let seed = 3 + l as u64;
        let data = match kind {
            0 => dataset(n, l, seed),
            1 => float_rows(n, l, seed),
            _ => sparse_rows(n, l, seed),
        };
        let rows = Rows::new(&data, l).unwrap();
        for chunk in ChunkSize::ALL {
            let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
            let cb = fit(rows, &opts).unwrap().codebook;
            // Streaming mode reads no length table: its fixed-stride case is
            // `Fixed` alone.
            for (layout, streaming) in [
                (EmuLayout::Packed, false),
                (EmuLayout::Fixed, false),
                (EmuLayout::FixedLengths, false),
                (EmuLayout::Packed, true),
                (EmuLayout::Fixed, true),
            ] {
                {
                    let fetch = if cases % 2 == 0 {
                        FETCH_CP_ASYNC
                    } else {
                        FETCH_LOAD_STORE
                    };
                    cases += 1;
                    let what =
                        format!("kind {kind} L={l} C={chunk} {layout:?} streaming {streaming}");
                    // A range of every row.
                    let (out, st) =
                        emu_kernel(&cb, rows, layout, None, n as u64, streaming, fetch, None);
                    assert_eq!(st, [0, u64::MAX], "status: {what}");
                    assert!(out == data, "range differs: {what}");
                    if layout == EmuLayout::FixedLengths {
                        continue;
                    }
                    // A gather with repeats and one bad index.
                    let ix: Vec<u64> = (0..n as u64 + 3)
                        .map(|i| {
                            if i == 2 {
                                n as u64 + 7
                            } else {
                                (i * 7 + 3) % n as u64
                            }
                        })
                        .collect();
                    let (out, st) = emu_kernel(
                        &cb,
                        rows,
                        layout,
                        Some(&ix),
                        ix.len() as u64,
                        streaming,
                        fetch,
                        None,
                    );
                    assert_eq!(st, [STATUS_BAD_INDEX, 2], "gather status: {what}");
                    for (i, &t) in ix.iter().enumerate() {
                        let got = &out[i * l..(i + 1) * l];
                        if i == 2 {
                            assert!(
                                got.iter().all(|&b| b == 0),
                                "bad index row not zeroed: {what}"
                            );
                        } else {
                            let t = t as usize;
                            assert!(got == &data[t * l..(t + 1) * l], "gather row {i}: {what}");
                        }
                    }
                }
            }
            // A corrupt encoded tensor (packed) is reported and zeroed, and
            // the others still decode: one whose stream ends inside its last
            // byte, with its top padding bit set.
            let packed = compress_packed(&cb, rows).unwrap();
            let bits = |i: usize| {
                let s = &packed.payload[packed.offsets[i] as usize..];
                let ents = cb.tables().entries();
                ents.len()
                    + ents
                        .iter()
                        .enumerate()
                        .map(|(j, e)| {
                            if s[j / 8] >> (j % 8) & 1 == 1 {
                                e.free_bits as usize
                            } else {
                                e.width as usize
                            }
                        })
                        .sum::<usize>()
            };
            let padded =
                (0..n).find(|&i| packed.flags[i / 8] >> (i % 8) & 1 == 1 && bits(i) % 8 != 0);
            if let Some(t) = padded {
                for streaming in [false, true] {
                    let (out, st) = emu_kernel(
                        &cb,
                        rows,
                        EmuLayout::Packed,
                        None,
                        n as u64,
                        streaming,
                        FETCH_CP_ASYNC,
                        Some(t),
                    );
                    let what = format!(
                        "corrupt row {t}: kind {kind} L={l} C={chunk} streaming {streaming}"
                    );
                    assert_eq!(st, [STATUS_CORRUPT, t as u64], "{what}");
                    for i in 0..n {
                        let got = &out[i * l..(i + 1) * l];
                        if i == t {
                            assert!(got.iter().all(|&b| b == 0), "{what}: not zeroed");
                        } else {
                            assert!(got == &data[i * l..(i + 1) * l], "{what}: row {i}");
                        }
                    }
                }
            }
        }
    }
    assert!(cases >= 100);
}

#[test]
fn emulated_gathers_take_u32_indices_and_strided_output() {
    use ibp_kernels::params::FETCH_CP_ASYNC;
    for (l, n, chunk) in [
        (100usize, 9usize, ChunkSize::Four),
        (5732, 4, ChunkSize::Eight),
    ] {
        let data = float_rows(n, l, 41);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let cb = fit(rows, &opts).unwrap().codebook;
        let ix: Vec<u32> = (0..2 * n as u32).map(|i| (i * 5 + 1) % n as u32).collect();
        for streaming in [false, true] {
            // An odd stride: rows 3 bytes apart from a multiple of L, so
            // neither the row starts nor the stores are aligned.
            let stride = l + 3;
            let (out, st) = emu_kernel_with(
                &cb,
                rows,
                EmuLayout::Packed,
                Some(EmuIndex::U32(&ix)),
                ix.len() as u64,
                streaming,
                FETCH_CP_ASYNC,
                None,
                stride,
            );
            let what = format!("L={l} streaming {streaming}");
            assert_eq!(st, [0, u64::MAX], "{what}");
            for (i, &t) in ix.iter().enumerate() {
                let t = t as usize;
                let got = &out[i * stride..i * stride + l];
                assert!(got == &data[t * l..(t + 1) * l], "{what}: row {i}");
                if i + 1 < ix.len() {
                    let gap = &out[i * stride + l..(i + 1) * stride];
                    assert!(gap.iter().all(|&b| b == 0xa7), "{what}: gap after row {i}");
                }
            }
        }
    }
}

/// A consumer of decoded rows in registers: each lane sums the bytes it is
/// handed (a stand-in for a fused reduction).
struct SumSink(u64);

impl ibp_kernels::step::Sink for SumSink {
    fn put(&mut self, _ob: u32, w: [u32; 4], n: u32) {
        for i in 0..n {
            self.0 += ((w[(i / 4) as usize] >> (8 * (i % 4))) & 0xff) as u64;
        }
    }
}

#[test]
fn a_sink_receives_the_row_in_registers() {
    use ibp_kernels::book::Layout;
    use ibp_kernels::step::{Contig, Geometry, decode_row};
    for (l, chunk) in [
        (100usize, ChunkSize::Four),
        (1531, ChunkSize::Two),
        (5732, ChunkSize::Eight),
    ] {
        let data = float_rows(6, l, 77);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let cb = fit(rows, &opts).unwrap().codebook;
        let packed = compress_packed(&cb, rows).unwrap();
        let book = Aligned::from(&decode_book(&cb));
        let entries = Aligned::from(&decoder_table(&cb));
        let k = cb.chunks() as u32;
        let g = Geometry {
            chunks: k,
            row_bytes: l as u32,
            layout: Layout::new(k, cb.chunk().bytes()),
            entries: entries.addr(),
            flags: 0,
        };
        for i in 0..6 {
            if packed.flags[i / 8] >> (i % 8) & 1 == 0 {
                continue;
            }
            let stored =
                &packed.payload[packed.offsets[i] as usize..packed.offsets[i + 1] as usize];
            let ws = Aligned::from(&[stored, &[0u8; 32][..]].concat());
            let (ws_mem, book_mem) = (HostBytes(ws.addr()), HostBytes(book.addr()));
            let total = AtomicU64::new(0);
            run_warp(|w| {
                let mut sink = SumSink(0);
                // SAFETY: the workspace holds the stored bytes plus 32, the
                // book and entries are this codebook's.
                let ok = unsafe {
                    let mut src = Contig::new(&ws_mem, 0);
                    match chunk {
                        ChunkSize::Two => decode_row::<2, _, _, _, _, _>(
                            w,
                            &mut src,
                            &book_mem,
                            &EmuMem,
                            &g,
                            stored.len() as u32,
                            &mut sink,
                        ),
                        ChunkSize::Four => decode_row::<4, _, _, _, _, _>(
                            w,
                            &mut src,
                            &book_mem,
                            &EmuMem,
                            &g,
                            stored.len() as u32,
                            &mut sink,
                        ),
                        _ => decode_row::<8, _, _, _, _, _>(
                            w,
                            &mut src,
                            &book_mem,
                            &EmuMem,
                            &g,
                            stored.len() as u32,
                            &mut sink,
                        ),
                    }
                };
                assert!(ok);
                total.fetch_add(sink.0, Relaxed);
            });
            let want: u64 = data[i * l..(i + 1) * l].iter().map(|&b| b as u64).sum();
            assert_eq!(total.load(Relaxed), want, "L={l} row {i}");
        }
    }
}

#[test]
fn the_device_api_decodes_rows_into_a_user_sink() {
    use ibp_kernels::device::{DatasetView, RowError, decode_row};
    use ibp_kernels::step::RowStore;
    for (l, chunk) in [
        (100usize, ChunkSize::Four),
        (1531, ChunkSize::Two),
        (5732, ChunkSize::Eight),
        (9000, ChunkSize::One),
    ] {
        let n = 5;
        let data = float_rows(n, l, 5 + l as u64);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let cb = fit(rows, &opts).unwrap().codebook;
        let packed = compress_packed(&cb, rows).unwrap();
        let fixed = compress_fixed(&cb, rows).unwrap();
        let lens: Vec<u32> = (0..n)
            .map(|i| {
                let s = &fixed.slots[i * l..(i + 1) * l];
                if fixed.flags[i / 8] >> (i % 8) & 1 == 1 {
                    crate::encode::stream_len(&cb, s).unwrap() as u32
                } else {
                    l as u32
                }
            })
            .collect();
        let book = Aligned::from(&decode_book(&cb));
        let entries = Aligned::from(&decoder_table(&cb));
        let payload = Lined::from(&packed.payload);
        let slots = Lined::from(&fixed.slots);
        let offsets = Aligned::from(bytemuck::cast_slice(&packed.offsets));
        let lengths = Aligned::from(bytemuck::cast_slice(&lens));
        let pflags = Aligned::from(&packed.flags);
        let fflags = Aligned::from(&fixed.flags);
        let base = DatasetView {
            rows: n as u64,
            row_bytes: l as u64,
            book: book.addr(),
            entries: entries.addr(),
            book_bytes: book.1 as u32,
            chunk: cb.chunk().bytes(),
            ..Default::default()
        };
        let views = [
            (
                "packed",
                DatasetView {
                    src: payload.addr(),
                    offsets: offsets.addr(),
                    flags: pflags.addr(),
                    ..base
                },
            ),
            (
                "fixed",
                DatasetView {
                    src: slots.addr(),
                    flags: fflags.addr(),
                    ..base
                },
            ),
            (
                "fixed+lengths",
                DatasetView {
                    src: slots.addr(),
                    lengths: lengths.addr(),
                    flags: fflags.addr(),
                    ..base
                },
            ),
        ];
        for (what, view) in views {
            let smem = Aligned::from(&vec![0x3cu8; view.workspace_bytes() as usize]);
            let smem_addr = smem.addr();
            for t in 0..n as u64 + 1 {
                // The row lands 3 bytes into a poisoned buffer (unaligned).
                let out = Aligned::from(&vec![0xeeu8; l + 8]);
                let dst = out.addr() + 3;
                let verdict = std::sync::Mutex::new(None);
                run_warp_with(smem_addr, |w| {
                    // SAFETY: the row fits in `out` after 3 bytes.
                    let mut sink = unsafe { RowStore::new(&EmuMem, dst) };
                    // SAFETY: every buffer is the dataset's, the workspace
                    // holds `workspace_bytes`.
                    let r =
                        unsafe { decode_row(w, &view, &HostBytes(book.addr()), 0, t, &mut sink) };
                    *verdict.lock().unwrap() = Some(r);
                });
                let r = verdict.into_inner().unwrap().unwrap();
                if t == n as u64 {
                    assert_eq!(r, Err(RowError::BadIndex), "L={l} {what}");
                    continue;
                }
                assert_eq!(r, Ok(()), "L={l} {what} row {t}");
                let t = t as usize;
                let got = out.bytes();
                assert!(
                    got[3..3 + l] == data[t * l..(t + 1) * l],
                    "L={l} {what} row {t}"
                );
                assert!(
                    got[..3].iter().chain(&got[3 + l..]).all(|&b| b == 0xee),
                    "L={l} {what} row {t}: stray write"
                );
            }
        }
    }
}
