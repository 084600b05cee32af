//! The measurements of `ibp bench`, its criterion benches and
//! `examples/gpu_decode.rs`: event-timed launches and copies, and decodes and
//! gathers of a dataset in each storage and residency.
//!
//! Every timing is the median of several CUDA-event-timed repetitions after a
//! warm-up, and every configuration is decoded once and compared with the
//! original bytes before it is timed.
//!
//! Q: why here and not in the library? A: what only measures needs nothing
//! but ibp's public GPU API; the library keeps, behind its feature
//! `bench-hooks` (`ibp::gpu::bench`), only the raw copies its driver layer
//! owns (`copy_to_device_async`, `copy_device_to_device_async`,
//! `copy_to_pinned_async`, `Event`) and the compressor's stage profile.

use ibp::codebook::Codebook;
use ibp::gpu::bench::{copy_device_to_device_async, copy_to_device_async, copy_to_pinned_async};
use ibp::gpu::cust::error::CudaError;
use ibp::gpu::cust::event::{Event as TimingEvent, EventFlags};
use ibp::gpu::cust::memory::DeviceBuffer;
use ibp::gpu::cust::stream::Stream;
use ibp::gpu::{
    DecodeOptions, DecodeStatus, Decoder, DmaScratch, Fitter, Gpu, GpuDataset, Mode, PinnedBuffer,
    RangeCalibration, Request, Residency, copy_to_host_blocking,
};
use ibp::layout::{Layout, LayoutOptions, compress_fixed, compress_packed};
use ibp::{Error, Result, Rows};

pub mod float;

/// A CUDA error as ibp's, naming what failed.
fn cuda_err(what: &'static str) -> impl Fn(CudaError) -> Error {
    move |e| Error::cuda(format!("{what}: {e}"))
}

/// Median of event-timed repetitions of `f`, in seconds per call.
pub fn time_median(
    stream: &Stream,
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    stream.synchronize().map_err(cuda_err("warm-up"))?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let a = TimingEvent::new(EventFlags::DEFAULT).map_err(cuda_err("event"))?;
        let b = TimingEvent::new(EventFlags::DEFAULT).map_err(cuda_err("event"))?;
        a.record(stream).map_err(cuda_err("event"))?;
        f()?;
        b.record(stream).map_err(cuda_err("event"))?;
        b.synchronize().map_err(cuda_err("timing"))?;
        times.push(b.elapsed_time_f32(&a).map_err(cuda_err("timing"))? as f64 / 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Median time of one DMA copy of `bytes` from device memory into pinned
/// host memory, in seconds (event-timed, as [`time_median`]): the floor of
/// anything that ends by copying that many bytes to the host.
pub fn time_dtoh_copy(stream: &Stream, bytes: usize) -> Result<f64> {
    let src = DeviceBuffer::<u8>::zeroed(bytes.max(1))
        .map_err(cuda_err("allocating the copy's source"))?;
    let mut dst = PinnedBuffer::<u8>::zeroed(bytes.max(1))?;
    time_median(stream, 2, 21, || {
        copy_to_pinned_async(&src, &mut dst, bytes, stream)
    })
}

/// How a measured dataset is stored: its layout and, for the fixed-stride
/// layout, whether the device also keeps a table of stored lengths
/// ([`GpuDataset::with_length_table`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchStorage {
    /// Packed or fixed-stride.
    pub layout: Layout,
    /// Fixed-stride only: a device length table (packed offsets give the
    /// lengths already).
    pub length_table: bool,
}

impl BenchStorage {
    /// Packed, offsets on the GPU.
    pub const PACKED: Self = BenchStorage {
        layout: Layout::Packed,
        length_table: false,
    };
    /// Fixed-stride, lengths from the participation bits.
    pub const FIXED: Self = BenchStorage {
        layout: Layout::FixedStride,
        length_table: false,
    };
    /// Fixed-stride with a device length table.
    pub const FIXED_LENGTHS: Self = BenchStorage {
        layout: Layout::FixedStride,
        length_table: true,
    };
}

/// One measured configuration.
#[derive(Clone, Debug)]
pub struct DecodeMeasurement {
    /// Decoded bytes per call.
    pub decoded_bytes: u64,
    /// Stored (compressed) bytes read per call.
    pub stored_bytes: u64,
    /// Seconds per call (median).
    pub seconds: f64,
}

impl DecodeMeasurement {
    /// Decoded bytes per second.
    pub fn decoded_rate(&self) -> f64 {
        self.decoded_bytes as f64 / self.seconds
    }

    /// Bytes moved per second: stored bytes read plus decoded bytes written.
    pub fn moved_rate(&self) -> f64 {
        (self.decoded_bytes + self.stored_bytes) as f64 / self.seconds
    }
}

/// Decode all rows of `data` (compressed with `cb` as `storage` says, placed per
/// `residency`) repeatedly; `ideal` times the copy-only baseline instead.
/// Checks the decoded bytes against `data` first.
#[allow(clippy::too_many_arguments)]
pub fn measure_decode(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    storage: BenchStorage,
    residency: Residency,
    ideal: bool,
    opts: &DecodeOptions,
) -> Result<DecodeMeasurement> {
    let rows = Rows::new(data, row_bytes)?;
    let ds = match (storage.layout, storage.length_table) {
        (Layout::Packed, _) => GpuDataset::upload_packed(
            gpu,
            cb,
            &compress_packed(cb, rows, &LayoutOptions::default())?.view(),
            residency,
        )?,
        (Layout::FixedStride, false) => GpuDataset::upload_fixed(
            gpu,
            cb,
            &compress_fixed(cb, rows, &LayoutOptions::default())?.view(),
            residency,
        )?,
        (Layout::FixedStride, true) => {
            let f = compress_fixed(cb, rows, &LayoutOptions::default())?;
            GpuDataset::upload_fixed(gpu, cb, &f.view(), residency)?
                .with_length_table(cb, &f.view())?
        }
    };
    measure_dataset(gpu, stream, &ds, data, ideal, opts)
}

/// [`measure_decode`] of a dataset already uploaded: every row of `ds`
/// decoded repeatedly (or, with `ideal`, the copy-only baseline), checked
/// against `data` (its rows, back to back) first.
pub fn measure_dataset(
    gpu: &Gpu,
    stream: &Stream,
    ds: &GpuDataset,
    data: &[u8],
    ideal: bool,
    opts: &DecodeOptions,
) -> Result<DecodeMeasurement> {
    let n = ds.rows();
    if n * ds.row_bytes() != data.len() as u64 {
        return Err(Error::invalid(
            "the expected bytes are not the dataset's rows",
        ));
    }
    let dec = Decoder::new(gpu, ds, opts)?;
    let mut status = DecodeStatus::new()?;
    let mut out =
        DeviceBuffer::<u8>::zeroed(data.len()).map_err(cuda_err("allocating the output"))?;
    // Correctness first (the warm-up round trip).
    dec.range(gpu, 0, n, &mut out, &status, stream)?;
    stream.synchronize().map_err(cuda_err("decoding"))?;
    status.check_blocking()?;
    if copy_to_host_blocking(&out)? != data {
        return Err(Error::corrupt(
            "benchmark decode differs from the original data",
        ));
    }
    let mode = if ideal { Mode::Ideal } else { Mode::Decode };
    let req = Request::range(0, n).with_mode(mode);
    let seconds = time_median(stream, 2, 9, || {
        dec.enqueue(gpu, &req, &mut out, &status, stream)
    })?;
    status.check_blocking()?;
    Ok(DecodeMeasurement {
        decoded_bytes: data.len() as u64,
        stored_bytes: ds.stored_bytes(),
        seconds,
    })
}

/// Device-to-device copy of `bytes`, seconds (median): the roofline for
/// device-resident decode.
pub fn measure_device_copy(stream: &Stream, bytes: usize) -> Result<f64> {
    let src = DeviceBuffer::<u8>::zeroed(bytes).map_err(cuda_err("allocating"))?;
    let mut dst = DeviceBuffer::<u8>::zeroed(bytes).map_err(cuda_err("allocating"))?;
    time_median(stream, 2, 9, || {
        // SAFETY: both buffers hold `bytes` bytes and stay alive until the
        // stream is synchronised inside time_median.
        let r = unsafe {
            copy_device_to_device_async(
                dst.as_device_ptr().as_raw(),
                src.as_device_ptr().as_raw(),
                bytes,
                stream,
            )
        };
        let _ = &mut dst;
        r
    })
}

/// Host-to-device DMA copy of `bytes` from pinned memory, seconds (median):
/// the PCIe ceiling of this machine.
pub fn measure_h2d_copy(stream: &Stream, bytes: usize) -> Result<f64> {
    let src = PinnedBuffer::<u8>::zeroed(bytes)?;
    let dst = DeviceBuffer::<u8>::zeroed(bytes).map_err(cuda_err("allocating"))?;
    time_median(stream, 2, 9, || {
        // SAFETY: both buffers hold `bytes` bytes and outlive the copy (the
        // stream is synchronised inside time_median).
        unsafe { copy_to_device_async(dst.as_device_ptr().as_raw(), &src[..bytes], stream) }
    })
}

/// Host-to-device DMA copies of `bytes` of pinned memory in copies of
/// `piece` bytes, back to back on one stream, seconds (median): what the
/// DMA range path's copies cost alone, its ceiling when the decode of each
/// piece hides behind the next copy.
pub fn measure_h2d_pieces(stream: &Stream, bytes: usize, piece: usize) -> Result<f64> {
    let bytes = bytes.max(1);
    let piece = piece.clamp(1, bytes);
    let src = PinnedBuffer::<u8>::zeroed(bytes)?;
    let dst = DeviceBuffer::<u8>::zeroed(bytes).map_err(cuda_err("allocating"))?;
    time_median(stream, 2, 9, || {
        let mut at = 0;
        while at < bytes {
            let n = piece.min(bytes - at);
            // SAFETY: both buffers hold `bytes` bytes, `at + n <= bytes`,
            // and both outlive the copies (the stream is synchronised
            // inside time_median).
            unsafe {
                copy_to_device_async(
                    dst.as_device_ptr().as_raw() + at as u64,
                    &src[at..at + n],
                    stream,
                )?
            };
            at += n;
        }
        Ok(())
    })
}

/// Zero-copy read of `bytes` of pinned host memory by the bit-counting
/// kernel (rows of 1536 bytes), seconds (median): the kernel-side PCIe read
/// ceiling.
pub fn measure_zero_copy_read(gpu: &Gpu, stream: &Stream, bytes: usize) -> Result<f64> {
    let l = 1536;
    let src = PinnedBuffer::<u8>::zeroed(bytes / l * l)?;
    let mut counts = DeviceBuffer::<u64>::zeroed(8 * l).map_err(cuda_err("allocating"))?;
    let fitter = Fitter::new(gpu);
    time_median(stream, 2, 9, || {
        fitter.count_bits(&src, l, &mut counts, stream)
    })
}

/// Decode all rows of a packed pinned dataset through the DMA path
/// ([`Decoder::range_dma`], pieces of `piece` bytes), checked first.
pub fn measure_decode_dma(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    piece: usize,
) -> Result<DecodeMeasurement> {
    let rows = Rows::new(data, row_bytes)?;
    let ds = GpuDataset::upload_packed(
        gpu,
        cb,
        &compress_packed(cb, rows, &LayoutOptions::default())?.view(),
        Residency::Pinned,
    )?;
    let n = rows.rows() as u64;
    let dec = Decoder::new(gpu, &ds, &DecodeOptions::default())?;
    let mut status = DecodeStatus::new()?;
    let mut scratch = DmaScratch::new(piece)?;
    let mut out =
        DeviceBuffer::<u8>::zeroed(data.len()).map_err(cuda_err("allocating the output"))?;
    dec.range_dma(gpu, 0, n, &mut out, &status, &mut scratch, stream)?;
    stream.synchronize().map_err(cuda_err("decoding"))?;
    status.check_blocking()?;
    if copy_to_host_blocking(&out)? != data {
        return Err(Error::corrupt(
            "benchmark DMA-path decode differs from the original data",
        ));
    }
    let seconds = time_median(stream, 2, 9, || {
        dec.range_dma(gpu, 0, n, &mut out, &status, &mut scratch, stream)
    })?;
    status.check_blocking()?;
    Ok(DecodeMeasurement {
        decoded_bytes: data.len() as u64,
        stored_bytes: ds.stored_bytes(),
        seconds,
    })
}

/// What [`Decoder::range_auto`] did on a table: the path the old rule
/// would have taken, the calibration of its first call, and its rate.
#[derive(Clone, Debug)]
pub struct RangeAutoMeasurement {
    /// [`Decoder::prefers_dma`] before any calibration: the prior rule.
    pub prior_dma: bool,
    /// What the first call measured and chose.
    pub calibration: RangeCalibration,
    /// `range_auto` of every row, timed after that first call.
    pub auto: DecodeMeasurement,
}

/// [`Decoder::range_auto`] over every row of a packed pinned dataset of
/// `data` with a scratch of `piece`-byte pieces: its first call (which
/// calibrates, and is checked against `data`), then its rate by the path
/// it kept.
pub fn measure_range_auto(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    piece: usize,
    opts: &DecodeOptions,
) -> Result<RangeAutoMeasurement> {
    let rows = Rows::new(data, row_bytes)?;
    let ds = GpuDataset::upload_packed(
        gpu,
        cb,
        &compress_packed(cb, rows, &LayoutOptions::default())?.view(),
        Residency::Pinned,
    )?;
    let n = rows.rows() as u64;
    let dec = Decoder::new(gpu, &ds, opts)?;
    let prior_dma = dec.prefers_dma();
    let mut status = DecodeStatus::new()?;
    let mut scratch = DmaScratch::new(piece)?;
    let mut out =
        DeviceBuffer::<u8>::zeroed(data.len()).map_err(cuda_err("allocating the output"))?;
    dec.range_auto(gpu, 0, n, &mut out, &status, Some(&mut scratch), stream)?;
    stream.synchronize().map_err(cuda_err("decoding"))?;
    status.check_blocking()?;
    if copy_to_host_blocking(&out)? != data {
        return Err(Error::corrupt(
            "benchmark range_auto decode differs from the original data",
        ));
    }
    let calibration = dec
        .range_calibration()
        .ok_or_else(|| Error::invalid("range_auto did not calibrate a pinned packed dataset"))?;
    let seconds = time_median(stream, 2, 9, || {
        dec.range_auto(gpu, 0, n, &mut out, &status, Some(&mut scratch), stream)
    })?;
    status.check_blocking()?;
    Ok(RangeAutoMeasurement {
        prior_dma,
        calibration,
        auto: DecodeMeasurement {
            decoded_bytes: data.len() as u64,
            stored_bytes: ds.stored_bytes(),
            seconds,
        },
    })
}

/// `sets` sets of `batch` uniform random row ids below `n`: the ids every
/// gather of `ibp bench` decodes (the same for a given `n` and `batch`).
pub fn gather_ids(n: u64, batch: usize, sets: usize) -> Vec<Vec<u64>> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ batch as u64;
    (0..sets)
        .map(|_| {
            (0..batch)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s % n
                })
                .collect()
        })
        .collect()
}

/// Random gathers of compressed rows: `batch` uniform random row ids of a
/// packed dataset placed per `residency`, decoded into a device buffer.
/// Eight index sets rotate (so device-resident gathers are not served from
/// L2 alone); every set's output is checked against `data` first.
#[allow(clippy::too_many_arguments)]
pub fn measure_gather(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    residency: Residency,
    batch: usize,
    opts: &DecodeOptions,
) -> Result<DecodeMeasurement> {
    measure_gather_by(
        gpu, stream, data, row_bytes, cb, residency, batch, opts, None,
    )
}

/// [`measure_gather`] through the DMA gather
/// ([`Decoder::gather_dma_blocking`], pinned dataset, pieces of `piece`
/// bytes, the row ids in host memory), on the same index sets.
#[allow(clippy::too_many_arguments)]
pub fn measure_gather_dma(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    batch: usize,
    piece: usize,
    opts: &DecodeOptions,
) -> Result<DecodeMeasurement> {
    let pinned = Residency::Pinned;
    measure_gather_by(
        gpu,
        stream,
        data,
        row_bytes,
        cb,
        pinned,
        batch,
        opts,
        Some(piece),
    )
}

#[allow(clippy::too_many_arguments)]
fn measure_gather_by(
    gpu: &Gpu,
    stream: &Stream,
    data: &[u8],
    row_bytes: usize,
    cb: &Codebook,
    residency: Residency,
    batch: usize,
    opts: &DecodeOptions,
    dma_piece: Option<usize>,
) -> Result<DecodeMeasurement> {
    let rows = Rows::new(data, row_bytes)?;
    let packed = compress_packed(cb, rows, &LayoutOptions::default())?;
    let ds = GpuDataset::upload_packed(gpu, cb, &packed.view(), residency)?;
    let n = rows.rows() as u64;
    let dec = Decoder::new(gpu, &ds, opts)?;
    let mut status = DecodeStatus::new()?;
    let mut scratch = dma_piece.map(DmaScratch::new).transpose()?;
    let mut out =
        DeviceBuffer::<u8>::zeroed(batch * row_bytes).map_err(cuda_err("allocating the output"))?;
    let mut gather = |ids: &(Vec<u64>, DeviceBuffer<u64>),
                      out: &mut DeviceBuffer<u8>,
                      status: &DecodeStatus| match &mut scratch {
        Some(scratch) => dec.gather_dma_blocking(gpu, &ids.0, out, status, scratch, stream),
        None => dec.gather(gpu, &ids.1, out, status, stream),
    };
    let mut sets = Vec::new();
    let mut stored = 0u64;
    for ids in gather_ids(n, batch, 8) {
        stored += ids
            .iter()
            .map(|&t| packed.offsets[t as usize + 1] - packed.offsets[t as usize])
            .sum::<u64>();
        let dev = DeviceBuffer::from_slice(&ids).map_err(cuda_err("uploading ids"))?;
        let set = (ids, dev);
        gather(&set, &mut out, &status)?;
        stream.synchronize().map_err(cuda_err("gathering"))?;
        status.check_blocking()?;
        let got = copy_to_host_blocking(&out)?;
        for (i, &t) in set.0.iter().enumerate() {
            let t = t as usize;
            if got[i * row_bytes..(i + 1) * row_bytes] != data[t * row_bytes..(t + 1) * row_bytes] {
                return Err(Error::corrupt(
                    "benchmark gather differs from the original data",
                ));
            }
        }
        sets.push(set);
    }
    let mut k = 0;
    let seconds = time_median(stream, 8, 24, || {
        k = (k + 1) % sets.len();
        gather(&sets[k], &mut out, &status)
    })?;
    status.check_blocking()?;
    Ok(DecodeMeasurement {
        decoded_bytes: (batch * row_bytes) as u64,
        stored_bytes: stored / sets.len() as u64,
        seconds,
    })
}
