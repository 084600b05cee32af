//! The decoder: launch geometry sized once for a book and the rows it
//! reads, and the one decode launch ([`Decoder::enqueue`]).

use crate::gpu::memory::GpuWritable;
use crate::gpu::stream::GpuStream;
use cust::memory::DeviceSlice;
use ibp_kernels::detail::decode::lanes::LANE_RING_BYTES;
use ibp_kernels::params::{
    DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX, DECODE_FLAG_TRIM, DECODE_MODE_DECODE,
    DECODE_MODE_IDEAL, DecodeParams, FETCH_CP_ASYNC, FETCH_LOAD_STORE, WORKSPACE_PAD,
    workspace_bytes,
};

use super::request::{Mode, Request, Select};
use super::{DecodeOptions, DecodeStatus, GatherIndex};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::gpu::book::DeviceBook;
use crate::gpu::dataset::GpuDataset;
use crate::gpu::kernels;
use crate::gpu::rows_view::Fetch;
use crate::gpu::rows_view::RowsView;

/// A decoder for one dataset: launch geometry computed once, and the
/// dataset itself (its rows and its [`DeviceBook`]), borrowed.
///
/// Q: why does the decoder borrow its dataset instead of taking one per
/// call?
/// A: its shared-memory carving and tables are sized from that dataset; a
/// call with another dataset (longer tensors, another codebook) would let
/// the kernel read past the workspace or the book. Borrowing makes the
/// mismatch impossible to write: no call takes a dataset, and the decoder
/// cannot outlive the one it was sized for.
///
/// ```compile_fail,E0505
/// # use ibp::gpu::{DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset};
/// # fn f(gpu: &Gpu, ds: GpuDataset, out: &mut cust::memory::DeviceSlice<u8>,
/// #      st: &DecodeStatus, s: &cust::stream::Stream) -> ibp::Result<()> {
/// let dec = Decoder::new(gpu, &ds, &DecodeOptions::default())?;
/// drop(ds); // error[E0505]: cannot move out of `ds` because it is borrowed
/// dec.range(gpu, 0, 1, out, st, s)?;
/// # Ok(()) }
/// ```
pub struct Decoder<'ds> {
    pub(crate) book: &'ds DeviceBook,
    /// The dataset whose rows [`Decoder::enqueue`] reads (none for a
    /// decoder of a book alone: a KV store's segment brings its rows to
    /// each launch).
    pub(crate) ds: Option<&'ds GpuDataset>,
    pub(crate) flags: u32,
    pub(crate) book_smem_bytes: u32,
    pub(crate) grid: u32,
    pub(crate) block: u32,
    pub(crate) shared_bytes: u32,
    pub(crate) ring_lines: u32,
    pub(crate) pbuf_words: u32,
    pub(crate) batch: bool,
    /// Two tensors a warp in batch mode (`ibp_decode_pairs`).
    pub(crate) pairs: bool,
    /// The book's every step is uniform and the caller lets the uniform
    /// kernels decode it (`ibp_decode_uniform`, `ibp_decode_pairs_uniform`,
    /// `ibp_decode_stream_uniform`; unclustered launches only).
    pub(crate) uniform: bool,
    /// The book's every step is periodic and the caller lets the periodic
    /// kernel decode it (`ibp_decode_periodic`: unclustered batch mode, a
    /// tensor a warp).
    pub(crate) periodic: bool,
    /// The lane decoder's grid (`ibp_decode_lanes`), where it may run:
    /// unclustered rows in device memory, the book in shared memory.
    pub(crate) lanes: Option<LaneGrid>,
    /// The caller's choice ([`DecodeOptions::lanes`]).
    pub(crate) lanes_forced: Option<bool>,
    /// Streaming mode's smaller launch shapes (blocks of fewer warps, the
    /// book where the main shape has it): `(block, grid, shared)`, for
    /// launches of too few tensors to give the main shape's warps as many
    /// rounds each (`Decoder::shape_for`).
    pub(crate) fewer: Vec<(u32, u32, u32)>,
    /// The caller's choice of fetch ([`DecodeOptions::fetch`]); `None`: by
    /// where each launch's rows live.
    pub(crate) fetch: Option<Fetch>,
    /// The range path [`Decoder::range_auto`] measured as the faster one
    /// (`None` until it, or [`Decoder::calibrate_range_blocking`], has
    /// timed both). Behind a lock: the decoder is shared between threads,
    /// and the first calls may race to calibrate.
    pub(crate) range_choice: std::sync::Mutex<Option<super::RangeCalibration>>,
}

/// The lane decoder's launch shape: blocks of `block` threads, at most
/// `grid` blocks (those resident at once), `shared` bytes of shared memory
/// a block (the book, then a ring a thread).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneGrid {
    pub grid: u32,
    pub block: u32,
    pub shared: u32,
    /// The book's bytes (the first of `shared`).
    pub book: u32,
    /// SMs the grid spans.
    pub sms: u32,
}

/// Threads per block of the lane decoder.
///
/// Q: why four warps? A: at its cap of 96 registers an SM partition holds
/// five warps; blocks of eight would leave it at four (two blocks an SM).
const LANE_BLOCK: u32 = 128;

/// What the decoder's sizing needs to know of the rows besides the book.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    /// The largest stored tensor whose length the kernel reads from a
    /// table; `L` where lengths come from participation bits.
    pub max_stored: u64,
    /// The rows are in host memory the kernel reads over PCIe.
    pub host: bool,
    /// The rows carry cluster ids (the book holds every cluster's tables).
    pub clustered: bool,
}

/// Of `main` and the shapes `fewer` (each `(block, grid, shared)`), the
/// one of fewest warps in the grid that decodes `count` tensors, a warp a
/// tensor, in no more rounds than `main` ([`Decoder::shape_for`]).
fn fewest_warps_for(
    main: (u32, u32, u32),
    fewer: &[(u32, u32, u32)],
    count: u64,
) -> (u32, u32, u32) {
    let warps = |s: &(u32, u32, u32)| (s.0 / 32) as u64 * s.1 as u64;
    let rounds = |s: &(u32, u32, u32)| count.div_ceil(warps(s).max(1));
    let least = rounds(&main);
    fewer
        .iter()
        .copied()
        .filter(|s| rounds(s) <= least)
        // Fewest warps, then least shared memory in the grid (one block
        // of 16 warps rather than two of 8, each with its own book).
        .min_by_key(|s| (warps(s), s.1 as u64 * s.2 as u64))
        .filter(|s| warps(s) < warps(&main))
        .unwrap_or(main)
}

/// What [`stream_book`] chooses.
type StreamShapes = (u64, u64, Vec<(u64, u64)>);

/// Streaming mode's book place and warps a block: `(book bytes in shared
/// memory, warps, fewer)`, the book in shared memory (`book_len`) or
/// through L1 (0), and the other shapes of that place with fewer warps an
/// SM, `(warps a block, blocks an SM)` (for launches of few tensors,
/// `Decoder::shape_for`).
///
/// Q: the rule?
/// A: of each place, the shape of most warps an SM, then of least shared
/// memory; the book in shared memory wherever its shape keeps at least
/// two thirds of the warps the other place would. Its loads through L1
/// were the kernel's largest stall (44% of the samples on 16 KB rows of
/// 2-byte chunks, H200), and 24 warps an SM with the book through L1 did
/// not make up for it: 16 KB rows of 1-byte chunks, whose book leaves
/// room for 16 warps, decoded 1.16–1.18× faster on 16 with it in shared
/// memory than on 24 without (H200). It is copied once a block, so one
/// block of 16 or 24 warps may hold as many warps an SM as two or three
/// of eight with the book once instead of two or three times. The
/// occupancy comes from the driver (registers and shared memory), not
/// from a table of row lengths. [`DecodeOptions::stream_book`] and
/// [`DecodeOptions::warps_per_block`] narrow the candidates.
fn stream_book(
    gpu: &Gpu,
    book_len: u64,
    warp_bytes: u64,
    budget: u64,
    opts: &DecodeOptions,
    uniform: bool,
) -> StreamShapes {
    let block_sizes: &[u64] = match opts.warps_per_block {
        Some(w) => &[w.clamp(1, 32) as u64],
        None => &[8, 16, 24],
    };
    let places: &[bool] = match opts.stream_book {
        Some(shared) => &[shared],
        None => &[false, true],
    };
    // (warps an SM, book in shared memory, warps a block, blocks an SM,
    // shared memory an SM).
    let mut shapes = Vec::new();
    for &shared in places {
        for &w in block_sizes {
            let smem = if shared { book_len } else { 0 } + w * warp_bytes;
            if smem > budget {
                continue;
            }
            let per_sm = gpu
                .blocks_per_sm(
                    kernels::decode(false, false, false, uniform, false),
                    (w * 32) as u32,
                    smem as usize,
                )
                .unwrap_or(0) as u64;
            if per_sm > 0 {
                shapes.push((per_sm * w, shared, w, per_sm, per_sm * smem));
            }
        }
    }
    match choose_stream_shape(&shapes) {
        Some((shared, w, fewer)) => (if shared { book_len } else { 0 }, w, fewer),
        // Nothing fits (a book forced into shared memory included): the
        // caller shrinks the block and reports it.
        None => (0, block_sizes[0], Vec::new()),
    }
}

/// A candidate launch shape of streaming mode: `(warps an SM, book in
/// shared memory, warps a block, blocks an SM, shared memory an SM)`.
type Candidate = (u64, bool, u64, u64, u64);

/// What [`choose_stream_shape`] picks: `(book in shared memory, warps a
/// block, fewer)`.
type Chosen = (bool, u64, Vec<(u64, u64)>);

/// [`stream_book`]'s rule on the shapes the driver allows: `(book in
/// shared memory, warps a block, fewer)` with `fewer` the same place's
/// shapes of fewer warps an SM as `(warps a block, blocks an SM)`.
fn choose_stream_shape(shapes: &[Candidate]) -> Option<Chosen> {
    // Of a place, the most warps an SM, then the least shared memory.
    let best = |shared: bool| {
        shapes
            .iter()
            .copied()
            .filter(|s| s.1 == shared)
            .max_by_key(|s| (s.0, std::cmp::Reverse(s.4)))
    };
    let chosen = match (best(true), best(false)) {
        (Some(s), Some(g)) => Some(if 3 * s.0 >= 2 * g.0 { s } else { g }),
        (s, g) => s.or(g),
    }?;
    let (most, shared, w, _, _) = chosen;
    let fewer = shapes
        .iter()
        .filter(|s| s.1 == shared && s.0 < most)
        .map(|s| (s.2, s.3))
        .collect();
    Some((shared, w, fewer))
}

/// Blocks of `warps` warps that the batch kernels' registers let an SM
/// hold (the fewer of the whole-warp and the pair kernel), asked with the
/// least shared memory batch mode runs on (the book and one warp's
/// smallest ring, at most `budget`): the share of the SM's shared memory
/// that each block's ring is then sized from. At most 4 (a quarter of
/// the SM's shared memory still holds halves of 12 lines); 2, the shape
/// the rings were sized for before, where the driver cannot say.
///
/// Q: why ask the driver rather than assume two?
/// A: the registers are the JIT's to allocate (`IBP_JIT_MAX_REGISTERS`,
/// a kernel's own cap); sizing the rings for two blocks where three fit by
/// registers would leave the third unplaced for shared memory.
fn batch_blocks_per_sm(
    gpu: &Gpu,
    clustered: bool,
    warps: u64,
    book_len: u64,
    span_max: u64,
    budget: u64,
) -> u64 {
    let block = (warps * 32) as u32;
    let least = (book_len + workspace_bytes(0, (2 * span_max) as u32) as u64).min(budget);
    let mut blocks = 4;
    for (pairs, uniform, periodic) in [
        (false, false, false),
        (true, false, false),
        (false, true, false),
        (true, true, false),
        (false, false, true),
    ] {
        if (pairs || uniform || periodic) && clustered {
            continue;
        }
        let k = kernels::decode(true, clustered, pairs, uniform, periodic);
        blocks = blocks.min(gpu.blocks_per_sm(k, block, least as usize).unwrap_or(2) as u64);
    }
    blocks.max(1)
}

/// Largest tensor span, in lines, that batch mode takes (half a ring).
const BATCH_MAX_LINES: u64 = 48;

impl<'ds> Decoder<'ds> {
    /// Size shared memory and the grid for `ds` on `gpu`. Allocates
    /// nothing.
    pub fn new(gpu: &Gpu, ds: &'ds GpuDataset, opts: &DecodeOptions) -> Result<Self> {
        let shape = Shape {
            max_stored: ds.max_stored,
            host: ds.rows_view().host,
            clustered: ds.clusters.is_some(),
        };
        let mut dec = Self::for_book(gpu, &ds.book, shape, opts)?;
        dec.ds = Some(ds);
        Ok(dec)
    }

    /// A decoder for rows of `shape` decoded with `book`, whose launches
    /// bring their rows ([`Decoder::launch`]). Allocates nothing.
    pub(crate) fn for_book(
        gpu: &Gpu,
        book: &'ds DeviceBook,
        shape: Shape,
        opts: &DecodeOptions,
    ) -> Result<Self> {
        let info = gpu.info();
        let l = book.row_bytes;
        let k = l.div_ceil(book.chunk as u64);
        let pbytes = k.div_ceil(8);
        // Lines a tensor of L bytes, and the largest stored tensor, can
        // touch at the worst alignment.
        let span_l = (l + 127).div_ceil(128);
        let span_max = (shape.max_stored.min(l).max(1) + 127).div_ceil(128);
        // Q: batch or streaming mode?
        // A: batch mode keeps whole tensors in half a ring, so it pays while
        // a tensor is a few KB; beyond that one tensor is enough work to
        // hide a round trip and streaming through a small ring saves shared
        // memory (more warps per SM).
        // Batch mode also needs its decode book in shared memory beside at
        // least one warp's workspace (always so for tensors of a few KB).
        let budget = info.max_shared_per_block as u64;
        // The book that batch mode copies into shared memory: a clustered
        // dataset's are all its clusters' (batch mode only when they fit;
        // streaming mode reads them through L1).
        let clustered = shape.clustered;
        // The uniform kernels: a book whose every step is uniform, unless the
        // caller turns them off (unclustered only).
        let uniform =
            book.uniform && !clustered && !opts.no_fast_paths && opts.uniform.unwrap_or(true);
        let book_len = book.all_book_bytes();
        let batch = span_l <= BATCH_MAX_LINES
            && opts
                .ring_bytes
                .is_none_or(|b| b as u64 >= 2 * span_max * 128)
            && book_len + 2 * span_max.max(16) * 128 + WORKSPACE_PAD as u64 <= budget;
        let (ring_lines, pbuf_words) = if batch {
            // At most 128 lines a half: the kernel keeps line counts in a
            // byte of each batch item.
            let half = match opts.ring_bytes {
                Some(b) => (b as u64 / 256).max(span_max).min(128),
                // Q: why do pinned tensors get smaller halves?
                // A: measured on the H200: halves for four tensors made
                // device-resident MiniLM f32 8% faster, and zero-copy reads
                // slower (Cora 875 -> 798 GB/s, 256 B rows at 50% savings
                // 0.94 -> 0.88 of ideal): larger batches spread the warps
                // over more host memory at once, and the IOMMU's cached
                // translations cover less of it (see `Window` in the
                // kernel).
                None if shape.host => span_max.max(16),
                None => {
                    // As many blocks an SM as the kernels' registers allow
                    // (two of 8 warps at 128 registers, three at 80): each
                    // gets that share of the SM's shared memory, less the
                    // 1 KB the driver reserves per block.
                    let warps = opts.warps_per_block.unwrap_or(8).clamp(1, 32) as u64;
                    let blocks =
                        batch_blocks_per_sm(gpu, clustered, warps, book_len, span_max, budget);
                    let per_warp = (info.shared_per_sm as u64 / blocks)
                        .saturating_sub(1024 + book_len)
                        / warps;
                    crate::kernel_tables::batch_half_lines(
                        span_max,
                        per_warp.saturating_sub(WORKSPACE_PAD as u64) / 256,
                    )
                }
            };
            ((2 * half) as u32, 0u32)
        } else {
            // Participation buffer: whole u32 words, a multiple of 16 bytes.
            let pbuf_words = (k.div_ceil(32)).next_multiple_of(4) as u32;
            // The ring must hold the participation bytes plus two lines of
            // slack (phase 1 reads them in one go).
            let min_lines = (pbytes.div_ceil(128) + 2).next_power_of_two();
            let want = match opts.ring_bytes {
                Some(b) => (b as u64).div_ceil(128).next_power_of_two(),
                None => 32,
            };
            // At least 8 lines: one step of the decoder spans up to 512
            // payload bytes (five lines at the worst alignment), all
            // resident at once.
            (want.max(min_lines).max(8) as u32, pbuf_words)
        };
        let warp_bytes = workspace_bytes(pbuf_words, ring_lines) as u64;
        // Q: where is the decode book?
        // A: batch mode copies it into shared memory once per block (it is
        // at most 7 bytes per tensor byte for tensors of a few KB);
        // streaming mode, for long tensors, does too where that keeps two
        // thirds of the warps an SM (`stream_book`), else reads it through
        // L1. The entry table that only the rare general steps read stays
        // in global memory in both modes.
        let (table_smem, mut warps, fewer) = if batch {
            (
                book_len,
                opts.warps_per_block.unwrap_or(8).clamp(1, 32) as u64,
                Vec::new(),
            )
        } else if clustered {
            (
                0,
                opts.warps_per_block.unwrap_or(8).clamp(1, 32) as u64,
                Vec::new(),
            )
        } else {
            stream_book(gpu, book_len, warp_bytes, budget, opts, uniform)
        };
        while warps > 1 && table_smem + warps * warp_bytes > budget {
            warps /= 2;
        }
        let shared = table_smem + warps * warp_bytes;
        if shared > budget {
            return Err(Error::unsupported(format!(
                "tensors of {l} bytes with {}-byte chunks need {shared} bytes of shared memory per warp; this GPU allows {budget}",
                book.chunk
            )));
        }
        let block = (warps * 32) as u32;
        let pairs = batch
            && !clustered
            && opts
                .pairs
                .unwrap_or(!opts.no_fast_paths && pairs_pay(l, ring_lines as u64 / 2, span_max));
        // The periodic kernel: a book whose every step is periodic, in
        // batch mode a tensor a warp (it has no pair or streaming form),
        // unless the caller turns the uniform kernels off.
        let periodic = book.periodic
            && batch
            && !pairs
            && !clustered
            && !opts.no_fast_paths
            && opts.uniform.unwrap_or(true);
        let per_sm = gpu.blocks_per_sm(
            kernels::decode(batch, clustered, pairs, uniform, periodic),
            block,
            shared as usize,
        )?;
        let sms = opts
            .max_sms
            .unwrap_or(info.sm_count)
            .clamp(1, info.sm_count);
        // The lane decoder: the whole book in shared memory, then a ring a
        // thread; sized only where a launch may take it (forced on, or
        // rows the rule accepts).
        let lane_shared =
            book_len.next_multiple_of(16) + LANE_BLOCK as u64 * LANE_RING_BYTES as u64;
        let lanes_wanted = opts.lanes.unwrap_or(l <= LANE_MAX_ROW);
        let lanes = if shape.host || clustered || !lanes_wanted || lane_shared > budget {
            None
        } else {
            let per_sm =
                gpu.blocks_per_sm(kernels::DECODE_LANES, LANE_BLOCK, lane_shared as usize)?;
            (per_sm > 0).then_some(LaneGrid {
                grid: per_sm * sms,
                block: LANE_BLOCK,
                shared: lane_shared as u32,
                book: book_len as u32,
                sms,
            })
        };
        Ok(Decoder {
            book,
            ds: None,
            flags: if opts.no_fast_paths {
                DECODE_FLAG_NO_CLASSES | DECODE_FLAG_NO_PREFIX
            } else {
                0
            },
            book_smem_bytes: table_smem as u32,
            grid: per_sm * sms,
            block,
            shared_bytes: shared as u32,
            ring_lines,
            pbuf_words,
            batch,
            pairs,
            uniform,
            periodic,
            lanes,
            lanes_forced: opts.lanes,
            fewer: fewer
                .into_iter()
                .map(|(w, per_sm)| {
                    let shared = (table_smem + w * warp_bytes) as u32;
                    ((w * 32) as u32, per_sm as u32 * sms, shared)
                })
                .collect(),
            fetch: opts.fetch,
            range_choice: std::sync::Mutex::new(None),
        })
    }

    /// Threads per block, blocks in the grid and dynamic shared memory per
    /// block (for reports).
    pub fn geometry(&self) -> (u32, u32, u32) {
        (self.block, self.grid, self.shared_bytes)
    }

    /// The launch shape `(block, grid, shared)` for `count` tensors: the
    /// main one, or in streaming mode the one of fewest warps that gives
    /// every warp no more rounds (tensors after tensors) than the main one.
    ///
    /// Q: why fewer warps for fewer tensors?
    /// A: a warp decodes a whole tensor, so 4,096 rows of 16 KB on 24
    /// warps an SM (3,168 warps) take two rounds, as on 16 (2,112 warps),
    /// and each warp runs slower among 24 (0.88×, Nsight Compute, H200):
    /// 552 against 673 GB/s. Where the rounds are equal the fewer warps
    /// win; where the main shape saves a round it wins.
    pub(crate) fn shape_for(&self, count: u64) -> (u32, u32, u32) {
        fewest_warps_for(
            (self.block, self.grid, self.shared_bytes),
            &self.fewer,
            count,
        )
    }

    /// Whether this decoder uses batch mode (whole tensors per half ring)
    /// rather than streaming mode.
    pub fn is_batch_mode(&self) -> bool {
        self.batch
    }

    /// Enqueue one decode of the dataset's rows: `req` says which rows
    /// (a range, or rows by index), where they land in `out` and how
    /// ([`Mode`]). No host synchronisation, no allocation; corrupt rows and
    /// indices out of range are reported in `status`.
    ///
    /// `out` is cust device memory or a [`crate::gpu::SpanMut`] of another
    /// library's; `stream` a cust [`cust::stream::Stream`] or a
    /// [`crate::gpu::ForeignStream`] (cudarc's: see
    /// `gpu::cudarc_interop`, feature `cudarc`).
    // Q: why generic, rather than methods of their own for foreign memory?
    // A: the launch reads only the output's address and length and the
    // stream's handle; two sealed traits give every call (gather, range,
    // strided, the DMA paths' and the KV store's launches) the other
    // libraries' memory and streams with one body, and cust's callers
    // compile unchanged.
    pub fn enqueue<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        req: &Request<'_>,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        let ds = self.ds.ok_or_else(|| {
            Error::invalid("this decoder was sized for a book alone; its owner gives the rows")
        })?;
        self.launch(gpu, &ds.rows_view(), req, 0, out, status, stream)
    }

    /// Enqueue: output row `i` of `out` (`index.len()` rows of `L` bytes)
    /// receives tensor `index[i]`. Any order, repeats allowed; indices are
    /// `u32` or `u64`. No host synchronisation, no allocation.
    pub fn gather<I: GatherIndex, O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        index: &DeviceSlice<I>,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        self.enqueue(gpu, &Request::gather(index), out, status, stream)
    }

    /// [`Decoder::gather`] into rows `out_stride` bytes apart (`≥ L`): row
    /// `i` is `out[i·out_stride ..][..L]`, and the bytes between rows are
    /// left as they are (a column of a wider table, padded rows).
    pub fn gather_strided<I: GatherIndex, O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        index: &DeviceSlice<I>,
        out: &mut O,
        out_stride: usize,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        let req = Request::gather(index).with_out_stride(out_stride);
        self.enqueue(gpu, &req, out, status, stream)
    }

    /// Enqueue: output row `i` receives tensor `first + i`, for `count` rows.
    pub fn range<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        self.enqueue(gpu, &Request::range(first, count), out, status, stream)
    }

    /// The one decode launch: `req` over `rows` (decoded with this
    /// decoder's book), output rows from `out_skip_rows` on (a DMA piece's
    /// first row within its call; failures are reported as rows of the
    /// call). Every argument is checked on the host first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        rows: &RowsView,
        req: &Request<'_>,
        out_skip_rows: u64,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        let l = self.book.row_bytes;
        let (index, first, count, wide) = match req.select {
            Select::Index { addr, len, wide } => (addr, 0, len, wide),
            Select::Range { first, count } => {
                if first.checked_add(count).is_none_or(|end| end > rows.rows) {
                    return Err(Error::invalid(format!(
                        "rows {first}..{} requested from a dataset of {} tensors",
                        first.saturating_add(count),
                        rows.rows
                    )));
                }
                (0, first, count, true)
            }
        };
        if count == 0 {
            return Ok(());
        }
        let stride = req.out_stride.unwrap_or(l);
        check_output(out.writable_len() as u64, count + out_skip_rows, stride, l)?;
        let ideal = req.mode == Mode::Ideal;
        if ideal && (!rows.has_lengths() || !l.is_multiple_of(4)) {
            return Err(Error::invalid(
                "the ideal-copy baseline needs stored lengths (packed layout or a length table) and rows of whole u32",
            ));
        }
        let fetch = rows.fetch.or(self.fetch).unwrap_or(if rows.host {
            Fetch::LoadStore
        } else {
            Fetch::CpAsync
        });
        let (book, table) = self.book.addrs();
        let p = DecodeParams {
            src: rows.src,
            offsets: rows.offsets,
            flags: rows.flags,
            table,
            index,
            first,
            count,
            rows: rows.rows,
            row_bytes: l,
            out: out.device_addr_mut() + out_skip_rows * stride,
            out_stride: stride,
            status: status.words.as_device_ptr().as_raw(),
            chunk: self.book.chunk,
            ring_lines: self.ring_lines,
            pbuf_words: self.pbuf_words,
            cluster_bits: rows.clusters.map_or(0, |c| c.1),
            mode: if ideal {
                DECODE_MODE_IDEAL
            } else {
                DECODE_MODE_DECODE
            },
            batch: self.batch as u32,
            lengths: rows.lengths,
            offset_base: rows.offset_base,
            fetch: match fetch {
                Fetch::LoadStore => FETCH_LOAD_STORE,
                Fetch::CpAsync => FETCH_CP_ASYNC,
            },
            // Lines are trimmed to a tensor's pieces only when they come
            // over PCIe (`decode::batch`, `fetch_item`).
            decode_flags: self.flags | if rows.host { DECODE_FLAG_TRIM } else { 0 },
            book,
            book_smem_bytes: self.book_smem_bytes,
            index_u32: !wide as u32,
            row_base: out_skip_rows,
            clusters: rows.clusters.map_or(0, |c| c.0),
        };
        let lanes = self.lanes.filter(|g| {
            !ideal
                && !rows.host
                && rows.clusters.is_none()
                && self
                    .lanes_forced
                    .unwrap_or_else(|| lanes_pay(count, l, g.sms))
        });
        let (kernel, grid, block, shared) = match lanes {
            Some(g) => {
                let grid = (g.grid as u64).min(count.div_ceil(g.block as u64)).max(1) as u32;
                (kernels::DECODE_LANES, grid, g.block, g.shared)
            }
            None => {
                let (block, grid, shared) = self.shape_for(count);
                let warps = (block / 32) as u64;
                let grid = (grid as u64).min(count.div_ceil(warps)).max(1) as u32;
                (
                    kernels::decode(
                        self.batch,
                        rows.clusters.is_some(),
                        self.pairs,
                        self.uniform,
                        self.periodic,
                    ),
                    grid,
                    block,
                    shared,
                )
            }
        };
        let p = DecodeParams {
            book_smem_bytes: lanes.map_or(p.book_smem_bytes, |g| g.book),
            ..p
        };
        // SAFETY: `rows` comes from one of the crate's constructors, each of
        // which covers its tables and stored bytes (a dataset's buffers were
        // sized and validated at upload: payload covering every slot in
        // whole lines, flags ⌈N/8⌉ bytes, offsets N + 1; a DMA piece's by
        // its staging; a KV segment's inside the store's pages and tables);
        // the book holds this decoder's tables, for every cluster id the
        // rows carry; `out` holds the rows (checked above: a `GpuWritable`
        // is cust's memory of that length, or a `SpanMut` whose unsafe
        // constructor promised it, ordered on this stream); `index` holds
        // `count` entries of its width (a `Request` borrows it); status
        // holds two u64; the shared memory matches this decoder's carving;
        // DecodeParams is the kernel's parameter type. The lane decoder
        // (unclustered rows in device memory only) takes the whole book as
        // its shared memory and reads each tensor in 16-byte blocks that
        // hold its bytes, inside the payload's whole lines.
        unsafe { gpu.launch(kernel, grid, block, shared, stream, p) }
    }
}

/// Whether a launch of `count` tensors of `l` bytes decodes a lane a
/// tensor (`ibp_decode_lanes`) by default, on `sms` SMs.
///
/// Q: where does the rule come from?
/// A: from the row-length sweep, both decoders in one binary (H200,
/// 2026-11-28, `scripts/device-lanes.sh`; every chunk size, 25–90%
/// savings): a lane a tensor ran rows of 64 bytes at 4.8–6.1× the batch
/// decoder and rows of 128 bytes at 1.8–3.1×, but rows of 256 bytes at
/// 0.75–1.37× and longer rows at 0.41–0.99×. Its steps cost what the batch
/// decoder's do; what it saves is the per-tensor work and the half-empty
/// steps, which dominate only short rows. Past them it waits on memory (a
/// warp's 16-byte stores and fetches touch 32 rows each; 0.24 instructions
/// issued a scheduler a cycle on 768-byte rows). It also needs a lane a
/// tensor to fill the GPU: at least eight warps an SM of tensors in the
/// launch.
pub(crate) fn lanes_pay(count: u64, l: u64, sms: u32) -> bool {
    l <= LANE_MAX_ROW && count >= 32 * 8 * sms as u64
}

/// The longest row the lane decoder takes by default (`lanes_pay`).
const LANE_MAX_ROW: u64 = 128;

/// Whether batch mode decodes tensors of `l` bytes two a warp by default
/// (`ibp_decode_pairs`), with halves of `half_lines` lines and tensors
/// spanning at most `span_max`.
///
/// Q: where does the rule come from?
/// A: from instruction counts, not from tables. A half-warp step costs
/// what a whole-warp step does (`scripts/sass.sh --steps`: the `_half`
/// probes take 1.0–1.15× the instructions for 256 output bytes of each of
/// two tensors that a whole step takes for 512 of one). So a pair saves
/// only where a tensor's last whole step would be at most half full: it
/// takes `⌈L/256⌉` half-steps for two tensors against `2·⌈L/512⌉` whole
/// ones. The rule asks for a saving of a fifth (`L` in `(0, 256]` or
/// `(512, 768]`: 25–50%), which covers the per-step excess with room,
/// and for halves that hold two tensors, since a tensor with no partner
/// is decoded by both halves at twice its cost. Measured on the H200
/// (2026-11-28, `scripts/device-decoder.sh`): 4096-byte rows whose batches
/// held one tensor ran at 0.53–0.61× with pairs forced on.
pub(crate) fn pairs_pay(l: u64, half_lines: u64, span_max: u64) -> bool {
    5 * l.div_ceil(256) <= 8 * l.div_ceil(512) && half_lines >= 2 * span_max
}

/// Whether `out_len` bytes hold `rows` output rows of `l` bytes, `stride`
/// bytes apart.
fn check_output(out_len: u64, rows: u64, stride: u64, l: u64) -> Result<()> {
    if stride < l {
        return Err(Error::invalid(format!(
            "output stride of {stride} bytes is shorter than a row of {l} bytes"
        )));
    }
    let need = (rows - 1)
        .checked_mul(stride)
        .and_then(|b| b.checked_add(l))
        .ok_or_else(|| Error::invalid("output size overflows u64"))?;
    if out_len < need {
        return Err(Error::invalid(format!(
            "output holds {out_len} bytes; {rows} rows of {l} bytes, {stride} bytes apart, need {need}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_output, pairs_pay};

    use crate::ErrorKind;

    #[test]
    fn streaming_books_go_to_shared_memory_where_they_keep_two_thirds_of_the_warps() {
        use super::choose_stream_shape;
        // (warps an SM, book in shared memory, warps a block, blocks an
        // SM, shared memory an SM), as an H200 allows them at 80 registers.
        // 16 KB rows of 4-byte chunks (68 KB book, 4.6 KB a warp): the book
        // fits beside 24 warps; the same 24 warps win with it in shared
        // memory, and the one block of 24 over three of 8 with it in L1.
        let c4 = [
            (24, false, 8, 3, 111_000),
            (16, false, 16, 1, 74_000),
            (24, false, 24, 1, 110_000),
            (8, true, 8, 1, 105_000),
            (16, true, 16, 1, 142_000),
            (24, true, 24, 1, 178_000),
        ];
        let (shared, w, fewer) = choose_stream_shape(&c4).unwrap();
        assert!(shared);
        assert_eq!(w, 24);
        assert_eq!(fewer, vec![(8, 1), (16, 1)]);
        // 16 KB rows of 1-byte chunks (116 KB book): in shared memory only
        // beside 16 warps, two thirds of the 24 the L1 book allows: shared
        // (measured 1.16-1.18x faster).
        let c1 = [
            (24, false, 8, 3, 147_000),
            (8, true, 8, 1, 164_000),
            (16, true, 16, 1, 212_000),
        ];
        let (shared, w, fewer) = choose_stream_shape(&c1).unwrap();
        assert!(shared);
        assert_eq!(w, 16);
        assert_eq!(fewer, vec![(8, 1)]);
        // A book that leaves room for 8 warps against 24: through L1.
        let (shared, w, fewer) = choose_stream_shape(&c1[..2]).unwrap();
        assert!(!shared);
        assert_eq!(w, 8);
        assert!(fewer.is_empty());
        // Of equal warps, the least shared memory: one block of 16 with one
        // book rather than two of 8 with two.
        let tie = [(16, true, 8, 2, 160_000), (16, true, 16, 1, 150_000)];
        assert_eq!(choose_stream_shape(&tie).unwrap().1, 16);
        // Nothing the driver allows (a forced place that does not fit).
        assert!(choose_stream_shape(&[]).is_none());
    }

    #[test]
    fn fewer_warps_only_where_they_take_no_more_rounds() {
        use super::fewest_warps_for;
        // 132 SMs: one block of 24 warps an SM (3,168 warps), or of 16
        // (2,112) or two of 8.
        let main = (768, 132, 200_000);
        let fewer = [(256, 264, 80_000), (512, 132, 150_000)];
        // 4,096 tensors: two rounds on either; the fewer warps win, and of
        // equal warps the shape of less shared memory in the grid.
        assert_eq!(fewest_warps_for(main, &fewer, 4096), fewer[1]);
        // One round on either.
        assert_eq!(fewest_warps_for(main, &fewer, 2000), fewer[1]);
        // 8,192: three rounds on 3,168 warps, four on 2,112: the main.
        assert_eq!(fewest_warps_for(main, &fewer, 8192), main);
        // Many tensors: the main shape.
        assert_eq!(fewest_warps_for(main, &fewer, 1 << 20), main);
        // No smaller shape: the main.
        assert_eq!(fewest_warps_for(main, &[], 10), main);
    }

    #[test]
    fn lanes_pay_for_many_short_rows_only() {
        use super::lanes_pay;
        assert!(lanes_pay(1 << 20, 64, 132));
        assert!(lanes_pay(1 << 20, 128, 132));
        assert!(!lanes_pay(1 << 20, 129, 132));
        assert!(!lanes_pay(1 << 20, 768, 132));
        // Too few tensors to give eight warps an SM a tensor a lane.
        assert!(!lanes_pay(32 * 8 * 132 - 1, 64, 132));
        assert!(lanes_pay(32 * 8 * 132, 64, 132));
    }

    #[test]
    fn pairs_pay_where_a_rows_last_whole_step_is_at_most_half_full() {
        // Halves of 32 lines, tensors of at most 7.
        for l in [1, 64, 200, 256, 513, 600, 768] {
            assert!(pairs_pay(l, 32, 7), "{l}");
        }
        for l in [257, 512, 769, 1024, 1280, 1536, 4096, 5732] {
            assert!(!pairs_pay(l, 32, 7), "{l}");
        }
        // A half that holds one tensor never pairs.
        assert!(!pairs_pay(768, 12, 7));
    }

    #[test]
    fn an_output_too_short_for_its_rows_is_an_invalid_argument() {
        // 3 rows of 100 bytes, 128 apart: 2·128 + 100 bytes.
        assert!(check_output(356, 3, 128, 100).is_ok());
        let e = check_output(355, 3, 128, 100).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(check_output(300, 3, 100, 100).is_ok());
        assert!(check_output(299, 3, 100, 100).is_err());
        // A stride shorter than a row, and a size past u64.
        assert_eq!(
            check_output(1 << 20, 3, 99, 100).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            check_output(u64::MAX, u64::MAX, 1 << 40, 100)
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
    }
}
