//! The DMA paths: compressed bytes copied by the copy engine into device
//! scratch, piece by piece, each piece decoded from device memory while the
//! next one is copied. [`Decoder::range_dma`] copies a range's bytes as
//! they lie; [`Decoder::gather_dma_blocking`] first restages the requested
//! tensors on the host as small packed datasets (`crate::dma_pieces`).
//! Both launch the one decode kernel, through the one launch function.

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

/// Bytes of each of a [`DmaScratch`]'s two pieces when you have no reason to
/// pick another size: the size `ibp bench` measures the DMA paths with.
///
/// Q: why 8 MB?
/// A: large enough that a copy's start-up (microseconds) is small against
/// its transfer (about 150 µs at 55 GB/s), small enough that the first
/// decode starts early and two pieces stay a small part of device memory.
pub const DEFAULT_DMA_PIECE_BYTES: usize = 8 << 20;

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
        if offsets
            .windows(2)
            .skip(first as usize)
            .take(count as usize)
            .any(|w| w[1] - w[0] > cap)
        {
            return Err(Error::invalid(
                "a stored tensor is larger than the DMA scratch piece; make the scratch larger",
            ));
        }
        // The scratch buffers may still be read by an earlier call's decode.
        scratch.start.record(stream)?;
        wait(&scratch.copy_stream, &scratch.start)?;
        let mut a = first;
        let end = first + count;
        let mut k = 0usize;
        while a < end {
            // The largest piece from row a whose stored bytes fit.
            let base = offsets[a as usize];
            let mut b = a + 1;
            while b < end && offsets[b as usize + 1] - base <= cap {
                b += 1;
            }
            let len = (offsets[b as usize] - base) as usize;
            let buf = k % 2;
            // The piece's device buffer may still be read by the decode of
            // piece k - 2, or of an earlier call (an event never recorded
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

impl<'ds> Decoder<'ds> {
    /// Whether [`Decoder::range_auto`] takes the DMA path for `ds`.
    ///
    /// Q: where does the rule come from?
    /// A: from `ibp bench` on the H200 (docs/results/nvidia-h200.md). With
    /// the decoder of 2026-11-23 the DMA path won for tensors of 2 KB and
    /// more (Cora: 932 against 875 GB/s; 4 KB at 12.5–75% savings by 2–5%)
    /// and for tensors storing about 560 bytes or more on average (MiniLM
    /// bf16, 572 B stored: 66.5 against 61.9; f32: 59.4 against 55.6),
    /// and lost for smaller stored tensors (1 KB at 50% savings, 512 B
    /// stored: 96.9 against 100.2; 256 B at 90%: 96 against 220), where
    /// per-piece staging costs more than zero-copy reads. One measured
    /// point goes the other way: 4 KB at 90.6% savings, 473 against 497.
    pub fn prefers_dma(&self) -> bool {
        let Some(ds) = self.ds else {
            return false;
        };
        let pinned_packed = ds.host_offsets.is_some() && matches!(ds.payload, Payload::Pinned(_));
        let mean_stored = ds.stored_bytes / ds.rows.max(1);
        pinned_packed && (ds.row_bytes >= 2048 || mean_stored >= 560)
    }

    /// Enqueue a range decode by whichever path [`Decoder::prefers_dma`]
    /// picks: [`Decoder::range_dma`] when it prefers DMA and `scratch` is
    /// given, else zero-copy [`Decoder::range`]. Allocates nothing: create
    /// a scratch only where it will be used, e.g.
    ///
    /// ```text
    /// let mut scratch = dec.prefers_dma()
    ///     .then(|| DmaScratch::new(DEFAULT_DMA_PIECE_BYTES)).transpose()?;
    /// dec.range_auto(&gpu, first, count, &mut out, &status, scratch.as_mut(), &stream)?;
    /// ```
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
        match scratch {
            Some(scratch) if self.prefers_dma() => {
                self.range_dma(gpu, first, count, out, status, scratch, stream)
            }
            _ => self.range(gpu, first, count, out, status, stream),
        }
    }
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
    fn dataset(&self) -> Result<&GpuDataset> {
        self.ds.ok_or_else(|| {
            Error::invalid(
                "the DMA paths decode a dataset; this decoder was sized for a book alone",
            )
        })
    }
}

/// Buffers, a copy stream and events for the DMA paths
/// ([`Decoder::range_dma`], [`Decoder::gather_dma_blocking`]), allocated
/// once and reused by every call: two device pieces, two pinned staging
/// pieces (the gather's), of `piece_bytes` each.
pub struct DmaScratch {
    bufs: [DeviceBuffer<u8>; 2],
    staging: [PinnedBuffer<u8>; 2],
    piece_bytes: usize,
    copy_stream: Stream,
    start: Event,
    copied: [Event; 2],
    decoded: [Event; 2],
}

impl DmaScratch {
    /// Two device and two pinned pieces of `piece_bytes` each
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
            bufs: [alloc()?, alloc()?],
            staging: [
                PinnedBuffer::zeroed(piece_bytes)?,
                PinnedBuffer::zeroed(piece_bytes)?,
            ],
            piece_bytes,
            copy_stream: Stream::new(StreamFlags::NON_BLOCKING, None)
                .map_err(cuda_err("creating a copy stream"))?,
            start: event()?,
            copied: [event()?, event()?],
            decoded: [event()?, event()?],
        })
    }

    /// Bytes of each piece.
    pub fn piece_bytes(&self) -> usize {
        self.piece_bytes
    }
}
