//! The DMA range path: a packed range's compressed bytes copied by the copy
//! engine into device scratch, piece by piece, each piece decoded from
//! device memory while the next one is copied.

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::{Stream, StreamFlags};

use super::decode::{DecodeStatus, Decoder, LaunchVia, Payload, Target};
use super::driver::{Event, wait};
use super::{Gpu, cuda_err};
use crate::error::{Error, Result};

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
    /// memory. For gathers of scattered tensors zero-copy wins (no staging,
    /// no per-piece latency); `ibp bench` measures both.
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
        let ds = self.ds;
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
            if k >= 2 {
                wait(&scratch.copy_stream, &scratch.decoded[buf])?;
            }
            if len > 0 {
                // SAFETY: the source lies inside the pinned payload (offsets
                // were validated at upload) and the destination holds
                // piece_bytes >= len bytes; both outlive the copy (the
                // scratch is borrowed for the call, and later calls wait on
                // its events).
                let r = unsafe {
                    cust::sys::cuMemcpyHtoDAsync_v2(
                        scratch.bufs[buf].as_device_ptr().as_raw(),
                        payload.as_ptr().add(base as usize) as *const std::ffi::c_void,
                        len,
                        scratch.copy_stream.as_inner(),
                    )
                };
                if r != cust::sys::CUresult::CUDA_SUCCESS {
                    return Err(Error::cuda_code(
                        format!("DMA copy of the compressed range: {r:?}"),
                        r as u32,
                    ));
                }
            }
            scratch.copied[buf].record(&scratch.copy_stream)?;
            wait(stream, &scratch.copied[buf])?;
            let via = LaunchVia {
                src: Some(scratch.bufs[buf].as_device_ptr().as_raw()),
                offset_base: base,
                out_skip_rows: a - first,
                load_store: Some(false),
                out_stride: None,
            };
            gpu.launch_decode(
                self,
                self.ds,
                Target::Range(a, b - a),
                out,
                status,
                false,
                via,
                stream,
            )?;
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
        let ds = self.ds;
        let pinned_packed = ds.host_offsets.is_some() && matches!(ds.payload, Payload::Pinned(_));
        let mean_stored = ds.stored_bytes / ds.rows.max(1);
        pinned_packed && (ds.row_bytes >= 2048 || mean_stored >= 560)
    }

    /// Enqueue a range decode by whichever path [`Decoder::prefers_dma`]
    /// picks: [`Decoder::range_dma`] with `scratch`, or zero-copy
    /// [`Decoder::range`].
    #[allow(clippy::too_many_arguments)]
    pub fn range_auto(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        scratch: &mut DmaScratch,
        stream: &Stream,
    ) -> Result<()> {
        if self.prefers_dma() {
            self.range_dma(gpu, first, count, out, status, scratch, stream)
        } else {
            self.range(gpu, first, count, out, status, stream)
        }
    }
}

/// Device buffers, a copy stream and events for [`Decoder::range_dma`],
/// allocated once and reused by every call on one stream.
pub struct DmaScratch {
    bufs: [DeviceBuffer<u8>; 2],
    piece_bytes: usize,
    copy_stream: Stream,
    start: Event,
    copied: [Event; 2],
    decoded: [Event; 2],
}

impl DmaScratch {
    /// Two pieces of `piece_bytes` each (a few MB: large enough to
    /// amortise a DMA's start-up, small enough that the first decode starts
    /// early).
    pub fn new(piece_bytes: usize) -> Result<Self> {
        let piece_bytes = piece_bytes.max(1);
        let alloc =
            || DeviceBuffer::<u8>::zeroed(piece_bytes).map_err(cuda_err("allocating DMA scratch"));
        let event = Event::new;
        Ok(Self {
            bufs: [alloc()?, alloc()?],
            piece_bytes,
            copy_stream: Stream::new(StreamFlags::NON_BLOCKING, None)
                .map_err(cuda_err("creating a copy stream"))?,
            start: event()?,
            copied: [event()?, event()?],
            decoded: [event()?, event()?],
        })
    }
}
