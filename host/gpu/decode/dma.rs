//! The DMA paths: compressed bytes copied by the copy engine into device
//! scratch, piece by piece, each piece decoded from device memory while the
//! next one is copied. [`Decoder::range_dma`] copies a range's bytes as
//! they lie; [`Decoder::gather_dma_blocking`] first restages the requested
//! tensors on the host as small packed datasets (`crate::dma_pieces`).
//! Both launch the one decode kernel, through the one launch function.

use cust::event::{Event as TimingEvent, EventFlags};
use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::{Stream, StreamFlags};

use super::request::{Request, Select};
use super::{DecodeStatus, Decoder, GatherIndex};
use crate::dma_pieces::{plan_piece, stage_piece};
use crate::error::{Error, Result};
use crate::gpu::dataset::{GpuDataset, Payload};
use crate::gpu::driver::{self, Event, wait};
use crate::gpu::memory::PinnedBuffer;
use crate::gpu::rows_view::Fetch;
use crate::gpu::rows_view::RowsView;
use crate::gpu::{Gpu, cuda_err};
use crate::layout::PackedRef;

/// Bytes of each of a [`DmaScratch`]'s pieces when you have no reason to
/// pick another size: the size `ibp bench` measures the DMA paths with.
///
/// Q: why 8 MB?
/// A: large enough that a copy's start-up (microseconds) is small against
/// its transfer (about 150 µs at 55 GB/s), small enough that the first
/// decode starts early and the pieces stay a small part of device memory.
pub const DEFAULT_DMA_PIECE_BYTES: usize = 8 << 20;

/// Device pieces of a [`DmaScratch`], which [`Decoder::range_dma`] takes in
/// turn (the gathers and the float decoder take the first two).
///
/// Q: why three, where two make a double buffer?
/// A: with two, the copy of piece `k + 2` waits for the decode of piece
/// `k`, so whenever a decode runs past the next copy (a kernel's tail, or
/// a decode slowed by the copy writing beside it) the copy engine stands
/// still; a third lets the copies run one piece further ahead. Measured
/// on Cora with 8 MiB pieces (H200, 2026-11-29) it gained nothing (0.836
/// of the copies alone, against 0.843 with two): what bounds the path is
/// the piece that nothing overlaps (`dma_range_piece_bytes`). It stays for
/// the rule's smaller pieces, where a decode's tail is a larger share of
/// a piece; two against three at those sizes is not measured (a lead).
pub(in crate::gpu) const RANGE_PIECES: usize = 3;

impl<'ds> Decoder<'ds> {
    /// Enqueue the pipelined range path: output row `i` receives tensor
    /// `first + i`, as [`Decoder::range`] does, but the compressed bytes of
    /// the range travel by DMA (`cuMemcpyHtoDAsync`) into `scratch`, piece by
    /// piece, and each piece is decoded from device memory while the next
    /// one is copied. Needs a packed dataset in pinned host memory. No host
    /// synchronisation and no allocation: the copies run on the scratch's own
    /// stream, ordered against `stream` by events.
    ///
    /// Q: why offer this beside zero-copy?
    /// A: a DMA engine moves a contiguous range at 55 GB/s on the H200
    /// against 51 GB/s for kernel reads, and the decode then reads device
    /// memory. Scattered tensors have [`Decoder::gather_dma_blocking`],
    /// which restages them first; `ibp bench` measures every path.
    #[allow(clippy::too_many_arguments)]
    pub fn range_dma(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        scratch: &mut DmaScratch,
        stream: &Stream,
    ) -> Result<()> {
        let ds = self.dataset()?;
        let (Some(offsets), Payload::Pinned(payload)) = (&ds.host_offsets, &ds.payload) else {
            return Err(Error::invalid(
                "the DMA path needs a packed dataset in pinned host memory (Residency::Pinned)",
            ));
        };
        if first.checked_add(count).is_none_or(|end| end > ds.rows) {
            return Err(Error::invalid(format!(
                "rows {first}..{} of {} requested",
                first.saturating_add(count),
                ds.rows
            )));
        }
        if (out.len() as u64) < count * ds.row_bytes {
            return Err(Error::invalid(
                "output holds fewer than count × row_bytes bytes",
            ));
        }
        let cap = scratch.piece_bytes as u64;
        if piece_too_small(ds, offsets, first, count, cap) {
            return Err(Error::invalid(
                "a stored tensor is larger than the DMA scratch piece; make the scratch larger",
            ));
        }
        // The scratch buffers may still be read by an earlier call's decode.
        scratch.start.record(stream)?;
        wait(&scratch.copy_stream, &scratch.start)?;
        let mut a = first;
        let end = first + count;
        let want = dma_range_piece_bytes(offsets[end as usize] - offsets[first as usize], cap);
        let mut k = 0usize;
        while a < end {
            // Row a fits a buffer (checked above).
            let b = piece_end(offsets, a, end, want);
            let base = offsets[a as usize];
            let len = (offsets[b as usize] - base) as usize;
            let buf = k % RANGE_PIECES;
            // The piece's device buffer may still be read by the decode of
            // piece k - 3, or of an earlier call (an event never recorded
            // is no wait).
            wait(&scratch.copy_stream, &scratch.decoded[buf])?;
            if len > 0 {
                // SAFETY: the source lies inside the pinned payload (offsets
                // were validated at upload) and the destination holds
                // piece_bytes >= len bytes; both outlive the copy (the
                // scratch is borrowed for the call, and later calls wait on
                // its events).
                unsafe {
                    driver::copy::htod_async(
                        scratch.bufs[buf].as_device_ptr().as_raw(),
                        payload.as_ptr().add(base as usize),
                        len,
                        &scratch.copy_stream,
                        "DMA copy of the compressed range",
                    )?
                };
            }
            scratch.copied[buf].record(&scratch.copy_stream)?;
            wait(stream, &scratch.copied[buf])?;
            // The piece: the dataset's tables, its stored bytes from
            // `base` on in device scratch.
            let rows = RowsView {
                src: scratch.bufs[buf].as_device_ptr().as_raw(),
                offset_base: base,
                host: false,
                fetch: Some(Fetch::CpAsync),
                ..ds.rows_view()
            };
            let req = Request::range(a, b - a);
            self.launch(gpu, &rows, &req, a - first, out, status, stream)?;
            scratch.decoded[buf].record(stream)?;
            a = b;
            k += 1;
        }
        Ok(())
    }
}

/// The two ways a range of a packed dataset in pinned host memory reaches
/// the decoder: read by the kernel over PCIe ([`Decoder::range`]), or
/// copied by DMA into device scratch first ([`Decoder::range_dma`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangePath {
    /// [`Decoder::range`]: the kernel reads the stored bytes itself.
    ZeroCopy,
    /// [`Decoder::range_dma`]: the copy engine moves them first.
    Dma,
}

/// What [`Decoder::calibrate_range_blocking`] (or the first
/// [`Decoder::range_auto`] with a scratch) measured, and the path it chose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeCalibration {
    /// The path [`Decoder::range_auto`] takes from now on: the faster of
    /// the two timings, or [`RangePath::ZeroCopy`] untimed where the DMA
    /// path cannot serve the dataset (not packed, or not pinned).
    pub path: RangePath,
    /// Rows of the sample both paths decoded (0: nothing was timed).
    pub sample_rows: u64,
    /// Seconds of the zero-copy decode of the sample (the better of two
    /// event-timed runs after a warm-up); `None` when nothing was timed.
    pub zero_copy_seconds: Option<f64>,
    /// Seconds of the DMA path on the same sample, timed the same way.
    pub dma_seconds: Option<f64>,
}

/// Stored bytes a calibration sample reaches, in DMA pieces: enough that
/// the DMA path's pipeline runs full (its first copy and last decode do
/// not overlap anything, one piece each) as it does on a long range.
const CALIBRATION_PIECES: u64 = 8;

impl<'ds> Decoder<'ds> {
    /// Whether [`Decoder::range_auto`] takes the DMA path for this
    /// decoder's dataset: the calibrated choice once there is one
    /// ([`Decoder::range_calibration`]), else a prior fitted to earlier
    /// measurements (below). Always false where the DMA path cannot serve
    /// the dataset (not packed, or not in pinned host memory).
    ///
    /// Q: where does the prior come from?
    /// A: from `ibp bench` on the H200 (docs/results/nvidia-h200.md). With
    /// the decoder of 2026-11-23 the DMA path won for tensors of 2 KB and
    /// more (Cora: 932 against 875 GB/s; 4 KB at 12.5–75% savings by 2–5%)
    /// and for tensors storing about 560 bytes or more on average (MiniLM
    /// bf16, 572 B stored: 66.5 against 61.9; f32: 59.4 against 55.6),
    /// and lost for smaller stored tensors (1 KB at 50% savings, 512 B
    /// stored: 96.9 against 100.2; 256 B at 90%: 96 against 220), where
    /// per-piece staging costs more than zero-copy reads. It went wrong on
    /// later decoders (DMA on all three real tables of 2026-11-28 while
    /// zero-copy was 10–12% faster), which is why `range_auto` measures.
    pub fn prefers_dma(&self) -> bool {
        let Some(ds) = self.ds else {
            return false;
        };
        if !dma_capable(ds) {
            return false;
        }
        if let Some(c) = self.range_calibration() {
            return c.path == RangePath::Dma;
        }
        let mean_stored = ds.stored_bytes / ds.rows.max(1);
        ds.row_bytes >= 2048 || mean_stored >= 560
    }

    /// The calibration [`Decoder::range_auto`] decides by, once it (or
    /// [`Decoder::calibrate_range_blocking`]) has measured one.
    pub fn range_calibration(&self) -> Option<RangeCalibration> {
        *self
            .range_choice
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Time both range paths on a sample of rows `first..first + count`
    /// and keep the faster for [`Decoder::range_auto`], replacing any
    /// earlier calibration; returns what was measured and chosen.
    ///
    /// The sample is the range's first rows up to
    /// 8 × `scratch.piece_bytes()` stored bytes (64 MB with
    /// [`DEFAULT_DMA_PIECE_BYTES`]), or the whole range if it is shorter:
    /// calibrate over a range like the ones you will decode. Each path
    /// decodes the sample once to warm up, then twice more between events
    /// on `stream`, interleaved with the other path; the better of the two
    /// runs counts. The decodes write the sample's rows into `out` (the
    /// decoded rows, as [`Decoder::range`] writes them) and report corrupt
    /// rows in `status`, as a decode of them would.
    ///
    /// Blocks until the timed work is done (one wait on an event of
    /// `stream`); allocates nothing (the timing events live in `scratch`).
    /// A dataset the DMA path cannot serve (not packed, or not in pinned
    /// host memory), or a range holding a tensor larger than a scratch
    /// piece, is not timed: the result is [`RangePath::ZeroCopy`] with no
    /// timings.
    #[allow(clippy::too_many_arguments)]
    pub fn calibrate_range_blocking(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        scratch: &mut DmaScratch,
        stream: &Stream,
    ) -> Result<RangeCalibration> {
        let mut choice = self
            .range_choice
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = self.calibrate(gpu, first, count, out, status, scratch, stream)?;
        *choice = Some(c);
        Ok(c)
    }

    /// The measurement of [`Decoder::calibrate_range_blocking`], stored by
    /// the caller (which holds the lock).
    #[allow(clippy::too_many_arguments)]
    fn calibrate(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        scratch: &mut DmaScratch,
        stream: &Stream,
    ) -> Result<RangeCalibration> {
        let ds = self.dataset()?;
        let untimed = RangeCalibration {
            path: RangePath::ZeroCopy,
            sample_rows: 0,
            zero_copy_seconds: None,
            dma_seconds: None,
        };
        let Some(offsets) = ds.host_offsets.as_ref().filter(|_| dma_capable(ds)) else {
            return Ok(untimed);
        };
        if count == 0 {
            return Err(Error::invalid(
                "calibrating the range paths needs at least one row to time",
            ));
        }
        if first.checked_add(count).is_none_or(|end| end > ds.rows) {
            return Err(Error::invalid(format!(
                "rows {first}..{} of {} requested",
                first.saturating_add(count),
                ds.rows
            )));
        }
        let range = &offsets[first as usize..=(first + count) as usize];
        // Q: and a range holding a tensor larger than a DMA piece?
        // A: only zero-copy can decode it (`range_dma` refuses it).
        if piece_too_small(ds, offsets, first, count, scratch.piece_bytes as u64) {
            return Ok(untimed);
        }
        let n = sample_rows(range, CALIBRATION_PIECES * scratch.piece_bytes as u64);
        let zero_copy = |out: &mut DeviceSlice<u8>| self.range(gpu, first, n, out, status, stream);
        // Warm-ups: the first touch of the pinned pages and of the scratch.
        zero_copy(out)?;
        self.range_dma(gpu, first, n, out, status, scratch, stream)?;
        let t = std::sync::Arc::clone(&scratch.timing);
        let rec = |k: usize| {
            t[k].record(stream)
                .map_err(cuda_err("recording a timing event"))
        };
        // Interleaved: zero-copy, DMA, zero-copy, DMA, each between two
        // events (five in all; an event ends one run and starts the next).
        rec(0)?;
        zero_copy(out)?;
        rec(1)?;
        self.range_dma(gpu, first, n, out, status, scratch, stream)?;
        rec(2)?;
        zero_copy(out)?;
        rec(3)?;
        self.range_dma(gpu, first, n, out, status, scratch, stream)?;
        rec(4)?;
        t[4].synchronize()
            .map_err(cuda_err("waiting for the calibration"))?;
        let secs = |a: usize, b: usize| -> Result<f64> {
            let ms = t[b]
                .elapsed_time_f32(&t[a])
                .map_err(cuda_err("reading a timing event"))?;
            Ok(f64::from(ms) / 1e3)
        };
        let zc = secs(0, 1)?.min(secs(2, 3)?);
        let dma = secs(1, 2)?.min(secs(3, 4)?);
        Ok(RangeCalibration {
            path: if dma < zc {
                RangePath::Dma
            } else {
                RangePath::ZeroCopy
            },
            sample_rows: n,
            zero_copy_seconds: Some(zc),
            dma_seconds: Some(dma),
        })
    }

    /// Enqueue a range decode by the faster of [`Decoder::range_dma`] and
    /// zero-copy [`Decoder::range`], as measured on this decoder.
    ///
    /// **The first call synchronises once.** Given a `scratch`, on a
    /// packed dataset in pinned host memory, and with no calibration yet,
    /// it first runs [`Decoder::calibrate_range_blocking`] on this call's
    /// rows (both paths timed on a sample of them, then one wait for the
    /// timing events), keeps the winner in the decoder, and then enqueues
    /// the decode by it. Every later call only enqueues, by the kept path:
    /// no host synchronisation and no allocation. To pay the wait ahead of
    /// time, and to see the timings, call
    /// [`Decoder::calibrate_range_blocking`] yourself.
    ///
    /// Without a scratch, or on a dataset the DMA path cannot serve, it is
    /// [`Decoder::range`], untimed. A scratch is allocated once, e.g.
    ///
    /// ```text
    /// let mut scratch = DmaScratch::new(DEFAULT_DMA_PIECE_BYTES)?;
    /// dec.range_auto(&gpu, first, count, &mut out, &status, Some(&mut scratch), &stream)?;
    /// ```
    ///
    /// Q: why measure instead of a rule?
    /// A: the faster path depends on this machine's link, IOMMU and copy
    /// engines, on the decoder's speed from each memory and on the table;
    /// a rule fitted to tables of one decoder picked the slower path by
    /// 10–12% with the next one. Timing both once on the caller's own
    /// rows is right by construction, within the timing noise.
    #[allow(clippy::too_many_arguments)]
    pub fn range_auto(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        scratch: Option<&mut DmaScratch>,
        stream: &Stream,
    ) -> Result<()> {
        let Some(scratch) = scratch.filter(|_| count > 0 && self.ds.is_some_and(dma_capable))
        else {
            return self.range(gpu, first, count, out, status, stream);
        };
        let path = {
            let mut choice = self
                .range_choice
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match *choice {
                Some(c) => c.path,
                None => {
                    let c = self.calibrate(gpu, first, count, out, status, scratch, stream)?;
                    *choice = Some(c);
                    c.path
                }
            }
        };
        match path {
            RangePath::Dma => self.range_dma(gpu, first, count, out, status, scratch, stream),
            RangePath::ZeroCopy => self.range(gpu, first, count, out, status, stream),
        }
    }
}

/// Stored bytes a piece of [`Decoder::range_dma`] aims at for a range of
/// `stored` bytes, with a [`DmaScratch`] of `cap`-byte pieces:
/// `√(stored · 1 MB)`, at least 1 MiB, at most `cap` (a piece holds whole
/// tensors, so it may end short of this, or pass it by one tensor that
/// fits a buffer).
///
/// Q: why the square root?
/// A: what the pipeline cannot hide is about one piece (the first copy,
/// which nothing overlaps, and the last decode), `p / B` at the link's
/// rate `B`, plus a fixed cost a piece `o` (a copy's start-up, a launch
/// and its tail) for `stored / p` pieces; the sum is least at
/// `p = √(stored · o · B)`. With `o` ≈ 20 µs and `B` ≈ 55 GB/s (the H200),
/// `o · B` ≈ 1 MB. Measured on Cora (42.5 MB stored, H200, 2026-11-29):
/// 4 MiB pieces 1,207 GB/s, 8 MiB 1,149, 16 MiB 1,069; the rule gives
/// 6.5 MB there, and the largest pieces (`cap`) for MiniLM's tables
/// (800 MB and more), whose copies alone bound them.
pub fn dma_range_piece_bytes(stored: u64, cap: u64) -> u64 {
    const O_B: u64 = 1 << 20;
    let p = (stored as f64 * O_B as f64).sqrt() as u64;
    p.clamp(1 << 20, cap.max(1 << 20)).min(cap)
}

/// The row after the last of the piece that starts at row `a < end` of a
/// packed range (`offsets` its host offsets): the most rows whose stored
/// bytes reach at most `want`, and at least row `a`. By bisection, so that
/// the host plans a piece in O(log rows).
fn piece_end(offsets: &[u64], a: u64, end: u64, want: u64) -> u64 {
    let base = offsets[a as usize];
    let ends = &offsets[a as usize + 1..=end as usize];
    a + (ends.partition_point(|&o| o - base <= want) as u64).max(1)
}

/// Whether rows `first..first + count` of `ds` (packed, `offsets` its host
/// offsets) hold a stored tensor larger than a DMA piece of `cap` bytes.
///
/// Q: why not scan the range every time?
/// A: the scan ran on the host before the first copy was enqueued, one
/// step a row: on Cora's 190,000-row table, two such scans (this check and
/// the pieces' ends) were about a third of a millisecond of an idle GPU in
/// a 1.2 ms decode. The dataset's largest stored tensor, known since
/// upload, settles it for every range but those of a dataset that has one
/// larger than a piece.
fn piece_too_small(ds: &GpuDataset, offsets: &[u64], first: u64, count: u64, cap: u64) -> bool {
    ds.max_stored > cap
        && offsets[first as usize..=(first + count) as usize]
            .windows(2)
            .any(|w| w[1] - w[0] > cap)
}

/// Whether the DMA range path can serve `ds`: packed, in pinned memory.
fn dma_capable(ds: &GpuDataset) -> bool {
    ds.host_offsets.is_some() && matches!(ds.payload, Payload::Pinned(_))
}

/// Rows of a calibration sample: from the first row of `offsets` (the
/// range's `count + 1` offsets) until the stored bytes reach `want`, at
/// least one row, at most the whole range.
fn sample_rows(offsets: &[u64], want: u64) -> u64 {
    let Some((&base, ends)) = offsets.split_first() else {
        return 0;
    };
    // Rows that end short of `want`, plus the one that reaches it.
    let short = ends.partition_point(|&o| o - base < want);
    (short + 1).min(ends.len()) as u64
}

impl<'ds> Decoder<'ds> {
    /// [`Decoder::gather`] over DMA: output row `i` of `out` (`index.len()`
    /// rows of `L` bytes) receives tensor `index[i]`, any order, repeats
    /// allowed, with the same reporting as the zero-copy gather through
    /// `status` (an index out of range zero-fills its row and is reported
    /// with its output row; so is a corrupt tensor).
    ///
    /// The indices are read from host memory: the host copies each
    /// requested tensor's stored bytes from the pinned payload (at the
    /// offsets validated at upload) into one of the scratch's two pinned
    /// staging pieces, as a small packed dataset with rebased offsets, and
    /// the copy engine moves the piece to the device, where the decode
    /// kernel reads it while the next piece is staged and copied. Needs a
    /// packed dataset in pinned host memory ([`Residency::Pinned`]).
    ///
    /// Allocates nothing. Blocks the calling thread while it stages: before
    /// refilling a staging piece it waits for that piece's previous copy
    /// (the one two pieces back, or an earlier call's), so it returns once
    /// every piece is staged, with the last copies and decodes enqueued on
    /// `stream` (synchronise it before reading `out` or `status`).
    ///
    /// Q: why offer this beside zero-copy?
    /// A: zero-copy reads cross PCIe in 128-byte lines, shared with the
    /// neighbouring tensors and translated by the IOMMU; the DMA path moves
    /// only the requested bytes, in large copies, at the cost of one host
    /// copy. `ibp bench` measures both on random gathers.
    ///
    /// [`Residency::Pinned`]: crate::gpu::Residency::Pinned
    #[allow(clippy::too_many_arguments)]
    pub fn gather_dma_blocking<I: GatherIndex + Into<u64>>(
        &self,
        gpu: &Gpu,
        index: &[I],
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        scratch: &mut DmaScratch,
        stream: &Stream,
    ) -> Result<()> {
        let ds = self.dataset()?;
        // A clustered dataset's pieces carry each row's cluster id (the
        // pieces renumber the tensors).
        let ids = ds.clusters.as_ref().map(|c| &c.host);
        let (Some(offsets), Some(flags), Payload::Pinned(payload)) =
            (&ds.host_offsets, &ds.host_flags, &ds.payload)
        else {
            return Err(Error::invalid(
                "the DMA gather needs a packed dataset in pinned host memory (Residency::Pinned)",
            ));
        };
        let count = index.len() as u64;
        if count
            .checked_mul(ds.row_bytes)
            .is_none_or(|need| need > out.len() as u64)
        {
            return Err(Error::invalid(format!(
                "output holds {} bytes; {count} rows of {} bytes need more",
                out.len(),
                ds.row_bytes
            )));
        }
        let packed = PackedRef::new(
            ds.row_bytes as usize,
            ds.rows as usize,
            flags,
            std::borrow::Cow::Borrowed(offsets),
            &payload[..ds.stored_bytes as usize],
        )?;
        let cap = scratch.piece_bytes;
        // Every piece is planned before the first is enqueued: a tensor too
        // large for a piece is refused before anything runs.
        let mut pieces = Vec::new();
        let mut start = 0usize;
        while start < index.len() {
            let (rows, bytes) = plan_piece(offsets, index, start, cap, ids.is_some())?;
            pieces.push((start, rows, bytes));
            start += rows;
        }
        for (k, &(start, rows, bytes)) in pieces.iter().enumerate() {
            let buf = k % 2;
            // The staging piece may still be read by its previous copy.
            scratch.copied[buf].synchronize()?;
            let piece = stage_piece(
                &packed,
                ids,
                index,
                start,
                rows,
                bytes,
                &mut scratch.staging[buf],
            )?;
            // The device piece may still be read by its previous decode.
            wait(&scratch.copy_stream, &scratch.decoded[buf])?;
            // SAFETY: the source is the first `piece.len <= piece_bytes`
            // bytes of a pinned staging buffer and the destination a device
            // buffer of at least piece_bytes bytes; both live in the
            // scratch, borrowed for the call, and later calls wait on its
            // events before touching either.
            unsafe {
                driver::copy::htod_async(
                    scratch.bufs[buf].as_device_ptr().as_raw(),
                    scratch.staging[buf].as_ptr(),
                    piece.len,
                    &scratch.copy_stream,
                    "DMA copy of a gather piece",
                )?
            };
            scratch.copied[buf].record(&scratch.copy_stream)?;
            wait(stream, &scratch.copied[buf])?;
            // The piece is a small packed dataset of its own in device
            // scratch: offsets, flags, index, cluster ids and stored bytes
            // (`crate::dma_pieces::stage_piece`).
            let base = scratch.bufs[buf].as_device_ptr().as_raw();
            let view = RowsView {
                src: base + piece.payload_at as u64,
                offsets: base,
                lengths: 0,
                flags: base + piece.flags_at as u64,
                rows: rows as u64,
                offset_base: 0,
                clusters: piece.ids_at.map(|at| (base + at as u64, 32)),
                host: false,
                fetch: Some(Fetch::CpAsync),
            };
            let req = Request::of(Select::Index {
                addr: base + piece.index_at as u64,
                len: rows as u64,
                wide: false,
            });
            self.launch(gpu, &view, &req, start as u64, out, status, stream)?;
            scratch.decoded[buf].record(stream)?;
        }
        Ok(())
    }
}

impl Decoder<'_> {
    /// The dataset the DMA paths read (they need its host tables).
    pub(super) fn dataset(&self) -> Result<&GpuDataset> {
        self.ds.ok_or_else(|| {
            Error::invalid(
                "the DMA paths decode a dataset; this decoder was sized for a book alone",
            )
        })
    }
}

/// Buffers, a copy stream and events for the DMA paths
/// ([`Decoder::range_dma`], [`Decoder::gather_dma_blocking`]), allocated
/// once and reused by every call: three device pieces, two pinned staging
/// pieces (the gather's), of `piece_bytes` each.
///
/// The float decoder's [`crate::gpu::FloatDecoder::range_dma`] uses the
/// same scratch (its device pieces, copy stream and events; not the pinned
/// staging pieces), so one scratch serves a container's IBP and float
/// groups in turn.
pub struct DmaScratch {
    pub(in crate::gpu) bufs: [DeviceBuffer<u8>; RANGE_PIECES],
    staging: [PinnedBuffer<u8>; 2],
    piece_bytes: usize,
    pub(in crate::gpu) copy_stream: Stream,
    pub(in crate::gpu) start: Event,
    pub(in crate::gpu) copied: [Event; RANGE_PIECES],
    pub(in crate::gpu) decoded: [Event; RANGE_PIECES],
    /// Events with timing for the range paths' calibration (created with
    /// the scratch, so that `range_auto` allocates nothing).
    /// Shared (not copied) so that the calibration holds them while it
    /// lends the scratch to [`Decoder::range_dma`].
    timing: std::sync::Arc<[TimingEvent; 5]>,
}

impl DmaScratch {
    /// Three device and two pinned pieces of `piece_bytes` each
    /// ([`DEFAULT_DMA_PIECE_BYTES`] unless measured otherwise: large enough
    /// to amortise a DMA's start-up, small enough that the first decode
    /// starts early). Allocates, as its name says nothing else does.
    pub fn new(piece_bytes: usize) -> Result<Self> {
        let piece_bytes = piece_bytes.max(1);
        // Q: why round the device pieces up to whole 128-byte lines?
        // A: the decoder fetches aligned lines; the one holding a piece's
        // last byte must lie inside the buffer.
        let alloc = || {
            DeviceBuffer::<u8>::zeroed(piece_bytes.next_multiple_of(128))
                .map_err(cuda_err("allocating DMA scratch"))
        };
        let event = Event::new;
        Ok(Self {
            bufs: [alloc()?, alloc()?, alloc()?],
            staging: [
                PinnedBuffer::zeroed(piece_bytes)?,
                PinnedBuffer::zeroed(piece_bytes)?,
            ],
            piece_bytes,
            copy_stream: Stream::new(StreamFlags::NON_BLOCKING, None)
                .map_err(cuda_err("creating a copy stream"))?,
            start: event()?,
            copied: [event()?, event()?, event()?],
            decoded: [event()?, event()?, event()?],
            timing: std::sync::Arc::new(timing_events()?),
        })
    }

    /// Bytes of each piece.
    pub fn piece_bytes(&self) -> usize {
        self.piece_bytes
    }
}

/// Five events with timing, for [`Decoder::calibrate_range_blocking`].
fn timing_events() -> Result<[TimingEvent; 5]> {
    let e = || TimingEvent::new(EventFlags::DEFAULT).map_err(cuda_err("creating a timing event"));
    Ok([e()?, e()?, e()?, e()?, e()?])
}

#[cfg(test)]
mod tests {
    use super::{dma_range_piece_bytes, piece_end, sample_rows};

    #[test]
    fn a_piece_takes_the_most_rows_that_fit_and_at_least_one() {
        // Rows of 10 stored bytes from offset 100, one of 50 (row 4), one
        // empty (row 6).
        let sizes = [10u64, 10, 10, 10, 50, 10, 0, 10, 10, 10];
        let offsets: Vec<u64> = std::iter::once(100)
            .chain(sizes.iter().scan(100, |o, &n| {
                *o += n;
                Some(*o)
            }))
            .collect();
        let end = sizes.len() as u64;
        assert_eq!(piece_end(&offsets, 0, end, 35), 3);
        assert_eq!(piece_end(&offsets, 0, end, 40), 4);
        // A row larger than the piece aimed at is a piece of its own.
        assert_eq!(piece_end(&offsets, 4, end, 35), 5);
        // An empty row joins the piece it ends up in.
        assert_eq!(piece_end(&offsets, 5, end, 20), 8);
        // The range's end bounds every piece.
        assert_eq!(piece_end(&offsets, 7, 9, 1000), 9);
        assert_eq!(piece_end(&offsets, 9, end, 0), 10);
        // Pieces planned one after the other cover the range once: rows
        // 0–1, 2–3, 4 alone, 5–7, 8–9.
        let mut a = 0;
        let mut pieces = 0;
        while a < end {
            let b = piece_end(&offsets, a, end, 25);
            assert!(b > a && b <= end);
            assert!(b == a + 1 || offsets[b as usize] - offsets[a as usize] <= 25);
            a = b;
            pieces += 1;
        }
        assert_eq!(pieces, 5);
    }

    #[test]
    fn pieces_grow_with_the_square_root_of_the_range() {
        const MB: u64 = 1 << 20;
        // Cora's 42.5 MB stored: about 6.5 MB pieces, under 8 MiB buffers.
        let cora = dma_range_piece_bytes(42_500_000, 8 * MB);
        assert!((6_000_000..7_000_000).contains(&cora), "{cora}");
        // MiniLM's 800 MB: the buffers' size.
        assert_eq!(dma_range_piece_bytes(800_000_000, 8 * MB), 8 * MB);
        // Small ranges: at least 1 MiB (or the buffer when smaller).
        assert_eq!(dma_range_piece_bytes(100_000, 8 * MB), MB);
        assert_eq!(dma_range_piece_bytes(100_000, 1000), 1000);
        assert_eq!(dma_range_piece_bytes(0, 8 * MB), MB);
        // Four times the bytes, twice the piece.
        let (a, b) = (
            dma_range_piece_bytes(16 * MB, 64 * MB),
            dma_range_piece_bytes(64 * MB, 64 * MB),
        );
        assert!(b.abs_diff(2 * a) <= 2, "{a} {b}");
    }

    #[test]
    fn a_calibration_sample_stops_at_the_row_reaching_its_bytes() {
        // Rows of 10 stored bytes from offset 100.
        let offsets: Vec<u64> = (0..=10).map(|i| 100 + 10 * i).collect();
        assert_eq!(sample_rows(&offsets, 35), 4);
        assert_eq!(sample_rows(&offsets, 40), 4);
        assert_eq!(sample_rows(&offsets, 41), 5);
        // At least one row, at most the range.
        assert_eq!(sample_rows(&offsets, 0), 1);
        assert_eq!(sample_rows(&offsets, 1 << 40), 10);
        assert_eq!(sample_rows(&offsets[..1], 10), 0);
        // Empty rows never reach anything: the whole range.
        assert_eq!(sample_rows(&[7, 7, 7], 1), 2);
    }
}
