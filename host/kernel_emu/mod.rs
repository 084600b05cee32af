//! The GPU fit and compression kernel bodies (`ibp_kernels::detail::encode`), run on
//! the CPU by an emulated warp (the `ibp-kernel-emu` crate: 32 lanes,
//! coroutines on one thread, that meet at a barrier for every shuffle).
//! Slow, but it runs the very code the GPU runs, on machines without one
//! (CI), and compares it with the CPU encoder byte for byte. The same comparisons run on the GPU in `tests/gpu_compress.rs`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use ibp_kernels::detail::encode::{self, WarpWriter};
use ibp_kernels::params::{
    ClearParams, CompactParams, ENCODE_SLOTS_SCRATCH, EncodeParams, MeasureParams,
};
use ibp_kernels::simt::Lanes;

use crate::codebook::{ChunkSize, Codebook, Threshold};
use crate::dataset::Rows;
use crate::fit::{FitOptions, count_bits, fit};
use crate::kernel_tables::{decode_book, decoder_table, encoder_book, encoder_flags, eval_book};
use crate::layout::{LayoutOptions, compress_fixed, compress_packed, size_query};

use ibp_kernel_emu::{HostBytes, HostMem, run_block, run_warp, run_warp_with};

/// `$body` with `$c` the chunk size `$chunk` as a `const u32`, as the kernel
/// bodies take it (they monomorphise on it, like the GPU's entry points).
macro_rules! with_chunk_const {
    ($chunk:expr, $c:ident => $body:expr) => {
        match $chunk {
            ChunkSize::One => {
                const $c: u32 = 1;
                $body
            }
            ChunkSize::Two => {
                const $c: u32 = 2;
                $body
            }
            ChunkSize::Four => {
                const $c: u32 = 4;
                $body
            }
            ChunkSize::Eight => {
                const $c: u32 = 8;
                $body
            }
        }
    };
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
        with_chunk_const!(cb.chunk(), C => encode::size::<_, _, C>(w, &HostMem, &p, 0, 1))
    });
    bytemuck::cast_slice::<u8, u64>(sizes.bytes()).to_vec()
}

/// Run the emulated `encode` body (`SLOTS`: the unmeasured slots kernel)
/// over `rows` under `cb`, with the stored lengths at `sizes` (read, or
/// written when `SLOTS`), packed at `offsets` (minus its base) or
/// fixed-stride, into the output at address `out`; `flags` added to the
/// codebook's.
///
/// # Safety
/// `sizes` holds a u64 a row; `out` covers every region (and is zeroed,
/// cleared or slotted as the kernel's contract says).
unsafe fn run_encode<const SLOTS: bool>(
    cb: &Codebook,
    rows: Rows<'_>,
    sizes: u64,
    offsets: Option<(&[u64], u64)>,
    out: u64,
    flags: u64,
) {
    let src = Aligned::from(rows.bytes());
    let book = encoder_book(cb);
    let p = EncodeParams {
        src: src.addr(),
        stride: rows.row_bytes() as u64,
        rows: rows.rows() as u64,
        row_bytes: rows.row_bytes() as u64,
        book: book.as_ptr() as u64,
        sizes,
        offsets: offsets.map_or(0, |(o, _)| o.as_ptr() as u64),
        offset_base: offsets.map_or(0, |(_, b)| b),
        out,
        flags: encoder_flags(cb) | flags,
    };
    let ring = Aligned::zeroed(ibp_kernels::detail::pack::RING_BYTES as usize);
    // Three warps, the last first: a warp that wrote past its own rows
    // into a later row's would then be caught, not overwritten.
    for wid in (0..3).rev() {
        // SAFETY: the caller's contract; the ring is the warp's shared
        // memory.
        run_warp_with(ring.addr(), |w| unsafe {
            with_chunk_const!(cb.chunk(), C => encode::encode::<_, _, _, C, SLOTS>(w, &HostMem, w, &p, 0, wid, 3))
        });
    }
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
    let out = Aligned::zeroed(out_len);
    // SAFETY: sizes holds a u64 a row; the zeroed output covers every
    // region.
    unsafe { run_encode::<false>(cb, rows, sizes.as_ptr() as u64, offsets, out.addr(), 0) };
    out.bytes().to_vec()
}

/// 32 bytes, 32-aligned: a sector of device memory.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Sector([u8; 32]);

/// The emulated packed encode as `Compressor::compress_into_blocking` runs it:
/// into an output full of stale bytes (0xa5), 32-aligned and padded to 128
/// bytes, of which only the sectors `clear_shared_groups` names are zeroed
/// first. Returns the stored bytes and the padding after them.
fn emu_encode_cleared(
    cb: &Codebook,
    rows: Rows<'_>,
    sizes: &[u64],
    offsets: &[u64],
) -> (Vec<u8>, Vec<u8>) {
    let data_len = offsets[rows.rows()] as usize;
    let padded = data_len.next_multiple_of(128);
    // 32-aligned, as the device's allocations are (the clear zeroes whole
    // 32-byte sectors).
    let mut out = vec![Sector([0xa5; 32]); padded / 32];
    // Written through this address (a pointer from `&mut`).
    let out_addr = out.as_mut_ptr() as u64;
    let clear = ClearParams {
        sizes: sizes.as_ptr() as u64,
        offsets: offsets.as_ptr() as u64,
        offset_base: 0,
        rows: rows.rows() as u64,
        row_bytes: rows.row_bytes() as u64,
        chunk: cb.chunk().bytes() as u64,
        out: out_addr,
        data_len: data_len as u64,
        out_len: padded as u64,
    };
    for t in 0..=clear.rows {
        // SAFETY: sizes holds rows u64, offsets rows + 1; every sector named
        // lies in `out` (regions inside data_len, padded a multiple of 32).
        unsafe { encode::clear_shared_groups(&HostMem, &clear, t) };
    }
    // SAFETY: sizes holds a u64 a row; the output covers every region and
    // is zeroed where writes meet.
    unsafe {
        run_encode::<false>(
            cb,
            rows,
            sizes.as_ptr() as u64,
            Some((offsets, 0)),
            out_addr,
            0,
        )
    };
    let bytes: Vec<u8> = out.iter().flat_map(|s| s.0).collect();
    (bytes[..data_len].to_vec(), bytes[data_len..].to_vec())
}

/// The emulated fixed-stride encode with nothing measured first
/// (`ibp_encode_slots_c*`, `L` a multiple of 4; scratch slots when
/// `flags` has `ENCODE_SLOTS_SCRATCH`): into slots full of stale bytes
/// (0xa5) from a 16-aligned base; the bytes past the last slot must stay
/// stale. Returns the slots and the stored lengths the kernel wrote.
fn emu_encode_slots(cb: &Codebook, rows: Rows<'_>, flags: u64) -> (Vec<u8>, Vec<u64>) {
    let n = rows.rows();
    let bytes = n * rows.row_bytes();
    let mut out = vec![u128::from_le_bytes([0xa5; 16]); bytes.div_ceil(16)];
    let mut sizes = vec![u64::MAX; n];
    // SAFETY: `sizes` (n u64, written by the kernel) and `n` slots of L
    // bytes from a 16-aligned base.
    unsafe {
        run_encode::<true>(
            cb,
            rows,
            sizes.as_mut_ptr() as u64,
            None,
            out.as_mut_ptr() as u64,
            flags,
        )
    };
    let out: &[u8] = bytemuck::cast_slice(&out);
    assert!(
        out[bytes..].iter().all(|&b| b == 0xa5),
        "bytes past the last slot written"
    );
    (out[..bytes].to_vec(), sizes)
}

/// The packed layout as `Compressor::compress_into_blocking` builds it through
/// scratch slots: the slots kernel with `ENCODE_SLOTS_SCRATCH` into stale
/// slots, the offsets scanned from the lengths it wrote, then the emulated
/// `compact` (three warps, run in the order `order` gives) into an output
/// of stale bytes (0xa5) padded to 128 bytes. Returns the stored bytes and
/// the padding after them.
fn emu_compact(cb: &Codebook, rows: Rows<'_>, order: [u64; 3]) -> (Vec<u8>, Vec<u8>) {
    let (slots, sizes) = emu_encode_slots(cb, rows, ENCODE_SLOTS_SCRATCH);
    let slots = Aligned::from(&slots);
    let mut offsets = vec![0u64];
    for s in &sizes {
        offsets.push(offsets.last().unwrap() + s);
    }
    let total = *offsets.last().unwrap() as usize;
    let padded = total.next_multiple_of(128);
    let mut out = vec![u128::from_le_bytes([0xa5; 16]); padded / 16];
    let p = CompactParams {
        src: slots.addr(),
        stride: rows.row_bytes() as u64,
        rows: rows.rows() as u64,
        offsets: offsets.as_ptr() as u64,
        out: out.as_mut_ptr() as u64,
        out_len: padded as u64,
    };
    for wid in order {
        // SAFETY: the slots hold every row's slot, offsets rows + 1 u64
        // from 0, and the output `padded` bytes (a multiple of 16 covering
        // the total) from a 16-aligned base.
        run_warp(|w| unsafe { ibp_kernels::detail::compact::compact(w, &HostMem, &p, wid, 3) });
    }
    let bytes: &[u8] = bytemuck::cast_slice(&out);
    (bytes[..total].to_vec(), bytes[total..].to_vec())
}

/// `n` rows of `l` bytes shaped like floats: in each 4-byte word the low
/// 21 bits vary (and the sign bit, when `sign`) and the others are the same
/// in all rows but every eighth, so with enough rows (40: a varying bit is
/// then almost never taken for invariant) the free bits of chunks of up to
/// 8 bytes (4 with a sign) form at most two runs (the encoder's two-run
/// path).
fn float_like(n: usize, l: usize, seed: u64, sign: bool) -> Vec<u8> {
    invariant_outside(n, l, seed, 0x1f_ffff | if sign { 1 << 31 } else { 0 })
}

/// Rows whose bits outside `free` (repeated every 4 bytes) are one fixed
/// value, with every eighth row random.
fn invariant_outside(n: usize, l: usize, seed: u64, free: u32) -> Vec<u8> {
    let mut s = seed;
    let top = xorshift(&mut s) as u32 & !free;
    let mut out = Vec::with_capacity(n * l);
    for r in 0..n {
        for _ in 0..l.div_ceil(4) {
            let x = xorshift(&mut s);
            let hi = if r % 8 == 2 { x as u32 } else { top };
            out.extend_from_slice(&((hi & !free) | (x >> 32) as u32 & free).to_le_bytes());
        }
        out.truncate((r + 1) * l);
    }
    out
}

#[test]
fn emulated_size_and_encode_equal_the_cpu_encoder() {
    // Both encoder paths (two-run and move-mask) must be exercised, and
    // the unmeasured slots with and without a raw tensor.
    let mut paths = [0usize; 2];
    let mut slots = [0usize; 2];
    // Data: 0 `dataset`, 1 `float_like`, 2 `float_like` with a sign bit,
    // 3 bytes whose free bits are two runs far apart (0x87, 0xc1: for
    // 1-byte chunks d2 = 4 and 5, the widest a nibble holds).
    for (seed, (l, n, kind)) in [
        (1usize, 9usize, 0),
        (3, 12, 0),
        (8, 10, 0),
        (13, 9, 0),
        (64, 8, 0),
        (301, 6, 0),
        (40, 40, 1),
        (301, 40, 2),
        (203, 40, 3),
        // Several steps of 512 bytes, and streams that wrap the ring.
        (1100, 5, 0),
        (700, 40, 1),
        (1502, 40, 2),
        (4100, 3, 0),
        // Participation bits that fill the last step's words exactly.
        (1024, 4, 0),
        // Slots of whole 16-byte groups (unmeasured fixed-stride).
        (48, 40, 1),
        (768, 40, 2),
        (2064, 3, 0),
        // Slots that share a group with the next (L a multiple of 4, not
        // of 16; 8 and 40 above too): a slot inside one group, Cora's
        // row length, and raw tensors among them.
        (20, 40, 0),
        (36, 40, 1),
        (5732, 3, 0),
        (1204, 40, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let data = match kind {
            0 => dataset(n, l, 7 + seed as u64),
            3 => invariant_outside(n, l, 7 + seed as u64, 0xc187_0f87),
            k => float_like(n, l, 7 + seed as u64, k == 2),
        };
        let rows = Rows::new(&data, l).unwrap();
        let counts = count_bits(rows);
        for chunk in ChunkSize::ALL {
            let t = Threshold::from_basis_points(8000).unwrap();
            let cb = Codebook::from_counts(&counts, n as u64, t, chunk).unwrap();
            let what = format!("L={l} C={chunk}");
            paths[encoder_flags(&cb) as usize] += 1;
            if kind == 1 || (kind == 2 && chunk.bytes() <= 4) || (kind == 3 && chunk.bytes() == 1) {
                assert_eq!(encoder_flags(&cb), 1, "two-run data {what}");
            }

            let mut stage = Aligned::zeroed(n * l.next_multiple_of(8));
            let sizes = emu_sizes(&cb, rows, Some(&mut stage));
            let want = size_query(&cb, rows).unwrap();
            assert_eq!(sizes, want.stored, "sizes {what}");
            for (i, row) in rows.iter().enumerate() {
                let s = l.next_multiple_of(8) * i;
                assert_eq!(&stage.bytes()[s..s + l], row, "staged row {i} {what}");
            }

            let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
            let got = emu_encode(
                &cb,
                rows,
                &sizes,
                Some((&packed.offsets, 0)),
                packed.payload.len(),
            );
            assert_eq!(got, packed.payload, "packed {what}");
            let (got, pad) = emu_encode_cleared(&cb, rows, &sizes, &packed.offsets);
            assert_eq!(got, packed.payload, "packed over stale bytes {what}");
            assert!(pad.iter().all(|&b| b == 0), "padding {what}");

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

            let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
            let got = emu_encode(&cb, rows, &sizes, None, fixed.slots.len());
            assert_eq!(got, fixed.slots, "fixed {what}");
            if l.is_multiple_of(4) {
                let (got, got_sizes) = emu_encode_slots(&cb, rows, 0);
                assert_eq!(got_sizes, want.stored, "slots' sizes {what}");
                assert_eq!(got, fixed.slots, "slots over stale bytes {what}");
                // Packed through scratch slots, the warps in either order
                // (a group stored by a warp that does not own it is then
                // caught whichever runs first).
                for order in [[0, 1, 2], [2, 1, 0]] {
                    let (got, pad) = emu_compact(&cb, rows, order);
                    assert_eq!(got, packed.payload, "packed through slots {what}");
                    assert!(pad.iter().all(|&b| b == 0), "padding through slots {what}");
                }
                slots[(sizes.iter().any(|&s| s >= l as u64)) as usize] += 1;
            }
        }
    }
    assert!(
        paths[0] > 0 && paths[1] > 0,
        "encoder paths covered: {paths:?}"
    );
    assert!(
        slots[0] > 0 && slots[1] > 0,
        "unmeasured slots with and without raw tensors: {slots:?}"
    );
}

#[test]
fn emulated_evaluation_equals_the_cpu_fit() {
    // Rows of one batch of 128 words a warp and of three (1100, 2100
    // bytes), every row or a sample.
    for (l, n, sample) in [
        (5usize, 40usize, 40u64),
        (24, 33, 11),
        (70, 20, 20),
        (1100, 14, 14),
        (2100, 30, 7),
    ] {
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
        let mut totals = vec![0u64; 64];
        let p = MeasureParams {
            src: src.addr(),
            stride: l as u64,
            rows: n as u64,
            sample: plan.len(),
            row_bytes: l as u64,
            book: book.as_ptr() as u64,
            // Written by the kernel: a pointer taken from `&mut`.
            totals: totals.as_mut_ptr() as u64,
            nt: books.len() as u32,
            ..Default::default()
        };
        // Three warps (a warp's next tensor loaded across its last
        // batch), the last first.
        for wid in (0..3).rev() {
            // SAFETY: buffers sized as MeasureParams requires.
            run_warp(|w| unsafe { encode::eval(w, &HostMem, &p, wid, 3) });
        }
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

#[test]
fn emulated_candidate_books_equal_the_host_rule() {
    use crate::codebook::{Threshold, mask_and_bitval, threshold_bounds};
    use ibp_kernels::params::CandidatesParams;
    let mut s = 4242u64;
    // Lengths with a partial last word, counts at and around each bound.
    for (l, n) in [(1usize, 7u64), (13, 40), (64, 1000), (203, 3), (517, 12345)] {
        let bps: &[u16] = if l % 2 == 0 {
            &[5000, 6000, 7000, 8000, 9000, 9900]
        } else {
            &[5000, 5500, 6000, 7000, 8000, 9000, 9500, 10000]
        };
        let ts: Vec<Threshold> = bps
            .iter()
            .map(|&b| Threshold::from_basis_points(b).unwrap())
            .collect();
        let edges: Vec<u64> = ts
            .iter()
            .flat_map(|&t| {
                let (a, b) = threshold_bounds(n, t);
                [a, a + 1, b.saturating_sub(1), b]
            })
            .chain([0, n])
            .collect();
        let counts: Vec<u64> = (0..8 * l)
            .map(|_| {
                let r = xorshift(&mut s);
                if r.is_multiple_of(3) {
                    r % (n + 1)
                } else {
                    edges[(r >> 8) as usize % edges.len()].min(n)
                }
            })
            .collect();
        let books: Vec<(Vec<u8>, Vec<u8>)> =
            ts.iter().map(|&t| mask_and_bitval(&counts, n, t)).collect();
        let want = eval_book(&books);
        let words = l.div_ceil(8);
        // Stale fields; the trailer zeroed, as the host does.
        let trailer = ibp_kernels::params::MAX_THRESHOLDS as usize;
        let mut got = vec![u64::MAX; (1 + ts.len()) * words + trailer];
        let fields = got.len() - trailer;
        got[fields..].fill(0);
        let mut p = CandidatesParams {
            counts: counts.as_ptr() as u64,
            row_bytes: l as u64,
            nt: ts.len() as u32,
            ..Default::default()
        };
        for (i, &t) in ts.iter().enumerate() {
            (p.one_above[i], p.zero_below[i]) = threshold_bounds(n, t);
        }
        for nwarps in [1u64, 3] {
            got[fields..].fill(0);
            // Written by the kernel: a pointer taken from `&mut`.
            p.book = got.as_mut_ptr() as u64;
            for wid in 0..nwarps {
                // SAFETY: counts of 8·L u64, a book of (1 + nt)·⌈L/8⌉ + 8
                // u64, its trailer zeroed.
                run_warp(|w| unsafe {
                    ibp_kernels::detail::candidates::candidates(w, &HostMem, &p, wid, nwarps)
                });
            }
            assert_eq!(got, want, "L={l} N={n} warps={nwarps}");
        }
        // What the GPU fit takes back: each threshold's bit values are the
        // OR of all of them under its mask.
        for (i, (m, b)) in books.iter().enumerate() {
            let v = &books.iter().fold(vec![0u8; l], |mut v, (_, b)| {
                v.iter_mut().zip(b).for_each(|(x, y)| *x |= y);
                v
            });
            let masked: Vec<u8> = m.iter().zip(v).map(|(m, v)| m & v).collect();
            assert_eq!(&masked, b, "L={l} N={n} threshold {i}");
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
                unsafe { wr.step(w, &HostMem, v, n) };
            }
            // SAFETY: as above.
            unsafe { wr.flush(w, &HostMem) };
            assert_eq!(wr.written(), bits);
        });
        let want = reference_stream(&segs, 8 * shift, len + 8);
        assert_eq!(out.bytes(), &want[..], "case {case}");
    }
}

fn crate_low_mask(n: u32) -> u64 {
    ibp_kernels::detail::bits::low_mask(n)
}

mod cache;
mod copy_runs;
mod count;
mod decode;
mod float;
mod float_encode;
mod float_fused;
mod float_kv;
#[cfg(feature = "cuda")]
mod float_placed;
mod kv;
mod shared_row;
