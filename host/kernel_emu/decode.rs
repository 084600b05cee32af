//! The decode kernel's bodies (`ibp_kernels::detail::step`, `ibp_kernels::detail::decode`,
//! `ibp_kernels::device`) run on the emulated warp and compared with the CPU
//! decoder: the step alone, the whole kernel in both modes, gathers, sinks
//! and the device API. This file holds the harness (test rows, emulated
//! launches); the tests are in its submodules, by topic.

use super::*;
use crate::layout::Layout;

/// f32 rows whose exponents vary little (free bits in two runs: the low
/// mantissa and the sign), with some outliers that do not match.
pub(super) fn float_rows(rows: usize, l: usize, seed: u64) -> Vec<u8> {
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

/// `n` rows of `l` bytes whose every `chunk`-byte chunk has the same three
/// invariant bits below its sign bit (its free bits the sign and the bits
/// below those three: two runs, alike in every column, as a dense float
/// table's exponent), with about one chunk in 24 random (those seldom
/// match).
pub(super) fn uniform_columns(n: usize, l: usize, chunk: u32, seed: u64) -> Vec<u8> {
    let bits = 8 * chunk;
    let free = (1u64 << (bits - 1)) | crate_low_mask(bits - 4);
    let fixed = 0b101u64 << (bits - 4);
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(n * l);
    for r in 0..n {
        for _ in 0..l.div_ceil(chunk as usize) {
            let (pick, x) = (xorshift(&mut s), xorshift(&mut s));
            let v = if pick % 24 == 5 { x } else { fixed | x & free };
            out.extend_from_slice(&v.to_le_bytes()[..chunk as usize]);
        }
        out.truncate((r + 1) * l);
    }
    out
}

/// `n` rows of `l` bytes whose every byte has the bits of `pattern` fixed
/// to `fixed` (an fp8 table's exponent bits: the same in every byte, so a
/// chunk of several bytes has them in each), the other bits random, with
/// about one byte in 24 random (those seldom match).
pub(super) fn periodic_columns(n: usize, l: usize, pattern: u8, fixed: u8, seed: u64) -> Vec<u8> {
    periodic_pieces(n, l, 1, pattern.into(), fixed.into(), seed)
}

/// [`periodic_columns`] by pieces of `piece` bytes (1, or 2 for f16-like
/// values, little-endian): every piece has the bits of `pattern` fixed to
/// `fixed`, about one in 24 random; a row's last piece is cut at `l`.
pub(super) fn periodic_pieces(
    n: usize,
    l: usize,
    piece: usize,
    pattern: u16,
    fixed: u16,
    seed: u64,
) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(n * l + piece);
    for r in 0..n {
        for _ in 0..l.div_ceil(piece) {
            let (pick, x) = (xorshift(&mut s), xorshift(&mut s) as u16);
            let v = if pick % 24 == 5 {
                x
            } else {
                (x & !pattern) | fixed
            };
            out.extend_from_slice(&v.to_le_bytes()[..piece]);
        }
        out.truncate((r + 1) * l);
    }
    out
}

/// A buffer whose first byte is 128-aligned, with a line of slack after its
/// end: the decoder fetches whole 128-byte lines around a tensor's bytes,
/// as a GPU allocation (256-byte aligned, whole pages) allows.
pub(super) struct Lined(Vec<u64>, usize);

impl Lined {
    pub(super) fn from(bytes: &[u8]) -> Self {
        let mut v = vec![0u64; bytes.len().div_ceil(8) + 48];
        let skip = (128 - (v.as_ptr() as usize % 128)) % 128;
        bytemuck::cast_slice_mut::<u64, u8>(&mut v)[skip..skip + bytes.len()]
            .copy_from_slice(bytes);
        Lined(v, skip)
    }
    pub(super) fn addr(&self) -> u64 {
        self.0.as_ptr() as u64 + self.1 as u64
    }
}

/// How an emulated launch's dataset is stored: its layout and, for the
/// fixed-stride layout, whether a length table comes with it (as
/// `ibp::gpu::bench::BenchStorage`, which the CPU-only tests cannot use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct EmuStorage {
    layout: Layout,
    lengths: bool,
}

impl EmuStorage {
    const PACKED: Self = EmuStorage {
        layout: Layout::Packed,
        lengths: false,
    };
    const FIXED: Self = EmuStorage {
        layout: Layout::FixedStride,
        lengths: false,
    };
    const FIXED_LENGTHS: Self = EmuStorage {
        layout: Layout::FixedStride,
        lengths: true,
    };
}

/// Run the whole decode kernel (`ibp_kernels::detail::decode::run`) on the CPU, one
/// emulated warp after another, as the host launcher would size it (batch
/// mode for `EmuKernel::Batch` unless tensors are too long for it). Returns
/// the output rows (poisoned first) and the two status words.
#[allow(clippy::too_many_arguments)]
fn emu_kernel(
    cb: &Codebook,
    rows: Rows<'_>,
    layout: EmuStorage,
    index: Option<&[u64]>,
    count: u64,
    kernel: EmuKernel,
    fetch: u32,
    corrupt: Option<Corrupt>,
) -> (Vec<u8>, [u64; 2]) {
    let wide: Option<Vec<u64>> = index.map(|ix| ix.to_vec());
    emu_kernel_with(
        cb,
        rows,
        layout,
        wide.as_deref().map(EmuIndex::U64),
        count,
        kernel,
        fetch,
        corrupt,
        rows.row_bytes(),
        None,
    )
}

/// A corruption of one encoded tensor's stored bytes.
#[derive(Clone, Copy, Debug)]
enum Corrupt {
    /// Flip its last stored bit (padding or payload): the stream no longer
    /// ends as its length says.
    LastBit(usize),
    /// Clear its first eight participation bits: matching chunks read as
    /// mismatching, so its payload runs past its stored bytes (the step's
    /// bounds check, mid-row).
    Participation(usize),
}

impl Corrupt {
    fn tensor(self) -> usize {
        match self {
            Corrupt::LastBit(t) | Corrupt::Participation(t) => t,
        }
    }
}

/// Which decode kernel an emulated launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EmuKernel {
    /// `ibp_decode` or `ibp_decode_pairs` (batch mode; streaming when
    /// tensors are too long for it).
    Batch,
    /// `ibp_decode_quads_uniform` or `ibp_decode_quads_periodic` (batch
    /// mode, four tensors a warp) for a book those kernels take, else as
    /// `Batch`.
    Quads,
    /// `ibp_decode_stream`.
    Streaming,
    /// `ibp_decode_lanes`.
    Lanes,
}

/// Run the lane decoder (`ibp_kernels::detail::decode::lanes::run`) on one
/// emulated warp of which 8 lanes work, so that each lane decodes several
/// tensors in turn, the book read from host memory.
fn emu_lanes(book: &Aligned, mut p: ibp_kernels::params::DecodeParams) {
    use ibp_kernels::detail::decode::lanes::LANE_RING_BYTES;
    use ibp_kernels::simt::Lanes;
    p.book = book.addr();
    p.book_smem_bytes = 0;
    // Each lane's ring, filled with garbage.
    let smem = Aligned::from(&vec![0x5au8; 32 * LANE_RING_BYTES as usize]);
    run_warp_with(smem.addr(), |w| {
        if w.lane() < 8 {
            // SAFETY: every buffer is sized as DecodeParams requires, the
            // payload in whole lines (`Lined`), the book in host memory,
            // each lane's ring inside the shared memory.
            unsafe {
                ibp_kernels::detail::decode::lanes::run(
                    w,
                    &HostBytes(book.addr()),
                    p,
                    w.lane() * LANE_RING_BYTES,
                    w.lane() as u64,
                    8,
                )
            }
        }
    });
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
    layout: EmuStorage,
    index: Option<EmuIndex<'_>>,
    count: u64,
    kernel: EmuKernel,
    fetch: u32,
    corrupt: Option<Corrupt>,
    stride: usize,
    half_lines: Option<u32>,
) -> (Vec<u8>, [u64; 2]) {
    use ibp_kernels::params::{DECODE_FLAG_TRIM, DECODE_MODE_DECODE, DecodeParams, FETCH_CP_ASYNC};

    let l = rows.row_bytes();
    let n = rows.rows();
    let c = cb.chunk().bytes();
    let (flags, offsets, mut payload, lengths) = match layout {
        EmuStorage {
            layout: Layout::Packed,
            ..
        } => {
            let p = compress_packed(cb, rows, &LayoutOptions::default()).unwrap();
            (p.flags, Some(p.offsets), p.payload, None)
        }
        _ => {
            let f = compress_fixed(cb, rows, &LayoutOptions::default()).unwrap();
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
            let lengths = (layout == EmuStorage::FIXED_LENGTHS).then_some(lens);
            (f.flags, None, f.slots, lengths)
        }
    };
    // Corrupt one encoded tensor (see `Corrupt`), which the decoder must
    // report, not decode.
    if let Some(c) = corrupt {
        let t = c.tensor();
        let start = match &offsets {
            Some(o) => o[t] as usize,
            None => t * l,
        };
        let end = match &offsets {
            Some(o) => o[t + 1] as usize,
            None => t * l + lengths.as_ref().map_or(l, |x| x[t] as usize),
        };
        match c {
            Corrupt::LastBit(_) => payload[end - 1] ^= 0x80,
            Corrupt::Participation(_) => payload[start] = 0,
        }
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
    // Geometry as the host launcher computes it (host/gpu/decode.rs):
    // halves sized by the largest stored tensor whose length a table gives,
    // or `half_lines` (a test's smaller half).
    let max_stored = match (&offsets, &lengths) {
        (Some(o), _) => o.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0),
        (None, Some(x)) => x.iter().map(|&v| v as u64).max().unwrap_or(0),
        _ => l as u64,
    };
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
        mode: DECODE_MODE_DECODE,
        lengths: lens.as_ref().map_or(0, |x| x.addr()),
        fetch,
        offset_base: 0,
        // Trimmed lines (as for host memory) with cp.async, whole lines with
        // loads and stores: the tests alternate the two, so both are run.
        decode_flags: if fetch == FETCH_CP_ASYNC {
            DECODE_FLAG_TRIM
        } else {
            0
        },
        ..Default::default()
    };
    match kernel {
        EmuKernel::Lanes => emu_lanes(&book, p),
        _ => emu_launch(
            cb,
            &book,
            p,
            max_stored,
            kernel == EmuKernel::Streaming,
            half_lines,
            false,
            kernel == EmuKernel::Quads,
        ),
    }
    let st = bytemuck::cast_slice::<u8, u64>(status.bytes());
    (out.bytes().to_vec(), [st[0], st[1]])
}

/// Launch the emulated kernel on parameters whose buffers are in place:
/// the geometry (ring, batch or streaming mode, the book in shared memory)
/// as the host launcher computes it (host/gpu/decode.rs), halves sized by
/// `max_stored` (the largest stored tensor whose length a table gives) or
/// `half_lines` (a test's smaller half). Two warps. `clustered`: `book`
/// holds every cluster's book (copied into shared memory in batch mode, as
/// `ibp_decode_clustered` does) and `p` their ids. `quads`: four tensors a
/// warp where the uniform or periodic kernels take the book (batch mode).
#[allow(clippy::too_many_arguments)]
fn emu_launch(
    cb: &Codebook,
    book: &Aligned,
    mut p: ibp_kernels::params::DecodeParams,
    max_stored: u64,
    streaming: bool,
    half_lines: Option<u32>,
    clustered: bool,
    quads: bool,
) {
    use ibp_kernels::detail::decode::{Launch, run};
    use ibp_kernels::params::workspace_bytes;

    let l = cb.row_bytes();
    let k = cb.chunks();
    let span_max = (max_stored.min(l as u64).max(1) + 127).div_ceil(128);
    let batch = !streaming && (l as u64 + 127).div_ceil(128) <= 48;
    let (ring_lines, pbuf_words) = if batch {
        let half = half_lines.map_or(
            crate::kernel_tables::batch_half_lines(span_max, u64::MAX),
            u64::from,
        );
        (2 * half as u32, 0)
    } else {
        let pbytes = k.div_ceil(8) as u64;
        let min_lines = (pbytes.div_ceil(128) + 2).next_power_of_two();
        (
            min_lines.max(8) as u32,
            (k.div_ceil(32)).next_multiple_of(4) as u32,
        )
    };
    // The book in shared memory: batch mode, and unclustered streaming
    // mode (`ibp_decode_stream` with `book_smem_bytes`, where the host
    // finds it fits); clustered streaming mode reads it in place, and so
    // does unclustered streaming mode under load/store fetches (the
    // kernel's other place for the book: the tests run both fetches, so
    // both places).
    let book_in_place = !batch && (clustered || p.fetch == ibp_kernels::params::FETCH_LOAD_STORE);
    let book_smem = if book_in_place { 0 } else { book.1 as u32 };
    let ws = workspace_bytes(pbuf_words, ring_lines);
    p.ring_lines = ring_lines;
    p.pbuf_words = pbuf_words;
    p.batch = batch as u32;
    p.book = book.addr();
    p.book_smem_bytes = book_smem;
    let warps = 2u64;
    for warp in 0..warps {
        // The block's shared memory: the book (if there), then this
        // warp's workspace, filled with garbage.
        let smem = Aligned::from(&vec![0x5au8; (book_smem + ws) as usize]);
        let smem_addr = smem.addr();
        if book_smem > 0 {
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
        // Unclustered batch mode: two tensors a warp (`ibp_decode_pairs`)
        // with cp.async, one (`ibp_decode`) with loads and stores, so the
        // tests run both kernels; four (`quads`, either fetch) where the
        // caller asks and the uniform or periodic kernels take the book.
        let pairs = p.fetch == ibp_kernels::params::FETCH_CP_ASYNC;
        // A book whose every step is uniform: the uniform kernels; one
        // whose every step is periodic: the periodic kernels (batch mode),
        // as the host launches them.
        let uni = !clustered && crate::kernel_tables::book_is_uniform(cb, book.bytes());
        // (The kernel picks the piece by `DECODE_FLAG_HALVES`, as the
        // host sets it from the same test.)
        let per = (!clustered && batch)
            .then(|| crate::kernel_tables::book_period(cb))
            .flatten();
        use ibp_kernels::detail::book::{
            CLASS_PERIODIC as P, CLASS_PERIODIC_HALVES as PH, CLASS_UNIFORM as U,
        };
        use ibp_kernels::detail::decode::ANY_CLASS as A;
        // SAFETY: every buffer is sized as DecodeParams requires, the book
        // is at shared offset 0 (`book_smem`) or in host memory, and
        // the workspace holds `ws` bytes.
        run_warp_with(smem_addr, |w| unsafe {
            if clustered && batch {
                run::<_, _, true, 1, A>(w, &HostBytes(smem_addr), p, true, at)
            } else if clustered {
                run::<_, _, true, 1, A>(w, &HostBytes(book.addr()), p, false, at)
            } else if batch && quads && per == Some(16) {
                run::<_, _, false, 4, PH>(w, &HostBytes(smem_addr), p, true, at)
            } else if batch && quads && per.is_some() {
                run::<_, _, false, 4, P>(w, &HostBytes(smem_addr), p, true, at)
            } else if batch && quads && uni {
                run::<_, _, false, 4, U>(w, &HostBytes(smem_addr), p, true, at)
            } else if batch && pairs && per == Some(16) {
                run::<_, _, false, 2, PH>(w, &HostBytes(smem_addr), p, true, at)
            } else if batch && pairs && per.is_some() {
                run::<_, _, false, 2, P>(w, &HostBytes(smem_addr), p, true, at)
            } else if batch && pairs && uni {
                run::<_, _, false, 2, U>(w, &HostBytes(smem_addr), p, true, at)
            } else if batch && pairs {
                run::<_, _, false, 2, A>(w, &HostBytes(smem_addr), p, true, at)
            } else if batch && uni {
                run::<_, _, false, 1, U>(w, &HostBytes(smem_addr), p, true, at)
            } else if per == Some(16) {
                run::<_, _, false, 1, PH>(w, &HostBytes(smem_addr), p, true, at)
            } else if per.is_some() {
                run::<_, _, false, 1, P>(w, &HostBytes(smem_addr), p, true, at)
            } else if batch {
                run::<_, _, false, 1, A>(w, &HostBytes(smem_addr), p, true, at)
            } else if book_in_place && uni {
                run::<_, _, false, 1, U>(w, &HostBytes(book.addr()), p, false, at)
            } else if book_in_place {
                run::<_, _, false, 1, A>(w, &HostBytes(book.addr()), p, false, at)
            } else if uni {
                run::<_, _, false, 1, U>(w, &HostBytes(smem_addr), p, false, at)
            } else {
                run::<_, _, false, 1, A>(w, &HostBytes(smem_addr), p, false, at)
            }
        });
    }
}

mod clustered;
mod dma_gather;
mod kernel;
mod sink;
mod step;
