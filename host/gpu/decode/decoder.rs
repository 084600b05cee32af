//! The decoder: launch geometry sized once for a book and the rows it
//! reads, and the one decode launch ([`Decoder::enqueue`]).

use crate::gpu::memory::GpuWritable;
use crate::gpu::stream::GpuStream;
use cust::memory::DeviceSlice;
use ibp_kernels::detail::decode::lanes::LANE_RING_BYTES;
use ibp_kernels::params::{
    DECODE_FLAG_HALVES, DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX, DECODE_FLAG_TRIM,
    DECODE_MODE_DECODE, DECODE_MODE_IDEAL, DecodeParams, FETCH_CP_ASYNC, FETCH_LOAD_STORE,
    WORKSPACE_PAD, workspace_bytes,
};

use super::request::{Mode, Request, Select};
use super::rules::{
    BATCH_MAX_LINES, LANE_MAX_ROW, batch_blocks_per_sm, fewest_warps_for, lanes_pay, launch_groups,
    stream_book, tensors_a_warp,
};
use super::{DecodeOptions, DecodeStatus, GatherIndex};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::gpu::book::DeviceBook;
use crate::gpu::dataset::GpuDataset;
use crate::gpu::kernels::{self, Step};
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
    /// Tensors a warp in batch mode: 1, 2 (`ibp_decode_pairs*`) or 4
    /// (`ibp_decode_quads*`, the uniform and periodic steps only).
    pub(crate) groups: u32,
    /// Tensors a warp for a launch of fewer than four tensors a warp of
    /// its grid (`enqueue`, `launch_groups`): the pairs or one where
    /// `groups` is four by the rule, `groups` itself where the caller
    /// forced four.
    pub(crate) groups_few: u32,
    /// The step the batch and streaming kernels run: uniform or periodic
    /// where every step of the book is and the caller lets those kernels
    /// decode it (unclustered launches only; the periodic kernels in batch
    /// mode, one, two or four tensors a warp).
    pub(crate) step: Step,
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
        // The periodic kernels: a book whose every step is periodic, in
        // batch mode (one, two or four tensors a warp; there is no
        // streaming form), unless the caller turns the uniform kernels
        // off.
        let periodic = book.periodic
            && batch
            && !clustered
            && !opts.no_fast_paths
            && opts.uniform.unwrap_or(true);
        let (groups, groups_few) = if batch && !clustered {
            tensors_a_warp(
                l,
                ring_lines as u64 / 2,
                span_max,
                periodic || uniform,
                opts,
            )
        } else {
            (1, 1)
        };
        let step = if periodic {
            Step::Periodic
        } else if uniform {
            Step::Uniform
        } else {
            Step::General
        };
        let per_sm = gpu.blocks_per_sm(
            kernels::decode(batch, clustered, groups, step),
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
            groups,
            groups_few,
            step,
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
            decode_flags: self.flags
                | if rows.host { DECODE_FLAG_TRIM } else { 0 }
                | if self.step == Step::Periodic && self.book.halves {
                    DECODE_FLAG_HALVES
                } else {
                    0
                },
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
                let groups =
                    launch_groups(count, warps * grid as u64, self.groups, self.groups_few);
                let grid = (grid as u64).min(count.div_ceil(warps)).max(1) as u32;
                (
                    kernels::decode(self.batch, rows.clusters.is_some(), groups, self.step),
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
    use super::check_output;

    use crate::ErrorKind;

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
